"""Mutable array references (JAX's `jax.Ref`, `jax.ref.AbstractRef`) at `jit` boundaries.

`Ref`, `AbstractRef`, `RefMet`, `freeze` and the discharge machinery (`jit_frame`,
`discharged`, `carried_values`, `write_back`) live in `stagecraft.lax.control_flow.refs`
(layer 5), where the loops and cond carry the refs their bodies use; this module re-exports
them and adds the jit part. At a `jit` boundary the refs a function uses (passed as
arguments, or closed over: implicit arguments, as in JAX) are discharged: while the function
is traced each such ref is made local to the jit's trace, holding a new input of the traced
program; its final value is an extra output, written back into the ref after the call
(`pjit.PjitFunction`). A closed-over ref is found when the trace first reads or writes it
(`RefMet`); the function is then traced again with that ref as an input.

Layer 6 (beside `pjit`, which imports this module).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import optree

from stagecraft import core, tree_util
from stagecraft.api_util import (arg_names, check_out_leaves, flatten, fun_name, fun_signature,
                                fun_source_info)
from stagecraft.core import DebugInfo, ShapedArray
from stagecraft.interpreters import partial_eval as pe
# NB: re-exported (pjit uses jit_frame, carried_values and write_back from here).
from stagecraft.lax.control_flow.refs import (  # noqa: F401
    AbstractRef, Ref, RefMet, carried_values, discharged, freeze, jit_frame, with_refs,
    write_back)

__all__ = ["AbstractRef", "Ref", "RefMet", "freeze"]


# ---------------------------------------------------------------------------
# discharge at the jit boundary


def ref_leaves(leaves: Sequence[Any]) -> list[int]:
  """The positions of the refs among flat leaves."""
  return [i for i, x in enumerate(leaves) if isinstance(x, Ref)]


def check_ref_args(fun: Callable, leaves: Sequence[Any], names: Sequence[str],
                   traced_for: str = "jit") -> None:
  """Raises JAX's ValueError when one ref is passed twice among `leaves` (to the function
  traced for `traced_for`)."""
  seen: dict[int, int] = {}
  for i in ref_leaves(leaves):
    j = seen.setdefault(id(leaves[i]), i)
    if j != i:
      raise ValueError(
          f"only one reference to a mutable array may be passed as an argument to a "
          f"function, but when tracing {fun_source_info(fun)} for {traced_for} the mutable "
          f"array reference of type {leaves[i].aval} appeared at both {names[j]} and "
          f"{names[i]}.")


def check_not_passed(fun: Callable, ref: Ref, leaves: Sequence[Any],
                     names: Sequence[str]) -> None:
  """Raises JAX's ValueError when `ref`, met closed over by the function traced for jit,
  is also one of its arguments (`leaves`, named by `names`)."""
  for x, n in zip(leaves, names):
    if x is ref:
      raise ValueError(
          f"when tracing {fun_source_info(fun)} for jit, a mutable array reference of type "
          f"{ref.aval} was both closed over and passed as the argument {n}")


def check_no_ref_out(fun: Callable, out_leaves: Sequence[Any], in_leaves: Sequence[Any] = (),
                     names: Sequence[str] = (), out: Any = None) -> None:
  """Raises JAX's ValueError when a jitted function returns a ref (naming its place in the
  output pytree `out`, if given and not the whole output, and the argument it was passed
  as, if it was)."""
  for x in out_leaves:
    if isinstance(x, Ref):
      which = next((f"\n\nThe returned mutable array was passed in as the argument "
                    f"{names[i]}." for i, a in enumerate(in_leaves) if a is x), "")
      path = next((tree_util.keystr(p) for p, leaf in
                   tree_util.tree_flatten_with_path(out)[0] if leaf is x), "")
      where = f" at output tree path result{path}" if path else ""
      raise ValueError(
          f"function {fun_source_info(fun)} traced for jit returned a mutable array reference "
          f"of type {x.aval}{where}, but mutable array references cannot be returned.{which}")


def traced_with_refs(fun: Callable, args: tuple, kwargs: dict, static_argnums: Sequence[int],
                     static_argnames: Sequence[str], implicit: Sequence[Ref],
                     in_avals: Sequence[ShapedArray]):
  """Traces `fun(*args, **kwargs)` (static arguments fixed) with its refs discharged.

  The traced function takes the values of the implicit refs (those not passed as
  arguments), then the dynamic leaves (a ref's value in place of each ref), of `in_avals`;
  it returns the function's flat results, then the final values of the refs it writes
  (implicit refs first, then argument refs).

  Returns:
    (jaxpr with consts as leading invars, consts, the results' treedef, the positions of
    the refs written among the implicit refs then the argument refs, in the order of their
    final values).

  Raises:
    RefMet: for this trace's frame when it meets a ref from outside not in `implicit` (the
      caller adds it and traces again); ValueError: a ref passed twice, or returned.
  """
  name = fun_name(fun)
  dyn_argnums = [i for i in range(len(args)) if i not in static_argnums]
  dyn = (tuple(args[i] for i in dyn_argnums),
         {k: v for k, v in kwargs.items() if k not in static_argnames})
  leaves, in_tree = flatten(dyn)
  with_paths = tree_util.tree_flatten_with_path(dyn)[0]
  names, origins = arg_names(fun_signature(fun), dyn_argnums, list(dyn[1]), with_paths)
  check_ref_args(fun, leaves, names)
  arg_refs = [leaves[i] for i in ref_leaves(leaves)]
  refs = [*implicit, *arg_refs]
  out_tree_box, written = [], []

  def flat_fun(*flat):
    trace = core.current_trace()
    n = len(implicit)
    ref_vals = list(flat[:n])
    leaf_vals = list(flat[n:])
    # NB: an argument ref is seen by the function as a new ref local to this trace (JAX's
    # ref-typed input), so that reading the same ref closed over meets the outer one.
    proxies = []
    for i, x in enumerate(leaves):
      if isinstance(x, Ref):
        ref_vals.append(leaf_vals[i])
        leaf_vals[i] = Ref(leaf_vals[i], trace)
        proxies.append(leaf_vals[i])
    saved = [(r._value, r._trace) for r in implicit]
    for r, v in zip(implicit, ref_vals):
      r._value, r._trace = v, trace
    try:
      d_args, d_kwargs = optree.tree_unflatten(in_tree, leaf_vals)
      full = list(d_args)
      for i in sorted(static_argnums):
        if i < len(args):
          full.insert(i, args[i])
      out = fun(*full, **{k: v for k, v in kwargs.items() if k in static_argnames},
                **d_kwargs)
      out_leaves, out_tree = flatten(out)
      check_no_ref_out(fun, out_leaves, leaf_vals, names, out)
      check_out_leaves(out_leaves, out_tree, name, "jit", fun_source_info(fun))
      finals = [r._value for r in [*implicit, *proxies]]
      # NB: only the refs written come out (a ref only read needs no write-back, which
      # could not happen from a nested trace, e.g. a jit called in a scan body).
      written[:] = [i for i, (v, f) in enumerate(zip(ref_vals, finals)) if f is not v]
    finally:
      for r, (v, t) in zip(implicit, saved):
        r._value, r._trace = v, t
    out_tree_box.append(out_tree)
    return [*out_leaves, *[finals[i] for i in written]]

  debug = DebugInfo("jit", name, (*[f"<ref {i}>" for i in range(len(implicit))], *names),
                    (*[-1] * len(implicit), *origins))
  try:
    with jit_frame():
      jaxpr, consts = pe.trace_to_jaxpr(flat_fun, in_avals, debug)
  except RefMet as e:
    if e.frame is None:
      check_not_passed(fun, e.ref, leaves, names)
    raise
  return pe.convert_constvars_jaxpr(jaxpr), list(consts), out_tree_box[0], list(written)
