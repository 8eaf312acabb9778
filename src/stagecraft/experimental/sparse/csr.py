"""CSR and CSC: the older 2-D compressed formats (JAX's `jax.experimental.sparse.csr`).

`CSR((data, indices, indptr), shape=(m, n))`: `indices` the column of each stored element,
`indptr` `int[m + 1]` the row pointers. `CSC` stores the transpose the same way (column
pointers). Their primitives (`csr_fromdense_p`, `csr_todense_p`, `csr_matvec_p`,
`csr_matmat_p`) run BCSR's/BCOO's algorithms; rules from `define_primitive`.
"""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

import stagecraft.numpy as jnp
from stagecraft import tree_util
from stagecraft.experimental.sparse import bcoo as bcoo_mod, bcsr as bcsr_mod
from stagecraft.experimental.sparse._base import JAXSparse
from stagecraft.experimental.sparse._prims import define_primitive
from stagecraft.experimental.sparse.util import SparseInfo, count_stored_elements

__all__ = ["CSR", "CSC", "csr_fromdense", "csr_fromdense_p", "csr_todense", "csr_todense_p",
           "csr_matvec", "csr_matvec_p", "csr_matmat", "csr_matmat_p"]


def _coords(indices, indptr):
  return bcsr_mod.BCSR((jnp.zeros(indices.shape), indices, indptr),
                       shape=(indptr.shape[0] - 1, 1)).to_bcoo().indices


def _todense_impl(data, indices, indptr, *, shape):
  return bcoo_mod.todense_impl(data, _coords(indices, indptr), spinfo=SparseInfo(shape))


def _fromdense_impl(mat, *, nse, index_dtype):
  data, idx = bcoo_mod.fromdense_impl(mat, nse=nse, n_batch=0, n_dense=0,
                                      index_dtype=index_dtype)
  rows = idx[:, 0]
  bounds = jnp.arange(mat.shape[0] + 1, dtype=idx.dtype)
  indptr = jnp.sum(rows[None, :] < bounds[:, None], axis=-1).astype(idx.dtype)
  return data, idx[:, 1], indptr


def _mat_impl(data, indices, indptr, v, *, shape, transpose):
  idx = _coords(indices, indptr)
  if transpose:
    idx, shape = idx[:, ::-1], tuple(shape)[::-1]
  return bcoo_mod.dot_general_impl(data, idx, v, dimension_numbers=(((1,), (0,)), ((), ())),
                                   lhs_spinfo=SparseInfo(tuple(shape)),
                                   preferred_element_type=None)


csr_todense_p = define_primitive("csr_todense", _todense_impl, multiple_results=False,
                                 linear=(0,))
csr_fromdense_p = define_primitive("csr_fromdense", _fromdense_impl, multiple_results=True,
                                   linear=(0,))
csr_matvec_p = define_primitive("csr_matvec", _mat_impl, multiple_results=False,
                                linear=(0, 3))
csr_matmat_p = define_primitive("csr_matmat", _mat_impl, multiple_results=False,
                                linear=(0, 3))


class _Compressed(JAXSparse):
  nse = property(lambda self: self.data.size)
  dtype = property(lambda self: self.data.dtype)

  def __init__(self, args, *, shape):
    self.data, self.indices, self.indptr = map(jnp.asarray, args)
    super().__init__(args, shape=shape)

  def tree_flatten(self):
    return (self.data, self.indices, self.indptr), {"shape": self.shape}

  @classmethod
  def tree_unflatten(cls, aux_data, children):
    obj = object.__new__(cls)
    obj.data, obj.indices, obj.indptr = children
    obj.shape = tuple(aux_data["shape"])
    return obj


@tree_util.register_pytree_node_class
class CSR(_Compressed):
  """A 2-D compressed-sparse-row matrix (JAX's `jax.experimental.sparse.CSR`)."""

  @classmethod
  def fromdense(cls, mat, *, nse=None, index_dtype=np.int32):
    """See `csr_fromdense`."""
    return csr_fromdense(mat, nse=nse, index_dtype=index_dtype)

  def todense(self):
    """See `csr_todense`."""
    return csr_todense(self)

  def transpose(self, axes=None):
    if axes is not None:
      raise NotImplementedError("axes argument to transpose()")
    return CSC((self.data, self.indices, self.indptr), shape=self.shape[::-1])

  def __matmul__(self, other):
    if isinstance(other, JAXSparse):
      raise NotImplementedError("matmul between two sparse objects.")
    other = jnp.asarray(other)
    if other.ndim == 1:
      return csr_matvec(self, other)
    if other.ndim == 2:
      return csr_matmat(self, other)
    raise NotImplementedError(f"matmul with object of shape {other.shape}")

  def __neg__(self):
    return CSR((-self.data, self.indices, self.indptr), shape=self.shape)


@tree_util.register_pytree_node_class
class CSC(_Compressed):
  """A 2-D compressed-sparse-column matrix (JAX's `jax.experimental.sparse.CSC`): the CSR
  form of its transpose."""

  @classmethod
  def fromdense(cls, mat, *, nse=None, index_dtype=np.int32):
    """A CSC matrix of the nonzeros of `mat` (column-major order)."""
    t = csr_fromdense(jnp.asarray(mat).T, nse=nse, index_dtype=index_dtype)
    return cls((t.data, t.indices, t.indptr), shape=tuple(jnp.shape(mat)))

  def todense(self):
    """The dense matrix."""
    return csr_todense_p.bind(self.data, self.indices, self.indptr,
                              shape=tuple(self.shape[::-1])).T

  def transpose(self, axes=None):
    if axes is not None:
      raise NotImplementedError("axes argument to transpose()")
    return CSR((self.data, self.indices, self.indptr), shape=self.shape[::-1])

  def __matmul__(self, other):
    if isinstance(other, JAXSparse):
      raise NotImplementedError("matmul between two sparse objects.")
    other = jnp.asarray(other)
    prim = csr_matvec_p if other.ndim == 1 else csr_matmat_p
    return prim.bind(self.data, self.indices, self.indptr, other,
                     shape=tuple(self.shape[::-1]), transpose=True)

  def __neg__(self):
    return CSC((-self.data, self.indices, self.indptr), shape=self.shape)


def csr_fromdense(mat: Any, *, nse: int | None = None, index_dtype: Any = jnp.int32) -> CSR:
  """A CSR matrix of the nonzeros of the 2-D `mat` (JAX's `csr_fromdense`)."""
  mat = jnp.asarray(mat)
  if nse is None:
    nse = count_stored_elements(mat)
  nse = operator.index(nse)
  data, indices, indptr = csr_fromdense_p.bind(mat, nse=nse, index_dtype=index_dtype)
  return CSR((data, indices, indptr), shape=mat.shape)


def csr_todense(mat: CSR) -> Any:
  """The dense matrix of a CSR matrix (JAX's `csr_todense`)."""
  return csr_todense_p.bind(mat.data, mat.indices, mat.indptr, shape=tuple(mat.shape))


def csr_matvec(mat: CSR, v: Any, transpose: bool = False) -> Any:
  """`mat @ v` (or `mat.T @ v`) (JAX's `csr_matvec`)."""
  return csr_matvec_p.bind(mat.data, mat.indices, mat.indptr, jnp.asarray(v),
                           shape=tuple(mat.shape), transpose=bool(transpose))


def csr_matmat(mat: CSR, B: Any, *, transpose: bool = False) -> Any:
  """`mat @ B` (or `mat.T @ B`) (JAX's `csr_matmat`)."""
  return csr_matmat_p.bind(mat.data, mat.indices, mat.indptr, jnp.asarray(B),
                           shape=tuple(mat.shape), transpose=bool(transpose))
