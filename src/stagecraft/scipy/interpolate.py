"""`stagecraft.scipy.interpolate`: JAX's `jax.scipy.interpolate` (`RegularGridInterpolator`)."""
from __future__ import annotations

import itertools
from functools import partial
from typing import Any

import numpy as np

from stagecraft import tree_util
from stagecraft import numpy as jnp
from stagecraft.numpy import lax_numpy
from stagecraft.numpy.util import check_arraylike, promote_dtypes_inexact
from stagecraft.pjit import jit

__all__ = ["RegularGridInterpolator"]

_METHODS = ("linear", "nearest")


def _points_array(xi: Any, ndim: int):
  """Query points as an array `[..., ndim]`: a tuple of coordinate arrays is broadcast and
  stacked on a last axis; a 1-D array is read as a list of points."""
  if isinstance(xi, tuple) and len(xi) == 1:
    xi = xi[0]
  if isinstance(xi, tuple):
    parts = jnp.broadcast_arrays(*[jnp.asarray(p) for p in xi])
    return jnp.stack([p.astype(float) for p in parts], axis=-1)
  check_arraylike("_ndim_coords_from_arrays", xi)
  xi = jnp.asarray(xi)
  return xi.reshape(-1, ndim) if xi.ndim == 1 else xi


class RegularGridInterpolator:
  """Interpolation on a rectilinear grid in N dimensions
  (`scipy.interpolate.RegularGridInterpolator`, as JAX's).

  Args:
    points: N 1-D arrays of strictly increasing grid coordinates, of lengths `n_1 .. n_N`
      (at least 2 each). Decreasing axes are not supported (as in JAX).
    values: array `T[n_1, ..., n_N, *rest]`; integers are promoted to the default float.
    method: `"linear"` or `"nearest"`.
    bounds_error: must be False (an error cannot be raised under `jit`).
    fill_value: the value at points outside the grid (default NaN); None extrapolates.

  Raises:
    ValueError: for an unknown method, more point arrays than `values` has dimensions, or a
      `fill_value` whose dtype cannot be cast to `values`' (same kind).
    NotImplementedError: if `bounds_error` is true.

  Calling the interpolator with points `xi` (an array `[..., N]`, or a tuple of N arrays
  that broadcast) returns `values` interpolated there: shape `xi.shape[:-1] + rest`. It is a
  pytree (children: grid, values, fill_value), so it can be passed through `jit`.

  Algorithm: per axis, the grid cell holding the point (`searchsorted`, clamped to the
  end cells so that extrapolation is linear) and the point's fractional position in it; the
  N-linear result sums the 2^N cell corners with products of those weights (SciPy's method).
  """

  def __init__(self, points: Any, values: Any, method: str = "linear",
               bounds_error: bool = False, fill_value: Any = np.nan):
    if method not in _METHODS:
      raise ValueError(f"method {method!r} is not defined")
    self.method = method
    self.bounds_error = bounds_error
    if self.bounds_error:
      raise NotImplementedError("`bounds_error` takes no effect under JIT")
    check_arraylike("RegularGridInterpolator", values)
    values = jnp.asarray(values)
    if len(points) > values.ndim:
      raise ValueError(f"there are {len(points)} point arrays, but values has {values.ndim} "
                       "dimensions")
    values, = promote_dtypes_inexact(values)
    if fill_value is not None:
      check_arraylike("RegularGridInterpolator", fill_value)
      fill_value = jnp.asarray(fill_value)
      if not lax_numpy.can_cast(fill_value.dtype, values.dtype, casting="same_kind"):
        raise ValueError("fill_value must be either 'None' or of a type compatible with "
                         "values")
    self.fill_value = fill_value
    check_arraylike("RegularGridInterpolator", *points)
    self.grid = tuple(jnp.asarray(p) for p in points)
    self.values = values

  def __call__(self, xi: Any, method: str | None = None):
    """Interpolates at `xi` (see the class docstring); `method` overrides the default."""
    method = self.method if method is None else method
    if method not in _METHODS:
      raise ValueError(f"method {method!r} is not defined")
    ndim = len(self.grid)
    xi = _points_array(xi, ndim)
    if xi.shape[-1] != ndim:
      raise ValueError(f"the requested sample points xi have dimension {xi.shape[-1]}, but "
                       f"this RegularGridInterpolator has dimension {ndim}")
    return _evaluate(self.grid, self.values, self.fill_value, xi, method=method)


# NB: one staged program per configuration rather than one compilation per eager operation.
@partial(jit, static_argnames=("method",))
def _evaluate(grid, values, fill_value, xi, *, method):
  """`values` on `grid` interpolated at the points `xi[..., ndim]` (see the class)."""
  ndim = len(grid)
  lead = xi.shape[:-1]
  xi = xi.reshape(-1, ndim)
  indices, fractions, outside = [], [], jnp.zeros((xi.shape[0],), bool)
  for d, g in enumerate(grid):
    x = xi[:, d]
    i = jnp.clip(jnp.searchsorted(g, x) - 1, 0, g.shape[0] - 2)
    indices.append(i)
    fractions.append((x - g[i]) / (g[i + 1] - g[i]))
    outside = outside | (x < g[0]) | (x > g[-1])
  trailing = (slice(None),) + (None,) * (values.ndim - ndim)
  if method == "linear":
    result = None
    for corner in itertools.product((0, 1), repeat=ndim):
      weight = None
      for c, t in zip(corner, fractions):
        w = t if c else 1 - t
        weight = w if weight is None else weight * w
      term = values[tuple(i + c for i, c in zip(indices, corner))] * weight[trailing]
      result = term if result is None else result + term
  else:
    nearest = tuple(jnp.where(t <= .5, i, i + 1) for i, t in zip(indices, fractions))
    result = values[nearest]
  if fill_value is not None:
    result = jnp.where(outside[trailing], fill_value, result)
  return result.reshape(lead + values.shape[ndim:])


def _flatten(obj: RegularGridInterpolator):
  return (obj.grid, obj.values, obj.fill_value), (obj.method, obj.bounds_error)


def _unflatten(aux: Any, children: Any) -> RegularGridInterpolator:
  obj = object.__new__(RegularGridInterpolator)
  obj.grid, obj.values, obj.fill_value = children
  obj.method, obj.bounds_error = aux
  return obj


tree_util.register_pytree_node(RegularGridInterpolator, _flatten, _unflatten)
