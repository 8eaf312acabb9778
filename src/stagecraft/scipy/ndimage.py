"""`stagecraft.scipy.ndimage`: JAX's `jax.scipy.ndimage` (`map_coordinates` with nearest and
linear interpolation)."""
from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from stagecraft import dtypes, lax
from stagecraft import numpy as jnp
from stagecraft.pjit import jit

__all__ = ["map_coordinates"]


def _mirror(index: Any, size: int):
  # |x - round(x)|-style triangle wave of period 2 (size - 1): ... 1 0 1 2 .. size-1 ..
  if size == 1:
    return jnp.zeros_like(index)
  s = size - 1
  return jnp.abs((index + s) % (2 * s) - s)


def _reflect(index: Any, size: int):
  # reflection about the pixel edges: ... 1 0 0 1 .. size-1 size-1 ..
  return jnp.floor_divide(_mirror(2 * index + 1, 2 * size + 1) - 1, 2)


_INDEX_FIXERS = {
    "constant": lambda index, size: index,
    "nearest": lambda index, size: jnp.clip(index, 0, size - 1),
    "wrap": lambda index, size: index % size,
    "mirror": _mirror,
    "reflect": _reflect,
}


def _round_half_away(a: Any):
  return a if dtypes.is_integer(a.dtype) else lax.round(a)


def _nodes(coordinate: Any, order: int):
  """The (index, weight) pairs interpolating at `coordinate` along one axis."""
  if order == 0:
    return [(_round_half_away(coordinate).astype(np.int32), None)]
  lower = jnp.floor(coordinate)
  upper_weight = coordinate - lower
  index = lower.astype(np.int32)
  return [(index, 1 - upper_weight), (index + 1, upper_weight)]


def map_coordinates(input: Any, coordinates: Sequence[Any], order: int, mode: str = "constant",
                    cval: Any = 0.0):
  """Interpolates `input` at the given coordinates (`scipy.ndimage.map_coordinates`).

  Args:
    input: array `T[*s]` of rank N.
    coordinates: N arrays of one shape `S` (broadcastable), the (fractional) index along each
      axis of `input` at which to interpolate.
    order: 0 (nearest sample, rounding halves away from zero) or 1 (N-linear).
    mode: how indices outside `[0, s_i)` map: `"constant"` (samples outside are `cval`, as
      SciPy's `"grid-constant"`), `"nearest"` (clamp), `"wrap"` (periodic, SciPy's
      `"grid-wrap"`), `"mirror"` (reflect about the end samples) or `"reflect"` (about the
      array edges).
    cval: the value outside the array in `"constant"` mode.

  Returns:
    The interpolated values `T[S]`; integer inputs are rounded back to their dtype.

  Raises:
    ValueError: if the number of coordinate arrays differs from `input.ndim`.
    NotImplementedError: for another mode or `order > 1`.

  Algorithm: the weighted sum over the 2^N (order 1) or 1 (order 0) neighbouring samples,
  with per-axis linear weights; differentiable in `input` and (order 1) `coordinates`.
  """
  x = jnp.asarray(input)
  coords = [jnp.asarray(c) for c in coordinates]
  if len(coords) != x.ndim:
    raise ValueError("coordinates must be a sequence of length input.ndim, but "
                     f"{len(coords)} != {x.ndim}")
  fixer = _INDEX_FIXERS.get(mode)
  if fixer is None:
    raise NotImplementedError(
        f"jax.scipy.ndimage.map_coordinates does not yet support mode {mode}. Currently "
        f"supported modes are {set(_INDEX_FIXERS)}.")
  if order not in (0, 1):
    raise NotImplementedError("jax.scipy.ndimage.map_coordinates currently requires order<=1")
  return _map_coordinates(x, coords, cval, order=order, mode=mode)


# NB: one staged program per configuration rather than one compilation per eager operation.
@partial(jit, static_argnames=("order", "mode"))
def _map_coordinates(x, coords, cval, *, order, mode):
  fixer = _INDEX_FIXERS[mode]
  cval = jnp.asarray(cval).astype(x.dtype)
  per_axis = []
  for c, size in zip(coords, x.shape):
    per_axis.append([(fixer(i, size), (0 <= i) & (i < size) if mode == "constant" else None, w)
                     for i, w in _nodes(c, order)])
  terms = []
  for corner in itertools.product(*per_axis):
    idx = tuple(i for i, _, _ in corner)
    valid = [v for _, v, _ in corner if v is not None]
    weights = [w for _, _, w in corner if w is not None]
    value = x[idx] if not valid else jnp.where(functools.reduce(operator.and_, valid),
                                               x[idx], cval)
    terms.append(functools.reduce(operator.mul, weights) * value if weights else value)
  result = functools.reduce(operator.add, terms)
  if dtypes.is_integer(x.dtype):
    result = _round_half_away(result)
  return result.astype(x.dtype)
