"""stagecraft.tree (and the tree_util names added with it) against jax.tree / jax.tree_util:
nested dicts, lists, tuples, None, namedtuples and custom nodes registered the same way in
both systems."""
import collections
import dataclasses
import operator
from typing import Any

import jax
import jax.tree_util as jtu
import numpy as np
import pytest
from hypothesis import given, strategies as st

import stagecraft as sc
import stagecraft.tree as tree
import stagecraft.tree_util as tu

NT = collections.namedtuple("NT", ["a", "b"])


class Node:
  """A custom node registered without keys."""

  def __init__(self, left, right, tag="n"):
    self.left, self.right, self.tag = left, right, tag

  def __eq__(self, other):
    return (type(other) is Node
            and (self.left, self.right, self.tag) == (other.left, other.right, other.tag))

  def __repr__(self):
    return f"Node({self.left!r}, {self.right!r}, {self.tag!r})"


class KNode:
  """A custom node registered with keys."""

  def __init__(self, w, b):
    self.w, self.b = w, b

  def __eq__(self, other):
    return type(other) is KNode and (self.w, self.b) == (other.w, other.b)

  def __repr__(self):
    return f"KNode({self.w!r}, {self.b!r})"


for reg in (jtu.register_pytree_node, tu.register_pytree_node):
  reg(Node, lambda n: ((n.left, n.right), n.tag), lambda tag, ch: Node(*ch, tag))
for reg, mod in ((jtu.register_pytree_with_keys, jtu), (tu.register_pytree_with_keys, tu)):
  reg(KNode, lambda k, m=mod: (((m.GetAttrKey("w"), k.w), (m.GetAttrKey("b"), k.b)), None),
      lambda _, ch: KNode(*ch))


@dataclasses.dataclass
class Op:
  x: Any
  y: Any
  op: str = "add"


@dataclasses.dataclass
class JOp:
  x: Any
  y: Any
  op: str = jax.tree.static(default="add")


@dataclasses.dataclass
class SOp:
  x: Any
  y: Any
  op: str = tree.static(default="add")


jtu.register_dataclass(JOp)
tu.register_dataclass(SOp)

TREES = [
    {"b": [1, (2, None)], "a": 3},
    [1, [2, [3, [4]]], {"x": None, "y": (5,)}],
    (None, [], {}, ()),
    NT(1, [2, 3]),
    Node(1, {"z": [2, Node(3, 4, "inner")]}),
    {"k": KNode(1.5, [2.5, None]), "n": Node(None, 7)},
    7,
    None,
]


def _ks(pairs, mod):
  return [(mod.keystr(p), x) for p, x in pairs]


@pytest.mark.parametrize("t", TREES, ids=repr)
def test_leaves_structure_flatten_unflatten(t):
  assert tree.leaves(t) == jax.tree.leaves(t)
  leaves, treedef = tree.flatten(t)
  jleaves, jtreedef = jax.tree.flatten(t)
  assert leaves == jleaves
  assert treedef.num_leaves == jtreedef.num_leaves
  assert tree.structure(t) == treedef
  assert tree.unflatten(treedef, leaves) == t
  assert tree.unflatten(treedef, [x * 10 for x in leaves]) == jax.tree.unflatten(
      jtreedef, [x * 10 for x in jleaves])


@pytest.mark.parametrize("t", TREES, ids=repr)
def test_map_and_map_with_path(t):
  assert tree.map(lambda x: x + 1, t) == jax.tree.map(lambda x: x + 1, t)
  assert tree.map(operator.add, t, t) == jax.tree.map(operator.add, t, t)
  ours = tree.map_with_path(lambda p, x: (tu.keystr(p), x), t)
  theirs = jax.tree.map_with_path(lambda p, x: (jtu.keystr(p), x), t)
  assert tree.leaves(ours, is_leaf=lambda x: isinstance(x, tuple) and len(x) == 2
                     and isinstance(x[0], str)) == jax.tree.leaves(
      theirs, is_leaf=lambda x: isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str))


@pytest.mark.parametrize("t", TREES, ids=repr)
def test_with_path(t):
  assert _ks(tree.leaves_with_path(t), tu) == _ks(jax.tree.leaves_with_path(t), jtu)
  pairs, treedef = tree.flatten_with_path(t)
  jpairs, jtreedef = jax.tree.flatten_with_path(t)
  assert _ks(pairs, tu) == _ks(jpairs, jtu)
  assert treedef.num_leaves == jtreedef.num_leaves


def test_is_leaf_and_is_leaf_takes_path():
  t = {"a": [1, None, (2, 3)], "b": (4, [5, 6]), "c": KNode([7], 8)}
  is_tuple = lambda x: isinstance(x, tuple)
  assert tree.leaves(t, is_leaf=is_tuple) == jax.tree.leaves(t, is_leaf=is_tuple)
  # A path-aware predicate: stop at depth 2.
  deep = lambda p, x: len(p) >= 2
  for fn, jfn in ((tree.leaves_with_path, jax.tree.leaves_with_path),):
    assert (_ks(fn(t, deep, is_leaf_takes_path=True), tu)
            == _ks(jfn(t, deep, is_leaf_takes_path=True), jtu))
  pairs, treedef = tree.flatten_with_path(t, deep, is_leaf_takes_path=True)
  jpairs, jtreedef = jax.tree.flatten_with_path(t, deep, is_leaf_takes_path=True)
  assert _ks(pairs, tu) == _ks(jpairs, jtu)
  assert treedef.num_leaves == jtreedef.num_leaves == 7
  assert tree.unflatten(treedef, [x for _, x in pairs]) == t
  f = lambda p, x: len(p)
  assert (tree.map_with_path(f, t, is_leaf=deep, is_leaf_takes_path=True)
          == jax.tree.map_with_path(f, t, is_leaf=deep, is_leaf_takes_path=True))
  # A predicate that is never true gives the plain structure.
  _, plain = tree.flatten_with_path(t, lambda p, x: False, is_leaf_takes_path=True)
  assert plain == tree.structure(t)


@pytest.mark.parametrize("t", TREES, ids=repr)
def test_reduce_all(t):
  assert tree.reduce(operator.add, t, 0) == jax.tree.reduce(operator.add, t, 0)
  if jax.tree.leaves(t):
    assert tree.reduce(operator.add, t) == jax.tree.reduce(operator.add, t)
    assert (tree.reduce_associative(operator.add, t)
            == jax.tree.reduce_associative(operator.add, t))
  assert tree.all(t) == jax.tree.all(t)


def test_reduce_errors_and_identity():
  with pytest.raises(TypeError):
    tree.reduce(operator.add, [])
  with pytest.raises(TypeError, match="Must specify identity for parallel reduction"):
    tree.reduce_associative(operator.add, [None, {}])
  assert tree.reduce_associative(operator.add, [], identity=0) == 0
  assert tree.all([1, (True, None)]) and not tree.all([1, (0,)])


@pytest.mark.parametrize("n", range(1, 10))
def test_reduce_associative_order_of_calls(n):
  xs = list(range(n))
  pair = lambda a, b: (a, b)
  assert tree.reduce_associative(pair, xs) == jax.tree.reduce_associative(pair, xs)
  # the tuples above are nodes, so the reduction is read back leafwise as well
  assert tree.leaves(tree.reduce_associative(pair, xs)) == xs


@pytest.mark.parametrize("prefix,full", [
    ((1, 2, 3), (0, {"a": 0, "b": 0}, (0, 0))),
    (1, [3, (4, None)]),
    ([1, {"a": 2}], [[3, 4], {"a": {"x": 5, "y": Node(6, 7)}}]),
    ({"k": 5}, {"k": KNode(1, [2, 3])}),
])
def test_broadcast(prefix, full):
  assert tree.broadcast(prefix, full) == jax.tree.broadcast(prefix, full)
  assert tu.tree_broadcast(prefix, full) == jtu.tree_broadcast(prefix, full)


def test_broadcast_errors():
  with pytest.raises(ValueError):
    tree.broadcast([1, 2], [1, 2, 3])
  with pytest.raises(ValueError):
    jax.tree.broadcast([1, 2], [1, 2, 3])


def test_transpose():
  outer = [{"a": 1, "b": 2}, {"a": 3, "b": 4}, {"a": 5, "b": 6}]
  ours = tree.transpose(tree.structure([0, 0, 0]), tree.structure({"a": 0, "b": 0}), outer)
  theirs = jax.tree.transpose(jax.tree.structure([0, 0, 0]),
                              jax.tree.structure({"a": 0, "b": 0}), outer)
  assert ours == theirs == {"a": [1, 3, 5], "b": [2, 4, 6]}
  assert tree.transpose(tree.structure([0, 0, 0]), None, outer) == theirs


def test_static_dataclass_field():
  s, j = SOp(1.0, np.arange(2)), JOp(1.0, np.arange(2))
  assert len(tree.leaves(s)) == len(jax.tree.leaves(j)) == 2
  f = dataclasses.fields(SOp)[2]
  assert f.metadata["static"] is True and f.default == "add"
  assert dataclasses.fields(JOp)[2].metadata == f.metadata
  s2 = tree.map(lambda x: x * 2, SOp(1.0, 2.0, "mul"))
  assert s2 == SOp(2.0, 4.0, "mul")
  extra = tree.static(default=1, metadata={"doc": "x"})
  assert extra.metadata == {"static": True, "doc": "x"}


# ---------------------------------------------------------------------------
# tree_util additions

ONE_LEVEL = [
    {"b": 1, "a": [2]},
    [1, None],
    (1, (2,)),
    None,
    NT(1, 2),
    collections.OrderedDict(b=1, a=2),
    collections.defaultdict(int, b=1, a=2),
    Node(1, 2, "t"),
    KNode(1, 2),
]


@pytest.mark.parametrize("t", ONE_LEVEL, ids=repr)
def test_flatten_one_level(t):
  ch, aux = tu.flatten_one_level(t)
  jch, jaux = jtu.flatten_one_level(t)
  assert list(ch) == list(jch)
  assert aux == jaux
  pairs, aux = tu.flatten_one_level_with_keys(t)
  jpairs, jaux = jtu.flatten_one_level_with_keys(t)
  assert [x for _, x in pairs] == [x for _, x in jpairs]
  if not isinstance(t, NT):   # NB: JAX 0.10.2 gives both namedtuple fields the first name
    assert [str(k) for k, _ in pairs] == [str(k) for k, _ in jpairs]
  assert aux == jaux
  assert tu.default_registry.flatten_one_level(t)[1] == jtu.default_registry.flatten_one_level(
      t)[1]


def test_flatten_one_level_of_a_leaf():
  for leaf in (1, "a", np.ones(2), sc.numpy.ones(2)):
    with pytest.raises(ValueError, match="can't tree-flatten type"):
      tu.flatten_one_level(leaf)
    with pytest.raises(ValueError, match="can't tree-flatten type"):
      tu.flatten_one_level_with_keys(leaf)
    assert tu.default_registry.flatten_one_level(leaf) is None
  assert [str(k) for k, _ in tu.flatten_one_level_with_keys(NT(1, 2))[0]] == [".a", ".b"]


@pytest.mark.parametrize("typ", [dict, list, tuple, type(None), NT, Node, KNode, SOp,
                                 collections.OrderedDict, collections.defaultdict,
                                 tu.Partial, int, float, str, np.ndarray, object])
def test_is_tree_node(typ):
  jtyp = {SOp: JOp, tu.Partial: jtu.Partial}.get(typ, typ)
  assert tu.is_tree_node(typ) == jtu.is_tree_node(jtyp)
  assert tu.default_registry.is_node(typ) == tu.is_tree_node(typ)


def test_treedef_tuple():
  parts = [[1, 2], {"a": 3}, None, Node(4, 5)]
  td = tu.treedef_tuple([tu.tree_structure(p) for p in parts])
  jtd = jtu.treedef_tuple([jtu.tree_structure(p) for p in parts])
  assert td.num_leaves == jtd.num_leaves == 5
  assert td == tu.tree_structure(tuple(parts))
  assert tu.tree_unflatten(td, range(5)) == jtu.tree_unflatten(jtd, range(5))


def test_default_registry():
  r = tu.default_registry
  t = {"a": [1, None], "b": Node(2, 3)}
  leaves, td = r.flatten(t)
  assert leaves == jtu.default_registry.flatten(t)[0]
  assert td == tu.tree_structure(t)
  assert [x for _, x in r.flatten_with_path(t)[0]] == leaves
  pairs, aux = r.flatten_one_level_with_keys({"b": 1, "a": 2})
  assert [str(k) for k, _ in pairs] == ["['a']", "['b']"] and aux == ("a", "b")

  class Box:
    def __init__(self, v):
      self.v = v
  r.register_node(Box, lambda b: ((b.v,), None), lambda _, ch: Box(*ch))
  assert tree.leaves([Box(3), Box((4, 5))]) == [3, 4, 5]
  assert tu.is_tree_node(Box)


_leaf = st.one_of(st.integers(-5, 5), st.none())
_trees = st.recursive(
    _leaf, lambda c: st.one_of(st.lists(c, max_size=3), st.tuples(c, c),
                               st.dictionaries(st.sampled_from("abc"), c, max_size=3)),
    max_leaves=10)


@given(_trees)
def test_random_trees_against_jax(t):
  assert tree.leaves(t) == jax.tree.leaves(t)
  assert tree.map(lambda x: x * 2, t) == jax.tree.map(lambda x: x * 2, t)
  assert _ks(tree.leaves_with_path(t), tu) == _ks(jax.tree.leaves_with_path(t), jtu)
  assert tree.structure(t).num_leaves == jax.tree.structure(t).num_leaves
  pair = lambda a, b: [a, b]
  assert (tree.reduce_associative(pair, t, identity=None)
          == jax.tree.reduce_associative(pair, t, identity=None))
  assert tree.broadcast(0, t) == jax.tree.broadcast(0, t)
