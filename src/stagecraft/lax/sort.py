"""Sorting: the variadic `sort` (with `sort_key_val`) and `top_k`, with JAX's `lax`'s names,
params and semantics.

`sort` lowers to one `stablehlo.sort` whose comparator region is JAX's `_sort_lt_comparator`:
floating keys are canonicalized first (-0.0 becomes 0.0, every NaN becomes +NaN) and then
compared with `TOTALORDER`, which gives the order -inf < ... < -0.0 == 0.0 < ... < inf < NaN
(so NaNs go last whatever their sign, and a stable sort keeps -0.0 and 0.0 in input order);
complex keys compare by (real, imag) lexicographically; several keys compare
lexicographically, the first primary. `top_k` lowers to `chlo.top_k` (XLA's TopK).

`eq_to`, `lt_to` and `le_to` (JAX's `lax.eq_to_p`, ...) compare elementwise in that
total order (`TOTALORDER` for floats; callers canonicalize -0.0 and NaN first, as the sort
comparator does): `jnp.searchsorted` binds them, as JAX's does.

`argsort` composes from `sort` (the numpy layer's job): sort the pair
`(x, broadcasted_iota(int32, x.shape, d))` along `d` with `num_keys=1` and take the second
output; with `is_stable=True` equal keys keep their input order, as
`numpy.argsort(kind='stable')` does.

Autodiff (JAX's rules): tangents follow the permutation, gathered along the sorted axis
(sort finds it by sorting an iota along; top_k returns it); keys that tie keep the stable
sort's order, so their tangents do too.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from stagecraft import core, dtypes, shape_poly
from stagecraft.core import Primitive, ShapedArray
from stagecraft.interpreters import ad, batching, lowering, mlir
from stagecraft.interpreters.lowering import i64_array, ir_type
from stagecraft.lax import utils
from stagecraft.lax.elementwise import (broadcast_operands, defbroadcasting, naryop_abstract_eval,
                                        neg)
from stagecraft.lax.shape import broadcast_in_dim, broadcasted_iota, expand_dims, transpose
from stagecraft.lax.slicing import GatherDimensionNumbers, gather

__all__ = ["sort_p", "top_k_p", "approx_top_k_p", "eq_to_p", "lt_to_p", "le_to_p", "sort",
           "sort_key_val", "top_k", "approx_max_k", "approx_min_k"]


def _canonicalize_axis(axis: int, ndim: int) -> int:
  """`axis` made non-negative (JAX's `canonicalize_axis`, with its message)."""
  axis = int(axis)
  if not -ndim <= axis < ndim:
    raise ValueError(f"axis {axis} is out of bounds for array of dimension {ndim}")
  return axis % ndim


# ---------------------------------------------------------------------------
# sort: operands of one shape, all permuted by the order of the first `num_keys`.


def _sort_abstract_eval(*avals, dimension, is_stable, num_keys):
  """The operands' avals unchanged (weak types kept, as JAX)."""
  if not avals:
    raise TypeError("Sort requires at least one operand")
  if any(a.shape != avals[0].shape for a in avals[1:]):
    shapes = " ".join(str(a.shape) for a in avals)
    raise TypeError(f"Arguments to sort must have equal shapes, got: {shapes}")
  if not 0 <= dimension < avals[0].ndim:
    raise ValueError(f"sort dimension {dimension} is out of bounds for operands of shape "
                     f"{avals[0].shape}; it must be in [0, {avals[0].ndim}) (the `sort` "
                     f"wrapper normalizes negative dimensions).")
  if not 1 <= num_keys <= len(avals):
    raise ValueError(f"num_keys={num_keys} must be between 1 and len(operand)={len(avals)}")
  return list(avals)


def _cmp(ctx, direction: str, x: str, y: str, aval: ShapedArray, kind: str) -> str:
  r = ctx.fb.fresh()
  t = ir_type(aval)
  ctx.fb.emit(f"{r} = stablehlo.compare {direction}, {x}, {y}, {kind} : ({t}, {t}) -> "
              f"tensor<i1>")
  return r


def _select(ctx, pred: str, x: str, y: str, aval: ShapedArray) -> str:
  r = ctx.fb.fresh()
  ctx.fb.emit(f"{r} = stablehlo.select {pred}, {x}, {y} : tensor<i1>, {ir_type(aval)}")
  return r


def _canonicalize_float(ctx, x: str, aval: ShapedArray) -> str:
  """-0.0 -> 0.0 and any NaN -> +NaN (JAX's `_canonicalize_float_for_sort`), so that the
  TOTALORDER comparison treats zeros as equal and puts every NaN last."""
  zero = ctx.constant(0, aval)
  x = _select(ctx, _cmp(ctx, "EQ", x, zero, aval, "FLOAT"), zero, x, aval)
  isnan = _cmp(ctx, "NE", x, x, aval, "FLOAT")
  return _select(ctx, isnan, ctx.constant(np.nan, aval), x, aval)


def _sort_keys(ctx, x: str, y: str, aval: ShapedArray):
  """(x keys, y keys, their avals, compare type) of one key operand."""
  dt = aval.dtype
  if dtypes.is_complex(dt):
    part = ShapedArray((), np.dtype(np.float32 if dt == dtypes.complex64 else np.float64))
    keys = []
    for v in (x, y):
      re = ctx.op("stablehlo.real", [v], [part], operand_avals=[aval])[0]
      im = ctx.op("stablehlo.imag", [v], [part], operand_avals=[aval])[0]
      keys.append([_canonicalize_float(ctx, re, part), _canonicalize_float(ctx, im, part)])
    return keys[0], keys[1], [part, part], "TOTALORDER"
  if dtypes.is_float(dt):
    return ([_canonicalize_float(ctx, x, aval)], [_canonicalize_float(ctx, y, aval)], [aval],
            "TOTALORDER")
  kind = "UNSIGNED" if dt == dtypes.bool_ or dtypes.is_unsigned(dt) else "SIGNED"
  return [x], [y], [aval], kind


def _sort_comparator(ctx, num_keys: int, scalars, *args) -> list[str]:
  """x < y lexicographically over the first `num_keys` operands (JAX's _sort_lt_comparator).
  `args` is (x0, y0, x1, y1, ...)."""
  xs, ys, avals, kinds = [], [], [], []
  for i in range(num_keys):
    kx, ky, ka, kind = _sort_keys(ctx, args[2 * i], args[2 * i + 1], scalars[i])
    xs += kx
    ys += ky
    avals += ka
    kinds += [kind] * len(ka)
  pred = ShapedArray((), dtypes.bool_)
  p = None
  for x, y, a, kind in reversed(list(zip(xs, ys, avals, kinds))):
    lt = _cmp(ctx, "LT", x, y, a, kind)
    if p is None:
      p = lt
    else:
      eq = _cmp(ctx, "EQ", x, y, a, kind)
      p = ctx.elementwise("stablehlo.or", lt,
                          ctx.elementwise("stablehlo.and", eq, p, aval=pred), aval=pred)
  return [p]


def _sort_lowering(ctx, *operands, dimension, is_stable, num_keys):
  scalars = [ShapedArray((), a.dtype) for a in ctx.avals_in]
  region_avals = [s for s in scalars for _ in range(2)]
  comparator = ctx.region(region_avals, [ShapedArray((), dtypes.bool_)],
                          lambda *args: _sort_comparator(ctx, num_keys, scalars, *args))
  attrs = f"dimension = {int(dimension)} : i64, is_stable = {'true' if is_stable else 'false'}"
  return ctx.op("stablehlo.sort", list(operands), attrs=attrs, regions=[comparator])


sort_p = Primitive("sort")
sort_p.multiple_results = True
sort_p.def_abstract_eval(_sort_abstract_eval)
lowering.register_lowering(sort_p, _sort_lowering)


def _take_along(t: Any, idx: Any, axis: int) -> Any:
  """`t[..., idx, ...]` elementwise along `axis` (`take_along_axis`): one gather whose other
  dimensions are batching dimensions. `idx` has the shape of the result."""
  ndim = core.get_aval(t).ndim
  batch = tuple(d for d in range(ndim) if d != axis)
  dnums = GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(axis,),
                                 start_index_map=(axis,), operand_batching_dims=batch,
                                 start_indices_batching_dims=batch)
  return gather(t, expand_dims(idx, (ndim,)), dnums, (1,) * ndim,
                mode="promise_in_bounds")


def _sort_jvp(primals, tangents, *, dimension, is_stable, num_keys):
  """JAX's `_sort_jvp`: sort an iota along with the operands to get the permutation, and
  gather every nonzero tangent through it."""
  shape = core.get_aval(primals[0]).shape
  index_dtype = (np.int32 if shape_poly.is_symbolic_dim(shape[dimension])   # NB: as JAX
                 or shape[dimension] < np.iinfo(np.int32).max else np.int64)
  iota = broadcasted_iota(index_dtype, shape, dimension)
  *outs, perm = sort_p.bind(*primals, iota, dimension=dimension, is_stable=is_stable,
                            num_keys=num_keys)
  return outs, [t if type(t) is ad.Zero else _take_along(t, perm, dimension)
                for t in tangents]


ad.primitive_jvps[sort_p] = _sort_jvp


def _sort_batch_rule(args, dims, *, dimension, is_stable, num_keys):
  """JAX's `_sort_batch_rule`: every operand batched at the first batched operand's dim
  (unbatched ones broadcast); the sorted dimension skips it."""
  size, bdim = next((core.get_aval(x).shape[d], d) for x, d in zip(args, dims)
                    if d is not batching.not_mapped)
  def at_bdim(x, d):   # NB: as JAX's: Python-int dims in the printed params
    if d is batching.not_mapped:
      shp = list(core.get_aval(x).shape)
      shp.insert(bdim, size)
      return broadcast_in_dim(x, tuple(shp), tuple(i for i in range(len(shp)) if i != bdim))
    if d == bdim:
      return x
    perm = [i for i in range(core.get_aval(x).ndim) if i != d]
    perm.insert(bdim, d)
    return transpose(x, tuple(perm))
  operands = [at_bdim(x, d) for x, d in zip(args, dims)]
  new_dimension = dimension + (bdim <= dimension)
  outs = sort_p.bind(*operands, dimension=new_dimension, is_stable=is_stable,
                     num_keys=num_keys)
  return outs, [bdim] * len(operands)


batching.primitive_batchers[sort_p] = _sort_batch_rule


def sort(operand: Any, dimension: int = -1, is_stable: bool = True, num_keys: int = 1) -> Any:
  """Sorts `operand` along `dimension` (JAX's `lax.sort`, XLA's Sort).

  Floating keys sort as -inf < ... < -0.0 == 0.0 < ... < inf < NaN: -0.0 and 0.0 are equal
  (a stable sort keeps them in input order) and every NaN, whatever its sign or payload,
  goes last. Complex keys sort by (real, imag) lexicographically; bool keys False < True.

  Args:
    operand: an array `T[*s]`, or a sequence of arrays `T_i[*s]` of one shape (dtypes may
      differ): all are permuted by the order of the first `num_keys` (compared
      lexicographically, the first key primary).
    dimension: the axis to sort along; negative counts from the end.
    is_stable: keep the input order of equal keys.
    num_keys: how many leading operands are keys; 1 for a single array.

  Returns:
    The sorted array (single operand) or a tuple of sorted arrays; avals unchanged.

  Raises:
    TypeError: if the sequence is empty or the shapes differ.
    ValueError: if `dimension` is out of bounds, or `num_keys` is not in
      `[1, len(operand)]` (not 1 for a single array).

  `argsort(x)` along `d` is `sort((x, broadcasted_iota(int32, x.shape, d)), d, num_keys=1)[1]`.

  Examples:
    >>> import numpy as np
    >>> np.asarray(sort(np.array([3., np.nan, -0., 0., -np.inf, 1.], np.float32)))
    array([-inf,  -0.,   0.,   1.,   3.,  nan], dtype=float32)
    >>> k, v = sort((np.array([2, 1, 2, 1], np.int32), np.array([0, 1, 2, 3], np.int32)))
    >>> np.asarray(v)
    array([1, 3, 0, 2], dtype=int32)
  """
  if isinstance(operand, Sequence):
    if len(operand) == 0:
      raise TypeError("Sort requires at least one operand")
    if not 1 <= num_keys <= len(operand):
      raise ValueError(f"num_keys={num_keys} must be between 1 and "
                       f"len(operand)={len(operand)}")
    dimension = _canonicalize_axis(dimension, len(np.shape(operand[0])))
    return tuple(sort_p.bind(*operand, dimension=dimension, is_stable=bool(is_stable),
                             num_keys=int(num_keys)))
  if num_keys != 1:
    raise ValueError(f"num_keys={num_keys} must equal 1 for a single operand.")
  dimension = _canonicalize_axis(dimension, len(np.shape(operand)))
  return sort_p.bind(operand, dimension=dimension, is_stable=bool(is_stable), num_keys=1)[0]


def sort_key_val(keys: Any, values: Any, dimension: int = -1,
                 is_stable: bool = True) -> tuple[Any, Any]:
  """Sorts `keys` along `dimension` and applies the same permutation to `values`
  (JAX's `lax.sort_key_val`).

  Args:
    keys: array `K[*s]`, ordered as in `sort`.
    values: array `V[*s]`.
    dimension: the axis to sort along; negative counts from the end.
    is_stable: keep the input order of equal keys.

  Returns:
    `(sorted keys K[*s], permuted values V[*s])`.

  Raises:
    TypeError: if the shapes differ.
    ValueError: if `dimension` is out of bounds.
  """
  dimension = _canonicalize_axis(dimension, len(np.shape(keys)))
  k, v = sort_p.bind(keys, values, dimension=dimension, is_stable=bool(is_stable), num_keys=1)
  return k, v


# ---------------------------------------------------------------------------
# eq_to, lt_to, le_to: elementwise comparisons in the total order (bool results).


def _total_order_compare_type(dtype) -> str:
  if dtypes.is_float(dtype):
    return "TOTALORDER"
  return "UNSIGNED" if dtype == dtypes.bool_ or dtypes.is_unsigned(dtype) else "SIGNED"


def _total_order_cmp(name: str, direction: str) -> Primitive:
  """A comparison primitive `name` (JAX's `eq_to_p`, ...): operands that broadcast as lax's
  elementwise ops do, of one bool, integer or floating dtype; a bool result; lowered to
  `stablehlo.compare` with `TOTALORDER` for floats (-0.0 < 0.0 and NaNs at the ends by
  sign, so callers canonicalize them first), SIGNED/UNSIGNED otherwise; no tangents."""
  p = Primitive(name)
  p.def_abstract_eval(naryop_abstract_eval(
      name, (utils.bool_kind, utils.int_kind, utils.float_kind), lambda _: dtypes.bool_))

  def _lowering(ctx, x, y):
    x, y = broadcast_operands(ctx, [x, y])
    aval = ctx.avals_in[0].update(shape=ctx.avals_out[0].shape)
    r = ctx.fb.fresh()
    t = ir_type(aval)
    ctx.fb.emit(f"{r} = stablehlo.compare {direction}, {x}, {y}, "
                f"{_total_order_compare_type(aval.dtype)} : ({t}, {t}) -> "
                f"{ir_type(ctx.avals_out[0])}")
    return [r]

  lowering.register_lowering(p, _lowering)
  ad.defjvp_zero(p)   # bool results: float0 tangents
  defbroadcasting(p)
  return p


eq_to_p = _total_order_cmp("eq_to", "EQ")
lt_to_p = _total_order_cmp("lt_to", "LT")
le_to_p = _total_order_cmp("le_to", "LE")


# ---------------------------------------------------------------------------
# top_k: the k largest entries along `axis` and their int32 indices.


def _top_k_abstract_eval(operand: ShapedArray, *, k, axis):
  """(`T[s with s[axis] = k]`, `i32[same]`); the values keep the weak type, the indices are
  never weak (JAX 0.10 marks them weak too, a quirk not copied)."""
  if dtypes.is_complex(operand.dtype):
    raise ValueError("top_k is not compatible with complex inputs.")
  if k < 0:
    raise ValueError(f"k argument to top_k must be nonnegative, got {k}")
  if operand.ndim == 0:
    raise TypeError(f"top_k operand must have >= 1 dimension, got {operand.shape}")
  if not 0 <= axis < operand.ndim:
    raise ValueError(f"axis argument out of range: axis={axis} for "
                     f"operand.shape={operand.shape}")
  shape = list(operand.shape)
  if shape[axis] < k:
    raise ValueError(f"k argument to top_k must be no larger than size along axis; got k={k} "
                     f"with shape={shape} and axis={axis}")
  if shape[axis] > np.iinfo(np.int32).max + 1:
    raise ValueError(f"top_k returns int32 indices, which will overflow for array dimensions "
                     f"larger than the maximum int32. Got operand.shape={operand.shape}")
  shape[axis] = k
  shape = tuple(shape)
  return [operand.update(shape=shape), ShapedArray(shape, dtypes.int32)]


def _top_k_lowering(ctx, x, *, k, axis):
  aval, = ctx.avals_in
  ndim = aval.ndim
  perm = list(range(ndim))
  perm[axis], perm[-1] = perm[-1], perm[axis]   # a swap: its own inverse
  values, indices = ctx.avals_out
  if axis != ndim - 1:
    t_shape = tuple(aval.shape[i] for i in perm)
    t = aval.update(shape=t_shape)
    x = ctx.op("stablehlo.transpose", [x], [t], attrs=f"permutation = {i64_array(perm)}",
               operand_avals=[aval])[0]
    aval = t
    k_shape = tuple(values.shape[i] for i in perm)
    t_values, t_indices = values.update(shape=k_shape), indices.update(shape=k_shape)
  else:
    t_values, t_indices = values, indices
  outs = ctx.op("chlo.top_k", [x], [t_values, t_indices], attrs=f"k = {int(k)} : i64",
                operand_avals=[aval])
  if axis == ndim - 1:
    return outs
  return [ctx.op("stablehlo.transpose", [o], [a], attrs=f"permutation = {i64_array(perm)}",
                 operand_avals=[ta])[0]
          for o, a, ta in zip(outs, ctx.avals_out, (t_values, t_indices))]


top_k_p = Primitive("top_k")
top_k_p.multiple_results = True
top_k_p.def_abstract_eval(_top_k_abstract_eval)
lowering.register_lowering(top_k_p, _top_k_lowering)


def _top_k_jvp(primals, tangents, *, k, axis):
  """JAX's rule: the operand's tangent gathered at the returned indices; the indices have
  none."""
  values, indices = top_k_p.bind(*primals, k=k, axis=axis)
  return [values, indices], [_take_along(tangents[0], indices, axis),
                             ad.Zero(ad.tangent_aval(core.get_aval(indices)))]


ad.primitive_jvps[top_k_p] = _top_k_jvp


def _top_k_batch_rule(args, dims, *, k, axis):
  """The batch dim stays where it is (top_k here takes an `axis`, so it may even be last);
  the axis skips it."""
  operand, = args
  bdim, = dims
  outs = top_k_p.bind(operand, k=k, axis=axis + (bdim <= axis))
  return outs, [bdim, bdim]


batching.primitive_batchers[top_k_p] = _top_k_batch_rule


def top_k(operand: Any, k: int, *, axis: int = -1) -> tuple[Any, Any]:
  """The `k` largest entries of `operand` along `axis` and their indices (JAX's `lax.top_k`).

  Values come in descending order; among equal values the lower index comes first. NaN ranks
  above +inf, and 0.0 above -0.0 (XLA's TopK order, as in JAX).

  Args:
    operand: array `T[*s]` of rank >= 1, T bool, integer or floating.
    k: int in `[0, s[axis]]`.
    axis: the axis to search; negative counts from the end.

  Returns:
    `(values T[*s with s[axis] = k], indices i32[same shape])`.

  Raises:
    ValueError: if `k` is negative or larger than `s[axis]`, `axis` is out of bounds, or T is
      complex.
    TypeError: if `operand` is a scalar.

  Examples:
    >>> import numpy as np
    >>> values, indices = top_k(np.array([9., 3., 9., 4., 10.], np.float32), 3)
    >>> np.asarray(values), np.asarray(indices)
    (array([10.,  9.,  9.], dtype=float32), array([4, 0, 2], dtype=int32))
  """
  k = int(k)
  if k < 0:
    raise ValueError(f"k argument to top_k must be nonnegative, got {k}")
  axis = _canonicalize_axis(axis, len(np.shape(operand)))
  return tuple(top_k_p.bind(operand, k=k, axis=axis))


# ---------------------------------------------------------------------------
# approx_top_k: JAX's primitive for approx_max_k / approx_min_k. On CPU XLA's approximate
# top-k falls back to an exact one, so its lowering is top_k's (of the negated operand for
# the smallest k).


def _approx_dim(aval, reduction_dimension: int) -> int:
  return reduction_dimension % len(aval.shape)


def _approx_top_k_abstract_eval(operand, *, k, reduction_dimension, recall_target, is_max_k,
                                reduction_input_size_override, aggregate_to_topk):
  return _top_k_abstract_eval(operand, k=k, axis=_approx_dim(operand, reduction_dimension))


def _approx_top_k_impl(operand, *, k, reduction_dimension, is_max_k, **_):
  axis = _approx_dim(core.get_aval(operand), reduction_dimension)
  if is_max_k:
    return top_k_p.bind(operand, k=k, axis=axis)
  values, indices = top_k_p.bind(neg(operand), k=k, axis=axis)
  return [neg(values), indices]


def _approx_top_k_jvp(primals, tangents, **params):
  values, indices = approx_top_k_p.bind(*primals, **params)
  axis = _approx_dim(core.get_aval(primals[0]), params["reduction_dimension"])
  return [values, indices], [_take_along(tangents[0], indices, axis),
                             ad.Zero(ad.tangent_aval(core.get_aval(indices)))]


def _approx_top_k_batch_rule(args, dims, *, reduction_dimension, **params):
  """The batch dim stays where it is; the reduction dimension, made non-negative, moves by one
  when the batch dim is at or before it (as JAX's)."""
  operand, = args
  bdim, = dims
  rd = reduction_dimension % (len(core.get_aval(operand).shape) - 1)
  rd += bdim <= rd
  outs = approx_top_k_p.bind(operand, reduction_dimension=rd, **params)
  return outs, [bdim, bdim]


approx_top_k_p = Primitive("approx_top_k")
approx_top_k_p.multiple_results = True
approx_top_k_p.def_abstract_eval(_approx_top_k_abstract_eval)
lowering.register_lowering(approx_top_k_p,
                           mlir.lower_fun(_approx_top_k_impl, multiple_results=True))
ad.primitive_jvps[approx_top_k_p] = _approx_top_k_jvp
batching.primitive_batchers[approx_top_k_p] = _approx_top_k_batch_rule


def _approx_top_k(operand, k, reduction_dimension, recall_target,
                  reduction_input_size_override, aggregate_to_topk, is_max_k):
  aval = core.get_aval(operand)
  if not aggregate_to_topk:
    raise NotImplementedError(f"approx_{'max' if is_max_k else 'min'}_k(aggregate_to_topk="
                              f"False) is not supported.")
  if not dtypes.issubdtype(aval.dtype, np.floating):
    raise ValueError("operand must be a floating type")
  if not -len(aval.shape) <= reduction_dimension < len(aval.shape):
    raise IndexError(f"reduction_dimension {reduction_dimension} is out of range for an "
                     f"operand of rank {len(aval.shape)}")
  size = aval.shape[reduction_dimension]
  if k > size:
    raise ValueError(f"k must be smaller than the size of reduction_dim {size}, got {k}")
  if not 0 < recall_target <= 1:
    raise ValueError(f"recall_target must be in (0, 1], got {recall_target}")
  return tuple(approx_top_k_p.bind(
      operand, k=int(k), reduction_dimension=int(reduction_dimension),
      recall_target=float(recall_target), is_max_k=is_max_k,
      reduction_input_size_override=int(reduction_input_size_override),
      aggregate_to_topk=bool(aggregate_to_topk)))


def approx_max_k(operand: Any, k: int, reduction_dimension: int = -1,
                 recall_target: float = 0.95, reduction_input_size_override: int = -1,
                 aggregate_to_topk: bool = True) -> tuple[Any, Any]:
  """The `k` largest values of a floating `operand` along `reduction_dimension` and their
  int32 indices: one `approx_top_k` equation, as JAX's.

  On CPU the result is exact (recall 1), as XLA's approximate top-k is there (it falls back
  to an exact sort); `recall_target` and `reduction_input_size_override` are recorded.

  Raises:
    ValueError: a non-floating operand ("operand must be a floating type"); `k` larger than
      the reduced dimension; `recall_target` outside (0, 1].
    IndexError: `reduction_dimension` out of range.
    NotImplementedError: `aggregate_to_topk=False`.
  """
  return _approx_top_k(operand, k, reduction_dimension, recall_target,
                       reduction_input_size_override, aggregate_to_topk, True)


def approx_min_k(operand: Any, k: int, reduction_dimension: int = -1,
                 recall_target: float = 0.95, reduction_input_size_override: int = -1,
                 aggregate_to_topk: bool = True) -> tuple[Any, Any]:
  """The `k` smallest values of a floating `operand` along `reduction_dimension` and their
  int32 indices (exact on CPU; see `approx_max_k`, which raises the same errors)."""
  return _approx_top_k(operand, k, reduction_dimension, recall_target,
                       reduction_input_size_override, aggregate_to_topk, False)
