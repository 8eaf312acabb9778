"""The NumPy API on stagecraft primitives: creation, promotion and broadcasting, ufuncs, shape
manipulation. Semantics, default dtypes and promotion follow JAX's `numpy`; this module composes
primitives and registers no rules."""
from __future__ import annotations

import builtins
import functools
import math
import operator
from typing import Any, Sequence

import numpy as np

from stagecraft import core, dtypes, lax
from stagecraft.core import Tracer
from stagecraft.custom_derivatives import SymbolicZero, custom_jvp
from stagecraft.runtime import dispatch
from stagecraft.runtime.array import Array

ArrayLike = Any
_py_scalar = dtypes._python_scalar_kind

# ---------------------------------------------------------------------------
# Helpers: dtypes, promotion, broadcasting


def _dtype(x) -> np.dtype:
  if type(x) in _py_scalar:
    return dtypes.python_scalar_dtype(type(x))
  return core.get_aval(x).dtype


def _shape(x) -> tuple[int, ...]:
  if type(x) in _py_scalar:
    return ()
  return core.get_aval(x).shape


def _is_weak(x) -> bool:
  return dtypes.is_weakly_typed(x)


def asarray_or_scalar(x):
  """Lists and tuples become Arrays; arrays, tracers and scalars pass through."""
  if isinstance(x, (list, tuple)):
    return array(x)
  return x


def _convert(x, dtype: np.dtype, weak: bool):
  if type(x) in _py_scalar:
    v = np.asarray(x, dtype)[()]
    return lax.utils.weak_scalar(v) if weak or type(x) is not bool else v
  aval = core.get_aval(x)
  if aval.dtype == dtype and aval.weak_type == weak:
    return x
  return lax.convert_element_type(x, dtype, weak_type=weak)


def promote_dtypes(*args):
  """Converts `args` to their common dtype under JAX's promotion rules."""
  args = [asarray_or_scalar(a) for a in args]
  if len(args) < 2:
    return args
  dtype, weak = dtypes.result_type(*args, return_weak_type_flag=True)
  return [_convert(a, dtype, weak) for a in args]


def promote_dtypes_inexact(*args):
  """Promotes, then converts integer/bool results to the default float (weak if weak)."""
  args = [asarray_or_scalar(a) for a in args]
  dtype, weak = dtypes.result_type(*args, return_weak_type_flag=True)
  if not dtypes.is_inexact(dtype):
    dtype = dtypes.default_float_dtype()
  return [_convert(a, dtype, weak) for a in args]


def promote_dtypes_numeric(*args):
  """Promotes, then converts a bool result to the default integer dtype."""
  args = [asarray_or_scalar(a) for a in args]
  dtype, weak = dtypes.result_type(*args, return_weak_type_flag=True)
  if dtype == dtypes.bool_:
    dtype = dtypes.default_int_dtype()
  return [_convert(a, dtype, weak) for a in args]


def broadcast_shapes(*shapes) -> tuple[int, ...]:
  """NumPy broadcasting of shapes. Raises ValueError naming the shapes."""
  try:
    return tuple(np.broadcast_shapes(*shapes))
  except ValueError:
    raise ValueError(f"Incompatible shapes for broadcasting: {', '.join(map(str, shapes))}."
                     ) from None


def _broadcast_to(x, shape):
  s = _shape(x)
  if s == tuple(shape):
    return x
  if len(s) > len(shape):
    raise ValueError(f"Cannot broadcast an array of shape {s} to the lower-rank shape {shape}.")
  dims = tuple(range(len(shape) - len(s), len(shape)))
  for d, od in zip(s, (shape[i] for i in dims)):
    if d != 1 and d != od:
      raise ValueError(f"Incompatible shapes for broadcasting: {s} and requested shape "
                       f"{tuple(shape)}.")
  if type(x) in _py_scalar:
    x = array(x)
  # size-1 dims are squeezed away first: broadcast_in_dim needs operand dims == or 1.
  return lax.broadcast_in_dim(x, tuple(shape), dims)


def _promote_shapes(*args):
  shapes = [_shape(a) for a in args]
  nonscalar = [s for s in shapes if s != ()]
  if len(set(nonscalar)) <= 1:
    return list(args)       # equal shapes, or rank-0 operands: lax broadcasts those
  shape = broadcast_shapes(*shapes)
  return [a if s == () else _broadcast_to(a, shape) for a, s in zip(args, shapes)]


def _needs_promotion(promote, dtype) -> bool:
  """Whether a lone operand of `dtype` must still be converted by `promote`."""
  if promote is promote_dtypes:
    return False
  if promote is promote_dtypes_inexact:
    return not dtypes.is_inexact(dtype)
  return dtype == dtypes.bool_   # promote_dtypes_numeric


def _scalar_fits(t: type, dtype) -> bool:
  """A Python scalar of type `t` meeting an array of `dtype` keeps `dtype` (JAX's weak
  typing), so lax can take the scalar as it is."""
  if t is float:
    return dtypes.is_inexact(dtype)
  if t is int:
    return dtypes.is_inexact(dtype) or dtypes.is_integer(dtype)
  if t is complex:
    return dtypes.is_complex(dtype)
  return False


def _binary_ufunc(name: str, lax_fn, promote=promote_dtypes, doc: str = "", bool_fn=None):
  def fn(x: ArrayLike, y: ArrayLike, /):
    # Fast paths: operands that already agree in shape, dtype and weak type, or an array
    # with a Python scalar it absorbs, need neither promotion nor broadcasting.
    ax, ay = getattr(x, "aval", None), getattr(y, "aval", None)
    if ax is not None:
      dt = ax.dtype
      if ay is not None:
        fast = (dt == ay.dtype and ax.shape == ay.shape and ax.weak_type == ay.weak_type)
      else:
        fast = _scalar_fits(type(y), dt)
    elif ay is not None:
      dt = ay.dtype
      fast = _scalar_fits(type(x), dt)
    else:
      fast = False
    if fast and not _needs_promotion(promote, dt):
      return (bool_fn or lax_fn)(x, y) if dt == dtypes.bool_ else lax_fn(x, y)
    x, y = promote(x, y)
    x, y = _promote_shapes(x, y)
    if bool_fn is not None and _dtype(x) == dtypes.bool_:
      return bool_fn(x, y)
    return lax_fn(x, y)
  fn.__name__ = fn.__qualname__ = name
  fn.__doc__ = (f"{doc or name} (elementwise, NumPy broadcasting and JAX type promotion).\n\n"
                f"Args:\n  x, y: array-likes with broadcast-compatible shapes.\n\nReturns:\n"
                f"  Array of the broadcast shape and the promoted dtype.\n\nRaises:\n"
                f"  ValueError: if the shapes do not broadcast.")
  return fn


def _unary_ufunc(name: str, lax_fn, promote=promote_dtypes, doc: str = ""):
  def fn(x: ArrayLike, /):
    aval = getattr(x, "aval", None)
    if aval is not None and not _needs_promotion(promote, aval.dtype):
      return lax_fn(x)
    x, = promote(x)
    if not isinstance(x, (Array, Tracer)):
      x = asarray(x)
    return lax_fn(x)
  fn.__name__ = fn.__qualname__ = name
  fn.__doc__ = (f"{doc or name} (elementwise).\n\nArgs:\n  x: array-like T[*s].\n\nReturns:\n"
                f"  Array [*s].")
  return fn


# ---------------------------------------------------------------------------
# Creation


def _nested_has_traced(obj) -> bool:
  if isinstance(obj, (list, tuple)):
    return any(_nested_has_traced(o) for o in obj)
  return isinstance(obj, (Tracer, Array))


def array(object: Any, dtype: Any = None, copy: bool = True, ndmin: int = 0) -> Array:
  """Creates an Array from `object` (a nested list/tuple of scalars or arrays, a NumPy array,
  an Array, or a scalar).

  Args:
    object: the data.
    dtype: the result dtype (canonicalized; default: inferred as JAX's numpy does — Python
      floats give float32 unless x64 is on; a bare Python scalar gives a weakly typed
      result).
    copy, ndmin: as in NumPy.

  Returns:
    Array (or a tracer when `object` holds tracers).

  Raises:
    TypeError: for objects that are not array-like.
  """
  if isinstance(object, (Array, Tracer)):
    out = object if dtype is None else lax.convert_element_type(
        object, dtypes.canonicalize_dtype(dtype))
  elif isinstance(object, (list, tuple)) and _nested_has_traced(object):
    out = stack([array(o) for o in object]) if object else array(np.zeros((0,)))
    if dtype is not None:
      out = lax.convert_element_type(out, dtypes.canonicalize_dtype(dtype))
  else:
    if hasattr(object, "__jax_array__"):
      return array(object.__jax_array__(), dtype, copy, ndmin)
    weak = type(object) in _py_scalar and type(object) is not bool and dtype is None
    if type(object) in _py_scalar:
      dt = dtypes.python_scalar_dtype(type(object)) if dtype is None else (
          dtypes.canonicalize_dtype(dtype))
      if type(object) is int and dtype is None:
        core._check_int_range(object, dt)
      host = np.asarray(object, dt)
    else:
      try:
        host = np.asarray(object)
      except Exception as e:
        raise TypeError(f"array: cannot convert an object of type {type(object).__name__} "
                        f"to an array: {e}") from e
      if host.dtype == object_dtype:
        raise TypeError(f"array: expected numbers or nested lists of numbers, got an object "
                        f"array from {type(object).__name__}.")
      dt = dtypes.canonicalize_dtype(host.dtype if dtype is None else dtype)
      host = host.astype(dt, copy=False)
    aval = core.ShapedArray(host.shape, dt, weak)
    out = Array(dispatch.to_buffer(host, aval), aval)
  if ndmin > _ndim(out):
    out = reshape(out, (1,) * (ndmin - _ndim(out)) + _shape(out))
  return out


object_dtype = np.dtype(object)


def asarray(a: Any, dtype: Any = None, order: str | None = None, *, copy=None) -> Array:
  """Like `array`, without copying Arrays of the right dtype."""
  if isinstance(a, (Array, Tracer)) and (dtype is None or
                                         dtypes.canonicalize_dtype(dtype) == a.dtype):
    return a
  return array(a, dtype=dtype)


def _ndim(x) -> int:
  return len(_shape(x))


def _canonical_shape(shape, name="shape") -> tuple[int, ...]:
  if isinstance(shape, (int, np.integer)) or (isinstance(shape, (Array,)) and shape.ndim == 0):
    shape = (shape,)
  try:
    out = tuple(operator.index(d) for d in shape)
  except TypeError as e:
    raise TypeError(f"{name} must be an int or a sequence of ints (static values, not traced "
                    f"arrays), got {shape!r}.") from e
  if any(d < 0 for d in out):
    raise ValueError(f"{name} must not have negative dimensions, got {out}.")
  return out


def full(shape: Any, fill_value: ArrayLike, dtype: Any = None) -> Array:
  """An array of `shape` filled with `fill_value` (its dtype unless `dtype` is given)."""
  shape = _canonical_shape(shape)
  fill = asarray_or_scalar(fill_value)
  if dtype is None:
    dt = _dtype(fill) if type(fill) not in _py_scalar else (
        dtypes.python_scalar_dtype(type(fill)))
  else:
    dt = dtypes.canonicalize_dtype(dtype)
  if _shape(fill) == ():
    fill = _convert(fill, dt, False) if type(fill) not in _py_scalar else np.asarray(fill, dt)
    return lax.broadcast_in_dim(fill, shape, ())
  fill = _convert(fill, dt, False)
  return _broadcast_to(fill, shape)


def zeros(shape: Any, dtype: Any = None) -> Array:
  """An array of zeros; dtype defaults to float32 (float64 with x64)."""
  dt = dtypes.default_float_dtype() if dtype is None else dtypes.canonicalize_dtype(dtype)
  return lax.broadcast_in_dim(np.zeros((), dt), _canonical_shape(shape), ())


def ones(shape: Any, dtype: Any = None) -> Array:
  """An array of ones; dtype defaults to float32 (float64 with x64)."""
  dt = dtypes.default_float_dtype() if dtype is None else dtypes.canonicalize_dtype(dtype)
  return lax.broadcast_in_dim(np.ones((), dt), _canonical_shape(shape), ())


def _like_dtype(a, dtype):
  return dtypes.canonicalize_dtype(dtype) if dtype is not None else _dtype(a)


def zeros_like(a: ArrayLike, dtype: Any = None, shape: Any = None) -> Array:
  """Zeros with the shape and dtype of `a` (or the given `dtype`/`shape`)."""
  return zeros(_shape(a) if shape is None else shape, _like_dtype(a, dtype))


def ones_like(a: ArrayLike, dtype: Any = None, shape: Any = None) -> Array:
  """Ones with the shape and dtype of `a` (or the given `dtype`/`shape`)."""
  return ones(_shape(a) if shape is None else shape, _like_dtype(a, dtype))


def full_like(a: ArrayLike, fill_value: ArrayLike, dtype: Any = None, shape: Any = None) -> Array:
  """`fill_value` with the shape and dtype of `a` (or the given `dtype`/`shape`)."""
  return full(_shape(a) if shape is None else shape, fill_value, _like_dtype(a, dtype))


def _concrete(x, name: str, what: str):
  if isinstance(x, Tracer):
    raise core.ConcretizationTypeError(
        f"Abstract tracer value encountered where concrete value is expected: {x!r} was "
        f"passed as `{what}` of jnp.{name}, which needs a Python value to determine the "
        f"shape of its result. Pass a concrete (static) value.")
  return x


def arange(start: Any, stop: Any = None, step: Any = None, dtype: Any = None) -> Array:
  """Evenly spaced values in [start, stop) with `step` (all concrete, as in JAX's numpy).

  Dtype: int32 for integer arguments, float32 if any is a float (64-bit with x64).

  Raises:
    ConcretizationTypeError: if an argument is traced.
  """
  for v, w in ((start, "start"), (stop, "stop"), (step, "step")):
    _concrete(v, "arange", w)
  if stop is None and step is None and dtype is None and isinstance(start, (int, np.integer)):
    return lax.iota(dtypes.default_int_dtype(), int(start))
  vals = [np.asarray(v) for v in (start, stop, step) if v is not None]
  if dtype is None:
    dt = dtypes.result_type(*[v.item() if v.ndim == 0 and isinstance(
        v.item(), (int, float)) else v for v in vals])
  else:
    dt = dtypes.canonicalize_dtype(dtype)
  host = np.arange(*[np.asarray(v).item() if np.ndim(v) == 0 else v
                     for v in (start, stop, step) if v is not None], dtype=dt)
  return array(host, dtype=dt)


def linspace(start: ArrayLike, stop: ArrayLike, num: int = 50, endpoint: bool = True,
             retstep: bool = False, dtype: Any = None, axis: int = 0):
  """`num` evenly spaced samples over [start, stop] (the last excluded if not `endpoint`).

  Computed in the graph as start + i * step, so start/stop may be traced.
  """
  num = operator.index(_concrete(num, "linspace", "num"))
  if num < 0:
    raise ValueError(f"linspace: num must be non-negative, got {num}.")
  start, stop = promote_dtypes_inexact(start, stop)
  dt = _dtype(start) if dtype is None else dtypes.canonicalize_dtype(dtype)
  calc = dt if dtypes.is_inexact(dt) else dtypes.default_float_dtype()
  start, stop = asarray(start, calc), asarray(stop, calc)
  bshape = broadcast_shapes(_shape(start), _shape(stop))
  start, stop = _broadcast_to(start, bshape), _broadcast_to(stop, bshape)
  div = (num - 1) if endpoint else num
  iota = lax.broadcasted_iota(calc, (num, *bshape), 0)
  delta = subtract(stop, start)
  step = divide(delta, div) if div > 0 else full_like(delta, np.nan)
  # num == 1 with endpoint: step is NaN (as NumPy's retstep) but the sample is `start`.
  out = add(expand_dims(start, 0),
            multiply(iota, expand_dims(step if div > 0 else zeros_like(delta), 0)))
  if endpoint and num > 1:
    out = concatenate([out[:-1], expand_dims(stop, 0)], axis=0)
  out = moveaxis(out, 0, axis)
  out = out.astype(dt) if dt != calc else out
  return (out, step) if retstep else out


def eye(N: int, M: int | None = None, k: int = 0, dtype: Any = None) -> Array:
  """A 2-D array with ones on the k-th diagonal."""
  N = operator.index(_concrete(N, "eye", "N"))
  M = N if M is None else operator.index(_concrete(M, "eye", "M"))
  dt = dtypes.default_float_dtype() if dtype is None else dtypes.canonicalize_dtype(dtype)
  rows = lax.broadcasted_iota(dtypes.int32, (N, M), 0)
  cols = lax.broadcasted_iota(dtypes.int32, (N, M), 1)
  return lax.convert_element_type(lax.eq(lax.add(rows, np.int32(k)), cols), dt)


def identity(n: int, dtype: Any = None) -> Array:
  """The n x n identity matrix: `eye(n, dtype=dtype)`."""
  return eye(n, dtype=dtype)


# ---------------------------------------------------------------------------
# Elementwise functions (ufuncs)


def _true_divide(x, y):
  return lax.div(x, y)


def _floor_divide(x, y):
  if dtypes.is_integer(_dtype(x)) or _dtype(x) == dtypes.bool_:
    if _dtype(x) == dtypes.bool_:
      raise TypeError("floor_divide is not defined for bool operands.")
    q = lax.div(x, y)
    if dtypes.is_unsigned(_dtype(x)):
      return q
    r = lax.rem(x, y)
    zero = _zero_of(r)
    adjust = lax.bitwise_and(lax.ne(r, zero), lax.ne(lax.lt(r, zero), lax.lt(y, zero)))
    return lax.select(adjust, lax.sub(q, _one_of(q)), q)
  return lax.floor(lax.div(x, y))


def _zero_of(x):   # weak, so that results keep the weak type of x
  return lax.utils.weak_scalar(np.zeros((), _dtype(x))[()])


def _one_of(x):
  return lax.utils.weak_scalar(np.ones((), _dtype(x))[()])


def _remainder(x, y):
  r = lax.rem(x, y)
  if dtypes.is_unsigned(_dtype(x)):
    return r
  zero = _zero_of(r)
  adjust = lax.bitwise_and(lax.ne(r, zero), lax.ne(lax.lt(r, zero), lax.lt(y, zero)))
  return lax.select(adjust, lax.add(r, y), r)


def _logical(lax_fn):
  def fn(x, y):
    return lax_fn(_to_bool(x), _to_bool(y))
  return fn


def _to_bool(x):
  return x if _dtype(x) == dtypes.bool_ else lax.ne(x, _zero_of(x))


add = _binary_ufunc("add", lax.add, doc="x + y (logical or for bool)", bool_fn=lax.bitwise_or)
subtract = _binary_ufunc("subtract", lax.sub, doc="x - y")
multiply = _binary_ufunc("multiply", lax.mul, doc="x * y (logical and for bool)",
                         bool_fn=lax.bitwise_and)
divide = _binary_ufunc("divide", _true_divide, promote_dtypes_inexact,
                       doc="x / y (true division: integers give floats)")
true_divide = divide
floor_divide = _binary_ufunc("floor_divide", _floor_divide, promote_dtypes_numeric,
                             doc="floor(x / y)")
remainder = _binary_ufunc("remainder", _remainder, promote_dtypes_numeric,
                          doc="x mod y with the sign of y (Python's %)")
mod = remainder
fmod = _binary_ufunc("fmod", lax.rem, promote_dtypes_numeric,
                     doc="x mod y with the sign of x (C's fmod)")
maximum = _binary_ufunc("maximum", lax.max, doc="Elementwise maximum (NaN-propagating)")
minimum = _binary_ufunc("minimum", lax.min, doc="Elementwise minimum (NaN-propagating)")
arctan2 = _binary_ufunc("arctan2", lax.atan2, promote_dtypes_inexact,
                        doc="Arctangent of x/y in radians, quadrant-aware")
equal = _binary_ufunc("equal", lax.eq, doc="x == y")
not_equal = _binary_ufunc("not_equal", lax.ne, doc="x != y")
less = _binary_ufunc("less", lax.lt, doc="x < y")
less_equal = _binary_ufunc("less_equal", lax.le, doc="x <= y")
greater = _binary_ufunc("greater", lax.gt, doc="x > y")
greater_equal = _binary_ufunc("greater_equal", lax.ge, doc="x >= y")
bitwise_and = _binary_ufunc("bitwise_and", lax.bitwise_and, doc="x & y")
bitwise_or = _binary_ufunc("bitwise_or", lax.bitwise_or, doc="x | y")
bitwise_xor = _binary_ufunc("bitwise_xor", lax.bitwise_xor, doc="x ^ y")


def _no_promote(*args):   # logical ops convert each operand to bool first, as JAX's numpy
  return [asarray_or_scalar(a) for a in args]


logical_and = _binary_ufunc("logical_and", _logical(lax.bitwise_and), _no_promote,
                            doc="x and y")
logical_or = _binary_ufunc("logical_or", _logical(lax.bitwise_or), _no_promote, doc="x or y")
logical_xor = _binary_ufunc("logical_xor", _logical(lax.bitwise_xor), _no_promote,
                            doc="x xor y")


def _power(x, y):
  return lax.pow(x, y)


def power(x: ArrayLike, y: ArrayLike, /) -> Array:
  """x ** y elementwise. A static Python int exponent uses repeated multiplication
  (`integer_pow`), as JAX's numpy does; integer bases with integer array exponents use
  binary exponentiation.

  Raises:
    ValueError: for integer bases with negative static exponents.
  """
  if type(y) is int and not isinstance(x, (list, tuple)):
    x, = promote_dtypes_numeric(x) if _dtype(x) == dtypes.bool_ else [asarray_or_scalar(x)]
    if type(x) in _py_scalar:
      x = array(x)
    if y < 0 and dtypes.is_integer(_dtype(x)):
      raise ValueError("Integers to negative integer powers are not allowed.")
    return lax.integer_pow(x, y)
  x, y = promote_dtypes_numeric(x, y)
  x, y = _promote_shapes(x, y)
  if dtypes.is_integer(_dtype(x)):
    return _integer_power(x, y)
  return lax.pow(x, y)


def _integer_power(x, y):
  # Binary exponentiation over the bits of y (negative exponents give 0, except base +-1).
  dt = _dtype(x)
  shape = broadcast_shapes(_shape(x), _shape(y))
  x, y = _broadcast_to(x, shape), _broadcast_to(y, shape)
  acc = lax.broadcast_in_dim(np.ones((), dt), shape, ())
  signed = not dtypes.is_unsigned(dt)
  base, e = x, lax.abs(y) if signed else y
  for _ in range(dt.itemsize * 8):
    bit = lax.ne(lax.bitwise_and(e, np.ones((), dt)[()]), np.zeros((), dt)[()])
    acc = lax.select(bit, lax.mul(acc, base), acc)
    base = lax.mul(base, base)
    e = lax.div(e, np.asarray(2, dt)[()])
  if signed:   # x ** -n is x ** n for x = +-1, else 0
    unit = lax.bitwise_or(lax.eq(x, np.ones((), dt)[()]), lax.eq(x, np.asarray(-1, dt)[()]))
    zero_out = lax.bitwise_and(lax.lt(y, np.zeros((), dt)[()]), lax.bitwise_not(unit))
    acc = lax.select(zero_out, lax.broadcast_in_dim(np.zeros((), dt), shape, ()), acc)
  return acc


negative = _unary_ufunc("negative", lambda x: lax.neg(x), promote_dtypes_numeric, "-x")


def positive(x: ArrayLike, /) -> Array:
  """+x (a copy)."""
  return asarray(x)


def absolute(x: ArrayLike, /) -> Array:
  """|x| elementwise (real for complex; identity for unsigned and bool)."""
  x = asarray_or_scalar(x)
  if not isinstance(x, (Array, Tracer)):
    x = asarray(x)
  dt = _dtype(x)
  if dt == dtypes.bool_ or dtypes.is_unsigned(dt):
    return x
  return lax.abs(x)


abs = absolute


def sign(x: ArrayLike, /) -> Array:
  """-1, 0 or 1 elementwise (x/|x| for complex)."""
  x = asarray_or_scalar(x)
  if not isinstance(x, (Array, Tracer)):
    x = asarray(x)
  if _dtype(x) == dtypes.bool_:
    return x
  return lax.sign(x)


exp = _unary_ufunc("exp", lax.exp, promote_dtypes_inexact, "e**x")
exp2 = _unary_ufunc("exp2", lax.exp2, promote_dtypes_inexact, "2**x")
log = _unary_ufunc("log", lax.log, promote_dtypes_inexact, "Natural logarithm")
log1p = _unary_ufunc("log1p", lax.log1p, promote_dtypes_inexact, "log(1 + x)")
expm1 = _unary_ufunc("expm1", lax.expm1, promote_dtypes_inexact, "e**x - 1")
log2 = _unary_ufunc("log2", lambda x: lax.div(lax.log(x), lax.log(np.asarray(2, _dtype(x))[()])),
                    promote_dtypes_inexact, "Base-2 logarithm")
log10 = _unary_ufunc("log10", lambda x: lax.div(lax.log(x),
                                                lax.log(np.asarray(10, _dtype(x))[()])),
                     promote_dtypes_inexact, "Base-10 logarithm")
sqrt = _unary_ufunc("sqrt", lax.sqrt, promote_dtypes_inexact, "Square root")
cbrt = _unary_ufunc("cbrt", lax.cbrt, promote_dtypes_inexact, "Cube root")
sin = _unary_ufunc("sin", lax.sin, promote_dtypes_inexact, "Sine (radians)")
cos = _unary_ufunc("cos", lax.cos, promote_dtypes_inexact, "Cosine (radians)")
tan = _unary_ufunc("tan", lax.tan, promote_dtypes_inexact, "Tangent (radians)")
tanh = _unary_ufunc("tanh", lax.tanh, promote_dtypes_inexact, "Hyperbolic tangent")
sinh = _unary_ufunc("sinh", lax.sinh, promote_dtypes_inexact, "Hyperbolic sine")
cosh = _unary_ufunc("cosh", lax.cosh, promote_dtypes_inexact, "Hyperbolic cosine")
arcsin = _unary_ufunc("arcsin", lax.asin, promote_dtypes_inexact, "Arcsine (radians)")
arccos = _unary_ufunc("arccos", lax.acos, promote_dtypes_inexact, "Arccosine (radians)")
arctan = _unary_ufunc("arctan", lax.atan, promote_dtypes_inexact, "Arctangent (radians)")
arcsinh = _unary_ufunc("arcsinh", lax.asinh, promote_dtypes_inexact, "Inverse hyperbolic sine")
arccosh = _unary_ufunc("arccosh", lax.acosh, promote_dtypes_inexact,
                       "Inverse hyperbolic cosine")
arctanh = _unary_ufunc("arctanh", lax.atanh, promote_dtypes_inexact,
                       "Inverse hyperbolic tangent")
asin, acos, atan, asinh, acosh, atanh, atan2 = (arcsin, arccos, arctan, arcsinh, arccosh,
                                               arctanh, arctan2)


def _int_passthrough(lax_fn):
  def fn(x):
    return x if not dtypes.is_inexact(_dtype(x)) else lax_fn(x)
  return fn


floor = _unary_ufunc("floor", _int_passthrough(lax.floor), doc="Floor")
ceil = _unary_ufunc("ceil", _int_passthrough(lax.ceil), doc="Ceiling")
trunc = _unary_ufunc("trunc", _int_passthrough(
    lambda x: lax.select(lax.lt(x, np.zeros((), _dtype(x))[()]), lax.ceil(x), lax.floor(x))),
                     doc="Round toward zero")
isfinite = _unary_ufunc("isfinite", lambda x: lax.is_finite(x) if dtypes.is_float(_dtype(x))
                        else lax.broadcast_in_dim(np.True_, _shape(x), ()), doc="Finite?")


def isnan(x: ArrayLike, /) -> Array:
  """x != x elementwise (False for integers)."""
  x = asarray_or_scalar(x)
  if not dtypes.is_inexact(_dtype(x)):
    return full(_shape(x), False, dtypes.bool_)
  return lax.ne(x, x)


def isinf(x: ArrayLike, /) -> Array:
  """|x| == inf elementwise (False for integers)."""
  x = asarray_or_scalar(x)
  if not dtypes.is_inexact(_dtype(x)):
    return full(_shape(x), False, dtypes.bool_)
  return lax.eq(lax.abs(x), np.asarray(np.inf, _real(_dtype(x)))[()])


def _real(dt):
  return {dtypes.complex64: dtypes.float32, dtypes.complex128: dtypes.float64}.get(dt, dt)


def round(a: ArrayLike, decimals: int = 0) -> Array:
  """Rounds to `decimals` places, halves to even (as numpy.round)."""
  a = asarray_or_scalar(a)
  if not isinstance(a, (Array, Tracer)):
    a = asarray(a)
  if not dtypes.is_inexact(_dtype(a)):
    if decimals >= 0:
      return a
    raise NotImplementedError("round of integers to negative decimals")
  if decimals == 0:
    return lax.round(a, 1)
  factor = np.asarray(10.0 ** decimals, _dtype(a))[()]
  return lax.div(lax.round(lax.mul(a, factor), 1), factor)


around = round


def rint(x: ArrayLike, /) -> Array:
  """Rounds to the nearest integer, halves to even; integer inputs give the default float."""
  x, = promote_dtypes_inexact(x)    # integers round to floats, as JAX's numpy.rint
  return round(x)


def logical_not(x: ArrayLike, /) -> Array:
  """Elementwise NOT of `x != 0`; bool result."""
  return lax.bitwise_not(_to_bool(asarray_or_scalar(x) if not isinstance(x, (int, float))
                                  else array(x)))


def invert(x: ArrayLike, /) -> Array:
  """Bitwise NOT (logical NOT for bool)."""
  x = asarray_or_scalar(x)
  if type(x) in _py_scalar:
    x = array(x)
  return lax.bitwise_not(x)


bitwise_not = bitwise_invert = invert


def square(x: ArrayLike, /) -> Array:
  """x * x elementwise; bool promotes to the default integer."""
  x, = promote_dtypes_numeric(x)
  if type(x) in _py_scalar:
    x = array(x)
  return lax.integer_pow(x, 2)


def reciprocal(x: ArrayLike, /) -> Array:
  """1 / x elementwise; integers give the default float."""
  x, = promote_dtypes_inexact(x)
  if not isinstance(x, (Array, Tracer)):
    x = asarray(x)
  return lax.div(lax.utils.weak_scalar(np.ones((), _dtype(x))[()]), x)


def where(condition: ArrayLike, x: ArrayLike = None, y: ArrayLike = None) -> Array:
  """`x` where `condition` else `y`, with broadcasting and promotion.

  The three-argument form; `stagecraft.numpy.where` dispatches the one-argument form
  (`nonzero`, with `size=`) to `stagecraft.numpy.indexing.where`.

  Args:
    condition: bool-like array.
    x, y: array-likes.

  Raises:
    ValueError: if only one of x and y is given, or shapes do not broadcast.
  """
  if x is None or y is None:
    raise ValueError("where: either both or neither of x and y must be given.")
  condition = _to_bool(asarray_or_scalar(condition) if not isinstance(condition, bool)
                       else array(condition))
  x, y = promote_dtypes(x, y)
  shape = broadcast_shapes(_shape(condition), _shape(x), _shape(y))
  condition, x, y = (_broadcast_to(v, shape) if _shape(v) != () or shape == () else v
                     for v in (condition, x, y))
  if type(x) in _py_scalar:
    x = array(x)
  return lax.select(condition, *(_broadcast_to(v, shape) for v in (x, y)))


def clip(a: ArrayLike, a_min: ArrayLike = None, a_max: ArrayLike = None, *, min=None,
         max=None) -> Array:
  """Limits values to [a_min, a_max] (either may be None). `min`/`max` are the NumPy 2
  spellings."""
  a_min = a_min if min is None else min
  a_max = a_max if max is None else max
  out = asarray_or_scalar(a)
  if a_min is not None:
    out = maximum(out, a_min)
  if a_max is not None:
    out = minimum(out, a_max)
  return out if not isinstance(out, (int, float)) else array(out)


# ---------------------------------------------------------------------------
# Shape manipulation


def shape(a: ArrayLike) -> tuple[int, ...]:
  """The shape of an array-like, as a tuple of ints."""
  return _shape(asarray_or_scalar(a))


def ndim(a: ArrayLike) -> int:
  """The number of dimensions of an array-like."""
  return len(shape(a))


def size(a: ArrayLike, axis: int | None = None) -> int:
  """The number of elements (along `axis` when given)."""
  s = shape(a)
  return math.prod(s) if axis is None else s[axis]


def _canon_axis(axis: int, ndim: int, name: str) -> int:
  axis = operator.index(axis)
  if not -ndim <= axis < ndim:
    raise ValueError(f"{name}: axis {axis} is out of bounds for an array of dimension {ndim}.")
  return axis % ndim if ndim else 0


def reshape(a: ArrayLike, shape: Any = None, order: str = "C", *, newshape=None) -> Array:
  """`a` with a new shape of the same size; one dimension may be -1.

  Raises:
    TypeError: if the sizes differ (naming both shapes).
    NotImplementedError: for `order` other than 'C'.
  """
  if shape is None:
    shape = newshape
  if order != "C":
    raise NotImplementedError(f"reshape: only order='C' is supported, got {order!r}.")
  a = asarray(a) if not isinstance(a, (Array, Tracer)) else a
  if isinstance(shape, (int, np.integer)):
    shape = (int(shape),)
  shape = tuple(operator.index(d) for d in shape)
  old = _shape(a)
  if builtins.sum(1 for d in shape if d == -1) > 1:
    raise ValueError(f"reshape: can only specify one unknown dimension (-1), got {shape}.")
  if -1 in shape:
    known = math.prod(d for d in shape if d != -1)
    total = math.prod(old)
    if known == 0 or total % known:
      raise TypeError(f"cannot reshape array of shape {old} (size {total}) into shape {shape}.")
    shape = tuple(total // known if d == -1 else d for d in shape)
  if math.prod(shape) != math.prod(old):
    raise TypeError(f"cannot reshape array of shape {old} (size {math.prod(old)}) into shape "
                    f"{shape} (size {math.prod(shape)}).")
  if shape == old:
    return a
  return lax.reshape(a, shape)


def ravel(a: ArrayLike, order: str = "C") -> Array:
  """The array flattened to 1-D in C order: `T[*s] -> T[prod(s)]`."""
  return reshape(a, (-1,), order)


def transpose(a: ArrayLike, axes: Sequence[int] | None = None) -> Array:
  """Permutes dimensions: `T[s0..sn] -> T[s[axes[0]]..s[axes[n]]]` (reversed when `axes`
  is None).

  Raises:
    ValueError: for an out-of-range axis.
    TypeError: if `axes` is not a permutation of the dimensions.
  """
  a = asarray(a)
  nd = _ndim(a)
  axes = tuple(range(nd))[::-1] if axes is None else tuple(
      _canon_axis(x, nd, "transpose") for x in axes)
  if sorted(axes) != list(range(nd)):
    raise TypeError(f"transpose permutation isn't a permutation of operand dimensions, got "
                    f"permutation {axes} for operand shape {_shape(a)}.")
  if axes == tuple(range(nd)):
    return a
  return lax.transpose(a, axes)


def permute_dims(a: ArrayLike, axes: Sequence[int]) -> Array:
  """Array API name of `transpose(a, axes)`."""
  return transpose(a, axes)


def matrix_transpose(x: ArrayLike, /) -> Array:
  """Swaps the last two axes: `T[..., m, n] -> T[..., n, m]`.

  Raises:
    ValueError: for fewer than 2 dimensions."""
  x = asarray(x)
  nd = _ndim(x)
  if nd < 2:
    raise ValueError(f"matrix_transpose needs at least 2 dimensions, got {nd}.")
  return transpose(x, (*range(nd - 2), nd - 1, nd - 2))


def swapaxes(a: ArrayLike, axis1: int, axis2: int) -> Array:
  """Interchanges two axes.

  Raises:
    ValueError: for an out-of-range axis."""
  a = asarray(a)
  nd = _ndim(a)
  perm = list(range(nd))
  i, j = _canon_axis(axis1, nd, "swapaxes"), _canon_axis(axis2, nd, "swapaxes")
  perm[i], perm[j] = perm[j], perm[i]
  return transpose(a, perm)


def moveaxis(a: ArrayLike, source: int | Sequence[int], destination: int | Sequence[int]) -> Array:
  """Moves axes `source` to positions `destination`, keeping the order of the others.

  Raises:
    ValueError: for out-of-range axes or source/destination of different lengths."""
  a = asarray(a)
  nd = _ndim(a)
  src = (source,) if isinstance(source, int) else tuple(source)
  dst = (destination,) if isinstance(destination, int) else tuple(destination)
  if len(src) != len(dst):
    raise ValueError("moveaxis: source and destination must have the same number of axes, "
                     f"got {src} and {dst}.")
  src = [_canon_axis(s, nd, "moveaxis") for s in src]
  dst = [_canon_axis(d, nd, "moveaxis") for d in dst]
  order = [i for i in range(nd) if i not in src]
  for d, s in sorted(zip(dst, src)):
    order.insert(d, s)
  return transpose(a, order)


def squeeze(a: ArrayLike, axis: int | Sequence[int] | None = None) -> Array:
  """Removes size-1 dimensions (`axis`, or all of them).

  Raises:
    ValueError: if a given axis does not have size 1.
  """
  a = asarray(a)
  s = _shape(a)
  if axis is None:
    dims = tuple(i for i, d in enumerate(s) if d == 1)
  else:
    axis = (axis,) if isinstance(axis, int) else tuple(axis)
    dims = tuple(sorted(_canon_axis(x, len(s), "squeeze") for x in axis))
    for d in dims:
      if s[d] != 1:
        raise ValueError(f"cannot select an axis to squeeze out which has size not equal to "
                         f"one: axis {d} of shape {s}.")
  if not dims:
    return a
  return lax.squeeze(a, dims)


def expand_dims(a: ArrayLike, axis: int | Sequence[int]) -> Array:
  """Inserts size-1 dimensions at `axis` (positions in the result)."""
  a = asarray(a)
  axis = (axis,) if isinstance(axis, int) else tuple(axis)
  out_nd = _ndim(a) + len(axis)
  axes = sorted(_canon_axis(x, out_nd, "expand_dims") for x in axis)
  return lax.expand_dims(a, tuple(axes))


def atleast_1d(*arys):
  """Each input as an Array with at least one dimension (0-d becomes shape (1,))."""
  out = [reshape(asarray(a), (1,)) if _ndim(asarray(a)) == 0 else asarray(a) for a in arys]
  return out[0] if len(out) == 1 else out


def concatenate(arrays: Sequence[ArrayLike], axis: int | None = 0, dtype: Any = None) -> Array:
  """Joins arrays along an existing axis (`axis=None` flattens first), promoting dtypes.

  Raises:
    ValueError: for an empty list, 0-d inputs or mismatched shapes off the axis.
  """
  if len(arrays) == 0:
    raise ValueError("Need at least one array to concatenate.")
  arrays = [asarray(a) for a in arrays]
  if axis is None:
    arrays = [ravel(a) for a in arrays]
    axis = 0
  if any(_ndim(a) == 0 for a in arrays):
    raise ValueError("Zero-dimensional arrays cannot be concatenated.")
  arrays = promote_dtypes(*arrays)
  if dtype is not None:
    arrays = [lax.convert_element_type(a, dtypes.canonicalize_dtype(dtype)) for a in arrays]
  axis = _canon_axis(axis, _ndim(arrays[0]), "concatenate")
  if len(arrays) == 1:
    return arrays[0]
  return lax.concatenate(arrays, axis)


def stack(arrays: Sequence[ArrayLike], axis: int = 0, dtype: Any = None) -> Array:
  """Joins arrays of one shape along a new axis.

  Raises:
    ValueError: for an empty sequence or differing shapes.
  """
  if len(arrays) == 0:
    raise ValueError("Need at least one array to stack.")
  arrays = [asarray(a) for a in arrays]
  shapes = {_shape(a) for a in arrays}
  if len(shapes) != 1:
    raise ValueError(f"All input arrays must have the same shape, got "
                     f"{[_shape(a) for a in arrays]}.")
  axis = _canon_axis(axis, _ndim(arrays[0]) + 1, "stack")
  return concatenate([expand_dims(a, axis) for a in arrays], axis, dtype=dtype)


def broadcast_to(array_: ArrayLike, shape: Sequence[int]) -> Array:
  """Broadcasts to `shape` under NumPy's rules. Raises ValueError if incompatible."""
  return _broadcast_to(asarray(array_), _canonical_shape(shape))


def broadcast_arrays(*args: ArrayLike) -> list[Array]:
  """The inputs broadcast to their common shape.

  Raises:
    ValueError: if the shapes do not broadcast."""
  args = [asarray(a) for a in args]
  shape = broadcast_shapes(*[_shape(a) for a in args])
  return [_broadcast_to(a, shape) for a in args]


def astype(x: ArrayLike, dtype: Any, /, *, copy: bool = False) -> Array:
  """`x` converted to `dtype` (canonicalized)."""
  x = asarray(x)
  return lax.convert_element_type(x, dtypes.canonicalize_dtype(dtype))


def iscomplexobj(x) -> bool:
  """Whether `x` has a complex dtype."""
  return dtypes.is_complex(_dtype(asarray_or_scalar(x)))


def result_type(*args) -> np.dtype:
  """The dtype JAX-style promotion gives `args` (see `stagecraft.dtypes.result_type`)."""
  return dtypes.result_type(*args)


def promote_types(a, b) -> np.dtype:
  """The dtype two dtypes promote to (JAX's lattice)."""
  return dtypes.promote_types(a, b)


def can_cast(from_, to, casting: str = "safe") -> bool:
  """NumPy's `can_cast` on dtypes."""
  return np.can_cast(np.dtype(from_) if not hasattr(from_, "dtype") else from_.dtype, to,
                     casting)


def issubdtype(a, b) -> bool:
  """`numpy.issubdtype` that knows bfloat16 and float8 are floating."""
  return dtypes.issubdtype(a, b)


iinfo = dtypes.iinfo
finfo = dtypes.finfo
dtype = np.dtype
pi, e, inf, nan, euler_gamma = np.pi, np.e, np.inf, np.nan, np.euler_gamma
newaxis = None


# ---------------------------------------------------------------------------
# More ufuncs: composed from the primitives above, with JAX's numpy's promotion.


def _c(x, v):
  """`v` as a weakly typed scalar of x's dtype: lax ops with it keep x's weak type."""
  return lax.utils.weak_scalar(np.asarray(v, _dtype(x))[()])


def _full_c(x, v):
  """`v` broadcast to x's shape with x's dtype, weakly typed (so selects keep x's weak type)."""
  return lax.broadcast_in_dim(_c(x, v), _shape(x), ())


def _arr(x):
  """An Array (or tracer) for `x`; Python and weak scalars become weakly typed Arrays."""
  if isinstance(x, (Array, Tracer)):
    return x
  if isinstance(x, core.WeakScalarValue):
    return lax.convert_element_type(array(x.value), x.value.dtype, weak_type=True)
  return asarray(asarray_or_scalar(x))


def _inexact_args(name: str, *args, allow_complex: bool = True):
  args = promote_dtypes_inexact(*args)
  if not allow_complex and dtypes.is_complex(_dtype(args[0])):
    raise TypeError(f"jnp.{name} does not support complex-valued inputs; take the real part "
                    f"or abs() first.")
  return _full_shapes(args)


def _full_shapes(args):
  """Arrays broadcast to their common shape (rank-0 ones too, unlike `_promote_shapes`)."""
  args = [_arr(a) for a in args]
  shape = broadcast_shapes(*[_shape(a) for a in args])
  return [_broadcast_to(a, shape) for a in args]


def logaddexp(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """log(exp(x1) + exp(x2)) without overflow: `max + log1p(exp(-|x1 - x2|))`.

  Args:
    x1, x2: broadcast-compatible array-likes; integers promote to the default float.

  Returns:
    Array of the broadcast shape and promoted inexact dtype; NaN if either is NaN, and
    `inf`/`-inf` handled as NumPy does (`logaddexp(-inf, -inf) == -inf`).

  Derivatives (real inputs) are JAX's custom rule `t1 * exp(x1 - out) + t2 * exp(x2 - out)`
  with `+inf` replaced by 0 in `x1`, `x2` and `out`, so that they stay finite where an
  input is infinite.
  """
  x1, x2 = _inexact_args("logaddexp", x1, x2)
  if dtypes.is_complex(_dtype(x1)):
    return log(add(exp(x1), exp(x2)))
  return _logaddexp(x1, x2)


def _replace_inf(x):
  """`x` with `+inf` replaced by 0 (JAX's helper for the logaddexp derivatives)."""
  return lax.select(lax.eq(x, _c(x, np.inf)), _full_c(x, 0), x)


def _logaddexp_tangent(exp_fn, t1, t2, x1, x2, out):
  """`t1 * exp_fn(x1 - out) + t2 * exp_fn(x2 - out)`, leaving out symbolic zero tangents."""
  out_safe = _replace_inf(out)
  acc = None
  for t, x in ((t1, x1), (t2, x2)):
    if type(t) is SymbolicZero:
      continue
    term = lax.mul(t, exp_fn(lax.sub(_replace_inf(x), out_safe)))
    acc = term if acc is None else lax.add(acc, term)
  return SymbolicZero(core.get_aval(out)) if acc is None else acc


@custom_jvp
def _logaddexp(x1, x2):
  amax = lax.max(x1, x2)
  delta = lax.sub(x1, x2)
  # NB: delta is NaN for equal infinities; x1 + x2 then gives the right inf (or NaN).
  return lax.select(lax.ne(delta, delta), lax.add(x1, x2),
                    lax.add(amax, lax.log1p(lax.exp(lax.neg(lax.abs(delta))))))


def _logaddexp_jvp(primals, tangents):
  out = _logaddexp(*primals)
  return out, _logaddexp_tangent(lax.exp, *tangents, *primals, out)


_logaddexp.defjvp(_logaddexp_jvp, symbolic_zeros=True)


def logaddexp2(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """log2(2**x1 + 2**x2) without overflow; see `logaddexp` (derivatives too, with `exp2`)."""
  x1, x2 = _inexact_args("logaddexp2", x1, x2)
  if dtypes.is_complex(_dtype(x1)):
    return log2(add(exp2(x1), exp2(x2)))
  return _logaddexp2(x1, x2)


@custom_jvp
def _logaddexp2(x1, x2):
  amax = lax.max(x1, x2)
  delta = lax.sub(x1, x2)
  tail = lax.div(lax.log1p(lax.exp2(lax.neg(lax.abs(delta)))), _c(x1, np.log(2)))
  return lax.select(lax.ne(delta, delta), lax.add(x1, x2), lax.add(amax, tail))


def _logaddexp2_jvp(primals, tangents):
  out = _logaddexp2(*primals)
  return out, _logaddexp_tangent(lax.exp2, *tangents, *primals, out)


_logaddexp2.defjvp(_logaddexp2_jvp, symbolic_zeros=True)


def hypot(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """sqrt(x1**2 + x2**2) without intermediate overflow (inf if either is infinite).

  Raises:
    ValueError: for complex inputs (take abs() first).
  """
  x1, x2 = _inexact_args("hypot", x1, x2)
  if dtypes.is_complex(_dtype(x1)):
    raise ValueError("jnp.hypot is not well defined for complex-valued inputs. Please "
                     "convert to real values first, such as by using abs(x)")
  x1, x2 = lax.abs(x1), lax.abs(x2)
  inf = _c(x1, np.inf)
  any_inf = lax.bitwise_or(lax.eq(x1, inf), lax.eq(x2, inf))
  hi, lo = lax.max(x1, x2), lax.min(x1, x2)
  zero = lax.eq(hi, _c(hi, 0))
  ratio = lax.div(lo, lax.select(zero, _full_c(hi, 1), hi))
  out = lax.select(zero, hi, lax.mul(hi, lax.sqrt(lax.add(_c(hi, 1), lax.mul(ratio, ratio)))))
  return lax.select(any_inf, _full_c(out, np.inf), out)


def deg2rad(x: ArrayLike, /) -> Array:
  """Degrees to radians: `x * pi / 180` (integers give the default float)."""
  x, = _inexact_args("deg2rad", x)
  return lax.mul(x, _c(x, np.pi / 180))


def rad2deg(x: ArrayLike, /) -> Array:
  """Radians to degrees: `x * 180 / pi` (integers give the default float)."""
  x, = _inexact_args("rad2deg", x)
  return lax.mul(x, _c(x, 180 / np.pi))


radians, degrees = deg2rad, rad2deg


def sinc(x: ArrayLike, /) -> Array:
  """The normalized sinc function `sin(pi x) / (pi x)`, 1 at 0.

  Derivatives of every order are exact at 0 too: there the value comes from the Maclaurin
  series of `sin(y) / y` at `y = pi x`, whose k-th derivative is JAX's custom rule
  (`(-1)**(k/2) / (k + 1)` for even k, 0 for odd k).
  """
  x, = _inexact_args("sinc", x)
  eq_zero = lax.eq(x, _c(x, 0))
  pi_x = lax.mul(x, _c(x, np.pi))
  safe = lax.select(eq_zero, _full_c(x, 1), pi_x)
  return lax.select(eq_zero, _sinc_maclaurin(0, pi_x), lax.div(lax.sin(safe), safe))


@functools.partial(custom_jvp, nondiff_argnums=(0,))
def _sinc_maclaurin(k, x):
  """The k-th derivative of `sin(y) / y` at `y = 0`, shaped like `x` (whose tangent, by the
  custom rule, is the (k+1)-th derivative times the tangent of x)."""
  zero = lax.mul(x, _c(x, 0))
  return zero if k % 2 else lax.add(zero, _c(x, (-1) ** (k // 2) / (k + 1)))


@_sinc_maclaurin.defjvp
def _sinc_maclaurin_jvp(k, primals, tangents):
  (x,), (t,) = primals, tangents
  return _sinc_maclaurin(k, x), lax.mul(_sinc_maclaurin(k + 1, x), t)


def heaviside(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """Step function: 0 where x1 < 0, `x2` where x1 == 0, 1 where x1 > 0 (NaN stays NaN)."""
  x1, x2 = _inexact_args("heaviside", x1, x2)
  zero = _c(x1, 0)
  out = lax.select(lax.ne(x1, x1), x1, x2)
  out = lax.select(lax.gt(x1, zero), _full_c(x1, 1), out)
  return lax.select(lax.lt(x1, zero), _full_c(x1, 0), out)


def divmod(x1: ArrayLike, x2: ArrayLike, /) -> tuple[Array, Array]:
  """`(floor_divide(x1, x2), remainder(x1, x2))` (Python's divmod, elementwise)."""
  return floor_divide(x1, x2), remainder(x1, x2)


def float_power(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """x1 ** x2 computed in the promoted inexact dtype (float32 unless x64 is on)."""
  x1, x2 = _inexact_args("float_power", x1, x2)
  return lax.pow(x1, x2)


def _integer_args(name: str, *args):
  args = promote_dtypes(*args)
  if not dtypes.is_integer(_dtype(args[0])):
    raise ValueError(f"Arguments to stagecraft.numpy.{name} must be integers.")
  return _full_shapes(args)


def gcd(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """Greatest common divisor of |x1| and |x2| (gcd(0, 0) == 0), elementwise.

  Raises:
    ValueError: for non-integer inputs.

  Algorithm: Euclid's, unrolled for the worst case of the dtype's width (about 1.44 steps
  per bit, Lamé's theorem), since loops are not yet staged.
  """
  x1, x2 = _integer_args("gcd", x1, x2)
  shape = broadcast_shapes(_shape(x1), _shape(x2))
  a, b = _broadcast_to(absolute(x1), shape), _broadcast_to(absolute(x2), shape)
  dt = _dtype(a)
  zero = np.zeros((), dt)
  one = lax.broadcast_in_dim(np.ones((), dt), shape, ())
  for _ in range(int(dt.itemsize * 8 * 1.45) + 2):
    nz = lax.ne(b, zero)
    a, b = lax.select(nz, b, a), lax.select(nz, lax.rem(a, lax.select(nz, b, one)), b)
  return a


def lcm(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """Least common multiple of |x1| and |x2| (0 if either is 0), elementwise.

  Raises:
    ValueError: for non-integer inputs.
  """
  x1, x2 = _integer_args("lcm", x1, x2)
  d = gcd(x1, x2)
  safe = where(d == 0, 1, d)
  return where(d == 0, 0, absolute(multiply(x1, floor_divide(x2, safe))))


def _shift_args(name, x1, x2):
  x1, x2 = promote_dtypes_numeric(x1, x2)
  if not dtypes.is_integer(_dtype(x1)):
    raise TypeError(f"jnp.{name} only accepts integer or bool inputs, got "
                    f"{_dtype(x1).name}.")
  return _full_shapes((x1, x2))


def left_shift(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """x1 << x2 elementwise (zeros shifted in; shifts >= the bit width give 0).

  Raises:
    TypeError: for non-integer inputs.
  """
  x1, x2 = _shift_args("left_shift", x1, x2)
  return lax.shift_left(x1, x2)


def right_shift(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """x1 >> x2 elementwise: arithmetic for signed dtypes, logical for unsigned.

  Raises:
    TypeError: for non-integer inputs.
  """
  x1, x2 = _shift_args("right_shift", x1, x2)
  if dtypes.is_unsigned(_dtype(x1)):
    return lax.shift_right_logical(x1, x2)
  return lax.shift_right_arithmetic(x1, x2)


bitwise_left_shift, bitwise_right_shift = left_shift, right_shift


def bitwise_count(x: ArrayLike, /) -> Array:
  """The number of 1 bits in |x|, as uint8 (as JAX's numpy).

  Raises:
    TypeError: for non-integer inputs.
  """
  x = _arr(x)
  if _dtype(x) == dtypes.bool_:
    x = lax.convert_element_type(x, dtypes.uint8)
  if not dtypes.is_integer(_dtype(x)):
    raise TypeError(f"bitwise_count requires an integer or bool input, got {_dtype(x).name}.")
  return lax.convert_element_type(lax.population_count(absolute(x)), dtypes.uint8)


def isclose(a: ArrayLike, b: ArrayLike, rtol: ArrayLike = 1e-05, atol: ArrayLike = 1e-08,
            equal_nan: bool = False) -> Array:
  """`|a - b| <= atol + rtol * |b|` elementwise, with NumPy's handling of inf and NaN.

  Args:
    a, b: broadcast-compatible array-likes (promoted to a common inexact dtype).
    rtol, atol: tolerances (converted to the real dtype of the promoted inputs).
    equal_nan: whether NaN compares equal to NaN.

  Returns:
    bool Array of the broadcast shape. Infinities are close only to the same infinity.
  """
  a, b = _inexact_args("isclose", a, b)
  rdt = _real(_dtype(a))
  rtol = lax.convert_element_type(_arr(rtol), rdt)
  atol = lax.convert_element_type(_arr(atol), rdt)
  out = lax.le(lax.abs(lax.sub(a, b)), lax.add(atol, lax.mul(rtol, lax.abs(b))))
  a_inf, b_inf = isinf(a), isinf(b)
  out = logical_and(out, logical_not(logical_or(a_inf, b_inf)))
  out = logical_or(out, logical_and(logical_and(a_inf, b_inf), lax.eq(a, b)))
  a_nan, b_nan = isnan(a), isnan(b)
  out = logical_and(out, logical_not(logical_or(a_nan, b_nan)))
  if equal_nan:
    out = logical_or(out, logical_and(a_nan, b_nan))
  return out


def allclose(a: ArrayLike, b: ArrayLike, rtol: ArrayLike = 1e-05, atol: ArrayLike = 1e-08,
             equal_nan: bool = False) -> Array:
  """Whether `isclose(a, b, ...)` holds everywhere: a bool scalar Array."""
  return lax.reduce_and(ravel(isclose(a, b, rtol, atol, equal_nan)), (0,))


def array_equal(a1: ArrayLike, a2: ArrayLike, equal_nan: bool = False) -> Array:
  """Whether `a1` and `a2` have the same shape and elements (a bool scalar Array; False for
  different shapes, with no error)."""
  a1, a2 = _arr(a1), _arr(a2)
  if _shape(a1) != _shape(a2):
    return array(False)
  eq = equal(a1, a2)
  if equal_nan:
    eq = logical_or(eq, logical_and(isnan(a1), isnan(a2)))
  return lax.reduce_and(ravel(eq), (0,))


def array_equiv(a1: ArrayLike, a2: ArrayLike) -> Array:
  """Whether `a1` and `a2` broadcast to one shape with equal elements (False, with no
  error, if they do not broadcast)."""
  a1, a2 = _arr(a1), _arr(a2)
  try:
    eq = equal(a1, a2)
  except ValueError:
    return array(False)
  return lax.reduce_and(ravel(eq), (0,))


def real(val: ArrayLike, /) -> Array:
  """The real part (the input itself for real dtypes)."""
  val = _arr(val)
  return lax.real(val) if dtypes.is_complex(_dtype(val)) else val


def imag(val: ArrayLike, /) -> Array:
  """The imaginary part (zeros of the input's dtype for real dtypes)."""
  val = _arr(val)
  return lax.imag(val) if dtypes.is_complex(_dtype(val)) else full_like(val, 0)


def conjugate(x: ArrayLike, /) -> Array:
  """The complex conjugate (the input itself for real dtypes)."""
  x = _arr(x)
  return lax.conj(x) if dtypes.is_complex(_dtype(x)) else x


conj = conjugate


def angle(z: ArrayLike, deg: bool = False) -> Array:
  """The counterclockwise angle of complex `z` from the positive real axis, in radians (in
  degrees with `deg`); 0 or pi for real inputs. Result: the real inexact dtype."""
  z = _arr(z)
  re, im = real(z), imag(z)
  if not dtypes.is_complex(_dtype(z)):
    re, im = promote_dtypes_inexact(re, im)
  out = lax.atan2(im, re)
  return rad2deg(out) if deg else out


def signbit(x: ArrayLike, /) -> Array:
  """Whether the sign bit is set (True for -0.0 and negative NaNs); `x < 0` for integers.

  Raises:
    ValueError: for complex inputs.
  """
  x = _arr(x)
  dt = _dtype(x)
  if dt == dtypes.bool_:
    return full(_shape(x), False, dtypes.bool_)
  if dtypes.is_integer(dt):
    return lax.lt(x, _c(x, 0))
  if dtypes.is_complex(dt):
    raise ValueError(f"stagecraft.numpy.signbit is not well defined for {dt.name}")
  if dt.itemsize == 1:   # float8: go through float32, which keeps the sign of zero and NaN
    x, dt = lax.convert_element_type(x, dtypes.float32), dtypes.float32
  idt = np.dtype(f"int{dt.itemsize * 8}")
  return lax.lt(lax.bitcast_convert_type(x, idt), np.zeros((), idt)[()])


def copysign(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """|x1| with the sign (bit) of x2, elementwise.

  Raises:
    TypeError: for complex inputs.
  """
  x1, x2 = _inexact_args("copysign", x1, x2, allow_complex=False)
  return where(signbit(x2), negative(lax.abs(x1)), lax.abs(x1))


def fabs(x: ArrayLike, /) -> Array:
  """|x| as a float (integers give the default float).

  Raises:
    TypeError: for complex inputs.
  """
  x, = _inexact_args("fabs", x, allow_complex=False)
  return lax.abs(x)


def isposinf(x: ArrayLike, /) -> Array:
  """x == +inf elementwise (False for integers)."""
  x = _arr(x)
  if not dtypes.is_float(_dtype(x)):
    return full(_shape(x), False, dtypes.bool_)
  return lax.eq(x, _c(x, np.inf))


def isneginf(x: ArrayLike, /) -> Array:
  """x == -inf elementwise (False for integers)."""
  x = _arr(x)
  if not dtypes.is_float(_dtype(x)):
    return full(_shape(x), False, dtypes.bool_)
  return lax.eq(x, _c(x, -np.inf))


def isreal(x: ArrayLike, /) -> Array:
  """Whether the imaginary part is 0 (True everywhere for real dtypes)."""
  x = _arr(x)
  if not dtypes.is_complex(_dtype(x)):
    return full(_shape(x), True, dtypes.bool_)
  return lax.eq(lax.imag(x), _c(lax.imag(x), 0))


def iscomplex(x: ArrayLike, /) -> Array:
  """Whether the imaginary part is nonzero (False everywhere for real dtypes)."""
  return logical_not(isreal(x))


def isrealobj(x) -> bool:
  """Whether `x` has a non-complex dtype."""
  return not iscomplexobj(x)


def isscalar(element: Any) -> bool:
  """Whether `element` is a scalar: a Python/NumPy scalar or a 0-d array."""
  if isinstance(element, (Array, Tracer, np.ndarray, np.generic)):
    return np.ndim(element) == 0 if not isinstance(element, Tracer) else _ndim(element) == 0
  return type(element) in _py_scalar


def fmax(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """Elementwise maximum that ignores NaN (NaN only where both are NaN).

  As JAX's numpy, `where(x1 > x2 or isnan(x2), x1, x2)`: at a tie the derivative goes to
  `x2` alone (unlike `maximum`, which splits it).
  """
  x1, x2 = promote_dtypes(x1, x2)
  return where(logical_or(greater(x1, x2), isnan(x2)), x1, x2)


def fmin(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """Elementwise minimum that ignores NaN (NaN only where both are NaN); at a tie the
  derivative goes to `x2` (see `fmax`)."""
  x1, x2 = promote_dtypes(x1, x2)
  return where(logical_or(less(x1, x2), isnan(x2)), x1, x2)


def ldexp(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """x1 * 2**x2 for integer exponents x2 (exact while the result is a normal float).

  Raises:
    ValueError: if x2 is not an integer array.
  """
  x2 = _arr(x2)
  if not (dtypes.is_integer(_dtype(x2)) or _dtype(x2) == dtypes.bool_):
    raise ValueError(f"jnp.ldexp: the exponent must be an integer, got {_dtype(x2).name}.")
  x1, = promote_dtypes_inexact(x1)
  x1 = _arr(x1)
  # NB: two factors keep 2**x2 finite for the exponents of subnormal results.
  half = lax.convert_element_type(floor_divide(x2, 2), _dtype(x1))
  rest = lax.sub(lax.convert_element_type(x2, _dtype(x1)), half)
  return multiply(multiply(x1, exp2(half)), exp2(rest))


def frexp(x: ArrayLike, /) -> tuple[Array, Array]:
  """Mantissa in [0.5, 1) (with x's sign) and integer exponent with `x = m * 2**e`;
  (x, 0) for 0, inf and NaN. NB: XLA's CPU backend flushes subnormal inputs to zero.

  The derivative of the mantissa is `t * 2**-e` (JAX's custom rule); the exponent has a
  zero (float0) derivative.

  Raises:
    TypeError: for complex inputs.
  """
  x, = _inexact_args("frexp", x, allow_complex=False)
  return _frexp(x)


@custom_jvp
def _frexp(x):
  dt = _dtype(x)
  calc = dt if dt in (dtypes.float32, dtypes.float64) else dtypes.float32
  xc = lax.convert_element_type(x, calc)
  info = np.finfo(calc)
  nbits, nmant = calc.itemsize * 8, info.nmant
  idt, udt = np.dtype(f"int{nbits}"), np.dtype(f"uint{nbits}")
  # Scale subnormals into the normal range first.
  sub = lax.lt(lax.abs(xc), np.asarray(info.tiny, calc)[()])
  scaled = lax.select(sub, lax.mul(xc, np.asarray(2.0 ** nmant, calc)[()]), xc)
  bits = lax.bitcast_convert_type(scaled, udt)
  exp_bits = lax.bitwise_and(lax.shift_right_logical(bits, np.asarray(nmant, udt)[()]),
                             np.asarray((1 << (nbits - nmant - 1)) - 1, udt)[()])
  e = lax.sub(lax.convert_element_type(exp_bits, idt),
              np.asarray(info.maxexp - 2, idt)[()])
  e = lax.select(sub, lax.sub(e, np.asarray(nmant, idt)[()]), e)
  mant_bits = lax.bitwise_or(
      lax.bitwise_and(bits, np.asarray(~(((1 << (nbits - nmant - 1)) - 1) << nmant)
                                       & ((1 << nbits) - 1), udt)[()]),
      np.asarray((info.maxexp - 2) << nmant, udt)[()])
  m = lax.bitcast_convert_type(mant_bits, calc)
  special = lax.bitwise_or(lax.eq(xc, np.zeros((), calc)[()]),
                           lax.bitwise_not(lax.is_finite(xc)))
  m = lax.select(special, xc, m)
  e = lax.select(special, lax.broadcast_in_dim(np.zeros((), idt), _shape(e), ()), e)
  return lax.convert_element_type(m, dt), lax.convert_element_type(e, dtypes.int32)


@_frexp.defjvp
def _frexp_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  m, e = _frexp(x)
  m_dot = lax.mul(t, lax.exp2(lax.neg(lax.convert_element_type(e, _dtype(t)))))
  return (m, e), (m_dot, np.zeros(_shape(e), dtypes.float0))


def nan_to_num(x: ArrayLike, copy: bool = True, nan: ArrayLike = 0.0,
               posinf: ArrayLike | None = None, neginf: ArrayLike | None = None) -> Array:
  """NaN -> `nan`, +inf -> `posinf` (default: the dtype's max), -inf -> `neginf` (default:
  its lowest); complex values have both parts replaced. Non-float inputs are returned as
  they are."""
  x = _arr(x)
  dt = _dtype(x)
  if not dtypes.is_inexact(dt):
    return x
  if dtypes.is_complex(dt):
    re = nan_to_num(lax.real(x), nan=nan, posinf=posinf, neginf=neginf)
    im = nan_to_num(lax.imag(x), nan=nan, posinf=posinf, neginf=neginf)
    return lax.complex(re, im)
  info = dtypes.finfo(dt)
  posinf = info.max if posinf is None else posinf
  neginf = info.min if neginf is None else neginf
  out = where(isnan(x), asarray(nan, dt), x)
  out = where(isposinf(out), asarray(posinf, dt), out)
  out = where(isneginf(out), asarray(neginf, dt), out)
  return lax.convert_element_type(out, dt) if out.weak_type else out


def modf(x: ArrayLike, /) -> tuple[Array, Array]:
  """Fractional and integral parts, both with x's sign: `(x - trunc(x), trunc(x))`."""
  x, = _inexact_args("modf", x, allow_complex=False)
  whole = trunc(x)
  return lax.sub(x, whole), whole


def spacing(x: ArrayLike, /) -> Array:
  """The distance from |x| to the next larger representable number, with x's sign
  (NumPy's definition); NaN for inf and NaN."""
  x, = _inexact_args("spacing", x)
  if dtypes.is_complex(_dtype(x)):
    raise ValueError("jnp.spacing is not defined for complex inputs.")
  dt = _dtype(x)
  idt = np.dtype(f"int{dt.itemsize * 8}")
  ax = lax.abs(x)
  nxt = lax.bitcast_convert_type(lax.add(lax.bitcast_convert_type(ax, idt),
                                         np.ones((), idt)[()]), dt)
  out = lax.sub(nxt, ax)
  out = where(signbit(x), negative(out), out)
  return where(isfinite(x), out, full_like(x, np.nan))


pow = power
concat = concatenate


# ---------------------------------------------------------------------------
# More shape manipulation and creation


def _axis_tuple(axis, ndim: int, name: str) -> tuple[int, ...]:
  axis = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
  return tuple(_canon_axis(a, ndim, name) for a in axis)


def _slice_axis(x, start: int, stop: int, axis: int, stride: int = 1):
  if start == 0 and stop == _shape(x)[axis] and stride == 1:
    return x
  return lax.slice_in_dim(x, start, stop, stride, axis)


def flip(m: ArrayLike, axis: int | Sequence[int] | None = None) -> Array:
  """Reverses the order of elements along `axis` (all axes when None).

  Raises:
    ValueError: for an out-of-range axis.
  """
  m = _arr(m)
  axes = tuple(range(_ndim(m))) if axis is None else _axis_tuple(axis, _ndim(m), "flip")
  return lax.rev(m, tuple(sorted(set(axes)))) if axes else m


def fliplr(m: ArrayLike) -> Array:
  """Reverses axis 1 (left/right). Raises ValueError for fewer than 2 dimensions."""
  m = _arr(m)
  if _ndim(m) < 2:
    raise ValueError(f"fliplr requires an array of at least 2 dimensions, got {_shape(m)}.")
  return flip(m, 1)


def flipud(m: ArrayLike) -> Array:
  """Reverses axis 0 (up/down). Raises ValueError for 0-d input."""
  m = _arr(m)
  if _ndim(m) < 1:
    raise ValueError("flipud requires an array of at least 1 dimension, got a scalar.")
  return flip(m, 0)


def rot90(m: ArrayLike, k: int = 1, axes: tuple[int, int] = (0, 1)) -> Array:
  """Rotates by 90 degrees `k` times in the plane of `axes` (from the first axis towards
  the second), as numpy.rot90.

  Raises:
    ValueError: for fewer than 2 dimensions or equal axes.
  """
  m = _arr(m)
  nd = _ndim(m)
  if nd < 2:
    raise ValueError(f"rot90 requires its first argument to have ndim at least two, but got "
                     f"first argument of shape {_shape(m)}, which has ndim {nd}")
  ax1, ax2 = (_canon_axis(a, nd, "rot90") for a in axes)
  if ax1 == ax2:
    raise ValueError("Axes must be different")
  k = operator.index(k) % 4
  if k == 0:
    return m
  if k == 2:
    return flip(m, (ax1, ax2))
  perm = list(range(nd))
  perm[ax1], perm[ax2] = perm[ax2], perm[ax1]
  return transpose(flip(m, ax2), perm) if k == 1 else flip(transpose(m, perm), ax2)


def roll(a: ArrayLike, shift: ArrayLike | Sequence[int],
         axis: int | Sequence[int] | None = None) -> Array:
  """Rolls elements along `axis` by `shift` (elements leaving one end enter the other).

  Args:
    a: array `T[*s]`.
    shift: int or ints (one per axis, or broadcast); may be traced.
    axis: axis or axes; None rolls the flattened array and restores the shape.

  Returns:
    `T[*s]`.
  """
  a = _arr(a)
  if axis is None:
    return reshape(roll(ravel(a), shift, 0), _shape(a))
  axes = _axis_tuple(axis, _ndim(a), "roll")
  if isinstance(shift, Tracer):
    shifts = [shift] if _ndim(shift) == 0 else [shift[i] for i in range(_shape(shift)[0])]
  else:
    shifts = [int(s) for s in np.ravel(np.asarray(shift))]
  axes_b, shifts_b = (axes, shifts) if len(axes) == len(shifts) else (
      (axes * len(shifts), shifts * len(axes)) if 1 in (len(axes), len(shifts)) else
      (None, None))
  if axes_b is None:
    raise ValueError(f"roll: shift {shift} and axis {axis} do not broadcast.")
  for ax, s in zip(axes_b, shifts_b):
    n = _shape(a)[ax]
    if n == 0:
      continue
    if isinstance(s, Tracer):
      s = remainder(s, n)
      doubled = lax.concatenate([a, a], ax)
      start = lax.sub(np.asarray(n, _dtype(s))[()], lax.convert_element_type(s, _dtype(s)))
      a = lax.dynamic_slice_in_dim(doubled, start, n, ax)
    else:
      i = (-s) % n
      if i:
        a = lax.concatenate([_slice_axis(a, i, n, ax), _slice_axis(a, 0, i, ax)], ax)
  return a


def rollaxis(a: ArrayLike, axis: int, start: int = 0) -> Array:
  """Moves `axis` to before position `start` (NumPy's older spelling of moveaxis)."""
  a = _arr(a)
  nd = _ndim(a)
  axis = _canon_axis(axis, nd, "rollaxis")
  if not -nd <= start <= nd:
    raise ValueError(f"rollaxis: start {start} is out of range for dimension {nd}.")
  start = start % (nd + 1) if start < 0 else start
  if axis < start:
    start -= 1
  return moveaxis(a, axis, start)


def tile(A: ArrayLike, reps: int | Sequence[int]) -> Array:
  """`A` repeated `reps` times along each axis (reps and A's shape are left-padded with 1s
  to a common length).

  Returns:
    Array of shape `A.shape * reps` elementwise, A's dtype.
  """
  A = _arr(A)
  reps = (operator.index(reps),) if isinstance(reps, (int, np.integer)) else tuple(
      operator.index(r) for r in reps)
  nd = builtins.max(len(reps), _ndim(A))
  reps = (1,) * (nd - len(reps)) + reps
  shape = (1,) * (nd - _ndim(A)) + _shape(A)
  # Broadcast to [r0, s0, r1, s1, ...], then merge each pair.
  big = tuple(d for pair in zip(reps, shape) for d in pair)
  out = lax.broadcast_in_dim(reshape(A, shape), big, tuple(range(1, 2 * nd, 2)))
  return reshape(out, tuple(r * s for r, s in zip(reps, shape)))


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
  a = _arr(a)
  if axis is None:
    a, axis = ravel(a), 0
  if _ndim(a) == 0:
    a = reshape(a, (1,))
  axis = _canon_axis(axis, _ndim(a), "repeat")
  n = _shape(a)[axis]
  if isinstance(repeats, Tracer):
    if total_repeat_length is None:
      raise core.ConcretizationTypeError(
          "Abstract tracer value encountered where concrete value is expected: jnp.repeat "
          "needs static `repeats` to know the result's shape. Pass a static value for "
          "`repeats`, or a static `total_repeat_length`.")
    reps = broadcast_to(ravel(repeats), (n,))
    from stagecraft.numpy import reductions, sorting
    ends = reductions.cumsum(reps)
    idx = sorting.searchsorted(ends, arange(total_repeat_length), side="right")
    idx = minimum(idx, n - 1)
    return _take_axis(a, idx, axis)
  reps = np.ravel(np.asarray(repeats))
  if reps.size and not np.issubdtype(reps.dtype, np.integer):
    raise TypeError(f"repeat: repeats must be integers, got {reps.dtype}.")
  if np.any(reps < 0):
    raise ValueError(f"repeat: repeats may not contain negative values, got {repeats}.")
  if reps.size == 1:
    r = int(reps[0])
    shape = list(_shape(a))
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
    cur = _shape(out)[axis]
    if cur >= total_repeat_length:
      out = _slice_axis(out, 0, total_repeat_length, axis)
    elif cur:
      last = _slice_axis(out, cur - 1, cur, axis)
      out = concatenate([out, repeat(last, total_repeat_length - cur, axis)], axis)
    else:
      out = zeros(tuple(total_repeat_length if i == axis else d
                        for i, d in enumerate(_shape(out))), _dtype(out))
  return out


def _take_static(x, idx: np.ndarray, axis: int):
  """x gathered at the static indices `idx` (a 1-D host array) along `axis`: contiguous runs
  become slices, joined by one concatenate."""
  if idx.size == 0:
    return _slice_axis(x, 0, 0, axis)
  parts, start = [], 0
  for i in range(1, idx.size + 1):
    if i == idx.size or idx[i] != idx[i - 1] + 1:
      lo, hi = int(idx[start]), int(idx[i - 1]) + 1
      parts.append(_slice_axis(x, lo, hi, axis))
      start = i
  if len(parts) > 16:   # many runs: one gather instead of a long concatenate
    return _take_axis(x, array(idx.astype(np.int32)), axis)
  return parts[0] if len(parts) == 1 else lax.concatenate(parts, axis)


def _take_axis(x, idx, axis: int):
  """x at the (traced or concrete) in-range integer indices `idx[m]` along `axis`."""
  x = _arr(x)
  idx = _arr(idx)
  shape = list(_shape(x))
  shape[axis] = _shape(idx)[0]
  idx = lax.broadcast_in_dim(idx, tuple(shape), (axis,))
  return _take_along_axis(x, idx, axis)


def _take_along_axis(x, idx, axis: int):
  """`x` at the in-range indices `idx` along `axis` (one gather); `idx` has x's rank and
  broadcasts against x off `axis`."""
  from stagecraft.numpy.indexing import take_along_axis
  return take_along_axis(x, idx, axis=axis, mode="clip")


def _split(name: str, ary, indices_or_sections, axis: int) -> list[Array]:
  ary = _arr(ary)
  axis = _canon_axis(axis, _ndim(ary), name)
  size = _shape(ary)[axis]
  if isinstance(indices_or_sections, (tuple, list)) or (
      isinstance(indices_or_sections, (np.ndarray, Array)) and np.ndim(indices_or_sections)):
    bounds = [0] + [operator.index(_concrete(i, name, "indices_or_sections"))
                    for i in np.asarray(indices_or_sections).tolist()] + [size]
    bounds = [builtins.min(builtins.max(b if b >= 0 else b + size, 0), size) for b in bounds]
    pairs = [(bounds[i], builtins.max(bounds[i], bounds[i + 1]))
             for i in range(len(bounds) - 1)]
  else:
    sections = operator.index(_concrete(indices_or_sections, name, "indices_or_sections"))
    if sections <= 0:
      raise ValueError(f"{name}: number of sections must be larger than 0, got {sections}.")
    part, r = builtins.divmod(size, sections)
    if r and name != "array_split":
      raise ValueError(f"array split does not result in an equal division: rest is {r}")
    sizes = [part + 1] * r + [part] * (sections - r)
    starts = np.cumsum([0] + sizes)
    pairs = [(int(starts[i]), int(starts[i + 1])) for i in range(sections)]
  return [_slice_axis(ary, lo, hi, axis) for lo, hi in pairs]


def split(ary: ArrayLike, indices_or_sections: int | Sequence[int], axis: int = 0
          ) -> list[Array]:
  """Splits into equal sections (an int) or at the given indices along `axis`.

  Raises:
    ValueError: if an int number of sections does not divide the axis.
  """
  return _split("split", ary, indices_or_sections, axis)


def array_split(ary: ArrayLike, indices_or_sections: int | Sequence[int], axis: int = 0
                ) -> list[Array]:
  """Like `split`, but the sections may differ in size by one (the first ones larger)."""
  return _split("array_split", ary, indices_or_sections, axis)


def hsplit(ary: ArrayLike, indices_or_sections) -> list[Array]:
  """`split` along axis 1 (axis 0 for 1-D input)."""
  ary = _arr(ary)
  return _split("hsplit", ary, indices_or_sections, 1 if _ndim(ary) > 1 else 0)


def vsplit(ary: ArrayLike, indices_or_sections) -> list[Array]:
  """`split` along axis 0. Raises ValueError for fewer than 2 dimensions."""
  ary = _arr(ary)
  if _ndim(ary) < 2:
    raise ValueError("vsplit only works on arrays of 2 or more dimensions")
  return _split("vsplit", ary, indices_or_sections, 0)


def dsplit(ary: ArrayLike, indices_or_sections) -> list[Array]:
  """`split` along axis 2. Raises ValueError for fewer than 3 dimensions."""
  ary = _arr(ary)
  if _ndim(ary) < 3:
    raise ValueError("dsplit only works on arrays of 3 or more dimensions")
  return _split("dsplit", ary, indices_or_sections, 2)


def atleast_2d(*arys):
  """Each input viewed with at least 2 dimensions (1-D `[n]` becomes `[1, n]`)."""
  out = []
  for a in arys:
    a = _arr(a)
    out.append(reshape(a, (1,) * (2 - _ndim(a)) + _shape(a)) if _ndim(a) < 2 else a)
  return out[0] if len(out) == 1 else out


def atleast_3d(*arys):
  """Each input with at least 3 dimensions: `[n] -> [1, n, 1]`, `[m, n] -> [m, n, 1]`."""
  out = []
  for a in arys:
    a = _arr(a)
    s = _shape(a)
    if len(s) == 0:
      a = reshape(a, (1, 1, 1))
    elif len(s) == 1:
      a = reshape(a, (1, s[0], 1))
    elif len(s) == 2:
      a = reshape(a, (*s, 1))
    out.append(a)
  return out[0] if len(out) == 1 else out


def _stack_check(name, tup):
  if isinstance(tup, (Array, Tracer, np.ndarray)):
    return [tup[i] for i in range(_shape(tup)[0])] if not isinstance(tup, np.ndarray) else list(tup)
  if len(tup) == 0:
    raise ValueError(f"{name}: need at least one array to concatenate.")
  return list(tup)


def hstack(tup: Sequence[ArrayLike], dtype: Any = None) -> Array:
  """Concatenates along axis 1 (axis 0 for 1-D inputs)."""
  arrs = [atleast_1d(_arr(a)) for a in _stack_check("hstack", tup)]
  return concatenate(arrs, 0 if _ndim(arrs[0]) == 1 else 1, dtype=dtype)


def vstack(tup: Sequence[ArrayLike], dtype: Any = None) -> Array:
  """Concatenates along axis 0 after `atleast_2d`."""
  arrs = [atleast_2d(_arr(a)) for a in _stack_check("vstack", tup)]
  return concatenate(arrs, 0, dtype=dtype)


row_stack = vstack


def dstack(tup: Sequence[ArrayLike], dtype: Any = None) -> Array:
  """Concatenates along axis 2 after `atleast_3d`."""
  arrs = [atleast_3d(_arr(a)) for a in _stack_check("dstack", tup)]
  return concatenate(arrs, 2, dtype=dtype)


def column_stack(tup: Sequence[ArrayLike]) -> Array:
  """Stacks 1-D arrays as columns (`[n]` becomes `[n, 1]`), concatenating along axis 1."""
  arrs = []
  for a in _stack_check("column_stack", tup):
    a = _arr(a)
    arrs.append(reshape(a, (-1, 1)) if _ndim(a) < 2 else a)
  return concatenate(arrs, 1)


def unstack(x: ArrayLike, /, *, axis: int = 0) -> tuple[Array, ...]:
  """The slices of `x` along `axis`, as a tuple."""
  x = _arr(x)
  if _ndim(x) == 0:
    raise ValueError("Unstack requires arrays with rank > 0, however a scalar array was "
                     "passed.")
  axis = _canon_axis(axis, _ndim(x), "unstack")
  return tuple(squeeze(_slice_axis(x, i, i + 1, axis), axis)
               for i in range(_shape(x)[axis]))


def tri(N: int, M: int | None = None, k: int = 0, dtype: Any = None) -> Array:
  """`[N, M]` with ones at and below the k-th diagonal (`j <= i + k`), zeros elsewhere.
  Default dtype float32 (as JAX's numpy, also with x64)."""
  N = operator.index(_concrete(N, "tri", "N"))
  M = N if M is None else operator.index(_concrete(M, "tri", "M"))
  dt = dtypes.float32 if dtype is None else dtypes.canonicalize_dtype(dtype)
  rows = lax.broadcasted_iota(dtypes.int32, (N, M), 0)
  cols = lax.broadcasted_iota(dtypes.int32, (N, M), 1)
  mask = lax.ge(lax.add(rows, np.int32(k)), cols)
  return mask if dt == dtypes.bool_ else lax.convert_element_type(mask, dt)


def _tri_select(name, m, k, lower: bool):
  m = _arr(m)
  s = _shape(m)
  if len(s) < 2:
    raise ValueError(f"Argument to stagecraft.numpy.{name} must be at least 2D")
  mask = tri(s[-2], s[-1], k if lower else k - 1, dtypes.bool_)
  mask = lax.broadcast_in_dim(mask, s, (len(s) - 2, len(s) - 1))
  z = zeros_like(m)
  return lax.select(mask, m, z) if lower else lax.select(mask, z, m)


def tril(m: ArrayLike, k: int = 0) -> Array:
  """`m` with the elements above the k-th diagonal zeroed (on the last two axes).

  Raises:
    ValueError: for fewer than 2 dimensions."""
  return _tri_select("tril", m, k, True)


def triu(m: ArrayLike, k: int = 0) -> Array:
  """`m` with the elements below the k-th diagonal zeroed (on the last two axes).

  Raises:
    ValueError: for fewer than 2 dimensions."""
  return _tri_select("triu", m, k, False)


def diagonal(a: ArrayLike, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Array:
  """The `offset` diagonal of the planes given by `axis1` and `axis2`.

  Returns:
    `T[*rest, d]`: the other axes in order, then the diagonal (length
    `max(0, min(n1 + min(offset, 0), n2 - max(offset, 0)))`).

  Raises:
    ValueError: for fewer than 2 dimensions or equal axes.

  Algorithm: on the flattened `[n1 * n2]` plane the diagonal is one strided slice (stride
  `n2 + 1`), so no gather is needed.
  """
  a = _arr(a)
  nd = _ndim(a)
  if nd < 2:
    raise ValueError("diagonal requires an array of at least two dimensions.")
  ax1, ax2 = _canon_axis(axis1, nd, "diagonal"), _canon_axis(axis2, nd, "diagonal")
  if ax1 == ax2:
    raise ValueError("axis1 and axis2 cannot be the same")
  offset = operator.index(_concrete(offset, "diagonal", "offset"))
  a = moveaxis(a, (ax1, ax2), (-2, -1))
  *rest, n1, n2 = _shape(a)
  d = builtins.max(0, builtins.min(n1 + builtins.min(offset, 0), n2 - builtins.max(offset, 0)))
  if d == 0:
    return zeros((*rest, 0), _dtype(a)) if not a.weak_type else reshape(
        _slice_axis(reshape(a, (*rest, n1 * n2)), 0, 0, len(rest)), (*rest, 0))
  flat = reshape(a, (*rest, n1 * n2))
  start = offset if offset >= 0 else -offset * n2
  return lax.slice_in_dim(flat, start, start + (d - 1) * (n2 + 1) + 1, n2 + 1, len(rest))


def diag(v: ArrayLike, k: int = 0) -> Array:
  """For 1-D `v` of length n: the `[n+|k|, n+|k|]` matrix with `v` on the k-th diagonal;
  for 2-D `v`: its k-th diagonal.

  Raises:
    ValueError: for inputs that are not 1-D or 2-D.
  """
  v = _arr(v)
  k = operator.index(_concrete(k, "diag", "k"))
  if _ndim(v) == 2:
    return diagonal(v, k)
  if _ndim(v) != 1:
    raise ValueError("diag input must be 1d or 2d")
  n = _shape(v)[0] + builtins.abs(k)
  # out[i, i + k] = v[i] (k >= 0) and out[j - k, j] = v[j] (k < 0): v padded at the end,
  # broadcast along the rows or the columns, masked to the diagonal.
  vp = lax.pad(v, _c(v, 0), ((0, builtins.abs(k), 0),))
  vb = lax.broadcast_in_dim(vp, (n, n), (0,) if k >= 0 else (1,))
  rows = lax.broadcasted_iota(dtypes.int32, (n, n), 0)
  cols = lax.broadcasted_iota(dtypes.int32, (n, n), 1)
  mask = lax.eq(lax.add(rows, np.int32(k)), cols)
  return lax.select(mask, vb, zeros_like(vb))


def diagflat(v: ArrayLike, k: int = 0) -> Array:
  """`diag` of the flattened input."""
  return diag(ravel(_arr(v)), k)


def trace(a: ArrayLike, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None,
          out: None = None) -> Array:
  """Sum along the `offset` diagonal of the planes `(axis1, axis2)`; dtype as `sum` (small
  integers and bool accumulate in the default integer)."""
  if out is not None:
    raise NotImplementedError("The 'out' argument to jnp.trace is not supported.")
  from stagecraft.numpy import reductions
  return reductions.sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


def meshgrid(*xi: ArrayLike, copy: bool = True, sparse: bool = False,
             indexing: str = "xy") -> list[Array]:
  """Coordinate arrays from 1-D coordinate vectors `x_i[n_i]`.

  Returns:
    One array per input, each `[n_1, ..., n_k]` for `indexing='ij'` (`[n_2, n_1, n_3...]`
    for 'xy'); with `sparse`, size 1 along every axis but its own.

  Raises:
    ValueError: for inputs that are not 1-D, `copy=False`, or another `indexing`.
  """
  args = [_arr(x) for x in xi]
  if not copy:
    raise ValueError("stagecraft.numpy.meshgrid only supports copy=True")
  if indexing not in ("xy", "ij"):
    raise ValueError(f"Valid values for indexing are 'xy' and 'ij', got {indexing}")
  if any(_ndim(a) != 1 for a in args):
    raise ValueError(f"Arguments to stagecraft.numpy.meshgrid must be 1D, got shapes "
                     f"{[_shape(a) for a in args]}")
  if indexing == "xy" and len(args) >= 2:
    args[0], args[1] = args[1], args[0]
  shape = [1 if sparse else _shape(a)[0] for a in args]
  out = []
  for i, a in enumerate(args):
    s = [*shape[:i], _shape(a)[0], *shape[i + 1:]] if sparse else shape
    out.append(lax.broadcast_in_dim(a, tuple(s), (i,)))
  if indexing == "xy" and len(args) >= 2:
    out[0], out[1] = out[1], out[0]
  return out


def indices(dimensions: Sequence[int], dtype: Any = None, sparse: bool = False):
  """The index grids of an array of shape `dimensions`: `int32[len(dims), *dims]` (a tuple of
  broadcastable arrays with `sparse`)."""
  dt = dtypes.default_int_dtype() if dtype is None else dtypes.canonicalize_dtype(dtype)
  dims = tuple(operator.index(_concrete(d, "indices", "dimensions")) for d in dimensions)
  n = len(dims)
  out = []
  for i, d in enumerate(dims):
    s = (1,) * i + (d,) + (1,) * (n - i - 1) if sparse else dims
    out.append(lax.broadcasted_iota(dt, s, i))
  if sparse:
    return tuple(out)
  return stack(out, 0) if out else zeros((0,), dt)


def empty(shape: Any, dtype: Any = None) -> Array:
  """Like `zeros` (arrays are immutable, so "uninitialized" memory would be useless)."""
  return zeros(shape, dtype)


def empty_like(prototype: ArrayLike, dtype: Any = None, shape: Any = None) -> Array:
  """Like `zeros_like`."""
  return zeros_like(prototype, dtype, shape)


def logspace(start: ArrayLike, stop: ArrayLike, num: int = 50, endpoint: bool = True,
             base: ArrayLike = 10.0, dtype: Any = None, axis: int = 0) -> Array:
  """`base ** linspace(start, stop, num, endpoint)`; dtype: the inexact promotion of
  start and stop unless given."""
  num = operator.index(_concrete(num, "logspace", "num"))
  dt = dtypes.canonicalize_dtype(dtype) if dtype is not None else _to_inexact(
      dtypes.result_type(start, stop))
  calc = _to_inexact(dt)
  lin = linspace(asarray(start, calc), asarray(stop, calc), num, endpoint=endpoint, axis=axis)
  return lax.convert_element_type(power(_arr(base) if not isinstance(base, (int, float))
                                        else base, lin), dt)


def geomspace(start: ArrayLike, stop: ArrayLike, num: int = 50, endpoint: bool = True,
              dtype: Any = None, axis: int = 0) -> Array:
  """Numbers spaced evenly on a log scale from `start` to `stop` (same sign)."""
  num = operator.index(_concrete(num, "geomspace", "num"))
  dt = dtypes.canonicalize_dtype(dtype) if dtype is not None else _to_inexact(
      dtypes.result_type(start, stop))
  calc = _to_inexact(dt)
  start, stop = asarray(start, calc), asarray(stop, calc)
  sgn = sign(start)
  res = multiply(sgn, logspace(log10(divide(start, sgn)), log10(divide(stop, sgn)), num,
                               endpoint=endpoint, base=10.0, dtype=calc, axis=0))
  if axis != 0:
    res = moveaxis(res, 0, axis)
  return lax.convert_element_type(res, dt)


def _to_inexact(dt):
  return dt if dtypes.is_inexact(dt) else dtypes.default_float_dtype()


def diff(a: ArrayLike, n: int = 1, axis: int = -1, prepend: ArrayLike | None = None,
         append: ArrayLike | None = None) -> Array:
  """The n-th discrete difference along `axis`: `out[i] = a[i+1] - a[i]`, applied `n`
  times (`!=` for bool).

  Raises:
    ValueError: for negative `n` or 0-d input.
  """
  arr = _arr(a)
  n = operator.index(_concrete(n, "diff", "n"))
  if n == 0:
    return arr
  if n < 0:
    raise ValueError(f"order must be non-negative but got {n}")
  if _ndim(arr) == 0:
    raise ValueError(f"diff requires input that is at least one dimensional; got {a}")
  axis = _canon_axis(axis, _ndim(arr), "diff")

  def part(extra):
    extra = _arr(extra)
    if _ndim(extra) == 0:
      extra = broadcast_to(extra, tuple(1 if i == axis else d
                                        for i, d in enumerate(_shape(arr))))
    return extra

  parts = ([part(prepend)] if prepend is not None else []) + [arr] + (
      [part(append)] if append is not None else [])
  if len(parts) > 1:
    arr = concatenate(parts, axis)
  for _ in range(n):
    m = _shape(arr)[axis]
    hi, lo = _slice_axis(arr, 1, m, axis), _slice_axis(arr, 0, builtins.max(m - 1, 0), axis)
    arr = not_equal(hi, lo) if _dtype(arr) == dtypes.bool_ else subtract(hi, lo)
  return arr


def ediff1d(ary: ArrayLike, to_end: ArrayLike | None = None,
            to_begin: ArrayLike | None = None) -> Array:
  """Differences of consecutive elements of the flattened array, with optional values
  (cast to its dtype) before and after."""
  arr = ravel(_arr(ary))
  m = _shape(arr)[0]
  result = lax.sub(_slice_axis(arr, 1, m, 0), _slice_axis(arr, 0, builtins.max(m - 1, 0), 0))
  if to_begin is not None:
    result = concatenate([ravel(astype(_arr(to_begin), _dtype(arr))), result])
  if to_end is not None:
    result = concatenate([result, ravel(astype(_arr(to_end), _dtype(arr)))])
  return result


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
    ValueError: for negative widths, an unknown mode, or padding an empty axis in a mode
      that reads from it.
    NotImplementedError: for a callable mode.
  """
  arr = _arr(array)
  nd = _ndim(arr)
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
    if _shape(arr)[i] == 0:
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
  cv = _arr(constant_values)
  cv = lax.convert_element_type(cv, _dtype(arr), weak_type=arr.weak_type)
  nd = _ndim(arr)
  if _ndim(cv) == 0:
    return lax.pad(arr, cv, tuple((lo, hi, 0) for lo, hi in widths))
  if _ndim(cv) > 2 or _shape(cv)[-1] not in (1, 2):
    raise ValueError(f"jnp.pad: constant_values has unsupported shape {_shape(cv)}. If the "
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
  n = _shape(arr)[i]
  lrep, lrem = builtins.divmod(before, n)
  rrep, rrem = builtins.divmod(after, n)
  parts = ([_slice_axis(arr, n - lrem, n, i)] if lrem else []) + [arr] * (lrep + rrep + 1) + (
      [_slice_axis(arr, 0, rrem, i)] if rrem else [])
  return lax.concatenate(parts, i) if len(parts) > 1 else arr


def _pad_reflect(arr, i, before, after, mode, reflect_type):
  # As numpy: pad in chunks no longer than the (growing) array allows.
  n = _shape(arr)[i]
  offset = 1 if (mode == "reflect" and n > 1) else 0
  for is_before, padding in ((True, before), (False, after)):
    m = _shape(arr)[i]
    edge = _slice_axis(arr, 0, 1, i) if is_before else _slice_axis(arr, m - 1, m, i)
    while padding > 0:
      m = _shape(arr)[i]
      cur = builtins.min(padding, n - offset)
      padding -= cur
      if is_before:
        x = _slice_axis(arr, offset, offset + cur, i)
      else:
        stop = m if (mode == "symmetric" or n == 1) else m - 1
        x = _slice_axis(arr, stop - cur, stop, i)
      x = flip(x, i)
      if reflect_type == "odd":
        x = subtract(multiply(_c(edge, 2), edge), x)
        if n > 1:
          k = _shape(x)[i]
          edge = _slice_axis(x, 0, 1, i) if is_before else _slice_axis(x, k - 1, k, i)
      arr = lax.concatenate([x, arr] if is_before else [arr, x], i)
  return arr


def _pad_from_edges(arr, i, before, after, mode, kwargs):
  n = _shape(arr)[i]
  nd = _ndim(arr)
  if mode == "edge":
    lo_v, hi_v = _slice_axis(arr, 0, 1, i), _slice_axis(arr, n - 1, n, i)
  elif mode == "linear_ramp":
    # As numpy: linspace(end, edge, w, endpoint=False) before, and its reverse after.
    ev = np.broadcast_to(np.asarray(kwargs.get("end_values", 0)), (nd, 2))
    calc = _to_inexact(_dtype(arr))
    out = []
    for is_before, w in ((True, before), (False, after)):
      edge = astype(_slice_axis(arr, 0, 1, i) if is_before else _slice_axis(arr, n - 1, n, i),
                    calc)
      end = asarray(ev[i][0 if is_before else 1], calc)
      shape = tuple(w if j == i else d for j, d in enumerate(_shape(edge)))
      t = divide(lax.broadcasted_iota(calc, shape, i), np.asarray(builtins.max(w, 1), calc))
      ramp = add(end, multiply(t, subtract(edge, end)))
      ramp = ramp if is_before else flip(ramp, i)
      if not dtypes.is_inexact(_dtype(arr)):
        ramp = floor(ramp)
      out.append(lax.convert_element_type(ramp, _dtype(arr), weak_type=arr.weak_type))
    return lax.concatenate([out[0], arr, out[1]], i)
  else:
    from stagecraft.numpy import reductions
    fn = {"maximum": reductions.max, "minimum": reductions.min, "mean": reductions.mean}[mode]
    sl = kwargs.get("stat_length")
    if sl is None:
      lo_v = hi_v = fn(arr, axis=i, keepdims=True)
    else:
      lb, la = _pad_pairs(sl, nd, "stat_length")[i]
      if lb == 0 or la == 0:
        raise ValueError("stat_length of 0 yields no value for padding")
      lo_v = fn(_slice_axis(arr, 0, builtins.min(lb, n), i), axis=i, keepdims=True)
      hi_v = fn(_slice_axis(arr, n - builtins.min(la, n), n, i), axis=i, keepdims=True)
    if dtypes.is_integer(_dtype(arr)):
      lo_v, hi_v = round(lo_v), round(hi_v)
    lo_v = lax.convert_element_type(lo_v, _dtype(arr), weak_type=arr.weak_type)
    hi_v = lax.convert_element_type(hi_v, _dtype(arr), weak_type=arr.weak_type)
  parts = []
  if before:
    parts.append(repeat(lo_v, before, i))
  parts.append(arr)
  if after:
    parts.append(repeat(hi_v, after, i))
  return lax.concatenate(parts, i)


# ---------------------------------------------------------------------------
# More of the NumPy surface: insertion/deletion, selection, calculus helpers, bit packing,
# host I/O wrappers.


def append(arr: ArrayLike, values: ArrayLike, axis: int | None = None) -> Array:
  """`values` appended to `arr` along `axis` (both flattened when None)."""
  arr, values = _arr(arr), _arr(values)
  if axis is None:
    return concatenate([ravel(arr), ravel(values)], 0)
  return concatenate([arr, values], axis)


def copy(a: ArrayLike, order: str | None = None) -> Array:
  """A copy of `a` (Arrays are immutable, so this is `asarray(a)`)."""
  return array(a, copy=True)


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
  a = _arr(arr)
  if axis is None:
    a, axis = ravel(a), 0
  axis = _canon_axis(axis, _ndim(a), "delete")
  n = _shape(a)[axis]
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
  a = _arr(arr)
  if axis is None:
    a, axis = ravel(a), 0
  axis = _canon_axis(axis, _ndim(a), "insert")
  n = _shape(a)[axis]
  idx = _static_positions(obj, n, "insert").astype(np.int64)
  vals = lax.convert_element_type(_arr(values), _dtype(a), weak_type=a.weak_type)
  if _ndim(vals) < _ndim(a):
    vals = reshape(vals, (1,) * (_ndim(a) - _ndim(vals)) + _shape(vals))
  if idx.ndim == 0:
    i = int(idx)
    if not -n <= i <= n:
      raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
    i = i + n if i < 0 else i
    vals = moveaxis(vals, 0, axis)
    shape = tuple(_shape(vals)[axis] if k == axis else d for k, d in enumerate(_shape(a)))
    vals = broadcast_to(vals, shape)
    return concatenate([_slice_axis(a, 0, i, axis), vals, _slice_axis(a, i, n, axis)], axis)
  idx = idx.ravel()
  if idx.size and (idx.min() < -n or idx.max() > n):
    raise IndexError(f"index {idx[(idx < -n) | (idx > n)][0]} is out of bounds for axis "
                     f"{axis} with size {n}")
  idx = np.where(idx < 0, idx + n, idx)
  k = idx.size
  shape = tuple(k if j == axis else d for j, d in enumerate(_shape(a)))
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
  choices = [_arr(c) for c in promote_dtypes(_arr(default), *[_arr(c) for c in choicelist])]
  conds = [_to_bool(_arr(c)) for c in condlist]
  out = choices[0]
  for c, v in zip(conds[::-1], choices[:0:-1]):
    out = where(c, v, out)
  return _arr(out)


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
  a = _arr(a)
  choices = [_arr(c) for c in choices]
  if not dtypes.is_integer(_dtype(a)):
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
  a, val = _arr(a), _arr(val)
  if _ndim(a) < 2:
    raise ValueError("array must be at least 2-d")
  if _ndim(a) > 2 and not builtins.all(d == _shape(a)[0] for d in _shape(a)[1:]):
    raise ValueError("All dimensions of input must be of equal length")
  n = builtins.min(_shape(a))
  val = lax.convert_element_type(ravel(val), _dtype(a))
  reps = -(-n // builtins.max(_shape(val)[0], 1))
  val = _slice_axis(tile(val, reps), 0, n, 0) if _shape(val)[0] else zeros((n,), _dtype(a))
  # The diagonal of the flattened array has a fixed stride; gather val there.
  stride = int(np.sum(np.cumprod((1,) + _shape(a)[:0:-1])))
  flat_pos = np.arange(n) * stride
  size = math.prod(_shape(a))
  is_diag = np.zeros(size, bool)
  is_diag[flat_pos] = True
  src = np.zeros(size, np.int64)
  src[flat_pos] = np.arange(n)
  vals = _take_static(val, src, 0) if n else zeros((size,), _dtype(a))
  return reshape(where(array(is_diag), vals, ravel(a)), _shape(a))


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
  a, *spacing = (_arr(v) for v in promote_dtypes_inexact(f, *varargs))

  def along(a, h, ax):
    n = _shape(a)[ax]
    sl = lambda lo, hi: _slice_axis(a, lo, hi, ax)  # noqa: E731
    upper = subtract(sl(1, 2), sl(0, 1))
    lower = subtract(sl(n - 1, n), sl(n - 2, n - 1))
    if _ndim(h) == 0:
      inner = divide(multiply(subtract(sl(2, n), sl(0, n - 2)), 0.5), h)
      upper, lower = divide(upper, h), divide(lower, h)
    elif _ndim(h) == 1:
      if _shape(h)[0] != n:
        raise ValueError("Spacing arrays must have the same length as the dimension along "
                         "which the gradient is calculated.")
      h = reshape(h, tuple(n if i == ax else 1 for i in range(_ndim(a))))
      sx = lambda lo, hi: _slice_axis(h, lo, hi, ax)  # noqa: E731
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

  axes = tuple(range(_ndim(a))) if axis is None else _axis_tuple(axis, _ndim(a), "gradient")
  if not axes:
    return []
  if builtins.min(_shape(a)[i] for i in axes) < 2:
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
  from stagecraft.numpy import reductions
  if x is None:
    y, = (_arr(v) for v in promote_dtypes_inexact(y))
    d = _arr(dx)
    if _ndim(d) > 0:
      d = moveaxis(reshape(d, (1,) * (_ndim(y) - _ndim(d)) + _shape(d)), axis, -1)
  else:
    y, x = (_arr(v) for v in promote_dtypes_inexact(y, x))
    d = diff(x) if _ndim(x) == 1 else moveaxis(diff(x, axis=axis), axis, -1)
  y = moveaxis(y, axis, -1)
  m = _shape(y)[-1]
  if _ndim(d) == 0 or _shape(d)[-1] == 1:
    d0 = d if _ndim(d) == 0 else d[..., 0]
    ends = add(_slice_axis(y, 0, 1, _ndim(y) - 1), _slice_axis(y, m - 1, m, _ndim(y) - 1))
    return multiply(d0, subtract(reductions.sum(y, -1), multiply(0.5, squeeze(ends, -1))))
  mid = add(_slice_axis(y, 1, m, _ndim(y) - 1), _slice_axis(y, 0, m - 1, _ndim(y) - 1))
  return multiply(0.5, reductions.sum(multiply(d, mid), -1))


def unwrap(p: ArrayLike, discont: ArrayLike | None = None, axis: int = -1,
           period: ArrayLike = 2 * np.pi) -> Array:
  """`p` with jumps larger than `discont` (default period/2) along `axis` replaced by
  their `period`-complement.

  Raises:
    ValueError: for complex input.
  """
  from stagecraft.numpy import reductions
  p, period = (_arr(v) for v in promote_dtypes(p, period))
  if dtypes.is_complex(_dtype(p)):
    raise ValueError("jnp.unwrap does not support complex inputs.")
  axis = _canon_axis(axis, _ndim(p), "unwrap")
  n = _shape(p)[axis]
  if n == 0:
    return p
  if discont is None:
    discont = divide(period, 2)
  interval = floor_divide(period, 2) if dtypes.is_integer(_dtype(p)) else divide(period, 2)
  dd = diff(p, axis=axis)
  ddmod = subtract(remainder(add(dd, interval), period), interval)
  ddmod = where(logical_and(equal(ddmod, negative(interval)), greater(dd, 0)), interval, ddmod)
  fix = where(less(absolute(dd), discont), 0, subtract(ddmod, dd))
  return concatenate([_slice_axis(p, 0, 1, axis),
                      add(_slice_axis(p, 1, n, axis), reductions.cumsum(fix, axis=axis))], axis)


def resize(a: ArrayLike, new_shape: int | Sequence[int]) -> Array:
  """`a` flattened, repeated cyclically to fill `new_shape`."""
  arr = ravel(_arr(a))
  shape = _canonical_shape(new_shape, "new_shape")
  size = math.prod(shape)
  if _shape(arr)[0] == 0 or size == 0:
    return zeros(shape, _dtype(arr))
  reps = -(-size // _shape(arr)[0])
  return reshape(_slice_axis(tile(arr, reps), 0, size, 0), shape)


def i0(x: ArrayLike, /) -> Array:
  """The modified Bessel function of the first kind, order 0: `exp(|x|) * i0e(|x|)`.

  Its derivative is 0 at `x == 0` (JAX's custom rule: `|x|` has no derivative there, and
  `i0` is even, so its derivative vanishes at 0).

  Raises:
    ValueError: for complex input.
  """
  x, = promote_dtypes_inexact(x)
  x = _arr(x)
  if not dtypes.is_float(_dtype(x)):
    raise ValueError(f"Unsupported input type to stagecraft.numpy.i0: {_dtype(x)}")
  return _i0(x)


@custom_jvp
def _i0(x):
  ax = lax.abs(x)
  return lax.mul(lax.exp(ax), lax.bessel_i0e(ax))


@_i0.defjvp
def _i0_jvp(primals, tangents):
  from stagecraft.api import jvp
  (x,), (t,) = primals, tangents
  out, t_out = jvp(_i0.fun, (x,), (t,))
  return out, lax.select(lax.eq(x, _c(x, 0)), _full_c(t_out, 0), t_out)


def nextafter(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """The next representable float after x1 towards x2, elementwise."""
  x1, x2 = _inexact_args("nextafter", x1, x2, allow_complex=False)
  return lax.nextafter(x1, x2)


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


def iterable(y: Any) -> bool:
  """Whether `y` can be iterated (numpy.iterable)."""
  return np.iterable(y)


get_printoptions, printoptions, set_printoptions = (np.get_printoptions, np.printoptions,
                                                    np.set_printoptions)


def array_repr(arr: ArrayLike, max_line_width=None, precision=None, suppress_small=None):
  """NumPy's `array_repr` of the array's host value."""
  return np.array_repr(np.asarray(arr), max_line_width, precision, suppress_small)


def array_str(a: ArrayLike, max_line_width=None, precision=None, suppress_small=None):
  """NumPy's `array_str` of the array's host value."""
  return np.array_str(np.asarray(a), max_line_width, precision, suppress_small)


def block(arrays: Any) -> Array:
  """An array assembled from nested lists of blocks (numpy.block): the innermost lists
  join along the last axis, the outer ones along earlier axes.

  Raises:
    ValueError: for empty lists or inconsistent nesting depths.
  """
  def depth(x):
    if isinstance(x, list):
      if not x:
        raise ValueError("Lists cannot be empty")
      ds = {depth(v) for v in x}
      if len(ds) != 1:
        raise ValueError("List depths are mismatched")
      return 1 + ds.pop()
    return 0

  d = depth(arrays)
  if d == 0:
    return _arr(arrays)
  leaves = []

  def collect(x):
    if isinstance(x, list):
      for v in x:
        collect(v)
    else:
      leaves.append(_arr(x))

  collect(arrays)
  nd = builtins.max(d, *(_ndim(v) for v in leaves))

  def build(x, level):
    if not isinstance(x, list):
      x = _arr(x)
      return reshape(x, (1,) * (nd - _ndim(x)) + _shape(x))
    return concatenate([build(v, level + 1) for v in x], axis=nd - d + level)

  return build(arrays, 0)


def piecewise(x: ArrayLike, condlist: Any, funclist: Sequence[Any], *args, **kw) -> Array:
  """`funclist[i](x)` (or the constant `funclist[i]`) where `condlist[i]` is the first true
  condition; an extra last function is the default (else 0).

  NB: every function is evaluated on the whole array and the results are selected
  (JAX's numpy maps lax.switch over the elements); functions must be elementwise.

  Raises:
    ValueError: for a wrong number of functions.
  """
  x = _arr(x)
  conds = condlist if isinstance(condlist, (list, tuple)) else [condlist]
  if isinstance(condlist, (Array, Tracer, np.ndarray)) and _ndim(condlist) == _ndim(x) + 1:
    conds = [condlist[i] for i in range(_shape(condlist)[0])]
  nc, nf = len(conds), len(funclist)
  if nf == nc + 1:
    funcs = list(funclist[-1:]) + list(funclist[:-1])
  elif nf == nc:
    funcs = [0] + list(funclist)
  else:
    raise ValueError(f"with {nc} condition(s), either {nc} or {nc + 1} functions are "
                     f"expected; got {nf}")
  dt = _dtype(x)
  vals = [lax.convert_element_type(_arr(f(x, *args, **kw)) if callable(f) else full_like(x, f),
                                   dt) for f in funcs]
  vals = [broadcast_to(v, _shape(x)) for v in vals]
  out = vals[0]
  for c, v in zip(conds[::-1], vals[:0:-1]):
    out = lax.select(broadcast_to(_to_bool(_arr(c)), _shape(x)), v, out)
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
  cond = _to_bool(_arr(condition))
  a = _arr(a)
  if _ndim(cond) != 1:
    raise ValueError("condition must be a 1D array")
  if axis is None:
    a, axis = ravel(a), 0
  axis = _canon_axis(axis, _ndim(a), "compress")
  n = _shape(a)[axis]
  m = _shape(cond)[0]
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
  pos = _slice_axis(pos, 0, builtins.min(size, n), 0)
  if size > n:
    pos = lax.pad(pos, np.int32(0), ((0, size - n, 0),))
  out_ = _take_axis(a, pos, axis) if size else _slice_axis(a, 0, 0, axis)
  valid = lax.lt(lax.iota(dtypes.int32, size), count)
  valid = lax.broadcast_in_dim(valid, _shape(out_), (axis,))
  return where(valid, out_, lax.convert_element_type(_arr(fill_value), _dtype(out_)))


def extract(condition: ArrayLike, arr: ArrayLike, *, size: int | None = None,
            fill_value: ArrayLike = 0) -> Array:
  """The elements of the flattened `arr` where the flattened `condition` is true (see
  `compress`)."""
  return compress(ravel(_arr(condition)), ravel(_arr(arr)), size=size, fill_value=fill_value)


def apply_over_axes(func: Any, a: ArrayLike, axes: Sequence[int]) -> Array:
  """`func(a, axis)` applied for each axis in turn, keeping the rank (a reduced axis is
  re-inserted with size 1)."""
  a = _arr(a)
  for ax in axes:
    b = _arr(func(a, ax))
    a = b if _ndim(b) == _ndim(a) else expand_dims(b, ax)
  return a


def fromfunction(function: Any, shape: Any, *, dtype: Any = float, **kwargs):
  """`function(*indices(shape, dtype))`: the function is called once on the index grids."""
  return function(*indices(shape, dtype=dtype), **kwargs)


def frombuffer(buffer: Any, dtype: Any = float, count: int = -1, offset: int = 0) -> Array:
  """An Array from a bytes-like buffer (`numpy.frombuffer`, then copied to the device)."""
  return array(np.frombuffer(buffer, dtype=dtype, count=count, offset=offset))


def fromstring(string: str, dtype: Any = float, count: int = -1, *, sep: str) -> Array:
  """An Array from text data (`numpy.fromstring` with a separator)."""
  return array(np.fromstring(string, dtype=dtype, count=count, sep=sep))


def fromiter(*args, **kwargs):
  """Not supported: iterators may be impure; use `array(list(iterable))`."""
  raise NotImplementedError("jnp.fromiter() is not implemented because it may be "
                            "non-pure and thus unsafe for use with JIT and other JAX "
                            "transformations. Consider using jnp.asarray(np.fromiter(...)) "
                            "instead.")


def fromfile(*args, **kwargs):
  """Not supported: reading files is impure; use `asarray(numpy.fromfile(...))`."""
  raise NotImplementedError("jnp.fromfile() is not implemented because it may be non-pure "
                            "and thus unsafe for use with JIT and other JAX transformations. "
                            "Consider using jnp.asarray(np.fromfile(...)) instead.")


def load(file: Any, *args, **kwargs):
  """`numpy.load`; arrays come back as Arrays."""
  out = np.load(file, *args, **kwargs)
  return asarray(out) if isinstance(out, np.ndarray) and out.dtype != object_dtype else out


save, savez = np.save, np.savez


def packbits(a: ArrayLike, axis: int | None = None, bitorder: str = "big") -> Array:
  """Packs the truth values of `a` into uint8 bytes along `axis` (flattened when None),
  zero-padding to a multiple of 8.

  Raises:
    TypeError: for non-integer/bool input. ValueError: for a bad `bitorder`.
  """
  arr = _arr(a)
  if not (dtypes.is_integer(_dtype(arr)) or _dtype(arr) == dtypes.bool_):
    raise TypeError("Expected an input array of integer or boolean data type")
  if bitorder not in ("little", "big"):
    raise ValueError("'order' must be either 'little' or 'big'")
  arr = lax.convert_element_type(_to_bool(arr), dtypes.uint8)
  if axis is None:
    arr, axis = ravel(arr), 0
  arr = swapaxes(arr, axis, -1)
  rem = _shape(arr)[-1] % 8
  if rem:
    arr = lax.pad(arr, np.uint8(0), [(0, 0, 0)] * (_ndim(arr) - 1) + [(0, 8 - rem, 0)])
  arr = reshape(arr, _shape(arr)[:-1] + (_shape(arr)[-1] // 8, 8))
  bits = np.arange(8, dtype=np.uint8)[::-1 if bitorder == "big" else 1].copy()
  shifted = lax.shift_left(arr, lax.broadcast_in_dim(array(bits), _shape(arr),
                                                     (_ndim(arr) - 1,)))
  packed = lax.convert_element_type(lax.reduce_sum(lax.convert_element_type(
      shifted, dtypes.int32), (_ndim(arr) - 1,)), dtypes.uint8)
  return swapaxes(packed, axis, -1)


def unpackbits(a: ArrayLike, axis: int | None = None, count: int | None = None,
               bitorder: str = "big") -> Array:
  """The bits of the uint8 array `a` as a uint8 array of 0s and 1s, along `axis`
  (flattened when None); `count` keeps (or zero-pads to) that many bits.

  Raises:
    TypeError: for non-uint8 input. ValueError: for a bad `bitorder`.
  """
  arr = _arr(a)
  if _dtype(arr) != dtypes.uint8:
    raise TypeError("Expected an input array of unsigned byte data type")
  if bitorder not in ("little", "big"):
    raise ValueError("'order' must be either 'little' or 'big'")
  if axis is None:
    arr, axis = ravel(arr), 0
  arr = swapaxes(arr, axis, -1)
  bits = (np.uint8(1) << np.arange(8, dtype=np.uint8))[::-1 if bitorder == "big" else 1].copy()
  shape = (*_shape(arr), 8)
  xb = lax.broadcast_in_dim(arr, shape, tuple(range(_ndim(arr))))
  bb = lax.broadcast_in_dim(array(bits), shape, (_ndim(arr),))
  out = lax.convert_element_type(lax.ne(lax.bitwise_and(xb, bb), np.uint8(0)), dtypes.uint8)
  out = reshape(out, shape[:-2] + (-1,))
  if count is not None:
    m = _shape(out)[-1]
    if count > m:
      out = lax.pad(out, np.uint8(0), [(0, 0, 0)] * (_ndim(out) - 1) + [(0, count - m, 0)])
    else:
      out = _slice_axis(out, 0, count, _ndim(out) - 1)
  return swapaxes(out, axis, -1)
