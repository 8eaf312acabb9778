"""stagecraft.tree_util against jax.tree_util (the oracle): leaves, structures, maps, key paths."""
import collections
import dataclasses
import functools
import operator

import jax.tree_util as jtu
import optree
import pytest
from hypothesis import given, settings, strategies as st

import stagecraft.tree_util as tu

Point = collections.namedtuple("Point", ["x", "y"])


# ---------------------------------------------------------------------------
# Custom nodes, registered the same way in both systems.

class Pair:
  """Registered without keys (key paths use FlattenedIndexKey)."""

  def __init__(self, a, b, tag="t"):
    self.a, self.b, self.tag = a, b, tag

  def __eq__(self, other):
    return type(other) is Pair and (self.a, self.b, self.tag) == (other.a, other.b, other.tag)

  def __repr__(self):
    return f"Pair({self.a!r}, {self.b!r}, {self.tag!r})"


def _pair_flatten(p):
  return (p.a, p.b), p.tag


def _pair_unflatten(tag, children):
  return Pair(*children, tag=tag)


tu.register_pytree_node(Pair, _pair_flatten, _pair_unflatten)
jtu.register_pytree_node(Pair, _pair_flatten, _pair_unflatten)


class Linear:
  """Registered with keys through register_pytree_with_keys (GetAttrKey / DictKey keys)."""

  def __init__(self, w, b, extras):
    self.w, self.b, self.extras = w, b, extras

  def __eq__(self, other):
    return type(other) is Linear and (self.w, self.b, self.extras) == (
        other.w, other.b, other.extras)


def _linear_flatten_with_keys(keys_module):
  def flatten(m):
    return [(keys_module.GetAttrKey("w"), m.w), (keys_module.GetAttrKey("b"), m.b),
            (keys_module.DictKey("extras"), m.extras)], None
  return flatten


def _linear_unflatten(aux, children):
  return Linear(*children)


tu.register_pytree_with_keys(Linear, _linear_flatten_with_keys(tu), _linear_unflatten)
jtu.register_pytree_with_keys(Linear, _linear_flatten_with_keys(jtu), _linear_unflatten)


class Stack:
  """Registered through register_pytree_node with a flatten_with_keys_func (SequenceKey)."""

  def __init__(self, *items):
    self.items = items

  def __eq__(self, other):
    return type(other) is Stack and self.items == other.items


def _stack_with_keys(keys_module):
  return lambda s: ([(keys_module.SequenceKey(i), x) for i, x in enumerate(s.items)], None)


tu.register_pytree_node(Stack, lambda s: (s.items, None), lambda _, c: Stack(*c),
                        _stack_with_keys(tu))
jtu.register_pytree_node(Stack, lambda s: (s.items, None), lambda _, c: Stack(*c),
                         _stack_with_keys(jtu))


@tu.register_pytree_with_keys_class
class Box:
  """Registered with the keyed class decorator; JAX gets the same class registered by hand."""

  def __init__(self, value, label):
    self.value, self.label = value, label

  def tree_flatten_with_keys(self):
    return [(tu.GetAttrKey("value"), self.value)], self.label

  @classmethod
  def tree_unflatten(cls, label, children):
    return cls(children[0], label)

  def __eq__(self, other):
    return type(other) is Box and (self.value, self.label) == (other.value, other.label)


jtu.register_pytree_with_keys(
    Box, lambda b: ([(jtu.GetAttrKey("value"), b.value)], b.label), Box.tree_unflatten)


@tu.register_pytree_node_class
class Cell:
  """Registered with the plain class decorator (tree_flatten / tree_unflatten)."""

  def __init__(self, *contents):
    self.contents = contents

  def tree_flatten(self):
    return self.contents, len(self.contents)

  @classmethod
  def tree_unflatten(cls, aux, children):
    return cls(*children)

  def __eq__(self, other):
    return type(other) is Cell and self.contents == other.contents


jtu.register_pytree_node_class(Cell)


@dataclasses.dataclass
class Params:
  weight: object
  bias: object
  name: str = dataclasses.field(default="p", metadata={"static": True})


tu.register_dataclass(Params, data_fields=["weight", "bias"], meta_fields=["name"])
jtu.register_dataclass(Params, data_fields=["weight", "bias"], meta_fields=["name"])


@dataclasses.dataclass(frozen=True)
class Config:
  depth: int


tu.register_static(Config)
jtu.register_static(Config)


TREES = [
    1,
    None,
    [],
    (),
    {},
    [1, 2, 3],
    (1, (2, 3), [4, [5]]),
    {"b": 1, "a": 2, "c": {"z": 3, "y": [4, 5]}},
    {"x": None, "y": (None, 1), "z": [None]},
    [None, None],
    {3: "c", 1: "a", 2: "b"},
    Point(1, 2),
    Point(x={"q": 1, "p": 2}, y=[Point(3, None)]),
    collections.OrderedDict([("z", 1), ("a", 2)]),
    collections.defaultdict(list, {"b": 1, "a": [2, 3]}),
    Pair(1, [2, 3]),
    Pair(Pair(1, 2, "in"), {"k": 3}, "out"),
    Linear([1, 2], 3, {"s": 4, "r": (5,)}),
    Stack(1, (2, 3), {"a": 4}),
    Box({"v": [1, 2]}, "lbl"),
    Cell(1, Cell(2, 3)),
    Params(weight=[1, 2], bias=3, name="dense"),
    [Config(2), 1, {"c": Config(3)}],
    {"mix": [Pair(1, Linear(2, 3, {})), Point(Stack(4), Box(5, "b"))], "none": None},
]
# NB: ids must not contain object addresses, or pytest-xdist workers collect different ids.
IDS = [f"{i}-{type(t).__name__}" for i, t in enumerate(TREES)]


def _paths_repr(leaves_with_path):
  return [(repr(path), leaf) for path, leaf in leaves_with_path]


@pytest.mark.parametrize("tree", TREES, ids=IDS)
def test_leaves_and_structure_match_jax(tree):
  leaves, treedef = tu.tree_flatten(tree)
  jleaves, jtreedef = jtu.tree_flatten(tree)
  assert leaves == jleaves
  assert tu.tree_leaves(tree) == jleaves
  assert treedef.num_leaves == jtreedef.num_leaves
  assert treedef.num_nodes == jtreedef.num_nodes
  assert tu.tree_structure(tree) == treedef
  assert isinstance(treedef, tu.PyTreeDef)
  assert tu.treedef_is_leaf(treedef) == jtu.treedef_is_leaf(jtreedef)
  assert len(tu.treedef_children(treedef)) == len(jtu.treedef_children(jtreedef))


@pytest.mark.parametrize("tree", TREES, ids=IDS)
def test_round_trip(tree):
  leaves, treedef = tu.tree_flatten(tree)
  rebuilt = tu.tree_unflatten(treedef, leaves)
  assert rebuilt == tree
  assert type(rebuilt) is type(tree)
  assert tu.tree_structure(rebuilt) == treedef
  # Unflattening with other leaves gives the same result as JAX.
  new = list(range(100, 100 + len(leaves)))
  assert tu.tree_unflatten(treedef, new) == jtu.tree_unflatten(jtu.tree_structure(tree), new)


@pytest.mark.parametrize("tree", TREES, ids=IDS)
def test_tree_map_matches_jax(tree):
  f = lambda x: ("mapped", x)
  assert tu.tree_map(f, tree) == jtu.tree_map(f, tree)
  g = lambda x, y: (x, y)
  other = tu.tree_map(lambda x: -1, tree)
  assert tu.tree_map(g, tree, other) == jtu.tree_map(g, tree, other)


@pytest.mark.parametrize("tree", TREES, ids=IDS)
def test_key_paths_match_jax(tree):
  ours, treedef = tu.tree_flatten_with_path(tree)
  theirs, _ = jtu.tree_flatten_with_path(tree)
  assert [tu.keystr(p) for p, _ in ours] == [jtu.keystr(p) for p, _ in theirs]
  assert [tu.keystr(p, simple=True, separator="/") for p, _ in ours] == [
      jtu.keystr(p, simple=True, separator="/") for p, _ in theirs]
  # Same key classes, fields and reprs as JAX's.
  assert _paths_repr(ours) == _paths_repr(theirs)
  assert all(type(p) is tuple for p, _ in ours)
  assert treedef == tu.tree_structure(tree)
  assert _paths_repr(tu.tree_leaves_with_path(tree)) == _paths_repr(
      jtu.tree_leaves_with_path(tree))
  f = lambda path, x: (tu.keystr(path), x)
  jf = lambda path, x: (jtu.keystr(path), x)
  assert tu.tree_map_with_path(f, tree) == jtu.tree_map_with_path(jf, tree)


def test_key_path_types_for_builtin_containers():
  tree = {"a": [Point(1, None), (2,)], "b": Pair(3, 4)}
  paths = [p for p, _ in tu.tree_leaves_with_path(tree)]
  assert paths == [
      (tu.DictKey("a"), tu.SequenceKey(0), tu.GetAttrKey("x")),
      (tu.DictKey("a"), tu.SequenceKey(1), tu.SequenceKey(0)),
      (tu.DictKey("b"), tu.FlattenedIndexKey(0)),
      (tu.DictKey("b"), tu.FlattenedIndexKey(1)),
  ]


def test_key_classes():
  keys = [tu.SequenceKey(0), tu.DictKey("a"), tu.GetAttrKey("w"), tu.FlattenedIndexKey(3),
          tu.DictKey(1)]
  jkeys = [jtu.SequenceKey(0), jtu.DictKey("a"), jtu.GetAttrKey("w"), jtu.FlattenedIndexKey(3),
           jtu.DictKey(1)]
  assert [str(k) for k in keys] == [str(k) for k in jkeys]
  assert [repr(k) for k in keys] == [repr(k) for k in jkeys]
  assert len({*keys, *keys}) == len(keys)   # hashable, equal by value
  assert tu.SequenceKey(0).idx == 0 and tu.DictKey("a").key == "a"
  assert tu.GetAttrKey("w").name == "w" and tu.FlattenedIndexKey(2).key == 2
  with pytest.raises(dataclasses.FrozenInstanceError):
    tu.SequenceKey(0).idx = 1
  assert tu.keystr((tu.DictKey("a"), tu.SequenceKey(0), tu.GetAttrKey("w"))) == "['a'][0].w"
  assert tu.keystr(()) == ""


@pytest.mark.parametrize("is_leaf", [
    lambda x: isinstance(x, tuple),
    lambda x: isinstance(x, Pair),
    lambda x: x is None,
    lambda x: isinstance(x, dict) and "mix" not in x,
])
@pytest.mark.parametrize("tree", TREES, ids=IDS)
def test_is_leaf_matches_jax(tree, is_leaf):
  leaves, treedef = tu.tree_flatten(tree, is_leaf=is_leaf)
  jleaves, jtreedef = jtu.tree_flatten(tree, is_leaf=is_leaf)
  assert leaves == jleaves
  assert treedef.num_nodes == jtreedef.num_nodes
  assert tu.tree_unflatten(treedef, leaves) == tree
  f = lambda x: [x]
  assert tu.tree_map(f, tree, is_leaf=is_leaf) == jtu.tree_map(f, tree, is_leaf=is_leaf)
  ours = tu.tree_leaves_with_path(tree, is_leaf=is_leaf)
  theirs = jtu.tree_leaves_with_path(tree, is_leaf=is_leaf)
  assert _paths_repr(ours) == _paths_repr(theirs)


def test_tree_map_prefix_and_multiple_trees():
  tree = {"a": [1, 2], "b": (3, None)}
  other = {"a": [10, 20], "b": (30, None)}
  f = lambda x, y: x + y
  assert tu.tree_map(f, tree, other) == jtu.tree_map(f, tree, other)
  # Leaves of the first tree may match whole subtrees of the others.
  g = lambda x, sub: (x, sub)
  prefix = {"a": 0, "b": 1}
  big = {"a": [1, [2, 3]], "b": {"k": 4}}
  assert tu.tree_map(g, prefix, big) == jtu.tree_map(g, prefix, big)
  h = lambda path, x, y: (tu.keystr(path), x * y)
  jh = lambda path, x, y: (jtu.keystr(path), x * y)
  assert tu.tree_map_with_path(h, tree, other) == jtu.tree_map_with_path(jh, tree, other)


def test_tree_map_structure_mismatch_raises():
  with pytest.raises(ValueError):
    tu.tree_map(lambda x, y: x, [1, 2], [1, 2, 3])
  with pytest.raises(ValueError):
    tu.tree_map(lambda x, y: x, {"a": 1}, {"b": 1})


def test_dict_keys_sorted_and_none_is_empty_node():
  assert tu.tree_leaves({"b": 1, "a": 2, "c": None}) == [2, 1]
  assert tu.tree_leaves([None, 1, (None,)]) == [1]
  assert tu.tree_structure(None).num_leaves == 0
  assert tu.tree_map(lambda x: x + 1, [None, 1]) == [None, 2]


@pytest.mark.parametrize("tree", TREES, ids=IDS)
def test_reduce_all_and_all_leaves(tree):
  f = lambda a, b: (a, b)
  assert tu.tree_reduce(f, tree, "init") == jtu.tree_reduce(f, tree, "init")
  assert tu.tree_all(tree) == jtu.tree_all(tree)
  assert tu.all_leaves([tree]) == jtu.all_leaves([tree])
  assert tu.all_leaves(tu.tree_leaves(tree))


def test_tree_reduce_and_all():
  assert tu.tree_reduce(operator.add, [1, (2, {"a": 3})]) == 6
  assert tu.tree_reduce(operator.add, [], 0) == 0
  with pytest.raises(TypeError):
    tu.tree_reduce(operator.add, [])
  assert tu.tree_all([True, {"a": 1}]) and not tu.tree_all([True, (0,)])
  assert tu.tree_all([])
  assert tu.all_leaves([1, "a", 2.0]) and not tu.all_leaves([1, [2]])
  assert tu.all_leaves([None]) == jtu.all_leaves([None])
  assert tu.all_leaves([[1]], is_leaf=lambda x: isinstance(x, list))


@pytest.mark.parametrize("inner_given", [True, False])
def test_tree_transpose_matches_jax(inner_given):
  outer = [{"a": 1, "b": (2, 3)}, {"a": 4, "b": (5, 6)}]
  outer_def = tu.tree_structure([0, 0])
  inner_def = tu.tree_structure({"a": 0, "b": (0, 0)}) if inner_given else None
  j_outer = jtu.tree_structure([0, 0])
  j_inner = jtu.tree_structure({"a": 0, "b": (0, 0)}) if inner_given else None
  assert tu.tree_transpose(outer_def, inner_def, outer) == jtu.tree_transpose(
      j_outer, j_inner, outer)


def test_treedef_helpers_match_jax():
  for tree in [1, None, [1, 2], {"a": (1,)}, Pair(1, 2)]:
    assert tu.treedef_is_leaf(tu.tree_structure(tree)) == jtu.treedef_is_leaf(
        jtu.tree_structure(tree))
  children = tu.treedef_children(tu.tree_structure({"a": [1, 2], "b": None}))
  assert [c.num_leaves for c in children] == [2, 0]


# ---------------------------------------------------------------------------
# Partial.

def _add(x, y, *, scale=1):
  return (x + y) * scale


def test_partial_leaves_paths_and_round_trip():
  p = tu.Partial(_add, [1, {"b": 2, "a": 3}], scale=2)
  jp = jtu.Partial(_add, [1, {"b": 2, "a": 3}], scale=2)
  assert tu.tree_leaves(p) == jtu.tree_leaves(jp) == [1, 3, 2, 2]
  assert _paths_repr(tu.tree_leaves_with_path(p)) == _paths_repr(jtu.tree_leaves_with_path(jp))
  assert [tu.keystr(k) for k, _ in tu.tree_leaves_with_path(p)] == [
      jtu.keystr(k) for k, _ in jtu.tree_leaves_with_path(jp)]
  leaves, treedef = tu.tree_flatten(p)
  q = tu.tree_unflatten(treedef, leaves)
  assert isinstance(q, tu.Partial) and q.func is _add
  assert q.args == p.args and q.keywords == p.keywords
  mapped = tu.tree_map(lambda x: x * 10, tu.Partial(_add, 1, scale=2))
  assert mapped(2) == (10 + 2) * 20


def test_partial_func_is_static():
  p1, p2 = tu.Partial(_add, 1), tu.Partial(_add, 2)
  assert tu.tree_structure(p1) == tu.tree_structure(p2)
  assert tu.tree_structure(p1) != tu.tree_structure(tu.Partial(max, 1))


def test_partial_of_functools_partial_keeps_inner_args_static():
  inner = functools.partial(_add, 100)
  p = tu.Partial(inner, scale=3)
  jp = jtu.Partial(inner, scale=3)
  assert tu.tree_leaves(p) == jtu.tree_leaves(jp) == [3]
  assert p(1) == jp(1) == 303
  leaves, treedef = tu.tree_flatten(p)
  assert tu.tree_unflatten(treedef, [4])(1) == 404
  assert tu.tree_structure(p) == tu.tree_structure(tu.Partial(inner, scale=5))


# ---------------------------------------------------------------------------
# Registration and errors.

def test_register_twice_raises_naming_the_type():
  class Twice:
    pass

  tu.register_pytree_node(Twice, lambda x: ((), None), lambda aux, c: Twice())
  with pytest.raises(ValueError, match="Twice"):
    tu.register_pytree_node(Twice, lambda x: ((), None), lambda aux, c: Twice())
  with pytest.raises(ValueError, match="already registered"):
    tu.register_pytree_with_keys(Twice, lambda x: ([], None), lambda aux, c: Twice())
  with pytest.raises(ValueError, match="Cell"):
    tu.register_pytree_node_class(Cell)


def test_register_builtin_raises():
  with pytest.raises(ValueError, match="list"):
    tu.register_pytree_node(list, lambda x: (x, None), lambda aux, c: list(c))


@pytest.mark.parametrize("leaves,word,got", [([1, 2], "few", 2), ([1, 2, 3, 4], "many", 4),
                                             ([], "few", 0)])
def test_unflatten_wrong_number_of_leaves(leaves, word, got):
  treedef = tu.tree_structure([1, (2, 3)])
  with pytest.raises(ValueError, match=f"Too {word} leaves for PyTreeDef; expected 3, got {got}"):
    tu.tree_unflatten(treedef, leaves)


def test_registration_is_namespaced():
  class Local:
    def __init__(self, x):
      self.x = x

  tu.register_pytree_node(Local, lambda n: ((n.x,), None), lambda aux, c: Local(*c))
  assert tu.tree_leaves([Local(1)]) == [1]
  # optree's default namespace (other optree users) still sees a leaf.
  leaves = optree.tree_leaves([Local(1)])
  assert len(leaves) == 1 and isinstance(leaves[0], Local)


def test_register_dataclass_inferred_fields_and_errors():
  @dataclasses.dataclass
  class Layer:
    w: object
    b: object
    act: str = dataclasses.field(default="relu", metadata={"static": True})

  tu.register_dataclass(Layer)
  layer = Layer([1, 2], 3, "tanh")
  assert tu.tree_leaves(layer) == [1, 2, 3]
  assert [tu.keystr(k) for k, _ in tu.tree_leaves_with_path(layer)] == [".w[0]", ".w[1]", ".b"]
  assert tu.tree_map(lambda x: x * 2, layer) == Layer([2, 4], 6, "tanh")
  assert tu.tree_structure(layer) != tu.tree_structure(Layer([1, 2], 3, "relu"))

  @dataclasses.dataclass
  class Bad:
    a: int
    b: int

  with pytest.raises(ValueError, match="Missing fields"):
    tu.register_dataclass(Bad, data_fields=["a"], meta_fields=[])
  with pytest.raises(TypeError, match="not a dataclass"):
    tu.register_dataclass(Pair)


def test_register_static():
  tree = [Config(4), 1]
  leaves, treedef = tu.tree_flatten(tree)
  assert leaves == [1]
  assert tu.tree_unflatten(treedef, [2]) == [Config(4), 2]
  assert tu.tree_structure([Config(5), 1]) != treedef


# ---------------------------------------------------------------------------
# Random nested trees.

_keys = st.sampled_from(["a", "b", "c", "zz", "B", "_"])
_leaf = st.one_of(st.integers(-5, 5), st.text("xyz", max_size=2), st.none())


def _containers(children):
  return st.one_of(
      st.lists(children, max_size=4),
      st.lists(children, max_size=4).map(tuple),
      st.dictionaries(_keys, children, max_size=4),
      st.tuples(children, children).map(lambda t: Point(*t)),
      st.tuples(children, children).map(lambda t: Pair(*t)),
      st.tuples(children, children, st.dictionaries(_keys, children, max_size=2)).map(
          lambda t: Linear(*t)),
      st.lists(children, max_size=3).map(lambda xs: Stack(*xs)),
  )


@settings(max_examples=150, deadline=None)
@given(st.recursive(_leaf, _containers, max_leaves=25))
def test_random_trees_match_jax(tree):
  leaves, treedef = tu.tree_flatten(tree)
  jleaves, jtreedef = jtu.tree_flatten(tree)
  assert leaves == jleaves
  assert treedef.num_nodes == jtreedef.num_nodes
  assert tu.tree_unflatten(treedef, leaves) == tree
  assert _paths_repr(tu.tree_leaves_with_path(tree)) == _paths_repr(
      jtu.tree_leaves_with_path(tree))
  f = lambda x: (x,)
  assert tu.tree_map(f, tree) == jtu.tree_map(f, tree)


# ---------------------------------------------------------------------------
# Treedefs in messages are written as JAX writes them (`PyTreeDef(...)`)

import collections as _collections  # noqa: E402
import dataclasses as _dataclasses  # noqa: E402

import stagecraft as sc  # noqa: E402

_Point = _collections.namedtuple("_Point", "a b")


@_dataclasses.dataclass
class _DC:
  x: int
  y: int


def _treedef_cases(lib):
  for reg in (lib.tree_util.register_dataclass,):
    try:
      reg(_DC, ["x"], ["y"])
    except ValueError:   # registered by an earlier call
      pass
  return [(1, 2), [1, (2,)], {"b": 1, "a": None}, None, (), [[]], (1,), 1,
          _Point(1, [2]), _collections.OrderedDict(b=1, a=2),
          _collections.defaultdict(list, a=1), _DC(1, 2),
          lib.tree_util.Partial(print, 1), {"a": (_Point(1, [2]),)}, lib.ad.DidntWant()]


def test_treedef_str_is_jax_repr():
  import jax
  ours = [sc.tree_util.treedef_str(sc.tree.structure(t)) for t in _treedef_cases(sc)]
  theirs = [str(jax.tree.structure(t)) for t in _treedef_cases(jax)]
  assert ours == theirs


def _message(thunk):
  try:
    thunk()
  except Exception as e:  # noqa: BLE001 (the test compares any exception)
    return type(e).__name__, str(e).split("\n")[0]
  raise AssertionError("no exception")


@pytest.mark.parametrize("case", ["jvp_trees", "while_body", "custom_jvp_trees",
                                  "linearize_trees", "optimizers"])
def test_structure_messages_as_jax(case):
  import jax
  import jax.example_libraries.optimizers as jopt
  import stagecraft.example_libraries.optimizers as sopt

  def run(lib, opt):
    if case == "jvp_trees":
      return lambda: lib.jvp(lambda x, y: x, (1.0, 2.0), (1.0, [2.0]))
    if case == "while_body":
      return lambda: lib.lax.while_loop(lambda c: False, lambda c: [c[0], c[1]], (1.0, 2.0))
    if case == "custom_jvp_trees":
      f = lib.custom_jvp(lambda x: x)
      f.defjvp(lambda p, t: ((p[0], p[0]), t[0]))
      return lambda: lib.jvp(f, (1.0,), (1.0,))
    if case == "linearize_trees":
      _, f_lin = lib.linearize(lambda x, y: x, 1.0, 2.0)
      return lambda: f_lin(1.0)
    init, update, _ = opt.sgd(0.1)
    state = init({"w": 1.0, "b": 2.0})
    return lambda: update(0, {"w": 1.0}, state)

  ours = _message(run(sc, sopt))
  theirs = _message(run(jax, jopt))
  assert ours == theirs


def _prefix_cases(lib, sh):
  """Calls whose pytree prefixes do not fit their values (`lib`: stagecraft or jax)."""
  import numpy as np
  mesh = lib.make_mesh((2,), ("x",), axis_types=(sh.AxisType.Auto,))
  s = sh.NamedSharding(mesh, sh.PartitionSpec())
  x = np.ones(4, np.float32)
  return {
      "jit in_shardings length": lambda: lib.jit(lambda a: a, in_shardings=(s, s))(x),
      "jit in_shardings singleton": lambda: lib.jit(lambda a: a, in_shardings=(s, s))((x, x)),
      "jit in_shardings dict": lambda: lib.jit(lambda a: a, in_shardings=({"a": s},))(
          {"b": x}),
      "jit out_shardings": lambda: lib.jit(lambda a: (a, a), out_shardings=(s, s, s))(x),
      "vmap in_axes dict": lambda: lib.vmap(lambda a: a, in_axes=({"a": 0},))({"b": x}),
      "vmap out_axes": lambda: lib.vmap(lambda a: (a, a), out_axes=(0, 0, 0))(x),
      "vmap nested": lambda: lib.vmap(lambda a: a, in_axes=({"a": 0, "b": 0},))({"a": x}),
      "pmap in_axes": lambda: lib.pmap(lambda a: a, in_axes=(0, 0))(np.ones((2, 2))),
      "tree.map": lambda: lib.tree.map(lambda a, b: a, (1, 2), (1, 2, 3)),
      "tree.map dict": lambda: lib.tree.map(lambda a, b: a, {"a": 1, "b": 2},
                                            {"a": 1, "c": 2}),
      "tree.map nested": lambda: lib.tree.map(lambda a, b: a, {"a": [1, 2]}, {"a": [1, 2, 3]}),
      "tree.map type": lambda: lib.tree.map(lambda a, b: a, [1, 2], (1, 2)),
      "tree_map_with_path": lambda: lib.tree_util.tree_map_with_path(lambda p, a, b: a, [1, 2],
                                                                     [1]),
      "device_put": lambda: lib.device_put((x, x), (s, s, s)),
      "device_put dict": lambda: lib.device_put({"a": x}, {"b": s}),
  }


def test_prefix_errors_of_the_api_as_jax():
  """jit's shardings, vmap's and pmap's axes, tree maps and device_put report a prefix that
  does not fit its value with JAX's "pytree structure error" messages; a list of in_shardings
  stands for the arguments tuple, as in JAX."""
  import jax
  import jax.sharding as jsh
  import numpy as np

  import stagecraft as sc
  import stagecraft.sharding as ssh
  ours, theirs = _prefix_cases(sc, ssh), _prefix_cases(jax, jsh)
  for name in ours:
    with pytest.raises(ValueError) as want:
      theirs[name]()
    with pytest.raises(ValueError) as got:
      ours[name]()
    assert str(got.value).split("\n----")[0] == str(want.value).split("\n----")[0], name
  mesh = sc.make_mesh((2,), ("x",), axis_types=(ssh.AxisType.Auto,))
  s = ssh.NamedSharding(mesh, ssh.PartitionSpec())
  out = sc.jit(lambda a, b: a + b, in_shardings=[s, s])(np.ones(2), np.ones(2))
  np.testing.assert_array_equal(np.asarray(out), [2.0, 2.0])
