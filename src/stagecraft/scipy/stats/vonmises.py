"""`stagecraft.scipy.stats.vonmises`: the von Mises distribution on the circle, as JAX's
`scipy.stats.vonmises`.

Density `exp(kappa cos x) / (2 pi I0(kappa))` (periodic in `x`, no support restriction), NaN
for `kappa <= 0`. The normalizer uses the scaled Bessel function `i0e(k) = exp(-k) I0(k)`, so
large `kappa` does not overflow. Both functions broadcast their arguments together, promote
them to one inexact dtype and are differentiable.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import lax
from stagecraft import numpy as jnp
from stagecraft.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf"]

ArrayLike = Any


def logpdf(x: ArrayLike, kappa: ArrayLike) -> Any:
  """Log of the von Mises density, `kappa (cos x - 1) - log(2 pi i0e(kappa))`.

  Args:
    x, kappa: array-likes (angles in radians; concentration), broadcast together and
      promoted to one inexact dtype T.

  Returns:
    `T[broadcast shape]`; NaN where `kappa <= 0`.
  """
  x, kappa = promote_args_inexact("vonmises.logpdf", x, kappa)
  lp = kappa * (jnp.cos(x) - 1) - jnp.log(2 * np.pi * lax.bessel_i0e(kappa))
  return jnp.where(kappa > 0, lp, np.nan)


def pdf(x: ArrayLike, kappa: ArrayLike) -> Any:
  """The von Mises density, `exp(logpdf)`; shapes and dtypes as `logpdf`."""
  return jnp.exp(logpdf(x, kappa))
