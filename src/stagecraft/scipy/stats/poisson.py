"""`stagecraft.scipy.stats.poisson`: the Poisson distribution, as JAX's
`scipy.stats.poisson`.

Mass `mu**y exp(-mu) / y!` at the integers `y = k - loc >= 0`. Every function broadcasts its
arguments together and promotes them to one inexact dtype (integers and bools to the default
float dtype; Python scalars stay weakly typed).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import numpy as jnp
from stagecraft.scipy import special
from stagecraft.scipy.stats._util import promote_args_inexact

__all__ = ["logpmf", "pmf", "cdf", "entropy"]

ArrayLike = Any

# Below this mean the entropy is summed over k = 0.._ENTROPY_TERMS-1; above it the
# asymptotic series is accurate to float64 rounding.
_ENTROPY_SUM_BELOW = 100.0
_ENTROPY_TERMS = 256


def logpmf(k: ArrayLike, mu: ArrayLike, loc: ArrayLike = 0) -> Any:
  """Log of the Poisson mass, `xlogy(y, mu) - gammaln(y + 1) - mu`.

  Args:
    k, mu, loc: array-likes, broadcast together and promoted to one inexact dtype T.

  Returns:
    `T[broadcast shape]`; `-inf` for `y < 0` or non-integer `k`.
  """
  k, mu, loc = promote_args_inexact("poisson.logpmf", k, mu, loc)
  y = k - loc
  lp = special.xlogy(y, mu) - special.gammaln(y + 1) - mu
  return jnp.where((y < 0) | (jnp.round(k) != k), -np.inf, lp)


def pmf(k: ArrayLike, mu: ArrayLike, loc: ArrayLike = 0) -> Any:
  """The Poisson mass, `exp(logpmf)`; shapes and dtypes as `logpmf`.

  Examples:
    >>> import numpy as np
    >>> pmf(np.float32([0, 1, 2]), 2.0)
    Array([0.13533522, 0.27067056, 0.2706705 ], dtype=float32)
  """
  return jnp.exp(logpmf(k, mu, loc))


def cdf(k: ArrayLike, mu: ArrayLike, loc: ArrayLike = 0) -> Any:
  """The distribution function `gammaincc(floor(y) + 1, mu)` (`P(Y <= y)` is the upper
  regularized incomplete gamma function); 0 for `y < 0`."""
  k, mu, loc = promote_args_inexact("poisson.cdf", k, mu, loc)
  y = k - loc
  neg = y < 0
  out = special.gammaincc(jnp.floor(1 + jnp.where(neg, 0, y)), mu)
  return jnp.where(neg, 0, out)


def entropy(mu: ArrayLike, loc: ArrayLike = 0) -> Any:
  """The entropy `-sum_k p_k log p_k` of the Poisson distribution (in nats).

  Args:
    mu: array-like mean, `mu >= 0`.
    loc: array-like shift (it does not change the entropy; it only broadcasts).

  Returns:
    `T[broadcast shape of mu and loc]` (T: mu and loc promoted to an inexact dtype); 0 for
    `mu = 0`.

  Algorithm: for `mu < 100` the sum over `k < 256` (the mass beyond is below 1e-40); above,
  the asymptotic series `log(2 pi e mu)/2 - 1/(12 mu) - 1/(24 mu**2) - 19/(360 mu**3)`
  (Evans & Boersma, "The entropy of a Poisson distribution", SIAM Review 1988).
  """
  mu, loc = promote_args_inexact("poisson.entropy", mu, loc)
  shape = jnp.broadcast_shapes(mu.shape, loc.shape)
  small = mu < _ENTROPY_SUM_BELOW
  mu_small = jnp.where(small, mu, 1.0)
  ks = jnp.arange(_ENTROPY_TERMS, dtype=mu.dtype).reshape((_ENTROPY_TERMS,) + (1,) * mu.ndim)
  p = pmf(ks, mu_small)
  summed = -jnp.sum(special.xlogy(p, p), axis=0)
  mu_large = jnp.where(small, _ENTROPY_SUM_BELOW, mu)
  inv = 1 / mu_large
  series = (0.5 * jnp.log(2 * np.pi * np.e * mu_large)
            - inv * (1 / 12 + inv * (1 / 24 + inv * (19 / 360))))
  out = jnp.where(mu == 0, 0.0, jnp.where(small, summed, series))
  return jnp.broadcast_to(out, shape)
