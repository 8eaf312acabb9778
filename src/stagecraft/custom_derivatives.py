"""User-defined derivative rules: `custom_jvp` and `custom_vjp`.

Both are call primitives carrying the closed jaxpr of the primal function plus the user's
rules as Python callables, with a rule in every interpreter:

- evaluation: with no transformation active the primal function runs as plain Python;
  otherwise `custom_jvp_call` / `custom_vjp_call` evaluate their jaxpr (impl) or are staged
  as one equation (lowered as a call of the primal jaxpr);
- JVP: `custom_jvp_call` runs the user's JVP rule; `custom_vjp_call` runs the user's fwd
  rule for the primal outputs and residuals, and its output tangents come from a
  `custom_lin` equation that is linear in the input tangents;
- transpose: `custom_lin`'s transpose runs the user's bwd rule on the residuals and output
  cotangents. `custom_lin` is never evaluated forward: forward mode (jvp) of a custom_vjp
  function is an error, as in JAX.

Semantics and error messages follow JAX's `custom_jvp` / `custom_vjp` decorators (see JAX's
notebook "Custom derivative rules for JAX-transformable Python functions").
"""
from __future__ import annotations

import functools
import inspect
import weakref
from typing import Any, Callable, Sequence

import numpy as np
import optree

from stagecraft.traceback_util import api_boundary
from stagecraft import core, dtypes, key_reuse, tree_util
from stagecraft.config import config
from stagecraft.core import ClosedJaxpr, ShapedArray
from stagecraft.errors import UnexpectedTracerError
from stagecraft.tree_util import treedef_str
from stagecraft.interpreters import ad, batching, lowering, partial_eval as pe
from stagecraft.lax import elementwise, reduction, shape as lax_shape
from stagecraft.lax.ad_util import stop_gradient
from stagecraft.lax.control_flow import solves as _solves
from stagecraft.lax.control_flow.refs import Ref
from stagecraft.runtime import dispatch
from stagecraft.runtime.array import Array

__all__ = ["custom_jvp", "custom_vjp", "SymbolicZero", "CustomVJPPrimal",
           "custom_jvp_call_p", "custom_vjp_call_p", "custom_lin_p", "closure_convert",
           "custom_gradient", "zero_from_primal", "linear_call", "linear_call_p",
           "CustomJVPCallPrimitive"]

_NS = tree_util.NAMESPACE


def _flatten(tree):
  return optree.tree_flatten(tree, none_is_leaf=False, namespace=_NS)


def _unflatten(treedef, leaves):
  return tree_util.tree_unflatten(treedef, leaves)


def _unflatten_tangents(treedef, leaves):
  """`_unflatten` of (co)tangents: a staged leaf's place (a typed key array, a node of one
  child in the transformations' trees) takes its tangent as it is (float0 zeros, as JAX's
  rules see for keys), not a key array rebuilt around it."""
  leaves = list(leaves)
  spec = tree_util.spec_of(treedef)
  if not any(s.type in tree_util.staged_types for s in _subtrees(spec)):
    return _unflatten(treedef, leaves)
  it = iter(leaves)

  def build(s):
    if s.is_leaf() or s.type in tree_util.staged_types:
      return next(it)
    return optree.tree_unflatten(s.one_level(), [build(c) for c in s.children()])
  return build(spec)


def _subtrees(spec):
  yield spec
  for c in spec.children():
    yield from _subtrees(c)


def _fun_name(f: Callable) -> str:
  f = getattr(f, "func", f)   # functools.partial
  return getattr(f, "__name__", None) or type(f).__name__


def _tree_str(treedef, avals: Sequence[ShapedArray]) -> str:
  return str(_unflatten(treedef, [a.str_short(False) for a in avals])).replace("'", "")


class SymbolicZero:
  """A zero tangent (custom_jvp with `symbolic_zeros=True`) or cotangent (custom_vjp bwd)
  that was never materialized: `aval` describes it, and its other attributes (`shape`,
  `dtype`, `ndim`, `weak_type`, ...) are read from `aval`, as JAX's are. Rules may return
  one for an output whose (co)tangent is zero. It is a pytree leaf (as in JAX) and prints
  as `SymbolicZero`."""
  __slots__ = ("aval",)

  def __init__(self, aval: ShapedArray):
    self.aval = aval

  def __getattr__(self, name):
    if name == "aval":   # NB: not yet set (copy/pickle build the object without __init__)
      raise AttributeError(name)
    try:
      return getattr(self.aval, name)
    except AttributeError:
      raise AttributeError(f"SymbolicZero has no attribute {name}") from None

  def __repr__(self):
    return "SymbolicZero"

  @staticmethod
  def from_primal_value(val: Any) -> "SymbolicZero":
    """The symbolic zero tangent of the primal value `val` (its aval's tangent aval)."""
    return SymbolicZero(core.get_aval(val).to_tangent_aval())


def zero_from_primal(val: Any, symbolic_zeros: bool = False) -> Any:
  """Zero tangents for the primal pytree `val`, as JAX's `custom_derivatives.zero_from_primal`.

  Args:
    val: a pytree of arrays (or scalars).
    symbolic_zeros: `True` gives a `SymbolicZero` per leaf; `False` materialized zeros of
      each leaf's tangent aval (float0 for integer and boolean leaves).

  Returns:
    A pytree with `val`'s structure.
  """
  def one(x):
    t_aval = core.get_aval(x).to_tangent_aval()
    return SymbolicZero(t_aval) if symbolic_zeros else ad.zeros_like_aval(t_aval)
  return tree_util.tree_map(one, val)


class CustomVJPPrimal:
  """A primal input of a custom_vjp fwd rule with `symbolic_zeros=True`: `value` and
  whether it is `perturbed` (has a nonzero tangent)."""
  __slots__ = ("value", "perturbed")

  def __init__(self, value: Any, perturbed: bool):
    self.value = value
    self.perturbed = perturbed

  def __repr__(self):
    return f"CustomVJPPrimal(value={self.value!r}, perturbed={self.perturbed})"


def _signature_with_defaults(fun: Callable):
  """`fun`'s signature when a parameter has a default (else None: positional arguments need
  no binding), remembered per function."""
  try:
    return _SIGNATURES[fun]
  except (KeyError, TypeError):   # TypeError: an unhashable callable
    pass
  try:
    sig = inspect.signature(fun)
    sig = sig if any(p.default is not p.empty for p in sig.parameters.values()) else None
  except (TypeError, ValueError):
    sig = None
  try:
    _SIGNATURES[fun] = sig
  except TypeError:
    pass
  return sig


_SIGNATURES: "weakref.WeakKeyDictionary[Callable, Any]" = weakref.WeakKeyDictionary()


def _resolve_args(fun: Callable, args: tuple, kwargs: dict, kind: str) -> tuple:
  """Binds keyword arguments to positions and fills in the defaults of parameters not
  passed, as JAX does (custom rules take every argument positionally: `f(x, y=2)` called
  as `f(1)` gives the rules `(1, 2)`; a defaulted parameter can be in `nondiff_argnums`)."""
  if isinstance(fun, functools.partial):   # NB: as JAX's, a partial's signature is opaque
    if kwargs:
      _unresolved(fun, kind, list(kwargs))
    return args
  if not kwargs and _signature_with_defaults(fun) is None:
    return args
  try:
    sig = inspect.signature(fun)
    ba = sig.bind(*args, **kwargs)
    ba.apply_defaults()
  except (TypeError, ValueError) as e:
    raise TypeError(f"The input arguments to the {kind}-decorated function {_fun_name(fun)} "
                    f"could not be resolved to positional-only arguments. Binding failed "
                    f"with the error:\n{e}") from e
  # Keyword-only parameters left at their defaults are dropped (the function then uses
  # its defaults), as JAX's; passed ones cannot be given to the rules positionally.
  if passed := [k for k in ba.kwargs if k in kwargs]:
    _unresolved(fun, kind, passed)
  return tuple(ba.args)


def _unresolved(fun, kind: str, names: list):
  raise TypeError(f"The input arguments to the {kind}-decorated function {_fun_name(fun)} "
                  f"could not be resolved to positional-only arguments. Binding failed with "
                  f"the error:\nThe following keyword arguments could not be resolved to "
                  f"positions: {', '.join(names)}")


def _check_nondiff_argnums(nondiff_argnums, nargs: int, name: str, kind: str):
  for i in nondiff_argnums:
    if not -nargs <= i < nargs:
      raise ValueError(f"{kind} function {name} has nondiff_argnums={tuple(nondiff_argnums)} "
                       f"but was called with only {nargs} positional arguments.")
  return tuple(sorted(i % nargs for i in nondiff_argnums))


def _trace_primal(flat_fun: Callable, in_avals: Sequence[ShapedArray], name: str):
  """Traces the flat primal function; its constants (closed-over arrays and tracers of outer
  traces) become leading arguments of the returned closed jaxpr."""
  jaxpr, consts = pe.trace_to_jaxpr(flat_fun, in_avals)
  return ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), []), list(consts)


class _TracedPrimal:
  """The primal function traced on the differentiable arguments (`static` maps the positions
  of the others to their values): flat inputs, `merge` (flat dynamic args -> all args), the
  closed jaxpr (constants as leading arguments) and the output tree."""

  def __init__(self, fun: Callable, args: tuple, static: dict, name: str):
    dyn = [a for i, a in enumerate(args) if i not in static]
    self.in_leaves, self.in_tree = _flatten(tuple(dyn))
    self.in_avals = [core.get_aval(x) for x in self.in_leaves]
    n = len(args)

    def merge(dyn_args):
      it = iter(dyn_args)
      return [static[i] if i in static else next(it) for i in range(n)]
    self.merge = merge
    store: dict = {}
    check_keys = key_reuse.enabled()
    self.dyn = dyn
    self.keys = None   # with key reuse checking: what the function does with typed keys

    def flat_fun(*leaves):
      if not check_keys:
        out = fun(*merge(_unflatten(self.in_tree, leaves)))
      else:
        with key_reuse.scope() as sc:   # the arguments' keys are made fresh for this trace
          d = _unflatten(self.in_tree, leaves)
          out = fun(*merge(d))
          sig = key_reuse.body_signature(tree_util.tree_leaves(d), tree_util.tree_leaves(out))
        self.keys = key_reuse.BodyKeys(sig, tuple(sc.consumed_outer()))
      out_leaves, store["out_tree"] = _flatten(out)
      return out_leaves

    self.call_jaxpr, self.consts = _trace_primal(flat_fun, self.in_avals, name)
    self.out_tree = store["out_tree"]

  def call(self, op: str, run: Callable[[], Any]) -> Any:
    """`run()`, the call of the traced function, checked and applied for key reuse."""
    return key_reuse.call(self.keys, op, tree_util.tree_leaves(tuple(self.dyn)), run,
                          tree_util.tree_leaves, offset=len(self.consts))


def _check_primal_out(rule: str, kind: str, name: str, second: str, p_tree, p_avals,
                      out_tree, out_avals) -> None:
  """Raises JAX's TypeError when a rule's primal output differs from the primal function's
  in tree structure or in leaf shapes/dtypes (JAX's texts: a JVP rule's and a VJP fwd
  rule's differ)."""
  jvp = kind == "custom_jvp"
  head = (f"{rule} must produce a pair (list or tuple of length two) where the first element "
          f"represents the primal output ")
  if jvp:
    head += f"(equal in value to the output of the {kind}-decorated function {name}, and in "
  else:
    head += (f"(equal to the output of the {kind}-decorated function {name}){second} (i.e. "
             f"values stored from the forward pass for use on the backward pass), but instead "
             f"the fwd rule output's first element had")
  if p_tree != out_tree:
    if jvp:
      head += ("particular of the same container/pytree structure), but instead the JVP rule "
               "output's first element had")
    raise TypeError(f"{head} container/pytree structure:\n    {_tree_str(p_tree, p_avals)}\n"
                    f"while the {kind}-decorated function {name} had output container/pytree "
                    f"structure:\n    {_tree_str(out_tree, out_avals)}.")
  if any(a.shape != b.shape or a.dtype != b.dtype for a, b in zip(p_avals, out_avals)):
    if jvp:
      head += ("particular with leaves of the same shape/dtype), but instead the JVP rule "
               "output's first element had")
    raise TypeError(f"{head} shapes/dtypes of:\n    {_tree_str(p_tree, p_avals)}\nwhile the "
                    f"{kind}-decorated function {name} had output shapes/dtypes of:\n"
                    f"    {_tree_str(out_tree, out_avals)}{'.' if jvp else ''}")


def _stop_gradient_tree(x):
  return tree_util.tree_map(
      lambda v: stop_gradient(v) if isinstance(v, core.Tracer) else v, x)


def _closed_over_error(kind: str) -> Exception:
  """The error for differentiating a custom_jvp/custom_vjp function with respect to a
  closed-over value: `ad.CustomVJPException` for custom_vjp (JAX's class), a TypeError for
  custom_jvp."""
  what = "JVP" if kind == "custom_jvp" else "VJP"
  rules = "JVP rule" if kind == "custom_jvp" else "fwd and bwd rules"
  cls = TypeError if kind == "custom_jvp" else ad.CustomVJPException
  return cls(
      f"Detected differentiation of a {kind} function with respect to a closed-over value. "
      f"That isn't supported because the custom {what} rule only specifies how to "
      f"differentiate the {kind} function with respect to explicit input parameters. Try "
      f"passing the closed-over value into the {kind} function as an argument, and "
      f"adapting the {kind} {rules}.")


# ---------------------------------------------------------------------------
# custom_jvp


def _nondiff_positions(fun: Callable, argnums: Sequence[int], argnames: Sequence[str]
                       ) -> tuple[int, ...]:
  """`argnums` and the positions of the positional-or-keyword parameters of `fun` named in
  `argnames` (JAX's `nondiff_argnames`), sorted."""
  nums = set(argnums)
  if argnames:
    names = (argnames,) if isinstance(argnames, str) else tuple(argnames)
    params = inspect.signature(fun).parameters.values()
    nums.update(i for i, p in enumerate(params)
                if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and p.name in names)
  return tuple(sorted(nums))


def _forward_attr(self, name: str):
  """A missing attribute of a custom_jvp/custom_vjp: one named `def...` is looked up on the
  wrapped function (as JAX's, so a misspelt `f.defvjp_with_logs` raises "'function' object
  has no attribute ..."); any other is a bare AttributeError."""
  if name.startswith("def") and "fun" in vars(self):
    return getattr(self.fun, name)
  raise AttributeError


class custom_jvp:
  """A function with a custom JVP rule, used by every transformation that differentiates.

  Usage (as JAX's `custom_jvp`)::

    @custom_jvp
    def f(x, y):
      return np.sin(x) * y

    @f.defjvp
    def f_jvp(primals, tangents):
      (x, y), (x_dot, y_dot) = primals, tangents
      return f(x, y), np.cos(x) * x_dot * y + np.sin(x) * y_dot

  Args:
    fun: the primal function, of arrays (pytrees) to arrays (pytrees).
    nondiff_argnums: positions of arguments that are not differentiated (Python values such
      as functions, or arrays treated as constants); the JVP rule is called as
      `jvp(*nondiff_args, primals, tangents)` with `primals` the remaining arguments.
    nondiff_argnames: names of such arguments (positional-or-keyword parameters of `fun`),
      added to `nondiff_argnums`.

  Calling it raises AttributeError when no rule was defined, and TypeError when the rule's
  outputs do not match the primal function's (tree structure, shapes or dtypes).
  """

  __getattr__ = _forward_attr

  def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = (),
               nondiff_argnames: Sequence[str] = ()):
    functools.update_wrapper(self, fun)
    self.fun = fun
    self.nondiff_argnums = _nondiff_positions(fun, nondiff_argnums, nondiff_argnames)
    self.jvp: Callable | None = None
    self.symbolic_zeros = False

  def __get__(self, obj, objtype=None):
    if obj is None:
      return self
    return functools.partial(self, obj)

  def defjvp(self, jvp: Callable, symbolic_zeros: bool = False) -> Callable:
    """Sets the JVP rule `jvp(primals, tangents) -> (primal_out, tangent_out)`; with
    `symbolic_zeros=True` zero tangents arrive as `SymbolicZero` objects. Returns `jvp`."""
    self.jvp = jvp
    self.symbolic_zeros = symbolic_zeros
    return jvp

  def defjvps(self, *jvps: Callable | None) -> None:
    """One rule per argument, `jvp_i(t_i, primal_out, *primals)`, whose contributions are
    summed (None: that argument's tangent contributes nothing).

    Raises:
      TypeError: with nondiff_argnums (unsupported, as in JAX).
    """
    if self.nondiff_argnums:
      raise TypeError("Can't use ``defjvps`` with ``nondiff_argnums``.")

    def jvp(primals, tangents):
      primal_out = self(*primals)
      acc = None
      for t, rule in zip(tangents, jvps):
        if rule is None:
          continue
        contrib = rule(t, primal_out, *primals)
        acc = contrib if acc is None else tree_util.tree_map(lambda a, b: a + b, acc, contrib)
      if acc is None:
        acc = tree_util.tree_map(lambda p: ad.zeros_like_aval(ad.tangent_aval(
            core.get_aval(p))), primal_out)
      return primal_out, acc

    jvp.__name__ = "jvp"   # NB: as JAX names it (printed `jvp=jvp`)
    self.defjvp(jvp)

  @api_boundary
  def __call__(self, *args, **kwargs):
    name = _fun_name(self.fun)
    if self.jvp is None:
      raise AttributeError(f"No JVP defined for custom_jvp function {name} using defjvp.")
    args = _resolve_args(self.fun, args, kwargs, "custom_jvp")
    nondiff = _check_nondiff_argnums(self.nondiff_argnums, len(args), name, "custom_jvp")
    return _apply_custom_jvp(self, args, nondiff, name)


def _custom_call_trace(args: tuple, nondiff: Sequence[int]) -> core.Trace:
  """The trace that handles a call of a custom_jvp/custom_vjp function: the current one,
  except that a partial-evaluation trace none of whose tracers is among the differentiable
  arguments passes the call to the trace below it."""
  trace = core.current_trace()
  if type(trace) is not ad.PartialEvalTrace:
    return trace
  leaves, _ = _flatten(tuple(a for i, a in enumerate(args) if i not in nondiff))
  while type(trace) is ad.PartialEvalTrace and not any(trace.is_unknown(x) for x in leaves):
    trace = trace.parent
  return trace


def _rebuilt(out: Any) -> Any:
  """`out` flattened and rebuilt in the caller's trace context, as JAX returns a custom
  function's outputs (unflattened after the primitive's bind): pytree classes get new
  instances made there (flax.nnx's Variables record the trace they were made in), not the
  objects the function built under another trace."""
  leaves, tree = tree_util.tree_flatten(out)
  return tree_util.tree_unflatten(tree, leaves)


def _canonical_host_args(args: tuple, nondiff: Sequence[int]) -> tuple:
  """The arguments a custom_jvp/custom_vjp function gets when called outside any
  transformation, as JAX passes them: NumPy arrays and scalars among the differentiable
  arguments become NumPy arrays of the canonical dtype (float64 -> float32, a scalar -> a
  0-d array, with x64 off), as JAX's primitive binding converts them; other leaves (Arrays,
  Python scalars) and the nondiff arguments are passed as given."""
  def conv(x):
    if isinstance(x, (np.ndarray, np.generic)) and x.dtype != object:
      dt = dtypes.canonicalize_dtype(x.dtype)
      if dt != x.dtype or isinstance(x, np.generic):
        return np.asarray(x, dt)
    return x
  return tuple(a if i in nondiff else tree_util.tree_map(conv, a)
               for i, a in enumerate(args))


def _apply_custom_jvp(cj: "custom_jvp", args: tuple, nondiff: tuple, name: str):
  """Calls a custom_jvp function in the current trace, as JAX's `process_custom_jvp_call`
  does: plain evaluation calls the function; a JVP trace calls the user's JVP rule on the
  primal values (the function itself is not traced, so it runs as often as in JAX); a
  partial-evaluation trace with no unknown input defers to the trace below it; any other
  trace (staging, batching) gets a `custom_jvp_call` equation."""
  trace = _custom_call_trace(args, nondiff)
  if trace is not core.current_trace():
    with core.set_current_trace(trace):
      out = _apply_custom_jvp(cj, args, nondiff, name)
    return _rebuilt(out)
  if type(trace) is core.EvalTrace:
    return _rebuilt(cj.fun(*_canonical_host_args(args, nondiff)))
  if type(trace) is ad.JVPTrace:
    return _custom_jvp_in_jvp_trace(trace, cj, args, nondiff, name)
  # Non-differentiable arguments are constants for the rule (their tangents are dropped).
  static = {i: _stop_gradient_tree(args[i]) for i in nondiff}
  t = _TracedPrimal(cj.fun, args, static, name)
  in_leaves, in_tree, merge, call_jaxpr, consts, out_tree = (
      t.in_leaves, t.in_tree, t.merge, t.call_jaxpr, t.consts, t.out_tree)
  flat_jvp = _make_flat_jvp(cj, static, merge, in_tree, out_tree, call_jaxpr.out_avals)
  return t.call("custom_jvp_call", lambda: _unflatten(out_tree, custom_jvp_call_p.bind(
      *consts, *in_leaves, call_jaxpr=call_jaxpr, jvp_jaxpr_fun=_named(flat_jvp, name),
      num_consts=len(consts), symbolic_zeros=cj.symbolic_zeros)))


def _split_jvp_args(trace: "ad.JVPTrace", args: tuple, nondiff: tuple):
  """The primal and tangent leaves of the differentiable arguments, the non-differentiable
  ones as primal values (their tangents dropped), and `merge`."""
  n = len(args)
  static = {i: tree_util.tree_map(
      lambda x: x.primal if type(x) is ad.JVPTracer and x._trace is trace else x, args[i])
            for i in nondiff}
  leaves, in_tree = _flatten(tuple(a for i, a in enumerate(args) if i not in static))
  pts = [trace.to_primal_tangent(x) for x in leaves]

  def merge(dyn_args):
    it = iter(dyn_args)
    return [static[i] if i in static else next(it) for i in range(n)]
  return static, in_tree, merge, [p for p, _ in pts], [t for _, t in pts]


def _custom_jvp_in_jvp_trace(trace, cj, args, nondiff, name):
  static, in_tree, merge, primals, tangents = _split_jvp_args(trace, args, nondiff)
  if all(type(t) is ad.Zero for t in tangents):
    with core.set_current_trace(trace.parent):
      return _apply_custom_jvp(cj, tuple(merge(_unflatten(in_tree, primals))), nondiff, name)
  flat_jvp = _make_flat_jvp(cj, static, merge, in_tree, None, None)
  with core.set_current_trace(trace.parent):
    p_out, t_out = flat_jvp(primals, tangents)
  return _unflatten(flat_jvp.out_tree[0], [trace._wrap(p, t) for p, t in zip(p_out, t_out)])


_SCALAR_TYPES = frozenset({bool, int, float, complex, *(
    type(np.zeros((), t)[()]) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64,
                                        np.uint8, np.uint16, np.uint32, np.uint64,
                                        np.float16, np.float32, np.float64, np.complex64,
                                        np.complex128))})


def _as_arrays(values: Sequence[Any], avals: Sequence[ShapedArray] | None = None) -> list:
  """`values` with the scalars an evaluated jaxpr's literals give (a literal's `val`: a
  Python or NumPy scalar) made what JAX's rules see there: a tracer of the staging trace
  whose atom is the literal (printed as the literal), or eagerly an Array of the literal's
  aval (`avals[i]`, else the value's own). equinox's `is_array` splits a rule's arguments
  on it (a Python int would count as static data)."""
  out = list(values)
  for i, v in enumerate(out):
    if type(v) in _SCALAR_TYPES:
      aval = avals[i] if avals is not None else core.get_aval(v)
      if aval.dtype == dtypes.float0:
        continue
      folded = ad.folded_constant(v, aval)
      out[i] = folded if folded is not None else Array(
          dispatch.to_buffer(np.asarray(v, aval.dtype), aval), aval)
  return out


def _make_flat_jvp(cj: custom_jvp, static: dict, merge, in_tree, out_tree,
                   out_avals: Sequence[ShapedArray] | None) -> Callable:
  """The user's JVP rule on flat primals and tangents (tangents may be ad.Zero); returns
  flat primal outputs and tangent outputs (ad.Zero for symbolic zeros), checked against
  the primal function's output (`out_tree`, `out_avals`) when it was traced (None: not
  traced, as when a JVP trace calls the rule directly). The rule's output tree is left in
  `flat_jvp.out_tree[0]`."""
  jvp_rule = cj.jvp
  name, jvp_name = _fun_name(cj.fun), _fun_name(jvp_rule)
  static_args = [static[i] for i in sorted(static)]

  def flat_jvp(primals, tangents):
    if cj.symbolic_zeros:
      ts = [SymbolicZero(t.aval) if type(t) is ad.Zero else t for t in tangents]
    else:
      ts = [ad.instantiate_zeros(t) for t in tangents]
    # NB: called by a JVP trace directly (`out_tree` None), the rule gets the primal values
    # as they are (a Python float stays one, as in JAX); from a staged custom_jvp_call, a
    # literal's scalar is made an array (`_as_arrays`).
    py_primals = tuple(_unflatten(in_tree, primals if out_tree is None else
                                  _as_arrays(primals)))
    py_tangents = tuple(_unflatten_tangents(in_tree, ts))
    pair = jvp_rule(*static_args, py_primals, py_tangents)
    if not isinstance(pair, (list, tuple)) or len(pair) != 2:
      raise TypeError(f"Custom JVP rule {jvp_name} for function {name} must produce a pair "
                      f"(list or tuple of length two) representing primal and tangent "
                      f"outputs, but got {pair}.")
    p_out, t_out = pair
    p_leaves, p_tree = _flatten(p_out)
    t_leaves, t_tree = optree.tree_flatten(t_out, none_is_leaf=False, namespace=_NS,
                                           is_leaf=lambda x: type(x) is SymbolicZero)
    if p_tree != t_tree:
      raise TypeError(f"Custom JVP rule {jvp_name} for function {name} must produce primal "
                      f"and tangent outputs with equal container (pytree) structures, but "
                      f"got {treedef_str(p_tree)} and {treedef_str(t_tree)} respectively.")
    p_avals = [core.get_aval(p) for p in p_leaves]
    if out_tree is not None:
      _check_primal_out(f"Custom JVP rule {jvp_name} for function {name}", "custom_jvp",
                        name, "", p_tree, p_avals, out_tree, out_avals)
    flat_jvp.out_tree[:] = [p_tree]
    tangents_out, bad = [], []
    for p_aval, t in zip(p_avals, t_leaves):
      want = ad.tangent_aval(p_aval)
      if type(t) is SymbolicZero:
        got = t.aval
        t = ad.Zero(want)
      elif want.dtype == dtypes.float0:
        got = want   # any tangent of an integer output is a zero
        t = ad.Zero(want)
      else:
        got = core.get_aval(t)
      if got.shape != want.shape or got.dtype != want.dtype:
        bad.append((p_aval, want, got))
      tangents_out.append(t)
    if bad:
      if len(p_avals) == 1:
        p_aval, want, got = bad[0]
        raise TypeError(f"Custom JVP rule must produce primal and tangent outputs with "
                        f"corresponding shapes and dtypes. Expected {want.str_short(False)} "
                        f"(tangent type of {p_aval.str_short(False)}) but got "
                        f"{got.str_short(False)}.")
      lines = "\n".join(f"  primal {p.str_short(False)} with tangent {g.str_short(False)}, "
                        f"expecting tangent {w}" for p, w, g in bad)
      raise TypeError(f"Custom JVP rule must produce primal and tangent outputs with "
                      f"corresponding shapes and dtypes, but got:\n{lines}")
    return list(p_leaves), tangents_out

  flat_jvp.__name__ = jvp_name
  flat_jvp.out_tree = [out_tree]
  return flat_jvp


# ---------------------------------------------------------------------------
# Batching: the primal jaxpr is batched, and the rules are wrapped so that they run batched
# (the batch axis of every batched value is moved to the front first).


def _front(args, dims):
  return ([x if d is None else batching.moveaxis(x, d, 0) for x, d in zip(args, dims)],
          [None if d is None else 0 for d in dims])


class _JvpCallSubfun:
  """A function of a custom_jvp_call equation as `get_bind_params` hands it out (the role
  of JAX's `lu.WrappedFun`): `call_wrapped(*args)` calls it; `bind_params` are the
  equation's params, with which `bind(..., subfuns=...)` re-binds the equation."""
  __slots__ = ("fn", "bind_params")

  def __init__(self, fn: Callable, bind_params: dict):
    self.fn = fn
    self.bind_params = bind_params

  def call_wrapped(self, *args):
    return self.fn(*args)

  def __repr__(self):
    return f"Wrapped function:\nCore: {getattr(self.fn, '__name__', self.fn)}\n"


class CustomJVPCallPrimitive(core.Primitive):
  """The primitive of a custom_jvp function's call (JAX's `custom_jvp_call_p`): equations
  hold the body as `call_jaxpr` and the rule as `jvp_jaxpr_fun`.

  `get_bind_params(params)` gives, as JAX's, the params with `call_jaxpr`, `jvp_jaxpr_fun`
  and `num_consts` replaced by `subfuns=(fun, jvp)`: `fun.call_wrapped(*args)` evaluates the
  body, `jvp.call_wrapped(*primals, *tangents)` returns `[*primal outs, *tangent outs]`
  (zero ones as `SymbolicZero`); `bind(*args, subfuns=..., **rest)` re-binds the equation
  (equinox's jaxpr finalisation inlines the call with `fun`)."""
  multiple_results = True

  def get_bind_params(self, params: dict) -> dict:
    new = dict(params)
    call_jaxpr: ClosedJaxpr = new.pop("call_jaxpr")
    num_consts: int = new.pop("num_consts")
    rule = new.pop("jvp_jaxpr_fun")

    def fun(*args):
      return core.eval_jaxpr(call_jaxpr.jaxpr, call_jaxpr.consts, *args)
    fun.__name__ = call_name(rule)

    def jvp(*xs):
      n, ragged = divmod(len(xs), 2)
      if ragged:
        raise TypeError(f"custom_jvp_call jvp: expected primals and tangents of equal "
                        f"numbers, got {len(xs)} arguments")
      primals = list(xs[num_consts:n])
      tangents = [ad.Zero(t.aval) if type(t) is SymbolicZero else t
                  for t in xs[n + num_consts:]]
      p_out, t_out = rule(primals, tangents)
      return [*p_out, *[SymbolicZero(t.aval) if type(t) is ad.Zero else t for t in t_out]]
    jvp.__name__ = "jvp"
    new["subfuns"] = (_JvpCallSubfun(fun, dict(params)), _JvpCallSubfun(jvp, dict(params)))
    return new

  def bind(self, *args, **params):
    subfuns = params.pop("subfuns", None)
    if subfuns is not None:
      held = getattr(subfuns[0], "bind_params", None)
      if held is None:
        raise NotImplementedError(
            "custom_jvp_call.bind(..., subfuns=...): stagecraft re-binds only the subfuns "
            "that get_bind_params gave for an equation; bind the custom_jvp function "
            "instead.")
      params = {**held, **params}
    return super().bind(*args, **params)


custom_jvp_call_p = CustomJVPCallPrimitive("custom_jvp_call")


def _named(fn: Callable, name: str) -> Callable:
  """`fn` (a flat jvp or fwd rule, the `jvp_jaxpr_fun` / `fwd_jaxpr_thunk` param of a
  custom_jvp_call / custom_vjp_call equation) marked with the custom function's `name`
  (printed `name=`; JAX reads it from the body's debug info)."""
  fn.fun_name = name
  return fn


def call_name(rule: Callable) -> str:
  """The name of the custom_jvp/custom_vjp function whose equation holds `rule` as its
  `jvp_jaxpr_fun` / `fwd_jaxpr_thunk`."""
  return getattr(rule, "fun_name", getattr(rule, "__name__", "<unnamed>"))


def _out_trees(fwd: Callable) -> Callable:
  """A custom_vjp_call equation's `out_trees` param, as JAX's: a thunk giving the output
  trees of the fwd rule `fwd` (the primal outputs' and, once the rule has run, the
  residuals') — stagecraft's own rules never call it."""
  return lambda: getattr(fwd, "out_tree", None)


def _custom_call_lowering(ctx, *args, call_jaxpr: ClosedJaxpr, **_):
  # NB: inlined into the enclosing function (its constants dense constants there), as JAX
  # lowers custom_jvp/custom_vjp calls: no private function, so XLA simplifies and fuses the
  # body with its surroundings as for JAX's program (a `func.call` can change the last bit).
  consts = [lowering.dense_constant(ctx.fb, c, v.aval)
            for c, v in zip(call_jaxpr.consts, call_jaxpr.jaxpr.constvars)]
  return lowering.jaxpr_subcomp(ctx.fb, call_jaxpr.jaxpr, consts, args)


def _custom_jvp_call_jvp(primals, tangents, *, call_jaxpr, jvp_jaxpr_fun, num_consts,
                         symbolic_zeros):
  jvp = jvp_jaxpr_fun
  if any(type(t) is not ad.Zero for t in tangents[:num_consts]):
    raise _closed_over_error("custom_jvp")
  return jvp(list(primals[num_consts:]), list(tangents[num_consts:]))


def _names_axis(jaxpr: core.Jaxpr, name: Any) -> bool:
  """Whether an equation of `jaxpr` (or of a body inside it) names the axis `name` in its
  params (a collective over a vmap's axis): such a body is batched even when no input is,
  as JAX batches a custom function's body whatever its inputs."""
  if name is None:
    return False
  for eqn in jaxpr.eqns:
    for v in eqn.params.values():
      if v == name or (type(v) is tuple and name in v):
        return True
    if any(_names_axis(j, name) for j in core.subjaxprs(eqn)):
      return True
  return False


def _custom_jvp_call_batch(axis_data, args, dims, *, call_jaxpr, jvp_jaxpr_fun, num_consts,
                           symbolic_zeros):
  jvp = jvp_jaxpr_fun
  n_out = len(call_jaxpr.out_avals)
  if all(d is None for d in dims) and not _names_axis(call_jaxpr.jaxpr, axis_data.name):
    return custom_jvp_call_p.bind(*args, call_jaxpr=call_jaxpr, jvp_jaxpr_fun=jvp,
                                  num_consts=num_consts, symbolic_zeros=symbolic_zeros
                                  ), [None] * n_out
  args, dims = _front(args, dims)
  # NB: with no batched input (a collective over the axis inside), outputs keep the dims
  # the body gives them (a psum of an unbatched value is unbatched), as JAX's
  out_to = ([batching.not_mapped] * n_out if all(d is None for d in dims) else [0] * n_out)
  b_closed, b_consts, out_dims = batching.batch_jaxpr(call_jaxpr, axis_data, dims, out_to)
  arg_dims = dims[num_consts:]
  arg_avals = call_jaxpr.in_avals[num_consts:]
  tag = batching.rule_tag()   # the rule may close over this vmap's tracers

  def batched_jvp(primals, tangents):
    nz = [type(t) is not ad.Zero for t in tangents]
    n = len(primals)
    zero_out: list = []

    def f(*xs):
      it = iter(xs[n:])
      ts = [next(it) if z else ad.Zero(ad.tangent_aval(a)) for z, a in zip(nz, arg_avals)]
      p_out, t_out = jvp(list(xs[:n]), ts)
      zero_out[:] = [type(t) is ad.Zero for t in t_out]
      return [*p_out, *[t for t in t_out if type(t) is not ad.Zero]]

    vals = [*primals, *[t for t, z in zip(tangents, nz) if z]]
    vdims = [*arg_dims, *[d for d, z in zip(arg_dims, nz) if z]]
    outs, odims = batching.batch_flat(f, vals, vdims, axis_data, tag)
    targets = [*out_dims, *[t for t, z in zip(out_dims, zero_out) if not z]]
    outs = [batching.matchaxis(o, d, t, axis_data.size)
            for o, d, t in zip(outs, odims, targets)]
    p_out, rest = outs[:n_out], iter(outs[n_out:])
    t_out = [ad.Zero(ad.tangent_aval(core.get_aval(p))) if z else next(rest)
             for p, z in zip(p_out, zero_out)]
    return p_out, t_out
  batched_jvp.__name__ = getattr(jvp, "__name__", "jvp")
  _named(batched_jvp, call_name(jvp))

  outs = custom_jvp_call_p.bind(*b_consts, *args, call_jaxpr=b_closed,
                                jvp_jaxpr_fun=batched_jvp,
                                num_consts=len(b_consts) + num_consts,
                                symbolic_zeros=symbolic_zeros)
  return outs, list(out_dims)


def _custom_jvp_call_transpose(cts, *args, call_jaxpr, jvp_jaxpr_fun, num_consts,
                               symbolic_zeros):
  """A custom_jvp function applied to tangents (a JVP rule written with the function
  itself) is linear there: its body is transposed in place, the custom rule dropped, as
  JAX's partial evaluation stages the function's body in the linear program."""
  return ad.backward_pass(call_jaxpr.jaxpr, args, cts, call_jaxpr.consts)


core.def_closed_call(custom_jvp_call_p, "call_jaxpr")
lowering.register_lowering(custom_jvp_call_p, _custom_call_lowering)
ad.primitive_jvps[custom_jvp_call_p] = _custom_jvp_call_jvp
ad.primitive_transposes[custom_jvp_call_p] = _custom_jvp_call_transpose
batching.fancy_primitive_batchers[custom_jvp_call_p] = _custom_jvp_call_batch


def _custom_jvp_call_pp_rule(eqn, context):
  # As JAX: `name=` (the function's) first, then the others sorted, the rule as `jvp=` by
  # its name, `num_consts` only when nonzero.
  params = {("jvp" if k == "jvp_jaxpr_fun" else k): v for k, v in eqn.params.items()
            if not (k == "num_consts" and not v)}
  return [("name", call_name(eqn.params["jvp_jaxpr_fun"])), *sorted(params.items())]


core.pp_eqn_rules[custom_jvp_call_p] = _custom_jvp_call_pp_rule


# ---------------------------------------------------------------------------
# custom_vjp


class custom_vjp:
  """A function with a custom VJP rule (a forward pass saving residuals and a backward pass),
  used by reverse-mode differentiation (`grad`, `vjp`); forward mode (`jvp`) raises.

  Usage (as JAX's `custom_vjp`)::

    @custom_vjp
    def f(x, y):
      return np.sin(x) * y

    def f_fwd(x, y):
      return f(x, y), (np.cos(x), np.sin(x), y)     # output, residuals

    def f_bwd(res, g):
      cos_x, sin_x, y = res
      return (cos_x * g * y, sin_x * g)             # one cotangent (or None) per argument

    f.defvjp(f_fwd, f_bwd)

  Args:
    fun: the primal function.
    nondiff_argnums: positions of non-array arguments (e.g. functions); `bwd` is then called
      as `bwd(*nondiff_args, residuals, g)` and returns cotangents for the other arguments.
      Tracers may not be passed in these positions (UnexpectedTracerError).
    nondiff_argnames: names of such arguments (positional-or-keyword parameters of `fun`),
      added to `nondiff_argnums`.

  A `Ref` passed as a (top-level) argument is not differentiated: the function and its
  rules see it as it is, `fwd` may return it among its residuals and `bwd` may write into
  it (JAX's stash-grads pattern); `bwd`'s cotangent for it is ignored.

  Calling it raises AttributeError when no rule was defined; differentiation raises
  TypeError/ValueError when `fwd`'s primal output or `bwd`'s cotangents do not match the
  function's output and inputs (tree structure, shapes, dtypes).
  """

  __getattr__ = _forward_attr

  def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = (),
               nondiff_argnames: Sequence[str] = ()):
    functools.update_wrapper(self, fun)
    self.fun = fun
    self.nondiff_argnums = _nondiff_positions(fun, nondiff_argnums, nondiff_argnames)
    self.fwd: Callable | None = None
    self.bwd: Callable | None = None
    self.symbolic_zeros = False

  def __get__(self, obj, objtype=None):
    if obj is None:
      return self
    return functools.partial(self, obj)

  def defvjp(self, fwd: Callable, bwd: Callable, symbolic_zeros: bool = False,
             optimize_remat: bool = False) -> None:
    """Sets the rules: `fwd(*args) -> (out, residuals)` and `bwd(residuals, g) -> tuple` of
    one cotangent per (differentiable) argument, None meaning zero. With
    `symbolic_zeros=True`, `fwd` receives `CustomVJPPrimal(value, perturbed)` arguments and
    `bwd` may receive `SymbolicZero` output cotangents.

    `optimize_remat`: JAX's experimental remat optimization of `fwd` under `remat`; it
    changes no value, and stagecraft records the flag (`self.optimize_remat`) without
    applying it (the jaxpr under remat differs from JAX's).

    Raises:
      NotImplementedError: `symbolic_zeros` and `optimize_remat` both True (JAX's words).
    """
    self.fwd = fwd
    self.bwd = bwd
    self.symbolic_zeros = symbolic_zeros
    self.optimize_remat = optimize_remat
    if symbolic_zeros and optimize_remat:
      raise NotImplementedError(
          "remat optimization for custom_vjp does not support symbolic zeros")

  @api_boundary
  def __call__(self, *args, **kwargs):
    name = _fun_name(self.fun)
    if self.fwd is None or self.bwd is None:
      raise AttributeError(f"No VJP defined for custom_vjp function {name} using defvjp.")
    args = _resolve_args(self.fun, args, kwargs, "custom_vjp")
    nondiff = _check_nondiff_argnums(self.nondiff_argnums, len(args), name, "custom_vjp")
    for i in nondiff:
      for leaf in tree_util.tree_leaves(args[i]):
        if isinstance(leaf, core.Tracer):
          raise UnexpectedTracerError(
              f"Found a stagecraft Tracer object passed as an argument to a custom_vjp "
              f"function ({name}) in a position indicated by nondiff_argnums as "
              f"non-differentiable (argument {i}). Tracers cannot be passed as "
              f"non-differentiable arguments to custom_vjp functions; instead, "
              f"nondiff_argnums should only be used for arguments that can't be or contain "
              f"tracers, e.g. function-valued arguments. In particular, array-valued "
              f"arguments should typically not be indicated as nondiff_argnums.")
    ref_args = [i for i, a in enumerate(args) if isinstance(a, Ref) and i not in nondiff]
    if ref_args:
      return _call_with_ref_args(self, args, nondiff, ref_args)
    return _apply_custom_vjp(self, args, nondiff, name)


def _call_with_ref_args(cv: "custom_vjp", args: tuple, nondiff: tuple, ref_args: list[int]):
  """A custom_vjp function called with Refs as (top-level) arguments, as JAX's stash-grads
  pattern does: the refs are not differentiated but closed over by the function and its
  rules (a ref's cotangent from `bwd` is dropped), and Refs among `fwd`'s residuals reach
  `bwd` as they are, which may write into them (in the backward pass)."""
  n = len(args)
  keep = [i for i in range(n) if i not in ref_args]

  def full(dyn):
    it = iter(dyn)
    return [args[i] if i in ref_args else next(it) for i in range(n)]

  box: list = []

  @functools.wraps(cv.fun)
  def fun(*dyn):
    return cv.fun(*full(dyn))

  @functools.wraps(cv.fwd)
  def fwd(*dyn):
    out, res = cv.fwd(*full(dyn))
    leaves, tree = tree_util.tree_flatten(res)
    pos = [k for k, x in enumerate(leaves) if isinstance(x, Ref)]
    box[:] = [(tree, pos, [leaves[k] for k in pos])]
    return out, [x for k, x in enumerate(leaves) if k not in pos]

  @functools.wraps(cv.bwd)
  def bwd(*a):
    tree, pos, refs = box[0]
    it, it_refs = iter(a[-2]), iter(refs)
    res = tree_util.tree_unflatten(
        tree, [next(it_refs) if k in pos else next(it) for k in range(tree.num_leaves)])
    cts = cv.bwd(*a[:-2], res, a[-1])
    if isinstance(cts, (tuple, list)) and len(cts) == n - len(nondiff):
      diff = [i for i in range(n) if i not in nondiff]
      cts = tuple(c for i, c in zip(diff, cts) if i not in ref_args)
    return cts

  inner = custom_vjp(fun, nondiff_argnums=tuple(keep.index(i) for i in nondiff))
  inner.defvjp(fwd, bwd, symbolic_zeros=cv.symbolic_zeros)
  return inner(*[args[i] for i in keep])


def _apply_custom_vjp(cv: "custom_vjp", args: tuple, nondiff: tuple, name: str):
  """Calls a custom_vjp function in the current trace (see `_apply_custom_jvp`): a JVP trace
  runs the user's fwd rule on the primal values and emits the `custom_lin` equation whose
  transpose is the bwd rule; the function itself runs only where JAX runs it."""
  trace = _custom_call_trace(args, nondiff)
  if trace is not core.current_trace():
    with core.set_current_trace(trace):
      out = _apply_custom_vjp(cv, args, nondiff, name)
    return _rebuilt(out)
  if type(trace) is core.EvalTrace:
    return _rebuilt(cv.fun(*_canonical_host_args(args, nondiff)))
  if type(trace) is ad.JVPTrace:
    static, in_tree, merge, primals, tangents = _split_jvp_args(trace, args, nondiff)
    if all(type(t) is ad.Zero for t in tangents):
      with core.set_current_trace(trace.parent):
        return _apply_custom_vjp(cv, tuple(merge(_unflatten(in_tree, primals))), nondiff,
                                 name)
    in_avals = [core.get_aval(p) for p in primals]
    fwd = _make_flat_fwd(cv, static, merge, in_tree, in_avals, None, None)
    with core.set_current_trace(trace.parent):
      p_out, t_out = _custom_vjp_jvp(fwd, primals, tangents,
                                     lambda p_out: [core.get_aval(p) for p in p_out])
    return _unflatten(fwd.out_tree[0], [trace._wrap(p, t) for p, t in zip(p_out, t_out)])
  static = {i: args[i] for i in nondiff}
  t = _TracedPrimal(cv.fun, args, static, name)
  in_leaves, in_tree, in_avals, merge, call_jaxpr, consts, out_tree = (
      t.in_leaves, t.in_tree, t.in_avals, t.merge, t.call_jaxpr, t.consts, t.out_tree)
  fwd = _make_flat_fwd(cv, static, merge, in_tree, in_avals, out_tree, call_jaxpr.out_avals)
  return t.call("custom_vjp_call", lambda: _unflatten(out_tree, custom_vjp_call_p.bind(
      *consts, *in_leaves, call_jaxpr=call_jaxpr, fwd_jaxpr_thunk=_named(fwd, name),
      num_consts=len(consts), bwd=cv.bwd, out_trees=_out_trees(fwd),
      symbolic_zeros=cv.symbolic_zeros)))


def _make_flat_fwd(cv: custom_vjp, static: dict, merge, in_tree, in_avals, out_tree,
                   out_avals) -> Callable:
  """The user's fwd rule on flat primals: returns `(primal_outs, residual_leaves, bwd)`
  where `bwd(residual_leaves, cts) -> cts_in` is the user's bwd rule on flat values."""
  name, fwd_name = _fun_name(cv.fun), _fun_name(cv.fwd)
  static_args = [static[i] for i in sorted(static)]

  def flat_fwd(primals, nonzeros):
    primals = _as_arrays(primals, in_avals)
    if cv.symbolic_zeros:
      # NB: one CustomVJPPrimal per user-level leaf: a typed key array is wrapped whole
      uleaves, utree = tree_util.tree_flatten(_unflatten(in_tree, list(primals)))
      py_args = merge(tree_util.tree_unflatten(
          utree, [CustomVJPPrimal(p, nz) for p, nz in zip(uleaves, nonzeros)]))
    else:
      py_args = merge(_unflatten(in_tree, list(primals)))
    pair = cv.fwd(*py_args)
    if not isinstance(pair, (list, tuple)) or len(pair) != 2:
      raise TypeError(
          f"Custom VJP fwd rule {fwd_name} for function {name} must produce a pair (list or "
          f"tuple of length two) where the first element represents the primal output "
          f"(equal to those of the custom_vjp-decorated function {name}) and the second "
          f"element represents residuals (i.e. values stored from the forward pass for use "
          f"on the backward pass), but instead of a pair the fwd rule {fwd_name} produced "
          f"{pair}.")
    p_out, res = pair
    p_leaves, p_tree = _flatten(p_out)
    p_avals = [core.get_aval(p) for p in p_leaves]
    if out_tree is not None:
      _check_primal_out(f"Custom VJP fwd rule {fwd_name} for function {name}", "custom_vjp",
                        name, " and the second element represents residuals", p_tree,
                        p_avals, out_tree, out_avals)
    flat_fwd.out_tree[:] = [p_tree]
    res_leaves, res_tree = _flatten(res)
    for path, leaf in tree_util.tree_flatten_with_path(res)[0]:
      if not core.valid_array_type(leaf):
        raise TypeError(f"Custom VJP fwd rule {fwd_name} for function {name} returned a "
                        f"residual of type {type(leaf).__name__} at residuals"
                        f"{tree_util.keystr(path)}; residuals must be arrays (pytrees of "
                        f"arrays). Pass non-array data through nondiff_argnums.")

    def flat_bwd(res_leaves_, cts):
      return _call_bwd(cv, static_args, res_tree, res_leaves_, p_tree, cts, in_tree,
                       in_avals, name)
    flat_bwd.__name__ = _fun_name(cv.bwd)
    return list(p_leaves), list(res_leaves), flat_bwd

  flat_fwd.__name__ = fwd_name
  flat_fwd.bwd_name = _fun_name(cv.bwd)   # printed beside fwd, as JAX prints `bwd=`
  flat_fwd.out_tree = [out_tree]
  return flat_fwd


def _call_bwd(cv: custom_vjp, static_args, res_tree, res_leaves, out_tree, cts, in_tree,
              in_avals, name) -> list[Any]:
  """Runs the user's bwd rule; returns one cotangent (ad.Zero for none) per flat input."""
  if cv.symbolic_zeros:
    cts = [SymbolicZero(c.aval) if type(c) is ad.Zero else c for c in cts]
  else:
    cts = [ad.instantiate_zeros(c) for c in cts]
  # A weakly typed host scalar (grad's seed under a transformation) reaches the user's rule
  # as a concrete weak Array (JAX's rule sees a constant: it stages as a literal).
  if any(type(c) is core.WeakScalarValue for c in cts):
    weak = [type(c) is core.WeakScalarValue for c in cts]
    with core.set_current_trace(core.eval_trace):
      cts = [elementwise.convert_element_type(c.value, c.dtype, weak_type=True)
             if w else c for c, w in zip(cts, weak)]
    cts = [pe.literal_array(c) if w else c for c, w in zip(cts, weak)]
  py_res = _unflatten(res_tree, res_leaves)
  py_cts = _unflatten_tangents(out_tree, cts)
  cts_in = cv.bwd(*static_args, py_res, py_cts)
  n_dyn = in_tree.num_children
  if isinstance(cts_in, list) and len(cts_in) == n_dyn:
    cts_in = tuple(cts_in)
  bad_structure = TypeError(
      f"Custom VJP bwd rule must produce an output with the same container (pytree) "
      f"structure as the args tuple of the primal function, and in particular must produce "
      f"a tuple of length equal to the number of arguments to the primal function, but got "
      f"bwd output structure {treedef_str(_flatten(cts_in)[1])} for primal input "
      f"structure {treedef_str(in_tree)}.")
  if not isinstance(cts_in, tuple) or len(cts_in) != n_dyn:
    raise bad_structure
  # As JAX's: the rule's output may be a tree prefix of the primal inputs: a None (no
  # cotangent) or a leaf stands for the whole subtree of inputs under it (flax.nnx's
  # custom_vjp returns a State of plain arrays for inputs wrapped in Param nodes).
  flat: list[Any] = []

  def append(ct, sub):
    flat.extend([ct] * len(optree.tree_leaves(sub, namespace=_NS)))

  dummy = _unflatten(in_tree, [object()] * in_tree.num_leaves)
  try:
    optree.tree_map(append, cts_in, dummy, namespace=_NS,
                    is_leaf=lambda x: x is None or type(x) is SymbolicZero)
  except ValueError:
    raise bad_structure from None
  paths = [tree_util.keystr(p) for p, _ in tree_util.tree_flatten_with_path(
      _unflatten(in_tree, [0] * in_tree.num_leaves))[0]]
  out = []
  for path, aval, ct in zip(paths, in_avals, flat):
    want = ad.tangent_aval(aval)
    if ct is None or want.dtype == dtypes.float0:
      out.append(ad.Zero(want))
      continue
    if type(ct) is SymbolicZero:
      if ct.aval.shape != want.shape or ct.aval.dtype != want.dtype:
        raise ValueError(f"Custom VJP bwd rule produced a SymbolicZero with a shape/dtype "
                         f"that does not match the corresponding input tangent shape/dtype: "
                         f"at output{path} the SymbolicZero had shape/dtype "
                         f"{ct.aval.str_short(False)} while the corresponding input had "
                         f"shape/dtype {aval.str_short(False)}. Consider just returning a None "
                         f"here instead of a SymbolicZero object.")
      out.append(ad.Zero(want))
      continue
    got = core.get_aval(ct)
    # NB: as JAX's (its "temporary dtype exception"), a cotangent of the input's shape and of
    # another dtype passes for an inexact input (it is passed on as it is: bf16 inputs whose
    # rule returns f32).
    if (got.shape != want.shape or got.dtype != want.dtype and not (
        dtypes.issubdtype(want.dtype, np.inexact) or dtypes.issubdtype(got.dtype,
                                                                      dtypes.extended))
        ) and not config.disable_bwd_checks:   # jax_disable_bwd_checks: passed on as JAX's
      raise ValueError(f"Custom VJP bwd rule must produce an output with the same type as "
                       f"the args tuple of the primal function, but at output{path} the bwd "
                       f"rule produced an output of type {got.str_short(False)} corresponding to "
                       f"an input of type {aval.str_short(False)}.")
    out.append(ct)
  return out


custom_vjp_call_p = core.Primitive("custom_vjp_call")
custom_vjp_call_p.multiple_results = True


def _custom_vjp_jvp(fwd, args, ts, out_avals_of):
  """Runs the flat fwd rule on the primals `args` and returns `(primal_outs, tangents)`, the
  tangents being `custom_lin` outputs (linear in the nonzero tangents `ts`; its transpose
  runs the bwd rule). `out_avals_of(primal_outs)` gives the primal output avals."""
  nonzeros = [type(t) is not ad.Zero for t in ts]
  p_out, res, bwd = fwd(list(args), nonzeros)
  out_t_avals = [ad.tangent_aval(a) for a in out_avals_of(p_out)]
  lin_outs = [a.dtype != dtypes.float0 for a in out_t_avals]

  def lin_bwd(res_, cts_):
    # The bwd rule sees one cotangent per primal output; integer outputs get float0 zeros.
    it = iter(cts_)
    return bwd(res_, [next(it) if l else ad.Zero(a) for a, l in zip(out_t_avals, lin_outs)])
  lin_bwd.__name__ = bwd.__name__

  t_lin = custom_lin_p.bind(
      *res, *[t for t in ts if type(t) is not ad.Zero], num_res=len(res), bwd=lin_bwd,
      nonzeros=tuple(nonzeros), out_avals=tuple(a for a, l in zip(out_t_avals, lin_outs) if l))
  it = iter(t_lin)
  return p_out, [next(it) if l else ad.Zero(a) for a, l in zip(out_t_avals, lin_outs)]


def _custom_vjp_call_jvp(primals, tangents, *, call_jaxpr, fwd_jaxpr_thunk, num_consts, bwd,
                         out_trees, symbolic_zeros):
  fwd = fwd_jaxpr_thunk
  if any(type(t) is not ad.Zero for t in tangents[:num_consts]):
    raise _closed_over_error("custom_vjp")
  return _custom_vjp_jvp(fwd, primals[num_consts:], tangents[num_consts:],
                         lambda _: call_jaxpr.out_avals)


def _custom_vjp_call_batch(axis_data, args, dims, *, call_jaxpr, fwd_jaxpr_thunk, num_consts,
                           bwd, out_trees, symbolic_zeros):
  fwd, user_bwd = fwd_jaxpr_thunk, bwd
  n_out = len(call_jaxpr.out_avals)
  if all(d is None for d in dims):
    return custom_vjp_call_p.bind(*args, call_jaxpr=call_jaxpr, fwd_jaxpr_thunk=fwd,
                                  num_consts=num_consts, bwd=bwd, out_trees=out_trees,
                                  symbolic_zeros=symbolic_zeros), [None] * n_out
  args, dims = _front(args, dims)
  b_closed, b_consts, _ = batching.batch_jaxpr(call_jaxpr, axis_data, dims, [0] * n_out)
  arg_dims = dims[num_consts:]
  size = axis_data.size
  tag = batching.rule_tag()   # the rules may close over this vmap's tracers

  def batched_fwd(primals, nonzeros):
    store: dict = {}

    def f(*xs):
      p_out, res, bwd = fwd(list(xs), nonzeros)
      store["bwd"], store["n_res"] = bwd, len(res)
      return [*p_out, *res]

    outs, odims = batching.batch_flat(f, list(primals), arg_dims, axis_data, tag)
    p_out = [batching.matchaxis(o, d, 0, size) for o, d in zip(outs[:n_out], odims[:n_out])]
    res, res_dims = outs[n_out:], odims[n_out:]
    bwd = store["bwd"]

    def batched_bwd(res_vals, cts):
      ct_nz = [type(c) is not ad.Zero for c in cts]

      def g(*xs):
        r, it = xs[:len(res_vals)], iter(xs[len(res_vals):])
        cs = [next(it) if z else ad.Zero(c.aval.update(shape=c.aval.shape[1:]))
              for z, c in zip(ct_nz, cts)]
        return [ad.instantiate_zeros(c) for c in bwd(list(r), cs)]

      vals = [*res_vals, *[c for c, z in zip(cts, ct_nz) if z]]
      vdims = [*res_dims, *[0 for z in ct_nz if z]]
      outs, odims = batching.batch_flat(g, vals, vdims, axis_data, tag)
      result = []
      for o, d, ad_ in zip(outs, odims, arg_dims):
        if core.get_aval(o).dtype == dtypes.float0:   # an integer input's: no values
          shape = core.get_aval(o).shape
          if d is not None:   # no batch axis for an unbatched input, else in front
            rest = shape[:d] + shape[d + 1:]
            shape = rest if ad_ is None else (size, *rest)
          elif ad_ is not None:
            shape = (size, *shape)
          result.append(ad.instantiate_zeros(ad.Zero(ShapedArray(shape, dtypes.float0))))
        elif ad_ is None:      # an unbatched input: its cotangent sums over the batch
          result.append(reduction.reduce_sum(o, (d,)) if d is not None else
                        elementwise.mul(o, lax_shape.full_like(o, size)))
        else:
          result.append(batching.matchaxis(o, d, 0, size))
      return result
    batched_bwd.__name__ = getattr(bwd, "__name__", "bwd")
    return p_out, list(res), batched_bwd
  batched_fwd.__name__ = getattr(fwd, "__name__", "fwd")
  batched_fwd.bwd_name = getattr(fwd, "bwd_name", "bwd")
  _named(batched_fwd, call_name(fwd))

  outs = custom_vjp_call_p.bind(*b_consts, *args, call_jaxpr=b_closed,
                                fwd_jaxpr_thunk=batched_fwd,
                                num_consts=len(b_consts) + num_consts, bwd=user_bwd,
                                out_trees=_out_trees(batched_fwd),
                                symbolic_zeros=symbolic_zeros)
  return outs, [0] * n_out


core.def_closed_call(custom_vjp_call_p, "call_jaxpr")
lowering.register_lowering(custom_vjp_call_p, _custom_call_lowering)
ad.primitive_jvps[custom_vjp_call_p] = _custom_vjp_call_jvp
batching.fancy_primitive_batchers[custom_vjp_call_p] = _custom_vjp_call_batch


def _custom_vjp_call_pp_rule(eqn, context):
  # As JAX: `name=` (the function's) first, then the others sorted: the fwd rule as `fwd=`
  # and the bwd rule as `bwd=` by their names, `num_consts` only when nonzero, no
  # `out_trees`.
  fwd = eqn.params["fwd_jaxpr_thunk"]
  params = {("fwd" if k == "fwd_jaxpr_thunk" else k): v for k, v in eqn.params.items()
            if k != "out_trees" and not (k == "num_consts" and not v)}
  params["bwd"] = getattr(fwd, "bwd_name", "bwd")
  return [("name", call_name(fwd)), *sorted(params.items())]


core.pp_eqn_rules[custom_vjp_call_p] = _custom_vjp_call_pp_rule


# custom_lin(*residuals, *nonzero tangents): the tangent outputs of a custom_vjp function,
# linear in the tangents; only its transpose (the user's bwd) is ever run.
custom_lin_p = core.Primitive("custom_lin")
custom_lin_p.multiple_results = True


def _custom_lin_abstract_eval(*avals, out_avals, **_):
  return list(out_avals)


def _custom_lin_impl(*args, **params):
  raise TypeError("can't apply forward-mode autodiff (jvp) to a custom_vjp function.")


def _custom_lin_lowering(ctx, *args, **params):
  raise TypeError("can't apply forward-mode autodiff (jvp) to a custom_vjp function.")


def _custom_lin_transpose(cts, *args, num_res, bwd, nonzeros, out_avals):
  cts_in = bwd(list(args[:num_res]), list(cts))
  return [None] * num_res + [c for c, nz in zip(cts_in, nonzeros) if nz]


def _custom_lin_batch(args, dims, **params):
  # NB: batching custom_lin means evaluating it forward (forward-mode jvp of a custom_vjp
  # function under vmap): JAX's error, not a missing rule.
  raise TypeError("can't apply forward-mode autodiff (jvp) to a custom_vjp function.")


custom_lin_p.def_abstract_eval(_custom_lin_abstract_eval)
custom_lin_p.def_impl(_custom_lin_impl)
batching.primitive_batchers[custom_lin_p] = _custom_lin_batch
lowering.register_lowering(custom_lin_p, _custom_lin_lowering)
ad.primitive_transposes[custom_lin_p] = _custom_lin_transpose
core.pp_param_order[custom_lin_p] = ("num_res", "bwd")


# ---------------------------------------------------------------------------
# closure_convert, custom_gradient


def closure_convert(fun: Callable, *example_args) -> tuple[Callable, list[Any]]:
  """Hoists the traced values `fun` closes over into explicit arguments, as JAX's
  `closure_convert`: custom_vjp / custom_jvp rules may not close over values being
  differentiated, but may take them as arguments.

  Args:
    fun: a function of arrays (pytrees); traced once on the shapes and dtypes of
      `example_args` (arrays or ShapeDtypeStructs).

  Returns:
    `(converted, hoisted)`: `converted(*args, *hoisted)` computes `fun(*args)`; `hoisted`
    lists the closed-over tracers of floating or complex dtype (empty when `fun` closes over
    none, e.g. outside every transformation). Other constants stay closed over.
  """
  leaves, in_tree = _flatten(tuple(example_args))
  store: dict = {}

  def flat(*xs):
    out = fun(*_unflatten(in_tree, xs))
    out_leaves, store["tree"] = _flatten(out)
    return out_leaves

  jaxpr, consts = pe.trace_to_jaxpr(flat, [core.get_aval(x) for x in leaves])
  out_tree = store["tree"]
  hoist = [isinstance(c, core.Tracer) and dtypes.is_inexact(core.get_aval(c).dtype)
           for c in consts]
  hoisted = [c for c, h in zip(consts, hoist) if h]

  def converted(*args):
    num_args = len(args) - len(hoisted)   # the trailing ones are the hoisted values
    xs, tree = _flatten(tuple(args[:max(num_args, 0)]))
    if tree != in_tree or num_args < 0:
      raise TypeError(f"The inputs to the closure produced by closure_convert must have the "
                      f"same Pytree structure as the example arguments passed when "
                      f"closure_convert was called. Expected {tree_util.PyTreeDef(in_tree)}, "
                      f"but got {tree_util.PyTreeDef(tree)}")
    it = iter(args[num_args:])
    vals = [next(it) if h else c for c, h in zip(consts, hoist)]
    return _unflatten(out_tree, core.eval_jaxpr(jaxpr, vals, *xs))

  fun_name = _fun_name(fun)
  converted.__name__ = f"closure_converted_{fun_name}"
  return converted, hoisted


class _StagedRule:
  """A pytree holding a traced backward function (`custom_gradient`'s rule): the jaxpr and
  trees are static, the constants it read are the leaves (the residuals)."""
  __slots__ = ("jaxpr", "in_tree", "consts")

  def __init__(self, jaxpr, in_tree, consts):
    self.jaxpr, self.in_tree, self.consts = jaxpr, in_tree, consts


optree.register_pytree_node(_StagedRule, lambda r: (r.consts, (r.jaxpr, r.in_tree)),
                            lambda aux, consts: _StagedRule(aux[0], aux[1], list(consts)),
                            namespace=_NS)


def custom_gradient(fun: Callable) -> custom_vjp:
  """Defines a function together with its VJP, as JAX's `custom_gradient`: `fun(*args)`
  returns `(output, vjp)` where `vjp(output_cotangent)` returns a tuple with one cotangent
  per argument. The result is a custom_vjp function returning only `output`; the `vjp`
  closure is traced in the forward pass (the values it reads become residuals), so it may
  close over intermediate values.

  Raises:
    TypeError: (when differentiated) if `vjp` returns a structure other than one cotangent
      per argument, as custom_vjp's bwd checks.
  """
  def primal(*args):
    return fun(*args)[0]
  functools.update_wrapper(primal, fun)
  wrapped = custom_vjp(primal)

  def fwd(*args):
    ans, rule = fun(*args)
    ans_leaves, ans_tree = _flatten(ans)
    store: dict = {}

    def flat_rule(*cts):
      out = rule(_unflatten(ans_tree, cts))
      leaves, store["tree"] = optree.tree_flatten(out, none_is_leaf=True, namespace=_NS)
      return leaves

    jaxpr, consts = pe.trace_to_jaxpr(
        flat_rule, [ad.tangent_aval(core.get_aval(x)) for x in ans_leaves])
    return ans, _StagedRule(jaxpr, store["tree"], list(consts))

  def bwd(res, ct):
    ct_leaves, _ = _flatten(ct)
    outs = core.eval_jaxpr(res.jaxpr, res.consts, *ct_leaves)
    cts = _unflatten(res.in_tree, outs)
    return cts if isinstance(cts, tuple) else (cts,)

  wrapped.defvjp(fwd, bwd)
  return wrapped


# ---------------------------------------------------------------------------
# linear_call: a linear function with a user-given transpose


def linear_call(fun: Callable, fun_transpose: Callable, residual_args: Any,
                linear_args: Any) -> Any:
  """Calls `fun(residual_args, linear_args)`, a function linear in `linear_args`, whose
  transpose is `fun_transpose` (JAX's `jax.custom_derivatives.linear_call`).

  `fun :: r -> a -o b` and `fun_transpose :: r -> b -o a`: transposing the call (in `grad`,
  `vjp`, `linear_transpose`) runs `fun_transpose(residual_args, cotangents)`, itself as a
  `linear_call` whose transpose is `fun`, so transposing twice gives `fun` back.

  Args:
    fun: `fun(residual_args, linear_args)` -> a pytree of arrays, linear in `linear_args`.
    fun_transpose: `fun_transpose(residual_args, cts)` with `cts` shaped as `fun`'s output
      -> a pytree of the structure, shapes and dtypes of `linear_args`.
    residual_args: a pytree of arrays in which `fun` need not be linear.
    linear_args: a pytree of arrays in which `fun` is linear.

  Returns:
    `fun(residual_args, linear_args)`.

  Raises:
    TypeError: leaves that are not arrays; `fun_transpose` returning another tree structure
      than `linear_args` (JAX's message) or other shapes/dtypes (when transposed).

  The primitive `linear_call` holds `fun`'s closed jaxpr (`callee`, its constants as
  leading operands) and a thunk tracing `fun_transpose` once, on first transposition. Its
  JVP is itself on the linear tangents, plus the ordinary JVP of `callee` for tangents of
  the residuals (JAX asserts those are zero); batching batches `callee` and the transpose;
  lowering calls `callee`; evaluation runs it.
  """
  res_leaves, res_tree = _flatten(residual_args)
  lin_leaves, lin_tree = _flatten(linear_args)
  res_avals = [core.get_aval(x) for x in res_leaves]
  lin_avals = [core.get_aval(x) for x in lin_leaves]
  n_res = len(res_leaves)
  store: dict = {}

  def flat_fun(*leaves):
    out = fun(_unflatten(res_tree, leaves[:n_res]), _unflatten(lin_tree, leaves[n_res:]))
    out_leaves, store["out_tree"] = _flatten(out)
    return out_leaves

  callee, consts = _trace_primal(flat_fun, [*res_avals, *lin_avals], _fun_name(fun))
  out_tree = store["out_tree"]
  out_avals = callee.out_avals
  cache: list = []

  def transpose_thunk():
    if not cache:
      t_store: dict = {}

      def flat_transpose(*leaves):
        out = fun_transpose(_unflatten(res_tree, leaves[:n_res]),
                            _unflatten(out_tree, leaves[n_res:]))
        t_leaves, t_store["tree"] = _flatten(out)
        return t_leaves

      closed, t_consts = _trace_primal(flat_transpose, [*res_avals, *out_avals],
                                       _fun_name(fun_transpose))
      if t_store["tree"] != lin_tree:
        raise TypeError(f"transpose output pytree structure must match that of linear inputs, "
                        f"got output structure {treedef_str(t_store['tree'])} and input "
                        f"structure {treedef_str(lin_tree)}.")
      bad = [(a, b) for a, b in zip(closed.out_avals, lin_avals)
             if (a.shape, a.dtype) != (b.shape, b.dtype)]
      if bad:
        raise TypeError(f"linear_call: fun_transpose {_fun_name(fun_transpose)} must return "
                        f"cotangents with the shapes and dtypes of the linear inputs "
                        f"{_tree_str(lin_tree, lin_avals)}, got "
                        f"{_tree_str(lin_tree, closed.out_avals)}.")
      cache.append((closed, t_consts))
    return cache[0]

  outs = linear_call_p.bind(*consts, *res_leaves, *lin_leaves, callee=callee,
                            transpose_thunk=transpose_thunk, num_callee_consts=len(consts),
                            num_res=n_res)
  return _unflatten(out_tree, outs)


linear_call_p = core.Primitive("linear_call")
linear_call_p.multiple_results = True


def _linear_call_jvp(primals, tangents, *, callee, transpose_thunk, num_callee_consts,
                     num_res):
  n_known = num_callee_consts + num_res
  params = dict(callee=callee, transpose_thunk=transpose_thunk,
                num_callee_consts=num_callee_consts, num_res=num_res)
  out = linear_call_p.bind(*primals, **params)
  lin_t = tangents[n_known:]
  t_out: list = [ad.Zero(ad.tangent_aval(a)) for a in callee.out_avals]
  if any(type(t) is not ad.Zero for t in lin_t):
    lin_t = [ad.instantiate_zeros(t) for t in lin_t]
    t_out = linear_call_p.bind(*primals[:n_known], *lin_t, **params)
  if any(type(t) is not ad.Zero for t in tangents[:n_known]):
    # NB: the callee is not linear in its constants and residuals: their tangents go
    # through its ordinary JVP (the linear inputs held at their primal values).
    zeros = [ad.Zero(ad.tangent_aval(core.get_aval(p))) for p in primals[n_known:]]
    _, t_res = ad.jvp_flat(core.jaxpr_as_fun(callee), primals,
                           [*tangents[:n_known], *zeros])
    t_out = [ad.add_tangents(a, b) for a, b in zip(t_out, t_res)]
  return out, t_out


def _linear_call_transpose(cts, *args, callee, transpose_thunk, num_callee_consts, num_res):
  transpose, t_consts = transpose_thunk()
  n_known = num_callee_consts + num_res
  f_consts, res, lin = args[:num_callee_consts], args[num_callee_consts:n_known], args[n_known:]
  if any(ad.is_undefined_primal(x) for x in (*f_consts, *res)):
    raise TypeError("linear_call: transposing with respect to residual_args (or values its "
                    "function closes over) is not possible: the function is linear only in "
                    "linear_args.")
  cts = [ad.zeros_like_aval(a) if type(ct) is ad.Zero else ct
         for ct, a in zip(cts, callee.out_avals)]

  def transpose_of_transpose():
    return callee, list(f_consts)

  cts_lin = linear_call_p.bind(*t_consts, *res, *cts, callee=transpose,
                               transpose_thunk=transpose_of_transpose,
                               num_callee_consts=len(t_consts), num_res=num_res)
  return [None] * n_known + [ct if ad.is_undefined_primal(x) else None
                             for ct, x in zip(cts_lin, lin)]


def _linear_call_batch(axis_data, args, dims, *, callee, transpose_thunk, num_callee_consts,
                       num_res):
  n_out = len(callee.out_avals)
  params = dict(callee=callee, transpose_thunk=transpose_thunk,
                num_callee_consts=num_callee_consts, num_res=num_res)
  if all(d is None for d in dims):
    return linear_call_p.bind(*args, **params), [None] * n_out
  n_known = num_callee_consts + num_res
  args, dims = _front(args, dims)
  # NB: the linear inputs are all batched (unbatched ones broadcast), so that the batched
  # transpose's outputs, batched at 0, have their shapes.
  args = [*args[:n_known], *[batching.bdim_at_front(x, d, axis_data.size)
                             for x, d in zip(args[n_known:], dims[n_known:])]]
  dims = [*dims[:n_known], *[0] * (len(args) - n_known)]
  b_callee, b_consts, _ = batching.batch_jaxpr(callee, axis_data, dims, [0] * n_out)
  res_dims = dims[num_callee_consts:n_known]
  n_lin = len(args) - n_known
  cache: list = []

  def batched_transpose_thunk():
    if not cache:
      transpose, t_consts = transpose_thunk()
      t_dims = [None] * len(t_consts) + list(res_dims) + [0] * n_out
      b_t, b_t_consts, _ = batching.batch_jaxpr(transpose, axis_data, t_dims, [0] * n_lin)
      cache.append((b_t, [*b_t_consts, *t_consts]))
    return cache[0]

  outs = linear_call_p.bind(*b_consts, *args, callee=b_callee,
                            transpose_thunk=batched_transpose_thunk,
                            num_callee_consts=len(b_consts) + num_callee_consts,
                            num_res=num_res)
  return outs, [0] * n_out


def _linear_call_lowering(ctx, *args, callee: ClosedJaxpr, **_):
  return lowering.lower_call(ctx, "linear_call", callee, args)


core.def_closed_call(linear_call_p, "callee")
lowering.register_lowering(linear_call_p, _linear_call_lowering)
ad.primitive_jvps[linear_call_p] = _linear_call_jvp
ad.primitive_transposes[linear_call_p] = _linear_call_transpose
batching.fancy_primitive_batchers[linear_call_p] = _linear_call_batch
core.pp_param_order[linear_call_p] = ("num_callee_consts", "num_res", "callee")


# NB: `lax.custom_root` is a custom_jvp function, and lax (a lower layer) may not import this
# module: the class is handed down when this module is imported (always, with stagecraft).
_solves.install_custom_jvp(custom_jvp)
