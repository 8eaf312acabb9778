"""Polynomials as coefficient arrays, highest power first (NumPy's legacy `poly*` API):
polyval, polyadd, polysub, polymul, polyder, polyint, vander, trim_zeros, roots."""
from __future__ import annotations

import operator

import numpy as np

from stagecraft import core, dtypes, lax
from stagecraft.lax import linalg as lax_linalg
from stagecraft.core import Tracer
from stagecraft.numpy import linalg, reductions, sorting
from stagecraft.numpy.array_constructors import asarray
from stagecraft.numpy.array_creation import ones, zeros
from stagecraft.numpy.contractions import convolve
from stagecraft.numpy.lax_numpy import pad
from stagecraft.numpy.manipulation import (atleast_1d, broadcast_shapes, broadcast_to,
                                           concatenate, expand_dims, stack, transpose)
from stagecraft.numpy.ufuncs import (add, divide, multiply, negative, power, sqrt, subtract,
                                     true_divide, where)
from stagecraft.numpy.util import (ArrayLike, as_array, check_concrete, dtype_of, ndim_of,
                                   promote_dtypes, promote_dtypes_inexact, shape_of, slice_axis)

__all__ = ["polyval", "polyadd", "polysub", "polymul", "polydiv", "polyder", "polyint",
           "polyfit", "poly", "vander", "trim_zeros", "roots"]


def polyval(p: ArrayLike, x: ArrayLike, *, unroll: int = 16):
  """Evaluates the polynomial with coefficients `p` (highest power first) at `x`.

  Args:
    p: `[k, *c]` coefficients (extra dimensions broadcast against `x`).
    x: points `[*q]`.
    unroll: accepted for compatibility (the loop is always unrolled: k steps).

  Returns:
    `p[0] * x**(k-1) + ... + p[k-1]`, shape `broadcast(c, q)`, promoted dtype.

  Algorithm: Horner's rule, `y = y * x + p[i]`.

  Examples:
    >>> from stagecraft import numpy as jnp
    >>> jnp.polyval(jnp.array([1, 2, 3]), jnp.array([0, 1, 2]))
    Array([ 3,  6, 11], dtype=int32)
  """
  p, x = (as_array(v) for v in promote_dtypes(as_array(p), as_array(x)))
  if ndim_of(p) == 0:
    raise ValueError("polyval: p must have at least one dimension (the coefficients).")
  shape = broadcast_shapes(shape_of(p)[1:], shape_of(x))
  y = zeros(shape, dtype_of(x))
  if x.weak_type and p.weak_type:
    y = lax.convert_element_type(y, dtype_of(x), weak_type=True)
  for i in range(shape_of(p)[0]):
    y = add(multiply(y, x), p[i])
  return y


def _pad_front(a, n):
  return pad(a, [(n - shape_of(a)[0], 0)] + [(0, 0)] * (ndim_of(a) - 1))


def polyadd(a1: ArrayLike, a2: ArrayLike):
  """The sum of two polynomials (the shorter padded with leading zeros)."""
  a1, a2 = (as_array(v) for v in promote_dtypes(as_array(a1), as_array(a2)))
  n = max(shape_of(a1)[0], shape_of(a2)[0])
  return add(_pad_front(a1, n), _pad_front(a2, n))


def polysub(a1: ArrayLike, a2: ArrayLike):
  """The difference of two polynomials (the shorter padded with leading zeros)."""
  a1, a2 = (as_array(v) for v in promote_dtypes(as_array(a1), as_array(a2)))
  n = max(shape_of(a1)[0], shape_of(a2)[0])
  return subtract(_pad_front(a1, n), _pad_front(a2, n))


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


def polyder(p: ArrayLike, m: int = 1):
  """The m-th derivative's coefficients (inexact dtype).

  Raises:
    ValueError: for negative `m`.
  """
  p, = (as_array(v) for v in promote_dtypes_inexact(as_array(p)))
  m = operator.index(m)
  if m < 0:
    raise ValueError("Order of derivative must be positive")
  if m == 0:
    return p
  n = shape_of(p)[0]
  coeff = np.prod(np.arange(m, n)[None, :] - np.arange(m)[:, None], axis=0)[::-1]
  return multiply(slice_axis(p, 0, max(n - m, 0), 0),
                      asarray(coeff.astype(np.float64), dtype_of(p)))


def polyint(p: ArrayLike, m: int = 1, k: ArrayLike | None = None):
  """The m-th antiderivative's coefficients, with integration constants `k` (scalar or
  `[m]`, default 0).

  Raises:
    ValueError: for negative `m` or `k` of the wrong size.
  """
  p, = (as_array(v) for v in promote_dtypes_inexact(as_array(p)))
  m = operator.index(m)
  if m < 0:
    raise ValueError("Order of integral must be positive (see polyder)")
  if m == 0:
    return p
  k = broadcast_to(asarray(0 if k is None else k, dtype_of(p)), (m,))
  n = shape_of(p)[0]
  grid = np.arange(n + m)[None, :] - np.arange(m)[:, None]
  coeff = np.prod(np.maximum(1, grid), axis=0)[::-1]
  return true_divide(concatenate([p, k]),
                         asarray(coeff.astype(np.float64), dtype_of(p)))


def vander(x: ArrayLike, N: int | None = None, increasing: bool = False):
  """The Vandermonde matrix `[n, N]`: columns `x**(N-1), ..., x**0` (reversed when
  `increasing`).

  Raises:
    ValueError: if `x` is not 1-D or `N` is negative.
  """
  x = as_array(x)
  if ndim_of(x) != 1:
    raise ValueError("x must be a one-dimensional array")
  N = shape_of(x)[0] if N is None else operator.index(N)
  if N < 0:
    raise ValueError("N must be nonnegative")
  powers = np.arange(N)[::1 if increasing else -1]
  cols = [power(x, int(k)) for k in powers]
  return stack(cols, axis=1) if cols else zeros((shape_of(x)[0], 0), dtype_of(x))


def trim_zeros(filt: ArrayLike, trim: str = "fb"):
  """`filt` without its leading ('f') and/or trailing ('b') zeros (concrete input only).

  Raises:
    ConcretizationTypeError: for traced input.
  """
  if isinstance(filt, Tracer):
    raise core.ConcretizationTypeError(
        "Abstract tracer value encountered where concrete value is expected: jnp.trim_zeros "
        "returns a data-dependent shape, so its input must be concrete.")
  host = np.asarray(filt)
  nz = np.flatnonzero(host)
  start = int(nz[0]) if nz.size and "f" in trim.lower() else (host.size if not nz.size else 0)
  stop = int(nz[-1]) + 1 if nz.size and "b" in trim.lower() else (
      host.size if nz.size or "f" not in trim.lower() else host.size)
  return slice_axis(as_array(filt), start, max(start, stop), 0)


def polydiv(u: ArrayLike, v: ArrayLike, *, trim_leading_zeros: bool = False):
  """Quotient and remainder of polynomial division `u / v` (inexact dtype; the remainder
  keeps u's length unless `trim_leading_zeros`, which needs concrete values)."""
  u, v = (as_array(a) for a in promote_dtypes_inexact(as_array(u), as_array(v)))
  m, n = shape_of(u)[0] - 1, shape_of(v)[0] - 1
  scale = divide(1.0, v[0])
  qs, r = [], u
  for k in range(0, m - n + 1):
    d = multiply(scale, r[k])
    qs.append(d)
    r = subtract(r, pad(multiply(d, v), [(k, m - n - k)]))
  q = stack(qs) if qs else zeros((1,), dtype_of(u))
  if trim_leading_zeros:
    r = trim_zeros(r, "f")
  return q, r


def polyfit(x: ArrayLike, y: ArrayLike, deg: int, rcond: float | None = None,
            full: bool = False, w: ArrayLike | None = None, cov: bool = False):
  """Least-squares polynomial fit of degree `deg` (coefficients highest power first); with
  `full`, also `(residuals, rank, singular_values, rcond)`.

  Raises:
    ValueError: for a negative degree or bad shapes. NotImplementedError: for `cov`.
  """
  if cov:
    raise NotImplementedError("jnp.polyfit(cov=True) is not supported yet.")
  x, y = (as_array(a) for a in promote_dtypes_inexact(as_array(x), as_array(y)))
  deg = operator.index(deg)
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
    rcond = n * float(np.finfo(np.dtype(dtype_of(x))).eps)
  lhs = vander(x, deg + 1)
  rhs = y
  if w is not None:
    w = as_array(w)
    lhs = multiply(lhs, expand_dims(w, 1))
    rhs = multiply(rhs, w if ndim_of(rhs) == 1 else expand_dims(w, 1))
  scale = sqrt(reductions.sum(multiply(lhs, lhs), axis=0))
  lhs = divide(lhs, scale)
  c, resids, rank, s = linalg.lstsq(lhs, rhs, rcond)
  c = transpose(divide(transpose(c), scale))
  return (c, resids, rank, s, rcond) if full else c


def poly(seq_of_zeros: ArrayLike):
  """The coefficients of the monic polynomial with the given roots (1-D input).

  Raises:
    NotImplementedError: for a 2-D input (it needs eigenvalues of general matrices).
  """
  a = as_array(seq_of_zeros)
  if ndim_of(a) == 2:
    raise NotImplementedError("jnp.poly of a matrix needs jnp.linalg.eigvals (not "
                              "implemented).")
  if ndim_of(a) != 1:
    raise ValueError("input must be 1d or non-empty square 2d array.")
  a, = (as_array(v) for v in promote_dtypes_inexact(a))
  out = ones((1,), dtype_of(a))
  for k in range(shape_of(a)[0]):
    out = convolve(out, stack([ones((), dtype_of(a)), negative(a[k])]), mode="full")
  return out


def _companion_eigvals(p):
  """The roots of the polynomial `p` (highest power first, `p[0] != 0`, length n + 1) as
  the eigenvalues of its companion matrix (ones on the subdiagonal, `-p[1:] / p[0]` in the
  first row): `C[n]` with C the complex dtype."""
  n = shape_of(p)[0] - 1
  first = expand_dims(divide(negative(p[1:]), p[0]), 0)
  below = (lax.concatenate([_eye(n - 1, dtype_of(p)), zeros((n - 1, 1), dtype_of(p))], 1)
           if n > 1 else zeros((0, n), dtype_of(p)))
  companion = lax.concatenate([first, below], 0)
  return lax_linalg.eig(companion, compute_left_eigenvectors=False,
                        compute_right_eigenvectors=False)[0]


def _eye(n, dt):
  i = lax.broadcasted_iota(np.int32, (n, n), 0)
  j = lax.broadcasted_iota(np.int32, (n, n), 1)
  return lax.convert_element_type(lax.eq(i, j), dt)


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
  """
  p = atleast_1d(as_array(p))
  p, = (as_array(v) for v in promote_dtypes_inexact(p))
  if ndim_of(p) != 1:
    raise ValueError("Input must be a rank-1 array.")
  cdt = dtypes.canonicalize_dtype(np.result_type(dtype_of(p), np.complex64))
  if shape_of(p)[0] < 2:
    return zeros((0,), cdt)
  is_zero = lax.eq(p, zeros((), dtype_of(p)))
  n_lead = where(reductions.all(is_zero), shape_of(p)[0],
                 reductions.argmin(is_zero))
  if strip_zeros:
    k = int(check_concrete(n_lead, "roots", "the number of leading zero coefficients "
                           "(use strip_zeros=False under jit)"))
    p = p[k:]
    if shape_of(p)[0] < 2:
      return zeros((0,), cdt)
    return _companion_eigvals(p)
  n = shape_of(p)[0]
  # Leading zeros moved to the end: the extra roots are zeros there, reported as NaN.
  shift = lax.rem(lax.convert_element_type(n_lead, np.int32), np.int32(n))
  idx = lax.rem(lax.add(lax.broadcasted_iota(np.int32, (n,), 0), shift), np.int32(n))
  rolled = p[idx]
  r = _companion_eigvals(where(reductions.all(is_zero), _unit_polynomial(p), rolled))
  # The zero roots (those of the moved zeros among them) go last, in a stable order.
  r = r[sorting.argsort(lax.convert_element_type(lax.eq(r, zeros((), dtype_of(r))), np.int32))]
  keep = lax.lt(lax.broadcasted_iota(np.int32, (n - 1,), 0),
                lax.sub(np.int32(n - 1), lax.convert_element_type(n_lead, np.int32)))
  return where(keep, r, np.asarray(complex(np.nan, np.nan), cdt)[()])


def _unit_polynomial(p):
  """`[1, 0, ..., 0]` in the dtype of `p` (a polynomial without roots)."""
  return lax.convert_element_type(lax.eq(lax.broadcasted_iota(np.int32, shape_of(p), 0),
                                         np.int32(0)), dtype_of(p))
