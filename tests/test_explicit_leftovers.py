"""Explicit-sharding and placement leftovers found running JAX 0.10.2's docs unchanged, each
compared with JAX 0.10.2 in the same test (4 CPU devices from tests/conftest.py): `scan`
over xs split on their scanned axis, and carry types that differ only in their sharding;
`use_abstract_mesh` inside jit; the order of the seed's reshard in grad's jaxpr;
`device_put` onto other devices inside jit; commitment of eager results."""
import numpy as np
import pytest

import jax
import jax.numpy as jjnp
import jax.sharding as jsh

import stagecraft as sc

from _explicit_sharding_util import Lib, both, check_same, meshes  # noqa: F401

pytestmark = pytest.mark.skipif(len(sc.devices()) < 4, reason="needs 4 devices")


def _outcome(f):
  """`("ok", result)` or `(exception type name, message)`."""
  try:
    return "ok", f()
  except Exception as e:   # noqa: BLE001 - compared as text
    return type(e).__name__, str(e)


def _same_errors(meshes, prog, spec=("x", None), shape=(8, 4)):
  r_sc, r_jax = both(meshes, lambda L, m, x: _outcome(lambda: prog(L, m, x)), spec, shape)
  assert r_sc[0] != "ok", r_sc
  assert r_sc == r_jax
  return r_sc


# ---------------------------------------------------------------------------
# 1. scan under an Explicit mesh


def _scan_sum(L, m, x):
  return L.sc.jit(lambda x: L.lax.scan(lambda c, r: (c + r, r * 2), L.np.zeros(4), x)[0])(x)


@pytest.mark.parametrize("spec", [("x", "y"), ("x", None)])
def test_scan_xs_split_on_scanned_axis(meshes, spec):
  kind, msg = _same_errors(meshes, _scan_sum, spec)
  assert kind == "ValueError" and "0th dimension of all xs should be replicated" in msg


def test_scan_xs_split_eagerly_and_lax_map(meshes):
  _same_errors(meshes, lambda L, m, x: L.lax.scan(lambda c, r: (c, r), 0., x), ("x", "y"))
  _same_errors(meshes, lambda L, m, x: L.sc.jit(lambda x: L.lax.map(lambda r: r, x))(x),
               ("x", "y"))


def test_scan_carry_sharding_mismatch(meshes):
  # the body's carry output is split over y where the initial carry is not (JAX's typematch
  # compares the shardings in the types; the message names no reason)
  kind, msg = _same_errors(meshes, _scan_sum, (None, "y"))
  assert kind == "TypeError" and "float32[4@y]" in msg and ", so" not in msg


def test_scan_over_unsplit_axis(meshes):
  body = lambda c, r: (c * r, r * 2)   # noqa: E731

  def prog(L, m, x):
    init = L.sc.device_put(L.np.ones(4), L.P("y"))
    c, ys = L.sc.jit(lambda i, x: L.lax.scan(body, i, x))(init, x)
    eager = L.lax.scan(body, init, x)[1]
    g = L.sc.jit(L.sc.grad(lambda i, x: L.lax.scan(body, i, x)[0].sum(), argnums=(0, 1)))(
        init, x)
    jaxpr = str(L.sc.make_jaxpr(lambda i, x: L.lax.scan(body, i, x))(init, x))
    return c, ys, eager, *g, jaxpr
  r_sc, r_jax = both(meshes, prog, (None, "y"))
  for a, b in zip(r_sc[:-1], r_jax[:-1]):
    check_same(a, b, rtol=1e-6)
  assert str(sc.typeof(r_sc[1])) == "float32[8,4@y]"
  assert r_sc[-1] == r_jax[-1]


# ---------------------------------------------------------------------------
# 3. grad's seed under an Explicit mesh: resharded to the output's type, then broadcast


def _grad_programs(L):
  return [
      lambda x: (x * 2).sum(),
      lambda x: (x * 2).sum(0).sum(),
      lambda x: L.np.sin(x).sum(),
  ]


def test_grad_seed_jaxpr_under_explicit_mesh(meshes):
  def prog(L, m, x):
    outs = []
    for f in _grad_programs(L):
      outs.append(str(L.sc.make_jaxpr(L.sc.grad(f))(x)))
      outs.append(str(L.sc.make_jaxpr(L.sc.grad(f))(L.np.ones((8, 4)))))
      outs.append(L.sc.jit(L.sc.grad(f))(x))
      outs.append(L.sc.grad(f)(x))
    outs.append(str(L.sc.make_jaxpr(lambda x: L.rs(x, L.P(None, "x")))(x)))
    return outs
  r_sc, r_jax = both(meshes, prog)
  assert "reshard 1.0:f32[]" in r_sc[0]
  for a, b in zip(r_sc, r_jax):
    if isinstance(a, str):
      assert a == b
    else:
      check_same(a, b, rtol=1e-6)


def test_grad_seed_without_mesh_in_context(meshes):
  # the seed is typed over the mesh of the differentiated input (no set_mesh)
  mesh, jmesh = meshes
  v = np.arange(32.0, dtype=np.float32).reshape(8, 4)
  x = sc.device_put(v, sc.sharding.NamedSharding(mesh, sc.sharding.P("x", None)))
  jx = jax.device_put(v, jsh.NamedSharding(jmesh, jsh.PartitionSpec("x", None)))
  f = lambda x: (x * 2).sum()   # noqa: E731
  assert str(sc.make_jaxpr(sc.grad(f))(x)) == str(jax.make_jaxpr(jax.grad(f))(jx))


# ---------------------------------------------------------------------------
# 4. device_put inside jit onto other devices


def _two_meshes(L):
  full = L.sc.make_mesh((4,), ("x",))
  return (L.sc.make_mesh((2,), ("x",), devices=full.devices[:2]),
          L.sc.make_mesh((2,), ("x",), devices=full.devices[2:]))


def _put_inside_jit(L, dst, x):
  # one line for both libraries: JAX's message names the place of the device_put
  return L.sc.jit(lambda x: L.sc.device_put(x, dst))(x)


def _placement_outcomes(L):
  mesh_a, mesh_b = _two_meshes(L)
  xa = L.sc.device_put(np.arange(8.0, dtype=np.float32), L.NS(mesh_a, L.P("x")))
  on_b = L.NS(mesh_b, L.P("x"))
  # an argument committed to a device (the default one too) meets the device_put's devices
  out = [_outcome(lambda: _put_inside_jit(L, on_b, xa))] + [
      _outcome(lambda: _put_inside_jit(L, L.NS(mesh_b, L.P()),
                                       L.sc.device_put(1.0, L.sc.devices()[d])))
      for d in (1, 0)]
  for f in (lambda: _put_inside_jit(L, on_b, np.arange(8.0, dtype=np.float32)),
            lambda: _put_inside_jit(L, L.NS(mesh_a, L.P()), xa),
            lambda: _put_inside_jit(L, L.sc.devices()[3], xa),
            lambda: _put_inside_jit(L, L.sc.devices()[3], np.arange(3.0))):
    r = f()
    out.append((str(r.sharding), np.asarray(r).tolist()))
  return out


def test_device_put_inside_jit_onto_other_devices():
  ours, theirs = _placement_outcomes(Lib(True)), _placement_outcomes(Lib(False))
  for (k1, m1), (k2, m2) in zip(ours[:3], theirs[:3]):
    assert k1 == k2 == "ValueError"
    assert m1 == m2
  assert "device_put inside jit with device ids [2, 3] on platform CPU at " in ours[0][1]
  assert ours[3:] == theirs[3:]


def _constraint_inside_jit(L):
  auto = (L.sc.sharding.AxisType.Auto,)
  full = L.sc.make_mesh((4,), ("x",), auto)
  mesh_a = L.sc.make_mesh((2,), ("x",), auto, devices=full.devices[:2])
  mesh_b = L.sc.make_mesh((2,), ("x",), auto, devices=full.devices[2:])
  xa = L.sc.device_put(np.arange(4.0, dtype=np.float32), L.NS(mesh_a, L.P("x")))
  on_b = L.NS(mesh_b, L.P("x"))
  return _outcome(lambda: L.sc.jit(lambda x: L.lax.with_sharding_constraint(x, on_b))(xa))


def test_sharding_constraint_on_other_devices_names_its_place():
  (k1, m1), (k2, m2) = _constraint_inside_jit(Lib(True)), _constraint_inside_jit(Lib(False))
  assert (k1, k2) == ("ValueError", "ValueError")
  assert m1 == m2 and "sharding_constraint inside jit with device ids [2, 3]" in m1


# ---------------------------------------------------------------------------
# 5. Commitment: results of Arrays committed to the default device are committed


def _commitment_outcomes(L):
  np_ = L.np
  d0, d1 = L.sc.devices()[0], L.sc.devices()[1]
  a = L.sc.device_put(np_.arange(3.0), d0)
  b = L.sc.device_put(np_.arange(3.0), d1)
  s0 = L.sc.device_put(2.0, d0)
  u = np_.arange(3.0)
  mesh = L.sc.make_mesh((2,), ("x",), devices=L.sc.devices()[:2])
  xa = L.sc.device_put(np.arange(4.0, dtype=np.float32), L.NS(mesh, L.P("x")))
  cases = {
      "a": lambda: a, "a*2": lambda: a * 2, "sin": lambda: np_.sin(a),
      "sum": lambda: a.sum(), "index": lambda: a[0], "reshape": lambda: a.reshape(3, 1),
      "astype": lambda: a.astype(np_.int32), "jit": lambda: L.sc.jit(lambda x: x * 2)(a),
      "a*2+b": lambda: a * 2 + b, "jit(a)+b": lambda: L.sc.jit(lambda x: x * 2)(a) + b,
      "s0": lambda: s0, "s0+b": lambda: s0 + b, "b+s0": lambda: b + s0,
      "jit(s0,b)": lambda: L.sc.jit(lambda x, y: x + y)(s0, b),
      "u+a": lambda: u + a, "a+u": lambda: a + u, "u+b": lambda: u + b,
      "u": lambda: u * 2, "xa+s0": lambda: xa + s0,
  }
  out = {}
  for k, f in cases.items():
    kind, r = _outcome(f)
    out[k] = (kind, r) if kind != "ok" else (kind, r.committed, str(r.sharding))
  return out


def test_results_of_default_committed_arrays_are_committed():
  ours, theirs = _commitment_outcomes(Lib(True)), _commitment_outcomes(Lib(False))
  assert ours.keys() == theirs.keys()
  for k in ours:
    o, t = ours[k], theirs[k]
    assert o == t, k
  assert ours["a*2"][1] is True and ours["u"][1] is False
  assert "device ids [0]" in ours["s0+b"][1]


# ---------------------------------------------------------------------------
# 2. use_abstract_mesh with another mesh of the same devices inside jit


def test_use_abstract_mesh_of_another_shape_inside_jit(meshes):
  def prog(L, m, x):
    seen = []

    def f(x):
      am = L.sc.sharding.AbstractMesh((4,), ("A",), (L.sc.sharding.AxisType.Explicit,))
      with L.sc.sharding.use_abstract_mesh(am):
        y = L.rs(x, L.P("A", None))
        seen.append(str(L.typeof(y)))
        return y * 2
    z = L.sc.jit(f)(x)
    return z, seen, repr(z.sharding)
  (z1, seen1, s1), (z2, seen2, s2) = both(meshes, prog, ("x", "y"))
  check_same(z1, z2)
  assert seen1 == seen2 == ["float32[8@A,4]"]
  assert s1 == s2
  assert [d.id for d in z1.sharding.mesh.devices.flat] == [
      d.id for d in z2.sharding.mesh.devices.flat]


# ---------------------------------------------------------------------------
# 2. auto_axes / explicit_axes called outside jit run the function eagerly, as JAX's


def _eager_axes_outcomes(L):
  seen = []
  mesh = L.sc.make_mesh((2, 2), ("x", "y"))   # Explicit axes

  def look(x):
    seen.append((type(x).__name__ in ("Array", "ArrayImpl"), repr(x.sharding),
                 str(L.typeof(x)), str(L.sc.sharding.get_abstract_mesh())))

  @L.sc.sharding.auto_axes
  def f(x):
    look(x)
    y = x * 2
    look(y)
    return y

  @L.sc.sharding.auto_axes
  def total(x):
    return x.sum()

  with L.sc.set_mesh(mesh):
    x = L.sc.device_put(np.arange(8.0, dtype=np.float32), L.P("x"))
    outs = [f(x, out_sharding=L.P("x")), total(x, out_sharding=L.P())]
  auto = L.sc.make_mesh((2, 2), ("x", "y"), (L.sc.sharding.AxisType.Auto,) * 2)

  @L.sc.sharding.explicit_axes
  def g(y):
    look(y)
    return y * 2

  with L.sc.set_mesh(auto):
    a = L.sc.device_put(np.arange(16.0, dtype=np.float32).reshape(4, 4), L.P("x", None))
    outs.append(g(a, in_sharding=L.P("x", "y")))
  return seen, [(repr(o.sharding), str(L.typeof(o)), np.asarray(o).tolist()) for o in outs]


def test_auto_and_explicit_axes_outside_jit():
  ours, theirs = _eager_axes_outcomes(Lib(True)), _eager_axes_outcomes(Lib(False))
  assert ours == theirs
  assert ours[0][0][0]   # the function saw an Array, not a tracer
