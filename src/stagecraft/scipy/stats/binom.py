"""`stagecraft.scipy.stats.binom`: the binomial distribution, as JAX's `scipy.stats.binom`.

Mass `C(n, y) p**y (1-p)**(n-y)` with `y = k - loc`, the binomial coefficient through
`gammaln` (so non-integer `n` and `y` are accepted, as in JAX). Both functions broadcast their
arguments together and promote them to one inexact dtype (integers and bools to the default
float dtype; Python scalars stay weakly typed).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import numpy as jnp
from stagecraft.scipy import special
from stagecraft.scipy.stats._util import promote_args_inexact

__all__ = ["logpmf", "pmf"]

ArrayLike = Any


def logpmf(k: ArrayLike, n: ArrayLike, p: ArrayLike, loc: ArrayLike = 0) -> Any:
  """Log of the binomial mass.

  Args:
    k, n, p, loc: array-likes (`n` trials, success probability `p`), broadcast together and
      promoted to one inexact dtype T.

  Returns:
    `T[broadcast shape]`: `gammaln(n+1) - gammaln(y+1) - gammaln(n-y+1) + xlogy(y, p)
    + xlog1py(n-y, -p)`; 0 where the outcome is certain (`y = n = 0`, or the
    probability term is 0 as for `p = 0, y = 0`), `-inf` outside `loc <= k < loc + n + 1`.
  """
  k, n, p, loc = promote_args_inexact("binom.logpmf", k, n, p, loc)
  y = k - loc
  log_comb = special.gammaln(n + 1) - (special.gammaln(y + 1) + special.gammaln(n - y + 1))
  log_lin = special.xlogy(y, p) + special.xlog1py(n - y, -p)
  lp = jnp.where(((y == 0) & (n == 0)) | (log_lin == 0), 0.0, log_comb + log_lin)
  return jnp.where((k >= loc) & (k < loc + n + 1), lp, -np.inf)


def pmf(k: ArrayLike, n: ArrayLike, p: ArrayLike, loc: ArrayLike = 0) -> Any:
  """The binomial mass, `exp(logpmf)`; shapes and dtypes as `logpmf`."""
  return jnp.exp(logpmf(k, n, p, loc))
