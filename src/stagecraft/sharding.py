"""Shardings: how an Array's elements are laid out over devices, and the mesh in context.

`Mesh(devices, axis_names, axis_types)` names the axes of an n-d grid of devices (each axis
`AxisType.Explicit`, `Auto` or `Manual`); `AbstractMesh(axis_sizes, axis_names, axis_types)`
is its shape without devices; `PartitionSpec` (`P`) says, per array dimension, which mesh
axes split it (None: not split); `NamedSharding(mesh, spec)` pairs them;
`SingleDeviceSharding(device)` is one whole copy on one device. A dimension split over mesh
axes of total size n is cut into n equal blocks (it must divide); mesh axes a spec does not
mention replicate the array. Semantics and reprs follow JAX 0.10.2's `jax.sharding` classes of
the same names; the runtime's own sharding objects are built from these only to hand buffers
to PJRT.

The mesh in context: `set_mesh(mesh)` (a global setter, or a context manager that restores
the previous mesh on exit) sets the concrete mesh (`get_mesh()`) and its abstract mesh
(`get_abstract_mesh()`); `use_abstract_mesh(m)` sets only the latter. Under them a bare
PartitionSpec means `NamedSharding(mesh, spec)` (device_put, jit's shardings,
with_sharding_constraint, shard_map's mesh). The older `with mesh:` does the same for bare
specs (JAX 0.10 deprecates it; it is kept for programs written against earlier JAX).

pmap's results are NamedShardings over a mesh of its devices whose axes are the mapped axes
(outermost first), split on the out_axes dimension.
"""
from __future__ import annotations

import collections
import contextvars
import dataclasses
import enum
import functools
import math
import warnings
from typing import Any, Sequence

import numpy as np

from stagecraft.runtime import client

__all__ = ["Mesh", "AbstractMesh", "AbstractDevice", "AxisType", "PartitionSpec", "P",
           "NamedSharding", "SingleDeviceSharding", "Shard", "make_mesh", "Sharding",
           "set_mesh", "get_mesh", "get_abstract_mesh", "use_abstract_mesh",
           "unsharded", "check_out_sharding", "type_sharding", "spec_entries",
           "ShardingTypeError", "make_single_device_sharding"]

_mesh_stack: list = []   # meshes entered with `with mesh:` (innermost last)
# Reads the option `jax_disallow_mesh_context_manager`; `stagecraft.pjit` (above config, which
# this layer may not import) installs the reader when it is imported.
mesh_context_manager_disallowed = lambda: False  # noqa: E731

# The mesh set by `set_mesh` (concrete) and its abstract mesh (also set by
# `use_abstract_mesh` and, while a shard_map body is traced, with its manual axes typed
# Manual). None: no mesh. Per thread (and per asyncio task), as JAX's are per thread.
_concrete_mesh: contextvars.ContextVar = contextvars.ContextVar("stagecraft_mesh",
                                                                default=None)
_abstract_mesh: contextvars.ContextVar = contextvars.ContextVar("stagecraft_abstract_mesh",
                                                                default=None)

# NB: called when `set_mesh` sets a mesh: eager operations then run over it, so dispatch
# (runtime layer, installed there) must look at placement.
on_set_mesh: list = [lambda: None]

# NB: whether no transformation is tracing now (`set_mesh`/`get_mesh` are refused under
# jit, as JAX's). The platform layer cannot see traces: stagecraft.lax.spmd installs the
# check (core's current trace is the evaluation trace).
outside_trace: list = [lambda: True]

# NB: JAX's `jax.sharding.reshard`, `auto_axes` and `explicit_axes` trace primitives, which
# live above this layer: stagecraft.lax.spmd (reshard) and stagecraft.pjit (auto_axes,
# explicit_axes) install them here, served by `__getattr__`.
late_names: dict = {}


def __getattr__(name: str):
  if name in late_names:
    return late_names[name]
  raise AttributeError(f"module 'stagecraft.sharding' has no attribute '{name}'")


def __dir__():
  return sorted({*globals(), *late_names})



class IndivisibleError(ValueError):
  """A sharding splits a dimension over mesh axes whose size does not divide it (JAX's
  `IndivisibleError`)."""

class ShardingTypeError(Exception):
  """A program whose shardings in types do not fit (JAX's `ShardingTypeError`): e.g.
  `a + b` with `a: f32[8@x,4]` and `b: f32[8@y,4]`, or a matmul contracting a dimension
  split on both sides without `out_sharding=`. Fix: `reshard` an operand, or pass
  `out_sharding=` to the operation."""


class AxisType(enum.Enum):
  """How a mesh axis is used: `Explicit` (JAX's default for `make_mesh`: shardings along it
  are part of array types), `Auto` (the compiler's partitioner decides) or `Manual` (inside
  shard_map: each device holds its own piece). Values and reprs are JAX's."""
  Auto = enum.auto()
  Explicit = enum.auto()
  Manual = enum.auto()

  def __repr__(self):
    return self.name


def _normalize_axis_types(axis_names: tuple, axis_types: Any, where: str) -> tuple:
  if axis_types is None:
    axis_types = (AxisType.Auto,) * len(axis_names)
  if not isinstance(axis_types, tuple):
    axis_types = (axis_types,)
  if not all(isinstance(a, AxisType) for a in axis_types):
    raise TypeError(f"axis_types passed to {where} must be of type `jax.sharding.AxisType`. "
                    f"Got {axis_types} of type {tuple(type(a) for a in axis_types)}")
  if len(axis_names) != len(axis_types):
    raise ValueError(f"Number of axis names should match the number of axis_types. Got "
                     f"axis_names={axis_names} and axis_types={axis_types}")
  return axis_types


def _check_axis_names(names: tuple, where: str):
  if any(n is None for n in names):
    raise ValueError(f"Mesh axis names cannot be None. Got: {names}")
  for n in names:
    try:
      hash(n)
    except TypeError:
      raise TypeError(f"{where}: mesh axis names must be hashable (usually strings), got "
                      f"{n!r} of type {type(n).__name__}.") from None
  if len(set(names)) != len(names):
    raise ValueError(f"{where}: axis names must be distinct, got {names}.")


class _MeshAxes:
  """What Mesh and AbstractMesh share: the axis types by name."""
  axis_names: tuple
  axis_types: tuple

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

  @property
  def auto_axes(self) -> tuple:
    return tuple(n for n, t in zip(self.axis_names, self.axis_types) if t == AxisType.Auto)

  @property
  def explicit_axes(self) -> tuple:
    return tuple(n for n, t in zip(self.axis_names, self.axis_types)
                 if t == AxisType.Explicit)

  @property
  def manual_axes(self) -> tuple:
    return tuple(n for n, t in zip(self.axis_names, self.axis_types) if t == AxisType.Manual)

  @property
  def are_all_axes_auto(self) -> bool:
    return bool(self.axis_types) and all(t == AxisType.Auto for t in self.axis_types)

  @property
  def are_all_axes_explicit(self) -> bool:
    return bool(self.axis_types) and all(t == AxisType.Explicit for t in self.axis_types)

  @property
  def are_all_axes_manual(self) -> bool:
    return bool(self.axis_types) and all(t == AxisType.Manual for t in self.axis_types)

  def axis_type(self, name) -> AxisType:
    """The AxisType of the axis `name`."""
    return dict(zip(self.axis_names, self.axis_types))[name]

  @property
  def shape(self) -> "collections.OrderedDict":
    """{axis name: size}, in axis order."""
    return collections.OrderedDict(zip(self.axis_names, self.axis_sizes))

  @property
  def shape_tuple(self) -> tuple:
    return tuple(zip(self.axis_names, self.axis_sizes))

  @property
  def empty(self) -> bool:
    return self.size == 0


class Sharding:
  """The base class of shardings (NamedSharding, SingleDeviceSharding)."""

  def devices_indices_map(self, global_shape: Sequence[int]) -> dict:
    """{device: tuple of slices}: each device's piece of an array of `global_shape`."""
    raise NotImplementedError("Subclasses should implement this method.")

  def shard_shape(self, global_shape: Sequence[int]) -> tuple[int, ...]:
    """The shape of each device's piece of an array of `global_shape`."""
    raise NotImplementedError("Subclasses should implement this method.")

  def is_equivalent_to(self, other: "Sharding", ndim: int) -> bool:
    """Whether `other` lays out an array of rank `ndim` the same way on the same devices."""
    raise NotImplementedError("Subclasses should implement this method.")

  def with_memory_kind(self, kind: str) -> "Sharding":
    """This sharding in memory `kind`."""
    raise NotImplementedError("Subclasses should implement this method.")

  def check_compatible_aval(self, aval_shape: Sequence[int]) -> None:
    """Checks that this sharding can lay out an array of shape `aval_shape` (no check here;
    NamedSharding checks the rank)."""
    return None

  def addressable_devices_indices_map(self, global_shape) -> dict:
    """{device of this process: tuple of slices}: the pieces of an array of `global_shape`
    this process holds (`devices_indices_map` restricted to `addressable_devices`)."""
    mine = self.addressable_devices
    return {d: index for d, index in self.devices_indices_map(global_shape).items()
            if d in mine}

  @property
  def _addressable_device_assignment(self) -> tuple:
    """The devices of this process in device-assignment order (JAX's private property,
    which orbax.checkpoint reads when it restores an array)."""
    mine = self.addressable_devices
    return tuple(d for d in self._device_assignment if d in mine)


class Mesh(_MeshAxes):
  """An n-d grid of devices with a name and an AxisType per axis.

  Args:
    devices: an n-d array (or nested sequence) of devices, each used once.
    axis_names: one name per axis of `devices` (distinct, hashable, not None; a str is one
      name).
    axis_types: an AxisType or a tuple of one per axis (default: all `AxisType.Auto`, as
      JAX's `Mesh`; `make_mesh` defaults to Explicit).

  Raises:
    ValueError: when the number of names differs from `devices.ndim`, a name is None, names
      repeat, or a device appears twice; or the number of axis types differs.
    TypeError: an axis type that is not an AxisType.

  Axis names reach compiled programs only through `sdy_axis_names` (names that are not
  plain printable ASCII, or contain a quote or backslash, are renamed there), so any
  hashable name is safe.
  """

  def __new__(cls, devices: Any, axis_names: Sequence[Any], axis_types: Any = None):
    # NB: made in `__new__`, as JAX's Mesh (a missing argument names `Mesh.__new__()`)
    self = super().__new__(cls)
    if isinstance(axis_names, str):
      axis_names = (axis_names,)
    names = tuple(axis_names)
    devs = np.empty(np.shape(np.asarray(devices, dtype=object)), dtype=object)
    devs[...] = np.asarray(devices, dtype=object)
    _check_axis_names(names, "Mesh")
    if devs.ndim != len(names):
      raise ValueError(f"Mesh requires the ndim of its first argument (`devices`) to equal "
                       f"the length of its second argument (`axis_names`), but got "
                       f"devices.ndim == {devs.ndim} and len(axis_names) == {len(names)}.")
    self.axis_types = _normalize_axis_types(names, axis_types, "Mesh")
    empty = not names and devs.flat[0] is None
    if not empty:
      ids = [d.id for d in devs.flat]
      if len(set(ids)) != len(ids):
        raise ValueError(f"Mesh: a device appears more than once: ids {ids}.")
    devs.flags.writeable = False
    self.devices = devs
    self.axis_names = names
    self.size = 0 if empty else int(devs.size)
    return self

  def __getnewargs_ex__(self):
    return (self.devices, self.axis_names, self.axis_types), {}

  def __copy__(self):
    return self   # NB: immutable, as JAX's meshes: a copy is the mesh itself

  def __deepcopy__(self, memo):
    return self

  @property
  def axis_sizes(self) -> tuple[int, ...]:
    return self.devices.shape

  @property
  def device_ids(self) -> np.ndarray:
    return np.vectorize(lambda d: d.id, otypes=[int])(self.devices)

  @property
  def local_devices(self) -> list:
    me = client.process_index()
    return [d for d in self.devices.flat if d.process_index == me]

  @property
  def is_multi_process(self) -> bool:
    return self.devices.size != len(self.local_devices)

  @functools.cached_property
  def abstract_mesh(self) -> "AbstractMesh":
    """This mesh's AbstractMesh (sizes, names, types and the kind of its devices)."""
    if not self.axis_names:
      return empty_abstract_mesh
    d = self.devices.flat[0]
    cores = (getattr(d, "num_cores", None) if d.platform == "tpu" else
             getattr(d, "core_count", None) if d.platform == "gpu" else None)
    return AbstractMesh(self.axis_sizes, self.axis_names, self.axis_types,
                        abstract_device=AbstractDevice(d.device_kind, cores, d.platform))

  def update(self, devices=None, axis_names=None, axis_types=None) -> "Mesh":
    """A copy with the given fields replaced."""
    return Mesh(self.devices if devices is None else devices,
                self.axis_names if axis_names is None else axis_names,
                self.axis_types if axis_types is None else axis_types)

  def _key(self):
    return (tuple(d.id for d in self.devices.flat) if self.size else (),
            self.devices.shape, self.axis_names, self.axis_types)

  def __eq__(self, other):
    return other is self or (isinstance(other, Mesh) and self._key() == other._key())

  def __hash__(self):
    return hash(self._key())

  def __repr__(self):
    if self.empty:
      return "Mesh(axis_sizes=(), axis_names=())"
    return (f"Mesh(axis_sizes={self.axis_sizes}, axis_names={self.axis_names!r}, "
            f"axis_types={self.axis_types})")

  def __str__(self):
    if self.empty:
      return "Mesh()"
    axes = ", ".join(f"'{n}': {s}" for n, s in self.shape.items())
    return f"Mesh({axes}, axis_types={self.axis_types})"

  @functools.cached_property
  def _runtime(self):
    # The runtime's sharding of an array replicated over the mesh (its device list, needed
    # to hand buffers to PJRT); NamedSharding._runtime splits dimensions over its axes.
    return client.MeshSharding(self.devices, ())

  @property
  def _flat_devices(self) -> tuple:
    return tuple(self.devices.flat)

  def __enter__(self):
    """`with mesh:` lets `with_sharding_constraint`, `jit`'s shardings, device_put and
    shard_map take bare PartitionSpecs, meaning NamedSharding(mesh, spec).

    Deprecated, as in JAX 0.10.2: it warns (DeprecationWarning, JAX's text) and raises
    RuntimeError when the option `jax_disallow_mesh_context_manager` is set. `with
    set_mesh(mesh):` is the replacement. Unlike JAX 0.10.2, where `jit`'s bare
    PartitionSpecs and `shard_map` no longer see this mesh, it is still used here
    (docs/differences.md)."""
    if mesh_context_manager_disallowed():
      raise RuntimeError("Mesh context manager is disabled.")
    warnings.warn("`with mesh:` context manager has been deprecated. Please use `with "
                  "jax.set_mesh(mesh):` instead.", DeprecationWarning, stacklevel=2)
    _mesh_stack.append(self)
    return self

  def __exit__(self, *exc):
    _mesh_stack.pop()
    return False


@dataclasses.dataclass(frozen=True)
class AbstractDevice:
  """The kind of device an AbstractMesh stands for."""
  device_kind: str
  num_cores: int | None = None
  platform: str | None = None

  def __repr__(self):
    return f"AbstractDevice({self._text()})"

  def _text(self) -> str:
    return (f"device_kind={self.device_kind}, num_cores={self.num_cores}, "
            f"platform={self.platform}")


class AbstractMesh(_MeshAxes):
  """A mesh's axis sizes, names and types without devices (the mesh a traced program sees).

  Args:
    axis_sizes: the size of each axis (ints).
    axis_names: one name per axis.
    axis_types: an AxisType or one per axis (default: all Auto).
    abstract_device: the kind of device (optional).

  Raises:
    ValueError / TypeError: as `Mesh` for the axis types; ValueError for sizes and names of
      different lengths. Accessing `devices` (or `with` on it) raises ValueError.
  """

  def __init__(self, axis_sizes: Sequence[int], axis_names: Sequence[Any],
               axis_types: Any = None, *, abstract_device: AbstractDevice | None = None):
    if isinstance(axis_names, str):
      axis_names = (axis_names,)
    names = tuple(axis_names)
    sizes = tuple(int(s) for s in axis_sizes)
    _check_axis_names(names, "AbstractMesh")
    if len(sizes) != len(names):
      raise ValueError(f"AbstractMesh: {len(sizes)} axis sizes {sizes} but {len(names)} axis "
                       f"names {names}; give one name per axis.")
    self.axis_types = _normalize_axis_types(names, axis_types, "AbstractMesh")
    self.axis_sizes = sizes
    self.axis_names = names
    self.abstract_device = abstract_device
    self.size = math.prod(sizes) if sizes else 0

  @property
  def abstract_mesh(self) -> "AbstractMesh":
    return self

  def update(self, axis_sizes=None, axis_names=None, axis_types=None, **kwargs):
    """A copy with the given fields replaced."""
    kwargs.setdefault("abstract_device", self.abstract_device)
    return AbstractMesh(self.axis_sizes if axis_sizes is None else axis_sizes,
                        self.axis_names if axis_names is None else axis_names,
                        self.axis_types if axis_types is None else axis_types, **kwargs)

  def update_axis_types(self, name_to_type: dict) -> "AbstractMesh":
    """A copy with the types of the axes named in `name_to_type` replaced."""
    return self.update(axis_types=tuple(name_to_type.get(n, t)
                                        for n, t in zip(self.axis_names, self.axis_types)))

  def _key(self):
    return (self.axis_sizes, self.axis_names, self.axis_types, self.abstract_device)

  def __eq__(self, other):
    return isinstance(other, AbstractMesh) and self._key() == other._key()

  def __hash__(self):
    return hash(self._key())

  def __repr__(self):
    axes = (", ".join(f"'{n}': {s}" for n, s in self.shape_tuple) if self.shape_tuple
            else "()")
    dev = "" if self.abstract_device is None else f", {self.abstract_device._text()}"
    return f"AbstractMesh({axes}, axis_types={self.axis_types}{dev})"

  @property
  def devices(self):
    raise ValueError("AbstractMesh does not implement devices")

  @property
  def device_ids(self):
    raise ValueError("AbstractMesh does not implement device_ids")

  def __enter__(self):
    raise ValueError("AbstractMesh does not implement __enter__")

  def __exit__(self, *exc):
    raise ValueError("AbstractMesh does not implement __exit__")


empty_abstract_mesh = AbstractMesh((), ())
empty_concrete_mesh = Mesh(np.empty((), dtype=object), ())


class UnspecifiedValue:
  """The type of `UNSPECIFIED`: a sharding nobody gave (JAX's `UnspecifiedValue`, the value
  of each entry of a staged jit equation's `in_shardings` / `out_shardings` by default)."""
  __slots__ = ()

  def __repr__(self):
    return "UnspecifiedValue"

  def __reduce__(self):
    return "UNSPECIFIED"


UNSPECIFIED = UnspecifiedValue()


def context_mesh() -> "Mesh | AbstractMesh":
  """The mesh a staged jit equation records (its `ctx_mesh` param, as JAX's): the Mesh set
  by `set_mesh`, else the abstract mesh in context when one of its axes is Explicit, else
  the empty Mesh."""
  m = _concrete_mesh.get()
  if m is not None and not m.empty:
    return m
  a = _abstract_mesh.get()
  if a is not None and not a.empty and any(
      t == AxisType.Explicit for t in a.axis_types):
    return a
  return empty_concrete_mesh


def make_mesh(axis_shapes: Sequence[int], axis_names: Sequence[Any], axis_types: Any = None,
              *, devices: Sequence[Any] | None = None) -> Mesh:
  """A Mesh of shape `axis_shapes` over the first `prod(axis_shapes)` devices (every
  process's devices in a distributed run, ordered by process then id), as JAX's
  `jax.make_mesh` on CPU and GPU.

  Args:
    axis_shapes: the size of each mesh axis (ints).
    axis_names: one name per axis.
    axis_types: an AxisType or one per axis (default: all `AxisType.Explicit`, as JAX 0.10).
    devices: the devices to use, in mesh order (default: as above; extra devices are
      left out).

  Raises:
    ValueError: when more devices are needed than there are, sizes are not ints, or the
      counts of names, sizes and types disagree.
    TypeError: an axis type that is not an AxisType.
  """
  try:
    shape = tuple(int(s) for s in axis_shapes)
    if any(isinstance(s, bool) or int(s) != s for s in axis_shapes):
      raise TypeError
  except (TypeError, ValueError):
    raise ValueError(f"`axis_shapes` passed to `make_mesh` should be a sequence of ints. Got "
                     f"{axis_shapes}") from None
  if isinstance(axis_names, str):
    axis_names = (axis_names,)
  axis_names = tuple(axis_names)
  if len(shape) != len(axis_names):
    raise ValueError(f"make_mesh: {len(shape)} axis sizes {shape} but {len(axis_names)} "
                     f"axis names {axis_names}; give one name per axis.")
  if axis_types is None:
    axis_types = (AxisType.Explicit,) * len(shape)
  n = math.prod(shape)
  if devices is None:
    devices = sorted(client.devices(), key=lambda d: (d.process_index, d.id))
  devices = list(devices)
  if n > len(devices):
    raise ValueError(
        f"Number of devices {len(devices)} must be >= the product of mesh_shape {shape}. "
        f"Use a smaller mesh, or start Python with "
        f"XLA_FLAGS=--xla_force_host_platform_device_count={n} for more CPU devices.")
  devices = devices[:n]
  return Mesh(np.array(devices, dtype=object).reshape(shape), axis_names, axis_types)


# ---------------------------------------------------------------------------
# The mesh in context


class set_mesh:
  """Sets the mesh in context: `set_mesh(mesh)` sets it until changed (a global setter);
  `with set_mesh(mesh):` sets it for the block and then restores the previous one.

  Under it, `get_mesh()` is `mesh`, `get_abstract_mesh()` is `mesh.abstract_mesh`, bare
  PartitionSpecs mean `NamedSharding(mesh, spec)` (device_put, jit's shardings, reshard,
  with_sharding_constraint) and shard_map without `mesh=` maps over it. `set_mesh(None)`
  clears it.

  Raises:
    ValueError: `mesh` is not a Mesh (or None), has Manual axes, or a transformation (jit,
      grad, ...) is tracing.
  """
  __slots__ = ("prev_abstract_mesh", "prev_mesh")

  def __init__(self, mesh: Mesh | None):
    if mesh is not None and not isinstance(mesh, Mesh):
      raise ValueError(f"Expected mesh of type `jax.sharding.Mesh`. Got {type(mesh)}")
    if not outside_trace[0]():
      raise ValueError("`set_mesh` can only be used outside of `jax.jit`.")
    if mesh is not None and AxisType.Manual in mesh.axis_types:
      raise ValueError(f"mesh {mesh} contains manual axes which is not allowed when using "
                       f"`jax.set_mesh`. Please use `jax.shard_map` to enter into `Manual` "
                       f"mode instead.")
    self.prev_abstract_mesh = _abstract_mesh.get()
    self.prev_mesh = _concrete_mesh.get()
    if mesh is not None and not mesh.empty:
      on_set_mesh[0]()
    _abstract_mesh.set(None if mesh is None or mesh.empty else mesh.abstract_mesh)
    _concrete_mesh.set(None if mesh is None or mesh.empty else mesh)

  def __enter__(self):
    return None

  def __exit__(self, *exc):
    _abstract_mesh.set(self.prev_abstract_mesh)
    _concrete_mesh.set(self.prev_mesh)
    return False

  def __repr__(self):   # (a notebook cell that ends with `jax.set_mesh(mesh)` shows it)
    mod = "jax._src.sharding_impls" if jax_reprs[0] else type(self).__module__
    return f"<{mod}.set_mesh object at {id(self):#x}>"


#: True while the JAX runner is installed (`stagecraft.compat.install`): a `set_mesh` prints
#: as JAX's object does, `<jax._src.sharding_impls.set_mesh object at 0x...>`.
jax_reprs = [False]


def get_mesh() -> Mesh:
  """The mesh set by `set_mesh` (an empty Mesh when none is).

  Raises:
    ValueError: when called while a transformation is tracing (use `get_abstract_mesh`).
  """
  if not outside_trace[0]():
    raise ValueError("`get_mesh` can only be used outside of `jax.jit`. Maybe you want "
                     "`jax.sharding.get_abstract_mesh()`?")
  m = _concrete_mesh.get()
  return empty_concrete_mesh if m is None else m


def get_abstract_mesh_or_none() -> AbstractMesh | None:
  """The abstract mesh in context, None when none is set (`get_abstract_mesh` gives an empty
  one)."""
  return _abstract_mesh.get()


def get_abstract_mesh() -> AbstractMesh:
  """The abstract mesh in context (set by `set_mesh` or `use_abstract_mesh`; inside a
  shard_map body its manual axes have type Manual); an empty AbstractMesh when none is."""
  m = _abstract_mesh.get()
  return empty_abstract_mesh if m is None else m


class use_abstract_mesh:
  """`with use_abstract_mesh(abstract_mesh):` sets only the abstract mesh in context.

  Raises:
    ValueError: `mesh` is not an AbstractMesh, or (on entry) its size differs from that of a
      non-empty abstract mesh already in context.
  """
  __slots__ = ("mesh", "prev")

  def __init__(self, mesh: AbstractMesh):
    if not isinstance(mesh, AbstractMesh):
      raise ValueError(f"Expected mesh of type `jax.sharding.AbstractMesh`. Got type: "
                       f"{type(mesh)}")
    self.mesh = mesh

  def __enter__(self):
    self.prev = _abstract_mesh.get()
    if (self.prev is not None and not self.prev.empty and not self.mesh.empty
        and self.prev.size != self.mesh.size):
      raise ValueError(f"use_abstract_mesh cannot change the size of the mesh. Got new mesh: "
                       f"{self.mesh} with size={self.mesh.size} and prev mesh: {self.prev} "
                       f"with size={self.prev.size}")
    _abstract_mesh.set(None if self.mesh.empty else self.mesh)

  def __exit__(self, *exc):
    _abstract_mesh.set(self.prev)
    return False


class abstract_mesh_context:
  """Sets the abstract mesh in context for a block without use_abstract_mesh's checks (the
  abstract mesh a shard_map body is traced under, its manual axes typed Manual)."""
  __slots__ = ("mesh", "prev")

  def __init__(self, mesh: AbstractMesh | None):
    self.mesh = mesh

  def __enter__(self):
    self.prev = _abstract_mesh.get()
    _abstract_mesh.set(self.mesh)

  def __exit__(self, *exc):
    _abstract_mesh.set(self.prev)
    return False


def concrete_mesh() -> Mesh | None:
  """The Mesh set by `set_mesh`, or None (also while tracing, unlike `get_mesh`)."""
  return _concrete_mesh.get()


def current_mesh() -> Mesh | None:
  """The mesh a bare PartitionSpec refers to: the one set by `set_mesh`, else the
  innermost `with mesh:`, else None."""
  m = _concrete_mesh.get()
  if m is not None:
    return m
  return _mesh_stack[-1] if _mesh_stack else None


def _as_axis_set(x: Any, which: str) -> frozenset:
  if isinstance(x, frozenset):
    return x
  if not isinstance(x, set):
    raise TypeError(f"{which} argument of PartitionSpec should of type `frozenset` or `set`. "
                    f"Got type {x}")
  return frozenset(x)


def _unconstrained() -> "_Unconstrained":
  return PartitionSpec.UNCONSTRAINED


class _Unconstrained:
  """The one value `PartitionSpec.UNCONSTRAINED` (JAX's): a dimension left to the compiler.
  Printed `UNCONSTRAINED`; pickles to the same object."""
  __slots__ = ()

  def __repr__(self):
    return "UNCONSTRAINED"

  def __reduce__(self):
    return (_unconstrained, ())


class DuplicateSpecError(Exception):
  """A PartitionSpec that maps one mesh axis to two dimensions (JAX's class: not a
  ValueError). `message`, `mesh` and `pspec` are kept as attributes."""

  def __init__(self, message, mesh, pspec):
    super().__init__(message)
    self.message = message
    self.mesh = mesh
    self.pspec = pspec

  def __str__(self):
    return f"{self.message}"


def _canonical_entry(entry):
  """One dimension's entry of a PartitionSpec as JAX 0.10.2 keeps it: a list as a tuple, an
  empty tuple as None, a one-name tuple as the name.

  Raises:
    ValueError: a tuple holding a tuple (JAX's message)."""
  if isinstance(entry, list):
    entry = tuple(entry)
  if isinstance(entry, tuple):
    for name in entry:
      if isinstance(name, (tuple, list)):
        raise ValueError(f"A tuple inside PartitionSpec cannot contain a nested tuple. Got "
                         f"partition: {entry} and the nested tuple: {name}")
    if not entry:
      return None
    if len(entry) == 1:
      return entry[0]
  return entry


class PartitionSpec(tuple):
  """Per array dimension: None (not split), a mesh axis name, or a tuple of names (split
  over their product, the first name outermost). Trailing dimensions may be left out.

  `unreduced` / `reduced` (keywords, sets of mesh axis names; JAX's sharding-in-types
  states): along an unreduced axis each device holds a partial sum of the value, still to
  be summed over the axis (`f32[4]{U:x}`); along a reduced axis each holds a full copy
  whose cotangent comes back unreduced (`f32[4]{R:x}`).

  Raises:
    TypeError: `unreduced` / `reduced` not a set or frozenset.
    ValueError: None in them, an axis in both, or an axis also splitting a dimension (JAX's
      messages).
  """

  def count(self, value) -> int:
    """How many dimensions have the entry `value` (JAX's keyword name `value`)."""
    return tuple.count(self, value)

  def index(self, value) -> int:
    """The first dimension whose entry is `value`.

    Raises:
      ValueError: when no entry is `value` (tuple's message, as JAX's)."""
    return tuple.index(self, value)

  def __new__(cls, *entries, unreduced=frozenset(), reduced=frozenset()):
    unreduced = _as_axis_set(unreduced, "unreduced")
    reduced = _as_axis_set(reduced, "reduced")
    self = super().__new__(cls, tuple(_canonical_entry(e) for e in entries))
    if unreduced or reduced:
      _check_unreduced(self, unreduced, reduced)
    self.unreduced = unreduced
    self.reduced = reduced
    return self

  def __getnewargs_ex__(self):
    return tuple(self), {"unreduced": self.unreduced, "reduced": self.reduced}

  def __init_subclass__(cls, *args, **kwargs):
    raise TypeError("Subclassing `jax.P` is prohibited.")

  def __add__(self, other):
    """`P(...) + P(...)` (entries, unreduced and reduced sets joined) or `P(...) + tuple`
    (JAX's: a tuple only when `self` has neither set)."""
    if isinstance(other, PartitionSpec):
      return PartitionSpec(*self, *other, unreduced={*self.unreduced, *other.unreduced},
                           reduced={*self.reduced, *other.reduced})
    if isinstance(other, tuple):
      for name, axes in (("unreduced", self.unreduced), ("reduced", self.reduced)):
        if axes:
          raise TypeError(f"other {other} cannot be of instance `tuple` when self {self} has"
                          f" {name} in `__add__` of PartitionSpec.")
      return PartitionSpec(*self, *other)
    raise NotImplementedError   # NB: JAX's (not Python's TypeError)

  def __radd__(self, other):
    if not isinstance(other, tuple):
      raise NotImplementedError
    for name, axes in (("unreduced", self.unreduced), ("reduced", self.reduced)):
      if axes:
        raise TypeError(f"other {other} cannot be of instance `tuple` when self {self} has"
                        f" {name} in `__radd__` of PartitionSpec.")
    return PartitionSpec(*other, *self)

  @property
  def partitions(self) -> tuple:
    """The per-dimension entries (JAX's `spec.partitions`)."""
    return tuple(self)

  def __eq__(self, other):
    if isinstance(other, PartitionSpec):
      return (tuple.__eq__(self, other) and self.unreduced == other.unreduced
              and self.reduced == other.reduced)
    if isinstance(other, tuple):
      return not self.unreduced and not self.reduced and tuple.__eq__(self, other)
    return NotImplemented

  def __ne__(self, other):
    eq = self.__eq__(other)
    return eq if eq is NotImplemented else not eq

  def __hash__(self):
    if not self.unreduced and not self.reduced:
      return tuple.__hash__(self)
    return hash((tuple(self), self.unreduced, self.reduced))

  def __repr__(self):
    pr = repr(tuple(self))[1:-1]   # JAX's form: P('x',), P('x', 'y'), P()
    if not self.unreduced and not self.reduced:
      return "P(" + pr + ")"
    parts = []
    if self.unreduced:
      parts.append(f"unreduced={set(self.unreduced)!r}")   # NB: JAX prints a set
    if self.reduced:
      parts.append(f"reduced={set(self.reduced)!r}")
    pr = "" if not pr else f"{pr} " if pr.endswith(",") else f"{pr}, "
    return f"P({pr}{', '.join(parts)})"

  def update(self, partitions=None, unreduced=None, reduced=None) -> "PartitionSpec":
    """This spec with its entries, `unreduced` or `reduced` replaced (JAX's `P.update`)."""
    return PartitionSpec(*(tuple(self) if partitions is None else partitions),
                         unreduced=self.unreduced if unreduced is None else unreduced,
                         reduced=self.reduced if reduced is None else reduced)

  def to_ct_spec(self) -> "PartitionSpec":
    """The spec of a cotangent of a value of this spec: unreduced and reduced swapped."""
    if not self.unreduced and not self.reduced:
      return self
    return self.update(unreduced=self.reduced, reduced=self.unreduced)

  def _names(self, i: int) -> tuple:
    e = self[i] if i < len(self) else None
    if e is None:
      return ()
    if e is PartitionSpec.UNCONSTRAINED:
      raise NotImplementedError(
          f"PartitionSpec.UNCONSTRAINED (in {self}): stagecraft's shardings do not yet leave "
          f"a dimension to the compiler; give None (replicated) or mesh axis names.")
    return tuple(e) if isinstance(e, (tuple, list)) else (e,)


#: JAX's `PartitionSpec.UNCONSTRAINED` (libraries compare entries with it: flax.linen).
PartitionSpec.UNCONSTRAINED = _Unconstrained()


def _check_unreduced(spec: PartitionSpec, unreduced: frozenset, reduced: frozenset) -> None:
  if None in unreduced:
    raise ValueError("unreduced cannot contain None. All elements in unreduced should refer "
                     "to the mesh axes.")
  if None in reduced:
    raise ValueError("reduced cannot contain None. All elements in reduced should refer to "
                     "the mesh axes.")
  if unreduced & reduced:
    raise ValueError(f"`unreduced` and `reduced` argument to PartitionSpec cannot overlap. "
                     f"Got unreduced: {unreduced} and reduced: {reduced}")
  for e in spec:
    for n in (e if isinstance(e, tuple) else (e,)):
      if n in unreduced:
        raise ValueError(f"partitions cannot overlap with unreduced axes passed to "
                         f"PartitionSpec. Got partitions: {tuple(spec)} and unreduced axes: "
                         f"{unreduced}")
      if n in reduced:
        raise ValueError(f"partitions cannot overlap with reduced axes passed to "
                         f"PartitionSpec. Got partitions: {tuple(spec)} and reduced axes: "
                         f"{reduced}")


P = PartitionSpec


class Shard:
  """One device's piece of an Array: `device`, `index` (a tuple of slices into the global
  array), `replica_id` (0 for the first copy of a replicated piece) and `data` (an Array on
  that device). Its repr shows the data with `str` (`data=[[1. 2.]]`), as JAX's does."""
  __slots__ = ("device", "index", "replica_id", "data")

  def __init__(self, device, index, replica_id, data):
    self.device, self.index, self.replica_id, self.data = device, index, replica_id, data

  def __repr__(self):
    return (f"Shard(device={self.device!r}, index={self.index}, replica_id={self.replica_id}, "
            f"data={self.data})")   # the data's str, as JAX prints it


class NamedSharding(Sharding):
  """An array laid out over `mesh` by `spec` (see the module docstring).

  `mesh` may be an AbstractMesh (as in JAX): such a sharding describes a layout for traced
  code (with_sharding_constraint, shard_map, jit's shardings) and is placed on the
  concrete mesh set by `set_mesh` when a program runs; it has no devices of its own.

  Raises:
    TypeError: if `mesh` is not a Mesh or an AbstractMesh.
    ValueError: if `spec` names an axis the mesh does not have, or one twice.
  """

  def __init__(self, mesh: Mesh | AbstractMesh, spec: PartitionSpec = PartitionSpec(), *,
               memory_kind: str | None = None):
    if not isinstance(mesh, (Mesh, AbstractMesh)):
      raise TypeError(f"NamedSharding: `mesh` must be a stagecraft.sharding.Mesh or "
                      f"AbstractMesh, got {type(mesh).__name__}.")
    if memory_kind is None and isinstance(mesh, Mesh):
      memory_kind = "device"   # NB: JAX fills in the devices' default memory kind
    self.memory_kind = memory_kind
    if spec is None:
      spec = PartitionSpec()
    if not isinstance(spec, PartitionSpec):
      spec = PartitionSpec(*spec) if isinstance(spec, (tuple, list)) else PartitionSpec(spec)
    used = [n for i in range(len(spec)) for n in spec._names(i)]
    dups = [n for n in dict.fromkeys(used) if used.count(n) > 1]
    if dups:
      raise DuplicateSpecError(
          f"A single NamedSharding spec specification can map every mesh axis to at most one "
          f"positional dimension, but {spec} has duplicate entries for "
          f"{', '.join(sorted(f'`{n}`' for n in dups))}", mesh, spec)
    for n in used:   # JAX's messages
      if n not in mesh.axis_names:
        raise ValueError(f"Resource axis: {n} of {spec} is not found in mesh: "
                         f"{tuple(mesh.axis_names)}.")
    for kind, names in (("Unreduced", spec.unreduced), ("Reduced", spec.reduced)):
      for n in sorted(names, key=str):
        if n not in mesh.axis_names:
          raise ValueError(f"{kind} axes {n} is not found in mesh.axis_names="
                           f"{tuple(mesh.axis_names)}. Got pspec={spec}")
    self.mesh = mesh
    self.spec = spec

  def update(self, **kwargs) -> "NamedSharding":
    """This sharding with the fields given replaced (`mesh`, `spec`, `memory_kind`; JAX's
    `NamedSharding.update`).

    Raises:
      TypeError: for another keyword.
    """
    mesh = kwargs.pop("mesh", self.mesh)
    spec = kwargs.pop("spec", self.spec)
    memory_kind = kwargs.pop("memory_kind", self.memory_kind)
    kwargs.pop("_logical_device_ids", None)
    if kwargs:
      raise TypeError(f"NamedSharding.update() got an unexpected keyword argument "
                      f"'{next(iter(kwargs))}'")
    return NamedSharding(mesh, spec, memory_kind=memory_kind)

  def with_memory_kind(self, kind: str) -> "NamedSharding":
    """This sharding in memory `kind` (`update(memory_kind=kind)`, as JAX's)."""
    return self.update(memory_kind=kind)

  def check_compatible_aval(self, aval_shape: Sequence[int]) -> None:
    """Checks that the spec has no more entries than `aval_shape` has dimensions.

    Raises:
      ValueError: for a spec longer than the rank (JAX's words).
    """
    if len(aval_shape) < len(self.spec):
      hint = " For scalars the PartitionSpec should be P()" if not len(aval_shape) else ""
      raise ValueError(f"Sharding {self} is only valid for values of rank at least "
                       f"{len(self.spec)}, but was applied to a value of rank "
                       f"{len(aval_shape)}.{hint}")

  @property
  def device_set(self) -> set:
    return set(self.mesh.devices.flat)

  @property
  def is_fully_replicated(self) -> bool:
    return not any(self.spec._names(i) for i in range(len(self.spec))) and \
        not self.spec.unreduced

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
    if self._key() == other._key():
      return True
    # NB: as JAX's (which compares HLO shardings): the same piece of the array on each
    # device, so mesh axes of size 1 and how the devices are named do not matter
    if not (isinstance(self.mesh, Mesh) and isinstance(other.mesh, Mesh)) or (
        self.mesh.size != other.mesh.size or self.memory_kind != other.memory_kind
        or set(self.spec.unreduced or ()) or set(other.spec.unreduced or ())
        or set(self.spec.reduced or ()) or set(other.spec.reduced or ())):
      return False
    shape = (self.mesh.size,) * ndim   # divisible by any tiling of either

    def pieces(sharding):
      return {d: tuple(sl.indices(n) for sl, n in zip(idx, shape))
              for d, idx in sharding.devices_indices_map(shape).items()}
    try:
      return pieces(self) == pieces(other)
    except ValueError:
      return False

  def _sdy(self, ndim: int, open_dims: bool = False, mesh_name: str = "mesh") -> str:
    """The Shardy sharding `<@mesh, [{"a"}, {}]>` of an array of rank `ndim` (open_dims:
    unnamed dimensions `{?}` and named ones `{"a", ?}`, left to the partitioner;
    `mesh_name`: the module's `sdy.mesh` it names)."""
    dims = []
    for i in range(ndim):
      names = [f'"{self.mesh.sdy_axis_names[n]}"' for n in self.spec._names(i)]
      if open_dims:
        names.append("?")
      dims.append("{" + ", ".join(names) + "}")
    return (f"<@{mesh_name}, [{', '.join(dims)}]"
            f"{sdy_unreduced(self.mesh, self.spec.unreduced)}>")

  def _key(self):
    # NB: equal layouts compare equal whatever the mesh axes are called or typed. Computed
    # once: dispatch hashes the shardings of every argument on every call.
    k = self.__dict__.get("_key_cache")
    if k is None:
      pos = {n: i for i, n in enumerate(self.mesh.axis_names)}
      spec = tuple(tuple(pos[n] for n in self.spec._names(i)) for i in range(len(self.spec)))
      while spec and not spec[-1]:
        spec = spec[:-1]
      if self.spec.unreduced or self.spec.reduced:
        spec = (spec, tuple(sorted(pos[n] for n in self.spec.unreduced)),
                tuple(sorted(pos[n] for n in self.spec.reduced)))
      m = self.mesh
      k = ((tuple(d.id for d in m.devices.flat), m.devices.shape, spec)
           if isinstance(m, Mesh) else ("abstract", m._key(), spec))
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
    mem = "" if self.memory_kind is None else f", memory_kind={self.memory_kind}"
    return f"NamedSharding(mesh={self.mesh}, spec={self.spec!r}{mem})"

  def shard_shape(self, global_shape: Sequence[int]) -> tuple[int, ...]:
    """The shape of each device's piece of an array of `global_shape`.

    Raises:
      IndivisibleError: (a ValueError) when a split dimension is not divisible by its mesh
        axes' size, in JAX's words.
    """
    shape = global_shape
    parts = [math.prod(self.mesh.shape[a] for a in self.spec._names(i))
             for i in range(len(shape))]
    for i, (d, n) in enumerate(zip(shape, parts)):
      if d % n:
        raise IndivisibleError(
            f"Sharding {self!r} implies that array axis {i} is partitioned {n} times, but "
            f"the dimension size is {d} (full shape: {tuple(shape)}, per-dimension tiling "
            f"factors: {parts} should evenly divide the shape)")
    return tuple(d // n for d, n in zip(shape, parts))

  def devices_indices_map(self, global_shape: Sequence[int]) -> dict:
    """{device: tuple of slices} giving each device's piece of an array of `global_shape`."""
    block = self.shard_shape(global_shape)
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
    # The runtime's sharding object (jaxlib's), handed with buffers to PJRT: per dimension,
    # the positions of the mesh axes that split it.
    pos = {n: k for k, n in enumerate(self.mesh.axis_names)}
    return client.MeshSharding(self.mesh.devices, tuple(
        tuple(pos[n] for n in self.spec._names(i)) for i in range(len(self.spec))))


class SingleDeviceSharding(Sharding):
  """The whole array on one device, in its default memory (JAX's `memory_kind`, which
  `repr` shows as JAX's does).

  Raises:
    ValueError / NotImplementedError: as `make_single_device_sharding`, for a `memory_kind`
      the device cannot address or that is not its default memory."""

  def __init__(self, device, *, memory_kind: str | None = None):
    if memory_kind is not None:
      _check_memory_kind(device, memory_kind)
    self.device = device

  @property
  def memory_kind(self) -> str | None:
    try:
      return self.device.default_memory().kind
    except (AttributeError, RuntimeError):   # a device object without memories
      return None

  @property
  def device_set(self) -> set:
    return {self.device}

  is_fully_replicated = True

  def shard_shape(self, global_shape: Sequence[int]) -> tuple[int, ...]:
    """`global_shape` (the one device holds the whole array)."""
    return tuple(global_shape)

  def devices_indices_map(self, global_shape: Sequence[int]) -> dict:
    """{device: whole-array slices} for an array of `global_shape`."""
    return {self.device: tuple(slice(None) for _ in global_shape)}

  def with_memory_kind(self, kind: str) -> "SingleDeviceSharding":
    """This device's sharding in memory `kind` (checked as the constructor does)."""
    return SingleDeviceSharding(self.device, memory_kind=kind)

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
    mem = "" if self.memory_kind is None else f", memory_kind={self.memory_kind}"
    return f"SingleDeviceSharding(device={self.device!r}{mem})"


def make_single_device_sharding(device: Any, *, memory_kind: str | None = None
                                ) -> SingleDeviceSharding:
  """The sharding that places a whole array on `device` (JAX's
  `jax.sharding.make_single_device_sharding`).

  Args:
    device: a device (`stagecraft.devices()[i]`).
    memory_kind: None or the device's default memory kind (`"device"`); stagecraft's
      shardings place arrays in device memory only.

  Raises:
    ValueError: a memory kind the device cannot address (JAX's message).
    NotImplementedError: another memory kind the device can address (`"pinned_host"`).
  """
  return SingleDeviceSharding(device, memory_kind=memory_kind)


def _check_memory_kind(device, memory_kind: str) -> None:
  kinds = [m.kind for m in device.addressable_memories()]
  if memory_kind not in kinds:
    raise ValueError(f"Could not find memory addressable by device {device.device_kind}. "
                     f"Device {device.device_kind} can address the following memory kinds: "
                     f"{', '.join(kinds)}. Got memory kind: {memory_kind}")
  if memory_kind != device.default_memory().kind:
    raise NotImplementedError(f"make_single_device_sharding: memory_kind={memory_kind!r}; "
                              f"stagecraft places arrays in the device's default memory "
                              f"({device.default_memory().kind!r}) only.")


def to_named(s: Any, what: str) -> NamedSharding | None:
  """`s` as a NamedSharding over a concrete mesh, or None: a bare PartitionSpec means
  NamedSharding(current_mesh(), spec) (the mesh of `set_mesh`, else of `with mesh:`); a
  NamedSharding over an AbstractMesh is placed on the concrete mesh set by `set_mesh`.

  Raises:
    TypeError: for anything else (ValueError, as JAX's, for `what="device_put"`).
    ValueError: a PartitionSpec with no mesh in context; an AbstractMesh with no concrete
      mesh of its shape in context.
  """
  if s is None:
    return s
  if isinstance(s, NamedSharding):
    if isinstance(s.mesh, Mesh):
      return s
    mesh = current_mesh()
    if mesh is None or (mesh.axis_sizes, mesh.axis_names) != (s.mesh.axis_sizes,
                                                               s.mesh.axis_names):
      raise ValueError(f"{what}: the sharding {s} is over an AbstractMesh, which has no "
                       f"devices; call it under `with jax.set_mesh(mesh):` for a Mesh of the "
                       f"same axis sizes and names (in context now: {mesh}).")
    return NamedSharding(mesh, s.spec)
  if isinstance(s, PartitionSpec):
    mesh = current_mesh()
    if mesh is None:
      raise ValueError(f"{what}: a bare PartitionSpec {s} needs a mesh: use "
                       f"NamedSharding(mesh, spec), or call inside `with jax.set_mesh(mesh):` "
                       f"(or `with mesh:`).")
    return NamedSharding(mesh, s)
  if isinstance(s, SingleDeviceSharding):
    mesh = Mesh(np.array([s.device], dtype=object), ("_single",))
    return NamedSharding(mesh, PartitionSpec())
  if what == "device_put":   # NB: JAX's ValueError (users match "Received invalid value")
    raise ValueError(f"`device_put` only accepts `None`, a `Sharding`, a `Device` from "
                     f"stagecraft.devices(), a `Format`, a PartitionSpec (under `set_mesh`) or "
                     f"a pytree of these values. Received invalid value: {s}")
  raise TypeError(f"{what}: expected a NamedSharding, a PartitionSpec (under "
                  f"`set_mesh`) or None, got {s!r} of type {type(s).__name__}.")


def unsharded(ndim: int) -> NamedSharding:
  """The sharding in an aval's type of an array laid out on no mesh axis: JAX's
  `typeof(x).sharding` outside explicit-sharding mode, `NamedSharding(AbstractMesh((), ()),
  P(None, ...))` with `ndim` entries."""
  return NamedSharding(empty_abstract_mesh, PartitionSpec(*([None] * ndim)))


def check_out_sharding(out_sharding: Any, where: str) -> None:
  """Checks an `out_sharding=` argument of an operation (JAX's sharding-in-types API).

  stagecraft has no explicit sharding in types: an `out_sharding` that splits no dimension
  over a mesh axis (None, a `PartitionSpec` of Nones, or a `NamedSharding` with such a
  spec, e.g. `typeof(x).sharding`) asks for what the operation does anyway and is accepted.

  Raises:
    NotImplementedError: for an `out_sharding` that names mesh axes (use
      `with_sharding_constraint` or `reshard` on the result instead).
    TypeError: for something that is not a sharding or a PartitionSpec.
  """
  if out_sharding is None:
    return
  spec = out_sharding.spec if isinstance(out_sharding, NamedSharding) else out_sharding
  if not isinstance(spec, PartitionSpec):
    raise TypeError(f"{where}: out_sharding must be None, a PartitionSpec or a "
                    f"NamedSharding, got {type(out_sharding).__name__}")
  if any(entry is not None for entry in spec):
    raise NotImplementedError(
        f"{where}: out_sharding={out_sharding!r} splits dimensions over mesh axes; stagecraft "
        f"has no explicit sharding in types (constrain the result with "
        f"with_sharding_constraint or reshard instead)")


def type_sharding(s: Any, ndim: int) -> NamedSharding | None:
  """The sharding in the type (aval) of a rank-`ndim` value laid out by `s` (JAX's sharding
  in types): `NamedSharding(s.mesh.abstract_mesh, spec)` whose spec has `ndim` entries and
  names only the mesh's Explicit axes (one name, a tuple of names, or None per dimension);
  None when no dimension is split over an Explicit axis (the value's type is unsharded), or
  when `s` is not a NamedSharding."""
  if not isinstance(s, NamedSharding):
    return None
  mesh = s.mesh
  if AxisType.Explicit not in mesh.axis_types:
    return None
  explicit = set(mesh.explicit_axes)
  entries = []
  for i in range(ndim):
    names = tuple(n for n in s.spec._names(i) if n in explicit)
    entries.append(None if not names else names[0] if len(names) == 1 else names)
  unreduced = s.spec.unreduced & explicit
  reduced = s.spec.reduced & explicit
  if all(e is None for e in entries) and not unreduced and not reduced:
    return None
  return NamedSharding(mesh.abstract_mesh, PartitionSpec(*entries, unreduced=unreduced,
                                                         reduced=reduced))


def sdy_unreduced(mesh: Any, unreduced: frozenset) -> str:
  """The `, unreduced={"x"}` part of a Shardy sharding (mesh order), '' for no axes."""
  if not unreduced:
    return ""
  names = [f'"{mesh.sdy_axis_names[n]}"' for n in mesh.axis_names if n in unreduced]
  return f", unreduced={{{', '.join(names)}}}"


def ur_of(s: Any) -> tuple[frozenset, frozenset]:
  """(unreduced, reduced) mesh axes of a type sharding (`ShapedArray._sharding`; None:
  neither)."""
  if s is None:
    return frozenset(), frozenset()
  return s.spec.unreduced, s.spec.reduced


def spec_entries(s: NamedSharding | None, ndim: int) -> tuple:
  """Per dimension, the spec entry of a type sharding (`type_sharding`): None, a name or a
  tuple of names; all None for `s` None."""
  if s is None:
    return (None,) * ndim
  return tuple(s.spec) + (None,) * (ndim - len(s.spec))
