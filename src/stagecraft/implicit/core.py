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

Design after eformer's jaximus and quax (Kidger): one multiple-dispatch table per primitive.
"""
from __future__ import annotations

import abc
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
from stagecraft.interpreters import partial_eval as pe
# NB: every module that defines primitives, so that handlers can name any of them.
from stagecraft import ad_checkpoint, custom_dce, lax  # noqa: F401
from stagecraft.api import eval_shape
from stagecraft.custom_derivatives import custom_vjp
from stagecraft.lax import convert_element_type

_NS = tree_util.NAMESPACE

__all__ = [
    "ImplicitArray", "aux_field", "register", "register_higher_order", "use_implicit",
    "implicit", "materialize", "ste", "MaterializationError", "MaterializationWarning",
    "tree_map_with_implicit", "tree_flatten_with_implicit", "tree_leaves_with_implicit",
    "tree_structure_with_implicit", "flatten_one_implicit_layer", "implicit_depth",
    "find_primitive",
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
    ShapedArray(f32[3])
  """
  shape: tuple[int, ...] | None = aux_field(kw_only=True, default=None)
  dtype: Any = aux_field(kw_only=True, default=None)

  warn_on_materialize: ClassVar[bool] = True
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

  @classmethod
  def _tree_unflatten(cls, aux, children):
    obj = object.__new__(cls)
    kids, auxs = iter(children), iter(aux)
    for name, is_aux in fields(cls):
      object.__setattr__(obj, name, next(auxs) if is_aux else next(kids))
    return obj


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
    out = eval_shape(lambda *ls: materialize_value(optree.tree_unflatten(treedef, ls),
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
    if any(is_implicit(k) for k in tree_leaves_with_implicit(kids)):
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
  found = _lookup(prim, vals)
  if found is not None:
    method, with_prim = found
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


def eval_jaxpr_implicit(jaxpr: core.Jaxpr, consts: Sequence[Any], *args: Any) -> list[Any]:
  """`core.eval_jaxpr` where values may be implicit arrays: equations with implicit operands
  go through `process_primitive`. Returns one value per outvar (implicit or not)."""
  env: dict = {}
  env.update(zip(jaxpr.constvars, consts))
  env.update(zip(jaxpr.invars, args))
  for eqn in jaxpr.eqns:
    invals = [v.val if type(v) is Literal else env[v] for v in eqn.invars]
    if any(is_implicit(v) for v in invals):
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
    args, kwargs = optree.tree_unflatten(in_tree, flat)
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
  if not any(isinstance(c, core.Tracer) for c in consts):
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
    return optree.tree_unflatten(out_tree, outs)
  implicit_f.__name__ = getattr(fn, "__name__", "implicit_f")
  implicit_f.__doc__ = getattr(fn, "__doc__", None)
  implicit_f.__wrapped__ = fn
  return implicit_f


implicit = use_implicit


# ---------------------------------------------------------------------------
# Straight-through estimator


def ste(fn: Callable) -> Callable:
  """Straight-through estimator: `ste(fn)(x, *args)` computes `fn(x, *args)` and its VJP
  passes the cotangent to `x` unchanged (implicit cotangents are materialized). For
  quantization-aware training: `w_q = ste(fake_quantize)(w)`.

  Args:
    fn: `fn(x, *args, **kwargs)`, returning an array of `x`'s shape and dtype (an implicit
      array is materialized in the backward pass). `args`/`kwargs` are constants (no
      gradient flows to them).
  """

  def wrapped(x, *args, **kwargs):
    @custom_vjp
    def f(x):
      return fn(x, *args, **kwargs)

    def fwd(x):
      return f(x), None

    def bwd(_, g):
      g = tree_map_with_implicit(materialize_value, g)
      return (g,)
    f.defvjp(fwd, bwd)
    return f(x)
  wrapped.__name__ = f"ste({getattr(fn, '__name__', 'fn')})"
  wrapped.__wrapped__ = fn
  return wrapped
