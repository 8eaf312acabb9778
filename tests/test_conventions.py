"""Conventions of JAX that programs rely on, against JAX: committed devices, negating
booleans, concrete cond predicates."""
import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp


def test_arrays_committed_to_different_devices_raise_as_jax():
  d, dj = sc.devices(), jax.devices()
  for lib, devs, np_ in ((sc, d, jnp), (jax, dj, jjnp)):
    a = lib.device_put(np.ones(2, np.float32), devs[0])
    b = lib.device_put(np.ones(2, np.float32), devs[1])
    with pytest.raises(ValueError, match="Received incompatible devices for jitted computation"):
      a + b
    with pytest.raises(ValueError, match="Received incompatible devices for jitted computation"):
      lib.jit(lambda x, y: x * y)(a, b)
    # uncommitted values (results of computations) move to the committed one
    c = np_.ones(2) * 3
    np.testing.assert_array_equal(np.asarray(c + b), [4.0, 4.0])
  assert isinstance(sc.errors.DeviceAssignmentMismatchError("x"), ValueError)


def _mismatches(lib, np_):
  """The device-mismatch messages of seven calls (eager, jit, keyword and pytree arguments;
  single devices and one-device meshes)."""
  devs = lib.devices()
  m0 = lib.make_mesh((1,), ("x",), devices=devs[:1])
  m1 = lib.make_mesh((1,), ("x",), devices=devs[1:2])
  a = lib.device_put(1.0, lib.sharding.NamedSharding(m0, lib.P()))
  b = lib.device_put(2.0, lib.sharding.NamedSharding(m1, lib.P()))
  c = lib.device_put(np.ones(3, np.float32), devs[0])
  d = lib.device_put(np.ones(3, np.float32), devs[2])

  def mul(x, y):
    return x * y
  calls = [lambda: a + b, lambda: np_.add(a, b), lambda: lib.jit(mul)(a, b),
           lambda: lib.jit(mul)(a, y=b), lambda: lib.jit(lambda p: p["u"] + p["v"])(
               {"u": a, "v": b}), lambda: c + lib.device_put(np.ones(3, np.float32), devs[1]),
           lambda: c + d]
  out = []
  for call in calls:
    with pytest.raises(ValueError) as e:
      call()
    out.append(str(e.value).split("\n--------------------")[0])
  return out


def test_device_mismatch_messages_as_jax():
  """JAX's words: "Got argument x of add with shape float32[] and with device ids [0] on
  platform CPU and argument y of ...", naming the arguments as the function's parameters
  (a jnp operator's `x`/`y`, a jitted function's qualified name and key paths)."""
  want = _mismatches(jax, jjnp)
  got = _mismatches(sc, jnp)
  assert "argument p['u'] of " in want[4]
  assert got == want


def test_negating_booleans_raises_as_jax():
  for np_ in (jnp, jjnp):
    with pytest.raises(TypeError, match="neg does not accept dtype bool"):
      np_.negative(np_.array([True, False]))
    with pytest.raises(TypeError, match="neg does not accept dtype bool"):
      -np_.array([True])
  np.testing.assert_array_equal(np.asarray(jnp.negative(jnp.arange(3))), [0, -1, -2])


def test_copy_deepcopy_and_pickle_of_tracers_and_arrays_as_jax():
  import copy
  import pickle

  import jax
  import jax.numpy as jjnp

  def outcomes(lib, np_):
    seen = []

    def f(x):
      seen.append(copy.copy(x) is x or type(copy.copy(x)) is type(x))
      seen.append(type(copy.deepcopy(x)) is type(x))
      try:
        pickle.dumps(x)
        seen.append("pickled")
      except lib.errors.ConcretizationTypeError:
        seen.append("ConcretizationTypeError")
      return x

    lib.jit(f)(np.ones(2, np.float32))
    a = np_.arange(3.0)
    b = pickle.loads(pickle.dumps(a))
    seen += [np.asarray(b).tolist(), str(b.dtype), type(copy.deepcopy(a)) is type(a)]
    return seen

  got = outcomes(sc, jnp)
  assert got == outcomes(jax, jjnp)
  assert got[2] == "ConcretizationTypeError"
