"""Slicing primitives: `dynamic_slice` and `dynamic_update_slice` (start indices are scalar
arrays), with the `*_in_dim` wrappers, and `gather` and the scatters. The static `slice` is in
shape.py, beside `pad`, its transpose.

Dynamic start indices follow XLA: each is clamped so that the slice stays in bounds
(`clamp(0, i, operand_dim - slice_dim)`), which is StableHLO's semantics, so the lowering is
one op. As in JAX's `lax`, the wrappers first wrap negative indices once (`i + dim` when
`i < 0`, statically for Python ints, with a `select` for traced ones) and give all indices
one integer dtype.

`gather` and the scatters (`scatter`, `scatter_add`, `scatter_sub`, `scatter_mul`,
`scatter_min`, `scatter_max`) take XLA's dimension numbers as JAX's `lax` states them (the index
vector is the last dimension of the indices) and a `GatherScatterMode`. They lower as JAX
does: a FILL_OR_DROP gather is a plain gather followed by a `select` against an in-bounds mask;
a CLIP scatter clamps its indices first (XLA's gather clamps by itself; its scatter drops).

Autodiff (JAX's rules): dynamic_slice, dynamic_update_slice, gather, scatter-add and
scatter-sub are linear in their array operands; each transposes into the other of its pair
(dynamic_slice and dynamic_update_slice, gather and scatter-add). scatter,
scatter-mul, scatter-min and scatter-max have JVPs of their own. Integer indices are never
differentiated.
"""
from __future__ import annotations

import enum
import operator
from functools import lru_cache, partial
from typing import Any, NamedTuple, Sequence

import numpy as np

from stagecraft import core, dtypes, shape_poly
from stagecraft.config import config
from stagecraft.core import Primitive, ShapedArray
from stagecraft.interpreters import ad, batching, lowering
from stagecraft.interpreters import partial_eval as pe
from stagecraft.interpreters.lowering import i64_array
from stagecraft.lax import elementwise, utils
from stagecraft.lax.elementwise import (add, convert_element_type, div, emit_compare, eq, lt,
                                        mul, neg, select, sub)
from stagecraft.lax.shape import (broadcast_in_dim, canonicalize_shape, check_shapelike,
                                  concatenate, expand_dims, full, index_in_dim, iota, reshape,
                                  squeeze)

__all__ = ["dynamic_slice_p", "dynamic_update_slice_p",
           "dynamic_slice", "dynamic_update_slice",
           "dynamic_slice_in_dim", "dynamic_index_in_dim", "dynamic_update_slice_in_dim",
           "dynamic_update_index_in_dim",
           "gather_p", "scatter_p", "scatter_add_p", "scatter_sub_p", "scatter_mul_p",
           "scatter_min_p", "scatter_max_p", "GatherDimensionNumbers", "ScatterDimensionNumbers",
           "GatherScatterMode", "gather", "scatter", "scatter_add", "scatter_sub", "scatter_mul",
           "scatter_min", "scatter_max", "scatter_apply", "scatter_apply_p", "index_take"]


def _shape_of(x: Any) -> tuple[int, ...]:
  return core.get_aval(x).shape


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
    _mixed_indices(name, [i.dtype for i in indices])


def _mixed_indices(name: str, index_dtypes: Sequence[np.dtype]) -> None:
  got = ", ".join(np.dtype(d).name for d in index_dtypes)
  # JAX's messages (dynamic_slice's has a colon, dynamic_update_slice's none).
  raise TypeError(f"index arguments to {name} must be integers of the same type, "
                  f"got{':' if name == 'dynamic_slice' else ''} {got}")


def _zero_index_like(index: Any) -> Any:
  """A zero start index of `index`'s dtype (a Python 0 beside a Python int), as JAX's
  `*_in_dim` functions make the other dimensions' starts."""
  if type(index) is int:
    return 0
  return np.zeros((), dtypes.canonicalize_dtype(core.get_aval(index).dtype))[()]


def _dynamic_slice_indices(name: str, operand: Any, start_indices: Sequence[Any],
                           allow_negative_indices: bool | Sequence[bool]) -> list[Any]:
  """Start indices as scalars of one integer dtype, negative ones wrapped once.

  Python and NumPy integers are wrapped on the host; other indices with `select(i < 0,
  i + dim, i)`. Typed indices must share one dtype, which Python ints must have too (the
  default int's); TypeError otherwise, as JAX's.
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
    # As JAX's: each index keeps its dtype (a Python int the default int's), and they must
    # agree.
    kinds = [index_dtype if type(i) is int else dtypes.canonicalize_dtype(core.get_aval(i).dtype)
             for i in start_indices]
    if any(k != kinds[0] for k in kinds):
      _mixed_indices(name, kinds)
    index_dtype = typed[0]
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
      # NB: as JAX's `i + convert_element_type(d, dtype)`: the dimension is strongly
      # typed, so a weakly typed index is made strong for the sum (not for the test).
      negative = lt(i, utils.const(i, 0))
      strong = i
      if core.get_aval(i).weak_type:   # a constant converts on the host (JAX folds it)
        strong = convert_element_type(i if isinstance(i, core.Tracer) else np.asarray(i),
                                      index_dtype)
      dv = (convert_element_type(d, index_dtype) if shape_poly.is_symbolic_dim(d)
            else np.asarray(d, index_dtype)[()])   # a symbolic dimension (export): staged
      i = select(negative, add(strong, dv), i)
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


def _dynamic_slice_jvp(primals, tangents, *, slice_sizes):
  operand, *start_indices = primals
  out = dynamic_slice_p.bind(operand, *start_indices, slice_sizes=slice_sizes)
  t = tangents[0]   # NB: the integer indices have no tangent
  if type(t) is ad.Zero:
    return out, ad.Zero(ad.tangent_aval(core.get_aval(out)))
  return out, dynamic_slice_p.bind(t, *start_indices, slice_sizes=slice_sizes)


def _dynamic_slice_transpose(ct, operand, *start_indices, slice_sizes):
  """`ct` written into zeros at the (same, clamped) start indices; the indices get none."""
  # NB: zeros of the operand's type (its sharding too), as JAX's.
  zeros = ad.zeros_like_aval(operand.aval.update(dtype=core.get_aval(ct).dtype,
                                                 weak_type=False))
  return [dynamic_update_slice_p.bind(zeros, ct, *start_indices)] + [None] * len(start_indices)


ad.primitive_jvps[dynamic_slice_p] = _dynamic_slice_jvp
ad.primitive_transposes[dynamic_slice_p] = _dynamic_slice_transpose


def _batch_dynamic_slice_indices(indices, dims):
  """The scalar start indices as one index vector `I[n]` (unbatched) or `I[B, n]` (batch
  dim 0), as JAX's `_batch_dynamic_slice_indices`."""
  if not indices:
    return np.array([], np.int32), batching.not_mapped
  size = next((_shape_of(i)[d] for i, d in zip(indices, dims)
               if d is not batching.not_mapped), None)
  if size is None:
    return concatenate([broadcast_in_dim(i, (1,), ()) for i in indices], 0), None
  cols = [broadcast_in_dim(i, (size, 1), ()) if d is batching.not_mapped
          else broadcast_in_dim(i, (size, 1), (0,)) for i, d in zip(indices, dims)]
  return concatenate(cols, 1), 0


def _dynamic_slice_batch_rule(args, dims, *, slice_sizes):
  """A gather that clamps as dynamic_slice does (mode CLIP), through the gather batching
  rule, whether the start indices are batched or not (JAX's rule)."""
  operand, *indices = args
  operand_bdim, *index_dims = dims
  nd = len(slice_sizes)
  dnums = GatherDimensionNumbers(offset_dims=tuple(range(nd)), collapsed_slice_dims=(),
                                 start_index_map=tuple(range(nd)))
  index, index_bdim = _batch_dynamic_slice_indices(indices, index_dims)
  return _gather_batch_rule([operand, index], [operand_bdim, index_bdim],
                            dimension_numbers=dnums, slice_sizes=slice_sizes,
                            unique_indices=True, indices_are_sorted=True,
                            mode=GatherScatterMode.CLIP, fill_value=None)


batching.primitive_batchers[dynamic_slice_p] = _dynamic_slice_batch_rule


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
  if type(operand) in utils.KEY_TYPES:
    return utils.on_keys(dynamic_slice, operand, start_indices, slice_sizes,
                             allow_negative_indices=allow_negative_indices, reuse=utils.FORWARD)
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
  if type(operand) in utils.KEY_TYPES:
    return utils.on_keys(dynamic_slice_in_dim, operand, start_index, slice_size, axis,
                             allow_negative_indices=allow_negative_indices, reuse=utils.FORWARD)
  shape = _shape_of(operand)
  (axis,) = utils.canonicalize_axes("dynamic_slice_in_dim", (operator.index(axis),),
                                    len(shape))
  starts, sizes = [_zero_index_like(start_index)] * len(shape), list(shape)
  starts[axis] = start_index
  sizes[axis] = (slice_size if shape_poly.is_symbolic_dim(slice_size)   # export
                 else operator.index(slice_size))
  allow = [False] * len(shape)
  allow[axis] = allow_negative_indices
  return dynamic_slice(operand, starts, sizes, allow_negative_indices=allow)


# JAX's lax jits `dynamic_index_in_dim` and `dynamic_update_index_in_dim`: a traced program
# shows a `jit[name=dynamic_index_in_dim]` equation, and an eager call runs one compiled
# program. The jit primitive belongs to pjit (layer 6, above lax).
# NB: it registers itself as a closed call in core (`core.closed_calls`), where `_jitted`
# finds it by name at call time instead of importing upward; before pjit is loaded, and
# under `disable_jit`, the body is simply called.
_jitted_bodies: dict[tuple, core.ClosedJaxpr] = {}
_JITTED_BODIES_MAX = 512


def _jit_primitive() -> Primitive | None:
  for prim in core.closed_calls:
    if prim.name == "jit":
      return prim
  return None


def _jitted(name: str, body, args: Sequence[Any], static: dict[str, Any]) -> Any:
  """`body(*args, **static)` (one array result) as a call of the jit primitive named `name`:
  traced once per argument types, static arguments and configuration (a bounded cache)."""
  jit_p = _jit_primitive()
  if jit_p is None or config.disable_jit:
    return body(*args, **static)
  avals = tuple(core.get_aval(x) for x in args)
  key = (name, body, avals, tuple(static.items()), config.state_key)
  closed = _jitted_bodies.get(key)
  if closed is None:
    jaxpr, consts = pe.trace_to_jaxpr(lambda *xs: [body(*xs, **static)], avals,
                                      core.DebugInfo("jit", name, None))
    closed = core.ClosedJaxpr(jaxpr, consts)
    if len(_jitted_bodies) >= _JITTED_BODIES_MAX:
      del _jitted_bodies[next(iter(_jitted_bodies))]
    _jitted_bodies[key] = closed
  return jit_p.bind(*args, jaxpr=closed, name=name)[0]


def dynamic_index_in_dim(operand: Any, index: Any, axis: int = 0, keepdims: bool = True, *,
                         allow_negative_indices: bool = True) -> Any:
  """`operand[..., index, ...]` along `axis` for a dynamic scalar `index` (clamped).

  As JAX's, a call of the `jit` primitive (named `dynamic_index_in_dim`) with `axis`,
  `keepdims` and `allow_negative_indices` static.

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
  if type(operand) in utils.KEY_TYPES:
    return utils.on_keys(dynamic_index_in_dim, operand, index, axis, keepdims,
                             allow_negative_indices=allow_negative_indices, reuse=utils.FORWARD)
  return _jitted("dynamic_index_in_dim", _dynamic_index_in_dim, (operand, index),
                 {"axis": axis, "keepdims": keepdims,
                  "allow_negative_indices": allow_negative_indices})


def _dynamic_index_in_dim(operand, index, *, axis, keepdims, allow_negative_indices):
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


def _dynamic_update_slice_jvp(primals, tangents):
  operand, update, *start_indices = primals
  t_operand, t_update = tangents[:2]
  out = dynamic_update_slice_p.bind(operand, update, *start_indices)
  if type(t_operand) is ad.Zero and type(t_update) is ad.Zero:
    return out, ad.Zero(ad.tangent_aval(core.get_aval(out)))
  return out, dynamic_update_slice_p.bind(ad.instantiate_zeros(t_operand),
                                          ad.instantiate_zeros(t_update), *start_indices)


def _dynamic_update_slice_transpose(ct, operand, update, *start_indices):
  """The operand gets `ct` with the updated window zeroed, the update gets that window of
  `ct` (JAX's rule); the indices get none."""
  update_aval = update.aval if ad.is_undefined_primal(update) else core.get_aval(update)
  dtype = core.get_aval(ct).dtype
  t_operand = t_update = None
  if ad.is_undefined_primal(operand):
    t_operand = dynamic_update_slice_p.bind(   # NB: zeros of the update's type, as JAX's
        ct, ad.zeros_like_aval(update_aval.update(dtype=dtype, weak_type=False)),
        *start_indices)
  if ad.is_undefined_primal(update):
    t_update = dynamic_slice_p.bind(ct, *start_indices, slice_sizes=update_aval.shape)
  return [t_operand, t_update] + [None] * len(start_indices)


ad.primitive_jvps[dynamic_update_slice_p] = _dynamic_update_slice_jvp
ad.primitive_transposes[dynamic_update_slice_p] = _dynamic_update_slice_transpose


def _dynamic_update_slice_batch_rule(args, dims):
  """A scatter that clamps as dynamic_update_slice does (mode CLIP), through the scatter
  batching rule, whether the start indices are batched or not (JAX's rule)."""
  operand, update, *indices = args
  operand_bdim, update_bdim, *index_dims = dims
  u_shape = _shape_of(update)
  if update_bdim is not batching.not_mapped:
    u_shape = u_shape[:update_bdim] + u_shape[update_bdim + 1:]
  nd = len(u_shape)
  dnums = ScatterDimensionNumbers(update_window_dims=tuple(range(nd)), inserted_window_dims=(),
                                  scatter_dims_to_operand_dims=tuple(range(nd)))
  index, index_bdim = _batch_dynamic_slice_indices(indices, index_dims)
  return _scatter_batch_rule(scatter_p, [operand, index, update],
                             [operand_bdim, index_bdim, update_bdim], dimension_numbers=dnums,
                             indices_are_sorted=True, unique_indices=True,
                             mode=GatherScatterMode.CLIP)


batching.primitive_batchers[dynamic_update_slice_p] = _dynamic_update_slice_batch_rule


def dynamic_update_slice(operand: Any, update: Any, start_indices: Sequence[Any], *,
                         allow_negative_indices: bool | Sequence[bool] = True) -> Any:
  """`operand` with `update` written at dynamic `start_indices` (out of place).

  Out-of-range starts are clamped so the update fits, as XLA does.

  Args:
    operand: array `T[*s]`.
    update: array `T[*u]` of the same rank, `u[k] <= s[k]` (not promoted).
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
  if type(operand) in utils.KEY_TYPES or type(update) in utils.KEY_TYPES:
    return utils.on_keys(dynamic_update_slice, operand, update, start_indices,
                             allow_negative_indices=allow_negative_indices,
                             same=(operand, update), reuse=utils.DYNAMIC_UPDATE)
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
  if type(operand) in utils.KEY_TYPES or type(update) in utils.KEY_TYPES:
    return utils.on_keys(dynamic_update_slice_in_dim, operand, update, start_index, axis,
                             allow_negative_indices=allow_negative_indices,
                             same=(operand, update), reuse=utils.DYNAMIC_UPDATE)
  shape = _shape_of(operand)
  (axis,) = utils.canonicalize_axes("dynamic_update_slice_in_dim", (operator.index(axis),),
                                    len(shape))
  starts = [_zero_index_like(start_index)] * len(shape)
  starts[axis] = start_index
  allow = [False] * len(shape)
  allow[axis] = allow_negative_indices
  return dynamic_update_slice(operand, update, starts, allow_negative_indices=allow)


def dynamic_update_index_in_dim(operand: Any, update: Any, index: Any, axis: int, *,
                                allow_negative_indices: bool = True) -> Any:
  """Writes `update` at position `index` along `axis`.

  As JAX's, a call of the `jit` primitive (named `dynamic_update_index_in_dim`) with `axis`
  and `allow_negative_indices` static.

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
  if type(operand) in utils.KEY_TYPES or type(update) in utils.KEY_TYPES:
    return utils.on_keys(dynamic_update_index_in_dim, operand, update, index, axis,
                             allow_negative_indices=allow_negative_indices,
                             same=(operand, update), reuse=utils.DYNAMIC_UPDATE)
  return _jitted("dynamic_update_index_in_dim", _dynamic_update_index_in_dim,
                 (operand, update, index),
                 {"axis": axis, "allow_negative_indices": allow_negative_indices})


def _dynamic_update_index_in_dim(operand, update, index, *, axis, allow_negative_indices):
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


# ---------------------------------------------------------------------------
# gather and scatter, with XLA's dimension numbers (as JAX's `lax` states them: the index
# vector dimension is always the last dimension of the indices).
#
# gather(operand, indices): for each batch position `b` of `indices[..., :]` (all dimensions
# but the last), the slice of size `slice_sizes` that starts at the operand position given by
# scattering `indices[b]` into the dimensions `start_index_map` (0 elsewhere; batching dims
# take the batch position). Dimensions of the slice in `collapsed_slice_dims` and
# `operand_batching_dims` (size 1) are dropped; the others go to the output dimensions
# `offset_dims`, and the batch dimensions fill the remaining output dimensions in order.
# scatter is its transpose: each window of `updates` is combined into `operand` at the start
# given by its index vector.


class GatherDimensionNumbers(NamedTuple):
  """The dimension numbers of `gather` (XLA's, with the index vector dimension last).

  Args:
    offset_dims: sorted output dimensions that index into a slice of the operand.
    collapsed_slice_dims: sorted operand dimensions of slice size 1 dropped from the output.
    start_index_map: for each component of an index vector, the operand dimension it starts.
    operand_batching_dims: sorted operand dimensions (slice size 0 or 1) matched with
      `start_indices_batching_dims` of the indices.
    start_indices_batching_dims: indices dimensions paired with `operand_batching_dims`.
  """
  offset_dims: tuple[int, ...]
  collapsed_slice_dims: tuple[int, ...]
  start_index_map: tuple[int, ...]
  operand_batching_dims: tuple[int, ...] = ()
  start_indices_batching_dims: tuple[int, ...] = ()


class ScatterDimensionNumbers(NamedTuple):
  """The dimension numbers of `scatter` (XLA's, with the index vector dimension last).

  Args:
    update_window_dims: sorted dimensions of `updates` that are window dimensions.
    inserted_window_dims: sorted operand dimensions of window size 1 absent from `updates`
      (the mirror of gather's `collapsed_slice_dims`).
    scatter_dims_to_operand_dims: for each component of an index vector, the operand
      dimension it starts.
    operand_batching_dims: sorted operand dimensions matched with
      `scatter_indices_batching_dims` of the indices.
    scatter_indices_batching_dims: indices dimensions paired with `operand_batching_dims`.
  """
  update_window_dims: tuple[int, ...]
  inserted_window_dims: tuple[int, ...]
  scatter_dims_to_operand_dims: tuple[int, ...]
  operand_batching_dims: tuple[int, ...] = ()
  scatter_indices_batching_dims: tuple[int, ...] = ()


class GatherScatterMode(enum.Enum):
  """How gather and scatter treat out-of-bounds indices.

  CLIP: indices are clamped so that the whole window is in bounds.
  FILL_OR_DROP: a gathered window that is partly out of bounds is filled entirely with
    `fill_value`; a scattered window that is partly out of bounds is dropped entirely.
  PROMISE_IN_BOUNDS: the caller promises in-bounds indices; XLA clamps gathers and drops
    scatters that are not.
  """
  CLIP = enum.auto()
  FILL_OR_DROP = enum.auto()
  PROMISE_IN_BOUNDS = enum.auto()

  @staticmethod
  def from_any(s: "str | GatherScatterMode | None") -> "GatherScatterMode":
    """`'clip'`, `'fill'`/`'drop'`/None (FILL_OR_DROP), `'promise_in_bounds'`, or a mode.

    Raises:
      ValueError: for other values.
    """
    if isinstance(s, GatherScatterMode):
      return s
    if s == "clip":
      return GatherScatterMode.CLIP
    if s is None or s == "fill" or s == "drop":
      return GatherScatterMode.FILL_OR_DROP
    if s == "promise_in_bounds":
      return GatherScatterMode.PROMISE_IN_BOUNDS
    raise ValueError(f'Unknown gather mode "{s}"; expected "clip", "fill", "drop", '
                     f'"promise_in_bounds" or a GatherScatterMode.')


def _dims_tuple(dims) -> tuple[int, ...]:
  # NB: NumPy ints are kept as given (JAX's wrappers pass dimension numbers through, and
  # its rules make NumPy ints, which printed jaxprs show as `np.int64(1)`).
  return tuple(d if isinstance(d, np.integer) else operator.index(d) for d in dims)


def _canonical_dnums(cls, dnums):
  if not isinstance(dnums, cls):
    raise TypeError(f"dimension_numbers must be a lax.{cls.__name__}, got {dnums!r}.")
  return cls(*(_dims_tuple(f) for f in dnums))


def _is_sorted(dims, op, name):
  if any(dims[i] < dims[i - 1] for i in range(1, len(dims))):
    raise TypeError(f"{name} in {op} op must be sorted; got {dims}")


def _check_batching_dims(op: str, operand, indices, obatch, ibatch, index_vector_dim: int,
                         ibatch_name: str) -> None:
  """The checks gather and scatter share on their indices' batching dims and how they pair
  with the operand's (`op` is "Gather" or "Scatter")."""
  _no_duplicate_dims(ibatch, op.lower(), ibatch_name)
  _dims_in_range(ibatch, indices.ndim, op.lower(), ibatch_name)
  if index_vector_dim in ibatch:
    raise TypeError(f"{op} op cannot have the index vector dimension as a batching "
                    f"dimension; got {ibatch}.")
  if len(obatch) != len(ibatch):
    raise TypeError(f"{op} op requires equal numbers of operand_batching_dims and "
                    f"{ibatch_name}, got {obatch} and {ibatch}.")
  obshape = tuple(operand.shape[i] for i in obatch)
  ibshape = tuple(indices.shape[i] for i in ibatch)
  if obshape != ibshape:
    raise TypeError(f"{op} op requires operand batching dimensions and indices batching "
                    f"dimensions to have the same shape, got {obshape} and {ibshape}.")


def _no_duplicate_dims(dims, op, name):
  if len(set(dims)) != len(dims):
    raise TypeError(f"{name} in {op} op must not repeat; got: {dims}.")


def _dims_in_range(dims, rank, op, name):
  for d in dims:
    if not 0 <= d < rank:
      raise TypeError(f"Invalid {name} set in {op} op; valid range is [0, {rank}); got: {d}.")


def _disjoint_dims(dims1, dims2, op, name1, name2):
  if not set(dims1).isdisjoint(dims2):
    raise TypeError(f"{name1} and {name2} in {op} op must be disjoint; got: {dims1} and "
                    f"{dims2}.")


def _check_index_dtype(op: str, indices: ShapedArray) -> None:
  if not dtypes.is_integer(indices.dtype):
    raise ValueError(f"indices must have an integer type; {op} got indices "
                     f"{indices.str_short()}. Convert them with lax.convert_element_type.")
  if indices.ndim == 0:
    raise TypeError(f"{op} indices must have rank >= 1 (the last dimension is the index "
                    f"vector), got {indices.str_short()}. Add a trailing dimension of size 1 "
                    f"for scalar indices.")


# -- gather
gather_p = Primitive("gather")


def _gather_abstract_eval(operand, indices, *, dimension_numbers, slice_sizes,
                          unique_indices, indices_are_sorted, mode, fill_value):
  """XLA's ShapeInference::InferGatherShape checks, with JAX's messages."""
  _check_index_dtype("gather", indices)
  dn = dimension_numbers
  offset_dims, collapsed = dn.offset_dims, dn.collapsed_slice_dims
  start_index_map, obatch, ibatch = (dn.start_index_map, dn.operand_batching_dims,
                                     dn.start_indices_batching_dims)
  index_vector_dim = indices.ndim - 1
  _is_sorted(offset_dims, "gather", "offset_dims")
  _no_duplicate_dims(offset_dims, "gather", "offset_dims")
  out_rank = len(offset_dims) + indices.ndim - 1
  for i, d in enumerate(offset_dims):
    if not 0 <= d < out_rank:
      raise TypeError(f"Offset dimension {i} in gather op is out of bounds; got {d}, but "
                      f"should have been in [0, {out_rank})")
  if len(start_index_map) != indices.shape[index_vector_dim]:
    raise TypeError(f"Gather op has {len(start_index_map)} elements in start_index_map and "
                    f"the bound of dimension index_vector_dim={index_vector_dim} of indices "
                    f"is {indices.shape[index_vector_dim]}. These two numbers must be equal.")
  for i, d in enumerate(start_index_map):
    if not 0 <= d < operand.ndim:
      raise TypeError(f"Invalid start_index_map; domain is [0, {operand.ndim}), got: "
                      f"{i}->{d}.")
  _no_duplicate_dims(start_index_map, "gather", "start_index_map")
  for dims, name in ((collapsed, "collapsed_slice_dims"), (obatch, "operand_batching_dims")):
    _is_sorted(dims, "gather", name)
    _dims_in_range(dims, operand.ndim, "gather", name)
    _no_duplicate_dims(dims, "gather", name)
  _disjoint_dims(collapsed, obatch, "gather", "collapsed_slice_dims", "operand_batching_dims")
  _disjoint_dims(start_index_map, obatch, "gather", "start_index_map",
                 "operand_batching_dims")
  _check_batching_dims("Gather", operand, indices, obatch, ibatch, index_vector_dim,
                       "start_indices_batching_dims")
  if len(slice_sizes) != operand.ndim:
    raise TypeError(f"Gather op must have one slice size for every input dimension; got: "
                    f"len(slice_sizes)={len(slice_sizes)}, input_shape.rank={operand.ndim}")
  if len(slice_sizes) != len(offset_dims) + len(collapsed) + len(obatch):
    raise TypeError(f"All components of the offset index in a gather op must either be a "
                    f"offset dimension or explicitly collapsed/batching; got "
                    f"len(slice_sizes)={len(slice_sizes)}, output_slice_sizes={offset_dims}, "
                    f"collapsed_slice_dims={collapsed}, operand_batching_dims={obatch}.")
  if indices.size:
    for i, (s, d) in enumerate(zip(slice_sizes, operand.shape)):
      if not 0 <= s <= d:
        raise TypeError(f"Slice size at index {i} in gather op is out of range, must be "
                        f"within [0, {d} + 1), got {s}.")
  for i, d in enumerate(collapsed):
    if slice_sizes[d] != 1:
      raise TypeError(f"Gather op can only collapse slice dims with bound 1, but bound is "
                      f"{slice_sizes[d]} for index {d} at position {i}.")
  for i, d in enumerate(obatch):
    if slice_sizes[d] > 1:
      raise TypeError(f"Gather op can only have operand batching dims with bound 0/1, but "
                      f"bound is {slice_sizes[d]} for index {d} at position {i}.")
  batch = iter(indices.shape[:-1])
  kept = iter(s for i, s in enumerate(slice_sizes) if i not in collapsed and i not in obatch)
  shape = tuple(next(kept) if i in offset_dims else next(batch) for i in range(out_rank))
  return ShapedArray(shape, operand.dtype, operand.weak_type)


def gather_attrs(dn: GatherDimensionNumbers, index_vector_dim: int) -> str:
  """The `#stablehlo.gather<...>` attribute of `dn` (also used by export's dynamic_gather)."""
  fields = [("offset_dims", dn.offset_dims), ("collapsed_slice_dims", dn.collapsed_slice_dims),
            ("operand_batching_dims", dn.operand_batching_dims),
            ("start_indices_batching_dims", dn.start_indices_batching_dims),
            ("start_index_map", dn.start_index_map)]
  body = ", ".join(f"{k} = [{', '.join(map(str, v))}]" for k, v in fields if v)
  body = f"{body}, " if body else ""
  return f"#stablehlo.gather<{body}index_vector_dim = {index_vector_dim}>"


def _wide_index_dtype(dtype: np.dtype) -> np.dtype:
  """A signed dtype that holds every value of the index dtype `dtype` that can be in
  bounds (narrow types widen to int32; 64-bit and uint32 indices compare as int64)."""
  if dtype.itemsize < 4 or dtype == dtypes.int32:
    return dtypes.int32
  return dtypes.int64


def _emit_constant_array(ctx, value: np.ndarray) -> str:
  aval = ShapedArray(value.shape, value.dtype)
  r = ctx.fb.fresh()
  ctx.fb.emit(f"{r} = stablehlo.constant {lowering.dense_array(value)} : "
              f"{lowering.ir_type(aval)}")
  return r


def _emit_broadcast(ctx, x: str, aval: ShapedArray, shape, dims) -> str:
  out = aval.update(shape=tuple(shape))
  if aval.shape == out.shape:
    return x
  r = ctx.fb.fresh()
  ctx.fb.emit(f"{r} = stablehlo.broadcast_in_dim {x}, dims = [{', '.join(map(str, dims))}] "
              f": ({lowering.ir_type(aval)}) -> {lowering.ir_type(out)}")
  return r


def _emit_convert(ctx, x: str, aval: ShapedArray, dtype: np.dtype) -> str:
  if aval.dtype == dtype:
    return x
  return ctx.op("stablehlo.convert", [x], [aval.update(dtype=dtype)], operand_avals=[aval])[0]


def _in_bounds_mask(ctx, indices: str, i_aval: ShapedArray, upper: Sequence[int]) -> str:
  """bool[batch]: every component of the index vector `indices[b, :]` is in
  `[0, upper[k]]` (JAX's `_gather_fill`)."""
  idt = _wide_index_dtype(i_aval.dtype)
  wide = i_aval.update(dtype=idt)
  x = _emit_convert(ctx, indices, i_aval, idt)
  pred = wide.update(dtype=dtypes.bool_)
  zero = _emit_broadcast(ctx, ctx.constant(0, ShapedArray((), idt)), ShapedArray((), idt),
                         wide.shape, ())
  up_aval = ShapedArray((len(upper),), idt)
  up = _emit_broadcast(ctx, _emit_constant_array(ctx, np.asarray(upper, idt)), up_aval,
                       wide.shape, (wide.ndim - 1,))
  ok = ctx.elementwise("stablehlo.and", emit_compare(ctx, "GE", x, zero, wide),
                       emit_compare(ctx, "LE", x, up, wide), aval=pred)
  scalar = ShapedArray((), dtypes.bool_)
  body = ctx.region([scalar, scalar], [scalar],
                    lambda a, b: [ctx.elementwise("stablehlo.and", a, b, aval=scalar)])
  return ctx.op("stablehlo.reduce", [ok, ctx.constant(True, scalar)],
                [pred.update(shape=wide.shape[:-1])],
                attrs=f"dimensions = {i64_array((wide.ndim - 1,))}", regions=[body],
                operand_avals=[pred, scalar])[0]


def _gather_lowering(ctx, operand, indices, *, dimension_numbers, slice_sizes,
                     unique_indices, indices_are_sorted, mode, fill_value):
  x_aval, i_aval = ctx.avals_in
  out_aval, = ctx.avals_out
  scalar = ShapedArray((), out_aval.dtype)
  # NB: `0 in shape`, not `size == 0`: export lowers with dynamic (`?`) dimensions
  if 0 in out_aval.shape:   # as JAX: no gather for an empty result
    return [_emit_broadcast(ctx, ctx.constant(0, scalar), scalar, out_aval.shape, ())]
  dn = dimension_numbers
  attrs = (f"dimension_numbers = {gather_attrs(dn, i_aval.ndim - 1)}, indices_are_sorted = "
           f"{str(bool(indices_are_sorted)).lower()}, slice_sizes = {i64_array(slice_sizes)}")
  out = ctx.op("stablehlo.gather", [operand, indices], attrs=attrs)[0]
  if mode is not GatherScatterMode.FILL_OR_DROP or not dn.start_index_map:
    return [out]   # NB: CLIP and PROMISE_IN_BOUNDS: XLA's gather clamps the starts
  upper = [x_aval.shape[d] - slice_sizes[d] for d in dn.start_index_map]
  mask = _in_bounds_mask(ctx, indices, i_aval, upper)
  batch_dims = [d for d in range(out_aval.ndim) if d not in dn.offset_dims]
  pred = out_aval.update(dtype=dtypes.bool_)
  mask = _emit_broadcast(ctx, mask, pred.update(shape=i_aval.shape[:-1]), out_aval.shape,
                         batch_dims)
  fill = _emit_broadcast(ctx, ctx.constant(fill_value, scalar), scalar, out_aval.shape, ())
  r = ctx.fb.fresh()
  ctx.fb.emit(f"{r} = stablehlo.select {mask}, {out}, {fill} : {lowering.ir_type(pred)}, "
              f"{lowering.ir_type(out_aval)}")
  return [r]


gather_p.def_abstract_eval(_gather_abstract_eval)
lowering.register_lowering(gather_p, _gather_lowering)


def _gather_jvp(t, operand, indices, *, dimension_numbers, slice_sizes, unique_indices,
                indices_are_sorted, mode, fill_value):
  # NB: out-of-bounds windows of a FILL_OR_DROP gather are constant: their tangent is 0.
  return gather(t, indices, dimension_numbers, slice_sizes, unique_indices=unique_indices,
                indices_are_sorted=indices_are_sorted, mode=mode, fill_value=0)


def _gather_transpose(ct, operand, indices, *, dimension_numbers, slice_sizes,
                      unique_indices, indices_are_sorted, mode, fill_value):
  """A scatter-add of `ct` into zeros with the mirrored dimension numbers (JAX's rule)."""
  dn = dimension_numbers
  zeros = ad.zeros_like_aval(operand.aval.update(dtype=core.get_aval(ct).dtype,
                                                 weak_type=False))
  scatter_dn = ScatterDimensionNumbers(
      update_window_dims=dn.offset_dims, inserted_window_dims=dn.collapsed_slice_dims,
      scatter_dims_to_operand_dims=dn.start_index_map,
      operand_batching_dims=dn.operand_batching_dims,
      scatter_indices_batching_dims=dn.start_indices_batching_dims)
  return [scatter_add(zeros, indices, ct, scatter_dn, unique_indices=unique_indices,
                      indices_are_sorted=indices_are_sorted, mode=mode), None]


ad.defjvp(gather_p, _gather_jvp, None)
ad.primitive_transposes[gather_p] = _gather_transpose


def _gather_batch_rule(args, dims, *, dimension_numbers, slice_sizes, unique_indices,
                       indices_are_sorted, mode, fill_value):
  """JAX's `_gather_batching_rule`. Operand batched: its batch dim (moved first) is a new
  offset dim taken whole. Indices batched: their batch dim (moved first) is a new batch dim
  of the gather. Both: the two batch dims are paired as operand/start-indices batching
  dims. The result's batch dim is 0."""
  operand, indices = args
  operand_bdim, indices_bdim = dims
  dn = dimension_numbers
  params = dict(unique_indices=unique_indices, indices_are_sorted=indices_are_sorted,
                mode=mode, fill_value=fill_value)
  if indices_bdim is batching.not_mapped:
    operand = batching.moveaxis(operand, operand_bdim, 0)
    dnums = GatherDimensionNumbers(
        offset_dims=(0,) + _shift(dn.offset_dims), collapsed_slice_dims=_shift(
            dn.collapsed_slice_dims), start_index_map=_shift(dn.start_index_map),
        operand_batching_dims=_shift(dn.operand_batching_dims),
        start_indices_batching_dims=dn.start_indices_batching_dims)
    sizes = _int_tuple((_shape_of(operand)[0],) + tuple(slice_sizes))
    return gather_p.bind(operand, indices, dimension_numbers=dnums, slice_sizes=sizes,
                         **params), 0
  indices = batching.moveaxis(indices, indices_bdim, 0)
  if operand_bdim is batching.not_mapped:
    dnums = GatherDimensionNumbers(
        offset_dims=tuple(1 + d for d in dn.offset_dims),
        collapsed_slice_dims=dn.collapsed_slice_dims, start_index_map=dn.start_index_map,
        operand_batching_dims=dn.operand_batching_dims,
        start_indices_batching_dims=_shift(dn.start_indices_batching_dims))
    # NB: gathers from one operand at batched indices may no longer be sorted or unique.
    params.update(unique_indices=False, indices_are_sorted=False)
    return gather_p.bind(operand, indices, dimension_numbers=dnums,
                         slice_sizes=_int_tuple(slice_sizes), **params), 0
  operand = batching.moveaxis(operand, operand_bdim, 0)
  dnums = GatherDimensionNumbers(
      offset_dims=_shift(dn.offset_dims), collapsed_slice_dims=_shift(dn.collapsed_slice_dims),
      start_index_map=_shift(dn.start_index_map),
      operand_batching_dims=(0,) + _shift(dn.operand_batching_dims),
      start_indices_batching_dims=(0,) + _shift(dn.start_indices_batching_dims))
  sizes = (0 if _shape_of(operand)[0] == 0 else 1,) + tuple(slice_sizes)
  return gather_p.bind(operand, indices, dimension_numbers=dnums,
                       slice_sizes=_int_tuple(sizes), **params), 0


def _shift(dims) -> tuple:
  """`dims` shifted past a new leading batch dim, as JAX's batching rules shift them
  (`tuple(np.add(1, dims))`: NumPy ints, which the printed jaxpr shows as JAX's does)."""
  return tuple(np.add(1, dims, dtype=np.int64)) if len(dims) else ()


def _int_tuple(xs) -> tuple[int, ...]:
  return tuple(operator.index(x) for x in xs)


batching.primitive_batchers[gather_p] = _gather_batch_rule


def _default_fill_value(dtype: np.dtype):
  """JAX's gather fill: NaN (inexact), the minimum (signed), the maximum (unsigned), True;
  for typed keys the uint32 maximum (each word of the filled keys' data)."""
  if not isinstance(dtype, np.dtype) and dtypes.issubdtype(dtype, dtypes.prng_key):
    return int(np.iinfo(np.uint32).max)
  if dtypes.is_inexact(dtype):
    return np.nan
  if dtypes.is_integer(dtype):
    info = dtypes.iinfo(dtype)
    return int(info.max if dtypes.is_unsigned(dtype) else info.min)
  return True


def _static_fill_value(fill_value, dtype: np.dtype):
  if isinstance(fill_value, core.Tracer):
    raise fill_value._concretization_error(
        "gather", fix="The fill_value of a gather (and of x.at[...].get) is a static "
                      "parameter: pass a Python or NumPy scalar.")
  value = np.asarray(fill_value)
  if value.ndim != 0:
    raise ValueError(f"fill_value argument to gather must be a scalar, got shape "
                     f"{value.shape}.")
  # NB: wraps into the dtype as convert_element_type does (-1 as uint8 is 255).
  value = value.astype(dtype)[()].item()
  if isinstance(value, float) and np.isnan(value):
    return np.nan   # one NaN object, so params compare equal and the eager cache hits
  if type(fill_value) in (bool, int, float) and value == fill_value:
    return fill_value   # NB: kept as given where exact (JAX prints `fill_value=0` on f32)
  return value


def gather(operand: Any, start_indices: Any, dimension_numbers: GatherDimensionNumbers,
           slice_sizes: Sequence[int], *, unique_indices: bool = False,
           indices_are_sorted: bool = False, mode: "str | GatherScatterMode | None" = None,
           fill_value: Any = None) -> Any:
  """XLA's Gather: slices of `operand` at the starts given by `start_indices` (JAX's `lax.gather`).

  Prefer NumPy indexing (`x[idx]`, `x.at[idx].get(...)`), which builds the dimension numbers.

  Args:
    operand: array `T[*s]`.
    start_indices: integer array `I[*b, k]`; the last dimension is the index vector, of
      length `k = len(dimension_numbers.start_index_map)`.
    dimension_numbers: a `GatherDimensionNumbers`.
    slice_sizes: one size per operand dimension; 1 for collapsed dims, 0 or 1 for batching.
    unique_indices, indices_are_sorted: promises that may speed up the computation.
    mode: out-of-bounds handling (`GatherScatterMode` or 'clip', 'fill', 'drop',
      'promise_in_bounds'); None means PROMISE_IN_BOUNDS (XLA clamps), as in JAX.
    fill_value: value of out-of-bounds windows for FILL_OR_DROP (static scalar); default NaN
      for inexact T, the minimum of signed integers, the maximum of unsigned ones, True for
      bool. Ignored for the other modes.

  Returns:
    `T[*o]`: the rank is `len(b) + len(offset_dims)`; offset dims take the slice sizes of
    the kept operand dims in order, the other dims the sizes of `b` in order.

  Raises:
    ValueError: if the indices are not integers or `mode` is unknown.
    TypeError: if the dimension numbers or slice sizes are inconsistent with the shapes
      (JAX's messages).

  Examples:
    >>> import numpy as np
    >>> x = np.array([10, 11, 12], np.int32)
    >>> dn = GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,),
    ...                             start_index_map=(0,))
    >>> np.asarray(gather(x, np.array([[2], [0], [5]], np.int32), dn, (1,), mode="fill"))
    array([         12,          10, -2147483648], dtype=int32)
  """
  dn = _canonical_dnums(GatherDimensionNumbers, dimension_numbers)
  parsed = GatherScatterMode.PROMISE_IN_BOUNDS if mode is None else (
      GatherScatterMode.from_any(mode))
  if parsed is GatherScatterMode.FILL_OR_DROP:
    dtype = core.get_aval(operand).dtype
    fill_value = _default_fill_value(dtype) if fill_value is None else (
        _static_fill_value(fill_value, dtype))
  else:
    fill_value = None
  return gather_p.bind(operand, start_indices, dimension_numbers=dn,
                       slice_sizes=canonicalize_shape("gather", "slice_sizes", slice_sizes),
                       unique_indices=bool(unique_indices),
                       indices_are_sorted=bool(indices_are_sorted), mode=parsed,
                       fill_value=fill_value)


# -- scatter, scatter-add, scatter-sub, scatter-mul, scatter-min, scatter-max: one primitive
# each; the region combines the operand value (first argument) with the update (second).


def _updates_batching_dims(ibatch, update_window_dims, index_vector_dim, updates_rank):
  scatter_dim_in_updates: list = list(range(index_vector_dim))
  for i in update_window_dims:
    scatter_dim_in_updates.insert(i, None)
  if len(scatter_dim_in_updates) != updates_rank:
    return None
  return tuple(scatter_dim_in_updates.index(i) for i in ibatch)


def _scatter_abstract_eval(name, accepted, operand, indices, updates, *, dimension_numbers,
                           indices_are_sorted, unique_indices, mode, **_):
  """XLA's ShapeInference::InferScatterShape checks, with JAX's messages."""
  _check_index_dtype(name, indices)
  utils.check_same_dtypes("scatter", (operand, updates))   # JAX's message, for all six
  # NB: JAX checks the dtype where it traces the combining function (lax.add, lax.sub, ...),
  # so its message names that function at position 0: "sub does not accept dtype bool ...".
  if name != "scatter" or isinstance(operand.dtype, np.dtype):   # scatter sets keys too
    utils.check_dtype(_scatter_combiner_names.get(name, name), operand, accepted,
                      0 if name in _scatter_combiner_names else None)
  dn = dimension_numbers
  uwd, iwd, sd2od = (dn.update_window_dims, dn.inserted_window_dims,
                     dn.scatter_dims_to_operand_dims)
  obatch, ibatch = dn.operand_batching_dims, dn.scatter_indices_batching_dims
  index_vector_dim = indices.ndim - 1
  expected_rank = indices.ndim - 1 + len(uwd)
  if updates.ndim != expected_rank:
    raise TypeError(f"Updates tensor must be of rank {expected_rank}; got {updates.ndim}.")
  _is_sorted(uwd, "scatter", "update_window_dims")
  _no_duplicate_dims(uwd, "scatter", "update_window_dims")
  _dims_in_range(uwd, updates.ndim, "scatter", "update_window_dims")
  for dims, dname in ((iwd, "inserted_window_dims"), (obatch, "operand_batching_dims")):
    _is_sorted(dims, "scatter", dname)
    _no_duplicate_dims(dims, "scatter", dname)
    _dims_in_range(dims, operand.ndim, "scatter", dname)
  _disjoint_dims(iwd, obatch, "scatter", "inserted_window_dims", "operand_batching_dims")
  _disjoint_dims(sd2od, obatch, "scatter", "scatter_dims_to_operand_dims",
                 "operand_batching_dims")
  _check_batching_dims("Scatter", operand, indices, obatch, ibatch, index_vector_dim,
                       "scatter_indices_batching_dims")
  ubdims = _updates_batching_dims(ibatch, uwd, index_vector_dim, updates.ndim)
  obshape = tuple(operand.shape[i] for i in obatch)
  ubshape = tuple(updates.shape[i] for i in ubdims)
  if obshape != ubshape:
    raise TypeError(f"Scatter op requires operand batching dimensions and updates batching "
                    f"dimensions to have the same shape, got {obshape} and {ubshape}.")
  window_size = len(uwd) + len(iwd) + len(obatch)
  if operand.ndim != window_size:
    raise TypeError(f"Scatter op has window of size {window_size}; doesn't match operand of "
                    f"rank {operand.ndim}.")
  if len(sd2od) != indices.shape[index_vector_dim]:
    raise TypeError(f"Scatter op has {len(sd2od)} elements in scatter_dims_to_operand_dims "
                    f"and the bound of dimension index_vector_dim={index_vector_dim} of "
                    f"indices is {indices.shape[index_vector_dim]}. These two numbers must "
                    f"be equal")
  for i, d in enumerate(sd2od):
    if not 0 <= d < operand.ndim:
      raise TypeError(f"Invalid scatter_dims_to_operand_dims mapping; domain is "
                      f"[0, {operand.ndim}), got: {i}->{d}.")
  _no_duplicate_dims(sd2od, "scatter", "scatter_dims_to_operand_dims")
  max_sizes = [d for i, d in enumerate(operand.shape) if i not in iwd and i not in obatch]
  for i, ud in enumerate(uwd):
    if max_sizes[i] < updates.shape[ud]:
      raise TypeError(f"Bounds of the window dimensions of updates must not exceed the "
                      f"bounds of the corresponding dimensions of operand. For dimension "
                      f"{ud}, updates bound is {updates.shape[ud]}, operand bound is "
                      f"{max_sizes[i]}.")
  seen = 0
  for i in (d for d in range(updates.ndim) if d not in uwd):
    if updates.shape[i] != indices.shape[seen]:
      raise TypeError(f"Bounds of the scatter dimensions of updates must be the same as the "
                      f"bounds of the corresponding dimensions of scatter indices. For "
                      f"scatter dimension {i}, updates bound is {updates.shape[i]}, indices "
                      f"bound is {indices.shape[seen]}.")
    seen += 1
  return ShapedArray(operand.shape, operand.dtype, operand.weak_type)


def _scatter_attrs(dn: ScatterDimensionNumbers, index_vector_dim: int) -> str:
  fields = [("update_window_dims", dn.update_window_dims),
            ("inserted_window_dims", dn.inserted_window_dims),
            ("input_batching_dims", dn.operand_batching_dims),
            ("scatter_indices_batching_dims", dn.scatter_indices_batching_dims),
            ("scatter_dims_to_operand_dims", dn.scatter_dims_to_operand_dims)]
  body = ", ".join(f"{k} = [{', '.join(map(str, v))}]" for k, v in fields if v)
  body = f"{body}, " if body else ""
  return f"#stablehlo.scatter<{body}index_vector_dim = {index_vector_dim}>"


def _clamp_scatter_indices(ctx, indices, x_aval, i_aval, u_aval, dn) -> str:
  """Clamps each index vector so that its window is in bounds (JAX's
  `_clamp_scatter_indices`)."""
  sizes, pos = [], 0
  for i in range(x_aval.ndim):
    if i in dn.inserted_window_dims or i in dn.operand_batching_dims:
      sizes.append(1)
    else:
      sizes.append(u_aval.shape[dn.update_window_dims[pos]])
      pos += 1
  top = dtypes.iinfo(i_aval.dtype).max
  upper = np.asarray([min(x_aval.shape[d] - sizes[d], top)
                      for d in dn.scatter_dims_to_operand_dims], i_aval.dtype)
  vec = ShapedArray(upper.shape, i_aval.dtype)
  hi = _emit_broadcast(ctx, _emit_constant_array(ctx, upper), vec, i_aval.shape,
                       (i_aval.ndim - 1,))
  scalar = ShapedArray((), i_aval.dtype)
  lo = _emit_broadcast(ctx, ctx.constant(0, scalar), scalar, i_aval.shape, ())
  return ctx.op("stablehlo.clamp", [lo, indices, hi], [i_aval],
                operand_avals=[i_aval, i_aval, i_aval])[0]


def _scatter_lowering(combine, ctx, operand, indices, updates, *, dimension_numbers,
                      indices_are_sorted, unique_indices, mode, **_):
  x_aval, i_aval, u_aval = ctx.avals_in
  dn = dimension_numbers
  if mode is GatherScatterMode.CLIP and dn.scatter_dims_to_operand_dims:
    indices = _clamp_scatter_indices(ctx, indices, x_aval, i_aval, u_aval, dn)
  scalar = ShapedArray((), x_aval.dtype)
  body = ctx.region([scalar, scalar], [scalar], lambda a, b: [combine(ctx, scalar, a, b)])
  attrs = (f"indices_are_sorted = {str(bool(indices_are_sorted)).lower()}, "
           f"scatter_dimension_numbers = {_scatter_attrs(dn, i_aval.ndim - 1)}, "
           f"unique_indices = {str(bool(unique_indices)).lower()}")
  return ctx.op("stablehlo.scatter", [operand, indices, updates], attrs=attrs, regions=[body])


def _combiner(op: str, bool_op: str | None = None):
  def combine(ctx, scalar, a, b):
    name = bool_op if scalar.dtype == dtypes.bool_ and bool_op else op
    return ctx.elementwise(name, a, b, aval=scalar)
  return combine


_scatter_dtypes = {
    "scatter": utils.any_dtype, "scatter-add": utils.number,
    "scatter-mul": utils.number, "scatter-sub": utils.number,
    "scatter-min": utils.any_dtype, "scatter-max": utils.any_dtype,
}
# The lax function whose dtype check a scatter's message names (JAX's: its region's op).
_scatter_combiner_names = {"scatter-add": "add", "scatter-sub": "sub", "scatter-mul": "mul"}


def _scatter_primitive(name: str, combine) -> Primitive:
  p = Primitive(name)
  p.def_abstract_eval(partial(_scatter_abstract_eval, name, _scatter_dtypes[name]))
  lowering.register_lowering(p, partial(_scatter_lowering, combine))
  return p


# One line per primitive: the region. scatter-add/sub/mul reject bool (abstract eval), as JAX.
scatter_p = _scatter_primitive("scatter", lambda ctx, scalar, a, b: b)
scatter_add_p = _scatter_primitive("scatter-add", _combiner("stablehlo.add"))
scatter_sub_p = _scatter_primitive("scatter-sub", _combiner("stablehlo.subtract"))
scatter_mul_p = _scatter_primitive("scatter-mul", _combiner("stablehlo.multiply"))
# min/max: complex numbers order lexicographically, as JAX (`elementwise.emit_minmax`).
scatter_min_p = _scatter_primitive(
    "scatter-min", lambda ctx, scalar, a, b: elementwise.emit_minmax(ctx, "LT", a, b, scalar))
scatter_max_p = _scatter_primitive(
    "scatter-max", lambda ctx, scalar, a, b: elementwise.emit_minmax(ctx, "GT", a, b, scalar))
# NB: as JAX's, a scatter equation carries `update_jaxpr` (None: the updates replace) and
# `update_consts`.
scatter_p.def_default_params(update_jaxpr=None, update_consts=())


def _scatter_pp_rule(combiner: Primitive, eqn: core.JaxprEqn, context) -> list:
  """Printing only: JAX's scatter-add/sub/mul/min/max carry the combining function as
  params (`update_consts=()`, `update_jaxpr={ lambda ; a b. let c = add a b in (c,) }`);
  stagecraft's primitive is named by it, so the rule prints that jaxpr from `combiner`."""
  params = dict(eqn.params, update_consts=(),
                update_jaxpr=_scatter_update_jaxpr(combiner, eqn.invars[0].aval.dtype))
  return sorted(params.items())


@lru_cache(maxsize=None)
def _scatter_update_jaxpr(combiner: Primitive, dtype) -> core.Jaxpr:
  """The update jaxpr printed for `combiner` at `dtype`: one object per pair, as JAX caches
  its reduction jaxprs, so that a program with several scatters prints it once, shared
  (`let jaxpr = ...`; `core.pp_subjaxprs`)."""
  scalar = ShapedArray((), dtype)
  a, b, c = core.Var(scalar), core.Var(scalar), core.Var(scalar)
  return core.Jaxpr([], [a, b], [c], [core.JaxprEqn([a, b], [c], combiner, {})])


for _p, _combiner_p in ((scatter_add_p, elementwise.add_p), (scatter_sub_p, elementwise.sub_p),
                        (scatter_mul_p, elementwise.mul_p), (scatter_min_p, elementwise.min_p),
                        (scatter_max_p, elementwise.max_p)):
  core.pp_eqn_rules[_p] = partial(_scatter_pp_rule, _combiner_p)
  core.pp_subjaxprs[_p] = lambda eqn, c=_combiner_p: [
      _scatter_update_jaxpr(c, eqn.invars[0].aval.dtype)]


def _scatter_wrapper(p: Primitive, what: str, dtypes_doc: str):
  def f(operand: Any, scatter_indices: Any, updates: Any,
        dimension_numbers: ScatterDimensionNumbers, *, indices_are_sorted: bool = False,
        unique_indices: bool = False, mode: "str | GatherScatterMode | None" = None) -> Any:
    return p.bind(operand, scatter_indices, updates,
                  dimension_numbers=_canonical_dnums(ScatterDimensionNumbers,
                                                     dimension_numbers),
                  indices_are_sorted=bool(indices_are_sorted),
                  unique_indices=bool(unique_indices), mode=GatherScatterMode.from_any(mode))
  f.__name__ = f.__qualname__ = p.name.replace("-", "_")
  f.__doc__ = f"""XLA's Scatter that {what} (`stagecraft.lax.{f.__name__}`).

  Prefer `x.at[idx]` (NumPy indexing), which builds the dimension numbers.

  Args:
    operand: array `T[*s]`; T {dtypes_doc}.
    scatter_indices: integer array `I[*b, k]`; the last dimension is the index vector, of
      length `k = len(dimension_numbers.scatter_dims_to_operand_dims)`.
    updates: array `T[*u]` of rank `len(b) + len(update_window_dims)`: the scatter dims
      have the sizes of `b`, the window dims at most the operand's.
    dimension_numbers: a `ScatterDimensionNumbers`.
    indices_are_sorted, unique_indices: promises that may speed up the computation (the
      result is undefined if they are false).
    mode: out-of-bounds handling; None means FILL_OR_DROP (windows partly out of bounds are
      dropped), 'clip' clamps the indices so the windows fit, 'promise_in_bounds' leaves it
      to XLA (which drops them).

  Returns:
    `T[*s]`, weakly typed if `operand` is. Repeated indices all apply (in an unspecified
    order).

  Raises:
    ValueError: if the indices are not integers or `mode` is unknown.
    TypeError: if the dtypes differ or are not accepted, or the dimension numbers do not fit
      the shapes (JAX's messages).
  """
  return f


scatter = _scatter_wrapper(scatter_p, "overwrites the operand with the updates",
                           "any dtype")
scatter_add = _scatter_wrapper(scatter_add_p, "adds the updates to the operand",
                               "a number type (not bool, as JAX's lax.add)")
scatter_sub = _scatter_wrapper(scatter_sub_p, "subtracts the updates from the operand",
                               "a number type (not bool)")
scatter_mul = _scatter_wrapper(scatter_mul_p, "multiplies the operand by the updates",
                               "a number type (not bool, as JAX's lax.mul)")
scatter_min = _scatter_wrapper(scatter_min_p, "takes the minimum of operand and updates",
                               "any dtype (complex: lexicographic order)")
scatter_max = _scatter_wrapper(scatter_max_p, "takes the maximum of operand and updates",
                               "any dtype (complex: lexicographic order)")


# scatter_apply: a scatter whose region applies a unary function to the operand's element
# (the updates, of `update_shape`, only say where). `jaxpr`/`consts`: the function traced on
# a scalar of the operand's dtype. Repeated indices apply it repeatedly (as XLA's scatter,
# and JAX's); out-of-bounds ones follow `mode` as the other scatters.

scatter_apply_p = Primitive("scatter-apply")


def _scatter_apply_abstract_eval(operand, indices, updates, *, jaxpr, consts, **params):
  return _scatter_abstract_eval("scatter", utils.any_dtype, operand, indices, updates,
                                **params)


def _scatter_apply_lowering(ctx, operand, indices, updates, *, jaxpr, consts, **params):
  def apply(ctx, scalar, a, b):
    cs = [lowering.dense_constant(ctx.fb, c, v.aval) for c, v in zip(consts, jaxpr.constvars)]
    return lowering.jaxpr_subcomp(ctx.fb, jaxpr, cs, [a])[0]
  return _scatter_lowering(apply, ctx, operand, indices, updates, **params)


def _scatter_apply_batch_rule(args, dims, *, jaxpr, consts, **params):
  bound = partial(scatter_apply_p.bind, jaxpr=jaxpr, consts=consts)
  return _scatter_batch_rule(_BoundScatter(bound), args, dims, **params)


class _BoundScatter:
  """A scatter primitive with its function params fixed, for `_scatter_batch_rule`."""
  def __init__(self, bind):
    self.bind = bind


def _scatter_apply_jvp(primals, tangents, **params):
  raise NotImplementedError(
      "scatter_apply is not differentiable in stagecraft (JAX's differentiates it as an "
      "overwrite, which is wrong for a function other than the identity). Differentiate "
      "`x.at[idx].set(func(x[idx]))` instead.")


scatter_apply_p.def_abstract_eval(_scatter_apply_abstract_eval)
lowering.register_lowering(scatter_apply_p, _scatter_apply_lowering)
batching.primitive_batchers[scatter_apply_p] = _scatter_apply_batch_rule
ad.primitive_jvps[scatter_apply_p] = _scatter_apply_jvp


def scatter_apply(operand: Any, scatter_indices: Any, func: Any,
                  dimension_numbers: ScatterDimensionNumbers, *, update_shape: Any = (),
                  indices_are_sorted: bool = False, unique_indices: bool = False,
                  mode: "str | GatherScatterMode | None" = None) -> Any:
  """`operand` with `func` applied to its elements at the scatter indices (JAX's
  `lax.scatter_apply`; XLA's Scatter whose region is `func` of the operand's element).

  Args:
    operand: array `T[*s]`.
    scatter_indices: integer array `I[*b, k]`, as for `scatter`.
    func: a function of one scalar of dtype T returning one scalar of dtype T (traced once).
    dimension_numbers: a `ScatterDimensionNumbers`, for updates of shape `update_shape`.
    update_shape: the shape the updates of a `scatter` with these dimension numbers would
      have (they are not used: only their windows say which elements `func` applies to).
    indices_are_sorted, unique_indices, mode: as for `scatter`. An element named k times
      gets `func` applied k times.

  Returns:
    `T[*s]`.

  Raises:
    TypeError: `func` does not map a T scalar to a T scalar; the dimension numbers do not
      fit the shapes (JAX's messages).
    NotImplementedError: when differentiated (see `_scatter_apply_jvp`).
  """
  op_aval = core.get_aval(operand)
  scalar = ShapedArray((), op_aval.dtype)
  jaxpr, consts = pe.trace_to_jaxpr(lambda x: [func(x)], [scalar])
  if any(isinstance(c, core.Tracer) for c in consts):
    raise NotImplementedError("scatter_apply: func can't close over Tracers; make the value "
                              "a constant or apply it outside func.")
  out = jaxpr.out_avals
  if len(out) != 1 or out[0].shape != () or out[0].dtype != op_aval.dtype:
    raise TypeError(f"scatter_apply: func must map a {scalar.str_short()} scalar to one "
                    f"{scalar.str_short()} scalar, got "
                    f"{', '.join(a.str_short() for a in out)}.")
  unused = broadcast_in_dim(np.zeros((), op_aval.dtype), tuple(update_shape), ())
  return scatter_apply_p.bind(
      operand, scatter_indices, unused, jaxpr=jaxpr, consts=tuple(consts),
      dimension_numbers=_canonical_dnums(ScatterDimensionNumbers, dimension_numbers),
      indices_are_sorted=bool(indices_are_sorted), unique_indices=bool(unique_indices),
      mode=GatherScatterMode.from_any(mode))


# -- Autodiff rules of the scatters (JAX's). The integer indices are never differentiated:
# they get no cotangent.


def _gather_windows(x: Any, indices: Any, dn: ScatterDimensionNumbers,
                    updates_shape: Sequence[int], mode: GatherScatterMode) -> Any:
  """The gather that inverts a scatter with `dn`: the windows of `x` (operand-shaped) that
  the updates of shape `updates_shape` land on, in the updates' layout (0 for windows a
  FILL_OR_DROP scatter drops)."""
  gather_dn = GatherDimensionNumbers(
      offset_dims=dn.update_window_dims, collapsed_slice_dims=dn.inserted_window_dims,
      start_index_map=dn.scatter_dims_to_operand_dims,
      operand_batching_dims=dn.operand_batching_dims,
      start_indices_batching_dims=dn.scatter_indices_batching_dims)
  slice_sizes, pos = [], 0
  for i in range(core.get_aval(x).ndim):
    if i in dn.inserted_window_dims or i in dn.operand_batching_dims:
      slice_sizes.append(1)
    else:
      slice_sizes.append(updates_shape[dn.update_window_dims[pos]])
      pos += 1
  return gather(x, indices, gather_dn, slice_sizes, mode=mode, fill_value=0)


def _zero_tangent(x: Any) -> "ad.Zero":
  return ad.Zero(ad.tangent_aval(core.get_aval(x)))


def _zeros_like(x: Any) -> Any:
  aval = core.get_aval(x)
  return full(aval.shape, 0, aval.dtype)


def _scatter_addsub_jvp(prim, primals, tangents, **params):
  operand, indices, updates = primals
  t_operand, _, t_updates = tangents
  out = prim.bind(operand, indices, updates, **params)
  if type(t_updates) is ad.Zero:   # NB: zero updates leave the operand's tangent as it is
    return out, t_operand
  return out, prim.bind(ad.instantiate_zeros(t_operand), indices, t_updates, **params)


def _scatter_addsub_transpose(prim, ct, operand, indices, updates, *, dimension_numbers,
                              indices_are_sorted, unique_indices, mode, **_):
  """The operand gets `ct`; the updates get the windows of `ct` they were added to
  (negated for scatter-sub)."""
  t_operand = ct if ad.is_undefined_primal(operand) else None
  t_updates = None
  if ad.is_undefined_primal(updates):
    t_updates = _gather_windows(ct, indices, dimension_numbers, updates.aval.shape, mode)
    if prim is scatter_sub_p:
      t_updates = neg(t_updates)
  return [t_operand, None, t_updates]


for _p in (scatter_add_p, scatter_sub_p):
  ad.primitive_jvps[_p] = partial(_scatter_addsub_jvp, _p)
  ad.primitive_transposes[_p] = partial(_scatter_addsub_transpose, _p)
del _p


def _scatter_jvp(primals, tangents, *, dimension_numbers, indices_are_sorted, unique_indices,
                 mode, **_):
  """JAX's `_scatter_jvp`. With `unique_indices` the tangent is the scatter of the tangents.
  Otherwise which of several updates to one location wins is unspecified, so the winners
  are found by scattering a distinct positive id per update and gathering the ids back;
  the losing updates and the overwritten operand elements are masked to 0, and the primal
  and tangent outputs are scatter-adds of the masked values (so no scatter transpose is
  needed)."""
  operand, indices, updates = primals
  t_operand, _, t_updates = tangents
  dn = dimension_numbers
  params = dict(dimension_numbers=dn, indices_are_sorted=indices_are_sorted,
                unique_indices=unique_indices, mode=mode)
  t_operand, t_updates = ad.instantiate_zeros(t_operand), ad.instantiate_zeros(t_updates)
  if unique_indices:
    return (scatter_p.bind(operand, indices, updates, **params),
            scatter_p.bind(t_operand, indices, t_updates, **params))
  u_shape = core.get_aval(updates).shape
  ids_shape = tuple(1 if i in dn.update_window_dims else d for i, d in enumerate(u_shape))
  num_ids = int(np.prod(ids_shape))
  id_dtype = np.dtype(np.uint32 if num_ids < np.iinfo(np.uint32).max else np.uint64)
  ids = add(reshape(iota(id_dtype, num_ids), ids_shape), np.ones((), id_dtype))
  update_ids = broadcast_in_dim(ids, u_shape, tuple(range(len(u_shape))))
  scattered_ids = scatter_p.bind(full(core.get_aval(operand).shape, 0, id_dtype), indices,
                                 update_ids, **params)
  gathered_ids = _gather_windows(scattered_ids, indices, dn, u_shape, mode)
  operand_kept = eq(scattered_ids, np.zeros((), id_dtype))
  update_won = eq(update_ids, gathered_ids)
  masked = lambda pred, x: select(pred, x, _zeros_like(x))
  out = scatter_add_p.bind(masked(operand_kept, operand), indices,
                           masked(update_won, updates), **params)
  t_out = scatter_add_p.bind(masked(operand_kept, t_operand), indices,
                             masked(update_won, t_updates), **params)
  return out, t_out


def _scatter_transpose(ct, operand, indices, updates, *, dimension_numbers,
                       indices_are_sorted, unique_indices, mode, **_):
  """With unique indices (the only case the JVP transposes): the operand gets `ct` with the
  overwritten windows zeroed, the updates get those windows of `ct`."""
  if not unique_indices:
    raise NotImplementedError(
        "scatter transpose is only implemented where unique_indices=True. The JVP of a "
        "scatter with possibly repeated indices is built of scatter-adds, which transpose; "
        "transpose a scatter only when its indices are promised unique.")
  t_operand = t_updates = None
  u_shape = (updates.aval if ad.is_undefined_primal(updates) else core.get_aval(updates)).shape
  if ad.is_undefined_primal(operand):
    t_operand = scatter_p.bind(ct, indices, full(u_shape, 0, core.get_aval(ct).dtype),
                               dimension_numbers=dimension_numbers,
                               indices_are_sorted=indices_are_sorted, unique_indices=True,
                               mode=mode)
  if ad.is_undefined_primal(updates):
    t_updates = _gather_windows(ct, indices, dimension_numbers, u_shape, mode)
  return [t_operand, None, t_updates]


ad.primitive_jvps[scatter_p] = _scatter_jvp
ad.primitive_transposes[scatter_p] = _scatter_transpose


def _scatter_mul_jvp_updates(t, operand, indices, updates, *, dimension_numbers,
                             indices_are_sorted, unique_indices, mode, **_):
  if not unique_indices:
    raise NotImplementedError(
        "scatter_mul gradients with respect to the updates are only implemented if "
        "unique_indices=True (as in JAX): with repeated indices the product of several "
        "updates lands on one element. If the indices do not repeat, pass "
        "unique_indices=True (`x.at[idx].multiply(v, unique_indices=True)`); the gradient "
        "with respect to the operand needs no such promise.")
  return mul(operand, scatter_add_p.bind(
      _zeros_like(operand), indices, t, dimension_numbers=dimension_numbers,
      indices_are_sorted=indices_are_sorted, unique_indices=unique_indices, mode=mode))


def _scatter_mul_transpose(ct, operand, indices, updates, *, dimension_numbers,
                           indices_are_sorted, unique_indices, mode, **_):
  """Linear in the operand (for fixed updates): its cotangent is `ct` scattered-multiplied
  by the updates. The updates' (unique indices only) are the windows of `ct * operand`."""
  params = dict(dimension_numbers=dimension_numbers, indices_are_sorted=indices_are_sorted,
                unique_indices=unique_indices, mode=mode)
  t_operand = t_updates = None
  if ad.is_undefined_primal(operand):
    t_operand = scatter_mul_p.bind(ct, indices, updates, **params)
  if ad.is_undefined_primal(updates):
    if not unique_indices:
      raise NotImplementedError(
          "scatter_mul gradients with respect to the updates are only implemented if "
          "unique_indices=True (as in JAX). Pass unique_indices=True if the indices do not "
          "repeat.")
    t_updates = _gather_windows(mul(ct, operand), indices, dimension_numbers,
                                updates.aval.shape, mode)
  return [t_operand, None, t_updates]


ad.defjvp(scatter_mul_p,
          lambda t, operand, indices, updates, **params: scatter_mul_p.bind(
              t, indices, updates, **params),
          None, _scatter_mul_jvp_updates)
ad.primitive_transposes[scatter_mul_p] = _scatter_mul_transpose


def _scatter_extremal_jvp(prim, primals, tangents, *, dimension_numbers, indices_are_sorted,
                          unique_indices, mode, **_):
  """JAX's `_scatter_extremal_jvp`: where several values (the operand's and updates') tie for
  the minimum or maximum at one location, the tangent there is the average of their
  tangents, as for reduce_max."""
  operand, indices, updates = primals
  t_operand, _, t_updates = tangents
  dn = dimension_numbers
  params = dict(dimension_numbers=dn, indices_are_sorted=indices_are_sorted,
                unique_indices=unique_indices, mode=mode)
  out = prim.bind(operand, indices, updates, **params)
  t_operand, t_updates = ad.instantiate_zeros(t_operand), ad.instantiate_zeros(t_updates)
  u_shape = core.get_aval(updates).shape
  windows = lambda x: _gather_windows(x, indices, dn, u_shape, mode)
  scatter_sum = lambda u: scatter_add_p.bind(_zeros_like(operand), indices, u, **params)
  ones, zeros = full(u_shape, 1, core.get_aval(updates).dtype), _zeros_like(updates)
  target = windows(out)
  successful_updates = eq(updates, target)
  retained_values = eq(windows(operand), target)
  num_updates = windows(scatter_sum(select(successful_updates, ones, zeros)))
  num_refs = windows(scatter_sum(ones))
  updates_normalizer = select(retained_values, div(ones, add(num_updates, ones)),
                              div(ones, num_updates))
  updates_coef = select(successful_updates, updates_normalizer, zeros)
  operand_normalizer = select(retained_values, div(ones, add(num_updates, ones)), zeros)
  operand_coef = div(sub(operand_normalizer, ones), num_refs)
  t_windows = add(mul(windows(t_operand), operand_coef), mul(t_updates, updates_coef))
  return out, scatter_add_p.bind(t_operand, indices, t_windows, **params)


ad.primitive_jvps[scatter_min_p] = partial(_scatter_extremal_jvp, scatter_min_p)
ad.primitive_jvps[scatter_max_p] = partial(_scatter_extremal_jvp, scatter_max_p)


def _scatter_batch_rule(prim, args, dims, *, dimension_numbers, indices_are_sorted,
                        unique_indices, mode, **_):
  """JAX's `_scatter_batching_rule`: the operand and the updates get their batch dim first
  (broadcast when unbatched). Unbatched indices: the batch dim is a new window dim taken
  whole. Batched indices (moved first): the batch dims are paired as operand/indices
  batching dims. The result's batch dim is 0."""
  operand, indices, updates = args
  operand_bdim, indices_bdim, updates_bdim = dims
  size = next(_shape_of(x)[d] for x, d in zip(args, dims) if d is not batching.not_mapped)
  operand = batching.bdim_at_front(operand, operand_bdim, size)
  updates = batching.bdim_at_front(updates, updates_bdim, size)
  dn = dimension_numbers
  up = _shift
  params = dict(indices_are_sorted=indices_are_sorted, unique_indices=unique_indices,
                mode=mode)
  if indices_bdim is batching.not_mapped:
    dnums = ScatterDimensionNumbers(
        update_window_dims=(0,) + up(dn.update_window_dims),
        inserted_window_dims=up(dn.inserted_window_dims),
        scatter_dims_to_operand_dims=up(dn.scatter_dims_to_operand_dims),
        operand_batching_dims=up(dn.operand_batching_dims),
        scatter_indices_batching_dims=dn.scatter_indices_batching_dims)
    return prim.bind(operand, indices, updates, dimension_numbers=dnums, **params), 0
  indices = batching.moveaxis(indices, indices_bdim, 0)
  dnums = ScatterDimensionNumbers(
      update_window_dims=up(dn.update_window_dims),
      inserted_window_dims=up(dn.inserted_window_dims),
      scatter_dims_to_operand_dims=up(dn.scatter_dims_to_operand_dims),
      operand_batching_dims=(0,) + up(dn.operand_batching_dims),
      scatter_indices_batching_dims=(0,) + up(dn.scatter_indices_batching_dims))
  return prim.bind(operand, indices, updates, dimension_numbers=dnums, **params), 0


for _p in (scatter_p, scatter_add_p, scatter_sub_p, scatter_mul_p, scatter_min_p,
           scatter_max_p):
  batching.primitive_batchers[_p] = partial(_scatter_batch_rule, _p)
del _p


def index_take(src: Any, idxs: Sequence[Any], axes: Sequence[int]) -> Any:
  """Gathers `src` at the points `(idxs[0][n], idxs[1][n], ...)` of dimensions `axes`.

  Args:
    src: array `T[*s]`.
    idxs: one integer array `I[N]` per axis in `axes`.
    axes: distinct dimensions of `src`.

  Returns:
    `T[N, *s without axes]` (JAX's `lax.index_take`), out-of-range indices clamped.
  """
  axes = tuple(int(a) for a in axes)
  nd = len(_shape_of(src))
  cols = [reshape(convert_element_type(i, np.int32), (_shape_of(i)[0], 1)) for i in idxs]
  indices = concatenate(cols, 1) if len(cols) > 1 else cols[0]
  rest = [d for d in range(nd) if d not in axes]
  dnums = GatherDimensionNumbers(offset_dims=tuple(range(1, 1 + len(rest))),
                                 collapsed_slice_dims=tuple(sorted(axes)),
                                 start_index_map=axes)
  sizes = tuple(1 if d in axes else _shape_of(src)[d] for d in range(nd))
  return gather(src, indices, dnums, sizes, mode=GatherScatterMode.CLIP)
