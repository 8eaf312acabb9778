"""`stagecraft.scipy.stats.gumbel_r`: the right-skewed Gumbel (maximum extreme value)
distribution, as JAX's `scipy.stats.gumbel_r`.

Density `exp(-(z + exp(-z))) / scale` with `z = (x - loc) / scale`; `cdf = exp(-exp(-z))`.
Every function gives NaN where `scale <= 0`, broadcasts its arguments together and promotes
them to one inexact dtype (integers and bools to the default float dtype; Python scalars stay
weakly typed). Formulas: closed forms; `logsf` uses `log1mexp` (Maechler 2012).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import numpy as jnp
from stagecraft.scipy.stats._util import log1mexp, promote_args_inexact

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf", "ppf"]

ArrayLike = Any


def logpdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """Log of the density, `-(z + exp(-z)) - log(scale)`.

  Args:
    x, loc, scale: array-likes, broadcast together and promoted to one inexact dtype T.

  Returns:
    `T[broadcast shape]`; NaN where `scale <= 0`.
  """
  x, loc, scale = promote_args_inexact("gumbel_r.logpdf", x, loc, scale)
  z = (x - loc) / scale
  return jnp.where(scale > 0, -(z + jnp.exp(-z)) - jnp.log(scale), np.nan)


def pdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The density, `exp(logpdf)`; shapes and dtypes as `logpdf`."""
  return jnp.exp(logpdf(x, loc, scale))


def logcdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """`log(cdf) = -exp(-z)`; NaN where `scale <= 0`."""
  x, loc, scale = promote_args_inexact("gumbel_r.logcdf", x, loc, scale)
  z = (x - loc) / scale
  return jnp.where(scale > 0, -jnp.exp(-z), np.nan)


def cdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The distribution function `exp(logcdf)`."""
  return jnp.exp(logcdf(x, loc, scale))


def sf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The survival function `1 - exp(-exp(-z))`, as `-expm1(-exp(-z))`."""
  x, loc, scale = promote_args_inexact("gumbel_r.sf", x, loc, scale)
  neg_z = (loc - x) / scale
  return jnp.where(scale > 0, -jnp.expm1(-jnp.exp(neg_z)), np.nan)


def logsf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """`log(sf) = log1mexp(exp(-z))`; NaN where `scale <= 0`."""
  x, loc, scale = promote_args_inexact("gumbel_r.logsf", x, loc, scale)
  neg_z = (loc - x) / scale
  return jnp.where(scale > 0, log1mexp(jnp.exp(neg_z)), np.nan)


def ppf(p: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The quantile function `loc - scale log(-log(p))`; NaN unless `0 < p < 1`."""
  p, loc, scale = promote_args_inexact("gumbel_r.ppf", p, loc, scale)
  ok = (p > 0) & (p < 1)
  return jnp.where(ok, loc - scale * jnp.log(-jnp.log(p)), np.nan)
