"""User-defined batching rules: `custom_vmap` and `sequential_vmap` (JAX's
`jax.custom_batching`).

A `custom_vmap` function traces its Python function to a closed jaxpr and binds one
`custom_vmap_call` equation (a call primitive: its constants are leading operands, as for
`jit`) whose params also carry the user's rule. Its rule in each interpreter:

- evaluation and `jit`: the equation runs (impl) or is lowered (inlined) as the traced
  function; the rule is never called outside `vmap`.
- batching: the user's rule runs as `rule(axis_size, in_batched, *args) -> (out,
  out_batched)`, every batched argument with its batch axis in front; `in_batched` is the
  arguments' tuple as a list of pytrees of bools, `out_batched` must have exactly the
  structure of `out`. An equation none of whose operands is batched is not given to the rule
  (it stays a `custom_vmap_call` in the enclosing trace): under nested `vmap` the rule is
  called by the innermost level that batches an argument, and its own operations are batched
  by the outer levels as usual.
- JVP: the equation becomes a `custom_vmap_call` of the JVP of the function, whose rule is the
  JVP of the user's rule (it runs the rule on the arguments batched in both primal and
  tangent, and `vmap`s over the axes that only one of the two has), as in JAX.
- partial evaluation (linearize, `grad`, `vjp`): not supported, as in JAX: linearizing a
  `custom_vmap` function with a nonzero tangent raises JAX's ValueError. To differentiate in
  reverse mode, wrap the `custom_vmap` function in a `custom_vjp`.

Semantics and messages follow JAX 0.10.2's `jax/_src/custom_batching.py` and the docstrings
of `jax.custom_batching.custom_vmap` / `sequential_vmap`.
"""
from __future__ import annotations

import functools
import inspect
import re
import types
from typing import Any, Callable, Sequence

import optree

from stagecraft import core, dtypes, tree_util
from stagecraft.source_info_util import fun_name
from stagecraft.tree_util import treedef_str
from stagecraft.core import ClosedJaxpr
from stagecraft.interpreters import ad, batching, lowering, partial_eval as pe
from stagecraft.lax.control_flow import loops

__all__ = ["custom_vmap", "sequential_vmap"]

_NS = tree_util.NAMESPACE


def _flatten(tree):
  return optree.tree_flatten(tree, none_is_leaf=False, namespace=_NS)


def _unflatten(treedef, leaves):
  return tree_util.tree_unflatten(treedef, leaves)


def _rule_name(rule: Callable) -> str:
  return getattr(rule, "__name__", "<unnamed rule>")


def _masked_repr(obj: Any) -> str:
  """`repr(obj)` with its address masked, as JAX prints callables in jaxpr params."""
  return re.sub(r" at 0x([0-9a-fA-F]+)", lambda m: " at 0x" + "X" * len(m.group(1)),
                repr(obj))


def _resolve_kwargs(fun: Callable, args: tuple, kwargs: dict) -> tuple:
  """Binds `args`/`kwargs` to `fun`'s positional parameters, defaults applied.

  Raises:
    TypeError: the binding failed, or a keyword-only parameter was passed.
  """
  if isinstance(fun, functools.partial):   # a partial's signature is treated as opaque
    fun = lambda *args, **kwargs: None     # noqa: E731
  bound = inspect.signature(fun).bind(*args, **kwargs)
  bound.apply_defaults()
  passed = [k for k in bound.kwargs if k in kwargs]
  if passed:
    raise TypeError("The following keyword arguments could not be resolved to positions: "
                    f"{', '.join(passed)}")
  return bound.args


def _check_rule_trees(name: str, original_out_tree, out_tree, out_batched_tree) -> None:
  if out_tree != out_batched_tree:
    raise ValueError(
        f"structure of output value and output batching specification returned by custom "
        f"vmap rule ({name}) do not match.\nOutput values: {treedef_str(out_tree)}\n"
        f"Batching spec: {treedef_str(out_batched_tree)}")
  if out_tree != original_out_tree:
    raise ValueError(
        f"structure of output returned by custom vmap rule ({name}) does not match that of "
        f"original custom-vmapped function.\nOriginal output: "
        f"{treedef_str(original_out_tree)}\nRule output: {treedef_str(out_tree)}")


# ---------------------------------------------------------------------------
# Rules as the primitive holds them. Both take and return flat values:
#   rule(axis_size, in_batched: list[bool], args: list) -> (outs: list, out_batched: list)
# with the batch axis of every batched argument (and output) in front.


class _UserRule:
  """The user's rule on the flat operands `(*consts, *arg_leaves)` of a `custom_vmap_call`:
  unflattens them to the function's arguments, calls the rule and checks its output's
  structure (ValueError as JAX's). Closed-over values must not be batched (ValueError)."""
  __slots__ = ("rule", "fun_name", "num_consts", "args_tree", "out_tree", "__weakref__")

  def __init__(self, rule: Callable, fun_name: str, num_consts: int, args_tree, out_tree):
    self.rule = rule
    self.fun_name = fun_name
    self.num_consts = num_consts
    self.args_tree = args_tree
    self.out_tree = out_tree

  @property
  def name(self) -> str:
    return _rule_name(self.rule)

  def __call__(self, axis_size: int, in_batched: Sequence[bool], args: Sequence[Any]):
    nc = self.num_consts
    if any(in_batched[:nc]):
      # JAX stops here with a bare AssertionError; say what happened and how to fix it.
      raise ValueError(
          f"custom_vmap function {self.fun_name} closes over a value that is batched by this "
          f"vmap. The rule ({self.name}) only sees the function's explicit arguments, so "
          f"batched values must be passed to {self.fun_name} as arguments rather than "
          f"closed over.")
    py_args = _unflatten(self.args_tree, list(args[nc:]))
    py_batched = _unflatten(self.args_tree, [bool(b) for b in in_batched[nc:]])
    out, out_batched = self.rule(axis_size, list(py_batched), *py_args)
    flat_out, tree = _flatten(out)
    flat_batched, batched_tree = _flatten(out_batched)
    _check_rule_trees(self.name, self.out_tree, tree, batched_tree)
    return flat_out, [bool(b) for b in flat_batched]

  def __str__(self):
    return _masked_repr(self.rule)

  __repr__ = __str__


class _JvpRule:
  """The JVP of a rule, for the `custom_vmap_call` of a JVP (operands `(*jvp_consts,
  *primals, *nonzero tangents)`, outputs `(*primal outs, *nonzero tangent outs)`).

  As JAX's: the wrapped rule runs under `jvp` with `in_batched` true for the arguments batched
  in both primal and tangent; the arguments batched in only one of the two are `vmap`ped over
  around it. An output is batched where the rule says so or where that outer `vmap` batched
  it. Integer arguments have no tangent operand (their tangents are symbolic zeros).
  """
  __slots__ = ("rule", "num_consts", "in_nz", "out_nz", "__weakref__")

  def __init__(self, rule: Callable, num_consts: int, in_nz: Sequence[bool],
               out_nz: Sequence[bool]):
    self.rule = rule
    self.num_consts = num_consts
    self.in_nz = list(in_nz)
    self.out_nz = list(out_nz)

  @property
  def name(self) -> str:
    return self.rule.name

  def __call__(self, axis_size: int, in_batched: Sequence[bool], args: Sequence[Any]):
    nc, n, in_nz, out_nz = self.num_consts, len(self.in_nz), self.in_nz, self.out_nz
    args, in_batched = list(args[nc:]), list(in_batched[nc:])   # jvp consts: concrete
    primals, tangents = args[:n], args[n:]
    ps_b = in_batched[:n]
    it = iter(in_batched[n:])
    ts_b = [next(it) if nz else False for nz in in_nz]
    mutually = [p and t for p, t in zip(ps_b, ts_b)]
    extra_ps = [0 if p and not t else None for p, t in zip(ps_b, ts_b)]
    extra_ts = [0 if t and not p else None for p, t, nz in zip(ps_b, ts_b, in_nz) if nz]
    store: dict = {}
    rule = self.rule

    def to_jvp(*ps):
      outs, out_batched = rule(axis_size, mutually, list(ps))
      store["out_batched"] = out_batched
      return outs

    def jvp_of_rule(*xs):
      ps, it_t = list(xs[:n]), iter(xs[n:])
      ts = [next(it_t) if nz else ad.Zero(ad.tangent_aval(core.get_aval(p)))
            for p, nz in zip(ps, in_nz)]
      p_out, t_out = ad.jvp_flat(to_jvp, ps, ts)
      t_out = [ad.zeros_like_aval(ad.tangent_aval(core.get_aval(p))) if type(t) is ad.Zero
               else t for p, t, nz in zip(p_out, t_out, out_nz) if nz]
      return [*p_out, *t_out]

    outs, dims = batching.batch_flat(jvp_of_rule, [*primals, *tangents],
                                     [*extra_ps, *extra_ts], batching.AxisData(None, axis_size))
    outs = [x if d is None else batching.moveaxis(x, d, 0) for x, d in zip(outs, dims)]
    rule_batched = store["out_batched"]
    n_out = len(rule_batched)
    p_batched = [bool(b) or d is not None for b, d in zip(rule_batched, dims[:n_out])]
    t_dims = iter(dims[n_out:])
    t_batched = [bool(b) or next(t_dims) is not None
                 for b, nz in zip(rule_batched, out_nz) if nz]
    return outs, [*p_batched, *t_batched]

  def __str__(self):
    return (f"<function custom_vmap_jvp.<locals>.jvp_of_rule_rule at "
            f"0x{'X' * len(format(id(self), 'x'))}>")

  __repr__ = __str__


# ---------------------------------------------------------------------------
# The decorators


class custom_vmap:
  """Customizes the behaviour of a function under `vmap` (JAX's
  `jax.custom_batching.custom_vmap`).

  The decorated function behaves as `fun` everywhere (eagerly, under `jit`, `jvp`) except
  when `vmap` batches one of its arguments: then the rule set by `def_vmap` runs instead, as
  `rule(axis_size, in_batched, *args) -> (out, out_batched)`::

    @custom_vmap
    def f(x, y):
      return x + y

    @f.def_vmap
    def f_vmap_rule(axis_size, in_batched, xs, ys):
      assert all(in_batched)
      return xs * ys, True

    vmap(f)(jnp.arange(3), jnp.arange(1, 4))      # [0, 2, 6] (xs * ys, not xs + ys)

  Args:
    fun: a function of arrays (pytrees of arrays) to arrays (pytrees).

  In the rule, `axis_size` is the size of the batched axis; `in_batched` a list with one
  pytree of bools per argument (the argument's structure) saying which leaves are batched;
  batched leaves `T[axis_size, *s]` have the batch axis in front, the others are unchanged
  (`T[*s]`). The rule returns the output (the structure of `fun`'s) and `out_batched`, a
  pytree of bools of exactly that structure (not a prefix) saying which output leaves carry
  the batch axis in front.

  `custom_vmap` functions support forward-mode differentiation (`jvp`, also under `vmap`,
  where the rule is differentiated) but not reverse mode (`grad`, `vjp`, `linearize` raise
  ValueError, as in JAX); for both, wrap the function in a `custom_vjp` (the `custom_vjp` on
  the outside; `def_vmap` can be called on it).

  Raises (when called):
    AttributeError: no rule was defined with `def_vmap`.
    TypeError: the arguments do not bind to `fun`'s positional parameters (keyword-only
      parameters are not supported).
    ValueError (under vmap): the rule's `out` and `out_batched` structures differ, or `out`'s
      differs from `fun`'s; an output marked batched lacks the leading batch axis; `fun`
      closes over a value batched by the `vmap`.
  """

  def __init__(self, fun: Callable):
    functools.update_wrapper(self, fun)
    self.fun = fun
    self.vmap_rule: Callable | None = None
    # Also an instance attribute: a decorator wrapping this object (`custom_vjp`) copies our
    # __dict__ through functools.update_wrapper, and so forwards `def_vmap` as JAX's does.
    self.def_vmap = types.MethodType(custom_vmap.def_vmap, self)

  def __getattr__(self, name):
    # As JAX's custom decorators: `def*` methods of a wrapped custom function (`defjvp` of a
    # custom_jvp inside) are reachable from the outer one.
    fun = self.__dict__.get("fun")
    if name.startswith("def") and fun is not None:
      return getattr(fun, name)
    raise AttributeError(name)

  def def_vmap(self, vmap_rule: Callable[..., tuple[Any, Any]]) -> Callable[..., tuple[Any, Any]]:
    """Sets the rule `vmap_rule(axis_size, in_batched, *args) -> (out, out_batched)` (see the
    class docstring) and returns it unchanged, so that it can be used as a decorator."""
    self.vmap_rule = vmap_rule
    return vmap_rule

  def __call__(self, *args, **kwargs):
    name = fun_name(self.fun)
    try:
      args = _resolve_kwargs(self.fun, args, kwargs)
    except TypeError as e:
      raise TypeError(f"The input arguments to the custom_vmap-decorated function {name} "
                      f"could not be resolved to positional-only arguments. Binding failed "
                      f"with the error:\n{e}") from e
    if not self.vmap_rule:
      raise AttributeError(f"No batching rule defined for custom_vmap function {name} using "
                           f"def_vmap.")
    leaves, args_tree = _flatten(tuple(args))
    in_avals = [core.get_aval(x) for x in leaves]
    store: dict = {}

    def flat_fun(*xs):
      out = self.fun(*_unflatten(args_tree, list(xs)))
      out_leaves, store["out_tree"] = _flatten(out)
      return out_leaves

    jaxpr, consts = pe.trace_to_jaxpr(flat_fun, in_avals)
    call = ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), [])
    out_tree = store["out_tree"]
    in_tree = _flatten((list(consts), tuple(args)))[1]
    rule = _UserRule(self.vmap_rule, name, len(consts), args_tree, out_tree)
    outs = custom_vmap_p.bind(*consts, *leaves, call=call, rule=rule,
                              in_tree=tree_util.TreeParam(in_tree),
                              out_tree=tree_util.TreeParam(out_tree))
    return _unflatten(out_tree, outs)


def _tree_split(mask, tree):
  lhs = tree_util.tree_map(lambda m, x: x if m else None, mask, tree)
  rhs = tree_util.tree_map(lambda m, x: None if m else x, mask, tree)
  return lhs, rhs


def _tree_merge(mask, lhs, rhs):
  return tree_util.tree_map(lambda m, x, y: x if m else y, mask, lhs, rhs)


def sequential_vmap(f: Callable) -> custom_vmap:
  """A `custom_vmap` of `f` whose rule runs `f` once per batch element, in a loop
  (`lax.map`), for functions that have no batched form (JAX's
  `jax.custom_batching.sequential_vmap`).

  Under `vmap` the batched arguments are mapped over their leading axis and the unbatched
  ones are passed whole to every iteration; every output is batched (`U[axis_size, *u]`)::

    @sequential_vmap
    def f(x):
      return x + 1

    vmap(f)(jnp.arange(3))          # [1, 2, 3], computed by a scan over 3 iterations

  Args:
    f: a function of arrays (pytrees) to arrays (pytrees).

  Returns:
    The `custom_vmap` function.
  """
  f = custom_vmap(f)

  @f.def_vmap
  def rule(axis_size, in_batched, *args):
    del axis_size
    mapped, unmapped = _tree_split(in_batched, list(args))

    def to_map(mapped_args):
      return f(*_tree_merge(in_batched, mapped_args, unmapped))

    out = loops.map(to_map, mapped)
    return out, tree_util.tree_map(lambda _: True, out)

  return f


# ---------------------------------------------------------------------------
# custom_vmap_call(*consts, *args; call, rule, in_tree, out_tree): `call` is the traced
# function (consts as leading arguments); `in_tree`/`out_tree` are the operands' and results'
# structures (`(consts, args)` and the function's output), kept for printing.

custom_vmap_p = core.Primitive("custom_vmap_call")
custom_vmap_p.multiple_results = True


def _custom_vmap_lowering(ctx, *args, call: ClosedJaxpr, **_):
  # Inlined, as JAX lowers it (the rule only matters to vmap).
  return lowering.jaxpr_subcomp(ctx.fb, call.jaxpr, [], list(args))


def _custom_vmap_batching(args, dims, *, call, rule, in_tree, out_tree):
  del call, in_tree
  (axis_size,) = {core.get_aval(x).shape[d] for x, d in zip(args, dims) if d is not None}
  args = [x if d is None else batching.moveaxis(x, d, 0) for x, d in zip(args, dims)]
  outs, out_batched = rule(axis_size, [d is not None for d in dims], args)
  paths = None
  for i, (o, b) in enumerate(zip(outs, out_batched)):
    if not b:
      continue
    shape = core.get_aval(o).shape
    if not shape or shape[0] != axis_size:
      if paths is None:
        paths = [tree_util.keystr(p) for p, _ in tree_util.tree_flatten_with_path(
            _unflatten(out_tree.treedef, [0] * out_tree.treedef.num_leaves))[0]]
      where = f"output{paths[i]}" if paths[i] else "its output"
      raise ValueError(
          f"custom vmap rule ({rule.name}) marked {where} as batched, but its value "
          f"{core.get_aval(o).str_short()} has no leading batch axis of size {axis_size}. A "
          f"batched output carries the batch axis in front; mark unbatched outputs False.")
  return outs, [0 if b else None for b in out_batched]


def custom_vmap_jvp(primals, tangents, *, call: ClosedJaxpr, rule, in_tree, out_tree):
  """JVP of `custom_vmap_call`: a `custom_vmap_call` of the function's JVP whose rule is the
  JVP of `rule` (`_JvpRule`). Float tangents are materialized (zeros included), as in JAX;
  integer arguments and outputs have no tangent operand/result."""
  in_nz = [ad.tangent_aval(a).dtype != dtypes.float0 for a in call.in_avals]
  out_nz = [ad.tangent_aval(a).dtype != dtypes.float0 for a in call.out_avals]
  jvp_call, jvp_consts, out_tnz = ad.jvp_jaxpr(call, in_nz, instantiate=out_nz)
  ts = [ad.instantiate_zeros(t) for t, nz in zip(tangents, in_nz) if nz]
  pair_in = _flatten((_unflatten(in_tree.treedef, [0] * in_tree.treedef.num_leaves),) * 2)[1]
  pair_out = _flatten((_unflatten(out_tree.treedef, [0] * out_tree.treedef.num_leaves),) * 2)[1]
  outs = custom_vmap_p.bind(*jvp_consts, *primals, *ts, call=jvp_call,
                            rule=_JvpRule(rule, len(jvp_consts), in_nz, out_tnz),
                            in_tree=tree_util.TreeParam(pair_in),
                            out_tree=tree_util.TreeParam(pair_out))
  n_out = len(call.out_avals)
  p_out, it = outs[:n_out], iter(outs[n_out:])
  t_out = [next(it) if nz else ad.Zero(ad.tangent_aval(a))
           for a, nz in zip(call.out_avals, out_tnz)]
  return p_out, t_out


_LINEARIZE_ERROR = ("Linearization failed to produce known values for all output primals. "
                    "This is typically caused by attempting to differentiate a function uses "
                    "an operation that does not support reverse-mode autodiff.")


def _custom_vmap_partial_eval(eqn, unknowns):
  # Called only when a tangent flows in: the primal outputs of a custom_vmap_call's JVP are
  # not separable from its tangents (one call computes both), so they would be unknown.
  del eqn, unknowns
  raise ValueError(_LINEARIZE_ERROR)


core.def_closed_call(custom_vmap_p, "call")
lowering.register_lowering(custom_vmap_p, _custom_vmap_lowering)
batching.primitive_batchers[custom_vmap_p] = _custom_vmap_batching
ad.primitive_jvps[custom_vmap_p] = custom_vmap_jvp
ad.partial_eval_rules[custom_vmap_p] = _custom_vmap_partial_eval
