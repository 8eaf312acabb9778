"""`stagecraft.dlpack` (JAX's `jax.dlpack`): Arrays to and from other libraries through
DLPack (https://dmlc.github.io/dlpack/latest/python_spec.html).

Both directions share memory when the runtime allows it: `np.from_dlpack(x)` of a CPU Array
is a view of its buffer, and `from_dlpack(np_array)` of a C-contiguous NumPy array whose
data is 64-byte aligned (XLA's CPU alignment) is an Array over the same memory. Other NumPy
arrays (unaligned data) are copied, unless `copy=False`, which then raises. Data shared this
way must not be written afterwards by either side: Arrays are immutable.

    >>> import numpy as np
    >>> import stagecraft.numpy as jnp
    >>> x = jnp.arange(4.0)
    >>> np.from_dlpack(x)
    array([0., 1., 2., 3.], dtype=float32)
    >>> from_dlpack(np.arange(3, dtype=np.int32))
    Array([0, 1, 2], dtype=int32)
"""
from __future__ import annotations

from typing import Any

import numpy as np
from jaxlib import _jax
from jaxlib import xla_client as xc

from stagecraft import core, dtypes
from stagecraft.runtime import client, dispatch, spmd
from stagecraft.runtime.array import Array, DLDeviceType

__all__ = ["from_dlpack", "is_supported_dtype", "SUPPORTED_DTYPES"]

#: The dtypes DLPack exchange supports (as JAX's `jax.dlpack.SUPPORTED_DTYPES`).
SUPPORTED_DTYPES = frozenset(np.dtype(d) for d in (
    dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16,
    dtypes.uint32, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32,
    dtypes.float64, dtypes.complex64, dtypes.complex128, dtypes.bool_))

_PLATFORMS = {DLDeviceType.kDLCPU: "cpu", DLDeviceType.kDLCUDA: "cuda",
              DLDeviceType.kDLCUDAHost: "cuda", DLDeviceType.kDLROCM: "rocm"}


def is_supported_dtype(dtype: Any) -> bool:
  """Whether DLPack exchange supports `dtype` (bool, integers, float16/bfloat16/32/64,
  complex64/128).

  Raises:
    TypeError: for `dtype=None` (NumPy would read it as float64).
  """
  if dtype is None:
    raise TypeError(f"Expected a string or dtype-like object; got {dtype=}")
  return np.dtype(dtype) in SUPPORTED_DTYPES


def _single_device(device: Any) -> Any:
  if device is None or isinstance(device, client.Device):
    return device
  device_set = getattr(device, "device_set", None)
  if device_set is None:
    raise TypeError(f"from_dlpack: device must be a Device (stagecraft.devices()[i]), a "
                    f"Sharding over one device, or None; got {device!r}.")
  if len(device_set) > 1:
    raise ValueError(f"from_dlpack can only unpack a dlpack tensor onto a singular device, "
                     f"but a Sharding with {len(device_set)} devices was provided.")
  return next(iter(device_set))


def from_dlpack(external_array: Any, device: Any = None, copy: bool | None = None) -> Array:
  """An Array over the data of a DLPack producer (a NumPy array, a torch tensor, an Array).

  Args:
    external_array: an object with `__dlpack__` and `__dlpack_device__` methods.
    device: where the result goes (a Device, or a Sharding over one device); the result is
      then committed to it. None: the producer's device. A device other than the
      producer's needs a copy.
    copy: True: always copy; False: never copy (an error when the data must move or is not
      aligned as the runtime needs); None: share the memory when possible.

  Returns:
    An Array with the producer's shape and dtype (64-bit dtypes narrowed to 32 bits, a
    copy, when x64 is off, as everywhere in stagecraft).

  Raises:
    TypeError: `external_array` lacks the DLPack methods, or lives on a device type DLPack
      exchange here does not support.
    ValueError: `copy=False` when a copy is needed (another device, unaligned data); a
      Sharding over several devices.
  """
  device = _single_device(device)
  if not hasattr(external_array, "__dlpack__") or not hasattr(external_array,
                                                              "__dlpack_device__"):
    raise TypeError("The array passed to from_dlpack must have __dlpack__ and "
                    "__dlpack_device__ methods.")
  dl_type, dev_id = external_array.__dlpack_device__()
  platform = _PLATFORMS.get(int(dl_type))
  if platform is None:
    raise TypeError(f"Array passed to from_dlpack is on unsupported device type "
                    f"(DLDeviceType: {dl_type}, array: {external_array}")
  source = client.get_backend(platform).device_from_local_hardware_id(int(dev_id))
  moves = device is not None and device != source
  if moves and copy is not None and not copy:
    raise ValueError(f"Specified device={device!r} which requires a copy since the source "
                     f"device is {source!r}, however copy=False. Set copy=True or copy=None "
                     f"to perform the requested operation.")
  stream = None
  if platform != "cpu" and int(dl_type) != DLDeviceType.kDLCUDAHost:
    try:
      stream = source.get_stream_for_external_ready_events()
    except xc.XlaRuntimeError as e:   # NB: runtimes without external streams
      if "UNIMPLEMENTED" not in str(e):
        raise
  capsule = external_array.__dlpack__(stream=stream)
  try:
    buf = _jax.dlpack_managed_tensor_to_buffer(capsule, source, stream, copy, int(dl_type))
  except xc.XlaRuntimeError as e:
    msg = str(e)
    if "is not aligned to" in msg:
      raise ValueError(
          f"Specified input which requires a copy since the source data buffer "
          f"{msg[msg.index('is not aligned to'):].strip()}  However copy=False. Set copy=True "
          f"or copy=None to perform the requested operation.") from None
    raise
  dtype = np.dtype(buf.dtype)
  aval = core.ShapedArray(tuple(buf.shape), dtype, False)
  default = client.default_device()
  if source != default:
    # NB: an Array committed to another device than the default one: jit's fast path must
    # check placements from now on (as device_put's do); else a GPU program would be handed
    # a host buffer (a crash inside XLA, seen on a GPU machine)
    dispatch.placement_used[0] = True
  out = Array(buf, aval, None if source == default else source)
  if dtypes.canonicalize_dtype(dtype) != dtype:   # x64 off: narrowed, on the host (a copy)
    out = spmd.device_put(np.asarray(out).astype(dtypes.canonicalize_dtype(dtype)),
                          None if source == default else source)
  elif copy:
    # NB: the runtime may share the producer's memory even when asked to copy.
    out = spmd.device_put(np.array(out, copy=True), None if source == default else source)
  if device is not None:
    out = spmd.device_put(out, device)
  return out
