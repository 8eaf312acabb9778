"""Staging: the trace that records a Jaxpr, and dead-code elimination.

`DynamicJaxprTrace` records every primitive bound while it is current into a list of
equations. Values that are not its own tracers are lifted: Python and NumPy scalars become
`Literal`s; arrays and tracers of outer traces become constvars (closure capture), so large
constants are never baked into the program text.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from stagecraft import core
from stagecraft.core import (ClosedJaxpr, DebugInfo, DropVar, Jaxpr, JaxprEqn, Literal,
                             ShapedArray, Trace, Tracer, Var)


class DynamicJaxprTracer(Tracer):
  """A tracer of the staging trace: its aval and the jaxpr variable that holds it."""
  __slots__ = ("aval", "_var")

  def __init__(self, trace: "DynamicJaxprTrace", aval: ShapedArray, var: Var):
    self._trace = trace
    self.aval = aval
    self._var = var


_literal_types = {bool, int, float, complex}


class DynamicJaxprTrace(Trace):
  """Records primitives into a Jaxpr. `debug_info` names the inputs for error messages."""
  __slots__ = ("eqns", "invars", "constvars", "const_vals", "_const_ids", "debug_info")

  def __init__(self, debug_info: DebugInfo | None = None):
    super().__init__()
    self.eqns: list[JaxprEqn] = []
    self.invars: list[Var] = []
    self.constvars: list[Var] = []
    self.const_vals: list[Any] = []
    self._const_ids: dict[int, Var] = {}
    self.debug_info = debug_info

  def new_arg(self, aval: ShapedArray) -> DynamicJaxprTracer:
    v = Var(aval)
    self.invars.append(v)
    return DynamicJaxprTracer(self, aval, v)

  def to_atom(self, x: Any):
    if type(x) is DynamicJaxprTracer and x._trace is self:
      return x._var
    return self._lift(x)

  def _lift(self, x: Any):
    if isinstance(x, Tracer):
      if not x._trace._valid or x._trace._level > self._level:
        raise core.escaped_tracer_error(x)
      # A tracer of an outer, live trace: captured as a constvar (closure).
      return self._const_var(x, x.aval)
    t = type(x)
    if hasattr(t, "__jax_array__"):
      # An array-like object (e.g. an implicit array) is staged as the array it converts to.
      return self.to_atom(x.__jax_array__())
    if t in _literal_types:
      aval = core.get_aval(x)
      return Literal(x, aval)
    if t is core.WeakScalarValue:
      return Literal(x, x.aval)
    if isinstance(x, np.generic) or (t is np.ndarray and x.ndim == 0):
      aval = core.get_aval(x)
      return Literal(np.asarray(x, aval.dtype)[()], aval)
    return self._const_var(x, core.get_aval(x))

  def _const_var(self, x: Any, aval: ShapedArray) -> Var:
    v = self._const_ids.get(id(x))
    if v is None:
      v = self._const_ids[id(x)] = Var(aval)
      self.constvars.append(v)
      self.const_vals.append(x)  # NB: keeps x alive, so id(x) stays unique while tracing
    return v

  def process_primitive(self, prim: core.Primitive, args, params):
    to_atom = self.to_atom
    invars = [to_atom(x) for x in args]
    out_aval = prim.abstract_eval(*[v.aval for v in invars], **params)
    hook = core.source_info_hook
    src = None if hook is None else hook()
    if prim.multiple_results:
      outvars = [Var(a) for a in out_aval]
      self.eqns.append(JaxprEqn(invars, outvars, prim, params, src))
      return [DynamicJaxprTracer(self, v.aval, v) for v in outvars]
    v = Var(out_aval)
    self.eqns.append(JaxprEqn(invars, [v], prim, params, src))
    return DynamicJaxprTracer(self, out_aval, v)

  def to_jaxpr(self, outs: Sequence[Any]) -> tuple[Jaxpr, list[Any]]:
    outvars = [self.to_atom(x) for x in outs]
    jaxpr = Jaxpr(self.constvars, self.invars, outvars, self.eqns, self.debug_info)
    return jaxpr, self.const_vals

  def origin_msg(self, tracer: Tracer) -> str:
    info = self.debug_info
    if info is None or info.arg_names is None or not isinstance(tracer, DynamicJaxprTracer):
      return ""
    progenitors = _find_progenitors(self, tracer._var)
    idxs = [i for i, v in enumerate(self.invars) if v in progenitors]
    if not idxs:
      return (f"\nWhile tracing the function {info.func_name} for {info.traced_for}, this "
              f"value became a tracer through a closed-over value or a constant.")
    names = [info.arg_names[i] for i in idxs if i < len(info.arg_names)]
    shown = ", ".join(f"`{n}`" for n in names[:5])
    if len(names) > 5:
      shown += f" and {len(names) - 5} more"
    msg = (f"\nThis value depends on the argument{'s' if len(names) > 1 else ''} {shown} of "
           f"`{info.func_name}` (traced for {info.traced_for}).")
    if info.arg_origins is not None and info.traced_for == "jit":
      origins = sorted({info.arg_origins[i] for i in idxs if i < len(info.arg_origins)},
                       key=str)
      nums = [o for o in origins if isinstance(o, int)]
      kw = [o for o in origins if isinstance(o, str)]
      hint = []
      if nums:
        hint.append(f"static_argnums={nums[0] if len(nums) == 1 else tuple(nums)}")
      if kw:
        hint.append(f"static_argnames={kw[0]!r}" if len(kw) == 1 else
                    f"static_argnames={tuple(kw)!r}")
      msg += (f" If it should be a Python constant, pass it as static "
              f"(`jit({info.func_name}, {', '.join(hint)})`).")
    return msg


def _find_progenitors(trace: DynamicJaxprTrace, var: Var) -> set[Var]:
  producers = {}
  for eqn in trace.eqns:
    for o in eqn.outvars:
      producers[o] = eqn
  seen, stack, roots = set(), [var], set()
  while stack:
    v = stack.pop()
    if v in seen:
      continue
    seen.add(v)
    eqn = producers.get(v)
    if eqn is None:
      roots.add(v)
    else:
      stack.extend(x for x in eqn.invars if isinstance(x, Var))
  return roots


def trace_to_jaxpr(fun: Callable[..., Sequence[Any]], in_avals: Sequence[ShapedArray],
                   debug_info: DebugInfo | None = None) -> tuple[Jaxpr, list[Any]]:
  """Traces `fun` (flat tracers in, a flat sequence of outputs out) into a Jaxpr.

  Returns:
    The jaxpr and the values of its constvars.
  """
  trace = DynamicJaxprTrace(debug_info)
  in_tracers = [trace.new_arg(a) for a in in_avals]
  try:
    with core.set_current_trace(trace):
      outs = fun(*in_tracers)
    return trace.to_jaxpr(outs)
  finally:
    trace.invalidate()


def close_jaxpr(jaxpr: Jaxpr, consts: Sequence[Any]) -> ClosedJaxpr:
  """A ClosedJaxpr of `jaxpr` with `consts`."""
  return ClosedJaxpr(jaxpr, consts)


def convert_constvars_jaxpr(jaxpr: Jaxpr) -> Jaxpr:
  """Turns constvars into leading invars (for calls that pass consts as arguments)."""
  return jaxpr.replace(constvars=[], invars=[*jaxpr.constvars, *jaxpr.invars])


# ---------------------------------------------------------------------------
# Dead-code elimination

#: Per-primitive DCE rules: `rule(used_outputs, eqn) -> (used_inputs, new_eqn or None)`.
dce_rules: dict[core.Primitive, Callable] = {}

#: Primitives never removed (equations with effects, `JaxprEqn.effects`, are kept too).
effectful_primitives: set[core.Primitive] = set()


def dce_jaxpr(jaxpr: Jaxpr, used_outputs: Sequence[bool],
              instantiate: bool | Sequence[bool] = False) -> tuple[Jaxpr, list[bool]]:
  """Removes equations whose outputs are unused, and unused outputs.

  Args:
    jaxpr: the program (constvars are kept as they are).
    used_outputs: one bool per outvar; False drops that output.
    instantiate: bool or one per invar; True keeps the invar even if unused.

  Returns:
    `(new_jaxpr, used_inputs)`: the new jaxpr takes only the used invars (plus the
    instantiated ones) and `used_inputs[i]` says whether invar i was kept.
  """
  if isinstance(instantiate, bool):
    instantiate = [instantiate] * len(jaxpr.invars)
  live: set[Var] = {v for v, u in zip(jaxpr.outvars, used_outputs)
                    if u and isinstance(v, Var)}
  new_eqns = []
  for eqn in reversed(jaxpr.eqns):
    used_outs = [not isinstance(v, DropVar) and v in live for v in eqn.outvars]
    rule = dce_rules.get(eqn.primitive)
    if not any(used_outs) and (eqn.primitive in effectful_primitives or eqn.effects):
      # NB: an equation with effects stays, whole, even when no one reads its results.
      used_ins, new_eqn = [True] * len(eqn.invars), eqn
    elif rule is not None:
      used_ins, new_eqn = rule(used_outs, eqn)
    elif any(used_outs):
      used_ins, new_eqn = [True] * len(eqn.invars), eqn
    else:
      used_ins, new_eqn = [False] * len(eqn.invars), None
    if new_eqn is not None:
      new_eqns.append(new_eqn)
      for v, u in zip(eqn.invars, used_ins):
        if u and isinstance(v, Var):
          live.add(v)
  new_eqns.reverse()
  used_inputs = [v in live or inst for v, inst in zip(jaxpr.invars, instantiate)]
  new_jaxpr = jaxpr.replace(
      invars=[v for v, u in zip(jaxpr.invars, used_inputs) if u],
      outvars=[v for v, u in zip(jaxpr.outvars, used_outputs) if u],
      eqns=new_eqns)
  return new_jaxpr, used_inputs


def prune_constvars(jaxpr: Jaxpr, consts: Sequence[Any]) -> tuple[Jaxpr, list[Any]]:
  """Drops constvars that no equation or output reads."""
  used = set()
  for eqn in jaxpr.eqns:
    used.update(v for v in eqn.invars if isinstance(v, Var))
  used.update(v for v in jaxpr.outvars if isinstance(v, Var))
  keep = [i for i, v in enumerate(jaxpr.constvars) if v in used]
  if len(keep) == len(jaxpr.constvars):
    return jaxpr, list(consts)
  return (jaxpr.replace(constvars=[jaxpr.constvars[i] for i in keep]),
          [consts[i] for i in keep])


__all__ = ["DynamicJaxprTrace", "DynamicJaxprTracer", "trace_to_jaxpr", "dce_jaxpr",
           "dce_rules", "prune_constvars", "convert_constvars_jaxpr", "DropVar"]
