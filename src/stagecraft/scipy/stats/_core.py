"""`mode`, `rankdata` and `sem` of `stagecraft.scipy.stats`, as JAX's `scipy.stats`.

All three work on static shapes only (no data-dependent output shapes), so they trace under
`jit`; like JAX they implement only `nan_policy="propagate"` (and `"omit"` for `sem`).
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from stagecraft import dtypes, lax
from stagecraft import numpy as jnp
from stagecraft.numpy.util import canonicalize_axis
from stagecraft.scipy.stats._util import check_arraylike, promote_args_inexact

__all__ = ["ModeResult", "mode", "rankdata", "sem"]

ArrayLike = Any

_NAN_POLICIES = ("propagate", "omit", "raise")


class ModeResult(NamedTuple):
  """The result of `mode`: the most common values and how often each occurs."""
  mode: Any
  count: Any


def _check_nan_policy(name: str, nan_policy: str) -> None:
  if nan_policy not in _NAN_POLICIES:
    raise ValueError(f"Illegal nan_policy value {nan_policy!r}; expected one of "
                     "{'propagate', 'omit', 'raise'}")
  if nan_policy == "omit":
    raise NotImplementedError(f"Logic for `nan_policy` of {nan_policy} is not implemented")
  if nan_policy == "raise":
    raise NotImplementedError(
        f"In order to best JIT compile `{name}`, we cannot know whether `x` contains nans. "
        f"Please check if nans exist in `x` outside of the `{name}` function.")


def _run_bounds(s):
  """For `s` sorted along its last axis: the first and last index of the run of equal values
  each position belongs to (NaNs form one run, as `jnp.unique(equal_nan=True)`)."""
  n = s.shape[-1]
  both_nan = jnp.isnan(s[..., 1:]) & jnp.isnan(s[..., :-1]) if dtypes.is_inexact(s.dtype) \
      else jnp.zeros(s[..., 1:].shape, bool)
  differs = (s[..., 1:] != s[..., :-1]) & ~both_nan
  edge = jnp.ones(s.shape[:-1] + (1,), bool)
  starts_run = jnp.concatenate([edge, differs], axis=-1)
  ends_run = jnp.concatenate([differs, edge], axis=-1)
  idx = jnp.broadcast_to(jnp.arange(n), s.shape)
  first = lax.cummax(jnp.where(starts_run, idx, 0), axis=s.ndim - 1)
  last = lax.cummin(jnp.where(ends_run, idx, n - 1), axis=s.ndim - 1, reverse=True)
  return starts_run, first, last


def mode(a: ArrayLike, axis: int | None = 0, nan_policy: str = "propagate",
         keepdims: bool = False) -> ModeResult:
  """The most common value along `axis` and its count, as `scipy.stats.mode`.

  Args:
    a: array-like `T[*s]` (a scalar is treated as shape `(1,)`).
    axis: the axis to reduce (negative allowed), or None for the flattened array.
    nan_policy: only "propagate" (NaNs count as one value, as in JAX).
    keepdims: keep the reduced axis with size 1.

  Returns:
    `ModeResult(mode, count)`: `mode: T[s without axis]`, the smallest of the most common
    values; `count`: the default int dtype, how often it occurs. For an empty axis both are
    `nan` / `0` of the default float dtype, as in JAX.

  Raises:
    ValueError: for an unknown `nan_policy` or an out-of-range `axis`.
    NotImplementedError: for `nan_policy` "omit" or "raise".

  Algorithm: sort each lane, find the runs of equal values with a running max/min of their
  boundaries, and take the first longest run.

  Examples:
    >>> import numpy as np
    >>> mode(np.array([1, 3, 3, 2]))
    ModeResult(mode=Array(3, dtype=int32), count=Array(2, dtype=int32))
  """
  check_arraylike("mode", a)
  x = jnp.atleast_1d(a)
  _check_nan_policy("mode", nan_policy)
  if axis is None:
    out_shape = (1,) * x.ndim if keepdims else ()
    x = jnp.ravel(x)
    axis = 0
  else:
    axis = canonicalize_axis(axis, x.ndim, "mode")
    out_shape = tuple(1 if keepdims and i == axis else d
                      for i, d in enumerate(x.shape) if keepdims or i != axis)
  n = x.shape[axis]
  if n == 0:
    float_ = dtypes.default_float_dtype()
    return ModeResult(jnp.full(out_shape, np.nan, float_), jnp.zeros(out_shape, float_))
  lanes = jnp.reshape(jnp.moveaxis(x, axis, -1), (-1, n))
  s = jnp.sort(lanes, axis=-1)
  _, first, last = _run_bounds(s)
  counts = last - first + 1
  best = jnp.argmax(counts, axis=-1)
  vals = jnp.take_along_axis(s, best[:, None], axis=-1)[:, 0]
  return ModeResult(jnp.reshape(vals, out_shape), jnp.reshape(jnp.max(counts, axis=-1),
                                                              out_shape))


def _rank_lanes(x, method: str):
  """Ranks (1-based, default float dtype) of `x` along its last axis."""
  out_dtype = dtypes.default_float_dtype()
  n = x.shape[-1]
  if n == 0:
    return jnp.zeros(x.shape, out_dtype)
  idx = jnp.broadcast_to(jnp.arange(n), x.shape)
  s, perm = lax.sort_key_val(x, idx, dimension=x.ndim - 1)
  inv = jnp.argsort(perm, axis=-1)
  if method == "ordinal":
    ranks = inv + 1
  else:
    starts_run, first, last = _run_bounds(s)
    if method == "dense":
      by_sorted = jnp.cumsum(starts_run, axis=-1)
    elif method == "min":
      by_sorted = first + 1
    elif method == "max":
      by_sorted = last + 1
    else:  # average
      by_sorted = (first + last).astype(out_dtype) / 2 + 1
    ranks = jnp.take_along_axis(by_sorted, inv, axis=-1)
  ranks = ranks.astype(out_dtype)
  if dtypes.is_inexact(x.dtype):
    has_nan = jnp.any(jnp.isnan(x), axis=-1, keepdims=True)
    ranks = jnp.where(has_nan, jnp.array(np.nan, out_dtype), ranks)
  return ranks


def rankdata(a: ArrayLike, method: str = "average", *, axis: int | None = None,
             nan_policy: str = "propagate") -> Any:
  """Ranks of the data (1 for the smallest), as `scipy.stats.rankdata`.

  Args:
    a: array-like `T[*s]`.
    method: how ties are ranked: "average" (mean of their ranks), "min", "max", "dense"
      (consecutive ranks of the distinct values) or "ordinal" (order of appearance).
    axis: rank along this axis; None ranks the flattened array.
    nan_policy: only "propagate": a lane holding a NaN is all NaN.

  Returns:
    Ranks in the default float dtype: shape `s` with `axis`, `(size,)` without.

  Raises:
    ValueError: for an unknown `method` or `nan_policy`.
    NotImplementedError: for `nan_policy` "omit" or "raise".

  Algorithm: a stable sort with the original positions, run boundaries of equal values by a
  running max/min, and the inverse permutation back to the input order.

  Examples:
    >>> import numpy as np
    >>> rankdata(np.array([10, 30, 20, 20]))
    Array([1. , 4. , 2.5, 2.5], dtype=float32)
  """
  check_arraylike("rankdata", a)
  _check_nan_policy("rankdata", nan_policy)
  if method not in ("average", "min", "max", "dense", "ordinal"):
    raise ValueError(f"unknown method '{method}'")
  x = jnp.asarray(a)
  if axis is None:
    return _rank_lanes(jnp.ravel(x), method)
  axis = canonicalize_axis(axis, x.ndim, "rankdata")
  return jnp.moveaxis(_rank_lanes(jnp.moveaxis(x, axis, -1), method), -1, axis)


def sem(a: ArrayLike, axis: int | None = 0, ddof: int = 1, nan_policy: str = "propagate", *,
        keepdims: bool = False) -> Any:
  """The standard error of the mean, `std(a, ddof) / sqrt(count)`, as `scipy.stats.sem`.

  Args:
    a: array-like `T[*s]` (promoted to an inexact dtype T).
    axis: the axis to reduce, or None for all elements.
    ddof: delta degrees of freedom of the standard deviation.
    nan_policy: "propagate" (NaNs give NaN) or "omit" (NaNs are left out of the std and the
      count).
    keepdims: keep the reduced axis with size 1.

  Returns:
    `T[s without axis]`.

  Raises:
    ValueError: for any other `nan_policy` (`'raise is not supported'`).
  """
  b, = promote_args_inexact("sem", a)
  if nan_policy == "propagate":
    size = b.size if axis is None else b.shape[axis]
    return (jnp.std(b, axis, ddof=ddof, keepdims=keepdims)
            / jnp.sqrt(jnp.asarray(size)).astype(b.dtype))
  if nan_policy == "omit":
    count = jnp.sum(~jnp.isnan(b), axis, keepdims=keepdims)
    return jnp.nanstd(b, axis, ddof=ddof, keepdims=keepdims) / jnp.sqrt(count).astype(b.dtype)
  raise ValueError(f"{nan_policy} is not supported")
