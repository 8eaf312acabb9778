"""The core: avals, the jaxpr IR and its printer and checker, Primitive/bind, Trace/Tracer with
the stackless current-trace context, the evaluation trace and `eval_jaxpr`.

Design after JAX's autodidax and JAX's "stackless" core: a thread-local holds the current
`Trace`; `Primitive.bind` hands its arguments to that trace's `process_primitive`; a trace
lifts values that are not its own tracers; the evaluation trace at the bottom runs `impl`.
"""
from __future__ import annotations

import enum
import itertools
import operator
import os
import re
import sys
import sysconfig
import threading
import weakref
from contextlib import contextmanager
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from stagecraft import dtypes, shape_poly, traceback_util
from stagecraft.errors import (ConcretizationTypeError, InconclusiveDimensionOperation,
                               JaxprTypeError, TracerArrayConversionError,
                               TracerBoolConversionError, TracerIntegerConversionError,
                               UnexpectedTracerError)

__all__ = ["is_hi", "JaxprEqnContext", "MemorySpace", "split_list", "AbstractValue", "ShapedArray", "ManualAxisType", "ShapeDtypeStruct", "pytype_aval_mappings", "WeakScalarValue",
           "get_aval", "valid_array_type", "Var", "DropVar", "Literal", "Atom", "JaxprEqn",
           "DebugInfo", "Jaxpr", "memo_on_jaxpr", "ClosedJaxpr", "subjaxprs", "pp_param_order",
           "pp_eqn_rules", "pp_named_calls", "pp_default_params", "pp_subjaxprs", "JaxprPpContext",
           "pp_jaxpr", "Primitive", "Trace", "EvalTrace", "eval_trace", "current_trace",
           "set_current_trace", "CompileTimeEvalTrace", "ensure_compile_time_eval",
           "escaped_tracer_error", "Tracer", "to_concrete_value",
           "eval_jaxpr", "closed_calls",
           "def_closed_call", "jaxpr_as_fun", "check_jaxpr", "Effect", "Effects",
           "no_effects", "EffectTypeSet", "ordered_effects", "AbstractToken", "abstract_token",
           "Token",
           "sharding_rules"]

# ---------------------------------------------------------------------------
# Avals


_keep = object()   # ShapedArray.update: keep the sharding (None is a value)


_NO_VMA: frozenset = frozenset()

#: Mesh axis names in the order types print them (`{V:(i,j)}`): each shard_map's mesh's
#: names, registered when its body is traced (`register_axis_order`).
axis_order: dict = {}


def register_axis_order(names: Sequence[Any]) -> None:
  """Records the order (a mesh's `axis_names`) in which varying manual axes print."""
  for n in names:
    axis_order.setdefault(n, len(axis_order))


def order_axes(axes) -> tuple:
  """`axes` (a set of mesh axis names) in mesh order (`register_axis_order`)."""
  return tuple(sorted(axes, key=lambda n: (axis_order.get(n, len(axis_order)), str(n))))


def vma_str(vma) -> str:
  """JAX's suffix for varying manual axes: `{V:i}`, `{V:(i,j)}`, '' when there are none."""
  if not vma:
    return ""
  names = order_axes(vma)
  text = ",".join(map(str, names))
  return "{V:" + (text if len(names) == 1 else f"({text})") + "}"


def _state_str(vma, unreduced, reduced, mesh) -> str:
  """JAX's suffix for the mesh-axis states of a value: `{V:i, U:x, R:(y,z)}` (each part only
  when it has axes, names in mesh order)."""
  parts = []
  for tag, axes in (("V", vma), ("U", unreduced), ("R", reduced)):
    if axes:
      names = [n for n in mesh.axis_names if n in axes] + sorted(
          (n for n in axes if n not in mesh.axis_names), key=str)
      text = ",".join(map(str, names))
      parts.append(f"{tag}:" + (text if len(names) == 1 else f"({text})"))
  return "{" + ", ".join(parts) + "}" if parts else ""


class ManualAxisType:
  """How a value inside a shard_map body relates to its manual mesh axes (JAX's
  `jax.sharding.ManualAxisType`): `varying`, the axes along which it may differ between
  devices (its vma); `unreduced` and `reduced` (JAX's partial sums; always empty here).

  Raises:
    ValueError: `varying` shares axes with `unreduced` or `reduced` (JAX's message).
  """
  __slots__ = ("varying", "unreduced", "reduced")

  def __init__(self, *, varying=frozenset(), unreduced=frozenset(), reduced=frozenset()):
    varying, unreduced, reduced = frozenset(varying), frozenset(unreduced), frozenset(reduced)
    if varying & unreduced:
      raise ValueError(f"varying and unreduced cannot have common mesh axes. Got "
                       f"varying={varying} and unreduced={unreduced}")
    if varying & reduced:
      raise ValueError(f"varying and reduced cannot have common mesh axes. Got "
                       f"varying={varying} and reduced={reduced}")
    object.__setattr__(self, "varying", varying)
    object.__setattr__(self, "unreduced", unreduced)
    object.__setattr__(self, "reduced", reduced)

  def __setattr__(self, name, value):
    raise AttributeError(f"ManualAxisType is immutable (cannot set {name!r})")

  def __eq__(self, other):
    return (type(other) is ManualAxisType and self.varying == other.varying
            and self.unreduced == other.unreduced and self.reduced == other.reduced)

  def __hash__(self):
    return hash((self.varying, self.unreduced, self.reduced))

  def __repr__(self):
    return (f"ManualAxisType(varying={self.varying}, unreduced={self.unreduced}, "
            f"reduced={self.reduced})")

  def update(self, **kwargs) -> "ManualAxisType":
    """A copy with the given fields (`varying`, `unreduced`, `reduced`) replaced."""
    fields = {"varying": self.varying, "unreduced": self.unreduced, "reduced": self.reduced}
    fields.update(kwargs)
    return ManualAxisType(**fields)

  @property
  def empty(self) -> bool:
    return not (self.varying or self.unreduced or self.reduced)

  @property
  def vur(self) -> frozenset:
    return self.varying | self.unreduced | self.reduced


class AbstractValue:
  """The base class of abstract values (JAX's `core.AbstractValue`): `ShapedArray` and
  `AbstractToken` derive from it, so `isinstance(aval, core.AbstractValue)` holds for every
  aval a trace gives (flax's `nn.scan` checks it). It has no state of its own."""
  __slots__ = ()


class ShapedArray(AbstractValue):
  """Abstract value of an array: shape, dtype, weak type and sharding (`f32[8@x,4]`).

  Args:
    shape: tuple of non-negative ints.
    dtype: a NumPy dtype (already canonical: callers canonicalize).
    weak_type: True for values that came from Python scalars and take the dtype of the
      typed operand they meet (JAX's weak types).
    sharding: the sharding in the type (JAX's sharding in types): a `NamedSharding` over an
      `AbstractMesh` whose spec has one entry per dimension and names only the mesh's
      Explicit axes (a name, a tuple of names, or None), for a value with at least one
      dimension split over Explicit mesh axes; None otherwise (the default: no dimension
      split, which `sharding` reports as `NamedSharding(AbstractMesh((), ()), P(None, ...))`).
      Callers normalize (`runtime.spmd.typed_aval`, the rules of `sharding_rules`).
    vma: (keyword) the manual mesh axes along which the value varies inside a
      `shard_map(..., check_vma=True)` body (JAX's varying manual axes, `{V:i}` in its
      type; `manual_axis_type.varying`); empty outside such bodies.
  """
  __slots__ = ("shape", "dtype", "weak_type", "_sharding", "_hash", "vma")
  array_abstraction_level = 1

  def __init__(self, shape: tuple[int, ...], dtype: np.dtype, weak_type: bool = False,
               sharding: Any = None, *, vma: frozenset = _NO_VMA):
    if isinstance(dtype, (type, str)):   # a scalar type or name, as JAX accepts: its dtype
      d = getattr(dtype, "dtype", None)
      dtype = d if isinstance(d, np.dtype) else np.dtype(dtype)
    if type(shape) is not tuple:   # as JAX's: a list (quax's `aval()`) or other sequence
      shape = tuple(int(d) if isinstance(d, (int, np.integer)) else d for d in shape)
    if (sharding is not None and not any(sharding.spec)
        and not getattr(sharding.spec, "unreduced", None)
        and not getattr(sharding.spec, "reduced", None)):
      # NB: an unsplit type is None here (JAX's avals always hold one: flax builds avals
      # from `x.aval.sharding`, which reads `NamedSharding(mesh, P(None, ...))`)
      sharding = None
    self.shape = shape
    self.dtype = dtype
    self.weak_type = weak_type
    self._sharding = sharding
    self.vma = vma
    if sharding is None and not vma:
      self._hash = hash((shape, dtype, weak_type))
    else:
      self._hash = hash((shape, dtype, weak_type, sharding, vma))
      if not _sharding_in_types[0]:
        _enable_sharding_rules()

  ndim = property(lambda self: len(self.shape))

  @property
  def sharding(self):
    """The sharding in this aval's type: its NamedSharding when a dimension is split over
    Explicit mesh axes, else `NamedSharding(m, P(None, ...))` with `m` the abstract mesh in
    context (`AbstractMesh((), ())` when none is set).

    NB: JAX's avals carry the mesh in context when they were made (so under a bare
    `jax.set_mesh(mesh)` an eager array's `typeof(x).sharding` is over that mesh); here the
    unsplit mesh is the one in context when this is read."""
    if self._sharding is not None:
      return self._sharding
    # NB: imported here: stagecraft.sharding imports the runtime, which imports core.
    from stagecraft import sharding
    m = sharding.get_abstract_mesh()
    if m.empty:
      return sharding.unsharded(len(self.shape))
    return sharding.NamedSharding(m, sharding.PartitionSpec(*[None] * len(self.shape)))

  @property
  def size(self) -> int:
    try:
      return int(np.prod(self.shape, dtype=np.int64))
    except InconclusiveDimensionOperation:   # symbolic dimensions: a dimension expression
      return shape_poly.prod(self.shape)

  def __eq__(self, other):
    return (type(other) is ShapedArray and self.shape == other.shape
            and self.dtype == other.dtype and self.weak_type == other.weak_type
            and self._sharding == other._sharding and self.vma == other.vma)

  def __hash__(self):
    return self._hash

  @property
  def manual_axis_type(self) -> ManualAxisType:
    """JAX's `aval.manual_axis_type`: `ManualAxisType(varying=vma)`."""
    return ManualAxisType(varying=self.vma)

  mat = manual_axis_type

  def update(self, shape=None, dtype=None, weak_type=None, sharding=_keep,
             vma=None) -> "ShapedArray":
    """A copy with the given fields replaced. The sharding is kept unless given, or dropped
    when the shape changes (a sharding rule gives the new one); the vma is kept unless
    given."""
    if sharding is _keep:
      sharding = self._sharding if shape is None or shape == self.shape else None
    return ShapedArray(self.shape if shape is None else shape,
                       self.dtype if dtype is None else dtype,
                       self.weak_type if weak_type is None else weak_type, sharding,
                       vma=self.vma if vma is None else frozenset(vma))

  def lo_ty(self) -> list:
    """The array types a value of this type is made of (hijax's interface): itself."""
    return [self]

  def lower_val(self, val: Any) -> list:
    """A value's arrays (hijax's interface): the value itself."""
    return [val]

  def raise_val(self, val: Any) -> Any:
    """The value made of its arrays (hijax's interface): the array itself."""
    return val

  def shard(self, mesh: Any, manual_axes: Any, check_vma: bool, spec: Any) -> "ShapedArray":
    """The type of one device's block of a value of this type inside a shard_map body over
    `mesh` manual along `manual_axes`, split by the PartitionSpec `spec` (JAX's
    `ShapedArray.shard`; `shard_aval`)."""
    return shard_aval(mesh, manual_axes, check_vma, spec, self)

  def unshard(self, mesh: Any, check_vma: bool, spec: Any) -> "ShapedArray":
    """The type of the value a shard_map assembles by the PartitionSpec `spec` from blocks
    of this type (JAX's `ShapedArray.unshard`; `unshard_aval`)."""
    return unshard_aval(mesh, check_vma, spec, self)

  def to_tangent_aval(self) -> "ShapedArray":
    """The aval of this aval's tangents (JAX's `to_tangent_aval`): the same shape and weak
    type, float0 for integer and bool dtypes, the dtype itself for inexact ones."""
    if dtypes.is_inexact(self.dtype):
      return self
    return ShapedArray(self.shape, dtypes.float0, self.weak_type, self._sharding,
                       vma=self.vma)

  def strip_weak_type(self) -> "ShapedArray":
    return (self if not self.weak_type else
            ShapedArray(self.shape, self.dtype, False, self._sharding, vma=self.vma))

  def str_short(self, short_dtypes: bool = True) -> str:
    """`f32[3,4]` (`float32[3,4]` with `short_dtypes=False`); a dimension split over mesh
    axes shows them as JAX does: `f32[8@x,4]`, `f32[8@(x,y),4]`."""
    name = (dtypes.short_name(self.dtype) if short_dtypes else
            "float0" if self.dtype == dtypes.float0 else self.dtype.name)
    if self._sharding is None:
      if self.vma:
        return f"{name}[{','.join(map(str, self.shape))}]{vma_str(self.vma)}"
      return f"{name}[{','.join(map(str, self.shape))}]"
    dims = []
    spec = tuple(self._sharding.spec) + (None,) * (len(self.shape) - len(self._sharding.spec))
    for d, e in zip(self.shape, spec):
      if e is None:
        dims.append(str(d))
      elif isinstance(e, tuple):
        dims.append(f"{d}@({','.join(map(str, e))})")
      else:
        dims.append(f"{d}@{e}")
    u, r = self._sharding.spec.unreduced, self._sharding.spec.reduced
    if u or r:
      return f"{name}[{','.join(dims)}]{_state_str(self.vma, u, r, self._sharding.mesh)}"
    return f"{name}[{','.join(dims)}]{vma_str(self.vma)}"

  def __repr__(self):   # JAX's: ShapedArray(float32[3], weak_type=True)
    w = ", weak_type=True" if self.weak_type else ""
    return f"ShapedArray({self.str_short(False)}{w})"

  def __str__(self):   # JAX's: float32[3], ~float32[] when weakly typed
    return ("~" if self.weak_type else "") + self.str_short(False)


class RuleRegistry(dict):
  """A registry of rules taking two operand sequences (`ad.primitive_jvps`: primals and
  tangents; `batching.primitive_batchers`: values and batch dims). stagecraft's own rules get
  lists; a rule registered from outside stagecraft (a library's primitive) gets tuples, as
  JAX hands them over (equinox passes them on as a vmap's `in_axes`, which must match)."""

  def __setitem__(self, prim: "Primitive", rule: Callable) -> None:
    fn = getattr(rule, "func", rule)   # a functools.partial's function
    if not (getattr(fn, "__module__", None) or "").startswith("stagecraft"):
      inner = rule

      def rule(a, b, **params):
        return inner(tuple(a), tuple(b), **params)
      rule.__wrapped__ = inner
    super().__setitem__(prim, rule)


def is_extended_dtype(dtype) -> bool:
  """Whether `dtype` is an extended dtype object (a typed key's `key<fry>`), not NumPy's."""
  t = getattr(dtype, "type", None)
  return (not isinstance(dtype, (np.dtype, type, str)) and isinstance(t, type)
          and issubclass(t, dtypes.extended))


def physical_aval(aval: Any) -> Any:
  """The aval of `aval`'s data in compiled programs: for an extended dtype (a typed key's
  `key<fry>[*s]`) the dtype's `physical_aval` (`u32[*s, 2]`), else `aval` itself."""
  dtype = getattr(aval, "dtype", None)
  if dtype is None or isinstance(dtype, np.dtype):
    return aval
  return dtype.physical_aval(aval)


class ShapeDtypeStruct:
  """A shape and dtype without data, for `eval_shape`, `make_jaxpr` and `lower`.

  Args:
    shape: tuple of ints.
    dtype: dtype-like; canonicalized when traced. An extended dtype (a typed key's
      `key<fry>`) is kept as it is, as JAX's.
    weak_type: keep the weak type of the described value (JAX drops it: jax#23302).
    sharding: optional sharding (kept, used by sharded lowering).
    manual_axis_type: None or a `ManualAxisType` (kept and shown, as JAX's).
    is_ref: whether the value described is a Ref (kept and shown; NB: stagecraft traces
      such a struct as an array, not as a Ref).

  Raises:
    ValueError: a `dtype` of None (JAX's message).
    TypeError: a `manual_axis_type` that is not a ManualAxisType (JAX's message).
  """
  __slots__ = ("shape", "dtype", "weak_type", "sharding", "manual_axis_type", "is_ref")

  def __init__(self, shape, dtype, *, sharding=None, weak_type: bool = False,
               manual_axis_type=None, is_ref: bool = False):
    if dtype is None:
      raise ValueError("ShapeDtypeStruct: dtype must be specified.")
    if manual_axis_type is not None and not isinstance(manual_axis_type, ManualAxisType):
      raise TypeError(f"`manual_axis_type` argument passed to ShapeDtypeStruct should be of "
                      f"type `jax.sharding.ManualAxisType`. Got type {type(manual_axis_type)}")
    # NB: symbolic dimensions (stagecraft.export's shape polymorphism) stay as they are.
    self.shape = tuple(d if shape_poly.is_symbolic_dim(d) else int(d) for d in shape)
    self.dtype = dtype if is_extended_dtype(dtype) else np.dtype(dtype)
    self.weak_type = bool(weak_type)
    self.sharding = sharding
    self.manual_axis_type = manual_axis_type
    self.is_ref = is_ref

  def update(self, **kwargs) -> "ShapeDtypeStruct":
    """A copy with the given fields (`shape`, `dtype`, `sharding`, `weak_type`,
    `manual_axis_type`, `is_ref`) replaced, as JAX's `ShapeDtypeStruct.update`.

    Raises:
      TypeError: for another keyword (the constructor's message)."""
    fields = {k: getattr(self, k) for k in self.__slots__}
    fields.update(kwargs)
    shape, dtype = fields.pop("shape"), fields.pop("dtype")
    return ShapeDtypeStruct(shape, dtype, **fields)

  ndim = property(lambda self: len(self.shape))
  size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))

  def __len__(self) -> int:
    """The leading dimension, as an array's (JAX's `ShapeDtypeStruct.__len__`).

    Raises:
      TypeError: "len() of unsized object" for a 0-d shape (NumPy's and JAX's words)."""
    if not self.shape:
      raise TypeError("len() of unsized object")
    return self.shape[0]

  @classmethod
  def like(cls, x) -> "ShapeDtypeStruct":
    """The shape, dtype and weak type of `x` (an Array, tracer, NumPy array or scalar),
    with its sharding where `x` is an Array committed to its devices (JAX's
    `ShapeDtypeStruct.like`).

    Raises:
      TypeError: `x` is not an array-like value."""
    aval = get_aval(x)
    committed = not isinstance(x, Tracer) and getattr(x, "committed", True)
    sharding = getattr(x, "sharding", None) if committed is True else None
    return cls(aval.shape, aval.dtype, weak_type=aval.weak_type, sharding=sharding)

  def __repr__(self):
    w = ", weak_type=True" if self.weak_type else ""
    sh = "" if self.sharding is None else f", sharding={self.sharding!r}"
    mat = f", manual_axis_type={self.manual_axis_type}" if self.manual_axis_type else ""
    ref = f", is_ref={self.is_ref}" if self.is_ref else ""
    return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype.name}{sh}{w}{mat}{ref})"

  def __eq__(self, other):
    return (isinstance(other, ShapeDtypeStruct) and self.shape == other.shape
            and self.dtype == other.dtype and self.weak_type == other.weak_type
            and self.manual_axis_type == other.manual_axis_type
            and self.is_ref == other.is_ref)

  def __hash__(self):
    return hash((self.shape, self.dtype, self.weak_type, self.is_ref))


def _scalar_aval(typ):
  avals = {}   # x64 flag -> aval; avals are immutable, so one per (type, flag) serves all

  def handler(x):
    x64 = dtypes.config.enable_x64
    aval = avals.get(x64)
    if aval is None:
      aval = avals[x64] = ShapedArray((), dtypes.python_scalar_dtype(typ), typ is not bool)
    if typ is int:
      check_int_range(x, aval.dtype)
    return aval
  return handler


_int_bounds = {np.dtype(t): (int(np.iinfo(t).min), int(np.iinfo(t).max))
               for t in (np.int32, np.int64)}


def check_int_range(x: int, dt: np.dtype):
  lo, hi = _int_bounds[dt]
  if not lo <= x <= hi:
    raise OverflowError(f"Python int {x} too large to convert to {dt.name}")   # JAX's words


def _ndarray_aval(x):
  dt = x.dtype
  if dt.kind in "OSUMm" or (dt.type is np.void and dt != dtypes.float0):
    # NB: as JAX's, object, string, datetime and raw void arrays are no array type (the
    # ml_dtypes types, bfloat16 ..., are of kind "V" too, with types of their own)
    raise TypeError(f"Value of type {type(x)} with dtype {dt} is not a valid array type: "
                    f"expected an array of bool, integer, floating or complex numbers.")
  return ShapedArray(x.shape, dtypes.canonicalize_dtype(dt), False)


def _npscalar_aval(x):
  return ShapedArray((), dtypes.canonicalize_dtype(x.dtype), False)


def is_hi(aval: Any) -> bool:
  """Whether `aval` is a hijax type (`experimental.hijax.HiType`: values made of several
  arrays, `lo_ty()`)."""
  return getattr(aval, "is_high", False) is True


#: aval type -> `handler(mesh, manual_axes, check_vma, spec, aval)`, the type of a block of a
#: value inside a shard_map body (ShapedArray's: `lax/spmd.py`).
shard_aval_handlers: dict[type, Callable] = {}
#: aval type -> `handler(mesh, check_vma, spec, aval)`, the type a shard_map result
#: assembled from blocks of type `aval` has outside the body (ShapedArray's: `lax/spmd.py`).
unshard_aval_handlers: dict[type, Callable] = {}


def shard_aval(mesh: Any, manual_axes: Any, check_vma: bool, spec: Any, aval: Any) -> Any:
  """The type inside a shard_map body of an argument of type `aval` split by `spec` (a
  PartitionSpec, or a hijax type's `HiPspec`): a hijax type's own `shard` method, else the
  handler of `aval`'s type (JAX's `core.shard_aval`).

  Raises:
    NotImplementedError: no handler for `aval`'s type."""
  if is_hi(aval):
    return aval.shard(mesh, manual_axes, check_vma, spec)
  handler = shard_aval_handlers.get(type(aval))
  if handler is None:
    raise NotImplementedError(f"Unsupported aval type: {type(aval)}")
  return handler(mesh, manual_axes, check_vma, spec, aval)


def unshard_aval(mesh: Any, check_vma: bool, spec: Any, aval: Any) -> Any:
  """The type outside a shard_map of a result whose body type is `aval`, assembled by
  `spec`: a hijax type's own `unshard` method, else the handler of `aval`'s type (JAX's
  `core.unshard_aval`).

  Raises:
    NotImplementedError: no handler for `aval`'s type."""
  if is_hi(aval):
    return aval.unshard(mesh, check_vma, spec)
  handler = unshard_aval_handlers.get(type(aval))
  if handler is None:
    raise NotImplementedError(f"Unsupported aval type: {type(aval)}")
  return handler(mesh, check_vma, spec, aval)


class MutableHiError(NotImplementedError):
  """Mutable hijax values (`values`) met where the computation being staged cannot take
  them as it is (jit and scan take them again as hidden arguments or carries)."""
  values: list = []


#: The hijax value types (`experimental.hijax.register_hitype`): Python type -> function
#: giving a value's hijax type. Only `typeof` reads it (stagecraft does not trace hijax
#: types: they are not array-likes for `get_aval`).
hitype_mappings: dict[type, Callable[[Any], Any]] = {}


#: Maps a Python type to a function returning the aval of a value of that type. Extended by
#: the runtime (Array, jax.Array) and by users of custom array-likes.
pytype_aval_mappings: dict[type, Callable[[Any], ShapedArray]] = {
    bool: _scalar_aval(bool), int: _scalar_aval(int), float: _scalar_aval(float),
    complex: _scalar_aval(complex), np.ndarray: _ndarray_aval,
}
for _t in set(np.sctypeDict.values()):
  if issubclass(_t, np.generic) and _t is not np.object_ and not issubclass(
      _t, (np.str_, np.bytes_, np.void, np.datetime64, np.timedelta64)):
    pytype_aval_mappings[_t] = _npscalar_aval
for _dt in (dtypes.bfloat16, dtypes.float8_e4m3fn, dtypes.float8_e5m2):
  pytype_aval_mappings[_dt.type] = _npscalar_aval


def _void_aval(x):
  # NumPy scalars of float0 (the tangent type of integers) are np.void values.
  if x.dtype != dtypes.float0:
    raise TypeError(f"Value {x!r} of type {type(x).__name__} is not a valid array type: "
                    f"expected an Array, a NumPy array or scalar, or a Python "
                    f"bool/int/float/complex.")
  return ShapedArray((), dtypes.float0, False)


pytype_aval_mappings[np.void] = _void_aval


def _masked_array_aval(x):
  # As JAX: a masked array is no array type (jnp.array, which strips the mask, aside).
  raise ValueError("numpy masked arrays are not supported as direct inputs to JAX functions. "
                   "Use arr.filled() to convert the value to a standard numpy array.")


pytype_aval_mappings[np.ma.MaskedArray] = _masked_array_aval


class WeakScalarValue:
  """A host scalar of a given dtype that is weakly typed (a Python scalar that lax converted
  to the dtype of its typed operand). Staged as a Literal."""
  __slots__ = ("value", "aval")

  def __init__(self, value: np.generic):
    self.value = value
    self.aval = ShapedArray((), value.dtype, True)

  # Array-like attributes, so promotion (`dtypes.result_type`) reads it as a weak scalar.
  dtype = property(lambda self: self.aval.dtype)
  shape = property(lambda self: ())
  weak_type = property(lambda self: True)

  def __array__(self, dtype=None, copy=None):
    return np.asarray(self.value, dtype)

  def __repr__(self):
    return f"{self.value!r}(weak)"


pytype_aval_mappings[WeakScalarValue] = lambda x: x.aval


def get_aval(x: Any) -> ShapedArray:
  """The ShapedArray of an array-like value.

  Raises:
    TypeError: if `x` is not an array-like (a clear message names its type).
  """
  handler = pytype_aval_mappings.get(type(x))
  if handler is not None:
    return handler(x)
  if isinstance(x, Tracer):
    return x.aval
  for t in type(x).__mro__[1:]:
    handler = pytype_aval_mappings.get(t)
    if handler is not None:
      return handler(x)
  if hasattr(x, "__jax_array__"):
    return get_aval(x.__jax_array__())
  raise TypeError(f"Value {x!r} of type {type(x).__name__} is not a valid array type: expected "
                  f"an Array, a NumPy array or scalar, or a Python bool/int/float/complex.")


def valid_array_type(x: Any) -> bool:
  """Whether `x` is a value stagecraft can treat as an array."""
  try:
    get_aval(x)
    return True
  except (TypeError, OverflowError):
    return False


# ---------------------------------------------------------------------------
# The IR


class Var:
  """A variable of a jaxpr, typed by its aval. Compared by identity."""
  __slots__ = ("aval",)

  def __init__(self, aval: ShapedArray):
    self.aval = aval

  def __repr__(self):   # JAX's: Var(id=139813226564800):int32[]
    return f"Var(id={id(self)}):{self.aval.str_short(False)}"


class DropVar(Var):
  """An output variable that nothing reads (printed `_`)."""
  __slots__ = ()


class Literal:
  """A scalar constant inlined in a jaxpr (printed `2.0:f32[]`). `val` is a Python scalar
  when the aval is weakly typed, else a NumPy scalar of the aval's dtype."""
  __slots__ = ("val", "aval")

  def __init__(self, val: Any, aval: ShapedArray):
    self.val = val
    self.aval = aval

  def __repr__(self):
    # JAX's: Literal(2.0), the value as a Python scalar; a weakly typed int or complex shows
    # JAX's typed scalar (`Literal(TypedInt(1, dtype=int32))`), whose repr names its dtype.
    v = self.val
    if type(v) in (int, complex) and self.aval.weak_type:
      kind = "TypedInt" if type(v) is int else "TypedComplex"
      return f"Literal({kind}({v!r}, dtype={self.aval.dtype.name}))"
    v = v.item() if isinstance(v, np.generic) else v
    return f"Literal({v!r})"


Atom = Var | Literal


# ---------------------------------------------------------------------------
# Effects (JAX's `effects` module): what an equation does besides computing its outputs.


class Effect:
  """A side effect of an equation (printing, a host callback). Equations with effects are
  never removed by dead-code elimination; effects of a type in `ordered_effects` also run
  in program order (the lowering threads a token through them)."""
  __slots__ = ()

  def __repr__(self):
    return type(self).__name__


Effects = frozenset
no_effects: frozenset = frozenset()


class EffectTypeSet:
  """A set of effect types (`ordered_effects.add_type(MyEffect)`); `contains(effect)`
  asks whether an effect is an instance of one of them."""

  def __init__(self):
    self._types: set[type] = set()

  def add_type(self, t: type) -> None:
    self._types.add(t)

  def contains(self, eff: Effect) -> bool:
    return any(isinstance(eff, t) for t in self._types)

  def filter_in(self, effs) -> list:
    return [e for e in effs if self.contains(e)]

  def filter_not_in(self, effs) -> list:
    return [e for e in effs if not self.contains(e)]


#: Effect types that run in program order (io_callback(ordered=True), debug.print(ordered=True)).
ordered_effects = EffectTypeSet()


class AbstractToken(AbstractValue):
  """The type of the token that orders effects in a lowered program (`!stablehlo.token`);
  `abstract_token` is its one instance."""
  __slots__ = ()
  shape = ()

  def __repr__(self):
    return "AbstractToken()"

  def str_short(self, short_dtypes: bool = False) -> str:
    return "Tok"


abstract_token = AbstractToken()


class MemorySpace(enum.Enum):
  """Where an array's buffer lives (JAX's `jax.memory.Space`): `device_put(x,
  jax.memory.Space.Device)` keeps `x` in device memory; stagecraft has no other memory (host
  offloading) yet."""
  Device = 1
  Host = 2
  Any = 3

  def __repr__(self):
    return f"MemorySpace.{self.name}"


class Token:
  """A token value (JAX's `core.Token`): what `lax.create_token` and `lax.after_all` give
  outside a trace, and a compiled program gives for a result of type `!stablehlo.token`.
  It holds `_buf`, the program's result (an empty bool Array, `bool[0]`); passed to a
  compiled program it becomes a token argument. Its aval is `abstract_token`."""
  __slots__ = ("_buf",)

  def __init__(self, buf: Any):
    self._buf = buf

  def block_until_ready(self) -> "Token":
    """Waits until the computation that made this token has finished; returns the token."""
    if hasattr(self._buf, "block_until_ready"):
      self._buf.block_until_ready()
    return self


pytype_aval_mappings[Token] = lambda _: abstract_token


class JaxprEqnContext(NamedTuple):
  """What `JaxprEqn.ctx` gives (JAX's `JaxprEqnContext`'s fields that stagecraft records)."""
  compute_type: str | None
  threefry_partitionable: bool
  xla_metadata: dict | None


class JaxprEqn(NamedTuple):
  """One equation: `outvars = primitive[params] invars`.

  `source_info` is where the user's code bound the primitive: an object with a `summary()`
  string `file:line:col (function)`, by default a `UserFrame` (recorded for every staged
  equation, `current_source_info`), a `source_info_util.NameStackInfo` inside named scopes;
  None for equations stagecraft builds itself (an eager op's one-equation program)."""
  invars: list[Atom]
  outvars: list[Var]
  primitive: "Primitive"
  params: dict[str, Any]
  source_info: Any = None

  def replace(self, **kw) -> "JaxprEqn":
    return self._replace(**kw)

  @property
  def ctx(self) -> "JaxprEqnContext":
    """JAX's `eqn.ctx`: the context the equation was recorded in; its `xla_metadata` is the
    dict of the active `set_xla_metadata` blocks (None outside any)."""
    md = getattr(self.source_info, "xla_metadata", ())
    return JaxprEqnContext(None, dtypes.config.threefry_partitionable, dict(md) if md else None)

  @property
  def effects(self) -> frozenset:
    """The equation's effects: its primitive's (`Primitive.effects_rule` of its params)
    and those of the jaxprs its params hold (a jit, cond, loop or map of an effect)."""
    prim = self.primitive
    rule = prim.effects_rule
    if rule is not None:
      effs = rule(**self.params)
    elif prim.effectful_abstract_eval is not None:   # effects that depend on the avals
      effs = frozenset(prim.effectful_abstract_eval(
          *[v.aval for v in self.invars], **self.params)[1])
    else:
      effs = no_effects
    for j in subjaxprs(self):
      e = j.effects
      if e:
        effs = effs | e
    return effs


#: None, or a callable `() -> source info` that the staging trace calls for each equation it
#: records instead of `current_source_info` (set only while a named scope is active or
#: `ad_checkpoint.saved_residuals` traces).
source_info_hook: Callable[[], Any] | None = None


# ---------------------------------------------------------------------------
# Source locations (JAX's `source_info_util.current()` / `user_frame`)


class UserFrame(tuple):
  """Where user code bound a primitive: `(code, lasti)`, the code object and bytecode offset
  of the innermost frame outside stagecraft (and outside paths given to
  `traceback_util.register_exclusion`); inside a jit's trace, when that frame was called by
  other user frames below the jit's call, `(code, lasti, parents)` with those frames
  (innermost first, `UserFrame`s), the rest of the traceback JAX writes into locations.

  Recording it costs a few frame steps and one small tuple per staged equation; the file,
  line, column and function are read from the code object only when asked (`position`,
  `summary`), as JAX reads its tracebacks lazily.
  """
  __slots__ = ()

  code = property(operator.itemgetter(0))
  lasti = property(operator.itemgetter(1))

  @property
  def parents(self) -> tuple:
    """The user frames that called this one inside the traced function (see above)."""
    return self[2] if len(self) > 2 else ()

  def position(self) -> tuple[str, int, int, int, int, str]:
    """`(file, line, column, end_line, end_column, function)`: the span of the bytecode
    instruction (columns 0-based, as Python's `co_positions` and JAX's locations give
    them; 0 where unknown), the function's qualified name."""
    # NB: cached by the code object's identity (and the offset): equal code objects of two
    # files (one source compiled twice) are two places, which a key by value would merge
    code, lasti = self[0], self[1]
    entry = _positions.get((id(code), lasti))
    pos = entry[1] if entry is not None and entry[0] is code else None
    if pos is None:
      line = end_line = col = end_col = None
      try:
        line, end_line, col, end_col = next(
            itertools.islice(code.co_positions(), lasti // 2, None))
      except (AttributeError, StopIteration, ValueError):
        pass
      if line is None:   # NB: positions stripped (python -X no_debug_ranges): the line table
        line = next((ln for start, end, ln in code.co_lines()
                     if start <= lasti < end and ln is not None), code.co_firstlineno)
      pos = (code.co_filename, line, col or 0, end_line or line, end_col or 0,
             getattr(code, "co_qualname", code.co_name))
      if len(_positions) > 65536:
        _positions.clear()
      _positions[(id(code), lasti)] = (code, pos)   # NB: the code kept: its id not reused
    return pos

  file_name = property(lambda self: self.position()[0])
  line = property(lambda self: self.position()[1])
  column = property(lambda self: self.position()[2])
  function_name = property(lambda self: self.position()[5])

  def summary(self) -> str:
    """`file:line:column (function)` (the column left out when 0), as JAX's
    `source_info_util.summarize`."""
    f, line, col, _, _, fn = self.position()
    return f"{f}:{line}:{col} ({fn})" if col else f"{f}:{line} ({fn})"

  @property
  def name_stack(self) -> "ScopeNames":
    """No named scope was active where this equation was recorded: the empty name stack
    (JAX's `eqn.source_info.name_stack`, whose str is '')."""
    return _NO_SCOPES

  def __repr__(self):
    return f"UserFrame({self.summary()})"


class ScopeNames(tuple):
  """The names of the named scopes an equation was recorded in, outermost first; str joins
  them with '/' as JAX's `NameStack` prints (haiku's `jaxpr_info` splits that string)."""
  __slots__ = ()

  def __str__(self) -> str:
    return "/".join(self)


_NO_SCOPES = ScopeNames()
_positions: dict[tuple[int, int], tuple] = {}


def source_summary(source_info: Any) -> str:
  """`file:line:column (function)` of an equation's `source_info`, or '' when it has none."""
  if source_info is None:
    return ""
  summary = getattr(source_info, "summary", None)
  return summary() if summary is not None else ""


def source_frame(source_info: Any) -> UserFrame | None:
  """The `UserFrame` an equation's `source_info` holds (looking inside wrappers with a
  `source_info` attribute, as `NameStackInfo`), or None."""
  while source_info is not None and type(source_info) is not UserFrame:
    source_info = getattr(source_info, "source_info", None)
  return source_info


def user_frames(f: Any, limit: int = 100) -> tuple[UserFrame, ...]:
  """The user frames at or above the frame `f`, innermost first, at most `limit`: those
  `user_frame` finds, less the standard library's (JAX's `is_user_filename`); under
  `python -m stagecraft run` the walk ends at the runner, whose `runpy` frames a script
  run by `python` does not have. The call stack JAX writes into op locations (their
  callsite chain)."""
  out = []
  while f is not None and len(out) < limit:
    code = f.f_code
    name = code.co_filename
    if name in _internal_files:
      if name == _runner_file:
        while out and out[-1][0].co_filename.startswith("<frozen "):
          out.pop()
        break
      f = f.f_back
    elif name in _user_files:
      if not name.startswith(_stdlib_prefix):
        out.append(UserFrame((code, f.f_lasti)))
      f = f.f_back
    else:
      traceback_util.classify_file(name)
  return tuple(out)


_stdlib_prefix = sysconfig.get_path("stdlib") + os.sep
_runner_file = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cli.py")


def first_user_frame(f: Any) -> Any:
  """The frame object of the first frame at or above `f` that `user_frames` keeps, or
  None."""
  while f is not None:
    name = f.f_code.co_filename
    if name in _internal_files:
      if name == _runner_file:
        return None
    elif name in _user_files:
      if not name.startswith(_stdlib_prefix):
        return f
    else:
      traceback_util.classify_file(name)
      continue
    f = f.f_back
  return None


class _TraceBoundary(threading.local):
  def __init__(self):
    # The frame object of the user's call that started the jit trace being recorded
    # (`traced_from`), and the user frames between a frame and it, by (frame, lasti).
    self.frame: Any = None
    self.parents: dict = {}


#: The current jit trace's boundary in this thread (public for the staging trace's inlined
#: `current_source_info`).
trace_boundary = _TraceBoundary()


@contextmanager
def traced_from(frame: Any):
  """Context manager: equations recorded inside take, besides their innermost user frame,
  the user frames that called it below `frame` (the frame object of the user's call of the
  jit being traced; None: none), as `UserFrame.parents`."""
  b = trace_boundary
  prev = b.frame, b.parents
  b.frame, b.parents = frame, {}
  try:
    yield
  finally:
    b.frame, b.parents = prev


def with_parents(f: Any) -> UserFrame:
  """The `UserFrame` of the user frame object `f`, with its parents inside the current jit
  trace (`traced_from`): the user frames from its caller up to the trace's boundary, none
  if the boundary is not above it."""
  code = f.f_code
  b = trace_boundary
  stop = b.frame
  caller = f.f_back
  if stop is None or f is stop or caller is None:
    return UserFrame((code, f.f_lasti))
  key = (caller, caller.f_lasti)
  parents = b.parents.get(key)
  if parents is None:
    out, g = [], caller
    while g is not None and g is not stop:
      name = g.f_code.co_filename
      if name not in _internal_files:
        if name not in _user_files:
          traceback_util.classify_file(name)
          continue
        if not name.startswith(_stdlib_prefix):
          out.append(UserFrame((g.f_code, g.f_lasti)))
      g = g.f_back
    # NB: a boundary that is not above `f` (a trace run from elsewhere): no parents.
    parents = b.parents[key] = tuple(out) if g is stop else ()
  return UserFrame((code, f.f_lasti, parents)) if parents else UserFrame((code, f.f_lasti))


class _SourceContext(threading.local):
  def __init__(self):
    # The source info that equations recorded now take instead of the caller's frame: the
    # equation an interpreter is re-binding (eval_jaxpr, transposition), as JAX's
    # `user_context`.
    self.source_info: Any = None


#: The thread's re-binding context (`source_context`); `source_contexts_active[0]` counts
#: the active ones in all threads: while none is, recording an equation skips the
#: thread-local read. (Public for the staging trace's inlined copy of `current_source_info`.)
source_context_state = _SourceContext()
source_contexts_active = [0]
_source_context = source_context_state
_source_contexts_active = source_contexts_active
_internal_files = traceback_util.internal_files
_user_files = traceback_util.user_files
_getframe = sys._getframe


def current_source_info(skip: int = 2) -> Any:
  """The source info of an equation recorded now: the re-bound equation's (inside
  `source_context`), else the innermost user frame (`UserFrame`) above the caller's `skip`
  frames (which must be stagecraft's); None if there is no user frame.

  NB: `DynamicJaxprTrace.process_primitive` inlines this (keep the two in step)."""
  if _source_contexts_active[0]:
    src = _source_context.source_info
    if src is not None:
      return src
  return user_frame(_getframe(skip))


def user_frame(f: Any) -> UserFrame | None:
  """The innermost frame at or above the frame `f` that is not stagecraft's (nor under a path
  given to `traceback_util.register_exclusion`), as a `UserFrame`; None if there is none."""
  while f is not None:
    code = f.f_code
    name = code.co_filename
    if name in _internal_files:
      f = f.f_back
    elif name in _user_files:
      return with_parents(f) if trace_boundary.frame is not None else UserFrame(
          (code, f.f_lasti))
    else:
      traceback_util.classify_file(name)
  return None


class source_context:
  """Context manager: equations recorded inside take `source_info` (that of an equation an
  interpreter re-binds: transposition, partial evaluation), as JAX's
  `source_info_util.user_context`; None: the caller's frame as usual. `set` switches to the
  next equation's. An exception raised inside gets the note naming the current one's line
  (`add_source_note`).

  Example:
    >>> with source_context(None) as ctx:
    ...   for eqn in []:
    ...     ctx.set(eqn.source_info)
  """
  __slots__ = ("source_info", "_prev")

  def __init__(self, source_info: Any = None):
    self.source_info = source_info

  def __enter__(self) -> "source_context":
    self._prev = _source_context.source_info
    _source_context.source_info = self.source_info
    _source_contexts_active[0] += 1
    return self

  def set(self, source_info: Any) -> None:
    self.source_info = _source_context.source_info = source_info

  def __exit__(self, typ, e, tb) -> bool:
    _source_contexts_active[0] -= 1
    _source_context.source_info = self._prev
    if isinstance(e, Exception):
      add_source_note(e, self.source_info)
    return False


_NOTE_PREFIX = "The operation that raised this was staged at "


def add_source_note(e: BaseException, source_info: Any) -> None:
  """Adds to `e` the note `The operation that raised this was staged at file:line (fn)`
  (an equation stagecraft re-binds, e.g. while transposing, raised `e`; JAX chains a
  `JaxStackTraceBeforeTransformation` for this) unless `e` has one already."""
  summary = source_summary(source_info)
  if not summary:
    return
  notes = getattr(e, "__notes__", None)
  if notes and any(type(n) is str and n.startswith(_NOTE_PREFIX) for n in notes):
    return
  try:
    e.add_note(_NOTE_PREFIX + summary)
  except (AttributeError, TypeError):   # NB: exceptions that refuse notes
    pass


class DebugInfo(NamedTuple):
  """Where a jaxpr came from: the transformation, the function, and one name per flat input
  (`x`, `params['w']`), with the positional index or keyword name of its top-level argument."""
  traced_for: str
  func_name: str
  arg_names: tuple[str, ...] | None
  arg_origins: tuple[int | str, ...] | None = None
  func_src_info: str | None = None   # JAX's: "f at /path/file.py:12"


class Jaxpr:
  """A typed, first-order program: `{ lambda constvars ; invars . let eqns in outvars }`.

  `effects` is the union of its equations' effects (computed on first use; build a new
  Jaxpr, e.g. with `replace`, rather than editing `eqns` after that)."""
  __slots__ = ("constvars", "invars", "outvars", "eqns", "debug_info", "_effects")

  def __init__(self, constvars: Sequence[Var], invars: Sequence[Var], outvars: Sequence[Atom],
               eqns: Sequence[JaxprEqn], debug_info: DebugInfo | None = None, effects=None):
    self.constvars = list(constvars)
    self.invars = list(invars)
    self.outvars = list(outvars)
    self.eqns = list(eqns)
    self.debug_info = debug_info
    self._effects = None if effects is None else frozenset(effects)

  @property
  def effects(self) -> frozenset:
    effs = self._effects
    if effs is None:
      effs = no_effects
      for eqn in self.eqns:
        e = eqn.effects
        if e:
          effs = effs | e
      self._effects = effs
    return effs

  in_avals = property(lambda self: [v.aval for v in self.invars])
  out_avals = property(lambda self: [v.aval for v in self.outvars])

  def __str__(self):
    return pp_jaxpr(self)

  __repr__ = __str__

  def pretty_print(self, *, source_info: bool = False, print_shapes: bool = True,
                   name_stack: bool = False, custom_pp_eqn_rules: bool = True,
                   use_color: bool = False, width: int = 80, **kwargs) -> str:
    """The jaxpr as text, as JAX's `Jaxpr.pretty_print`: `str(jaxpr)`, with each
    equation's source line (`source_info=True`: `# file.py:12:4 (f)`) and/or name stack
    (`name_stack=True`: `# [outer/inner]`) as aligned comments; binders without their types
    (`print_shapes=False`); every param of every equation, sorted
    (`custom_pp_eqn_rules=False`); laid out to `width` columns."""
    opts = dict(print_shapes=print_shapes, custom_pp_eqn_rules=custom_pp_eqn_rules,
                width=width)
    if not (source_info or name_stack):
      return pp_jaxpr(self, **opts)
    return pp_jaxpr_annotated(self, source_info=source_info, name_stack=name_stack, **opts)

  def replace(self, **kw) -> "Jaxpr":
    d = dict(constvars=self.constvars, invars=self.invars, outvars=self.outvars,
             eqns=self.eqns, debug_info=self.debug_info)
    d.update(kw)
    return Jaxpr(**d)


def memo_on_jaxpr(table, closed: "ClosedJaxpr", key, make):
  """`make()` cached per (`closed`, `key`) in `table`, a WeakKeyDictionary keyed by closed
  jaxprs (the derived jaxprs of call-like primitives: their JVPs, transposes, batched and
  split versions), so that a derived jaxpr is built once and its executables are reused."""
  per = table.get(closed)
  if per is None:
    per = table[closed] = {}
  if key not in per:
    per[key] = make()
  return per[key]


class ClosedJaxpr:
  """A Jaxpr with values for its constvars. Hashed by identity (params carry them)."""
  __slots__ = ("jaxpr", "consts", "__weakref__")

  def __init__(self, jaxpr: Jaxpr, consts: Sequence[Any]):
    if len(consts) != len(jaxpr.constvars):
      raise JaxprTypeError(f"ClosedJaxpr: {len(jaxpr.constvars)} constvars but "
                           f"{len(consts)} consts")
    self.jaxpr = jaxpr
    self.consts = list(consts)

  in_avals = property(lambda self: self.jaxpr.in_avals)
  out_avals = property(lambda self: self.jaxpr.out_avals)
  eqns = property(lambda self: self.jaxpr.eqns)
  effects = property(lambda self: self.jaxpr.effects)
  literals = property(lambda self: self.consts)   # JAX 0.10's name for `consts`
  constvars = property(lambda self: self.jaxpr.constvars)
  invars = property(lambda self: self.jaxpr.invars)
  outvars = property(lambda self: self.jaxpr.outvars)

  def __str__(self):
    return pp_jaxpr(self.jaxpr)

  __repr__ = __str__

  def pretty_print(self, **kwargs) -> str:
    """`self.jaxpr.pretty_print(**kwargs)` (`source_info=True` adds source lines)."""
    return self.jaxpr.pretty_print(**kwargs)


def subjaxprs(eqn: "JaxprEqn"):
  """Yields the jaxprs an equation's params hold (bodies of calls, branches, loops, maps):
  each a `Jaxpr` (a ClosedJaxpr's jaxpr), params holding tuples or lists of them included."""
  for v in eqn.params.values():
    t = type(v)   # NB: the hot path (effects, DCE): most params are None, ints or tuples
    if v is None or t is bool or t is int:
      continue
    if t is ClosedJaxpr:
      yield v.jaxpr
    elif t is Jaxpr:
      yield v
    elif isinstance(v, (tuple, list)):   # branches, a linear solve's (None for some)
      for x in v:
        if isinstance(x, ClosedJaxpr):
          yield x.jaxpr
        elif isinstance(x, Jaxpr):
          yield x
    elif isinstance(v, ClosedJaxpr):
      yield v.jaxpr
    elif isinstance(v, Jaxpr):
      yield v


# ---------------------------------------------------------------------------
# Printer (JAX's textual format)
#
# Jaxprs are laid out as JAX lays them out: each is built as a document of texts, optional
# line breaks, groups and nesting, then formatted to 80 columns by Lindig's "Strictly
# Pretty" (2000) algorithm as JAX applies it: a group is printed flat when the group itself
# (not the text that follows it) fits in what remains of the line, else its breaks become
# newlines. Variables are named `a b c ...` in printing order over the whole text, sub-jaxprs
# included; results of the top-level jaxpr that nothing reads print as `_`; a sub-jaxpr that
# occurs twice, or that has more than 10 equations, is printed once before the jaxpr as
# `let name = { ... } in` and referred to by its name.

_PP_WIDTH = 80

# Documents are tuples: (_TEXT, s, width), (_CAT, docs), (_BRK, s), (_GROUP, doc),
# (_NEST, n, doc).
_TEXT, _CAT, _BRK, _GROUP, _NEST = range(5)
_NIL = (_CAT, ())


def _text(s: str, width: int | None = None) -> tuple:
  return (_TEXT, s, len(s) if width is None else width)


def _cat(*docs) -> tuple:
  return (_CAT, docs)


def _brk(s: str = " ") -> tuple:
  return (_BRK, s)


def _group(doc) -> tuple:
  return (_GROUP, doc)


def _nest(n: int, doc) -> tuple:
  return (_NEST, n, doc)


def _join(sep, docs) -> tuple:
  out = []
  for i, d in enumerate(docs):
    if i:
      out.append(sep)
    out.append(d)
  return (_CAT, tuple(out))


def _fits(doc, width: int) -> bool:
  stack = [doc]
  while stack:
    if width < 0:
      return False
    d = stack.pop()
    tag = d[0]
    if tag == _TEXT:
      width -= d[2]
    elif tag == _CAT:
      stack.extend(reversed(d[1]))
    elif tag == _BRK:
      width -= len(d[1])
    elif tag == _NEST:
      stack.append(d[2])
    else:
      stack.append(d[1])
  return width >= 0


def _flat(doc, out: list[str]) -> int:
  """Appends `doc` laid out on one line to `out`; returns its width."""
  tag = doc[0]
  if tag == _TEXT:
    out.append(doc[1])
    return doc[2]
  if tag == _CAT:
    return sum(_flat(c, out) for c in doc[1])
  if tag == _BRK:
    out.append(doc[1])
    return len(doc[1])
  return _flat(doc[-1], out)   # group, nest


def _format(doc, width: int = _PP_WIDTH) -> str:
  out: list[str] = []
  col = 0
  agenda = [(0, doc)]   # (indent, doc), laid out in break mode (flat groups: `_flat`)
  while agenda:
    indent, d = agenda.pop()
    tag = d[0]
    if tag == _TEXT:
      out.append(d[1])
      col += d[2]
    elif tag == _CAT:
      agenda.extend([(indent, c) for c in reversed(d[1])])
    elif tag == _BRK:
      out.append("\n" + " " * indent)
      col = indent
    elif tag == _NEST:
      agenda.append((indent + d[1], d[2]))
    elif _fits(d[1], width - col):
      col += _flat(d[1], out)
    else:
      agenda.append((indent, d[1]))
  return "".join(out)


def _encode_name(n: int) -> str:
  s = ""
  while True:
    s = chr(ord("a") + n % 26) + s
    n //= 26
    if n == 0:
      return s


class JaxprPpContext:
  """The names of one printing: variables get `a b c ...` in the order they are printed
  (skipping the names of shared jaxprs); `var_names` may be seeded (`_` for dropped
  results). As JAX's `core.JaxprPpContext`."""

  def __init__(self, var_names: dict | None = None, *, print_shapes: bool = True,
               custom_pp_eqn_rules: bool = True):
    self.var_names: dict[Var, str] = dict(var_names or {})
    self.shared_jaxprs: dict[Jaxpr, str] = {}
    self.shared_jaxpr_names: set[str] = set()
    self.print_shapes = print_shapes
    self.custom_pp_eqn_rules = custom_pp_eqn_rules
    self._counter = itertools.count()

  def name(self, v: Var) -> str:
    name = self.var_names.get(v)
    if name is None:
      if isinstance(v, DropVar):
        return "_"
      name = _encode_name(next(self._counter))
      while name in self.shared_jaxpr_names:
        name = _encode_name(next(self._counter))
      self.var_names[v] = name
    return name

  def suggest_same_var_names(self, for_vars: Sequence[Atom], like_vars: Sequence[Atom]):
    """Names each of `for_vars` (a sub-jaxpr's binders) as the matching `like_vars` (the
    equation's operands or results) where both are unnamed variables, each name used once:
    how `jit` prints its body with its caller's names."""
    if len(for_vars) != len(like_vars):
      return
    used: set[int] = set()
    for v, like in zip(for_vars, like_vars):
      if (isinstance(like, Var) and id(like) not in used and isinstance(v, Var)
          and v not in self.var_names):
        used.add(id(like))
        self.var_names[v] = self.name(like)


#: Per-primitive print rules, as JAX's `core.pp_eqn_rules`: `rule(eqn, context)` returns
#: the params to print as (name, value) pairs in printed order (JAX hides some, adds
#: defaults, reformats others); it may first call `context.suggest_same_var_names`. Without
#: a rule an equation prints all its params sorted by name. Printing only: no rule is on
#: the tracing path.
pp_eqn_rules: dict["Primitive", Callable[["JaxprEqn", JaxprPpContext],
                                         Sequence[tuple[str, Any]]]] = {}

#: Primitives whose params print in a fixed order (others print sorted by name, as JAX does).
pp_param_order: dict["Primitive", tuple[str, ...]] = {}

#: Call-like primitives whose `name` param names their sub-jaxpr when it is printed shared
#: (`let name = { ... } in`), as JAX names a shared `jit` body; others are named `jaxpr`.
pp_named_calls: set["Primitive"] = set()

#: Jaxprs that a primitive's `pp_eqn_rules` entry prints as params though the equation does
#: not hold them (scatter-add's `update_jaxpr`): `rule(eqn)` returns them, the same objects
#: the print rule prints, so that one met more than once prints once, shared (`let jaxpr`).
pp_subjaxprs: dict["Primitive", Callable[["JaxprEqn"], Sequence["Jaxpr"]]] = {}

#: Params that JAX's primitive of the same name carries and prints with their default value
#: where stagecraft's primitive has no such param (printing only; for primitives whose
#: module registers no `pp_eqn_rules` entry).
pp_default_params: dict[str, tuple[tuple[str, Any], ...]] = {}


def _pp_literal(lit: Literal) -> str:
  v = lit.val
  if type(v) is WeakScalarValue:
    v = v.value
  # NB: printed at the precision of the value held, as JAX: a NumPy f32 1/3 prints
  # 0.3333333432674408, a Python float passed to a jitted function (weakly typed f32) 0.1.
  v = np.asarray(v).item()
  return f"{v}:{lit.aval.str_short()}"


def _pp_atom(v: Atom, context: JaxprPpContext) -> str:
  return _pp_literal(v) if isinstance(v, Literal) else context.name(v)


def _pp_vars(vs: Sequence[Atom], context: JaxprPpContext, *, separator: str = "",
             binders: bool = False):
  """Atoms separated by `separator` and a break of their own (so that they fill lines),
  continuation lines indented by 2; binders carry their types (`a:f32[3]`)."""
  if binders and context.print_shapes:
    docs = [_text(f"{context.name(v)}:{v.aval.str_short()}") for v in vs]
  else:
    docs = [_text(_pp_atom(v, context)) for v in vs]
  return _nest(2, _group(_join(_cat(_text(separator), _group(_brk())), docs)))


def _pp_param_value(v: Any, context: JaxprPpContext):
  if type(v) is tuple and all(isinstance(x, (ClosedJaxpr, Jaxpr)) for x in v):
    return _group(_cat(_nest(2, _cat(_text("("), _brk(""), _join(
        _brk(), [_pp_jaxpr_doc(x.jaxpr if isinstance(x, ClosedJaxpr) else x, context)
                 for x in v]))), _brk(""), _text(")")))
  if isinstance(v, ClosedJaxpr):
    return _pp_jaxpr_doc(v.jaxpr, context)
  if isinstance(v, Jaxpr):
    return _pp_jaxpr_doc(v, context)
  if isinstance(v, np.dtype):
    return _text(v.name)
  if isinstance(v, type) and issubclass(v, np.generic):
    return _text(np.dtype(v).name)
  if isinstance(v, frozenset):
    return _text(f"frozenset({{{', '.join(repr(e) for e in sorted(v))}}})")
  if callable(v) and hasattr(v, "__name__"):
    return _text(v.__name__)
  return _text(str(v))


_ADDRESS = re.compile(r" at 0x([0-9a-fA-F]+)")


def pp_masked_str(v: Any) -> str:
  """`str(v)` with addresses masked (`<function f at 0xXXXXXXXXXXXX>`), as JAX prints a
  param it has no rule for."""
  return _ADDRESS.sub(lambda m: " at 0x" + "X" * len(m.group(1)), str(v))


def _pp_params(eqn: JaxprEqn, context: JaxprPpContext) -> Sequence[tuple[str, Any]]:
  if not context.custom_pp_eqn_rules:
    return sorted(eqn.params.items())
  rule = pp_eqn_rules.get(eqn.primitive)
  if rule is not None:
    return rule(eqn, context)
  order = pp_param_order.get(eqn.primitive)
  if order is not None:
    return [(k, eqn.params[k]) for k in order if k in eqn.params]
  extra = pp_default_params.get(eqn.primitive.name)
  if extra:
    params = dict(extra)
    params.update(eqn.params)
    return sorted(params.items())
  return sorted(eqn.params.items())


def _pp_eqn(eqn: JaxprEqn, context: JaxprPpContext):
  params = _pp_params(eqn, context)   # NB: first: a rule may suggest names
  lhs = _pp_vars(eqn.outvars, context, binders=True)
  prim = _text(eqn.primitive.name)
  if _pp_state.notes is not None:
    prim = _cat(prim, _text(_pp_mark(eqn), 0))
  kvs = _NIL
  if params:
    kvs = _group(_cat(_nest(2, _cat(_text("["), _brk(""), _join(_brk(), [
        _cat(_text(f"{k}="), _pp_param_value(v, context)) for k, v in params]))),
        _brk(""), _text("]")))
  rhs = _cat(prim, kvs, _text(" "), _pp_vars(eqn.invars, context))
  # NB: an equation without results (an effect) prints as `prim[...] args`, as in JAX.
  return _cat(lhs, _text(" = "), rhs) if eqn.outvars else rhs


def _pp_jaxpr_doc(jaxpr: Jaxpr, context: JaxprPpContext):
  name = context.shared_jaxprs.get(jaxpr)
  if name is not None:
    return _text(name)
  consts = _pp_vars(jaxpr.constvars, context, binders=True)
  ins = _pp_vars(jaxpr.invars, context, binders=True)
  eqns = _join(_brk("; "), [_pp_eqn(e, context) for e in jaxpr.eqns])
  outs = _cat(_text("("), _pp_vars(jaxpr.outvars, context, separator=","),
              _text(",)" if len(jaxpr.outvars) == 1 else ")"))
  return _group(_cat(_nest(2, _cat(
      _text("{ lambda "), consts, _text("; "), ins, _text(". let"),
      _nest(2, _cat(_brk(), eqns)), _brk(), _text("in "), outs)), _text(" }")))


def _dropped_vars(jaxpr: Jaxpr) -> dict:
  """`_` for each result of an equation of `jaxpr` that no later equation nor the output
  reads (the top level only, as JAX)."""
  used = {v for v in jaxpr.outvars if isinstance(v, Var)}
  names = {}
  for eqn in reversed(jaxpr.eqns):
    for v in eqn.outvars:
      if v not in used:
        names[v] = "_"
    used.update(v for v in eqn.invars if isinstance(v, Var))
  return names


def _shared_jaxprs(top: Jaxpr, pp_rules: bool = True) -> list[tuple[str, Jaxpr]]:
  """The sub-jaxprs printed once before `top` (those met more than once, counting one with
  more than 10 equations twice), each named after its call (`name` param) or `jaxpr`,
  numbered where names repeat; with `pp_rules`, those of `pp_subjaxprs` too."""
  names: dict[Jaxpr, str] = {}
  counts: dict[Jaxpr, int] = {}
  queue = [top]
  for jaxpr in queue:   # breadth first
    counts[jaxpr] = counts.get(jaxpr, 0) + (2 if jaxpr is not top and
                                             len(jaxpr.eqns) > 10 else 1)
    for eqn in jaxpr.eqns:
      name = eqn.params.get("name") if eqn.primitive in pp_named_calls else None
      for sub in subjaxprs(eqn):
        queue.append(sub)
        if name is not None:
          names.setdefault(sub, str(name).strip("<>"))
      if pp_rules and eqn.primitive in pp_subjaxprs:
        queue.extend(pp_subjaxprs[eqn.primitive](eqn))
  shared, taken = [], {}
  for jaxpr, c in counts.items():
    if c == 1:
      continue
    name = names.get(jaxpr, "jaxpr")
    n = taken.get(name, 0)
    if n:
      taken[name] = n + 1
      name += str(n)
    taken[name] = taken.get(name, 0) + 1
    shared.append((name, jaxpr))
  return shared


def pp_jaxpr(jaxpr: Jaxpr, *, print_shapes: bool = True, custom_pp_eqn_rules: bool = True,
             width: int = _PP_WIDTH) -> str:
  """Prints `jaxpr` as JAX does: one line when it fits in `width` (80) columns, else one
  equation a line, with nested jaxprs in params indented (see the section comment)."""
  context = JaxprPpContext(_dropped_vars(jaxpr), print_shapes=print_shapes,
                           custom_pp_eqn_rules=custom_pp_eqn_rules)
  shared = _shared_jaxprs(jaxpr, custom_pp_eqn_rules)
  for name, sub in shared:
    context.shared_jaxpr_names.add(name)
    context.shared_jaxprs[sub] = name
  docs = []
  for name, sub in shared:
    del context.shared_jaxprs[sub]   # printed in full where it is defined
    body = _pp_jaxpr_doc(sub, context)
    context.shared_jaxprs[sub] = name
    docs.append(_cat(_text(f"let {name} = "), body, _text(" in"), _brk()))
  docs.append(_pp_jaxpr_doc(jaxpr, context))
  return _format(_cat(*docs), width)


class _PPState(threading.local):
  def __init__(self):
    # While `pretty_print` annotates (source_info / name_stack): the annotations of each
    # equation, which the text refers to by markers that take no width.
    self.notes: list[list[str]] | None = None
    self.source_info = self.name_stack = False


_pp_state = _PPState()
_MARK = re.compile("\ue000(\\d+)\ue001")


def _pp_mark(eqn: JaxprEqn) -> str:
  st = _pp_state
  notes = []
  if st.source_info:
    notes.append(source_summary(eqn.source_info) or "unknown")
  if st.name_stack:
    notes.append(f"[{'/'.join(getattr(eqn.source_info, 'name_stack', ()))}]")
  st.notes.append(notes)
  return f"\ue000{len(st.notes) - 1}\ue001"


def pp_jaxpr_annotated(jaxpr: "Jaxpr", *, source_info: bool = False,
                       name_stack: bool = False, **opts) -> str:
  """`pp_jaxpr(jaxpr)` with a `# file:line:col (function)` comment (`source_info`) and/or a
  `# [scope/names]` comment (`name_stack`) after each equation, aligned one column past the
  widest line, several on one line stacked below it, as JAX's
  `pretty_print(source_info=True)` lays them out. The layout is the unannotated one."""
  st = _pp_state
  saved = st.notes, st.source_info, st.name_stack
  st.notes, st.source_info, st.name_stack = [], source_info, name_stack
  try:
    text = pp_jaxpr(jaxpr, **opts)
    notes = st.notes
  finally:
    st.notes, st.source_info, st.name_stack = saved
  rows = []
  for line in text.split("\n"):
    idxs = [int(i) for i in _MARK.findall(line)]
    rows.append((_MARK.sub("", line), [n for i in idxs for n in notes[i]]))
  col = max(len(line) for line, _ in rows) + 1
  out = []
  for line, anns in rows:
    if not anns:
      out.append(line)
      continue
    out.append(line.ljust(col) + "# " + anns[0])
    out.extend(" " * col + "# " + a for a in anns[1:])
  return "\n".join(out)


# ---------------------------------------------------------------------------
# Primitives


#: Types of staged leaves (`random.PRNGKeyArray`) -> `(leaf -> its value, the value's dtype
#: class, value -> leaf)`. A primitive bound on such leaves binds on their values (keys
#: `key<fry>[*s]`, so `lax.concatenate(keys, ...)` stages a key-typed equation, as JAX's)
#: and gives each result of a leaf's dtype back as a leaf.
staged_leaves: dict[type, tuple[Callable, type, Callable]] = {}


def _bind_staged_leaves(prim: "Primitive", args: Sequence[Any], params: dict) -> Any:
  rebuild = {}
  vals = []
  for a in args:
    entry = staged_leaves.get(type(a))
    if entry is None:
      vals.append(a)
    else:
      vals.append(entry[0](a))
      rebuild[entry[1]] = entry[2]
  out = prim.bind(*vals, **params)
  wrap = lambda o: rebuild.get(type(getattr(o, "dtype", None)), lambda x: x)(o)
  outs = [wrap(o) for o in out] if prim.multiple_results else [wrap(out)]
  if staged_leaves_hook[0] is not None:   # key reuse (`key_reuse.primitive_operation`)
    staged_leaves_hook[0](prim, list(args), outs)
  return outs if prim.multiple_results else outs[0]


#: `hook(prim, operands, results)`, called after a primitive bound on staged leaves (set by
#: `random`: JAX's key reuse signatures, with `debug_key_reuse` on).
staged_leaves_hook: list = [None]


_NO_JAX_VALUE = (str, bytes, list, tuple, dict, type(None))


def _check_bind_args(prim: "Primitive", args: tuple) -> None:
  """Raises JAX's TypeError naming the first argument of `prim.bind` that is no JAX value
  (called when binding raised a TypeError)."""
  for i, x in enumerate(args):
    if type(x) in _NO_JAX_VALUE or (type(x) is np.ndarray and not valid_array_type(x)):
      raise TypeError(f"Error interpreting argument to {prim.name} as a JAX value. The "
                      f"problematic value is of type {type(x)} and was passed to {prim.name} "
                      f"at position {i}.\n") from None


class Primitive:
  """An operation with rules. `bind` hands it to the current trace.

  Rules live in their interpreter's registry (ad, batching, lowering, partial_eval); the
  impl and abstract_eval rules are stored on the primitive itself, as in JAX.
  """
  multiple_results = False
  # Whether staged leaves among the operands (`staged_leaves`: typed key arrays) are bound as
  # their values; a hijax primitive (`experimental.hijax.HiPrimitive`) takes them as they are.
  binds_staged_leaves = True
  #: Params every equation of this primitive carries, with the value JAX's binds when the
  #: caller gives none (`def_default_params`), or None: `bind` adds the missing ones.
  default_params: dict | None = None
  #: `rule(num_args, params) -> params`, or None: completes the params of each `bind` whose
  #: values depend on the operands (jit's per-operand `in_shardings`, `donated_invars`, ...).
  complete_params: Callable | None = None
  #: `(name, default entry)` of each param holding one entry per operand (jit's
  #: `donated_invars`, ...): the call rules of derived calls (`interpreters.calls`) carry
  #: each operand's entry over to the operands that stand for it; `(name, default entry,
  #: False)`: a tangent operand takes the default, not its primal's entry (checkpoint's
  #: `prevent_cse`).
  operand_params: tuple = ()
  #: `(name, default entry, operand param)` of each param holding one entry per result
  #: (jit's `out_shardings`, ...), with the per-operand param that holds the same kind of
  #: entry (`in_shardings`): derived calls carry the entries over as `operand_params`'
  #: (a transposed call's cotangent operand takes its result's entry, and so on).
  result_params: tuple = ()

  def __init__(self, name: str):
    self.name = name
    # NB: a subclass may define `impl` and `abstract_eval` methods instead of calling
    # `def_impl`/`def_abstract_eval` (kfac-jax's LossTag); its `abstract_eval` follows
    # JAX's method convention, returning `(avals out, effects)`.
    cls = type(self)
    if getattr(cls, "impl", None) is None:
      self.impl: Callable | None = None
    # NB: until `def_abstract_eval`, staging the primitive raises JAX's NotImplementedError.
    self.abstract_eval: Callable = self._no_abstract_eval
    # `rule(**params) -> frozenset of Effect`, or None: the primitive itself is pure.
    self.effects_rule: Callable | None = None
    # `rule(*avals, **params) -> (avals out, effects)` (`def_effectful_abstract_eval`).
    self.effectful_abstract_eval: Callable | None = None
    method = getattr(cls, "abstract_eval", None)
    if method is not None:
      self.def_effectful_abstract_eval(method.__get__(self, cls))

  def __repr__(self):
    return self.name

  def _no_abstract_eval(self, *avals, **params):
    raise NotImplementedError(f"Abstract evaluation for '{self.name}' not implemented")

  def bind(self, *args, **params):
    __tracebackhide__ = True  # noqa: F841
    d = self.default_params
    if d is not None:   # NB: after the given ones, as JAX orders them
      if not params:
        params = d.copy()
      else:
        for k in d:
          if k not in params:
            params[k] = d[k]
    if self.complete_params is not None:
      params = self.complete_params(len(args), params)
    if (staged_leaves and not staged_leaves.keys().isdisjoint(map(type, args))
        and self.binds_staged_leaves):
      return _bind_staged_leaves(self, args, params)
    try:
      if check_vma_state[0]:
        if self in collective_axes:
          args = _collective_pvary(collective_axes[self](**params), args)
        elif len(args) > 1 and self not in no_auto_pvary:
          args = _auto_pvary(self, args, params)
      return trace_state.trace.process_primitive(self, args, params)
    except Exception as e:   # NB: an API boundary for eager ops (zero cost until raised)
      if isinstance(e, TypeError):
        _check_bind_args(self, args)
      traceback_util.filter_exception(e, note=False)
      raise

  def get_bind_params(self, params: dict) -> dict:
    """The keyword arguments that re-bind an equation of this primitive with `params`
    (JAX >= 0.9.2's form: a dict; equinox's jaxpr interpreters call it). Every primitive
    here binds with its equation's params as they are (sub-jaxprs included), so this is a
    copy of `params`; JAX's call-like primitives instead turn their jaxprs into functions."""
    return dict(params)

  def def_default_params(self, **params: Any) -> None:
    """Makes `bind` add each of `params` (name=value) that a call does not give, so every
    equation of this primitive carries the params JAX's equation of the same name carries
    (`eqn.params`, read by custom interpreters), with JAX's default values (None, (), ...);
    the print rules hide those JAX's printer hides."""
    self.default_params = {**(self.default_params or {}), **params}

  def def_impl(self, impl: Callable) -> Callable:
    self.impl = impl
    return impl

  def def_abstract_eval(self, rule: Callable) -> Callable:
    # NB: once some aval has a sharding, `abstract_eval` also runs the sharding rule
    # (`sharding_rules`); until then it is `rule` itself, so tracing pays nothing for it.
    self.abstract_eval = _with_sharding_rule(self, rule) if _sharding_in_types[0] else rule
    _primitives_with_rules[self] = rule
    return rule

  def def_effectful_abstract_eval(self, rule: Callable) -> Callable:
    """Registers JAX's effectful abstract evaluation: `rule(*avals, **params)` returns
    `(out aval or avals, effects)`; the avals are this primitive's abstract evaluation and
    the effects those of each of its equations (`JaxprEqn.effects`, computed from the
    equation's input avals), so DCE keeps the equation when they are not empty."""
    self.effectful_abstract_eval = rule
    self.def_abstract_eval(lambda *avals, **params: rule(*avals, **params)[0])
    return rule

  def def_effects(self, rule: Callable) -> Callable:
    """Registers `rule(**params) -> frozenset[Effect]`: the effects of an equation of this
    primitive with those params (see `JaxprEqn.effects`)."""
    self.effects_rule = rule
    return rule


traceback_util.register_boundary(Primitive.bind)


# ---------------------------------------------------------------------------
# Sharding in types

#: Sharding rules (JAX's sharding in types): `rule(*avals, **params)` gives the sharding of
#: the primitive's result (a NamedSharding over an AbstractMesh, spec normalized as
#: `ShapedArray` says, or None for no split dimension; a list of them for a primitive with
#: several results), or raises (JAX's `ShardingTypeError`). Consulted by abstract evaluation
#: only when an operand's aval has a sharding. The rules live in `lax/sharding_rules.py`
#: and beside their primitives; call-like primitives (`closed_calls`) need none (their
#: results have the types of their bodies' results).
sharding_rules: dict[Primitive, Callable] = {}

#: True once an aval with a sharding has been made (then abstract evals check operands).
_sharding_in_types = [False]
_primitives_with_rules: "weakref.WeakKeyDictionary[Primitive, Callable]" = (
    weakref.WeakKeyDictionary())


def _enable_sharding_rules() -> None:
  """Makes every primitive's abstract eval consult `sharding_rules` from now on."""
  _sharding_in_types[0] = True
  for prim, rule in list(_primitives_with_rules.items()):
    if prim.abstract_eval is rule:
      prim.abstract_eval = _with_sharding_rule(prim, rule)


def _with_sharding_rule(prim: Primitive, rule: Callable) -> Callable:
  def abstract_eval(*avals, **params):
    for a in avals:
      if type(a) is ShapedArray:
        if a._sharding is not None:
          out = _sharded_abstract_eval(prim, rule, avals, params)
          return _vma_abstract_eval(prim, out, avals, params) if _vma_of(avals) else out
        if a.vma:
          return _vma_abstract_eval(prim, rule(*avals, **params), avals, params)
    return rule(*avals, **params)
  abstract_eval.rule = rule
  return abstract_eval


# ---------------------------------------------------------------------------
# Varying manual axes in types (JAX's vma, inside shard_map(..., check_vma=True) bodies)

#: Primitives whose abstract evals give their results' vma themselves (collectives, pvary,
#: axis_index); every other primitive's results vary along the union of its operands' vma
#: (call-like and control-flow primitives: along their bodies' results').
vma_own_rule: set = set()

#: True while a check_vma shard_map body is traced (JAX's `config._check_vma`); a list so
#: that `Primitive.bind` reads it cheaply.
check_vma_state = [False]

#: `pvary(x, axes)` (set by lax.parallel): marks an operand varying along more axes.
pvary_hook: list = [None]

#: Primitives that `bind` does not make operands of equal vma for (collectives, casts,
#: call-like and control-flow primitives; registered beside them).
no_auto_pvary: set = set()

#: Collectives over manual axes: `rule(**params)` gives the axes along which each operand
#: must vary (`bind` `pvary`s an invariant operand along them first, as JAX does).
collective_axes: dict = {}


@contextmanager
def checking_vma_types(on: bool):
  """Traces a block as a check_vma shard_map body (`on`) or as not one: n-ary primitives
  get `pvary`'d operands and collectives their typed forms."""
  saved = check_vma_state[0]
  check_vma_state[0] = bool(on)
  try:
    yield
  finally:
    check_vma_state[0] = saved


def _vma_of(avals) -> frozenset:
  out = _NO_VMA
  for a in avals:
    if type(a) is ShapedArray and a.vma:
      out = out | a.vma
  return out


def _has_body(params) -> bool:
  for v in params.values():
    if isinstance(v, (Jaxpr, ClosedJaxpr)):
      return True
    if isinstance(v, (tuple, list)) and v and isinstance(v[0], (Jaxpr, ClosedJaxpr)):
      return True
  return False


def _vma_abstract_eval(prim: Primitive, out, avals, params):
  """The results of `prim` typed with the union of its operands' vma (unless `prim` types
  them itself, or follows a body)."""
  if prim in vma_own_rule or prim in closed_calls or _has_body(params):
    return out
  vma = _vma_of(avals)
  if prim.multiple_results:
    return [o.update(vma=vma) if type(o) is ShapedArray and o.vma != vma else o
            for o in out]
  return out.update(vma=vma) if type(out) is ShapedArray and out.vma != vma else out


def _collective_pvary(axes, args):
  """`args` each `pvary`'d along those of `axes` it does not vary along yet."""
  out = []
  for x in args:
    a = x.aval if isinstance(x, Tracer) else None
    have = a.vma if type(a) is ShapedArray else _NO_VMA
    missing = [n for n in axes if n not in have]
    out.append(pvary_hook[0](x, order_axes(missing)) if missing else x)
  return tuple(out)


def _auto_pvary(prim: Primitive, args, params):
  """`args` made to vary along the same manual axes (JAX's `auto_insert_reshard`): an
  operand that varies along fewer axes than another is `pvary`'d along the missing ones."""
  vmas = []
  for x in args:
    if isinstance(x, Tracer):
      a = x.aval
      vmas.append(a.vma if type(a) is ShapedArray else None)
    else:   # a constant: invariant (tokens and other non-arrays are left alone)
      try:
        vmas.append(_NO_VMA if type(get_aval(x)) is ShapedArray else None)
      except TypeError:
        vmas.append(None)
  union = _NO_VMA
  for v in vmas:
    if v:
      union = union | v
  if not union or all(v is None or v == union for v in vmas) or prim in closed_calls \
      or _has_body(params):
    return args
  pvary = pvary_hook[0]
  out = []
  for x, v in zip(args, vmas):
    if v is not None and v != union:
      out.append(pvary(x, order_axes(union - v)))
    else:
      out.append(x)
  return tuple(out)


def _sharded_abstract_eval(prim: Primitive, rule: Callable, avals, params):
  """`prim`'s abstract eval when an operand has a sharding: the avals of `rule` with the
  sharding its sharding rule gives."""
  out = rule(*avals, **params)
  srule = sharding_rules.get(prim)
  if srule is None:
    if prim in closed_calls:
      return out
    split = [a for a in avals if type(a) is ShapedArray and a._sharding is not None]
    raise NotImplementedError(
        f"Primitive '{prim.name}' has no sharding rule, and its operands are split over "
        f"Explicit mesh axes ({', '.join(a.str_short() for a in split)}); stagecraft does not "
        f"compute the sharding of its result yet. Reshard the operands first "
        f"(`reshard(x, P())`), or use a mesh whose axes are Auto "
        f"(`make_mesh(..., axis_types=(AxisType.Auto, ...))`).")
  shardings = srule(*avals, **params)
  shardings = _unreduced_states(prim, avals, params, shardings, out)
  if prim.multiple_results:
    if shardings is None:
      return out
    return [o.update(sharding=s) if type(o) is ShapedArray else o
            for o, s in zip(out, shardings)]
  return out.update(sharding=shardings)


#: Unreduced/reduced rules (JAX's `ur_rule`s): `rule(*avals, **params)` gives the
#: `(unreduced, reduced)` mesh axes of the result (a list of pairs for several results;
#: None: the results keep the types abstract evaluation gave, as for primitives with bodies),
#: or raises JAX's error. Consulted when an operand or the result's sharding (from
#: `out_sharding`) is unreduced or reduced; a primitive without one raises JAX's
#: NotImplementedError then. Registered in `lax/sharding_rules.py` and beside primitives.
ur_rules: dict[Primitive, Callable] = {}


def _ur_of(s) -> bool:
  return s is not None and bool(s.spec.unreduced or s.spec.reduced)


def _unreduced_states(prim: Primitive, avals, params, shardings, out):
  """The result shardings of `prim` with the unreduced/reduced axes its ur rule gives."""
  many = prim.multiple_results
  outs = (list(shardings) if shardings is not None else None) if many else [shardings]
  if not any(type(a) is ShapedArray and _ur_of(a._sharding) for a in avals) and not (
      outs and any(_ur_of(s) for s in outs)):
    return shardings
  rule = ur_rules.get(prim)
  if rule is None:
    if prim in closed_calls or _has_body(params):
      return shardings
    raise NotImplementedError(f"unreduced/reduced rule for {prim.name} is not implemented. "
                              f"Please file an issue at https://github.com/jax-ml/jax/issues")
  urs = rule(*avals, **params)
  if urs is None:
    return shardings
  urs = list(urs) if many else [urs]
  if outs is None:
    outs = [None] * len(urs)
  out_avals = list(out) if many else [out]
  # NB: an operand's sharding gives the mesh and the PartitionSpec class
  base = next(a._sharding for a in avals if type(a) is ShapedArray and a._sharding is not None)
  new = []
  for s, (u, r), o in zip(outs, urs, out_avals):
    u, r = frozenset(u), frozenset(r)
    if s is None:
      if not u and not r:
        new.append(None)
        continue
      s = base.update(spec=type(base.spec)(*(None,) * len(o.shape)))
    spec = s.spec.update(unreduced=u, reduced=r)
    new.append(None if all(e is None for e in spec) and not u and not r else
               s.update(spec=spec))
  return new if many else new[0]



#: The generic impl (set by the runtime): lower a one-equation jaxpr, compile once, execute.
default_impl: list[Callable | None] = [None]


def _run_impl(prim: Primitive, args, params):
  impl = prim.impl
  if impl is not None:
    return impl(*args, **params)
  if prim.abstract_eval == prim._no_abstract_eval:
    # NB: the generic impl compiles the equation, which needs its abstract eval (and a
    # lowering); with neither rule, JAX's message for a primitive that has no impl.
    raise NotImplementedError(f"Evaluation rule for '{prim.name}' not implemented")
  return default_impl[0](prim, args, params)


# ---------------------------------------------------------------------------
# Traces


_trace_counter = itertools.count()


class Trace:
  """Interprets primitives. Subclasses implement `process_primitive(prim, args, params)`.

  `_level` orders traces by creation: a trace may only see tracers of traces created before
  it (those it closes over); a live tracer of a later trace reaching it escaped its own."""
  __slots__ = ("_valid", "_level", "__weakref__")

  def __init__(self):
    self._valid = True
    self._level = next(_trace_counter)

  def process_primitive(self, prim: Primitive, args, params):
    raise NotImplementedError

  def invalidate(self):
    self._valid = False

  def is_valid(self) -> bool:
    return self._valid

  def full_raise(self, x):
    """`x` itself (JAX's deprecated `Trace.full_raise`, an identity since its stackless
    tracing; quax's traces call it)."""
    return x

  @property
  def main(self) -> "Trace":
    """JAX's (deprecated) `Trace.main`: what identifies the transformation a tracer belongs
    to; libraries compare `tracer._trace.main is main` (equinox's `filter_jvp`). Here a
    trace is one transformation's, so it is the trace itself."""
    return self

  def origin_msg(self, tracer: "Tracer") -> str:
    return ""

  def leak_msg(self, tracer: "Tracer") -> str:
    """Lines that say where `tracer`, leaked out of this (ended) trace, was made: JAX's
    "The function being traced when the value leaked was ..." and the lines after it."""
    return ""

  def __repr__(self):
    return type(self).__name__


class EvalTrace(Trace):
  """The bottom trace: runs each primitive on concrete values."""
  __slots__ = ()

  def process_primitive(self, prim, args, params):
    for a in args:
      if isinstance(a, Tracer):
        raise escaped_tracer_error(a, prim)
    return _run_impl(prim, args, params)


eval_trace = EvalTrace()


class _TraceState(threading.local):
  def __init__(self):
    self.trace: Trace = eval_trace


trace_state = _TraceState()


def current_trace() -> Trace:
  """The trace that `Primitive.bind` uses now (the evaluation trace at the bottom)."""
  return trace_state.trace


@contextmanager
def set_current_trace(trace: Trace):
  """Context manager that makes `trace` current for its body."""
  prev = trace_state.trace
  trace_state.trace = trace
  try:
    yield trace
  finally:
    trace_state.trace = prev


class CompileTimeEvalTrace(Trace):
  """The trace current inside `ensure_compile_time_eval` under a transformation: a primitive
  whose operands are all concrete (no tracer) runs now, on the evaluation trace; any other
  goes to `parent`, the trace that was current, as if this one were not there (JAX's
  `eager_constant_folding`)."""
  __slots__ = ("parent",)

  def __init__(self, parent: Trace):
    self._valid = True
    self._level = parent._level   # NB: it stands in for `parent` in the order of traces
    self.parent = parent

  def process_primitive(self, prim, args, params):
    for a in args:
      if isinstance(a, Tracer):
        return self.parent.process_primitive(prim, args, params)
    prev = trace_state.trace
    trace_state.trace = eval_trace
    try:
      return _run_impl(prim, args, params)
    finally:
      trace_state.trace = prev

  def origin_msg(self, tracer: "Tracer") -> str:
    return self.parent.origin_msg(tracer)

  def __repr__(self):
    return f"CompileTimeEvalTrace({self.parent!r})"


@contextmanager
def eval_context():
  """Context manager: inside it, operations run now on concrete values (the eval trace is
  current), as JAX's `core.eval_context`; an operation on a tracer of an enclosing
  transformation fails as it would outside that transformation."""
  with set_current_trace(eval_trace):
    yield


#: JAX's `core.max_dim` / `core.min_dim`: the larger (smaller) of two dimension sizes, ints or
#: symbolic (`shape_poly`).
max_dim = shape_poly.max_dim
min_dim = shape_poly.min_dim

#: JAX's `core.Value` (any value a primitive takes) and `core.ParamDict` (an equation's params).
Value = Any
ParamDict = dict


@contextmanager
def ensure_compile_time_eval():
  """Context manager: inside it, operations on concrete values run now, even while tracing.

  Under `jit` (or any transformation) an operation whose operands are all concrete (Python
  numbers, NumPy arrays, Arrays, not tracers of the transformation) is evaluated when it is
  traced, and its result is a concrete Array that Python control flow can read; operations
  on traced values are traced as usual. Outside transformations it changes nothing.

    >>> import stagecraft as sc, stagecraft.numpy as jnp
    >>> @sc.jit
    ... def f(x):
    ...   with sc.ensure_compile_time_eval():
    ...     positive = jnp.sin(3.0) > 0     # a concrete Array, usable in `if`
    ...   return jnp.sin(x) if positive else jnp.cos(x)
    >>> float(f(0.0))
    0.0

  Semantics: JAX's `jax.ensure_compile_time_eval` (constant folding at trace time).
  """
  prev = trace_state.trace
  if prev is eval_trace or type(prev) is CompileTimeEvalTrace:
    yield
    return
  trace_state.trace = CompileTimeEvalTrace(prev)
  try:
    yield
  finally:
    trace_state.trace = prev


def escaped_tracer_error(tracer: "Tracer", prim: Primitive | None = None) -> UnexpectedTracerError:
  """The UnexpectedTracerError for a tracer used after its trace ended."""
  where = f" while binding `{prim.name}`" if prim is not None else ""
  trace = tracer._trace
  origin = trace.origin_msg(tracer)
  if trace._valid:
    return UnexpectedTracerError(
        f"Encountered an unexpected tracer{where}: {tracer!r}. A function transformed by "
        f"{trace!r} let one of its intermediate values reach a computation outside that "
        f"transformation (through a closure, a global or an attribute; for example a "
        f"custom_jvp or custom_vjp rule closing over a value being differentiated).{origin} "
        f"Pass the value to the function as an explicit argument instead.")
  # NB: JAX's words (users match "global state", "was created on line")
  aval = getattr(tracer, "aval", None)
  typ = aval.str_short(short_dtypes=False) if hasattr(aval, "str_short") else str(aval)
  return UnexpectedTracerError(
      f"Encountered an unexpected tracer. A function transformed by JAX had a side effect, "
      f"allowing for a reference to an intermediate value with type {typ} wrapped in a "
      f"{type(tracer).__name__} to escape the scope of the transformation.\n"
      f"JAX transformations require that functions explicitly return their outputs, and "
      f"disallow saving intermediate values to global state.{trace.leak_msg(tracer)}\n"
      f"To catch the leak earlier, try setting the environment variable "
      f"JAX_CHECK_TRACER_LEAKS or using the `jax.checking_leaks` context manager.")


class Tracer:
  """A value being traced: it has an aval and belongs to one trace.

  Python operators and array methods are attached by `stagecraft.numpy`. Conversions that
  need a concrete value raise ConcretizationTypeError (or its relatives) with the origin.
  Tracers can be weakly referenced, as JAX's (TensorFlow Probability's bijector caches
  hold weak references to traced values).
  """
  # NB: weak references allowed, as JAX's tracers (Keras attaches masks through
  # `weakref.finalize` on the tensors it traces; TFP's bijector caches hold them)
  __slots__ = ("_trace", "__weakref__")
  __array_priority__ = 1000

  aval: ShapedArray  # set by subclasses

  shape = property(lambda self: self.aval.shape)
  dtype = property(lambda self: self.aval.dtype)
  ndim = property(lambda self: len(self.aval.shape))
  size = property(lambda self: self.aval.size)
  weak_type = property(lambda self: self.aval.weak_type)

  def __init__(self, trace: Any = None, aval: Any = None):
    # NB: JAX's signature, for tracer classes defined outside stagecraft that call it;
    # stagecraft's own tracers set their fields themselves.
    self._trace = trace
    self.aval = aval

  def _short_repr(self) -> str:
    """JAX 0.10's short form, `ClassName<aval>`; each kind of tracer names its parts."""
    return f"{type(self).__name__}<{self.aval}>"

  def __getattr__(self, name: str):
    # Only for attributes not found otherwise: JAX's words ("JitTracer has no attribute x").
    aval = None
    if name in ("sharding", "block_until_ready", "copy_to_host_async"):
      try:
        aval = self.aval
      except AttributeError:
        pass
    if isinstance(aval, ShapedArray):
      what = f"traced array with shape {aval.str_short(False)}"
      if name == "sharding":
        raise AttributeError(f"The 'sharding' attribute is not available on {what}. To query "
                             f"sharding information on tracers, use `jax.typeof(x)`.")
      raise AttributeError(f"The '{name}' method is not available on {what}."
                           f"{self._trace.origin_msg(self)}")
    raise AttributeError(f"{type(self).__name__} has no attribute {name}")

  def __repr__(self):   # JAX's: JitTracer(~float32[]), VmapTracer(aval=..., batched=...)
    return self._short_repr()

  def _concretization_error(self, fname: str, cls=ConcretizationTypeError, fix: str = "",
                            context: str | None = None):
    """The error for a conversion that needs this tracer's value, in JAX's words: what needed
    it, where the value came from (the traced function's argument), and JAX's link to the
    error's page. `fix`, for a ConcretizationTypeError, is JAX's context line (what asked for
    a concrete value); by default the function `fname` is named. `context`: that line
    verbatim (JAX's `ConcretizationTypeError(tracer, context)`)."""
    what = (f"traced array with aval None" if self.aval is None else   # (a bare subclass)
            f"traced array with shape {self.aval.str_short(False)}")
    origin = "" if self._trace is None else self._trace.origin_msg(self)
    if cls is TracerBoolConversionError:
      msg = f"Attempted boolean conversion of {what}.{origin}"
    elif cls is TracerArrayConversionError:
      msg = f"The numpy.ndarray conversion method __array__() was called on {what}{origin}"
    elif cls is TracerIntegerConversionError:
      msg = f"The __index__() method was called on {what}{origin}"
    elif context is not None:
      msg = (f"Abstract tracer value encountered where concrete value is expected: {what}\n"
             f"{context}{origin}\n")
    else:
      context = fix.strip()
      if not context:
        context = f"The problem arose with the `{fname}` function. "
        if fname in ("float", "int", "complex"):
          context += (f"If trying to convert the data type of a value, try using "
                      f"`x.astype({fname})` or `jnp.array(x, {fname})` instead.")
      msg = (f"Abstract tracer value encountered where concrete value is expected: {what}\n"
             f"{context}{origin}\n")
    return cls(f"{msg}\nSee https://docs.jax.dev/en/latest/errors.html#jax.errors."
               f"{cls.__name__}")

  def to_concrete_value(self):
    """The concrete value this tracer stands for, or None when it is abstract. A JVP
    tracer outside `jit` knows its primal value (as in JAX), so `bool()`, `int()`,
    `operator.index()` and `item()` of primal values work under `jvp`/`grad`; staged and
    batched values are abstract."""
    return None

  def _concrete(self, fname: str, cls=ConcretizationTypeError, fix: str = ""):
    v = self.to_concrete_value()
    if v is None:
      raise self._concretization_error(fname, cls, fix)
    return v

  def __bool__(self):
    v = self.to_concrete_value()
    if v is not None:
      return bool(v)
    # As JAX: an array of other than one element is refused for its size before its value.
    size = int(np.prod(self.aval.shape))
    if size == 0:
      raise ValueError("The truth value of an empty array is ambiguous. Use `array.size > 0` "
                       "to check that an array is not empty.")
    if size > 1:
      raise ValueError("The truth value of an array with more than one element is "
                       "ambiguous. Use a.any() or a.all()")
    raise self._concretization_error("bool", TracerBoolConversionError)

  def _check_scalar_conversion(self):
    if self.aval.shape:   # NB: JAX's check (and words), before the value is asked for
      raise TypeError(f"Only scalar arrays can be converted to Python scalars; got "
                      f"arr.ndim={len(self.aval.shape)}")

  def __int__(self):
    v = self.to_concrete_value()
    if v is not None:
      return int(v)
    self._check_scalar_conversion()
    raise self._concretization_error("int")

  # NB: as in JAX, float(), complex(), np.asarray() and tolist() raise even for a tracer
  # with a concrete value: they would silently drop its derivative.
  def __float__(self):
    self._check_scalar_conversion()
    raise self._concretization_error("float")

  def __complex__(self):
    self._check_scalar_conversion()
    raise self._concretization_error("complex")

  def __reduce__(self):   # as JAX: pickling needs the value, which a tracer does not have
    raise self._concretization_error(
        "pickle", fix="The error occurred in the __reduce__ method, which may indicate an "
        "attempt to serialize/pickle a traced value.")

  def __index__(self):
    if self.aval.shape or not np.issubdtype(self.aval.dtype, np.integer):
      raise TypeError("Only integer scalar arrays can be converted to a scalar index.")
    return operator.index(self._concrete("__index__", TracerIntegerConversionError))

  def __array__(self, dtype=None, copy=None):
    raise self._concretization_error("__array__", TracerArrayConversionError)

  def __hash__(self):
    raise TypeError(f"unhashable type: '{type(self).__name__}'")   # Python's words

  def __len__(self):
    if not self.aval.shape:
      raise TypeError("len() of unsized object")
    return self.aval.shape[0]

  def __iter__(self):
    if not self.aval.shape:
      raise TypeError("iteration over a 0-d array")
    return (self[i] for i in range(self.aval.shape[0]))

  def item(self, *args):
    return np.asarray(self._concrete(
        "item", fix="This occurred in the item() method of jax.Array")).item(*args)

  def tolist(self):
    # NB: JAX's context repeats where the value came from, so its message says it twice.
    what = f"traced array with shape {self.aval.str_short(False)}"
    raise self._concretization_error(
        "tolist", fix=f"The tolist() method was called on {what}."
        f"{self._trace.origin_msg(self)}")


def to_concrete_value(x: Any) -> Any:
  """`x` itself unless it is a tracer; a tracer's concrete value, or None if abstract."""
  return x.to_concrete_value() if isinstance(x, Tracer) else x


# ---------------------------------------------------------------------------
# Evaluation and checking


_OWN = object()


def eval_jaxpr(jaxpr: Jaxpr, consts: Sequence[Any], *args: Any,
               source_info: Any = _OWN, fold_rules: dict | None = None) -> list[Any]:
  """Evaluates `jaxpr` by binding each equation's primitive in the current trace.

  Args:
    jaxpr: the program.
    consts: one value per constvar.
    *args: one value per invar.
    source_info: the source info of every equation recorded (inlining a call: the call's);
      by default each keeps its equation's.
    fold_rules: per primitive, a rule computing an equation none of whose operands is a
      tracer (returning None where it does not), instead of binding it.

  Returns:
    One value per outvar.

  Raises:
    TypeError: if the number of consts or args does not match the jaxpr.
  """
  if len(args) != len(jaxpr.invars) or len(consts) != len(jaxpr.constvars):
    raise TypeError(f"eval_jaxpr: jaxpr takes {len(jaxpr.constvars)} consts and "
                    f"{len(jaxpr.invars)} args, got {len(consts)} and {len(args)}.")
  env: dict[Var, Any] = {}
  env.update(zip(jaxpr.constvars, consts))
  env.update(zip(jaxpr.invars, args))
  # NB: equations recorded while an equation is re-bound (a transformation tracing this
  # jaxpr) keep its source info, as JAX's `user_context`; an error names its line (a note).
  ctx = _source_context
  prev = ctx.source_info
  _source_contexts_active[0] += 1
  eqn = None
  try:
    own = source_info is _OWN
    for eqn in jaxpr.eqns:
      ctx.source_info = eqn.source_info if own else source_info
      invals = [v.val if type(v) is Literal else env[v] for v in eqn.invars]
      fold = fold_rules and fold_rules.get(eqn.primitive)
      outs = None
      if fold and not any(isinstance(x, Tracer) for x in invals):
        outs = fold(*invals, **eqn.params)
      if outs is None:
        outs = eqn.primitive.bind(*invals, **eqn.params)
      if eqn.primitive.multiple_results:
        env.update(zip(eqn.outvars, outs))
      else:
        env[eqn.outvars[0]] = outs
  except Exception as e:
    if eqn is not None:
      add_source_note(e, eqn.source_info)
    raise
  finally:
    _source_contexts_active[0] -= 1
    ctx.source_info = prev
  return [v.val if type(v) is Literal else env[v] for v in jaxpr.outvars]


# The call-like primitives and the parameter holding their called ClosedJaxpr (operands in,
# results out): analyses that follow calls (replication over mapped axes) read it.
closed_calls: dict["Primitive", str] = {}


def def_closed_call(prim: "Primitive", param: str) -> None:
  """Gives `prim`, a primitive that runs the ClosedJaxpr held in its parameter `param` on its
  operands, that jaxpr's output avals as its abstract eval and its evaluation as its impl
  (the call-like primitives: jit, checkpoint, custom_jvp_call, custom_vjp_call,
  custom_dce_call), and records it in `closed_calls`. A primitive may set its own impl
  afterwards (jit compiles)."""
  closed_calls[prim] = param

  def abstract_eval(*avals, **params):
    return params[param].out_avals

  def impl(*args, **params):
    closed = params[param]
    return eval_jaxpr(closed.jaxpr, closed.consts, *args)
  prim.def_abstract_eval(abstract_eval)
  prim.def_impl(impl)


def jaxpr_as_fun(closed_jaxpr: ClosedJaxpr) -> Callable[..., list[Any]]:
  """A Python function `f(*args) -> list of outputs` that evaluates `closed_jaxpr`."""
  def fun(*args):
    return eval_jaxpr(closed_jaxpr.jaxpr, closed_jaxpr.consts, *args)
  return fun


def _typematch(a: ShapedArray, b: ShapedArray) -> bool:
  if a is abstract_token or b is abstract_token:
    return a is b
  return a.shape == b.shape and a.dtype == b.dtype


def check_jaxpr(jaxpr: Jaxpr) -> None:
  """Checks that `jaxpr` is well typed: every variable is bound once before it is used, and
  each equation's output avals agree with its primitive's abstract eval. Recurses into
  jaxprs in params.

  Raises:
    JaxprTypeError: naming the equation and the mismatch.
  """
  defined: set[Var] = set()

  def bind(v, where):
    if isinstance(v, DropVar):
      return
    if v in defined:
      raise JaxprTypeError(f"Variable {v} is bound twice ({where}).")
    defined.add(v)

  def read(v, where):
    if isinstance(v, Literal):
      return
    if v not in defined:
      raise JaxprTypeError(f"Variable {v} is used before it is defined ({where}).")

  for v in jaxpr.constvars:
    bind(v, "constvar")
  for v in jaxpr.invars:
    bind(v, "invar")
  for i, eqn in enumerate(jaxpr.eqns):
    where = f"equation {i}: {eqn.primitive.name}"
    try:
      _check_eqn(eqn, where, read)
    except JaxprTypeError as e:
      src = source_summary(eqn.source_info)
      if not src or getattr(e, "_stagecraft_sourced", False):
        raise
      # NB: as JAX's check_jaxpr, the message ends with the equation's source line.
      err = JaxprTypeError(f"{e}\n\nfrom source: {src}")
      err._stagecraft_sourced = True
      raise err from e.__cause__
    for v in eqn.outvars:
      bind(v, where)
  for v in jaxpr.outvars:
    read(v, "outvars")


def _check_eqn(eqn: JaxprEqn, where: str, read: Callable) -> None:
  """`check_jaxpr`'s checks of one equation (its operands, nested jaxprs, output avals)."""
  for v in eqn.invars:
    read(v, where)
  for p in eqn.params.values():
    for sub in (p if isinstance(p, tuple) else (p,)):
      if isinstance(sub, ClosedJaxpr):
        check_jaxpr(sub.jaxpr)
      elif isinstance(sub, Jaxpr):
        check_jaxpr(sub)
  rule = eqn.primitive.abstract_eval
  if rule is not None:
    try:
      out = rule(*[v.aval for v in eqn.invars], **eqn.params)
    except Exception as e:
      raise JaxprTypeError(f"{where}: abstract eval failed: {e}") from e
    out = list(out) if eqn.primitive.multiple_results else [out]
    if len(out) != len(eqn.outvars):
      raise JaxprTypeError(f"{where}: {len(eqn.outvars)} outvars but abstract eval gives "
                           f"{len(out)}.")
    for v, a in zip(eqn.outvars, out):
      if not _typematch(v.aval, a):
        raise JaxprTypeError(f"{where}: outvar has type {v.aval.str_short()} but abstract "
                             f"eval gives {a.str_short()}.")


def split_list(xs, *sizes: int) -> list[list]:
  """`xs` cut into consecutive lists of the given `sizes`, then the rest (JAX's
  `util.split_list`): `split_list([1, 2, 3, 4], 1, 2)` is `[[1], [2, 3], [4]]`."""
  out, i = [], 0
  for n in sizes:
    out.append(list(xs[i:i + n]))
    i += n
  out.append(list(xs[i:]))
  return out


def _deprecated_gensym() -> Callable[[ShapedArray], "Var"]:
  """`gensym()(aval)` is a new `Var` of `aval` (as `extend.core.gensym`)."""
  return Var


def __getattr__(name: str):
  # JAX 0.10.2's `jax.core.gensym` is a deprecated alias of `jax.extend.core.gensym`
  # (kfac-jax's tag graph matcher reads it): it warns with JAX's DeprecationWarning.
  if name == "gensym":
    import warnings
    warnings.warn("jax.core.gensym is deprecated. Use jax.extend.core.gensym.",
                  DeprecationWarning, stacklevel=2)
    return _deprecated_gensym
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
