"""`stagecraft.scipy.stats.t`: Student's t distribution, as JAX's `scipy.stats.t`.

Density `Gamma((df+1)/2) / (Gamma(df/2) sqrt(pi df) scale) (1 + z**2/df)**(-(df+1)/2)` with
`z = (x - loc) / scale`. Both functions broadcast their arguments together, promote them to
one inexact dtype (integers and bools to the default float dtype; Python scalars stay weakly
typed) and are differentiable in every argument.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import lax
from stagecraft import numpy as jnp
from stagecraft.scipy.stats._util import promote_args_inexact

__all__ = ["logpdf", "pdf"]

ArrayLike = Any


def logpdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """Log of the Student's t density.

  Args:
    x, df, loc, scale: array-likes (`df`: degrees of freedom), broadcast together and
      promoted to one inexact dtype T.

  Returns:
    `T[broadcast shape]`: `lgamma((df+1)/2) - lgamma(df/2) - log(pi df scale**2) / 2
    - (df+1)/2 log1p(z**2 / df)`.
  """
  x, df, loc, scale = promote_args_inexact("t.logpdf", x, df, loc, scale)
  z = (x - loc) / scale
  half_df = df / 2
  half_df1 = half_df + 0.5
  norm = (lax.lgamma(half_df) + jnp.log(np.pi * scale * scale * df) / 2
          - lax.lgamma(half_df1))
  return -(norm + half_df1 * jnp.log1p(z * z / df))


def pdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Any:
  """The Student's t density, `exp(logpdf)`; shapes and dtypes as `logpdf`."""
  return jnp.exp(logpdf(x, df, loc, scale))
