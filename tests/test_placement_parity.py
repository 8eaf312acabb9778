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
    auto = _meshes(L)[1]
    f = lambda x: L.lib.device_put(x, L.lib.devices()[0]) * 2   # noqa: E731
    g = lambda x: L.lib.device_put(x, L.sh.NamedSharding(auto, L.sh.PartitionSpec("x")))  # noqa: E731
    x = L.np.arange(4.0)
    return L.lib.jit(f).lower(x).as_text(), "sdy.sharding_constraint" in L.lib.jit(g).lower(
        x).as_text()
  ours, theirs = (text(L_) for L_ in BOTH)
  assert ours == theirs and ours[1] is False
