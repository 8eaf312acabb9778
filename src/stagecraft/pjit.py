"""`jit`: the `jit` call primitive with all its rules, jit's wrapper and its caches, and
lowering/compiling a traced signature (single device, jit of pmap, sharded over a mesh).

`jit` traces its function once per signature — the tree structure of the arguments, the aval
(shape, dtype, weak type) of each array leaf, the values of static arguments and the x64
flag — and caches the traced jaxpr and the compiled executable under that key. Caches hang
off the function object through a weak reference, so they go when the function does.
(JAX calls this module pjit; `jit.py` would shadow the `stagecraft.jit` function.)
"""
from __future__ import annotations

import collections
import functools
import math
import logging
import sys
import time
import warnings
import weakref
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import optree

from stagecraft import core, dtypes, dump_ir, key_reuse, monitoring, traceback_util, tree_util
from stagecraft import api_util, cache_miss, sharding as sharding_lib, state
from stagecraft.api_util import (arg_names, check_out_leaves, flatten, fun_name,
                                 fun_signature)
from stagecraft.config import config
from stagecraft.core import ClosedJaxpr, DebugInfo, ShapedArray, ShapeDtypeStruct
from stagecraft.interpreters import batching, calls, lowering, mapping, partial_eval as pe
from stagecraft.lax.control_flow import conditionals, loops, while_op
from stagecraft.lax import spmd as lax_spmd
from stagecraft.lax.spmd import bind_sharding_constraint, reshard, reshard_p
from stagecraft.runtime import client, dispatch, spmd
from stagecraft.runtime.array import Array, mark_committed
from stagecraft.runtime.array import committed_to_default as _committed_to_default
from stagecraft import layout as layout_lib
from stagecraft.sharding import NamedSharding, PartitionSpec

__all__ = ["jit", "jit_p", "JitWrapped", "PjitFunction", "TracedSignature", "trace_flat",
           "SignatureLayout", "LoweredSignature", "lower_traced", "CompiledCall", "SpmdCall", "ShardedCall",
           "compile_lowered", "compile_traced", "update_wrapper", "wraps", "auto_axes",
           "explicit_axes", "opened_call", "hoist_call_consts", "bakes_constants"]



# `with mesh:` (sharding, a layer below config) reads jax_disallow_mesh_context_manager here.
sharding_lib.mesh_context_manager_disallowed = (
    lambda: config.read("disallow_mesh_context_manager"))


def abstractify(x: Any, path: str, fun: Callable | str) -> ShapedArray:
  """`api_util.abstractify`, typed as JAX types a ShapeDtypeStruct with a sharding: the
  dimensions it splits over Explicit mesh axes are in the aval (`f32[8@x,4]`); a bare
  PartitionSpec refers to the abstract mesh in context."""
  aval = api_util.abstractify(x, path, fun)
  s = getattr(x, "sharding", None) if type(x) is ShapeDtypeStruct else None
  if s is None or type(aval) is not ShapedArray:
    return aval
  # a layout asked for: the signature's placement is read (in a fresh process too)
  dispatch.placement_used[0] = True
  if isinstance(s, PartitionSpec):
    mesh = sharding_lib.get_abstract_mesh()
    if mesh.empty:
      return aval
    s = NamedSharding(mesh, s)
  try:
    spmd.check_spec_fits(s, aval, "ShapeDtypeStruct")
  except (ValueError, TypeError, AttributeError):
    return aval   # NB: untyped: the layout's own check reports the misfit, naming the value
  return spmd.typed_aval(aval, s)


def update_wrapper(wrapper: Any, wrapped: Callable) -> Any:
  """`functools.update_wrapper(wrapper, wrapped)` that skips what it cannot copy, as JAX's
  transformations do: a callable pytree (an equinox Module traced as the carry of a scan)
  can answer `__name__` with a non-string, which `functools` would raise `TypeError` on.

  Copies `__module__`, `__name__`, `__qualname__`, `__doc__`, `__annotations__` (each only
  where reading and setting it succeed), updates `__dict__` with the entries that do not
  shadow the wrapper's own attributes (a callable object's `_call` or `_cache` must not
  replace jit's methods), sets `__wrapped__`; returns `wrapper`."""
  for attr in functools.WRAPPER_ASSIGNMENTS:
    try:
      setattr(wrapper, attr, getattr(wrapped, attr))
    except Exception:   # noqa: BLE001 -- absent or unusable: keep the wrapper's own
      pass
  try:
    own = wrapper.__dict__
    for k, v in getattr(wrapped, "__dict__", {}).items():
      if k not in own and not hasattr(type(wrapper), k):
        own[k] = v
  except Exception:   # noqa: BLE001
    pass
  wrapper.__wrapped__ = wrapped
  return wrapper


def wraps(wrapped: Callable) -> Callable[[Any], Any]:
  """The decorator form of `update_wrapper`: `@wraps(fun)` over a wrapper function."""
  return functools.partial(update_wrapper, wrapped=wrapped)


# ---------------------------------------------------------------------------
# The call primitive of jit: `jit[name=f jaxpr={...}] args`.

jit_p = core.Primitive("jit")
jit_p.multiple_results = True

# The params of a jit equation, as JAX's: `jaxpr`, `name`, and per operand `in_shardings`
# (UNSPECIFIED), `in_layouts` (None), `donated_invars` (False), per result `out_shardings`,
# `out_layouts`; `ctx_mesh` (`sharding.context_mesh()`), `keep_unused`, `inline`,
# `compiler_options_kvs`. The NamedShardings (or bare PartitionSpecs, over the mesh in
# context) given to `jit`, over concrete meshes without Explicit axes, are recorded in
# `in_shardings` / `out_shardings` as JAX's: they constrain the call's operands and
# results where the equation is lowered (and where it runs eagerly); derived calls carry
# them over (`result_params`, `_batch_jit_params`). Other shardings act as
# sharding constraint equations around the call; layouts keep their defaults (stagecraft's
# jit lays out its arguments itself).
# (name, default entry, per operand (True) or per result (False)), in JAX's order.
_JIT_SIZED = (("in_shardings", sharding_lib.UNSPECIFIED, True),
              ("out_shardings", sharding_lib.UNSPECIFIED, False),
              ("in_layouts", None, True), ("out_layouts", None, False),
              ("donated_invars", False, True))


_JIT_SIZED_TRANSPOSED = tuple(_JIT_SIZED[i] for i in (0, 2, 1, 3, 4))


def _jit_derived(params: dict, what: str) -> dict:
  """A derived call's params: the jit's (its name kept, as JAX 0.10.2's: `grad(jit(f))`
  prints two `jit[name=f]` equations), in the order JAX's rule binds them."""
  if what != "transpose":
    return params
  order = ("jaxpr", "in_shardings", "in_layouts", "out_shardings", "out_layouts")
  return {**{k: params[k] for k in order if k in params}, **params}


def _complete_jit_params(num_args: int, params: dict) -> dict:
  """`params` in JAX's order, with each of JAX's jit params that is missing, or (per
  operand or result) of another length than the call's (a derived call: jvp, transpose,
  batched, partial evaluation, DCE), set to its default."""
  num_out = len(params["jaxpr"].jaxpr.outvars)
  p = {"jaxpr": params["jaxpr"]}
  keys = list(params)
  sized = _JIT_SIZED
  if ("in_layouts" in params and "out_shardings" in params
      and keys.index("in_layouts") < keys.index("out_shardings")):
    sized = _JIT_SIZED_TRANSPOSED   # NB: the order of JAX's transpose rule's `bind`
  for k, default, n in sized:
    v = params.get(k)
    p[k] = v if v is not None and len(v) == (num_args if n else num_out) else (
        (default,) * (num_args if n else num_out))
  mesh = params.get("ctx_mesh")
  p["ctx_mesh"] = sharding_lib.context_mesh() if mesh is None else mesh
  p["name"] = params["name"]
  p["keep_unused"] = params.get("keep_unused", False)
  p["inline"] = params.get("inline", False)
  p["compiler_options_kvs"] = params.get("compiler_options_kvs", ())
  if len(params) > len(p):   # NB: params of stagecraft's own are kept, last
    p.update((k, v) for k, v in params.items() if k not in p)
  return p


jit_p.complete_params = _complete_jit_params
jit_p.operand_params = tuple((k, d) for k, d, per_operand in _JIT_SIZED if per_operand)
jit_p.result_params = (("out_shardings", sharding_lib.UNSPECIFIED, "in_shardings"),
                       ("out_layouts", None, "in_layouts"))


def _specified(s) -> bool:
  return isinstance(s, NamedSharding)


def _batch_jit_params(params: dict, p: dict, axis_data, in_dims, out_dims) -> dict:
  """The batched jit call's shardings, as JAX's `_pjit_batcher`: a batched operand's or
  result's NamedSharding gains the batch dimension (unsharded, or over spmd_axis_name);
  replicated ones and UNSPECIFIED stay."""
  def one(s, d):
    if d is None or d is batching.not_mapped or not _specified(s):
      return s
    if axis_data.spmd_name is None and s.is_fully_replicated:
      return s
    spec = tuple(s.spec) + (None,) * max(0, d - len(s.spec))
    spec = (*spec[:d], axis_data.spmd_name, *spec[d:])
    if isinstance(s.mesh, sharding_lib.Mesh):
      # NB: JAX's goes through the HLO sharding and back: no trailing unsharded entries
      while spec and spec[-1] is None:
        spec = spec[:-1]
    return NamedSharding(s.mesh, PartitionSpec(*spec))
  ins, outs = params.get("in_shardings"), params.get("out_shardings")
  if ins is not None and len(ins) == len(in_dims) and any(map(_specified, ins)):
    p["in_shardings"] = tuple(map(one, ins, in_dims))
  if outs is not None and len(outs) == len(out_dims) and any(map(_specified, outs)):
    p["out_shardings"] = tuple(map(one, outs, out_dims))
  return p


_jit_executables: "weakref.WeakKeyDictionary[ClosedJaxpr, Any]" = (
    weakref.WeakKeyDictionary())


def _jit_impl(*args, jaxpr: ClosedJaxpr, name: str, inline: bool = False, **_):
  # As JAX's by default, the constants are in the program text (`bakes_constants`).
  bake = bakes_constants()
  if dispatch.placement_used[0]:
    placement = dispatch.target_placement(args)
    if type(placement) is dispatch.Placement:   # arguments split over a mesh
      if bake:
        return spmd.call_closed(jaxpr, name, args, list(placement))
      opened, consts = opened_call(jaxpr)
      return spmd.call_closed(opened, name, [*consts, *args],
                              [None] * len(consts) + list(placement))
  ex = _jit_executables.get(jaxpr)
  if ex is None:
    opened = consts = None
    if hi_compile[0] is not None:   # hijax-typed values: a program of their arrays
      opened, consts = opened_call(jaxpr)
      ex = hi_compile[0](opened.jaxpr, consts, None, name)
    if ex is None and bake:
      ex = _jit_executables[jaxpr] = _compile_closed(jaxpr, name)
      return ex.call(args)
    if opened is None:
      opened, consts = opened_call(jaxpr)
    if ex is None:
      ex = _compile_closed(opened, name)
      if consts:
        ex = _WithConsts(ex, consts, opened.in_avals)
    _jit_executables[jaxpr] = ex
  return ex.call(args)


def bakes_constants(consts: Sequence[Any] = ()) -> bool:
  """Whether a jit's closed-over arrays (its ClosedJaxpr's consts, and those of the jit
  equations inside) are constants of its program text, as JAX 0.10.2 lowers them by
  default (XLA then folds operations on them); with `jax_use_simplified_jaxpr_constants`
  (or when one of `consts` is a tracer of an enclosing trace) they are arguments of the
  program instead (`hoist_call_consts`)."""
  return not config.use_simplified_jaxpr_constants and not any(
      isinstance(c, core.Tracer) for c in consts)


class _WithConsts:
  """An executable of a jit body whose constants (on the device once) lead its arguments."""
  __slots__ = ("ex", "consts")

  def __init__(self, ex, consts: list, avals: Sequence[ShapedArray]):
    self.ex = ex
    self.consts = [c if type(c) is Array else Array(dispatch.to_buffer(c, a, transfer=None), a)
                   for c, a in zip(consts, avals)]

  def call(self, args):
    return self.ex.call([*self.consts, *args])


def _compile_closed(jaxpr: ClosedJaxpr, name: str) -> dispatch.Executable:
  """The executable of a jit equation's ClosedJaxpr, its consts constants of the text (an
  opened jaxpr, `opened_call`'s, has none: it takes them as arguments)."""
  chain = mapping.mesh_chain(jaxpr.jaxpr)
  if chain:   # a jit containing pmaps (e.g. derived by autodiff): one SPMD program
    return spmd.replicated_executable(f"jit_{name}", jaxpr.jaxpr, chain, consts=jaxpr.consts)
  if spmd.jaxpr_meshes(jaxpr.jaxpr):   # shard_map / sharding constraints inside
    return spmd.call_closed_executable(jaxpr, name)
  log = monitoring.log_timed("dispatch", config.log_compiles,
                             "Finished jaxpr to MLIR module conversion {fun_name} in "
                             "{elapsed_time:.9f} sec")
  if log is not None:
    monitoring.logger("interpreters.pxla").log(log[1], monitoring.compiling_line(
        f"jit({name})", jaxpr.in_avals, ["UnspecifiedValue"] * len(jaxpr.in_avals)))
  with monitoring.timed(monitoring.JAXPR_TO_MLIR_MODULE_EVENT, f"jit({name})", log):
    text = lowering.lower_jaxpr_to_module(f"jit_{name}", jaxpr.jaxpr, consts=jaxpr.consts)
  return dispatch.Executable(dispatch.compile_module(text, fun_name=f"jit({name})"),
                             jaxpr.in_avals, jaxpr.out_avals, text)


# Constants closed over by a jit body stay in its ClosedJaxpr (as JAX prints them). By
# default (as JAX 0.10.2's) they are constants of the program text: `lower_traced` and
# `_jit_impl` lower them with `consts=`, and `lowering.lower_call` puts an inner jit's inside
# its function. With `jax_use_simplified_jaxpr_constants` (`bakes_constants()` False), they
# are hoisted, with those of the jit equations inside (in loop and branch bodies too), to
# leading arguments of the program (`opened_call`, `hoist_call_consts`), so they reach the
# device as buffers once and never enter the program text.

_opened: "weakref.WeakKeyDictionary[ClosedJaxpr, tuple]" = weakref.WeakKeyDictionary()


def opened_call(closed: ClosedJaxpr) -> tuple[ClosedJaxpr, list]:
  """`(opened, consts)`: `closed`'s jaxpr taking as leading arguments its constants and
  those of the jit equations in it (cached per `closed`; `(closed, [])` when there are
  none)."""
  got = _opened.get(closed, _MISSING)
  if got is _MISSING:
    body, inner = hoist_call_consts(closed.jaxpr)
    consts = [*closed.consts, *inner]
    # NB: None for none: a value holding `closed` would keep its weak key alive.
    got = _opened[closed] = None if not consts else (
        ClosedJaxpr(pe.convert_constvars_jaxpr(body), []), consts)
  return (closed, []) if got is None else got


_MISSING = object()


def _hoist_scan(eqn, lift):
  opened, cs = opened_call(eqn.params["jaxpr"])
  if not cs:
    return eqn
  return eqn.replace(invars=[*lift(cs, opened.jaxpr.invars), *eqn.invars],
                     params={**eqn.params, "jaxpr": opened,
                             "num_consts": eqn.params["num_consts"] + len(cs)})


def _hoist_while(eqn, lift):
  c_open, c_cs = opened_call(eqn.params["cond_jaxpr"])
  b_open, b_cs = opened_call(eqn.params["body_jaxpr"])
  if not c_cs and not b_cs:
    return eqn
  nc = eqn.params["cond_nconsts"]
  ins = eqn.invars
  return eqn.replace(
      invars=[*lift(c_cs, c_open.jaxpr.invars), *ins[:nc],
              *lift(b_cs, b_open.jaxpr.invars), *ins[nc:]],
      params={**eqn.params, "cond_jaxpr": c_open, "body_jaxpr": b_open,
              "cond_nconsts": nc + len(c_cs), "body_nconsts": eqn.params["body_nconsts"]
              + len(b_cs)})


def _hoist_cond(eqn, lift):
  opened = [opened_call(b) for b in eqn.params["branches"]]
  if not any(cs for _, cs in opened):
    return eqn
  # Every branch takes every branch's constants: one operand per distinct constant and
  # occurrence (a branch may bind one constant object twice: its own and an inner jit's).
  def keyed(cs):
    seen: dict[int, int] = {}
    for c in cs:
      n = seen[id(c)] = seen.get(id(c), -1) + 1
      yield (id(c), n), c
  union: dict[tuple, tuple] = {}
  for b, cs in opened:
    for (k, c), v in zip(keyed(cs), b.jaxpr.invars):
      union.setdefault(k, (c, v.aval))
  branches = []
  for (b, cs), orig in zip(opened, eqn.params["branches"]):
    own = {k: v for (k, _), v in zip(keyed(cs), b.jaxpr.invars)}
    lead = [own.get(k) or core.Var(a) for k, (_, a) in union.items()]
    j = b.jaxpr
    branches.append(ClosedJaxpr(j.replace(invars=[*lead, *j.invars[len(cs):]]), []))
  values = [c for c, _ in union.values()]
  return eqn.replace(
      invars=[eqn.invars[0], *lift(values, [core.Var(a) for _, a in union.values()]),
              *eqn.invars[1:]],
      params={**eqn.params, "branches": tuple(branches)})


_hoist_rules = {
    loops.scan_p: _hoist_scan,
    while_op.while_p: _hoist_while,
    conditionals.cond_p: _hoist_cond,
}


def hoist_call_consts(jaxpr: core.Jaxpr) -> tuple[core.Jaxpr, list]:
  """`jaxpr` whose jit equations (also inside the bodies of loops and branches, which then
  take them as constant operands) take their bodies' constants as leading operands, read
  from new constvars of `jaxpr` (appended; one per distinct constant), and their values."""
  new_vars: dict[int, core.Var] = {}
  consts: list = []

  def lift(cs, binders):
    ops = []
    for c, b in zip(cs, binders):
      v = new_vars.get(id(c))
      if v is None:
        v = new_vars[id(c)] = core.Var(b.aval)
        consts.append(c)
      ops.append(v)
    return ops

  eqns = []
  for eqn in jaxpr.eqns:
    if eqn.primitive is jit_p:
      opened, cs = opened_call(eqn.params["jaxpr"])
      if cs:
        eqn = eqn.replace(invars=[*lift(cs, opened.jaxpr.invars), *eqn.invars],
                          params={**eqn.params, "jaxpr": opened})
    else:
      rule = _hoist_rules.get(eqn.primitive)
      if rule is not None:
        eqn = rule(eqn, lift)
    eqns.append(eqn)
  if not consts:
    return jaxpr, []
  return jaxpr.replace(constvars=[*jaxpr.constvars, *new_vars.values()], eqns=eqns), consts


def _jit_lowering(ctx, *args, jaxpr: ClosedJaxpr, name: str, inline: bool = False,
                  in_shardings=(), out_shardings=(), **_):
  # NB: the recorded shardings constrain the call's operands and results
  if any(map(_specified, in_shardings)):
    args = [lax_spmd.lower_sharding_constraint(ctx, a, aval, s) if _specified(s) else a
            for a, aval, s in zip(args, ctx.avals_in, in_shardings)]
  outs = lowering.lower_call(ctx, name, jaxpr, args)
  if any(map(_specified, out_shardings)):
    n = len(out_shardings)
    outs = [*[lax_spmd.lower_sharding_constraint(ctx, o, aval, s) if _specified(s) else o
              for o, aval, s in zip(outs[:n], ctx.avals_out, out_shardings)], *outs[n:]]
  return outs


core.def_closed_call(jit_p, "jaxpr")
def _checked_jit_impl(*args, jaxpr: ClosedJaxpr, name: str, inline: bool = False,
                      in_shardings=(), out_shardings=(), **_):
  """`_jit_impl`; with debug_nans/debug_infs, a NaN (inf) in the results runs the body
  again equation by equation (JAX's de-optimized version), so the primitive that made it
  raises the FloatingPointError. Recorded shardings place the operands and results."""
  if any(map(_specified, in_shardings)):
    args = [bind_sharding_constraint(a, s) if _specified(s) else a
            for a, s in zip(args, in_shardings)]
  outs = _jit_impl(*args, jaxpr=jaxpr, name=name, inline=inline)
  if any(map(_specified, out_shardings)):
    outs = [bind_sharding_constraint(o, s) if _specified(s) else o
            for o, s in zip(outs, out_shardings)]
  if config.state_key[1] and dispatch.find_special(outs) is not None:
    print("Invalid nan value encountered in the output of a jax.jit function. Calling the "
          "de-optimized version.")
    core.eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *args)
    dispatch.check_special(f"jit({name})", outs)
  return outs


jit_p.def_impl(_checked_jit_impl)
lowering.register_lowering(jit_p, _jit_lowering)
# NB: derived calls (jvp, transpose, batched, the known and unknown halves) keep the jit's
# name, as JAX 0.10.2's: `grad(jit(f))` prints two `jit[name=f]` equations.
jit_rules = calls.CallRules(jit_p, "jaxpr", _jit_derived, closed_consts=True,
                            batch_params=_batch_jit_params).register()


def _jit_pp_rule(eqn, context):
  # As JAX prints `jit`: `name=` first, then the other params sorted; the body's binders
  # and results take the names of the equation's operands and results (not those of a body
  # printed once and shared by several equations: it gets fresh names, as in JAX).
  body = eqn.params["jaxpr"].jaxpr
  if body not in context.shared_jaxprs:
    context.suggest_same_var_names(body.invars, eqn.invars)
    context.suggest_same_var_names(body.outvars, eqn.outvars)
  return [("name", eqn.params["name"]),
          *sorted((k, v) for k, v in eqn.params.items()
                  if k != "name" and not _jit_param_hidden(k, v))]


def _jit_param_hidden(k: str, v: Any) -> bool:
  """Whether JAX's printer leaves out the jit param `k` of value `v`: `inline` always, the
  others when they hold their defaults (nothing donated, every sharding unspecified, every
  layout None, an empty mesh, no compiler options, `keep_unused` False)."""
  if k in ("in_shardings", "out_shardings"):
    return all(type(x) is sharding_lib.UnspecifiedValue for x in v)
  if k in ("in_layouts", "out_layouts"):
    return all(x is None for x in v)
  if k == "ctx_mesh":
    return v.empty
  if k == "donated_invars":
    return not any(v)
  if k in ("keep_unused", "compiler_options_kvs"):
    return not v
  return k == "inline"


core.pp_eqn_rules[jit_p] = _jit_pp_rule
pe.inline_calls[jit_p] = "jaxpr"
core.pp_named_calls.add(jit_p)



class TracedSignature:
  """The result of tracing one signature.

  `jaxpr` takes as leading invars the constants `consts` (those the function closes over,
  then, with `jax_use_simplified_jaxpr_constants`, those of the jit equations in it:
  `hoist_call_consts`): it is what is lowered, with the constants it uses in the text
  (`bakes_constants`) or as arguments that go to the device once. `call` is what a jit
  equation binds inside a trace, with the operands `call_consts` before the arguments: as
  JAX, the constants stay in `call`'s ClosedJaxpr, unless some are tracers of an enclosing
  trace (then all are operands).
  `closed` is the traced jaxpr with all its constants as constvars (`make_jaxpr`)."""
  __slots__ = ("jaxpr", "consts", "out_tree", "executable", "device_calls", "call",
               "call_consts", "closed", "key_reuse", "call_stack", "__weakref__")

  def __init__(self, jaxpr: ClosedJaxpr, consts: list, out_tree,
               closed: ClosedJaxpr | None = None):
    self.jaxpr = jaxpr
    self.consts = consts
    self.out_tree = tree_util.canonical_treedef(out_tree)   # dicts rebuilt sorted, as JAX
    self.executable = None
    self.device_calls = {}
    self.call, self.call_consts = jaxpr, consts
    self.closed = closed or self.hoisted()
    self.key_reuse = None   # its KeyReuseSignature when traced with debug_key_reuse on
    # The user's frames where it was traced (`core.user_frames`): the outer part of the
    # callsite locations of its ops, as JAX's tracebacks hold them.
    self.call_stack = ()

  @classmethod
  def of_traced(cls, jaxpr: core.Jaxpr, consts: list, out_tree) -> "TracedSignature":
    """The signature of a traced `jaxpr` (its constvars valued by `consts`)."""
    closed = ClosedJaxpr(jaxpr, consts)
    if any(isinstance(c, core.Tracer) for c in consts):
      return cls(ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), []), list(consts), out_tree,
                 closed)
    # NB: as JAX by default, the constants of the jit equations inside stay in their calls'
    # ClosedJaxprs (constants of the callees' text); hoisted to arguments of the program
    # with jax_use_simplified_jaxpr_constants.
    hoisted, inner = (jaxpr, []) if bakes_constants() else hoist_call_consts(jaxpr)
    self = cls(ClosedJaxpr(pe.convert_constvars_jaxpr(hoisted), []), [*consts, *inner],
               out_tree, closed)
    self.call, self.call_consts = closed, []
    return self

  def hoisted(self) -> ClosedJaxpr:
    """`jaxpr` with `consts` as its constvars again: the traced jaxpr whose jit equations
    take their constants as operands, read from its own."""
    j, n = self.jaxpr.jaxpr, len(self.consts)
    return ClosedJaxpr(j.replace(constvars=j.invars[:n], invars=j.invars[n:]), self.consts)

  def out_shapes(self):
    """The output pytree with a ShapeDtypeStruct (weak types kept) at each leaf."""
    return optree.tree_unflatten(self.out_tree, [
        ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type)
        for a in self.jaxpr.out_avals])


def trace_flat(fun: Callable, args: tuple, kwargs: dict, static_argnums: Sequence[int],
               static_argnames: Sequence[str], traced_for: str,
               in_avals: Sequence[ShapedArray] | None = None) -> tuple[TracedSignature, Any]:
  """Traces `fun(*args, **kwargs)` with the static arguments fixed; returns the traced
  signature and the flat dynamic leaves."""
  name = fun_name(fun)
  dyn_argnums = [i for i in range(len(args)) if i not in static_argnums]
  dyn_args = tuple(args[i] for i in dyn_argnums)
  dyn_kwargs = {k: v for k, v in kwargs.items() if k not in static_argnames}
  leaves, in_tree = flatten((dyn_args, dyn_kwargs))
  sig = fun_signature(fun)
  with_paths = tree_util.tree_flatten_with_path((dyn_args, dyn_kwargs))[0]
  names, origins = arg_names(sig, dyn_argnums, list(dyn_kwargs), with_paths)
  if in_avals is None:
    in_avals = [abstractify(x, names[i], fun) for i, x in enumerate(leaves)]
  debug = DebugInfo(traced_for, name, names, origins, api_util.fun_source_info(fun))
  out_tree_box = []
  check_keys = key_reuse.enabled()
  key_sig = []

  def flat_fun(*flat):
    if not check_keys:
      return body(*flat)
    with key_reuse.scope() as sc:   # keys made in the trace (the arguments') belong to it
      out_leaves = body(*flat)
    key_sig[0] = key_reuse.BodyKeys(key_sig[0], tuple(sc.consumed_outer()))
    return out_leaves

  def body(*flat):
    d_args, d_kwargs = optree.tree_unflatten(in_tree, flat)
    full = list(d_args)
    for i in sorted(static_argnums):
      if i < len(args):
        full.insert(i, args[i])
    all_kwargs = {**{k: v for k, v in kwargs.items() if k in static_argnames}, **d_kwargs}
    out = fun(*full, **all_kwargs)
    out_leaves, out_tree = flatten(out)
    if traced_for == "jit":
      state.check_no_ref_out(fun, out_leaves, out=out)
    check_out_leaves(out_leaves, out_tree, name, traced_for, debug.func_src_info)
    out_tree_box.append(out_tree)
    if check_keys:   # the keys of `d_args`/`d_kwargs` were made fresh for this trace
      key_sig.append(key_reuse.body_signature(tree_util.tree_leaves((d_args, d_kwargs)),
                                              tree_util.tree_leaves(out)))
    return out_leaves

  # NB: the user's frame that called the jit bounds the tracebacks of the equations
  # (`core.traced_from`); it and those above it are the outer part of their locations.
  caller = core.first_user_frame(sys._getframe(1))
  log = None
  if traced_for == "jit" and core.trace_state.trace is core.eval_trace:
    log = monitoring.log_timed("dispatch", config.log_compiles,
                               "Finished tracing {fun_name} for jit in {elapsed_time:.9f} sec")
  with monitoring.timed(monitoring.JAXPR_TRACE_EVENT, name, log), core.traced_from(caller):
    jaxpr, consts = pe.trace_to_jaxpr(flat_fun, in_avals, debug)
  if config.enable_checks:   # JAX's jax_enable_checks: type-check every traced jaxpr
    core.check_jaxpr(jaxpr)
  traced = TracedSignature.of_traced(jaxpr, list(consts), out_tree_box[0])
  limit = config.traceback_in_locations_limit
  traced.call_stack = core.user_frames(caller, limit if limit >= 0 else 1000)
  del caller
  if key_sig:
    traced.key_reuse = key_sig[0]
  return traced, leaves


# ---------------------------------------------------------------------------
# jit

_fun_caches: "weakref.WeakKeyDictionary[Callable, dict]" = weakref.WeakKeyDictionary()

#: The most entries all jit caches hold together (as JAX's jit caches, bounded at a few
#: thousand): each executable of XLA:CPU maps ~3 memory regions, and a process that keeps
#: every executable of a module-level function called with ever new shapes alive would reach
#: Linux's limit on mappings (vm.max_map_count, 65530), where XLA's compiler crashes.
MAX_JIT_CACHE_ENTRIES = 4096


class JitCache(dict):
  """One jit cache (a function's, per options): a dict whose insertions are remembered in
  one process-wide order, so that beyond `MAX_JIT_CACHE_ENTRIES` live entries the oldest
  inserted leave (a function called again with an evicted signature traces and compiles
  again). Lookups are plain dict lookups (the call's fast path pays nothing)."""
  __slots__ = ("__weakref__",)

  def __setitem__(self, key, value):
    super().__setitem__(key, value)
    _jit_order.append((weakref.ref(self), key))
    if len(_jit_order) > _jit_order_limit[0]:
      _shrink_jit_caches()


_jit_order: "collections.deque[tuple[weakref.ref, Any]]" = collections.deque()
_jit_order_limit = [MAX_JIT_CACHE_ENTRIES]


def _shrink_jit_caches() -> None:
  """Forgets the remembered insertions whose entries are gone (their function collected,
  the caches cleared), then evicts the oldest live entries beyond `MAX_JIT_CACHE_ENTRIES`.
  Runs once per `MAX_JIT_CACHE_ENTRIES // 2` insertions at most (amortized O(1))."""
  live = collections.deque()
  seen = set()
  for ref, key in reversed(_jit_order):   # NB: a key inserted again counts once, at its newest
    cache = ref()
    if cache is not None and key in cache and (id(cache), key) not in seen:
      seen.add((id(cache), key))
      live.appendleft((ref, key))
  while len(live) > MAX_JIT_CACHE_ENTRIES:
    ref, key = live.popleft()
    cache = ref()
    if cache is not None:
      dict.pop(cache, key, None)
  _jit_order.clear()
  _jit_order.extend(live)
  _jit_order_limit[0] = len(_jit_order) + max(MAX_JIT_CACHE_ENTRIES // 2, 1)


def _cache_for(fun: Callable, options: tuple) -> dict:
  try:
    per_fun = _fun_caches.get(fun)
    if per_fun is None:
      per_fun = _fun_caches[fun] = {}
      # NB: when `fun` is collected, its executables leave the global compile cache too.
      weakref.finalize(fun, _release_executables, per_fun).atexit = False
  except TypeError:   # not weakly referenceable: a cache for this wrapper only
    return JitCache()
  cache = per_fun.get(options)
  if cache is None:
    cache = per_fun[options] = JitCache()
  return cache


@dispatch.register_cache_clearer
def _clear_jit_caches() -> None:
  # NB: emptied in place: JitWrapped objects keep references to these dicts.
  for per_fun in list(_fun_caches.values()):
    for cache in per_fun.values():
      cache.clear()
  _jit_executables.clear()
  _jit_order.clear()
  _jit_order_limit[0] = MAX_JIT_CACHE_ENTRIES


def _release_executables(per_fun: dict) -> None:
  texts = set()
  for cache in per_fun.values():
    for entry in cache.values():
      calls = ([entry.executable, *entry.device_calls.values()]
               if isinstance(entry, TracedSignature) else [entry])
      texts.update(c.text for c in calls if c is not None and getattr(c, "text", None))
  per_fun.clear()
  for t in texts:
    dispatch.forget_module(t)
  if len(texts) >= 16:
    dispatch.trim_host_memory()



class CompiledCall:
  """A compiled signature's call: leaves in, Arrays out. `device` is where it runs (None:
  the default device)."""
  __slots__ = ("exe", "kept", "const_bufs", "in_avals", "out_avals", "out_tree", "donated",
               "simple", "single", "text", "device", "float0_outs", "callbacks", "handlers")

  def __init__(self, exe, kept, const_bufs, in_avals, out_avals, out_tree, donated, text,
               device):
    self.exe = exe
    self.kept = kept                  # indices of the leaves the program reads, or None: all
    self.const_bufs = const_bufs
    self.in_avals = in_avals          # avals of all dynamic leaves
    self.out_avals = out_avals
    self.out_tree = out_tree
    self.donated = donated            # leaf indices donated, or ()
    # NB: float0 results (tangents of integers) are i1 zeros in the program; they come back
    # as host float0 zeros, as in JAX.
    self.float0_outs = [i for i, a in enumerate(out_avals)
                        if a is not core.abstract_token and a.dtype == dtypes.float0]
    self.callbacks = dispatch.host_callbacks_of(text)
    self.simple = (not const_bufs and not donated and device is None
                   and not self.float0_outs and not self.callbacks)
    self.single = (out_tree.num_leaves == 1 and out_tree.num_nodes == 1
                   and not self.float0_outs and core.abstract_token not in out_avals)
    self.text = text
    self.device = device
    # NB: the runtime's own result handlers: Python ones make jaxlib import jax
    self.handlers = dispatch.runtime_handlers(out_avals, device)

  def call_arrays(self, args: Sequence[Array]):
    """The fast path: every argument is an Array on the default device."""
    bufs = ([x._buf for x in args] if self.kept is None
            else [args[i]._buf for i in self.kept])
    try:
      outs = self.exe.execute_sharded(bufs).consume_with_handlers(self.handlers)
      client.count_execution()
    except TypeError:
      dispatch.raise_if_donated(args)
      raise
    if self.single:
      return Array(outs[0], self.out_avals[0], self.device)
    return optree.tree_unflatten(self.out_tree,
                                 dispatch.wrap_results(outs, self.out_avals, self.device))

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
      if self.callbacks:
        results = dispatch.run_with_callbacks(self.exe, bufs, self.callbacks)
      else:
        results = self.exe.execute_sharded(bufs)
        client.count_execution()
      outs = dispatch.wrap_results(results.consume_with_handlers(self.handlers),
                                   self.out_avals, dev)
    except TypeError:
      dispatch.raise_if_donated(leaves)
      raise
    for i in self.donated:
      x = leaves[i]
      if type(x) is Array and x._buf is not None and x._buf.is_deleted():
        x._buf = None
    for i in self.float0_outs:
      outs[i] = np.zeros(self.out_avals[i].shape, dtypes.float0)
    return optree.tree_unflatten(self.out_tree, outs)


class _MultiDeviceCall:
  """What the compiled calls of programs over several devices share: the signature's avals,
  tree, kept and donated leaves and module text (`device` None: the program names its own
  devices)."""
  simple = False

  def __init__(self, lowered: LoweredSignature):
    entry = lowered.entry
    jaxpr = entry.jaxpr.jaxpr
    self.kept = lowered.kept
    self.in_avals = [v.aval for v in jaxpr.invars[len(entry.consts):]]
    self.out_avals = jaxpr.out_avals
    self.out_tree = entry.out_tree
    self.donated = lowered.donated
    self.text = lowered.text
    self.device = None

  def _kept(self):
    return range(len(self.in_avals)) if self.kept is None else self.kept


class SpmdCall(_MultiDeviceCall):
  """A compiled signature whose program spans several devices (jit of pmap): replicated
  arguments in, replicated results out (one copy each)."""

  def __init__(self, lowered: LoweredSignature, exe=None):
    super().__init__(lowered)
    entry = lowered.entry
    jaxpr = entry.jaxpr.jaxpr
    devs = lowered.spmd_devices
    if exe is None:
      exe = dispatch.compile_module(lowered.text, devs, num_partitions=len(devs),
                                    fun_name=lowered.fun_name)
    self.exe = exe
    self.consts = [entry.consts[i] for i in lowered.used_consts]
    const_avals = [jaxpr.invars[i].aval for i in lowered.used_consts]
    idx = self._kept()
    self.program = spmd.replicated_program(
        exe, devs, [*const_avals, *[self.in_avals[i] for i in idx]], self.out_avals,
        self.text, [len(const_avals) + k for k, i in enumerate(idx) if i in self.donated])

  def __call__(self, leaves: Sequence[Any]):
    idx = range(len(leaves)) if self.kept is None else self.kept
    outs = self.program.call([*self.consts, *[leaves[i] for i in idx]])
    return optree.tree_unflatten(self.out_tree, outs)


class ShardedCall(_MultiDeviceCall):
  """A compiled signature whose program spans a device mesh (sharded jit): arguments laid
  out by the program's input shardings, results Arrays over the mesh."""

  def __init__(self, lowered: LoweredSignature, exe=None):
    super().__init__(lowered)
    entry = lowered.entry
    mesh, in_sh, out_sh, self._given_in = lowered.mesh_layout
    jaxpr = entry.jaxpr.jaxpr
    idx = self._kept()
    mask = [False] * len(lowered.used_consts) + [i in self.donated for i in idx]
    self.program = spmd.compile_sharded(lowered.name, lowered.dce_jaxpr, mesh, in_sh, out_sh,
                                        donated=mask, text=lowered.text, exe=exe,
                                        consts=lowered.baked, fun_name=lowered.fun_name)
    self.exe = self.program.exe
    nc = len(lowered.used_consts)
    # NB: constants go to the devices once, laid out as the program wants them.
    self.consts = [Array(spmd.shard_arg(entry.consts[i], jaxpr.invars[i].aval, sh),
                         jaxpr.invars[i].aval, None, sh)
                   for i, sh in zip(lowered.used_consts, self.program.in_shardings[:nc])]
    self.arg_shardings = self.program.in_shardings[nc:]
    self.mesh = mesh
    self.names = lowered.names
    kept = set(idx)
    self._pruned = [i for i, g in enumerate(self._given_in) if i not in kept and g is not None]
    prog = self.program
    # The fast path: no constants, pruned or donated leaves, callbacks or collectives, every
    # result kept whole on the mesh; each argument already laid out by the very sharding
    # object the program takes (the common case: the previous call's result fed back).
    self._fast = (not self.consts and self.kept is None and not self.donated
                  and not prog.callbacks and not prog.collective
                  and not any(prog._replicated))
    self._outs = list(zip(prog.out_avals, prog.out_shardings))
    self._single = self.out_tree.num_leaves == 1 and self.out_tree.num_nodes == 1

  def __call__(self, leaves: Sequence[Any]):
    if self._fast:
      bufs = []
      for x, sh in zip(leaves, self.arg_shardings):
        if type(x) is not Array or x._sharding is not sh or x._buf is None:
          break
        bufs.append(x._buf)
      else:
        outs = self.exe.execute_sharded(bufs).consume_with_handlers(self.program._handlers)
        client.count_execution()
        if self._single:
          av, sh = self._outs[0]
          return Array(outs[0], av, None, sh)
        return optree.tree_unflatten(self.out_tree, [Array(o, av, None, sh) for o, (av, sh)
                                                     in zip(outs, self._outs)])
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
    name = self.names[i] if self.names else f"{i}"
    what = f"argument {name} with shape {x.aval.str_short()}"
    if tuple(x.sharding._device_assignment) != tuple(sh._device_assignment):
      raise ValueError(
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
    out = [NamedSharding(self.mesh, PartitionSpec()) if g is None else g
           for g in self._given_in]
    idx = range(len(self.in_avals)) if self.kept is None else self.kept
    for i, sh in zip(idx, self.arg_shardings):
      out[i] = sh
    return out


class _FlatKey:
  """Marks the keys of jit's fastest path (every positional argument an Array)."""
  __slots__ = ()

  def __repr__(self):
    return "<flat>"


_FLAT = _FlatKey()


class _PlacedKey(_FlatKey):
  """Marks the keys of the fast path of placed calls: every positional argument an Array,
  some on a mesh or a device (keyed by avals and layouts)."""
  __slots__ = ()

  def __repr__(self):
    return "<placed>"


_PLACED = _PlacedKey()


def _committed_results(leaves: Sequence[Any], out: Any) -> Any:
  """`out`, its Arrays marked committed to the default device when some Array among
  `leaves` is (JAX's: committed arguments give committed results)."""
  if dispatch.commits_default(leaves):
    dispatch.mark_all_committed(optree.tree_leaves(out, none_is_leaf=False,
                                                   namespace=tree_util.NAMESPACE))
  return out


#: Per traced signature, the device a device_put inside pins it to (`spmd.jaxpr_device`).
_pinned: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _plain(args) -> bool:
  """Whether `args` are all Arrays on the default device (none placed on a device or a
  mesh) and no mesh is set: a call on them is the default device's, as before any
  placement (the fast path's)."""
  for a in args:
    if type(a) is not Array or a._sharding is not None or a._device is not None:
      return False
  return sharding_lib.concrete_mesh() is None


def _placed_key(args) -> tuple | None:
  """The fast-path key of positional `args` when all are Arrays (their avals and layouts,
  the config and the mesh context), else None."""
  key = [_PLACED]
  for a in args:
    if type(a) is not Array:
      return None
    key.append(a.aval)
    key.append(a._sharding if a._sharding is not None else a._device)
  key.append(config.state_key)
  key.append(sharding_lib.concrete_mesh())
  key.append(sharding_lib.get_abstract_mesh())
  return tuple(key)


class PjitFunction:
  """The function returned by `jit` (named as JAX's type is: chex's `assert_max_traces`
  recognizes a jitted function by the name of its type). Calling it runs the compiled
  program for the arguments' signature (tracing and compiling on the first call of a
  signature). `JitWrapped` is another name for it."""
  #: The mutable hijax values the function closes over (taken as hidden arguments at each
  #: call, `hi_mutable_call`), or None.
  hi_values: list | None = None

  def __init__(self, fun: Callable, static_argnums, static_argnames, donate_argnums,
               donate_argnames, keep_unused: bool, inline: bool, device=None,
               backend: str | None = None, in_shardings=None, out_shardings=None):
    api_util.check_callable(fun)
    # NB: what a pickle rebuilds it from (`__reduce__`; its caches are not pickled)
    self._init_args = (fun, static_argnums, static_argnames, donate_argnums, donate_argnames,
                       keep_unused, inline, device, backend, in_shardings, out_shardings)
    if device is not None and backend is not None:
      raise ValueError("jit: pass at most one of `device` and `backend`.")
    # Formats (layouts) in the shardings: their layouts are kept apart (`_formats`), their
    # shardings must name the default device (`_split_formats`).
    self._formats = None
    if _has_format(in_shardings) or _has_format(out_shardings):
      self._formats = (in_shardings, out_shardings)
      in_shardings = _check_format_shardings(in_shardings)
      out_shardings = _check_format_shardings(out_shardings)
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
    update_wrapper(self, fun)
    self._fun = fun
    sig = fun_signature(fun)
    # NB: as JAX's jitted functions: `inspect.signature(f, follow_wrapped=False)` (chex's
    # fake_pmap) reads it here, not through `__wrapped__`.
    self.__signature__ = sig
    # NB: as JAX's, numbers and names given both are taken as they are (no inference of
    # one from the other): flax's nn.jit passes static_argnums for its own leading
    # arguments and static_argnames for the module method's, by keyword only.
    donate_argnums, donate_argnames, static_argnums, static_argnames = (
        api_util.resolve_argnums(fun, sig, donate_argnums, donate_argnames,
                                 static_argnums, static_argnames))
    # NB: as JAX's: a negative static argnum counts from the end of each call's positional
    # arguments (`_argnums_for`); a negative donate argnum donates nothing; an argument
    # both static (by number) and donated is static.
    static_argnums = tuple(sorted(set(static_argnums)))
    donate_argnums = tuple(sorted(i for i in set(donate_argnums)
                                  if i >= 0 and i not in static_argnums))
    self._static_argnums = static_argnums
    self._static_argnames = static_argnames
    self._donate_argnums = donate_argnums
    self._donate_argnames = donate_argnames
    self._negative_argnums = any(i < 0 for i in static_argnums)
    self._keep_unused = bool(keep_unused)
    self._inline = bool(inline)
    self._fast = (not static_argnums and not static_argnames and self._device is None and
                  not self._sharded and self._formats is None)
    # NB: the fast path of placed calls (Arrays on a mesh or a device) admits shardings
    self._placed_fast = (not static_argnums and not static_argnames and self._device is None
                         and self._formats is None)
    options = (static_argnums, static_argnames, donate_argnums, donate_argnames,
               self._keep_unused)
    # NB: shardings are per wrapper (prefix trees need not be hashable).
    self._cache = JitCache() if self._sharded or self._formats else _cache_for(fun, options)
    self._refs: list | None = None   # the refs it closes over, once it has met a Ref
    self._ref_cache: dict = {}

  def __repr__(self):
    # NB: JAX's repr of a jitted function, of what `__wrapped__` holds: "<PjitFunction>"
    # when that repr fails or `__wrapped__` was deleted.
    try:
      return f"<PjitFunction of {self.__wrapped__!r}>"
    except Exception:   # noqa: BLE001
      return "<PjitFunction>"

  def __get__(self, obj, objtype=None):
    if obj is None:
      return self
    return functools.partial(self, obj)

  def _argnums_for(self, nargs: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """static_argnums and donate_argnums for a call with `nargs` positional arguments."""
    if not self._negative_argnums:
      return self._static_argnums, self._donate_argnums
    static = tuple(sorted({j for j in (i + nargs if i < 0 else i for i in self._static_argnums)
                           if j >= 0}))
    return static, tuple(i for i in self._donate_argnums if i not in static)

  # -- keys

  def _key(self, args, kwargs, static_argnums):
    if self._fast:
      leaves, treedef = flatten((args, kwargs))
      static = ()
    else:
      static = self._static_key(args, kwargs, static_argnums)
      dyn_args = tuple(a for i, a in enumerate(args) if i not in static_argnums)
      dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self._static_argnames}
      leaves, treedef = flatten((dyn_args, dyn_kwargs))
    try:
      sig = [x.aval if type(x) is Array or isinstance(x, core.Tracer) else _leaf_sig(x)
             for x in leaves]
    except (TypeError, OverflowError):
      self._raise_bad_leaf(args, kwargs, static_argnums)
      raise
    dev = self._device
    if dev is None and (dispatch.placement_used[0] or self._sharded):
      dev = dispatch.target_placement(
          leaves, lambda i: self._describe_leaf(args, kwargs, static_argnums, leaves, i))
      if self._sharded and type(dev) is not dispatch.Placement:
        dev = dispatch.Placement(dispatch.committed_sharding(x) for x in leaves)
    state = config.state_key
    ctx = sharding_lib.concrete_mesh()
    if ctx is not None and type(dev) is not dispatch.Placement and self._device is None:
      # NB: arguments committed to a device meet the mesh of `set_mesh` (JAX's check)
      committed = [dispatch.committed_sharding(x) for x in leaves]
      if any(committed):
        dev = dispatch.Placement(committed)
    am = sharding_lib.get_abstract_mesh()
    if ctx is not None or not am.empty:   # NB: types and layouts depend on the mesh context
      state = (state, ctx, am)
    frames = batching.bound_axes()
    if frames:   # NB: the named axes bound around the call (`lax.axis_size` is a constant)
      named = tuple(f for f in frames if f[0] is not None)
      if named:
        state = (state, named)
    return (treedef, static, state, dev, *sig), leaves, dev

  def clear_cache(self) -> None:
    """Forgets the signatures this jitted function traced and compiled (JAX's
    `clear_cache`): its next call traces and compiles again. Other jits of the same
    function with other options keep theirs."""
    _release_executables({0: self._cache})
    self._cache.clear()
    self._ref_cache.clear()

  def _raise_no_tracing(self, staging: bool = False):
    # NB: JAX's words: a call names the function's source location, `trace`/`lower` (JAX's
    # trace cache) the function itself
    fun = self._fun if staging else api_util.fun_source_info(self._fun)
    raise RuntimeError(f"re-tracing function {fun} for `jit`, but 'no_tracing' is set")

  def _static_key(self, args, kwargs, static_argnums) -> tuple:
    """The static arguments of a call as its key holds them: `(type, value)` per positional
    one, `(name, type, value)` per keyword one. As JAX's, values of different types are
    different keys (`1`, `1.0` and `True` trace apart), and `__eq__` is called only
    between values of the same type.

    Raises:
      ValueError: JAX's "Non-hashable static arguments are not supported..." for a value
        whose hash raises TypeError (other errors of `__hash__` propagate as they are).
    """
    static = tuple((type(args[i]), args[i]) for i in static_argnums if i < len(args)) + tuple(
        (k, type(kwargs[k]), kwargs[k]) for k in self._static_argnames if k in kwargs)
    for entry in static:
      try:
        hash(entry[-1])
      except TypeError as e:
        bad = entry[-1]
        # NB: JAX's exact type and words (a ValueError, its text ending in a newline).
        raise ValueError(
            f"Non-hashable static arguments are not supported. An error occurred while "
            f"trying to hash an object of type {type(bad)}, {bad}. The error was:\n"
            f"TypeError: {e}\n") from None
    return static

  def _lookup(self, key):
    """The cache entry of `key` (from `_key`), or None.

    Raises:
      ValueError: JAX's "static arguments should be comparable using __eq__..." when the
        `__eq__` of a static argument raises (comparing with a cached key of equal hash).
    """
    try:
      return self._cache.get(key)
    except Exception as e:   # noqa: BLE001 -- an error of the user's __eq__
      static = key[1] if type(key) is tuple and len(key) > 1 else ()
      if not static:
        raise
      raise _static_eq_error(self._cache, static, e) from None

  def _describe_leaf(self, args, kwargs, static_argnums, leaves, i) -> str:
    """"argument x of f with shape float32[3]" for dynamic leaf `i`, as JAX's messages."""
    dyn_argnums = [k for k in range(len(args)) if k not in static_argnums]
    dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self._static_argnames}
    with_paths = tree_util.tree_flatten_with_path(
        (tuple(args[k] for k in dyn_argnums), dyn_kwargs))[0]
    names, _ = arg_names(fun_signature(self._fun), dyn_argnums, list(dyn_kwargs), with_paths)
    qualname = getattr(self._fun, "__qualname__", None) or fun_name(self._fun)
    return (f"argument {names[i]} of {qualname} with shape "
            f"{core.get_aval(leaves[i]).str_short(False)}")

  def _raise_bad_leaf(self, args, kwargs, static_argnums):
    """Re-raises a signature error naming the argument's key path."""
    dyn_argnums = [i for i in range(len(args)) if i not in static_argnums]
    dyn = (tuple(args[i] for i in dyn_argnums),
           {k: v for k, v in kwargs.items() if k not in self._static_argnames})
    with_paths = tree_util.tree_flatten_with_path(dyn)[0]
    names, _ = arg_names(fun_signature(self._fun), dyn_argnums, list(dyn[1]), with_paths)
    for name, (_, x) in zip(names, with_paths):
      if type(x) in tree_util.staged_types:   # a typed key array: its keys are traced
        continue
      try:
        abstractify(x, name, self._fun)
      except OverflowError:
        raise OverflowError(f"An overflow was encountered while parsing an argument to a "
                            f"jitted computation, whose argument path is {name}. Got "
                            f"{type(x)} with value {x}") from None

  # -- calls

  def __call__(self, *args, **kwargs):
    __tracebackhide__ = True  # noqa: F841
    try:
      # Fast path: positional arguments whose leaves are all Arrays on the default device,
      # a signature compiled before (keyed by the arguments' tree structure and avals).
      if (not kwargs and self._fast and core.trace_state.trace is core.eval_trace
          and not config.disable_jit and (not dispatch.placement_used[0]
                                          or _plain(args))):
        # Fastest: every positional argument an Array (no pytree to flatten).
        avals = [_FLAT]
        for a in args:
          if type(a) is not Array:
            break
          avals.append(a.aval)
        else:
          call = self._cache.get((*avals, config.state_id))
          if call is not None:
            if _committed_to_default:
              return _committed_results(args, call.call_arrays(args))
            return call.call_arrays(args)
        leaves, treedef = flatten(args)
        avals = [a.aval for a in leaves if type(a) is Array]
        if len(avals) == len(leaves) and (not dispatch.placement_used[0] or _plain(leaves)):
          call = self._cache.get((treedef, config.state_id, *avals))
          if call is not None:
            if _committed_to_default:
              return _committed_results(leaves, call.call_arrays(leaves))
            return call.call_arrays(leaves)
      elif (not kwargs and self._placed_fast and core.trace_state.trace is core.eval_trace
            and not config.disable_jit and self._refs is None):
        # Placed calls (Arrays on a mesh or a device): keyed by avals and layouts.
        key = _placed_key(args)
        call = None if key is None else self._cache.get(key)
        if call is not None:
          return call(list(args))
      return self._call(args, kwargs)
    except Exception as e:   # NB: an API boundary without a wrapper on the fast path
      traceback_util.filter_exception(e)
      raise

  def _call(self, args, kwargs):
    if config.disable_jit:
      return self._fun(*args, **kwargs)
    static_argnums, donate_argnums = self._argnums_for(len(args))
    if self.hi_values is not None:   # closes over mutable hijax values
      return hi_mutable_call[0](self, self._fun, args, kwargs, static_argnums,
                                self._static_argnames)
    if self._refs is not None:
      return self._ref_call(args, kwargs, static_argnums)
    try:
      key, leaves, dev = self._key(args, kwargs, static_argnums)
    except MutableHiLeaf:
      if hi_mutable_call[0] is None:
        raise
      return hi_mutable_call[0](self, self._fun, args, kwargs, static_argnums,
                                self._static_argnames)
    except TypeError:
      if not state.ref_leaves(flatten((args, kwargs))[0]):
        raise
      return self._ref_call(args, kwargs, static_argnums)
    entry = self._lookup(key)
    if config.no_tracing and (entry is None or core.trace_state.trace is not core.eval_trace):
      # NB: as JAX's, where a call its dispatch cannot serve (a cache miss, traced
      # arguments) raises
      self._raise_no_tracing()
    if entry is None:
      if config.explain_cache_misses:
        self._explain_miss(key, args, kwargs, static_argnums)
      try:
        entry = self._cache[key] = self._trace(args, kwargs, static_argnums)
      except MutableHiLeaf as e:   # mutable hijax values it closes over: taken as arguments
        if hi_mutable_call[0] is None or not getattr(e, "values", None):
          raise
        return hi_mutable_call[0](self, self._fun, args, kwargs, static_argnums,
                                  self._static_argnames, e)
      except state.RefMet as e:
        if e.frame is not None:   # a ref outside an enclosing jit: that jit traces again
          raise
        return self._ref_call(args, kwargs, static_argnums, e.ref)
    if entry.key_reuse is not None and key_reuse.enabled():
      dyn = (tuple(a for i, a in enumerate(args) if i not in static_argnums),
             {k: v for k, v in kwargs.items() if k not in self._static_argnames})
      return key_reuse.call(
          entry.key_reuse, "jit", tree_util.tree_leaves(dyn),
          lambda: self._run(entry, args, kwargs, static_argnums, donate_argnums, leaves, dev),
          tree_util.tree_leaves)
    return self._run(entry, args, kwargs, static_argnums, donate_argnums, leaves, dev)

  def _laid_out(self, outs, leaves):
    """`outs`, results of a program run over the mesh of `set_mesh`; as JAX's, a jnp
    function (`inline`) of operands typed over no mesh gives results laid out `P()`."""
    if self._inline:
      mesh = sharding_lib.concrete_mesh()
      if mesh is not None and not any(map(dispatch.committed_sharding, leaves)) and (
          spmd.loose_operands(leaves)):
        spmd.loosen(tree_util.tree_leaves(outs), mesh)
    return outs

  def _run(self, entry, args, kwargs, static_argnums, donate_argnums, leaves, dev):
    """Calls the traced signature `entry`: staged inside a trace, else compiled (once per
    device) and run."""
    if core.trace_state.trace is not core.eval_trace:
      if self._sharded:   # inside another jit the shardings act as constraints (as in JAX)
        return self._constrained_call(entry, args, kwargs, static_argnums, leaves)
      extra = {}   # NB: JAX's params of the equation that differ from their defaults
      if self._inline:   # JAX's jit(inline=True): staged equation by equation
        extra["inline"] = True
      if self._keep_unused:
        extra["keep_unused"] = True
      if donate_argnums or self._donate_argnames:
        donated = self._donated_leaves(args, kwargs, static_argnums, donate_argnums)
        extra["donated_invars"] = ((False,) * len(entry.call_consts)
                                   + tuple(i in donated for i in range(len(leaves))))
      outs = jit_p.bind(*entry.call_consts, *leaves, jaxpr=entry.call,
                        name=fun_name(self._fun), **extra)
      return optree.tree_unflatten(entry.out_tree, outs)
    if config.no_execution:
      dispatch.raise_no_execution(f"jit({fun_name(self._fun)})")
    if type(dev) is not dispatch.Placement and self._device is None:
      # NB: as JAX's, a device_put onto a SingleDeviceSharding inside names the device
      pinned = _pinned.get(entry, _MISSING)
      if pinned is _MISSING:
        pinned = _pinned[entry] = spmd.jaxpr_device(entry.jaxpr.jaxpr)
      if pinned is not None:
        sources = [((c.device,), self._describe_leaf(args, kwargs, static_argnums, leaves, i))
                   for i, c in enumerate(map(dispatch.committed_sharding, leaves))
                   if c is not None]
        spmd.check_device_assignment([*sources, ((pinned[0],), pinned[1])])
        dev = pinned[0]
    call = entry.executable if dev is None else entry.device_calls.get(dev)
    if call is None:
      donated = self._donated_leaves(args, kwargs, static_argnums, donate_argnums)
      placement = dev
      if (type(dev) is not dispatch.Placement and any(map(dispatch.committed_sharding, leaves))
          and spmd.jaxpr_meshes(entry.jaxpr.jaxpr)):
        # NB: a program over a mesh (device_put, shard_map inside) meets arguments committed
        # to a device: their devices join its device assignment (JAX's check).
        placement = dispatch.Placement(map(dispatch.committed_sharding, leaves))
      if type(placement) is dispatch.Placement and not _runs_hi(entry):
        layout = self._layout(entry, args, kwargs, static_argnums, placement)
        call = compile_lowered(lower_traced(entry, donated, self._keep_unused,
                                            fun_name(self._fun), layout=layout))
        if dev is None:
          entry.executable = call
        else:
          entry.device_calls[dev] = call
        self._remember_placed(call, args, kwargs)
        return self._laid_out(call(leaves), leaves)
      if self._formats is not None:
        fmt = self._format_signature(entry, args, kwargs, static_argnums)
        call = compile_lowered(lower_traced(entry, donated, self._keep_unused,
                                            fun_name(self._fun), layout=fmt))
        entry.executable = call
        return call(leaves)
      call = compile_traced(entry, donated, self._keep_unused, fun_name(self._fun), dev,
                            arg_shardings=_arg_shardings(leaves, dev))
      if dev is not None:
        entry.device_calls[dev] = call
      else:
        entry.executable = call
        if (not kwargs and self._fast and call.simple and not config.state_key[1]
            and not config.debug_key_reuse and all(type(a) is Array for a in leaves)):
          self._cache[(flatten(args)[1], config.state_id, *[a.aval for a in leaves])] = call
          if all(type(a) is Array for a in args):   # the flat key of the fastest path
            self._cache[(_FLAT, *[a.aval for a in args], config.state_id)] = call
    if dev is not None:
      self._remember_placed(call, args, kwargs)
    if config.state_key[1]:   # debug_nans / debug_infs
      return self._checked_call(call, leaves, args, kwargs)
    if self._inline and dispatch.placement_used[0]:
      outs = self._laid_out(call(leaves), leaves)
      return _committed_results(leaves, outs) if dev is None and _committed_to_default else outs
    if dev is None and _committed_to_default:
      return _committed_results(leaves, call(leaves))
    return call(leaves)

  def _remember_placed(self, call, args, kwargs) -> None:
    """Keys `call` for the fast path of placed calls when every positional argument is an
    Array (no keyword, static or ref arguments; no debug_nans)."""
    if (not kwargs and self._placed_fast and self._refs is None and not config.state_key[1]
        and not config.debug_key_reuse and dispatch.placement_used[0]):
      key = _placed_key(args)
      if key is not None:
        self._cache[key] = call

  def _checked_call(self, call, leaves, args, kwargs):
    """With debug_nans/debug_infs: a NaN (inf) in the results runs the function again
    without this jit (JAX's "de-optimized version": the jits inside stay, and check their
    own results the same way), so the FloatingPointError names the primitive and its
    traceback the user's line that produced it. JAX's texts (printed to stdout, as JAX)."""
    out = call(leaves)
    kind = dispatch.find_special(optree.tree_leaves(out, namespace=tree_util.NAMESPACE))
    if kind is None:
      return out
    # NB: JAX says "nan" here for infs too.
    print("Invalid nan value encountered in the output of a jax.jit function. Calling the "
          "de-optimized version.")
    try:
      self._fun(*args, **kwargs)
    except (FloatingPointError, ZeroDivisionError) as e:
      raise e from None
    raise FloatingPointError(
        # NB: JAX's text starts with the args of its internal exception.
        f"('jit({fun_name(self._fun)})', '{kind}'). Because "
        f"jax_config.debug_nans.value and/or config.jax_debug_infs is set, the de-optimized "
        f"function (i.e., the function as if the `jit` decorator were removed) was called "
        f"in an attempt to get a more precise error message. However, the de-optimized "
        f"function did not produce invalid values during its execution. This behavior can "
        f"result from `jit` optimizations causing the invalid value to be produced. It may "
        f"also arise from having nan/inf literals as inputs or outputs, like "
        f"`jax.jit(lambda ...: jax.numpy.nan)(...)`. \n\nIt may be possible to avoid the "
        f"invalid value by removing the `jit` decorator, at the cost of losing "
        f"optimizations. \n\nIf you see this error, consider opening a bug report at "
        f"https://github.com/jax-ml/jax.") from None

  def _explain_miss(self, key, args, kwargs, static_argnums) -> None:
    """Logs why this call traces again (config `explain_cache_misses`, as JAX)."""
    seen = [k for k, v in self._cache.items() if type(v) is TracedSignature]
    try:
      dyn_argnums = [i for i in range(len(args)) if i not in static_argnums]
      dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self._static_argnames}
      with_paths = tree_util.tree_flatten_with_path(
          (tuple(args[i] for i in dyn_argnums), dyn_kwargs))[0]
      names, _ = arg_names(fun_signature(self._fun), dyn_argnums, list(dyn_kwargs),
                           with_paths)
    except Exception:   # noqa: BLE001 (names are a courtesy of the log)
      names = ()
    cache_miss.explain(self._fun, fun_name(self._fun), key, seen, names, static_argnums,
                       self._static_argnames)

  def _trace(self, args, kwargs, static_argnums) -> TracedSignature:
    # NB: as JAX's (its traces are cached by weak reference to the function), a function
    # that is not weakly referenceable raises here: "cannot create weak reference to ..."
    weakref.ref(self._fun)
    for i in static_argnums:
      if i < len(args) and isinstance(args[i], core.Tracer):
        raise TypeError(f"jit: static argument {i} of {fun_name(self._fun)} is a traced "
                        f"value ({args[i].aval.str_short()}); static arguments must be "
                        f"concrete, hashable Python values.")
    with state.jit_frame():   # a closed-over Ref met while tracing raises state.RefMet
      traced, _ = trace_flat(self._fun, args, kwargs, static_argnums,
                             self._static_argnames, "jit")
    return traced

  def _ref_call(self, args, kwargs, static_argnums, met: Any = None):
    """A call of a function that takes refs (as arguments, or closed over: `self._refs`,
    JAX's implicit arguments): their values are extra inputs of the traced program, their
    final values extra outputs, written back into the refs after the call (state
    discharge at the jit boundary, `stagecraft.state`). A closed-over ref met while
    tracing joins `self._refs` and the function is traced again.

    Only a function that closes over refs stays on this path for its later calls: one that
    was only given refs as arguments (or whose call failed) goes back to the ordinary one
    (`self._refs` None), so a shared jitted function (jnp's) is not changed by one call."""
    try:
      return self._call_with_refs(args, kwargs, static_argnums, met)
    finally:
      if not self._refs:
        self._refs = None

  def _call_with_refs(self, args, kwargs, static_argnums, met):
    if self._refs is None:
      self._refs = []
    if met is not None:
      self._refs.append(met)
    name = fun_name(self._fun)
    static = self._static_key(args, kwargs, static_argnums)
    dyn = (tuple(a for i, a in enumerate(args) if i not in static_argnums),
           {k: v for k, v in kwargs.items() if k not in self._static_argnames})
    leaves, treedef = flatten(dyn)
    is_ref = tuple(isinstance(x, state.Ref) for x in leaves)
    arg_refs = [x for x, r in zip(leaves, is_ref) if r]
    if len({id(r) for r in arg_refs}) < len(arg_refs):   # JAX's error for a ref passed twice
      state.traced_with_refs(self._fun, args, kwargs, static_argnums, self._static_argnames,
                             [], [])
    while True:
      implicit = [r for r in self._refs if all(r is not a for a in arg_refs)]
      # NB: as JAX's, in an eager call a ref's value enters as it is (a weakly typed one
      # weak: JAX's `~int32[]` inside), else strongly typed.
      eager = core.trace_state.trace is core.eval_trace
      # NB: eagerly a ref's own value enters (not `r[...]`, which lets it escape), so that
      # the call may donate it (see `Ref._owned`).
      it = iter([_eager_ref_value(r) for r in arg_refs] if eager
                else state.carried_values(arg_refs))
      vals = [*([r._value for r in implicit] if eager else state.carried_values(implicit)),
              *(next(it) if r else x for x, r in zip(leaves, is_ref))]
      key = (treedef, static, config.state_key, is_ref,
             tuple(next((j for j, r in enumerate(self._refs) if r is a), -1) for a in arg_refs),
             *[x.aval if type(x) is Array or isinstance(x, core.Tracer) else _leaf_sig(x)
               for x in vals])
      cached = self._ref_cache.get(key)
      if cached is not None:
        break
      try:
        jaxpr, consts, out_tree, written = state.traced_with_refs(
            self._fun, args, kwargs, static_argnums, self._static_argnames, implicit,
            [core.get_aval(v) for v in vals])
      except state.RefMet as e:
        if e.frame is not None:
          raise
        self._refs.append(e.ref)
        continue
      n_out = len(jaxpr.outvars)
      # constants of jit equations inside: in their calls' text (JAX's default), else hoisted
      hoisted, inner = ((jaxpr, []) if bakes_constants(consts) else
                        hoist_call_consts(jaxpr))
      entry = TracedSignature(ClosedJaxpr(pe.convert_constvars_jaxpr(hoisted), []),
                              [*inner, *consts], flatten([0] * n_out)[1])
      entry.call, entry.call_consts = ClosedJaxpr(jaxpr, []), consts
      cached = self._ref_cache[key] = (entry, tree_util.canonical_treedef(out_tree), written,
                                       {})
      break
    entry, out_tree, written, exes = cached
    refs = [*implicit, *arg_refs]
    eager = core.trace_state.trace is core.eval_trace
    if eager:
      # The written refs' buffers are donated where nothing else holds them: the new values
      # reuse them, as JAX writes refs in place.
      ref_pos = [*range(len(implicit)), *(len(implicit) + i for i, r in enumerate(is_ref) if r)]
      donate = frozenset(ref_pos[i] for i in written
                         if refs[i]._owned and vals[ref_pos[i]] is refs[i]._value)
      exe = exes.get(donate)   # (the executables by the donated leaves)
      if exe is None:
        exe = exes[donate] = compile_traced(entry, set(donate), self._keep_unused, name)
      outs = exe(vals)
    else:
      outs = jit_p.bind(*entry.call_consts, *vals, jaxpr=entry.call, name=name)
    n = out_tree.num_leaves
    state.write_back([refs[i] for i in written], outs[n:],
                     owned=eager and not any(o is v for o in outs for v in vals))
    return optree.tree_unflatten(out_tree, outs[:n])

  def _constrained_call(self, entry, args, kwargs, static_argnums, leaves):
    lay = self._layout(entry, args, kwargs, static_argnums, [None] * len(leaves))
    given = [s for s in (*(lay.explicit_in or ()), *(lay.explicit_out or ())) if s is not None]
    user = tree_util.tree_leaves((self._in_shardings, self._out_shardings),
                                 is_leaf=lambda x: isinstance(x, (NamedSharding, PartitionSpec)))
    # NB: a bare PartitionSpec is JAX's NamedSharding over the mesh in context (to_named)
    if all(isinstance(s, PartitionSpec) or (isinstance(s, NamedSharding) and
                                            isinstance(s.mesh, sharding_lib.Mesh))
           for s in user) and all(not s.mesh.explicit_axes for s in given):
      # JAX's equation: the shardings recorded in its params (the lowering and the derived
      # calls' rules apply them)
      unspec = sharding_lib.UNSPECIFIED
      ins = [unspec] * len(entry.call_consts) + [unspec if s is None else s
                                                 for s in lay.explicit_in or [None] * len(leaves)]
      n_out = len(entry.call.jaxpr.outvars)
      outs = [unspec if s is None else s for s in lay.explicit_out or [None] * n_out]
      outs = jit_p.bind(*entry.call_consts, *leaves, jaxpr=entry.call,
                        name=fun_name(self._fun), in_shardings=tuple(ins),
                        out_shardings=tuple(outs))
      return optree.tree_unflatten(entry.out_tree, outs)
    bind = lambda xs, shs: [x if s is None else bind_sharding_constraint(x, s)
                            for x, s in zip(xs, shs or [None] * len(xs))]
    outs = jit_p.bind(*entry.call_consts, *bind(leaves, lay.explicit_in), jaxpr=entry.call,
                      name=fun_name(self._fun))
    return optree.tree_unflatten(entry.out_tree, bind(outs, lay.explicit_out))

  def _format_signature(self, entry, args, kwargs, static_argnums) -> "FormatSignature":
    """The layouts jit's Formats ask for: one per dynamic leaf and one per output leaf
    (None, `Layout.AUTO` or a `Layout`), checked against the leaves' ranks."""
    dyn_argnums = [i for i in range(len(args)) if i not in static_argnums]
    dyn_args = tuple(args[i] for i in dyn_argnums)
    dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self._static_argnames}
    with_paths = tree_util.tree_flatten_with_path((dyn_args, dyn_kwargs))[0]
    names, _ = arg_names(fun_signature(self._fun), dyn_argnums, list(dyn_kwargs), with_paths)
    nconst = len(entry.consts)
    in_avals = [v.aval for v in entry.jaxpr.jaxpr.invars[nconst:]]
    out_avals = entry.jaxpr.jaxpr.out_avals
    in_fmt, out_fmt = self._formats
    in_lay, in_placed = [None] * len(in_avals), [False] * len(in_avals)
    if in_fmt is not None:
      # NB: as JAX, one Format is every argument's, keyword arguments' too; a tree of them
      # describes the positional arguments, and then keyword arguments are an error
      prefix = tuple(in_fmt) if type(in_fmt) is list else in_fmt
      if _is_format_leaf(prefix):
        in_lay, in_placed = _layouts_of(prefix, (dyn_args, dyn_kwargs), "jit in_shardings")
      elif dyn_kwargs:
        raise ValueError("pjit does not support kwargs when in_shardings is specified.")
      else:
        in_lay, in_placed = _layouts_of(prefix, dyn_args, "jit in_shardings")
    out_lay, out_placed = [None] * len(out_avals), [False] * len(out_avals)
    if out_fmt is not None:
      outs = optree.tree_unflatten(entry.out_tree, [0] * len(out_avals))
      out_lay, out_placed = _layouts_of(out_fmt, outs, "jit out_shardings")
    outs = optree.tree_unflatten(entry.out_tree, [0] * len(out_avals))
    out_names = [tree_util.keystr(p) for p, _ in tree_util.tree_flatten_with_path(outs)[0]]
    for what, lays, avals, nms in (("arguments", in_lay, in_avals, names),
                                   ("outputs", out_lay, out_avals, out_names)):
      for lay, aval, name in zip(lays, avals, nms):
        if isinstance(lay, layout_lib.Layout):
          try:
            lay.check_compatible_aval(aval.shape)
          except ValueError as e:
            path = name if what == "arguments" else ("result" + name)
            raise ValueError(f"One of jit {what} with pytree key path {path} is "
                             f"incompatible with its layout annotation {lay}: {e}") from None
    return FormatSignature(in_lay, out_lay, in_placed, out_placed, names)

  def _layout(self, entry, args, kwargs, static_argnums, placement) -> "SignatureLayout":
    """What a sharded signature's layout depends on: committed shardings, jit's shardings
    (flattened per leaf) and names for error messages."""
    dyn_argnums = [i for i in range(len(args)) if i not in static_argnums]
    dyn_args = tuple(args[i] for i in dyn_argnums)
    dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self._static_argnames}
    explicit_in = explicit_out = None
    if self._in_shardings is not None:
      if dyn_kwargs:
        raise ValueError(f"jit: {fun_name(self._fun)} was called with keyword arguments "
                         f"{sorted(dyn_kwargs)}, but in_shardings are given for positional "
                         f"arguments only; pass them positionally.")
      explicit_in = spmd.flatten_shardings(self._in_shardings, dyn_args,
                                              "jit in_shardings")
    if self._out_shardings is not None:
      out_shape = optree.tree_unflatten(entry.out_tree, [0] * entry.out_tree.num_leaves)
      explicit_out = spmd.flatten_shardings(self._out_shardings, out_shape,
                                               "jit out_shardings")
    with_paths = tree_util.tree_flatten_with_path((dyn_args, dyn_kwargs))[0]
    names, _ = arg_names(fun_signature(self._fun), dyn_argnums, list(dyn_kwargs), with_paths)
    return SignatureLayout(list(placement), explicit_in, explicit_out, names,
                           getattr(self._fun, "__qualname__", None) or fun_name(self._fun))

  def __reduce__(self):
    """Pickled (cloudpickle, multiprocessing) as the function and jit's arguments, as JAX's
    jitted functions are; the unpickled one traces and compiles afresh."""
    return (_unpickle_jit, (type(self), self._init_args,
                            getattr(self, "_compiler_options", None)))

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

  def eval_shape(self, *args, **kwargs):
    """The shapes and dtypes of `fun(*args, **kwargs)` without running it (JAX's
    `jit(f).eval_shape`); `args` as for `trace`.

    Returns:
      The output pytree of ShapeDtypeStructs; each carries its `out_shardings` entry (or the
      sharding of its type, as `trace(...).out_info`) when jit was given `out_shardings`.
    """
    out = self.trace(*args, **kwargs).out_info
    if self._out_shardings is None:
      return out
    leaves, tree = tree_util.tree_flatten(out)
    shs = spmd.flatten_shardings(self._out_shardings, out, "jit out_shardings",
                                 keep_single=True)
    return tree_util.tree_unflatten(tree, [
        leaf if s is None else ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=s,
                                                weak_type=leaf.weak_type)
        for leaf, s in zip(leaves, shs)])

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
    entry = self._lookup(key)
    if entry is None:
      if config.no_tracing:
        self._raise_no_tracing(staging=True)
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
      n = len(flatten(a)[0])
      if i in donate_argnums:
        out.update(range(pos, pos + n))
      pos += n
    for k in sorted(kwargs):   # NB: dict leaves flatten in sorted-key order
      if k in self._static_argnames:
        continue
      n = len(flatten(kwargs[k])[0])
      if k in self._donate_argnames:
        out.update(range(pos, pos + n))
      pos += n
    return out


JitWrapped = PjitFunction

traceback_util.register_boundary(JitWrapped.__call__)


def _eager_ref_value(r: state.Ref) -> Array:
  """An eager ref's value as an eager jitted call takes it: unread (not escaped, so the
  call may donate it) and of the ref's weak type."""
  r._check()
  return r._value


def _static_eq_error(cache, static: tuple, e: Exception) -> ValueError:
  """JAX's ValueError for the static arguments `static` (`PjitFunction._static_key`) of a
  call whose comparison with a key of `cache` raised `e`: it names the types of the two
  values compared and shows `e` as JAX does (the user's frames of the call's stack, then
  those of `__eq__`, without source lines)."""
  pair = None
  for k in list(cache):
    other = k[1] if type(k) is tuple and len(k) > 1 else None
    if type(other) is not tuple or len(other) != len(static):
      continue
    for a, b in zip(other, static):
      try:
        a == b   # noqa: B015 -- which pair raises
      except Exception:   # noqa: BLE001
        pair = (a[-1], b[-1])
        break
    if pair is not None:
      break
  if pair is None:
    pair = (static[0][-1],) * 2
  frames = []
  f = sys._getframe(1)
  while f is not None:   # the call's stack, outermost last
    if traceback_util.include_frame(f):
      frames.append((f.f_code.co_filename, f.f_lineno, f.f_code.co_name))
    f = f.f_back
  frames.reverse()
  tb = e.__traceback__
  while tb is not None:
    f = tb.tb_frame
    if traceback_util.include_frame(f):
      frames.append((f.f_code.co_filename, tb.tb_lineno, f.f_code.co_name))
    tb = tb.tb_next
  shown = "Traceback (most recent call last):\n" + "".join(
      f'  File "{name}", line {line}, in {fun}\n' for name, line, fun in frames)
  shown += f"{type(e).__name__}: {e}"
  return ValueError(
      f"static arguments should be comparable using __eq__.The following error was raised "
      f"when comparing two objects of types {type(pair[0])} and {type(pair[1])}. The error "
      f"was:\n{shown}")


def _leaf_sig(x):
  t = type(x)
  if t in dtypes.python_scalar_kind:
    return core.get_aval(x)
  if t is np.ndarray:
    return core.pytype_aval_mappings[np.ndarray](x)   # NB: refuses non-numeric dtypes
  if t is state.Ref:   # PjitFunction._call takes refs on its own path
    raise TypeError("a Ref is not an array: jit takes Refs when called, not in "
                    "jit(f).trace()/.lower()")
  aval = abstractify(x, "?", "jit")
  if getattr(aval, "has_qdd", False) is True:   # a mutable hijax value (flax's hijax Variable)
    raise MutableHiLeaf(
        f"stagecraft takes mutable hijax values ({type(x).__name__}) as arguments of jit "
        f"calls only, not in jit(f).trace()/.lower(), eval_shape or other transformations.")
  return aval


class MutableHiLeaf(core.MutableHiError):
  """A mutable hijax value met among a jit call's arguments (`PjitFunction._call` hands the
  call to `hi_mutable_call`)."""


#: `call(pjit_function, fun, args, kwargs, static_argnums, static_argnames)`: a jit call
#: (of `fun`, by the jit-compiled function `pjit_function`) some of whose arguments
#: are mutable hijax values (their state lowered to arrays, written back after); installed
#: by `experimental.hijax` (NB: a hook from above: only it makes such values).
hi_mutable_call: list = [None]


class SignatureLayout:
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
                      f"{avals[i].str_short(False)}")


class LoweredSignature:
  """A traced signature lowered to StableHLO text, not yet compiled: the module `text`, the
  const indices it reads (`used_consts`) and the dynamic leaves it reads (`kept`; None: all)."""
  __slots__ = ("entry", "text", "used_consts", "kept", "donated", "spmd_devices",
               "mesh_layout", "dce_jaxpr", "baked", "name", "names", "formats", "fun_name")

  def __init__(self, entry: TracedSignature, text: str, used_consts: list[int], kept: list[int] | None,
               donated: tuple[int, ...], spmd_devices: list | None = None, mesh_layout=None,
               dce_jaxpr=None, name: str = "", names=None, baked: list | None = None):
    self.entry = entry
    self.text = text
    self.used_consts = used_consts
    self.kept = kept
    self.donated = donated
    self.fun_name = None   # `jit(f)`: the program in compile logs and events
    self.spmd_devices = spmd_devices   # the devices of a program containing pmaps, or None
    # A program over a user's mesh: (mesh, shardings of main's args, of its results, of
    # every dynamic leaf pruned or not; None: left to the partitioner).
    self.mesh_layout = mesh_layout
    self.dce_jaxpr = dce_jaxpr
    # The values of `dce_jaxpr`'s constvars when they are constants of the text (None:
    # main takes them as its leading arguments, `used_consts`).
    self.baked = baked
    self.name = name
    self.names = names
    self.formats = None   # a FormatSignature when jit's Formats ask for layouts


def _buffer_type(a: Any) -> tuple:
  a = core.physical_aval(a)   # NB: typed keys are buffers of their data
  return tuple(a.shape), np.dtype(a.dtype)


def _donation_aliases(in_avals: Sequence[Any], donated: Sequence[bool],
                      out_avals: Sequence[Any]) -> list[int | None]:
  """Per input, the output that reuses its buffer (None: not donated, or no output left of
  its shape and dtype): each donated input, in order, takes the first free output of the
  same type, as JAX pairs them."""
  free: dict = {}
  for k, a in enumerate(out_avals):
    if a is not core.abstract_token:   # tokens are never aliased
      free.setdefault(_buffer_type(a), []).append(k)
  aliases: list[int | None] = []
  for a, d in zip(in_avals, donated):
    d = d and a is not core.abstract_token
    outs = free.get(_buffer_type(a)) if d else None
    aliases.append(outs.pop(0) if outs else None)
  return aliases


def _shard_shape(a: Any) -> tuple:
  """The per-device shape of an aval whose type splits dimensions over mesh axes (each
  split dimension divided by the sizes of its axes), else its shape: JAX names a donated
  buffer of a program over a mesh by its shard's shape."""
  ts = getattr(a, "_sharding", None)
  if ts is None:
    return tuple(a.shape)
  sizes = dict(zip(ts.mesh.axis_names, ts.mesh.axis_sizes))
  out = []
  for d, e in zip(a.shape, (*ts.spec, *[None] * len(a.shape))):
    names = () if e is None else (e,) if isinstance(e, str) else tuple(e)
    out.append(d // math.prod(sizes[n] for n in names) if isinstance(d, int) else d)
  return tuple(out)


def _warn_unusable_donations(donated_avals: Sequence[Any], out_avals: Sequence[Any]) -> None:
  """Warns, as JAX does, about the donated inputs that no output can reuse (paired as
  `_donation_aliases` pairs them): `UserWarning("Some donated buffers were not usable:
  float32[10].")`."""
  aliases = _donation_aliases(donated_avals, [True] * len(donated_avals), out_avals)
  unused = []
  for a, k in zip(donated_avals, aliases):
    if k is None:
      shape = ",".join(map(str, _shard_shape(a)))
      weak = "~" if getattr(a, "weak_type", False) else ""
      unused.append(f"{weak}{np.dtype(a.dtype).name}[{shape}]")   # JAX's str of an aval
  if unused:
    warnings.warn(f"Some donated buffers were not usable: {', '.join(unused)}.\nSee an "
                  f"explanation at https://docs.jax.dev/en/latest/faq.html#buffer-donation.",
                  stacklevel=2)


def _arg_locs(jaxpr: core.Jaxpr, n_consts: int, kept_leaves: Sequence[int]) -> list | None:
  """The names of main's arguments (JAX's argument locations: `x`, `y['a']`, after which
  XLA names the HLO parameters): none for the constants passed as arguments, the traced
  function's argument names for the kept leaves."""
  info = jaxpr.debug_info
  names = info.arg_names if info is not None else None
  if not names:
    return None
  return [None] * n_consts + [names[i] if i < len(names) else None for i in kept_leaves]


def lower_traced(entry: TracedSignature, donated: set[int], keep_unused: bool,
                 name: str, layout: SignatureLayout | None = None,
                 arg_shardings: Sequence[Any] | None = None) -> LoweredSignature:
  """Lowers a traced signature to a StableHLO module: unused inputs are pruned (unless
  `keep_unused`), donated leaves are marked; a program over a device mesh (a `layout` from
  sharded arguments or jit's shardings, or meshes used inside) gets its shardings
  (`runtime.spmd.resolve`).

  Logs JAX's "Compiling jit(f) with global shapes and types (...). Argument mapping: (...)."
  and the lowering's duration (`monitoring.compile_log`); `arg_shardings` (per dynamic leaf,
  None where uncommitted) are the shardings the first line names where no `layout` has
  them."""
  jit_name = f"jit({name})"
  if config.dump_ir_to:   # jax_dump_ir_to: the jaxpr lowered
    call = entry.call if entry.call is not None else entry.jaxpr
    dump_ir.dump_jaxpr(name, call.jaxpr)
  log = monitoring.log_timed("dispatch", config.log_compiles,
                             "Finished jaxpr to MLIR module conversion {fun_name} in "
                             "{elapsed_time:.9f} sec")
  with monitoring.timed(monitoring.JAXPR_TO_MLIR_MODULE_EVENT, jit_name):
    t = time.time()
    lowered = _lower_traced(entry, donated, keep_unused, name, layout)
    elapsed = time.time() - t
  lowered.fun_name = jit_name
  if log is not None:
    _log_compiling(log[0], log[1], jit_name, lowered, layout, arg_shardings)
    log[0].log(log[1], log[2].format(fun_name=jit_name, elapsed_time=elapsed))
  return lowered


def _log_compiling(log: logging.Logger, level: int, jit_name: str, lowered: LoweredSignature,
                   layout: SignatureLayout | None, arg_shardings: Sequence[Any] | None) -> None:
  """JAX's line naming the arguments a program is compiled for: the avals of the leaves it
  reads and their shardings (`UnspecifiedValue` for an uncommitted one, as JAX's)."""
  entry = lowered.entry
  nconst = len(entry.consts)
  avals = [v.aval for v in entry.jaxpr.jaxpr.invars[nconst:]]
  kept = range(len(avals)) if lowered.kept is None else lowered.kept
  shardings = []
  for i in kept:
    s = None
    if layout is not None and type(layout) is SignatureLayout:
      s = (layout.explicit_in[i] if layout.explicit_in is not None else None) or (
          layout.committed[i] if layout.committed is not None else None)
    elif arg_shardings is not None:
      s = arg_shardings[i]
    shardings.append("UnspecifiedValue" if s is None else repr(s))
  # NB: pxla's logger, as JAX's
  monitoring.logger("interpreters.pxla").log(
      level, monitoring.compiling_line(jit_name, [avals[i] for i in kept], shardings))



def _lower_traced(entry: TracedSignature, donated: set[int], keep_unused: bool,
                  name: str, layout: SignatureLayout | None = None) -> LoweredSignature:
  jaxpr = entry.jaxpr.jaxpr
  nconst = len(entry.consts)
  n_in = len(jaxpr.invars)
  fmt = None
  if type(layout) is FormatSignature:   # memory layouts on the default device (no mesh)
    fmt, layout = layout, None
  if donated:
    _warn_unusable_donations([jaxpr.invars[nconst + i].aval for i in sorted(donated)],
                             jaxpr.out_avals)
  instantiate = [False] * nconst + [keep_unused] * (n_in - nconst)
  dce_jaxpr, used = pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars), instantiate)
  used_consts = [i for i in range(nconst) if used[i]]
  kept_leaves = [i - nconst for i in range(nconst, n_in) if used[i]]
  baked = None
  if used_consts and bakes_constants(entry.consts):
    # As JAX 0.10.2 by default: the constants are in the program text (XLA folds them);
    # main takes only the dynamic leaves.
    nu = len(used_consts)
    baked = [entry.consts[i] for i in used_consts]
    dce_jaxpr = dce_jaxpr.replace(constvars=dce_jaxpr.invars[:nu],
                                  invars=dce_jaxpr.invars[nu:])
    used_consts = []
  donated_mask = [False] * len(used_consts) + [i in donated for i in kept_leaves]
  kept = None if len(kept_leaves) == n_in - nconst else kept_leaves
  chain = mapping.mesh_chain(dce_jaxpr)
  explicit = layout is not None and (layout.explicit_in is not None or
                                     layout.explicit_out is not None)
  if chain and not explicit:   # jit of pmap: one SPMD program over the pmaps' devices
    text = mapping.lower_spmd_module(f"jit_{name}", dce_jaxpr, chain, donated=donated_mask,
                                     consts=baked, call_stack=entry.call_stack,
                                     arg_locs=_arg_locs(jaxpr, len(used_consts), kept_leaves))
    return LoweredSignature(entry, text, used_consts, kept, tuple(sorted(donated)),
                            spmd.chain_devices(chain))
  n_dyn = n_in - nconst
  if (layout is not None or spmd.jaxpr_meshes(dce_jaxpr) or
      spmd.typed_context_mesh(jaxpr) is not None):
    in_avals = [v.aval for v in jaxpr.invars[nconst:]]
    lay = layout or SignatureLayout([None] * n_dyn, None, None, [f"{i}" for i in range(n_dyn)], name)
    resolved = spmd.resolve(jaxpr, nconst, lay.committed, lay.explicit_in,
                               lay.explicit_out, lay.describe(in_avals))
    if resolved is not None:
      mesh, ins, outs = resolved
      in_sh = [ins[i] for i in range(nconst if baked else 0, n_in) if used[i]]
      text = spmd.lower_sharded_module(f"jit_{name}", dce_jaxpr, mesh, in_sh, outs,
                                          donated=donated_mask, consts=baked,
                                          call_stack=entry.call_stack,
                                          arg_locs=_arg_locs(jaxpr, len(used_consts),
                                                             kept_leaves))
      return LoweredSignature(entry, text, used_consts, kept, tuple(sorted(donated)),
                              mesh_layout=(mesh, in_sh, outs, ins[nconst:]),
                              dce_jaxpr=dce_jaxpr, baked=baked,
                              name=f"jit_{name}", names=lay.names)
  # NB: as JAX: a donated input that an output of its type can reuse is aliased to that
  # output (`tf.aliasing_output`), so the output lives in the input's buffer; the others
  # stay buffer donors for XLA to use or free.
  main_avals = [v.aval for v in ((*dce_jaxpr.constvars,) if baked is None else ()) +
                (*dce_jaxpr.invars,)]
  aliases = _donation_aliases(main_avals, donated_mask, dce_jaxpr.out_avals)
  attrs = [None if k is None else f"tf.aliasing_output = {k} : i32" for k in aliases]
  res_attrs = module = None
  if fmt is not None:   # as JAX: `mhlo.layout_mode` ("auto" or XLA's layout) where asked
    def fmt_attrs(lay, placed, aval):
      if aval is core.abstract_token:
        return []
      m = layout_lib.layout_mode(lay, aval.dtype)
      dims = ", ".join(["{}"] * len(aval.shape))
      return [m and f'mhlo.layout_mode = "{m}"',
              placed and f"sdy.sharding = #sdy.sharding<@empty_mesh, [{dims}]>"]
    ins = [[]] * len(used_consts) + [
        fmt_attrs(fmt.in_layouts[i], fmt.in_placed[i], jaxpr.invars[nconst + i].aval)
        for i in kept_leaves]
    attrs = [", ".join(filter(None, [a, *f])) or None for a, f in zip(attrs, ins)]
    outs = [fmt_attrs(lay, placed, a) for lay, placed, a in
            zip(fmt.out_layouts, fmt.out_placed, dce_jaxpr.out_avals)]
    res_attrs = [", ".join(filter(None, f)) or None for f in outs]
    if any("sdy.sharding" in (a or "") for a in (*attrs, *res_attrs)):
      module = lowering.ModuleContext(f"jit_{name}")
      # NB: JAX's text carries the `stablehlo.mesh` attribute on its empty mesh too
      module.extra_ops.append("  sdy.mesh @empty_mesh = <[]> {stablehlo.mesh = {axes = []}}")
  text = lowering.lower_jaxpr_to_module(
      f"jit_{name}", dce_jaxpr, arg_attrs=attrs, result_attrs=res_attrs, module=module,
      donated=[d and k is None for d, k in zip(donated_mask, aliases)], consts=baked,
      arg_locs=_arg_locs(jaxpr, len(used_consts), kept_leaves), call_stack=entry.call_stack)
  lowered = LoweredSignature(entry, text, used_consts, kept, tuple(sorted(donated)))
  lowered.formats = fmt
  return lowered


def compile_lowered(lowered: LoweredSignature, device=None, exe=None,
                    fun_name: str | None = None) -> CompiledCall:
  """Compiles a lowered signature for `device` (None: the default device), unless the
  executable `exe` is given; consts become device buffers once."""
  entry = lowered.entry
  jaxpr = entry.jaxpr.jaxpr
  nconst = len(entry.consts)
  if lowered.spmd_devices is not None:
    return SpmdCall(lowered, exe)
  if lowered.mesh_layout is not None:
    return ShardedCall(lowered, exe)
  if exe is None:
    exe = dispatch.compile_module(lowered.text, None if device is None else [device],
                                  fun_name=fun_name or lowered.fun_name)
  in_avals = [v.aval for v in jaxpr.invars[nconst:]]
  const_bufs = [dispatch.to_buffer(entry.consts[i], jaxpr.invars[i].aval, device,
                                    transfer=None)
                for i in lowered.used_consts]
  if lowered.formats is not None:
    return FormatCall(exe, lowered.kept, const_bufs, in_avals, jaxpr.out_avals,
                      entry.out_tree, lowered.donated, lowered.text, lowered.formats)
  return CompiledCall(exe, lowered.kept, const_bufs, in_avals, jaxpr.out_avals,
                       entry.out_tree, lowered.donated, lowered.text, device)


#: `compile(jaxpr, consts, out_tree, name)`: the call of a jaxpr (its first invars valued by
#: `consts`) that has hijax-typed values (`core.is_hi`) among its inputs or outputs or
#: crossing a call inside, taking and returning hijax values (`call(args)`: flat, and
#: `__call__(leaves)`: the `out_tree`), or None when it has none; installed by
#: `experimental.hijax` (NB: a hook from above: only it makes such values).
hi_compile: list = [None]


def _runs_hi(entry: TracedSignature) -> bool:
  """Whether the program of `entry` runs through `hi_compile` (hijax-typed values: a jit of
  their arrays, which places them itself)."""
  return hi_compile[0] is not None and hi_compile[0](
      entry.jaxpr.jaxpr, entry.consts, entry.out_tree, "") is not None


def _arg_shardings(leaves: Sequence[Any], dev) -> list | None:
  """The shardings of the committed ones among `leaves` (None for the others) when the
  compile log names them (`lower_traced`); None when nothing logs."""
  if monitoring.compile_log("interpreters.pxla", config.log_compiles) is None:
    return None
  return [dispatch.committed_sharding(x) if dev is not None or type(x) is Array else None
          for x in leaves]


def compile_traced(entry: TracedSignature, donated: set[int], keep_unused: bool, name: str,
                   device=None, arg_shardings: Sequence[Any] | None = None) -> CompiledCall:
  """Lowers and compiles a traced signature for `device` (None: the default device):
  unused inputs are pruned (unless `keep_unused`), consts become device buffers once,
  donated leaves are marked. `arg_shardings`: see `lower_traced`."""
  if hi_compile[0] is not None:
    hi_call = hi_compile[0](entry.jaxpr.jaxpr, entry.consts, entry.out_tree, name)
    if hi_call is not None:
      return hi_call
  with lowering.for_device(device):
    lowered = lower_traced(entry, donated, keep_unused, name, arg_shardings=arg_shardings)
  return compile_lowered(lowered, device, fun_name=f"jit({name})")


def jit(fun: Callable | None = None, /, *, in_shardings: Any = None,
        out_shardings: Any = None, static_argnums: int | Sequence[int] | None = None,
        static_argnames: str | Iterable[str] | None = None,
        donate_argnums: int | Sequence[int] | None = None,
        donate_argnames: str | Iterable[str] | None = None, keep_unused: bool = False,
        device=None, backend: str | None = None, inline: bool = False,
        compiler_options: dict[str, Any] | None = None):
  """Compiles `fun` with XLA; traces once per argument signature.

  Args:
    fun: a function of arrays (pytrees of arrays, scalars) returning arrays or pytrees.
    static_argnums: positions of arguments that are compile-time constants (hashable);
      each new value retraces. Inferred from `static_argnames` and vice versa (through
      the positional-or-keyword parameters). A negative one counts from the end of each
      call's positional arguments.
    static_argnames: names of keyword/positional arguments that are static.
    donate_argnums / donate_argnames: arguments whose buffers the computation may reuse for
      its outputs; a donated Array cannot be used afterwards (DonatedBufferError). Each is
      inferred from the other, as the static ones are, so an argument donated by number
      is donated when passed by keyword too. As JAX's, a negative donate_argnum donates
      nothing, and an argument both static and donated by number is static.
    keep_unused: keep arguments the computation does not read (they are pruned otherwise).
    device: the device to run on (default: the device of committed inputs, else the
      default device). backend: a platform name ('cpu', 'gpu'); its first device.
    inline: a call inside a traced function is staged equation by equation, not as a jit
      equation (eagerly, and transformed over eager values, it runs as one program), as JAX's.
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
    TypeError: (JAX's messages) for a non-callable `fun` ("Expected a callable value, got
      ...", a `classmethod` object too), a `staticmethod` object, a generator function,
      argnums that are not ints or argnames that are not strs; at call time, for arguments
      that are not arrays (naming their key path), traced static arguments, a bad `device`,
      or a `fun` that is not weakly referenceable ("cannot create weak reference to ...").
    ValueError: (JAX's messages, when `jit` is called) static_argnums / donate_argnums out
      of range for `fun`'s positional parameters (unless it has `*args`); static_argnames
      / donate_argnames naming a positional-only parameter, or no parameter (unless it has
      `**kwargs`); donate_argnames for a function without a signature; a name both in
      static_argnames and donate_argnames (numbers are inferred as names); both `device`
      and `backend`. At call time: non-hashable static arguments, static arguments whose
      `__eq__` raises, a committed argument laid out otherwise than its in_sharding.
    RuntimeError: at call time, a trace under `no_tracing()` or an execution under
      `no_execution()` (JAX's messages).
    ValueError: at call time, when committed arguments, shardings and
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
                             in_shardings=in_shardings, out_shardings=out_shardings,
                             compiler_options=compiler_options)
  if compiler_options:
    return _JitWithOptions(fun, static_argnums, static_argnames, donate_argnums,
                           donate_argnames, keep_unused, inline, device, backend, in_shardings,
                           out_shardings, options=check_compiler_options(compiler_options))
  return JitWrapped(fun, static_argnums, static_argnames, donate_argnums, donate_argnames,
                    keep_unused, inline, device, backend, in_shardings, out_shardings)


def _unpickle_jit(cls, init_args: tuple, options: tuple | None):
  return cls(*init_args) if options is None else cls(*init_args, options=options)


def check_compiler_options(options: Any, where: str = "jit") -> tuple:
  """`compiler_options` (of `jit`, or `Lowered.compile`: `where`) as sorted `(name, value)`
  pairs.

  Raises:
    TypeError: for something that is not a dict of option names (str) to bool, int, float
      or str values.
  """
  if not isinstance(options, dict):
    raise TypeError(f"{where}: compiler_options must be a dict of XLA option name to value, "
                    f"got {type(options).__name__}.")
  for k, v in options.items():
    if not isinstance(k, str) or not isinstance(v, (bool, int, float, str)):
      raise TypeError(f"{where}: compiler_options must map option names (str) to bool, int, "
                      f"float or str values; got {k!r}: {v!r}.")
  return tuple(sorted(options.items()))


class _JitWithOptions(PjitFunction):
  """A jit with `compiler_options`: its programs compile with those XLA option overrides
  (`dispatch.compile_overrides`, part of the compilation caches' keys), and its `lower()`'s
  `compile()` applies them under any options given there. An unknown option fails at the
  first compile with XLA's error (JAX's JaxRuntimeError: `No such compile option`)."""

  def __init__(self, *args, options: tuple):
    super().__init__(*args)
    self._compiler_options = options
    # NB: its own traces and executables (the shared per-function cache holds programs
    # compiled without these options)
    self._cache = JitCache()

  def __call__(self, *args, **kwargs):
    token = dispatch.compile_overrides.set(self._compiler_options)
    try:
      return PjitFunction.__call__(self, *args, **kwargs)
    finally:
      dispatch.compile_overrides.reset(token)

  def lower(self, *args, **kwargs):
    lowered = PjitFunction.lower(self, *args, **kwargs)
    lowered._jit_options = dict(self._compiler_options)
    return lowered


traceback_util.register_boundary(_JitWithOptions.__call__)


# ---------------------------------------------------------------------------
# auto_axes / explicit_axes: changing mesh axis types for a block (JAX's, in jax.sharding)


def _axes_mesh(axes, axis_type, name: str, shardings=None):
  """(mesh in context, the same mesh with `axes` (all by default) of type `axis_type`), or
  None when there is no mesh (JAX's rule: the mesh of `shardings` or the one in context,
  which must agree)."""
  cur = sharding_lib.get_abstract_mesh()
  found = None
  for s in optree.tree_leaves(shardings, none_is_leaf=False, namespace=tree_util.NAMESPACE):
    if isinstance(s, NamedSharding):
      m = s.mesh.abstract_mesh
      if found is not None and found != m:
        raise ValueError(f"Shardings passed to {name} should have the same mesh. Got one "
                         f"mesh {found} and another {s.mesh}")
      found = m
  if (found is None or found.empty) and cur.empty:
    return None
  if found is not None and not found.empty and not cur.empty and (
      (found.axis_names, found.axis_sizes) != (cur.axis_names, cur.axis_sizes)):
    raise ValueError(f"Context mesh {cur} must match the mesh passed to shardings {found}. "
                     f"Recommended approach is to use `jax.set_mesh` context manager.")
  mesh = cur if not cur.empty else found
  axes = mesh.axis_names if axes is None else axes if isinstance(axes, tuple) else (axes,)
  for a in axes:
    if dict(zip(mesh.axis_names, mesh.axis_types))[a] == sharding_lib.AxisType.Manual:
      raise NotImplementedError("Going from `Manual` AxisType to `Auto` or `Explicit` "
                                "AxisType is not allowed.")
  return mesh, mesh.update_axis_types({a: axis_type for a in axes}), axes


def _retype(x: Any, mesh, spec=None) -> Any:
  """`x` traced with the type it has over `mesh` (its split entries on `mesh`'s Explicit
  axes, or `spec`'s), through the `reshard` primitive (its layout is kept where the axes
  became Auto: the partitioner decides there)."""
  if not isinstance(x, core.Tracer):
    return x
  aval = core.get_aval(x)
  if type(aval) is not ShapedArray:
    return x
  explicit = set(mesh.explicit_axes)
  entries = sharding_lib.spec_entries(aval._sharding, aval.ndim) if spec is None else (
      tuple(spec) + (None,) * (aval.ndim - len(spec)))
  kept = []
  for e in entries:
    names = tuple(n for n in ((e,) if isinstance(e, str) else e or ()) if n in explicit)
    kept.append(None if not names else names[0] if len(names) == 1 else names)
  if spec is None and aval._sharding is None and not any(kept):
    return x
  return reshard_p.bind(x, dst_sharding=NamedSharding(mesh, PartitionSpec(*kept)))


def _with_axes_types(fun, name: str, axis_type, axes, kw: str, given):
  @functools.wraps(fun)
  def wrapper(*args, **kwargs):
    target = given
    if target is None:
      if kw not in kwargs:
        raise TypeError(f"Missing required keyword argument: '{kw}'")
      target = kwargs.pop(kw)
    info = _axes_mesh(axes, axis_type, name, target if kw == "out_sharding" else None)
    if info is None:
      if kw == "in_sharding":
        raise ValueError("Context mesh cannot be empty. Please use `jax.set_mesh` API to "
                         "enter into a mesh context when using `explicit_axes` API.")
      return fun(*args, **kwargs)
    prev, new, names = info
    if kw == "out_sharding" and set(prev.auto_axes) == set(names):
      return fun(*args, **kwargs)

    # NB: traced, values are retyped through `reshard`; outside a trace `fun` runs eagerly,
    # as JAX's, on Arrays whose mesh has the new axis types (their layout kept;
    # `in_sharding` relays them out)
    retype = _retype if _tracing(args, kwargs) else _retype_eager

    def body(*a, **k):
      leaves, tree = optree.tree_flatten((a, k), none_is_leaf=False,
                                         namespace=tree_util.NAMESPACE)
      if kw == "in_sharding":
        specs = spmd.flatten_shardings(target, (a, k)[0], f"{name} in_sharding")
        leaves = [retype(x, new, getattr(s, "spec", s) if s is not None else None)
                  for x, s in zip(leaves, specs + [None] * (len(leaves) - len(specs)))]
      else:
        leaves = [retype(x, new) for x in leaves]
      a, k = optree.tree_unflatten(tree, leaves)
      with sharding_lib.abstract_mesh_context(new):
        out = fun(*a, **k)
      if kw == "in_sharding":   # back to the types of the mesh outside
        out = tree_util.tree_map(lambda o: retype(o, prev), out)
      return out
    out = body(*args, **kwargs)
    return reshard(out, target) if kw == "out_sharding" else out
  return wrapper


def _retype_eager(x: Any, mesh, spec=None) -> Any:
  """The Array `x` over the concrete mesh of its devices with the axis types of `mesh` (an
  AbstractMesh of the same axes), laid out by `spec` (default: as it is); other values as
  they are."""
  if type(x) is not Array:
    return x
  s = x._sharding
  cm = s.mesh if s is not None else sharding_lib.current_mesh()
  if (not isinstance(cm, sharding_lib.Mesh) or (cm.axis_names, cm.axis_sizes) !=
      (mesh.axis_names, mesh.axis_sizes) or (s is None and spec is None)):
    return x
  typed = sharding_lib.Mesh(cm.devices, cm.axis_names, axis_types=mesh.axis_types)
  return spmd.device_put_sharded(x, NamedSharding(typed, s.spec if spec is None else spec))


def _tracing(args, kwargs) -> bool:
  return core.current_trace() is not core.eval_trace or any(
      isinstance(x, core.Tracer) for x in optree.tree_leaves(
          (args, kwargs), none_is_leaf=False, namespace=tree_util.NAMESPACE))


def auto_axes(f: Callable | None = None, /, *, axes: str | tuple[str, ...] | None = None,
              out_sharding: Any = None):
  """`f` run with the mesh axes `axes` (all by default) of type Auto (JAX's
  `jax.sharding.auto_axes`): inside, values are not typed over them (the partitioner lays
  them out, so operations whose sharding rule would ask for `out_sharding=` run), and the
  result is resharded to `out_sharding` (given here or as a keyword of the call). Outside a
  trace `f` runs eagerly, as JAX's, on Arrays over the mesh with those axes Auto (layouts
  kept).

  Raises:
    TypeError: no `out_sharding`.
    ValueError: shardings over another mesh than the one in context.
  """
  if f is None:
    return lambda g: auto_axes(g, axes=axes, out_sharding=out_sharding)
  return _with_axes_types(f, "auto_axes", sharding_lib.AxisType.Auto, axes, "out_sharding",
                          out_sharding)


def explicit_axes(f: Callable | None = None, /, *, axes: str | tuple[str, ...] | None = None,
                  in_sharding: Any = None):
  """`f` run with the mesh axes `axes` (all by default) of type Explicit (JAX's
  `jax.sharding.explicit_axes`): its arguments are typed by `in_sharding` (given here or as
  a keyword of the call), and its results come back without those axes in their types.
  Outside a trace `f` runs eagerly, as JAX's, on Arrays relaid out by `in_sharding`.

  Raises:
    TypeError: no `in_sharding`.
    ValueError: no mesh in context (`set_mesh`).
  """
  if f is None:
    return lambda g: explicit_axes(g, axes=axes, in_sharding=in_sharding)
  return _with_axes_types(f, "explicit_axes", sharding_lib.AxisType.Explicit, axes,
                          "in_sharding", in_sharding)


sharding_lib.late_names.update(auto_axes=auto_axes, explicit_axes=explicit_axes)


# ---------------------------------------------------------------------------
# Formats (memory layouts) in jit's shardings: JAX's `Format(layout, sharding)`.


def _is_format_leaf(x) -> bool:
  return x is None or isinstance(x, (layout_lib.Format, sharding_lib.Sharding, PartitionSpec))


def _has_format(tree) -> bool:
  return tree is not None and any(isinstance(x, layout_lib.Format) for x in optree.tree_leaves(
      tree, is_leaf=_is_format_leaf, none_is_leaf=True, namespace=tree_util.NAMESPACE))


def _check_format_shardings(tree) -> None:
  """The shardings of a shardings tree with Formats: stagecraft lays out memory on the
  default device only, so each must be None or the default device's SingleDeviceSharding.

  Raises:
    NotImplementedError: for another sharding.
  """
  dev = client.default_device()
  for x in optree.tree_leaves(tree, is_leaf=_is_format_leaf, none_is_leaf=True,
                              namespace=tree_util.NAMESPACE):
    sh = x.sharding if isinstance(x, layout_lib.Format) else x
    if sh is None or (isinstance(sh, sharding_lib.SingleDeviceSharding)
                      and sh.device == dev):
      continue
    raise NotImplementedError(
        f"jit: stagecraft supports Formats (memory layouts) on the default device only: "
        f"their shardings must be None or SingleDeviceSharding({dev!r}), got {sh!r}.")
  return None


def _layouts_of(prefix, tree, what: str) -> list:
  """One requested layout (None, `Layout.AUTO` or a `Layout`) per leaf of `tree`, from the
  pytree prefix `prefix` of Formats, shardings and None."""
  try:
    leaves = tree_util.broadcast_prefix(prefix, tree, is_leaf=_is_format_leaf)
  except ValueError:
    raise spmd.prefix_error(prefix, tree, what) from None
  return [x.layout if isinstance(x, layout_lib.Format) else None for x in leaves], [
      (x.sharding if isinstance(x, layout_lib.Format) else x) is not None for x in leaves]


class FormatSignature:
  """A jit signature's requested memory layouts: per dynamic leaf (`in_layouts`) and per
  output leaf (`out_layouts`) None (the default), `Layout.AUTO` or a `Layout`; whether a
  sharding was given for each (`in_placed`, `out_placed`: JAX then writes an empty mesh's
  sharding on it); and the leaves' names (for messages)."""
  __slots__ = ("in_layouts", "out_layouts", "in_placed", "out_placed", "names")

  def __init__(self, in_layouts, out_layouts, in_placed, out_placed, names):
    self.in_layouts = in_layouts
    self.out_layouts = out_layouts
    self.in_placed = in_placed
    self.out_placed = out_placed
    self.names = names


class FormatCall(CompiledCall):
  """The call of a program compiled with requested layouts (jit with Formats): each
  argument is passed in the layout the program takes (an uncommitted argument is copied
  into it; a committed one in another layout is JAX's ValueError), and a result in a
  non-default layout is an Array holding that buffer (`_laid`) and a default-layout copy.

  Attributes (beyond CompiledCall's):
    in_layouts / out_layouts: the compiled layout of each dynamic leaf (None: pruned) and
      of each result (`Layout`s, as the runtime reports them).
  """
  __slots__ = ("fmt", "in_layouts", "out_layouts", "_in_texts", "_out_default")

  def __init__(self, exe, kept, const_bufs, in_avals, out_avals, out_tree, donated, text,
               fmt: FormatSignature):
    super().__init__(exe, kept, const_bufs, in_avals, out_avals, out_tree, donated, text,
                     None)
    self.fmt = fmt
    params = exe.get_parameter_layouts()[len(const_bufs):]
    idx = range(len(in_avals)) if kept is None else kept
    self.in_layouts = [None] * len(in_avals)
    self._in_texts = [None] * len(in_avals)
    for i, p in zip(idx, params):
      self.in_layouts[i] = layout_lib.Layout.from_pjrt_layout(p)
      self._in_texts[i] = str(p._xla_layout())
    outs = exe.get_output_layouts()
    self.out_layouts = [layout_lib.Layout.from_pjrt_layout(p) for p in outs]
    self._out_default = [lay == layout_lib.default_layout(len(a.shape))
                         for lay, a in zip(self.out_layouts, out_avals)]
    for what, user, xla, avals in (("input", fmt.in_layouts, self.in_layouts, in_avals),
                                   ("output", fmt.out_layouts, self.out_layouts, out_avals)):
      for u, x, a in zip(user, xla, avals):
        if isinstance(u, layout_lib.Layout) and x is not None and \
            not layout_lib.user_layout_matches(u, x):
          raise AssertionError(f"Unexpected XLA layout override: (XLA) {x} != {u} (User "
                               f"{what} layout) for type={a.str_short()}")

  def _argument_buffers(self, leaves) -> list:
    idx = range(len(leaves)) if self.kept is None else self.kept
    bufs, errors = [], []
    for i in idx:
      x, aval, want = leaves[i], self.in_avals[i], self._in_texts[i]
      if type(x) is not Array:
        bufs.append(dispatch.relayout(dispatch.to_buffer(x, aval), aval, want))
        continue
      laid = getattr(x, "_laid", None)
      buf = x._buf if x._buf is not None else x._check_buf()
      if x._sharding is not None or x._device is not None:
        buf = dispatch.to_buffer(x, aval)   # NB: gathered / moved onto the default device
      cur = laid if laid is not None else buf   # the layout the Array has (`format`)
      if dispatch.buffer_layout_text(cur) == want:
        bufs.append(cur)
        continue
      if x.committed:   # NB: as JAX, a committed argument is never laid out again
        errors.append(f"Argument {self.fmt.names[i]} with shape {aval.str_short(False)}:\n"
                      f"  Passed layout: {x.format.layout}\n"
                      f"  Required layout: {self.in_layouts[i]}")
        continue
      bufs.append(dispatch.relayout(buf, aval, want))
    if errors:
      shown = errors[:5]
      count = (f"the {len(errors)} mismatches" if len(errors) < 5
               else f"5 mismatches out of {len(errors)}")
      raise ValueError("Computation was compiled for input layouts that disagree with the "
                       f"layouts of arguments passed to it. Here are {count}:\n"
                       + "\n".join(shown))
    return bufs

  def call_arrays(self, args):
    return self(list(args))

  def __call__(self, leaves: Sequence[Any]):
    bufs = self._argument_buffers(leaves)
    if self.const_bufs:
      bufs = [*self.const_bufs, *bufs]
    try:
      results = (dispatch.run_with_callbacks(self.exe, bufs, self.callbacks) if self.callbacks
                 else self.exe.execute_sharded(bufs))
      client.count_execution()
      raw = results.consume_with_handlers(self.handlers)
    except TypeError:
      dispatch.raise_if_donated(leaves)
      raise
    outs = dispatch.wrap_results(raw, self.out_avals, None)
    for i, (out, aval) in enumerate(zip(outs, self.out_avals)):
      if not isinstance(out, Array):
        continue
      if not self._out_default[i]:
        # NB: every other program reads `_buf`, in the default layout
        out._laid = out._buf
        out._buf = dispatch.relayout(out._laid, aval,
                                     layout_lib.default_layout(len(aval.shape))._xla_text(
                                         aval.dtype))
      if isinstance(self.fmt.out_layouts[i], layout_lib.Layout):
        mark_committed(out)
    for i in self.donated:
      x = leaves[i]
      if type(x) is Array and x._buf is not None and x._buf.is_deleted():
        x._buf = None
    for i in self.float0_outs:
      outs[i] = np.zeros(self.out_avals[i].shape, dtypes.float0)
    return optree.tree_unflatten(self.out_tree, outs)
