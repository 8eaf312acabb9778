"""`tree_util.PyTreeDef`: the treedefs of the public pytree functions print, compare, hash,
pickle and answer JAX's methods as JAX 0.10.2's, run side by side with JAX."""
import collections
import copy
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import optree
import pytest

import stagecraft as sc
import stagecraft.numpy as snp
from stagecraft import tree_util

Point = collections.namedtuple("Point", "x y")


class Box:
  def __init__(self, v, tag):
    self.v, self.tag = v, tag


for _lib in (jax.tree_util, tree_util):
  _lib.register_pytree_node(Box, lambda b: ((b.v,), b.tag), lambda tag, ch: Box(ch[0], tag))

TREES = [
    [1, (2, 3), {"a": 4}], (1,), {"b": 1, "a": None}, None, 1.0, Point(1, [2]),
    collections.OrderedDict(b=1, a=2), collections.defaultdict(list, {"b": 1, "a": 2}),
    Box([1, 2], "T"), Box(3, ("k", 1)), [], {}, ((),),
]


@pytest.mark.parametrize("tree", TREES, ids=range(len(TREES)))
def test_structure_prints_and_answers_as_jax(tree):
  ours, theirs = sc.tree.structure(tree), jax.tree.structure(tree)
  assert repr(ours) == repr(theirs) and str(ours) == str(theirs)
  assert ours.num_leaves == theirs.num_leaves and ours.num_nodes == theirs.num_nodes
  assert ours.node_data() == theirs.node_data()
  assert [repr(c) for c in ours.children()] == [repr(c) for c in theirs.children()]
  leaves = list(range(10, 10 + ours.num_leaves))
  assert repr(ours.unflatten(leaves)) == repr(theirs.unflatten(leaves)) or isinstance(
      tree, Box)
  assert isinstance(ours, sc.tree_util.PyTreeDef)


def test_flatten_functions_return_pytreedefs():
  tree = {"b": [1, 2], "a": (3, None)}
  for ours, theirs in [(tree_util.tree_flatten(tree)[1], jax.tree_util.tree_flatten(tree)[1]),
                       (sc.tree.flatten(tree)[1], jax.tree.flatten(tree)[1]),
                       (tree_util.tree_flatten_with_path(tree)[1],
                        jax.tree_util.tree_flatten_with_path(tree)[1]),
                       (tree_util.treedef_tuple([tree_util.tree_structure(1)] * 2),
                        jax.tree_util.treedef_tuple([jax.tree.structure(1)] * 2))]:
    assert type(ours) is tree_util.PyTreeDef
    assert repr(ours) == repr(theirs)
  kids = tree_util.treedef_children(tree_util.tree_structure(tree))
  assert [repr(k) for k in kids] == [
      repr(k) for k in jax.tree_util.treedef_children(jax.tree.structure(tree))]
  assert all(type(k) is tree_util.PyTreeDef for k in kids)


def test_equality_hash_and_pickle():
  a = sc.tree.structure([1, (2, 3)])
  b = sc.tree.structure([4, (5, 6)])
  c = sc.tree.structure([4, [5, 6]])
  assert a == b and hash(a) == hash(b) and a != c and not (a == c)
  assert {a: 1}[b] == 1
  assert a != 3 and not (a == "x")
  raw = optree.tree_structure([0, (0, 0)], namespace=tree_util.NAMESPACE)
  assert a == raw and raw == a   # the transformations' optree specs compare equal
  assert tree_util.spec_of(a) == raw and tree_util.spec_of(raw) is raw
  for copied in (pickle.loads(pickle.dumps(a)), copy.copy(a), copy.deepcopy(a)):
    assert copied == a and type(copied) is tree_util.PyTreeDef
  with pytest.raises(AttributeError, match="immutable"):
    a.spec = raw
  with pytest.raises(TypeError, match="expected a tree structure"):
    tree_util.PyTreeDef([1, 2])


def test_compose_walk_and_from_node_data_and_children():
  outer_s, outer_j = sc.tree.structure((1, 2)), jax.tree.structure((1, 2))
  inner_s, inner_j = sc.tree.structure([1, 1]), jax.tree.structure([1, 1])
  assert repr(outer_s.compose(inner_s)) == repr(outer_j.compose(inner_j))
  f_node = lambda kids, data: ("N", kids, data)
  f_leaf = lambda x: ("L", x)
  for tree in ([1, (2, 3)], {"a": 1, "b": [2]}, Point(1, None)):
    leaves = list(range(10, 10 + len(jax.tree.leaves(tree))))
    assert (sc.tree.structure(tree).walk(f_node, f_leaf, leaves) ==
            jax.tree.structure(tree).walk(f_node, f_leaf, leaves))
  for node_data, kids in [((list, None), [1, (1, 2)]), ((dict, ["x", "y"]), [1, (1, 2)]),
                          ((tuple, None), []), ((type(None), None), []),
                          ((Point, None), [1, [1]]), ((Box, "Q"), [(1, 2)])]:
    ours = tree_util.PyTreeDef.from_node_data_and_children(
        tree_util.default_registry, node_data, [sc.tree.structure(k) for k in kids])
    theirs = jax.tree_util.PyTreeDef.from_node_data_and_children(
        jax.tree_util.default_registry, node_data, [jax.tree.structure(k) for k in kids])
    assert repr(ours) == repr(theirs)
  with pytest.raises(ValueError, match="not a registered pytree node type"):
    tree_util.PyTreeDef.from_node_data_and_children(tree_util.default_registry,
                                                    (set, None), [])


def test_treedef_functions_accept_either_kind():
  treedef = sc.tree.structure({"a": 0, "b": (0, 0)})
  raw = tree_util.spec_of(treedef)
  for t in (treedef, raw):
    assert tree_util.tree_unflatten(t, [1, 2, 3]) == {"a": 1, "b": (2, 3)}
    assert tree_util.treedef_is_leaf(t) is False
    assert tree_util.tree_transpose(t, None, {"a": [1, 2], "b": ([3, 4], [5, 6])}) == [
        {"a": 1, "b": (3, 5)}, {"a": 2, "b": (4, 6)}]
  with pytest.raises(ValueError, match=r"Too few leaves for PyTreeDef; expected 3, got 1"):
    treedef.unflatten([1])
  # optree's own methods are reached through the PyTreeDef
  assert treedef.is_leaf() is False and list(treedef.entries()) == ["a", "b"]


def test_compiled_trees_are_pytreedefs():
  ours = sc.jit(lambda x, y: {"o": x + y}).lower(1.0, 2.0).compile()
  theirs = jax.jit(lambda x, y: {"o": x + y}).lower(1.0, 2.0).compile()
  assert repr(ours.in_tree) == repr(theirs.in_tree)
  assert repr(ours.out_tree) == repr(theirs.out_tree)
  data = ours.serialize()
  again = sc.stages.deserialize_compiled(data, ours.in_tree, ours.out_tree)
  np.testing.assert_allclose(np.asarray(again(snp.float32(1), snp.float32(2))["o"]), 3.0)
  np.testing.assert_allclose(np.asarray(theirs(jnp.float32(1), jnp.float32(2))["o"]), 3.0)
