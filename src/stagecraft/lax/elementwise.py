"""Elementwise primitives: arithmetic, transcendental functions, comparisons, bitwise logic,
`select_n` and `convert_element_type`; then shifts and bit counts, `bitcast_convert_type`,
`clamp`, `nextafter`, `reduce_precision` and the complex-number primitives (`real`, `imag`,
`conj`, `complex`). Special functions (lgamma, igamma, ...) are in special.py.

Operands of the n-ary ops broadcast as JAX 0.10's lax broadcasts them: rank-0 operands
against the others, and operands of one rank dimension by dimension where one has size 1
(`f32[2,4] - f32[1,4]` is `f32[2,4]`, lowered with a `stablehlo.broadcast_in_dim`); no rank
is added (`stagecraft.numpy` does that). `select_n` and `clamp` take equal shapes or rank 0
only, as JAX's. Dtypes must be equal: a Python scalar is an array of its default dtype
(int32, float32, complex64; 64-bit under x64) and is not promoted, as in JAX
(`stagecraft.numpy` promotes).
The result is weakly typed only when every operand is. Transcendental functions lower to
StableHLO ops or, where StableHLO has none, to CHLO ops (`chlo.asin`, `chlo.erf_inv`, ...),
which XLA's compiler expands (same as JAX).
"""
from __future__ import annotations

import builtins
import enum
import operator
from typing import Any
import warnings

import numpy as np

from stagecraft import core, dtypes
from stagecraft.core import Primitive, ShapedArray
from stagecraft.errors import MissingRuleError
from stagecraft.interpreters import ad, batching, lowering, mlir
from stagecraft.interpreters import partial_eval as pe
from stagecraft.interpreters.lowering import ir_type
from stagecraft.lax import utils
from stagecraft.lax.utils import KEY_TYPES, any_dtype, floating, inexact, integer, number
from stagecraft.lax.utils import weak_const as _c
from stagecraft.runtime import dispatch
from stagecraft.runtime.array import Array

# The lax functions and primitives, in the order defined; the shared rules (`unop`, `binop`,
# `broadcast_operands`, `emit_compare`, ...) serve the other lax modules and are not listed.
__all__ = ["stage", "neg_p", "exp_p", "log_p", "log1p_p", "expm1_p", "sqrt_p", "rsqrt_p", "cbrt_p",
           "sin_p", "cos_p", "tan_p", "tanh_p", "asin_p", "acos_p", "atan_p", "sinh_p", "cosh_p",
           "asinh_p", "acosh_p", "atanh_p", "erf_p", "erfc_p", "erf_inv_p", "floor_p", "ceil_p",
           "is_finite_p", "not_p", "abs_p", "exp2_p", "logistic_p", "sign_p", "round_p",
           "integer_pow_p", "square_p", "add_p", "sub_p", "mul_p", "div_p", "rem_p", "max_p", "min_p",
           "atan2_p", "and_p", "or_p", "xor_p", "pow_p", "eq_p", "ne_p", "lt_p", "le_p", "gt_p",
           "ge_p", "select_n_p", "convert_element_type_p", "neg", "exp", "exp2", "log", "log1p",
           "expm1", "sqrt", "rsqrt", "cbrt", "sin", "cos", "tan", "tanh", "asin", "acos", "atan",
           "sinh", "cosh", "asinh", "acosh", "atanh", "erf", "erfc", "erf_inv", "floor", "ceil",
           "is_finite", "bitwise_not", "abs", "sign", "logistic", "add", "sub", "mul", "div",
           "rem", "max", "min", "atan2", "pow", "bitwise_and", "bitwise_or", "bitwise_xor", "eq",
           "ne", "lt", "le", "gt", "ge", "integer_pow", "round", "select_n", "select",
           "convert_element_type", "shift_left_p", "shift_right_logical_p",
           "shift_right_arithmetic_p", "population_count_p", "clz_p", "shift_left",
           "shift_right_logical", "shift_right_arithmetic", "population_count", "clz",
           "bitcast_convert_type_p", "bitcast_convert_type", "clamp_p", "clamp", "nextafter_p",
           "nextafter", "reduce_precision_p", "reduce_precision", "real_p", "imag_p", "complex_p",
           "conj_p", "real", "imag", "conj", "complex", "reciprocal", "square", "dtype", "mulhi_p",
           "mulhi", "emit_minmax", "AccuracyMode", "Tolerance", "RoundingMethod"]

# NB: JAX's category order in the "Accepted dtypes" messages differs per primitive.
_signed = ("signedinteger", lambda d: dtypes.is_integer(d) and not dtypes.is_unsigned(d))
_abs_dtypes = (utils.float_kind, utils.complex_kind, _signed)  # stablehlo.abs rejects unsigned
_int_or_bool = (utils.int_kind, utils.bool_kind)

# ---------------------------------------------------------------------------
# Shared rules (special.py builds its primitives with them too)


def naryop_abstract_eval(name: str, accepted, result_dtype=None, allow_extended=False):
  """The abstract eval of an elementwise op: operands that broadcast
  (`utils.broadcasting_shape`), of `accepted` dtype kinds (see lax/utils.py) and one dtype;
  the result has the broadcast shape, the dtype `result_dtype(dtype)` (default: the
  operands'), and is weak only when every operand is. Shapes are checked before dtypes, so
  the errors come in JAX's order. `allow_extended`: operands of an extended dtype (typed
  keys) are accepted too (`eq`/`ne`, as JAX's)."""
  def rule(*avals, **params):
    shape = utils.broadcasting_shape(name, avals)
    for i, a in enumerate(avals):
      if allow_extended and not isinstance(a.dtype, np.dtype):
        continue
      utils.check_dtype(name, a, accepted, i if len(avals) > 1 else None)
    utils.check_same_dtypes(name, avals)
    dtype = avals[0].dtype if result_dtype is None else result_dtype(avals[0].dtype)
    weak = all(a.weak_type for a in avals)   # comparisons of weak values are weak, as JAX
    return ShapedArray(shape, dtype, weak)
  return rule


def broadcast_operand(ctx, x: str, aval: ShapedArray, shape: tuple[int, ...]) -> str:
  """Broadcasts the operand `x` of `aval`, rank 0 or of `shape`'s rank with size-1
  dimensions, to `shape` (no-op when the shapes agree), as JAX lowers it:
  `stablehlo.broadcast_in_dim` with `dims = []` or `dims = [0, 1, ...]`."""
  if aval.shape == shape:
    return x
  dims = ", ".join(map(str, range(len(aval.shape))))
  r = ctx.fb.fresh()
  ctx.fb.emit(f"{r} = stablehlo.broadcast_in_dim {x}, dims = [{dims}] : ({ir_type(aval)}) -> "
              f"{lowering.tensor_type(shape, aval.dtype)}")
  return r


def broadcast_operands(ctx, operands: list[str]) -> list[str]:
  """The operands of an elementwise lowering, broadcast to the result's shape."""
  shape = ctx.avals_out[0].shape
  return [broadcast_operand(ctx, x, a, shape) for x, a in zip(operands, ctx.avals_in)]


def _hlo_lowering(op: str):
  """Lowers to one StableHLO/CHLO op whose operands and result share a shape (with the
  `result_accuracy` attribute of an `accuracy` param)."""
  pretty = op.startswith("stablehlo.")

  def rule(ctx, *operands, accuracy=None, **params):
    operands = broadcast_operands(ctx, operands)
    if accuracy is not None and accuracy_attr(accuracy) is not None:
      return [_elementwise_with_accuracy(ctx, op, operands[0], accuracy)]
    out = ctx.avals_out[0]
    if pretty and all(a.dtype == out.dtype for a in ctx.avals_in):
      return [ctx.elementwise(op, *operands)]
    return ctx.op(op, operands, operand_avals=[a.update(shape=out.shape) for a in ctx.avals_in])
  return rule


# ---------------------------------------------------------------------------
# `accuracy=` of the transcendental functions (StableHLO's `result_accuracy`), and the
# rounding methods of `round`: JAX 0.10's AccuracyMode, Tolerance and RoundingMethod.


class AccuracyMode(enum.Enum):
  """The accuracy an op's implementation should reach (JAX's `lax.AccuracyMode`): HIGHEST
  asks the compiler for its most accurate implementation; DEFAULT for its default one."""
  HIGHEST = 1
  DEFAULT = 2


class Tolerance:
  """Error bounds an op's implementation must meet (JAX's `lax.Tolerance`): at most two of
  an absolute tolerance, a relative one and a number of units in the last place.

  Args:
    atol: float >= 0.
    rtol: float >= 0.
    ulps: int >= 0.

  Raises:
    ValueError: if a tolerance is negative, or all of them are 0 (JAX's messages).

  Equal tolerances compare (and hash) equal, so they share compiled programs.
  """
  __slots__ = ("atol", "rtol", "ulps")

  def __init__(self, atol: float = 0.0, rtol: float = 0.0, ulps: int = 0):
    if atol < 0.0 or rtol < 0.0 or ulps < 0.0:
      raise ValueError("Tolerances must be non-negative.")
    if atol == 0.0 and rtol == 0.0 and ulps == 0:
      raise ValueError("At least one of atol, rtol, or ulps must be set.")
    self.atol, self.rtol, self.ulps = atol, rtol, ulps

  def _key(self):
    return (float(self.atol), float(self.rtol), int(self.ulps))

  def __eq__(self, other):
    return isinstance(other, Tolerance) and self._key() == other._key()

  def __hash__(self):
    return hash(("Tolerance", self._key()))

  def __repr__(self):
    return f"Tolerance(atol={self.atol}, rtol={self.rtol}, ulps={self.ulps})"


class RoundingMethod(enum.IntEnum):
  """How `round` breaks ties (JAX's `lax.RoundingMethod`): AWAY_FROM_ZERO (0.5 -> 1,
  -0.5 -> -1) or TO_NEAREST_EVEN (banker's rounding: 0.5 -> 0, 1.5 -> 2)."""
  AWAY_FROM_ZERO = 0
  TO_NEAREST_EVEN = 1


def _check_accuracy(accuracy):
  if accuracy is not None and not isinstance(accuracy, (AccuracyMode, Tolerance)):
    raise NotImplementedError(f"Accuracy {accuracy} not supported")
  return accuracy


def accuracy_attr(accuracy) -> str | None:
  """The `#stablehlo.result_accuracy<...>` attribute of an `accuracy` param, as JAX emits
  it (None: no attribute, for None and AccuracyMode.DEFAULT)."""
  if accuracy is None or accuracy == AccuracyMode.DEFAULT:
    return None
  if isinstance(accuracy, AccuracyMode):
    return f"#stablehlo.result_accuracy<mode = #stablehlo.result_accuracy_mode<{accuracy.name}>>"
  fields = []
  if accuracy.atol:
    fields.append(f"atol = {float(accuracy.atol):.6e}")
  if accuracy.rtol:
    fields.append(f"rtol = {float(accuracy.rtol):.6e}")
  if accuracy.ulps:
    fields.append(f"ulps = {int(accuracy.ulps)}")
  fields.append("mode = #stablehlo.result_accuracy_mode<TOLERANCE>")
  return f"#stablehlo.result_accuracy<{', '.join(fields)}>"


def _elementwise_with_accuracy(ctx, op: str, x: str, accuracy, aval=None) -> str:
  aval = ctx.avals_out[0] if aval is None else aval
  r = ctx.fb.fresh()
  ctx.fb.emit(f"{r} = {op} {x} {{result_accuracy = {accuracy_attr(accuracy)}}} : "
              f"{ir_type(aval)}")
  return r


def unop(name: str, accepted, op: str, result_dtype=None) -> Primitive:
  """A unary elementwise primitive: its abstract eval, its lowering to the StableHLO/CHLO
  op `op`, and its batching rule (the JVP is the caller's)."""
  p = Primitive(name)
  p.def_abstract_eval(naryop_abstract_eval(name, accepted, result_dtype))
  lowering.register_lowering(p, _hlo_lowering(op))
  batching.defvectorized(p)   # the batch dim stays where it is
  return p


def binop(name: str, accepted, op: str, result_dtype=None) -> Primitive:
  """A binary elementwise primitive, as `unop` (batching: `defbroadcasting` below)."""
  p = Primitive(name)
  p.def_abstract_eval(naryop_abstract_eval(name, accepted, result_dtype))
  lowering.register_lowering(p, _hlo_lowering(op))
  defbroadcasting(p)
  return p


def defbroadcasting(p: Primitive) -> None:
  """Registers the batching rule of an n-ary elementwise primitive `p` whose operands
  broadcast (rank 0 and size-1 dimensions; multiple results all get the same batch dim):
  `batching.broadcast_batcher`, as JAX's."""
  batching.defbroadcasting(p)


# ---------------------------------------------------------------------------
# Autodiff helpers: the shape and zero bookkeeping of JAX's lax.py (`_maybe_broadcast`,
# `_unbroadcast`, `_zeros`, `_replace_zero`, `_balanced_eq`). JVP rules are written with the
# wrappers below (neg, mul, select, ...), defined later in this module; their constants are
# `_c(x, value)`, weakly typed scalars of x's dtype (lax does not promote Python scalars).


def _shape_and_reduction():
  """The lax modules `shape` and `reduction`.

  NB: the rules here broadcast and reshape with shape.py's ops and sum with reduction.py's
  `reduce_sum`, whose modules build on this one (and whose rules use the ops here): they
  are imported when a rule runs, here only."""
  from stagecraft.lax import reduction, shape
  return shape, reduction


def _broadcast_scalar(x: Any, shape: tuple[int, ...]) -> Any:
  """Broadcasts a rank-0 `x` to `shape`."""
  return _shape_and_reduction()[0].broadcast_in_dim(x, shape, ())


def _full_like(x: Any, value) -> Any:
  """An array of `x`'s shape and dtype filled with `value` (not weakly typed): a
  `broadcast_in_dim` of the constant, or for rank-0 `x` the constant itself (as JAX's
  `full_like`, so that the jaxprs print alike: `select_n p 0.0:f32[] 1.0:f32[]`)."""
  aval = core.get_aval(x)
  value = np.asarray(value, aval.dtype)[()]
  return _broadcast_scalar(value, aval.shape) if aval.shape else value


def _zeros(x: Any) -> Any:
  return _full_like(x, 0)


def _ones(x: Any) -> Any:
  return _full_like(x, 1)


def _out_shape(*xs: Any) -> tuple[int, ...]:
  """The result shape of an elementwise op on `xs` (`utils.broadcasting_shape`)."""
  return utils.broadcasting_shape("broadcast", [core.get_aval(x) for x in xs])


def _maybe_broadcast(shape: tuple[int, ...], t: Any) -> Any:
  """Broadcasts the tangent `t` of an operand that the op broadcast (rank 0, or with size-1
  dimensions) to the result `shape`, as JAX's `_maybe_broadcast`: the broadcast dimensions
  are reshaped away, then `broadcast_in_dim` puts back the others."""
  t_shape = core.get_aval(t).shape
  shape = tuple(shape)
  if t_shape == shape:
    return t
  if not t_shape:
    return _broadcast_scalar(t, shape)
  lax_shape = _shape_and_reduction()[0]
  dims = tuple(i for i, (a, b) in enumerate(zip(t_shape, shape)) if a == b)
  return lax_shape.broadcast_in_dim(lax_shape.reshape(t, tuple(t_shape[i] for i in dims)),
                                    shape, dims)


def _unbroadcast(aval: ShapedArray, ct: Any) -> Any:
  """Sums the cotangent `ct` of an operand of `aval` that the op broadcast back to its
  shape, as JAX's `_unbroadcast`: over all dimensions for a rank-0 operand, else over those
  where the operand has size 1 (`reduce_sum`), then `reshape` to `aval.shape`."""
  ct_shape = core.get_aval(ct).shape
  if ct_shape == aval.shape:
    return ct
  lax_shape, reduction = _shape_and_reduction()
  if not aval.shape:
    return reduction.reduce_sum(ct, tuple(range(len(ct_shape))))
  dims = tuple(i for i, (a, b) in enumerate(zip(ct_shape, aval.shape)) if a != b)
  return lax_shape.reshape(reduction.reduce_sum(ct, dims), aval.shape)


def _zero_tangent(x: Any) -> ad.Zero:
  """The symbolic zero tangent of a primal `x` (float0 for integer and bool `x`)."""
  return ad.Zero(ad.tangent_aval(core.get_aval(x)))


def _replace_zero(x: Any) -> Any:
  """`x` with its zeros replaced by ones (a safe divisor or log argument)."""
  return select(eq(x, utils.const(x, 0)), _full_like(x, 1), x)


def _balanced_eq(x: Any, z: Any, y: Any) -> Any:
  """The share of the tangent of `z = max(x, y)` (or min) that goes to `x`: 1 where only x
  equals z, 1/2 at ties, 0 elsewhere (JAX's `_balanced_eq`)."""
  return div(select(eq(x, z), _full_like(z, 1), _zeros(z)),
             select(eq(y, z), _full_like(z, 2), _full_like(z, 1)))


def _real_dtype(dtype):
  return {dtypes.complex64: dtypes.float32, dtypes.complex128: dtypes.float64}.get(dtype, dtype)


def _bool_dtype(_):
  return dtypes.bool_


# ---------------------------------------------------------------------------
# Unary arithmetic and transcendental functions: one line per primitive, with its
# abstract eval (accepted dtypes) and lowering.

neg_p = unop("neg", number, "stablehlo.negate")
ad.deflinear_args(neg_p, lambda ct, x: [neg(ct)])
exp_p = unop("exp", inexact, "stablehlo.exponential")
ad.defjvp2(exp_p, lambda t, ans, x, **_: mul(t, ans))
log_p = unop("log", inexact, "stablehlo.log")
ad.defjvp(log_p, lambda t, x, **_: div(t, x))
log1p_p = unop("log1p", inexact, "stablehlo.log_plus_one")
ad.defjvp(log1p_p, lambda t, x, **_: div(t, add(x, _c(x, 1))))
expm1_p = unop("expm1", inexact, "stablehlo.exponential_minus_one")
ad.defjvp2(expm1_p, lambda t, ans, x, **_: mul(t, add(ans, _c(ans, 1))))
sqrt_p = unop("sqrt", inexact, "stablehlo.sqrt")
ad.defjvp2(sqrt_p, lambda t, ans, x, **_: mul(t, div(_c(ans, 0.5), ans)))
rsqrt_p = unop("rsqrt", inexact, "stablehlo.rsqrt")
ad.defjvp2(rsqrt_p, lambda t, ans, x, **_: mul(t, mul(_c(ans, -0.5), div(ans, x))))
cbrt_p = unop("cbrt", floating, "stablehlo.cbrt")
ad.defjvp2(cbrt_p, lambda t, ans, x, **_: mul(t, mul(_c(ans, 1 / 3), integer_pow(ans, -2))))
sin_p = unop("sin", inexact, "stablehlo.sine")
ad.defjvp(sin_p, lambda t, x, **_: mul(t, cos(x)))
cos_p = unop("cos", inexact, "stablehlo.cosine")
ad.defjvp(cos_p, lambda t, x, **_: neg(mul(t, sin(x))))
tan_p = unop("tan", inexact, "stablehlo.tan")
ad.defjvp2(tan_p, lambda t, ans, x, **_: mul(t, add(_c(ans, 1), square(ans))))
tanh_p = unop("tanh", inexact, "stablehlo.tanh")
ad.defjvp2(tanh_p, lambda t, ans, x, **_: mul(add(t, mul(t, ans)), sub(_c(ans, 1), ans)))
asin_p = unop("asin", inexact, "chlo.asin")
ad.defjvp(asin_p, lambda t, x: mul(t, rsqrt(sub(_c(x, 1), square(x)))))
acos_p = unop("acos", inexact, "chlo.acos")
ad.defjvp(acos_p, lambda t, x: mul(t, neg(rsqrt(sub(_c(x, 1), square(x))))))
atan_p = unop("atan", inexact, "chlo.atan")
ad.defjvp(atan_p, lambda t, x: div(t, add(_c(x, 1), square(x))))
sinh_p = unop("sinh", inexact, "chlo.sinh")
ad.defjvp(sinh_p, lambda t, x: mul(t, cosh(x)))
cosh_p = unop("cosh", inexact, "chlo.cosh")
ad.defjvp(cosh_p, lambda t, x: mul(t, sinh(x)))
asinh_p = unop("asinh", inexact, "chlo.asinh")
ad.defjvp(asinh_p, lambda t, x: mul(t, rsqrt(add(square(x), _c(x, 1)))))
acosh_p = unop("acosh", inexact, "chlo.acosh")
# NB: x^2 - 1 rather than (x - 1)(x + 1), as JAX: the domain is x >= 1.
ad.defjvp(acosh_p, lambda t, x: mul(t, rsqrt(sub(square(x), _c(x, 1)))))
atanh_p = unop("atanh", inexact, "chlo.atanh")
ad.defjvp(atanh_p, lambda t, x: mul(reciprocal(add(_c(x, 1), x)), div(t, sub(_c(x, 1), x))))
_TWO_OVER_SQRT_PI = 2 / float(np.sqrt(np.pi))
erf_p = unop("erf", floating, "chlo.erf")
ad.defjvp(erf_p, lambda t, x: mul(_c(x, _TWO_OVER_SQRT_PI), mul(t, exp(neg(square(x))))))
erfc_p = unop("erfc", floating, "chlo.erfc")
ad.defjvp(erfc_p, lambda t, x: mul(_c(x, -_TWO_OVER_SQRT_PI), mul(t, exp(neg(square(x))))))
erf_inv_p = unop("erf_inv", floating, "chlo.erf_inv")
ad.defjvp2(erf_inv_p, lambda t, ans, x: mul(_c(ans, 1 / _TWO_OVER_SQRT_PI),
                                                         mul(t, exp(square(ans)))))
# Integral, bool or bitwise results: zero derivative (float0 for bool and integers), as JAX.
floor_p = unop("floor", floating, "stablehlo.floor")
ad.defjvp_zero(floor_p)
ceil_p = unop("ceil", floating, "stablehlo.ceil")
ad.defjvp_zero(ceil_p)
is_finite_p = unop("is_finite", floating, "stablehlo.is_finite", _bool_dtype)
ad.defjvp_zero(is_finite_p)
not_p = unop("not", _int_or_bool, "stablehlo.not")
ad.defjvp_zero(not_p)
abs_p = unop("abs", _abs_dtypes, "stablehlo.abs", _real_dtype)
# NB: abs of a complex number is real (see _abs_abstract_eval); the weak type is kept.


def _abs_abstract_eval(x):
  utils.check_dtype("abs", x, _abs_dtypes)
  if dtypes.itemsize_bits(x.dtype) < 8 and dtypes.is_integer(x.dtype):
    raise TypeError(f"abs does not accept dtype {x.dtype.name}. Support for narrow-width "
                    "integers is platform-dependent and limited to a few specific operations, "
                    "e.g. basic arithmetic and type casting.")
  return ShapedArray(x.shape, _real_dtype(x.dtype), x.weak_type)


def _abs_jvp(t, ans, x):
  if dtypes.is_complex(core.get_aval(x).dtype):   # d|x| = Re(conj(x) dx) / |x|
    return real(mul(t, div(conj(x), _replace_zero(convert_element_type(
        ans, core.get_aval(x).dtype)))))
  return select(ge(x, _c(x, 0)), t, neg(t))


abs_p.def_abstract_eval(_abs_abstract_eval)
ad.defjvp2(abs_p, _abs_jvp)


# exp2(x) = exp(x * ln 2), as JAX lowers it (StableHLO has no exp2).
exp2_p = Primitive("exp2")
exp2_p.def_abstract_eval(naryop_abstract_eval("exp2", inexact))


def _exp2_lowering(ctx, x, accuracy=None):
  ln2 = ctx.constant(np.log(2.0), ctx.avals_out[0].update(shape=()))
  ln2 = broadcast_operand(ctx, ln2, ctx.avals_out[0].update(shape=()), ctx.avals_out[0].shape)
  y = ctx.elementwise("stablehlo.multiply", x, ln2)
  if accuracy_attr(accuracy) is not None:
    return [_elementwise_with_accuracy(ctx, "stablehlo.exponential", y, accuracy)]
  return [ctx.elementwise("stablehlo.exponential", y)]


lowering.register_lowering(exp2_p, _exp2_lowering)
ad.defjvp2(exp2_p, lambda t, ans, x, **_: mul(_c(ans, np.log(2.0)), mul(t, ans)))
batching.defvectorized(exp2_p)


# logistic(x) = 1 / (1 + exp(-x)); StableHLO's logistic op for real dtypes.
logistic_p = Primitive("logistic")
logistic_p.def_abstract_eval(naryop_abstract_eval("logistic", inexact))


def _logistic_lowering(ctx, x, accuracy=None):
  # NB: `accuracy` is not lowered, as in JAX 0.10 (whose logistic is a composition).
  aval = ctx.avals_out[0]
  if not dtypes.is_complex(aval.dtype):
    return [ctx.elementwise("stablehlo.logistic", x)]
  one = broadcast_operand(ctx, ctx.constant(1, aval.update(shape=())), aval.update(shape=()),
                          aval.shape)
  e = ctx.elementwise("stablehlo.exponential", ctx.elementwise("stablehlo.negate", x))
  return [ctx.elementwise("stablehlo.divide", one, ctx.elementwise("stablehlo.add", one, e))]


lowering.register_lowering(logistic_p, _logistic_lowering)
ad.defjvp2(logistic_p, lambda t, ans, x, **_: mul(t, mul(ans, sub(_c(ans, 1), ans))))
batching.defvectorized(logistic_p)


# sign: -1, 0 or 1 (x / |x| for complex); for unsigned integers, x != 0.
sign_p = Primitive("sign")
sign_p.def_abstract_eval(naryop_abstract_eval("sign", number))


def _sign_lowering(ctx, x):
  aval = ctx.avals_out[0]
  if dtypes.is_unsigned(aval.dtype):
    zero = broadcast_operand(ctx, ctx.constant(0, aval.update(shape=())),
                             aval.update(shape=()), aval.shape)
    ne = emit_compare(ctx, "NE", x, zero, aval)
    return ctx.op("stablehlo.convert", [ne], operand_avals=[aval.update(dtype=dtypes.bool_)])
  return [ctx.elementwise("stablehlo.sign", x)]


lowering.register_lowering(sign_p, _sign_lowering)
ad.defjvp_zero(sign_p)
batching.defvectorized(sign_p)


# round(x, rounding_method): 0 = away from zero (default), 1 = to nearest even.
round_p = Primitive("round")
round_p.def_abstract_eval(
    lambda x, *, rounding_method: naryop_abstract_eval("round", floating)(x))


def _round_lowering(ctx, x, *, rounding_method):
  op = "stablehlo.round_nearest_even" if int(rounding_method) == 1 else "stablehlo.round_nearest_afz"
  return [ctx.elementwise(op, x)]


lowering.register_lowering(round_p, _round_lowering)
ad.defjvp_zero(round_p)
batching.defvectorized(round_p)


# integer_pow(x, y) for a static Python int y: repeated squaring, 1/x^|y| for y < 0.
integer_pow_p = Primitive("integer_pow")


def _integer_pow_abstract_eval(x, *, y):
  utils.check_dtype("integer_pow", x, number)
  if y < 0 and dtypes.is_integer(x.dtype):
    # JAX's message; a floating or complex base takes negative exponents.
    raise TypeError(f"Integers cannot be raised to negative powers, got "
                    f"integer_pow({x.dtype.name}[{','.join(map(str, x.shape))}], {y})")
  return x


def _integer_pow_lowering(ctx, x, *, y):
  aval = ctx.avals_out[0]
  if y == 0:
    return [broadcast_operand(ctx, ctx.constant(1, aval.update(shape=())),
                              aval.update(shape=()), aval.shape)]
  acc, base, n = None, x, builtins.abs(y)
  while n:
    if n & 1:
      acc = base if acc is None else ctx.elementwise("stablehlo.multiply", acc, base)
    n >>= 1
    if n:
      base = ctx.elementwise("stablehlo.multiply", base, base)
  if y < 0:
    one = broadcast_operand(ctx, ctx.constant(1, aval.update(shape=())),
                            aval.update(shape=()), aval.shape)
    acc = ctx.elementwise("stablehlo.divide", one, acc)
  return [acc]


def _integer_pow_jvp(t, x, *, y):
  if y == 0:
    return _zero_tangent(x)
  if y == 1:
    return t
  if y == 2:
    return mul(t, mul(_c(x, 2), x))
  return mul(t, mul(_c(x, y), integer_pow(x, y - 1)))


integer_pow_p.def_abstract_eval(_integer_pow_abstract_eval)
lowering.register_lowering(integer_pow_p, _integer_pow_lowering)
ad.defjvp(integer_pow_p, _integer_pow_jvp)
batching.defvectorized(integer_pow_p)


# square(x) = x * x: a primitive of its own, as JAX 0.10's (`jnp.square`, `x ** 2` stays
# integer_pow[y=2]).
square_p = unop("square", number, "chlo.square")
ad.defjvp(square_p, lambda t, x: mul(t, mul(_c(x, 2), x)))


def _square_lowering(ctx, x):
  # NB: chlo.square takes floats and complex numbers; integers multiply (as JAX lowers them)
  if dtypes.is_inexact(ctx.avals_in[0].dtype):
    return ctx.op("chlo.square", [x], operand_avals=ctx.avals_in)
  return [ctx.elementwise("stablehlo.multiply", x, x)]


lowering.register_lowering(square_p, _square_lowering)


# ---------------------------------------------------------------------------
# Binary arithmetic

# The transposes of the linear ones sum the cotangent of a broadcast operand (rank 0, or with
# size-1 dimensions) back to its shape (`_unbroadcast`); the JVPs broadcast such an
# operand's lone tangent up (`_maybe_broadcast`).


def _zero_cts(*args):
  """Symbolic zero cotangents for the linear `args` of a transpose rule (None for others)."""
  return [ad.Zero(ad.tangent_aval(a.aval)) if ad.is_undefined_primal(a) else None
          for a in args]


add_p = binop("add", number, "stablehlo.add")


def _add_jvp(primals, tangents):
  x, y = primals
  tx, ty = tangents
  out = add_p.bind(x, y)
  shape = core.get_aval(out).shape
  if type(tx) is ad.Zero and type(ty) is ad.Zero:
    return out, _zero_tangent(out)
  if type(tx) is ad.Zero:
    return out, _maybe_broadcast(shape, ty)
  if type(ty) is ad.Zero:
    return out, _maybe_broadcast(shape, tx)
  return out, add(tx, ty)


def _add_transpose(ct, x, y):
  if type(ct) is ad.Zero:
    return _zero_cts(x, y)
  return [_unbroadcast(x.aval, ct) if ad.is_undefined_primal(x) else None,
          _unbroadcast(y.aval, ct) if ad.is_undefined_primal(y) else None]


ad.primitive_jvps[add_p] = _add_jvp
ad.primitive_transposes[add_p] = _add_transpose

sub_p = binop("sub", number, "stablehlo.subtract")


def _sub_jvp(primals, tangents):
  x, y = primals
  tx, ty = tangents
  out = sub_p.bind(x, y)
  shape = core.get_aval(out).shape
  if type(tx) is ad.Zero and type(ty) is ad.Zero:
    return out, _zero_tangent(out)
  if type(tx) is ad.Zero:
    return out, _maybe_broadcast(shape, neg(ty))
  if type(ty) is ad.Zero:
    return out, _maybe_broadcast(shape, tx)
  return out, sub(tx, ty)


def _sub_transpose(ct, x, y):
  if type(ct) is ad.Zero:
    return _zero_cts(x, y)
  return [_unbroadcast(x.aval, ct) if ad.is_undefined_primal(x) else None,
          _unbroadcast(y.aval, neg(ct)) if ad.is_undefined_primal(y) else None]


ad.primitive_jvps[sub_p] = _sub_jvp
ad.primitive_transposes[sub_p] = _sub_transpose

mul_p = binop("mul", number, "stablehlo.multiply")
# NB: complex cotangents are not conjugated (JAX's convention: the transpose, not the adjoint).
# An `out_dtype` (JAX's `mul(x, y, out_dtype=)`; None unless given) is the
# result's dtype: the operands, of any accepted dtypes, are converted to it and multiplied;
# the cotangent of each operand comes back in that operand's dtype.
ad.defbilinear(mul_p,
               lambda ct, x, y, **p: _unbroadcast(x.aval, mul(
                   ct, y, out_dtype=x.aval.dtype if p.get("out_dtype") is not None else None)),
               lambda ct, x, y, **p: _unbroadcast(y.aval, mul(
                   x, ct, out_dtype=y.aval.dtype if p.get("out_dtype") is not None else None)))
_mul_same_dtype_eval = mul_p.abstract_eval


def _mul_abstract_eval(x, y, *, out_dtype=None):
  if out_dtype is None:
    return _mul_same_dtype_eval(x, y)
  shape = utils.broadcasting_shape("mul", (x, y))
  for i, a in enumerate((x, y)):
    utils.check_dtype("mul", a, number, i)
  return ShapedArray(shape, dtypes.canonicalize_dtype(out_dtype), False)


_mul_same_dtype_lowering = _hlo_lowering("stablehlo.multiply")


def _mul_lowering(ctx, x, y, *, out_dtype=None):
  if out_dtype is None:
    return _mul_same_dtype_lowering(ctx, x, y)
  x, y = broadcast_operands(ctx, [x, y])
  out = ctx.avals_out[0]
  # as JAX's: both operands converted to the result's dtype
  x, y = (a if aval.dtype == out.dtype else
          ctx.op("stablehlo.convert", [a], result_avals=[out],
                 operand_avals=[aval.update(shape=out.shape)])[0]
          for a, aval in zip((x, y), ctx.avals_in))
  return [ctx.elementwise("stablehlo.multiply", x, y)]


class _AsRepr:
  """A param value printed as its repr (JAX prints `mul`'s `out_dtype` as given:
  `mul[out_dtype=<class 'jax.numpy.float32'>]`)."""
  __slots__ = ("v",)

  def __init__(self, v):
    self.v = v

  def __str__(self):
    return repr(self.v)


mul_p.def_abstract_eval(_mul_abstract_eval)
lowering.register_lowering(mul_p, _mul_lowering)
# NB: every mul equation carries JAX's `out_dtype` (None unless given); printed as JAX's:
# hidden when None.
mul_p.def_default_params(out_dtype=None)
core.pp_eqn_rules[mul_p] = lambda eqn, context: [
    (k, _AsRepr(v) if k == "out_dtype" else v) for k, v in sorted(eqn.params.items())
    if not (k == "out_dtype" and v is None)]


def _emit_select(ctx, pred: str, on_true: str, on_false: str, aval: ShapedArray) -> str:
  """Emits `stablehlo.select` of `on_true`/`on_false` (both of `aval`) by the bool `pred`."""
  r = ctx.fb.fresh()
  ctx.fb.emit(f"{r} = stablehlo.select {pred}, {on_true}, {on_false} : "
              f"{ir_type(aval.update(dtype=dtypes.bool_))}, {ir_type(aval)}")
  return r


def _int_division_lowering(op: str):
  """Lowers integer `div`/`rem` (`op`: "stablehlo.divide"/"stablehlo.remainder") without
  ever handing XLA a divisor that traps; floats and complex lower to `op` as they are.

  NB: StableHLO leaves x / 0 and INT_MIN / -1 implementation-defined (spec.md, `divide`),
  and XLA's constant folder evaluates them natively when the divisor is a compile-time
  constant: the process dies with SIGFPE. So the divisor is 1 wherever it is 0 (or -1 with
  x = INT_MIN), and the results there are those of XLA's own kernels
  (xla/service/elemental_ir_emitter.cc, EmitIntegerDivide/EmitIntegerRemainder), which JAX
  returns for traced divisors: x / 0 = -1 (all ones: the maximum for unsigned), x % 0 = x,
  INT_MIN / -1 = INT_MIN (= INT_MIN / 1) and INT_MIN % -1 = 0 (= INT_MIN % 1)."""
  plain = _hlo_lowering(op)

  def rule(ctx, x, y):
    aval = ctx.avals_out[0]
    if not dtypes.is_integer(aval.dtype):
      return plain(ctx, x, y)
    x, y = broadcast_operands(ctx, (x, y))
    one = ctx.constant(1, aval)
    by_zero = emit_compare(ctx, "EQ", y, ctx.constant(0, aval), aval)
    unsafe = by_zero
    if not dtypes.is_unsigned(aval.dtype):
      overflow = ctx.elementwise(
          "stablehlo.and",
          emit_compare(ctx, "EQ", x, ctx.constant(dtypes.iinfo(aval.dtype).min, aval), aval),
          emit_compare(ctx, "EQ", y, ctx.constant(-1, aval), aval),
          aval=aval.update(dtype=dtypes.bool_))
      unsafe = ctx.elementwise("stablehlo.or", by_zero, overflow,
                               aval=aval.update(dtype=dtypes.bool_))
    out = ctx.elementwise(op, x, _emit_select(ctx, unsafe, one, y, aval))
    at_zero = (ctx.constant(dtypes.iinfo(aval.dtype).max if dtypes.is_unsigned(aval.dtype) else -1,
                            aval) if op == "stablehlo.divide" else x)
    return [_emit_select(ctx, by_zero, at_zero, out, aval)]
  return rule


# integers: rounds toward zero; x / 0 = -1 (unsigned: the maximum), INT_MIN / -1 = INT_MIN.
div_p = binop("div", number, "stablehlo.divide")
lowering.register_lowering(div_p, _int_division_lowering("stablehlo.divide"))


def _div_transpose(ct, x, y):
  if ad.is_undefined_primal(y):
    raise ValueError(f"transpose of div: the divisor {y.aval.str_short()} is a linear input, "
                     f"but x / y is linear in x only. Differentiate with respect to y through "
                     f"jvp/grad (whose rule handles y), not by transposing div.")
  if type(ct) is ad.Zero:
    return _zero_cts(x, y)
  return [_unbroadcast(x.aval, div(ct, y)), None]


ad.defjvp(div_p, lambda t, x, y: div(t, y),
          lambda t, x, y: mul(mul(neg(t), x), integer_pow(y, -2)))
ad.primitive_transposes[div_p] = _div_transpose

# rem: the sign of the dividend, as C's fmod; integers: x % 0 = x, INT_MIN % -1 = 0.
# NB: no complex (XLA's CPU compiler crashes).
rem_p = binop("rem", (utils.int_kind, utils.float_kind), "stablehlo.remainder")
lowering.register_lowering(rem_p, _int_division_lowering("stablehlo.remainder"))
# rem(x, y) = x - y * trunc(x / y): d/dx = 1, d/dy = -trunc(x / y), as JAX.
ad.defjvp(rem_p, lambda t, x, y: _maybe_broadcast(_out_shape(x, y), t),
          lambda t, x, y: mul(neg(t), mul(sign(div(x, y)), floor(abs(div(x, y))))))

def emit_minmax(ctx, direction: str, x: str, y: str, aval: ShapedArray) -> str:
  """Emits the maximum (`direction` "GT") or minimum ("LT") of `x` and `y` (both of `aval`);
  returns the result's name. Complex numbers are ordered lexicographically (real part, then
  imaginary part), as JAX's `lax.max`/`lax.min`, `reduce_max`, `cummax` and scatter-max do:
  `select(re(x) == re(y), im(x) DIR im(y), re(x) DIR re(y))` picks `x`, so a NaN part picks
  `y`. Other dtypes: one `stablehlo.maximum`/`minimum` (NaN-propagating for floats); bool
  max/min are or/and. Used by the elementwise lowerings and the reduction, cumulative and
  scatter regions."""
  if not dtypes.is_complex(aval.dtype):
    if aval.dtype == dtypes.bool_:
      return ctx.elementwise("stablehlo.or" if direction == "GT" else "stablehlo.and", x, y,
                             aval=aval)
    return ctx.elementwise("stablehlo.maximum" if direction == "GT" else "stablehlo.minimum",
                           x, y, aval=aval)
  r_aval = aval.update(dtype=_real_dtype(aval.dtype))
  b_aval = aval.update(dtype=dtypes.bool_)
  cmp = lambda a, b, d: ctx.op(  # noqa: E731
      "stablehlo.compare", [a, b], [b_aval], operand_avals=[r_aval, r_aval],
      attrs=f"comparison_direction = #stablehlo<comparison_direction {d}>, "
            f"compare_type = #stablehlo<comparison_type FLOAT>")[0]
  part = lambda name, v: ctx.op(f"stablehlo.{name}", [v], [r_aval],  # noqa: E731
                                operand_avals=[aval])[0]
  rx, ry, ix, iy = part("real", x), part("real", y), part("imag", x), part("imag", y)
  pick = ctx.op("stablehlo.select", [cmp(rx, ry, "EQ"), cmp(ix, iy, direction),
                                     cmp(rx, ry, direction)], [b_aval],
                operand_avals=[b_aval, b_aval, b_aval])[0]
  return ctx.op("stablehlo.select", [pick, x, y], [aval],
                operand_avals=[b_aval, aval, aval])[0]


def _complex_minmax_lowering(direction: str, op: str):
  """max/min: lexicographic on complex numbers (`emit_minmax`); one StableHLO op for the
  other dtypes."""
  plain = _hlo_lowering(op)

  def rule(ctx, x, y):
    aval = ctx.avals_out[0]
    if not dtypes.is_complex(aval.dtype):
      return plain(ctx, x, y)
    x, y = broadcast_operands(ctx, (x, y))
    return [emit_minmax(ctx, direction, x, y, aval)]
  return rule


max_p = binop("max", any_dtype, "stablehlo.maximum")  # NaN-propagating for floats
lowering.register_lowering(max_p, _complex_minmax_lowering("GT", "stablehlo.maximum"))
# At ties x == y each operand gets half the tangent (JAX's `_balanced_eq`).
ad.defjvp2(max_p, lambda t, ans, x, y: mul(t, _balanced_eq(x, ans, y)),
           lambda t, ans, x, y: mul(t, _balanced_eq(y, ans, x)))
min_p = binop("min", any_dtype, "stablehlo.minimum")
lowering.register_lowering(min_p, _complex_minmax_lowering("LT", "stablehlo.minimum"))
ad.defjvp2(min_p, lambda t, ans, x, y: mul(t, _balanced_eq(x, ans, y)),
           lambda t, ans, x, y: mul(t, _balanced_eq(y, ans, x)))

atan2_p = binop("atan2", inexact, "stablehlo.atan2")
ad.defjvp(atan2_p, lambda t, x, y: mul(t, div(y, add(square(x), square(y)))),
          lambda t, x, y: mul(t, div(neg(x), add(square(x), square(y)))))

and_p = binop("and", _int_or_bool, "stablehlo.and")
ad.defjvp_zero(and_p)
or_p = binop("or", _int_or_bool, "stablehlo.or")
ad.defjvp_zero(or_p)
xor_p = binop("xor", _int_or_bool, "stablehlo.xor")
ad.defjvp_zero(xor_p)

# pow(x, y): x floating/complex; y of x's dtype, or an integer array (JAX >= 0.4.30).
pow_p = Primitive("pow")


def _pow_abstract_eval(x, y):
  shape = utils.broadcasting_shape("pow", [x, y])   # shapes first, as JAX
  utils.check_dtype("pow", x, inexact, 0)
  utils.check_dtype("pow", y, number, 1)
  if dtypes.is_integer(y.dtype):
    return ShapedArray(shape, x.dtype, x.weak_type and y.weak_type)
  if x.dtype != y.dtype:   # JAX's message (not check_same_dtypes')
    raise TypeError(f"the first argument to pow must have an inexact dtype (float or complex), "
                    f"and the second argument must have an inexact or integer dtype, and two "
                    f"inexact dtypes must match, but got {x.dtype} and {y.dtype} respectively.")
  return naryop_abstract_eval("pow", inexact)(x, y)


def _pow_lowering(ctx, x, y):
  x, y = broadcast_operands(ctx, (x, y))
  out = ctx.avals_out[0]
  if dtypes.is_integer(ctx.avals_in[1].dtype):
    y = ctx.op("stablehlo.convert", [y], [out], operand_avals=[ctx.avals_in[1].update(
        shape=out.shape)])[0]
  return [ctx.elementwise("stablehlo.power", x, y)]


def _pow_jvp_lhs(t, ans, x, y):
  x_dtype = core.get_aval(x).dtype
  if dtypes.is_integer(core.get_aval(y).dtype):
    # NB: d/dx x**0 is 0 also at x = 0 (where y * x**(y - 1) is 0 * inf), as JAX; the
    # select needs x and y broadcast to one shape.
    y = convert_element_type(y, x_dtype)
    shape = _out_shape(x, y)
    x, y = _maybe_broadcast(shape, x), _maybe_broadcast(shape, y)
    jac = select(eq(y, _c(y, 0)), _zeros(ans), mul(_replace_zero(y), pow(x, sub(y, _ones(y)))))
  else:
    jac = mul(y, pow(x, sub(y, _ones(y))))
  return mul(t, jac)


def _pow_jvp_rhs(t, ans, x, y):
  # d/dy x**y = log(x) x**y; log(x) is replaced by 0 at x = 0 (where x**y is 0 for y > 0
  # and the product would be -inf * 0 = NaN), as JAX.
  return mul(t, mul(log(_replace_zero(x)), ans))


pow_p.def_abstract_eval(_pow_abstract_eval)
lowering.register_lowering(pow_p, _pow_lowering)
ad.defjvp2(pow_p, _pow_jvp_lhs, _pow_jvp_rhs)
defbroadcasting(pow_p)


# ---------------------------------------------------------------------------
# Comparisons: bool results; floats compare as FLOAT (IEEE: NaN != NaN), unsigned and
# bool as UNSIGNED, signed integers as SIGNED.


def _compare_type(dtype) -> str:
  if dtypes.is_inexact(dtype):
    return "FLOAT"
  if dtype == dtypes.bool_ or dtypes.is_unsigned(dtype):
    return "UNSIGNED"
  return "SIGNED"


def emit_compare(ctx, direction: str, x: str, y: str, aval: ShapedArray) -> str:
  """Emits `stablehlo.compare` of `x` and `y` (both of `aval`) in `direction` ("EQ", "LT",
  ...); returns the bool result's name."""
  r = ctx.fb.fresh()
  t = ir_type(aval)
  ctx.fb.emit(f"{r} = stablehlo.compare {direction}, {x}, {y}, {_compare_type(aval.dtype)} : "
              f"({t}, {t}) -> {ir_type(aval.update(dtype=dtypes.bool_))}")
  return r


def _cmp(name: str, direction: str, accepted, allow_extended=False) -> Primitive:
  p = Primitive(name)
  p.def_abstract_eval(naryop_abstract_eval(name, accepted, _bool_dtype, allow_extended))

  def rule(ctx, x, y):
    x, y = broadcast_operands(ctx, (x, y))
    aval = ctx.avals_in[0].update(shape=ctx.avals_out[0].shape)
    return [emit_compare(ctx, direction, x, y, aval)]
  lowering.register_lowering(p, rule)
  ad.defjvp_zero(p)   # bool results: float0 tangents
  defbroadcasting(p)
  return p


_ordered = (utils.int_kind, utils.float_kind, utils.bool_kind)
# NB: typed keys compare equal when all their key data does (lowered by prng's
# `_lower_physical`), as in JAX
eq_p = _cmp("eq", "EQ", any_dtype, allow_extended=True)
ne_p = _cmp("ne", "NE", any_dtype, allow_extended=True)
lt_p = _cmp("lt", "LT", _ordered)
le_p = _cmp("le", "LE", _ordered)
gt_p = _cmp("gt", "GT", _ordered)
ge_p = _cmp("ge", "GE", _ordered)

# ---------------------------------------------------------------------------
# select_n(which, *cases): cases[which]; `which` is bool (two cases) or int32, of the cases'
# shape or rank 0. Out-of-range indices give an unspecified case, as in JAX.
select_n_p = Primitive("select_n")


def _select_n_abstract_eval(which, *cases):
  # JAX's checks and messages, in its order: shapes, then dtypes (named "select").
  if not cases:
    raise TypeError("select must have at least one case")
  if any(c.shape != cases[0].shape for c in cases[1:]):
    shapes = ", ".join(str(c.shape) for c in cases)
    raise TypeError(f"select cases must have the same shapes, got [{shapes}].")
  if which.shape and which.shape != cases[0].shape:
    raise TypeError(f"select `which` must be scalar or have the same shape as cases, got "
                    f"`which` shape {which.shape} but case shape {cases[0].shape}.")
  utils.check_same_dtypes("select", cases)
  if which.dtype != dtypes.bool_ and not dtypes.is_integer(which.dtype):
    raise TypeError(f"select `which` must be boolean or integer type, got "
                    f"{which.dtype.name}.")
  if which.dtype == dtypes.bool_ and len(cases) > 2:
    raise TypeError("select with boolean `which` cannot have > 2 cases.")
  return ShapedArray(cases[0].shape, cases[0].dtype, all(c.weak_type for c in cases))


def _select_n_lowering(ctx, which, *cases):
  waval = ctx.avals_in[0]
  caval = ctx.avals_out[0]
  pred_aval = waval.update(dtype=dtypes.bool_)

  def select(pred, on_true, on_false):
    r = ctx.fb.fresh()
    ctx.fb.emit(f"{r} = stablehlo.select {pred}, {on_true}, {on_false} : "
                f"{ir_type(pred_aval)}, {ir_type(caval)}")
    return r

  def tree(lo, hi):  # selects among cases[lo:hi]
    if hi - lo == 1:
      return cases[lo]
    mid = (lo + hi) // 2
    if waval.dtype == dtypes.bool_:
      return select(which, cases[1], cases[0])
    bound = broadcast_operand(ctx, ctx.constant(mid, waval.update(shape=())),
                              waval.update(shape=()), waval.shape)
    pred = emit_compare(ctx, "LT", which, bound, waval)
    return select(pred, tree(lo, mid), tree(mid, hi))
  return [tree(0, len(cases))]


def _select_n_jvp(primals, tangents):
  which, *cases = primals
  case_tangents = tangents[1:]
  out = select_n_p.bind(which, *cases)
  nonzero = [t for t in case_tangents if type(t) is not ad.Zero]
  if not nonzero:
    return out, _zero_tangent(out)
  if len(nonzero) < len(case_tangents):   # one zero array shared by the zero cases
    zero = _zeros(nonzero[0])
    case_tangents = [zero if type(t) is ad.Zero else t for t in case_tangents]
  return out, select_n_p.bind(which, *case_tangents)


def _select_n_transpose(ct, which, *cases):
  if ad.is_undefined_primal(which):
    raise ValueError(f"transpose of select_n: the predicate `which` "
                     f"({which.aval.str_short()}) is a linear input, but select_n is linear in "
                     f"its cases only. Compute `which` from primal values.")
  if type(ct) is ad.Zero:
    return [None, *_zero_cts(*cases)]
  if len(cases) == 1:
    return [None, ct]
  zeros = _zeros(ct)
  if core.get_aval(which).dtype == dtypes.bool_:
    return [None, select_n(which, ct, zeros) if ad.is_undefined_primal(cases[0]) else None,
            select_n(which, zeros, ct) if ad.is_undefined_primal(cases[1]) else None]
  return [None, *[select_n(eq(which, _c(which, i)), zeros, ct) if ad.is_undefined_primal(c) else None
                  for i, c in enumerate(cases)]]


select_n_p.def_abstract_eval(_select_n_abstract_eval)
lowering.register_lowering(select_n_p, _select_n_lowering)
ad.primitive_jvps[select_n_p] = _select_n_jvp
ad.primitive_transposes[select_n_p] = _select_n_transpose


def _select_n_batch(args, dims):
  """As JAX's `_select_batch_rule`: when `which` and the cases are batched at one dim they
  stay there (a batched scalar `which` broadcast into the cases' shape at it); an unbatched
  scalar `which` keeps the cases' common batch dim (moving the others there when they
  differ); otherwise every batch dim moves to the front (unbatched operands broadcast)."""
  lax_shape = _shape_and_reduction()[0]
  which, *cases = args
  which_d, *case_ds = dims
  shp = lambda v: core.get_aval(v).shape  # noqa: E731
  size = next(shp(v)[d] for v, d in zip(args, dims) if d is not batching.not_mapped)
  if all(d == which_d for d in case_ds):
    if shp(which) != shp(cases[0]):
      which = lax_shape.broadcast_in_dim(which, shp(cases[0]), (which_d,))
    return select_n_p.bind(which, *cases), which_d
  if not shp(which) and all(d is not batching.not_mapped for d in case_ds):
    if all(d == case_ds[0] for d in case_ds[1:]):
      return select_n_p.bind(which, *cases), case_ds[0]
    if all(shp(c) == shp(cases[0]) for c in cases):
      d0 = case_ds[0]
      rest = [batching.moveaxis(c, d, d0) for c, d in zip(cases[1:], case_ds[1:])]
      return select_n_p.bind(which, cases[0], *rest), d0
  if shp(which):
    which = batching.bdim_at_front(which, which_d, size)
  if not all(shp(c) == () for c in cases):
    cases = [batching.bdim_at_front(c, d, size) for c, d in zip(cases, case_ds)]
  if 0 < len(shp(which)) < len(shp(cases[0])):
    which = lax_shape.broadcast_in_dim(which, shp(cases[0]), (0,))
  if len(shp(which)) > len(shp(cases[0])):
    cases = [lax_shape.broadcast_in_dim(c, shp(which), ()) for c in cases]
  return select_n_p.bind(which, *cases), 0


batching.primitive_batchers[select_n_p] = _select_n_batch

# ---------------------------------------------------------------------------
# convert_element_type(x, new_dtype, weak_type): casts; float -> bool is x != 0; complex
# -> real (bool included) takes the real part first (as JAX does; NumPy warns, and its
# complex -> bool tests both parts).
convert_element_type_p = Primitive("convert_element_type")


def _convert_element_type_abstract_eval(x, *, new_dtype, weak_type, sharding=None):
  return ShapedArray(x.shape, new_dtype, weak_type)


def _convert_element_type_lowering(ctx, x, *, new_dtype, weak_type, sharding=None):
  src, out = ctx.avals_in[0], ctx.avals_out[0]
  if src.dtype == out.dtype:
    return [x]
  if dtypes.is_complex(src.dtype) and not dtypes.is_complex(out.dtype):
    real = src.update(dtype=_real_dtype(src.dtype))
    x = ctx.op("stablehlo.real", [x], [real], operand_avals=[src])[0]
    src = real
    if src.dtype == out.dtype:
      return [x]
  if out.dtype == dtypes.bool_:
    zero = broadcast_operand(ctx, ctx.constant(0, src.update(shape=())),
                             src.update(shape=()), src.shape)
    return [emit_compare(ctx, "NE", x, zero, src)]
  return ctx.op("stablehlo.convert", [x], [out], operand_avals=[src])


def _convert_element_type_jvp(t, ans, x, *, new_dtype, weak_type, sharding=None):
  if not dtypes.is_inexact(new_dtype):   # to integer or bool: float0, as JAX
    return _zero_tangent(ans)
  return convert_element_type_p.bind(t, new_dtype=new_dtype, weak_type=weak_type)


def _convert_element_type_transpose(ct, x, *, new_dtype, weak_type, sharding=None):
  # Converting back to the input's dtype and weak type is the transpose (complex -> real
  # takes the real part, real -> complex adds 0j), as JAX.
  if type(ct) is ad.Zero or not dtypes.is_inexact(x.aval.dtype):
    return [ad.Zero(ad.tangent_aval(x.aval))]
  # NB: through the wrapper, as JAX's staging: no equation for a conversion to the type `ct`
  # has (JAX forwards it), and a host scalar `ct` (grad's seed) is converted on the host.
  return [_convert_element_type(ct, x.aval.dtype, x.aval.weak_type,
                                warn_on_complex_to_real_cast=False)]


convert_element_type_p.def_abstract_eval(_convert_element_type_abstract_eval)
lowering.register_lowering(convert_element_type_p, _convert_element_type_lowering)
ad.defjvp2(convert_element_type_p, _convert_element_type_jvp)
ad.primitive_transposes[convert_element_type_p] = _convert_element_type_transpose
batching.defvectorized(convert_element_type_p)
# NB: as JAX's, every equation carries `sharding` (None here), printed only when not None.
convert_element_type_p.def_default_params(sharding=None)
core.pp_eqn_rules[convert_element_type_p] = lambda eqn, context: [
    (k, v) for k, v in sorted(eqn.params.items()) if not (k == "sharding" and v is None)]


def _convert_element_type_fold(x, *, new_dtype, weak_type, sharding=None):
  # JAX's folding rule: a host scalar (not an Array) converts on the host, into a literal.
  if not (type(x) in _scalar_types or isinstance(x, np.generic)
          or type(x) is core.WeakScalarValue or (type(x) is np.ndarray and x.ndim == 0)):
    return None
  if np.asarray(x).dtype == dtypes.float0 or new_dtype == dtypes.float0:
    return None
  return ad.folded_constant(np.asarray(x).astype(new_dtype),
                            ShapedArray((), new_dtype, bool(weak_type)))


pe.const_fold_rules[convert_element_type_p] = _convert_element_type_fold


def _convert_element_type_forward(args, invars, params):
  # JAX's forwarding rule: a conversion of a host array to the type its constant already
  # has (a float64 NumPy constant is a float32 constant with x64 off) stages nothing.
  # NB: a tracer's conversion to its own type is dropped by `_convert_element_type` already;
  # bound directly (jacfwd's basis, JAX's conversions that carry a sharding), it stays.
  aval = invars[0].aval
  if (type(args[0]) is np.ndarray and aval.dtype == params["new_dtype"] and aval.weak_type == params["weak_type"]
      and params.get("sharding") is None and isinstance(aval.dtype, np.dtype)):
    return 0
  return None


pe.forwarding_rules[convert_element_type_p] = _convert_element_type_forward


# ---------------------------------------------------------------------------
# Public wrappers (JAX's lax names and signatures). Shapes: x: T[*s] -> T[*s]; binary ops
# take shapes that broadcast (rank 0, or one rank with size-1 dimensions); dtypes must match
# (use stagecraft.numpy to promote).


def _unary(p: Primitive, doc: str):
  def f(x: Any):
    return p.bind(x)
  f.__name__ = f.__qualname__ = p.name
  f.__doc__ = f"{doc}\n\nArgs:\n  x: array T[*s].\n\nReturns:\n  T[*s].\n\nRaises:\n  TypeError: if T is not accepted (the message lists the accepted dtypes)."
  return f


def _hide_none_accuracy(eqn, context):
  """JAX's print rule of the primitives with an `accuracy` param: hidden when None."""
  return [(k, v) for k, v in sorted(eqn.params.items())
          if not (k == "accuracy" and v is None)]


def _unary_accuracy(p: Primitive, doc: str):
  """A unary wrapper with JAX's keyword `accuracy`. Every equation of `p` carries the
  param (None unless given: `def_default_params`), as JAX's; it prints only when not None
  (`exp a`)."""
  p.def_default_params(accuracy=None)
  core.pp_eqn_rules[p] = _hide_none_accuracy

  def f(x: Any, *, accuracy: Any = None):
    if accuracy is None:
      return p.bind(x)
    return p.bind(x, accuracy=_check_accuracy(accuracy))
  f.__name__ = f.__qualname__ = p.name
  f.__doc__ = (f"{doc}\n\nArgs:\n  x: array T[*s].\n  accuracy: None, an `AccuracyMode` or a "
               f"`Tolerance`: the accuracy the compiler's implementation must reach "
               f"(StableHLO's `result_accuracy`; on CPU XLA keeps its one implementation)."
               f"\n\nReturns:\n  T[*s].\n\nRaises:\n  TypeError: if T is not accepted (the "
               f"message lists the accepted dtypes).\n  NotImplementedError: for another "
               f"`accuracy` (JAX's message).")
  return f


_scalar_types = frozenset(dtypes.python_scalar_types)


def _binary(p: Primitive, doc: str):
  def f(x: Any, y: Any):
    return p.bind(x, y)
  f.__name__ = f.__qualname__ = p.name
  f.primitive = p   # NB: for numpy's eager fast path (numpy/ufuncs.py)
  f.__doc__ = (f"{doc}\n\nArgs:\n  x, y: arrays T[*s], rank 0, or of s's rank with size 1 "
               f"where the other has a larger size (lax's broadcasting; no rank is added); a "
               f"Python scalar is an array of its default dtype (int32, float32, complex64; 64-bit under x64): no "
               f"promotion.\n\nReturns:\n  T[*s] (bool[*s] for comparisons).\n\n"
               f"Raises:\n  TypeError: if the dtypes differ or are not accepted, or the shapes "
               f"are incompatible.")
  return f


neg = _unary(neg_p, "Elementwise negation -x.")
exp = _unary_accuracy(exp_p, "Elementwise e**x.")
exp2 = _unary_accuracy(exp2_p, "Elementwise 2**x.")
log = _unary_accuracy(log_p, "Elementwise natural logarithm.")
log1p = _unary_accuracy(log1p_p, "Elementwise log(1 + x), accurate near 0.")
expm1 = _unary_accuracy(expm1_p, "Elementwise e**x - 1, accurate near 0.")
sqrt = _unary_accuracy(sqrt_p, "Elementwise square root.")
rsqrt = _unary_accuracy(rsqrt_p, "Elementwise 1 / sqrt(x).")
cbrt = _unary_accuracy(cbrt_p, "Elementwise cube root.")
sin = _unary_accuracy(sin_p, "Elementwise sine (radians).")
cos = _unary_accuracy(cos_p, "Elementwise cosine (radians).")
tan = _unary_accuracy(tan_p, "Elementwise tangent (radians).")
tanh = _unary_accuracy(tanh_p, "Elementwise hyperbolic tangent.")
asin = _unary(asin_p, "Elementwise arcsine (radians).")
acos = _unary(acos_p, "Elementwise arccosine (radians).")
atan = _unary(atan_p, "Elementwise arctangent (radians).")
sinh = _unary(sinh_p, "Elementwise hyperbolic sine.")
cosh = _unary(cosh_p, "Elementwise hyperbolic cosine.")
asinh = _unary(asinh_p, "Elementwise inverse hyperbolic sine.")
acosh = _unary(acosh_p, "Elementwise inverse hyperbolic cosine.")
atanh = _unary(atanh_p, "Elementwise inverse hyperbolic tangent.")
erf = _unary(erf_p, "Elementwise error function.")
erfc = _unary(erfc_p, "Elementwise complementary error function 1 - erf(x).")
erf_inv = _unary(erf_inv_p, "Elementwise inverse error function.")
floor = _unary(floor_p, "Elementwise floor.")
ceil = _unary(ceil_p, "Elementwise ceiling.")
is_finite = _unary(is_finite_p, "Elementwise test for finiteness (not inf, not NaN); bool result.")
bitwise_not = _unary(not_p, "Elementwise logical/bitwise NOT.")
abs = _unary(abs_p, "Elementwise absolute value (real result for complex input).")
sign = _unary(sign_p, "Elementwise sign: -1, 0 or 1.")
logistic = _unary_accuracy(logistic_p, "Elementwise logistic sigmoid 1 / (1 + e**-x).")

add = _binary(add_p, "Elementwise x + y.")
sub = _binary(sub_p, "Elementwise x - y.")
def mul(x: Any, y: Any, *, out_dtype: Any = None):
  """Elementwise x * y.

  Args:
    x, y: arrays T[*s], rank 0, or of s's rank with size 1 where the other has a larger size
      (lax's broadcasting; no rank is added); a Python scalar is an array of its default
      dtype: no promotion.
    out_dtype: None, or the result's dtype: the operands (of any numeric dtypes) are
      converted to it before the multiplication (JAX's `out_dtype`).

  Returns:
    T[*s] (out_dtype[*s] when given).

  Raises:
    TypeError: if the dtypes differ (without out_dtype) or are not numeric, or the shapes
      are incompatible.
  """
  if out_dtype is None:
    return mul_p.bind(x, y)
  return mul_p.bind(x, y, out_dtype=out_dtype)


mul.primitive = mul_p   # NB: for numpy's eager fast path (numpy/ufuncs.py)
div = _binary(div_p, "Elementwise x / y; integer division rounds toward zero.")
rem = _binary(rem_p, "Elementwise remainder with the sign of x (C fmod).")
max = _binary(max_p, "Elementwise maximum; NaN-propagating.")
min = _binary(min_p, "Elementwise minimum; NaN-propagating.")
atan2 = _binary(atan2_p, "Elementwise arctangent of x / y, in radians, quadrant-aware.")
pow = _binary(pow_p, "Elementwise x ** y.")
bitwise_and = _binary(and_p, "Elementwise logical/bitwise AND.")
bitwise_or = _binary(or_p, "Elementwise logical/bitwise OR.")
bitwise_xor = _binary(xor_p, "Elementwise logical/bitwise XOR.")
eq = _binary(eq_p, "Elementwise x == y.")
ne = _binary(ne_p, "Elementwise x != y.")
lt = _binary(lt_p, "Elementwise x < y.")
le = _binary(le_p, "Elementwise x <= y.")
gt = _binary(gt_p, "Elementwise x > y.")
ge = _binary(ge_p, "Elementwise x >= y.")


def integer_pow(x: Any, y: int):
  """Elementwise x ** y for a static Python int `y`, by repeated squaring.

  Args:
    x: array T[*s], T a number type.
    y: int; negative needs a floating or complex T.
  Returns:
    T[*s].
  """
  return integer_pow_p.bind(x, y=int(y))


def round(x: Any, rounding_method: Any = RoundingMethod.AWAY_FROM_ZERO):
  """Elementwise rounding to an integral value. `rounding_method`: a `RoundingMethod` or
  its value, 0 (away from zero, the default, as JAX's `lax.round`) or 1 (to nearest even,
  as `numpy.round`).

  Raises:
    ValueError: for another `rounding_method` (from `RoundingMethod`, as in JAX).
  """
  return round_p.bind(x, rounding_method=RoundingMethod(rounding_method))


def select_n(which: Any, *cases: Any):
  """`cases[which]` elementwise.

  Args:
    which: bool (with at most 2 cases) or integer array of the cases' shape, or rank 0.
    *cases: arrays T[*s], all of the same shape and dtype (a Python scalar is an array of
      its default dtype: no promotion).

  Returns:
    T[*s].

  Raises:
    ValueError: without cases.
    TypeError: on mismatched cases or a bad `which` (JAX's messages).
  """
  if not cases:
    raise ValueError("select_n() must have at least one case")
  return select_n_p.bind(which, *cases)   # NB: typed key arrays too (core.staged_leaves)


def select(pred: Any, on_true: Any, on_false: Any):
  """`on_true` where `pred` else `on_false` (JAX's lax.select)."""
  return select_n_p.bind(pred, on_false, on_true)


def convert_element_type(operand: Any, new_dtype: Any, weak_type: bool = False):
  """Casts `operand` to `new_dtype` (canonicalized: float64 becomes float32 unless x64 is on).

  The parameters are named and ordered as JAX 0.10.2's (`operand`, `new_dtype`), so
  library code passing `operand=` works. `weak_type` (an extra third parameter: stagecraft's own
  internal callers use it; JAX has it only on its private `_convert_element_type`) makes
  the result weakly typed.

  Args:
    operand: array T[*s].
    new_dtype: dtype-like.
  Returns:
    new_dtype[*s]. Complex to real (bool included) keeps the real part.

  Raises:
    ValueError: for a typed-key `new_dtype` (`key<fry>`) and an operand that is no key array
      (`Cannot convert_element_type from int32 to key<fry>`, JAX's words).
    TypeError: for a Python `complex` scalar and a real dtype other than bool (NumPy's
      message, as JAX: `float() argument must be a string or a real number, not
      'complex'`); a NumPy complex scalar or an array keeps its real part.

  Warns:
    numpy.exceptions.ComplexWarning: when casting a complex `x` to a real dtype (JAX's
      warning; an error under `-W error`). Take `real(x)` first to cast silently.
    UserWarning: for a 64-bit `new_dtype` with x64 off (`dtypes.check_user_dtype`).
  """
  if type(operand) in KEY_TYPES:
    return convert_keys(operand, new_dtype)
  if core.is_extended_dtype(new_dtype) and (dtypes.is_python_scalar(operand)
                                            or hasattr(operand, "dtype")):
    # NB: as JAX's: no array converts to a typed-key dtype (`key<fry>`)
    src = (dtypes.python_scalar_dtype(type(operand)) if dtypes.is_python_scalar(operand)
           else dtypes.canonicalize_dtype(operand.dtype))
    raise ValueError(f"Cannot convert_element_type from {src.name} to {new_dtype}")
  new_dtype = dtypes.check_user_dtype(new_dtype, "convert_element_type")
  return _convert_element_type(operand, new_dtype, weak_type)


def convert_keys(keys: Any, new_dtype: Any) -> Any:
  """A typed key array "converted" to `new_dtype`: itself for its own key dtype (JAX's
  `convert_element_type`, `astype`, `asarray(dtype=)` of key arrays; optax's gradient
  accumulation casts its state back with `astype(x, x.dtype)`).

  Raises:
    ValueError: for any other dtype (JAX's words).
  """
  if new_dtype == keys.dtype:
    return keys
  name = getattr(new_dtype, "name", None) or np.dtype(new_dtype).name
  raise ValueError(f"Cannot convert_element_type from {keys.dtype} to {name}")


def _convert_element_type(x: Any, new_dtype: Any, weak_type: bool = False,
                          warn_on_complex_to_real_cast: bool = True):
  """`convert_element_type`; library callers that mean to drop the imaginary part pass
  `warn_on_complex_to_real_cast=False` (as JAX's internal `_convert_element_type`).

  NB: as JAX's, a host scalar converts on the host and is staged as it is (an Array; a
  literal in a jaxpr) instead of binding a conversion: a Python int wraps around
  (`2**40` -> float32 works), a Python or NumPy scalar converts with NumPy's rules (complex
  -> bool tests both parts). While staging a jaxpr, the other host scalars (0-d NumPy
  arrays, weak conversions) are folded on the host too, as JAX's constant folding of
  `convert_element_type` does."""
  new_dtype = dtypes.canonicalize_dtype(new_dtype)
  weak_type = bool(weak_type)
  t = type(x)
  if t is int and new_dtype != dtypes.float0:
    return _stage(np.asarray(x).astype(new_dtype), weak_type)
  aval = core.get_aval(x)
  if (warn_on_complex_to_real_cast and dtypes.is_complex(aval.dtype)
      and not dtypes.is_complex(new_dtype)):
    warnings.warn("Casting complex values to real discards the imaginary part",
                  np.exceptions.ComplexWarning, stacklevel=3)
  scalar = t in _scalar_types or isinstance(x, np.generic)
  if scalar and aval.dtype == new_dtype and aval.weak_type == weak_type:
    return _stage(np.asarray(x, new_dtype), weak_type)
  if (scalar and not weak_type and new_dtype != dtypes.float0
      and not (dtypes.is_inexact(aval.dtype) and dtypes.is_integer(new_dtype)
               and not np.isfinite(x))):
    try:
      return _stage(np.asarray(x, dtype=new_dtype), False)
    except TypeError:
      # NB: as JAX's, a Python complex to a real dtype other than bool raises NumPy's
      # TypeError (`float() argument must be a string or a real number, not 'complex'`),
      # after the ComplexWarning; a NumPy complex scalar keeps its real part.
      if t is builtins.complex:
        raise
    except (OverflowError, ValueError):
      pass
  if (aval.shape == () and new_dtype != dtypes.float0
      and (scalar or t is np.ndarray or t is core.WeakScalarValue
           or (t is Array and pe.is_literal_array(x)))   # a scalar made while staging
      and isinstance(core.current_trace(), pe.DynamicJaxprTrace)):
    host = np.asarray(x)
    if dtypes.is_complex(host.dtype) and not dtypes.is_complex(new_dtype):
      host = host.real
    with np.errstate(invalid="ignore", over="ignore"):
      return _stage(host.astype(new_dtype), weak_type)
  if aval.dtype == new_dtype and aval.weak_type == weak_type and not isinstance(
      x, (np.generic, np.ndarray)):
    return x
  return convert_element_type_p.bind(x, new_dtype=new_dtype, weak_type=weak_type)


def stage(x: Any, /) -> Any:
  """Lifts `x` into the current trace (JAX's `lax.stage`): the identity on values.

  Args:
    x: an Array or tracer (returned as it is), or a host value: a NumPy array or scalar
      (its dtype canonicalized) or a Python scalar (weakly typed).

  Returns:
    An Array (a tracer under a transformation); staged into a jaxpr, a host scalar is a
    literal (`1.0:f32[]`) and a host array a constant.

  Raises:
    TypeError: if `x` is not an array-like value.
  """
  if isinstance(x, (np.ndarray, np.generic)) or type(x) in _scalar_types:
    aval = core.get_aval(x)
    return _stage(np.asarray(x, aval.dtype), aval.weak_type)
  core.get_aval(x)   # raises TypeError for a value that is not an array
  return x


def _stage(value: np.ndarray | np.generic, weak_type: bool = False) -> Any:
  """A host value as an Array of its dtype (what JAX's `lax.stage` makes of a host value):
  staged into a jaxpr, a scalar Array is a literal (`1.0:f32[]`).

  Args:
    value: a NumPy array or scalar whose dtype is canonical.
    weak_type: whether the result is weakly typed.

  Returns:
    An Array with `value`'s shape and dtype on the default device.
  """
  host = np.asarray(value)
  aval = ShapedArray(host.shape, host.dtype, weak_type)
  return pe.literal_array(Array(dispatch.to_buffer(host, aval), aval))


# ---------------------------------------------------------------------------
# Shifts and bit counts (integers). Shift amounts are read as unsigned, as XLA does: an
# amount >= the bit width, or negative, shifts every bit out (0, or the sign bits for
# shift_right_arithmetic). shift_right_arithmetic of an unsigned integer fills with its top
# bit, as XLA does.

shift_left_p = binop("shift_left", integer, "stablehlo.shift_left")
shift_right_logical_p = binop("shift_right_logical", integer, "stablehlo.shift_right_logical")
shift_right_arithmetic_p = binop("shift_right_arithmetic", integer,
                                 "stablehlo.shift_right_arithmetic")
population_count_p = unop("population_count", integer, "stablehlo.popcnt")
clz_p = unop("clz", integer, "stablehlo.count_leading_zeros")
for _p in (shift_left_p, shift_right_logical_p, shift_right_arithmetic_p, population_count_p,
           clz_p):
  ad.defjvp_zero(_p)   # integer results: float0 tangents
del _p


def shift_left(x: Any, y: Any):
  """Elementwise left shift `x << y`, zero-filling.

  Args:
    x: array `T[*s]`, T an integer dtype.
    y: shift amounts, array `T[*s]` (or rank 0, or with size 1 where `s` is larger); a
      Python int is int32 (int64 under x64).

  Returns:
    `T[*s]`. Amounts `>= nbits(T)` or negative give 0 (XLA's semantics; C leaves them
    undefined).

  Raises:
    TypeError: if T is not an integer dtype, `x` and `y` differ in dtype, or their shapes
      do not broadcast (lax's broadcasting: rank 0, or size 1 in a dimension).

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> lax.shift_left(np.array([1, 3, 1], np.int8), np.array([2, 6, 8], np.int8))
    Array([  4, -64,   0], dtype=int8)
  """
  return shift_left_p.bind(x, y)


def shift_right_logical(x: Any, y: Any):
  """Elementwise logical right shift `x >> y`, zero-filling (also for signed `x`).

  Args:
    x: array `T[*s]`, T an integer dtype.
    y: shift amounts, array `T[*s]` (or rank 0, or with size 1 where `s` is larger); a
      Python int is int32 (int64 under x64).

  Returns:
    `T[*s]`. Amounts `>= nbits(T)` or negative give 0.

  Raises:
    TypeError: if T is not an integer dtype, `x` and `y` differ in dtype, or their shapes
      do not broadcast (lax's broadcasting: rank 0, or size 1 in a dimension).

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> lax.shift_right_logical(np.array([-128, 64, -1], np.int8), np.int8(1))
    Array([ 64,  32, 127], dtype=int8)
  """
  return shift_right_logical_p.bind(x, y)


def shift_right_arithmetic(x: Any, y: Any):
  """Elementwise arithmetic right shift `x >> y`, filling with the top (sign) bit.

  Args:
    x: array `T[*s]`, T an integer dtype (for unsigned T the top bit is also copied in).
    y: shift amounts, array `T[*s]` (or rank 0, or with size 1 where `s` is larger); a
      Python int is int32 (int64 under x64).

  Returns:
    `T[*s]`. Amounts `>= nbits(T)` or negative give all sign bits (-1 or 0).

  Raises:
    TypeError: if T is not an integer dtype, `x` and `y` differ in dtype, or their shapes
      do not broadcast (lax's broadcasting: rank 0, or size 1 in a dimension).

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> lax.shift_right_arithmetic(np.array([-128, 64, -1], np.int8), np.int8(9))
    Array([-1,  0, -1], dtype=int8)
  """
  return shift_right_arithmetic_p.bind(x, y)


def population_count(x: Any):
  """Elementwise number of set bits (`stablehlo.popcnt`).

  Args:
    x: array `T[*s]`, T an integer dtype.

  Returns:
    `T[*s]`.

  Raises:
    TypeError: if T is not an integer dtype.

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> lax.population_count(np.array([-1, 0, 5], np.int8))
    Array([8, 0, 2], dtype=int8)
  """
  return population_count_p.bind(x)


def clz(x: Any):
  """Elementwise count of leading zero bits (`stablehlo.count_leading_zeros`).

  Args:
    x: array `T[*s]`, T an integer dtype.

  Returns:
    `T[*s]`; `nbits(T)` where x is 0.

  Raises:
    TypeError: if T is not an integer dtype.

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> lax.clz(np.array([0, 1, 255], np.uint8))
    Array([8, 7, 0], dtype=uint8)
  """
  return clz_p.bind(x)


# ---------------------------------------------------------------------------
# bitcast_convert_type(x, new_dtype): reinterprets the bits. Same widths keep the shape; a
# narrower new_dtype adds a trailing dimension of size nbits(old) // nbits(new); a wider one
# removes the trailing dimension, whose size must be nbits(new) // nbits(old). The bytes of
# one element are in the platform's order (little-endian: the trailing index 0 is the low
# byte, as numpy's `view`). The result is never weakly typed.
bitcast_convert_type_p = Primitive("bitcast_convert_type")


def _bitcast_convert_type_abstract_eval(x, *, new_dtype):
  old = x.dtype
  if (old == dtypes.bool_ or dtypes.is_complex(old) or new_dtype == dtypes.bool_
      or dtypes.is_complex(new_dtype)) and old != new_dtype:
    raise TypeError("lax.bitcast_convert_type does not support bool or complex values unless "
                    f"the operand and destination types match. Got operand dtype={old}, "
                    f"new_dtype={new_dtype!r}. Consider using the arr.view() method instead.")
  old_bits, new_bits = dtypes.itemsize_bits(old), dtypes.itemsize_bits(new_dtype)
  if old_bits == new_bits:
    shape = x.shape
  elif old_bits > new_bits:
    shape = (*x.shape, old_bits // new_bits)
  else:
    dim = x.shape[-1] if x.shape else 1
    if dim * old_bits != new_bits:
      raise ValueError(f"Attempting to convert array of shape {x.shape} from {old} of size "
                       f"{old_bits} bits to {new_dtype} of size {new_bits}, bits but "
                       f"{dim} * {old_bits} != {new_bits}")
    shape = x.shape[:-1]
  return ShapedArray(shape, new_dtype, False)


def _bitcast_convert_type_lowering(ctx, x, *, new_dtype):
  return ctx.op("stablehlo.bitcast_convert", [x])


bitcast_convert_type_p.def_abstract_eval(_bitcast_convert_type_abstract_eval)
lowering.register_lowering(bitcast_convert_type_p, _bitcast_convert_type_lowering)
ad.defjvp_zero(bitcast_convert_type_p)   # as JAX, also between float dtypes


def _bitcast_convert_type_batch(args, dims, *, new_dtype):
  # Vectorized (as JAX), except that a wider new_dtype consumes the trailing axis, which must
  # not be the batch axis: that one moves to the front first.
  (x,), (d,) = args, dims
  aval = core.get_aval(x)
  d = d % len(aval.shape)
  if (dtypes.itemsize_bits(new_dtype) > dtypes.itemsize_bits(aval.dtype)
      and d == len(aval.shape) - 1):
    x, d = batching.moveaxis(x, d, 0), 0
  return bitcast_convert_type_p.bind(x, new_dtype=new_dtype), d


batching.primitive_batchers[bitcast_convert_type_p] = _bitcast_convert_type_batch


def bitcast_convert_type(operand: Any, new_dtype: Any):
  """Reinterprets the bits of `operand` as `new_dtype` (`stablehlo.bitcast_convert`).

  Args:
    operand: array `T[*s]`.
    new_dtype: dtype-like U (canonicalized: float64 becomes float32 unless x64 is on).

  Returns:
    `U[*s]` if T and U have the same width; `U[*s, k]` with `k = nbits(T) // nbits(U)` if U
    is narrower; `U[*s[:-1]]` if U is wider (then `s[-1] * nbits(T)` must equal
    `nbits(U)`). Never weakly typed.

  Raises:
    TypeError: if T or U is bool or complex and T != U.
    ValueError: if U is wider and the trailing dimension does not hold exactly one U.

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> lax.bitcast_convert_type(np.float32(1.0), np.int32)
    Array(1065353216, dtype=int32)
    >>> lax.bitcast_convert_type(np.array([1, 256], np.uint16), np.uint8)
    Array([[1, 0],
           [0, 1]], dtype=uint8)
  """
  return bitcast_convert_type_p.bind(
      operand, new_dtype=dtypes.check_user_dtype(new_dtype, "bitcast_convert_type"))


# ---------------------------------------------------------------------------
# clamp(min, x, max): min and max of x's shape or rank 0 (broadcast, as JAX lowers it); all
# three of one dtype. NaN in x stays NaN; the result is weak only when all three are.
clamp_p = Primitive("clamp")


def _clamp_abstract_eval(min, x, max):
  for i, a in enumerate((min, x, max)):
    utils.check_dtype("clamp", a, any_dtype, i)
  utils.check_same_dtypes("clamp", (min, x, max))
  for arg, a in (("min", min), ("max", max)):
    if a.shape and a.shape != x.shape:
      raise TypeError(f"clamp requires {arg}.shape == operand.shape or {arg}.shape == (), got "
                      f"{arg}.shape={a.shape}, operand.shape={x.shape}.")
  return ShapedArray(x.shape, x.dtype, min.weak_type and x.weak_type and max.weak_type)


def _clamp_lowering(ctx, min, x, max):
  return [ctx.elementwise("stablehlo.clamp", *broadcast_operands(ctx, (min, x, max)))]


# JAX's JVP: the tangent of the operand passes where min < x < max (strictly: at a bound
# neither gets it); that of min where x < min < max, that of max where max < x.
def _clamp_jvp_min(t, min, x, max):
  return select(bitwise_and(gt(min, x), lt(min, max)), _maybe_broadcast(_out_shape(x), t),
                _zeros(x))


def _clamp_jvp_operand(t, min, x, max):
  return select(bitwise_and(gt(x, min), lt(x, max)), t, _zeros(x))


def _clamp_jvp_max(t, min, x, max):
  return select(lt(max, x), _maybe_broadcast(_out_shape(x), t), _zeros(x))


clamp_p.def_abstract_eval(_clamp_abstract_eval)
lowering.register_lowering(clamp_p, _clamp_lowering)
ad.defjvp(clamp_p, _clamp_jvp_min, _clamp_jvp_operand, _clamp_jvp_max)


def _clamp_batch(args, dims):
  """As JAX's `_clamp_batch_rule`: operands batched alike at one dim keep it (batched
  rank-0 bounds broadcast into x's shape there), as do rank-0 bounds around a batched x;
  otherwise the batch dims move to the front (unbatched operands broadcast) and rank-0 or
  lower-rank bounds are broadcast to x's shape."""
  lax_shape = _shape_and_reduction()[0]
  lo, x, hi = args
  lo_d, x_d, hi_d = dims
  nd = lambda v: len(core.get_aval(v).shape)  # noqa: E731
  shp = lambda v: core.get_aval(v).shape  # noqa: E731
  size = next(shp(v)[d] for v, d in zip(args, dims) if d is not batching.not_mapped)
  if lo_d == x_d == hi_d:
    if shp(lo) == shp(x) == shp(hi) or nd(lo) == nd(hi) == 0:
      return clamp_p.bind(lo, x, hi), x_d
    if nd(lo) == nd(hi) == 1:
      lo = lax_shape.broadcast_in_dim(lo, shp(x), (lo_d,))
      hi = lax_shape.broadcast_in_dim(hi, shp(x), (hi_d,))
      return clamp_p.bind(lo, x, hi), x_d
  elif nd(lo) == 0 and nd(hi) == 0 and x_d is not batching.not_mapped:
    return clamp_p.bind(lo, x, hi), x_d
  lo = batching.bdim_at_front(lo, lo_d, size) if shp(lo) else lo
  hi = batching.bdim_at_front(hi, hi_d, size) if shp(hi) else hi
  x = batching.bdim_at_front(x, x_d, size) if shp(x) else x
  if nd(lo) == 0 and nd(x) > 0:
    lo = lax_shape.broadcast(lo, shp(x))
  if nd(hi) == 0 and nd(x) > 0:
    hi = lax_shape.broadcast(hi, shp(x))
  if 0 < nd(lo) < nd(x):
    lo = lax_shape.broadcast_in_dim(lo, shp(x), (0,))
  if 0 < nd(hi) < nd(x):
    hi = lax_shape.broadcast_in_dim(hi, shp(x), (0,))
  if nd(lo) > nd(x):
    x = lax_shape.broadcast(x, shp(lo))
  return clamp_p.bind(lo, x, hi), 0


batching.primitive_batchers[clamp_p] = _clamp_batch


def clamp(min: Any, x: Any, max: Any):
  """Elementwise `min(max(x, min), max)` (`stablehlo.clamp`).

  Args:
    min: array `T[*s]` or rank 0.
    x: array `T[*s]`.
    max: array `T[*s]` or rank 0. A Python scalar among the three is an array of its
      default dtype (int32, float32, ...; 64-bit under x64): no promotion.

  Returns:
    `T[*s]`. A NaN in `x` stays NaN. With `min > max` the result is `max`.

  Raises:
    TypeError: if the dtypes differ, or `min`/`max` is neither rank 0 nor of `x`'s shape.

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> lax.clamp(0.0, np.array([-1.0, 0.5, 2.0], np.float32), 1.0)
    Array([0. , 0.5, 1. ], dtype=float32)
  """
  return clamp_p.bind(min, x, max)


# ---------------------------------------------------------------------------
# nextafter(x, y): the next representable value after x towards y (C's nextafter; lowers
# to chlo.next_after). NaN if either is NaN; y if x == y; from +-0.0 the smallest subnormal.
# NB: XLA's CPU float32 expansion steps from -smallest_subnormal to +0.0 (C: -0.0), as JAX.
nextafter_p = binop("nextafter", floating, "chlo.next_after")


def _nextafter_jvp(primals, tangents):
  raise MissingRuleError(
      "Primitive 'nextafter' is not differentiable (JAX defines no derivative for it "
      "either): its result steps by one unit in the last place. Apply lax.stop_gradient to "
      "its operands to treat the result as a constant.")


ad.primitive_jvps[nextafter_p] = _nextafter_jvp


def nextafter(x1: Any, x2: Any):
  """Elementwise next representable value after `x1` in the direction of `x2`.

  Args:
    x1, x2: arrays `T[*s]` (or rank 0, or with size-1 dimensions that broadcast), T a
      floating dtype; a Python float is float32 (float64 under x64).

  Returns:
    `T[*s]`: NaN where either is NaN, `x2` where `x1 == x2` (so the sign of a zero `x2` is
    kept), else the neighbour of `x1` (subnormals included, as C's `nextafter`; but XLA's
    CPU float32 expansion steps from `-smallest_subnormal` towards zero to `+0.0`).

  Raises:
    TypeError: if T is not floating, the dtypes differ, or the shapes do not broadcast.

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> lax.nextafter(np.float32(1.0), np.float32(2.0))
    Array(1.0000001, dtype=float32)
  """
  return nextafter_p.bind(x1, x2)


# ---------------------------------------------------------------------------
# reduce_precision(x, exponent_bits, mantissa_bits): rounds x (to nearest even) to the
# values of a float format with that many exponent and mantissa bits, keeping x's dtype;
# overflow gives inf, underflow gives zero (no subnormals), NaN stays NaN.
reduce_precision_p = Primitive("reduce_precision")


def _reduce_precision_abstract_eval(x, *, exponent_bits, mantissa_bits):
  utils.check_dtype("reduce_precision", x, floating)
  if exponent_bits < 1:
    raise ValueError(f"reduce_precision: exponent_bits must be positive; got {exponent_bits}")
  if mantissa_bits < 0:
    raise ValueError(f"reduce_precision: mantissa_bits must be non-negative; got "
                     f"{mantissa_bits}")
  return x


def _reduce_precision_lowering(ctx, x, *, exponent_bits, mantissa_bits):
  return ctx.op("stablehlo.reduce_precision", [x],
                attrs=f"exponent_bits = {exponent_bits} : i32, "
                      f"mantissa_bits = {mantissa_bits} : i32")


reduce_precision_p.def_abstract_eval(_reduce_precision_abstract_eval)
lowering.register_lowering(reduce_precision_p, _reduce_precision_lowering)
# Linear, as JAX treats it: the tangent and the cotangent are rounded alike.
ad.deflinear_args(reduce_precision_p, lambda ct, x, **params: [reduce_precision_p.bind(ct, **params)])
batching.defvectorized(reduce_precision_p)


def reduce_precision(operand: Any, exponent_bits: int, mantissa_bits: int):
  """Rounds `operand` to a float format with fewer bits, keeping its dtype (XLA's
  ReducePrecision).

  Args:
    operand: array `T[*s]`, T a floating dtype.
    exponent_bits: int >= 1, the exponent width of the emulated format.
    mantissa_bits: int >= 0, its explicit mantissa bits (bfloat16 is (8, 7), float16 (5, 10)).

  Returns:
    `T[*s]`: each value rounded to nearest even in the emulated format; out of range gives
    +-inf, values below its smallest normal give +-0.

  Raises:
    TypeError: if T is not floating.
    ValueError: if `exponent_bits < 1` or `mantissa_bits < 0`.

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> lax.reduce_precision(np.array([1.0009766, 70000.0], np.float32), 5, 10)
    Array([1.0009766,       inf], dtype=float32)
  """
  return reduce_precision_p.bind(operand, exponent_bits=operator.index(exponent_bits),
                                 mantissa_bits=operator.index(mantissa_bits))


# ---------------------------------------------------------------------------
# Complex numbers: real, imag, conj, complex. `complex` and `conj` take float32/float64 only
# (as JAX: no float16/bfloat16 complex type exists), and conj of a real x is complex(x, 0).

_complex_of = {dtypes.float32: dtypes.complex64, dtypes.float64: dtypes.complex128,
               dtypes.complex64: dtypes.complex64, dtypes.complex128: dtypes.complex128}
_f32 = ("float32", lambda d: d == dtypes.float32)
_f64 = ("float64", lambda d: d == dtypes.float64)
_complex_elem = (_f32, _f64)

real_p = unop("real", (utils.complex_kind,), "stablehlo.real", _real_dtype)
ad.deflinear_args(real_p, lambda ct, x: [complex(ct, np.zeros((), core.get_aval(ct).dtype))])
imag_p = unop("imag", (utils.complex_kind,), "stablehlo.imag", _real_dtype)
ad.deflinear_args(imag_p, lambda ct, x: [complex(np.zeros((), core.get_aval(ct).dtype), neg(ct))])

complex_p = Primitive("complex")
complex_p.def_abstract_eval(naryop_abstract_eval("complex", _complex_elem, _complex_of.get))


def _complex_lowering(ctx, x, y):
  x, y = broadcast_operands(ctx, (x, y))
  shape = ctx.avals_out[0].shape
  return ctx.op("stablehlo.complex", [x, y],
                operand_avals=[a.update(shape=shape) for a in ctx.avals_in])


def _complex_jvp(primals, tangents):
  x, y = primals
  tx, ty = tangents
  out = complex_p.bind(x, y)
  shape = core.get_aval(out).shape
  if type(tx) is ad.Zero and type(ty) is ad.Zero:
    return out, _zero_tangent(out)
  # A zero part stays a rank-0 constant (broadcast by complex), not a materialized array.
  if type(tx) is ad.Zero:
    tx = np.zeros((), core.get_aval(ty).dtype)
  elif type(ty) is ad.Zero:
    ty = np.zeros((), core.get_aval(tx).dtype)
  return out, _maybe_broadcast(shape, complex(tx, ty))


def _complex_transpose(ct, x, y):
  if type(ct) is ad.Zero:
    return _zero_cts(x, y)
  return [_unbroadcast(x.aval, real(ct)) if ad.is_undefined_primal(x) else None,
          _unbroadcast(y.aval, imag(neg(ct))) if ad.is_undefined_primal(y) else None]


lowering.register_lowering(complex_p, _complex_lowering)
ad.primitive_jvps[complex_p] = _complex_jvp
ad.primitive_transposes[complex_p] = _complex_transpose
defbroadcasting(complex_p)

conj_p = Primitive("conj")


def _conj_abstract_eval(x, *, input_dtype):
  utils.check_dtype("conj", x, (_f32, utils.complex_kind, _f64))
  return ShapedArray(x.shape, _complex_of[x.dtype], x.weak_type)


def _conj_lowering(ctx, x, *, input_dtype):
  src, out = ctx.avals_in[0], ctx.avals_out[0]
  part = out.update(dtype=_real_dtype(out.dtype))
  if dtypes.is_complex(src.dtype):
    re = ctx.op("stablehlo.real", [x], [part])[0]
    im = ctx.op("stablehlo.imag", [x], [part])[0]
    x, y = re, ctx.elementwise("stablehlo.negate", im, aval=part)
  else:
    y = broadcast_operand(ctx, ctx.constant(0, part.update(shape=())), part.update(shape=()),
                          part.shape)
  return ctx.op("stablehlo.complex", [x, y], operand_avals=[part, part])


def _conj_transpose(ct, x, *, input_dtype):
  if dtypes.is_complex(input_dtype):
    return [conj(ct)]
  return [real(ct)]   # a real input was widened to complex: the transpose takes the real part


conj_p.def_abstract_eval(_conj_abstract_eval)
lowering.register_lowering(conj_p, _conj_lowering)
ad.deflinear_args(conj_p, _conj_transpose)
batching.defvectorized(conj_p)


def real(x: Any):
  """Elementwise real part of a complex array.

  Args:
    x: array `C[*s]`, C complex64 or complex128.

  Returns:
    `R[*s]`, R float32 or float64.

  Raises:
    TypeError: if `x` is not complex (take a real array as it is, as JAX's lax does not).

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> lax.real(np.array([1 + 2j, -3j], np.complex64))
    Array([ 1., -0.], dtype=float32)
  """
  return real_p.bind(x)


def imag(x: Any):
  """Elementwise imaginary part of a complex array.

  Args:
    x: array `C[*s]`, C complex64 or complex128.

  Returns:
    `R[*s]`, R float32 or float64.

  Raises:
    TypeError: if `x` is not complex.

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> lax.imag(np.array([1 + 2j, -3j], np.complex64))
    Array([ 2., -3.], dtype=float32)
  """
  return imag_p.bind(x)


def conj(x: Any):
  """Elementwise complex conjugate; a real `x` becomes `complex(x, 0)`.

  Args:
    x: array `T[*s]`, T complex64, complex128, float32 or float64.

  Returns:
    `C[*s]` with C the complex dtype of T. The param `input_dtype` records T, as in JAX.

  Raises:
    TypeError: for other dtypes (float16, bfloat16, integers, bool).

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> lax.conj(np.array([1 + 2j], np.complex64))
    Array([1.-2.j], dtype=complex64)
    >>> lax.conj(np.float32(3.0))
    Array(3.+0.j, dtype=complex64)
  """
  return conj_p.bind(x, input_dtype=core.get_aval(x).dtype)


def complex(x: Any, y: Any):
  """Elementwise `x + 1j * y`.

  Args:
    x, y: arrays `R[*s]` (or rank 0, or with size-1 dimensions that broadcast), R float32
      or float64; a Python float is float32 (float64 under x64).

  Returns:
    `C[*s]`, C complex64 (from float32) or complex128 (from float64).

  Raises:
    TypeError: for other dtypes, differing dtypes, or incompatible shapes.

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> lax.complex(np.array([1.0, 2.0], np.float32), np.float32(-1.0))
    Array([1.-1.j, 2.-1.j], dtype=complex64)
  """
  return complex_p.bind(x, y)


# ---------------------------------------------------------------------------
# Composite wrappers with JAX's lax names.


def reciprocal(x: Any):
  """Elementwise 1 / x. x: T[*s] (T inexact) -> T[*s]; `integer_pow(x, -1)`, as JAX's."""
  return integer_pow(x, -1)


def square(x: Any):
  """Elementwise x * x (JAX's `square` primitive, lowered to `chlo.square`).

  Args:
    x: array T[*s], T a number type.

  Returns:
    T[*s].

  Raises:
    TypeError: if T is bool.
  """
  return square_p.bind(x)


def dtype(x: Any) -> np.dtype:
  """The canonical dtype of `x` (an array, scalar or dtype-like)."""
  return dtypes.dtype(x, canonicalize=True)


# mulhi(x, y): the high half of the double-width integer product; CHLO's `mulhi`, which
# XLA expands (JAX 0.10's lowering). Integer-valued: zero derivative.
mulhi_p = binop("mulhi", integer, "chlo.mulhi")
ad.defjvp_zero(mulhi_p)


def mulhi(x: Any, y: Any, /):
  """The high half of the double-width product of integers x and y (JAX's `lax.mulhi`).

  Args:
    x, y: integer arrays `T[*s]` of one dtype (lax broadcasting: rank 0, or size-1
      dimensions).

  Returns:
    `T[*s]`: `(x * y) >> bits(T)` with the full-width product (signed for signed T).

  Raises:
    TypeError: for non-integer or mismatched dtypes.
  """
  return mulhi_p.bind(x, y)


# ---------------------------------------------------------------------------
# sin and cos of complex numbers: lowered as JAX lowers them (not to StableHLO's complex
# sine/cosine, whose results differ in the last bits): from the real sin, cos and expm1,
# sin(a + ib) = sin a cosh b + i cos a sinh b, with 2 sinh b = expm1(b) - expm1(-b) and
# 2 cosh b = expm1(b) + expm1(-b) + 2 (no cancellation for small |b|).


def _complex_parts_of_trig(x):
  a, b = real(x), imag(x)
  zero, two = np.zeros((), a.dtype)[()], np.full((), 2, a.dtype)[()]
  e1m, e2m = expm1(b), expm1(neg(b))
  sinh_b, cosh_b = div(sub(e1m, e2m), two), div(add(add(e1m, e2m), two), two)
  return a, zero, sin(a), cos(a), sinh_b, cosh_b


def _sin_complex(x):
  a, zero, sn, cs, sinh_b, cosh_b = _complex_parts_of_trig(x)
  re, im = mul(sn, cosh_b), mul(cs, sinh_b)
  # NB: where a is 0 and |b| is so large that expm1 overflows, re would be 0 * inf = nan.
  return select(eq(a, zero), complex(zero, im), complex(re, im))


def _cos_complex(x):
  a, zero, sn, cs, sinh_b, cosh_b = _complex_parts_of_trig(x)
  re, im = mul(cs, cosh_b), mul(neg(sn), sinh_b)
  return select(eq(a, zero), complex(re, zero), complex(re, im))


def _trig_lowering(op: str, complex_fun):
  real_rule, complex_rule = _hlo_lowering(op), mlir.lower_fun(complex_fun, False)

  def rule(ctx, x, accuracy=None):
    if dtypes.is_complex(ctx.avals_in[0].dtype):
      return complex_rule(ctx, x)
    return real_rule(ctx, x, accuracy=accuracy)
  return rule


lowering.register_lowering(sin_p, _trig_lowering("stablehlo.sine", _sin_complex))
lowering.register_lowering(cos_p, _trig_lowering("stablehlo.cosine", _cos_complex))


