"""Slicing primitives: `slice` (static bounds and strides), `dynamic_slice` and
`dynamic_update_slice` (start indices are scalar arrays), with the `*_in_dim` wrappers.

Dynamic start indices follow XLA: each is clamped so that the slice stays in bounds
(`clamp(0, i, operand_dim - slice_dim)`), which is StableHLO's semantics, so the lowering is
one op. As in `jax.lax`, the wrappers first wrap negative indices once (`i + dim` when
`i < 0`, statically for Python ints, with a `select` for traced ones) and give all indices
one integer dtype.
"""
from __future__ import annotations

import operator
from typing import Any, Sequence

import numpy as np

from stagecraft import core, dtypes
from stagecraft.core import Primitive, ShapedArray
from stagecraft.interpreters import lowering
from stagecraft.interpreters.lowering import i64_array
from stagecraft.lax import utils
from stagecraft.lax.elementwise import add, convert_element_type, lt, select
from stagecraft.lax.shape import canonicalize_shape, check_shapelike, expand_dims, squeeze

__all__ = ["slice_p", "dynamic_slice_p", "dynamic_update_slice_p",
           "slice", "dynamic_slice", "dynamic_update_slice", "slice_in_dim", "index_in_dim",
           "dynamic_slice_in_dim", "dynamic_index_in_dim", "dynamic_update_slice_in_dim",
           "dynamic_update_index_in_dim"]

def _shape_of(x: Any) -> tuple[int, ...]:
  return core.get_aval(x).shape


# ---------------------------------------------------------------------------
# slice(operand, start_indices, limit_indices, strides): elements start:limit:stride per
# dimension; static, in bounds.
slice_p = Primitive("slice")


def _slice_abstract_eval(operand, *, start_indices, limit_indices, strides):
  check_shapelike("slice", "start_indices", start_indices)
  check_shapelike("slice", "limit_indices", limit_indices)
  if operand.ndim != len(start_indices):
    raise TypeError(f"slice start_indices must have length equal to the number of dimensions "
                    f"of the operand, got indices {start_indices} for operand shape "
                    f"{operand.shape}.")
  if len(start_indices) != len(limit_indices):
    raise TypeError(f"slice limit_indices must have the same length as start_indices, got "
                    f"start_indices {start_indices} and limit_indices {limit_indices}.")
  if not all(l <= d for l, d in zip(limit_indices, operand.shape)):
    raise TypeError(f"slice limit_indices must be less than or equal to operand shape, got "
                    f"limit_indices {limit_indices} for operand shape {operand.shape}.")
  if not all(l >= s for s, l in zip(start_indices, limit_indices)):
    raise TypeError(f"slice limit_indices must be greater than or equal to start_indices, got "
                    f"start_indices {start_indices} and limit_indices {limit_indices}.")
  diff = tuple(l - s for s, l in zip(start_indices, limit_indices))
  if strides is not None:
    check_shapelike("slice", "strides", strides)
    if len(strides) != operand.ndim:
      raise TypeError(f"slice strides must have length equal to the number of dimensions of "
                      f"the operand, got strides {strides} for operand shape {operand.shape}.")
    if not all(s >= 1 for s in strides):
      raise TypeError(f"slice strides must be positive, got {strides}.")
    diff = tuple(0 if d == 0 else (d - 1) // s + 1 for d, s in zip(diff, strides))
  return ShapedArray(diff, operand.dtype, operand.weak_type)


def _slice_lowering(ctx, x, *, start_indices, limit_indices, strides):
  strides = (1,) * len(start_indices) if strides is None else strides
  return ctx.op("stablehlo.slice", [x],
                attrs=f"start_indices = {i64_array(start_indices)}, limit_indices = "
                      f"{i64_array(limit_indices)}, strides = {i64_array(strides)}")


slice_p.def_abstract_eval(_slice_abstract_eval)
lowering.register_lowering(slice_p, _slice_lowering)


def slice(operand: Any, start_indices: Sequence[int], limit_indices: Sequence[int],
          strides: Sequence[int] | None = None) -> Any:
  """The static slice `operand[start:limit:stride, ...]`, one triple per dimension.

  Args:
    operand: array `T[*s]`.
    start_indices: `0 <= start[k] <= limit[k]`, one per dimension.
    limit_indices: `limit[k] <= s[k]` (exclusive), one per dimension.
    strides: positive steps, one per dimension; None means all 1.

  Returns:
    `T[*r]` with `r[k] = ceil((limit[k] - start[k]) / stride[k])`.

  Raises:
    TypeError: if an index is out of bounds, the lengths differ from the operand's rank, or
      a stride is not positive (the message shows the params and the operand shape).
  """
  return slice_p.bind(
      operand, start_indices=canonicalize_shape("slice", "start_indices", start_indices),
      limit_indices=canonicalize_shape("slice", "limit_indices", limit_indices),
      strides=None if strides is None else canonicalize_shape("slice", "strides", strides))


def slice_in_dim(operand: Any, start_index: int | None, limit_index: int | None,
                 stride: int = 1, axis: int = 0) -> Any:
  """`slice` along one dimension: `operand[..., start_index:limit_index:stride, ...]`.

  Args:
    operand: array `T[*s]`.
    start_index: start along `axis`; negative counts from the end; None is 0.
    limit_index: exclusive end along `axis`; negative counts from the end; None is `s[axis]`.
    stride: positive step.
    axis: the dimension sliced; negative counts from the end.

  Returns:
    `T[*s]` with `s[axis]` replaced by the slice's length.

  Raises:
    TypeError: if the wrapped bounds are out of range (see `slice`).
    ValueError: if `axis` is out of range.
  """
  shape = _shape_of(operand)
  (axis,) = utils.canonicalize_axes("slice_in_dim", (operator.index(axis),), len(shape))
  n = shape[axis]
  start = 0 if start_index is None else operator.index(start_index)
  limit = n if limit_index is None else operator.index(limit_index)
  start = start + n if start < 0 else start
  limit = limit + n if limit < 0 else limit
  starts, limits, strides = [0] * len(shape), list(shape), [1] * len(shape)
  starts[axis], limits[axis], strides[axis] = start, limit, operator.index(stride)
  return slice(operand, starts, limits, strides)


def index_in_dim(operand: Any, index: int, axis: int = 0, keepdims: bool = True) -> Any:
  """`operand[..., index, ...]` along `axis` (static index).

  Args:
    operand: array `T[*a, n, *b]`, `n` at `axis`.
    index: `-n <= index < n`; negative counts from the end.
    axis: the dimension indexed; negative counts from the end.
    keepdims: keep the indexed dimension with size 1.

  Returns:
    `T[*a, 1, *b]` if `keepdims`, else `T[*a, *b]`.

  Raises:
    IndexError: if `index` is out of bounds.
  """
  shape = _shape_of(operand)
  (axis,) = utils.canonicalize_axes("index_in_dim", (operator.index(axis),), len(shape))
  index, n = operator.index(index), shape[axis]
  wrapped = index + n if index < 0 else index
  if not 0 <= wrapped < n:
    raise IndexError(f"index {index} is out of bounds for axis {axis} with size {n}.")
  result = slice_in_dim(operand, wrapped, wrapped + 1, 1, axis)
  return result if keepdims else squeeze(result, (axis,))


# ---------------------------------------------------------------------------
# Start indices of dynamic slices: scalars of one integer dtype.


def _check_indices(name: str, operand: ShapedArray, indices: Sequence[ShapedArray]) -> None:
  if len(indices) != operand.ndim:
    raise TypeError(f"{name} start_indices must have length equal to the rank of operand, got "
                    f"{len(indices)} indices for operand {operand.str_short()}.")
  if any(i.shape for i in indices):
    got = ", ".join(i.str_short() for i in indices)
    raise TypeError(f"start_indices arguments to {name} must be scalars, got indices {got}.")
  if any(i.dtype != indices[0].dtype or not dtypes.is_integer(i.dtype) for i in indices):
    got = ", ".join(i.dtype.name for i in indices)
    raise TypeError(f"index arguments to {name} must be integers of the same type, got: "
                    f"{got}. Call `lax.{name}`, which converts them to a common integer "
                    f"type.")


def _dynamic_slice_indices(name: str, operand: Any, start_indices: Sequence[Any],
                           allow_negative_indices: bool | Sequence[bool]) -> list[Any]:
  """Start indices as scalars of one integer dtype, negative ones wrapped once.

  Python and NumPy integers are wrapped on the host; other indices with `select(i < 0,
  i + dim, i)`. The dtype is the promotion of the typed indices' dtypes (int32 when all are
  Python ints); Python ints take it.
  """
  shape = _shape_of(operand)
  if not isinstance(start_indices, (list, tuple)):
    aval = core.get_aval(start_indices)
    if aval.ndim != 1:
      raise ValueError(f"{name} start_indices must be a 1D sequence, got {aval.str_short()}.")
    if isinstance(start_indices, np.ndarray):
      start_indices = list(start_indices)
    else:
      start_indices = [index_in_dim(start_indices, k, keepdims=False)
                       for k in range(aval.shape[0])]
  start_indices = list(start_indices)
  if len(start_indices) != len(shape):
    raise ValueError(f"Length of slice indices must match number of operand dimensions, got "
                     f"{len(start_indices)} indices for operand shape {shape}.")
  if isinstance(allow_negative_indices, bool):
    allow_negative_indices = [allow_negative_indices] * len(shape)
  typed = [core.get_aval(i).dtype for i in start_indices if type(i) is not int]
  index_dtype = dtypes.default_int_dtype()
  if typed:
    index_dtype = typed[0]
    for dt in typed[1:]:
      index_dtype = dtypes.promote_types(index_dtype, dt)
  out = []
  for i, d, allow_negative in zip(start_indices, shape, allow_negative_indices):
    if isinstance(i, (int, np.integer)):
      i = int(i)
      if i < 0 and not allow_negative:
        raise ValueError(f"Index {i} is out of bounds for dimension {d} if "
                         f"allow_negative_indices=False; pass a non-negative index.")
      i = i + d if i < 0 else i
      out.append(np.asarray(i, index_dtype)[()])
      continue
    if core.get_aval(i).dtype != index_dtype:
      i = convert_element_type(i, index_dtype)
    if allow_negative and dtypes.is_integer(index_dtype) and not dtypes.is_unsigned(
        index_dtype):
      i = select(lt(i, 0), add(i, d), i)
    out.append(i)
  return out


# ---------------------------------------------------------------------------
# dynamic_slice(operand, *start_indices, slice_sizes): the slice of size `slice_sizes` at
# the (clamped) start indices.
dynamic_slice_p = Primitive("dynamic_slice")


def _dynamic_slice_abstract_eval(operand, *start_indices, slice_sizes):
  check_shapelike("dynamic_slice", "slice_sizes", slice_sizes)
  if len(slice_sizes) != operand.ndim:
    raise TypeError(f"dynamic_slice slice_sizes must have length equal to the rank of "
                    f"operand, got slice_sizes {slice_sizes} for operand shape "
                    f"{operand.shape}.")
  if not all(s <= d for s, d in zip(slice_sizes, operand.shape)):
    raise TypeError(f"slice slice_sizes must be less than or equal to operand shape, got "
                    f"slice_sizes {slice_sizes} for operand shape {operand.shape}.")
  _check_indices("dynamic_slice", operand, start_indices)
  return ShapedArray(slice_sizes, operand.dtype, operand.weak_type)


def _dynamic_slice_lowering(ctx, x, *start_indices, slice_sizes):
  return ctx.op("stablehlo.dynamic_slice", [x, *start_indices],
                attrs=f"slice_sizes = {i64_array(slice_sizes)}")


dynamic_slice_p.def_abstract_eval(_dynamic_slice_abstract_eval)
lowering.register_lowering(dynamic_slice_p, _dynamic_slice_lowering)


def dynamic_slice(operand: Any, start_indices: Sequence[Any], slice_sizes: Sequence[int], *,
                  allow_negative_indices: bool | Sequence[bool] = True) -> Any:
  """The slice of static size `slice_sizes` at dynamic `start_indices`.

  Out-of-range starts are clamped so the slice stays in bounds, as XLA does:
  `dynamic_slice(arange(5), (4,), (2,))` is `[3, 4]`.

  Args:
    operand: array `T[*s]`.
    start_indices: one scalar integer (Python int, NumPy or traced) per dimension; they are
      converted to one integer dtype (the promotion of the typed ones, int32 if none).
    slice_sizes: `0 <= z[k] <= s[k]`, one per dimension.
    allow_negative_indices: bool, or one per dimension: where True, a negative index counts
      from the end (`i + s[k]`, once); where False a static negative index is an error and
      a traced one is clamped to 0.

  Returns:
    `T[*z]`.

  Raises:
    ValueError: if the number of indices differs from the operand's rank, or a static index
      is negative where negative indices are not allowed.
    TypeError: if an index is not a scalar integer, or `slice_sizes` does not fit.
  """
  sizes = canonicalize_shape("dynamic_slice", "slice_sizes", slice_sizes)
  idx = _dynamic_slice_indices("dynamic_slice", operand, start_indices, allow_negative_indices)
  return dynamic_slice_p.bind(operand, *idx, slice_sizes=sizes)


def dynamic_slice_in_dim(operand: Any, start_index: Any, slice_size: int, axis: int = 0, *,
                         allow_negative_indices: bool = True) -> Any:
  """`dynamic_slice` along one dimension: `slice_size` elements from `start_index`.

  Args:
    operand: array `T[*a, n, *b]`, `n` at `axis`.
    start_index: scalar integer (clamped to `[0, n - slice_size]` after wrapping).
    slice_size: `0 <= slice_size <= n`.
    axis: the dimension sliced; negative counts from the end.
    allow_negative_indices: a negative `start_index` counts from the end.

  Returns:
    `T[*a, slice_size, *b]`.

  Raises:
    TypeError: if `slice_size` does not fit or `start_index` is not a scalar integer.
  """
  shape = _shape_of(operand)
  (axis,) = utils.canonicalize_axes("dynamic_slice_in_dim", (operator.index(axis),),
                                    len(shape))
  starts, sizes = [0] * len(shape), list(shape)
  starts[axis], sizes[axis] = start_index, operator.index(slice_size)
  allow = [False] * len(shape)
  allow[axis] = allow_negative_indices
  return dynamic_slice(operand, starts, sizes, allow_negative_indices=allow)


def dynamic_index_in_dim(operand: Any, index: Any, axis: int = 0, keepdims: bool = True, *,
                         allow_negative_indices: bool = True) -> Any:
  """`operand[..., index, ...]` along `axis` for a dynamic scalar `index` (clamped).

  Args:
    operand: array `T[*a, n, *b]`, `n` at `axis`.
    index: scalar integer; negative counts from the end.
    axis: the dimension indexed; negative counts from the end.
    keepdims: keep the indexed dimension with size 1.
    allow_negative_indices: a negative `index` counts from the end.

  Returns:
    `T[*a, 1, *b]` if `keepdims`, else `T[*a, *b]`.

  Raises:
    TypeError: if `index` is not a scalar integer, or the axis has size 0.
  """
  result = dynamic_slice_in_dim(operand, index, 1, axis,
                                allow_negative_indices=allow_negative_indices)
  return result if keepdims else squeeze(result, (axis,))


# ---------------------------------------------------------------------------
# dynamic_update_slice(operand, update, *start_indices): `operand` with `update` written at
# the (clamped) start indices.
dynamic_update_slice_p = Primitive("dynamic_update_slice")


def _dynamic_update_slice_abstract_eval(operand, update, *start_indices):
  if operand.ndim != update.ndim:
    raise TypeError(f"dynamic_update_slice update must have the same rank as operand, got "
                    f"update shape {update.shape} for operand shape {operand.shape}.")
  if not all(u <= d for u, d in zip(update.shape, operand.shape)):
    raise TypeError(f"dynamic_update_slice update shape must be smaller than operand shape, "
                    f"got update shape {update.shape} for operand shape {operand.shape}.")
  utils.check_same_dtypes("dynamic_update_slice", (operand, update))
  _check_indices("dynamic_update_slice", operand, start_indices)
  # NB: JAX's rule: weakly typed only when every argument is, the indices included.
  weak = operand.weak_type and update.weak_type and all(i.weak_type for i in start_indices)
  return ShapedArray(operand.shape, operand.dtype, weak)


def _dynamic_update_slice_lowering(ctx, x, update, *start_indices):
  return ctx.op("stablehlo.dynamic_update_slice", [x, update, *start_indices])


dynamic_update_slice_p.def_abstract_eval(_dynamic_update_slice_abstract_eval)
lowering.register_lowering(dynamic_update_slice_p, _dynamic_update_slice_lowering)


def dynamic_update_slice(operand: Any, update: Any, start_indices: Sequence[Any], *,
                         allow_negative_indices: bool | Sequence[bool] = True) -> Any:
  """`operand` with `update` written at dynamic `start_indices` (out of place).

  Out-of-range starts are clamped so the update fits, as XLA does.

  Args:
    operand: array `T[*s]`.
    update: array `T[*u]` of the same rank, `u[k] <= s[k]` (a Python scalar takes T).
    start_indices: one scalar integer per dimension, converted to one integer dtype.
    allow_negative_indices: bool, or one per dimension: where True, a negative index counts
      from the end (once); where False a static negative index is an error and a traced one
      is clamped to 0.

  Returns:
    `T[*s]`.

  Raises:
    ValueError: if the number of indices differs from the operand's rank, or a static index
      is negative where negative indices are not allowed.
    TypeError: if the ranks or dtypes differ, `update` is larger than `operand`, or an index
      is not a scalar integer.
  """
  operand, update = utils.convert_scalars(operand, update)
  idx = _dynamic_slice_indices("dynamic_update_slice", operand, start_indices,
                               allow_negative_indices)
  return dynamic_update_slice_p.bind(operand, update, *idx)


def dynamic_update_slice_in_dim(operand: Any, update: Any, start_index: Any, axis: int, *,
                                allow_negative_indices: bool = True) -> Any:
  """`dynamic_update_slice` at `start_index` along `axis` (0 along the other dimensions).

  Args:
    operand: array `T[*a, n, *b]`, `n` at `axis`.
    update: array `T[*a', m, *b']` of the same rank, no larger than `operand`.
    start_index: scalar integer; negative counts from the end; clamped so `update` fits.
    axis: the dimension; negative counts from the end.
    allow_negative_indices: a negative `start_index` counts from the end.

  Returns:
    `T[*a, n, *b]`.

  Raises:
    TypeError: as `dynamic_update_slice`.
  """
  shape = _shape_of(operand)
  (axis,) = utils.canonicalize_axes("dynamic_update_slice_in_dim", (operator.index(axis),),
                                    len(shape))
  starts = [0] * len(shape)
  starts[axis] = start_index
  allow = [False] * len(shape)
  allow[axis] = allow_negative_indices
  return dynamic_update_slice(operand, update, starts, allow_negative_indices=allow)


def dynamic_update_index_in_dim(operand: Any, update: Any, index: Any, axis: int, *,
                                allow_negative_indices: bool = True) -> Any:
  """Writes `update` at position `index` along `axis`.

  Args:
    operand: array `T[*a, n, *b]`, `n` at `axis`.
    update: array `T[*a, *b]` (expanded at `axis`) or `T[*a, 1, *b]`.
    index: scalar integer; negative counts from the end; clamped to `[0, n - 1]`.
    axis: the dimension; negative counts from the end.
    allow_negative_indices: a negative `index` counts from the end.

  Returns:
    `T[*a, n, *b]`.

  Raises:
    TypeError: if `update`'s rank is neither the operand's nor one less, or as
      `dynamic_update_slice`.
  """
  ndim, undim = len(_shape_of(operand)), len(_shape_of(update))
  (axis,) = utils.canonicalize_axes("dynamic_update_index_in_dim", (operator.index(axis),),
                                    ndim)
  if undim == ndim - 1:
    update = expand_dims(update, (axis,))
  elif undim != ndim:
    raise TypeError(f"dynamic_update_index_in_dim update must have the operand's rank "
                    f"({ndim}) or one less, got update of rank {undim}.")
  return dynamic_update_slice_in_dim(operand, update, index, axis,
                                     allow_negative_indices=allow_negative_indices)
