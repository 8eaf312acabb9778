"""`while_loop`: one `while` primitive carrying the cond and body as closed jaxprs, with every
rule beside it (abstract eval, lowering to `stablehlo.while`, jvp, partial eval, a transpose
that explains why reverse mode is not available, batching, DCE).

Operands are `(*cond_consts, *body_consts, *init)`; `cond_jaxpr` takes
`(*cond_consts, *carry)` and returns one bool scalar, `body_jaxpr` takes
`(*body_consts, *carry)` and returns the new carry. Design after JAX's `while_p`
(`_while_loop_jvp`, `_while_partial_eval`, `_while_loop_batching_rule`, `_while_dce_rule`).
"""
from __future__ import annotations

import weakref
from typing import Any, Callable, Sequence

from stagecraft.traceback_util import api_boundary
from stagecraft import core, dtypes, key_reuse, tree_util
from stagecraft.core import ClosedJaxpr, ShapedArray
from stagecraft.interpreters import ad, batching, lowering, mapping, partial_eval as pe
from stagecraft.lax.control_flow import common, refs as refs_lib
from stagecraft.lax import elementwise, reduction, shape as lax_shape, special

__all__ = ["while_loop", "while_p"]

_BOOL = ShapedArray((), dtypes.bool_)
_memo = core.memo_on_jaxpr


@api_boundary
def while_loop(cond_fun: Callable[[Any], Any], body_fun: Callable[[Any], Any],
               init_val: Any) -> Any:
  """Runs `body_fun` on a carry while `cond_fun` of it is true (JAX's `lax.while_loop`).

  Semantically::

    val = init_val
    while cond_fun(val):
      val = body_fun(val)
    return val

  staged as one `while` equation (lowered to `stablehlo.while`), so the trip count may
  depend on traced values.

  Args:
    cond_fun: carry -> bool scalar (`bool[]`).
    body_fun: carry -> carry of the same tree structure, shapes and dtypes.
    init_val: the initial carry, a pytree of arrays or scalars `T_i[*s_i]`.

  Returns:
    The final carry, a pytree like `init_val` with leaves `T_i[*s_i]`.

  Raises:
    TypeError: if `cond_fun` does not return a boolean scalar; if `body_fun` returns a
      different tree structure than `init_val`, or leaves of other shapes or dtypes (naming
      the carry path, e.g. `init_val[1]['w']`). A weakly typed leaf of `init_val` (a Python
      scalar) whose body output has the same dtype but strong type is promoted, as JAX does.
    ValueError: from reverse-mode differentiation (`grad`, `vjp`) through the loop: the trip
      count is dynamic, so no tape can be kept; use `scan` or `fori_loop` with static bounds.

  `cond_fun` and `body_fun` may read and write `Ref`s from outside them (closed over):
  their values are carried through the loop (after the user's carry) and the final values
  of those written are written back after it (JAX's state discharge; `refs.with_refs`).

  Examples:
    >>> import stagecraft as sc
    >>> int(sc.lax.while_loop(lambda i: i < 10, lambda i: i + 3, 0))
    12
  """
  def run(refs, values, written):
    if refs is None:
      return _while_loop(cond_fun, body_fun, init_val)
    gc = refs_lib.discharged(cond_fun, refs, written)
    gb = refs_lib.discharged(body_fun, refs, written)
    return _while_loop(lambda cv: gc(cv[1], cv[0])[0], lambda cv: gb(cv[1], cv[0]),
                       (init_val, values))
  return refs_lib.with_refs(run)


# NB: special's loops staged as lax ops (random_gamma_grad) use while_loop, which special
# cannot import (it comes first in lax's order): handed down here.
special.staged_while_loop = while_loop


def _while_loop(cond_fun: Callable[[Any], Any], body_fun: Callable[[Any], Any],
                init_val: Any) -> Any:
  """`while_loop` of functions that meet no ref from outside."""
  if not callable(cond_fun) or not callable(body_fun):
    raise TypeError("lax.while_loop: body_fun and cond_fun arguments should be callable.")
  init_vals, in_tree = common.flatten(init_val)
  args_tree = common.flatten((init_val,))[1]
  avals = [core.get_aval(x) for x in init_vals]
  cond_closed, cond_consts, body_closed, body_consts = _trace_loop(
      cond_fun, body_fun, args_tree, in_tree, avals)
  new_avals = common.promote_weak(avals, body_closed.out_avals)
  if new_avals is not None:
    init_vals = [x if a == b else common.cast(x, b.dtype)
                 for x, a, b in zip(init_vals, avals, new_avals)]
    avals = new_avals
    cond_closed, cond_consts, body_closed, body_consts = _trace_loop(
        cond_fun, body_fun, args_tree, in_tree, avals)
  common.check_carry_type("while_loop body", body_fun, in_tree, avals, in_tree,
                          body_closed.out_avals)

  def run():
    outs = while_p.bind(*cond_consts, *body_consts, *init_vals, cond_jaxpr=cond_closed,
                        body_jaxpr=body_closed, cond_nconsts=len(cond_consts),
                        body_nconsts=len(body_consts))
    return common.unflatten(in_tree, outs)

  body_keys = common.body_keys(body_closed) if key_reuse.enabled() else None
  cond_keys = common.body_keys(cond_closed) if key_reuse.enabled() else None
  if body_keys is None or cond_keys is None:
    return run()
  key_reuse.check_loop("while_loop", body_keys, len(init_vals), cond_keys)
  return key_reuse.call(body_keys, "while", tree_util.tree_leaves(init_val), run,
                        tree_util.tree_leaves, offset=len(cond_consts) + len(body_consts))


def _trace_loop(cond_fun, body_fun, args_tree, in_tree, avals):
  """Traces cond and body at the carry `avals` (`args_tree`: the tree of `(carry,)`;
  `in_tree`: the carry's) and checks cond's output type and body's output structure (the
  carry's types are checked after weak carries are promoted)."""
  cond_closed, cond_consts, cond_tree = common.trace_jaxpr(cond_fun, args_tree, avals,
                                                           "cond_fun")
  c_out = cond_closed.out_avals
  if cond_tree.num_leaves != 1 or cond_tree != common.flatten(0)[1]:   # JAX's words
    raise TypeError(f"cond_fun must return a boolean scalar, but got pytree "
                    f"{tree_util.treedef_str(cond_tree)}.")
  if cond_tree.num_leaves != 1 or c_out[0].shape != () or c_out[0].dtype != dtypes.bool_:
    raise TypeError(
        f"cond_fun must return a boolean scalar, but got output type(s) "
        f"{list(c_out)}. Return a bool[] such as "   # JAX's words: the avals' reprs
        f"`x < n`, or reduce an array predicate with `.any()` / `.all()`.")
  body_closed, body_consts, body_tree = common.trace_jaxpr(body_fun, args_tree, avals,
                                                           "body_fun")
  common.check_carry_type("while_loop body", body_fun, in_tree, None, body_tree, None)
  return cond_closed, cond_consts, body_closed, body_consts


# ---------------------------------------------------------------------------
# The primitive and its rules


def _split(xs: Sequence[Any], cond_nconsts: int, body_nconsts: int):
  return (list(xs[:cond_nconsts]), list(xs[cond_nconsts:cond_nconsts + body_nconsts]),
          list(xs[cond_nconsts + body_nconsts:]))


def _while_abstract_eval(*avals, cond_jaxpr: ClosedJaxpr, body_jaxpr: ClosedJaxpr,
                         cond_nconsts: int, body_nconsts: int):
  return list(body_jaxpr.out_avals)   # NB: a weak carry may come out strong, as in JAX


def _while_lowering(ctx, *args, cond_jaxpr: ClosedJaxpr, body_jaxpr: ClosedJaxpr,
                    cond_nconsts: int, body_nconsts: int):
  # NB: as JAX does, the consts travel as loop-carried values the body returns unchanged, so
  # the regions read nothing from the enclosing scope.
  avals = list(ctx.avals_in)
  nc, nconsts = cond_nconsts, cond_nconsts + body_nconsts
  # NB: ordered effects in the loop: the token is a loop-carried value (first).
  tok = int(lowering.has_ordered_effects(body_jaxpr.jaxpr)
            or lowering.has_ordered_effects(cond_jaxpr.jaxpr))

  pred_aval = cond_jaxpr.out_avals[0]
  batched = bool(pred_aval.shape)   # a batched while (see `_while_batch_jaxprs`)

  def cond_region(*xs):
    if tok:
      ctx.fb.token, xs = xs[0], xs[1:]
    preds = lowering.jaxpr_subcomp(ctx.fb, cond_jaxpr.jaxpr, [], [*xs[:nc], *xs[nconsts:]])
    if batched:   # the loop goes on while any lane's predicate holds
      preds = lowering.jaxpr_subcomp(ctx.fb, _any_jaxpr(pred_aval), [], preds)
    return preds

  def body_region(*xs):
    if tok:
      ctx.fb.token, xs = xs[0], xs[1:]
    outs = lowering.jaxpr_subcomp(ctx.fb, body_jaxpr.jaxpr, [], xs[nc:])
    if batched:   # lanes whose predicate is false keep their carry
      carry = xs[nconsts:]
      pred = lowering.jaxpr_subcomp(ctx.fb, cond_jaxpr.jaxpr, [], [*xs[:nc], *carry])
      outs = lowering.jaxpr_subcomp(
          ctx.fb, _select_jaxpr(pred_aval, tuple(body_jaxpr.out_avals)), [],
          [*pred, *outs, *carry])
    return [ctx.fb.token, *xs[:nconsts], *outs] if tok else [*xs[:nconsts], *outs]

  if tok:
    avals = [core.abstract_token, *avals]
    args = [ctx.get_token(), *args]
  cond_r = ctx.region(avals, [_BOOL], cond_region)
  body_r = ctx.region(avals, avals, body_region)
  outs = ctx.op("stablehlo.while", list(args), avals, regions=[cond_r, body_r],
                operand_avals=avals)
  if tok:
    ctx.set_token(outs[0])
  return outs[nconsts + tok:]


_lowering_jaxprs: dict = {}


def _any_jaxpr(pred_aval: ShapedArray) -> core.Jaxpr:
  """`pred: bool[*b] -> bool[]`, true when any lane's is (a batched while's condition)."""
  key = ("any", pred_aval)
  if key not in _lowering_jaxprs:
    axes = tuple(range(len(pred_aval.shape)))
    j, _ = pe.trace_to_jaxpr(lambda p: [reduction.reduce_or(p, axes)], [pred_aval])
    _lowering_jaxprs[key] = j
  return _lowering_jaxprs[key]


def _select_jaxpr(pred_aval: ShapedArray, carry_avals: tuple) -> core.Jaxpr:
  """`(pred: bool[*b], *new, *old) -> [where(pred, new, old) per carry]`, the predicate
  broadcast over each carry's leading (batch) dimensions (a batched while's body)."""
  key = ("select", pred_aval, carry_avals)
  if key not in _lowering_jaxprs:
    n = len(carry_avals)
    nb = len(pred_aval.shape)

    def select(p, *xs):
      outs = []
      for x_new, x_old, a in zip(xs[:n], xs[n:], carry_avals):
        pb = lax_shape.broadcast_in_dim(p, a.shape, tuple(range(nb)))
        outs.append(elementwise.select(pb, x_new, x_old))
      return outs

    j, _ = pe.trace_to_jaxpr(select, [pred_aval, *carry_avals, *carry_avals])
    _lowering_jaxprs[key] = j
  return _lowering_jaxprs[key]


# -- jvp

def _differentiable(a: ShapedArray) -> bool:
  return ad.tangent_aval(a).dtype != dtypes.float0


def _nonzero(t: Any, a: ShapedArray) -> bool:
  return type(t) is not ad.Zero and _differentiable(a)


def _jvp_jaxpr(closed: ClosedJaxpr, nonzeros: Sequence[bool], instantiate: Sequence[bool]):
  """Like `ad.jvp_jaxpr`, but output tangents marked in `instantiate` are materialized zeros
  when symbolically zero, and tangents of integer outputs are always dropped.

  Returns:
    `(jvp_closed, consts, out_nonzeros)`: jvp_closed takes `(consts, primals, nonzero
    tangents)` and returns `(primal outs, tangent outs where out_nonzeros)`.
  """
  avals, out_avals = closed.in_avals, closed.out_avals
  n = len(avals)
  out_nz: list[bool] = []

  def fun(*args):
    it = iter(args[n:])
    tangents = [next(it) if nz else ad.Zero(ad.tangent_aval(a)) for a, nz in zip(avals, nonzeros)]
    p_out, t_out = ad.jvp_flat(core.jaxpr_as_fun(closed), args[:n], tangents)
    out_nz[:] = [_differentiable(a) and (inst or type(t) is not ad.Zero)
                 for a, t, inst in zip(out_avals, t_out, instantiate)]
    return [*p_out, *[ad.instantiate_zeros(t) for t, nz in zip(t_out, out_nz) if nz]]

  t_avals = [ad.tangent_aval(a) for a, nz in zip(avals, nonzeros) if nz]
  jaxpr, consts = pe.trace_to_jaxpr(fun, [*avals, *t_avals])
  return ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), []), list(consts), list(out_nz)


_jvp_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _while_jvp_jaxprs(cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, bconst_nz, init_nz):
  carry_avals = body_jaxpr.in_avals[body_nconsts:]
  carry_nz = list(init_nz)
  # Fixpoint: a carry's tangent is nonzero if the body makes it depend on a nonzero one.
  while True:
    _, _, out_nz = _jvp_jaxpr(body_jaxpr, [*bconst_nz, *carry_nz], carry_nz)
    new = [a or b for a, b in zip(carry_nz, out_nz)]
    if new == carry_nz:
      break
    carry_nz = new
  body_jvp, jvp_consts, _ = _jvp_jaxpr(body_jaxpr, [*bconst_nz, *carry_nz], carry_nz)
  # Reorder the invars (jc, bconsts, carry, bconst tangents, carry tangents) into the while
  # convention (body consts first: jc, bconsts, bconst tangents; then the carry).
  nj, nb, ncarry = len(jvp_consts), body_nconsts, len(carry_avals)
  nbt = sum(bconst_nz)
  iv = body_jvp.jaxpr.invars
  jc, bp, cp = iv[:nj], iv[nj:nj + nb], iv[nj + nb:nj + nb + ncarry]
  bt, ct = iv[nj + nb + ncarry:nj + nb + ncarry + nbt], iv[nj + nb + ncarry + nbt:]
  body_new = ClosedJaxpr(body_jvp.jaxpr.replace(invars=[*jc, *bp, *bt, *cp, *ct]), [])
  t_avals = [ad.tangent_aval(a) for a, nz in zip(carry_avals, carry_nz) if nz]
  cond_new = common.pad_invars(cond_jaxpr, [], t_avals)
  return cond_new, body_new, jvp_consts, carry_nz


def _while_jvp(primals, tangents, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
  # The JVP is one while over (primals, nonzero tangents); the cond ignores the tangents.
  avals = [*cond_jaxpr.in_avals[:cond_nconsts], *body_jaxpr.in_avals]
  nz = [_nonzero(t, a) for t, a in zip(tangents, avals)]
  _, bconst_nz, init_nz = _split(nz, cond_nconsts, body_nconsts)
  key = (cond_jaxpr, cond_nconsts, body_nconsts, tuple(bconst_nz), tuple(init_nz),
         ad.jvp_mode())
  cond_new, body_new, jvp_consts, carry_nz = _memo(
      _jvp_cache, body_jaxpr, key,
      lambda: _while_jvp_jaxprs(cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts,
                                bconst_nz, init_nz))
  cconst_p, bconst_p, init_p = _split(primals, cond_nconsts, body_nconsts)
  _, bconst_t, init_t = _split(tangents, cond_nconsts, body_nconsts)
  bt = [t for t, z in zip(bconst_t, bconst_nz) if z]
  carry_avals = body_jaxpr.in_avals[body_nconsts:]
  ct = [t if _nonzero(t, a) else ad.zeros_like_aval(ad.tangent_aval(a))
        for t, a, z in zip(init_t, carry_avals, carry_nz) if z]
  outs = while_p.bind(*cconst_p, *jvp_consts, *bconst_p, *bt, *init_p, *ct,
                      cond_jaxpr=cond_new, body_jaxpr=body_new, cond_nconsts=cond_nconsts,
                      body_nconsts=len(jvp_consts) + body_nconsts + len(bt))
  n = len(init_p)
  it = iter(outs[n:])
  t_out = [next(it) if z else ad.Zero(ad.tangent_aval(a)) for z, a in zip(carry_nz, carry_avals)]
  return outs[:n], t_out


# -- partial eval

_pe_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _known_part(closed: ClosedJaxpr, unknowns: Sequence[bool], n_known_out: int):
  """The jaxpr computing the known outputs of `closed` from its known inputs only."""
  known, _, nres, _ = ad.partial_eval_jaxpr(closed.jaxpr, unknowns,
                                            [False] * len(closed.out_avals))
  keep = [True] * (len(known.outvars) - nres) + [False] * nres
  assert len(known.outvars) - nres == n_known_out
  return ClosedJaxpr(pe.dce_jaxpr(known, keep, instantiate=True)[0], [])


def _while_pe_jaxprs(cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, unknowns):
  cconst_uk, bconst_uk, init_uk = _split(unknowns, cond_nconsts, body_nconsts)
  carry_uk = list(init_uk)
  while True:   # fixpoint: which carries are unknown
    _, _, _, out_uk = ad.partial_eval_jaxpr(body_jaxpr.jaxpr, [*bconst_uk, *carry_uk],
                                            [False] * len(carry_uk))
    new = [a or b for a, b in zip(carry_uk, out_uk)]
    if new == carry_uk:
      break
    carry_uk = new
  _, _, _, cond_uk = ad.partial_eval_jaxpr(cond_jaxpr.jaxpr, [*cconst_uk, *carry_uk], [False])
  if cond_uk[0]:
    return None
  cond_known = _known_part(cond_jaxpr, [*cconst_uk, *carry_uk], 1)
  body_known = _known_part(body_jaxpr, [*bconst_uk, *carry_uk], carry_uk.count(False))
  return cond_known, body_known, carry_uk


def _while_partial_eval(eqn, unknowns):
  # JAX's `_while_partial_eval`: if the predicate reads only known values, a known while
  # computes the known carries, and the unknown equation is the whole while again (it
  # recomputes the known part), reading the known inputs as residuals.
  p = eqn.params
  nc, nb = p["cond_nconsts"], p["body_nconsts"]
  res = _memo(_pe_cache, p["body_jaxpr"], (p["cond_jaxpr"], nc, nb, tuple(unknowns)),
              lambda: _while_pe_jaxprs(p["cond_jaxpr"], p["body_jaxpr"], nc, nb, unknowns))
  if res is None:
    return None, eqn, [True] * len(eqn.outvars)
  cond_known, body_known, carry_uk = res
  cconst_uk, bconst_uk, _ = _split(unknowns, nc, nb)
  cconsts, bconsts, init = _split(eqn.invars, nc, nb)
  known_cc = [v for v, u in zip(cconsts, cconst_uk) if not u]
  known_bc = [v for v, u in zip(bconsts, bconst_uk) if not u]
  known_eqn = core.JaxprEqn(
      [*known_cc, *known_bc, *[v for v, u in zip(init, carry_uk) if not u]],
      [v for v, u in zip(eqn.outvars, carry_uk) if not u], while_p,
      {"cond_jaxpr": cond_known, "body_jaxpr": body_known, "cond_nconsts": len(known_cc),
       "body_nconsts": len(known_bc)})
  if not any(carry_uk):   # only unused consts are unknown
    return known_eqn, None, carry_uk
  unknown_eqn = eqn.replace(outvars=[v if u else pe.DropVar(v.aval)
                                     for v, u in zip(eqn.outvars, carry_uk)])
  return known_eqn, unknown_eqn, carry_uk


# -- transpose

def _while_transpose(cts, *args, **params):
  raise ValueError(
      "Reverse-mode differentiation does not work for lax.while_loop or lax.fori_loop with "
      "dynamic start/stop values. Try using lax.scan, or using fori_loop with static "
      "start/stop.")


# -- batching

_batch_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _while_batch_jaxprs(cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, axis_data,
                        cconst_b, bconst_b, init_b):
  dim = lambda b: 0 if b else None   # noqa: E731
  carry_b = list(init_b)
  while True:   # fixpoint: which carries are batched
    _, _, out_dims = batching.batch_jaxpr(body_jaxpr, axis_data,
                                          [dim(b) for b in (*bconst_b, *carry_b)],
                                          [None] * len(carry_b))
    new = [b or d is not None for b, d in zip(carry_b, out_dims)]
    if new == carry_b:
      break
    carry_b = new
  _, _, (pred_dim,) = batching.batch_jaxpr(cond_jaxpr, axis_data,
                                           [dim(b) for b in (*cconst_b, *carry_b)], [None])
  if pred_dim is None:
    # NB: as JAX's: the carries are batched after the predicate's own dimensions (a while
    # batched before has a per-lane predicate that the lowering broadcasts over the
    # carries' leading dimensions)
    rank = len(cond_jaxpr.out_avals[0].shape)
    cdim = lambda b: rank if b else None   # noqa: E731
    cond_b, cond_c, _ = batching.batch_jaxpr(
        cond_jaxpr, axis_data, [*map(dim, cconst_b), *map(cdim, carry_b)], [None])
    body_b, body_c, _ = batching.batch_jaxpr(
        body_jaxpr, axis_data, [*map(dim, bconst_b), *map(cdim, carry_b)],
        [cdim(b) for b in carry_b])
    return cond_b, [*cond_c, _CC], body_b, [*body_c, _BC], carry_b, rank
  # A batched predicate (JAX 0.10's batched while): every carry is batched and the cond
  # returns the per-lane predicate; the lowering runs the loop while any lane's holds and
  # keeps the carry of the lanes whose predicate is false (`_while_lowering`).
  if any(getattr(e, "io", None) == "unordered"
         for j in (body_jaxpr, cond_jaxpr) for e in j.effects):
    # NB: as JAX's: the finished lanes' iterations would run their callbacks too
    raise Exception("Unordered IO effects not supported in while_loop with batched "
                    "predicate")
  carry_b = [True] * len(carry_b)
  cond_b, cond_c, _ = batching.batch_jaxpr(cond_jaxpr, axis_data,
                                           [dim(b) for b in (*cconst_b, *carry_b)], [0])
  body_b, body_c, _ = batching.batch_jaxpr(body_jaxpr, axis_data,
                                           [dim(b) for b in (*bconst_b, *carry_b)],
                                           [0] * len(carry_b))
  return cond_b, [*cond_c, _CC], body_b, [*body_c, _BC], carry_b, 0


# Markers in an operand layout: where the original cond / body consts go.
_CC, _BC = object(), object()


def _while_batch(axis_data, args, dims, *, cond_jaxpr, body_jaxpr, cond_nconsts,
                 body_nconsts):
  # An axis rule (called even when nothing is batched, so collectives in the bodies see the
  # axis). Batched operands are moved to axis 0; the outputs are batched at 0 or not at all.
  size = axis_data.size
  batched = [d is not None for d in dims]
  cconst_b, bconst_b, init_b = _split(batched, cond_nconsts, body_nconsts)
  key = (cond_jaxpr, cond_nconsts, body_nconsts, axis_data, tuple(batched))
  cond_new, cond_layout, body_new, body_layout, carry_b, axis = _memo(
      _batch_cache, body_jaxpr, key,
      lambda: _while_batch_jaxprs(cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts,
                                  axis_data, cconst_b, bconst_b, init_b))
  n_consts = cond_nconsts + body_nconsts
  args = [batching.moveaxis(x, d, 0 if i < n_consts else axis) if d is not None else x
          for i, (x, d) in enumerate(zip(args, dims))]
  cconsts, bconsts, init = _split(args, cond_nconsts, body_nconsts)
  init = [batching.broadcast(x, size, axis) if b and not ib else x
          for x, b, ib in zip(init, carry_b, init_b)]

  def expand(layout):
    out = []
    for x in layout:
      out.extend(cconsts if x is _CC else bconsts if x is _BC else [x])
    return out
  cc, bc = expand(cond_layout), expand(body_layout)
  outs = while_p.bind(*cc, *bc, *init, cond_jaxpr=cond_new, body_jaxpr=body_new,
                      cond_nconsts=len(cc), body_nconsts=len(bc))
  return outs, [axis if b else None for b in carry_b]


# -- DCE

_dce_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _while_dce_jaxprs(cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, used_outs):
  nc, nb = cond_nconsts, body_nconsts
  _, cond_used = pe.dce_jaxpr(cond_jaxpr.jaxpr, [True])
  live = [u or c for u, c in zip(used_outs, cond_used[nc:])]
  while True:   # fixpoint: a carry is live if the body computes a live carry from it
    _, body_used = pe.dce_jaxpr(body_jaxpr.jaxpr, live)
    new = [a or b for a, b in zip(live, body_used[nb:])]
    if new == live:
      break
    live = new
  cond_j, cond_used = pe.dce_jaxpr(cond_jaxpr.jaxpr, [True], instantiate=[False] * nc + live)
  body_j, body_used = pe.dce_jaxpr(body_jaxpr.jaxpr, live, instantiate=[False] * nb + live)
  return (ClosedJaxpr(cond_j, []), ClosedJaxpr(body_j, []), cond_used[:nc], body_used[:nb],
          live)


def _while_dce(used_outs, eqn):
  # Dead carries (no used output reads them, nor the cond, nor any live carry's update) and
  # the work only they needed go from the cond and body; unused consts are pruned. As in
  # JAX, a while none of whose outputs is used is removed (it has no effects).
  if not any(used_outs):
    return [False] * len(eqn.invars), None
  p = eqn.params
  nc, nb = p["cond_nconsts"], p["body_nconsts"]
  cond_new, body_new, cc_used, bc_used, live = _memo(
      _dce_cache, p["body_jaxpr"], (p["cond_jaxpr"], nc, nb, tuple(used_outs)),
      lambda: _while_dce_jaxprs(p["cond_jaxpr"], p["body_jaxpr"], nc, nb, used_outs))
  used_ins = [*cc_used, *bc_used, *live]
  if all(used_ins):
    return used_ins, eqn
  return used_ins, eqn.replace(
      invars=[v for v, u in zip(eqn.invars, used_ins) if u],
      outvars=[v for v, u in zip(eqn.outvars, live) if u],
      params={"cond_jaxpr": cond_new, "body_jaxpr": body_new, "cond_nconsts": sum(cc_used),
              "body_nconsts": sum(bc_used)})


def _while_replication(in_vary, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
  c_consts = in_vary[:cond_nconsts]
  b_consts = in_vary[cond_nconsts:cond_nconsts + body_nconsts]
  init = in_vary[cond_nconsts + body_nconsts:]
  # NB: where the predicate varies, devices may run different numbers of iterations.
  carry, _ = mapping.loop_fixpoint(
      body_jaxpr.jaxpr, b_consts, list(init), [],
      extra=lambda c: mapping.varying_axes(cond_jaxpr.jaxpr, [*c_consts, *c]))
  return carry


while_p = core.Primitive("while")
while_p.multiple_results = True
# impl: the generic one (lower the one-equation jaxpr, run the cached executable)
while_p.def_abstract_eval(_while_abstract_eval)
lowering.register_lowering(while_p, _while_lowering)
ad.primitive_jvps[while_p] = _while_jvp
ad.partial_eval_rules[while_p] = _while_partial_eval
ad.primitive_transposes[while_p] = _while_transpose
batching.fancy_primitive_batchers[while_p] = _while_batch
pe.dce_rules[while_p] = _while_dce
mapping.replication_rules[while_p] = _while_replication
