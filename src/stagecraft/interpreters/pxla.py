"""pmap: a map primitive over devices, its rules, its SPMD lowering and its executables.

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

Transposition follows JAX's conventions: psum's transpose is psum, so the cotangent of an
out_axes=None result is divided by the axis size before entering the transposed body, and
the cotangent of an in_axes=None operand is psum'med over the axis inside it.

Collective-launch hazard (DESIGN.md): on a CPU host with fewer cores than devices, launching
a program with collectives while an earlier one is still running can hang inside XLA and
abort the process. `SpmdExecutable.call` waits for the previous collective program's
results before launching the next one (nothing to wait for when a program has no
collectives).
"""
from __future__ import annotations

import functools
import math
import re
import threading
import weakref
from typing import Any, Callable, Sequence

import numpy as np
import optree
from jaxlib import xla_client as xc

from stagecraft import core, tree_util
from stagecraft.config import config
from stagecraft.core import ClosedJaxpr, Jaxpr, JaxprEqn, ShapedArray, Var
from stagecraft.interpreters import ad, batching, lowering
from stagecraft.interpreters import partial_eval as pe
from stagecraft.runtime import client, dispatch
from stagecraft.runtime.array import Array
from stagecraft.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = ["xla_pmap_p", "pmap", "mesh_chain", "lower_spmd_module", "SpmdExecutable"]

# ---------------------------------------------------------------------------
# Avals


def mapped_aval(aval: ShapedArray, axis: int | None) -> ShapedArray:
  """The per-device aval of a global aval mapped along `axis` (None: unchanged)."""
  if axis is None:
    return aval
  return aval.update(shape=aval.shape[:axis] + aval.shape[axis + 1:])


def unmapped_aval(aval: ShapedArray, axis: int | None, size: int) -> ShapedArray:
  """The global aval of a per-device aval whose mapped axis of `size` goes at `axis`."""
  if axis is None:
    return aval
  return aval.update(shape=aval.shape[:axis] + (size,) + aval.shape[axis:])


# ---------------------------------------------------------------------------
# The primitive

xla_pmap_p = core.Primitive("xla_pmap")
xla_pmap_p.multiple_results = True
core.pp_param_order[xla_pmap_p] = ("name", "axis_name", "axis_size", "in_axes", "out_axes",
                                   "jaxpr")


def _abstract_eval(*avals, jaxpr, axis_name, axis_size, in_axes, out_axes, **_):
  return [unmapped_aval(a, ax, axis_size) for a, ax in zip(jaxpr.out_avals, out_axes)]


xla_pmap_p.def_abstract_eval(_abstract_eval)


def _bind(args, params, **updates):
  p = {**params, **updates}
  return xla_pmap_p.bind(*args, **p)


def _env(params):
  return batching.extend_axis_env(params["axis_name"], params["axis_size"])


_memo = core.memo_on_jaxpr
_pe_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_batch_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class MapRules:
  """The jvp, transpose and DCE rules shared by the map primitives over devices (pmap,
  shard_map). Each describes operands and results by a per-position entry under `in_key` /
  `out_key` (pmap: an axis or None; shard_map: a PartitionSpec); `rep` is the entry of a
  value every device gets whole; `env(params)` binds the body's axes; `local_aval(aval,
  entry, params)` is a device's piece; `replicated_over(entry, params)` gives the axis names
  a value with that entry is the same along, and their total size; `reset` names per-operand
  params rebuilt as all-False (donation) when operands change.

  Transposition: psum's transpose is psum, so the cotangent of a result replicated over some
  axes is divided by their size before it enters the transposed body, and the cotangent of
  an operand replicated over some axes is psum'med over them inside it."""

  def __init__(self, prim, in_key, out_key, rep, env, local_aval, replicated_over, reset=()):
    self.prim, self.in_key, self.out_key, self.rep = prim, in_key, out_key, rep
    self.env, self.local_aval, self.replicated_over = env, local_aval, replicated_over
    self.reset = tuple(reset)
    self._jvp_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
    self._transpose_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
    self._dce_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

  def bind(self, args, params, new_in, new_out, **updates):
    p = {**params, self.in_key: new_in, self.out_key: new_out,
         **{k: (False,) * len(new_in) for k in self.reset}, **updates}
    return self.prim.bind(*args, **p)

  def jvp(self, primals, tangents, **params):
    closed, ins, outs_e = params["jaxpr"], params[self.in_key], params[self.out_key]
    nonzeros = tuple(type(t) is not ad.Zero for t in tangents)

    def make():
      with self.env(params):
        return ad.jvp_jaxpr(closed, nonzeros)
    jvp_closed, consts, out_nz = _memo(self._jvp_cache, closed, nonzeros, make)
    nz_tangents = [t for t in tangents if type(t) is not ad.Zero]
    new_in = ((self.rep,) * len(consts) + tuple(ins) +
              tuple(e for e, nz in zip(ins, nonzeros) if nz))
    new_out = tuple(outs_e) + tuple(e for e, nz in zip(outs_e, out_nz) if nz)
    outs = self.bind([*consts, *primals, *nz_tangents], params, new_in, new_out,
                     jaxpr=jvp_closed, name=f"jvp({params['name']})")
    n = len(outs_e)
    it = iter(outs[n:])
    out_avals = self.prim.abstract_eval(**params)
    return outs[:n], [next(it) if nz else ad.Zero(ad.tangent_aval(a))
                      for nz, a in zip(out_nz, out_avals)]

  def transpose(self, cts, *args, **params):
    closed, ins, outs_e = params["jaxpr"], params[self.in_key], params[self.out_key]
    undefined = tuple(ad.is_undefined_primal(a) for a in args)
    ct_nonzeros = tuple(type(c) is not ad.Zero for c in cts)

    def make():
      from stagecraft.lax import parallel
      with self.env(params):
        t_closed, t_consts = ad.transpose_jaxpr(closed, undefined, ct_nonzeros)
        res_avals = [self.local_aval(a.aval if ad.is_undefined_primal(a) else
                                     core.get_aval(a), e, params)
                     for a, e, u in zip(args, ins, undefined) if not u]
        ct_avals = [ad.tangent_aval(a) for a, nz in zip(closed.out_avals, ct_nonzeros) if nz]
        ct_rep = [self.replicated_over(e, params)
                  for e, nz in zip(outs_e, ct_nonzeros) if nz]
        lin_rep = [self.replicated_over(e, params)[0] for e, u in zip(ins, undefined) if u]
        nres = len(res_avals)

        def fun(*xs):
          cts_in = [c / size if names else c for c, (names, size) in zip(xs[nres:], ct_rep)]
          outs = core.jaxpr_as_fun(t_closed)(*t_consts, *xs[:nres], *cts_in)
          return [parallel.psum(o, names) if names else o for o, names in zip(outs, lin_rep)]
        jaxpr, consts = pe.trace_to_jaxpr(fun, [*res_avals, *ct_avals])
      return ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), []), list(consts)
    t_closed, consts = _memo(self._transpose_cache, closed, (undefined, ct_nonzeros), make)
    new_in = ((self.rep,) * len(consts) +
              tuple(e for e, u in zip(ins, undefined) if not u) +
              tuple(e for e, nz in zip(outs_e, ct_nonzeros) if nz))
    new_out = tuple(e for e, u in zip(ins, undefined) if u)
    outs = self.bind([*consts, *[a for a, u in zip(args, undefined) if not u],
                      *[c for c in cts if type(c) is not ad.Zero]], params, new_in, new_out,
                     jaxpr=t_closed, name=f"transpose({params['name']})")
    it = iter(outs)
    return [next(it) if u else None for u in undefined]

  def dce(self, used_outs, eqn):
    if not any(used_outs):
      return [False] * len(eqn.invars), None
    params = eqn.params
    closed = params["jaxpr"]

    def make():
      with self.env(params):
        j, used_ins = pe.dce_jaxpr(closed.jaxpr, used_outs)
      return ClosedJaxpr(j, []), used_ins
    new_closed, used_ins = _memo(self._dce_cache, closed, tuple(used_outs), make)
    if all(used_outs) and all(used_ins):
      return used_ins, eqn
    pick = lambda xs, m: tuple(x for x, u in zip(xs, m) if u)
    return used_ins, eqn.replace(
        invars=list(pick(eqn.invars, used_ins)), outvars=list(pick(eqn.outvars, used_outs)),
        params={**params, "jaxpr": new_closed,
                self.in_key: pick(params[self.in_key], used_ins),
                self.out_key: pick(params[self.out_key], used_outs),
                **{k: pick(params[k], used_ins) for k in self.reset}})

  def register(self):
    ad.primitive_jvps[self.prim] = self.jvp
    ad.primitive_transposes[self.prim] = self.transpose
    pe.dce_rules[self.prim] = self.dce


def _pmap_partial_eval(eqn, unknowns):
  params = eqn.params
  closed, in_axes, out_axes = params["jaxpr"], params["in_axes"], params["out_axes"]
  size = params["axis_size"]

  def make():
    with _env(params):
      k, u, nres, out_unknowns = ad.partial_eval_jaxpr(closed.jaxpr, unknowns,
                                                       [False] * len(out_axes))
    return ClosedJaxpr(k, []), ClosedJaxpr(u, []), nres, out_unknowns
  known, unknown, nres, out_unknowns = _memo(_pe_cache, closed, tuple(unknowns), make)
  res_avals = known.out_avals[len(known.out_avals) - nres:]
  res_vars = [Var(unmapped_aval(a, 0, size)) for a in res_avals]
  k_in = tuple(ax for ax, u in zip(in_axes, unknowns) if not u)
  k_out = tuple(ax for ax, u in zip(out_axes, out_unknowns) if not u) + (0,) * nres
  u_in = (0,) * nres + tuple(ax for ax, u in zip(in_axes, unknowns) if u)
  u_out = tuple(ax for ax, u in zip(out_axes, out_unknowns) if u)
  known_eqn = JaxprEqn(
      [v for v, u in zip(eqn.invars, unknowns) if not u],
      [*[v for v, u in zip(eqn.outvars, out_unknowns) if not u], *res_vars], xla_pmap_p,
      {**params, "jaxpr": known, "in_axes": k_in, "out_axes": k_out,
       "donated_invars": (False,) * len(k_in)})
  unknown_eqn = JaxprEqn(
      [*res_vars, *[v for v, u in zip(eqn.invars, unknowns) if u]],
      [v for v, u in zip(eqn.outvars, out_unknowns) if u], xla_pmap_p,
      {**params, "jaxpr": unknown, "in_axes": u_in, "out_axes": u_out,
       "donated_invars": (False,) * len(u_in)})
  return known_eqn, unknown_eqn, out_unknowns


def _pmap_batch(axis_data, args, dims, **params):
  # vmap of pmap: each batched operand's batch axis goes first (its pmap axis moves up one);
  # the body is batched at axis 0 and so are all results.
  closed, in_axes, out_axes = params["jaxpr"], params["in_axes"], params["out_axes"]
  new_args, new_in, body_dims = [], [], []
  for x, d, ax in zip(args, dims, in_axes):
    if d is batching.not_mapped:
      new_args.append(x)
      new_in.append(ax)
      body_dims.append(batching.not_mapped)
    else:
      new_args.append(batching.moveaxis(x, d, 0))
      new_in.append(None if ax is None else ax + 1)
      body_dims.append(0)
  n_out = len(out_axes)
  key = (tuple(body_dims), axis_data)

  def make():
    with _env(params):
      return batching.batch_jaxpr(closed, axis_data, body_dims, [0] * n_out)
  b_closed, consts, _ = _memo(_batch_cache, closed, key, make)
  new_out = tuple(None if ax is None else ax + 1 for ax in out_axes)
  new_in = (None,) * len(consts) + tuple(new_in)
  outs = _bind([*consts, *new_args], params, jaxpr=b_closed, in_axes=new_in,
               out_axes=new_out, donated_invars=(False,) * len(new_in))
  return outs, [0] * n_out


MapRules(xla_pmap_p, "in_axes", "out_axes", None, _env,
         lambda aval, ax, params: mapped_aval(aval, ax),
         lambda ax, params: (((params["axis_name"],), params["axis_size"]) if ax is None
                             else ((), 1)),
         reset=("donated_invars",)).register()
ad.partial_eval_rules[xla_pmap_p] = _pmap_partial_eval
batching.axis_primitive_batchers[xla_pmap_p] = _pmap_batch


# ---------------------------------------------------------------------------
# The device mesh of a module


def _subjaxprs(eqn) -> list[Jaxpr]:
  out = []
  for v in eqn.params.values():
    for x in (v if isinstance(v, (tuple, list)) else (v,)):
      if isinstance(x, ClosedJaxpr):
        out.append(x.jaxpr)
      elif isinstance(x, Jaxpr):
        out.append(x)
  return out


def mesh_chain(jaxpr: Jaxpr) -> list[tuple[Any, int, Any]]:
  """The mapped axes `(axis_name, axis_size, devices)` of the pmaps in `jaxpr`, outermost
  first (a pmap nested in a pmap's body adds an axis): the mesh its module needs, or [].

  Raises:
    ValueError: if two pmaps at the same depth have different sizes.
  """
  found: list[tuple[Any, int, Any]] = []

  def visit(j: Jaxpr, depth: int):
    for eqn in j.eqns:
      if eqn.primitive is xla_pmap_p:
        p = eqn.params
        if len(found) <= depth:
          found.append((p["axis_name"], p["axis_size"], p["devices"]))
        elif found[depth][1] != p["axis_size"]:
          raise ValueError(
              f"pmap: one program maps axes of sizes {found[depth][1]} ('{found[depth][0]}') "
              f"and {p['axis_size']} ('{p['axis_name']}') at the same nesting depth; pmaps "
              f"staged into one jit must use the same devices. Call them from separate jits.")
        visit(p["jaxpr"].jaxpr, depth + 1)
      else:
        for sub in _subjaxprs(eqn):
          visit(sub, depth)
  visit(jaxpr, 0)
  return found


def _mesh_names(chain) -> list[str]:
  names, used = [], set()
  for k, (name, _, _) in enumerate(chain):
    s = name if isinstance(name, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) \
        else f"axis{k}"
    if s in used:
      s = f"{s}_{k}"
    used.add(s)
    names.append(s)
  return names


class _Unbound:
  """An axis-environment entry for a mesh axis no pmap has bound yet (matches no name)."""
  __slots__ = ("depth",)

  def __init__(self, depth):
    self.depth = depth

  def __repr__(self):
    return f"<mesh axis {self.depth}>"


def _axes_desc(chain) -> str:
  return ", ".join(f"{'unnamed' if a is None else repr(a)} of size {s}" for a, s, _ in chain)


def chain_devices(chain, devices=None) -> list:
  """The devices a module over `chain` runs on: `devices` (the outermost pmap's) or the first
  local devices.

  Raises:
    ValueError: when more devices are needed than exist, or `devices` has the wrong length.
  """
  n = math.prod(s for _, s, _ in chain)
  devices = devices if devices is not None else chain[0][2]
  if devices is not None:
    if len(devices) != n:
      raise ValueError(f"pmap: the mapped axes ({_axes_desc(chain)}) need {n} "
                       f"devices, but `devices` has {len(devices)}. Pass as many devices "
                       f"as the mapped axis size (nested pmaps: the product of their sizes).")
    return list(devices)
  if client.process_count() > 1:   # a distributed run: every process's devices
    glob = sorted(client.devices(), key=lambda d: (d.process_index, d.id))
    if n > len(glob):
      raise ValueError(f"pmap: the mapped axes ({_axes_desc(chain)}) need {n} "
                       f"devices, but the distributed run has {len(glob)}.")
    return glob[:n]
  local = client.local_devices()
  if n > len(local):
    raise ValueError(
        f"compiling computation that requires {n} logical devices, but only {len(local)} XLA "
        f"devices are available (num_replicas=1, num_partitions={n}): the mapped axes "
        f"({_axes_desc(chain)}) need one device per position. Map over at most "
        f"{len(local)} positions, or start Python with "
        f"XLA_FLAGS=--xla_force_host_platform_device_count={n} for more CPU devices.")
  return local[:n]


def _sdy_sharding(ndim: int, dim: int | None, axis: str | None, *, attr: bool) -> str:
  dims = ", ".join(f'{{"{axis}"}}' if d == dim else "{}" for d in range(ndim))
  body = f"<@mesh, [{dims}]>"
  return f"#sdy.sharding{body}" if attr else body


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


def emit_manual_computation(ctx, args: Sequence[str], in_shardings: Sequence[str],
                            out_shardings: Sequence[str], manual_axes: Sequence[str],
                            local_in: Sequence[ShapedArray], local_out: Sequence[ShapedArray],
                            body: Callable[[list[str]], list[str]]) -> list[str]:
  """Emits `sdy.manual_computation(args)` with the given Shardy shardings (`<@mesh, ...>`)
  manual over `manual_axes`; `body(block_args)` emits the per-device region (its arguments
  have the avals `local_in`) and returns its results (avals `local_out`)."""
  fb = ctx.fb
  saved_lines, saved_consts = fb.lines, fb.consts
  fb.lines, fb.consts = [], {}
  try:
    block_args = [fb.fresh() for _ in local_in]
    outs = body(block_args)
    lines = fb.lines
  finally:
    fb.lines, fb.consts = saved_lines, saved_consts
  n = len(local_out)
  base = fb.fresh()
  lhs = f"{base} = " if n == 1 else (f"{base}:{n} = " if n else "")
  manual = ", ".join(f'"{a}"' for a in manual_axes)
  blk = ", ".join(f"{b}: {lowering.ir_type(a)}" for b, a in zip(block_args, local_in))
  ret_t = ", ".join(lowering.ir_type(a) for a in local_out)
  ret = f"  sdy.return {', '.join(outs)} : {ret_t}" if n else "  sdy.return"
  in_t = ", ".join(lowering.ir_type(a) for a in ctx.avals_in)
  out_t = ", ".join(lowering.ir_type(a) for a in ctx.avals_out)
  fb.emit(f"{lhs}sdy.manual_computation({', '.join(args)}) "
          f"in_shardings=[{', '.join(in_shardings)}] "
          f"out_shardings=[{', '.join(out_shardings)}] manual_axes={{{manual}}} ({blk}) {{")
  fb.lines.extend("  " + ln for ln in lines)
  fb.emit(ret)
  fb.emit(f"}} : ({in_t}) -> ({out_t})")
  if n == 1:
    return [base]
  return [f"{base}#{i}" for i in range(n)]


def _lower_manual(ctx, args, jaxpr, axis_name, axis_size, in_axes, out_axes):
  """The pmap as an `sdy.manual_computation` over all mesh axes, split on mesh axis 0."""
  fb, module = ctx.fb, ctx.module
  ax0 = module.mesh[0][0]
  local_in = [unmapped_aval(a, ax, 1) for a, ax in zip(jaxpr.in_avals, in_axes)]
  local_out = [unmapped_aval(a, ax, 1) for a, ax in zip(jaxpr.out_avals, out_axes)]
  in_sh = [_sdy_sharding(len(a.shape), ax, ax0, attr=False)
           for a, ax in zip(ctx.avals_in, in_axes)]
  out_sh = [_sdy_sharding(len(a.shape), ax, ax0, attr=False)
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
  return emit_manual_computation(ctx, args, in_sh, out_sh, [a for a, _ in module.mesh],
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
  from stagecraft.lax import parallel
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
      results += parallel._all_gather_lowering(sub, o, axis_name=axis_name, axis=ax,
                                               tiled=False, axis_size=axis_size)
  finally:
    module.axis_env = saved_env
  return results


lowering.register_lowering(xla_pmap_p, _pmap_lowering)


def lower_spmd_module(name: str, jaxpr: Jaxpr, chain, *, arg_attrs=None, result_attrs=None,
                      donated=None) -> str:
  """Lowers `jaxpr` (which contains pmaps; `chain = mesh_chain(jaxpr)`) to an SPMD module
  over the chain's mesh. Arguments and results without attributes are replicated."""
  names = _mesh_names(chain)
  n = math.prod(s for _, s, _ in chain)
  module = lowering.ModuleContext(name, axis_env=[(_Unbound(k), s)
                                                  for k, (_, s, _) in enumerate(chain)],
                                  num_partitions=n)
  module.mesh = [(m, s) for m, (_, s, _) in zip(names, chain)]
  module.manual_depth = None
  avals_in = [v.aval for v in (*jaxpr.constvars, *jaxpr.invars)]
  if arg_attrs is None:
    arg_attrs = [f"sdy.sharding = {_sdy_sharding(len(a.shape), None, None, attr=True)}"
                 for a in avals_in]
  if result_attrs is None:
    result_attrs = [f"sdy.sharding = {_sdy_sharding(len(v.aval.shape), None, None, attr=True)}"
                    for v in jaxpr.outvars]
  return lowering.lower_jaxpr_to_module(name, jaxpr, donated=donated, arg_attrs=arg_attrs,
                                        result_attrs=result_attrs, module=module)


# ---------------------------------------------------------------------------
# Executables

_COLLECTIVE_HLO = re.compile(r"\b(all-reduce|all-gather|collective-permute|all-to-all|"
                             r"reduce-scatter|collective-broadcast)(-start)?\(")
_launch_lock = threading.Lock()
_last_collective: list = [None]   # one result buffer per device of the last collective launch


def _await_previous_collective():
  prev = _last_collective[0]
  if prev is not None:
    for b in prev:
      b.block_until_ready()
    _last_collective[0] = None


@functools.lru_cache(maxsize=256)
def _piece_indices(sharding: NamedSharding, shape: tuple) -> list:
  m = sharding.devices_indices_map(shape)
  return [m[d] for d in sharding.mesh.devices.flat]


def shard_arg(x: Any, aval: ShapedArray, sharding: NamedSharding) -> Any:
  """The runtime's multi-device array holding `x` laid out by `sharding` (no copy when `x`
  already is)."""
  if type(x) is Array:
    if x._sharding is not None and (x._sharding is sharding or x._sharding == sharding):
      return x._check_buf()
    v = x._value
  elif isinstance(x, core.Tracer):
    raise core.escaped_tracer_error(x)
  else:
    v = np.asarray(x, dtype=aval.dtype)
  if v.dtype != aval.dtype:
    v = v.astype(aval.dtype)
  devs = list(sharding.mesh.devices.flat)
  if _spans_processes(sharding):
    # NB: `v` is either the global value (jit: as in JAX, a host value passed for a sharding
    # that spans processes is the whole array) or this process's block of it (pmap: its
    # local devices' rows). The two coincide when the process holds every block.
    return _shard_local(v, aval, sharding, client.process_index(),
                        local=tuple(v.shape) != tuple(aval.shape))
  if sharding.is_fully_replicated:
    pieces = [v] * len(devs)
  else:
    pieces = [v[idx] for idx in _piece_indices(sharding, aval.shape)]
  return xc.batched_device_put(aval, sharding._runtime, pieces, devs, True, False,
                               enable_x64=True)


@functools.lru_cache(maxsize=256)
def _spans_processes(sharding: NamedSharding) -> bool:
  """Whether some of `sharding`'s devices belong to other processes (checked once)."""
  me = client.process_index()
  return any(d.process_index != me for d in sharding.mesh.devices.flat)


def _local_blocks(sharding: NamedSharding, shape: tuple, me: int) -> list:
  """Per dimension of an array of `shape`: {(start, stop) of a block held by a device of
  process `me`: its offset in the process's local data}, the local data being the process's
  distinct blocks in global order, concatenated (they need not be contiguous globally)."""
  m = sharding.devices_indices_map(shape)
  local = [m[d] for d in sharding.mesh.devices.flat if d.process_index == me]
  out = []
  for k, n in enumerate(shape):
    spans = sorted({local_idx[k].indices(n)[:2] for local_idx in local})
    offsets, o = {}, 0
    for a, b in spans:
      offsets[(a, b)] = o
      o += b - a
    out.append(offsets)
  return out


def _shard_local(v: np.ndarray, aval: ShapedArray, sharding: NamedSharding, me: int, *,
                 local: bool = True):
  """A distributed run: each device of process `me` gets its piece of the global value.

  `local=True`: `v` is this process's part of the global value: per dimension, the distinct
  blocks its devices hold, in global order, concatenated (all of a replicated dimension).
  `local=False`: `v` is the whole global value.

  Raises:
    ValueError: when `v` does not have the shape this expects.
  """
  m = sharding.devices_indices_map(aval.shape)
  devs = [d for d in sharding.mesh.devices.flat if d.process_index == me]
  if local:
    blocks = _local_blocks(sharding, aval.shape, me)
    want = tuple(sum(b - a for a, b in offs) for offs in blocks)
  else:
    want = tuple(aval.shape)
  if tuple(v.shape) != want:
    what = ("this process's block of the global value" if local else "the global value")
    raise ValueError(f"{what.capitalize()} laid out by {sharding} with global shape "
                     f"{tuple(aval.shape)} must have shape {want}, got {tuple(v.shape)}.")
  bufs = []
  for d in devs:
    index = m[d]
    if local:
      sl = []
      for k, (s, n) in enumerate(zip(index, aval.shape)):
        a, b = s.indices(n)[:2]
        o = blocks[k][(a, b)]
        sl.append(slice(o, o + b - a))
      index = tuple(sl)
    piece = np.ascontiguousarray(v[index])
    bufs.append(xc.batched_device_put(aval.update(shape=piece.shape),
                                      client.single_device_sharding(d), [piece], [d], True,
                                      False, enable_x64=True))
  return xc.ArrayImpl(aval, sharding._runtime, bufs, True, True)


_interned: dict = {}


def intern_sharding(sh: NamedSharding) -> NamedSharding:
  """One NamedSharding object per layout, so a result fed back into the program that made
  it is recognised by identity."""
  # NB: keyed on the spec as written too, so P("a") and P("a", None) keep their own repr.
  return _interned.setdefault((sh, tuple(sh.spec), sh.mesh.axis_names), sh)


class SpmdExecutable:
  """A program over several devices: global values in (each laid out by its sharding, split
  by the runtime), global values out (`Array`s split over the devices, or one copy for a
  replicated result)."""
  __slots__ = ("exe", "devices", "in_avals", "out_avals", "in_shardings", "out_shardings",
               "collective", "text", "donated", "_out_device", "_handlers", "_replicated")

  def __init__(self, exe, devices, in_avals, out_avals, in_shardings, out_shardings, text,
               donated=(), keep_replicated: bool = False):
    self.exe = exe
    self.devices = list(devices)
    self.in_avals = list(in_avals)
    self.out_avals = list(out_avals)
    self.in_shardings = [intern_sharding(s) for s in in_shardings]
    self.out_shardings = [intern_sharding(s) for s in out_shardings]
    self.text = text
    self.donated = tuple(donated)
    try:
      hlo = "\n".join(m.to_string() for m in exe.hlo_modules())
    except Exception:   # pragma: no cover - a runtime without hlo_modules: be safe
      hlo = "all-reduce("
    self.collective = bool(_COLLECTIVE_HLO.search(hlo))
    d0 = self.devices[0]
    self._out_device = None if d0 == client.default_device() else d0
    # The runtime builds each split result's multi-device array itself; a replicated
    # result keeps the first device's copy (pmap), or every copy (keep_replicated: a mesh
    # program's results stay on the mesh, as its next call wants them).
    self._replicated = [s.is_fully_replicated and not keep_replicated
                        for s in self.out_shardings]
    self._handlers = [_first_piece if rep else
                      xc._xla.array_result_handler(av, sh._runtime, True, True)
                      for av, sh, rep in zip(self.out_avals, self.out_shardings,
                                             self._replicated)]
    dispatch.placement_used[0] = True

  def call(self, args: Sequence[Any]) -> list[Array]:
    bufs = [shard_arg(x, av, sh)
            for x, av, sh in zip(args, self.in_avals, self.in_shardings)]
    if self.collective:
      with _launch_lock:
        _await_previous_collective()
        results = self._execute(bufs, args)
        outs = results.consume_with_handlers(self._handlers)
        if outs:
          first = outs[0]
          _last_collective[0] = [first] if self._replicated[0] else first._arrays
        else:
          for b in bufs:
            b.block_until_ready()
    else:
      outs = self._execute(bufs, args).consume_with_handlers(self._handlers)
    if self.donated:
      for i in self.donated:
        x = args[i]
        if type(x) is Array and x._buf is not None and x._buf.is_deleted():
          x._buf = None
    dev = self._out_device
    return [Array(o, av, dev) if rep else Array(o, av, None, sh)
            for o, av, sh, rep in zip(outs, self.out_avals, self.out_shardings,
                                      self._replicated)]

  def _execute(self, bufs, args):
    try:
      return self.exe.execute_sharded(bufs)
    except TypeError:
      dispatch._raise_if_donated(args)
      raise


def _first_piece(pieces):
  return pieces[0]


def replicated_program(exe, devices, in_avals, out_avals, text, donated=()) -> SpmdExecutable:
  """An SPMD program whose arguments and results are all replicated over `devices` (a jit
  containing pmaps): each argument goes whole to every device, one copy of each result
  comes back."""
  mesh = Mesh(np.array(list(devices), dtype=object), ("devices",))
  rep = NamedSharding(mesh, PartitionSpec())
  return SpmdExecutable(exe, devices, in_avals, out_avals, [rep] * len(in_avals),
                        [rep] * len(out_avals), text, donated)


def replicated_executable(name: str, jaxpr: Jaxpr, chain) -> SpmdExecutable:
  """Lowers and compiles `jaxpr` (containing pmaps) as a replicated SPMD program."""
  devices = chain_devices(chain)
  text = lower_spmd_module(name, jaxpr, chain)
  exe = dispatch.compile_module(text, devices, num_partitions=len(devices))
  in_avals = [v.aval for v in (*jaxpr.constvars, *jaxpr.invars)]
  return replicated_program(exe, devices, in_avals, [v.aval for v in jaxpr.outvars], text)


def _mesh_for(chain, devices) -> Mesh:
  shape = [s for _, s, _ in chain]
  return Mesh(np.array(devices, dtype=object).reshape(shape), _mesh_names(chain))


def _sharding(mesh: Mesh, ndim: int, axis: int | None) -> NamedSharding:
  spec = [None] * ndim
  if axis is not None:
    spec[axis] = mesh.axis_names[0]
  return NamedSharding(mesh, PartitionSpec(*spec))


_pmap_executables: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _compile_pmap(in_avals, params) -> SpmdExecutable:
  invars = [Var(a) for a in in_avals]
  outvars = [Var(a) for a in _abstract_eval(*in_avals, **params)]
  jaxpr = Jaxpr([], invars, outvars, [JaxprEqn(invars, outvars, xla_pmap_p, params)])
  chain = mesh_chain(jaxpr)
  devices = chain_devices(chain, params["devices"])
  mesh = _mesh_for(chain, devices)
  in_sh = [_sharding(mesh, len(a.shape), ax) for a, ax in zip(in_avals, params["in_axes"])]
  out_sh = [_sharding(mesh, len(v.aval.shape), ax)
            for v, ax in zip(outvars, params["out_axes"])]
  ax0 = mesh.axis_names[0]
  arg_attrs = [f"sdy.sharding = {_sdy_sharding(len(a.shape), ax, ax0, attr=True)}"
               for a, ax in zip(in_avals, params["in_axes"])]
  res_attrs = [f"sdy.sharding = {_sdy_sharding(len(v.aval.shape), ax, ax0, attr=True)}"
               for v, ax in zip(outvars, params["out_axes"])]
  text = lower_spmd_module(f"pmap_{params['name']}", jaxpr, chain, arg_attrs=arg_attrs,
                           result_attrs=res_attrs, donated=params["donated_invars"])
  exe = dispatch.compile_module(text, devices, num_partitions=len(devices))
  donated = [i for i, d in enumerate(params["donated_invars"]) if d]
  return SpmdExecutable(exe, devices, in_avals, [v.aval for v in outvars], in_sh, out_sh,
                        text, donated)


def _executable_for(in_avals: tuple, params: dict) -> SpmdExecutable:
  """The compiled program of a pmap equation (cached per body jaxpr, avals and params)."""
  key = (in_avals, *[(k, v) for k, v in params.items() if k != "jaxpr"])
  table = _pmap_executables.setdefault(params["jaxpr"], {})
  ex = table.get(key)
  if ex is None:
    ex = table[key] = _compile_pmap(in_avals, params)
  return ex


def _pmap_impl(*args, **params):
  in_avals = tuple(x.aval if type(x) is Array else core.get_aval(x) for x in args)
  return _executable_for(in_avals, params).call(args)


xla_pmap_p.def_impl(_pmap_impl)


# ---------------------------------------------------------------------------
# Device-invariance of out_axes=None results


_INVARIANT_COLLECTIVES = ("psum", "pmax", "pmin", "all_gather")


def _varying_outputs(jaxpr: Jaxpr, varying_in: Sequence[bool], axis_name) -> list[bool]:
  """Which outputs may differ between the devices of `axis_name` (a conservative dataflow
  over the body: mapped inputs and axis_index vary; a psum/pmax/pmin/all_gather over the
  axis makes its result the same everywhere)."""
  varying = {v for v, m in zip(jaxpr.invars, varying_in) if m}
  for eqn in jaxpr.eqns:
    name = eqn.primitive.name
    if name in _INVARIANT_COLLECTIVES:
      axes = eqn.params.get("axes", eqn.params.get("axis_name"))
      axes = axes if isinstance(axes, (tuple, list)) else (axes,)
      if axis_name in axes and eqn.params.get("axis_index_groups") is None:
        continue
    if name == "axis_index" or any(isinstance(v, Var) and v in varying for v in eqn.invars):
      varying.update(eqn.outvars)
  return [isinstance(v, Var) and v in varying for v in jaxpr.outvars]


# ---------------------------------------------------------------------------
# The user-facing pmap


def _flatten(x):
  from stagecraft import api
  return api._flatten(x)


def pmap(fun: Callable, axis_name: Any = None, *, in_axes: Any = 0, out_axes: Any = 0,
         static_broadcasted_argnums: int | Sequence[int] = (), devices: Sequence[Any] | None =
         None, backend: str | None = None, axis_size: int | None = None,
         donate_argnums: int | Sequence[int] = ()) -> Callable:
  """Maps `fun` over an axis of its arguments with one device per position, as JAX's `pmap`:
  the body is traced once, compiled once per signature as one SPMD program over the
  devices, and its collectives (`lax.psum(x, axis_name)`, ...) communicate across them.

  Args:
    fun: a function of arrays (pytrees) returning arrays (pytrees).
    axis_name: a name for the mapped axis, for collectives.
    in_axes: an int, None, or a pytree prefix of the positional arguments: the axis of each
      argument to split across devices (None: every device gets the whole argument).
      Keyword arguments are split on axis 0.
    out_axes: an int, None, or a prefix of the output: where the device axis goes in each
      result (None: the result must be the same on every device, e.g. a psum, and one copy
      is returned).
    static_broadcasted_argnums: positions of hashable arguments passed to `fun` as Python
      values (a new value retraces).
    devices: the devices to run on (default: the first local devices); nested pmaps use
      the product of their sizes.
    backend: a platform name ('cpu'); its devices are used.
    axis_size: the mapped size when no argument is mapped.
    donate_argnums: arguments whose buffers the program may reuse for its results.

  Returns:
    The mapped function. Mapped results are Arrays split over the devices (`.sharding`,
    `.addressable_shards`); passing them to the same pmap again moves no data through the
    host; indexing or NumPy conversion gathers them.

  Raises:
    ValueError: inconsistent mapped sizes (naming each argument), more positions than
      devices (naming both counts), axes out of range, an out_axes=None result that varies
      across devices.
    TypeError: non-hashable static arguments, or arguments that are not arrays.
    NameError: a collective naming an axis that no enclosing pmap/vmap binds.

  Under `stagecraft.disable_jit()` the map runs eagerly, one primitive at a time over all
  positions, with collectives computed across positions (JAX's MapTrace, which evaluates each
  primitive with vmap over the mapped axis); results match the compiled path.
  """
  from stagecraft import api
  if not callable(fun):
    raise TypeError(f"pmap expects a callable, got {fun!r}.")
  static = ((static_broadcasted_argnums,) if isinstance(static_broadcasted_argnums, int)
            else tuple(static_broadcasted_argnums))
  donate = (donate_argnums,) if isinstance(donate_argnums, int) else tuple(donate_argnums)
  if isinstance(in_axes, list):
    in_axes = tuple(in_axes)
  if backend is not None and devices is None:
    devices = client.devices(backend)
  devices = tuple(devices) if devices is not None else None
  name = api._fun_name(fun)
  cache: dict = {}
  fast: dict = {}   # (treedef, config, avals) -> (executable, consts, out_tree) at top level

  def prepare(args, kwargs):
    nargs = len(args)
    st = tuple(i % nargs if nargs else i for i in static)
    for i in st:
      if i >= nargs:
        raise ValueError(f"pmap: static_broadcasted_argnums {static} refers to argument {i}, "
                         f"but {name} was called with {nargs} positional arguments.")
    static_vals = tuple(args[i] for i in st)
    try:
      hash(static_vals)
    except TypeError as e:
      raise TypeError(f"pmap: static_broadcasted_argnums must be hashable; argument "
                      f"{st} gave: {e}") from None
    dyn = tuple(a for i, a in enumerate(args) if i not in st)
    dyn_axes = in_axes
    if isinstance(in_axes, tuple):
      if len(in_axes) != nargs:
        raise ValueError(f"pmap in_axes must be an int, None, or a tuple of entries "
                         f"corresponding to the positional arguments passed to the function, "
                         f"but got len(in_axes)={len(in_axes)}, len(args)={nargs}")
      dyn_axes = tuple(a for i, a in enumerate(in_axes) if i not in st)
    return st, static_vals, dyn, dyn_axes

  def call_fun(st, static_vals, dyn, kwargs):
    it, sv = iter(dyn), iter(static_vals)
    full = [next(sv) if i in st else next(it) for i in range(len(dyn) + len(st))]
    return fun(*full, **kwargs)

  @functools.wraps(fun)
  def pmap_f(*args, **kwargs):
    # Fast path: a top-level call of a signature run before, every leaf an Array.
    if not kwargs and not static and core._state.trace is core.eval_trace and \
        not config.disable_jit:
      leaves, treedef = _flatten(args)
      try:
        key = (treedef, config.state_key, *[x.aval for x in leaves])
      except AttributeError:
        key = None
      hit = fast.get(key) if key is not None else None
      if hit is not None:
        ex, consts, out_tree = hit
        return optree.tree_unflatten(out_tree, ex.call([*consts, *leaves]))
    st, static_vals, dyn, dyn_axes = prepare(args, kwargs)
    if config.disable_jit:
      return _map_eagerly(call_fun, st, static_vals, dyn, kwargs, dyn_axes)
    leaves, in_tree = _flatten((dyn, kwargs))
    dyn_tree = _flatten(dyn)[1]
    axes = api._flatten_axes("in_axes", dyn_axes, dyn, dyn_tree)
    axes += [0] * (len(leaves) - len(axes))
    paths = [tree_util.keystr(k) for k, _ in tree_util.tree_flatten_with_path(dyn)[0]]
    paths += [tree_util.keystr(k) for k, _ in tree_util.tree_flatten_with_path(kwargs)[0]]
    avals = []
    for x, path in zip(leaves, paths):
      try:
        avals.append(x.aval if type(x) is Array else core.get_aval(x))
      except TypeError:
        raise TypeError(f"pmap: the argument at {api._describe_arg(path)} of {name} is not "
                        f"an array (got {type(x).__name__}); pass arrays, or mark it with "
                        f"static_broadcasted_argnums.") from None
    norm_axes, size = api._mapped_axes(
        "pmap", avals, axes, paths, axis_size,
        "pmap requires at least one argument with a mapped axis (in_axes not None), or "
        "axis_size.", aval_of=lambda a: a)
    nproc = client.process_count() if devices is None else 1
    if nproc > 1 and axis_size is None:
      # A distributed run: each process passes its local part; the axis spans them all.
      size *= nproc
      avals = [a if ax is None else a.update(shape=a.shape[:ax] + (size,) + a.shape[ax + 1:])
               for a, ax in zip(avals, norm_axes)]
    if devices is not None and core._state.trace is core.eval_trace and \
        len(devices) < size:
      raise ValueError(f"pmap: the mapped axis has size {size} but only {len(devices)} "
                       f"devices were given ({list(devices)}).")
    key = (in_tree, static_vals, tuple(norm_axes), size, config.state_key, *avals)
    entry = cache.get(key)
    if entry is None:
      entry = _trace(call_fun, st, static_vals, in_tree, avals, norm_axes, size)
      if entry[4]:   # NB: a body closing over tracers is traced again each call
        cache[key] = entry
    closed, consts, out_tree, varying, _ = entry
    o_axes = api._flatten_axes("out_axes", out_axes, optree.tree_unflatten(
        out_tree, [0] * out_tree.num_leaves), out_tree)
    for k, (ax, var) in enumerate(zip(o_axes, varying)):
      if ax is None and var:
        path = tree_util.keystr(tree_util.tree_flatten_with_path(optree.tree_unflatten(
            out_tree, list(range(out_tree.num_leaves))))[0][k][0])
        raise ValueError(f"pmap out_axes=None requires the output{(' at ' + path) if path else ''}"
                         f" to be the same on every device, but it depends on mapped inputs "
                         f"(axis_name={axis_name!r}). Reduce it over the axis first (e.g. "
                         f"lax.psum / lax.pmean), or give it an out_axes.")
    o_axes_n = []
    for ax, a in zip(o_axes, closed.out_avals):
      if ax is None:
        o_axes_n.append(None)
        continue
      nd = len(a.shape) + 1
      if not -nd <= ax < nd:
        raise ValueError(f"pmap out_axes specification {ax} is out of range for an output of "
                         f"rank {nd} (including the mapped axis).")
      o_axes_n.append(ax % nd)
    n_dyn = len(leaves)
    don = [False] * n_dyn
    if donate:
      dyn_pos = [i for i in range(len(args)) if i not in st]
      counts = [len(_flatten(a)[0]) for a in dyn]
      start = 0
      for pos, c in zip(dyn_pos, counts):
        if pos in donate:
          don[start:start + c] = [True] * c
        start += c
    params = dict(jaxpr=closed, axis_name=axis_name, axis_size=size,
                  in_axes=(None,) * len(consts) + tuple(norm_axes), out_axes=tuple(o_axes_n),
                  devices=devices, name=name,
                  donated_invars=(False,) * len(consts) + tuple(don))
    if core._state.trace is not core.eval_trace:
      return optree.tree_unflatten(out_tree, xla_pmap_p.bind(*consts, *leaves, **params))
    in_avals = tuple(core.get_aval(c) for c in consts) + tuple(avals)
    ex = _executable_for(in_avals, params)
    outs = ex.call([*consts, *leaves])
    if not kwargs and not static and entry[4] and all(type(x) is Array for x in leaves):
      fast[(_flatten(args)[1], config.state_key, *avals)] = (ex, consts, out_tree)
    return optree.tree_unflatten(out_tree, outs)

  def _trace(call_fun, st, static_vals, in_tree, avals, axes, size):
    local = [mapped_aval(a, ax) for a, ax in zip(avals, axes)]
    store = []

    def flat(*xs):
      d, kw = optree.tree_unflatten(in_tree, xs)
      out = call_fun(st, static_vals, d, kw)
      out_leaves, out_tree = _flatten(out)
      api._check_out_leaves(out_leaves, out_tree, name, "pmap")
      store[:] = [out_tree]
      return out_leaves

    with batching.extend_axis_env(axis_name, size):
      jaxpr, consts = pe.trace_to_jaxpr(flat, local)
    closed = ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), [])
    varying = _varying_outputs(closed.jaxpr, [False] * len(consts) +
                               [ax is not None for ax in axes], axis_name)
    cacheable = not any(isinstance(c, core.Tracer) for c in consts)
    return closed, consts, store[0], varying, cacheable

  def _map_eagerly(call_fun, st, static_vals, dyn, kwargs, dyn_axes):
    leaves = _flatten((dyn, kwargs))[0]
    mapped = api._flatten_axes("in_axes", dyn_axes, dyn, _flatten(dyn)[1])
    size = axis_size
    for x, ax in zip(leaves, mapped + [0] * (len(leaves) - len(mapped))):
      if ax is not None and size is None:
        size = np.shape(x)[ax]
    n = len(devices) if devices is not None else client.local_device_count()
    if size is not None and size > n:
      raise ValueError(
          f"compiling computation that requires {size} logical devices, but only {n} XLA "
          f"devices are available (num_replicas=1, num_partitions={size}).")
    body = lambda d, kw: call_fun(st, static_vals, d, kw)
    try:
      return api.vmap(body, in_axes=(dyn_axes, 0), out_axes=out_axes, axis_name=axis_name,
                      axis_size=axis_size)(dyn, kwargs)
    except ValueError as e:
      if "out_axes is None" not in str(e):
        raise
      raise ValueError(f"pmap out_axes=None requires the output to be the same on every "
                       f"device, but it depends on mapped inputs (axis_name={axis_name!r}). "
                       f"Reduce it over the axis first (e.g. lax.psum / lax.pmean), or give "
                       f"it an out_axes.") from None

  def lower(*args, **kwargs):
    """`Lowered` for these arguments: the jit of this pmap (one SPMD program whose
    arguments and results are replicated; `as_text()`, `compile()`)."""
    def call(*a, **k):   # NB: not pmap_f itself, whose `lower` jit would copy over its own
      return pmap_f(*a, **k)
    call.__name__ = f"pmap_{name}"
    return api.jit(call).lower(*args, **kwargs)

  pmap_f.lower = lower
  pmap_f._pmap_fun = fun
  return pmap_f
