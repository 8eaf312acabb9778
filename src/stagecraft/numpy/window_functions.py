"""Window functions for signal processing (numpy.hamming & co.): `[M]` of the default float
dtype, 1 for M <= 1, as JAX's numpy."""
from __future__ import annotations

import operator

import numpy as np

from stagecraft import dtypes, lax
from stagecraft.numpy import lax_numpy as jnp

__all__ = ["bartlett", "blackman", "hamming", "hanning", "kaiser"]


def _n(M: int, name: str):
  M = operator.index(jnp._concrete(M, name, "M"))
  dt = dtypes.default_float_dtype()
  if M <= 1:
    return M, None, jnp.ones((max(M, 0),), dt)
  return M, lax.iota(dt, M), None


def blackman(M: int):
  """The Blackman window: `0.42 - 0.5 cos(2 pi n / (M-1)) + 0.08 cos(4 pi n / (M-1))`."""
  M, n, out = _n(M, "blackman")
  if out is not None:
    return out
  t = jnp.divide(n, M - 1)
  return jnp.add(jnp.subtract(0.42, jnp.multiply(0.5, jnp.cos(jnp.multiply(2 * np.pi, t)))),
                 jnp.multiply(0.08, jnp.cos(jnp.multiply(4 * np.pi, t))))


def bartlett(M: int):
  """The Bartlett (triangular) window: `1 - |2n + 1 - M| / (M - 1)`."""
  M, n, out = _n(M, "bartlett")
  if out is not None:
    return out
  return jnp.subtract(1, jnp.divide(jnp.absolute(jnp.subtract(jnp.add(jnp.multiply(2, n), 1),
                                                              M)), M - 1))


def hamming(M: int):
  """The Hamming window: `0.54 - 0.46 cos(2 pi n / (M - 1))`."""
  M, n, out = _n(M, "hamming")
  if out is not None:
    return out
  return jnp.subtract(0.54, jnp.multiply(0.46, jnp.cos(jnp.divide(jnp.multiply(2 * np.pi, n),
                                                                  M - 1))))


def hanning(M: int):
  """The Hann window: `0.5 (1 - cos(2 pi n / (M - 1)))`."""
  M, n, out = _n(M, "hanning")
  if out is not None:
    return out
  return jnp.multiply(0.5, jnp.subtract(1, jnp.cos(jnp.divide(jnp.multiply(2 * np.pi, n),
                                                              M - 1))))


def kaiser(M: int, beta: float):
  """The Kaiser window: `i0(beta sqrt(1 - ((n - a) / a)**2)) / i0(beta)`, a = (M - 1) / 2."""
  M, n, out = _n(M, "kaiser")
  if out is not None:
    return out
  alpha = 0.5 * (M - 1)
  r = jnp.divide(jnp.subtract(n, alpha), alpha)
  arg = jnp.multiply(beta, jnp.sqrt(jnp.subtract(1, jnp.multiply(r, r))))
  return jnp.divide(jnp.i0(arg), jnp.i0(jnp.asarray(beta, dtypes.default_float_dtype())))
