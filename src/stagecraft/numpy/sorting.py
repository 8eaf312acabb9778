"""Sorting and searching: sort, argsort, lexsort, partition, argpartition, searchsorted,
sort_complex, msort. Built on `lax.sort` (XLA's comparator sort, variadic) and
`lax.top_k`, with JAX's numpy's semantics: NaNs sort last, -0.0 equals 0.0, complex numbers
sort by (real, imag), and argsort's indices are int32 (int64 with x64). `searchsorted` is
JAX's: jitted, with its four methods (a binary search in a `scan`, unrolled or not, ranks by
co-sorting, or comparing all pairs), comparing in `lax.sort`'s total order with the
`lt_to`/`le_to`/`eq_to` primitives of `lax.sort`; its indices are int32 even with x64."""
from __future__ import annotations

from functools import partial
from typing import Any, Sequence

import numpy as np

from stagecraft import dtypes, lax, shape_poly
from stagecraft.interpreters import batching
from stagecraft.lax.sort import eq_to_p, le_to_p, lt_to_p
from stagecraft.numpy.indexing import at, take_axis
from stagecraft.numpy.manipulation import ravel, swapaxes
from stagecraft.numpy.ufuncs import check_arraylike
from stagecraft.numpy.util import (ArrayLike, as_array, canonicalize_axis, dtype_of,
                                   ensure_arraylike, ndim_of, promote_dtypes, shape_of,
                                   to_inexact_dtype)
from stagecraft.pjit import jit

__all__ = ["sort", "argsort", "lexsort", "partition", "argpartition", "searchsorted",
           "sort_complex"]


def _sort_axis(a, axis, name):
  check_arraylike(name, a)
  a = as_array(a)
  if axis is None:
    return ravel(a), 0
  if ndim_of(a) == 0:
    raise ValueError(f"{name}: axis {axis} is out of bounds for a 0-d array; pass "
                     f"axis=None to sort the flattened array.")
  return a, canonicalize_axis(axis, ndim_of(a), name)


def _no_kind_order(name, kind, order):
  if kind is not None:
    raise TypeError(f"'kind' argument to {name} is not supported. Use stable=True or "
                    f"stable=False to specify sort stability.")
  if order is not None:
    raise TypeError(f"'order' argument to {name} is not supported.")


@jit(static_argnames=("axis", "kind", "order", "stable", "descending"))
def sort(a: ArrayLike, axis: int | None = -1, *, kind: None = None, order: None = None,
         stable: bool = True, descending: bool = False):
  """A sorted copy of `a` along `axis` (the flattened array when None).

  Jitted with every argument but `a` static, as JAX's (`jit[name=sort]` in a traced
  program).

  Args:
    a: array `T[*s]`.
    axis: the axis, or None to sort the flattened array.
    stable: whether equal elements keep their order (values cannot tell the difference).
    descending: sort from largest to smallest.

  Returns:
    `T[*s]` (`T[prod(s)]` for `axis=None`). NaNs come last (first when descending).

  Raises:
    ValueError: for an out-of-range axis.
    TypeError: for `kind` or `order` (use `stable`; structured dtypes do not exist here),
      or a list or tuple `a`.

  Examples:
    >>> from stagecraft import numpy as jnp
    >>> jnp.sort(jnp.array([3, 1, 2]))
    Array([1, 2, 3], dtype=int32)
  """
  _no_kind_order("sort", kind, order)
  a, axis = _sort_axis(a, axis, "sort")
  out = lax.sort(a, dimension=axis, is_stable=stable)
  return lax.rev(out, (axis,)) if descending else out


@jit(static_argnames=("axis", "kind", "order", "stable", "descending", "dtype"))
def argsort(a: ArrayLike, axis: int | None = -1, *, kind: None = None, order: None = None,
            stable: bool = True, descending: bool = False, dtype: Any = None):
  """The indices that sort `a` along `axis` (the flattened array when None).

  Jitted with every argument but `a` static, as JAX's (`jit[name=argsort]`).

  Args:
    a: array `T[*s]`.
    axis: the axis, or None.
    stable: equal elements keep their original order (also when `descending`).
    descending: largest first.
    dtype: the integer dtype of the indices (default: int32, int64 with x64).

  Returns:
    `int[*s]` indices along `axis` (`int[prod(s)]` for `axis=None`).

  Raises:
    ValueError: for an out-of-range axis.
    TypeError: for `kind` or `order`, or a list or tuple `a`.
  """
  _no_kind_order("argsort", kind, order)
  a, axis = _sort_axis(a, axis, "argsort")
  if dtype is not None:
    idx_dtype = dtypes.check_user_dtype(dtype, "argsort")
  elif (not shape_poly.is_symbolic_dim(shape_of(a)[axis])   # NB: assumed to fit, as JAX
        and shape_of(a)[axis] > np.iinfo(np.int32).max):
    idx_dtype = dtypes.canonicalize_dtype(np.int64)
  else:
    idx_dtype = dtypes.default_int_dtype()
  iota = lax.broadcasted_iota(idx_dtype, shape_of(a), axis)
  if descending and stable:
    # Reverse first so that equal keys keep their order once the result is reversed.
    a, iota = lax.rev(a, (axis,)), lax.rev(iota, (axis,))
  _, idx = lax.sort_key_val(a, iota, dimension=axis, is_stable=stable)
  return lax.rev(idx, (axis,)) if descending else idx


def _unstack(keys):
  """The rows of an array as JAX's iteration over an Array gives them: a `slice` (unit
  strides) and a `squeeze` each."""
  nd = ndim_of(keys)
  rest = shape_of(keys)[1:]
  return [lax.squeeze(lax.slice(keys, (i,) + (0,) * (nd - 1), (i + 1, *rest), (1,) * nd),
                      (0,)) for i in range(shape_of(keys)[0])]


@jit(static_argnames=("axis",))
def lexsort(keys: Sequence[ArrayLike], axis: int = -1):
  """Indices that sort by several keys, the LAST key primary (numpy.lexsort). Jitted, as
  JAX's (`jit[name=lexsort]`, static `axis`): one variadic `sort` of the keys (last first)
  and an iota.

  Args:
    keys: a sequence of arrays of one shape `s` (or an array: its rows are the keys).
    axis: the axis to sort along.

  Returns:
    `int32[*s]` indices (int64 with x64); the scalar 0 for 0-d keys, as JAX.

  Raises:
    TypeError: for an empty sequence of keys, or a key that is not an array or scalar.
    ValueError: if the keys' shapes differ, or for an out-of-range axis.
  """
  key_list = _unstack(keys) if hasattr(keys, "shape") else list(keys)
  check_arraylike("lexsort", *key_list)
  key_list = [as_array(k) for k in key_list]
  if not key_list:
    raise TypeError("need sequence of keys with len > 0 in lexsort")
  if len({shape_of(k) for k in key_list}) > 1:
    raise ValueError("all keys need to be the same shape")
  idx_dtype = dtypes.default_int_dtype()
  if ndim_of(key_list[0]) == 0:
    return lax.full((), 0, idx_dtype)
  axis = canonicalize_axis(axis, ndim_of(key_list[0]), "lexsort")
  if shape_of(key_list[0])[axis] > np.iinfo(np.int32).max:
    idx_dtype = np.dtype(np.int64)
  iota = lax.broadcasted_iota(idx_dtype, shape_of(key_list[0]), axis)
  return lax.sort((*key_list[::-1], iota), dimension=axis, num_keys=len(key_list))[-1]


def _partition_args(name, a, kth, axis):
  check_arraylike(name, a)
  a = as_array(a)
  if dtypes.is_complex(dtype_of(a)):
    raise NotImplementedError(f"jnp.{name} for complex dtype is not implemented.")
  if ndim_of(a) == 0:
    raise ValueError(f"{name}: axis {axis} is out of bounds for a 0-d array.")
  axis = canonicalize_axis(axis, ndim_of(a), name)
  kth = canonicalize_axis(kth, shape_of(a)[axis], name)
  return swapaxes(a, axis, -1), kth, axis


@jit(static_argnames=("kth", "axis"))
def partition(a: ArrayLike, kth: int, axis: int = -1):
  """A copy of `a` with its `kth` smallest element (along `axis`) in position `kth`, smaller
  ones before it and larger ones after. Jitted, as JAX's (`jit[name=partition]`; static
  `kth` and `axis`).

  As JAX's numpy (two `top_k`s): the first `kth + 1` entries are ascending, the rest are
  descending (NumPy leaves both parts in unspecified order). Unsigned integers are shifted
  by one for the negation (`-(a + 1)`), so that 0 stays the smallest.

  Args:
    a: array `T[*s]`, real (bool is refused by the negation, as in JAX).
    kth: static int, negative counting from the end.
    axis: static int.

  Returns:
    Array `T[*s]`.

  Raises:
    TypeError: `a` not an array (a list), or bool `a`.
    ValueError: an out-of-range `kth` or axis.
    NotImplementedError: complex `a`.
  """
  x, kth, axis = _partition_args("partition", a, kth, axis)
  if dtypes.is_unsigned(dtype_of(x)):
    bottom = -lax.top_k(-(x + 1), kth + 1)[0] - 1
  else:
    bottom = -lax.top_k(-x, kth + 1)[0]
  top = lax.top_k(x, shape_of(x)[-1] - kth - 1)[0]
  return swapaxes(lax.concatenate([bottom, top], ndim_of(x) - 1), -1, axis)


def _set_to_zero(ones, idx):
  """`ones.at[idx].set(0)` over the last axis, vmapped over the leading axes (as JAX's
  argpartition: so the printed program holds JAX's batched scatter)."""
  def one_row(o, i):
    return at(o)[i].set(0)
  fn = one_row
  for _ in range(ndim_of(ones) - 1):
    fn = _vmap0(fn)
  return fn(ones, idx)


def _vmap0(fun):
  """`vmap(fun)` over axis 0 of both arguments (this layer has no `vmap`)."""
  def batched(x, i):
    size = shape_of(x)[0]
    (out,), (d,) = batching.batch_flat(lambda x, i: [fun(x, i)], [x, i], [0, 0],
                                       batching.AxisData(None, size))
    return batching.matchaxis(out, d, 0, size)
  return batched


@jit(static_argnames=("kth", "axis"))
def argpartition(a: ArrayLike, kth: int, axis: int = -1):
  """Indices that partition `a` along `axis` around its `kth` smallest element (see
  `partition`). Jitted, as JAX's (`jit[name=argpartition]`).

  As JAX's numpy: the indices of the `kth + 1` smallest (a `top_k` of the negation), then
  those of the rest, found by a `top_k` of a proxy of ones with the first group's positions
  set to 0 (so ties cannot select an index twice).

  Returns:
    int32 indices (`top_k`'s) of a's shape.

  Raises:
    TypeError, ValueError, NotImplementedError: as `partition`.
  """
  x, kth, axis = _partition_args("argpartition", a, kth, axis)
  if dtypes.is_unsigned(dtype_of(x)):
    bottom = lax.top_k(-(x + 1), kth + 1)[1]
  else:
    bottom = lax.top_k(-x, kth + 1)[1]
  proxy = _set_to_zero(lax.full(shape_of(x), 1.0), bottom)
  top = lax.top_k(proxy, shape_of(x)[-1] - kth - 1)[1]
  return swapaxes(lax.concatenate([bottom, top], ndim_of(x) - 1), -1, axis)


def _canonical_float(x):
  """-0.0 -> 0.0 and every NaN -> +NaN (JAX's `_canonicalize_float_for_sort`), so that the
  total-order comparisons treat zeros as equal and put every NaN last."""
  out = lax.select(lax.eq(x, _const_of(x, 0)), lax.full_like(x, 0), x)
  return lax.select(lax.ne(x, x), lax.full_like(out, np.nan), out)


def _sort_keys(x):
  """The keys `lax.sort` compares for `x`: canonicalized floats; (real, imag) of complex."""
  dt = dtype_of(x)
  if dtypes.is_complex(dt):
    return [_canonical_float(lax.real(x)), _canonical_float(lax.imag(x))]
  if dtypes.is_float(dt):
    return [_canonical_float(x)]
  return [x]


def _sort_compare(x, y, or_equal: bool):
  """`x < y` (`x <= y` with `or_equal`) in `lax.sort`'s total order, lexicographic over the
  keys (JAX's `_sort_lt_comparator` / `_sort_le_comparator`)."""
  out = None
  for xk, yk in zip(_sort_keys(x)[::-1], _sort_keys(y)[::-1]):
    if out is None:
      out = (le_to_p if or_equal else lt_to_p).bind(xk, yk)
    else:
      out = lax.bitwise_or(lt_to_p.bind(xk, yk),
                           lax.bitwise_and(eq_to_p.bind(xk, yk), out))
  return out


def _const_of(x, value):
  """`value` as a rank-0 array of x's dtype (a literal in a traced program)."""
  return np.array(value, dtype_of(x))


def _vmap_query(fun, sorted_arr, query):
  """`vmap(fun, in_axes=(None, 0))(sorted_arr, query)` (this layer has no `vmap`)."""
  size = shape_of(query)[0]
  (out,), (d,) = batching.batch_flat(lambda a, q: [fun(a, q)], [sorted_arr, query],
                                     [batching.not_mapped, 0], batching.AxisData(None, size))
  return batching.matchaxis(out, d, 0, size)


@jit(static_argnames=("side", "dtype", "unrolled"))
def _searchsorted_scan_impl(sorted_arr, query, side, dtype, unrolled):
  """A binary search of each query value: `ceil(log2(n + 1))` halvings of `[low, high)`
  in a `lax.scan` (unsigned indices, so `low + (high - low) // 2` cannot overflow), vmapped
  over the query's dimensions."""
  n = shape_of(sorted_arr)[0]
  if n == 0:
    return lax.full(shape_of(query), 0, dtype)
  if ndim_of(query) > 0:
    return _vmap_query(lambda a, q: _searchsorted_scan_impl(a, q, side=side, dtype=dtype,
                                                            unrolled=unrolled),
                       sorted_arr, query)
  udt = np.uint64 if np.dtype(dtype).itemsize == 8 else np.uint32

  def body(carry, _):
    low, high = carry
    mid = low + (high - low) // 2
    go_left = _sort_compare(query, sorted_arr[mid], or_equal=(side == "left"))
    return (lax.select(go_left, low, mid), lax.select(go_left, mid, high)), ()

  levels = int(np.ceil(np.log2(n + 1)))
  (_, high), _ = lax.scan(body, (udt(0), udt(n)), (), length=levels,
                          unroll=levels if unrolled else 1)
  return lax.convert_element_type(high, dtype)


@jit(static_argnames=("side", "dtype"))
def _searchsorted_sort_impl(sorted_arr, query, side, dtype):
  """Ranks by co-sorting: the rank of each query among `sorted_arr` and the queries
  (queries first for 'left', after for 'right'), less its rank among the queries."""
  n, m = shape_of(sorted_arr)[0], int(np.prod(shape_of(query)))
  work = np.int32 if n + m <= np.iinfo(np.int32).max else np.int64

  def rank(x):
    idx = lax.iota(work, shape_of(x)[0])
    return at(lax.full_like(idx, 0))[lax.sort_key_val(x, idx)[1]].set(idx)

  flat = lax.reshape(query, (m,))
  if side == "left":
    index = rank(lax.concatenate([flat, sorted_arr], 0))[:m]
  else:
    index = rank(lax.concatenate([sorted_arr, flat], 0))[n:]
  return lax.convert_element_type(
      lax.reshape(lax.sub(index, rank(lax.reshape(query, (m,)))), shape_of(query)), dtype)


@jit(static_argnames=("side", "dtype"))
def _searchsorted_compare_all_impl(sorted_arr, query, side, dtype):
  """`sum(a < q)` ('left') or `sum(a <= q)` ('right') over `a` for each query: every
  element compared with every query, no loop."""
  size = shape_of(sorted_arr)[0]
  (below,), (d,) = batching.batch_flat(
      lambda a, q: [_sort_compare(a, q, or_equal=(side == "right"))], [sorted_arr, query],
      [0, batching.not_mapped], batching.AxisData(None, size))
  below = batching.matchaxis(below, d, 0, size)
  return lax.reduce_sum(lax.convert_element_type(below, dtype), (0,))


_SEARCHSORTED = {"scan": partial(_searchsorted_scan_impl, unrolled=False),
                 "scan_unrolled": partial(_searchsorted_scan_impl, unrolled=True),
                 "compare_all": _searchsorted_compare_all_impl,
                 "sort": _searchsorted_sort_impl}


@jit(static_argnames=("side", "method"))
def searchsorted(a: ArrayLike, v: ArrayLike, side: str = "left", sorter: ArrayLike | None = None,
                 *, method: str = "scan"):
  """Indices at which inserting `v` into sorted `a` keeps it sorted. Jitted, as JAX's
  (`jit[name=searchsorted]`; static `side`, `method`).

  Args:
    a: sorted 1-D array `T[n]` (in `lax.sort`'s order: NaNs last, -0.0 == 0.0).
    v: query values `U[*q]` (promoted with T).
    side: 'left' (first suitable index) or 'right' (last).
    sorter: optional `int[n]` indices that sort `a`.
    method: 'scan' (a binary search in a `lax.scan`), 'scan_unrolled' (the same scan fully
      unrolled), 'sort' (ranks by co-sorting `a` and `v`) or 'compare_all' (every element
      of `a` compared with every query, summed).

  Returns:
    `int32[*q]` (int64 only for n > 2**31 - 1, x64 or not, as JAX's).

  Raises:
    TypeError: for `a`, `v` or `sorter` not an array or scalar (a list).
    ValueError: for a non-1-D `a`, or an unknown `side` or `method`.

  Algorithm: the methods of JAX's `jnp.searchsorted`, each comparing with `lax.sort`'s
  total order (`lt_to`/`le_to` on canonicalized keys; complex by (real, imag)).
  """
  if sorter is None:
    a, v = ensure_arraylike("searchsorted", a, v)
  else:
    a, v, sorter = ensure_arraylike("searchsorted", a, v, sorter)
  if ndim_of(a) != 1:
    raise ValueError("a should be 1-dimensional")
  a, v = (as_array(x) for x in promote_dtypes(a, v))
  if sorter is not None:
    a = a[sorter]
  dtype = np.dtype(np.int64 if shape_of(a)[0] > np.iinfo(np.int32).max else np.int32)
  if side not in ("left", "right"):
    raise ValueError(f"invalid argument side={side!r}, expected 'left' or 'right'")
  if method not in _SEARCHSORTED:
    raise ValueError(f"invalid argument method={method!r}, expected one of "
                     f"{sorted(_SEARCHSORTED)}")
  return _SEARCHSORTED[method](a, v, side=side, dtype=dtype)


@jit
def sort_complex(a: ArrayLike):
  """`a` sorted along its last axis (complex numbers by real, then imaginary part) and
  converted to a complex dtype (complex128 for float64 and, with x64, integers). Jitted,
  as JAX's (`jit[name=sort_complex]`).

  Raises:
    TypeError: `a` not an array or scalar (a list).
  """
  check_arraylike("sort_complex", a)
  a = lax.sort(as_array(a), dimension=-1)
  dt = dtype_of(a)
  if not dtypes.is_complex(dt):
    ft = to_inexact_dtype(dt)
    a = lax.convert_element_type(a, dtypes.complex128 if ft == dtypes.float64 else
                                 dtypes.complex64)
  return a
