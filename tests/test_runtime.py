"""runtime/: Array (attributes, repr against JAX's, host conversion, pickling), device_put onto
devices (the conftest sets 4 CPU devices), block_until_ready, and the eager dispatch cache."""
import pickle

import jax
import jax.numpy as jjnp
import ml_dtypes
import numpy as np
import pytest

import stagecraft
import stagecraft.numpy as jnp
from stagecraft.core import ShapedArray
from stagecraft.runtime import dispatch

F32 = np.dtype(np.float32)
BF16 = np.dtype(ml_dtypes.bfloat16)


# ---------------------------------------------------------------------------
# Array attributes


def test_array_attributes():
  x = stagecraft.device_put(np.arange(6, dtype=np.float32).reshape(2, 3))
  assert type(x) is stagecraft.Array
  assert x.shape == (2, 3)
  assert x.dtype == F32
  assert x.ndim == 2
  assert x.size == 6
  assert x.nbytes == 24
  assert x.itemsize == 4
  assert x.aval == ShapedArray((2, 3), F32)
  assert not x.weak_type
  assert x.devices() == {stagecraft.devices()[0]}
  assert x.device == stagecraft.devices()[0]
  b = stagecraft.device_put(np.ones(3, ml_dtypes.bfloat16))
  assert b.nbytes == 6 and b.dtype == BF16


_REPR_CASES = [
    np.array([1., 2.], np.float32),
    np.array([1, 2, 3], np.int32),
    np.array([True, False]),
    np.arange(6, dtype=np.float32).reshape(2, 3),
    np.array([[True, False], [False, True]]),
    np.float32(3.5),
    np.int32(-7),
    np.bool_(False),
    np.array([-1.5, np.nan, np.inf], np.float32),
    np.array([1, 2], np.uint8),
    np.array([1.25, 3], np.float16),
    np.array(2.5, ml_dtypes.bfloat16),
    np.array([1 + 2j], np.complex64),
    np.array([0.1, 0.2], np.float32),
    np.arange(2000, dtype=np.float32),
]


@pytest.mark.parametrize("value", _REPR_CASES, ids=lambda v: f"{v.dtype}{list(np.shape(v))}")
def test_repr_matches_jax(value):
  assert repr(stagecraft.device_put(value)) == repr(jax.device_put(value))


@pytest.mark.parametrize("value", [1, 1.5, True, 2j], ids=repr)
def test_repr_python_scalar_matches_jax(value):
  assert repr(stagecraft.device_put(value)) == repr(jax.device_put(value))


def test_repr_weak_scalar_matches_jax():
  ours = stagecraft.jit(lambda x: x * 2)(2.0)
  theirs = jax.jit(lambda x: x * 2)(2.0)
  assert repr(ours) == repr(theirs) == "Array(4., dtype=float32, weak_type=True)"
  assert repr(stagecraft.device_put(np.array([1., 2.], np.float32))) == (
      "Array([1., 2.], dtype=float32)")


@pytest.mark.parametrize("value", [np.array([1.5, 2], ml_dtypes.bfloat16),
                                   np.array([1., 2.5, 3.], ml_dtypes.bfloat16)])
def test_repr_bfloat16_array_matches_jax(value):
  assert repr(stagecraft.device_put(value)) == repr(jax.device_put(value))


@pytest.mark.parametrize("shape", [(0,), (0, 3), (2, 0)])
def test_repr_zero_size_matches_jax(shape):
  value = np.zeros(shape, np.float32)
  assert repr(stagecraft.device_put(value)) == repr(jax.device_put(value))


def test_str_and_format():
  x = stagecraft.device_put(np.array([1., 2.], np.float32))
  assert str(x) == str(np.array([1., 2.], np.float32))
  assert f"{stagecraft.device_put(np.float32(1.25)):.1f}" == "1.2"


# ---------------------------------------------------------------------------
# Host conversion


def test_np_asarray_copies_to_host_read_only():
  value = np.arange(4, dtype=np.float32)
  x = stagecraft.device_put(value)
  h = np.asarray(x)
  assert type(h) is np.ndarray
  np.testing.assert_array_equal(h, value)
  assert not h.flags.writeable
  with pytest.raises(ValueError, match="read-only"):
    h[0] = 5
  # NB: no check that mutating `value` leaves `x` alone: like jax.device_put on CPU,
  # device_put may alias a suitably aligned NumPy buffer.
  c = np.array(x)     # an explicit copy is writable and independent
  c[1] = 7
  assert np.asarray(x)[1] == 1


def test_dunder_array_with_dtype():
  x = stagecraft.device_put(np.array([1.5, 2.5], np.float32))
  assert np.asarray(x, dtype=np.int32).tolist() == [1, 2]
  assert x.__array__(np.float64).dtype == np.float64
  assert np.asarray(x, dtype=np.float32).dtype == np.float32
  assert x.__array__(copy=True).flags.writeable


def test_block_until_ready_item_tolist():
  x = stagecraft.device_put(np.arange(3, dtype=np.int32))
  assert x.block_until_ready() is x
  assert x.is_ready()
  assert x.item(1) == 1 and type(x.item(1)) is int
  assert x.tolist() == [0, 1, 2]
  s = stagecraft.device_put(np.float32(2.5))
  assert s.item() == 2.5 and type(s.item()) is float
  assert float(s) == 2.5 and int(stagecraft.device_put(np.int32(3))) == 3
  assert bool(stagecraft.device_put(True))
  assert stagecraft.device_put(np.ones((2, 2))).tolist() == [[1.0, 1.0], [1.0, 1.0]]


@pytest.mark.parametrize("value,weak", [
    (np.array([1., 2.], np.float32), False),
    (np.arange(6, dtype=np.int8).reshape(2, 3), False),
    (np.array([1.5, -2], ml_dtypes.bfloat16), False),
    (np.array([True, False]), False),
    (2.0, True),
    (3, True),
])
def test_pickle_round_trip(value, weak):
  x = stagecraft.device_put(value)
  assert x.weak_type == weak
  y = pickle.loads(pickle.dumps(x))
  assert type(y) is stagecraft.Array
  assert y.aval == x.aval
  assert y.dtype == x.dtype and y.weak_type == weak
  np.testing.assert_array_equal(np.asarray(y), np.asarray(x))


# ---------------------------------------------------------------------------
# device_put and devices


def test_device_count():
  assert stagecraft.device_count() == 4
  assert len(stagecraft.devices()) == 4
  assert stagecraft.local_device_count() == 4
  assert [d.id for d in stagecraft.devices()] == [0, 1, 2, 3]


@pytest.mark.parametrize("value,aval", [
    (np.ones(3), ShapedArray((3,), F32)),
    (np.ones(2, np.int64), ShapedArray((2,), np.dtype(np.int32))),
    (np.float64(1.5), ShapedArray((), F32)),
    (np.int16(2), ShapedArray((), np.dtype(np.int16))),
    (1, ShapedArray((), np.dtype(np.int32), True)),
    (1.5, ShapedArray((), F32, True)),
    (True, ShapedArray((), np.dtype(np.bool_))),
])
def test_device_put_numpy_and_scalars(value, aval):
  x = stagecraft.device_put(value)
  assert type(x) is stagecraft.Array
  assert x.aval == aval
  np.testing.assert_array_equal(np.asarray(x), np.asarray(value, aval.dtype))


def test_device_put_pytree():
  tree = {"a": 1.0, "b": (np.ones(2), jjnp.ones(3)), "c": None, "d": [np.int32(4)]}
  out = stagecraft.device_put(tree)
  assert jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure(tree)
  assert out["c"] is None
  assert all(type(v) is stagecraft.Array for v in jax.tree_util.tree_leaves(out))
  assert out["a"].weak_type
  assert stagecraft.block_until_ready(out) is out


def test_device_put_jax_array_and_array():
  j = jjnp.arange(3.0)
  x = stagecraft.device_put(j)
  assert type(x) is stagecraft.Array
  assert x.aval == ShapedArray((3,), F32)
  np.testing.assert_array_equal(np.asarray(x), np.arange(3.0))
  assert stagecraft.device_put(x) is x


def test_device_put_onto_device():
  dev = stagecraft.devices()[1]
  x = stagecraft.device_put(np.arange(3, dtype=np.float32), dev)
  assert x.devices() == {dev}
  assert x.committed
  np.testing.assert_array_equal(np.asarray(x), np.arange(3))
  y = stagecraft.device_put(x, stagecraft.devices()[2])
  assert y.devices() == {stagecraft.devices()[2]}
  np.testing.assert_array_equal(np.asarray(y), np.arange(3))
  tree = stagecraft.device_put({"a": np.ones(2), "b": 2.0}, stagecraft.devices()[3])
  assert all(v.devices() == {stagecraft.devices()[3]} for v in tree.values())
  assert stagecraft.block_until_ready(tree) is tree


@pytest.mark.parametrize("value", ["s", {"a": "s"}])
def test_device_put_rejects_non_arrays_as_jax(value):
  with pytest.raises(TypeError) as ours:
    stagecraft.device_put(value)
  with pytest.raises(TypeError) as theirs:
    jax.device_put(value)
  assert str(ours.value) == str(theirs.value) == (
      "Argument 's' of type <class 'str'> is not a valid JAX type")


def test_device_put_jax_array_onto_device():
  j = jax.device_put(jjnp.ones(2), jax.devices()[3])
  x = stagecraft.device_put(j, stagecraft.devices()[1])
  assert x.devices() == {stagecraft.devices()[1]}


def test_device_put_without_device_is_uncommitted():
  assert not jax.device_put(np.ones(2)).committed
  assert not stagecraft.device_put(np.ones(2)).committed


def test_eager_op_on_committed_device():
  dev = stagecraft.devices()[1]
  x = stagecraft.device_put(np.ones(2, np.float32), dev)
  y = x + 1
  np.testing.assert_array_equal(np.asarray(y), [2., 2.])
  assert y.devices() == {dev}


def test_jit_on_committed_device():
  dev = stagecraft.devices()[1]
  x = stagecraft.device_put(np.ones(2, np.float32), dev)
  y = stagecraft.jit(lambda v: v * 3)(x)
  np.testing.assert_array_equal(np.asarray(y), [3., 3.])
  assert y.devices() == {dev}


def test_block_until_ready_tree():
  tree = (stagecraft.device_put(np.ones(2)), [jnp.arange(3)], {"k": None}, 1.0)
  assert stagecraft.block_until_ready(tree) is tree


# ---------------------------------------------------------------------------
# Eager dispatch cache


def test_eager_dispatch_compiles_once_per_signature():
  # Shapes unique to this test, so that no other test warmed the cache.
  x = stagecraft.device_put(np.ones((7, 13), np.float32))
  before = dispatch.compile_count[0]
  y = x + 1
  after_first = dispatch.compile_count[0]
  assert after_first == before + 1
  for _ in range(5):
    y = x + 1
  x + 2.5                        # the same weak f32[] scalar aval: no new program
  assert dispatch.compile_count[0] == after_first
  np.testing.assert_array_equal(np.asarray(y), np.full((7, 13), 2, np.float32))

  x * x                          # a new primitive
  assert dispatch.compile_count[0] == after_first + 1
  x * x
  assert dispatch.compile_count[0] == after_first + 1

  # A strong f32[] operand is a new aval; its program text equals the weak one's, so the
  # text-keyed compile cache may share the executable: at most one compilation.
  x + np.float32(1)
  n = dispatch.compile_count[0]
  assert after_first + 1 <= n <= after_first + 2
  x + np.float32(1)
  assert dispatch.compile_count[0] == n

  stagecraft.device_put(np.ones((7, 14), np.float32)) + 1    # new shape
  assert dispatch.compile_count[0] == n + 1

  jnp.sum(x, axis=0)             # new params
  n = dispatch.compile_count[0]
  jnp.sum(x, axis=0)
  assert dispatch.compile_count[0] == n
  jnp.sum(x, axis=1)
  assert dispatch.compile_count[0] == n + 1


def test_eager_and_jit_numerics_agree():
  x = np.linspace(-3, 3, 11, dtype=np.float32)

  def f(v):
    return jnp.tanh(v) * jnp.exp(-v * v) + jnp.sin(v)
  np.testing.assert_allclose(np.asarray(f(x)), np.asarray(stagecraft.jit(f)(x)), rtol=1e-6,
                             atol=1e-7)


def test_jit_device_argument_places_computation_and_results():
  dev = stagecraft.devices()[2]
  f = stagecraft.jit(lambda x: x * 2, device=dev)
  y = f(np.ones(3, np.float32))
  assert y.devices() == {dev}
  np.testing.assert_array_equal(np.asarray(y), [2, 2, 2])
  z = y + 1   # eager ops follow the committed result
  assert z.devices() == {dev}
  np.testing.assert_array_equal(np.asarray(z), [3, 3, 3])


def test_jit_device_argument_errors():
  with pytest.raises(TypeError, match="must be a device from stagecraft.devices"):
    stagecraft.jit(lambda x: x, device="gpu0")
  with pytest.raises(ValueError, match="at most one of `device` and `backend`"):
    stagecraft.jit(lambda x: x, device=stagecraft.devices()[0], backend="cpu")


def test_arrays_on_two_devices_meeting_raise():
  a = stagecraft.device_put(np.ones(2, np.float32), stagecraft.devices()[1])
  b = stagecraft.device_put(np.ones(2, np.float32), stagecraft.devices()[3])
  with pytest.raises(ValueError, match="incompatible devices"):
    a + b


_FORK = r"""
import os, sys, warnings
warnings.simplefilter("ignore")
import numpy as np
import stagecraft as sc
f = sc.jit(lambda x: x * 2 + 1)
f(np.ones(3, np.float32))
pid = os.fork()
if pid == 0:
  out = []
  out.append(float(np.asarray(f(np.ones(3, np.float32)))[0]))   # compiled before the fork
  try:
    f(np.ones(4, np.float32))                                   # a new program: compiles
    out.append("compiled")
  except RuntimeError as e:
    out.append("spawn" in str(e) and "fork" in str(e))
  print(out, flush=True)
  os._exit(0)
_, status = os.waitpid(pid, 0)
print("parent", status, flush=True)
"""


def test_compiling_in_a_forked_child_raises_instead_of_deadlocking():
  # XLA's threads do not survive fork(): compiling in the child would hang (as JAX does).
  import os
  import subprocess
  import sys
  if not hasattr(os, "fork"):
    pytest.skip("no fork() on this platform")
  src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
  env = dict(os.environ, PYTHONPATH=src)
  p = subprocess.run([sys.executable, "-c", _FORK], capture_output=True, text=True,
                     env=env, timeout=60)
  assert p.returncode == 0, p.stderr
  lines = p.stdout.strip().splitlines()
  assert lines == ["[3.0, True]", "parent 0"], p.stdout


def test_deleted_array_says_deleted_not_donated():
  # As JAX: a deleted Array raises RuntimeError naming its shape, not the donation error.
  x = jnp.ones(3)
  x.delete()
  assert x.is_deleted()
  with pytest.raises(RuntimeError, match=r"Array has been deleted with shape=float32\[3\]\.") as e:
    x + 1
  assert type(e.value) is RuntimeError
  y = jax.numpy.ones(3)
  y.delete()
  with pytest.raises(RuntimeError) as je:
    y + 1
  assert str(e.value) == str(je.value)


def test_a_finalizer_running_during_a_compile_does_not_deadlock():
  # A garbage collection inside a compile (which holds the compile lock) can finalize a
  # jitted function, whose finalizer drops its executables under the same lock, on the same
  # thread: with a plain Lock the process hung (seen in test_pmap after test_collectives).
  import threading
  f = stagecraft.jit(lambda x: x * 3 + 1)
  f(np.float32(2))
  done = threading.Event()

  def compile_with_a_collection():
    with dispatch._compile_lock:   # as compile_module holds it
      dispatch.forget_module("the module text of a collected function")
      dispatch.compile_module(f.lower(np.float32(2)).compiler_ir())   # re-entered
    done.set()

  t = threading.Thread(target=compile_with_a_collection, daemon=True)
  t.start()
  t.join(30)
  assert done.is_set()
