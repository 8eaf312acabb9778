"""shard_map: a function written per device, mapped over the blocks of a device mesh.

`shard_map(f, mesh, in_specs, out_specs)(*args)` splits each argument into blocks by its
PartitionSpec (dimension i split over the mesh axes named at i), runs `f` once per device on
that device's blocks, with collectives (`lax.psum(x, "data")`, `lax.all_gather(y, "model")`,
`lax.axis_index`, ...) over the mesh axis names, and assembles the results from the blocks
by `out_specs`. Semantics follow JAX's `shard_map` (top level in JAX 0.10, formerly under
its experimental namespace): a mesh axis an out_spec does not mention means the result is the
same on every device along that axis (checked when `check_rep`), and one copy is kept.

Axes can be manual (the default: all of them) or automatic (`auto=` / `axis_names=`): over
automatic axes the body sees whole values and XLA's partitioner handles them.

The primitive `shard_map` carries the per-device closed jaxpr and the mesh, specs and
manual axes; its rules are those of pmap (interpreters/pxla.py) generalized to several axes:
psum transposes to psum, so the cotangent of a result replicated over manual axes is divided
by their size before the transposed body, and the cotangent of an operand replicated over
manual axes is psum'med over them. Residuals of partial evaluation are per-device values:
each gets a leading axis split over all manual axes. Lowering emits an
`sdy.manual_computation` (as JAX does) inside the program over the mesh
(interpreters/sharded.py).
"""
from __future__ import annotations

import contextlib
import math
import weakref
from typing import Any, Callable, Sequence

import optree

from stagecraft import core, tree_util
from stagecraft.core import ClosedJaxpr, Jaxpr, JaxprEqn, ShapedArray, Var
from stagecraft.interpreters import ad, batching, lowering, pxla, sharded
from stagecraft.interpreters import partial_eval as pe
from stagecraft.runtime.array import Array
from stagecraft.sharding import Mesh, NamedSharding, PartitionSpec, _mesh_stack

__all__ = ["shard_map", "shard_map_p"]

shard_map_p = core.Primitive("shard_map")
shard_map_p.multiple_results = True
core.pp_param_order[shard_map_p] = ("name", "in_specs", "out_specs", "manual_axes", "jaxpr")


# ---------------------------------------------------------------------------
# Avals


def _split(mesh: Mesh, spec: PartitionSpec, i: int) -> int:
  return math.prod(mesh.shape[n] for n in spec._names(i))


def global_aval(aval: ShapedArray, spec: PartitionSpec, mesh: Mesh) -> ShapedArray:
  """The global aval of a per-device block `aval` assembled by `spec`."""
  return aval.update(shape=tuple(d * _split(mesh, spec, i) for i, d in enumerate(aval.shape)))


def local_aval(aval: ShapedArray, spec: PartitionSpec, mesh: Mesh) -> ShapedArray:
  """The per-device block of a global `aval` split by `spec` (dimensions divide)."""
  return aval.update(shape=tuple(d // _split(mesh, spec, i)
                                 for i, d in enumerate(aval.shape)))


def _abstract_eval(*avals, jaxpr, mesh, out_specs, **_):
  return [global_aval(a, s, mesh) for a, s in zip(jaxpr.out_avals, out_specs)]


shard_map_p.def_abstract_eval(_abstract_eval)


@contextlib.contextmanager
def _env(mesh: Mesh, manual_axes):
  """Binds the manual mesh axes (outermost first) for collectives in the body."""
  with contextlib.ExitStack() as stack:
    for n in mesh.axis_names:
      if n in manual_axes:
        stack.enter_context(batching.extend_axis_env(n, mesh.shape[n]))
    yield


def _penv(params):
  return _env(params["mesh"], params["manual_axes"])


def _bind(args, params, **updates):
  return shard_map_p.bind(*args, **{**params, **updates})


def _manual_names(params) -> tuple:
  return tuple(n for n in params["mesh"].axis_names if n in params["manual_axes"])


def _missing_axes(spec: PartitionSpec, params) -> tuple:
  """The manual axes `spec` does not split over (the value is replicated along them)."""
  used = {n for i in range(len(spec)) for n in spec._names(i)}
  return tuple(n for n in _manual_names(params) if n not in used)


# ---------------------------------------------------------------------------
# Rules

_memo = core.memo_on_jaxpr
_pe_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_batch_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_REP = PartitionSpec()


def _partial_eval(eqn, unknowns):
  from stagecraft import lax
  params = eqn.params
  closed, in_specs, out_specs = params["jaxpr"], params["in_specs"], params["out_specs"]
  mesh = params["mesh"]
  manual = _manual_names(params)
  nmanual = math.prod(mesh.shape[n] for n in manual)

  def make():
    with _penv(params):
      k, u, nres, out_unknowns = ad.partial_eval_jaxpr(closed.jaxpr, unknowns,
                                                       [False] * len(out_specs))
      n_known_out = len(k.outvars) - nres
      res_avals = [v.aval for v in k.outvars[n_known_out:]]

      # NB: residuals are per-device values: each gets a leading axis split over every
      # manual axis (global shape (n_devices_manual, *block)).
      def known_fun(*xs):
        outs = core.eval_jaxpr(k, [], *xs)
        return [*outs[:n_known_out],
                *[lax.reshape(r, (1, *r.shape)) for r in outs[n_known_out:]]]

      def unknown_fun(*xs):
        res = [lax.reshape(r, r.shape[1:]) for r in xs[:nres]]
        return core.eval_jaxpr(u, [], *res, *xs[nres:])
      k_avals = [v.aval for v in k.invars]
      kj, kc = pe.trace_to_jaxpr(known_fun, k_avals)
      u_avals = [a.update(shape=(1, *a.shape)) for a in res_avals] + [
          v.aval for v in u.invars[nres:]]
      uj, uc = pe.trace_to_jaxpr(unknown_fun, u_avals)
    # NB: constants the re-traced bodies create stay with them (emitted inside the region).
    return (ClosedJaxpr(kj, list(kc)), ClosedJaxpr(uj, list(uc)), nres, out_unknowns,
            res_avals)
  known, unknown, nres, out_unknowns, res_avals = _memo(_pe_cache, closed, tuple(unknowns),
                                                        make)
  res_spec = PartitionSpec(manual if len(manual) != 1 else manual[0]) if manual else _REP
  res_vars = [Var(a.update(shape=((nmanual if manual else 1), *a.shape))) for a in res_avals]
  k_in = tuple(s for s, u in zip(in_specs, unknowns) if not u)
  k_out = tuple(s for s, u in zip(out_specs, out_unknowns) if not u) + (res_spec,) * nres
  u_in = (res_spec,) * nres + tuple(s for s, u in zip(in_specs, unknowns) if u)
  u_out = tuple(s for s, u in zip(out_specs, out_unknowns) if u)
  known_eqn = JaxprEqn(
      [v for v, u in zip(eqn.invars, unknowns) if not u],
      [*[v for v, u in zip(eqn.outvars, out_unknowns) if not u], *res_vars], shard_map_p,
      {**params, "jaxpr": known, "in_specs": k_in, "out_specs": k_out})
  unknown_eqn = JaxprEqn(
      [*res_vars, *[v for v, u in zip(eqn.invars, unknowns) if u]],
      [v for v, u in zip(eqn.outvars, out_unknowns) if u], shard_map_p,
      {**params, "jaxpr": unknown, "in_specs": u_in, "out_specs": u_out})
  return known_eqn, unknown_eqn, out_unknowns


def _batch(axis_data, args, dims, **params):
  # vmap of shard_map: a batched operand's batch axis goes first and is not split; the body
  # is batched at axis 0 and so is every result.
  closed, in_specs, out_specs = params["jaxpr"], params["in_specs"], params["out_specs"]
  new_args, new_in, body_dims = [], [], []
  for x, d, s in zip(args, dims, in_specs):
    if d is batching.not_mapped:
      new_args.append(x)
      new_in.append(s)
      body_dims.append(batching.not_mapped)
    else:
      new_args.append(batching.moveaxis(x, d, 0))
      new_in.append(PartitionSpec(None, *s))
      body_dims.append(0)
  n_out = len(out_specs)
  key = (tuple(body_dims), axis_data)

  def make():
    with _penv(params):
      return batching.batch_jaxpr(closed, axis_data, body_dims, [0] * n_out)
  b_closed, consts, _ = _memo(_batch_cache, closed, key, make)
  new_out = tuple(PartitionSpec(None, *s) for s in out_specs)
  new_in = (_REP,) * len(consts) + tuple(new_in)
  outs = _bind([*consts, *new_args], params, jaxpr=b_closed, in_specs=new_in,
               out_specs=new_out)
  return outs, [0] * n_out


def _replicated_over(spec: PartitionSpec, params) -> tuple[tuple, int]:
  names = _missing_axes(spec, params)
  return names, math.prod(params["mesh"].shape[n] for n in names)


pxla.MapRules(shard_map_p, "in_specs", "out_specs", _REP, _penv,
              lambda aval, spec, params: local_aval(aval, spec, params["mesh"]),
              _replicated_over).register()
ad.partial_eval_rules[shard_map_p] = _partial_eval
batching.axis_primitive_batchers[shard_map_p] = _batch


# ---------------------------------------------------------------------------
# Lowering and eager evaluation


def _lowering(ctx, *args, jaxpr, mesh, in_specs, out_specs, manual_axes, name, **_):
  module = ctx.module
  if module.sdy_mesh is None:
    raise ValueError(f"shard_map ({name}) cannot be lowered into this module, which has no "
                     f"device mesh (xla_computation, or a pmap program); call it directly "
                     f"or from jit.")
  if module.manual_depth is not None:
    raise NotImplementedError(f"shard_map ({name}) nested inside another shard_map or pmap "
                              f"is not supported; use one shard_map over several mesh axes.")
  if module.sdy_mesh != mesh:
    raise ValueError(f"shard_map ({name}) uses {mesh!r}, but the program runs over "
                     f"{module.sdy_mesh!r}; use one Mesh for every sharding of the program.")
  auto = any(n not in manual_axes for n in mesh.axis_names)
  in_sh = [NamedSharding(mesh, s)._sdy(len(a.shape), open_dims=auto)
           for s, a in zip(in_specs, ctx.avals_in)]
  out_sh = [NamedSharding(mesh, s)._sdy(len(a.shape), open_dims=auto)
            for s, a in zip(out_specs, ctx.avals_out)]

  def body(block_args):
    saved_env, saved_depth = module.axis_env, module.manual_depth
    env = list(saved_env)
    for k, n in enumerate(mesh.axis_names):
      if n in manual_axes:
        env[k] = (n, mesh.shape[n])
    module.axis_env, module.manual_depth = tuple(env), 0
    try:
      with _env(mesh, manual_axes):
        consts = [lowering.constant(ctx.fb, c, core.get_aval(c)) for c in jaxpr.consts]
        return lowering.jaxpr_subcomp(ctx.fb, jaxpr.jaxpr, consts, block_args)
    finally:
      module.axis_env, module.manual_depth = saved_env, saved_depth
  manual = [str(n) for n in mesh.axis_names if n in manual_axes]
  return pxla.emit_manual_computation(ctx, args, in_sh, out_sh, manual, jaxpr.in_avals,
                                      jaxpr.out_avals, body)


lowering.register_lowering(shard_map_p, _lowering)

_executables: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _impl(*args, **params):
  in_avals = tuple(x.aval if type(x) is Array else core.get_aval(x) for x in args)
  key = (in_avals, *[(k, v) for k, v in params.items() if k != "jaxpr"])
  table = _executables.setdefault(params["jaxpr"], {})
  ex = table.get(key)
  if ex is None:
    invars = [Var(a) for a in in_avals]
    outvars = [Var(a) for a in _abstract_eval(*in_avals, **params)]
    jaxpr = Jaxpr([], invars, outvars, [JaxprEqn(invars, outvars, shard_map_p, params)])
    mesh = params["mesh"]
    # NB: the in_specs are the layout asked for: arguments are split by them.
    ex = table[key] = sharded.compile_sharded(
        f"shard_map_{params['name']}", jaxpr, mesh,
        [NamedSharding(mesh, s) for s in params["in_specs"]],
        [NamedSharding(mesh, s) for s in params["out_specs"]])
  return ex.call(args)


shard_map_p.def_impl(_impl)


# ---------------------------------------------------------------------------
# Replication check (check_rep)

_REDUCING = ("psum", "pmax", "pmin", "all_gather")
_VARYING = ("axis_index", "ppermute", "pshuffle", "all_to_all", "reduce_scatter")


def _names_of(params) -> tuple:
  axes = params.get("axes", params.get("axis_name"))
  return tuple(axes) if isinstance(axes, (tuple, list)) else (axes,)


def _contains_varying(jaxpr: Jaxpr) -> set:
  out = set()
  for eqn in jaxpr.eqns:
    if eqn.primitive.name in _VARYING:
      out.update(_names_of(eqn.params))
    for sub in pxla._subjaxprs(eqn):
      out |= _contains_varying(sub)
  return out


def _jaxpr_of(j) -> Jaxpr:
  return j.jaxpr if isinstance(j, ClosedJaxpr) else j


def _union(sets) -> frozenset:
  return frozenset().union(*sets)


def _loop_fixpoint(body: Jaxpr, fixed: list, carry: list, rest: list, extra=lambda c: ()):
  """Varying axes of a loop body's carries (and other outputs) after any number of
  iterations: the carries' sets grow until they are stable (`extra(carry)`: axes every
  carry gets, e.g. a while loop predicate's)."""
  nk = len(carry)
  while True:
    out = varying_axes(body, [*fixed, *carry, *rest])
    new = [c | o | _union(extra(carry)) for c, o in zip(carry, out[:nk])]
    if new == carry:
      return carry, out
    carry = new


def _structured_varying(eqn, ins: list) -> list | None:
  """Varying axes of the outputs of a control-flow or call equation, from its sub-jaxprs
  (None: not one of these, or not in the expected form)."""
  name, params, n_out = eqn.primitive.name, eqn.params, len(eqn.outvars)
  if name in ("jit", "checkpoint", "custom_jvp_call", "custom_vjp_call", "custom_dce_call"):
    sub = params.get("jaxpr", params.get("call_jaxpr", params.get("fun_jaxpr")))
    sub = _jaxpr_of(sub) if sub is not None else None
    if sub is not None and len(sub.invars) == len(ins) and len(sub.outvars) == n_out:
      return varying_axes(sub, ins)
  elif name == "cond":
    # NB: devices that take different branches (a varying index) may differ anywhere.
    index, ops = ins[0], ins[1:]
    outs = [varying_axes(_jaxpr_of(b), ops) for b in params["branches"]]
    return [index | _union(os) for os in zip(*outs)]
  elif name == "scan":
    nc, nk = params["num_consts"], params["num_carry"]
    carry, out = _loop_fixpoint(_jaxpr_of(params["jaxpr"]), ins[:nc], ins[nc:nc + nk],
                                ins[nc + nk:])
    # NB: after at least one iteration the carries are the body's last outputs.
    return out if params["length"] > 0 else [*carry, *out[nk:]]
  elif name == "while":
    cn, bn = params["cond_nconsts"], params["body_nconsts"]
    cond, body = _jaxpr_of(params["cond_jaxpr"]), _jaxpr_of(params["body_jaxpr"])
    c_consts, b_consts, init = ins[:cn], ins[cn:cn + bn], ins[cn + bn:]
    # NB: where the predicate varies, devices may run different numbers of iterations.
    carry, _ = _loop_fixpoint(body, b_consts, list(init), [],
                              extra=lambda c: varying_axes(cond, [*c_consts, *c]))
    return carry
  return None


def varying_axes(jaxpr: Jaxpr, in_vary: Sequence[frozenset]) -> list[frozenset]:
  """For each output of the body, the manual axes along which it may differ between devices
  (a conservative dataflow: inputs vary along the axes their spec splits over; psum, pmax,
  pmin and all_gather over an axis make their result the same along it; axis_index,
  ppermute, all_to_all and psum_scatter make it vary; cond, scan, while_loop and calls (jit,
  checkpoint, custom_jvp/vjp/dce) are followed into their bodies, loops to a fixed point;
  other equations with sub-jaxprs vary along everything their bodies' collectives may make
  vary)."""
  env: dict = {v: s for v, s in zip(jaxpr.invars, in_vary)}
  for eqn in jaxpr.eqns:
    in_sets = [env.get(v, frozenset()) if isinstance(v, Var) else frozenset()
               for v in eqn.invars]
    ins = _union(in_sets)
    name = eqn.primitive.name
    outs = None
    if name in _REDUCING and eqn.params.get("axis_index_groups") is None:
      out = ins - set(_names_of(eqn.params))
    elif name in _VARYING:
      out = ins | set(_names_of(eqn.params))
    else:
      outs = _structured_varying(eqn, in_sets)
      out = ins
      if outs is None:
        for sub in pxla._subjaxprs(eqn):
          out = out | _contains_varying(sub)
    for k, o in enumerate(eqn.outvars):
      env[o] = outs[k] if outs is not None else out
  return [env.get(v, frozenset()) if isinstance(v, Var) else frozenset()
          for v in jaxpr.outvars]


# ---------------------------------------------------------------------------
# The user-facing shard_map


def _spec_leaf(x) -> bool:
  return x is None or isinstance(x, PartitionSpec)


def _flat_specs(prefix, tree, what: str, fun_name: str) -> list[PartitionSpec]:
  p_leaves, p_def = optree.tree_flatten(prefix, is_leaf=_spec_leaf, none_is_leaf=True,
                                        namespace=tree_util.NAMESPACE)
  try:
    subtrees = p_def.flatten_up_to(tree)
  except ValueError:
    raise ValueError(f"shard_map applied to the function '{fun_name}' was given {what} "
                     f"{prefix!r}, which is not a tree prefix of the "
                     f"{'arguments tuple' if what == 'in_specs' else 'output'}; give one "
                     f"PartitionSpec per argument (or a prefix of their structure).") from None
  out = []
  for s, sub in zip(p_leaves, subtrees):
    if s is None:
      s = PartitionSpec()
    if not isinstance(s, PartitionSpec):
      raise TypeError(f"shard_map {what} entries must be PartitionSpecs (or None), got "
                      f"{s!r}.")
    out.extend([s] * len(optree.tree_leaves(sub, namespace=tree_util.NAMESPACE)))
  return out


def _check_spec(spec: PartitionSpec, aval: ShapedArray, mesh: Mesh, manual, where: str,
                fun_name: str, *, split: bool):
  if len(spec) > len(aval.shape):
    raise ValueError(f"shard_map applied to the function '{fun_name}' was given {where} "
                     f"with spec {spec}, which has {len(spec)} entries, for a value of rank "
                     f"{len(aval.shape)} ({aval.str_short()}); give at most one entry per "
                     f"dimension.")
  seen = []
  for i in range(len(spec)):
    for n in spec._names(i):
      if n not in mesh.axis_names:
        raise ValueError(f"shard_map: {where} has spec {spec}, which names the axis {n!r} "
                         f"that the mesh does not have; its axes are {mesh.axis_names}.")
      if n not in manual:
        raise ValueError(f"shard_map: {where} has spec {spec}, which names the automatic "
                         f"axis {n!r}; specs may name only the manual axes {tuple(manual)}.")
      if n in seen:
        raise ValueError(f"shard_map: {where} has spec {spec}, which uses the mesh axis "
                         f"{n!r} twice.")
      seen.append(n)
    k = _split(mesh, spec, i)
    if split and aval.shape[i] % k:
      raise ValueError(f"shard_map applied to the function '{fun_name}' was given {where} "
                       f"of shape {aval.str_short()}, whose dimension {i} (size "
                       f"{aval.shape[i]}) is not divisible by {k}, the size of the mesh "
                       f"axes {spec._names(i)} its spec {spec} splits it over.")


def shard_map(f: Callable, mesh: Mesh | None = None, in_specs: Any = None,
              out_specs: Any = None, check_rep: bool = True, auto: Any = frozenset(), *,
              axis_names: Any = None, check_vma: bool | None = None) -> Callable:
  """Maps `f`, written for one device's blocks, over the devices of `mesh`.

  Args:
    f: a function of arrays (pytrees) returning arrays (pytrees), called with each device's
      blocks; collectives over the mesh axis names communicate between devices.
    mesh: the device Mesh (default: the mesh entered with `with mesh:`).
    in_specs: a PartitionSpec per positional argument (or a pytree prefix of the arguments
      tuple): dimension i of the argument is split over the mesh axes the spec names at i
      (it must divide); None or P() gives every device the whole argument.
    out_specs: the same for the outputs: how the blocks assemble into the global result. A
      manual mesh axis the spec does not name means the result is the same along that axis.
    check_rep: check that results are the same along the axes their out_specs leave out
      (psum/pmax/pmin/all_gather make values the same along an axis); raises otherwise.
      (`check_vma` is accepted as JAX's newer name.)
    auto: mesh axes left automatic (the body sees whole values along them and XLA's
      partitioner handles them); the others are manual. `axis_names` (JAX's newer form)
      names the manual axes instead.

  Returns:
    The mapped function; its results are Arrays laid out over the mesh by `out_specs`
    (global shapes: each block dimension times the size of the axes it is split over).

  Raises:
    ValueError: a spec naming an axis the mesh lacks (or an automatic one, or one twice),
      more entries than the value's rank, a dimension not divisible by its axes, specs
      that are not a tree prefix, an output that may vary along an axis its out_spec leaves
      out (with check_rep), or no mesh.
    TypeError: non-callable `f`, or a spec that is not a PartitionSpec.
    NameError: a collective over an axis the mesh does not bind manually.
  """
  if not callable(f):
    raise TypeError(f"shard_map expects a callable, got {f!r}.")
  if mesh is None:
    if not _mesh_stack:
      raise ValueError("shard_map needs a mesh: pass mesh=Mesh(...), or call inside "
                       "`with mesh:`.")
    mesh = _mesh_stack[-1]
  if not isinstance(mesh, Mesh):
    raise TypeError(f"shard_map: mesh must be a stagecraft.sharding.Mesh, got "
                    f"{type(mesh).__name__}.")
  if check_vma is not None:
    check_rep = check_vma
  if axis_names is not None:
    manual = frozenset(axis_names if isinstance(axis_names, (set, frozenset, list, tuple))
                       else (axis_names,))
  else:
    manual = frozenset(mesh.axis_names) - frozenset(auto)
  for n in manual:
    if n not in mesh.axis_names:
      raise ValueError(f"shard_map: axis {n!r} is not an axis of the mesh {mesh.axis_names}.")
  from stagecraft import api
  fun_name = api._fun_name(f)
  manual_t = tuple(n for n in mesh.axis_names if n in manual)
  traces: dict = {}

  def trace(in_tree, avals, specs):
    local = [local_aval(a, s, mesh) for a, s in zip(avals, specs)]
    store = []

    def flat(*xs):
      out = f(*optree.tree_unflatten(in_tree, xs))
      leaves, out_tree = api._flatten(out)
      api._check_out_leaves(leaves, out_tree, fun_name, "shard_map")
      store[:] = [out_tree]
      return leaves
    with _env(mesh, manual):
      jaxpr, consts = pe.trace_to_jaxpr(flat, local)
    closed = ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), [])
    out_tree = store[0]
    o_specs = _flat_specs(out_specs, optree.tree_unflatten(out_tree, [0] * out_tree.num_leaves),
                          "out_specs", fun_name)
    out_paths = [tree_util.keystr(p) for p, _ in tree_util.tree_flatten_with_path(
        optree.tree_unflatten(out_tree, list(range(out_tree.num_leaves))))[0]]
    for s, a, path in zip(o_specs, closed.out_avals, out_paths):
      _check_spec(s, a, mesh, manual, f"out_specs{path}", fun_name, split=False)
    if check_rep:
      in_vary = [frozenset()] * len(consts) + [
          frozenset(n for i in range(len(s)) for n in s._names(i)) for s in specs]
      vary = varying_axes(closed.jaxpr, in_vary)
      for k, (s, v) in enumerate(zip(o_specs, vary)):
        used = {n for i in range(len(s)) for n in s._names(i)}
        bad = [n for n in manual_t if n in v and n not in used]
        if bad:
          raise ValueError(
              f"shard_map applied to the function '{fun_name}' was given out_specs which "
              f"require replication which can't be statically inferred given the mesh:\n\n"
              f"The mesh given has shape {tuple(mesh.devices.shape)} with corresponding axis "
              f"names {mesh.axis_names}.\n\nout_specs{out_paths[k]} is {s} which implies "
              f"that the corresponding output value is replicated across mesh axis "
              f"{bad[0]!r}, but it may vary along {', '.join(map(repr, bad))}.\n\nCheck if "
              f"these output values are meant to be replicated over those mesh axes (reduce "
              f"them first, e.g. lax.psum). If not, revise the corresponding out_specs "
              f"entries. If so, disable the check by passing check_rep=False to shard_map.")
    cacheable = not any(isinstance(c, core.Tracer) for c in consts)
    return closed, consts, out_tree, tuple(o_specs), cacheable

  def wrapped(*args, **kwargs):
    if kwargs:
      raise TypeError(f"shard_map applied to the function '{fun_name}' was called with "
                      f"keyword arguments {sorted(kwargs)}; pass them positionally.")
    leaves, in_tree = api._flatten(args)
    specs = _flat_specs(in_specs, args, "in_specs", fun_name)
    paths = [tree_util.keystr(p) for p, _ in tree_util.tree_flatten_with_path(args)[0]]
    avals = []
    for x, s, path in zip(leaves, specs, paths):
      try:
        aval = x.aval if type(x) is Array else core.get_aval(x)
      except TypeError:
        raise TypeError(f"shard_map: the argument at args{path} of {fun_name} is not an "
                        f"array (got {type(x).__name__}).") from None
      _check_spec(s, aval, mesh, manual, f"the argument at args{path}", fun_name, split=True)
      avals.append(aval)
    key = (in_tree, tuple(specs), *avals)
    entry = traces.get(key)
    if entry is None:
      entry = trace(in_tree, avals, specs)
      if entry[4]:
        traces[key] = entry
    closed, consts, out_tree, o_specs, _ = entry
    outs = shard_map_p.bind(
        *consts, *leaves, jaxpr=closed, mesh=mesh,
        in_specs=(_REP,) * len(consts) + tuple(specs), out_specs=o_specs,
        manual_axes=manual, check_rep=bool(check_rep), name=fun_name)
    return optree.tree_unflatten(out_tree, outs)

  wrapped.__name__ = f"shard_map_{fun_name}"
  wrapped.__doc__ = getattr(f, "__doc__", None)
  return wrapped
