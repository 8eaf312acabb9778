"""`stagecraft.scipy.stats.betabinom`: the beta-binomial distribution, as JAX's
`scipy.stats.betabinom`.

Mass `C(n, y) B(y + a, n - y + b) / B(a, b)` with `y = floor(k) - loc`, written with `betaln`
(`C(n, y) = 1 / ((n + 1) B(n - y + 1, y + 1))`). Both functions broadcast their arguments
together and promote them to one inexact dtype (integers and bools to the default float
dtype; Python scalars stay weakly typed).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import numpy as jnp
from stagecraft.scipy import special
from stagecraft.scipy.stats._util import promote_args_inexact

__all__ = ["logpmf", "pmf"]

ArrayLike = Any


def logpmf(k: ArrayLike, n: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0) -> Any:
  """Log of the beta-binomial mass.

  Args:
    k, n, a, b, loc: array-likes (`n` trials; `a`, `b` the beta shapes), broadcast together
      and promoted to one inexact dtype T.

  Returns:
    `T[broadcast shape]`; 0 for `y = n = 0`, `-inf` for `y < -loc`, `y > n` or `y + a <= 0`,
    NaN for `n < 0`, `a <= 0` or `b <= 0`.
  """
  k, n, a, b, loc = promote_args_inexact("betabinom.logpmf", k, n, a, b, loc)
  y = jnp.floor(k) - loc
  log_comb = -(jnp.log1p(n) + special.betaln(n - y + 1, y + 1))
  lp = log_comb + special.betaln(y + a, n - y + b) - special.betaln(a, b)
  lp = jnp.where((y == 0) & (n == 0), 0.0, lp)
  lp = jnp.where((y < -loc) | (y > n) | (y + a <= 0), -np.inf, lp)
  return jnp.where((n < 0) | (a <= 0) | (b <= 0), np.nan, lp)


def pmf(k: ArrayLike, n: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0) -> Any:
  """The beta-binomial mass, `exp(logpmf)`; shapes and dtypes as `logpmf`."""
  return jnp.exp(logpmf(k, n, a, b, loc))
