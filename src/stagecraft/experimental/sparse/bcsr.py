"""BCSR: batched compressed-sparse-row arrays (JAX's `jax.experimental.sparse.bcsr`).

A `BCSR` array of shape `[*batch, rows, cols, *dense]` holds `data`
`T[*batch, nse, *dense]`, `indices` `int[*batch, nse]` (column of each stored element) and
`indptr` `int[*batch, rows + 1]` (row `r` holds elements `indptr[r]:indptr[r+1]`; elements
past `indptr[-1]` are padding). Its primitives (`bcsr_fromdense_p`, `bcsr_todense_p`,
`bcsr_extract_p`, `bcsr_dot_general_p`) convert the rows to BCOO coordinates
(`searchsorted` of each element's position in `indptr`) and run BCOO's algorithms; their
rules come from `define_primitive`.
"""
from __future__ import annotations

import operator
from typing import Any, Sequence

import numpy as np

import stagecraft.numpy as jnp
from stagecraft import tree_util
from stagecraft.experimental.sparse import bcoo as bcoo_mod
from stagecraft.experimental.sparse._base import JAXSparse
from stagecraft.experimental.sparse._prims import define_primitive
from stagecraft.experimental.sparse.bcoo import BCOO
from stagecraft.experimental.sparse.util import (SparseInfo, broadcast_batch,
                                                 count_stored_elements, nfold_vmap)

__all__ = ["BCSR", "bcsr_fromdense", "bcsr_fromdense_p", "bcsr_todense", "bcsr_todense_p",
           "bcsr_extract", "bcsr_extract_p", "bcsr_dot_general", "bcsr_dot_general_p",
           "bcsr_broadcast_in_dim", "bcsr_concatenate", "bcsr_sum_duplicates"]


def _coords(indices, indptr, n_rows):
  """BCOO coordinates `[*batch, nse, 2]` of BCSR `(indices, indptr)`; padding rows
  (`n_rows`) for elements past `indptr[-1]`."""
  nb = indices.ndim - 1
  nse = indices.shape[-1]

  def one(i, p):
    pos = jnp.arange(nse, dtype=p.dtype)
    rows = jnp.searchsorted(p[1:], pos, side="right").astype(i.dtype)
    return jnp.stack([rows, i], axis=-1)
  batch = tuple(np.broadcast_shapes(tuple(indices.shape[:nb]), tuple(indptr.shape[:nb])))
  return nfold_vmap(one, nb)(broadcast_batch(indices, batch, nb),
                             broadcast_batch(indptr, batch, nb))


def _from_coords(coords, n_rows):
  """BCSR `(indices, indptr)` of sorted BCOO coordinates `[*batch, nse, 2]`."""
  rows = coords[..., 0]
  bounds = jnp.arange(n_rows + 1, dtype=coords.dtype)
  indptr = jnp.sum(rows[..., None, :] < bounds[:, None], axis=-1).astype(coords.dtype)
  return coords[..., 1], indptr


def _todense_impl(data, indices, indptr, *, spinfo):
  nb = indices.ndim - 1
  coords = _coords(indices, indptr, spinfo.shape[nb])
  return bcoo_mod.todense_impl(data, coords, spinfo=spinfo)


def _fromdense_impl(mat, *, nse, n_batch, n_dense, index_dtype):
  data, coords = bcoo_mod.fromdense_impl(mat, nse=nse, n_batch=n_batch, n_dense=n_dense,
                                         index_dtype=index_dtype)
  indices, indptr = _from_coords(coords, mat.shape[n_batch])
  return data, indices, indptr


def _extract_impl(indices, indptr, mat):
  nb = indices.ndim - 1
  coords = _coords(indices, indptr, mat.shape[nb])
  return bcoo_mod.extract_impl(coords, mat, assume_unique=True)


def _dot_general_impl(lhs_data, lhs_indices, lhs_indptr, rhs, *, dimension_numbers,
                      lhs_spinfo, preferred_element_type):
  nb = lhs_indices.ndim - 1
  coords = _coords(lhs_indices, lhs_indptr, lhs_spinfo.shape[nb])
  return bcoo_mod.dot_general_impl(lhs_data, coords, rhs, dimension_numbers=dimension_numbers,
                                   lhs_spinfo=lhs_spinfo,
                                   preferred_element_type=preferred_element_type)


bcsr_todense_p = define_primitive("bcsr_todense", _todense_impl, multiple_results=False,
                                  linear=(0,))
bcsr_fromdense_p = define_primitive("bcsr_fromdense", _fromdense_impl, multiple_results=True,
                                    linear=(0,))
bcsr_extract_p = define_primitive("bcsr_extract", _extract_impl, multiple_results=False,
                                  linear=(2,))
bcsr_dot_general_p = define_primitive("bcsr_dot_general", _dot_general_impl,
                                      multiple_results=False, linear=(0, 3))


@tree_util.register_pytree_node_class
class BCSR(JAXSparse):
  """A batched compressed-sparse-row array (JAX's `jax.experimental.sparse.BCSR`).

  Args:
    args: `(data, indices, indptr)` (see the module docstring).
    shape: the dense shape `[*batch, rows, cols, *dense]`.
    indices_sorted, unique_indices: what is known of the indices.
  """

  n_batch = property(lambda self: len(self.indices.shape) - 1)
  n_sparse = property(lambda self: 2)
  n_dense = property(lambda self: len(self.data.shape) - 1 - self.n_batch)
  nse = property(lambda self: self.indices.shape[-1])
  dtype = property(lambda self: self.data.dtype)
  _info = property(lambda self: SparseInfo(self.shape, self.indices_sorted,
                                           self.unique_indices))

  def __init__(self, args, *, shape, indices_sorted=False, unique_indices=False):
    self.data, self.indices, self.indptr = map(jnp.asarray, args)
    self.indices_sorted = indices_sorted
    self.unique_indices = unique_indices
    super().__init__(args, shape=shape)
    nb = self.n_batch
    if len(self.shape) < nb + 2 or self.indptr.shape[-1] != self.shape[nb] + 1:
      raise ValueError(f"Invalid indptr.shape={tuple(self.indptr.shape)} for "
                       f"shape={self.shape} and n_batch={nb}")

  def __repr__(self):
    extra = f", nse={self.nse}"
    if self.n_batch:
      extra += f", n_batch={self.n_batch}"
    if self.n_dense:
      extra += f", n_dense={self.n_dense}"
    return f"BCSR({np.dtype(self.dtype).name}{list(self.shape)}{extra})"

  def tree_flatten(self):
    return (self.data, self.indices, self.indptr), self._info._asdict()

  @classmethod
  def tree_unflatten(cls, aux_data, children):
    obj = object.__new__(cls)
    obj.data, obj.indices, obj.indptr = children
    obj.shape = tuple(aux_data["shape"])
    obj.indices_sorted = aux_data["indices_sorted"]
    obj.unique_indices = aux_data["unique_indices"]
    return obj

  @classmethod
  def fromdense(cls, mat, *, nse=None, index_dtype=np.int32, n_dense=0, n_batch=0):
    """See `bcsr_fromdense`."""
    return bcsr_fromdense(mat, nse=nse, index_dtype=index_dtype, n_dense=n_dense,
                          n_batch=n_batch)

  @classmethod
  def from_bcoo(cls, arr: BCOO) -> "BCSR":
    """The BCSR form of a 2-D-sparse BCOO array (its indices sorted first)."""
    if arr.n_sparse != 2:
      raise ValueError("BCSR.from_bcoo requires n_sparse=2")
    if not arr.indices_sorted:
      arr = arr.sort_indices()
    indices, indptr = _from_coords(arr.indices, arr.shape[arr.n_batch])
    return cls((arr.data, indices, indptr), shape=arr.shape, indices_sorted=True,
               unique_indices=arr.unique_indices)

  def to_bcoo(self) -> BCOO:
    """The BCOO form (coordinates from the row pointers)."""
    coords = _coords(self.indices, self.indptr, self.shape[self.n_batch])
    return BCOO((self.data, coords), shape=self.shape, indices_sorted=self.indices_sorted,
                unique_indices=self.unique_indices)

  def todense(self):
    """See `bcsr_todense`."""
    return bcsr_todense(self)

  def transpose(self, *args, **kwargs):
    raise NotImplementedError("Tranpose is not implemented.")

  def sum_duplicates(self, nse=None, remove_zeros=True):
    """See `bcsr_sum_duplicates`."""
    return bcsr_sum_duplicates(self, nse=nse)

  def __matmul__(self, other):
    if isinstance(other, JAXSparse):
      raise NotImplementedError("matmul between two sparse objects.")
    other = jnp.asarray(other)
    dims = (((self.ndim - 1,), (0 if other.ndim == 1 else other.ndim - 2,)), ((), ()))
    return bcsr_dot_general(self, other, dimension_numbers=dims)

  def __rmatmul__(self, other):
    return (self.to_bcoo().__rmatmul__(other))

  def __neg__(self):
    return BCSR((-self.data, self.indices, self.indptr), **self._info._asdict())

  def __mul__(self, other):
    return BCSR.from_bcoo(self.to_bcoo() * other)

  __rmul__ = __mul__


def bcsr_fromdense(mat: Any, *, nse: int | None = None, n_batch: int = 0, n_dense: int = 0,
                   index_dtype: Any = jnp.int32) -> BCSR:
  """A BCSR array of the nonzeros of `mat` (JAX's `bcsr_fromdense`); `nse` as
  `bcoo_fromdense`'s (None needs a concrete `mat`)."""
  mat = jnp.asarray(mat)
  if nse is None:
    nse = count_stored_elements(mat, n_batch, n_dense)
  nse = operator.index(nse)
  if mat.ndim - n_batch - n_dense != 2:
    raise ValueError("bcsr_fromdense: BCSR arrays have exactly 2 sparse dimensions; got "
                     f"shape={mat.shape}, n_batch={n_batch}, n_dense={n_dense}")
  data, indices, indptr = bcsr_fromdense_p.bind(mat, nse=nse, n_batch=n_batch,
                                                n_dense=n_dense, index_dtype=index_dtype)
  return BCSR((data, indices, indptr), shape=mat.shape, indices_sorted=True,
              unique_indices=True)


def bcsr_todense(mat: BCSR) -> Any:
  """The dense array of a BCSR array (JAX's `bcsr_todense`)."""
  return bcsr_todense_p.bind(mat.data, mat.indices, mat.indptr, spinfo=mat._info)


def bcsr_extract(indices: Any, indptr: Any, mat: Any) -> Any:
  """The elements of the dense `mat` at the BCSR positions `(indices, indptr)`: the data
  of a BCSR array (JAX's `bcsr_extract`)."""
  return bcsr_extract_p.bind(jnp.asarray(indices), jnp.asarray(indptr), jnp.asarray(mat))


def bcsr_dot_general(lhs: Any, rhs: Any, *, dimension_numbers: Any, precision: Any = None,
                     preferred_element_type: Any = None, out_sharding: Any = None) -> Any:
  """`dot_general` of a BCSR array and a dense array (JAX's `bcsr_dot_general`); a dense
  lhs with a BCSR rhs goes through BCOO."""
  del precision, out_sharding
  if isinstance(lhs, BCSR) and not isinstance(rhs, JAXSparse):
    (lc, rc), (lb, rb) = dimension_numbers
    dims = ((tuple(lc), tuple(rc)), (tuple(lb), tuple(rb)))
    if preferred_element_type is not None:
      preferred_element_type = np.dtype(preferred_element_type)
    return bcsr_dot_general_p.bind(lhs.data, lhs.indices, lhs.indptr, jnp.asarray(rhs),
                                   dimension_numbers=dims, lhs_spinfo=lhs._info,
                                   preferred_element_type=preferred_element_type)
  lhs = lhs.to_bcoo() if isinstance(lhs, BCSR) else lhs
  rhs = rhs.to_bcoo() if isinstance(rhs, BCSR) else rhs
  return bcoo_mod.bcoo_dot_general(lhs, rhs, dimension_numbers=dimension_numbers,
                                   preferred_element_type=preferred_element_type)


def bcsr_sum_duplicates(mat: BCSR, nse: int | None = None) -> BCSR:
  """Sums duplicate entries (JAX's `bcsr_sum_duplicates`), through BCOO."""
  return BCSR.from_bcoo(bcoo_mod.bcoo_sum_duplicates(mat.to_bcoo(), nse=nse))


def bcsr_broadcast_in_dim(mat: BCSR, *, shape: Sequence[int],
                          broadcast_dimensions: Sequence[int], sharding: Any = None) -> BCSR:
  """`broadcast_in_dim` of a BCSR array (JAX's `bcsr_broadcast_in_dim`), through BCOO."""
  out = bcoo_mod.bcoo_broadcast_in_dim(mat.to_bcoo(), shape=shape,
                                       broadcast_dimensions=broadcast_dimensions)
  return BCSR.from_bcoo(out)


def bcsr_concatenate(operands: Sequence[BCSR], *, dimension: int) -> BCSR:
  """`concatenate` of BCSR arrays (JAX's `bcsr_concatenate`), through BCOO."""
  out = bcoo_mod.bcoo_concatenate([op.to_bcoo() for op in operands], dimension=dimension)
  return BCSR.from_bcoo(out)

