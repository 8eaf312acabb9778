"""`stagecraft.scipy.stats.nbinom`: the negative binomial distribution, as JAX's
`scipy.stats.nbinom`.

Mass `Gamma(y + n) / (Gamma(n) y!) p**n (1-p)**y` of `y = k - loc` failures before the
`n`-th success. Both functions broadcast their arguments together and promote them to one
inexact dtype (integers and bools to the default float dtype; Python scalars stay weakly
typed).
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
  """Log of the negative binomial mass.

  Args:
    k, n, p, loc: array-likes, broadcast together and promoted to one inexact dtype T.

  Returns:
    `T[broadcast shape]`: `gammaln(y+n) - gammaln(n) - gammaln(y+1) + xlogy(n, p)
    + xlogy(y, 1-p)`; `-inf` for `k < loc`.
  """
  k, n, p, loc = promote_args_inexact("nbinom.logpmf", k, n, p, loc)
  y = k - loc
  log_comb = special.gammaln(y + n) - special.gammaln(n) - special.gammaln(y + 1)
  lp = log_comb + special.xlogy(n, p) + special.xlogy(y, 1 - p)
  return jnp.where(k < loc, -np.inf, lp)


def pmf(k: ArrayLike, n: ArrayLike, p: ArrayLike, loc: ArrayLike = 0) -> Any:
  """The negative binomial mass, `exp(logpmf)`; shapes and dtypes as `logpmf`."""
  return jnp.exp(logpmf(k, n, p, loc))
