"""`Array`: one device buffer and its aval. Operators and methods are attached by
`stagecraft.numpy` (they route to primitives); this module holds what needs the buffer."""
from __future__ import annotations

import abc
import contextvars
import ctypes
import enum
import gc
import math
import sys as _sys
import weakref
from typing import Any

import numpy as np
from jaxlib import _jax
from jaxlib import xla_client as xc

from stagecraft import core, dtypes, tree_util
from stagecraft.config import config as _config
from stagecraft.errors import DonatedBufferError
from stagecraft.layout import Format, Layout
from stagecraft.runtime import client, transfer_guard
from stagecraft.sharding import Shard, SingleDeviceSharding

#: Arrays put on the default device explicitly (`device_put(x, devices()[0])`): committed,
#: so that meeting an Array on another device is an error rather than a silent transfer.
#: {id: weak reference} (Arrays are unhashable).
committed_to_default: dict[int, Any] = {}


def mark_committed(a: "Array") -> None:
  key = id(a)
  committed_to_default[key] = weakref.ref(a, lambda _, k=key: committed_to_default.pop(k, None))

__all__ = ["Array", "device_get", "copy_to_host_async", "live_arrays", "DLDeviceType"]


class _Capsule:
  """A DLPack capsule in the protocol's clothes, for `np.from_dlpack`."""
  __slots__ = ("capsule",)

  def __init__(self, capsule):
    self.capsule = capsule

  def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
    return self.capsule

  def __dlpack_device__(self):
    return 1, 0   # kDLCPU


def _host_view(buf) -> np.ndarray:
  """A NumPy view of a CPU buffer of a NumPy dtype (through DLPack; the view keeps the
  buffer alive). NB: jaxlib's own conversion (`_single_device_array_to_np_array_did_copy`)
  builds a JAX aval for the buffer, importing `jax.core` (all of jax) the first time."""
  buf.block_until_ready()
  return np.from_dlpack(_Capsule(_jax.buffer_to_dlpack_managed_tensor(buf)))



class _DLTensor(ctypes.Structure):
  """DLPack's `DLTensor` (dlpack.h), the head of a `DLManagedTensor`."""
  _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
              ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
              ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
              ("shape", ctypes.POINTER(ctypes.c_int64)),
              ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _host_copy(buf, aval) -> np.ndarray | None:
  """A copy of a CPU buffer whose dtype NumPy's DLPack import does not know but whose
  elements take whole bytes (bfloat16, the float8s), read through the buffer's DLPack
  tensor (data pointer, shape and strides); None for packed sub-byte dtypes (int4,
  float4_e2m1fn, ...), which DLPack does not describe, or a layout that is not row-major."""
  dt = np.dtype(aval.dtype)
  if dtypes.itemsize_bits(dt) < 8:
    return None   # NB: XLA packs sub-byte elements
  buf.block_until_ready()
  n = math.prod(aval.shape)
  if n == 0:
    return np.zeros(aval.shape, dt)
  capsule = _jax.buffer_to_dlpack_managed_tensor(buf)   # NB: its destructor frees it
  t = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
  if t.bits != dt.itemsize * 8 or t.lanes != 1 or t.ndim != len(aval.shape):
    return None
  if t.strides:   # NB: NULL strides: compact row-major
    want = [int(np.prod(aval.shape[i + 1:])) for i in range(t.ndim)]
    if [t.strides[i] for i in range(t.ndim)] != want:
      return None
  raw = ctypes.string_at(t.data + t.byte_offset, n * dt.itemsize)
  del capsule
  return np.frombuffer(raw, dt).reshape(aval.shape)


def buffer_devices(buf) -> set:
  """The devices of a runtime buffer (a jaxlib array), read from its sharding: jaxlib's own
  `devices()` method is one JAX's Python layer adds, absent while jax is not imported."""
  sh = buf._sharding
  dev = getattr(sh, "_device", None)
  return {dev} if dev is not None else set(sh._internal_device_list)

#: How `repr(Array)` reads: None for the class's own name; the JAX runner
#: (`stagecraft.compat.install`) sets JAX's concrete class name, `jaxlib._jax.ArrayImpl`,
#: which JAX programs print (`type(x)` in JAX's "Thinking in JAX").
class_repr: list = [None]


class _ArrayMeta(abc.ABCMeta):
  def __repr__(cls):
    if cls is Array and class_repr[0] is not None:
      return f"<class {class_repr[0]!r}>"
    return super().__repr__()


class Array(metaclass=_ArrayMeta):
  """An immutable array on a device.

  Every tracer is a virtual subclass (`isinstance(tracer, Array)` is True inside `jit`,
  `grad`, `vmap` and `pmap`, as `jax.Array` is for JAX's tracers): libraries branch on it.

  Attributes:
    aval: its ShapedArray (shape, dtype, weak type).
  Conversions (`np.asarray`, `float()`, `item()`, printing) copy the value to the host once
  and cache it.
  """
  # NB: `_deleted` is set only by delete() (left unset otherwise: no cost per Array).
  # NB: `_laid` is set only on an Array whose data has a non-default memory layout (made by
  # `device_put` with a Format or by a jit with Format out_shardings): it holds that buffer,
  # and `_buf` a copy in the default layout, which every other program reads (so layouts cost
  # nothing where unused, and no program ever meets a layout it was not compiled for).
  # NB: `__dict__`: other attributes may be set, as on JAX's ArrayImpl (Keras sets
  # `_keras_mask` on the arrays a masking layer returns)
  __slots__ = ("_buf", "aval", "_npy", "_device", "_sharding", "_deleted", "_laid",
               "__weakref__", "__dict__")
  __array_priority__ = 100

  def __init__(self, buf: Any, aval: core.ShapedArray, device: Any = None,
               sharding: Any = None):
    self._buf = buf
    self.aval = aval
    self._npy = None
    self._device = device   # NB: None means the default device
    # A NamedSharding for an Array split over several devices (`_buf` is then the runtime's
    # multi-device array); None for one buffer on one device.
    self._sharding = sharding

  shape = property(lambda self: self.aval.shape)
  dtype = property(lambda self: self.aval.dtype)

  @property
  def __numpy_dtype__(self) -> np.dtype:
    """NumPy's (>= 2.4) hook for `np.dtype(arr)`: deprecated, as in JAX 0.10.2 (a
    DeprecationWarning with JAX's text; use `arr.dtype`)."""
    import warnings  # noqa: PLC0415 (only on this deprecated path)
    warnings.warn("Implicit conversion of an array to a dtype is deprecated; rather than "
                  "dtype=arr use dtype=arr.dtype. In the future this will result in an error.",
                  DeprecationWarning, stacklevel=2)
    return self.aval.dtype
  ndim = property(lambda self: len(self.aval.shape))
  size = property(lambda self: self.aval.size)
  weak_type = property(lambda self: self.aval.weak_type)

  @property
  def nbytes(self) -> int:
    return self.aval.size * self.aval.dtype.itemsize

  @property
  def itemsize(self) -> int:
    return self.aval.dtype.itemsize

  def _physical(self) -> "Array":
    """This Array's data as an Array of its physical type (the key data `u32[*s, 2]` of
    typed keys `key<fry>[*s]`, sharing the buffer); the Array itself for other dtypes."""
    phys = core.physical_aval(self.aval)
    return self if phys is self.aval else Array(self._buf, phys, self._device, self._sharding)

  def clone(self) -> "Array":
    """A copy of this Array in new buffers (JAX's `Array.clone`; concrete Arrays only: a
    tracer has no `clone`, as in JAX)."""
    return self.copy()

  def on_device_size_in_bytes(self) -> int:
    """The bytes this Array's buffers take on its devices (all shards; a replicated Array
    counts each copy), as the runtime reports them (JAX's `on_device_size_in_bytes`)."""
    return sum(piece.on_device_size_in_bytes() for piece in self._check_buf()._arrays)

  def platform(self) -> str:
    """The platform of this Array's devices, e.g. `'cpu'` (JAX's `Array.platform()`)."""
    return next(iter(self.devices())).platform

  @property
  def device_buffer(self):
    raise AttributeError("arr.device_buffer has been deprecated. Use arr.addressable_data(0)")

  @property
  def device_buffers(self):
    raise AttributeError("arr.device_buffers has been deprecated. Use [x.data for x in "
                         "arr.addressable_shards]")

  # -- buffer access

  def _check_buf(self):
    if self._buf is None:
      shape = ",".join(map(str, self.aval.shape))
      deleted = f"Array has been deleted with shape={self.aval.dtype.name}[{shape}]."
      if getattr(self, "_deleted", False):
        raise RuntimeError(deleted)
      # NB: JAX's message first (users match it), then why and what to do
      raise DonatedBufferError(
          f"{deleted} It was donated to a jitted computation (donate_argnums) and its "
          f"buffer is gone. Use the computation's outputs instead, or stop donating the "
          f"argument.")
    return self._buf

  def _guard_fetch(self) -> None:
    # a read into host memory that the device-to-host transfer guard may refuse (explicit
    # inside `device_get`)
    if self._npy is None:
      dev = next(iter(self.devices()))
      transfer_guard.device_to_host(self.aval, dev, _explicit_fetch.get())

  @property
  def _value(self) -> np.ndarray:
    v = self._npy
    if v is None and transfer_guard.active[0]:
      self._guard_fetch()
    if v is None and self._sharding is not None:
      v = self._npy = _gather(self)
    elif v is None:
      buf = self._check_buf()
      if 0 in self.aval.shape and self.aval.dtype.kind in "biufc":
        # empty: no data to read (and a token's buffer, an empty bool Array, has none)
        buf.block_until_ready()
        v, did_copy = np.zeros(self.aval.shape, self.aval.dtype), True
      else:
        v = None
        dt = self.aval.dtype
        if isinstance(dt, np.dtype) and not client.uses_jax():
          if dt.isbuiltin == 1 and dt.kind in "biufc":   # NB: 2: a user-defined dtype
            v, did_copy = _host_view(buf), False
          elif dt.kind in "fV":   # NB: ml_dtypes' (bfloat16, float8s), which DLPack lacks
            v, did_copy = _host_copy(buf, self.aval), True
        if v is None:   # NB: jaxlib's copy (which imports jax): sub-byte dtypes
          v, did_copy = buf._single_device_array_to_np_array_did_copy()
      if not did_copy or v.flags.writeable:
        v = v.view()
        v.flags.writeable = False
      self._npy = v
    return v

  def __array__(self, dtype=None, copy=None):
    v = self._value
    if dtype is not None and np.dtype(dtype) != v.dtype:
      return v.astype(dtype)
    if copy:
      return v.copy()
    return v

  def block_until_ready(self) -> "Array":
    self._check_buf().block_until_ready()
    return self

  def is_ready(self) -> bool:
    return self._check_buf().is_ready()

  def unsafe_buffer_pointer(self) -> int:
    """The device address of this Array's buffer (JAX's `Array.unsafe_buffer_pointer`: an
    address that a donated input's buffer keeps in the output that reuses it).

    Raises:
      RuntimeError / DonatedBufferError: for a deleted or donated Array, as `_check_buf`.
    """
    return self._check_buf().unsafe_buffer_pointer()

  def is_deleted(self) -> bool:
    return self._buf is None or self._buf.is_deleted()

  def delete(self) -> None:
    """Frees the device buffer now; using the Array afterwards raises RuntimeError."""
    if self._buf is not None:
      self._buf.delete()
      self._buf = None
      self._deleted = True
      laid = getattr(self, "_laid", None)
      if laid is not None:
        laid.delete()
        self._laid = None

  def devices(self) -> set:
    if self._sharding is not None:
      return self._sharding.device_set
    return buffer_devices(self._check_buf())

  @property
  def device(self):
    """The Array's device when it lies on one device; otherwise its sharding (JAX's)."""
    devs = self.devices()
    if len(devs) == 1:
      return next(iter(devs))
    return self._sharding

  @property
  def sharding(self):
    """The layout over devices: a NamedSharding for an Array split over several devices,
    else a SingleDeviceSharding."""
    if self._sharding is not None:
      return self._sharding
    return SingleDeviceSharding(next(iter(self.devices())))

  @property
  def format(self):
    """The Array's `Format`: its memory layout (as the runtime reports it) and its sharding;
    the layout is None once the Array is deleted."""
    if self._buf is None:   # deleted (or donated): no layout, the sharding it had
      return Format(None, self._sharding or SingleDeviceSharding(
          self._device if self._device is not None else client.default_device()))
    buf = getattr(self, "_laid", None)
    if buf is None:
      buf = self._buf
    return Format(Layout.from_pjrt_layout(buf._pjrt_layout), self.sharding)

  @property
  def is_fully_replicated(self) -> bool:
    return self._sharding is None or self._sharding.is_fully_replicated

  @property
  def addressable_shards(self) -> list:
    """One `Shard` per device holding a piece of this Array (device order of the sharding):
    its device, index (slices into this Array), replica_id and data (an Array)."""
    if self._sharding is None:
      idx = tuple(slice(None) for _ in self.aval.shape)
      return [Shard(self.device, idx, 0, self)]
    shards = []
    rids = _replica_ids(self)
    for (dev, index), buf in zip(_indices(self), self._check_buf()._arrays):
      rid = rids[dev]
      shape = tuple(len(range(*s.indices(n))) for s, n in zip(index, self.aval.shape))
      default = dev == _default_device()
      shards.append(Shard(dev, index, rid, Array(buf, self.aval.update(shape=shape),
                                                 None if default else dev)))
    return shards

  @property
  def committed(self) -> bool:
    """Whether the Array stays where it is (JAX's commitment): True when it was placed
    explicitly (`device_put(x, device_or_sharding)`), or computed from such Arrays off the
    default device or over a mesh; False for values made without a device (`jnp.ones`,
    `device_put(x)`), which computations may move."""
    self._check_buf()
    return (self._sharding is not None or self._device is not None
            or id(self) in committed_to_default)

  # -- Python conversions (concrete: copy to host)

  def item(self, *args):
    return self._value.item(*args)

  def tolist(self):
    return self._value.tolist()

  def __bool__(self):
    return bool(self._value)

  def _scalar_only(self):
    # JAX's words (its arrays refuse even one-element arrays here, where NumPy converts).
    if self.aval.shape:
      raise TypeError(f"Only scalar arrays can be converted to Python scalars; got "
                      f"arr.ndim={len(self.aval.shape)}")

  def __int__(self):
    self._scalar_only()
    return int(self._value)

  def __float__(self):
    self._scalar_only()
    return float(self._value)

  def __complex__(self):
    self._scalar_only()
    return complex(self._value)

  def __index__(self):
    if not dtypes.is_integer(self.aval.dtype) or self.aval.shape:
      raise TypeError("Only integer scalar arrays can be converted to a scalar index.")
    return int(self._value)

  def __len__(self):
    if not self.aval.shape:
      raise TypeError("len() of unsized object")   # NumPy's and JAX's words
    return self.aval.shape[0]

  def __iter__(self):
    if not self.aval.shape:
      raise TypeError("iteration over a 0-d array")
    return (self[i] for i in range(self.aval.shape[0]))

  # NB: as JAX's Array, not hashable: `isinstance(x, collections.abc.Hashable)` is False
  # and `hash(x)` raises Python's TypeError ("unhashable type: 'Array'").
  __hash__ = None

  def __format__(self, spec):
    if self.aval.shape:
      return format(str(self), spec)
    return format(self._value.item(), spec)

  def __repr__(self):
    if self._buf is None:
      self._check_buf()   # NB: as JAX's, a deleted (donated) array has no repr: RuntimeError
    v = self._value
    weak = ", weak_type=True" if self.aval.weak_type else ""
    dtype = f"dtype={self.aval.dtype.name}{weak}"
    if v.size == 0:
      return f"Array([], shape={self.aval.shape}, {dtype})"
    width = np.get_printoptions()["linewidth"]
    body = np.array2string(v, separator=", ", prefix="Array(", suffix=",",
                           max_line_width=width)
    # As JAX's: where the dtype would pass the line width it follows six spaces (JAX's
    # repr keeps it on the same line).
    last = len(body) - body.rfind("\n") + 1
    sep = " " * 6 if last + len(dtype) + 2 > width else " "
    return f"Array({body},{sep}{dtype})"

  def __str__(self):
    return str(self._value)

  def __reduce__(self):
    return (_reconstruct, (np.array(self._value), self.aval.weak_type))

  def copy_to_host_async(self):
    """Starts copying this Array's device buffers to the host (a prefetch for a later
    `np.asarray`); returns at once. Each single-device buffer is asked directly (the runtime
    array's own Python method reads JAX's sharding API, which stagecraft's runtime sharding
    does not have).

    Raises:
      RuntimeError / DonatedBufferError: for a deleted or donated Array, as `_check_buf`.
    """
    buf = self._check_buf()
    if transfer_guard.active[0] and not _explicit_fetch.get():   # NB: device_get's prefetch
      self._guard_fetch()                                       # is guarded when read
    for piece in buf._arrays:
      piece._copy_single_device_array_to_host_async()

  # -- DLPack (the Python array API's exchange protocol; JAX's `jax.Array.__dlpack__`)

  def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                 dl_device: tuple[int, int] | None = None, copy: bool | None = None):
    """A DLPack capsule of this Array's device buffer, for `np.from_dlpack`, torch, ...

    Without `copy` or `dl_device` the capsule shares this Array's memory (zero-copy); the
    consumer must not write to it (Arrays are immutable).

    Args:
      stream: the consumer's stream to synchronize with (GPU; None on CPU).
      max_version: the highest DLPack version `(major, minor)` the consumer reads; versions
        below (0, 5) are refused.
      dl_device: `(DLDeviceType, device id)` where the consumer wants the data (a copy when
        it is not this Array's device).
      copy: True: always a fresh copy; False: never copy (an error if a copy is needed);
        None: copy only when needed.

    Raises:
      BufferError: for an Array split over several devices, an unsupported `dl_device`
        type, or `max_version` below (0, 5).
      ValueError: `copy=False` with a `dl_device` other than this Array's device.
    """
    if self._sharding is not None:
      raise BufferError(
          f"to_dlpack can only pack a dlpack tensor from an array on a singular device, but "
          f"an array with a Sharding over {len(self._sharding.device_set)} devices was "
          f"provided. Gather it first (`device_put(x, device)`) or export its shards "
          f"(`x.addressable_shards[i].data`).")
    if max_version is not None and tuple(max_version) < _MIN_DLPACK_VERSION:
      raise BufferError(f"stagecraft does not support any DLPack version below "
                        f"{_MIN_DLPACK_VERSION} but version ({max_version}) was requested.")
    buf = self._check_buf()
    src = next(iter(buffer_devices(buf)))
    target = src
    if dl_device is not None:
      dl_type, hw_id = dl_device
      platform = _DL_DEVICE_TO_PLATFORM.get(int(dl_type))
      if platform is None:
        raise BufferError(f"The device specification passed to to_dlpack contains an "
                          f"unsupported device type (DLDeviceType: {dl_type})")
      target = client.get_backend(platform).device_from_local_hardware_id(int(hw_id))
    if target != src:
      if copy is not None and not copy:
        raise ValueError(
            f"Specified device={target!r} which requires a copy since the source device is "
            f"{src!r}, however copy=False. Set copy=True or copy=None to perform the "
            f"requested operation.")
      buf = _put_copy(self._value, self.aval, target)
    elif copy:
      buf = _put_copy(self._value, self.aval, src)
    return _jax.buffer_to_dlpack_managed_tensor(buf, stream=stream)

  @property
  def __cuda_array_interface__(self) -> dict:
    """The CUDA array interface of a single-device Array on a GPU (the runtime buffer's).

    Raises:
      AttributeError: elsewhere (so `hasattr` is False), in JAX's words."""
    buf = self._buf if self._sharding is None else None
    if buf is None or next(iter(buffer_devices(buf))).platform not in ("cuda", "gpu"):
      raise AttributeError("__cuda_array_interface__ is only defined for GPU buffers.")
    return buf.__cuda_array_interface__

  def __dlpack_device__(self) -> tuple[DLDeviceType, int]:
    """`(DLDeviceType, device id)` of this Array's buffer (DLPack protocol).

    Raises:
      BufferError: for an Array split over several devices, or a platform DLPack cannot
        name (only CPU, CUDA and ROCm can).
    """
    if self._sharding is not None:
      raise BufferError("__dlpack__ only supported for unsharded arrays.")
    dev = next(iter(buffer_devices(self._check_buf())))
    if dev.platform == "cpu":
      return DLDeviceType.kDLCPU, 0
    if dev.platform in ("gpu", "cuda", "rocm"):
      version = dev.client.platform_version
      if "cuda" in version:
        kind = DLDeviceType.kDLCUDA
      elif "rocm" in version:
        kind = DLDeviceType.kDLROCM
      else:
        raise BufferError(f"Unknown GPU platform for __dlpack__: {version}")
      return kind, dev.local_hardware_id
    raise BufferError(f"__dlpack__ device only supported for CPU and GPU, got platform: "
                      f"{dev.platform}")


Array.register(core.Tracer)


class DLDeviceType(enum.IntEnum):
  """DLPack's device types (the first item of `__dlpack_device__()`)."""
  kDLCPU = 1
  kDLCUDA = 2
  kDLCUDAHost = 3
  kDLROCM = 10


_MIN_DLPACK_VERSION = (0, 5)
_DL_DEVICE_TO_PLATFORM = {DLDeviceType.kDLCPU: "cpu", DLDeviceType.kDLCUDA: "cuda",
                          DLDeviceType.kDLCUDAHost: "cuda", DLDeviceType.kDLROCM: "rocm"}


def _put_copy(value: np.ndarray, aval: core.ShapedArray, device: Any) -> Any:
  """A fresh buffer on `device` holding `value` (a host round trip: the runtime has no
  device-to-device copy of one buffer)."""
  return xc.batched_device_put(aval, client.single_device_sharding(device), [value],
                               [device], True, True, enable_x64=True)


def _default_device():
  return client.default_device()


def _indices(x: Array) -> list:
  """(device, index) per buffer of a split Array (the devices of this process), in the order
  of its runtime buffers."""
  m = x._sharding.devices_indices_map(x.aval.shape)
  me = client.process_index()
  return [(d, m[d]) for d in x._sharding.mesh.devices.flat if d.process_index == me]


def _replica_ids(x: Array) -> dict:
  """{device: replica_id} over all the sharding's devices (every process's, in mesh order):
  the k-th device holding a given piece has replica_id k, as in JAX."""
  m = x._sharding.devices_indices_map(x.aval.shape)
  seen, out = {}, {}
  for d in x._sharding.mesh.devices.flat:
    key = tuple(s.indices(n)[:2] for s, n in zip(m[d], x.aval.shape))
    out[d] = seen[key] = seen.get(key, -1) + 1
  return out


def _gather(x: Array) -> np.ndarray:
  """The host value of a split Array: each distinct piece copied once.

  Raises:
    RuntimeError: if some pieces live only on devices of other processes (a distributed
      run).
  """
  me = client.process_index()
  m = x._sharding.devices_indices_map(x.aval.shape)

  def pieces(ds):
    return {tuple(s.indices(n)[:2] for s, n in zip(m[d], x.aval.shape)) for d in ds}

  devs = list(x._sharding.mesh.devices.flat)
  # NB: as in JAX, an Array spanning processes can be read when this process holds every
  # piece (e.g. a replicated one).
  if (any(d.process_index != me for d in devs)
      and pieces(devs) != pieces(d for d in devs if d.process_index == me)):
    raise RuntimeError(
        f"This Array ({x.aval.str_short()}) spans devices of other processes; only this "
        f"process's pieces can be read: use `x.addressable_shards` (each shard's `.data`).")
  out = np.empty(x.aval.shape, x.aval.dtype)
  done = set()
  for (dev, index), buf in zip(_indices(x), x._check_buf()._arrays):
    key = tuple((s.start, s.stop) for s in index)
    if key not in done:
      done.add(key)
      out[index] = buf._single_device_array_to_np_array_did_copy()[0]
  out.flags.writeable = False
  return out


def _reconstruct(value: np.ndarray, weak_type: bool) -> Array:
  """An unpickled Array: its value on the default device, uncommitted; as JAX's, a 64-bit
  one unpickled with x64 off is narrowed (float64 -> float32, ...)."""
  dt = dtypes.canonicalize_dtype(value.dtype)
  if dt != value.dtype:
    value = value.astype(dt)
  aval = core.ShapedArray(value.shape, value.dtype, weak_type)
  dev = client.default_device()
  buf = xc.batched_device_put(aval, client.single_device_sharding(dev), [value], [dev], False,
                              True, enable_x64=True)
  return Array(buf, aval)


core.pytype_aval_mappings[Array] = lambda x: x.aval


#: Whether the host reads now are explicit ones (`device_get`), for the transfer guards.
_explicit_fetch: contextvars.ContextVar[bool] = contextvars.ContextVar("explicit_fetch",
                                                                     default=False)


def copy_to_host_async(x: Any) -> Any:
  """Starts copying every Array leaf of the pytree `x` to the host (without waiting); later
  conversions (`np.asarray`, `device_get`) then find the data there. Tracers and leaves
  without a `copy_to_host_async` method are left alone. Returns `x`."""
  for leaf in tree_util.tree_leaves(x):
    if isinstance(leaf, core.Tracer):
      continue
    copy = getattr(leaf, "copy_to_host_async", None)
    if copy is not None:
      copy()
  return x


def _to_host(x: Any) -> Any:
  if isinstance(x, core.Tracer) or (type(x) is Array
                                    and not isinstance(x.aval.dtype, np.dtype)):
    return x   # NB: typed keys stay keys, as JAX's device_get gives them
  to_array = getattr(x, "__array__", None)
  return x if to_array is None else to_array()


def device_get(x: Any) -> Any:
  """Copies the Arrays of the pytree `x` to the host as NumPy arrays (read-only views, as
  JAX's); other leaves with `__array__` become NumPy arrays too, and the rest (Python scalars,
  `None`) are returned unchanged. The copies of all leaves are started before any is waited
  for.

    >>> import stagecraft.numpy as jnp
    >>> device_get({'a': jnp.arange(3), 'n': 1})
    {'a': array([0, 1, 2], dtype=int32), 'n': 1}
  """
  token = _explicit_fetch.set(True)   # NB: explicit reads, for the transfer guards
  try:
    copy_to_host_async(x)
    return tree_util.tree_map_traced(_to_host, x)   # typed keys: their data, on the host
  finally:
    _explicit_fetch.reset(token)


def live_arrays(platform: str | None = None) -> list[Array]:
  """The Arrays alive now (not deleted or donated) on `platform`'s devices (None: the
  default backend's), including those held by caches (constants of traced functions).

  Found by walking the objects the garbage collector tracks, so that creating an Array costs
  nothing extra; a call takes time proportional to the number of live Python objects.
  """
  platform = platform or client.get_backend().platform
  out = []
  for o in gc.get_objects():
    if type(o) is Array and o._buf is not None and not o._buf.is_deleted():
      devs = o._sharding.device_set if o._sharding is not None else buffer_devices(o._buf)
      if any(d.platform == platform for d in devs):
        out.append(o)
  return out


class JaxArray(abc.ABC):
  """`jax.Array` as the JAX runner (`stagecraft.compat.install`) serves it: an abstract class
  named as JAX's (`<class 'jax.jaxlib._jax.Array'>`, `__name__` `jaxlib._jax.Array`, which
  jaxtyping and `typing` print in annotations) of which `Array` and every tracer are virtual
  subclasses, so `isinstance(x, jax.Array)` is unchanged. It takes no arguments, as JAX's.
  Outside the runner `stagecraft.Array` is the concrete class itself."""
  __slots__ = ()


JaxArray.__name__ = JaxArray.__qualname__ = "jaxlib._jax.Array"
JaxArray.__module__ = "jax"


def name_as_jax(on: bool) -> None:
  """Names the concrete class as JAX's (`ArrayImpl` of `jaxlib._jax`, whose `__name__` and
  `__qualname__` libraries print as `type(x).__name__`) while `on`; as stagecraft's
  (`stagecraft.runtime.array.Array`) otherwise. Sets `class_repr` too."""
  Array.__name__ = Array.__qualname__ = "ArrayImpl" if on else "Array"
  Array.__module__ = "jaxlib._jax" if on else __name__
  class_repr[0] = "jaxlib._jax.ArrayImpl" if on else None


JaxArray.register(Array)


# ---------------------------------------------------------------------------
# jax_array_garbage_collection_guard: an Array freed by Python's cycle collector (not by
# reference counting) is reported, as JAX's ("log": a line on stderr). While the option is
# "allow" (the default) Arrays have no finalizer at all.

_GC_MESSAGE = ("RuntimeError: `jax.Array` was deleted by the Python garbage collector "
               "instead of reference counting. Break the reference cycle that delays the "
               "deletion of this `jax.Array` to avoid hogging memory.")
_in_collection = [False]


def _gc_phase(phase: str, info: dict) -> None:
  _in_collection[0] = phase == "start"


def _report_collected(self) -> None:
  # NB: a finalizer must not raise; stderr is where JAX's runtime writes the line
  if _in_collection[0] and self._buf is not None:
    stream = _sys.stderr   # NB: None at interpreter exit
    if stream is not None:
      stream.write(_GC_MESSAGE + "\n")


def _on_gc_guard(key: str, value) -> None:
  if key != "array_garbage_collection_guard":
    return
  on = value in ("log", "fatal")
  if on and "__del__" not in Array.__dict__:
    Array.__del__ = _report_collected
    if _gc_phase not in gc.callbacks:
      gc.callbacks.append(_gc_phase)
  elif not on and "__del__" in Array.__dict__:
    del Array.__del__


_config.add_update_listener(_on_gc_guard)
_on_gc_guard("array_garbage_collection_guard", _config.read("array_garbage_collection_guard"))
