"""Automatic differentiation: forward mode (JVP) by a trace, reverse mode by linearizing
(JVP staged into a jaxpr, split into known primal and unknown tangent parts) and transposing
the linear part.

Design after JAX (Frostig, Johnson, Maclaurin, Paszke, Radul: "Decomposing reverse-mode
automatic differentiation", 2021) and autodidax: `jvp` rules per primitive, `transpose` rules
for linear primitives, symbolic `Zero` tangents never materialized unless needed.

Rule signatures (registries keyed by Primitive, filled beside each primitive):
  primitive_jvps[p](primals, tangents, **params) -> (primal_out, tangent_out)
  primitive_transposes[p](ct, *args, **params) -> one cotangent (or None) per arg; the
    linear args are `UndefinedPrimal`s.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from stagecraft import core, dtypes, tree_util
from stagecraft.core import Jaxpr, Literal, ShapedArray, Trace, Tracer, Var
from stagecraft.errors import MissingRuleError
from stagecraft.interpreters import batching, lowering, partial_eval as pe

__all__ = ["jvp_mode", "primitive_jvps", "primitive_transposes", "partial_eval_rules", "tangent_aval",
           "Zero", "zeros_like_aval", "instantiate_zeros", "add_tangents", "UndefinedPrimal",
           "is_undefined_primal", "defjvp", "defjvp2", "defjvp_zero", "deflinear",
           "defbilinear", "add_any_p", "JVPTracer", "JVPTrace", "jvp_flat",
           "partial_eval_jaxpr", "PartialEvalTrace", "linearize_flat", "backward_pass", "jvp_jaxpr",
           "transpose_jaxpr", "add_jaxvals", "add_jaxvals_p", "deflinear2", "CustomVJPException",
           "get_primitive_transpose", "folded_constant"]

primitive_jvps: dict[core.Primitive, Callable] = core.RuleRegistry()
primitive_transposes: dict[core.Primitive, Callable] = {}
#: `rule(eqn, unknowns_in) -> (known_eqn | None, unknown_eqn | None, out_unknowns)`: splits a
#: call-like equation whose inputs are partly unknown (its known outputs and residuals come
#: from the known equation, which the unknown one reads).
partial_eval_rules: dict[core.Primitive, Callable] = {}
#: `rule(eqn, unknowns_in, const_ok) -> (known_eqn | None, unknown_eqn | None, out_unknowns,
#: fwd)`: as a `partial_eval_rules` rule, forwarding residuals as JAX's jit does (used
#: instead of it where registered). `fwd` maps the variables the equations leave undefined
#: to what they stand for: a known result that is an operand to that operand (an atom of
#: `eqn`), an operand of the unknown equation to `ForwardedConst(value)` (only where
#: `const_ok`: the caller has a value for it). `const_ok` None asks for JAX's
#: `_pjit_partial_eval` (a `PartialEvalTrace` with `returns_consts`): the known equation
#: returns the constants the unknown one reads, and is there even when it returns nothing.
partial_eval_fwd_rules: dict[core.Primitive, Callable] = {}


#: The primitives whose `partial_eval_rules` rule runs even when every operand is known, when
#: the trace splits as JAX's `JaxprTrace` (whose custom partial-evaluation rules run for
#: any operands): a `checkpoint` of known values is then evaluated inline, as JAX's.
partial_eval_when_known: set[core.Primitive] = set()


#: The values of the known operands of the equation a `partial_eval_rules` rule is splitting,
#: while `PartialEvalTrace` runs it (innermost last); see `known_operand_values`.
_known_envs: list[dict] = []


def known_operand_values() -> dict[Var, Any]:
  """For a `partial_eval_rules` rule: the values of the known operands (by the equation's
  variables) of the equation it is splitting when `PartialEvalTrace` splits it (concrete
  values outside `jit`, enclosing tracers inside); when splitting a jaxpr
  (`partial_eval_jaxpr`), only the values of its constants given as `const_values`. A rule
  that reads it must key any cache on what it reads (JAX's scan does not forward NumPy
  arrays as residuals)."""
  return _known_envs[-1] if _known_envs else {}


#: For each `PartialEvalTrace` splitting an equation (innermost last): whether it splits as
#: JAX's `JaxprTrace` (`returns_consts`: the transposition of `checkpoint`,
#: `linear_transpose`) rather than as its linearize; see `splitting_as_jaxpr_trace`.
_split_modes: list[bool] = []


def splitting_as_jaxpr_trace() -> bool:
  """For a `partial_eval_rules` rule (also when it runs inside a jaxpr that such a rule
  splits): whether the enclosing partial evaluation is JAX's `JaxprTrace` one (the
  transposition of `checkpoint`, `linear_transpose`), whose residuals are numbered in the
  topological order of its traced graph, rather than its linearize (residuals in the order
  the tangent equations read them). A rule that reads it must key any cache on it."""
  return _split_modes[-1] if _split_modes else False


class ForwardedConst:
  """A constant that a split call's unknown side reads, passed to it from outside (JAX's
  forwarded constant residuals): `value` is the array."""
  __slots__ = ("value",)

  def __init__(self, value: Any):
    self.value = value


# ---------------------------------------------------------------------------
# Symbolic zeros, tangent types, undefined primals


def tangent_aval(aval: ShapedArray) -> ShapedArray:
  """The tangent type of a primal type: float0 for integer and bool primals (as JAX); a
  token's is the token type; another type's (a hijax type's) is its `to_tangent_aval()`."""
  if type(aval) is not ShapedArray:
    if aval is core.abstract_token:
      return aval
    if hasattr(aval, "to_tangent_aval"):
      return aval.to_tangent_aval()
  if dtypes.is_inexact(aval.dtype):
    return aval
  return ShapedArray(aval.shape, dtypes.float0, False)


class CustomVJPException(Exception):
  """Raised when a custom_vjp function is differentiated with respect to a value it closes
  over (its fwd/bwd rules give cotangents only for its explicit arguments). JAX's class of
  the same name (`jax._src.interpreters.ad.CustomVJPException`; jaxopt's tests catch it),
  an `Exception`, not a `TypeError`."""

  def __init__(self, msg: str):
    super().__init__(msg)


class Zero:
  """A symbolic zero tangent or cotangent of a given aval."""
  __slots__ = ("aval",)

  def __init__(self, aval: ShapedArray):
    self.aval = aval

  @staticmethod
  def from_value(x: Any) -> "Zero":
    return Zero(tangent_aval(core.get_aval(x)))

  @staticmethod
  def from_primal_value(x: Any) -> "Zero":
    """The symbolic zero tangent of the primal value `x` (JAX's name for `from_value`)."""
    return Zero(tangent_aval(core.get_aval(x)))

  def __repr__(self):
    return f"Zero({self.aval})"   # JAX's: `Zero(~float32[])`


# A pytree node without children (its aval is the node data), as JAX's `ad_util.Zero`: a
# symbolic zero among a function's outputs vanishes from the flattened leaves, so `vmap`,
# `jit` and `tree_map` pass it through (equinox's `filter_primitive` batched JVP rules
# return one from under `vmap`).
tree_util.register_pytree_node(Zero, lambda z: ((), z.aval), lambda aval, _: Zero(aval))


#: `retype(x, sharding)`: `x` given the type sharding `sharding` (split over Explicit mesh
#: axes); set by lax/spmd.py (a `reshard`), so that zeros keep their aval's type.
retype_zeros: Callable[[Any, Any], Any] | None = None


def folded_constant(value: Any, aval: ShapedArray) -> Any | None:
  """The host scalar `value` of the scalar `aval` as JAX's constant folding of
  `convert_element_type` stages it (its scalar zeros): under a staging trace, a tracer whose
  jaxpr atom is the Literal itself (printed `0.0:f32[]`, no equation), weakly typed where
  `aval` is.

  The staging trace is looked for below JVP, batching and partial-evaluation traces, which
  bind a primitive of constants in their parent. Returns None when evaluating eagerly or
  under any other trace: the caller then binds as usual.
  """
  trace = core.current_trace()
  while type(trace) in (JVPTrace, batching.BatchTrace) or (
      type(trace) is PartialEvalTrace and not trace.stage_known):
    trace = trace.parent
  if type(trace) is not pe.DynamicJaxprTrace and type(trace) is not PartialEvalTrace:
    return None
  # NB: a weakly typed Literal holds a Python scalar (see `Literal`).
  val = np.asarray(value, aval.dtype)[()]
  return pe.DynamicJaxprTracer(trace, aval, Literal(val.item() if aval.weak_type else val,
                                                    aval))


def _zeros(aval: ShapedArray) -> Any:
  zero = np.zeros((), aval.dtype)[()]
  if aval.shape == () and aval._sharding is None and not aval.vma:
    folded = folded_constant(zero, aval)
    if folded is not None:
      return folded
  # NB: a staged zero is a lax primitive, and lax registers its rules here (as in JAX).
  from stagecraft.lax import shape as lax_shape
  # As JAX's zeros, weakly typed where the aval is. NB: bound, not `broadcast_in_dim`,
  # which hands a scalar of the result's shape back as it is (a host value here).
  z = lax_shape.broadcast_in_dim_p.bind(
      core.WeakScalarValue(zero) if aval.weak_type else zero, shape=aval.shape,
      broadcast_dimensions=())
  if aval._sharding is not None and retype_zeros is not None:
    z = retype_zeros(z, aval._sharding)
  if aval.vma and core.check_vma_state[0]:
    # NB: as JAX's, a zero of a varying type is `pvary`'d to it (after the broadcast).
    z = core.pvary_hook[0](z, core.order_axes(aval.vma))
  return z


def zeros_like_aval(aval: ShapedArray) -> Any:
  """A concrete (or staged) zero of `aval`; float0 zeros are host arrays, as in JAX. A zero
  of an aval split over Explicit mesh axes has its type (JAX gives instantiated zero
  tangents and cotangents their primal's type).

  Raises:
    KeyError: for the token type, which has no zero (JAX's error: its table of zero makers
      per aval type has no entry for tokens, so the message is the type).
  """
  if aval is core.abstract_token:
    raise KeyError(core.AbstractToken)
  if aval.dtype == dtypes.float0:
    return np.zeros(aval.shape, dtypes.float0)
  # NB: while linearizing, a zero made by a JVP rule has only known inputs, so it is
  # computed on the primal side and saved as a residual, as JAX's linearize does (its
  # `_ = broadcast_in_dim 0.0` follows the primal equation whose JVP made it).
  return _zeros(aval)


def instantiate_zeros(t: Any) -> Any:
  return zeros_like_aval(t.aval) if type(t) is Zero else t


def instantiate_zeros_on_tangent_side(t: Any) -> Any:
  """`instantiate_zeros`, for a JVP rule whose JAX linearize rule instantiates the zero in
  its tangent function (scan's carries): while linearizing, the zero is an equation of the
  linear program (computed when the backward pass runs, as JAX's), not a primal value."""
  if type(t) is not Zero:
    return t
  trace = core.current_trace()
  if type(trace) is not PartialEvalTrace or trace.returns_consts:
    return zeros_like_aval(t.aval)
  trace.stage_known = True
  try:
    return zeros_like_aval(t.aval)
  finally:
    trace.stage_known = False


def add_tangents(x: Any, y: Any) -> Any:
  """x + y where either may be a symbolic Zero (tangent and cotangent accumulation)."""
  if type(x) is Zero:
    return y
  if type(y) is Zero:
    return x
  return add_any_p.bind(x, y)


class UndefinedPrimal:
  """A linear input of a transpose rule: only its aval is known."""
  __slots__ = ("aval",)

  def __init__(self, aval: ShapedArray):
    self.aval = aval

  def __repr__(self):
    return f"UndefinedPrimal({self.aval.str_short()})"


def is_undefined_primal(x: Any) -> bool:
  return type(x) is UndefinedPrimal


# ---------------------------------------------------------------------------
# Rule helpers


def defjvp(prim: core.Primitive, *jvp_fns: Callable | None) -> None:
  """One function per argument: `fn(t_i, *primals, **params)` gives that argument's
  contribution to the output tangent (None: the argument is not differentiable). Zero
  tangents contribute nothing and their functions are not called."""
  def rule(primals, tangents, **params):
    out = prim.bind(*primals, **params)
    acc = Zero(tangent_aval(core.get_aval(out)))
    for fn, t in zip(jvp_fns, tangents):
      if fn is not None and type(t) is not Zero:
        acc = add_tangents(acc, fn(t, *primals, **params))
    return out, acc
  primitive_jvps[prim] = rule


def defjvp2(prim: core.Primitive, *jvp_fns: Callable | None) -> None:
  """As `defjvp`, but each function also gets the primal output: `fn(t_i, ans, *primals)`."""
  def rule(primals, tangents, **params):
    out = prim.bind(*primals, **params)
    acc = Zero(tangent_aval(core.get_aval(out)))
    for fn, t in zip(jvp_fns, tangents):
      if fn is not None and type(t) is not Zero:
        acc = add_tangents(acc, fn(t, out, *primals, **params))
    return out, acc
  primitive_jvps[prim] = rule


def defjvp_zero(prim: core.Primitive) -> None:
  """A primitive whose outputs have zero derivative (comparisons, integer-valued results,
  argmax, random bits): the output tangents are symbolic zeros (float0 for integer and bool
  outputs), never materialized."""
  def rule(primals, tangents, **params):
    out = prim.bind(*primals, **params)
    if prim.multiple_results:
      return out, [Zero(tangent_aval(core.get_aval(o))) for o in out]
    return out, Zero(tangent_aval(core.get_aval(out)))
  primitive_jvps[prim] = rule


def deflinear(prim: core.Primitive, transpose_rule: Callable) -> None:
  """As JAX's `ad.deflinear`: `prim` is linear in all its arguments, its JVP applies it to
  the tangents, and `transpose_rule(ct, **params)` (the cotangent and the params only, not
  the operands) returns one cotangent per argument. A symbolic `Zero` cotangent gives zero
  cotangents without calling the rule. (stagecraft's own primitives use `deflinear_args`,
  whose rule also takes the operands, as `deflinear2`'s.)"""
  def transpose(ct, *args, **params):
    if type(ct) is Zero:
      return [Zero(tangent_aval(a.aval)) if is_undefined_primal(a) else None for a in args]
    return transpose_rule(ct, **params)
  deflinear_args(prim, transpose)


def deflinear_args(prim: core.Primitive, transpose_rule: Callable) -> None:
  """A primitive linear in all its arguments: its JVP applies it to the tangents (zeros
  instantiated), and `transpose_rule(ct, *args, **params)` is its transpose (the linear
  args are `UndefinedPrimal`s)."""
  def rule(primals, tangents, **params):
    out = prim.bind(*primals, **params)
    if all(type(t) is Zero for t in tangents):
      return out, Zero(tangent_aval(core.get_aval(out)))
    return out, prim.bind(*[instantiate_zeros(t) for t in tangents], **params)
  primitive_jvps[prim] = rule
  primitive_transposes[prim] = transpose_rule


def defbilinear(prim: core.Primitive, lhs_transpose: Callable, rhs_transpose: Callable) -> None:
  """A primitive linear in each of its two arguments separately (mul, dot_general)."""
  defjvp(prim, lambda t, x, y, **params: prim.bind(t, y, **params),
         lambda t, x, y, **params: prim.bind(x, t, **params))

  def transpose(ct, x, y, **params):
    if is_undefined_primal(x) and is_undefined_primal(y):
      raise ValueError(f"transpose of {prim.name}: both operands are linear; the "
                       f"computation is not linear in its inputs.")
    if is_undefined_primal(x):
      return [lhs_transpose(ct, x, y, **params), None]
    return [None, rhs_transpose(ct, x, y, **params)]
  primitive_transposes[prim] = transpose


# add_any(x, y): the sum of two tangents of one type, used to accumulate (co)tangents
# (JAX's add_jaxvals). Linear; its transpose sends the cotangent to both operands.
add_any_p = core.Primitive("add_any")


def _add_any_abstract_eval(x, y):
  if x.shape != y.shape or x.dtype != y.dtype:
    raise TypeError(f"add_any: tangents must have one type, got {x.str_short()} and "
                    f"{y.str_short()}.")
  return x.update(weak_type=x.weak_type and y.weak_type)


add_any_p.def_abstract_eval(_add_any_abstract_eval)
deflinear_args(add_any_p, lambda ct, x, y: [ct, ct])
lowering.register_lowering(add_any_p,
                           lambda ctx, x, y: [ctx.elementwise("stablehlo.add", x, y)])
batching.defbroadcasting(add_any_p, scalar_ok=[False, False])


# ---------------------------------------------------------------------------
# The JVP trace


class JVPTracer(Tracer):
  """A primal value with its tangent (never a symbolic Zero: those stay plain values)."""
  __slots__ = ("primal", "tangent")

  def __init__(self, trace: "JVPTrace", primal: Any, tangent: Any):
    self._trace = trace
    self.primal = primal
    self.tangent = tangent

  @property
  def aval(self) -> ShapedArray:
    return core.get_aval(self.primal)

  def to_concrete_value(self):
    return core.to_concrete_value(self.primal)

  def _short_repr(self) -> str:
    short = lambda x: x._short_repr() if isinstance(x, Tracer) else str(x)
    if isinstance(self._trace.parent, PartialEvalTrace):   # linearize, grad, vjp
      tangent = core.get_aval(self.tangent).str_short()
      return f"GradTracer(primal={short(self.primal)}, typeof(tangent)={tangent})"
    return f"JVPTracer(primal={short(self.primal)}, tangent={short(self.tangent)})"


#: The AD mode of the JVP rule running now (`jvp_mode()`), set around each rule call.
_jvp_modes = [None]


def jvp_mode() -> bool | None:
  """The mode of the differentiation whose JVP rule is running now (JAX's `is_vjp` of its
  `LinearizeTrace`): True under grad/vjp (the tangents will be transposed), False under
  `linearize`, None under forward mode (`jvp`). Rules staging a jaxpr's JVP (`jvp_jaxpr`:
  jit, loops, conds) pass it on to the JVP of their bodies, so rules that differ between
  forward and reverse mode (hijax primitives: `jvp` vs `vjp_fwd`) see the outer mode."""
  return _jvp_modes[0]


class JVPTrace(Trace):
  """Runs each primitive's JVP rule; the rule's own binds go to `parent`. `is_vjp` is the
  mode (`jvp_mode`) its rules see."""
  __slots__ = ("parent", "is_vjp")

  def __init__(self, parent: Trace, is_vjp: bool | None = None):
    super().__init__()
    self.parent = parent
    self.is_vjp = is_vjp

  def to_primal_tangent(self, x: Any):
    if type(x) is JVPTracer and x._trace is self:
      return x.primal, x.tangent
    if isinstance(x, Tracer) and not x._trace._valid:
      raise core.escaped_tracer_error(x)
    return x, Zero.from_value(x)

  def process_primitive(self, prim, args, params):
    primals, tangents = [], []
    for x in args:
      p, t = self.to_primal_tangent(x)
      primals.append(p)
      tangents.append(t)
    with core.set_current_trace(self.parent):
      if all(type(t) is Zero for t in tangents):
        return prim.bind(*primals, **params)
      rule = primitive_jvps.get(prim)
      if rule is None:
        raise MissingRuleError(
            f"Differentiation rule for '{prim.name}' not implemented: jvp/grad need one. "
            f"Register one beside the primitive with stagecraft.interpreters.ad.defjvp({prim.name}_p, "
            f"...) (or deflinear / primitive_jvps[{prim.name}_p] = rule).")
      prev = _jvp_modes[0]
      if prev is self.is_vjp:   # the common case: jvp_flat set this trace's mode
        p_out, t_out = rule(primals, tangents, **params)
      else:
        _jvp_modes[0] = self.is_vjp
        try:
          p_out, t_out = rule(primals, tangents, **params)
        finally:
          _jvp_modes[0] = prev
    if prim.multiple_results:
      return [self._wrap(p, t) for p, t in zip(p_out, t_out)]
    return self._wrap(p_out, t_out)

  def _wrap(self, p, t):
    return p if type(t) is Zero else JVPTracer(self, p, t)


def jvp_flat(fun: Callable[..., Sequence[Any]], primals: Sequence[Any],
             tangents: Sequence[Any], is_vjp: Any = "infer") -> tuple[list[Any], list[Any]]:
  """JVP of a flat function: returns primal outputs and tangent outputs (Zero where the
  output does not depend on the inputs). `is_vjp` is the mode its rules see (`jvp_mode`);
  by default that of the `PartialEvalTrace` it runs over (linearization), else that of the
  rule calling it (None outside rules: `api.jvp` passes None)."""
  parent = core.current_trace()
  if is_vjp == "infer":
    is_vjp = parent.is_vjp if isinstance(parent, PartialEvalTrace) else _jvp_modes[0]
  trace = JVPTrace(parent, is_vjp)
  ins = [p if type(t) is Zero else JVPTracer(trace, p, t) for p, t in zip(primals, tangents)]
  prev_mode = _jvp_modes[0]
  _jvp_modes[0] = is_vjp
  try:
    with core.set_current_trace(trace):
      outs = fun(*ins)
    p_out, t_out = [], []
    for x in outs:
      p, t = trace.to_primal_tangent(x)
      p_out.append(p)
      t_out.append(t)
    return p_out, t_out
  finally:
    _jvp_modes[0] = prev_mode
    trace.invalidate()


# ---------------------------------------------------------------------------
# Linearize: stage the JVP, split known (primal) from unknown (tangent) equations


def partial_eval_jaxpr(jaxpr: Jaxpr, unknowns: Sequence[bool], instantiate: Sequence[bool],
                       const_values: dict[Var, Any] | None = None,
                       returns_consts: bool = False, shallow_dce: bool = False
                       ) -> tuple[Jaxpr, Jaxpr, int]:
  """Splits `jaxpr` by which invars are unknown.

  Args:
    jaxpr: the program.
    unknowns: one bool per invar.
    instantiate: one bool per outvar; True puts that output in the unknown jaxpr even if it
      is known (passed through as a residual).
    const_values: the values of `jaxpr.constvars`, where the caller can take constants
      that calls inside forward (`partial_eval_fwd_rules`): one that is not among them
      becomes a new constvar of `known` (after `jaxpr`'s), added here with its value.
    returns_consts: split calls inside as JAX's `_pjit_partial_eval` does (see
      `partial_eval_fwd_rules`) and keep every known equation (JAX binds each one), not
      only those the outputs need.
    shallow_dce: the known equations none of whose results is needed go, but those kept
      stay whole (their jaxprs and unused results too), as the known side of JAX's
      `JaxprTrace` (`partial_eval_jaxpr_nounits`), which binds each known equation as is;
      else (JAX's linearize) they are pruned inside as well.

  Returns:
    `(known, unknown, num_res, out_unknowns)`: `known` takes the known invars (constvars
    kept) and returns its outputs followed by `num_res` residuals; `unknown` takes the
    residuals then the unknown invars and returns the outputs that depend on unknowns or are
    instantiated; `out_unknowns` says which outputs depend on unknowns.

  Primitives with a rule in `partial_eval_rules` (call primitives, loops) are split into
  known equation(s) (the rule may return a list) and an unknown equation instead of going
  wholly to the unknown side.
  """
  unknown_vars: set[Var] = {v for v, u in zip(jaxpr.invars, unknowns) if u}
  known_eqns, unknown_eqns = [], []
  # Variables a forwarding rule left undefined, and what they stand for.
  alias: dict[Var, Any] = {}
  new_constvars: list[Var] = []
  const_ids: dict[int, Var] | None = None
  for eqn in jaxpr.eqns:
    if alias:
      eqn = eqn.replace(invars=[alias.get(v, v) if type(v) is Var else v
                                for v in eqn.invars])
    in_unknown = [type(v) is Var and v in unknown_vars for v in eqn.invars]
    if not any(in_unknown):
      known_eqns.append(eqn)
      continue
    frule = partial_eval_fwd_rules.get(eqn.primitive)
    if frule is not None:
      known_eqn, unknown_eqn, out_unknowns, fwd = frule(
          eqn, in_unknown, None if returns_consts else const_values is not None)
      for v, a in fwd.items():
        if type(a) is ForwardedConst:
          if const_ids is None:
            const_ids = {id(c): cv for cv, c in const_values.items()}
          cv = const_ids.get(id(a.value))
          if cv is None:
            cv = const_ids[id(a.value)] = Var(v.aval)
            const_values[cv] = a.value
            new_constvars.append(cv)
          a = cv
        alias[v] = a
      if known_eqn is not None:
        known_eqns.append(known_eqn)
      if unknown_eqn is not None:
        unknown_eqns.append(unknown_eqn.replace(invars=[
            alias.get(v, v) if type(v) is Var else v for v in unknown_eqn.invars]))
      unknown_vars.update(v for v, u in zip(eqn.outvars, out_unknowns) if u)
      continue
    rule = partial_eval_rules.get(eqn.primitive)
    if rule is None:
      unknown_eqns.append(eqn)
      unknown_vars.update(eqn.outvars)
      continue
    _known_envs.append(const_values or {})
    try:
      known_eqn, unknown_eqn, out_unknowns = rule(eqn, in_unknown)
    finally:
      _known_envs.pop()
    if isinstance(known_eqn, list):     # a rule may emit several known equations
      known_eqns.extend(known_eqn)
    elif known_eqn is not None:
      known_eqns.append(known_eqn)
    if unknown_eqn is not None:
      unknown_eqns.append(unknown_eqn)
    unknown_vars.update(v for v, u in zip(eqn.outvars, out_unknowns) if u)
  outvars = jaxpr.outvars
  if alias:
    outvars = [alias.get(v, v) if type(v) is Var else v for v in outvars]
  out_unknown = [(type(v) is Var and v in unknown_vars) or inst
                 for v, inst in zip(outvars, instantiate)]
  # Dead tangent work (e.g. a JVP whose result a stop_gradient drops) goes, and with it the
  # residuals only it read; the known side is pruned to what remains needed below.
  unknown_eqns = pe.dce_jaxpr(
      Jaxpr([], [], [v for v, u in zip(outvars, out_unknown) if u], unknown_eqns),
      [True] * sum(out_unknown))[0].eqns
  # Residuals: known variables read by unknown equations or returned as unknown outputs.
  res: list[Var] = []
  seen: set[Var] = set()
  needed = [v for e in unknown_eqns for v in e.invars]
  needed += [v for v, u in zip(outvars, out_unknown) if u]
  for v in needed:
    if type(v) is Var and v not in unknown_vars and v not in seen:
      seen.add(v)
      res.append(v)
  known = Jaxpr([*jaxpr.constvars, *new_constvars],
                [v for v, u in zip(jaxpr.invars, unknowns) if not u],
                [*[v for v, u in zip(outvars, out_unknown) if not u], *res], known_eqns)
  if not returns_consts:
    known = pe.dce_jaxpr(known, [True] * len(known.outvars), instantiate=True,
                         shallow=shallow_dce)[0]
  sub = {v: Var(v.aval) for v in res}
  unknown_eqns = [e.replace(invars=[sub.get(v, v) if type(v) is Var else v for v in e.invars])
                  for e in unknown_eqns]
  unknown = Jaxpr([], [*(sub[v] for v in res), *(v for v, u in zip(jaxpr.invars, unknowns) if u)],
                  [sub.get(v, v) if type(v) is Var else v
                   for v, u in zip(outvars, out_unknown) if u], unknown_eqns)
  return known, unknown, len(res), [type(v) is Var and v in unknown_vars
                                    for v in outvars]


class PartialEvalTrace(pe.DynamicJaxprTrace):
  """Partial evaluation by tracing (JAX's `JaxprTrace`): values are *known* (anything that
  is not one of this trace's tracers: concrete arrays outside `jit`, tracers of the
  enclosing trace inside it) or *unknown* (this trace's tracers, the tangents when
  linearizing). A primitive with only known inputs is bound in `parent`, so it runs there
  (eagerly outside `jit`: Python control flow on its result works); one with an unknown
  input is recorded into this trace's jaxpr, reading its known inputs as constvars (the
  residuals). Call-like primitives with a rule in `partial_eval_rules` are split: their
  known part runs in `parent`, their unknown part is recorded.
  """
  __slots__ = ("parent", "stage_known", "returns_consts", "is_vjp")

  def __init__(self, parent: Trace, returns_consts: bool = False, is_vjp: bool = True):
    super().__init__()
    self.parent = parent
    # False under `linearize` (JAX's `is_vjp`): rules that differ between reverse mode and
    # linearization (hijax primitives' `vjp_fwd` / `lin`) read it from the trace.
    self.is_vjp = is_vjp
    self.stage_known = False   # True: record even all-known primitives (tangent zeros)
    # True: split calls as JAX's `JaxprTrace` does (`_pjit_partial_eval`: the known call
    # returns the constants the unknown one reads); False: as its linearize does.
    self.returns_consts = returns_consts

  def is_unknown(self, x: Any) -> bool:
    return type(x) is pe.DynamicJaxprTracer and x._trace is self

  def process_primitive(self, prim, args, params):
    for x in args:
      if type(x) is pe.DynamicJaxprTracer and x._trace is self:
        break
    else:
      if self.stage_known:
        return super().process_primitive(prim, args, params)
      if self.returns_consts and prim in partial_eval_when_known:
        return self._split(partial_eval_rules[prim], prim, args, params)
      with core.set_current_trace(self.parent):
        return prim.bind(*args, **params)
    rule = partial_eval_rules.get(prim)
    if rule is None:
      return super().process_primitive(prim, args, params)
    return self._split(rule, prim, args, params)

  def _split(self, rule, prim, args, params):
    """Splits a call-like primitive with a `partial_eval_rules` rule (or, where registered,
    a `partial_eval_fwd_rules` one): its known equations are bound in `parent`, its unknown
    equation recorded, reading the known values (residuals) as constvars."""
    env: dict[Var, Any] = {}
    invars, unknowns = [], []
    for x in args:
      if self.is_unknown(x):
        invars.append(x._var)
        unknowns.append(True)
      else:
        v = Var(core.get_aval(x))
        env[v] = x
        invars.append(v)
        unknowns.append(False)
    out_avals = prim.abstract_eval(*[v.aval for v in invars], **params)
    multiple = prim.multiple_results
    outvars = [Var(a) for a in (out_avals if multiple else [out_avals])]
    # NB: skips this frame and process_primitive's (the search starts at bind).
    src = core.current_source_info(3)
    eqn = core.JaxprEqn(invars, outvars, prim, params, src)
    frule = partial_eval_fwd_rules.get(prim)
    fwd = None
    _split_modes.append(self.returns_consts)
    try:
      if frule is not None:
        known_eqns, unknown_eqn, out_unknowns, fwd = frule(
            eqn, unknowns, None if self.returns_consts else True)
      else:
        _known_envs.append(env)
        try:
          known_eqns, unknown_eqn, out_unknowns = rule(eqn, unknowns)
        finally:
          _known_envs.pop()
    finally:
      _split_modes.pop()
    if known_eqns is None:
      known_eqns = []
    elif not isinstance(known_eqns, list):
      known_eqns = [known_eqns]
    # The split equations keep the source info of the equation they came from.
    with core.set_current_trace(self.parent), core.source_context(src):
      for eqn in known_eqns:
        ins = [v.val if type(v) is Literal else env[v] for v in eqn.invars]
        # As JAX's staging trace, which its partial evaluation binds known equations in:
        # a conversion of a host scalar folds into a literal.
        fold = pe.const_fold_rules.get(eqn.primitive)
        outs = fold(*ins, **eqn.params) if fold is not None else None
        if outs is None:
          outs = eqn.primitive.bind(*ins, **eqn.params)
        env.update(zip(eqn.outvars, outs if eqn.primitive.multiple_results else [outs]))
    if fwd:
      for v, a in fwd.items():
        env[v] = (a.value if type(a) is ForwardedConst else
                  a.val if type(a) is Literal else env[a])
    inlined: dict[Var, Any] = {}
    if unknown_eqn is not None:
      ins = [v if type(v) is Literal or v not in env else self._lift(env[v])
             for v in unknown_eqn.invars]
      u_prim = unknown_eqn.primitive
      if unknown_eqn.params.get("inline") is True and u_prim in pe.inline_calls:
        # As JAX's linearize of an inline jit: its unknown half is recorded equation by
        # equation (its known half ran above as one call).
        args_u = [x.val if type(x) is Literal else pe.DynamicJaxprTracer(self, x.aval, x)
                  for x in ins]
        res = self.inline_call(u_prim, args_u, unknown_eqn.params)
        inlined.update(zip(unknown_eqn.outvars, res if u_prim.multiple_results else [res]))
      else:
        self.eqns.append(unknown_eqn.replace(invars=ins,
                                             source_info=unknown_eqn.source_info or src))
    outs = [inlined[v] if v in inlined else pe.DynamicJaxprTracer(self, v.aval, v) if u
            else env[v] for v, u in zip(outvars, out_unknowns)]
    return outs if multiple else outs[0]


def linearize_flat(fun: Callable[..., Sequence[Any]], primals: Sequence[Any],
                   is_vjp: bool = True):
  """Linearizes a flat function at `primals`: the JVP runs over a `PartialEvalTrace`
  whose unknowns are the tangents, so primal operations run in the enclosing trace (on
  concrete values outside `jit`, as in JAX) and the tangent operations are recorded.

  Returns:
    `(primal_outs, linear_jaxpr, residuals, zero_outs)` (`is_vjp`: the jaxpr is for
    transposition, JAX's flag; False for `linearize`): for the outputs not marked in
    `zero_outs` (those have symbolic zero tangents), the tangent outputs are
    `eval_jaxpr(linear_jaxpr, [], *residuals, *tangents)`; `linear_jaxpr` is linear in the
    tangents.

  Raises:
    ValueError: a primal output depends on the tangents (JAX's "Linearization failed to
      produce known values for all output primals").
  """
  trace = PartialEvalTrace(core.current_trace(), is_vjp=is_vjp)
  try:
    t_args = [trace.new_arg(tangent_aval(core.get_aval(p))) for p in primals]
    t_in = [Zero(t.aval) if t.aval is not core.abstract_token
            and t.aval.dtype == dtypes.float0 else t for t in t_args]
    with core.set_current_trace(trace):
      p_out, t_out = jvp_flat(fun, primals, t_in)
    if any(trace.is_unknown(p) for p in p_out):
      # NB: JAX's error (a JVP rule that computes primals from tangents, such as the general
      # reduce_window's, cannot be linearized), then which operations do this
      raise ValueError(
          "Linearization failed to produce known values for all output primals. This is "
          "typically caused by attempting to differentiate a function uses an operation "
          "that does not support reverse-mode autodiff (such as lax.reduce_window with a "
          "computation other than add, max or min). Use forward mode (jax.jvp, jacfwd) for "
          "it, or rewrite it with operations that support reverse mode.")
    zero_outs = [type(t) is Zero for t in t_out]
    jaxpr, consts = trace.to_jaxpr([t for t in t_out if type(t) is not Zero])
  finally:
    trace.invalidate()
  # Dead tangent work (a JVP whose result a stop_gradient drops) goes, with its residuals.
  jaxpr = pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars), instantiate=True)[0]
  jaxpr, consts = pe.prune_constvars(jaxpr, consts)
  return p_out, pe.convert_constvars_jaxpr(jaxpr), consts, zero_outs


# ---------------------------------------------------------------------------
# Transposition


def backward_pass(jaxpr: Jaxpr, args: Sequence[Any], cts_out: Sequence[Any],
                  consts: Sequence[Any] = (), wanted: Sequence[bool] | None = None
                  ) -> list[Any]:
  """Transposes the linear `jaxpr`: `args` give a value for each non-linear invar and an
  UndefinedPrimal for each linear one, `consts` the values of its constvars; returns one
  cotangent per invar (Zero for invars nothing flows to; None for non-linear ones).

  `wanted` (one bool per invar; default all) names the linear invars whose cotangents are
  needed: equations whose linear inputs flow to none of them are not transposed, and the
  unwanted invars get Zero (JAX's `NullAccum`, `jax.ad.DontWant`)."""
  primal_env: dict[Var, Any] = dict(zip(jaxpr.constvars, consts))
  linear: set[Var] = set()
  # NB: a linear invar has the type of the UndefinedPrimal passed for it, which may differ
  # from its variable's in weak type (a loop's carried cotangent: JAX types it by its
  # accumulator); the transpose rules reading it see that type.
  lin_avals: dict[Var, ShapedArray] = {}
  for v, a in zip(jaxpr.invars, args):
    if is_undefined_primal(a):
      linear.add(v)
      if a.aval != v.aval:
        lin_avals[v] = a.aval
    else:
      primal_env[v] = a
  # NB: equations recorded while an equation is evaluated or transposed keep its source
  # info (JAX's `user_context`), so a transposed `sin`'s ops name the user's line of `sin`.
  with core.source_context() as src_ctx:
    return _backward_pass(jaxpr, args, cts_out, primal_env, linear, lin_avals, src_ctx,
                          wanted)


def _backward_pass(jaxpr, args, cts_out, primal_env, linear, lin_avals, src_ctx, wanted
                   ) -> list[Any]:
  # Forward: evaluate the non-linear equations (those reading no linear variable).
  linear_eqns = []
  for eqn in jaxpr.eqns:
    if any(type(v) is Var and v in linear for v in eqn.invars):
      linear.update(eqn.outvars)
      linear_eqns.append(eqn)
    else:
      src_ctx.set(eqn.source_info)
      ins = [v.val if type(v) is Literal else primal_env[v] for v in eqn.invars]
      outs = eqn.primitive.bind(*ins, **eqn.params)
      primal_env.update(zip(eqn.outvars, outs if eqn.primitive.multiple_results else [outs]))

  if wanted is not None:
    # NB: the linear variables whose cotangents flow to a wanted invar: an equation is
    # transposed only when one of its linear inputs is among them.
    needed = {v for v, w in zip(jaxpr.invars, wanted) if w and v in linear}
    for eqn in linear_eqns:
      if any(type(v) is Var and v in needed for v in eqn.invars):
        needed.update(eqn.outvars)
    linear_eqns = [e for e in linear_eqns
                   if any(type(v) is Var and v in needed for v in e.invars)]
  else:
    needed = linear

  ct_env: dict[Var, Any] = {}

  def write_ct(v, ct):
    if type(v) is Var and ct is not None and type(ct) is not Zero and v in needed:
      ct_env[v] = add_tangents(ct_env[v], ct) if v in ct_env else ct

  for v, ct in zip(jaxpr.outvars, cts_out):
    if type(v) is Var and v in linear:
      write_ct(v, ct)
  for eqn in reversed(linear_eqns):
    cts = [ct_env.pop(v, None) for v in eqn.outvars]
    cts = [Zero(tangent_aval(v.aval)) if c is None else c for v, c in zip(eqn.outvars, cts)]
    if all(type(c) is Zero for c in cts):
      continue
    rule = primitive_transposes.get(eqn.primitive)
    if rule is None:
      raise MissingRuleError(
          f"Transpose rule (for reverse-mode differentiation) for "
          f"'{eqn.primitive.name}' not implemented: grad/vjp need one. Register one beside the primitive: ad.deflinear2({eqn.primitive.name}_p, "
          f"_{eqn.primitive.name}_transpose) or ad.primitive_transposes[...] = rule.")
    ins = [UndefinedPrimal(lin_avals.get(v, v.aval)) if type(v) is Var and v in linear else
           (v.val if type(v) is Literal else primal_env[v]) for v in eqn.invars]
    ct = cts if eqn.primitive.multiple_results else cts[0]
    src_ctx.set(eqn.source_info)
    cts_in = rule(ct, *ins, **eqn.params)
    for v, c in zip(eqn.invars, cts_in):
      if type(v) is Var and v in linear:
        write_ct(v, c)
  return [ct_env.get(v, Zero(tangent_aval(a.aval))) if is_undefined_primal(a) else None
          for v, a in zip(jaxpr.invars, args)]


# ---------------------------------------------------------------------------
# Jaxpr-level transformations for call primitives (their rules stay staged calls)


def _closed_with_const_args(jaxpr: Jaxpr, consts: Sequence[Any]):
  """Constants of a traced jaxpr become leading arguments (call jaxprs take no consts)."""
  return core.ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), []), list(consts)


def jvp_jaxpr(closed: core.ClosedJaxpr, nonzeros: Sequence[bool],
              instantiate: bool | Sequence[bool] = False, is_vjp: Any = "infer"):
  """The JVP of `closed` as a new jaxpr taking `(consts..., primals..., nonzero tangents...)`
  and returning `(primal outs..., nonzero tangent outs...)`.

  Args:
    instantiate: bool or one per output; True makes that output's tangent a (materialized)
      nonzero output even when it is a symbolic zero (loops need fixed carry signatures).
    is_vjp: the mode the body's rules see (`jvp_mode`); by default that of the rule calling.

  Returns:
    `(jvp_closed, consts, out_nonzeros)`.
  """
  avals = closed.in_avals
  n = len(avals)
  # the body is differentiated as the equation calling it is, unless `is_vjp` is given
  mode = _jvp_modes[0] if is_vjp == "infer" else is_vjp
  out_nz: list[bool] = []
  if isinstance(instantiate, bool):
    instantiate = [instantiate] * len(closed.out_avals)

  def fun(*args):
    it = iter(args[n:])
    tangents = [next(it) if nz else Zero(tangent_aval(a)) for a, nz in zip(avals, nonzeros)]
    p_out, t_out = jvp_flat(core.jaxpr_as_fun(closed), args[:n], tangents, mode)
    t_out = [instantiate_zeros(t) if inst and type(t) is Zero else t
             for t, inst in zip(t_out, instantiate)]
    out_nz[:] = [type(t) is not Zero for t in t_out]
    return [*p_out, *[t for t in t_out if type(t) is not Zero]]

  t_avals = [tangent_aval(a) for a, nz in zip(avals, nonzeros) if nz]
  jaxpr, consts = pe.trace_to_jaxpr(fun, [*avals, *t_avals])
  jvp_closed, consts = _closed_with_const_args(jaxpr, consts)
  return jvp_closed, consts, list(out_nz)


def ct_aval(a: Any) -> Any:
  """The aval of a cotangent of a value of aval `a` (JAX's `to_ct_aval`): its tangent aval,
  with the unreduced and reduced mesh axes of its type swapped."""
  t = tangent_aval(a)
  s = getattr(t, "_sharding", None)
  if s is None or not (s.spec.unreduced or s.spec.reduced):
    return t
  return t.update(sharding=s.update(spec=s.spec.to_ct_spec()))


def transpose_jaxpr(closed: core.ClosedJaxpr, undefined: Sequence[bool],
                    ct_nonzeros: Sequence[bool]):
  """The transpose of the linear `closed` as a new jaxpr taking `(consts..., non-linear
  args..., nonzero output cotangents...)` and returning one cotangent per linear input.

  Returns:
    `(transposed_closed, consts)`.
  """
  in_avals, out_avals = closed.in_avals, closed.out_avals
  res_avals = [a for a, u in zip(in_avals, undefined) if not u]
  nres = len(res_avals)

  def fun(*args):
    it_res, it_ct = iter(args[:nres]), iter(args[nres:])
    primals = [UndefinedPrimal(a) if u else next(it_res) for a, u in zip(in_avals, undefined)]
    cts = [next(it_ct) if nz else Zero(ct_aval(a)) for a, nz in zip(out_avals, ct_nonzeros)]
    cts_in = backward_pass(closed.jaxpr, primals, cts)
    return [instantiate_zeros(c) for c, u in zip(cts_in, undefined) if u]

  ct_avals = [ct_aval(a) for a, nz in zip(out_avals, ct_nonzeros) if nz]
  jaxpr, consts = pe.trace_to_jaxpr(fun, [*res_avals, *ct_avals])
  return _closed_with_const_args(jaxpr, consts)


# ---------------------------------------------------------------------------
# The rest of JAX's public `jax.interpreters.ad` names (for libraries written against JAX)

#: JAX's name for `add_any_p` (its primitive is also called `add_any`).
add_jaxvals_p = add_any_p


def add_jaxvals(x: Any, y: Any) -> Any:
  """`x + y` for two (co)tangents of one type, as JAX's `ad.add_jaxvals` (binds `add_any`).

  Raises:
    TypeError: if the two avals differ in shape or dtype.
  """
  return add_any_p.bind(x, y)


def deflinear2(prim: core.Primitive, transpose_rule: Callable) -> None:
  """As JAX's `ad.deflinear2`: `prim` is linear in all its arguments, its JVP applies it to
  the tangents, and `transpose_rule(ct, *args, **params)` (the linear args are
  `UndefinedPrimal`s) returns one cotangent per argument. A symbolic `Zero` cotangent gives
  zero cotangents without calling the rule.

  NB: JAX's (and stagecraft's) `deflinear` takes `transpose_rule(ct, **params)`.
  """
  def transpose(ct, *args, **params):
    if type(ct) is Zero:
      return [Zero(tangent_aval(a.aval)) if is_undefined_primal(a) else None for a in args]
    return transpose_rule(ct, *args, **params)
  deflinear_args(prim, transpose)


def get_primitive_transpose(p: core.Primitive) -> Callable:
  """The transpose rule registered for `p` (JAX's `ad.get_primitive_transpose`).

  Raises:
    NotImplementedError: if `p` has none (JAX's message).
  """
  try:
    return primitive_transposes[p]
  except KeyError as e:
    raise NotImplementedError(f"Transpose rule (for reverse-mode differentiation) for "
                              f"'{p}' not implemented") from e
