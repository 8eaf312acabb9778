"""`stagecraft.scipy.stats.chi2`: the chi-squared distribution, as JAX's `scipy.stats.chi2`.

Density `y**(df/2 - 1) exp(-y/2) / (2**(df/2) Gamma(df/2) scale)` with
`y = (x - loc) / scale`, supported on `y >= 0` (`logpdf` is `-inf` below). The distribution
functions are the regularized incomplete gamma functions `P(df/2, y/2)` and `Q(df/2, y/2)`.
Every function broadcasts its arguments together and promotes them to one inexact dtype
(integers and bools to the default float dtype; Python scalars stay weakly typed).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import lax
from stagecraft import numpy as jnp
from stagecraft.scipy import special
from stagecraft.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"]

ArrayLike = Any

_LOG2 = float(np.log(2.0))   # a Python float: weakly typed, keeps the argument dtype


def logpdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """Log of the chi-squared density,
  `xlogy(df/2 - 1, y) - y/2 - lgamma(df/2) - df/2 log 2 - log(scale)`.

  Args:
    x, df, loc, scale: array-likes (`df`: degrees of freedom), broadcast together and
      promoted to one inexact dtype T.

  Returns:
    `T[broadcast shape]`; `-inf` for `x < loc`. (`xlogy` makes `df = 2, x = loc` give
    `-log 2`, as SciPy; JAX 0.10.2 gives NaN there.)
  """
  x, df, loc, scale = promote_args_inexact("chi2.logpdf", x, df, loc, scale)
  y = (x - loc) / scale
  half_df = df / 2
  lp = (special.xlogy(half_df - 1, y) - y / 2 - lax.lgamma(half_df) - half_df * _LOG2
        - jnp.log(scale))
  return jnp.where(x < loc, -np.inf, lp)


def pdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The chi-squared density, `exp(logpdf)`; shapes and dtypes as `logpdf`."""
  return jnp.exp(logpdf(x, df, loc, scale))


def cdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The distribution function `gammainc(df/2, y/2)`, with `y` clipped below at 0."""
  x, df, loc, scale = promote_args_inexact("chi2.cdf", x, df, loc, scale)
  return special.gammainc(df / 2, jnp.clip((x - loc) / (scale * 2), 0, np.inf))


def logcdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """`log(cdf)`."""
  return jnp.log(cdf(x, df, loc, scale))


def sf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The survival function `gammaincc(df/2, y/2)`, with `y` clipped below at 0."""
  x, df, loc, scale = promote_args_inexact("chi2.sf", x, df, loc, scale)
  return special.gammaincc(df / 2, jnp.clip((x - loc) / (scale * 2), 0, np.inf))


def logsf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """`log(sf)`."""
  return jnp.log(sf(x, df, loc, scale))
