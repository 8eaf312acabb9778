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
from stagecraft.numpy import lax_numpy as jnp
from stagecraft.numpy import reductions
from stagecraft.numpy.lax_numpy import ArrayLike, _arr, _dtype, _ndim, _shape
from stagecraft.numpy.sorting import searchsorted

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
  a, = jnp.promote_dtypes_inexact(_arr(a))
  q, = jnp.promote_dtypes_inexact(_arr(q))
  a, q = _arr(a), _arr(q)
  if dtypes.is_complex(_dtype(a)):
    raise ValueError("quantile does not support complex input, as the operation is poorly "
                     "defined.")
  if _ndim(q) > 1:
    raise ValueError(f"q must be have rank <= 1, got shape {_shape(q)}")
  nd = _ndim(a)
  axes = reductions._axes(axis, nd, name)
  keep_shape = tuple(1 if i in axes else d for i, d in enumerate(_shape(a)))
  kept = [i for i in range(nd) if i not in axes]
  # The reduced axes become one trailing axis.
  a = jnp.transpose(a, (*kept, *axes)) if nd else a
  rest = tuple(_shape(a)[:len(kept)])
  n = math.prod(_shape(a)[len(kept):])
  a = jnp.reshape(a, (*rest, n))
  qdt = _dtype(q)
  if squash_nans:
    a = lax.sort(a, dimension=-1)   # NaNs sort last
    counts = reductions.sum(lax.bitwise_not(jnp.isnan(a)), axis=-1, dtype=qdt)
  else:
    a = jnp.where(reductions.any(jnp.isnan(a), axis=-1, keepdims=True), jnp._c(a, np.nan), a)
    a = lax.sort(a, dimension=-1)
    counts = jnp.full(rest, n, qdt)
  # Positions per (q, slice): q_[*q, *rest].
  qb = lax.broadcast_in_dim(q, (*_shape(q), *rest), tuple(range(_ndim(q))))
  cb = lax.broadcast_in_dim(counts, (*_shape(q), *rest), tuple(range(_ndim(q), _ndim(qb))))
  pos = lax.mul(qb, lax.sub(cb, jnp._c(cb, 1)))
  low, high = lax.floor(pos), lax.ceil(pos)
  high_w = lax.sub(pos, low)
  low_w = lax.sub(jnp._c(high_w, 1), high_w)
  top = lax.max(lax.sub(cb, jnp._c(cb, 1)), jnp._c(cb, 0))
  low = lax.max(jnp._c(low, 0), lax.min(low, top))
  high = lax.max(jnp._c(high, 0), lax.min(high, top))
  idt = dtypes.default_int_dtype()
  low_i, high_i = lax.convert_element_type(low, idt), lax.convert_element_type(high, idt)
  # Gather along the sorted axis: indices [*rest, m] with m = prod(q's shape).
  m = math.prod(_shape(q))

  def gather(idx):
    idx = jnp.reshape(jnp.moveaxis(jnp.reshape(idx, (m, *rest)), 0, -1), (*rest, m))
    if n == 0:
      return jnp.full((*rest, m), np.nan, _dtype(a))
    vals = jnp._take_along_axis(a, idx, len(rest))
    return jnp.reshape(jnp.moveaxis(vals, -1, 0), (*_shape(q), *rest))

  lo_v, hi_v = gather(low_i), gather(high_i)
  if method == "linear":
    lo_v, hi_v = lax.convert_element_type(lo_v, qdt), lax.convert_element_type(hi_v, qdt)
    out = lax.add(lax.mul(lo_v, low_w), lax.mul(hi_v, high_w))
  elif method == "lower":
    out = lo_v
  elif method == "higher":
    out = hi_v
  elif method == "nearest":
    out = lax.select(lax.le(high_w, jnp._c(high_w, 0.5)), lo_v, hi_v)
  else:
    out = lax.mul(lax.add(lo_v, hi_v), jnp._c(lo_v, 0.5))
  if squash_nans:
    out = jnp.where(lax.eq(cb, jnp._c(cb, 0)), jnp._c(out, np.nan), out)
  if keepdims:
    out = jnp.reshape(out, (*_shape(q), *keep_shape))
  return lax.convert_element_type(out, _dtype(a))


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
  q = _arr(q)
  q, = jnp.promote_dtypes_inexact(q)
  return lax.div(_arr(q), jnp._c(q, 100))


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
    m, y = (_arr(v) for v in jnp.promote_dtypes_inexact(m, y))
    if _ndim(y) > 2:
      raise ValueError("y has more than 2 dimensions")
  else:
    m, = (_arr(v) for v in jnp.promote_dtypes_inexact(m))
  if _ndim(m) > 2:
    raise ValueError("m has more than 2 dimensions")
  if dtype is not None and not dtypes.is_inexact(dtypes.canonicalize_dtype(dtype)):
    raise ValueError(f"cov: dtype must be a subclass of float or complex; got dtype={dtype}")
  X = jnp.atleast_2d(m)
  if not rowvar and _ndim(m) != 1:
    X = jnp.transpose(X)
  if _shape(X)[0] == 0:
    return jnp.zeros((0, 0), _dtype(X))
  if y is not None:
    yy = jnp.atleast_2d(y)
    if not rowvar and _shape(yy)[0] != 1:
      yy = jnp.transpose(yy)
    X = jnp.concatenate([X, yy], axis=0)
  nvar, nobs = _shape(X)
  if nobs == 0:
    return jnp.full(() if nvar == 1 else (nvar, nvar), np.nan, _dtype(X))
  if ddof is None:
    ddof = 1 if not bias else 0
  w = None
  if fweights is not None:
    fweights = _arr(fweights)
    if _ndim(fweights) > 1:
      raise RuntimeError("cannot handle multidimensional fweights")
    if _shape(fweights)[0] != nobs:
      raise RuntimeError("incompatible numbers of samples and fweights")
    if not dtypes.is_integer(_dtype(fweights)):
      raise TypeError("fweights must be integer.")
    w = jnp.absolute(fweights)
  if aweights is not None:
    aweights = _arr(aweights)
    if _ndim(aweights) > 1:
      raise RuntimeError("cannot handle multidimensional aweights")
    if _shape(aweights)[0] != nobs:
      raise RuntimeError("incompatible numbers of samples and aweights")
    aweights = jnp.absolute(aweights)
    w = aweights if w is None else jnp.multiply(w, aweights)
  if dtype is not None:
    X = jnp.astype(X, dtype)
    w = jnp.astype(w, dtype) if w is not None else w
  avg, w_sum = reductions.average(X, axis=1, weights=w, returned=True)
  w_sum = w_sum[0]
  if w is None:
    f = nobs - ddof
  elif ddof == 0:
    f = w_sum
  elif aweights is None:
    f = jnp.subtract(w_sum, ddof)
  else:
    f = jnp.subtract(w_sum, jnp.divide(jnp.multiply(ddof, reductions.sum(
        jnp.multiply(w, aweights))), w_sum))
  X = jnp.subtract(X, jnp.expand_dims(avg, 1))
  XT = jnp.transpose(X if w is None else jnp.multiply(X, w))
  from stagecraft.numpy.contractions import dot
  return jnp.squeeze(jnp.true_divide(dot(X, jnp.conjugate(XT)), f))


def corrcoef(x: ArrayLike, y: ArrayLike | None = None, rowvar: bool = True, dtype: Any = None):
  """Pearson correlation coefficients: `cov` normalized by the standard deviations, clipped
  to [-1, 1]."""
  if dtype is not None and not dtypes.is_inexact(dtypes.canonicalize_dtype(dtype)):
    raise ValueError(f"corrcoef: dtype must be a subclass of float or complex; got "
                     f"dtype={dtype}")
  c = cov(x, y, rowvar, dtype=dtype)
  if _ndim(c) == 0:
    return jnp.divide(c, c)
  d = jnp.diagonal(c)
  sd = jnp.astype(jnp.sqrt(jnp.real(d)), _dtype(c))
  c = jnp.divide(jnp.divide(c, jnp.expand_dims(sd, 1)), jnp.expand_dims(sd, 0))
  re = jnp.clip(jnp.real(c), -1, 1)
  if dtypes.is_complex(_dtype(c)):
    return lax.complex(re, jnp.clip(jnp.imag(c), -1, 1))
  return re


def _count_into(idx, length: int, weights):
  """`out[k] = sum(weights[idx == k])` for k in [0, length): a compare-all reduction
  (indices outside the range are dropped)."""
  idx = jnp.ravel(idx)
  n = _shape(idx)[0]
  hot = lax.eq(lax.broadcast_in_dim(idx, (length, n), (1,)),
               lax.broadcasted_iota(_dtype(idx), (length, n), 0))
  w = lax.broadcast_in_dim(jnp.ravel(weights), (length, n), (1,))
  return lax.reduce_sum(lax.select(hot, w, jnp.zeros_like(w)), (1,))


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
  x = _arr(x)
  if _dtype(x) == dtypes.bool_:
    x = lax.convert_element_type(x, dtypes.int32)
  if not dtypes.is_integer(_dtype(x)):
    raise TypeError(f"x argument to bincount must have an integer type; got "
                    f"{_dtype(x).name}")
  if _ndim(x) != 1:
    raise ValueError("only 1-dimensional input supported.")
  minlength = operator.index(jnp._concrete(minlength, "bincount", "minlength"))
  if length is None:
    if isinstance(x, Tracer):
      raise core.ConcretizationTypeError(
          "Abstract tracer value encountered where concrete value is expected: the argument "
          "'x' of jnp.bincount. To avoid this error, pass a static `length` argument.")
    host = np.asarray(x)
    length = builtins.max(minlength, host.size and int(builtins.max(0, host.max())) + 1)
  else:
    length = operator.index(jnp._concrete(length, "bincount", "length"))
  if weights is None:
    weights = jnp.ones(_shape(x), dtypes.default_int_dtype())
  else:
    weights = _arr(weights)
    if _shape(weights) != _shape(x):
      raise ValueError(f"weights should have the same shape as x, got {_shape(weights)} and "
                       f"{_shape(x)}.")
  return _count_into(jnp.maximum(x, jnp._c(x, 0)), length, weights)


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
  arr = _arr(a)
  dt = jnp._to_inexact(_dtype(arr))
  if np.ndim(bins) == 1:
    return jnp.asarray(bins, dt)
  nbins = operator.index(jnp._concrete(bins, "histogram_bin_edges", "bins"))
  if range is None:
    lo, hi = reductions.min(arr), reductions.max(arr)
  else:
    if np.shape(range) != (2,):
      raise ValueError(f"`range` must be either None or a sequence of scalars, got {range}")
    lo, hi = range
  lo, hi = jnp.asarray(lo, dt), jnp.asarray(hi, dt)
  same = jnp.equal(lo, hi)
  lo = jnp.where(same, jnp.subtract(lo, jnp._c(lo, 0.5)), lo)
  hi = jnp.where(same, jnp.add(hi, jnp._c(hi, 0.5)), hi)
  return jnp.linspace(lo, hi, nbins + 1, dtype=dt)


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
    a, = (_arr(v) for v in jnp.promote_dtypes_inexact(a))
    weights = jnp.ones_like(a)
  else:
    a, weights = _arr(a), _arr(weights)
    if _shape(a) != _shape(weights):
      raise ValueError("weights should have the same shape as a.")
    a, weights = (_arr(v) for v in jnp.promote_dtypes_inexact(a, weights))
  edges = histogram_bin_edges(a, bins, range, weights)
  k = _shape(edges)[0]
  idx = searchsorted(edges, a, side="right")
  idx = jnp.where(jnp.equal(a, edges[-1]), k - 1, idx)
  counts = jnp._slice_axis(_count_into(idx, k + 1, weights), 1, k, 0)
  if density:
    counts = jnp.divide(jnp.divide(counts, jnp.diff(edges)), reductions.sum(counts))
  return counts, edges


def digitize(x: ArrayLike, bins: ArrayLike, right: bool = False, *, method: str | None = None):
  """The index of the bin each value of `x` falls in, for monotonic `bins` (increasing or
  decreasing), as numpy.digitize; int32 result.

  Raises:
    ValueError: if `bins` is not 1-D.
  """
  x, b = _arr(x), _arr(bins)
  if _ndim(b) != 1:
    raise ValueError(f"digitize: bins must be a 1-dimensional array; got bins={bins}")
  n = _shape(b)[0]
  if n == 0:
    return jnp.zeros(_shape(x), dtypes.int32)
  side = "left" if right else "right"
  inc = searchsorted(b, x, side=side)
  dec = jnp.subtract(n, searchsorted(jnp.flip(b), x, side=side))
  return jnp.where(jnp.greater_equal(b[-1], b[0]), inc, dec)


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
  x, xp, fp = _arr(x), _arr(xp), _arr(fp)
  if _shape(xp) != _shape(fp) or _ndim(xp) != 1:
    raise ValueError("xp and fp must be one-dimensional arrays of equal size")
  x, xp = (_arr(v) for v in jnp.promote_dtypes_inexact(x, xp))
  fp, = (_arr(v) for v in jnp.promote_dtypes_inexact(fp))
  ext = {}
  for nm, v in (("left", left), ("right", right)):
    if isinstance(v, str) and v != "extrapolate":
      raise ValueError(f"the only valid string value of `{nm}` is 'extrapolate', got: {v!r}")
    ext[nm] = isinstance(v, str)
  if dtypes.is_complex(_dtype(x)):
    raise ValueError("jnp.interp: complex x values not supported.")
  if period is not None:
    if np.ndim(period) != 0:
      raise ValueError(f"period must be a scalar; got {period}")
    period = jnp.absolute(_arr(period))
    x, xp = jnp.remainder(x, period), jnp.remainder(xp, period)
    xp, fp = lax.sort_key_val(xp, fp)
    xp = jnp.concatenate([jnp.subtract(xp[-1:], period), xp, jnp.add(xp[:1], period)])
    fp = jnp.concatenate([fp[-1:], fp, fp[:1]])
  n = _shape(xp)[0]
  i = jnp.clip(searchsorted(xp, x, side="right"), 1, n - 1)
  flat = jnp.ravel(i)

  def at(v, idx):
    return jnp.reshape(jnp._take_axis(v, idx, 0), _shape(x))

  im1 = jnp.subtract(flat, 1)
  fp_i, fp_im1, xp_i, xp_im1 = at(fp, flat), at(fp, im1), at(xp, flat), at(xp, im1)
  df = jnp.subtract(fp_i, fp_im1)
  dx = jnp.subtract(xp_i, xp_im1)
  delta = jnp.subtract(x, xp_im1)
  eps = np.spacing(np.finfo(_dtype(xp)).eps)
  dx0 = jnp.less_equal(jnp.absolute(dx), eps)
  f = jnp.where(dx0, fp_im1, jnp.add(fp_im1, jnp.multiply(
      jnp.divide(delta, jnp.where(dx0, jnp._c(dx, 1), dx)), df)))
  if period is None:
    if not ext["left"]:
      f = jnp.where(jnp.less(x, xp[0]), fp[0] if left is None else left, f)
    if not ext["right"]:
      f = jnp.where(jnp.greater(x, xp[-1]), fp[-1] if right is None else right, f)
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
  sample = _arr(sample)
  if _ndim(sample) == 1:
    sample = jnp.expand_dims(sample, 1)
  N, D = _shape(sample)
  if weights is not None and _shape(_arr(weights)) != (N,):
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
    k = _shape(e)[0]
    j = searchsorted(e, col, side="right")
    j = jnp.where(jnp.equal(col, e[-1]), k - 1, j)
    # Outside the edges (j == 0 or j == k): dropped, via an out-of-range flat index.
    inside = jnp.logical_and(jnp.greater(j, 0), jnp.less(j, k))
    j = jnp.subtract(j, 1)
    idx = j if idx is None else jnp.add(jnp.multiply(idx, k - 1), j)
    bad = jnp.logical_not(inside) if bad is None else jnp.logical_or(bad, jnp.logical_not(inside))
    edges.append(e)
    nb.append(k - 1)
  total = math.prod(nb)
  idx = jnp.where(bad, total, idx)
  w = jnp.ones((N,), dtypes.default_int_dtype()) if weights is None else _arr(weights)
  counts = jnp.reshape(_count_into(idx, total, w), tuple(nb))
  if density:
    counts = jnp.divide(counts, reductions.sum(counts))
    for i, e in enumerate(edges):
      shape = [1] * D
      shape[i] = nb[i]
      counts = jnp.divide(counts, jnp.reshape(jnp.diff(e), tuple(shape)))
  return counts, edges


def histogram2d(x: ArrayLike, y: ArrayLike, bins: Any = 10, range: Sequence[Any] | None = None,
                weights: ArrayLike | None = None, density: bool | None = None):
  """A 2-D histogram of the points `(x, y)`: `(counts, xedges, yedges)` (see
  `histogramdd`)."""
  x, y = (_arr(v) for v in jnp.promote_dtypes_inexact(_arr(x), _arr(y)))
  if not isinstance(bins, int) and np.ndim(bins) == 1 and len(bins) != 2:
    bins = [bins, bins]
  counts, (ex, ey) = histogramdd(jnp.stack([x, y], axis=1), bins, range, weights, density)
  return counts, ex, ey
