"""Shape primitives: `broadcast_in_dim`, `reshape`, `transpose`, `squeeze`, `rev`,
`concatenate`, `stack`/`unstack`, `split`, `pad`, `tile`, the static `slice` and `iota`, with
the wrappers composed of them (`broadcast`, `expand_dims`, `full`, `collapse`,
`slice_in_dim`, `broadcasted_iota`, ...).

Params have JAX's `lax`'s names and are tuples of Python ints (hashable and static): the
wrappers normalize what users pass (lists, negative axes). Where JAX's batching and
transpose rules (and `split`'s sizes) leave NumPy ints in params, so do these (JAX prints
them as `np.int64(1)`). The values of the
operand are only moved, never computed, so each primitive keeps the operand's dtype and weak
type (`iota` makes a strongly typed array). Each lowers to the StableHLO op of the same
meaning (`reshape` and `squeeze` both to `stablehlo.reshape`).

Autodiff: all are linear (pad in its operand and padding value jointly) and have JAX's
transposes: a broadcast or a tile sums, a pad slices, a slice pads, a concatenate slices, a
split concatenates, stack and unstack are each other's, the others invert (squeeze by a
broadcast_in_dim).
"""
from __future__ import annotations

import builtins
import contextlib
import math
import operator
import threading
from typing import Any, Iterator, Sequence

import numpy as np

from stagecraft import core, dtypes, shape_poly, sharding
from stagecraft import sharding as sharding_lib
from stagecraft.core import Primitive, ShapedArray
from stagecraft.errors import InconclusiveDimensionOperation
from stagecraft.sharding import type_sharding
from stagecraft.interpreters import ad, batching, lowering
from stagecraft.interpreters.lowering import i64_array
from stagecraft.lax import utils
from stagecraft.runtime import spmd
from stagecraft.lax import elementwise
from stagecraft.lax.elementwise import convert_element_type, select, sub

__all__ = ["broadcast_in_dim_p", "reshape_p", "transpose_p", "squeeze_p", "rev_p",
           "concatenate_p", "stack_p", "unstack_p", "split_p", "pad_p", "slice_p", "iota_p", "tile_p",
           "broadcast_in_dim", "broadcast", "reshape", "transpose", "squeeze", "expand_dims",
           "rev", "concatenate", "pad", "slice", "slice_in_dim", "index_in_dim", "iota",
           "broadcasted_iota", "full", "collapse", "broadcast_shapes", "broadcast_to_rank",
           "full_like", "empty", "split", "tile", "stack", "unstack"]
# NB: `recording_identity_broadcasts` is for the transformations (api.linear_transpose,
# custom_linear_solve's vecmat); it is not part of `stagecraft.lax`'s namespace.

# ---------------------------------------------------------------------------
# Shared helpers (also used by the other lax modules)


#: The arguments that JAX reads with `core.canonicalize_shape` (an int is a 1-d shape; its
#: message for other values).
_SHAPE_ARGS = frozenset({"shape", "new_sizes"})


def shape_error(shape: Any, context: str = "") -> TypeError:
  """JAX's error for a shape whose entries are not static integers (traced, float, None),
  naming where each traced entry came from (`context`: JAX's words for the argument, e.g.
  "argument of 'N' jnp.eye()")."""
  msg = f"Shapes must be 1D sequences of concrete values of integer type, got {shape}."
  if context:
    msg += f" {context}."
  traced = [d for d in shape if isinstance(d, core.Tracer)] if isinstance(shape, Sequence) else []
  if traced:
    msg += ("\nIf using `jit`, try using `static_argnums` or applying `jit` to smaller "
            "subfunctions.")
    msg += "".join(d._trace.origin_msg(d) for d in traced)
  return TypeError(msg)


def canonicalize_shape(name: str, arg_name: str, obj: Any) -> tuple[int, ...]:
  """`obj` (a sequence of integers) as a tuple of Python ints, for a static param. For a
  shape (`shape`, `new_sizes`), an int is a 1-d shape, as JAX's.

  Raises:
    TypeError: if `obj` is not a sequence of integers (a traced value included: shapes and
      indices of params must be static).
  """
  if isinstance(obj, (int, np.integer)):
    if arg_name in _SHAPE_ARGS:
      return (operator.index(obj),)
    raise TypeError(f"{name} {arg_name} must be a sequence of integers, got the integer "
                    f"{obj!r}. Wrap it in a tuple: ({obj!r},).")
  try:   # NB: symbolic dimensions (export) are kept as they are
    return tuple(shape_poly.index_dim(d) for d in obj)
  except TypeError as e:
    if arg_name in _SHAPE_ARGS:
      raise shape_error(obj) from e
    raise TypeError(f"{name} {arg_name} must be a sequence of integers, got {obj!r}. Pass "
                    f"a tuple of static Python ints.") from e


def check_shapelike(name: str, arg_name: str, obj: Any) -> None:
  """Raises TypeError unless `obj` is a tuple of non-negative integers (Python ints, or NumPy
  ints as JAX's batching and transpose rules leave in some params) (a valid param)."""
  if type(obj) is not tuple or not all(type(d) is int or isinstance(d, np.integer)
                                       for d in obj):
    if type(obj) is tuple and all(shape_poly.is_symbolic_dim(d) or type(d) is int
                                  for d in obj):
      return   # symbolic dimensions (export), each at least 1
    raise TypeError(f"{name} {arg_name} must be a tuple of Python ints, got {obj!r}. Call "
                    f"the wrapper `lax.{name}`, which normalizes it.")
  if not all(d >= 0 for d in obj):
    raise TypeError(f"{name} {arg_name} must have every element be nonnegative, got {obj}.")


def is_staged_value(x: Any) -> bool:
  """True for values that are already arrays of this library (Array, tracers), for which
  the wrappers may skip an identity operation, as JAX's do; host values are always bound so
  the result is an Array."""
  return not isinstance(x, (np.ndarray, np.generic)) and type(x) not in dtypes.python_scalar_types


def _shape_of(x: Any) -> tuple[int, ...]:
  return core.get_aval(x).shape


def _reduce_sum(x: Any, axes: tuple[int, ...]) -> Any:
  """`reduction.reduce_sum`, for the transposes of broadcast_in_dim and pad.

  NB: imported when a transpose runs, the one place this module reaches forward:
  broadcast_in_dim and reduce_sum are each other's transpose, and reduction.py builds on
  this module."""
  from stagecraft.lax.reduction import reduce_sum
  return reduce_sum(x, axes)


# ---------------------------------------------------------------------------
# broadcast_in_dim(operand, shape, broadcast_dimensions): operand dim i becomes result dim
# broadcast_dimensions[i] (of size 1 or shape[broadcast_dimensions[i]]).
broadcast_in_dim_p = Primitive("broadcast_in_dim")


def _broadcast_in_dim_abstract_eval(operand, *, shape, broadcast_dimensions, sharding=None):
  check_shapelike("broadcast_in_dim", "shape", shape)
  check_shapelike("broadcast_in_dim", "broadcast_dimensions", broadcast_dimensions)
  if operand.ndim != len(broadcast_dimensions):
    raise TypeError(f"broadcast_in_dim broadcast_dimensions must have length equal to operand "
                    f"ndim; got broadcast_dimensions {broadcast_dimensions} for operand "
                    f"{operand.str_short()} of ndim {operand.ndim}.")
  if len(shape) < operand.ndim:
    raise TypeError(f"broadcast_in_dim target broadcast shape must have equal or higher rank "
                    f"to the operand shape; got operand {operand.str_short()} and target "
                    f"shape {shape}.")
  if not all(d < len(shape) for d in broadcast_dimensions):
    raise TypeError(f"broadcast_in_dim broadcast_dimensions must be a subset of output "
                    f"dimensions, got {broadcast_dimensions} for operand ndim {operand.ndim} "
                    f"and shape {shape}.")
  if len(set(broadcast_dimensions)) != len(broadcast_dimensions):
    raise TypeError(f"broadcast_in_dim broadcast_dimensions must not contain duplicates, got "
                    f"broadcast_dimensions {broadcast_dimensions}.")
  if not all(d in (1, shape[b]) for d, b in zip(operand.shape, broadcast_dimensions)):
    raise TypeError(f"broadcast_in_dim operand dimension sizes must either be 1, or be equal "
                    f"to their corresponding dimensions in the target broadcast shape; got "
                    f"operand of shape {operand.shape}, target broadcast shape {shape}, "
                    f"broadcast_dimensions {broadcast_dimensions}.")
  if sharding is not None:   # JAX's `sharding` param: the result's type (an unsplit operand)
    return ShapedArray(shape, operand.dtype, operand.weak_type,
                       type_sharding(sharding, len(shape)))
  return ShapedArray(shape, operand.dtype, operand.weak_type)


def _broadcast_in_dim_lowering(ctx, x, *, shape, broadcast_dimensions, sharding=None):
  return ctx.op("stablehlo.broadcast_in_dim", [x],
                attrs=f"broadcast_dimensions = {i64_array(broadcast_dimensions)}")


def _broadcast_in_dim_pp_rule(eqn, context):
  # As JAX prints it: the shape (and sharding) are the result's type; empty
  # broadcast_dimensions are hidden.
  return [(k, v) for k, v in sorted(eqn.params.items())
          if k not in ("shape", "sharding") and not (k == "broadcast_dimensions" and not v)]


broadcast_in_dim_p.def_abstract_eval(_broadcast_in_dim_abstract_eval)
lowering.register_lowering(broadcast_in_dim_p, _broadcast_in_dim_lowering)
core.pp_eqn_rules[broadcast_in_dim_p] = _broadcast_in_dim_pp_rule
broadcast_in_dim_p.def_default_params(sharding=None)   # NB: as JAX's equations


def _broadcast_in_dim_transpose(ct, operand, *, shape, broadcast_dimensions, sharding=None):
  """JAX's rule: sums `ct` over the result dimensions that no operand dimension of size
  other than 1 maps to, then puts the size-1 dimensions back (`expand_dims`). Unsorted
  `broadcast_dimensions` (not allowed by JAX) transpose the sum back to the operand's order.

  NB: as JAX's, the sum is staged even over no axes: an identity broadcast (staged only by
  `linear_transpose`; see `recording_identity_broadcasts`) transposes to a `reduce_sum`
  with `axes=()`. A `sharding` (the result's type) plays no part: the transposes of typed
  primitives reshard the cotangent to the operand's type (`sharding_rules.typed_transpose`)."""
  in_shape = operand.aval.shape
  unit_dims = tuple(i for i, d in enumerate(in_shape) if d == 1)
  kept = [b for i, b in enumerate(broadcast_dimensions) if i not in unit_dims]
  axes = tuple(i for i in range(len(shape)) if i not in kept)
  order = sorted(kept)
  if kept == order:
    summed = _reduce_sum(ct, axes)
  else:
    # The kept dimensions come out of the sum in increasing order; the operand wants them
    # in the order of `broadcast_dimensions`.
    summed = _reduce_sum(ct, axes) if axes else ct
    summed = transpose(summed, tuple(order.index(b) for b in kept))
  return [expand_dims(summed, unit_dims)]


ad.deflinear_args(broadcast_in_dim_p, _broadcast_in_dim_transpose)


def _broadcast_in_dim_batch_rule(args, dims, *, shape, broadcast_dimensions, sharding=None):
  """JAX's rule: the operand's batch dim is moved to the front and becomes the result's
  first dim; the other dims shift by one (NumPy ints, as JAX leaves them). A result type's
  `sharding` gets an unsplit entry for the batch dim."""
  operand, = args
  bdim, = dims
  operand = batching.moveaxis(operand, bdim, 0)
  op_shape = _shape_of(operand)
  new_dims = (0,) + tuple(np.add(1, broadcast_dimensions))
  new_shape = (op_shape[0],) + tuple(shape)
  if op_shape == new_shape and new_dims == tuple(range(len(new_shape))):
    return operand, 0
  if sharding is not None:
    spec = sharding.spec
    sharding = type(sharding)(sharding.mesh, type(spec)(None, *spec))
    return broadcast_in_dim_p.bind(operand, shape=new_shape, broadcast_dimensions=new_dims,
                                   sharding=sharding), 0
  return broadcast_in_dim_p.bind(operand, shape=new_shape, broadcast_dimensions=new_dims), 0


batching.primitive_batchers[broadcast_in_dim_p] = _broadcast_in_dim_batch_rule


def broadcast_in_dim(operand: Any, shape: Sequence[int],
                     broadcast_dimensions: Sequence[int], *, out_sharding: Any = None) -> Any:
  """Broadcasts `operand` to `shape`, placing its dimension i at `broadcast_dimensions[i]`.

  Args:
    operand: array `T[*s]` (NumPy arrays and Python scalars accepted).
    shape: the result shape `r`, with `len(r) >= len(s)`.
    broadcast_dimensions: for each operand dimension i, the result dimension it becomes;
      distinct, `s[i]` must be 1 or `r[broadcast_dimensions[i]]`. Need not be sorted
      (unsorted dimensions transpose, as in StableHLO).

  Returns:
    `T[*r]`, weakly typed when `operand` is.

  Raises:
    TypeError: if `shape` or `broadcast_dimensions` are not sequences of integers, or do not
      fit the operand (the message gives the operand shape and the params).
  """
  if out_sharding is not None:
    sharding.check_out_sharding(out_sharding, "lax.broadcast_in_dim")
  shape = canonicalize_shape("broadcast_in_dim", "shape", shape)
  dims = canonicalize_shape("broadcast_in_dim", "broadcast_dimensions", broadcast_dimensions)
  if (_shape_of(operand) == shape and dims == tuple(range(len(shape)))
      and not (shape and _records_identity(operand))):
    # NB: as JAX (which forwards such an equation while staging), the identity broadcast
    # is no operation; a host operand is staged (a literal in a jaxpr when a scalar).
    return operand if is_staged_value(operand) else elementwise.stage(operand)
  return broadcast_in_dim_p.bind(operand, shape=shape, broadcast_dimensions=dims)


class _RecordingState(threading.local):
  def __init__(self):
    # trace -> [number of its equations seen, the variables that depend on its arguments]
    self.traces: dict = {}


_recording = _RecordingState()


@contextlib.contextmanager
def recording_identity_broadcasts(trace: Any) -> Iterator[None]:
  """While active, `broadcast_in_dim` stages an identity broadcast (same shape, dimensions
  in order, rank >= 1) into the staging `trace` when its operand is a tracer of `trace`
  that depends on `trace`'s arguments.

  JAX stages with two traces: `make_jaxpr`'s drops such an equation (it forwards the
  operand), but `linear_transpose`'s partial evaluation records it when the operand depends
  on the linear inputs, so the transpose holds its transpose, a `reduce_sum` over no axes
  (printed in the `vecmat` of `jnp.linalg.solve`'s `custom_linear_solve`). Tracing a linear
  function for transposition inside this context reproduces that; operands that depend
  only on constants are still forwarded, as JAX evaluates them before staging.

  Args:
    trace: a staging trace (`interpreters.partial_eval.DynamicJaxprTrace`), current while
      the function is traced.
  """
  state = _recording.traces
  state[trace] = [0, set(trace.invars)]
  try:
    yield
  finally:
    del state[trace]


def _records_identity(operand: Any) -> bool:
  """Whether an identity broadcast of `operand` is staged (`recording_identity_broadcasts`)."""
  state = _recording.traces
  if not state or not isinstance(operand, core.Tracer):
    return False
  trace = core.current_trace()
  entry = state.get(trace)
  if entry is None or operand._trace is not trace:
    return False
  seen, deps = entry
  eqns = trace.eqns
  for eqn in eqns[seen:]:
    if any(type(v) is core.Var and v in deps for v in eqn.invars):
      deps.update(eqn.outvars)
  entry[0] = len(eqns)
  return trace.to_atom(operand) in deps


def laid_out(x: Any, out_sharding: Any) -> Any:
  """`x` laid out by an operation's `out_sharding=` (a NamedSharding, or a PartitionSpec
  under `set_mesh`): a `reshard` (its result's type) over a mesh of Explicit axes, a sharding
  constraint otherwise (the hook `lax.conv.lay_out`, installed by `lax.spmd`). JAX sets the
  sharding of the operation's own result instead: the values and the types are the same,
  the jaxpr has one more equation."""
  if out_sharding is None:
    return x
  return utils.lay_out[0](x, out_sharding)


def broadcast(operand: Any, sizes: Sequence[int], *, out_sharding: Any = None) -> Any:
  """Adds leading dimensions of sizes `sizes` to `operand` (JAX's lax.broadcast).

  Args:
    operand: array `T[*s]`.
    sizes: the sizes `n` of the new leading dimensions.

    out_sharding: None, or the result's sharding (see `laid_out`).

  Returns:
    `T[*n, *s]`.

  Raises:
    TypeError: if `sizes` is not a sequence of non-negative integers.
  """
  sizes = canonicalize_shape("broadcast", "sizes", sizes)
  s = _shape_of(operand)
  return laid_out(broadcast_in_dim(operand, sizes + s,
                                    tuple(range(len(sizes), len(sizes) + len(s)))),
                   out_sharding)


def full(shape: Sequence[int], fill_value: Any, dtype: Any = None, *,
         sharding: Any = None) -> Any:
  """An array of shape `shape` filled with `fill_value` (JAX's lax.full).

  Args:
    shape: the result shape `s`.
    fill_value: a scalar (rank 0).
    dtype: the result dtype (canonicalized); None takes `fill_value`'s dtype, and its weak
      type (`full((2,), 1.0)` is a weakly typed `f32[2]`).
    sharding: None, or the result's sharding: a Sharding (the Array is placed by it, as
      JAX's) or, traced, its type's sharding (see `laid_out`).

  Returns:
    `dtype[*s]`; for `s == ()` the converted fill value itself (an Array; a literal in a
    jaxpr), with no broadcast, as JAX's.

  Raises:
    TypeError: if `fill_value` is not a scalar, or `shape` is not a sequence of non-negative
      integers.
  """
  shape = canonicalize_shape("full", "shape", shape)
  fill_shape = np.shape(fill_value)
  if fill_shape:
    raise TypeError(f"full must be called with scalar fill_value, got fill_value of shape "
                    f"{fill_shape} ({core.get_aval(fill_value).str_short()}).")
  if dtype is None:
    aval = core.get_aval(fill_value)
    dtype, weak = aval.dtype, aval.weak_type
  else:   # NB: no aval of a Python int yet: it may fit only the target dtype (2**40 -> f32)
    dtype, weak = dtypes.check_user_dtype(dtype, "full"), False
  # NB: as JAX's, a host fill value converts on the host (a Python int wraps around:
  # `full((2,), 300, int8)` is 44s) and a rank-0 result is the converted fill value itself
  # (a literal in a jaxpr), with no broadcast.
  fill_value = convert_element_type(fill_value, dtype, weak)
  if sharding is not None:
    return _placed_full(fill_value, shape, sharding)
  if not shape:
    return fill_value
  return broadcast_in_dim_p.bind(fill_value, shape=shape, broadcast_dimensions=())


def _placed_full(fill_value: Any, shape: tuple, sharding: Any) -> Any:
  """`full`'s result laid out by `sharding`, as JAX's: outside a trace, an Array placed by
  a concrete Sharding (strongly typed); traced, a sharding over an abstract mesh is the
  result's (`laid_out`) and a concrete one is ignored."""
  out = (fill_value if not shape else
         broadcast_in_dim_p.bind(fill_value, shape=shape, broadcast_dimensions=()))
  concrete = not isinstance(getattr(sharding, "mesh", None), sharding_lib.AbstractMesh)
  if isinstance(out, core.Tracer) or core.current_trace() is not core.eval_trace:
    return out if concrete else laid_out(out, sharding)
  if not concrete:
    return laid_out(out, sharding)
  aval = core.get_aval(out)
  if aval.weak_type:
    out = convert_element_type(out, aval.dtype, False)
  return spmd.device_put(out, sharding)


# ---------------------------------------------------------------------------
# reshape(operand, new_sizes, dimensions): the same elements in row-major order, after the
# optional permutation `dimensions` (JAX's param; None when absent or the identity).
reshape_p = Primitive("reshape")


def _reshape_abstract_eval(operand, *, new_sizes, dimensions, sharding=None):
  check_shapelike("reshape", "new_sizes", new_sizes)
  if dimensions is not None and (type(dimensions) is not tuple
                                 or set(dimensions) != set(range(operand.ndim))
                                 or len(dimensions) != operand.ndim):
    raise TypeError(f"reshape dimensions must be a permutation of operand dimensions, got "
                    f"dimensions {dimensions} for shape {operand.shape}.")
  if math.prod(new_sizes) != operand.size:
    raise TypeError(f"reshape total size must be unchanged, got new_sizes {new_sizes} for "
                    f"shape {operand.shape}.")
  return ShapedArray(new_sizes, operand.dtype, operand.weak_type)


def _reshape_lowering(ctx, x, *, new_sizes, dimensions, sharding=None):
  if dimensions is not None:   # JAX's lowering: the permutation first, as a transpose
    aval, = ctx.avals_in
    t_aval = aval.update(shape=tuple(aval.shape[d] for d in dimensions))
    x, = ctx.op("stablehlo.transpose", [x], result_avals=[t_aval],
                attrs=f"permutation = {i64_array(dimensions)}")
    return ctx.op("stablehlo.reshape", [x], operand_avals=[t_aval])
  return ctx.op("stablehlo.reshape", [x])


reshape_p.def_abstract_eval(_reshape_abstract_eval)
lowering.register_lowering(reshape_p, _reshape_lowering)
# NB: as JAX's, every reshape equation carries `sharding` (None: `reshape(out_sharding=)`
# lays the result out instead), printed.
reshape_p.def_default_params(sharding=None)


def _reshape_transpose(ct, operand, *, new_sizes, dimensions, sharding=None):
  """JAX's rule: back to the operand's shape (permuted, then transposed back by the
  inverse permutation when `dimensions` is given)."""
  shape = operand.aval.shape
  if dimensions is None:
    return [reshape(ct, shape)]
  out = reshape(ct, tuple(shape[d] for d in dimensions))
  return [transpose(out, np.argsort(dimensions))]


ad.deflinear_args(reshape_p, _reshape_transpose)


def _reshape_batch_rule(args, dims, *, new_sizes, dimensions, sharding=None):
  """JAX's rule: the batch dim goes first (a row-major reshape keeps a leading dim)."""
  operand, = args
  bdim, = dims
  operand = batching.moveaxis(operand, bdim, 0)
  size = _shape_of(operand)[0]
  if dimensions is not None:
    dimensions = (0,) + tuple(int(d) + 1 for d in dimensions)
  # NB: through `reshape`, as JAX's rule: a batched operand already of the shape is kept
  # (a vmapped reshape of a scalar to `()` stages nothing)
  return reshape(operand, (size,) + tuple(new_sizes), dimensions), 0


batching.primitive_batchers[reshape_p] = _reshape_batch_rule


def reshape(operand: Any, new_sizes: Sequence[int],
            dimensions: Sequence[int] | None = None, *, out_sharding: Any = None) -> Any:
  """Reshapes `operand` to `new_sizes`, reading its elements in row-major order.

  Args:
    operand: array `T[*s]`.
    new_sizes: the result shape `n`, with `prod(n) == prod(s)`.
    dimensions: optional permutation of the operand's dimensions, applied before reshaping
      (JAX's lax.reshape: the `dimensions` param of the reshape equation, lowered as a
      transpose; None for the identity).

  Returns:
    `T[*n]`.

  Raises:
    TypeError: if the total size changes, a size is negative, or `dimensions` is not a
      permutation of the operand's dimensions.
  """
  if out_sharding is not None:
    sharding.check_out_sharding(out_sharding, "lax.reshape")
  new_sizes = canonicalize_shape("reshape", "new_sizes", new_sizes)
  if dimensions is not None:
    dimensions = canonicalize_shape("reshape", "dimensions", dimensions)
    if dimensions == tuple(range(len(_shape_of(operand)))):
      dimensions = None
    elif getattr(core.get_aval(operand), "_sharding", None) is not None:
      # NB: with sharding in types, the permutation is a transpose of its own (whose rule
      # moves the spec entries), then a plain reshape.
      operand, dimensions = transpose(operand, dimensions), None
  # NB: as JAX's: a scalar is reshaped all the same (only an array of the same shape is kept)
  if dimensions is None and new_sizes and is_staged_value(operand) and \
      _shape_of(operand) == new_sizes:
    return operand
  return reshape_p.bind(operand, new_sizes=new_sizes, dimensions=dimensions)


def collapse(operand: Any, start_dimension: int, stop_dimension: int | None = None) -> Any:
  """Collapses dimensions `start_dimension:stop_dimension` of `operand` into one, row-major.

  Args:
    operand: array `T[*a, *b, *c]`, `b` the dimensions `start_dimension:stop_dimension`
      (Python slice semantics: negative values count from the end).
    start_dimension: first collapsed dimension (inclusive).
    stop_dimension: end of the collapsed dimensions (exclusive); None collapses to the end.

  Returns:
    `T[*a, prod(b), *c]`.

  Raises:
    ValueError: if the range is reversed (stop before start).
  """
  shape = _shape_of(operand)
  lo, hi, _ = builtins.slice(start_dimension, stop_dimension).indices(len(shape))
  if hi < lo:
    raise ValueError(f"Invalid dimension range passed to collapse: {shape}"
                     f"[{start_dimension}:{stop_dimension}]; stop must not precede start.")
  return reshape(operand, shape[:lo] + (math.prod(shape[lo:hi]),) + shape[hi:])


# ---------------------------------------------------------------------------
# transpose(operand, permutation): result dim i is operand dim permutation[i].
transpose_p = Primitive("transpose")


def _transpose_abstract_eval(operand, *, permutation):
  if type(permutation) is not tuple or tuple(sorted(permutation)) != tuple(range(operand.ndim)):
    raise TypeError(f"transpose permutation isn't a permutation of operand dimensions, got "
                    f"permutation {permutation} for operand shape {operand.shape}.")
  return ShapedArray(tuple(operand.shape[i] for i in permutation), operand.dtype,
                     operand.weak_type)


def _transpose_lowering(ctx, x, *, permutation):
  return ctx.op("stablehlo.transpose", [x], attrs=f"permutation = {i64_array(permutation)}")


transpose_p.def_abstract_eval(_transpose_abstract_eval)
lowering.register_lowering(transpose_p, _transpose_lowering)
ad.deflinear_args(transpose_p, lambda ct, operand, *, permutation: [
    transpose(ct, tuple(int(i) for i in np.argsort(permutation)))])


def _transpose_batch_rule(args, dims, *, permutation):
  """One transpose: the batch dim goes first, the others as `permutation` says."""
  operand, = args
  bdim, = dims
  perm = (bdim,) + tuple(i if i < bdim else i + 1 for i in permutation)
  return transpose_p.bind(operand, permutation=perm), 0


batching.primitive_batchers[transpose_p] = _transpose_batch_rule


def _batched_axis(d: int, bdim: int) -> int:
  """Unbatched axis `d` of a value batched at `bdim`, as an axis of the batched value."""
  return d if d < bdim else d + 1


def transpose(operand: Any, permutation: Sequence[int]) -> Any:
  """Permutes the dimensions of `operand`: result dimension i is operand dimension
  `permutation[i]`.

  Args:
    operand: array `T[*s]`.
    permutation: a permutation of `range(len(s))` (non-negative).

  Returns:
    `T[s[permutation[0]], s[permutation[1]], ...]`.

  Raises:
    TypeError: if `permutation` is not a permutation of the operand's dimensions.
  """
  permutation = canonicalize_shape("transpose", "permutation", permutation)
  if is_staged_value(operand) and permutation == tuple(range(len(_shape_of(operand)))):
    return operand
  return transpose_p.bind(operand, permutation=permutation)


# ---------------------------------------------------------------------------
# squeeze(operand, dimensions): removes dimensions of size 1.
squeeze_p = Primitive("squeeze")


def _squeeze_abstract_eval(operand, *, dimensions):
  if type(dimensions) is not tuple:
    raise TypeError(f"squeeze dimensions must be a tuple of ints, got {dimensions!r}.")
  # JAX's messages.
  if len(set(dimensions)) != len(dimensions):
    raise ValueError(f"dimensions are not unique: {dimensions}")
  if not all(0 <= d < operand.ndim for d in dimensions):
    raise ValueError(f"dimensions outside range [0, ndim): {dimensions}")
  if any(operand.shape[d] != 1 for d in dimensions):
    raise ValueError(f"cannot select an axis to squeeze out which has size not equal to one, "
                     f"got shape={operand.shape} and dimensions={dimensions}")
  shape = tuple(s for i, s in enumerate(operand.shape) if i not in dimensions)
  return ShapedArray(shape, operand.dtype, operand.weak_type)


def _squeeze_lowering(ctx, x, *, dimensions):
  return ctx.op("stablehlo.reshape", [x])


squeeze_p.def_abstract_eval(_squeeze_abstract_eval)
lowering.register_lowering(squeeze_p, _squeeze_lowering)
# As JAX's: the squeezed dims come back as size-1 dims by a `broadcast_in_dim`.
ad.deflinear_args(squeeze_p, lambda ct, operand, *, dimensions: [expand_dims(ct, dimensions)])


def _squeeze_batch_rule(args, dims, *, dimensions):
  """JAX's rule: the batch dim is moved to the front (a transpose unless it is there) and
  stays the result's first dim; the squeezed dims shift by one."""
  operand, = args
  bdim, = dims
  operand = batching.moveaxis(operand, bdim, 0)
  return squeeze(operand, tuple(int(d) + 1 for d in dimensions)), 0


batching.primitive_batchers[squeeze_p] = _squeeze_batch_rule


def squeeze(array: Any, dimensions: Sequence[int]) -> Any:
  """Removes the dimensions `dimensions` of `array`, each of size 1.

  Args:
    array: array `T[*s]`.
    dimensions: dimensions to remove; negative values count from the end.

  Returns:
    `T[*s without dimensions]`.

  Raises:
    TypeError: if a dimension is not an integer.
    ValueError: if a dimension is out of range, repeated, or of size other than 1 (JAX's
      messages).
  """
  ndim = len(_shape_of(array))
  dims = []
  for d in dimensions:   # each an integer (TypeError otherwise), in range; repeats are
    d = operator.index(d)   # caught by squeeze's type rule, as JAX's
    if not -ndim <= d < ndim:
      raise ValueError(f"axis {d} is out of bounds for array of dimension {ndim}")
    dims.append(d % ndim if ndim else d)
  dims = tuple(sorted(dims))
  if not dims and is_staged_value(array):
    return array
  return squeeze_p.bind(array, dimensions=dims)


def expand_dims(array: Any, dimensions: Sequence[int]) -> Any:
  """Inserts dimensions of size 1 at `dimensions` (positions in the result).

  JAX has no expand_dims primitive: this is a `broadcast_in_dim`.

  Args:
    array: array `T[*s]`.
    dimensions: positions of the new dimensions in the result, of rank
      `len(s) + len(dimensions)`; negative values count from the end of the result.

  Returns:
    `T[*r]` where `r` is `s` with a 1 inserted at each of `dimensions`.

  Raises:
    ValueError: if a position is repeated or out of range.
  """
  dims = canonicalize_shape("expand_dims", "dimensions", dimensions)
  if len(set(dims)) != len(dims):
    raise ValueError(f"repeated axis in lax.expand_dims: {dims}.")
  shape = _shape_of(array)
  ndim_out = len(shape) + len(dims)
  dims_set = frozenset(utils.canonicalize_axes("expand_dims", dims, ndim_out))
  result_shape = list(shape)
  for i in sorted(dims_set):
    result_shape.insert(i, 1)
  kept = tuple(i for i in range(ndim_out) if i not in dims_set)
  return broadcast_in_dim(array, tuple(result_shape), kept)


# ---------------------------------------------------------------------------
# rev(operand, dimensions): reverses the order of elements along `dimensions`.
rev_p = Primitive("rev")


def _rev_abstract_eval(operand, *, dimensions):
  check_shapelike("rev", "dimensions", dimensions)
  if len(set(dimensions)) != len(dimensions):
    raise TypeError(f"rev dimensions must be unique, got {dimensions}.")
  if dimensions and not max(dimensions) < operand.ndim:
    raise TypeError(f"rev dimensions must all be less than operand ndim, got dimensions "
                    f"{dimensions} for operand ndim {operand.ndim}.")
  return operand


def _rev_lowering(ctx, x, *, dimensions):
  return ctx.op("stablehlo.reverse", [x], attrs=f"dimensions = {i64_array(dimensions)}")


rev_p.def_abstract_eval(_rev_abstract_eval)
lowering.register_lowering(rev_p, _rev_lowering)
ad.deflinear_args(rev_p, lambda ct, operand, *, dimensions: [rev_p.bind(ct, dimensions=dimensions)])


def _rev_batch_rule(args, dims, *, dimensions):
  operand, = args
  bdim, = dims
  return rev_p.bind(operand, dimensions=tuple(_batched_axis(d, bdim) for d in dimensions)), bdim


batching.primitive_batchers[rev_p] = _rev_batch_rule


def rev(operand: Any, dimensions: Sequence[int]) -> Any:
  """Reverses `operand` along `dimensions`.

  Args:
    operand: array `T[*s]`.
    dimensions: distinct dimensions to reverse; negative values count from the end.

  Returns:
    `T[*s]`.

  Raises:
    TypeError: if a dimension is out of range or repeated (JAX's messages).
  """
  ndim = len(_shape_of(operand))
  dims = canonicalize_shape("rev", "dimensions", dimensions)
  if any(d >= ndim or d < -ndim for d in dims):
    raise TypeError(f"rev dimensions must all be less than operand ndim, got dimensions "
                    f"{dims} for operand ndim {ndim}.")
  if len(set(d % ndim for d in dims)) != len(dims):
    raise TypeError(f"rev dimensions must be unique, got {dims}.")
  return rev_p.bind(operand, dimensions=utils.canonicalize_axes("rev", dims, ndim))


# ---------------------------------------------------------------------------
# concatenate(*operands, dimension): joins operands along `dimension`.
concatenate_p = Primitive("concatenate")


def _concatenate_abstract_eval(*operands, dimension):
  if not operands:
    raise TypeError("concatenate expects at least one operand, got 0.")
  shapes = ", ".join(o.str_short() for o in operands)
  if len({o.ndim for o in operands}) != 1:
    raise TypeError(f"Cannot concatenate arrays with different numbers of dimensions: got "
                    f"{shapes}.")
  if type(dimension) is not int or not 0 <= dimension < operands[0].ndim:
    raise TypeError(f"concatenate dimension out of bounds: dimension {dimension} for shapes "
                    f"{shapes}.")
  if len({o.shape[:dimension] + o.shape[dimension + 1:] for o in operands}) != 1:
    raise TypeError(f"Cannot concatenate arrays with shapes that differ in dimensions other "
                    f"than the one being concatenated: concatenating along dimension "
                    f"{dimension} for shapes {shapes}.")
  utils.check_same_dtypes("concatenate", operands)
  s = operands[0].shape
  shape = s[:dimension] + (sum(o.shape[dimension] for o in operands),) + s[dimension + 1:]
  return ShapedArray(shape, operands[0].dtype, all(o.weak_type for o in operands))


def _concatenate_lowering(ctx, *xs, dimension):
  return ctx.op("stablehlo.concatenate", list(xs), attrs=f"dimension = {dimension} : i64")


concatenate_p.def_abstract_eval(_concatenate_abstract_eval)
lowering.register_lowering(concatenate_p, _concatenate_lowering)


def _concatenate_transpose(ct, *operands, dimension):
  """JAX's rule: `ct` cut along `dimension` by one `split` into the operands' sizes; each
  linear operand gets its piece, the others None."""
  sizes = tuple((x.aval if ad.is_undefined_primal(x) else core.get_aval(x)).shape[dimension]
                for x in operands)
  if type(ct) is ad.Zero:
    return [ad.Zero(x.aval) if ad.is_undefined_primal(x) else None for x in operands]
  pieces = split_p.bind(ct, sizes=sizes, axis=dimension)
  return [p if ad.is_undefined_primal(x) else None for p, x in zip(pieces, operands)]


ad.deflinear_args(concatenate_p, _concatenate_transpose)


def _concatenate_batch_rule(args, dims, *, dimension):
  """JAX's rule: every batch dim moved to the front (unbatched operands broadcast there by
  `lax.broadcast`); the result is batched at 0."""
  size = next(_shape_of(x)[d] for x, d in zip(args, dims) if d is not batching.not_mapped)
  operands = [broadcast(x, (size,)) if d is batching.not_mapped else batching.moveaxis(x, d, 0)
              for x, d in zip(args, dims)]
  return concatenate(operands, dimension + 1), 0


batching.primitive_batchers[concatenate_p] = _concatenate_batch_rule


def concatenate(operands: Sequence[Any], dimension: int) -> Any:
  """Concatenates `operands` along `dimension`.

  Args:
    operands: non-empty sequence of arrays `T[*a, n_k, *b]` of one dtype and rank >= 1,
      equal in every dimension but `dimension`.
    dimension: the dimension to join along; negative values count from the end.

  Returns:
    `T[*a, sum(n_k), *b]`, weakly typed only when every operand is.

  Raises:
    ValueError: if `operands` is empty or `dimension` is out of range.
    TypeError: if the ranks, the other dimensions, or the dtypes differ.
  """
  operands = list(operands)
  if not operands:
    raise ValueError("concatenate requires a non-empty sequence of arrays, got [].")
  if len(operands) == 1 and is_staged_value(operands[0]):
    return operands[0]
  ndim = len(_shape_of(operands[0]))
  if ndim == 0:
    raise TypeError(f"concatenate operands must have rank >= 1, got "
                    f"{core.get_aval(operands[0]).str_short()}.")
  (dimension,) = utils.canonicalize_axes("concatenate", (operator.index(dimension),), ndim)
  return concatenate_p.bind(*operands, dimension=dimension)


# ---------------------------------------------------------------------------
# stack(*operands, axis): joins operands of one shape along a new dimension `axis`;
# unstack(operand, axis): its inverse, one result per index along `axis`. Each is the
# other's transpose (as in JAX 0.10, whose jnp.stack and jnp.unstack bind them).
stack_p = Primitive("stack")


def _stack_abstract_eval(*operands, axis):
  if not operands:
    raise ValueError("stack expects at least one operand, got 0.")
  if len({o.ndim for o in operands}) != 1:
    raise ValueError(f"Cannot stack arrays with different numbers of dimensions: got "
                     f"{', '.join(str(o.shape) for o in operands)}.")
  if len({o.shape for o in operands}) != 1:
    raise ValueError(f"All input arrays must have the same shape. Got "
                     f"{', '.join(str(o.shape) for o in operands)}.")
  utils.check_same_dtypes("stack", operands)
  ndim = operands[0].ndim
  if type(axis) is not int or not 0 <= axis <= ndim:
    raise ValueError(f"stack axis must be an int in [0, {ndim}] for operands "
                     f"{operands[0].str_short()}, got {axis!r}.")
  shape = list(operands[0].shape)
  shape.insert(axis, len(operands))
  return ShapedArray(tuple(shape), operands[0].dtype, all(o.weak_type for o in operands))


def _stack_lowering(ctx, *xs, axis):
  """Each operand gets a size-1 dimension at `axis` (broadcast_in_dim), then one
  concatenate: the ops JAX emits."""
  dims = [i for i in range(ctx.avals_in[0].ndim + 1) if i != axis]
  expanded, expanded_avals = [], []
  for x, aval in zip(xs, ctx.avals_in):
    e_aval = ShapedArray(aval.shape[:axis] + (1,) + aval.shape[axis:], aval.dtype)
    expanded += ctx.op("stablehlo.broadcast_in_dim", [x], result_avals=[e_aval],
                       operand_avals=[aval], attrs=f"broadcast_dimensions = {i64_array(dims)}")
    expanded_avals.append(e_aval)
  return ctx.op("stablehlo.concatenate", expanded, operand_avals=expanded_avals,
                attrs=f"dimension = {axis} : i64")


def _stack_transpose(ct, *operands, axis):
  """The cotangent's slices along `axis`, one per operand (an `unstack`)."""
  return unstack_p.bind(ct, axis=axis)


def _stack_batch_rule(args, dims, *, axis):
  """Operands batched alike stack around their batch dimension; otherwise every batch
  dimension moves to the front (unbatched operands broadcast), as JAX's rule does."""
  bdim = dims[0]
  if bdim is not batching.not_mapped and all(d == bdim for d in dims):
    if axis <= bdim:
      return stack_p.bind(*args, axis=axis), bdim + 1
    return stack_p.bind(*args, axis=axis + 1), bdim
  size = next(_shape_of(x)[d] for x, d in zip(args, dims) if d is not batching.not_mapped)
  operands = [broadcast(x, (size,)) if d is batching.not_mapped else batching.moveaxis(x, d, 0)
              for x, d in zip(args, dims)]
  return stack_p.bind(*operands, axis=axis + 1), 0


def _context_sharding(a: ShapedArray) -> sharding.NamedSharding:
  """JAX's `aval.sharding`: the aval's when split, else unsplit over the abstract mesh in
  context (as in lax/sharding_rules.py)."""
  if a._sharding is not None:
    return a._sharding
  m = sharding.get_abstract_mesh()
  return sharding.unsharded(a.ndim) if m.empty else sharding.NamedSharding(
      m, sharding.PartitionSpec(*[None] * a.ndim))


def _type_sharding(mesh, spec) -> sharding.NamedSharding | None:
  """The sharding of a result type with entries `spec` (None when nothing is split)."""
  if mesh is None or all(e is None for e in spec):
    return None
  return sharding.NamedSharding(mesh, sharding.PartitionSpec(*spec))


def _stack_sharding_rule(*operands, axis):
  """JAX's rule: the operands typed over a mesh must agree; the new dimension is unsplit."""
  typed = [o for o in operands
           if o._sharding is not None or not sharding.get_abstract_mesh().empty]
  if any(sharding.spec_entries(o._sharding, o.ndim) !=
         sharding.spec_entries(typed[0]._sharding, typed[0].ndim) for o in typed[1:]):
    raise sharding.ShardingTypeError(
        f"All operands should have the same sharding. Got shardings "
        f"{', '.join(str(_context_sharding(o)) for o in operands)}")
  s = typed[0]._sharding
  spec = list(sharding.spec_entries(s, typed[0].ndim))
  spec.insert(axis, None)
  return _type_sharding(None if s is None else s.mesh, spec)


stack_p.def_abstract_eval(_stack_abstract_eval)
lowering.register_lowering(stack_p, _stack_lowering)
ad.deflinear_args(stack_p, _stack_transpose)
batching.primitive_batchers[stack_p] = _stack_batch_rule
core.sharding_rules[stack_p] = _stack_sharding_rule
# DCE: the default rule (pure).


unstack_p = Primitive("unstack")
unstack_p.multiple_results = True


def _unstack_abstract_eval(operand, *, axis):
  if operand.ndim == 0:
    raise ValueError(f"unstack requires arrays with rank > 0, however a scalar array of "
                     f"shape {operand.shape} was passed.")
  if type(axis) is not int or not 0 <= axis < operand.ndim:
    raise ValueError(f"unstack axis must be an int in [0, {operand.ndim}) for operand "
                     f"{operand.str_short()}, got {axis!r}.")
  shape = operand.shape[:axis] + operand.shape[axis + 1:]
  return [ShapedArray(shape, operand.dtype, operand.weak_type)] * operand.shape[axis]


def _unstack_lowering(ctx, x, *, axis):
  """Per result, a unit slice along `axis` and a reshape dropping it (JAX's ops)."""
  aval, = ctx.avals_in
  start, limit = [0] * aval.ndim, list(aval.shape)
  slice_shape = list(aval.shape)
  slice_shape[axis] = 1
  slice_aval = ShapedArray(tuple(slice_shape), aval.dtype)
  outs = []
  for i, aval_out in enumerate(ctx.avals_out):
    start[axis], limit[axis] = i, i + 1
    piece, = ctx.op("stablehlo.slice", [x], result_avals=[slice_aval],
                    attrs=f"start_indices = {i64_array(start)}, limit_indices = "
                          f"{i64_array(limit)}, strides = {i64_array([1] * aval.ndim)}")
    outs += ctx.op("stablehlo.reshape", [piece], result_avals=[aval_out],
                   operand_avals=[slice_aval])
  return outs


def _unstack_jvp(primals, tangents, *, axis):
  x, = primals
  t, = tangents
  outs = unstack_p.bind(x, axis=axis)
  if type(t) is ad.Zero:
    return outs, [ad.Zero(ad.tangent_aval(core.get_aval(o))) for o in outs]
  return outs, unstack_p.bind(t, axis=axis)


def _unstack_transpose(cts, operand, *, axis):
  """The cotangents (zeros instantiated) stacked back along `axis`."""
  return [stack_p.bind(*[ad.instantiate_zeros(ct) for ct in cts], axis=axis)]


def _unstack_batch_rule(args, dims, *, axis):
  operand, = args
  bdim, = dims
  if axis < bdim:
    outs, out_bdim = unstack_p.bind(operand, axis=axis), bdim - 1
  else:
    outs, out_bdim = unstack_p.bind(operand, axis=axis + 1), bdim
  return outs, [out_bdim] * len(outs)


def _unstack_sharding_rule(operand, *, axis):
  """JAX's rule: the unstacked dimension must be unsplit; the others keep their entries."""
  spec = list(sharding.spec_entries(operand._sharding, operand.ndim))
  if spec[axis] is not None:
    raise sharding.ShardingTypeError(
        f"unstack operand cannot be sharded on the unstacking axis {axis}. Got operand "
        f"type={operand.str_short()}")
  del spec[axis]
  s = _type_sharding(operand._sharding.mesh, spec)
  return [s] * operand.shape[axis]


unstack_p.def_abstract_eval(_unstack_abstract_eval)
lowering.register_lowering(unstack_p, _unstack_lowering)
ad.primitive_jvps[unstack_p] = _unstack_jvp
ad.primitive_transposes[unstack_p] = _unstack_transpose
batching.primitive_batchers[unstack_p] = _unstack_batch_rule
core.sharding_rules[unstack_p] = _unstack_sharding_rule


# ---------------------------------------------------------------------------
# split(operand, sizes, axis): the pieces of `operand` along `axis`, of the given sizes (one
# result per size; JAX 0.10's `split_p`). Its transpose is `concatenate`.
split_p = Primitive("split")
split_p.multiple_results = True


def _split_abstract_eval(operand, *, sizes, axis):
  """JAX's shape rule and errors: `axis` in range, sizes non-negative summing to its size."""
  if type(axis) is not int or not 0 <= axis < operand.ndim:
    raise ValueError(f"axis {axis} is out of bounds for array of dimension {operand.ndim}")
  if any(s < 0 for s in sizes):
    raise ValueError(f"Sizes passed to split must be nonnegative, got {list(sizes)}")
  if operand.shape[axis] != builtins.sum(sizes):
    raise ValueError(f"Sum of sizes {np.sum(sizes)} must be equal to dimension {axis} of "
                     f"the operand shape {list(operand.shape)}")
  return [ShapedArray(operand.shape[:axis] + (n if shape_poly.is_symbolic_dim(n) else int(n),)
                      + operand.shape[axis + 1:], operand.dtype, operand.weak_type)
          for n in sizes]


def _split_lowering(ctx, x, *, sizes, axis):
  """One `stablehlo.slice` per piece (JAX's lowering)."""
  aval, = ctx.avals_in
  start, limit = [0] * aval.ndim, list(aval.shape)
  outs = []
  for aval_out in ctx.avals_out:
    limit[axis] = start[axis] + aval_out.shape[axis]
    outs += ctx.op("stablehlo.slice", [x], result_avals=[aval_out],
                   attrs=f"start_indices = {i64_array(start)}, limit_indices = "
                         f"{i64_array(limit)}, strides = {i64_array([1] * aval.ndim)}")
    start[axis] = limit[axis]
  return outs


def _split_jvp(primals, tangents, *, sizes, axis):
  x, = primals
  t, = tangents
  outs = split_p.bind(x, sizes=sizes, axis=axis)
  if type(t) is ad.Zero:
    return outs, [ad.Zero(ad.tangent_aval(core.get_aval(o))) for o in outs]
  return outs, split_p.bind(t, sizes=sizes, axis=axis)


def _split_transpose(cts, operand, *, sizes, axis):
  """The cotangents (zeros instantiated) concatenated back along `axis`; all zero: zero."""
  if all(type(ct) is ad.Zero for ct in cts):
    return [ad.Zero(operand.aval)]
  cts = [ad.instantiate_zeros(ct) for ct in cts]
  return [cts[0] if len(cts) == 1 else concatenate_p.bind(*cts, dimension=axis)]


def _split_batch_rule(args, dims, *, sizes, axis):
  """The batch dim stays where it is; the split axis skips it."""
  operand, = args
  bdim, = dims
  outs = split_p.bind(operand, sizes=sizes, axis=axis + 1 if axis >= bdim else axis)
  return outs, [bdim] * len(outs)


def _split_sharding_rule(operand, *, sizes, axis):
  """JAX's rule: each piece keeps the operand's sharding; a split `axis` must stay divisible
  by its mesh axes in every piece whose size differs."""
  if operand._sharding is None:
    return [None] * len(sizes)
  mesh = operand._sharding.mesh
  e = sharding.spec_entries(operand._sharding, operand.ndim)[axis]
  if e is not None:
    names = e if isinstance(e, tuple) else (e,)
    n = math.prod(mesh.shape[name] for name in names)
    for size in sizes:
      if size != operand.shape[axis] and size % n:
        out_shape = operand.shape[:axis] + (int(size),) + operand.shape[axis + 1:]
        raise sharding.ShardingTypeError(
            f"split on sharded dims where out dim ({size}) is not divisible by mesh axes "
            f"({n}) with spec ({e}) is not implemented. Got input "
            f"type={operand.str_short(True)} and output shape={out_shape}")
  return [operand._sharding] * len(sizes)


split_p.def_abstract_eval(_split_abstract_eval)
lowering.register_lowering(split_p, _split_lowering)
ad.primitive_jvps[split_p] = _split_jvp
ad.primitive_transposes[split_p] = _split_transpose
batching.primitive_batchers[split_p] = _split_batch_rule
core.sharding_rules[split_p] = _split_sharding_rule


def stack(operands: Sequence[Any], axis: int = 0) -> Any:
  """Joins arrays of one shape along a new dimension `axis` (the `stack` primitive).

  Args:
    operands: non-empty sequence of arrays `T[*s]` of one shape and dtype (NumPy arrays and
      Python scalars accepted; scalars are weakly typed).
    axis: position of the new dimension in the result, in `[-(len(s) + 1), len(s)]`.

  Returns:
    `T[*s[:axis], n, *s[axis:]]` for `n` operands, weakly typed only when every operand is.

  Raises:
    IndexError: if `operands` is empty (as JAX's lax.stack).
    ValueError: if `axis` is out of range, or the operands' ranks or shapes differ.
    TypeError: if the dtypes differ (jnp.stack promotes them).

  Example:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> lax.stack([np.float32([1, 2]), np.float32([3, 4])], axis=1).tolist()
    [[1.0, 3.0], [2.0, 4.0]]
  """
  operands = list(operands)
  if not operands:
    raise IndexError("stack expects at least one operand, got an empty sequence.")
  ndim = len(_shape_of(operands[0]))
  axis = operator.index(axis)
  if not -(ndim + 1) <= axis <= ndim:
    raise ValueError(f"axis {axis} is out of bounds for array of dimension {ndim + 1}")
  return stack_p.bind(*operands, axis=axis % (ndim + 1))


def unstack(x: Any, axis: int = 0) -> tuple[Any, ...]:
  """The slices of `x` along `axis` (the `unstack` primitive): T[..., n, ...] -> n x T[...].

  Args:
    x: array `T[*s]` of rank >= 1.
    axis: the dimension to unstack, in `[-len(s), len(s))`.

  Returns:
    A tuple of `s[axis]` arrays `T[*s without axis]`, weakly typed when `x` is.

  Raises:
    ValueError: if `axis` is out of range (a scalar `x` has no axis).
  """
  ndim = len(_shape_of(x))
  axis = operator.index(axis)
  if not -ndim <= axis < ndim:
    raise ValueError(f"axis {axis} is out of bounds for array of dimension {ndim}")
  return tuple(unstack_p.bind(x, axis=axis % ndim))


# ---------------------------------------------------------------------------
# pad(operand, padding_value, padding_config): per dimension (lo, hi, interior) pads with
# `padding_value`: `interior` between elements, then `lo`/`hi` at the edges (negative lo/hi
# remove elements).
pad_p = Primitive("pad")


def _surely_nonnegative(d) -> bool:
  """`d >= 0`; True for a symbolic size whose sign its bounds cannot decide (export)."""
  try:
    return d >= 0
  except InconclusiveDimensionOperation:
    return True


def _pad_abstract_eval(operand, padding_value, *, padding_config):
  if operand.dtype != padding_value.dtype:
    raise TypeError(f"pad operand and padding_value must be same dtype: got "
                    f"{operand.dtype.name} and {padding_value.dtype.name}.")
  if padding_value.shape:
    raise ValueError(f"padding_value must be a scalar; got {padding_value.str_short()}.")
  if len(padding_config) != operand.ndim:
    raise ValueError(f"length of padding_config must equal the number of axes of operand, got "
                     f"padding_config {padding_config} for operand shape {operand.shape}.")
  if not all(type(c) is tuple and len(c) == 3
             and all(type(v) is int or isinstance(v, np.integer)
                     or shape_poly.is_symbolic_dim(v) for v in c)
             for c in padding_config):
    raise TypeError(f"padding_config must be a tuple of (lo, hi, interior) int triples, got "
                    f"{padding_config}.")
  if not all(i >= 0 for _, _, i in padding_config):
    raise ValueError(f"interior padding in padding_config must be nonnegative, got "
                     f"padding_config {padding_config}.")
  shape = tuple(lo + hi + (0 if d == 0 else d + (d - 1) * i)
                for (lo, hi, i), d in zip(padding_config, operand.shape))
  if not all(_surely_nonnegative(d) for d in shape):
    raise ValueError(f"Dimension size after padding is not at least 0, got result shape "
                     f"{shape}, for padding_config {padding_config} and operand shape "
                     f"{operand.shape}.")
  return ShapedArray(shape, operand.dtype, operand.weak_type and padding_value.weak_type)


def _pad_lowering(ctx, x, padding_value, *, padding_config):
  lo, hi, interior = zip(*padding_config) if padding_config else ((), (), ())
  return ctx.op("stablehlo.pad", [x, padding_value],
                attrs=f"edge_padding_low = {i64_array(lo)}, edge_padding_high = "
                      f"{i64_array(hi)}, interior_padding = {i64_array(interior)}")


pad_p.def_abstract_eval(_pad_abstract_eval)
lowering.register_lowering(pad_p, _pad_lowering)


def _pad_jvp(primals, tangents, *, padding_config):
  operand, padding_value = primals
  t_operand, t_padding_value = tangents
  out = pad_p.bind(operand, padding_value, padding_config=padding_config)
  # NB: a zero padding-value tangent is a literal scalar, not a materialized array.
  t_pv = (np.zeros((), core.get_aval(operand).dtype) if type(t_padding_value) is ad.Zero
          else t_padding_value)
  return out, pad_p.bind(ad.instantiate_zeros(t_operand), t_pv, padding_config=padding_config)


def _pad_transpose(ct, operand, padding_value, *, padding_config):
  """JAX's `_pad_transpose`: the operand's cotangent is `ct` with the edge padding undone
  (a pad by `(-lo, -hi)`: negative padding crops, and cropped elements get zeros) and the
  interior padding skipped by a strided slice; the padding value's is the sum of the rest."""
  ct_aval = core.get_aval(ct)
  unpad = tuple((-lo, -hi, 0) for lo, hi, _ in padding_config)
  unpadded = pad_p.bind(ct, np.zeros((), ct_aval.dtype), padding_config=unpad)
  t_operand = slice(unpadded, (0,) * ct_aval.ndim, core.get_aval(unpadded).shape,
                    tuple(i + 1 for _, _, i in padding_config))
  t_padding_value = None
  if ad.is_undefined_primal(padding_value):
    axes = tuple(range(ct_aval.ndim))
    t_padding_value = sub(_reduce_sum(ct, axes), _reduce_sum(t_operand, axes))
  return [t_operand if ad.is_undefined_primal(operand) else None, t_padding_value]


ad.primitive_jvps[pad_p] = _pad_jvp
ad.primitive_transposes[pad_p] = _pad_transpose


def _pad_batch_rule(args, dims, *, padding_config):
  """JAX's rule: the batch dim is not padded; a batched padding value is put in with a
  `select` against a mask of the padded positions."""
  operand, padding_value = args
  operand_bdim, pv_bdim = dims
  if operand_bdim is batching.not_mapped:
    operand_bdim = 0
    operand = broadcast(operand, (_shape_of(padding_value)[pv_bdim],))
  config = list(padding_config)
  config.insert(operand_bdim, (0, 0, 0))
  config = tuple(config)
  if pv_bdim is batching.not_mapped:
    return pad_p.bind(operand, padding_value, padding_config=config), operand_bdim
  aval = core.get_aval(operand)
  x = pad_p.bind(operand, np.zeros((), aval.dtype), padding_config=config)
  mask = pad_p.bind(full(aval.shape, True, np.bool_), np.zeros((), np.bool_),
                    padding_config=config)
  padding = broadcast_in_dim(padding_value, _shape_of(x), (operand_bdim,))
  return select(mask, x, padding), operand_bdim


batching.primitive_batchers[pad_p] = _pad_batch_rule


def pad(operand: Any, padding_value: Any, padding_config: Sequence[Sequence[int]]) -> Any:
  """Pads `operand` with `padding_value` (JAX's lax.pad).

  Args:
    operand: array `T[*s]`.
    padding_value: scalar `T[]` (a Python scalar is an array of its default dtype, not
      promoted: `0.0` is float32, float64 under x64).
    padding_config: one `(lo, hi, interior)` per dimension: `interior >= 0` values between
      adjacent elements, then `lo` before and `hi` after; negative `lo`/`hi` remove elements.

  Returns:
    `T[*r]` with `r[k] = lo + hi + s[k] + (s[k] - 1) * interior` (`lo + hi` when `s[k] == 0`).

  Raises:
    TypeError: if the dtypes differ, or the config is not integer triples.
    ValueError: if the config has the wrong length, a negative interior, or makes a
      negative size, or `padding_value` is not a scalar.
  """
  try:
    # NB: NumPy integers are kept (JAX prints them: `np.int64(1)`), other indices converted
    # and symbolic dimensions (export) stay expressions
    config = tuple(tuple(v if isinstance(v, (int, np.integer)) or shape_poly.is_symbolic_dim(v)
                         else operator.index(v) for v in (lo, hi, i))
                   for lo, hi, i in padding_config)
  except (TypeError, ValueError) as e:
    raise TypeError(f"pad padding_config must be a sequence of (lo, hi, interior) integer "
                    f"triples, got {padding_config!r}.") from e
  return pad_p.bind(operand, padding_value, padding_config=config)


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


def _slice_transpose(ct, operand, *, start_indices, limit_indices, strides):
  """`ct` padded with zeros back to the operand's shape; strides become interior padding
  (JAX's rule)."""
  shape = operand.aval.shape
  ct_shape = core.get_aval(ct).shape
  # NB: the high padding (and interior) are NumPy ints, as JAX's rule computes them (its
  # jaxprs print `np.int64(1)`); the primitive is bound directly to keep them.
  if strides is None or all(s == 1 for s in strides):
    config = tuple(zip(start_indices, np.subtract(shape, limit_indices),
                       (0,) * len(start_indices)))
  else:
    real_limits = np.add(start_indices, np.where(
        np.array(ct_shape) == 0, 0, np.add(1, np.multiply(np.subtract(ct_shape, 1), strides))))
    config = tuple(zip(start_indices, np.subtract(shape, real_limits),
                       np.subtract(strides, 1)))
  return [pad_p.bind(ct, np.zeros((), core.get_aval(ct).dtype), padding_config=config)]


ad.deflinear_args(slice_p, _slice_transpose)


def _slice_batch_rule(args, dims, *, start_indices, limit_indices, strides):
  """The batch dim is taken whole; it stays where it is."""
  operand, = args
  bdim, = dims
  size = _shape_of(operand)[bdim]
  start, limit = list(start_indices), list(limit_indices)
  start.insert(bdim, 0)
  limit.insert(bdim, size)
  if strides is not None:
    strides = list(strides)
    strides.insert(bdim, 1)
    strides = tuple(strides)
  return slice_p.bind(operand, start_indices=tuple(start), limit_indices=tuple(limit),
                      strides=strides), bdim


batching.primitive_batchers[slice_p] = _slice_batch_rule


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
# iota(dtype, shape, dimension): the index along `dimension`, broadcast to `shape`.
iota_p = Primitive("iota")


def _iota_abstract_eval(*, dtype, shape, dimension, sharding=None):
  check_shapelike("iota", "shape", shape)
  if not (dtypes.is_integer(dtype) or dtypes.is_inexact(dtype)):
    raise TypeError(f"iota does not accept dtype {np.dtype(dtype).name}. Accepted dtypes are "
                    f"subtypes of integer, floating, complexfloating.")
  if not 0 <= dimension < len(shape):
    raise ValueError(f"iota dimension must be between 0 and len(shape), got "
                     f"dimension={dimension} for shape={shape}.")
  return ShapedArray(shape, dtype, False)


def _iota_lowering(ctx, *, dtype, shape, dimension, sharding=None):
  return ctx.op("stablehlo.iota", [], attrs=f"iota_dimension = {dimension} : i64")


iota_p.def_abstract_eval(_iota_abstract_eval)
lowering.register_lowering(iota_p, _iota_lowering)
# NB: as JAX's, every iota equation carries `sharding` (None here), printed.
iota_p.def_default_params(sharding=None)
ad.defjvp_zero(iota_p)   # NB: iota takes no operands, so nothing is ever differentiated


def broadcasted_iota(dtype: Any, shape: Sequence[int], dimension: int, *,
                     out_sharding: Any = None) -> Any:
  """The index along `dimension` at each position of an array of shape `shape`.

  Args:
    dtype: a number dtype T (canonicalized: int64 becomes int32 unless x64 is on).
    shape: the result shape `s`.
    dimension: the dimension that counts, `0 <= dimension < len(s)`; negative values count
      from the end.
    out_sharding: None, or the result's sharding (see `laid_out`).

  Returns:
    `T[*s]` (strongly typed) with `result[..., j, ...] = j` along `dimension`.

  Raises:
    TypeError: if T is bool or not a number type.
    ValueError: if `dimension` is out of range.
  """
  dtype = dtypes.check_user_dtype(dtype, "broadcasted_iota")
  shape = canonicalize_shape("broadcasted_iota", "shape", shape)
  dimension = operator.index(dimension)
  if -len(shape) <= dimension < 0:
    dimension += len(shape)
  return laid_out(iota_p.bind(dtype=dtype, shape=shape, dimension=dimension), out_sharding)


def iota(dtype: Any, size: int) -> Any:
  """`[0, 1, ..., size - 1]` of dtype `dtype`.

  Args:
    dtype: a number dtype T (canonicalized).
    size: the length n.

  Returns:
    `T[n]`.

  Raises:
    TypeError: if T is bool or not a number type, or `size` is negative.
  """
  return broadcasted_iota(dtype, (size if shape_poly.is_symbolic_dim(size)
                                 else operator.index(size),), 0)


# ---------------------------------------------------------------------------
# Composite wrappers (JAX's lax names; no primitives of their own)


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
  """The NumPy-broadcast shape of `shapes` (tuples of ints).

  Raises:
    ValueError: if the shapes are incompatible (naming them).
    TypeError: a shape that is not a sequence of static integers, or has a negative entry
      (JAX's messages).
  """
  checked = [check_broadcast_shape(s) for s in shapes]
  if len(shapes) == 1:
    return shapes[0]   # NB: as JAX's, the one shape as given
  try:
    return tuple(int(d) for d in np.broadcast_shapes(*checked))
  except ValueError:
    raise ValueError(f"Incompatible shapes for broadcasting: shapes={list(map(tuple, shapes))}"
                     ) from None


def check_broadcast_shape(shape: Any) -> tuple[int, ...]:
  """`shape` (a sequence of static integers; an int is a 1-d shape) as a tuple of ints, for
  broadcasting.

  Raises:
    TypeError: if it is not one, or has a negative entry (JAX's messages).
  """
  checked = canonicalize_shape("broadcast_shapes", "shape", shape)
  if not all(d >= 0 for d in checked):
    raise TypeError(f"Only non-negative indices are allowed when broadcasting static shapes, "
                    f"but got shape {shape!r}.")
  return checked


def broadcast_to_rank(x: Any, rank: int) -> Any:
  """`x` with leading size-1 dimensions added up to `rank`: T[*s] -> T[1, ..., 1, *s]."""
  ndim = core.get_aval(x).ndim
  if ndim >= rank:
    return x
  return broadcast(x, (1,) * (rank - ndim))


def full_like(x: Any, fill_value: Any, dtype: Any = None, shape: Sequence[int] | None = None,
              sharding: Any = None) -> Any:
  """An array like `x` (its shape and dtype unless given) filled with `fill_value`.

  Args:
    x: array-like `T[*s]` (only its aval is read).
    fill_value: a scalar, converted to the result dtype first (weakly typed when `x` is and
      `dtype` is None, as JAX's).
    dtype: the result dtype; None takes T.
    shape: the result shape; None takes `s`.
    sharding: None, or the result's sharding (as `full`'s).

  Returns:
    `full(shape, fill_value)` of that dtype (see `full`: a rank-0 result is the converted
    fill value itself).
  """
  aval = core.get_aval(x)
  # As JAX: the fill value is converted first (weakly typed when `x` is and no dtype is
  # given), then broadcast.
  weak = dtype is None and aval.weak_type
  if dtype is not None:
    # NB: JAX's full_like reads `dtype` with its `dtypes.dtype`, which reports a 64-bit
    # request without x64 "in dtype" for a NumPy scalar type, a name or a NumPy dtype, and
    # narrows any other dtype-like (a jnp scalar type) silently.
    explicit = isinstance(dtype, (str, np.dtype)) or (
        isinstance(dtype, type) and issubclass(dtype, np.generic))
    dtype = (dtypes.check_user_dtype(dtype, "dtype") if explicit
             else dtypes.canonicalize_dtype(dtype))
  fill_value = convert_element_type(fill_value, aval.dtype if dtype is None else dtype, weak)
  return full(aval.shape if shape is None else shape, fill_value, sharding=sharding)


def empty(shape: Sequence[int], dtype: Any, *, out_sharding: Any = None) -> Any:
  """An array of `shape` and `dtype` with unspecified contents (zeros here); a 64-bit
  dtype narrows silently without x64, as JAX's. `out_sharding`: None, or the result's
  sharding (see `laid_out`)."""
  return laid_out(full(shape, 0, dtypes.canonicalize_dtype(dtype)), out_sharding)


def split(operand: Any, sizes: Sequence[int], axis: int = 0) -> list[Any]:
  """Splits `operand` along `axis` into pieces of the given `sizes` (the `split` primitive,
  as JAX's `lax.split`; the sizes are kept as given in its params).

  Args:
    operand: array `T[*a, n, *b]` (`n` at `axis`; negative axes count from the end).
    sizes: non-negative integers summing to `n`.
    axis: the dimension to split.

  Returns:
    A list of `len(sizes)` arrays `T[*a, sizes[k], *b]`.

  Raises:
    ValueError: if `axis` is out of range, a size is negative, or the sizes do not sum to
      the dimension.
  """
  aval = core.get_aval(operand)
  axis = utils.canonicalize_axes("split", (operator.index(axis),), aval.ndim)[0]
  sizes = tuple(sizes)
  for n in sizes:
    operator.index(n)
  return split_p.bind(operand, sizes=sizes, axis=axis)


def tile(operand: Any, reps: Sequence[int]) -> Any:
  """`operand` repeated `reps[i]` times along each dimension i (JAX 0.10's `tile_p`).

  Args:
    operand: array `T[*s]`.
    reps: one non-negative integer (or symbolic dimension) per dimension of `operand`.

  Returns:
    `T[s[0] * reps[0], ..., s[-1] * reps[-1]]`.

  Raises:
    TypeError: if `reps` does not have one entry per dimension (JAX's message).
  """
  return tile_p.bind(operand, reps=tuple(r if shape_poly.is_symbolic_dim(r) else int(r)
                                         for r in reps))


# ---------------------------------------------------------------------------
# tile(operand, reps): JAX 0.10's `tile_p`. It lowers to a reshape to [1, s0, 1, s1, ...], a
# broadcast to [r0, s0, r1, s1, ...] and a reshape that merges each pair; it is linear, and
# its transpose sums the cotangent, reshaped to the pairs, over the repeat dimensions.
tile_p = Primitive("tile")


def _tile_abstract_eval(operand, *, reps):
  if operand.ndim != len(reps):
    raise TypeError(f"reps length must be equal to the ndim of x, got len(reps)={len(reps)} "
                    f"and x.ndim={operand.ndim}.")
  return ShapedArray(tuple(d * r for d, r in zip(operand.shape, reps)), operand.dtype,
                     operand.weak_type)


def _tile_lowering(ctx, x, *, reps):
  aval, = ctx.avals_in
  expanded = ShapedArray(tuple(k for d in aval.shape for k in (1, d)), aval.dtype)
  x, = ctx.op("stablehlo.reshape", [x], result_avals=[expanded])
  pairs = ShapedArray(tuple(k for r, d in zip(reps, aval.shape) for k in (r, d)), aval.dtype)
  x, = ctx.op("stablehlo.broadcast_in_dim", [x], operand_avals=[expanded],
              result_avals=[pairs],
              attrs=f"broadcast_dimensions = {i64_array(range(2 * aval.ndim))}")
  return ctx.op("stablehlo.reshape", [x], operand_avals=[pairs])


def _tile_transpose(ct, operand, *, reps):
  """JAX's rule: `ct` reshaped to [r0, s0, r1, s1, ...], summed over the repeats."""
  shape = operand.aval.shape
  pairs = reshape(ct, tuple(k for r, d in zip(reps, shape) for k in (r, d)))
  return [_reduce_sum(pairs, tuple(range(0, 2 * len(shape), 2)))]


def _tile_batch_rule(args, dims, *, reps):
  """The batch dim stays where it is, repeated once."""
  operand, = args
  bdim, = dims
  return tile_p.bind(operand, reps=reps[:bdim] + (1,) + reps[bdim:]), bdim


tile_p.def_abstract_eval(_tile_abstract_eval)
lowering.register_lowering(tile_p, _tile_lowering)
ad.deflinear_args(tile_p, _tile_transpose)
batching.primitive_batchers[tile_p] = _tile_batch_rule
