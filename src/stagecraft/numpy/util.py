"""Helpers shared by the modules of `stagecraft.numpy`, `stagecraft.scipy`, `stagecraft.nn` and
`stagecraft.random` (internal: not part of the `stagecraft.numpy` namespace).

They hold the dtype and shape of array-likes, conversion to Arrays, JAX's dtype promotion,
broadcasting to a shape, weakly typed constants, axis canonicalization and the checks for
arguments that must be static. They build on `array_constructors` only."""
from __future__ import annotations

import operator
import warnings
from typing import Any

import numpy as np

from stagecraft import core, dtypes, lax, shape_poly
from stagecraft.core import Tracer
from stagecraft.errors import InconclusiveDimensionOperation
from stagecraft.interpreters import partial_eval as pe
from stagecraft.lax.control_flow.refs import Ref
from stagecraft.lax.shape import shape_error
from stagecraft.numpy.array_constructors import array, asarray
from stagecraft.runtime.array import Array

ArrayLike = Any

# ---------------------------------------------------------------------------
# The dtype and shape of array-likes (Python scalars included)


def dtype_of(x) -> np.dtype:
  """The dtype of an array-like: a Python scalar's default dtype, else its aval's dtype."""
  if dtypes.is_python_scalar(x):
    return dtypes.python_scalar_dtype(type(x))
  return core.get_aval(x).dtype


def shape_of(x) -> tuple[int, ...]:
  """The shape of an array-like (`()` for a Python scalar)."""
  if dtypes.is_python_scalar(x):
    return ()
  return core.get_aval(x).shape


def ndim_of(x) -> int:
  """The number of dimensions of an array-like."""
  return len(shape_of(x))


def real_dtype(dt):
  """The real dtype of the complex `dt` (`dt` itself for real dtypes)."""
  return {dtypes.complex64: dtypes.float32, dtypes.complex128: dtypes.float64}.get(dt, dt)


def to_inexact_dtype(dt, weak: bool = False):
  """`dt` if it is inexact, else the float dtype JAX converts it to: the default float for
  weak (Python) ints, float64 for 64-bit integers, float32 for bool and narrower ints."""
  if dtypes.is_inexact(dt):
    return dt
  if weak:
    return dtypes.default_float_dtype()
  return dtypes.canonicalize_dtype(np.dtype(np.float64 if dt.itemsize == 8 else np.float32))


# ---------------------------------------------------------------------------
# Conversion and promotion


def asarray_or_scalar(x):
  """Lists and tuples become Arrays; an object with `__jax_array__` its array (JAX's
  array-like protocol); arrays, tracers and scalars pass through."""
  if isinstance(x, (list, tuple)):
    return array(x)
  if (type(x) is not Array and not isinstance(x, Tracer)
      and hasattr(type(x), "__jax_array__")):
    return x.__jax_array__()
  return x


def as_array(x):
  """An Array (or tracer) for `x`; Python and weak scalars become weakly typed Arrays."""
  if isinstance(x, (Array, Tracer)):
    return x
  if isinstance(x, core.WeakScalarValue):
    return lax.convert_element_type(array(x.value), x.value.dtype, weak_type=True)
  return asarray(asarray_or_scalar(x))


python_scalar_value = lax.utils.python_scalar_value


def convert_dtype(x, dtype: np.dtype, weak: bool, path: str = "y"):
  """`x` converted to `dtype` with weak type `weak`; a Python scalar stays a host scalar
  (converted as `python_scalar_value` does; `path` names it in an overflow error)."""
  if dtypes.is_python_scalar(x):
    v = python_scalar_value(x, dtype, path)
    return lax.utils.weak_scalar(v) if weak or type(x) is not bool else v
  aval = core.get_aval(x)
  if aval.dtype == dtype and aval.weak_type == weak and getattr(x, "dtype", dtype) == dtype:
    return x   # NB: a NumPy float64 array (an f32 aval without x64) is converted below
  if (type(x) is Array and aval.shape == () and dtype != dtypes.float0
      and not isinstance(core.current_trace(), core.EvalTrace) and pe.is_literal_array(x)):
    # NB: a scalar constant made while tracing (`full((), 0.1)`) converts on the host, as
    # JAX's constant folding of `convert_element_type` converts it (a literal, no equation).
    host = np.asarray(x)
    if dtypes.is_complex(host.dtype) and not dtypes.is_complex(dtype):
      host = host.real
    with np.errstate(invalid="ignore", over="ignore"):
      host = host.astype(dtype)
    x = host if weak else host[()]
  return lax.convert_element_type(x, dtype, weak_type=weak)


def _operand(i: int) -> str:
  """How JAX's overflow message names operand `i` of a promoted operation (its jitted
  binary functions take `x, y`)."""
  return "x" if i == 0 else "y"


def promote_dtypes(*args):
  """Converts `args` to their common dtype under JAX's promotion rules."""
  args = [asarray_or_scalar(a) for a in args]
  if len(args) < 2:
    return args
  first = getattr(args[0], "dtype", None)
  if first is not None and not isinstance(first, np.dtype):
    # Typed PRNG keys (an extended dtype): only the same key type combines, as in JAX.
    if any(getattr(a, "dtype", None) != first for a in args[1:]):
      raise TypeError(f"Cannot combine arrays of dtypes "
                      f"{', '.join(str(getattr(a, 'dtype', type(a).__name__)) for a in args)}"
                      f": a typed key array only combines with keys of its own type.")
    return args
  dtype, weak = dtypes.result_type(*args, return_weak_type_flag=True)
  return [convert_dtype(a, dtype, weak, _operand(i)) for i, a in enumerate(args)]


def promote_dtypes_inexact(*args):
  """Promotes, then converts integer/bool results to the default float (weak if weak)."""
  args = [asarray_or_scalar(a) for a in args]
  dtype, weak = dtypes.result_type(*args, return_weak_type_flag=True)
  dtype = to_inexact_dtype(dtype, weak)
  return [convert_dtype(a, dtype, weak, _operand(i)) for i, a in enumerate(args)]


def promote_dtypes_complex(*args):
  """Promotes, then converts the result to complex: float32 and narrower (and integers and
  bool) to complex64, float64 to complex128 (weak if weak)."""
  args = [asarray_or_scalar(a) for a in args]
  dtype, weak = dtypes.result_type(*args, return_weak_type_flag=True)
  if not dtypes.is_complex(dtype):
    dtype = to_inexact_dtype(dtype, weak)
    dtype = dtypes.complex128 if dtype == dtypes.float64 else dtypes.complex64
    dtype = dtypes.canonicalize_dtype(dtype)
  return [convert_dtype(a, dtype, weak, _operand(i)) for i, a in enumerate(args)]


def promote_dtypes_numeric(*args):
  """Promotes, then converts a bool result to int32 (also with x64, as JAX's
  `dtypes.to_numeric_dtype`)."""
  args = [asarray_or_scalar(a) for a in args]
  dtype, weak = dtypes.result_type(*args, return_weak_type_flag=True)
  if dtype == dtypes.bool_:
    dtype = dtypes.int32
  return [convert_dtype(a, dtype, weak, _operand(i)) for i, a in enumerate(args)]


def broadcast_to_shape(x, shape):
  """`x` (an array-like) broadcast to `shape` under NumPy's rules.

  Raises:
    ValueError: if `x` has more dimensions than `shape` or a dimension does not match.
  """
  s = shape_of(x)
  if s == tuple(shape):
    return x
  if len(s) > len(shape):
    raise ValueError(f"Cannot broadcast an array of shape {s} to the lower-rank shape {shape}.")
  dims = tuple(range(len(shape) - len(s), len(shape)))
  for d, od in zip(s, (shape[i] for i in dims)):
    if d != 1 and d != od:
      raise ValueError(f"Incompatible shapes for broadcasting: {s} and requested shape "
                       f"{tuple(shape)}.")
  if dtypes.is_python_scalar(x):
    x = array(x)
  # size-1 dims are squeezed away first: broadcast_in_dim needs operand dims == or 1.
  return lax.broadcast_in_dim(x, tuple(shape), dims)


# ---------------------------------------------------------------------------
# Array-like arguments


_JAX_REF_TRACER = "<class 'jax._src.interpreters.partial_eval.DynamicJaxprTracer'>"


def is_arraylike(x) -> bool:
  """Whether `x` counts as an array-like argument of the NumPy functions (JAX's rule): an
  Array, a tracer, a NumPy array, any value with a registered aval (a `jax.Array`, an
  implicit array), a value with `__jax_array__`, or a scalar in NumPy's sense
  (`numpy.isscalar`: Python and NumPy scalars). Lists, tuples and None are not.

  NB: strings and bytes are refused here; JAX's rule passes them (`numpy.isscalar`) and
  every function then fails on them with a TypeError of its own."""
  if isinstance(x, (str, bytes, Ref)):
    return False
  if isinstance(x, (Array, Tracer, np.ndarray)) or np.isscalar(x):
    return True
  if getattr(x, "__jax_array__", None) is not None:
    return True
  return any(t in core.pytype_aval_mappings for t in type(x).__mro__)


def check_no_float0s(fun_name: str, *args: Any) -> None:
  """Raises JAX's TypeError when one of `args` is a float0 array (the tangent type of
  integer inputs, which no operation accepts)."""
  if any(getattr(a, "dtype", None) == dtypes.float0 for a in args):
    raise TypeError(f"Called {fun_name} with a float0 array. "
                    + lax.utils.FLOAT0_MESSAGE.format(comma=""))


def check_arraylike(fun_name: str, *args: Any, emit_warning: bool = False,
                    stacklevel: int = 3, jitted: bool = True) -> None:
  """Checks that every one of `args` is an array or a scalar (`is_arraylike`), as the NumPy
  and SciPy functions of JAX do before converting their arguments.

  Args:
    fun_name: the function named in the message (`"nansum"`, `"norm.logpdf"`).
    *args: the arguments, numbered from 0 in the message.
    emit_warning: warn (DeprecationWarning, for the first offending argument) instead of
      raising.
    stacklevel: the warning's stack level.

  Raises:
    TypeError: `{fun_name} requires ndarray or scalar arguments, got {type} at position {i}.`
      for the first argument that is not array-like (a list, a tuple, None...).
  """
  for pos, arg in enumerate(args):
    if is_arraylike(arg):
      continue
    # NB: JAX's jitted NumPy functions (`jitted`; the binary ufuncs check their arguments
    # before their jit) see a Ref passed to them eagerly as a tracer of a ref type; inside a
    # jit it is one for all of them. The message names JAX's class, as here.
    got = type(arg)
    if got is core.ShapeDtypeStruct:   # NB: named as JAX's class prints
      got = "<class 'jax.ShapeDtypeStruct'>"
    if isinstance(arg, Ref):
      got = (_JAX_REF_TRACER if jitted or core.current_trace() is not core.eval_trace
             else "<class 'jax._src.core.Ref'>")
    msg = f"{fun_name} requires ndarray or scalar arguments, got {got} at position {pos}."
    if emit_warning:
      warnings.warn(msg + " In a future JAX release this will be an error.",
                    category=DeprecationWarning, stacklevel=stacklevel)
      return
    raise TypeError(msg)


def ensure_arraylike(fun_name: str, *args: Any):
  """`check_arraylike`, then each argument as an Array (or tracer; Python scalars weakly
  typed): one value for one argument, else a tuple, as JAX's `ensure_arraylike`."""
  check_arraylike(fun_name, *args, stacklevel=4)
  out = tuple(as_array(a.__jax_array__() if getattr(a, "__jax_array__", None) is not None
                       and not isinstance(a, (Array, Tracer)) else a) for a in args)
  return out[0] if len(out) == 1 else out


# ---------------------------------------------------------------------------
# Weakly typed constants


def lax_const(x: Any, v: Any) -> Any:
  """`v` as a constant of x's dtype for lax operations with `x`, as JAX's `lax._const`: a
  Python scalar (weakly typed) where `x` is a weakly typed scalar and the Python scalar's
  default dtype is x's, else a strongly typed NumPy scalar of x's dtype."""
  dtype = np.dtype(dtypes.python_scalar_dtype(type(x)) if dtypes.is_python_scalar(x)
                   else core.get_aval(x).dtype)
  if dtypes.is_python_scalar(x) or (core.get_aval(x).weak_type and np.ndim(x) == 0):
    v = dtypes.scalar_type_of(x)(v)
    return v if dtypes.python_scalar_dtype(type(v)) == dtype else np.array(v, dtype)
  return np.array(v, dtype)


def const(x, v):
  """`v` as a weakly typed scalar of x's dtype: lax ops with it keep x's weak type."""
  return lax.utils.weak_scalar(np.asarray(v, dtype_of(x))[()])


def to_bool(x):
  """`x != 0` (bool `x` itself). As JAX's numpy (`lax._const`), the 0 is weakly typed only
  for a rank-0 `x`, so a weak `x` of rank > 0 gives a strongly typed result."""
  dt = dtype_of(x)
  if dt == dtypes.bool_:
    return x
  return lax.ne(x, const(x, 0) if shape_of(x) == () else np.zeros((), dt)[()])


# ---------------------------------------------------------------------------
# Axes, slices and static arguments


def canonicalize_axis(axis: int, ndim: int, name: str) -> int:
  """`axis` as a non-negative axis index of an array of dimension `ndim`.

  Raises:
    ValueError: for an axis out of [-ndim, ndim), naming the function `name`.
  """
  axis = operator.index(axis)
  if not -ndim <= axis < ndim:
    # NB: JAX's words after the function's name (users search for them)
    raise ValueError(f"{name}: axis {axis} is out of bounds for array of dimension {ndim}")
  return axis % ndim if ndim else 0


def index_tuple(x) -> tuple:
  """An index (anything with `__index__`: an int, a NumPy integer, a 0-d integer array) or a
  sequence of them as a tuple of ints (JAX's `_ensure_index_tuple`).

  Raises:
    TypeError: for anything else."""
  try:
    return (operator.index(x),)
  except TypeError:
    return tuple(operator.index(i) for i in x)


def axis_tuple(axis, ndim: int, name: str) -> tuple[int, ...]:
  """An index or a sequence of indices as a tuple of canonical axes (in the given order)."""
  return tuple(canonicalize_axis(a, ndim, name) for a in index_tuple(axis))


def reduction_axes(axis, ndim: int, name: str) -> tuple[int, ...]:
  """The canonical axes a reduction over `axis` reduces, in the order given (all of them,
  ascending, for None): JAX's numpy keeps that order in the `axes` param of its reductions
  (`reduce_sum[axes=(2, 0)]` for `sum(x, axis=(2, -3))`).

  Raises:
    ValueError: for an out-of-range or repeated axis.
  """
  if axis is None:
    return tuple(range(ndim))
  if isinstance(axis, (int, np.integer)):
    axis = (axis,)
  out = tuple(canonicalize_axis(a, ndim, name) for a in axis)
  if len(set(out)) != len(out):
    raise ValueError(f"{name}: duplicate value in 'axis': {axis}.")
  return out


def slice_axis(x, start: int, stop: int, axis: int, stride: int = 1):
  """`x[start:stop:stride]` along `axis` (static bounds); `x` itself for the full range."""
  if start == 0 and stop == shape_of(x)[axis] and stride == 1:
    return x
  return lax.slice_in_dim(x, start, stop, stride, axis)


def canonical_shape(shape, name="shape") -> tuple[int, ...]:
  """A shape argument (an int or a sequence of ints) as a tuple of ints.

  Raises:
    TypeError: for values that are not static ints (JAX's "Shapes must be 1D sequences of
      concrete values of integer type"), and for negative dimensions (JAX's
      `broadcast_in_dim` message).
  """
  if not isinstance(shape, (tuple, list)) and (
      shape_poly.is_symbolic_dim(shape) or isinstance(shape, (Tracer, str)) or shape is None
      or np.ndim(shape) == 0):   # one dimension (a 0-d array too, as JAX's)
    shape = (shape,)
  try:
    out = tuple(shape_poly.index_dim(d) for d in shape)
  except TypeError as e:
    raise shape_error(shape) from e
  if any(not shape_poly.is_symbolic_dim(d) and d < 0 for d in out):
    raise TypeError(f"broadcast_in_dim shape must have every element be nonnegative, got "
                    f"{out}.")
  return out


def check_concrete(x, name: str, what: str, context: str | None = None):
  """`x`, which jnp.`name` needs as a Python value for its argument `what`.

  Args:
    context: JAX's context line for this value, where JAX's message has one ("slice start
      of jnp.c_"): the message is then JAX's (`core.concrete_or_error`'s) word for word.

  Raises:
    ConcretizationTypeError: if `x` is traced.
  """
  if isinstance(x, Tracer):
    known = x.to_concrete_value()   # as JAX's concrete_or_error: a JVP tracer outside jit
    if known is not None:           # knows its value
      return known
    if context is not None:
      raise x._concretization_error(name, fix=context)
    where = (f"the jnp.{name} argument '{what}'" if what.isidentifier() else what)
    raise core.ConcretizationTypeError(
        f"Abstract tracer value encountered where concrete value is expected: traced array "
        f"with shape {x.aval.str_short(False)}\nIt arose in {where}"
        f"{x._trace.origin_msg(x)}\njnp.{name} needs it as a Python value (it decides the "
        f"result's shape or layout): pass a concrete (static) value.")
  return x
