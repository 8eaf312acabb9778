"""`stagecraft.scipy.stats.beta`: the beta distribution, as JAX's `scipy.stats.beta`.

Density `y**(a-1) (1-y)**(b-1) / (B(a, b) scale)` with `y = (x - loc) / scale`, supported on
`0 <= y <= 1` (`logpdf` is `-inf` outside, NaN for `a <= 0`, `b <= 0` or `scale <= 0`).
Every function broadcasts its arguments together and promotes them to one inexact dtype
(integers and bools to the default float dtype; Python scalars stay weakly typed). The
distribution functions are the regularized incomplete beta function `I_y(a, b)`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import numpy as jnp
from stagecraft.scipy import special
from stagecraft.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"]

ArrayLike = Any


def logpdf(x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0,
           scale: ArrayLike = 1) -> Any:
  """Log of the beta density, `xlogy(a-1, y) + xlog1py(b-1, -y) - betaln(a, b) - log(scale)`.

  Args:
    x, a, b, loc, scale: array-likes (`a`, `b`: the shapes), broadcast together and promoted
      to one inexact dtype T.

  Returns:
    `T[broadcast shape]`; `-inf` outside `[loc, loc + scale]`, NaN for invalid parameters.
  """
  x, a, b, loc, scale = promote_args_inexact("beta.logpdf", x, a, b, loc, scale)
  y = (x - loc) / scale
  lp = (special.xlogy(a - 1, y) + special.xlog1py(b - 1, -y) - special.betaln(a, b)
        - jnp.log(scale))
  lp = jnp.where((x < loc) | (x > loc + scale), -np.inf, lp)
  return jnp.where((a <= 0) | (b <= 0) | (scale <= 0), np.nan, lp)


def pdf(x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0,
        scale: ArrayLike = 1) -> Any:
  """The beta density, `exp(logpdf)`; shapes and dtypes as `logpdf`."""
  return jnp.exp(logpdf(x, a, b, loc, scale))


def cdf(x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0,
        scale: ArrayLike = 1) -> Any:
  """The distribution function `betainc(a, b, y)`, with `y` clipped to [0, 1]."""
  x, a, b, loc, scale = promote_args_inexact("beta.cdf", x, a, b, loc, scale)
  return special.betainc(a, b, jnp.clip((x - loc) / scale, 0, 1))


def logcdf(x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0,
           scale: ArrayLike = 1) -> Any:
  """`log(cdf)`."""
  return jnp.log(cdf(x, a, b, loc, scale))


def sf(x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0,
       scale: ArrayLike = 1) -> Any:
  """The survival function `betainc(b, a, 1 - y)` (the symmetry `1 - I_y(a, b) =
  I_{1-y}(b, a)`), with `y` clipped to [0, 1]."""
  x, a, b, loc, scale = promote_args_inexact("beta.sf", x, a, b, loc, scale)
  return special.betainc(b, a, 1 - jnp.clip((x - loc) / scale, 0, 1))


def logsf(x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0,
          scale: ArrayLike = 1) -> Any:
  """`log(sf)`."""
  return jnp.log(sf(x, a, b, loc, scale))
