"""`stagecraft.scipy.stats.pareto`: the Pareto distribution, as JAX's `scipy.stats.pareto`.

Density `b / (scale z**(b + 1))` with `z = (x - loc) / scale`, supported on `z >= 1` (below
it `logpdf`/`logcdf` are `-inf`, `cdf` 0 and `sf` 1). Every function broadcasts its arguments
together and promotes them to one inexact dtype (integers and bools to the default float
dtype; Python scalars stay weakly typed). All are differentiable on the support.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import numpy as jnp
from stagecraft.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf", "ppf"]

ArrayLike = Any


def logpdf(x: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """Log of the Pareto density, `log(b / scale) - (b + 1) log(z)`; `-inf` for
  `x < loc + scale`.

  Args:
    x, b, loc, scale: array-likes (`b` is the shape), broadcast together and promoted to one
      inexact dtype T.

  Returns:
    `T[broadcast shape]`.
  """
  x, b, loc, scale = promote_args_inexact("pareto.logpdf", x, b, loc, scale)
  z = (x - loc) / scale
  lp = -(jnp.log(scale / b) + (b + 1) * jnp.log(z))
  return jnp.where(x < loc + scale, -np.inf, lp)


def pdf(x: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The Pareto density, `exp(logpdf)`; shapes and dtypes as `logpdf`."""
  return jnp.exp(logpdf(x, b, loc, scale))


def cdf(x: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The distribution function `1 - z**-b`; 0 below the support."""
  x, b, loc, scale = promote_args_inexact("pareto.cdf", x, b, loc, scale)
  z = (x - loc) / scale
  return jnp.where(x < loc + scale, 0.0, 1 - jnp.power(z, -b))


def logcdf(x: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """`log(cdf) = log1p(-z**-b)`; `-inf` below the support."""
  x, b, loc, scale = promote_args_inexact("pareto.logcdf", x, b, loc, scale)
  z = (x - loc) / scale
  return jnp.where(x < loc + scale, -np.inf, jnp.log1p(-jnp.power(z, -b)))


def logsf(x: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """`log(sf) = -b log(z)`; 0 below the support."""
  x, b, loc, scale = promote_args_inexact("pareto.logsf", x, b, loc, scale)
  z = (x - loc) / scale
  return jnp.where(x < loc + scale, 0.0, -b * jnp.log(z))


def sf(x: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The survival function `exp(logsf) = z**-b`; 1 below the support."""
  return jnp.exp(logsf(x, b, loc, scale))


def ppf(q: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The quantile function `loc + scale (1 - q)**(-1/b)`; NaN for `q` outside [0, 1] or
  NaN."""
  q, b, loc, scale = promote_args_inexact("pareto.ppf", q, b, loc, scale)
  val = loc + scale * jnp.power(1 - q, -1 / b)
  return jnp.where(jnp.isnan(q) | (q < 0) | (q > 1), np.nan, val)
