"""Set operations: unique (and the Array API's unique_*), isin, union1d, intersect1d,
setdiff1d, setxor1d, staged as JAX 0.10's numpy stages them: `unique` sorts once (the
jitted `_unique_sorted_mask`: a `lexsort` of the slices and a mask of the first of each run
of equal ones) and compacts with `nonzero(mask, size=...)`; `isin` compares every pair (the
jitted `_in1d`); the two-array operations with a static `size=` are the jitted
`_intersect1d_size` / `_setxor1d_size`, which pack the unique values of both inputs with
`dynamic_update_slice`. Results whose length depends on the data need concrete inputs, or a
static `size=` under jit, as in JAX's numpy."""
from __future__ import annotations

import math
import operator
from typing import Any, NamedTuple

import numpy as np

from stagecraft import core, dtypes, lax
from stagecraft.core import Tracer
from stagecraft.numpy import reductions
from stagecraft.numpy.array_creation import arange, empty, full, full_like, ones, zeros
from stagecraft.numpy.indexing import nonzero, where
from stagecraft.numpy.lax_numpy import diff
from stagecraft.numpy.manipulation import append, concatenate, moveaxis, ravel
from stagecraft.numpy.sorting import lexsort, searchsorted, sort
from stagecraft.numpy.ufuncs import isnan
from stagecraft.numpy.util import (ArrayLike, canonicalize_axis, dtype_of, ensure_arraylike,
                                   ndim_of, promote_dtypes, shape_of)
from stagecraft.pjit import jit

__all__ = ["unique", "unique_values", "unique_counts", "unique_inverse", "unique_all", "isin",
           "in1d", "union1d", "intersect1d", "setdiff1d", "setxor1d"]

_UNIQUE_SIZE_HINT = (
    "To make jnp.unique() compatible with JIT and other transforms, you can specify a "
    "concrete value for the size argument, which will determine the output size.")


def _concrete_or_error(force, x, context: str):
  """`force(x)` (x itself for None) for a concrete `x`; a ConcretizationTypeError with JAX's
  first line and `context` for a traced one (a JVP tracer's primal value is concrete)."""
  if isinstance(x, Tracer):
    v = x.to_concrete_value()
    if v is None:
      raise core.ConcretizationTypeError(
          f"Abstract tracer value encountered where concrete value is expected: traced array "
          f"with shape {x.aval.str_short(False)}\n{context}")
    x = v
  return x if force is None else force(x)


def _int_dtype_for_dim(n: int):
  """The narrowest of int32 and int64 that holds the indices of a dimension of size n."""
  return np.dtype(np.int32) if n <= np.iinfo(np.int32).max else dtypes.canonicalize_dtype(
      np.int64)


# ---------------------------------------------------------------------------
# isin


@jit(static_argnames=("assume_unique", "invert", "method"))
def _in1d(ar1, ar2, invert: bool, method="auto", assume_unique=False):
  """Membership of each element of the flattened `ar1` in `ar2` (jitted under this name,
  as JAX's): bool `[ar1.size]`."""
  ar1, ar2 = ensure_arraylike("in1d", ar1, ar2)
  arr1, arr2 = promote_dtypes(ar1, ar2)
  arr1, arr2 = ravel(arr1), ravel(arr2)
  if arr1.size == 0 or arr2.size == 0:
    return (ones if invert else zeros)(shape_of(arr1), dtype=bool)
  if method in ("auto", "compare_all"):
    if invert:
      return reductions.all(arr1[:, None] != arr2[None, :], -1)
    return reductions.any(arr1[:, None] == arr2[None, :], -1)
  if method == "binary_search":
    arr2 = lax.sort(arr2)
    ind = searchsorted(arr2, arr1)
    return arr1 != arr2[ind] if invert else arr1 == arr2[ind]
  if method == "sort":
    if assume_unique:
      ind_out: Any = slice(None)
    else:
      arr1, ind_out = unique(arr1, size=arr1.shape[0], return_inverse=True,
                             fill_value=reductions.max(arr2))
    aux, ind = lax.sort_key_val(concatenate([arr1, arr2]), arange(arr1.size + arr2.size))
    if invert:
      out = ones(shape_of(arr1), bool).at[ind[:-1]].set(aux[1:] != aux[:-1], mode="drop")
    else:
      out = zeros(shape_of(arr1), bool).at[ind[:-1]].set(aux[1:] == aux[:-1], mode="drop")
    return out[ind_out]
  raise ValueError(f"{method=} is not implemented; options are 'compare_all', "
                   "'binary_search', 'sort', and 'auto'")


def isin(element: ArrayLike, test_elements: ArrayLike, assume_unique: bool = False,
         invert: bool = False, *, method: str = "auto"):
  """Whether each element of `element` occurs in `test_elements` (NaN never does).

  Args:
    element: array `T[*s]`; test_elements: array of any shape (promoted with T).
    assume_unique: used by `method='sort'` (skips making `element` unique).
    invert: return the negation.
    method: 'auto' / 'compare_all' (every pair compared: `O(|element| |test|)` work),
      'binary_search' (`searchsorted` in the sorted test values) or 'sort'.

  Returns:
    bool Array `[*s]`.

  Raises:
    TypeError: an argument not an array or scalar (a list).
    ValueError: for an unknown `method`.
  """
  element, test_elements = ensure_arraylike("isin", element, test_elements)
  out = _in1d(element, test_elements, invert=invert, method=method,
              assume_unique=assume_unique)
  return out.reshape(shape_of(element))


def in1d(ar1: ArrayLike, ar2: ArrayLike, assume_unique: bool = False, invert: bool = False,
         *, method: str = "auto"):
  """`isin` of the flattened `ar1` (NumPy's older name): bool `[ar1.size]`."""
  ar1, ar2 = ensure_arraylike("in1d", ar1, ar2)
  return _in1d(ar1, ar2, invert=invert, method=method, assume_unique=assume_unique)


# ---------------------------------------------------------------------------
# unique


@jit(static_argnames=("axis", "equal_nan"))
def _unique_sorted_mask(ar, axis: int, equal_nan: bool):
  """The slices of `ar` along `axis` sorted lexicographically (moved to the front), the
  mask of the first slice of each run of equal ones, and the sorting permutation (jitted
  under this name, as JAX's)."""
  aux = moveaxis(ar, axis, 0)
  if dtypes.is_complex(dtype_of(aux)):
    # One canonical NaN, whichever part is NaN (the sort orders NaNs by their parts).
    aux = where(isnan(aux), np.array(np.nan, dtype_of(aux)), aux)
  size, *out_shape = shape_of(aux)
  if math.prod(out_shape) == 0:
    size = 1
    perm = zeros(1, dtype=int)
  else:
    perm = lexsort(aux.reshape(size, math.prod(out_shape)).T[::-1])
  aux = aux[perm]
  if aux.size:
    if dtypes.is_inexact(dtype_of(aux)) and equal_nan:
      neq = lambda x, y: lax.ne(x, y) & ~(isnan(x) & isnan(y))  # noqa: E731
    else:
      neq = lax.ne
    mask = ones(size, dtype=bool)
    mask = mask.at[1:].set(reductions.any(neq(aux[1:], aux[:-1]),
                                          tuple(range(1, ndim_of(aux)))))
  else:
    mask = zeros(size, dtype=bool)
  return aux, mask, perm


def _unique(ar, axis: int, return_index: bool = False, return_inverse: bool = False,
            return_counts: bool = False, equal_nan: bool = True, size: int | None = None,
            fill_value: ArrayLike | None = None, return_true_size: bool = False):
  """`unique` of `ar` along `axis` (not flattened): the values, then the requested index
  arrays, then (with `return_true_size`) the number of unique slices."""
  axis = canonicalize_axis(axis, ndim_of(ar), "unique")
  if shape_of(ar)[axis] == 0 and size and fill_value is None:
    raise ValueError("jnp.unique: for zero-sized input with nonzero size argument, "
                     "fill_value must be specified")
  aux, mask, perm = _unique_sorted_mask(ar, axis, equal_nan)
  if size is None:
    ind = _concrete_or_error(None, mask, "The error arose in jnp.unique(). "
                             + _UNIQUE_SIZE_HINT)
  else:
    ind = nonzero(mask, size=size)[0]
  result = aux[ind] if aux.size else aux
  if size is not None and fill_value is not None:
    fill_value = lax.convert_element_type(fill_value, dtype_of(result))
    if shape_of(result)[0]:
      valid = lax.expand_dims(arange(size) < mask.sum(), tuple(range(1, ndim_of(result))))
      result = where(valid, result, fill_value)
    else:
      result = full_like(result, fill_value, shape=(size, *shape_of(result)[1:]))
  result = moveaxis(result, 0, axis)
  ret: tuple = (result,)
  if return_index:
    ret += (perm[ind] if aux.size else perm,)
  if return_inverse:
    if aux.size:
      imask = reductions.cumsum(mask) - 1
      inv_idx = zeros(shape_of(mask), dtype=int).at[perm].set(imask)
    else:
      inv_idx = zeros(shape_of(ar)[axis], dtype=int)
    ret += (inv_idx,)
  if return_counts:
    if aux.size:
      if size is None:
        idx = append(nonzero(mask)[0], mask.size)
      else:
        idx = nonzero(mask, size=size + 1)[0]
        idx = idx.at[1:].set(where(idx[1:], idx[1:], mask.size))
      ret += (diff(idx),)
    elif shape_of(ar)[axis]:
      ret += (full((1,), shape_of(ar)[axis], dtype=int),)
    else:
      ret += (empty(0, dtype=int),)
  if return_true_size:
    ret += (mask.sum(),)
  return ret[0] if len(ret) == 1 else ret


def unique(ar: ArrayLike, return_index: bool = False, return_inverse: bool = False,
           return_counts: bool = False, axis: int | None = None, *, equal_nan: bool = True,
           size: int | None = None, fill_value: ArrayLike | None = None,
           sorted: bool = True):
  """The sorted unique values (or unique slices along `axis`) of `ar`.

  Args:
    ar: array `T[*s]`.
    return_index: also return the index of the first occurrence of each unique value.
    return_inverse: also return, for each input element, the index of its unique value
      (shaped like `ar` when `axis` is None, else `[s[axis]]`).
    return_counts: also return how often each unique value occurs.
    axis: None (flatten) or the axis whose slices are compared.
    equal_nan: treat NaNs as equal (one NaN in the result).
    size: static result length: pad (with `fill_value`) or truncate to it; required under
      jit.
    fill_value: the padding value (default: the smallest unique value, as JAX's numpy);
      padded indices are those of that value, padded counts are 0.
    sorted: unused (the result is always sorted), as in JAX.

  Returns:
    The values `T[k]` (`T[..., k, ...]` with `axis`), then the requested default-int index
    arrays, as a tuple if any was requested.

  Raises:
    ConcretizationTypeError: if traced without `size`.
    ValueError: for zero-size input with a nonzero `size` and no `fill_value`.
    TypeError: `ar` not an array or scalar (a list).

  Examples:
    >>> from stagecraft import numpy as jnp
    >>> jnp.unique(jnp.array([3, 1, 3, 2]))
    Array([1, 2, 3], dtype=int32)
    >>> jnp.unique(jnp.array([3, 1, 3, 2]), size=5, fill_value=0)
    Array([1, 2, 3, 0, 0], dtype=int32)
  """
  del sorted   # unused, as in JAX
  arr = ensure_arraylike("unique", ar)
  if size is None:
    arr = _concrete_or_error(None, arr, "The error arose for the first argument of "
                             "jnp.unique(). " + _UNIQUE_SIZE_HINT)
  else:
    size = _concrete_or_error(operator.index, size, "The error arose for the size argument "
                              "of jnp.unique(). " + _UNIQUE_SIZE_HINT)
  arr_shape = shape_of(arr)
  if axis is None:
    axis_int = 0
    arr = arr.flatten()
  else:
    axis_int = canonicalize_axis(axis, ndim_of(arr), "unique")
  result = _unique(arr, axis_int, return_index, return_inverse, return_counts,
                   equal_nan=equal_nan, size=size, fill_value=fill_value)
  if return_inverse and axis is None:
    i = 2 if return_index else 1
    result = (*result[:i], result[i].reshape(arr_shape), *result[i + 1:])
  return result


class _UniqueAllResult(NamedTuple):
  values: Any
  indices: Any
  inverse_indices: Any
  counts: Any


class _UniqueCountsResult(NamedTuple):
  values: Any
  counts: Any


class _UniqueInverseResult(NamedTuple):
  values: Any
  inverse_indices: Any


def unique_values(x: ArrayLike, /, *, size: int | None = None,
                  fill_value: ArrayLike | None = None):
  """The Array API's unique values of the flattened `x`, NaNs distinct (see `unique`)."""
  x = ensure_arraylike("unique_values", x)
  return unique(x, equal_nan=False, size=size, fill_value=fill_value)


def unique_counts(x: ArrayLike, /, *, size: int | None = None,
                  fill_value: ArrayLike | None = None):
  """`(values, counts)` of the flattened `x` as a named tuple, NaNs distinct (see
  `unique`)."""
  x = ensure_arraylike("unique_counts", x)
  values, counts = unique(x, return_counts=True, equal_nan=False, size=size,
                          fill_value=fill_value)
  return _UniqueCountsResult(values=values, counts=counts)


def unique_inverse(x: ArrayLike, /, *, size: int | None = None,
                   fill_value: ArrayLike | None = None):
  """`(values, inverse_indices)` with `inverse_indices` shaped like `x`, as a named tuple;
  NaNs distinct (see `unique`)."""
  x = ensure_arraylike("unique_inverse", x)
  values, inverse = unique(x, return_inverse=True, equal_nan=False, size=size,
                           fill_value=fill_value)
  return _UniqueInverseResult(values=values, inverse_indices=inverse)


def unique_all(x: ArrayLike, /, *, size: int | None = None,
               fill_value: ArrayLike | None = None):
  """`(values, indices, inverse_indices, counts)` as a named tuple, NaNs distinct (see
  `unique`)."""
  x = ensure_arraylike("unique_all", x)
  values, indices, inverse, counts = unique(
      x, return_index=True, return_inverse=True, return_counts=True, equal_nan=False,
      size=size, fill_value=fill_value)
  return _UniqueAllResult(values=values, indices=indices, inverse_indices=inverse,
                          counts=counts)


# ---------------------------------------------------------------------------
# Operations on two sets


def _concat_unique(arr1, arr2):
  """The unique values of `arr1` then those of `arr2` packed at the front of one array
  `[n1 + n2]` (the rest zeros), and their total count."""
  arr1, arr2 = ravel(arr1), ravel(arr2)
  arr1, num_unique1 = _unique(arr1, axis=0, size=arr1.size, return_true_size=True)
  arr2, num_unique2 = _unique(arr2, axis=0, size=arr2.size, return_true_size=True)
  arr = zeros(arr1.size + arr2.size, dtype=dtypes.result_type(arr1, arr2))
  arr = lax.dynamic_update_slice(arr, arr1, (0,))
  arr = lax.dynamic_update_slice(arr, arr2, (num_unique1,))
  return arr, num_unique1 + num_unique2


def setdiff1d(ar1: ArrayLike, ar2: ArrayLike, assume_unique: bool = False, *,
              size: int | None = None, fill_value: ArrayLike | None = None):
  """The sorted unique values of `ar1` not in `ar2` (both flattened).

  Args:
    assume_unique: `ar1` has no repeated values (its order is kept).
    size: static result length (required under jit): pad with `fill_value` (default 0) or
      truncate.

  Returns:
    `T[k]`, T the dtype of `ar1`.

  Raises:
    ConcretizationTypeError: if `ar1` is traced without `size`.
    TypeError: an argument not an array or scalar (a list).
  """
  arr1, arr2 = ensure_arraylike("setdiff1d", ar1, ar2)
  arr1, arr2 = ravel(arr1), ravel(arr2)
  if size is None:
    _concrete_or_error(None, arr1, "The error arose in setdiff1d()")
  else:
    size = _concrete_or_error(operator.index, size, "The error arose in setdiff1d()")
  fill_value = full_like(arr1, fill_value=0 if fill_value is None else fill_value, shape=())
  if arr1.size == 0:
    return full_like(arr1, fill_value, shape=size or 0)
  if not assume_unique:
    arr1 = unique(arr1, size=size and arr1.size)
  mask = _in1d(arr1, arr2, invert=True, assume_unique=assume_unique)
  if size is None:
    return arr1[mask]
  if not assume_unique:
    # The padding of unique() repeats its first value: those entries are not results.
    n_unique = arr1.size + 1 - (arr1 == arr1[0]).sum()
    mask = where(arange(arr1.size) < n_unique, mask, False)
  return where(arange(size) < mask.sum(), arr1[where(mask, size=size)], fill_value)


def union1d(ar1: ArrayLike, ar2: ArrayLike, *, size: int | None = None,
            fill_value: ArrayLike | None = None):
  """The sorted unique values in either array (`unique` of both, flattened and joined).

  Raises:
    ConcretizationTypeError: if an input is traced without `size`.
    TypeError: an argument not an array or scalar (a list).
  """
  ar1, ar2 = ensure_arraylike("union1d", ar1, ar2)
  if size is None:
    ar1 = _concrete_or_error(None, ar1, "The error arose in union1d()")
    ar2 = _concrete_or_error(None, ar2, "The error arose in union1d()")
  else:
    size = _concrete_or_error(operator.index, size, "The error arose in union1d()")
  return unique(concatenate((ar1, ar2), axis=None), size=size, fill_value=fill_value)


@jit(static_argnames=("assume_unique", "size"))
def _setxor1d_size(arr1, arr2, fill_value, *, assume_unique: bool, size: int):
  """`setxor1d` of 1-D arrays of one dtype with a static `size` (jitted under this name, as
  JAX's): the sorted unique values of both, flagged where a value differs from both
  neighbours."""
  if assume_unique:
    # NB: JAX's program joins the inputs twice (the first result unused); so does this one.
    concatenate([arr1, arr2])
    aux = sort(concatenate([arr1, arr2]))
    flag = concatenate((bool(aux.size), aux[1:] != aux[:-1], True), axis=None)
  else:
    arr, num_unique = _concat_unique(arr1, arr2)
    mask = arange(arr.size + 1) < num_unique + 1
    _, aux = lax.sort([~mask[1:], arr], is_stable=True, num_keys=2)
    flag = mask & concatenate((bool(aux.size), aux[1:] != aux[:-1], False),
                              axis=None).at[num_unique].set(True)
  aux_mask = flag[1:] & flag[:-1]
  num_results = aux_mask.sum()
  if aux.size:
    indices = nonzero(aux_mask, size=size, fill_value=aux.shape[0])[0]
    vals = aux.at[indices].get(mode="fill", fill_value=0)
  else:
    vals = zeros(size, aux.dtype)
  if fill_value is None:
    vals = where(arange(vals.shape[0]) < num_results, vals, vals.max())
    return where(arange(vals.shape[0]) < num_results, vals, vals.min())
  return where(arange(vals.shape[0]) < num_results, vals, fill_value)


def setxor1d(ar1: ArrayLike, ar2: ArrayLike, assume_unique: bool = False, *,
             size: int | None = None, fill_value: ArrayLike | None = None):
  """The sorted unique values in exactly one of the arrays (flattened, promoted).

  Args:
    assume_unique: neither input has repeated values.
    size: static result length (required under jit): pad with `fill_value` (default: the
      smallest result) or truncate.

  Raises:
    ConcretizationTypeError: if an input is traced without `size`.
    TypeError: an argument not an array or scalar (a list).
  """
  ar1, ar2 = ensure_arraylike("setxor1d", ar1, ar2)
  arr1, arr2 = promote_dtypes(ravel(ar1), ravel(ar2))
  if size is not None:
    return _setxor1d_size(arr1, arr2, fill_value=fill_value, assume_unique=assume_unique,
                          size=size)
  if not assume_unique:
    arr1 = unique(arr1)
    arr2 = unique(arr2)
  aux = concatenate((arr1, arr2))
  if aux.size == 0:
    return aux
  aux = sort(aux)
  flag = concatenate((True, aux[1:] != aux[:-1], True), axis=None)
  return aux[flag[1:] & flag[:-1]]


@jit(static_argnames=("return_indices",))
def _intersect1d_sorted_mask(arr1, arr2, return_indices: bool):
  """The sorted concatenation of two 1-D arrays, the mask of entries equal to their
  successor, and (with `return_indices`) the sorting permutation (jitted under this name,
  as JAX's)."""
  arr = concatenate((arr1, arr2))
  if return_indices:
    iota = lax.broadcasted_iota(_int_dtype_for_dim(arr.shape[0]), shape_of(arr), 0)
    aux, indices = lax.sort_key_val(arr, iota)
  else:
    aux = sort(arr)
    indices = None
  mask = aux[1:] == aux[:-1]
  return aux, mask, indices


@jit(static_argnames=("fill_value", "assume_unique", "size", "return_indices"))
def _intersect1d_size(arr1, arr2, fill_value, assume_unique: bool, size: int,
                      return_indices: bool):
  """`intersect1d` of 1-D arrays of one dtype with a static `size` (jitted under this name,
  as JAX's): the unique values of both, sorted together; equal neighbours are the
  intersection. Padded indices are out of bounds (the input's size)."""
  if assume_unique:
    ind1, num_unique1 = arange(arr1.size), full((), arr1.size)
    ind2, num_unique2 = arange(arr2.size), full((), arr2.size)
    arr = concatenate([arr1, arr2])
    aux, aux_sort_indices = lax.sort([arr, arange(arr.size)], is_stable=True, num_keys=1)
    mask = ones(arr.size, dtype=bool)
  else:
    arr1, ind1, num_unique1 = _unique(arr1, 0, size=arr1.size, return_index=True,
                                      return_true_size=True, fill_value=0)
    arr2, ind2, num_unique2 = _unique(arr2, 0, size=arr2.size, return_index=True,
                                      return_true_size=True, fill_value=0)
    arr = zeros(arr1.size + arr2.size, dtype=dtypes.result_type(arr1, arr2))
    arr = lax.dynamic_update_slice(arr, arr1, (0,))
    arr = lax.dynamic_update_slice(arr, arr2, (num_unique1,))
    mask = arange(arr.size) < num_unique1 + num_unique2
    _, aux, aux_sort_indices = lax.sort([~mask, arr, arange(arr.size)], is_stable=True,
                                        num_keys=2)
  aux_mask = (aux[1:] == aux[:-1]) & mask[1:]
  num_results = aux_mask.sum()
  if aux.size:
    val_indices = nonzero(aux_mask, size=size, fill_value=aux.size)[0]
    vals = aux.at[val_indices].get(mode="fill", fill_value=0)
  else:
    val_indices = arange(0)
    vals = zeros(size, aux.dtype)
  n = vals.shape[0]
  if fill_value is None:
    vals = where(arange(n) < num_results, vals, vals.max())
    vals = where(arange(n) < num_results, vals, vals.min())
  else:
    vals = where(arange(n) < num_results, vals, fill_value)
  if not return_indices:
    return vals
  idx1 = aux_sort_indices.at[val_indices].get(mode="fill", fill_value=arr1.size)
  idx1 = where(arange(idx1.shape[0]) < num_results, idx1, arr1.size)
  idx2 = aux_sort_indices.at[val_indices + 1].get(mode="fill",
                                                  fill_value=arr2.size) - num_unique1
  idx2 = where(arange(idx2.shape[0]) < num_results, idx2, arr2.size)
  if not assume_unique:
    idx1 = ind1.at[idx1].get(mode="fill", fill_value=ind1.size)
    idx2 = ind2.at[idx2].get(mode="fill", fill_value=ind2.size)
  return vals, idx1, idx2


def intersect1d(ar1: ArrayLike, ar2: ArrayLike, assume_unique: bool = False,
                return_indices: bool = False, *, size: int | None = None,
                fill_value: ArrayLike | None = None):
  """The sorted unique values in both arrays (flattened, promoted).

  Args:
    assume_unique: neither input has repeated values.
    return_indices: also return the indices of the first occurrences of the results in the
      flattened `ar1` and `ar2`.
    size: static result length (required under jit): pad with `fill_value` (default: the
      smallest result) or truncate; padded indices are out of bounds (`ar1.size`,
      `ar2.size`).

  Returns:
    `T[k]`, or `(T[k], int[k], int[k])` with `return_indices`.

  Raises:
    ConcretizationTypeError: if an input is traced without `size`.
    TypeError: an argument not an array or scalar (a list).
  """
  ar1, ar2 = ensure_arraylike("intersect1d", ar1, ar2)
  arr1, arr2 = promote_dtypes(ar1, ar2)
  arr1, arr2 = ravel(arr1), ravel(arr2)
  if size is not None:
    return _intersect1d_size(arr1, arr2, return_indices=return_indices, size=size,
                             fill_value=fill_value, assume_unique=assume_unique)
  ind1 = ind2 = arange(0)
  if not assume_unique:
    if return_indices:
      arr1, ind1 = unique(arr1, return_index=True)
      arr2, ind2 = unique(arr2, return_index=True)
    else:
      arr1, arr2 = unique(arr1), unique(arr2)
  aux, mask, aux_sort_indices = _intersect1d_sorted_mask(arr1, arr2, return_indices)
  int1d = aux[:-1][mask]
  if not return_indices:
    return int1d
  idx1 = aux_sort_indices[:-1][mask]
  idx2 = aux_sort_indices[1:][mask] - arr1.size
  if not assume_unique:
    idx1, idx2 = ind1[idx1], ind2[idx2]
  return int1d, idx1, idx2
