"""Pytrees: JAX's JAX's `tree_util` names and semantics on top of `optree`.

Containers (tuples, lists, dicts, namedtuples, `None` and registered classes) are *nodes*;
everything else is a *leaf*. As in JAX, `None` is a node with no children, dict keys are sorted,
and every registration made here lives in optree's `NAMESPACE` (so it does not leak into other
optree users).

Staged leaves (`register_staged_leaf`; typed PRNG key arrays) are leaves for the functions
of this module, as JAX's key arrays are (`tree_leaves(key) == [key]`), but nodes over their
array data in `NAMESPACE`, where the transformations (`jit`, `vmap`, `grad`, `scan`, ...)
flatten with optree directly: they trace the data and rebuild the staged leaf around the
traced value. A staged leaf has exactly one child, so leaf counts and key paths agree
between the two views; `tree_flatten_traced`/`tree_map_traced` give the transformations'
view. `tree_flatten`, `tree_unflatten` and `tree_map` call optree's C++ flattener
directly; key paths are built only by the `*_with_path` functions.

  >>> tree = {'b': [1, (2, None)], 'a': 3}
  >>> leaves, treedef = tree_flatten(tree)
  >>> leaves
  [3, 1, 2]
  >>> [keystr(p) for p, _ in tree_leaves_with_path(tree)]
  ["['a']", "['b'][0]", "['b'][1][0]"]
"""
from __future__ import annotations

import collections
import dataclasses
import difflib
import functools
import operator
import textwrap
import warnings
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar

import atexit
import sys
import threading


def _import_optree() -> Any:
  """Imports optree, deferring its exit handlers to the interpreter's real exit.

  optree's C++ module registers exit handlers (`atexit`) that clear its type registry;
  once cleared, tuples, lists and dicts flatten as leaves and every transformation breaks.
  A program may run the exit handlers while it still runs (chex's own tests call
  `atexit._run_exitfuncs()` to see its uninspected-assertion report): JAX's pytrees survive
  that, so ours must too. The handlers optree registers while it is imported here are
  replaced by one that runs them only when the main thread has stopped (the interpreter's
  real exit: `threading._shutdown` runs before the exit handlers). When optree was
  imported before stagecraft, its handlers are left as they are."""
  if "optree" in sys.modules:
    import optree
    return optree
  captured = []
  register = atexit.register

  def capture(fn, *args, **kwargs):
    captured.append((fn, args, kwargs))
    return register(fn, *args, **kwargs)

  atexit.register = capture
  try:
    import optree
  finally:
    atexit.register = register
  for fn, _, _ in captured:
    atexit.unregister(fn)

  def at_exit():
    if threading.main_thread().is_alive():
      return   # NB: exit handlers run by hand, not the interpreter exiting
    for fn, args, kwargs in reversed(captured):
      fn(*args, **kwargs)

  if captured:
    atexit.register(at_exit)
  return optree


optree = _import_optree()
from optree import _C  # noqa: E402
from optree import accessors as _acc  # noqa: E402

__all__ = [
    "NAMESPACE", "PyTreeDef", "SequenceKey", "DictKey", "GetAttrKey", "FlattenedIndexKey",
    "KeyEntry", "KeyPath", "keystr", "tree_flatten", "tree_unflatten", "tree_leaves",
    "tree_structure", "tree_map", "tree_flatten_with_path", "tree_leaves_with_path",
    "tree_map_with_path", "tree_reduce", "tree_all", "tree_transpose", "treedef_children",
    "treedef_is_leaf", "all_leaves", "register_pytree_node", "register_pytree_with_keys",
    "register_pytree_node_class", "register_pytree_with_keys_class", "register_dataclass",
    "register_static", "Partial", "flatten_one_level", "flatten_one_level_with_keys",
    "is_tree_node", "tree_broadcast", "tree_reduce_associative", "treedef_tuple",
    "PyTreeRegistry", "default_registry", "registration_hooks", "register_staged_leaf",
    "tree_flatten_traced", "tree_map_traced", "staged_leaf_data", "staged_types", "spec_of",
    "is_treedef",
]

T = TypeVar("T")
NAMESPACE = "stagecraft"
_NONE_IS_LEAF = False
#: The staged-leaf classes (`register_staged_leaf`).
_staged_types: set[type] = set()
#: The same set, public: a cheap `type(x) in staged_types` test for library code that
#: accepts typed key arrays (`lax.utils.KEY_TYPES`).
staged_types = _staged_types


def _is_staged(x: Any) -> bool:
  return type(x) in _staged_types


def _leaf(is_leaf: Callable[[Any], bool] | None) -> Callable[[Any], bool]:
  """`is_leaf` that also takes staged leaves as leaves (the users' view of a tree)."""
  if is_leaf is None:
    return _is_staged
  return lambda x: type(x) in _staged_types or is_leaf(x)

class PyTreeDef:
  """The structure of a pytree, as JAX's `PyTreeDef`: what `tree_flatten`, `tree_structure`
  and the other public functions here return. It prints as JAX's (`PyTreeDef([*, {'a': *}])`),
  compares and hashes by structure, pickles, and has JAX's methods: `num_leaves`,
  `num_nodes`, `unflatten(leaves)`, `flatten_up_to(tree)`, `children()`, `compose(inner)`,
  `node_data()`, `walk(f_node, f_leaf, leaves)` and `from_node_data_and_children`.

  It holds an optree `PyTreeSpec` (`spec_of(treedef)`), which the transformations use
  directly; optree's other methods (`kind`, `type`, `entries()`, `is_leaf()`, ...) are
  reached through it. The functions here accept either.
  """
  __slots__ = ("spec",)

  def __init__(self, spec: "PyTreeDef | optree.PyTreeSpec"):
    if type(spec) is PyTreeDef:
      spec = spec.spec
    elif not isinstance(spec, optree.PyTreeSpec):
      raise TypeError(f"PyTreeDef: expected a tree structure (from tree_structure or "
                      f"tree_flatten), got {type(spec).__name__}.")
    object.__setattr__(self, "spec", spec)

  def __setattr__(self, name, value):
    raise AttributeError(f"PyTreeDef is immutable: cannot set {name!r}.")

  @property
  def num_leaves(self) -> int:
    return self.spec.num_leaves

  @property
  def num_nodes(self) -> int:
    return self.spec.num_nodes

  def unflatten(self, leaves: Iterable[Any]) -> Any:
    """The pytree of this structure with `leaves` (dicts with sorted keys, as JAX's)."""
    return tree_unflatten(self.spec, leaves)

  def flatten_up_to(self, xs: Any) -> list:
    """The subtrees of `xs` at this structure's leaves.

    Raises:
      ValueError: this structure is not a prefix of `xs`'s, with JAX's message for the
        first node (depth first) that differs ("List arity mismatch: 1 != 2; list: [7].",
        "Expected tuple, got [7].", "Dict key mismatch; ...", "Custom node type
        mismatch: ...").
    """
    try:
      return self.spec.flatten_up_to(xs)
    except ValueError:
      _up_to_error(self.spec, xs)
      raise

  def children(self) -> list["PyTreeDef"]:
    """The structures of the root node's children."""
    return [PyTreeDef(c) for c in self.spec.children()]

  def compose(self, inner: "PyTreeDef") -> "PyTreeDef":
    """This structure with `inner` at each of its leaves."""
    return PyTreeDef(self.spec.compose(spec_of(inner)))

  def node_data(self) -> tuple[type, Any] | None:
    """`(node type, aux data)` of the root node, as JAX's (a dict's aux data is its sorted
    keys, a list); None for a leaf."""
    spec = self.spec
    if spec.is_leaf():
      return None
    if spec.type is type(None):
      return (type(None), None)
    if spec.type is dict:
      return (dict, list(spec.entries()))
    if spec.kind == optree.PyTreeKind.NAMEDTUPLE:
      return (spec.type, None)
    if spec.kind == optree.PyTreeKind.ORDEREDDICT:
      return (spec.type, tuple(spec.entries()))
    if spec.kind == optree.PyTreeKind.DEFAULTDICT:
      factory = spec.one_level().unflatten([0] * spec.num_children).default_factory
      return (spec.type, (factory, tuple(spec.entries())))
    node = spec.one_level().unflatten([0] * spec.num_children)
    meta = optree.tree_flatten_one_level(node, none_is_leaf=_NONE_IS_LEAF,
                                         namespace=NAMESPACE)[1]
    return (spec.type, meta)

  def walk(self, f_node: Callable[[tuple, Any], Any], f_leaf: Callable[[Any], Any] | None,
           leaves: Iterable[Any]) -> Any:
    """Folds the structure over `leaves`: `f_leaf(leaf)` at each leaf (None: the leaf
    itself), then `f_node(children_results, aux_data)` at each node, bottom up."""
    return self.spec.walk(leaves, lambda typ, data, kids: f_node(kids, data), f_leaf)

  @staticmethod
  def from_node_data_and_children(registry: Any, node_data: tuple[type, Any],
                                  children: Iterable["PyTreeDef"]) -> "PyTreeDef":
    """The structure whose root node has `node_data` (`(type, aux data)`, as `node_data()`
    returns it) and whose children have the structures `children`.

    Raises:
      ValueError: `node_data`'s type is not a pytree node type."""
    del registry   # one registry: stagecraft's NAMESPACE
    typ, aux = node_data
    kids = [spec_of(c) for c in children]
    marks = [object() for _ in kids]
    if typ is type(None):
      node = None
    elif typ in (list, tuple):
      node = typ(marks)
    elif typ is dict:
      node = dict(zip(aux, marks))
    elif hasattr(typ, "_fields") and issubclass(typ, tuple):
      node = typ(*marks)
    else:
      entry = optree.register_pytree_node.get(typ, namespace=NAMESPACE)
      if entry is None:
        raise ValueError(f"PyTreeDef.from_node_data_and_children: {typ} is not a "
                         f"registered pytree node type.")
      node = entry.unflatten_func(aux, marks)
    ids = {id(m) for m in marks}
    root = _C.flatten(node, lambda x: id(x) in ids, _NONE_IS_LEAF, NAMESPACE)[1]
    return PyTreeDef(_with_children(root, kids) if kids else root)

  def __eq__(self, other):
    if type(other) is PyTreeDef:
      return self.spec == other.spec
    if isinstance(other, optree.PyTreeSpec):
      return self.spec == other
    return NotImplemented

  def __ne__(self, other):
    eq = self.__eq__(other)
    return eq if eq is NotImplemented else not eq

  def __hash__(self):
    return hash(self.spec)

  def __repr__(self):
    return treedef_str(self.spec)

  __str__ = __repr__

  def __reduce__(self):
    return (PyTreeDef, (self.spec,))

  def __getattr__(self, name: str) -> Any:
    if name.startswith("__") or name == "spec":
      raise AttributeError(name)
    return getattr(self.spec, name)


def _with_children(root: optree.PyTreeSpec, kids: list) -> optree.PyTreeSpec:
  """`root` (one level, its children leaves) with the structures `kids` at its leaves."""
  it = iter(kids)
  return root.transform(None, lambda _: next(it))


class TreeParam:
  """A treedef held in a jaxpr param (`in_tree`, `out_tree` of custom_vmap and
  custom_partitioning equations): compares and hashes as the treedef, prints as JAX's
  `PyTreeDef(...)`."""
  __slots__ = ("treedef",)

  def __init__(self, treedef):
    self.treedef = treedef

  def __eq__(self, other):
    return type(other) is TreeParam and self.treedef == other.treedef

  def __hash__(self):
    return hash(self.treedef)

  def __str__(self):
    return treedef_str(self.treedef)

  __repr__ = __str__


def spec_of(treedef: "PyTreeDef | optree.PyTreeSpec") -> optree.PyTreeSpec:
  """The optree `PyTreeSpec` of a `PyTreeDef` (a `PyTreeSpec` is returned as it is)."""
  return treedef.spec if type(treedef) is PyTreeDef else treedef


def is_treedef(x: Any) -> bool:
  """Whether `x` is a tree structure: a `PyTreeDef` or an optree `PyTreeSpec`."""
  return type(x) is PyTreeDef or isinstance(x, optree.PyTreeSpec)


def treedef_str(treedef: PyTreeDef) -> str:
  """`treedef` as JAX prints a PyTreeDef, for messages: `PyTreeDef((*, [*]))`,
  `PyTreeDef(CustomNode(namedtuple[Point], [*, *]))` (optree's own repr says `PyTreeSpec`
  and names custom nodes differently)."""
  return f"PyTreeDef({_node_str(spec_of(treedef))})"


def _node_str(t: PyTreeDef) -> str:
  kind = t.kind
  if kind == optree.PyTreeKind.LEAF:
    return "*"
  if kind == optree.PyTreeKind.NONE:
    return "None"
  kids = [_node_str(c) for c in t.children()]
  if kind == optree.PyTreeKind.TUPLE:
    return "(" + ", ".join(kids) + ("," if len(kids) == 1 else "") + ")"
  if kind == optree.PyTreeKind.LIST:
    return "[" + ", ".join(kids) + "]"
  data = t.entries()
  if kind in (optree.PyTreeKind.DEFAULTDICT, optree.PyTreeKind.CUSTOM):
    # NB: optree keeps a node's aux data to itself: rebuild the tree around placeholder
    # leaves and flatten its root one level.
    data = "..."   # a node type whose constructor refuses placeholders
    # NB: bare `object()`s where 0s are refused (a class validating its leaves, as JAX's
    # `StatefulPRNG`, lets through such placeholders, as JAX's let through its sentinel)
    for fill in (0, object()):
      try:
        node = t.unflatten([fill] * t.num_leaves)
        data = optree.tree_flatten_one_level(node, none_is_leaf=True, namespace=NAMESPACE)[1]
        break
      except Exception:
        pass
  if kind == optree.PyTreeKind.DICT:
    return "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(data, kids)) + "}"
  if kind == optree.PyTreeKind.NAMEDTUPLE:
    head = f"namedtuple[{t.type.__name__}]"
  elif kind == optree.PyTreeKind.ORDEREDDICT:
    head = f"OrderedDict[{tuple(data)!r}]"
  elif kind == optree.PyTreeKind.DEFAULTDICT:
    head = (f"defaultdict[({data[0]!r}, {tuple(data[1])!r})]" if isinstance(data, tuple)
            else f"defaultdict[{data}]")
  else:
    head = f"{t.type.__name__}[{data}]"
  return f"CustomNode({head}, [{', '.join(kids)}])"


def equality_errors_pytreedef(expected: PyTreeDef, given: PyTreeDef, path: tuple = ()):
  """Where two tree structures differ, as JAX's `equality_errors_pytreedef` reports it:
  yields `(path, expected node, given node, why)`, a path being a tuple of
  `(node type, entry)` pairs (`node_path_str` writes it as JAX's `keystr`)."""
  expected, given = spec_of(expected), spec_of(given)
  if expected.is_leaf() or given.is_leaf() or expected.type is not given.type:
    if not (expected.is_leaf() and given.is_leaf()):
      yield path, _node_name(expected), _node_name(given), "their Python types differ"
    return
  n1, n2 = expected.num_children, given.num_children
  if expected.type in (tuple, list) and n1 != n2:
    kind = expected.type.__name__
    yield path, f"{kind} of length {n1}", f"{kind} of length {n2}", "the lengths do not match"
    return
  if n1 != n2:
    why = "the numbers of children do not match"
    if issubclass(expected.type, dict):
      diff = set(expected.entries()) ^ set(given.entries())
      why += f", with the symmetric difference of key sets: {diff}"
    yield (path, f"{expected.type} with {_children_word(n1)}",
           f"{given.type} with {_children_word(n2)}", why)
    return
  if list(expected.entries()) != list(given.entries()):
    yield (path, f"{expected.type} with pytree metadata {tuple(expected.entries())}",
           f"{given.type} with pytree metadata {tuple(given.entries())}",
           "the pytree node metadata does not match")
    return
  found = False
  for entry, c1, c2 in zip(expected.entries(), expected.children(), given.children()):
    for err in equality_errors_pytreedef(c1, c2, path + ((expected.type, entry),)):
      found = True
      yield err
  if not found and expected != given:   # same children: the node's own data differs
    yield path, str(expected.type), str(given.type), "the pytree node metadata does not match"


def node_path_str(path: tuple) -> str:
  """A path of `equality_errors_pytreedef` as JAX's `keystr` writes it: `[0]['w'].a`."""
  out = ""
  for node_type, entry in path:
    fields = getattr(node_type, "_fields", None)
    if fields is not None and issubclass(node_type, tuple):
      out += f".{fields[entry] if isinstance(entry, int) else entry}"
    else:
      out += f"[{entry!r}]"
  return out


def _node_name(spec: PyTreeDef) -> str:
  return "pytree leaf" if spec.is_leaf() else str(spec.type)


def _children_word(n: int) -> str:
  return f"{n} child" if n <= 1 else f"{n} children"


# ---------------------------------------------------------------------------
# Key path entries (as JAX's tree_util's).

@dataclasses.dataclass(frozen=True, slots=True)
class SequenceKey:
  """Child `idx` of a list or tuple; prints as `[0]`."""
  idx: int

  def __str__(self):
    return f"[{self.idx!r}]"


@dataclasses.dataclass(frozen=True, slots=True)
class DictKey:
  """Entry `key` of a dict; prints as `['a']`."""
  key: Hashable

  def __str__(self):
    return f"[{self.key!r}]"


@dataclasses.dataclass(frozen=True, slots=True)
class GetAttrKey:
  """Attribute `name` (namedtuple fields, dataclass fields); prints as `.name`."""
  name: str

  def __str__(self):
    return f".{self.name}"


@dataclasses.dataclass(frozen=True, slots=True)
class FlattenedIndexKey:
  """Child number `key` of a custom node registered without keys; prints as `[<flat index 0>]`."""
  key: int

  def __str__(self):
    return f"[<flat index {self.key}>]"

  def __hash__(self):   # NB: differs from SequenceKey(i)'s, as JAX's
    return hash((FlattenedIndexKey, self.key))


KeyEntry = Any      # one of the key classes above, or any key a registration returns
KeyPath = tuple     # tuple[KeyEntry, ...]


def keystr(keys: KeyPath, *, simple: bool = False, separator: str = "") -> str:
  """Joins the string forms of the keys of a key path.

  Args:
    keys: a key path, as returned by `tree_flatten_with_path`.
    simple: print each key bare (`a/0/w` with `separator='/'`) instead of `['a'][0].w`.
    separator: put between keys.

  Returns:
    e.g. `keystr((DictKey('a'), SequenceKey(0), GetAttrKey('w')))` is `"['a'][0].w"`.
  """
  return separator.join(map(_simple_keystr if simple else str, keys))


def _simple_keystr(k) -> str:
  if isinstance(k, SequenceKey):
    return str(k.idx)
  if isinstance(k, DictKey):
    return str(k.key)
  if isinstance(k, GetAttrKey):
    return k.name
  if isinstance(k, FlattenedIndexKey):
    return str(k.key)
  return str(k)


class _KeyedEntry(optree.PyTreeEntry):
  """optree path entry of a custom node registered with keys: `.entry` is the user's key."""
  __slots__ = ()


def _to_key(e: optree.PyTreeEntry) -> KeyEntry:
  """Converts one optree path entry to a JAX-style key."""
  if isinstance(e, _KeyedEntry):
    return e.entry
  if isinstance(e, (_acc.NamedTupleEntry, _acc.StructSequenceEntry)):
    return GetAttrKey(e.field)
  if isinstance(e, _acc.SequenceEntry):
    return SequenceKey(e.entry)
  if isinstance(e, _acc.MappingEntry):
    return DictKey(e.entry)
  if isinstance(e, _acc.DataclassEntry):
    return GetAttrKey(e.name)
  if isinstance(e, _acc.GetAttrEntry):
    return GetAttrKey(e.name)
  return FlattenedIndexKey(e.entry)


def _to_path(accessor) -> KeyPath:
  return tuple(map(_to_key, accessor))


# ---------------------------------------------------------------------------
# Flatten / unflatten / map.

#: Treedefs whose dict keys were found sortable (bounded: cleared when full).
_sortable_specs: dict = {}
_SORTABLE_SPECS_MAX = 4096


def _check_sortable(spec):
  """Raises JAX's ValueError when a dict of `spec` has keys that cannot be sorted together
  (`{1: 1.0, "a": 2.0}`); returns `spec`. optree orders such keys by type instead, JAX's
  flatten raises. Checked once per distinct treedef (a treedef whose auxiliary data cannot
  be hashed is not checked); the public flatten functions check, the transformations'
  internal flattening does not."""
  try:
    if spec in _sortable_specs:
      return spec
  except TypeError:   # unhashable auxiliary data of a registered node
    return spec
  stack = [spec]
  while stack:
    node = stack.pop()
    if node.kind in (optree.PyTreeKind.DICT, optree.PyTreeKind.DEFAULTDICT):
      try:
        sorted(node.entries())
      except TypeError:
        raise ValueError("Comparator raised exception while sorting pytree dictionary "
                         "keys.") from None
    if node.num_nodes > 1:
      stack.extend(node.children())
  if len(_sortable_specs) >= _SORTABLE_SPECS_MAX:
    _sortable_specs.clear()
  _sortable_specs[spec] = None
  return spec


def tree_flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None):
  """Flattens `tree` into its leaves (left to right, dict keys sorted) and its structure.

  Args:
    tree: a pytree.
    is_leaf: optional predicate; a subtree for which it returns True is taken as a leaf.

  Returns:
    `(leaves, treedef)`.
  """
  leaves, spec = _C.flatten(tree, _leaf(is_leaf), _NONE_IS_LEAF, NAMESPACE)
  return leaves, PyTreeDef(_check_sortable(spec))


def _sorted_dict_node(node: PyTreeDef) -> PyTreeDef:
  """A one-level `node` whose dict (or defaultdict) rebuilds with its keys in sorted order."""
  t = node.type
  if t is not dict and t is not collections.defaultdict:
    return node
  leaf = optree.treespec_leaf(none_is_leaf=_NONE_IS_LEAF, namespace=NAMESPACE)
  children = dict.fromkeys(node.entries(), leaf)    # entries(): the sorted keys
  if t is dict:
    return optree.treespec_dict(children, none_is_leaf=_NONE_IS_LEAF, namespace=NAMESPACE)
  factory = node.unflatten([None] * node.num_children).default_factory
  return optree.treespec_defaultdict(factory, children, none_is_leaf=_NONE_IS_LEAF,
                                     namespace=NAMESPACE)


@functools.lru_cache(maxsize=4096)
def canonical_treedef(treedef: PyTreeDef) -> PyTreeDef:
  """`treedef` with every dict rebuilt in sorted key order, as JAX's treedefs rebuild them
  (optree's remember the insertion order of the dict they were made from). Equal to
  `treedef`; `tree_unflatten` and `tree_map` build their results with it, and so do the
  transformations that hand trees back (jit, grad, vmap, ...).

    >>> tree_map(lambda x: x, {"b": 1, "a": 2})
    {'a': 2, 'b': 1}
  """
  return spec_of(treedef).transform(f_node=_sorted_dict_node)


def tree_unflatten(treedef: PyTreeDef, leaves: Iterable[Any]) -> Any:
  """Rebuilds the pytree of structure `treedef` from `leaves` (dicts with sorted keys, as
  JAX builds them).

  Raises:
    ValueError: if the number of leaves is not `treedef.num_leaves` (says expected / got).
  """
  try:
    return canonical_treedef(treedef).unflatten(leaves)
  except ValueError as e:
    msg = str(e)
    if not msg.startswith(("Too few leaves", "Too many leaves")):
      raise
    got = len(leaves) if hasattr(leaves, "__len__") else "a different number"
    few = "few" if msg.startswith("Too few") else "many"
    raise ValueError(f"Too {few} leaves for PyTreeDef; expected {treedef.num_leaves}, got "
                     f"{got}. The structure is {treedef_str(treedef)}.") from None


def tree_leaves(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> list:
  """The leaves of `tree`, in `tree_flatten` order."""
  leaves, spec = _C.flatten(tree, _leaf(is_leaf), _NONE_IS_LEAF, NAMESPACE)
  _check_sortable(spec)
  return leaves


def tree_structure(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> PyTreeDef:
  """The `PyTreeDef` of `tree`."""
  return PyTreeDef(_check_sortable(_C.flatten(tree, _leaf(is_leaf), _NONE_IS_LEAF,
                                              NAMESPACE)[1]))


def tree_map(f: Callable[..., Any], tree: Any, *rest: Any,
             is_leaf: Callable[[Any], bool] | None = None) -> Any:
  """Applies `f` leafwise: `f(x, *xs)` for each leaf `x` of `tree` and the matching `xs`.

  Args:
    f: the function to apply.
    tree: the pytree whose structure the result has.
    *rest: pytrees with `tree`'s structure, or with it as a prefix (each of their subtrees at a
      leaf of `tree` is passed whole).
    is_leaf: optional predicate marking extra leaves of `tree`.

  Raises:
    ValueError: if a tree in `rest` does not have `tree`'s structure as a prefix.
  """
  leaves, treedef = _C.flatten(tree, _leaf(is_leaf), _NONE_IS_LEAF, NAMESPACE)
  _check_sortable(treedef)
  if not rest:
    return canonical_treedef(treedef).unflatten(map(f, leaves))
  return canonical_treedef(treedef).unflatten(
      map(f, leaves, *_rest_up_to(treedef, tree, rest, is_leaf)))


def _rest_up_to(treedef, tree, rest, is_leaf, name: str = "tree_map") -> list:
  """Each tree of `rest` flattened up to `treedef` (the structure of `tree`); a tree that
  does not have it as a prefix raises JAX's prefix error ("tree_map tree")."""
  out = []
  for r in rest:
    try:
      out.append(treedef.flatten_up_to(r))
    except ValueError:
      errors = prefix_errors(tree, r, is_leaf)
      if not errors:
        raise
      raise errors[0](f"{name} tree") from None
  return out


def tree_flatten_with_path(tree: Any, is_leaf: Callable[..., bool] | None = None,
                           is_leaf_takes_path: bool = False):
  """Like `tree_flatten`, with the key path of each leaf.

  Args:
    tree: a pytree.
    is_leaf: optional predicate marking subtrees as leaves: `is_leaf(x)`, or
      `is_leaf(key_path, x)` with `is_leaf_takes_path=True`.
    is_leaf_takes_path: pass each subtree's key path to `is_leaf` too.

  Returns:
    `([(key_path, leaf), ...], treedef)`; a key path is a tuple of `SequenceKey`, `DictKey`,
    `GetAttrKey`, `FlattenedIndexKey` or the keys a registration gives.
  """
  if is_leaf_takes_path and is_leaf is not None:
    pairs, spec = _flatten_with_path_predicate(tree, is_leaf)
    return pairs, PyTreeDef(spec)
  accessors, leaves, treedef = optree.tree_flatten_with_accessor(
      tree, _leaf(is_leaf), none_is_leaf=_NONE_IS_LEAF, namespace=NAMESPACE)
  _check_sortable(treedef)
  return [(_to_path(a), x) for a, x in zip(accessors, leaves)], PyTreeDef(treedef)


def tree_leaves_with_path(tree: Any, is_leaf: Callable[..., bool] | None = None,
                          is_leaf_takes_path: bool = False) -> list:
  """The `(key_path, leaf)` pairs of `tree`, in `tree_flatten` order (`is_leaf` and
  `is_leaf_takes_path` as in `tree_flatten_with_path`)."""
  return tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)[0]


def tree_map_with_path(f: Callable[..., Any], tree: Any, *rest: Any,
                       is_leaf: Callable[..., bool] | None = None,
                       is_leaf_takes_path: bool = False) -> Any:
  """Like `tree_map`, calling `f(key_path, x, *xs)` (`is_leaf` and `is_leaf_takes_path` as
  in `tree_flatten_with_path`)."""
  if is_leaf_takes_path and is_leaf is not None:
    pairs, treedef = _flatten_with_path_predicate(tree, is_leaf)
    return canonical_treedef(treedef).unflatten(
        map(f, *zip(*pairs), *_rest_up_to(treedef, tree, rest, None, "tree_map_with_path"))
        if pairs else [])
  accessors, leaves, treedef = optree.tree_flatten_with_accessor(
      tree, _leaf(is_leaf), none_is_leaf=_NONE_IS_LEAF, namespace=NAMESPACE)
  _check_sortable(treedef)
  paths = map(_to_path, accessors)
  return canonical_treedef(treedef).unflatten(
      map(f, paths, leaves, *_rest_up_to(treedef, tree, rest, is_leaf, "tree_map_with_path")))


class Unspecified:
  """The type of `UNSPECIFIED`, the default of arguments that may be given any value
  (`tree_reduce`'s initializer, `tree_reduce_associative`'s identity)."""
  __slots__ = ()

  def __repr__(self):
    return "<unspecified>"


UNSPECIFIED = Unspecified()
_NO_INITIALIZER = UNSPECIFIED


def tree_reduce(function: Callable[[Any, Any], Any], tree: Any,
                initializer: Any = _NO_INITIALIZER,
                is_leaf: Callable[[Any], bool] | None = None) -> Any:
  """`functools.reduce(function, tree_leaves(tree), initializer)`.

  Raises:
    TypeError: if `tree` has no leaves and no `initializer` is given.
  """
  leaves = tree_leaves(tree, is_leaf)
  if initializer is _NO_INITIALIZER:
    return functools.reduce(function, leaves)
  return functools.reduce(function, leaves, initializer)


def tree_all(tree: Any, *, is_leaf: Callable[[Any], bool] | None = None) -> bool:
  """Whether every leaf of `tree` is truthy (True for a tree without leaves)."""
  return all(tree_leaves(tree, is_leaf))


def tree_reduce_associative(operation: Callable[[T, T], T], tree: Any, *,
                            identity: Any = UNSPECIFIED,
                            is_leaf: Callable[[Any], bool] | None = None) -> T:
  """Reduces the leaves of `tree` with an associative `operation`, as a balanced tree of
  calls (depth log2(n)): the leaves are split in halves (the first `n // 2`, the rest), each
  half reduced, and the two results combined, as JAX does.

  Args:
    operation: `(a, b) -> c`, associative.
    tree: a pytree.
    identity: the result for a tree without leaves.
    is_leaf: optional predicate marking extra leaves.

  Returns:
    `operation` applied over the leaves; the single leaf of a one-leaf tree.

  Raises:
    TypeError: if `tree` has no leaves and no `identity` is given.
  """
  leaves = tree_leaves(tree, is_leaf)
  if not leaves:
    if identity is UNSPECIFIED:
      raise TypeError("Must specify identity for parallel reduction of empty sequence.")
    return identity

  def reduce(lo: int, hi: int):
    if hi - lo == 1:
      return leaves[lo]
    mid = lo + (hi - lo) // 2
    return operation(reduce(lo, mid), reduce(mid, hi))
  return reduce(0, len(leaves))


def tree_broadcast(prefix_tree: Any, full_tree: Any,
                   is_leaf: Callable[[Any], bool] | None = None) -> Any:
  """A tree of `full_tree`'s structure whose leaves under each leaf `p` of `prefix_tree` are
  all `p`.

    >>> tree_broadcast((1, 2), (0, {'a': 0, 'b': 0}))
    (1, {'a': 2, 'b': 2})

  Args:
    prefix_tree: a pytree whose structure is a prefix of `full_tree`'s (`None` is a node).
    full_tree: the pytree whose structure the result has.
    is_leaf: optional predicate marking extra leaves of `prefix_tree`.

  Raises:
    ValueError: if `prefix_tree` is not a prefix of `full_tree`.
  """
  p_leaves, p_def = tree_flatten(prefix_tree, is_leaf)
  try:
    subtrees = p_def.flatten_up_to(full_tree)
  except ValueError as e:
    # NB: JAX's words: the first of `prefix_errors` (a "pytree structure error" at a key path)
    errors = prefix_errors(prefix_tree, full_tree, is_leaf)
    if errors:
      raise errors[0]("broadcast_prefix prefix_tree") from None
    raise ValueError(f"tree_broadcast: prefix_tree of structure {p_def} is not a tree prefix "
                     f"of full_tree of structure {tree_structure(full_tree)}: {e}") from None
  out = []
  for p, sub in zip(p_leaves, subtrees):
    out.extend([p] * tree_structure(sub).num_leaves)
  return canonical_treedef(tree_structure(full_tree)).unflatten(out)


def treedef_tuple(treedefs: Iterable[PyTreeDef]) -> PyTreeDef:
  """The structure of a tuple whose children have the structures `treedefs`.

    >>> treedef_tuple([tree_structure([1, 2]), tree_structure({'a': 3})])
    PyTreeDef(([*, *], {'a': *}))
  """
  return PyTreeDef(optree.treespec_tuple([spec_of(t) for t in treedefs],
                                         none_is_leaf=_NONE_IS_LEAF, namespace=NAMESPACE))


def _one_level(tree: Any):
  """(children, aux data, JAX keys) of the root node of `tree`; None for a leaf."""
  if tree is None:
    return [], None, []
  if type(tree) in _staged_types:
    return None
  try:
    children, meta, _, _ = optree.tree_flatten_one_level(
        tree, none_is_leaf=_NONE_IS_LEAF, namespace=NAMESPACE)
  except ValueError:
    return None
  if isinstance(tree, dict):   # JAX's aux data of dicts holds the keys as a tuple
    if isinstance(meta, list):
      meta = tuple(meta)
    elif isinstance(meta, tuple) and len(meta) == 2 and isinstance(meta[1], list):
      meta = (meta[0], tuple(meta[1]))
  pairs, _ = tree_flatten_with_path(tree, is_leaf=lambda x: x is not tree)
  return children, meta, [p[0] for p, _ in pairs]


_SEQ_KINDS = {optree.PyTreeKind.TUPLE: (tuple, "Tuple", "tuple"),
              optree.PyTreeKind.LIST: (list, "List", "list")}


def _up_to_error(spec, x) -> None:
  """Raises JAX's ValueError for the first node of `spec` (depth first) that `x` does not
  match; returns if none differs (optree's error then stands)."""
  if spec.is_leaf():
    return
  kind, n = spec.kind, spec.num_children
  if kind == optree.PyTreeKind.NONE:
    if x is not None:
      raise ValueError(f"Expected None, got {x!r}.") from None
    return
  if kind in _SEQ_KINDS:
    typ, title, word = _SEQ_KINDS[kind]
    if type(x) is not typ:
      raise ValueError(f"Expected {word}, got {x!r}.") from None
    if len(x) != n:
      raise ValueError(f"{title} arity mismatch: {len(x)} != {n}; {word}: {x!r}.") from None
    children = list(x)
  elif kind == optree.PyTreeKind.DICT:
    if type(x) is not dict:
      raise ValueError(f"Expected dict, got {x!r}.") from None
    want, got = sorted(spec.entries()), sorted(x)
    if want != got:
      raise ValueError(f"Dict key mismatch; expected keys: {want!r}; present keys: "
                       f"{got!r}.") from None
    children = [x[k] for k in want]
  elif kind == optree.PyTreeKind.NAMEDTUPLE:
    if not (isinstance(x, tuple) and hasattr(type(x), "_fields")):
      raise ValueError(f"Expected named tuple, got {x!r}.") from None
    if type(x) is not spec.type:
      raise ValueError(f"Named tuple type mismatch: expected type: {spec.type!r}, tuple: "
                       f"{x!r}.") from None
    if len(x) != n:
      raise ValueError(f"Named tuple arity mismatch: {len(x)} != {n}; tuple: {x!r}.") from None
    children = list(x)
  else:
    if type(x) is not spec.type:
      raise ValueError(f"Custom node type mismatch: expected type: {spec.type!r}, value: "
                       f"{x!r}.") from None
    want = PyTreeDef(spec).node_data()[1]
    got = PyTreeDef(tree_structure(x).spec).node_data()[1]
    if kind == optree.PyTreeKind.DICT or kind == optree.PyTreeKind.ORDEREDDICT:
      want, got = tuple(want), tuple(got)
    if want != got:
      raise ValueError(f"Mismatch custom node data: {want!r} != {got!r}; value: {x!r}.") from None
    children = flatten_one_level(x)[0]
    if len(children) != n:
      raise ValueError(f"Custom type arity mismatch: {len(children)} != {n}; value: "
                       f"{x!r}.") from None
  for child_spec, child in zip(spec.children(), children):
    _up_to_error(child_spec, child)


def flatten_one_level(tree: Any) -> tuple[list, Hashable]:
  """The children and aux data of the root node of `tree` (dict keys sorted).

    >>> flatten_one_level({'b': [1], 'a': 2})
    ([2, [1]], ('a', 'b'))

  Raises:
    ValueError: if `tree` is a leaf ("can't tree-flatten type: ...").
  """
  out = _one_level(tree)
  if out is None:
    raise ValueError(f"can't tree-flatten type: {type(tree)}")
  return list(out[0]), out[1]


def flatten_one_level_with_keys(tree: Any) -> tuple[list, Hashable]:
  """Like `flatten_one_level`, with children as `(key, child)` pairs.

  Raises:
    ValueError: if `tree` is a leaf ("can't tree-flatten type: ...").
  """
  out = _one_level(tree)
  if out is None:
    raise ValueError(f"can't tree-flatten type: {type(tree)}")
  children, meta, keys = out
  return list(zip(keys, children)), meta


def is_tree_node(typ: type) -> bool:
  """Whether instances of class `typ` are pytree nodes (containers, namedtuples, `None`'s
  type and registered classes) rather than leaves."""
  if not isinstance(typ, type):
    raise TypeError(f"is_tree_node expects a type, got {typ!r} of type {type(typ).__name__}.")
  if typ in _staged_types:
    return False
  return (optree.register_pytree_node.get(typ, namespace=NAMESPACE) is not None
          or optree.is_namedtuple_class(typ) or optree.is_structseq_class(typ))


def _flatten_with_path_predicate(tree: Any, is_leaf: Callable[[KeyPath, Any], bool]):
  """`tree_flatten_with_path` with `is_leaf(key_path, x)`: a walk over the nodes that builds
  the structure from the one-level structures of the nodes it enters."""
  pairs = []
  leaf_spec = optree.treespec_leaf(none_is_leaf=_NONE_IS_LEAF, namespace=NAMESPACE)

  def visit(path, x):
    out = None if is_leaf(path, x) else _one_level(x)
    if out is None:
      pairs.append((path, x))
      return leaf_spec
    children, _, keys = out
    specs = iter([visit(path + (k,), c) for k, c in zip(keys, children)])
    one = _C.flatten(x, lambda y: y is not x, _NONE_IS_LEAF, NAMESPACE)[1]
    return one.transform(None, lambda _: next(specs))
  treedef = visit((), tree)
  return pairs, treedef


class PyTreeRegistry:
  """The registry of pytree node types (`default_registry`): the classes registered with
  `register_pytree_node` and friends, seen through JAX's `PyTreeRegistry` methods."""

  def flatten(self, tree: Any, leaf_predicate: Callable[[Any], bool] | None = None):
    return tree_flatten(tree, leaf_predicate)

  def flatten_one_level(self, tree: Any):
    """`(children, aux_data)`, or None for a leaf."""
    out = _one_level(tree)
    return None if out is None else (list(out[0]), out[1])

  def flatten_one_level_with_keys(self, tree: Any):
    """`([(key, child), ...], aux_data)`, or None for a leaf."""
    out = _one_level(tree)
    return None if out is None else (list(zip(out[2], out[0])), out[1])

  def flatten_with_path(self, tree: Any, leaf_predicate: Callable[[Any], bool] | None = None):
    return tree_flatten_with_path(tree, leaf_predicate)

  def is_node(self, typ: type) -> bool:
    return is_tree_node(typ)

  def register_node(self, type: type, to_iterable: Callable, from_iterable: Callable,
                    to_iterable_with_keys: Callable | None = None) -> None:
    register_pytree_node(type, to_iterable, from_iterable, to_iterable_with_keys)

  def register_dataclass_node(self, type: type, data_fields: Sequence[str],
                              meta_fields: Sequence[str]) -> None:
    register_dataclass(type, data_fields, meta_fields)

  def __repr__(self):
    return f"PyTreeRegistry(namespace={NAMESPACE!r})"


default_registry = PyTreeRegistry()


def broadcast_prefix(prefix: Any, tree: Any,
                     is_leaf: Callable[[Any], bool] | None = None) -> list:
  """One leaf of `prefix` per leaf of `tree`, for a `prefix` that is a pytree prefix of
  `tree` (None is a leaf of the prefix: in_axes, shardings and specs use it).

  Raises:
    ValueError: when `prefix` is not a tree prefix of `tree`.
  """
  p_leaves, p_def = optree.tree_flatten(prefix, is_leaf=is_leaf, none_is_leaf=True,
                                        namespace=NAMESPACE)
  out = []
  for p, sub in zip(p_leaves, p_def.flatten_up_to(tree)):
    out.extend([p] * len(optree.tree_leaves(sub, none_is_leaf=_NONE_IS_LEAF,
                                            namespace=NAMESPACE)))
  return out


class PytreeLeaf:
  """Stands for each leaf of a value in JAX's prefix errors (`leaves_as_pytree_leaf`): the
  messages then name this type, not the values' types, as JAX's do."""

  def __repr__(self):
    return "pytree leaf"


def leaves_as_pytree_leaf(tree: Any) -> Any:
  """`tree` with each leaf replaced by a `PytreeLeaf` (the full tree JAX's prefix errors of
  in_axes and shardings compare against)."""
  return tree_map(lambda _: PytreeLeaf(), tree)


def prefix_mismatch(errors: list, name: str, *, indent: str = "") -> str:
  """JAX's summary of `prefix_errors` for the prefix named `name`: "Mismatch details (N
  found):" and each error's message (the first line of each indented by `indent`)."""
  sep = "\n" + indent
  return (f"Mismatch details ({len(errors)} found):{sep}"
          + sep.join(str(e(name)) for e in errors))


def prefix_errors(prefix: Any, tree: Any, is_leaf: Callable[[Any], bool] | None = None
                  ) -> list[Callable[[str], ValueError]]:
  """Why `prefix` is not a pytree prefix of `tree` (JAX's `prefix_errors`): one function per
  disagreement that, given the name of the prefix (`"shard_map out_specs"`), makes JAX's
  `ValueError` ("pytree structure error: different types at key path ..."). Empty when
  `prefix` is a prefix of `tree`. A disagreement hides those below it; None is an empty
  node, as JAX's, unless `is_leaf` says it is a leaf."""
  def leaf(x):
    return (is_leaf is not None and is_leaf(x)) or _one_level(x) is None

  def walk(path, p, t):
    if leaf(p):
      return
    if type(p) is not type(t):
      yield lambda name: ValueError(
          f"pytree structure error: different types at key path\n    {name}{keystr(path)}\n"
          f"At that key path, the prefix pytree {name} has a subtree of type\n    {type(p)}\n"
          f"but at the same key path the full pytree has a subtree of different type\n"
          f"    {type(t)}.")
      return
    p_kids, p_meta, p_keys = _one_level(p)
    t_kids, t_meta, t_keys = _one_level(t)
    if isinstance(p, (list, tuple)):
      if len(p) != len(t):
        ty = type(p).__name__
        yield lambda name: ValueError(
            f"pytree structure error: different lengths of {ty} at key path\n"
            f"    {name}{keystr(path)}\n"
            f"At that key path, the prefix pytree {name} has a subtree of type {ty} of length "
            f"{len(p)}, but the full pytree has a subtree of the same type but of length "
            f"{len(t)}.")
        return
    elif len(p_kids) != len(t_kids):
      def keys_str(keys):
        return " ".join(str(getattr(k, "key", getattr(k, "name", k))) for k in keys)
      try:
        diff = set(p_keys).symmetric_difference(set(t_keys))
      except TypeError:
        diff = None
      yield lambda name: ValueError(
          f"pytree structure error: different numbers of pytree children at key path\n"
          f"    {name}{keystr(path)}\n"
          f"At that key path, the prefix pytree {name} has a subtree of type\n    {type(p)}\n"
          f"with {len(p_kids)} child keys\n    {keys_str(p_keys)}\n"
          f"but at the same key path the full pytree has a subtree of the same type but with "
          f"{len(t_kids)} child keys\n    {keys_str(t_keys)}\n"
          + ("" if diff is None else
             f"so the symmetric difference on key sets is\n    {keys_str(diff)}"))
      return
    if p_meta != t_meta:
      p_str, t_str = str(p_meta), str(t_meta)
      diff_str = textwrap.indent("\n".join(difflib.ndiff(p_str.splitlines(),
                                                         t_str.splitlines())), "    ")
      yield lambda name: ValueError(
          f"pytree structure error: different pytree metadata at key path\n"
          f"    {name}{keystr(path)}\n"
          f"At that key path, the prefix pytree {name} has a subtree of type\n    {type(p)}\n"
          f"with metadata\n    {p_str}\n"
          f"but at the same key path the full pytree has a subtree of the same type but with "
          f"metadata\n    {t_str}\n"
          f"so the diff in the metadata at these pytree nodes is\n{diff_str}")
      return
    for k, pc, tc in zip(p_keys, p_kids, t_kids):
      yield from walk((*path, k), pc, tc)

  return list(walk((), prefix, tree))


def tree_transpose(outer_treedef: PyTreeDef, inner_treedef: PyTreeDef | None,
                   pytree_to_transpose: Any) -> Any:
  """Turns an outer tree of inner trees into an inner tree of outer trees.

  Args:
    outer_treedef: structure of the outer tree.
    inner_treedef: structure of each inner tree (None: that of the first one).
    pytree_to_transpose: a tree of structure `outer_treedef` with `inner_treedef` subtrees.

  Raises:
    TypeError: the tree's leaf count is not the product of the two structures' ("Mismatch
      ...", as JAX's; as JAX, only the counts are compared: the leaves are read in order,
      so a custom node whose aux data holds its children's structure transposes).
  """
  outer_treedef = spec_of(outer_treedef)
  if inner_treedef is None:
    inner_trees = outer_treedef.flatten_up_to(pytree_to_transpose)
    if not inner_trees:
      raise ValueError("tree_transpose: inner_treedef=None needs an outer tree with leaves.")
    inner_treedef = tree_structure(inner_trees[0]).spec
  inner_treedef = spec_of(inner_treedef)
  leaves, treedef = tree_flatten(pytree_to_transpose)
  n_in, n_out = inner_treedef.num_leaves, outer_treedef.num_leaves
  if len(leaves) != n_in * n_out:
    expected = PyTreeDef(outer_treedef.compose(inner_treedef))
    raise TypeError(f"Mismatch\n{treedef}\n != \n{expected}")
  outer, inner = canonical_treedef(outer_treedef), canonical_treedef(inner_treedef)
  columns = [outer.unflatten(leaves[i::n_in]) for i in range(n_in)]
  return inner.unflatten(columns)


def treedef_children(treedef: PyTreeDef) -> list[PyTreeDef]:
  """The structures of the children of the root node of `treedef`."""
  return [PyTreeDef(c) for c in spec_of(treedef).children()]


def treedef_is_leaf(treedef: PyTreeDef) -> bool:
  """Whether `treedef` has a single node (a leaf, or `None`)."""
  return treedef.num_nodes == 1


def all_leaves(iterable: Iterable[Any], is_leaf: Callable[[Any], bool] | None = None) -> bool:
  """Whether every element of `iterable` is a leaf."""
  return optree.all_leaves(iterable, _leaf(is_leaf), none_is_leaf=_NONE_IS_LEAF,
                           namespace=NAMESPACE)


# ---------------------------------------------------------------------------
# Registration.

#: Functions `hook(nodetype, flatten, unflatten)` called after each registration, with
#: `flatten(x) -> (children, aux_data)` and `unflatten(aux_data, children) -> x`.
#: `stagecraft.compat.install()` adds one that mirrors registrations into real JAX's registry
#: (libraries such as flax.nnx test `type(x) in jax._src.tree_util._registry`).
registration_hooks: list[Callable[[type, Callable, Callable], None]] = []


def _register(nodetype, flatten, unflatten, entry_type):
  try:
    if isinstance(nodetype, type) and issubclass(nodetype, tuple):
      with warnings.catch_warnings():
        # optree warns when a namedtuple (or PyStructSequence) subclass gets its own rules;
        # JAX registers such a type silently (numpyro's `optim._MinimizeState`).
        warnings.filterwarnings("ignore", message=r"PyTree type .* is a subclass of",
                                category=UserWarning)
        optree.register_pytree_node(nodetype, flatten, unflatten,
                                    path_entry_type=entry_type, namespace=NAMESPACE)
    else:
      # NB: no catch_warnings here: entering one resets Python's record of the warnings
      # already shown, so a program's repeated DeprecationWarning would show again after
      # any registration (flax's gspmd guide, importing orbax); JAX's registry has none.
      optree.register_pytree_node(nodetype, flatten, unflatten, path_entry_type=entry_type,
                                  namespace=NAMESPACE)
  except ValueError as e:
    if "already registered" in str(e):
      raise ValueError(
          f"Duplicate pytree node registration for {nodetype!r}: it is already registered "
          f"(each type may be registered once).") from None
    raise

  def children_and_aux(x):
    out = flatten(x)
    return list(out[0]), out[1]

  for hook in list(registration_hooks):
    hook(nodetype, children_and_aux, unflatten)


def register_staged_leaf(nodetype: type, flatten_func: Callable[[Any], tuple[Any, Any]],
                         unflatten_func: Callable[[Any, Sequence], Any], *,
                         data: Callable[[Any], Any] | None = None) -> None:
  """Makes `nodetype` a pytree leaf that the transformations trace through its array data.

  For users (this module's functions) an instance is a leaf, as JAX's typed PRNG key arrays
  are: `tree_leaves(key) == [key]`, `tree_map(f, key)` calls `f(key)`. In `NAMESPACE`,
  where the transformations flatten with optree directly, it is a node with one child, its
  data: `jit`, `vmap`, `grad`, `scan`, `cond`, ... trace the data and hand the function
  (and the caller) an instance rebuilt around the traced (or computed) data.

  Args:
    nodetype: the class.
    flatten_func: `x -> (data, aux_data)`, `data` one array (or tracer).
    unflatten_func: `(aux_data, [data]) -> x`.
    data: `x -> array`, the array data the NumPy-level functions work on
      (`staged_leaf_data`; default: the traced value `flatten_func` gives). A typed key
      array is traced as its keys (`key<fry>[*s]`) and worked on as its data (`u32[*s, 2]`).

  Raises:
    ValueError: if `nodetype` is already registered.
  """
  def flatten(x):
    data, aux = flatten_func(x)
    return (data,), aux

  try:
    optree.register_pytree_node(nodetype, flatten, unflatten_func,
                                path_entry_type=optree.FlattenedEntry, namespace=NAMESPACE)
  except ValueError as e:
    if "already registered" in str(e):
      raise ValueError(f"Duplicate pytree node registration for {nodetype!r}: it is already "
                       f"registered (each type may be registered once).") from None
    raise
  _staged_types.add(nodetype)
  if data is not None:
    _staged_data[nodetype] = (data, lambda d: unflatten_func(None, [d]))


def tree_flatten_traced(tree: Any, is_leaf: Callable[[Any], bool] | None = None):
  """`tree_flatten` as the transformations flatten: a staged leaf (a typed PRNG key array)
  gives the value the transformations trace as the leaf (its keys, of dtype `key<fry>`),
  and the treedef rebuilds the staged leaf around it. For library code that hands leaves
  to primitives (`stop_gradient`, `device_put`, ...).

    >>> from stagecraft import random
    >>> leaves, _ = tree_flatten_traced({'k': random.key(0)})
    >>> leaves[0].dtype, leaves[0].shape
    (key<fry>, ())
  """
  return _C.flatten(tree, is_leaf, _NONE_IS_LEAF, NAMESPACE)


def tree_map_traced(f: Callable[..., Any], tree: Any, *rest: Any,
                    is_leaf: Callable[[Any], bool] | None = None) -> Any:
  """`tree_map` over the leaves the transformations see (`tree_flatten_traced`): `f` gets a
  staged leaf's data, and the result rebuilds the staged leaf around what `f` returns."""
  leaves, treedef = _C.flatten(tree, is_leaf, _NONE_IS_LEAF, NAMESPACE)
  others = [treedef.flatten_up_to(r) for r in rest]
  return tree_unflatten(treedef, [f(*xs) for xs in zip(leaves, *others)])


#: The dtypes of staged leaves, by dtype class: `(physical_aval, rebuild)` (`register_staged_dtype`).
_staged_dtypes: dict[type, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {}


def register_staged_dtype(dtype_type: type, physical_aval: Callable[[Any], Any],
                          rebuild: Callable[[Any], Any]) -> None:
  """Registers the dtype class of a staged leaf (`key<fry>`'s): `physical_aval(aval)` is the
  aval the transformations trace for a leaf of abstract value `aval` (for typed keys the
  aval itself: keys are traced as keys), and `rebuild(value)` makes the leaf around a
  (traced) value. Lets code that is handed only an aval of that dtype
  (`pe.trace_to_jaxpr_nounits` with `PartialVal.unknown`, `eval_shape` of a
  ShapeDtypeStruct of keys) trace it."""
  _staged_dtypes[dtype_type] = (physical_aval, rebuild)


def staged_aval(aval: Any) -> tuple[Any, Callable[[Any], Any]] | None:
  """For an aval whose dtype is a staged leaf's (`key<fry>[]`): `(the data's aval, rebuild)`
  (`register_staged_dtype`); `None` for any other aval."""
  entry = _staged_dtypes.get(type(getattr(aval, "dtype", None)))
  if entry is None:
    return None
  return entry[0](aval), entry[1]


def staged_leaf_data(x: Any) -> tuple[Any, Callable[[Any], Any]] | None:
  """For a staged leaf (a typed PRNG key array): `(data, rebuild)`, `rebuild(new_data)`
  making a staged leaf of the same kind around `new_data`; `None` for anything else.
  NumPy-level functions that accept key arrays (`broadcast_to`, `array_equal`) work on the
  data, whose trailing axes follow the key array's own."""
  if type(x) not in _staged_types:
    return None
  entry = _staged_data.get(type(x))
  if entry is not None:
    return entry[0](x), entry[1]
  return staged_leaf_value(x)


def staged_leaf_from_data(like: Any, data: Any) -> Any:
  """A staged leaf of the kind of `like` (a typed key array) around the array data `data`
  (`u32[*s, 2]` for keys `key<fry>[*s]`); `like`'s own data is not read."""
  return _staged_data[type(like)][1](data)


#: {staged leaf type: (x -> its array data, data -> a leaf)} (`register_staged_leaf`'s
#: `data`).
_staged_data: dict[type, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {}


def staged_leaf_value(x: Any) -> tuple[Any, Callable[[Any], Any]] | None:
  """For a staged leaf: `(the value the transformations trace, rebuild)` (a typed key
  array's keys `key<fry>[*s]`); `None` for anything else."""
  if type(x) not in _staged_types:
    return None
  leaves, treedef = _C.flatten(x, None, _NONE_IS_LEAF, NAMESPACE)
  return leaves[0], lambda value: treedef.unflatten([value])


def register_pytree_node(nodetype: type, flatten_func: Callable[[Any], tuple[Iterable, Any]],
                         unflatten_func: Callable[[Any, Iterable], Any],
                         flatten_with_keys_func: Callable | None = None) -> None:
  """Makes `nodetype` a pytree node.

  Args:
    nodetype: the class.
    flatten_func: `x -> (children, aux_data)`; `aux_data` is hashable and kept in the treedef.
    unflatten_func: `(aux_data, children) -> x`.
    flatten_with_keys_func: optional `x -> ([(key, child), ...], aux_data)`; without it, key
      paths use `FlattenedIndexKey(i)`.

  Raises:
    ValueError: if `nodetype` is already registered.
  """
  if flatten_with_keys_func is not None:
    register_pytree_with_keys(nodetype, flatten_with_keys_func, unflatten_func, flatten_func)
  else:
    _register(nodetype, flatten_func, unflatten_func, optree.FlattenedEntry)


def register_pytree_with_keys(nodetype: type,
                              flatten_with_keys: Callable[[Any], tuple[Iterable, Any]],
                              unflatten_func: Callable[[Any, Iterable], Any],
                              flatten_func: Callable | None = None) -> None:
  """Makes `nodetype` a pytree node whose children have keys (shown in key paths).

  Args:
    nodetype: the class.
    flatten_with_keys: `x -> ([(key, child), ...], aux_data)`; keys are usually `GetAttrKey`,
      `DictKey` or `SequenceKey`.
    unflatten_func: `(aux_data, children) -> x`.
    flatten_func: accepted for JAX compatibility; optree flattens every node with one
      function, so `flatten_with_keys` is used throughout.

  Raises:
    ValueError: if `nodetype` is already registered.
  """
  del flatten_func

  def flatten(x):
    key_children, aux = flatten_with_keys(x)
    keys, children = [], []
    for k, c in key_children:
      keys.append(k)
      children.append(c)
    return children, aux, keys

  _register(nodetype, flatten, unflatten_func, _KeyedEntry)


def register_pytree_node_class(cls: type[T]) -> type[T]:
  """Class decorator: `cls.tree_flatten(self) -> (children, aux)` and the classmethod
  `cls.tree_unflatten(aux, children)` make `cls` a pytree node. Returns `cls`."""
  register_pytree_node(cls, operator.methodcaller("tree_flatten"), cls.tree_unflatten)
  return cls


def register_pytree_with_keys_class(cls: type[T]) -> type[T]:
  """Class decorator: `cls.tree_flatten_with_keys(self) -> ([(key, child), ...], aux)` and the
  classmethod `cls.tree_unflatten(aux, children)` make `cls` a keyed pytree node.
  Returns `cls`."""
  register_pytree_with_keys(cls, operator.methodcaller("tree_flatten_with_keys"),
                            cls.tree_unflatten)
  return cls


def register_dataclass(nodetype: type[T], data_fields: Sequence[str] | None = None,
                       meta_fields: Sequence[str] | None = None,
                       drop_fields: Sequence[str] = ()) -> type[T]:
  """Makes a dataclass a pytree node: `data_fields` are children (keys `GetAttrKey(name)`),
  `meta_fields` are static (hashable) and kept in the treedef.

  With both field lists None, `nodetype` must be a dataclass: fields with
  `metadata={'static': True}` are meta fields and the other init fields are data fields.
  Unflattening calls `nodetype(**fields)`. Returns `nodetype` (usable as a decorator).

  Raises:
    TypeError: if only one field list is given, or fields are inferred from a non-dataclass.
    ValueError: if the fields do not cover the dataclass's init fields exactly, or overlap.
  """
  if (data_fields is None) != (meta_fields is None):
    raise TypeError(f"register_dataclass: data_fields and meta_fields must both be specified "
                    f"when either is specified. Got data_fields={data_fields!r} "
                    f"meta_fields={meta_fields!r}.")
  if data_fields is None:
    if not dataclasses.is_dataclass(nodetype):
      raise TypeError(f"register_dataclass: data_fields and meta_fields are required when "
                      f"nodetype is not a dataclass. Got nodetype={nodetype!r}.")
    fields = [f for f in dataclasses.fields(nodetype) if f.init and f.name not in drop_fields]
    meta_fields = [f.name for f in fields if f.metadata.get("static", False)]
    data_fields = [f.name for f in fields if not f.metadata.get("static", False)]
  data_fields, meta_fields = tuple(data_fields), tuple(meta_fields)
  if dataclasses.is_dataclass(nodetype):
    init = {f.name for f in dataclasses.fields(nodetype) if f.init} - set(drop_fields)
    given = set(data_fields) | set(meta_fields)
    if given != init:
      msg = ("data_fields and meta_fields must include all dataclass fields with "
             "``init=True`` and only them.")
      if init - given:
        msg += (f" Missing fields: {init - given}. Add them to drop_fields to suppress this "
                f"error.")
      if given - init:
        msg += f" Unexpected fields: {given - init}."
      raise ValueError(msg)
  if overlap := set(data_fields) & set(meta_fields):
    raise ValueError(f"data_fields and meta_fields must not overlap. Overlapping fields: "
                     f"{overlap}.")
  keys = [GetAttrKey(n) for n in data_fields]

  def flatten(x):
    return ([getattr(x, n) for n in data_fields], tuple(getattr(x, n) for n in meta_fields),
            keys)

  def unflatten(aux, children):
    return nodetype(**dict(zip(meta_fields, aux)), **dict(zip(data_fields, children)))

  _register(nodetype, flatten, unflatten, _KeyedEntry)
  return nodetype


def register_static(cls: type[T]) -> type[T]:
  """Makes instances of `cls` pytree nodes without children: the whole value is kept in the
  treedef (so it must be hashable). Returns `cls`."""
  register_pytree_node(cls, lambda x: ((), x), lambda x, _: x)
  return cls


# ---------------------------------------------------------------------------
# Partial.

class _WrappedPartial:
  """Holds a `functools.partial` passed as `Partial`'s func, so that `functools.partial` does
  not merge it into the `Partial` (its arguments stay static); hashes and compares as it."""

  def __init__(self, p: functools.partial):
    self.partial = p
    self.func, self.args, self.keywords = p.func, p.args, p.keywords

  def __call__(self, *args, **kwargs):
    return self.partial(*args, **kwargs)

  def __hash__(self):
    return hash(self.partial)

  def __eq__(self, other):
    if isinstance(other, _WrappedPartial):
      other = other.partial
    return self.partial == other

  def __repr__(self):
    return repr(self.partial)


class Partial(functools.partial):
  """A `functools.partial` that is a pytree: `func` is static (kept in the treedef) and
  `args`/`keywords` are its children, so a Partial can be passed through `jit`.

    >>> add = Partial(lambda x, y: x + y, 1.0)
    >>> tree_leaves(add)
    [1.0]
  """

  def __new__(cls, func, *args, **kw):
    if isinstance(func, functools.partial):
      func = _WrappedPartial(func)
    return super().__new__(cls, func, *args, **kw)


register_pytree_node(
    Partial,
    lambda p: ((p.args, p.keywords), p.func),
    lambda func, xs: Partial(func, *xs[0], **xs[1]),
)
