"""Shared pieces of the control-flow primitives (cond, while, scan).

Bodies are traced into `ClosedJaxpr`s whose constants are *leading invars* (the call
convention of `jit`): the primitives take the constant values as operands, so closed-over
arrays and tracers of outer traces (a scan body closing over a jitted function's argument)
flow through every transformation like any other operand, and nothing is baked into the
program text.
"""
from __future__ import annotations

import inspect
import weakref
from typing import Any, Callable, Sequence

import numpy as np
import optree

from stagecraft import core, dtypes, key_reuse, source_info_util, tree_util
from stagecraft.config import config
from stagecraft.core import ClosedJaxpr, ShapedArray, Var
from stagecraft.interpreters import partial_eval as pe
from stagecraft.lax import elementwise, shape as lax_shape

_NS = tree_util.NAMESPACE


def flatten(tree) -> tuple[list, Any]:
  return optree.tree_flatten(tree, none_is_leaf=False, namespace=_NS)


def unflatten(treedef, leaves):
  return tree_util.tree_unflatten(treedef, leaves)


_trace_cache: "weakref.WeakKeyDictionary[Callable, dict]" = weakref.WeakKeyDictionary()


def _traced_for(what: str) -> str:
  """JAX's name for the primitive whose body `what` (this module's role names) is."""
  if what in ("true_fun", "false_fun"):
    return "cond"
  if what.startswith("branch"):
    return "switch"
  return {"scan body": "scan", "cond_fun": "while_cond", "body_fun": "while_body",
          "f": "custom_root", "solve": "custom_root", "tangent_solve": "custom_root",
          "matvec": "custom_linear_solve", "transpose_solve": "custom_linear_solve"
          }.get(what, what)


def trace_jaxpr(fun: Callable, in_tree, in_avals: Sequence[ShapedArray], what: str
                ) -> tuple[ClosedJaxpr, list[Any], Any]:
  """Traces `fun(*unflatten(in_tree, args))` at `in_avals`.

  Args:
    fun: the user's body (takes the pytree arguments of `in_tree`, returns a pytree).
    what: the function's role for error messages (`"body_fun"`, `"true_fun"`).

  Returns:
    `(closed, consts, out_tree)`: `closed` takes `(*consts, *args)` (consts are its leading
    invars; `closed.consts` is empty) and returns the flat outputs.

  Traces are cached per (fun, in_tree, avals) while `fun` is alive, unless a constant is a
  tracer of an outer trace (then the jaxpr belongs to that trace and is rebuilt each time).

  Raises:
    TypeError: if `fun` returns a leaf that is not an array or scalar (naming its path).
  """
  key = (in_tree, tuple(in_avals), config.state_key)
  try:
    per_fun = _trace_cache.get(fun)
  except TypeError:    # not weakly referenceable
    per_fun = None
  if per_fun is not None and key in per_fun:
    return per_fun[key]
  out_tree_box = []
  check_keys = key_reuse.enabled()
  body_keys = []

  def flat_fun(*flat):
    if not check_keys:
      return body(*flat)
    with key_reuse.scope() as sc:   # keys made in the trace (the arguments') belong to it
      args = unflatten(in_tree, list(flat))
      out = fun(*args)
      sig = key_reuse.body_signature(tree_util.tree_leaves(args), tree_util.tree_leaves(out))
    body_keys.append(key_reuse.BodyKeys(sig, tuple(sc.consumed_outer())))
    return body(out=out)

  def body(*flat, out=_UNSET):
    if out is _UNSET:
      out = fun(*unflatten(in_tree, list(flat)))
    leaves, out_tree = flatten(out)
    for i, leaf in enumerate(leaves):
      if not isinstance(leaf, core.Tracer) and not core.valid_array_type(leaf):
        paths = tree_util.tree_flatten_with_path(out)[0]
        path = tree_util.keystr(paths[i][0])
        # NB: a wrapper made by the API (fori_loop's step) names the user's function
        shown, shown_for = getattr(fun, "_traced_as", None) or (fun, _traced_for(what))
        raise TypeError(
            f"function {source_info_util.fun_source_info(shown)} traced for "
            f"{shown_for} returned a value of type {type(leaf)}"
            f"{f' at output component {path}' if path else ''}, which is not a valid JAX "
            f"type")
    out_tree_box.append(out_tree)
    return leaves

  jaxpr, consts = pe.trace_to_jaxpr(flat_fun, in_avals)
  result = (ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), []), list(consts), out_tree_box[0])
  if body_keys:
    _body_keys[result[0]] = body_keys[0]
  if not any(isinstance(c, core.Tracer) for c in consts):
    try:
      _trace_cache.setdefault(fun, {})[key] = result
    except TypeError:
      pass
  return result


_UNSET = object()
_body_keys: "weakref.WeakKeyDictionary[ClosedJaxpr, key_reuse.BodyKeys]" = (
    weakref.WeakKeyDictionary())


def body_keys(closed: ClosedJaxpr) -> key_reuse.BodyKeys | None:
  """What the body traced as `closed` (by `trace_jaxpr`) does with typed keys, when it was
  traced with key reuse checking on (config `debug_key_reuse`), else None."""
  return _body_keys.get(closed)


def pad_invars(closed: ClosedJaxpr, before: Sequence[ShapedArray],
               after: Sequence[ShapedArray] = ()) -> ClosedJaxpr:
  """`closed` with unused invars of `before` avals prepended and `after` appended (to give
  jaxprs a common signature, e.g. every cond branch takes every branch's consts)."""
  j = closed.jaxpr
  return ClosedJaxpr(j.replace(invars=[*[Var(a) for a in before], *j.invars,
                                       *[Var(a) for a in after]]), [])


def aval_str(a: ShapedArray) -> str:
  """The house spelling of a type in errors: `f32[3,4]` (as jaxprs print avals)."""
  return a.str_short()


def leaf_paths(tree_def, prefix: str) -> list[str]:
  """Readable key paths (`carry[1]['w']`) of the leaves of `tree_def` under `prefix`."""
  dummy = unflatten(tree_def, list(range(tree_def.num_leaves)))
  return [prefix + tree_util.keystr(p) for p, _ in tree_util.tree_flatten_with_path(dummy)[0]]


def check_carry_type(name: str, body_fun: Callable, in_tree,
                     in_avals: Sequence[ShapedArray] | None, out_tree,
                     out_avals: Sequence[ShapedArray] | None) -> None:
  """JAX's check of a loop body's carry (`_check_carry_type`), in its words: the output
  carry must have the input's pytree structure, then its shapes and dtypes (weak types
  aside; not checked when the avals are None). `name` is `'scan body'` or
  `'while_loop body'`; the carry is named by `body_fun`'s first parameter.

  Raises:
    TypeError: listing each difference by its key path.
  """
  try:
    params = list(inspect.signature(body_fun).parameters)
  except (TypeError, ValueError):
    params = []
  carry_name = params[0] if params else None

  def component(path: str) -> str:
    if carry_name:
      return (f"the input carry component {carry_name}{path}" if path
              else f"the input carry {carry_name}")
    return f"the input carry at path {path}" if path else "the input carry"

  def listed(diffs: list[str]) -> str:
    if len(diffs) == 1:
      return diffs[0][0].upper() + diffs[0][1:] + ".\n"
    return "\n".join(f"  * {d};\n" for d in diffs[:-1]) + f"  * {diffs[-1]}.\n"

  if in_tree != out_tree:
    diffs = [f"{component(tree_util.node_path_str(path))} is a {a} but the corresponding "
             f"component of the carry output is a {b}, so {why}"
             for path, a, b, why in tree_util.equality_errors_pytreedef(in_tree, out_tree)]
    if diffs:
      raise TypeError(
          f"{name} function carry input and carry output must have the same pytree "
          f"structure, but they differ:\n\n{listed(diffs)}\nRevise the function so that "
          f"the carry output has the same pytree structure as the carry input.")
  if in_avals is None:
    return
  paths = [tree_util.keystr(p) for p, _ in tree_util.tree_flatten_with_path(
      unflatten(in_tree, list(range(in_tree.num_leaves))))[0]]
  diffs, fixes = [], []
  for a, b, p in zip(in_avals, out_avals, paths):
    if typematch(a, b):
      continue
    diffs.append(f"{component(p)} has type {a.str_short(short_dtypes=False)} but the "
                 f"corresponding output carry component has type "
                 f"{b.str_short(short_dtypes=False)}{mismatch_extra(a, b)}")
    extra = getattr(b, "vma", frozenset()) - getattr(a, "vma", frozenset())
    if extra:
      fixes.append(f"applying `jax.lax.pcast(..., {core.order_axes(extra)!r}, "
                   f"to='varying')`, to the initial carry value corresponding to {component(p)}")
  if diffs:
    raise TypeError(
        f"{name} function carry input and carry output must have equal types, but they "
        f"differ:\n\n{listed(diffs)}\n{pcast_hint(fixes)}Revise the function so that all "
        f"output types match the corresponding input types.")


def jaxpr_forwarding(jaxpr: core.Jaxpr) -> list[int | None]:
  """One entry per output of `jaxpr`: the index of the input it is (through conversions
  and broadcasts that change nothing, as JAX's forwarding rules), or None."""
  src: dict[Var, Var] = {}
  for e in jaxpr.eqns:
    x = e.invars[0] if e.invars else None
    if type(x) is not Var:
      continue
    p = e.params
    if e.primitive is elementwise.convert_element_type_p:
      same = (x.aval.dtype == p["new_dtype"] and x.aval.weak_type == p["weak_type"]
              and p.get("sharding") in (None, x.aval.sharding))
    elif e.primitive is lax_shape.broadcast_in_dim_p:
      same = (tuple(p["shape"]) == x.aval.shape
              and p.get("sharding") in (None, x.aval.sharding))
    else:
      continue
    if same:
      src[e.outvars[0]] = src.get(x, x)
  pos = {v: i for i, v in enumerate(jaxpr.invars)}
  return [pos.get(src.get(v, v)) if type(v) is Var else None for v in jaxpr.outvars]


def typematch(a: ShapedArray, b: ShapedArray) -> bool:
  """Equal shapes, dtypes, varying manual axes and shardings in the type (Explicit mesh
  axes; JAX's `typematch`); weak types may differ. Hijax types match when equal."""
  if core.is_hi(a) or core.is_hi(b):
    return a == b
  return (a.shape == b.shape and a.dtype == b.dtype
          and getattr(a, "vma", None) == getattr(b, "vma", None)
          and getattr(a, "_sharding", None) == getattr(b, "_sharding", None))


def mismatch_reasons(a: ShapedArray, b: ShapedArray) -> list[str]:
  """JAX's reasons two avals differ (`aval_mismatch_extra`), in its order."""
  return [w for w, bad in (("the dtypes do not match", a.dtype != b.dtype),
                           ("the shapes do not match", a.shape != b.shape),
                           ("the manual axis types do not match",
                            getattr(a, "vma", None) != getattr(b, "vma", None))) if bad]


def mismatch_extra(a: ShapedArray, b: ShapedArray) -> str:
  """`, so <reasons>` for avals `a` and `b` that differ, or '' when no reason JAX names
  applies (they differ only in their shardings, which JAX's message does not mention)."""
  why = mismatch_reasons(a, b)
  return f", so {join_reasons(why)}" if why else ""


def join_reasons(why: list[str]) -> str:
  """`a`, `a, and b`, `a, b, and c` (JAX's list of mismatch reasons)."""
  return why[0] if len(why) == 1 else ", ".join(why[:-1]) + ", and " + why[-1]


def pcast_hint(fixes: list[str]) -> str:
  """JAX's suggestion to pcast values to varying (`fixes`: the applications), with its
  link, or '' for none."""
  if not fixes:
    return ""
  if len(fixes) == 1:
    msg = f"This might be fixed by {fixes[0]}.\n"
  else:
    msg = ("This might be fixed by:\n" + "\n".join(f"  * {d};\n" for d in fixes[:-1]) +
           f"  * {fixes[-1]}.\n")
  return msg + ("See https://docs.jax.dev/en/latest/notebooks/shard_map.html#scan-vma for "
                "more information.\n\n")


def promote_weak(in_avals: Sequence[ShapedArray], out_avals: Sequence[ShapedArray]
                 ) -> list[ShapedArray] | None:
  """Input avals promoted where the input is weakly typed and the matching output has
  another dtype, as JAX's `_promote_weak_typed_input`: a weak input takes the dtype it
  promotes to with the output, strongly typed (`scan` with init `0` and a float32 body
  carries float32). A weak input whose output has its dtype but is strong stays weak (the
  body converts it where it meets strong values, as in JAX). None when nothing changes."""
  new = []
  for a, b in zip(in_avals, out_avals):
    if (getattr(a, "weak_type", False) and a.shape == b.shape
        and a.dtype != b.dtype):
      a = a.update(dtype=dtypes.result_type(a, b), weak_type=False)
    new.append(a)
  return None if new == list(in_avals) else new


def cast(x: Any, dtype) -> Any:
  """`convert_element_type(x, dtype)`, done on the host for a Python or NumPy scalar (it
  enters the jaxpr as a literal, as JAX converts constants), staged for arrays."""
  if type(x) in (bool, int, float, complex) or isinstance(x, np.generic):
    with np.errstate(all="ignore"):
      return np.asarray(x).astype(dtype)[()]
  return elementwise.convert_element_type(x, dtype)


__all__ = ["jaxpr_forwarding", "trace_jaxpr", "body_keys", "pad_invars", "leaf_paths", "typematch",
           "mismatch_extra", "promote_weak", "cast", "flatten", "unflatten"]
