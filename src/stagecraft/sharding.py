"""Shardings: how an Array's elements are laid out over devices.

`Mesh(devices, axis_names)` names the axes of an n-d grid of devices; `PartitionSpec` (`P`)
says, per array dimension, which mesh axes split it (None: not split); `NamedSharding(mesh,
spec)` pairs them; `SingleDeviceSharding(device)` is one whole copy on one device. A
dimension split over mesh axes of total size n is cut into n equal blocks (it must divide);
mesh axes a spec does not mention replicate the array. Semantics follow JAX's
`jax.sharding` classes of the same names; the runtime's own sharding objects are built from
these only to hand buffers to PJRT.

pmap's results are NamedShardings over a mesh of its devices whose axes are the mapped axes
(outermost first), split on the out_axes dimension.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Sequence

import numpy as np

from stagecraft.runtime import client
from stagecraft.runtime.jax_runtime import jax_module

__all__ = ["Mesh", "PartitionSpec", "P", "NamedSharding", "SingleDeviceSharding", "Shard",
           "make_mesh", "Sharding"]

_mesh_stack: list = []   # meshes entered with `with mesh:` (innermost last)


class Sharding:
  """The base class of shardings (NamedSharding, SingleDeviceSharding)."""


class Mesh:
  """An n-d grid of devices with a name per axis.

  Args:
    devices: an n-d array (or nested sequence) of devices, each used once.
    axis_names: one name per axis of `devices` (distinct, hashable).

  Raises:
    ValueError: when the number of names differs from `devices.ndim`, names repeat, or a
      device appears twice.
  """

  def __init__(self, devices: Any, axis_names: Sequence[Any]):
    if isinstance(axis_names, str):
      axis_names = (axis_names,)
    devs = np.empty(np.shape(np.asarray(devices, dtype=object)), dtype=object)
    devs[...] = np.asarray(devices, dtype=object)
    names = tuple(axis_names)
    if devs.ndim != len(names):
      raise ValueError(f"Mesh: devices has {devs.ndim} dimensions (shape {devs.shape}) but "
                       f"{len(names)} axis names were given: {names}. Give one name per "
                       f"axis.")
    if len(set(names)) != len(names):
      raise ValueError(f"Mesh: axis names must be distinct, got {names}.")
    ids = [d.id for d in devs.flat]
    if len(set(ids)) != len(ids):
      raise ValueError(f"Mesh: a device appears more than once: ids {ids}.")
    self.devices = devs
    self.axis_names = names

  @property
  def shape(self) -> dict:
    """{axis name: size}, in axis order."""
    return dict(zip(self.axis_names, self.devices.shape))

  @property
  def size(self) -> int:
    return int(self.devices.size)

  @property
  def device_ids(self) -> np.ndarray:
    return np.vectorize(lambda d: d.id, otypes=[int])(self.devices)

  def _key(self):
    return (tuple(d.id for d in self.devices.flat), self.devices.shape, self.axis_names)

  def __eq__(self, other):
    return isinstance(other, Mesh) and self._key() == other._key()

  def __hash__(self):
    return hash(self._key())

  def __repr__(self):
    axes = ", ".join(f"{n!r}: {s}" for n, s in self.shape.items())
    return f"Mesh({axes})"

  @functools.cached_property
  def sdy_axis_names(self) -> dict:
    """{axis name: the name a module's `sdy.mesh` gives that axis}: the name itself when it
    is printable ASCII without quotes or backslashes, else `axis<k>` (k its position), so a
    name never reaches the module text unescaped (a quote would end the string; non-ASCII
    names do not survive the runtime's attribute escaping)."""
    out, used = {}, set()
    for k, n in enumerate(self.axis_names):
      s = n if (isinstance(n, str) and n and all(0x20 <= ord(c) < 0x7F for c in n)
                and '"' not in n and "\\" not in n) else f"axis{k}"
      while s in used:
        s = f"{s}_{k}"
      used.add(s)
      out[n] = s
    return out

  @functools.cached_property
  def _runtime(self):
    jax = jax_module("jax")   # the runtime's mesh object, needed to hand buffers to PJRT
    return jax.sharding.Mesh(self.devices, tuple(str(n) for n in self.axis_names))

  @property
  def _flat_devices(self) -> tuple:
    return tuple(self.devices.flat)

  def __enter__(self):
    """`with mesh:` lets `with_sharding_constraint` and `jit`'s shardings take bare
    PartitionSpecs, meaning NamedSharding(mesh, spec)."""
    _mesh_stack.append(self)
    return self

  def __exit__(self, *exc):
    _mesh_stack.pop()
    return False


def make_mesh(axis_shapes: Sequence[int], axis_names: Sequence[Any], *,
              devices: Sequence[Any] | None = None) -> Mesh:
  """A Mesh of shape `axis_shapes` over the first `prod(axis_shapes)` devices (every
  process's devices in a distributed run, ordered by process then id).

  Args:
    axis_shapes: the size of each mesh axis (ints).
    axis_names: one name per axis.
    devices: the devices to use, in mesh order (default: as above).

  Raises:
    ValueError: when more devices are needed than there are, or the counts disagree.
  """
  shape = tuple(int(s) for s in axis_shapes)
  if isinstance(axis_names, str):
    axis_names = (axis_names,)
  if len(shape) != len(tuple(axis_names)):
    raise ValueError(f"make_mesh: {len(shape)} axis sizes {shape} but {len(tuple(axis_names))} "
                     f"axis names {tuple(axis_names)}; give one name per axis.")
  n = math.prod(shape)
  if devices is None:
    devices = sorted(client.devices(), key=lambda d: (d.process_index, d.id))
    if n > len(devices):
      raise ValueError(
          f"make_mesh: a mesh of shape {shape} needs {n} devices, but only {len(devices)} "
          f"are available. Use a smaller mesh, or start Python with "
          f"XLA_FLAGS=--xla_force_host_platform_device_count={n} for more CPU devices.")
    devices = devices[:n]
  devices = list(devices)
  if len(devices) != n:
    raise ValueError(f"make_mesh: a mesh of shape {shape} needs {n} devices, but {len(devices)} "
                     f"were given.")
  return Mesh(np.array(devices, dtype=object).reshape(shape), tuple(axis_names))


class PartitionSpec(tuple):
  """Per array dimension: None (not split), a mesh axis name, or a tuple of names (split
  over their product, the first name outermost). Trailing dimensions may be left out."""

  def __new__(cls, *entries):
    return super().__new__(cls, entries)

  def __repr__(self):
    return "PartitionSpec(" + ", ".join(repr(e) for e in self) + ")"

  def _names(self, i: int) -> tuple:
    e = self[i] if i < len(self) else None
    if e is None:
      return ()
    return tuple(e) if isinstance(e, (tuple, list)) else (e,)


P = PartitionSpec


class Shard:
  """One device's piece of an Array: `device`, `index` (a tuple of slices into the global
  array), `replica_id` (0 for the first copy of a replicated piece) and `data` (an Array on
  that device)."""
  __slots__ = ("device", "index", "replica_id", "data")

  def __init__(self, device, index, replica_id, data):
    self.device, self.index, self.replica_id, self.data = device, index, replica_id, data

  def __repr__(self):
    return (f"Shard(device={self.device!r}, index={self.index}, replica_id={self.replica_id}, "
            f"data={self.data!r})")


class NamedSharding(Sharding):
  """An array laid out over `mesh` by `spec` (see the module docstring).

  Raises:
    TypeError: if `mesh` is not a Mesh.
    ValueError: if `spec` names an axis the mesh does not have, or one twice.
  """

  def __init__(self, mesh: Mesh, spec: PartitionSpec = PartitionSpec()):
    if not isinstance(mesh, Mesh):
      raise TypeError(f"NamedSharding: `mesh` must be a stagecraft.sharding.Mesh, got "
                      f"{type(mesh).__name__}.")
    if spec is None:
      spec = PartitionSpec()
    if not isinstance(spec, PartitionSpec):
      spec = PartitionSpec(*spec) if isinstance(spec, (tuple, list)) else PartitionSpec(spec)
    used = [n for i in range(len(spec)) for n in spec._names(i)]
    for n in used:
      if n not in mesh.axis_names:
        raise ValueError(f"NamedSharding: the spec {spec} names the axis {n!r}, which the "
                         f"mesh does not have; its axes are {mesh.axis_names}.")
    if len(set(used)) != len(used):
      raise ValueError(f"NamedSharding: the spec {spec} uses a mesh axis more than once.")
    self.mesh = mesh
    self.spec = spec

  @property
  def device_set(self) -> set:
    return set(self.mesh.devices.flat)

  @property
  def is_fully_replicated(self) -> bool:
    return not any(self.spec._names(i) for i in range(len(self.spec)))

  @property
  def num_devices(self) -> int:
    return self.mesh.size

  @property
  def addressable_devices(self) -> set:
    """The devices of this process that hold a piece."""
    me = client.process_index()
    return {d for d in self.mesh.devices.flat if d.process_index == me}

  @property
  def _device_assignment(self) -> tuple:
    return self.mesh._flat_devices

  def is_equivalent_to(self, other, ndim: int) -> bool:
    """Whether `other` lays out an array of rank `ndim` the same way on the same devices."""
    if isinstance(other, SingleDeviceSharding):
      return self.mesh.size == 1 and self.mesh.devices.flat[0] == other.device
    if not isinstance(other, NamedSharding):
      return False
    return self._key() == other._key()

  def _sdy(self, ndim: int, open_dims: bool = False) -> str:
    """The Shardy sharding `<@mesh, [{"a"}, {}]>` of an array of rank `ndim` (open_dims:
    unnamed dimensions `{?}` and named ones `{"a", ?}`, left to the partitioner)."""
    dims = []
    for i in range(ndim):
      names = [f'"{self.mesh.sdy_axis_names[n]}"' for n in self.spec._names(i)]
      if open_dims:
        names.append("?")
      dims.append("{" + ", ".join(names) + "}")
    return f"<@mesh, [{', '.join(dims)}]>"

  def _key(self):
    # NB: equal layouts compare equal whatever the mesh axes are called. Computed once:
    # dispatch hashes the shardings of every argument on every call.
    k = self.__dict__.get("_key_cache")
    if k is None:
      pos = {n: i for i, n in enumerate(self.mesh.axis_names)}
      spec = tuple(tuple(pos[n] for n in self.spec._names(i)) for i in range(len(self.spec)))
      while spec and not spec[-1]:
        spec = spec[:-1]
      k = (tuple(d.id for d in self.mesh.devices.flat), self.mesh.devices.shape, spec)
      self.__dict__["_key_cache"] = k
      self.__dict__["_hash_cache"] = hash(k)
    return k

  def __eq__(self, other):
    return other is self or (isinstance(other, NamedSharding) and
                             self._key() == other._key())

  def __hash__(self):
    h = self.__dict__.get("_hash_cache")
    if h is None:
      self._key()
      h = self.__dict__["_hash_cache"]
    return h

  def __repr__(self):
    return f"NamedSharding(mesh={self.mesh!r}, spec={self.spec!r})"

  def shard_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
    """The shape of each device's piece of an array of `shape`.

    Raises:
      ValueError: when a split dimension is not divisible by its mesh axes' size.
    """
    out = []
    for i, d in enumerate(shape):
      n = math.prod(self.mesh.shape[a] for a in self.spec._names(i))
      if d % n:
        raise ValueError(f"NamedSharding {self.spec}: dimension {i} of shape {tuple(shape)} "
                         f"has size {d}, which is not divisible by {n}, the size of the mesh "
                         f"axes {self.spec._names(i)} it is split over.")
      out.append(d // n)
    return tuple(out)

  def devices_indices_map(self, shape: Sequence[int]) -> dict:
    """{device: tuple of slices} giving each device's piece of an array of `shape`."""
    block = self.shard_shape(shape)
    names = self.mesh.axis_names
    out = {}
    for pos in np.ndindex(*self.mesh.devices.shape):
      coord = dict(zip(names, pos))
      index = []
      for i, b in enumerate(block):
        k = 0
        for a in self.spec._names(i):
          k = k * self.mesh.shape[a] + coord[a]
        index.append(slice(k * b, (k + 1) * b) if self.spec._names(i) else slice(None))
      out[self.mesh.devices[pos]] = tuple(index)
    return out

  @functools.cached_property
  def _runtime(self):
    jax = jax_module("jax")   # the runtime's sharding object, handed with buffers to PJRT
    spec = [tuple(str(n) for n in self.spec._names(i)) or None for i in range(len(self.spec))]
    spec = [s[0] if s is not None and len(s) == 1 else s for s in spec]
    return jax.sharding.NamedSharding(self.mesh._runtime, jax.sharding.PartitionSpec(*spec))


class SingleDeviceSharding(Sharding):
  """The whole array on one device."""

  def __init__(self, device):
    self.device = device

  @property
  def device_set(self) -> set:
    return {self.device}

  is_fully_replicated = True

  def shard_shape(self, shape):
    return tuple(shape)

  def devices_indices_map(self, shape) -> dict:
    return {self.device: tuple(slice(None) for _ in shape)}

  num_devices = 1

  @property
  def addressable_devices(self) -> set:
    return {self.device}

  @property
  def _device_assignment(self) -> tuple:
    return (self.device,)

  def is_equivalent_to(self, other, ndim: int) -> bool:
    if isinstance(other, NamedSharding):
      return other.is_equivalent_to(self, ndim)
    return self == other

  def __eq__(self, other):
    return isinstance(other, SingleDeviceSharding) and other.device == self.device

  def __hash__(self):
    return hash(("single", self.device.id))

  def __repr__(self):
    return f"SingleDeviceSharding(device={self.device!r})"


def current_mesh() -> Mesh | None:
  """The innermost mesh entered with `with mesh:`, or None."""
  return _mesh_stack[-1] if _mesh_stack else None


def to_named(s: Any, what: str) -> NamedSharding | None:
  """`s` as a NamedSharding (a bare PartitionSpec inside `with mesh:`), or None.

  Raises:
    TypeError: for anything else; ValueError: a PartitionSpec with no mesh entered.
  """
  if s is None or isinstance(s, NamedSharding):
    return s
  if isinstance(s, PartitionSpec):
    if not _mesh_stack:
      raise ValueError(f"{what}: a bare PartitionSpec {s} needs a mesh: use "
                       f"NamedSharding(mesh, spec), or call inside `with mesh:`.")
    return NamedSharding(_mesh_stack[-1], s)
  if isinstance(s, SingleDeviceSharding):
    mesh = Mesh(np.array([s.device], dtype=object), ("_single",))
    return NamedSharding(mesh, PartitionSpec())
  device = "a device from stagecraft.devices(), " if what == "device_put" else ""
  raise TypeError(f"{what}: expected {device}a NamedSharding, a PartitionSpec (inside `with "
                  f"mesh:`) or None, got {s!r} of type {type(s).__name__}.")

