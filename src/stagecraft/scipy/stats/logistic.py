"""`stagecraft.scipy.stats.logistic`: the logistic distribution, as JAX's
`scipy.stats.logistic`.

Density `exp(-z) / (scale (1 + exp(-z))**2)` with `z = (x - loc) / scale`, on the real line;
`cdf` is the logistic sigmoid `expit(z)` and `ppf` its inverse `logit`. Every function
broadcasts its arguments together and promotes them to one inexact dtype (integers and bools
to the default float dtype; Python scalars stay weakly typed). All are differentiable.
"""
from __future__ import annotations

from typing import Any

from stagecraft import numpy as jnp
from stagecraft.scipy import special
from stagecraft.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf", "cdf", "sf", "ppf", "isf"]

ArrayLike = Any


def logpdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """Log of the logistic density, `-2 logaddexp(z/2, -z/2) - log(scale)` (overflow-free in
  both tails).

  Args:
    x, loc, scale: array-likes, broadcast together and promoted to one inexact dtype T.

  Returns:
    `T[broadcast shape]`.
  """
  x, loc, scale = promote_args_inexact("logistic.logpdf", x, loc, scale)
  half_z = (x - loc) / scale / 2
  return -2 * jnp.logaddexp(half_z, -half_z) - jnp.log(scale)


def pdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The logistic density, `exp(logpdf)`; shapes and dtypes as `logpdf`."""
  return jnp.exp(logpdf(x, loc, scale))


def cdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The distribution function `expit((x - loc) / scale)`."""
  x, loc, scale = promote_args_inexact("logistic.cdf", x, loc, scale)
  return special.expit((x - loc) / scale)


def sf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The survival function `expit(-(x - loc) / scale)`."""
  x, loc, scale = promote_args_inexact("logistic.sf", x, loc, scale)
  return special.expit((loc - x) / scale)


def ppf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The quantile function `loc + scale logit(x)` (the argument is a probability; JAX names
  it `x`)."""
  x, loc, scale = promote_args_inexact("logistic.ppf", x, loc, scale)
  return special.logit(x) * scale + loc


def isf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The inverse survival function `loc - scale logit(x)`."""
  x, loc, scale = promote_args_inexact("logistic.isf", x, loc, scale)
  return -special.logit(x) * scale + loc
