"""Transfer guards (`jax.transfer_guard*`, runtime/transfer_guard.py) against JAX 0.10.2 in
the same process: which moves each level allows, logs or refuses, the refusals' type and
text, nesting of the context managers and the global options."""
from __future__ import annotations

import logging

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.runtime import transfer_guard as tg_mod

from _util import error_of

SC = (sc, jnp)
JX = (jax, jjnp)

# name -> program(api, np_module): a host-to-device move the program did not ask for
IMPLICIT_H2D = {
    "jnp_ones": lambda api, m: m.ones(1),
    "jit_numpy_arg": lambda api, m: api.jit(lambda x: x)(np.ones(3, np.float32)),
    "jit_float_arg": lambda api, m: api.jit(lambda x: x)(1.0),
    "jit_int_arg": lambda api, m: api.jit(lambda x: x * 2)(3),
    "scalar_type": lambda api, m: m.float32(2.0),
    "asarray_numpy": lambda api, m: m.asarray(np.ones(3, np.float32)),
    "array_list": lambda api, m: m.array([1, 2]),
}

# programs that move nothing the guards see
NO_TRANSFER = {
    "closure_constant": lambda api, m, a: api.jit(lambda x: x + np.ones(3, np.float32))(a),
    "jit_of_array": lambda api, m, a: api.jit(lambda x: x * 2)(a),
    "arange": lambda api, m, a: m.arange(3),
    "np_asarray_on_cpu": lambda api, m, a: np.asarray(a),
    "device_get_on_cpu": lambda api, m, a: api.device_get(a),
    "str_on_cpu": lambda api, m, a: str(a),
}


def _array(api, m):
  with api.transfer_guard("allow"):
    return m.ones(3)


@pytest.mark.parametrize("name", sorted(IMPLICIT_H2D))
def test_disallow_refuses_implicit_host_to_device_as_jax(name):
  prog = IMPLICIT_H2D[name]
  with sc.transfer_guard("disallow"):
    ours = error_of(lambda: prog(*SC))
  with jax.transfer_guard("disallow"):
    theirs = error_of(lambda: prog(*JX))
  assert theirs[0] is jax.errors.JaxRuntimeError
  assert ours[0] is sc.errors.JaxRuntimeError
  assert ours[1] == theirs[1]
  assert "Disallowed host-to-device transfer: aval=" in ours[1]
  # and every other level but disallow_explicit lets it through
  for level in ("allow", "log", "log_explicit"):
    with sc.transfer_guard(level):
      np.testing.assert_array_equal(np.asarray(prog(*SC)), np.asarray(prog(*JX)))


@pytest.mark.parametrize("name", sorted(NO_TRANSFER))
def test_moves_that_are_no_transfer_pass_under_disallow_explicit(name):
  prog = NO_TRANSFER[name]
  a, ja = _array(*SC), _array(*JX)
  with sc.transfer_guard("disallow_explicit"):
    ours = prog(*SC, a)
  with jax.transfer_guard("disallow_explicit"):
    theirs = prog(*JX, ja)
  if isinstance(ours, str):
    assert ours == theirs
  else:
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


def test_array_operand_with_numpy_and_scalar_operands():
  a, ja = _array(*SC), _array(*JX)
  with sc.transfer_guard("disallow"):
    ours = error_of(lambda: a + np.ones(3, np.float32))
    ours_scalar = error_of(lambda: a + 1)
  with jax.transfer_guard("disallow"):
    theirs = error_of(lambda: ja + np.ones(3, np.float32))
  assert ours == (sc.errors.JaxRuntimeError, theirs[1])
  assert ours_scalar[0] is sc.errors.JaxRuntimeError
  # NB: JAX names the int operand int32[] (it moves before its conversion); stagecraft names
  # the weak float32 scalar it moves
  assert "Disallowed host-to-device transfer: aval=ShapedArray(" in ours_scalar[1]


def test_explicit_device_put_allowed_by_disallow_refused_by_disallow_explicit():
  x = np.arange(3.0, dtype=np.float32)
  with sc.transfer_guard("disallow"):
    np.testing.assert_array_equal(np.asarray(sc.device_put(x)), x)
  for level in ("disallow_explicit",):
    with sc.transfer_guard(level):
      ours = error_of(lambda: sc.device_put(x))
    with jax.transfer_guard(level):
      theirs = error_of(lambda: jax.device_put(x))
    assert ours == (sc.errors.JaxRuntimeError, theirs[1])


def test_device_to_device_explicit_and_implicit():
  a, ja = _array(*SC), _array(*JX)
  dev, jdev = sc.devices()[1], jax.devices()[1]
  with sc.transfer_guard("disallow"):
    moved = sc.device_put(a, dev)   # explicit: allowed
  assert moved.devices() == {dev}
  with sc.transfer_guard("disallow_explicit"):
    ours = error_of(lambda: sc.device_put(a, dev))
  with jax.transfer_guard("disallow_explicit"):
    theirs = error_of(lambda: jax.device_put(ja, jdev))
  assert ours == (sc.errors.JaxRuntimeError, theirs[1])
  assert "Disallowed device-to-device transfer" in ours[1]
  # implicit: a jit placed on another device moves its argument
  with sc.transfer_guard("disallow"):
    ours = error_of(lambda: sc.jit(lambda x: x, device=dev)(a))
  with jax.transfer_guard("disallow"), pytest.warns(DeprecationWarning):
    theirs = error_of(lambda: jax.jit(lambda x: x, device=jdev)(ja))
  assert ours == (sc.errors.JaxRuntimeError, theirs[1])
  # the guard is per direction
  with sc.transfer_guard_device_to_device("disallow"):
    assert sc.device_put(a, dev).devices() == {dev}
    jnp.ones(2)   # host-to-device: still allowed


def test_nesting_and_mixed_nesting_as_jax():
  def allowed(api, m):
    try:
      m.ones(1)
      return True
    except Exception:  # noqa: BLE001 - any refusal
      return False

  def scenario(api, m):
    seen = []
    with api.transfer_guard("disallow"):
      with api.transfer_guard("allow"):
        seen.append(allowed(api, m))
      seen.append(allowed(api, m))
    with api.transfer_guard_host_to_device("disallow"):
      with api.transfer_guard("allow"):
        seen.append(allowed(api, m))
      seen.append(allowed(api, m))
    with api.transfer_guard("disallow"):
      with api.transfer_guard_host_to_device("allow"):
        seen.append(allowed(api, m))
      seen.append(allowed(api, m))
    seen.append(allowed(api, m))
    return seen

  assert scenario(*SC) == scenario(*JX) == [True, False, True, False, True, False, True]


def test_global_options():
  try:
    sc.config.update("jax_transfer_guard", "disallow")
    assert sc.config.jax_transfer_guard_host_to_device == "disallow"   # as JAX's hook
    assert error_of(lambda: jnp.ones(1))[0] is sc.errors.JaxRuntimeError
    sc.config.update("jax_transfer_guard_host_to_device", "allow")
    jnp.ones(1)
  finally:
    sc.config.update("jax_transfer_guard", None)
  assert sc.config.jax_transfer_guard_host_to_device is None
  assert not tg_mod.active[0]
  jnp.ones(1)


def test_bad_level_raises_as_jax():
  def bad(api):
    with api.transfer_guard("sometimes"):
      pass
  ours, theirs = error_of(lambda: bad(sc)), error_of(lambda: bad(jax))
  assert ours == theirs and ours[0] is ValueError
  ours = error_of(lambda: sc.config.update("jax_transfer_guard", 3))
  theirs = error_of(lambda: jax.config.update("jax_transfer_guard", 3))
  assert ours == theirs


def test_log_levels_log_implicit_and_explicit_moves(caplog):
  x = np.ones(2, np.float32)
  with jax.transfer_guard("disallow"):
    text = error_of(lambda: jjnp.asarray(x))[1].removeprefix("INVALID_ARGUMENT: Disallowed ")
  caplog.set_level(logging.WARNING, logger="stagecraft.transfer_guard")
  with sc.transfer_guard("log"):
    jnp.asarray(x)
    sc.device_put(x)          # explicit: not logged at "log"
  assert [r.getMessage() for r in caplog.records] == [text]
  caplog.clear()
  with sc.transfer_guard("log_explicit"):
    sc.device_put(x)
  assert [r.getMessage() for r in caplog.records] == [text]
  assert caplog.records[0].levelno == logging.WARNING


def test_device_to_host_on_an_accelerator(monkeypatch, caplog):
  # NB: on CPU a read is no transfer; here every device counts as an accelerator's
  monkeypatch.setattr(tg_mod, "in_host_memory", lambda device: False)
  with sc.transfer_guard("allow"):
    a = jnp.ones((2, 3)) * 2
    b = jnp.ones(2) * 3
  with sc.transfer_guard("disallow"):
    t, msg = error_of(lambda: np.asarray(a))
    assert t is sc.errors.JaxRuntimeError
    assert msg == ("INVALID_ARGUMENT: Disallowed device-to-host transfer: shape=(2,3), "
                   f"dtype=f32, device={a.device}")
    assert error_of(lambda: str(a))[0] is sc.errors.JaxRuntimeError
    assert error_of(lambda: a.copy_to_host_async())[0] is sc.errors.JaxRuntimeError
    got = sc.device_get(a)     # explicit: allowed
    np.testing.assert_array_equal(got, np.full((2, 3), 2.0, np.float32))
    np.asarray(a)              # now on the host: no transfer
  with sc.transfer_guard("disallow_explicit"):
    assert error_of(lambda: sc.device_get(b))[0] is sc.errors.JaxRuntimeError
  caplog.set_level(logging.WARNING, logger="stagecraft.transfer_guard")
  with sc.transfer_guard("log_explicit"):
    sc.device_get(b)
  assert [r.getMessage() for r in caplog.records] == [
      f"device-to-host transfer: shape=(2), dtype=f32, device={b.device}"]


def _refused(fn) -> bool:
  try:
    fn()
  except sc.errors.JaxRuntimeError:
    return True
  return False


def test_each_level_over_implicit_and_explicit_host_to_device():
  # JAX's table (runtime/transfer_guard.py), through the direction's own context manager
  for level, refuses_implicit, refuses_explicit in [
      ("allow", False, False), ("log", False, False), ("disallow", True, False),
      ("log_explicit", False, False), ("disallow_explicit", True, True)]:
    with sc.transfer_guard_host_to_device(level):
      assert _refused(lambda: jnp.ones(1)) == refuses_implicit, level
      assert _refused(lambda: sc.device_put(np.ones(10))) == refuses_explicit, level
