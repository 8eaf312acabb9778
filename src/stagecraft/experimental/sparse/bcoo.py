"""BCOO: batched coordinate sparse arrays (JAX's `jax.experimental.sparse.bcoo`).

A `BCOO` array of shape `[*batch, *sparse, *dense]` (`n_batch`, `n_sparse`, `n_dense`
dimensions) is two arrays:

- `data`: `T[*batch, nse, *dense]`, the stored blocks;
- `indices`: `int[*batch, nse, n_sparse]`, the sparse coordinates of each stored block.

Batch dimensions of `data` and `indices` may be 1 where the other's is not (they broadcast).
Stored elements whose index is out of range (JAX's padding: the index equals `shape`, the
data 0) are ignored by `todense` and every operation; duplicate indices add up.

Every operation is a primitive with JAX's name and params (`bcoo_todense_p`,
`bcoo_fromdense_p`, `bcoo_extract_p`, `bcoo_dot_general_p`, `bcoo_dot_general_sampled_p`,
`bcoo_spdot_general_p`, `bcoo_transpose_p`, `bcoo_sum_duplicates_p`, `bcoo_sort_indices_p`),
whose rules sit in one block beside it: the abstract eval, the lowering (`mlir.lower_fun` of
its impl, a composition of stagecraft operations: scatter-add, gather, sorts, cumulative
sums), the JVP, the transpose where linear and the batching rule (a vmapped operand becomes
one more batch dimension of the sparse array, as in JAX). The impls handle batch dimensions
by mapping (`nfold_vmap`) the unbatched algorithm over them:

- todense: a scatter-add of the blocks into zeros (out-of-range indices dropped);
- fromdense: `nonzero` of the mask of nonzero blocks (with `size=nse`, padding with `shape`),
  then a gather;
- extract: a gather with out-of-range indices giving 0;
- dot_general (sparse x dense): the stored elements are laid out with all their batch and
  sparse coordinates; the dense operand is gathered at each element's contracted (and
  batch) coordinates, multiplied with its block by a dense `dot_general`, and scatter-added
  into the result at the element's free coordinates. Work and memory are proportional to
  `nse` times the dense operand's free size, never to the sparse operand's dense size;
- spdot_general (sparse x sparse): every pair of stored elements, its product masked by the
  equality of the contracted coordinates, placed at the pair's free coordinates, then
  `sum_duplicates` with `nse = min(nse_lhs * nse_rhs, size of the result's sparse dims)`;
- sum_duplicates / sort_indices: a lexicographic sort of the coordinates; run boundaries
  give segment ids (`cumsum`), whose data is scatter-added.
"""
from __future__ import annotations

import math
import operator
import warnings
from functools import partial
from typing import Any, NamedTuple, Sequence

import numpy as np

import stagecraft.numpy as jnp
from stagecraft import api, core, dtypes, lax, tree_util
from stagecraft.core import Primitive, ShapedArray
from stagecraft.experimental.sparse._base import JAXSparse
from stagecraft.experimental.sparse._prims import transpose_via_impl
from stagecraft.experimental.sparse.util import (SparseEfficiencyError, SparseEfficiencyWarning,
                                                 SparseInfo,
                                                 broadcast_batch, count_stored_elements,
                                                 nfold_vmap)
from stagecraft.interpreters import ad, batching, mlir

__all__ = ["BCOO", "BCOOProperties", "bcoo_todense", "bcoo_todense_p", "bcoo_fromdense",
           "bcoo_fromdense_p", "bcoo_extract", "bcoo_extract_p", "bcoo_dot_general",
           "bcoo_dot_general_p", "bcoo_dot_general_sampled", "bcoo_dot_general_sampled_p",
           "bcoo_spdot_general_p", "bcoo_transpose", "bcoo_transpose_p",
           "bcoo_sum_duplicates", "bcoo_sum_duplicates_p", "bcoo_sort_indices",
           "bcoo_sort_indices_p", "bcoo_eliminate_zeros", "bcoo_update_layout",
           "bcoo_broadcast_in_dim", "bcoo_concatenate", "bcoo_dynamic_slice", "bcoo_slice",
           "bcoo_gather", "bcoo_multiply_dense", "bcoo_multiply_sparse", "bcoo_reduce_sum",
           "bcoo_reshape", "bcoo_rev", "bcoo_squeeze", "bcoo_conv_general_dilated",
           "bcoo_add", "SparseInfo"]


class BCOOProperties(NamedTuple):
  """The layout of a BCOO array: batch, sparse and dense dimension counts and `nse`."""
  n_batch: int
  n_sparse: int
  n_dense: int
  nse: int


def _shape_of(x: Any) -> tuple[int, ...]:
  return tuple(x.aval.shape) if isinstance(x, ad.UndefinedPrimal) else tuple(np.shape(x))


def validate_bcoo(data_shape: Sequence[int], indices_shape: Sequence[int],
                  shape: Sequence[int]) -> BCOOProperties:
  """The layout of `(data, indices)` of a BCOO array of `shape`.

  Raises:
    ValueError: for an inconsistent `data`, `indices` or `shape` (JAX's messages).
  """
  data_shape, indices_shape, shape = tuple(data_shape), tuple(indices_shape), tuple(shape)
  if len(indices_shape) < 2:
    raise ValueError(f"BCOO indices must have at least 2 dimensions; got "
                     f"indices.shape={indices_shape}")
  n_batch = len(indices_shape) - 2
  nse, n_sparse = indices_shape[-2:]
  n_dense = len(shape) - n_batch - n_sparse
  if n_dense < 0:
    raise ValueError(f"Invalid indices.shape={indices_shape} for shape={shape}: "
                     f"n_batch={n_batch} + n_sparse={n_sparse} exceeds the rank {len(shape)}")

  def ok_batch(s):
    return all(a == b or a == 1 for a, b in zip(s[:n_batch], shape[:n_batch]))
  if not ok_batch(indices_shape):
    raise ValueError(f"indices batch dimensions not compatible for indices.shape="
                     f"{indices_shape}, shape={shape}")
  if (len(data_shape) != n_batch + 1 + n_dense or not ok_batch(data_shape)
      or data_shape[n_batch] != nse or data_shape[n_batch + 1:] != shape[n_batch + n_sparse:]):
    raise ValueError(f"Invalid data.shape={data_shape} for nse={nse}, n_batch={n_batch}, "
                     f"n_dense={n_dense}")
  return BCOOProperties(n_batch, n_sparse, n_dense, nse)


def _props(data: Any, indices: Any, shape: Sequence[int]) -> BCOOProperties:
  return validate_bcoo(_shape_of(data), _shape_of(indices), shape)


def _unbatch(data: Any, indices: Any, shape: Sequence[int]):
  """`(data[N, *dense], coords[N, n_batch + n_sparse])`: every stored element of a BCOO
  array with its batch coordinates (`N = prod(batch) * nse`), as for `n_batch = 0`."""
  nb, ns, nd, nse = _props(data, indices, shape)
  batch = tuple(shape[:nb])
  data = broadcast_batch(data, batch, nb)
  indices = broadcast_batch(indices, batch, nb)
  if nb == 0:
    return data, indices
  bidx = [lax.broadcasted_iota(indices.dtype, batch + (nse, 1), i) for i in range(nb)]
  coords = jnp.concatenate(bidx + [indices], axis=-1)
  n = math.prod(batch) * nse
  return (jnp.reshape(data, (n,) + tuple(data.shape[nb + 1:])),
          jnp.reshape(coords, (n, nb + ns)))


def _in_range(indices: Any, sparse_shape: Sequence[int]) -> Any:
  """`bool[..., nse]`: whether each index is inside `sparse_shape`."""
  bound = np.array(sparse_shape, dtype=np.int64).astype(indices.dtype)
  return jnp.all((indices >= 0) & (indices < bound), axis=-1)


def _sum_to_shape(x: Any, shape: Sequence[int]) -> Any:
  """`x` summed over the dimensions where `shape` has 1 and `x` does not (the transpose of
  a batch-dimension broadcast)."""
  axes = tuple(i for i, (a, b) in enumerate(zip(x.shape, shape)) if b == 1 and a != 1)
  return jnp.sum(x, axis=axes, keepdims=True) if axes else x


def _batch_rule_operands(args, dims, size, sparse_pairs=(), dense=(), full=False):
  """Batch dims to the front: sparse `(data, indices)` pairs get a leading dimension (size 1
  when not mapped, or `size` with `full`); dense operands too."""
  out = list(args)
  for i in [i for pair in sparse_pairs for i in pair] + list(dense):
    x, d = args[i], dims[i]
    if d is batching.not_mapped:
      out[i] = (batching.broadcast(x, size, 0) if full
                else lax.expand_dims(x, (0,)))
    else:
      out[i] = batching.moveaxis(x, d, 0)
  return out


def _axis_size(args, dims) -> int:
  return next(np.shape(x)[d] for x, d in zip(args, dims) if d is not batching.not_mapped)


def _batched_spinfo(spinfo: SparseInfo, size: int) -> SparseInfo:
  return SparseInfo((size, *spinfo.shape), spinfo.indices_sorted, spinfo.unique_indices)


# ---------------------------------------------------------------------------
# bcoo_todense


def bcoo_todense(mat: "BCOO") -> Any:
  """The dense array of a BCOO array (JAX's `bcoo_todense`).

  Args:
    mat: a BCOO array of shape `[*batch, *sparse, *dense]`.

  Returns:
    `T[*shape]`: zeros with each stored block added at its index; out-of-range (padding)
    indices are ignored, duplicates add up.
  """
  return _bcoo_todense(mat.data, mat.indices, spinfo=mat._info)


def _bcoo_todense(data, indices, *, spinfo):
  return bcoo_todense_p.bind(jnp.asarray(data), jnp.asarray(indices), spinfo=spinfo)


def _bcoo_todense_abstract_eval(data, indices, *, spinfo):
  _props(data, indices, spinfo.shape)
  return ShapedArray(tuple(spinfo.shape), data.dtype)


def _bcoo_todense_impl(data, indices, *, spinfo):
  shape = tuple(spinfo.shape)
  nb, ns, nd, nse = _props(data, indices, shape)
  batch = shape[:nb]
  data = broadcast_batch(data, batch, nb)
  indices = broadcast_batch(indices, batch, nb)

  def one(d, i):
    out = jnp.zeros(shape[nb:], d.dtype)
    if ns == 0:
      return out + jnp.sum(d, axis=0)
    return out.at[tuple(i[:, k] for k in range(ns))].add(d, mode="drop")
  return nfold_vmap(one, nb)(data, indices)


def _bcoo_todense_jvp(primals, tangents, *, spinfo):
  data, indices = primals
  out = bcoo_todense_p.bind(data, indices, spinfo=spinfo)
  if type(tangents[0]) is ad.Zero:
    return out, ad.Zero.from_primal_value(out)
  return out, bcoo_todense_p.bind(tangents[0], indices, spinfo=spinfo)


def _bcoo_todense_transpose(ct, data, indices, *, spinfo):
  if ad.is_undefined_primal(indices):
    raise ValueError("Cannot transpose with respect to sparse indices")
  if type(ct) is ad.Zero:
    return [None, None]
  out = bcoo_extract_p.bind(indices, ct, assume_unique=True)
  return [_sum_to_shape(out, _shape_of(data)), None]


def _bcoo_todense_batch_rule(args, dims, *, spinfo):
  size = _axis_size(args, dims)
  data, indices = _batch_rule_operands(args, dims, size, sparse_pairs=[(0, 1)])
  return bcoo_todense_p.bind(data, indices, spinfo=_batched_spinfo(spinfo, size)), 0


bcoo_todense_p = Primitive("bcoo_todense")
bcoo_todense_p.def_abstract_eval(_bcoo_todense_abstract_eval)
mlir.register_lowering(bcoo_todense_p, mlir.lower_fun(_bcoo_todense_impl,
                                                      multiple_results=False))
ad.primitive_jvps[bcoo_todense_p] = _bcoo_todense_jvp
ad.primitive_transposes[bcoo_todense_p] = _bcoo_todense_transpose
batching.primitive_batchers[bcoo_todense_p] = _bcoo_todense_batch_rule


# ---------------------------------------------------------------------------
# bcoo_fromdense


def bcoo_fromdense(mat: Any, *, nse: int | None = None, n_batch: int = 0, n_dense: int = 0,
                   index_dtype: Any = jnp.int32) -> "BCOO":
  """A BCOO array holding the nonzero blocks of the dense `mat` (JAX's `bcoo_fromdense`).

  Args:
    mat: `T[*batch, *sparse, *dense]`.
    nse: how many elements to store per batch; None: the largest number of nonzero blocks
      in a batch (needs a concrete `mat`). Fewer than that keeps the first `nse` in
      row-major order; more pads with index `shape` and data 0.
    n_batch, n_dense: the number of leading batch and trailing dense dimensions.
    index_dtype: the integer dtype of the indices.

  Returns:
    A BCOO array with sorted, unique indices.

  Raises:
    ConcretizationTypeError: `nse=None` with a traced `mat`.
    TypeError / ValueError: a non-integer or negative `nse`, or `n_batch + n_dense` larger
      than `mat.ndim`.
  """
  mat = jnp.asarray(mat)
  if nse is None:
    nse = count_stored_elements(mat, n_batch, n_dense)
  nse = operator.index(nse)
  if nse < 0:
    raise ValueError(f"nse must be non-negative, got nse={nse}")
  data, indices = bcoo_fromdense_p.bind(mat, nse=nse, n_batch=n_batch, n_dense=n_dense,
                                        index_dtype=index_dtype)
  return BCOO((data, indices), shape=mat.shape, indices_sorted=True, unique_indices=True)


def _bcoo_fromdense_abstract_eval(mat, *, nse, n_batch, n_dense, index_dtype):
  n_sparse = mat.ndim - n_batch - n_dense
  if n_sparse < 0 or n_batch < 0 or n_dense < 0:
    raise ValueError(f"bcoo_fromdense: n_batch={n_batch} and n_dense={n_dense} do not fit "
                     f"an array of rank {mat.ndim}")
  batch = tuple(mat.shape[:n_batch])
  dense = tuple(mat.shape[mat.ndim - n_dense:])
  return [ShapedArray(batch + (nse,) + dense, mat.dtype),
          ShapedArray(batch + (nse, n_sparse), np.dtype(index_dtype))]


def _bcoo_fromdense_impl(mat, *, nse, n_batch, n_dense, index_dtype):
  n_sparse = mat.ndim - n_batch - n_dense
  sparse_shape = tuple(mat.shape[n_batch:n_batch + n_sparse])
  idtype = np.dtype(index_dtype)

  def one(m):
    if n_sparse == 0:
      data = jnp.concatenate([m[None], jnp.zeros((nse - 1,) + m.shape, m.dtype)])[:nse]
      return data, jnp.zeros((nse, 0), idtype)
    mask = m != 0
    if n_dense:
      mask = jnp.any(mask, axis=tuple(range(n_sparse, n_sparse + n_dense)))
    idx = jnp.nonzero(mask, size=nse, fill_value=sparse_shape)
    data = m.at[idx].get(mode="fill", fill_value=0)
    return data, jnp.stack([i.astype(idtype) for i in idx], axis=-1)
  return nfold_vmap(one, n_batch)(mat)


def _bcoo_fromdense_jvp(primals, tangents, *, nse, n_batch, n_dense, index_dtype):
  mat, = primals
  t, = tangents
  data, indices = bcoo_fromdense_p.bind(mat, nse=nse, n_batch=n_batch, n_dense=n_dense,
                                        index_dtype=index_dtype)
  if type(t) is ad.Zero:
    t_data = ad.Zero.from_primal_value(data)
  else:
    t_data = bcoo_extract_p.bind(indices, t, assume_unique=True)
  return [data, indices], [t_data, ad.Zero.from_primal_value(indices)]


def _bcoo_fromdense_transpose(ct, mat, *, nse, n_batch, n_dense, index_dtype):
  raise NotImplementedError("Transpose rule for bcoo_fromdense not implemented: its JVP is "
                            "a bcoo_extract, which is transposed instead.")


def _bcoo_fromdense_batch_rule(args, dims, *, nse, n_batch, n_dense, index_dtype):
  mat = batching.moveaxis(args[0], dims[0], 0)
  out = bcoo_fromdense_p.bind(mat, nse=nse, n_batch=n_batch + 1, n_dense=n_dense,
                              index_dtype=index_dtype)
  return out, [0, 0]


class _Printed(str):
  """A param value printed as its text (JAX prints `index_dtype`, a scalar type, with str)."""


def _bcoo_fromdense_pp_rule(eqn, context):
  return [(k, _Printed(v) if k == "index_dtype" else v) for k, v in sorted(eqn.params.items())]


bcoo_fromdense_p = Primitive("bcoo_fromdense")
core.pp_eqn_rules[bcoo_fromdense_p] = _bcoo_fromdense_pp_rule
bcoo_fromdense_p.multiple_results = True
bcoo_fromdense_p.def_abstract_eval(_bcoo_fromdense_abstract_eval)
mlir.register_lowering(bcoo_fromdense_p, mlir.lower_fun(_bcoo_fromdense_impl,
                                                        multiple_results=True))
ad.primitive_jvps[bcoo_fromdense_p] = _bcoo_fromdense_jvp
ad.primitive_transposes[bcoo_fromdense_p] = _bcoo_fromdense_transpose
batching.primitive_batchers[bcoo_fromdense_p] = _bcoo_fromdense_batch_rule


# ---------------------------------------------------------------------------
# bcoo_extract


def bcoo_extract(sparr: "BCOO", arr: Any, *, assume_unique: bool | None = None) -> "BCOO":
  """The elements of the dense `arr` at the indices of `sparr` (JAX's `bcoo_extract`).

  Args:
    sparr: a BCOO array whose indices are used (its data is not).
    arr: a dense array of `sparr`'s shape.
    assume_unique: whether the indices may be taken as unique; None: `sparr.unique_indices`.
      When False, a repeated index gets the value at its first occurrence only (others 0),
      so that `todense` of the result equals `arr` on the stored positions.

  Returns:
    A BCOO array with `sparr`'s indices and data gathered from `arr` (0 at out-of-range
    indices).

  Raises:
    TypeError: if `sparr` is not a BCOO array.
    ValueError: if `arr`'s shape differs from `sparr`'s.
  """
  if not isinstance(sparr, BCOO):
    raise TypeError(f"First argument to bcoo_extract should be a BCOO array. Got "
                    f"type(sparr)={type(sparr)}")
  arr = jnp.asarray(arr)
  if tuple(arr.shape) != tuple(sparr.shape):
    raise ValueError(f"shape mismatch: sparr.shape={sparr.shape} arr.shape={arr.shape}")
  if assume_unique is None:
    assume_unique = sparr.unique_indices
  data = _bcoo_extract(sparr.indices, arr, assume_unique=assume_unique)
  return BCOO((data, sparr.indices), **sparr._info._asdict())


def _bcoo_extract(indices, arr, *, assume_unique=True):
  return bcoo_extract_p.bind(jnp.asarray(indices), jnp.asarray(arr),
                             assume_unique=bool(assume_unique))


def _extract_props(indices, arr):
  nb = len(indices.shape) - 2
  nse, ns = indices.shape[-2:]
  batch = tuple(np.broadcast_shapes(tuple(indices.shape[:nb]), tuple(arr.shape[:nb])))
  return nb, ns, nse, batch


def _bcoo_extract_abstract_eval(indices, arr, *, assume_unique):
  nb, ns, nse, batch = _extract_props(indices, arr)
  if arr.ndim < nb + ns:
    raise ValueError(f"bcoo_extract: indices {indices.str_short()} do not fit an array "
                     f"{arr.str_short()}")
  return ShapedArray(batch + (nse,) + tuple(arr.shape[nb + ns:]), arr.dtype)


def _bcoo_extract_impl(indices, arr, *, assume_unique):
  nb, ns, nse, batch = _extract_props(indices, arr)
  indices = broadcast_batch(indices, batch, nb)
  arr = broadcast_batch(arr, batch, nb)
  sparse_shape = tuple(arr.shape[nb:nb + ns])

  def one(i, a):
    if ns == 0:
      out = jnp.broadcast_to(a[None], (nse,) + a.shape)
      if assume_unique:
        return out
      keep = jnp.arange(nse) == 0
    else:
      out = a.at[tuple(i[:, k] for k in range(ns))].get(mode="fill", fill_value=0)
      if assume_unique:
        return out
      keep = _first_occurrence(i, sparse_shape)
    keep = jnp.reshape(keep, keep.shape + (1,) * (out.ndim - 1))
    return jnp.where(keep, out, jnp.zeros((), out.dtype))
  return nfold_vmap(one, nb)(indices, arr)


def _first_occurrence(i, sparse_shape):
  """`bool[nse]`: whether each index of `i[nse, n_sparse]` does not occur earlier."""
  n = i.shape[0]
  same = jnp.all(i[:, None, :] == i[None, :, :], axis=-1)
  earlier = jnp.arange(n)[None, :] < jnp.arange(n)[:, None]
  return ~jnp.any(same & earlier, axis=1)


def _bcoo_extract_jvp(primals, tangents, *, assume_unique):
  indices, arr = primals
  out = bcoo_extract_p.bind(indices, arr, assume_unique=assume_unique)
  t = tangents[1]
  if type(t) is ad.Zero:
    return out, ad.Zero.from_primal_value(out)
  return out, bcoo_extract_p.bind(indices, t, assume_unique=assume_unique)


def _bcoo_extract_transpose(ct, indices, arr, *, assume_unique):
  if ad.is_undefined_primal(indices):
    raise ValueError("Cannot transpose with respect to sparse indices")
  if type(ct) is ad.Zero:
    return [None, None]
  shape = arr.aval.shape
  info = SparseInfo(tuple(shape), unique_indices=assume_unique)
  return [None, bcoo_todense_p.bind(ct, indices, spinfo=info)]


def _bcoo_extract_batch_rule(args, dims, *, assume_unique):
  size = _axis_size(args, dims)
  indices, arr = _batch_rule_operands(args, dims, size, dense=(0, 1))
  return bcoo_extract_p.bind(indices, arr, assume_unique=assume_unique), 0


bcoo_extract_p = Primitive("bcoo_extract")
bcoo_extract_p.def_abstract_eval(_bcoo_extract_abstract_eval)
mlir.register_lowering(bcoo_extract_p, mlir.lower_fun(_bcoo_extract_impl,
                                                      multiple_results=False))
ad.primitive_jvps[bcoo_extract_p] = _bcoo_extract_jvp
ad.primitive_transposes[bcoo_extract_p] = _bcoo_extract_transpose
batching.primitive_batchers[bcoo_extract_p] = _bcoo_extract_batch_rule


# ---------------------------------------------------------------------------
# bcoo_transpose


def bcoo_transpose(mat: "BCOO", *, permutation: Sequence[int]) -> "BCOO":
  """Permutes the dimensions of a BCOO array (JAX's `bcoo_transpose`).

  Args:
    mat: a BCOO array.
    permutation: a permutation of `range(mat.ndim)` that keeps batch dimensions among the
      batch dimensions, sparse among sparse and dense among dense.

  Returns:
    The transposed BCOO array (`indices_sorted` only for the identity permutation).

  Raises:
    TypeError: if `permutation` is not a permutation of the dimensions.
    ValueError: if it moves a dimension into another kind (JAX's message).
  """
  data, indices = _bcoo_transpose(mat.data, mat.indices, permutation=permutation,
                                  spinfo=mat._info)
  shape = tuple(mat.shape[p] for p in permutation)
  same = tuple(permutation) == tuple(range(mat.ndim))
  return BCOO((data, indices), shape=shape,
              indices_sorted=mat.indices_sorted and same, unique_indices=mat.unique_indices)


def _bcoo_transpose(data, indices, *, permutation, spinfo):
  permutation = tuple(int(p) for p in permutation)
  return bcoo_transpose_p.bind(data, indices, permutation=permutation, spinfo=spinfo)


def _validate_permutation(data, indices, permutation, shape):
  if tuple(sorted(permutation)) != tuple(range(len(shape))):
    raise TypeError(f"transpose permutation isn't a permutation of operand dimensions, got "
                    f"permutation {tuple(permutation)} for shape {tuple(shape)}.")
  nb, ns, nd, _ = _props(data, indices, shape)
  batch_perm = permutation[:nb]
  sparse_perm = [p - nb for p in permutation[nb:nb + ns]]
  dense_perm = [p - nb - ns for p in permutation[nb + ns:]]
  if (tuple(sorted(batch_perm)) != tuple(range(nb))
      or tuple(sorted(sparse_perm)) != tuple(range(ns))
      or tuple(sorted(dense_perm)) != tuple(range(nd))):
    raise ValueError(f"Invalid permutation: {permutation}. Permutation must not mix batch, "
                     f"sparse, and dense dimensions.")
  return batch_perm, sparse_perm, dense_perm


def _bcoo_transpose_abstract_eval(data, indices, *, permutation, spinfo):
  batch_perm, sparse_perm, dense_perm = _validate_permutation(data, indices, permutation,
                                                              spinfo.shape)
  nb = len(batch_perm)
  dshape = tuple(data.shape[p] for p in batch_perm) + (data.shape[nb],) + tuple(
      data.shape[nb + 1 + p] for p in dense_perm)
  ishape = tuple(indices.shape[p] for p in batch_perm) + tuple(indices.shape[nb:])
  return [ShapedArray(dshape, data.dtype), ShapedArray(ishape, indices.dtype)]


def _bcoo_transpose_impl(data, indices, *, permutation, spinfo):
  batch_perm, sparse_perm, dense_perm = _validate_permutation(data, indices, permutation,
                                                              spinfo.shape)
  nb = len(batch_perm)
  data = jnp.transpose(data, tuple(batch_perm) + (nb,) + tuple(nb + 1 + p for p in dense_perm))
  indices = jnp.transpose(indices, tuple(batch_perm) + (nb, nb + 1))
  if sparse_perm:
    indices = indices[..., np.array(sparse_perm, dtype=np.int32)]
  return data, indices


def _bcoo_transpose_jvp(primals, tangents, *, permutation, spinfo):
  data, indices = primals
  out = bcoo_transpose_p.bind(data, indices, permutation=permutation, spinfo=spinfo)
  t = tangents[0]
  if type(t) is ad.Zero:
    t_out = ad.Zero.from_primal_value(out[0])
  else:
    t_out = bcoo_transpose_p.bind(t, indices, permutation=permutation, spinfo=spinfo)[0]
  return out, [t_out, ad.Zero.from_primal_value(out[1])]


def _bcoo_transpose_transpose(ct, data, indices, *, permutation, spinfo):
  if ad.is_undefined_primal(indices):
    raise ValueError("Cannot transpose with respect to sparse indices")
  ct_data = ct[0]
  if type(ct_data) is ad.Zero:
    return [None, None]
  batch_perm, _, dense_perm = _validate_permutation(data.aval, indices, permutation,
                                                    spinfo.shape)
  nb = len(batch_perm)
  perm = tuple(batch_perm) + (nb,) + tuple(nb + 1 + p for p in dense_perm)
  return [lax.transpose(ct_data, tuple(np.argsort(perm))), None]


def _bcoo_transpose_batch_rule(args, dims, *, permutation, spinfo):
  size = _axis_size(args, dims)
  data, indices = _batch_rule_operands(args, dims, size, sparse_pairs=[(0, 1)], full=True)
  perm = (0,) + tuple(p + 1 for p in permutation)
  out = bcoo_transpose_p.bind(data, indices, permutation=perm,
                              spinfo=_batched_spinfo(spinfo, size))
  return out, [0, 0]


bcoo_transpose_p = Primitive("bcoo_transpose")
bcoo_transpose_p.multiple_results = True
bcoo_transpose_p.def_abstract_eval(_bcoo_transpose_abstract_eval)
mlir.register_lowering(bcoo_transpose_p, mlir.lower_fun(_bcoo_transpose_impl,
                                                       multiple_results=True))
ad.primitive_jvps[bcoo_transpose_p] = _bcoo_transpose_jvp
ad.primitive_transposes[bcoo_transpose_p] = _bcoo_transpose_transpose
batching.primitive_batchers[bcoo_transpose_p] = _bcoo_transpose_batch_rule


# ---------------------------------------------------------------------------
# bcoo_dot_general (sparse x dense)


def _canonical_dnums(dimension_numbers):
  (lc, rc), (lb, rb) = dimension_numbers
  return ((tuple(int(d) for d in lc), tuple(int(d) for d in rc)),
          (tuple(int(d) for d in lb), tuple(int(d) for d in rb)))


def _dot_general_shape(lhs_shape, rhs_shape, dimension_numbers):
  """The result shape of `dot_general`, with its checks (JAX's messages)."""
  (lc, rc), (lb, rb) = dimension_numbers
  if len(lc) != len(rc):
    raise TypeError(f"dot_general requires equal numbers of lhs and rhs contracting "
                    f"dimensions, got lhs_contracting_dimensions={lc} and "
                    f"rhs_contracting_dimensions={rc}.")
  if len(lb) != len(rb):
    raise TypeError(f"dot_general requires equal numbers of lhs and rhs batch dimensions, "
                    f"got lhs_batch_dimensions={lb} and rhs_batch_dimensions={rb}.")
  for name, ds, nd in (("lhs", lc + lb, len(lhs_shape)), ("rhs", rc + rb, len(rhs_shape))):
    if any(not 0 <= d < nd for d in ds) or len(set(ds)) != len(ds):
      raise TypeError(f"dot_general requires {name} dimension numbers to be distinct, "
                      f"nonnegative and less than the rank {nd}, got {ds}.")
  lb_shape = tuple(lhs_shape[d] for d in lb)
  if lb_shape != tuple(rhs_shape[d] for d in rb):
    raise TypeError(f"dot_general requires lhs batch dimensions and rhs batch dimensions to "
                    f"have the same shape, got {lb_shape} and "
                    f"{tuple(rhs_shape[d] for d in rb)}.")
  lc_shape, rc_shape = tuple(lhs_shape[d] for d in lc), tuple(rhs_shape[d] for d in rc)
  if lc_shape != rc_shape:
    raise TypeError(f"dot_general requires contracting dimensions to have the same shape, "
                    f"got {lc_shape} and {rc_shape}.")
  lfree = tuple(d for d in range(len(lhs_shape)) if d not in lc and d not in lb)
  rfree = tuple(d for d in range(len(rhs_shape)) if d not in rc and d not in rb)
  return (lb_shape + tuple(lhs_shape[d] for d in lfree) + tuple(rhs_shape[d] for d in rfree),
          lfree, rfree)


def _result_dtype(a, b, preferred_element_type):
  if preferred_element_type is not None:
    return np.dtype(preferred_element_type)
  return dtypes.result_type(a, b)


def bcoo_dot_general(lhs: Any, rhs: Any, *, dimension_numbers: Any,
                     precision: Any = None, preferred_element_type: Any = None,
                     out_sharding: Any = None) -> Any:
  """A `lax.dot_general` where either or both operands are BCOO arrays (JAX's
  `bcoo_dot_general`).

  Args:
    lhs, rhs: BCOO or dense arrays.
    dimension_numbers: `((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))`.
    precision: ignored (as JAX's sparse kernels).
    preferred_element_type: the result's dtype (None: the promoted operand dtype).

  Returns:
    A dense array when one operand is dense; a BCOO array (its batch dimensions the dot's
    batch dimensions) when both are sparse. The shape is `dot_general`'s:
    `[*batch, *lhs_free, *rhs_free]`.

  Raises:
    TypeError: for dimension numbers that do not fit the shapes (`dot_general`'s messages).
    NotImplementedError: sparse x sparse with dense dimensions, or with dot batch
      dimensions other than the leading batch dimensions of both operands.
  """
  del precision, out_sharding
  dimension_numbers = _canonical_dnums(dimension_numbers)
  if isinstance(lhs, BCOO) and isinstance(rhs, BCOO):
    shape, _, _ = _dot_general_shape(lhs.shape, rhs.shape, dimension_numbers)
    data, indices = bcoo_spdot_general_p.bind(
        lhs.data, lhs.indices, rhs.data, rhs.indices, dimension_numbers=dimension_numbers,
        lhs_spinfo=lhs._info, rhs_spinfo=rhs._info,
        preferred_element_type=preferred_element_type)
    return BCOO((data, indices), shape=shape)
  if isinstance(lhs, BCOO):
    return _bcoo_dot_general(lhs.data, lhs.indices, rhs, dimension_numbers=dimension_numbers,
                             lhs_spinfo=lhs._info,
                             preferred_element_type=preferred_element_type)
  if isinstance(rhs, BCOO):
    # dense x sparse: computed as sparse x dense, then the result's dims put back in order.
    (lc, rc), (lb, rb) = dimension_numbers
    swapped = ((rc, lc), (rb, lb))
    out = _bcoo_dot_general(rhs.data, rhs.indices, lhs, dimension_numbers=swapped,
                            lhs_spinfo=rhs._info,
                            preferred_element_type=preferred_element_type)
    nb = len(lb)
    n_rfree = rhs.ndim - len(rc) - len(rb)
    n_lfree = out.ndim - nb - n_rfree
    perm = (tuple(range(nb)) + tuple(range(nb + n_rfree, out.ndim))
            + tuple(range(nb, nb + n_rfree)))
    return lax.transpose(out, perm) if perm != tuple(range(out.ndim)) else out
  return lax.dot_general(lhs, rhs, dimension_numbers,
                         preferred_element_type=preferred_element_type)


def _bcoo_dot_general(lhs_data, lhs_indices, rhs, *, dimension_numbers, lhs_spinfo,
                      preferred_element_type=None):
  if preferred_element_type is not None:
    preferred_element_type = np.dtype(preferred_element_type)
  return bcoo_dot_general_p.bind(jnp.asarray(lhs_data), jnp.asarray(lhs_indices),
                                 jnp.asarray(rhs),
                                 dimension_numbers=_canonical_dnums(dimension_numbers),
                                 lhs_spinfo=lhs_spinfo,
                                 preferred_element_type=preferred_element_type)


def _bcoo_dot_general_abstract_eval(lhs_data, lhs_indices, rhs, *, dimension_numbers,
                                    lhs_spinfo, preferred_element_type):
  _props(lhs_data, lhs_indices, lhs_spinfo.shape)
  shape, _, _ = _dot_general_shape(lhs_spinfo.shape, rhs.shape, dimension_numbers)
  return ShapedArray(shape, _result_dtype(lhs_data.dtype, rhs.dtype, preferred_element_type))


def _bcoo_dot_general_impl(lhs_data, lhs_indices, rhs, *, dimension_numbers, lhs_spinfo,
                           preferred_element_type):
  shape = tuple(lhs_spinfo.shape)
  out_shape, lfree, rfree = _dot_general_shape(shape, rhs.shape, dimension_numbers)
  out_dtype = _result_dtype(lhs_data.dtype, rhs.dtype, preferred_element_type)
  nb, ns, nd, _ = _props(lhs_data, lhs_indices, shape)
  (lc, rc), (lb, rb) = dimension_numbers
  data, coords = _unbatch(lhs_data, lhs_indices, shape)
  n_coord = nb + ns   # lhs dims < n_coord have coordinates; the others are dense (data)
  data = data.astype(out_dtype)
  rhs = rhs.astype(out_dtype)
  # 1. rhs gathered at each element's coordinates of the dims it shares with the lhs.
  pairs = [(l, r) for l, r in zip(lc + lb, rc + rb) if l < n_coord]
  gathered = [r for _, r in pairs]
  rest = [d for d in range(rhs.ndim) if d not in gathered]
  n = data.shape[0]
  if pairs:
    rhs_t = jnp.transpose(rhs, tuple(gathered + rest))
    rhs_k = rhs_t.at[tuple(coords[:, l] for l, _ in pairs)].get(mode="fill", fill_value=0)
  else:
    rhs_k = jnp.broadcast_to(rhs[None], (n,) + tuple(rhs.shape))
  # 2. each element's block times its rhs slice (a dense dot_general, batched over elements).
  dpos = lambda l: 1 + l - n_coord
  rpos = lambda r: 1 + rest.index(r)
  dc = [(dpos(l), rpos(r)) for l, r in zip(lc, rc) if l >= n_coord]
  db = [(dpos(l), rpos(r)) for l, r in zip(lb, rb) if l >= n_coord]
  prod = lax.dot_general(data, rhs_k,
                         ((tuple(a for a, _ in dc), tuple(b for _, b in dc)),
                          ((0,) + tuple(a for a, _ in db), (0,) + tuple(b for _, b in db))),
                         preferred_element_type=out_dtype)
  # 3. scatter-add at the element's coordinates of the result's dims that come from them.
  out_src = list(lb) + list(lfree)   # lhs dim of each result dim before the rhs free ones
  coord_pos = [p for p, l in enumerate(out_src) if l < n_coord]
  if not coord_pos:
    return jnp.sum(prod, axis=0).astype(out_dtype)
  window_pos = [p for p in range(len(out_shape)) if p not in coord_pos]
  perm = coord_pos + window_pos
  out_t = jnp.zeros(tuple(out_shape[p] for p in perm), out_dtype)
  out_t = out_t.at[tuple(coords[:, out_src[p]] for p in coord_pos)].add(prod, mode="drop")
  return jnp.transpose(out_t, tuple(np.argsort(perm))) if perm != sorted(perm) else out_t


def _bcoo_dot_general_jvp_lhs(t, lhs_data, lhs_indices, rhs, **params):
  return bcoo_dot_general_p.bind(t, lhs_indices, rhs, **params)


def _bcoo_dot_general_jvp_rhs(t, lhs_data, lhs_indices, rhs, **params):
  return bcoo_dot_general_p.bind(lhs_data, lhs_indices, t, **params)


def _bcoo_dot_general_transpose(ct, lhs_data, lhs_indices, rhs, *, dimension_numbers,
                                lhs_spinfo, preferred_element_type):
  if ad.is_undefined_primal(lhs_indices):
    raise ValueError("Cannot transpose with respect to sparse indices")
  if type(ct) is ad.Zero:
    return [None, None, None]
  shape = tuple(lhs_spinfo.shape)
  (lc, rc), (lb, rb) = dimension_numbers
  rhs_shape = _shape_of(rhs)
  _, lfree, rfree = _dot_general_shape(shape, rhs_shape, dimension_numbers)
  nbd = len(lb)
  if ad.is_undefined_primal(lhs_data) and ad.is_undefined_primal(rhs):
    raise ValueError("transpose of bcoo_dot_general: both operands are linear")
  if ad.is_undefined_primal(rhs):
    # ct[*b, *lfree, *rfree] contracted with the sparse lhs over its free dims.
    ct_lfree = tuple(range(nbd, nbd + len(lfree)))
    dims = ((tuple(lfree), ct_lfree), (tuple(lb), tuple(range(nbd))))
    res = bcoo_dot_general_p.bind(lhs_data, lhs_indices, ct, dimension_numbers=dims,
                                  lhs_spinfo=lhs_spinfo,
                                  preferred_element_type=preferred_element_type)
    # res: [*batch, *lc (ascending), *rfree]; rhs: rb, the rc matching lc, rfree.
    lc_sorted = sorted(lc)
    order = list(rb) + [rc[lc.index(l)] for l in lc_sorted] + list(rfree)
    perm = tuple(int(i) for i in np.argsort(order))
    if perm != tuple(range(len(perm))):
      res = lax.transpose(res, perm)
    return [None, None, res.astype(rhs.aval.dtype)]
  # lhs data: ct contracted with rhs over its free dims gives the dense lhs cotangent,
  # sampled at the indices.
  ct_rfree = tuple(range(nbd + len(lfree), nbd + len(lfree) + len(rfree)))
  dims = ((ct_rfree, tuple(rfree)), (tuple(range(nbd)), tuple(rb)))
  # dense result: [*lb order, *lfree, *rc (ascending)] -> lhs order
  rc_sorted = sorted(rc)
  order = list(lb) + list(lfree) + [lc[rc.index(r)] for r in rc_sorted]
  perm = tuple(int(i) for i in np.argsort(order))
  if perm == tuple(range(len(perm))):
    res = bcoo_dot_general_sampled_p.bind(ct, rhs, lhs_indices, dimension_numbers=dims)
  else:
    dense = lax.transpose(lax.dot_general(ct, rhs, dims), perm)
    res = bcoo_extract_p.bind(lhs_indices, dense, assume_unique=True)
  res = _sum_to_shape(res, lhs_data.aval.shape)
  return [res.astype(lhs_data.aval.dtype), None, None]


def _bcoo_dot_general_batch_rule(args, dims, *, dimension_numbers, lhs_spinfo,
                                 preferred_element_type):
  size = _axis_size(args, dims)
  (lc, rc), (lb, rb) = dimension_numbers
  lhs_mapped = dims[0] is not batching.not_mapped or dims[1] is not batching.not_mapped
  lhs_data, lhs_indices = _batch_rule_operands(args, dims, size, sparse_pairs=[(0, 1)])[:2]
  spinfo = _batched_spinfo(lhs_spinfo, size)
  sh = lambda ds: tuple(d + 1 for d in ds)
  if dims[2] is batching.not_mapped:
    new = ((sh(lc), rc), (sh(lb), rb))
    out = bcoo_dot_general_p.bind(lhs_data, lhs_indices, args[2], dimension_numbers=new,
                                  lhs_spinfo=spinfo,
                                  preferred_element_type=preferred_element_type)
    return out, len(lb)
  rhs = batching.moveaxis(args[2], dims[2], 0)
  del lhs_mapped
  new = ((sh(lc), sh(rc)), ((0,) + sh(lb), (0,) + sh(rb)))
  out = bcoo_dot_general_p.bind(lhs_data, lhs_indices, rhs, dimension_numbers=new,
                                lhs_spinfo=spinfo, preferred_element_type=preferred_element_type)
  return out, 0


bcoo_dot_general_p = Primitive("bcoo_dot_general")
bcoo_dot_general_p.def_abstract_eval(_bcoo_dot_general_abstract_eval)
mlir.register_lowering(bcoo_dot_general_p, mlir.lower_fun(_bcoo_dot_general_impl,
                                                          multiple_results=False))
ad.defjvp(bcoo_dot_general_p, _bcoo_dot_general_jvp_lhs, None, _bcoo_dot_general_jvp_rhs)
ad.primitive_transposes[bcoo_dot_general_p] = _bcoo_dot_general_transpose
batching.primitive_batchers[bcoo_dot_general_p] = _bcoo_dot_general_batch_rule


# ---------------------------------------------------------------------------
# bcoo_dot_general_sampled


def bcoo_dot_general_sampled(A: Any, B: Any, indices: Any, *, dimension_numbers: Any) -> Any:
  """`dot_general(A, B, dimension_numbers)` computed only at `indices` (JAX's
  `bcoo_dot_general_sampled`): the data of a BCOO array with those indices.

  Args:
    A, B: dense arrays.
    indices: BCOO indices `int[*batch, nse, n_sparse]` into the dot's result.
    dimension_numbers: as `lax.dot_general`'s.

  Returns:
    `T[*batch, nse, *dense]`: the result's blocks at `indices` (0 where out of range).

  The product is computed densely, then sampled (stagecraft's kernel; JAX's computes only
  the sampled elements).
  """
  dims = _canonical_dnums(dimension_numbers)
  return bcoo_dot_general_sampled_p.bind(jnp.asarray(A), jnp.asarray(B),
                                         jnp.asarray(indices), dimension_numbers=dims)


def _bcoo_dot_general_sampled_abstract_eval(A, B, indices, *, dimension_numbers):
  shape, _, _ = _dot_general_shape(A.shape, B.shape, dimension_numbers)
  dense = ShapedArray(shape, dtypes.result_type(A.dtype, B.dtype))
  return _bcoo_extract_abstract_eval(indices, dense, assume_unique=True)


def _bcoo_dot_general_sampled_impl(A, B, indices, *, dimension_numbers):
  dense = lax.dot_general(A, B, dimension_numbers)
  return _bcoo_extract_impl(indices, dense, assume_unique=True)


def _bcoo_dot_general_sampled_batch_rule(args, dims, *, dimension_numbers):
  size = _axis_size(args, dims)
  A, B, indices = _batch_rule_operands(args, dims, size, dense=(0, 1, 2), full=True)
  (ac, bc), (ab, bb) = dimension_numbers
  sh = lambda ds: tuple(d + 1 for d in ds)
  new = ((sh(ac), sh(bc)), ((0,) + sh(ab), (0,) + sh(bb)))
  return bcoo_dot_general_sampled_p.bind(A, B, indices, dimension_numbers=new), 0


bcoo_dot_general_sampled_p = Primitive("bcoo_dot_general_sampled")
bcoo_dot_general_sampled_p.def_abstract_eval(_bcoo_dot_general_sampled_abstract_eval)
mlir.register_lowering(bcoo_dot_general_sampled_p,
                       mlir.lower_fun(_bcoo_dot_general_sampled_impl, multiple_results=False))
ad.defjvp(bcoo_dot_general_sampled_p,
          lambda t, A, B, indices, **p: bcoo_dot_general_sampled_p.bind(t, B, indices, **p),
          lambda t, A, B, indices, **p: bcoo_dot_general_sampled_p.bind(A, t, indices, **p),
          None)
ad.primitive_transposes[bcoo_dot_general_sampled_p] = transpose_via_impl(
    bcoo_dot_general_sampled_p, _bcoo_dot_general_sampled_impl)
batching.primitive_batchers[bcoo_dot_general_sampled_p] = _bcoo_dot_general_sampled_batch_rule


# ---------------------------------------------------------------------------
# bcoo_sum_duplicates


def bcoo_sum_duplicates(mat: "BCOO", nse: int | None = None) -> "BCOO":
  """Sums the stored elements of `mat` that share an index (JAX's `bcoo_sum_duplicates`).

  Args:
    mat: a BCOO array.
    nse: the number of elements to store per batch; None: the largest number of distinct
      in-range indices of a batch (needs concrete indices). Extra slots are padded (index
      `shape`, data 0); out-of-range indices are gathered into one such slot.

  Returns:
    A BCOO array with sorted, unique indices.

  Raises:
    ValueError: `nse=None` with traced indices (JAX's message).
  """
  data, indices = _bcoo_sum_duplicates(mat.data, mat.indices, spinfo=mat._info, nse=nse)
  return BCOO((data, indices), shape=mat.shape, indices_sorted=True, unique_indices=True)


def _count_unique(indices, shape, n_batch):
  if isinstance(indices, core.Tracer) and indices.to_concrete_value() is None:
    raise ValueError("bcoo_sum_duplicates: nse must be specified when using the function "
                     "within jit, vmap, and other transformations requiring abstract "
                     "evaluation.")
  idx = np.asarray(indices)
  ns = idx.shape[-1]
  if ns == 0:   # no sparse dimensions: every element is the one position (JAX's nse 1)
    return 1
  sparse_shape = np.array(shape[n_batch:n_batch + ns])
  flat = idx.reshape((-1,) + idx.shape[n_batch:])
  best = 0
  for b in flat:
    ok = np.all((b >= 0) & (b < sparse_shape), axis=-1)
    best = max(best, len({tuple(r) for r in b[ok]}))
  return best


def _bcoo_sum_duplicates(data, indices, *, spinfo, nse):
  if nse is None:
    nb = np.ndim(indices) - 2
    nse = _count_unique(indices, spinfo.shape, nb)
  return bcoo_sum_duplicates_p.bind(jnp.asarray(data), jnp.asarray(indices), spinfo=spinfo,
                                    nse=int(nse))


def _bcoo_sum_duplicates_abstract_eval(data, indices, *, spinfo, nse):
  if nse is None:
    raise ValueError("bcoo_sum_duplicates: nse must be specified when using the function "
                     "within jit, vmap, and other transformations requiring abstract "
                     "evaluation.")
  nb, ns, nd, _ = _props(data, indices, spinfo.shape)
  batch = tuple(np.broadcast_shapes(tuple(data.shape[:nb]), tuple(indices.shape[:nb])))
  return [ShapedArray(batch + (nse,) + tuple(data.shape[nb + 1:]), data.dtype),
          ShapedArray(batch + (nse, ns), indices.dtype)]


def _sorted_segments(i, sparse_shape):
  """The lexicographic order of the indices `i[N, ns]` (out-of-range ones mapped to
  `sparse_shape`), the sorted indices and each sorted element's segment id (its run of
  equal indices)."""
  n, ns = i.shape
  bound = jnp.asarray(np.array(sparse_shape, dtype=np.int64).astype(i.dtype))
  ok = jnp.all((i >= 0) & (i < bound), axis=-1, keepdims=True)
  i = jnp.where(ok, i, bound)
  iota = lax.iota(np.int32, n)
  *keys, perm = lax.sort(tuple(i[:, k] for k in range(ns)) + (iota,), num_keys=ns)
  si = jnp.stack(keys, axis=-1)
  new = jnp.concatenate([jnp.ones((min(n, 1),), bool),
                         jnp.any(si[1:] != si[:-1], axis=-1)])
  seg = jnp.cumsum(new.astype(np.int32)) - 1
  return perm, si, seg


def _bcoo_sum_duplicates_impl(data, indices, *, spinfo, nse):
  shape = tuple(spinfo.shape)
  nb, ns, nd, _ = _props(data, indices, shape)
  batch = tuple(np.broadcast_shapes(tuple(data.shape[:nb]), tuple(indices.shape[:nb])))
  data = broadcast_batch(data, batch, nb)
  indices = broadcast_batch(indices, batch, nb)
  sparse_shape = shape[nb:nb + ns]

  def one(d, i):
    if ns == 0 or i.shape[0] == 0:
      summed = jnp.sum(d, axis=0, keepdims=True)
      out_d = jnp.concatenate([summed, jnp.zeros((nse,) + d.shape[1:], d.dtype)])[:nse]
      return out_d, jnp.zeros((nse, ns), i.dtype) + jnp.asarray(
          np.array(sparse_shape, dtype=np.int64).astype(i.dtype))
    perm, si, seg = _sorted_segments(i, sparse_shape)
    fill = jnp.broadcast_to(jnp.asarray(np.array(sparse_shape, np.int64).astype(i.dtype)),
                            (nse, ns))
    out_i = fill.at[seg].set(si, mode="drop")
    out_d = jnp.zeros((nse,) + d.shape[1:], d.dtype).at[seg].add(d[perm], mode="drop")
    return out_d, out_i
  return nfold_vmap(one, nb)(data, indices)


def _bcoo_sum_duplicates_jvp(primals, tangents, *, spinfo, nse):
  data, indices = primals
  out = bcoo_sum_duplicates_p.bind(data, indices, spinfo=spinfo, nse=nse)
  t = tangents[0]
  if type(t) is ad.Zero:
    t_out = ad.Zero.from_primal_value(out[0])
  else:
    t_out = bcoo_sum_duplicates_p.bind(t, indices, spinfo=spinfo, nse=nse)[0]
  return out, [t_out, ad.Zero.from_primal_value(out[1])]


def _sparse_batch_rule(prim):
  """A batching rule for a primitive of one sparse array `(data, indices)` with a `spinfo`
  param and two results `(data, indices)`."""
  def rule(args, dims, *, spinfo, **params):
    size = _axis_size(args, dims)
    data, indices = _batch_rule_operands(args, dims, size, sparse_pairs=[(0, 1)], full=True)
    out = prim.bind(data, indices, spinfo=_batched_spinfo(spinfo, size), **params)
    return out, [0, 0]
  return rule


bcoo_sum_duplicates_p = Primitive("bcoo_sum_duplicates")
bcoo_sum_duplicates_p.multiple_results = True
bcoo_sum_duplicates_p.def_abstract_eval(_bcoo_sum_duplicates_abstract_eval)
mlir.register_lowering(bcoo_sum_duplicates_p, mlir.lower_fun(_bcoo_sum_duplicates_impl,
                                                            multiple_results=True))
ad.primitive_jvps[bcoo_sum_duplicates_p] = _bcoo_sum_duplicates_jvp
ad.primitive_transposes[bcoo_sum_duplicates_p] = transpose_via_impl(
    bcoo_sum_duplicates_p, _bcoo_sum_duplicates_impl)
batching.primitive_batchers[bcoo_sum_duplicates_p] = _sparse_batch_rule(bcoo_sum_duplicates_p)


# ---------------------------------------------------------------------------
# bcoo_sort_indices


def bcoo_sort_indices(mat: "BCOO") -> "BCOO":
  """`mat` with its stored elements in lexicographic order of their indices, per batch
  (JAX's `bcoo_sort_indices`; a stable sort: equal indices keep their order).

  Returns:
    A BCOO array with `indices_sorted=True` and `mat`'s `unique_indices`.
  """
  data, indices = bcoo_sort_indices_p.bind(mat.data, mat.indices, spinfo=mat._info)
  return BCOO((data, indices), shape=mat.shape, indices_sorted=True,
              unique_indices=mat.unique_indices)


def _bcoo_sort_indices_abstract_eval(data, indices, *, spinfo):
  nb, ns, nd, nse = _props(data, indices, spinfo.shape)
  batch = tuple(np.broadcast_shapes(tuple(data.shape[:nb]), tuple(indices.shape[:nb])))
  return [ShapedArray(batch + tuple(data.shape[nb:]), data.dtype),
          ShapedArray(batch + tuple(indices.shape[nb:]), indices.dtype)]


def _bcoo_sort_indices_impl(data, indices, *, spinfo):
  shape = tuple(spinfo.shape)
  nb, ns, nd, _ = _props(data, indices, shape)
  batch = tuple(np.broadcast_shapes(tuple(data.shape[:nb]), tuple(indices.shape[:nb])))
  data = broadcast_batch(data, batch, nb)
  indices = broadcast_batch(indices, batch, nb)
  if ns == 0:
    return data, indices

  def one(d, i):
    iota = lax.iota(np.int32, i.shape[0])
    *keys, perm = lax.sort(tuple(i[:, k] for k in range(ns)) + (iota,), num_keys=ns)
    return d[perm], jnp.stack(keys, axis=-1)
  return nfold_vmap(one, nb)(data, indices)


def _bcoo_sort_indices_jvp(primals, tangents, *, spinfo):
  data, indices = primals
  out = bcoo_sort_indices_p.bind(data, indices, spinfo=spinfo)
  t = tangents[0]
  if type(t) is ad.Zero:
    t_out = ad.Zero.from_primal_value(out[0])
  else:
    t_out = bcoo_sort_indices_p.bind(t, indices, spinfo=spinfo)[0]
  return out, [t_out, ad.Zero.from_primal_value(out[1])]


bcoo_sort_indices_p = Primitive("bcoo_sort_indices")
bcoo_sort_indices_p.multiple_results = True
bcoo_sort_indices_p.def_abstract_eval(_bcoo_sort_indices_abstract_eval)
mlir.register_lowering(bcoo_sort_indices_p, mlir.lower_fun(_bcoo_sort_indices_impl,
                                                          multiple_results=True))
ad.primitive_jvps[bcoo_sort_indices_p] = _bcoo_sort_indices_jvp
ad.primitive_transposes[bcoo_sort_indices_p] = transpose_via_impl(
    bcoo_sort_indices_p, _bcoo_sort_indices_impl)
batching.primitive_batchers[bcoo_sort_indices_p] = _sparse_batch_rule(bcoo_sort_indices_p)


# ---------------------------------------------------------------------------
# bcoo_spdot_general (sparse x sparse)


def _spdot_check(lhs_data, lhs_indices, rhs_data, rhs_indices, dimension_numbers,
                 lhs_spinfo, rhs_spinfo):
  lp = _props(lhs_data, lhs_indices, lhs_spinfo.shape)
  rp = _props(rhs_data, rhs_indices, rhs_spinfo.shape)
  shape, lfree, rfree = _dot_general_shape(lhs_spinfo.shape, rhs_spinfo.shape,
                                           dimension_numbers)
  (lc, rc), (lb, rb) = dimension_numbers
  if lp.n_dense or rp.n_dense:
    raise NotImplementedError("bcoo_spdot_general: operands with dense dimensions "
                              "(n_dense > 0) are not supported.")
  if (tuple(lb) != tuple(range(lp.n_batch)) or tuple(rb) != tuple(range(rp.n_batch))):
    raise NotImplementedError(
        f"bcoo_spdot_general: the dot's batch dimensions must be the leading batch "
        f"dimensions of both operands; got lhs_batch={lb} with n_batch={lp.n_batch} and "
        f"rhs_batch={rb} with n_batch={rp.n_batch}.")
  nb = lp.n_batch
  out_sparse = shape[nb:]
  out_nse = min(lp.nse * rp.nse, math.prod(out_sparse))
  return lp, rp, shape, lfree, rfree, out_nse


def _bcoo_spdot_general_abstract_eval(lhs_data, lhs_indices, rhs_data, rhs_indices, *,
                                      dimension_numbers, lhs_spinfo, rhs_spinfo,
                                      preferred_element_type):
  lp, rp, shape, _, _, out_nse = _spdot_check(lhs_data, lhs_indices, rhs_data, rhs_indices,
                                              dimension_numbers, lhs_spinfo, rhs_spinfo)
  nb = lp.n_batch
  batch = shape[:nb]
  dtype = _result_dtype(lhs_data.dtype, rhs_data.dtype, preferred_element_type)
  return [ShapedArray(batch + (out_nse,), dtype),
          ShapedArray(batch + (out_nse, len(shape) - nb), lhs_indices.dtype)]


def _bcoo_spdot_general_impl(lhs_data, lhs_indices, rhs_data, rhs_indices, *,
                             dimension_numbers, lhs_spinfo, rhs_spinfo,
                             preferred_element_type):
  lp, rp, shape, lfree, rfree, out_nse = _spdot_check(
      lhs_data, lhs_indices, rhs_data, rhs_indices, dimension_numbers, lhs_spinfo,
      rhs_spinfo)
  nb = lp.n_batch
  batch = shape[:nb]
  (lc, rc), _ = dimension_numbers
  dtype = _result_dtype(lhs_data.dtype, rhs_data.dtype, preferred_element_type)
  ld, li = (broadcast_batch(x, batch, nb) for x in (lhs_data, lhs_indices))
  rd, ri = (broadcast_batch(x, batch, nb) for x in (rhs_data, rhs_indices))
  lsparse = tuple(lhs_spinfo.shape[nb:])
  rsparse = tuple(rhs_spinfo.shape[nb:])
  lcs, rcs = [d - nb for d in lc], [d - nb for d in rc]
  lfs, rfs = [d - nb for d in lfree], [d - nb for d in rfree]
  out_sparse = shape[nb:]
  idtype = li.dtype

  def one(ld, li, rd, ri):
    nl, nr = li.shape[0], ri.shape[0]
    ok = (_in_range(li, lsparse)[:, None] & _in_range(ri, rsparse)[None, :])
    if lcs:
      match = jnp.all(li[:, None, np.array(lcs)] == ri[None, :, np.array(rcs)], axis=-1)
      ok = ok & match
    prod = (ld.astype(dtype)[:, None] * rd.astype(dtype)[None, :])
    prod = jnp.where(ok, prod, jnp.zeros((), dtype))
    parts = []
    if lfs:
      parts.append(jnp.broadcast_to(li[:, None, np.array(lfs)], (nl, nr, len(lfs))))
    if rfs:
      parts.append(jnp.broadcast_to(ri[None, :, np.array(rfs)], (nl, nr, len(rfs))))
    idx = (jnp.concatenate(parts, axis=-1) if parts
           else jnp.zeros((nl, nr, 0), idtype)).astype(idtype)
    info = SparseInfo(out_sparse)
    return _bcoo_sum_duplicates_impl(jnp.reshape(prod, (nl * nr,)),
                                     jnp.reshape(idx, (nl * nr, len(out_sparse))),
                                     spinfo=info, nse=out_nse)
  return nfold_vmap(one, nb)(ld, li, rd, ri)


def _bcoo_spdot_general_jvp(primals, tangents, **params):
  ld, li, rd, ri = primals
  tl, _, tr, _ = tangents
  data, indices = bcoo_spdot_general_p.bind(ld, li, rd, ri, **params)
  t = ad.Zero.from_primal_value(data)
  if type(tl) is not ad.Zero:
    t = ad.add_tangents(t, bcoo_spdot_general_p.bind(tl, li, rd, ri, **params)[0])
  if type(tr) is not ad.Zero:
    t = ad.add_tangents(t, bcoo_spdot_general_p.bind(ld, li, tr, ri, **params)[0])
  return [data, indices], [t, ad.Zero.from_primal_value(indices)]


def _bcoo_spdot_general_batch_rule(args, dims, *, dimension_numbers, lhs_spinfo, rhs_spinfo,
                                   preferred_element_type):
  size = _axis_size(args, dims)
  ld, li, rd, ri = _batch_rule_operands(args, dims, size, sparse_pairs=[(0, 1), (2, 3)],
                                        full=True)
  (lc, rc), (lb, rb) = dimension_numbers
  sh = lambda ds: tuple(d + 1 for d in ds)
  new = ((sh(lc), sh(rc)), ((0,) + sh(lb), (0,) + sh(rb)))
  out = bcoo_spdot_general_p.bind(ld, li, rd, ri, dimension_numbers=new,
                                  lhs_spinfo=_batched_spinfo(lhs_spinfo, size),
                                  rhs_spinfo=_batched_spinfo(rhs_spinfo, size),
                                  preferred_element_type=preferred_element_type)
  return out, [0, 0]


bcoo_spdot_general_p = Primitive("bcoo_spdot_general")
bcoo_spdot_general_p.multiple_results = True
bcoo_spdot_general_p.def_abstract_eval(_bcoo_spdot_general_abstract_eval)
mlir.register_lowering(bcoo_spdot_general_p, mlir.lower_fun(_bcoo_spdot_general_impl,
                                                           multiple_results=True))
ad.primitive_jvps[bcoo_spdot_general_p] = _bcoo_spdot_general_jvp
ad.primitive_transposes[bcoo_spdot_general_p] = transpose_via_impl(
    bcoo_spdot_general_p, _bcoo_spdot_general_impl)
batching.primitive_batchers[bcoo_spdot_general_p] = _bcoo_spdot_general_batch_rule


# ---------------------------------------------------------------------------
# Functions composed of the primitives


def _canonical_axes(axes, ndim, name="axes"):
  axes = (axes,) if isinstance(axes, (int, np.integer)) else tuple(axes)
  out = []
  for a in axes:
    a = operator.index(a)
    if not -ndim <= a < ndim:
      raise ValueError(f"{name} {a} is out of bounds for array of dimension {ndim}")
    out.append(a % ndim)
  return tuple(sorted(set(out)))


def _mask_out_of_range(mat: "BCOO") -> Any:
  """`mat.data` with the blocks at out-of-range indices set to 0."""
  nb, ns = mat.n_batch, mat.n_sparse
  ok = _in_range(mat.indices, mat.shape[nb:nb + ns])
  ok = jnp.reshape(ok, ok.shape + (1,) * mat.n_dense)
  return jnp.where(ok, mat.data, jnp.zeros((), mat.dtype))


def _mark_zeros(mat: "BCOO") -> "BCOO":
  """`mat` with its all-zero blocks moved to the out-of-range index `shape`."""
  nb, ns = mat.n_batch, mat.n_sparse
  zero = jnp.all(mat.data == 0, axis=tuple(range(nb + 1, mat.data.ndim)))
  bound = jnp.asarray(np.array(mat.shape[nb:nb + ns], np.int64).astype(mat.indices.dtype))
  indices = jnp.where(zero[..., None], bound, mat.indices)
  return BCOO((mat.data, indices), shape=mat.shape)


def bcoo_eliminate_zeros(mat: "BCOO", nse: int | None = None) -> "BCOO":
  """`mat` without its explicitly stored zero blocks (JAX's `bcoo_eliminate_zeros`): they
  are moved out of range, then duplicates are summed (`bcoo_sum_duplicates` with `nse`)."""
  return bcoo_sum_duplicates(_mark_zeros(mat), nse=nse)


def bcoo_reduce_sum(mat: "BCOO", *, axes: Sequence[int]) -> "BCOO":
  """Sums a BCOO array over `axes` (JAX's `bcoo_reduce_sum`).

  Dense axes are summed in the data; a sparse axis drops its index column (elements that
  then share an index stay as duplicates); a batch axis is folded into the stored elements
  (`nse` grows by its size). Blocks at out-of-range indices are zeroed first.

  Args:
    mat: a BCOO array.
    axes: the dimensions to sum over (negative ones count from the end).

  Returns:
    A BCOO array of `mat.shape` without `axes`.
  """
  axes = _canonical_axes(axes, mat.ndim)
  nb, ns, nd = mat.n_batch, mat.n_sparse, mat.n_dense
  data = _mask_out_of_range(mat)
  indices = mat.indices
  dense_axes = [a for a in axes if a >= nb + ns]
  if dense_axes:
    data = jnp.sum(data, axis=tuple(nb + 1 + a - nb - ns for a in dense_axes))
  sparse_axes = [a - nb for a in axes if nb <= a < nb + ns]
  if sparse_axes:
    keep = [k for k in range(ns) if k not in sparse_axes]
    indices = indices[..., np.array(keep, dtype=np.int32)]
  batch_axes = [a for a in axes if a < nb]
  if batch_axes:
    batch = tuple(mat.shape[:nb])
    data = broadcast_batch(data, batch, nb)
    indices = broadcast_batch(indices, batch, nb)
    kept = [b for b in range(nb) if b not in batch_axes]
    order = kept + batch_axes
    nk = len(kept)
    rest_d = tuple(range(nb, data.ndim))
    rest_i = tuple(range(nb, indices.ndim))
    data = jnp.transpose(data, tuple(order) + rest_d)
    indices = jnp.transpose(indices, tuple(order) + rest_i)
    folded = math.prod(batch[b] for b in batch_axes) * mat.nse
    data = jnp.reshape(data, tuple(batch[b] for b in kept) + (folded,) + data.shape[nb + 1:])
    indices = jnp.reshape(indices, tuple(batch[b] for b in kept) + (folded,)
                          + indices.shape[nb + 1:])
    del nk
  shape = tuple(d for i, d in enumerate(mat.shape) if i not in axes)
  return BCOO((data, indices), shape=shape)


def bcoo_reshape(mat: "BCOO", *, new_sizes: Sequence[int],
                 dimensions: Sequence[int] | None = None, sharding: Any = None) -> "BCOO":
  """Reshapes a BCOO array (JAX's `bcoo_reshape`).

  The batch dimensions, the sparse dimensions and the dense dimensions are reshaped each
  within their own kind: `new_sizes` must split into a prefix of the batch size, a middle of
  the sparse size and a suffix of the dense size. Sparse indices are linearized in row-major
  order and unraveled into the new sparse shape.

  Args:
    mat: a BCOO array.
    new_sizes: the new shape.
    dimensions: an optional permutation applied first (`lax.reshape`'s).

  Returns:
    The reshaped BCOO array.

  Raises:
    ValueError: if the sizes do not split that way (JAX's message).
  """
  if dimensions is not None and tuple(dimensions) != tuple(range(mat.ndim)):
    mat = bcoo_transpose(mat, permutation=dimensions)
  new_sizes = tuple(operator.index(d) for d in new_sizes)
  if math.prod(new_sizes) != mat.size:
    raise TypeError(f"reshape total size must be unchanged, got new_sizes {new_sizes} "
                    f"for shape {mat.shape}.")
  nb, ns, nd = mat.n_batch, mat.n_sparse, mat.n_dense
  bsize = math.prod(mat.shape[:nb])
  dsize = math.prod(mat.shape[nb + ns:])
  cum = np.cumprod((1,) + new_sizes)
  nbn = next((k for k in range(len(new_sizes) + 1) if cum[k] == bsize), None) if nb else 0
  rcum = np.cumprod((1,) + new_sizes[::-1])
  ndn = next((k for k in range(len(new_sizes) + 1) if rcum[k] == dsize), None) if nd else 0
  if nbn is None or ndn is None or nbn + ndn > len(new_sizes):
    raise ValueError(f"bcoo_reshape: new_sizes={new_sizes} is not compatible with the "
                     f"layout of {mat!r}: batch, sparse and dense dimensions must be "
                     f"reshaped separately.")
  new_batch = new_sizes[:nbn]
  new_sparse = new_sizes[nbn:len(new_sizes) - ndn]
  new_dense = new_sizes[len(new_sizes) - ndn:]
  batch = tuple(mat.shape[:nb])
  data = broadcast_batch(mat.data, batch, nb)
  indices = broadcast_batch(mat.indices, batch, nb)
  data = jnp.reshape(data, new_batch + (mat.nse,) + new_dense)
  sparse_shape = mat.shape[nb:nb + ns]
  if tuple(new_sparse) != tuple(sparse_shape):
    ok = _in_range(indices, sparse_shape)
    strides = np.array([math.prod(sparse_shape[k + 1:]) for k in range(ns)], np.int64)
    lin = jnp.sum(indices * jnp.asarray(strides.astype(indices.dtype)), axis=-1)
    parts = []
    for k, size in enumerate(new_sparse):
      stride = math.prod(new_sparse[k + 1:])
      parts.append(jnp.where(ok, (lin // stride) % size, size))
    indices = (jnp.stack(parts, axis=-1) if parts
               else jnp.zeros(indices.shape[:-1] + (0,), indices.dtype)).astype(mat.indices.dtype)
  indices = jnp.reshape(indices, new_batch + (mat.nse, len(new_sparse)))
  return BCOO((data, indices), shape=new_sizes)


def bcoo_multiply_dense(sp_mat: "BCOO", v: Any) -> Any:
  """The elementwise product of a BCOO array and a dense array broadcastable to its shape
  (JAX's `bcoo_multiply_dense`).

  Returns:
    The new data array (`sp_mat`'s indices hold for it): each block times the matching
    part of `v`.
  """
  v = jnp.asarray(v)
  dtype = dtypes.result_type(sp_mat.dtype, v.dtype)
  if v.ndim == 0:
    return sp_mat.data * v
  shape = tuple(np.broadcast_shapes(tuple(sp_mat.shape), tuple(v.shape)))
  if shape != tuple(sp_mat.shape):
    raise ValueError(f"bcoo_multiply_dense: shapes {sp_mat.shape} and {v.shape} would "
                     f"broadcast to {shape}, larger than the sparse operand.")
  v = jnp.broadcast_to(v, sp_mat.shape)
  vals = _bcoo_extract(sp_mat.indices, v, assume_unique=True)
  return sp_mat.data.astype(dtype) * vals.astype(dtype)


def bcoo_add(lhs: Any, rhs: Any) -> Any:
  """`lhs + rhs` with one or both BCOO: two BCOO arrays of one shape and layout give a
  BCOO array storing both sets of elements (nse adds up, as JAX's); with a dense operand
  the result is dense."""
  if isinstance(lhs, BCOO) and isinstance(rhs, BCOO):
    if lhs.shape != rhs.shape:
      raise ValueError(f"Addition of sparse arrays of shapes {lhs.shape} and {rhs.shape} "
                       f"is not supported.")
    if (lhs.n_batch, lhs.n_dense) != (rhs.n_batch, rhs.n_dense):
      raise NotImplementedError("Addition between sparse matrices of different layouts "
                                "(n_batch, n_dense) is not supported.")
    if lhs.indices is rhs.indices:
      return BCOO((lhs.data + rhs.data, lhs.indices), **lhs._info._asdict())
    nb = lhs.n_batch
    batch = tuple(lhs.shape[:nb])
    dtype = dtypes.result_type(lhs.dtype, rhs.dtype)
    data = jnp.concatenate([broadcast_batch(lhs.data, batch, nb).astype(dtype),
                            broadcast_batch(rhs.data, batch, nb).astype(dtype)], axis=nb)
    idx = jnp.concatenate([broadcast_batch(lhs.indices, batch, nb),
                           broadcast_batch(rhs.indices, batch, nb)], axis=nb)
    return BCOO((data, idx), shape=lhs.shape)
  lhs = lhs.todense() if isinstance(lhs, BCOO) else lhs
  rhs = rhs.todense() if isinstance(rhs, BCOO) else rhs
  return jnp.add(lhs, rhs)


def _matmul_dnums(lhs_ndim: int, rhs_ndim: int):
  """`jnp.matmul`'s dot_general dimension numbers for operands of these ranks (leading
  dimensions of equal rank are batch dimensions)."""
  if lhs_ndim == 0 or rhs_ndim == 0:
    raise ValueError("matmul: inputs must have at least one dimension")
  lc = lhs_ndim - 1
  rc = 0 if rhs_ndim == 1 else rhs_ndim - 2
  nbatch = min(lhs_ndim, rhs_ndim) - 2 if min(lhs_ndim, rhs_ndim) > 2 else 0
  if nbatch and lhs_ndim != rhs_ndim:
    raise NotImplementedError("sparse matmul with batch dimensions needs operands of one "
                              "rank")
  b = tuple(range(nbatch))
  return (((lc,), (rc,)), (b, b))


# ---------------------------------------------------------------------------
# The BCOO class


@tree_util.register_pytree_node_class
class BCOO(JAXSparse):
  """A batched-coordinate sparse array (JAX's `jax.experimental.sparse.BCOO`).

  Args:
    args: `(data, indices)`: `data` `T[*batch, nse, *dense]`, `indices`
      `int[*batch, nse, n_sparse]`.
    shape: the dense shape `[*batch, *sparse, *dense]`.
    indices_sorted, unique_indices: what is known of the indices (kept as static data).

  Raises:
    ValueError: for `data`/`indices` shapes that do not fit `shape` (JAX's message,
      e.g. `Invalid data.shape=(3,) for nse=6, n_batch=0, n_dense=0`).

  A pytree whose leaves are `data` and `indices`; it works under `jit`, `grad` (w.r.t.
  `data`), `vmap` (which adds a batch dimension).
  """
  data: Any
  indices: Any
  shape: tuple[int, ...]
  indices_sorted: bool
  unique_indices: bool

  n_batch = property(lambda self: len(self.indices.shape) - 2)
  n_sparse = property(lambda self: self.indices.shape[-1])
  n_dense = property(lambda self: len(self.data.shape) - 1 - self.n_batch)
  nse = property(lambda self: self.indices.shape[-2])
  dtype = property(lambda self: self.data.dtype)
  _info = property(lambda self: SparseInfo(self.shape, self.indices_sorted,
                                           self.unique_indices))
  _bufs = property(lambda self: (self.data, self.indices))

  def __init__(self, args: tuple[Any, Any], *, shape: Sequence[int],
               indices_sorted: bool = False, unique_indices: bool = False):
    self.data, self.indices = map(jnp.asarray, args)
    self.indices_sorted = indices_sorted
    self.unique_indices = unique_indices
    super().__init__(args, shape=tuple(shape))
    validate_bcoo(self.data.shape, self.indices.shape, self.shape)

  def __repr__(self):
    name = type(self).__name__
    try:
      nse, nb, nd = self.nse, self.n_batch, self.n_dense
      dtype = np.dtype(self.dtype).name
    except Exception:  # pylint: disable=broad-except
      return f"{name}(<invalid>)"
    extra = f", nse={nse}"
    if nb:
      extra += f", n_batch={nb}"
    if nd:
      extra += f", n_dense={nd}"
    prefix = ""
    if isinstance(self.data, core.Tracer):
      prefix = f"{type(self.data).__name__}["
      return f"{prefix}{name}({dtype}{list(self.shape)}{extra})]"
    return f"{name}({dtype}{list(self.shape)}{extra})"

  # pytree
  def tree_flatten(self):
    return (self.data, self.indices), self._info._asdict()

  @classmethod
  def tree_unflatten(cls, aux_data, children):
    obj = object.__new__(cls)
    obj.data, obj.indices = children
    shape = tuple(aux_data["shape"])
    data, indices = children
    try:   # NB: vmap's outputs gain leading batch dimensions, which the shape gains too
      extra = (len(indices.shape) - 2 + indices.shape[-1] + len(data.shape)
               - len(indices.shape) + 1) - len(shape)
    except (AttributeError, IndexError, TypeError):
      extra = 0
    if extra > 0:
      lead = tuple(max(a, b) for a, b in zip(data.shape[:extra], indices.shape[:extra]))
      shape = lead + shape
    obj.shape = shape
    obj.indices_sorted = aux_data["indices_sorted"]
    obj.unique_indices = aux_data["unique_indices"]
    return obj

  @classmethod
  def fromdense(cls, mat: Any, *, nse: int | None = None, index_dtype: Any = np.int32,
                n_dense: int = 0, n_batch: int = 0) -> "BCOO":
    """A BCOO array of the nonzero blocks of `mat` (see `bcoo_fromdense`)."""
    return bcoo_fromdense(mat, nse=nse, index_dtype=index_dtype, n_dense=n_dense,
                          n_batch=n_batch)

  @classmethod
  def from_scipy_sparse(cls, mat: Any, *, index_dtype: Any = None, n_dense: int = 0,
                        n_batch: int = 0) -> "BCOO":
    """A BCOO array of a 2-D `scipy.sparse` matrix (its COO form)."""
    if n_dense != 0 or n_batch != 0:
      raise NotImplementedError("BCOO.fromscipy with nonzero n_dense/n_batch")
    mat = mat.tocoo()
    data = jnp.asarray(mat.data)
    indices = jnp.column_stack((mat.row, mat.col)).astype(index_dtype or jnp.int32)
    return cls((data, indices), shape=mat.shape, indices_sorted=False,
               unique_indices=False)

  @classmethod
  def from_bcsr(cls, arr: Any) -> "BCOO":
    """The BCOO form of a BCSR array."""
    return arr.to_bcoo()

  def todense(self) -> Any:
    """The dense array (see `bcoo_todense`)."""
    return bcoo_todense(self)

  def transpose(self, axes: Sequence[int] | None = None) -> "BCOO":
    """The transposed array (reversed dimensions by default; see `bcoo_transpose`)."""
    axes = tuple(range(self.ndim))[::-1] if axes is None else tuple(axes)
    return bcoo_transpose(self, permutation=axes)

  def reshape(self, *args, **kwargs) -> "BCOO":
    """See `bcoo_reshape`; the shape as one sequence or several ints."""
    shape = args[0] if len(args) == 1 and not isinstance(args[0], (int, np.integer)) else args
    shape = kwargs.pop("new_sizes", shape)
    shape = tuple(shape)
    if -1 in shape:
      known = math.prod(d for d in shape if d != -1)
      shape = tuple(self.size // known if d == -1 else d for d in shape)
    return bcoo_reshape(self, new_sizes=shape)

  def sum(self, axis: int | Sequence[int] | None = None) -> Any:
    """The sum over `axis` (all by default): a BCOO array, or a dense scalar when every
    dimension is summed (as JAX's)."""
    axes = tuple(range(self.ndim)) if axis is None else axis
    out = bcoo_reduce_sum(self, axes=axes)
    return out.todense() if out.ndim == 0 else out

  def sum_duplicates(self, nse: int | None = None, remove_zeros: bool = True) -> "BCOO":
    """Sums duplicate indices (see `bcoo_sum_duplicates`); with `remove_zeros` (and
    `nse=None`), explicitly stored zeros are dropped first."""
    mat = _mark_zeros(self) if remove_zeros and nse is None else self
    return bcoo_sum_duplicates(mat, nse=nse)

  def sort_indices(self) -> "BCOO":
    """See `bcoo_sort_indices`."""
    return bcoo_sort_indices(self)

  def update_layout(self, *, n_batch: int | None = None, n_dense: int | None = None,
                    on_inefficient: str = "error") -> "BCOO":
    """See `bcoo_update_layout`."""
    return bcoo_update_layout(self, n_batch=n_batch, n_dense=n_dense,
                              on_inefficient=on_inefficient)

  def astype(self, dtype) -> "BCOO":
    """The array with its data converted to `dtype`."""
    return BCOO((self.data.astype(dtype), self.indices), **self._info._asdict())

  def __neg__(self):
    return BCOO((-self.data, self.indices), **self._info._asdict())

  def __pos__(self):
    return self

  def __matmul__(self, other):
    if isinstance(other, JAXSparse) and not isinstance(other, BCOO):
      return NotImplemented
    other_arr = other if isinstance(other, BCOO) else jnp.asarray(other)
    dtype = dtypes.result_type(self.dtype, other_arr.dtype)
    lhs = self if self.dtype == dtype else self.astype(dtype)
    rhs = other_arr if other_arr.dtype == dtype else other_arr.astype(dtype)
    dims = _matmul_dnums(self.ndim, other_arr.ndim)
    return bcoo_dot_general(lhs, rhs, dimension_numbers=dims, preferred_element_type=dtype)

  def __rmatmul__(self, other):
    other = jnp.asarray(other)
    dtype = dtypes.result_type(self.dtype, other.dtype)
    lhs = self if self.dtype == dtype else self.astype(dtype)
    other = other if other.dtype == dtype else other.astype(dtype)
    if self.ndim > 2 or other.ndim > 2:
      raise NotImplementedError("dense @ BCOO for operands of rank > 2")
    # other @ self == (contract self's dim 0 with other's last) then transpose.
    dims = (((0,), (other.ndim - 1,)), ((), ()))
    out = _bcoo_dot_general(lhs.data, lhs.indices, other, dimension_numbers=dims,
                            lhs_spinfo=lhs._info, preferred_element_type=dtype)
    return out.T if out.ndim == 2 else out

  def __mul__(self, other):
    if isinstance(other, BCOO):
      if other.indices is self.indices:
        return BCOO((self.data * other.data, self.indices), **self._info._asdict())
      return bcoo_multiply_sparse(self, other)
    if isinstance(other, JAXSparse):
      return NotImplemented
    return BCOO((bcoo_multiply_dense(self, other), self.indices), **self._info._asdict())

  def __rmul__(self, other):
    return self.__mul__(other)

  def __truediv__(self, other):
    if isinstance(other, JAXSparse):
      raise NotImplementedError("division by a sparse array")
    other = jnp.asarray(other)
    if other.ndim == 0:
      return BCOO((self.data / other, self.indices), **self._info._asdict())
    return BCOO((bcoo_multiply_dense(self, 1 / other), self.indices), **self._info._asdict())

  def __add__(self, other):
    return bcoo_add(self, other)

  def __radd__(self, other):
    return bcoo_add(other, self)

  def __sub__(self, other):
    return bcoo_add(self, -other)

  def __rsub__(self, other):
    return bcoo_add(other, -self)

  def __iter__(self):
    for i in range(self.shape[0]):
      yield self[i]

  def __getitem__(self, idx):
    # NB: indexing is a sparse rule of `sparsify` (transform.py installs it, as JAX's BCOO
    # indexes through sparsify).
    raise NotImplementedError("BCOO indexing needs stagecraft.experimental.sparse.transform")



# ---------------------------------------------------------------------------
# Shape operations (plain functions of the primitives and of lax/numpy operations)


def _layout_check(mat: "BCOO", what: str) -> None:
  if not isinstance(mat, BCOO):
    raise TypeError(f"{what}: expected a BCOO array, got {type(mat)}")


def _out_of_range_fill(indices: Any, ok: Any, sparse_shape: Sequence[int]) -> Any:
  bound = jnp.asarray(np.array(sparse_shape, np.int64).astype(indices.dtype))
  return jnp.where(ok[..., None], indices, bound)


def bcoo_broadcast_in_dim(mat: "BCOO", *, shape: Sequence[int],
                          broadcast_dimensions: Sequence[int], sharding: Any = None) -> "BCOO":
  """`lax.broadcast_in_dim` of a BCOO array (JAX's `bcoo_broadcast_in_dim`).

  As JAX's: new dimensions before the first sparse (or dense) dimension become batch
  dimensions; when the operand has dense dimensions, new dimensions from the first dense one
  on become dense; every other new dimension (trailing ones of an operand without dense
  dimensions included) is sparse, and must have size 1. Size-1 batch and dense dimensions
  broadcast.

  Raises:
    ValueError: for shapes that do not broadcast (lax's rule), or batch / sparse / dense
      dimensions moved past one another ("Cannot mix ...").
    NotImplementedError: new or broadcast sparse dimensions of total size > 1 ("Adding
      sparse dimensions with lengths != 1").
  """
  _layout_check(mat, "bcoo_broadcast_in_dim")
  shape, bd = tuple(shape), tuple(broadcast_dimensions)
  if len(bd) != mat.ndim or any(mat.shape[i] not in (1, shape[d]) for i, d in enumerate(bd)):
    raise ValueError(f"Incompatible shapes for broadcasting: {mat.shape} and {shape} with "
                     f"broadcast_dimensions={bd}")
  nb, ns, nd = mat.n_batch, mat.n_sparse, mat.n_dense
  b_out, s_out, d_out = bd[:nb], bd[nb:nb + ns], bd[nb + ns:]
  if max(b_out, default=0) > min(s_out, default=len(shape)):
    raise ValueError("Cannot mix batch and sparse dimensions during broadcast_in_dim")
  if max(s_out, default=0) > min(d_out, default=len(shape)):
    raise ValueError("Cannot mix sparse and dense dimensions during broadcast_in_dim")
  # JAX's layout rule: the new dimensions before the first non-batch dimension are batch
  # dimensions; those from the first dense dimension on are dense (none when the operand has
  # no dense dimensions); all others, trailing ones included, are sparse
  lead = min(bd[nb:], default=len(shape))
  n_dense_out = len(shape) - min(d_out) if nd else 0
  kinds = ["b"] * lead + ["s"] * (len(shape) - lead - n_dense_out) + ["d"] * n_dense_out
  if (math.prod(mat.shape[nb:nb + ns])
      != math.prod(shape[lead:len(shape) - n_dense_out])):
    raise NotImplementedError("Adding sparse dimensions with lengths != 1")
  if any(kinds[d] != "bsd"[(i >= nb) + (i >= nb + ns)] for i, d in enumerate(bd)):
    raise NotImplementedError(f"bcoo_broadcast_in_dim: the result's dimensions {kinds} mix "
                              f"batch, sparse and dense dimensions")
  for d, k in enumerate(kinds):
    if k == "s" and shape[d] != 1 and (d not in bd or mat.shape[bd.index(d)] != shape[d]):
      raise NotImplementedError("bcoo_broadcast_in_dim: broadcasting sparse dimensions")
  new_nb = kinds.count("b")
  new_ns = kinds.count("s")
  # data: [*batch, nse, *dense] with size-1 dims inserted, then dense dims broadcast
  src = lambda d: bd.index(d) if d in bd else None
  dshape = [mat.data.shape[src(d)] if src(d) is not None else 1 for d in range(new_nb)]
  ishape = [mat.indices.shape[src(d)] if src(d) is not None else 1 for d in range(new_nb)]
  dshape.append(mat.nse)
  ishape.append(mat.nse)
  dense_dims = range(new_nb + new_ns, len(shape))
  dshape += [mat.data.shape[nb + 1 + src(d) - nb - ns] if src(d) is not None else 1
             for d in dense_dims]
  data = jnp.reshape(mat.data, tuple(dshape))
  data = jnp.broadcast_to(data, tuple(shape[:new_nb]) + (mat.nse,)
                         + tuple(shape[d] for d in dense_dims))
  indices = jnp.broadcast_to(jnp.reshape(mat.indices, tuple(ishape) + (ns,)),
                             tuple(shape[:new_nb]) + (mat.nse, ns))
  cols = []
  for d in range(new_nb, new_nb + new_ns):
    if d in bd:
      cols.append(indices[..., bd.index(d) - nb])
    else:
      cols.append(jnp.zeros(indices.shape[:-1], indices.dtype))
  indices = (jnp.stack(cols, axis=-1) if cols
             else jnp.zeros(indices.shape[:-1] + (0,), indices.dtype))
  return BCOO((data, indices), shape=shape)


def bcoo_squeeze(arr: "BCOO", *, dimensions: Sequence[int]) -> "BCOO":
  """`lax.squeeze` of a BCOO array (JAX's `bcoo_squeeze`): removes size-1 dimensions.

  Raises:
    ValueError: if a dimension in `dimensions` does not have size 1.
  """
  _layout_check(arr, "bcoo_squeeze")
  dims = _canonical_axes(dimensions, arr.ndim, "dimensions")
  if any(arr.shape[d] != 1 for d in dims):
    raise ValueError(f"cannot select an axis to squeeze out which has size not equal to "
                     f"one, got shape={arr.shape} and dimensions={tuple(dimensions)}")
  nb, ns = arr.n_batch, arr.n_sparse
  data = _mask_out_of_range(arr)
  indices = arr.indices
  bdims = [d for d in dims if d < nb]
  sdims = [d - nb for d in dims if nb <= d < nb + ns]
  ddims = [d - nb - ns for d in dims if d >= nb + ns]
  if sdims:
    keep = [k for k in range(ns) if k not in sdims]
    indices = indices[..., np.array(keep, dtype=np.int32)]
  if ddims:
    data = jnp.squeeze(data, tuple(nb + 1 + d for d in ddims))
  if bdims:
    data = jnp.squeeze(data, tuple(bdims))
    indices = jnp.squeeze(indices, tuple(bdims))
  shape = tuple(s for i, s in enumerate(arr.shape) if i not in dims)
  return BCOO((data, indices), shape=shape)


def bcoo_rev(operand: "BCOO", dimensions: Sequence[int]) -> "BCOO":
  """`lax.rev` of a BCOO array (JAX's `bcoo_rev`): sparse coordinates `i` become
  `size - 1 - i`; batch and dense dimensions are reversed in the arrays."""
  _layout_check(operand, "bcoo_rev")
  dims = _canonical_axes(dimensions, operand.ndim, "dimensions")
  nb, ns = operand.n_batch, operand.n_sparse
  batch = tuple(operand.shape[:nb])
  data = broadcast_batch(operand.data, batch, nb)
  indices = broadcast_batch(operand.indices, batch, nb)
  bdims = tuple(d for d in dims if d < nb)
  ddims = tuple(nb + 1 + d - nb - ns for d in dims if d >= nb + ns)
  if bdims:
    data = jnp.flip(data, bdims)
    indices = jnp.flip(indices, bdims)
  if ddims:
    data = jnp.flip(data, ddims)
  sdims = [d - nb for d in dims if nb <= d < nb + ns]
  if sdims:
    sparse_shape = operand.shape[nb:nb + ns]
    ok = _in_range(indices, sparse_shape)
    flip = np.zeros(ns, bool)
    flip[sdims] = True
    size = np.array(sparse_shape, np.int64).astype(indices.dtype)
    rev = jnp.where(jnp.asarray(flip), jnp.asarray(size) - 1 - indices, indices)
    indices = _out_of_range_fill(rev, ok, sparse_shape)
  return BCOO((data, indices), shape=operand.shape)


def _slice_sparse(mat, starts, sizes, strides, dynamic):
  """Slices of the batch, sparse and dense dimensions of `mat` (starts may be traced when
  `dynamic`); elements outside the slice move out of range (nse is kept)."""
  nb, ns = mat.n_batch, mat.n_sparse
  batch = tuple(mat.shape[:nb])
  data = broadcast_batch(mat.data, batch, nb)
  indices = broadcast_batch(mat.indices, batch, nb)
  new_shape = tuple(sizes)
  if dynamic:
    starts = [jnp.clip(jnp.asarray(s).astype(np.int32), 0, mat.shape[i] - sizes[i])
              for i, s in enumerate(starts)]
    zero = jnp.zeros((), np.int32)
    d_starts = list(starts[:nb]) + [zero] + list(starts[nb + ns:])
    d_sizes = tuple(sizes[:nb]) + (mat.nse,) + tuple(sizes[nb + ns:])
    data = lax.dynamic_slice(data, d_starts, d_sizes)
    indices = lax.dynamic_slice(indices, list(starts[:nb]) + [zero, zero],
                                tuple(sizes[:nb]) + (mat.nse, ns))
  else:
    sl = tuple(slice(st, st + sz * sd, sd) for st, sz, sd in zip(starts, sizes, strides))
    data = data[sl[:nb] + (slice(None),) + sl[nb + ns:]]
    indices = indices[sl[:nb]]
  if ns:
    sstart = jnp.stack([jnp.asarray(s).astype(indices.dtype) for s in starts[nb:nb + ns]])
    sstride = np.array(strides[nb:nb + ns], np.int64).astype(indices.dtype)
    sparse_shape = mat.shape[nb:nb + ns]
    ok = _in_range(indices, sparse_shape)
    shifted = indices - sstart
    ok = ok & jnp.all((shifted >= 0) & (shifted % sstride == 0), axis=-1)
    new_idx = shifted // sstride
    ok = ok & _in_range(new_idx, new_shape[nb:nb + ns])
    indices = _out_of_range_fill(new_idx, ok, new_shape[nb:nb + ns])
    okd = jnp.reshape(ok, ok.shape + (1,) * mat.n_dense)
    data = jnp.where(okd, data, jnp.zeros((), data.dtype))
    size = math.prod(new_shape[nb:nb + ns])
    if mat.nse > size:   # as JAX's: no more stored elements than the slice has places
      data, indices = _bcoo_sum_duplicates(data, indices, spinfo=SparseInfo(new_shape),
                                           nse=size)
  return BCOO((data, indices), shape=new_shape)


def bcoo_slice(mat: "BCOO", *, start_indices: Sequence[int], limit_indices: Sequence[int],
               strides: Sequence[int] | None = None) -> "BCOO":
  """`lax.slice` of a BCOO array (JAX's `bcoo_slice`): batch and dense dimensions are
  sliced in the arrays, sparse coordinates shifted (elements outside move out of range;
  nse is kept).

  Raises:
    ValueError: for start/limit/stride lists of the wrong length or out of bounds.
  """
  _layout_check(mat, "bcoo_slice")
  strides = (1,) * mat.ndim if strides is None else tuple(strides)
  if not (len(start_indices) == len(limit_indices) == len(strides) == mat.ndim):
    raise ValueError(f"bcoo_slice: start_indices, limit_indices and strides must have "
                     f"length {mat.ndim}; got {start_indices}, {limit_indices}, {strides}")
  for st, li, d in zip(start_indices, limit_indices, mat.shape):
    if not 0 <= st <= li <= d:
      raise ValueError(f"bcoo_slice: invalid slice {start_indices}:{limit_indices} for "
                       f"shape {mat.shape}")
  sizes = [-(-(li - st) // sd) for st, li, sd in zip(start_indices, limit_indices, strides)]
  return _slice_sparse(mat, list(start_indices), sizes, strides, dynamic=False)


def bcoo_dynamic_slice(mat: "BCOO", start_indices: Sequence[Any],
                       slice_sizes: Sequence[int]) -> "BCOO":
  """`lax.dynamic_slice` of a BCOO array (JAX's `bcoo_dynamic_slice`): starts may be
  traced and are clamped as lax's are.

  Raises:
    ValueError: for lists of the wrong length or sizes larger than the dimensions.
  """
  _layout_check(mat, "bcoo_dynamic_slice")
  if not len(start_indices) == len(slice_sizes) == mat.ndim:
    raise ValueError(f"bcoo_dynamic_slice: start_indices and slice_sizes must have length "
                     f"{mat.ndim}")
  if any(not 0 <= s <= d for s, d in zip(slice_sizes, mat.shape)):
    raise ValueError(f"bcoo_dynamic_slice: slice_sizes {tuple(slice_sizes)} do not fit "
                     f"shape {mat.shape}")
  return _slice_sparse(mat, list(start_indices), list(slice_sizes), (1,) * mat.ndim,
                       dynamic=True)


def bcoo_concatenate(operands: Sequence["BCOO"], *, dimension: int) -> "BCOO":
  """`lax.concatenate` of BCOO arrays of one layout (JAX's `bcoo_concatenate`): along a
  batch dimension the arrays are joined; along a sparse one the stored elements are (nse
  adds up, coordinates offset); along a dense one the data is (the indices must be equal).

  Raises:
    ValueError: operands of different layouts or shapes off the dimension.
  """
  operands = list(operands)
  for op in operands:
    _layout_check(op, "bcoo_concatenate")
  first = operands[0]
  dimension = _canonical_axes(dimension, first.ndim, "dimension")[0]
  if len({(op.n_batch, op.n_sparse, op.n_dense) for op in operands}) != 1:
    raise ValueError("bcoo_concatenate: operands must have matching layouts (n_batch, "
                     "n_sparse, n_dense)")
  for op in operands:
    if any(a != b for i, (a, b) in enumerate(zip(op.shape, first.shape)) if i != dimension):
      raise ValueError(f"bcoo_concatenate: shapes {[o.shape for o in operands]} differ off "
                       f"dimension {dimension}")
  nb, ns = first.n_batch, first.n_sparse
  shape = list(first.shape)
  shape[dimension] = sum(op.shape[dimension] for op in operands)
  dtype = dtypes.result_type(*[op.dtype for op in operands])

  def arrays(op):
    batch = tuple(op.shape[:nb])
    return (broadcast_batch(op.data, batch, nb).astype(dtype),
            broadcast_batch(op.indices, batch, nb))
  pairs = [arrays(op) for op in operands]
  if dimension < nb:
    data = jnp.concatenate([d for d, _ in pairs], axis=dimension)
    indices = jnp.concatenate([i for _, i in pairs], axis=dimension)
  elif dimension < nb + ns:
    k = dimension - nb
    offset, datas, idxs = 0, [], []
    for op, (d, i) in zip(operands, pairs):
      ok = _in_range(i, op.shape[nb:nb + ns])
      shift = np.zeros(ns, np.int64)
      shift[k] = offset
      moved = i + jnp.asarray(shift.astype(i.dtype))
      idxs.append(_out_of_range_fill(moved, ok, shape[nb:nb + ns]))
      datas.append(d)
      offset += op.shape[dimension]
    data = jnp.concatenate(datas, axis=nb)
    indices = jnp.concatenate(idxs, axis=nb)
  else:
    data = jnp.concatenate([d for d, _ in pairs], axis=nb + 1 + dimension - nb - ns)
    indices = pairs[0][1]
  return BCOO((data, indices), shape=tuple(shape))


def bcoo_multiply_sparse(lhs: "BCOO", rhs: "BCOO") -> "BCOO":
  """The elementwise product of two BCOO arrays (JAX's `bcoo_multiply_sparse`), with
  broadcasting of size-1 dimensions.

  Layout, as JAX's: the leading `min(lhs.n_batch, rhs.n_batch)` batch dimensions are mapped
  over; within one batch, an operand with more batch dimensions is first converted to
  `n_batch=0` (`bcoo_update_layout`), every pair of stored elements whose indices agree on
  the sparse dimensions where neither operand has size 1 is a match, and the matches are
  packed first (`nse = lhs.nse * rhs.nse`; the rest hold 0 at an out-of-range index). Each
  stored element's data (its dense block) is the product of the pair's data; its index is
  the elementwise maximum of the pair's (a size-1 dimension has index 0).

  Args:
    lhs, rhs: BCOO arrays of one rank and one number of dense dimensions, whose shapes
      broadcast.

  Returns:
    A BCOO array of the broadcast shape, dtype the promotion of the operands'.

  Raises:
    TypeError: operands of different ranks.
    NotImplementedError: operands with different numbers of dense dimensions.
    ValueError: shapes that do not broadcast.
  """
  _layout_check(lhs, "bcoo_multiply_sparse")
  _layout_check(rhs, "bcoo_multiply_sparse")
  if lhs.ndim != rhs.ndim:
    raise TypeError(f"bcoo_multiply_sparse: arrays must have same number of dimensions, "
                    f"got {lhs.shape}, {rhs.shape}")
  props = lambda m: BCOOProperties(m.n_batch, m.n_sparse, m.n_dense, m.nse)
  if lhs.n_dense != rhs.n_dense:
    raise NotImplementedError(f"bcoo_multiply_sparse: arrays with differing numbers of dense "
                              f"dimensions: {props(lhs)}, {props(rhs)}")
  out_shape = jnp.broadcast_shapes(lhs.shape, rhs.shape)
  nb = min(lhs.n_batch, rhs.n_batch)
  lshape, rshape = tuple(lhs.shape[nb:]), tuple(rhs.shape[nb:])

  def one(ld, li, rd, ri):
    l, r = BCOO((ld, li), shape=lshape), BCOO((rd, ri), shape=rshape)
    if l.n_batch:
      l = bcoo_update_layout(l, n_batch=0)
    elif r.n_batch:
      r = bcoo_update_layout(r, n_batch=0)
    ld, li, rd, ri = l.data, l.indices, r.data, r.indices
    dims = np.array([k for k in range(l.n_sparse) if lshape[k] != 1 and rshape[k] != 1],
                    dtype=np.int32)
    match = jnp.all(li[:, None, dims] == ri[None, :, dims], axis=-1)
    il, ir = jnp.nonzero(match, size=l.nse * r.nse, fill_value=(l.nse, r.nse))
    data = (ld.at[il].get(mode="fill", fill_value=0)
            * rd.at[ir].get(mode="fill", fill_value=0))
    indices = jnp.maximum(li.at[il].get(mode="fill", fill_value=max(lshape, default=0)),
                          ri.at[ir].get(mode="fill", fill_value=max(rshape, default=0)))
    return data, indices

  batch = tuple(out_shape[:nb])
  data, indices = nfold_vmap(one, nb)(
      broadcast_batch(lhs.data, batch, nb), broadcast_batch(lhs.indices, batch, nb),
      broadcast_batch(rhs.data, batch, nb), broadcast_batch(rhs.indices, batch, nb))
  return BCOO((data, indices), shape=tuple(out_shape))


def bcoo_gather(operand: "BCOO", start_indices: Any, dimension_numbers: Any,
                slice_sizes: Sequence[int], *, unique_indices: bool = False,
                indices_are_sorted: bool = False, mode: Any = None,
                fill_value: Any = None) -> "BCOO":
  """`lax.gather` of a BCOO array (JAX's `bcoo_gather`).

  stagecraft computes it densely: the operand is densified, gathered, and converted back
  with `nse` = the result's size (JAX's kernel works on the stored elements).
  """
  _layout_check(operand, "bcoo_gather")
  dense = lax.gather(operand.todense(), start_indices, dimension_numbers, slice_sizes,
                     unique_indices=unique_indices, indices_are_sorted=indices_are_sorted,
                     mode=mode, fill_value=fill_value)
  return bcoo_fromdense(dense, nse=max(1, math.prod(dense.shape)),
                        index_dtype=operand.indices.dtype)


def bcoo_conv_general_dilated(lhs: Any, rhs: Any, **kwargs) -> Any:
  """`lax.conv_general_dilated` with BCOO operands (JAX's `bcoo_conv_general_dilated`).

  stagecraft computes it densely (both operands densified, one `conv_general_dilated`);
  the result is a dense array.
  """
  lhs = lhs.todense() if isinstance(lhs, JAXSparse) else lhs
  rhs = rhs.todense() if isinstance(rhs, JAXSparse) else rhs
  return lax.conv_general_dilated(lhs, rhs, **kwargs)


def bcoo_update_layout(mat: "BCOO", *, n_batch: int | None = None, n_dense: int | None = None,
                       on_inefficient: str | None = "error") -> "BCOO":
  """`mat` with another number of batch and dense dimensions (JAX's
  `bcoo_update_layout`).

  Moving sparse dimensions into batch or dense dimensions may need far more storage (each
  batch, or each dense block, holds what the others do): `on_inefficient` says what then
  happens: 'error' (SparseEfficiencyError), 'warn' (SparseEfficiencyWarning) or None.

  stagecraft converts through the dense array (`todense`, then `fromdense` with the largest
  nse the new layout can need).

  Raises:
    ValueError: for layouts that do not fit `mat.ndim`, or an unknown `on_inefficient`.
    SparseEfficiencyError: an inefficient change with `on_inefficient='error'`.
  """
  _layout_check(mat, "bcoo_update_layout")
  n_batch = mat.n_batch if n_batch is None else operator.index(n_batch)
  n_dense = mat.n_dense if n_dense is None else operator.index(n_dense)
  if on_inefficient not in ("error", "warn", None):
    raise ValueError("on_inefficient={on_inefficient!r}; expected one of ['error', 'warn', "
                     "None].")
  if n_batch < 0 or n_dense < 0 or n_batch + n_dense > mat.ndim:
    raise ValueError(f"invalid layout n_batch={n_batch}, n_dense={n_dense} for "
                     f"shape={mat.shape}")
  if (n_batch, n_dense) == (mat.n_batch, mat.n_dense):
    return mat
  inefficient = n_batch > mat.n_batch or n_dense > mat.n_dense
  if inefficient and on_inefficient is not None:
    msg = ("Requested update_layout would result in a large increase in the number of "
           "stored elements or the size of the data/indices arrays. To prevent this, use "
           "on_inefficient=None or on_inefficient='warn'.")
    if on_inefficient == "error":
      raise SparseEfficiencyError(msg)
    warnings.warn(msg, SparseEfficiencyWarning, stacklevel=2)
  nse = mat.nse
  nse *= math.prod(mat.shape[n_batch:mat.n_batch])          # batch dims folded in
  nse *= math.prod(mat.shape[mat.ndim - mat.n_dense:mat.ndim - n_dense])  # dense dims out
  return bcoo_fromdense(mat.todense(), nse=nse, n_batch=n_batch, n_dense=n_dense,
                        index_dtype=mat.indices.dtype)


#: The impls of the BCOO primitives, for formats computed through BCOO's algorithms.
todense_impl = _bcoo_todense_impl
fromdense_impl = _bcoo_fromdense_impl
extract_impl = _bcoo_extract_impl
dot_general_impl = _bcoo_dot_general_impl
sum_duplicates_impl = _bcoo_sum_duplicates_impl
