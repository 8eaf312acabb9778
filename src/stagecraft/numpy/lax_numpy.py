"""The rest of the NumPy surface, composed from the modules below it (`ufuncs`, `manipulation`,
`reductions`, `sorting` and the gathers of `indexing`), as in JAX's `lax_numpy`: dtype functions
and constants; ranges and index grids computed in the graph; manipulation that computes
(`roll`, `repeat`, `pad`, `insert`, `delete`, `fill_diagonal`, `trace`); differences and
integrals; selection (`select`, `choose`, `piecewise`, `compress`); bit packing; printing."""
from __future__ import annotations

import builtins
import math
import operator
import warnings
from typing import Any, Sequence

import ml_dtypes
import numpy as np

from stagecraft import core, dtypes, lax
from stagecraft.core import Tracer
from stagecraft.numpy import reductions, scalar_types, sorting
from stagecraft.numpy.array_constructors import array, asarray
from stagecraft.numpy.array_creation import (arange, empty, eye, full, full_like, placed, zeros,
                                             zeros_like)
from stagecraft.numpy.indexing import at, take_axis
from stagecraft.numpy.manipulation import (broadcast_arrays, broadcast_shapes, broadcast_to,
                                           concatenate, flip, moveaxis,
                                           ravel, reshape, squeeze, stack, swapaxes, tile)
from stagecraft.numpy.ufuncs import (absolute, add, clip, divide, equal, floor, floor_divide,
                                     greater, less, log10, logical_and, minimum, multiply, negative,
                                     not_equal, power, remainder, round, sign, subtract, where)
from stagecraft.numpy.util import (ArrayLike, as_array, asarray_or_scalar, axis_tuple,
                                   canonicalize_axis, check_concrete, const,
                                   dtype_of, ensure_arraylike, ndim_of, promote_dtypes,
                                   promote_dtypes_inexact, real_dtype, shape_of, slice_axis,
                                   to_bool, to_inexact_dtype)
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


def astype(x: ArrayLike, dtype: Any, /, *, copy: bool = False) -> Array:
  """`x` converted to `dtype` (canonicalized).

  Warns:
    DeprecationWarning: casting complex `x` to a real dtype other than bool (JAX's warning:
      such casts will become an error); take `real(x)` or `imag(x)` first. Complex to bool
      tests both parts for nonzero, silently.
  """
  x = asarray(x)
  dtype = dtypes.canonicalize_dtype(dtype)
  if dtypes.is_complex(dtype_of(x)) and not dtypes.is_complex(dtype):
    if dtype != dtypes.bool_:
      warnings.warn("Casting from complex to real dtypes will soon raise a ValueError. Please "
                    "first use jnp.real or jnp.imag to take the real/imaginary component of "
                    "your input.", DeprecationWarning, stacklevel=2)
    else:
      return lax.ne(x, np.zeros((), dtype_of(x))[()])
  with warnings.catch_warnings():   # the DeprecationWarning above replaces lax's warning
    warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
    return lax.convert_element_type(x, dtype)


def iscomplexobj(x) -> bool:
  """Whether `x` has a complex dtype."""
  return dtypes.is_complex(dtype_of(asarray_or_scalar(x)))


def isrealobj(x) -> bool:
  """Whether `x` has a non-complex dtype."""
  return not iscomplexobj(x)


def isscalar(element: Any) -> bool:
  """Whether `element` is a scalar: a Python/NumPy scalar or a 0-d array."""
  if isinstance(element, (Array, Tracer, np.ndarray, np.generic)):
    return np.ndim(element) == 0 if not isinstance(element, Tracer) else ndim_of(element) == 0
  return dtypes.is_python_scalar(element)


# The Python scalar types as weakly typed values: `result_type(int, np.uint8)` is uint8, as
# in JAX (the type `int` promotes as a Python int does).
_PYTHON_TYPE_VALUES = {int: 0, float: 0.0, complex: 0j, bool: False}


def result_type(*args) -> np.dtype:
  """The dtype JAX-style promotion gives `args` (see `stagecraft.dtypes.result_type`); the
  Python types `int`, `float` and `complex` are weakly typed, as their values are."""
  return dtypes.result_type(*(_PYTHON_TYPE_VALUES.get(a, a) if isinstance(a, type) else a
                              for a in args))


def promote_types(a, b) -> np.dtype:
  """The dtype two dtypes promote to (JAX's lattice)."""
  return dtypes.promote_types(a, b)


def can_cast(from_, to, casting: str = "safe") -> bool:
  """NumPy's `can_cast` on dtypes (a dtype, scalar type, array or Array `from_`)."""
  if isinstance(from_, type) or not hasattr(from_, "dtype"):   # np.int32, 'float32', ...
    from_ = np.dtype(from_)
  else:
    from_ = np.dtype(from_.dtype)
  return np.can_cast(from_, np.dtype(to), casting)


def _issubdtype_arg(x):
  """An abstract NumPy scalar class (np.floating...) as itself, anything else as a dtype."""
  if isinstance(x, type) and issubclass(x, np.generic) and x in _ABSTRACT_SCALARS:
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
  num = operator.index(check_concrete(num, "linspace", "num"))
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
        else dtypes.canonicalize_dtype(dtype))
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
        else dtypes.canonicalize_dtype(dtype))
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
        else dtypes.canonicalize_dtype(dtype))
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
  dt = dtypes.default_int_dtype() if dtype is None else dtypes.canonicalize_dtype(dtype)
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
  """`function(*indices(shape, dtype))`: the function is called once on the index grids."""
  return function(*indices(shape, dtype=dtype), **kwargs)


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
  arr = ensure_arraylike("roll", a)
  if axis is None:
    return reshape(roll(ravel(arr), shift, 0), shape_of(arr))
  axis = tuple(canonicalize_axis(ax, ndim_of(arr), "roll") for ax in _index_tuple(axis))
  try:
    shift = _index_tuple(shift)
  except TypeError:
    return _roll_dynamic(arr, asarray(shift), axis)
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
    n = asarray(shape_of(a)[i], dtypes.int32)
    x = remainder(lax.convert_element_type(x, dtypes.int32), lax.max(n, np.int32(1)))
    doubled = lax.concatenate([a, a], i)
    a = lax.dynamic_slice_in_dim(doubled, lax.sub(n, x), shape_of(a)[i], axis=i)
  return a


def repeat(a: ArrayLike, repeats: ArrayLike, axis: int | None = None, *,
           total_repeat_length: int | None = None) -> Array:
  """Repeats each element of `a` along `axis` (the flattened array when None).

  Args:
    a: array `T[*s]`.
    repeats: an int, or ints (one per element along `axis`, or one broadcast); concrete
      unless `total_repeat_length` is given.
    total_repeat_length: the static length of the result along `axis`; needed when
      `repeats` is traced (extra output is padded with the last value, shortfalls are cut,
      as JAX's numpy).

  Returns:
    `T[*s]` with `s[axis]` replaced by the total number of repeats.

  Raises:
    ConcretizationTypeError: for traced `repeats` without `total_repeat_length`.
    ValueError: for negative repeats or a count that does not match the axis.
  """
  a = as_array(a)
  if axis is None:
    a, axis = ravel(a), 0
  if ndim_of(a) == 0:
    a = reshape(a, (1,))
  axis = canonicalize_axis(axis, ndim_of(a), "repeat")
  n = shape_of(a)[axis]
  if isinstance(repeats, Tracer):
    if total_repeat_length is None:
      raise core.ConcretizationTypeError(
          "Abstract tracer value encountered where concrete value is expected: jnp.repeat "
          "needs static `repeats` to know the result's shape. Pass a static value for "
          "`repeats`, or a static `total_repeat_length`.")
    reps = broadcast_to(ravel(repeats), (n,))
    ends = reductions.cumsum(reps)
    idx = sorting.searchsorted(ends, arange(total_repeat_length), side="right")
    idx = minimum(idx, n - 1)
    return take_axis(a, idx, axis)
  reps = np.ravel(np.asarray(repeats))
  if reps.size and not np.issubdtype(reps.dtype, np.integer):
    raise TypeError(f"repeat: repeats must be integers, got {reps.dtype}.")
  if np.any(reps < 0):
    raise ValueError(f"repeat: repeats may not contain negative values, got {repeats}.")
  if reps.size == 1:
    r = int(reps[0])
    shape = list(shape_of(a))
    big = shape[:axis + 1] + [r] + shape[axis + 1:]
    dims = tuple(i for i in range(len(big)) if i != axis + 1)
    out = reshape(lax.broadcast_in_dim(a, tuple(big), dims),
                  tuple(shape[:axis] + [n * r] + shape[axis + 1:]))
  else:
    if reps.size != n:
      raise ValueError(f"repeat: got {reps.size} repeats for an axis of length {n}.")
    idx = np.repeat(np.arange(n), reps)
    out = _take_static(a, idx, axis)
  if total_repeat_length is not None:
    cur = shape_of(out)[axis]
    if cur >= total_repeat_length:
      out = slice_axis(out, 0, total_repeat_length, axis)
    elif cur:
      last = slice_axis(out, cur - 1, cur, axis)
      out = concatenate([out, repeat(last, total_repeat_length - cur, axis)], axis)
    else:
      out = zeros(tuple(total_repeat_length if i == axis else d
                        for i, d in enumerate(shape_of(out))), dtype_of(out))
  return out


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


def _pad_pairs(pad_width, nd: int, name: str) -> tuple[tuple[int, int], ...]:
  pw = np.asarray(pad_width)
  if pw.dtype.kind not in "iu" and pw.size:
    raise TypeError(f"`{name}` must be of integral type, got {pw.dtype}.")
  try:
    pw = np.broadcast_to(pw, (nd, 2))
  except ValueError:
    raise ValueError(f"jnp.pad: {name} {pad_width!r} cannot be broadcast to ({nd}, 2) "
                     f"(one (before, after) pair per axis).") from None
  return tuple((int(a), int(b)) for a, b in pw)


def pad(array: ArrayLike, pad_width: Any, mode: str = "constant", **kwargs) -> Array:
  """Pads an array, as numpy.pad.

  Args:
    array: array `T[*s]`.
    pad_width: `(before, after)` per axis, one pair for all axes, or one int; static,
      non-negative.
    mode: 'constant' (`constant_values`: scalar, pair, or pairs per axis), 'edge',
      'reflect' / 'symmetric' (`reflect_type` 'even' or 'odd'), 'wrap', 'linear_ramp'
      (`end_values`), 'maximum' / 'minimum' / 'mean' (`stat_length`), or 'empty'.

  Returns:
    `T[*r]` with `r[i] = s[i] + before[i] + after[i]`.

  Raises:
    ValueError: for negative widths, an unknown mode, padding an empty axis in a mode
      that reads from it, or a rank-0 array with a `pad_width` not of shape (0, 2), (1, 2),
      (2,), (1,) or () (as JAX).
    NotImplementedError: for a callable mode.
  """
  arr = as_array(array)
  nd = ndim_of(arr)
  if callable(mode):
    raise NotImplementedError("jnp.pad with a callable mode is not supported.")
  allowed = {"constant": {"constant_values"}, "edge": set(), "wrap": set(), "empty": set(),
             "reflect": {"reflect_type"}, "symmetric": {"reflect_type"},
             "linear_ramp": {"end_values"}, "maximum": {"stat_length"},
             "minimum": {"stat_length"}, "mean": {"stat_length"}}
  if mode not in allowed:
    raise ValueError(f"Unimplemented padding mode '{mode}' for np.pad.")
  bad = set(kwargs) - allowed[mode]
  if bad:
    raise ValueError(f"unsupported keyword arguments for mode '{mode}': {sorted(bad)}")
  if nd == 0:
    shape = np.shape(pad_width)
    if shape not in ((0, 2), (1, 2), (2,), (1,), ()):   # JAX's check (NumPy's shapes)
      raise ValueError(f"jnp.pad: pad_width with nd=0 has unsupported shape {shape}. Valid "
                       f"shapes are (0, 2), (1, 2), (2,), (1,), or ().")
    return arr
  widths = _pad_pairs(pad_width, nd, "pad_width")
  if builtins.any(w < 0 for p in widths for w in p):
    raise ValueError("index can't contain negative values")
  if mode == "constant":
    return _pad_constant(arr, widths, kwargs.get("constant_values", 0))
  if mode == "empty":
    return _pad_constant(arr, widths, 0)
  for i in range(nd):
    before, after = widths[i]
    if before == 0 and after == 0:
      continue
    if shape_of(arr)[i] == 0:
      raise ValueError(f"Cannot apply '{mode}' padding to empty axis")
    if mode == "wrap":
      arr = _pad_wrap(arr, i, before, after)
    elif mode in ("reflect", "symmetric"):
      rt = kwargs.get("reflect_type", "even")
      if rt not in ("even", "odd"):
        raise ValueError(f"reflect_type must be 'even' or 'odd', got {rt!r}.")
      arr = _pad_reflect(arr, i, before, after, mode, rt)
    else:
      arr = _pad_from_edges(arr, i, before, after, mode, kwargs)
  return arr


def _pad_constant(arr, widths, constant_values):
  cv = as_array(constant_values)
  cv = lax.convert_element_type(cv, dtype_of(arr), weak_type=arr.weak_type)
  nd = ndim_of(arr)
  if ndim_of(cv) == 0:
    return lax.pad(arr, cv, tuple((lo, hi, 0) for lo, hi in widths))
  if ndim_of(cv) > 2 or shape_of(cv)[-1] not in (1, 2):
    raise ValueError(f"jnp.pad: constant_values has unsupported shape {shape_of(cv)}. If the "
                     f"shape is 1D or 2D, the last dimension must be of size 1 or 2.")
  cv = broadcast_to(cv, (nd, 2))
  for i, (lo, hi) in enumerate(widths):
    for side, w in ((0, lo), (1, hi)):
      if w:
        cfg = [(0, 0, 0)] * nd
        cfg[i] = (w, 0, 0) if side == 0 else (0, w, 0)
        arr = lax.pad(arr, reshape(cv[i, side], ()), tuple(cfg))
  return arr


def _pad_wrap(arr, i, before, after):
  n = shape_of(arr)[i]
  lrep, lrem = builtins.divmod(before, n)
  rrep, rrem = builtins.divmod(after, n)
  parts = ([slice_axis(arr, n - lrem, n, i)] if lrem else []) + [arr] * (lrep + rrep + 1) + (
      [slice_axis(arr, 0, rrem, i)] if rrem else [])
  return lax.concatenate(parts, i) if len(parts) > 1 else arr


def _pad_reflect(arr, i, before, after, mode, reflect_type):
  # As numpy: pad in chunks no longer than the (growing) array allows.
  n = shape_of(arr)[i]
  offset = 1 if (mode == "reflect" and n > 1) else 0
  for is_before, padding in ((True, before), (False, after)):
    m = shape_of(arr)[i]
    edge = slice_axis(arr, 0, 1, i) if is_before else slice_axis(arr, m - 1, m, i)
    while padding > 0:
      m = shape_of(arr)[i]
      cur = builtins.min(padding, n - offset)
      padding -= cur
      if is_before:
        x = slice_axis(arr, offset, offset + cur, i)
      else:
        stop = m if (mode == "symmetric" or n == 1) else m - 1
        x = slice_axis(arr, stop - cur, stop, i)
      x = flip(x, i)
      if reflect_type == "odd":
        x = subtract(multiply(const(edge, 2), edge), x)
        if n > 1:
          k = shape_of(x)[i]
          edge = slice_axis(x, 0, 1, i) if is_before else slice_axis(x, k - 1, k, i)
      arr = lax.concatenate([x, arr] if is_before else [arr, x], i)
  return arr


def _pad_from_edges(arr, i, before, after, mode, kwargs):
  n = shape_of(arr)[i]
  nd = ndim_of(arr)
  if mode == "edge":
    lo_v, hi_v = slice_axis(arr, 0, 1, i), slice_axis(arr, n - 1, n, i)
  elif mode == "linear_ramp":
    # As numpy: linspace(end, edge, w, endpoint=False) before, and its reverse after.
    ev = np.broadcast_to(np.asarray(kwargs.get("end_values", 0)), (nd, 2))
    calc = to_inexact_dtype(dtype_of(arr))
    out = []
    for is_before, w in ((True, before), (False, after)):
      edge = astype(slice_axis(arr, 0, 1, i) if is_before else slice_axis(arr, n - 1, n, i),
                    calc)
      end = asarray(ev[i][0 if is_before else 1], calc)
      shape = tuple(w if j == i else d for j, d in enumerate(shape_of(edge)))
      t = divide(lax.broadcasted_iota(calc, shape, i), np.asarray(builtins.max(w, 1), calc))
      ramp = add(end, multiply(t, subtract(edge, end)))
      ramp = ramp if is_before else flip(ramp, i)
      if not dtypes.is_inexact(dtype_of(arr)):
        ramp = floor(ramp)
      out.append(lax.convert_element_type(ramp, dtype_of(arr), weak_type=arr.weak_type))
    return lax.concatenate([out[0], arr, out[1]], i)
  else:
    fn = {"maximum": reductions.max, "minimum": reductions.min, "mean": reductions.mean}[mode]
    sl = kwargs.get("stat_length")
    if sl is None:
      lo_v = hi_v = fn(arr, axis=i, keepdims=True)
    else:
      lb, la = _pad_pairs(sl, nd, "stat_length")[i]
      if lb == 0 or la == 0:
        raise ValueError("stat_length of 0 yields no value for padding")
      lo_v = fn(slice_axis(arr, 0, builtins.min(lb, n), i), axis=i, keepdims=True)
      hi_v = fn(slice_axis(arr, n - builtins.min(la, n), n, i), axis=i, keepdims=True)
    if dtypes.is_integer(dtype_of(arr)):
      lo_v, hi_v = round(lo_v), round(hi_v)
    lo_v = lax.convert_element_type(lo_v, dtype_of(arr), weak_type=arr.weak_type)
    hi_v = lax.convert_element_type(hi_v, dtype_of(arr), weak_type=arr.weak_type)
  parts = []
  if before:
    parts.append(repeat(lo_v, before, i))
  parts.append(arr)
  if after:
    parts.append(repeat(hi_v, after, i))
  return lax.concatenate(parts, i)


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
  """`arr` without the entries at the static index/indices/slice `obj` along `axis` (the
  flattened array when None).

  Raises:
    IndexError: for out-of-range indices. ConcretizationTypeError: for traced `obj`.
  """
  a = as_array(arr)
  if axis is None:
    a, axis = ravel(a), 0
  axis = canonicalize_axis(axis, ndim_of(a), "delete")
  n = shape_of(a)[axis]
  idx = _static_positions(obj, n, "delete").astype(np.int64).ravel()
  if idx.size and (idx.min() < -n or idx.max() >= n):
    raise IndexError(f"index {idx[(idx < -n) | (idx >= n)][0]} is out of bounds for axis "
                     f"{axis} with size {n}")
  keep = np.ones(n, bool)
  keep[idx % n if n else idx] = False
  return _take_static(a, np.flatnonzero(keep), axis)


def insert(arr: ArrayLike, obj: Any, values: ArrayLike, axis: int | None = None) -> Array:
  """`values` inserted before the static index/indices `obj` along `axis` (numpy.insert;
  the flattened array when `axis` is None); `values` are cast to arr's dtype.

  Raises:
    IndexError: for out-of-range indices. ConcretizationTypeError: for traced `obj`.
  """
  a = as_array(arr)
  if axis is None:
    a, axis = ravel(a), 0
  axis = canonicalize_axis(axis, ndim_of(a), "insert")
  n = shape_of(a)[axis]
  idx = _static_positions(obj, n, "insert").astype(np.int64)
  vals = lax.convert_element_type(as_array(values), dtype_of(a), weak_type=a.weak_type)
  if ndim_of(vals) < ndim_of(a):
    vals = reshape(vals, (1,) * (ndim_of(a) - ndim_of(vals)) + shape_of(vals))
  if idx.ndim == 0:
    i = int(idx)
    if not -n <= i <= n:
      raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
    i = i + n if i < 0 else i
    vals = moveaxis(vals, 0, axis)
    shape = tuple(shape_of(vals)[axis] if k == axis else d for k, d in enumerate(shape_of(a)))
    vals = broadcast_to(vals, shape)
    return concatenate([slice_axis(a, 0, i, axis), vals, slice_axis(a, i, n, axis)], axis)
  idx = idx.ravel()
  if idx.size and (idx.min() < -n or idx.max() > n):
    raise IndexError(f"index {idx[(idx < -n) | (idx > n)][0]} is out of bounds for axis "
                     f"{axis} with size {n}")
  idx = np.where(idx < 0, idx + n, idx)
  k = idx.size
  shape = tuple(k if j == axis else d for j, d in enumerate(shape_of(a)))
  vals = broadcast_to(vals, shape)
  order = np.argsort(idx, kind="stable")
  new_pos = np.empty(k, np.int64)
  new_pos[order] = idx[order] + np.arange(k)
  is_new = np.zeros(n + k, bool)
  is_new[new_pos] = True
  source = np.empty(n + k, np.int64)
  source[~is_new] = np.arange(n)
  source[new_pos] = n + np.arange(k)
  return _take_static(concatenate([a, vals], axis), source, axis)


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

  Algorithm: one gather of the points `(i, i + offset)` (`a[..., i, j]` with `i`, `j`
  aranges), as JAX's default (non-Mosaic) path.
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
  a = moveaxis(a, (ax1, ax2), (-2, -1))
  d = builtins.max(0, builtins.min(s[ax1] + builtins.min(offset, 0),
                                   s[ax2] - builtins.max(offset, 0)))
  i = arange(d)
  j = arange(builtins.abs(offset), builtins.abs(offset) + d)
  return a[..., i, j] if offset >= 0 else a[..., j, i]


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
    dtype = dtypes.canonicalize_dtype(dtype)
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
  result = lax.sub(slice_axis(arr, 1, m, 0), slice_axis(arr, 0, builtins.max(m - 1, 0), 0))
  if to_begin is not None:
    result = concatenate([ravel(astype(as_array(to_begin), dtype_of(arr))), result])
  if to_end is not None:
    result = concatenate([result, ravel(astype(as_array(to_end), dtype_of(arr)))])
  return result


def gradient(f: ArrayLike, *varargs: ArrayLike, axis: int | Sequence[int] | None = None,
             edge_order: int | None = None):
  """The gradient of sampled `f` by central differences (one-sided at the edges), with
  scalar spacings or 1-D coordinates per axis; one array per axis (a single array for one
  axis).

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
      upper, lower = divide(upper, h), divide(lower, h)
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


def trapezoid(y: ArrayLike, x: ArrayLike | None = None, dx: ArrayLike = 1.0,
              axis: int = -1) -> Array:
  """The integral of `y` along `axis` by the trapezoidal rule (sample points `x`, else
  spacing `dx`)."""
  if x is None:
    y, = (as_array(v) for v in promote_dtypes_inexact(y))
    d = as_array(dx)
    if ndim_of(d) > 0:
      d = moveaxis(reshape(d, (1,) * (ndim_of(y) - ndim_of(d)) + shape_of(d)), axis, -1)
  else:
    y, x = (as_array(v) for v in promote_dtypes_inexact(y, x))
    d = diff(x) if ndim_of(x) == 1 else moveaxis(diff(x, axis=axis), axis, -1)
  y = moveaxis(y, axis, -1)
  m = shape_of(y)[-1]
  if ndim_of(d) == 0 or shape_of(d)[-1] == 1:
    d0 = d if ndim_of(d) == 0 else d[..., 0]
    ends = add(slice_axis(y, 0, 1, ndim_of(y) - 1), slice_axis(y, m - 1, m, ndim_of(y) - 1))
    return multiply(d0, subtract(reductions.sum(y, -1), multiply(0.5, squeeze(ends, -1))))
  mid = add(slice_axis(y, 1, m, ndim_of(y) - 1), slice_axis(y, 0, m - 1, ndim_of(y) - 1))
  return multiply(0.5, reductions.sum(multiply(d, mid), -1))


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
  """Elementwise, the choice of the first true condition (`default` where none is).

  Raises:
    ValueError: for lists of different lengths or empty lists.
  """
  if len(condlist) != len(choicelist):
    raise ValueError(f"condlist must have length equal to choicelist ({len(condlist)} vs "
                     f"{len(choicelist)})")
  if len(condlist) == 0:
    raise ValueError("condlist must be non-empty")
  choices = [as_array(c) for c in promote_dtypes(as_array(default),
                                                 *[as_array(c) for c in choicelist])]
  conds = [to_bool(as_array(c)) for c in condlist]
  out = choices[0]
  for c, v in zip(conds[::-1], choices[:0:-1]):
    out = where(c, v, out)
  return as_array(out)


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
      raise core.ConcretizationTypeError(
          "Abstract tracer value encountered where concrete value is expected: jnp.choose "
          "was jit-compiled with mode='raise'. Use mode='wrap' or mode='clip' instead.")
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
  """`funclist[i](x)` (or the constant `funclist[i]`) where `condlist[i]` is the first true
  condition; an extra last function is the default (else 0).

  NB: every function is evaluated on the whole array and the results are selected
  (JAX's numpy maps lax.switch over the elements); functions must be elementwise.

  Raises:
    ValueError: for a wrong number of functions.
  """
  x = as_array(x)
  conds = condlist if isinstance(condlist, (list, tuple)) else [condlist]
  if isinstance(condlist, (Array, Tracer, np.ndarray)) and ndim_of(condlist) == ndim_of(x) + 1:
    conds = [condlist[i] for i in range(shape_of(condlist)[0])]
  nc, nf = len(conds), len(funclist)
  if nf == nc + 1:
    funcs = list(funclist[-1:]) + list(funclist[:-1])
  elif nf == nc:
    funcs = [0] + list(funclist)
  else:
    raise ValueError(f"with {nc} condition(s), either {nc} or {nc + 1} functions are "
                     f"expected; got {nf}")
  dt = dtype_of(x)
  vals = [lax.convert_element_type(as_array(f(x, *args, **kw)) if callable(f) else full_like(x, f),
                                   dt) for f in funcs]
  vals = [broadcast_to(v, shape_of(x)) for v in vals]
  out = vals[0]
  for c, v in zip(conds[::-1], vals[:0:-1]):
    out = lax.select(broadcast_to(to_bool(as_array(c)), shape_of(x)), v, out)
  return out


def compress(condition: ArrayLike, a: ArrayLike, axis: int | None = None, *,
             size: int | None = None, fill_value: ArrayLike = 0, out: None = None) -> Array:
  """The slices of `a` along `axis` (the flattened array when None) where the 1-D
  `condition` is true (a shorter condition counts as False past its end).

  Args:
    size: the static result length (padded with `fill_value`, or truncated); required
      under jit.

  Raises:
    ValueError: for a condition that is not 1-D or longer than the axis.
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
  if m > n:
    raise ValueError(f"condition contains entries that are out of bounds along axis {axis}")
  if m < n:
    cond = concatenate([cond, zeros((n - m,), dtypes.bool_)])
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
