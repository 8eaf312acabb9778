"""Polynomials as coefficient arrays, highest power first (NumPy's legacy `poly*` API):
polyval, polyadd, polysub, polymul, polydiv, polyder, polyint, polyfit, poly, vander,
trim_zeros, roots. Staged as JAX 0.10's numpy stages them: most are jitted under their own
names (`polyval` a `scan`, `polyfit` an `lstsq`, `roots` the jitted `_roots_no_zeros` /
`_roots_with_zeros`)."""
from __future__ import annotations

import operator

import numpy as np

from stagecraft import core, dtypes, lax
from stagecraft.core import Tracer
from stagecraft.numpy import linalg, reductions
from stagecraft.numpy.array_constructors import array
from stagecraft.numpy.array_creation import arange, full, ones, zeros
from stagecraft.numpy.contractions import convolve, dot, outer
from stagecraft.numpy.lax_numpy import diag, roll
from stagecraft.numpy.manipulation import atleast_1d, concatenate, expand_dims
from stagecraft.numpy.ufuncs import maximum, negative, power, sqrt, true_divide, where
from stagecraft.numpy.util import (ArrayLike, as_array, check_concrete, const, dtype_of,
                                   ensure_arraylike, ndim_of, promote_dtypes,
                                   promote_dtypes_inexact, shape_of, slice_axis)
from stagecraft.pjit import jit

__all__ = ["polyval", "polyadd", "polysub", "polymul", "polydiv", "polyder", "polyint",
           "polyfit", "poly", "vander", "trim_zeros", "roots"]


@jit(static_argnames=("unroll",))
def polyval(p: ArrayLike, x: ArrayLike, *, unroll: int = 16):
  """Evaluates the polynomial with coefficients `p` (highest power first) at `x`.

  Jitted as JAX's (`jit[name=polyval]`, static `unroll`): Horner's rule `y = y * x + p[i]`
  as one `scan` over the coefficients.

  Args:
    p: `[k, *c]` coefficients (extra dimensions broadcast against `x`).
    x: points `[*q]`.
    unroll: the scan's unroll factor.

  Returns:
    `p[0] * x**(k-1) + ... + p[k-1]`, shape `broadcast(c, q)`, promoted dtype.

  Raises:
    TypeError: `p` or `x` not an array or scalar (a list).

  Examples:
    >>> from stagecraft import numpy as jnp
    >>> jnp.polyval(jnp.array([1, 2, 3]), jnp.array([0, 1, 2]))
    Array([ 3,  6, 11], dtype=int32)
  """
  p, x = ensure_arraylike("polyval", p, x)
  p, x = promote_dtypes(p, x)
  shape = lax.broadcast_shapes(shape_of(p)[1:], shape_of(x))
  y = lax.full_like(x, 0, shape=shape, dtype=dtype_of(x))
  y, _ = lax.scan(lambda y, c: (y * x + c, None), y, p, unroll=unroll)
  return y


@jit
def polyadd(a1: ArrayLike, a2: ArrayLike):
  """The sum of two polynomials `[n1]`, `[n2]` -> `[max(n1, n2)]` (promoted dtype): the
  shorter is added into the tail of the longer (`jit[name=polyadd]`, as JAX's).

  Raises:
    TypeError: an argument not an array or scalar (a list).
  """
  a1, a2 = ensure_arraylike("polyadd", a1, a2)
  a1, a2 = promote_dtypes(a1, a2)
  if shape_of(a2)[0] <= shape_of(a1)[0]:
    return a1.at[-shape_of(a2)[0]:].add(a2)
  return a2.at[-shape_of(a1)[0]:].add(a1)


@jit
def polysub(a1: ArrayLike, a2: ArrayLike):
  """The difference of two polynomials: `polyadd(a1, -a2)` (`jit[name=polysub]`, as JAX's).

  Raises:
    TypeError: an argument not an array or scalar (a list).
  """
  a1, a2 = ensure_arraylike("polysub", a1, a2)
  a1, a2 = promote_dtypes(a1, a2)
  return polyadd(a1, negative(a2))


def polymul(a1: ArrayLike, a2: ArrayLike, *, trim_leading_zeros: bool = False):
  """The product of two polynomials: the full convolution of their coefficients (inexact
  dtype).

  Raises:
    ConcretizationTypeError: for `trim_leading_zeros` with traced inputs.
  """
  a1, a2 = (as_array(v) for v in promote_dtypes_inexact(as_array(a1), as_array(a2)))
  if trim_leading_zeros and (shape_of(a1)[0] > 1 or shape_of(a2)[0] > 1):
    a1, a2 = trim_zeros(a1, "f"), trim_zeros(a2, "f")
  if shape_of(a1)[0] == 0:
    a1 = zeros((1,), dtype_of(a2))
  if shape_of(a2)[0] == 0:
    a2 = zeros((1,), dtype_of(a1))
  return convolve(a1, a2, mode="full")


@jit(static_argnames=("m",))
def polyder(p: ArrayLike, m: int = 1):
  """The m-th derivative's coefficients: `[n]` -> `[n - m]` (inexact dtype).

  Jitted as JAX's (`jit[name=polyder]`, static `m`): the factors `k (k-1) ... (k-m+1)` are
  products over an `arange` grid.

  Raises:
    ValueError: for negative `m`.
    TypeError: `p` not an array or scalar (a list).
  """
  p = ensure_arraylike("polyder", p)
  m = operator.index(check_concrete(m, "polyder", "'m' argument of jnp.polyder"))
  p, = promote_dtypes_inexact(p)
  if m < 0:
    raise ValueError("Order of derivative must be positive")
  if m == 0:
    return p
  dt = dtype_of(p)
  grid = arange(m, shape_of(p)[0], dtype=dt)[np.newaxis] - arange(m, dtype=dt)[:, np.newaxis]
  coeff = reductions.prod(grid, 0)
  return p[:-m] * coeff[::-1]


@jit(static_argnames=("m",))
def polyint(p: ArrayLike, m: int = 1, k: ArrayLike | None = None):
  """The m-th antiderivative's coefficients `[n + m]`, with integration constants `k`
  (scalar or `[m]`, default 0); inexact dtype (`jit[name=polyint]`, static `m`, as JAX's).

  Raises:
    ValueError: for negative `m` or `k` of the wrong size.
    TypeError: `p` or `k` not an array or scalar (a list).
  """
  m = operator.index(check_concrete(m, "polyint", "'m' argument of jnp.polyint"))
  p, k = ensure_arraylike("polyint", p, 0 if k is None else k)
  p, k = promote_dtypes_inexact(p, k)
  if m < 0:
    raise ValueError("Order of integral must be positive (see polyder)")
  k = atleast_1d(k)
  if shape_of(k)[0] == 1:
    k = full((m,), k[0])
  if shape_of(k) != (m,):
    raise ValueError("k must be a scalar or a rank-1 array of length 1 or m.")
  if m == 0:
    return p
  dt = dtype_of(p)
  grid = (arange(shape_of(p)[0] + m, dtype=dt)[np.newaxis]
          - arange(m, dtype=dt)[:, np.newaxis])
  coeff = reductions.prod(maximum(1, grid), 0)[::-1]
  return true_divide(concatenate((p, k)), coeff)


@jit(static_argnames=("N", "increasing"))
def vander(x: ArrayLike, N: int | None = None, increasing: bool = False):
  """The Vandermonde matrix `[n, N]`: columns `x**(N-1), ..., x**0` (reversed when
  `increasing`); one `pow` of `x[:, None]` by an iota of exponents (`jit[name=vander]`, as
  JAX's).

  Raises:
    ValueError: if `x` is not 1-D or `N` is negative.
    TypeError: `x` not an array or scalar (a list).
  """
  x = ensure_arraylike("vander", x)
  if ndim_of(x) != 1:
    raise ValueError("x must be a one-dimensional array")
  N = shape_of(x)[0] if N is None else operator.index(
      check_concrete(N, "vander", "'N' argument of jnp.vander()"))
  if N < 0:
    raise ValueError("N must be nonnegative")
  iota = lax.iota(dtype_of(x), N)
  if not increasing:
    iota = lax.sub(const(iota, N - 1), iota)
  return power(x[..., None], expand_dims(iota, tuple(range(ndim_of(x)))))


def trim_zeros(filt: ArrayLike, trim: str = "fb", axis: int | tuple | None = None):
  """`filt` without its leading ('f') and/or trailing ('b') all-zero slices along `axis`
  (an int, a tuple of ints, or None: every axis), as JAX's; concrete input only.

  Raises:
    TypeError: `filt` is not an array or scalar (a list: JAX's message).
    ConcretizationTypeError: for traced input.
    ValueError: an axis out of range.
  """
  ensure_arraylike("trim_zeros", filt)
  if isinstance(filt, Tracer):
    raise core.ConcretizationTypeError(
        "Abstract tracer value encountered where concrete value is expected: jnp.trim_zeros "
        "returns a data-dependent shape, so its input must be concrete.")
  x = as_array(filt)
  host = np.asarray(x)
  nd = host.ndim
  axes = range(nd) if axis is None else (axis,) if isinstance(axis, int) else tuple(axis)
  axes = {int(a) + nd if int(a) < 0 else int(a) for a in axes}
  if any(not 0 <= a < nd for a in axes):
    raise ValueError(f"trim_zeros: axis {axis} is out of bounds for array of dimension "
                     f"{nd}")
  trim = trim.lower()
  if not axes or ("f" not in trim and "b" not in trim):
    return x
  index = []
  for ax in range(nd):
    if ax not in axes:
      index.append(slice(None))
      continue
    mask = host.any(axis=tuple(i for i in range(nd) if i != ax))
    if not mask.any():
      index.append(slice(0, 0))
      continue
    nz = np.flatnonzero(mask)
    index.append(slice(int(nz[0]) if "f" in trim else None,
                       int(nz[-1]) + 1 if "b" in trim else None))
  return x[tuple(index)]


def polydiv(u: ArrayLike, v: ArrayLike, *, trim_leading_zeros: bool = False):
  """Quotient `[max(m - n + 1, 1)]` and remainder `[m + 1]` of the polynomial division
  `u / v` (`u`: `[m + 1]`, `v`: `[n + 1]`), inexact dtype, by long division as JAX's (not
  jitted; one `.at[].set` and one `.at[].add` per quotient term).

  Args:
    trim_leading_zeros: strip the remainder's leading entries smaller than `sqrt(eps)`
      (needs concrete values).

  Raises:
    TypeError: `u` or `v` not an array or scalar (a list).
    ConcretizationTypeError: `trim_leading_zeros` with traced values.
  """
  u, v = ensure_arraylike("polydiv", u, v)
  u, v = promote_dtypes_inexact(u, v)
  m, n = shape_of(u)[0] - 1, shape_of(v)[0] - 1
  scale = 1. / v[0]
  q = zeros(max(m - n + 1, 1), dtype=dtype_of(u))
  for k in range(0, m - n + 1):
    d = scale * u[k]
    q = q.at[k].set(d)
    u = u.at[k:k + n + 1].add(-d * v)
  if trim_leading_zeros:
    host = np.asarray(check_concrete(u, "polydiv", "the remainder (trim_leading_zeros)"))
    small = np.abs(host) < np.sqrt(np.finfo(host.dtype).eps)
    if small.all():
      return q, zeros((0,), dtype_of(u))
    u = u[int(np.argmin(small)):]
  return q, u


@jit(static_argnames=("deg", "rcond", "full", "cov"))
def polyfit(x: ArrayLike, y: ArrayLike, deg: int, rcond: float | None = None,
            full: bool = False, w: ArrayLike | None = None, cov: bool | str = False):
  """Least-squares polynomial fit of degree `deg`, as JAX's (`jit[name=polyfit]`, static
  `deg`, `rcond`, `full`, `cov`): `lstsq` of the column-scaled Vandermonde matrix.

  Args:
    x: sample points `[n]`; y: values `[n]` or `[n, k]` (k fits at once).
    deg: the degree. rcond: `lstsq`'s cutoff (default `n * eps`).
    full: also return `(residuals, rank, singular_values, rcond)`.
    w: weights `[n]` applied to the residuals.
    cov: also return the covariance `[deg + 1, deg + 1]` (`[deg + 1, deg + 1, k]` for 2-D
      `y`), scaled by `residuals / (n - deg - 1)` unless `cov='unscaled'`.

  Returns:
    The coefficients `[deg + 1]` (`[deg + 1, k]`), highest power first, inexact dtype; a
    tuple with `full` or `cov`.

  Raises:
    ValueError: for a negative degree, or a scaled `cov` with `n <= deg + 1`.
    TypeError: for bad shapes of `x`, `y` or `w`, or non-array arguments.
  """
  if w is None:
    x, y = ensure_arraylike("polyfit", x, y)
  else:
    x, y, w = ensure_arraylike("polyfit", x, y, w)
  deg = int(check_concrete(deg, "polyfit", "deg"))
  order = deg + 1
  if deg < 0:
    raise ValueError("expected deg >= 0")
  if ndim_of(x) != 1:
    raise TypeError("expected 1D vector for x")
  if shape_of(x)[0] == 0:
    raise TypeError("expected non-empty vector for x")
  if ndim_of(y) < 1 or ndim_of(y) > 2:
    raise TypeError("expected 1D or 2D array for y")
  if shape_of(x)[0] != shape_of(y)[0]:
    raise TypeError("expected x and y to have same length")
  n = shape_of(x)[0]
  if rcond is None:
    rcond = n * float(dtypes.finfo(dtype_of(x)).eps)
  rcond = float(rcond)
  lhs = vander(x, order)
  rhs = y
  if w is not None:
    w, = promote_dtypes_inexact(w)
    if ndim_of(w) != 1:
      raise TypeError("expected a 1-d array for weights")
    if shape_of(w)[0] != shape_of(y)[0]:
      raise TypeError("expected w and y to have the same length")
    lhs = lhs * w[:, np.newaxis]
    rhs = rhs * (w[:, np.newaxis] if ndim_of(rhs) == 2 else w)
  scale = sqrt(reductions.sum(lhs * lhs, axis=0))
  lhs = lhs / scale[np.newaxis, :]
  c, resids, rank, s = linalg.lstsq(lhs, rhs, rcond)
  c = (c.T / scale[np.newaxis, :]).T if ndim_of(c) > 1 else c / scale
  if full:
    return c, resids, rank, s, as_array(rcond)
  if cov:
    vbase = linalg.inv(dot(lhs.T, lhs))
    vbase = vbase / outer(scale, scale)
    if cov == "unscaled":
      fac = array(1.0)
    else:
      if n <= order:
        raise ValueError("the number of data points must exceed order to scale the "
                         "covariance matrix")
      fac = resids / (n - order)
    if ndim_of(y) == 1:
      return c, vbase * atleast_1d(fac)[np.newaxis]
    return c, vbase[:, :, np.newaxis] * atleast_1d(fac)[np.newaxis, np.newaxis, :]
  return c


@jit
def poly(seq_of_zeros: ArrayLike):
  """The coefficients `[n + 1]` of the monic polynomial with the given roots `[n]` (or with
  the eigenvalues of a square matrix `[n, n]` as roots); inexact dtype (complex for a
  matrix). Jitted as JAX's (`jit[name=poly]`): one full `convolve` per root.

  Raises:
    ValueError: for an input neither 1-D nor a non-empty square matrix.
    TypeError: the input not an array or scalar (a list).
  """
  a = ensure_arraylike("poly", seq_of_zeros)
  a, = promote_dtypes_inexact(a)
  a = atleast_1d(a)
  sh = shape_of(a)
  if len(sh) == 2 and sh[0] == sh[1] and sh[0] != 0:
    a = linalg.eigvals(a)
  if ndim_of(a) != 1:
    raise ValueError("input must be 1d or non-empty square 2d array.")
  dt = dtype_of(a)
  if shape_of(a)[0] == 0:
    return ones((), dtype=dt)
  out = ones((1,), dtype=dt)
  for k in range(shape_of(a)[0]):
    # NB: a strongly typed 1 (stagecraft's `array` would convert a weak one after broadcasting)
    out = convolve(out, array([np.ones((), dt)[()], -a[k]], dtype=dt), mode="full")
  return out


def _complex_dtype(dt):
  """The complex dtype with `dt`'s precision (complex64 for float32 and narrower)."""
  return dtypes.canonicalize_dtype(np.result_type(dt, np.complex64))


@jit
def _roots_no_zeros(p):
  """The roots `C[n - 1]` of the polynomial `p` (`[n]`, `p[0] != 0`) as the eigenvalues of
  its companion matrix (ones on the subdiagonal, `-p[1:] / p[0]` in the first row); jitted
  under this name, as JAX's."""
  cdt = _complex_dtype(dtype_of(p))
  if shape_of(p)[0] < 2:
    return array([], dtype=cdt)
  a = diag(ones((shape_of(p)[0] - 2,), dtype_of(p)), -1)
  a = a.at[0, :].set(-p[1:] / p[0])
  return linalg.eigvals(a)


@jit
def _roots_with_zeros(p, num_leading_zeros):
  """The roots of `p` (`[n]`) with its `num_leading_zeros` (traced) leading zeros rolled to
  the end: their extra zero roots are sorted last and reported as NaN; jitted under this
  name, as JAX's."""
  n = shape_of(p)[0]
  # An all-zero polynomial becomes the constant 1 (no roots).
  p = where(num_leading_zeros == n, 1.0, p)
  r = _roots_no_zeros(roll(p, -num_leading_zeros))
  r = lax.sort_key_val(lax.eq(r, const(r, 0)), r)[1]
  k = shape_of(r)[0]
  return where(arange(k) < k - num_leading_zeros, r, complex(np.nan, np.nan))


def roots(p: ArrayLike, *, strip_zeros: bool = True):
  """The roots of the polynomial with coefficients `p` (highest power first), as
  `numpy.roots`: the eigenvalues of the companion matrix (LAPACK geev, CPU only).

  Args:
    p: 1-D array of coefficients (promoted to an inexact dtype).
    strip_zeros: drop leading zero coefficients first (they must be concrete); with False,
      the roots they would remove are NaN (a traceable form with a fixed result size).

  Returns:
    Complex array `C[n]` of the roots (`n = len(p) - 1` less the stripped zeros; empty for
    fewer than 2 coefficients).

  Raises:
    ValueError: if `p` is not 1-D.
    ConcretizationTypeError: `strip_zeros` with traced coefficients.
    TypeError: `p` not an array or scalar (a list).
  """
  p = ensure_arraylike("roots", p)
  p, = promote_dtypes_inexact(p)
  p = atleast_1d(p)
  if ndim_of(p) != 1:
    raise ValueError("Input must be a rank-1 array.")
  if shape_of(p)[0] < 2:
    return array([], dtype=_complex_dtype(dtype_of(p)))
  n = shape_of(p)[0]
  num_leading_zeros = where(reductions.all(p == 0), n, reductions.argmin(p == 0))
  if strip_zeros:
    if isinstance(num_leading_zeros, Tracer) and num_leading_zeros.to_concrete_value() is None:
      raise core.ConcretizationTypeError(
          f"Abstract tracer value encountered where concrete value is expected: traced array "
          f"with shape {num_leading_zeros.aval.str_short(False)}\nThe error occurred in the "
          f"jnp.roots() function. To use this within a JIT-compiled context, pass "
          f"strip_zeros=False, but be aware that leading zeros will result in some returned "
          f"roots being set to NaN.")
    k = int(num_leading_zeros)
    return _roots_no_zeros(p[k:])
  return _roots_with_zeros(p, num_leading_zeros)
