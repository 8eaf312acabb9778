"""JAX 0.10.2's shard_map API on stagecraft: `shard_map(f=None, /, *, out_specs, in_specs=Infer,
mesh=None, axis_names=frozenset(), check_vma=True)` as a decorator, with the mesh from
`set_mesh`, inferred in_specs, static (None) in_specs, manual over a subset of axes, nested;
check_vma's typing (accepts what JAX accepts, rejects what JAX rejects, with JAX's
messages); `lax.pcast`/`pvary`; all_gather and psum_scatter tiled. JAX (same process, same 4
CPU devices) is the oracle."""
import re
from functools import partial

import numpy as np
import pytest

import jax
import jax.sharding as jsh
import jax.numpy as jnp_ref

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import lax
from stagecraft.lax import parallel
from stagecraft.sharding import AxisType, P, make_mesh, set_mesh
from stagecraft.shard_map import shard_map

pytestmark = pytest.mark.skipif(len(sc.devices()) < 4, reason="needs 4 devices")

JP = jsh.PartitionSpec
JA = jsh.AxisType


class _Ours:
  """The names the test programs use, from stagecraft."""
  lax = lax
  np = jnp
  pcast = staticmethod(parallel.pcast)


class _Theirs:
  lax = jax.lax
  np = jnp_ref
  pcast = staticmethod(jax.lax.pcast)


def _jspec(tree):
  if tree is None or isinstance(tree, P):
    return None if tree is None else JP(*tree)
  if isinstance(tree, dict):
    return {k: _jspec(v) for k, v in tree.items()}
  return type(tree)(_jspec(t) for t in tree)


@pytest.fixture(scope="module")
def meshes():
  """A 2x2 mesh of Auto axes, ours and JAX's."""
  return (make_mesh((2, 2), ("x", "y"), (AxisType.Auto,) * 2),
          jax.make_mesh((2, 2), ("x", "y"), (JA.Auto,) * 2))


def _x(*shape, seed=0):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _run_both(make, meshes, in_specs, out_specs, *args, jit=False, **kw):
  """`make(ns)` under our shard_map and JAX's (mesh from set_mesh); both results or both
  exceptions."""
  ours, theirs = meshes
  res = []
  for ns, mesh, setter, smap, spec in ((_Ours, ours, set_mesh, shard_map, lambda s: s),
                                       (_Theirs, theirs, jax.set_mesh, jax.shard_map, _jspec)):
    with setter(mesh):
      f = smap(make(ns), in_specs=spec(in_specs), out_specs=spec(out_specs), **kw)
      if jit:
        f = (sc.jit if ns is _Ours else jax.jit)(f)
      try:
        res.append(f(*args))
      except Exception as e:   # noqa: BLE001  (compared below)
        res.append(e)
  return res


def _norm(msg: str) -> str:
  # JAX names a wrapper of the user's function ('_rem_singleton') in the vma message.
  return re.sub(r"the function '[^']*'", "the function 'F'", msg)


def _close(a, b, tol=1e-5):
  for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    assert np.shape(u) == np.shape(v)
    np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=tol, atol=tol)


# ---------------------------------------------------------------------------
# The new forms


def test_decorator_forms_and_mesh_from_context(meshes):
  ours, theirs = meshes
  x = _x(4, 4)

  @shard_map(in_specs=P("x", "y"), out_specs=P("x"))
  def f(a):
    return lax.psum(a * 2, "y")

  @partial(jax.shard_map, in_specs=JP("x", "y"), out_specs=JP("x"))
  def g(a):
    return jax.lax.psum(a * 2, "y")

  @partial(shard_map, mesh=ours, in_specs=P("x"), out_specs=P("x"))
  def h(a):
    return a + lax.axis_index("x").astype(np.float32)

  with pytest.raises(ValueError) as e:
    f(x)   # no mesh in context yet
  with pytest.raises(ValueError) as je:
    g(x)
  assert str(e.value) == str(je.value)
  with set_mesh(ours), jax.set_mesh(theirs):
    _close(f(x), g(x))
    _close(sc.jit(f)(x), g(x))
  # The mesh taken at the first call is kept (as JAX does).
  np.testing.assert_allclose(np.asarray(f(x)), 2 * (x.reshape(4, 2, 2).sum(1)), rtol=1e-5)
  np.testing.assert_allclose(np.asarray(h(x)), x + np.repeat([0., 1.], 2)[:, None])
  assert f.__name__ == "f" and h.__wrapped__ is not None


def test_static_in_specs_and_trees(meshes):
  x = np.arange(8, dtype=np.float32)
  a, b = _run_both(lambda ns: lambda v: v * 2, meshes, None, P("x"), x)
  _close(a, b)   # in_specs=None: every argument static, each device sees it whole
  a, b = _run_both(lambda ns: lambda v, n: v * n, meshes, (P("x"), None), P("x"), x, 3)
  _close(a, b)
  a, b = _run_both(lambda ns: lambda d: {"s": d["u"] + d["w"], "t": (d["u"],)}, meshes,
                   ({"u": P("x"), "w": P()},), {"s": P("x"), "t": (P("x"),)},
                   {"u": _x(4, 2), "w": _x(2, 2, seed=1)})
  _close(a, b)


def test_in_specs_inferred_from_explicit_arguments():
  ours = make_mesh((2, 2), ("x", "y"))
  theirs = jax.make_mesh((2, 2), ("x", "y"))
  x = _x(8, 4)
  with set_mesh(ours), jax.set_mesh(theirs):
    y, jy = sc.device_put(x, P("x")), jax.device_put(x, JP("x"))
    f = shard_map(lambda a: a * 3 + lax.axis_index("x").astype(np.float32), out_specs=P("x"))
    g = jax.shard_map(lambda a: a * 3 + jax.lax.axis_index("x").astype(np.float32),
                      out_specs=JP("x"))
    _close(f(y), g(jy))
    _close(f(x[:4]), g(x[:4]))       # a NumPy array: replicated
    # Manual over "x" only: the spec is restricted to the manual axes.
    z, jz = sc.device_put(x, P("x", "y")), jax.device_put(x, JP("x", "y"))
    f2 = shard_map(lambda a: a * 2, out_specs=P("x"), axis_names={"x"})
    g2 = jax.shard_map(lambda a: a * 2, out_specs=JP("x"), axis_names={"x"})
    _close(f2(z), g2(jz))


def test_infer_needs_explicit_axes(meshes):
  ours, theirs = meshes
  with set_mesh(ours), jax.set_mesh(theirs):
    with pytest.raises(TypeError) as e:
      shard_map(lambda v: v, out_specs=P("x"), axis_names={"x"})(np.ones(4, np.float32))
    with pytest.raises(TypeError) as je:
      jax.shard_map(lambda v: v, out_specs=JP("x"), axis_names={"x"})(np.ones(4, np.float32))
  assert str(e.value) == str(je.value)


def test_axis_names_subset_and_nested(meshes):
  x = _x(4, 4)
  make = lambda ns: lambda v: ns.lax.psum(v, "x") * 2
  a, b = _run_both(make, meshes, P("x"), P(), x, axis_names={"x"})
  _close(a, b)

  def outer(ns, smap):
    def f(v):
      inner = smap(lambda w: ns.lax.psum(w, "y") + ns.lax.axis_index("x") * 100.0,
                   in_specs=P(None, "y") if smap is shard_map else JP(None, "y"),
                   out_specs=P() if smap is shard_map else JP(), axis_names={"y"})
      return inner(v) * 2
    return f
  ours, theirs = meshes
  with set_mesh(ours), jax.set_mesh(theirs):
    f = shard_map(outer(_Ours, shard_map), in_specs=P("x"), out_specs=P("x"),
                  axis_names={"x"})
    g = jax.shard_map(outer(_Theirs, jax.shard_map), in_specs=JP("x"), out_specs=JP("x"),
                      axis_names={"x"})
    _close(f(x), g(x))
    _close(sc.jit(f)(x), g(x))
    # Gradients through the nested maps.
    loss = lambda fn, np_: lambda v: (fn(v) ** 2).sum()
    _close(sc.grad(loss(f, jnp))(x), jax.grad(loss(g, jnp_ref))(x), tol=1e-4)


# ---------------------------------------------------------------------------
# check_vma: what JAX accepts


ACCEPT = {
    "psum_then_replicated": (lambda ns: lambda v: ns.lax.psum(v, "x"), P("x"), P(None, "y")),
    "pmean_both_axes": (lambda ns: lambda v: ns.lax.pmean(v, ("x", "y")), P("x", "y"), P()),
    "psum_of_invariant": (lambda ns: lambda v: ns.lax.psum(v, "x"), P(), P()),
    "pmax_of_invariant": (lambda ns: lambda v: ns.lax.pmax(v, "y"), P(), P()),
    "pcast_then_split": (lambda ns: lambda v: ns.pcast(v, "x", to="varying") * 2, P(), P("x")),
    "pcast_tuple": (lambda ns: lambda v: ns.pcast(v, ("x", "y"), to="varying"), P(),
                    P("x", "y")),
    "mixed_operands": (lambda ns: lambda v, w: v + w, (P("x"), P()), P("x")),
    "scan_varying_carry": (lambda ns: lambda v: ns.lax.scan(
        lambda c, _: (c * 2 + v, None), v, None, length=3)[0], P("x", "y"), P("x", "y")),
    "cond_varying_predicate": (lambda ns: lambda v: ns.lax.cond(
        v.sum() > 0, lambda s: s, lambda s: -s, ns.lax.psum(v, "x")), P("x", "y"),
        P(None, "y")),
    "while_varying_predicate": (lambda ns: lambda v: ns.lax.while_loop(
        lambda c: c[0] < ns.lax.axis_index("y") + 2, lambda c: (c[0] + 1, c[1] * 2),
        (0, ns.lax.psum(v, "y")))[1], P("x", "y"), P("x")),
    "psum_scatter_tiled": (lambda ns: lambda v: ns.lax.psum_scatter(v, "x", tiled=True),
                           P("x"), P("x")),
    "all_gather_kept_split": (lambda ns: lambda v: ns.lax.all_gather(
        v, "y", axis=1, tiled=True), P("x", "y"), P("x", "y")),
}


@pytest.mark.parametrize("name", sorted(ACCEPT))
def test_check_vma_accepts_what_jax_accepts(meshes, name):
  make, s_in, s_out = ACCEPT[name]
  args = (_x(4, 4), _x(2, 4, seed=1)) if type(s_in) is tuple else (_x(4, 4),)
  a, b = _run_both(make, meshes, s_in, s_out, *args)
  assert not isinstance(b, Exception), b
  assert not isinstance(a, Exception), a
  _close(a, b)


# ---------------------------------------------------------------------------
# check_vma: what JAX rejects, with its messages


REJECT_SAME_MESSAGE = {
    "split_claimed_replicated": (lambda ns: lambda v: v, P("x"), P()),
    "one_axis_left": (lambda ns: lambda v: v * 2, P("x", "y"), P("x")),
    "two_axes_left": (lambda ns: lambda v: v, P("x", "y"), P()),
    "axis_index": (lambda ns: lambda v: v + ns.lax.axis_index("x"), P(), P()),
    "pcast_claimed_replicated": (lambda ns: lambda v: ns.pcast(v, "x", to="varying"), P(),
                                 P()),
    "all_gather_is_varying": (lambda ns: lambda v: ns.lax.all_gather(v, "x", tiled=True),
                              P("x"), P()),
    "all_gather_of_invariant": (lambda ns: lambda v: ns.lax.all_gather(v, "x"), P(), P()),
    "ppermute": (lambda ns: lambda v: ns.lax.ppermute(v, "x", [(0, 1), (1, 0)]), P(), P()),
    "psum_other_axis": (lambda ns: lambda v: ns.lax.psum(v, "y"), P("x"), P()),
    "tree_output": (lambda ns: lambda v: {"u": v, "v": (v, v * 2)}, P("x"),
                    {"u": P("x"), "v": (P("x"), P())}),
    "pcast_already_varying": (lambda ns: lambda v: ns.pcast(v, "x", to="varying"), P("x"),
                              P("x")),
}


@pytest.mark.parametrize("name", sorted(REJECT_SAME_MESSAGE))
def test_check_vma_rejects_what_jax_rejects(meshes, name):
  make, s_in, s_out = REJECT_SAME_MESSAGE[name]
  a, b = _run_both(make, meshes, s_in, s_out, _x(4, 4))
  assert isinstance(b, Exception), "JAX accepted it"
  assert isinstance(a, Exception), "stagecraft accepted it"
  assert type(a) is type(b)
  assert _norm(str(a)) == _norm(str(b))
  # check_vma=False runs the same program.
  c, d = _run_both(make, meshes, s_in, s_out, _x(4, 4), check_vma=False)
  if not isinstance(d, Exception):
    _close(c, d)


REJECT_TYPE_ERRORS = {
    "scan_carry_becomes_varying": (lambda ns: lambda v: ns.lax.scan(
        lambda c, _: (c + v, None), ns.np.zeros((2, 4)), None, length=3)[0], P("x"), P("x"),
        ("scan body function carry input and carry output must have equal types",
         "has type float32[2,4] but the corresponding output carry component has type "
         "float32[2,4]{V:x}, so the manual axis types do not match",
         "pcast(..., ('x',), to='varying')")),
    "scan_carry_becomes_invariant": (lambda ns: lambda v: ns.lax.scan(
        lambda c, _: (ns.lax.psum(c, "y") * 0.5, None), v, None, length=3)[0], P("x", "y"),
        P("x", "y"),
        ("scan body function carry input and carry output must have equal types",
         "has type float32[2,2]{V:(x,y)} but the corresponding output carry component has "
         "type float32[2,2]{V:x}, so the manual axis types do not match",)),
    "cond_branches_differ": (lambda ns: lambda v, w: ns.lax.cond(
        v.sum() > 0, lambda: v, lambda: w), (P("x"), P()), P("x"),
        ("cond branches must have equal output types but they differ.",
         "The output of true_fun has type float32[2,4]{V:x} but the corresponding output of "
         "false_fun has type float32[2,4], so the manual axis types do not match.")),
}


@pytest.mark.parametrize("name", sorted(REJECT_TYPE_ERRORS))
def test_check_vma_type_errors(meshes, name):
  make, s_in, s_out, fragments = REJECT_TYPE_ERRORS[name]
  args = (_x(4, 4), _x(2, 4, seed=1)) if type(s_in) is tuple else (_x(4, 4),)
  a, b = _run_both(make, meshes, s_in, s_out, *args)
  assert isinstance(a, TypeError) and isinstance(b, TypeError), (a, b)
  for frag in fragments:
    assert frag in str(b), frag
    assert frag in str(a), frag


def test_fori_loop_carry_type_error(meshes):
  ours, _ = meshes
  with set_mesh(ours):
    f = shard_map(lambda v: lax.fori_loop(0, 3, lambda i, c: c + v, jnp.zeros((2, 4))),
                  in_specs=P("x"), out_specs=P("x"))
    with pytest.raises(TypeError, match="carry input and carry output must have equal types"):
      f(_x(4, 4))
    ok = shard_map(lambda v: lax.fori_loop(0, 3, lambda i, c: c + v,
                                           parallel.pcast(jnp.zeros((2, 4)), "x",
                                                          to="varying")),
                   in_specs=P("x"), out_specs=P("x"))
    x = _x(4, 4)
    np.testing.assert_allclose(np.asarray(ok(x)), 3 * x, rtol=1e-6)


# ---------------------------------------------------------------------------
# pcast / pvary


def test_pcast_values_grad_and_errors(meshes):
  ours, theirs = meshes
  x = _x(4, 4)
  make = lambda ns: lambda v, w: ns.pcast(v, "x", to="varying") * w
  a, b = _run_both(make, meshes, (P(), P("x")), P("x"), x, _x(8, 4, seed=2))
  _close(a, b)
  with set_mesh(ours), jax.set_mesh(theirs):
    f = shard_map(make(_Ours), in_specs=(P(), P("x")), out_specs=P("x"))
    g = jax.shard_map(make(_Theirs), in_specs=(JP(), JP("x")), out_specs=JP("x"))
    w = _x(8, 4, seed=2)
    _close(sc.grad(lambda v: (f(v, w) ** 2).sum())(x),
           jax.grad(lambda v: (g(v, w) ** 2).sum())(x), tol=1e-4)
    # pvary is the primitive under pcast.
    h = shard_map(lambda v: parallel.pvary(v, ("x",)), in_specs=P(), out_specs=P("x"))
    np.testing.assert_array_equal(np.asarray(h(x)), np.concatenate([x, x]))
  with pytest.raises(ValueError) as e:
    parallel.pcast(x, "x", to="varying")
  with pytest.raises(ValueError) as je:
    jax.lax.pcast(x, "x", to="varying")
  assert str(e.value) == str(je.value) == "pvary should be called under jax.shard_map."
  with pytest.raises(TypeError) as e:
    parallel.pcast(x, {"x"}, to="varying")
  with pytest.raises(TypeError) as je:
    jax.lax.pcast(x, {"x"}, to="varying")
  assert str(e.value) == str(je.value)
  with pytest.raises(ValueError, match="Got unexpected `to` value"):
    parallel.pcast(x, "x", to="invariant")
  assert parallel.pcast(x, (), to="varying") is x


# ---------------------------------------------------------------------------
# all_gather and psum_scatter, tiled


@pytest.mark.parametrize("axis,tiled", [(0, True), (1, True), (-1, True), (0, False),
                                        (1, False)])
def test_all_gather_matches_jax(meshes, axis, tiled):
  x = _x(4, 4)
  make = lambda ns: lambda v: ns.lax.all_gather(v, "y", axis=axis, tiled=tiled)
  a, b = _run_both(make, meshes, P("x", "y"), P("x", "y"), x, check_vma=False)
  _close(a, b)
  blocks = x[:2, :2], x[:2, 2:]
  want = (np.concatenate(blocks, axis=axis) if tiled else np.stack(blocks, axis=axis))
  np.testing.assert_array_equal(np.asarray(a)[:want.shape[0], :want.shape[1]], want)


@pytest.mark.parametrize("dim", [0, 1])
def test_psum_scatter_tiled_matches_jax(meshes, dim):
  x = _x(4, 4)
  make = lambda ns: lambda v: ns.lax.psum_scatter(v, "y", scatter_dimension=dim, tiled=True)
  a, b = _run_both(make, meshes, P("x"), P("x", "y") if dim == 1 else P(("x", "y")), x)
  _close(a, b)


# ---------------------------------------------------------------------------
# Argument errors, with JAX's messages


def test_argument_errors_match_jax(meshes):
  ours, theirs = meshes
  x = _x(4, 4)
  cases = [
      (dict(in_specs=P("x"), out_specs=P("x"), axis_names=["x"]), TypeError),
      (dict(in_specs=P("x"), out_specs=P("x"), axis_names={"z"}), ValueError),
      (dict(in_specs=P("y"), out_specs=P("y"), axis_names={"x"}), ValueError),
      (dict(in_specs=P("x"), out_specs=3), TypeError),
      (dict(in_specs=P(), out_specs=P(), mesh=make_mesh((2, 2), ("x", "y"))), ValueError),
  ]
  for kw, exc in cases:
    jkw = {k: (_jspec(v) if k.endswith("specs") and v != 3 else v) for k, v in kw.items()}
    if "mesh" in kw:
      jkw["mesh"] = jax.make_mesh((2, 2), ("x", "y"))
    with set_mesh(ours), jax.set_mesh(theirs):
      with pytest.raises(exc) as e:
        shard_map(lambda v: v, **kw)(x)
      with pytest.raises(exc) as je:
        jax.shard_map(lambda v: v, **jkw)(x)
    if kw.get("axis_names") == {"z"}:   # frozenset reprs of two names vary in order
      assert str(e.value).split("subset")[0] == str(je.value).split("subset")[0]
    else:
      assert str(e.value) == str(je.value)
  with pytest.raises(TypeError, match="out_specs"):
    shard_map(lambda v: v, in_specs=P())
  with pytest.raises(TypeError, match="requires a callable"):
    shard_map(3, out_specs=P())


def test_legacy_positional_form_still_works(meshes):
  ours, theirs = meshes
  x = _x(4, 4)
  f = shard_map(lambda v: lax.psum(v, "x"), ours, P("x", "y"), P(None, "y"))
  np.testing.assert_allclose(np.asarray(f(x)), x[:2] + x[2:], rtol=1e-5)
  g = shard_map(lambda v: v, ours, P("x"), P(), check_rep=False)
  np.testing.assert_array_equal(np.asarray(g(x)), x[:2])
  with pytest.raises(ValueError, match="check_rep=False"):
    shard_map(lambda v: v, ours, P("x"), P())(x)
