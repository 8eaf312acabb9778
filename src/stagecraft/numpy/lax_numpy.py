"""The rest of the NumPy surface, composed from the modules below it (`ufuncs`, `manipulation`,
`reductions`, `sorting` and the gathers of `indexing`), as in JAX's `lax_numpy`: dtype functions
and constants; ranges and index grids computed in the graph; manipulation that computes
(`roll`, `repeat`, `pad`, `insert`, `delete`, `fill_diagonal`, `trace`); differences and
integrals; selection (`select`, `choose`, `piecewise`, `compress`); bit packing; printing."""
from __future__ import annotations

import builtins
import functools
import math
import operator
import warnings
from typing import Any, Sequence

import ml_dtypes
import numpy as np

from stagecraft import core, dtypes, lax, shape_poly, tree_util
from stagecraft.core import Tracer
from stagecraft.numpy import reductions, scalar_types, sorting
from stagecraft.numpy.array_constructors import array, asarray
from stagecraft.numpy.array_creation import (arange, empty, eye, full, full_like, ones, placed,
                                             zeros, zeros_like)
from stagecraft.numpy.indexing import at, nonzero, take, take_axis
from stagecraft.numpy.manipulation import (broadcast_arrays, broadcast_shapes, broadcast_to,
                                           concatenate, flip, moveaxis,
                                           ravel, reshape, squeeze, stack, swapaxes, tile)
from stagecraft.numpy.ufuncs import (absolute, add, clip, divide, equal, floor, floor_divide,
                                     greater, less, log10, logical_and, minimum, multiply, negative,
                                     not_equal, power, remainder, round, sign, subtract, where)
from stagecraft.numpy.util import (ArrayLike, as_array, asarray_or_scalar, axis_tuple,
                                   canonicalize_axis, check_arraylike, check_concrete, const,
                                   dtype_of, ensure_arraylike, ndim_of, promote_dtypes,
                                   promote_dtypes_inexact, real_dtype, shape_of, slice_axis,
                                   to_bool, to_inexact_dtype)
from stagecraft.numpy.vectorize import apply_along_axis, batch_over_leading, vectorize
from stagecraft.lax.utils import KEY_TYPES, on_keys
from stagecraft.pjit import jit
from stagecraft.runtime.array import Array

__all__ = ["astype", "iscomplexobj", "isrealobj", "isscalar", "result_type", "promote_types",
           "can_cast", "issubdtype", "isdtype", "iinfo", "finfo", "ComplexWarning", "dtype", "pi",
           "e", "inf", "nan",
           "euler_gamma", "newaxis", "iterable", "linspace", "logspace", "geomspace", "indices",
           "fromfunction", "roll", "repeat", "pad", "delete", "insert", "fill_diagonal",
           "diagonal", "diag", "diagflat", "trace",
           "diff", "ediff1d", "gradient", "trapezoid", "unwrap", "select", "choose", "piecewise",
           "compress", "extract", "packbits", "unpackbits", "get_printoptions", "printoptions",
           "set_printoptions", "array_repr", "array_str", "put_along_axis", "place"]


# ---------------------------------------------------------------------------
# Dtypes and constants


def astype(x: ArrayLike, dtype: Any, /, *, copy: bool = False, device: Any = None) -> Array:
  """`x` converted to `dtype` (canonicalized), committed to `device` (a device or a
  sharding) when given.

  Warns:
    DeprecationWarning: casting complex `x` to a real dtype other than bool (JAX's warning:
      such casts will become an error); take `real(x)` or `imag(x)` first. Complex to bool
      tests both parts for nonzero, silently.
  """
  if type(x) in KEY_TYPES:
    return placed(lax.convert_element_type(x, dtype), device, None, "astype")
  x = asarray(x)
  dtype = dtypes.check_user_dtype(dtype, "astype")
  if dtypes.is_complex(dtype_of(x)) and not dtypes.is_complex(dtype):
    if dtype != dtypes.bool_:
      warnings.warn("Casting from complex to real dtypes will soon raise a ValueError. Please "
                    "first use jnp.real or jnp.imag to take the real/imaginary component of "
                    "your input.", DeprecationWarning, stacklevel=2)
    else:
      return placed(lax.ne(x, np.zeros((), dtype_of(x))[()]), device, None, "astype")
    with warnings.catch_warnings():   # the DeprecationWarning above replaces lax's warning
      warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
      return placed(lax.convert_element_type(x, dtype), device, None, "astype")
  # NB: no catch_warnings on this path: entering one resets Python's record of the warnings
  # already shown, so a program's "default" DeprecationWarnings would show again after each
  # astype (an optax update step), where under JAX they show once.
  return placed(lax.convert_element_type(x, dtype), device, None, "astype")


def iscomplexobj(x) -> bool:
  """Whether `x` has a complex dtype: its `dtype` attribute's (a ShapeDtypeStruct's too,
  as JAX's), else the dtype of `asarray(x)`; None is not complex."""
  if x is None:
    return False
  dtype = getattr(x, "dtype", None)
  if dtype is None:
    dtype = dtype_of(asarray_or_scalar(x))
  return isinstance(dtype, np.dtype) and dtypes.is_complex(dtype)


def isrealobj(x) -> bool:
  """Whether `x` has a non-complex dtype."""
  return not iscomplexobj(x)


def isscalar(element: Any) -> bool:
  """Whether `element` is a scalar: what `np.isscalar` calls one (a Python or NumPy scalar,
  a string too), a 0-d array, or an object whose `__jax_array__()` is one (JAX's rule)."""
  if np.isscalar(element):
    return True
  if isinstance(element, (Array, Tracer, np.ndarray)):
    return np.ndim(element) == 0 if not isinstance(element, Tracer) else ndim_of(element) == 0
  if getattr(element, "__jax_array__", None) is not None:
    return ndim_of(asarray(element)) == 0
  return False


# The Python scalar types as weakly typed values: `result_type(int, np.uint8)` is uint8, as
# in JAX (the type `int` promotes as a Python int does).
_PYTHON_TYPE_VALUES = {int: 0, float: 0.0, complex: 0j, bool: False}


def result_type(*args) -> np.dtype:
  """The dtype JAX-style promotion gives `args` (see `stagecraft.dtypes.result_type`); the
  Python types `int`, `float` and `complex` are weakly typed, as their values are."""
  return dtypes.result_type(*(_PYTHON_TYPE_VALUES.get(a, a) if isinstance(a, type) else a
                              for a in args))


def promote_types(a, b) -> np.dtype:
  """The dtype two dtypes promote to (JAX's lattice; `dtypes.lattice_promote_types`):
  Python `int`/`float`/`complex` are weak, so `promote_types('uint8', int)` is uint8 (NumPy
  says int64); the result is not canonicalized."""
  return dtypes.lattice_promote_types(a, b)


def can_cast(from_, to, casting: str = "safe") -> bool:
  """NumPy's `can_cast` on dtypes (a dtype, scalar type, array or Array `from_`)."""
  if isinstance(from_, type) or not hasattr(from_, "dtype"):   # np.int32, 'float32', ...
    from_ = np.dtype(from_)
  else:
    from_ = np.dtype(from_.dtype)
  return np.can_cast(from_, np.dtype(to), casting)


def _issubdtype_arg(x):
  """An abstract NumPy scalar class (np.floating...) as itself, anything else as a dtype."""
  if isinstance(x, type) and issubclass(x, np.generic) and (
      x in _ABSTRACT_SCALARS or issubclass(x, dtypes.extended)):
    return x
  return np.dtype(x)


_ABSTRACT_SCALARS = frozenset({np.generic, np.number, np.integer, np.signedinteger,
                               np.unsignedinteger, np.inexact, np.floating, np.complexfloating,
                               np.character, np.flexible, np.bool_, np.object_})


def _is_extended_dtype(x: Any) -> bool:
  """Whether `x` is an extended dtype instance (a typed PRNG key's `key<impl>`)."""
  if x is None or isinstance(x, (type, str, np.dtype)):
    return False
  return dtypes.issubdtype(x, dtypes.extended)


def issubdtype(arg1: Any, arg2: Any) -> bool:
  """Whether the dtype (or scalar type) `arg1` is `arg2` or below it in NumPy's scalar
  hierarchy, as `numpy.issubdtype`, and knowing the ml_dtypes types: bfloat16, the float8,
  float6 and float4 types are `floating`, int1/int2/int4 `signedinteger`, uint1/2/4
  `unsignedinteger` (as JAX's numpy).

  Args:
    arg1, arg2: dtypes, scalar types (`jnp.float32`, `np.int8`, `float`), dtype names, or
      the abstract classes (`jnp.integer`, `jnp.inexact`, ...).

  Returns:
    bool.

  Raises:
    TypeError: if an argument names no dtype.
  """
  if _is_extended_dtype(arg1):     # typed PRNG keys: issubdtype(key.dtype, dtypes.prng_key)
    return dtypes.issubdtype(arg1, arg2)
  if _is_extended_dtype(arg2):
    return False
  a, b = _issubdtype_arg(arg1), _issubdtype_arg(arg2)
  if isinstance(a, type):          # abstract on the left: class inclusion
    return isinstance(b, type) and issubclass(a, b)
  if not isinstance(b, type):      # two dtypes: equality
    return a == b
  kind = scalar_types.extended_kinds.get(a)
  if kind is not None:
    return issubclass(kind, b)
  return bool(np.issubdtype(a, b))


def isdtype(dtype: Any, kind: Any) -> bool:
  """The Array API's dtype test: `kind` is a dtype, one of 'bool', 'signed integer',
  'unsigned integer', 'integral', 'real floating', 'complex floating', 'numeric', or a
  tuple of these.

  Raises:
    TypeError / ValueError: for an unknown kind.
  """
  dt = np.dtype(dtype)
  kinds = kind if isinstance(kind, tuple) else (kind,)
  tests = {"bool": lambda d: d == dtypes.bool_,
           "signed integer": lambda d: dtypes.is_integer(d) and not dtypes.is_unsigned(d),
           "unsigned integer": dtypes.is_unsigned, "integral": dtypes.is_integer,
           "real floating": dtypes.is_float, "complex floating": dtypes.is_complex,
           "numeric": lambda d: dtypes.is_integer(d) or dtypes.is_inexact(d)}
  for k in kinds:
    if isinstance(k, str):
      if k not in tests:
        raise ValueError(f"Unrecognized {k=!r}")
      if tests[k](dt):
        return True
    elif dt == np.dtype(k):
      return True
  return False


# NB: ml_dtypes' classes, as JAX's numpy exports them: they know bfloat16, float8 and int4,
# and accept arrays and tracers (anything with a `dtype`) as well as dtypes.
iinfo = ml_dtypes.iinfo
finfo = ml_dtypes.finfo
ComplexWarning = np.exceptions.ComplexWarning
dtype = np.dtype
pi, e, inf, nan, euler_gamma = np.pi, np.e, np.inf, np.nan, np.euler_gamma
newaxis = None


def iterable(y: Any) -> bool:
  """Whether `y` can be iterated (numpy.iterable)."""
  return np.iterable(y)


# ---------------------------------------------------------------------------
# Ranges and index grids computed in the graph


def linspace(start: ArrayLike, stop: ArrayLike, num: int = 50, endpoint: bool = True,
             retstep: bool = False, dtype: Any = None, axis: int = 0, *,
             device: Any = None):
  """`num` evenly spaced samples over [start, stop] (the last excluded if not `endpoint`),
  as JAX's numpy: the jitted `_linspace`, differentiable in `start` and `stop`.

  Sample i of n = `num - 1` (`num` without `endpoint`) intervals is the convex combination
  `start * (1 - i/n) + stop * (i/n)` (exact at both ends in floating point, unlike
  `start + i * step`); with `endpoint`, `stop` itself is the last sample.

  Args:
    start, stop: array-likes of broadcast-compatible shapes `s`.
    num: number of samples, a non-negative Python int (static).
    endpoint: include `stop`.
    retstep: also return the step `(stop - start) / n`: NaN for `num == 0` and for
      `num == 1` with `endpoint`.
    dtype: result dtype (default: the inexact promotion of start and stop); integer dtypes
      take the floor of the float samples.
    axis: where the samples axis goes in the result (negative counts from the end).
    device: a device or sharding to commit the samples to.

  Returns:
    `dtype[*s with num inserted at axis]`, or `(samples, step)` with `retstep`.

  Raises:
    ValueError: a negative `num`.
    ConcretizationTypeError: a traced `num` or `axis`.
    TypeError: `start` or `stop` not an array or scalar.
  """
  num = check_concrete(num, "linspace", "num")
  # NB: a symbolic `num` (export) goes on, as JAX's; its `num > 1` is then inconclusive
  num = num if shape_poly.is_symbolic_dim(num) else operator.index(num)
  axis = operator.index(check_concrete(axis, "linspace", "axis"))
  if num < 0:   # NB: also checked in `_linspace`; here the message has no traceback note
    raise ValueError(f"Number of samples, {num}, must be non-negative.")
  out = _linspace(start, stop, num, endpoint, retstep, dtype, axis)
  if device is None:
    return out
  if retstep:   # NB: as JAX's, only the samples are placed
    return placed(out[0], device, None, "linspace"), out[1]
  return placed(out, device, None, "linspace")


@jit(static_argnames=("num", "endpoint", "retstep", "dtype", "axis"))
def _linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0):
  """The body of `linspace` (jitted under this name, as JAX's)."""
  if num < 0:
    raise ValueError(f"Number of samples, {num}, must be non-negative.")
  start, stop = ensure_arraylike("linspace", start, stop)
  dt = (to_inexact_dtype(dtypes.result_type(start, stop)) if dtype is None
        else dtypes.check_user_dtype(dtype, "linspace"))
  calc = to_inexact_dtype(dt)
  start, stop = astype(start, calc), astype(stop, calc)
  bshape = list(broadcast_shapes(shape_of(start), shape_of(stop)))
  start_b, stop_b = broadcast_to(start, bshape), broadcast_to(stop, bshape)
  if axis < 0:
    axis += len(bshape) + 1
  out_shape = [*bshape[:axis], 1, *bshape[axis:]]
  n = num - 1 if endpoint else num
  if num > 1:
    step = divide(lax.convert_element_type(subtract(stop, start), calc), np.asarray(n, calc))
    rdt = real_dtype(calc)
    t = reshape(lax.iota(rdt, n),
                [n if i == axis else 1 for i in builtins.range(len(out_shape))])
    t = astype(divide(t, np.asarray(n, rdt)), calc)
    out = add(multiply(reshape(start_b, out_shape), subtract(1, t)),
              multiply(reshape(stop_b, out_shape), t))
    if endpoint:
      out = lax.concatenate([out, lax.expand_dims(stop_b, (axis,))], axis % ndim_of(out))
  elif num == 1:
    step = asarray(np.nan if endpoint else subtract(stop, start), calc)
    out = reshape(start_b, out_shape)
  else:   # num == 0: an empty array, as NumPy
    step = full((), np.nan, calc)
    out = empty([*bshape[:axis], 0, *bshape[axis:]], dt)
  if dtypes.is_integer(dt) and not dtypes.is_integer(dtype_of(out)):
    out = lax.floor(out)
  out = lax.convert_element_type(out, dt)
  return (out, step) if retstep else out


def logspace(start: ArrayLike, stop: ArrayLike, num: int = 50, endpoint: bool = True,
             base: ArrayLike = 10.0, dtype: Any = None, axis: int = 0) -> Array:
  """`base ** linspace(start, stop, num, endpoint, axis=axis)`, as JAX's numpy (the jitted
  `_logspace`; `base` may be traced).

  Args:
    start, stop: exponents, array-likes of broadcast-compatible shapes `s`.
    num, endpoint, axis: as `linspace`.
    base: the base, an array-like broadcastable against the samples.
    dtype: result dtype (default: the inexact promotion of start and stop).

  Returns:
    `dtype[*s with num inserted at axis]`.

  Raises:
    As `linspace`.
  """
  num = operator.index(check_concrete(num, "logspace", "num"))
  axis = operator.index(check_concrete(axis, "logspace", "axis"))
  return _logspace(start, stop, num, endpoint, base, dtype, axis)


@jit(static_argnames=("num", "endpoint", "dtype", "axis"))
def _logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
  """The body of `logspace` (jitted under this name, as JAX's)."""
  start, stop = ensure_arraylike("logspace", start, stop)
  dt = (to_inexact_dtype(dtypes.result_type(start, stop)) if dtype is None
        else dtypes.check_user_dtype(dtype, "logspace"))
  calc = to_inexact_dtype(dt)
  lin = linspace(astype(start, calc), astype(stop, calc), num, endpoint=endpoint, axis=axis)
  return lax.convert_element_type(power(base, lin), dt)


def geomspace(start: ArrayLike, stop: ArrayLike, num: int = 50, endpoint: bool = True,
              dtype: Any = None, axis: int = 0) -> Array:
  """Numbers spaced evenly on a log scale from `start` to `stop`, as JAX's numpy (the jitted
  `_geomspace`): `sign(start) * logspace(log10(start / sign(start)),
  log10(stop / sign(start)))`, so start and stop must have the same sign (else NaN).

  Args:
    start, stop: array-likes of broadcast-compatible shapes `s`, nonzero.
    num, endpoint, axis: as `linspace`.
    dtype: result dtype (default: the inexact promotion of start and stop).

  Returns:
    `dtype[*s with num inserted at axis]`.

  Raises:
    As `linspace`.
  """
  num = operator.index(check_concrete(num, "geomspace", "num"))
  axis = operator.index(check_concrete(axis, "geomspace", "axis"))
  return _geomspace(start, stop, num, endpoint, dtype, axis)


@jit(static_argnames=("num", "endpoint", "dtype", "axis"))
def _geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
  """The body of `geomspace` (jitted under this name, as JAX's)."""
  start, stop = ensure_arraylike("geomspace", start, stop)
  dt = (to_inexact_dtype(dtypes.result_type(start, stop)) if dtype is None
        else dtypes.check_user_dtype(dtype, "geomspace"))
  calc = to_inexact_dtype(dt)
  start, stop = astype(start, calc), astype(stop, calc)
  sgn = sign(start)
  res = multiply(sgn, logspace(log10(divide(start, sgn)), log10(divide(stop, sgn)), num,
                               endpoint=endpoint, base=10.0, dtype=calc, axis=0))
  axis = canonicalize_axis(axis, ndim_of(res), "geomspace")
  if axis != 0:
    res = lax.transpose(res, (*builtins.range(1, axis + 1), 0,
                              *builtins.range(axis + 1, ndim_of(res))))
  return lax.convert_element_type(res, dt)


def indices(dimensions: Sequence[int], dtype: Any = None, sparse: bool = False):
  """The index grids of an array of shape `dimensions`: `int32[len(dims), *dims]` (a tuple of
  broadcastable arrays with `sparse`)."""
  dt = dtypes.check_user_dtype(int if dtype is None else dtype, "indices")
  dims = tuple(operator.index(check_concrete(d, "indices", "dimensions")) for d in dimensions)
  n = len(dims)
  out = []
  for i, d in enumerate(dims):
    s = (1,) * i + (d,) + (1,) * (n - i - 1) if sparse else dims
    out.append(lax.broadcasted_iota(dt, s, i))
  if sparse:
    return tuple(out)
  return stack(out, 0) if out else zeros((0,), dt)


def fromfunction(function: Any, shape: Any, *, dtype: Any = float, **kwargs):
  """The array `[i0, i1, ...] -> function(i0, i1, ..., **kwargs)` of shape `shape`, the
  indices of dtype `dtype`: as JAX's, `function` is vmapped over each index, so it sees
  scalars (NumPy calls it once on the index grids; most functions give the same array).

  Raises:
    TypeError: `shape` is not a sequence of ints."""
  shape = _index_tuple(shape)
  fn = functools.partial(function, **kwargs) if kwargs else function
  for i in range(len(shape)):
    in_axes = [0 if i == j else None for j in range(len(shape))]
    fn = batch_over_leading(fn, tuple(in_axes[::-1]))
  return fn(*(arange(s, dtype=dtype) for s in shape))


# ---------------------------------------------------------------------------
# Manipulation that computes: rolls, repeats, padding, insertion and deletion, diagonals


def _index_tuple(x) -> tuple[int, ...]:
  """An int or a sequence of ints as a tuple (JAX's `_ensure_index_tuple`).

  Raises:
    TypeError: for anything else (a traced value among them)."""
  if isinstance(x, Tracer):
    raise TypeError("traced")
  try:
    return (operator.index(x),)
  except TypeError:
    return tuple(operator.index(i) for i in x)


def roll(a: ArrayLike, shift: ArrayLike | Sequence[int],
         axis: int | Sequence[int] | None = None) -> Array:
  """Rolls elements along `axis` by `shift` (elements leaving one end enter the other), as
  JAX's numpy: static shifts slice and concatenate (the jitted `_roll_static`); traced
  shifts take a dynamic slice of the doubled array (the jitted `_roll_dynamic`).

  Args:
    a: array `T[*s]`.
    shift: an int or ints (one per axis, or broadcast against them); may be traced.
    axis: an axis or axes; None rolls the flattened array and restores the shape.

  Returns:
    `T[*s]`.

  Raises:
    TypeError: `a` not an array or scalar (a list).
    ValueError: an out-of-range axis; shifts and axes that do not broadcast (or are not
      scalars or 1-D).
  """
  if type(a) in KEY_TYPES:
    return on_keys(roll, a, shift, axis)
  arr = ensure_arraylike("roll", a)
  if axis is None:
    return reshape(roll(ravel(arr), shift, 0), shape_of(arr))
  axis = tuple(canonicalize_axis(ax, ndim_of(arr), "roll") for ax in _index_tuple(axis))
  shifts = shift if isinstance(shift, (list, tuple)) else [shift]
  if any(shape_poly.is_symbolic_dim(x) for x in shifts):   # export: `n // 2` (fftshift)
    vals = [lax.broadcast_in_dim(lax.convert_element_type(x, dtypes.int32), (1,), ())
            for x in shifts]
    shift_arr = lax.concatenate(vals, 0)
    return _roll_dynamic(arr, shift_arr if isinstance(shift, (list, tuple)) else
                         lax.reshape(shift_arr, ()), axis)
  try:
    shift = _index_tuple(shift)
  except TypeError:
    return _roll_dynamic(arr, asarray(shift), axis)
  if any(shape_poly.is_symbolic_dim(shape_of(arr)[ax]) for ax in axis):
    # NB: a static shift of an axis of symbolic size (export): the dynamic program, whose
    # shift modulo the size is computed at run time (JAX's `mod(-s, b)` dimension)
    return _roll_dynamic(arr, asarray(np.asarray(shift)), axis)
  return _roll_static(arr, shift, axis)


@jit(static_argnums=(1, 2))
def _roll_static(a, shift, axis):
  """`roll` by static shifts (jitted under this name, as JAX's): one slice-and-concatenate
  per axis."""
  for ax, s in zip(*np.broadcast_arrays(axis, shift)):
    n = shape_of(a)[ax]
    if n == 0:
      continue
    i = int((-s) % n)
    a = lax.concatenate([lax.slice_in_dim(a, i, n, axis=int(ax)),
                         lax.slice_in_dim(a, 0, i, axis=int(ax))], int(ax))
  return a


@jit(static_argnums=(2,))
def _roll_dynamic(a, shift, axis):
  """`roll` by traced shifts (jitted under this name, as JAX's): per axis, the window of
  `a` concatenated with itself that starts at `n - shift mod n`."""
  b_shape = broadcast_shapes(shape_of(shift), np.shape(axis))
  if len(b_shape) != 1:
    raise ValueError("'shift' and 'axis' arguments to roll must be scalars or 1D arrays")
  for x, i in zip(broadcast_to(shift, b_shape), np.broadcast_to(axis, b_shape)):
    i = int(i)
    d = shape_of(a)[i]
    n = (lax.convert_element_type(d, dtypes.int32) if shape_poly.is_symbolic_dim(d)
         else asarray(d, dtypes.int32))   # a symbolic dimension (export): its value, staged
    x = remainder(lax.convert_element_type(x, dtypes.int32), lax.max(n, np.int32(1)))
    doubled = lax.concatenate([a, a], i)
    a = lax.dynamic_slice_in_dim(doubled, lax.sub(n, x), shape_of(a)[i], axis=i)
  return a


def repeat(a: ArrayLike, repeats: ArrayLike, axis: int | None = None, *,
           total_repeat_length: int | None = None, out_sharding: Any = None) -> Array:
  """Repeats each element of `a` along `axis` (the flattened array when None).

  Args:
    a: array `T[*s]`.
    repeats: an int, or ints (one per element along `axis`, or one broadcast); concrete
      unless `total_repeat_length` is given.
    total_repeat_length: the static length of the result along `axis`; needed when
      `repeats` is traced (extra output repeats the last value, shortfalls are cut, as
      JAX's numpy).
    out_sharding: the result's sharding (a NamedSharding, or a PartitionSpec under
      `set_mesh`), as `reshard` lays it out.

  Returns:
    `T[*s]` with `s[axis]` replaced by the total number of repeats. A scalar `repeats`
    without `total_repeat_length` is a broadcast and a reshape; other repeats are JAX's
    program: block starts scattered into zeros, their running sum gathers from `a`.

  Raises:
    TypeError: for `a` or `repeats` that are not arrays or scalars (a list, say).
    ConcretizationTypeError: for traced `repeats` without `total_repeat_length`.
    ValueError: for negative repeats or a count that does not broadcast to the axis.
  """
  if isinstance(repeats, (int, np.integer)):
    check_arraylike("repeat", a)
  else:
    check_arraylike("repeat", a, repeats)
  a = asarray(a)
  if axis is None:
    a, axis = ravel(a), 0
  out = _repeat(repeats, a, axis=axis, total_repeat_length=total_repeat_length)
  return out if out_sharding is None else placed(out, None, out_sharding, "repeat")


def _repeat(repeats, arr, *, axis: int, total_repeat_length: int | None):
  axis = operator.index(axis)
  nd = ndim_of(arr)
  if total_repeat_length is None:
    if isinstance(repeats, Tracer):
      raise core.ConcretizationTypeError(
          "Abstract tracer value encountered where concrete value is expected: When "
          "jit-compiling jnp.repeat, the total number of repeats must be static. To fix "
          "this, either specify a static value for `repeats`, or pass a static value to "
          "`total_repeat_length`.")
    reps = np.asarray(repeats)
    if reps.size and not np.issubdtype(reps.dtype, np.integer):
      raise TypeError(f"repeat: repeats must be integers, got {reps.dtype}.")
    if np.any(reps < 0):
      raise ValueError(f"repeat: repeats may not contain negative values, got {repeats}.")
    if reps.ndim == 0 and nd != 0:
      axis = canonicalize_axis(axis, nd, "repeat")
      shape = list(shape_of(arr))
      aux_shape = shape[:axis + 1] + [operator.index(reps)] + shape[axis + 1:]
      out = lax.broadcast_in_dim(arr, tuple(aux_shape),
                                 tuple(i for i in range(len(aux_shape)) if i != axis + 1))
      shape[axis] *= int(reps)
      return reshape(out, tuple(shape))
    reps = np.ravel(reps)
    if nd != 0:
      axis = canonicalize_axis(axis, nd, "repeat")
      try:
        reps = np.broadcast_to(reps, (shape_of(arr)[axis],))
      except ValueError:
        raise ValueError(f"repeat: got {reps.size} repeats for an axis of length "
                         f"{shape_of(arr)[axis]}.") from None
    total_repeat_length = int(np.sum(reps))
  else:
    reps = ravel(repeats)
    if nd != 0:
      axis = canonicalize_axis(axis, nd, "repeat")
      reps = broadcast_to(reps, (shape_of(arr)[axis],))
  if nd == 0:
    if np.shape(reps) == (1,):
      return full((total_repeat_length,), arr)
    raise ValueError("`repeat` with a scalar parameter `a` is only implemented for scalar "
                     "values of the parameter `repeats`.")
  if total_repeat_length == 0:
    shape = list(shape_of(arr))
    shape[axis] = 0
    return reshape(array([], dtype=dtype_of(arr)), tuple(shape))
  if shape_of(arr)[axis] == 0:
    return arr
  exclusive_repeats = at(roll(reps, shift=1))[0].set(0)
  scatter_indices = reductions.cumsum(exclusive_repeats)
  block_split_indicators = zeros((total_repeat_length,), dtype=dtypes.int32)
  block_split_indicators = at(block_split_indicators)[scatter_indices].add(1)
  gather_indices = subtract(reductions.cumsum(block_split_indicators), 1)
  return take(arr, gather_indices, axis=axis)


def _take_static(x, idx: np.ndarray, axis: int):
  """x gathered at the static indices `idx` (a 1-D host array) along `axis`: contiguous runs
  become slices, joined by one concatenate."""
  if idx.size == 0:
    return slice_axis(x, 0, 0, axis)
  parts, start = [], 0
  for i in range(1, idx.size + 1):
    if i == idx.size or idx[i] != idx[i - 1] + 1:
      lo, hi = int(idx[start]), int(idx[i - 1]) + 1
      parts.append(slice_axis(x, lo, hi, axis))
      start = i
  if len(parts) > 16:   # many runs: one gather instead of a long concatenate
    return take_axis(x, array(idx.astype(np.int32)), axis)
  return parts[0] if len(parts) == 1 else lax.concatenate(parts, axis)


def _broadcast_to_pairs(nvals: Any, nd: int, name: str) -> tuple[tuple[Any, Any], ...]:
  """`nvals` (a scalar, `(v,)`, `(before, after)`, `((before, after),)` or one pair per
  axis; concrete) as one `(before, after)` pair per axis of `nd`, its entries NumPy scalars
  (as JAX's, so static widths print as `np.int64(1)`).

  Raises:
    TypeError: for entries of different shapes. ConcretizationTypeError: for traced values.
    ValueError: for a shape not among `(nd, 2)`, `(1, 2)`, `(2,)`, `(1,)`, `()`.
  """
  def concrete(x):
    if isinstance(x, Tracer):
      raise core.ConcretizationTypeError(
          f"Abstract tracer value encountered where concrete value is expected: the "
          f"{name} argument of jnp.pad must be static.")
    return x
  try:
    vals = np.asarray(tree_util.tree_map(concrete, nvals))
  except ValueError as e:
    if "inhomogeneous" in str(e):
      raise TypeError(f"`{name}` entries must be the same shape: {nvals}") from e
    raise

  def scalar(v):
    if np.shape(v):
      raise TypeError(f"`{name}` entries must be the same shape: {vals}")
    return v
  if vals.shape == (nd, 2):
    return tuple((scalar(v[0]), scalar(v[1])) for v in vals)
  if vals.shape in ((1, 2), (2,)):
    pair = vals.reshape(2)
    return ((scalar(pair[0]), scalar(pair[1])),) * nd
  if vals.shape in ((1,), ()):
    v = scalar(vals.flat[0])
    return ((v, v),) * nd
  raise ValueError(f"jnp.pad: {name} with nd={nd} has unsupported shape {vals.shape}. "
                   f"Valid shapes are ({nd}, 2), (1, 2), (2,), (1,), or ().")


def _check_no_padding(widths, mode: str) -> None:
  if widths[0] > 0 or widths[1] > 0:
    raise ValueError(f"Cannot apply '{mode}' padding to empty axis")


def _pad_constant(arr, widths, constant_values):
  """Pads with a scalar (one `pad`), or with per-axis `(before, after)` values (one `pad`
  per non-zero side)."""
  nd = ndim_of(arr)
  cv = lax.convert_element_type(constant_values, dtype_of(arr), weak_type=arr.weak_type)
  if ndim_of(cv) == 0:
    return lax.pad(arr, cv, [(lo, hi, 0) for lo, hi in widths])
  if ndim_of(cv) == 1:
    if shape_of(cv)[-1] == 1:
      return lax.pad(arr, squeeze(cv), [(lo, hi, 0) for lo, hi in widths])
    if shape_of(cv)[-1] != 2:
      raise ValueError(f"jnp.pad: constant_values has unsupported shape {shape_of(cv)}. If "
                       f"the shape is 1D or 2D, the last dimension must be of size 1 or 2.")
  cv = broadcast_to(cv, (nd, 2))
  for i in range(nd):
    cfg = [(0, 0, 0)] * nd
    if widths[i][0] != 0:
      cfg[i] = (widths[i][0], 0, 0)
      arr = lax.pad(arr, cv[i, 0], cfg)
    if widths[i][1] != 0:
      cfg[i] = (0, widths[i][1], 0)
      arr = lax.pad(arr, cv[i, 1], cfg)
  return arr


def _pad_wrap(arr, widths):
  """Pads each axis with copies of the array (and the remainders of one)."""
  for i in range(ndim_of(arr)):
    n = shape_of(arr)[i]
    if n == 0:
      _check_no_padding(widths[i], "wrap")
      continue
    lrep, lrem = builtins.divmod(widths[i][0], n)
    rrep, rrem = builtins.divmod(widths[i][1], n)
    parts = [lax.slice_in_dim(arr, n - lrem, n, axis=i)] if lrem > 0 else []
    parts += [arr] * (lrep + rrep + 1)
    if rrem > 0:
      parts.append(lax.slice_in_dim(arr, 0, rrem, axis=i))
    arr = lax.concatenate(parts, i)
  return arr


def _pad_symmetric_or_reflect(arr, widths, mode: str, reflect_type: str):
  """Pads each axis by mirrored copies, in chunks no longer than the axis (as numpy);
  'odd' reflects about the edge value (`2 * edge - x`)."""
  for i in range(ndim_of(arr)):
    n = shape_of(arr)[i]
    if n == 0:
      _check_no_padding(widths[i], mode)
      continue
    if widths[i][0] == 0 and widths[i][1] == 0:
      continue
    offset = 1 if (mode == "reflect" and n > 1) else 0
    for before, padding in ((True, widths[i][0]), (False, widths[i][1])):
      m = shape_of(arr)[i]
      edge = (lax.slice_in_dim(arr, 0, 1, axis=i) if before
              else lax.slice_in_dim(arr, m - 1, m, axis=i))
      while padding > 0:
        m = shape_of(arr)[i]
        cur = builtins.min(padding, n - offset)
        padding -= cur
        if before:
          start, stop = offset, offset + cur
        else:
          start = m - (cur + offset)
          stop = m if (mode == "symmetric" or n == 1) else m - 1
        x = flip(lax.slice_in_dim(arr, start, stop, axis=i), i)
        if reflect_type == "odd":
          x = subtract(multiply(2, edge), x)
          if n > 1:
            k = shape_of(x)[i]
            edge = (lax.slice_in_dim(x, 0, 1, axis=i) if before
                    else lax.slice_in_dim(x, k - 1, k, axis=i))
        arr = lax.concatenate([x, arr] if before else [arr, x], i)
  return arr


def _pad_edge(arr, widths):
  """Pads each axis with its edge values repeated."""
  for i in range(ndim_of(arr)):
    n = shape_of(arr)[i]
    if n == 0:
      _check_no_padding(widths[i], "edge")
      continue
    pad_before = repeat(lax.slice_in_dim(arr, 0, 1, axis=i), widths[i][0], axis=i)
    pad_after = repeat(lax.slice_in_dim(arr, n - 1, n, axis=i), widths[i][1], axis=i)
    arr = lax.concatenate([pad_before, arr, pad_after], i)
  return arr


def _pad_linear_ramp(arr, widths, end_values):
  """Pads each axis with `linspace(end_value, edge, width, endpoint=False)` ramps (reversed
  after), in the array's dtype."""
  for i in range(ndim_of(arr)):
    n = shape_of(arr)[i]
    edge_before = lax.slice_in_dim(arr, 0, 1, axis=i)
    edge_after = lax.slice_in_dim(arr, n - 1, n, axis=i)
    ramps = []
    for end, edge, w in ((end_values[i][0], edge_before, widths[i][0]),
                         (end_values[i][1], edge_after, widths[i][1])):
      ramp = linspace(end, squeeze(edge, i), w, endpoint=False, dtype=dtype_of(arr), axis=i)
      ramps.append(lax.convert_element_type(ramp, dtype_of(ramp), weak_type=arr.weak_type))
    arr = lax.concatenate([ramps[0], arr, flip(ramps[1], i)], i)
  return arr


# The statistics of `pad`'s modes 'maximum', 'minimum', 'mean' and 'median' (added by
# `statistics`, which this module is below).
PAD_STAT_FUNCS: dict[str, Any] = {"maximum": reductions.max, "minimum": reductions.min,
                                  "mean": reductions.mean}


def _pad_stats(arr, widths, stat_length, stat_func):
  """Pads each axis with a statistic of the whole axis, or of `stat_length` values at each
  edge (rounded for integer arrays)."""
  for i in range(ndim_of(arr)):
    if stat_length is None:
      stat_before = stat_after = stat_func(arr, axis=i, keepdims=True)
    else:
      n = shape_of(arr)[i]
      length_before, length_after = stat_length[i]
      if length_before == 0 or length_after == 0:
        raise ValueError("stat_length of 0 yields no value for padding")
      length_before = builtins.min(length_before, n)
      length_after = builtins.min(length_after, n)
      slice_before = lax.slice_in_dim(arr, 0, length_before, axis=i)
      slice_after = lax.slice_in_dim(arr, n - length_after, n, axis=i)
      stat_before = stat_func(slice_before, axis=i, keepdims=True)
      stat_after = stat_func(slice_after, axis=i, keepdims=True)
    if dtypes.is_integer(dtype_of(arr)):
      stat_before, stat_after = round(stat_before), round(stat_after)
    stat_before = lax.convert_element_type(stat_before, dtype_of(arr), weak_type=arr.weak_type)
    stat_after = lax.convert_element_type(stat_after, dtype_of(arr), weak_type=arr.weak_type)
    arr = lax.concatenate([repeat(stat_before, widths[i][0], axis=i), arr,
                           repeat(stat_after, widths[i][1], axis=i)], i)
  return arr


def _pad_empty(arr, widths):
  """Pads each axis with zeros (NumPy leaves them undefined)."""
  for i in range(ndim_of(arr)):
    shape = shape_of(arr)
    before = zeros_like(arr, shape=shape[:i] + (widths[i][0],) + shape[i + 1:])
    after = zeros_like(arr, shape=shape[:i] + (widths[i][1],) + shape[i + 1:])
    arr = lax.concatenate([before, arr, after], i)
  return arr


def _pad_func(arr, widths, func, **kwargs):
  """Zero-pads, then applies `func(row, (before, after), axis, kwargs)` to every 1-D row of
  each axis in turn (mapped by `apply_along_axis`)."""
  widths = _broadcast_to_pairs(widths, ndim_of(arr), "pad_width")
  padded = _pad_constant(arr, widths, 0)   # a Python 0: a literal, as JAX's `asarray(0)`
  for i in range(ndim_of(padded)):
    padded = apply_along_axis(func, i, padded, widths[i], i, kwargs)
  return padded


@jit(static_argnums=(1, 2, 4, 5, 6))
def _pad(array_, pad_width, mode, constant_values, stat_length, end_values, reflect_type):
  """`pad` with its static arguments (jitted under this name, as JAX's)."""
  arr = asarray(array_)
  nd = ndim_of(arr)
  if nd == 0:
    return arr
  widths = _broadcast_to_pairs(pad_width, nd, "pad_width")
  if np.any(np.array(widths) < 0):
    raise ValueError("index can't contain negative values")
  if mode == "constant":
    return _pad_constant(arr, widths, asarray(constant_values))
  if mode == "wrap":
    return _pad_wrap(arr, widths)
  if mode in ("symmetric", "reflect"):
    return _pad_symmetric_or_reflect(arr, widths, mode, reflect_type)
  if mode == "edge":
    return _pad_edge(arr, widths)
  if mode == "linear_ramp":
    return _pad_linear_ramp(arr, widths, _broadcast_to_pairs(end_values, nd, "end_values"))
  if mode in PAD_STAT_FUNCS:
    if stat_length is not None:
      stat_length = _broadcast_to_pairs(stat_length, nd, "stat_length")
    return _pad_stats(arr, widths, stat_length, PAD_STAT_FUNCS[mode])
  assert mode == "empty", mode
  return _pad_empty(arr, widths)


_PAD_KWARGS = {"empty": (), "edge": (), "wrap": (), "constant": ("constant_values",),
               "linear_ramp": ("end_values",), "maximum": ("stat_length",),
               "mean": ("stat_length",), "median": ("stat_length",),
               "minimum": ("stat_length",), "reflect": ("reflect_type",),
               "symmetric": ("reflect_type",)}


def pad(array: ArrayLike, pad_width: Any, mode: str | Any = "constant", **kwargs) -> Array:
  """Pads an array, as numpy.pad (jitted as JAX's `_pad`, the widths and options static).

  Args:
    array: array `T[*s]`.
    pad_width: `(before, after)` per axis, one pair for all axes, or one int; static,
      non-negative integers.
    mode: 'constant' (`constant_values`: a scalar, a pair, or pairs per axis; may be
      traced), 'edge', 'reflect' / 'symmetric' (`reflect_type` 'even' or 'odd'), 'wrap',
      'linear_ramp' (`end_values`), 'maximum' / 'minimum' / 'mean' / 'median'
      (`stat_length`), 'empty' (zeros), or a callable `f(row, (before, after), axis,
      kwargs) -> row` applied to each zero-padded 1-D row (by `apply_along_axis`).

  Returns:
    `T[*r]` with `r[i] = s[i] + before[i] + after[i]`.

  Raises:
    TypeError: for non-integer widths.
    ValueError: for negative widths, keyword arguments the mode does not take, padding an
      empty axis in a mode that reads from it, a `stat_length` of 0, or widths of a shape
      not among `(nd, 2)`, `(1, 2)`, `(2,)`, `(1,)`, `()`.
    NotImplementedError: for an unknown mode.
  """
  arr = ensure_arraylike("pad", array)
  widths = _broadcast_to_pairs(pad_width, ndim_of(arr), "pad_width")
  if widths and not builtins.all(isinstance(w, (int, np.integer)) for p in widths for w in p):
    raise TypeError("`pad_width` must be of integral type.")
  if callable(mode):
    return _pad_func(asarray(arr), widths, mode, **kwargs)
  if mode not in _PAD_KWARGS:
    raise NotImplementedError(f"Unimplemented padding mode '{mode}' for np.pad.")
  unsupported = set(kwargs) - set(_PAD_KWARGS[mode])
  if unsupported:
    raise ValueError(f"unsupported keyword arguments for mode '{mode}': {unsupported}")
  if mode in ("reflect", "symmetric") and kwargs.get("reflect_type", "even") not in (
      "even", "odd"):
    raise ValueError(f"reflect_type must be 'even' or 'odd', got "
                     f"{kwargs['reflect_type']!r}.")
  return _pad(arr, widths, mode, kwargs.get("constant_values", 0),
              kwargs.get("stat_length"), kwargs.get("end_values", 0),
              kwargs.get("reflect_type", "even"))


def _static_positions(obj, n: int, name: str) -> np.ndarray:
  if isinstance(obj, Tracer):
    raise core.ConcretizationTypeError(
        f"Abstract tracer value encountered where concrete value is expected: jnp.{name} "
        f"needs static indices `obj` to know the shape of its result.")
  if isinstance(obj, slice):
    return np.arange(*obj.indices(n))
  return np.asarray(obj)


def delete(arr: ArrayLike, obj: Any, axis: int | None = None, *,
           assume_unique_indices: bool = False) -> Array:
  """`arr` without the entries at `obj` along `axis` (the flattened array when None), as
  JAX's program: a static int is two slices joined; a slice, or integer indices with
  `assume_unique_indices` (which may then be traced), gather the kept positions computed
  in the graph; other indices (static ints or a boolean mask) index by a static mask.

  Args:
    arr: array `T[*s]`.
    obj: an int, a slice, or integer (or boolean) indices along `axis`.
    assume_unique_indices: promise that integer indices are unique (and in range).

  Returns:
    `T[*s]` with `s[axis]` reduced by the number of deleted entries.

  Raises:
    IndexError: for an out-of-range int or indices.
    TypeError: for `obj` that is not an int, slice, array or scalar (a list, say).
    ConcretizationTypeError: for traced `obj` without `assume_unique_indices`.
    ValueError: for a boolean mask of the wrong shape, or indices of another dtype.
  """
  a = ensure_arraylike("delete", arr)
  if axis is None:
    a, axis = ravel(a), 0
  axis = canonicalize_axis(axis, ndim_of(a), "delete")
  n = shape_of(a)[axis]
  lead = (slice(None),) * axis
  if isinstance(obj, (int, np.integer)) and not isinstance(obj, (bool, np.bool_)):
    i = operator.index(obj)
    if not -n <= i < n:
      raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
    i = i + n if i < 0 else i
    return concatenate([a[lead + (slice(0, i),)], a[lead + (slice(i + 1, None),)]], axis=axis)
  if isinstance(obj, slice):
    obj = arange(n)[obj]
    assume_unique_indices = True
  check_arraylike("delete", a, obj)
  if getattr(obj, "__jax_array__", None) is not None and not isinstance(obj, (Array, Tracer)):
    obj = obj.__jax_array__()
  if dtypes.is_integer(dtype_of(obj)) and assume_unique_indices:
    idx = ravel(asarray(obj))
    idx = clip(where(idx < 0, idx + n, idx), 0, n)
    idx = sorting.sort(idx)
    idx = idx - arange(shape_of(idx)[0], dtype=dtype_of(idx))
    i = arange(n - shape_of(idx)[0], dtype=dtype_of(idx))
    i = i + (i[None, :] >= idx[:, None]).sum(0, dtype=dtype_of(i))
    return a[lead + (i,)]
  host = np.asarray(check_concrete(obj, "delete", "'obj' array argument of jnp.delete()"))
  if np.issubdtype(host.dtype, np.integer):
    flat = host.ravel()
    if flat.size and (flat.min() < -n or flat.max() >= n):
      raise IndexError(f"index {flat[(flat < -n) | (flat >= n)][0]} is out of bounds for "
                       f"axis {axis} with size {n}")
    mask = np.ones(n, dtype=bool)
    mask[host] = False
  elif host.dtype == bool:
    if host.shape != (n,):
      raise ValueError("np.delete(arr, obj): for boolean indices, obj must be "
                       "one-dimensional with length matching specified axis.")
    mask = ~host
  else:
    raise ValueError(f"np.delete(arr, obj): got obj.dtype={host.dtype}; must be integer or "
                     f"bool.")
  return a[lead + (mask,)]


def insert(arr: ArrayLike, obj: Any, values: ArrayLike, axis: int | None = None) -> Array:
  """`values` inserted before the indices `obj` along `axis` (numpy.insert; the flattened
  array when `axis` is None), as JAX's program: the result is zeros with `values` and then
  `arr` scattered into their positions (computed in the graph, so `obj` may be traced);
  `values` are cast to arr's dtype.

  Args:
    arr: array `T[*s]`.
    obj: an int, a slice, or 1-D integer indices into `[-s[axis], s[axis]]` (clipped).
    values: broadcast to the inserted entries.

  Returns:
    `T[*s]` with `s[axis]` grown by the number of inserted entries.

  Raises:
    TypeError: for arguments that are not arrays or scalars (a list, say).
    ValueError: for indices of more than one dimension or not of an integer dtype.
  """
  a, _, values_arr = ensure_arraylike("insert", arr, 0 if isinstance(obj, slice) else obj,
                                      values)
  if axis is None:
    a, axis = ravel(a), 0
  axis = canonicalize_axis(check_concrete(axis, "insert", "axis"), ndim_of(a), "insert")
  if isinstance(obj, slice):
    indices = arange(*obj.indices(shape_of(a)[axis]))
  else:
    indices = asarray(obj)
  if ndim_of(indices) > 1:
    raise ValueError(f"jnp.insert(): obj must be a slice, a one-dimensional array, or a "
                     f"scalar; got {obj}")
  if not dtypes.is_integer(dtype_of(indices)):
    if indices.size == 0 and not isinstance(obj, (Array, Tracer)):
      indices = astype(indices, int)
    else:
      raise ValueError(f"jnp.insert(): index array must be integer typed; got {obj}")
  # NB: `values` itself, so that a Python scalar converts on the host (JAX's literal), not
  # by a staged conversion of its weakly typed Array
  values_arr = array(values_arr if hasattr(values, "__jax_array__") else values,
                     ndmin=ndim_of(a), dtype=dtype_of(a), copy=False)
  if indices.size == 1:
    index = ravel(indices)[0]
    if ndim_of(indices) == 0:
      values_arr = moveaxis(values_arr, 0, axis)
    indices = full(shape_of(values_arr)[axis], index)
  n_input = shape_of(a)[axis]
  n_insert = broadcast_shapes(shape_of(indices), (shape_of(values_arr)[axis],))[0]
  out_shape = list(shape_of(a))
  out_shape[axis] += n_insert
  out = zeros_like(a, shape=tuple(out_shape))
  indices = where(indices < 0, indices + n_input, indices)
  indices = clip(indices, 0, n_input)
  values_ind = at(indices)[sorting.argsort(indices)].add(
      arange(n_insert, dtype=dtype_of(indices)))
  arr_mask = at(ones(n_input + n_insert, dtype=bool))[values_ind].set(False)
  arr_ind = nonzero(arr_mask, size=n_input)[0]
  lead = (slice(None),) * axis
  out = at(out)[lead + (values_ind,)].set(values_arr)
  return at(out)[lead + (arr_ind,)].set(a)


def fill_diagonal(a: ArrayLike, val: ArrayLike, wrap: bool = False, *,
                  inplace: bool = True) -> Array:
  """`a` with its main diagonal (`a[i, i, ..., i]`) set to `val` (repeated cyclically).

  Raises:
    NotImplementedError: unless `inplace=False` (arrays are immutable), or for `wrap`.
    ValueError: for fewer than 2 dimensions, or unequal dimensions beyond 2-D.
  """
  if inplace:
    raise NotImplementedError("JAX arrays are immutable, must use inplace=False")
  if wrap:
    raise NotImplementedError("wrap=True is not implemented, must use wrap=False")
  a, val = as_array(a), as_array(val)
  if ndim_of(a) < 2:
    raise ValueError("array must be at least 2-d")
  if ndim_of(a) > 2 and not builtins.all(d == shape_of(a)[0] for d in shape_of(a)[1:]):
    raise ValueError("All dimensions of input must be of equal length")
  n = builtins.min(shape_of(a))
  val = lax.convert_element_type(ravel(val), dtype_of(a))
  reps = -(-n // builtins.max(shape_of(val)[0], 1))
  val = slice_axis(tile(val, reps), 0, n, 0) if shape_of(val)[0] else zeros((n,), dtype_of(a))
  # The diagonal of the flattened array has a fixed stride; gather val there.
  stride = int(np.sum(np.cumprod((1,) + shape_of(a)[:0:-1])))
  flat_pos = np.arange(n) * stride
  size = math.prod(shape_of(a))
  is_diag = np.zeros(size, bool)
  is_diag[flat_pos] = True
  src = np.zeros(size, np.int64)
  src[flat_pos] = np.arange(n)
  vals = _take_static(val, src, 0) if n else zeros((size,), dtype_of(a))
  return reshape(where(array(is_diag), vals, ravel(a)), shape_of(a))


@jit(static_argnames=("offset", "axis1", "axis2"))
def diagonal(a: ArrayLike, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Array:
  """The `offset` diagonal of the planes given by `axis1` and `axis2`. Jitted, as JAX's
  (`jit[name=diagonal]`; static `offset` and axes).

  Args:
    a: `T[*s]` of rank >= 2.
    offset: the diagonal (> 0 above the main one, < 0 below).
    axis1, axis2: the axes of the planes (distinct).

  Returns:
    `T[*rest, d]`: the other axes in order, then the diagonal (length
    `max(0, min(n1 + min(offset, 0), n2 - max(offset, 0)))`).

  Raises:
    TypeError: for `a` not an array or scalar (a list).
    ValueError: for fewer than 2 dimensions, out-of-range or equal axes.

  Algorithm: as JAX's: one gather of the points `(i, i + offset)` (`a[..., i, j]` with `i`,
  `j` aranges); the main diagonal of a square non-bool matrix is `lax.platform_dependent`
  between that gather (`default`) and a `mosaic` branch (Pallas TPU kernels: the column sums
  of `eye * a`), so it stages a `platform_index` and a `cond` of both.
  """
  a = ensure_arraylike("diagonal", a)
  nd = ndim_of(a)
  if nd < 2:
    raise ValueError("diagonal requires an array of at least two dimensions.")
  offset = operator.index(check_concrete(offset, "diagonal", "offset"))
  ax1, ax2 = canonicalize_axis(axis1, nd, "diagonal"), canonicalize_axis(axis2, nd, "diagonal")
  if ax1 == ax2:
    raise ValueError("axis1 and axis2 cannot be the same")
  s = shape_of(a)

  def default_diag(a):
    a = moveaxis(a, (ax1, ax2), (-2, -1))
    d = builtins.max(0, builtins.min(s[ax1] + builtins.min(offset, 0),
                                     s[ax2] - builtins.max(offset, 0)))
    i = arange(d)
    j = arange(builtins.abs(offset), builtins.abs(offset) + d)
    return a[..., i, j] if offset >= 0 else a[..., j, i]

  dtype = dtype_of(a)
  if nd != 2 or s[0] != s[1] or offset != 0 or dtype == np.bool_:
    return default_diag(a)
  eye_a = eye(s[0], dtype=dtype)   # NB: outside the branch, as JAX's: a branch constant

  def mosaic_diag(a):
    return lax.reduce(lax.mul(eye_a, a), np.array(0, dtype), lax.add, (0,))
  return lax.platform_dependent(a, default=default_diag, mosaic=mosaic_diag)


def diag(v: ArrayLike, k: int = 0) -> Array:
  """For 1-D `v` of length n: the `[n+|k|, n+|k|]` matrix with `v` on the k-th diagonal;
  for 2-D `v`: its k-th diagonal (`diagonal(v, k)`). Jitted as JAX's (`jit[name=_diag]`).

  Raises:
    TypeError: for `v` not an array or scalar (a list).
    ValueError: for inputs that are not 1-D or 2-D.

  Algorithm: `v` padded to n + |k| and broadcast along the rows, kept where
  `eye(n + |k|, k=k)` is true (JAX's construction).
  """
  v = ensure_arraylike("diag", v)
  return _diag(v, operator.index(check_concrete(k, "diag", "k")))


@jit(static_argnames=("k",))
def _diag(v, k: int):
  if ndim_of(v) == 2:
    return diagonal(v, offset=k)
  if ndim_of(v) != 1:
    raise ValueError("diag input must be 1d or 2d")
  n = shape_of(v)[0] + builtins.abs(k)
  zero = lax.full_like(v, 0, shape=())
  v = lax.pad(v, zero, ((builtins.max(0, -k), builtins.max(0, k), 0),))
  return where(eye(n, k=k, dtype=bool), v[:, None], zero)


def diagflat(v: ArrayLike, k: int = 0) -> Array:
  """`diag` of the flattened input: `[n] -> [n+|k|, n+|k|]`."""
  return diag(ravel(as_array(v)), k)


@jit(static_argnames=("axis1", "axis2", "dtype"))
def trace(a: ArrayLike, offset: int | ArrayLike = 0, axis1: int = 0, axis2: int = 1,
          dtype: Any = None, out: None = None) -> Array:
  """Sum along the `offset` diagonal of the planes `(axis1, axis2)`.

  Jitted as JAX's (`jit[name=trace]`; static `axis1`, `axis2`, `dtype`; `offset` may be
  traced): the planes move last, entries off the diagonal are masked to zero (an `eye` mask
  built from iotas) and the last two axes are summed.

  Args:
    a: array `T[*b, n, m]` (the two axes anywhere), rank >= 2.
    offset: the diagonal: `j == i + offset` (a Python or traced integer).
    axis1, axis2: the axes of the planes (distinct).
    dtype: the result dtype; default as `sum` (small integers and bool accumulate in the
      default integer).

  Returns:
    `[*b]`.

  Raises:
    TypeError: `a` not an array or scalar (a list).
    ValueError: `axis1 == axis2`, or an axis out of range.
    NotImplementedError: for `out`.
  """
  a = ensure_arraylike("trace", a)
  if out is not None:
    raise NotImplementedError("The 'out' argument to jnp.trace is not supported.")
  if canonicalize_axis(axis1, a.ndim, "trace") == canonicalize_axis(axis2, a.ndim, "trace"):
    raise ValueError(f"axis1 and axis2 can not be same. axis1={axis1} and axis2={axis2}")
  if dtype is not None:
    dtype = dtypes.check_user_dtype(dtype, "trace")
  a_shape = a.shape
  a = moveaxis(a, (axis1, axis2), (-2, -1))
  mask = _diagonal_mask(a_shape[axis1], a_shape[axis2], offset)
  return reductions.sum(where(mask, a, zeros_like(a)), axis=(-2, -1), dtype=dtype)


def _diagonal_mask(n: int, m: int, offset):
  """`eye(n, m, k=offset, dtype=bool)`; a weakly typed traced offset is converted to a strong
  one next to the `add`, as JAX's lax converts mixed weak operands."""
  # NB: array_creation.eye adds such an offset without the conversion (so is bypassed).
  aval = core.get_aval(offset) if isinstance(offset, Tracer) else None
  if aval is None or not aval.weak_type or aval.shape or not dtypes.is_integer(aval.dtype):
    return eye(n, m, k=offset, dtype=bool)
  rows = lax.broadcasted_iota(aval.dtype, (n, m), 0)
  cols = lax.broadcasted_iota(aval.dtype, (n, m), 1)
  offset = lax.convert_element_type(offset, aval.dtype, weak_type=False)
  return lax.eq(lax.add(rows, offset), cols)


# ---------------------------------------------------------------------------
# Differences and integrals


@jit(static_argnames=("n", "axis"))
def diff(a: ArrayLike, n: int = 1, axis: int = -1, prepend: ArrayLike | None = None,
         append: ArrayLike | None = None) -> Array:
  """The n-th discrete difference along `axis`: `out[i] = a[i+1] - a[i]` (`!=` for bool),
  applied `n` times. Jitted as JAX's (`jit[name=diff]`, static `n` and `axis`).

  Args:
    a: array `T[*s]`, at least 1-D.
    n: the number of differences (static, non-negative); beyond the axis length the
      result is empty.
    axis: the axis (static).
    prepend, append: values put before / after `a` along `axis` first (scalars broadcast
      to one slice).

  Returns:
    `T[*s]` with `s[axis]` reduced by `n` (after the prepended and appended values).

  Raises:
    ValueError: for negative `n` or 0-d input.
    TypeError: `a`, `prepend` or `append` not an array or scalar (a list).
  """
  arr = ensure_arraylike("diff", a)
  n = operator.index(check_concrete(n, "diff", "n"))
  axis = operator.index(check_concrete(axis, "diff", "axis"))
  if n == 0:
    return arr
  if n < 0:
    raise ValueError(f"order must be non-negative but got {n}")
  if ndim_of(arr) == 0:
    raise ValueError(f"diff requires input that is at least one dimensional; got {a}")
  nd = ndim_of(arr)
  axis = canonicalize_axis(axis, nd, "diff")

  def part(extra):
    extra = ensure_arraylike("diff", extra)
    if ndim_of(extra) == 0:
      extra = broadcast_to(extra, tuple(1 if i == axis else d
                                        for i, d in enumerate(shape_of(arr))))
    return extra

  parts = ([part(prepend)] if prepend is not None else []) + [arr] + (
      [part(append)] if append is not None else [])
  if len(parts) > 1:
    arr = concatenate(parts, axis)
  hi = tuple(slice(1, None) if i == axis else slice(None) for i in builtins.range(nd))
  lo = tuple(slice(None, -1) if i == axis else slice(None) for i in builtins.range(nd))
  op = not_equal if dtype_of(arr) == dtypes.bool_ else subtract
  for _ in builtins.range(n):
    arr = op(arr[hi], arr[lo])
  return arr


def ediff1d(ary: ArrayLike, to_end: ArrayLike | None = None,
            to_begin: ArrayLike | None = None) -> Array:
  """Differences of consecutive elements of the flattened array, with optional values
  (cast to its dtype) before and after."""
  arr = ravel(as_array(ary))
  m = shape_of(arr)[0]
  # NB: an empty array gives an empty result (`arr[1:] - arr[:-1]`, as JAX's)
  result = lax.sub(slice_axis(arr, builtins.min(1, m), m, 0),
                   slice_axis(arr, 0, builtins.max(m - 1, 0), 0))
  if to_begin is not None:
    result = concatenate([ravel(astype(as_array(to_begin), dtype_of(arr))), result])
  if to_end is not None:
    result = concatenate([result, ravel(astype(as_array(to_end), dtype_of(arr)))])
  return result


@jit(static_argnames=("axis", "edge_order"))
def gradient(f: ArrayLike, *varargs: ArrayLike, axis: int | Sequence[int] | None = None,
             edge_order: int | None = None):
  """The gradient of sampled `f` by central differences (one-sided at the edges), with
  scalar spacings or 1-D coordinates per axis; one array per axis (a single array for one
  axis). Jitted as JAX's (`axis` and `edge_order` static).

  Raises:
    NotImplementedError: for `edge_order`.
    ValueError: for an axis shorter than 2 or spacing arrays of the wrong length.
  """
  if edge_order is not None:
    raise NotImplementedError("The 'edge_order' argument to jnp.gradient is not supported.")
  a, *spacing = (as_array(v) for v in promote_dtypes_inexact(f, *varargs))

  def along(a, h, ax):
    n = shape_of(a)[ax]
    sl = lambda lo, hi: slice_axis(a, lo, hi, ax)  # noqa: E731
    upper = subtract(sl(1, 2), sl(0, 1))
    lower = subtract(sl(n - 1, n), sl(n - 2, n - 1))
    if ndim_of(h) == 0:
      inner = divide(multiply(subtract(sl(2, n), sl(0, n - 2)), 0.5), h)
      lower = divide(lower, h)
      upper = divide(upper, h)
    elif ndim_of(h) == 1:
      if shape_of(h)[0] != n:
        raise ValueError("Spacing arrays must have the same length as the dimension along "
                         "which the gradient is calculated.")
      h = reshape(h, tuple(n if i == ax else 1 for i in range(ndim_of(a))))
      sx = lambda lo, hi: slice_axis(h, lo, hi, ax)  # noqa: E731
      upper = divide(upper, subtract(sx(1, 2), sx(0, 1)))
      lower = divide(lower, subtract(sx(n - 1, n), sx(n - 2, n - 1)))
      dx1, dx2 = subtract(sx(1, n - 1), sx(0, n - 2)), subtract(sx(2, n), sx(1, n - 1))
      ca = divide(negative(dx2), multiply(dx1, add(dx1, dx2)))
      cb = divide(subtract(dx2, dx1), multiply(dx1, dx2))
      cc = divide(dx1, multiply(dx2, add(dx1, dx2)))
      inner = add(add(multiply(ca, sl(0, n - 2)), multiply(cb, sl(1, n - 1))),
                  multiply(cc, sl(2, n)))
    else:
      raise ValueError("Spacing arrays must be 1D arrays or scalars.")
    return concatenate([upper, inner, lower], ax)

  axes = tuple(range(ndim_of(a))) if axis is None else axis_tuple(axis, ndim_of(a), "gradient")
  if not axes:
    return []
  if builtins.min(shape_of(a)[i] for i in axes) < 2:
    raise ValueError("Shape of array too small to calculate a numerical gradient, at least "
                     "2 elements are required.")
  if not spacing:
    dx = [1.0] * len(axes)
  elif len(spacing) == 1:
    dx = spacing * len(axes)
  elif len(spacing) == len(axes):
    dx = spacing
  else:
    raise TypeError(f"Invalid number of spacing arguments {len(spacing)} for axis={axis}")
  grads = [along(a, h, ax) for ax, h in zip(axes, dx)]
  return grads[0] if len(axes) == 1 else grads


@jit(static_argnames=("axis",))
def trapezoid(y: ArrayLike, x: ArrayLike | None = None, dx: ArrayLike = 1.0,
              axis: int = -1) -> Array:
  """The integral of `y` along `axis` by the trapezoidal rule, at sample points `x` (1-D,
  or of y's shape) or else with spacing `dx` (a scalar, or an array broadcast against `y`
  with `axis` last). Jitted as JAX's (`axis` static).

  Returns:
    `y`'s shape without `axis`, in `y`'s inexact dtype (promoted with `x`).

  Raises:
    TypeError: for `y` or `x` that are not arrays or scalars.
  """
  if x is None:
    y_arr, = promote_dtypes_inexact(ensure_arraylike("trapezoid", y))
    dx_array = asarray(dx)
    if ndim_of(dx_array) > 0:
      dx_array = lax.expand_dims(dx_array, tuple(range(ndim_of(y_arr) - ndim_of(dx_array))))
      dx_array = moveaxis(dx_array, axis, -1)
  else:
    y_arr, x_arr = promote_dtypes_inexact(*ensure_arraylike("trapezoid", y, x))
    if ndim_of(x_arr) == 1:
      dx_array = diff(x_arr)
    else:
      dx_array = moveaxis(diff(x_arr, axis=axis), axis, -1)
  y_arr = moveaxis(y_arr, axis, -1)
  if ndim_of(dx_array) == 0 or shape_of(dx_array)[-1] == 1:   # dx constant along the axis
    dx_reduced = dx_array if ndim_of(dx_array) == 0 else dx_array[..., 0]
    return dx_reduced * (y_arr.sum(-1) - 0.5 * (y_arr[..., 0] + y_arr[..., -1]))
  return 0.5 * (dx_array * (y_arr[..., 1:] + y_arr[..., :-1])).sum(-1)


def unwrap(p: ArrayLike, discont: ArrayLike | None = None, axis: int = -1,
           period: ArrayLike = 2 * np.pi) -> Array:
  """`p` with jumps larger than `discont` (default period/2) along `axis` replaced by
  their `period`-complement.

  Raises:
    ValueError: for complex input.
  """
  p, period = (as_array(v) for v in promote_dtypes(p, period))
  if dtypes.is_complex(dtype_of(p)):
    raise ValueError("jnp.unwrap does not support complex inputs.")
  axis = canonicalize_axis(axis, ndim_of(p), "unwrap")
  n = shape_of(p)[axis]
  if n == 0:
    return p
  if discont is None:
    discont = divide(period, 2)
  interval = floor_divide(period, 2) if dtypes.is_integer(dtype_of(p)) else divide(period, 2)
  dd = diff(p, axis=axis)
  ddmod = subtract(remainder(add(dd, interval), period), interval)
  ddmod = where(logical_and(equal(ddmod, negative(interval)), greater(dd, 0)), interval, ddmod)
  fix = where(less(absolute(dd), discont), 0, subtract(ddmod, dd))
  return concatenate([slice_axis(p, 0, 1, axis),
                      add(slice_axis(p, 1, n, axis), reductions.cumsum(fix, axis=axis))], axis)


# ---------------------------------------------------------------------------
# Selection


def select(condlist: Sequence[ArrayLike], choicelist: Sequence[ArrayLike],
           default: ArrayLike = 0) -> Array:
  """Elementwise, the choice of the first true condition (`default` where none is): JAX's
  program, an `argmax` over the stacked conditions selecting among the choices (promoted
  with `default` to one dtype; all broadcast together).

  Raises:
    ValueError: for lists of different lengths or empty lists.
    TypeError: for entries that are not arrays or scalars.
  """
  if len(condlist) != len(choicelist):
    raise ValueError(f"condlist must have length equal to choicelist ({len(condlist)} vs "
                     f"{len(choicelist)})")
  if len(condlist) == 0:
    raise ValueError("condlist must be non-empty")
  check_arraylike("select", *condlist, *choicelist, default)
  conds = [asarray(c) for c in condlist]
  choices = [asarray(c) for c in choicelist]
  # As JAX's: the default first, under an all-False condition, so that the argmax of the
  # stacked conditions (0 where none holds) indexes the choices.
  choices = promote_dtypes(asarray(default), *choices)
  conditions = stack(broadcast_arrays(False, *conds))
  idx = reductions.argmax(astype(conditions, bool), axis=0)
  return lax.select_n(*broadcast_arrays(idx, *choices))


def choose(a: ArrayLike, choices: Sequence[ArrayLike], out: None = None,
           mode: str = "raise") -> Array:
  """`choices[a[i]][i]` elementwise (all broadcast together).

  Args:
    mode: 'raise' (indices must be in range; needs concrete `a`), 'wrap' or 'clip'.

  Raises:
    ValueError: for non-integer `a`, out-of-range entries (mode 'raise'), or a bad mode.
  """
  if out is not None:
    raise NotImplementedError("The 'out' argument to jnp.choose is not supported.")
  a = as_array(a)
  choices = [as_array(c) for c in choices]
  if not dtypes.is_integer(dtype_of(a)):
    raise ValueError("`a` array must be integer typed")
  n = len(choices)
  if mode == "raise":
    if isinstance(a, Tracer):
      raise a._concretization_error("choose", fix=(
          "The error occurred because jnp.choose was jit-compiled with mode='raise'. Use "
          "mode='wrap' or mode='clip' instead."))
    host = np.asarray(a)
    if ((host < 0) | (host >= n)).any():
      raise ValueError("invalid entry in choice array")
  elif mode == "wrap":
    a = remainder(a, n)
  elif mode == "clip":
    a = clip(a, 0, n - 1)
  else:
    raise ValueError(f"mode={mode!r} not understood. Must be 'raise', 'wrap', or 'clip'")
  a, *choices = broadcast_arrays(a, *promote_dtypes(*choices))
  return lax.select_n(lax.convert_element_type(a, dtypes.int32), *choices)


def piecewise(x: ArrayLike, condlist: Any, funclist: Sequence[Any], *args, **kw) -> Array:
  """`funclist[i](x, *args, **kw)` (or the constant `funclist[i]`) where `condlist[i]` is
  the first true condition; an extra last function is the default (else 0). As JAX's: the
  index of the first true condition per element, then a `switch` over the functions
  vectorized over the elements (jitted as `_piecewise`, the functions static).

  Args:
    x: array `T[*s]`.
    condlist: `n` boolean arrays of shape `s` (or one array `bool[n, *s]`).
    funclist: `n` or `n + 1` functions (elementwise `T -> T`) or constants.

  Returns:
    `T[*s]`.

  Raises:
    ValueError: for a wrong number of functions.
  """
  x_arr = ensure_arraylike("piecewise", x)
  nc, nf = len(condlist), len(funclist)
  if nf == nc + 1:
    funclist = list(funclist[-1:]) + list(funclist[:-1])
  elif nf == nc:
    funclist = [0] + list(funclist)
  else:
    raise ValueError(f"with {nc} condition(s), either {nc} or {nc + 1} functions are "
                     f"expected; got {nf}")
  consts = {i: c for i, c in enumerate(funclist) if not callable(c)}
  funcs = {i: f for i, f in enumerate(funclist) if callable(f)}
  return _piecewise(x_arr, asarray(condlist, dtype=bool), consts,
                    frozenset(funcs.items()), *args, **kw)


@jit(static_argnames=("funcs",))
def _piecewise(x, condlist, consts, funcs, *args, **kw):
  funcdict = dict(funcs)
  funclist = [consts.get(i, funcdict.get(i)) for i in range(len(condlist) + 1)]
  indices = reductions.argmax(reductions.cumsum(
      concatenate([zeros_like(condlist[:1]), condlist], 0), 0), 0)
  dtype = dtype_of(x)

  def call(f):
    return lambda v: astype(f(v, *args, **kw), dtype)

  def constant(c):
    return lambda v: array(c, dtype=dtype)
  branches = [call(f) if callable(f) else constant(f) for f in funclist]
  return vectorize(lax.switch, excluded=(1,))(indices, branches, x)


def compress(condition: ArrayLike, a: ArrayLike, axis: int | None = None, *,
             size: int | None = None, fill_value: ArrayLike = 0, out: None = None) -> Array:
  """The slices of `a` along `axis` (the flattened array when None) where the 1-D
  `condition` is true (a shorter condition counts as False past its end).

  Args:
    size: the static result length, at most the axis length (padded with `fill_value`, or
      truncated); required under jit.

  Raises:
    ValueError: for a condition that is not 1-D, or longer than the axis with a True entry
      past it (without `size`); a `size` negative or longer than the axis (JAX's message).
    ConcretizationTypeError: if traced without `size`.
  """
  if out is not None:
    raise NotImplementedError("The 'out' argument to jnp.compress is not supported.")
  cond = to_bool(as_array(condition))
  a = as_array(a)
  if ndim_of(cond) != 1:
    raise ValueError("condition must be a 1D array")
  if axis is None:
    a, axis = ravel(a), 0
  axis = canonicalize_axis(axis, ndim_of(a), "compress")
  n = shape_of(a)[axis]
  m = shape_of(cond)[0]
  # NB: as JAX's: a longer condition may hold only False past the axis (unless `size` is
  # given: then it is ignored); a shorter one truncates the axis.
  if m > n:
    extra = slice_axis(cond, n, m, 0)
    cond = slice_axis(cond, 0, n, 0)
    if size is None and bool(lax.reduce_or(extra, (0,))):
      raise ValueError("condition contains entries that are out of bounds")
  elif m < n:
    a = slice_axis(a, 0, m, axis)
    n = m
  if size is not None:
    size = operator.index(size)
    if not 0 <= size <= n:
      raise ValueError(f"size must be positive and not greater than the size of the array "
                       f"axis; got size={size} for a.shape[axis]={n}")
  count = lax.reduce_sum(lax.convert_element_type(cond, dtypes.int32), (0,))
  if size is None:
    if isinstance(count, Tracer):
      raise core.ConcretizationTypeError(
          "Abstract tracer value encountered where concrete value is expected: the result "
          "of jnp.compress has a data-dependent size; pass a static `size=`.")
    size = int(count)
  key = lax.convert_element_type(lax.bitwise_not(cond), dtypes.int32)
  _, pos = lax.sort((key, lax.iota(dtypes.int32, n)), dimension=0, num_keys=1)
  pos = slice_axis(pos, 0, builtins.min(size, n), 0)
  if size > n:
    pos = lax.pad(pos, np.int32(0), ((0, size - n, 0),))
  out_ = take_axis(a, pos, axis) if size else slice_axis(a, 0, 0, axis)
  valid = lax.lt(lax.iota(dtypes.int32, size), count)
  valid = lax.broadcast_in_dim(valid, shape_of(out_), (axis,))
  return where(valid, out_, lax.convert_element_type(as_array(fill_value), dtype_of(out_)))


def extract(condition: ArrayLike, arr: ArrayLike, *, size: int | None = None,
            fill_value: ArrayLike = 0) -> Array:
  """The elements of the flattened `arr` where the flattened `condition` is true (see
  `compress`)."""
  return compress(ravel(as_array(condition)), ravel(as_array(arr)), size=size,
                  fill_value=fill_value)


# ---------------------------------------------------------------------------
# Bit packing


def packbits(a: ArrayLike, axis: int | None = None, bitorder: str = "big") -> Array:
  """Packs the truth values of `a` into uint8 bytes along `axis` (flattened when None),
  zero-padding to a multiple of 8.

  Raises:
    TypeError: for non-integer/bool input. ValueError: for a bad `bitorder`.
  """
  arr = as_array(a)
  if not (dtypes.is_integer(dtype_of(arr)) or dtype_of(arr) == dtypes.bool_):
    raise TypeError("Expected an input array of integer or boolean data type")
  if bitorder not in ("little", "big"):
    raise ValueError("'order' must be either 'little' or 'big'")
  arr = lax.convert_element_type(to_bool(arr), dtypes.uint8)
  if axis is None:
    arr, axis = ravel(arr), 0
  arr = swapaxes(arr, axis, -1)
  rem = shape_of(arr)[-1] % 8
  if rem:
    arr = lax.pad(arr, np.uint8(0), [(0, 0, 0)] * (ndim_of(arr) - 1) + [(0, 8 - rem, 0)])
  arr = reshape(arr, shape_of(arr)[:-1] + (shape_of(arr)[-1] // 8, 8))
  bits = np.arange(8, dtype=np.uint8)[::-1 if bitorder == "big" else 1].copy()
  shifted = lax.shift_left(arr, lax.broadcast_in_dim(array(bits), shape_of(arr),
                                                     (ndim_of(arr) - 1,)))
  packed = lax.convert_element_type(lax.reduce_sum(lax.convert_element_type(
      shifted, dtypes.int32), (ndim_of(arr) - 1,)), dtypes.uint8)
  return swapaxes(packed, axis, -1)


def unpackbits(a: ArrayLike, axis: int | None = None, count: int | None = None,
               bitorder: str = "big") -> Array:
  """The bits of the uint8 array `a` as a uint8 array of 0s and 1s, along `axis`
  (flattened when None); `count` keeps (or zero-pads to) that many bits.

  Raises:
    TypeError: for non-uint8 input. ValueError: for a bad `bitorder`.
  """
  arr = as_array(a)
  if dtype_of(arr) != dtypes.uint8:
    raise TypeError("Expected an input array of unsigned byte data type")
  if bitorder not in ("little", "big"):
    raise ValueError("'order' must be either 'little' or 'big'")
  if axis is None:
    arr, axis = ravel(arr), 0
  arr = swapaxes(arr, axis, -1)
  bits = (np.uint8(1) << np.arange(8, dtype=np.uint8))[::-1 if bitorder == "big" else 1].copy()
  shape = (*shape_of(arr), 8)
  xb = lax.broadcast_in_dim(arr, shape, tuple(range(ndim_of(arr))))
  bb = lax.broadcast_in_dim(array(bits), shape, (ndim_of(arr),))
  out = lax.convert_element_type(lax.ne(lax.bitwise_and(xb, bb), np.uint8(0)), dtypes.uint8)
  out = reshape(out, shape[:-2] + (-1,))
  if count is not None:
    m = shape_of(out)[-1]
    if count > m:
      out = lax.pad(out, np.uint8(0), [(0, 0, 0)] * (ndim_of(out) - 1) + [(0, count - m, 0)])
    else:
      out = slice_axis(out, 0, count, ndim_of(out) - 1)
  return swapaxes(out, axis, -1)


# ---------------------------------------------------------------------------
# Printing


get_printoptions, printoptions, set_printoptions = (np.get_printoptions, np.printoptions,
                                                    np.set_printoptions)


def array_repr(arr: ArrayLike, max_line_width=None, precision=None, suppress_small=None):
  """NumPy's `array_repr` of the array's host value."""
  return np.array_repr(np.asarray(arr), max_line_width, precision, suppress_small)


def array_str(a: ArrayLike, max_line_width=None, precision=None, suppress_small=None):
  """NumPy's `array_str` of the array's host value."""
  return np.array_str(np.asarray(a), max_line_width, precision, suppress_small)


# ---------------------------------------------------------------------------
# Functional forms of NumPy's in-place writes


def _inplace_error(name: str):
  return ValueError(f"jax.numpy.{name} cannot modify arrays in-place, because JAX arrays"
                    f"{'' if name == 'put_along_axis' else ' '}are immutable. Pass "
                    f"inplace=False to instead return an updated array.")


def put_along_axis(arr: ArrayLike, indices: ArrayLike, values: ArrayLike, axis: int | None,
                   inplace: bool = True, *, mode: str | None = None) -> Array:
  """`arr` with `values` written at `indices` along `axis` (the functional form of
  `numpy.put_along_axis`; the writes of `take_along_axis`'s reads).

  Args:
    arr: array `T[*s]`.
    indices: integer array of the rank of `arr` (1-D when `axis` is None), broadcast against
      `arr` on the other axes.
    values: values broadcast to the indexed shape (converted to T).
    axis: the axis; None writes into the flattened `arr`.
    inplace: must be False (Arrays are immutable).
    mode: out-of-bounds handling, as `x.at[...].set(mode=...)`.

  Returns:
    `T[*s]`; for repeated indices one of the writes wins.

  Raises:
    ValueError: `inplace` is True; ranks differ; `axis` is None and `indices` is not 1-D.
  """
  if inplace:
    raise _inplace_error("put_along_axis")
  a = asarray(arr)
  indices = asarray(indices)
  shape = shape_of(a)
  if axis is None:
    if ndim_of(indices) != 1:
      raise ValueError(f"put_along_axis indices must be 1D if axis=None, got shape "
                       f"{shape_of(indices)}")
    return reshape(at(ravel(a))[indices].set(values, mode=mode), shape)
  if ndim_of(indices) != len(shape):
    raise ValueError(f"indices and arr must have the same number of dimensions; "
                     f"{ndim_of(indices)} vs. {len(shape)}")
  axis = canonicalize_axis(axis, len(shape), "put_along_axis")
  idx = []
  for d, n in enumerate(shape):
    if d == axis:
      idx.append(indices)
    else:
      grid = (1,) * d + (n,) + (1,) * (len(shape) - d - 1)
      idx.append(reshape(arange(n), grid))
  return at(a)[tuple(idx)].set(values, mode=mode)


def place(arr: ArrayLike, mask: ArrayLike, vals: ArrayLike, *, inplace: bool = True) -> Array:
  """`arr` with its entries where `mask` is True replaced, in order, by `vals` (repeated
  cyclically when shorter), as `numpy.place`; traceable (the k-th True entry takes
  `vals[k % len(vals)]`).

  Args:
    arr: array `T[*s]`.
    mask: bool array of `arr`'s size.
    vals: the values (flattened; converted to T).
    inplace: must be False (Arrays are immutable).

  Returns:
    `T[*s]`.

  Raises:
    ValueError: `inplace` is True, or the sizes of `mask` and `arr` differ.
  """
  if inplace:
    raise _inplace_error("place")
  a = asarray(arr)
  m = ravel(to_bool(asarray(mask)))
  if shape_of(m)[0] != math.prod(shape_of(a)):
    raise ValueError(f"place: mask and data must be the same size, got mask of size "
                     f"{shape_of(m)[0]} and arr of size {math.prod(shape_of(a))}")
  v = ravel(asarray(vals))
  n = shape_of(v)[0]
  if n == 0:
    return a
  k = lax.sub(reductions.cumsum(m, dtype=dtypes.default_int_dtype()),
              np.ones((), dtypes.default_int_dtype())[()])
  picked = take_axis(lax.convert_element_type(v, dtype_of(a)),
                     remainder(k, np.asarray(n, dtypes.default_int_dtype())[()]), 0)
  return reshape(where(m, picked, ravel(a)), shape_of(a))
