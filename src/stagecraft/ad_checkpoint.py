"""Gradient checkpointing (rematerialization): `checkpoint` / `remat`.

`checkpoint(f)` stages `f` as one `checkpoint` equation carrying its jaxpr. Under reverse-mode
differentiation its partial-evaluation rule saves no intermediate values (policy None, JAX's
`nothing_saveable`): the known (forward) equation computes only the primal outputs, and the
unknown equation recomputes the forward from the primal inputs before the linear part, so the
backward pass runs the forward again instead of reading residuals. The transposed equation is
again a `checkpoint` (with `differentiated=True`), and with `prevent_cse=True` its inputs go
through an optimization barrier so XLA cannot merge the recomputation with the forward pass.

After JAX's `checkpoint` transformation (Chen et al. 2016, "Training deep nets with
sublinear memory cost", for the idea).
"""
from __future__ import annotations

import functools
from typing import Callable, Sequence

import optree

from stagecraft import core, tree_util
from stagecraft.core import ClosedJaxpr, Jaxpr
from stagecraft.interpreters import ad, calls, lowering, partial_eval as pe

__all__ = ["checkpoint", "remat", "remat_p"]

_NS = tree_util.NAMESPACE

remat_p = core.Primitive("checkpoint")
remat_p.multiple_results = True


def _remat_lowering(ctx, *args, jaxpr: ClosedJaxpr, prevent_cse: bool, differentiated: bool,
                    policy):
  if differentiated and prevent_cse and args:
    args = ctx.op("stablehlo.optimization_barrier", list(args), result_avals=ctx.avals_in)
  return lowering.lower_call(ctx, "checkpoint", jaxpr, args)


def _remat_partial_eval(eqn, unknowns):
  # Policy None saves nothing: the known equation computes only the known outputs, and the
  # unknown one recomputes everything it needs from the known *inputs* of the equation.
  closed = eqn.params["jaxpr"]
  jaxpr = closed.jaxpr
  n_out = len(jaxpr.outvars)
  known, _, nres, out_unknowns = ad.partial_eval_jaxpr(jaxpr, unknowns, [False] * n_out)
  params = dict(eqn.params)
  known_eqn = unknown_eqn = None
  n_known_out = n_out - sum(out_unknowns)
  if n_known_out:
    known_j, _ = pe.dce_jaxpr(known, [True] * n_known_out + [False] * nres, instantiate=True)
    known_eqn = core.JaxprEqn([v for v, u in zip(eqn.invars, unknowns) if not u],
                              [v for v, u in zip(eqn.outvars, out_unknowns) if not u],
                              remat_p, {**params, "jaxpr": ClosedJaxpr(known_j, [])})
  if any(out_unknowns):
    k_in = [v for v, u in zip(jaxpr.invars, unknowns) if not u]
    u_in = [v for v, u in zip(jaxpr.invars, unknowns) if u]
    full = Jaxpr([], [*k_in, *u_in], [v for v, u in zip(jaxpr.outvars, out_unknowns) if u],
                 jaxpr.eqns)
    full, used = pe.dce_jaxpr(full, [True] * len(full.outvars),
                              instantiate=[False] * len(k_in) + [True] * len(u_in))
    outer_in = ([v for v, u in zip(eqn.invars, unknowns) if not u]
                + [v for v, u in zip(eqn.invars, unknowns) if u])
    unknown_eqn = core.JaxprEqn([v for v, k in zip(outer_in, used) if k],
                                [v for v, u in zip(eqn.outvars, out_unknowns) if u],
                                remat_p, {**params, "jaxpr": ClosedJaxpr(full, []),
                                          "differentiated": True})
  return known_eqn, unknown_eqn, out_unknowns


core.def_closed_call(remat_p, "jaxpr")
lowering.register_lowering(remat_p, _remat_lowering)
# NB: the JVP and transpose of a checkpoint are checkpoints of the derived jaxprs, marked
# differentiated (their lowering keeps the recomputation from being merged back).
calls.CallRules(remat_p, "jaxpr", lambda params, what: (
    {**params, "differentiated": True} if what in ("jvp", "transpose") else params)
).register(partial_eval=False, dce=False)
ad.partial_eval_rules[remat_p] = _remat_partial_eval
core.pp_param_order[remat_p] = ("jaxpr", "prevent_cse", "differentiated", "policy")


def checkpoint(fun: Callable, *, prevent_cse: bool = True, policy: Callable | None = None,
               static_argnums: int | Sequence[int] = ()) -> Callable:
  """Makes `fun` recompute its intermediate values in the backward pass instead of storing
  them (gradient checkpointing / rematerialization), as JAX's `checkpoint`.

  Args:
    fun: a function of arrays (pytrees) returning arrays (pytrees).
    prevent_cse: keep XLA from merging the recomputation with the forward computation (an
      optimization barrier on the recomputation's inputs).
    policy: only None (save nothing) is supported.
    static_argnums: positions of arguments that are Python values, not arrays.

  Returns:
    A function with `fun`'s signature and results whose derivatives recompute `fun`.

  Raises:
    NotImplementedError: for a policy other than None.
    TypeError: for array-like static arguments that are tracers, or non-array leaves.
  """
  if policy is not None:
    raise NotImplementedError(
        f"checkpoint: only policy=None (save nothing) is supported, got {policy!r}. Pass "
        f"policy=None, or stage the values to keep outside the checkpointed function.")
  static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

  @functools.wraps(fun)
  def fun_remat(*args, **kwargs):
    nargs = len(args)
    st = {i % nargs for i in static if -nargs <= i < nargs}
    if type(core.current_trace()) is core.EvalTrace:
      return fun(*args, **kwargs)
    dyn = [a for i, a in enumerate(args) if i not in st]
    leaves, in_tree = optree.tree_flatten((dyn, kwargs), none_is_leaf=False, namespace=_NS)
    store: dict = {}

    def flat(*xs):
      d, kw = optree.tree_unflatten(in_tree, xs)
      it = iter(d)
      full = [args[i] if i in st else next(it) for i in range(nargs)]
      out = fun(*full, **kw)
      out_leaves, store["tree"] = optree.tree_flatten(out, none_is_leaf=False, namespace=_NS)
      return out_leaves

    jaxpr, consts = pe.trace_to_jaxpr(flat, [core.get_aval(x) for x in leaves])
    closed = ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), [])
    outs = remat_p.bind(*consts, *leaves, jaxpr=closed, prevent_cse=prevent_cse,
                        differentiated=False, policy=None)
    return optree.tree_unflatten(store["tree"], outs)

  return fun_remat


remat = checkpoint

