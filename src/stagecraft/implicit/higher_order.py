"""Handlers of higher-order primitives for implicit operands: the body is re-traced under the
implicit evaluator as a function of the implicit arrays' children (their flat leaves), and
the primitive is bound again with the new body, so implicit arrays flow through without
being materialized.

What each handler does:
  - `jit` (the call of `stagecraft.jit`) and `checkpoint`: re-trace the body, bind again; the
    call stays one staged equation and its derived body is cached per (body, operand types),
    so calling again with the same types does not recompile.
  - `cond`: every branch re-traced with the implicit operands; when the branches' outputs
    differ in implicit structure, the outputs are materialized inside the branches. An
    implicit index (a scalar) is materialized: the primitive needs the integer.
  - `while` and `scan`: implicit carries keep their static metadata (aux data) across
    iterations; a carry whose implicit class or aux data changes in the body raises
    TypeError; a carry that the body turns into a plain array is materialized before the
    loop (and a plain carry that the body makes implicit is materialized in the body).
    An implicit `xs` of `scan` stays implicit when its class can `unstack` it (its leaves
    then carry the scanned axis: the quantized arrays whose slices are whole blocks,
    `Stacked`, `StraightThrough` over those); others are materialized, with a warning.
    Implicit `ys` stay implicit: their leaves are stacked and the class's `stack` rebuilds
    them (the quantized arrays' own layout, else `Stacked`).
  - `custom_jvp_call`: the primal body is re-traced; the JVP rule sees implicit operands as
    themselves (their tangents are dense: the JVP of `materialize`), and is traced and
    evaluated under the evaluator (`run_traced`), so what it does with them goes to their
    handlers.
  - `custom_vjp_call`: the primal body is re-traced; the fwd and bwd rules see implicit
    operands and implicit residuals as themselves, likewise; a dense cotangent the bwd
    returns for an implicit operand is pulled back to its children through the VJP of
    `materialize`.
  - `custom_dce_call`: the body is evaluated inline under the implicit evaluator (the custom
    DCE rule is dropped for that call).

Register more (e.g. pmap's) with `stagecraft.implicit.register_higher_order(prim)`.
"""
from __future__ import annotations

import warnings
import weakref
from typing import Any, Callable, Sequence

import optree

from stagecraft import core, tree_util
from stagecraft.api import vjp
from stagecraft.config import config
from stagecraft.core import ClosedJaxpr, ShapedArray, Var
from stagecraft.implicit.core import (WARN_ENV, MaterializationWarning, eval_jaxpr_implicit,
                                      fields, has_tracer, is_implicit, materialize_value,
                                      register_higher_order, run_traced, tangents_only,
                                      warn_enabled)
from stagecraft.interpreters import ad, batching, mapping
from stagecraft.interpreters import partial_eval as pe

_NS = tree_util.NAMESPACE


def _flatten(tree):
  return optree.tree_flatten(tree, namespace=_NS, none_is_leaf=False)


def _leaf_aval(x) -> ShapedArray:
  return x if isinstance(x, ShapedArray) else core.get_aval(x)


_retrace_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class _Retraced:
  """A body re-traced on flat leaves: `closed` takes `(*consts, *leaves)`; `out_trees` are
  the per-output pytree structures (implicit outputs are pytrees of their children)."""
  __slots__ = ("closed", "consts", "out_trees", "__weakref__")

  def __init__(self, closed, consts, out_trees):
    self.closed, self.consts, self.out_trees = closed, consts, out_trees

  def unflatten(self, leaves: Sequence[Any]) -> list[Any]:
    it = iter(leaves)
    return [tree_util.tree_unflatten(t, [next(it) for _ in range(t.num_leaves)])
            for t in self.out_trees]


def retrace(closed: ClosedJaxpr, vals: Sequence[Any], materialize_outs: Sequence[bool] = (),
            ) -> tuple[_Retraced, list[Any]]:
  """Re-traces `closed` under the implicit evaluator at the types of `vals` (values, implicit
  arrays, or ShapedArrays standing for plain operands).

  Args:
    closed: the body (its `consts` are kept as constants).
    vals: one entry per invar of `closed`.
    materialize_outs: per output, whether to materialize it inside the body.

  Returns:
    `(retraced, leaves)`: the leaves of `vals` (the new operands after `retraced.consts`).
  """
  leaves, in_tree = _flatten(list(vals))
  avals = tuple(_leaf_aval(x) for x in leaves)
  mat = tuple(materialize_outs)
  key = (in_tree, avals, mat, config.state_key)
  per = _retrace_cache.get(closed)
  if per is not None and key in per:
    return per[key], leaves
  box = []

  def flat(*ls):
    vs = tree_util.tree_unflatten(in_tree, ls)
    outs = eval_jaxpr_implicit(closed.jaxpr, closed.consts, *vs)
    outs = [materialize_value(o) if i < len(mat) and mat[i] else o for i, o in enumerate(outs)]
    trees, out_leaves = [], []
    for o in outs:
      ls_o, t = _flatten(o)
      trees.append(t)
      out_leaves.extend(ls_o)
    box.append(trees)
    return out_leaves

  jaxpr, consts = pe.trace_to_jaxpr(flat, list(avals))
  result = _Retraced(ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), []), list(consts), box[0])
  if not has_tracer(consts):
    _retrace_cache.setdefault(closed, {})[key] = result
  return result, leaves


def _avals_only(vals):
  """Plain operands replaced by their avals (so the re-trace cache keys on types only)."""
  return [v if is_implicit(v) else core.get_aval(v) for v in vals]


def _call_handler(prim, vals, params, param: str):
  r, leaves = retrace(params[param], vals)
  outs = prim.bind(*r.consts, *leaves, **{**params, param: r.closed})
  return r.unflatten(outs)


def _jit_handler(prim, vals, params):
  return _call_handler(prim, vals, params, "jaxpr")


def _remat_handler(prim, vals, params):
  return _call_handler(prim, vals, params, "jaxpr")


def _custom_dce_handler(prim, vals, params):
  closed = params["fun_jaxpr"]
  return eval_jaxpr_implicit(closed.jaxpr, closed.consts, *vals)


# ---------------------------------------------------------------------------
# cond

_cond_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _cond_handler(prim, vals, params):
  index, ops = materialize_value(vals[0]), list(vals[1:])
  branches = params["branches"]
  nout = len(branches[0].out_avals)
  retraced = [retrace(br, ops)[0] for br in branches]
  if any(r.out_trees != retraced[0].out_trees for r in retraced[1:]):
    retraced = [retrace(br, ops, [True] * nout)[0] for br in branches]
  leaves = _flatten(ops)[0]
  # One signature for all branches: every branch takes every branch's consts.
  all_consts = [c for r in retraced for c in r.consts]
  const_avals = [core.get_aval(c) for c in all_consts]
  key = tuple(id(r) for r in retraced)
  cacheable = not has_tracer(all_consts)
  per = _cond_cache.setdefault(retraced[0], {}) if cacheable else {}
  new_branches = per.get(key)
  if new_branches is None:
    new_branches, start = [], 0
    for r in retraced:
      j = r.closed.jaxpr
      nc = len(r.consts)
      invars = [Var(a) for a in const_avals]
      invars[start:start + nc] = j.invars[:nc]
      new_branches.append(ClosedJaxpr(j.replace(invars=[*invars, *j.invars[nc:]]), []))
      start += nc
    new_branches = tuple(new_branches)
    per[key] = new_branches
  outs = prim.bind(index, *all_consts, *leaves, **{**params, "branches": new_branches})
  return retraced[0].unflatten(outs)


# ---------------------------------------------------------------------------
# Loops: carries keep their implicit structure


def _same_class(a, b) -> bool:
  return is_implicit(a) and is_implicit(b) and type(a) is type(b)


def _aux_desc(x) -> str:
  if not is_implicit(x):
    return "a plain array"
  aux = ", ".join(f"{n}={getattr(x, n)!r}" for n, is_aux in fields(x) if is_aux)
  return f"{type(x).__name__}({aux})"


def _carry_fixpoint(what: str, carry: list, body_outs: Callable[[list, list], list]) -> tuple:
  """Finds which carries stay implicit: `body_outs(carry_vals, plain)` re-traces the body
  and returns its carry outputs (implicit or ShapedArray placeholders). Returns the carry
  values (materialized where needed) and the `plain` mask."""
  plain = [False] * len(carry)
  for _ in range(len(carry) + 1):
    vals = [materialize_value(c) if p else c for c, p in zip(carry, plain)]
    outs = body_outs(vals, plain)
    changed = False
    for i, (a, b) in enumerate(zip(vals, outs)):
      ta, tb = _flatten(a)[1], _flatten(b)[1]
      if ta == tb:
        continue
      if _same_class(a, b):
        raise TypeError(
            f"{what}: the carry at position {i} is {_aux_desc(a)} but the loop body returns "
            f"{_aux_desc(b)}: an implicit-array carry must keep its static metadata (aux "
            f"data) across iterations. Return a carry with the same aux fields, or "
            f"materialize the carry before the loop.")
      plain[i] = True
      changed = True
    if not changed:
      return vals, plain
  raise AssertionError("carry fixpoint did not converge")  # each step adds a plain carry


def _placeholders(r: "_Retraced", out_avals):
  """Body outputs as implicit-array skeletons or avals (enough to compare structures)."""
  return [tree_util.tree_unflatten(t, [a] * t.num_leaves) for t, a in zip(r.out_trees, out_avals)]


def _while_handler(prim, vals, params):
  cn, bn = params["cond_nconsts"], params["body_nconsts"]
  cconsts, bconsts, init = list(vals[:cn]), list(vals[cn:cn + bn]), list(vals[cn + bn:])
  body = params["body_jaxpr"]
  box = {}

  def body_outs(carry, plain):
    r, _ = retrace(body, _avals_only(bconsts) + _avals_only(carry), plain)
    box["r"] = r
    return _placeholders(r, body.out_avals)
  init, plain = _carry_fixpoint("while_loop", init, body_outs)
  br, bleaves = retrace(body, bconsts + init, plain)
  cr, cleaves = retrace(params["cond_jaxpr"], cconsts + init, [True])
  carry_leaves = _flatten(init)[0]
  ncl = len(carry_leaves)
  c_ops = [*cr.consts, *cleaves[:len(cleaves) - ncl]]
  b_ops = [*br.consts, *bleaves[:len(bleaves) - ncl]]
  outs = prim.bind(*c_ops, *b_ops, *carry_leaves, cond_jaxpr=cr.closed, body_jaxpr=br.closed,
                   cond_nconsts=len(c_ops), body_nconsts=len(b_ops))
  return br.unflatten(outs)


def _scan_xs(x, length: int):
  """An `xs` operand of scan: `(operand leaves, per-step value for the body)`. An implicit
  one stays implicit when its class can `unstack` it; otherwise it is materialized."""
  if is_implicit(x):
    u = x.unstack()
    if u is not None:
      leaves, tree = _flatten(u)
      if all(core.get_aval(l).shape[:1] == (length,) for l in leaves):
        step = tree_util.tree_unflatten(tree, [_step_aval(l) for l in leaves])
        return leaves, step
    if warn_enabled() and type(x).warn_on_materialize:
      warnings.warn(f"scan over {type(x).__name__} as xs: the class has no stacked layout "
                    f"(ImplicitArray.unstack returned None), materializing it. Define "
                    f"unstack/stack on the class, build the xs with "
                    f"stagecraft.implicit.stack, or silence this with warn_on_materialize="
                    f"False on the class or {WARN_ENV}=0.", MaterializationWarning,
                    stacklevel=5)
    x = materialize_value(x)
  return [x], _step_aval(x)


def _step_aval(x) -> ShapedArray:
  a = core.get_aval(x)
  return a.update(shape=a.shape[1:])


def _scan_handler(prim, vals, params):
  nc, nk = params["num_consts"], params["num_carry"]
  closed = params["jaxpr"]
  length = params["length"]
  consts, init = list(vals[:nc]), list(vals[nc:nc + nk])
  xs_leaves, x_steps = [], []
  for x in vals[nc + nk:]:
    ls, step = _scan_xs(x, length)
    xs_leaves += ls
    x_steps.append(step)
  ny = len(closed.out_avals) - nk
  ys_mat = [False] * ny          # implicit ys are stacked leaf by leaf (ImplicitArray.stack)

  def body_outs(carry, plain):
    r, _ = retrace(closed, _avals_only(consts) + _avals_only(carry) + x_steps,
                   [*plain, *ys_mat])
    return _placeholders(r, closed.out_avals)[:nk]
  init, plain = _carry_fixpoint("scan", init, body_outs)
  r, leaves = retrace(closed, consts + init + x_steps, [*plain, *ys_mat])
  const_leaves = _flatten(consts)[0]
  carry_leaves = _flatten(init)[0]
  ops = [*r.consts, *const_leaves]
  outs = prim.bind(*ops, *carry_leaves, *xs_leaves, **{**params, "jaxpr": r.closed,
                                                       "num_consts": len(ops),
                                                       "num_carry": len(carry_leaves)})
  outs = r.unflatten(outs)
  return outs[:nk] + [type(y).stack(y, length) if is_implicit(y) else y for y in outs[nk:]]


# ---------------------------------------------------------------------------
# Custom derivatives


def _split(trees, flat):
  """`flat` (one entry per leaf of the operands) cut into one list per operand."""
  out, pos = [], 0
  for tree in trees:
    n = tree.num_leaves
    out.append(list(flat[pos:pos + n]))
    pos += n
  return out


def _rebuild(tree, leaves):
  """The operand the user's rule sees: the implicit array itself, or the plain value."""
  return leaves[0] if optree.treespec_is_leaf(tree) else tree_util.tree_unflatten(tree, leaves)


def _dense(x):
  return materialize_value(x) if is_implicit(x) else x


def _materialize_tangent(tree, aval, primals, tangents):
  """The tangent of `materialize(implicit array)` along the tangents of its leaves: a
  symbolic zero when they all are, else computed without materializing the primal."""
  live = [i for i, t in enumerate(tangents) if type(t) is not ad.Zero]
  if not live:
    return ad.Zero(ad.tangent_aval(aval))

  def mat(*ls):
    return [materialize_value(tree_util.tree_unflatten(tree, list(ls)))]
  (t,) = tangents_only(mat, list(primals), live, [tangents[i] for i in live])
  return t


def _custom_jvp_handler(prim, vals, params):
  """The primal body is re-traced under the evaluator; the user's JVP rule sees implicit
  operands as themselves (and dense tangents: the JVP of `materialize`), and runs traced
  under the evaluator, so that what it does with them goes to their handlers."""
  nc = params["num_consts"]
  consts = [materialize_value(c) for c in vals[:nc]]
  args = list(vals[nc:])
  nout = len(params["call_jaxpr"].out_avals)
  r, leaves = retrace(params["call_jaxpr"], consts + args, [True] * nout)
  args_leaves = _flatten(args)[0]
  arg_trees = [_flatten(a)[1] for a in args]
  arg_avals = [a.aval if is_implicit(a) else core.get_aval(a) for a in args]
  jvp = params["jvp_jaxpr_fun"]

  def implicit_jvp(primals, tangents):
    # primals/tangents: one per leaf of the operands (implicit ones opened into children).
    m_p, m_t = [], []
    for tree, aval, ps, ts in zip(arg_trees, arg_avals, _split(arg_trees, primals),
                                  _split(arg_trees, tangents)):
      m_p.append(_rebuild(tree, ps))
      m_t.append(ts[0] if optree.treespec_is_leaf(tree) else
                 _materialize_tangent(tree, aval, ps, ts))
    n = len(m_p)
    box = []

    def rule(*xs):
      p_out, t_out = jvp(list(xs[:n]), list(xs[n:]))
      box.append(len(p_out))
      return [*p_out, *t_out]
    outs = run_traced(rule, [*m_p, *m_t])
    k = box[0]
    return [_dense(o) for o in outs[:k]], [_dense(o) for o in outs[k:]]
  implicit_jvp.__name__ = getattr(jvp, "__name__", "jvp")
  implicit_jvp.fun_name = getattr(jvp, "fun_name", implicit_jvp.__name__)   # NB: printed name=
  k = len(r.consts) + len(leaves) - len(args_leaves)
  outs = prim.bind(*r.consts, *leaves, **{**params, "call_jaxpr": r.closed,
                                          "jvp_jaxpr_fun": implicit_jvp,
                                          "num_consts": k})
  return r.unflatten(outs)


def _custom_vjp_handler(prim, vals, params):
  """The primal body is re-traced under the evaluator; the user's fwd and bwd rules see
  implicit operands (and implicit residuals) as themselves and run traced under the
  evaluator. A dense cotangent the bwd rule returns for an implicit operand is pulled back
  to its children through the VJP of `materialize`."""
  nc = params["num_consts"]
  consts = [materialize_value(c) for c in vals[:nc]]
  args = list(vals[nc:])
  nout = len(params["call_jaxpr"].out_avals)
  r, leaves = retrace(params["call_jaxpr"], consts + args, [True] * nout)
  args_leaves = _flatten(args)[0]
  arg_trees = [_flatten(a)[1] for a in args]
  fwd = params["fwd_jaxpr_thunk"]

  def implicit_fwd(primals, nonzeros):
    # primals/nonzeros: one per leaf of the operands (implicit ones opened into children).
    m_p = [_rebuild(t, ps) for t, ps in zip(arg_trees, _split(arg_trees, primals))]
    m_nz = [any(nz) for nz in _split(arg_trees, nonzeros)]
    box = []

    def rule(*xs):
      p_out, res, bwd = fwd(list(xs), m_nz)
      box.append((len(p_out), bwd))
      return [*p_out, *res]
    outs = run_traced(rule, m_p)
    k, bwd = box[0]
    p_out = [_dense(o) for o in outs[:k]]
    # Residuals that came out implicit travel as their children.
    res_trees, res_leaves = [], []
    for x in outs[k:]:
      ls, t = _flatten(x)
      res_trees.append(t)
      res_leaves.extend(ls)
    nres = len(res_leaves)

    def implicit_bwd(res_, cts):
      res_, kids = list(res_[:nres]), list(res_[nres:])
      res_vals = [_rebuild(t, ls) for t, ls in zip(res_trees, _split(res_trees, res_))]
      nr = len(res_vals)
      m_cts = run_traced(lambda *xs: bwd(list(xs[:nr]), list(xs[nr:])), [*res_vals, *cts])
      m_cts = [_dense(c) for c in m_cts]
      out = []
      for tree, ct, nz, ks in zip(arg_trees, m_cts, m_nz, _split(arg_trees, kids)):
        if optree.treespec_is_leaf(tree):
          out.append(ct)
          continue
        k_avals = [core.get_aval(k) for k in ks]
        if type(ct) is ad.Zero or not nz:
          out.extend(ad.Zero(ad.tangent_aval(a)) for a in k_avals)
          continue
        _, pull = vjp(lambda *ls, tree=tree: materialize_value(tree_util.tree_unflatten(tree, ls)),
                      *ks)
        for a, c in zip(k_avals, pull(ct)):
          t = ad.tangent_aval(a)
          out.append(ad.Zero(t) if t.dtype != a.dtype else c)
      return out
    implicit_bwd.__name__ = getattr(bwd, "__name__", "bwd")
    return p_out, [*res_leaves, *primals], implicit_bwd
  implicit_fwd.__name__ = getattr(fwd, "__name__", "fwd")
  implicit_fwd.fun_name = getattr(fwd, "fun_name", implicit_fwd.__name__)   # NB: printed name=
  implicit_fwd.bwd_name = getattr(fwd, "bwd_name", "bwd")
  k = len(r.consts) + len(leaves) - len(args_leaves)
  outs = prim.bind(*r.consts, *leaves, **{**params, "call_jaxpr": r.closed,
                                          "fwd_jaxpr_thunk": implicit_fwd,
                                          "num_consts": k})
  return r.unflatten(outs)


# ---------------------------------------------------------------------------
# pmap


def _pmap_handler(prim, vals, params):
  """pmap with implicit operands. A replicated one (in_axes None) reaches every device as
  its children and the body is re-traced on it, so it is never materialized; a mapped one
  (in_axes an int) is materialized before the split (its children need not share the mapped
  axis). Results are materialized inside the body when mapped, kept implicit (replicated)
  when out_axes is None."""
  import warnings
  in_axes, out_axes = params["in_axes"], params["out_axes"]
  mapped = [v for v, ax in zip(vals, in_axes) if is_implicit(v) and ax is not None]
  if mapped and warn_enabled() and any(type(v).warn_on_materialize for v in mapped):
    warnings.warn(f"pmap splits {', '.join(sorted({type(v).__name__ for v in mapped}))} along "
                  f"a mapped axis (in_axes not None): materializing it first. Pass it "
                  f"replicated (in_axes=None) to keep it implicit, or silence this with "
                  f"warn_on_materialize=False on the class or {WARN_ENV}=0.",
                  MaterializationWarning, stacklevel=4)
  vals = [materialize_value(v) if is_implicit(v) and ax is not None else v
          for v, ax in zip(vals, in_axes)]
  body_vals = [v if is_implicit(v) else mapping.mapped_aval(core.get_aval(v), ax)
               for v, ax in zip(vals, in_axes)]
  with batching.extend_axis_env(params["axis_name"], params["axis_size"]):
    r, _ = retrace(params["jaxpr"], body_vals, [ax is not None for ax in out_axes])
  leaves, new_in = [], [None] * len(r.consts)
  for v, ax in zip(vals, in_axes):
    ls = _flatten(v)[0] if is_implicit(v) else [v]
    leaves += ls
    new_in += [None if is_implicit(v) else ax] * len(ls)
  new_out = []
  for t, ax in zip(r.out_trees, out_axes):
    new_out += [ax] * t.num_leaves
  outs = prim.bind(*r.consts, *leaves, **{
      **params, "jaxpr": r.closed, "in_axes": tuple(new_in), "out_axes": tuple(new_out),
      "donated_invars": (False,) * len(new_in)})
  return r.unflatten(outs)


def _install():
  for name, rule in (("jit", _jit_handler), ("xla_pmap", _pmap_handler), ("remat2", _remat_handler),
                     ("custom_dce_call", _custom_dce_handler), ("cond", _cond_handler),
                     ("while", _while_handler), ("scan", _scan_handler),
                     ("custom_jvp_call", _custom_jvp_handler),
                     ("custom_vjp_call", _custom_vjp_handler)):
    register_higher_order(name)(rule)


_install()
