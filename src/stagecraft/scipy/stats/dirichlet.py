"""`stagecraft.scipy.stats.dirichlet`: the Dirichlet distribution, as JAX's
`scipy.stats.dirichlet`.

Density `prod_i x_i**(alpha_i - 1) / B(alpha)` on the open simplex (every `x_i > 0`, and the
`x_i` sum to 1 within 1e-6); `logpdf` is `-inf` off it. The categories are on the FIRST axis
of `x` (SciPy's convention): `x: T[K, *batch]` or `T[K-1, *batch]` (then the last coordinate
is `1 - sum(x)`), `alpha: T[K]`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import numpy as jnp
from stagecraft.scipy import special
from stagecraft.scipy.stats._util import check_arraylike, promote_dtypes_inexact

__all__ = ["logpdf", "pdf"]

ArrayLike = Any


def logpdf(x: ArrayLike, alpha: ArrayLike) -> Any:
  """Log of the Dirichlet density.

  Args:
    x: `T[K, *batch]` or `T[K-1, *batch]`, points of the simplex along axis 0.
    alpha: `T[K]`, the concentration parameters.

  Returns:
    `T[*batch]` (dtype: x and alpha promoted to one inexact dtype):
    `sum_i xlogy(alpha_i - 1, x_i) - (sum_i gammaln(alpha_i) - gammaln(sum_i alpha_i))`,
    `-inf` off the simplex.

  Raises:
    ValueError: if `alpha` is not one-dimensional, or `x.shape[0]` is neither `K` nor `K-1`.
  """
  check_arraylike("dirichlet.logpdf", x, alpha)
  x, alpha = promote_dtypes_inexact(x, alpha)
  if alpha.ndim != 1:
    raise ValueError(f"`alpha` must be one-dimensional; got alpha.shape={alpha.shape}")
  k = alpha.shape[0]
  if x.ndim == 0 or x.shape[0] not in (k, k - 1):
    raise ValueError("`x` must have either the same number of entries as `alpha` or one "
                     f"entry fewer; got x.shape={x.shape}, alpha.shape={alpha.shape}")
  if x.shape[0] != k:
    x = jnp.concatenate([x, 1 - jnp.sum(x, axis=0, keepdims=True)], axis=0)
  log_beta = jnp.sum(special.gammaln(alpha)) - special.gammaln(jnp.sum(alpha))
  alpha_b = jnp.reshape(alpha, (k,) + (1,) * (x.ndim - 1))
  lp = jnp.sum(special.xlogy(alpha_b - 1, x), axis=0) - log_beta
  on_simplex = jnp.all(x > 0, axis=0) & (jnp.abs(jnp.sum(x, axis=0) - 1) < 1e-6)
  return jnp.where(on_simplex, lp, -np.inf)


def pdf(x: ArrayLike, alpha: ArrayLike) -> Any:
  """The Dirichlet density, `exp(logpdf)`; shapes, dtypes and errors as `logpdf`."""
  return jnp.exp(logpdf(x, alpha))
