"""`stagecraft.scipy.stats.laplace`: the Laplace (double exponential) distribution, as JAX's
`scipy.stats.laplace`.

Density `exp(-|x - loc| / scale) / (2 scale)` on the real line. Every function broadcasts its
arguments together and promotes them to one inexact dtype (integers and bools to the default
float dtype; Python scalars stay weakly typed). All are differentiable.
"""
from __future__ import annotations

from typing import Any

from stagecraft import numpy as jnp
from stagecraft.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf", "cdf"]

ArrayLike = Any


def logpdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """Log of the Laplace density, `-|x - loc| / scale - log(2 scale)`.

  Args:
    x, loc, scale: array-likes, broadcast together and promoted to one inexact dtype T.

  Returns:
    `T[broadcast shape]`.
  """
  x, loc, scale = promote_args_inexact("laplace.logpdf", x, loc, scale)
  return -(jnp.abs(x - loc) / scale + jnp.log(2 * scale))


def pdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The Laplace density, `exp(logpdf)`; shapes and dtypes as `logpdf`."""
  return jnp.exp(logpdf(x, loc, scale))


def cdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The distribution function: `exp(z) / 2` for `z = (x - loc) / scale <= 0`, else
  `1 - exp(-z) / 2`; shapes and dtypes as `logpdf`."""
  x, loc, scale = promote_args_inexact("laplace.cdf", x, loc, scale)
  z = (x - loc) / scale
  left = z <= 0
  # NB: each branch sees only the values it keeps, so neither overflows under grad.
  return jnp.where(left, 0.5 * jnp.exp(jnp.where(left, z, 0.0)),
                   1 - 0.5 * jnp.exp(-jnp.where(left, 0.0, z)))
