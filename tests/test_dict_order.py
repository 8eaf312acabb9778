"""Dicts come back with their keys sorted, as JAX rebuilds them (its treedefs store the
sorted keys), from tree functions and from transformations: printed results then read the
same as under JAX."""
import collections

import jax
import numpy as np
import pytest

import stagecraft as sc

TREES = [
    {"b": 1.0, "a": {"d": 2.0, "c": 3.0}},
    [{"z": 1.0, "y": (2.0, {"q": 1.0, "p": None})}],
    collections.defaultdict(list, {"b": 1.0, "a": 2.0}),
    collections.OrderedDict([("b", 1.0), ("a", 2.0)]),     # JAX keeps its order
]


@pytest.mark.parametrize("tree", TREES, ids=range(len(TREES)))
def test_tree_functions_rebuild_like_jax(tree):
  for name, f in (("tree_map", lambda x: x), ("tree_map_with_path", lambda p, x: x)):
    assert repr(getattr(sc.tree_util, name)(f, tree)) == repr(getattr(jax.tree_util, name)(f, tree))
  leaves, treedef = sc.tree_util.tree_flatten(tree)
  want = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(tree), leaves)
  assert repr(sc.tree_util.tree_unflatten(treedef, leaves)) == repr(want)
  assert repr(sc.tree.map(lambda x: x, tree)) == repr(jax.tree.map(lambda x: x, tree))


def test_canonical_treedef_is_equal_and_cached():
  t = sc.tree_util.tree_structure({"b": 1, "a": 2})
  c = sc.tree_util.canonical_treedef(t)
  assert c == t and sc.tree_util.canonical_treedef(t) is c
