"""`custom_dce`: a function with a user-defined dead-code-elimination rule.

A `custom_dce` function binds one `custom_dce_call` equation carrying the primal jaxpr (its
consts are leading operands, as for `jit`) and a *DCE thunk*: `thunk(*used_outs) ->
(rule_closed, used_ins)` re-traces the user's rule for those used outputs into a jaxpr that
takes the used inputs of the equation (`used_ins`, one bool per operand) and returns the used
outputs. `pe.dce_jaxpr` calls the thunk (memoized per `used_outs`) and replaces the equation
by one whose primal is the rule's jaxpr, so pruning shows in jitted programs.

Beyond JAX (whose JVP drops the rule, see its TODO): the JVP of a `custom_dce_call` is a
`custom_dce_call` whose rule is the JVP of the user's rule, and partial evaluation splits it
into a known call (primal outputs, rule restricted to them) and an unknown call (tangent
outputs, reading the known inputs as residuals and recomputing the primal work it needs), so
`jit(jvp(f))` and `jit(grad(f))` still prune. The unknown call is transposed inline: its
jaxpr (nested custom_dce calls inlined) is split into the part reading only primal inputs,
evaluated, and the linear rest, run through `ad.backward_pass`.

Under `vmap` (as JAX's): an output is batched only where the function's batched output is, the
batched call keeps a rule (the user's rule, traced inside the vmapped axis' environment so
that collectives over it bind, then batched), and a call with no batched operand is batched
too, so collectives in it see the axis.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable, Sequence

import numpy as np
import optree

from stagecraft import core, tree_util
from stagecraft.core import ClosedJaxpr, Jaxpr, ShapedArray, Var
from stagecraft.errors import UnexpectedTracerError
from stagecraft.tree_util import treedef_str
from stagecraft.interpreters import ad, batching, lowering, partial_eval as pe

__all__ = ["custom_dce", "custom_dce_call_p"]

_NS = tree_util.NAMESPACE


def _flatten(tree):
  return optree.tree_flatten(tree, none_is_leaf=False, namespace=_NS)


def _fun_name(f: Callable) -> str:
  return getattr(f, "__name__", None) or type(f).__name__


def _check_for_tracers(x, i: int, fun_name: str):
  for leaf in _flatten(x)[0]:
    if isinstance(leaf, core.Tracer):
      raise UnexpectedTracerError(
          f"Found a Tracer object passed as argument {i} of the custom_dce function "
          f"{fun_name}, a position indicated by static_argnums as static. Tracers cannot be "
          "passed as static arguments to custom_dce functions; instead, static_argnums should "
          "only be used for arguments that can't be or contain tracers, e.g. function-valued "
          "arguments. In particular, array-valued arguments should typically not be indicated "
          "as static_argnums.")


# ---------------------------------------------------------------------------
# The user-facing decorator


class custom_dce:
  """Customizes the DCE behavior of a function (JAX's `custom_dce`).

  DCE removes unused computations when a function is staged out (`jit`); it does not run in
  eager mode, so the rule is only applied under `jit` (and `make_jaxpr` + `dce_jaxpr`), and
  both the function and its rule must be jit-compatible. For a wrapped `f(*args)` the rule
  is called as `rule(*static_args, used_outs, *dyn_args)`: `used_outs` is a pytree of `bool`
  with the structure of `f`'s output; the rule returns a pytree of that structure with the
  unused outputs allowed to be `None`. Arguments named in `static_argnums` are passed to the
  rule first, in that order.

  Example::

    @custom_dce
    def f(x, y):
      return jnp.sin(x) * y, x * jnp.sin(y)

    @f.def_dce
    def f_dce_rule(used_outs, x, y):
      return (jnp.sin(x) * y if used_outs[0] else None,
              x * jnp.sin(y) if used_outs[1] else None)

  Args:
    fun: the primal function; arrays (or pytrees of them) in and out.
    static_argnums: positions of arguments that are not arrays (e.g. functions); they may
      not be tracers.

  Raises (when called):
    AttributeError: no rule was defined with `def_dce`.
    UnexpectedTracerError: a static argument is (or contains) a tracer.
    TypeError (when the rule is traced): the rule's output has another pytree structure.
    ValueError (when the rule is traced): the rule returned None for a used output, or an
      output whose shape/dtype differs from the function's.
  """

  def __init__(self, fun: Callable[..., Any], *, static_argnums: Sequence[int] = ()):
    self.fun = fun
    self.static_argnums = tuple(static_argnums)
    self.dce_rule: Callable[..., Any] | None = None
    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
      try:
        setattr(self, attr, getattr(fun, attr))
      except AttributeError:
        pass

  def __getattr__(self, name):
    return getattr(self.__dict__["fun"], name)

  def def_dce(self, dce_rule: Callable[..., Any]) -> Callable[..., Any]:
    """Defines the DCE rule: `dce_rule(*static_args, used_outs, *dyn_args)` returns the
    outputs of the function with unused ones allowed to be `None`. Returns `dce_rule`."""
    self.dce_rule = dce_rule
    return dce_rule

  def __call__(self, *args, **kwargs):
    fun_name = _fun_name(self.fun)
    if self.dce_rule is None:
      raise AttributeError(
          f"No DCE rule defined for custom_dce function {fun_name} using def_dce.")
    rule_name = _fun_name(self.dce_rule)
    if kwargs:
      import inspect
      try:
        ba = inspect.signature(self.fun).bind(*args, **kwargs)
      except TypeError as e:
        raise TypeError(
            "The input arguments to the custom_dce-decorated function "
            f"{fun_name} could not be resolved to positional-only "
            f"arguments. Binding failed with the error:\n{e}") from e
      if ba.kwargs:
        raise TypeError(
            "The input arguments to the custom_dce-decorated function "
            f"{fun_name} could not be resolved to positional-only arguments: keyword-only "
            f"arguments {sorted(ba.kwargs)} are not supported. Pass them positionally.")
      args = ba.args
    nargs = len(args)
    static = sorted({i % nargs if nargs else i for i in self.static_argnums})
    for i in static:
      if not 0 <= i < nargs:
        raise ValueError(f"custom_dce function {fun_name}: static_argnums "
                         f"{self.static_argnums} out of range for {nargs} arguments.")
      _check_for_tracers(args[i], i, fun_name)
    static_args = [args[i] for i in self.static_argnums]
    dyn_pos = [i for i in range(nargs) if i not in static]
    dyn_args = [args[i] for i in dyn_pos]

    def merged(dyn):
      full = list(args)
      for i, a in zip(dyn_pos, dyn):
        full[i] = a
      return full

    args_flat, in_tree = _flatten(tuple(dyn_args))
    in_avals = [core.get_aval(x) for x in args_flat]
    out_tree_box: list = []

    def flat_fun(*flat):
      out = self.fun(*merged(tree_util.tree_unflatten(in_tree, list(flat))))
      leaves, out_tree = _flatten(out)
      out_tree_box.append(out_tree)
      return leaves

    jaxpr, consts = pe.trace_to_jaxpr(flat_fun, in_avals)
    fun_closed = ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), [])
    out_tree = out_tree_box[0]
    out_avals = fun_closed.out_avals
    num_consts = len(consts)
    user_rule = self.dce_rule

    def flat_rule_for(used_outs):
      def flat_rule(*flat):
        py_used = tree_util.tree_unflatten(out_tree, list(used_outs))
        py_args = tree_util.tree_unflatten(in_tree, list(flat))
        py_out = user_rule(*static_args, py_used, *py_args)
        return _check_rule_output(py_out, used_outs, out_tree, out_avals, fun_name,
                                  rule_name)
      return flat_rule

    def make(used_outs):
      try:
        rjaxpr, rconsts = pe.trace_to_jaxpr(flat_rule_for(used_outs), in_avals)
      except UnexpectedTracerError as e:
        # The rule is traced when the program is pruned, after the traces of the call site
        # ended: a value of theirs it closes over has escaped.
        raise UnexpectedTracerError(_closure_message(rule_name, str(e))) from e
      closed, used_dyn = _prune(rjaxpr, rconsts, rule_name)
      return closed, [False] * num_consts + used_dyn

    outs = custom_dce_call_p.bind(*consts, *args_flat, fun_jaxpr=fun_closed,
                                  dce_thunk=_Thunk(make), name=fun_name)
    return tree_util.tree_unflatten(out_tree, outs)


def _check_rule_output(py_out, used_outs, out_tree, out_avals, fun_name, rule_name):
  """The flat used outputs of the rule's `py_out`, checked against the function's output
  structure `out_tree` and types `out_avals` (the reference's errors and messages)."""
  if isinstance(py_out, list) and len(py_out) == len(out_tree.children()):
    py_out = tuple(py_out)
  sentinel = object()
  dummy = tree_util.tree_unflatten(out_tree, [object()] * out_tree.num_leaves)
  keypaths = [kp for kp, _ in tree_util.tree_flatten_with_path(dummy)[0]]
  out_flat: list = []

  def append(x, d):
    n = len(_flatten(d)[0])
    if x is None and d is not None:
      out_flat.extend([sentinel] * n)
    elif x is not None:
      out_flat.extend([x] * n)
    return x

  rule_tree = optree.tree_structure(py_out, none_is_leaf=True, namespace=_NS)
  try:
    optree.tree_map(append, py_out, dummy, is_leaf=lambda x: x is None, none_is_leaf=False,
                    namespace=_NS)
  except ValueError:
    raise TypeError(
        f"Custom DCE rule {rule_name} for function {fun_name} must produce an output with "
        f"the same container (pytree) structure as the output of the function {fun_name}. "
        f"But, the DCE rule returned structure {treedef_str(rule_tree)}, while {fun_name} "
        f"returned {treedef_str(out_tree)}.") from None
  if len(out_flat) != len(out_avals):
    raise TypeError(
        f"Custom DCE rule {rule_name} for function {fun_name} must produce an output with "
        f"the same container (pytree) structure as the output of the function {fun_name}. "
        f"But, the DCE rule returned structure {treedef_str(rule_tree)}, while {fun_name} "
        f"returned {treedef_str(out_tree)}.")
  results = []
  for kp, used, aval, val in zip(keypaths, used_outs, out_avals, out_flat):
    if not used:
      continue
    if val is sentinel:
      raise ValueError(
          f"Custom DCE rule {rule_name} for function {fun_name} must produce values for all "
          "of the required outputs (as specified by the used_outs argument to the rule). "
          f"But, at output{tree_util.keystr(kp)}, the DCE rule returned None instead of an "
          f"output with shape/dtype {aval.str_short()}.")
    try:
      val_aval = core.get_aval(val)
    except TypeError:
      raise ValueError(
          f"Custom DCE rule {rule_name} for function {fun_name} must produce arrays; at "
          f"output{tree_util.keystr(kp)} it returned a value of type {type(val).__name__} "
          f"where an output with shape/dtype {aval.str_short()} was expected.") from None
    if val_aval.shape != aval.shape or val_aval.dtype != aval.dtype:
      raise ValueError(
          f"Custom DCE rule {rule_name} for function {fun_name} must produce an output with "
          f"the same shapes/dtypes as the output of the function {fun_name}. But, at "
          f"output{tree_util.keystr(kp)}, the DCE rule returned an output with shape/dtype "
          f"{val_aval.str_short()}, while {aval.str_short()} was expected.")
    results.append(val)
  return results


# ---------------------------------------------------------------------------
# DCE thunks and the jaxpr plumbing they share


class _Thunk:
  """`thunk(*used_outs) -> (rule_closed, used_ins)`, memoized per `used_outs`. Hashable by
  identity (it is an equation param)."""
  __slots__ = ("make", "cache", "__weakref__")

  def __init__(self, make: Callable[[tuple[bool, ...]], tuple[ClosedJaxpr, list[bool]]]):
    self.make = make
    self.cache: dict = {}

  def __call__(self, *used_outs: bool) -> tuple[ClosedJaxpr, list[bool]]:
    key = tuple(bool(u) for u in used_outs)
    if key not in self.cache:
      self.cache[key] = self.make(key)
    return self.cache[key]

  def __repr__(self):
    return "<dce rule>"


def _prune(jaxpr: Jaxpr, consts: Sequence[Any], rule_name: str
           ) -> tuple[ClosedJaxpr, list[bool]]:
  """`jaxpr` (with its constvars bound to `consts`) without dead equations and unused invars;
  returns it and which invars were kept.

  NB: no DCE rule runs here (an equation with a used output keeps all its inputs): a rule
  that calls back into its own custom_dce function would otherwise re-enter the thunk being
  built and recurse forever (JAX swaps in a sentinel primitive for the same reason)."""
  for c in consts:
    if isinstance(c, core.Tracer):
      raise UnexpectedTracerError(_closure_message(rule_name, f"({c.aval.str_short()})"))
  live: set[Var] = {v for v in jaxpr.outvars if type(v) is Var}
  eqns = []
  for eqn in reversed(jaxpr.eqns):
    if any(type(v) is not pe.DropVar and v in live for v in eqn.outvars) or (
        eqn.primitive in pe.effectful_primitives):
      eqns.append(eqn)
      live.update(v for v in eqn.invars if type(v) is Var)
  eqns.reverse()
  used = [v in live for v in jaxpr.invars]
  j = jaxpr.replace(invars=[v for v, u in zip(jaxpr.invars, used) if u], eqns=eqns)
  j, consts = pe.prune_constvars(j, consts)
  return ClosedJaxpr(j, list(consts)), used


def _closure_message(rule_name: str, detail: str) -> str:
  return (f"The custom_dce rule {rule_name} closes over a traced value of an enclosing "
          "transformation (jit, vmap, grad); the rule is traced again when the program is "
          "pruned, after that trace has ended. Pass the value to the custom_dce function as "
          f"an argument instead of closing over it. Detail: {detail}")


def _trace_and_prune(fun: Callable, in_avals: Sequence[ShapedArray], what: str):
  jaxpr, consts = pe.trace_to_jaxpr(fun, in_avals)
  return _prune(jaxpr, consts, what)


def _has_effects(closed: ClosedJaxpr) -> bool:
  return any(e.primitive in pe.effectful_primitives for e in closed.jaxpr.eqns)


def _eval(closed: ClosedJaxpr, *args):
  return core.eval_jaxpr(closed.jaxpr, closed.consts, *args)


# ---------------------------------------------------------------------------
# The primitive: custom_dce_call[name fun_jaxpr dce_thunk] operands


def _dense_constant(ctx, value: Any, aval: ShapedArray) -> str:
  arr = np.asarray(value, dtype=aval.dtype)
  flat = arr.reshape(-1)
  if flat.size == 0 or (flat == flat[0]).all():
    return ctx.constant(flat[0] if flat.size else 0, aval)
  if arr.dtype == np.bool_:
    raise NotImplementedError("custom_dce: a non-splat boolean constant in a DCE rule")
  name = ctx.fb.fresh()
  data = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes().hex()
  ctx.fb.emit(f'{name} = stablehlo.constant dense<"0x{data.upper()}"> : '
              f"{lowering.ir_type(aval)}")
  return name


def _custom_dce_lowering(ctx, *args, fun_jaxpr: ClosedJaxpr, **_):
  # Inlined: the rule's jaxpr may carry (concrete) consts of its own.
  jaxpr = fun_jaxpr.jaxpr
  consts = [_dense_constant(ctx, c, v.aval) for c, v in zip(fun_jaxpr.consts, jaxpr.constvars)]
  return lowering.jaxpr_subcomp(ctx.fb, jaxpr, consts, list(args))


def _custom_dce_dce(used_outs, eqn):
  fun_jaxpr: ClosedJaxpr = eqn.params["fun_jaxpr"]
  if not any(used_outs):
    if _has_effects(fun_jaxpr):
      return [True] * len(eqn.invars), eqn
    return [False] * len(eqn.invars), None
  if all(used_outs):
    return [True] * len(eqn.invars), eqn
  thunk = eqn.params["dce_thunk"]
  used_outs = tuple(bool(u) for u in used_outs)
  rule_closed, used_ins = thunk(*used_outs)

  def make(new_used):
    # The new equation's outputs are the used ones: map back to the original positions.
    it = iter(new_used)
    full = tuple(next(it) if u else False for u in used_outs)
    if all(new_used):
      return rule_closed, [True] * sum(used_ins)
    j, all_used_ins = thunk(*full)
    assert not any(a and not u for a, u in zip(all_used_ins, used_ins))
    return j, [a for a, u in zip(all_used_ins, used_ins) if u]

  new_eqn = eqn.replace(
      invars=[v for v, u in zip(eqn.invars, used_ins) if u],
      outvars=[v for v, u in zip(eqn.outvars, used_outs) if u],
      params={**eqn.params, "fun_jaxpr": rule_closed, "dce_thunk": _Thunk(make)})
  return list(used_ins), new_eqn


_jvp_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _custom_dce_jvp(primals, tangents, *, fun_jaxpr: ClosedJaxpr, dce_thunk, name: str):
  # The JVP is itself a custom_dce call: its rule is the JVP of the parent's rule.
  nonzeros = tuple(type(t) is not ad.Zero for t in tangents)

  def make():
    jvp_closed, jconsts, out_nz = ad.jvp_jaxpr(fun_jaxpr, nonzeros)
    rule = _jvp_rule(fun_jaxpr, dce_thunk, nonzeros, out_nz, jvp_closed.in_avals,
                     len(jconsts), name)
    return jvp_closed, jconsts, out_nz, _Thunk(rule)
  jvp_closed, jconsts, out_nz, thunk = core.memo_on_jaxpr(
      _jvp_cache, fun_jaxpr, (nonzeros, dce_thunk, ad.jvp_mode()), make)
  n_out = len(fun_jaxpr.out_avals)
  outs = custom_dce_call_p.bind(
      *jconsts, *primals, *[t for t in tangents if type(t) is not ad.Zero],
      fun_jaxpr=jvp_closed, dce_thunk=thunk, name=f"jvp({name})")
  it = iter(outs[n_out:])
  return outs[:n_out], [next(it) if nz else ad.Zero(ad.tangent_aval(a))
                        for nz, a in zip(out_nz, fun_jaxpr.out_avals)]


def _jvp_rule(fun_jaxpr: ClosedJaxpr, parent: Callable, nonzeros: Sequence[bool],
              out_nz: Sequence[bool], jvp_in_avals: Sequence[ShapedArray], k: int, name: str):
  """The DCE rule of the JVP call (operands: `k` jvp consts, primals, nonzero tangents;
  outputs: primal outs, nonzero tangent outs): the JVP of the parent's rule for the primal
  outputs that are used or whose tangents are used."""
  in_avals = fun_jaxpr.in_avals
  n_in, n_out = len(in_avals), len(fun_jaxpr.out_avals)

  def make(used: tuple[bool, ...]):
    p_used = list(used[:n_out])
    it = iter(used[n_out:])
    t_used = [next(it) if nz else False for nz in out_nz]
    need = tuple(p or t for p, t in zip(p_used, t_used))
    rule_closed, r_used = parent(*need)

    def g(*ins):
      prim = ins[k:k + n_in]
      it_t = iter(ins[k + n_in:])
      tans = [next(it_t) if nz else ad.Zero(ad.tangent_aval(a))
              for nz, a in zip(nonzeros, in_avals)]
      p_out, t_out = ad.jvp_flat(lambda *xs: _eval(rule_closed, *xs),
                                 [p for p, u in zip(prim, r_used) if u],
                                 [t for t, u in zip(tans, r_used) if u])
      it_p, it_tt = iter(p_out), iter(t_out)
      full_p = [next(it_p) if need[j] else None for j in range(n_out)]
      it_p, it_tt = iter(p_out), iter(t_out)
      full_t = [next(it_tt) if need[j] else None for j in range(n_out)]
      res = [full_p[j] for j in range(n_out) if p_used[j]]
      res += [ad.instantiate_zeros(full_t[j]) for j in range(n_out) if t_used[j]]
      return res
    return _trace_and_prune(g, jvp_in_avals, f"jvp of the DCE rule of {name}")
  return make


_pe_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _custom_dce_partial_eval(eqn, unknowns):
  # Known call: the known outputs (primal work only). Unknown call: the unknown outputs,
  # reading the known operands as residuals (it recomputes the primal work it needs, so it
  # stays one call whose DCE rule still applies).
  fun_jaxpr: ClosedJaxpr = eqn.params["fun_jaxpr"]
  thunk, name = eqn.params["dce_thunk"], eqn.params["name"]
  unknowns = tuple(unknowns)

  def make():
    known, _, nres, out_unknowns = ad.partial_eval_jaxpr(
        fun_jaxpr.jaxpr, unknowns, [False] * len(fun_jaxpr.out_avals))
    n_known = len(known.outvars) - nres
    known, _ = pe.dce_jaxpr(known, [True] * n_known + [False] * nres, instantiate=True)
    unknown, _ = pe.dce_jaxpr(fun_jaxpr.jaxpr, out_unknowns, instantiate=True)
    return (ClosedJaxpr(known, fun_jaxpr.consts), ClosedJaxpr(unknown, fun_jaxpr.consts),
            list(out_unknowns))
  known_closed, unknown_closed, out_unknowns = core.memo_on_jaxpr(_pe_cache, fun_jaxpr,
                                                                  unknowns, make)
  def known_make(used):
    it = iter(used)
    full = tuple(False if u else next(it) for u in out_unknowns)
    rj, r_used = thunk(*full)
    if any(r and u for r, u in zip(r_used, unknowns)):
      j, k_used = pe.dce_jaxpr(known_closed.jaxpr, used)
      return ClosedJaxpr(j, known_closed.consts), k_used
    return rj, [r for r, u in zip(r_used, unknowns) if not u]

  def unknown_make(used):
    it = iter(used)
    return thunk(*[next(it) if u else False for u in out_unknowns])

  known_eqn = None
  if not all(out_unknowns):
    known_eqn = core.JaxprEqn(
        [v for v, u in zip(eqn.invars, unknowns) if not u],
        [v for v, u in zip(eqn.outvars, out_unknowns) if not u], custom_dce_call_p,
        {"fun_jaxpr": known_closed, "dce_thunk": _Thunk(known_make), "name": name})
  unknown_eqn = None
  if any(out_unknowns):   # else the unknown inputs are dead: the call is wholly known
    unknown_eqn = core.JaxprEqn(
        list(eqn.invars), [v for v, u in zip(eqn.outvars, out_unknowns) if u],
        custom_dce_call_p,
        {"fun_jaxpr": unknown_closed, "dce_thunk": _Thunk(unknown_make), "name": name})
  return known_eqn, unknown_eqn, out_unknowns


def _eval_inlined(jaxpr: Jaxpr, consts: Sequence[Any], *args: Any) -> list[Any]:
  """`core.eval_jaxpr`, with every `custom_dce_call` (nested ones too) evaluated inline."""
  env: dict[Var, Any] = dict(zip(jaxpr.constvars, consts))
  env.update(zip(jaxpr.invars, args))
  read = lambda v: env[v] if type(v) is Var else v.val
  for eqn in jaxpr.eqns:
    ins = [read(v) for v in eqn.invars]
    if eqn.primitive is custom_dce_call_p:
      f = eqn.params["fun_jaxpr"]
      outs = _eval_inlined(f.jaxpr, f.consts, *ins)
    else:
      outs = eqn.primitive.bind(*ins, **eqn.params)
      outs = outs if eqn.primitive.multiple_results else [outs]
    env.update(zip(eqn.outvars, outs))
  return [read(v) for v in jaxpr.outvars]


def _split_linear(fun_jaxpr: ClosedJaxpr, undefined: tuple[bool, ...]):
  """`fun_jaxpr` inlined, then split into the part reading only defined (non-linear)
  inputs and the linear rest: `(known, consts, linear, num_res)`. `known` takes the jaxpr's
  consts then the defined inputs and returns the residuals last; `linear` takes the
  residuals then the undefined inputs."""
  jaxpr, consts = pe.trace_to_jaxpr(lambda *xs: _eval_inlined(fun_jaxpr.jaxpr,
                                                              fun_jaxpr.consts, *xs),
                                    fun_jaxpr.in_avals)
  jaxpr = pe.convert_constvars_jaxpr(jaxpr)
  unknowns = [False] * len(consts) + list(undefined)
  known, linear, nres, _ = ad.partial_eval_jaxpr(jaxpr, unknowns, [True] * len(jaxpr.outvars))
  return known, list(consts), linear, nres


_transpose_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _custom_dce_transpose(cts, *args, fun_jaxpr: ClosedJaxpr, **_):
  # The unknown call of a JVP's partial evaluation reads the primal inputs and recomputes the
  # primal work it needs, so it is not linear as a whole: equations reading both kinds of
  # input (a scan carrying primal and tangent values, a mul of a tangent by a primal output
  # of an inner custom_dce call) must be split first. The call is inlined (its nested
  # custom_dce calls too: splitting them by their own rule would prune them by their DCE
  # rules, and a rule that calls its own function would unfold forever), its known part
  # evaluated here and its linear part transposed.
  undefined = tuple(ad.is_undefined_primal(a) for a in args)
  known, consts, linear, nres = core.memo_on_jaxpr(
      _transpose_cache, fun_jaxpr, undefined, lambda: _split_linear(fun_jaxpr, undefined))
  known_outs = core.eval_jaxpr(known, [], *consts,
                               *[a for a, u in zip(args, undefined) if not u])
  residuals = list(known_outs[len(known_outs) - nres:]) if nres else []
  lin_cts = ad.backward_pass(linear, [*residuals, *[a for a, u in zip(args, undefined) if u]],
                             list(cts))
  it = iter(lin_cts[nres:])
  return [next(it) if u else None for u in undefined]


_batch_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _custom_dce_batch(axis_data, args, dims, *, fun_jaxpr: ClosedJaxpr, dce_thunk, name):
  # An axis rule: called even when no operand is batched, so that collectives over the vmapped
  # axis in the function (or its rule) see the axis. As JAX's, an output is batched only
  # where the function's batched output is (so vmap's `out_axes=None` works for outputs of
  # unbatched operands), and the batched rule must batch exactly those outputs.
  args = [x if d is batching.not_mapped else batching.moveaxis(x, d, 0)
          for x, d in zip(args, dims)]
  dims = tuple(batching.not_mapped if d is batching.not_mapped else 0 for d in dims)
  b_closed, b_consts, out_dims = core.memo_on_jaxpr(
      _batch_cache, fun_jaxpr, (dims, axis_data),
      lambda: batching.batch_jaxpr(fun_jaxpr, axis_data, dims,
                                   [batching.not_mapped] * len(fun_jaxpr.out_avals)))
  k = len(b_consts)
  in_avals = b_closed.in_avals

  def make(used):
    # vmap keeps the rule: the batched rule, its outputs batched where the function's are.
    # NB: the rule is traced inside the vmapped axis' environment, so a collective over the
    # axis in the rule (as in the function) binds the axis it names.
    with batching.extend_axis_env(axis_data.name, axis_data.size):
      rule_closed, r_used = dce_thunk(*used)
    used_dims = [d for d, u in zip(out_dims, used) if u]

    def g(*ins):
      xs = [x for x, u in zip(ins[k:], r_used) if u]
      ds = [d for d, u in zip(dims, r_used) if u]
      outs, odims = batching.batch_flat(lambda *a: _eval(rule_closed, *a), xs, ds, axis_data)
      res = []
      for j, (o, d, t) in enumerate(zip(outs, odims, used_dims)):
        if t is batching.not_mapped and d is not batching.not_mapped:
          raise ValueError(
              f"The custom_dce rule of {name}, batched by vmap, returns its used output {j} "
              f"batched ({core.get_aval(o).str_short()}) where the function's output is not "
              "batched: the rule reads a batched argument that the function does not use for "
              "that output. Make the rule compute each output from the same arguments as the "
              "function.")
        res.append(batching.matchaxis(o, d, t, axis_data.size))
      return res
    return _trace_and_prune(g, in_avals, f"vmap of the DCE rule of {name}")

  outs = custom_dce_call_p.bind(*b_consts, *args, fun_jaxpr=b_closed, dce_thunk=_Thunk(make),
                                name=name)
  return outs, list(out_dims)


custom_dce_call_p = core.Primitive("custom_dce_call")
custom_dce_call_p.multiple_results = True
core.def_closed_call(custom_dce_call_p, "fun_jaxpr")
lowering.register_lowering(custom_dce_call_p, _custom_dce_lowering)
ad.primitive_jvps[custom_dce_call_p] = _custom_dce_jvp
ad.partial_eval_rules[custom_dce_call_p] = _custom_dce_partial_eval
ad.primitive_transposes[custom_dce_call_p] = _custom_dce_transpose
pe.dce_rules[custom_dce_call_p] = _custom_dce_dce
batching.fancy_primitive_batchers[custom_dce_call_p] = _custom_dce_batch
core.pp_param_order[custom_dce_call_p] = ("name", "fun_jaxpr", "dce_thunk")
