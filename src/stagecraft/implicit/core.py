"""Implicit arrays: array-like dataclasses whose primitives are intercepted by handlers.

An `ImplicitArray` stands for an array it can `materialize()` (a quantized weight, a low-rank
sum) without being one. `use_implicit(fn)` traces `fn` to a jaxpr at the avals of its
arguments (an implicit argument is traced at its `aval`) and then evaluates that jaxpr
equation by equation with values that may be implicit arrays: an equation whose operands
include one goes to a handler registered with `register` (found by multiple dispatch on the
operand types, with plum) or, when none matches, its implicit operands are materialized
(with a warning) and the primitive is bound as usual. Because evaluation binds primitives in
the current trace, `use_implicit` composes with `jit`, `grad` and `vmap` on either side.

Higher-order primitives (jit's call, cond, while, scan, the custom-derivative and custom-DCE
calls, checkpoint) have handlers in `stagecraft.implicit.higher_order` that re-run their
bodies under the same evaluator; more can be added with `register_higher_order`.

Under differentiation: `ste(fn)` of an implicit quantizer returns a `StraightThrough`
(the implicit array forward, the input's tangent backward: primitives on it run the
implicit array's handlers and add the dense tangent through a `custom_jvp`); custom_jvp /
custom_vjp rules receive implicit operands as themselves and are traced and evaluated by
the evaluator (`run_traced`), where using an implicit array as an array (`jnp.asarray(w)`,
an operator) gives the dense stand-in `implicit_pack`, turned back into the implicit array.
Outside the evaluator, operators on implicit arrays dispatch right away; other functions
materialize them (with a MaterializationWarning).

Design after eformer's jaximus and quax (Kidger): one multiple-dispatch table per primitive.
"""
from __future__ import annotations

import abc
import contextvars
import dataclasses
import difflib
import os
import sys
import warnings
import weakref
from typing import Any, Callable, ClassVar, Sequence

import numpy as np
import optree
import plum

from stagecraft import core, dtypes, tree_util
from stagecraft.config import config
from stagecraft.core import Literal, ShapedArray
from stagecraft.errors import MissingRuleError
from stagecraft.interpreters import ad, batching, lowering
from stagecraft.interpreters import partial_eval as pe
# NB: every module that defines primitives, so that handlers can name any of them.
from stagecraft import ad_checkpoint, custom_dce, lax  # noqa: F401
from stagecraft.api import eval_shape, vmap
from stagecraft.custom_derivatives import SymbolicZero, custom_jvp
from stagecraft.lax.ad_util import stop_gradient
from stagecraft.lax.elementwise import add as lax_add
from stagecraft.lax.elementwise import convert_element_type
from stagecraft.lax.shape import full as lax_full
from stagecraft.numpy.manipulation import stack as np_stack
from stagecraft.runtime.array import Array

_NS = tree_util.NAMESPACE

__all__ = [
    "ImplicitArray", "aux_field", "register", "register_higher_order", "use_implicit",
    "implicit", "materialize", "ste", "MaterializationError", "MaterializationWarning",
    "tree_map_with_implicit", "tree_flatten_with_implicit", "tree_leaves_with_implicit",
    "tree_structure_with_implicit", "flatten_one_implicit_layer", "implicit_depth",
    "find_primitive", "StraightThrough", "Stacked", "stack", "implicit_pack_p",
]

#: Environment variable that silences the materialization warning when set to 0/false/off/no.
WARN_ENV = "STAGECRAFT_IMPLICIT_WARN"


class MaterializationWarning(UserWarning):
  """An implicit array was materialized because no handler matched a primitive.

  Example and fix::

    @implicit
    def f(w):           # w: ArrayNF4
      return jnp.sin(w)  # warns: no handler for `sin`, materializing ArrayNF4

  Register a handler (`@register("sin") def _(x: ArrayNF4): ...`), set
  `warn_on_materialize=False` on the class, or set the environment variable
  `STAGECRAFT_IMPLICIT_WARN=0`.
  """


class MaterializationError(RuntimeError):
  """`materialize()` of an implicit array raised; the original error is the `__cause__`.

  The implicit array is never replaced by a placeholder (eformer substitutes an array of
  ones); fix the class's `materialize` or register a handler for the primitive named.
  """


# ---------------------------------------------------------------------------
# ImplicitArray


def aux_field(metadata: dict | None = None, **kwargs) -> Any:
  """A dataclass field holding static metadata (aux data of the pytree), not a child.

  Args:
    metadata: extra field metadata to keep.
    **kwargs: passed to `dataclasses.field` (`default`, `kw_only`, ...).

  Aux data must be hashable (it keys the caches of traced and compiled programs) and is
  compared when a loop carry comes back from its body (a change raises TypeError).
  """
  metadata = dict(metadata or {})
  metadata["implicit_array_aux"] = True
  return dataclasses.field(metadata=metadata, **kwargs)


def fields(cls_or_obj) -> list[tuple[str, bool]]:
  return [(f.name, bool(f.metadata.get("implicit_array_aux")))
          for f in dataclasses.fields(cls_or_obj)]


_aval_discovery = [False]


@dataclasses.dataclass
class ImplicitArray(abc.ABC):
  """Base class of implicit arrays: dataclasses that stand for an array they can
  `materialize()`.

  Fields are pytree children (arrays, or implicit arrays: nesting is allowed) unless declared
  with `aux_field()` (static metadata). `shape` and `dtype` (keyword-only) are the aval of the
  array stood for: given, computed by `compute_shape`/`compute_dtype`, or discovered by
  abstractly evaluating `materialize` (a warning says when a given value disagrees with it).

  Class keywords: `warn_on_materialize=False` silences the materialization warning for the
  class (`class A(ImplicitArray, warn_on_materialize=False)`).

  Raises:
    TypeError: when a subclass that is not decorated with `@dataclasses.dataclass` is
      instantiated, or `shape`/`dtype` cannot be determined.

  Example:
    >>> import dataclasses, stagecraft.numpy as jnp
    >>> from stagecraft.implicit import ImplicitArray, aux_field, implicit
    >>> @dataclasses.dataclass
    ... class Scaled(ImplicitArray):
    ...   x: object
    ...   scale: float = aux_field(default=2.0)
    ...   def materialize(self):
    ...     return self.x * self.scale
    >>> s = Scaled(jnp.ones(3))
    >>> s.aval
    ShapedArray(float32[3])
  """
  shape: tuple[int, ...] | None = aux_field(kw_only=True, default=None)
  dtype: Any = aux_field(kw_only=True, default=None)

  warn_on_materialize: ClassVar[bool] = True
  #: Whether `materialize` of an instance with implicit children runs under the implicit
  #: evaluator (so that its operations on those children go to their handlers).
  materialize_nested_under_implicit: ClassVar[bool] = True
  default_shape: ClassVar[tuple[int, ...] | None] = None
  default_dtype: ClassVar[Any] = None

  def __init_subclass__(cls, warn_on_materialize: bool = True, **kwargs):
    super().__init_subclass__(**kwargs)
    cls.warn_on_materialize = warn_on_materialize
    tree_util.register_pytree_with_keys(cls, _flatten_with_keys, cls._tree_unflatten)

  def __new__(cls, *args, **kwargs):
    if "__dataclass_fields__" not in cls.__dict__:
      raise TypeError(
          f"{cls.__name__} must be a dataclass: ImplicitArray subclasses declare their "
          f"children and aux_field()s as dataclass fields. Decorate the class with "
          f"@dataclasses.dataclass.")
    return super().__new__(cls)

  def __post_init__(self):
    shape = self.shape if self.shape is not None else self.compute_shape()
    dtype = self.dtype if self.dtype is not None else self.compute_dtype()
    given_shape, given_dtype = self.shape is not None, self.dtype is not None
    if shape is None or dtype is None:
      aval = _materialization_aval(self)
      if shape is not None and tuple(shape) != aval.shape:
        warnings.warn(f"{type(self).__name__}: shape {tuple(shape)} "
                      f"{'given' if given_shape else 'from compute_shape'} does not match the "
                      f"shape {aval.shape} of materialize(); using {tuple(shape)}.",
                      stacklevel=3)
      if dtype is not None and np.dtype(dtype) != aval.dtype:
        warnings.warn(f"{type(self).__name__}: dtype {np.dtype(dtype).name} "
                      f"{'given' if given_dtype else 'from compute_dtype'} does not match the "
                      f"dtype {aval.dtype.name} of materialize(); using "
                      f"{np.dtype(dtype).name}.", stacklevel=3)
      shape = aval.shape if shape is None else shape
      dtype = aval.dtype if dtype is None else dtype
    object.__setattr__(self, "shape", tuple(int(d) for d in shape))
    object.__setattr__(self, "dtype", dtypes.canonicalize_dtype(np.dtype(dtype)))

  def compute_shape(self) -> tuple[int, ...] | None:
    """The shape, when it follows from the fields; None to discover it from `materialize`."""
    return self.default_shape

  def compute_dtype(self) -> Any:
    """The dtype, when it follows from the fields; None to discover it from `materialize`."""
    return self.default_dtype

  @abc.abstractmethod
  def materialize(self) -> Any:
    """The array this implicit array stands for (`dtype[*shape]`)."""

  @property
  def aval(self) -> ShapedArray:
    """`ShapedArray(shape, dtype)` of the array stood for."""
    return ShapedArray(self.shape, self.dtype)

  ndim = property(lambda self: len(self.shape))
  size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))

  def astype(self, new_dtype) -> "ImplicitArray":
    """A copy standing for the array converted to `new_dtype` (materialize converts)."""
    return dataclasses.replace(self, dtype=dtypes.canonicalize_dtype(np.dtype(new_dtype)))

  # -- scanning over the leading axis (`lax.scan` xs and ys under `implicit`)

  def unstack(self) -> "ImplicitArray | None":
    """This array, of shape `(n, *s)`, as one implicit array of shape `s` whose leaves carry
    an extra leading axis of length `n` (slice `i` of every leaf makes slice `i` of the
    array): the layout `lax.scan` needs to keep an implicit `xs` implicit. None (the
    default) when the class has no such layout; `scan` then materializes it."""
    return None

  @classmethod
  def stack(cls, stacked: "ImplicitArray", length: int) -> "ImplicitArray":
    """The inverse of `unstack`: `stacked` is an instance of shape `s` whose leaves carry a
    leading axis of `length` (`scan` stacks implicit `ys` so); returns an implicit array of
    shape `(length, *s)`. The default wraps it in `Stacked`; classes with a natural stacked
    layout (the quantized arrays) override it."""
    return Stacked.from_stacked_leaves(stacked, length)

  # -- use as an array: operators dispatch to the handlers, other functions materialize

  #: NumPy defers to the reflected operators below instead of making object arrays.
  __array_ufunc__ = None

  def __jax_array__(self):
    """The dense array, for functions that take arrays (`jnp.sum(x)`, `jnp.asarray(x)`):
    inside a custom_jvp/custom_vjp rule run by the implicit evaluator it stays implicit
    (the rule is traced and the evaluator dispatches what the rule does with it);
    elsewhere it is materialized, with a MaterializationWarning."""
    return as_array(self, "used as an array by a function")

  @property
  def T(self):
    return _apply_op(_OPS["T"], self)

  def __getitem__(self, idx):
    if _rule_tracing.get():
      return as_array(self)[idx]
    return use_implicit(lambda a: a[idx])(self)

  @classmethod
  def _tree_unflatten(cls, aux, children):
    obj = object.__new__(cls)
    kids, auxs = iter(children), iter(aux)
    for name, is_aux in fields(cls):
      object.__setattr__(obj, name, next(auxs) if is_aux else next(kids))
    return obj


_OPS: dict[str, Callable] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "truediv": lambda a, b: a / b, "pow": lambda a, b: a ** b, "matmul": lambda a, b: a @ b,
    "neg": lambda a: -a, "pos": lambda a: +a, "abs": lambda a: abs(a),
    "T": lambda a: a.T,
}


def _operand_ok(x) -> bool:
  return isinstance(x, (ImplicitArray, core.Tracer, Array, np.ndarray, np.generic, int, float,
                        complex, bool))


def _apply_op(fn: Callable, *args):
  """`fn(*args)` with implicit operands: dispatched to the handlers right away (by
  `use_implicit`), or, while a custom rule is traced, on dense stand-ins that the evaluator
  turns back into the implicit arrays."""
  if _rule_tracing.get():
    return fn(*[as_array(a) if is_implicit(a) else a for a in args])
  return use_implicit(fn)(*args)


def _binop(name: str, swap: bool = False):
  fn = _OPS[name]

  def op(self, other):
    if not _operand_ok(other):
      return NotImplemented
    return _apply_op(fn, other, self) if swap else _apply_op(fn, self, other)
  op.__name__ = f"__{'r' if swap else ''}{name}__"
  return op


for _name in ("add", "sub", "mul", "truediv", "pow", "matmul"):
  setattr(ImplicitArray, f"__{_name}__", _binop(_name))
  setattr(ImplicitArray, f"__r{_name}__", _binop(_name, True))
for _name in ("neg", "pos", "abs"):
  setattr(ImplicitArray, f"__{_name}__", (lambda fn: lambda self: _apply_op(fn, self))(
      _OPS[_name]))
del _name


def _flatten_with_keys(x: ImplicitArray):
  children, aux = [], []
  for name, is_aux in fields(x):
    v = getattr(x, name)
    if is_aux:
      aux.append(v)
    else:
      children.append((tree_util.GetAttrKey(name), v))
  return children, tuple(aux)


core.pytype_aval_mappings[ImplicitArray] = lambda x: x.aval


def _materialization_aval(x: ImplicitArray) -> ShapedArray:
  leaves, treedef = optree.tree_flatten(x, namespace=_NS)
  structs = [core.ShapeDtypeStruct(core.get_aval(v).shape, core.get_aval(v).dtype)
             for v in leaves]
  try:
    out = eval_shape(lambda *ls: materialize_value(tree_util.tree_unflatten(treedef, ls),
                                                    convert=False), *structs)
  except MaterializationError as e:
    raise TypeError(f"{type(x).__name__}: shape and dtype were not given and could not be "
                    f"discovered by abstractly evaluating materialize(): {e.__cause__!r}. "
                    f"Pass shape= and dtype=, or define compute_shape/compute_dtype.") from e
  return ShapedArray(out.shape, out.dtype)


# ---------------------------------------------------------------------------
# Tree utilities that treat implicit arrays as leaves


def is_implicit(x) -> bool:
  return isinstance(x, ImplicitArray)


def _combine(is_leaf):
  if is_leaf is None:
    return is_implicit
  return lambda x: is_implicit(x) or is_leaf(x)


def tree_map_with_implicit(f: Callable, tree: Any, *rest: Any, is_leaf=None) -> Any:
  """`tree_map` with implicit arrays as leaves (`f` sees them whole)."""
  return tree_util.tree_map(f, tree, *rest, is_leaf=_combine(is_leaf))


def tree_flatten_with_implicit(tree: Any, is_leaf=None):
  """`tree_flatten` with implicit arrays as leaves: `(leaves, treedef)`."""
  return tree_util.tree_flatten(tree, is_leaf=_combine(is_leaf))


def tree_leaves_with_implicit(tree: Any, is_leaf=None) -> list:
  """`tree_leaves` with implicit arrays as leaves."""
  return tree_util.tree_leaves(tree, is_leaf=_combine(is_leaf))


def tree_structure_with_implicit(tree: Any, is_leaf=None):
  """`tree_structure` with implicit arrays as leaves."""
  return tree_util.tree_structure(tree, is_leaf=_combine(is_leaf))


def flatten_one_implicit_layer(tree: Any) -> tuple[list, Any]:
  """Flattens `tree` one implicit layer deep: implicit arrays at the top are opened into
  their children, implicit children stay whole. Returns `(leaves, treedef)`, and
  `treedef.unflatten(leaves)` rebuilds `tree`."""
  def is_leaf(x):
    return is_implicit(x) and x is not top[0]
  leaves = []
  top = [None]
  outer, outer_def = tree_flatten_with_implicit(tree)
  subs = []
  for leaf in outer:
    if is_implicit(leaf):
      top[0] = leaf
      ls, d = tree_util.tree_flatten(leaf, is_leaf=is_leaf)
      leaves.extend(ls)
      subs.append(d)
    else:
      leaves.append(leaf)
      subs.append(None)
  return leaves, _OneLayer(outer_def, tuple(subs))


class _OneLayer:
  """Treedef of `flatten_one_implicit_layer` (unflatten with `tree_unflatten` or
  `.unflatten`)."""
  def __init__(self, outer, subs):
    self.outer, self.subs = outer, subs

  def unflatten(self, leaves):
    it = iter(leaves)
    outs = [next(it) if d is None else tree_util.tree_unflatten(
        d, [next(it) for _ in range(d.num_leaves)]) for d in self.subs]
    return tree_util.tree_unflatten(self.outer, outs)

  def __eq__(self, other):
    return isinstance(other, _OneLayer) and (self.outer, self.subs) == (other.outer,
                                                                        other.subs)

  def __hash__(self):
    return hash((self.outer, self.subs))

  def __repr__(self):
    return f"OneImplicitLayer({self.outer}, {self.subs})"


def implicit_depth(tree: Any) -> int:
  """The deepest nesting of implicit arrays in `tree`: 0 without any, 1 for implicit arrays
  with array children, 2 when one has an implicit child, and so on."""
  depth = 0
  for leaf in tree_leaves_with_implicit(tree):
    if is_implicit(leaf):
      kids = [getattr(leaf, n) for n, aux in fields(leaf) if not aux]
      depth = max(depth, 1 + implicit_depth(kids))
  return depth


# ---------------------------------------------------------------------------
# Materialization


def warn_enabled() -> bool:
  return os.environ.get(WARN_ENV, "1").lower() not in ("0", "false", "off", "no")


def materialize_value(x: Any, convert: bool = True) -> Any:
  """Materializes `x` fully (nested implicit arrays included); other values pass through."""
  if not is_implicit(x):
    return x
  kids = [getattr(x, n) for n, aux in fields(x) if not aux]
  try:
    if not type(x).materialize_nested_under_implicit:
      out = x.materialize()
    elif any(is_implicit(k) for k in tree_leaves_with_implicit(kids)):
      # A nested implicit array: run materialize under the implicit evaluator, so that the
      # operations on the implicit children go to their handlers.
      leaves, d = flatten_one_implicit_layer(x)
      out = use_implicit(lambda *ls: d.unflatten(ls).materialize())(*leaves)
    else:
      out = x.materialize()
  except MaterializationError:
    raise
  except Exception as e:
    raise MaterializationError(
        f"materialize() of {type(x).__name__} (standing for "
        f"{x.aval.str_short() if x.shape is not None and x.dtype is not None else 'an array'})"
        f" raised {type(e).__name__}: {e}") from e
  out = materialize_value(out, convert)
  if convert and x.dtype is not None:
    if core.get_aval(out).dtype != x.dtype:
      out = convert_element_type(out, x.dtype)
  return out


def materialize(x: Any) -> Any:
  """The array an implicit array stands for (recursively for nested ones); other values are
  returned unchanged.

  Raises:
    MaterializationError: when the class's `materialize()` raises (the cause is kept).
  """
  return materialize_value(x)


# ---------------------------------------------------------------------------
# Implicit arrays as arrays inside traced custom rules: `implicit_pack`
#
# A custom_jvp/custom_vjp rule receives implicit operands as themselves. It is traced (with
# `_rule_tracing` set) and its jaxpr evaluated by `eval_jaxpr_implicit`; inside, whatever
# uses an implicit array as an array (an operator, `jnp.sum(x)`, `jnp.asarray(x)`) gets the
# dense stand-in `implicit_pack(*leaves)`, which the evaluator turns back into the implicit
# array, so that what the rule does with it goes to the handlers. Outside an evaluator the
# primitive materializes (its impl, JVP and batching rules are those of `materialize`).

_rule_tracing: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "stagecraft_implicit_rule_tracing", default=False)

implicit_pack_p = core.Primitive("implicit_pack")


def _pack_value(leaves: Sequence[Any], tree) -> "ImplicitArray":
  return tree_util.tree_unflatten(tree, list(leaves))


def _pack_materialize(tree):
  def mat(*leaves):
    return [materialize_value(_pack_value(leaves, tree))]
  return mat


def _materialization_warning(x: "ImplicitArray", what: str) -> None:
  if warn_enabled() and type(x).warn_on_materialize:
    warnings.warn(f"{type(x).__name__} {what}: materializing it. Pass it to a function "
                  f"wrapped with stagecraft.implicit.implicit so that the registered handlers "
                  f"see it, or silence this with warn_on_materialize=False on the class or "
                  f"{WARN_ENV}=0.", MaterializationWarning, stacklevel=4)


def as_array(x: "ImplicitArray", what: str = "used as an array") -> Any:
  """`x` as a dense array: the `implicit_pack` stand-in while a custom rule is traced under
  the implicit evaluator, else `materialize(x)` (with a MaterializationWarning)."""
  if _rule_tracing.get():
    leaves, tree = optree.tree_flatten(x, namespace=_NS)
    return implicit_pack_p.bind(*leaves, tree=tree)
  _materialization_warning(x, what)
  return materialize_value(x)


def _pack_abstract_eval(*avals, tree):
  return _pack_value([None] * tree.num_leaves, tree).aval


def _pack_impl(*leaves, tree):
  x = _pack_value(leaves, tree)
  _materialization_warning(x, "was used as an array outside the implicit evaluator")
  return materialize_value(x)


def _pack_jvp(primals, tangents, *, tree):
  (p,), (t,) = ad.jvp_flat(_pack_materialize(tree), primals, tangents)
  return p, t


def _pack_batch(axis_data, args, dims, *, tree):
  (out,), (d,) = batching.batch_flat(_pack_materialize(tree), args, dims, axis_data)
  return out, d


def _pack_lowering(ctx, *args, tree):
  name = type(_pack_value([None] * tree.num_leaves, tree)).__name__
  raise MissingRuleError(
      f"An implicit array ({name}) was used as an array inside a custom_jvp/custom_vjp rule "
      f"in a place the implicit evaluator does not reach (a higher-order primitive without "
      f"an implicit-array handler). Materialize it explicitly there with "
      f"stagecraft.implicit.materialize.")


implicit_pack_p.def_abstract_eval(_pack_abstract_eval)
implicit_pack_p.def_impl(_pack_impl)
ad.primitive_jvps[implicit_pack_p] = _pack_jvp
batching.fancy_primitive_batchers[implicit_pack_p] = _pack_batch
lowering.register_lowering(implicit_pack_p, _pack_lowering)


def has_tracer(values: Sequence[Any]) -> bool:
  """Whether `values` (implicit arrays' leaves included) hold a tracer: then a traced
  program that captured them as constants must not be cached."""
  return any(isinstance(v, core.Tracer) for v in optree.tree_leaves(list(values),
                                                                    namespace=_NS))


def _is_static(x) -> bool:
  return not (is_implicit(x) or isinstance(x, core.Tracer) or core.valid_array_type(x))


def run_traced(fn: Callable, args: Sequence[Any]) -> list[Any]:
  """Runs `fn(*args)` (a custom rule) under the implicit evaluator: implicit arrays in
  `args` reach `fn` as themselves (with traced leaves), array arguments as tracers, other
  values (symbolic zeros, None) unchanged; `fn` returns a pytree, flattened here. `fn` is
  traced with `_rule_tracing` set and its jaxpr evaluated by `eval_jaxpr_implicit`, so what
  it does with the implicit arrays goes to the handlers.

  Returns:
    The leaves of `fn`'s output; non-array leaves as `fn` returned them, array leaves as
    evaluated (implicit arrays where handlers produced them).
  """
  in_leaves, in_specs = [], []
  for a in args:
    if _is_static(a):
      in_specs.append(("static", a))
    elif is_implicit(a):
      ls, t = optree.tree_flatten(a, namespace=_NS)
      in_specs.append(("implicit", t))
      in_leaves.extend(ls)
    else:
      in_specs.append(("leaf", None))
      # Host scalars (grad's seed, a WeakScalarValue) reach the rule and the handlers as
      # arrays, as they do in custom_derivatives.
      if type(a) is core.WeakScalarValue:
        a = convert_element_type(a.value, a.dtype, weak_type=True)
      elif isinstance(a, np.generic):
        a = convert_element_type(a, a.dtype)
      in_leaves.append(a)
  box = []

  def flat(*ls):
    it = iter(ls)
    vals = []
    for kind, x in in_specs:
      if kind == "static":
        vals.append(x)
      elif kind == "implicit":
        vals.append(tree_util.tree_unflatten(x, [next(it) for _ in range(x.num_leaves)]))
      else:
        vals.append(next(it))
    token = _rule_tracing.set(True)
    try:
      out = fn(*vals)
    finally:
      _rule_tracing.reset(token)
    leaves, tree = optree.tree_flatten(out, namespace=_NS)
    dyn = [not _is_static(v) for v in leaves]
    box.append((tree, dyn, [v for v, d in zip(leaves, dyn) if not d]))
    return [v for v, d in zip(leaves, dyn) if d]

  jaxpr, consts = pe.trace_to_jaxpr(flat, [_leaf_aval(x) for x in in_leaves])
  jaxpr, consts = _pack_implicit_consts(jaxpr, consts)
  outs = iter(eval_jaxpr_implicit(jaxpr, consts, *in_leaves))
  _, dyn, statics = box[0]
  statics = iter(statics)
  return [next(outs) if d else next(statics) for d in dyn]


def _pack_implicit_consts(jaxpr: core.Jaxpr, consts: list) -> tuple[core.Jaxpr, list]:
  """A rule that hands an implicit array straight to a primitive (`jnp.tanh(w)`: the
  primitive binds the object itself) leaves it as a constant of the traced jaxpr, with
  leaves that are the rule's own tracers. Each such constant becomes an `implicit_pack` of
  the variables of its leaves, placed before its first use, so that the evaluator sees the
  implicit array."""
  if not any(is_implicit(c) for c in consts):
    return jaxpr, consts
  defined = set(jaxpr.invars) | {v for e in jaxpr.eqns for v in e.outvars}
  constvars, new_consts = [], []
  packs = {}        # constvar holding an implicit array -> its implicit_pack equation
  for v, c in zip(jaxpr.constvars, consts):
    if not is_implicit(c):
      constvars.append(v)
      new_consts.append(c)
      continue
    leaves, tree = optree.tree_flatten(c, namespace=_NS)
    invars = []
    for leaf in leaves:
      var = getattr(leaf, "var", None) if isinstance(leaf, pe.DynamicJaxprTracer) else None
      if var is not None and var in defined:
        invars.append(var)
      elif isinstance(leaf, core.Tracer) and not leaf._trace._valid:
        raise TypeError(
            f"An implicit array ({type(c).__name__}) was passed directly to a primitive (a "
            f"jnp/lax function) inside a function traced within a custom_jvp/custom_vjp "
            f"rule; the implicit evaluator cannot see it there. Use Python operators on "
            f"it (x @ w, w.T), jnp.asarray(w), or stagecraft.implicit.materialize(w).")
      else:
        nv = core.Var(core.get_aval(leaf))
        constvars.append(nv)
        new_consts.append(leaf)
        invars.append(nv)
    packs[v] = core.JaxprEqn(invars, [v], implicit_pack_p, {"tree": tree})
  eqns = []
  for e in jaxpr.eqns:
    for a in e.invars:
      if type(a) is not Literal and a in packs:
        eqns.append(packs.pop(a))
    eqns.append(e)
  eqns.extend(packs.values())       # used only as outputs
  return jaxpr.replace(constvars=constvars, eqns=eqns), new_consts


def tangents_only(f: Callable, primals: Sequence[Any], positions: Sequence[int],
                  tangents: Sequence[Any]) -> list[Any]:
  """The tangent outputs of the flat function `f` at `primals` (values or implicit arrays)
  along `tangents` of `primals[i]` for `i` in `positions`, without the primal computation
  (it is traced, then dropped as dead code): the rest is evaluated by the implicit
  evaluator. `f` must return floating outputs only."""
  n = len(primals)

  def traced(*args):
    ps, ts = list(args[:n]), args[n:]

    def g(*ws):
      vs = list(ps)
      for i, w in zip(positions, ws):
        vs[i] = w
      return f(*vs)
    _, t_out = ad.jvp_flat(g, [ps[i] for i in positions], list(ts))
    return [ad.instantiate_zeros(t) for t in t_out]

  avals = [_leaf_aval(p) for p in primals] + [core.get_aval(t) for t in tangents]
  jaxpr, consts = pe.trace_to_jaxpr(traced, avals)
  jaxpr, _ = pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars), instantiate=True)
  return eval_jaxpr_implicit(jaxpr, consts, *primals, *tangents)


# ---------------------------------------------------------------------------
# The handler tables


_rules: dict[core.Primitive, plum.Function] = {}
_higher_order: dict[core.Primitive, Callable] = {}
_prim_index: dict[str, core.Primitive] = {}


def _scan_primitives() -> dict[str, core.Primitive]:
  for mod_name, mod in list(sys.modules.items()):
    if mod is None or not mod_name.startswith("stagecraft."):
      continue
    for v in list(vars(mod).values()):
      if isinstance(v, core.Primitive):
        _prim_index.setdefault(v.name, v)
  return _prim_index


def find_primitive(name: str) -> core.Primitive:
  """The stagecraft primitive called `name` (`"dot_general"`, `"while"`, `"jit"`).

  Raises:
    ValueError: for an unknown name, listing close matches.
  """
  index = _prim_index if name in _prim_index else _scan_primitives()
  if name in index:
    return index[name]
  close = difflib.get_close_matches(name, list(index), n=5, cutoff=0.6)
  hint = (f" Did you mean {', '.join(repr(c) for c in close)}?" if close else
          " List them with sorted(stagecraft.implicit.core._scan_primitives()).")
  raise ValueError(f"Unknown primitive name {name!r}: no stagecraft primitive has that "
                   f"name.{hint} Pass the Primitive object itself (e.g. "
                   f"stagecraft.lax.dot_general_p) or one of the known names.")


def _resolve(primitive: core.Primitive | str) -> core.Primitive:
  if isinstance(primitive, str):
    return find_primitive(primitive)
  if not isinstance(primitive, core.Primitive):
    raise TypeError(f"register: expected a stagecraft Primitive or a primitive name, got "
                    f"{type(primitive).__name__} {primitive!r}.")
  return primitive


def register(primitive: core.Primitive | str, *, precedence: int = 0) -> Callable:
  """Decorator registering a handler for `primitive` on implicit operands.

  The handler is chosen by multiple dispatch (plum) on the types of the operands, e.g.
  `def _(x: Array, w: ArrayNF4, **params)`; params arrive as keywords. A handler may take
  the primitive first (`def _(prim: Primitive, *args: ImplicitArray, **params)`), which is
  tried when no handler matches the operands alone. Among equally specific handlers the
  higher `precedence` wins. A handler returns the output (an array or an implicit array; a
  list for primitives with several results).

  Args:
    primitive: a `core.Primitive` or its name (`"dot_general"`, `"add"`, `"while"`).
    precedence: tie-breaker between handlers of equal specificity.

  Raises:
    ValueError: for an unknown primitive name (close matches are listed).

  Example:
    >>> import dataclasses, stagecraft.numpy as jnp
    >>> from stagecraft.implicit import ImplicitArray, implicit, register
    >>> @dataclasses.dataclass
    ... class Zeros(ImplicitArray):
    ...   def materialize(self):
    ...     return jnp.zeros(self.shape, self.dtype)
    >>> @register("reduce_sum")
    ... def _(x: Zeros, *, axes, **_):
    ...   return jnp.zeros([d for i, d in enumerate(x.shape) if i not in axes], x.dtype)
    >>> implicit(jnp.sum)(Zeros(shape=(1000, 1000), dtype=np.float32))
    Array(0., dtype=float32)
  """
  prim = _resolve(primitive)

  def deco(rule: Callable) -> Callable:
    fn = _rules.get(prim)
    if fn is None:
      def dispatcher(*args, **params):
        raise NotImplementedError
      dispatcher.__name__ = dispatcher.__qualname__ = f"{prim.name}_implicit_handler"
      fn = _rules[prim] = plum.Dispatcher().abstract(dispatcher)
    fn.dispatch(rule, precedence=precedence)
    return rule
  return deco


def register_higher_order(primitive: core.Primitive | str) -> Callable:
  """Decorator registering the handler of a higher-order primitive (one whose params hold
  jaxprs): `rule(prim, vals, params) -> list of outputs`, where `vals` may hold implicit
  arrays. Used for jit/cond/while/scan/custom calls here; the pmap handler goes here too.
  Handlers registered with `register` for the same primitive are tried first."""
  prim = _resolve(primitive)

  def deco(rule: Callable) -> Callable:
    _higher_order[prim] = rule
    return rule
  return deco


# ---------------------------------------------------------------------------
# The evaluator


def _lookup(prim: core.Primitive, vals: tuple) -> tuple[Callable, bool] | None:
  fn = _rules.get(prim)
  if fn is None:
    return None
  for with_prim, args in ((False, vals), (True, (prim, *vals))):
    try:
      method, _ = fn.resolve_method(args)
      return method, with_prim
    except (plum.NotFoundLookupError, plum.AmbiguousLookupError):
      continue
  return None


def _default_process(prim: core.Primitive, vals: Sequence[Any], params: dict) -> Any:
  impl = [v for v in vals if is_implicit(v)]
  names = sorted({type(v).__name__ for v in impl})
  if warn_enabled() and any(type(v).warn_on_materialize for v in impl):
    warnings.warn(f"No implicit-array handler for primitive `{prim.name}` with operand types "
                  f"({', '.join(type(v).__name__ for v in vals)}): materializing "
                  f"{', '.join(names)}. Register one with stagecraft.implicit.register("
                  f"{prim.name!r}), or silence this with warn_on_materialize=False on the "
                  f"class or {WARN_ENV}=0.", MaterializationWarning, stacklevel=4)
  arrays = [materialize_value(v) for v in vals]
  return prim.bind(*arrays, **params)


def process_primitive(prim: core.Primitive, vals: Sequence[Any], params: dict) -> Any:
  """Applies `prim` to `vals` (some may be implicit arrays): a registered handler, else the
  higher-order handler, else materialize and bind. Returns what `prim.bind` would (a list
  for multiple results)."""
  vals = tuple(vals)
  if not any(is_implicit(v) for v in vals):
    return prim.bind(*vals, **params)
  if prim not in _higher_order and any(isinstance(v, StraightThrough) for v in vals):
    return _straight_through_process(prim, vals, params)
  found = _lookup(prim, vals)
  if found is not None:
    method, with_prim = found
    d = prim.default_params
    if d:   # NB: handlers get the params a caller gave, not JAX's defaults the eqn carries
      params = {k: v for k, v in params.items() if not (k in d and v is d[k])}
    call = (lambda *a: method(prim, *a, **params)) if with_prim else (
        lambda *a: method(*a, **params))
    if implicit_depth(list(vals)) > 1:
      # Operands with implicit children: the handler runs under the implicit evaluator, so
      # its operations on those children go to their own handlers.
      leaves, d = flatten_one_implicit_layer(list(vals))
      return use_implicit(lambda *ls: call(*d.unflatten(ls)))(*leaves)
    return call(*vals)
  ho = _higher_order.get(prim)
  if ho is not None:
    return ho(prim, vals, params)
  return _default_process(prim, vals, params)


def _check_out(eqn: core.JaxprEqn, outs: list) -> None:
  for i, (v, o) in enumerate(zip(eqn.outvars, outs)):
    a = o.aval if is_implicit(o) else core.get_aval(o)
    if a.shape != v.aval.shape or a.dtype != v.aval.dtype:
      raise TypeError(
          f"The implicit-array handler for `{eqn.primitive.name}` returned output {i} of type "
          f"{a.str_short()}, but the primitive gives {v.aval.str_short()} here. A handler "
          f"must return values with the primitive's output shapes and dtypes.")


_has_pack_cache: "weakref.WeakKeyDictionary[core.Jaxpr, bool]" = weakref.WeakKeyDictionary()


def has_pack(jaxpr: core.Jaxpr) -> bool:
  """Whether `jaxpr` (or a body inside it) uses an implicit array as an array
  (`implicit_pack`)."""
  try:
    return _has_pack_cache[jaxpr]
  except (KeyError, TypeError):
    pass
  found = any(e.primitive is implicit_pack_p or any(has_pack(j) for j in core.subjaxprs(e))
              for e in jaxpr.eqns)
  try:
    _has_pack_cache[jaxpr] = found
  except TypeError:
    pass
  return found


def eval_jaxpr_implicit(jaxpr: core.Jaxpr, consts: Sequence[Any], *args: Any) -> list[Any]:
  """`core.eval_jaxpr` where values may be implicit arrays: equations with implicit operands
  go through `process_primitive`. Returns one value per outvar (implicit or not)."""
  env: dict = {}
  env.update(zip(jaxpr.constvars, consts))
  env.update(zip(jaxpr.invars, args))
  for eqn in jaxpr.eqns:
    invals = [v.val if type(v) is Literal else env[v] for v in eqn.invars]
    if eqn.primitive is implicit_pack_p:
      outs = [_pack_value(invals, eqn.params["tree"])]
    elif (eqn.primitive in _higher_order and not any(is_implicit(v) for v in invals)
          and any(has_pack(j) for j in core.subjaxprs(eqn))):
      # A body traced in a custom rule that uses an implicit array as an array.
      outs = _higher_order[eqn.primitive](eqn.primitive, invals, eqn.params)
      outs = list(outs) if eqn.primitive.multiple_results else [outs]
    elif any(is_implicit(v) for v in invals):
      outs = process_primitive(eqn.primitive, invals, eqn.params)
      outs = list(outs) if eqn.primitive.multiple_results else [outs]
      if len(outs) != len(eqn.outvars):
        raise TypeError(f"The implicit-array handler for `{eqn.primitive.name}` returned "
                        f"{len(outs)} outputs; the primitive has {len(eqn.outvars)}.")
      _check_out(eqn, outs)
    else:
      outs = eqn.primitive.bind(*invals, **eqn.params)
      outs = outs if eqn.primitive.multiple_results else [outs]
    env.update(zip(eqn.outvars, outs))
  return [v.val if type(v) is Literal else env[v] for v in jaxpr.outvars]


# ---------------------------------------------------------------------------
# use_implicit


_fn_traces: "weakref.WeakKeyDictionary[Callable, dict]" = weakref.WeakKeyDictionary()


def _leaf_aval(x: Any) -> ShapedArray:
  return x.aval if is_implicit(x) else core.get_aval(x)


def _trace_fn(fn: Callable, in_tree, avals: list[ShapedArray]):
  key = (in_tree, tuple(avals), config.state_key)
  try:
    per = _fn_traces.get(fn)
  except TypeError:
    per = None
  if per is not None and key in per:
    return per[key]
  box = []

  def flat_fun(*flat):
    args, kwargs = tree_util.tree_unflatten(in_tree, flat)
    out = fn(*args, **kwargs)
    # NB: implicit outputs are flattened into their children (rebuilt after evaluation).
    leaves, out_tree = optree.tree_flatten(out, namespace=_NS)
    for i, leaf in enumerate(leaves):
      if not (isinstance(leaf, core.Tracer) or core.valid_array_type(leaf)):
        raise TypeError(f"use_implicit: {getattr(fn, '__name__', 'fn')} returned a "
                        f"{type(leaf).__name__} at output leaf {i}; return arrays or "
                        f"pytrees of arrays.")
    box.append(out_tree)
    return leaves

  jaxpr, consts = pe.trace_to_jaxpr(flat_fun, avals)
  result = (jaxpr, list(consts), box[0])
  if not has_tracer(consts):
    try:
      _fn_traces.setdefault(fn, {})[key] = result
    except TypeError:
      pass
  return result


def use_implicit(fn: Callable) -> Callable:
  """Wraps `fn` so that implicit arrays among its arguments (anywhere in their pytrees) are
  handled by the registered handlers instead of being materialized up front.

  Args:
    fn: a function of arrays, implicit arrays and pytrees of them, returning arrays.

  Returns:
    `f(*args, **kwargs)` with `fn`'s outputs; an output that a handler produced as an implicit
    array stays one. Tracing of `fn` is cached per (argument structure, avals); works inside
    and outside `jit`, `grad`, `vmap`.

  Raises:
    MaterializationError: when a fallback materialization fails.
    TypeError: when a handler returns a value of the wrong shape or dtype.
  """
  def implicit_f(*args, **kwargs):
    leaves, in_tree = optree.tree_flatten((args, kwargs), namespace=_NS, is_leaf=is_implicit)
    if not any(is_implicit(x) for x in leaves):
      return fn(*args, **kwargs)
    avals = [_leaf_aval(x) for x in leaves]
    jaxpr, consts, out_tree = _trace_fn(fn, in_tree, avals)
    outs = eval_jaxpr_implicit(jaxpr, consts, *leaves)
    return tree_util.tree_unflatten(out_tree, outs)
  implicit_f.__name__ = getattr(fn, "__name__", "implicit_f")
  implicit_f.__doc__ = getattr(fn, "__doc__", None)
  implicit_f.__wrapped__ = fn
  return implicit_f


implicit = use_implicit


# ---------------------------------------------------------------------------
# Straight-through estimator


@dataclasses.dataclass
class StraightThrough(ImplicitArray):
  """`ste(fn)(x)` when `fn` returns an implicit array: stands for `base` (the implicit
  array `fn(x)`, its leaves gradient-stopped) and differentiates as `x` (the tangent of
  `x` is its tangent: the straight-through estimator).

  Every primitive applied to it under `implicit` runs on `base` (with `base`'s handlers, so
  an `ArrayNF4` keeps its NF4 matmul) and adds the tangent the primitive has at the dense
  point `materialize(base)` along `x`'s tangent, through `custom_jvp`: for a matmul
  `lhs @ W` that is `lhs @ dx`, a dense gradient for `x` without materializing `W`.
  Outputs that the base's handler returns implicit stay `StraightThrough`.
  """
  base: Any
  x: Any

  materialize_nested_under_implicit: ClassVar[bool] = False

  def materialize(self):
    return _straight_dense(self.x, self.base)

  def unstack(self) -> "StraightThrough | None":
    b = self.base.unstack()
    if b is None:
      return None
    return StraightThrough(b, self.x, shape=b.shape, dtype=b.dtype)

  @classmethod
  def stack(cls, stacked: "StraightThrough", length: int) -> ImplicitArray:
    b = type(stacked.base).stack(stacked.base, length)
    return StraightThrough(b, stacked.x, shape=b.shape, dtype=b.dtype)


def _cast_tangent(t, aval: ShapedArray):
  if core.get_aval(t).dtype != aval.dtype:
    t = convert_element_type(t, aval.dtype)
  return t


@custom_jvp
def _straight_dense(x, base):
  return materialize_value(base)


@_straight_dense.defjvp
def _straight_dense_jvp(primals, tangents):
  x, base = primals
  dx, _ = tangents
  out = _straight_dense(x, base)
  return out, _cast_tangent(dx, core.get_aval(out))


@custom_jvp
def _straight_identity(x, y):
  return y


@_straight_identity.defjvp
def _straight_identity_jvp(primals, tangents):
  x, y = primals
  dx, _ = tangents
  return y, _cast_tangent(dx, core.get_aval(y))


def _straight_carrier(prim: core.Primitive, params: dict, positions: tuple,
                      out_avals: list[ShapedArray]) -> custom_jvp:
  """`carrier(xs, vals) -> zeros` (one per entry of `out_avals`) whose tangent is that of
  `prim` at `vals` (the straight-through operands replaced by their bases) along the
  tangents of `xs`, the straight-through operands' `x` at `positions`."""
  multiple = prim.multiple_results

  def carrier(xs, vals):
    return [lax_full(a.shape, 0, a.dtype) for a in out_avals]

  cj = custom_jvp(carrier)

  def carrier_jvp(primals, tangents):
    xs, vals = primals
    dxs, _ = tangents
    outs = cj(xs, vals)
    live = [(p, dx) for p, dx in zip(positions, dxs) if type(dx) is not SymbolicZero]
    if not live:
      return outs, [SymbolicZero(ad.tangent_aval(a)) for a in out_avals]
    dws = [_cast_tangent(dx, vals[p].aval) for p, dx in live]

    def f(*vs):
      out = prim.bind(*vs, **params)
      out = list(out) if multiple else [out]
      return [o for o in out if dtypes.is_inexact(core.get_aval(o).dtype)]
    ts = tangents_only(f, list(vals), [p for p, _ in live], dws)
    return outs, [t if not is_implicit(t) else materialize_value(t) for t in ts]

  cj.defjvp(carrier_jvp, symbolic_zeros=True)
  return cj


def _straight_through_process(prim: core.Primitive, vals: tuple, params: dict) -> Any:
  positions = tuple(i for i, v in enumerate(vals) if isinstance(v, StraightThrough))
  inner = list(vals)
  for i in positions:
    inner[i] = vals[i].base
  outs = process_primitive(prim, inner, params)
  if not any(isinstance(vals[i].x, core.Tracer) for i in positions):
    return outs             # a concrete `x` has no tangent: nothing to carry
  outs = list(outs) if prim.multiple_results else [outs]
  avals = [_leaf_aval(o) for o in outs]
  diff = [dtypes.is_inexact(a.dtype) for a in avals]
  if not any(diff):
    return outs if prim.multiple_results else outs[0]
  carrier = _straight_carrier(prim, params, positions, [a for a, d in zip(avals, diff) if d])
  carried = iter(carrier([vals[i].x for i in positions], inner))
  new = []
  for o, a, d in zip(outs, avals, diff):
    if not d:
      new.append(o)
      continue
    c = next(carried)
    if is_implicit(o):
      new.append(StraightThrough(o, c, shape=a.shape, dtype=a.dtype))
    else:
      new.append(lax_add(o, c))
  return new if prim.multiple_results else new[0]


def ste(fn: Callable) -> Callable:
  """Straight-through estimator: `ste(fn)(x, *args)` computes `fn(x, *args)` and
  differentiates as the identity in `x` (its tangent is `x`'s; no gradient flows through
  `fn` nor to `args`/`kwargs`). For quantization-aware training: `w_q = ste(fake_quant)(w)`.

  When `fn` returns an implicit array (`ste(lambda w: ArrayNF4.quantize(w))(w)`), the
  result is a `StraightThrough` wrapping it: used under `implicit`, its operations run on
  the implicit array's handlers (the forward matmul stays NF4) and the gradient reaching `w`
  is the dense gradient with respect to the array it stands for.

  Args:
    fn: `fn(x, *args, **kwargs)`, returning an array or an implicit array of `x`'s shape
      (or a pytree of them).

  Raises:
    TypeError: when an output of `fn` does not have `x`'s shape.
  """

  def wrapped(x, *args, **kwargs):
    x_aval = core.get_aval(x)
    y = fn(stop_gradient(x), *args, **kwargs)

    def one(leaf):
      aval = _leaf_aval(leaf)
      if aval.shape != x_aval.shape:
        raise TypeError(f"ste({getattr(fn, '__name__', 'fn')}): the function returned "
                        f"{aval.str_short()} for an input of {x_aval.str_short()}; the "
                        f"straight-through estimator passes the gradient of each output to "
                        f"the input unchanged, so they must have the same shape.")
      if is_implicit(leaf):
        base = stop_gradient(leaf)
        return StraightThrough(base, x, shape=aval.shape, dtype=aval.dtype)
      return _straight_identity(x, stop_gradient(leaf))
    return tree_map_with_implicit(one, y)
  wrapped.__name__ = f"ste({getattr(fn, '__name__', 'fn')})"
  wrapped.__wrapped__ = fn
  return wrapped


# ---------------------------------------------------------------------------
# Stacks of implicit arrays (scan's implicit xs and ys)


@dataclasses.dataclass
class Stacked(ImplicitArray):
  """A stack of `n` implicit arrays of one structure (`tree`), stored leaf by leaf:
  `leaves[j]` is leaf `j` of every slice, stacked on a new leading axis. Stands for the
  array of shape `(n, *slice_shape)`; `lax.scan` over it (under `implicit`) gives the body
  each slice as the implicit array it is. Build one with `stack([...])`; `scan` returns
  implicit `ys` of classes without a natural stacked layout as one."""
  leaves: Any
  tree: Any = aux_field(default=None)

  materialize_nested_under_implicit: ClassVar[bool] = False

  @classmethod
  def from_stacked_leaves(cls, stacked: ImplicitArray, length: int) -> "Stacked":
    leaves, tree = optree.tree_flatten(stacked, namespace=_NS)
    return cls(list(leaves), tree=tree, shape=(int(length), *stacked.shape),
               dtype=stacked.dtype)

  def unstack(self) -> ImplicitArray:
    return tree_util.tree_unflatten(self.tree, list(self.leaves))

  def materialize(self):
    tree = self.tree
    return vmap(lambda *ls: materialize_value(tree_util.tree_unflatten(tree, list(ls))))(
        *self.leaves)


def stack(arrays: Sequence[ImplicitArray]) -> ImplicitArray:
  """Stacks implicit arrays of one class, structure and aux data on a new leading axis:
  an implicit array of shape `(len(arrays), *shape)` (the class's own layout where it has
  one, e.g. the quantized arrays; `Stacked` otherwise), for `lax.scan` over its slices.

  Raises:
    TypeError: for an empty list or arrays of different structure or aux data.
  """
  arrays = list(arrays)
  if not arrays or not all(is_implicit(a) for a in arrays):
    raise TypeError("stagecraft.implicit.stack: expected a non-empty sequence of implicit "
                    "arrays.")
  flat = [optree.tree_flatten(a, namespace=_NS) for a in arrays]
  tree = flat[0][1]
  for i, (_, t) in enumerate(flat[1:], 1):
    if t != tree:
      raise TypeError(f"stagecraft.implicit.stack: array {i} has structure {t}, array 0 "
                      f"has {tree}: stacked implicit arrays must share class, children "
                      f"and aux data.")
  leaves = [np_stack([ls[j] for ls, _ in flat]) for j in range(tree.num_leaves)]
  stacked = tree_util.tree_unflatten(tree, leaves)
  return type(arrays[0]).stack(stacked, len(arrays))
