"""Collectives over named axes: `psum`, `pmean`, `pmax`, `pmin`, `all_gather`, `axis_index`,
`ppermute`, `all_to_all`, `psum_scatter`, `ragged_all_to_all`, the one-sided `psend`/`precv`,
and the type cast `pcast` (`pvary`).

A collective reads the axis it names: under `vmap(..., axis_name=...)` its batching rule (an
axis rule, called even when no operand is batched) computes it over the batch dimension;
names that belong to an outer axis are passed on to the enclosing transformation. Outside any
axis of that name it raises NameError.

Lowering: a collective that reaches lowering reads its axes from the module's axis
environment (`ModuleContext.axis_env`, outermost axis first, as `xla_computation(axis_env=...)`
and pmap set it up) and becomes a StableHLO collective over replica groups: device `d` of
an environment `[('i', 4), ('j', 2)]` is `d = i * 2 + j` (the outermost axis varies slowest),
so `psum(x, 'i')` reduces over the groups `[[0, 2, 4, 6], [1, 3, 5, 7]]`. A module with one
partition addresses replicas (`replica_id`, no channels); one with several partitions
addresses devices by global id (`partition_id`, a channel per collective,
`use_global_device_ids`). A name the environment does not bind is an unbound axis (NameError).

Semantics (values and the axis names they accept) follow JAX's `lax` collectives.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from stagecraft import core, dtypes, tree_util
from stagecraft import sharding as sharding_lib
from stagecraft.core import ShapedArray
from stagecraft.interpreters import ad, batching, lowering, mapping, mlir
from stagecraft.lax import cumulative, elementwise, reduction, shape as lax_shape, slicing
from stagecraft.lax.dot import not_differentiable

__all__ = ["psum", "pmean", "pmax", "pmin", "all_gather", "axis_index", "ppermute",
           "pshuffle", "pbroadcast", "psum_scatter", "axis_size", "all_to_all", "pswapaxes", "psum_p", "pmax_p", "pmin_p",
           "all_gather_p", "axis_index_p", "ppermute_p", "all_to_all_p", "reduce_scatter_p",
           "axis_groups", "pvary", "pcast", "pvary_p", "psend", "precv", "psend_p", "precv_p",
           "ragged_all_to_all", "ragged_all_to_all_p"]


def _axis_size(name) -> int:
  size = batching.axis_size(name)
  if size is None:
    raise _unbound(name)
  return size


def _unbound(name) -> NameError:
  bound = batching.bound_axis_names()
  return NameError(f"unbound axis name: {name}. The following axis names (e.g. defined by "
                   f"pmap or vmap's axis_name) are available to collective operations: "
                   f"{bound}")


def _names(axis_name) -> tuple:
  return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


def _check_bound(axes, api: str | None = None):
  """Raises for an axis name no pmap/vmap/shard_map (or make_jaxpr's axis_env) binds; with
  `api`, JAX's text naming that function (`psum` for psum/pmax/pmin, as JAX's)."""
  for n in axes:
    if api is not None and batching.axis_size(n) is None:
      raise NameError(f"Found an unbound axis name: {n}. To fix this, please call {api} "
                      f"under `jax.shard_map`.")
    _axis_size(n)


# ---------------------------------------------------------------------------
# Lowering against the module's axis environment (replica groups).


def _env_positions(ctx, names: Sequence[Any]) -> tuple[list[int], list[int]]:
  """The positions of `names` in the module's axis environment and the environment's sizes.

  Raises:
    NameError: for a name the environment does not bind (listing the names it binds).
  """
  env = ctx.module.axis_env
  env_names = [n for n, _ in env]
  positions = []
  for name in names:
    if name not in env_names:
      raise NameError(f"unbound axis name: {name}. The following axis names (e.g. defined by "
                      f"pmap or vmap's axis_name) are available to collective operations: "
                      f"{env_names}")
    positions.append(env_names.index(name))
  return positions, [int(s) for _, s in env]


def axis_groups(axis_env: Sequence[tuple[Any, int]], names: Sequence[Any]) -> list[list[int]]:
  """The device groups of a collective over `names` in `axis_env` (outermost axis first).

  Device ids number the environment's grid row-major (the outermost axis varies slowest). Each
  group holds the devices that differ only in the named axes, ordered by the named axes in
  the order given; groups are ordered by the remaining axes.

  >>> axis_groups([('i', 4), ('j', 2)], ['i'])
  [[0, 2, 4, 6], [1, 3, 5, 7]]

  Raises:
    NameError: for a name `axis_env` does not bind.
  """
  env_names = [n for n, _ in axis_env]
  sizes = [int(s) for _, s in axis_env]
  for n in names:
    if n not in env_names:
      raise _unbound(n)
  pos = [env_names.index(n) for n in names]
  ids = np.arange(int(np.prod(sizes, dtype=np.int64))).reshape(sizes)
  moved = np.moveaxis(ids, pos, list(range(len(pos))))
  group_size = int(np.prod([sizes[p] for p in pos], dtype=np.int64))
  return np.reshape(moved, (group_size, -1)).T.tolist()


def _replica_groups(ctx, names: Sequence[Any], axis_index_groups=None) -> list[list[int]]:
  _env_positions(ctx, names)
  groups = axis_groups(ctx.module.axis_env, names)
  if axis_index_groups is not None:
    groups = [[g[i] for i in sub] for g in groups for sub in axis_index_groups]
  return groups


def _groups_attr(groups: Sequence[Sequence[int]]) -> str:
  rows = ", ".join("[" + ", ".join(str(int(i)) for i in g) + "]" for g in groups)
  n, m = len(groups), len(groups[0]) if groups else 0
  return f"replica_groups = dense<[{rows}]> : tensor<{n}x{m}xi64>"


def _spmd(ctx) -> bool:
  return ctx.module.num_partitions > 1


def _channel_attrs(ctx, *, global_ids: bool = True) -> list[str]:
  """A channel handle (and global device ids) for a collective of an SPMD module; nothing
  for a module of replicas."""
  if not _spmd(ctx):
    return []
  attrs = [f"channel_handle = #stablehlo.channel_handle<handle = {ctx.module.new_channel()}, "
           f"type = 1>"]
  if global_ids:
    attrs.append("use_global_device_ids")
  return attrs


def _split_axes(axes) -> tuple[tuple, tuple]:
  """(named axes, positional axes) of a psum/pmax/pmin's `axes` (JAX's: an int is a
  positional axis of the operand, as vmap's batching rules bind them)."""
  return (tuple(a for a in axes if not isinstance(a, int)),
          tuple(a for a in axes if isinstance(a, int)))


def _reduction_lowering(scalar_op: str, bool_op: str, positional=None):
  """Lowers psum/pmax/pmin: the positional axes reduced first (`positional(x, axes)`), then
  one `all_reduce` per operand over the named axes' replica groups."""
  def rule(ctx, *args, axes, axis_index_groups):
    named, pos = _split_axes(axes)
    if pos:
      args = mlir.lower_fun(lambda *xs: [positional(x, pos) for x in xs])(ctx, *args)
    if not named:
      return list(args)
    groups = _replica_groups(ctx, named, axis_index_groups)
    outs = []
    for x, aval in zip(args, ctx.avals_out):
      scalar = ShapedArray((), aval.dtype)
      op = bool_op if aval.dtype == dtypes.bool_ else scalar_op

      def body(a, b, op=op, scalar=scalar):
        return [ctx.elementwise(op, a, b, aval=scalar)]
      region = ctx.region([scalar, scalar], [scalar], body)
      attrs = ", ".join([*_channel_attrs(ctx), _groups_attr(groups)])
      outs += ctx.op("stablehlo.all_reduce", [x], [aval], attrs, [region],
                     operand_avals=[aval])
    return outs
  return rule


def _axis_index_lowering(ctx, *, axis_name):
  mesh = ctx.module.sdy_mesh
  manual = getattr(ctx.module, "manual_axes", None)
  if mesh is not None and manual:
    auto = [mesh.sdy_axis_names[n] for n in mesh.axis_names if n not in manual]
    if auto:
      # NB: in a shard_map manual over some mesh axes only, XLA refuses a partition_id in
      # the partly automatic region; as JAX, it goes in a region manual over the rest too.
      return mapping.emit_manual_computation(
          ctx, [], [], ["<@mesh, []>"], auto, [], list(ctx.avals_out),
          lambda _: _axis_index_value(ctx, axis_name))
  return _axis_index_value(ctx, axis_name)


def _axis_index_value(ctx, axis_name) -> list[str]:
  names = _names(axis_name)
  positions, sizes = _env_positions(ctx, names)
  # The index along several axes counts them row-major in the order named.
  u32 = ShapedArray((), np.dtype(np.uint32))
  dev = ctx.fb.fresh()
  ctx.fb.emit(f"{dev} = stablehlo.{'partition_id' if _spmd(ctx) else 'replica_id'} : "
              f"tensor<ui32>")
  total = None
  for p in positions:
    stride = int(np.prod(sizes[p + 1:], dtype=np.int64))
    q = ctx.elementwise("stablehlo.divide", dev, ctx.constant(stride, u32), aval=u32)
    r = ctx.elementwise("stablehlo.remainder", q, ctx.constant(sizes[p], u32), aval=u32)
    if total is None:
      total = r
    else:
      t = ctx.elementwise("stablehlo.multiply", total, ctx.constant(sizes[p], u32), aval=u32)
      total = ctx.elementwise("stablehlo.add", t, r, aval=u32)
  out = ctx.fb.fresh()
  ctx.fb.emit(f"{out} = stablehlo.convert {total} : (tensor<ui32>) -> "
              f"{lowering.ir_type(ctx.avals_out[0])}")
  return [out]


def all_gather_lowering(ctx, x, *, axis_name, all_gather_dimension, tiled, axis_size,
                        axis_index_groups=None):
  axis = all_gather_dimension
  groups = _replica_groups(ctx, _names(axis_name), axis_index_groups)
  aval_in, aval_out = ctx.avals_in[0], ctx.avals_out[0]
  if not tiled:
    shape = list(aval_in.shape)
    shape.insert(axis, 1)
    expanded = aval_in.update(shape=tuple(shape))
    dims = [d for d in range(len(shape)) if d != axis]
    x = ctx.op("stablehlo.broadcast_in_dim", [x], [expanded],
               f"broadcast_dimensions = {lowering.i64_array(dims)}")[0]
    aval_in = expanded
  attrs = ", ".join([f"all_gather_dim = {axis} : i64", *_channel_attrs(ctx),
                     _groups_attr(groups)])
  return ctx.op("stablehlo.all_gather", [x], [aval_out], attrs, operand_avals=[aval_in])


def _ppermute_lowering(ctx, x, *, axis_name, perm):
  groups = _replica_groups(ctx, _names(axis_name))
  pairs = [(g[s], g[t]) for g in groups for s, t in perm]
  body = ", ".join(f"[{s}, {t}]" for s, t in pairs)
  attrs = [*_channel_attrs(ctx, global_ids=False)]
  attrs.append(f"source_target_pairs = dense<[{body}]> : tensor<{len(pairs)}x2xi64>"
               if pairs else "source_target_pairs = dense<> : tensor<0x2xi64>")
  return ctx.op("stablehlo.collective_permute", [x], attrs=", ".join(attrs))


def _all_to_all_lowering(ctx, x, *, axis_name, split_axis, concat_axis, tiled=True,
                         axis_index_groups=None):
  groups = _replica_groups(ctx, _names(axis_name))
  axis_size = len(groups[0])
  attrs = ", ".join([f"split_dimension = {split_axis} : i64",
                     f"concat_dimension = {concat_axis} : i64",
                     f"split_count = {axis_size} : i64", *_channel_attrs(ctx, global_ids=False),
                     _groups_attr(groups)])
  return ctx.op("stablehlo.all_to_all", [x], attrs=attrs)


def _checked_groups(axis_index_groups, size: int) -> tuple | None:
  """`axis_index_groups` as a tuple of tuples of ints, checked as JAX's: groups of one
  size covering `range(size)` exactly once.

  Raises:
    ValueError: groups of different sizes, or not covering every index exactly once."""
  if axis_index_groups is None:
    return None
  groups = tuple(tuple(int(i) for i in g) for g in axis_index_groups)
  if sorted(i for g in groups for i in g) != list(range(size)):
    raise ValueError("axis_index_groups must cover all indices exactly once")
  if len({len(g) for g in groups}) != 1:
    raise ValueError("axis_index_groups must all be the same size")
  return groups


def _unbound_impl(name_param: str):
  def impl(*args, **params):
    raise _unbound(params[name_param])
  return impl


# ---------------------------------------------------------------------------
# psum / pmax / pmin: reductions over the named axes (several operands bound together).


def _reduction_prim(name: str):
  p = core.Primitive(name)
  p.multiple_results = True

  def abstract_eval(*avals, axes, axis_index_groups):
    named, pos = _split_axes(axes)
    _check_bound(named, "psum")
    if pos:
      if axis_index_groups is not None:
        raise ValueError(f"axis_index_groups can only be used with reductions over named "
                         f"axes, but got: {axes}")
      avals = [a.update(shape=tuple(d for i, d in enumerate(a.shape) if i not in pos))
               for a in avals]
    # NB: as JAX's, the result is strongly typed (a weak operand's sum is not weak)
    return [a.update(weak_type=False) if a.weak_type else a for a in avals]

  def impl(*args, axes, axis_index_groups):
    named, pos = _split_axes(axes)
    if named:
      raise _unbound(named[0])
    return [_POSITIONAL[name](x, pos) for x in args]   # NB: positional axes only

  p.def_abstract_eval(abstract_eval)
  p.def_impl(impl)
  return p


psum_p = _reduction_prim("psum")
pmax_p = _reduction_prim("pmax")
pmin_p = _reduction_prim("pmin")
_POSITIONAL = {"psum": reduction.reduce_sum, "pmax": reduction.reduce_max,
               "pmin": reduction.reduce_min}
lowering.register_lowering(psum_p, _reduction_lowering("stablehlo.add", "stablehlo.or",
                                                       reduction.reduce_sum))
lowering.register_lowering(pmax_p, _reduction_lowering("stablehlo.maximum", "stablehlo.or",
                                                       reduction.reduce_max))
lowering.register_lowering(pmin_p, _reduction_lowering("stablehlo.minimum", "stablehlo.and",
                                                       reduction.reduce_min))


def _reduction_batcher(prim, reduce_fn, unbatched_fn):
  # As JAX's rule: a batched operand's batch dimension moves to the front and is reduced as
  # a positional axis of the equation (`psum[axes=(0,)]`, `axes=('i', 0)`), the other
  # positional axes shifting past it; an unbatched operand over the vmapped axis is the
  # same on every member (psum: times the axis size).
  def rule(axis_data, args, dims, *, axes, axis_index_groups):
    name = axis_data.name
    ours = name is not None and name in axes
    pos = any(isinstance(a, int) for a in axes)
    if not ours and not pos:
      # Not our axis: reduce over the outer axes with the batch dim kept where it is.
      return prim.bind(*args, axes=axes, axis_index_groups=axis_index_groups), list(dims)
    if axis_index_groups is not None:
      raise NotImplementedError(f"{prim.name} with axis_index_groups is not supported under "
                                f"vmap.")
    outs, out_dims = [], []
    for x, d in zip(args, dims):
      if d is batching.not_mapped:
        if ours:
          rest = tuple(a for a in axes if a != name)
          if rest:
            x, = prim.bind(x, axes=rest, axis_index_groups=None)
          outs.append(unbatched_fn(x, axis_data.size))
        else:
          outs.append(prim.bind(x, axes=axes, axis_index_groups=None)[0])
        out_dims.append(batching.not_mapped)
        continue
      x = batching.moveaxis(x, d, 0)
      new = tuple(a + 1 if isinstance(a, int) else 0 if ours and a == name else a
                  for a in axes)
      outs.append(prim.bind(x, axes=new, axis_index_groups=None)[0])
      out_dims.append(batching.not_mapped if ours else 0)
    return outs, out_dims
  batching.fancy_primitive_batchers[prim] = rule


def _reduce_sum(x, d):
  return reduction.reduce_sum(x, (d,))


def _reduce_max(x, d):
  return reduction.reduce_max(x, (d,))


def _reduce_min(x, d):
  return reduction.reduce_min(x, (d,))


def _times_size(x, n):
  """psum of a value that is the same on every member: n times it."""
  aval = core.get_aval(x)
  return elementwise.mul(x, lax_shape.full_like(x, n) if aval.shape else np.asarray(n, aval.dtype)[()])


_reduction_batcher(psum_p, _reduce_sum, _times_size)
_reduction_batcher(pmax_p, _reduce_max, lambda x, n: x)
_reduction_batcher(pmin_p, _reduce_min, lambda x, n: x)


def _psum_transpose(cts, *args, axes, axis_index_groups):
  named, pos = _split_axes(axes)
  if pos:
    # As JAX's: the positional axes' cotangents are broadcast back (reduce_sum's transpose),
    # then summed over the named axes (`psum[axes=()]` when there are none).
    cts = [c if type(c) is ad.Zero else
           reduction.reduce_sum_transpose(c, a, axes=pos)[0] for c, a in zip(cts, args)]
  nz = [c for c in cts if type(c) is not ad.Zero]
  outs = iter(psum_p.bind(*nz, axes=named, axis_index_groups=axis_index_groups) if nz else [])
  return [c if type(c) is ad.Zero else next(outs) for c in cts]


def _psum_jvp(primals, tangents, *, axes, axis_index_groups):
  outs = psum_p.bind(*primals, axes=axes, axis_index_groups=axis_index_groups)
  nz = [t for t in tangents if type(t) is not ad.Zero]
  it = iter(psum_p.bind(*nz, axes=axes, axis_index_groups=axis_index_groups) if nz else [])
  return outs, [t if type(t) is ad.Zero else next(it) for t in tangents]


ad.primitive_jvps[psum_p] = _psum_jvp
ad.primitive_transposes[psum_p] = _psum_transpose


def _tree_collective(prim, x, axis_name, axis_index_groups=None):
  leaves, treedef = tree_util.tree_flatten(x)
  axes = _names(axis_name)
  outs = prim.bind(*leaves, axes=axes, axis_index_groups=axis_index_groups)
  return tree_util.tree_unflatten(treedef, outs)


def psum(x: Any, axis_name: Any, *, axis_index_groups: Any = None) -> Any:
  """The sum of `x` over the named axis (or tuple of axes); every member of the axis gets the
  same result. `psum(1, name)` is the axis size.

  Args:
    x: a pytree of arrays `T[*s]`, T numeric.
    axis_name: a name bound by an enclosing vmap (or pmap), or a tuple of names.

  Returns:
    The same structure, shapes and dtypes as `x`.

  Raises:
    NameError: if `axis_name` is not bound by an enclosing vmap/pmap.
    NotImplementedError: for axis_index_groups under vmap.
  """
  leaves = tree_util.tree_leaves(x)
  if axis_index_groups is None and leaves and all(
      isinstance(v, (int, float, complex, np.number)) and not isinstance(v, bool)
      for v in leaves):
    # NB: as JAX, a sum of Python/NumPy scalars (the same on every member) is static:
    # `psum(1, name)` is the axis size as a Python int.
    n = 1
    for name in _names(axis_name):
      n *= _axis_size(name)
    return tree_util.tree_map(lambda v: v * n, x)
  if core.check_vma_state[0] and axis_index_groups is None:
    # NB: inside a check_vma shard_map body, JAX's typed psum: one `psum_invariant` per
    # leaf (an operand invariant along an axis is `pvary`'d first, by `bind`).
    axes = _names(axis_name)

    def one(leaf):
      aval = core.get_aval(leaf)
      states = set()
      for a in axes:
        states.add("varying" if a in aval.vma else "invarying")
      if len(states) > 1:   # JAX's check of the input's state along the axes
        raise ValueError(f"jax.lax.psum can only accept axis_name which corresponds to one "
                         f"of varying, unreduced, reduced or invarying state of the input. "
                         f"Got input type: {aval}, axes: {axes} and input state: {states}")
      return psum_invariant_p.bind(leaf, axes=axes)
    return tree_util.tree_map(one, x)
  return _tree_collective(psum_p, x, axis_name, axis_index_groups)


# ---------------------------------------------------------------------------
# psum_invariant: psum of a varying value inside a check_vma body (the result is invariant
# along the axes), JAX's typed psum.

psum_invariant_p = core.Primitive("psum_invariant")


def _psum_invariant_abstract_eval(x, *, axes):
  _check_bound(axes)
  return x.update(vma=x.vma - frozenset(axes))


def _psum_invariant_transpose(ct, x, *, axes):
  # NB: JAX's typed transpose: the (invariant) cotangent made varying, not summed (a typed
  # shard_map's map rules neither divide result cotangents nor sum operand ones).
  return pvary_p.bind(ct, axes=axes)


def _psum_invariant_batcher(axis_data, args, dims, *, axes):
  outs, ds = batching.fancy_primitive_batchers[psum_p](axis_data, args, dims, axes=axes,
                                                      axis_index_groups=None)
  return outs[0], ds[0]


def _psum_invariant_lowering(ctx, x, *, axes):
  return _psum_lowering(ctx, x, axes=axes, axis_index_groups=None)


psum_invariant_p.def_abstract_eval(_psum_invariant_abstract_eval)
psum_invariant_p.def_impl(_unbound_impl("axes"))
_psum_lowering = _reduction_lowering("stablehlo.add", "stablehlo.or")
lowering.register_lowering(psum_invariant_p, _psum_invariant_lowering)
batching.fancy_primitive_batchers[psum_invariant_p] = _psum_invariant_batcher
ad.deflinear_args(psum_invariant_p, lambda ct, x, *, axes: [_psum_invariant_transpose(ct, x,
                                                                                 axes=axes)])


def axis_size(axis_name: Any) -> int:
  """The size of the named axis (a product for a tuple of names), a Python int.

  Raises:
    NameError: if a name is not bound by an enclosing vmap/pmap.
  """
  n = 1
  for name in _names(axis_name):
    n *= _axis_size(name)
  return n


def pmean(x: Any, axis_name: Any, *, axis_index_groups: Any = None) -> Any:
  """The mean of `x` (a pytree of arrays `T[*s]`) over the named axis (or axes):
  `psum(x) / axis size` (the group size with `axis_index_groups`), with `x`'s structure and
  shapes; floating dtypes are kept, integer and bool ones give the default float dtype (a
  true division, as JAX's).

  Raises:
    NameError: if an axis name is not bound by an enclosing vmap/pmap.
  """
  n = 1
  for name in _names(axis_name):
    n *= _axis_size(name)
  if axis_index_groups is not None:
    n = len(axis_index_groups[0])   # NB: the mean is over each group, as JAX

  def mean(s):
    # NB: as JAX's `s / n`: a true division, integers and bools giving the default float
    dtype = core.get_aval(s).dtype
    if not dtypes.issubdtype(dtype, np.inexact):
      dtype = dtypes.default_float_dtype()
      s = elementwise.convert_element_type(s, dtype)
    return elementwise.div(s, np.asarray(n, dtype)[()])
  return tree_util.tree_map(mean, psum(x, axis_name, axis_index_groups=axis_index_groups))


def pmax(x: Any, axis_name: Any, *, axis_index_groups: Any = None) -> Any:
  """The maximum of `x` (a pytree of arrays `T[*s]`, T real) over the named axis (or axes),
  with `x`'s structure, shapes and dtypes.

  Raises:
    NameError: if an axis name is not bound by an enclosing vmap/pmap.
  """
  return _tree_collective(pmax_p, x, axis_name, axis_index_groups)


def pmin(x: Any, axis_name: Any, *, axis_index_groups: Any = None) -> Any:
  """The minimum of `x` (a pytree of arrays `T[*s]`, T real) over the named axis (or axes),
  with `x`'s structure, shapes and dtypes.

  Raises:
    NameError: if an axis name is not bound by an enclosing vmap/pmap.
  """
  return _tree_collective(pmin_p, x, axis_name, axis_index_groups)


# ---------------------------------------------------------------------------
# axis_index


axis_index_p = core.Primitive("axis_index")


def _axis_index_abstract_eval(*, axis_name):
  _axis_size(axis_name)
  if core.check_vma_state[0]:   # varying along its axis (JAX's type)
    return ShapedArray((), dtypes.int32, False, vma=frozenset(_names(axis_name)))
  return ShapedArray((), dtypes.int32, False)


def _axis_index_batcher(axis_data, args, dims, *, axis_name):
  if axis_data.name != axis_name:
    return axis_index_p.bind(axis_name=axis_name), batching.not_mapped
  return lax_shape.iota(np.int32, axis_data.size), 0


axis_index_p.def_abstract_eval(_axis_index_abstract_eval)
axis_index_p.def_impl(_unbound_impl("axis_name"))
lowering.register_lowering(axis_index_p, _axis_index_lowering)
batching.fancy_primitive_batchers[axis_index_p] = _axis_index_batcher
ad.defjvp_zero(axis_index_p)


def axis_index(axis_name: Any) -> Any:
  """The position of this member along the named axis: an `int32[]` in `[0, axis size)`.
  For a tuple of names, the position in their grid counted row-major in the order named
  (`axis_index(('i', 'j')) == axis_index('i') * axis_size('j') + axis_index('j')`).

  Raises:
    NameError: if `axis_name` is not bound by an enclosing vmap/pmap.
  """
  if not isinstance(axis_name, (tuple, list)):
    return axis_index_p.bind(axis_name=axis_name)
  # NB: JAX's sequence of equations: from the last name, each index times the size of the
  # names after it, added to a running index from 0.
  idx, inner = np.int32(0), 1
  for name in reversed(axis_name):
    idx = elementwise.add(idx, elementwise.mul(axis_index_p.bind(axis_name=name),
                                               np.asarray(inner, np.int32)[()]))
    inner *= _axis_size(name)
  return idx


# ---------------------------------------------------------------------------
# pvary / pcast: invariant -> varying (shard_map's varying-manual-axes types)

pvary_p = core.Primitive("pvary")


def _pvary_abstract_eval(x, *, axes):
  for n in axes:
    if batching.axis_size(n) is None:
      raise NameError(f"Found an unbound axis name: {n}. To fix this, please call pvary under "
                      f"`jax.shard_map`.")
  if core.check_vma_state[0] or x.vma:
    return x.update(vma=x.vma | frozenset(axes))
  return x


def _pvary_impl(x, *, axes):
  raise ValueError("pvary should be called under jax.shard_map.")


def _pvary_transpose(ct, x, *, axes):
  # In a check_vma body (typed), JAX's transpose: psum_invariant (the cotangent summed over
  # the axes). Elsewhere (a pcast in an untyped body) the identity: there the map rules
  # psum the cotangent of an operand replicated over a manual axis where it enters the map
  # (interpreters/mapping.MapRules), and psum transposes to psum, which together sum each
  # cotangent exactly once.
  if core.check_vma_state[0]:
    return [psum_invariant_p.bind(ct, axes=axes)]
  return [ct]


def _pvary_batcher(axis_data, args, dims, *, axes):
  (x,), (d,) = args, dims
  rest = tuple(a for a in axes if a != axis_data.name)
  return (pvary_p.bind(x, axes=rest) if rest else x), d


def _pvary_lowering(ctx, x, *, axes):
  return [x]   # a change of type only


pvary_p.def_abstract_eval(_pvary_abstract_eval)
pvary_p.def_impl(_pvary_impl)
lowering.register_lowering(pvary_p, _pvary_lowering)
batching.fancy_primitive_batchers[pvary_p] = _pvary_batcher
ad.deflinear_args(pvary_p, _pvary_transpose)


def pvary(x: Any, axis_name: Any) -> Any:
  """Marks `x` (a pytree of arrays), invariant along the named manual axes of a shard_map,
  as varying along them; values are unchanged. `pcast(x, axis_name, to='varying')`.

  (JAX 0.10 removed `jax.lax.pvary` for `jax.lax.pcast`; this is the primitive's wrapper.)

  Raises:
    NameError: an axis not bound by an enclosing shard_map.
    ValueError: outside shard_map; and (shard_map's check_vma) when `x` already varies along
      the axes.
  """
  axes = tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)
  if not axes:
    return x
  if not core.check_vma_state[0] and all(
      n in sharding_lib.get_abstract_mesh().manual_axes for n in axes):
    return x   # NB: as JAX's, nothing to mark in a body without varying types (check_vma=False)
  if all(n in core.axis_order for n in axes):   # mesh axes: in mesh order, as JAX's
    axes = core.order_axes(axes)

  def one(leaf):
    red = _manual_states(core.get_aval(leaf))[1] & set(axes)
    if red:   # NB: a reduced value becomes varying by JAX's reduced->varying cast
      leaf = reduced_vary_cast_p.bind(leaf, axes=tuple(a for a in axes if a in red))
      rest = tuple(a for a in axes if a not in red)
      return pvary_p.bind(leaf, axes=rest) if rest else leaf
    return pvary_p.bind(leaf, axes=axes)
  return tree_util.tree_map(one, x)


_PCAST_TO = ("unreduced", "varying", "reduced")


def pcast(x: Any, axis_name: Any, *, to: str) -> Any:
  """Casts the manual-axis state of `x` (a pytree of arrays) along the named manual axes of
  a shard_map, values unchanged, as JAX's `jax.lax.pcast`: an invariant value to
  'varying' (`pvary`); a varying one to 'unreduced' (each device's value is then a partial
  sum, `vary_unreduced_cast_p`); a reduced one to 'varying' (`reduced_vary_cast_p`).

  Args:
    x: a pytree of arrays inside a shard_map body.
    axis_name: a manual axis name or a tuple of them (an empty tuple: `x` unchanged).
    to: 'varying', 'unreduced' or 'reduced'.

  Returns:
    `x`, typed with the new state along the axes.

  Raises:
    TypeError: a set of axis names.
    ValueError: an unknown `to`; outside shard_map; a cast JAX does not have ("Unsupported
      pcast from=varying, to='varying'"); axes in different states.
    NotImplementedError: invariant to 'reduced' (JAX's `preduced`).
    NameError: an axis no enclosing shard_map binds.
  """
  if isinstance(axis_name, (set, frozenset)):
    raise TypeError(f"{axis_name=} must be a tuple or a str. Got {axis_name}")
  if not axis_name:
    return x
  if to not in _PCAST_TO:
    raise ValueError("Got unexpected `to` value. Allowed `to` values are: "
                     "{'unreduced', 'varying', 'reduced'}")
  axes = tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)

  def one(leaf):
    aval = core.get_aval(leaf)
    frm = _pcast_from(aval, axes)
    if (frm, to) == ("invarying", "varying"):
      return pvary(leaf, axis_name)
    if (frm, to) == ("varying", "unreduced"):
      return vary_unreduced_cast_p.bind(leaf, axes=_mesh_ordered(axes))
    if (frm, to) == ("reduced", "varying"):
      return reduced_vary_cast_p.bind(leaf, axes=_mesh_ordered(axes))
    if (frm, to) == ("invarying", "reduced"):
      raise NotImplementedError("pcast from invarying to='reduced' (JAX's preduced) is not "
                                "supported yet.")
    raise ValueError(f"Unsupported pcast from={frm}, to={to!r}")
  return tree_util.tree_map(one, x)


def _manual_states(aval) -> tuple[frozenset, frozenset]:
  s = getattr(aval, "_sharding", None)
  return (s.spec.unreduced, s.spec.reduced) if s is not None else (frozenset(), frozenset())


def _pcast_from(aval, axes) -> str:
  """The state of `aval` along `axes`: varying, unreduced, reduced or invarying (JAX's
  error when they differ)."""
  u, r = _manual_states(aval)
  found = {"varying" if a in aval.vma else "unreduced" if a in u else
           "reduced" if a in r else "invarying" for a in axes}
  if len(found) > 1:
    raise ValueError(f"jax.lax.pcast can only accept axis_name which corresponds to one of "
                     f"varying, unreduced, reduced or invarying state of the input. Got input "
                     f"type: {aval.str_short(False)}, axes: {axes} and input state: {found}")
  return found.pop()


def _mesh_ordered(axes) -> tuple:
  return core.order_axes(axes) if all(n in core.axis_order for n in axes) else tuple(axes)


def _with_states(aval, vma, unreduced, reduced):
  """`aval` with these varying axes and unreduced/reduced manual axes (kept in its type's
  spec, over the body's abstract mesh)."""
  s = aval._sharding
  if s is None and not unreduced and not reduced:
    return aval.update(vma=vma)
  if s is None:
    s = sharding_lib.NamedSharding(sharding_lib.get_abstract_mesh(),
                                   sharding_lib.PartitionSpec(*(None,) * len(aval.shape)))
  spec = s.spec.update(unreduced=unreduced, reduced=reduced)
  keep = unreduced or reduced or any(e is not None for e in spec)
  return aval.update(vma=vma, sharding=s.update(spec=spec) if keep else None)


def _check_cast_axes(name: str, axes) -> None:
  for n in axes:
    if batching.axis_size(n) is None:
      raise NameError(f"Found an unbound axis name: {n}. To fix this, please call {name} "
                      f"under `jax.shard_map`.")


def _vary_unreduced_cast_abstract_eval(x, *, axes):
  _check_cast_axes("vary_unreduced_cast", axes)
  u, r = _manual_states(x)
  if not core.check_vma_state[0] and not x.vma:
    return x   # NB: an untyped body (eager shard_map, check_vma=False): a no-op
  if not x.vma:
    raise ValueError(f"vary_unreduced_cast only accepts inputs that are varying. Got "
                     f"{x.str_short()}")
  if not x.vma & set(axes):
    raise ValueError(f"vary_unreduced_cast is a Varying->Unreduced collective. This means that "
                     f"the axis names mentioned in `axes` passed to `vary_unreduced_cast` must "
                     f"be present in `jax.typeof(x).mat.varying`. Got axes={axes} and "
                     f"jax.typeof(x).mat.varying={x.vma}")
  if u & set(axes):
    raise ValueError(f"vary_unreduced_cast input cannot be unreduced across the axis_name "
                     f"provided. Got x={x.str_short()} and axis_name={axes}")
  return _with_states(x, x.vma - set(axes), u | frozenset(axes), r)


def _reduced_vary_cast_abstract_eval(x, *, axes):
  _check_cast_axes("reduced_vary_cast", axes)
  u, r = _manual_states(x)
  if not core.check_vma_state[0] and not r:
    return x   # NB: an untyped body (eager shard_map, check_vma=False): a no-op
  if not r:
    raise ValueError(f"reduced_vary_cast only accepts inputs that are reduced. Got "
                     f"{x.str_short()}")
  if not r & set(axes):
    raise ValueError(f"reduced_vary_cast is a Reduced->Varying collective. This means that "
                     f"the axis names mentioned in `axes` passed to `reduced_vary_cast` must be "
                     f"present in `jax.typeof(x).mat.reduced`. Got axes={axes} and "
                     f"jax.typeof(x).mat.reduced={r}")
  if x.vma & set(axes):
    raise ValueError(f"reduced_vary_cast input cannot be varying across the axis_name provided."
                     f" Got x={x.str_short()} and axis_name={axes}")
  return _with_states(x, x.vma | frozenset(axes), u, r - set(axes))


def _cast_impl(name):
  def impl(x, *, axes):
    raise ValueError(f"{name} should be called under jax.shard_map.")
  return impl


#: JAX's no-op casts between varying, unreduced and reduced manual axes (a change of type
#: only; `pcast(to='unreduced')` of a varying value, `pcast(to='varying')` of a reduced one):
#: each transposes to the other.
vary_unreduced_cast_p = core.Primitive("vary_unreduced_cast_p")
reduced_vary_cast_p = core.Primitive("reduced_vary_cast_p")
for _p, _rule in ((vary_unreduced_cast_p, _vary_unreduced_cast_abstract_eval),
                  (reduced_vary_cast_p, _reduced_vary_cast_abstract_eval)):
  _p.def_abstract_eval(_rule)
  _p.def_impl(_cast_impl(_p.name[:-2]))
  lowering.register_lowering(_p, lambda ctx, x, *, axes: [x])
  core.sharding_rules[_p] = lambda x, *, _rule=_rule, axes: _rule(x, axes=axes)._sharding
  core.ur_rules[_p] = lambda x, *, _rule=_rule, axes: _manual_states(_rule(x, axes=axes))
def _cast_batcher(p):
  def batcher(axis_data, args, dims, *, axes):
    (x,), (d,) = args, dims
    rest = tuple(a for a in axes if a != axis_data.name)
    return (p.bind(x, axes=rest) if rest else x), d
  return batcher


for _p in (vary_unreduced_cast_p, reduced_vary_cast_p):
  batching.fancy_primitive_batchers[_p] = _cast_batcher(_p)
mapping.replication_rules[vary_unreduced_cast_p] = (
    lambda in_vary, *, axes: [in_vary[0] - frozenset(axes)])
mapping.replication_rules[reduced_vary_cast_p] = (
    lambda in_vary, *, axes: [in_vary[0] | frozenset(axes)])
ad.deflinear_args(vary_unreduced_cast_p,
             lambda ct, x, *, axes: [reduced_vary_cast_p.bind(ct, axes=axes)])
ad.deflinear_args(reduced_vary_cast_p,
             lambda ct, x, *, axes: [vary_unreduced_cast_p.bind(ct, axes=axes)])


# ---------------------------------------------------------------------------
# all_gather


all_gather_p = core.Primitive("all_gather")


def _all_gather_abstract_eval(x, *, axis_name, all_gather_dimension, tiled, axis_size,
                              axis_index_groups=None):
  axis = all_gather_dimension
  _check_bound(_names(axis_name))
  shape = list(x.shape)
  if tiled:
    shape[axis] *= axis_size
  else:
    shape.insert(axis, axis_size)
  return x.update(shape=tuple(shape), weak_type=False)


def _all_gather_batcher(axis_data, args, dims, *, axis_name, all_gather_dimension, tiled,
                        axis_size, axis_index_groups=None):
  axis = all_gather_dimension
  (x,), (d,) = args, dims
  if axis_index_groups is not None:
    raise NotImplementedError("axis_index_groups not supported in vmap")
  names = _names(axis_name)
  if len(names) > 1 and axis_data.name in names:
    raise NotImplementedError(f"all_gather over several axis names {axis_name} including the "
                              f"vmap axis {axis_data.name!r} is not supported; gather over "
                              f"one name at a time.")
  if axis_data.name not in names:
    # NB: the batch dimension stays where it is, as JAX's rule.
    if d is not batching.not_mapped:
      if d <= axis:
        axis += 1
      elif not tiled:
        d += 1
    return _bind_all_gather(x, names, axis, None, axis_size, tiled), d
  if d is batching.not_mapped:
    x = batching.broadcast(x, axis_data.size, axis)
  else:
    x = batching.moveaxis(x, d, axis)
  if tiled:
    shape = list(core.get_aval(x).shape)
    shape[axis:axis + 2] = [shape[axis] * shape[axis + 1]]
    x = lax_shape.reshape(x, tuple(shape))
  return x, batching.not_mapped


def _all_gather_transpose(ct, x, *, axis_name, all_gather_dimension, tiled, axis_size,
                          axis_index_groups=None):
  axis = all_gather_dimension
  # all_gather's transpose is psum_scatter: member i's cotangent is block i of the sum.
  return [_bind_reduce_scatter(ad.instantiate_zeros(ct), _names(axis_name), axis,
                               axis_index_groups, axis_size, tiled)]


all_gather_p.def_abstract_eval(_all_gather_abstract_eval)
all_gather_p.def_impl(_unbound_impl("axis_name"))
lowering.register_lowering(all_gather_p, all_gather_lowering)
batching.fancy_primitive_batchers[all_gather_p] = _all_gather_batcher
ad.deflinear_args(all_gather_p, _all_gather_transpose)
# NB: as JAX's, every equation carries `axis_index_groups` (None unless given).
all_gather_p.def_default_params(axis_index_groups=None)


def _bind_all_gather(x, names: tuple, dimension: int, groups, size: int, tiled: bool):
  # NB: JAX's params, in JAX's order; `axis_name` always a tuple of names, as JAX's.
  return all_gather_p.bind(x, all_gather_dimension=dimension, axis_name=names,
                           axis_index_groups=groups, axis_size=size, tiled=tiled)


def all_gather(x: Any, axis_name: Any, *, axis_index_groups: Any = None, axis: int = 0,
               tiled: bool = False, to: str = "varying") -> Any:
  """Every member's `x` (a pytree of arrays), stacked along a new axis `axis` (or, with
  `tiled=True`, concatenated along `axis`), the same on every member. A tuple of names
  gathers over their grid, members ordered row-major in the order named. `to` is the
  result's manual axis type: 'varying' (the default, and the only one here).

  Raises:
    NameError: for an unbound axis name.
    ValueError: `axis_index_groups` of different sizes or not covering every index once; a
      `to` other than 'varying', 'reduced' or 'invarying' (JAX's words).
    NotImplementedError: `axis_index_groups` under vmap; a tuple of names that includes a
      vmap axis; `to='reduced'` or `'invarying'` (JAX's all_gather_reduced and
      all_gather_invariant, not implemented).
  """
  allowed = {"varying", "reduced", "invarying"}   # NB: printed as a set, as JAX's
  if to not in allowed:
    raise ValueError(f"Got unexpected `to` value for `jax.lax.all_gather`. Allowed `to` values "
                     f"are: {allowed}")
  if to != "varying":
    raise NotImplementedError(
        f"lax.all_gather(to={to!r}) (JAX's all_gather_{'reduced' if to == 'reduced' else 'invariant'}) "
        f"is not implemented by stagecraft; gather with to='varying'.")
  # NB: a tuple of names gathers over their grid, ordered row-major in the order named.
  names = _names(axis_name)
  size = axis_size(names)
  groups = _checked_groups(axis_index_groups, size)
  if groups is not None:
    size = len(groups[0])   # NB: each member gathers its group's values

  def one(leaf):
    nd = len(core.get_aval(leaf).shape)
    ax = axis % (nd + (0 if tiled else 1)) if nd or not tiled else 0
    return _bind_all_gather(leaf, names, ax, groups, size, tiled)
  return tree_util.tree_map(one, x)


# ---------------------------------------------------------------------------
# ppermute


ppermute_p = core.Primitive("ppermute")


def _ppermute_abstract_eval(x, *, axis_name, perm):
  _check_bound(_names(axis_name))
  return x


def _ppermute_batcher(axis_data, args, dims, *, axis_name, perm):
  (x,), (d,) = args, dims
  names = _names(axis_name)
  if len(names) > 1 and axis_data.name in names:
    raise NotImplementedError(f"ppermute over several axis names {axis_name} including the "
                              f"vmap axis {axis_data.name!r} is not supported; permute over "
                              f"one name at a time.")
  if axis_data.name not in names:
    # NB: params in the order of JAX's batching rule's `bind`
    return ppermute_p.bind(x, perm=perm, axis_name=axis_name), d
  n = axis_data.size
  src_of = np.full(n, -1)
  for s, t in perm:
    src_of[t] = s
  if d is batching.not_mapped:
    x = batching.broadcast(x, n, 0)
    d = 0
  idx = np.where(src_of < 0, 0, src_of).astype(np.int32)
  out = _take(x, idx, d)
  if (src_of < 0).any():
    shape = core.get_aval(out).shape
    mask = lax_shape.broadcast_in_dim(np.asarray(src_of >= 0), shape, (d,))
    out = elementwise.select_n(mask, lax_shape.full_like(out, 0), out)
  return out, d


def _take(x, idx, axis):
  """`x` indexed by the host int32 vector `idx` along `axis` (which keeps its position)."""
  return batching.moveaxis(slicing.index_take(x, (idx,), (axis,)), 0, axis)


def _ppermute_transpose(ct, x, *, axis_name, perm):
  inverse = tuple((t, s) for s, t in perm)
  return [ppermute_p.bind(ct, axis_name=axis_name, perm=inverse)]


ppermute_p.def_abstract_eval(_ppermute_abstract_eval)
ppermute_p.def_impl(_unbound_impl("axis_name"))
lowering.register_lowering(ppermute_p, _ppermute_lowering)
batching.fancy_primitive_batchers[ppermute_p] = _ppermute_batcher
ad.deflinear_args(ppermute_p, _ppermute_transpose)


def ppermute(x: Any, axis_name: Any, perm: Sequence[tuple[int, int]]) -> Any:
  """Sends each member's `x` to another: `perm` is a list of (source, destination) index
  pairs; members that receive nothing get zeros.

  With a tuple of names, indices count the members of their grid row-major in the order
  named (as `axis_index` of the tuple).

  Raises:
    ValueError: if a source or destination repeats or is out of range.
    NotImplementedError: for a tuple of names that includes a vmap axis.
  """
  names = _names(axis_name)   # NB: the equation holds a tuple of names, as JAX's
  if len(names) == 1:
    axis_name = names[0]
  n = axis_size(names)
  perm = tuple((int(s), int(t)) for s, t in perm)
  srcs, dsts = [s for s, _ in perm], [t for _, t in perm]
  if len(set(srcs)) != len(srcs) or len(set(dsts)) != len(dsts):
    raise ValueError(f"ppermute sources and destinations must be unique, got {perm}.")
  if any(not 0 <= i < n for i in srcs + dsts):
    raise ValueError(f"ppermute indices must be in [0, {n}) for axis {axis_name!r} of size "
                     f"{n}, got {perm}.")
  return tree_util.tree_map(lambda leaf: ppermute_p.bind(leaf, axis_name=names, perm=perm), x)


def pshuffle(x: Any, axis_name: Any, perm: Sequence[int]) -> Any:
  """Member `i` receives `x` from member `perm[i]` (`perm` a permutation of
  `range(axis size)`): `ppermute` with the pairs `(perm[i], i)`.

  Raises:
    ValueError: if `perm` is not a permutation of the axis positions.
  """
  perm = [int(p) for p in perm]
  if sorted(perm) != list(range(len(perm))):
    raise ValueError(f"pshuffle: `perm` must be a permutation of range(n), got {perm}.")
  return ppermute(x, axis_name, list(zip(perm, range(len(perm)))))


def pbroadcast(x: Any, axis_name: Any, source: int) -> Any:
  """Every member of `axis_name` receives member `source`'s `x` (JAX's `lax.pbroadcast`, the
  CollectiveBroadcast of XLA): a pytree of arrays, leafwise.

  stagecraft computes it as an `all_gather` followed by a slice, so it runs on every
  platform (JAX 0.10.2 has no CPU lowering for it), keeps `source`'s bits exactly (NaNs and
  signed zeros included), and is differentiable and batchable as those are: the gradient
  of a member's `x` is the sum of the cotangents of the members at `source`, zero elsewhere.

  Args:
    x: a pytree of arrays mapped over `axis_name`.
    axis_name: a bound axis name (or a tuple of them: `source` indexes their product).
    source: the member whose value is broadcast, in `[0, axis size)`.

  Raises:
    ValueError: `source` is out of range (says the axis size).
    NameError: `axis_name` is not bound.
  """
  n = 1
  for name in _names(axis_name):
    n *= _axis_size(name)
  try:
    src = int(source)
  except TypeError:
    raise TypeError(f"pbroadcast: source must be a Python int (a member of axis "
                    f"{axis_name!r}), got {type(source).__name__}.") from None
  if not 0 <= src < n:
    raise ValueError(f"pbroadcast: source must be in [0, {n}) for axis {axis_name!r} of "
                     f"size {n}, got {source}.")

  def one(leaf):
    gathered = all_gather(leaf, axis_name)
    return lax_shape.squeeze(lax_shape.slice_in_dim(gathered, src, src + 1, axis=0), (0,))
  return tree_util.tree_map(one, x)


# ---------------------------------------------------------------------------
# psum_scatter (reduce_scatter)


reduce_scatter_p = core.Primitive("reduce_scatter")


def _reduce_scatter_abstract_eval(x, *, axis_name, scatter_dimension, axis_size, tiled,
                                  axis_index_groups=None):
  for n in _names(axis_name):
    _axis_size(n)
  shape = list(x.shape)
  if tiled:
    shape[scatter_dimension] //= axis_size
  else:
    del shape[scatter_dimension]
  return x.update(shape=tuple(shape), weak_type=False)


def _reduce_scatter_lowering(ctx, x, *, axis_name, scatter_dimension, axis_size, tiled,
                             axis_index_groups=None):
  groups = _replica_groups(ctx, _names(axis_name), axis_index_groups)
  aval_in, aval_out = ctx.avals_in[0], ctx.avals_out[0]
  scalar = ShapedArray((), aval_in.dtype)
  op = "stablehlo.or" if aval_in.dtype == dtypes.bool_ else "stablehlo.add"
  region = ctx.region([scalar, scalar], [scalar],
                      lambda a, b: [ctx.elementwise(op, a, b, aval=scalar)])
  shape = list(aval_in.shape)
  shape[scatter_dimension] //= axis_size
  tiled_aval = aval_in.update(shape=tuple(shape))
  attrs = ", ".join([f"scatter_dimension = {scatter_dimension} : i64", *_channel_attrs(ctx),
                     _groups_attr(groups)])
  out = ctx.op("stablehlo.reduce_scatter", [x], [tiled_aval], attrs, [region],
               operand_avals=[aval_in])
  if tiled:
    return out
  return ctx.op("stablehlo.reshape", out, [aval_out], operand_avals=[tiled_aval])


def _reduce_scatter_batcher(axis_data, args, dims, *, axis_name, scatter_dimension,
                            axis_size, tiled, axis_index_groups=None):
  (x,), (d,) = args, dims
  if axis_index_groups is not None:
    raise NotImplementedError("axis_index_groups not supported in vmap")
  names = _names(axis_name)
  if axis_data.name not in names:
    # NB: the batch dimension stays where it is, as JAX's rule.
    sd = scatter_dimension
    if d is not batching.not_mapped:
      if d <= sd:
        sd += 1
      elif not tiled:
        d -= 1   # NB: the untiled scatter dimension is removed
    return _bind_reduce_scatter(x, names, sd, None, axis_size, tiled, batched=True), d
  if len(names) > 1:
    raise NotImplementedError("psum_scatter over several axis names under vmap is not "
                              "supported.")
  n = axis_data.size
  if d is batching.not_mapped:
    summed = _times_size(x, n)
  else:
    summed = reduction.reduce_sum(x, (d,))
  # Member i keeps block i of the scatter dimension: that dimension becomes the batch axis.
  s = scatter_dimension
  if tiled:
    shape = list(core.get_aval(summed).shape)
    shape[s:s + 1] = [n, shape[s] // n]
    summed = lax_shape.reshape(summed, tuple(shape))
  return summed, s


def _reduce_scatter_transpose(ct, x, *, axis_name, scatter_dimension, axis_size, tiled,
                              axis_index_groups=None):
  # psum_scatter's transpose is all_gather (and all_gather's is psum_scatter).
  return [_bind_all_gather(ad.instantiate_zeros(ct), _names(axis_name), scatter_dimension,
                           axis_index_groups, axis_size, tiled)]


reduce_scatter_p.def_abstract_eval(_reduce_scatter_abstract_eval)
reduce_scatter_p.def_impl(_unbound_impl("axis_name"))
lowering.register_lowering(reduce_scatter_p, _reduce_scatter_lowering)
batching.fancy_primitive_batchers[reduce_scatter_p] = _reduce_scatter_batcher
ad.deflinear_args(reduce_scatter_p, _reduce_scatter_transpose)
reduce_scatter_p.def_default_params(axis_index_groups=None)   # NB: as JAX's equations


def _bind_reduce_scatter(x, names: tuple, dimension: int, groups, size: int, tiled: bool,
                         batched: bool = False):
  # NB: JAX's params, in JAX's order (its batching rule's differs from psum_scatter's);
  # `axis_name` always a tuple of names, as JAX's.
  if batched:
    return reduce_scatter_p.bind(x, scatter_dimension=dimension, axis_name=names,
                                 axis_index_groups=groups, axis_size=size, tiled=tiled)
  return reduce_scatter_p.bind(x, axis_name=names, scatter_dimension=dimension,
                               axis_index_groups=groups, axis_size=size, tiled=tiled)


def psum_scatter(x: Any, axis_name: Any, *, scatter_dimension: int = 0,
                 axis_index_groups: Any = None, tiled: bool = False) -> Any:
  """The sum over the named axis of `x` (a pytree of arrays), scattered: member `i` gets
  block `i` of the sum along `scatter_dimension`. Untiled, that dimension must have the axis
  size and is removed; tiled, it must be divisible by it and shrinks by that factor.

  Raises:
    NameError: for an unbound axis name.
    ValueError: when the scatter dimension's size does not fit the axis size (the group
      size with `axis_index_groups`); bad `axis_index_groups` (as `all_gather`).
    NotImplementedError: `axis_index_groups` under vmap; several axis names under vmap.
  """
  names = _names(axis_name)
  # NB: several names scatter over their grid, members ordered row-major in the order named
  # (as all_gather's and axis_index's).
  n = math.prod(_axis_size(name) for name in names)
  bound = names[0] if len(names) == 1 else names
  groups = _checked_groups(axis_index_groups, n)
  if groups is not None:
    n = len(groups[0])   # NB: each group's sum is scattered over its members

  def one(leaf):
    shape = core.get_aval(leaf).shape
    if not shape:
      raise ValueError("psum_scatter needs an operand of rank >= 1, got a scalar.")
    sd = scatter_dimension % len(shape)
    if tiled and shape[sd] % n:
      raise ValueError(f"psum_scatter: scatter_dimension {sd} of size {shape[sd]} is not "
                       f"divisible by the size {n} of axis {bound!r}.")
    if not tiled and shape[sd] != n:
      raise ValueError(f"psum_scatter with tiled=False requires scatter_dimension {sd} to have "
                       f"the size {n} of axis {bound!r}, got {shape[sd]} (shape {shape}).")
    return _bind_reduce_scatter(leaf, names, sd, groups, n, bool(tiled))
  return tree_util.tree_map(one, x)


# ---------------------------------------------------------------------------
# all_to_all


all_to_all_p = core.Primitive("all_to_all")


def _all_to_all_abstract_eval(x, *, axis_name, split_axis, concat_axis, tiled=True,
                              axis_index_groups=None):
  # NB: `tiled` records the user's form (JAX's param); the equation's shapes are the tiled
  # ones either way (`all_to_all` inserts and squeezes the untiled form's axes around it).
  # A one-name tuple (as JAX's rules pass it) is that name; the param prints as given. The
  # axis size is read from the axis environment (JAX's equation holds no `axis_size`).
  axis_size = math.prod(_axis_size(n) for n in _names(axis_name))
  shape = list(x.shape)
  shape[split_axis] //= axis_size
  shape[concat_axis] *= axis_size
  return x.update(shape=tuple(shape))


def _all_to_all_batcher(axis_data, args, dims, *, axis_name, split_axis, concat_axis,
                        tiled=True, axis_index_groups=None):
  (x,), (d,) = args, dims
  names = _names(axis_name)
  if axis_data.name not in names:
    # NB: the batch dimension stays where it is; params in the order of JAX's rule.
    if d is not batching.not_mapped:
      split_axis += d <= split_axis
      concat_axis += d <= concat_axis
    return all_to_all_p.bind(x, axis_name=axis_name, split_axis=split_axis,
                             concat_axis=concat_axis, axis_index_groups=None, tiled=tiled), d
  n = axis_data.size
  x = batching.bdim_at_front(x, d, n)              # [i, ...]: member i's operand
  if len(names) > 1:
    pos = names.index(axis_data.name)
    return _all_to_all_batched_among(x, names[:pos], n, names[pos + 1:], split_axis,
                                     concat_axis, tiled), 0
  shape = core.get_aval(x).shape[1:]
  chunk = shape[split_axis] // n
  # Split: [i, ..., (j, chunk) at split_axis, ...] -> member j gets chunk j of every i.
  split_shape = (n, *shape[:split_axis], n, chunk, *shape[split_axis + 1:])
  x = lax_shape.reshape(x, split_shape)
  j_pos = 1 + split_axis
  x = batching.moveaxis(x, j_pos, 0)               # [j, i, ..., chunk, ...]
  # Concat the i axis into concat_axis (of the per-member shape after the split).
  per = [*shape[:split_axis], chunk, *shape[split_axis + 1:]]
  x = batching.moveaxis(x, 1, 1 + concat_axis)      # i just before concat_axis's dim
  out_shape = list(per)
  out_shape[concat_axis] *= n
  return lax_shape.reshape(x, (n, *out_shape)), 0


def _all_to_all_batched_among(x, major: tuple, n: int, minor: tuple, split_axis: int,
                              concat_axis: int, tiled: bool):
  """The all_to_all over `major + (vmapped axis,) + minor` of `x` (`[n, *s]`: the operands
  of the vmapped axis's n members): members of the combined axis are numbered row-major
  over (major, vmapped, minor), so chunk (a, j, b) of the split axis goes to member
  (a, j, b), and the received chunks are concatenated in the senders' (A, i, B) order.
  Done as an all_to_all over the major names, a transpose of the vmapped axis, and an
  all_to_all over the minor names, each into its own axis of senders."""
  shape = core.get_aval(x).shape[1:]
  nd = len(shape)
  big_m = math.prod(_axis_size(a) for a in major)
  small_m = math.prod(_axis_size(a) for a in minor)
  chunk = shape[split_axis] // (big_m * n * small_m)
  # [i, *s] with the split axis as (M, j, m, chunk) and senders' axes A', B' (size 1 now)
  # in front: [A', B', i, s..., M, j, m, chunk, s...].
  split = 3 + split_axis
  x = lax_shape.reshape(x, (1, 1, n, *shape[:split_axis], big_m, n, small_m, chunk,
                            *shape[split_axis + 1:]))
  if major:
    # Chunk a of M goes to major member a, arriving along A' (the sender's major index).
    x = _bind_all_to_all(x, major, split, 0, tiled)
  # The vmapped axis: member j takes chunk j of every i, which becomes a sender axis.
  x = batching.moveaxis(x, split + 1, 0)           # [j, A', B', i, s..., 1, m, chunk, s...]
  if minor:
    x = _bind_all_to_all(x, minor, split + 2, 2, tiled)  # chunk b -> minor member b, along B'
  # [j, A', B', i, s..., 1, 1, chunk, s...] -> senders (A', i, B') in front of concat_axis.
  x = lax_shape.reshape(x, (n, big_m, small_m, n, *shape[:split_axis], chunk,
                            *shape[split_axis + 1:]))
  x = lax_shape.transpose(x, (0, 1, 3, 2, *range(4, 4 + nd)))
  per = [*shape[:split_axis], chunk, *shape[split_axis + 1:]]
  x = lax_shape.reshape(x, (n, big_m * n * small_m, *per))
  x = batching.moveaxis(x, 1, 1 + concat_axis)
  out = list(per)
  out[concat_axis] *= big_m * n * small_m
  return lax_shape.reshape(x, (n, *out))


def _all_to_all_transpose(ct, x, *, axis_name, split_axis, concat_axis, tiled=True,
                          axis_index_groups=None):
  # NB: params in the order of JAX's rule
  return [all_to_all_p.bind(ct, axis_name=axis_name, split_axis=concat_axis,
                            concat_axis=split_axis, axis_index_groups=None, tiled=tiled)]


def _bind_all_to_all(x, axis_name, split_axis: int, concat_axis: int, tiled: bool):
  # NB: JAX's params in JAX's order; `axis_name` as the user gave it (a name or a tuple).
  return all_to_all_p.bind(x, split_axis=split_axis, concat_axis=concat_axis,
                           axis_name=axis_name, axis_index_groups=None, tiled=tiled)


all_to_all_p.def_abstract_eval(_all_to_all_abstract_eval)
all_to_all_p.def_impl(_unbound_impl("axis_name"))
lowering.register_lowering(all_to_all_p, _all_to_all_lowering)
batching.fancy_primitive_batchers[all_to_all_p] = _all_to_all_batcher
# NB: as JAX's, every equation carries `axis_index_groups` (None).
all_to_all_p.def_default_params(axis_index_groups=None)
ad.deflinear_args(all_to_all_p, _all_to_all_transpose)


def all_to_all(x: Any, axis_name: Any, split_axis: int, concat_axis: int, *,
               axis_index_groups: Any = None, tiled: bool = False) -> Any:
  """Splits `x` along `split_axis` into axis-size chunks, sends chunk j to member j, and
  concatenates the received chunks along `concat_axis` (with `tiled=False` the split axis
  must have the axis size and is removed, and a new axis is inserted at concat_axis, as
  JAX). `axis_name` may be a tuple of names (a 2-D mesh's `('x', 'y')`, nested vmaps): the
  group is then their product, its members numbered row-major over the names as given.

  Raises:
    ValueError: if the split axis is not divisible by the axis size.
  """
  if axis_index_groups is not None:
    raise NotImplementedError("all_to_all: axis_index_groups is not supported yet.")
  if isinstance(axis_name, list):
    axis_name = tuple(axis_name)
  # NB: over several names the members are numbered row-major over the names in the order
  # given (as JAX's), the group the product of their sizes.
  n = math.prod(_axis_size(a) for a in _names(axis_name))

  def one(leaf):
    shape = core.get_aval(leaf).shape
    nd = len(shape)
    sa, ca = split_axis % nd, concat_axis % nd
    # NB: JAX's messages (which name the axis as given).
    if tiled and shape[sa] % n:
      raise ValueError(f"The size of all_to_all split_axis ({shape[sa]}) has to be divisible "
                       f"by the size of the named axis {axis_name} ({n})")
    if not tiled and shape[sa] != n:
      raise ValueError(f"all_to_all requires the size of the mapped axis axis_name to equal "
                       f"x.shape[split_axis], but they are {n} and {shape[sa]} respectively.")
    if tiled or sa == ca:
      # NB: untiled with split_axis == concat_axis: one equation of the operand's shape, as
      # JAX's (no axis inserted and squeezed).
      return _bind_all_to_all(leaf, axis_name, sa, ca, bool(tiled))
    # Untiled: a new size-1 axis receives the chunks (placed so that, once the emptied
    # split axis is squeezed, it sits at concat_axis), as JAX's shape rule
    # insert(delete(shape, split_axis), concat_axis, n).
    q = ca if ca <= sa else ca + 1
    sa1 = sa + 1 if q <= sa else sa
    x1 = lax_shape.expand_dims(leaf, (q,))
    out = _bind_all_to_all(x1, axis_name, sa1, q, False)
    return lax_shape.squeeze(out, (sa1,))
  return tree_util.tree_map(one, x)


# NB: the collectives' equations hold JAX's params (names, values, order), so they print
# as JAX's with the default rule (params sorted by name).


# ---------------------------------------------------------------------------
# Replication rules (interpreters/mapping.py): which mapped axes a result may vary along.


def _reducing_replication(in_vary, *, axes, axis_index_groups):
  # Every member of the axes gets the same result, unless groups split them.
  if axis_index_groups is not None:
    return list(in_vary)
  return [v - frozenset(axes) for v in in_vary]


def _gathering_replication(in_vary, *, axis_name, **_):
  return [in_vary[0] - frozenset(_names(axis_name))]


def _varying_replication(in_vary, *, axis_name, **_):
  # Each member gets its own piece (or its own index): the result varies along the axes.
  return [frozenset().union(*in_vary) | frozenset(_names(axis_name))]


def _pvary_replication(in_vary, *, axes):
  if mapping.strict_vma():
    already = [a for a in axes if a in in_vary[0]]
    if already and len(already) == len(axes):
      raise ValueError("Unsupported pcast from=varying, to='varying'")
    if already:
      raise ValueError(f"jax.lax.pcast can only accept axis_name which corresponds to one of "
                       f"varying, unreduced, reduced or invarying state of the input. Got "
                       f"axes: {tuple(axes)}, of which {tuple(already)} are varying and the "
                       f"others invarying.")
  return [in_vary[0] | frozenset(axes)]


def _gathering_vma(in_vary, *, axis_name, **_):
  # NB: JAX types all_gather's result as varying (the same values on every member, but not
  # an invariant type); an invariant operand is first made varying (`jax_auto_pcast`).
  return [in_vary[0] | frozenset(_names(axis_name))]


for _p in (psum_p, pmax_p, pmin_p):
  mapping.replication_rules[_p] = _reducing_replication
mapping.replication_rules[all_gather_p] = _gathering_replication
mapping.vma_rules[all_gather_p] = _gathering_vma
mapping.replication_rules[pvary_p] = _pvary_replication
for _p in (axis_index_p, ppermute_p, reduce_scatter_p, all_to_all_p):
  mapping.replication_rules[_p] = _varying_replication


def pswapaxes(x: Any, axis_name: Any, axis: int, *, axis_index_groups: Any = None) -> Any:
  """Swaps the mapped axis `axis_name` with the positional axis `axis` of `x`, as JAX's
  `lax.pswapaxes`: `all_to_all(x, axis_name, axis, axis, axis_index_groups=...)` (the axis
  must have the mapped axis' size; member j receives chunk j of every member)."""
  if axis_index_groups is not None:
    raise NotImplementedError("pswapaxes: axis_index_groups is not supported yet.")
  n = _axis_size(axis_name)

  def one(leaf):
    shape = core.get_aval(leaf).shape
    ax = axis % len(shape)
    if shape[ax] != n:
      raise ValueError(f"pswapaxes requires axis {axis} to have the size {n} of axis "
                       f"{axis_name!r}, got {shape[ax]} (shape {shape}).")
    # NB: one equation, as JAX's: chunks of size 1 along `axis`, concatenated along it.
    return _bind_all_to_all(leaf, axis_name, ax, ax, False)
  return tree_util.tree_map(one, x)


# ---------------------------------------------------------------------------
# Varying manual axes in types (check_vma shard_map bodies): each collective's results'
# vma, and the axes along which `bind` makes its operands vary first (JAX's auto pcast).


def _reduced_vma(prim):
  rule = prim.abstract_eval

  def abstract_eval(*avals, axes, axis_index_groups):
    outs = rule(*avals, axes=axes, axis_index_groups=axis_index_groups)
    gone = frozenset(axes)
    return [o.update(vma=o.vma - gone) if o.vma & gone else o for o in outs]
  prim.def_abstract_eval(abstract_eval)


for _p in (psum_p, pmax_p, pmin_p):
  _reduced_vma(_p)
  core.no_auto_pvary.add(_p)
for _p in (psum_p, pmax_p, pmin_p, psum_invariant_p, pvary_p, axis_index_p,
           vary_unreduced_cast_p, reduced_vary_cast_p):
  core.vma_own_rule.add(_p)
core.no_auto_pvary.add(pvary_p)
core.collective_axes[psum_invariant_p] = lambda *, axes: axes
core.collective_axes[pmax_p] = core.collective_axes[pmin_p] = (
    lambda *, axes, **_: _split_axes(axes)[0])
for _p in (all_gather_p, ppermute_p, reduce_scatter_p, all_to_all_p):
  core.collective_axes[_p] = lambda *, axis_name, **_: _names(axis_name)
core.pvary_hook[0] = pvary
mapping.replication_rules[psum_invariant_p] = (
    lambda in_vary, *, axes: _reducing_replication(in_vary, axes=axes,
                                                   axis_index_groups=None))


# ---------------------------------------------------------------------------
# Named-axis checks in JAX's words (psend, precv, ragged_all_to_all).


def _check_axis_names(axes, api_name: str) -> None:
  for name in axes:
    if not isinstance(name, int) and batching.axis_size(name) is None:
      raise NameError(f"Found an unbound axis name: {name}. To fix this, please call "
                      f"{api_name} under `jax.shard_map`.")


class NamedAxisEffect(core.Effect):
  """The effect of a collective over the manual axis `name` (JAX's `core.NamedAxisEffect`):
  its equation is kept through dead-code elimination."""
  __slots__ = ("name",)

  def __init__(self, name):
    self.name = name

  def __eq__(self, other):
    return type(other) is NamedAxisEffect and other.name == self.name

  def __hash__(self):
    return hash((NamedAxisEffect, self.name))

  def __repr__(self):
    return f"NamedAxisEffect({self.name!r})"


class SingleSideCollectiveEffect(core.Effect):
  """The effect of `psend`/`precv` (one-sided communication)."""
  __slots__ = ()

  def __eq__(self, other):
    return type(other) is SingleSideCollectiveEffect

  def __hash__(self):
    return hash(SingleSideCollectiveEffect)

  def __str__(self):
    return "one-sided communication"


single_side_collective_effect = SingleSideCollectiveEffect()


# ---------------------------------------------------------------------------
# psend / precv: one-sided sends and receives along a permutation (XLA's Send/Recv). JAX
# 0.10.2 lowers them only for GPUs; on other platforms lowering raises its
# NotImplementedError, as here (stagecraft has no GPU lowering for them).


psend_p = core.Primitive("psend")
precv_p = core.Primitive("precv")


def _psend_abstract_eval(x, *, axis_name, perm):
  _check_axis_names(axis_name, "psend")
  return core.abstract_token, {*map(NamedAxisEffect, axis_name),
                               single_side_collective_effect}


def _precv_abstract_eval(token, *, out_shape, axis_name, perm):
  return out_shape, {*map(NamedAxisEffect, axis_name), single_side_collective_effect}


def _gpu_only_lowering(name: str):
  def rule(ctx, *args, **params):
    raise NotImplementedError(f"{name} is currently only implemented on GPU")
  return rule


def _one_sided_batcher(prim):
  def rule(axis_data, args, dims, *, axis_name, **params):
    (x,), (d,) = args, dims
    if axis_data.name in axis_name:
      raise NotImplementedError(f"{prim.name} over the vmap axis {axis_data.name!r} is not "
                                f"supported: it is a one-sided collective of shard_map.")
    out = prim.bind(x, axis_name=axis_name, **params)
    return out, (d if prim is precv_p else batching.not_mapped)
  return rule


psend_p.def_effectful_abstract_eval(_psend_abstract_eval)
precv_p.def_effectful_abstract_eval(_precv_abstract_eval)
lowering.register_lowering(psend_p, _gpu_only_lowering("psend"))
lowering.register_lowering(precv_p, _gpu_only_lowering("precv"))
ad.primitive_jvps[psend_p] = not_differentiable("psend")
ad.primitive_jvps[precv_p] = not_differentiable("precv")
batching.fancy_primitive_batchers[psend_p] = _one_sided_batcher(psend_p)
batching.fancy_primitive_batchers[precv_p] = _one_sided_batcher(precv_p)
core.vma_own_rule.update({psend_p, precv_p})
core.collective_axes[psend_p] = lambda *, axis_name, **_: axis_name
# A token and a received value are typed invariant (as JAX's: `out_shape` has no vma).
mapping.replication_rules[psend_p] = lambda in_vary, **_: [frozenset()]
mapping.replication_rules[precv_p] = lambda in_vary, **_: [frozenset()]


def _pp_precv(eqn, context):
  p = eqn.params
  return [("axis_name", p["axis_name"]), ("out_shape", _aval_param(p["out_shape"])),
          ("perm", p["perm"])]


def _aval_param(aval) -> str:
  # JAX prints a ShapedArray param as `float32[2]`.
  return f"{np.dtype(aval.dtype).name}[{','.join(str(d) for d in aval.shape)}]"


core.pp_eqn_rules[precv_p] = _pp_precv


def psend(x: Any, axis_name: Any, perm: Sequence[tuple[int, int]]) -> Any:
  """Sends each leaf of the pytree `x` along `perm`, pairs `(source, destination)` of
  indices of the manual axis `axis_name` (JAX's `lax.psend`, XLA's Send).

  Returns a token (per leaf) to hand to the matching `precv` (or to order collectives).

  Raises:
    NameError: `axis_name` is not bound by an enclosing shard_map.
    NotImplementedError: when lowered: JAX 0.10.2 implements psend on GPUs only
      ("psend is currently only implemented on GPU").
  """
  axes = _names(axis_name)
  perm = tuple(tuple(p) for p in perm)
  return tree_util.tree_map(lambda leaf: psend_p.bind(leaf, axis_name=axes, perm=perm), x)


def precv(token: Any, out_shape: Any, axis_name: Any, perm: Sequence[tuple[int, int]]) -> Any:
  """Receives an array of `out_shape`'s shape and dtype (a ShapeDtypeStruct) along `perm`,
  pairs `(source, destination)` of indices of `axis_name` (JAX's `lax.precv`, XLA's Recv);
  `token` orders it (from the matching `psend`, or `create_token()`).

  Raises:
    NotImplementedError: when lowered: JAX 0.10.2 implements precv on GPUs only
      ("precv is currently only implemented on GPU").
  """
  axes = _names(axis_name)
  aval = ShapedArray(tuple(out_shape.shape), dtypes.dtype(out_shape.dtype))
  return precv_p.bind(token, out_shape=aval, axis_name=axes,
                      perm=tuple(tuple(p) for p in perm))


# ---------------------------------------------------------------------------
# ragged_all_to_all: all_to_all of ragged slices (XLA's RaggedAllToAll), lowered as JAX's
# `stablehlo.custom_call @ragged_all_to_all`. (XLA:CPU does not implement it: compiling such
# a program on CPU fails, in JAX as here, with XLA's UNIMPLEMENTED error.)


ragged_all_to_all_p = core.Primitive("ragged_all_to_all")


def _ragged_all_to_all_abstract_eval(operand, output, input_offsets, send_sizes,
                                     output_offsets, recv_sizes, *, axis_name,
                                     axis_index_groups):
  for what, a in (("input_offsets", input_offsets), ("send_sizes", send_sizes),
                  ("output_offsets", output_offsets), ("recv_sizes", recv_sizes)):
    if not dtypes.issubdtype(a.dtype, np.integer):
      raise ValueError(f"ragged_all_to_all {what} must be integer type.")
  for what, a in (("input_offsets", input_offsets), ("send_sizes", send_sizes),
                  ("output_offsets", output_offsets), ("recv_sizes", recv_sizes)):
    if len(a.shape) != 1 or a.shape[0] < 1:
      raise ValueError(f"ragged_all_to_all {what} must be rank 1 with positive dimension "
                       f"size, but got shape {tuple(a.shape)}")
  _check_axis_names(axis_name, "ragged_all_to_all")
  return output.update(weak_type=False), {*map(NamedAxisEffect, axis_name)}


def _ragged_all_to_all_impl(*args, **params):
  raise RuntimeError("ragged_all_to_all must be used within a mapped context like vmap or "
                     "shard_map.")


def _ragged_all_to_all_lowering(ctx, operand, output, input_offsets, send_sizes,
                                output_offsets, recv_sizes, *, axis_name, axis_index_groups):
  groups = _replica_groups(ctx, axis_name, axis_index_groups)
  if any(len(g) != len(groups[0]) for g in groups):
    raise ValueError("Replica groups must be equally sized")
  config = ([f"channel_id = 1 : i64"] if _spmd(ctx) else []) + [_groups_attr(groups)]
  attrs = (f"api_version = 4 : i32, backend_config = {{{', '.join(config)}}}, "
           f'call_target_name = "ragged_all_to_all"')
  return ctx.op("stablehlo.custom_call",
                [operand, output, input_offsets, send_sizes, output_offsets, recv_sizes],
                [ctx.avals_out[0]], attrs=attrs)


def _ragged_all_to_all_jvp(primals, tangents, **params):
  operand, output, *offsets_and_sizes = primals
  operand_dot, output_dot, *_ = tangents
  out = ragged_all_to_all_p.bind(operand, output, *offsets_and_sizes, **params)
  if type(operand_dot) is ad.Zero and type(output_dot) is ad.Zero:
    return out, ad.Zero(ad.tangent_aval(core.get_aval(out)))
  out_dot = ragged_all_to_all_p.bind(ad.instantiate_zeros(operand_dot),
                                     ad.instantiate_zeros(output_dot), *offsets_and_sizes,
                                     **params)
  return out, out_dot


def _ragged_all_to_all_transpose(ct, operand, output, input_offsets, send_sizes,
                                 output_offsets, recv_sizes, *, axis_name,
                                 axis_index_groups):
  # The operand's cotangent: the cotangent's received slices sent back (a ragged all-to-all
  # with the roles of sender and receiver swapped); the output's: the cotangent with the
  # received slices zeroed (a mask of +1 at each slice's start and -1 past its end, summed).
  if type(ct) is ad.Zero:
    return [ad.Zero(operand.aval) if ad.is_undefined_primal(operand) else None,
            ad.Zero(output.aval) if ad.is_undefined_primal(output) else None] + [None] * 4
  op_aval = operand.aval if ad.is_undefined_primal(operand) else core.get_aval(operand)
  zero = ad.zeros_like_aval(op_aval)
  out_offsets_t = all_to_all(output_offsets, axis_name, 0, 0, tiled=True)
  in_offsets_t = all_to_all(input_offsets, axis_name, 0, 0, tiled=True)
  operand_t = ragged_all_to_all_p.bind(ct, zero, out_offsets_t, recv_sizes, in_offsets_t,
                                       send_sizes, axis_name=axis_name,
                                       axis_index_groups=axis_index_groups)
  ct_aval = core.get_aval(ct)
  n = ct_aval.shape[0]
  mask = lax_shape.full((n,), 0, dtypes.int32)
  mask = _scatter_at(slicing.scatter, mask, out_offsets_t, 1, n)
  mask = _scatter_at(slicing.scatter_add, mask, elementwise.add(out_offsets_t, recv_sizes), -1,
                     n)
  mask = cumulative.cumsum(mask, 0)
  mask = lax_shape.expand_dims(mask, tuple(range(1, len(ct_aval.shape))))
  mask = lax_shape.broadcast_in_dim(mask, ct_aval.shape, tuple(range(len(ct_aval.shape))))
  output_t = elementwise.select_n(mask, ct, lax_shape.full_like(ct, 0))
  return [operand_t, output_t] + [None] * 4


def _scatter_at(scatter, x, idx, value, n):
  """`x.at[idx].set(value)` (or `.add`) of a 1-D int32 `x` of size `n`, as jnp's indexing
  writes it: negative indices wrap, out-of-range ones are dropped."""
  idx_aval = core.get_aval(idx)
  wrapped = elementwise.select_n(elementwise.lt(idx, np.int32(0)), idx,
                                 elementwise.add(idx, np.int32(n)))
  indices = lax_shape.broadcast_in_dim(wrapped, (*idx_aval.shape, 1), (0,))
  updates = lax_shape.full(idx_aval.shape, value, dtypes.int32)
  dnums = slicing.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                          scatter_dims_to_operand_dims=(0,))
  return scatter(x, indices, updates, dnums, mode=slicing.GatherScatterMode.FILL_OR_DROP)


def _ragged_all_to_all_batcher(axis_data, args, dims, *, axis_name, axis_index_groups):
  if all(d is batching.not_mapped for d in dims) and axis_data.name not in axis_name:
    return ragged_all_to_all_p.bind(*args, axis_name=axis_name,
                                    axis_index_groups=axis_index_groups), batching.not_mapped
  if axis_data.name in axis_name or axis_index_groups:
    raise NotImplementedError("Please open a feature request!")
  size = axis_data.size

  def at_second(x, d):   # [K] or [size, K] -> [K, size]
    if d is batching.not_mapped:
      return batching.broadcast(x, size, 1)
    return x if d == 1 else lax_shape.transpose(x, (1, 0))

  operand, output = (batching.bdim_at_front(x, d, size) for x, d in zip(args[:2], dims[:2]))
  n, m = core.get_aval(operand).shape[1], core.get_aval(output).shape[1]
  in_off, send, out_off, recv = (at_second(x, d) for x, d in zip(args[2:], dims[2:]))

  def shifted(x, stride):
    dtype = core.get_aval(x).dtype
    step = lax_shape.broadcast_in_dim(lax_shape.iota(dtype, size), (1, size), (1,))
    return elementwise.add(x, elementwise.mul(step, np.asarray(stride, dtype)))
  in_off, out_off = shifted(in_off, n), shifted(out_off, m)

  def merge(x):
    shape = core.get_aval(x).shape
    return lax_shape.reshape(x, (shape[0] * shape[1], *shape[2:]))
  vals = [merge(x) for x in (operand, output, in_off, send, out_off, recv)]
  out = ragged_all_to_all(*vals, axis_name=axis_name)
  out_shape = core.get_aval(out).shape
  return lax_shape.reshape(out, (size, out_shape[0] // size, *out_shape[1:])), 0


ragged_all_to_all_p.def_effectful_abstract_eval(_ragged_all_to_all_abstract_eval)
ragged_all_to_all_p.def_impl(_ragged_all_to_all_impl)
lowering.register_lowering(ragged_all_to_all_p, _ragged_all_to_all_lowering)
ad.primitive_jvps[ragged_all_to_all_p] = _ragged_all_to_all_jvp
ad.primitive_transposes[ragged_all_to_all_p] = _ragged_all_to_all_transpose
batching.fancy_primitive_batchers[ragged_all_to_all_p] = _ragged_all_to_all_batcher
mapping.replication_rules[ragged_all_to_all_p] = _varying_replication


def ragged_all_to_all(operand: Any, output: Any, input_offsets: Any, send_sizes: Any,
                      output_offsets: Any, recv_sizes: Any, *, axis_name: Any,
                      axis_index_groups: Any = None) -> Any:
  """The ragged all-to-all collective (JAX's `lax.ragged_all_to_all`, XLA's RaggedAllToAll).

  Each member sends the slices `operand[input_offsets[i] : input_offsets[i] + send_sizes[i]]`
  (along the leading axis) to member `i // (K / axis size)`, which writes it into its copy of
  `output` at offset `output_offsets[i]` (an offset on the receiver); `recv_sizes` are the
  sizes of the slices received. The result is `output` with the received slices written.

  Args:
    operand: `T[N, *rest]`, the ragged data to send.
    output: `T[M, *rest]`, the array the received slices are written into.
    input_offsets, send_sizes, output_offsets, recv_sizes: integer `[K]` arrays, K >= 1 a
      multiple of the axis size.
    axis_name: a manual (shard_map) axis name, or a tuple of them.
    axis_index_groups: optional groups of axis indices of equal size.

  Returns:
    `T[M, *rest]` (not weakly typed).

  Raises:
    ValueError: an offsets or sizes array that is not integer, or not of rank 1 with a
      positive size (JAX's messages).
    NameError: an axis not bound by an enclosing shard_map.
    RuntimeError: called outside any mapped context.
  """
  axes = _names(axis_name)
  groups = None
  if axis_index_groups is not None:
    groups = tuple(tuple(int(i) for i in g) for g in axis_index_groups)
  return ragged_all_to_all_p.bind(operand, output, input_offsets, send_sizes, output_offsets,
                                  recv_sizes, axis_name=axes, axis_index_groups=groups)
