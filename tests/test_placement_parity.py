"""Placement and sharding parity with JAX 0.10.2: the exception type of a device mismatch,
`device_put` staged as JAX's `device_put` equation, and eager arrays under `set_mesh`.
Each case runs the same code on JAX and on stagecraft and compares."""
from __future__ import annotations

import numpy as np
import pytest

import jax
import jax.numpy as jjnp
import jax.sharding as jsh

import stagecraft as sc
import stagecraft.numpy as snp
import stagecraft.sharding as ssh


class L:
  """One library's names: `lib`, `np` and `sh` (jax.sharding)."""

  def __init__(self, ours: bool):
    self.lib, self.np, self.sh = (sc, snp, ssh) if ours else (jax, jjnp, jsh)


BOTH = (L(True), L(False))


def _outcome(f):
  try:
    return "ok", f()
  except Exception as e:   # noqa: BLE001 - compared as type and text
    return type(e), str(e)


# ---------------------------------------------------------------------------
# 3. A device mismatch raises JAX's ValueError


def _mismatch(L, how):
  a = L.lib.device_put(np.float32(1.0), L.lib.devices()[0])
  b = L.lib.device_put(np.float32(2.0), L.lib.devices()[1])
  if how == "eager":
    return _outcome(lambda: a + b)
  return _outcome(lambda: L.lib.jit(lambda x, y: x * y)(a, b))


@pytest.mark.parametrize("how", ["eager", "jit"])
def test_device_mismatch_raises_plain_value_error(how):
  (t1, m1), (t2, m2) = (_mismatch(L_, how) for L_ in BOTH)
  assert t2 is ValueError
  assert t1 is t2 and t1.__mro__ == t2.__mro__ and t1.__name__ == "ValueError"
  assert m1 == m2 and m1.startswith("Received incompatible devices for jitted computation.")
  # the old name still catches it
  try:
    _ = sc.device_put(1.0, sc.devices()[0]) + sc.device_put(1.0, sc.devices()[1])
  except sc.DeviceAssignmentMismatchError as e:
    assert type(e) is ValueError
  else:
    raise AssertionError("no error")


# ---------------------------------------------------------------------------
# 1. device_put inside a transformation is JAX's `device_put` equation


def _meshes(L):
  ax = L.sh.AxisType
  return (L.lib.make_mesh((2,), ("x",), axis_types=(ax.Explicit,)),
          L.lib.make_mesh((2,), ("x",), axis_types=(ax.Auto,)))


def _dp_programs(L):
  lib, jnp, sh = L.lib, L.np, L.sh
  expl, auto = _meshes(L)
  NS, P = sh.NamedSharding, sh.PartitionSpec
  x3, x4 = jnp.ones(3), jnp.arange(4.0)
  dev1 = lib.devices()[1]
  jx = lib.make_jaxpr
  out = {
      "plain": jx(lambda x: lib.device_put(x) * 2)(x3),
      "device": jx(lambda x: lib.device_put(x, dev1) * 2)(x3),
      "single": jx(lambda x: lib.device_put(x, sh.SingleDeviceSharding(lib.devices()[0])))(x3),
      "src": jx(lambda x: lib.device_put(x, src=lib.devices()[0]))(x3),
      "explicit": jx(lambda x: lib.device_put(x, NS(expl, P("x"))) * 2)(x4),
      "auto": jx(lambda x: lib.device_put(x, NS(auto, P("x"))) * 2)(x4),
      "pytree": jx(lambda x, y: lib.device_put((x, y)))(x3, x4),
      "prefix": jx(lambda x: lib.device_put({"a": x, "b": (x, 1.0)},
                                            {"a": dev1, "b": None}))(x4),
      "no_alias": jx(lambda x, y: lib.device_put((x, y), may_alias=False))(x3, x4),
      "donate": jx(lambda x, y: lib.device_put((x, y), donate=(True, False)))(x3, x4),
      "alias": jx(lambda x, y: lib.device_put((x, y), may_alias=True))(x3, x4),
      "grad": jx(lib.grad(lambda x: lib.device_put(x, dev1).sum()))(x3),
      "grad_typed": jx(lib.grad(lambda x: (lib.device_put(x, NS(expl, P("x"))) ** 2).sum()))(x4),
      "vmap": jx(lib.vmap(lambda x: lib.device_put(x, NS(auto, P())) * 2))(x4),
      "jit": jx(lib.jit(lambda x: lib.device_put(x) * 2))(x3),
      "jvp": jx(lambda x: lib.jvp(lambda x: lib.device_put(x), (x,), (x,)))(x3),
      "linearize": jx(lambda x: lib.linearize(lambda x: lib.device_put(x), x)[1](x))(x3),
      "scalar": jx(lambda x: lib.device_put(2.0) + x)(x3),
      "numpy": jx(lambda x: lib.device_put(np.ones(3, np.float32)) + x)(x3),
      "numpy_dev": jx(lambda x: lib.device_put(np.ones(3, np.float32), dev1) + x)(x3),
  }
  with lib.set_mesh(expl):
    out["spec"] = jx(lambda x: lib.device_put(x, P("x")) * 2)(x4)
  return {k: str(v) for k, v in out.items()}


def test_device_put_jaxprs_print_as_jax():
  ours, theirs = (_dp_programs(L_) for L_ in BOTH)
  assert ours.keys() == theirs.keys()
  for k in ours:
    if k == "grad_typed":   # the seed's reshard sits elsewhere (not device_put's)
      o, t = ours[k].splitlines(), theirs[k].splitlines()
      assert [ln for ln in o if "device_put" in ln or "copy_sem" in ln or "srcs" in ln] == \
             [ln for ln in t if "device_put" in ln or "copy_sem" in ln or "srcs" in ln], k
      continue
    assert ours[k] == theirs[k], k
  assert "devices=(CpuDevice(id=1),)" in ours["device"]
  assert "srcs=(CpuDevice(id=1),)" in ours["grad"]


def _dp_values(L):
  lib, jnp, sh = L.lib, L.np, L.sh
  expl, auto = _meshes(L)
  NS, P = sh.NamedSharding, sh.PartitionSpec
  x = jnp.arange(4.0)
  dev1 = lib.devices()[1]
  cases = {
      "auto": lambda: lib.jit(lambda x: lib.device_put(x, NS(auto, P("x"))) * 2)(x),
      "explicit": lambda: lib.jit(lambda x: lib.device_put(x, NS(expl, P("x"))) * 2)(x),
      "dev": lambda: lib.jit(lambda x: lib.device_put(x, dev1) * 2)(x),
      "only": lambda: lib.jit(lambda x: lib.device_put(x, NS(expl, P("x"))))(x),
      "grad": lambda: lib.grad(lambda x: lib.device_put(x, dev1).sum())(x),
      "vmap": lambda: lib.vmap(lambda x: lib.device_put(x, dev1) * 2)(x),
      "vmap_auto": lambda: lib.vmap(lambda x: lib.device_put(x, NS(auto, P())) * 2)(x),
      "jvp": lambda: lib.jvp(lambda x: lib.device_put(x, lib.devices()[2]), (x,), (x,))[1],
      "numpy": lambda: lib.jit(lambda x: lib.device_put(np.ones(4), dev1) + x)(x),
      "donate_grad": lambda: lib.grad(lambda x: lib.device_put(x, donate=True).sum())(x),
      "both": lambda: lib.jit(lambda x: lib.device_put(x, donate=True, may_alias=True))(x),
  }
  out = {}
  for k, f in cases.items():
    kind, r = _outcome(f)
    out[k] = (kind, r) if kind != "ok" else (str(r.sharding), r.committed,
                                               np.asarray(r).tolist())
  return out


def test_device_put_values_and_placement_as_jax():
  ours, theirs = (_dp_values(L_) for L_ in BOTH)
  assert ours == theirs
  assert ours["donate_grad"][0] is ValueError
  assert ours["vmap"][0] == "SingleDeviceSharding(device=CpuDevice(id=1), memory_kind=device)"


def test_device_put_lowering_as_jax():
  def text(L):
    on_auto = L.sh.NamedSharding(_meshes(L)[1], L.sh.PartitionSpec("x"))
    f = lambda x: L.lib.device_put(x, L.lib.devices()[0]) * 2   # noqa: E731
    g = lambda x: L.lib.device_put(x, on_auto)   # noqa: E731
    x = L.np.arange(4.0)
    return L.lib.jit(f).lower(x).as_text(), "sdy.sharding_constraint" in L.lib.jit(g).lower(
        x).as_text()
  ours, theirs = (text(L_) for L_ in BOTH)
  assert ours == theirs and ours[1] is False


# ---------------------------------------------------------------------------
# 2. Under set_mesh, eager and jitted results live on the mesh (replicated, committed)


def _mesh_results(L, types):
  lib, jnp, sh = L.lib, L.np, L.sh
  P = sh.PartitionSpec
  mesh = lib.make_mesh((2,), ("x",), axis_types=types)
  outside = jnp.ones(8)
  out = {}

  def put(k, f):
    kind, r = _outcome(f)
    out[k] = (kind, r) if kind != "ok" else (
        str(r.sharding), r.committed, str(lib.typeof(r)), np.asarray(r).tolist())

  with lib.set_mesh(mesh):
    a = jnp.arange(8.0)
    b = lib.device_put(jnp.arange(8.0), P("x"))
    put("arange", lambda: a)
    put("ones", lambda: jnp.ones(3))
    put("zeros2d", lambda: jnp.zeros((2, 3)))
    put("a+1", lambda: a + 1)
    put("b*2", lambda: b * 2)
    put("a+b", lambda: a + b)
    put("outside", lambda: outside)
    put("outside+1", lambda: outside + 1)
    put("neg_outside", lambda: lib.lax.neg(outside))
    put("reshape_outside", lambda: outside.reshape(2, 4))
    put("sin_numpy", lambda: jnp.sin(np.ones(3, np.float32)))
    put("array", lambda: jnp.array([1.0, 2.0, 3.0]))
    put("asarray", lambda: jnp.asarray(np.ones(2, np.float32)))
    put("float32", lambda: jnp.float32(2.0))
    put("put_numpy", lambda: lib.device_put(np.ones(3, np.float32)))
    put("put_outside", lambda: lib.device_put(outside))
    put("put_inside", lambda: lib.device_put(a))
    put("jit", lambda: lib.jit(lambda x: x * 2)(outside))
    put("jit_numpy", lambda: lib.jit(lambda x: x * 2)(np.ones(3, np.float32)))
    put("jit_nullary", lambda: lib.jit(lambda: jnp.ones(4))())
    put("sum", lambda: jnp.ones((2, 3)).sum(0))
    put("outside+b", lambda: outside + b)
    c = jnp.ones(3)
  put("after", lambda: c)
  put("after+1", lambda: c + 1)
  out["shards"] = len(c.addressable_shards)
  return out


@pytest.mark.parametrize("types", ["Explicit", "Auto"])
def test_eager_values_under_set_mesh_as_jax(types):
  ours, theirs = (_mesh_results(L_, (getattr(L_.sh.AxisType, types),)) for L_ in BOTH)
  assert ours.keys() == theirs.keys()
  for k in ours:
    assert ours[k] == theirs[k], k
  if types == "Explicit":
    assert ours["arange"][0] == ("NamedSharding(mesh=Mesh('x': 2, axis_types=(Explicit,)), "
                                 "spec=P(None,), memory_kind=device)")
    assert "spec=P()" in ours["neg_outside"][0]
  assert ours["shards"] == 2


def _committed_under_mesh(L):
  lib, jnp = L.lib, L.np
  mesh = lib.make_mesh((2,), ("x",), axis_types=(L.sh.AxisType.Explicit,))
  d3 = lib.device_put(jnp.ones(3), lib.devices()[3])
  d0 = lib.device_put(jnp.ones(3), lib.devices()[0])
  with lib.set_mesh(mesh):
    return [_outcome(f) for f in (lambda: d3 + 1, lambda: lib.jit(lambda x: x + 1)(d3),
                                  lambda: d0 + 1, lambda: lib.jit(lambda x: x + 1)(d0))]


def test_committed_arguments_meet_the_context_mesh_as_jax():
  ours, theirs = (_committed_under_mesh(L_) for L_ in BOTH)
  assert ours == theirs
  assert all(t is ValueError and "and jit's context mesh with device ids [0, 1]" in m
             for t, m in ours)


def _single_device_inside_jit(L):
  lib, jnp = L.lib, L.np
  S = L.sh.SingleDeviceSharding
  x = jnp.arange(4.0)
  d1 = lib.device_put(jnp.ones(4), lib.devices()[1])
  cases = [
      lambda: lib.jit(lambda x: lib.device_put(x, S(lib.devices()[1])) * 2)(x),
      lambda: lib.jit(lambda x: lib.device_put(x, S(lib.devices()[0])) * 2)(x),
      lambda: lib.jit(lambda x: lib.jit(lambda y: lib.device_put(y, S(lib.devices()[2])))(x)
                      + 1)(x),
      lambda: lib.jit(lambda x, y: lib.device_put(x, S(lib.devices()[1])) + y)(x, d1),
      lambda: lib.jit(lambda x, y: lib.device_put(x, S(lib.devices()[2])) + y)(x, d1),
  ]
  out = []
  for f in cases:
    kind, r = _outcome(f)
    out.append((kind, r) if kind != "ok" else (str(r.sharding), r.committed,
                                                np.asarray(r).tolist()))
  return out


def test_single_device_sharding_inside_jit_places_the_program_as_jax():
  ours, theirs = (_single_device_inside_jit(L_) for L_ in BOTH)
  assert ours == theirs
  assert ours[0][0] == "SingleDeviceSharding(device=CpuDevice(id=1), memory_kind=device)"
  assert ours[4][0] is ValueError
  assert "device_put inside jit with device ids [2] on platform CPU at " in ours[4][1]
