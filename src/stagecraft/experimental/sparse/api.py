"""Generic sparse functions (JAX's `jax.experimental.sparse.api`): `todense`, `empty`, `eye`."""
from __future__ import annotations

from typing import Any

import numpy as np

import stagecraft.numpy as jnp
from stagecraft import api as sc_api, tree_util
from stagecraft.core import Primitive, ShapedArray
from stagecraft.experimental.sparse._base import JAXSparse
from stagecraft.experimental.sparse import bcsr, coo, csr
from stagecraft.experimental.sparse.bcoo import BCOO
from stagecraft.interpreters import ad, batching, mlir

__all__ = ["todense", "todense_p", "empty", "eye"]


def todense(arr: Any) -> Any:
  """The dense array of a sparse array (any format); a dense array is returned as it is
  (JAX's `sparse.todense`)."""
  if isinstance(arr, JAXSparse):
    return arr.todense()
  return arr


def _todense_leaves(*leaves, tree):
  return tree_util.tree_unflatten(tree, leaves).todense()


def _todense_abstract_eval(*avals, tree):
  arr = tree_util.tree_unflatten(tree, avals)
  return ShapedArray(tuple(arr.shape), avals[0].dtype)


def _todense_jvp(primals, tangents, *, tree):
  out = todense_p.bind(*primals, tree=tree)
  if type(tangents[0]) is ad.Zero:
    return out, ad.Zero.from_primal_value(out)
  return out, todense_p.bind(tangents[0], *primals[1:], tree=tree)


def _todense_batch_rule(args, dims, *, tree):
  # a generic batching rule: densify each batch element (a vmap of the format's own
  # todense, whose primitives carry the batching).
  in_axes = [None if d is batching.not_mapped else int(d) for d in dims]
  return sc_api.vmap(lambda *xs: _todense_leaves(*xs, tree=tree), in_axes=in_axes)(*args), 0


#: The primitive of `todense` over the flattened leaves of any sparse format (`tree`: the
#: array's pytree structure); `sparsify` and user code may bind it.
todense_p = Primitive("todense")
todense_p.def_abstract_eval(_todense_abstract_eval)
mlir.register_lowering(todense_p, mlir.lower_fun(_todense_leaves, multiple_results=False))
ad.primitive_jvps[todense_p] = _todense_jvp
batching.primitive_batchers[todense_p] = _todense_batch_rule


def empty(shape: Any, dtype: Any = None, index_dtype: Any = "int32",
          sparse_format: str = "bcoo", **kwds) -> JAXSparse:
  """An all-zero sparse array of `shape` with no stored elements (JAX's `sparse.empty`).

  Args:
    shape: the dense shape.
    dtype: the data dtype (default float32).
    index_dtype: the indices' dtype.
    sparse_format: 'bcoo', 'bcsr', 'coo', 'csr' or 'csc'.
    **kwds: format options (`n_batch`, `n_dense` for BCOO/BCSR).

  Raises:
    KeyError: for an unknown format (as JAX's).
  """
  convert = _format(sparse_format)
  return convert(_bcoo_empty(tuple(shape), dtype=dtype, index_dtype=index_dtype, **kwds))


def eye(N: int, M: int | None = None, k: int = 0, dtype: Any = None,
        index_dtype: Any = "int32", sparse_format: str = "bcoo", **kwds) -> JAXSparse:
  """A sparse 2-D array with ones on the `k`-th diagonal (JAX's `sparse.eye`).

  Raises:
    KeyError: for an unknown format (as JAX's).
  """
  convert = _format(sparse_format)
  return convert(_bcoo_eye(N, M if M is not None else N, k, dtype=dtype,
                           index_dtype=index_dtype, **kwds))


def _format(name: str):
  """The conversion from BCOO to the format `name`."""
  formats = {"bcoo": lambda x: x, "bcsr": bcsr.BCSR.from_bcoo,
             "coo": lambda x: coo.COO.fromdense(x.todense(), nse=x.nse),
             "csr": lambda x: csr.CSR.fromdense(x.todense(), nse=x.nse),
             "csc": lambda x: csr.CSC.fromdense(x.todense(), nse=x.nse)}
  if name not in formats:
    raise KeyError(name)   # NB: JAX's error for an unknown format
  return formats[name]


def _bcoo_empty(shape, *, dtype=None, index_dtype="int32", n_dense=0, n_batch=0, n_sparse=None):
  n_sparse = len(shape) - n_batch - n_dense if n_sparse is None else n_sparse
  batch = tuple(shape[:n_batch])
  dense = tuple(shape[n_batch + n_sparse:])
  data = jnp.zeros(batch + (0,) + dense, dtype or np.float32)
  indices = jnp.zeros(batch + (0, n_sparse), index_dtype)
  return BCOO((data, indices), shape=shape, indices_sorted=True, unique_indices=True)


def _bcoo_eye(N, M, k, *, dtype=None, index_dtype="int32", n_batch=0, n_dense=0):
  if n_batch or n_dense:
    dense = jnp.eye(N, M, k, dtype=dtype)
    return BCOO.fromdense(dense, n_batch=n_batch, n_dense=n_dense, index_dtype=index_dtype)
  k = int(k)
  diag = min(N, M - k) if k >= 0 else min(N + k, M)
  diag = max(diag, 0)
  rows = np.arange(diag) + max(-k, 0)
  cols = np.arange(diag) + max(k, 0)
  data = jnp.ones(diag, dtype or np.float32)
  indices = jnp.asarray(np.stack([rows, cols], axis=1).astype(np.dtype(index_dtype)))
  return BCOO((data, indices), shape=(N, M), indices_sorted=True, unique_indices=True)


