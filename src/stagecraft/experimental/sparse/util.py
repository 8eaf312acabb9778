"""Helpers shared by the sparse formats (JAX's `jax.experimental.sparse.util`): the
`SparseInfo` param of the sparse primitives, the efficiency warnings and errors, and
`nfold_vmap`, which maps a function over leading batch dimensions."""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from stagecraft import api, core
from stagecraft.extend.core import concrete_or_error
import stagecraft.numpy as jnp

__all__ = ["SparseInfo", "SparseEfficiencyError", "SparseEfficiencyWarning",
           "CuSparseEfficiencyWarning", "nfold_vmap", "broadcast_batch", "count_stored_elements"]


class SparseEfficiencyError(ValueError):
  """An operation would densify a sparse array where that was asked to be an error."""


class SparseEfficiencyWarning(UserWarning):
  """An operation densifies a sparse array or stores more elements than it needs."""


class CuSparseEfficiencyWarning(SparseEfficiencyWarning):
  """cuSPARSE cannot run an operation (GPU only; never raised on CPU)."""


class SparseInfo(NamedTuple):
  """The static description of a sparse array carried by the sparse primitives as a param.

  Attributes:
    shape: the shape of the dense array it stands for.
    indices_sorted: whether the indices are sorted lexicographically (per batch).
    unique_indices: whether no index repeats (per batch).
  """
  shape: tuple[int, ...]
  indices_sorted: bool = False
  unique_indices: bool = False


def nfold_vmap(fun: Callable, n: int, *, broadcasted: bool = True, in_axes: Any = 0) -> Callable:
  """`fun` mapped `n` times over the leading axis of its arguments (nested `vmap`s).

  Args:
    fun: a function of arrays.
    n: how many leading batch dimensions to map over (0: `fun` itself).
    broadcasted: accepted for JAX's signature; arguments must already share the batch shape
      (see `broadcast_batch`).
    in_axes: as `vmap`'s, applied at every level.
  """
  for _ in range(n):
    fun = api.vmap(fun, in_axes=in_axes)
  return fun


def broadcast_batch(x: Any, batch_shape: Sequence[int], n_batch: int) -> Any:
  """`x[*b, *rest]` (batch dims of size 1 or equal to `batch_shape`) broadcast to
  `[*batch_shape, *rest]`."""
  x = jnp.asarray(x)
  want = tuple(batch_shape) + tuple(x.shape[n_batch:])
  return x if tuple(x.shape) == want else jnp.broadcast_to(x, want)


def count_stored_elements(mat: Any, n_batch: int = 0, n_dense: int = 0) -> int:
  """The number of specified elements `fromdense` needs for the concrete `mat`: the largest
  number, over batches, of sparse positions whose dense block has a nonzero.

  Raises:
    ConcretizationTypeError: if `mat` is traced (JAX's message for the nse argument).
  """
  if isinstance(mat, core.Tracer):
    concrete = mat.to_concrete_value()
    if concrete is None:
      concrete_or_error(None, mat, _NSE_CONTEXT)
    mat = concrete
  mask = np.asarray(mat) != 0
  if n_dense:
    mask = np.any(mask, axis=tuple(range(mask.ndim - n_dense, mask.ndim)))
  counts = np.sum(mask, axis=tuple(range(n_batch, mask.ndim)))
  return int(np.max(counts, initial=0)) if n_batch else int(counts)


_NSE_CONTEXT = ("\nThe error arose for the nse argument of bcoo_fromdense. In order for\n"
                "BCOO.fromdense() to be used in traced/compiled code, you must pass a concrete\n"
                "value to the nse (number of stored elements) argument.\n")
