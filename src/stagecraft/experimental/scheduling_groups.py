"""`stagecraft.experimental.scheduling_groups`: JAX 0.10.2's `jax.experimental.scheduling_groups`.

`xla_metadata_call(f, **meta)` (or `@xla_metadata_call(**meta)`) stages `f` as one
`xla_metadata_call` equation whose `jaxpr` param is `f` traced on its arguments' avals and
whose other params are `meta`; it lowers to a private function ``@xla_metadata_call`` and a
`func.call` carrying ``mhlo.frontend_attributes = {key = "value"}`` (XLA's frontend
attributes: `scheduling_group` groups ops for XLA's scheduler, `inlineable = "false"` keeps
the call out of XLA's inliner). `scheduling_group(name)` is `xla_metadata_call` with
``scheduling_group=name``.

The primitive is a call-like primitive (`core.def_closed_call`): its JVP, transpose,
batching, partial-evaluation and DCE rules are the shared ones of `interpreters/calls.py`,
each giving another `xla_metadata_call` equation with the same metadata, as JAX's. Traces are
cached per function and argument types, so calling one function twice in a program lowers
one private function (JAX's deduplication).
"""
from __future__ import annotations

import weakref
from typing import Any, Callable

from stagecraft import core, tree_util
from stagecraft.core import ClosedJaxpr
from stagecraft.interpreters import ad, calls, lowering
from stagecraft.interpreters import partial_eval as pe

__all__ = ["scheduling_group", "xla_metadata_call", "xla_metadata_call_p"]


def scheduling_group(name: str) -> Callable[[Callable], Callable]:
  """A decorator running its function as one XLA call tagged
  ``scheduling_group = "<name>"`` (`xla_metadata_call(scheduling_group=name)`)."""
  return xla_metadata_call(scheduling_group=name)


def xla_metadata_call(f: Callable | None = None, **meta: Any) -> Callable:
  """`f` (or, with `f` None, a decorator) staged as one `xla_metadata_call` equation whose
  lowered `func.call` has the frontend attributes `meta`.

  Args:
    f: a function of pytrees of arrays (positional and keyword arguments) to a pytree of
      arrays.
    **meta: attribute name -> string value.

  Returns:
    A function with `f`'s arguments and results (same shapes and dtypes).

  Raises (when the call is lowered, which an eager call does too, as JAX's):
    NotImplementedError: "mlir attr handler for type(x)=<class '...'>" for a value of
      `meta` that is not a string.
  """
  if f is None:
    return lambda g: _wrap(g, meta)
  return _wrap(f, meta)


_traces: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()


def _trace(fun: Callable, in_tree: Any, in_avals: tuple) -> tuple[ClosedJaxpr, Any]:
  """`fun` traced on the flat avals of arguments of tree `in_tree`, cached by function."""
  try:
    per_fun = _traces.setdefault(fun, {})
  except TypeError:   # NB: not weakly referable: no caching
    per_fun = {}
  key = (in_tree, in_avals)
  hit = per_fun.get(key)
  if hit is not None and not any(isinstance(c, core.Tracer) for c in hit[0].consts):
    return hit
  store: dict = {}

  def flat_fun(*xs):
    args, kwargs = tree_util.tree_unflatten(in_tree, list(xs))
    out_leaves, store["out_tree"] = tree_util.tree_flatten(fun(*args, **kwargs))
    return out_leaves

  jaxpr, consts = pe.trace_to_jaxpr(flat_fun, list(in_avals))
  result = (ClosedJaxpr(jaxpr, consts), store["out_tree"])
  per_fun[key] = result
  return result


def _wrap(fun: Callable, meta: dict) -> Callable:
  def wrapped(*args, **kwargs):
    leaves, in_tree = tree_util.tree_flatten((args, kwargs))
    in_avals = tuple(core.get_aval(x) for x in leaves)
    closed, out_tree = _trace(fun, in_tree, in_avals)
    consts: list = []
    if any(isinstance(c, core.Tracer) for c in closed.consts):
      # NB: traced constants become leading operands (JAX's `separate_consts`)
      consts = list(closed.consts)
      closed = ClosedJaxpr(pe.convert_constvars_jaxpr(closed.jaxpr), [])
    outs = xla_metadata_call_p.bind(*consts, *leaves, jaxpr=closed, **meta)
    return tree_util.tree_unflatten(out_tree, outs)
  return wrapped


def _check_meta(meta: dict) -> None:
  for x in meta.values():
    if not isinstance(x, str):
      raise NotImplementedError(f"mlir attr handler for {type(x)=}")


xla_metadata_call_p = core.Primitive("xla_metadata_call")
xla_metadata_call_p.multiple_results = True
core.def_closed_call(xla_metadata_call_p, "jaxpr")


def _impl(*args, jaxpr: ClosedJaxpr, **meta):
  _check_meta(meta)
  return core.eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *args)


xla_metadata_call_p.def_impl(_impl)


def _lowering(ctx, *args, jaxpr: ClosedJaxpr, **meta):
  _check_meta(meta)
  start = len(ctx.fb.lines)
  outs = lowering.lower_call(ctx, "xla_metadata_call", jaxpr, args)
  if meta:
    # the func.call just emitted is the last line
    line = ctx.fb.lines[-1]
    if outs:
      lowering.add_frontend_attributes(ctx.fb, outs[0], list(meta.items()), start)
    else:
      k = line.rfind(" : (")
      ctx.fb.lines[-1] = (line[:k] + " {" + lowering.frontend_attributes_text(meta.items())
                          + "}" + line[k:])
  return outs


lowering.register_lowering(xla_metadata_call_p, _lowering)
_rules = calls.CallRules(xla_metadata_call_p, "jaxpr", closed_consts=True).register()


def _partial_eval_fwd(eqn, unknowns, const_ok):
  # NB: unlike jit's, a known call with no results and no effects is not bound (JAX's rule
  # for this primitive is the generic closed-call one, whose DCE drops it).
  known, unknown, out_unknowns, fwd = _rules.partial_eval_fwd(eqn, unknowns, const_ok)
  if known is not None and not known.outvars and not known.params["jaxpr"].jaxpr.effects:
    known = None
  return known, unknown, out_unknowns, fwd


ad.partial_eval_fwd_rules[xla_metadata_call_p] = _partial_eval_fwd
