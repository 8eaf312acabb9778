"""`stagecraft.scipy.stats.multinomial`: the multinomial distribution, as JAX's
`scipy.stats.multinomial`.

Mass `n! prod_i p_i**x_i / x_i!` of the counts `x` (categories on the LAST axis) of `n`
draws; `-inf` where the counts do not sum to `n`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import dtypes
from stagecraft import numpy as jnp
from stagecraft.scipy import special
from stagecraft.scipy.stats._util import promote_args_inexact, promote_args_numeric

__all__ = ["logpmf", "pmf"]

ArrayLike = Any


def logpmf(x: ArrayLike, n: ArrayLike, p: ArrayLike) -> Any:
  """Log of the multinomial mass.

  Args:
    x: `int[*batch, K]` counts.
    n: integer array-like broadcastable to `batch`, the number of draws.
    p: `T[..., K]` category probabilities (promoted to an inexact dtype T).

  Returns:
    `T[*batch]`: `gammaln(n+1) + sum(xlogy(x, p) - gammaln(x+1), -1)`; `-inf` where
    `sum(x, -1) != n`. (JAX 0.10.2 compares the sum over ALL axes with `n`, which differs
    for batched `x`; here each row is checked.)

  Raises:
    ValueError: if `x` and `n` are not integers.
  """
  p, = promote_args_inexact("multinomial.logpmf", p)
  x, n = promote_args_numeric("multinomial.logpmf", x, n)
  if not dtypes.issubdtype(x.dtype, np.integer):
    raise ValueError(f"x and n must be of integer type; got x.dtype={x.dtype}, n.dtype={n.dtype}")
  complete = jnp.sum(x, axis=-1, dtype=x.dtype) == n   # NB: in x's dtype (strict promotion)
  x = x.astype(p.dtype)
  n = n.astype(p.dtype)
  lp = special.gammaln(n + 1) + jnp.sum(special.xlogy(x, p) - special.gammaln(x + 1), axis=-1)
  return jnp.where(complete, lp, -np.inf)


def pmf(x: ArrayLike, n: ArrayLike, p: ArrayLike) -> Any:
  """The multinomial mass, `exp(logpmf)`; shapes, dtypes and errors as `logpmf`."""
  return jnp.exp(logpmf(x, n, p))
