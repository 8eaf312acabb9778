"""`stagecraft.scipy.special`: special functions as JAX's `scipy.special` (for now
`logsumexp`), composed from `stagecraft.numpy` and `stagecraft.lax`."""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import dtypes, lax
from stagecraft import numpy as jnp
from stagecraft.numpy.reductions import masked
from stagecraft.numpy.util import promote_dtypes_inexact

__all__ = ["logsumexp"]


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
    a_arr, b_arr = promote_dtypes_inexact(a, b)
    a_arr = jnp.where(b_arr != 0, a_arr, -np.inf)
  else:
    a_arr, = promote_dtypes_inexact(a)
    b_arr = a_arr
  dims = _reduction_dims(a_arr.ndim, axis)
  real = jnp.real(a_arr) if dtypes.is_complex(a_arr.dtype) else a_arr
  amax = jnp.max(masked(real, where, -np.inf), axis=dims, keepdims=keepdims, initial=-np.inf)
  amax = lax.stop_gradient(jnp.where(jnp.isfinite(amax), amax, jnp.zeros_like(amax)))
  amax_with_dims = amax if keepdims else lax.expand_dims(amax, dims)
  exp_a = jnp.exp(a_arr - amax_with_dims.astype(a_arr.dtype))
  if b is not None:
    exp_a = exp_a * b_arr
  sumexp = jnp.sum(masked(exp_a, where, 0), axis=dims, keepdims=keepdims)
  sign = jnp.sign(sumexp)
  if return_sign or not dtypes.is_complex(a_arr.dtype):
    sumexp = jnp.abs(sumexp)
  out = jnp.log(sumexp) + amax.astype(sumexp.dtype)
  if return_sign:
    return out, sign
  if b is not None and not dtypes.is_complex(out.dtype):
    out = jnp.where(sign < 0, jnp.array(np.nan, dtype=out.dtype), out)
  return out
