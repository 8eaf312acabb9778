"""COO: the older 2-D coordinate format (JAX's `jax.experimental.sparse.coo`).

`COO((data, row, col), shape=(m, n))`: `data` `T[nse]`, `row`/`col` `int[nse]`. Its
primitives (`coo_fromdense_p`, `coo_todense_p`, `coo_matvec_p`, `coo_matmat_p`) run BCOO's
algorithms on the stacked coordinates; their rules come from `define_primitive`.
"""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

import stagecraft.numpy as jnp
from stagecraft import tree_util
from stagecraft.experimental.sparse import bcoo as bcoo_mod
from stagecraft.experimental.sparse._base import JAXSparse
from stagecraft.experimental.sparse._prims import define_primitive
from stagecraft.experimental.sparse.util import SparseInfo, count_stored_elements

__all__ = ["COO", "coo_fromdense", "coo_fromdense_p", "coo_todense", "coo_todense_p",
           "coo_matvec", "coo_matvec_p", "coo_matmat", "coo_matmat_p"]


def _stack(row, col):
  return jnp.stack([row, col], axis=-1)


def _todense_impl(data, row, col, *, spinfo):
  return bcoo_mod.todense_impl(data, _stack(row, col), spinfo=SparseInfo(tuple(spinfo.shape)))


def _fromdense_impl(mat, *, nse, index_dtype):
  data, idx = bcoo_mod.fromdense_impl(mat, nse=nse, n_batch=0, n_dense=0,
                                      index_dtype=index_dtype)
  return data, idx[:, 0], idx[:, 1]


def _mat_impl(data, row, col, v, *, spinfo, transpose):
  shape = tuple(spinfo.shape)
  idx = _stack(col, row) if transpose else _stack(row, col)
  shape = shape[::-1] if transpose else shape
  dims = (((1,), (0,)), ((), ()))
  return bcoo_mod.dot_general_impl(data, idx, v, dimension_numbers=dims,
                                   lhs_spinfo=SparseInfo(shape), preferred_element_type=None)


coo_todense_p = define_primitive("coo_todense", _todense_impl, multiple_results=False,
                                 linear=(0,))
coo_fromdense_p = define_primitive("coo_fromdense", _fromdense_impl, multiple_results=True,
                                   linear=(0,))
coo_matvec_p = define_primitive("coo_matvec", _mat_impl, multiple_results=False,
                                linear=(0, 3))
coo_matmat_p = define_primitive("coo_matmat", _mat_impl, multiple_results=False,
                                linear=(0, 3))


@tree_util.register_pytree_node_class
class COO(JAXSparse):
  """A 2-D coordinate-format sparse matrix (JAX's `jax.experimental.sparse.COO`)."""

  nse = property(lambda self: self.data.size)
  dtype = property(lambda self: self.data.dtype)
  _info = property(lambda self: SparseInfo(self.shape, self._rows_sorted, False))

  def __init__(self, args, *, shape, rows_sorted=False, cols_sorted=False):
    self.data, self.row, self.col = map(jnp.asarray, args)
    self._rows_sorted = rows_sorted
    self._cols_sorted = cols_sorted
    super().__init__(args, shape=shape)

  def tree_flatten(self):
    return (self.data, self.row, self.col), {"shape": self.shape,
                                             "rows_sorted": self._rows_sorted,
                                             "cols_sorted": self._cols_sorted}

  @classmethod
  def tree_unflatten(cls, aux_data, children):
    obj = object.__new__(cls)
    obj.data, obj.row, obj.col = children
    obj.shape = tuple(aux_data["shape"])
    obj._rows_sorted = aux_data["rows_sorted"]
    obj._cols_sorted = aux_data["cols_sorted"]
    return obj

  @classmethod
  def fromdense(cls, mat, *, nse=None, index_dtype=np.int32):
    """See `coo_fromdense`."""
    return coo_fromdense(mat, nse=nse, index_dtype=index_dtype)

  def todense(self):
    """See `coo_todense`."""
    return coo_todense(self)

  def transpose(self, axes=None):
    if axes is not None:
      raise NotImplementedError("axes argument to transpose()")
    return COO((self.data, self.col, self.row), shape=self.shape[::-1],
               rows_sorted=self._cols_sorted, cols_sorted=self._rows_sorted)

  def __matmul__(self, other):
    if isinstance(other, JAXSparse):
      raise NotImplementedError("matmul between two sparse objects.")
    other = jnp.asarray(other)
    if other.ndim == 1:
      return coo_matvec(self, other)
    if other.ndim == 2:
      return coo_matmat(self, other)
    raise NotImplementedError(f"matmul with object of shape {other.shape}")

  def __neg__(self):
    return COO((-self.data, self.row, self.col), shape=self.shape,
               rows_sorted=self._rows_sorted, cols_sorted=self._cols_sorted)


def coo_fromdense(mat: Any, *, nse: int | None = None, index_dtype: Any = jnp.int32) -> COO:
  """A COO matrix of the nonzeros of the 2-D `mat` (JAX's `coo_fromdense`)."""
  mat = jnp.asarray(mat)
  if nse is None:
    nse = count_stored_elements(mat)
  nse = operator.index(nse)
  data, row, col = coo_fromdense_p.bind(mat, nse=nse, index_dtype=index_dtype)
  return COO((data, row, col), shape=mat.shape, rows_sorted=True)


def coo_todense(mat: COO) -> Any:
  """The dense matrix of a COO matrix (JAX's `coo_todense`)."""
  return coo_todense_p.bind(mat.data, mat.row, mat.col, spinfo=mat._info)


def coo_matvec(mat: COO, v: Any, transpose: bool = False) -> Any:
  """`mat @ v` (or `mat.T @ v`) for a vector `v` (JAX's `coo_matvec`)."""
  return coo_matvec_p.bind(mat.data, mat.row, mat.col, jnp.asarray(v), spinfo=mat._info,
                           transpose=bool(transpose))


def coo_matmat(mat: COO, B: Any, *, transpose: bool = False) -> Any:
  """`mat @ B` (or `mat.T @ B`) for a matrix `B` (JAX's `coo_matmat`)."""
  return coo_matmat_p.bind(mat.data, mat.row, mat.col, jnp.asarray(B), spinfo=mat._info,
                           transpose=bool(transpose))
