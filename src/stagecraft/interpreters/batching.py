"""Automatic batching (vmap): a trace whose tracers carry a batched value and the position of
its batch dimension, and one batching rule per primitive.

Rule signature (registry `primitive_batchers`, filled beside each primitive):
  rule(batched_args, batch_dims, **params) -> (out, out_dim)     (lists for multiple results)
where each batch dim is an int or `not_mapped` (None: that argument is the same for every
batch element). Rules move batch dimensions where JAX's rules move them (its jaxprs print the
same): n-ary elementwise primitives keep a batch dim shared by all their operands and move
them to the front otherwise (`broadcast_batcher`), dot_general and gather/scatter take it as
a batch dimension, etc.

Primitives that depend on the named axis (collectives such as psum, axis_index) register in
`fancy_primitive_batchers` with `rule(axis_data, batched_args, batch_dims, **params)`; they
are called even when no argument is batched, because the axis itself is what they read.
(`axis_primitive_batchers` takes JAX's older `rule(axis_size, axis_name, trace_type,
batched_args, batch_dims, **params)` form, as JAX's compatibility shim does.)

Design after JAX's `batching.py` (BatchTrace, `not_mapped`, `broadcast_batcher`).
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np


from stagecraft import core, dtypes
from stagecraft.core import ShapedArray, Trace, Tracer
from stagecraft.errors import MissingRuleError
from stagecraft.interpreters import partial_eval as pe

not_mapped = None

primitive_batchers: dict[core.Primitive, Callable] = core.RuleRegistry()
fancy_primitive_batchers: dict[core.Primitive, Callable] = {}


class _AxisPrimitiveBatchers:
  """JAX's `batching.axis_primitive_batchers`: registering `rule(axis_size, axis_name,
  trace_type, batched_args, batch_dims, **params)` (the older form, which libraries such as
  equinox use) puts a wrapper taking the `fancy_primitive_batchers` form there."""

  def __setitem__(self, prim: core.Primitive, rule: Callable) -> None:
    def fancy(axis_data, args, dims, **params):
      # NB: tuples, as JAX hands them over (equinox keeps the dims as a vmap's out_axes)
      return rule(axis_data.size, axis_data.name, None, tuple(args), tuple(dims), **params)
    fancy.__wrapped__ = rule
    fancy_primitive_batchers[prim] = fancy

  def __getitem__(self, prim: core.Primitive) -> Callable:
    rule = fancy_primitive_batchers[prim]
    return getattr(rule, "__wrapped__", rule)

  def __delitem__(self, prim: core.Primitive) -> None:
    del fancy_primitive_batchers[prim]

  def __contains__(self, prim: Any) -> bool:
    return prim in fancy_primitive_batchers

  def get(self, prim: core.Primitive, default: Any = None) -> Any:
    return self[prim] if prim in fancy_primitive_batchers else default


axis_primitive_batchers = _AxisPrimitiveBatchers()


class _AxisEnv(threading.local):
  def __init__(self):
    self.frames: list[tuple[Any, int]] = []


_axis_env = _AxisEnv()


@contextmanager
def extend_axis_env(name: Any, size: int):
  """Binds the axis `name` of `size` for collectives traced in the body (vmap's axis_name;
  pmap binds its axes the same way)."""
  _axis_env.frames.append((name, size))
  try:
    yield
  finally:
    _axis_env.frames.pop()


def bound_axes() -> list:
  """The `(name, size)` of each axis bound around the current trace, outermost first (the
  list itself: read it, do not change it)."""
  return _axis_env.frames


def bound_axis_names() -> list:
  return [n for n, _ in _axis_env.frames if n is not None]


def axis_size(name: Any) -> int | None:
  """The size of the innermost bound axis called `name` (None if unbound)."""
  for n, size in reversed(_axis_env.frames):
    if n == name:
      return size
  return None


class AxisData(NamedTuple):
  """The vmapped axis: its name (None when unnamed), size and spmd_axis_name; with sharding
  in types, `explicit_mesh_axis` is the spec entry (Explicit mesh axes) of the batched
  dimension of the batched operands (JAX's `explicit_mesh_axis`) and `sharding` the type
  sharding of one such operand (its mesh), so that values rebuilt with the batch axis keep
  their type."""
  name: Any
  size: int
  spmd_name: Any = None
  explicit_mesh_axis: Any = None
  sharding: Any = None


def _entries(a: ShapedArray) -> list:
  s = a._sharding
  if s is None:
    return [None] * len(a.shape)
  return list(s.spec) + [None] * (len(a.shape) - len(s.spec))


def _typed(a: ShapedArray, shape: tuple, es: list, like) -> ShapedArray:
  """`a` with `shape` and the spec entries `es` over the mesh of the NamedSharding `like`
  (untyped when no entry is split)."""
  if type(a) is not ShapedArray:
    return a.update(shape=shape)
  if like is None or all(e is None for e in es):
    return a.update(shape=shape, sharding=None)
  # NB: built from `like`'s classes: stagecraft.sharding imports the runtime, which
  # imports this module.
  return a.update(shape=shape, sharding=type(like)(like.mesh, type(like.spec)(*es)))


def mapped_aval_typed(a: ShapedArray, d: int) -> ShapedArray:
  """The per-example aval of `a` batched at `d`: the batch dimension and its spec entry
  dropped, the other dimensions keep theirs."""
  shape = a.shape[:d] + a.shape[d + 1:]
  if getattr(a, "_sharding", None) is None:
    return a.update(shape=shape)
  es = _entries(a)
  del es[d]
  return _typed(a, shape, es, a._sharding)


def unmapped_aval_typed(a: ShapedArray, d: int, axis_data: AxisData) -> ShapedArray:
  """The batched aval of the per-example aval `a` with the batch axis at `d`, its spec
  entry `axis_data.explicit_mesh_axis` (JAX's `unmapped_aval` with an explicit mesh axis)."""
  shape = a.shape[:d] + (axis_data.size,) + a.shape[d:]
  if getattr(a, "_sharding", None) is None and axis_data.explicit_mesh_axis is None:
    return a.update(shape=shape)
  es = _entries(a) if type(a) is ShapedArray else [None] * len(a.shape)
  es.insert(d, axis_data.explicit_mesh_axis)
  like = a._sharding if getattr(a, "_sharding", None) is not None else axis_data.sharding
  return _typed(a, shape, es, like)


def check_mapped_specs(args: Sequence[Any], in_dims: Sequence[int | None]) -> None:
  """JAX's check that the batch dimensions of `args` (`in_dims`: None for unbatched) are
  split over the same mesh axes (spec entries).

  Raises:
    ValueError: "Mapped away dimension of inputs passed to vmap should be sharded the same.
      Got inconsistent axis specs: x vs None" (JAX's words)."""
  first, seen = None, False
  for x, d in zip(args, in_dims):
    if d is None or d is not_mapped:
      continue
    a = getattr(x, "aval", None)
    e = None
    if type(a) is ShapedArray and a._sharding is not None:
      e = _entries(a)[d]
    if seen and e != first:
      raise ValueError("Mapped away dimension of inputs passed to vmap should be sharded "
                       f"the same. Got inconsistent axis specs: {first} vs {e}")
    first, seen = e, True


def _with_explicit_axis(axis_data: AxisData, args: Sequence[Any],
                        in_dims: Sequence[int | None]) -> AxisData:
  """`axis_data` with the spec entry (and sharding) of the first batched operand whose
  batch dimension is split over Explicit mesh axes."""
  if axis_data.explicit_mesh_axis is not None:
    return axis_data
  for x, d in zip(args, in_dims):
    if d is not_mapped:
      continue
    a = core.get_aval(x)
    if getattr(a, "_sharding", None) is not None:
      e = _entries(a)[d]
      if e is not None:
        return axis_data._replace(explicit_mesh_axis=e, sharding=a._sharding)
  return axis_data


class BatchTracer(Tracer):
  """A batched value: `val` has the batch axis at `batch_dim` (an int, never not_mapped:
  unbatched values are not wrapped)."""
  __slots__ = ("val", "batch_dim")

  def __init__(self, trace: "BatchTrace", val: Any, batch_dim: int):
    self._trace = trace
    self.val = val
    self.batch_dim = batch_dim

  @property
  def aval(self) -> ShapedArray:
    return mapped_aval_typed(core.get_aval(self.val), self.batch_dim)

  def _short_repr(self) -> str:
    return f"VmapTracer(aval={self.aval}, batched={core.get_aval(self.val)})"


class BatchTrace(Trace):
  """Runs each primitive's batching rule; the rule's own binds go to `parent`.

  `tag` names the vmap a trace belongs to (JAX's trace tag): a trace that a rule opens to
  run a user's function batched (a custom_jvp's JVP rule, a custom_vjp's fwd and bwd) shares
  its vmap's tag, so the values that function closes over, tracers of that vmap, are batched
  values there too."""
  __slots__ = ("parent", "axis_data", "tag")

  def __init__(self, parent: Trace, axis_data: AxisData, tag: Any = None):
    super().__init__()
    self.parent = parent
    self.axis_data = axis_data
    self.tag = object() if tag is None else tag

  def to_batch_info(self, x: Any):
    if type(x) is BatchTracer and (x._trace is self or x._trace.tag is self.tag):
      if x._trace is not self and not x._trace._valid:
        raise core.escaped_tracer_error(x)
      return x.val, x.batch_dim
    if isinstance(x, Tracer) and not x._trace._valid:
      raise core.escaped_tracer_error(x)
    return x, not_mapped

  def process_primitive(self, prim, args, params):
    vals, dims = [], []
    for x in args:
      v, d = self.to_batch_info(x)
      vals.append(v)
      dims.append(d)
    axis_rule = fancy_primitive_batchers.get(prim)
    with core.set_current_trace(self.parent):
      if axis_rule is not None:
        _rule_tags.append(self.tag)
        try:
          out, out_dim = axis_rule(self.axis_data, vals, dims, **params)
        finally:
          _rule_tags.pop()
      elif all(d is not_mapped for d in dims):
        return prim.bind(*vals, **params)
      else:
        rule = primitive_batchers.get(prim)
        if rule is None:
          raise MissingRuleError(
              f"Batching rule for '{prim.name}' not implemented: vmap needs one. Register "
              f"one beside the primitive: stagecraft.interpreters.batching.primitive_batchers"
              f"[{prim.name}_p] = rule (or batching.defvectorized / defbroadcasting).")
        out, out_dim = rule(vals, dims, **params)
    if prim.multiple_results:
      return [self._wrap(o, d) for o, d in zip(out, out_dim)]
    return self._wrap(out, out_dim)

  def _wrap(self, val, dim):
    return val if dim is not_mapped else BatchTracer(self, val, dim)


# ---------------------------------------------------------------------------
# Helpers for rules


def _ndim(x) -> int:
  return len(core.get_aval(x).shape)


def moveaxis(x: Any, src: int, dst: int) -> Any:
  """`x` with axis `src` moved to position `dst` (a transpose; no-op when equal)."""
  # NB: moving batch axes takes lax's shape primitives, which register batching rules here.
  from stagecraft.lax import shape as lax_shape
  nd = _ndim(x)
  src, dst = src % nd, dst % nd
  if src == dst:
    return x
  perm = [i for i in range(nd) if i != src]
  perm.insert(dst, src)
  return lax_shape.transpose(x, perm)


def broadcast(x: Any, size: int, axis: int, mesh_axis: Any = None) -> Any:
  """An unbatched `x` with a new axis of `size` inserted at `axis` (materialized; float0
  values, which have no runtime representation, stay host zeros). `mesh_axis`: accepted for
  JAX's signature (explicit sharding is not implemented)."""
  # NB: moving batch axes takes lax's shape primitives, which register batching rules here.
  from stagecraft.lax import shape as lax_shape
  a = core.get_aval(x)
  shape = list(a.shape)
  axis = axis % (len(shape) + 1)
  shape.insert(axis, size)
  if a.dtype == dtypes.float0:
    return np.zeros(shape, dtypes.float0)
  # NB: as in JAX, the kept dimensions are NumPy ints (JAX's jaxprs print them as
  # `np.int64(1)`), so the primitive is bound directly, past the wrapper's canonicalization.
  dims = tuple(np.delete(np.arange(len(shape)), axis))
  return lax_shape.broadcast_in_dim_p.bind(x, shape=tuple(shape), broadcast_dimensions=dims)


def bdim_at_front(x: Any, bdim: int | None, size: int, mesh_axis: Any = None) -> Any:
  """`x` with its batch axis first (broadcast to `size` when not mapped). `mesh_axis`:
  accepted for JAX's signature (explicit sharding is not implemented)."""
  if bdim is not_mapped:
    return broadcast(x, size, 0)
  return moveaxis(x, bdim, 0)


def matchaxis(x: Any, src: int | None, dst: int | None, size: int) -> Any:
  """Moves (or, from not_mapped, broadcasts) the batch axis of `x` from `src` to `dst`."""
  if src == dst:
    return x
  if src is not_mapped:
    return broadcast(x, size, dst)
  if dst is not_mapped:
    raise ValueError("matchaxis: cannot unbatch a batched value")
  return moveaxis(x, src, dst)


def defvectorized(prim: core.Primitive) -> None:
  """Batching for a unary elementwise primitive (or one whose other operands are never
  batched): apply it to the batched value; the batch dim stays where it is."""
  def rule(args, dims, **params):
    return prim.bind(*args, **params), dims[0]
  primitive_batchers[prim] = rule


def broadcast_batcher(prim: core.Primitive, args: Sequence[Any], dims: Sequence[int | None],
                      **params) -> tuple[Any, Any]:
  """The batching rule of an n-ary elementwise primitive whose operands broadcast (rank-0
  operands, and size-1 dimensions), as JAX's `broadcast_batcher`:

  * when every operand that is not rank 0 (batched shape) has the shape of the first batched
    operand and the same batch dim, the primitive is applied as it is (that batch dim);
  * otherwise each batched operand has its batch dim moved to the front, each unbatched
    operand that is not rank 0 gets a leading size-1 dimension (the primitive broadcasts it),
    batched operands of lower rank get trailing size-1 dimensions, unbatched rank-0 operands
    stay, and the result is batched at 0.

  Multiple results all get the same batch dim.
  """
  # NB: moving batch axes takes lax's shape primitives, which register batching rules here.
  from stagecraft.lax import shape as lax_shape
  shape, dim = next((core.get_aval(x).shape, d) for x, d in zip(args, dims)
                    if d is not not_mapped)
  if all(core.get_aval(x).shape == shape and d == dim
         for x, d in zip(args, dims) if _ndim(x)):
    out = prim.bind(*args, **params)
    return (out, [dim] * len(out)) if prim.multiple_results else (out, dim)
  args = [bdim_at_front(x, d, 1) if _ndim(x) else x for x, d in zip(args, dims)]
  nd = max(_ndim(x) for x in args)
  args = [x if d is not_mapped or _ndim(x) == nd
          else lax_shape.expand_dims(x, tuple(range(_ndim(x), nd)))
          for x, d in zip(args, dims)]
  out = prim.bind(*args, **params)
  return (out, [0] * len(out)) if prim.multiple_results else (out, 0)


def defbroadcasting(prim: core.Primitive, scalar_ok: Sequence[bool] | None = None) -> None:
  """Batching for an n-ary elementwise primitive whose operands broadcast (JAX's
  `batching.defbroadcasting`): `broadcast_batcher`.

  With `scalar_ok` (per operand, whether an unbatched rank-0 operand may stay rank 0), for
  primitives whose operands must have one shape (such as clamp's operand and add_any), the
  operands are aligned at one batch dim by `align_elementwise` instead (no size-1 dims)."""
  def rule(args, dims, **params):
    if scalar_ok is None:
      return broadcast_batcher(prim, args, dims, **params)
    args, out_dim = align_elementwise(args, dims, scalar_ok)
    out = prim.bind(*args, **params)
    return (out, [out_dim] * len(out)) if prim.multiple_results else (out, out_dim)
  primitive_batchers[prim] = rule


def unbatched_shape(x: Any, d: int | None) -> tuple[int, ...]:
  """The shape of `x` without its batch axis `d` (all of it when not mapped)."""
  s = core.get_aval(x).shape
  return s if d is not_mapped else s[:d] + s[d + 1:]


def align_elementwise(args: Sequence[Any], dims: Sequence[int | None],
                      scalar_ok: Sequence[bool] | None = None) -> tuple[list[Any], int]:
  """Aligns the operands of an elementwise primitive at one batch dim, moving as few as
  possible: the batch dim of the first full-shaped batched operand is kept, other batched
  operands are moved there, batched scalars are broadcast into it, and unbatched full-shaped
  operands are broadcast along it.

  Args:
    args, dims: the operands and their batch dims; each operand's unbatched shape is the
      full shape S or ().
    scalar_ok: per operand, whether an unbatched rank-0 operand may stay rank 0 (the
      primitive broadcasts it); default: all.

  Returns:
    `(args, out_dim)`: operands of the batched full shape (or unbatched rank 0).
  """
  # NB: moving batch axes takes lax's shape primitives, which register batching rules here.
  from stagecraft.lax import shape as lax_shape
  if scalar_ok is None:
    scalar_ok = [True] * len(args)
  size = next(core.get_aval(x).shape[d] for x, d in zip(args, dims) if d is not not_mapped)
  ushapes = [unbatched_shape(x, d) for x, d in zip(args, dims)]
  full = max(ushapes, key=len)
  out_dim = next((d for s, d in zip(ushapes, dims) if d is not not_mapped and s == full), 0)
  out_shape = full[:out_dim] + (size,) + full[out_dim:]
  out = []
  for x, d, s, ok in zip(args, dims, ushapes, scalar_ok):
    if d is not_mapped:
      if s == () and ok:
        out.append(x)
      elif s:
        out.append(broadcast(x, size, out_dim))
      else:
        out.append(lax_shape.broadcast_in_dim(x, out_shape, ()))
    elif s == full:
      out.append(moveaxis(x, d, out_dim))
    else:   # a batched scalar among full-shaped operands
      out.append(lax_shape.broadcast_in_dim(x, out_shape, (out_dim,)))
  return out, out_dim


# ---------------------------------------------------------------------------
# Batching functions and jaxprs


_rule_tags: list = []   # the tags of the BatchTraces whose fancy rules are running


def rule_tag() -> Any:
  """The tag of the vmap whose batching rule is running (for `batch_flat(tag=)`), or None
  outside a fancy rule."""
  return _rule_tags[-1] if _rule_tags else None


def batch_flat(fun: Callable[..., Sequence[Any]], args: Sequence[Any],
               in_dims: Sequence[int | None], axis_data: AxisData, tag: Any = None
               ) -> tuple[list[Any], list[int | None]]:
  """Runs the flat `fun` batched: returns its outputs and their batch dims (not_mapped for
  outputs that do not depend on a batched input). `tag`: that of the vmap `fun` belongs
  to (`rule_tag()`, taken while its rule ran), so tracers of that vmap which `fun` closes
  over are batched values in it; None: a new vmap."""
  axis_data = _with_explicit_axis(axis_data, args, in_dims)
  trace = BatchTrace(core.current_trace(), axis_data, tag)
  ins = [a if d is not_mapped else BatchTracer(trace, a, d) for a, d in zip(args, in_dims)]
  try:
    with core.set_current_trace(trace), extend_axis_env(axis_data.name, axis_data.size):
      outs = fun(*ins)
    vals, dims = [], []
    for x in outs:
      v, d = trace.to_batch_info(x)
      vals.append(v)
      dims.append(d)
    return vals, dims
  finally:
    trace.invalidate()


def batch_jaxpr(closed: core.ClosedJaxpr, axis_data: AxisData, in_dims: Sequence[int | None],
                out_dims_to: Sequence[int | None] | None = None):
  """The batched version of `closed` as a new jaxpr taking `(consts..., args...)` where each
  batched arg has its batch axis at `in_dims[i]` (None: unbatched, unchanged aval).

  Args:
    out_dims_to: where each output's batch axis must end up (None: unbatched allowed; an int
      forces that output to be batched there, broadcasting if needed). Default: all 0.

  Returns:
    `(batched_closed, consts, out_dims)` with the outputs' batch dims.
  """
  size = axis_data.size
  in_avals = []
  for a, d in zip(closed.in_avals, in_dims):
    if d is not_mapped:
      in_avals.append(a)
    else:
      in_avals.append(unmapped_aval_typed(a, d, axis_data))
  n_out = len(closed.out_avals)
  targets = [0] * n_out if out_dims_to is None else list(out_dims_to)
  final_dims: list = []

  def fun(*args):
    outs, dims = batch_flat(core.jaxpr_as_fun(closed), args, in_dims, axis_data)
    res = []
    final_dims[:] = []
    for o, d, t in zip(outs, dims, targets):
      if t is not_mapped:
        res.append(o)
        final_dims.append(d)
      else:
        res.append(matchaxis(o, d, t, size))
        final_dims.append(t)
    return res

  jaxpr, consts = pe.trace_to_jaxpr(fun, in_avals)
  return (core.ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), []), list(consts),
          list(final_dims))


# ---------------------------------------------------------------------------
# The rest of JAX's public `jax.interpreters.batching` names

def defreducer(prim: core.Primitive) -> None:
  """Batching for a reduction with an `axes` param (JAX's `batching.defreducer`): the reduced
  axes skip the batch axis, which stays in the result (moved left past the reduced axes
  before it). An `input_shape` param, if the primitive has one, becomes the batched shape."""
  def rule(args, dims, *, axes, **params):
    operand, = args
    bdim, = dims
    new_axes = tuple(a if a < bdim else a + 1 for a in axes)
    out_dim = bdim - sum(1 for a in new_axes if a < bdim)
    if "input_shape" in params:
      params = dict(params, input_shape=tuple(core.get_aval(operand).shape))
    return prim.bind(operand, axes=new_axes, **params), out_dim
  primitive_batchers[prim] = rule


def register_vmappable(data_type: type, spec_type: type, axis_size_type: type,
                       to_elt: Callable, from_elt: Callable,
                       make_iota: Callable | None) -> None:
  """JAX's hook for types that vmap maps other than arrays (its internal jumbles).

  Registering succeeds and returns None, as in JAX (libraries call it at import time:
  mujoco-mjx registers its warp data type): `vmappables` records `data_type`. As in JAX's
  public module there is no `is_vmappable`. stagecraft's vmap does not run the handlers:
  vmapping a function over such an instance raises NotImplementedError (api.vmap).

  Args:
    data_type: the class whose instances vmap would map.
    spec_type, axis_size_type: the types of its in_axes entries and mapped sizes.
    to_elt, from_elt, make_iota: JAX's handlers (kept, unused).
  """
  vmappables[data_type] = (spec_type, axis_size_type, to_elt, from_elt, make_iota)
  spec_types.add(spec_type)


# Types passed to `register_vmappable`, with their spec/size types and handlers.
vmappables: dict[type, tuple] = {}
spec_types: set[type] = set()


def unregister_vmappable(data_type: type) -> None:
  """Does nothing (as JAX's `unregister_vmappable`)."""


__all__ = ["extend_axis_env", "axis_size", "bound_axis_names", "not_mapped", "primitive_batchers", "axis_primitive_batchers", "AxisData",
           "BatchTrace", "BatchTracer", "moveaxis", "broadcast", "bdim_at_front", "matchaxis",
           "defvectorized", "defbroadcasting", "broadcast_batcher", "align_elementwise", "unbatched_shape",
           "batch_flat", "batch_jaxpr", "fancy_primitive_batchers", "defreducer",
           "register_vmappable", "unregister_vmappable", "check_mapped_specs"]
