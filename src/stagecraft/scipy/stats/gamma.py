"""`stagecraft.scipy.stats.gamma`: the gamma distribution, as JAX's `scipy.stats.gamma`.

Density `y**(a-1) exp(-y) / (Gamma(a) scale)` with `y = (x - loc) / scale`, supported on
`y >= 0` (`logpdf` is `-inf` below, `sf` 1). The distribution functions are the regularized
incomplete gamma functions `P(a, y)` and `Q(a, y)`. Every function broadcasts its arguments
together and promotes them to one inexact dtype (integers and bools to the default float
dtype; Python scalars stay weakly typed).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import numpy as jnp
from stagecraft.scipy import special
from stagecraft.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"]

ArrayLike = Any


def logpdf(x: ArrayLike, a: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """Log of the gamma density, `xlogy(a - 1, y) - y - gammaln(a) - log(scale)`.

  Args:
    x, a, loc, scale: array-likes (`a`: the shape), broadcast together and promoted to one
      inexact dtype T.

  Returns:
    `T[broadcast shape]`; `-inf` for `x < loc`. Differentiable in every argument (outside
    the support the gradient is 0, not NaN).
  """
  x, a, loc, scale = promote_args_inexact("gamma.logpdf", x, a, loc, scale)
  ok = x >= loc
  y = jnp.where(ok, (x - loc) / scale, 1.0)
  lp = special.xlogy(a - 1, y) - y - special.gammaln(a) - jnp.log(scale)
  return jnp.where(ok, lp, -np.inf)


def pdf(x: ArrayLike, a: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The gamma density, `exp(logpdf)`; shapes and dtypes as `logpdf`."""
  return jnp.exp(logpdf(x, a, loc, scale))


def cdf(x: ArrayLike, a: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The distribution function `gammainc(a, y)`, with `y` clipped below at 0."""
  x, a, loc, scale = promote_args_inexact("gamma.cdf", x, a, loc, scale)
  return special.gammainc(a, jnp.clip((x - loc) / scale, 0, np.inf))


def logcdf(x: ArrayLike, a: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """`log(cdf)`."""
  return jnp.log(cdf(x, a, loc, scale))


def sf(x: ArrayLike, a: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The survival function `gammaincc(a, y)`; 1 for `y < 0`."""
  x, a, loc, scale = promote_args_inexact("gamma.sf", x, a, loc, scale)
  y = (x - loc) / scale
  below = y < 0
  return jnp.where(below, 1, special.gammaincc(a, jnp.where(below, 0, y)))


def logsf(x: ArrayLike, a: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """`log(sf)`."""
  return jnp.log(sf(x, a, loc, scale))
