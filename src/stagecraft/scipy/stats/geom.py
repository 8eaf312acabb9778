"""`stagecraft.scipy.stats.geom`: the geometric distribution, as JAX's `scipy.stats.geom`.

Mass `(1 - p)**(y - 1) p` for trials `y = k - loc >= 1` until the first success. Both
functions broadcast their arguments together and promote them to one inexact dtype (integers
and bools to the default float dtype; Python scalars stay weakly typed).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import numpy as jnp
from stagecraft.scipy import special
from stagecraft.scipy.stats._util import promote_args_inexact

__all__ = ["logpmf", "pmf"]

ArrayLike = Any


def logpmf(k: ArrayLike, p: ArrayLike, loc: ArrayLike = 0) -> Any:
  """Log of the geometric mass, `xlog1py(y - 1, -p) + log(p)`.

  Args:
    k, p, loc: array-likes, broadcast together and promoted to one inexact dtype T.

  Returns:
    `T[broadcast shape]`; `-inf` for `y <= 0`.
  """
  k, p, loc = promote_args_inexact("geom.logpmf", k, p, loc)
  y = k - loc
  lp = special.xlog1py(y - 1, -p) + jnp.log(p)
  return jnp.where(y <= 0, -np.inf, lp)


def pmf(k: ArrayLike, p: ArrayLike, loc: ArrayLike = 0) -> Any:
  """The geometric mass, `exp(logpmf)`; shapes and dtypes as `logpmf`."""
  return jnp.exp(logpmf(k, p, loc))
