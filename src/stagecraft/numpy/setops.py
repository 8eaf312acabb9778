"""Set operations: unique (and the Array API's unique_*), isin, union1d, intersect1d,
setdiff1d. Built on `lax.sort`: a stable sort brings equal values together, a mask marks
the first of each run, and a second stable sort keyed on that mask moves the marked entries
to the front (a compaction without scatter). Results whose length depends on the data need
concrete inputs, or a static `size=` under jit, as in JAX's numpy."""
from __future__ import annotations

import math
import operator
from typing import Any, NamedTuple

import numpy as np

from stagecraft import core, dtypes, lax
from stagecraft.core import Tracer
from stagecraft.numpy.array_creation import full, zeros
from stagecraft.numpy.indexing import take_axis
from stagecraft.numpy.lax_numpy import diff
from stagecraft.numpy.manipulation import concatenate, moveaxis, ravel, reshape, squeeze, stack
from stagecraft.numpy.ufuncs import isnan, where
from stagecraft.numpy.util import (ArrayLike, as_array, canonicalize_axis, check_concrete, const,
                                   dtype_of, ndim_of, promote_dtypes, shape_of, slice_axis)

__all__ = ["unique", "unique_values", "unique_counts", "unique_inverse", "unique_all", "isin",
           "in1d", "union1d", "intersect1d", "setdiff1d", "setxor1d"]

_SIZE_HINT = ("The size of the result of jnp.{name} depends on the values of its input, so "
              "it must be concrete: call it outside jit, or pass a static `size=` (and "
              "optionally `fill_value=`) to get a fixed-size result.")


def _static_count(count, name):
  if isinstance(count, Tracer):
    raise core.ConcretizationTypeError(
        "Abstract tracer value encountered where concrete value is expected. "
        + _SIZE_HINT.format(name=name))
  return int(count)


def _int_iota(n):
  return lax.iota(dtypes.default_int_dtype(), n)


def _front(mask, *operands):
  """`operands` (1-D, like `mask`) reordered stably with the True entries of `mask` first."""
  key = lax.convert_element_type(lax.bitwise_not(mask), dtypes.int32)
  return lax.sort((key, *operands), dimension=0, num_keys=1)[1:]


def _take_padded(x, pos, k, pad_index=0):
  """x[pos[:k]] along axis 0, where `pos` (1-D, length n) is padded with `pad_index` if
  k > n."""
  n = shape_of(pos)[0]
  if k <= n:
    pos = slice_axis(pos, 0, k, 0)
  else:
    pos = lax.pad(pos, const(pos, pad_index), ((0, k - n, 0),))
  return take_axis(x, pos, 0) if k else slice_axis(x, 0, 0, 0)


def _neq(x, y, equal_nan):
  ne = lax.ne(x, y)
  if equal_nan and dtypes.is_inexact(dtype_of(x)):
    ne = lax.bitwise_and(ne, lax.bitwise_not(lax.bitwise_and(lax.ne(x, x), lax.ne(y, y))))
  return ne


def _sorted_runs(aux, equal_nan):
  """Sorts the rows of `aux` (`T[n, *rest]`) lexicographically; returns (sorted rows,
  the permutation, mask of the first row of each run of equal rows)."""
  n, *rest = shape_of(aux)
  m = math.prod(rest)
  iota = _int_iota(n)
  if dtypes.is_complex(dtype_of(aux)):   # one canonical NaN, whichever part is NaN
    aux = where(isnan(aux), const(aux, np.nan), aux)
  if not rest:
    aux_s, perm = lax.sort_key_val(aux, iota, dimension=0)
  elif m == 0:
    aux_s, perm = aux, iota
  else:
    cols = reshape(aux, (n, m))
    outs = lax.sort([squeeze(slice_axis(cols, j, j + 1, 1), 1) for j in range(m)]
                    + [iota], dimension=0, num_keys=m)
    aux_s = reshape(stack(outs[:-1], axis=1), (n, *rest))
    perm = outs[-1]
  if n == 0:
    return aux_s, perm, zeros((0,), dtypes.bool_)
  ne = _neq(slice_axis(aux_s, 1, n, 0), slice_axis(aux_s, 0, n - 1, 0), equal_nan)
  if rest:
    ne = lax.reduce_or(ne, tuple(range(1, len(rest) + 1))) if m else zeros(
        (n - 1,), dtypes.bool_)
  mask = lax.concatenate([full((1,), True, dtypes.bool_), ne], 0)
  return aux_s, perm, mask


def unique(ar: ArrayLike, return_index: bool = False, return_inverse: bool = False,
           return_counts: bool = False, axis: int | None = None, *, equal_nan: bool = True,
           size: int | None = None, fill_value: ArrayLike | None = None,
           sorted: bool = True):
  """The sorted unique values (or unique slices along `axis`) of `ar`.

  Args:
    ar: array `T[*s]`.
    return_index: also return the index of the first occurrence of each unique value.
    return_inverse: also return, for each input element, the index of its unique value
      (shaped like `ar` when `axis` is None).
    return_counts: also return how often each unique value occurs.
    axis: None (flatten) or the axis whose slices are compared.
    equal_nan: treat NaNs as equal (one NaN in the result).
    size: static result length: pad (with `fill_value`) or truncate to it; required under
      jit.
    fill_value: the padding value (default: the smallest unique value, as JAX's numpy); the
      padded indices are those of that value and padded counts are 0.

  Returns:
    The values `T[k]` (`T[..., k, ...]` with `axis`), then the requested int32 arrays, as a
    tuple if any was requested.

  Raises:
    ConcretizationTypeError: if traced without `size`.
    ValueError: for zero-size input with a nonzero `size` and no `fill_value`.

  Examples:
    >>> from stagecraft import numpy as jnp
    >>> jnp.unique(jnp.array([3, 1, 3, 2]))
    Array([1, 2, 3], dtype=int32)
    >>> jnp.unique(jnp.array([3, 1, 3, 2]), size=5, fill_value=0)
    Array([1, 2, 3, 0, 0], dtype=int32)
  """
  arr = as_array(ar)
  if size is not None:
    size = operator.index(check_concrete(size, "unique", "size"))
  elif isinstance(arr, Tracer):
    raise core.ConcretizationTypeError(
        "Abstract tracer value encountered where concrete value is expected: the first "
        "argument of jnp.unique(). " + _SIZE_HINT.format(name="unique"))
  in_shape = shape_of(arr)
  if axis is None:
    arr, ax = ravel(arr), 0
  else:
    ax = canonicalize_axis(axis, ndim_of(arr), "unique")
  n = shape_of(arr)[ax]
  if n == 0 and size and fill_value is None:
    raise ValueError("jnp.unique: for zero-sized input with nonzero size argument, "
                     "fill_value must be specified")
  aux_s, perm, mask = _sorted_runs(moveaxis(arr, ax, 0), equal_nan)
  count = lax.reduce_sum(lax.convert_element_type(mask, dtypes.int32), (0,))
  k = size if size is not None else _static_count(count, "unique")
  iota = _int_iota(n)
  pos, = _front(mask, iota) if n else (iota,)
  if n and size is not None:   # padded entries take the first unique value, as JAX's numpy
    pos = _take_padded(pos, iota, k)
    pos = where(lax.lt(_int_iota(k), lax.convert_element_type(count, dtype_of(pos))), pos,
                    const(pos, 0))
  result = _take_padded(aux_s, pos, k)
  if size is not None and fill_value is not None:
    fill = lax.convert_element_type(as_array(fill_value), dtype_of(result))
    valid = lax.lt(_int_iota(k), lax.convert_element_type(count, dtypes.default_int_dtype()))
    valid = lax.broadcast_in_dim(valid, shape_of(result), (0,))
    result = where(valid, result, fill)
  result = moveaxis(result, 0, ax)
  ret = [result]
  if return_index:
    ret.append(_take_padded(perm, pos, k) if n else
               zeros((k,), dtypes.default_int_dtype()))
  if return_inverse:
    if n:
      inv_sorted = lax.sub(lax.cumsum(lax.convert_element_type(mask, dtypes.default_int_dtype())),
                           const(iota, 1))
      inv = lax.sort((perm, inv_sorted), dimension=0, num_keys=1)[1]
    else:
      inv = zeros((0,), dtypes.default_int_dtype())
    ret.append(reshape(inv, in_shape) if axis is None else inv)
  if return_counts:
    if n:
      ends, = _front(mask, where(mask, iota, const(iota, n)))
      ends = lax.pad(ends, const(ends, n), ((0, 1, 0),))
      bounds = _take_padded(ends, _int_iota(n + 1), k + 1, pad_index=n)
      ret.append(diff(bounds))
    else:
      ret.append(zeros((k,), dtypes.default_int_dtype()))
  return ret[0] if len(ret) == 1 else tuple(ret)


class _UniqueAll(NamedTuple):
  values: Any
  indices: Any
  inverse_indices: Any
  counts: Any


class _UniqueCounts(NamedTuple):
  values: Any
  counts: Any


class _UniqueInverse(NamedTuple):
  values: Any
  inverse_indices: Any


def unique_values(x: ArrayLike, /, *, size: int | None = None,
                  fill_value: ArrayLike | None = None):
  """The Array API's unique values of the flattened `x` (see `unique`)."""
  return unique(x, size=size, fill_value=fill_value)


def unique_counts(x: ArrayLike, /, *, size: int | None = None,
                  fill_value: ArrayLike | None = None):
  """`(values, counts)` of the flattened `x`, as a named tuple (see `unique`)."""
  return _UniqueCounts(*unique(x, return_counts=True, size=size, fill_value=fill_value))


def unique_inverse(x: ArrayLike, /, *, size: int | None = None,
                   fill_value: ArrayLike | None = None):
  """`(values, inverse_indices)` with `inverse_indices` shaped like `x` (see `unique`)."""
  return _UniqueInverse(*unique(x, return_inverse=True, size=size, fill_value=fill_value))


def unique_all(x: ArrayLike, /, *, size: int | None = None,
               fill_value: ArrayLike | None = None):
  """`(values, indices, inverse_indices, counts)` as a named tuple (see `unique`)."""
  return _UniqueAll(*unique(x, return_index=True, return_inverse=True, return_counts=True,
                            size=size, fill_value=fill_value))


def isin(element: ArrayLike, test_elements: ArrayLike, assume_unique: bool = False,
         invert: bool = False, *, method: str = "auto"):
  """Whether each element of `element` occurs in `test_elements` (NaN never does).

  Returns:
    bool Array shaped like `element`.

  Algorithm: compares every pair (O(|element| * |test_elements|) work); `method` is
  accepted for compatibility.
  """
  element, test = as_array(element), ravel(as_array(test_elements))
  element, test = (as_array(x) for x in promote_dtypes(element, test))
  shape = (*shape_of(element), shape_of(test)[0])
  nd = ndim_of(element)
  eq = lax.eq(lax.broadcast_in_dim(element, shape, tuple(range(nd))),
              lax.broadcast_in_dim(test, shape, (nd,)))
  out = lax.reduce_or(eq, (nd,))
  return lax.bitwise_not(out) if invert else out


def in1d(ar1: ArrayLike, ar2: ArrayLike, assume_unique: bool = False, invert: bool = False):
  """`isin` of the flattened `ar1` (NumPy's older name)."""
  return isin(ravel(as_array(ar1)), ar2, assume_unique, invert)


def _compact(x, mask, size, fill_value, name):
  """The entries of 1-D `x` where `mask`, in order; padded/truncated to `size` if given."""
  n = shape_of(x)[0]
  count = lax.reduce_sum(lax.convert_element_type(mask, dtypes.int32), (0,))
  k = size if size is not None else _static_count(count, name)
  if n == 0:
    if k and fill_value is None:
      raise ValueError(f"jnp.{name}: for empty input with a nonzero size, fill_value must "
                       f"be specified")
    return full((k,), 0 if fill_value is None else fill_value, dtype_of(x))
  vals, = _front(mask, x)
  out = _take_padded(vals, _int_iota(n), k)
  if size is not None:
    fill = vals[0] if fill_value is None else lax.convert_element_type(as_array(fill_value),
                                                                        dtype_of(x))
    valid = lax.lt(_int_iota(k), lax.convert_element_type(count, dtypes.default_int_dtype()))
    out = where(valid, out, fill)
  return out


def union1d(ar1: ArrayLike, ar2: ArrayLike, *, size: int | None = None,
            fill_value: ArrayLike | None = None):
  """The sorted unique values in either array (`unique` of both, flattened)."""
  return unique(concatenate([ravel(as_array(ar1)), ravel(as_array(ar2))]), size=size,
                fill_value=fill_value)


def setdiff1d(ar1: ArrayLike, ar2: ArrayLike, assume_unique: bool = False, *,
              size: int | None = None, fill_value: ArrayLike | None = None):
  """The sorted unique values of `ar1` not in `ar2` (padding: the first of them, or
  `fill_value`)."""
  a = ravel(as_array(ar1))
  n = shape_of(a)[0]
  if isinstance(a, Tracer) and size is None:
    _static_count(a, "setdiff1d")
  if n == 0:
    return _compact(a, zeros((0,), dtypes.bool_), size, fill_value, "setdiff1d")
  aux_s, _, first = _sorted_runs(a, True)
  keep = lax.bitwise_and(first, isin(aux_s, ar2, invert=True))
  return _compact(aux_s, keep, size, fill_value, "setdiff1d")


def intersect1d(ar1: ArrayLike, ar2: ArrayLike, assume_unique: bool = False,
                return_indices: bool = False, *, size: int | None = None,
                fill_value: ArrayLike | None = None):
  """The sorted unique values in both arrays.

  Raises:
    NotImplementedError: for `return_indices`.
  """
  if return_indices:
    raise NotImplementedError("jnp.intersect1d(return_indices=True) is not supported yet.")
  a = ravel(as_array(ar1))
  if shape_of(a)[0] == 0:
    return _compact(a, zeros((0,), dtypes.bool_), size, fill_value, "intersect1d")
  if isinstance(a, Tracer) and size is None:
    _static_count(a, "intersect1d")
  aux_s, _, first = _sorted_runs(a, True)
  keep = lax.bitwise_and(first, isin(aux_s, ar2))
  return _compact(aux_s, keep, size, fill_value, "intersect1d")


def setxor1d(ar1: ArrayLike, ar2: ArrayLike, assume_unique: bool = False, *,
             size: int | None = None, fill_value: ArrayLike | None = None):
  """The sorted unique values in exactly one of the arrays (padding as `setdiff1d`)."""
  a, b = (ravel(as_array(v)) for v in promote_dtypes(as_array(ar1), as_array(ar2)))
  both = concatenate([a, b])
  if shape_of(both)[0] == 0:
    return _compact(both, zeros((0,), dtypes.bool_), size, fill_value, "setxor1d")
  if isinstance(both, Tracer) and size is None:
    _static_count(both, "setxor1d")
  aux_s, _, first = _sorted_runs(both, True)
  keep = lax.bitwise_and(first, lax.ne(isin(aux_s, a), isin(aux_s, b)))
  return _compact(aux_s, keep, size, fill_value, "setxor1d")
