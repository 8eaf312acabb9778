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
