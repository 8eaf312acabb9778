"""`stagecraft.scipy.stats.wrapcauchy`: the wrapped Cauchy distribution on `[0, 2 pi]`, as
JAX's `scipy.stats.wrapcauchy`.

Density `(1 - c**2) / (2 pi (1 + c**2 - 2 c cos x))` for `0 < c < 1`; `-inf` log density
outside `[0, 2 pi]`, NaN for `c` outside `(0, 1)`. Both functions broadcast their arguments
together, promote them to one inexact dtype and are differentiable.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import numpy as jnp
from stagecraft.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf"]

ArrayLike = Any

_LOG_2PI = float(np.log(2 * np.pi))   # a Python float: weakly typed


def logpdf(x: ArrayLike, c: ArrayLike) -> Any:
  """Log of the wrapped Cauchy density.

  Args:
    x, c: array-likes (angle in radians; shape `0 < c < 1`), broadcast together and
      promoted to one inexact dtype T.

  Returns:
    `T[broadcast shape]`: `log(1 - c**2) - log(2 pi) - log(1 + c**2 - 2 c cos x)`, `-inf`
    outside `[0, 2 pi]`, NaN for invalid `c`.
  """
  x, c = promote_args_inexact("wrapcauchy.logpdf", x, c)
  lp = jnp.log(1 - c * c) - _LOG_2PI - jnp.log(1 + c * c - 2 * c * jnp.cos(x))
  lp = jnp.where((x >= 0) & (x <= 2 * np.pi), lp, -np.inf)
  return jnp.where((c > 0) & (c < 1), lp, np.nan)


def pdf(x: ArrayLike, c: ArrayLike) -> Any:
  """The wrapped Cauchy density, `exp(logpdf)`; shapes and dtypes as `logpdf`."""
  return jnp.exp(logpdf(x, c))
