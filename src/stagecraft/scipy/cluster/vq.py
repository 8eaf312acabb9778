"""`stagecraft.scipy.cluster.vq`: vector quantization as JAX's `jax.scipy.cluster.vq`."""
from __future__ import annotations

from typing import Any

from stagecraft import numpy as jnp
from stagecraft.numpy.util import check_arraylike, promote_dtypes_inexact

__all__ = ["vq"]


def vq(obs: Any, code_book: Any, check_finite: bool = True):
  """Assigns each observation to its nearest code (`scipy.cluster.vq.vq`).

  Args:
    obs: observations `T[M, N]` (or `T[M]`: scalar observations); integers are promoted to
      the default float dtype.
    code_book: codes `T[K, N]` (or `T[K]`), of the same rank as `obs`.
    check_finite: ignored (as in JAX).

  Returns:
    `(code, dist)`: `code`, integer `[M]`, the index of the nearest code (the first on ties),
    and `dist`, `T[M]`, the Euclidean distance to it.

  Raises:
    TypeError: for inputs that are not arrays.
    ValueError: if the ranks differ or are not 1 or 2.

  Algorithm: all `M x K` Euclidean distances, then the argmin over codes.
  """
  del check_finite
  check_arraylike("scipy.cluster.vq.vq", obs, code_book)
  obs, cb = promote_dtypes_inexact(jnp.asarray(obs), jnp.asarray(code_book))
  if obs.ndim != cb.ndim:
    raise ValueError("Observation and code_book should have the same rank")
  if obs.ndim == 1:
    obs, cb = obs[:, None], cb[:, None]
  if obs.ndim != 2:
    raise ValueError("ndim different than 1 or 2 are not supported")
  dist = jnp.linalg.norm(obs[:, None, :] - cb[None, :, :], axis=-1)
  code = jnp.argmin(dist, axis=-1)
  return code, jnp.take_along_axis(dist, code[:, None], axis=-1)[:, 0]
