"""User-facing transformations: `jit`, `make_jaxpr`, `eval_shape`.

`jit` traces its function once per signature — the tree structure of the arguments, the aval
(shape, dtype, weak type) of each array leaf, the values of static arguments and the x64
flag — and caches the traced jaxpr and the compiled executable under that key. Caches hang
off the function object through a weak reference, so they go when the function does.
"""
from __future__ import annotations

import functools
import inspect
import weakref
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import optree

from stagecraft import core, dtypes, tree_util
from stagecraft.config import config
from stagecraft.core import ClosedJaxpr, DebugInfo, ShapedArray, ShapeDtypeStruct
from stagecraft.interpreters import ad, batching, lowering, partial_eval as pe, pxla
from stagecraft.runtime import client, dispatch
from stagecraft.runtime.array import Array

_NS = tree_util.NAMESPACE


def _flatten(tree):
  return optree.tree_flatten(tree, none_is_leaf=False, namespace=_NS)


# ---------------------------------------------------------------------------
# The call primitive of jit: `jit[name=f jaxpr={...}] args`.

jit_p = core.Primitive("jit")
jit_p.multiple_results = True


def _jit_abstract_eval(*avals, jaxpr: ClosedJaxpr, name: str):
  return jaxpr.out_avals


_jit_executables: "weakref.WeakKeyDictionary[ClosedJaxpr, dispatch.Executable]" = (
    weakref.WeakKeyDictionary())


def _jit_impl(*args, jaxpr: ClosedJaxpr, name: str):
  if dispatch.placement_used[0]:
    placement = dispatch.target_placement(args)
    if type(placement) is dispatch.Placement:   # arguments split over a mesh
      from stagecraft.interpreters import sharded
      return sharded.call_closed(jaxpr, name, args, placement)
  ex = _jit_executables.get(jaxpr)
  if ex is None:
    ex = _jit_executables[jaxpr] = _compile_closed(jaxpr, name)
  return ex.call(args)


def _compile_closed(jaxpr: ClosedJaxpr, name: str) -> dispatch.Executable:
  assert not jaxpr.consts, "jit_p's jaxpr takes its consts as arguments"
  chain = pxla.mesh_chain(jaxpr.jaxpr)
  if chain:   # a jit containing pmaps (e.g. derived by autodiff): one SPMD program
    return pxla.replicated_executable(f"jit_{name}", jaxpr.jaxpr, chain)
  from stagecraft.interpreters import sharded
  if sharded.jaxpr_meshes(jaxpr.jaxpr):   # shard_map / sharding constraints inside
    return sharded.call_closed_executable(jaxpr, name)
  text = lowering.lower_jaxpr_to_module(f"jit_{name}", jaxpr.jaxpr)
  return dispatch.Executable(dispatch.compile_module(text), jaxpr.in_avals, jaxpr.out_avals,
                             text)


def _jit_lowering(ctx, *args, jaxpr: ClosedJaxpr, name: str):
  return lowering.lower_call(ctx, name, jaxpr, args)


_memo = core.memo_on_jaxpr


_jvp_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_transpose_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_pe_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _jit_jvp(primals, tangents, *, jaxpr: ClosedJaxpr, name: str):
  # The JVP of a call is a call of the JVP jaxpr: it stays one staged `jit` equation.
  nonzeros = tuple(type(t) is not ad.Zero for t in tangents)
  jvp_closed, consts, out_nz = _memo(_jvp_cache, jaxpr, nonzeros,
                                     lambda: ad.jvp_jaxpr(jaxpr, nonzeros))
  outs = jit_p.bind(*consts, *primals, *[t for t in tangents if type(t) is not ad.Zero],
                    jaxpr=jvp_closed, name=f"jvp({name})")
  n = len(jaxpr.out_avals)
  it = iter(outs[n:])
  return outs[:n], [next(it) if nz else ad.Zero(ad.tangent_aval(a))
                    for nz, a in zip(out_nz, jaxpr.out_avals)]


def _jit_partial_eval(eqn, unknowns):
  # Splits a call with partly unknown inputs into a known call (known outputs + residuals)
  # and an unknown call reading the residuals: linearize keeps both staged.
  closed, name = eqn.params["jaxpr"], eqn.params["name"]
  def make():
    k, u, nres, out_unknowns = ad.partial_eval_jaxpr(closed.jaxpr, unknowns,
                                                     [False] * len(closed.out_avals))
    # One ClosedJaxpr per split, so the executables compiled for it are reused.
    return ClosedJaxpr(k, []), ClosedJaxpr(u, []), nres, out_unknowns
  known_closed, unknown_closed, nres, out_unknowns = _memo(_pe_cache, closed, tuple(unknowns),
                                                           make)
  known = known_closed.jaxpr
  res_vars = [core.Var(v.aval) for v in known.outvars[len(known.outvars) - nres:]]
  known_outs = [v for v, u in zip(eqn.outvars, out_unknowns) if not u]
  known_eqn = core.JaxprEqn(
      [v for v, u in zip(eqn.invars, unknowns) if not u], [*known_outs, *res_vars], jit_p,
      {"jaxpr": known_closed, "name": name})
  unknown_eqn = core.JaxprEqn(
      [*res_vars, *[v for v, u in zip(eqn.invars, unknowns) if u]],
      [v for v, u in zip(eqn.outvars, out_unknowns) if u], jit_p,
      {"jaxpr": unknown_closed, "name": name})
  return known_eqn, unknown_eqn, out_unknowns


def _jit_transpose(cts, *args, jaxpr: ClosedJaxpr, name: str):
  # The transpose of a linear call is a call of the transposed jaxpr.
  undefined = tuple(ad.is_undefined_primal(a) for a in args)
  ct_nonzeros = tuple(type(c) is not ad.Zero for c in cts)
  t_closed, consts = _memo(_transpose_cache, jaxpr, (undefined, ct_nonzeros),
                           lambda: ad.transpose_jaxpr(jaxpr, undefined, ct_nonzeros))
  outs = jit_p.bind(*consts, *[a for a, u in zip(args, undefined) if not u],
                    *[c for c in cts if type(c) is not ad.Zero], jaxpr=t_closed,
                    name=f"transpose({name})")
  it = iter(outs)
  return [next(it) if u else None for u in undefined]


_dce_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _jit_dce(used_outs, eqn):
  # Unused outputs of a call, and the work and inputs only they needed, go.
  if not any(used_outs):
    return [False] * len(eqn.invars), None
  closed = eqn.params["jaxpr"]

  def make():
    j, used_ins = pe.dce_jaxpr(closed.jaxpr, used_outs)
    return ClosedJaxpr(j, []), used_ins
  new_closed, used_ins = _memo(_dce_cache, closed, tuple(used_outs), make)
  if all(used_outs) and all(used_ins):
    return used_ins, eqn
  return used_ins, eqn.replace(
      invars=[v for v, u in zip(eqn.invars, used_ins) if u],
      outvars=[v for v, u in zip(eqn.outvars, used_outs) if u],
      params={**eqn.params, "jaxpr": new_closed})


_batch_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _jit_batch(axis_data, args, dims, *, jaxpr: ClosedJaxpr, name: str):
  # vmap of a call is a call of the batched jaxpr: it stays one staged `jit` equation. An
  # axis rule (called even with no batched argument) so collectives inside see the axis.
  key = (tuple(dims), axis_data)
  b_closed, consts, out_dims = _memo(
      _batch_cache, jaxpr, key,
      lambda: batching.batch_jaxpr(jaxpr, axis_data, dims, [None] * len(jaxpr.out_avals)))
  outs = jit_p.bind(*consts, *args, jaxpr=b_closed, name=name)
  return outs, out_dims


jit_p.def_abstract_eval(_jit_abstract_eval)
jit_p.def_impl(_jit_impl)
lowering.register_lowering(jit_p, _jit_lowering)
ad.primitive_jvps[jit_p] = _jit_jvp
ad.partial_eval_rules[jit_p] = _jit_partial_eval
ad.primitive_transposes[jit_p] = _jit_transpose
pe.dce_rules[jit_p] = _jit_dce
batching.axis_primitive_batchers[jit_p] = _jit_batch
core.pp_param_order[jit_p] = ("name", "jaxpr")


# ---------------------------------------------------------------------------
# Argument handling shared by jit, make_jaxpr and eval_shape


def _abstractify(x: Any, path: str, fun_name: str) -> ShapedArray:
  t = type(x)
  if t is Array:
    return x.aval
  try:
    return core.get_aval(x)
  except TypeError:
    pass
  if isinstance(x, ShapeDtypeStruct) or (hasattr(x, "shape") and hasattr(x, "dtype")
                                         and not isinstance(x, type)):
    try:
      return ShapedArray(tuple(int(d) for d in x.shape), dtypes.canonicalize_dtype(x.dtype),
                         bool(getattr(x, "weak_type", False)))
    except TypeError:
      pass
  raise TypeError(
      f"Error interpreting argument to {fun_name} as an abstract array. The problematic value "
      f"is of type {type(x)} and was passed to the function at path {path}. This typically "
      f"means that a jit-wrapped function was called with a non-array argument, and this "
      f"argument was not marked as static using the static_argnums or static_argnames "
      f"parameters of jit.")


def _fun_name(fun: Callable) -> str:
  return getattr(fun, "__name__", None) or type(fun).__name__


def _signature(fun: Callable):
  try:
    return inspect.signature(fun)
  except (TypeError, ValueError):
    return None


def _arg_names(sig, dyn_argnums: Sequence[int], dyn_kwarg_names: Sequence[str],
               args_tree_with_paths) -> tuple[tuple[str, ...], tuple[int | str, ...]]:
  """One readable name per flat leaf (`x`, `params['w']`) and the top-level origin."""
  params = list(sig.parameters.values()) if sig is not None else []
  positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY,
                                                     p.POSITIONAL_OR_KEYWORD)]
  var_pos = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
  names, origins = [], []
  for path, _ in args_tree_with_paths:
    top, rest = path[0], path[1:]   # (args, kwargs) tuple
    if top.idx == 0:
      i = rest[0].idx
      argnum = dyn_argnums[i]
      if argnum < len(positional):
        base = positional[argnum]
      elif var_pos is not None:
        base = f"{var_pos}[{argnum - len(positional)}]"
      else:
        base = f"args[{argnum}]"
      names.append(base + tree_util.keystr(rest[1:]))
      origins.append(argnum)
    else:
      key = rest[0].key
      names.append(str(key) + tree_util.keystr(rest[1:]))
      origins.append(str(key))
  return tuple(names), tuple(origins)


def _check_out_leaves(leaves, out_tree, fun_name: str, what: str):
  for i, leaf in enumerate(leaves):
    if isinstance(leaf, core.Tracer) or type(leaf) is Array:
      continue
    if not core.valid_array_type(leaf):
      paths = tree_util.tree_flatten_with_path(tree_util.tree_unflatten(out_tree, leaves))[0]
      path = tree_util.keystr(paths[i][0]) if i < len(paths) else f"leaf {i}"
      raise TypeError(
          f"The function {fun_name} passed to {what} returned a value of type "
          f"{type(leaf).__name__} at output{path or ' (the whole output)'}, which is not a "
          f"valid array type. Return arrays, scalars, or pytrees of them.")


class _Traced:
  """The result of tracing one signature: the jaxpr with consts as leading invars, and its
  compiled calls (for the default device, and per other device)."""
  __slots__ = ("jaxpr", "consts", "out_tree", "executable", "device_calls", "__weakref__")

  def __init__(self, jaxpr: ClosedJaxpr, consts: list, out_tree):
    self.jaxpr = jaxpr
    self.consts = consts
    self.out_tree = out_tree
    self.executable = None
    self.device_calls = {}


def trace_flat(fun: Callable, args: tuple, kwargs: dict, static_argnums: Sequence[int],
               static_argnames: Sequence[str], traced_for: str,
               in_avals: Sequence[ShapedArray] | None = None) -> tuple[_Traced, Any]:
  """Traces `fun(*args, **kwargs)` with the static arguments fixed; returns the traced
  signature (consts as leading invars) and the flat dynamic leaves."""
  fun_name = _fun_name(fun)
  dyn_argnums = [i for i in range(len(args)) if i not in static_argnums]
  dyn_args = tuple(args[i] for i in dyn_argnums)
  dyn_kwargs = {k: v for k, v in kwargs.items() if k not in static_argnames}
  leaves, in_tree = _flatten((dyn_args, dyn_kwargs))
  sig = _signature(fun)
  with_paths = tree_util.tree_flatten_with_path((dyn_args, dyn_kwargs))[0]
  names, origins = _arg_names(sig, dyn_argnums, list(dyn_kwargs), with_paths)
  if in_avals is None:
    in_avals = [_abstractify(x, names[i], fun_name) for i, x in enumerate(leaves)]
  debug = DebugInfo(traced_for, fun_name, names, origins)
  out_tree_box = []

  def flat_fun(*flat):
    d_args, d_kwargs = optree.tree_unflatten(in_tree, flat)
    full = list(d_args)
    for i in sorted(static_argnums):
      if i < len(args):
        full.insert(i, args[i])
    all_kwargs = {**{k: v for k, v in kwargs.items() if k in static_argnames}, **d_kwargs}
    out = fun(*full, **all_kwargs)
    out_leaves, out_tree = _flatten(out)
    _check_out_leaves(out_leaves, out_tree, fun_name, traced_for)
    out_tree_box.append(out_tree)
    return out_leaves

  jaxpr, consts = pe.trace_to_jaxpr(flat_fun, in_avals, debug)
  closed = ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), [])
  return _Traced(closed, list(consts), out_tree_box[0]), leaves


# ---------------------------------------------------------------------------
# jit

_fun_caches: "weakref.WeakKeyDictionary[Callable, dict]" = weakref.WeakKeyDictionary()


def _cache_for(fun: Callable, options: tuple) -> dict:
  try:
    per_fun = _fun_caches.get(fun)
    if per_fun is None:
      per_fun = _fun_caches[fun] = {}
  except TypeError:   # not weakly referenceable: a cache for this wrapper only
    return {}
  return per_fun.setdefault(options, {})


def _normalize_argnums(argnums, name: str) -> tuple[int, ...]:
  if argnums is None:
    return ()
  if isinstance(argnums, int):
    argnums = (argnums,)
  try:
    return tuple(int(i) for i in argnums)
  except TypeError:
    raise TypeError(f"jit: {name} must be an int or a sequence of ints, got {argnums!r}.")


def _normalize_argnames(argnames, name: str) -> tuple[str, ...]:
  if argnames is None:
    return ()
  if isinstance(argnames, str):
    return (argnames,)
  return tuple(argnames)


class _CompiledCall:
  """A compiled signature's call: leaves in, Arrays out. `device` is where it runs (None:
  the default device)."""
  __slots__ = ("exe", "kept", "const_bufs", "in_avals", "out_avals", "out_tree", "donated",
               "simple", "single", "text", "device")

  def __init__(self, exe, kept, const_bufs, in_avals, out_avals, out_tree, donated, text,
               device):
    self.exe = exe
    self.kept = kept                  # indices of the leaves the program reads, or None: all
    self.const_bufs = const_bufs
    self.in_avals = in_avals          # avals of all dynamic leaves
    self.out_avals = out_avals
    self.out_tree = out_tree
    self.donated = donated            # leaf indices donated, or ()
    self.simple = not const_bufs and not donated and device is None
    self.single = out_tree.num_leaves == 1 and out_tree.num_nodes == 1
    self.text = text
    self.device = device

  def call_arrays(self, args: Sequence[Array]):
    """The fast path: every argument is an Array on the default device."""
    bufs = ([x._buf for x in args] if self.kept is None
            else [args[i]._buf for i in self.kept])
    try:
      results = self.exe.execute_sharded(bufs).disassemble_into_single_device_arrays()
    except TypeError:
      dispatch._raise_if_donated(args)
      raise
    if self.single:
      return Array(results[0][0], self.out_avals[0])
    return optree.tree_unflatten(self.out_tree, [
        Array(r[0], av) for r, av in zip(results, self.out_avals)])

  def __call__(self, leaves: Sequence[Any]):
    in_avals, dev = self.in_avals, self.device
    idx = range(len(leaves)) if self.kept is None else self.kept
    if dev is None and not dispatch.placement_used[0]:
      bufs = [leaves[i]._buf if type(leaves[i]) is Array
              else dispatch.to_buffer(leaves[i], in_avals[i]) for i in idx]
    else:
      bufs = [dispatch.to_buffer(leaves[i], in_avals[i], dev) for i in idx]
    if self.const_bufs:
      bufs = [*self.const_bufs, *bufs]
    try:
      results = self.exe.execute_sharded(bufs).disassemble_into_single_device_arrays()
    except TypeError:
      dispatch._raise_if_donated(leaves)
      raise
    for i in self.donated:
      x = leaves[i]
      if type(x) is Array and x._buf is not None and x._buf.is_deleted():
        x._buf = None
    outs = [Array(r[0], av, dev) for r, av in zip(results, self.out_avals)]
    return optree.tree_unflatten(self.out_tree, outs)


class _SpmdCall:
  """A compiled signature whose program spans several devices (jit of pmap): replicated
  arguments in, replicated results out (one copy each)."""
  simple = False

  def __init__(self, lowered: LoweredSignature, exe=None):
    entry = lowered.entry
    jaxpr = entry.jaxpr.jaxpr
    nconst = len(entry.consts)
    devs = lowered.spmd_devices
    if exe is None:
      exe = dispatch.compile_module(lowered.text, devs, num_partitions=len(devs))
    self.exe = exe
    self.kept = lowered.kept
    self.consts = [entry.consts[i] for i in lowered.used_consts]
    self.in_avals = [v.aval for v in jaxpr.invars[nconst:]]
    self.out_avals = jaxpr.out_avals
    self.out_tree = entry.out_tree
    self.donated = lowered.donated
    self.text = lowered.text
    self.device = None
    const_avals = [jaxpr.invars[i].aval for i in lowered.used_consts]
    idx = range(len(self.in_avals)) if self.kept is None else self.kept
    self.program = pxla.replicated_program(
        exe, devs, [*const_avals, *[self.in_avals[i] for i in idx]], self.out_avals,
        self.text, [len(const_avals) + k for k, i in enumerate(idx) if i in self.donated])

  def __call__(self, leaves: Sequence[Any]):
    idx = range(len(leaves)) if self.kept is None else self.kept
    outs = self.program.call([*self.consts, *[leaves[i] for i in idx]])
    return optree.tree_unflatten(self.out_tree, outs)


class _ShardedCall:
  """A compiled signature whose program spans a device mesh (sharded jit): arguments laid
  out by the program's input shardings, results Arrays over the mesh."""
  simple = False

  def __init__(self, lowered: LoweredSignature, exe=None):
    from stagecraft.interpreters import sharded
    entry = lowered.entry
    mesh, in_sh, out_sh, self._given_in = lowered.mesh_layout
    jaxpr = entry.jaxpr.jaxpr
    nconst = len(entry.consts)
    self.kept = lowered.kept
    self.in_avals = [v.aval for v in jaxpr.invars[nconst:]]
    self.out_avals = jaxpr.out_avals
    self.out_tree = entry.out_tree
    self.donated = lowered.donated
    self.text = lowered.text
    self.device = None
    idx = range(len(self.in_avals)) if self.kept is None else self.kept
    mask = [False] * len(lowered.used_consts) + [i in self.donated for i in idx]
    self.program = sharded.compile_sharded(lowered.name, lowered.dce_jaxpr, mesh, in_sh,
                                           out_sh, donated=mask, text=lowered.text, exe=exe)
    self.exe = self.program.exe
    nc = len(lowered.used_consts)
    # NB: constants go to the devices once, laid out as the program wants them.
    self.consts = [Array(pxla.shard_arg(entry.consts[i], jaxpr.invars[i].aval, sh),
                         jaxpr.invars[i].aval, None, sh)
                   for i, sh in zip(lowered.used_consts, self.program.in_shardings[:nc])]
    self.arg_shardings = self.program.in_shardings[nc:]
    self.mesh = mesh
    self.names = lowered.names
    kept = set(idx)
    self._pruned = [i for i, g in enumerate(self._given_in) if i not in kept and g is not None]

  def __call__(self, leaves: Sequence[Any]):
    idx = range(len(leaves)) if self.kept is None else self.kept
    args = [leaves[i] for i in idx]
    for k, (x, sh) in enumerate(zip(args, self.arg_shardings)):
      if type(x) is Array and (x._sharding is not None or x._device is not None):
        if x._sharding is not sh and x.sharding != sh:
          self._mismatch(list(idx)[k], x, sh)
    if self.kept is not None:   # NB: a pruned leaf must still fit the layout it was given
      for i in self._pruned:
        x, sh = leaves[i], self._given_in[i]
        if type(x) is Array and (x._sharding is not None or x._device is not None):
          if x.sharding != sh:
            self._mismatch(i, x, sh)
    outs = self.program.call([*self.consts, *args])
    return optree.tree_unflatten(self.out_tree, outs)

  def _mismatch(self, i, x, sh):
    from stagecraft.errors import DeviceAssignmentMismatchError
    name = self.names[i] if self.names else f"{i}"
    what = f"argument {name} with shape {x.aval.str_short()}"
    if tuple(x.sharding._device_assignment) != tuple(sh._device_assignment):
      raise DeviceAssignmentMismatchError(
          f"Received incompatible devices for jitted computation. Got {what} with device ids "
          f"{[d.id for d in x.sharding._device_assignment]} and the compiled input sharding "
          f"with device ids {[d.id for d in sh._device_assignment]}. Move it first with "
          f"stagecraft.device_put(x, sharding).")
    raise ValueError(f"Array(s) sharding does not match the input(s) sharding. Here are the "
                     f"1 mismatches:\nGot Array sharding: {x.sharding} and input sharding: "
                     f"{sh} for {what}\nMove the argument with stagecraft.device_put(x, "
                     f"sharding) first.")

  def input_shardings(self) -> list:
    """One sharding per dynamic leaf (pruned leaves: the sharding given for them by
    in_shardings or their committed layout, else replicated over the mesh)."""
    from stagecraft.sharding import NamedSharding, PartitionSpec
    out = [NamedSharding(self.mesh, PartitionSpec()) if g is None else g
           for g in self._given_in]
    idx = range(len(self.in_avals)) if self.kept is None else self.kept
    for i, sh in zip(idx, self.arg_shardings):
      out[i] = sh
    return out


class JitWrapped:
  """The function returned by `jit`. Calling it runs the compiled program for the arguments'
  signature (tracing and compiling on the first call of a signature)."""

  def __init__(self, fun: Callable, static_argnums, static_argnames, donate_argnums,
               donate_argnames, keep_unused: bool, inline: bool, device=None,
               backend: str | None = None, in_shardings=None, out_shardings=None):
    if not callable(fun):
      raise TypeError(f"jit expects a callable, got {fun!r} of type {type(fun).__name__}.")
    if device is not None and backend is not None:
      raise ValueError("jit: pass at most one of `device` and `backend`.")
    self._sharded = in_shardings is not None or out_shardings is not None
    if self._sharded and (device is not None or backend is not None):
      raise ValueError("jit: `device`/`backend` and in_shardings/out_shardings cannot be "
                       "combined; the shardings name the devices.")
    self._in_shardings = in_shardings
    self._out_shardings = out_shardings
    if backend is not None:
      device = client.devices(backend)[0]
    if device is not None and not hasattr(device, "client"):
      raise TypeError(f"jit: `device` must be a device from stagecraft.devices(), got "
                      f"{device!r}.")
    # NB: None stands for the default device everywhere in dispatch.
    self._device = None if device is None or device == client.default_device() else device
    if self._device is not None:
      dispatch.placement_used[0] = True
    functools.update_wrapper(self, fun)
    self._fun = fun
    sig = _signature(fun)
    static_argnums = _normalize_argnums(static_argnums, "static_argnums")
    static_argnames = _normalize_argnames(static_argnames, "static_argnames")
    donate_argnums = _normalize_argnums(donate_argnums, "donate_argnums")
    donate_argnames = _normalize_argnames(donate_argnames, "donate_argnames")
    pos: list[str] = []
    var_positional = sig is None
    if sig is not None:
      params = list(sig.parameters.values())
      pos = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
      var_positional = any(p.kind == p.VAR_POSITIONAL for p in params)
      if not var_positional:
        # NB: with *args, negative positions depend on each call's length (resolved then).
        static_argnums = tuple(i + len(pos) if i < 0 else i for i in static_argnums)
        donate_argnums = tuple(i + len(pos) if i < 0 else i for i in donate_argnums)
      # Infer each of static_argnums/static_argnames from the other, as JAX does.
      static_argnames = tuple(dict.fromkeys(
          [*static_argnames, *(pos[i] for i in static_argnums if 0 <= i < len(pos))]))
      static_argnums = tuple(sorted(set(
          [*static_argnums, *(pos.index(k) for k in static_argnames if k in pos)])))
      donate_argnums = tuple(sorted(set(
          [*donate_argnums, *(pos.index(k) for k in donate_argnames if k in pos)])))
    if set(static_argnums) & set(donate_argnums):
      raise ValueError(f"jit: arguments {sorted(set(static_argnums) & set(donate_argnums))} "
                       f"are both static and donated; static arguments cannot be donated.")
    self._pos_names = pos
    self._static_argnums = static_argnums
    self._static_argnames = static_argnames
    self._donate_argnums = donate_argnums
    self._donate_argnames = donate_argnames
    self._negative_argnums = any(i < 0 for i in (*static_argnums, *donate_argnums))
    self._keep_unused = bool(keep_unused)
    self._inline = bool(inline)
    self._fast = (not static_argnums and not static_argnames and self._device is None and
                  not self._sharded)
    options = (static_argnums, static_argnames, donate_argnums, donate_argnames,
               self._keep_unused)
    # NB: shardings are per wrapper (prefix trees need not be hashable).
    self._cache = {} if self._sharded else _cache_for(fun, options)

  def __repr__(self):
    return f"<jitted function {_fun_name(self._fun)}>"

  def __get__(self, obj, objtype=None):
    if obj is None:
      return self
    return functools.partial(self, obj)

  def _argnums_for(self, nargs: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """static_argnums and donate_argnums for a call with `nargs` positional arguments."""
    if not self._negative_argnums:
      return self._static_argnums, self._donate_argnums
    return (tuple(sorted(i % nargs if i < 0 else i for i in self._static_argnums)),
            tuple(sorted(i % nargs if i < 0 else i for i in self._donate_argnums)))

  # -- keys

  def _key(self, args, kwargs, static_argnums):
    if self._fast:
      leaves, treedef = _flatten((args, kwargs))
      static = ()
    else:
      static = tuple(args[i] for i in static_argnums if i < len(args)) + tuple(
          (k, kwargs[k]) for k in self._static_argnames if k in kwargs)
      dyn_args = tuple(a for i, a in enumerate(args) if i not in static_argnums)
      dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self._static_argnames}
      leaves, treedef = _flatten((dyn_args, dyn_kwargs))
      try:
        hash(static)
      except TypeError as e:
        bad = next(s for s in static if not _hashable(s))
        bad = bad[1] if isinstance(bad, tuple) and len(bad) == 2 and isinstance(
            bad[0], str) and not _hashable(bad[1]) else bad
        raise TypeError(
            f"Non-hashable static arguments are not supported. An error occurred while "
            f"trying to hash an object of type {type(bad)}, {bad!r}. The error was:\n"
            f"TypeError: {e}") from None
    try:
      sig = [x.aval if type(x) is Array or isinstance(x, core.Tracer) else _leaf_sig(x)
             for x in leaves]
    except (TypeError, OverflowError):
      self._raise_bad_leaf(args, kwargs, static_argnums)
      raise
    dev = self._device
    if dev is None and (dispatch.placement_used[0] or self._sharded):
      dev = dispatch.target_placement(leaves)
      if self._sharded and type(dev) is not dispatch.Placement:
        dev = dispatch.Placement(dispatch._committed(x) for x in leaves)
    return (treedef, static, config.state_key, dev, *sig), leaves, dev

  def _raise_bad_leaf(self, args, kwargs, static_argnums):
    """Re-raises a signature error naming the argument's key path."""
    dyn_argnums = [i for i in range(len(args)) if i not in static_argnums]
    dyn = (tuple(args[i] for i in dyn_argnums),
           {k: v for k, v in kwargs.items() if k not in self._static_argnames})
    with_paths = tree_util.tree_flatten_with_path(dyn)[0]
    names, _ = _arg_names(_signature(self._fun), dyn_argnums, list(dyn[1]), with_paths)
    for name, (_, x) in zip(names, with_paths):
      try:
        _abstractify(x, name, _fun_name(self._fun))
      except OverflowError as e:
        raise OverflowError(f"{e} The value was passed to {_fun_name(self._fun)} as the "
                            f"argument at path {name}.") from None

  # -- calls

  def __call__(self, *args, **kwargs):
    # Fast path: positional arguments whose leaves are all Arrays on the default device, a
    # signature compiled before (keyed by the arguments' tree structure and avals).
    if (not kwargs and self._fast and core._state.trace is core.eval_trace
        and not dispatch.placement_used[0] and not config.disable_jit):
      leaves, treedef = _flatten(args)
      avals = [a.aval for a in leaves if type(a) is Array]
      if len(avals) == len(leaves):
        call = self._cache.get((treedef, config.state_key, *avals))
        if call is not None:
          return call.call_arrays(leaves)
    return self._call(args, kwargs)

  def _call(self, args, kwargs):
    if config.disable_jit:
      return self._fun(*args, **kwargs)
    static_argnums, donate_argnums = self._argnums_for(len(args))
    key, leaves, dev = self._key(args, kwargs, static_argnums)
    entry = self._cache.get(key)
    if entry is None:
      entry = self._cache[key] = self._trace(args, kwargs, static_argnums)
    if core._state.trace is not core.eval_trace:
      if self._sharded:   # inside another jit the shardings act as constraints (as in JAX)
        return self._constrained_call(entry, args, kwargs, static_argnums, leaves)
      outs = jit_p.bind(*entry.consts, *leaves, jaxpr=entry.jaxpr,
                        name=_fun_name(self._fun))
      return optree.tree_unflatten(entry.out_tree, outs)
    call = entry.executable if dev is None else entry.device_calls.get(dev)
    if call is None:
      donated = self._donated_leaves(args, kwargs, static_argnums, donate_argnums)
      if type(dev) is dispatch.Placement:
        layout = self._layout(entry, args, kwargs, static_argnums, dev)
        call = compile_lowered(lower_traced(entry, donated, self._keep_unused,
                                            _fun_name(self._fun), layout=layout))
        entry.device_calls[dev] = call
        return call(leaves)
      call = compile_traced(entry, donated, self._keep_unused, _fun_name(self._fun), dev)
      if dev is not None:
        entry.device_calls[dev] = call
      else:
        entry.executable = call
        if not kwargs and self._fast and call.simple and all(type(a) is Array
                                                               for a in leaves):
          self._cache[(_flatten(args)[1], config.state_key, *[a.aval for a in leaves])] = call
    return call(leaves)

  def _trace(self, args, kwargs, static_argnums) -> _Traced:
    for i in static_argnums:
      if i < len(args) and isinstance(args[i], core.Tracer):
        raise TypeError(f"jit: static argument {i} of {_fun_name(self._fun)} is a traced "
                        f"value ({args[i].aval.str_short()}); static arguments must be "
                        f"concrete, hashable Python values.")
    traced, _ = trace_flat(self._fun, args, kwargs, static_argnums,
                           self._static_argnames, "jit")
    return traced

  def _constrained_call(self, entry, args, kwargs, static_argnums, leaves):
    from stagecraft.interpreters import sharded
    lay = self._layout(entry, args, kwargs, static_argnums, [None] * len(leaves))
    bind = lambda xs, shs: [x if s is None else sharded.sharding_constraint_p.bind(x, sharding=s)
                            for x, s in zip(xs, shs or [None] * len(xs))]
    outs = jit_p.bind(*entry.consts, *bind(leaves, lay.explicit_in), jaxpr=entry.jaxpr,
                      name=_fun_name(self._fun))
    return optree.tree_unflatten(entry.out_tree, bind(outs, lay.explicit_out))

  def _layout(self, entry, args, kwargs, static_argnums, placement) -> "_Layout":
    """What a sharded signature's layout depends on: committed shardings, jit's shardings
    (flattened per leaf) and names for error messages."""
    from stagecraft.interpreters import sharded
    dyn_argnums = [i for i in range(len(args)) if i not in static_argnums]
    dyn_args = tuple(args[i] for i in dyn_argnums)
    dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self._static_argnames}
    explicit_in = explicit_out = None
    if self._in_shardings is not None:
      if dyn_kwargs:
        raise ValueError(f"jit: {_fun_name(self._fun)} was called with keyword arguments "
                         f"{sorted(dyn_kwargs)}, but in_shardings are given for positional "
                         f"arguments only; pass them positionally.")
      explicit_in = sharded.flatten_shardings(self._in_shardings, dyn_args,
                                              "jit in_shardings")
    if self._out_shardings is not None:
      out_shape = optree.tree_unflatten(entry.out_tree, [0] * entry.out_tree.num_leaves)
      explicit_out = sharded.flatten_shardings(self._out_shardings, out_shape,
                                               "jit out_shardings")
    with_paths = tree_util.tree_flatten_with_path((dyn_args, dyn_kwargs))[0]
    names, _ = _arg_names(_signature(self._fun), dyn_argnums, list(dyn_kwargs), with_paths)
    return _Layout(list(placement), explicit_in, explicit_out, names, _fun_name(self._fun))

  # -- ahead-of-time stages (stagecraft.stages)

  def trace(self, *args, **kwargs):
    """Traces `fun` for the signature of `args` (arrays, scalars, ShapeDtypeStructs or any
    object with `shape` and `dtype`; static arguments as concrete values).

    Returns:
      A `stagecraft.stages.Traced` (`.jaxpr`, `.out_info`, `.lower()`).

    Raises:
      TypeError: as a call would for bad arguments, and whatever `fun` raises when traced.
    """
    from stagecraft import stages   # NB: stages builds on this module
    return stages.trace_jit(self, args, kwargs)

  def lower(self, *args, **kwargs):
    """Traces and lowers `fun` for the signature of `args` (as `trace`).

    Returns:
      A `stagecraft.stages.Lowered` (`.as_text()`, `.compile()`, `.cost_analysis()`, ...).
    """
    return self.trace(*args, **kwargs).lower()

  def _stage(self, args, kwargs):
    """The traced signature of a call (from the jit cache, tracing on a miss) with its flat
    dynamic leaves, device, static argnums and donated leaf indices."""
    static_argnums, donate_argnums = self._argnums_for(len(args))
    key, leaves, dev = self._key(args, kwargs, static_argnums)
    entry = self._cache.get(key)
    if entry is None:
      entry = self._cache[key] = self._trace(args, kwargs, static_argnums)
    donated = self._donated_leaves(args, kwargs, static_argnums, donate_argnums)
    return entry, leaves, dev, static_argnums, donated

  def _donated_leaves(self, args, kwargs, static_argnums, donate_argnums) -> set[int]:
    """Flat indices of the dynamic leaves that belong to donated arguments."""
    if not donate_argnums and not self._donate_argnames:
      return set()
    out, pos = set(), 0
    for i, a in enumerate(args):
      if i in static_argnums:
        continue
      n = len(_flatten(a)[0])
      if i in donate_argnums:
        out.update(range(pos, pos + n))
      pos += n
    for k in sorted(kwargs):   # NB: dict leaves flatten in sorted-key order
      if k in self._static_argnames:
        continue
      n = len(_flatten(kwargs[k])[0])
      if k in self._donate_argnames:
        out.update(range(pos, pos + n))
      pos += n
    return out


def _hashable(x) -> bool:
  try:
    hash(x)
    return True
  except TypeError:
    return False


def _leaf_sig(x):
  t = type(x)
  if t in dtypes._python_scalar_kind:
    return core.get_aval(x)
  if t is np.ndarray:
    return ShapedArray(x.shape, dtypes.canonicalize_dtype(x.dtype), False)
  return _abstractify(x, "?", "jit")


class _Layout:
  """A sharded jit signature's layout inputs: per dynamic leaf its committed sharding (or
  None) and jit's in_sharding (or None), per output jit's out_sharding, leaf names."""
  __slots__ = ("committed", "explicit_in", "explicit_out", "names", "fun_name")

  def __init__(self, committed, explicit_in, explicit_out, names, fun_name):
    self.committed = committed
    self.explicit_in = explicit_in
    self.explicit_out = explicit_out
    self.names = names
    self.fun_name = fun_name

  def describe(self, avals):
    return lambda i: (f"argument {self.names[i]} of {self.fun_name} with shape "
                      f"{avals[i].str_short()}")


class LoweredSignature:
  """A traced signature lowered to StableHLO text, not yet compiled: the module `text`, the
  const indices it reads (`used_consts`) and the dynamic leaves it reads (`kept`; None: all)."""
  __slots__ = ("entry", "text", "used_consts", "kept", "donated", "spmd_devices",
               "mesh_layout", "dce_jaxpr", "name", "names")

  def __init__(self, entry: _Traced, text: str, used_consts: list[int], kept: list[int] | None,
               donated: tuple[int, ...], spmd_devices: list | None = None, mesh_layout=None,
               dce_jaxpr=None, name: str = "", names=None):
    self.entry = entry
    self.text = text
    self.used_consts = used_consts
    self.kept = kept
    self.donated = donated
    self.spmd_devices = spmd_devices   # the devices of a program containing pmaps, or None
    # A program over a user's mesh: (mesh, shardings of main's args, of its results, of
    # every dynamic leaf pruned or not; None: left to the partitioner).
    self.mesh_layout = mesh_layout
    self.dce_jaxpr = dce_jaxpr
    self.name = name
    self.names = names


def lower_traced(entry: _Traced, donated: set[int], keep_unused: bool,
                 name: str, layout: _Layout | None = None) -> LoweredSignature:
  """Lowers a traced signature to a StableHLO module: unused inputs are pruned (unless
  `keep_unused`), donated leaves are marked; a program over a device mesh (a `layout` from
  sharded arguments or jit's shardings, or meshes used inside) gets its shardings
  (`interpreters.sharded.resolve`)."""
  jaxpr = entry.jaxpr.jaxpr
  nconst = len(entry.consts)
  n_in = len(jaxpr.invars)
  instantiate = [False] * nconst + [keep_unused] * (n_in - nconst)
  dce_jaxpr, used = pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars), instantiate)
  used_consts = [i for i in range(nconst) if used[i]]
  kept_leaves = [i - nconst for i in range(nconst, n_in) if used[i]]
  donated_mask = [False] * len(used_consts) + [i in donated for i in kept_leaves]
  kept = None if len(kept_leaves) == n_in - nconst else kept_leaves
  chain = pxla.mesh_chain(dce_jaxpr)
  explicit = layout is not None and (layout.explicit_in is not None or
                                     layout.explicit_out is not None)
  if chain and not explicit:   # jit of pmap: one SPMD program over the pmaps' devices
    text = pxla.lower_spmd_module(f"jit_{name}", dce_jaxpr, chain, donated=donated_mask)
    return LoweredSignature(entry, text, used_consts, kept, tuple(sorted(donated)),
                            pxla.chain_devices(chain))
  from stagecraft.interpreters import sharded
  n_dyn = n_in - nconst
  if layout is not None or sharded.jaxpr_meshes(dce_jaxpr):
    in_avals = [v.aval for v in jaxpr.invars[nconst:]]
    lay = layout or _Layout([None] * n_dyn, None, None, [f"{i}" for i in range(n_dyn)], name)
    resolved = sharded.resolve(jaxpr, nconst, lay.committed, lay.explicit_in,
                               lay.explicit_out, lay.describe(in_avals))
    if resolved is not None:
      mesh, ins, outs = resolved
      in_sh = [ins[i] for i in range(n_in) if used[i]]
      text = sharded.lower_sharded_module(f"jit_{name}", dce_jaxpr, mesh, in_sh, outs,
                                          donated=donated_mask)
      return LoweredSignature(entry, text, used_consts, kept, tuple(sorted(donated)),
                              mesh_layout=(mesh, in_sh, outs, ins[nconst:]),
                              dce_jaxpr=dce_jaxpr,
                              name=f"jit_{name}", names=lay.names)
  text = lowering.lower_jaxpr_to_module(f"jit_{name}", dce_jaxpr, donated=donated_mask)
  return LoweredSignature(entry, text, used_consts, kept, tuple(sorted(donated)))


def compile_lowered(lowered: LoweredSignature, device=None, exe=None) -> _CompiledCall:
  """Compiles a lowered signature for `device` (None: the default device), unless the
  executable `exe` is given; consts become device buffers once."""
  entry = lowered.entry
  jaxpr = entry.jaxpr.jaxpr
  nconst = len(entry.consts)
  if lowered.spmd_devices is not None:
    return _SpmdCall(lowered, exe)
  if lowered.mesh_layout is not None:
    return _ShardedCall(lowered, exe)
  if exe is None:
    exe = dispatch.compile_module(lowered.text, None if device is None else [device])
  in_avals = [v.aval for v in jaxpr.invars[nconst:]]
  const_bufs = [dispatch.to_buffer(entry.consts[i], jaxpr.invars[i].aval, device)
                for i in lowered.used_consts]
  return _CompiledCall(exe, lowered.kept, const_bufs, in_avals, jaxpr.out_avals,
                       entry.out_tree, lowered.donated, lowered.text, device)


def compile_traced(entry: _Traced, donated: set[int], keep_unused: bool, name: str,
                   device=None) -> _CompiledCall:
  """Lowers and compiles a traced signature for `device` (None: the default device):
  unused inputs are pruned (unless `keep_unused`), consts become device buffers once,
  donated leaves are marked."""
  return compile_lowered(lower_traced(entry, donated, keep_unused, name), device)


def jit(fun: Callable | None = None, *, static_argnums: int | Sequence[int] | None = None,
        static_argnames: str | Iterable[str] | None = None,
        donate_argnums: int | Sequence[int] | None = None,
        donate_argnames: str | Iterable[str] | None = None, keep_unused: bool = False,
        device=None, backend: str | None = None, inline: bool = False,
        in_shardings: Any = None, out_shardings: Any = None):
  """Compiles `fun` with XLA; traces once per argument signature.

  Args:
    fun: a function of arrays (pytrees of arrays, scalars) returning arrays or pytrees.
    static_argnums: positions of arguments that are compile-time constants (hashable);
      each new value retraces. Inferred from `static_argnames` and vice versa.
    static_argnames: names of keyword/positional arguments that are static.
    donate_argnums / donate_argnames: arguments whose buffers the computation may reuse for
      its outputs; a donated Array cannot be used afterwards (DonatedBufferError).
    keep_unused: keep arguments the computation does not read (they are pruned otherwise).
    device: the device to run on (default: the device of committed inputs, else the
      default device). backend: a platform name ('cpu', 'gpu'); its first device.
    inline: accepted for compatibility; nested jits are always staged as calls.
    in_shardings: how the positional arguments are laid out over a device mesh: a
      NamedSharding (or a PartitionSpec inside `with mesh:`), None (unspecified: the
      argument's own layout if it is committed, else the partitioner's choice), or a pytree
      prefix of the positional arguments of those. The program is then one SPMD program
      over the mesh, partitioned by XLA (Shardy); arguments given as NumPy arrays, scalars
      or default-device Arrays are split on the host. A committed Array laid out otherwise
      is an error (move it with `device_put(x, sharding)`).
    out_shardings: the same for the outputs (None: the partitioner's choice).

  Returns:
    A callable with `fun`'s signature returning Arrays in `fun`'s output structure.

  Raises:
    TypeError: for a non-callable `fun`, unhashable static arguments, arguments that are
      not arrays (naming their key path), traced static arguments, or a bad `device`.
    ValueError: for arguments both static and donated, or both `device` and `backend`;
      at call time, for a committed argument laid out otherwise than its in_sharding.
    DeviceAssignmentMismatchError: at call time, when committed arguments, shardings and
      meshes used inside name different devices (each side named).

  Example:
    >>> import stagecraft, stagecraft.numpy as jnp
    >>> f = stagecraft.jit(lambda x, y: jnp.sin(x) * y)
    >>> f(jnp.arange(3.0), 2.0)
    Array([0.       , 1.6829419, 1.8185948], dtype=float32)
  """
  if fun is None:
    return functools.partial(jit, static_argnums=static_argnums,
                             static_argnames=static_argnames, donate_argnums=donate_argnums,
                             donate_argnames=donate_argnames, keep_unused=keep_unused,
                             device=device, backend=backend, inline=inline,
                             in_shardings=in_shardings, out_shardings=out_shardings)
  return JitWrapped(fun, static_argnums, static_argnames, donate_argnums, donate_argnames,
                    keep_unused, inline, device, backend, in_shardings, out_shardings)


# ---------------------------------------------------------------------------
# make_jaxpr, eval_shape


def make_jaxpr(fun: Callable, static_argnums: int | Sequence[int] = (),
               return_shape: bool = False) -> Callable[..., ClosedJaxpr]:
  """Returns a function that traces `fun` and gives its ClosedJaxpr.

  Args:
    fun: the function to trace.
    static_argnums: positions of arguments treated as Python constants.
    return_shape: also return the output pytree of ShapeDtypeStructs.

  Returns:
    `f(*args, **kwargs) -> ClosedJaxpr` (and the output shapes with `return_shape`). Args
    may be arrays, scalars or ShapeDtypeStructs.

  Example:
    >>> import stagecraft, stagecraft.numpy as jnp
    >>> print(stagecraft.make_jaxpr(lambda x: jnp.sin(x) * 2.0)(jnp.ones(3)))
    { lambda ; a:f32[3]. let b:f32[3] = sin a; c:f32[3] = mul b 2.0:f32[] in (c,) }
  """
  static_argnums = _normalize_argnums(static_argnums, "static_argnums")

  @functools.wraps(fun)
  def make(*args, **kwargs):
    traced, _ = trace_flat(fun, args, kwargs, static_argnums, (), "make_jaxpr")
    jaxpr = traced.jaxpr.jaxpr
    nconst = len(traced.consts)
    closed = ClosedJaxpr(jaxpr.replace(constvars=jaxpr.invars[:nconst],
                                       invars=jaxpr.invars[nconst:]), traced.consts)
    if return_shape:
      shapes = optree.tree_unflatten(traced.out_tree, [
          ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type) for a in jaxpr.out_avals])
      return closed, shapes
    return closed
  return make


def eval_shape(fun: Callable, *args, **kwargs):
  """Output shapes and dtypes of `fun(*args, **kwargs)` without running it.

  Args may be arrays, scalars or ShapeDtypeStructs (anything with `shape` and `dtype`).

  Returns:
    The output pytree with a ShapeDtypeStruct (keeping weak types) at each leaf.
  """
  traced, _ = trace_flat(fun, args, kwargs, (), (), "eval_shape")
  return optree.tree_unflatten(traced.out_tree, [
      ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type)
      for a in traced.jaxpr.out_avals])


# ---------------------------------------------------------------------------
# Differentiation: jvp, linearize, vjp, grad, value_and_grad (interpreters/ad.py)


def _flat_fun(fun: Callable, in_tree, has_aux: bool, store: list):
  """`fun` on flat inputs with flat outputs; records (out_tree, n_out, aux_tree)."""
  def flat(*leaves):
    args = optree.tree_unflatten(in_tree, leaves)
    out = fun(*args)
    aux = None
    if has_aux:
      if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise TypeError(f"has_aux=True requires {_fun_name(fun)} to return a pair "
                        f"(output, auxiliary data), got {type(out).__name__}.")
      out, aux = out
    out_leaves, out_tree = _flatten(out)
    _check_out_leaves(out_leaves, out_tree, _fun_name(fun), "differentiation")
    aux_leaves, aux_tree = _flatten(aux)
    store[:] = [out_tree, len(out_leaves), aux_tree]
    return [*out_leaves, *aux_leaves]
  return flat


def _check_tangent(p, t, path: str):
  pa, ta = core.get_aval(p), core.get_aval(t) if not _is_float0(t) else None
  expected = ad.tangent_aval(pa).dtype
  got = dtypes.float0 if _is_float0(t) else ta.dtype
  if expected != got:
    raise TypeError(
        f"primal and tangent arguments to jvp do not match; dtypes must be equal, or in case "
        f"of int/bool primal dtype the tangent dtype must be float0. Got primal dtype "
        f"{pa.dtype.name} and so expected tangent dtype {expected.name}, but got tangent "
        f"dtype {got.name} instead (at {path or 'the root'}).")
  shape = np.shape(t)
  if tuple(shape) != pa.shape:
    raise ValueError(f"jvp called with different primal and tangent shapes: got primal "
                     f"shape {pa.shape} and tangent shape {tuple(shape)} at "
                     f"{path or 'the root'}.")


def _is_float0(x) -> bool:
  return getattr(x, "dtype", None) == dtypes.float0


def _out_tangent(t):
  return ad.instantiate_zeros(t)


def jvp(fun: Callable, primals: Sequence[Any], tangents: Sequence[Any], has_aux: bool = False):
  """Forward-mode derivative: `fun(*primals)` and its directional derivative along
  `tangents`.

  Args:
    fun: a function of arrays (pytrees) returning arrays (pytrees).
    primals: a tuple or list of the arguments.
    tangents: the same structure; each tangent has its primal's shape and dtype, or dtype
      float0 for integer and bool primals.
    has_aux: `fun` returns `(output, aux)`; aux is returned undifferentiated.

  Returns:
    `(primals_out, tangents_out)` (and `aux` with has_aux).

  Raises:
    TypeError: if primals/tangents are not tuples or lists, their structures or dtypes
      differ, or a primitive lacks a JVP rule (MissingRuleError).
    ValueError: if shapes differ.
  """
  if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
    raise TypeError(f"primal and tangent arguments to jvp must be tuples or lists; found "
                    f"{type(primals).__name__} and {type(tangents).__name__}.")
  p_leaves, p_tree = _flatten(tuple(primals))
  t_leaves, t_tree = _flatten(tuple(tangents))
  if p_tree != t_tree:
    raise TypeError(f"primal and tangent arguments to jvp must have the same tree "
                    f"structure; primals have tree structure {p_tree} whereas tangents "
                    f"have tree structure {t_tree}.")
  paths = [tree_util.keystr(k) for k, _ in tree_util.tree_flatten_with_path(tuple(primals))[0]]
  for p, t, path in zip(p_leaves, t_leaves, paths):
    _check_tangent(p, t, path)
  store: list = []
  flat = _flat_fun(fun, p_tree, has_aux, store)
  t_in = [ad.Zero.from_value(p) if _is_float0(t) else t for p, t in zip(p_leaves, t_leaves)]
  p_out, t_out = ad.jvp_flat(flat, p_leaves, t_in)
  out_tree, n_out, aux_tree = store
  primals_out = optree.tree_unflatten(out_tree, p_out[:n_out])
  tangents_out = optree.tree_unflatten(out_tree, [_out_tangent(t) for t in t_out[:n_out]])
  if has_aux:
    return primals_out, tangents_out, optree.tree_unflatten(aux_tree, p_out[n_out:])
  return primals_out, tangents_out


def linearize(fun: Callable, *primals, has_aux: bool = False):
  """`fun(*primals)` and its linearization, a function of tangents evaluated from a staged
  linear jaxpr (the primal work is done once, here).

  Returns:
    `(primals_out, f_jvp)` (and aux with has_aux), where `f_jvp(*tangents)` gives the
    output tangents.
  """
  p_leaves, p_tree = _flatten(tuple(primals))
  store: list = []
  flat = _flat_fun(fun, p_tree, has_aux, store)
  p_out, lin, residuals, zero_outs = ad.linearize_flat(flat, p_leaves)
  out_tree, n_out, aux_tree = store
  primals_out = optree.tree_unflatten(out_tree, p_out[:n_out])

  def f_jvp(*tangents):
    t_leaves, t_tree = _flatten(tuple(tangents))
    if t_tree != p_tree:
      raise TypeError(f"linearized function called with tangents of structure {t_tree}; "
                      f"expected {p_tree}.")
    for p, t, path in zip(p_leaves, t_leaves, [""] * len(t_leaves)):
      _check_tangent(p, t, path)
    vals = core.eval_jaxpr(lin, [], *residuals, *t_leaves)
    it = iter(vals)
    outs = [ad.zeros_like_aval(ad.tangent_aval(core.get_aval(p))) if z else next(it)
            for p, z in zip(p_out, zero_outs)]
    return optree.tree_unflatten(out_tree, outs[:n_out])

  if has_aux:
    return primals_out, f_jvp, optree.tree_unflatten(aux_tree, p_out[n_out:])
  return primals_out, f_jvp


def vjp(fun: Callable, *primals, has_aux: bool = False):
  """Reverse-mode derivative: `fun(*primals)` and a function pulling output cotangents back
  to the inputs (linearize, then transpose the linear jaxpr).

  Returns:
    `(primals_out, vjp_fn)` (and aux with has_aux); `vjp_fn(cotangents)` takes a pytree of
    the output's structure, shapes and dtypes and returns a tuple with one cotangent per
    primal (float0 zeros for integer primals).

  Raises:
    TypeError: if the cotangent structure or dtypes differ from the output's, or a
      primitive lacks a transpose rule (MissingRuleError).
  """
  p_leaves, p_tree = _flatten(tuple(primals))
  store: list = []
  flat = _flat_fun(fun, p_tree, has_aux, store)
  p_out, lin, residuals, zero_outs = ad.linearize_flat(flat, p_leaves)
  out_tree, n_out, aux_tree = store
  primals_out = optree.tree_unflatten(out_tree, p_out[:n_out])
  n_res = len(residuals)
  nonzero_out_idx = [i for i, z in enumerate(zero_outs) if not z]

  def vjp_fn(cotangents):
    ct_leaves, ct_tree = _flatten(cotangents)
    if ct_tree != out_tree:
      raise TypeError(f"Tree structure of cotangent input {ct_tree}, does not match "
                      f"structure of primal output {out_tree}.")
    for i, (ct, p) in enumerate(zip(ct_leaves, p_out[:n_out])):
      want = ad.tangent_aval(core.get_aval(p))
      got = core.get_aval(ct) if not _is_float0(ct) else ShapedArray(np.shape(ct),
                                                                    dtypes.float0)
      if got.shape != want.shape or got.dtype != want.dtype:
        raise TypeError(f"Type of cotangent input to vjp pullback function "
                        f"({got.str_short()}) is not the expected tangent type "
                        f"({want.str_short()}) of corresponding primal output {i}.")
    cts = [ct_leaves[i] if i < n_out else ad.Zero(ad.tangent_aval(core.get_aval(p_out[i])))
           for i in nonzero_out_idx]
    args = [*residuals, *[ad.UndefinedPrimal(v.aval) for v in lin.invars[n_res:]]]
    cts_in = ad.backward_pass(lin, args, cts)[n_res:]
    return optree.tree_unflatten(p_tree, [ad.instantiate_zeros(c) for c in cts_in])

  if has_aux:
    return primals_out, vjp_fn, optree.tree_unflatten(aux_tree, p_out[n_out:])
  return primals_out, vjp_fn


def _argnums_partial(fun: Callable, argnums: Sequence[int], args: tuple, kwargs: dict):
  """`fun` as a function of the positional arguments at `argnums` only (the others and
  `kwargs` fixed), and the values of those arguments. Indices must be in range."""
  nums = tuple(i % len(args) for i in argnums)

  def partial_fun(*dyn_args):
    full = list(args)
    for i, a in zip(nums, dyn_args):
      full[i] = a
    return fun(*full, **kwargs)
  return partial_fun, tuple(args[i] for i in nums)


def value_and_grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
                   holomorphic: bool = False, allow_int: bool = False):
  """A function returning `fun`'s value and its gradient with respect to `argnums`.

  Args:
    fun: returns a scalar (real, or complex with `holomorphic`), or `(scalar, aux)` with
      has_aux.
    argnums: an int or a tuple of ints: the positional arguments to differentiate.
    holomorphic: differentiate a complex function of complex inputs.
    allow_int: allow integer inputs (their gradient is float0 zeros).

  Returns:
    `f(*args) -> (value, grad)` (`((value, aux), grad)` with has_aux); grad has the
    argument's structure, or is a tuple of them for a tuple of argnums.

  Raises:
    TypeError: for non-scalar or complex outputs, integer inputs without allow_int.
    ValueError: for argnums out of range.
  """
  int_argnum = isinstance(argnums, int)
  argnums_t = (argnums,) if int_argnum else tuple(argnums)

  @functools.wraps(fun)
  def value_and_grad_f(*args, **kwargs):
    for i in argnums_t:
      if not -len(args) <= i < len(args):
        raise ValueError(f"differentiating with respect to argnums={argnums} requires at "
                         f"least {max(argnums_t) + 1} positional arguments to be passed by "
                         f"the caller, but got only {len(args)} positional arguments.")
    partial_fun, dyn = _argnums_partial(fun, argnums_t, args, kwargs)
    for x in tree_util.tree_leaves(dyn):
      dt = core.get_aval(x).dtype
      if holomorphic and not dtypes.is_complex(dt):
        raise TypeError(f"grad with holomorphic=True requires inputs with complex dtype, "
                        f"but got {dt.name}.")
      if not dtypes.is_inexact(dt) and not allow_int:
        raise TypeError(f"grad requires real- or complex-valued inputs (input dtype that "
                        f"is a sub-dtype of np.inexact), but got {dt.name}. If you want to "
                        f"use Boolean- or integer-valued inputs, use vjp or set allow_int "
                        f"to True.")
    res = vjp(partial_fun, *dyn, has_aux=has_aux)
    ans, vjp_fn = res[0], res[1]
    aval = core.get_aval(ans) if core.valid_array_type(ans) else None
    if aval is None or aval.shape != ():
      shape = aval.shape if aval is not None else type(ans).__name__
      raise TypeError(f"Gradient only defined for scalar-output functions. Output had "
                      f"shape: {shape}.")
    if dtypes.is_complex(aval.dtype) and not holomorphic:
      raise TypeError(f"grad requires real-valued outputs (output dtype that is a sub-dtype "
                      f"of np.floating), but got {aval.dtype.name}. For holomorphic "
                      f"differentiation, pass holomorphic=True.")
    if not dtypes.is_inexact(aval.dtype):
      raise TypeError(f"grad requires real-valued outputs (output dtype that is a sub-dtype "
                      f"of np.floating), but got {aval.dtype.name}.")
    g = vjp_fn(np.ones((), aval.dtype)[()])   # NB: a literal 1, not a staged constant
    g = g[0] if int_argnum else tuple(g)
    return ((ans, res[2]), g) if has_aux else (ans, g)

  return value_and_grad_f


def grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
         holomorphic: bool = False, allow_int: bool = False):
  """The gradient of a scalar function with respect to `argnums`; arguments, results and
  errors as `value_and_grad` (this returns only the gradient, with aux if has_aux)."""
  vg = value_and_grad(fun, argnums, has_aux, holomorphic, allow_int)

  @functools.wraps(fun)
  def grad_f(*args, **kwargs):
    out = vg(*args, **kwargs)
    return (out[1], out[0][1]) if has_aux else out[1]
  return grad_f


# ---------------------------------------------------------------------------
# Jacobians. The primal work is done once (linearize / vjp); the linear map is then vmapped
# over the standard basis (JAX's `_std_basis`): one batched program for all columns.


def _jac_prepare(fun, argnums, args, kwargs, name: str, holomorphic: bool, check_in: bool):
  int_argnum = isinstance(argnums, int)
  argnums_t = (argnums,) if int_argnum else tuple(argnums)
  for i in argnums_t:
    if not -len(args) <= i < len(args):
      raise ValueError(f"{name}: argnums={argnums} refers to a positional argument that was "
                       f"not passed: the function got only {len(args)} positional arguments.")
  partial_fun, dyn = _argnums_partial(fun, argnums_t, args, kwargs)
  if check_in:
    for x in tree_util.tree_leaves(dyn):
      dt = core.get_aval(x).dtype
      if holomorphic:
        if not dtypes.is_complex(dt):
          raise TypeError(f"{name} with holomorphic=True requires inputs with complex "
                          f"dtype, but got {dt.name}.")
      elif not dtypes.issubdtype(dt, np.floating):
        raise TypeError(
            f"{name} requires real-valued inputs (input dtype that is a sub-dtype of "
            f"np.floating), but got {dt.name}. For holomorphic differentiation, pass "
            f"holomorphic=True. For differentiation of non-holomorphic functions involving "
            f"complex inputs or integer inputs, use stagecraft."
            f"{'jvp' if name == 'jacfwd' else 'vjp'} directly.")
  return partial_fun, dyn, int_argnum


def _std_basis(avals: Sequence[ShapedArray]):
  """The identity of size N (the leaves' total element count) cut along its second axis into
  one host array per leaf, of shape `(N, *leaf.shape)` in the leaf's dtype; with the leaves'
  sizes and offsets into N."""
  sizes = [int(np.prod(a.shape, dtype=np.int64)) for a in avals]
  offsets = np.cumsum([0, *sizes])[:-1].tolist()
  eye = np.eye(sum(sizes))
  return ([eye[:, o:o + n].reshape(len(eye), *a.shape).astype(a.dtype)
           for a, o, n in zip(avals, offsets, sizes)], sizes, offsets)


def _map_basis(linear_fn, basis_tree, n: int, axis: int, result_avals, batched_shape):
  """`linear_fn` vmapped over the basis (the batch at `axis` of each flat result); zeros of
  `batched_shape(aval)` when the basis is empty (vmap needs a non-empty axis) and float0
  results (integer inputs of jacrev with allow_int) as float0 arrays."""
  if n:
    flat = _flatten(vmap(linear_fn, out_axes=axis)(*basis_tree))[0]
  else:
    flat = [None] * len(result_avals)
  return [np.zeros(batched_shape(a), a.dtype) if x is None or a.dtype == dtypes.float0
          else x for x, a in zip(flat, result_avals)]


def _split_blocks(x, axis: int, sizes, offsets, shapes):
  """Cuts `x` along `axis` into `sizes` pieces reshaped to `shapes` (one Jacobian block per
  leaf on the basis side)."""
  from stagecraft import lax, numpy as jnp
  if isinstance(x, np.ndarray) and x.dtype == dtypes.float0:
    return [np.zeros(shape, x.dtype) for shape in shapes]
  whole = len(sizes) == 1
  return [jnp.reshape(x if whole else lax.slice_in_dim(x, o, o + n, axis=axis), shape)
          for o, n, shape in zip(offsets, sizes, shapes)]


def _jac_tree(out_tree, in_tree, int_argnum, rows):
  """Output structure outside, input structure (the argument, or a tuple of them) inside."""
  inner = [optree.tree_unflatten(in_tree, per_in) for per_in in rows]
  if int_argnum:
    inner = [x[0] for x in inner]
  return optree.tree_unflatten(out_tree, inner)


def jacfwd(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
           holomorphic: bool = False) -> Callable:
  """The Jacobian of `fun` by forward mode (one JVP per input element), as JAX's `jacfwd`.

  Returns:
    A function with `fun`'s arguments returning the Jacobian: the output's pytree structure
    outside, the differentiated argument's (a tuple of them for tuple argnums) inside; each
    leaf has shape `out.shape + in.shape` (`(jac, aux)` with has_aux).

  Raises:
    TypeError: for integer inputs, or complex inputs without holomorphic=True.
    ValueError: for argnums out of range.
  """
  @functools.wraps(fun)
  def jacfun(*args, **kwargs):
    partial_fun, dyn, int_argnum = _jac_prepare(fun, argnums, args, kwargs, "jacfwd",
                                                holomorphic, True)
    res = linearize(partial_fun, *dyn, has_aux=has_aux)
    y, f_jvp = res[0], res[1]
    in_leaves, in_tree = _flatten(dyn)
    in_avals = [core.get_aval(x) for x in in_leaves]
    out_leaves, out_tree = _flatten(y)
    out_avals = [core.get_aval(o) for o in out_leaves]
    basis, sizes, offsets = _std_basis(in_avals)
    cols = _map_basis(f_jvp, optree.tree_unflatten(in_tree, basis), sum(sizes), -1, out_avals,
                      lambda a: (*a.shape, 0))
    rows = [_split_blocks(c, len(oa.shape), sizes, offsets,
                          [(*oa.shape, *ia.shape) for ia in in_avals])
            for c, oa in zip(cols, out_avals)]
    jac = _jac_tree(out_tree, in_tree, int_argnum, rows)
    return (jac, res[2]) if has_aux else jac
  return jacfun


def jacrev(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
           holomorphic: bool = False, allow_int: bool = False) -> Callable:
  """The Jacobian of `fun` by reverse mode (one VJP per output element), as JAX's `jacrev`.

  Returns:
    As `jacfwd`: output structure outside, input structure inside, leaves of shape
    `out.shape + in.shape` (`(jac, aux)` with has_aux).

  Raises:
    TypeError: for integer inputs (unless allow_int), complex inputs or outputs without
      holomorphic=True.
    ValueError: for argnums out of range.
  """
  @functools.wraps(fun)
  def jacfun(*args, **kwargs):
    partial_fun, dyn, int_argnum = _jac_prepare(fun, argnums, args, kwargs, "jacrev",
                                                holomorphic, not allow_int)
    res = vjp(partial_fun, *dyn, has_aux=has_aux)
    y, vjp_fn = res[0], res[1]
    in_leaves, in_tree = _flatten(dyn)
    in_avals = [core.get_aval(x) for x in in_leaves]
    out_leaves, out_tree = _flatten(y)
    out_avals = [core.get_aval(o) for o in out_leaves]
    for a in out_avals:
      if holomorphic and not dtypes.is_complex(a.dtype):
        raise TypeError(f"jacrev with holomorphic=True requires outputs with complex dtype, "
                        f"but got {a.dtype.name}.")
      if not holomorphic and not dtypes.issubdtype(a.dtype, np.floating):
        raise TypeError(
            f"jacrev requires real-valued outputs (output dtype that is a sub-dtype of "
            f"np.floating), but got {a.dtype.name}. For holomorphic differentiation, pass "
            f"holomorphic=True. For differentiation of non-holomorphic functions involving "
            f"complex outputs, use stagecraft.vjp directly.")
    basis, sizes, offsets = _std_basis(out_avals)
    cts = _map_basis(vjp_fn, (optree.tree_unflatten(out_tree, basis),), sum(sizes), 0,
                     in_avals, lambda a: (0, *a.shape))
    per_in = [_split_blocks(c, 0, sizes, offsets, [(*oa.shape, *ia.shape) for oa in out_avals])
              for c, ia in zip(cts, in_avals)]
    jac = _jac_tree(out_tree, in_tree, int_argnum, [list(r) for r in zip(*per_in)] if per_in
                    else [[] for _ in out_avals])
    return (jac, res[2]) if has_aux else jac
  return jacfun


def hessian(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
            holomorphic: bool = False) -> Callable:
  """The Hessian of a scalar function: `jacfwd(jacrev(fun))`, as JAX's `hessian`.

  Returns:
    A function with `fun`'s arguments returning the Hessian: leaves of shape
    `out.shape + in.shape + in.shape` (nested per argument for tuple argnums), in the
    inputs' floating dtype (`(hessian, aux)` with has_aux).

  Raises:
    TypeError: for integer inputs, or complex inputs/outputs without holomorphic=True.
    ValueError: for argnums out of range.
  """
  return jacfwd(jacrev(fun, argnums, has_aux, holomorphic), argnums, has_aux, holomorphic)


# ---------------------------------------------------------------------------
# vmap (interpreters/batching.py)


def _flatten_axes(what: str, prefix, full_tree, leaves_tree_def) -> list:
  """One axis spec per leaf of `full_tree` from a pytree prefix of it (ints or None)."""
  p_leaves, p_def = optree.tree_flatten(prefix, none_is_leaf=True, namespace=_NS)
  try:
    subtrees = p_def.flatten_up_to(full_tree)
  except ValueError:
    raise ValueError(f"vmap {what} specification must be a tree prefix of the corresponding "
                     f"value, got specification {prefix!r} for value tree "
                     f"{leaves_tree_def}.") from None
  out = []
  for ax, sub in zip(p_leaves, subtrees):
    if ax is not None and not isinstance(ax, (int, np.integer)):
      raise TypeError(f"vmap {what} must be an int, None, or (nested) container with those "
                      f"types as leaves, but got {ax!r}.")
    out.extend([None if ax is None else int(ax)] * len(_flatten(sub)[0]))
  return out


def _describe_arg(path: str) -> str:
  return f"argument {path}" if path else "the argument"


def _mapped_axes(what: str, leaves, axes, paths, axis_size, no_mapped: str,
                 aval_of=core.get_aval) -> tuple[list, int]:
  """Normalizes the mapped axis of each leaf (None: not mapped) and finds the mapped size,
  shared by vmap and pmap.

  Raises:
    ValueError: an axis out of range for its leaf's rank; no mapped leaf and no
      `axis_size` (`no_mapped`); leaves (and `axis_size`) disagreeing on the size, listing
      each with its key path and type.
  """
  dims, sizes = [], []
  for x, ax, path in zip(leaves, axes, paths):
    if ax is None:
      dims.append(None)
      continue
    aval = aval_of(x)
    nd = len(aval.shape)
    if not -nd <= ax < nd:
      raise ValueError(f"{what} was requested to map its argument along axis {ax}, which "
                       f"implies that its rank should be at least {max(ax + 1, -ax)}, but "
                       f"is only {nd} (its shape is {aval.shape}).")
    d = ax % nd
    dims.append(d)
    sizes.append((aval.shape[d], d, path, aval))
  if not sizes and axis_size is None:
    raise ValueError(no_mapped)
  distinct = {s for s, *_ in sizes} | ({axis_size} if axis_size is not None else set())
  if len(distinct) > 1:
    lines = [f"  * axis_size was given as {axis_size};"] if axis_size is not None else []
    for s, d, path, aval in sizes:
      lines.append(f"  * one axis had size {s}: axis {d} of {_describe_arg(path)} of type "
                   f"{aval.str_short()};")
    raise ValueError(f"{what} got inconsistent sizes for array axes to be mapped:\n"
                     + "\n".join(lines))
  return dims, (axis_size if axis_size is not None else sizes[0][0])


def vmap(fun: Callable, in_axes: Any = 0, out_axes: Any = 0, axis_name: Any = None,
         axis_size: int | None = None, spmd_axis_name: Any = None) -> Callable:
  """Vectorizes `fun` over a new leading (or `in_axes`) axis of its arguments, as JAX's
  `vmap`: the function is run once on batched tracers and every primitive's batching rule
  handles the batch axis (no Python loop).

  Args:
    fun: a function of arrays (pytrees) returning arrays (pytrees).
    in_axes: an int, None, or a pytree prefix of the positional-argument tuple with int/None
      leaves: the axis of each argument to map over (negative counts from the end; None:
      broadcast the argument). Keyword arguments are always mapped over axis 0.
    out_axes: an int, None, or a pytree prefix of the output: where the mapped axis goes in
      each output (None: the output must not depend on mapped inputs).
    axis_name: a name for the mapped axis, for collectives (`lax.psum(x, axis_name)`).
    axis_size: the mapped size; required when no argument is mapped.
    spmd_axis_name: accepted for compatibility (there is no SPMD partitioning of vmap here).

  Returns:
    The vectorized function; each mapped output has the batch axis at its out_axes.

  Raises:
    ValueError: for inconsistent mapped sizes (naming each argument and its size), axes out
      of range, no mapped input without axis_size, in_axes/out_axes that are not tree
      prefixes, or a mapped output whose out_axes is None.
    TypeError: for in_axes leaves that are not ints or None.
  """
  from stagecraft.interpreters import batching
  if isinstance(in_axes, list):
    in_axes = tuple(in_axes)
  if not (in_axes is None or isinstance(in_axes, (int, np.integer, tuple, dict)) or
          optree.tree_flatten(in_axes, none_is_leaf=True, namespace=_NS)[1].num_nodes > 1):
    raise TypeError(f"vmap in_axes must be an int, None, or a tuple of entries corresponding "
                    f"to the positional arguments passed to the function, but got {in_axes}.")
  name = _fun_name(fun)

  @functools.wraps(fun)
  def vmap_f(*args, **kwargs):
    if isinstance(in_axes, tuple) and len(in_axes) != len(args):
      raise ValueError(f"vmap in_axes must be an int, None, or a tuple of entries "
                       f"corresponding to the positional arguments passed to the function, "
                       f"but got len(in_axes)={len(in_axes)}, len(args)={len(args)}")
    leaves, in_tree = _flatten((args, kwargs))
    args_tree = _flatten(args)[1]
    axes = _flatten_axes("in_axes", in_axes, args, args_tree)
    axes += [0] * (len(leaves) - len(axes))
    paths = [tree_util.keystr(k) for k, _ in tree_util.tree_flatten_with_path(args)[0]]
    paths += [tree_util.keystr(k) for k, _ in tree_util.tree_flatten_with_path(kwargs)[0]]
    dims, size = _mapped_axes("vmap", leaves, axes, paths, axis_size,
                              "vmap must have at least one non-None value in in_axes")
    axis_data = batching.AxisData(axis_name, size, spmd_axis_name)
    store: list = []

    def flat(*xs):
      a, kw = optree.tree_unflatten(in_tree, xs)
      out = fun(*a, **kw)
      out_leaves, out_tree = _flatten(out)
      _check_out_leaves(out_leaves, out_tree, name, "vmap")
      store[:] = [out, out_tree]
      return out_leaves

    outs, out_dims = batching.batch_flat(flat, leaves, dims, axis_data)
    out, out_tree = store
    o_axes = _flatten_axes("out_axes", out_axes, out, out_tree)
    results = []
    for o, d, ax in zip(outs, out_dims, o_axes):
      if ax is None:
        if d is not None:
          raise ValueError(f"vmap has mapped output (axis_name={axis_name}) but out_axes is "
                           f"None")
        results.append(o)
        continue
      nd = len(core.get_aval(o).shape) + (d is None)
      if not -nd <= ax < nd:
        raise ValueError(f"vmap out_axes specification {ax} is out of range for an output "
                         f"of rank {nd} (including the mapped axis).")
      results.append(batching.matchaxis(o, d, ax % nd, size))
    return optree.tree_unflatten(out_tree, results)

  return vmap_f
