"""`scan` (one `scan` primitive with all its rules), `fori_loop` and `map` built on it.

`scan_p` operands are `(*consts, *init, *xs)`; its `jaxpr` takes `(consts, carry, x)` and
returns `(carry_out, y)`; the outputs are the final carry and the `ys` stacked along a new
leading axis of size `length`. The rules follow JAX's (`_scan_jvp`, `_scan_partial_eval`,
`_scan_transpose`, `_scan_batching_rule`, `_scan_dce_rule` in JAX's `lax/control_flow/loops`):
fixed points decide which carries are nonzero (jvp), unknown (partial eval), batched and live
(DCE); partial evaluation forwards residuals that are the loop's own constants or `xs`
instead of stacking copies of them. The front end forwards as JAX's `scan` does: a carry the
body returns unchanged becomes a constant of the loop, a `y` that is an `x` is not stacked.
"""
from __future__ import annotations

import operator
import weakref
from typing import Any, Callable, Sequence

import numpy as np

from stagecraft.traceback_util import api_boundary
from stagecraft import core, dtypes, key_reuse, shape_poly, tree_util
from stagecraft.core import ClosedJaxpr, Jaxpr, ShapedArray, Var
from stagecraft.interpreters import ad, batching, calls, lowering, mapping, partial_eval as pe
from stagecraft.lax.control_flow import common, refs as refs_lib
from stagecraft.lax import elementwise, shape as lax_shape, slicing
from stagecraft.lax.control_flow.while_op import while_loop
from stagecraft.runtime import dispatch

__all__ = ["scan", "scan_p", "fori_loop", "map"]

_memo = core.memo_on_jaxpr
_I32 = ShapedArray((), np.dtype(np.int32))


_split = core.split_list


# ---------------------------------------------------------------------------
# The public function


def _slice_aval(a):
  """The aval of one slice of xs along its leading axis: its type's other spec entries
  (and unreduced/reduced axes) are kept, as JAX's `mapped_aval`; a hijax type's slice is
  its `dec_rank` along its `leading_axis_spec()`."""
  if core.is_hi(a):
    spec = a.leading_axis_spec()
    return a.dec_rank(a.shape[0], spec)
  ts = getattr(a, "_sharding", None)
  if ts is None:
    return a.update(shape=a.shape[1:])
  ents = tuple(ts.spec) + (None,) * (len(a.shape) - len(ts.spec))
  spec = ts.spec.update(partitions=ents[1:])
  keep = any(e is not None for e in ents[1:]) or spec.unreduced or spec.reduced
  return a.update(shape=a.shape[1:], sharding=ts.update(spec=spec) if keep else None)


@api_boundary
def scan(f: Callable, init: Any, xs: Any = None, length: int | None = None,
         reverse: bool = False, unroll: int | bool = 1,
         _split_transpose: bool = False) -> tuple[Any, Any]:
  """Loops `f` over the leading axis of `xs`, carrying state: JAX's `lax.scan`.

  Semantics (one primitive, staged as a `stablehlo.while`):

      def scan(f, init, xs, length=None):
        carry, ys = init, []
        for x in xs:
          carry, y = f(carry, x)
          ys.append(y)
        return carry, stack(ys)

  Args:
    f: `f(carry, x) -> (carry, y)`; the carry keeps its pytree structure, shapes and dtypes.
    init: the initial carry, a pytree of arrays.
    xs: a pytree of arrays `T[length, ...]` scanned along axis 0, or None.
    length: the number of iterations; required when `xs` has no leaves.
    reverse: scan from the end (`ys` still in index order).
    unroll: iterations per loop step (an int >= 0; 0 or True unrolls fully, False or 1
      leaves the loop rolled).
    _split_transpose: JAX's experimental switch that splits the scan's transpose into two
      loops (a memory/scheduling choice); accepted for JAX's signature (flax.nnx.scan passes
      it) and ignored: the values are the same.

  Returns:
    `(final_carry, ys)`, `ys` the stacked `y`s with leading axis `length`. As in JAX, a
    carry leaf the body returns unchanged is the `init` leaf itself (a constant of the loop),
    and a `y` leaf that is an `x` leaf is that `xs` leaf (a NumPy array put on the device).

  `f` may read and write `Ref`s from outside it (closed over): their values are carried
  through the loop (after the user's carry) and the final values of those written are
  written back after it (JAX's state discharge; `refs.with_refs`).

  Raises:
    TypeError: if `f` is not callable, its output is not a pair, or the carry output
      differs from the carry input in structure, shape or dtype (naming the positions).
    ValueError: for `xs` leaves with different leading sizes, scalars in `xs`, a `length`
      that disagrees with them, or no `xs` and no `length`.
  """
  def run(refs, values, written):
    if refs is None:
      return _scan(f, init, xs, length, reverse, unroll)
    g = refs_lib.discharged(f, refs, written)

    def body(carry, x):
      c, vals = carry
      (c2, y), finals = g(vals, c, x)
      return (c2, finals), y
    (c, finals), ys = _scan(body, (init, values), xs, length, reverse, unroll)
    return (c, ys), finals
  return refs_lib.with_refs(run)


def _scan(f: Callable, init: Any, xs: Any, length: int | None, reverse: bool,
          unroll: int | bool) -> tuple[Any, Any]:
  """`scan` of a body that meets no ref from outside."""
  if not callable(f):
    raise TypeError("lax.scan: f argument should be a callable.")
  xs_flat, xs_tree = common.flatten(xs)
  xs_avals = [core.get_aval(x) for x in xs_flat]
  if any(core.is_hi(a) for a in xs_avals) and length is None:
    raise ValueError("must provide `length` to `scan`")   # as JAX's, for hijax-typed xs
  for p, a in zip(common.leaf_paths(xs_tree, "xs"), xs_avals):
    if not core.is_hi(a) and not a.shape:
      raise ValueError(f"scan got value with no leading axis to scan over: {p} has shape "
                       f"(); every leaf of xs needs a leading axis of size length.")
  # As JAX's: the scanned axis may not be split over Explicit mesh axes (type sharding).
  if any(getattr(a, "_sharding", None) is not None and a.sharding.spec[0] is not None
         for a in xs_avals):
    raise ValueError("0th dimension of all xs should be replicated. Got "
                     + ", ".join(str(a.sharding.spec) for a in xs_avals))
  sizes = sorted({a.shape[0] for a in xs_avals if not core.is_hi(a)})
  if length is not None:
    if isinstance(length, core.Tracer) and length.to_concrete_value() is None:
      # as JAX's: a ConcretizationTypeError with its words
      raise length._concretization_error(
          "scan", fix="The `length` argument to `scan` expects a concrete `int` value. For "
                      "scan-like iteration with a dynamic length, use `while_loop` or "
                      "`fori_loop`.")
    try:
      length = operator.index(length)
    except TypeError:
      raise TypeError(f"scan: length must be a concrete int, got {length!r}.") from None
    if length < 0:
      raise ValueError(f"scan: length must be non-negative, got {length}.")
    if sizes and sizes != [length]:
      raise ValueError(f"scan got `length` argument of {length} which disagrees with leading "
                       f"axis sizes {sizes}.")
  elif not sizes:
    raise ValueError("scan got no values to scan over and `length` not provided.")
  elif len(sizes) > 1:
    msg = ", ".join(f"{p} of leading size {a.shape[0]}" for p, a in
                    zip(common.leaf_paths(xs_tree, "xs"), xs_avals))
    raise ValueError(f"scan got values with different leading axis sizes: {msg}. All leaves "
                     f"of xs must share the leading axis.")
  else:
    length = sizes[0]
  if isinstance(unroll, core.Tracer):
    unroll = unroll._concrete("scan", fix="The `unroll` argument to `scan` expects a concrete "
                                          "`int` or `bool` value.")
    unroll = unroll.item() if hasattr(unroll, "item") else unroll
  if isinstance(unroll, (bool, np.bool_)):
    unroll = max(length, 1) if unroll else 1
  try:
    unroll = operator.index(unroll)
  except TypeError:
    raise TypeError(f"scan: unroll must be an int or a bool, got {unroll!r}.") from None
  if unroll < 0:   # JAX's words; 0 unrolls the whole loop, as JAX's
    raise ValueError("`unroll` must be a `bool` or a non-negative `int`.")
  init_flat, init_tree = common.flatten(init)
  carry_avals = [core.get_aval(x) for x in init_flat]
  x_avals = [_slice_aval(a) for a in xs_avals]
  in_tree = _pair_tree(init_tree, xs_tree)
  try:
    closed, consts, carry_tree, y_tree = _trace_body(f, in_tree, init_tree, carry_avals,
                                                     x_avals)
  except core.MutableHiError as e:   # mutable hijax values the body closes over
    if hi_mutable_scan[0] is None or not e.values:
      raise
    return hi_mutable_scan[0](f, init, xs, length, reverse, unroll, e)
  nk = len(init_flat)
  promoted = (common.promote_weak(carry_avals, closed.out_avals[:nk])
              if carry_tree == init_tree else None)   # else check_carry_type says how
  if promoted is not None:
    init_flat = [x if a.dtype == p.dtype else common.cast(x, p.dtype)
                 for x, a, p in zip(init_flat, carry_avals, promoted)]
    carry_avals = promoted
    closed, consts, carry_tree, y_tree = _trace_body(f, in_tree, init_tree, promoted, x_avals)
  common.check_carry_type("scan body", f, init_tree, carry_avals, carry_tree,
                          closed.out_avals[:nk])
  if (hi_scan[0] is not None and any(core.is_hi(a) for a in (*closed.in_avals, *closed.out_avals))
      and not any(isinstance(x, core.Tracer) for x in (*consts, *init_flat, *xs_flat))):
    # eager scan of hijax-typed values: a scan of their arrays (experimental.hijax)
    carry, ys = hi_scan[0](closed, consts, init_flat, xs_flat, nk, length, reverse, unroll)
    return common.unflatten(carry_tree, carry), common.unflatten(y_tree, ys)
  body_keys = common.body_keys(closed) if key_reuse.enabled() else None
  if body_keys is not None:
    key_reuse.check_loop("scan", body_keys, len(tree_util.tree_leaves(init)))
    return key_reuse.call(
        body_keys, "scan", tree_util.tree_leaves((init, xs)),
        lambda: _bind_scan(closed, consts, init_flat, xs_flat, nk, length, reverse, unroll,
                           carry_tree, y_tree),
        tree_util.tree_leaves, offset=len(consts))
  return _bind_scan(closed, consts, init_flat, xs_flat, nk, length, reverse, unroll,
                    carry_tree, y_tree)


#: Set by `experimental.hijax`: `hi_scan[0](closed, consts, init, xs, num_carry, length,
#: reverse, unroll) -> (carry leaves, ys leaves)` runs an eager scan whose body takes or
#: gives hijax-typed values as a scan of their arrays (JAX's `scan_p.to_lojax`).
hi_scan: list = [None]
#: Set by `experimental.hijax`: `hi_mutable_scan[0](f, init, xs, length, reverse, unroll,
#: err)` runs a scan whose body closes over the mutable hijax values `err.values` (their
#: states carried as arrays).
hi_mutable_scan: list = [None]


def _bind_scan(closed, consts, init_flat, xs_flat, nk, length, reverse, unroll, carry_tree,
               y_tree):
  """Binds the scan of the traced body `closed` (constants `consts`) and rebuilds the
  `(carry, ys)` pytrees."""
  closed, moved, ys_fwd = _memo(_fwd_tables, closed, (len(consts), nk), lambda: _forwarded(
      closed, len(consts), nk))
  init_c = [x for x, m in zip(init_flat, moved) if m]
  init_k = [x for x, m in zip(init_flat, moved) if not m]
  outs = scan_p.bind(*init_c, *consts, *init_k, *xs_flat, jaxpr=closed,
                     num_consts=len(init_c) + len(consts), num_carry=len(init_k),
                     length=length, reverse=bool(reverse), unroll=unroll)
  # A carry the body passes through is its initial value; a y that is an x is that x.
  it_k, it_y = iter(outs[:len(init_k)]), iter(outs[len(init_k):])
  carry = [x if m else next(it_k) for x, m in zip(init_flat, moved)]
  ys = [next(it_y) if f is None else _maybe_put(xs_flat[f]) for f in ys_fwd]
  return (common.unflatten(carry_tree, carry), common.unflatten(y_tree, ys))


_fwd_tables: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _forwarded(closed: ClosedJaxpr, nc: int, nk: int):
  """The scan body without the outputs it forwards, as JAX's `scan` (it reads the
  jaxpr's forwarding, `common.jaxpr_forwarding`): a carry returned unchanged is read only, so it
  becomes a constant of the loop (before the body's constants); a y that is an x is not
  stacked again.

  Returns:
    `(closed, moved, ys_fwd)`: `moved` one bool per carry (now a constant), `ys_fwd` one
    entry per y, the index among the xs of the x it is, or None.
  """
  j = closed.jaxpr
  fwd = common.jaxpr_forwarding(j)
  moved = [f == nc + i for i, f in enumerate(fwd[:nk])]
  ys_fwd = [f - nc - nk if f is not None and f >= nc + nk else None for f in fwd[nk:]]
  if not any(moved) and all(f is None for f in ys_fwd):
    return closed, moved, ys_fwd
  c_in, k_in, x_in = _split(list(j.invars), nc, nk)
  k_out, y_out = _split(list(j.outvars), nk)
  j = j.replace(
      invars=[*[v for v, m in zip(k_in, moved) if m], *c_in,
              *[v for v, m in zip(k_in, moved) if not m], *x_in],
      outvars=[*[v for v, m in zip(k_out, moved) if not m],
               *[v for v, f in zip(y_out, ys_fwd) if f is None]])
  return ClosedJaxpr(j, closed.consts), moved, ys_fwd


def _maybe_put(x: Any) -> Any:
  """`x` returned by `scan` as a result: a NumPy array goes to the device (JAX's
  `_maybe_put`)."""
  return dispatch.device_put_leaf(x, None, "") if isinstance(x, np.ndarray) else x


def _pair_tree(a_tree, b_tree):
  """The treedef of the pair `(a, b)` from the treedefs of a and b."""
  a = common.unflatten(a_tree, [0] * a_tree.num_leaves)
  b = common.unflatten(b_tree, [0] * b_tree.num_leaves)
  return common.flatten((a, b))[1]


def _trace_body(f, in_tree, init_tree, carry_avals, x_avals):
  closed, consts, out_tree = common.trace_jaxpr(f, in_tree, [*carry_avals, *x_avals],
                                                "scan body")
  dummy = common.unflatten(out_tree, list(range(out_tree.num_leaves)))
  if not isinstance(dummy, (tuple, list)) or len(dummy) != 2:
    # JAX's words: a single array output is named by its type (`float32[]`)
    got = (closed.out_avals[0].str_short(short_dtypes=False)
           if out_tree.num_leaves == 1 and out_tree == common.flatten(0)[1]
           else f"a value of structure {tree_util.treedef_str(out_tree)}")
    raise TypeError(f"scan body output must be a pair, got {got}. Return (carry, y).")
  carry_tree = common.flatten(dummy[0])[1]
  y_tree = common.flatten(dummy[1])[1]
  return closed, consts, carry_tree, y_tree


# ---------------------------------------------------------------------------
# The primitive: abstract eval and lowering

scan_p = core.Primitive("scan")
scan_p.multiple_results = True


def _scan_abstract_eval(*avals, jaxpr: ClosedJaxpr, num_consts: int, num_carry: int,
                        length: int, reverse: bool, unroll: int):
  outs = jaxpr.out_avals
  return [*outs[:num_carry], *[_stacked_aval(a, length) for a in outs[num_carry:]]]


def _stacked_aval(a, length: int):
  """The aval of `length` stacked values of aval `a`: its type with an unsplit leading
  dimension (unreduced/reduced axes kept), as JAX's `unmapped_aval`; for a hijax type its
  `inc_rank` along its `leading_axis_spec()`."""
  if core.is_hi(a):
    spec = a.leading_axis_spec()
    return a.inc_rank(length, spec)
  ts = getattr(a, "_sharding", None)
  if ts is None:
    return a.update(shape=(length, *a.shape))
  ents = tuple(ts.spec) + (None,) * (len(a.shape) - len(ts.spec))
  return a.update(shape=(length, *a.shape),
                  sharding=ts.update(spec=ts.spec.update(partitions=(None, *ents))))


_step_cache_tables: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def step_jaxpr(jaxpr: ClosedJaxpr, num_consts, num_carry, length, reverse, steps: int,
                state_avals):
  """A jaxpr doing `steps` iterations on the loop state `(xs, consts, i, carry, ys)`: slices
  `xs` at the iteration's position, runs the body, writes `y` into the `ys` buffers.

  NB: the state's order is that of JAX's scan loop (the values its body reads from the
  enclosing scope, xs first then consts, then the counter, carry and ys buffers): XLA's
  simplification of the loop (and so the last bit of some results) depends on it."""
  nc, nk = num_consts, num_carry
  nx = len(jaxpr.in_avals) - nc - nk
  symbolic = any(shape_poly.is_symbolic_dim(d) for a in (*state_avals, *jaxpr.in_avals)
                 for d in getattr(a, "shape", ()))

  def step(*state):
    xs, consts, (i,), carry, ys = _split(list(state), nx, nc, 1, nk)
    for k in range(steps):
      idx = i + k if k else i
      pos = (length - 1) - idx if reverse else idx
      x = [slicing.dynamic_index_in_dim(a, pos, 0, keepdims=False,
                                        allow_negative_indices=False) for a in xs]
      # NB: the body as one `closed_call` (a `func.call` of a private function), as JAX's
      # scan lowering calls it: XLA then folds constants in the body as for JAX's program
      # (inlined, its folded constants can differ in the last bit).
      # (With symbolic dimensions, export's lowering inlines it: no private function.)
      outs = (core.eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *consts, *carry, *x) if symbolic
              else calls.closed_call_p.bind(*consts, *carry, *x, call_jaxpr=jaxpr))
      carry, y = outs[:nk], outs[nk:]
      ys = [slicing.dynamic_update_index_in_dim(b, v, pos, 0, allow_negative_indices=False)
            for b, v in zip(ys, y)]
    return [*xs, *consts, i + steps, *carry, *ys]

  j, consts = pe.trace_to_jaxpr(step, state_avals)
  if consts:
    raise AssertionError("scan lowering: the loop step captured constants")
  return j


def _scan_lowering(ctx, *args, jaxpr: ClosedJaxpr, num_consts: int, num_carry: int,
                   length: int, reverse: bool, unroll: int):
  nc, nk = num_consts, num_carry
  consts, init, xs = _split(list(args), nc, nk)
  c_avals, k_avals, x_avals = _split(list(ctx.avals_in), nc, nk)
  y_avals = list(ctx.avals_out[nk:])
  # The loop state, as JAX's: xs and consts (read only), the step counter, carry, ys buffers.
  nx = len(x_avals)
  state_avals = [*x_avals, *c_avals, _I32, *ctx.avals_out[:nk], *y_avals]
  state = [*xs, *consts, ctx.constant(0, _I32), *init, *[ctx.constant(0, a) for a in y_avals]]
  key = (nc, nk, length, reverse, tuple(state_avals))

  def step(n):
    return _memo(_step_cache_tables, jaxpr, (*key, n), lambda: step_jaxpr(
        jaxpr, nc, nk, length, reverse, n, state_avals))

  fb = ctx.fb
  # unroll 0 (JAX's): the whole loop unrolled, as one of `unroll` steps that covers it
  iters, rem = (0, length) if unroll == 0 else divmod(length, unroll)
  if iters == 1:
    state = lowering.jaxpr_subcomp(fb, step(unroll), [], state)
  elif iters > 1:
    body_j = step(unroll)
    bound = iters * unroll

    def cond_body(*names):
      lim = lowering.constant(fb, bound, _I32)
      return lowering.emit_op(
          fb, "stablehlo.compare", [names[nx + nc], lim], ["tensor<i32>", "tensor<i32>"],
          ["tensor<i1>"], "comparison_direction = #stablehlo<comparison_direction LT>, "
          "compare_type = #stablehlo<comparison_type SIGNED>")

    if lowering.has_ordered_effects(body_j):
      # NB: ordered effects in the loop: the token is a loop-carried value (first).
      def tok_cond(tok, *names):
        return cond_body(*names)

      def tok_body(tok, *names):
        fb.token = tok
        outs = lowering.jaxpr_subcomp(fb, body_j, [], names)
        return [fb.token, *outs]
      tok_avals = [core.abstract_token, *state_avals]
      cond = ctx.region(tok_avals, [ShapedArray((), np.dtype(np.bool_))], tok_cond)
      body = ctx.region(tok_avals, tok_avals, tok_body)
      tok, *state = ctx.op("stablehlo.while", [ctx.get_token(), *state], tok_avals,
                           regions=[cond, body], operand_avals=tok_avals)
      ctx.set_token(tok)
    else:
      cond = ctx.region(state_avals, [ShapedArray((), np.dtype(np.bool_))], cond_body)
      body = ctx.region(state_avals, state_avals,
                        lambda *names: lowering.jaxpr_subcomp(fb, body_j, [], names))
      state = ctx.op("stablehlo.while", state, state_avals, regions=[cond, body],
                     operand_avals=state_avals)
  if rem:
    one = step(1)
    for _ in range(rem):
      state = lowering.jaxpr_subcomp(fb, one, [], state)
  _, _, _, carry, ys = _split(state, nx, nc, 1, nk)
  return [*carry, *ys]


scan_p.def_abstract_eval(_scan_abstract_eval)
lowering.register_lowering(scan_p, _scan_lowering)


# ---------------------------------------------------------------------------
# JVP: a fixed point on which carries have nonzero tangents, then one scan over
# (primals, tangents).

_jvp_tables: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _nonzero(t) -> bool:
  return type(t) is not ad.Zero and core.get_aval(t).dtype != dtypes.float0


def _differentiable(a: ShapedArray) -> bool:
  return ad.tangent_aval(a).dtype != dtypes.float0


def _scan_jvp(primals, tangents, *, jaxpr: ClosedJaxpr, num_consts: int, num_carry: int,
              length: int, reverse: bool, unroll: int):
  nc, nk = num_consts, num_carry
  nx = len(primals) - nc - nk
  ny = len(jaxpr.out_avals) - nk
  nz = tuple(_nonzero(t) for t in tangents)
  const_nz, init_nz, xs_nz = _split(list(nz), nc, nk)

  def make():
    carry_nz = list(init_nz)
    diff = [_differentiable(a) for a in jaxpr.in_avals[nc:nc + nk]]
    for _ in range(nk + 1):
      jc, jconsts, out_nz = ad.jvp_jaxpr(jaxpr, [*const_nz, *carry_nz, *xs_nz],
                                         instantiate=[*carry_nz, *[False] * ny])
      new = [(a or b) and d for a, b, d in zip(carry_nz, out_nz[:nk], diff)]
      if new == carry_nz:
        break
      carry_nz = new
    # Reorder the JVP jaxpr's invars (jconsts, primals, tangents) into the scan's groups
    # (consts, carry, xs) and its outvars (primal outs, tangent outs) into (carry, ys).
    j = jc.jaxpr
    nj = len(jconsts)
    p_c, p_k, p_x = _split(j.invars[nj:nj + nc + nk + nx], nc, nk)
    t_c, t_k, t_x = _split(j.invars[nj + nc + nk + nx:], sum(const_nz), sum(carry_nz))
    outs = j.outvars
    po_k, po_y = outs[:nk], outs[nk:nk + ny]
    t_out = outs[nk + ny:]
    to_k, to_y = t_out[:sum(carry_nz)], t_out[sum(carry_nz):]
    new_j = j.replace(invars=[*j.invars[:nj], *p_c, *t_c, *p_k, *t_k, *p_x, *t_x],
                      outvars=[*po_k, *to_k, *po_y, *to_y])
    return ClosedJaxpr(new_j, []), jconsts, carry_nz, out_nz[nk:]

  new_closed, jconsts, carry_nz, ys_nz = _memo(_jvp_tables, jaxpr, (nz, ad.jvp_mode()), make)
  consts, init, xs = _split(list(primals), nc, nk)
  t_c, t_k, t_x = _split(list(tangents), nc, nk)
  t_c = [t for t, n in zip(t_c, const_nz) if n]
  # NB: as JAX's linearize, a zero carry tangent is made on the tangent side
  t_k = [ad.instantiate_zeros_on_tangent_side(t) for t, n in zip(t_k, carry_nz) if n]
  t_x = [t for t, n in zip(t_x, xs_nz) if n]
  outs = scan_p.bind(*jconsts, *consts, *t_c, *init, *t_k, *xs, *t_x, jaxpr=new_closed,
                     num_consts=len(jconsts) + nc + len(t_c), num_carry=nk + len(t_k),
                     length=length, reverse=reverse, unroll=unroll)
  nkt = len(t_k)
  carry_out, carry_t, ys, ys_t = _split(outs, nk, nkt, ny)
  it_k, it_y = iter(carry_t), iter(ys_t)
  out_avals = _scan_abstract_eval(jaxpr=jaxpr, num_consts=nc, num_carry=nk, length=length,
                                  reverse=reverse, unroll=unroll)
  tan_out = [next(it_k) if n else ad.Zero(ad.tangent_aval(a))
             for n, a in zip(carry_nz, out_avals[:nk])]
  tan_out += [next(it_y) if n else ad.Zero(ad.tangent_aval(a))
              for n, a in zip(ys_nz, out_avals[nk:])]
  return [*carry_out, *ys], tan_out


ad.primitive_jvps[scan_p] = _scan_jvp


# ---------------------------------------------------------------------------
# Partial evaluation (linearize, grad): a known scan computes the known carries and ys and
# stacks the per-iteration residuals; an unknown scan reads them. Residuals that are the
# loop's constants or xs are forwarded instead of stacked (not an xs that is a NumPy array:
# JAX stacks a copy of it). As JAX's `_scan_known_hoisting`, the part of the known body
# that reads only the loop's constants runs once, before the known scan: its results that
# are residuals are read by the unknown scan as constants, those the loop reads are
# constants of the known scan (a conversion of a host scalar folds into a literal there).

_pe_tables: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_INTENSIVE = ("const", "hoist")   # the residual kinds that are loop constants


class _Node:
  """A tracer of JAX's partial-evaluation trace, for `_known_const_order`: its parents, and
  the loop constant it instantiates (None for the other tracers)."""
  __slots__ = ("parents", "const")

  def __init__(self, parents, const=None):
    self.parents, self.const = parents, const


def _toposort(end_nodes: list[_Node]) -> list[_Node]:
  """The nodes reachable from `end_nodes`, parents first, in the order of JAX's
  `util.toposort` (which decides the order of a traced jaxpr's constants)."""
  ends, seen = [], set()
  for n in end_nodes:
    if id(n) not in seen:
      seen.add(id(n))
      ends.append(n)
  children: dict[int, int] = {}
  stack = list(ends)
  while stack:
    n = stack.pop()
    if id(n) in children:
      children[id(n)] += 1
    else:
      children[id(n)] = 1
      stack.extend(n.parents)
  for n in ends:
    children[id(n)] -= 1
  out, ready = [], [n for n in ends if children[id(n)] == 0]
  while ready:
    n = ready.pop()
    out.append(n)
    for p in n.parents:
      if children[id(p)] == 1:
        ready.append(p)
      else:
        children[id(p)] -= 1
  return out[::-1]


def _known_const_order(loop_eqns, in_vars, outvars) -> list[Var]:
  """The loop-invariant variables that the known loop (`loop_eqns`, reading `in_vars`, the
  known carries and xs, and returning `outvars`) reads, in the order JAX's partial
  evaluation makes them its constants: each use of a known value instantiates a constant
  tracer, and the constants are numbered in the topological order of the traced graph."""
  nodes: dict[Var, _Node] = {v: _Node([]) for v in in_vars}
  in_nodes = list(nodes.values())

  def operand(a):
    if type(a) is not Var:
      return _Node([])                 # a literal
    n = nodes.get(a)
    return _Node([], a) if n is None else n

  handles = []
  for e in loop_eqns:
    parents = [operand(a) for a in e.invars]
    for v in e.outvars:
      nodes[v] = _Node(parents)
    if e.effects:
      handles.append(_Node(parents))
  order = _toposort([*in_nodes, *[operand(a) for a in outvars], *handles])
  consts: list[Var] = []
  for n in order:
    if n.const is not None and n.const not in consts:
      consts.append(n.const)
  return consts


def _jax_residual_order(known: Jaxpr, unknown: Jaxpr, nres: int) -> tuple[Jaxpr, Jaxpr]:
  """The body's split with its residuals in the order JAX's `JaxprTrace` numbers them (the
  constants of the unknown side's traced graph, in its topological order; see
  `_known_const_order`), which the residual operands of the staged scan print in."""
  res = unknown.invars[:nres]
  order = _known_const_order(unknown.eqns, unknown.invars[nres:], unknown.outvars)
  order = [v for v in order if v in res]
  if len(order) != nres or order == res:
    return known, unknown
  perm = [res.index(v) for v in order]
  n_out = len(known.outvars) - nres
  k_res = known.outvars[n_out:]
  return (known.replace(outvars=[*known.outvars[:n_out], *[k_res[i] for i in perm]]),
          unknown.replace(invars=[*order, *unknown.invars[nres:]]))


def _scan_partial_eval(eqn, unknowns):
  p = eqn.params
  jaxpr, nc, nk, length = p["jaxpr"], p["num_consts"], p["num_carry"], p["length"]
  ny = len(jaxpr.out_avals) - nk
  const_uk, init_uk, xs_uk = _split(list(unknowns), nc, nk)
  # As JAX's, an xs that is a NumPy array is not forwarded as a residual (it is stacked).
  values = ad.known_operand_values()
  xs_host = tuple(type(values.get(v)) is np.ndarray
                  for v, u in zip(eqn.invars[nc + nk:], xs_uk) if not u)
  # As JAX's: the residuals in the order its JaxprTrace numbers them, or (splitting as its
  # linearize does) in the order the tangent equations read them.
  as_jaxpr_trace = ad.splitting_as_jaxpr_trace()

  def make():
    carry_uk = list(init_uk)
    for _ in range(nk + 1):
      known, unknown, nres, out_uk = ad.partial_eval_jaxpr(
          jaxpr.jaxpr, [*const_uk, *carry_uk, *xs_uk], [*carry_uk, *[False] * ny],
          shallow_dce=as_jaxpr_trace)
      new = [a or b for a, b in zip(carry_uk, out_uk[:nk])]
      if new == carry_uk:
        break
      carry_uk = new
    if as_jaxpr_trace:
      known, unknown = _jax_residual_order(known, unknown, nres)
    ys_uk = out_uk[nk:]
    # known: invars = known (consts, carry, xs); outvars = known carry, known ys, residuals.
    k_in = known.invars
    kc, kk, kx = _split(k_in, nc - sum(const_uk), nk - sum(carry_uk))
    n_out = len(known.outvars) - nres
    res_vars = known.outvars[n_out:]
    # The equations that read a carry or an xs (or have effects) stay in the loop; the
    # others read only constants and are hoisted out of it.
    variant = set(kk) | set(kx)
    loop_eqns, hoist_eqns = [], []
    for e in known.eqns:
      if e.effects or any(type(v) is Var and v in variant for v in e.invars):
        variant.update(e.outvars)
        loop_eqns.append(e)
      else:
        hoist_eqns.append(e)
    # Classify each residual: a known const (forwarded as a const of the unknown scan), a
    # known xs (that xs forwarded), loop-invariant (hoisted: computed once) or
    # per-iteration (stacked as an extra ys of the known scan).
    kinds = []
    for r in res_vars:
      if r in kc:
        kinds.append(("const", kc.index(r)))
      elif r in kx and not xs_host[kx.index(r)]:
        kinds.append(("xs", kx.index(r)))
      elif r not in variant:
        kinds.append(("hoist", None))
      else:
        kinds.append(("stacked", None))
    stacked = [r for r, (k, _) in zip(res_vars, kinds) if k == "stacked"]
    hoisted = [r for r, (k, _) in zip(res_vars, kinds) if k == "hoist"]
    loop_j = Jaxpr([], [*kk, *kx], [*known.outvars[:n_out], *stacked], loop_eqns)
    loop_j = pe.dce_jaxpr(loop_j, [True] * len(loop_j.outvars), instantiate=True,
                          shallow=as_jaxpr_trace)[0]
    loop_consts = _known_const_order(loop_j.eqns, loop_j.invars, loop_j.outvars)
    # The loop reads its invariants as new variables (constants of the known scan).
    sub = {v: Var(v.aval) for v in loop_consts}
    loop_j = Jaxpr([], [*(sub[v] for v in loop_consts), *loop_j.invars],
                   [sub.get(v, v) if type(v) is Var else v for v in loop_j.outvars],
                   [e.replace(invars=[sub.get(v, v) if type(v) is Var else v
                                      for v in e.invars]) for e in loop_j.eqns])
    hoist_j = pe.dce_jaxpr(Jaxpr([], kc, [*hoisted, *loop_consts], hoist_eqns),
                           [True] * (len(hoisted) + len(loop_consts)), instantiate=True,
                           shallow=as_jaxpr_trace)[0]
    # unknown: invars = residuals then unknown (consts, carry, xs); regroup as JAX does into
    # consts = (loop-invariant residuals: forwarded consts and hoisted, in residual order,
    # then unknown consts), carry = unknown carry, xs = (unknown xs, then per-iteration
    # residuals: stacked and forwarded xs, in residual order).
    u_res = unknown.invars[:nres]
    uc, uk_, ux = _split(unknown.invars[nres:], sum(const_uk), sum(carry_uk))
    int_res = [v for v, (kind, _) in zip(u_res, kinds) if kind in _INTENSIVE]
    ext_res = [v for v, (kind, _) in zip(u_res, kinds) if kind not in _INTENSIVE]
    unknown_j = unknown.replace(invars=[*int_res, *uc, *uk_, *ux, *ext_res])
    return (ClosedJaxpr(loop_j, []), ClosedJaxpr(unknown_j, []), carry_uk, ys_uk, kinds,
            [v.aval for v in stacked], hoist_j, len(hoisted))

  known_c, unknown_c, carry_uk, ys_uk, kinds, stacked_avals, hoist_j, n_hoisted = _memo(
      _pe_tables, jaxpr, (tuple(unknowns), xs_host, as_jaxpr_trace), make)
  ins_c, ins_k, ins_x = _split(list(eqn.invars), nc, nk)
  k_c = [v for v, u in zip(ins_c, const_uk) if not u]
  k_k = [v for v, u in zip(ins_k, carry_uk) if not u]
  k_x = [v for v, u in zip(ins_x, xs_uk) if not u]
  # A carry that is known at entry but becomes unknown in the loop enters the unknown scan
  # with its known initial value.
  u_c = [v for v, u in zip(ins_c, const_uk) if u]
  u_k = [v for v, u in zip(ins_k, carry_uk) if u]
  u_x = [v for v, u in zip(ins_x, xs_uk) if u]
  outs_k, outs_y = _split(list(eqn.outvars), nk)
  stacked_vars = [Var(_stacked_aval(a, length)) for a in stacked_avals]
  known_outs = [*[v for v, u in zip(outs_k, carry_uk) if not u],
                *[v for v, u in zip(outs_y, ys_uk) if not u]]
  base = {"length": length, "reverse": p["reverse"], "unroll": p["unroll"]}
  hoist_eqns, hoist_outs = _inline(hoist_j, k_c)
  r_hoist, loop_consts = hoist_outs[:n_hoisted], hoist_outs[n_hoisted:]
  known_eqns = list(hoist_eqns)
  if known_c.jaxpr.outvars or known_c.jaxpr.effects:
    known_eqns.append(core.JaxprEqn(
        [*loop_consts, *k_k, *k_x], [*known_outs, *stacked_vars], scan_p,
        {**base, "jaxpr": known_c, "num_consts": len(loop_consts), "num_carry": len(k_k)}))
  by_kind = {"const": iter([k_c[i] for k, i in kinds if k == "const"]),
             "xs": iter([k_x[i] for k, i in kinds if k == "xs"]),
             "hoist": iter(r_hoist), "stacked": iter(stacked_vars)}
  res = [(k, next(by_kind[k])) for k, _ in kinds]
  int_res = [r for k, r in res if k in _INTENSIVE]
  ext_res = [r for k, r in res if k not in _INTENSIVE]
  unknown_eqn = core.JaxprEqn(
      [*int_res, *u_c, *u_k, *u_x, *ext_res],
      [*[v for v, u in zip(outs_k, carry_uk) if u], *[v for v, u in zip(outs_y, ys_uk) if u]],
      scan_p, {**base, "jaxpr": unknown_c,
               "num_consts": len(int_res) + len(u_c), "num_carry": len(u_k)})
  return known_eqns, unknown_eqn, [*carry_uk, *ys_uk]


def _inline(jaxpr: Jaxpr, args: Sequence[Any]) -> tuple[list, list]:
  """`jaxpr`'s equations with its invars replaced by `args` and fresh variables for the
  rest (to emit them into another jaxpr); returns the equations and the output atoms."""
  env: dict[Var, Any] = dict(zip(jaxpr.invars, args))
  eqns = []
  for e in jaxpr.eqns:
    outs = [Var(v.aval) for v in e.outvars]
    eqns.append(e.replace(invars=[env.get(v, v) if type(v) is Var else v for v in e.invars],
                          outvars=outs))
    env.update(zip(e.outvars, outs))
  return eqns, [env.get(v, v) if type(v) is Var else v for v in jaxpr.outvars]


ad.partial_eval_rules[scan_p] = _scan_partial_eval


# ---------------------------------------------------------------------------
# Transpose: a scan in the opposite direction over the output cotangents, carrying the
# carry cotangents and accumulating the cotangents of the linear constants.

_transpose_tables: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _scan_transpose(cts, *args, jaxpr: ClosedJaxpr, num_consts: int, num_carry: int,
                    length: int, reverse: bool, unroll: int):
  nc, nk = num_consts, num_carry
  consts, init, xs = _split(list(args), nc, nk)
  c_lin = tuple(ad.is_undefined_primal(a) for a in consts)
  k_lin = tuple(ad.is_undefined_primal(a) for a in init)
  x_lin = tuple(ad.is_undefined_primal(a) for a in xs)
  # NB: every carry is treated as linear. A carry whose initial value is known (a zero
  # tangent instantiated before partial evaluation) still carries cotangents backwards; its
  # own cotangent is simply not returned (as in JAX).
  ct_k, ct_y = cts[:nk], cts[nk:]
  y_nz = tuple(type(c) is not ad.Zero for c in ct_y)
  in_avals = jaxpr.in_avals
  c_avals, k_avals, x_avals = _split(list(in_avals), nc, nk)
  y_avals = jaxpr.out_avals[nk:]
  ctk0 = [ad.instantiate_zeros(c) for c in ct_k]
  # NB: the carried cotangents keep the weak types of the cotangents that enter (as JAX's
  # transpose, whose carry is typed by them): a weakly typed primal carry met by a strong
  # cotangent transposes its `convert_element_type` to no equation. The carry leaving the
  # body may differ from the one entering it in weak type only.
  ctk_weak = tuple(core.get_aval(c).weak_type for c in ctk0)

  def make():
    res_c_avals = [a for a, lin in zip(c_avals, c_lin) if not lin]
    acc_avals = [ad.tangent_aval(a) for a, lin in zip(c_avals, c_lin) if lin]
    ctk_avals = [ad.tangent_aval(a).update(weak_type=w) for a, w in zip(k_avals, ctk_weak)]
    k_undef = [a.update(weak_type=w) if dtypes.is_inexact(a.dtype) else a
               for a, w in zip(k_avals, ctk_weak)]
    cty_avals = [ad.tangent_aval(a) for a, n in zip(y_avals, y_nz) if n]
    res_x_avals = [a for a, lin in zip(x_avals, x_lin) if not lin]
    # NB: the backward pass types the carries by `k_undef` (the cotangents' weak types).
    lin_jaxpr = jaxpr.jaxpr
    # NB: the accumulated cotangents of the linear constants enter the backward pass as the
    # cotangents of extra outputs (the constants themselves), so each contribution is added
    # to them where it is made (JAX's accumulators), not after the pass.
    lin_jaxpr = lin_jaxpr.replace(outvars=[
        *lin_jaxpr.outvars, *[v for v, lin in zip(lin_jaxpr.invars[:nc], c_lin) if lin]])

    def body(*a):
      res_c, acc, ctk, cty, res_x = _split(list(a), len(res_c_avals), len(acc_avals),
                                           len(ctk_avals), len(cty_avals))
      it_c, it_x = iter(res_c), iter(res_x)
      primals = [ad.UndefinedPrimal(av) if lin else next(it_c) for av, lin in zip(c_avals, c_lin)]
      primals += [ad.UndefinedPrimal(av) for av in k_undef]
      primals += [ad.UndefinedPrimal(av) if lin else next(it_x) for av, lin in zip(x_avals, x_lin)]
      it_y = iter(cty)
      cts_out = [*ctk, *[next(it_y) if n else ad.Zero(ad.tangent_aval(av))
                         for av, n in zip(y_avals, y_nz)], *acc]
      cts_in = ad.backward_pass(lin_jaxpr, primals, cts_out)
      ct_c, ct_k2, ct_x = _split(cts_in, nc, nk)
      new_acc = [ad.instantiate_zeros(c) for c, lin in zip(ct_c, c_lin) if lin]
      return [*new_acc, *[ad.instantiate_zeros(c) for c in ct_k2],
              *[ad.instantiate_zeros(c) for c, lin in zip(ct_x, x_lin) if lin]]

    j, tconsts = pe.trace_to_jaxpr(body, [*res_c_avals, *acc_avals, *ctk_avals, *cty_avals,
                                          *res_x_avals])
    return (ClosedJaxpr(pe.convert_constvars_jaxpr(j), []), list(tconsts), acc_avals)

  t_closed, tconsts, acc_avals = _memo(_transpose_tables, jaxpr,
                                       (c_lin, x_lin, y_nz, ctk_weak), make)
  res_c = [a for a, lin in zip(consts, c_lin) if not lin]
  res_x = [a for a, lin in zip(xs, x_lin) if not lin]
  acc0 = [ad.zeros_like_aval(a) for a in acc_avals]
  cty = [c for c, n in zip(ct_y, y_nz) if n]
  outs = scan_p.bind(*tconsts, *res_c, *acc0, *ctk0, *cty, *res_x, jaxpr=t_closed,
                     num_consts=len(tconsts) + len(res_c), num_carry=len(acc0) + nk,
                     length=length, reverse=not reverse, unroll=unroll)
  acc, ct_init, ct_xs = _split(outs, len(acc0), nk)
  it_acc, it_x = iter(acc), iter(ct_xs)
  return ([next(it_acc) if lin else None for lin in c_lin]
          + [c if lin else None for c, lin in zip(ct_init, k_lin)]
          + [next(it_x) if lin else None for lin in x_lin])


ad.primitive_transposes[scan_p] = _scan_transpose


# ---------------------------------------------------------------------------
# Batching: a fixed point on which carries are batched; batch dims at 0 inside the body
# (axis 1 of the stacked xs and ys).

_batch_tables: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _scan_batch(axis_data, args, dims, *, jaxpr: ClosedJaxpr, num_consts: int,
                num_carry: int, length: int, reverse: bool, unroll: int):
  nc, nk = num_consts, num_carry
  ny = len(jaxpr.out_avals) - nk
  size = axis_data.size
  c_d, k_d, x_d = _split(list(dims), nc, nk)
  c_b = [d is not batching.not_mapped for d in c_d]
  x_b = [d is not batching.not_mapped for d in x_d]

  def make():
    k_b = [d is not batching.not_mapped for d in k_d]
    for _ in range(nk + 1):
      in_dims = [0 if b else None for b in (*c_b, *k_b, *x_b)]
      _, _, out_dims = batching.batch_jaxpr(jaxpr, axis_data, in_dims, [None] * (nk + ny))
      new = [a or d is not None for a, d in zip(k_b, out_dims[:nk])]
      if new == k_b:
        break
      k_b = new
    y_b = [d is not None for d in out_dims[nk:]]
    in_dims = [0 if b else None for b in (*c_b, *k_b, *x_b)]
    targets = [0 if b else None for b in (*k_b, *y_b)]
    b_closed, bconsts, _ = batching.batch_jaxpr(jaxpr, axis_data, in_dims, targets)
    return b_closed, bconsts, k_b, y_b

  b_closed, bconsts, k_b, y_b = _memo(_batch_tables, jaxpr, (tuple(dims), axis_data), make)
  consts, init, xs = _split(list(args), nc, nk)
  consts = [batching.moveaxis(a, d, 0) if d is not None else a for a, d in zip(consts, c_d)]
  init = [batching.matchaxis(a, d, 0, size) if b else a for a, d, b in zip(init, k_d, k_b)]
  xs = [batching.moveaxis(a, d, 1) if d is not None else a for a, d in zip(xs, x_d)]
  outs = scan_p.bind(*bconsts, *consts, *init, *xs, jaxpr=b_closed,
                     num_consts=len(bconsts) + nc, num_carry=nk, length=length,
                     reverse=reverse, unroll=unroll)
  return outs, [*[0 if b else None for b in k_b], *[1 if b else None for b in y_b]]


batching.fancy_primitive_batchers[scan_p] = _scan_batch


# ---------------------------------------------------------------------------
# DCE: a fixed point on the live carries (a carry is live if its output is used or the body
# computes something live from it); dead carries, unused ys, consts and xs go.

_dce_tables: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _scan_dce(used_outs, eqn):
  if not any(used_outs):
    return [False] * len(eqn.invars), None
  p = eqn.params
  jaxpr, nc, nk = p["jaxpr"], p["num_consts"], p["num_carry"]
  nx = len(eqn.invars) - nc - nk

  def make():
    live = list(used_outs[:nk])
    used_y = list(used_outs[nk:])
    for _ in range(nk + 1):
      _, used_ins = pe.dce_jaxpr(jaxpr.jaxpr, [*live, *used_y])
      new = [a or b for a, b in zip(live, used_ins[nc:nc + nk])]
      if new == live:
        break
      live = new
    j, used_ins = pe.dce_jaxpr(jaxpr.jaxpr, [*live, *used_y],
                               instantiate=[False] * nc + live + [False] * nx)
    return ClosedJaxpr(j, []), live, used_ins

  new_closed, live, used_ins = _memo(_dce_tables, jaxpr, tuple(used_outs), make)
  if all(used_ins) and all(live) and all(used_outs[nk:]):
    return used_ins, eqn
  outs_k, outs_y = _split(list(eqn.outvars), nk)
  new_eqn = eqn.replace(
      invars=[v for v, u in zip(eqn.invars, used_ins) if u],
      outvars=[*[v for v, u in zip(outs_k, live) if u],
               *[v for v, u in zip(outs_y, used_outs[nk:]) if u]],
      params={**p, "jaxpr": new_closed, "num_consts": sum(used_ins[:nc]),
              "num_carry": sum(live)})
  return used_ins, new_eqn


pe.dce_rules[scan_p] = _scan_dce


def _scan_replication(in_vary, *, jaxpr, num_consts, num_carry, length, **_):
  nc, nk = num_consts, num_carry
  carry, out = mapping.loop_fixpoint(jaxpr.jaxpr, in_vary[:nc], list(in_vary[nc:nc + nk]),
                                     in_vary[nc + nk:])
  # NB: after at least one iteration the carries are the body's last outputs.
  return out if length > 0 else [*carry, *out[nk:]]


mapping.replication_rules[scan_p] = _scan_replication


# ---------------------------------------------------------------------------
# fori_loop and map


@api_boundary
def fori_loop(lower: Any, upper: Any, body_fun: Callable, init_val: Any, *,
              unroll: int | bool | None = None) -> Any:
  """`for i in range(lower, upper): val = body_fun(i, val)`; returns `val` (JAX's
  `lax.fori_loop`).

  With concrete (static) `lower` and `upper` this is a `scan` of `upper - lower` steps, so it
  is reverse-differentiable; with traced bounds it is a `while_loop` (forward mode only).

  Args:
    lower, upper: scalars of one dtype (a Python int takes the other's signed integer
      dtype); the loop index `i` has that dtype (a Python int for static bounds).
    body_fun: `body_fun(i, val) -> val` with `val`'s structure, shapes and dtypes.
    init_val: the initial value, a pytree of arrays.
    unroll: iterations per loop step (static bounds only).

  Raises:
    TypeError: if `body_fun` is not callable, the bounds are not scalars or differ in
      dtype (JAX's message); as `scan`/`while_loop` for a body that changes the value's type.
    ValueError: if `unroll` is given with traced bounds.
  """
  # NB: a symbolic dimension (export) is a traced value: a while loop, as in JAX
  lower, upper = (b.__jax_array__() if shape_poly.is_symbolic_dim(b) else b
                  for b in (lower, upper))
  if not callable(body_fun):
    raise TypeError("lax.fori_loop: body_fun argument should be callable.")
  for name, b in (("lower", lower), ("upper", upper)):
    a = core.get_aval(b)
    if a.shape:
      raise TypeError(f"fori_loop: {name} must be a scalar, got {a.str_short()}.")
  la, ua = core.get_aval(lower), core.get_aval(upper)
  # As JAX's: the bounds share their dtype, but a weakly typed signed integer (a Python int)
  # takes the other's signed integer dtype. Float bounds are allowed (JAX's).
  if la.dtype == ua.dtype:
    dtype = la.dtype
  else:
    dtype = None
    if dtypes.issubdtype(la.dtype, np.signedinteger) and \
        dtypes.issubdtype(ua.dtype, np.signedinteger):
      if la.weak_type and not ua.weak_type:
        dtype = ua.dtype
      elif ua.weak_type and not la.weak_type:
        dtype = la.dtype
    if dtype is None:
      raise TypeError(f"lower and upper arguments to fori_loop must have equal types, got "
                      f"{la.dtype.name} and {ua.dtype.name}")

  def _concrete(b):   # a JVP tracer outside jit knows its value (JAX's core.is_concrete)
    return b.to_concrete_value() if isinstance(b, core.Tracer) else b
  clo, chi = _concrete(lower), _concrete(upper)
  static = clo is not None and chi is not None
  if static:
    lo, hi = int(np.asarray(clo)), int(np.asarray(chi))
    n = max(hi - lo, 0)

    def step(loop_carry, _):   # JAX's parameter name (carry errors name it)
      i, x = loop_carry
      return (i + 1, body_fun(i, x)), None
    step._traced_as = (body_fun, "fori_loop")   # what a non-array result's error names

    # NB: the index starts as a Python int (weakly typed), whatever the bounds' dtype, as
    # in JAX.
    (_, out), _ = scan(step, (lo, init_val), None, length=n,
                       unroll=False if unroll is None else unroll)
    return out
  if unroll is not None and unroll is not False and unroll != 1:
    raise ValueError("Can only use `unroll` in `fori_loop` if the loop bounds are statically "
                     "known: pass Python ints (not traced values) as lower and upper, or drop "
                     "unroll.")
  # NB: bounds of the index's dtype are used as they are (no conversion), as in JAX.
  if la.dtype != dtype:
    lower = common.cast(lower, dtype)
  if ua.dtype != dtype:
    upper = common.cast(upper, dtype)

  def cond(c):
    return elementwise.lt(c[0], c[1])

  def body(loop_carry):
    i, hi, x = loop_carry
    return (elementwise.add(i, np.asarray(1, core.get_aval(i).dtype)[()]), hi,
            body_fun(i, x))
  body._traced_as = (body_fun, "fori_loop")

  return while_loop(cond, body, (lower, upper, init_val))[2]


@api_boundary
def map(f: Callable[[Any], Any], xs: Any, *, batch_size: int | None = None) -> Any:
  """Applies `f` to each slice of `xs` along its leading axis and stacks the results (JAX's
  `lax.map`): a `scan` with no carry.

  Args:
    f: a function of one pytree slice `T[*s]` returning a pytree.
    xs: a pytree of arrays `T[n, *s]` sharing the leading dimension n.
    batch_size: if given, `f` is vmapped over chunks of this many slices (a scan over
      `n // batch_size` chunks, the remainder vmapped once); 0 vmaps `f` over all of `xs`.

  Returns:
    The pytree of results of `f`, each stacked to `U[n, *u]`.

  Raises:
    ValueError: if the leaves of `xs` have different leading dimensions, or none; a
      negative `batch_size`.
  """
  if batch_size is None:
    return scan(lambda _, x: ((), f(x)), (), xs)[1]
  batch_size = operator.index(batch_size)
  if batch_size < 0:
    raise ValueError(f"lax.map: batch_size must be >= 0, got {batch_size}.")
  leaves, tree = common.flatten(xs)
  if not leaves or any(not core.get_aval(x).shape for x in leaves):
    raise ValueError("lax.map: every leaf of xs needs a leading axis to map over.")
  n = core.get_aval(leaves[0]).shape[0]
  full, rem = divmod(n, batch_size) if batch_size else (0, n)   # 0: one vmap of all, as JAX's
  vf = _vmap_leading(f)
  parts = []
  if full:
    chunked = [lax_shape.reshape(lax_shape.slice_in_dim(x, 0, full * batch_size),
                           (full, batch_size, *core.get_aval(x).shape[1:])) for x in leaves]
    ys = scan(lambda _, x: ((), vf(x)), (), common.unflatten(tree, chunked))[1]
    ys_leaves, y_tree = common.flatten(ys)
    parts.append([lax_shape.reshape(y, (full * batch_size, *core.get_aval(y).shape[2:]))
                  for y in ys_leaves])
  if rem:
    tail = vf(common.unflatten(tree, [lax_shape.slice_in_dim(x, full * batch_size, n)
                                      for x in leaves]))
    t_leaves, y_tree = common.flatten(tail)
    parts.append(t_leaves)
  out = parts[0] if len(parts) == 1 else [lax_shape.concatenate(list(p), 0) for p in zip(*parts)]
  return common.unflatten(y_tree, out)


def _vmap_leading(f: Callable) -> Callable:
  """`f` of one pytree mapped over the leading axis of each of its leaves (vmap with
  in_axes=0, out_axes=0), through the batching interpreter."""
  def vf(x):
    leaves, tree = common.flatten(x)
    size = core.get_aval(leaves[0]).shape[0]
    store = []

    def flat(*xs):
      out_leaves, out_tree = common.flatten(f(common.unflatten(tree, list(xs))))
      store[:] = [out_tree]
      return out_leaves
    outs, dims = batching.batch_flat(flat, leaves, [0] * len(leaves),
                                     batching.AxisData(None, size))
    return common.unflatten(store[0], [batching.matchaxis(o, d, 0, size)
                                       for o, d in zip(outs, dims)])
  return vf
