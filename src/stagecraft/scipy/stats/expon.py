"""`stagecraft.scipy.stats.expon`: the exponential distribution, as JAX's
`scipy.stats.expon`.

Density `exp(-z) / scale` with `z = (x - loc) / scale`, supported on `x >= loc` (`logpdf` is
`-inf` below `loc`). Every function broadcasts its arguments together and promotes them to one
inexact dtype (integers and bools to the default float dtype; Python scalars stay weakly
typed). All are differentiable. Formulas: closed forms, with `expm1`/`log1p` where they avoid
cancellation.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import lax, numpy as jnp
from stagecraft.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf", "ppf"]

ArrayLike = Any


def logpdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """Log of the exponential density, `-(x - loc) / scale - log(scale)`; `-inf` for `x < loc`.

  Args:
    x, loc, scale: array-likes, broadcast together and promoted to one inexact dtype T.

  Returns:
    `T[broadcast shape]`.
  """
  x, loc, scale = promote_args_inexact("expon.logpdf", x, loc, scale)
  # lax primitives, as JAX's, so values agree bit for bit in every mode (see norm.logpdf)
  log_scale = lax.log(scale)
  lp = lax.neg(lax.add(lax.div(lax.sub(x, loc), scale), log_scale))
  return jnp.where(lax.lt(x, loc), -np.inf, lp)


def pdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The exponential density, `exp(logpdf)`; shapes and dtypes as `logpdf`."""
  return lax.exp(logpdf(x, loc, scale))


def cdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The distribution function `-expm1(-(x - loc) / scale)`; 0 for `x < loc`."""
  x, loc, scale = promote_args_inexact("expon.cdf", x, loc, scale)
  neg_z = (loc - x) / scale
  return jnp.where(x < loc, 0.0, -jnp.expm1(neg_z))


def logsf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """`log(sf) = -(x - loc) / scale`; 0 for `x < loc`."""
  x, loc, scale = promote_args_inexact("expon.logsf", x, loc, scale)
  neg_z = (loc - x) / scale
  return jnp.where(x < loc, 0.0, neg_z)


def sf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The survival function `exp(logsf)`."""
  return jnp.exp(logsf(x, loc, scale))


def logcdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """`log(cdf) = log1p(-sf)`."""
  return jnp.log1p(-sf(x, loc, scale))


def ppf(q: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The quantile function `loc - scale log1p(-q)`; NaN for `q` outside [0, 1] or NaN."""
  q, loc, scale = promote_args_inexact("expon.ppf", q, loc, scale)
  bad = jnp.isnan(q) | (q < 0) | (q > 1)
  return jnp.where(bad, np.nan, loc - scale * jnp.log1p(-q))
