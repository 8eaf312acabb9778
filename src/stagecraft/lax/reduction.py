"""Reductions over axes: `reduce_sum`, `reduce_max`, `reduce_min`, `reduce_prod`,
`reduce_and`, `reduce_or`, `reduce_xor`, the index reductions `argmax`, `argmin`, and the
general (variadic) `reduce` with a user computation.

Every reduction lowers to one `stablehlo.reduce` whose region applies the binary op, started
from the op's identity (so reducing a zero-size axis gives the identity, as in JAX and NumPy).
`argmax`/`argmin` lower to a variadic reduce over (values, iota indices) with JAX's
NaN-aware comparator: a NaN wins, and among equal values the lowest index wins.
Params and messages follow JAX's `lax` (JAX 0.10).

Autodiff (JAX's rules): reduce_sum is linear; reduce_max/min send the tangent to the
extremum (averaged over ties); reduce_prod and the general reduce differentiate a balanced
tree of the binary op (exact with zeros); the logical and index reductions have zero
derivative.
"""
from __future__ import annotations

from functools import lru_cache, partial
from typing import Any, Callable, Sequence

import numpy as np

from stagecraft import core, dtypes, tree_util
from stagecraft.config import config
from stagecraft.core import Primitive, ShapedArray
from stagecraft.tree_util import treedef_str
from stagecraft.interpreters import ad, batching, lowering, partial_eval as pe
from stagecraft.interpreters.lowering import i64_array
from stagecraft.lax import elementwise, utils
from stagecraft.lax.elementwise import emit_compare
from stagecraft.runtime import dispatch
from stagecraft.lax.shape import broadcast_in_dim, broadcast_in_dim_p, full, laid_out, pad, reshape, slice_in_dim, squeeze

__all__ = ["reduce_sum_p", "reduce_max_p", "reduce_min_p", "reduce_prod_p", "reduce_and_p",
           "reduce_or_p", "reduce_xor_p", "argmax_p", "argmin_p", "reduce_p", "reduce_sum",
           "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or", "reduce_xor",
           "argmax", "argmin", "reduce"]

# ---------------------------------------------------------------------------
# Identities (JAX's _get_*_identity): the value `init` with op(init, x) == x. The windowed
# and cumulative reductions start from them too.


def sum_identity(dtype):
  return np.array(0, dtype)


def prod_identity(dtype):
  return np.array(1, dtype)


def max_identity(dtype):
  if dtypes.is_inexact(dtype):
    return np.array(-np.inf, dtype)
  if dtypes.is_integer(dtype):
    return np.array(dtypes.iinfo(dtype).min, dtype)
  return np.array(False)


def min_identity(dtype):
  if dtypes.is_inexact(dtype):
    return np.array(np.inf, dtype)
  if dtypes.is_integer(dtype):
    return np.array(dtypes.iinfo(dtype).max, dtype)
  return np.array(True)


def and_identity(dtype):  # all bits set
  if dtype == dtypes.bool_:
    return np.array(True)
  return np.array(dtypes.iinfo(dtype).max if dtypes.is_unsigned(dtype) else -1, dtype)


def or_identity(dtype):
  return np.array(0, dtype)


# ---------------------------------------------------------------------------
# Shared rules


def _emit_minmax(direction, ctx, a, b, scalar):
  return elementwise.emit_minmax(ctx, direction, a, b, scalar)


def _check_reduction_axes(name: str, x: ShapedArray, axes) -> None:
  if len(set(axes)) != len(axes):
    raise ValueError(f"duplicate value in 'axes' of reduction: {axes}")
  if not all(0 <= a < x.ndim for a in axes):
    raise ValueError(f"reduction axes {axes} contains out-of-bounds indices for "
                     f"{x.str_short(short_dtypes=False)}. {name} takes non-negative axes less than the rank "
                     f"{x.ndim}; normalize negative axes with `axis % ndim`.")


_number = ("number", lambda d: dtypes.is_integer(d) or dtypes.is_inexact(d))
_not_complex = (utils.bool_kind, utils.int_kind, utils.float_kind)


def _check_number(name, x):  # sum, prod: JAX's "subtypes of number" message
  utils.check_dtype(name, x, (_number,))


def _check_ordered(name, x):  # argmax, argmin: complex numbers are rejected, as in JAX
  utils.check_dtype(name, x, _not_complex)


def _check_any(name, x):  # max, min: every dtype; complex numbers order lexicographically
  utils.check_dtype(name, x, utils.any_dtype)


def _check_logical(name, x):  # and, or: logical for bool, bitwise for integers
  if x.dtype != dtypes.bool_ and not dtypes.is_integer(x.dtype):
    raise TypeError(f"logical reduction requires operand dtype bool or int, got "
                    f"{x.dtype.name}. Compare with zero first (`ne(x, 0)`) to reduce a "
                    f"{x.dtype.name} array.")


def _reduce_abstract_eval(name, check_dtype, keep_weak, x, *, axes, out_sharding=None):
  """Output: `x` without `axes`; weak type kept (sum/max/min/prod) or dropped (and/or), as
  JAX does."""
  check_dtype(name, x)
  _check_reduction_axes(name, x, axes)
  if (name == "reduce_sum" and not config.allow_f16_reductions
      and x.dtype in (np.float16, dtypes.bfloat16) and any(x.shape[a] != 1 for a in axes)):
    raise ValueError(f"reduce_sum on operand {x.str_short(True)} is not allowed when "
                     f"jax_allow_f16_reductions=False.")
  shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
  return ShapedArray(shape, x.dtype, x.weak_type and keep_weak)


def _reduce_lowering(op, identity, ctx, x, *, axes, out_sharding=None):
  """`op`: a StableHLO op name, or `combine(ctx, a, b, scalar_aval) -> name` for the region."""
  aval_out = ctx.avals_out[0]
  scalar = ShapedArray((), aval_out.dtype)
  init = ctx.constant(identity(scalar.dtype), scalar)
  if callable(op):
    combine = lambda a, b: [op(ctx, a, b, scalar)]  # noqa: E731
  else:
    combine = lambda a, b: [ctx.elementwise(op, a, b, aval=scalar)]  # noqa: E731
  body = ctx.region([scalar, scalar], [scalar], combine)
  return ctx.op("stablehlo.reduce", [x, init], attrs=f"dimensions = {i64_array(axes)}",
                regions=[body], operand_avals=[ctx.avals_in[0], scalar])


def _reduction(name, op, identity, check_dtype, keep_weak=True) -> Primitive:
  p = Primitive(name)
  p.def_abstract_eval(partial(_reduce_abstract_eval, name, check_dtype, keep_weak))
  lowering.register_lowering(p, partial(_reduce_lowering, op, identity))
  return p


# One line per primitive: its abstract eval (accepted dtypes, weak type) and lowering
# (region op and identity). max/min of floats propagate NaN, as numpy.max does; complex
# numbers compare lexicographically (`elementwise.emit_minmax`), as JAX's do.
reduce_sum_p = _reduction("reduce_sum", "stablehlo.add", sum_identity, _check_number)
reduce_prod_p = _reduction("reduce_prod", "stablehlo.multiply", prod_identity, _check_number)
reduce_max_p = _reduction("reduce_max", partial(_emit_minmax, "GT"), max_identity, _check_any)
reduce_min_p = _reduction("reduce_min", partial(_emit_minmax, "LT"), min_identity, _check_any)
reduce_and_p = _reduction("reduce_and", "stablehlo.and", and_identity, _check_logical,
                          keep_weak=False)
reduce_or_p = _reduction("reduce_or", "stablehlo.or", or_identity, _check_logical,
                         keep_weak=False)
reduce_xor_p = _reduction("reduce_xor", "stablehlo.xor", or_identity, _check_logical,
                          keep_weak=False)
# NB: as JAX's, every reduce_sum equation carries `out_sharding` (None: the result's type is
# the sharding rule's; `reduce_sum(out_sharding=)` lays the result out instead).
reduce_sum_p.def_default_params(out_sharding=None)
# NB: its abstract eval reads jax_allow_f16_reductions: the eager cache keys on it
dispatch.lowering_reads_config[reduce_sum_p] = lambda: config.allow_f16_reductions


def _normalize_axes(axes: Sequence[int]) -> tuple[int, ...]:
  # NB: in the order given (as JAX's params); negative and duplicate axes are kept so the
  # abstract eval reports them.
  if isinstance(axes, (int, np.integer)):
    axes = (axes,)
  return tuple(int(a) for a in axes)


def _reduce_wrapper(p: Primitive, what: str, dtypes_doc: str, identity_doc: str):
  def f(operand: Any, axes: Sequence[int]):
    return p.bind(operand, axes=_normalize_axes(axes))
  f.__name__ = f.__qualname__ = p.name
  weak = ("kept" if p not in (reduce_and_p, reduce_or_p, reduce_xor_p) else "dropped")
  f.__doc__ = f"""Computes the {what} of `operand` over `axes` (`stagecraft.lax.{p.name}`).

  Args:
    operand: array `T[*s]`; T {dtypes_doc}.
    axes: sequence of distinct axis indices in `[0, ndim)`; order does not matter (they are
      sorted into the `axes` param).

  Returns:
    Array `T[s without axes]`, weak type {weak}. Reducing a zero-size axis gives
    {identity_doc}.

  Raises:
    TypeError: if T is not accepted.
    ValueError: if an axis is negative, out of bounds, or repeated.
  """
  return f


_reduce_sum = _reduce_wrapper(reduce_sum_p, "sum", "a number type (not bool)", "0")


def reduce_sum(operand: Any, axes: Sequence[int], *, out_sharding: Any = None):
  if out_sharding is None:
    return _reduce_sum(operand, axes)
  return laid_out(_reduce_sum(operand, axes), out_sharding)


reduce_sum.__doc__ = _reduce_sum.__doc__.replace(
    "sorted into the `axes` param).", "sorted into the `axes` param).\n    out_sharding: None, "
    "or the result's sharding (a NamedSharding, or a PartitionSpec under `set_mesh`).")
reduce_prod = _reduce_wrapper(reduce_prod_p, "product", "a number type (not bool)", "1")
reduce_max = _reduce_wrapper(
    reduce_max_p, "maximum (NaN-propagating; complex: lexicographic)", "any",
    "-inf (the minimum integer for integers, False for bool)")
reduce_min = _reduce_wrapper(
    reduce_min_p, "minimum (NaN-propagating; complex: lexicographic)", "any",
    "+inf (the maximum integer for integers, True for bool)")
reduce_and = _reduce_wrapper(reduce_and_p, "logical (bool) or bitwise (integer) AND",
                             "bool or integer", "True (all bits set for integers)")
reduce_or = _reduce_wrapper(reduce_or_p, "logical (bool) or bitwise (integer) OR",
                            "bool or integer", "False (0 for integers)")
reduce_xor = _reduce_wrapper(reduce_xor_p, "logical (bool) or bitwise (integer) XOR",
                             "bool or integer", "False (0 for integers)")


# -- Autodiff rules (JAX's)


def _kept_dims(ndim: int, axes) -> tuple[int, ...]:
  return tuple(i for i in range(ndim) if i not in axes)


def _reduce_sum_transpose(ct, operand, *, axes, out_sharding=None):
  # As JAX's: the kept dims are NumPy ints (printed `np.int64(0)`), so the primitive is bound
  # directly (the wrapper makes them Python ints).
  shape = tuple(operand.aval.shape)
  dims = tuple(np.delete(np.arange(len(shape)), list(axes)))
  if core.get_aval(ct).shape == shape and dims == tuple(range(len(shape))):
    return [ct]
  ts = getattr(operand.aval, "_sharding", None)
  # As JAX's: a traced broadcast has the operand's type (`out_sharding`). NB: an eager
  # cotangent is on no mesh yet: `typed_transpose` reshards the broadcast onto it.
  if ts is not None and isinstance(ct, core.Tracer):
    return [broadcast_in_dim_p.bind(ct, shape=shape, broadcast_dimensions=dims, sharding=ts)]
  return [broadcast_in_dim_p.bind(ct, shape=shape, broadcast_dimensions=dims)]


def _reduce_chooser_jvp(t, ans, operand, *, axes):
  """JAX's `_reduce_chooser_jvp_rule`: the tangent at the locations of the extremum,
  averaged over ties."""
  aval = core.get_aval(operand)
  dtype = core.get_aval(t).dtype
  # `ans` keeps the reduced dims as size 1 (a reshape); `eq` broadcasts them, as in JAX.
  kept_shape = tuple(1 if i in axes else d for i, d in enumerate(aval.shape))
  location_indicators = elementwise.convert_element_type(
      elementwise.eq(operand, reshape(ans, kept_shape)), dtype)
  counts = reduce_sum(location_indicators, axes)
  return elementwise.div(reduce_sum(elementwise.mul(t, location_indicators), axes), counts)


def _reduce_tree_jvp(reducer: Callable, init_values: Sequence[Any], primals: Sequence[Any],
                     tangents: Sequence[Any], axes: Sequence[int]):
  """JAX's `_reduce_jvp`: the JVP of reducing `primals` over `axes` by a balanced tree of
  elementwise `reducer(*xs, *ys) -> zs` applications (the reduced axes moved to the front
  and flattened; an odd half padded with the init values). Exact with zeros in a product,
  where dividing the product by an element is not.

  Returns:
    `(primal outputs, tangent outputs)`, lists with one entry per operand.
  """
  aval = core.get_aval(primals[0])
  non_axes = _kept_dims(aval.ndim, axes)
  n = int(np.prod([aval.shape[a] for a in axes]))
  out_shape = tuple(aval.shape[d] for d in non_axes)
  new_shape = (n,) + out_shape
  permutation = tuple(axes) + non_axes

  def reduce_tree(*xs):
    xs = [reshape(x, new_shape, permutation) for x in xs]
    while core.get_aval(xs[0]).shape[0] > 1:
      m = core.get_aval(xs[0]).shape[0]
      m1 = (m + 1) // 2
      xs1 = [slice_in_dim(x, 0, m1) for x in xs]
      xs2 = [slice_in_dim(x, m1, None) for x in xs]
      if m - m1 != m1:
        config = ((0, 1, 0),) + ((0, 0, 0),) * len(out_shape)
        xs2 = [pad(x, init, config) for x, init in zip(xs2, init_values)]
      xs = list(reducer(*xs1, *xs2))
    if core.get_aval(xs[0]).shape[0] == 0:
      return [full(out_shape, init) for init in init_values]
    return [squeeze(x, (0,)) for x in xs]

  return ad.jvp_flat(reduce_tree, list(primals), list(tangents))


def _reduce_prod_jvp(primals, tangents, *, axes):
  operand, = primals
  one = np.ones((), core.get_aval(operand).dtype)
  p_out, t_out = _reduce_tree_jvp(lambda x, y: [elementwise.mul(x, y)], [one], primals,
                                  tangents, axes)
  return p_out[0], t_out[0]


ad.deflinear_args(reduce_sum_p, _reduce_sum_transpose)
# NB: psum's transpose broadcasts its positional axes' cotangents as this does.
reduce_sum_transpose = _reduce_sum_transpose
ad.primitive_jvps[reduce_prod_p] = _reduce_prod_jvp
ad.defjvp2(reduce_max_p, _reduce_chooser_jvp)
ad.defjvp2(reduce_min_p, _reduce_chooser_jvp)
for _p in (reduce_and_p, reduce_or_p, reduce_xor_p):
  ad.defjvp_zero(_p)   # bool and integer operands: never differentiated
del _p


def _batched_axes(axes, bdim: int) -> tuple[int, ...]:
  """The unbatched `axes` as axes of a value batched at `bdim`."""
  # NB: NumPy ints, as JAX's `reducer_batcher` leaves them (its jaxprs print `np.int64(1)`).
  return tuple(np.where(np.less(axes, bdim), axes, np.add(axes, 1)))


def _reducer_batch_rule(prim, args, dims, **params):
  """JAX's `_reducer_batcher`: the axes skip the batch dim, which stays (shifted left by the
  reduced axes before it)."""
  operand, = args
  bdim, = dims
  axes = _batched_axes(params.pop("axes"), bdim)
  out_b = bdim - sum(1 for a in axes if a < bdim)
  return prim.bind(operand, axes=axes, **params), out_b


for _p in (reduce_sum_p, reduce_prod_p, reduce_max_p, reduce_min_p, reduce_and_p,
           reduce_or_p, reduce_xor_p):
  batching.primitive_batchers[_p] = partial(_reducer_batch_rule, _p)
del _p

# ---------------------------------------------------------------------------
# argmax / argmin: params `axes` (a 1-tuple) and `index_dtype`; result never weakly typed.


def _argminmax_abstract_eval(name, x: ShapedArray, *, axes, index_dtype):
  _check_ordered(name, x)
  if len(axes) != 1:
    raise ValueError(f"{name} reduces exactly one axis, got axes={axes}.")
  axis, = axes
  if not 0 <= axis < x.ndim:
    raise ValueError(f"Invalid axis {axis} for operand shape {x.shape}. {name} takes an "
                     f"axis in [0, {x.ndim}); normalize a negative axis with `axis % ndim`.")
  if x.shape[axis] < 1:
    raise ValueError(f"argmin and argmax require non-empty reduced dimension. "
                     f"operand.shape={x.shape} axis={axis}")
  if not dtypes.is_integer(index_dtype):
    raise TypeError(f"index_dtype must be an integer type, but got {np.dtype(index_dtype).name}")
  return ShapedArray(x.shape[:axis] + x.shape[axis + 1:], index_dtype)


def _argminmax_lowering(direction: str, identity, ctx, x, *, axes, index_dtype):
  x_aval, = ctx.avals_in
  axis, = axes
  val = ShapedArray((), x_aval.dtype)
  idx = ShapedArray((), index_dtype)
  iota = ctx.op("stablehlo.iota", [], [ShapedArray(x_aval.shape, index_dtype)],
                attrs=f"iota_dimension = {axis} : i64", operand_avals=[])[0]
  val_init = ctx.constant(identity(x_aval.dtype), val)
  idx_init = ctx.constant(0, idx)
  pred = ShapedArray((), dtypes.bool_)

  def comparator(a, ia, b, ib):  # JAX's _ArgMinMaxReducer; a is the accumulated operand
    pick_a = emit_compare(ctx, direction, a, b, val)
    if dtypes.is_inexact(val.dtype):  # NaN wins (ints/bools are never NaN)
      pick_a = ctx.elementwise("stablehlo.or", pick_a, emit_compare(ctx, "NE", a, a, val),
                               aval=pred)
    first = ctx.elementwise("stablehlo.and", emit_compare(ctx, "EQ", a, b, val),
                            emit_compare(ctx, "LT", ia, ib, idx), aval=pred)
    pick_ia = ctx.elementwise("stablehlo.or", pick_a, first, aval=pred)
    out = []
    for p, u, v, av in ((pick_a, a, b, val), (pick_ia, ia, ib, idx)):
      r = ctx.fb.fresh()
      ctx.fb.emit(f"{r} = stablehlo.select {p}, {u}, {v} : tensor<i1>, "
                  f"{lowering.ir_type(av)}")
      out.append(r)
    return out

  body = ctx.region([val, idx, val, idx], [val, idx], comparator)
  outs = ctx.op("stablehlo.reduce", [x, iota, val_init, idx_init],
                [x_aval.update(shape=ctx.avals_out[0].shape), ctx.avals_out[0]],
                attrs=f"dimensions = {i64_array(axes)}", regions=[body],
                operand_avals=[x_aval, x_aval.update(dtype=index_dtype), val, idx])
  return [outs[1]]


argmax_p = Primitive("argmax")
argmax_p.def_abstract_eval(partial(_argminmax_abstract_eval, "argmax"))
lowering.register_lowering(argmax_p, partial(_argminmax_lowering, "GT", max_identity))

argmin_p = Primitive("argmin")
argmin_p.def_abstract_eval(partial(_argminmax_abstract_eval, "argmin"))
lowering.register_lowering(argmin_p, partial(_argminmax_lowering, "LT", min_identity))
ad.defjvp_zero(argmax_p)
ad.defjvp_zero(argmin_p)

batching.primitive_batchers[argmax_p] = partial(_reducer_batch_rule, argmax_p)
batching.primitive_batchers[argmin_p] = partial(_reducer_batch_rule, argmin_p)


def argmax(operand: Any, axis: int, index_dtype: Any):
  """Index of the maximum of `operand` along `axis` (JAX's `lax.argmax`).

  NaN counts as the maximum (the index of a NaN is returned, as `numpy.argmax` does), and
  ties give the first (lowest) index.

  Args:
    operand: array `T[*s]`, T bool, integer or floating.
    axis: int in `[0, ndim)`; `s[axis]` must be at least 1.
    index_dtype: integer dtype-like of the result (canonicalized: int64 is int32 unless x64).

  Returns:
    Array `index_dtype[s without axis]`, not weakly typed.

  Raises:
    ValueError: if `axis` is out of bounds or the axis is empty.
    TypeError: if `index_dtype` is not an integer type or T is complex.

  Examples:
    >>> import numpy as np
    >>> np.asarray(argmax(np.array([1., np.nan, 3.], np.float32), 0, np.int32))
    array(1, dtype=int32)
  """
  return argmax_p.bind(operand, axes=(int(axis),),
                       index_dtype=dtypes.check_user_dtype(index_dtype, "argmax"))


def argmin(operand: Any, axis: int, index_dtype: Any):
  """Index of the minimum of `operand` along `axis` (JAX's `lax.argmin`).

  NaN counts as the minimum (the index of a NaN is returned, as `numpy.argmin` does), and
  ties give the first (lowest) index.

  Args:
    operand: array `T[*s]`, T bool, integer or floating.
    axis: int in `[0, ndim)`; `s[axis]` must be at least 1.
    index_dtype: integer dtype-like of the result (canonicalized: int64 is int32 unless x64).

  Returns:
    Array `index_dtype[s without axis]`, not weakly typed.

  Raises:
    ValueError: if `axis` is out of bounds or the axis is empty.
    TypeError: if `index_dtype` is not an integer type or T is complex.
  """
  return argmin_p.bind(operand, axes=(int(axis),),
                       index_dtype=dtypes.check_user_dtype(index_dtype, "argmin"))


# ---------------------------------------------------------------------------
# reduce: the general, variadic reduction with a traced computation (JAX's `lax.reduce`).
# Params as JAX: `computation` (the Python function), `jaxpr` (a ClosedJaxpr of it on scalars,
# taking (*accumulators, *elements)) and `dimensions`. Operands come first, then init values.


def _reduce_general_abstract_eval(*avals, computation, jaxpr, dimensions):
  n = len(avals) // 2
  operands, inits = avals[:n], avals[n:]
  if any(a.shape != () for a in inits):
    raise ValueError(f"reduce found non-scalar initial value: {[a.shape for a in inits]}")
  if [a.dtype for a in operands] != [a.dtype for a in inits]:
    raise TypeError(f"reduce operand dtypes should match corresponding initial value dtypes, "
                    f"got operands={list(operands)} and initial_values={list(inits)}")
  if any(a.shape != operands[0].shape for a in operands):
    shapes = " ".join(a.str_short() for a in operands)
    raise TypeError(f"reduce operands must have equal shapes, got: {shapes}")
  _check_reduction_axes("reduce", operands[0], tuple(sorted(dimensions)))
  shape = tuple(d for i, d in enumerate(operands[0].shape) if i not in dimensions)
  return [ShapedArray(shape, op.dtype, op.weak_type and init.weak_type)
          for op, init in zip(operands, inits)]


def _reduce_general_lowering(ctx, *args, computation, jaxpr, dimensions):
  n = len(args) // 2
  scalars = [a.strip_weak_type() for a in ctx.avals_in[n:]]

  def body(*region_args):
    # NB: constants the computation closed over are emitted inside the region, whose values
    # cannot come from the enclosing function.
    consts = [_dense_constant(ctx, c) for c in jaxpr.consts]
    return lowering.jaxpr_subcomp(ctx.fb, jaxpr.jaxpr, consts, region_args)

  region = ctx.region([*scalars, *scalars], scalars, body)
  return ctx.op("stablehlo.reduce", list(args), attrs=f"dimensions = {i64_array(dimensions)}",
                regions=[region])


def _dense_constant(ctx, value) -> str:
  x = np.asarray(value)
  aval = ShapedArray(x.shape, dtypes.canonicalize_dtype(x.dtype))
  x = x.astype(aval.dtype)
  r = ctx.fb.fresh()
  ctx.fb.emit(f"{r} = stablehlo.constant {lowering.dense_array(x)} : {lowering.ir_type(aval)}")
  return r


reduce_p = Primitive("reduce")
reduce_p.multiple_results = True
reduce_p.def_abstract_eval(_reduce_general_abstract_eval)
lowering.register_lowering(reduce_p, _reduce_general_lowering)


def _elementwise_reducer(closed: core.ClosedJaxpr) -> Callable:
  """The scalar computation `closed` applied elementwise to arrays of one shape (what JAX
  gets by vmapping it): its equations are bound on the arrays, which is elementwise when
  every value in it is a scalar.

  Raises:
    NotImplementedError: if the computation makes non-scalar values or its primitives do
      not apply elementwise to arrays.
  """
  def unsupported(why: str):
    return NotImplementedError(
        f"Differentiating the general reduce (primitive 'reduce') applies its computation "
        f"elementwise to arrays, but {why}. Write the computation with elementwise lax "
        f"operations on its scalar arguments (add, mul, max, select, ...).")

  if any(v.aval.shape != () for e in closed.eqns for v in (*e.invars, *e.outvars)):
    raise unsupported("the computation makes non-scalar intermediate values")

  def reducer(*args):
    shape = core.get_aval(args[0]).shape
    try:
      outs = core.eval_jaxpr(closed.jaxpr, closed.consts, *args)
    except (TypeError, ValueError) as e:
      raise unsupported(f"a primitive of it rejected array operands ({e})") from e
    result = []
    for o in outs:
      o_shape = core.get_aval(o).shape
      if o_shape == ():   # a value that does not depend on the arguments
        o = broadcast_in_dim(o, shape, ())
      elif o_shape != shape:
        raise unsupported(f"on operands of shape {shape} it returned shape {o_shape}")
      result.append(o)
    return result
  return reducer


def _reduce_general_jvp(primals, tangents, *, computation, jaxpr, dimensions):
  """JAX's `_reduce_jvp_rule`: the JVP of a balanced tree of `computation` applications."""
  n = len(primals) // 2
  if any(type(t) is not ad.Zero for t in tangents[n:]):
    raise NotImplementedError(
        "Gradient of the general reduce (primitive 'reduce') with non-zero tangents for the "
        "initial values is not implemented (as in JAX). Pass constant init values (the "
        "identity of the computation) and fold the traced ones in afterwards.")
  return _reduce_tree_jvp(_elementwise_reducer(jaxpr), primals[n:], primals[:n],
                          tangents[:n], tuple(sorted(dimensions)))


ad.primitive_jvps[reduce_p] = _reduce_general_jvp


def _reduce_general_batch_rule(args, dims, *, computation, jaxpr, dimensions):
  """JAX's `_reduce_batch_rule` with unbatched init values: the operands' batch dims are
  aligned at the first batched operand's (unbatched operands broadcast), the dimensions
  skip it."""
  n = len(args) // 2
  operands, inits = args[:n], args[n:]
  operand_dims, init_dims = dims[:n], dims[n:]
  if any(d is not batching.not_mapped for d in init_dims):
    raise NotImplementedError(
        "vmap of the general reduce (primitive 'reduce') with batched initial values is not "
        "implemented (as in JAX). Pass init values that do not depend on the mapped axis "
        "(the identity of the computation) and combine the batched ones afterwards.")
  size, bdim = next((core.get_aval(x).shape[d], d) for x, d in zip(operands, operand_dims)
                    if d is not batching.not_mapped)
  operands = [batching.matchaxis(x, d, bdim, size) for x, d in zip(operands, operand_dims)]
  new_dims = _batched_axes(dimensions, bdim)
  out_b = bdim - sum(1 for a in new_dims if a < bdim)
  outs = reduce_p.bind(*operands, *inits, computation=computation, jaxpr=jaxpr,
                       dimensions=new_dims)
  return outs, [out_b] * n


batching.primitive_batchers[reduce_p] = _reduce_general_batch_rule


@lru_cache(maxsize=1024)
def reduction_jaxpr(computation, flat_avals: tuple[ShapedArray, ...], tree):
  """`computation(xs, ys)` (pytrees shaped like the init values) traced on scalars into a
  ClosedJaxpr taking (*xs, *ys). Cached, so that eager calls with one computation reuse one
  jaxpr object and hence one compiled executable (a ClosedJaxpr is hashed by identity)."""
  n = len(flat_avals)
  out_tree = []

  def flat_computation(*flat_args):
    xs = tree_util.tree_unflatten(tree, flat_args[:n])
    ys = tree_util.tree_unflatten(tree, flat_args[n:])
    leaves, t = tree_util.tree_flatten(computation(xs, ys))
    out_tree.append(t)
    return leaves

  jaxpr, consts = pe.trace_to_jaxpr(flat_computation, [*flat_avals, *flat_avals])
  if any(isinstance(c, core.Tracer) for c in consts):
    raise NotImplementedError(
        "Reduction computations can't close over Tracers. Pass the traced value as an "
        "operand of the reduction instead, or make it a constant.")
  out_avals = jaxpr.out_avals
  if out_tree[0] != tree or [(a.shape, a.dtype) for a in out_avals] != [
      (a.shape, a.dtype) for a in flat_avals]:
    want = ", ".join(a.str_short() for a in flat_avals)
    got = ", ".join(a.str_short() for a in out_avals)
    raise TypeError(
        f"reduce computation must return a value with the structure and types of the init "
        f"values, {treedef_str(tree)} of ({want}), but returned {treedef_str(out_tree[0])} "
        f"of ({got}). Make "
        f"`computation(x, y)` return as many scalars as there are operands, each of the "
        f"dtype of its init value.")
  return core.ClosedJaxpr(jaxpr, consts)


def _monoid_reducer(computation, init_values):
  """The reduce_* primitive wrapper that `computation` with `init_values` amounts to (as JAX's
  `_get_monoid_reducer`): one operand, a concrete scalar init equal to the op's identity."""
  if len(init_values) != 1:
    return None
  init, = init_values
  if isinstance(init, core.Tracer):
    return None
  aval = core.get_aval(init)
  if aval.shape != ():
    return None
  val, dtype = np.asarray(init), aval.dtype
  intlike = dtype == dtypes.bool_ or dtypes.is_integer(dtype)
  candidates = [(elementwise.add, reduce_sum, sum_identity),
                (elementwise.mul, reduce_prod, prod_identity),
                (elementwise.max, reduce_max, max_identity),
                (elementwise.min, reduce_min, min_identity)]
  if intlike:
    candidates += [(elementwise.bitwise_or, reduce_or, or_identity),
                   (elementwise.bitwise_and, reduce_and, and_identity),
                   (elementwise.bitwise_xor, reduce_xor, or_identity)]
  for op, reducer, identity in candidates:
    if computation is op:
      return reducer if np.equal(val, identity(dtype)) else None
  return None


def reduce(operands: Any, init_values: Any, computation: Callable[[Any, Any], Any],
           dimensions: Sequence[int], out_sharding: Any = None) -> Any:
  """Reduces `operands` over `dimensions` with a user `computation` (JAX's `lax.reduce`).

  `computation` is traced once per (function, init avals) to a jaxpr on scalars and lowered
  into the region of one `stablehlo.reduce`. `init_values` must be an identity of
  `computation` and `computation` associative (and commutative): XLA reduces in any order and
  may apply the init value any number of times; otherwise the result is undefined.
  When `computation` is one of `lax.add`, `mul`, `max`, `min`, `bitwise_and`, `bitwise_or`,
  `bitwise_xor` and the single init value is its concrete identity, this binds the matching
  `reduce_*` primitive instead, as JAX does.

  Args:
    operands: an array `T_i[*s]` or a pytree of arrays of one shape `s`.
    init_values: a pytree of scalars `T_i[]` with the structure of `operands` and their dtypes
      (a Python scalar is weakly typed: `0.` is `f32[]`, not `f16[]`).
    computation: `computation(x, y) -> z`, where `x`, `y`, `z` are pytrees of scalars shaped
      like `init_values` (`x` the accumulated values, `y` the elements).
    dimensions: distinct axes in `[0, ndim)`.
    out_sharding: None, or the result's sharding; only for a reduction that is a sum (JAX
      supports no other).

  Returns:
    A pytree like `operands` of arrays `T_i[s without dimensions]`; weakly typed where both the
    operand and its init value are.

  Raises:
    ValueError: if the trees of `operands` and `init_values` differ, an init value is not a
      scalar, or a dimension is out of bounds or repeated.
    TypeError: if an operand's dtype differs from its init value's, the operands' shapes
      differ, or `computation` returns another structure or other dtypes.
    NotImplementedError: if `computation` closes over a traced value.

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> x = np.array([[1., -5., 2.], [-3., 0., 1.]], np.float32)
    >>> max_abs = lambda a, b: lax.max(lax.abs(a), lax.abs(b))
    >>> np.asarray(lax.reduce(x, np.float32(0), max_abs, (1,)))
    array([5., 3.], dtype=float32)
    >>> s, p = lax.reduce((x, x), (np.float32(0), np.float32(1)),
    ...                   lambda a, b: (a[0] + b[0], a[1] * b[1]), (0,))
    >>> np.asarray(s), np.asarray(p)
    (array([-2., -5.,  3.], dtype=float32), array([-3., -0.,  2.], dtype=float32))
  """
  flat_operands, operand_tree = tree_util.tree_flatten(operands)
  flat_inits, init_tree = tree_util.tree_flatten(init_values)
  if operand_tree != init_tree:
    raise ValueError(f"Operands must have the same tree structure as init_values: "
                     f"{treedef_str(operand_tree)} vs. {treedef_str(init_tree)}")
  dimensions = tuple(int(d) for d in dimensions)
  reducer = _monoid_reducer(computation, flat_inits)
  if out_sharding is not None and reducer is not reduce_sum:
    raise NotImplementedError("lax.reduce: out_sharding is supported only for a sum "
                              "(computation lax.add with init value 0), as JAX's.")
  if reducer is not None:
    operand, = flat_operands
    weak = core.get_aval(operand).weak_type and core.get_aval(flat_inits[0]).weak_type
    out = (reducer(operand, dimensions) if out_sharding is None
           else reducer(operand, dimensions, out_sharding=out_sharding))
    out_aval = core.get_aval(out)
    if out_aval.weak_type != weak:
      out = elementwise.convert_element_type_p.bind(out, new_dtype=out_aval.dtype,
                                                    weak_type=weak)
    return out
  init_avals = tuple(core.get_aval(v) for v in flat_inits)
  try:
    hash(computation)
  except TypeError:   # an unhashable callable: trace without caching
    jaxpr = reduction_jaxpr.__wrapped__(computation, init_avals, init_tree)
  else:
    jaxpr = reduction_jaxpr(computation, init_avals, init_tree)
  outs = reduce_p.bind(*flat_operands, *flat_inits, computation=computation, jaxpr=jaxpr,
                       dimensions=dimensions)
  return tree_util.tree_unflatten(operand_tree, outs)
