"""Program-structure utilities: `optimization_barrier`, `composite`, the `copy` primitive, and
token values (`create_token`, `after_all`), and `dce_sink`.
(`platform_dependent`, a `cond`, is in `lax/control_flow/conditionals.py`.)"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

from stagecraft import core, dtypes, errors, shape_poly, tree_util
from stagecraft.core import ShapedArray
from stagecraft.interpreters import ad, batching, lowering
from stagecraft.interpreters import partial_eval as pe
from stagecraft.lax.elementwise import add, mul, rem, sub
from stagecraft.lax.elementwise import convert_element_type
from stagecraft.lax.shape import broadcast_in_dim, concatenate, full

__all__ = ["optimization_barrier_p", "optimization_barrier", "composite_p", "composite",
           "rng_uniform_p", "rng_uniform", "dim_as_value_p", "dimension_as_value",
           "shape_as_value", "copy_p", "create_token_p", "create_token", "after_all_p",
           "after_all", "dce_sink_p", "dce_sink"]

# optimization_barrier(*operands): the identity, which XLA may not move computations across
# (stablehlo.optimization_barrier).
optimization_barrier_p = core.Primitive("optimization_barrier")
optimization_barrier_p.multiple_results = True
optimization_barrier_p.def_abstract_eval(lambda *avals: list(avals))
lowering.register_lowering(
    optimization_barrier_p,
    lambda ctx, *xs: ctx.op("stablehlo.optimization_barrier", list(xs)) if xs else [])


def _optimization_barrier_jvp(primals, tangents):
  # Primals and tangents each pass a barrier of their own (one joint barrier would make the
  # primal outputs depend on the tangents, which linearize cannot split).
  nz = [t for t in tangents if type(t) is not ad.Zero]
  outs = optimization_barrier_p.bind(*primals)
  it = iter(optimization_barrier_p.bind(*nz) if nz else [])
  return outs, [t if type(t) is ad.Zero else next(it) for t in tangents]


def _optimization_barrier_transpose(cts, *args):
  nz = [c for c in cts if type(c) is not ad.Zero]
  outs = iter(optimization_barrier_p.bind(*nz))
  return [None if not ad.is_undefined_primal(a) else (c if type(c) is ad.Zero else next(outs))
          for a, c in zip(args, cts)]


ad.primitive_jvps[optimization_barrier_p] = _optimization_barrier_jvp
ad.primitive_transposes[optimization_barrier_p] = _optimization_barrier_transpose
# As JAX: the barrier of the batched values; every batch dim stays.
batching.primitive_batchers[optimization_barrier_p] = (
    lambda args, dims: (optimization_barrier_p.bind(*args), list(dims)))


def optimization_barrier(operand: Any) -> Any:
  """Returns `operand` (a pytree of arrays) unchanged, as a barrier XLA does not optimize
  across (e.g. to stop rematerialized values from being merged with their originals)."""
  leaves, treedef = tree_util.tree_flatten_traced(operand)   # typed keys: their data
  return tree_util.tree_unflatten(treedef, optimization_barrier_p.bind(*leaves))


# copy(x): a copy of `x`, JAX's `lax.copy_p`. It stands for making a copy of a run-time array
# (`jnp.array(x, copy=True)` stages it for a tracer), so it stays in jaxprs: nothing
# simplifies it away. Run eagerly it gives a new buffer (XLA allocates the result of a
# program apart from its undonated operands).
copy_p = core.Primitive("copy")
# impl: the generic one (a one-equation program)
copy_p.def_abstract_eval(lambda x: x)   # the aval as it is: weak type and sharding kept
lowering.register_lowering(copy_p, lambda ctx, x: [x])
# Linear: the JVP copies the tangent; the transpose copies the cotangent (as JAX's).
ad.deflinear2(copy_p, lambda ct, x: [copy_p.bind(ct)])
batching.defvectorized(copy_p)
# DCE: the default (pure).


# Token values (JAX's `create_token_p` / `after_all_p`): `create_token()` makes a token with no
# preconditions, `after_all(*tokens)` one that comes after all of its operands. Their aval is
# `core.abstract_token` (printed `Tok`), lowered to `!stablehlo.token`; outside a trace each
# runs as a one-equation program whose token result comes back as a `core.Token`.
create_token_p = core.Primitive("create_token")
create_token_p.def_abstract_eval(lambda *_: core.abstract_token)
lowering.register_lowering(
    create_token_p, lambda ctx, *_: ctx.op("stablehlo.create_token", [], operand_avals=[]))
# No JVP rule, as in JAX (it has no operands, so no tracer of a transformation reaches it),
# no batching rule (same reason) and the default DCE: it has no effect.


def _after_all_abstract_eval(*avals):
  if any(a is not core.abstract_token for a in avals):
    raise TypeError("Arguments to after_all must be tokens")
  return core.abstract_token


after_all_p = core.Primitive("after_all")
after_all_p.def_abstract_eval(_after_all_abstract_eval)
lowering.register_lowering(after_all_p, lambda ctx, *toks: ctx.op("stablehlo.after_all",
                                                                  list(toks)))


def _after_all_jvp(primals, tangents):
  # Tokens have no derivative: differentiating through after_all is an error (JAX's words).
  raise NotImplementedError("Differentiation rule for 'after_all' not implemented")


ad.primitive_jvps[after_all_p] = _after_all_jvp
# No batching rule (as JAX): a token cannot be mapped by vmap, so no operand is ever batched.


def create_token(_: Any = None) -> Any:
  """A new token with no preconditions (JAX's `lax.create_token`), to order effects by
  data dependence. The argument is ignored (JAX keeps it for backward compatibility).

  Returns a `core.Token` outside a trace, else a tracer of aval `abstract_token` (`Tok`);
  lowered to `stablehlo.create_token`."""
  return create_token_p.bind()


def after_all(*operands: Any) -> Any:
  """A token that comes after all of `operands` (JAX's `lax.after_all`, XLA's AfterAll);
  with no operands, a fresh token.

  Raises:
    TypeError: some operand is not a token ("Arguments to after_all must be tokens").
  """
  return after_all_p.bind(*operands)


# ---------------------------------------------------------------------------
# composite(decomposition, name, version): JAX's `composite` primitive, a named op whose
# meaning is its decomposition (a traced call). Lowered as `stablehlo.composite "<name>"`
# with the decomposition as the private function `@<name>` (the call's constants are its
# leading arguments) and the keyword arguments as its `composite_attributes`. Not
# differentiable (JAX's ValueError) nor batchable (JAX's NotImplementedError).
composite_p = core.Primitive("composite")
composite_p.multiple_results = True
core.def_closed_call(composite_p, "jaxpr")

_TRACER_ATTRIBUTE = (
    "Found a JAX Tracer as an attribute in the decomposition for the composite op '{}'. "
    "This means that the decomposition function closes over a value that is involved in "
    "a JAX transformation. Any values that aren't explicitly known at compile time must be "
    "explicitly passed as arguments to the composite.\n\nNote: If you are passing jax "
    "arrays as attributes, use numpy arrays instead.\nSee "
    "https://docs.jax.dev/en/latest/errors.html#jax.errors.UnexpectedTracerError")
_TRACER_CONSTANT = (
    "Found a JAX Tracer as a constant in the decomposition for the composite op '{}'. This "
    "means that the decomposition function closes over a value that is involved in a JAX "
    "transformation. Any values that aren't explicitly known at compile time must be "
    "explicitly passed as arguments to the composite.\nSee "
    "https://docs.jax.dev/en/latest/errors.html#jax.errors.UnexpectedTracerError")


def _composite_attribute(v: Any) -> str:
  """The MLIR attribute text of one composite attribute value (JAX's `ir_attribute`)."""
  if isinstance(v, (bool, np.bool_)):
    return "true" if v else "false"
  if isinstance(v, (int, np.integer)) and not isinstance(v, np.ndarray):
    dt = np.dtype(v.dtype) if isinstance(v, np.integer) else np.dtype(np.int64)
    return f"{int(v)} : {lowering.elt_type(dt)}"
  if isinstance(v, (float, np.floating)):
    dt = np.dtype(v.dtype) if isinstance(v, np.floating) else np.dtype(np.float64)
    return f"{lowering.dense_scalar(v, dt)} : {lowering.elt_type(dt)}"
  if isinstance(v, str):
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
  if isinstance(v, np.dtype) or (isinstance(v, type) and issubclass(v, np.generic)):
    return lowering.elt_type(np.dtype(v))
  if isinstance(v, np.ndarray):
    return (f"{lowering.dense_array(v)} : "
            f"{lowering.ir_type(ShapedArray(v.shape, v.dtype))}")
  if isinstance(v, (tuple, list)):
    return "[" + ", ".join(_composite_attribute(e) for e in v) + "]"
  raise TypeError(f"Unsupported composite attribute type: {type(v)}")


def _composite_lowering(ctx, *args, name, attributes, version, jaxpr):
  module = ctx.module
  fname = module.unique_func_name(name)
  module.funcs.append(lowering.lower_jaxpr_to_fun(module, fname, jaxpr.jaxpr,
                                                  consts=jaxpr.consts))
  attrs = [f"decomposition = @{fname}", f'name = "{name}"']
  kept = [(k, text) for k, text in attributes if text is not None]
  if kept:
    attrs.insert(0, "composite_attributes = {" + ", ".join(f"{k} = {v}" for k, v in
                                                         sorted(kept)) + "}")
  if version:
    attrs.append(f"version = {int(version)} : i32")
  return ctx.op("stablehlo.composite", list(args), attrs=", ".join(attrs))


def _composite_jvp(primals, tangents, **params):
  raise ValueError("JVP rule for composite not implemented. You can use `jax.custom_jvp` to "
                   "add support. See "
                   "https://docs.jax.dev/en/latest/_autosummary/jax.custom_jvp.html")


def _composite_transpose(*args, **params):
  raise ValueError("Transpose rule for composite not implemented. You can use"
                   "`jax.custom_jvp` or `jax.custom_vjp` to add support. See "
                   "https://docs.jax.dev/en/latest/_autosummary/jax.custom_jvp.html")


def _composite_batch(args, dims, **params):
  # NB: as JAX's, a composite cannot be vmapped (its message).
  raise NotImplementedError("Batching rule for 'composite' not implemented")


lowering.register_lowering(composite_p, _composite_lowering)
batching.primitive_batchers[composite_p] = _composite_batch
ad.primitive_jvps[composite_p] = _composite_jvp
ad.primitive_transposes[composite_p] = _composite_transpose


def composite(decomposition: Callable, name: str, version: int = 0) -> Callable:
  """Marks `decomposition` as the named composite op `name` (JAX's `lax.composite`).

  The returned function traces `decomposition` on its positional arguments (any pytree of
  arrays) and binds one `composite` equation; its keyword arguments are static attributes
  (Python ints/floats/bools/strs, NumPy dtypes and arrays, or None, which is dropped),
  passed to `decomposition` and written as the op's `composite_attributes`. Lowered as a
  `stablehlo.composite "<name>"` whose decomposition is the private function `@<name>`;
  results are those of `decomposition` (same pytree, shapes and dtypes).

  Raises:
    UnexpectedTracerError: if an attribute is a traced value, or `decomposition` closes
      over one.
    ValueError: when differentiated (JAX has no JVP or transpose rule for composites).
    NotImplementedError: when vmapped (nor a batching rule).
  """
  @functools.wraps(decomposition)
  def wrapped(*args, **kwargs):
    if any(isinstance(v, core.Tracer) for v in tree_util.tree_leaves(list(kwargs.values()))):
      raise errors.UnexpectedTracerError(_TRACER_ATTRIBUTE.format(name))
    flat, in_tree = tree_util.tree_flatten(args)
    avals = [core.get_aval(x) for x in flat]
    out_tree = []

    def flat_fun(*xs):
      out = decomposition(*tree_util.tree_unflatten(in_tree, xs), **kwargs)
      leaves, tree = tree_util.tree_flatten(out)
      out_tree.append(tree)
      return leaves
    jaxpr, consts = pe.trace_to_jaxpr(flat_fun, avals)
    if any(isinstance(c, core.Tracer) for c in consts):
      raise errors.UnexpectedTracerError(_TRACER_CONSTANT.format(name))
    closed = pe.close_jaxpr(pe.convert_constvars_jaxpr(jaxpr), ())
    attributes = tuple(
        (k, None if v is None else _composite_attribute(v)) for k, v in kwargs.items())
    outs = composite_p.bind(*consts, *flat, name=name, attributes=attributes,
                            version=version, jaxpr=closed)
    return tree_util.tree_unflatten(out_tree[0], outs)
  return wrapped


# rng_uniform(a, b, shape): XLA's stateful uniform generator (stablehlo.rng, UNIFORM);
# not reproducible across runs or backends — use stagecraft.random for that.
rng_uniform_p = core.Primitive("rng_uniform")


def _rng_uniform_abstract_eval(a, b, *, shape):
  # JAX's checks, messages and weak type.
  if a.dtype != b.dtype:
    raise ValueError(f"Arguments to rng_uniform must have identical dtypes, got {a.dtype} "
                     f"and {b.dtype}.")
  if a.shape or b.shape:
    raise ValueError(f"Arguments to rng_uniform must be scalars; got shapes {a.shape} and "
                     f"{b.shape}.")
  return ShapedArray(shape, a.dtype, a.weak_type and b.weak_type)


def _rng_uniform_lowering(ctx, a, b, *, shape):
  n = len(shape)
  dims = ctx.fb.fresh()
  ctx.fb.emit(f"{dims} = stablehlo.constant {lowering.dense_i64(shape)}")
  return ctx.op("stablehlo.rng", [a, b, dims],
                attrs="rng_distribution = #stablehlo<rng_distribution UNIFORM>",
                operand_avals=[*ctx.avals_in, ShapedArray((n,), dtypes.int64)])


rng_uniform_p.def_abstract_eval(_rng_uniform_abstract_eval)
lowering.register_lowering(rng_uniform_p, _rng_uniform_lowering)
ad.defjvp_zero(rng_uniform_p)


def _rng_uniform_batch(args, dims, *, shape):
  """Batched bounds (JAX has no rule): one draw of shape `(batch, *shape)`, mapped from the
  unit interval (floats: `a + (b - a) u`, u in [0, 1)) or reduced modulo `b - a` (integers,
  from draws in [0, iinfo.max), so with a negligible bias for small ranges) into each batch
  element's `[a, b)`."""
  a, b = args
  size = next(core.get_aval(x).shape[0] for x, d in zip(args, dims) if d is not None)
  dtype = core.get_aval(a).dtype
  out_shape = (size, *shape)

  def bound(x, d):   # u[batch] -> T[batch, *shape]
    if d is None:
      return x
    return broadcast_in_dim(x, out_shape, (0,))
  a, b = bound(a, dims[0]), bound(b, dims[1])
  if dtypes.is_integer(dtype):
    hi = np.asarray(dtypes.iinfo(dtype).max, dtype)[()]
    r = rng_uniform_p.bind(np.zeros((), dtype)[()], hi, shape=out_shape)
    return add(rem(r, sub(b, a)), a), 0
  u = rng_uniform_p.bind(np.zeros((), dtype)[()], np.ones((), dtype)[()], shape=out_shape)
  return add(a, mul(sub(b, a), u)), 0


batching.primitive_batchers[rng_uniform_p] = _rng_uniform_batch


def rng_uniform(a: Any, b: Any, shape: tuple[int, ...]) -> Any:
  """Uniform samples in [a, b) of `shape` from XLA's stateful generator.

  Args:
    a, b: scalars of one dtype T (floating or integer); a Python scalar is an array of its
      default dtype (float32, int32; 64-bit under x64): no promotion.
    shape: the output shape.

  Returns:
    `T[*shape]`, weakly typed when both bounds are. Not reproducible; use
    `stagecraft.random` for reproducible numbers.

  Raises:
    ValueError: if the dtypes differ or a bound is not a scalar (JAX's messages).
  """
  return rng_uniform_p.bind(a, b, shape=tuple(int(d) for d in shape))


# dim_as_value[dim=d](): the value of the dimension `d` (a symbolic dimension of a program
# traced by stagecraft.export, JAX's shape polymorphism) as an int32 scalar (int64 under
# x64). stagecraft.export lowers it from the sizes of the arguments; elsewhere a constant
# dimension lowers to a constant.


def dimension_as_value(d: Any) -> Any:
  """The dimension `d` (an int or a symbolic dimension) as a scalar integer array, computed
  at run time for a symbolic one (JAX's `core.dimension_as_value`)."""
  if not shape_poly.is_symbolic_dim(d):
    return np.asarray(d, dtypes.canonicalize_dtype(np.int64))[()]
  return dim_as_value_p.bind(dim=d)


def shape_as_value(shape: Sequence[Any]) -> Any:
  """`shape` (ints and symbolic dimensions) as a 1-D integer array `int32[len(shape)]`
  (int64 under x64), as JAX's `lax.shape_as_value`: a NumPy array when every dimension is
  an int, an Array whose symbolic entries are computed at run time otherwise.

    >>> shape_as_value((3, 4))
    array([3, 4], dtype=int32)
  """
  dtype = dtypes.canonicalize_dtype(np.int64)
  shape = tuple(shape)
  if not shape:
    return full((0,), 0, dtype)
  if not any(shape_poly.is_symbolic_dim(d) for d in shape):
    return np.array([int(d) for d in shape], dtype)
  parts = [broadcast_in_dim(convert_element_type(dimension_as_value(d), dtype), (1,), ())
           for d in shape]
  return concatenate(parts, 0)


def _dim_as_value_lowering(ctx, *, dim):
  if shape_poly.is_symbolic_dim(dim):
    raise NotImplementedError(f"dim_as_value of the symbolic dimension '{dim}' lowers only "
                              f"inside stagecraft.export.")
  return [ctx.constant(int(dim), ctx.avals_out[0])]


dim_as_value_p = core.Primitive("dim_as_value")
# impl: the generic one
dim_as_value_p.def_abstract_eval(
    lambda *, dim: ShapedArray((), dtypes.canonicalize_dtype(np.int64), weak_type=True))
lowering.register_lowering(dim_as_value_p, _dim_as_value_lowering)
ad.defjvp_zero(dim_as_value_p)
batching.primitive_batchers[dim_as_value_p] = (
    lambda axis_size, args, dims, *, dim: (dim_as_value_p.bind(dim=dim), batching.not_mapped))
# DCE: the default (pure)
shape_poly.dimension_as_value_hook = dimension_as_value   # `_DimExpr.__jax_array__`


# ---------------------------------------------------------------------------
# dce_sink(x): an effectful use of `x` with no results, so that dead-code elimination of
# jaxprs keeps the equations that compute `x` (JAX's `lax.dce_sink`). With
# `prevent_mlir_dce=True` it also survives in the lowered program, as a side-effecting
# `stablehlo.custom_call @dce_sink` (an FFI target jaxlib registers); otherwise it lowers to
# nothing and XLA is free to drop the computation.


class NoDCEEffect(core.Effect):
  """The effect of a `dce_sink` equation: it keeps the equation (and its operand's
  computation) through jaxpr dead-code elimination. Unordered: no token is threaded."""
  __slots__ = ()

  def __hash__(self):
    return hash(type(self))

  def __eq__(self, other):
    return type(self) is type(other)


no_dce_effect = NoDCEEffect()

dce_sink_p = core.Primitive("dce_sink")
dce_sink_p.multiple_results = True
dce_sink_p.def_impl(lambda x, **_: [])
dce_sink_p.def_effectful_abstract_eval(lambda x, **_: ([], {no_dce_effect}))


def _dce_sink_lowering(ctx, x, *, prevent_mlir_dce):
  if not prevent_mlir_dce:
    return []
  nd = len(ctx.avals_in[0].shape)
  minor_to_major = ", ".join(str(d) for d in range(nd - 1, -1, -1))
  layout = f"dense<[{minor_to_major}]> : tensor<{nd}xindex>" if nd else "dense<> : tensor<0xindex>"
  attrs = (f'backend_config = "", call_target_name = "dce_sink", has_side_effect = true, '
           f'mhlo.backend_config = {{}}, operand_layouts = [{layout}], result_layouts = []')
  return ctx.op("stablehlo.custom_call", [x], [], attrs=attrs)


def _dce_sink_jvp(primals, tangents, **params):
  dce_sink_p.bind(*primals, **params)
  if type(tangents[0]) is not ad.Zero:
    dce_sink_p.bind(*tangents, **params)
  return [], []


def _dce_sink_transpose(cts, x, **params):
  # No results, so no cotangents: the operand's is zero.
  return [ad.Zero(x.aval) if ad.is_undefined_primal(x) else None]


lowering.register_lowering(dce_sink_p, _dce_sink_lowering)
ad.primitive_jvps[dce_sink_p] = _dce_sink_jvp
ad.primitive_transposes[dce_sink_p] = _dce_sink_transpose
# NB: as JAX's rule, a batched sink is dropped (its operand stays computed: its equation's
# result is then simply unused).
batching.primitive_batchers[dce_sink_p] = lambda args, dims, **_: ([], [])


def dce_sink(val: Any, *, prevent_mlir_dce: bool = False) -> None:
  """Marks every leaf of the pytree `val` as used, so that jaxpr dead-code elimination keeps
  the computation producing it (JAX's `lax.dce_sink`). Returns None.

  Args:
    val: a pytree of arrays (any shapes and dtypes).
    prevent_mlir_dce: also keep it in the compiled program (a side-effecting custom call
      `dce_sink`); by default the sink lowers to nothing.
  """
  leaves, _ = tree_util.tree_flatten(val)
  for leaf in leaves:
    dce_sink_p.bind(leaf, prevent_mlir_dce=prevent_mlir_dce)
