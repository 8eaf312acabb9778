"""Special functions: `lgamma`, `digamma`, `polygamma`, `igamma`, `igammac`, `bessel_i0e`,
`bessel_i1e`, `zeta`, `igamma_grad_a`, `betainc`, `random_gamma_grad`
(`erf`, `erfc` and `erf_inv` live in elementwise.py).

Floating dtypes only; binary functions take operands of one dtype and equal shapes (or rank
0). The lowerings are JAX's: `lgamma`, `digamma`, `polygamma` and `bessel_i1e` lower to CHLO
ops that XLA expands; `bessel_i0e` is Cephes' Chebyshev expansion (in float32 for float16 and
bfloat16); `igamma`/`igammac` are Cephes' power series and continued fraction, each a
`stablehlo.while` that runs until every element has converged (in float32 for float16 and
bfloat16), as JAX's own lax special-function module builds them.

NB: XLA's CPU backend reads subnormal inputs as zero (so `lgamma(1e-40)` is inf, not 92.1),
exactly as in JAX.

Those compositions are written with stagecraft.lax functions: the lowering rule traces them
to a jaxpr and inlines its lowering (`_inline`), so they read like JAX's `*_impl` functions.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from stagecraft import dtypes
from stagecraft.core import Primitive, ShapedArray, get_aval
from stagecraft.interpreters import ad, batching, lowering
from stagecraft.interpreters import partial_eval as pe
from stagecraft.lax import elementwise as ew
from stagecraft.lax.elementwise import binop, naryop_abstract_eval, unop
from stagecraft.lax.reduction import reduce_or
from stagecraft.lax.shape import broadcast_in_dim, full, full_like
from stagecraft.lax.utils import const, floating
from stagecraft.lax.utils import weak_const as _c

__all__ = ["lgamma_p", "digamma_p", "polygamma_p", "igamma_p", "igammac_p", "bessel_i0e_p",
           "bessel_i1e_p", "lgamma", "digamma", "polygamma", "igamma", "igammac",
           "bessel_i0e", "bessel_i1e", "zeta_p", "zeta", "igamma_grad_a_p", "igamma_grad_a",
           "regularized_incomplete_beta_p", "betainc", "random_gamma_grad"]

# ---------------------------------------------------------------------------
# Lowering compositions: trace a function of stagecraft.lax ops, inline its lowering.


# NB: `lax.while_loop`, installed by lax/control_flow/while_op.py (control flow comes after
# special in lax's order, so special does not import it).
staged_while_loop: Callable | None = None


class _Staged:
  """Stands in for a lowering context where an algorithm written for `_inline`/`_while`
  is staged as lax operations instead (JAX's `random_gamma_grad`: composed of lax ops, its
  loops `while` equations): `avals_out` holds the aval it computes."""

  def __init__(self, aval: ShapedArray):
    self.avals_out = [aval]


def _inline(ctx, fun: Callable, avals: Sequence[ShapedArray], args: Sequence[str]) -> list[str]:
  """Emits the lowering of `fun(*avals)` (traced to a jaxpr) at the current point of `ctx`'s
  function; returns the names of its outputs (`fun` returns a tuple). Under `_Staged`,
  calls `fun` on the values `args`."""
  if type(ctx) is _Staged:
    return list(fun(*args))
  jaxpr, consts = pe.trace_to_jaxpr(lambda *xs: list(fun(*xs)), list(avals))
  const_names = []
  for c in consts:  # NB: only closed-over arrays land here; scalars are Literals.
    c = np.asarray(c)
    name = ctx.fb.fresh()
    aval = ShapedArray(c.shape, c.dtype)
    ctx.fb.emit(f"{name} = stablehlo.constant {lowering.dense_array(c)} : "
                f"{lowering.ir_type(aval)}")
    const_names.append(name)
  return lowering.jaxpr_subcomp(ctx.fb, jaxpr, const_names, list(args))


def _while(ctx, cond_fun: Callable, body_fun: Callable, avals: Sequence[ShapedArray],
           init: Sequence[str]) -> list[str]:
  """A `stablehlo.while` over the carried values `init` (of `avals`); `cond_fun` returns a
  bool scalar, `body_fun` the new carried values (both written with stagecraft.lax). Under
  `_Staged`, a `lax.while_loop` over the values `init`."""
  if type(ctx) is _Staged:
    return list(staged_while_loop(lambda c: cond_fun(*c), lambda c: tuple(body_fun(*c)),
                                  tuple(init)))
  pred = ShapedArray((), dtypes.bool_)
  cond = ctx.region(avals, [pred], lambda *xs: _inline(ctx, lambda *v: [cond_fun(*v)], avals, xs))
  body = ctx.region(avals, avals, lambda *xs: _inline(ctx, body_fun, avals, xs))
  return ctx.op("stablehlo.while", list(init), list(avals), regions=[cond, body],
                operand_avals=list(avals))


def _full_like(x, value):
  return full(x.shape, value, x.dtype)


def _any(pred):
  return reduce_or(pred, tuple(range(len(pred.shape))))


def _compute_dtype(dtype: np.dtype) -> np.dtype:
  """float16 and bfloat16 are computed in float32 (the Cephes constants need it), as JAX."""
  return dtypes.float32 if dtype in (dtypes.float16, dtypes.bfloat16) else dtype


def _upcast_lowering(impl: Callable) -> Callable:
  """A lowering that broadcasts the operands to the output shape, computes `impl(ctx,
  *operands, dtype)` in `_compute_dtype`, and converts back (JAX's `_up_and_broadcast`)."""
  def rule(ctx, *operands):
    out = ctx.avals_out[0]
    operands = ew.broadcast_operands(ctx, operands)
    wide = out.update(dtype=_compute_dtype(out.dtype), weak_type=False)
    if wide.dtype != out.dtype:
      operands = [ctx.op("stablehlo.convert", [x], [wide], operand_avals=[out])[0]
                  for x in operands]
    res = impl(ctx.replace([wide] * len(operands), [wide]), *operands, dtype=wide.dtype)
    if wide.dtype != out.dtype:
      res = ctx.op("stablehlo.convert", [res], [out], operand_avals=[wide])[0]
    return [res]
  return rule


# ---------------------------------------------------------------------------
# lgamma, digamma, polygamma, bessel_i1e: one CHLO op each.

lgamma_p = unop("lgamma", floating, "chlo.lgamma")
ad.defjvp(lgamma_p, lambda t, x: ew.mul(t, digamma(x)))
digamma_p = unop("digamma", floating, "chlo.digamma")
ad.defjvp(digamma_p, lambda t, x: ew.mul(t, polygamma(const(x, 1), x)))
bessel_i1e_p = unop("bessel_i1e", floating, "chlo.bessel_i1e")


def _bessel_i1e_jvp(t, y, x):
  # i1e'(x) = i0e(x) - y (sign(x) + 1/x), and 1/2 near 0 (JAX's rule).
  eps = float(dtypes.finfo(ew.dtype(x)).eps)
  x_is_not_tiny = ew.gt(ew.abs(x), _c(x, eps))
  safe_x = ew.select(x_is_not_tiny, x, _full_like(x, eps))
  dy_dx = ew.sub(bessel_i0e(safe_x), ew.mul(y, ew.add(ew.sign(safe_x), ew.reciprocal(safe_x))))
  return ew.mul(t, ew.select(x_is_not_tiny, dy_dx, _full_like(x, 0.5)))


ad.defjvp2(bessel_i1e_p, _bessel_i1e_jvp)
polygamma_p = binop("polygamma", floating, "chlo.polygamma")


def _polygamma_jvp_m(t, m, x):
  raise ValueError("polygamma is not differentiable with respect to its order m (as in JAX): "
                   "m takes integer values only. Differentiate with respect to x, and pass m "
                   "as a constant (or through lax.stop_gradient).")


ad.defjvp(polygamma_p, _polygamma_jvp_m,
          lambda t, m, x: ew.mul(t, polygamma(ew.add(m, const(m, 1)), x)))
zeta_p = binop("zeta", floating, "chlo.zeta")


def _zeta_jvp_x(t, x, q):
  raise ValueError("zeta(x, q) is differentiable with respect to q only: d/dx has no closed "
                   "form (JAX defines no derivative for zeta at all). Pass x as a constant "
                   "(or through lax.stop_gradient).")


# d/dq sum_k (k + q)^-x = -x zeta(x + 1, q).
ad.defjvp(zeta_p, _zeta_jvp_x,
          lambda t, x, q: ew.mul(t, ew.mul(ew.neg(x), zeta(ew.add(x, const(x, 1)), q))))


def lgamma(x: Any):
  """Elementwise log of the absolute value of the gamma function, `log|Γ(x)|`.

  Args:
    x: array `T[*s]`, T a floating dtype.

  Returns:
    `T[*s]`: `+inf` at the poles `x = 0, -1, -2, ...` (and at `-inf`), as
    `scipy.special.gammaln`.

  Raises:
    TypeError: if T is not floating.

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> lax.lgamma(np.array([0.0, -1.0], np.float32))
    Array([inf, inf], dtype=float32)
    >>> float(lax.lgamma(np.float32(-0.5)))  # log|Γ(-0.5)| = log(2 √π)
    1.26551...
  """
  return lgamma_p.bind(x)


def digamma(x: Any):
  """Elementwise digamma function `ψ(x) = d/dx log Γ(x)`.

  Args:
    x: array `T[*s]`, T a floating dtype.

  Returns:
    `T[*s]`; NaN at the poles `x = 0, -1, -2, ...` (XLA's choice; `scipy.special.digamma`
    gives `-inf` at 0 and NaN at the negative integers).

  Raises:
    TypeError: if T is not floating.

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> float(lax.digamma(np.float32(1.0)))  # minus the Euler-Mascheroni constant
    -0.57721...
    >>> lax.digamma(np.array([0.0, -1.0], np.float32))
    Array([nan, nan], dtype=float32)
  """
  return digamma_p.bind(x)


def polygamma(m: Any, x: Any):
  """Elementwise polygamma function `ψ⁽ᵐ⁾(x)`, the m-th derivative of `ψ = digamma`.

  Args:
    m: array `T[*s]` (or rank 0) of non-negative integral values, T a floating dtype.
    x: array `T[*s]` (or rank 0). Python scalars are not promoted
      (float32, float64 under x64).

  Returns:
    `T[*s]`; NaN where `m` is negative or not an integer.

  Raises:
    TypeError: if T is not floating, or `m` and `x` differ in dtype or shape.

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> float(lax.polygamma(np.float32(1.0), np.float32(1.0)))  # π² / 6
    1.64493...
    >>> lax.polygamma(np.float32(0.5), np.float32(1.0))
    Array(nan, dtype=float32)
  """
  return polygamma_p.bind(m, x)


def bessel_i1e(x: Any):
  """Elementwise exponentially scaled modified Bessel function of order 1,
  `i1e(x) = exp(-|x|) I₁(x)`.

  Args:
    x: array `T[*s]`, T a floating dtype.

  Returns:
    `T[*s]`, odd in x, tending to `±0` as `x -> ±inf`.

  Raises:
    TypeError: if T is not floating.

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> lax.bessel_i1e(np.array([0.0, 1.0, -1.0], np.float32))
    Array([ 0.        ,  0.20791042, -0.20791042], dtype=float32)
  """
  return bessel_i1e_p.bind(x)


# ---------------------------------------------------------------------------
# bessel_i0e: Cephes' Chebyshev expansions of i0e on [0, 8] and (8, inf) (JAX's
# `_i0e_impl32`/`_i0e_impl64`; float16/bfloat16 computed in float32).

_I0E_A32 = (
    -1.30002500998624804212E-8, 6.04699502254191894932E-8, -2.67079385394061173391E-7,
    1.11738753912010371815E-6, -4.41673835845875056359E-6, 1.64484480707288970893E-5,
    -5.75419501008210370398E-5, 1.88502885095841655729E-4, -5.76375574538582365885E-4,
    1.63947561694133579842E-3, -4.32430999505057594430E-3, 1.05464603945949983183E-2,
    -2.37374148058994688156E-2, 4.93052842396707084878E-2, -9.49010970480476444210E-2,
    1.71620901522208775349E-1, -3.04682672343198398683E-1, 6.76795274409476084995E-1)
_I0E_B32 = (
    3.39623202570838634515E-9, 2.26666899049817806459E-8, 2.04891858946906374183E-7,
    2.89137052083475648297E-6, 6.88975834691682398426E-5, 3.36911647825569408990E-3,
    8.04490411014108831608E-1)
_I0E_A64 = (
    -4.41534164647933937950E-18, 3.33079451882223809783E-17, -2.43127984654795469359E-16,
    1.71539128555513303061E-15, -1.16853328779934516808E-14, 7.67618549860493561688E-14,
    -4.85644678311192946090E-13, 2.95505266312963983461E-12, -1.72682629144155570723E-11,
    9.67580903537323691224E-11, -5.18979560163526290666E-10, 2.65982372468238665035E-9,
    *_I0E_A32)
_I0E_B64 = (
    -7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17,
    3.46122286769746109310E-17, -2.82762398051658348494E-16, -3.42548561967721913462E-16,
    1.77256013305652638360E-15, 3.81168066935262242075E-15, -9.55484669882830764870E-15,
    -4.15056934728722208663E-14, 1.54008621752140982691E-14, 3.85277838274214270114E-13,
    7.18012445138366623367E-13, -1.79417853150680611778E-12, -1.32158118404477131188E-11,
    -3.14991652796324136454E-11, 1.18891471078464383424E-11, 4.94060238822496958910E-10,
    *_I0E_B32)


def _chebyshev(x, coefficients):
  """Clenshaw's recurrence for a Chebyshev series (Cephes' `chbevl`, JAX's
  `evaluate_chebyshev_polynomial`)."""
  b0 = b1 = b2 = _full_like(x, 0.0)
  for c in coefficients:
    b2, b1 = b1, b0
    b0 = ew.add(ew.sub(ew.mul(x, b1), b2), _c(x, c))
  return ew.mul(ew.sub(b0, b2), _c(b0, 0.5))


def _i0e_impl(x, *, dtype):
  a, b = (_I0E_A64, _I0E_B64) if dtype == dtypes.float64 else (_I0E_A32, _I0E_B32)
  x = ew.abs(x)
  small = _chebyshev(ew.sub(ew.mul(x, _c(x, 0.5)), _c(x, 2.0)), a)
  large = ew.div(_chebyshev(ew.sub(ew.div(_c(x, 32.0), x), _c(x, 2.0)), b), ew.sqrt(x))
  return (ew.select(ew.le(x, _c(x, 8.0)), small, large),)


bessel_i0e_p = Primitive("bessel_i0e")
bessel_i0e_p.def_abstract_eval(naryop_abstract_eval("bessel_i0e", floating))
lowering.register_lowering(bessel_i0e_p, _upcast_lowering(
    lambda ctx, x, *, dtype: _inline(ctx, lambda v: _i0e_impl(v, dtype=dtype),
                                     ctx.avals_in, [x])[0]))
# i0e'(x) = i1e(x) - sign(x) i0e(x).
ad.defjvp2(bessel_i0e_p,
           lambda t, y, x: ew.mul(t, ew.sub(bessel_i1e(x), ew.mul(ew.sign(x), y))))
batching.defvectorized(bessel_i0e_p)


def bessel_i0e(x: Any):
  """Elementwise exponentially scaled modified Bessel function of order 0,
  `i0e(x) = exp(-|x|) I₀(x)`.

  Args:
    x: array `T[*s]`, T a floating dtype.

  Returns:
    `T[*s]`, even in x, 1 at 0, tending to 0 as `|x| -> inf`.

  Raises:
    TypeError: if T is not floating.

  Algorithm: Cephes' Chebyshev expansions on `[0, 8]` and `(8, inf)`, as JAX (float16 and
  bfloat16 are computed in float32).

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> float(lax.bessel_i0e(np.float32(-1.0)))  # scipy.special.i0e(-1.0) = 0.4657596...
    0.46575...
  """
  return bessel_i0e_p.bind(x)


# ---------------------------------------------------------------------------
# igamma(a, x) = P(a, x) = γ(a, x) / Γ(a) and igammac(a, x) = Q(a, x) = 1 - P(a, x), the
# regularized incomplete gamma functions (scipy.special.gammainc / gammaincc). Cephes'
# algorithm, as JAX's `igamma_impl`/`igammac_impl` (value mode): the power series of P where
# x < 1 or x <= a, the continued fraction of Q elsewhere, each a while loop over the whole
# array that runs until every enabled element has converged to the dtype's epsilon (the
# continued fraction stops after 2000 steps). NaN for x < 0, a < 0, a == x == 0, or a NaN.


def _igamma_series(ctx, ax, x, a, enabled, dtype, derivative: bool = False,
                   sample: bool = False):
  """The power series of P(a, x), summed while any enabled element changes. With
  `derivative`, also d/da of the terms (JAX's IgammaMode.DERIVATIVE), and returns dP/da;
  with `sample` too, `-(dP/da) / (dP/dx)` (IgammaMode.SAMPLE_DERIVATIVE: the density
  `ax / x` cancels, so nothing underflows)."""
  eps = float(dtypes.finfo(dtype).eps)
  aval = ctx.avals_out[0]
  pred = aval.update(dtype=dtypes.bool_)
  n_deriv = 2 if derivative else 0   # dc/da, dans/da

  def init(a, x):
    return (a, _full_like(a, 1.0), _full_like(a, 1.0), *[_full_like(a, 0.0)] * n_deriv)

  r, c, ans, *deriv = _inline(ctx, init, [aval, aval], [a, x])

  def cond(enabled, *_):
    return _any(enabled)

  def body(enabled, r, c, ans, x, *deriv):
    r1 = ew.add(r, _c(r, 1.0))
    c1 = ew.mul(c, ew.div(x, r1))
    ans1 = ew.add(ans, c1)
    new, old = [r1, c1, ans1], [r, c, ans]
    if derivative:
      dc_da, dans_da = deriv
      dc_da1 = ew.sub(ew.mul(dc_da, ew.div(x, r1)), ew.div(ew.mul(c, x), ew.mul(r1, r1)))
      dans_da1 = ew.add(dans_da, dc_da1)
      keep_going = ew.bitwise_and(enabled,
                                  ew.gt(ew.abs(ew.div(dc_da1, dans_da1)), _c(dc_da1, eps)))
      new, old = new + [dc_da1, dans_da1], old + [dc_da, dans_da]
    else:
      keep_going = ew.bitwise_and(enabled, ew.gt(ew.div(c1, ans1), _c(c1, eps)))
    sel = [ew.select(enabled, n, o) for n, o in zip(new, old)]
    return (keep_going, *sel[:3], x, *sel[3:])

  out = _while(ctx, cond, body, [pred] + [aval] * (4 + n_deriv),
               [enabled, r, c, ans, x, *deriv])
  if not derivative:
    return _inline(ctx, lambda ans, ax, a: [ew.div(ew.mul(ans, ax), a)], [aval] * 3,
                   [out[3], ax, a])[0]

  def finish(ans, dans_da, ax, a, x):
    dlogax_da = ew.sub(ew.log(x), digamma(ew.add(a, _c(a, 1.0))))
    if sample:
      return [ew.div(ew.mul(ew.neg(ew.add(dans_da, ew.mul(ans, dlogax_da))), x), a)]
    return [ew.div(ew.mul(ax, ew.add(ew.mul(ans, dlogax_da), dans_da)), a)]
  return _inline(ctx, finish, [aval] * 5, [out[3], out[6], ax, a, x])[0]


def _igammac_continued_fraction(ctx, ax, x, a, enabled, dtype, derivative: bool = False,
                                sample: bool = False):
  """The continued fraction of Q(a, x), at most 2000 steps. With `derivative`, also d/da
  of the convergents (JAX's IgammaMode.DERIVATIVE), and returns dQ/da; with `sample` too,
  `-(dQ/da) / (ax / x)` (IgammaMode.SAMPLE_DERIVATIVE)."""
  eps = float(dtypes.finfo(dtype).eps)
  aval = ctx.avals_out[0]
  pred = aval.update(dtype=dtypes.bool_)
  scalar = aval.update(shape=())
  n_deriv = 5 if derivative else 0   # dpkm2/da, dqkm2/da, dpkm1/da, dqkm1/da, dans/da

  def init(a, x):
    y = ew.sub(_c(a, 1.0), a)
    z = ew.add(ew.add(x, y), _c(x, 1.0))
    pkm1 = ew.add(x, _c(x, 1.0))
    qkm1 = ew.mul(z, x)
    ans = ew.div(pkm1, qkm1)
    c = full((), 0.0, dtype)
    state = (ans, _full_like(x, 1.0), y, z, c, pkm1, qkm1, _full_like(x, 1.0), x)
    if not derivative:
      return state
    zero = _full_like(x, 0.0)
    dqkm1_da = ew.neg(x)
    dans_da = ew.div(ew.neg(ew.mul(ans, dqkm1_da)), qkm1)
    return (*state, zero, zero, zero, dqkm1_da, dans_da)

  state = _inline(ctx, init, [aval, aval], [a, x])

  def cond(enabled, ans, t, y, z, c, *_):
    return ew.bitwise_and(ew.lt(c, _c(c, 2000.0)), _any(enabled))

  def body(enabled, ans, t, y, z, c, pkm1, qkm1, pkm2, qkm2, *deriv):
    c1 = ew.add(c, _c(c, 1.0))
    y1 = ew.add(y, _c(y, 1.0))
    z1 = ew.add(z, _c(z, 2.0))
    yc = ew.mul(y1, c1)
    pk = ew.sub(ew.mul(pkm1, z1), ew.mul(pkm2, yc))
    qk = ew.sub(ew.mul(qkm1, z1), ew.mul(qkm2, yc))
    qk_nonzero = ew.ne(qk, _c(qk, 0.0))
    r = ew.div(pk, qk)
    t1 = ew.select(qk_nonzero, ew.abs(ew.div(ew.sub(ans, r), r)), _full_like(r, 1.0))
    ans1 = ew.select(qk_nonzero, r, ans)
    rescale = ew.gt(ew.abs(pk), _c(pk, 1.0 / eps))

    def rescaled(*vs):
      return [ew.select(rescale, ew.mul(v, _c(v, eps)), v) for v in vs]

    scaled = rescaled(pk, qk, pkm1, qkm1)   # the new pkm1, qkm1, pkm2, qkm2
    new, old = [ans1, t1, y1, z1], [ans, t, y, z]
    if derivative:
      dpkm2_da, dqkm2_da, dpkm1_da, dqkm1_da, dans_da = deriv
      dpk_da = ew.add(ew.sub(ew.sub(ew.mul(dpkm1_da, z1), pkm1), ew.mul(dpkm2_da, yc)),
                      ew.mul(pkm2, c1))
      dqk_da = ew.add(ew.sub(ew.sub(ew.mul(dqkm1_da, z1), qkm1), ew.mul(dqkm2_da, yc)),
                      ew.mul(qkm2, c1))
      dans_da1 = ew.select(qk_nonzero, ew.div(ew.sub(dpk_da, ew.mul(ans1, dqk_da)), qk),
                           dans_da)
      grad_change = ew.select(qk_nonzero, ew.abs(ew.sub(dans_da1, dans_da)),
                              _full_like(dans_da, 1.0))
      keep_going = ew.bitwise_and(enabled, ew.gt(grad_change, _c(grad_change, eps)))
      dscaled = rescaled(dpkm1_da, dqkm1_da, dpk_da, dqk_da)   # new dpkm2, dqkm2, dpkm1, dqkm1
      tail = [ew.select(enabled, n, o) for n, o in
              zip([*dscaled, dans_da1], [dpkm2_da, dqkm2_da, dpkm1_da, dqkm1_da, dans_da])]
    else:
      keep_going = ew.bitwise_and(enabled, ew.gt(t1, _c(t1, eps)))
      tail = []
    return (keep_going, *[ew.select(enabled, n, o) for n, o in zip(new, old)], c1,
            *[ew.select(enabled, n, o) for n, o in zip(scaled, (pkm1, qkm1, pkm2, qkm2))],
            *tail)

  out = _while(ctx, cond, body,
               [pred, aval, aval, aval, aval, scalar, aval, aval, aval, aval] +
               [aval] * n_deriv, [enabled, *state])
  if not derivative:
    return _inline(ctx, lambda ans, ax: [ew.mul(ans, ax)], [aval, aval], [out[1], ax])[0]

  def finish(ans, dans_da, ax, a, x):
    dlogax_da = ew.sub(ew.log(x), digamma(a))
    if sample:
      return [ew.neg(ew.mul(ew.add(dans_da, ew.mul(ans, dlogax_da)), x))]
    return [ew.mul(ax, ew.add(ew.mul(ans, dlogax_da), dans_da))]
  return _inline(ctx, finish, [aval] * 5, [out[1], out[-1], ax, a, x])[0]


def _igamma_prelude(a, x, *, dtype, complement: bool):
  """The masks and `ax = x^a e^-x / Γ(a)` of JAX's igamma_impl / igammac_impl."""
  is_nan = ew.bitwise_or(ew.ne(a, a), ew.ne(x, x))
  x_is_inf = ew.eq(x, _c(x, np.inf))
  a_is_zero = ew.eq(a, _c(a, 0.0))
  x_is_zero = ew.eq(x, _c(x, 0.0))
  domain_error = ew.bitwise_or(ew.bitwise_or(ew.lt(x, _c(x, 0.0)), ew.lt(a, _c(a, 0.0))),
                               ew.bitwise_or(ew.bitwise_and(a_is_zero, x_is_zero), is_nan))
  log_ax = ew.sub(ew.sub(ew.mul(a, ew.log(x)), x), lgamma(a))
  underflow = ew.lt(log_ax, _c(log_ax, -float(np.log(dtypes.finfo(dtype).max))))
  ax = ew.exp(log_ax)
  if complement:   # igammac: the series where x < 1 or x < a
    use_series = ew.bitwise_or(ew.lt(x, _c(x, 1.0)), ew.lt(x, a))
    disabled = ew.bitwise_or(ew.bitwise_or(domain_error, underflow),
                             ew.bitwise_or(x_is_inf, a_is_zero))
  else:            # igamma: the continued fraction where x >= 1 and x > a
    use_series = ew.bitwise_not(ew.bitwise_and(ew.ge(x, _c(x, 1.0)), ew.gt(x, a)))
    disabled = ew.bitwise_or(ew.bitwise_or(x_is_zero, domain_error),
                             ew.bitwise_or(underflow, x_is_inf))
  enabled = ew.bitwise_not(disabled)
  return (ax, ew.bitwise_and(enabled, use_series),
          ew.bitwise_and(enabled, ew.bitwise_not(use_series)), use_series, x_is_zero,
          x_is_inf, a_is_zero, domain_error)


def _igamma_impl(ctx, a, x, *, dtype, complement: bool):
  aval = ctx.avals_out[0]
  pred = aval.update(dtype=dtypes.bool_)
  (ax, series_on, cf_on, use_series, x_is_zero, x_is_inf, a_is_zero,
   domain_error) = _inline(ctx, lambda a, x: _igamma_prelude(a, x, dtype=dtype,
                                                             complement=complement),
                           [aval, aval], [a, x])
  series = _igamma_series(ctx, ax, x, a, series_on, dtype)
  cf = _igammac_continued_fraction(ctx, ax, x, a, cf_on, dtype)

  def igamma_epilogue(use_series, series, cf, x_is_zero, x_is_inf, a_is_zero, domain_error):
    out = ew.select(use_series, series, ew.sub(_c(cf, 1.0), cf))
    out = ew.select(x_is_zero, _full_like(out, 0.0), out)
    out = ew.select(x_is_inf, _full_like(out, 1.0), out)
    return (ew.select(domain_error, _full_like(out, np.nan), out),)

  def igammac_epilogue(use_series, series, cf, x_is_zero, x_is_inf, a_is_zero, domain_error):
    out = ew.select(use_series, ew.sub(_c(series, 1.0), series), cf)
    out = ew.select(ew.bitwise_or(x_is_inf, a_is_zero), _full_like(out, 0.0), out)
    return (ew.select(domain_error, _full_like(out, np.nan), out),)

  epilogue = igammac_epilogue if complement else igamma_epilogue
  return _inline(ctx, epilogue, [pred, aval, aval, pred, pred, pred, pred],
                 [use_series, series, cf, x_is_zero, x_is_inf, a_is_zero, domain_error])[0]


igamma_p = Primitive("igamma")
igamma_p.def_abstract_eval(naryop_abstract_eval("igamma", floating))
lowering.register_lowering(igamma_p, _upcast_lowering(
    lambda ctx, a, x, *, dtype: _igamma_impl(ctx, a, x, dtype=dtype, complement=False)))
igammac_p = Primitive("igammac")
igammac_p.def_abstract_eval(naryop_abstract_eval("igammac", floating))
lowering.register_lowering(igammac_p, _upcast_lowering(
    lambda ctx, a, x, *, dtype: _igamma_impl(ctx, a, x, dtype=dtype, complement=True)))
ew.defbroadcasting(igamma_p)
ew.defbroadcasting(igammac_p)


def _igamma_gradx(a, x):
  """dP(a, x)/dx = x^(a-1) e^-x / Γ(a)."""
  return ew.exp(ew.sub(ew.sub(ew.mul(ew.sub(a, const(a, 1)), ew.log(x)), x), lgamma(a)))


# dP/da is the primitive igamma_grad_a (below); Q = 1 - P.
ad.defjvp(igamma_p, lambda t, a, x: ew.mul(t, igamma_grad_a(a, x)),
          lambda t, a, x: ew.mul(t, _igamma_gradx(a, x)))
ad.defjvp(igammac_p, lambda t, a, x: ew.neg(ew.mul(t, igamma_grad_a(a, x))),
          lambda t, a, x: ew.neg(ew.mul(t, _igamma_gradx(a, x))))


# igamma_grad_a(a, x) = dP(a, x)/da: the series and continued fraction of igamma carrying
# the derivatives of their terms (JAX's igamma_grad_a_impl, IgammaMode.DERIVATIVE). NaN for
# x < 0, a <= 0 or a NaN; 0 at x = 0.


def _igamma_grad_a_prelude(a, x, *, dtype):
  is_nan = ew.bitwise_or(ew.ne(a, a), ew.ne(x, x))
  x_is_zero = ew.eq(x, _c(x, 0.0))
  nan_out = ew.bitwise_or(ew.bitwise_or(ew.lt(x, _c(x, 0.0)), ew.le(a, _c(a, 0.0))), is_nan)
  use_cf = ew.bitwise_and(ew.gt(x, _c(x, 1.0)), ew.gt(x, a))
  log_ax = ew.sub(ew.sub(ew.mul(a, ew.log(x)), x), lgamma(a))
  underflow = ew.lt(log_ax, _c(log_ax, -float(np.log(dtypes.finfo(dtype).max))))
  enabled = ew.bitwise_not(ew.bitwise_or(ew.bitwise_or(x_is_zero, nan_out), underflow))
  return (ew.exp(log_ax), ew.bitwise_and(enabled, ew.bitwise_not(use_cf)),
          ew.bitwise_and(enabled, use_cf), use_cf, x_is_zero, nan_out)


def _igamma_grad_a_impl(ctx, a, x, *, dtype):
  aval = ctx.avals_out[0]
  pred = aval.update(dtype=dtypes.bool_)
  ax, series_on, cf_on, use_cf, x_is_zero, nan_out = _inline(
      ctx, lambda a, x: _igamma_grad_a_prelude(a, x, dtype=dtype), [aval, aval], [a, x])
  series = _igamma_series(ctx, ax, x, a, series_on, dtype, derivative=True)
  cf = _igammac_continued_fraction(ctx, ax, x, a, cf_on, dtype, derivative=True)

  def epilogue(use_cf, series, cf, x_is_zero, nan_out):
    out = ew.select(use_cf, ew.neg(cf), series)   # dP/da = -dQ/da
    out = ew.select(x_is_zero, _full_like(out, 0.0), out)
    return (ew.select(nan_out, _full_like(out, np.nan), out),)
  return _inline(ctx, epilogue, [pred, aval, aval, pred, pred],
                 [use_cf, series, cf, x_is_zero, nan_out])[0]


def _igamma_grad_a_jvp_a(t, a, x):
  raise ValueError("igamma_grad_a has no derivative with respect to a (nor in JAX): the "
                   "second derivative of igamma/igammac in a is not implemented. "
                   "Differentiate twice with respect to x only, or stop_gradient a.")


igamma_grad_a_p = Primitive("igamma_grad_a")
igamma_grad_a_p.def_abstract_eval(naryop_abstract_eval("igamma_grad_a", floating))
lowering.register_lowering(igamma_grad_a_p, _upcast_lowering(_igamma_grad_a_impl))
ew.defbroadcasting(igamma_grad_a_p)
# d/dx dP/da = d/da dP/dx = dP/dx (log x - digamma(a)).
ad.defjvp(igamma_grad_a_p, _igamma_grad_a_jvp_a,
          lambda t, a, x: ew.mul(t, ew.mul(_igamma_gradx(a, x),
                                           ew.sub(ew.log(x), digamma(a)))))


def igamma(a: Any, x: Any):
  """Elementwise regularized lower incomplete gamma function
  `P(a, x) = γ(a, x) / Γ(a)` (`scipy.special.gammainc`).

  Args:
    a: array `T[*s]` (or rank 0), T a floating dtype; the shape parameter, `a >= 0`.
    x: array `T[*s]` (or rank 0), `x >= 0`. Python scalars are not promoted
      (float32, float64 under x64).

  Returns:
    `T[*s]` in `[0, 1]`: 0 at `x = 0` (for `a > 0`), 1 at `x = inf`; NaN where `x < 0`,
    `a < 0`, `a = x = 0`, or either is NaN.

  Raises:
    TypeError: if T is not floating, or `a` and `x` differ in dtype or shape.

  Algorithm: Cephes' power series (x < 1 or x <= a) and continued fraction (elsewhere),
  iterated to the dtype's epsilon in a `stablehlo.while`, as JAX (float16 and bfloat16 are
  computed in float32).

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> lax.igamma(np.float32(1.0), np.array([0.0, np.inf, -1.0], np.float32))
    Array([ 0.,  1., nan], dtype=float32)
    >>> float(lax.igamma(np.float32(1.0), np.float32(1.0)))  # 1 - exp(-1)
    0.63212...
  """
  return igamma_p.bind(a, x)


def igammac(a: Any, x: Any):
  """Elementwise regularized upper incomplete gamma function
  `Q(a, x) = 1 - P(a, x) = Γ(a, x) / Γ(a)` (`scipy.special.gammaincc`).

  Args:
    a: array `T[*s]` (or rank 0), T a floating dtype; the shape parameter, `a >= 0`.
    x: array `T[*s]` (or rank 0), `x >= 0`. Python scalars are not promoted
      (float32, float64 under x64).

  Returns:
    `T[*s]` in `[0, 1]`: 0 at `x = inf` or `a = 0`; NaN where `x < 0`, `a < 0`,
    `a = x = 0`, or either is NaN.

  Raises:
    TypeError: if T is not floating, or `a` and `x` differ in dtype or shape.

  Algorithm: as `igamma`, computing Q directly where the continued fraction applies (so
  small tails keep their relative accuracy).

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> float(lax.igammac(np.float32(1.0), np.float32(20.0)))  # exp(-20)
    2.061...e-09
  """
  return igammac_p.bind(a, x)


def igamma_grad_a(a: Any, x: Any):
  """Elementwise derivative of the regularized lower incomplete gamma function with respect
  to its shape parameter, `dP(a, x)/da` (JAX's `lax.igamma_grad_a`; igamma's JVP in `a`).

  Args:
    a: array `T[*s]` (or rank 0), T a floating dtype, `a > 0`.
    x: array `T[*s]` (or rank 0), `x >= 0`. Python scalars are not promoted
      (float32, float64 under x64).

  Returns:
    `T[*s]`, `<= 0`: 0 at `x = 0`; NaN where `x < 0`, `a <= 0`, or either is NaN.

  Raises:
    TypeError: if T is not floating, or `a` and `x` differ in dtype or shape.

  Algorithm: igamma's Cephes series and continued fraction, carrying the derivatives of
  their terms in `a` and iterating until those converge (as JAX and XLA's IgammaGradA).

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> float(lax.igamma_grad_a(np.float32(1.0), np.float32(1.0)))  # FD of gammainc: -0.43173
    -0.4317...
  """
  return igamma_grad_a_p.bind(a, x)


def zeta(x: Any, q: Any):
  """Elementwise Hurwitz zeta function `ζ(x, q) = Σ_k (k + q)^-x` (CHLO's zeta, as JAX).

  Args:
    x, q: arrays `T[*s]` of one floating dtype (or rank 0).

  Returns:
    `T[*s]`.

  Raises:
    TypeError: for non-floating or mismatched dtypes.
  """
  return zeta_p.bind(x, q)


# ---------------------------------------------------------------------------
# regularized_incomplete_beta(a, b, x) = I_x(a, b) (scipy.special.betainc; JAX's
# `lax.betainc`). The continued fraction of DLMF 8.17.22,
#   I_x(a, b) = x^a (1-x)^b / (a B(a, b)) * 1 / (1 + d_1 / (1 + d_2 / (1 + ...))),
#   d_{2m+1} = -(a+m)(a+b+m) x / ((a+2m)(a+2m+1)),  d_{2m} = m(b-m) x / ((a+2m-1)(a+2m)),
# evaluated by the modified Lentz algorithm (Press et al., Numerical Recipes, `betacf`),
# where it converges fast, x < (a+1)/(a+b+2); elsewhere through I_x(a, b) = 1 - I_{1-x}(b, a)
# (DLMF 8.17.4). One `stablehlo.while` runs until every element has converged or 100 (float32)
# / 300 (float64) pairs of terms are spent (JAX's 200 / 600 partial fractions).


def _betainc_prelude(a, x_, b, *, dtype):
  """Special cases (JAX's and SciPy's), the symmetry swap and safe loop inputs."""
  x = x_
  a_is_zero = ew.bitwise_or(ew.eq(a, _c(a, 0.0)), ew.eq(b, _c(b, np.inf)))
  b_is_zero = ew.bitwise_or(ew.eq(b, _c(b, 0.0)), ew.eq(a, _c(a, np.inf)))
  x_is_zero, x_is_one = ew.eq(x, _c(x, 0.0)), ew.eq(x, _c(x, 1.0))
  is_nan = ew.bitwise_or(ew.bitwise_or(ew.ne(a, a), ew.ne(b, b)), ew.ne(x, x))
  out_zero = ew.bitwise_or(ew.bitwise_and(b_is_zero, ew.bitwise_not(x_is_one)),
                           ew.bitwise_and(a_is_zero, x_is_zero))
  out_one = ew.bitwise_or(ew.bitwise_and(a_is_zero, ew.bitwise_not(x_is_zero)),
                          ew.bitwise_and(b_is_zero, x_is_one))
  out_nan = ew.bitwise_or(ew.bitwise_or(ew.lt(a, _c(a, 0.0)), ew.lt(b, _c(b, 0.0))),
                          ew.bitwise_or(ew.lt(x, _c(x, 0.0)), ew.gt(x, _c(x, 1.0))))
  out_nan = ew.bitwise_or(out_nan, ew.bitwise_or(ew.bitwise_and(a_is_zero, b_is_zero), is_nan))
  special = ew.bitwise_or(ew.bitwise_or(out_zero, out_one), out_nan)
  # Safe inputs where the answer is known, so that they cannot stall the loop.
  a = ew.select(special, _full_like(a, 1.0), a)
  b = ew.select(special, _full_like(b, 1.0), b)
  x = ew.select(special, _full_like(x, 0.5), x)
  direct = ew.lt(x, ew.div(ew.add(a, _c(a, 1.0)), ew.add(ew.add(a, b), _c(a, 2.0))))
  aa = ew.select(direct, a, b)
  bb = ew.select(direct, b, a)
  xx = ew.select(direct, x, ew.sub(_c(x, 1.0), x))
  return aa, bb, xx, direct, out_zero, out_one, out_nan


def _betainc_impl(ctx, a, b, x, *, dtype):
  aval = ctx.avals_out[0]
  pred = aval.update(dtype=dtypes.bool_)
  scalar = aval.update(shape=())
  finfo = dtypes.finfo(dtype)
  eps, tiny = float(finfo.eps), float(finfo.tiny)
  max_steps = 100.0 if dtype != dtypes.float64 else 300.0
  aa, bb, xx, direct, out_zero, out_one, out_nan = _inline(
      ctx, lambda a, b, x: _betainc_prelude(a, x, b, dtype=dtype), [aval] * 3, [a, b, x])

  def lentz_step(c, d, h, num):
    d = ew.add(ew.mul(num, d), _c(num, 1.0))
    d = ew.reciprocal(ew.select(ew.lt(ew.abs(d), _c(d, tiny)), _full_like(d, tiny), d))
    c = ew.add(ew.div(num, c), _c(num, 1.0))
    c = ew.select(ew.lt(ew.abs(c), _c(c, tiny)), _full_like(c, tiny), c)
    delta = ew.mul(c, d)
    return c, d, ew.mul(h, delta), delta

  def init(a, b, x):
    c = _full_like(a, 1.0)
    d = ew.sub(_c(a, 1.0), ew.div(ew.mul(ew.add(a, b), x), ew.add(a, _c(a, 1.0))))
    d = ew.reciprocal(ew.select(ew.lt(ew.abs(d), _c(d, tiny)), _full_like(d, tiny), d))
    return (full((), 0.0, dtype), ew.eq(a, a), c, d, d)

  m, unconverged, c, d, h = _inline(ctx, init, [aval] * 3, [aa, bb, xx])

  def cond(m, unconverged, *_):
    return ew.bitwise_and(ew.lt(m, _c(m, max_steps)), _any(unconverged))

  def body(m, unconverged, c, d, h, a, b, x):
    m1 = ew.add(m, _c(m, 1.0))
    two_m = ew.mul(m1, _c(m1, 2.0))
    even = ew.div(ew.mul(ew.mul(m1, ew.sub(b, m1)), x),
                  ew.mul(ew.add(ew.sub(a, _c(a, 1.0)), two_m), ew.add(a, two_m)))
    c, d, h, _ = lentz_step(c, d, h, even)
    odd = ew.neg(ew.div(ew.mul(ew.mul(ew.add(a, m1), ew.add(ew.add(a, b), m1)), x),
                        ew.mul(ew.add(a, two_m), ew.add(ew.add(a, two_m), _c(a, 1.0)))))
    c, d, h, delta = lentz_step(c, d, h, odd)
    converging = ew.ge(ew.abs(ew.sub(delta, _c(delta, 1.0))), _c(delta, eps))
    return (m1, converging, c, d, h, a, b, x)

  out = _while(ctx, cond, body, [scalar, pred] + [aval] * 6,
               [m, unconverged, c, d, h, aa, bb, xx])

  def finish(cf, a, b, x, direct, out_zero, out_one, out_nan):
    # x^a (1-x)^b / (a B(a, b)); for a -> 0, a Γ(a) = Γ(a+1) -> 1 avoids 0 * inf.
    lbeta_no_a = ew.sub(lgamma(b), lgamma(ew.add(a, b)))
    log_tail = ew.add(ew.mul(a, ew.log(x)), ew.mul(b, ew.log1p(ew.neg(x))))
    factor = ew.select(
        ew.lt(a, _c(a, 2.0 * tiny)),
        ew.exp(ew.sub(ew.mul(b, ew.log1p(ew.neg(x))), lbeta_no_a)),
        ew.div(ew.exp(ew.sub(ew.sub(log_tail, lgamma(a)), lbeta_no_a)), a))
    res = ew.mul(cf, factor)
    res = ew.select(direct, res, ew.sub(_c(res, 1.0), res))
    res = ew.select(out_zero, _full_like(res, 0.0), res)
    res = ew.select(out_one, _full_like(res, 1.0), res)
    return (ew.select(out_nan, _full_like(res, np.nan), res),)

  return _inline(ctx, finish, [aval] * 4 + [pred] * 4,
                 [out[4], aa, bb, xx, direct, out_zero, out_one, out_nan])[0]


def _betainc_jvp_ab(t, a, b, x):
  raise ValueError("Betainc gradient with respect to a and b not supported. (As in JAX: "
                   "only d/dx = x^(a-1) (1-x)^(b-1) / B(a, b) is defined; pass a and b as "
                   "constants or through lax.stop_gradient.)")


def _betainc_gradx(t, a, b, x):
  """dI_x(a, b)/dx = x^(a-1) (1-x)^(b-1) / B(a, b)."""
  one = const(a, 1)
  log_beta = ew.sub(ew.add(lgamma(a), lgamma(b)), lgamma(ew.add(a, b)))
  return ew.mul(t, ew.exp(ew.sub(ew.add(ew.mul(ew.sub(b, one), ew.log1p(ew.neg(x))),
                                        ew.mul(ew.sub(a, one), ew.log(x))), log_beta)))


regularized_incomplete_beta_p = Primitive("regularized_incomplete_beta")
regularized_incomplete_beta_p.def_abstract_eval(
    naryop_abstract_eval("regularized_incomplete_beta", floating))
lowering.register_lowering(regularized_incomplete_beta_p, _upcast_lowering(_betainc_impl))
ew.defbroadcasting(regularized_incomplete_beta_p)
ad.defjvp(regularized_incomplete_beta_p, _betainc_jvp_ab, _betainc_jvp_ab, _betainc_gradx)


def betainc(a: Any, b: Any, x: Any):
  """Elementwise regularized incomplete beta function
  `I_x(a, b) = B(x; a, b) / B(a, b)` (`scipy.special.betainc`, JAX's `lax.betainc`).

  Args:
    a, b: arrays `T[*s]` (or rank 0), T a floating dtype; the shape parameters, `>= 0`.
    x: array `T[*s]` (or rank 0), `0 <= x <= 1`. Python scalars are not promoted
      (float32, float64 under x64).

  Returns:
    `T[*s]` in `[0, 1]`: 0 at `x = 0` and 1 at `x = 1`; NaN where `a < 0`, `b < 0`,
    `x` is outside `[0, 1]`, `a = b = 0`, or an operand is NaN. Differentiable with respect
    to `x` only (as in JAX; a tangent for `a` or `b` raises ValueError).

  Raises:
    TypeError: if T is not floating, or the operands differ in dtype or shape.

  Algorithm: the continued fraction of DLMF 8.17.22 by the modified Lentz method
  (Numerical Recipes' `betacf`), with the symmetry `I_x(a, b) = 1 - I_{1-x}(b, a)` where
  `x > (a+1)/(a+b+2)` (float16 and bfloat16 are computed in float32).

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> float(lax.betainc(np.float32(2.0), np.float32(3.0), np.float32(0.4)))  # 0.5248
    0.5248...
  """
  return regularized_incomplete_beta_p.bind(a, b, x)


def random_gamma_grad(a: Any, x: Any):
  """The derivative `dx/da` of a sample `x ~ Gamma(a, 1)` at fixed quantile (JAX's
  `lax.random_gamma_grad`; the reparameterization gradient of `random.gamma`).

  Args:
    a: array `T[*s]` (or rank 0), T a floating dtype; the shape parameter, `> 0`.
    x: array `T[*s]` (or rank 0) of the same dtype; the sample, `>= 0`. Shapes broadcast as
      lax's do (rank 0 or size-1 dimensions).

  Returns:
    `T[*s]`: `-(dP(a, x)/da) / (dP(a, x)/dx)`, P the regularized lower incomplete gamma
    function; 0 at `x = 0`; NaN where `x < 0`, `a <= 0` or an operand is NaN. Computed in
    float32 for float16 and bfloat16. Composed of lax ops (no primitive of its own, as in
    JAX: two `while` loops), so it batches.

  Raises:
    TypeError: if T is not floating, or the dtypes or shapes do not match.
    AttributeError: for an operand without a `shape` (a Python scalar), as JAX's.

  Algorithm: implicit reparameterization (Figurnov, Mohamed and Mnih, "Implicit
  Reparameterization Gradients", NeurIPS 2018): differentiating `P(a, x(a)) = u` gives
  `dx/da = -P_a / P_x`. P_a is summed as `igamma_grad_a` sums it (Cephes' series where
  `x <= 1` or `x <= a`, the continued fraction of Q elsewhere, with the derivatives of their
  terms), and the density `P_x = x^(a-1) e^-x / Gamma(a)` is divided out of the sum
  analytically (JAX's IgammaMode.SAMPLE_DERIVATIVE), so the result stays finite where the
  density underflows.

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> float(lax.random_gamma_grad(np.float32(1.5), np.float32(0.7)))   # JAX: 0.74021
    0.7402...
  """
  for v in (a, x):
    if not hasattr(v, "shape"):   # NB: as JAX's, whose broadcasting reads `.shape` first
      raise AttributeError(f"'{type(v).__name__}' object has no attribute 'shape'")
  aval = naryop_abstract_eval("random_gamma_grad", floating)(get_aval(a), get_aval(x))
  dt, shape = aval.dtype, aval.shape
  wide = _compute_dtype(dt)

  def prep(v):   # broadcast (lax's rule: rank 0 or size-1 dimensions) and widen
    v_shape = get_aval(v).shape
    if v_shape != shape:
      v = broadcast_in_dim(v, shape, () if not v_shape else tuple(range(len(shape))))
    return ew.convert_element_type(v, wide) if wide != dt else v
  a, x = prep(a), prep(x)
  grad = _sample_grad_staged(a, x)
  return ew.convert_element_type(grad, dt) if wide != dt else grad


# The staged form of `random_gamma_grad`: the operations of igamma_grad_a's series and
# continued fraction in SAMPLE_DERIVATIVE mode, in JAX's order (so that programs print as
# JAX's: constants by `full_like`, the rescale bound as `integer_pow[y=-1] eps`, every
# loop value selected by `enabled`). The lowering rules above keep their own layout.


def _f_like(x, value):
  return full_like(x, value)


def _any_staged(pred):
  return reduce_or(pred, tuple(range(len(get_aval(pred).shape))))


def _sample_grad_staged(a, x):
  """`-(dP/da) / (dP/dx)` for `a, x: T[*s]` (T float32 or float64)."""
  dtype = get_aval(a).dtype
  is_nan = ew.bitwise_or(ew.ne(a, a), ew.ne(x, x))
  x_is_zero = ew.eq(x, _f_like(x, 0))
  domain_error = ew.bitwise_or(ew.lt(x, _f_like(x, 0)), ew.le(a, _f_like(a, 0)))
  use_cf = ew.bitwise_and(ew.gt(x, _f_like(x, 1)), ew.gt(x, a))
  ax = ew.sub(ew.sub(ew.mul(a, ew.log(x)), x), lgamma(a))
  underflow = ew.lt(ax, ew.neg(ew.log(dtypes.finfo(dtype).max)))
  ax = ew.exp(ax)   # NB: unused in this mode, but staged, as JAX's
  enabled = ew.bitwise_not(ew.bitwise_or(ew.bitwise_or(ew.bitwise_or(
      x_is_zero, domain_error), underflow), is_nan))
  cf = ew.neg(_cf_sample_grad(x, a, ew.bitwise_and(enabled, use_cf), dtype))
  series = _series_sample_grad(x, a, ew.bitwise_and(enabled, ew.bitwise_not(use_cf)), dtype)
  out = ew.select(use_cf, cf, series)
  out = ew.select(x_is_zero, _f_like(out, 0), out)
  return ew.select(ew.bitwise_or(domain_error, is_nan), _f_like(a, float("nan")), out)


def _series_sample_grad(x, a, enabled, dtype):
  """The power series of P(a, x) with the derivatives of its terms; returns
  `-(dP/da) / (dP/dx)`."""
  eps = dtypes.finfo(dtype).eps

  def body(vals):
    enabled, r, c, ans, x, dc_da, dans_da = vals
    r = ew.add(r, _c(r, 1.))
    dc_da = ew.sub(ew.mul(dc_da, ew.div(x, r)), ew.div(ew.mul(c, x), ew.mul(r, r)))
    dans_da = ew.add(dans_da, dc_da)
    c = ew.mul(c, ew.div(x, r))
    ans = ew.add(ans, c)
    go_on = ew.bitwise_and(enabled, ew.gt(ew.abs(ew.div(dc_da, dans_da)), eps))
    new = (r, c, ans, x, dc_da, dans_da)
    return (go_on, *(ew.select(enabled, n, o) for n, o in zip(new, vals[1:])))

  init = (enabled, a, _f_like(a, 1), _f_like(a, 1), x, _f_like(a, 0), _f_like(a, 0))
  vals = staged_while_loop(lambda v: _any_staged(v[0]), body, init)
  ans, dans_da = vals[3], vals[6]
  dlogax_da = ew.sub(ew.log(x), digamma(ew.add(a, _c(a, 1))))
  return ew.div(ew.mul(ew.neg(ew.add(dans_da, ew.mul(ans, dlogax_da))), x), a)


def _cf_sample_grad(x, a, enabled, dtype):
  """The continued fraction of Q(a, x) with the derivatives of its convergents (at most
  2000 steps); returns `(dQ/da) / (dP/dx)`."""
  eps = dtypes.finfo(dtype).eps

  def cond(vals):
    return ew.bitwise_and(ew.lt(vals[5], _c(vals[5], 2000)), _any_staged(vals[0]))

  def body(vals):
    (enabled, ans, t, y, z, c, pkm1, qkm1, pkm2, qkm2,
     dpkm2_da, dqkm2_da, dpkm1_da, dqkm1_da, dans_da) = vals
    c = ew.add(c, _c(c, 1))
    y = ew.add(y, _c(y, 1))
    z = ew.add(z, _c(z, 2))
    yc = ew.mul(y, c)
    pk = ew.sub(ew.mul(pkm1, z), ew.mul(pkm2, yc))
    qk = ew.sub(ew.mul(qkm1, z), ew.mul(qkm2, yc))
    qk_is_nonzero = ew.ne(qk, _c(qk, 0))
    r = ew.div(pk, qk)
    t = ew.select(qk_is_nonzero, ew.abs(ew.div(ew.sub(ans, r), r)), _f_like(r, 1))
    ans = ew.select(qk_is_nonzero, r, ans)
    dpk_da = ew.add(ew.sub(ew.sub(ew.mul(dpkm1_da, z), pkm1), ew.mul(dpkm2_da, yc)),
                    ew.mul(pkm2, c))
    dqk_da = ew.add(ew.sub(ew.sub(ew.mul(dqkm1_da, z), qkm1), ew.mul(dqkm2_da, yc)),
                    ew.mul(qkm2, c))
    dans_da_new = ew.select(qk_is_nonzero, ew.div(ew.sub(dpk_da, ew.mul(ans, dqk_da)), qk),
                            dans_da)
    grad_change = ew.select(qk_is_nonzero, ew.abs(ew.sub(dans_da_new, dans_da)),
                            _f_like(dans_da, 1))
    pkm2, pkm1, qkm2, qkm1 = pkm1, pk, qkm1, qk
    dpkm2_da, dqkm2_da, dpkm1_da, dqkm1_da = dpkm1_da, dqkm1_da, dpk_da, dqk_da
    rescale = ew.gt(ew.abs(pk), ew.reciprocal(np.asarray(eps, dtype)[()]))
    scale = lambda v: ew.select(rescale, ew.mul(v, np.asarray(eps, dtype)[()]), v)
    pkm2, pkm1, qkm2, qkm1 = scale(pkm2), scale(pkm1), scale(qkm2), scale(qkm1)
    dpkm2_da, dqkm2_da = scale(dpkm2_da), scale(dqkm2_da)
    dpkm1_da, dqkm1_da = scale(dpkm1_da), scale(dqkm1_da)
    go_on = ew.bitwise_and(enabled, ew.gt(grad_change, np.asarray(eps, dtype)[()]))
    new = (ans, t, y, z)
    rest = (pkm1, qkm1, pkm2, qkm2, dpkm2_da, dqkm2_da, dpkm1_da, dqkm1_da, dans_da_new)
    return (go_on, *(ew.select(enabled, n, o) for n, o in zip(new, vals[1:5])), c,
            *(ew.select(enabled, n, o) for n, o in zip(rest, vals[6:])))

  y = ew.sub(_c(a, 1), a)
  z = ew.add(ew.add(x, y), _c(x, 1))
  c = np.asarray(0, dtype)[()]
  pkm2 = _f_like(x, 1)
  qkm2 = x
  pkm1 = ew.add(x, _c(x, 1))
  qkm1 = ew.mul(z, x)
  ans = ew.div(pkm1, qkm1)
  t = _f_like(x, 1)
  dpkm2_da = _f_like(x, 0)
  dqkm2_da = _f_like(x, 0)
  dpkm1_da = _f_like(x, 0)
  dqkm1_da = ew.neg(x)
  dans_da = ew.div(ew.sub(dpkm1_da, ew.mul(ans, dqkm1_da)), qkm1)
  init = (enabled, ans, t, y, z, c, pkm1, qkm1, pkm2, qkm2,
          dpkm2_da, dqkm2_da, dpkm1_da, dqkm1_da, dans_da)
  vals = staged_while_loop(cond, body, init)
  ans, dans_da = vals[1], vals[14]
  dlogax_da = ew.sub(ew.log(x), digamma(a))
  return ew.neg(ew.mul(ew.add(dans_da, ew.mul(ans, dlogax_da)), x))
