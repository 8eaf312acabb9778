"""The map/SPMD transformation rules shared by pmap and shard_map, the replication analysis
("may this value differ between the devices of a mapped axis"), and the lowering of programs
over the devices of mapped axes (`sdy.mesh`, `sdy.manual_computation`).

The map primitives themselves (`xla_pmap`, `shard_map`) and all their rules live in
`stagecraft.lax.spmd`; this module holds what both use and what the runtime needs to lower a
program containing them, keyed by `Primitive` through registries so it imports no primitive.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import re
import weakref
from typing import Any, Callable, Sequence

from stagecraft import core
from stagecraft.core import ClosedJaxpr, Jaxpr, JaxprEqn, ShapedArray, Var
from stagecraft.interpreters import ad, batching, lowering
from stagecraft.interpreters import partial_eval as pe

__all__ = ["mapped_aval", "unmapped_aval", "MapRules", "device_maps", "mesh_chain",
           "replication_rules", "varying_axes", "call_replication_rule", "loop_fixpoint",
           "emit_manual_computation", "lower_spmd_module", "sdy_sharding", "mesh_names",
           "UnboundAxis", "describe_axes", "vma_rules", "checking_vma", "strict_vma",
           "vma_type", "ordered_axes"]

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
# Rules shared by the map primitives over devices

_memo = core.memo_on_jaxpr


def _ct_spec(e):
  """The spec of a cotangent laid out as a value of spec `e`: unreduced and reduced axes
  swapped (JAX's `to_ct_spec`); other entries (pmap's axes) as they are."""
  f = getattr(e, "to_ct_spec", None)
  return f() if f is not None else e


def _derived_name(params: dict, what: str) -> dict:
  # NB: the `name` param of a derived call, where the primitive has one (xla_pmap's)
  return {"name": f"{what}({params['name']})"} if "name" in params else {}


class MapRules:
  """The jvp, transpose and DCE rules shared by the map primitives over devices (pmap,
  shard_map). Each describes operands and results by a per-position entry under `in_key` /
  `out_key` (pmap: an axis or None; shard_map: a PartitionSpec); `rep` is the entry of a
  value every device gets whole; `env(params)` binds the body's axes; `local_aval(aval,
  entry, params)` is a device's piece; `replicated_over(entry, params)` gives the axis names
  a value with that entry is the same along, and their total size; `global_aval(aval, entry,
  params)` assembles a device's piece; `residual_entry(params)` is how partial evaluation's
  residuals (per-device values) are laid out; `batched_entry(entry)` is an entry with a new
  unsplit leading (batch) axis; `reset` names per-operand params rebuilt as all-False
  (donation) when operands change. `psum(x, axis_names)` and `reshape(x, shape)` are the
  primitives' wrappers the derived bodies use.

  Transposition of an untyped body (`typed(params)` False): psum's transpose is psum, so the
  cotangent of a result replicated over some axes is divided by their size before it enters
  the transposed body, and the cotangent of an operand replicated over some axes is psum'med
  over them inside it. A typed body (JAX's varying manual axes) sums its own cotangents."""

  def __init__(self, prim, in_key, out_key, *, rep, env, local_aval, global_aval,
               replicated_over, residual_entry, batched_entry, psum, reshape, reset=(),
               typed=lambda params: False):
    self.prim, self.in_key, self.out_key, self.rep = prim, in_key, out_key, rep
    self.env, self.local_aval, self.global_aval = env, local_aval, global_aval
    self.replicated_over, self.residual_entry = replicated_over, residual_entry
    self.batched_entry, self.psum, self.reshape = batched_entry, psum, reshape
    self.reset = tuple(reset)
    # typed(params): the body has varying manual axes in its types (a check_vma shard_map):
    # its own transposes sum cotangents (pvary^T = psum_invariant, psum_invariant^T =
    # pvary, as JAX's), so the map neither divides nor sums them at its boundary.
    self.typed = typed
    self._jvp_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
    self._transpose_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
    self._dce_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
    self._pe_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
    self._batch_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

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
    jvp_closed, consts, out_nz = _memo(self._jvp_cache, closed, (nonzeros, ad.jvp_mode()), make)
    nz_tangents = [t for t in tangents if type(t) is not ad.Zero]
    new_in = ((self.rep,) * len(consts) + tuple(ins) +
              tuple(e for e, nz in zip(ins, nonzeros) if nz))
    new_out = tuple(outs_e) + tuple(e for e, nz in zip(outs_e, out_nz) if nz)
    outs = self.bind([*consts, *primals, *nz_tangents], params, new_in, new_out,
                     jaxpr=jvp_closed, **_derived_name(params, "jvp"))
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
      with self.env(params):
        t_closed, t_consts = ad.transpose_jaxpr(closed, undefined, ct_nonzeros)
        res_avals = [self.local_aval(a.aval if ad.is_undefined_primal(a) else
                                     core.get_aval(a), e, params)
                     for a, e, u in zip(args, ins, undefined) if not u]
        ct_avals = [ad.ct_aval(a)
                    for a, nz in zip(closed.out_avals, ct_nonzeros) if nz]
        typed = self.typed(params)
        ct_rep = [((), 1) if typed else self.replicated_over(e, params)
                  for e, nz in zip(outs_e, ct_nonzeros) if nz]
        lin_rep = [() if typed else self.replicated_over(e, params)[0]
                   for e, u in zip(ins, undefined) if u]
        nres = len(res_avals)

        def fun(*xs):
          cts_in = [c / size if names else c for c, (names, size) in zip(xs[nres:], ct_rep)]
          outs = core.jaxpr_as_fun(t_closed)(*t_consts, *xs[:nres], *cts_in)
          return [self.psum(o, names) if names else o for o, names in zip(outs, lin_rep)]
        jaxpr, consts = pe.trace_to_jaxpr(fun, [*res_avals, *ct_avals])
      return ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), []), list(consts)
    t_closed, consts = _memo(self._transpose_cache, closed, (undefined, ct_nonzeros), make)
    new_in = ((self.rep,) * len(consts) +
              tuple(e for e, u in zip(ins, undefined) if not u) +
              tuple(_ct_spec(e) for e, nz in zip(outs_e, ct_nonzeros) if nz))
    new_out = tuple(_ct_spec(e) for e, u in zip(ins, undefined) if u)
    outs = self.bind([*consts, *[a for a, u in zip(args, undefined) if not u],
                      *[c for c in cts if type(c) is not ad.Zero]], params, new_in, new_out,
                     jaxpr=t_closed, **_derived_name(params, "transpose"))
    it = iter(outs)
    return [next(it) if u else None for u in undefined]

  def dce(self, used_outs, eqn):  # noqa: E301
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

  def partial_eval(self, eqn, unknowns):
    """Splits a map with partly unknown operands into a known map (known results +
    residuals) and an unknown map reading the residuals, laid out by `residual_entry`."""
    params = eqn.params
    closed, ins, outs_e = params["jaxpr"], params[self.in_key], params[self.out_key]
    res_e = self.residual_entry(params)

    def make():
      with self.env(params):
        k, u, nres, out_unknowns = ad.partial_eval_jaxpr(closed.jaxpr, unknowns,
                                                         [False] * len(outs_e))
        n_known = len(k.outvars) - nres
        res_avals = [v.aval for v in k.outvars[n_known:]]
        # A residual's piece as the unknown body sees it under `res_e` (shard_map: with a
        # leading axis of size 1); reshape where that is not the residual itself.
        local = [self.local_aval(self.global_aval(a, res_e, params), res_e, params)
                 for a in res_avals]
        if all(lo.shape == a.shape for lo, a in zip(local, res_avals)):
          return ClosedJaxpr(k, []), ClosedJaxpr(u, []), nres, out_unknowns, res_avals

        def known_fun(*xs):
          outs = core.eval_jaxpr(k, [], *xs)
          return [*outs[:n_known], *[self.reshape(r, lo.shape)
                                     for r, lo in zip(outs[n_known:], local)]]

        def unknown_fun(*xs):
          res = [self.reshape(r, a.shape) for r, a in zip(xs[:nres], res_avals)]
          return core.eval_jaxpr(u, [], *res, *xs[nres:])
        kj, kc = pe.trace_to_jaxpr(known_fun, [v.aval for v in k.invars])
        uj, uc = pe.trace_to_jaxpr(unknown_fun, [*local, *[v.aval for v in u.invars[nres:]]])
      # NB: constants the re-traced bodies create stay with them (emitted inside the region).
      return (ClosedJaxpr(kj, list(kc)), ClosedJaxpr(uj, list(uc)), nres, out_unknowns,
              local)
    known, unknown, nres, out_unknowns, local = _memo(self._pe_cache, closed,
                                                      tuple(unknowns), make)
    res_vars = [Var(self.global_aval(a, res_e, params)) for a in local]
    pick = lambda xs, m: tuple(x for x, u in zip(xs, m) if u)
    unpick = lambda xs, m: tuple(x for x, u in zip(xs, m) if not u)
    k_in, u_in = unpick(ins, unknowns), (res_e,) * nres + pick(ins, unknowns)
    k_out = unpick(outs_e, out_unknowns) + (res_e,) * nres
    u_out = pick(outs_e, out_unknowns)
    reset = lambda n: {k: (False,) * n for k in self.reset}
    known_eqn = JaxprEqn(
        list(unpick(eqn.invars, unknowns)),
        [*unpick(eqn.outvars, out_unknowns), *res_vars], self.prim,
        {**params, "jaxpr": known, self.in_key: k_in, self.out_key: k_out,
         **reset(len(k_in))})
    unknown_eqn = JaxprEqn(
        [*res_vars, *pick(eqn.invars, unknowns)], list(pick(eqn.outvars, out_unknowns)),
        self.prim, {**params, "jaxpr": unknown, self.in_key: u_in, self.out_key: u_out,
                    **reset(len(u_in))})
    return known_eqn, unknown_eqn, out_unknowns

  def batch(self, axis_data, args, dims, **params):
    """vmap of a map: each batched operand's batch axis goes first (unsplit), the body is
    batched at axis 0 and so is every result."""
    closed, ins, outs_e = params["jaxpr"], params[self.in_key], params[self.out_key]
    new_args, new_in, body_dims = [], [], []
    for x, d, e in zip(args, dims, ins):
      if d is batching.not_mapped:
        new_args.append(x)
        new_in.append(e)
        body_dims.append(batching.not_mapped)
      else:
        new_args.append(batching.moveaxis(x, d, 0))
        new_in.append(self.batched_entry(e))
        body_dims.append(0)
    n_out = len(outs_e)
    key = (tuple(body_dims), axis_data)

    def make():
      with self.env(params):
        return batching.batch_jaxpr(closed, axis_data, body_dims, [0] * n_out)
    b_closed, consts, _ = _memo(self._batch_cache, closed, key, make)
    new_out = tuple(self.batched_entry(e) for e in outs_e)
    new_in = (self.rep,) * len(consts) + tuple(new_in)
    outs = self.bind([*consts, *new_args], params, new_in, new_out, jaxpr=b_closed)
    return outs, [0] * n_out

  def register(self):
    ad.primitive_jvps[self.prim] = self.jvp
    ad.primitive_transposes[self.prim] = self.transpose
    pe.dce_rules[self.prim] = self.dce
    ad.partial_eval_rules[self.prim] = self.partial_eval
    batching.fancy_primitive_batchers[self.prim] = self.batch



# ---------------------------------------------------------------------------
# The device mesh of a module


# Map primitives over the devices of a new mesh axis (pmap): params -> (axis_name, axis_size,
# devices or None, body Jaxpr). A module containing one is lowered over their mesh.
device_maps: dict[core.Primitive, Callable[[dict], tuple[Any, int, Any, Jaxpr]]] = {}


# The types of param values that hold no jaxpr (`mesh_chain` skips equations of only these).
_PLAIN = frozenset((type(None), bool, int, float, str))


def mesh_chain(jaxpr: Jaxpr) -> list[tuple[Any, int, Any]]:
  """The mapped axes `(axis_name, axis_size, devices)` of the pmaps in `jaxpr`, outermost
  first (a pmap nested in a pmap's body adds an axis): the mesh its module needs, or [].

  Raises:
    ValueError: if two pmaps at the same depth have different sizes.
  """
  found: list[tuple[Any, int, Any]] = []

  def visit(j: Jaxpr, depth: int):
    for eqn in j.eqns:
      axis = device_maps.get(eqn.primitive)
      if axis is not None:
        name, size, devices, body = axis(eqn.params)
        if len(found) <= depth:
          found.append((name, size, devices))
        elif found[depth][1] != size:
          raise ValueError(
              f"pmap: one program maps axes of sizes {found[depth][1]} ('{found[depth][0]}') "
              f"and {size} ('{name}') at the same nesting depth; pmaps "
              f"staged into one jit must use the same devices. Call them from separate jits.")
        visit(body, depth + 1)
      else:
        for v in eqn.params.values():
          if type(v) not in _PLAIN:   # NB: params of plain values (most): no jaxpr inside
            for sub in core.subjaxprs(eqn):
              visit(sub, depth)
            break
  visit(jaxpr, 0)
  return found


def mesh_names(chain) -> list[str]:
  """The mesh axis names of a chain of pmaps: each pmap's axis_name where it is a plain
  identifier; an outermost pmap without one (or with another name) gets JAX's
  `_internal_pmap_axis_name`, inner ones `axis<k>`."""
  names, used = [], set()
  for k, (name, _, _) in enumerate(chain):
    s = name if isinstance(name, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) \
        else "_internal_pmap_axis_name" if k == 0 else f"axis{k}"
    if s in used:
      s = f"{s}_{k}"
    used.add(s)
    names.append(s)
  return names


class UnboundAxis:
  """An axis-environment entry for a mesh axis no pmap has bound yet (matches no name)."""
  __slots__ = ("depth",)

  def __init__(self, depth):
    self.depth = depth

  def __repr__(self):
    return f"<mesh axis {self.depth}>"


def describe_axes(chain) -> str:
  return ", ".join(f"{'unnamed' if a is None else repr(a)} of size {s}" for a, s, _ in chain)


def sdy_sharding(ndim: int, dim: int | None, axis: str | None, *, attr: bool) -> str:
  dims = ", ".join(f'{{"{axis}"}}' if d == dim else "{}" for d in range(ndim))
  body = f"<@mesh, [{dims}]>"
  return f"#sdy.sharding{body}" if attr else body



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


def lower_spmd_module(name: str, jaxpr: Jaxpr, chain, *, arg_attrs=None, result_attrs=None,
                      donated=None, consts=None, arg_locs=None, call_stack=()) -> str:
  """Lowers `jaxpr` (which contains pmaps; `chain = mesh_chain(jaxpr)`) to an SPMD module
  over the chain's mesh. Arguments and results without attributes are replicated. With
  `consts` (the constvars' values), the constvars are constants of the text, no
  arguments. `arg_locs`, `call_stack`: as `lowering.lower_jaxpr_to_module`'s."""
  names = mesh_names(chain)
  n = math.prod(s for _, s, _ in chain)
  module = lowering.ModuleContext(name, axis_env=[(UnboundAxis(k), s)
                                                  for k, (_, s, _) in enumerate(chain)],
                                  num_partitions=n)
  module.mesh = [(m, s) for m, (_, s, _) in zip(names, chain)]
  module.manual_depth = None
  avals_in = [v.aval for v in ((*jaxpr.constvars,) if consts is None else ()) +
              (*jaxpr.invars,)]
  if arg_attrs is None:
    # NB: a typed key's data has one axis more than its aval (`core.physical_aval`)
    arg_attrs = [f"sdy.sharding = "
                 f"{sdy_sharding(len(core.physical_aval(a).shape), None, None, attr=True)}"
                 for a in avals_in]
  if result_attrs is None:
    result_attrs = [f"sdy.sharding = "
                    f"{sdy_sharding(len(core.physical_aval(v.aval).shape), None, None, attr=True)}"
                    for v in jaxpr.outvars]
  return lowering.lower_jaxpr_to_module(name, jaxpr, donated=donated, arg_attrs=arg_attrs,
                                        result_attrs=result_attrs, module=module,
                                        consts=consts, arg_locs=arg_locs,
                                        call_stack=call_stack)



# ---------------------------------------------------------------------------
# Replication: may a value differ between the devices along a mapped axis?
#
# A replication rule `(in_vary, **params) -> out_vary` gets, per operand, the frozenset of
# axis names along which it may differ between devices, and gives one such set per result.
# Call-like primitives (`core.closed_calls`) follow their body. Other primitives without a
# rule: a result varies wherever an operand does; one with sub-jaxprs and no rule also varies
# along every axis its bodies' collectives may make vary. pmap's
# `out_axes=None` check and shard_map's `check_rep` both ask `varying_axes`.
#
# JAX 0.10's shard_map (`check_vma=True`) types values instead: each value is invariant or
# varying along each manual axis ("varying manual axes", vma), and the analysis runs in its
# *strict* mode (`checking_vma()`): a primitive's `vma_rules` entry, when it has one, replaces
# its replication rule. The differences are JAX's typing rules: all_gather's result stays
# varying; a loop's carries must keep their type (TypeError otherwise, not a fixed point);
# cond's branches must agree (TypeError) and its predicate does not matter; `pvary` of an
# axis the value already varies along is an error. Operands of an ordinary primitive that
# mix invariant and varying values are fine (JAX inserts `pvary` itself, `jax_auto_pcast`).

replication_rules: dict[core.Primitive, Callable[..., list[frozenset]]] = {}
vma_rules: dict[core.Primitive, Callable[..., list[frozenset]]] = {}
_strict: contextvars.ContextVar = contextvars.ContextVar("stagecraft_strict_vma",
                                                         default=False)
_axis_order: contextvars.ContextVar = contextvars.ContextVar("stagecraft_vma_order",
                                                            default=())


def strict_vma() -> bool:
  """Whether the analysis runs in check_vma's strict mode now."""
  return _strict.get()


@contextlib.contextmanager
def checking_vma(strict: bool = True, order: Sequence[Any] = ()):
  """Runs `varying_axes` in its strict (check_vma) mode, or not, for the block; `order`
  (the mesh's axis names) orders axes in messages."""
  token, token_order = _strict.set(strict), _axis_order.set(tuple(order))
  try:
    yield
  finally:
    _strict.reset(token)
    _axis_order.reset(token_order)


def ordered_axes(vary, order: Sequence[Any] | None = None) -> tuple:
  """The names in `vary` in `order` (default: the mesh's of `checking_vma`), then the rest."""
  if order is None:
    order = _axis_order.get()
  return (*[n for n in order if n in vary],
          *sorted((n for n in vary if n not in order), key=str))


def vma_type(aval: ShapedArray, vary, order: Sequence[Any] | None = None) -> str:
  """An aval with its varying axes as JAX prints them in vma errors: `float32[2,4]{V:x}`
  (several axes: `{V:(x,y)}`, in `order` (default: the mesh's of `checking_vma`), then the
  rest)."""
  dims = ",".join(str(d) for d in aval.shape)
  names = ordered_axes(vary, order)
  text = ",".join(map(str, names))
  v = "{V:" + (text if len(names) == 1 else f"({text})") + "}" if names else ""
  return f"{aval.dtype.name}[{dims}]{v}"


def _union(sets) -> frozenset:
  return frozenset().union(*sets)


def _may_vary(jaxpr: Jaxpr) -> frozenset:
  """Every axis a collective inside `jaxpr` (nested jaxprs included) could make vary."""
  out: set = set()
  for eqn in jaxpr.eqns:
    rule = replication_rules.get(eqn.primitive)
    if rule is not None and not any(True for _ in core.subjaxprs(eqn)):
      out |= _union(rule([frozenset()] * len(eqn.invars), **eqn.params))
    for sub in core.subjaxprs(eqn):
      out |= _may_vary(sub)
  return frozenset(out)


def varying_axes(jaxpr: Jaxpr, in_vary: Sequence[frozenset]) -> list[frozenset]:
  """For each output of `jaxpr`, the axis names along which it may differ between devices,
  given those of its inputs (a conservative dataflow over the registered rules: e.g. psum
  over an axis makes its result the same along it, axis_index makes it vary; calls, cond,
  scan and while_loop follow their bodies, loops to a fixed point)."""
  env: dict = {v: s for v, s in zip(jaxpr.invars, in_vary)}
  for eqn in jaxpr.eqns:
    ins = [env.get(v, frozenset()) if isinstance(v, Var) else frozenset()
           for v in eqn.invars]
    outs = eqn_varying_axes(eqn, ins, len(eqn.outvars))
    for v, o in zip(eqn.outvars, outs):
      env[v] = o
  return [env.get(v, frozenset()) if isinstance(v, Var) else frozenset()
          for v in jaxpr.outvars]


def eqn_varying_axes(eqn, in_vary: Sequence[frozenset], n_out: int) -> list[frozenset]:
  """The varying axes of the results of `eqn` (anything with `.primitive` and `.params`),
  given those of its operands (`varying_axes`'s step, also run by eager shard_map)."""
  rule = vma_rules.get(eqn.primitive) if _strict.get() else None
  if rule is None:
    rule = replication_rules.get(eqn.primitive)
  if rule is None and eqn.primitive in core.closed_calls:
    rule = call_replication_rule(core.closed_calls[eqn.primitive])
  if rule is not None:
    return list(rule(in_vary, **eqn.params))
  out = _union(in_vary)
  for sub in core.subjaxprs(eqn):
    out = out | _may_vary(sub)
  return [out] * n_out


def call_replication_rule(param: str) -> Callable[..., list[frozenset]]:
  """The replication rule of a call-like primitive whose `param` holds a (closed) jaxpr
  taking the equation's operands and giving its results: follow the body."""
  def rule(in_vary, **params):
    body = params[param]
    body = body.jaxpr if isinstance(body, ClosedJaxpr) else body
    if len(body.invars) == len(in_vary):
      return varying_axes(body, in_vary)
    return [_union(in_vary) | _may_vary(body)] * len(body.outvars)   # not in the usual form
  return rule


def loop_fixpoint(body: Jaxpr, fixed: list, carry: list, rest: list,
                  extra: Callable[[list], Sequence[frozenset]] = lambda c: ()):
  """Varying axes of a loop body's carries (and its other outputs) after any number of
  iterations: the carries' sets grow until they are stable (`extra(carry)`: axes every
  carry gets, e.g. a while loop predicate's)."""
  nk = len(carry)
  while True:
    out = varying_axes(body, [*fixed, *carry, *rest])
    new = [c | o | _union(extra(carry)) for c, o in zip(carry, out[:nk])]
    if new == carry:
      return carry, out
    carry = new
