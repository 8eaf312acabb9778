"""`stagecraft.scipy.stats.norm`: the normal distribution, as JAX's `scipy.stats.norm`.

Density `exp(-z**2 / 2) / (sqrt(2 pi) scale)` with `z = (x - loc) / scale`, on the real line.
Every function broadcasts its arguments together and promotes them to one inexact dtype
(integers and bools to the default float dtype; Python scalars stay weakly typed), except
`ppf`/`isf`, which follow `scipy.special.ndtri` and return the default float dtype.
All are differentiable.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import lax, numpy as jnp
from stagecraft.numpy.util import as_array
from stagecraft.scipy import special
from stagecraft.scipy.stats._util import check_arraylike, lax_const, promote_args_inexact

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf", "ppf", "isf"]

ArrayLike = Any


def logpdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """Log of the normal density, as `scipy.stats.norm.logpdf`.

  Args:
    x, loc, scale: array-likes, broadcast together and promoted to one inexact dtype T.

  Returns:
    `T[broadcast shape]`: `-(log(2 pi scale**2) + ((x - loc) / scale)**2) / 2`.

  Examples:
    >>> import numpy as np
    >>> logpdf(np.float32([0., 1.]))
    Array([-0.9189385, -1.4189385], dtype=float32)
  """
  x, loc, scale = promote_args_inexact("norm.logpdf", x, loc, scale)
  # Written with lax primitives as JAX's is, so values (eager, jitted, under JVP/VJP) agree
  # bit for bit: JAX's eager VJP computes a chain of jnp operations differently.
  var = lax.square(scale)
  log_norm = lax.log(lax.mul(lax_const(x, 2 * np.pi), var))
  return lax.div(lax.add(log_norm, lax.div(lax.square(lax.sub(x, loc)), var)), lax_const(x, -2))


def pdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The normal density, `exp(logpdf(x, loc, scale))`; shapes and dtypes as `logpdf`."""
  return lax.exp(logpdf(x, loc, scale))


def cdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The normal distribution function, `ndtr((x - loc) / scale)`; shapes and dtypes as
  `logpdf`."""
  x, loc, scale = promote_args_inexact("norm.cdf", x, loc, scale)
  return special.ndtr((x - loc) / scale)


def logcdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """`log(cdf)` without underflow in the left tail: `log_ndtr((x - loc) / scale)`."""
  x, loc, scale = promote_args_inexact("norm.logcdf", x, loc, scale)
  return special.log_ndtr((x - loc) / scale)


def sf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The survival function `1 - cdf`, computed as `ndtr((loc - x) / scale)` (no
  cancellation in the right tail)."""
  x, loc, scale = promote_args_inexact("norm.sf", x, loc, scale)
  return special.ndtr((loc - x) / scale)


def logsf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """`log(sf)`, computed as `log_ndtr((loc - x) / scale)`."""
  x, loc, scale = promote_args_inexact("norm.logsf", x, loc, scale)
  return special.log_ndtr((loc - x) / scale)


def ppf(q: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The quantile function (inverse of `cdf`): `loc + scale * ndtri(q)`.

  Args:
    q: probabilities, a floating array-like (as `scipy.special.ndtri`, integers are
      rejected); NaN outside [0, 1], -inf/inf at 0/1.
    loc, scale: array-likes broadcast with `q`.

  Returns:
    An array of the broadcast shape and the default float dtype (float32, or float64 under
    x64), as JAX's `norm.ppf`.

  Raises:
    TypeError: if `q` has an integer or bool dtype (from `ndtri`).
  """
  check_arraylike("norm.ppf", q, loc, scale)
  return jnp.asarray(special.ndtri(q) * scale + loc, float)


def isf(q: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The inverse survival function, `ppf(1 - q, loc, scale)`; shapes, dtypes and errors as
  `ppf`."""
  check_arraylike("norm.isf", q, loc, scale)
  q = as_array(q)
  return ppf(1 - q, loc, scale)
