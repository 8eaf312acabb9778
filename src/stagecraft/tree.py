"""`stagecraft.tree`: JAX's short names for the pytree functions of `stagecraft.tree_util`.

`tree.map` is `tree_util.tree_map`, `tree.leaves` is `tree_util.tree_leaves`, and so on, with
the same arguments and results (`jax.tree`).

  >>> import stagecraft as sc
  >>> sc.tree.map(lambda x: x * 2, {'a': 1, 'b': [2, None]})
  {'a': 2, 'b': [4, None]}
  >>> sc.tree.leaves({'b': (3, 4), 'a': 1})
  [1, 3, 4]
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from stagecraft import tree_util
from stagecraft.tree_util import PyTreeDef

__all__ = ["all", "broadcast", "flatten", "flatten_with_path", "leaves", "leaves_with_path",
           "map", "map_with_path", "reduce", "reduce_associative", "static", "structure",
           "transpose", "unflatten"]

T = TypeVar("T")
_UNSPECIFIED = tree_util.UNSPECIFIED


def all(tree: Any, *, is_leaf: Callable[[Any], bool] | None = None) -> bool:
  """Whether every leaf of `tree` is truthy (True for a tree without leaves)."""
  return tree_util.tree_all(tree, is_leaf=is_leaf)


def broadcast(prefix_tree: Any, full_tree: Any,
              is_leaf: Callable[[Any], bool] | None = None) -> Any:
  """`full_tree`'s structure with each leaf of `prefix_tree` copied to the leaves of the
  subtree it stands for (`tree_util.tree_broadcast`).

    >>> broadcast((1, 2, 3), (0, {'a': 0, 'b': 0}, (0, 0)))
    (1, {'a': 2, 'b': 2}, (3, 3))

  Raises:
    ValueError: if `prefix_tree` is not a tree prefix of `full_tree`.
  """
  return tree_util.tree_broadcast(prefix_tree, full_tree, is_leaf=is_leaf)


def flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None
            ) -> tuple[list[Any], PyTreeDef]:
  """`(leaves, treedef)` of `tree` (`tree_util.tree_flatten`)."""
  return tree_util.tree_flatten(tree, is_leaf)


def flatten_with_path(tree: Any, is_leaf: Callable[..., bool] | None = None,
                      is_leaf_takes_path: bool = False) -> tuple[list[tuple[Any, Any]], PyTreeDef]:
  """`([(key_path, leaf), ...], treedef)` of `tree` (`tree_util.tree_flatten_with_path`)."""
  return tree_util.tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)


def leaves(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> list[Any]:
  """The leaves of `tree`, left to right, dict keys sorted (`tree_util.tree_leaves`)."""
  return tree_util.tree_leaves(tree, is_leaf)


def leaves_with_path(tree: Any, is_leaf: Callable[..., bool] | None = None,
                     is_leaf_takes_path: bool = False) -> list[tuple[Any, Any]]:
  """The `(key_path, leaf)` pairs of `tree` (`tree_util.tree_leaves_with_path`)."""
  return tree_util.tree_leaves_with_path(tree, is_leaf, is_leaf_takes_path)


def map(f: Callable[..., Any], tree: Any, *rest: Any,
        is_leaf: Callable[[Any], bool] | None = None) -> Any:
  """`f` applied leafwise over `tree` and the trees in `rest` (`tree_util.tree_map`).

  Raises:
    ValueError: if a tree in `rest` does not have `tree`'s structure as a prefix.
  """
  return tree_util.tree_map(f, tree, *rest, is_leaf=is_leaf)


def map_with_path(f: Callable[..., Any], tree: Any, *rest: Any,
                  is_leaf: Callable[..., bool] | None = None,
                  is_leaf_takes_path: bool = False) -> Any:
  """`f(key_path, x, *xs)` applied leafwise (`tree_util.tree_map_with_path`).

    >>> map_with_path(lambda path, x: x + path[0].idx, [1, 2, 3])
    [1, 3, 5]
  """
  return tree_util.tree_map_with_path(f, tree, *rest, is_leaf=is_leaf,
                                      is_leaf_takes_path=is_leaf_takes_path)


def reduce(function: Callable[[T, Any], T], tree: Any, initializer: Any = _UNSPECIFIED,
           is_leaf: Callable[[Any], bool] | None = None) -> T:
  """`functools.reduce(function, leaves(tree), initializer)` (`tree_util.tree_reduce`).

  Raises:
    TypeError: if `tree` has no leaves and no `initializer` is given.
  """
  return tree_util.tree_reduce(function, tree, initializer, is_leaf)


def reduce_associative(operation: Callable[[T, T], T], tree: Any, *,
                       identity: Any = _UNSPECIFIED,
                       is_leaf: Callable[[Any], bool] | None = None) -> T:
  """Reduces the leaves with an associative `operation` as a balanced tree of calls
  (`tree_util.tree_reduce_associative`).

    >>> import operator
    >>> reduce_associative(operator.add, [1, (2, 3), [4, 5, 6]])
    21

  Raises:
    TypeError: if `tree` has no leaves and no `identity` is given.
  """
  return tree_util.tree_reduce_associative(operation, tree, identity=identity,
                                           is_leaf=is_leaf)


def static(**kwargs) -> Any:
  """A `dataclasses.field(**kwargs)` marked static (`metadata={'static': True}`), so that
  `tree_util.register_dataclass` keeps it in the treedef instead of making it a leaf.

    >>> @tree_util.register_dataclass
    ... @dataclasses.dataclass
    ... class Op:
    ...   x: Any
    ...   op: str = static(default="add")
    >>> leaves(Op(x=1.0))
    [1.0]
  """
  metadata = {"static": True, **(kwargs.pop("metadata", None) or {})}
  return dataclasses.field(metadata=metadata, **kwargs)


def structure(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> PyTreeDef:
  """The treedef of `tree` (`tree_util.tree_structure`)."""
  return tree_util.tree_structure(tree, is_leaf)


def transpose(outer_treedef: PyTreeDef, inner_treedef: PyTreeDef | None,
              pytree_to_transpose: Any) -> Any:
  """An outer tree of inner trees turned into an inner tree of outer trees
  (`tree_util.tree_transpose`)."""
  return tree_util.tree_transpose(outer_treedef, inner_treedef, pytree_to_transpose)


def unflatten(treedef: PyTreeDef, leaves: Iterable[Any]) -> Any:
  """The pytree of structure `treedef` with `leaves` (`tree_util.tree_unflatten`).

  Raises:
    ValueError: if the number of leaves is not `treedef.num_leaves`.
  """
  return tree_util.tree_unflatten(treedef, leaves)
