"""Order statistics and data summaries: quantile, percentile, median (and their NaN-ignoring
forms), cov, corrcoef, histogram, histogram_bin_edges, bincount, digitize, interp.

Semantics follow JAX's numpy, and the functions JAX jits are jitted here under the same names
with the same bodies, so traced programs print as JAX's: quantiles sort along the reduced
axes (`lax.sort`) and gather the two nearest order statistics (NumPy's default 'linear'
method and 'lower', 'higher', 'midpoint', 'nearest', 'inverted_cdf'); `bincount` and the
histogram counts are one scatter-add; the histogram edges are a `linspace`; `interp` is the
jitted `_interp`."""
from __future__ import annotations

import builtins
import math
import operator
from typing import Any, Sequence

import numpy as np

from stagecraft import core, dtypes, lax
from stagecraft.core import Tracer
from stagecraft.numpy import lax_numpy, reductions
from stagecraft.numpy.array_constructors import asarray
from stagecraft.numpy.array_creation import full, ones_like, zeros, zeros_like
from stagecraft.numpy.contractions import dot
from stagecraft.numpy.index_tricks import ix_, ravel_multi_index
from stagecraft.numpy.indexing import take_along_axis
from stagecraft.numpy.lax_numpy import astype, diag, diff, linspace
from stagecraft.numpy.manipulation import (atleast_2d, concatenate, expand_dims, ravel,
                                           reshape, squeeze, transpose)
from stagecraft.numpy.sorting import searchsorted
from stagecraft.numpy.ufuncs import (absolute, add, clip, conjugate, divide, equal, greater,
                                     imag, isnan, less, multiply, real, remainder, sqrt,
                                     subtract, true_divide, where)
from stagecraft.numpy.util import (ArrayLike, as_array, axis_tuple, canonicalize_axis,
                                   check_arraylike, check_concrete, dtype_of, ensure_arraylike,
                                   ndim_of, promote_dtypes_inexact, shape_of, to_inexact_dtype)
from stagecraft.pjit import jit
from stagecraft.runtime.array import Array

__all__ = ["quantile", "percentile", "median", "nanquantile", "nanpercentile", "nanmedian",
           "cov", "corrcoef", "histogram", "histogram_bin_edges", "histogram2d", "histogramdd",
           "bincount", "digitize", "interp"]

_METHODS = ("linear", "lower", "higher", "midpoint", "nearest", "inverted_cdf")


def _quantile(a, q, axis, method, keepdims, squash_nans, weights=None):
  """The body shared by the jitted quantile functions (`a`, `q`, `weights` already Arrays).

  Algorithm (NumPy's `quantile`, Hyndman & Fan (1996) definitions 1 and 7, laid out as JAX's
  numpy lays it out so that traced programs print the same): the reduced axes become one
  axis, which is sorted (NaN sorts last; without `squash_nans` a slice with a NaN becomes all
  NaN first); the position `q * (n - 1)` of each quantile falls between the order statistics
  `floor` and `ceil` of it, which are gathered and combined as `method` says. With
  `squash_nans`, `n` counts the non-NaN entries of each slice. 'inverted_cdf' takes the first
  order statistic whose cumulative weight reaches `q` times the total weight.
  """
  if method not in _METHODS:
    raise ValueError("method can only be 'linear', 'lower', 'higher', 'midpoint', 'nearest' "
                     "or 'inverted_cdf'")
  if weights is not None:
    if dtypes.is_complex(weights.dtype):
      raise ValueError("Weights cannot be complex types.")
    if method != "inverted_cdf":
      raise NotImplementedError(f"{method} doesn't support weights. Only method "
                                f"'inverted_cdf' supports weights.")
    a, weights = promote_dtypes_inexact(a, weights)
    if weights.shape != a.shape:
      if axis is None:
        raise ValueError("Weights shape must match 'a' shape when axis is None.")
      axes = axis_tuple(axis, a.ndim, "quantile")
      if weights.shape != tuple(a.shape[ax] for ax in axes):
        raise ValueError(f"Weights shape {weights.shape} must match reduction axes "
                         f"{tuple(a.shape[ax] for ax in axes)}")
      weights = lax.broadcast_in_dim(weights, a.shape, axes)
  else:
    a, = promote_dtypes_inexact(a)
  if dtypes.is_complex(a.dtype):
    raise ValueError("quantile does not support complex input, as the operation is poorly "
                     "defined.")
  keep_shape = []   # the shape of a kept-dims result, where reshaping is needed
  if axis is None:
    if keepdims:
      keep_shape = [1] * a.ndim
    a = ravel(a)
    if weights is not None:
      weights = ravel(weights)
    axis = 0
  elif isinstance(axis, tuple):
    nd = a.ndim
    axes = tuple(canonicalize_axis(ax, nd, "quantile") for ax in axis)
    if len(set(axes)) != len(axes):
      raise ValueError("repeated axis")
    keep_shape = [1 if i in axes else d for i, d in enumerate(a.shape)]
    # The kept axes move to the front by successive swaps (so the reduced ones are not in
    # sorted order: the order of the flattened elements does not matter once sorted).
    perm = list(range(nd))
    for i, k in enumerate(sorted(set(range(nd)) - set(axes))):
      perm[i], perm[k] = perm[k], perm[i]
    new_shape = (tuple(d for i, d in enumerate(a.shape) if i not in axes)
                 + (math.prod(a.shape[i] for i in axes),))
    a = lax.reshape(a, new_shape, perm)
    if weights is not None:
      weights = lax.reshape(weights, new_shape, perm)
    axis = a.ndim - 1
  else:
    axis = canonicalize_axis(axis, a.ndim, "quantile")
  q_shape, q_ndim = q.shape, q.ndim
  if q_ndim > 1:
    raise ValueError(f"q must be have rank <= 1, got shape {q.shape}")
  a_shape = a.shape
  q_in = q
  idt = dtypes.default_int_dtype()
  if squash_nans:
    # NB: a NaN of either sign becomes a positive one, which sorts last.
    a = where(isnan(a), np.nan, a)
    if weights is not None:
      a, weights = lax.sort_key_val(a, weights, dimension=axis)
    else:
      a = lax.sort(a, dimension=axis)
    counts = reductions.sum(lax.bitwise_not(isnan(a)), axis=axis, dtype=q.dtype,
                            keepdims=keepdims)
    reduced_shape = counts.shape
    q = lax.expand_dims(q, tuple(range(q_ndim, len(reduced_shape) + q_ndim)))
    counts = lax.expand_dims(counts, tuple(range(q_ndim)))
    q = lax.mul(q, lax.sub(counts, _strong(q, 1)))
    low, high = lax.floor(q), lax.ceil(q)
    high_weight = lax.sub(q, low)
    low_weight = lax.sub(_strong(high_weight, 1), high_weight)
    low = lax.max(_strong(low, 0), lax.min(low, counts - 1))
    high = lax.max(_strong(high, 0), lax.min(high, counts - 1))
    low = lax.convert_element_type(low, idt)
    high = lax.convert_element_type(high, idt)
    out_shape = q_shape + reduced_shape
    index = [lax.broadcasted_iota(idt, out_shape, d + q_ndim)
             for d in range(len(reduced_shape))]
    if keepdims:
      index[axis] = low
    else:
      index.insert(axis, low)
    low_value = a[tuple(index)]
    index[axis] = high
    high_value = a[tuple(index)]
  else:
    a = where(reductions.any(isnan(a), axis=axis, keepdims=True), np.nan, a)
    if weights is not None:
      a, weights = lax.sort_key_val(a, weights, dimension=axis)
    else:
      a = lax.sort(a, dimension=axis)
    n = lax.convert_element_type(a_shape[axis], q.dtype)
    q = lax.mul(q, n - 1)
    low, high = lax.floor(q), lax.ceil(q)
    high_weight = lax.sub(q, low)
    low_weight = lax.sub(_strong(high_weight, 1), high_weight)
    low = lax.clamp(_strong(low, 0), low, n - 1)
    high = lax.clamp(_strong(high, 0), high, n - 1)
    low = lax.convert_element_type(low, idt)
    high = lax.convert_element_type(high, idt)
    slice_sizes = a_shape[:axis] + (1,) + a_shape[axis + 1:]
    dnums = lax.GatherDimensionNumbers(
        offset_dims=tuple(range(q_ndim, len(a_shape) + q_ndim - (0 if keepdims else 1))),
        collapsed_slice_dims=() if keepdims else (axis,), start_index_map=(axis,))
    low_value = lax.gather(a, low[..., None], dnums, slice_sizes,
                           mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS)
    high_value = lax.gather(a, high[..., None], dnums, slice_sizes,
                            mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS)
    if q_ndim == 1:
      low_weight = lax.broadcast_in_dim(low_weight, low_value.shape, (0,))
      high_weight = lax.broadcast_in_dim(high_weight, high_value.shape, (0,))
  if method == "linear":
    result = lax.add(lax.mul(astype(low_value, q.dtype), low_weight),
                     lax.mul(astype(high_value, q.dtype), high_weight))
  elif method == "lower":
    result = low_value
  elif method == "higher":
    result = high_value
  elif method == "nearest":
    result = lax.select(lax.le(high_weight, _strong(high_weight, 0.5)), low_value, high_value)
  elif method == "midpoint":
    result = lax.mul(lax.add(low_value, high_value), _strong(low_value, 0.5))
  else:
    result = _inverted_cdf(a, q_in, weights, axis, keepdims, squash_nans, a_shape[axis])
  if keepdims and keep_shape:
    if q_ndim > 0:
      keep_shape = [q_shape[0], *keep_shape]
    result = reshape(result, tuple(keep_shape))
  return lax.convert_element_type(result, a.dtype)


def _inverted_cdf(a, q, weights, axis, keepdims, squash_nans, n):
  """NumPy's 'inverted_cdf' quantile of the sorted `a` (weighted; unit weights without
  `weights`): per quantile, the first order statistic whose cumulative weight reaches
  `q * total`. NaN where a weight is negative or NaN, and where a slice has NaN data
  (`squash_nans`: where it has nothing but NaN)."""
  q_ndim = q.ndim
  idt = dtypes.default_int_dtype()
  if weights is None:
    weights = lax.full_like(a, 1.0)
  zero = lax.full_like(weights, 0)
  bad_weights = lax.bitwise_or(lax.lt(weights, zero), isnan(weights))
  nan_data = isnan(a)
  clean = lax.select(lax.bitwise_or(bad_weights, nan_data), zero, weights)
  cum = reductions.cumsum(clean, axis=axis)
  total = lax.index_in_dim(cum, -1, axis=axis, keepdims=keepdims)
  total_q = lax.expand_dims(total, tuple(range(q_ndim)))
  target = lax.mul(lax.reshape(q, q.shape + (1,) * total.ndim), total_q)
  if not keepdims:
    target = lax.expand_dims(target, (axis + q_ndim,))
  below = lax.lt(lax.expand_dims(cum, tuple(range(q_ndim))), target)
  idx = reductions.sum(lax.convert_element_type(below, idt), axis=axis + q_ndim,
                       keepdims=keepdims)
  if squash_nans:
    valid = reductions.sum(lax.bitwise_not(nan_data), axis=axis, dtype=q.dtype,
                           keepdims=keepdims)
  else:
    valid = lax.full_like(total, n, dtype=q.dtype)
  top = lax.convert_element_type(lax.sub(valid, _strong(valid, 1)), idt)
  top = lax.convert_element_type(lax.expand_dims(top, tuple(range(q_ndim))), idx.dtype)
  idx = lax.max(_strong(idx, 0), lax.min(idx, top))
  take = lax.squeeze(idx, (q_ndim + axis,)) if keepdims else idx
  if q_ndim == 0:
    result = lax.squeeze(take_along_axis(a, lax.expand_dims(take, (axis,)), axis=axis),
                         (axis,))
  else:
    # The quantile axis moves to `axis`, the one taken along, and back.
    perm = [*range(q_ndim, q_ndim + axis), *range(q_ndim), *range(q_ndim + axis, take.ndim)]
    result = take_along_axis(a, lax.transpose(take, tuple(perm)), axis=axis)
    result = lax.transpose(result, tuple(perm.index(i) for i in range(len(perm))))
  if keepdims:
    result = lax.expand_dims(result, (q_ndim + axis,))
  all_nan = lax.eq(valid, lax.full_like(valid, 0))
  any_bad = reductions.any(bad_weights, axis=axis, keepdims=keepdims)
  if squash_nans:
    force_nan = lax.bitwise_or(any_bad, all_nan)
  else:
    force_nan = lax.bitwise_or(any_bad, reductions.any(nan_data, axis=axis,
                                                       keepdims=keepdims))
  force_nan = lax.expand_dims(force_nan, tuple(range(q_ndim)))
  return where(force_nan, lax.full_like(result, np.nan), result)


def _strong(x, v):
  """`v` as a strongly typed NumPy scalar of x's dtype (JAX's `lax._const` of an array)."""
  return np.asarray(v, x.dtype)


def _no_overwrite(name, out, overwrite_input):
  if overwrite_input or out is not None:
    raise ValueError(f"jax.numpy.{name} does not support overwrite_input=True or "
                     f"out != None")


def _weights(name, weights):
  return None if weights is None else ensure_arraylike(name, weights)


@jit(static_argnames=("axis", "overwrite_input", "keepdims", "method"))
def quantile(a: ArrayLike, q: ArrayLike, axis: int | tuple[int, ...] | None = None,
             out: None = None, overwrite_input: bool = False, method: str = "linear",
             keepdims: bool = False, *, weights: ArrayLike | None = None) -> Array:
  """The `q`-th quantiles of `a` over `axis`.

  Jitted as JAX's (`jit[name=quantile]`; static `axis`, `overwrite_input`, `keepdims`,
  `method`).

  Args:
    a: array `T[*s]`; integers and bools promote to the default float.
    q: quantiles in [0, 1], a scalar or `[k]` (may be traced); positions are computed in
      q's dtype.
    axis: an axis or a tuple of axes to reduce (None: all).
    out, overwrite_input: unsupported (None, False).
    method: 'linear' (default), 'lower', 'higher', 'midpoint', 'nearest' (ties at .5 take
      the lower value, as JAX's numpy) or 'inverted_cdf'.
    keepdims: keep reduced axes with size 1.
    weights: observation weights, shaped like `a` or like its reduced axes; only with
      method 'inverted_cdf'.

  Returns:
    Array `[*q.shape, *reduced s]` of a's inexact dtype; NaN for slices containing NaN.

  Raises:
    TypeError: for `a`, `q` or `weights` not an array or scalar (a list).
    ValueError: for `out` or `overwrite_input`, complex input, an unknown method, `q` of
      rank > 1, a repeated axis, or weights of the wrong shape.
    NotImplementedError: for weights with a method other than 'inverted_cdf'.

  Algorithm: NumPy's `quantile` (Hyndman & Fan (1996), "Sample quantiles in statistical
  packages", definitions 1 and 7).

  Examples:
    >>> from stagecraft import numpy as jnp
    >>> jnp.quantile(jnp.array([1., 2., 3., 4.]), 0.5)
    Array(2.5, dtype=float32)
  """
  a, q = ensure_arraylike("quantile", a, q)
  weights = _weights("quantile", weights)
  _no_overwrite("quantile", out, overwrite_input)
  return _quantile(a, q, axis, method, keepdims, False, weights)


@jit(static_argnames=("axis", "overwrite_input", "keepdims", "method"))
def nanquantile(a: ArrayLike, q: ArrayLike, axis: int | tuple[int, ...] | None = None,
                out: None = None, overwrite_input: bool = False, method: str = "linear",
                keepdims: bool = False, *, weights: ArrayLike | None = None) -> Array:
  """`quantile` ignoring NaNs (NaN for all-NaN slices); jitted as `quantile`, which see."""
  a, q = ensure_arraylike("nanquantile", a, q)
  weights = _weights("nanquantile", weights)
  _no_overwrite("nanquantile", out, overwrite_input)
  return _quantile(a, q, axis, method, keepdims, True, weights)


@jit(static_argnames=("axis", "overwrite_input", "keepdims", "method", "out_sharding"))
def percentile(a: ArrayLike, q: ArrayLike, axis: int | tuple[int, ...] | None = None,
               out: None = None, overwrite_input: bool = False, method: str = "linear",
               keepdims: bool = False, *, weights: ArrayLike | None = None,
               out_sharding: Any = None) -> Array:
  """`quantile(a, q / 100, ...)`: `q` in [0, 100], promoted to an inexact dtype first.
  Jitted as JAX's (`jit[name=percentile]` around a nested `quantile`).

  Raises:
    NotImplementedError: for `out_sharding` (the result follows the partitioner).
    As `quantile` otherwise.
  """
  a, q = ensure_arraylike("percentile", a, q)
  weights = _weights("percentile", weights)
  q, = promote_dtypes_inexact(q)
  if out_sharding is not None:
    raise NotImplementedError("jnp.percentile: out_sharding is not supported.")
  return quantile(a, true_divide(q, 100), axis=axis, out=out,
                  overwrite_input=overwrite_input, method=method, keepdims=keepdims,
                  weights=weights)


@jit(static_argnames=("axis", "overwrite_input", "keepdims", "method"))
def nanpercentile(a: ArrayLike, q: ArrayLike, axis: int | tuple[int, ...] | None = None,
                  out: None = None, overwrite_input: bool = False, method: str = "linear",
                  keepdims: bool = False, *, weights: ArrayLike | None = None) -> Array:
  """`nanquantile(a, q / 100, ...)`; jitted as `percentile`, which see."""
  a, q = ensure_arraylike("nanpercentile", a, q)
  weights = _weights("nanpercentile", weights)
  q, = promote_dtypes_inexact(q)
  return nanquantile(a, true_divide(q, 100), axis=axis, out=out,
                     overwrite_input=overwrite_input, method=method, weights=weights,
                     keepdims=keepdims)


@jit(static_argnames=("axis", "overwrite_input", "keepdims"))
def median(a: ArrayLike, axis: int | tuple[int, ...] | None = None, out: None = None,
           overwrite_input: bool = False, keepdims: bool = False) -> Array:
  """The median over `axis`: `quantile(a, 0.5, method='midpoint')`, NaN for slices
  containing NaN. Jitted as JAX's (`jit[name=median]` around a nested `quantile`)."""
  a = ensure_arraylike("median", a)
  return quantile(a, 0.5, axis=axis, out=out, overwrite_input=overwrite_input,
                  keepdims=keepdims, method="midpoint")


lax_numpy.PAD_STAT_FUNCS["median"] = median   # jnp.pad(mode='median'): lax_numpy is below


@jit(static_argnames=("axis", "overwrite_input", "keepdims"))
def nanmedian(a: ArrayLike, axis: int | tuple[int, ...] | None = None, out: None = None,
              overwrite_input: bool = False, keepdims: bool = False) -> Array:
  """The median ignoring NaNs: `nanquantile(a, 0.5, method='midpoint')`; jitted as
  `median`."""
  a = ensure_arraylike("nanmedian", a)
  return nanquantile(a, 0.5, axis=axis, out=out, overwrite_input=overwrite_input,
                     keepdims=keepdims, method="midpoint")


@jit(static_argnames=("rowvar", "bias", "ddof", "dtype"))
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
    check_arraylike("cov", m, y)
    m, y = (as_array(v) for v in promote_dtypes_inexact(m, y))
    if ndim_of(y) > 2:
      raise ValueError("y has more than 2 dimensions")
  else:
    check_arraylike("cov", m)
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
    fweights = ensure_arraylike("cov", fweights)
    if ndim_of(fweights) > 1:
      raise RuntimeError("cannot handle multidimensional fweights")
    if shape_of(fweights)[0] != nobs:
      raise RuntimeError("incompatible numbers of samples and fweights")
    if not dtypes.is_integer(dtype_of(fweights)):
      raise TypeError("fweights must be integer.")
    w = absolute(fweights)
  if aweights is not None:
    aweights = ensure_arraylike("cov", aweights)
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
  # NB: as JAX's, the weights are broadcast to X's rank first (no rank promotion)
  XT = transpose(X if w is None else multiply(X, lax.broadcast_to_rank(w, ndim_of(X))))
  return squeeze(true_divide(dot(X, conjugate(XT)), f))


@jit(static_argnames=("rowvar", "dtype"))
def corrcoef(x: ArrayLike, y: ArrayLike | None = None, rowvar: bool = True, dtype: Any = None):
  """Pearson correlation coefficients: `cov` normalized by the standard deviations, clipped
  to [-1, 1]. Jitted as JAX's (`jit[name=corrcoef]` around a nested `cov`)."""
  check_arraylike("corrcoef", x)
  if dtype is not None and not dtypes.is_inexact(dtypes.canonicalize_dtype(dtype)):
    raise ValueError(f"corrcoef: dtype must be a subclass of float or complex; got "
                     f"dtype={dtype}")
  c = cov(x, y, rowvar, dtype=dtype)
  if ndim_of(c) == 0:
    return divide(c, c)
  d = diag(c)
  sd = astype(sqrt(real(d)), dtype_of(c))
  c = divide(divide(c, expand_dims(sd, 1)), expand_dims(sd, 0))
  re = clip(real(c), -1, 1)
  if dtypes.is_complex(dtype_of(c)):
    return lax.complex(re, clip(imag(c), -1, 1))
  return re


def bincount(x: ArrayLike, weights: ArrayLike | None = None, minlength: int = 0, *,
             length: int | None = None, out_sharding: Any = None):
  """Counts of each value 0, 1, ... in the non-negative integer array `x` (weighted sums
  with `weights`).

  As JAX's: one scatter-add of the weights into zeros at `clip(x, 0)` (out-of-range values
  dropped).

  Args:
    x: `int[n]` (bool counts as int32; negative values count as 0, as JAX's numpy clips
      them).
    weights: optional `[n]` weights; the result takes their dtype (else the default int).
    minlength: the minimum result length (static).
    length: the static result length (values >= length are dropped); required under jit.
    out_sharding: unsupported (must be None).

  Returns:
    `[length]` (or `[max(minlength, max(x) + 1)]`).

  Raises:
    TypeError: for `x` or `weights` not an array or scalar (a list), or non-integer `x`.
    ValueError: for `x` that is not 1-D, or weights of another shape.
    ConcretizationTypeError: if `x` is traced and `length` is not given.
    NotImplementedError: for `out_sharding`.
  """
  x = ensure_arraylike("bincount", x)
  if x.dtype == dtypes.bool_:
    x = lax.convert_element_type(x, dtypes.int32)
  if not dtypes.is_integer(x.dtype):
    raise TypeError(f"x argument to bincount must have an integer type; got {x.dtype}")
  if x.ndim != 1:
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
    weights = np.array(1, dtypes.default_int_dtype())
  else:
    weights = ensure_arraylike("bincount", weights)
    if weights.shape != x.shape:
      raise ValueError(f"type of weights must match type of x. Got typeof(x)="
                       f"{core.get_aval(x).str_short()} and typeof(weights)="
                       f"{core.get_aval(weights).str_short()}")
  if out_sharding is not None:
    raise NotImplementedError("jnp.bincount: out_sharding is not supported.")
  return zeros(length, weights.dtype).at[clip(x, 0)].add(weights, mode="drop")


def histogram_bin_edges(a: ArrayLike, bins: ArrayLike = 10,
                        range: Sequence[ArrayLike] | None = None,
                        weights: ArrayLike | None = None):
  """The edges of the bins of `histogram`, as JAX's numpy (NumPy's default, equal widths).

  Args:
    a: the data, an array.
    bins: the number of equal-width bins (a static int), or the edges themselves (`[k + 1]`,
      returned converted to the inexact dtype of `a`).
    range: `(lo, hi)` (default: `[min(a), max(a)]`); an empty range (`hi == lo`) is widened
      by 0.5 on each side.
    weights: unused (string `bins`, which would need them, are not supported).

  Returns:
    `[bins + 1]` edges `linspace(lo, hi, bins + 1)` in the inexact dtype of `a`.

  Raises:
    NotImplementedError: for string `bins`.
    TypeError: `a` or `bins` not an array or scalar (a list).
    ValueError: a `range` that is not two scalars.
    ConcretizationTypeError: a traced bin count.
  """
  del weights   # NB: only string bins (unsupported, as in JAX) use the weights
  if isinstance(bins, str):
    raise NotImplementedError("string values for `bins` not implemented.")
  check_arraylike("histogram_bin_edges", a, bins)
  arr = asarray(a)
  dt = to_inexact_dtype(dtype_of(arr))
  if np.ndim(bins) == 1:
    return asarray(bins, dt)
  nbins = operator.index(check_concrete(bins, "histogram_bin_edges", "bins"))
  if range is None:
    range = [reductions.min(arr), reductions.max(arr)]
  range = asarray(range, dt)
  if np.shape(range) != (2,):
    raise ValueError(f"`range` must be either None or a sequence of scalars, got {range}")
  # NB: the spread is computed once per end, as in JAX's program
  lo = where(equal(reductions.ptp(range), 0), subtract(range[0], 0.5), range[0])
  hi = where(equal(reductions.ptp(range), 0), add(range[1], 0.5), range[1])
  return linspace(lo, hi, nbins + 1, dtype=dt)


def histogram(a: ArrayLike, bins: ArrayLike = 10, range: Sequence[ArrayLike] | None = None,
              weights: ArrayLike | None = None, density: bool | None = None):
  """A histogram of the flattened `a`, as JAX's numpy: the bin of each value by
  `searchsorted` on the edges, the counts by one scatter-add of the weights.

  Args:
    a: array of values (integers promote to the default float).
    bins: the number of equal-width bins (static), or the bin edges `[k + 1]` (an array).
    range: `(lo, hi)` for equal-width bins (default: the data's min and max).
    weights: optional weights shaped like `a`.
    density: normalize so that the histogram integrates to 1 over the edges.

  Returns:
    `(counts [k], edges [k + 1])`; counts have the (inexact) dtype of `a` and `weights`.
    The last bin is closed, the others half-open; values outside the edges are not counted.

  Raises:
    TypeError: `a`, `bins` or `weights` not an array or scalar (a list).
    ValueError: if `weights` and `a` differ in shape; as `histogram_bin_edges`.
  """
  if weights is None:
    a, _ = ensure_arraylike("histogram", a, bins)
    a, = promote_dtypes_inexact(a)
    weights = ones_like(a)
  else:
    a, _, weights = ensure_arraylike("histogram", a, bins, weights)
    if shape_of(a) != shape_of(weights):
      raise ValueError("weights should have the same shape as a.")
    a, weights = promote_dtypes_inexact(a, weights)
  edges = histogram_bin_edges(a, bins, range, weights)
  k = shape_of(edges)[0]
  idx = searchsorted(edges, a, side="right")
  idx = where(equal(a, edges[-1]), k - 1, idx)
  counts = zeros(k, dtype_of(weights)).at[idx].add(weights)[1:]
  if density:
    counts = divide(divide(counts, diff(edges)), reductions.sum(counts))
  return counts, edges


def histogram2d(x: ArrayLike, y: ArrayLike, bins: Any = 10, range: Sequence[Any] | None = None,
                weights: ArrayLike | None = None, density: bool | None = None):
  """A 2-D histogram of the points `(x[i], y[i])`, as JAX's numpy (`histogramdd` of the
  `[N, 2]` sample).

  Args:
    x, y: `[N]` coordinates.
    bins: an int (for both), a pair (one int or edge array each), or one edge array (for
      both).
    range, weights, density: as `histogramdd`.

  Returns:
    `(counts [bx, by], xedges [bx + 1], yedges [by + 1])`.

  Raises:
    As `histogramdd`.
  """
  x, y = ensure_arraylike("histogram2d", x, y)
  try:
    n = len(bins)
  except TypeError:
    n = 1
  if n not in (1, 2):
    bins = [asarray(bins)] * 2
  counts, edges = histogramdd(transpose(asarray([x, y])), bins, range, weights, density)
  return counts, edges[0], edges[1]


def histogramdd(sample: ArrayLike, bins: Any = 10, range: Sequence[Any] | None = None,
                weights: ArrayLike | None = None, density: bool | None = None):
  """A D-dimensional histogram of the points `sample` (`[N, D]`), as JAX's numpy: the bin
  of each coordinate by `searchsorted` on that dimension's edges (the outside ones counting
  as bins 0 and k + 1), a flat index of the D bins (`ravel_multi_index`), a `bincount` of
  it (weighted), and the inner bins kept.

  Args:
    sample: `[N, D]` points (integers promote to the default float).
    bins: an int (bins per dimension), or one int or edge array per dimension.
    range: None, or per dimension `(lo, hi)` or None.
    weights: optional `[N]` weights.
    density: normalize to a probability density (divided by the total and the bin volumes).

  Returns:
    `(counts [b_1, ..., b_D], [edges_1 [b_1 + 1], ..., edges_D [b_D + 1]])`; counts of the
    default int dtype, or the weights' (inexact) dtype, or the sample's with `density`.

  Raises:
    TypeError: `sample` or `weights` not an array or scalar (a list).
    ValueError: mismatched `bins`, `range` or `weights`.
  """
  if weights is None:
    sample = ensure_arraylike("histogramdd", sample)
    sample, = promote_dtypes_inexact(sample)
  else:
    sample, weights = ensure_arraylike("histogramdd", sample, weights)
    if np.shape(weights) != np.shape(sample)[:1]:
      raise ValueError("should have one weight for each sample.")
    sample, weights = promote_dtypes_inexact(sample, weights)
  n, d = shape_of(sample)
  if range is not None and (len(range) != d or builtins.any(
      r is not None and np.shape(r)[0] != 2 for r in range)):
    raise ValueError(f"For sample.shape={(n, d)}, range must be a sequence of {d} pairs or "
                     f"Nones; got {range=}")
  try:
    bins_per_dim = list(bins)
  except TypeError:
    bins_per_dim = [bins] * d
  else:
    if len(bins_per_dim) != d:
      raise ValueError("should be a bin for each dimension.")
  idx_by_dim, edges_by_dim = [], []
  for i in builtins.range(d):
    # NB: the column is indexed anew at each use, as in JAX's program
    edges = histogram_bin_edges(sample[:, i], bins_per_dim[i],
                                None if range is None else range[i], weights)
    idx = searchsorted(edges, sample[:, i], side="right")
    idx_by_dim.append(where(equal(sample[:, i], edges[-1]), subtract(idx, 1), idx))
    edges_by_dim.append(edges)
  nbins = tuple(shape_of(e)[0] + 1 for e in edges_by_dim)
  widths = [diff(e) for e in edges_by_dim]
  flat = ravel_multi_index(tuple(idx_by_dim), nbins, mode="clip")
  counts = reshape(bincount(flat, weights, length=math.prod(nbins)), nbins)
  counts = counts[(slice(1, -1),) * d]
  if density:
    counts = astype(counts, dtype_of(sample))
    counts = divide(counts, reductions.sum(counts))
    for w in ix_(*widths):
      counts = divide(counts, w)
  return counts, edges_by_dim


@jit(static_argnames=("right", "method"))
def digitize(x: ArrayLike, bins: ArrayLike, right: bool = False, *, method: str | None = None):
  """The index of the bin each value of `x` falls in, for monotonic `bins` (increasing or
  decreasing), as numpy.digitize: `searchsorted` on the bins (reversed when they decrease).
  Jitted as JAX's (`jit[name=digitize]`; static `right`, `method`).

  Args:
    x: values `[*s]`.
    bins: `[n]`, monotonic.
    right: whether the bins are closed on the right.
    method: `searchsorted`'s method.

  Returns:
    `int32[*s]`.

  Raises:
    TypeError: `x` or `bins` not an array or scalar (a list).
    ValueError: if `bins` is not 1-D.
  """
  x, b = ensure_arraylike("digitize", x, bins)
  if b.ndim != 1:
    raise ValueError(f"digitize: bins must be a 1-dimensional array; got bins={bins}")
  if b.shape[0] == 0:
    return zeros_like(x, dtype=np.int32)
  side = "left" if right else "right"
  kw = {} if method is None else {"method": method}
  return where(b[-1] >= b[0], searchsorted(b, x, side=side, **kw),
               b.shape[0] - searchsorted(b[::-1], x, side=side, **kw))


def _interp(x, xp, fp, left=None, right=None, period=None):
  """The body of `interp` (jitted under this name, as JAX's): the segment of each query by
  `searchsorted`, then `fp[i-1] + (x - xp[i-1]) / (xp[i] - xp[i-1]) * (fp[i] - fp[i-1])`
  (the left value itself on a segment of zero width, so no NaN derivative)."""
  x, xp, fp = ensure_arraylike("interp", x, xp, fp)
  if shape_of(xp) != shape_of(fp) or ndim_of(xp) != 1:
    raise ValueError("xp and fp must be one-dimensional arrays of equal size")
  x, xp = promote_dtypes_inexact(x, xp)
  fp, = promote_dtypes_inexact(fp)
  extrapolate = {}
  for name, v in (("left", left), ("right", right)):
    if isinstance(v, str) and v != "extrapolate":
      raise ValueError(f"the only valid string value of `{name}` is 'extrapolate', but got: "
                       f"{v!r}")
    extrapolate[name] = isinstance(v, str)
  if dtypes.is_complex(dtype_of(x)):
    raise ValueError("jnp.interp: complex x values not supported.")
  if period is not None:
    if np.ndim(period) != 0:
      raise ValueError(f"period must be a scalar; got {period}")
    period = absolute(period)
    x, xp = remainder(x, period), remainder(xp, period)
    xp, fp = lax.sort_key_val(xp, fp)
    xp = concatenate([subtract(xp[-1:], period), xp, add(xp[:1], period)])
    fp = concatenate([fp[-1:], fp, fp[:1]])
  i = clip(searchsorted(xp, x, side="right"), 1, shape_of(xp)[0] - 1)
  df = subtract(fp[i], fp[subtract(i, 1)])
  dx = subtract(xp[i], xp[subtract(i, 1)])
  delta = subtract(x, xp[subtract(i, 1)])
  eps = np.spacing(np.finfo(dtype_of(xp)).eps)
  dx0 = lax.abs(dx) <= eps
  f = where(dx0, fp[subtract(i, 1)],
            add(fp[subtract(i, 1)], multiply(divide(delta, where(dx0, 1, dx)), df)))
  # NB: the fill values are taken (`fp[0]`, `fp[-1]`) also where `period` leaves them
  # unused, as in JAX's program
  if not extrapolate["left"]:
    left_value = fp[0] if left is None else left
    if period is None:
      f = where(less(x, xp[0]), left_value, f)
  if not extrapolate["right"]:
    right_value = fp[-1] if right is None else right
    if period is None:
      f = where(greater(x, xp[-1]), right_value, f)
  return f


_INTERP_JITS: dict = {}


def interp(x: ArrayLike, xp: ArrayLike, fp: ArrayLike, left: ArrayLike | str | None = None,
           right: ArrayLike | str | None = None, period: ArrayLike | None = None):
  """Piecewise-linear interpolation of the points `(xp, fp)` at `x` (numpy.interp), as JAX's
  numpy: the jitted `_interp`, with `left`, `right` and `period` static where they are None
  or strings, traced otherwise. Differentiable in `x`, `xp` and `fp`.

  Args:
    x: query points `[*q]` (real).
    xp: increasing sample points `[n]` (any order with `period`: they are sorted).
    fp: sample values `[n]` (may be complex).
    left, right: values below `xp[0]` / above `xp[-1]` (default: `fp[0]` / `fp[-1]`), or
      'extrapolate' to extend the end segments.
    period: the period of periodic `x` (then `left`/`right` are ignored).

  Returns:
    `[*q]`, the inexact promotion of `fp`.

  Raises:
    TypeError: an argument that is not an array or scalar (a list).
    ValueError: `xp`, `fp` not 1-D of one size, complex `x`, a string other than
      'extrapolate', or a non-scalar period.
  """
  static = tuple(name for name, v in (("left", left), ("right", right), ("period", period))
                 if v is None or (name != "period" and isinstance(v, str)))
  fn = _INTERP_JITS.get(static)
  if fn is None:
    fn = _INTERP_JITS[static] = jit(_interp, static_argnames=static)
  return fn(x, xp, fp, left, right, period)
