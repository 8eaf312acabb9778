"""The NumPy API on stagecraft primitives: creation, promotion and broadcasting, ufuncs, shape
manipulation. Semantics, default dtypes and promotion follow `jax.numpy`; this module composes
primitives and registers no rules."""
from __future__ import annotations

import builtins
import math
import operator
from typing import Any, Sequence

import numpy as np

from stagecraft import core, dtypes, lax
from stagecraft.core import Tracer
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
    dtype: the result dtype (canonicalized; default: inferred as jax.numpy does — Python
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
  """Evenly spaced values in [start, stop) with `step` (all concrete, as in jax.numpy).

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


def _no_promote(*args):   # logical ops convert each operand to bool first, as jax.numpy
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
  (`integer_pow`), as jax.numpy does; integer bases with integer array exponents use
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
  x, = promote_dtypes_inexact(x)    # integers round to floats, as jax.numpy.rint
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

  Args:
    condition: bool-like array.
    x, y: array-likes (both required: the one-argument form needs static output sizes and
      is not supported yet).

  Raises:
    ValueError: if only one of x and y is given, or shapes do not broadcast.
  """
  if x is None or y is None:
    raise ValueError("where: either both or neither of x and y must be given; the "
                     "one-argument form (nonzero) is not supported yet.")
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
