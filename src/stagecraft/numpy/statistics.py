"""Order statistics and data summaries: quantile, percentile, median (and their NaN-ignoring
forms), cov, corrcoef, histogram, histogram_bin_edges, bincount, digitize, interp.

Semantics follow JAX's numpy: quantiles sort along the reduced axes (`lax.sort`) and
interpolate between the two nearest order statistics (NumPy's default 'linear' method and
'lower', 'higher', 'midpoint', 'nearest'); counts are computed by comparing every element
with every bin, so no scatter is needed."""
from __future__ import annotations

import builtins
import math
import operator
from typing import Any, Sequence

import numpy as np

from stagecraft import core, dtypes, lax
from stagecraft.core import Tracer
from stagecraft.numpy import reductions
from stagecraft.numpy.array_constructors import asarray
from stagecraft.numpy.array_creation import full, ones, ones_like, zeros, zeros_like
from stagecraft.numpy.contractions import dot
from stagecraft.numpy.indexing import take_along_axis, take_axis
from stagecraft.numpy.lax_numpy import astype, diff, linspace
from stagecraft.numpy.manipulation import (atleast_2d, concatenate, diagonal, expand_dims, flip,
                                           moveaxis, ravel, reshape, squeeze, stack, transpose)
from stagecraft.numpy.sorting import searchsorted
from stagecraft.numpy.ufuncs import (absolute, add, clip, conjugate, divide, equal, greater,
                                     greater_equal, imag, isnan, less, less_equal, logical_and,
                                     logical_not, logical_or, maximum, multiply, real, remainder,
                                     sqrt, subtract, true_divide, where)
from stagecraft.numpy.util import (ArrayLike, as_array, check_concrete, const, dtype_of, ndim_of,
                                   promote_dtypes_inexact, reduction_axes, shape_of, slice_axis,
                                   to_inexact_dtype)

__all__ = ["quantile", "percentile", "median", "nanquantile", "nanpercentile", "nanmedian",
           "cov", "corrcoef", "histogram", "histogram_bin_edges", "histogram2d", "histogramdd",
           "bincount", "digitize", "interp"]

_METHODS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(name, a, q, axis, method, keepdims, squash_nans):
  if method not in _METHODS:
    raise ValueError("method can only be 'linear', 'lower', 'higher', 'midpoint', or "
                     "'nearest'")
  # NB: a and q promote separately: positions and weights are computed in q's dtype, the
  # result has a's (strongly typed), as in JAX's numpy.
  a, = promote_dtypes_inexact(as_array(a))
  q, = promote_dtypes_inexact(as_array(q))
  a, q = as_array(a), as_array(q)
  if dtypes.is_complex(dtype_of(a)):
    raise ValueError("quantile does not support complex input, as the operation is poorly "
                     "defined.")
  if ndim_of(q) > 1:
    raise ValueError(f"q must be have rank <= 1, got shape {shape_of(q)}")
  nd = ndim_of(a)
  axes = reduction_axes(axis, nd, name)
  keep_shape = tuple(1 if i in axes else d for i, d in enumerate(shape_of(a)))
  kept = [i for i in range(nd) if i not in axes]
  # The reduced axes become one trailing axis.
  a = transpose(a, (*kept, *axes)) if nd else a
  rest = tuple(shape_of(a)[:len(kept)])
  n = math.prod(shape_of(a)[len(kept):])
  if n == 0 and math.prod(shape_of(q)) != 0:
    # No element to take a quantile of: JAX's errors (its gather of one element fails
    # statically; nanquantile's fails only when there are results, and indexes a scalar
    # one first).
    if squash_nans and math.prod(rest) == 0:
      # An empty result: nothing to compute (a constant, so a zero derivative).
      return lax.full(shape_of(q) + (keep_shape if keepdims else rest), np.nan, dtype_of(a))
    if squash_nans and not rest and not keepdims:
      raise IndexError("index is out of bounds for axis 0 with size 0")
    else:
      raise TypeError("Slice size at index 0 in gather op is out of range, must be "
                      "within [0, 0 + 1), got 1.")
  a = reshape(a, (*rest, n))
  qdt = dtype_of(q)
  if squash_nans:
    a = lax.sort(a, dimension=-1)   # NaNs sort last
    counts = reductions.sum(lax.bitwise_not(isnan(a)), axis=-1, dtype=qdt)
  else:
    a = where(reductions.any(isnan(a), axis=-1, keepdims=True), const(a, np.nan), a)
    a = lax.sort(a, dimension=-1)
    counts = full(rest, n, qdt)
  # Positions per (q, slice): q_[*q, *rest].
  qb = lax.broadcast_in_dim(q, (*shape_of(q), *rest), tuple(range(ndim_of(q))))
  cb = lax.broadcast_in_dim(counts, (*shape_of(q), *rest), tuple(range(ndim_of(q), ndim_of(qb))))
  pos = lax.mul(qb, lax.sub(cb, const(cb, 1)))
  low, high = lax.floor(pos), lax.ceil(pos)
  high_w = lax.sub(pos, low)
  low_w = lax.sub(const(high_w, 1), high_w)
  top = lax.max(lax.sub(cb, const(cb, 1)), const(cb, 0))
  low = lax.max(const(low, 0), lax.min(low, top))
  high = lax.max(const(high, 0), lax.min(high, top))
  idt = dtypes.default_int_dtype()
  low_i, high_i = lax.convert_element_type(low, idt), lax.convert_element_type(high, idt)
  # Gather along the sorted axis: indices [*rest, m] with m = prod(q's shape).
  m = math.prod(shape_of(q))

  def gather(idx):
    idx = reshape(moveaxis(reshape(idx, (m, *rest)), 0, -1), (*rest, m))
    if n == 0:
      return full((*rest, m), np.nan, dtype_of(a))
    vals = take_along_axis(a, idx, axis=len(rest), mode="clip")
    return reshape(moveaxis(vals, -1, 0), (*shape_of(q), *rest))

  lo_v, hi_v = gather(low_i), gather(high_i)
  if method == "linear":
    lo_v, hi_v = lax.convert_element_type(lo_v, qdt), lax.convert_element_type(hi_v, qdt)
    out = lax.add(lax.mul(lo_v, low_w), lax.mul(hi_v, high_w))
  elif method == "lower":
    out = lo_v
  elif method == "higher":
    out = hi_v
  elif method == "nearest":
    out = lax.select(lax.le(high_w, const(high_w, 0.5)), lo_v, hi_v)
  else:
    out = lax.mul(lax.add(lo_v, hi_v), const(lo_v, 0.5))
  if squash_nans:
    out = where(lax.eq(cb, const(cb, 0)), const(out, np.nan), out)
  if keepdims:
    out = reshape(out, (*shape_of(q), *keep_shape))
  return lax.convert_element_type(out, dtype_of(a))


def quantile(a: ArrayLike, q: ArrayLike, axis: int | tuple[int, ...] | None = None,
             out: None = None, overwrite_input: bool = False, method: str = "linear",
             keepdims: bool = False, *, interpolation: str | None = None):
  """The `q`-th quantiles of `a` over `axis`.

  Args:
    a: array `T[*s]`; integers promote to the default float.
    q: quantiles in [0, 1], a scalar or `[k]` (may be traced).
    axis: axes to reduce (None: all).
    method: 'linear' (default), 'lower', 'higher', 'midpoint' or 'nearest' (ties at .5
      take the lower value, as JAX's numpy).
    keepdims: keep reduced axes with size 1.

  Returns:
    Array `[*q.shape, *reduced s]` of the inexact dtype; NaN for slices containing NaN.

  Raises:
    ValueError: for complex input, an unknown method, or `q` of rank > 1.
    TypeError: when the reduced axes are empty and `q` is not (JAX's error; `nanquantile`
      instead gives an empty result for an empty output and IndexError for a scalar one,
      as JAX's).

  Examples:
    >>> from stagecraft import numpy as jnp
    >>> jnp.quantile(jnp.array([1., 2., 3., 4.]), 0.5)
    Array(2.5, dtype=float32)
  """
  _check_args("quantile", out, overwrite_input, interpolation)
  return _quantile("quantile", a, q, axis, method, keepdims, False)


def nanquantile(a: ArrayLike, q: ArrayLike, axis: int | tuple[int, ...] | None = None,
                out: None = None, overwrite_input: bool = False, method: str = "linear",
                keepdims: bool = False, *, interpolation: str | None = None):
  """`quantile` ignoring NaNs (NaN for all-NaN slices)."""
  _check_args("nanquantile", out, overwrite_input, interpolation)
  return _quantile("nanquantile", a, q, axis, method, keepdims, True)


def _check_args(name, out, overwrite_input, interpolation):
  if out is not None:
    raise NotImplementedError(f"The 'out' argument to jnp.{name} is not supported.")
  if overwrite_input:
    raise ValueError(f"jnp.{name} does not support overwrite_input=True (arrays are "
                     f"immutable).")
  if interpolation is not None:
    raise TypeError(f"{name}() argument interpolation was removed in NumPy 2.0; use "
                    f"method= instead.")


def _percent(q):
  q = as_array(q)
  q, = promote_dtypes_inexact(q)
  return lax.div(as_array(q), const(q, 100))


def percentile(a: ArrayLike, q: ArrayLike, axis: int | tuple[int, ...] | None = None,
               out: None = None, overwrite_input: bool = False, method: str = "linear",
               keepdims: bool = False, *, interpolation: str | None = None):
  """`quantile(a, q / 100, ...)`: `q` in [0, 100]."""
  _check_args("percentile", out, overwrite_input, interpolation)
  return _quantile("percentile", a, _percent(q), axis, method, keepdims, False)


def nanpercentile(a: ArrayLike, q: ArrayLike, axis: int | tuple[int, ...] | None = None,
                  out: None = None, overwrite_input: bool = False, method: str = "linear",
                  keepdims: bool = False, *, interpolation: str | None = None):
  """`nanquantile(a, q / 100, ...)`."""
  _check_args("nanpercentile", out, overwrite_input, interpolation)
  return _quantile("nanpercentile", a, _percent(q), axis, method, keepdims, True)


def median(a: ArrayLike, axis: int | tuple[int, ...] | None = None, out: None = None,
           overwrite_input: bool = False, keepdims: bool = False):
  """The median over `axis` (`quantile(a, 0.5)`); NaN for slices containing NaN."""
  _check_args("median", out, overwrite_input, None)
  return _quantile("median", a, 0.5, axis, "midpoint", keepdims, False)


def nanmedian(a: ArrayLike, axis: int | tuple[int, ...] | None = None, out: None = None,
              overwrite_input: bool = False, keepdims: bool = False):
  """The median ignoring NaNs."""
  _check_args("nanmedian", out, overwrite_input, None)
  return _quantile("nanmedian", a, 0.5, axis, "midpoint", keepdims, True)


def cov(m: ArrayLike, y: ArrayLike | None = None, rowvar: bool = True, bias: bool = False,
        ddof: int | None = None, fweights: ArrayLike | None = None,
        aweights: ArrayLike | None = None, dtype: Any = None):
  """The covariance matrix of the variables in the rows of `m` (columns unless `rowvar`).

  Args:
    m: `[n_vars, n_obs]` (or `[n_obs]` for one variable).
    y: more variables, stacked after those of `m`.
    bias: normalize by N instead of N - 1 (unless `ddof` is given).
    fweights: integer frequency weights `[n_obs]`; aweights: observation weights `[n_obs]`.

  Returns:
    `[n, n]` (a scalar for one variable), inexact dtype.

  Raises:
    ValueError: for inputs of rank > 2 or a non-inexact `dtype`.
    RuntimeError: for weights of the wrong shape; TypeError: for non-integer fweights.
  """
  if y is not None:
    m, y = (as_array(v) for v in promote_dtypes_inexact(m, y))
    if ndim_of(y) > 2:
      raise ValueError("y has more than 2 dimensions")
  else:
    m, = (as_array(v) for v in promote_dtypes_inexact(m))
  if ndim_of(m) > 2:
    raise ValueError("m has more than 2 dimensions")
  if dtype is not None and not dtypes.is_inexact(dtypes.canonicalize_dtype(dtype)):
    raise ValueError(f"cov: dtype must be a subclass of float or complex; got dtype={dtype}")
  X = atleast_2d(m)
  if not rowvar and ndim_of(m) != 1:
    X = transpose(X)
  if shape_of(X)[0] == 0:
    return zeros((0, 0), dtype_of(X))
  if y is not None:
    yy = atleast_2d(y)
    if not rowvar and shape_of(yy)[0] != 1:
      yy = transpose(yy)
    X = concatenate([X, yy], axis=0)
  nvar, nobs = shape_of(X)
  if nobs == 0:
    return full(() if nvar == 1 else (nvar, nvar), np.nan, dtype_of(X))
  if ddof is None:
    ddof = 1 if not bias else 0
  w = None
  if fweights is not None:
    fweights = as_array(fweights)
    if ndim_of(fweights) > 1:
      raise RuntimeError("cannot handle multidimensional fweights")
    if shape_of(fweights)[0] != nobs:
      raise RuntimeError("incompatible numbers of samples and fweights")
    if not dtypes.is_integer(dtype_of(fweights)):
      raise TypeError("fweights must be integer.")
    w = absolute(fweights)
  if aweights is not None:
    aweights = as_array(aweights)
    if ndim_of(aweights) > 1:
      raise RuntimeError("cannot handle multidimensional aweights")
    if shape_of(aweights)[0] != nobs:
      raise RuntimeError("incompatible numbers of samples and aweights")
    aweights = absolute(aweights)
    w = aweights if w is None else multiply(w, aweights)
  if dtype is not None:
    X = astype(X, dtype)
    w = astype(w, dtype) if w is not None else w
  avg, w_sum = reductions.average(X, axis=1, weights=w, returned=True)
  w_sum = w_sum[0]
  if w is None:
    f = nobs - ddof
  elif ddof == 0:
    f = w_sum
  elif aweights is None:
    f = subtract(w_sum, ddof)
  else:
    f = subtract(w_sum, divide(multiply(ddof, reductions.sum(
        multiply(w, aweights))), w_sum))
  X = subtract(X, expand_dims(avg, 1))
  XT = transpose(X if w is None else multiply(X, w))
  return squeeze(true_divide(dot(X, conjugate(XT)), f))


def corrcoef(x: ArrayLike, y: ArrayLike | None = None, rowvar: bool = True, dtype: Any = None):
  """Pearson correlation coefficients: `cov` normalized by the standard deviations, clipped
  to [-1, 1]."""
  if dtype is not None and not dtypes.is_inexact(dtypes.canonicalize_dtype(dtype)):
    raise ValueError(f"corrcoef: dtype must be a subclass of float or complex; got "
                     f"dtype={dtype}")
  c = cov(x, y, rowvar, dtype=dtype)
  if ndim_of(c) == 0:
    return divide(c, c)
  d = diagonal(c)
  sd = astype(sqrt(real(d)), dtype_of(c))
  c = divide(divide(c, expand_dims(sd, 1)), expand_dims(sd, 0))
  re = clip(real(c), -1, 1)
  if dtypes.is_complex(dtype_of(c)):
    return lax.complex(re, clip(imag(c), -1, 1))
  return re


def _count_into(idx, length: int, weights):
  """`out[k] = sum(weights[idx == k])` for k in [0, length): a compare-all reduction
  (indices outside the range are dropped)."""
  idx = ravel(idx)
  n = shape_of(idx)[0]
  hot = lax.eq(lax.broadcast_in_dim(idx, (length, n), (1,)),
               lax.broadcasted_iota(dtype_of(idx), (length, n), 0))
  w = lax.broadcast_in_dim(ravel(weights), (length, n), (1,))
  return lax.reduce_sum(lax.select(hot, w, zeros_like(w)), (1,))


def bincount(x: ArrayLike, weights: ArrayLike | None = None, minlength: int = 0, *,
             length: int | None = None):
  """Counts of each value 0, 1, ... in the non-negative integer array `x` (weighted sums
  with `weights`).

  Args:
    x: `int[n]` (negative values count as 0, as JAX's numpy clips them).
    weights: optional `[n]` weights; the result takes their dtype (else int32).
    minlength: the minimum result length.
    length: the static result length (values >= length are dropped); required under jit.

  Returns:
    `[length]` (or `[max(minlength, max(x) + 1)]`).

  Raises:
    TypeError: for non-integer `x`.
    ValueError: for `x` that is not 1-D, or weights of another shape.
    ConcretizationTypeError: if `x` is traced and `length` is not given.
  """
  x = as_array(x)
  if dtype_of(x) == dtypes.bool_:
    x = lax.convert_element_type(x, dtypes.int32)
  if not dtypes.is_integer(dtype_of(x)):
    raise TypeError(f"x argument to bincount must have an integer type; got "
                    f"{dtype_of(x).name}")
  if ndim_of(x) != 1:
    raise ValueError("only 1-dimensional input supported.")
  minlength = operator.index(check_concrete(minlength, "bincount", "minlength"))
  if length is None:
    if isinstance(x, Tracer):
      raise core.ConcretizationTypeError(
          "Abstract tracer value encountered where concrete value is expected: the argument "
          "'x' of jnp.bincount. To avoid this error, pass a static `length` argument.")
    host = np.asarray(x)
    length = builtins.max(minlength, host.size and int(builtins.max(0, host.max())) + 1)
  else:
    length = operator.index(check_concrete(length, "bincount", "length"))
  if weights is None:
    weights = ones(shape_of(x), dtypes.default_int_dtype())
  else:
    weights = as_array(weights)
    if shape_of(weights) != shape_of(x):
      raise ValueError(f"weights should have the same shape as x, got {shape_of(weights)} and "
                       f"{shape_of(x)}.")
  return _count_into(maximum(x, const(x, 0)), length, weights)


def histogram_bin_edges(a: ArrayLike, bins: ArrayLike = 10,
                        range: Sequence[ArrayLike] | None = None,
                        weights: ArrayLike | None = None):
  """The edges of `bins` equal bins over `range` (default: [min(a), max(a)], widened by 0.5
  on each side when empty); `bins` given as edges are returned as they are.

  Raises:
    NotImplementedError: for string `bins`.
    ValueError: for a malformed `range`.
  """
  if isinstance(bins, str):
    raise NotImplementedError("string values for `bins` not implemented.")
  arr = as_array(a)
  dt = to_inexact_dtype(dtype_of(arr))
  if np.ndim(bins) == 1:
    return asarray(bins, dt)
  nbins = operator.index(check_concrete(bins, "histogram_bin_edges", "bins"))
  if range is None:
    lo, hi = reductions.min(arr), reductions.max(arr)
  else:
    if np.shape(range) != (2,):
      raise ValueError(f"`range` must be either None or a sequence of scalars, got {range}")
    lo, hi = range
  lo, hi = asarray(lo, dt), asarray(hi, dt)
  same = equal(lo, hi)
  lo = where(same, subtract(lo, const(lo, 0.5)), lo)
  hi = where(same, add(hi, const(hi, 0.5)), hi)
  return linspace(lo, hi, nbins + 1, dtype=dt)


def histogram(a: ArrayLike, bins: ArrayLike = 10, range: Sequence[ArrayLike] | None = None,
              weights: ArrayLike | None = None, density: bool | None = None):
  """A histogram of the flattened `a`.

  Args:
    a: array of values (integers promote to the default float).
    bins: the number of equal-width bins (static), or the bin edges `[k + 1]`.
    range: `(lo, hi)` for equal-width bins (default: the data's min and max).
    weights: optional weights shaped like `a`.
    density: normalize so the histogram integrates to 1.

  Returns:
    `(counts [k], edges [k + 1])`; counts have the (inexact) dtype of `a` or `weights`. The
    last bin is closed, the others half-open; values outside the edges are not counted.

  Raises:
    ValueError: if `weights` and `a` differ in shape.
  """
  if weights is None:
    a, = (as_array(v) for v in promote_dtypes_inexact(a))
    weights = ones_like(a)
  else:
    a, weights = as_array(a), as_array(weights)
    if shape_of(a) != shape_of(weights):
      raise ValueError("weights should have the same shape as a.")
    a, weights = (as_array(v) for v in promote_dtypes_inexact(a, weights))
  edges = histogram_bin_edges(a, bins, range, weights)
  k = shape_of(edges)[0]
  idx = searchsorted(edges, a, side="right")
  idx = where(equal(a, edges[-1]), k - 1, idx)
  counts = slice_axis(_count_into(idx, k + 1, weights), 1, k, 0)
  if density:
    counts = divide(divide(counts, diff(edges)), reductions.sum(counts))
  return counts, edges


def digitize(x: ArrayLike, bins: ArrayLike, right: bool = False, *, method: str | None = None):
  """The index of the bin each value of `x` falls in, for monotonic `bins` (increasing or
  decreasing), as numpy.digitize; int32 result.

  Raises:
    ValueError: if `bins` is not 1-D.
  """
  x, b = as_array(x), as_array(bins)
  if ndim_of(b) != 1:
    raise ValueError(f"digitize: bins must be a 1-dimensional array; got bins={bins}")
  n = shape_of(b)[0]
  if n == 0:
    return zeros(shape_of(x), dtypes.int32)
  side = "left" if right else "right"
  inc = searchsorted(b, x, side=side)
  dec = subtract(n, searchsorted(flip(b), x, side=side))
  return where(greater_equal(b[-1], b[0]), inc, dec)


def interp(x: ArrayLike, xp: ArrayLike, fp: ArrayLike, left: ArrayLike | str | None = None,
           right: ArrayLike | str | None = None, period: ArrayLike | None = None):
  """Piecewise-linear interpolation of the points `(xp, fp)` at `x`.

  Args:
    x: query points `[*q]`.
    xp: increasing sample points `[n]` (sorted first when `period` is given).
    fp: sample values `[n]`.
    left, right: values below `xp[0]` / above `xp[-1]` (default: `fp[0]` / `fp[-1]`), or
      'extrapolate' to extend the end segments.
    period: the period of periodic `x` (then `left`/`right` are ignored).

  Returns:
    `[*q]`, the inexact promotion of `fp`.

  Raises:
    ValueError: for `xp`, `fp` not 1-D of one size, complex `x`, a bad string, or a
      non-scalar period.
  """
  x, xp, fp = as_array(x), as_array(xp), as_array(fp)
  if shape_of(xp) != shape_of(fp) or ndim_of(xp) != 1:
    raise ValueError("xp and fp must be one-dimensional arrays of equal size")
  x, xp = (as_array(v) for v in promote_dtypes_inexact(x, xp))
  fp, = (as_array(v) for v in promote_dtypes_inexact(fp))
  ext = {}
  for nm, v in (("left", left), ("right", right)):
    if isinstance(v, str) and v != "extrapolate":
      raise ValueError(f"the only valid string value of `{nm}` is 'extrapolate', got: {v!r}")
    ext[nm] = isinstance(v, str)
  if dtypes.is_complex(dtype_of(x)):
    raise ValueError("jnp.interp: complex x values not supported.")
  if period is not None:
    if np.ndim(period) != 0:
      raise ValueError(f"period must be a scalar; got {period}")
    period = absolute(as_array(period))
    x, xp = remainder(x, period), remainder(xp, period)
    xp, fp = lax.sort_key_val(xp, fp)
    xp = concatenate([subtract(xp[-1:], period), xp, add(xp[:1], period)])
    fp = concatenate([fp[-1:], fp, fp[:1]])
  n = shape_of(xp)[0]
  i = clip(searchsorted(xp, x, side="right"), 1, n - 1)
  flat = ravel(i)

  def at(v, idx):
    return reshape(take_axis(v, idx, 0), shape_of(x))

  im1 = subtract(flat, 1)
  fp_i, fp_im1, xp_i, xp_im1 = at(fp, flat), at(fp, im1), at(xp, flat), at(xp, im1)
  df = subtract(fp_i, fp_im1)
  dx = subtract(xp_i, xp_im1)
  delta = subtract(x, xp_im1)
  eps = np.spacing(np.finfo(dtype_of(xp)).eps)
  dx0 = less_equal(absolute(dx), eps)
  f = where(dx0, fp_im1, add(fp_im1, multiply(
      divide(delta, where(dx0, const(dx, 1), dx)), df)))
  if period is None:
    if not ext["left"]:
      f = where(less(x, xp[0]), fp[0] if left is None else left, f)
    if not ext["right"]:
      f = where(greater(x, xp[-1]), fp[-1] if right is None else right, f)
  return f


def histogramdd(sample: ArrayLike, bins: Any = 10, range: Sequence[Any] | None = None,
                weights: ArrayLike | None = None, density: bool | None = None):
  """A D-dimensional histogram of the points `sample` (`[N, D]`).

  Args:
    bins: an int (bins per dimension), or one int or edge array per dimension.
    range: per dimension `(lo, hi)` or None.
    weights: optional `[N]` weights.
    density: normalize to a probability density.

  Returns:
    `(counts [b_1, ..., b_D], [edges_1, ..., edges_D])`.

  Raises:
    ValueError: for mismatched `bins`/`range` lengths or weights.
  """
  sample = as_array(sample)
  if ndim_of(sample) == 1:
    sample = expand_dims(sample, 1)
  N, D = shape_of(sample)
  if weights is not None and shape_of(as_array(weights)) != (N,):
    raise ValueError("should have one weight for each sample.")
  if isinstance(bins, int) or np.ndim(bins) == 0 and not isinstance(bins, (list, tuple)):
    bins = [bins] * D
  if len(bins) != D:
    raise ValueError("should be a bin for each dimension.")
  if range is None:
    range = [None] * D
  if len(range) != D:
    raise ValueError("should be a range for each dimension.")
  edges, idx, bad, nb = [], None, None, []
  for i in builtins.range(D):
    col = sample[:, i]
    e = histogram_bin_edges(col, bins[i], range[i], weights)
    k = shape_of(e)[0]
    j = searchsorted(e, col, side="right")
    j = where(equal(col, e[-1]), k - 1, j)
    # Outside the edges (j == 0 or j == k): dropped, via an out-of-range flat index.
    inside = logical_and(greater(j, 0), less(j, k))
    j = subtract(j, 1)
    idx = j if idx is None else add(multiply(idx, k - 1), j)
    bad = logical_not(inside) if bad is None else logical_or(bad, logical_not(inside))
    edges.append(e)
    nb.append(k - 1)
  total = math.prod(nb)
  idx = where(bad, total, idx)
  w = ones((N,), dtypes.default_int_dtype()) if weights is None else as_array(weights)
  counts = reshape(_count_into(idx, total, w), tuple(nb))
  if density:
    counts = divide(counts, reductions.sum(counts))
    for i, e in enumerate(edges):
      shape = [1] * D
      shape[i] = nb[i]
      counts = divide(counts, reshape(diff(e), tuple(shape)))
  return counts, edges


def histogram2d(x: ArrayLike, y: ArrayLike, bins: Any = 10, range: Sequence[Any] | None = None,
                weights: ArrayLike | None = None, density: bool | None = None):
  """A 2-D histogram of the points `(x, y)`: `(counts, xedges, yedges)` (see
  `histogramdd`)."""
  x, y = (as_array(v) for v in promote_dtypes_inexact(as_array(x), as_array(y)))
  if not isinstance(bins, int) and np.ndim(bins) == 1 and len(bins) != 2:
    bins = [bins, bins]
  counts, (ex, ey) = histogramdd(stack([x, y], axis=1), bins, range, weights, density)
  return counts, ex, ey
