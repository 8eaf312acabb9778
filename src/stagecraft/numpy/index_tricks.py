"""Index helpers: mgrid, ogrid, r_, c_, s_, index_exp, ix_, diag/tril/triu indices,
mask_indices, ravel_multi_index, unravel_index (JAX's numpy semantics; the index arrays are
int32)."""
from __future__ import annotations

import math
import operator
from typing import Any, Sequence

import numpy as np

from stagecraft import core, dtypes, lax
from stagecraft.config import numpy_dtype_promotion
from stagecraft.core import Tracer
from stagecraft.numpy.array_constructors import array, asarray
from stagecraft.numpy.array_creation import arange, meshgrid, ones, zeros_like
from stagecraft.numpy.lax_numpy import astype, linspace
from stagecraft.numpy.manipulation import concatenate, stack, transpose
from stagecraft.numpy.ufuncs import (add, clip, divmod, floor_divide, greater, less, multiply,
                                     remainder, where)
from stagecraft.numpy.util import (ArrayLike, as_array, check_concrete, dtype_of,
                                   ensure_arraylike, ndim_of, promote_dtypes, shape_of)

__all__ = ["mgrid", "ogrid", "r_", "c_", "s_", "index_exp", "ix_", "diag_indices",
           "diag_indices_from", "tril_indices", "triu_indices", "tril_indices_from",
           "triu_indices_from", "mask_indices", "ravel_multi_index", "unravel_index"]

s_ = np.s_
index_exp = np.index_exp


def _grid_1d(s: slice, op_name: str):
  for v, what in ((s.start, "start"), (s.stop, "stop"), (s.step, "step")):
    check_concrete(v, op_name, f"slice {what}", context=f"slice {what} of jnp.{op_name}")
  start = s.start or 0
  step = s.step or 1
  if np.iscomplex(step):
    return linspace(start, s.stop, int(abs(step)))
  return arange(start, s.stop, step)


class _Grid:
  """`mgrid[...]` (dense, stacked) / `ogrid[...]` (open: broadcastable arrays) from slices:
  `start:stop:step`, or `start:stop:nj` for n points with the end included."""

  def __init__(self, sparse: bool, name: str):
    self.sparse, self.name = sparse, name

  def __getitem__(self, key):
    if isinstance(key, slice):
      return _grid_1d(key, self.name)
    # NB: as JAX's, the 1-D grids promote under standard promotion whatever the option
    # (an int and a float grid give float grids under strict promotion too).
    with numpy_dtype_promotion("standard"):
      out = promote_dtypes(*[_grid_1d(k, self.name) for k in key])
    out = [as_array(o) for o in out]
    grids = meshgrid(*out, indexing="ij", sparse=self.sparse)
    if self.sparse:
      return grids
    return stack(grids, 0) if grids else arange(0)


mgrid = _Grid(False, "mgrid")
ogrid = _Grid(True, "ogrid")


class _AxisConcat:
  """numpy's `r_` / `c_`: concatenation of arrays, scalars and slices (`start:stop:step`,
  or `start:stop:nj`) along an axis, with an optional leading 'axis,ndmin,trans1d' string
  directive, or the matrix directive 'r' / 'c' (a 1-D result as a row / column matrix)."""

  def __init__(self, axis: int, ndmin: int, trans1d: int, name: str):
    self.params = (axis, ndmin, trans1d)
    self.name = name

  def __getitem__(self, key):
    key = key if isinstance(key, tuple) else (key,)
    axis, ndmin, trans1d = self.params
    matrix = None   # 'r' / 'c': a 1-D result becomes a row / column matrix (NumPy's, JAX's)
    if key and isinstance(key[0], str):
      directive, key = key[0], key[1:]
      if directive in ("r", "c"):
        matrix = directive
      else:
        try:
          vals = [int(v) for v in directive.split(",")[:3]]
        except ValueError as e:
          raise ValueError(f"could not understand directive {directive!r}") from e
        axis, ndmin, trans1d = (vals + [ndmin, trans1d][len(vals) - 1:] if len(vals) < 3
                                else vals)
    out = []
    for item in key:
      if isinstance(item, slice):
        obj, item_nd = _grid_1d(item, self.name), 0
      elif isinstance(item, str):
        raise ValueError("string directive must be placed at the beginning")
      else:
        obj = as_array(item)
        item_nd = ndim_of(obj)
      obj = array(obj, ndmin=ndmin)
      if trans1d != -1 and ndmin - item_nd > 0:
        order = tuple(range(ndmin))
        shifts = ndmin - abs(ndmin + trans1d + 1) % ndmin
        obj = transpose(obj, order[shifts:] + order[:shifts])
      out.append(obj)
    res = concatenate(out, axis=axis)
    if matrix is not None and ndim_of(res) < 2:
      res = array(res, ndmin=2)
      if matrix == "c":
        res = transpose(res)
    return res


r_ = _AxisConcat(0, 1, -1, "r_")
c_ = _AxisConcat(-1, 2, 0, "c_")


def ix_(*args: ArrayLike):
  """Open-mesh index arrays from 1-D sequences: the k-th of n has shape (1,..,len,..,1), a
  `broadcast_in_dim` of the k-th argument (an empty one gives default-int zeros, as NumPy's
  integer index type).

  Raises:
    TypeError: an argument that is not an array or scalar (a list).
    ValueError: for inputs that are not 1-D.
    NotImplementedError: for bool inputs.
  """
  args = [ensure_arraylike("ix", a) for a in args]
  n = len(args)
  out = []
  for i, a in enumerate(args):
    if ndim_of(a) != 1:
      raise ValueError(f"Arguments to stagecraft.numpy.ix_ must be 1-dimensional, got shape "
                       f"{shape_of(a)}")
    if dtype_of(a) == dtypes.bool_:
      raise NotImplementedError("Boolean arguments to stagecraft.numpy.ix_ are not supported.")
    shape = (1,) * i + (shape_of(a)[0],) + (1,) * (n - i - 1)
    if shape_of(a)[0] == 0:
      out.append(lax.full(shape, np.zeros((), dtypes.default_int_dtype())))
    else:
      out.append(lax.broadcast_in_dim(a, shape, (i,)))
  return tuple(out)


def _int_arrays(*xs):
  return tuple(array(np.asarray(x, np.int32)) for x in xs)


def diag_indices(n: int, ndim: int = 2):
  """`ndim` copies of `arange(n)`: the indices of the main diagonal.

  Raises:
    ValueError: for negative n or ndim.
  """
  n = operator.index(n)
  ndim = operator.index(ndim)
  if n < 0 or ndim < 0:
    raise ValueError(f"n argument to diag_indices must be nonnegative, got {n}" if n < 0 else
                     f"ndim argument to diag_indices must be nonnegative, got {ndim}")
  return (arange(n, dtype=dtypes.int32),) * ndim


def diag_indices_from(arr: ArrayLike):
  """`diag_indices` for an array whose dimensions are all equal.

  Raises:
    ValueError: for fewer than 2 dimensions or unequal ones.
  """
  s = shape_of(as_array(arr))
  if len(s) < 2:
    raise ValueError("input array must be at least 2-d")
  if len(set(s)) != 1:
    raise ValueError("All dimensions of input must be of equal length")
  return diag_indices(s[0], len(s))


def _tri_args(n, k, m) -> tuple[int, int, int | None]:
  """n, k, m as Python ints (JAX's concretization error for a traced one; JAX names
  `jnp.triu_indices` for both functions)."""
  static = lambda x, a: operator.index(check_concrete(  # noqa: E731
      x, "triu_indices", a, context=f"{a} argument of jnp.triu_indices"))
  return static(n, "n"), static(k, "k"), None if m is None else static(m, "m")


def tril_indices(n: int, k: int = 0, m: int | None = None):
  """Row and column indices of the lower triangle (`j <= i + k`) of an `[n, m]` array.

  Raises:
    ConcretizationTypeError: for a traced n, k or m."""
  return _int_arrays(*np.tril_indices(*_tri_args(n, k, m)))


def triu_indices(n: int, k: int = 0, m: int | None = None):
  """Row and column indices of the upper triangle (`j >= i + k`) of an `[n, m]` array.

  Raises:
    ConcretizationTypeError: for a traced n, k or m."""
  return _int_arrays(*np.triu_indices(*_tri_args(n, k, m)))


def tril_indices_from(arr: ArrayLike, k: int = 0):
  """`tril_indices` for the shape of a 2-D array.

  Raises:
    ValueError: for input that is not 2-D."""
  s = shape_of(as_array(arr))
  if len(s) != 2:
    raise ValueError("Only 2-D inputs are accepted")
  return tril_indices(s[0], k, s[1])


def triu_indices_from(arr: ArrayLike, k: int = 0):
  """`triu_indices` for the shape of a 2-D array.

  Raises:
    ValueError: for input that is not 2-D."""
  s = shape_of(as_array(arr))
  if len(s) != 2:
    raise ValueError("Only 2-D inputs are accepted")
  return triu_indices(s[0], k, s[1])


def mask_indices(n: int, mask_func: Any, k: int = 0, *, size: int | None = None):
  """The indices where `mask_func(ones((n, n)), k)` is nonzero (e.g. `mask_func=triu`)."""
  mask = np.asarray(mask_func(ones((n, n), dtypes.int32), k)) != 0
  rows, cols = np.nonzero(mask)
  if size is not None:
    rows, cols = (np.resize(np.pad(v, (0, max(0, size - v.size))), size) for v in (rows, cols))
  return _int_arrays(rows, cols)


def ravel_multi_index(multi_index: Sequence[ArrayLike], dims: Sequence[int],
                      mode: str = "raise", order: str = "C", *, dtype: Any = None):
  """Flat indices of the index tuples `multi_index` into an array of shape `dims`
  (numpy.ravel_multi_index), as JAX's numpy: `sum(index_k * stride_k)` from 0.

  Args:
    multi_index: one integer array per dimension (broadcast together).
    dims: the shape (static ints).
    mode: 'raise' (indices must be in range; checked on concrete inputs only), 'wrap',
      'clip' or 'ignore' (no check).
    order: 'C' (row-major) or 'F' (column-major).
    dtype: the result's integer dtype (default: the promotion of the indices with a Python
      int, so int32 for int32 indices, uint8 for uint8 ones).

  Returns:
    `dtype[broadcast shape of the indices]`.

  Raises:
    ValueError: a wrong number of index arrays; out-of-range indices in 'raise' mode; a
      dtype that is not an integer or too narrow for `prod(dims)`; an unknown mode or
      order.
    TypeError: non-integer indices, or an index that is not an array or scalar (a list).
    ConcretizationTypeError: traced indices with mode 'raise'.
  """
  if len(multi_index) != len(dims):
    raise ValueError(f"parameter multi_index must be a sequence of length {len(dims)}")
  dims = tuple(operator.index(check_concrete(d, "ravel_multi_index", "dims")) for d in dims)
  idx = [ensure_arraylike("ravel_multi_index", i) for i in multi_index]
  # NB: a Python 0 stands for JAX's weakly typed `int`
  dt = (dtypes.result_type(0, *idx) if dtype is None
        else dtypes.check_user_dtype(dtype, "ravel_multi_index"))
  if not dtypes.is_integer(dt):
    raise ValueError(f"dtype={dt!r} is not an integer type.")
  if math.prod(dims) - 1 > np.iinfo(dt).max:
    raise ValueError(f"jnp.ravel_multi_index: dtype={dt!r} not large enough to hold "
                     f"flattened index for dims={dims}. Use the dtype argument to pass a "
                     f"suitable dtype (e.g. dtype=np.min_scalar_type(prod(dims))).")
  for i in idx:
    if mode == "raise" and isinstance(i, Tracer):
      raise core.ConcretizationTypeError(
          "Abstract tracer value encountered where concrete value is expected: the indices "
          "of jnp.ravel_multi_index. The error occurred because ravel_multi_index was "
          "jit-compiled with mode='raise'. Use mode='wrap' or mode='clip' instead.")
    if not dtypes.is_integer(dtype_of(i)):
      raise TypeError("only int indices permitted")
  if mode == "raise":
    if any(((np.asarray(i) < 0) | (np.asarray(i) >= d)).any() for i, d in zip(idx, dims)):
      raise ValueError("invalid entry in coordinates array")
  elif mode == "clip":
    idx = [clip(i, 0, d - 1) for i, d in zip(idx, dims)]
  elif mode == "wrap":
    idx = [remainder(i, d) for i, d in zip(idx, dims)]
  elif mode != "ignore":
    raise ValueError(f"invalid mode={mode!r}. Expected 'raise', 'wrap', 'clip', or 'ignore'.")
  if order == "F":
    strides = np.cumprod((1,) + dims[:-1])
  elif order == "C":
    strides = np.cumprod((1,) + dims[1:][::-1])[::-1]
  else:
    raise ValueError(f"invalid order={order!r}. Expected 'C' or 'F'")
  out = array(0, dtype=dt)
  for i, s in zip(idx, strides):
    out = add(out, multiply(astype(i, dt), int(s)))
  return out


def unravel_index(indices: ArrayLike, shape: Sequence[int]):
  """The index tuple of flat `indices` into `shape` (JAX's `jnp.unravel_index`).

  Args:
    indices: array-like of any numeric dtype (JAX computes in it: float indices give float
      results, bools int32 weak ones).
    shape: a sequence of sizes (or one size).

  Returns:
    One array per dimension of `shape`, each of the dtype of `indices` (after promotion
    with the sizes); indices past the end are clipped to the last position and those below
    `-size` to 0, as JAX's (which, unlike NumPy, never raises for out-of-bounds indices).

  Raises:
    ValueError: if an entry of `shape` is not a scalar.
    TypeError: for a complex or non-array `indices` (JAX's words).
  """
  idx = ensure_arraylike("unravel_index", indices)
  try:
    dims = list(shape)
  except TypeError:
    dims = [shape]
  if any(np.ndim(s) != 0 for s in dims):
    raise ValueError("unravel_index: shape should be a scalar or 1D sequence.")
  out: list[Any] = [0] * len(dims)
  for i in reversed(range(len(dims))):
    idx, out[i] = divmod(idx, dims[i])
  past_end = greater(idx, 0)
  below = (asarray(False) if dtypes.issubdtype(dtype_of(idx), np.unsignedinteger)
           else less(idx, -1))
  return tuple(where(past_end, s - 1, where(below, 0, i)) for s, i in zip(dims, out))
