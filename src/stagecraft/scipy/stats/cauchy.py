"""`stagecraft.scipy.stats.cauchy`: the Cauchy distribution, as JAX's `scipy.stats.cauchy`.

Density `1 / (pi scale (1 + z**2))` with `z = (x - loc) / scale`, on the real line. Every
function broadcasts its arguments together and promotes them to one inexact dtype (integers
and bools to the default float dtype; Python scalars stay weakly typed). All are
differentiable. Formulas: the closed forms of the density, `cdf = 1/2 + arctan(z) / pi` and
its inverse `loc + scale tan(pi (q - 1/2))`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import numpy as jnp
from stagecraft.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf", "ppf", "isf"]

ArrayLike = Any


def logpdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """Log of the Cauchy density, `-log(pi scale) - log1p(z**2)`.

  Args:
    x, loc, scale: array-likes, broadcast together and promoted to one inexact dtype T.

  Returns:
    `T[broadcast shape]`.
  """
  x, loc, scale = promote_args_inexact("cauchy.logpdf", x, loc, scale)
  z = (x - loc) / scale
  return -(jnp.log(np.pi * scale) + jnp.log1p(z * z))


def pdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The Cauchy density, `exp(logpdf)`; shapes and dtypes as `logpdf`."""
  return jnp.exp(logpdf(x, loc, scale))


def cdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The distribution function `1/2 + arctan((x - loc) / scale) / pi`; shapes and dtypes
  as `logpdf`."""
  x, loc, scale = promote_args_inexact("cauchy.cdf", x, loc, scale)
  return 0.5 + jnp.arctan((x - loc) / scale) / np.pi


def logcdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """`log(cdf(x, loc, scale))`."""
  return jnp.log(cdf(x, loc, scale))


def sf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The survival function, `cdf` reflected about `loc` (`cdf(-x, -loc, scale)`)."""
  x, loc, scale = promote_args_inexact("cauchy.sf", x, loc, scale)
  return cdf(-x, -loc, scale)


def logsf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """`log(sf(x, loc, scale))`."""
  x, loc, scale = promote_args_inexact("cauchy.logsf", x, loc, scale)
  return logcdf(-x, -loc, scale)


def ppf(q: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The quantile function `loc + scale tan(pi q - pi/2)`; shapes and dtypes as `logpdf`
  (`q` outside [0, 1] gives a value of the periodic tangent, as in JAX)."""
  q, loc, scale = promote_args_inexact("cauchy.ppf", q, loc, scale)
  return jnp.tan(np.pi * q - np.pi / 2) * scale + loc


def isf(q: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The inverse survival function `loc + scale tan(pi/2 - pi q)`."""
  q, loc, scale = promote_args_inexact("cauchy.isf", q, loc, scale)
  return jnp.tan(np.pi / 2 - np.pi * q) * scale + loc
