"""Window functions for signal processing (numpy.hamming & co.): `[M]` of the default float
dtype, 1 for M <= 1, as JAX's numpy."""
from __future__ import annotations


import numpy as np

from stagecraft import core, dtypes, lax
from stagecraft.numpy.array_constructors import asarray
from stagecraft.numpy.ufuncs import absolute, add, cos, divide, i0, multiply, sqrt, subtract

__all__ = ["bartlett", "blackman", "hamming", "hanning", "kaiser"]


def _concrete_size(M, name: str) -> int:
  """`int(M)`; for a tracer, of its known value, else JAX's ConcretizationTypeError."""
  if isinstance(M, core.Tracer):
    value = M.to_concrete_value()
    if value is None:
      raise core.ConcretizationTypeError(
          f"Abstract tracer value encountered where concrete value is expected: traced array "
          f"with shape {M.aval.str_short(False)}\nM argument of jnp.{name}"
          f"{M._trace.origin_msg(M)}")
    M = value
  return int(M)


def _n(M: int, name: str):
  """`(M, n, out)`: the window size as a Python int (converted with `int()` as JAX's does, so
  a float, a numeric string or a scalar array of any dtype is taken: Keras passes
  `ones((), dtype)`), and either the float positions `n = 0..M-1` or, for M <= 1, the whole
  window `out` (ones of shape `(M,)`: a negative M is lax.full's nonnegative-shape TypeError).

  Raises:
    ConcretizationTypeError: M is traced.
    TypeError / ValueError: int(M) fails (e.g. None, a non-scalar array).
  """
  M = _concrete_size(M, name)
  dt = dtypes.default_float_dtype()
  if M <= 1:
    return M, None, lax.full((M,), 1, dt)
  return M, lax.iota(dt, M), None


def blackman(M: int):
  """The Blackman window: `0.42 - 0.5 cos(2 pi n / (M-1)) + 0.08 cos(4 pi n / (M-1))`."""
  M, n, out = _n(M, "blackman")
  if out is not None:
    return out
  t = divide(n, M - 1)
  return add(subtract(0.42, multiply(0.5, cos(multiply(2 * np.pi, t)))),
                 multiply(0.08, cos(multiply(4 * np.pi, t))))


def bartlett(M: int):
  """The Bartlett (triangular) window: `1 - |2n + 1 - M| / (M - 1)`."""
  M, n, out = _n(M, "bartlett")
  if out is not None:
    return out
  return subtract(1, divide(absolute(subtract(add(multiply(2, n), 1),
                                                              M)), M - 1))


def hamming(M: int):
  """The Hamming window: `0.54 - 0.46 cos(2 pi n / (M - 1))`."""
  M, n, out = _n(M, "hamming")
  if out is not None:
    return out
  return subtract(0.54, multiply(0.46, cos(divide(multiply(2 * np.pi, n),
                                                                  M - 1))))


def hanning(M: int):
  """The Hann window: `0.5 (1 - cos(2 pi n / (M - 1)))`."""
  M, n, out = _n(M, "hanning")
  if out is not None:
    return out
  return multiply(0.5, subtract(1, cos(divide(multiply(2 * np.pi, n),
                                                              M - 1))))


def kaiser(M: int, beta: float):
  """The Kaiser window: `i0(beta sqrt(1 - ((n - a) / a)**2)) / i0(beta)`, a = (M - 1) / 2."""
  M, n, out = _n(M, "kaiser")
  if out is not None:
    return out
  alpha = 0.5 * (M - 1)
  r = divide(subtract(n, alpha), alpha)
  arg = multiply(beta, sqrt(subtract(1, multiply(r, r))))
  return divide(i0(arg), i0(asarray(beta, dtypes.default_float_dtype())))
