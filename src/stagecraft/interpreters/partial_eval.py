"""Staging: the trace that records a Jaxpr, and dead-code elimination.

`DynamicJaxprTrace` records every primitive bound while it is current into a list of
equations. Values that are not its own tracers are lifted: Python and NumPy scalars become
`Literal`s; arrays and tracers of outer traces become constvars (closure capture, one per
distinct object), which jit lowers as JAX does (`pjit.bakes_constants`).
"""
from __future__ import annotations

import sys
import weakref
from typing import Any, Callable, Sequence

import numpy as np

from stagecraft import core, traceback_util, tree_util
from stagecraft.core import (ClosedJaxpr, DebugInfo, DropVar, Jaxpr, JaxprEqn, Literal,
                             ShapedArray, Trace, Tracer, UserFrame, Var)


class DynamicJaxprTracer(Tracer):
  """A tracer of the staging trace: its aval and the jaxpr variable that holds it."""
  __slots__ = ("aval", "_var")

  def __init__(self, trace: "DynamicJaxprTrace", aval: ShapedArray, var: Var):
    self._trace = trace
    self.aval = aval
    self._var = var

  def _short_repr(self) -> str:
    return f"JitTracer({self.aval})"


_literal_types = {bool, int, float, complex}

# The ids of the 0-d Arrays made from host scalars while a transformation traces (JAX's
# tracers bound to a literal), each with a weak reference that drops its entry.
_literal_arrays: dict[int, Any] = {}


def literal_array(x: Any) -> Any:
  """Marks `x`, a 0-d Array just made from a host scalar, as JAX's constant of the same
  value made while tracing (a tracer bound to a literal) when a transformation is tracing:
  staged, it is inlined as a literal. Any other concrete Array, one closed over from
  outside the trace for instance, is staged as a constvar, as JAX stages its Arrays.
  Returns `x`."""
  if type(core.current_trace()) is not core.EvalTrace and not x.shape:
    i = id(x)
    _literal_arrays[i] = weakref.ref(x, lambda _, i=i: _literal_arrays.pop(i, None))
  return x


def is_literal_array(x: Any) -> bool:
  """Whether `x` is an Array marked by `literal_array` (staged as a literal)."""
  ref = _literal_arrays.get(id(x))
  return ref is not None and ref() is x


#: `rule(*args, **params) -> result | None`: JAX's constant folding of a primitive whose
#: operands are host constants, as partial evaluation binds a known equation in a staging
#: trace (`ad.PartialEvalTrace`); None binds the primitive as usual.
const_fold_rules: dict[core.Primitive, Callable[..., Any]] = {}

#: `rule(args, invars, params) -> index | None`: JAX's forwarding rules: an equation the
#: staging trace does not record because its result is operand `index` as it is (a
#: conversion of a host array constant to the dtype its constant already has: `np.ones(3)`
#: to float32 with x64 off). None: the equation is recorded.
forwarding_rules: dict[core.Primitive, Callable[..., Any]] = {}

# NB: builds a JaxprEqn from its five fields without NamedTuple's Python-level `__new__`
# (the staging trace's hot path).
_new_eqn = tuple.__new__
_getframe = sys._getframe
_boundary = core.trace_boundary
_internal_files = traceback_util.internal_files
_user_files = traceback_util.user_files
_context = core.source_context_state
_contexts_active = core.source_contexts_active


#: Call primitives whose equations carry `inline=True` when JAX's `jit(inline=True)` made them,
#: and the param holding the called ClosedJaxpr: a staging trace records the called
#: equations instead of the call (eagerly, and under JVP and vmap over eager values, the call
#: runs as one compiled program, as JAX's).
inline_calls: dict[core.Primitive, str] = {}


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
    aval = core.get_aval(x)
    if (aval.shape == () and t is not np.ndarray and hasattr(x, "__array__")
        and is_literal_array(x)):
      # NB: a scalar Array made from a host scalar while tracing is inlined as a literal, as
      # JAX's (a tracer bound to a literal), so XLA folds it (`x - 0`, `x / 1` vanish). A
      # weakly typed one becomes the Python scalar with the same aval (which stays weak
      # when evaluated). Other Arrays (closed over) are constvars, as JAX's.
      if not aval.weak_type:
        return Literal(np.asarray(x, aval.dtype)[()], aval)
      val = np.asarray(x).item()
      if type(val) in _literal_types and core.get_aval(val) == aval:
        return Literal(val, aval)
    return self._const_var(x, aval)

  def _const_var(self, x: Any, aval: ShapedArray) -> Var:
    v = self._const_ids.get(id(x))
    if v is None:
      v = self._const_ids[id(x)] = Var(aval)
      self.constvars.append(v)
      self.const_vals.append(x)  # NB: keeps x alive, so id(x) stays unique while tracing
    return v

  def process_primitive(self, prim: core.Primitive, args, params):
    if params.get("inline") is True and prim in inline_calls:
      return self.inline_call(prim, args, params)
    to_atom = self.to_atom
    invars = [to_atom(x) for x in args]
    if prim in forwarding_rules:
      i = forwarding_rules[prim](args, invars, params)
      if i is not None and type(invars[i]) is Var:
        return DynamicJaxprTracer(self, invars[i].aval, invars[i])
    out_aval = prim.abstract_eval(*[v.aval for v in invars], **params)
    hook = core.source_info_hook
    if hook is not None:
      src = hook()
    elif _contexts_active[0] and _context.source_info is not None:
      src = _context.source_info   # an equation being re-bound (eval_jaxpr, transposition)
    else:
      # NB: `core.current_source_info` inlined (the hot path of tracing): the innermost frame
      # outside stagecraft, starting at bind's caller. Only that frame's (code, lasti) is kept.
      f = _getframe(2)
      code = f.f_code
      while code.co_filename in _internal_files:
        f = f.f_back
        if f is None:
          break
        code = f.f_code
      if f is not None and code.co_filename in _user_files:
        src = (UserFrame((code, f.f_lasti)) if _boundary.frame is None else
               core.with_parents(f))
      else:   # a file seen for the first time, or no user frame at all
        src = core.current_source_info(2)
    if prim.multiple_results:
      if not isinstance(out_aval, (tuple, list)):
        raise _abstract_eval_result_error(prim)
      outvars = [Var(a) for a in out_aval]
      self.eqns.append(_new_eqn(JaxprEqn, (invars, outvars, prim, params, src)))
      return [DynamicJaxprTracer(self, v.aval, v) for v in outvars]
    if isinstance(out_aval, (tuple, list)):
      raise _abstract_eval_result_error(prim)
    v = Var(out_aval)
    self.eqns.append(_new_eqn(JaxprEqn, (invars, [v], prim, params, src)))
    return DynamicJaxprTracer(self, out_aval, v)

  def inline_call(self, prim: core.Primitive, args, params):
    """A call marked `inline` (JAX's `jit(inline=True)`) is not staged as a call: its
    equations are recorded here, with the call's source info (JAX's `pjit_staging_rule`)."""
    closed = params[inline_calls[prim]]
    src = core.current_source_info(3)
    # NB: as JAX's staging, a conversion of a host scalar operand folds into a literal
    with core.set_current_trace(self):
      outs = core.eval_jaxpr(closed.jaxpr, closed.consts, *args, source_info=src,
                             fold_rules=const_fold_rules)
    return outs if prim.multiple_results else outs[0]

  def to_jaxpr(self, outs: Sequence[Any]) -> tuple[Jaxpr, list[Any]]:
    outvars = [self.to_atom(x) for x in outs]
    jaxpr = Jaxpr(self.constvars, self.invars, outvars, self.eqns, self.debug_info)
    return jaxpr, self.const_vals

  def origin_msg(self, tracer: Tracer) -> str:
    """Where a tracer's value came from, in JAX's words (the traced function and the
    arguments it depends on)."""
    info = self.debug_info
    if info is None or info.arg_names is None or not isinstance(tracer, DynamicJaxprTracer):
      return ""
    src = info.func_src_info or info.func_name
    msg = f"\nThe error occurred while tracing the function {src} for {info.traced_for}. "
    progenitors = _find_progenitors(self, tracer._var)
    idxs = [i for i, v in enumerate(self.invars) if v in progenitors]
    if not idxs:
      return msg + ("This value became a tracer through a closed-over value or a constant, "
                    "not an argument.")
    names = [info.arg_names[i] for i in idxs if i < len(info.arg_names)]
    if len(names) == 1:
      shown = f"the argument {names[0]}"
    elif len(names) == 2:
      shown = f"the arguments {names[0]} and {names[1]}"
    else:
      shown = f"the arguments {', '.join(names[:-1])}, and {names[-1]}"
    msg += (f"This concrete value was not available in Python because it depends on the "
            f"value{'s' if len(names) > 1 else ''} of {shown}.")
    return msg


  def leak_msg(self, tracer: Tracer) -> str:
    # NB: JAX's layout; a value with no equation that made it (an argument of the traced
    # function) is "created on line ." with no frames, as JAX prints it
    info, rule = self.debug_info, "\n" + "-" * 30 + "\n"
    msg = ""
    if info is not None:
      msg += (f"\nThe function being traced when the value leaked was "
              f"{info.func_src_info or info.func_name} traced for {info.traced_for}.")
    var = getattr(tracer, "_var", None)
    eqn = next((e for e in reversed(self.eqns) if var in e.outvars), None)
    frame = core.source_frame(eqn.source_info) if eqn is not None else None
    chain = [frame, *frame.parents][:5][::-1] if frame is not None else []  # most recent last
    msg += (f"{rule}The leaked intermediate value was created on line "
            f"{frame.summary() if frame is not None else ''}. {rule}When the value was "
            f"created, the final 5 stack frames (most recent last) excluding JAX-internal "
            f"frames were:{rule}{chr(10).join(f.summary() for f in chain)}{rule}")
    return msg


def _abstract_eval_result_error(prim: core.Primitive) -> ValueError:
  # NB: JAX's words (a primitive defined outside stagecraft whose rule returns the wrong kind)
  return ValueError(f"{prim.name}.abstract_eval() method should return a tuple or a list iff "
                    f"{prim.name}.multiple_results.")


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
              instantiate: bool | Sequence[bool] = False, shallow: bool = False
              ) -> tuple[Jaxpr, list[bool]]:
  """Removes equations whose outputs are unused, and unused outputs.

  Args:
    jaxpr: the program (constvars are kept as they are).
    used_outputs: one bool per outvar; False drops that output.
    instantiate: bool or one per invar; True keeps the invar even if unused.
    shallow: only equations none of whose outputs is used go; the others stay whole (no
      DCE rule runs: the jaxprs inside them and their unused outputs stay).

  Returns:
    `(new_jaxpr, used_inputs)`: the new jaxpr takes only the used invars (plus the
    instantiated ones) and `used_inputs[i]` says whether invar i was kept.
  """
  if isinstance(instantiate, bool):
    instantiate = [instantiate] * len(jaxpr.invars)
  live: set[Var] = {v for v, u in zip(jaxpr.outvars, used_outputs)
                    if u and isinstance(v, Var)}
  new_eqns = []
  rules = {} if shallow else dce_rules
  for eqn in reversed(jaxpr.eqns):
    used_outs = [not isinstance(v, DropVar) and v in live for v in eqn.outvars]
    rule = rules.get(eqn.primitive)
    if rule is None and True in used_outs:   # NB: the common case, kept whole
      new_eqns.append(eqn)
      for v in eqn.invars:
        if isinstance(v, Var):
          live.add(v)
      continue
    if not any(used_outs) and (eqn.primitive in effectful_primitives or eqn.effects):
      # NB: an equation with effects stays, whole, even when no one reads its results.
      used_ins, new_eqn = [True] * len(eqn.invars), eqn
    elif rule is not None and not shallow:
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


# ---------------------------------------------------------------------------
# The rest of JAX's public `jax.interpreters.partial_eval` names (for libraries written
# against JAX). A `fun` here may be a `linear_util.WrappedFun` (called with `call_wrapped`)
# or a plain callable; either returns a sequence of outputs.

#: A value (JAX's type alias).
Val = Any


def _call_flat(fun: Any) -> Callable[..., list[Any]]:
  call = getattr(fun, "call_wrapped", fun)
  return lambda *args: list(call(*args))


class PartialVal(tuple):
  """A partly known value: `(None, const)` when known, `(aval, None)` when unknown (JAX's
  `PartialVal`, the inputs and outputs of `trace_to_jaxpr_nounits`)."""

  def __new__(cls, xs: tuple[Any, Any]):
    aval, const = xs
    if (aval is None) == (const is None):
      raise ValueError(f"PartialVal: expected (None, value) or (aval, None), got {xs!r}.")
    return tuple.__new__(cls, xs)

  @classmethod
  def known(cls, const: Any) -> "PartialVal":
    return cls((None, const))

  @classmethod
  def unknown(cls, aval: ShapedArray) -> "PartialVal":
    return cls((aval, None))

  def is_known(self) -> bool:
    return self[0] is None

  def get_known(self) -> Any:
    """The known value, or None if unknown."""
    return self[1] if self[0] is None else None

  def get_aval(self) -> ShapedArray:
    """The aval: given when unknown, the known value's otherwise."""
    return core.get_aval(self[1]) if self[0] is None else self[0]


def trace_to_jaxpr_dynamic(fun: Any, in_avals: Sequence[ShapedArray], *,
                           keep_inputs: Sequence[bool] | None = None, lower: bool = False,
                           auto_dce: bool = False) -> tuple[Jaxpr, list[ShapedArray], list[Any]]:
  """Traces `fun` on `in_avals` (JAX's `pe.trace_to_jaxpr_dynamic`).

  Args:
    fun: a `linear_util.WrappedFun` or a callable of flat arrays returning a sequence.
    in_avals: one aval per argument.
    keep_inputs: one bool per argument; False leaves it out of the jaxpr's invars (the
      function must then not read it).
    lower: accepted for JAX compatibility (no effect).
    auto_dce: remove equations whose results are unused (effects kept).

  Returns:
    `(jaxpr, out_avals, consts)`: the consts are the values of `jaxpr.constvars`.

  Raises:
    ValueError: if `keep_inputs` drops an argument that the function reads.
  """
  jaxpr, consts = trace_to_jaxpr(_call_flat(fun), in_avals)
  if keep_inputs is not None:
    keep = list(keep_inputs)
    if len(keep) != len(jaxpr.invars):
      raise ValueError(f"trace_to_jaxpr_dynamic: keep_inputs has {len(keep)} entries for "
                       f"{len(jaxpr.invars)} inputs.")
    read = {v for e in jaxpr.eqns for v in e.invars if isinstance(v, Var)}
    read.update(v for v in jaxpr.outvars if isinstance(v, Var))
    dropped = [i for i, (v, k) in enumerate(zip(jaxpr.invars, keep)) if not k and v in read]
    if dropped:
      raise ValueError(f"trace_to_jaxpr_dynamic: keep_inputs drops inputs {dropped}, which "
                       f"the function reads.")
    jaxpr = jaxpr.replace(invars=[v for v, k in zip(jaxpr.invars, keep) if k])
  if auto_dce:
    jaxpr = dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars), instantiate=True)[0]
    jaxpr, consts = prune_constvars(jaxpr, consts)
  return jaxpr, [v.aval for v in jaxpr.outvars], list(consts)


def trace_to_jaxpr_nounits(fun: Any, pvals: Sequence[PartialVal],
                           instantiate: bool | Sequence[bool] = False
                           ) -> tuple[Jaxpr, list[PartialVal], list[Any]]:
  """Partial evaluation (JAX's `pe.trace_to_jaxpr_nounits`): computes what depends only on
  the known inputs now (binding each such equation in the current trace) and stages the
  rest.

  Args:
    fun: a `linear_util.WrappedFun` or a callable of flat arrays returning a sequence.
    pvals: one `PartialVal` per argument.
    instantiate: bool or one per output; True makes a known output unknown (it becomes an
      output of the jaxpr, read from a constvar).

  Returns:
    `(jaxpr, out_pvals, consts)`: `jaxpr` takes the unknown arguments and returns the
    unknown outputs; its constvars (values `consts`) are the known values it reads; each
    output's `PartialVal` holds its known value or its aval.
  """
  pvals = list(pvals)
  call = _call_flat(fun)
  # A staged leaf (a typed PRNG key, a leaf of the caller's flattening), known or given by
  # its aval, is traced as its value (keys); the function gets the leaf rebuilt around it.
  rebuild = {}
  for i, pv in enumerate(pvals):
    staged = tree_util.staged_leaf_value(pv[1]) if pv.is_known() else None
    if staged is not None:
      pvals[i] = PartialVal.known(staged[0])
      rebuild[i] = staged[1]
    elif not pv.is_known():   # an unknown typed key (`key<fry>[]`): traced as its data too
      staged = tree_util.staged_aval(pv.get_aval())
      if staged is not None:
        pvals[i] = PartialVal.unknown(staged[0])
        rebuild[i] = staged[1]
  if rebuild:
    flat_call = call

    def call(*args):
      return flat_call(*[rebuild[i](a) if i in rebuild else a for i, a in enumerate(args)])
  full, full_consts = trace_to_jaxpr(call, [pv.get_aval() for pv in pvals])
  if isinstance(instantiate, bool):
    instantiate = [instantiate] * len(full.outvars)
  known: dict[Var, Any] = dict(zip(full.constvars, full_consts))
  unknown_in = []
  for v, pv in zip(full.invars, pvals):
    if pv.is_known():
      known[v] = pv.get_known()
    else:
      unknown_in.append(v)
  unknown: set[Var] = set(unknown_in)
  staged = []
  with core.source_context() as src_ctx:   # NB: re-bound equations keep their source info
    for eqn in full.eqns:
      if any(isinstance(v, Var) and v in unknown for v in eqn.invars):
        staged.append(eqn)
        unknown.update(eqn.outvars)
        continue
      src_ctx.set(eqn.source_info)
      outs = eqn.primitive.bind(*[v.val if type(v) is Literal else known[v]
                                  for v in eqn.invars], **eqn.params)
      known.update(zip(eqn.outvars, outs if eqn.primitive.multiple_results else [outs]))
  out_unknown = [(isinstance(v, Var) and v in unknown) or inst
                 for v, inst in zip(full.outvars, instantiate)]
  out_pvals = []
  for v, u in zip(full.outvars, out_unknown):
    if u:
      out_pvals.append(PartialVal.unknown(v.aval))
    else:
      out_pvals.append(PartialVal.known(v.val if type(v) is Literal else known[v]))
  # Residuals: the known variables that the staged equations or unknown outputs read.
  res: list[Var] = []
  for v in [*(x for e in staged for x in e.invars),
            *(x for x, u in zip(full.outvars, out_unknown) if u)]:
    if isinstance(v, Var) and v not in unknown and v not in res:
      res.append(v)
  jaxpr = Jaxpr(res, unknown_in, [v for v, u in zip(full.outvars, out_unknown) if u], staged)
  return jaxpr, out_pvals, [known[v] for v in res]


def dce_jaxpr_consts(jaxpr: Jaxpr, used_outputs: Sequence[bool],
                     instantiate: bool | Sequence[bool] = False
                     ) -> tuple[Jaxpr, list[bool], list[bool]]:
  """As `dce_jaxpr`, but unused constvars go too (JAX's `pe.dce_jaxpr_consts`).

  Returns:
    `(new_jaxpr, used_consts, used_inputs)`.
  """
  nconst = len(jaxpr.constvars)
  if isinstance(instantiate, bool):
    instantiate = [instantiate] * len(jaxpr.invars)
  new, used = dce_jaxpr(convert_constvars_jaxpr(jaxpr), used_outputs,
                        [False] * nconst + list(instantiate))
  used_consts, used_inputs = used[:nconst], used[nconst:]
  kept_consts = [v for v, u in zip(jaxpr.constvars, used_consts) if u]
  new = new.replace(constvars=kept_consts, invars=new.invars[len(kept_consts):])
  return new, used_consts, used_inputs


def _dce_call_param(eqn: JaxprEqn) -> str:
  for name in ("call_jaxpr", "jaxpr"):
    if name in eqn.params:
      return name
  raise ValueError(f"DCE rule of '{eqn.primitive.name}': the equation has no 'call_jaxpr' "
                   f"or 'jaxpr' param holding the called jaxpr (params: "
                   f"{sorted(eqn.params)}).")


def dce_jaxpr_call_rule(used_outputs: list[bool], eqn: JaxprEqn
                        ) -> tuple[list[bool], JaxprEqn | None]:
  """The DCE rule of a call primitive whose `call_jaxpr` param is a `Jaxpr` taking the
  equation's operands (JAX's `pe.dce_jaxpr_call_rule`): unused results go, with the work
  and operands only they need; an equation with effects stays."""
  param = _dce_call_param(eqn)
  if not any(used_outputs) and not eqn.effects:
    return [False] * len(eqn.invars), None
  new, used_inputs = dce_jaxpr(eqn.params[param], used_outputs)
  new_eqn = eqn.replace(invars=[v for v, u in zip(eqn.invars, used_inputs) if u],
                        outvars=[v for v, u in zip(eqn.outvars, used_outputs) if u],
                        params={**eqn.params, param: new})
  return used_inputs, new_eqn


def dce_jaxpr_closed_call_rule(used_outputs: list[bool], eqn: JaxprEqn
                               ) -> tuple[list[bool], JaxprEqn | None]:
  """As `dce_jaxpr_call_rule` for a `ClosedJaxpr` param (JAX's
  `pe.dce_jaxpr_closed_call_rule`); its consts are kept."""
  param = _dce_call_param(eqn)
  if not any(used_outputs) and not eqn.effects:
    return [False] * len(eqn.invars), None
  closed = eqn.params[param]
  new, used_inputs = dce_jaxpr(closed.jaxpr, used_outputs)
  new_eqn = eqn.replace(invars=[v for v, u in zip(eqn.invars, used_inputs) if u],
                        outvars=[v for v, u in zip(eqn.outvars, used_outputs) if u],
                        params={**eqn.params, param: ClosedJaxpr(new, closed.consts)})
  return used_inputs, new_eqn


__all__ = ["DynamicJaxprTrace", "DynamicJaxprTracer", "trace_to_jaxpr", "dce_jaxpr",
           "dce_rules", "prune_constvars", "convert_constvars_jaxpr", "DropVar", "Val",
           "PartialVal", "trace_to_jaxpr_dynamic", "trace_to_jaxpr_nounits",
           "dce_jaxpr_consts", "dce_jaxpr_call_rule", "dce_jaxpr_closed_call_rule"]
