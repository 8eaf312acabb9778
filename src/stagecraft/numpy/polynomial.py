"""Polynomials as coefficient arrays, highest power first (NumPy's legacy `poly*` API):
polyval, polyadd, polysub, polymul, polyder, polyint, vander, trim_zeros."""
from __future__ import annotations

import operator

import numpy as np

from stagecraft import core, lax
from stagecraft.core import Tracer
from stagecraft.numpy import lax_numpy as jnp
from stagecraft.numpy.lax_numpy import ArrayLike, _arr, _dtype, _ndim, _shape

__all__ = ["polyval", "polyadd", "polysub", "polymul", "polydiv", "polyder", "polyint",
           "polyfit", "poly", "vander", "trim_zeros"]


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
  p, x = (_arr(v) for v in jnp.promote_dtypes(_arr(p), _arr(x)))
  if _ndim(p) == 0:
    raise ValueError("polyval: p must have at least one dimension (the coefficients).")
  shape = jnp.broadcast_shapes(_shape(p)[1:], _shape(x))
  y = jnp.zeros(shape, _dtype(x))
  if x.weak_type and p.weak_type:
    y = lax.convert_element_type(y, _dtype(x), weak_type=True)
  for i in range(_shape(p)[0]):
    y = jnp.add(jnp.multiply(y, x), p[i])
  return y


def _pad_front(a, n):
  return jnp.pad(a, [(n - _shape(a)[0], 0)] + [(0, 0)] * (_ndim(a) - 1))


def polyadd(a1: ArrayLike, a2: ArrayLike):
  """The sum of two polynomials (the shorter padded with leading zeros)."""
  a1, a2 = (_arr(v) for v in jnp.promote_dtypes(_arr(a1), _arr(a2)))
  n = max(_shape(a1)[0], _shape(a2)[0])
  return jnp.add(_pad_front(a1, n), _pad_front(a2, n))


def polysub(a1: ArrayLike, a2: ArrayLike):
  """The difference of two polynomials (the shorter padded with leading zeros)."""
  a1, a2 = (_arr(v) for v in jnp.promote_dtypes(_arr(a1), _arr(a2)))
  n = max(_shape(a1)[0], _shape(a2)[0])
  return jnp.subtract(_pad_front(a1, n), _pad_front(a2, n))


def polymul(a1: ArrayLike, a2: ArrayLike, *, trim_leading_zeros: bool = False):
  """The product of two polynomials: the full convolution of their coefficients (inexact
  dtype).

  Raises:
    ConcretizationTypeError: for `trim_leading_zeros` with traced inputs.
  """
  a1, a2 = (_arr(v) for v in jnp.promote_dtypes_inexact(_arr(a1), _arr(a2)))
  if trim_leading_zeros and (_shape(a1)[0] > 1 or _shape(a2)[0] > 1):
    a1, a2 = trim_zeros(a1, "f"), trim_zeros(a2, "f")
  if _shape(a1)[0] == 0:
    a1 = jnp.zeros((1,), _dtype(a2))
  if _shape(a2)[0] == 0:
    a2 = jnp.zeros((1,), _dtype(a1))
  from stagecraft.numpy.contractions import convolve
  return convolve(a1, a2, mode="full")


def polyder(p: ArrayLike, m: int = 1):
  """The m-th derivative's coefficients (inexact dtype).

  Raises:
    ValueError: for negative `m`.
  """
  p, = (_arr(v) for v in jnp.promote_dtypes_inexact(_arr(p)))
  m = operator.index(m)
  if m < 0:
    raise ValueError("Order of derivative must be positive")
  if m == 0:
    return p
  n = _shape(p)[0]
  coeff = np.prod(np.arange(m, n)[None, :] - np.arange(m)[:, None], axis=0)[::-1]
  return jnp.multiply(jnp._slice_axis(p, 0, max(n - m, 0), 0),
                      jnp.asarray(coeff.astype(np.float64), _dtype(p)))


def polyint(p: ArrayLike, m: int = 1, k: ArrayLike | None = None):
  """The m-th antiderivative's coefficients, with integration constants `k` (scalar or
  `[m]`, default 0).

  Raises:
    ValueError: for negative `m` or `k` of the wrong size.
  """
  p, = (_arr(v) for v in jnp.promote_dtypes_inexact(_arr(p)))
  m = operator.index(m)
  if m < 0:
    raise ValueError("Order of integral must be positive (see polyder)")
  if m == 0:
    return p
  k = jnp.broadcast_to(jnp.asarray(0 if k is None else k, _dtype(p)), (m,))
  n = _shape(p)[0]
  grid = np.arange(n + m)[None, :] - np.arange(m)[:, None]
  coeff = np.prod(np.maximum(1, grid), axis=0)[::-1]
  return jnp.true_divide(jnp.concatenate([p, k]),
                         jnp.asarray(coeff.astype(np.float64), _dtype(p)))


def vander(x: ArrayLike, N: int | None = None, increasing: bool = False):
  """The Vandermonde matrix `[n, N]`: columns `x**(N-1), ..., x**0` (reversed when
  `increasing`).

  Raises:
    ValueError: if `x` is not 1-D or `N` is negative.
  """
  x = _arr(x)
  if _ndim(x) != 1:
    raise ValueError("x must be a one-dimensional array")
  N = _shape(x)[0] if N is None else operator.index(N)
  if N < 0:
    raise ValueError("N must be nonnegative")
  powers = np.arange(N)[::1 if increasing else -1]
  cols = [jnp.power(x, int(k)) for k in powers]
  return jnp.stack(cols, axis=1) if cols else jnp.zeros((_shape(x)[0], 0), _dtype(x))


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
  return jnp._slice_axis(_arr(filt), start, max(start, stop), 0)


def polydiv(u: ArrayLike, v: ArrayLike, *, trim_leading_zeros: bool = False):
  """Quotient and remainder of polynomial division `u / v` (inexact dtype; the remainder
  keeps u's length unless `trim_leading_zeros`, which needs concrete values)."""
  u, v = (_arr(a) for a in jnp.promote_dtypes_inexact(_arr(u), _arr(v)))
  m, n = _shape(u)[0] - 1, _shape(v)[0] - 1
  scale = jnp.divide(1.0, v[0])
  qs, r = [], u
  for k in range(0, m - n + 1):
    d = jnp.multiply(scale, r[k])
    qs.append(d)
    r = jnp.subtract(r, jnp.pad(jnp.multiply(d, v), [(k, m - n - k)]))
  q = jnp.stack(qs) if qs else jnp.zeros((1,), _dtype(u))
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
  from stagecraft.numpy import linalg
  if cov:
    raise NotImplementedError("jnp.polyfit(cov=True) is not supported yet.")
  x, y = (_arr(a) for a in jnp.promote_dtypes_inexact(_arr(x), _arr(y)))
  deg = operator.index(deg)
  if deg < 0:
    raise ValueError("expected deg >= 0")
  if _ndim(x) != 1:
    raise TypeError("expected 1D vector for x")
  if _shape(x)[0] == 0:
    raise TypeError("expected non-empty vector for x")
  if _ndim(y) < 1 or _ndim(y) > 2:
    raise TypeError("expected 1D or 2D array for y")
  if _shape(x)[0] != _shape(y)[0]:
    raise TypeError("expected x and y to have same length")
  n = _shape(x)[0]
  if rcond is None:
    rcond = n * float(np.finfo(np.dtype(_dtype(x))).eps)
  lhs = vander(x, deg + 1)
  rhs = y
  if w is not None:
    w = _arr(w)
    lhs = jnp.multiply(lhs, jnp.expand_dims(w, 1))
    rhs = jnp.multiply(rhs, w if _ndim(rhs) == 1 else jnp.expand_dims(w, 1))
  from stagecraft.numpy.reductions import sum as _sum
  scale = jnp.sqrt(_sum(jnp.multiply(lhs, lhs), axis=0))
  lhs = jnp.divide(lhs, scale)
  c, resids, rank, s = linalg.lstsq(lhs, rhs, rcond)
  c = jnp.transpose(jnp.divide(jnp.transpose(c), scale))
  return (c, resids, rank, s, rcond) if full else c


def poly(seq_of_zeros: ArrayLike):
  """The coefficients of the monic polynomial with the given roots (1-D input).

  Raises:
    NotImplementedError: for a 2-D input (it needs eigenvalues of general matrices).
  """
  a = _arr(seq_of_zeros)
  if _ndim(a) == 2:
    raise NotImplementedError("jnp.poly of a matrix needs jnp.linalg.eigvals (not "
                              "implemented).")
  if _ndim(a) != 1:
    raise ValueError("input must be 1d or non-empty square 2d array.")
  a, = (_arr(v) for v in jnp.promote_dtypes_inexact(a))
  from stagecraft.numpy.contractions import convolve
  out = jnp.ones((1,), _dtype(a))
  for k in range(_shape(a)[0]):
    out = convolve(out, jnp.stack([jnp.ones((), _dtype(a)), jnp.negative(a[k])]), mode="full")
  return out
