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


def _keys(tree):
  return ([list(t) for t in tree] if isinstance(tree, tuple) else list(tree))


D = {"b": np.float32(1.0), "a": np.float32(2.0)}
TRANSFORMS = {
    "jit": lambda lib: lib.jit(lambda d: d)(D),
    "jit_new_dict": lambda lib: lib.jit(lambda x: {"z": x, "y": x * 2})(np.float32(1)),
    "grad": lambda lib: lib.grad(lambda d: d["b"] * d["a"])(D),
    "vmap": lambda lib: lib.vmap(lambda x: {"z": x, "y": x})(np.ones(2, np.float32)),
    "scan": lambda lib: lib.lax.scan(
        lambda c, x: ({"q": c["q"] + x, "p": c["p"]}, {"z": x, "y": x}),
        {"q": np.float32(0), "p": np.float32(0)}, np.ones(2, np.float32)),
    "cond": lambda lib: lib.lax.cond(True, lambda: {"z": 1.0, "y": 2.0},
                                     lambda: {"z": 3.0, "y": 4.0}),
    "vjp": lambda lib: lib.vjp(lambda d: {"z": d["b"], "y": d["a"]}, D)[0],
    "eval_shape": lambda lib: lib.eval_shape(lambda x: {"z": x, "y": x}, np.float32(1)),
}


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_transformations_return_sorted_dicts_as_jax(name):
  assert _keys(TRANSFORMS[name](sc)) == _keys(TRANSFORMS[name](jax))
