"""`stagecraft.scipy.special`: SciPy's special functions with the semantics of JAX's
`jax.scipy.special`, composed from `stagecraft.lax` and `stagecraft.numpy` (no rules of
their own; custom derivatives through `stagecraft.custom_jvp`).

Unless a docstring says otherwise, a function promotes its arguments as JAX's
`promote_args_inexact` does (integers and bools become the default float dtype: float32, or
float64 with x64 on; Python scalars stay weakly typed), broadcasts them against each other,
and returns an array of that shape and dtype. Lists and tuples are rejected with TypeError,
as in JAX. Values agree with `scipy.special` to the precision of the dtype unless a docstring
names a difference (for example `digamma` gives NaN at 0, as JAX).
"""
from __future__ import annotations

import functools
import math
import operator
from fractions import Fraction
from typing import Any

import numpy as np

from stagecraft import core, dtypes, lax
from stagecraft import numpy as jnp
from stagecraft.custom_derivatives import custom_jvp
from stagecraft.numpy.reductions import masked
from stagecraft.numpy.ufuncs import promote_shapes
from stagecraft.numpy.util import check_arraylike, promote_dtypes_inexact
from stagecraft.config import debug_infs
from stagecraft.pjit import jit
from stagecraft.runtime import dispatch

__all__ = [
    "bernoulli", "bessel_jn", "beta", "betainc", "betaln", "boxcox", "boxcox1p", "comb",
    "dawsn", "digamma", "entr", "erf", "erfc", "erfcx", "erfinv", "exp1", "expi", "expit",
    "expn", "factorial", "fresnel", "gamma", "gammainc", "gammaincc", "gammaln", "gammasgn",
    "hyp1f1", "hyp2f1", "i0", "i0e", "i1", "i1e", "kl_div", "log_ndtr", "log_softmax",
    "loggamma", "logit", "logsumexp", "multigammaln", "ndtr", "ndtri", "owens_t", "poch",
    "polygamma", "rel_entr", "sici", "softmax", "spence", "sph_harm_y", "wofz", "xlog1py",
    "xlogy", "zeta"]

ArrayLike = Any

# ---------------------------------------------------------------------------
# Argument handling


def _promote_inexact(name: str, *args: Any) -> list[Any]:
  """JAX's `promote_args_inexact`: checks array-likes, promotes to one inexact dtype (weak
  where every argument is weak) and broadcasts to one shape."""
  check_arraylike(name, *args)
  args = [jnp.asarray(a) for a in promote_dtypes_inexact(*args)]
  if len(args) > 1:
    shape = lax.broadcast_shapes(*(a.shape for a in args))
    args = [a if a.shape == shape else jnp.broadcast_to(a, shape) for a in args]
  return args


def _promote_inexact_ranks(name: str, *args: Any) -> list[Any]:
  """`_promote_inexact` that broadcasts no further than to a common rank (JAX's
  `promote_args_inexact`: equal-rank operands keep their size-1 dimensions, which the lax
  primitives broadcast, so `x * log(y)` takes the log of `y` before it is broadcast)."""
  check_arraylike(name, *args)
  return promote_shapes(name, *[jnp.asarray(a) for a in promote_dtypes_inexact(*args)])


def _reject_complex(name: str, x: Any, what: str = "inputs") -> None:
  if dtypes.is_complex(x.dtype):
    raise ValueError(f"{name} does not support complex-valued {what}.")


def _concrete_int(x: Any, what: str) -> int:
  """`x` as a Python int; `what` names the argument in the ConcretizationTypeError."""
  if isinstance(x, core.Tracer):
    raise core.ConcretizationTypeError(
        f"Abstract tracer value encountered where concrete value is expected: {x!r}. "
        f"{what} must be a concrete (static) integer, not a traced value.")
  return operator.index(x) if not isinstance(x, (np.ndarray,)) else int(x)


def _c(x: Any, v: Any) -> Any:
  """`v` as an array of `x`'s dtype (for use in arithmetic that must not promote)."""
  return jnp.asarray(v, dtype=x.dtype)


def _full_like(x: Any, v: Any) -> Any:
  """`v` in x's shape and dtype, weakly typed when x is (JAX's `full_like`).

  NB: stagecraft.numpy's full_like/zeros_like/ones_like drop the weak type (JAX keeps it)."""
  out = jnp.full(jnp.shape(x), v, dtype=x.dtype)
  return lax.convert_element_type(out, out.dtype, weak_type=bool(getattr(x, "weak_type", False)))


def _polyval(coeffs, x):
  """Horner's rule with Python-float coefficients (highest degree first), in x's dtype.
  The result is strongly typed (JAX's `polyval` of typed coefficient arrays)."""
  acc = jnp.full(jnp.shape(x), coeffs[0], dtype=x.dtype)
  for c in coeffs[1:]:
    acc = acc * x + c
  return acc


def _float_only(name: str, x: Any, argname: str = "x") -> Any:
  """JAX's ndtr/ndtri/log_ndtr/spence check: float32 or float64 only."""
  x = jnp.asarray(x)
  if x.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
    raise TypeError(f"{argname}.dtype={x.dtype} is not supported, see docstring for "
                    f"supported types.")
  return x


# ---------------------------------------------------------------------------
# Gamma and beta functions


def gammaln(x: ArrayLike):
  """`log|Γ(x)|`, elementwise (`scipy.special.gammaln`).

  Args:
    x: array-like `T[*s]`, real.

  Returns:
    `T[*s]`; `+inf` at the poles `0, -1, -2, ...`.

  Raises:
    TypeError: for a list/tuple argument.

  Algorithm: XLA's `lgamma` (Lanczos approximation with reflection), as JAX.
  Differentiable: d/dx = digamma(x).
  """
  x, = _promote_inexact("gammaln", x)
  return lax.lgamma(x)


@jit
def gammasgn(x: ArrayLike):
  """The sign of the gamma function, elementwise (`scipy.special.gammasgn`).

  Args:
    x: array-like `T[*s]`, real.

  Returns:
    `T[*s]`: 1 or -1 (-1 on `(-2k-1, -2k)` and at `-0.0`); NaN at the negative integers
    and for NaN. Its derivative is 0.

  Raises:
    ValueError: for complex input.
  """
  x, = _promote_inexact("gammasgn", x)
  _reject_complex("gammasgn", x)
  floor_x = lax.floor(x)
  neg = x < 0
  nan_case = (neg & (x == floor_x)) | jnp.isnan(x)
  minus_case = (neg & (jnp.fmod(floor_x, 2) != 0)) | ((x == 0) & jnp.signbit(x))
  one = _full_like(x, 1)
  res = jnp.where(nan_case, _full_like(x, np.nan), jnp.where(minus_case, -one, one))
  return lax.convert_element_type(res, x.dtype, weak_type=False)   # strong, as JAX


def gamma(x: ArrayLike):
  """The gamma function `Γ(x)`, elementwise (`scipy.special.gamma`).

  Args:
    x: array-like `T[*s]`, real or complex.

  Returns:
    `T[*s]`: `gammasgn(x) * exp(gammaln(x))`; `±inf` at 0 (by the sign of zero), NaN at the
    negative integers; complex inputs use the Lanczos approximation (g = 7, 9 terms) with
    the reflection formula, and give NaN at the poles.

  Algorithm: real: `sign * exp(lgamma(x))` (JAX's formula); complex: Lanczos (Numerical
  Recipes §6.1, Godfrey's coefficients). Differentiable: `Γ'(x) = Γ(x) ψ(x)`.
  """
  x, = _promote_inexact("gamma", x)
  if dtypes.is_complex(x.dtype):
    return _complex_gamma(x)
  return gammasgn(x) * lax.exp(lax.lgamma(x))


# Lanczos coefficients for g = 7, n = 9 (Godfrey; Numerical Recipes, 3rd ed., §6.1).
_LANCZOS_G = 7.0
_LANCZOS_COEFFS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028,
                   771.32342877765313, -176.61502916214059, 12.507343278686905,
                   -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7)


def _complex_loggamma_principal(z):
  """log Γ(z) for complex z (a branch of it: Lanczos for Re z >= 1/2, reflection
  `log π - log sin(πz) - log Γ(1-z)` below)."""
  reflect = jnp.real(z) < 0.5
  w = jnp.where(reflect, 1.0 - z, z) - 1.0
  acc = _full_like(w, _LANCZOS_COEFFS[0])
  for k, c in enumerate(_LANCZOS_COEFFS[1:], start=1):
    acc = acc + c / (w + k)
  t = w + (_LANCZOS_G + 0.5)
  lg = 0.5 * math.log(2 * math.pi) + (w + 0.5) * jnp.log(t) - t + jnp.log(acc)
  z_safe = jnp.where(reflect, z, _full_like(z, 0.5))
  refl = math.log(math.pi) - jnp.log(jnp.sin(math.pi * z_safe)) - lg
  return jnp.where(reflect, refl, lg)


def _complex_poles(z):
  return jnp.isnan(z) | ((jnp.imag(z) == 0) & (jnp.real(z) <= 0)
                         & (jnp.real(z) == jnp.floor(jnp.real(z))))


def _complex_gamma(z):
  bad = _complex_poles(z)
  z_safe = jnp.where(bad, _full_like(z, 1), z)
  nan = _full_like(z, complex(np.nan, np.nan))
  return jnp.where(bad, nan, jnp.exp(_complex_loggamma_principal(z_safe)))


def _complex_loggamma(z):
  """SciPy's branch of log Γ(z) (continuous off the negative real axis): shift
  `Re z < 1/2` up by n with `log Γ(z) = log Γ(z+n) - Σ_{k<n} log(z+k)`."""
  bad = _complex_poles(z)
  z_safe = jnp.where(bad, _full_like(z, 1), z)
  n = jnp.maximum(0, jnp.ceil(0.5 - jnp.real(z_safe)))
  n_max = jnp.max(n) if n.size else jnp.zeros((), n.dtype)

  def body(k, acc):
    use = k < n
    term = jnp.log(jnp.where(use, z_safe + k, _full_like(z_safe, 1)))
    return acc + jnp.where(use, term, _full_like(term, 0))

  shift = lax.while_loop(lambda s: s[0] < n_max,
                         lambda s: (s[0] + 1, body(s[0], s[1])),
                         (jnp.zeros((), n.dtype), _full_like(z_safe, 0)))[1]
  res = _complex_loggamma_principal(z_safe + n.astype(z.dtype)) - shift
  return jnp.where(bad, _full_like(z, complex(np.nan, np.nan)), res)


def loggamma(x: ArrayLike):
  """The principal branch of `log Γ(x)` (`scipy.special.loggamma`).

  Args:
    x: array-like `T[*s]`, real or complex.

  Returns:
    `T[*s]`: for real x, `gammaln(x)` where `x > 0` and NaN elsewhere; for complex x,
    SciPy's branch (continuous in the plane cut along the negative real axis), NaN at the
    poles.

  Algorithm: real: XLA's lgamma; complex: Lanczos with SciPy's upward recurrence for
  `Re x < 1/2`.
  """
  x, = _promote_inexact("loggamma", x)
  if dtypes.is_complex(x.dtype):
    return _complex_loggamma(x)
  return jnp.where(x > 0, lax.lgamma(x), _full_like(x, np.nan))


def _algdiv(a, b):
  """`log Γ(b) - log Γ(a + b)` for `b >= 8`, `a <= b` (DiDonato & Morris, TOMS 708's
  ALGDIV, as in SciPy's cdflib): Stirling's series of the difference."""
  c = (0.833333333333333e-01, -0.277777777760991e-02, 0.793650666825390e-03,
       -0.595202931351870e-03, 0.837308034031215e-03, -0.165322962780713e-02)
  h = a / b
  c_ = h / (1 + h)
  x = 1 / (1 + h)
  d = b + (a - 0.5)
  x2 = x * x
  s3 = 1.0 + (x + x2)
  s5 = 1.0 + (x + x2 * s3)
  s7 = 1.0 + (x + x2 * s5)
  s9 = 1.0 + (x + x2 * s7)
  s11 = 1.0 + (x + x2 * s9)
  t = (1.0 / b) ** 2
  w = ((((c[5] * s11 * t + c[4] * s9) * t + c[3] * s7) * t + c[2] * s5) * t
       + c[1] * s3) * t + c[0]
  w = w * (c_ / b)
  u = d * lax.log1p(a / b)
  v = a * (lax.log(b) - 1.0)
  return jnp.where(u <= v, (w - v) - u, (w - u) - v)


def betaln(a: ArrayLike, b: ArrayLike):
  """`log|B(a, b)|`, elementwise (`scipy.special.betaln`).

  Args:
    a, b: array-likes, real, broadcast together.

  Returns:
    The promoted dtype and broadcast shape.

  Algorithm: `lgamma(a) + lgamma(b) - lgamma(a + b)` with `a <= b`, and for `b >= 8`
  TOMS 708's ALGDIV for the last two terms (accurate for large arguments), as JAX.
  """
  a, b = _promote_inexact("betaln", a, b)
  a, b = jnp.minimum(a, b), jnp.maximum(a, b)
  small_b = lax.lgamma(a) + (lax.lgamma(b) - lax.lgamma(a + b))
  large_b = lax.lgamma(a) + _algdiv(a, b)
  return jnp.where(b < 8, small_b, large_b)


def beta(a: ArrayLike, b: ArrayLike):
  """The beta function `B(a, b) = Γ(a) Γ(b) / Γ(a + b)` (`scipy.special.beta`).

  Args:
    a, b: array-likes, real, broadcast together.

  Returns:
    `sign * exp(betaln(a, b))` with the sign from `gammasgn`.

  Raises:
    ValueError: for complex inputs.
  """
  a, b = _promote_inexact("beta", a, b)
  _reject_complex("beta", a)
  sign = gammasgn(a) * gammasgn(b) * gammasgn(a + b)
  return sign * lax.exp(betaln(a, b))


def factorial(n: ArrayLike, exact: bool = False):
  """`n!` as `Γ(n + 1)` (`scipy.special.factorial` with `exact=False`).

  Args:
    n: array-like, real.
    exact: must be False (exact integer factorials are not supported, as in JAX).

  Returns:
    `exp(lgamma(n + 1))` in the promoted float dtype; 0 where `n < 0`.

  Raises:
    NotImplementedError: if `exact` is True.
  """
  if exact:
    raise NotImplementedError("factorial with exact=True")
  n, = _promote_inexact("factorial", n)
  return jnp.where(n < 0, _full_like(n, 0), lax.exp(lax.lgamma(n + 1)))


def comb(N: ArrayLike, k: ArrayLike, *, repetition: bool = False):
  """The number of combinations of N things taken k at a time (`scipy.special.comb` with
  `exact=False`).

  Args:
    N, k: array-likes, real, broadcast together.
    repetition: count combinations with repetition, `comb(N + k - 1, k)`.

  Returns:
    `exp(lgamma(N+1) - lgamma(k+1) - lgamma(N-k+1))`; 0 where `k > N`, `N < 0` or `k < 0`
    (with repetition: 1 where `k == 0` and `N >= 0`).
  """
  N, k = _promote_inexact("comb", N, k)
  if repetition:
    res = comb(N + k - 1, k, repetition=False)
    return jnp.where((k == 0) & (N >= 0), _full_like(res, 1), res)
  ok = (k <= N) & (N >= 0) & (k >= 0)
  sN = jnp.where(ok, N, _full_like(N, 0))
  sk = jnp.where(ok, k, _full_like(k, 0))
  res = lax.exp(gammaln(sN + 1) - gammaln(sk + 1) - gammaln(sN + 1 - sk))
  return jnp.where(ok, res, _full_like(res, 0))


def betainc(a: ArrayLike, b: ArrayLike, x: ArrayLike):
  """The regularized incomplete beta function `I_x(a, b)` (`scipy.special.betainc`).

  Args:
    a, b: array-likes, the (non-negative) shape parameters.
    x: array-like in `[0, 1]`. All three are promoted and broadcast together.

  Returns:
    Values in `[0, 1]`; NaN outside the domain (see `stagecraft.lax.betainc`).
    Differentiable with respect to `x` only, as in JAX.

  Raises:
    ValueError: for complex inputs; when differentiating with respect to `a` or `b`.

  Algorithm: continued fraction (DLMF 8.17.22) by the modified Lentz method.
  """
  a, b, x = _promote_inexact("betainc", a, b, x)
  _reject_complex("betainc", x)
  return lax.betainc(a, b, x)


def digamma(x: ArrayLike):
  """The digamma function `ψ(x) = d/dx log Γ(x)` (`scipy.special.digamma`).

  Args:
    x: array-like, real.

  Returns:
    The promoted dtype; NaN at `0, -1, -2, ...` (SciPy gives `-inf` at 0).

  Algorithm: XLA's digamma. Differentiable: `ψ'(x) = polygamma(1, x)`.
  """
  x, = _promote_inexact("digamma", x)
  return lax.digamma(x)


def polygamma(n: ArrayLike, x: ArrayLike):
  """The polygamma function `ψ⁽ⁿ⁾(x)` (`scipy.special.polygamma`).

  Args:
    n: array-like of integer dtype, `n >= 0`.
    x: array-like, real.

  Returns:
    The promoted float dtype, broadcast shape. Differentiable with respect to `x`.

  Raises:
    ValueError: if `n` does not have an integer dtype, or `x` is complex.
  """
  n_dtype = getattr(n, "dtype", None)   # NB: a tracer's, without converting it
  if dtypes.is_python_scalar(n):
    n_dtype = dtypes.python_scalar_dtype(type(n))
  elif n_dtype is None:
    n_dtype = np.asarray(n).dtype
  n_dtype = np.dtype(n_dtype)
  if not np.issubdtype(n_dtype, np.integer):
    raise ValueError(f"Argument `n` to polygamma must be of integer type. Got dtype "
                     f"{n_dtype}.")
  n, x = _promote_inexact("polygamma", n, x)
  _reject_complex("polygamma", x)
  return lax.polygamma(n, x)


def gammainc(a: ArrayLike, x: ArrayLike):
  """The regularized lower incomplete gamma function `P(a, x)` (`scipy.special.gammainc`).

  Args:
    a: array-like, `a >= 0`.
    x: array-like, `x >= 0`; broadcast with `a`.

  Returns:
    Values in `[0, 1]`; NaN outside the domain. Differentiable in both arguments.

  Algorithm: Cephes' series and continued fraction (`stagecraft.lax.igamma`).
  """
  a, x = _promote_inexact("gammainc", a, x)
  return lax.igamma(a, x)


def gammaincc(a: ArrayLike, x: ArrayLike):
  """The regularized upper incomplete gamma function `Q(a, x) = 1 - P(a, x)`
  (`scipy.special.gammaincc`).

  Args:
    a: array-like, `a >= 0`.
    x: array-like, `x >= 0`; broadcast with `a`.

  Returns:
    Values in `[0, 1]`; NaN outside the domain. Differentiable in both arguments.

  Algorithm: Cephes' series and continued fraction (`stagecraft.lax.igammac`).
  """
  a, x = _promote_inexact("gammaincc", a, x)
  return lax.igammac(a, x)


def multigammaln(a: ArrayLike, d: ArrayLike):
  """The log of the multivariate gamma function (`scipy.special.multigammaln`):
  `d(d-1)/4 log π + Σ_{j=0}^{d-1} gammaln(a - j/2)`.

  Args:
    a: array-like `T[*s]`.
    d: a concrete positive integer (the dimension).

  Returns:
    `T[*s]` (the dtype promoted with `d`).

  Raises:
    ConcretizationTypeError: if `d` is traced.
  """
  d_int = _concrete_int(d, "d argument of multigammaln")
  a, d_arr = promote_dtypes_inexact(a, d_int)
  a, d_arr = jnp.asarray(a), jnp.asarray(d_arr)
  const = 0.25 * d_arr * (d_arr - 1) * _c(a, math.log(math.pi))
  # NB: shifts of a's rank + 1, so jax_numpy_rank_promotion='raise' allows the difference
  shifts = jnp.reshape(jnp.arange(d_int, dtype=a.dtype) / 2, (1,) * a.ndim + (d_int,))
  res = jnp.sum(gammaln(a[..., None] - shifts), axis=-1)
  return res + const


# ---------------------------------------------------------------------------
# Error function family


def erf(x: ArrayLike):
  """The error function `erf(x) = 2/√π ∫_0^x exp(-t²) dt` (`scipy.special.erf`).

  Args:
    x: array-like, real.

  Returns:
    The promoted dtype. Differentiable. Algorithm: XLA's erf.
  """
  x, = _promote_inexact("erf", x)
  return lax.erf(x)


def erfc(x: ArrayLike):
  """The complementary error function `1 - erf(x)` (`scipy.special.erfc`), accurate in
  the right tail.

  Args:
    x: array-like, real.

  Returns:
    The promoted dtype. Differentiable. Algorithm: XLA's erfc.
  """
  x, = _promote_inexact("erfc", x)
  return lax.erfc(x)


def erfinv(x: ArrayLike):
  """The inverse error function (`scipy.special.erfinv`).

  Args:
    x: array-like in `[-1, 1]`.

  Returns:
    The promoted dtype; `±inf` at `±1`, NaN outside. Differentiable. Algorithm: XLA's
    erf_inv (Giles' polynomial approximation).
  """
  x, = _promote_inexact("erfinv", x)
  return lax.erf_inv(x)


def ndtr(x: ArrayLike):
  """The standard normal CDF `Φ(x) = (1 + erf(x/√2)) / 2` (`scipy.special.ndtr`).

  Args:
    x: array-like of dtype float32 or float64 (Python floats are float32/float64 by x64).

  Returns:
    Same dtype and shape. Differentiable.

  Raises:
    TypeError: for any other dtype (integers included), as JAX.

  Algorithm: `erf` near 0 and `erfc` in the tails (Cephes' ndtr), so that small tail
  probabilities keep their relative accuracy.
  """
  x = _float_only("ndtr", x)
  return _ndtr(x)


def _ndtr(x):
  w = x * _c(x, 0.5 * math.sqrt(2.0))
  z = lax.abs(w)
  y = jnp.where(z < _c(x, 0.5 * math.sqrt(2.0)), 1.0 + lax.erf(w),
                jnp.where(w > 0, 2.0 - lax.erfc(z), lax.erfc(z)))
  return 0.5 * y


# Cephes ndtri.c: rational approximations of the inverse normal CDF.
_NDTRI_P0 = (-5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1,
             1.39312609387279679503E1, -1.23916583867381258016E0)
_NDTRI_Q0 = (1.0, 1.95448858338141759834E0, 4.67627912898881538453E0, 8.63602421390890590575E1,
             -2.25462687854119370527E2, 2.00260212380060660359E2, -8.20372256168333339912E1,
             1.59056225126211695515E1, -1.18331621121330003142E0)
_NDTRI_P1 = (4.05544892305962419923E0, 3.15251094599893866154E1, 5.71628192246421288162E1,
             4.40805073893200834700E1, 1.46849561928858024014E1, 2.18663306850790267539E0,
             -1.40256079171354495875E-1, -3.50424626827848203418E-2,
             -8.57456785154685413611E-4)
_NDTRI_Q1 = (1.0, 1.57799883256466749731E1, 4.53907635128879210584E1, 4.13172038254672030440E1,
             1.50425385692907503408E1, 2.50464946208309415979E0, -1.42182922854787788574E-1,
             -3.80806407691578277194E-2, -9.33259480895457427372E-4)
_NDTRI_P2 = (3.23774891776946035970E0, 6.91522889068984211695E0, 3.93881025292474443415E0,
             1.33303460815807542389E0, 2.01485389549179081538E-1, 1.23716634817820021358E-2,
             3.01581553508235416007E-4, 2.65806974686737550832E-6, 6.23974539184983293730E-9)
_NDTRI_Q2 = (1.0, 6.02427039364742014255E0, 3.67983563856160859403E0, 1.37702099489081330271E0,
             2.16236993594496635890E-1, 1.34204006088543189037E-2, 3.28014464682127739104E-4,
             2.89247864745380683936E-6, 6.79019408009981274425E-9)


def ndtri(p: ArrayLike):
  """The inverse of `ndtr`, the standard normal quantile function (`scipy.special.ndtri`).

  Args:
    p: array-like of dtype float32 or float64, in `[0, 1]`.

  Returns:
    Same dtype and shape; `-inf` at 0, `+inf` at 1, NaN outside `[0, 1]`. Differentiable
    (through the approximation).

  Raises:
    TypeError: for other dtypes, as JAX.
    FloatingPointError: under `debug_infs`, for an infinite result ("invalid value (inf)
      encountered in ndtri.", JAX's); the infinities computed inside are no error.

  Algorithm: Cephes' ndtri: a rational function of `p - 1/2` on `[e^-2, 1 - e^-2]`, and in
  the tails of `z = sqrt(-2 log p)` (two fits, split at z = 8).
  """
  p = _float_only("ndtri", p)
  hi = p > _c(p, -math.expm1(-2.0))
  y = jnp.where(hi, 1.0 - p, p)                 # the smaller tail probability
  y = jnp.where(y == 0, _full_like(y, 0.5), y)   # 0 and 1 are set below
  w = y - 0.5
  ww = w * w
  central = (w + w * ww * (_polyval(_NDTRI_P0, ww) / _polyval(_NDTRI_Q0, ww))) \
      * _c(p, math.sqrt(2 * math.pi))
  z = lax.sqrt(-2.0 * lax.log(y))
  zi = 1.0 / z
  first = z - lax.log(z) / z
  tail = jnp.where(z >= 8.0, first - _polyval(_NDTRI_P2, zi) / _polyval(_NDTRI_Q2, zi) * zi,
                   first - _polyval(_NDTRI_P1, zi) / _polyval(_NDTRI_Q1, zi) * zi)
  # `tail` is -x for the lower tail; `central` is already signed.
  x = jnp.where(y > _c(p, math.exp(-2.0)), jnp.where(hi, -central, central),
                jnp.where(hi, tail, -tail))
  with debug_infs(False):   # NB: the infinities of the ends are no error here
    inf = _full_like(x, np.inf)
    x = jnp.where(p == 0, -inf, jnp.where(p == 1, inf, x))
  if not isinstance(x, core.Tracer):   # ... but in the result, as JAX's
    kind = dispatch.find_special([x])
    if kind is not None:
      raise FloatingPointError(f"invalid value ({kind}) encountered in ndtri.")
  return x


_LOG_NDTR_BOUNDS = {np.dtype(np.float64): (-20.0, 8.0), np.dtype(np.float32): (-10.0, 5.0)}


def log_ndtr(x: ArrayLike, series_order: int = 3):
  """`log(ndtr(x))`, accurate in both tails (`scipy.special.log_ndtr`).

  Args:
    x: array-like of dtype float32 or float64.
    series_order: a Python int in `[0, 30]`: terms of the asymptotic series used for
      `x` below -20 (float64) / -10 (float32).

  Returns:
    Same dtype and shape. Differentiable: d/dx = exp(-x²/2 - log √(2π) - log_ndtr(x)).

  Raises:
    TypeError: if `series_order` is not an int, or x's dtype is not float32/float64.
    ValueError: if `series_order` is negative or above 30.

  Algorithm: `-ndtr(-x)` (≈ log1p) above 8 / 5, `log(ndtr(x))` in the middle, and the
  asymptotic expansion of Mills' ratio (Abramowitz & Stegun 26.2.12) in the lower tail.
  """
  if not isinstance(series_order, int):
    raise TypeError("series_order must be a Python integer.")
  if series_order < 0:
    raise ValueError("series_order must be non-negative.")
  if series_order > 30:
    raise ValueError("series_order must be <= 30.")
  x = jnp.asarray(x)
  if x.dtype not in _LOG_NDTR_BOUNDS:
    raise TypeError(f"x.dtype={x.dtype} is not supported.")
  return _log_ndtr(x, series_order)


@functools.partial(custom_jvp, nondiff_argnums=(1,))
def _log_ndtr(x, series_order):
  lower, upper = _LOG_NDTR_BOUNDS[x.dtype]
  above = x > upper
  arg = jnp.where(above, -x, jnp.maximum(x, _c(x, lower)))
  nd = _ndtr(arg)
  low = _log_ndtr_lower(jnp.minimum(x, _c(x, lower)), series_order)
  return jnp.where(above, -nd, jnp.where(x > lower, lax.log(nd), low))


def _log_ndtr_lower(x, series_order):
  x2 = x * x
  log_scale = -0.5 * x2 - lax.log(-x) - _c(x, 0.5 * math.log(2 * math.pi))
  total = _full_like(x, 1)
  x2n = x2
  for n in range(1, series_order + 1):
    term = float(np.prod(np.arange(2 * n - 1, 1, -2, dtype=np.float64))) / x2n
    total = total - term if n % 2 else total + term
    x2n = x2n * x2
  return log_scale + lax.log(total)


def _norm_logpdf(x):
  return -0.5 * x * x - _c(x, 0.5 * math.log(2 * math.pi))


@_log_ndtr.defjvp
def _log_ndtr_jvp(series_order, primals, tangents):
  (x,), (t,) = primals, tangents
  ans = _log_ndtr(x, series_order)
  return ans, t * lax.exp(_norm_logpdf(x) - ans)


# ---------------------------------------------------------------------------
# Logistic, log, entropy


def logit(x: ArrayLike):
  """The logit function `log(x / (1 - x))`, inverse of `expit` (`scipy.special.logit`).

  Args:
    x: array-like, in `[0, 1]`.

  Returns:
    The promoted dtype; `∓inf` at 0 and 1, NaN outside. Differentiable:
    d/dx = 1 / (x (1 - x)).
  """
  x, = _promote_inexact("logit", x)
  return _logit(x)


@custom_jvp
@jit
def _logit(x):
  return lax.log(x / (1 - x))


_logit.defjvps(lambda t, ans, x: t / (x * (1 - x)))


def expit(x: ArrayLike):
  """The logistic sigmoid `1 / (1 + exp(-x))` (`scipy.special.expit`).

  Args:
    x: array-like.

  Returns:
    The promoted dtype. Differentiable. Algorithm: `lax.logistic`.
  """
  x, = _promote_inexact("expit", x)
  return lax.logistic(x)


# xlogy, xlog1py, _xlogx: custom_jvp functions called directly, without a jit inside, as
# JAX's: eagerly each runs op by op (a jitted body is fused by XLA, which changes the last bit
# of `x * log(y)`), and traced they stage one `custom_jvp_call` named after the function.
@custom_jvp
def xlogy(x: ArrayLike, y: ArrayLike):
  """`x * log(y)`, with 0 where `x == 0` (unless y is NaN) (`scipy.special.xlogy`).

  Args:
    x, y: array-likes, broadcast together.

  Returns:
    The promoted dtype and broadcast shape. Differentiable (a custom JVP):
    `(log y) dx + (x / y) dy`.
  """
  x, y = _promote_inexact_ranks("xlogy", x, y)
  ok = (x != 0) | jnp.isnan(y)
  return jnp.where(ok, lax.mul(x, lax.log(y)), _full_like(x, 0))


@xlogy.defjvp
def _xlogy_jvp(primals, tangents):
  (x, y), (tx, ty) = primals, tangents
  out = xlogy(x, y)
  return out, lax.convert_element_type(tx * lax.log(y) + ty * x / y, out.dtype)


@custom_jvp
def xlog1py(x: ArrayLike, y: ArrayLike):
  """`x * log1p(y)`, with 0 where `x == 0` (unless y is NaN) (`scipy.special.xlog1py`).

  Args:
    x, y: array-likes, broadcast together.

  Returns:
    The promoted dtype and broadcast shape. Differentiable (a custom JVP):
    `log1p(y) dx + x / (1 + y) dy`.
  """
  x, y = _promote_inexact_ranks("xlog1py", x, y)
  ok = (x != 0) | jnp.isnan(y)
  return jnp.where(ok, lax.mul(x, lax.log1p(y)), _full_like(x, 0))


@xlog1py.defjvp
def _xlog1py_jvp(primals, tangents):
  (x, y), (tx, ty) = primals, tangents
  out = xlog1py(x, y)
  return out, lax.convert_element_type(tx * lax.log1p(y) + ty * x / (1 + y), out.dtype)


@custom_jvp
def _xlogx(x):
  return xlogy(x, x)


@_xlogx.defjvp
def _xlogx_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  return _xlogx(x), t * (lax.log(x) + 1)


def entr(x: ArrayLike):
  """The elementwise entropy `-x log x` (`scipy.special.entr`).

  Args:
    x: array-like, real.

  Returns:
    The promoted dtype: `-x log x` for `x > 0`, 0 at 0, `-inf` for `x < 0`.
    Differentiable: d/dx = -(log x + 1).

  Raises:
    ValueError: for complex inputs.
  """
  x, = _promote_inexact("entr", x)
  _reject_complex("entr", x)
  return jnp.where(x < 0, _full_like(x, -np.inf), -_xlogx(x))


def rel_entr(p: ArrayLike, q: ArrayLike):
  """The elementwise relative entropy (`scipy.special.rel_entr`): `p log(p/q)` where both
  are positive, 0 where `p == 0` and `q >= 0`, `inf` elsewhere.

  Args:
    p, q: array-likes, real, broadcast together.

  Returns:
    The promoted dtype and broadcast shape. Differentiable where both are positive.

  Raises:
    ValueError: for complex inputs.
  """
  p, q = _promote_inexact("rel_entr", p, q)
  _reject_complex("rel_entr", p)
  both = (p > 0) & (q > 0)
  p_zero = (p == 0) & (q >= 0)
  sp = jnp.where(both, p, _full_like(p, 1))
  sq = jnp.where(both, q, _full_like(q, 1))
  val = _xlogx(sp) - xlogy(sp, sq)
  res = jnp.where(both, val, jnp.where(p_zero, _full_like(p, 0), _full_like(p, np.inf)))
  return lax.convert_element_type(res, p.dtype, weak_type=False)   # strong, as JAX


def kl_div(p: ArrayLike, q: ArrayLike):
  """The elementwise Kullback-Leibler term `p log(p/q) - p + q` (`scipy.special.kl_div`):
  `q` where `p == 0` and `q >= 0`, `inf` for other non-positive arguments.

  Args:
    p, q: array-likes, real, broadcast together.

  Returns:
    `rel_entr(p, q) - p + q`.

  Raises:
    ValueError: for complex inputs.
  """
  p, q = _promote_inexact("kl_div", p, q)
  _reject_complex("kl_div", p)
  return rel_entr(p, q) - p + q


def boxcox(x: ArrayLike, lmbda: ArrayLike):
  """The Box-Cox transform `(x^λ - 1) / λ`, `log x` at `λ = 0` (`scipy.special.boxcox`).

  Args:
    x, lmbda: array-likes, broadcast together.

  Returns:
    The promoted dtype and broadcast shape (computed as `expm1(λ log x) / λ`).
  """
  x, lmbda = _promote_inexact("boxcox", x, lmbda)
  zero = lmbda == 0
  safe = jnp.where(zero, _full_like(lmbda, 1), lmbda)
  lx = jnp.log(x)
  return jnp.where(zero, lx, jnp.expm1(safe * lx) / safe)


def boxcox1p(x: ArrayLike, lmbda: ArrayLike):
  """The Box-Cox transform of `1 + x`: `((1+x)^λ - 1) / λ`, `log1p(x)` at `λ = 0`
  (`scipy.special.boxcox1p`).

  Args:
    x, lmbda: array-likes, broadcast together.

  Returns:
    The promoted dtype and broadcast shape (computed as `expm1(λ log1p x) / λ`).
  """
  x, lmbda = _promote_inexact("boxcox1p", x, lmbda)
  zero = lmbda == 0
  safe = jnp.where(zero, _full_like(lmbda, 1), lmbda)
  lx = jnp.log1p(x)
  return jnp.where(zero, lx, jnp.expm1(safe * lx) / safe)


# ---------------------------------------------------------------------------
# Bessel functions


def i0e(x: ArrayLike):
  """The exponentially scaled modified Bessel function of order 0, `exp(-|x|) I₀(x)`
  (`scipy.special.i0e`).

  Args:
    x: array-like, real.

  Returns:
    The promoted dtype. Differentiable. Algorithm: Cephes' Chebyshev expansions
    (`stagecraft.lax.bessel_i0e`).
  """
  x, = _promote_inexact("i0e", x)
  return lax.bessel_i0e(x)


def i0(x: ArrayLike):
  """The modified Bessel function of order 0, `I₀(x)` (`scipy.special.i0`).

  Args:
    x: array-like, real.

  Returns:
    `exp(|x|) * i0e(x)` in the promoted dtype. Differentiable.
  """
  x, = _promote_inexact("i0", x)
  return lax.exp(lax.abs(x)) * lax.bessel_i0e(x)


def i1e(x: ArrayLike):
  """The exponentially scaled modified Bessel function of order 1, `exp(-|x|) I₁(x)`
  (`scipy.special.i1e`).

  Args:
    x: array-like, real.

  Returns:
    The promoted dtype. Differentiable. Algorithm: XLA's bessel_i1e.
  """
  x, = _promote_inexact("i1e", x)
  return lax.bessel_i1e(x)


def i1(x: ArrayLike):
  """The modified Bessel function of order 1, `I₁(x)` (`scipy.special.i1`).

  Args:
    x: array-like, real.

  Returns:
    `exp(|x|) * i1e(x)` in the promoted dtype. Differentiable.
  """
  x, = _promote_inexact("i1", x)
  return lax.exp(lax.abs(x)) * lax.bessel_i1e(x)


# ---------------------------------------------------------------------------
# softmax, log_softmax


def _softmax_axes(axis, ndim):
  if axis is None:
    return tuple(range(ndim))
  axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
  out = []
  for a in axes:
    if not -ndim <= a < max(ndim, 1):
      raise ValueError(f"axis {a} is out of bounds for array of dimension {ndim}")
    out.append(int(a) % ndim if ndim else 0)
  return tuple(sorted(set(out))) if ndim else ()


def softmax(x: ArrayLike, /, *, axis: int | tuple[int, ...] | None = None):
  """`exp(x) / sum(exp(x), axis)` (`scipy.special.softmax`), computed stably.

  Args:
    x: array-like `T[*s]` (integers promote to the default float).
    axis: an int, a tuple of ints, or None (all axes; SciPy's default).

  Returns:
    `T[*s]`, summing to 1 over `axis`. Differentiable with the rule
    `y * (t - sum(y * t, axis))`, which never overflows.

  Raises:
    ValueError: for an out-of-bounds axis.
  """
  x, = _promote_inexact("softmax", x)
  return _softmax(x, _softmax_axes(axis, x.ndim))


@functools.partial(custom_jvp, nondiff_argnums=(1,))
def _softmax(x, axes):
  x_max = jnp.max(x, axes, initial=-np.inf, keepdims=True)
  unnormalized = jnp.exp(x - x_max)
  return unnormalized / jnp.sum(unnormalized, axes, keepdims=True)


@_softmax.defjvp
def _softmax_jvp(axes, primals, tangents):
  (x,), (t,) = primals, tangents
  y = _softmax(x, axes)
  return y, y * (t - jnp.sum(y * t, axes, keepdims=True))


def log_softmax(x: ArrayLike, /, *, axis: int | tuple[int, ...] | None = None):
  """`x - logsumexp(x, axis, keepdims=True)` (`scipy.special.log_softmax`), computed
  stably.

  Args:
    x: array-like `T[*s]`.
    axis: an int, a tuple of ints, or None (all axes).

  Returns:
    `T[*s]`. Differentiable (the shift by the maximum is not differentiated).

  Raises:
    ValueError: for an out-of-bounds axis.
  """
  x, = _promote_inexact("log_softmax", x)
  axes = _softmax_axes(axis, x.ndim)
  x_max = jnp.max(x, axes, initial=-np.inf, keepdims=True)
  shifted = x - lax.stop_gradient(x_max)
  return shifted - jnp.log(jnp.sum(jnp.exp(shifted), axes, keepdims=True))


# ---------------------------------------------------------------------------
# Masked iteration: one while loop over whole arrays, each element frozen once converged.


def _float_loop(lower, upper, body, init):
  """`fori_loop` over a float counter: `body(i, state)` for `i = lower, lower+1, ... < upper`
  (the bounds are scalars of the state's dtype, as the per-element bounds they reduce)."""
  def cond(carry):
    return carry[0] < upper

  def step(carry):
    i, st = carry
    return i + 1, body(i, st)

  return lax.while_loop(cond, step, (lower, init))[1]


def _iterate(body, state, active, max_steps: int):
  """Runs `state = body(state)` while any element of `active` is True and fewer than
  `max_steps` steps ran; `body(state) -> (new_state, still_active)` and elements that are
  no longer active keep their values (a vectorized form of a per-element while loop)."""
  def cond(carry):
    k, act, _ = carry
    return (k < max_steps) & jnp.any(act)

  def step(carry):
    k, act, st = carry
    new, still = body(st)
    st = tuple(jnp.where(act, n, o) for n, o in zip(new, st))
    return k + 1, act & still, st

  return lax.while_loop(cond, step, (jnp.zeros((), np.int32), active, tuple(state)))[2]


# ---------------------------------------------------------------------------
# Zeta, poch, Bernoulli numbers


def _bernoulli_over_factorial(m: int) -> list[float]:
  """`B_{2j} / (2j)!` for j = 1..m (exact rationals, Akiyama-Tanigawa recurrence)."""

  n_max = 2 * m
  a = [Fraction(0)] * (n_max + 1)
  bern = []
  for n in range(n_max + 1):
    a[n] = Fraction(1, n + 1)
    for j in range(n, 0, -1):
      a[j - 1] = j * (a[j - 1] - a[j])
    bern.append(a[0])
  return [float(bern[2 * j] / math.factorial(2 * j)) for j in range(1, m + 1)]


_ZETA_TERMS = {np.dtype(np.float32): 8, np.dtype(np.float64): 16}
_BERN_COEFS = _bernoulli_over_factorial(16)


@jit
def _zeta_ds(s, a):
  """d/ds ζ(s, a) from the Euler-Maclaurin formula (N terms summed, N corrections;
  Johansson, "Rigorous high-precision computation of the Hurwitz zeta function", 2015)."""
  n = _ZETA_TERMS.get(s.dtype, 8)
  total = _full_like(s, 0)
  for k in range(n):
    ak = a + k
    total = total - lax.log(ak) * ak ** (-s)
  big_a = a + n
  log_a = lax.log(big_a)
  integral = big_a ** (1 - s) / (s - 1)
  total = total - log_a * integral - integral / (s - 1)
  poly, dpoly = _full_like(s, 1), _full_like(s, 0)
  corr, dcorr = _full_like(s, 0.5), _full_like(s, 0)
  for j in range(1, n + 1):
    for i in ((0,) if j == 1 else (2 * j - 3, 2 * j - 2)):
      poly, dpoly = poly * (s + i), dpoly * (s + i) + poly
    scale = _BERN_COEFS[j - 1] * big_a ** (-(2.0 * j - 1))
    corr, dcorr = corr + poly * scale, dcorr + dpoly * scale
  tail = big_a ** (-s)
  return total + tail * (dcorr - log_a * corr)


def zeta(x: ArrayLike, q: ArrayLike | None = None):
  """The Hurwitz zeta function `ζ(x, q) = Σ_{k>=0} (k + q)^-x` (`scipy.special.zeta`).

  Args:
    x: array-like, the exponent (`x > 1` for convergence).
    q: array-like, the shift; required (the Riemann form `q=None` is not implemented,
      as in JAX).

  Returns:
    The promoted dtype and broadcast shape. Differentiable in both arguments:
    `dζ/dq = -x ζ(x+1, q)`, and `dζ/dx` from the derivative of the Euler-Maclaurin sum.

  Raises:
    NotImplementedError: if `q` is None.

  Algorithm: values from XLA's zeta (as JAX).
  """
  if q is None:
    raise NotImplementedError("Riemann zeta function not implemented; pass q != None to "
                              "compute the Hurwitz Zeta function.")
  x, q = _promote_inexact("zeta", x, q)
  return _zeta(x, q)


@custom_jvp
@jit
def _zeta(x, q):
  return lax.zeta(x, q)


_zeta.defjvps(lambda t, ans, x, q: t * _zeta_ds(x, q),
              lambda t, ans, x, q: t * (-x) * _zeta(x + 1, q))


def poch(z: ArrayLike, m: ArrayLike):
  """The Pochhammer symbol `(z)_m = Γ(z + m) / Γ(z)` (`scipy.special.poch`).

  Args:
    z, m: array-likes, real, broadcast together.

  Returns:
    The promoted dtype; 1 where `m == 0`. Differentiable:
    `d/dz = (ψ(z+m) - ψ(z)) (z)_m`, `d/dm = ψ(z+m) (z)_m`.

  Raises:
    ValueError: for complex inputs.
  """
  z, m = _promote_inexact("poch", z, m)
  if dtypes.is_complex(z.dtype):
    raise ValueError("jnp.poch does not support complex-valued inputs.")
  return _poch(z, m)


@custom_jvp
@jit
def _poch(z, m):
  return jnp.where(m == 0, _full_like(z, 1), gamma(z + m) / gamma(z))


_poch.defjvps(lambda t, ans, z, m: t * (digamma(z + m) - digamma(z)) * ans,
              lambda t, ans, z, m: t * digamma(z + m) * ans)


def bernoulli(n: int):
  """The Bernoulli numbers `B_0 ... B_n` (`scipy.special.bernoulli`, with `B_1 = -1/2`).

  Args:
    n: a concrete non-negative integer.

  Returns:
    `float[n + 1]` in the default float dtype.

  Raises:
    ValueError: if `n < 0`.
    ConcretizationTypeError: if `n` is traced.

  Algorithm: `B_{2k} = (-1)^{k+1} 2 (2k)! ζ(2k) / (2π)^{2k}` (DLMF 24.8.1) in float64,
  odd ones beyond `B_1` are 0.
  """
  n = _concrete_int(n, "Argument n of bernoulli")
  if n < 0:
    raise ValueError("n must be a non-negative integer.")
  out = np.zeros(n + 1, np.float64)
  out[:3] = [1.0, -0.5, 1.0 / 6.0][:n + 1]
  j = np.arange(1, 200, dtype=np.float64)
  with np.errstate(over="ignore", under="ignore"):
    for k in range(4, n + 1, 2):
      zeta_k = np.sum(j ** -float(k))
      log_mag = math.log(2.0) + math.lgamma(k + 1) - k * math.log(2 * math.pi)
      mag = math.exp(log_mag) * zeta_k if log_mag < 709 else np.inf
      out[k] = mag if (k // 2) % 2 else -mag
  return jnp.asarray(out.astype(dtypes.default_float_dtype()))


# ---------------------------------------------------------------------------
# Exponential integrals (Cephes ei.c, expn.c)

_EI1_A = (-5.350447357812543, 218.50491688166133, -4176.572384826693, 55411.76756393557,
    -331338.13311781443, 1592627.1633849454)
_EI1_B = (1.0, -52.505479591128626, 1259.6161867867906, -17565.495819735348,
    149306.2117002726, -729494.9239640528, 1592627.1633849454)
_EI2_A = (0.019818085032596897, -1.2716456259849176, -2.0881603356812284, 2.7555445091879367,
    -0.44095070487016, 0.046656238059358916, -0.0015450426796734852, 7.059980605299618e-05)
_EI2_B = (1.0, 1.4764986709149215, 0.5629177174822436, 0.16990178978793072,
    0.02291647179034212, 0.0044501504397287525, 0.00017274396122065214, 3.953167195549672e-05)
_EI3_A = (-1.3732153758712087, -0.7084559133740839, 1.580806855547941, -0.2601500427425623,
    0.029946746941137137, -0.001038086040188744, 4.371064420753005e-05, 2.141783679522603e-06)
_EI3_B = (1.0, 0.8585231423622028, 0.4483285822873995, 0.07687932158124476,
    0.024498682410218877, 0.0008832165941927797, 0.00045909522995113536,
    -4.729848351866523e-06, 2.66519553739071e-06)
_EI4_A = (-2.1069346016919166, 1.7327338696646881, -0.2423619178935842, 0.02322724180937566,
    0.00023728804404931798, -8.343219561192553e-05, 1.3634087956052505e-05,
    -3.655412321999254e-07, 1.4649417339759612e-08, 6.17640786371036e-10)
_EI4_B = (1.0, -0.2298062239901678, 0.11050770414740378, -0.015665429666307924,
    0.002761106850817353, -0.00020891480122840484, 1.7085289388076754e-05,
    -4.4593117963566865e-07, 1.3946349303538475e-08, 6.150865933977338e-10)
_EI5_A = (-0.24581193676740204, -0.14833822533220778, 0.07248291795735552,
    -0.013483156873809405, 0.001342775069788637, -7.942465637159712e-05,
    2.644179518984236e-06, -4.239473659313765e-08)
_EI5_B = (1.0, -0.10442259084438711, -0.26764531281014026, 0.09695000254621984,
    -0.01601745692712991, 0.001496414899205908, -8.462452563778485e-05,
    2.7289384034767266e-06, -4.239462431819542e-08)
_EI6_A = (0.12125611181054567, -0.5823133179043894, 0.2348887314557017, -0.030400343181132484,
    0.0015100821468651906, -2.5231370954995714e-05)
_EI6_B = (1.0, -1.002252150365854, 0.2928709694872224, -0.03337004338674008,
    0.0015605448811273888, -2.5231370936032347e-05)
_EI7_A = (-0.7657847078286127, 0.6886192415566705, -0.2132598113545206, 0.033461075523841935,
    -0.003076541477344756, 0.00017471193164549074, -6.1037116822741705e-06,
    1.218032765428652e-07, -1.0860761027932903e-09)
_EI7_B = (1.0, -1.8888028686623086, 1.066691687211409, -0.27519159823063805,
    0.039308526882338234, -0.003414684558602365, 0.00018668443707035555,
    -6.345146083130515e-06, 1.239754287483207e-07, -1.0860761027931265e-09)

def _ei_small(x):
  """Ei(x) on (0, 2]: `γ + log x + x R(x)` with Cephes' rational R."""
  return x * (_polyval(_EI1_A, x) / _polyval(_EI1_B, x)) + np.euler_gamma + lax.log(x)


def _ei_large(a, b, x):
  """Ei(x) for x > 2: `e^x / x (1 + R(1/x) / x)` with one of Cephes' rational R."""
  w = 1.0 / x
  return lax.exp(x) * w * (w * (_polyval(a, w) / _polyval(b, w)) + 1.0)


def _expi_pos(x):
  pieces = [(_EI2_A, _EI2_B), (_EI3_A, _EI3_B), (_EI4_A, _EI4_B), (_EI5_A, _EI5_B),
            (_EI6_A, _EI6_B), (_EI7_A, _EI7_B)]
  res = _ei_large(*pieces[-1], jnp.maximum(x, _c(x, 2.0)))
  for i in range(len(pieces) - 2, -1, -1):   # (2^(i+1), 2^(i+2)]
    hi = 2.0 ** (i + 2)
    res = jnp.where(x <= hi, _ei_large(*pieces[i], jnp.clip(x, 2.0, hi)), res)
  return jnp.where(x <= 2, _ei_small(jnp.clip(x, np.finfo(np.float32).tiny, 2.0)), res)


def expi(x: ArrayLike):
  """The exponential integral `Ei(x) = -PV ∫_{-x}^∞ e^-t / t dt` (`scipy.special.expi`).

  Args:
    x: array-like, real.

  Returns:
    The promoted dtype: `-exp1(-x)` for `x < 0`, Cephes' rational approximations on
    `(0, 2]`, `(2, 4]`, ..., and beyond 32; `-inf` at 0 (SciPy's value; JAX 0.10.2 gives
    NaN there). Differentiable: d/dx = e^x / x.

  Raises:
    ValueError: for complex inputs.

  Algorithm: Cephes ei.c (S. L. Moshier).
  """
  x, = _promote_inexact("expi", x)
  _reject_complex("expi", x)
  return _expi(x)


@custom_jvp
@jit
def _expi(x):
  neg = x < 0
  pos = _expi_pos(jnp.where(neg, _full_like(x, 1), x))
  negv = -_exp1(-jnp.where(neg, x, -_full_like(x, 1)))
  out = jnp.where(neg, negv, pos)
  return jnp.where(x == 0, _full_like(x, -np.inf), out)


_expi.defjvps(lambda t, ans, x: t * lax.exp(x) / x)


def _expn_series(n, x):
  """E_n(x) for 0 < x <= 1 (Cephes expn.c's power series)."""
  eps = float(dtypes.finfo(x.dtype).eps)
  psi = -np.euler_gamma - lax.log(x)
  n_max = jnp.max(n) if n.size else jnp.ones((), n.dtype)
  psi = _float_loop(jnp.ones((), n.dtype), n_max,
                    lambda i, p: jnp.where(i < n, p + 1.0 / i, p), psi)
  z = -x
  one, zero = _full_like(x, 1), _full_like(x, 0)
  n_is_1 = n == 1
  ans0 = jnp.where(n_is_1, zero, 1.0 / jnp.where(n_is_1, 2.0 * one, 1.0 - n))

  def body(st):
    xk, yk, pk, ans = st
    xk = xk + 1
    yk = yk * z / xk
    pk = pk + 1
    ans = ans + jnp.where(pk != 0, yk / jnp.where(pk != 0, pk, one), zero)
    t = jnp.where(ans != 0, lax.abs(yk / ans), one)
    return (xk, yk, pk, ans), t > eps

  _, _, _, ans = _iterate(body, (zero, one, 1.0 - n, ans0), jnp.ones(x.shape, bool), 2000)
  return z ** (n - 1) * psi / lax.exp(lax.lgamma(n)) - ans


def _expn_cf(n, x):
  """E_n(x) for x > 1 (Cephes expn.c's continued fraction)."""
  eps = float(dtypes.finfo(x.dtype).eps)
  big = 1.44115188075855872e17
  one = _full_like(x, 1)

  def body(st):
    k, pkm2, qkm2, pkm1, qkm1, ans = st
    k = k + 1
    odd = jnp.fmod(k, 2.0) == 1
    yk = jnp.where(odd, one, x)
    xk = jnp.where(odd, n + (k - 1) / 2, k / 2)
    pk = pkm1 * yk + pkm2 * xk
    qk = qkm1 * yk + qkm2 * xk
    nz = qk != 0
    r = pk / jnp.where(nz, qk, one)
    t = jnp.where(nz, lax.abs((ans - r) / r), one)
    ans = jnp.where(nz, r, ans)
    rescale = lax.abs(pk) > big
    scale = jnp.where(rescale, _c(x, 1.0 / big), one)
    return (k, pkm1 * scale, qkm1 * scale, pk * scale, qk * scale, ans), t > eps

  init = (one, one, x, one, x + n, 1.0 / (x + n))
  ans = _iterate(body, init, jnp.ones(x.shape, bool), 2000)[-1]
  return ans * lax.exp(-x)


def _expn_asymptotic(n, x):
  """E_n(x) for large n (Cephes expn.c, A&S 5.1.52)."""
  xk = x + n
  yk = 1.0 / (xk * xk)
  ans = yk * n * (6.0 * x * x - 8.0 * n * x + n * n)
  ans = yk * (ans + n * (n - 2.0 * x))
  ans = yk * (ans + n)
  return (ans + 1.0) * lax.exp(-x) / xk


def expn(n: ArrayLike, x: ArrayLike):
  """The generalized exponential integral `E_n(x) = ∫_1^∞ e^{-xt} / t^n dt`
  (`scipy.special.expn`).

  Args:
    n: array-like of non-negative integral values.
    x: array-like, `x >= 0`; promoted and broadcast with `n`.

  Returns:
    The promoted dtype; NaN for `n < 0` or `x < 0`, `inf` at `x = 0` for `n < 2`.
    Differentiable in `x`: `dE_n/dx = -E_{n-1}(x)` (`n` is not differentiated, as JAX).

  Algorithm: Cephes expn.c: power series (x <= 1), continued fraction (x > 1), and the
  asymptotic expansion in n for n >= 5000.
  """
  n, x = _promote_inexact("expn", n, x)
  _reject_complex("expn", x)
  return _expn(n, x)


@functools.partial(custom_jvp, nondiff_argnums=(0,))
@jit
def _expn(n, x):
  one = _full_like(x, 1)
  nan_case = (n < 0) | (x < 0)
  zero_x = x == 0
  safe_n = jnp.where((n >= 1) & (n < 5000), n, one)
  small = _expn_series(safe_n, jnp.where((x > 0) & (x <= 1), x, 0.5 * one))
  large = _expn_cf(safe_n, jnp.where(x > 1, x, 2.0 * one))
  res = jnp.where(x > 1, large, small)
  res = jnp.where(n >= 5000, _expn_asymptotic(n, x), res)
  res = jnp.where((n == 0) & (x >= 0), lax.exp(-x) / x, res)
  res = jnp.where(zero_x & (n >= 2), 1.0 / jnp.where(n == 1, 2.0 * n, n - 1), res)
  res = jnp.where(zero_x & (n < 2), _full_like(x, np.inf), res)
  return jnp.where(nan_case, _full_like(x, np.nan), res)


@_expn.defjvp
def _expn_jvp(n, primals, tangents):
  (x,), (t,) = primals, tangents
  return _expn(n, x), -t * _expn(n - 1, x)


def _exp1(x):
  return _expn(_full_like(x, 1), x)


def exp1(x: ArrayLike):
  """The exponential integral `E_1(x) = ∫_1^∞ e^{-xt} / t dt` (`scipy.special.exp1`).

  Args:
    x: array-like, real; `x >= 0`.

  Returns:
    `expn(1, x)`: `inf` at 0, NaN for `x < 0`. Differentiable: d/dx = -e^-x / x.

  Raises:
    ValueError: for complex inputs.
  """
  x, = _promote_inexact("exp1", x)
  _reject_complex("exp1", x)
  return _exp1(x)


# ---------------------------------------------------------------------------
# Sine and cosine integrals (Cephes sici.c)

_SICI_FN4 = (4.236128628922166, 5.4593771716181285, 1.6208328770153833, 0.16700661183132304,
    0.006810201324725182, 0.00010893658065032867, 5.489002234213736e-07)
_SICI_FD4 = (1.0, 8.16496634205391, 7.308288225055645, 1.867922579501842, 0.1787920529631499,
    0.007017106683227897, 0.00011003435715391573, 5.489002527562557e-07)
_SICI_GN4 = (0.08710016989731142, 0.6113791099522193, 0.3971802963923375, 0.07485277376284691,
    0.005388686814621773, 0.00016199979459893403, 1.9796387414096365e-06,
    7.825790407440903e-09)
_SICI_GD4 = (1.0, 1.6440220241335535, 0.666296701268988, 0.09887717612776888,
    0.006223963454417684, 0.0001732210814741771, 2.0265918208634397e-06, 7.825792189335346e-09)
_SICI_FN8 = (0.4558808734704653, 0.7137152741001467, 0.16030015822231947, 0.01160642294081244,
    0.00034955644244785906, 4.8621543082645475e-06, 3.200927900910049e-08,
    9.41779576128513e-11, 9.70507110881952e-14)
_SICI_FD8 = (1.0, 0.9174636118736841, 0.17868554533207454, 0.012225359477197129,
    0.00035869648188185157, 4.924350643178815e-06, 3.21956939101046e-08,
    9.437205903502767e-11, 9.70507110881952e-14)
_SICI_GN8 = (0.6973599534432762, 0.33041097930563207, 0.03848787676499743,
    0.001717182390523479, 3.4894116550227946e-05, 3.471311670841167e-07,
    1.7040445278204452e-09, 3.859459254302766e-12, 3.1404009894636335e-15)
_SICI_GD8 = (1.0, 1.6854889881101165, 0.48785225869530496, 0.04679131942596258,
    0.0019028442667439953, 3.684755044425611e-05, 3.5704322344374083e-07,
    1.7269374896631615e-09, 3.878301660239547e-12, 3.1404009894636335e-15)
_SICI_SN = (-8.391678279103039e-11, 4.625917144270128e-08, -9.757593038436328e-06,
    0.0009769454381704354, -0.04134703162294066, 1.0)
_SICI_SD = (2.0326926619595193e-12, 1.279978911799433e-09, 4.418278428012189e-07,
    9.964121220438756e-05, 0.01420852393261499, 1.0)
_SICI_CN = (2.0252400238910228e-11, -1.3524950491579076e-08, 3.593250514199931e-06,
    -0.0004740072068734079, 0.028915965260755523, -1.0)
_SICI_CD = (4.077460400618806e-12, 3.067809975818878e-09, 1.2321035568588342e-06,
    0.00031744202477503275, 0.051002805623644606, 4.0)

def _sici_series(x):
  t = x * x
  si = x * _polyval(_SICI_SN, t) / _polyval(_SICI_SD, t)
  ci = np.euler_gamma + lax.log(x) + t * _polyval(_SICI_CN, t) / _polyval(_SICI_CD, t)
  return si, ci


def _sici_asymptotic(x):
  s, c = lax.sin(x), lax.cos(x)
  z = 1.0 / (x * x)
  lo = x < 8.0
  f = jnp.where(lo, _polyval(_SICI_FN4, z) / (x * _polyval(_SICI_FD4, z)),
                _polyval(_SICI_FN8, z) / (x * _polyval(_SICI_FD8, z)))
  g = jnp.where(lo, z * _polyval(_SICI_GN4, z) / _polyval(_SICI_GD4, z),
                z * _polyval(_SICI_GN8, z) / _polyval(_SICI_GD8, z))
  return 0.5 * np.pi - f * c - g * s, f * s - g * c


def sici(x: ArrayLike):
  """The sine and cosine integrals `Si(x) = ∫_0^x sin t / t dt` and
  `Ci(x) = γ + log x + ∫_0^x (cos t - 1) / t dt` (`scipy.special.sici`).

  Args:
    x: array-like, real.

  Returns:
    `(si, ci)`, each of the promoted dtype; Si is odd, Ci uses `|x|` (SciPy's real
    convention), `Ci(0) = -inf`, `Ci(-inf) = NaN`. Differentiable:
    `Si' = sin x / x`, `Ci' = cos x / x`.

  Raises:
    ValueError: for complex inputs.

  Algorithm: Cephes sici.c: rational series for `|x| <= 4`, the auxiliary functions f, g
  (two fits, split at 8) up to 1e9, and the leading asymptotic terms beyond.
  """
  x, = _promote_inexact("sici", x)
  if dtypes.is_complex(x.dtype):
    raise ValueError(f"Argument `x` to sici must be real-valued. Got dtype {x.dtype}.")
  return _sici(x)


@custom_jvp
@jit
def _sici(x):
  ax = lax.abs(x)
  one = _full_like(ax, 1)
  small = ax <= 4
  mid = (ax > 4) & (ax <= 1e9)
  si_s, ci_s = _sici_series(jnp.where(small & (ax > 0), ax, one))
  si_a, ci_a = _sici_asymptotic(jnp.where(mid, ax, 5.0 * one))
  big = jnp.where(mid | small, 2e9 * one, ax)
  si_b = jnp.where(jnp.isinf(big), _full_like(ax, np.pi / 2), np.pi / 2 - lax.cos(big) / big)
  ci_b = jnp.where(jnp.isinf(big), _full_like(ax, 0), lax.sin(big) / big)
  si = jnp.where(small, si_s, jnp.where(mid, si_a, si_b))
  ci = jnp.where(small, ci_s, jnp.where(mid, ci_a, ci_b))
  si = jnp.where(ax == 0, _full_like(ax, 0), si)
  ci = jnp.where(ax == 0, _full_like(ax, -np.inf), ci)
  si = jnp.sign(x) * si
  ci = jnp.where(jnp.isneginf(x), _full_like(ax, np.nan), ci)
  return si, ci


@_sici.defjvp
def _sici_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  return _sici(x), (t * jnp.sinc(x / np.pi), t * lax.cos(x) / x)


# ---------------------------------------------------------------------------
# Spence's function (Cephes spence.c)

_SPENCE_A = (4.6512858607399003e-05, 0.007315890452380947, 0.13384763957830903,
    0.8796913117545303, 2.7114985119655346, 4.256971560081218, 3.297713409852251, 1.0)
_SPENCE_B = (0.0006909904889125533, 0.02540437639325444, 0.2829748606025681,
    1.4117259775183106, 3.6380053334513707, 5.03278880143317, 3.547713409852251, 1.0)

def spence(x: ArrayLike):
  """Spence's function (the dilogarithm in SciPy's convention),
  `spence(x) = ∫_1^x log t / (1 - t) dt` (`scipy.special.spence`).

  Args:
    x: array-like of dtype float32 or float64, `x >= 0`.

  Returns:
    Same dtype and shape: `π²/6` at 0, 0 at 1, NaN for `x < 0`. Differentiable for
    `x > 0`.

  Raises:
    TypeError: for other dtypes (integers included), as JAX.

  Algorithm: Cephes spence.c: a rational approximation of `w` = `x - 1`, `1/x - 1` or `-x`
  with the reflection and inversion identities of the dilogarithm.
  """
  x = _float_only("spence", x)
  one = _full_like(x, 1)
  safe = jnp.where((x > 0) & (x != 1), x, 0.5 * one)
  inv = safe > 2
  y = jnp.where(inv, 1.0 / safe, safe)
  hi = y > 1.5
  lo = y < 0.5
  flip = inv | hi
  w = jnp.where(hi, 1.0 / y - 1.0, jnp.where(lo, -y, y - 1.0))
  r = -w * _polyval(_SPENCE_A, w) / _polyval(_SPENCE_B, w)
  r = jnp.where(lo, np.pi ** 2 / 6.0 - lax.log(y) * lax.log1p(-y) - r, r)
  r = jnp.where(flip, -0.5 * lax.log(y) ** 2 - r, r)
  r = jnp.where(x == 1, _full_like(x, 0), r)
  r = jnp.where(x == 0, _full_like(x, np.pi ** 2 / 6), r)
  return jnp.where(x < 0, _full_like(x, np.nan), r)


# ---------------------------------------------------------------------------
# Faddeeva, erfcx, Dawson, Fresnel, Owen's T


def _weideman_coefficients(n: int = 32) -> tuple[float, np.ndarray]:
  """The coefficients of Weideman's rational approximation of the Faddeeva function with
  n terms (J. A. C. Weideman, "Computation of the complex error function", SIAM J. Numer.
  Anal. 31 (1994), eq. (3.8)-(3.10)): a Fourier expansion of exp(-t²)(L² + t²) in
  `θ = 2 arctan(t / L)`, computed by FFT."""
  m = 2 * n
  k = np.arange(-m + 1, m)
  big_l = math.sqrt(n / math.sqrt(2))
  t = big_l * np.tan(k * np.pi / m / 2)
  f = np.concatenate([[0.0], np.exp(-t * t) * (big_l ** 2 + t * t)])
  a = np.real(np.fft.fft(np.fft.fftshift(f))) / (2 * m)
  return big_l, a[1:n + 1][::-1].copy()


_WOFZ_L, _WOFZ_COEFFS = _weideman_coefficients()


def _wofz_upper(z):
  big_l = _WOFZ_L
  iz = lax.complex(-jnp.imag(z), jnp.real(z))
  denom = big_l - iz
  zz = (big_l + iz) / denom
  p = _polyval(_WOFZ_COEFFS.tolist(), zz)
  return 2 * p / (denom * denom) + (1.0 / math.sqrt(math.pi)) / denom


@custom_jvp
@jit
def _wofz(z):
  upper = jnp.imag(z) >= 0
  w = _wofz_upper(jnp.where(upper, z, -z))
  return jnp.where(upper, w, 2 * jnp.exp(-z * z) - w)


_wofz.defjvps(lambda t, ans, z: t * (-2 * z * ans + 2j / math.sqrt(math.pi)))


def wofz(z: ArrayLike):
  """The Faddeeva function `w(z) = exp(-z²) erfc(-iz)` (`scipy.special.wofz`).

  Args:
    z: array-like; real inputs are promoted to complex (complex64, or complex128 with
      x64).

  Returns:
    Complex array of z's shape. Differentiable (holomorphic): `w' = -2z w + 2i/√π`.

  Algorithm: Weideman's rational approximation with 32 terms in the upper half plane and
  `w(z) = 2 exp(-z²) - w(-z)` in the lower (accuracy about 1e-13 relative near the real
  axis, less far into the lower half plane where `exp(-z²)` dominates).
  """
  check_arraylike("wofz", z)
  z, = promote_dtypes_inexact(z)
  z = jnp.asarray(z)
  if not dtypes.is_complex(z.dtype):
    z = z.astype(dtypes.complex128 if z.dtype == np.float64 else dtypes.complex64)
  return _wofz(z)


_ERFCX_ASYMPTOTIC = tuple(float((-1) ** k * np.prod(np.arange(1, 2 * k, 2)) / 2 ** k)
                          for k in range(9))   # (-1)^k (2k-1)!! / 2^k, A&S 7.1.23


def _erfcx_real(x):
  threshold = math.sqrt(math.log(float(dtypes.finfo(x.dtype).max)))
  nterms = 9 if x.dtype == np.float64 else 5
  large = x > threshold
  safe = jnp.where(large, _full_like(x, 1), x)
  direct = lax.exp(safe * safe) * lax.erfc(safe)
  t = 1.0 / (x * x)
  asym = _polyval(_ERFCX_ASYMPTOTIC[:nterms][::-1], t) / (x * math.sqrt(math.pi))
  return jnp.where(large, asym, direct)


@custom_jvp
@jit
def _erfcx(x):
  if x.dtype in (np.dtype(np.float32), np.dtype(np.float64)):
    return _erfcx_real(x)
  return _erfcx_real(x.astype(np.float32)).astype(x.dtype)


_erfcx.defjvps(lambda t, ans, x: t * (2 * x * ans - 2.0 / math.sqrt(math.pi)))


def erfcx(x: ArrayLike):
  """The scaled complementary error function `exp(x²) erfc(x)` (`scipy.special.erfcx`).

  Args:
    x: array-like, real or complex.

  Returns:
    The promoted dtype. Real: `exp(x²) erfc(x)` up to `sqrt(log(max float))`, then the
    asymptotic series `1/(x√π) Σ (-1)^k (2k-1)!! / (2x²)^k` (5 terms in float32, 9 in
    float64), as JAX; complex: `wofz(i x)`. Differentiable: `2x erfcx(x) - 2/√π`.
  """
  x, = _promote_inexact("erfcx", x)
  if dtypes.is_complex(x.dtype):
    return _wofz(lax.complex(-jnp.imag(x), jnp.real(x)))
  return _erfcx(x)


_DAWSN_AN = (1.1368149897175597e-11, 8.492622676674738e-10, 1.9443420417555306e-08,
    9.531517412544844e-07, 3.078283098749132e-06, 0.00035251336852028877,
    -0.0008501498467244109, 0.04226182230055466, -0.09174803717734524, 1.0)
_DAWSN_AD = (2.403720730667626e-11, 1.488646813684934e-09, 5.212652810105416e-08,
    1.2725847827318697e-06, 2.324902498207895e-05, 0.00032552474182605793,
    0.003488058146571626, 0.027944853119882897, 0.15887424196012057, 0.5749186294893204, 1.0)
_DAWSN_BN = (0.5089551564179009, -0.24475441814269785, 0.09415123353035344,
    -0.021871125514203903, 0.003662076123295692, -0.0004232091144603888,
    3.5964130479389666e-05, -2.1464035171996896e-06, 9.100107800763914e-08,
    -2.4027452082825098e-09, 3.592333854409284e-11)
_DAWSN_BD = (1.0, -0.6318398698733682, 0.2367067882282487, -0.053180636700322324,
    0.008480417185862954, -0.0009479967684866654, 7.810255929445524e-05,
    -4.558751532524426e-06, 1.8910035811142186e-07, -4.913246913319206e-09,
    7.184664032357345e-11)
_DAWSN_CN = (-0.5905928605347732, 0.6292352427243688, -0.17285897538038814,
    0.016483704782518965, -0.0004868276130204627)
_DAWSN_CD = (1.0, -2.698200571975449, 1.7327079904594784, -0.3937085822819395,
    0.03442789240412334, -0.0009736552260409412)

def _dawsn_impl(x):
  ax = lax.abs(x)
  one = _full_like(ax, 1)
  r1 = ax < 3.25
  r2 = (ax >= 3.25) & (ax < 6.25)
  a1 = jnp.where(r1, ax, one)
  v1 = a1 * _polyval(_DAWSN_AN, a1 * a1) / _polyval(_DAWSN_AD, a1 * a1)
  a2 = jnp.where(r2, ax, one)
  t2 = 1.0 / (a2 * a2)
  v2 = 0.5 / a2 * (1.0 + t2 * _polyval(_DAWSN_BN, t2) / _polyval(_DAWSN_BD, t2))
  a3 = jnp.where(ax >= 6.25, ax, one)
  t3 = 1.0 / (a3 * a3)
  v3 = 0.5 / a3 * (1.0 + t3 * _polyval(_DAWSN_CN, t3) / _polyval(_DAWSN_CD, t3))
  return jnp.sign(x) * jnp.where(r1, v1, jnp.where(r2, v2, v3))


@custom_jvp
@jit
def _dawsn(x):
  if x.dtype in (np.dtype(np.float32), np.dtype(np.float64)):
    return _dawsn_impl(x)
  return _dawsn_impl(x.astype(np.float32)).astype(x.dtype)


_dawsn.defjvps(lambda t, ans, x: t * (1.0 - 2.0 * x * ans))


def dawsn(x: ArrayLike):
  """Dawson's integral `D(x) = exp(-x²) ∫_0^x exp(t²) dt` (`scipy.special.dawsn`).

  Args:
    x: array-like, real.

  Returns:
    The promoted dtype; odd in x. Differentiable: `D' = 1 - 2x D`.

  Raises:
    ValueError: for complex inputs.

  Algorithm: Cephes dawsn.c: rational approximations on `|x| < 3.25`, `[3.25, 6.25)` and
  beyond (in `1/x²`).
  """
  x, = _promote_inexact("dawsn", x)
  _reject_complex("dawsn", x)
  return _dawsn(x)


_FRESNEL32_SN = (1.6476294637887e-09, -1.522754752581096e-07, 8.4247488085024e-06,
    -0.0003120693124703272, 0.007244727626597022, -0.09228055941124598, 0.5235987735681432)
_FRESNEL32_CN = (1.416802502367354e-08, -1.157231412229871e-06, 5.387223446683264e-05,
    -0.001604381798862293, 0.02818489036795073, -0.2467398198317899, 0.9999999760004487)
_FRESNEL32_FN = (-1903009855649.792, 135594238805.0252, -4158143148.511033, 73438484.63587323,
    -873235.6681548485, 8560.51546627547, -103.2877601091159, 2.999401847870011)
_FRESNEL32_GN = (-186084399762.465, 12783506733.93208, -377938771.3202229, 6492611.570598858,
    -77877.89623358162, 860.2931494734327, -14.93439396592284, 0.9999841934744914)
_FRESNEL64_SN = (-2991.8191940101983, 708840.0452577386, -62974148.62058625,
    2548908805.7337637, -44297951805.96978, 318016297876.5678)
_FRESNEL64_SD = (1.0, 281.3762688899943, 45584.78108065326, 5173438.887700964,
    419320245.8981112, 22441179564.534092, 607366389490.0846)
_FRESNEL64_CN = (-4.9884311457357354e-08, 9.504280628298596e-06, -0.0006451914356839651,
    0.018884331939670384, -0.20552590095501388, 1.0)
_FRESNEL64_CD = (3.99982968972496e-12, 9.154392157746574e-10, 1.2500186247959882e-07,
    1.2226278902417902e-05, 0.0008680295429417843, 0.04121420907221998, 1.0)
_FRESNEL64_FN = (0.4215435550436775, 0.1434079197807589, 0.011522095507358577,
    0.000345017939782574, 4.6361374928786735e-06, 3.055689837902576e-08,
    1.0230451416490724e-10, 1.7201074326816183e-13, 1.3428327623306275e-16,
    3.763297112699879e-20)
_FRESNEL64_FD = (1.0, 0.7515863983533789, 0.11688892585919138, 0.0064405152650885865,
    0.00015593440916415301, 1.8462756734893055e-06, 1.1269922476399903e-08,
    3.6014002958937136e-11, 5.887545336215784e-14, 4.5200143407412973e-17,
    1.2544323709001127e-20)
_FRESNEL64_GN = (0.5044420736433832, 0.1971028335255234, 0.018764858409257526,
    0.0006840793809153931, 1.1513882611188428e-05, 9.828524436884223e-08,
    4.4534441586175015e-10, 1.0826804113902088e-12, 1.375554606332618e-15,
    8.363544356306774e-19, 1.8695871016278324e-22)
_FRESNEL64_GD = (1.0, 1.4749575992512833, 0.33774898912002, 0.02536037414203388,
    0.0008146791071843061, 1.2754507566772912e-05, 1.0431458965757199e-07,
    4.6068072814652043e-10, 1.1027321506624028e-12, 1.3879653125957886e-15,
    8.391588162831187e-19, 1.8695871016278324e-22)

def _sincos_pi_half_sq(x):
  """`sin(π x²/2)`, `cos(π x²/2)`, with the argument reduced exactly (x² split into an
  integer and a fractional part modulo 4) so that large x keep their accuracy."""
  xf = jnp.floor(x)
  frac = x - xf
  # x² = xf² + 2 xf frac + frac²; reduce each part modulo 4 (π x²/2 has period 4 in x²).
  xf2 = jnp.fmod(xf * xf, 4.0)
  cross = 2.0 * xf * frac
  cross = cross - 4.0 * jnp.floor(cross / 4.0)
  r = jnp.fmod(xf2 + cross + frac * frac, 4.0)
  angle = 0.5 * np.pi * r
  return lax.sin(angle), lax.cos(angle)


@custom_jvp
@jit
def _fresnel(x):
  single = x.dtype != np.float64
  ax = lax.abs(x)
  x2 = ax * ax
  t = x2 * x2
  if single:
    s_small = ax * x2 * _polyval(_FRESNEL32_SN, t)
    c_small = ax * _polyval(_FRESNEL32_CN, t)
  else:
    s_small = ax * x2 * _polyval(_FRESNEL64_SN, t) / _polyval(_FRESNEL64_SD, t)
    c_small = ax * _polyval(_FRESNEL64_CN, t) / _polyval(_FRESNEL64_CD, t)
  sinpi, cospi = _sincos_pi_half_sq(ax)
  if single:
    c_large = s_large = _full_like(ax, 0.5)
  else:
    c_large = 0.5 + sinpi / (np.pi * ax)
    s_large = 0.5 - cospi / (np.pi * ax)
  pt = np.pi * x2
  u = 1.0 / (pt * pt)
  tt = 1.0 / pt
  if single:
    f = 1.0 - u * _polyval(_FRESNEL32_FN, u)
    g = tt * _polyval(_FRESNEL32_GN, u)
  else:
    f = 1.0 - u * _polyval(_FRESNEL64_FN, u) / _polyval(_FRESNEL64_FD, u)
    g = tt * _polyval(_FRESNEL64_GN, u) / _polyval(_FRESNEL64_GD, u)
  c_mid = 0.5 + (f * sinpi - g * cospi) / (np.pi * ax)
  s_mid = 0.5 - (f * cospi + g * sinpi) / (np.pi * ax)
  inf = jnp.isinf(x)
  small = x2 < 2.5625
  large = ax > 36974.0
  half = _full_like(ax, 0.5)
  s = jnp.where(inf, half, jnp.where(small, s_small, jnp.where(large, s_large, s_mid)))
  c = jnp.where(inf, half, jnp.where(small, c_small, jnp.where(large, c_large, c_mid)))
  neg = x < 0
  return jnp.where(neg, -s, s), jnp.where(neg, -c, c)


@_fresnel.defjvp
def _fresnel_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  sinpi, cospi = _sincos_pi_half_sq(x)
  return _fresnel(x), (sinpi * t, cospi * t)


def fresnel(x: ArrayLike):
  """The Fresnel integrals `S(x) = ∫_0^x sin(π t²/2) dt`, `C(x) = ∫_0^x cos(π t²/2) dt`
  (`scipy.special.fresnel`).

  Args:
    x: array-like, real (float16/bfloat16 are computed in float32).

  Returns:
    `(S, C)`, each of the promoted dtype; odd in x, `±1/2` at `±inf`. Differentiable:
    `S' = sin(π x²/2)`, `C' = cos(π x²/2)`.

  Raises:
    NotImplementedError: for complex inputs.

  Algorithm: Cephes fresnl.c (float64) and fresnlf.c (float32): power series for
  `x² < 2.5625`, the auxiliary functions f, g beyond, the limits past 36974.
  """
  x, = _promote_inexact("fresnel", x)
  if dtypes.is_complex(x.dtype):
    raise NotImplementedError("Support for complex-valued inputs is not implemented yet.")
  if x.dtype in (np.dtype(np.float32), np.dtype(np.float64)):
    return _fresnel(x)
  s, c = _fresnel(x.astype(np.float32))
  return s.astype(x.dtype), c.astype(x.dtype)


# Gauss-Legendre nodes and weights on [0, 1] for the even integrand of Owen's T (26 points
# on [-1, 1], the 13 positive ones): the nodes squared, the weights over 2π.
_GL_X, _GL_W = np.polynomial.legendre.leggauss(26)
_OWENS_T_PTS = tuple(float(v) for v in _GL_X[13:] ** 2)
_OWENS_T_WTS = tuple(float(v) for v in _GL_W[13:] / (2 * np.pi))


def _owens_t_quadrature(h, a):
  total = _full_like(h, 0)
  for p, w in zip(_OWENS_T_PTS, _OWENS_T_WTS):
    r = 1.0 + a * a * p
    total = total + w * jnp.exp(-0.5 * h * h * r) / r
  return a * total


@custom_jvp
@jit
def _owens_t(h, a):
  h = lax.abs(h)
  abs_a = lax.abs(a)
  root2 = math.sqrt(2.0)
  le1 = abs_a <= 1
  ma = jnp.where(le1, abs_a, 1.0 / abs_a)
  mh = jnp.where(le1, h, abs_a * h)
  res = _owens_t_quadrature(mh, ma)
  res = jnp.where(mh == 0, jnp.arctan(ma) / (2 * np.pi), res)
  res = jnp.where(ma == 1, 0.125 * lax.erfc(-mh / root2) * lax.erfc(mh / root2), res)
  nh = lax.erfc(h / root2)
  nah = lax.erfc(abs_a * h / root2)
  # T(h, a) = (Φ(h) + Φ(ah))/2 - Φ(h)Φ(ah) - T(ah, 1/a) - [h<0 terms], for |a| > 1.
  swapped = jnp.where(abs_a * h <= 0.67,
                      0.25 - 0.25 * lax.erf(h / root2) * lax.erf(abs_a * h / root2) - res,
                      0.25 * (nh + nah - nh * nah) - res)
  res = jnp.where(abs_a > 1, swapped, res)
  res = jnp.sign(a) * res
  return jnp.where(jnp.isnan(a) | jnp.isnan(h), _full_like(res, np.nan), res)


@_owens_t.defjvp
def _owens_t_jvp(primals, tangents):
  (h, a), (th, ta) = primals, tangents
  root2 = math.sqrt(2.0)
  d_h = -jnp.exp(-0.5 * h * h) * lax.erf(a * h / root2) / (2 * math.sqrt(2 * np.pi))
  d_a = jnp.exp(-0.5 * (a * a + 1) * h * h) / (2 * np.pi * (a * a + 1))
  return _owens_t(h, a), d_h * th + d_a * ta


def owens_t(h: ArrayLike, a: ArrayLike):
  """Owen's T function `T(h, a) = 1/(2π) ∫_0^a exp(-h²(1+x²)/2) / (1+x²) dx`
  (`scipy.special.owens_t`).

  Args:
    h, a: array-likes, real, broadcast together.

  Returns:
    The promoted dtype: even in h, odd in a. Differentiable in both.

  Algorithm: 26-point Gauss-Legendre quadrature of the integral for `|a| <= 1`, Owen's
  (1956) identity `T(h, a) = Φ-terms - T(ah, 1/a)` for `|a| > 1`, and the closed forms at
  `h = 0` and `a = 1`.
  """
  h, a = _promote_inexact("owens_t", h, a)
  return _owens_t(h, a)


# ---------------------------------------------------------------------------
# Confluent and Gauss hypergeometric functions


def _eps(x) -> float:
  return float(dtypes.finfo(x.dtype).eps)


def _sum_series(first, ratio, x, max_terms: int = 250, weight=None):
  """`Σ_k term_k` (times `weight(k)` if given) with `term_0 = 1` (or 0 with a weight) and
  `term_{k+1} = term_k * ratio(k)`, summed per element until a term is below eps relative
  to the sum or `max_terms` terms are used."""
  eps = _eps(x)
  one = _full_like(x, 1)
  serie0 = _full_like(x, 0) if weight is not None else one

  def body(st):
    serie, k, term = st
    serie = serie + (term * weight(k) if weight is not None else term)
    term = term * ratio(k)
    k = k + 1
    return (serie, k, term), lax.abs(term) > eps * lax.abs(serie)

  return _iterate(body, (serie0, one, first), jnp.ones(x.shape, bool), max_terms - 1)[0]


def _hyp1f1_series(a, b, x):
  return _sum_series(a / b * x, lambda k: (a + k) / (b + k) * x / (k + 1), x)


def _hyp1f1_asymptotic(a, b, x):
  serie = _sum_series((b - a) * (1 - a) / x, lambda k: (b - a + k) * (1 - a + k) / (k + 1) / x,
                      x)
  return gamma(b) / gamma(a) * lax.exp(x) * x ** (a - b) * serie


def hyp1f1(a: ArrayLike, b: ArrayLike, x: ArrayLike):
  """Kummer's confluent hypergeometric function `₁F₁(a; b; x) = Σ (a)_k / (b)_k x^k / k!`
  (`scipy.special.hyp1f1`).

  Args:
    a, b, x: array-likes, real, promoted and broadcast together.

  Returns:
    The promoted dtype: 1 where `a == 0`, `e^x` where `a == b`, `inf` where `b == 0`.
    Differentiable in all three (a, b by the differentiated series; x by
    `a/b ₁F₁(a+1; b+1; x)`).

  Raises:
    ValueError: for complex inputs.

  Algorithm: the power series for `|x| < 100` and the large-x asymptotic expansion
  (DLMF 13.7.2) beyond, each summed to the dtype's epsilon (at most 250 terms), as JAX.
  """
  a, b, x = _promote_inexact("hyp1f1", a, b, x)
  _reject_complex("hyp1f1", x)
  return _hyp1f1(a, b, x)


def _hyp1f1_impl(a, b, x):
  near = lax.abs(x) < 100
  one = _full_like(x, 1)
  series = _hyp1f1_series(a, b, jnp.where(near, x, one))
  asym = _hyp1f1_asymptotic(a, b, jnp.where(near, 200.0 * one, x))
  res = jnp.where(near, series, asym)
  res = jnp.where((b == 0) & (a != 0), _full_like(x, np.inf), res)
  res = jnp.where((a == b) & (a != 0), lax.exp(x), res)
  return jnp.where(a == 0, one, res)


_hyp1f1 = custom_jvp(jit(_hyp1f1_impl))


@jit
def _hyp1f1_da(a, b, x):
  return _sum_series(a / b * x, lambda k: (a + k) / (b + k) * x / (k + 1), x,
                     weight=lambda k: digamma(a + k) - digamma(a))


@jit
def _hyp1f1_db(a, b, x):
  return _sum_series(a / b * x, lambda k: (a + k) / (b + k) * x / (k + 1), x,
                     weight=lambda k: digamma(b) - digamma(b + k))


_hyp1f1.defjvps(lambda t, ans, a, b, x: t * _hyp1f1_da(a, b, x),
                lambda t, ans, a, b, x: t * _hyp1f1_db(a, b, x),
                lambda t, ans, a, b, x: t * a / b * _hyp1f1(a + 1, b + 1, x))


def _hyp2f1_series(a, b, c, x):
  return _sum_series(a * b / c * x, lambda k: (a + k) * (b + k) / (c + k) / (k + 1) * x, x)


def _hyp2f1_terminal(a, b, c, x):
  """The polynomial case: a (or b, swapped in) a non-positive integer."""
  eps = _eps(x) * 50
  ib = jnp.round(b)
  swap = (b < a) & (lax.abs(b - ib) < eps) & ~(
      (jnp.fmod(c, 1.0) == 0) & (c <= 0) & (c > b))
  a, b = jnp.where(swap, b, a), jnp.where(swap, a, b)
  n = lax.abs(jnp.round(a))
  n_max = jnp.max(n) if n.size else jnp.zeros((), n.dtype)

  def body(i, st):
    serie, term = st
    use = i <= n
    term = jnp.where(use, term * -(n - i + 1) / (c + i - 1) * (b + i - 1) / i * x, term)
    return jnp.where(use, serie + term, serie), term

  one = _full_like(x, 1)
  return _float_loop(jnp.ones((), x.dtype), n_max + 1, body, (one, one))[0]


def _hyp2f1_digamma_transform(a, b, c, x):
  """`₂F₁` near x = 1 when `c - a - b` is an integer (A&S 15.3.10-15.3.12, as Cephes'
  hyp2f1.c): the logarithmic series in `1 - x`."""
  rtol = _eps(x)
  d = c - a - b
  s = 1 - x
  rd = jnp.round(d)
  e = jnp.where(rd >= 0, d, -d)
  zero = _full_like(d, 0)
  d1 = jnp.where(rd >= 0, d, zero)
  d2 = jnp.where(rd >= 0, zero, d)
  ard = jnp.where(rd >= 0, rd, -rd)
  ax = lax.log(s)
  y = digamma(_full_like(x, 1)) + digamma(1.0 + e) - digamma(a + d1) - digamma(b + d1) - ax
  y = y / gamma(e + 1.0)
  p = (a + d1) * (b + d1) * s / gamma(e + 2.0)

  def body(st):
    p, y, t = st
    r = (digamma(1.0 + t) + digamma(1.0 + t + e) - digamma(a + t + d1)
         - digamma(b + t + d1) - ax)
    q = p * r
    y = y + q
    p = p * s * (a + t + d1) / (t + 1.0) * (b + t + d1) / (t + 1.0 + e)
    return (p, y, t + 1.0), lax.abs(q) >= rtol * lax.abs(y)

  active = lax.abs(y) * rtol <= lax.abs(y) + 1   # every element
  _, y, _ = _iterate(body, (p, y, _full_like(x, 1)), active, 249)

  # The finite sum for |c - a - b| = m > 0.
  m_max = jnp.max(ard) if ard.size else jnp.zeros((), ard.dtype)

  def fbody(i, st):
    p1, t1, y1 = st
    use = i < ard
    r = 1.0 - e + t1
    p_new = p1 * s * (a + t1 + d2) * (b + t1 + d2) / r / (t1 + 1.0)
    return (jnp.where(use, p_new, p1), jnp.where(use, t1 + 1.0, t1),
            jnp.where(use, y1 + p_new, y1))

  one = _full_like(x, 1)
  _, _, y1 = _float_loop(jnp.ones((), x.dtype), m_max, fbody, (one, _full_like(x, 0), one))
  gc = gamma(c)
  y1 = y1 * gamma(e) * gc / (gamma(a + d1) * gamma(b + d1))
  yy = y * gc / (gamma(a + d2) * gamma(b + d2))
  yy = jnp.where(jnp.fmod(ard, 2.0) != 0, -yy, yy)
  q = s ** rd
  summed = jnp.where(rd > 0, yy * q + y1, yy + y1 * q)
  return jnp.where(rd == 0, y * gc / (gamma(a) * gamma(b)), summed)


def _hyp2f1_terminal_or_series(a, b, c, x):
  eps = _eps(x) * 50
  d = c - a - b
  neg_int_a = (a <= 0) & (lax.abs(a - jnp.round(a)) < eps)
  neg_int_b = (b <= 0) & (lax.abs(b - jnp.round(b)) < eps)
  terminal = neg_int_a | neg_int_b
  near_one_int = (x > 0.9) & ~terminal & (lax.abs(d - jnp.round(d)) < eps)
  one = _full_like(x, 1)
  series = _hyp2f1_series(a, b, c, jnp.where(terminal | near_one_int, 0.5 * one, x))
  poly = _hyp2f1_terminal(jnp.where(terminal, a, -one), jnp.where(terminal, b, one),
                          jnp.where(terminal, c, one), x)
  trans = _hyp2f1_digamma_transform(
      jnp.where(near_one_int, a, one), jnp.where(near_one_int, b, one),
      jnp.where(near_one_int, c, 3.0 * one), jnp.where(near_one_int, x, 0.5 * one))
  return jnp.where(terminal, poly, jnp.where(near_one_int, trans, series))


def hyp2f1(a: ArrayLike, b: ArrayLike, c: ArrayLike, x: ArrayLike):
  """The Gauss hypergeometric function `₂F₁(a, b; c; x) = Σ (a)_k (b)_k / (c)_k x^k / k!`
  (`scipy.special.hyp2f1`), for `x <= 1`.

  Args:
    a, b, c, x: array-likes, real, promoted and broadcast together.

  Returns:
    The promoted dtype: 1 at `x = 0` or where `a` or `b` is 0 (c ≠ 0); `inf` where `c` is
    a non-positive integer, for `x > 1`, and at `x = 1` when `c - a - b <= 0`; Gauss's sum
    `Γ(c)Γ(c-a-b) / (Γ(c-a)Γ(c-b))` at `x = 1`. Differentiable in all four (a, b, c by
    the differentiated series; x by `ab/c ₂F₁(a+1, b+1; c+1; x)`).

  Algorithm: JAX's case analysis (after Cephes hyp2f1.c): Euler's transformation for
  `c - a - b <= -1`, closed forms for `b == c` or `a == c`, the terminating polynomial for
  a non-positive integer `a` or `b`, A&S 15.3.10-12 near `x = 1` when `c - a - b` is an
  integer, and the power series (at most 250 terms) otherwise.
  """
  a, b, c, x = _promote_inexact("hyp2f1", a, b, c, x)
  return _hyp2f1(a, b, c, x)


def _hyp2f1_impl(a, b, c, x):
  eps = _eps(x) * 50
  d = c - a - b
  s = 1 - x
  ca, cb = c - a, c - b
  int_d = lax.abs(d - jnp.round(d)) < eps
  one = _full_like(x, 1)
  inf = _full_like(x, np.inf)
  c_pole = (c == 0) | ((c < 0) & (jnp.fmod(c, 1.0) == 0))
  euler = (d <= -1) & ~(~int_d & (s < 0))
  # Euler's transformation ₂F₁(a, b; c; x) = (1-x)^(c-a-b) ₂F₁(c-a, c-b; c; x) where
  # c - a - b <= -1: one evaluation serves both cases.
  base = _hyp2f1_terminal_or_series(jnp.where(euler, ca, a), jnp.where(euler, cb, b), c,
                                    jnp.where(euler & (x == 1), 0.5 * one, x))
  res = jnp.where(x == 1, gamma(c) * gamma(d) / (gamma(ca) * gamma(cb)), base)
  res = jnp.where(x > 1, inf, res)
  res = jnp.where((x < 1) & (a == c), s ** (-b), res)
  res = jnp.where((x < 1) & (b == c), s ** (-a), res)
  res = jnp.where((d <= 0) & (x == 1), inf, res)
  res = jnp.where(euler, s ** d * base, res)
  res = jnp.where(c_pole, inf, res)
  return jnp.where((x == 0) | (((a == 0) | (b == 0)) & (c != 0)), one, res)


_hyp2f1 = custom_jvp(jit(_hyp2f1_impl))


def _hyp2f1_dparam(a, b, c, x, weight):
  return _sum_series(a * b / c * x, lambda k: (a + k) * (b + k) / (c + k) / (k + 1) * x, x,
                     weight=weight)


_hyp2f1.defjvps(
    lambda t, ans, a, b, c, x: t * _hyp2f1_dparam(
        a, b, c, x, lambda k: digamma(a + k) - digamma(a)),
    lambda t, ans, a, b, c, x: t * _hyp2f1_dparam(
        a, b, c, x, lambda k: digamma(b + k) - digamma(b)),
    lambda t, ans, a, b, c, x: t * _hyp2f1_dparam(
        a, b, c, x, lambda k: digamma(c) - digamma(c + k)),
    lambda t, ans, a, b, c, x: t * a * b / c * _hyp2f1(a + 1, b + 1, c + 1, x))


# ---------------------------------------------------------------------------
# Bessel functions of the first kind, spherical harmonics


def bessel_jn(z: ArrayLike, *, v: int, n_iter: int = 50):
  """Bessel functions of the first kind of orders `0 ... v`, `J_0(z) ... J_v(z)`
  (`scipy.special.jv` for integer orders, stacked).

  Args:
    z: array-like `T[*s]`, real.
    v: a concrete non-negative integer, the highest order.
    n_iter: concrete int, the starting order of the backward recurrence (larger is more
      accurate for larger |z|).

  Returns:
    `T[v + 1, *s]`. Differentiable in z (through the recurrence).

  Raises:
    ValueError: for complex inputs.
    ConcretizationTypeError: if `v` or `n_iter` is traced.

  Algorithm: Miller's backward recurrence `J_{k-1} = 2k/z J_k - J_{k+1}` from `n_iter`,
  normalized by `J_0 + 2 Σ J_{2k} = 1` (Abramowitz & Stegun 9.1.46, 9.12).
  """
  v = _concrete_int(v, "Argument v of bessel_jn.")
  n_iter = _concrete_int(n_iter, "Argument n_iter of bessel_jn.")
  check_arraylike("bessel_jn", z)
  z, = promote_dtypes_inexact(z)
  z = jnp.asarray(z)
  if dtypes.is_complex(z.dtype):
    raise ValueError("complex input not supported.")

  def step(carry, k):
    f0, f1, bs = carry
    f = 2.0 * (k + 1.0) * f1 / z - f0
    bs = jnp.where(jnp.fmod(k, 2.0) == 0, bs + 2.0 * f, bs)
    return (f1, f, bs), f

  init = (_full_like(z, 0), _full_like(z, 1e-16), _full_like(z, 0))
  ks = jnp.arange(n_iter + 1, dtype=z.dtype)
  (_, _, bs), fs = lax.scan(step, init, ks, reverse=True)
  return fs[:v + 1] / (bs - fs[0])[None]   # NB: equal ranks (rank promotion 'raise')


def _normalized_legendre(n_max: int, x):
  """`P̄_l^m(x)` for `0 <= m <= l <= n_max`, normalized so that
  `Y_l^m = P̄_l^m(cos θ) e^{imφ}` (with the Condon-Shortley phase), as a list of lists of
  arrays shaped like x: the standard three-term recurrence in l (e.g. Holmes &
  Featherstone, J. Geodesy 76 (2002), eq. 11-13)."""
  sx = jnp.sqrt(jnp.maximum(1.0 - x * x, 0.0))
  p = [[None] * (n_max + 1) for _ in range(n_max + 1)]   # p[m][l]
  p[0][0] = _full_like(x, 0.5 / math.sqrt(math.pi))
  for m in range(1, n_max + 1):
    p[m][m] = -math.sqrt((2 * m + 1) / (2 * m)) * sx * p[m - 1][m - 1]
  for m in range(n_max):
    p[m][m + 1] = math.sqrt(2 * m + 3) * x * p[m][m]
  for m in range(n_max + 1):
    for l in range(m + 2, n_max + 1):
      a = math.sqrt((4 * l * l - 1) / (l * l - m * m))
      b = math.sqrt(((l - 1) ** 2 - m * m) / (4 * (l - 1) ** 2 - 1))
      p[m][l] = a * (x * p[m][l - 1] - b * p[m][l - 2])
  return p


def sph_harm_y(n: ArrayLike, m: ArrayLike, theta: ArrayLike, phi: ArrayLike,
               diff_n: int | None = None, n_max: int | None = None):
  """Spherical harmonics `Y_n^m(θ, φ)` (`scipy.special.sph_harm_y`), with θ the polar
  (colatitude) angle and φ the azimuth, the Condon-Shortley phase, and
  `Y_n^{-m} = (-1)^m conj(Y_n^m)`.

  Args:
    n: integer array `int[k]`, the degrees, `n >= |m|`.
    m: integer array `int[k]`, the orders.
    theta: array `T[k]` (or a scalar), polar angles.
    phi: array `T[k]`, azimuths.
    diff_n: must be None (derivatives are not supported, as in JAX).
    n_max: the largest degree, a concrete int; defaults to `max(n)` (which needs `n`
      concrete).

  Returns:
    Complex array `complex[k]` (complex64, or complex128 with x64 and float64 angles).

  Raises:
    NotImplementedError: if `diff_n` is given.
    ConcretizationTypeError: if `n_max` is None and `n` is traced.

  Algorithm: the normalized associated Legendre functions `P̄_n^{|m|}(cos θ)` by the
  three-term recurrence in n for all orders up to `n_max`, selected per element, times
  `e^{i|m|φ}`.
  """
  if diff_n is not None:
    raise NotImplementedError(
        "The 'diff_n' argument to jax.scipy.special.sph_harm_y is not supported.")
  if n_max is None:
    if isinstance(n, core.Tracer):
      raise core.ConcretizationTypeError(
          "Abstract tracer value encountered where concrete value is expected: the `n_max` "
          "argument of `sph_harm_y` must be statically specified to use `sph_harm_y` "
          "within transformations.")
    n_max = int(np.max(np.asarray(n)))
  n_max = _concrete_int(n_max, "The `n_max` argument of sph_harm_y")
  theta, phi = promote_dtypes_inexact(theta, phi)
  theta, phi = jnp.asarray(theta), jnp.asarray(phi)
  if theta.ndim == 0:
    theta = theta.reshape(1)
  n, m = jnp.asarray(n), jnp.asarray(m)
  abs_m = jnp.abs(m)
  table = _normalized_legendre(n_max, jnp.cos(theta))
  val = _full_like(jnp.cos(theta) + 0 * phi, 0)
  for mm in range(n_max + 1):
    for l in range(mm, n_max + 1):
      val = jnp.where((abs_m == mm) & (n == l), table[mm][l], val)
  angle = abs_m.astype(phi.dtype) * phi
  harm = lax.complex(val * jnp.cos(angle), val * jnp.sin(angle))
  sign = jnp.where(jnp.fmod(abs_m, 2) == 0, 1.0, -1.0).astype(val.dtype)
  return jnp.where(m < 0, sign * jnp.conj(harm), harm)


# ---------------------------------------------------------------------------
# logsumexp

def _reduction_dims(ndim: int, axis: Any) -> tuple[int, ...]:
  if axis is None:
    return tuple(range(ndim))
  axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
  for a in axes:
    if not -ndim <= a < max(ndim, 1) or (ndim == 0 and a not in (0, -1)):
      raise ValueError(f"axis {a} is out of bounds for array of dimension {ndim}")
  out = tuple(sorted(int(a) % ndim if ndim else 0 for a in axes))
  if len(set(out)) != len(out):
    raise ValueError(f"repeated axis in logsumexp: {axis}")
  return out if ndim else ()


def logsumexp(a: Any, axis: Any = None, b: Any = None, keepdims: bool = False,
              return_sign: bool = False, where: Any = None):
  """`log(sum(b * exp(a)))` over `axis`, without overflow (JAX's `scipy.special.logsumexp`).

  Args:
    a: array `T[*s]`; integers and bools are promoted to the default float dtype.
    axis: an int, a tuple of ints (negative allowed) or None (all axes).
    b: optional scale factors broadcastable to `s`; entries where `b == 0` are left out
      (so `a = inf` there does not give NaN). Negative `b` may make the sum negative.
    keepdims: keep the reduced axes with size 1.
    return_sign: also return the sign of the sum; the first result is then
      `log(|sum|)`.
    where: optional boolean mask broadcastable to `s`: only True entries are summed.

  Returns:
    `T[s without axis]` (kept as size 1 with `keepdims`), or `(log|sum|, sign)` with
    `return_sign`. Without `return_sign`, a negative sum gives NaN; an empty or all-`-inf`
    sum gives `-inf`.

  Raises:
    ValueError: for an out-of-bounds or repeated axis.

  Algorithm: subtract the (finite) maximum before exponentiating, as
  `scipy.special.logsumexp` does; the maximum is added back after the log.

  Examples:
    >>> import numpy as np
    >>> logsumexp(np.array([1000., 1000.], np.float32))
    Array(1000.6932, dtype=float32)
  """
  if where is not None:
    a = jnp.where(where, a, 0)
  if b is not None:
    a_arr, b_arr = _promote_ranks(*promote_dtypes_inexact(a, b))
    a_arr = jnp.where(b_arr != 0, a_arr, -np.inf)
  else:
    a_arr, = promote_dtypes_inexact(a)
    b_arr = a_arr
  a_arr, b_arr = jnp.asarray(a_arr), jnp.asarray(b_arr)   # Python scalars under disable_jit
  dims = _reduction_dims(a_arr.ndim, axis)
  real = jnp.real(a_arr) if dtypes.is_complex(a_arr.dtype) else a_arr
  amax = jnp.max(real, axis=dims, keepdims=keepdims, where=where, initial=-np.inf)
  amax = lax.stop_gradient(lax.select(jnp.isfinite(amax), amax, _zeros_like(amax)))
  amax_with_dims = amax if keepdims else lax.expand_dims(amax, dims)
  # NB: lax's sub and mul broadcast the size-1 dimensions of the maximum and of b.
  exp_a = lax.exp(lax.sub(a_arr, amax_with_dims.astype(a_arr.dtype)))
  if b is not None:
    exp_a = lax.mul(exp_a, b_arr)
  sumexp = jnp.sum(exp_a, axis=dims, keepdims=keepdims, where=where)
  sign = lax.sign(sumexp)
  if return_sign or not dtypes.is_complex(a_arr.dtype):
    sumexp = jnp.abs(sumexp)
  out = lax.add(lax.log(sumexp), amax.astype(sumexp.dtype))
  if return_sign:
    return out, sign
  if b is not None and not dtypes.is_complex(out.dtype):
    out = jnp.where(sign < 0, jnp.array(np.nan, dtype=out.dtype), out)
  return out


def _promote_ranks(*args):
  """`args` of different ranks with leading size-1 dimensions added up to the highest rank
  (NumPy's rank promotion, the sizes are left to lax's broadcasting); the logsumexp helper."""
  ranks = {jnp.ndim(x) for x in args}
  if len(ranks - {0}) < 2:
    return args
  rank = max(ranks)
  return tuple(lax.expand_dims(x, tuple(range(rank - jnp.ndim(x)))) if jnp.ndim(x) < rank
               else x for x in args)


def _zeros_like(x):
  """Zeros of x's shape and dtype, weakly typed when x is: a constant for rank-0 `x` (as
  JAX's `lax.full_like` gives), else `_full_like`; the logsumexp helper."""
  if jnp.ndim(x):
    return _full_like(x, 0)
  zero = np.zeros((), x.dtype)[()]
  return lax.convert_element_type(zero, x.dtype, weak_type=True) if x.weak_type else zero
