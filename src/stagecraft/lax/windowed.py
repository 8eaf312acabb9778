"""Windowed reductions: `reduce_window_sum`, `reduce_window_max`, `reduce_window_min`, the
`reduce_window` wrapper that dispatches `lax.add`/`lax.max`/`lax.min` to them, and
`select_and_scatter_add` and `select_and_gather_add` (the building blocks of max-pool
derivatives: the VJP scatters to, the JVP gathers from, the element each window selects).

A window of `window_dimensions` slides over the operand, after the operand is dilated by
`base_dilation` (holes between elements) and padded by `padding` (pairs `(lo, hi)`), with
`window_strides` between positions; `window_dilation` spreads the window's own elements.
Padding and holes hold the reduction's identity, so they do not change the result. Each
primitive lowers to one `stablehlo.reduce_window` started from the identity, as in JAX.
Params and messages follow JAX's `lax` (JAX 0.10).
"""
from __future__ import annotations

import operator
from functools import partial
from typing import Any, Callable, Sequence

import numpy as np

from stagecraft import core, dtypes, shape_poly, tree_util
from stagecraft.core import Primitive, ShapedArray
from stagecraft.interpreters import ad, batching, lowering
from stagecraft.interpreters.lowering import i64_array, ir_type
from stagecraft.lax import elementwise, reduction, utils
from stagecraft.lax.conv import conv_general_vjp_lhs_padding, padtype_to_pads
from stagecraft.lax.elementwise import emit_compare
from stagecraft.lax.reduction import max_identity, min_identity, sum_identity
from stagecraft.lax.shape import canonicalize_shape, check_shapelike, pad, slice as _slice
from stagecraft.lax.shape import full_like as lax_full_like
from stagecraft.tree_util import treedef_str

__all__ = ["reduce_window_shape_tuple", "reduce_window_p", "reduce_window_sum_p",
           "reduce_window_max_p", "reduce_window_min_p", "select_and_scatter_add_p",
           "select_and_gather_add_p",
           "reduce_window", "reduce_window_sum", "reduce_window_max", "reduce_window_min",
           "select_and_scatter_add", "select_and_gather_add"]


# ---------------------------------------------------------------------------
# Shapes


def _dilate_shape(shape, dilation):
  return tuple(0 if d == 0 else 1 + r * (d - 1) for d, r in zip(shape, dilation))


def _check_window_params(name, operand, window_dimensions, window_strides, padding,
                         base_dilation, window_dilation):
  # NB: JAX's common reduce_window shape rule (also behind reduce_window_{sum,max,min} and
  # select_and_gather_add) words its errors as `reduce_window`: window_dimensions must
  # match the operand's rank, the other window params window_dimensions' length.
  params = (("window_dimensions", window_dimensions), ("window_strides", window_strides),
            ("base_dilation", base_dilation), ("window_dilation", window_dilation))
  for arg, value in params:
    check_shapelike(name, arg, value)
  if len(window_dimensions) != operand.ndim:
    raise TypeError(f"reduce_window got the wrong number of window_dimensions for operand: "
                    f"got operand shape {operand.shape} with window_dimensions "
                    f"{window_dimensions}.")
  for arg, value in params[1:]:
    if len(value) != len(window_dimensions):
      raise TypeError(f"reduce_window got inconsistent {arg} and window_dimensions: got "
                      f"{arg} {value} and window_dimensions {window_dimensions}.")
  for arg, value in params[1:]:
    if not all(v >= 1 for v in value):
      raise TypeError(f"reduce_window {arg} must have every element be strictly positive, "
                      f"got {value}.")   # JAX's message
  if type(padding) is not tuple or len(padding) != operand.ndim or not all(
      type(p) is tuple and len(p) == 2
      and all(type(v) is int or shape_poly.is_symbolic_dim(v) for v in p) for p in padding):
    raise TypeError(f"{name} padding must be a tuple of one (lo, hi) pair of ints per operand "
                    f"dimension, got {padding!r} for operand shape {operand.shape}. Call "
                    f"lax.reduce_window, which normalizes it.")


def _window_out_shape(operand_shape, window_dimensions, window_strides, padding,
                      base_dilation, window_dilation):
  shape = _dilate_shape(operand_shape, base_dilation)
  window = _dilate_shape(window_dimensions, window_dilation)
  padded = [d + lo + hi for d, (lo, hi) in zip(shape, padding)]
  if any(not shape_poly.is_symbolic_dim(p) and p < 0 for p in padded):
    raise TypeError(f"reduce_window padding {padding} makes a negative dimension for operand "
                    f"shape {tuple(operand_shape)}.")
  # NB: max_dim, as JAX's `core.stride_dim`: `max(b - 2, 0)` for a symbolic size (export)
  return tuple(shape_poly.max_dim((p - w) // s + 1, 0)
               for p, w, s in zip(padded, window, window_strides))


def _padding_attr(padding) -> str:
  n = len(padding)
  if n == 0:
    return "dense<> : tensor<0x2xi64>"
  rows = ", ".join(f"[{lo}, {hi}]" for lo, hi in padding)
  return f"dense<[{rows}]> : tensor<{n}x2xi64>"


# ---------------------------------------------------------------------------
# reduce_window_{sum,max,min}(operand): params window_dimensions, window_strides, padding,
# base_dilation, window_dilation; the result keeps the operand's dtype and weak type.


def _reduce_window_abstract_eval(name, accepted, operand, *, window_dimensions,
                                 window_strides, padding, base_dilation, window_dilation):
  utils.check_dtype(name, operand, accepted)
  _check_window_params(name, operand, window_dimensions, window_strides, padding,
                       base_dilation, window_dilation)
  if not all(w >= 1 for w in window_dimensions):
    raise TypeError(f"reduce_window window_dimensions must have every element be strictly "
                    f"positive, got {window_dimensions}.")   # JAX's message
  shape = _window_out_shape(operand.shape, window_dimensions, window_strides, padding,
                            base_dilation, window_dilation)
  return ShapedArray(shape, operand.dtype, operand.weak_type)


def emit_reduce_window(ctx, x: str, identity_value: Any, combine: Callable[[str, str], str],
                       window_dimensions, window_strides, padding, base_dilation,
                       window_dilation) -> list[str]:
  """Emits one `stablehlo.reduce_window` of `ctx.avals_in[0]` starting from
  `identity_value`, whose region is `combine(a, b)` on scalars (also used by the cumulative
  ops in cumulative.py)."""
  aval_in = ctx.avals_in[0]
  scalar = ShapedArray((), aval_in.dtype)
  init = ctx.constant(identity_value, scalar)
  body = ctx.region([scalar, scalar], [scalar], lambda a, b: [combine(a, b)])
  attrs = (f"base_dilations = {i64_array(base_dilation)}, padding = {_padding_attr(padding)}, "
           f"window_dilations = {i64_array(window_dilation)}, window_dimensions = "
           f"{i64_array(window_dimensions)}, window_strides = {i64_array(window_strides)}")
  return ctx.op("stablehlo.reduce_window", [x, init], attrs=attrs, regions=[body],
                operand_avals=[aval_in, scalar])


def _reduce_window_lowering(op, identity, ctx, x, *, window_dimensions, window_strides,
                            padding, base_dilation, window_dilation):
  scalar = ShapedArray((), ctx.avals_in[0].dtype)
  if scalar.dtype == dtypes.bool_:   # max is OR, min is AND on bool (StableHLO's too)
    op = {"stablehlo.maximum": "stablehlo.or", "stablehlo.minimum": "stablehlo.and"}.get(op, op)
  return emit_reduce_window(ctx, x, identity(scalar.dtype),
                            lambda a, b: ctx.elementwise(op, a, b, aval=scalar),
                            window_dimensions, window_strides, padding, base_dilation,
                            window_dilation)


_number = ("number", lambda d: dtypes.is_integer(d) or dtypes.is_inexact(d))
_ordered = (utils.bool_kind, utils.int_kind, utils.float_kind)


def _reduce_window_primitive(name, op, identity, accepted) -> Primitive:
  p = Primitive(name)
  p.def_abstract_eval(partial(_reduce_window_abstract_eval, name, accepted))
  lowering.register_lowering(p, partial(_reduce_window_lowering, op, identity))
  return p


reduce_window_sum_p = _reduce_window_primitive("reduce_window_sum", "stablehlo.add",
                                               sum_identity, (_number,))
reduce_window_max_p = _reduce_window_primitive("reduce_window_max", "stablehlo.maximum",
                                               max_identity, _ordered)
reduce_window_min_p = _reduce_window_primitive("reduce_window_min", "stablehlo.minimum",
                                               min_identity, _ordered)


def _reduce_window_sum_transpose(ct, operand, *, window_dimensions, window_strides, padding,
                                 base_dilation, window_dilation):
  """JAX's `_reduce_window_sum_transpose_rule`: each input element receives the sum of the
  cotangents of the windows that hold it, a window sum of the cotangent dilated by the
  strides and padded as for a convolution's input gradient."""
  in_shape = operand.aval.shape
  ct_aval = core.get_aval(ct)
  pads = conv_general_vjp_lhs_padding(in_shape, window_dimensions, window_strides,
                                       ct_aval.shape, padding, base_dilation, window_dilation)
  config = [(lo, hi, s - 1) for (lo, hi), s in zip(pads, window_strides)]
  padded = pad(ct, np.zeros((), ct_aval.dtype)[()], config)
  ones = (1,) * len(in_shape)
  out = reduce_window_sum_p.bind(padded, window_dimensions=tuple(window_dimensions),
                                 window_strides=tuple(base_dilation),
                                 padding=((0, 0),) * len(in_shape), base_dilation=ones,
                                 window_dilation=tuple(window_dilation))
  return [out]


def _reduce_window_chooser_jvp(select_prim, t, operand, *, window_dimensions, window_strides,
                               padding, base_dilation, window_dilation):
  """JAX's `_reduce_window_chooser_jvp_rule`: the tangent of the element each window
  selects (the first maximum or minimum)."""
  return select_and_gather_add_p.bind(
      t, operand, select_prim=select_prim, window_dimensions=window_dimensions,
      window_strides=window_strides, padding=padding, base_dilation=base_dilation,
      window_dilation=window_dilation)


ad.deflinear_args(reduce_window_sum_p, _reduce_window_sum_transpose)
ad.defjvp(reduce_window_max_p, partial(_reduce_window_chooser_jvp, elementwise.ge_p))
ad.defjvp(reduce_window_min_p, partial(_reduce_window_chooser_jvp, elementwise.le_p))


def _insert_window_dim(bdim, window_dimensions, window_strides, padding, base_dilation=None,
                       window_dilation=None):
  """Window params with a window of size 1, stride 1, no padding or dilation inserted at
  `bdim` (the batch axis), so that each batch element is windowed on its own."""
  def ins(xs, v):
    xs = list(xs)
    xs.insert(bdim, v)
    return tuple(xs)
  out = dict(window_dimensions=ins(window_dimensions, 1), window_strides=ins(window_strides, 1),
             padding=ins(padding, (0, 0)))
  if base_dilation is not None:
    out.update(base_dilation=ins(base_dilation, 1), window_dilation=ins(window_dilation, 1))
  return out


def _reduce_window_batch_rule(prim, batched_args, batch_dims, *, window_dimensions,
                              window_strides, padding, base_dilation, window_dilation):
  """JAX's `_reduce_window_batch_rule`: a size-1 window along the batch axis, kept in
  place."""
  (operand,), (bdim,) = batched_args, batch_dims
  params = _insert_window_dim(bdim, window_dimensions, window_strides, padding, base_dilation,
                              window_dilation)
  return prim.bind(operand, **params), bdim


for _p in (reduce_window_sum_p, reduce_window_max_p, reduce_window_min_p):
  batching.primitive_batchers[_p] = partial(_reduce_window_batch_rule, _p)


def _common_bdim(xs, dims):
  """Two operands of the same windowing aligned at one batch dim (the first batched one's,
  unbatched ones broadcast there)."""
  size = next(core.get_aval(x).shape[d] for x, d in zip(xs, dims) if d is not None)
  bdim = next(d for d in dims if d is not None)
  return [batching.matchaxis(x, d, bdim, size) for x, d in zip(xs, dims)], bdim


def _window_params(name, operand, window_dimensions, window_strides, padding, base_dilation,
                   window_dilation):
  window_dimensions = canonicalize_shape(name, "window_dimensions", window_dimensions)
  n = len(window_dimensions)
  window_strides = (1,) * n if window_strides is None else canonicalize_shape(
      name, "window_strides", window_strides)
  base_dilation = (1,) * n if base_dilation is None else canonicalize_shape(
      name, "base_dilation", base_dilation)
  window_dilation = (1,) * n if window_dilation is None else canonicalize_shape(
      name, "window_dilation", window_dilation)
  if isinstance(padding, str):
    shape = _dilate_shape(core.get_aval(operand).shape, base_dilation)
    window = _dilate_shape(window_dimensions, window_dilation)
    padding = padtype_to_pads(shape, window, window_strides, padding)
  try:   # NB: symbolic pads (a symbolic axis under export) stay expressions
    padding = tuple(tuple(v if shape_poly.is_symbolic_dim(v) else operator.index(v)
                          for v in (lo, hi)) for lo, hi in padding)
  except (TypeError, ValueError) as e:
    raise TypeError(f"{name} padding must be 'VALID', 'SAME', 'SAME_LOWER' or a sequence of "
                    f"(lo, hi) integer pairs, got {padding!r}.") from e
  return dict(window_dimensions=window_dimensions, window_strides=window_strides,
              padding=padding, base_dilation=base_dilation, window_dilation=window_dilation)


def _reduce_window_wrapper(p: Primitive, what: str, op: str, dtypes_doc: str):
  def f(operand: Any, window_dimensions: Sequence[int],
        window_strides: Sequence[int] | None = None,
        padding: str | Sequence[tuple[int, int]] = "VALID",
        base_dilation: Sequence[int] | None = None,
        window_dilation: Sequence[int] | None = None) -> Any:
    return p.bind(operand, **_window_params(p.name, operand, window_dimensions, window_strides,
                                            padding, base_dilation, window_dilation))
  f.__name__ = f.__qualname__ = p.name
  f.__doc__ = f"""The {what} over each window of `operand` (`reduce_window` with `lax.{op}` and
  the identity as init value).

  Args:
    operand: array `T[*s]`; T {dtypes_doc}.
    window_dimensions: window size per dimension (positive).
    window_strides: step per dimension (positive); None means 1.
    padding: (lo, hi) pairs, or 'VALID'/'SAME'/'SAME_LOWER' (see `padtype_to_pads`);
      padding holds the identity.
    base_dilation, window_dilation: positive dilations per dimension; None means 1.

  Returns:
    `T[*o]` with `o[k] = (dil(s[k]) + lo + hi - dil(w[k])) // stride[k] + 1` (at least 0),
    where `dil(n) = 1 + dilation * (n - 1)`.

  Raises:
    TypeError: if T is not accepted or the params do not match the operand's rank.
    RuntimeError: for an unknown padding string.
  """
  return f


reduce_window_sum = _reduce_window_wrapper(reduce_window_sum_p, "sum", "add",
                                           "a number type (not bool)")
reduce_window_max = _reduce_window_wrapper(reduce_window_max_p, "maximum", "max",
                                           "bool, integer or floating")
reduce_window_min = _reduce_window_wrapper(reduce_window_min_p, "minimum", "min",
                                           "bool, integer or floating")

_monoids = {elementwise.add: (reduce_window_sum_p, sum_identity, elementwise.add),
            elementwise.max: (reduce_window_max_p, max_identity, elementwise.max),
            elementwise.min: (reduce_window_min_p, min_identity, elementwise.min)}


def reduce_window(operand: Any, init_value: Any, computation: Callable,
                  window_dimensions: Sequence[int], window_strides: Sequence[int] | None = None,
                  padding: str | Sequence[tuple[int, int]] = "VALID",
                  base_dilation: Sequence[int] | None = None,
                  window_dilation: Sequence[int] | None = None) -> Any:
  """Reduces each window of `operand` with `computation` (JAX's `lax.reduce_window`).

  With `lax.add`, `lax.max` or `lax.min` and an identity `init_value` (0, or the lowest/
  highest value of the dtype) this is one `reduce_window_*` primitive, with another
  `init_value` the result is it combined once with each window's reduction (what XLA
  computes: padding never contributes). Any other computation, or pytrees of operands,
  binds the general `reduce_window` primitive (JAX's): `computation(xs, ys)` traced on
  scalars, run as the region of one `stablehlo.reduce_window`. It is differentiable in
  forward mode (a JVP with zero init tangents, as JAX's), not in reverse mode.

  Args:
    operand: array `T[*s]`, or a pytree of arrays of one shape.
    init_value: scalar of dtype T (a Python scalar is an array of its default dtype, not
      promoted; an identity of `computation`, such as 0 for add, is accepted for any T);
      a pytree of scalars like `operand` for a pytree of operands.
    computation: `lax.add`, `lax.max`, `lax.min`, or any `computation(x, y) -> z` on pytrees
      of scalars shaped like `init_value`.
    window_dimensions: window size per dimension.
    window_strides: step per dimension; None means 1.
    padding: (lo, hi) pairs, or 'VALID' (default), 'SAME' or 'SAME_LOWER'.
    base_dilation, window_dilation: dilations per dimension; None means 1.

  Returns:
    `T[*o]`, shaped as for `reduce_window_sum`.

  Raises:
    ValueError: `operand` and `init_value` of different tree structures.
    TypeError: if `init_value` is not a scalar of dtype T, a computation returns other
      types than its inits, or the params are invalid.

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> x = np.arange(6, dtype=np.float32)
    >>> np.asarray(lax.reduce_window(x, 0., lax.add, (2,), (2,), 'VALID'))
    array([1., 5., 9.], dtype=float32)
  """
  if computation not in _monoids or not _is_array_like(operand):
    return _general_reduce_window(operand, init_value, computation, window_dimensions,
                                  window_strides, padding, base_dilation, window_dilation)
  prim, identity, combine = _monoids[computation]
  params = _window_params("reduce_window", operand, window_dimensions, window_strides, padding,
                          base_dilation, window_dilation)
  if not isinstance(init_value, core.Tracer) and np.ndim(init_value) == 0:
    # NB: as JAX: a concrete init that is the identity of its own dtype (-inf for max, 0 for
    # add) selects the plain reduction whatever the operand's dtype (equinox's MaxPool has
    # init -inf, also over integer inputs).
    init_dt = dtypes.dtype(init_value)
    if np.asarray(init_value, init_dt) == identity(init_dt):
      return prim.bind(operand, **params)
  x_aval, init_aval = core.get_aval(operand), core.get_aval(init_value)
  if init_aval.dtype != x_aval.dtype:   # JAX's message
    raise TypeError(f"reduce_window got inconsistent dtypes for operands and init_values: got "
                    f"operand dtypes [{x_aval.dtype!r}] and init_value dtypes "
                    f"[{init_aval.dtype!r}].")
  if init_aval.shape != ():
    raise TypeError(f"reduce_window expected init_values to be scalars but init_values have "
                    f"shapes {[init_aval.shape]}.")
  concrete = not isinstance(init_value, core.Tracer)
  if concrete and np.asarray(init_value, x_aval.dtype) == identity(x_aval.dtype):
    return prim.bind(operand, **params)
  # NB: XLA applies a non-identity init once per window (padding and dilation holes are
  # skipped, not filled with it): reduce from the identity, then combine with init_value.
  out = prim.bind(operand, **params)
  return combine(out, init_value)


# ---------------------------------------------------------------------------
# reduce_window (JAX's general primitive): operands then init values, a computation traced
# on scalars (`jaxpr` taking (*accumulators, *elements), its `consts`), the window params.


def _is_array_like(x) -> bool:
  return isinstance(x, (core.Tracer, np.ndarray, np.generic, int, float, complex, bool)) or (
      hasattr(x, "aval") and hasattr(x, "shape"))


def _general_reduce_window(operand, init_value, computation, window_dimensions,
                           window_strides, padding, base_dilation, window_dilation):
  flat_operands, operand_tree = tree_util.tree_flatten(operand)
  flat_inits, init_tree = tree_util.tree_flatten(init_value)
  if operand_tree != init_tree:
    raise ValueError(f"Operands must have the same tree structure as init_values: "
                     f"{treedef_str(operand_tree)} vs. {treedef_str(init_tree)}")
  if not flat_operands:
    raise ValueError("reduce_window must have at least one operand.")
  params = _window_params("reduce_window", flat_operands[0], window_dimensions,
                          window_strides, padding, base_dilation, window_dilation)
  init_avals = tuple(core.get_aval(v) for v in flat_inits)
  try:
    hash(computation)
  except TypeError:   # an unhashable callable: trace without caching
    closed = reduction.reduction_jaxpr.__wrapped__(computation, init_avals, init_tree)
  else:
    closed = reduction.reduction_jaxpr(computation, init_avals, init_tree)
  outs = reduce_window_p.bind(*flat_operands, *flat_inits, jaxpr=closed.jaxpr,
                              consts=tuple(closed.consts), **params)
  return tree_util.tree_unflatten(operand_tree, outs)


def _general_abstract_eval(*avals, jaxpr, consts, window_dimensions, window_strides, padding,
                           base_dilation, window_dilation):
  n = len(avals) // 2
  operands, inits = avals[:n], avals[n:]
  if any(a.shape != () for a in inits):
    raise TypeError(f"reduce_window expected init_values to be scalars but init_values have "
                    f"shapes {[a.shape for a in inits]}.")
  if [a.dtype for a in operands] != [a.dtype for a in inits]:
    raise TypeError(f"reduce_window got inconsistent dtypes for operands and init_values: "
                    f"got operand dtypes {[a.dtype for a in operands]} and init_value dtypes "
                    f"{[a.dtype for a in inits]}.")
  if any(a.shape != operands[0].shape for a in operands):
    raise TypeError(f"reduce_window got inconsistent shapes for operands: "
                    f"{[a.shape for a in operands]}.")
  _check_window_params("reduce_window", operands[0], window_dimensions, window_strides,
                       padding, base_dilation, window_dilation)
  shape = _window_out_shape(operands[0].shape, window_dimensions, window_strides, padding,
                            base_dilation, window_dilation)
  return [ShapedArray(shape, a.dtype) for a in operands]


def _general_lowering(ctx, *args, jaxpr, consts, window_dimensions, window_strides, padding,
                      base_dilation, window_dilation):
  n = len(args) // 2
  scalars = [ShapedArray((), a.dtype) for a in ctx.avals_in[n:]]

  def body(*region_args):
    # NB: the computation's constants are made inside the region (it cannot read values of
    # the enclosing function)
    cs = [lowering.dense_constant(ctx.fb, c, v.aval) for c, v in zip(consts, jaxpr.constvars)]
    return lowering.jaxpr_subcomp(ctx.fb, jaxpr, cs, region_args)

  region = ctx.region([*scalars, *scalars], scalars, body)
  attrs = (f"base_dilations = {i64_array(base_dilation)}, padding = {_padding_attr(padding)}, "
           f"window_dilations = {i64_array(window_dilation)}, window_dimensions = "
           f"{i64_array(window_dimensions)}, window_strides = {i64_array(window_strides)}")
  return ctx.op("stablehlo.reduce_window", list(args), attrs=attrs, regions=[region],
                operand_avals=[*ctx.avals_in[:n], *scalars])


def _general_batch_rule(args, dims, *, jaxpr, consts, window_dimensions, window_strides,
                        padding, base_dilation, window_dilation):
  n = len(args) // 2
  operands, inits = list(args[:n]), list(args[n:])
  if any(d is not batching.not_mapped for d in dims[n:]):
    raise NotImplementedError("reduce_window batching is not implemented for initial values")
  size = next(core.get_aval(x).shape[d] for x, d in zip(operands, dims[:n])
              if d is not batching.not_mapped)
  operands = [batching.matchaxis(x, d, 0, size) for x, d in zip(operands, dims[:n])]
  outs = reduce_window_p.bind(
      *operands, *inits, jaxpr=jaxpr, consts=consts,
      window_dimensions=(1, *window_dimensions), window_strides=(1, *window_strides),
      padding=((0, 0), *padding), base_dilation=(1, *base_dilation),
      window_dilation=(1, *window_dilation))
  return outs, [0] * n


def _general_jvp(primals, tangents, *, jaxpr, consts, **window):
  """JAX's rule: the JVP of `computation` reduced over (operands, tangents) pairs, from zero
  init tangents (a non-zero one raises)."""
  n = len(primals) // 2
  operands, inits = primals[:n], primals[n:]
  if any(type(t) is not ad.Zero for t in tangents[n:]):
    raise TypeError("reduce_window jvp does not support non-zero init_value_tangent.")
  fun = core.jaxpr_as_fun(core.ClosedJaxpr(jaxpr, consts))
  op_tangents = [ad.instantiate_zeros(t) for t in tangents[:n]]
  init_tangents = [lax_full_like(v, 0, core.get_aval(t).dtype)
                   for v, t in zip(inits, op_tangents)]

  def computation(left, right):
    p_out, t_out = ad.jvp_flat(fun, [*left[:n], *right[:n]], [*left[n:], *right[n:]])
    return [*p_out, *[ad.instantiate_zeros(t) for t in t_out]]
  outs = _general_reduce_window([*operands, *op_tangents], [*inits, *init_tangents],
                                computation, **window)
  return outs[:n], outs[n:]


reduce_window_p = Primitive("reduce_window")
reduce_window_p.multiple_results = True
reduce_window_p.def_abstract_eval(_general_abstract_eval)
lowering.register_lowering(reduce_window_p, _general_lowering)
batching.primitive_batchers[reduce_window_p] = _general_batch_rule
ad.primitive_jvps[reduce_window_p] = _general_jvp


# ---------------------------------------------------------------------------
# select_and_scatter_add(source, operand): for each window of `operand`, the element chosen
# by `select_prim` (ge: the first maximum, le: the first minimum) receives the window's
# `source` value, summed where windows overlap. The gradient of a max (min) pool.
select_and_scatter_add_p = Primitive("select_and_scatter_add")


def _select_and_scatter_add_abstract_eval(source, operand, *, select_prim, window_dimensions,
                                          window_strides, padding):
  name = "select_and_scatter_add"
  if select_prim not in (elementwise.ge_p, elementwise.le_p):
    raise TypeError(f"{name} select_prim must be lax.ge_p or lax.le_p, got {select_prim}.")
  utils.check_dtype(name, operand, _ordered)
  if source.dtype != operand.dtype:
    raise TypeError(f"{name} requires source and operand to have the same dtype, got "
                    f"{source.str_short()} and {operand.str_short()}.")
  ones = (1,) * operand.ndim
  _check_window_params(name, operand, window_dimensions, window_strides, padding, ones, ones)
  expected = _window_out_shape(operand.shape, window_dimensions, window_strides, padding, ones,
                               ones)
  if source.shape != expected:
    raise TypeError(f"{name} source must have the shape of the windowed operand {expected}, "
                    f"got {source.str_short()} for operand {operand.str_short()}.")
  return ShapedArray(operand.shape, operand.dtype, operand.weak_type)


def _select_and_scatter_add_lowering(ctx, source, operand, *, select_prim, window_dimensions,
                                     window_strides, padding):
  s_aval, x_aval = ctx.avals_in
  out_aval, = ctx.avals_out
  scalar = ShapedArray((), x_aval.dtype)
  # NB: as JAX on CPU and GPU (XLA bugs b/161704903, b/182390722): pad the operand with the
  # select's identity and select_and_scatter without padding, then slice the padding off.
  identity = max_identity if select_prim is elementwise.ge_p else min_identity
  padded_shape = x_aval.shape if not any(lo or hi for lo, hi in padding) else tuple(
      d + lo + hi for d, (lo, hi) in zip(x_aval.shape, padding))   # NB: d may be dynamic
  padded_aval = x_aval.update(shape=padded_shape)
  if padded_shape != x_aval.shape:
    lo = ", ".join(str(p[0]) for p in padding)
    hi = ", ".join(str(p[1]) for p in padding)
    init = ctx.constant(identity(x_aval.dtype), scalar)
    interior = ", ".join(["0"] * x_aval.ndim)
    r = ctx.fb.fresh()
    ctx.fb.emit(f"{r} = stablehlo.pad {operand}, {init}, low = [{lo}], high = [{hi}], "
                f"interior = [{interior}] : ({ir_type(x_aval)}, {ir_type(scalar)}) -> "
                f"{ir_type(padded_aval)}")
    operand = r
  direction = "GE" if select_prim is elementwise.ge_p else "LE"
  pred = ShapedArray((), dtypes.bool_)
  select = ctx.region([scalar, scalar], [pred],
                      lambda a, b: [emit_compare(ctx, direction, a, b, scalar)])
  add = "stablehlo.or" if x_aval.dtype == dtypes.bool_ else "stablehlo.add"
  scatter = ctx.region([scalar, scalar], [scalar],
                       lambda a, b: [ctx.elementwise(add, a, b, aval=scalar)])
  zeros = ((0, 0),) * x_aval.ndim
  attrs = (f"padding = {_padding_attr(zeros)}, window_dimensions = "
           f"{i64_array(window_dimensions)}, window_strides = {i64_array(window_strides)}")
  out = ctx.op("stablehlo.select_and_scatter", [operand, source, ctx.constant(0, scalar)],
               [padded_aval], attrs=attrs, regions=[select, scatter],
               operand_avals=[padded_aval, s_aval, scalar])[0]
  if padded_shape == x_aval.shape:
    return [out]
  start = [lo for lo, _ in padding]
  limit = [lo + d for (lo, _), d in zip(padding, x_aval.shape)]
  return ctx.op("stablehlo.slice", [out], [out_aval],
                attrs=f"start_indices = {i64_array(start)}, limit_indices = "
                      f"{i64_array(limit)}, strides = {i64_array((1,) * x_aval.ndim)}",
                operand_avals=[padded_aval])


def _select_and_scatter_add_jvp(primals, tangents, *, select_prim, window_dimensions,
                                window_strides, padding):
  """Linear in `source`; the operand only chooses where the values go (JAX's rule)."""
  source, operand = primals
  t_source, _ = tangents
  params = dict(select_prim=select_prim, window_dimensions=window_dimensions,
                window_strides=window_strides, padding=padding)
  out = select_and_scatter_add_p.bind(source, operand, **params)
  if type(t_source) is ad.Zero:
    return out, ad.Zero(ad.tangent_aval(core.get_aval(out)))
  return out, select_and_scatter_add_p.bind(t_source, operand, **params)


def _select_and_scatter_add_transpose(ct, source, operand, *, select_prim, window_dimensions,
                                      window_strides, padding):
  """The transpose in `source` gathers the cotangent at each window's selected element."""
  if ad.is_undefined_primal(operand):
    raise ValueError("select_and_scatter_add is not linear in its operand (it only selects "
                     "positions); transpose it in `source` only.")
  if type(ct) is ad.Zero:
    return [ad.Zero(source.aval), None]
  ones = (1,) * len(window_dimensions)
  return [select_and_gather_add_p.bind(
      ct, operand, select_prim=select_prim, window_dimensions=window_dimensions,
      window_strides=window_strides, padding=padding, base_dilation=ones,
      window_dilation=ones), None]


select_and_scatter_add_p.def_abstract_eval(_select_and_scatter_add_abstract_eval)
lowering.register_lowering(select_and_scatter_add_p, _select_and_scatter_add_lowering)
ad.primitive_jvps[select_and_scatter_add_p] = _select_and_scatter_add_jvp
ad.primitive_transposes[select_and_scatter_add_p] = _select_and_scatter_add_transpose


def _select_and_scatter_add_batch_rule(batched_args, batch_dims, *, select_prim,
                                       window_dimensions, window_strides, padding):
  """JAX's `_select_and_scatter_add_batch_rule`: source and operand aligned at one batch
  dim, with a size-1 window there (so the source keeps the batch size)."""
  (source, operand), bdim = _common_bdim(batched_args, batch_dims)
  params = _insert_window_dim(bdim, window_dimensions, window_strides, padding)
  return select_and_scatter_add_p.bind(source, operand, select_prim=select_prim,
                                       **params), bdim


batching.primitive_batchers[select_and_scatter_add_p] = _select_and_scatter_add_batch_rule


def select_and_scatter_add(source: Any, operand: Any, select_prim: Primitive,
                           window_dimensions: Sequence[int], window_strides: Sequence[int],
                           padding: str | Sequence[tuple[int, int]]) -> Any:
  """Scatters `source` to the element each window of `operand` selects, adding where
  windows overlap (JAX's `_select_and_scatter_add`; the gradient of a max or min pool).

  Args:
    source: array `T[*o]`, `o` the shape of `reduce_window_max(operand, ...)` with the same
      window params.
    operand: array `T[*s]`, T bool, integer or floating.
    select_prim: `lax.ge_p` (selects the first maximum of each window) or `lax.le_p` (the
      first minimum).
    window_dimensions, window_strides: per dimension.
    padding: (lo, hi) pairs or a padding string; padding never gets selected.

  Returns:
    `T[*s]`: zero where no window selected the element.

  Raises:
    TypeError: if the dtypes differ, `source` has the wrong shape, or `select_prim` is not
      ge/le.
  """
  params = _window_params("select_and_scatter_add", operand, window_dimensions,
                          window_strides, padding, None, None)
  return select_and_scatter_add_p.bind(
      source, operand, select_prim=select_prim, window_dimensions=params["window_dimensions"],
      window_strides=params["window_strides"], padding=params["padding"])


# ---------------------------------------------------------------------------
# select_and_gather_add(tangents, operand): for each window of `operand` (with the params of
# reduce_window_max/min), the element of `tangents` at the position `select_prim` chooses
# (ge: the first maximum, le: the first minimum). The JVP of reduce_window_max/min; its
# transpose is select_and_scatter_add.
select_and_gather_add_p = Primitive("select_and_gather_add")


def _select_and_gather_add_abstract_eval(tangents, operand, *, select_prim, window_dimensions,
                                         window_strides, padding, base_dilation,
                                         window_dilation):
  name = "select_and_gather_add"
  if select_prim not in (elementwise.ge_p, elementwise.le_p):
    raise TypeError(f"{name} select_prim must be lax.ge_p or lax.le_p, got {select_prim}.")
  utils.check_dtype(name, operand, _ordered)
  if tangents.shape != operand.shape or tangents.dtype != operand.dtype:
    raise TypeError(f"{name} tangents and operand must have the same shape and dtype, got "
                    f"{tangents.str_short()} and {operand.str_short()}.")
  _check_window_params(name, operand, window_dimensions, window_strides, padding,
                       base_dilation, window_dilation)
  shape = _window_out_shape(operand.shape, window_dimensions, window_strides, padding,
                            base_dilation, window_dilation)
  return ShapedArray(shape, tangents.dtype, tangents.weak_type)


def _select_and_gather_add_lowering(ctx, tangents, operand, *, select_prim, window_dimensions,
                                    window_strides, padding, base_dilation, window_dilation):
  """JAX's `_select_and_gather_add_using_variadic_reducewindow`: one two-operand
  `stablehlo.reduce_window` over (operand, tangents) pairs whose region keeps the pair with
  the selected operand value."""
  t_aval, x_aval = ctx.avals_in
  out_aval, = ctx.avals_out
  scalar = ShapedArray((), x_aval.dtype)
  identity = max_identity if select_prim is elementwise.ge_p else min_identity
  init_x = ctx.constant(identity(x_aval.dtype), scalar)
  init_t = ctx.constant(0, scalar)
  direction = "GE" if select_prim is elementwise.ge_p else "LE"
  pred = ShapedArray((), dtypes.bool_)

  def body(kx, vx, ky, vy):
    which = emit_compare(ctx, direction, kx, ky, scalar)
    out = []
    for a, b in ((kx, ky), (vx, vy)):
      r = ctx.fb.fresh()
      ctx.fb.emit(f"{r} = stablehlo.select {which}, {a}, {b} : {ir_type(pred)}, "
                  f"{ir_type(scalar)}")
      out.append(r)
    return out

  region = ctx.region([scalar] * 4, [scalar, scalar], body)
  attrs = (f"base_dilations = {i64_array(base_dilation)}, padding = {_padding_attr(padding)}, "
           f"window_dilations = {i64_array(window_dilation)}, window_dimensions = "
           f"{i64_array(window_dimensions)}, window_strides = {i64_array(window_strides)}")
  outs = ctx.op("stablehlo.reduce_window", [operand, tangents, init_x, init_t],
                [out_aval.update(dtype=x_aval.dtype), out_aval], attrs=attrs, regions=[region],
                operand_avals=[x_aval, t_aval, scalar, scalar])
  return [outs[1]]


def _select_and_gather_add_jvp(primals, tangents, *, select_prim, window_dimensions,
                               window_strides, padding, base_dilation, window_dilation):
  """Linear in `tangents`; the operand only selects (JAX's rule)."""
  t, operand = primals
  t_dot, _ = tangents
  params = dict(select_prim=select_prim, window_dimensions=window_dimensions,
                window_strides=window_strides, padding=padding, base_dilation=base_dilation,
                window_dilation=window_dilation)
  out = select_and_gather_add_p.bind(t, operand, **params)
  if type(t_dot) is ad.Zero:
    return out, ad.Zero(ad.tangent_aval(core.get_aval(out)))
  return out, select_and_gather_add_p.bind(t_dot, operand, **params)


def _select_and_gather_add_transpose(ct, tangents, operand, *, select_prim, window_dimensions,
                                     window_strides, padding, base_dilation, window_dilation):
  """JAX's `_select_and_gather_add_transpose`: scatter the cotangent back to the selected
  elements with select_and_scatter_add; base dilation by padding the operand with holes that
  are never selected, then striding them away."""
  if ad.is_undefined_primal(operand):
    raise ValueError("select_and_gather_add is not linear in its operand (it only selects "
                     "positions); transpose it in `tangents` only.")
  if any(d != 1 for d in window_dilation):
    raise NotImplementedError(
        f"VJP not implemented for select_and_gather (MaxPool) with window dilation, got "
        f"window_dilation={window_dilation}. Use window_dilation=1 for reverse mode (forward "
        f"mode, jvp, supports it).")
  if type(ct) is ad.Zero:
    return [ad.Zero(tangents.aval), None]
  has_base_dilation = any(d != 1 for d in base_dilation)
  if has_base_dilation:
    dtype = core.get_aval(operand).dtype
    identity = max_identity if select_prim is elementwise.ge_p else min_identity
    operand = pad(operand, identity(dtype)[()], tuple((0, 0, d - 1) for d in base_dilation))
  result = select_and_scatter_add_p.bind(
      ct, operand, select_prim=select_prim, window_dimensions=window_dimensions,
      window_strides=window_strides, padding=padding)
  if has_base_dilation:
    shape = core.get_aval(result).shape
    result = _slice(result, (0,) * len(shape), shape, base_dilation)
  return [result, None]


select_and_gather_add_p.def_abstract_eval(_select_and_gather_add_abstract_eval)
lowering.register_lowering(select_and_gather_add_p, _select_and_gather_add_lowering)
ad.primitive_jvps[select_and_gather_add_p] = _select_and_gather_add_jvp
ad.primitive_transposes[select_and_gather_add_p] = _select_and_gather_add_transpose


def _select_and_gather_add_batch_rule(batched_args, batch_dims, *, select_prim,
                                      window_dimensions, window_strides, padding,
                                      base_dilation, window_dilation):
  """JAX's `_select_and_gather_add_batching_rule`: tangents and operand aligned at one
  batch dim, with a size-1 window there."""
  (tangents, operand), bdim = _common_bdim(batched_args, batch_dims)
  params = _insert_window_dim(bdim, window_dimensions, window_strides, padding, base_dilation,
                              window_dilation)
  return select_and_gather_add_p.bind(tangents, operand, select_prim=select_prim,
                                      **params), bdim


batching.primitive_batchers[select_and_gather_add_p] = _select_and_gather_add_batch_rule


def select_and_gather_add(tangents: Any, operand: Any, select_prim: Primitive,
                          window_dimensions: Sequence[int], window_strides: Sequence[int],
                          padding: str | Sequence[tuple[int, int]],
                          base_dilation: Sequence[int] | None = None,
                          window_dilation: Sequence[int] | None = None) -> Any:
  """Gathers from `tangents` the element each window of `operand` selects (JAX's
  `_select_and_gather_add`; the JVP of a max or min pool).

  Args:
    tangents: array `T[*s]`, of the shape and dtype of `operand`.
    operand: array `T[*s]`, T bool, integer or floating.
    select_prim: `lax.ge_p` (selects the first maximum of each window) or `lax.le_p` (the
      first minimum).
    window_dimensions, window_strides: per dimension.
    padding: (lo, hi) pairs or a padding string; padding and base-dilation holes are never
      selected (and contribute 0).
    base_dilation, window_dilation: positive dilations per dimension; None means 1.

  Returns:
    `T[*o]`, shaped as `reduce_window_max(operand, ...)` with the same window params.

  Raises:
    TypeError: if the shapes or dtypes differ, or `select_prim` is not ge/le.

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> x = np.array([1., 3., 2., 0.], np.float32); t = np.array([10., 20., 30., 40.], np.float32)
    >>> np.asarray(lax.select_and_gather_add(t, x, lax.ge_p, (2,), (2,), 'VALID'))
    array([20., 30.], dtype=float32)
  """
  params = _window_params("select_and_gather_add", operand, window_dimensions, window_strides,
                          padding, base_dilation, window_dilation)
  return select_and_gather_add_p.bind(tangents, operand, select_prim=select_prim, **params)


def reduce_window_shape_tuple(operand_shape: Sequence[int], window_dimensions: Sequence[int],
                              window_strides: Sequence[int],
                              padding: Sequence[tuple[int, int]],
                              base_dilation: Sequence[int] | None = None,
                              window_dilation: Sequence[int] | None = None) -> tuple[int, ...]:
  """The output shape of a windowed reduction (JAX's `lax.reduce_window_shape_tuple`): per
  dimension `max(0, (padded - window) // stride + 1)`, with no other check, as JAX's (stax
  layers pass a batch dimension of -1, which gives 0)."""
  n = len(operand_shape)
  shape = _dilate_shape(tuple(operand_shape), tuple(base_dilation or (1,) * n))
  window = _dilate_shape(tuple(window_dimensions), tuple(window_dilation or (1,) * n))
  padded = [d + lo + hi for d, (lo, hi) in zip(shape, padding)]
  return tuple(shape_poly.max_dim((p - w) // s + 1, 0)
               for p, w, s in zip(padded, window, window_strides))
