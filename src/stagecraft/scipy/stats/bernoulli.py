"""`stagecraft.scipy.stats.bernoulli`: the Bernoulli distribution, as JAX's
`scipy.stats.bernoulli`.

Mass `p` at 1 and `1 - p` at 0 (shifted by `loc`). Every function broadcasts its arguments
together and promotes them to one inexact dtype (integers and bools to the default float
dtype; Python scalars stay weakly typed).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import lax
from stagecraft import numpy as jnp
from stagecraft.scipy import special
from stagecraft.scipy.stats._util import promote_args_inexact

__all__ = ["logpmf", "pmf", "cdf", "ppf"]

ArrayLike = Any


def logpmf(k: ArrayLike, p: ArrayLike, loc: ArrayLike = 0) -> Any:
  """Log of the Bernoulli mass, `xlogy(y, p) + xlog1py(1 - y, -p)` with `y = k - loc`.

  Args:
    k, p, loc: array-likes, broadcast together and promoted to one inexact dtype T.

  Returns:
    `T[broadcast shape]`; `-inf` for `y` outside [0, 1] (as JAX, a non-integer `y` inside
    it is not rejected).
  """
  k, p, loc = promote_args_inexact("bernoulli.logpmf", k, p, loc)
  y = k - loc
  lp = special.xlogy(y, p) + special.xlog1py(1 - y, -p)
  return jnp.where((y < 0) | (y > 1), -np.inf, lp)


def pmf(k: ArrayLike, p: ArrayLike, loc: ArrayLike = 0) -> Any:
  """The Bernoulli mass, `exp(logpmf)`; shapes and dtypes as `logpmf`."""
  return jnp.exp(logpmf(k, p, loc))


def cdf(k: ArrayLike, p: ArrayLike) -> Any:
  """The distribution function: 0 for `k < 0`, `1 - p` for `0 <= k < 1`, 1 for `k >= 1`;
  NaN for NaN arguments or `p` outside [0, 1]."""
  k, p = promote_args_inexact("bernoulli.cdf", k, p)
  bad = jnp.isnan(k) | jnp.isnan(p) | (p < 0) | (p > 1)
  return jnp.select([bad, k < 0, k < 1], [np.nan, 0.0, 1 - p], 1.0)


def ppf(q: ArrayLike, p: ArrayLike) -> Any:
  """The quantile function: 0 for `q <= 1 - p`, else 1; NaN for NaN arguments or `q`, `p`
  outside [0, 1]."""
  q, p = promote_args_inexact("bernoulli.ppf", q, p)
  bad = jnp.isnan(q) | jnp.isnan(p) | (p < 0) | (p > 1) | (q < 0) | (q > 1)
  zero, one = (lax.convert_element_type(v, q.dtype, weak_type=q.weak_type) for v in (0, 1))
  return jnp.where(bad, np.nan, jnp.where(q <= 1 - p, zero, one))
