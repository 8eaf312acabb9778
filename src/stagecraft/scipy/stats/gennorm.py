"""`stagecraft.scipy.stats.gennorm`: the generalized normal distribution, as JAX's
`scipy.stats.gennorm`.

Density `beta / (2 Gamma(1/beta)) exp(-|x|**beta)` on the real line (`beta = 2`: a normal,
`beta = 1`: a Laplace distribution); as in JAX there are no `loc`/`scale` arguments. Every
function broadcasts its arguments together and promotes them to one inexact dtype.
"""
from __future__ import annotations

from typing import Any

from stagecraft import lax
from stagecraft import numpy as jnp
from stagecraft.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf", "cdf"]

ArrayLike = Any


def logpdf(x: ArrayLike, beta: ArrayLike) -> Any:
  """Log of the generalized normal density, `log(beta / 2) - lgamma(1/beta) - |x|**beta`.

  Args:
    x, beta: array-likes, broadcast together and promoted to one inexact dtype T.

  Returns:
    `T[broadcast shape]`.
  """
  x, beta = promote_args_inexact("gennorm.logpdf", x, beta)
  return jnp.log(0.5 * beta) - lax.lgamma(1 / beta) - jnp.power(jnp.abs(x), beta)


def pdf(x: ArrayLike, beta: ArrayLike) -> Any:
  """The generalized normal density, `exp(logpdf)`; shapes and dtypes as `logpdf`."""
  return jnp.exp(logpdf(x, beta))


def cdf(x: ArrayLike, beta: ArrayLike) -> Any:
  """The distribution function `(1 + sign(x) P(1/beta, |x|**beta)) / 2`, with `P` the
  regularized lower incomplete gamma function."""
  x, beta = promote_args_inexact("gennorm.cdf", x, beta)
  return 0.5 * (1 + jnp.sign(x) * lax.igamma(1 / beta, jnp.power(jnp.abs(x), beta)))
