"""Conditionals: `cond` and `switch`, both one `cond` primitive (JAX's `lax.cond` and
`lax.switch`).

`cond[branches=(b_0, ..., b_{n-1})] index *consts *ops` runs `b_index(*consts, *ops)`: the
index is an int32 scalar in `[0, n)`, and every branch is a `ClosedJaxpr` taking the consts
of *all* branches (each reads its own and ignores the others') followed by the flat operands.
Closed-over arrays and outer tracers are operands, so they flow through every transformation.

Rules, all beside the primitive: abstract eval (outputs typed as branch 0's, weak types
included, as JAX's), lowering to `stablehlo.case` (regions read the operands from the enclosing scope), jvp
(one cond of the branches' JVPs), partial eval (a known cond computing the residuals of every
branch, each branch returning `empty2` arrays in the others' slots, as JAX's, and an unknown
cond reading them; constants a jit in a branch forwards are closed over by the known branch
and returned as residuals),
transpose (one cond of the transposed branches), batching (a cond of batched branches, or, for
a batched index, every branch run and the results picked by `select_n`, as JAX does, each
branch reading its floating operands as `select(taken, x, stop_gradient(x))` so that an
untaken branch's inf/NaN derivative never reaches a cotangent) and DCE
(outputs no one reads go from every branch, inputs no branch reads go from the equation).
"""
from __future__ import annotations

import enum
import operator
import weakref
from collections.abc import Sequence
from typing import Any, Callable

import numpy as np

from stagecraft.traceback_util import api_boundary
from stagecraft import core, dtypes, key_reuse, source_info_util, tree_util
from stagecraft.config import config
from stagecraft.core import ClosedJaxpr, Jaxpr, ShapedArray, Var
from stagecraft.interpreters import ad, batching, lowering, mapping, partial_eval as pe
from stagecraft.lax import ad_util, elementwise, shape as lax_shape
from stagecraft.lax.control_flow import common, refs as refs_lib
from stagecraft.runtime import client, dispatch

__all__ = ["cond", "switch", "cond_p", "platform_dependent", "platform_index_p"]


# ---------------------------------------------------------------------------
# The user-facing functions


_NO_OPERAND = object()


@api_boundary
def switch(index: Any, branches: Sequence[Callable], *operands: Any,
           operand: Any = _NO_OPERAND) -> Any:
  """Applies `branches[index]` to `operands` (JAX's `lax.switch`).

  Args:
    index: an integer scalar (any integer dtype, weak Python ints too); values out of range
      are clamped to `[0, len(branches) - 1]` (negative values pick branch 0).
    branches: a non-empty sequence of functions, each taking `*operands` and returning a
      pytree of arrays with the same structure, shapes and dtypes as the others (weak types
      may differ; the output is strongly typed where any branch's is).
    *operands: pytrees of arrays or scalars passed to the chosen branch.
    operand: JAX's older form, one operand by keyword (then no positional operands).

  Returns:
    The chosen branch's output pytree: a `cond` equation with every branch traced (a
    concrete `index` is clamped at once outside a trace and by a staged `clamp` inside one,
    as JAX's; only under `disable_jit` is the branch just called).

  Raises:
    TypeError: if `branches` is not a sequence of callables, `index` is not a scalar or not
      of an integer dtype, or branch outputs differ in tree structure, shape or dtype.
    ValueError: if `branches` is empty.
  """
  if operand is not _NO_OPERAND:
    if operands:
      raise TypeError(f"if 'operand' keyword is passed then no positional operands can be "
                      f"passed, got operand={operand!r} and positional operands {operands}")
    operands = (operand,)
  if not isinstance(branches, Sequence) or not all(callable(b) for b in branches):
    raise TypeError("lax.switch: branches argument should be a sequence of callables.")
  if isinstance(index, (list, tuple)):   # JAX's words: its shape as NumPy sees it
    raise TypeError(f"Branch index must be scalar, got {index} of shape {np.shape(index)}.")
  aval = _scalar_aval(index, "Branch index must be scalar", "Index type must be an integer")
  if aval.dtype.kind not in "iu":
    raise TypeError(f"Index type must be an integer, got {index} as {aval.dtype}. Cast it "
                    f"with .astype(int) or use cond for a boolean.")
  branches = tuple(branches)
  if not branches:
    raise ValueError("Empty branch sequence: switch needs at least one branch function.")
  n = len(branches)
  if not isinstance(index, core.Tracer) and config.disable_jit:
    return branches[max(0, min(int(index), n - 1))](*operands)
  if n == 1:
    return branches[0](*operands)
  if not isinstance(index, core.Tracer) and core.current_trace() is core.eval_trace:
    index = np.int32(max(0, min(int(index), n - 1)))   # eagerly: clamped here
  else:   # NB: under a trace a concrete index is clamped by a staged `clamp`, as JAX's
    index = elementwise.convert_element_type(index, np.int32)
    index = elementwise.clamp(np.int32(0), index, np.int32(n - 1))
  return _bind_cond(index, branches, [f"branch {i}" for i in range(n)], operands)


@api_boundary
def cond(pred: Any, true_fun: Callable, false_fun: Callable, *operands: Any,
         operand: Any = _NO_OPERAND) -> Any:
  """`true_fun(*operands)` if `pred` else `false_fun(*operands)` (JAX's `lax.cond`).

  Args:
    pred: a scalar bool or number (nonzero means true; NaN is nonzero).
    true_fun, false_fun: functions taking `*operands` and returning pytrees of arrays of the
      same structure, shapes and dtypes (weak types may differ).
    *operands: pytrees of arrays or scalars.
    operand: JAX's older keyword for a single operand (then no positional operands).

  JAX's older form `cond(pred, true_operand, true_fun, false_operand, false_fun)` (numpyro's
  `util.cond`) is accepted too: both operands go into the cond and each branch reads its own.

  Returns:
    The chosen function's output, as Arrays: one `cond` equation with branches
    `(false_fun, true_fun)` indexed by `pred` as int32 (a concrete `pred` runs it at once;
    only under `disable_jit` is the chosen function just called).

  Raises:
    TypeError: if a function is not callable, `pred` is not a scalar or not of a bool or
      integer/floating dtype, or the outputs differ in tree structure, shape or dtype.
  """
  if not (callable(true_fun) and callable(false_fun)):
    if callable(false_fun) and len(operands) == 2 and callable(operands[1]):
      # the older signature: (pred, true_operand, true_fun, false_operand, false_fun)
      t_operand, t_fun, f_operand, f_fun = true_fun, false_fun, operands[0], operands[1]
      return cond(pred, lambda t, f: t_fun(t), lambda t, f: f_fun(f), t_operand, f_operand)
    raise TypeError("lax.cond: true_fun and false_fun arguments should be callable.")
  if operand is not _NO_OPERAND:
    if operands:
      raise TypeError(f"if 'operand' keyword is passed then no positional operands can be "
                      f"passed, got operand={operand!r} and positional operands {operands}")
    operands = (operand,)
  if pred is None:
    raise TypeError("cond predicate is None. Pass a scalar bool or number.")
  if isinstance(pred, Sequence):   # a list, tuple or str (JAX's words)
    raise TypeError(f"Pred must be a scalar, got {pred} of type {type(pred)}. "
                    f"Pass one bool, e.g. x[0] > 0 or jnp.all(...).")
  aval = _scalar_aval(pred, "Pred must be a scalar", "Pred type must be either boolean or number")
  if aval.dtype.kind not in "biuf":
    raise TypeError(f"Pred type must be either boolean or number, got {aval.dtype}. "
                    f"Compare it explicitly, e.g. x != 0.")
  # NB: as JAX, a concrete predicate still traces both branches (their types must agree)
  # and runs the `cond`, returning Arrays; only under disable_jit is the branch just called.
  if not isinstance(pred, core.Tracer) and config.disable_jit:
    return true_fun(*operands) if bool(pred) else false_fun(*operands)
  if not isinstance(pred, core.Tracer):   # a concrete predicate: a literal index
    index = np.int32(bool(pred))
  else:
    if aval.dtype.kind != "b":
      pred = elementwise.ne(pred, np.zeros((), aval.dtype))
    index = elementwise.convert_element_type(pred, np.int32)
  return _bind_cond(index, (false_fun, true_fun), ["false_fun", "true_fun"], operands)


def _scalar_aval(x: Any, what: str, type_msg: str) -> ShapedArray:
  try:
    aval = core.get_aval(x)
  except TypeError as e:
    raise TypeError(f"{type_msg}, got {x}.") from e   # JAX's words
  if aval.shape != ():
    raise TypeError(f"{what}, got {x} of shape {aval.shape}. Reduce it to "
                    f"one value (e.g. index it, or use jnp.any / jnp.all) or use vmap.")
  return aval


def _bind_cond(index: Any, funs: Sequence[Callable], names: Sequence[str],
               operands: tuple, branches_platforms: BranchesPlatforms | None = None) -> Any:
  """`_bind_branches`, the branches reading and writing `Ref`s from outside them: their
  values are passed through every branch (leading operands) and the final values of those
  a branch writes are written back after the cond (JAX's state discharge; `refs.with_refs`).
  """
  def run(refs, values, written):
    if refs is None:
      return _bind_branches(index, funs, names, operands, branches_platforms)
    gs = [refs_lib.discharged(f, refs, written) for f in funs]
    return _bind_branches(index, [lambda v, *o, g=g: g(v, *o) for g in gs], names,
                          (values, *operands), branches_platforms)
  return refs_lib.with_refs(run)


def _check_branch_outputs(api_name: str, name1: str, name2: str, f1: Callable, f2: Callable,
                          avals1, tree1, avals2, tree2) -> None:
  """JAX's check that two branches return the same pytree structure, then the same shapes
  and dtypes, in its words (`_check_branch_outputs`).

  Raises:
    TypeError: listing each difference by its key path.
  """
  paths = [tree_util.keystr(p) for p, _ in tree_util.tree_flatten_with_path(
      common.unflatten(tree1, list(range(tree1.num_leaves))))[0]]
  component = lambda p: f" at path {p}" if p else ""   # noqa: E731
  where = (f"{name1} is {source_info_util.fun_source_info(f1)}\n"
           f"{name2} is {source_info_util.fun_source_info(f2)}\n\n")
  if tree1 != tree2:
    diffs = [f"{name1} output{component(tree_util.node_path_str(p))} is a {t1} but "
             f"{name2} output{component(tree_util.node_path_str(p))} is a {t2}, so {why}"
             for p, t1, t2, why in tree_util.equality_errors_pytreedef(tree1, tree2)]
    if not diffs:
      return
    listed = (f"{diffs[0]}.\n" if len(diffs) == 1 else
              "\n".join(f"  * {d};\n" for d in diffs[:-1]) + f"  * {diffs[-1]}.\n")
    raise TypeError(f"{api_name} branch outputs must have the same pytree structure, but "
                    f"they differ:\n\n{where}{listed}\nRevise {name1} and/or {name2} so "
                    f"that they have the same pytree structure.")
  diffs, fixes = [], []
  for p, x, y in zip(paths, avals1, avals2):
    if common.typematch(x, y):
      continue
    diffs.append(f"the output of {name1}{component(p)} has type "
                 f"{x.str_short(short_dtypes=False)} but the corresponding output of {name2} "
                 f"has type {y.str_short(short_dtypes=False)}"
                 f"{common.mismatch_extra(x, y)}")
  for p, x, y in zip(paths, avals1, avals2):
    if common.typematch(x, y) or x.vma == y.vma:
      continue
    # NB: JAX's suggestion, for each branch whose output varies along fewer axes than the
    # other's; the axes it names are those the *other* output lacks (as JAX 0.10.2 prints).
    for n, a, b in ((name1, y, x), (name2, x, y)):
      if b.vma - a.vma:
        fixes.append(f"applying `jax.lax.pcast(..., {core.order_axes(a.vma - b.vma)!r}, "
                     f"to='varying')` to the output of {n}{component(p)}")
  if diffs:
    listed = (diffs[0][0].upper() + diffs[0][1:] + ".\n" if len(diffs) == 1 else
              "\n".join(f"  * {d};" for d in diffs[:-1]) + f"\n  * {diffs[-1]}.\n")
    raise TypeError(f"{api_name} branches must have equal output types but they differ.\n\n"
                    f"{where}{listed}\n{common.pcast_hint(fixes)}Revise {name1} and/or "
                    f"{name2} so that all output types match.")


def _bind_branches(index: Any, funs: Sequence[Callable], names: Sequence[str],
                   operands: tuple, branches_platforms: BranchesPlatforms | None = None) -> Any:
  """Traces every branch at the operands' avals, checks that their outputs agree, and binds
  one `cond`. `funs[i]` is the branch of index i; `names` name them in errors;
  `branches_platforms` (a `platform_dependent` cond) is the equation's param of that name."""
  ops, in_tree = common.flatten(operands)
  avals = []
  for path, x in zip(common.leaf_paths(in_tree, "operands"), ops):
    try:
      avals.append(core.get_aval(x))
    except TypeError as e:
      raise TypeError(f"cond/switch operand {path} of type {type(x).__name__} is not an array "
                      f"or scalar. Pass arrays, or close over non-array values.") from e
  # As JAX's, cond traces true_fun first and its constants come first.
  is_cond = names[0] == "false_fun"
  order = [1, 0] if is_cond else list(range(len(funs)))
  traced = [None] * len(funs)
  for i in order:
    traced[i] = common.trace_jaxpr(funs[i], in_tree, avals, names[i])
  # Errors name the two branches as JAX does: cond compares true_fun with false_fun, switch
  # compares each branch with branch 0 (JAX writes the other `branch1`, without a space).
  pairs = [(1, 0)] if is_cond else [(0, i) for i in range(1, len(funs))]
  for a, b in pairs:
    _check_branch_outputs("cond" if is_cond else "switch", names[a],
                          names[b] if is_cond else f"branch{b}", funs[a], funs[b],
                          traced[a][0].out_avals, traced[a][2], traced[b][0].out_avals,
                          traced[b][2])
  joined, consts = _join_consts([traced[i][:2] for i in order])
  branches = [joined[order.index(i)] for i in range(len(funs))]
  # As JAX's, an output every branch forwards from the same input is no output of the cond:
  # it is that input (put on the device if it is not traced).
  fwds = [common.jaxpr_forwarding(br.jaxpr) for br in branches]
  in_fwd = [f[0] if len(set(f)) == 1 else None for f in zip(*fwds)]
  if any(f is not None for f in in_fwd):
    branches = [ClosedJaxpr(br.jaxpr.replace(outvars=[
        v for v, f in zip(br.jaxpr.outvars, in_fwd) if f is None]), br.consts)
        for br in branches]
  params = {} if branches_platforms is None else {"branches_platforms": branches_platforms}

  def run():
    outs = iter(cond_p.bind(index, *consts, *ops, branches=tuple(branches), **params))
    ins = [*consts, *ops]
    outs = [next(outs) if f is None else _forwarded(ins[f]) for f in in_fwd]
    return common.unflatten(traced[0][2], outs)

  bodies = [common.body_keys(t[0]) for t in traced]
  if not key_reuse.enabled() or any(b is None for b in bodies):
    return run()
  # NB: as JAX's cond rule: a key is consumed where a branch consumes it
  return key_reuse.call(key_reuse.join_branches(bodies), "cond",
                        tree_util.tree_leaves(operands), run, tree_util.tree_leaves,
                        offset=1 + len(consts))


def _forwarded(x: Any) -> Any:
  # JAX's `lax.asarray`: a traced value as it is, any other on the device.
  return x if isinstance(x, core.Tracer) else dispatch.device_put_leaf(x, None, "")


# ---------------------------------------------------------------------------
# Branch jaxprs with a common signature


def _join_consts(traced: Sequence[tuple[ClosedJaxpr, Sequence[Any]]]
                 ) -> tuple[list[ClosedJaxpr], list[Any]]:
  """Gives jaxprs that take their own consts first a common signature.

  Args:
    traced: `(closed, consts)` pairs; `closed` takes `(*consts, *args)` (args alike for all).

  Returns:
    `(branches, all_consts)`: every branch takes `(*all_consts, *args)`, ignoring the consts
    of the others. A const shared by several branches (the same object, e.g. a closed-over
    outer tracer) is passed once.
  """
  all_consts: list[Any] = []
  avals: list[ShapedArray] = []
  first_pos: dict[int, int] = {}
  positions = []
  for closed, consts in traced:
    pos_i, used = [], set()
    for c, v in zip(consts, closed.jaxpr.invars):
      p = first_pos.get(id(c))
      if p is None or p in used:
        p = len(all_consts)
        all_consts.append(c)
        avals.append(v.aval)
        first_pos.setdefault(id(c), p)
      used.add(p)
      pos_i.append(p)
    positions.append(pos_i)
  out = []
  for (closed, consts), pos_i in zip(traced, positions):
    j = closed.jaxpr
    nc = len(consts)
    own = dict(zip(pos_i, j.invars[:nc]))
    invars = [own[p] if p in own else Var(avals[p]) for p in range(len(all_consts))]
    out.append(ClosedJaxpr(j.replace(invars=[*invars, *j.invars[nc:]]), []))
  return out, all_consts


def _derived_branches(traced: Sequence[tuple[ClosedJaxpr, Sequence[Any]]]
                      ) -> tuple[list[ClosedJaxpr], list[Any]]:
  """As `_join_consts`, for the branches a rule derives (JVP, transpose, batching): as
  JAX's, each closes over its own constants (those of the branch it derives from, the
  constants a jit in it forwards) where they are all values; tracers become operands."""
  if any(isinstance(c, core.Tracer) for _, consts in traced for c in consts):
    return _join_consts(traced)
  out = []
  for closed, consts in traced:
    j, k = closed.jaxpr, len(consts)
    out.append(ClosedJaxpr(j.replace(constvars=[*j.constvars, *j.invars[:k]],
                                     invars=j.invars[k:]), [*closed.consts, *consts]))
  return out, []


def _trace(fun: Callable[..., Sequence[Any]], in_avals: Sequence[ShapedArray]
           ) -> tuple[ClosedJaxpr, list[Any]]:
  """Traces the flat `fun` into a jaxpr taking its consts first."""
  jaxpr, consts = pe.trace_to_jaxpr(fun, in_avals)
  return ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), []), list(consts)


_memo = core.memo_on_jaxpr


def _memo_branches(table, branches: tuple[ClosedJaxpr, ...], key, make):
  # Keyed by the first branch and weak references to the others (a strong one in the key
  # would keep the first branch's table entry alive forever).
  return _memo(table, branches[0], (tuple(map(weakref.ref, branches[1:])), key), make)


# ---------------------------------------------------------------------------
# The primitive and its rules

cond_p = core.Primitive("cond")
cond_p.multiple_results = True

#: The `branches_platforms` param of a `platform_dependent` cond (absent on other conds): for
#: each branch, the lowering platforms it is for (`('cpu',)`, `('cuda', 'rocm')`), or None
#: (the last branch only: every other platform). Its index is a `platform_index` of the same
#: platforms; every rule keeps the param on the conds it derives.
BranchesPlatforms = tuple  # tuple[tuple[str, ...] | None, ...]


def _cond_abstract_eval(index: ShapedArray, *avals: ShapedArray,
                        branches: tuple[ClosedJaxpr, ...],
                        branches_platforms: BranchesPlatforms | None = None
                        ) -> list[ShapedArray]:
  if index.shape != () or index.dtype != np.int32:
    raise TypeError(f"cond: the index must be an int32 scalar, got {index.str_short()}.")
  if not branches:
    raise TypeError("cond: needs at least one branch.")
  out0 = branches[0].out_avals
  for i, br in enumerate(branches):
    ins = br.in_avals
    if len(ins) != len(avals) or not all(map(common.typematch, ins, avals)):
      raise TypeError(
          f"cond: branch {i} takes ({', '.join(a.str_short() for a in ins)}) but the operands "
          f"are ({', '.join(a.str_short() for a in avals)}).")
    outs = br.out_avals
    if len(outs) != len(out0) or not all(map(common.typematch, outs, out0)):
      raise TypeError(
          f"cond: branch {i} returns ({', '.join(a.str_short() for a in outs)}) but branch 0 "
          f"returns ({', '.join(a.str_short() for a in out0)}).")
  # As JAX's: the outputs are typed as branch 0's, weak types included (a weak output of
  # branch 0 stays weak even where another branch's is strong).
  return list(out0)


def _cond_lowering(ctx, index: str, *args: str, branches: tuple[ClosedJaxpr, ...],
                   branches_platforms: BranchesPlatforms | None = None):
  # `stablehlo.case`: one region per branch, no block arguments; each reads the operands
  # from the enclosing scope and ends in `stablehlo.return`.
  if branches_platforms is not None:
    # NB: a platform_dependent cond: only the branch for the platform being lowered is
    # lowered (as JAX's, whose case then has the kept branches alone), a one-region case.
    i = _platform_branch(branches_platforms, ctx.module.platform)
    branches = (branches[i],)
    index = ctx.constant(0, ctx.avals_in[0])
  if any(lowering.has_ordered_effects(br.jaxpr) for br in branches):
    # NB: ordered effects: each branch continues the enclosing token and returns its last.
    token = ctx.get_token()

    def branch(br):
      ctx.fb.token = token
      outs = lowering.jaxpr_subcomp(ctx.fb, br.jaxpr, _branch_consts(ctx, br), args)
      return [ctx.fb.token, *outs]
    out_avals = [core.abstract_token, *ctx.avals_out]
    regions = [ctx.region([], out_avals, lambda br=br: branch(br)) for br in branches]
    outs = ctx.op("stablehlo.case", [index], out_avals, regions=regions,
                  operand_avals=ctx.avals_in[:1])
    ctx.set_token(outs[0])
    return outs[1:]
  regions = [ctx.region([], ctx.avals_out, lambda br=br: lowering.jaxpr_subcomp(
      ctx.fb, br.jaxpr, _branch_consts(ctx, br), args)) for br in branches]
  return ctx.op("stablehlo.case", [index], ctx.avals_out, regions=regions,
                operand_avals=ctx.avals_in[:1])


def _branch_consts(ctx, br: ClosedJaxpr) -> list[str]:
  # NB: a branch may close over constants (those a jit in it forwards to the tangent side,
  # returned as residuals by the known branch); they are dense constants of the region
  # (unless jit hoisted them to arguments first: `pjit.hoist_call_consts`).
  return [lowering.dense_constant(ctx.fb, c, v.aval)
          for c, v in zip(br.consts, br.jaxpr.constvars)]


_jvp_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_pe_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_transpose_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_batch_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_dce_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _jvp_branches(branches, nonzeros):
  """Every branch's JVP, all returning the same tangent outputs: a tangent output is
  nonzero when it is in any branch (the others return instantiated zeros)."""
  jvps = [ad.jvp_jaxpr(br, nonzeros) for br in branches]
  out_nz = [any(nz) for nz in zip(*(j[2] for j in jvps))]
  jvps = [j if j[2] == out_nz else ad.jvp_jaxpr(br, nonzeros, instantiate=out_nz)
          for j, br in zip(jvps, branches)]
  new_branches, consts = _derived_branches([(c, k) for c, k, _ in jvps])
  return tuple(new_branches), consts, out_nz


def _cond_jvp(primals, tangents, *, branches, **params):
  # One cond of the branches' JVPs taking (index, consts, primals, nonzero tangents).
  index, *ops = primals
  nonzeros = tuple(type(t) is not ad.Zero and core.get_aval(t).dtype != dtypes.float0
                   for t in tangents[1:])
  jvp_branches, consts, out_nz = _memo_branches(_jvp_cache, branches,
                                                (nonzeros, ad.jvp_mode()), lambda: _jvp_branches(branches, nonzeros))
  outs = cond_p.bind(index, *consts, *ops, *[t for t, nz in zip(tangents[1:], nonzeros) if nz],
                     branches=jvp_branches, **params)
  n = len(branches[0].out_avals)
  it = iter(outs[n:])
  return outs[:n], [next(it) if nz else ad.Zero(ad.tangent_aval(a))
                    for nz, a in zip(out_nz, branches[0].out_avals)]


def _pe_branches(branches, unknowns, shallow_dce):
  n_out = len(branches[0].out_avals)
  out_uk = [False] * n_out
  for br in branches:
    out_uk = [a or b for a, b in zip(out_uk, ad.partial_eval_jaxpr(br.jaxpr, unknowns,
                                                                   [False] * n_out)[3])]
  # NB: constants a jit inside a branch forwards to its tangent side become constants of the
  # known branch, which returns them as residuals (as JAX's).
  values = [dict(zip(br.jaxpr.constvars, br.consts)) for br in branches]
  # NB: as JAX's JaxprTrace, where it splits the cond, the known branches keep the dead
  # code of the equations in them (the `empty2` fillers of a cond inside)
  splits = [ad.partial_eval_jaxpr(br.jaxpr, unknowns, out_uk, const_values=cv,
                                  shallow_dce=shallow_dce)
            for br, cv in zip(branches, values)]
  known, unknown, slot_avals = join_branch_residuals(
      [(ClosedJaxpr(k, [cv[v] for v in k.constvars]), u, nres)
       for (k, u, nres, _), cv in zip(splits, values)],
      [a for a, u in zip(branches[0].in_avals, unknowns) if not u])
  return known, tuple(ClosedJaxpr(u, []) for u in unknown), slot_avals, out_uk


def join_branch_residuals(splits: Sequence[tuple[ClosedJaxpr, Jaxpr, int]],
                          known_in_avals: Sequence[ShapedArray]
                          ) -> tuple[tuple[ClosedJaxpr, ...], list[Jaxpr], list[ShapedArray]]:
  """The branches of a cond split by partial evaluation, joined to one type, as JAX's
  `_merge_branch_residuals`, `_join_cond_outputs` and `_join_cond_pe_staged_jaxpr_inputs`.

  Args:
    splits: for each branch, `(known, staged, num_res)`: `known` maps the known operands
      (of `known_in_avals`) to the known outputs and then `num_res` residuals; `staged` reads
      those residuals first.

  Returns:
    `(known_branches, staged_jaxprs, slot_avals)`: the residual slots are shared between
    branches by type (the j-th residual of type T of any branch goes to the j-th slot of
    type T); each known branch returns its known outputs and then every slot (those it does
    not fill are uninitialized arrays, `empty2`); each staged jaxpr reads every slot first
    (a slot it does not read is one binder shared by all such branches, so it prints under
    one name, as JAX's).
  """
  slot_avals: list[ShapedArray] = []
  slots_of_type: dict[tuple, list[int]] = {}
  slot_maps = []
  for known, _, nres in splits:
    seen: dict[tuple, int] = {}
    slot_map = []
    for a in known.out_avals[len(known.out_avals) - nres:]:
      key = (a.shape, a.dtype)
      j = seen[key] = seen.get(key, -1) + 1
      slots = slots_of_type.setdefault(key, [])
      if j == len(slots):
        slots.append(len(slot_avals))
        slot_avals.append(a.update(weak_type=False))
      slot_map.append(slots[j])
    slot_maps.append(slot_map)
  known_out, staged_out = [], []
  unread = [Var(a) for a in slot_avals]
  for (known, staged, nres), slot_map in zip(splits, slot_maps):
    def fun(*args, known=known, nres=nres, slot_map=slot_map):
      outs = core.eval_jaxpr(known.jaxpr, known.consts, *args)
      nk = len(outs) - nres
      res = [_empty_like(a) for a in slot_avals]
      for s, r in zip(slot_map, outs[nk:]):
        res[s] = r
      return [*outs[:nk], *res]
    jaxpr, consts = pe.trace_to_jaxpr(fun, list(known_in_avals))
    known_out.append(ClosedJaxpr(jaxpr, list(consts)))
    own = dict(zip(slot_map, staged.invars[:nres]))
    res_invars = [own[s] if s in own else unread[s] for s in range(len(slot_avals))]
    staged_out.append(staged.replace(invars=[*res_invars, *staged.invars[nres:]]))
  return tuple(known_out), staged_out, slot_avals


def _cond_partial_eval(eqn, unknowns):
  # A known index: a known cond (known outputs + every branch's residuals) and an unknown
  # cond reading them. An unknown index: the whole equation is unknown.
  n_out = len(eqn.outvars)
  if unknowns[0]:
    return None, eqn, [True] * n_out
  branches = eqn.params["branches"]
  shallow = ad.splitting_as_jaxpr_trace()
  known, unknown, res_avals, out_uk = _memo_branches(
      _pe_cache, branches, (tuple(unknowns[1:]), shallow),
      lambda: _pe_branches(branches, unknowns[1:], shallow))
  index, *ins = eqn.invars
  res_vars = [Var(a) for a in res_avals]
  known_eqn = core.JaxprEqn(
      [index, *[v for v, u in zip(ins, unknowns[1:]) if not u]],
      [*[v for v, u in zip(eqn.outvars, out_uk) if not u], *res_vars], cond_p,
      {**eqn.params, "branches": known})
  unknown_eqn = core.JaxprEqn(
      [index, *res_vars, *[v for v, u in zip(ins, unknowns[1:]) if u]],
      [v for v, u in zip(eqn.outvars, out_uk) if u], cond_p,
      {**eqn.params, "branches": unknown})
  return known_eqn, unknown_eqn, out_uk


def _transpose_branches(branches, undefined, ct_nonzeros, wanted):
  """Every branch transposed: takes `(consts, non-linear args, nonzero cts)`, returns the
  cotangents of the linear args marked in `wanted` (float0 ones are left out)."""
  in_avals, out_avals = branches[0].in_avals, branches[0].out_avals
  res_avals = [a for a, u in zip(in_avals, undefined) if not u]
  ct_avals = [ad.tangent_aval(a) for a, nz in zip(out_avals, ct_nonzeros) if nz]
  nres = len(res_avals)
  traced = []
  for br in branches:
    def fun(*args, br=br):
      it_res, it_ct = iter(args[:nres]), iter(args[nres:])
      primals = [ad.UndefinedPrimal(a) if u else next(it_res)
                 for a, u in zip(in_avals, undefined)]
      cts = [next(it_ct) if nz else ad.Zero(ad.tangent_aval(a))
             for a, nz in zip(out_avals, ct_nonzeros)]
      cts_in = ad.backward_pass(br.jaxpr, primals, cts, consts=br.consts)
      return [ad.instantiate_zeros(c) for c, w in zip(cts_in, wanted) if w]
    traced.append(_trace(fun, [*res_avals, *ct_avals]))
  new_branches, consts = _derived_branches(traced)
  return tuple(new_branches), consts


def _cond_transpose(cts, index, *args, branches, **params):
  # One cond of the transposed branches; the index and the residuals are non-linear.
  undefined = tuple(ad.is_undefined_primal(a) for a in args)
  wanted = tuple(u and a.aval.dtype != dtypes.float0 and
                 ad.tangent_aval(a.aval).dtype != dtypes.float0
                 for a, u in zip(args, undefined))
  ct_nonzeros = tuple(type(c) is not ad.Zero for c in cts)
  t_branches, consts = _memo_branches(
      _transpose_cache, branches, (undefined, ct_nonzeros),
      lambda: _transpose_branches(branches, undefined, ct_nonzeros, wanted))
  outs = cond_p.bind(index, *consts, *[a for a, u in zip(args, undefined) if not u],
                     *[c for c in cts if type(c) is not ad.Zero], branches=t_branches, **params)
  it = iter(outs)
  return [None, *[next(it) if w else (ad.Zero(ad.tangent_aval(a.aval)) if u else None)
                  for a, u, w in zip(args, undefined, wanted)]]


def _batch_branches(branches, axis_data, dims):
  """Every branch batched with the same in dims; an output batched in any branch is batched
  at 0 in all of them."""
  n_out = len(branches[0].out_avals)
  first = [batching.batch_jaxpr(br, axis_data, dims, [None] * n_out) for br in branches]
  out_batched = [any(b[2][k] is not batching.not_mapped for b in first) for k in range(n_out)]
  targets = [0 if b else None for b in out_batched]
  traced = [batching.batch_jaxpr(br, axis_data, dims, targets) for br in branches]
  new_branches, consts = _derived_branches([(c, k) for c, k, _ in traced])
  return tuple(new_branches), consts, [0 if b else batching.not_mapped for b in out_batched]


def _select_branches(branches, axis_data, dims):
  return [batching.batch_jaxpr(br, axis_data, dims, [0] * len(br.out_avals))[:2]
          for br in branches]


def _cond_batch(axis_data, args, dims, *, branches, **params):
  # An axis rule (called even when nothing is batched, so collectives in branches see the
  # axis). Unbatched index: one cond of the batched branches. Batched index: every branch runs
  # on the batch and `select_n` picks each example's result (JAX's conversion).
  index, *ops = args
  idim, *op_dims = dims
  if "branches_platforms" in params and idim is not batching.not_mapped:
    # NB: as JAX's: a platform_dependent cond's index is the platform's wherever it came
    # from, so a batched one is replaced by a fresh (unbatched) platform_index.
    index = platform_index_p.bind(platforms=params["branches_platforms"])
    idim = batching.not_mapped
  if idim is batching.not_mapped:
    key = (tuple(op_dims), axis_data)
    b_branches, consts, out_dims = _memo_branches(
        _batch_cache, branches, key, lambda: _batch_branches(branches, axis_data, op_dims))
    return cond_p.bind(index, *consts, *ops, branches=b_branches, **params), out_dims
  if any(getattr(e, "io", None) for br in branches for e in br.effects):
    # NB: as JAX's: every branch would run on every example, and so would their IO
    raise NotImplementedError("IO effect not supported in vmap-of-cond.")
  # NB: every branch runs on every example, so an example's untaken branch may compute inf or
  # NaN (sqrt of a negative, 1/0) and so may its derivative. Its output is dropped by
  # `select_n`, but in reverse mode the zero cotangent select_n sends it would still be
  # multiplied by those infinities (0 * inf = NaN) and summed into the operands' cotangents.
  # As JAX does, each branch reads its operands through `select(taken, x, stop_gradient(x))`:
  # where the branch is not taken its operands are constants to AD, and select's transpose
  # zeroes whatever the branch sends back there. As JAX's rule, every operand (batched or
  # not, of any dtype) is broadcast to the batch first.
  # NB: no clamp: the index of a cond equation is in range (`switch` clamps it, `cond`'s is
  # 0 or 1), as JAX's rule assumes.
  size = axis_data.size
  index = batching.moveaxis(index, idim, 0)
  ops = [batching.bdim_at_front(x, d, size) for x, d in zip(ops, op_dims)]
  op_dims = (0,) * len(ops)
  selected = _memo_branches(_batch_cache, branches, ("select", op_dims, axis_data),
                            lambda: _select_branches(branches, axis_data, op_dims))
  results = []
  for i, (b, consts) in enumerate(selected):
    taken = elementwise.eq(index, np.int32(i))
    ops_i = [_select_taken(taken, x) for x in ops]
    results.append(core.jaxpr_as_fun(b)(*consts, *ops_i))
  outs = []
  for cases in zip(*results):
    shape = core.get_aval(cases[0]).shape
    which = lax_shape.broadcast_in_dim(index, shape, (0,))
    outs.append(elementwise.select_n(which, *cases))
  return outs, [0] * len(outs)


def _select_taken(taken: Any, x: Any) -> Any:
  """`x` where `taken` (bool[n], over x's leading batch axis), else `stop_gradient(x)`."""
  shape = core.get_aval(x).shape
  stopped = ad_util.stop_gradient(x)
  which = lax_shape.broadcast_in_dim(taken, shape, (0,))
  return elementwise.select_n(which, stopped, x)


def _dce_branches(branches, used_outs):
  used_ops = [False] * len(branches[0].in_avals)
  for br in branches:
    used_ops = [a or b for a, b in zip(used_ops, pe.dce_jaxpr(br.jaxpr, used_outs)[1])]
  new = tuple(ClosedJaxpr(*pe.prune_constvars(
      pe.dce_jaxpr(br.jaxpr, used_outs, instantiate=used_ops)[0], br.consts))
      for br in branches)
  return new, used_ops


def _cond_dce(used_outs, eqn):
  # Outputs no one reads go from every branch; an operand stays if any branch reads it.
  if not any(used_outs):
    return [False] * len(eqn.invars), None
  branches = eqn.params["branches"]
  new, used_ops = _memo_branches(_dce_cache, branches, tuple(used_outs),
                                 lambda: _dce_branches(branches, list(used_outs)))
  used_ins = [True, *used_ops]
  # NB: as JAX's, the branches are DCE'd even when every output and operand stays (dead
  # equations inside them go, e.g. the unused `empty2` fillers of a split cond).
  if all(used_outs) and all(used_ops) and all(
      len(n.jaxpr.eqns) == len(b.jaxpr.eqns) and all(map(operator.is_, n.jaxpr.eqns,
                                                         b.jaxpr.eqns))
      for n, b in zip(new, branches)):   # (an equation inside may have changed)
    return used_ins, eqn
  return used_ins, eqn.replace(
      invars=[v for v, u in zip(eqn.invars, used_ins) if u],
      outvars=[v for v, u in zip(eqn.outvars, used_outs) if u],
      params={**eqn.params, "branches": new})


def _cond_replication(in_vary, *, branches, **_):
  # NB: devices that take different branches (a varying index) may differ anywhere.
  index, ops = in_vary[0], in_vary[1:]
  outs = [mapping.varying_axes(b.jaxpr, ops) for b in branches]
  return [index.union(*os) for os in zip(*outs)]


# impl: the generic one (lower the one-equation jaxpr, run the cached executable)
cond_p.def_abstract_eval(_cond_abstract_eval)
lowering.register_lowering(cond_p, _cond_lowering)
ad.primitive_jvps[cond_p] = _cond_jvp
ad.partial_eval_rules[cond_p] = _cond_partial_eval
ad.primitive_transposes[cond_p] = _cond_transpose
batching.fancy_primitive_batchers[cond_p] = _cond_batch
pe.dce_rules[cond_p] = _cond_dce
mapping.replication_rules[cond_p] = _cond_replication


# ---------------------------------------------------------------------------
# platform_dependent: a cond on the platform a program is lowered for (JAX's
# `lax.platform_dependent`), indexed by the `platform_index` primitive.


def platform_dependent(*args: Any, default: Callable | None = None,
                       **per_platform: Callable) -> Any:
  """`per_platform[p](*args)` for the platform `p` the program runs on (JAX's
  `lax.platform_dependent`), else `default(*args)`.

  Args:
    *args: pytrees of arrays or scalars passed to the chosen function.
    default: the function for platforms not named in `per_platform` (None: none).
    **per_platform: a function per lowering platform name (`cpu=`, `cuda=`, `rocm=`, `tpu=`;
      any name is accepted, e.g. JAX's `mosaic=`). Keyword arguments given the same function
      share one branch, named by all their platforms.

  Returns:
    The chosen function's output. Outside any trace the platform is the default device's and
    the function is just called; traced, it stages `platform_index[platforms=...]` and a `cond`
    with the same `branches_platforms` over every function (all are traced: their outputs
    must agree in structure, shape and dtype), whose lowering keeps only the branch of the
    platform the module is lowered for.

  Raises:
    TypeError: if a function (or `default`) is not callable, or the branches' outputs differ.
    ValueError: if a platform is named `gpu` (name `cuda` or `rocm`).
    NotImplementedError: when run or lowered for a platform with no function and there is no
      `default`.
  """
  groups: list[tuple[list[str], Callable]] = []
  for name, fun in per_platform.items():
    if not callable(fun):
      raise TypeError(f"lax.platform_dependent: the '{name}' branch must be a callable.")
    if name == "gpu":
      raise ValueError("Use 'cuda' or 'rocm' for lax.platform_dependent.")
    for names, f in groups:
      if f == fun:
        names.append(name)
        break
    else:
      groups.append(([name], fun))
  platforms: BranchesPlatforms = tuple(tuple(names) for names, _ in groups)
  funs = [f for _, f in groups]
  if default is not None:
    if not callable(default):
      raise TypeError("lax.platform_dependent: the 'default' branch must be a callable.")
    funs.append(default)
    platforms = (*platforms, None)
  index = platform_index_p.bind(platforms=platforms)
  if not isinstance(index, core.Tracer):
    return funs[int(index)](*args)
  return _bind_cond(index, funs, [f"branch {i}" for i in range(len(funs))], args, platforms)


def _platform_branch(platforms: BranchesPlatforms, platform: str) -> int:
  """The index of the entry of `platforms` for the lowering `platform` (a module's)."""
  name = _jax_platform(platform)
  for i, names in enumerate(platforms):
    if names is None or name in names:
      return i
  raise NotImplementedError(f"MLIR translation rule for primitive "
                            f"'platform_index(platforms={platforms})' not found for platform "
                            f"{name}")


def _jax_platform(platform: str) -> str:
  # JAX's lowering platform names: a PJRT `gpu` is `cuda` or `rocm`.
  if platform != "gpu":
    return platform
  try:
    version = str(client.get_backend("gpu").platform_version)
  except RuntimeError:   # NB: lowered for a GPU this process has no client of (export)
    return "cuda"
  return "rocm" if "rocm" in version.lower() else "cuda"


def _platform_index_abstract_eval(*, platforms: BranchesPlatforms) -> ShapedArray:
  return ShapedArray((), np.dtype(np.int32))


def _platform_index_lowering(ctx, *, platforms: BranchesPlatforms):
  # NB: a module is lowered for one platform, so the index is a constant (JAX's multi-platform
  # `stablehlo.case` over the platforms is not needed).
  return [ctx.constant(_platform_branch(platforms, ctx.module.platform), ctx.avals_out[0])]


# platform_index[platforms=((names...), ..., None)]: i32[], the index of the entry naming the
# platform the module is lowered for (None: any other platform); no operands.
platform_index_p = core.Primitive("platform_index")
# impl: the generic one (the program for the default device's platform)
platform_index_p.def_abstract_eval(_platform_index_abstract_eval)
lowering.register_lowering(platform_index_p, _platform_index_lowering)
ad.defjvp_zero(platform_index_p)   # NB: no operands: never differentiated
# NB: no operands, so never batched; the rule only says so.
batching.primitive_batchers[platform_index_p] = (
    lambda args, dims, **params: (platform_index_p.bind(**params), batching.not_mapped))
# DCE: the default (pure).


# ---------------------------------------------------------------------------
# empty2: an uninitialized scalar (JAX's `lax.empty2_p`), what the known side of a split cond
# returns in the residual slots of the other branches (`_pe_branches`). Its value is never
# read; it lowers to a zero.


class MemorySpace(enum.Enum):
  """Where an array lives (JAX's `core.MemorySpace`; printed `MemorySpace.Device`)."""
  Device = "device"


def empty2(dtype: Any, *, memory_space: MemorySpace = MemorySpace.Device) -> Any:
  """An uninitialized scalar of `dtype` (`dtype[]`; its value is unspecified: a zero here)."""
  return empty2_p.bind(dtype=np.dtype(dtype), memory_space=memory_space)


def _empty2_abstract_eval(*, dtype, memory_space):
  return ShapedArray((), dtype, False)


def _empty2_lowering(ctx, *, dtype, memory_space):
  return [ctx.constant(0, ctx.avals_out[0])]


def _empty_like(aval: ShapedArray) -> Any:
  """An uninitialized array of `aval` (JAX's `empty_like_aval`: a broadcast `empty2`)."""
  x = empty2(aval.dtype)
  return lax_shape.broadcast_in_dim(x, aval.shape, ()) if aval.shape else x


empty2_p = core.Primitive("empty2")
# impl: the generic one
empty2_p.def_abstract_eval(_empty2_abstract_eval)
lowering.register_lowering(empty2_p, _empty2_lowering)
ad.defjvp_zero(empty2_p)   # NB: empty2 takes no operands, so nothing is ever differentiated
