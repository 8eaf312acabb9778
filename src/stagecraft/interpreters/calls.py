"""The rules shared by call-like primitives: a primitive whose parameter holds a closed jaxpr
taking the equation's operands and giving its results (`jit`, `checkpoint`). Each derived
call (the JVP, the transpose, the batched call, the pieces partial evaluation splits off, the
call without its dead outputs) stays one staged equation of the same primitive whose jaxpr is
derived once per (jaxpr, key) and cached, so its compiled executables are reused.

Constants: `jit`, as JAX's, keeps the constants its body closes over in the ClosedJaxpr
(`closed_consts=True`: printed as the body's constvars, not operands of the equation), and
so do its derived calls; `checkpoint` passes them as leading operands, as JAX's `remat`.
When linearizing, a constant the tangent side of a jit needs is passed to it from outside (an
operand), as are residuals that are operands or results of the primal call (JAX's residual
forwarding; `CallRules.partial_eval_fwd`).

`custom_dce_call`, `custom_jvp_call` and `custom_vjp_call` carry rules of their own (the user's
rules must survive each transformation) and use only the generic pieces of `core` and the
interpreters.
"""
from __future__ import annotations

import weakref
from typing import Callable, Sequence

from stagecraft import core
from stagecraft.core import ClosedJaxpr
from stagecraft.interpreters import ad, batching, lowering
from stagecraft.interpreters import partial_eval as pe

__all__ = ["CallPrimitive", "CallRules", "call_impl", "call_p", "closed_call_p"]

_memo = core.memo_on_jaxpr


def _keep(params: dict, what: str) -> dict:
  return params


def _close_leading(closed: ClosedJaxpr, consts: list) -> ClosedJaxpr:
  """`closed`, which takes `consts` as its leading arguments, with them closed over again
  (its first invars become its constvars)."""
  if not consts:
    return closed
  j, k = closed.jaxpr, len(consts)
  return ClosedJaxpr(j.replace(constvars=[*j.constvars, *j.invars[:k]], invars=j.invars[k:]),
                     [*closed.consts, *consts])


def _pruned(jaxpr: core.Jaxpr, consts: list) -> ClosedJaxpr:
  """`jaxpr` closed over those of `consts` it still reads."""
  return ClosedJaxpr(*pe.prune_constvars(jaxpr, consts))


def fresh_jaxpr(jaxpr: core.Jaxpr) -> core.Jaxpr:
  """`jaxpr` with variables of its own (JAX's `_pjit_partial_eval` retraces the halves it
  splits, so they print with names of their own where the original is printed too)."""
  env: dict = {}

  def new(v):
    if type(v) is core.DropVar:
      return core.DropVar(v.aval)
    n = env.get(v)
    if n is None:
      n = env[v] = core.Var(v.aval)
    return n

  def read(a):
    return env.get(a, a) if isinstance(a, core.Var) else a

  constvars = [new(v) for v in jaxpr.constvars]
  invars = [new(v) for v in jaxpr.invars]
  eqns = [e.replace(invars=[read(a) for a in e.invars], outvars=[new(v) for v in e.outvars])
          for e in jaxpr.eqns]
  return jaxpr.replace(constvars=constvars, invars=invars,
                       outvars=[read(a) for a in jaxpr.outvars], eqns=eqns)


class CallRules:
  """jvp, transpose, batching, DCE and partial-eval rules for the call-like primitive `prim`,
  whose parameter `param` holds the called ClosedJaxpr.

  `derived(params, what)` gives the params of a derived call, `what` being "jvp",
  "transpose", "batch", "known", "unknown" or "dce" (e.g. jit keeps its name, as JAX; checkpoint
  marks it differentiated); the called jaxpr is set afterwards.

  `closed_consts`: the constants of a derived jaxpr stay in its ClosedJaxpr (jit, as JAX);
  False: they become leading operands of the derived call and the called jaxprs close over
  nothing (checkpoint). `forward_jvp`: the body is differentiated in forward mode even
  under grad (checkpoint, as JAX's: hijax primitives' `jvp`, not `vjp_fwd`)."""

  def __init__(self, prim: core.Primitive, param: str = "jaxpr",
               derived: Callable[[dict, str], dict] = _keep, closed_consts: bool = False,
               forward_jvp: bool = False, batch_params: Callable | None = None):
    self.prim, self.param, self.derived = prim, param, derived
    # `batch_params(params, derived params, axis_data, in dims, out dims)`: the batched
    # call's params (jit's shardings gain the batch dimension), or None.
    self.batch_params = batch_params
    self.closed_consts = closed_consts
    # True: the body's JVP is forward mode's even under grad (`ad.jvp_mode()` None), as
    # JAX's checkpoint differentiates its body with `jvp` rules.
    self.forward_jvp = forward_jvp
    self._jvp_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
    self._transpose_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
    self._pe_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
    self._dce_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
    self._batch_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

  def derived_params(self, params: dict, what: str, closed: ClosedJaxpr,
              in_map: Sequence | None = None, out_map: Sequence | None = None) -> dict:
    """The derived call's params. `in_map`: for each of its operands, the index of the
    operand of the original call it is, `("tangent", i)` for operand i's tangent (its entry
    is operand i's unless the param says otherwise), or `("out", j)` for its result j (a
    transposed call's cotangent), or None; the primitive's
    per-operand params (`operand_params`: jit's `donated_invars`, ...) follow it (JAX's jvp
    and partial-eval rules of pjit); without it they are reset. `out_map` likewise for each
    of its results: the index of the original call's result, `("in", i)` for operand i, or
    None, followed by the per-result params (`result_params`: jit's `out_shardings`, ...).
    An entry taken from the other side comes from the param holding the same kind of
    entry (`in_shardings` <-> `out_shardings`), else it is the default."""
    p = {**self.derived(params, what), self.param: closed}
    per_result = self.prim.result_params
    other = {k: c for k, _, c in per_result}
    other.update((c, k) for k, _, c in per_result)

    def entry(i, v, w, default, tangent_follows):
      if i is None:
        return default
      if type(i) is int:
        return v[i]
      if i[0] == "tangent":
        return v[i[1]] if tangent_follows else default
      return default if w is None else w[i[1]]

    def mapped(k, default, m, tangent_follows=True):
      v, w = params.get(k), params.get(other.get(k))
      if not isinstance(v, tuple):   # NB: unset, or one value for every operand (a bool)
        return
      if m is None or (what == "transpose" and k not in other):
        p.pop(k, None)   # NB: reset (`complete_params` gives the defaults), as JAX's
        return
      p[k] = tuple(entry(i, v, w, default, tangent_follows) for i in m)
    if in_map is not None:
      for k, default, *follows in self.prim.operand_params:
        mapped(k, default, in_map, *follows)
    for k, default, _ in per_result:
      mapped(k, default, out_map)
    complete = self.prim.complete_params   # NB: per-operand params fit the derived call
    return p if complete is None else complete(len(closed.jaxpr.invars), p)

  def _close(self, closed: ClosedJaxpr, consts: list, *rest):
    """A derived `(jaxpr taking consts first, consts, ...)`, its consts closed over again
    where this primitive keeps them in its jaxpr."""
    if self.closed_consts and consts:
      return (_close_leading(closed, consts), [], *rest)
    return (closed, consts, *rest)

  def _transpose_jaxpr(self, closed: ClosedJaxpr, undefined, ct_nonzeros):
    if not closed.consts:
      return self._close(*ad.transpose_jaxpr(closed, undefined, ct_nonzeros))
    # The body's constants are non-linear arguments of the transposed jaxpr.
    opened = ClosedJaxpr(pe.convert_constvars_jaxpr(closed.jaxpr), [])
    t_closed, t_consts = ad.transpose_jaxpr(opened, (False,) * len(closed.consts) + undefined,
                                            ct_nonzeros)
    return self._close(t_closed, [*t_consts, *closed.consts])

  def jvp(self, primals, tangents, **params):
    """The JVP of a call is a call of the JVP jaxpr: it stays one staged equation."""
    closed = params[self.param]
    nonzeros = tuple(type(t) is not ad.Zero for t in tangents)
    mode = None if self.forward_jvp else ad.jvp_mode()
    jvp_closed, consts, out_nz = _memo(
        self._jvp_cache, closed, (nonzeros, mode),
        lambda: self._close(*ad.jvp_jaxpr(closed, nonzeros, is_vjp=mode)))
    n_in = len(primals)
    in_map = [None] * len(consts) + [*range(n_in),
                                     *[("tangent", i) for i in range(n_in) if nonzeros[i]]]
    n = len(closed.out_avals)
    out_map = [*range(n), *[j for j in range(n) if out_nz[j]]]
    outs = self.prim.bind(*consts, *primals, *[t for t in tangents if type(t) is not ad.Zero],
                          **self.derived_params(params, "jvp", jvp_closed, in_map, out_map))
    it = iter(outs[n:])
    return outs[:n], [next(it) if nz else ad.Zero(ad.tangent_aval(a))
                      for nz, a in zip(out_nz, closed.out_avals)]

  def transpose(self, cts, *args, **params):
    """The transpose of a linear call is a call of the transposed jaxpr."""
    closed = params[self.param]
    undefined = tuple(ad.is_undefined_primal(a) for a in args)
    ct_nonzeros = tuple(type(c) is not ad.Zero for c in cts)
    t_closed, consts = _memo(self._transpose_cache, closed, (undefined, ct_nonzeros),
                             lambda: self._transpose_jaxpr(closed, undefined, ct_nonzeros))
    in_map = [*[None] * len(consts), *[i for i, u in enumerate(undefined) if not u],
              *[("out", j) for j, nz in enumerate(ct_nonzeros) if nz]]
    out_map = [("in", i) for i, u in enumerate(undefined) if u]
    outs = self.prim.bind(*consts, *[a for a, u in zip(args, undefined) if not u],
                          *[c for c in cts if type(c) is not ad.Zero],
                          **self.derived_params(params, "transpose", t_closed, in_map, out_map))
    it = iter(outs)
    return [next(it) if u else None for u in undefined]

  def batch(self, axis_data, args, dims, **params):
    """vmap of a call is a call of the batched jaxpr. An axis rule (called even with no
    batched operand) so that collectives inside see the axis."""
    closed = params[self.param]
    b_closed, consts, out_dims = _memo(
        self._batch_cache, closed, (tuple(dims), axis_data),
        lambda: self._close(*batching.batch_jaxpr(closed, axis_data, dims,
                                                  [None] * len(closed.out_avals))))
    p = self.derived_params(params, "batch", b_closed,
                            [None] * len(consts) + [*range(len(args))])
    if self.batch_params is not None:
      p = self.batch_params(params, p, axis_data, [None] * len(consts) + list(dims),
                            out_dims)
    outs = self.prim.bind(*consts, *args, **p)
    return outs, out_dims

  def partial_eval(self, eqn, unknowns):
    """Splits a call with partly unknown operands into a known call (known results and
    residuals) and an unknown call reading the residuals: linearize keeps both staged."""
    closed = eqn.params[self.param]

    def make():
      k, u, nres, out_unknowns = ad.partial_eval_jaxpr(closed.jaxpr, unknowns,
                                                       [False] * len(closed.out_avals))
      # One ClosedJaxpr per split, so the executables compiled for it are reused.
      if not closed.consts:
        return ClosedJaxpr(k, []), ClosedJaxpr(u, []), nres, out_unknowns
      # Residuals that are constants of the body: the unknown side closes over them.
      value = dict(zip(closed.jaxpr.constvars, closed.consts))
      res = k.outvars[len(k.outvars) - nres:]
      is_const = [type(v) is core.Var and v in value for v in res]
      k = k.replace(outvars=[*k.outvars[:len(k.outvars) - nres],
                             *[v for v, c in zip(res, is_const) if not c]])
      u = u.replace(constvars=[v for v, c in zip(u.invars[:nres], is_const) if c],
                    invars=[*[v for v, c in zip(u.invars[:nres], is_const) if not c],
                            *u.invars[nres:]])
      return (_pruned(k, closed.consts), ClosedJaxpr(u, [value[v] for v, c in zip(res, is_const)
                                                           if c]),
              nres - sum(is_const), out_unknowns)
    known, unknown, nres, out_unknowns = _memo(self._pe_cache, closed, tuple(unknowns), make)
    res_vars = [core.Var(v.aval) for v in known.jaxpr.outvars[len(known.jaxpr.outvars) - nres:]]
    known_eqn = core.JaxprEqn(
        [v for v, u in zip(eqn.invars, unknowns) if not u],
        [*[v for v, u in zip(eqn.outvars, out_unknowns) if not u], *res_vars], self.prim,
        self.derived_params(eqn.params, "known", known,
                            [i for i, u in enumerate(unknowns) if not u],
                            [*[j for j, u in enumerate(out_unknowns) if not u],
                             *[None] * len(res_vars)]),
        eqn.source_info)
    unknown_eqn = core.JaxprEqn(
        [*res_vars, *[v for v, u in zip(eqn.invars, unknowns) if u]],
        [v for v, u in zip(eqn.outvars, out_unknowns) if u], self.prim,
        self.derived_params(eqn.params, "unknown", unknown,
                            [None] * len(res_vars) + [i for i, u in enumerate(unknowns) if u],
                            [j for j, u in enumerate(out_unknowns) if u]),
        eqn.source_info)
    return known_eqn, unknown_eqn, out_unknowns

  def _split_fwd(self, closed: ClosedJaxpr, unknowns: tuple, const_ok: bool):
    """The split of `closed` with JAX's residual forwarding (its `_pjit_partial_eval` /
    `_pjit_linearize`): a residual that is a known operand is not returned again (the
    unknown call reads the operand), nor one that is a known result (it reads the result);
    a residual that is a constant of the body is passed to the unknown call from outside
    (`const_ok`; else the unknown call closes over it; with `const_ok` None the known call
    returns it, as JAX's `_pjit_partial_eval` does); a known result that is a known
    operand is not returned either.

    Returns:
      `(known, unknown, out_unknowns, out_fwd, res_src)`: `out_fwd` has one entry per known
      result, the index among the known operands of the one it forwards, or None;
      `res_src` one per operand of `unknown` before the unknown operands: `("in", i)` the
      i-th known operand, `("out", j)` the j-th known result, `("const", (value, aval))` a
      constant or `("res", None)` the next residual result of `known`.
    """
    jaxpr = closed.jaxpr
    value = dict(zip(jaxpr.constvars, closed.consts))
    k, u, nres, out_unknowns = ad.partial_eval_jaxpr(jaxpr, unknowns,
                                                     [False] * len(jaxpr.outvars),
                                                     const_values=value,
                                                     returns_consts=const_ok is None)
    # NB: `value` now also holds the constants that nested calls forward: those not among
    # the body's own are constants of the known call, which returns them (as JAX).
    own = set(jaxpr.constvars)
    nk = len(k.outvars) - nres
    outs, res = k.outvars[:nk], k.outvars[nk:]
    in_pos = {v: i for i, v in enumerate(k.invars)}
    out_fwd = [in_pos.get(v) if type(v) is core.Var else None for v in outs]
    kept_outs = [v for v, f in zip(outs, out_fwd) if f is None]
    out_pos = {}
    for j, v in enumerate(outs):
      out_pos.setdefault(v, j)
    res_src, kept_res, closed_res = [], [], []
    for v in res:
      if v in in_pos:
        res_src.append(("in", in_pos[v]))
      elif v in own:
        if const_ok is None:
          res_src.append(("res", None))
          kept_res.append(v)
        elif const_ok:
          res_src.append(("const", (value[v], v.aval)))
        else:
          res_src.append(None)
          closed_res.append(v)
      elif v in out_pos and out_fwd[out_pos[v]] is None:
        res_src.append(("out", out_pos[v]))
      else:
        res_src.append(("res", None))
        kept_res.append(v)
    k = k.replace(outvars=[*kept_outs, *kept_res])
    consts = [value[v] for v in k.constvars]
    known = _pruned(fresh_jaxpr(k) if const_ok is None else k, consts)
    if closed_res:
      # The constants of the body the unknown side reads, closed over by it.
      cset = set(closed_res)
      u_res = u.invars[:nres]
      u = u.replace(constvars=[r for v, r in zip(res, u_res) if v in cset],
                    invars=[*[r for v, r in zip(res, u_res) if v not in cset],
                            *u.invars[nres:]])
      res_src = [s for s in res_src if s is not None]
      unknown = ClosedJaxpr(u, [value[v] for v in res if v in cset])
    else:
      unknown = ClosedJaxpr(u, [])
    return known, unknown, out_unknowns, out_fwd, res_src

  def partial_eval_fwd(self, eqn, unknowns, const_ok: bool):
    """As `partial_eval`, forwarding residuals as JAX does (see `_split_fwd`).

    Returns:
      `(known_eqn | None, unknown_eqn | None, out_unknowns, fwd)`: `fwd` maps the variables
      the two equations leave undefined to what they stand for: a known result of `eqn`
      that is one of its operands to that operand, an operand of `unknown_eqn` that is a
      constant to `ad.ForwardedConst(value)`.
    """
    closed = eqn.params[self.param]
    unknowns = tuple(unknowns)
    known, unknown, out_unknowns, out_fwd, res_src = _memo(
        self._pe_cache, closed, (unknowns, "fwd", const_ok),
        lambda: self._split_fwd(closed, unknowns, const_ok))
    known_ins = [v for v, u in zip(eqn.invars, unknowns) if not u]
    # NB: a known result nothing reads may be a residual: it gets a variable of its own.
    known_outs = [core.Var(v.aval) if type(v) is core.DropVar else v
                  for v, u in zip(eqn.outvars, out_unknowns) if not u]
    fwd: dict = {}
    k_outs, k_out_map = [], []
    known_idx = [j for j, u in enumerate(out_unknowns) if not u]
    for o, f, j in zip(known_outs, out_fwd, known_idx):
      if f is None:
        k_outs.append(o)
        k_out_map.append(j)
      else:
        fwd[o] = known_ins[f]
    res_avals = iter(v.aval for v in known.jaxpr.outvars[len(k_outs):])
    res_ins = []
    for kind, x in res_src:
      if kind == "res":
        v = core.Var(next(res_avals))
        k_outs.append(v)
        k_out_map.append(None)
      elif kind == "in":
        v = known_ins[x]
      elif kind == "out":
        v = known_outs[x]
      else:
        v = core.Var(x[1])
        fwd[v] = ad.ForwardedConst(x[0])
      res_ins.append(v)
    known_eqn = unknown_eqn = None
    # NB: as JAX's `_pjit_partial_eval` (`const_ok` None), the known call is bound even
    # when it returns nothing.
    if k_outs or known.jaxpr.effects or const_ok is None:
      known_eqn = core.JaxprEqn(
          known_ins, k_outs, self.prim,
          self.derived_params(eqn.params, "known", known,
                              [i for i, u in enumerate(unknowns) if not u], k_out_map),
          eqn.source_info)
    if any(out_unknowns):
      unknown_eqn = core.JaxprEqn(
          [*res_ins, *[v for v, u in zip(eqn.invars, unknowns) if u]],
          [v for v, u in zip(eqn.outvars, out_unknowns) if u], self.prim,
          self.derived_params(eqn.params, "unknown", unknown,
                              [None] * len(res_ins) + [i for i, u in enumerate(unknowns) if u],
                              [j for j, u in enumerate(out_unknowns) if u]),
          eqn.source_info)
    return known_eqn, unknown_eqn, out_unknowns, fwd

  def dce(self, used_outs, eqn):
    """Unused results of a call, and the work and operands only they needed, go."""
    if not any(used_outs):
      return [False] * len(eqn.invars), None
    closed = eqn.params[self.param]

    def make():
      j, used_ins = pe.dce_jaxpr(closed.jaxpr, used_outs)
      return _pruned(j, closed.consts), used_ins
    new_closed, used_ins = _memo(self._dce_cache, closed, tuple(used_outs), make)
    if all(used_outs) and all(used_ins):
      return used_ins, eqn
    return used_ins, eqn.replace(
        invars=[v for v, u in zip(eqn.invars, used_ins) if u],
        outvars=[v for v, u in zip(eqn.outvars, used_outs) if u],
        params=self.derived_params(eqn.params, "dce", new_closed,
                            [i for i, u in enumerate(used_ins) if u],
                            [j for j, u in enumerate(used_outs) if u]))

  def register(self, *, partial_eval: bool = True, dce: bool = True) -> "CallRules":
    """Registers the rules (partial evaluation and DCE optional: a primitive may keep its
    own, as checkpoint's partial evaluation saves no residuals)."""
    ad.primitive_jvps[self.prim] = self.jvp
    ad.primitive_transposes[self.prim] = self.transpose
    batching.fancy_primitive_batchers[self.prim] = self.batch
    if partial_eval:
      ad.partial_eval_rules[self.prim] = self.partial_eval
      if self.closed_consts:
        ad.partial_eval_fwd_rules[self.prim] = self.partial_eval_fwd
    if dce:
      pe.dce_rules[self.prim] = self.dce
    return self


# ---------------------------------------------------------------------------
# closed_call: JAX's `core.closed_call_p`, a plain call of the ClosedJaxpr in its `call_jaxpr`
# param. `scan`'s split inside `checkpoint` wraps its known part in one, as JAX's
# `_scan_partial_eval_custom` does; it lowers to a `func.call` of a private function.
closed_call_p = core.Primitive("closed_call")
closed_call_p.multiple_results = True
core.def_closed_call(closed_call_p, "call_jaxpr")
CallRules(closed_call_p, "call_jaxpr").register()
lowering.register_lowering(
    closed_call_p, lambda ctx, *args, call_jaxpr: lowering.lower_call(ctx, "closed_call",
                                                                      call_jaxpr, args))


# ---------------------------------------------------------------------------
# CallPrimitive: JAX's `core.CallPrimitive`, bound with the function to call; `call_p` is
# JAX's `core.call_p` (`jax.extend.core.primitives.call_p`), one such primitive named "call".
class CallPrimitive(core.Primitive):
  """A primitive that calls a function (JAX's `core.CallPrimitive`): `p.bind(fun, *args,
  **params)` traces `fun` (a callable or `linear_util.WrappedFun` returning a sequence) on
  the arguments' avals and stages one equation holding the traced `ClosedJaxpr` in its
  `call_jaxpr` param. jit, grad, vmap and DCE go through it as through `jit`'s call (the
  rules of `interpreters.calls.CallRules`); it lowers to a `func.call` of a private function.

  Example:
    >>> import stagecraft
    >>> my_call_p = stagecraft.extend.core.CallPrimitive("my_call")
    >>> float(stagecraft.grad(lambda x: my_call_p.bind(lambda y: [y * y], x)[0])(3.0))
    6.0
  """
  multiple_results = True
  call_primitive = True

  def __init__(self, name: str):
    super().__init__(name)
    core.def_closed_call(self, "call_jaxpr")
    CallRules(self, "call_jaxpr").register()
    lowering.register_lowering(self, self._lowering)

  def _lowering(self, ctx, *args, call_jaxpr, **params):
    return lowering.lower_call(ctx, self.name, call_jaxpr, args)

  def bind(self, *args, **params):
    if "call_jaxpr" in params:      # a staged equation re-bound by an interpreter
      return super().bind(*args, **params)
    if not args or not callable(args[0]):
      raise TypeError(f"{self.name}.bind(fun, *args): expected a function first, got "
                      f"{args[:1]!r}.")
    fun, *operands = args
    call = getattr(fun, "call_wrapped", fun)
    jaxpr, consts = pe.trace_to_jaxpr(lambda *xs: list(call(*xs)),
                                      [core.get_aval(x) for x in operands])
    closed = ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), [])
    return super().bind(*consts, *operands, call_jaxpr=closed, **params)


def call_impl(f, *args, **params):
  """Calls `f` (a `linear_util.WrappedFun` or a callable) on `args` (JAX's `call_impl`,
  the impl of a call primitive; `params` are ignored)."""
  return getattr(f, "call_wrapped", f)(*args)


call_p = CallPrimitive("call")
