"""`stagecraft.scipy.integrate`: JAX's `jax.scipy.integrate` (`trapezoid`)."""
from __future__ import annotations

from typing import Any

from stagecraft.numpy import lax_numpy

__all__ = ["trapezoid"]


def trapezoid(y: Any, x: Any = None, dx: Any = 1.0, axis: int = -1):
  """Integrates `y` along `axis` with the composite trapezoidal rule
  (`scipy.integrate.trapezoid`).

  Args:
    y: samples `T[*s]`; integers are promoted to the default float dtype.
    x: optional sample points, 1-D of length `s[axis]` or of the shape of `y`; if None the
      samples are `dx` apart.
    dx: the spacing when `x` is None.
    axis: the axis to integrate along (static).

  Returns:
    `sum((x[i+1] - x[i]) (y[i] + y[i+1]) / 2)` over `axis`: shape `s` without `axis`, of the
    promoted inexact dtype.

  Raises:
    ValueError: for an out-of-range axis or `x` whose shape does not match `y`.

  Algorithm: the composite trapezoidal rule, as `jnp.trapezoid`.
  """
  return lax_numpy.trapezoid(y, x, dx, axis)
