"""`stagecraft.scipy.stats.multivariate_normal`: the multivariate normal distribution, as
JAX's `scipy.stats.multivariate_normal`.

Density `exp(-(x - mean)^T cov^-1 (x - mean) / 2) / sqrt((2 pi)**n det(cov))`. The vector
axis is the LAST axis of `x` and `mean`; leading axes of `x`, `mean` and `cov` broadcast
(`cov` may also be a scalar: `cov * I`). A `mean` of shape `()` gives the univariate normal
with variance `cov`.

Algorithm: Cholesky factor `cov = L L^T`; the quadratic form is `|L^-1 (x - mean)|**2` (one
triangular solve) and `log det(cov) = 2 sum(log diag L)`. As in JAX, a covariance that is not
positive definite gives NaN rather than an error.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import numpy as jnp
from stagecraft.lax import linalg as lax_linalg
from stagecraft.scipy.stats._util import check_arraylike, promote_dtypes_inexact

__all__ = ["logpdf", "pdf"]

ArrayLike = Any


def logpdf(x: ArrayLike, mean: ArrayLike, cov: ArrayLike, allow_singular: None = None) -> Any:
  """Log of the multivariate normal density.

  Args:
    x: `T[*bx, n]` points (`T[*bx]` if `mean` is a scalar).
    mean: `T[*bm, n]`, or a scalar for the univariate case.
    cov: `T[*bc, n, n]`, positive definite; or a scalar variance (times the identity).
    allow_singular: must be None (JAX does not implement singular covariances).

  Returns:
    `T[broadcast(bx, bm, bc)]`, T the promoted inexact dtype of the three arguments.

  Raises:
    NotImplementedError: if `allow_singular` is given.
    ValueError: if `cov` is neither a scalar nor of shape `(..., n, n)` matching `mean`.
  """
  if allow_singular is not None:
    raise NotImplementedError("allow_singular argument of multivariate_normal.logpdf")
  check_arraylike("multivariate_normal.logpdf", x, mean, cov)
  x, mean, cov = promote_dtypes_inexact(x, mean, cov)
  log_2pi = float(np.log(2 * np.pi))   # a Python float: weakly typed
  if mean.ndim == 0:
    return -0.5 * jnp.square(x - mean) / cov - 0.5 * (log_2pi + jnp.log(cov))
  n = mean.shape[-1]
  diff = x - mean
  if cov.ndim == 0:
    return (-0.5 * jnp.sum(diff * diff, axis=-1) / cov
            - n / 2 * (log_2pi + jnp.log(cov)))
  if cov.ndim < 2 or cov.shape[-2:] != (n, n):
    raise ValueError("multivariate_normal.logpdf got incompatible shapes: expected cov of "
                     f"shape (..., {n}, {n}) or a scalar for mean.shape={mean.shape}, got "
                     f"cov.shape={cov.shape}")
  chol = jnp.linalg.cholesky(cov)
  batch = jnp.broadcast_shapes(chol.shape[:-2], diff.shape[:-1])
  chol_b = jnp.broadcast_to(chol, batch + (n, n))
  diff_b = jnp.broadcast_to(diff, batch + (n,))[..., None]
  z = lax_linalg.triangular_solve(chol_b, diff_b, left_side=True, lower=True)[..., 0]
  log_det_half = jnp.sum(jnp.log(jnp.diagonal(chol, axis1=-2, axis2=-1)), axis=-1)
  return -0.5 * jnp.sum(z * z, axis=-1) - n / 2 * log_2pi - log_det_half


def pdf(x: ArrayLike, mean: ArrayLike, cov: ArrayLike) -> Any:
  """The multivariate normal density, `exp(logpdf(x, mean, cov))`; shapes, dtypes and errors
  as `logpdf`."""
  return jnp.exp(logpdf(x, mean, cov))
