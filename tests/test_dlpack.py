"""stagecraft.dlpack (JAX's jax.dlpack) and Array.__dlpack__: zero-copy exchange with NumPy
where the runtime allows it (checked by buffer pointers), copies where asked or needed,
dtypes under x64 off and on, and JAX's errors."""
import jax
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import dlpack
from stagecraft.runtime.array import DLDeviceType


def _aligned(values, dtype, align=64):
  """A C-contiguous NumPy array whose data starts on an `align`-byte boundary (XLA CPU's
  requirement for sharing memory)."""
  values = np.asarray(values, dtype)
  raw = np.empty(values.nbytes + align, np.uint8)
  off = (-raw.ctypes.data) % align
  out = raw[off:off + values.nbytes].view(dtype).reshape(values.shape)
  out[...] = values
  return out


def _ptr(x):
  return x._buf.unsafe_buffer_pointer()


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.complex64, np.bool_,
                                   np.int16, np.float16])
def test_numpy_from_array_shares_memory(dtype):
  x = jnp.asarray(np.arange(6).reshape(2, 3).astype(dtype))
  n = np.from_dlpack(x)
  assert n.dtype == dtype and n.shape == (2, 3)
  assert n.ctypes.data == _ptr(x)
  np.testing.assert_array_equal(n, np.arange(6).reshape(2, 3).astype(dtype))
  assert x.__dlpack_device__() == (DLDeviceType.kDLCPU, 0)
  jx = jax.numpy.asarray(np.arange(6).reshape(2, 3).astype(dtype))
  assert tuple(map(int, x.__dlpack_device__())) == tuple(map(int, jx.__dlpack_device__()))


def test_numpy_copy_request_copies():
  x = jnp.arange(4.0)
  n = np.from_dlpack(x, copy=True)
  assert n.ctypes.data != _ptr(x)
  np.testing.assert_array_equal(n, [0, 1, 2, 3])
  cap = x.__dlpack__(copy=True)
  assert type(cap).__name__ == "PyCapsule"


def test_from_dlpack_aligned_numpy_is_zero_copy():
  a = _aligned(np.arange(12).reshape(3, 4), np.float32)
  y = dlpack.from_dlpack(a)
  assert _ptr(y) == a.ctypes.data
  assert y.dtype == np.float32 and y.shape == (3, 4)
  np.testing.assert_array_equal(y, a)
  np.testing.assert_array_equal(sc.jit(lambda t: t * 2 + 1)(y), a * 2 + 1)
  # copy=True: new memory, same values
  z = dlpack.from_dlpack(a, copy=True)
  assert _ptr(z) != a.ctypes.data
  np.testing.assert_array_equal(z, a)


def test_from_dlpack_unaligned_copies_or_raises():
  u = np.arange(9, dtype=np.float32)[1:]
  if u.ctypes.data % 64 == 0:
    u = np.arange(10, dtype=np.float32)[2:]
  y = dlpack.from_dlpack(u)
  np.testing.assert_array_equal(y, u)
  with pytest.raises(ValueError, match="requires a copy .* However copy=False"):
    dlpack.from_dlpack(u, copy=False)


def test_round_trip_through_stagecraft_and_jax():
  x = jnp.linspace(0, 1, 5)
  back = dlpack.from_dlpack(x)
  assert _ptr(back) == _ptr(x)
  np.testing.assert_array_equal(back, x)
  j = jax.dlpack.from_dlpack(x)   # JAX reads our Arrays
  np.testing.assert_array_equal(np.asarray(j), np.asarray(x))
  s = dlpack.from_dlpack(jax.numpy.arange(3))   # and we read JAX's
  np.testing.assert_array_equal(s, [0, 1, 2])
  assert s.dtype == np.int32


def test_x64_narrowing_follows_jax():
  a = np.arange(3.0)
  y = dlpack.from_dlpack(a)
  assert y.dtype == jax.dlpack.from_dlpack(a).dtype == np.float32
  with sc.enable_x64():
    y64 = dlpack.from_dlpack(_aligned([1.5, 2.5], np.float64))
    assert y64.dtype == np.float64
    np.testing.assert_array_equal(y64, [1.5, 2.5])
    i64 = dlpack.from_dlpack(np.arange(3, dtype=np.int64))
    assert i64.dtype == np.int64


def test_device_argument():
  dev = sc.devices()[-1]
  a = _aligned([1.0, 2.0], np.float32)
  y = dlpack.from_dlpack(a, device=dev)
  assert y.devices() == {dev}
  np.testing.assert_array_equal(y, a)
  assert dlpack.from_dlpack(a, device=sc.sharding.SingleDeviceSharding(dev)).devices() == {dev}
  if dev != sc.devices()[0]:
    with pytest.raises(ValueError, match="requires a copy since the source device"):
      dlpack.from_dlpack(a, device=dev, copy=False)


def test_errors_match_jax():
  for mod in (dlpack, jax.dlpack):
    with pytest.raises(TypeError, match="must have __dlpack__ and __dlpack_device__"):
      mod.from_dlpack([1, 2, 3])
    with pytest.raises(TypeError, match="Expected a string or dtype-like object"):
      mod.is_supported_dtype(None)
  for dt in (np.float32, np.int8, np.bool_, np.complex128, np.float16):
    assert dlpack.is_supported_dtype(dt) == jax.dlpack.is_supported_dtype(dt) is True
  assert dlpack.is_supported_dtype(np.dtype("O")) == jax.dlpack.is_supported_dtype(
      np.dtype("O")) is False
  x = jnp.ones(3)
  with pytest.raises(BufferError, match="below"):
    x.__dlpack__(max_version=(0, 1))
  with pytest.raises(BufferError, match="unsupported device type"):
    x.__dlpack__(dl_device=(99, 0))


def test_sharded_array_refuses():
  if sc.device_count() < 2:
    pytest.skip("needs two devices")
  mesh = sc.sharding.Mesh(np.array(sc.devices()[:2]), ("x",))
  x = sc.device_put(np.arange(4.0, dtype=np.float32),
                    sc.NamedSharding(mesh, sc.sharding.PartitionSpec("x")))
  with pytest.raises(BufferError, match="singular device"):
    x.__dlpack__()
  with pytest.raises(BufferError, match="unsharded"):
    x.__dlpack_device__()


def test_from_dlpack_on_a_non_default_device_turns_placement_checks_on(monkeypatch):
  """A GPU machine's default device is the GPU; NumPy's DLPack tensors live on the host. The
  result is committed to the host device, and jit's fast path must then check placements
  (it handed the host buffer to a GPU program before: a crash inside XLA)."""
  from stagecraft.runtime import client, dispatch
  cpu = client.default_device()
  other = type("OtherDevice", (), {"platform": "gpu", "id": 99})()
  monkeypatch.setattr(dispatch, "placement_used", [False])
  monkeypatch.setattr(client, "default_device", lambda: other)
  a = _aligned(np.arange(6).reshape(2, 3), np.float32)
  y = dlpack.from_dlpack(a)
  assert dispatch.placement_used[0] and y.committed and y.devices() == {cpu}
