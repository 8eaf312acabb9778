"""`stagecraft.scipy.stats.truncnorm`: the truncated normal distribution, as JAX's
`scipy.stats.truncnorm`.

The normal distribution `norm(loc, scale)` restricted to the standardized interval
`a <= (x - loc) / scale <= b`. Every function broadcasts its arguments together and promotes
them to one inexact dtype (integers and bools to the default float dtype; Python scalars stay
weakly typed); NaN where `a >= b`.

Algorithm: the log of the normal mass `Phi(b) - Phi(a)` is taken in the tail that keeps it
accurate (`log_ndtr` differences for intervals entirely on one side of 0, `log1p` of the
complement for intervals around 0), as SciPy's `truncnorm` does; the log cdf near 1 is
computed from the log survival function.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import numpy as jnp
from stagecraft.scipy import special
from stagecraft.scipy.stats import norm
from stagecraft.scipy.stats._util import log_diff_exp, promote_args_inexact

__all__ = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"]

ArrayLike = Any


def _log_gauss_mass(a, b):
  """`log(Phi(b) - Phi(a))` for `a <= b` (elementwise, broadcast)."""
  left = b <= 0
  right = a > 0
  # Mirror intervals right of 0 into the left tail, where log_ndtr is accurate.
  lo = jnp.where(right, -b, a)
  hi = jnp.where(right, -a, b)
  tail = log_diff_exp(special.log_ndtr(hi), special.log_ndtr(lo))
  central = jnp.log1p(-special.ndtr(a) - special.ndtr(-b))
  return jnp.where(left | right, tail, central)


def logpdf(x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0,
           scale: ArrayLike = 1) -> Any:
  """Log of the truncated normal density, `norm.logpdf(x, loc, scale) - log(Phi(b) - Phi(a))`.

  Args:
    x, a, b, loc, scale: array-likes (`a`, `b`: the standardized bounds), broadcast together
      and promoted to one inexact dtype T.

  Returns:
    `T[broadcast shape]`; `-inf` outside the bounds, NaN where `a >= b`.
  """
  x, a, b, loc, scale = promote_args_inexact("truncnorm.logpdf", x, a, b, loc, scale)
  lp = norm.logpdf(x, loc, scale) - _log_gauss_mass(a, b)
  z = (x - loc) / scale
  lp = jnp.where((z < a) | (z > b), -np.inf, lp)
  return jnp.where(a >= b, np.nan, lp)


def pdf(x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0,
        scale: ArrayLike = 1) -> Any:
  """The truncated normal density, `exp(logpdf)`; shapes and dtypes as `logpdf`."""
  return jnp.exp(logpdf(x, a, b, loc, scale))


def logcdf(x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0,
           scale: ArrayLike = 1) -> Any:
  """`log(cdf)`: `log((Phi(z) - Phi(a)) / (Phi(b) - Phi(a)))` with `z = (x - loc) / scale`,
  or `log1p(-sf)` where the cdf is near 1; 0 above `b`, `-inf` below `a`, NaN where
  `a >= b`."""
  x, a, b, loc, scale = promote_args_inexact("truncnorm.logcdf", x, a, b, loc, scale)
  x, a, b = jnp.broadcast_arrays(x, a, b)
  z = (x - loc) / scale
  log_mass = _log_gauss_mass(a, b)
  # NB: clamped so that the branches not selected below hold no NaN (nor NaN gradients).
  z_in = jnp.minimum(jnp.maximum(z, a), b)
  lcdf = _log_gauss_mass(a, z_in) - log_mass
  lsf = _log_gauss_mass(z_in, b) - log_mass
  out = jnp.select([z >= b, z <= a, lcdf > -0.1, z > a],
                   [0.0, -np.inf, jnp.log1p(-jnp.exp(lsf)), lcdf], np.nan)
  return jnp.where(a >= b, np.nan, out)


def cdf(x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0,
        scale: ArrayLike = 1) -> Any:
  """The truncated normal distribution function, `exp(logcdf)`."""
  return jnp.exp(logcdf(x, a, b, loc, scale))


def logsf(x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0,
          scale: ArrayLike = 1) -> Any:
  """`log(sf)`, the `logcdf` of the distribution mirrored about `loc`
  (`logcdf(-x, -b, -a, -loc, scale)`)."""
  x, a, b, loc, scale = promote_args_inexact("truncnorm.logsf", x, a, b, loc, scale)
  return logcdf(-x, -b, -a, -loc, scale)


def sf(x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0,
       scale: ArrayLike = 1) -> Any:
  """The survival function, `exp(logsf)`."""
  return jnp.exp(logsf(x, a, b, loc, scale))
