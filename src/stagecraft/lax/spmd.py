"""The SPMD primitives, each with all its rules: `xla_pmap` (pmap's map over devices),
`shard_map` (a per-device function over the blocks of a mesh) and `sharding_constraint`
(`with_sharding_constraint`).

`xla_pmap` carries a closed jaxpr of the per-device computation (mapped axes removed from its
avals) and `in_axes`/`out_axes` (an int or None per operand/result); its operands and results
are the global values (the mapped axis present). Every rule re-traces the body with the axis
name bound, so collectives inside see it.

Lowering (DESIGN.md, the SPMD form JAX 0.10 uses): a module that contains a pmap has an
`sdy.mesh` whose axes are the pmap's axes, outermost first (nested pmaps add axes), and is
compiled with num_partitions = the mesh size. A pmap equation met outside any manual region
becomes an `sdy.manual_computation` manual over *all* mesh axes, its operands split along
their in_axes over the outermost mesh axis (Shardy slices replicated operands) and its
results likewise; inside, each device runs the body on its piece. A pmap met inside a manual
region (a nested pmap) is lowered inline: each device slices its operand by its index along
that pmap's mesh axis (from `partition_id`), runs the body, and all-gathers the results, so
every value inside the region is addressed by global device ids and collectives use
`use_global_device_ids` replica groups computed from the module's axis environment.

`shard_map` carries the per-device closed jaxpr and the mesh, specs and manual axes; its
rules are pmap's generalized to several axes (`mapping.MapRules`): psum transposes to psum,
so the cotangent of a result replicated over manual axes is divided by their size before the
transposed body, and the cotangent of an operand replicated over manual axes is psum'med
over them. Residuals of partial evaluation are per-device values: each gets a leading axis
split over all manual axes. Lowering emits an `sdy.manual_computation` (as JAX does) inside
the program over the mesh.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import weakref
from typing import Any

import numpy as np
import optree

from stagecraft import core, tree_util
from stagecraft.core import Jaxpr, JaxprEqn, ShapedArray, Var
from stagecraft.interpreters import ad, batching, lowering, mapping
from stagecraft.interpreters.mapping import mapped_aval, unmapped_aval
from stagecraft.lax import parallel
from stagecraft.lax.control_flow.conditionals import cond_p
from stagecraft.lax.control_flow.loops import scan_p
from stagecraft.lax.control_flow.while_op import while_p
from stagecraft.lax import sharding_rules
from stagecraft.lax.conv import lay_out as conv_lay_out
from stagecraft.lax.shape import reshape
from stagecraft.runtime import dispatch, spmd
from stagecraft.runtime.array import Array
from stagecraft.runtime.spmd import SpmdExecutable, check_spec_fits
from stagecraft import sharding
from stagecraft.sharding import AxisType, Mesh, NamedSharding, PartitionSpec
from stagecraft.layout import Format

__all__ = ["xla_pmap_p", "sharding_constraint_p", "with_sharding_constraint", "shard_map_p",
           "global_aval", "local_aval", "split_size", "shard_map_env", "pmap_executable",
           "enclosing_shard_map", "reshard", "reshard_p", "reshard_to_type", "device_put_p"]

# NB: `set_mesh`/`get_mesh` are refused while a transformation traces; the platform layer
# (sharding.py) cannot see traces, so the check is installed from here.
sharding.outside_trace[0] = lambda: core.current_trace() is core.eval_trace

# ===========================================================================
# xla_pmap

# ---------------------------------------------------------------------------
# The primitive

xla_pmap_p = core.Primitive("xla_pmap")
xla_pmap_p.multiple_results = True
core.pp_param_order[xla_pmap_p] = ("name", "axis_name", "axis_size", "in_axes", "out_axes",
                                   "jaxpr")


_JAX_PCAST_NAME = "jax.lax.pcast"   # as JAX names it in its scan-vma error message

def _pmap_abstract_eval(*avals, jaxpr, axis_name, axis_size, in_axes, out_axes, **_):
  return [unmapped_aval(a, ax, axis_size) for a, ax in zip(jaxpr.out_avals, out_axes)]


xla_pmap_p.def_abstract_eval(_pmap_abstract_eval)


def _pmap_env(params):
  return batching.extend_axis_env(params["axis_name"], params["axis_size"])




mapping.MapRules(
    xla_pmap_p, "in_axes", "out_axes", rep=None, env=_pmap_env,
    local_aval=lambda aval, ax, params: mapped_aval(aval, ax),
    global_aval=lambda aval, ax, params: unmapped_aval(aval, ax, params["axis_size"]),
    replicated_over=lambda ax, params: (((params["axis_name"],), params["axis_size"])
                                        if ax is None else ((), 1)),
    residual_entry=lambda params: 0,
    batched_entry=lambda ax: None if ax is None else ax + 1,
    psum=parallel.psum, reshape=reshape, reset=("donated_invars",)).register()
mapping.device_maps[xla_pmap_p] = lambda p: (p["axis_name"], p["axis_size"], p["devices"],
                                             p["jaxpr"].jaxpr)


# ---------------------------------------------------------------------------
# Lowering


def _pmap_lowering(ctx, *args, jaxpr, axis_name, axis_size, in_axes, out_axes, **_):
  module = ctx.module
  if module.sdy_mesh is not None:
    raise ValueError(
        f"pmap ('{axis_name}') cannot be staged into a program over a device mesh (jit with "
        f"shardings, with_sharding_constraint or shard_map); use shard_map over the mesh "
        f"instead, or call the pmap outside that jit.")
  if getattr(module, "mesh", None) is None:
    raise ValueError(
        f"pmap ('{axis_name}') cannot be lowered into this module, which has no device mesh "
        f"(for example inside xla_computation or an eager op); call it directly or from "
        f"jit.")
  if getattr(module, "manual_depth", None) is None:
    return _lower_manual(ctx, args, jaxpr, axis_name, axis_size, in_axes, out_axes)
  return _lower_inline(ctx, args, jaxpr, axis_name, axis_size, in_axes, out_axes)


def _reshape(fb, x, src: ShapedArray, dst: ShapedArray) -> str:
  r = fb.fresh()
  fb.emit(f"{r} = stablehlo.reshape {x} : ({lowering.ir_type(src)}) -> "
          f"{lowering.ir_type(dst)}")
  return r


def _lower_body(fb, module, jaxpr, depth, axis_name, axis_size, args):
  saved_env, saved_depth = module.axis_env, module.manual_depth
  env = list(saved_env)
  env[depth] = (axis_name, axis_size)
  module.axis_env, module.manual_depth = tuple(env), depth + 1
  try:
    # NB: bodies re-traced while lowering (scan's step) see the axis bound.
    with batching.extend_axis_env(axis_name, axis_size):
      return lowering.jaxpr_subcomp(fb, jaxpr.jaxpr, [], args)
  finally:
    module.axis_env, module.manual_depth = saved_env, saved_depth




def _ndim(aval) -> int:
  """The rank of `aval`'s data in programs (a typed key's data has one axis more)."""
  return len(core.physical_aval(aval).shape)


def _lower_manual(ctx, args, jaxpr, axis_name, axis_size, in_axes, out_axes):
  """The pmap as an `sdy.manual_computation` over all mesh axes, split on mesh axis 0."""
  fb, module = ctx.fb, ctx.module
  ax0 = module.mesh[0][0]
  local_in = [unmapped_aval(a, ax, 1) for a, ax in zip(jaxpr.in_avals, in_axes)]
  local_out = [unmapped_aval(a, ax, 1) for a, ax in zip(jaxpr.out_avals, out_axes)]
  # NB: a typed key's sharding covers its key data (the trailing axis unsplit)
  in_sh = [mapping.sdy_sharding(_ndim(a), ax, ax0, attr=False)
           for a, ax in zip(ctx.avals_in, in_axes)]
  out_sh = [mapping.sdy_sharding(_ndim(a), ax, ax0, attr=False)
            for a, ax in zip(ctx.avals_out, out_axes)]

  def body(block_args):
    body_args = [x if ax is None else _reshape(fb, x, lo, a)
                 for x, ax, lo, a in zip(block_args, in_axes, local_in, jaxpr.in_avals)]
    module.manual_depth = 0
    try:
      outs = _lower_body(fb, module, jaxpr, 0, axis_name, axis_size, body_args)
    finally:
      module.manual_depth = None
    return [o if ax is None else _reshape(fb, o, a, lo)
            for o, ax, a, lo in zip(outs, out_axes, jaxpr.out_avals, local_out)]
  return mapping.emit_manual_computation(ctx, args, in_sh, out_sh, [a for a, _ in module.mesh],
                                 local_in, local_out, body)


def _mesh_index(ctx, depth: int) -> str:
  """This device's index along mesh axis `depth` (an i32 scalar), from partition_id."""
  sizes = [int(s) for _, s in ctx.module.axis_env]
  u32 = ShapedArray((), np.dtype(np.uint32))
  dev = ctx.fb.fresh()
  ctx.fb.emit(f"{dev} = stablehlo.partition_id : tensor<ui32>")
  stride = math.prod(sizes[depth + 1:])
  q = ctx.elementwise("stablehlo.divide", dev, ctx.constant(stride, u32), aval=u32)
  r = ctx.elementwise("stablehlo.remainder", q, ctx.constant(sizes[depth], u32), aval=u32)
  out = ctx.fb.fresh()
  ctx.fb.emit(f"{out} = stablehlo.convert {r} : (tensor<ui32>) -> tensor<i32>")
  return out


def _lower_inline(ctx, args, jaxpr, axis_name, axis_size, in_axes, out_axes):
  """A pmap nested in a manual region: slice by this device's index, run, all-gather."""
  fb, module = ctx.fb, ctx.module
  depth = module.manual_depth
  if depth >= len(module.mesh):
    raise ValueError(f"pmap ('{axis_name}') is nested deeper than the module's mesh "
                     f"{module.mesh}.")
  i32 = ShapedArray((), np.dtype(np.int32))
  idx = _mesh_index(ctx, depth)
  zero = ctx.constant(0, i32)
  body_args = []
  for x, ax, g, a in zip(args, in_axes, ctx.avals_in, jaxpr.in_avals):
    if ax is None:
      body_args.append(x)
      continue
    lo = unmapped_aval(a, ax, 1)
    starts = [idx if d == ax else zero for d in range(len(g.shape))]
    s = ctx.op("stablehlo.dynamic_slice", [x, *starts], [lo],
               f"slice_sizes = {lowering.i64_array(lo.shape)}",
               operand_avals=[g, *[i32] * len(starts)])[0]
    body_args.append(_reshape(fb, s, lo, a))
  saved_env = module.axis_env
  outs = _lower_body(fb, module, jaxpr, depth, axis_name, axis_size, body_args)
  env = list(saved_env)
  env[depth] = (axis_name, axis_size)
  module.axis_env = tuple(env)
  try:
    results = []
    for o, ax, a, g in zip(outs, out_axes, jaxpr.out_avals, ctx.avals_out):
      if ax is None:
        results.append(o)
        continue
      sub = ctx.replace(avals_in=[a], avals_out=[g])
      results += parallel.all_gather_lowering(sub, o, axis_name=axis_name,
                                               all_gather_dimension=ax, tiled=False,
                                               axis_size=axis_size)
  finally:
    module.axis_env = saved_env
  return results


lowering.register_lowering(xla_pmap_p, _pmap_lowering)



def _mesh_for(chain, devices) -> Mesh:
  shape = [s for _, s, _ in chain]
  return Mesh(np.array(devices, dtype=object).reshape(shape), mapping.mesh_names(chain))


def _sharding(mesh: Mesh, ndim: int, axis: int | None) -> NamedSharding:
  spec = [None] * ndim
  if axis is not None:
    spec[axis] = mesh.axis_names[0]
  while spec and spec[-1] is None:   # NB: JAX's specs leave out the trailing Nones
    spec.pop()
  return NamedSharding(mesh, PartitionSpec(*spec))


_pmap_executables: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _compile_pmap(in_avals, params) -> SpmdExecutable:
  invars = [Var(a) for a in in_avals]
  outvars = [Var(a) for a in _pmap_abstract_eval(*in_avals, **params)]
  jaxpr = Jaxpr([], invars, outvars, [JaxprEqn(invars, outvars, xla_pmap_p, params)])
  chain = mapping.mesh_chain(jaxpr)
  devices = spmd.chain_devices(chain, params["devices"])
  mesh = _mesh_for(chain, devices)
  in_sh = [_sharding(mesh, _ndim(a), ax) for a, ax in zip(in_avals, params["in_axes"])]
  out_sh = [_sharding(mesh, _ndim(v.aval), ax)
            for v, ax in zip(outvars, params["out_axes"])]
  ax0 = mesh.axis_names[0]
  arg_attrs = [f"sdy.sharding = {mapping.sdy_sharding(_ndim(a), ax, ax0, attr=True)}"
               for a, ax in zip(in_avals, params["in_axes"])]
  res_attrs = [f"sdy.sharding = {mapping.sdy_sharding(_ndim(v.aval), ax, ax0, attr=True)}"
               for v, ax in zip(outvars, params["out_axes"])]
  text = mapping.lower_spmd_module(f"pmap_{params['name']}", jaxpr, chain, arg_attrs=arg_attrs,
                           result_attrs=res_attrs, donated=params["donated_invars"])
  exe = dispatch.compile_module(text, devices, num_partitions=len(devices))
  donated = [i for i, d in enumerate(params["donated_invars"]) if d]
  return SpmdExecutable(exe, devices, in_avals, [v.aval for v in outvars], in_sh, out_sh,
                        text, donated)


def pmap_executable(in_avals: tuple, params: dict) -> SpmdExecutable:
  """The compiled program of a pmap equation (cached per body jaxpr, avals and params)."""
  key = (in_avals, *[(k, v) for k, v in params.items() if k != "jaxpr"])
  table = _pmap_executables.setdefault(params["jaxpr"], {})
  ex = table.get(key)
  if ex is None:
    ex = table[key] = _compile_pmap(in_avals, params)
  return ex


def _pmap_impl(*args, **params):
  in_avals = tuple(x.aval if type(x) is Array else core.get_aval(x) for x in args)
  return pmap_executable(in_avals, params).call(args)


xla_pmap_p.def_impl(_pmap_impl)



# ===========================================================================
# sharding_constraint

sharding_constraint_p = core.Primitive("sharding_constraint")


def _sc_type(aval, s):
  # NB: on a mesh with Explicit axes the constrained value has that layout in its type
  # (an untyped operand takes it; a typed one must already have it: with_sharding_constraint
  # checks); on other meshes the type is the operand's.
  if AxisType.Explicit in s.mesh.axis_types:
    return sharding.type_sharding(s, aval.ndim)
  return aval._sharding


def bind_sharding_constraint(x: Any, s: NamedSharding, layout: Any = None,
                             unconstrained_dims: Any = frozenset()) -> Any:
  """`sharding_constraint_p.bind` with JAX's params: `sharding`, `layout` (a `Layout` or
  None), `unconstrained_dims` and `context_mesh` (the abstract mesh set by `set_mesh`, else
  an empty concrete Mesh, printed `Mesh()`)."""
  ctx = sharding.get_abstract_mesh()
  return sharding_constraint_p.bind(
      x, sharding=s, layout=layout, unconstrained_dims=frozenset(unconstrained_dims),
      context_mesh=ctx if not ctx.empty else sharding.empty_concrete_mesh)


def _sc_abstract_eval(aval, *, sharding, **_):
  ts = _sc_type(aval, sharding)
  return aval if ts is aval._sharding else aval.update(sharding=ts)


sharding_constraint_p.def_abstract_eval(_sc_abstract_eval)


def _sc_impl(x, *, sharding, layout, **_):
  # NB: eagerly, the constraint is the layout asked for: an explicit device_put (of the
  # Format, when a memory layout other than the default row-major one is asked for too).
  if layout is not None and tuple(layout.major_to_minor) != tuple(range(np.ndim(x))):
    single = sharding.mesh.size == 1 and next(iter(sharding.mesh.devices.flat)) == \
        dispatch.client.default_device()
    if not single:
      raise NotImplementedError(
          f"with_sharding_constraint: stagecraft supports Formats (memory layouts) on the "
          f"default device only (as jit's out_shardings), got {layout} over {sharding!r}; "
          f"leave the layout out (Format(None, sharding) or the sharding alone).")
    return spmd.device_put_formats(x, Format(layout, sharding))
  return spmd.device_put_sharded(x, sharding)


sharding_constraint_p.def_impl(_sc_impl)


def _sc_jvp(primals, tangents, **params):
  (x,), (t,) = primals, tangents
  out = sharding_constraint_p.bind(x, **params)
  if type(t) is ad.Zero:
    return out, t
  return out, sharding_constraint_p.bind(t, **params)


def _sc_transpose(ct, x, **params):
  if type(ct) is ad.Zero:
    return [None]
  return [sharding_constraint_p.bind(ct, **params)]


def _sc_batch(args, dims, *, sharding, layout, unconstrained_dims, context_mesh):
  (x,), (d,) = args, dims
  if layout is not None:
    raise NotImplementedError("vmap of with_sharding_constraint with a memory layout (a "
                              "Format) is not supported; constrain the layout outside vmap.")
  spec = list(sharding.spec) + [None] * (x.ndim - 1 - len(sharding.spec))
  spec.insert(d, None)
  return sharding_constraint_p.bind(
      x, sharding=NamedSharding(sharding.mesh, PartitionSpec(*spec)), layout=None,
      unconstrained_dims=frozenset(u + (u >= d) for u in unconstrained_dims),
      context_mesh=context_mesh), d


def _index_list(xs) -> str:
  n = len(xs)
  return f"dense<[{', '.join(str(int(i)) for i in xs)}]> : tensor<{n}xindex>" if n else \
      "dense<> : tensor<0xindex>"


def lower_sharding_constraint(ctx, x: str, aval, sharding) -> str:
  """`x` (of `aval`) constrained to the NamedSharding `sharding` in the module being
  lowered: an `sdy.sharding_constraint` (nothing without a mesh, as in xla_computation or a
  pmap program, nor inside shard_map). Also jit's lowering of its equations' in_shardings /
  out_shardings."""
  module = ctx.module
  mesh = module.sdy_mesh
  if mesh is None or module.manual_depth is not None:
    return x
  s = spmd.on_mesh(sharding, mesh)
  r = ctx.fb.fresh()
  ctx.fb.emit(f"{r} = sdy.sharding_constraint {x} {s._sdy(len(aval.shape))} : "
              f"{lowering.ir_type(aval)}")
  return r


def _sc_lowering(ctx, x, *, sharding, layout, **_):
  aval = ctx.avals_in[0]
  ty = lowering.ir_type(aval)
  r = lower_sharding_constraint(ctx, x, aval, sharding)
  if layout is not None:
    # JAX's layout constraint: XLA's LayoutConstraint custom call, the layout given
    # minor-to-major (the operand's as JAX writes it)
    out = ctx.fb.fresh()
    ctx.fb.emit(f"{out} = stablehlo.custom_call @LayoutConstraint({r}) {{backend_config = "
                f"\"\", operand_layouts = [{_index_list(range(aval.ndim))}], result_layouts = "
                f"[{_index_list(layout.major_to_minor[::-1])}]}} : ({ty}) -> {ty}")
    r = out
  return [r]


core.sharding_rules[sharding_constraint_p] = lambda x, *, sharding, **_: _sc_type(x, sharding)
ad.primitive_jvps[sharding_constraint_p] = _sc_jvp
ad.primitive_transposes[sharding_constraint_p] = _sc_transpose
batching.primitive_batchers[sharding_constraint_p] = _sc_batch
lowering.register_lowering(sharding_constraint_p, _sc_lowering)


def _wsc_leaf(v) -> bool:
  return v is None or isinstance(v, (Format, sharding.Sharding, PartitionSpec))


def _has_format(tree) -> bool:
  return isinstance(tree, Format) or (not _wsc_leaf(tree) and any(
      isinstance(v, Format) for v in tree_util.tree_leaves(tree, is_leaf=_wsc_leaf)))


def with_sharding_constraint(x: Any, shardings: Any) -> Any:
  """Asks that the value(s) `x` be laid out by `shardings` at this point of a program (the
  partitioner reshards around it as needed), as JAX's `lax.with_sharding_constraint`.
  Outside jit it is `device_put(x, shardings)`.

  Args:
    x: an array or a pytree of arrays.
    shardings: a NamedSharding (or a PartitionSpec inside `with mesh:`) or a pytree prefix
      of `x` of them.

  Returns:
    `x`, unchanged in value; in StableHLO each leaf passes through `sdy.sharding_constraint`.

  Raises:
    ValueError: a spec naming a dimension the value does not have, a dimension not
      divisible by its mesh axes, or a tree mismatch.
    TypeError: for something that is not a sharding.
  """
  leaves, treedef = optree.tree_flatten(x, none_is_leaf=False, namespace=tree_util.NAMESPACE)
  what = "with_sharding_constraint shardings"
  layouts = [None] * len(leaves)
  if _has_format(shardings):
    # Formats (a memory layout and a sharding): the layout is constrained too, as JAX's
    try:
      entries = tree_util.broadcast_prefix(shardings, x, is_leaf=_wsc_leaf)
    except ValueError:
      raise spmd.prefix_error(shardings, x, what) from None
    layouts = [e.layout if isinstance(e, Format) else None for e in entries]
    shs = [sharding.to_named(e.sharding if isinstance(e, Format) else e, what)
           for e in entries]
  else:
    shs = spmd.flatten_shardings(shardings, x, what)
  paths = [tree_util.keystr(p) for p, _ in tree_util.tree_flatten_with_path(x)[0]]
  outs = []
  for leaf, s, path, layout in zip(leaves, shs, paths, layouts):
    if s is None:
      outs.append(leaf)
      continue
    aval = core.get_aval(leaf)
    check_spec_fits(s, aval, f"with_sharding_constraint at {path or 'the value'}", typed=True)
    if s.mesh.are_all_axes_explicit and isinstance(leaf, core.Tracer):
      want = sharding.type_sharding(s, aval.ndim)
      if aval._sharding is not None and want != aval._sharding:
        have = sharding.spec_entries(aval._sharding, aval.ndim)
        raise AssertionError(
            f"`with_sharding_constraint` acts as an assert when all axes of mesh are of type "
            f"`Explicit`. The array sharding: {PartitionSpec(*have)!r} did not match the "
            f"sharding provided: {s.spec!r}. Please use `jax.sharding.reshard` to shard your "
            f"input to the sharding you want.")
    outs.append(bind_sharding_constraint(leaf, s, layout))
  return tree_util.tree_unflatten(treedef, outs)




# ===========================================================================
# reshard: changes the sharding in a value's type (JAX's `reshard_p`)

reshard_p = core.Primitive("reshard")


def _type_of(dst: NamedSharding, ndim: int):
  return sharding.type_sharding(dst, ndim)


def _reshard_abstract_eval(aval, *, dst_sharding):
  return aval.update(sharding=_type_of(dst_sharding, aval.ndim))


def _reshard_impl(x, *, dst_sharding):
  dst = dst_sharding
  src = x._sharding if type(x) is Array else None
  if isinstance(src, NamedSharding) and src.spec.unreduced:
    # NB: partial sums: one program over the mesh, whose partitioner sums them
    return dispatch.apply_primitive(reshard_p, [x], {"dst_sharding": dst})
  if isinstance(src, NamedSharding) and isinstance(src.mesh, Mesh) and (
      src.mesh.axis_names, src.mesh.axis_sizes) == (dst.mesh.axis_names,
                                                    dst.mesh.axis_sizes):
    # NB: eagerly the type's AbstractMesh is the mesh the operand lives on
    return spmd.device_put_sharded(x, NamedSharding(src.mesh, dst.spec))
  mesh = sharding.current_mesh()
  if mesh is None or (mesh.axis_names, mesh.axis_sizes) != (dst.mesh.axis_names,
                                                            dst.mesh.axis_sizes):
    # NB: a value on no mesh (an eager cotangent made on one device): the next operation
    # with an operand on the mesh places it.
    return x
  return spmd.device_put_sharded(x, NamedSharding(mesh, dst.spec))


def _reshard_transpose(ct, x, *, dst_sharding):
  if type(ct) is ad.Zero:
    return [None]
  want = x.aval._sharding
  if want is not None and (want.spec.unreduced or want.spec.reduced):
    # NB: a cotangent's type: unreduced and reduced swapped (JAX's `to_ct_spec`)
    want = want.update(spec=want.spec.to_ct_spec())
  return [reshard_to_type(ct, want, core.get_aval(ct)._sharding)]


def _reshard_batch(args, dims, *, dst_sharding):
  (x,), (d,) = args, dims
  spec = list(dst_sharding.spec) + [None] * (x.ndim - 1 - len(dst_sharding.spec))
  spec.insert(d, None)
  return reshard_p.bind(x, dst_sharding=NamedSharding(dst_sharding.mesh,
                                                      PartitionSpec(*spec))), d


def _reshard_lowering(ctx, x, *, dst_sharding):
  module = ctx.module
  mesh = module.sdy_mesh
  if mesh is None or module.manual_depth is not None:
    return [x]
  # NB: the program's mesh, or another shape of its devices (`use_abstract_mesh`)
  name = lowering.mesh_symbol(module, dst_sharding.mesh)
  if name is None:
    raise ValueError(f"reshard: the sharding {dst_sharding} is over another mesh than the "
                     f"program's ({mesh}).")
  if name != "mesh":
    mesh = dst_sharding.mesh
  aval = ctx.avals_in[0]
  r = ctx.fb.fresh()
  # NB: a type over a mesh with Auto axes (auto_axes/explicit_axes) says nothing about them:
  # its dimensions stay open to the partitioner.
  open_dims = bool(dst_sharding.mesh.auto_axes)
  sdy = NamedSharding(mesh, dst_sharding.spec)._sdy(len(aval.shape), open_dims, name)
  ctx.fb.emit(f"{r} = sdy.sharding_constraint {x} {sdy} : {lowering.ir_type(aval)}")
  return [r]


reshard_p.def_abstract_eval(_reshard_abstract_eval)
reshard_p.def_impl(_reshard_impl)
ad.deflinear_args(reshard_p, _reshard_transpose)
batching.primitive_batchers[reshard_p] = _reshard_batch
lowering.register_lowering(reshard_p, _reshard_lowering)
core.sharding_rules[reshard_p] = lambda x, *, dst_sharding: _type_of(dst_sharding, x.ndim)
core.ur_rules[reshard_p] = lambda x, *, dst_sharding: (dst_sharding.spec.unreduced,
                                                       dst_sharding.spec.reduced)
core.pp_eqn_rules[reshard_p] = lambda eqn, context: []   # NB: JAX prints no params


def reshard_to_type(x: Any, ts: NamedSharding | None, have: NamedSharding | None) -> Any:
  """`x` (of type sharding `have`) resharded to the type sharding `ts` (None: no
  dimension split, over the mesh of `have`)."""
  if ts is None:
    if have is None:
      return x
    ts = NamedSharding(have.mesh, PartitionSpec())
  return reshard_p.bind(x, dst_sharding=ts)


def _fit_spec_length(s: NamedSharding, ndim: int) -> NamedSharding:
  """`s` with the entries of its spec past the value's rank `ndim` dropped when they are
  None, as JAX's types take a spec (`reshard(model, P(None, None))` over a model's 1-d
  biases); one naming a mesh axis there fails JAX's assertion `(ndim, spec)`."""
  spec = s.spec
  if len(spec) <= ndim:
    return s
  if any(e is not None for e in tuple(spec)[ndim:]):
    raise AssertionError((ndim, spec))
  return NamedSharding(s.mesh, PartitionSpec(*tuple(spec)[:ndim], unreduced=spec.unreduced,
                                             reduced=spec.reduced))


def _conv_lay_out(x: Any, out_sharding: Any) -> Any:
  """A convolution's result laid out by its `out_sharding`: `reshard` when the mesh has
  Explicit axes (the result's type), a sharding constraint otherwise."""
  mesh = (out_sharding.mesh if isinstance(out_sharding, NamedSharding)
          else sharding.get_abstract_mesh())
  if AxisType.Explicit in tuple(getattr(mesh, "axis_types", ())):
    return reshard(x, out_sharding)
  return with_sharding_constraint(x, out_sharding)


def reshard(xs: Any, out_shardings: Any) -> Any:
  """Lays `xs` (an array or pytree) out by `out_shardings` (a NamedSharding, or a bare
  PartitionSpec meaning NamedSharding(mesh set by `set_mesh`, spec), or a pytree prefix of
  them), as JAX's `jax.sharding.reshard`: outside jit a device_put; traced, the `reshard`
  primitive, whose result's type has the new sharding (`f32[8,4@x]`) when the mesh has
  Explicit axes (on other meshes it is a sharding constraint).

  Raises:
    ValueError: a bare PartitionSpec with no mesh set; a spec that does not fit a value.
    TypeError: something that is not a sharding.
  """
  leaves, treedef = optree.tree_flatten(xs, none_is_leaf=False, namespace=tree_util.NAMESPACE)
  am = sharding.get_abstract_mesh()
  cm = sharding.current_mesh()
  if not am.empty and (cm is None or (cm.axis_names, cm.axis_sizes) != (am.axis_names,
                                                                         am.axis_sizes)):
    # NB: under `use_abstract_mesh` with another mesh than the concrete one, a bare spec is
    # over the abstract mesh in context (a type: only traced values take one)
    try:
      pre = tree_util.broadcast_prefix(out_shardings, xs, is_leaf=lambda s: s is None or
                                       isinstance(s, (PartitionSpec, sharding.Sharding)))
    except ValueError:   # JAX's message
      spmd.flatten_shardings(out_shardings, xs, "reshard out_shardings")
      raise
    shs = [NamedSharding(am, s) if isinstance(s, PartitionSpec) else
           s if s is None or (isinstance(s, NamedSharding) and not isinstance(s.mesh, Mesh))
           else sharding.to_named(s, "reshard out_shardings") for s in pre]
  else:
    shs = spmd.flatten_shardings(out_shardings, xs, "reshard out_shardings")
  outs = []
  for leaf, s in zip(leaves, shs):
    if s is None:
      outs.append(leaf)
      continue
    aval = core.get_aval(leaf)
    s = _fit_spec_length(s, aval.ndim)
    check_spec_fits(s, aval, "reshard", typed=True)
    if not isinstance(leaf, core.Tracer):
      # NB: as JAX's, the result's spec has one entry per dimension
      entries = sharding.spec_entries(NamedSharding(s.mesh, s.spec), aval.ndim)
      outs.append(spmd.device_put_sharded(leaf, NamedSharding(s.mesh, PartitionSpec(*entries))
                                          if len(s.spec) < aval.ndim else s))
    elif AxisType.Explicit in s.mesh.axis_types:
      outs.append(reshard_p.bind(leaf, dst_sharding=NamedSharding(s.mesh.abstract_mesh,
                                                                  s.spec)))
    else:
      outs.append(bind_sharding_constraint(leaf, s))
  return tree_util.tree_unflatten(treedef, outs)


def _traced_device_put(x, s: NamedSharding):
  if AxisType.Explicit in s.mesh.axis_types:
    # NB: over the concrete mesh (a `jax.reshard` names an AbstractMesh): the program's
    # device assignment must include its devices (`spmd.jaxpr_meshes`, JAX's "device_put
    # inside jit"); the type is over its AbstractMesh all the same.
    return reshard_p.bind(x, dst_sharding=s)
  return bind_sharding_constraint(x, s)


spmd.traced_device_put[0] = _traced_device_put


# ===========================================================================
# device_put inside a transformation (JAX's `device_put_p`)

device_put_p = core.Primitive("device_put")
device_put_p.multiple_results = True
_Copy = spmd.ArrayCopySemantics


def _dp_type(aval, d):
  """The type of a value put on `d`: a NamedSharding gives the type its layout says (split
  dimensions over Explicit axes); a SingleDeviceSharding an unsplit one; a device (or None)
  keeps the operand's."""
  if type(aval) is not ShapedArray:
    return aval
  if isinstance(d, NamedSharding):
    return spmd.typed_aval(aval, d)
  if isinstance(d, sharding.SingleDeviceSharding) and aval._sharding is not None:
    return aval.update(sharding=None)
  return aval


def _dp_abstract_eval(*avals, devices, srcs, copy_semantics):
  return [_dp_type(a, d) for a, d in zip(avals, devices)]


def _dp_jvp(primals, tangents, **params):
  # NB: linear (JAX's `linear_jvp`): the primals, then the tangents, each one equation
  outs = device_put_p.bind(*primals, **params)
  if all(type(t) is ad.Zero for t in tangents):
    return outs, [ad.Zero(ad.tangent_aval(core.get_aval(o))) for o in outs]
  return outs, device_put_p.bind(*[ad.instantiate_zeros(t) for t in tangents], **params)


def _dp_transpose(cts, *args, devices, srcs, copy_semantics):
  out = [None] * len(cts)
  todo = []
  for i, (ct, x) in enumerate(zip(cts, args)):
    if ad.is_undefined_primal(x):
      if type(ct) is ad.Zero:
        out[i] = ad.Zero(x.aval)
      else:
        todo.append(i)
  if todo:
    for i in todo:
      if copy_semantics[i] == _Copy.DONATE_INPUT:
        raise ValueError("donate=True is not allowed during tranposition of device_put. "
                         "Please file an issue if you want this to be supported.")
    # NB: the cotangents go back where the values came from, always copied
    ys = device_put_p.bind(*[cts[i] for i in todo], devices=tuple(srcs[i] for i in todo),
                           srcs=tuple(devices[i] for i in todo),
                           copy_semantics=(_Copy.ALWAYS_COPY,) * len(todo))
    for i, y in zip(todo, ys):
      out[i] = y
  return out


def _dp_batch(args, dims, **params):
  return device_put_p.bind(*args, **params), list(dims)


def _dp_lowering(ctx, *xs, devices, srcs, copy_semantics):
  # NB: as JAX's on CPU: no op; a sharding inside names the program's devices
  # (`spmd.jaxpr_meshes`) and a split type lays the value out where it is used
  return list(xs)


def _bind_device_put(leaves, devices, srcs, copy_semantics):
  return device_put_p.bind(*leaves, copy_semantics=copy_semantics, devices=devices,
                           srcs=srcs)


device_put_p.def_abstract_eval(_dp_abstract_eval)
device_put_p.def_impl(spmd.device_put_impl)
ad.primitive_jvps[device_put_p] = _dp_jvp
ad.primitive_transposes[device_put_p] = _dp_transpose
batching.primitive_batchers[device_put_p] = _dp_batch
lowering.register_lowering(device_put_p, _dp_lowering)
# NB: the results' types are the abstract eval's (the sharding rule changes nothing)
core.sharding_rules[device_put_p] = lambda *avals, **params: None
core.no_auto_pvary.add(device_put_p)
spmd.bind_device_put[0] = _bind_device_put
spmd.unreduced_reshard[0] = lambda x, s: dispatch.apply_primitive(
    reshard_p, [x], {"dst_sharding": NamedSharding(s.mesh.abstract_mesh, s.spec)})
sharding.late_names["reshard"] = reshard   # JAX's `jax.sharding.reshard`
sharding.late_names["ManualAxisType"] = core.ManualAxisType   # `jax.sharding.ManualAxisType`


# ===========================================================================
# shard_map

shard_map_p = core.Primitive("shard_map")
shard_map_p.multiple_results = True

def _pp_shard_map(eqn, context):
  # NB: JAX's params, sorted by name. A mesh taken from the context (`mesh_from_context`,
  # not printed) prints as its AbstractMesh, the one JAX's equation holds then.
  params = dict(eqn.params)
  if params.pop("mesh_from_context", False):
    params["mesh"] = params["mesh"].abstract_mesh
  return sorted(params.items())


# The name of the function a shard_map body was traced from (JAX keeps it in the body's
# debug info; the equation holds no `name`): stagecraft's messages and module names.
_body_names: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def name_shard_map_body(closed: ClosedJaxpr, name: str) -> None:
  """Records `name` as the name of the function the shard_map body `closed` comes from."""
  _body_names[closed] = name


def shard_map_name(params: dict) -> str:
  """The name of the function a shard_map equation's body was traced from ("shard_map"
  for a body derived by a transformation)."""
  return _body_names.get(params["jaxpr"], "shard_map")


core.pp_eqn_rules[shard_map_p] = _pp_shard_map


# ---------------------------------------------------------------------------
# Avals


def split_size(mesh: Mesh, spec: PartitionSpec, i: int) -> int:
  """Into how many blocks `spec` splits dimension `i` over `mesh`."""
  return math.prod(mesh.shape[n] for n in spec._names(i))


def global_aval(aval: ShapedArray, spec: PartitionSpec, mesh: Mesh) -> ShapedArray:
  """The global aval of a per-device block `aval` assembled by `spec` (typed by the
  dimensions `spec` splits over Explicit mesh axes)."""
  shape = tuple(d * split_size(mesh, spec, i) for i, d in enumerate(aval.shape))
  ts = sharding.type_sharding(NamedSharding(mesh, spec), len(shape))
  return aval.update(shape=shape, sharding=ts)


def local_aval(aval: ShapedArray, spec: PartitionSpec, mesh: Mesh,
               vma: frozenset | None = None, manual: Any = None) -> ShapedArray:
  """The per-device block of a global `aval` split by `spec` (dimensions divide); `vma`:
  the manual axes it varies along inside a check_vma body (None: keep `aval`'s); `manual`:
  the body's manual axes in a check_vma body, whose unreduced/reduced axes in `spec` the
  block's type keeps (JAX's `manual_axis_type.unreduced` / `.reduced`, printed `{U:i}`:
  here in the type's spec, over the body's mesh)."""
  out = aval.update(shape=tuple(d // split_size(mesh, spec, i)
                                for i, d in enumerate(aval.shape)), sharding=None, vma=vma)
  if manual is not None and (spec.unreduced or spec.reduced):
    manual = frozenset(manual)
    u, r = spec.unreduced & manual, spec.reduced & manual
    if u or r:
      body_mesh = mesh.abstract_mesh.update_axis_types({n: AxisType.Manual for n in manual})
      out = out.update(sharding=NamedSharding(body_mesh, PartitionSpec(
          *(None,) * len(out.shape), unreduced=u, reduced=r)))
  return out


def body_vma(aval: ShapedArray, spec: PartitionSpec, manual) -> frozenset:
  """The vma of an argument inside a check_vma shard_map body: the manual axes its spec
  splits over, and those it varies along outside (a nested shard_map)."""
  return aval.vma | (_spec_axes(spec) & frozenset(manual))


def _shard_shaped_array(mesh, manual_axes, check_vma, spec, aval):
  # The block of `aval` split by `spec`: typed with the manual axes the block varies along
  # when `check_vma`.
  if not isinstance(spec, PartitionSpec):   # a hijax type's HiPspec: JAX's error
    raise AttributeError(f"'{type(spec).__name__}' object has no attribute 'unreduced'")
  return local_aval(aval, spec, mesh, body_vma(aval, spec, manual_axes) if check_vma else None,
                    frozenset(manual_axes) if check_vma else None)


def _unshard_shaped_array(mesh, check_vma, spec, aval):
  # The value assembled from blocks of `aval` by `spec`; it varies only along the manual
  # axes of an enclosing shard_map.
  out = global_aval(aval, spec, mesh)
  outer = enclosing_shard_map()
  keep = outer[1] if outer is not None else frozenset()
  return out.update(vma=out.vma & keep) if out.vma else out


core.shard_aval_handlers[ShapedArray] = _shard_shaped_array
core.unshard_aval_handlers[ShapedArray] = _unshard_shaped_array


def _shard_map_abstract_eval(*avals, jaxpr, mesh, out_specs, newly_manual_axes=(),
                             check_vma=False, **_):
  # A hijax-typed result's type is its type's `unshard` (its spec a HiPspec).
  outs = [core.unshard_aval(mesh, check_vma, s, a) if core.is_hi(a) else global_aval(a, s, mesh)
          for a, s in zip(jaxpr.out_avals, out_specs)]
  # NB: a result is whole along the shard_map's own manual axes; it varies along an
  # enclosing shard_map's axes as the body's result does.
  return [o.update(vma=o.vma - frozenset(newly_manual_axes))
          if getattr(o, "vma", None) else o for o in outs]


shard_map_p.def_abstract_eval(_shard_map_abstract_eval)


# The (mesh, manual axes) of the shard_map bodies being traced or lowered now, innermost
# last: a nested shard_map without `mesh=` maps over the same mesh, manual over more axes.
_enclosing: contextvars.ContextVar = contextvars.ContextVar("stagecraft_shard_map",
                                                            default=None)


def enclosing_shard_map() -> tuple[Mesh, frozenset] | None:
  """(mesh, every manual axis) of the shard_map whose body is traced now, or None."""
  return _enclosing.get()


@contextlib.contextmanager
def shard_map_env(mesh: Mesh, manual_axes, check_vma: bool = False):
  """Binds the manual mesh axes (outermost first) for collectives in the body, and sets the
  abstract mesh in context (`get_abstract_mesh()`) to `mesh`'s with every manual axis (those
  of enclosing shard_maps too) typed Manual, as JAX does. `check_vma`: the body is traced
  with varying manual axes in its types (`core.checking_vma_types`)."""
  core.register_axis_order(mesh.axis_names)
  outer = _enclosing.get()
  manual = frozenset(manual_axes)
  if outer is not None and _same_mesh(outer[0], mesh):
    manual = manual | outer[1]
  abstract = mesh.abstract_mesh.update_axis_types({n: AxisType.Manual for n in manual})
  token = _enclosing.set((mesh, manual))
  try:
    with contextlib.ExitStack() as stack:
      stack.enter_context(sharding.abstract_mesh_context(abstract))
      stack.enter_context(core.checking_vma_types(check_vma))
      for n in mesh.axis_names:
        if n in manual_axes:
          stack.enter_context(batching.extend_axis_env(n, mesh.shape[n]))
      yield
  finally:
    _enclosing.reset(token)


@contextlib.contextmanager
def outside_shard_map(abstract: Any):
  """Runs a block as if outside any shard_map body (`abstract`: the abstract mesh in context
  there): the eager shard_map runs a collective over several axes as its own shard_map."""
  token = _enclosing.set(None)
  try:
    with sharding.abstract_mesh_context(abstract):
      yield
  finally:
    _enclosing.reset(token)


def _same_mesh(a: Mesh, b: Mesh) -> bool:
  """The same devices in the same grid with the same axis names (axis types aside)."""
  return a is b or (a.axis_names == b.axis_names and a.devices.shape == b.devices.shape and
                    [d.id for d in a.devices.flat] == [d.id for d in b.devices.flat])


_typed_bodies: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def typed_body(params) -> bool:
  """Whether a shard_map's body has varying manual axes in its types (traced under
  check_vma; a body in which nothing varies counts as untyped: both read the same)."""
  if not params.get("check_vma"):
    return False
  closed = params["jaxpr"]
  out = _typed_bodies.get(closed)
  if out is None:
    jaxpr = closed.jaxpr
    out = _typed_bodies[closed] = (
        any(getattr(v.aval, "vma", None) for v in jaxpr.invars) or
        any(getattr(v.aval, "vma", None) for e in jaxpr.eqns for v in e.outvars))
  return out


def _shard_map_params_env(params):
  return shard_map_env(params["mesh"], params["newly_manual_axes"], typed_body(params))


def _map_local_aval(aval, spec, params):
  vma = body_vma(aval, spec, params["newly_manual_axes"]) if typed_body(params) else None
  return local_aval(aval, spec, params["mesh"], vma,
                    params["newly_manual_axes"] if params.get("check_vma") else None)


def _map_global_aval(aval, spec, params):
  out = global_aval(aval, spec, params["mesh"])
  return out.update(vma=out.vma - frozenset(params["newly_manual_axes"])) if out.vma else out


def _manual_names(params) -> tuple:
  return tuple(n for n in params["mesh"].axis_names if n in params["newly_manual_axes"])


def _missing_axes(spec: PartitionSpec, params) -> tuple:
  """The manual axes `spec` does not split over (the value is replicated along them)."""
  used = {n for i in range(len(spec)) for n in spec._names(i)}
  return tuple(n for n in _manual_names(params) if n not in used)


# ---------------------------------------------------------------------------
# Rules

_REP = PartitionSpec()


def _residual_spec(params) -> PartitionSpec:
  # NB: residuals are per-device values: each gets a leading axis split over every manual
  # axis (global shape (n_devices_manual, *block)).
  manual = _manual_names(params)
  return PartitionSpec(manual if len(manual) != 1 else manual[0]) if manual else _REP


def _replicated_over(spec: PartitionSpec, params) -> tuple[tuple, int]:
  names = _missing_axes(spec, params)
  return names, math.prod(params["mesh"].shape[n] for n in names)


mapping.MapRules(
    shard_map_p, "in_specs", "out_specs", rep=_REP, env=_shard_map_params_env,
    local_aval=_map_local_aval, global_aval=_map_global_aval,
    replicated_over=_replicated_over, residual_entry=_residual_spec,
    batched_entry=lambda spec: PartitionSpec(None, *spec),
    psum=parallel.psum, reshape=reshape, typed=typed_body).register()



# ---------------------------------------------------------------------------
# Lowering and eager evaluation


def _shard_map_lowering(ctx, *args, jaxpr, mesh, in_specs, out_specs, newly_manual_axes,
                        **_):
  module = ctx.module
  name = shard_map_name({"jaxpr": jaxpr})
  if module.sdy_mesh is None:
    raise ValueError(f"shard_map ({name}) cannot be lowered into this module, which has no "
                     f"device mesh (xla_computation, or a pmap program); call it directly "
                     f"or from jit.")
  # Axes already manual here: those of the enclosing shard_maps (a nested shard_map is a
  # manual computation inside the outer one's region, manual over further axes).
  outer_manual = getattr(module, "manual_axes", None) or frozenset()
  if module.manual_depth is not None and not outer_manual:
    raise NotImplementedError(f"shard_map ({name}) nested inside a pmap is not supported; "
                              f"use one shard_map over several mesh axes.")
  clash = outer_manual & frozenset(newly_manual_axes)
  if clash:
    raise NotImplementedError(
        f"shard_map ({name}) is manual over {sorted(clash)}, "
        f"which an enclosing shard_map already is; a nested shard_map must be manual over "
        f"other axes (its `axis_names`).")
  if not _same_mesh(module.sdy_mesh, mesh):
    raise ValueError(f"shard_map ({name}) uses {mesh!r}, but the program runs over "
                     f"{module.sdy_mesh!r}; use one Mesh for every sharding of the program.")
  mesh = module.sdy_mesh
  now_manual = outer_manual | frozenset(newly_manual_axes)
  auto = any(n not in now_manual for n in mesh.axis_names)
  in_sh = [NamedSharding(mesh, s)._sdy(len(a.shape), open_dims=auto)
           for s, a in zip(in_specs, ctx.avals_in)]
  out_sh = [NamedSharding(mesh, s)._sdy(len(a.shape), open_dims=auto)
            for s, a in zip(out_specs, ctx.avals_out)]

  def body(block_args):
    saved = module.axis_env, module.manual_depth, getattr(module, "manual_axes", None)
    env = list(saved[0])
    for k, n in enumerate(mesh.axis_names):
      if n in newly_manual_axes:
        env[k] = (n, mesh.shape[n])
    module.axis_env, module.manual_depth = tuple(env), (saved[1] or 0)
    module.manual_axes = now_manual
    try:
      with shard_map_env(mesh, newly_manual_axes):
        consts = [lowering.constant(ctx.fb, c, core.get_aval(c)) for c in jaxpr.consts]
        return lowering.jaxpr_subcomp(ctx.fb, jaxpr.jaxpr, consts, block_args)
    finally:
      module.axis_env, module.manual_depth, module.manual_axes = saved
  manual = [mesh.sdy_axis_names[n] for n in mesh.axis_names if n in newly_manual_axes]
  return mapping.emit_manual_computation(ctx, args, in_sh, out_sh, manual, jaxpr.in_avals,
                                      jaxpr.out_avals, body)


lowering.register_lowering(shard_map_p, _shard_map_lowering)

_shard_map_executables: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _shard_map_impl(*args, **params):
  in_avals = tuple(x.aval if type(x) is Array else core.get_aval(x) for x in args)
  key = (in_avals, *[(k, v) for k, v in params.items() if k != "jaxpr"])
  table = _shard_map_executables.setdefault(params["jaxpr"], {})
  ex = table.get(key)
  if ex is None:
    invars = [Var(a) for a in in_avals]
    outvars = [Var(a) for a in _shard_map_abstract_eval(*in_avals, **params)]
    jaxpr = Jaxpr([], invars, outvars, [JaxprEqn(invars, outvars, shard_map_p, params)])
    mesh = params["mesh"]
    # NB: the in_specs are the layout asked for: arguments are split by them.
    ex = table[key] = spmd.compile_sharded(
        f"shard_map_{shard_map_name(params)}", jaxpr, mesh,
        [NamedSharding(mesh, s) for s in params["in_specs"]],
        [NamedSharding(mesh, s) for s in params["out_specs"]])
  return ex.call(args)


shard_map_p.def_impl(_shard_map_impl)


# ---------------------------------------------------------------------------
# Replication (varying manual axes) of shard_map and, under check_vma, of control flow


def _spec_axes(spec: PartitionSpec) -> frozenset:
  return frozenset(n for i in range(len(spec)) for n in spec._names(i))


def _shard_map_replication(in_vary, *, jaxpr, in_specs, newly_manual_axes, **_):
  # A nested shard_map: its body sees operands varying where they do outside and along the
  # axes their specs split; its results are whole along its own manual axes.
  body_in = [v | _spec_axes(s) for v, s in zip(in_vary, in_specs)]
  outs = mapping.varying_axes(jaxpr.jaxpr, body_in)
  return [o - frozenset(newly_manual_axes) for o in outs]


mapping.replication_rules[shard_map_p] = _shard_map_replication


def _carry_mismatch(loop: str, invars, carry_in, carry_out):
  """JAX's TypeError for a loop whose body changes a carry's varying manual axes."""
  for k, (v, a, b) in enumerate(zip(invars, carry_in, carry_out)):
    if a == b:
      continue
    extra = tuple(n for n in mapping.ordered_axes(b) if n not in a)
    hint = ""
    if extra:
      # NB: JAX's message text (users match it); the name is only printed, never called.
      hint = (f"This might be fixed by applying `{_JAX_PCAST_NAME}(..., {extra!r}, "
              f"to='varying')`, to the initial carry value corresponding to the input carry "
              f"component carry[{k}].\nSee https://docs.jax.dev/en/latest/notebooks/"
              f"shard_map.html#scan-vma for more information.\n\n")
    raise TypeError(
        f"{loop} body function carry input and carry output must have equal types, but they "
        f"differ:\n\nThe input carry component carry[{k}] has type "
        f"{mapping.vma_type(v.aval, a)} but the corresponding output carry component has "
        f"type {mapping.vma_type(v.aval, b)}, so the manual axis types do not match.\n\n"
        f"{hint}Revise the function so that all output types match the corresponding input "
        f"types.")


def _scan_vma(in_vary, *, jaxpr, num_consts, num_carry, **_):
  # NB: as JAX's typing: a carry keeps its type (no fixed point); a mismatch is an error.
  nc, nk = num_consts, num_carry
  carry = list(in_vary[nc:nc + nk])
  out = mapping.varying_axes(jaxpr.jaxpr, list(in_vary))
  _carry_mismatch("scan", jaxpr.jaxpr.invars[nc:nc + nk], carry, out[:nk])
  return [*carry, *out[nk:]]


def _while_vma(in_vary, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
  # NB: a varying predicate does not change the carries' types (JAX's typing).
  b_consts = in_vary[cond_nconsts:cond_nconsts + body_nconsts]
  carry = list(in_vary[cond_nconsts + body_nconsts:])
  mapping.varying_axes(cond_jaxpr.jaxpr, [*in_vary[:cond_nconsts], *carry])
  out = mapping.varying_axes(body_jaxpr.jaxpr, [*b_consts, *carry])
  _carry_mismatch("while_loop", body_jaxpr.jaxpr.invars[body_nconsts:], carry, out)
  return carry


def _cond_vma(in_vary, *, branches, **_):
  # NB: the branches must give equal types; the index does not matter (JAX's typing).
  ops = in_vary[1:]
  outs = [mapping.varying_axes(b.jaxpr, ops) for b in branches]
  two = len(branches) == 2
  for k, col in enumerate(zip(*outs)):
    for i in range(1, len(col)):
      if col[i] == col[0]:
        continue
      aval = branches[0].jaxpr.outvars[k].aval
      # cond(pred, true_fun, false_fun): branch 1 is true_fun, branch 0 false_fun.
      first, second = (("true_fun", col[1]), ("false_fun", col[0])) if two else (
          ("branches[0]", col[0]), (f"branches[{i}]", col[i]))
      revise = "true_fun and/or false_fun" if two else "the branches"
      raise TypeError(
          f"cond branches must have equal output types but they differ.\n\nThe output of "
          f"{first[0]} has type {mapping.vma_type(aval, first[1])} but the corresponding "
          f"output of {second[0]} has type {mapping.vma_type(aval, second[1])}, so the "
          f"manual axis types do not match.\n\nRevise {revise} so that all output types "
          f"match.")
  return list(outs[0]) if outs else []


# NB: these belong with their primitives in lax/control_flow; they are registered here, where
# shard_map's check_vma is, until those modules take them.
mapping.vma_rules[scan_p] = _scan_vma
mapping.vma_rules[while_p] = _while_vma
mapping.vma_rules[cond_p] = _cond_vma


# ===========================================================================
# Sharding in types: the maps' results have the types their abstract evals give; the
# transposes of linear primitives keep their operands' types (lax/sharding_rules.py).

core.sharding_rules[shard_map_p] = lambda *avals, **params: None
core.sharding_rules[xla_pmap_p] = lambda *avals, **params: None
sharding_rules.wrap_transposes(reshard_to_type)
# Instantiated zero tangents and cotangents have their primal's type, as JAX's.
ad.retype_zeros = lambda x, ts: reshard_to_type(x, ts, None)
# lax.conv_general_dilated's `out_sharding` (conv.py cannot import this module: a cycle).
conv_lay_out[0] = _conv_lay_out
