"""`stagecraft.experimental.custom_partitioning`: JAX's `jax.experimental.custom_partitioning`.

A `custom_partitioning` function is staged as one `custom_partitioning` equation (a call
primitive: its `call` param holds the traced body, as JAX's jaxpr shows it) whose params also
carry the user's partitioning callbacks and Shardy sharding rule. JAX hands those callbacks to
XLA's SPMD partitioner; stagecraft does not hook the partitioner with Python callbacks, so

- evaluation: the body runs (eagerly, one primitive at a time, as JAX's impl does);
- `jit`: the body is lowered inline and XLA partitions it like any other code (inside a
  program over a mesh, the sharding rule is first checked against the operands' and results'
  ranks, with JAX's errors). Results equal JAX's whenever the user's `partition` callback
  computes the same function as the body, which is its contract;
- `grad`/`jvp` and `vmap` raise JAX's NotImplementedError, as in JAX (wrap the function in a
  `custom_vjp` to differentiate it).

The sharding-rule language (Shardy's einsum-like notation: `"i j, j k -> i k"`, `...`,
compound factors `(i j)`) is parsed into `SdyShardingRule` with JAX's validation and messages,
so that users' rules are accepted or rejected as JAX does; the rule is not used for
partitioning. Behaviour and messages follow JAX 0.10.2 (observed by running it).
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Sequence

import optree

from stagecraft import core, tree_util
from stagecraft.config import config
from stagecraft.core import ClosedJaxpr
from stagecraft.errors import UnexpectedTracerError
from stagecraft.source_info_util import fun_name
from stagecraft.interpreters import ad, batching, lowering, partial_eval as pe
from stagecraft.traceback_util import api_boundary

__all__ = ["custom_partitioning", "custom_partitioning_p", "BATCHING", "CompoundFactor",
           "ArrayMapping", "SdyShardingRule"]

#: The leading factor of an `ArrayMapping` that stands for any number of batching
#: dimensions (`...` in a rule string; `...0`, `...1` name separate groups, printed `…0`).
BATCHING = "…"

_SPECIAL_FACTORS = ("reduction_factors", "need_replication_factors", "permutation_factors")


class CompoundFactor(tuple):
  """Two or more factors that together make up one dimension (`(i j)` in a rule string):
  the dimension's size is the product of theirs. `CompoundFactor('b', 'c')`.

  Raises:
    ValueError: fewer than two factors; a factor that is not a str; a batching factor.
  """

  def __new__(cls, *factors):
    if len(factors) < 2:
      raise ValueError("A compound factor should contain at least two factors")
    for f in factors:
      if not isinstance(f, str):
        raise ValueError(f"Each element of CompoundFactor must be a str, but got {type(f)}")
      if f[0] == BATCHING:
        raise ValueError("Ellipsis can't be used in a compound factor")
    return super().__new__(cls, factors)


class ArrayMapping(tuple):
  """The factors of one operand or result, one per dimension: a factor name (str) or a
  `CompoundFactor`; the first element may be a batching factor (`BATCHING`, or `…N` for
  group N), which stands for any number of leading dimensions.
  `ArrayMapping(BATCHING, CompoundFactor('b', 'c'), 'd')`.

  Raises:
    ValueError: an element that is neither a str nor a CompoundFactor; a batching factor
      anywhere but first.
  """

  def __new__(cls, *dim_mappings):
    for i, d in enumerate(dim_mappings):
      if not isinstance(d, (str, CompoundFactor)):
        raise ValueError("Each element of ArrayMapping must be a str or CompoundFactor, but "
                         f"got {type(d)}")
      if isinstance(d, str) and d[0] == BATCHING and i != 0:
        raise ValueError("Ellipsis can only be used at the beginning of a dimension")
    return super().__new__(cls, dim_mappings)


def _factors_in_order(mappings) -> list[str]:
  """Every factor of `mappings`, compound factors' included, in order of appearance."""
  return [f for mapping in mappings for d in mapping
          for f in ([d] if isinstance(d, str) else d)]


def _factors_of(mappings) -> tuple[list[str], list[str]]:
  """The factors naming whole dimensions and those inside compound factors, in order."""
  whole, compound = [], []
  for mapping in mappings:
    for d in mapping:
      if isinstance(d, str):
        whole.append(d)
      else:
        compound.extend(d)
  return whole, compound


class SdyShardingRule:
  """A Shardy sharding rule: one `ArrayMapping` per operand and per result, the kinds of
  the factors that are not pass-through, and the sizes of the factors used only inside
  compound factors.

  Args:
    operand_mappings, result_mappings: sequences of `ArrayMapping`s (kept as given).
    reduction_factors: factors of operands that the results lack (a sharded one needs an
      all-reduce), a tuple of factor names.
    need_replication_factors: factors whose dimension must not be sharded (a tuple).
    permutation_factors: factors whose sharding would need a collective permute (a tuple).
    **factor_sizes: the size of each factor that appears only in compound factors.

  `str(rule)` prints as JAX's: `SdyShardingRule((('i', 'j'),), (('i', 'j'),), {})`, the
  special factors appended when given (` reduction_factors=('j',)`).

  Raises:
    ValueError (JAX's messages): a special-factor argument that is not a tuple, or names a
      factor the mappings do not use; a factor in two special sets; a size for a factor
      that is unused or names a whole dimension; no size for a factor used only in compound
      factors.
  """

  def __init__(self, operand_mappings: tuple[ArrayMapping, ...],
               result_mappings: tuple[ArrayMapping, ...], *,
               reduction_factors: tuple[str, ...] = (),
               need_replication_factors: tuple[str, ...] = (),
               permutation_factors: tuple[str, ...] = (), **factor_sizes: int):
    whole, compound = _factors_of([*operand_mappings, *result_mappings])
    for f in factor_sizes:
      if f not in whole and f not in compound:
        raise ValueError(f"Factor {f} is not used in the rule, but size is provided")
    for f in dict.fromkeys(_factors_in_order([*operand_mappings, *result_mappings])):
      if f in whole and f in factor_sizes:
        raise ValueError(f"Factor {f} represents a whole dimension; do not specify its size")
      if f not in whole and f not in factor_sizes:
        raise ValueError(f"Factor {f} is only used in compound factors; must specify its size")
    seen: set = set()
    for name, factors in zip(_SPECIAL_FACTORS, (reduction_factors, need_replication_factors,
                                                permutation_factors)):
      if not isinstance(factors, tuple):
        raise ValueError(f"{name} must be a tuple of factors")
      for f in factors:
        if f not in whole and f not in compound:
          raise ValueError(f"Factor {f} in {name} is not used in the rule")
        if f in seen:
          raise ValueError(f"Factor {f} can only be in one of the reduction, need "
                           "replication, or permutation factor sets.")
        seen.add(f)
    self.operand_mappings = operand_mappings
    self.result_mappings = result_mappings
    self.factor_sizes = factor_sizes
    self.reduction_factors = reduction_factors
    self.need_replication_factors = need_replication_factors
    self.permutation_factors = permutation_factors

  def __str__(self):
    extra = "".join(f" {name}={getattr(self, name)}" for name in _SPECIAL_FACTORS
                    if getattr(self, name))
    return (f"SdyShardingRule({self.operand_mappings}, {self.result_mappings}, "
            f"{self.factor_sizes}{extra})")


def _mapping(dims: list) -> ArrayMapping:
  """The ArrayMapping of one operand or result, its factor names checked once it ends."""
  for d in dims:
    for f in ([d] if isinstance(d, str) else d):
      if f[0] != BATCHING and not f[0].isalpha():
        raise ValueError(f"Factor names have to start with a letter, but got '{f[0]}'")
  return ArrayMapping(*dims)


def _parse_side(side: str) -> list[ArrayMapping]:
  """The ArrayMappings of one side of a rule string (comma-separated), `...` already
  rewritten as `BATCHING`."""
  mappings: list[ArrayMapping] = []
  dims: list = []
  compound: list | None = None
  i, n = 0, len(side)
  while i < n:
    c = side[i]
    if c == "(":
      if compound is not None:
        raise ValueError("Compound factors should be one level, nested brackets are not "
                         "allowed")
      compound = []
    elif c == ")":
      if compound is None:
        raise ValueError("Brackets are not balanced")
      if len(compound) < 2:
        raise ValueError("Brackets should contain at least two factors")
      dims.append(CompoundFactor(*compound))
      compound = None
    elif c == ",":
      mappings.append(_mapping(dims))
      dims = []
    elif c == BATCHING:   # then an optional group number
      if dims or compound is not None:
        raise ValueError("Ellipsis can only be used at the beginning of a dimension")
      j = i + 1
      while j < n and side[j].isdigit():
        j += 1
      dims.append(f"{BATCHING}{int(side[i + 1:j] or 0)}")
      i = j
      continue
    elif c.isalnum() or c == "_":
      if c.isdigit():
        raise ValueError(f"Factor names have to start with a letter, but got '{c}'")
      j = i + 1
      while j < n and (side[j].isalnum() or side[j] == "_"):
        j += 1
      (dims if compound is None else compound).append(side[i:j])
      i = j
      continue
    elif not c.isspace():
      raise ValueError(f"Unknown character '{c}'")
    i += 1
  if compound is not None:
    raise ValueError(f"Brackets are not balanced in rule: '{' '.join(side.split())}'")
  mappings.append(_mapping(dims))
  return mappings


def str_to_sdy_sharding_rule(rule: str, **kwargs) -> SdyShardingRule:
  """Parses an einsum-like rule string into an `SdyShardingRule` (JAX's internal name).

  Grammar: `operands -> results`, each side a comma-separated list of mappings (a side may
  be empty: `->`), each mapping space-separated factors. A factor name starts with a letter
  and goes on with letters, digits and `_`; `(a b)` is a compound factor (two or more names,
  one level); a leading `...` (`...N` for batching group N) stands for any number of
  batching dimensions, printed `…0` (`…N`). `kwargs` are `SdyShardingRule`'s keywords
  (special factors and factor sizes).

  Raises:
    TypeError: `rule` is not a str.
    ValueError: JAX's messages for a malformed rule (no or several `->`, unknown
      characters, a name not starting with a letter, unbalanced or nested brackets, a
      compound factor of one factor, an ellipsis not first or inside brackets, a lone `.`)
      and `SdyShardingRule`'s.
  """
  if not isinstance(rule, str):
    raise TypeError(f"rule must be a str, but got {type(rule)}")
  if BATCHING in rule:
    raise ValueError(f"Unknown character '{BATCHING}'")
  rule = rule.replace("...", BATCHING)
  if "." in rule:
    raise ValueError("Character '.' must be used inside ellipsis '...'")
  sides = rule.split("->")
  if len(sides) != 2:
    raise ValueError(f"There is no -> in rule: '{rule}'")
  operands, results = _parse_side(sides[0]), _parse_side(sides[1])
  return SdyShardingRule(tuple(operands), tuple(results), **kwargs)


def check_sharding_rule(rule: SdyShardingRule, avals_in: Sequence[Any],
                        avals_out: Sequence[Any]) -> None:
  """Checks `rule` against the operation's operand and result avals, as JAX does when it
  lowers the rule for a program over a mesh: the counts of operands and results, each
  mapping's rank (a batching factor takes any number of leading dimensions, the same number
  wherever its group appears), and each compound factor's size against its dimension.

  Raises:
    ValueError: with JAX's message for the first mismatch.
  """
  if len(rule.operand_mappings) != len(avals_in):
    raise ValueError(f"Sharding rule has {len(rule.operand_mappings)} operands, but the "
                     f"operation has {len(avals_in)} operands")
  if len(rule.result_mappings) != len(avals_out):
    raise ValueError(f"Sharding rule has {len(rule.result_mappings)} results, but the "
                     f"operation has {len(avals_out)} results")
  groups: dict[str, int] = {}
  sides = [("operand", rule.operand_mappings, avals_in),
           ("result", rule.result_mappings, avals_out)]
  explicit: list = []   # (kind, i, the mapping without its batching factor, the shape tail)
  for kind, mappings, avals in sides:
    for i, (mapping, aval) in enumerate(zip(mappings, avals)):
      shape = tuple(aval.shape)
      dims = list(mapping)
      batched = bool(dims) and isinstance(dims[0], str) and dims[0][0] == BATCHING
      if batched:
        group = dims.pop(0)
      if len(dims) > len(shape) or (not batched and len(dims) != len(shape)):
        raise ValueError(f"Sharding rule {i}th {kind} has rank {len(dims)}, but the "
                         f"operation {i}th {kind} has rank {len(shape)}")
      if batched:
        count = len(shape) - len(dims)
        first = groups.setdefault(group, count)
        if first != count:
          raise ValueError(f"Ellipsis represents different number of leading dimensions "
                           f"{first} and {count}")
      explicit.append((kind, i, dims, shape[len(shape) - len(dims):]))
  sizes = {f: int(s) for f, s in rule.factor_sizes.items()}
  for _, _, dims, shape in explicit:
    for d, s in zip(dims, shape):
      if isinstance(d, str):
        sizes.setdefault(d, s)
  for kind, i, dims, shape in explicit:
    for d, s in zip(dims, shape):
      if not isinstance(d, str):
        derived = 1
        for f in d:
          derived *= sizes[f]
        if derived != s:
          raise ValueError(f"{i}th {kind} actual size {s} doesn't match the size {derived} "
                           f"derived from the compound factors {d}")


# ---------------------------------------------------------------------------
# The custom_partitioning primitive


def _flatten(tree):
  return optree.tree_flatten(tree, none_is_leaf=False, namespace=tree_util.NAMESPACE)


def _unflatten(treedef, leaves):
  return tree_util.tree_unflatten(treedef, leaves)


_JVP_ERROR = "Differentiation rule for 'custom_partitioning' not implemented"
_BATCHING_ERROR = "Batching rule for 'custom_partitioning' not implemented"


def _custom_partitioning_lowering(ctx, *args, call: ClosedJaxpr, sharding_rule, **_):
  # Inlined: XLA partitions the body itself. In a program over a mesh of several devices
  # JAX lowers the rule for Shardy, which checks it against the operation (over one device
  # it inlines the body too); stagecraft checks it the same way.
  module = ctx.module
  if (module.sdy_mesh is not None and module.num_partitions > 1
      and isinstance(sharding_rule, SdyShardingRule)):
    check_sharding_rule(sharding_rule, ctx.avals_in, ctx.avals_out)
  consts = [lowering.dense_constant(ctx.fb, c, v.aval)
            for c, v in zip(call.consts, call.jaxpr.constvars)]
  return lowering.jaxpr_subcomp(ctx.fb, call.jaxpr, consts, list(args))


def _custom_partitioning_jvp(primals, tangents, **params):
  raise NotImplementedError(_JVP_ERROR)


def _custom_partitioning_batching(args, dims, **params):
  raise NotImplementedError(_BATCHING_ERROR)


def _masked(v):
  return core.pp_masked_str(v) if callable(v) else v


custom_partitioning_p = core.Primitive("custom_partitioning")
custom_partitioning_p.multiple_results = True
# abstract eval: the body's output avals; impl: the body evaluated (JAX's impl runs it too).
core.def_closed_call(custom_partitioning_p, "call")
lowering.register_lowering(custom_partitioning_p, _custom_partitioning_lowering)
ad.primitive_jvps[custom_partitioning_p] = _custom_partitioning_jvp
batching.primitive_batchers[custom_partitioning_p] = _custom_partitioning_batching
# DCE: the default rule (pure: the equation goes when none of its results is used).
# Printed as JAX prints it: params sorted by name, callables by their str (addresses masked).
core.pp_eqn_rules[custom_partitioning_p] = lambda eqn, context: sorted(
    (k, _masked(v)) for k, v in eqn.params.items())


def _resolve_args(fun: Callable, args: tuple, kwargs: dict) -> tuple:
  """`args` and `kwargs` bound to `fun`'s positional parameters, defaults applied."""
  bound = inspect.signature(fun).bind(*args, **kwargs)
  bound.apply_defaults()
  if bound.kwargs:
    raise TypeError("keyword arguments could not be resolved to positions")
  return bound.args


class custom_partitioning:
  """Wraps `fun` so that a partitioning rule can be attached to it (JAX's
  `jax.experimental.custom_partitioning`), e.g. an FFT batched over its leading dimensions
  that should stay sharded along them:

    @custom_partitioning
    def my_fft(x):
      return jnp.fft.fft(x)

    my_fft.def_partition(partition=partition,
                         infer_sharding_from_operands=infer_sharding_from_operands,
                         sharding_rule="...i -> ...i")

  Args:
    fun: a function of arrays (pytrees of arrays) to arrays (pytrees).
    static_argnums: a sequence of positions of arguments that are not arrays (Python values,
      passed to `fun` as they are and recorded in the equation's `static_args`); keyword
      arguments are resolved to positions with `inspect.signature(fun)` first. A negative
      position counts from the end (JAX's fails on one).

  A call traces `fun` (with the static arguments in place) to a closed jaxpr and binds one
  `custom_partitioning` equation; its params hold the body (`call`), the callbacks and rule
  of `def_partition`, the trees of the dynamic arguments and of the output, and the static
  arguments, as in JAX's jaxprs.

  Not as in JAX: **stagecraft never calls the partitioning callbacks** (`partition`,
  `infer_sharding_from_operands`, `propagate_user_sharding`, nor a callable `sharding_rule`):
  it does not hook XLA's SPMD partitioner with Python callbacks. Eagerly the body runs; under
  `jit` it is lowered inline and XLA partitions it as any other code, so values equal JAX's
  whenever `partition`'s lowering function computes what `fun` computes (the contract of a
  partition rule), while the layout of the computation across devices is XLA's choice. The
  sharding rule is parsed and validated as JAX does and, in a program over a mesh, checked
  against the operands' and results' ranks, but not used to partition.

  Differentiation (`grad`, `jvp`) and `vmap` raise NotImplementedError, as in JAX; wrap the
  function in a `custom_vjp` whose rules call `custom_partitioning` functions to
  differentiate it.

  Raises (when called):
    AttributeError: `def_partition` was not called.
    TypeError: the arguments do not bind to `fun`'s positional parameters (keyword-only
      parameters cannot be resolved); `static_argnums` is not iterable.
    IndexError: a static position beyond the arguments.
    UnexpectedTracerError: a traced value in a static position.
    NotImplementedError: with the Shardy partitioner (the default and only setting),
      `infer_sharding_from_operands` or `propagate_user_sharding` without a `sharding_rule`.
  """

  def __init__(self, fun: Callable, static_argnums: Sequence[int] = ()):
    functools.update_wrapper(self, fun)
    self.fun = fun
    self.partition: Callable | None = None
    self.static_argnums = static_argnums
    self.propagate_user_sharding: Callable | None = None
    self.infer_sharding_from_operands: Callable | None = None
    self.sharding_rule: Any = None

  @api_boundary
  def def_partition(self, partition, infer_sharding_from_operands=None,
                    propagate_user_sharding=None, decode_shardings=True, sharding_rule=None,
                    *, reduction_factors=(), need_replication_factors=(),
                    permutation_factors=(), **factor_sizes):
    """Attaches the partitioning callbacks and the sharding rule; returns `partition`.

    Args:
      partition: `partition(mesh, arg_shapes, result_shape) -> (mesh, lower_fn,
        result_sharding, arg_shardings)` in JAX; kept, never called by stagecraft.
      infer_sharding_from_operands, propagate_user_sharding: JAX's GSPMD callbacks; kept,
        never called (with Shardy, the default, a `sharding_rule` is needed beside them).
      decode_shardings: kept in the equation's params.
      sharding_rule: an `SdyShardingRule`, a rule string (parsed here by
        `str_to_sdy_sharding_rule` with the keywords below), a callable producing either
        (kept, never called), or None.
      reduction_factors, need_replication_factors, permutation_factors, **factor_sizes: the
        special factors and factor sizes of a rule string.

    Raises:
      ValueError: the keywords are given with a rule that is not a string ("Unknown keyword
        arguments: {...}", JAX's message); the parser's and `SdyShardingRule`'s errors.
      TypeError: `sharding_rule` is neither a string, an SdyShardingRule, a callable nor None.
    """
    self.partition = partition
    self.propagate_user_sharding = propagate_user_sharding
    self.infer_sharding_from_operands = infer_sharding_from_operands
    self.decode_shardings = decode_shardings
    if sharding_rule is None or isinstance(sharding_rule, SdyShardingRule) or (
        callable(sharding_rule)):
      special = zip(_SPECIAL_FACTORS, (reduction_factors, need_replication_factors,
                                       permutation_factors))
      unknown = {**factor_sizes, **{k: v for k, v in special if v}}
      if unknown:
        raise ValueError(f"Unknown keyword arguments: {unknown}")
      self.sharding_rule = sharding_rule
    else:
      self.sharding_rule = str_to_sdy_sharding_rule(
          sharding_rule, reduction_factors=reduction_factors,
          need_replication_factors=need_replication_factors,
          permutation_factors=permutation_factors, **factor_sizes)
    return partition

  @api_boundary
  def __call__(self, *args, **kwargs):
    if "decode_shardings" not in self.__dict__:
      raise AttributeError(f"custom_partitioning function {fun_name(self.fun)} has no "
                           "partition rule: call def_partition before calling it.")
    args = _resolve_args(self.fun, args, kwargs)
    static_argnums = tuple(self.static_argnums)
    static_args = tuple(args[i] for i in static_argnums)
    for a in static_args:
      if any(isinstance(leaf, core.Tracer) for leaf in tree_util.tree_leaves(a)):
        raise UnexpectedTracerError(
            "Found a JAX Tracer object passed as an argument to a custom_partitioning "
            "function in a position indicated as static by static_argnums. ")
    static = {i % len(args) for i in static_argnums}
    dyn_args = tuple(a for i, a in enumerate(args) if i not in static)
    shardy = config.read("use_shardy_partitioner")
    if shardy and self.sharding_rule is None and (
        self.infer_sharding_from_operands is not None
        or self.propagate_user_sharding is not None):
      raise NotImplementedError(
          "Shardy is used, but sharding propagation callbacks instead of sharding_rule are "
          "provided. Need to provide sharding_rule to migrate to Shardy.")
    leaves, in_tree = _flatten(dyn_args)
    in_avals = [core.get_aval(x) for x in leaves]
    store: dict = {}

    def flat_fun(*xs):
      it = iter(_unflatten(in_tree, list(xs)))
      full = [args[i] if i in static else next(it) for i in range(len(args))]
      out_leaves, store["out_tree"] = _flatten(self.fun(*full))
      return out_leaves

    jaxpr, consts = pe.trace_to_jaxpr(flat_fun, in_avals)
    out_tree = store["out_tree"]
    outs = custom_partitioning_p.bind(
        *leaves, call=ClosedJaxpr(jaxpr, consts), partition=self.partition,
        propagate_user_sharding=None if shardy else self.propagate_user_sharding,
        infer_sharding_from_operands=None if shardy else self.infer_sharding_from_operands,
        decode_shardings=self.decode_shardings,
        sharding_rule=self.sharding_rule if shardy else None,
        in_tree=tree_util.TreeParam(in_tree), out_tree=tree_util.TreeParam(out_tree),
        static_args=static_args)
    return _unflatten(out_tree, outs)

