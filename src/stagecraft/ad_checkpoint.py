"""Gradient checkpointing (rematerialization): `checkpoint` / `remat`, its policies,
`checkpoint_name` and the residual report `print_saved_residuals`.

`checkpoint(f, policy=...)` stages `f` as one `checkpoint` equation carrying its jaxpr. Under
reverse-mode differentiation its partial-evaluation rule decides, for each intermediate value
of the forward pass, whether the backward pass reads it (a *residual*, kept in memory between
the passes) or recomputes it:

* policy None (JAX's `nothing_saveable`) saves nothing: the known (forward) equation computes
  only the primal outputs, and the unknown equation recomputes the forward from the primal
  inputs before the linear part.
* another policy is asked, for each forward equation whose operands are all known,
  `policy(prim, *operand_avals, **params) -> bool`: True makes its results residuals; False
  recomputes the equation inside the unknown `checkpoint` equation. The forward equations
  are inlined into the enclosing program (as JAX does), so a residual is reported as the
  output of the primitive that computed it. Calls (`jit`, nested `checkpoint`) and `scan`
  (its body, as JAX's `_scan_partial_eval_custom`: the known part runs as one `closed_call`)
  are split by the same policy; other higher-order primitives (`cond`, ...) are split by
  their own rule and the policy then decides on their forward part as one equation.

The unknown equation is again a `checkpoint` (with `differentiated=True`); with
`prevent_cse=True` its inputs go through an optimization barrier so that XLA cannot merge the
recomputation with the forward pass.

After JAX's `checkpoint` transformation (Chen et al. 2016, "Training deep nets with
sublinear memory cost", for the idea).
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import os
import sys
import sysconfig
import types
import weakref
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
import optree

from stagecraft.traceback_util import api_boundary
from stagecraft import api_util, core, dtypes, key_reuse, source_info_util, tree_util
from stagecraft.config import config
from stagecraft.core import ClosedJaxpr, Jaxpr, Literal, Var
from stagecraft.interpreters import ad, batching, calls, lowering, partial_eval as pe
from stagecraft.interpreters.calls import closed_call_p
from stagecraft.lax.control_flow.conditionals import cond_p, join_branch_residuals
from stagecraft.lax.control_flow.loops import scan_p
from stagecraft.lax.control_flow.while_op import while_p
from stagecraft.lax.callback import debug_callback_p, debug_print_p
from stagecraft.lax.elementwise import reduce_precision_p
from stagecraft.pjit import jit_p, jit_rules

__all__ = ["checkpoint", "remat", "remat_p", "checkpoint_policies", "checkpoint_name",
           "name_p", "print_saved_residuals", "saved_residuals", "everything_saveable",
           "nothing_saveable", "dots_saveable", "checkpoint_dots",
           "dots_with_no_batch_dims_saveable", "checkpoint_dots_with_no_batch_dims",
           "offload_dot_with_no_batch_dims", "save_anything_except_these_names",
           "save_any_names_but_these", "save_only_these_names", "save_from_both_policies",
           "save_and_offload_only_these_names", "Recompute", "Saveable", "Offloadable",
           "SourceInfo"]

_NS = tree_util.NAMESPACE

# ---------------------------------------------------------------------------
# What a policy may return


class _Recompute:
  """Policy answer: recompute the value in the backward pass (same as False)."""
  __slots__ = ()

  def __repr__(self):
    return "Recompute"


class _Saveable:
  """Policy answer: save the value as a residual (same as True)."""
  __slots__ = ()

  def __repr__(self):
    return "Saveable"


Recompute = _Recompute()
Saveable = _Saveable()


class Offloadable(NamedTuple):
  """Policy answer: save the value in another memory space (`src` -> `dst`). Not supported
  by stagecraft (partial evaluation raises NotImplementedError)."""
  src: str
  dst: str


# ---------------------------------------------------------------------------
# Policies: `policy(prim, *avals, **params) -> bool`


def everything_saveable(*_, **__) -> bool:
  """Saves every value the backward pass reads, as if `checkpoint` were not used."""
  return True


def nothing_saveable(*_, **__) -> bool:
  """Saves nothing: the backward pass recomputes everything from the checkpoint's inputs
  (the behaviour of `checkpoint` without a policy)."""
  return False


@dataclass(frozen=True)
class DotsSaveable:
  """Saves the results of matrix products (`dot_general`, and `conv_general_dilated` unless
  `only_if_no_batch_dims`); with `only_if_no_batch_dims`, only `dot_general`s without batch
  dimensions."""
  only_if_no_batch_dims: bool

  def __call__(self, prim, *avals, **params) -> bool:
    if self.only_if_no_batch_dims:
      if prim.name == "dot_general":
        (_, _), (lhs_batch, rhs_batch) = params["dimension_numbers"]
        return not lhs_batch and not rhs_batch
      return False
    return prim.name in ("dot_general", "conv_general_dilated")


dots_saveable = checkpoint_dots = DotsSaveable(False)
dots_with_no_batch_dims_saveable = checkpoint_dots_with_no_batch_dims = DotsSaveable(True)


@dataclass(frozen=True)
class SaveOnlyTheseNames:
  """Saves only values named (`checkpoint_name`) with one of `saveable_names`."""
  saveable_names: frozenset

  def __call__(self, prim, *avals, **params) -> bool:
    return prim is name_p and params["name"] in self.saveable_names


@dataclass(frozen=True)
class SaveAnyNamesButThese:
  """Saves only named values (`checkpoint_name`), except those named with one of `names`."""
  names: frozenset

  def __call__(self, prim, *avals, **params) -> bool:
    return prim is name_p and params["name"] not in self.names


def save_only_these_names(*names_which_can_be_saved: str) -> SaveOnlyTheseNames:
  """A policy saving only the values named (by `checkpoint_name`) with one of the names."""
  return SaveOnlyTheseNames(frozenset(names_which_can_be_saved))


def save_any_names_but_these(*names_not_to_save: str) -> SaveAnyNamesButThese:
  """A policy saving only named values (by `checkpoint_name`), except the names given."""
  return SaveAnyNamesButThese(frozenset(names_not_to_save))


def save_anything_except_these_names(*names_not_to_save: str) -> Callable[..., bool]:
  """As JAX 0.10.2: a policy that saves every value (the names are ignored, so it behaves
  as `everything_saveable`)."""
  del names_not_to_save

  def policy(*_, **__) -> bool:
    return True
  return policy


def save_from_both_policies(policy_1: Callable, policy_2: Callable) -> Callable[..., bool]:
  """A policy saving a value when either policy saves it.

  Raises (when the policy is used):
    ValueError: if either policy returns something other than a bool.
  """
  def policy(prim, *args, **params) -> bool:
    out1 = policy_1(prim, *args, **params)
    out2 = policy_2(prim, *args, **params)
    if not (isinstance(out1, bool) and isinstance(out2, bool)):
      raise ValueError(
          f"The return value of the policies should be a boolean. Got: {out1} and {out2}. "
          f"Please write a custom policy function directly, rather than using this helper "
          f"function.")
    return out1 or out2
  return policy


def offload_dot_with_no_batch_dims(offload_src: str, offload_dst: str) -> Callable:
  """JAX's policy offloading the results of `dot_general`s without batch dimensions to
  `offload_dst` memory. stagecraft saves offloaded values in device memory (on CPU, device
  memory is host memory): the values and derivatives are JAX's, the memory space is not
  changed (docs/differences.md)."""
  def policy(prim, *_, **params):
    if prim.name == "dot_general":
      (_, _), (lhs_batch, rhs_batch) = params["dimension_numbers"]
      if not lhs_batch and not rhs_batch:
        return Offloadable(src=offload_src, dst=offload_dst)
    return Recompute
  return policy


def save_and_offload_only_these_names(*, names_which_can_be_saved,
                                      names_which_can_be_offloaded, offload_src: str,
                                      offload_dst: str) -> Callable:
  """JAX's policy saving some named values and offloading others to `offload_dst` memory.
  stagecraft saves the offloaded values in device memory too (as
  `offload_dot_with_no_batch_dims`).

  Raises:
    ValueError: if a name is in both lists (as JAX).
  """
  saved = set(names_which_can_be_saved)
  offloaded = set(names_which_can_be_offloaded)
  both = saved & offloaded
  if both:
    raise ValueError(
        f"The names should be exclusive and should not intersect in "
        f"`names_which_can_be_saved` and `names_which_can_be_offloaded`. Got "
        f"names_which_can_be_saved={saved}, names_which_can_be_offloaded={offloaded} and "
        f"the intersection={both}")

  def policy(prim, *_, **params):
    if prim is name_p and params["name"] in saved:
      return Saveable
    if prim is name_p and params["name"] in offloaded:
      return Offloadable(src=offload_src, dst=offload_dst)
    return Recompute
  return policy


checkpoint_policies = types.SimpleNamespace(
    everything_saveable=everything_saveable,
    nothing_saveable=nothing_saveable,
    dots_saveable=dots_saveable,
    checkpoint_dots=checkpoint_dots,
    dots_with_no_batch_dims_saveable=dots_with_no_batch_dims_saveable,
    checkpoint_dots_with_no_batch_dims=checkpoint_dots_with_no_batch_dims,
    offload_dot_with_no_batch_dims=offload_dot_with_no_batch_dims,
    save_anything_except_these_names=save_anything_except_these_names,
    save_any_names_but_these=save_any_names_but_these,
    save_only_these_names=save_only_these_names,
    save_from_both_policies=save_from_both_policies,
    save_and_offload_only_these_names=save_and_offload_only_these_names)


def _saveable(policy: Callable, eqn: core.JaxprEqn) -> bool:
  """Asks `policy` whether `eqn`'s results are saved (True) or recomputed (False)."""
  out = policy(eqn.primitive, *[x.aval for x in eqn.invars], **eqn.params)
  if isinstance(out, bool):
    return out
  if out is Saveable or out is Recompute:
    return out is Saveable
  if isinstance(out, Offloadable):   # NB: saved in device memory (docs/differences.md)
    return True
  raise TypeError(
      f"Value returned by a remat policy should be a bool or `ad_checkpoint.Recompute`, "
      f"`ad_checkpoint.Saveable` or `ad_checkpoint.Offloadable(...)`. Got {out} of type "
      f"{type(out)}.")


# ---------------------------------------------------------------------------
# checkpoint_name: the `name` primitive (the identity, seen by policies)

name_p = core.Primitive("name")
name_p.def_abstract_eval(lambda x, *, name: x)
name_p.def_impl(lambda x, *, name: x)
lowering.register_lowering(name_p, lambda ctx, x, *, name: [x])
# The tangent passes through unnamed (as JAX): policies see the primal value only.
ad.primitive_jvps[name_p] = lambda primals, tangents, *, name: (
    name_p.bind(primals[0], name=name), tangents[0])
ad.primitive_transposes[name_p] = lambda ct, x, *, name: [ct]
batching.defvectorized(name_p)


def checkpoint_name(x: Any, name: str) -> Any:
  """Names the arrays of `x` for checkpoint policies (`save_only_these_names`, ...).

  Args:
    x: an array or a pytree of arrays.
    name: a string.

  Returns:
    `x` unchanged (same structure, shapes and dtypes); inside a `checkpoint`, each leaf is
    the output of a `name[name=...]` equation that policies can select.

  Raises:
    TypeError: if `name` is not a string (JAX accepts it here and fails later, when the
      jaxpr is printed).
  """
  if not isinstance(name, str):
    raise TypeError(f"checkpoint_name: name must be a str, got {name!r} of type "
                    f"{type(name).__name__}.")
  return tree_util.tree_map(lambda leaf: name_p.bind(leaf, name=name), x)


# ---------------------------------------------------------------------------
# The checkpoint primitive

remat_p = core.Primitive("remat2")   # JAX 0.10.2's name
remat_p.multiple_results = True
# NB: `prevent_cse` is a bool or, as JAX's, one bool per operand; a derived call's new
# operands (tangents, residuals, cotangents, constants) get True, as in JAX's rules.
remat_p.operand_params = (("prevent_cse", True, False),)


def _with_cse(params: dict, in_map: Sequence) -> dict:
  """`params` for a derived checkpoint call whose operand k is the original call's operand
  `in_map[k]` (None: a new operand): a per-operand `prevent_cse` follows its operands."""
  cse = params.get("prevent_cse")
  if not isinstance(cse, tuple):
    return params
  return {**params, "prevent_cse": tuple(True if i is None else cse[i] for i in in_map)}


def _remat_lowering(ctx, *args, jaxpr: ClosedJaxpr, prevent_cse: bool | tuple,
                    differentiated: bool, policy):
  # `prevent_cse`: a bool, or (JAX's per-argument form) one bool per operand
  flags = ((bool(prevent_cse),) * len(args) if not isinstance(prevent_cse, tuple)
           else prevent_cse if len(prevent_cse) == len(args)
           else (any(prevent_cse),) * len(args))
  if differentiated and any(flags):
    idx = [i for i, f in enumerate(flags) if f]
    out = ctx.op("stablehlo.optimization_barrier", [args[i] for i in idx],
                 result_avals=[ctx.avals_in[i] for i in idx],
                 operand_avals=[ctx.avals_in[i] for i in idx])
    args = list(args)
    for i, r in zip(idx, out):
      args[i] = r
  return lowering.lower_call(ctx, "checkpoint", jaxpr, args)


#: Effectful debugging primitives that the staged part repeats (see `_policy_split`).
_debug_prims = (debug_callback_p, debug_print_p)


class _Split(NamedTuple):
  """A jaxpr split by a policy (see `_policy_split`)."""
  known: Jaxpr        # known invars -> (known outputs, residuals)
  staged: Jaxpr       # (residuals, every invar) -> outputs marked in `out_inst`
  out_unknowns: list[bool]
  out_inst: list[bool]   # outputs the staged jaxpr computes (unknown or recomputed)
  num_res: int


def _policy_split(jaxpr: Jaxpr, unknowns: Sequence[bool], policy: Callable,
                  ensure_out_unknowns: Sequence[bool] | None = None,
                  ensure_out_inst: bool = False) -> _Split:
  """Splits `jaxpr` into a known part and a staged part by `policy` (JAX's
  `partial_eval_jaxpr_custom`; `ensure_out_unknowns` marks outputs unknown, and
  `ensure_out_inst` makes the staged part return every output, a known one it does not
  compute being a residual).

  Each variable is (unknown, available-to-the-staged-side). The invars are all available
  to the staged side; constvars (of a jit body) are known and both parts keep them. A
  known equation the policy saves stays in the known part only and its results, where the
  staged part reads them, become residuals; one it does not save is also copied to the
  staged part (recomputed there).
  """
  env: dict[Var, tuple[bool, bool]] = {v: (bool(u), True)
                                       for v, u in zip(jaxpr.invars, unknowns)}
  env.update((v, (False, True)) for v in jaxpr.constvars)
  residuals: dict[Var, None] = {}     # an ordered set
  known_eqns: list[core.JaxprEqn] = []
  staged_eqns: list[core.JaxprEqn] = []

  def read(x):
    return env[x] if type(x) is Var else (False, True)

  def stage(eqn):
    for x in eqn.invars:
      if type(x) is Var and not env[x][1]:
        residuals[x] = None
    staged_eqns.append(eqn)

  def known(eqn):
    known_eqns.append(eqn)
    if _saveable(policy, eqn):
      env.update((v, (False, False)) for v in eqn.outvars)
      if eqn.primitive in _debug_prims and all(read(x)[1] for x in eqn.invars):
        # As JAX's rule for debug callbacks: one the policy saves runs again in the staged
        # part when every operand is there anyway (recomputed), so that the user sees the
        # recomputation; it never makes a residual of its own.
        staged_eqns.append(eqn)
    else:
      stage(eqn)
      env.update((v, (False, True)) for v in eqn.outvars)

  for eqn in jaxpr.eqns:
    unks = [read(x)[0] for x in eqn.invars]
    prim = eqn.primitive
    # Calls (their params need no change but the jaxpr, and `differentiated` for
    # checkpoint) are split by the same policy, as JAX's partial_eval_jaxpr_custom rules do.
    if prim is jit_p or prim is remat_p:
      k_eqn, s_eqns, out_u, out_i = _split_call(eqn, unks, policy)
      if k_eqn is not None:
        known_eqns.append(k_eqn)
        env.update((v, (False, False)) for v in k_eqn.outvars)
      for s_eqn in s_eqns:
        stage(s_eqn)
      env.update((v, (u, i)) for v, u, i in zip(eqn.outvars, out_u, out_i))
    elif (prim is scan_p and _scan_splittable(eqn)) or prim in _split_rules:
      # As JAX's rules for scan, cond and while, also when every operand is known: the
      # policy decides inside the body or branches (a while saves nothing).
      split_rule = _split_scan if prim is scan_p else _split_rules[prim]
      k_eqn, s_eqn, out_u, res = split_rule(eqn, unks, [read(x)[1] for x in eqn.invars],
                                            policy)
      if k_eqn is not None:
        known_eqns.append(k_eqn)
      residuals.update((r, None) for r in res)
      staged_eqns.append(s_eqn)
      env.update((v, (u, True)) for v, u in zip(eqn.outvars, out_u))
    elif not any(unks):
      known(eqn)
    else:
      rule = ad.partial_eval_rules.get(prim)
      if rule is None:
        stage(eqn)
        env.update((v, (True, True)) for v in eqn.outvars)
        continue
      k_eqns, u_eqn, out_u = rule(eqn, unks)
      if k_eqns is None:
        k_eqns = []
      elif not isinstance(k_eqns, list):
        k_eqns = [k_eqns]
      for k in k_eqns:
        known(k)
      if u_eqn is not None:
        stage(u_eqn)
        env.update((v, (True, True)) for v in u_eqn.outvars)
  out = [read(x) for x in jaxpr.outvars]
  if ensure_out_inst:
    for x, (_, i) in zip(jaxpr.outvars, out):
      if type(x) is Var and not i:
        residuals[x] = None
  out_unknowns = [u for u, _ in out]
  if ensure_out_unknowns is not None:
    out_unknowns = [u or bool(e) for u, e in zip(out_unknowns, ensure_out_unknowns)]
  out_inst = [i or ensure_out_inst for _, i in out]
  res = list(residuals)
  known_j = Jaxpr(jaxpr.constvars, [v for v, u in zip(jaxpr.invars, unknowns) if not u],
                  [*[x for x, u in zip(jaxpr.outvars, out_unknowns) if not u], *res],
                  known_eqns)
  staged_j = Jaxpr(jaxpr.constvars, [*res, *jaxpr.invars],
                   [x for x, i in zip(jaxpr.outvars, out_inst) if i], staged_eqns)
  return _Split(known_j, staged_j, out_unknowns, out_inst, len(res))


def _scan_splittable(eqn) -> bool:
  """Whether `_split_scan` handles `eqn`: a scan whose body closes over no constants and has
  no effects (the others go through scan's partial-evaluation rule, and the policy decides
  on their known part as one equation)."""
  body = eqn.params["jaxpr"]
  return not body.consts and not body.jaxpr.constvars and not body.jaxpr.effects


def _split_scan(eqn, unknowns, inst_in, policy):
  """JAX's `_scan_partial_eval_custom`: the body is split by `policy` (to a fixpoint on the
  carries); the known side is one `closed_call` that computes the loop-invariant residuals
  once and runs a scan of the known body (stacking the per-iteration residuals), the staged
  side a scan of the staged body over every operand and the residuals.

  Returns:
    `(known_eqn, staged_eqn, out_unknowns, residuals)`: the residuals in JAX's order
    (operands not yet available to the staged side, loop-invariant, per-iteration).
  """
  p = eqn.params
  body = p["jaxpr"].jaxpr
  nc, nk = p["num_consts"], p["num_carry"]
  ny = len(body.outvars) - nk
  const_uk, carry_uk = list(unknowns[:nc]), list(unknowns[nc:nc + nk])
  xs_uk = list(unknowns[nc + nk:])
  for _ in range(1 + nk):
    unks = [*const_uk, *carry_uk, *xs_uk]
    split = _policy_split(body, unks, policy, ensure_out_unknowns=[*carry_uk, *[False] * ny],
                          ensure_out_inst=True)
    carry_out = split.out_unknowns[:nk]
    if carry_out == carry_uk:
      break
    carry_uk = [a or b for a, b in zip(carry_uk, carry_out)]
  unks_out, num_res = split.out_unknowns, split.num_res
  staged = split.staged
  res_in, body_in = staged.invars[:num_res], staged.invars[num_res:]
  new_inst = [x for x, i in zip(eqn.invars, inst_in) if type(x) is Var and not i]
  n_const_k = nc - sum(const_uk)
  n_loop_k = (nk - sum(carry_uk)) + (len(xs_uk) - sum(xs_uk))
  n_known_out = len(unks_out) - sum(unks_out)
  # Loop-invariant residuals are computed once, before the known loop: partial evaluation of
  # the known body with its constants known.
  hoist, loop, _, dep = ad.partial_eval_jaxpr(
      split.known, [False] * n_const_k + [True] * n_loop_k,
      [True] * n_known_out + [False] * num_res)
  loop_dep_res = dep[n_known_out:]
  int_res_in = [v for v, d in zip(res_in, loop_dep_res) if not d]
  ext_res_in = [v for v, d in zip(res_in, loop_dep_res) if d]
  # NB: variables of its own, as JAX's split builds each side anew (both sides print)
  staged_j = calls.fresh_jaxpr(staged.replace(invars=[*int_res_in, *body_in, *ext_res_in]))
  length = p["length"]
  int_res = [Var(v.aval) for v in int_res_in]
  ext_res = [Var(v.aval.update(shape=(length, *v.aval.shape))) for v in ext_res_in]
  ins_known = [x for x, u in zip(eqn.invars, [*const_uk, *carry_uk, *xs_uk]) if not u]
  n_int = len(int_res)
  params_known = {**p, "jaxpr": ClosedJaxpr(loop, []), "num_carry": nk - sum(carry_uk)}

  def known(*ins):
    consts, ins_lp = ins[:n_const_k], ins[n_const_k:]
    out_hoist = core.eval_jaxpr(hoist, [], *consts)
    int_vals, consts_lp = out_hoist[:n_int], out_hoist[n_int:]
    out_loop = scan_p.bind(*consts_lp, *ins_lp,
                           **{**params_known, "num_consts": len(consts_lp)})
    return [*int_vals, *out_loop]
  call_jaxpr, call_consts = pe.trace_to_jaxpr(known, [x.aval for x in ins_known])
  out_known = [v for v, u in zip(eqn.outvars, unks_out) if not u]
  known_eqn = core.JaxprEqn(ins_known, [*int_res, *out_known, *ext_res], closed_call_p,
                            {"call_jaxpr": ClosedJaxpr(call_jaxpr, call_consts)},
                            eqn.source_info)
  staged_eqn = core.JaxprEqn(
      [*int_res, *eqn.invars, *ext_res], list(eqn.outvars), scan_p,
      {**p, "jaxpr": ClosedJaxpr(staged_j, []), "num_consts": n_int + nc}, eqn.source_info)
  return known_eqn, staged_eqn, unks_out, [*new_inst, *int_res, *ext_res]


def _split_cond(eqn, unknowns, inst_in, policy):
  """JAX's `_cond_partial_eval_custom`: each branch is split by `policy` (an output is
  unknown if it is in any branch); the known side is a cond computing the known outputs and
  the branches' residuals (sharing slots by type), the staged side a cond reading the index,
  the residuals and every operand, computing every output. An unknown index stages the
  whole equation.

  Returns:
    `(known_eqn | None, staged_eqn, out_unknowns, residuals)`.
  """
  index_uk, *ops_uk = unknowns
  new_inst = [x for x, i in zip(eqn.invars, inst_in) if type(x) is Var and not i]
  if index_uk:
    return None, eqn, [True] * len(eqn.outvars), new_inst
  branches = eqn.params["branches"]
  out_uk = [False] * len(eqn.outvars)
  for br in branches:
    split = _policy_split(br.jaxpr, ops_uk, policy, ensure_out_inst=True)
    out_uk = [a or b for a, b in zip(out_uk, split.out_unknowns)]
  splits = [_policy_split(br.jaxpr, ops_uk, policy, ensure_out_unknowns=out_uk,
                          ensure_out_inst=True) for br in branches]
  known_in = [a for a, u in zip(branches[0].in_avals, ops_uk) if not u]
  known_br, staged_js, res_avals = join_branch_residuals(
      [(ClosedJaxpr(s.known, br.consts), s.staged, s.num_res)
       for s, br in zip(splits, branches)], known_in)
  res_vars = [Var(a) for a in res_avals]
  index, *ops = eqn.invars
  known_eqn = core.JaxprEqn(
      [index, *[v for v, u in zip(ops, ops_uk) if not u]],
      [*[v for v, u in zip(eqn.outvars, out_uk) if not u], *res_vars], cond_p,
      {**eqn.params, "branches": known_br}, eqn.source_info)
  staged_eqn = core.JaxprEqn(
      [index, *res_vars, *ops], list(eqn.outvars), cond_p,
      {**eqn.params, "branches": tuple(ClosedJaxpr(j, br.consts)
                                       for j, br in zip(staged_js, branches))},
      eqn.source_info)
  return known_eqn, staged_eqn, out_uk, [*new_inst, *res_vars]


def _split_while(eqn, unknowns, inst_in, policy):
  """JAX's `_while_partial_eval_custom`: a while loop saves no residuals (their number is
  not static), so the known side is a while computing the known carries (the body split with
  nothing saved, to a fixpoint on the carries) and the staged side the whole equation again.

  Returns:
    `(known_eqn | None, staged_eqn, out_unknowns, residuals)`.
  """
  del policy
  p = eqn.params
  cond_j, body_j = p["cond_jaxpr"], p["body_jaxpr"]
  cn, bn = p["cond_nconsts"], p["body_nconsts"]
  cond_consts_uk, body_consts_uk = list(unknowns[:cn]), list(unknowns[cn:cn + bn])
  carry_uk = list(unknowns[cn + bn:])
  new_inst = [x for x, i in zip(eqn.invars, inst_in) if type(x) is Var and not i]
  for _ in range(1 + len(carry_uk)):
    split = _policy_split(body_j.jaxpr, [*body_consts_uk, *carry_uk], nothing_saveable,
                          ensure_out_unknowns=carry_uk, ensure_out_inst=True)
    if split.out_unknowns == carry_uk:
      break
    carry_uk = [a or b for a, b in zip(carry_uk, split.out_unknowns)]
  body_known = split.known
  cond_split = _policy_split(cond_j.jaxpr, [*cond_consts_uk, *carry_uk], nothing_saveable,
                             ensure_out_inst=True)
  if cond_split.out_unknowns[0]:
    return None, eqn, [True] * len(carry_uk), new_inst
  unks_in = [*cond_consts_uk, *body_consts_uk, *carry_uk]
  known_eqn = core.JaxprEqn(
      [v for v, u in zip(eqn.invars, unks_in) if not u],
      [v for v, u in zip(eqn.outvars, carry_uk) if not u], while_p,
      {**p, "cond_jaxpr": ClosedJaxpr(cond_split.known, cond_j.consts),
       "body_jaxpr": ClosedJaxpr(body_known, body_j.consts),
       "cond_nconsts": cn - sum(cond_consts_uk), "body_nconsts": bn - sum(body_consts_uk)},
      eqn.source_info)
  return known_eqn, eqn, carry_uk, new_inst


_split_rules = {cond_p: _split_cond, while_p: _split_while}


def _split_call(eqn, unknowns, policy):
  """A `jit` or `checkpoint` equation inside a checkpointed function, split by the outer
  policy: a known call computing the known results and the residuals; on the staged side,
  a call recomputing the known results the staged side has (it reads no unknown value, so
  transposition evaluates it forward) and a call computing the unknown results. Both read
  the residuals and the operands they need.

  Returns:
    `(known_eqn | None, staged_eqns, out_unknowns, out_inst)`.
  """
  closed = eqn.params["jaxpr"]
  split = _policy_split(closed.jaxpr, unknowns, policy)
  nres = split.num_res
  staged_outs = [(u, v, j) for j, (v, u, i) in enumerate(zip(eqn.outvars, split.out_unknowns,
                                                              split.out_inst)) if i]
  parts = []
  used_res = [False] * nres
  # As JAX's (`closed_call_partial_eval_custom_rule`), a jit has one staged call computing
  # the recomputed known results and the unknown ones (the transpose of the checkpoint
  # splits it again, by partial evaluation); a checkpoint has one call for each.
  if eqn.primitive is jit_p:
    groups = [[True] * len(staged_outs)] if staged_outs else []
  else:   # recomputed known results, then unknown results
    groups = [[u is want for u, _, _ in staged_outs] for want in (False, True)]
  for keep in groups:
    if not any(keep):
      continue
    j, used = pe.dce_jaxpr(split.staged, keep)
    used_res = [a or b for a, b in zip(used_res, used[:nres])]
    parts.append((j, used, [(v, i) for (_, v, i), k in zip(staged_outs, keep) if k]))
  n_known_out = len(split.known.outvars) - nres
  known, _ = pe.dce_jaxpr(split.known, [True] * n_known_out + used_res, instantiate=True)
  res_vars = [Var(v.aval) if u else None for v, u in zip(split.staged.invars[:nres], used_res)]
  derived = {"differentiated": True} if eqn.primitive is remat_p else {}
  k_outs = [*[v for v, u in zip(eqn.outvars, split.out_unknowns) if not u],
            *[v for v in res_vars if v is not None]]
  def params(what, jaxpr, in_map, out_map):
    if eqn.primitive is jit_p:   # NB: its per-operand and per-result params follow them
      return jit_rules.derived_params(eqn.params, what, jaxpr, in_map, out_map)
    return _with_cse({**eqn.params, **(derived if what == "unknown" else {}), "jaxpr": jaxpr},
                     in_map)

  k_eqn = None
  if k_outs:
    k_eqn = core.JaxprEqn(
        [v for v, u in zip(eqn.invars, unknowns) if not u], k_outs, eqn.primitive,
        params("known", _closed(known, closed.consts),
               [i for i, u in enumerate(unknowns) if not u],
               [*[j for j, u in enumerate(split.out_unknowns) if not u],
                *[None for v in res_vars if v is not None]]),
        eqn.source_info)
  s_eqns = []
  for j, used, outs in parts:
    in_map = [*[None] * nres, *range(len(eqn.invars))]
    s_eqns.append(core.JaxprEqn(
        [v for v, u in zip([*res_vars, *eqn.invars], used) if u], [v for v, _ in outs],
        eqn.primitive,
        params("unknown", _closed(j, closed.consts), [i for i, u in zip(in_map, used) if u],
               [i for _, i in outs]),
        eqn.source_info))
  return k_eqn, s_eqns, split.out_unknowns, split.out_inst


def _closed(jaxpr: Jaxpr, consts: list) -> ClosedJaxpr:
  """`jaxpr` closed over those of `consts` (a jit body's) it still reads."""
  return ClosedJaxpr(*pe.prune_constvars(jaxpr, consts))


_split_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _round_residuals(known: Jaxpr, num_res: int) -> Jaxpr:
  """Rounds each floating residual that the forward pass also reads to its own dtype
  (`reduce_precision` with the dtype's exponent and mantissa bits), as JAX does: the
  forward uses and the saved value are then the same rounded value, even where XLA computes
  the producer in excess precision."""
  res = known.outvars[len(known.outvars) - num_res:]
  read = {x for e in known.eqns for x in e.invars if type(x) is Var}
  invars, eqns = list(known.invars), list(known.eqns)
  for v in res:
    if type(v) is not Var or v not in read or not dtypes.is_float(v.aval.dtype):
      continue
    info = dtypes.finfo(v.aval.dtype)
    params = {"exponent_bits": int(info.nexp), "mantissa_bits": int(info.nmant)}
    fresh = Var(v.aval)
    if v in invars:
      invars[invars.index(v)] = fresh
      eqns.insert(0, core.JaxprEqn([fresh], [v], reduce_precision_p, params))
      continue
    i, eqn = next((i, e) for i, e in enumerate(eqns) if v in e.outvars)
    if eqn.primitive is reduce_precision_p and eqn.params == params:
      continue
    eqns[i] = eqn.replace(outvars=[fresh if o is v else o for o in eqn.outvars])
    eqns.insert(i + 1, core.JaxprEqn([fresh], [v], reduce_precision_p, params,
                                     eqn.source_info))
  return known.replace(invars=invars, eqns=eqns)


def _top_split(closed: ClosedJaxpr, unknowns: tuple, policy):
  """The policy split of a checkpoint's body for its partial evaluation: the known jaxpr
  (known invars -> known outputs, residuals) and the staged jaxpr (used residuals, used
  invars -> unknown outputs), cached per (body, unknowns, policy)."""
  def make():
    split = _policy_split(closed.jaxpr, unknowns, policy)
    nres = split.num_res
    keep = [u for u, i in zip(split.out_unknowns, split.out_inst) if i]
    staged, used = pe.dce_jaxpr(split.staged, keep)
    used_res, used_in = used[:nres], used[nres:]
    n_known_out = len(split.known.outvars) - nres
    known, _ = pe.dce_jaxpr(split.known, [True] * n_known_out + used_res, instantiate=True)
    known = _round_residuals(known, len(known.outvars) - n_known_out)
    return known, ClosedJaxpr(staged, []), split.out_unknowns, used_in
  try:
    hash(policy)
  except TypeError:
    return make()
  return core.memo_on_jaxpr(_split_cache, closed, (unknowns, policy), make)


def _remat_partial_eval(eqn, unknowns):
  policy = eqn.params["policy"] or nothing_saveable
  closed = eqn.params["jaxpr"]
  disallowed = [e for e in closed.jaxpr.effects if getattr(e, "io", None)]
  if disallowed:
    # NB: as JAX's: recomputing the body in the backward pass would run its IO again
    raise NotImplementedError(
        f"Effects not supported in partial-eval of `checkpoint`/`remat`: {disallowed}")
  known, staged, out_unknowns, used_in = _top_split(closed, tuple(unknowns), policy)
  # The known part is inlined into the enclosing program (JAX evaluates it there), with
  # fresh variables: its residuals are then the outputs of the primitives computing them.
  n_known_out = len(out_unknowns) - sum(out_unknowns)
  sub: dict[Var, Any] = dict(zip(known.invars,
                                 [v for v, u in zip(eqn.invars, unknowns) if not u]))
  outer_known_outs = [v for v, u in zip(eqn.outvars, out_unknowns) if not u]
  # A known output computed by an equation is bound directly to the enclosing variable.
  bind_to: dict[Var, Var] = {}
  for x, o in zip(known.outvars[:n_known_out], outer_known_outs):
    if type(x) is Var and x not in sub and x not in bind_to:
      bind_to[x] = o
  known_eqns = []
  for e in known.eqns:
    outs = []
    for v in e.outvars:
      nv = bind_to.get(v) or Var(v.aval)
      sub[v] = nv
      outs.append(nv)
    known_eqns.append(e.replace(
        invars=[sub[x] if type(x) is Var else x for x in e.invars], outvars=outs))
  # Known outputs not computed by an equation of their own (an operand passed through, a
  # literal, a value returned twice) are forwarded by a trivial call.
  fwd_in, fwd_out = [], []
  for x, o in zip(known.outvars[:n_known_out], outer_known_outs):
    if not (type(x) is Var and bind_to.get(x) is o):
      fwd_in.append(sub[x] if type(x) is Var else x)
      fwd_out.append(o)
  if fwd_out:
    ins = [Var(o.aval) for o in fwd_out]
    known_eqns.append(core.JaxprEqn(
        fwd_in, fwd_out, remat_p,
        _with_cse({**eqn.params, "jaxpr": ClosedJaxpr(Jaxpr([], ins, ins, []), [])},
                  [None] * len(fwd_in)),
        eqn.source_info))
  unknown_eqn = None
  if any(out_unknowns):
    res = [sub[x] for x in known.outvars[n_known_out:]]
    unknown_eqn = core.JaxprEqn(
        [*res, *[v for v, u in zip(eqn.invars, used_in) if u]],
        [v for v, u in zip(eqn.outvars, out_unknowns) if u], remat_p,
        _with_cse({**eqn.params, "jaxpr": staged, "differentiated": True},
                  [*[None] * len(res), *[i for i, u in enumerate(used_in) if u]]),
        eqn.source_info)
  return known_eqns, unknown_eqn, out_unknowns


core.def_closed_call(remat_p, "jaxpr")
lowering.register_lowering(remat_p, _remat_lowering)
# NB: as JAX's, the JVP of a checkpoint is a checkpoint of the JVP jaxpr with the same
# params; partial evaluation marks the staged (recomputing) side `differentiated`, whose
# lowering keeps the recomputation from being merged back.
calls.CallRules(remat_p, "jaxpr", lambda params, what: params, forward_jvp=True).register(
    partial_eval=False, dce=False)
ad.partial_eval_rules[remat_p] = _remat_partial_eval
ad.partial_eval_when_known.add(remat_p)

_transpose_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _remat_transpose_jaxpr(closed: ClosedJaxpr, undefined: tuple, ct_nonzeros: tuple):
  """JAX's `remat_transpose`: the transposed body takes (the non-linear operands, the
  nonzero output cotangents) and returns one cotangent per linear operand. The body is
  first partially evaluated with its non-linear operands known (what reads only them,
  the recomputed forward pass, is bound in the transposed body; a `jit` reading both is
  split there as JAX's `_pjit_partial_eval` splits it) and the rest transposed.

  Returns:
    `(transposed_closed, consts)`: the closed jaxpr takes `consts` first.
  """
  in_avals, out_avals = closed.in_avals, closed.out_avals
  res_avals = [a for a, u in zip(in_avals, undefined) if not u]
  nres = len(res_avals)

  def fun(*args):
    it_res, it_ct = iter(args[:nres]), iter(args[nres:])
    trace = ad.PartialEvalTrace(core.current_trace(), returns_consts=True)
    try:
      ins = [trace.new_arg(a) if u else next(it_res) for a, u in zip(in_avals, undefined)]
      with core.set_current_trace(trace):
        outs = core.eval_jaxpr(closed.jaxpr, closed.consts, *ins)
        lin, consts = trace.to_jaxpr(outs)
    finally:
      trace.invalidate()
    cts = [next(it_ct) if nz else ad.Zero(ad.tangent_aval(a))
           for a, nz in zip(out_avals, ct_nonzeros)]
    cts_in = ad.backward_pass(lin, [ad.UndefinedPrimal(v.aval) for v in lin.invars], cts,
                              consts=list(consts))
    return [ad.instantiate_zeros(c) for c in cts_in]

  ct_avals = [ad.tangent_aval(a) for a, nz in zip(out_avals, ct_nonzeros) if nz]
  jaxpr, consts = pe.trace_to_jaxpr(fun, [*res_avals, *ct_avals])
  return ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), []), list(consts)


def _remat_transpose(cts, *args, jaxpr: ClosedJaxpr, **params):
  undefined = tuple(ad.is_undefined_primal(a) for a in args)
  ct_nonzeros = tuple(type(c) is not ad.Zero for c in cts)
  t_closed, consts = core.memo_on_jaxpr(
      _transpose_cache, jaxpr, (undefined, ct_nonzeros),
      lambda: _remat_transpose_jaxpr(jaxpr, undefined, ct_nonzeros))
  in_map = [*[None] * len(consts), *[i for i, u in enumerate(undefined) if not u],
            *[None for c in cts if type(c) is not ad.Zero]]
  outs = remat_p.bind(*consts, *[a for a, u in zip(args, undefined) if not u],
                      *[c for c in cts if type(c) is not ad.Zero],
                      **_with_cse({**params, "jaxpr": t_closed}, in_map))
  it = iter(outs)
  return [next(it) if u else None for u in undefined]


ad.primitive_transposes[remat_p] = _remat_transpose
# Printed as JAX prints it: params sorted by name, a policy by its str (addresses masked).
core.pp_eqn_rules[remat_p] = lambda eqn, context: sorted(
    {**eqn.params, "policy": core.pp_masked_str(eqn.params["policy"])}.items())


class _Deprecated:
  """The default of `checkpoint`'s removed `concrete` argument (JAX's DeprecatedArg)."""
  __slots__ = ()

  def __repr__(self):
    return "Deprecated"


_DEPRECATED = _Deprecated()


def checkpoint(fun: Callable, *, prevent_cse: bool | Sequence[bool] = True,
               policy: Callable | None = None, static_argnums: int | Sequence[int] = (),
               static_argnames: str | Sequence[str] = (),
               concrete: Any = _DEPRECATED) -> Callable:
  """Makes `fun` recompute its intermediate values in the backward pass instead of storing
  them (gradient checkpointing / rematerialization), as JAX's `checkpoint`.

  Args:
    fun: a function of arrays (pytrees) returning arrays (pytrees).
    prevent_cse: keep XLA from merging the recomputation with the forward computation (an
      optimization barrier on the recomputation's inputs).
    policy: None (save nothing) or a callable `policy(prim, *avals, **params) -> bool`
      deciding which intermediate values are saved for the backward pass (True) instead of
      recomputed; see `checkpoint_policies`.
    static_argnums: positions of arguments that are Python values, not arrays.
    static_argnames: accepted, and (as in JAX 0.10.2, whose checkpoint reads it only in
      its experimental `jax_remat3` mode) not used: keyword arguments are traced.
    concrete: removed in JAX 0.10; passing it raises JAX's NotImplementedError.

  Returns:
    A function with `fun`'s signature and results whose derivatives recompute `fun`'s
    intermediate values except those the policy saves.

  Raises:
    TypeError: for a policy that is not callable, a prevent_cse that is not a bool or a
      sequence of bools; for array-like static arguments that are tracers, or non-array
      leaves.
    NotImplementedError: when `concrete` is given.
  """
  if concrete is not _DEPRECATED:
    raise NotImplementedError(
        "The `concrete` option to `jax.checkpoint` was deprecated in JAX v0.8.2, and removed "
        "in JAX v0.10.0. In its place please use `static_argnums`; for details refer to "
        "https://docs.jax.dev/en/latest/jep/11830-new-remat-checkpoint.html.")
  if isinstance(prevent_cse, Sequence):   # JAX's per-argument flags (a prefix of the args)
    prevent_cse = tuple(prevent_cse)
  elif not isinstance(prevent_cse, (bool, np.bool_)):
    raise TypeError(f"prevent_cse must be a bool or tuple of bools, got "
                    f"type(prevent_cse)={type(prevent_cse)}")
  else:
    prevent_cse = bool(prevent_cse)
  if policy is not None and not callable(policy):
    raise TypeError(
        f"checkpoint: policy must be None or a callable `policy(prim, *avals, **params) -> "
        f"bool` (for example checkpoint_policies.dots_saveable), got {policy!r} of type "
        f"{type(policy).__name__}.")
  static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

  @functools.wraps(fun)
  @api_boundary
  def fun_remat(*args, **kwargs):
    nargs = len(args)
    st = {i % nargs for i in static if -nargs <= i < nargs}
    # NB: eagerly too the function is traced (its non-static arguments are tracers, as in
    # JAX: flax's remat tests check it) and its jaxpr evaluated
    dyn = [a for i, a in enumerate(args) if i not in st]
    leaves, in_tree = optree.tree_flatten((dyn, kwargs), none_is_leaf=False, namespace=_NS)
    avals = [core.get_aval(x) for x in leaves]
    closed, consts, out_tree = _trace_checkpointed(
        fun, args, nargs, frozenset(st), in_tree, avals)

    cse = prevent_cse
    if isinstance(cse, tuple):   # as JAX's: False for the constants, then one per leaf
      cse_args = (tuple(dyn), kwargs) if kwargs else tuple(dyn)
      cse = (False,) * len(consts) + tuple(tree_util.broadcast_prefix(cse, cse_args))

    def run():
      outs = remat_p.bind(*consts, *leaves, jaxpr=closed, prevent_cse=cse,
                          differentiated=False, policy=policy)
      return tree_util.tree_unflatten(out_tree, outs)

    body_keys = _body_keys.get(closed) if key_reuse.enabled() else None
    if body_keys is None:
      return run()
    return key_reuse.call(body_keys, "checkpoint", tree_util.tree_leaves((dyn, kwargs)), run,
                          tree_util.tree_leaves, offset=len(consts))

  return fun_remat


def remat(fun: Callable, *, prevent_cse: bool = True, policy: Callable | None = None,
          static_argnums: int | Sequence[int] = (), concrete: Any = _DEPRECATED) -> Callable:
  """JAX's other name of `checkpoint` (its parameters, without `static_argnames`)."""
  return checkpoint(fun, prevent_cse=prevent_cse, policy=policy,
                    static_argnums=static_argnums, concrete=concrete)

#: The traces of checkpointed functions, per function while it lives: {fun: {key: (jaxpr,
#: consts, out_tree)}}, as JAX's `_trace_to_jaxpr` cache (keyed on the function, not on
#: the `checkpoint` wrapper or its policy).
_trace_cache: "weakref.WeakKeyDictionary[Callable, dict]" = weakref.WeakKeyDictionary()
#: With key reuse checking on: what each traced body does with typed keys.
_body_keys: "weakref.WeakKeyDictionary[ClosedJaxpr, key_reuse.BodyKeys]" = (
    weakref.WeakKeyDictionary())


def _check_out(fun: Callable, leaves: list, tree: Any) -> None:
  """JAX's TypeError for an output of a checkpointed function that is not an array."""
  api_util.check_out_leaves(leaves, tree, source_info_util.fun_name(fun), "checkpoint",
                            source_info_util.fun_source_info(fun))


def _trace_checkpointed(fun: Callable, args: tuple, nargs: int, static: frozenset,
                        in_tree, avals: list) -> tuple[ClosedJaxpr, list, Any]:
  """The jaxpr of `fun` at `avals` (the static arguments fixed), its constants and output
  tree. Cached per function, argument structure, types, static values and configuration,
  as JAX caches them: calls of a function checkpointed again (another policy) reuse its
  trace, unless a constant is a tracer (the trace then belongs to an outer
  transformation) or a static argument is unhashable."""
  try:
    statics = tuple((i, args[i]) for i in sorted(static))
    key = (in_tree, tuple(avals), statics, config.state_key)
    hash(key)
    per_fun = _trace_cache.get(fun)
  except TypeError:   # an unhashable static argument, or `fun` not weakly referenceable
    key = per_fun = None
  if per_fun is not None and key in per_fun:
    return per_fun[key]
  store: dict = {}
  check_keys = key_reuse.enabled()

  def flat(*xs):
    with key_reuse.scope() if check_keys else contextlib.nullcontext() as sc:
      d, kw = tree_util.tree_unflatten(in_tree, xs)
      it = iter(d)
      full = [args[i] if i in static else next(it) for i in range(nargs)]
      out = fun(*full, **kw)
      if check_keys:   # the keys of `d`/`kw` were made fresh for this trace
        store["keys"] = key_reuse.BodyKeys(
            key_reuse.body_signature(tree_util.tree_leaves((d, kw)), tree_util.tree_leaves(out)),
            ())
    if check_keys:
      store["keys"] = store["keys"]._replace(outer=tuple(sc.consumed_outer()))
    out_leaves, store["tree"] = optree.tree_flatten(out, none_is_leaf=False, namespace=_NS)
    _check_out(fun, out_leaves, store["tree"])
    return out_leaves

  jaxpr, consts = pe.trace_to_jaxpr(flat, avals)
  result = (ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), []), list(consts), store["tree"])
  if "keys" in store:
    _body_keys[result[0]] = store["keys"]
  if key is not None and not any(isinstance(c, core.Tracer) for c in consts):
    try:
      _trace_cache.setdefault(fun, {})[key] = result
    except TypeError:
      pass
  return result


# ---------------------------------------------------------------------------
# Where equations come from, and the residual report


class SourceInfo(NamedTuple):
  """Where user code bound a primitive: file, line, column (0-based, 0 if unknown) and the
  qualified function name."""
  file: str
  line: int
  column: int
  function: str

  def summary(self) -> str:
    """`file:line:column (function)` (the column left out when it is 0), as JAX prints."""
    if self.column:
      return f"{self.file}:{self.line}:{self.column} ({self.function})"
    return f"{self.file}:{self.line} ({self.function})"


_INTERNAL_PREFIXES = tuple({
    os.path.dirname(os.path.abspath(__file__)) + os.sep,
    os.path.abspath(sysconfig.get_path("stdlib")) + os.sep,
    os.path.dirname(os.path.abspath(contextlib.__file__)) + os.sep,
})


def _frame_source_info(frame) -> SourceInfo:
  code = frame.f_code
  line, col = frame.f_lineno, 0
  try:
    pos = next(itertools.islice(code.co_positions(), frame.f_lasti // 2, None))
    if pos[0] is not None:
      line = pos[0]
    if pos[2] is not None:
      col = pos[2]
  except (AttributeError, StopIteration):
    pass
  return SourceInfo(code.co_filename, line, col, getattr(code, "co_qualname", code.co_name))


def _current_source_info() -> SourceInfo | None:
  """The innermost frame outside stagecraft and the standard library; or, when stagecraft
  re-binds an equation that carries source info (evaluating a jaxpr, inlining a split), that
  equation's. Installed as `core.source_info_hook` while `saved_residuals` traces."""
  frame = sys._getframe(1)
  while frame is not None:
    code = frame.f_code
    if not code.co_filename.startswith(_INTERNAL_PREFIXES):
      return _frame_source_info(frame)
    if "eqn" in code.co_varnames:
      eqn = frame.f_locals.get("eqn")
      if type(eqn) is core.JaxprEqn and eqn.source_info is not None:
        return eqn.source_info
    frame = frame.f_back
  return None


def saved_residuals(f: Callable, *args, **kwargs) -> list[tuple[core.ShapedArray, str]]:
  """The values reverse-mode differentiation of `f(*args, **kwargs)` keeps for the backward
  pass, as JAX's `saved_residuals`.

  Args:
    f: a function of arrays (pytrees).
    *args, **kwargs: its arguments (arrays, or anything with `shape` and `dtype`).

  Returns:
    One `(aval, description)` per residual: literals first, then constants, then arguments
    (`'from the argument params[0]'`), then the results of equations in program order
    (`"output of dot_general from file.py:12:8 (fn)"`, `"named 'h' from ..."` for
    `checkpoint_name`, `"output of jitted function 'g' from ..."`).

  Raises:
    TypeError: for arguments that are not arrays.
  """
  leaves, in_tree = optree.tree_flatten((args, kwargs), none_is_leaf=False, namespace=_NS)
  with_paths = tree_util.tree_flatten_with_path((args, kwargs))[0]
  names, _ = api_util.arg_names(api_util.fun_signature(f), list(range(len(args))),
                                list(kwargs), with_paths)
  fname = api_util.fun_name(f)
  avals = [api_util.abstractify(x, names[i], f) for i, x in enumerate(leaves)]

  def flat_fun(*xs):
    a, kw = tree_util.tree_unflatten(in_tree, xs)
    return optree.tree_leaves(f(*a, **kw), none_is_leaf=False, namespace=_NS)

  def residuals_of(*xs):
    return ad.linearize_flat(flat_fun, xs)[2]

  previous = core.source_info_hook
  core.source_info_hook = _current_source_info
  try:
    jaxpr, _ = pe.trace_to_jaxpr(residuals_of, avals)
  finally:
    core.source_info_hook = previous
  # A residual rounded by `reduce_precision` is reported as the value it rounds (as JAX).
  rounded = {e.outvars[0]: e.invars[0] for e in jaxpr.eqns
             if e.primitive is reduce_precision_p and type(e.invars[0]) is Var}
  res_vars = {rounded.get(x, x) for x in jaxpr.outvars if type(x) is Var}
  results: list[tuple[core.ShapedArray, str]] = []
  results += [(x.aval, "from a literal") for x in jaxpr.outvars if type(x) is Literal]
  results += [(v.aval, "from a constant") for v in jaxpr.constvars if v in res_vars]
  results += [(v.aval, f"from the argument {names[i]}")
              for i, v in enumerate(jaxpr.invars) if v in res_vars]
  for eqn in jaxpr.eqns:
    for v in eqn.outvars:
      if v in res_vars:
        src = eqn.source_info.summary() if eqn.source_info is not None else ""
        if eqn.primitive is name_p:
          results.append((v.aval, f"named '{eqn.params['name']}' from {src}"))
        elif eqn.primitive is jit_p:
          results.append((v.aval, f"output of jitted function '{eqn.params['name']}' "
                                  f"from {src}"))
        else:
          results.append((v.aval, f"output of {eqn.primitive.name} from {src}"))
  return results


def print_saved_residuals(f: Callable, *args, **kwargs) -> None:
  """Prints one line per residual of `f(*args, **kwargs)` (see `saved_residuals`), e.g.
  `f32[2,4] from the argument x` or `f32[2,8] output of tanh from model.py:10:8 (mlp)`.

  Example:
    >>> import numpy as np, stagecraft as sc, stagecraft.numpy as jnp
    >>> w = np.ones((3, 3), np.float32)
    >>> f = sc.checkpoint(lambda x: jnp.sum(jnp.sin(x @ w)),
    ...                   policy=checkpoint_policies.dots_saveable)
    >>> print_saved_residuals(f, np.ones((2, 3), np.float32))
    f32[3,3] from a constant
    f32[2,3] output of dot_general from <doctest ...>:1:... (<lambda>)
  """
  for aval, src in saved_residuals(f, *args, **kwargs):
    print(f"{aval.str_short()} {src}")
