"""Structured control flow. For now `map`; cond, while_loop, fori_loop and scan (with `map`
rebuilt on scan) arrive with the control-flow issue."""
from __future__ import annotations

from typing import Any, Callable

import optree

from stagecraft import core, tree_util

__all__ = ["map"]


def map(f: Callable[[Any], Any], xs: Any, *, batch_size: int | None = None) -> Any:
  """Applies `f` to each slice of `xs` along its leading axis and stacks the results.

  Args:
    f: a function of one pytree slice `T[*s]` returning a pytree.
    xs: a pytree of arrays `T[n, *s]` sharing the leading dimension n.
    batch_size: must be None for now.

  Returns:
    The pytree of results of `f`, each stacked to `U[n, *u]`.

  Raises:
    ValueError: if the leaves of `xs` have different leading dimensions, or none.
    NotImplementedError: for `batch_size`.

  NB: until `scan` exists this unrolls the loop (n calls of `f` staged one after another),
  so compile time grows with n; the control-flow issue replaces it with a scan.
  """
  from stagecraft import numpy as jnp
  if batch_size is not None:
    raise NotImplementedError("lax.map(batch_size=...) arrives with scan (control flow).")
  leaves, treedef = tree_util.tree_flatten(xs)
  sizes = {core.get_aval(x).shape[0] if core.get_aval(x).shape else None for x in leaves}
  if not leaves or None in sizes or len(sizes) != 1:
    raise ValueError(f"lax.map: every leaf of xs needs the same leading dimension; got "
                     f"leading sizes {sorted(_leading_sizes(leaves), key=str)}.")
  n = sizes.pop()
  outs = [f(tree_util.tree_unflatten(treedef, [x[i] for x in leaves])) for i in range(n)]
  if n == 0:
    raise ValueError("lax.map over a leading dimension of size 0 needs scan (not yet).")
  return optree.tree_map(lambda *ys: jnp.stack(ys), *outs, none_is_leaf=False,
                         namespace=tree_util.NAMESPACE)


def _leading_sizes(leaves):
  return [core.get_aval(x).shape[0] if core.get_aval(x).shape else "scalar" for x in leaves]
