"""`stagecraft.ops`: segment reductions, as JAX's `jax.ops` (`segment_sum`, `segment_prod`,
`segment_max`, `segment_min`).

A segment reduction combines the rows `data[i]` whose `segment_ids[i]` are equal: out[s] is
the sum/product/maximum/minimum of `{data[i] : segment_ids[i] == s}`, and the reduction's
identity (0, 1, the dtype's lowest value, its highest value) where no row falls in segment
s. Each is one scatter (`lax.scatter_add`, `scatter_mul`, `scatter_max`, `scatter_min`,
through `.at[]`) into an array filled with that identity, so the derivatives are those of
the scatter primitives. TensorFlow's `tf.math.unsorted_segment_*` define the semantics.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Callable

import numpy as np

from stagecraft import core, dtypes
from stagecraft.lax.slicing import GatherScatterMode
from stagecraft.numpy import reductions
from stagecraft.numpy.array_constructors import asarray
from stagecraft.numpy.array_creation import arange, full
from stagecraft.numpy.util import check_arraylike

__all__ = ["segment_max", "segment_min", "segment_prod", "segment_sum"]


def _identity(kind: str, dtype: np.dtype) -> Any:
  """The identity of the reduction `kind` in `dtype` (the fill of empty segments)."""
  if kind == "sum":
    return 0
  if kind == "prod":
    return 1
  if dtype == np.dtype(bool):
    return kind == "min"
  if dtypes.is_integer(dtype):
    info = np.iinfo(dtype)
    return int(info.max if kind == "min" else info.min)
  return float("inf") if kind == "min" else float("-inf")


def _num_segments(name: str, num_segments: Any, segment_ids: Any) -> int:
  if num_segments is None:
    concrete = core.to_concrete_value(segment_ids)
    if concrete is None:
      raise core.ConcretizationTypeError(
          f"Abstract tracer value encountered where concrete value is expected: "
          f"{segment_ids!r}\n{name}() `num_segments` argument.\nWithout `num_segments`, "
          f"{name} takes max(segment_ids) + 1, which needs concrete segment ids. Pass "
          f"`num_segments` as a static Python int (e.g. `jit(f, static_argnums=...)`).")
    ids = np.asarray(concrete)
    if ids.size == 0:
      raise ValueError(f"{name}: cannot infer `num_segments` from empty `segment_ids`; pass "
                       f"`num_segments`.")
    num_segments = int(ids.max()) + 1
  concrete = core.to_concrete_value(num_segments)
  if concrete is None:
    raise core.ConcretizationTypeError(
        f"Abstract tracer value encountered where concrete value is expected: "
        f"{num_segments!r}\n{name}() `num_segments` argument.\nThe number of segments "
        f"fixes the shape of the result; pass it as a static Python int "
        f"(e.g. `jit(f, static_argnums=...)`).")
  try:
    n = operator.index(np.asarray(concrete).item() if not isinstance(concrete, int)
                       else concrete)
  except TypeError as e:
    raise TypeError(f"{name}: `num_segments` must be an integer, got {num_segments!r}.") from e
  if n < 0:
    raise ValueError("num_segments must be non-negative.")
  return n


def _segment_reduce(name: str, kind: str, reducer: Callable, data: Any, segment_ids: Any,
                    num_segments: Any, indices_are_sorted: bool, unique_indices: bool,
                    bucket_size: int | None, mode: Any, out_sharding: Any) -> Any:
  check_arraylike(name, data, segment_ids)
  if out_sharding is not None:
    raise NotImplementedError(f"{name}: `out_sharding` is not supported by stagecraft yet; "
                              f"apply a sharding to the result instead.")
  mode = GatherScatterMode.FILL_OR_DROP if mode is None else GatherScatterMode.from_any(mode)
  data = asarray(data)
  segment_ids = asarray(segment_ids)
  if not (dtypes.is_integer(segment_ids.dtype) and segment_ids.dtype != np.dtype(bool)):
    raise TypeError(f"{name}: `segment_ids` must have an integer dtype, got "
                    f"{segment_ids.dtype}.")
  n = _num_segments(name, num_segments, segment_ids)
  dtype = data.dtype
  if kind in ("sum", "prod") and dtype == np.dtype(bool):
    op = "add" if kind == "sum" else "mul"
    raise TypeError(f"{op} does not accept dtype bool at position 0. Accepted dtypes at "
                    f"position 0 are subtypes of integer, floating, complexfloating.")
  fill = _identity(kind, dtype)
  opts = dict(indices_are_sorted=indices_are_sorted, unique_indices=unique_indices, mode=mode,
              wrap_negative_indices=False)
  method = {"sum": "add", "prod": "multiply", "max": "max", "min": "min"}[kind]
  update = lambda ref, values: getattr(ref, method)(values, **opts)
  if bucket_size is None:
    out = full((n,) + tuple(data.shape[1:]), fill, dtype=dtype)
    return update(out.at[segment_ids], data)
  # Each bucket of `bucket_size` consecutive rows is reduced into its own output row, and
  # the buckets are reduced afterwards (shorter accumulation chains: better sums/products).
  bucket_size = operator.index(bucket_size)
  if bucket_size < 1:
    raise ValueError(f"{name}: `bucket_size` must be a positive integer, got {bucket_size}.")
  num_buckets = -(-math.prod(segment_ids.shape) // bucket_size)
  out = full((num_buckets, n) + tuple(data.shape[1:]), fill, dtype=dtype)
  bucket = arange(segment_ids.shape[0]) // bucket_size
  out = update(out.at[bucket, segment_ids], data)
  return reducer(out, axis=0).astype(dtype)


def segment_sum(data: Any, segment_ids: Any, num_segments: int | None = None,
                indices_are_sorted: bool = False, unique_indices: bool = False,
                bucket_size: int | None = None, mode: Any = None, out_sharding: Any = None):
  """Sums the rows of `data` within segments (JAX's `jax.ops.segment_sum`).

  Args:
    data: array `T[m, *f]`: the rows to reduce.
    segment_ids: integer array `i[m]`: the segment of each row; repeated and unsorted ids
      are fine. Ids outside `[0, num_segments)` (negative ones included) are dropped under
      the default `mode`.
    num_segments: the number of segments `n`, a static non-negative int; default
      `max(segment_ids) + 1`, which needs concrete `segment_ids` (pass it under `jit`).
    indices_are_sorted: promise that `segment_ids` is sorted (may speed things up).
    unique_indices: promise that `segment_ids` has no repeats.
    bucket_size: reduce each run of `bucket_size` consecutive rows separately, then combine
      the runs (better accuracy for long sums and products); None: one pass.
    mode: a `lax.GatherScatterMode` or its name: 'drop'/'fill' (default: out-of-range ids
      contribute nothing), 'clip' (ids are clamped into range) or 'promise_in_bounds'.
    out_sharding: only None is supported.

  Returns:
    `T[n, *f]`: the reduction of each segment; empty segments hold 0.

  Raises:
    TypeError: for non-array arguments (e.g. lists), non-integer `segment_ids` or bool
      `data`.
    ValueError: for a negative `num_segments`.
    ConcretizationTypeError: if `num_segments` is traced, or is None with traced
      `segment_ids`.
    NotImplementedError: for an `out_sharding`.

  Algorithm: one `scatter_add` of `data` into zeros (TensorFlow's
  `unsorted_segment_sum`); differentiable in `data`: out[s]'s cotangent flows to every row
  of segment s.

  Examples:
    >>> import stagecraft.numpy as jnp
    >>> segment_sum(jnp.arange(5), jnp.array([0, 0, 1, 1, 2]))
    Array([1, 5, 4], dtype=int32)
  """
  return _segment_reduce("segment_sum", "sum", reductions.sum, data, segment_ids,
                         num_segments, indices_are_sorted, unique_indices, bucket_size, mode,
                         out_sharding)


def segment_prod(data: Any, segment_ids: Any, num_segments: int | None = None,
                 indices_are_sorted: bool = False, unique_indices: bool = False,
                 bucket_size: int | None = None, mode: Any = None, out_sharding: Any = None):
  """Multiplies the rows of `data` within segments (JAX's `jax.ops.segment_prod`).

  Args:
    data: array `T[m, *f]`: the rows to reduce.
    segment_ids: integer array `i[m]`: the segment of each row; repeated and unsorted ids
      are fine. Ids outside `[0, num_segments)` (negative ones included) are dropped under
      the default `mode`.
    num_segments: the number of segments `n`, a static non-negative int; default
      `max(segment_ids) + 1`, which needs concrete `segment_ids` (pass it under `jit`).
    indices_are_sorted: promise that `segment_ids` is sorted (may speed things up).
    unique_indices: promise that `segment_ids` has no repeats.
    bucket_size: reduce each run of `bucket_size` consecutive rows separately, then combine
      the runs (better accuracy for long sums and products); None: one pass.
    mode: a `lax.GatherScatterMode` or its name: 'drop'/'fill' (default: out-of-range ids
      contribute nothing), 'clip' (ids are clamped into range) or 'promise_in_bounds'.
    out_sharding: only None is supported.

  Returns:
    `T[n, *f]`: the reduction of each segment; empty segments hold 1.

  Raises:
    TypeError: for non-array arguments (e.g. lists), non-integer `segment_ids` or bool
      `data`.
    ValueError: for a negative `num_segments`.
    ConcretizationTypeError: if `num_segments` is traced, or is None with traced
      `segment_ids`.
    NotImplementedError: for an `out_sharding`.

  Algorithm: one `scatter_mul` of `data` into ones (TensorFlow's
  `unsorted_segment_prod`); as in JAX, gradients need `unique_indices=True`.

  Examples:
    >>> import stagecraft.numpy as jnp
    >>> segment_prod(jnp.arange(6), jnp.array([0, 0, 1, 1, 2, 2]))
    Array([ 0,  6, 20], dtype=int32)
  """
  return _segment_reduce("segment_prod", "prod", reductions.prod, data, segment_ids,
                         num_segments, indices_are_sorted, unique_indices, bucket_size, mode,
                         out_sharding)


def segment_max(data: Any, segment_ids: Any, num_segments: int | None = None,
                indices_are_sorted: bool = False, unique_indices: bool = False,
                bucket_size: int | None = None, mode: Any = None, out_sharding: Any = None):
  """The maximum of the rows of `data` within segments (JAX's `jax.ops.segment_max`).

  Args:
    data: array `T[m, *f]`: the rows to reduce.
    segment_ids: integer array `i[m]`: the segment of each row; repeated and unsorted ids
      are fine. Ids outside `[0, num_segments)` (negative ones included) are dropped under
      the default `mode`.
    num_segments: the number of segments `n`, a static non-negative int; default
      `max(segment_ids) + 1`, which needs concrete `segment_ids` (pass it under `jit`).
    indices_are_sorted: promise that `segment_ids` is sorted (may speed things up).
    unique_indices: promise that `segment_ids` has no repeats.
    bucket_size: reduce each run of `bucket_size` consecutive rows separately, then combine
      the runs (better accuracy for long sums and products); None: one pass.
    mode: a `lax.GatherScatterMode` or its name: 'drop'/'fill' (default: out-of-range ids
      contribute nothing), 'clip' (ids are clamped into range) or 'promise_in_bounds'.
    out_sharding: only None is supported.

  Returns:
    `T[n, *f]`: the reduction of each segment; empty segments hold -inf (the
    lowest integer, False for bool).

  Raises:
    TypeError: for non-array arguments (e.g. lists) or non-integer `segment_ids`.
    ValueError: for a negative `num_segments`.
    ConcretizationTypeError: if `num_segments` is traced, or is None with traced
      `segment_ids`.
    NotImplementedError: for an `out_sharding`.

  Algorithm: one `scatter_max` of `data` into the identity (TensorFlow's
  `unsorted_segment_max`); differentiable in `data`: the cotangent is shared equally among
  the rows that attain a segment's maximum, as in JAX.

  Examples:
    >>> import stagecraft.numpy as jnp
    >>> segment_max(jnp.arange(6), jnp.array([0, 0, 1, 1, 2, 2]))
    Array([1, 3, 5], dtype=int32)
  """
  return _segment_reduce("segment_max", "max", reductions.max, data, segment_ids,
                         num_segments, indices_are_sorted, unique_indices, bucket_size, mode,
                         out_sharding)


def segment_min(data: Any, segment_ids: Any, num_segments: int | None = None,
                indices_are_sorted: bool = False, unique_indices: bool = False,
                bucket_size: int | None = None, mode: Any = None, out_sharding: Any = None):
  """The minimum of the rows of `data` within segments (JAX's `jax.ops.segment_min`).

  Args:
    data: array `T[m, *f]`: the rows to reduce.
    segment_ids: integer array `i[m]`: the segment of each row; repeated and unsorted ids
      are fine. Ids outside `[0, num_segments)` (negative ones included) are dropped under
      the default `mode`.
    num_segments: the number of segments `n`, a static non-negative int; default
      `max(segment_ids) + 1`, which needs concrete `segment_ids` (pass it under `jit`).
    indices_are_sorted: promise that `segment_ids` is sorted (may speed things up).
    unique_indices: promise that `segment_ids` has no repeats.
    bucket_size: reduce each run of `bucket_size` consecutive rows separately, then combine
      the runs (better accuracy for long sums and products); None: one pass.
    mode: a `lax.GatherScatterMode` or its name: 'drop'/'fill' (default: out-of-range ids
      contribute nothing), 'clip' (ids are clamped into range) or 'promise_in_bounds'.
    out_sharding: only None is supported.

  Returns:
    `T[n, *f]`: the reduction of each segment; empty segments hold +inf (the
    highest integer, True for bool).

  Raises:
    TypeError: for non-array arguments (e.g. lists) or non-integer `segment_ids`.
    ValueError: for a negative `num_segments`.
    ConcretizationTypeError: if `num_segments` is traced, or is None with traced
      `segment_ids`.
    NotImplementedError: for an `out_sharding`.

  Algorithm: one `scatter_min` of `data` into the identity (TensorFlow's
  `unsorted_segment_min`); differentiable in `data`: the cotangent is shared equally among
  the rows that attain a segment's minimum, as in JAX.

  Examples:
    >>> import stagecraft.numpy as jnp
    >>> segment_min(jnp.arange(6), jnp.array([0, 0, 1, 1, 2, 2]))
    Array([0, 2, 4], dtype=int32)
  """
  return _segment_reduce("segment_min", "min", reductions.min, data, segment_ids,
                         num_segments, indices_are_sorted, unique_indices, bucket_size, mode,
                         out_sharding)
