"""`stagecraft.scipy.stats.uniform`: the uniform distribution on `[loc, loc + scale]`, as
JAX's `scipy.stats.uniform`.

Every function broadcasts its arguments together and promotes them to one inexact dtype
(integers and bools to the default float dtype; Python scalars stay weakly typed).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import numpy as jnp
from stagecraft.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf", "cdf", "ppf"]

ArrayLike = Any


def logpdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """Log of the uniform density: `-log(scale)` on `[loc, loc + scale]`, `-inf` outside.

  Args:
    x, loc, scale: array-likes, broadcast together and promoted to one inexact dtype T.

  Returns:
    `T[broadcast shape]`.
  """
  x, loc, scale = promote_args_inexact("uniform.logpdf", x, loc, scale)
  outside = (x < loc) | (x > loc + scale)
  return jnp.where(outside, -np.inf, -jnp.log(scale))


def pdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The uniform density, `exp(logpdf)`; shapes and dtypes as `logpdf`."""
  return jnp.exp(logpdf(x, loc, scale))


def cdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The distribution function: 0 below `loc`, `(x - loc) / scale` on the support, 1 above;
  NaN where `x` is NaN."""
  x, loc, scale = promote_args_inexact("uniform.cdf", x, loc, scale)
  hi = loc + scale
  # NB: strongly typed constants, as JAX's, make the result strongly typed.
  zero, one, nan = (jnp.array(v, x.dtype) for v in (0, 1, np.nan))
  return jnp.select([x < loc, x > hi, (x >= loc) & (x <= hi)], [zero, one, (x - loc) / scale],
                    nan)


def ppf(q: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The quantile function `loc + scale q`; NaN for `q` outside [0, 1] or NaN."""
  q, loc, scale = promote_args_inexact("uniform.ppf", q, loc, scale)
  bad = jnp.isnan(q) | (q < 0) | (q > 1)
  return jnp.where(bad, np.nan, loc + scale * q)
