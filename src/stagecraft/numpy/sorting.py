"""Sorting and searching: sort, argsort, lexsort, partition, argpartition, searchsorted,
sort_complex, msort. Built on `lax.sort` (XLA's comparator sort, variadic) and
`lax.top_k`, with JAX's numpy's semantics: NaNs sort last, -0.0 equals 0.0, complex numbers
sort by (real, imag), and indices are int32 (int64 with x64)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from stagecraft import dtypes, lax
from stagecraft.interpreters import batching
from stagecraft.numpy.indexing import at, take_axis
from stagecraft.numpy.manipulation import ravel, swapaxes
from stagecraft.numpy.ufuncs import check_arraylike
from stagecraft.numpy.util import (ArrayLike, as_array, canonicalize_axis, const, dtype_of, ndim_of,
                                   promote_dtypes, shape_of, to_inexact_dtype)
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
    idx_dtype = dtypes.canonicalize_dtype(dtype)
  elif shape_of(a)[axis] > np.iinfo(np.int32).max:
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


def _total_order_keys(x):
  """Real keys that compare as `lax.sort` orders x: NaN canonical and last, -0.0 == 0.0;
  complex numbers become (real, imag)."""
  dt = dtype_of(x)
  if dtypes.is_complex(dt):
    return _total_order_keys(lax.real(x)) + _total_order_keys(lax.imag(x))
  if dtypes.is_float(dt):
    return [lax.add(x, const(x, 0.0))]   # NB: -0.0 + 0.0 == +0.0
  return [x]


def _lt(xs, ys, or_equal: bool):
  """Lexicographic total-order comparison of key lists (NaN greater than all, equal to NaN)."""
  out = None
  for x, y in zip(xs[::-1], ys[::-1]):
    if dtypes.is_float(dtype_of(x)):
      xn, yn = lax.ne(x, x), lax.ne(y, y)
      lt = lax.bitwise_or(lax.lt(x, y), lax.bitwise_and(lax.bitwise_not(xn), yn))
      eq = lax.bitwise_or(lax.eq(x, y), lax.bitwise_and(xn, yn))
    elif dtype_of(x) == dtypes.bool_:
      lt = lax.bitwise_and(lax.bitwise_not(x), y)
      eq = lax.eq(x, y)
    else:
      lt, eq = lax.lt(x, y), lax.eq(x, y)
    if out is None:
      out = lax.bitwise_or(lt, eq) if or_equal else lt
    else:
      out = lax.bitwise_or(lt, lax.bitwise_and(eq, out))
  return out


def searchsorted(a: ArrayLike, v: ArrayLike, side: str = "left", sorter: ArrayLike | None = None,
                 *, method: str = "scan"):
  """Indices at which inserting `v` into sorted `a` keeps it sorted.

  Args:
    a: sorted 1-D array `T[n]` (in `lax.sort`'s order: NaNs last).
    v: query values `U[*q]` (promoted with T).
    side: 'left' (first suitable index) or 'right' (last).
    sorter: optional `int[n]` indices that sort `a`.
    method: accepted for compatibility ('scan', 'scan_unrolled', 'sort', 'compare_all');
      every method computes the same 'compare_all' counting here.

  Returns:
    `int32[*q]` (int64 with x64).

  Raises:
    ValueError: for a non-1-D `a`, or an unknown `side` or `method`.

  Algorithm: `sum(a < v)` ('left') or `sum(a <= v)` ('right') over `a`, with the sort's
  total order; O(n * |v|) work, no loop.
  """
  if side not in ("left", "right"):
    raise ValueError(f"{side!r} is an invalid value for keyword 'side'. Expected one of "
                     f"['left', 'right'].")
  if method not in ("scan", "scan_unrolled", "sort", "compare_all"):
    raise ValueError(f"{method!r} is an invalid value for keyword 'method'. Expected one of "
                     f"['sort', 'scan', 'scan_unrolled', 'compare_all'].")
  a, v = as_array(a), as_array(v)
  if ndim_of(a) != 1:
    raise ValueError("a should be 1-dimensional")
  if sorter is not None:
    a = take_axis(a, as_array(sorter), 0)
  a, v = (as_array(x) for x in promote_dtypes(a, v))
  n = shape_of(a)[0]
  qshape = shape_of(v)
  full = (n, *qshape)
  ak = [lax.broadcast_in_dim(k, full, (0,)) for k in _total_order_keys(a)]
  vk = [lax.broadcast_in_dim(k, full, tuple(range(1, len(full)))) for k in
        _total_order_keys(v)]
  below = _lt(ak, vk, or_equal=(side == "right"))
  idt = dtypes.default_int_dtype()
  return lax.reduce_sum(lax.convert_element_type(below, idt), (0,))


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
