"""Elementwise functions (NumPy's ufuncs and their relatives) with NumPy broadcasting and JAX's
type promotion: arithmetic, comparison, logic and bitwise operations; exponentials, logarithms
and trigonometry; rounding; floating-point classification and decomposition; complex parts;
`where` and `clip`; comparison within tolerances (`isclose`, `allclose`); and the functions
with JAX's custom derivatives (`logaddexp`, `sinc`, `frexp`, `i0`)."""
from __future__ import annotations

import functools
import operator
import warnings

import numpy as np

from stagecraft import core, dtypes, lax, tree_util
from stagecraft.config import config
from stagecraft.core import Tracer
from stagecraft.custom_derivatives import custom_jvp
from stagecraft.interpreters import ad, batching
from stagecraft.lax.control_flow.refs import Ref
from stagecraft.numpy.array_constructors import array, asarray
from stagecraft.numpy.array_creation import full, full_like
from stagecraft.numpy.manipulation import broadcast_shapes, ravel
# NB: `check_arraylike` (util's) is also read here by reductions, sorting and linalg.
from stagecraft.numpy.util import (ArrayLike, as_array, asarray_or_scalar, broadcast_to_shape,
                                   check_arraylike, check_no_float0s, const, convert_dtype, dtype_of, ndim_of,
                                   promote_dtypes, promote_dtypes_inexact,
                                   promote_dtypes_numeric, real_dtype, shape_of, to_bool)
from stagecraft.lax.utils import KEY_TYPES, WHERE, on_keys
from stagecraft.pjit import jit
from stagecraft.runtime import dispatch
from stagecraft.runtime.array import Array

__all__ = ["add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "remainder",
           "mod", "fmod", "divmod", "power", "pow", "float_power", "negative", "positive",
           "absolute", "abs", "fabs", "sign", "square", "reciprocal", "maximum", "minimum", "fmax",
           "fmin", "heaviside", "gcd", "lcm", "equal", "not_equal", "less", "less_equal", "greater",
           "greater_equal", "logical_and", "logical_or", "logical_xor", "logical_not", "isclose",
           "allclose", "array_equal", "array_equiv", "bitwise_and", "bitwise_or", "bitwise_xor",
           "invert", "bitwise_not", "bitwise_invert", "left_shift", "right_shift",
           "bitwise_left_shift", "bitwise_right_shift", "bitwise_count", "exp", "exp2", "log",
           "log1p", "expm1", "log2", "log10", "sqrt", "cbrt", "sin", "cos", "tan", "tanh", "sinh",
           "cosh", "arcsin", "arccos", "arctan", "arctan2", "arcsinh", "arccosh", "arctanh", "asin",
           "acos", "atan", "asinh", "acosh", "atanh", "atan2", "hypot", "deg2rad", "rad2deg",
           "radians", "degrees", "logaddexp", "logaddexp2", "sinc", "i0", "floor", "ceil", "trunc",
           "round", "around", "rint", "modf", "isfinite", "isnan", "isinf", "isposinf", "isneginf",
           "signbit", "copysign", "ldexp", "frexp", "nan_to_num", "spacing", "nextafter", "real",
           "imag", "conjugate", "conj", "angle", "isreal", "iscomplex", "where", "clip"]


# ---------------------------------------------------------------------------
# Promotion and the ufunc constructors


def _rank_promotion(name: str, shapes) -> None:
  """config numpy_rank_promotion 'raise'/'warn': operands of different ranks (JAX's text)."""
  shp = " ".join(map(str, shapes))
  if config.numpy_rank_promotion == "raise":
    raise ValueError(f"Operands could not be broadcast together for {name} on shapes {shp} and "
                     f"with the config option jax_numpy_rank_promotion='raise'. For more "
                     f"information, see https://docs.jax.dev/en/latest/"
                     f"rank_promotion_warning.html.")
  warnings.warn(f"Following NumPy automatic rank promotion for {name} on shapes {shp}. Set the "
                f"jax_numpy_rank_promotion config option to 'allow' to disable this warning; "
                f"for more information, see https://docs.jax.dev/en/latest/"
                f"rank_promotion_warning.html.", stacklevel=4)


def _promote_shapes(*args, name: str = "", lax_broadcasts: bool = False):
  """NumPy broadcasting of `args`. Rank-0 operands pass as they are (lax takes them). With
  `lax_broadcasts` (for a lax function of one elementwise primitive, as JAX 0.10's numpy):
  operands of equal rank pass too (lax broadcasts their size-1 dimensions) and lower-rank
  ones get leading size-1 dimensions; otherwise every operand of rank > 0 is broadcast to
  the full common shape. Different ranks follow config numpy_rank_promotion."""
  shapes = [shape_of(a) for a in args]
  nonscalar = [s for s in shapes if s != ()]
  ranks = {len(s) for s in nonscalar}
  if len(set(nonscalar)) <= 1 or (lax_broadcasts and len(ranks) <= 1):
    return list(args)
  if config.numpy_rank_promotion != "allow" and len(ranks) > 1:
    _rank_promotion(name, shapes)
  shape = broadcast_shapes(*shapes)
  if lax_broadcasts:
    return [a if len(s) == len(shape) else lax.broadcast_to_rank(as_array(a), len(shape))
            for a, s in zip(args, shapes)]
  return [a if s == () else broadcast_to_shape(a, shape) for a, s in zip(args, shapes)]


def promote_shapes(name: str, *args):
  """JAX's `promote_shapes` for functions written with lax: `args` (arrays or scalars) as
  they are when their non-scalar ranks agree, else each given leading size-1 dimensions up
  to the common rank (config numpy_rank_promotion applies, as for the ufuncs: a
  ValueError under 'raise', a warning under 'warn', naming `name`)."""
  return _promote_shapes(*args, name=name, lax_broadcasts=True)


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


def _eager(forward_only: bool) -> bool:
  """Whether the current trace runs on eager values: only JVP, batching and linearizing
  traces above the evaluation trace (with `forward_only`, one of them a forward-mode JVP,
  one not linearizing for reverse mode)."""
  t = core.trace_state.trace
  forward = False
  while t is not core.eval_trace:
    tt = type(t)
    if tt is ad.JVPTrace:
      forward = forward or type(t.parent) is not ad.PartialEvalTrace
    elif tt is not batching.BatchTrace and tt is not ad.PartialEvalTrace:
      return False
    t = t.parent
  return forward or not forward_only


def _as_jax_ufunc(fn, one_primitive: bool):
  """`fn` as JAX's jnp ufuncs are, `jit(inline=True)` functions: on eager values it runs as
  one compiled program, so XLA may fuse its operations (`t * y + x * s` of a JVP into fused
  multiply-adds), giving JAX's results bit for bit; traced, it is staged as its equations.
  A ufunc of one primitive gives the same results either way except under a forward-mode
  JVP, so only there does it take the compiled path."""
  jitted = jit(fn, inline=True)

  def wrapper(*args):
    if core.trace_state.trace is not core.eval_trace or not one_primitive:
      if _eager(forward_only=one_primitive):
        return jitted(*args)
    return fn(*args)
  wrapper.__name__ = wrapper.__qualname__ = fn.__name__
  wrapper.__doc__ = fn.__doc__
  wrapper.__wrapped__ = fn
  return wrapper


def _binary_ufunc(name: str, lax_fn, promote=promote_dtypes, doc: str = "", bool_fn=None,
                  lax_broadcasts: bool | None = None, msg_name: str | None = None):
  # NB: `msg_name`: the name JAX's messages give the function, when it is not `name`
  # (JAX's `divide` is its `true_divide`: "... broadcast together for true_divide ...")
  # NB: `lax_broadcasts`: whether `lax_fn` broadcasts size-1 dimensions itself (default: it
  # binds one elementwise primitive), so operands are only rank-promoted, as in JAX's numpy.
  if lax_broadcasts is None:
    lax_broadcasts = hasattr(lax_fn, "primitive")
  # NB: the primitive `lax_fn` binds, when it binds one with the generic eager impl:
  # `x + y` on Arrays of one aval then runs its compiled program directly (dispatch).
  prim = getattr(lax_fn, "primitive", None)
  if prim is not None and (prim.impl is not None or prim.multiple_results):
    prim = None

  def fn(x: ArrayLike, y: ArrayLike, /):
    if type(x) is Ref or type(y) is Ref:
      check_arraylike(name, x, y, jitted=False)
    if type(x) is not Array and hasattr(type(x), "__jax_array__"):   # JAX's array-like protocol
      x = x.__jax_array__()
    if type(y) is not Array and hasattr(type(y), "__jax_array__"):
      y = y.__jax_array__()
    if (prim is not None and type(x) is Array and type(y) is Array
        and (x.aval is y.aval or x.aval == y.aval)
        and core.trace_state.trace is core.eval_trace
        and not ((bool_fn is not None or x.aval.weak_type) and x.aval.dtype == dtypes.bool_)
        and not _needs_promotion(promote, x.aval.dtype)):
      out = dispatch.eager_call1(prim, (x, y))
      if out is not None:
        return out
    # Fast paths: operands that already agree in shape, dtype and weak type, or an array
    # with a Python scalar it absorbs, need neither promotion nor broadcasting.
    ax, ay = getattr(x, "aval", None), getattr(y, "aval", None)
    if ax is not None:
      dt = ax.dtype
      if ay is not None:
        # NB: promotion never gives a weak bool (JAX's lattice), so two weak bools take
        # the promoting path.
        fast = (dt == ay.dtype and ax.shape == ay.shape and ax.weak_type == ay.weak_type
                and not (ax.weak_type and dt == dtypes.bool_))
      else:
        fast = _scalar_fits(type(y), dt)
    elif ay is not None:
      dt = ay.dtype
      fast = _scalar_fits(type(x), dt)
    else:
      fast = False
    if fast and not _needs_promotion(promote, dt):
      # NB: lax does not promote a Python scalar (it is int32/float32/...): give it `dt`.
      if ax is None:
        x = convert_dtype(x, dt, True, "x")
      elif ay is None:
        y = convert_dtype(y, dt, True, "y")
      return (bool_fn or lax_fn)(x, y) if dt == dtypes.bool_ else lax_fn(x, y)
    if type(x) in KEY_TYPES or type(y) in KEY_TYPES:
      return _keys_binary(name, x, y)
    check_arraylike(name, x, y)   # as JAX's: a list or tuple is no array-like operand
    check_no_float0s(name, x, y)
    x, y = promote(x, y)
    x, y = _promote_shapes(x, y, name=msg_name or name, lax_broadcasts=lax_broadcasts)
    if bool_fn is not None and dtype_of(x) == dtypes.bool_:
      return bool_fn(x, y)
    return lax_fn(x, y)
  fn.__name__ = fn.__qualname__ = name
  fn.__doc__ = (f"{doc or name} (elementwise, NumPy broadcasting and JAX type promotion).\n\n"
                f"Args:\n  x, y: array-likes with broadcast-compatible shapes.\n\nReturns:\n"
                f"  Array of the broadcast shape and the promoted dtype.\n\nRaises:\n"
                f"  ValueError: if the shapes do not broadcast.")
  return _as_jax_ufunc(fn, hasattr(lax_fn, "primitive"))


def _unary_ufunc(name: str, lax_fn, promote=promote_dtypes, doc: str = ""):
  def fn(x: ArrayLike, /):
    if type(x) is Ref:
      check_arraylike(name, x)
    if type(x) is not Array and hasattr(type(x), "__jax_array__"):   # JAX's array-like protocol
      x = x.__jax_array__()
    aval = getattr(x, "aval", None)
    if aval is not None and not _needs_promotion(promote, aval.dtype):
      return lax_fn(x)
    if aval is None and type(x) not in KEY_TYPES:
      check_arraylike(name, x)   # as JAX's: a list or tuple is no array-like operand
    x, = promote(x)
    if not isinstance(x, (Array, Tracer, np.ndarray)):
      x = asarray(x)
    return lax_fn(x)
  fn.__name__ = fn.__qualname__ = name
  fn.__doc__ = (f"{doc or name} (elementwise).\n\nArgs:\n  x: array-like T[*s].\n\nReturns:\n"
                f"  Array [*s].")
  return _as_jax_ufunc(fn, hasattr(lax_fn, "primitive"))


def _full_shapes(args):
  """Arrays broadcast to their common shape (rank-0 ones too, unlike `_promote_shapes`)."""
  args = [as_array(a) for a in args]
  shape = broadcast_shapes(*[shape_of(a) for a in args])
  return [broadcast_to_shape(a, shape) for a in args]


def _check_lax_shapes(lax_name: str, args) -> None:
  """JAX's error when its numpy function leaves operands of one rank to its first lax
  operation (named `lax_name`) and their shapes do not broadcast: TypeError naming that
  operation (operands of different ranks get `broadcast_shapes`' ValueError instead)."""
  shapes = [shape_of(a) for a in args]
  if len({len(s) for s in shapes if s != ()}) > 1:
    return
  try:
    np.broadcast_shapes(*[s for s in shapes if s != ()])
  except ValueError:
    raise TypeError(f"{lax_name} got incompatible shapes for broadcasting: "
                    f"{', '.join(map(str, shapes))}.") from None


def _inexact_args(name: str, *args, allow_complex: bool = True, lax_name: str | None = None):
  """`args` promoted to a common inexact dtype and broadcast to their common shape.
  `lax_name`: the lax operation JAX's version applies first to the operands, whose
  TypeError JAX raises for same-rank operands that do not broadcast."""
  args = promote_dtypes_inexact(*args)
  if not allow_complex and dtypes.is_complex(dtype_of(args[0])):
    raise TypeError(f"jnp.{name} does not support complex-valued inputs; take the real part "
                    f"or abs() first.")
  if lax_name is not None and len(args) > 1:
    _check_lax_shapes(lax_name, args)
  return _full_shapes(args)


def _full_c(x, v):
  """`v` broadcast to x's shape with x's dtype, weakly typed (so selects keep x's weak type)."""
  return lax.broadcast_in_dim(const(x, v), shape_of(x), ())


# ---------------------------------------------------------------------------
# Arithmetic


def _true_divide(x, y):
  return lax.div(x, y)


def _typed_scalars(x, y):
  """`x`, `y` with a Python scalar operand (the ufuncs' fast path) as a weakly typed rank-0
  array of the other's dtype, so that lax functions of it alone (`sign`) keep that dtype.
  The conversion wraps out-of-range integers (uint8: -1 is 255), as JAX's."""
  if dtypes.is_python_scalar(x):
    return lax.convert_element_type(x, dtype_of(y), weak_type=True), y
  if dtypes.is_python_scalar(y):
    return x, lax.convert_element_type(y, dtype_of(x), weak_type=True)
  return x, y


# For two typed key arrays, the lax primitive a binary ufunc binds and the dtype kinds it
# accepts (its message, as JAX's); the others fail on the key dtype itself.
_KEY_BINARY_PRIMS = {
    "add": ("add", "integer, floating, complexfloating"),
    "subtract": ("sub", "integer, floating, complexfloating"),
    "multiply": ("mul", "integer, floating, complexfloating"),
    "less": ("lt", "integer, floating, bool"), "less_equal": ("le", "integer, floating, bool"),
    "greater": ("gt", "integer, floating, bool"),
    "greater_equal": ("ge", "integer, floating, bool"),
    "bitwise_and": ("and", "integer, bool"), "bitwise_or": ("or", "integer, bool"),
    "bitwise_xor": ("xor", "integer, bool"),
}


def _keys_binary(name: str, x: Any, y: Any) -> Array:
  """A binary ufunc with a typed key array operand, as JAX's: `equal`/`not_equal` of two
  key arrays compare keys (a bool array of the broadcast key shape); anything else raises
  TypeError (JAX's message: the dtypes for a key with another dtype, else the primitive's
  or "Cannot interpret")."""
  if type(x) not in KEY_TYPES or type(y) not in KEY_TYPES or type(x) is not type(y):
    names = ", ".join(str(a.dtype if type(a) in KEY_TYPES else dtypes.result_type(a))
                      for a in (x, y))
    raise TypeError(f"{name} does not accept dtypes {names}.")
  if name in ("equal", "not_equal"):   # `eq`/`ne` of the keys, as JAX's
    cmp = lax.eq if name == "equal" else lax.ne
    return on_keys(lambda a, b: cmp(*_promote_shapes(a, b, name=name, lax_broadcasts=True)),
                   x, y)
  prim = _KEY_BINARY_PRIMS.get(name)
  if prim is None:
    raise TypeError(f"Cannot interpret '{x.dtype}' as a data type")
  raise TypeError(f"{prim[0]} does not accept dtype {x.dtype} at position 0. Accepted "
                  f"dtypes at position 0 are subtypes of {prim[1]}.")


def _promote_args(name: str, promote, *args):
  """JAX's numpy's `promote_args*`: the arguments checked (arrays or scalars), promoted by
  `promote` and rank-promoted (equal ranks are left to lax, which broadcasts size-1
  dimensions)."""
  check_arraylike(name, *args)
  args = promote(*args)
  return _promote_shapes(*args, name=name, lax_broadcasts=True)


def _ones_like(x):
  """Ones of x's shape, dtype and weak type, as JAX's `lax._ones`: a host scalar for rank 0
  (a literal in a traced program), else a broadcast."""
  if ndim_of(x) == 0:
    return const(x, 1) if core.get_aval(x).weak_type else np.ones((), dtype_of(x))[()]
  return lax.full_like(x, 1)


def _float_divmod(x1, x2):
  """(x1 // x2, x1 % x2) for floats by CPython's `float_divmod` (floatobject.c): divide
  `x1 - fmod(x1, x2)`, an exact multiple of `x2`, so the quotient is integral before it is
  rounded (`floor(x1 / x2)` is not: 1 // 0.1 is 9, but 1 / 0.1 rounds to 10); where the
  remainder's sign differs from x2's, add x2 to it and step the quotient down (so
  -0.5 // inf is -1, not -0). At x2 = 0 the dividend is x1 itself."""
  mod = lax.rem(x1, x2)
  corrected = where(x2 == 0, x1, lax.sub(x1, mod))
  div = lax.div(corrected, x2)
  step = lax.bitwise_and(mod != 0, lax.sign(x2) != lax.sign(mod))
  mod = lax.select(step, mod + x2, mod)
  div = lax.select(step, div - 1.0, div)
  return lax.round(div), mod


@jit
def floor_divide(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """floor(x1 / x2) elementwise (Python's //), NumPy broadcasting and JAX type promotion
  (bool promotes to int32). Jitted, as JAX's (`jit[name=floor_divide]`).

  Integers: the truncated quotient, one lower where the signs differ and the division is
  inexact; x // 0 is XLA's (-1 for x >= 0, 1 for x < 0 truncated, then adjusted: -1 for 0,
  -2 for other x; unsigned: the maximum). Floats: see `_float_divmod`.

  Raises:
    TypeError: an argument that is not an array or scalar (a list), or complex inputs.
    ValueError: if the shapes do not broadcast.
  """
  x1, x2 = _promote_args("floor_divide", promote_dtypes_numeric, x1, x2)
  dt = dtype_of(x1)
  if dtypes.is_unsigned(dt):
    return lax.div(x1, x2)
  if dtypes.is_integer(dt):
    quotient = lax.div(x1, x2)
    step = logical_and(lax.sign(x1) != lax.sign(x2), lax.rem(x1, x2) != 0)
    return where(step, quotient - 1, quotient)
  if dtypes.is_complex(dt):
    raise TypeError("floor_divide does not support complex-valued inputs")
  return _float_divmod(x1, x2)[0]


@jit
def remainder(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """x1 mod x2 with the sign of x2 (Python's %), elementwise, NumPy broadcasting and JAX
  type promotion. Jitted, as JAX's (`jit[name=remainder]`).

  The truncated remainder `rem(x1, x2)` plus x2 where it is nonzero and its sign differs
  from x2's. For integers a zero divisor is replaced by 1 first, so x % 0 is 0.

  Raises:
    TypeError: an argument that is not an array or scalar (a list).
    ValueError: if the shapes do not broadcast.
  """
  x1, x2 = _promote_args("remainder", promote_dtypes_numeric, x1, x2)
  zero = np.zeros((), dtype_of(x1))[()]
  if dtypes.is_integer(dtype_of(x2)):
    x2 = where(x2 == 0, _ones_like(x2), x2)
  r = lax.rem(x1, x2)
  nonzero = lax.ne(r, zero)
  add_x2 = lax.bitwise_and(lax.ne(lax.lt(r, zero), lax.lt(x2, zero)), nonzero)
  return lax.select(add_x2, lax.add(r, x2), r)


mod = remainder


add = _binary_ufunc("add", lax.add, doc="x + y (logical or for bool)", bool_fn=lax.bitwise_or)
subtract = _binary_ufunc("subtract", lax.sub, doc="x - y")
multiply = _binary_ufunc("multiply", lax.mul, doc="x * y (logical and for bool)",
                         bool_fn=lax.bitwise_and)
divide = _binary_ufunc("divide", _true_divide, promote_dtypes_inexact, lax_broadcasts=True,
                       doc="x / y (true division: integers give floats)",
                       msg_name="true_divide")
true_divide = divide


@jit
def fmod(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """x mod y with the sign of x (C's fmod), elementwise, NumPy broadcasting and JAX type
  promotion (bool promotes to int32). Jitted, as JAX's (`jit[name=fmod]`).

  Args:
    x1, x2: array-likes with broadcast-compatible shapes.

  Returns:
    Array of the broadcast shape and the promoted dtype. For integers a zero divisor is
    replaced by 1 first (a `_where`), so fmod(x, 0) is 0, as JAX; two bool operands are
    not integers there, so fmod(True, False) is 1 (XLA's x % 0 = x), as JAX; NaN for
    floats.

  Raises:
    TypeError: an argument that is not an array or scalar (a list).
    ValueError: if the shapes do not broadcast.
  """
  check_arraylike("fmod", x1, x2)
  if dtypes.is_integer(dtypes.result_type(x1, x2)):
    x2 = as_array(x2)
    x2 = where(x2 == 0, _ones_like(x2), x2)
  x1, x2 = promote_dtypes_numeric(x1, x2)
  x1, x2 = _promote_shapes(x1, x2, name="fmod", lax_broadcasts=True)
  return lax.rem(x1, x2)


@jit
def divmod(x1: ArrayLike, x2: ArrayLike, /) -> tuple[Array, Array]:
  """`(floor_divide(x1, x2), remainder(x1, x2))` (Python's divmod, elementwise). Jitted, as
  JAX's (`jit[name=divmod]`): for integers the two jitted functions, for floats one
  `_float_divmod`.

  Raises:
    TypeError: an argument that is not an array or scalar (a list).
    ValueError: if the shapes do not broadcast.
  """
  x1, x2 = _promote_args("divmod", promote_dtypes_numeric, x1, x2)
  if dtypes.is_integer(dtype_of(x1)):
    return floor_divide(x1, x2), remainder(x1, x2)
  if dtypes.is_complex(dtype_of(x1)):
    raise TypeError("floor_divide does not support complex-valued inputs")
  return _float_divmod(x1, x2)


def _static_int(y):
  """`operator.index(y)` for a concrete (untraced) `y` that has one (Python ints and bools,
  NumPy integer scalars, rank-0 integer arrays), else None."""
  if isinstance(y, Tracer):
    return None
  try:
    return operator.index(y)
  except TypeError:
    return None


def power(x: ArrayLike, y: ArrayLike, /) -> Array:
  """x ** y elementwise, with JAX's numpy's cases:

  1. a concrete integer exponent (a Python int or bool, a NumPy integer scalar, a concrete
     rank-0 integer array; not a traced value) is static: `lax.integer_pow` of x (bool x
     becomes int32), which keeps x's dtype and weak type;
  2. integer or bool operands otherwise: promoted together (bool to int32), then binary
     exponentiation over the low 6 bits of the exponent taken as unsigned, as JAX (so a
     negative exponent gives a wrapped product, not 0; e.g. `3 ** int8(-1) == -85`);
  3. a floating/complex base with an integer exponent array: `lax.pow(x, y)` as they are;
  4. otherwise both promoted to their common type, then `lax.pow`.

  Raises:
    TypeError: for an integer base with a static negative exponent (JAX's message).
  """
  check_arraylike("power", x, y)
  n = _static_int(y)
  if n is not None and not isinstance(x, (list, tuple)):
    x, = promote_dtypes_numeric(x)
    return lax.integer_pow(as_array(x), n)
  x, y = as_array(asarray_or_scalar(x)), as_array(asarray_or_scalar(y))
  x, y = _promote_shapes(x, y, name="power", lax_broadcasts=True)
  x_, y_ = promote_dtypes_numeric(x, y)
  if dtypes.is_integer(dtype_of(x_)):
    return _integer_power(x_, y_)
  if dtypes.is_inexact(dtype_of(x)) and dtypes.is_integer(dtype_of(y)):
    return lax.pow(x, y)
  return lax.pow(x_, y_)


def _integer_power(x, y):
  """JAX's integer power: binary exponentiation over the low 6 bits of y (any larger
  exponent overflows for |x| > 1), y's bits read as unsigned; 0 ** y is 0 for y != 0.
  Strongly typed result. As JAX's, the operands keep their size-1 dimensions (lax's
  elementwise operations broadcast them) and each step selects with the jitted `_where`."""
  zero, one = np.zeros((), dtype_of(y)), np.ones((), dtype_of(y))
  acc = _where(lax.bitwise_and(lax.eq(x, zero), lax.ne(y, zero)), zero, one)
  for _ in range(6):
    acc = _where(lax.bitwise_and(y, one), lax.mul(acc, x), acc)
    x = lax.mul(x, x)
    y = lax.shift_right_logical(y, one)
  return acc


pow = power


def float_power(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """x1 ** x2 computed in the promoted inexact dtype (float32 unless x64 is on)."""
  check_arraylike("float_power", x1, x2)
  x1, x2 = promote_dtypes_inexact(x1, x2)
  x1, x2 = promote_shapes("float_power", x1, x2)   # lax.pow broadcasts, as in JAX
  return lax.pow(x1, x2)


def _neg_no_bool(x):
  if dtype_of(x) == dtypes.bool_:   # as JAX: negating booleans is an error, not int math
    raise TypeError("neg does not accept dtype bool. Accepted dtypes are subtypes of integer, "
                    "floating, complexfloating.")
  return [x]


negative = _unary_ufunc("negative", lambda x: lax.neg(x), _neg_no_bool, "-x")


def positive(x: ArrayLike, /) -> Array:
  """+x (a copy)."""
  check_arraylike("positive", x)
  return asarray(x)


def absolute(x: ArrayLike, /) -> Array:
  """|x| elementwise (real for complex; identity for unsigned and bool)."""
  check_arraylike("absolute", x)
  x = asarray_or_scalar(x)
  if not isinstance(x, (Array, Tracer)):
    x = asarray(x)
  dt = dtype_of(x)
  if dt == dtypes.bool_ or dtypes.is_unsigned(dt):
    return x
  return lax.abs(x)


abs = absolute


def fabs(x: ArrayLike, /) -> Array:
  """|x| as a float (integers give the default float).

  Raises:
    TypeError: for complex inputs.
  """
  x, = _inexact_args("fabs", x, allow_complex=False)
  return lax.abs(x)


def sign(x: ArrayLike, /) -> Array:
  """-1, 0 or 1 elementwise (x/|x| for complex).

  Raises:
    TypeError: for bool `x` (as JAX: lax.sign's message; NumPy has no bool sign either).
  """
  check_arraylike("sign", x)
  x = asarray_or_scalar(x)
  if not isinstance(x, (Array, Tracer)):
    x = asarray(x)
  return lax.sign(x)


def square(x: ArrayLike, /) -> Array:
  """x * x elementwise; bool promotes to the default integer."""
  x, = promote_dtypes_numeric(x)
  if dtypes.is_python_scalar(x):
    x = array(x)
  return lax.square(x)


def reciprocal(x: ArrayLike, /) -> Array:
  """1 / x elementwise; integers give the default float."""
  x, = promote_dtypes_inexact(x)
  if not isinstance(x, (Array, Tracer)):
    x = asarray(x)
  return lax.div(lax.utils.weak_scalar(np.ones((), dtype_of(x))[()]), x)


maximum = _binary_ufunc("maximum", lax.max, doc="Elementwise maximum (NaN-propagating)")
minimum = _binary_ufunc("minimum", lax.min, doc="Elementwise minimum (NaN-propagating)")


@jit
def fmax(x1: ArrayLike, x2: ArrayLike) -> Array:
  """Elementwise maximum that ignores NaN (NaN only where both are NaN).

  As JAX's numpy, `where(x1 > x2 or isnan(x2), x1, x2)`, jitted (`jit[name=fmax]`): at a
  tie the derivative goes to `x2` alone (unlike `maximum`, which splits it).

  Raises:
    TypeError: an argument that is not an array or scalar (a list).
  """
  return where(logical_or(greater(x1, x2), isnan(x2)), x1, x2)


@jit
def fmin(x1: ArrayLike, x2: ArrayLike) -> Array:
  """Elementwise minimum that ignores NaN (NaN only where both are NaN); jitted, and at a
  tie the derivative goes to `x2` (see `fmax`)."""
  return where(logical_or(less(x1, x2), isnan(x2)), x1, x2)


@jit
def heaviside(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """Step function: 0 where x1 < 0, `x2` where x1 == 0, 1 where x1 > 0 (NaN stays NaN).

  Jitted, as JAX's (`jit[name=heaviside]`, three nested `_where`s); Python scalars enter as
  weakly typed values.

  Args:
    x1, x2: broadcast-compatible array-likes; integers and bool promote to the default
      float.

  Returns:
    Array of the broadcast shape and the promoted inexact dtype.

  Raises:
    TypeError: an argument that is not an array or scalar (a list).
    ValueError: if the shapes do not broadcast.
  """
  check_arraylike("heaviside", x1, x2)
  x1, x2 = promote_dtypes_inexact(x1, x2)
  x1, x2 = _promote_shapes(x1, x2, name="heaviside", lax_broadcasts=True)
  zero, one = _lax_const(x1, 0), _lax_const(x1, 1)
  return where(lax.lt(x1, zero), zero,
               where(lax.gt(x1, zero), one, where(isnan(x1), x1, x2)))


def _integer_args(name: str, *args):
  args = promote_dtypes(*args)
  if not dtypes.is_integer(dtype_of(args[0])):
    raise ValueError(f"Arguments to jax.numpy.{name} must be integers.")
  return _full_shapes(args)


def gcd(x1: ArrayLike, x2: ArrayLike) -> Array:
  """Greatest common divisor of |x1| and |x2| (gcd(0, 0) == 0), elementwise.

  Raises:
    ValueError: for non-integer inputs.

  Algorithm: Euclid's, as a `while_loop` until every remainder is 0 (as JAX's; the result
  keeps the arguments' weak type).
  """
  x1, x2 = _integer_args("gcd", x1, x2)
  shape = broadcast_shapes(shape_of(x1), shape_of(x2))
  a, b = broadcast_to_shape(absolute(x1), shape), broadcast_to_shape(absolute(x2), shape)

  def cond(c):
    return lax.reduce_or(lax.ne(c[1], lax.full_like(c[1], 0)), tuple(range(len(shape))))

  def body(c):
    a, b = c
    nz = lax.ne(b, lax.full_like(b, 0))
    safe = lax.select(nz, b, lax.full_like(b, 1))   # NB: no division by 0 where b is 0
    return lax.select(nz, b, a), lax.select(nz, lax.rem(a, safe), b)
  return lax.while_loop(cond, body, (a, b))[0]


def lcm(x1: ArrayLike, x2: ArrayLike) -> Array:
  """Least common multiple of |x1| and |x2| (0 if either is 0), elementwise.

  Raises:
    ValueError: for non-integer inputs.
  """
  x1, x2 = _integer_args("lcm", x1, x2)
  # NB: as JAX's (and NumPy's): the magnitudes are multiplied, so a product past the dtype's
  # range wraps (int8 lcm(62, 4) is -124); a zero gcd's quotient is masked.
  x1, x2 = absolute(x1), absolute(x2)
  d = gcd(x1, x2)
  return where(d == 0, lax.full_like(d, 0), multiply(x1, floor_divide(x2, d)))


# ---------------------------------------------------------------------------
# Comparison and logic


equal = _binary_ufunc("equal", lax.eq, doc="x == y")
not_equal = _binary_ufunc("not_equal", lax.ne, doc="x != y")


def _ordered(lax_fn):
  """An order comparison that takes complex operands lexicographically (the real parts, and
  the imaginary parts where the real parts are equal), as JAX's numpy does: NaN in the
  deciding part gives False. `lax.lt` and its kin reject complex operands, as JAX's lax."""
  def fn(x, y):
    if not dtypes.is_complex(dtype_of(x)):
      return lax_fn(x, y)
    x, y = _typed_scalars(x, y)
    return lax.select(lax.eq(lax.real(x), lax.real(y)), lax_fn(lax.imag(x), lax.imag(y)),
                      lax_fn(lax.real(x), lax.real(y)))
  return fn


less = _binary_ufunc("less", _ordered(lax.lt), doc="x < y", lax_broadcasts=True)
less_equal = _binary_ufunc("less_equal", _ordered(lax.le), doc="x <= y", lax_broadcasts=True)
greater = _binary_ufunc("greater", _ordered(lax.gt), doc="x > y", lax_broadcasts=True)
greater_equal = _binary_ufunc("greater_equal", _ordered(lax.ge), doc="x >= y", lax_broadcasts=True)


def _logical(lax_fn):
  # As JAX's numpy: the operands are promoted together first (so the result is weakly typed
  # when both are weak numbers, never for two bools), then each is compared with 0.
  def fn(x, y):
    x, y = _typed_scalars(x, y)
    return lax_fn(to_bool(x), to_bool(y))
  return fn


logical_and = _binary_ufunc("logical_and", _logical(lax.bitwise_and), lax_broadcasts=True,
                             doc="x and y")
logical_or = _binary_ufunc("logical_or", _logical(lax.bitwise_or), lax_broadcasts=True,
                             doc="x or y")
logical_xor = _binary_ufunc("logical_xor", _logical(lax.bitwise_xor), lax_broadcasts=True,
                             doc="x xor y")


def logical_not(x: ArrayLike, /) -> Array:
  """Elementwise NOT of `x != 0`; bool result."""
  return lax.bitwise_not(to_bool(asarray_or_scalar(x) if not isinstance(x, (int, float))
                                  else array(x)))


@jit(static_argnames=("equal_nan",))
def isclose(a: ArrayLike, b: ArrayLike, rtol: ArrayLike = 1e-05, atol: ArrayLike = 1e-08,
            equal_nan: bool = False) -> Array:
  """`a == b or (isfinite(b) and |a - b| <= atol + rtol * |b|)` elementwise (NumPy's
  isclose: infinities are close only to the same infinity, NaN to nothing unless
  `equal_nan`). Jitted, as JAX's (`jit[name=isclose]`, static `equal_nan`); for typed PRNG
  keys, close means equal.

  Args:
    a, b: broadcast-compatible array-likes (promoted to a common inexact dtype).
    rtol, atol: tolerances (converted to the real dtype of the promoted inputs).
    equal_nan: whether NaN compares equal to NaN.

  Returns:
    bool Array of the broadcast shape.

  Raises:
    TypeError: an argument that is not an array or scalar (a list).
    ValueError: if the shapes do not broadcast.
  """
  if _any_keys(a, b):   # typed PRNG keys, as JAX: close means equal
    return a == b
  check_arraylike("isclose", a, b)
  a, b = promote_dtypes(a, b)
  a, b = _promote_shapes(a, b, name="isclose", lax_broadcasts=True)
  a, b = promote_dtypes_inexact(a, b)
  rdt = real_dtype(dtype_of(a))
  # NB: untraced tolerances (the defaults) convert on the host, as JAX's: literals.
  rtol, atol = (np.asarray(t, rdt)[()] if isinstance(t, (int, float, np.generic)) else
                lax.convert_element_type(t, rdt) for t in (rtol, atol))
  both_nan = logical_and(isnan(a), isnan(b))
  finite_b = isfinite(b)
  in_range = lax.le(lax.abs(lax.sub(a, b)), lax.add(atol, lax.mul(rtol, lax.abs(b))))
  out = logical_or(lax.eq(a, b), logical_and(finite_b, in_range))
  return logical_or(out, both_nan) if equal_nan else out


@jit(static_argnames=("equal_nan",))
def allclose(a: ArrayLike, b: ArrayLike, rtol: ArrayLike = 1e-05, atol: ArrayLike = 1e-08,
             equal_nan: bool = False) -> Array:
  """Whether `isclose(a, b, rtol, atol, equal_nan)` holds everywhere: a bool scalar Array.
  Jitted, as JAX's (`jit[name=allclose]` around `isclose`).

  Raises:
    TypeError: an argument that is not an array or scalar (a list).
    ValueError: if the shapes do not broadcast.
  """
  check_arraylike("allclose", a, b)
  close = isclose(a, b, rtol, atol, equal_nan)
  return lax.reduce_and(close, tuple(range(ndim_of(close))))


def _any_keys(*args) -> bool:
  return any(type(a) in KEY_TYPES for a in args)   # NB: their data is not read


def array_equal(a1: ArrayLike, a2: ArrayLike, equal_nan: bool = False) -> Array:
  """Whether `a1` and `a2` have the same shape and elements (a bool scalar Array; False for
  different shapes, with no error)."""
  if _any_keys(a1, a2):   # typed PRNG keys: equal keys; False against anything else
    if not (_any_keys(a1) and _any_keys(a2)) or a1.shape != a2.shape:
      return array(False)
    return _all(a1 == a2)
  a1, a2 = as_array(a1), as_array(a2)
  if shape_of(a1) != shape_of(a2):
    return array(False)
  eq = equal(a1, a2)
  if equal_nan:
    eq = logical_or(eq, logical_and(isnan(a1), isnan(a2)))
  return _all(eq)


def _all(eq: Any) -> Any:
  """`jnp.all` of a bool array, as JAX's `array_equal` takes it: a weak value made strong,
  then one `reduce_and` over every axis."""
  if eq.weak_type:
    eq = lax.convert_element_type(eq, dtypes.bool_, weak_type=False)
  return lax.reduce_and(eq, tuple(range(ndim_of(eq))))


def array_equiv(a1: ArrayLike, a2: ArrayLike) -> Array:
  """Whether `a1` and `a2` broadcast to one shape with equal elements (False, with no
  error, if they do not broadcast)."""
  a1, a2 = as_array(a1), as_array(a2)
  try:
    broadcast_shapes(shape_of(a1), shape_of(a2))
  except ValueError:
    return array(False)
  return lax.reduce_and(ravel(equal(a1, a2)), (0,))


# ---------------------------------------------------------------------------
# Bitwise operations


bitwise_and = _binary_ufunc("bitwise_and", lax.bitwise_and, doc="x & y")
bitwise_or = _binary_ufunc("bitwise_or", lax.bitwise_or, doc="x | y")
bitwise_xor = _binary_ufunc("bitwise_xor", lax.bitwise_xor, doc="x ^ y")


def invert(x: ArrayLike, /) -> Array:
  """Bitwise NOT (logical NOT for bool)."""
  x = asarray_or_scalar(x)
  if dtypes.is_python_scalar(x):
    x = array(x)
  return lax.bitwise_not(x)


bitwise_not = bitwise_invert = invert


def _shift_args(name, x1, x2):
  x1, x2 = promote_dtypes_numeric(x1, x2)
  if not dtypes.is_integer(dtype_of(x1)):
    raise TypeError(f"jnp.{name} only accepts integer or bool inputs, got "
                    f"{dtype_of(x1).name}.")
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
  if dtypes.is_unsigned(dtype_of(x1)):
    return lax.shift_right_logical(x1, x2)
  return lax.shift_right_arithmetic(x1, x2)


bitwise_left_shift, bitwise_right_shift = left_shift, right_shift


@jit
def bitwise_count(x: ArrayLike, /) -> Array:
  """The number of 1 bits in |x|, as uint8 (as JAX's numpy). Jitted, as JAX's
  (`jit[name=bitwise_count]`).

  Raises:
    TypeError: `x` not an array or scalar (a list), or not an integer or bool.
  """
  check_arraylike("bitwise_count", x)
  x = as_array(x)
  if dtype_of(x) == dtypes.bool_:
    x = lax.convert_element_type(x, dtypes.uint8)
  if not dtypes.is_integer(dtype_of(x)):
    raise TypeError(f"bitwise_count requires an integer or bool input, got {dtype_of(x).name}.")
  return lax.convert_element_type(lax.population_count(absolute(x)), dtypes.uint8)


# ---------------------------------------------------------------------------
# Exponentials, logarithms and trigonometry


exp = _unary_ufunc("exp", lax.exp, promote_dtypes_inexact, "e**x")
exp2 = _unary_ufunc("exp2", lax.exp2, promote_dtypes_inexact, "2**x")
log = _unary_ufunc("log", lax.log, promote_dtypes_inexact, "Natural logarithm")
log1p = _unary_ufunc("log1p", lax.log1p, promote_dtypes_inexact, "log(1 + x)")
expm1 = _unary_ufunc("expm1", lax.expm1, promote_dtypes_inexact, "e**x - 1")
def _log2(x):
  # NB: a complex logarithm's parts are scaled separately (JAX's): dividing by a complex
  # log(2) would turn the imaginary part of log(-inf) into nan.
  out = lax.log(x)
  if dtypes.is_complex(dtype_of(x)):
    re, im = lax.real(out), lax.imag(out)
    den = lax.log(np.asarray(2, dtypes.finfo(dtype_of(x)).dtype)[()])
    return lax.complex(lax.div(re, den), lax.div(im, den))
  return lax.div(out, lax.log(np.asarray(2, dtype_of(x))[()]))


# log10(e) = 1 / ln(10) correctly rounded to float64, the constant JAX's log10 multiplies by
# (the float64 quotient `1 / np.log(10)` is one ulp above it).
_LOG10_E = 0.4342944819032518


def _log10(x):
  out = lax.log(x)
  if dtypes.is_complex(dtype_of(x)):   # NB: as in _log2
    re, im = lax.real(out), lax.imag(out)
    c = np.asarray(_LOG10_E, dtypes.finfo(dtype_of(x)).dtype)[()]
    return lax.complex(lax.mul(re, c), lax.mul(im, c))
  return lax.mul(out, np.asarray(_LOG10_E, dtype_of(x))[()])


log2 = _unary_ufunc("log2", _log2, promote_dtypes_inexact, "Base-2 logarithm")
log10 = _unary_ufunc("log10", _log10, promote_dtypes_inexact, "Base-10 logarithm")
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


arctan2 = _binary_ufunc("arctan2", lax.atan2, promote_dtypes_inexact,
                        doc="Arctangent of x/y in radians, quadrant-aware")


arcsinh = _unary_ufunc("arcsinh", lax.asinh, promote_dtypes_inexact, "Inverse hyperbolic sine")
arccosh = jit(_unary_ufunc("arccosh", lax.acosh, promote_dtypes_inexact,
                           "Inverse hyperbolic cosine; jitted, as JAX's (`jit[name=arccosh]`)"))
arctanh = _unary_ufunc("arctanh", lax.atanh, promote_dtypes_inexact,
                       "Inverse hyperbolic tangent")
asin, acos, atan, asinh, acosh, atanh, atan2 = (arcsin, arccos, arctan, arcsinh, arccosh,
                                               arctanh, arctan2)


@jit
def hypot(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """sqrt(x1**2 + x2**2) without intermediate overflow (inf if either is infinite): with
  `hi`/`lo` the larger/smaller magnitude, `hi * sqrt(1 + (lo / hi)**2)` (0 where hi is 0).
  Jitted, as JAX's (`jit[name=hypot]`, its selections `_where`s).

  Args:
    x1, x2: broadcast-compatible real array-likes (integers promote to the default float).

  Returns:
    Array of the broadcast shape and the promoted inexact dtype.

  Raises:
    ValueError: for complex inputs (take abs() first).
  """
  x1, x2 = _inexact_args("hypot", x1, x2, lax_name="or")
  if dtypes.is_complex(dtype_of(x1)):
    raise ValueError("jnp.hypot is not well defined for complex-valued inputs. Please "
                     "convert to real values first, such as by using abs(x)")
  x1, x2 = lax.abs(x1), lax.abs(x2)
  inf = const(x1, np.inf)
  any_inf = lax.bitwise_or(lax.eq(x1, inf), lax.eq(x2, inf))
  hi, lo = lax.max(x1, x2), lax.min(x1, x2)
  hi_zero = lax.eq(hi, const(hi, 0))
  ratio = lax.div(lo, where(lax.eq(hi, const(hi, 0)), full_like(hi, 1), hi))
  out = where(hi_zero, hi, lax.mul(hi, lax.sqrt(lax.add(const(hi, 1), lax.square(ratio)))))
  return where(any_inf, _typed_scalar(out, np.inf), out)


def deg2rad(x: ArrayLike, /) -> Array:
  """Degrees to radians: `x * pi / 180` (integers give the default float)."""
  x, = _inexact_args("deg2rad", x)
  return lax.mul(x, const(x, np.pi / 180))


def rad2deg(x: ArrayLike, /) -> Array:
  """Radians to degrees: `x * 180 / pi` (integers give the default float)."""
  x, = _inexact_args("rad2deg", x)
  return lax.mul(x, const(x, 180 / np.pi))


radians, degrees = deg2rad, rad2deg


# ---------------------------------------------------------------------------
# Functions with JAX's custom derivatives: logarithms of sums, sinc, i0


def logaddexp(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """log(exp(x1) + exp(x2)) without overflow: `max + log1p(exp(-|x1 - x2|))`.

  Args:
    x1, x2: broadcast-compatible array-likes; integers promote to the default float.

  Returns:
    Array of the broadcast shape and promoted inexact dtype; NaN if either is NaN, and
    `inf`/`-inf` handled as NumPy does (`logaddexp(-inf, -inf) == -inf`).

  Complex inputs: JAX's formula (see `_complex_logaddexp`), the imaginary part wrapped into
  [-pi, pi); a weak result for rank-0 weak inputs only, as JAX.

  Derivatives are JAX's custom rule `t1 * exp(x1 - out) + t2 * exp(x2 - out)` with `+inf`
  replaced by 0 in `x1`, `x2` and `out`, so that they stay finite where an input is
  infinite.
  """
  x1, x2 = _inexact_args("logaddexp", x1, x2, lax_name="max")
  return _logaddexp(x1, x2)


def _replace_inf(x):
  """`x` with `+inf` (complex: a real part of +inf) replaced by 0 (JAX's helper for the
  logaddexp derivatives)."""
  re = lax.real(x) if dtypes.is_complex(dtype_of(x)) else x
  return lax.select(lax.eq(re, const(re, np.inf)), _full_c(x, 0), x)


def _lax_const(x, v):
  """`v` in x's dtype as JAX's `lax._const` makes it: weakly typed for a rank-0 `x` only, so
  a weak `x` of higher rank combined with it gives a strongly typed result."""
  return const(x, v) if shape_of(x) == () else np.asarray(v, dtype_of(x))[()]


def _wrap_between(x, a: float):
  """`x` wrapped into [-a, a): `((x + a) mod 2a) - a` with a non-negative modulus."""
  a_, two_a = _lax_const(x, a), _lax_const(x, 2 * a)
  r = lax.rem(lax.add(x, a_), two_a)
  r = lax.select(lax.lt(r, _lax_const(x, 0)), lax.add(r, two_a), r)
  return lax.sub(r, a_)


def _complex_logaddexp(x1, x2, exp_fn, scale, period):
  """log(exp(x1) + exp(x2)) for complex numbers as JAX computes it: `m + s * log1p(exp_fn(x1 +
  x2 - 2m))` with m the lexicographic maximum (so the exponent's real part is <= 0) and the
  imaginary part wrapped into [-period, period)."""
  amax = lax.max(x1, x2)
  delta = lax.sub(lax.add(x1, x2), lax.mul(amax, _lax_const(amax, 2)))
  tail = lax.log1p(exp_fn(delta))
  if scale is not None:
    tail = lax.mul(_lax_const(amax, scale), tail)
  out = lax.add(amax, tail)
  return lax.complex(lax.real(out), _wrap_between(lax.imag(out), period))


def _logaddexp_tangent(exp_fn, t1, t2, x1, x2, out):
  """`t1 * exp_fn(x1 - out) + t2 * exp_fn(x2 - out)`, infinities read as 0 (JAX's rule: the
  derivative stays finite where an operand or the result is infinite)."""
  terms = [lax.mul(t, exp_fn(lax.sub(_replace_inf(x), _replace_inf(out))))
           for t, x in ((t1, x1), (t2, x2))]
  return lax.add(*terms)


def _typed_scalar(x, v):
  """`v` as a scalar of x's dtype, weakly typed where x is (JAX's `_lax_const`, a typed
  literal: a selection with it keeps x's type and stages no conversion)."""
  dt = dtype_of(x)
  if getattr(core.get_aval(x), "weak_type", False):   # a Python scalar, as JAX's
    return {"f": float, "c": complex, "b": bool}.get(dt.kind, int)(v)
  return np.array(v, dt)


def _named(name: str):
  """Gives the decorated function `name` (what a custom_jvp equation prints, as JAX's)."""
  def set_name(f):
    f.__name__ = f.__qualname__ = name
    return f
  return set_name


@custom_jvp
@_named("logaddexp")
def _logaddexp(x1, x2):
  if dtypes.is_complex(dtype_of(x1)):
    return _complex_logaddexp(x1, x2, lax.exp, None, np.pi)
  amax = lax.max(x1, x2)
  delta = lax.sub(x1, x2)
  # NB: delta is NaN for equal infinities; x1 + x2 then gives the right inf (or NaN).
  return lax.select(lax.ne(delta, delta), lax.add(x1, x2),
                    lax.add(amax, lax.log1p(lax.exp(lax.neg(lax.abs(delta))))))


def _logaddexp_jvp(primals, tangents):
  out = _logaddexp(*primals)
  return out, _logaddexp_tangent(lax.exp, *tangents, *primals, out)


_logaddexp.defjvp(_logaddexp_jvp)


def logaddexp2(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """log2(2**x1 + 2**x2) without overflow; see `logaddexp` (derivatives too, with `exp2`)."""
  x1, x2 = _inexact_args("logaddexp2", x1, x2, lax_name="max")
  return _logaddexp2(x1, x2)


# NB: JAX's ufuncs: one compiled program on eager values (bit for bit JAX's results)
logaddexp = _as_jax_ufunc(logaddexp, one_primitive=False)
logaddexp2 = _as_jax_ufunc(logaddexp2, one_primitive=False)


@custom_jvp
@_named("logaddexp2")
def _logaddexp2(x1, x2):
  if dtypes.is_complex(dtype_of(x1)):
    return _complex_logaddexp(x1, x2, lax.exp2, 1 / np.log(2), np.pi / np.log(2))
  amax = lax.max(x1, x2)
  delta = lax.sub(x1, x2)
  is_nan, both = lax.ne(delta, delta), lax.add(x1, x2)
  tail = lax.mul(const(x1, 1 / np.log(2)), lax.log1p(lax.exp2(lax.neg(lax.abs(delta)))))
  return lax.select(is_nan, both, lax.add(amax, tail))


def _logaddexp2_jvp(primals, tangents):
  out = _logaddexp2(*primals)
  return out, _logaddexp_tangent(lax.exp2, *tangents, *primals, out)


_logaddexp2.defjvp(_logaddexp2_jvp)


@jit
def sinc(x: ArrayLike, /) -> Array:
  """The normalized sinc function `sin(pi x) / (pi x)`, 1 at 0 (jitted, as JAX's).

  Derivatives of every order are exact at 0 too: there the value comes from the Maclaurin
  series of `sin(y) / y` at `y = pi x`, whose k-th derivative is JAX's custom rule
  (`(-1)**(k/2) / (k + 1)` for even k, 0 for odd k).
  """
  x, = _inexact_args("sinc", x)
  eq_zero = lax.eq(x, const(x, 0))
  pi_x = lax.mul(_typed_scalar(x, np.pi), x)
  safe = where(eq_zero, _typed_scalar(x, 1), pi_x)
  return where(eq_zero, _sinc_maclaurin(0, pi_x), lax.div(lax.sin(safe), safe))


@functools.partial(custom_jvp, nondiff_argnums=(0,))
def _sinc_maclaurin(k, x):
  """The k-th derivative of `sin(y) / y` at `y = 0`, shaped like `x` (whose tangent, by the
  custom rule, is the (k+1)-th derivative times the tangent of x)."""
  zero = lax.mul(x, const(x, 0))
  return zero if k % 2 else lax.add(zero, const(x, (-1) ** (k // 2) / (k + 1)))


@_sinc_maclaurin.defjvp
def _sinc_maclaurin_jvp(k, primals, tangents):
  (x,), (t,) = primals, tangents
  return _sinc_maclaurin(k, x), lax.mul(_sinc_maclaurin(k + 1, x), t)


@jit
def i0(x: ArrayLike) -> Array:
  """The modified Bessel function of the first kind, order 0: `exp(|x|) * i0e(|x|)`.

  Its derivative is 0 at `x == 0` (JAX's custom rule: `|x|` has no derivative there, and
  `i0` is even, so its derivative vanishes at 0).

  Jitted, as JAX's (`jit[name=i0]`).

  Raises:
    TypeError: `x` not an array or scalar (a list).
    ValueError: for complex input.
  """
  check_arraylike("i0", x)
  x, = promote_dtypes_inexact(x)
  x = as_array(x)
  if not dtypes.is_float(dtype_of(x)):
    raise ValueError(f"Unsupported input type to stagecraft.numpy.i0: {dtype_of(x)}")
  return _i0(x)


@custom_jvp
def _i0(x):
  ax = lax.abs(x)
  return lax.mul(lax.exp(ax), lax.bessel_i0e(ax))


@_i0.defjvp
def _i0_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  (out,), (t_out,) = ad.jvp_flat(lambda x: [_i0.fun(x)], [x], [t])
  t_out = ad.instantiate_zeros(t_out)
  return out, lax.select(lax.eq(x, const(x, 0)), _full_c(t_out, 0), t_out)


# ---------------------------------------------------------------------------
# Rounding


def _int_passthrough(lax_fn):
  def fn(x):
    return x if not dtypes.is_inexact(dtype_of(x)) else lax_fn(x)
  return fn


floor = _unary_ufunc("floor", _int_passthrough(lax.floor), doc="Floor")
ceil = _unary_ufunc("ceil", _int_passthrough(lax.ceil), doc="Ceiling")
@jit
def trunc(x: ArrayLike) -> Array:
  """Rounds toward zero: `where(x < 0, ceil(x), floor(x))`; integers and bool are returned
  as they are. Jitted, as JAX's (`jit[name=trunc]`).

  Raises:
    TypeError: `x` not an array or scalar (a list).
  """
  check_arraylike("trunc", x)
  x = as_array(x)
  if not dtypes.is_inexact(dtype_of(x)):
    return x
  return where(lax.lt(x, _lax_const(x, 0)), ceil(x), floor(x))


@jit(static_argnames=("decimals",))
def round(a: ArrayLike, decimals: int = 0, out: None = None) -> Array:
  """Rounds to `decimals` places, halves to even (as numpy.round). Jitted, as JAX's
  (`jit[name=round]`, static `decimals`).

  Args:
    a: array-like `T[*s]`: integer (returned as it is), floating or complex (the real and
      imaginary parts are rounded separately, as JAX).
    decimals: static int; negative values round to tens, hundreds, ... (floats only).
    out: unsupported (must be None).

  Returns:
    Array `T[*s]`, weak type kept. Rounding to `decimals != 0` scales by `10**decimals`,
    rounds and divides back (float16 is scaled in float32, as JAX); `decimals` beyond the
    dtype's range (`10**decimals > finfo.max`) returns `a`.

  Raises:
    TypeError: `a` not an array or scalar (a list), or a non-integer `decimals`.
    ValueError: for bool input (as JAX: bool is not inexact).
    NotImplementedError: integers with negative `decimals`; `out` given.
  """
  check_arraylike("round", a)
  decimals = operator.index(decimals)
  if out is not None:
    raise NotImplementedError("The 'out' argument to jnp.round is not supported.")
  a = as_array(a)
  dt = dtype_of(a)
  if dtypes.is_integer(dt):
    if decimals >= 0:
      return a
    raise NotImplementedError("integer np.round not implemented for decimals < 0 (round of "
                              "integers to negative decimals)")
  if dt == dtypes.bool_:
    raise ValueError(f"data type {np.bool_} not inexact")

  def round_real(x):
    if decimals == 0:
      return lax.round(x, 1)
    calc = dtypes.float32 if dtype_of(x) == dtypes.float16 else dtype_of(x)
    x = lax.convert_element_type(x, calc) if calc != dtype_of(x) else x
    factor = const(x, 10.0 ** decimals)
    out = lax.div(lax.round(lax.mul(x, factor), 1), factor)
    return lax.convert_element_type(out, dtypes.float16) if calc != real_dtype(dt) else out

  if decimals > np.log10(float(dtypes.finfo(dt).max)):
    return a   # rounding beyond the dtype's precision changes nothing, as JAX
  if dtypes.is_complex(dt):
    return lax.complex(round_real(lax.real(a)), round_real(lax.imag(a)))
  return round_real(a)


@jit(static_argnames=("decimals",))
def around(a: ArrayLike, decimals: int = 0, out: None = None) -> Array:
  """`round` (jitted around it, as JAX's: `jit[name=around]` holding `jit[name=round]`)."""
  return round(a, decimals, out)


@jit
def rint(x: ArrayLike, /) -> Array:
  """Rounds to the nearest integer, halves to even. Jitted, as JAX's (`jit[name=rint]`).

  Bool and integer inputs give the default float dtype (float64 under x64), strongly typed
  (a cast, as JAX's numpy.rint); complex inputs round both parts.

  Raises:
    TypeError: `x` not an array or scalar (a list).
  """
  check_arraylike("rint", x)
  x = as_array(x)
  dt = dtype_of(x)
  if dt == dtypes.bool_ or dtypes.is_integer(dt):
    return lax.convert_element_type(x, dtypes.default_float_dtype())
  if dtypes.is_complex(dt):
    return lax.complex(rint(lax.real(x)), rint(lax.imag(x)))
  return lax.round(x, 1)


@jit
def modf(x: ArrayLike, /, out=None) -> tuple[Array, Array]:
  """Fractional and integral parts, both with x's sign: `(x - whole, whole)` with
  `whole = where(x >= 0, floor(x), ceil(x))`; integers give the default float. Jitted, as
  JAX's (`jit[name=modf]`).

  Raises:
    TypeError: `x` not an array or scalar (a list), or complex.
    NotImplementedError: `out` given (as JAX's).
  """
  check_arraylike("modf", x)
  x, = promote_dtypes_inexact(x)
  if out is not None:
    raise NotImplementedError("The 'out' argument to jnp.modf is not supported.")
  x = as_array(x)
  if dtypes.is_complex(dtype_of(x)):
    raise TypeError("jnp.modf does not support complex-valued inputs; take the real part "
                    "or abs() first.")
  whole = where(lax.ge(x, _lax_const(x, 0)), floor(x), ceil(x))
  return lax.sub(x, whole), whole


# ---------------------------------------------------------------------------
# Floating-point classification and decomposition


def isfinite(x: ArrayLike, /) -> Array:
  """Whether x is neither infinite nor NaN (both parts for complex); True for integers and
  bool (a strongly typed result). Floating and complex inputs keep their weak type, as JAX."""
  check_arraylike("isfinite", x)
  x = as_array(x)
  dt = dtype_of(x)
  if dtypes.is_float(dt):
    return lax.is_finite(x)
  if dtypes.is_complex(dt):
    return lax.bitwise_and(lax.is_finite(lax.real(x)), lax.is_finite(lax.imag(x)))
  return full(shape_of(x), True, dtypes.bool_)


def isnan(x: ArrayLike, /) -> Array:
  """x != x elementwise (False for integers and bool); weakly typed for weak x, as JAX."""
  check_arraylike("isnan", x)
  x = as_array(x)
  return lax.ne(x, x)


@jit
def isinf(x: ArrayLike, /) -> Array:
  """|x| == inf elementwise (for complex: either part infinite; False for integers and
  bool). Jitted, as JAX's (`jit[name=isinf]`).

  Raises:
    TypeError: `x` not an array or scalar (a list).
  """
  check_arraylike("isinf", x)
  x = as_array(x)
  dt = dtype_of(x)
  if dtypes.is_float(dt):
    return lax.eq(lax.abs(x), np.asarray(np.inf, dt)[()])
  if dtypes.is_complex(dt):
    inf = np.asarray(np.inf, real_dtype(dt))[()]
    return lax.bitwise_or(lax.eq(lax.abs(lax.real(x)), inf), lax.eq(lax.abs(lax.imag(x)), inf))
  return full(shape_of(x), False, dtypes.bool_)


def isposinf(x: ArrayLike, /, out=None) -> Array:
  """x == +inf elementwise (False for integers; a strongly typed result).

  Raises:
    ValueError: for complex inputs (as JAX).
    NotImplementedError: `out` given (as JAX's).
  """
  x = as_array(x)
  if out is not None:
    raise NotImplementedError("The 'out' argument to isneginf/isposinf is not supported.")
  if dtypes.is_complex(dtype_of(x)):
    raise ValueError("isposinf/isneginf are not well defined for complex types")
  if not dtypes.is_float(dtype_of(x)):
    return full(shape_of(x), False, dtypes.bool_)
  return lax.eq(x, np.asarray(np.inf, dtype_of(x))[()])   # strong, as JAX


def isneginf(x: ArrayLike, /, out=None) -> Array:
  """x == -inf elementwise (False for integers; a strongly typed result).

  Raises:
    ValueError: for complex inputs (as JAX).
    NotImplementedError: `out` given (as JAX's).
  """
  x = as_array(x)
  if out is not None:
    raise NotImplementedError("The 'out' argument to isneginf/isposinf is not supported.")
  if dtypes.is_complex(dtype_of(x)):
    raise ValueError("isposinf/isneginf are not well defined for complex types")
  if not dtypes.is_float(dtype_of(x)):
    return full(shape_of(x), False, dtypes.bool_)
  return lax.eq(x, np.asarray(-np.inf, dtype_of(x))[()])   # strong, as JAX


@jit
def signbit(x: ArrayLike, /) -> Array:
  """Whether the sign bit is set (True for -0.0 and negative NaNs); `x < 0` for integers.
  Jitted, as JAX's (`jit[name=signbit]`): for floats the bits, as a signed integer of the
  same width, are shifted right arithmetically by width - 1 and converted to bool.

  Raises:
    TypeError: `x` not an array or scalar (a list).
    ValueError: for complex inputs.
  """
  check_arraylike("signbit", x)
  x = as_array(x)
  dt = dtype_of(x)
  if dt == dtypes.bool_:
    return full(shape_of(x), False, dtypes.bool_)
  if dtypes.is_integer(dt):   # a strongly typed 0 (JAX's `_constant_like`): a strong result
    return lax.lt(x, np.zeros((), dt)[()])
  if dtypes.is_complex(dt):
    raise ValueError(f"stagecraft.numpy.signbit is not well defined for {dt.name}")
  if dt.itemsize == 1:   # float8: go through float32, which keeps the sign of zero and NaN
    x, dt = lax.convert_element_type(x, dtypes.float32), dtypes.float32
  idt = np.dtype(f"int{dt.itemsize * 8}")
  bits = lax.bitcast_convert_type(x, idt)
  return lax.convert_element_type(
      lax.shift_right_arithmetic(bits, const(bits, dt.itemsize * 8 - 1)), dtypes.bool_)


@jit
def copysign(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """|x1| with the sign (bit) of x2, elementwise. Jitted, as JAX's (`jit[name=copysign]`,
  holding `signbit` and a `_where`).

  Raises:
    TypeError: an argument that is not an array or scalar (a list), or complex inputs.
  """
  check_arraylike("copysign", x1, x2)
  x1, x2 = promote_dtypes_inexact(x1, x2)
  x1, x2 = _promote_shapes(x1, x2, name="copysign", lax_broadcasts=True)
  if dtypes.is_complex(dtype_of(x1)):
    raise TypeError("copysign does not support complex-valued inputs")
  return where(signbit(x2), lax.neg(lax.abs(x1)), lax.abs(x1))


@jit
def ldexp(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """x1 * 2**x2 for integer exponents x2, elementwise. Jitted, as JAX's (`jit[name=ldexp]`).

  As JAX's: x1's exponent is split off first (`frexp`) and added to x2, so a small x1 with
  a large x2 (or the reverse) stays finite where the result is; inf, -inf and (signed) zero
  x1 are returned as they are. The result has x1's inexact dtype and the broadcast shape.

  Raises:
    ValueError: if x1 is complex or x2 inexact (JAX's words, naming both dtypes).
  """
  x2 = as_array(x2)
  d1 = np.dtype(dtype_of(as_array(x1)))
  if dtypes.is_complex(d1) or dtypes.is_inexact(dtype_of(x2)):
    raise ValueError(f"ldexp not supported for input types {(d1, np.dtype(dtype_of(x2)))}")
  x1, = promote_dtypes_inexact(x1)
  x1 = as_array(x1)
  dt = dtype_of(x1)
  x2 = lax.convert_element_type(x2, dt)
  mant, expo = frexp(x1)
  expo = add(lax.convert_element_type(expo, dt), x2)   # broadcasts x1's and x2's shapes
  # The exponent may be one past the largest and the result still finite: move one factor
  # of two into the mantissa.
  pos = lax.gt(expo, _scalar(0, dt))
  mant = _where(pos, lax.mul(mant, _scalar(2, dt)), mant)
  expo = _where(lax.gt(expo, _scalar(0, dt)), lax.sub(expo, _scalar(1, dt)), expo)
  out = lax.mul(mant, lax.pow(_scalar(2, dt), expo))
  keep = lax.bitwise_or(isinf(x1), lax.eq(x1, _scalar(0, dt)))
  return _where(keep, x1, out)


def _scalar(v, dt):
  return np.asarray(v, dt)[()]


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
  dt = dtype_of(x)
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
  e = lax.select(special, lax.broadcast_in_dim(np.zeros((), idt), shape_of(e), ()), e)
  return lax.convert_element_type(m, dt), lax.convert_element_type(e, dtypes.int32)


@_frexp.defjvp
def _frexp_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  m, e = _frexp(x)
  m_dot = lax.mul(t, lax.exp2(lax.neg(lax.convert_element_type(e, dtype_of(t)))))
  return (m, e), (m_dot, np.zeros(shape_of(e), dtypes.float0))


@jit
def nan_to_num(x: ArrayLike, copy: bool = True, nan: ArrayLike = 0.0,
               posinf: ArrayLike | None = None, neginf: ArrayLike | None = None) -> Array:
  """NaN -> `nan`, +inf -> `posinf` (default: the dtype's max), -inf -> `neginf` (default:
  its lowest); complex values have both parts replaced. Non-float inputs are returned as
  they are. Jitted, as JAX's (`jit[name=nan_to_num]`).

  Raises:
    TypeError: `x` not an array or scalar (a list).
  """
  check_arraylike("nan_to_num", x)
  x = as_array(x)
  dt = dtype_of(x)
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


def spacing(x: ArrayLike, /) -> Array:
  """The distance from x to the next representable number away from zero, with x's sign,
  as JAX computes it: `nextafter(x, copysign(inf, x)) - x`, where that is 0 the smallest
  subnormal with x's sign; for float16 `nextafter(x, inf) - x` (always towards +inf, as
  JAX's). NaN for inf and NaN.

  Raises:
    ValueError: for complex input.
  """
  x, = _inexact_args("spacing", x)
  if dtypes.is_complex(dtype_of(x)):
    raise ValueError("jnp.spacing is not defined for complex inputs.")
  dt = dtype_of(x)
  inf = _lax_const(x, np.inf)
  if dt == dtypes.float16:
    return lax.sub(lax.nextafter(x, inf), x)
  result = lax.sub(lax.nextafter(x, copysign(inf, x)), x)
  tiny = _lax_const(x, dtypes.finfo(dt).smallest_subnormal)
  return where(lax.eq(result, _lax_const(result, 0)), copysign(tiny, x), result)


def nextafter(x1: ArrayLike, x2: ArrayLike, /) -> Array:
  """The next representable float after x1 towards x2, elementwise."""
  check_arraylike("nextafter", x1, x2)
  x1, x2 = _inexact_args("nextafter", x1, x2, allow_complex=False,
                         lax_name="nextafter")
  return lax.nextafter(x1, x2)


# ---------------------------------------------------------------------------
# Complex numbers


def real(val: ArrayLike, /) -> Array:
  """The real part (the input itself for real dtypes)."""
  check_arraylike("real", val)
  val = as_array(val)
  return lax.real(val) if dtypes.is_complex(dtype_of(val)) else val


def imag(val: ArrayLike, /) -> Array:
  """The imaginary part (zeros of the input's dtype for real dtypes)."""
  check_arraylike("imag", val)
  val = as_array(val)
  return lax.imag(val) if dtypes.is_complex(dtype_of(val)) else full_like(val, 0)


def conjugate(x: ArrayLike, /) -> Array:
  """The complex conjugate (the input itself for real dtypes)."""
  check_arraylike("conjugate", x)
  x = as_array(x)
  return lax.conj(x) if dtypes.is_complex(dtype_of(x)) else x


conj = conjugate


@jit(static_argnames=("deg",))
def angle(z: ArrayLike, deg: bool = False) -> Array:
  """The counterclockwise angle of complex `z` from the positive real axis, in radians (in
  degrees with `deg`); 0 or pi for real inputs.

  Result dtype, as JAX: the real dtype of complex `z` and of floating `z` with ndim > 0
  (weak type kept); otherwise (integers, bool, rank-0 floats) the default float dtype,
  strongly typed. Jitted, as JAX's (`jit[name=angle]`, static `deg`).

  Raises:
    TypeError: `z` not an array or scalar (a list).
  """
  check_arraylike("angle", z)
  z = as_array(z)
  re, im = real(z), imag(z)
  dt = dtype_of(re)
  if not dtypes.is_inexact(dt) or (dtypes.is_float(dtype_of(z)) and ndim_of(z) == 0):
    dt = dtypes.default_float_dtype()
    re, im = lax.convert_element_type(re, dt), lax.convert_element_type(im, dt)
  out = lax.atan2(im, re)
  return rad2deg(out) if deg else out


@jit
def isreal(x: ArrayLike) -> Array:
  """Whether the imaginary part is 0 (True everywhere for real dtypes); weakly typed for a
  weak `x`, as JAX (`imag(x) == 0`). Jitted, as JAX's (`jit[name=isreal]`).

  Raises:
    TypeError: `x` not an array or scalar (a list).
  """
  check_arraylike("isreal", x)
  i = imag(x)
  return lax.eq(i, _lax_const(i, 0))


@jit
def iscomplex(x: ArrayLike) -> Array:
  """Whether the imaginary part is nonzero (False everywhere for real dtypes). Jitted, as
  JAX's (`jit[name=iscomplex]`).

  Raises:
    TypeError: `x` not an array or scalar (a list).
  """
  check_arraylike("iscomplex", x)
  i = imag(x)
  return lax.ne(i, _lax_const(i, 0))


# ---------------------------------------------------------------------------
# Selection


def where(condition: ArrayLike, x: ArrayLike = None, y: ArrayLike = None) -> Array:
  """`x` where `condition` else `y`, with broadcasting and promotion.

  The three-argument form; `stagecraft.numpy.where` dispatches the one-argument form
  (`nonzero`, with `size=`) to `stagecraft.numpy.indexing.where`. As in JAX's numpy, the
  selection is a jitted function, `_where` (a `jit[name=_where]` equation in a traced
  program; one compiled call when eager, so scalar operands are not materialized at the
  full shape outside it); Python scalars enter it as weakly typed values.

  Args:
    condition: bool-like array `[*c]` (nonzero counts as True).
    x, y: array-likes `[*a]`, `[*b]`.

  Returns:
    Array of the broadcast shape of `c`, `a`, `b` and the promoted dtype of x and y.

  Raises:
    ValueError: if only one of x and y is given, or shapes do not broadcast.
  """
  if x is None or y is None:
    raise ValueError("where: either both or neither of x and y must be given.")
  if type(x) in KEY_TYPES or type(y) in KEY_TYPES:
    return on_keys(where, condition, x, y, same=(x, y), reuse=WHERE)
  return _where(*(asarray_or_scalar(v) for v in (condition, x, y)))


@jit
def _where(condition, x, y):
  """The selection of `where` (jitted, named `_where` as JAX's): `condition != 0` unless
  bool, x and y promoted to their common dtype, the three broadcast to one shape (a rank-0
  condition is not: `select_n` takes it as it is), then `lax.select`; an empty result is
  the broadcast `x`."""
  condition, x, y = (as_array(v) for v in (condition, x, y))
  condition = to_bool(condition)
  x, y = promote_dtypes(x, y)
  if ndim_of(condition) == 0:
    shape = broadcast_shapes(shape_of(x), shape_of(y))
  else:
    shape = broadcast_shapes(shape_of(condition), shape_of(x), shape_of(y))
    condition = broadcast_to_shape(condition, shape)
  x, y = broadcast_to_shape(x, shape), broadcast_to_shape(y, shape)
  if 0 in shape:
    return x
  return lax.select(condition, x, y)


@jit
def clip(arr: ArrayLike | None = None, /, min: ArrayLike | None = None,
         max: ArrayLike | None = None) -> Array:
  """Limits values to [min, max] (either may be None): `minimum(max, maximum(min, arr))`,
  so where `min > max` the result is `max`. Jitted, as JAX's (`jit[name=clip]`); Python
  scalar bounds enter as weakly typed values.

  Args:
    arr: real array `T[*s]`.
    min, max: real array-likes broadcastable with `arr` (or None: no bound).

  Returns:
    Array of the broadcast shape and the promoted dtype.

  Raises:
    ValueError: if `arr` is None, or `arr`, `min` or `max` is complex (no order; JAX's
      message).
  """
  if arr is None:
    raise ValueError("No input was provided to the clip function.")
  check_arraylike("clip", arr)
  if any(v is not None and dtypes.is_complex(dtype_of(v)) for v in (arr, min, max)):
    raise ValueError("Clip received a complex value either through the input or the min/max "
                     "keywords. Complex values have no ordering and cannot be clipped. Please "
                     "convert to a real value or array by taking the real or imaginary "
                     "components via stagecraft.numpy.real/imag respectively.")
  out = as_array(arr)
  if min is not None:
    out = maximum(min, out)
  if max is not None:
    out = minimum(max, out)
  return as_array(out)
