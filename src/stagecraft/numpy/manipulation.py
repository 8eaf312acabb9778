"""Shape manipulation built from shape primitives and selects, with no arithmetic: reshaping and
transposing, joining and splitting, flipping, tiling and broadcasting, diagonals and triangles.

Manipulation that computes (`roll`, `repeat`, `pad`, `insert`, `delete`, `trace`...) is in
`lax_numpy`, above the ufuncs, reductions and gathers it uses."""
from __future__ import annotations

import builtins
import math
import operator
from typing import Any, Sequence

import numpy as np

from stagecraft import core, dtypes, lax, shape_poly, tree_util
from stagecraft.core import ShapedArray, Tracer
from stagecraft.errors import InconclusiveDimensionOperation
from stagecraft.lax.spmd import reshard, reshard_to_type
from stagecraft.lax import shape as lax_shape
from stagecraft.numpy.array_constructors import asarray
from stagecraft.lax.utils import (CONCATENATE, FORWARD, KEY_TYPES, REV, STACK,
                                   on_keys)
from stagecraft.pjit import jit
from stagecraft.numpy.array_creation import tri, zeros, zeros_like
from stagecraft.numpy.util import (ArrayLike, as_array, asarray_or_scalar,
                                   broadcast_to_shape, canonical_shape, canonicalize_axis,
                                   check_arraylike, check_concrete, const, dtype_of,
                                   ensure_arraylike, index_tuple, ndim_of, promote_dtypes, shape_of,
                                   shape_error, slice_axis)
from stagecraft.runtime.array import Array

__all__ = ["shape", "ndim", "size", "reshape", "ravel", "expand_dims", "squeeze", "atleast_1d",
           "atleast_2d", "atleast_3d", "transpose", "permute_dims", "matrix_transpose", "swapaxes",
           "moveaxis", "rollaxis", "flip", "fliplr", "flipud", "rot90", "concatenate", "concat",
           "stack", "hstack", "vstack", "row_stack", "dstack", "column_stack", "block", "append",
           "split", "array_split", "hsplit", "vsplit", "dsplit", "unstack", "tile", "resize",
           "broadcast_shapes", "broadcast_to", "broadcast_arrays",
           "tril", "triu", "apply_over_axes"]


# ---------------------------------------------------------------------------
# Shapes and reshaping


def shape(a: ArrayLike) -> tuple[int, ...]:
  """The shape of an array-like, as a tuple of ints.

  As JAX's: an object with a `shape` attribute (an Array, a tracer, a `ShapeDtypeStruct`, a
  typed key array) gives that attribute; anything else is read by NumPy's `np.shape`
  (after a DeprecationWarning for what is not an array or a scalar: a list, None, ...).
  """
  if hasattr(a, "shape"):
    return a.shape
  return np.shape(_warned_plain("shape", a))


def _warned_plain(name: str, a: Any) -> Any:
  """`a` for NumPy's shape functions: a DeprecationWarning (JAX's) for a non-array, and an
  object's `__jax_array__()` in place of the object."""
  if not isinstance(a, (str, bytes)):   # NB: scalars for JAX's rule (`np.isscalar`)
    check_arraylike(name, a, emit_warning=True, stacklevel=4)
  m = getattr(a, "__jax_array__", None)
  return m() if m is not None else a


def ndim(a: ArrayLike) -> int:
  """The number of dimensions of an array-like: its `ndim` attribute when it has one, else
  NumPy's `np.ndim` (after JAX's DeprecationWarning for a non-array, as `shape`)."""
  if hasattr(a, "ndim"):
    return a.ndim
  return np.ndim(_warned_plain("ndim", a))


def size(a: ArrayLike, axis: int | Sequence[int] | None = None) -> int:
  """The number of elements (along `axis` when given: an int, or a tuple of ints whose
  dimensions multiply, as JAX's). As JAX's, an argument that is not an array or a scalar (a
  list, a `ShapeDtypeStruct`) gives a DeprecationWarning, then its `size` (or `shape`).

  Raises:
    ValueError: an axis out of range, or repeated (JAX's messages)."""
  if not isinstance(a, (str, bytes)):
    check_arraylike("size", a, emit_warning=True)
  if axis is None and hasattr(a, "size"):
    return a.size
  s = shape(a)
  if axis is None:
    return math.prod(s)
  axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
  canon = []
  for ax in axes:
    ax = operator.index(ax)
    if not -len(s) <= ax < len(s):
      raise ValueError(f"axis {ax} is out of bounds for array of dimension {len(s)}")
    canon.append(ax % len(s))
  if len(set(canon)) != len(canon):
    raise ValueError(f"repeated axis: {tuple(axes)}")
  return math.prod(s[ax] for ax in canon)


def reshape(a: ArrayLike, shape: Any = None, order: str = "C", *, newshape=None,
            copy: bool | None = None, out_sharding: Any = None) -> Array:
  """`a` with a new shape of the same size; one dimension may be -1.

  `order='F'` reads and writes the elements in Fortran (column-major) order: the reshape
  of the reversed axes, reversed back. `copy` is accepted for NumPy compatibility (arrays
  are immutable). `out_sharding` (a NamedSharding, or a PartitionSpec under `set_mesh`) is
  the result's sharding, its type on a mesh of Explicit axes: for reshapes whose sharding
  the rule cannot infer (split dimensions regrouped), as JAX's `out_sharding=`.

  Raises:
    TypeError: if the sizes differ (naming both shapes).
    NotImplementedError: for `order='A'`.
    ValueError: for an `order` other than 'C', 'F' or 'A'.
  """
  if type(a) in KEY_TYPES:
    return on_keys(reshape, a, shape, order, newshape=newshape, copy=copy,
                       out_sharding=out_sharding, reuse=FORWARD)
  if shape is None:
    shape = newshape
  if out_sharding is not None:
    if isinstance(a, (Array, Tracer)):
      a = reshard_to_type(a, None, getattr(a.aval, "_sharding", None))
    return reshard(reshape(a, shape, order), out_sharding)
  if order == "A":
    raise NotImplementedError("np.reshape order=A is not implemented.")
  if order not in ("C", "F"):
    raise ValueError(f"Unexpected value for 'order' argument: {order}.")
  a = asarray(a) if not isinstance(a, (Array, Tracer)) else a
  if isinstance(shape, (Array, Tracer)) and shape.ndim == 0:
    shape = [shape]   # JAX's: a 0-d array is one dimension (and must be concrete)
  if order == "F":
    if isinstance(shape, (int, np.integer)):
      shape = (int(shape),)
    rev = tuple(shape)[::-1]
    out = reshape(transpose(a), rev)
    return transpose(out)
  given = shape   # NB: JAX's messages write the shape as it was given (`7`, not `(7,)`)
  if isinstance(shape, (int, np.integer)):
    shape = (int(shape),)
  old = shape_of(a)
  if not shape_poly.is_constant_shape(shape) or not shape_poly.is_constant_shape(old):
    return _symbolic_reshape(a, shape, old)
  try:
    shape = tuple(operator.index(d) for d in shape)
  except TypeError as e:
    raise shape_error(shape) from e
  if builtins.sum(1 for d in shape if d == -1) > 1:
    raise TypeError(f"can only specify one unknown axis size with a `-1` value, got {given}")
  if -1 in shape:
    known = math.prod(d for d in shape if d != -1)
    total = math.prod(old)
    if total % known:   # NB: as JAX's, a zero-size known part divides by zero
      raise TypeError(f"cannot reshape array of shape {old} (size {total}) into shape "
                      f"{given} because the product of specified axis sizes ({known}) does "
                      f"not evenly divide {total}")
    shape = tuple(total // known if d == -1 else d for d in shape)
  if math.prod(shape) != math.prod(old):
    raise TypeError(f"cannot reshape array of shape {old} (size {math.prod(old)}) into shape "
                    f"{given} (size {math.prod(shape)})")
  if shape == old:
    return a
  return lax.reshape(a, shape)


def _symbolic_reshape(a, shape, old) -> Array:
  """`reshape` where a dimension is symbolic (export): -1 is solved by division."""
  shape = tuple(d if shape_poly.is_symbolic_dim(d) else operator.index(d) for d in shape)
  if builtins.sum(1 for d in shape if shape_poly.is_constant_dim(d) and d == -1) > 1:
    raise ValueError(f"reshape: can only specify one unknown dimension (-1), got {shape}.")
  total = math.prod(old)
  if builtins.any(shape_poly.is_constant_dim(d) and d == -1 for d in shape):
    known = math.prod(d for d in shape if not (shape_poly.is_constant_dim(d) and d == -1))
    shape = tuple(total // known if shape_poly.is_constant_dim(d) and d == -1 else d
                  for d in shape)
  if math.prod(shape) != total:
    raise TypeError(f"cannot reshape array of shape {old} (size {total}) into shape "
                    f"{shape} (size {math.prod(shape)}).")
  if shape == old:
    return a
  return lax.reshape(a, shape)


def ravel(a: ArrayLike, order: str = "C", *, out_sharding: Any = None) -> Array:
  """The array flattened to 1-D in C (row-major) or F (column-major) order:
  `T[*s] -> T[prod(s)]`, laid out by `out_sharding` when given (as `reshape`'s).

  Raises:
    NotImplementedError: for `order` 'A' or 'K'.
  """
  if type(a) in KEY_TYPES:
    return on_keys(ravel, a, order, reuse=FORWARD)
  if order == "K":
    raise NotImplementedError("Ravel not implemented for order='K'.")
  if out_sharding is not None:
    return reshape(a, (-1,), order, out_sharding=out_sharding)
  return reshape(a, (-1,), order)


def expand_dims(a: ArrayLike, axis: int | Sequence[int]) -> Array:
  """Inserts size-1 dimensions at `axis` (positions in the result)."""
  if type(a) in KEY_TYPES:
    return on_keys(expand_dims, a, axis, reuse=FORWARD)
  a = asarray(a)
  axis = index_tuple(axis)
  out_nd = ndim_of(a) + len(axis)
  axes = sorted(canonicalize_axis(x, out_nd, "expand_dims") for x in axis)
  return lax.expand_dims(a, tuple(axes))


def squeeze(a: ArrayLike, axis: int | Sequence[int] | None = None) -> Array:
  """Removes size-1 dimensions (`axis`, or all of them).

  Raises:
    ValueError: if a given axis does not have size 1.
  """
  if type(a) in KEY_TYPES:
    return on_keys(squeeze, a, axis, reuse=FORWARD)
  a = asarray(a)
  s = shape_of(a)
  if axis is None:
    dims = tuple(i for i, d in enumerate(s) if d == 1)
  else:
    axis = index_tuple(axis)
    dims = tuple(sorted(canonicalize_axis(x, len(s), "squeeze") for x in axis))
    for d in dims:
      if s[d] != 1:
        raise ValueError(f"cannot select an axis to squeeze out which has size not equal to "
                         f"one: axis {d} of shape {s}.")
  if not dims:
    return a
  return lax.squeeze(a, dims)


def _ndmin(a, n: int):
  """`a` with leading size-1 dimensions added up to rank `n` (one `broadcast_in_dim`)."""
  a = as_array(a)
  return lax.expand_dims(a, tuple(range(n - ndim_of(a)))) if ndim_of(a) < n else a


@jit
def atleast_1d(*arys):
  """Each input as an Array with at least one dimension (`[] -> [1]`). Jitted, as JAX's
  (`jit[name=atleast_1d]`).

  Returns:
    One Array for one input, else a list.

  Raises:
    TypeError: for an input that is not an array or scalar (a list).
  """
  check_arraylike("atleast_1d", *arys)
  out = [_ndmin(a, 1) for a in arys]
  return out[0] if len(out) == 1 else out


@jit
def atleast_2d(*arys):
  """Each input with at least 2 dimensions, new ones in front (`[n] -> [1, n]`). Jitted, as
  JAX's (`jit[name=atleast_2d]`).

  Returns:
    One Array for one input, else a list.

  Raises:
    TypeError: for an input that is not an array or scalar (a list).
  """
  check_arraylike("atleast_2d", *arys)
  out = [_ndmin(a, 2) for a in arys]
  return out[0] if len(out) == 1 else out


@jit
def atleast_3d(*arys):
  """Each input with at least 3 dimensions: `[] -> [1, 1, 1]`, `[n] -> [1, n, 1]`,
  `[m, n] -> [m, n, 1]`. Jitted, as JAX's (`jit[name=atleast_3d]`).

  Returns:
    One Array for one input, else a list.

  Raises:
    TypeError: for an input that is not an array or scalar (a list).
  """
  check_arraylike("atleast_3d", *arys)
  new_dims = {0: (0, 1, 2), 1: (0, 2), 2: (2,)}
  out = []
  for a in arys:
    a = as_array(a)
    if ndim_of(a) in new_dims:
      a = lax.expand_dims(a, new_dims[ndim_of(a)])
    out.append(a)
  return out[0] if len(out) == 1 else out


# ---------------------------------------------------------------------------
# Transposing and flipping


def transpose(a: ArrayLike, axes: Sequence[int] | None = None) -> Array:
  """Permutes dimensions: `T[s0..sn] -> T[s[axes[0]]..s[axes[n]]]` (reversed when `axes`
  is None).

  Raises:
    ValueError: for an out-of-range axis.
    TypeError: if `axes` is not a permutation of the dimensions.
  """
  if type(a) in KEY_TYPES:
    return on_keys(transpose, a, axes)
  a = asarray(a)
  nd = ndim_of(a)
  axes = tuple(range(nd))[::-1] if axes is None else tuple(
      canonicalize_axis(x, nd, "transpose") for x in axes)
  if sorted(axes) != list(range(nd)):
    raise TypeError(f"transpose permutation isn't a permutation of operand dimensions, got "
                    f"permutation {axes} for operand shape {shape_of(a)}.")
  if axes == tuple(range(nd)):
    return a
  return lax.transpose(a, axes)


def permute_dims(a: ArrayLike, /, axes: Sequence[int]) -> Array:
  """Array API name of `transpose(a, axes)`."""
  return transpose(a, axes)


def matrix_transpose(x: ArrayLike, /) -> Array:
  """Swaps the last two axes: `T[..., m, n] -> T[..., n, m]`.

  Raises:
    ValueError: for fewer than 2 dimensions."""
  x = asarray(x)
  nd = ndim_of(x)
  if nd < 2:
    raise ValueError(f"matrix_transpose needs at least 2 dimensions, got {nd}.")
  return transpose(x, (*range(nd - 2), nd - 1, nd - 2))


def swapaxes(a: ArrayLike, axis1: int, axis2: int) -> Array:
  """Interchanges two axes.

  Raises:
    ValueError: for an out-of-range axis."""
  if type(a) in KEY_TYPES:
    return on_keys(swapaxes, a, axis1, axis2)
  a = asarray(a)
  nd = ndim_of(a)
  perm = list(range(nd))
  i, j = canonicalize_axis(axis1, nd, "swapaxes"), canonicalize_axis(axis2, nd, "swapaxes")
  perm[i], perm[j] = perm[j], perm[i]
  return transpose(a, perm)


def moveaxis(a: ArrayLike, source: int | Sequence[int], destination: int | Sequence[int]) -> Array:
  """Moves axes `source` to positions `destination`, keeping the order of the others.

  Raises:
    ValueError: for out-of-range axes or source/destination of different lengths."""
  if type(a) in KEY_TYPES:
    return on_keys(moveaxis, a, source, destination)
  a = asarray(a)
  nd = ndim_of(a)
  src = (source,) if isinstance(source, int) else tuple(source)
  dst = (destination,) if isinstance(destination, int) else tuple(destination)
  if len(src) != len(dst):
    raise ValueError("moveaxis: source and destination must have the same number of axes, "
                     f"got {src} and {dst}.")
  src = [canonicalize_axis(s, nd, "moveaxis") for s in src]
  dst = [canonicalize_axis(d, nd, "moveaxis") for d in dst]
  order = [i for i in range(nd) if i not in src]
  for d, s in sorted(zip(dst, src)):
    order.insert(d, s)
  return transpose(a, order)


def rollaxis(a: ArrayLike, axis: int, start: int = 0) -> Array:
  """Moves `axis` to before position `start` (NumPy's older spelling of moveaxis)."""
  a = as_array(a)
  nd = ndim_of(a)
  axis = canonicalize_axis(axis, nd, "rollaxis")
  if not -nd <= start <= nd:
    raise ValueError(f"rollaxis: start {start} is out of range for dimension {nd}.")
  start = start + nd if start < 0 else start   # NumPy's: a negative start counts from ndim
  if axis < start:
    start -= 1
  return moveaxis(a, axis, start)


def _static_axes(axis, name: str):
  """`axis` as a hashable static argument: None, an int or a tuple of ints (JAX's
  `_ensure_optional_axes`).

  Raises:
    ConcretizationTypeError: a traced axis.
    TypeError: a non-integer axis.
  """
  if axis is None:
    return None
  check_concrete(axis, name, "axis")
  try:
    return operator.index(axis)
  except TypeError:
    return tuple(operator.index(i) for i in axis)


def flip(m: ArrayLike, axis: int | Sequence[int] | None = None) -> Array:
  """Reverses the order of elements along `axis` (all axes when None): one `rev`, jitted as
  JAX's (`jit[name=_flip]`, static `axis`).

  Args:
    m: array `T[*s]`.
    axis: an int, a sequence of ints or None (negative allowed).

  Returns:
    `T[*s]`.

  Raises:
    TypeError: `m` not an array or scalar (a list).
    ValueError: an out-of-range axis.
  """
  if type(m) in KEY_TYPES:
    return on_keys(flip, m, axis, reuse=REV)
  arr = ensure_arraylike("flip", m)
  return _flip(arr, _static_axes(axis, "flip"))


@jit(static_argnames=("axis",))
def _flip(m, axis=None):
  """The body of `flip` (jitted under this name, as JAX's): `rev` over the canonical axes,
  in the order given."""
  if axis is None:
    return lax.rev(m, tuple(range(ndim_of(m))))
  axes = (axis,) if isinstance(axis, int) else axis
  return lax.rev(m, tuple(canonicalize_axis(a, ndim_of(m), "flip") for a in axes))


def fliplr(m: ArrayLike) -> Array:
  """Reverses axis 1 (left/right), as `flip(m, 1)`. Raises ValueError for fewer than 2
  dimensions."""
  m = ensure_arraylike("fliplr", m)
  if ndim_of(m) < 2:
    raise ValueError(f"fliplr requires an array of at least 2 dimensions, got {shape_of(m)}.")
  return _flip(m, 1)


def flipud(m: ArrayLike) -> Array:
  """Reverses axis 0 (up/down), as `flip(m, 0)`. Raises ValueError for 0-d input."""
  m = ensure_arraylike("flipud", m)
  if ndim_of(m) < 1:
    raise ValueError("flipud requires an array of at least 1 dimension, got a scalar.")
  return _flip(m, 0)


@jit(static_argnames=("k", "axes"))
def rot90(m: ArrayLike, k: int = 1, axes: tuple[int, int] = (0, 1)) -> Array:
  """Rotates by 90 degrees `k` times in the plane of `axes` (from the first axis towards
  the second), as numpy.rot90; jitted as JAX's (`jit[name=rot90]`, static `k` and `axes`):
  a flip of the second axis and a transpose (k = 1), two flips (k = 2), or a transpose and
  a flip (k = 3).

  Raises:
    ValueError: for fewer than 2 dimensions or equal axes.
    TypeError: `m` not an array or scalar (a list).
  """
  m = ensure_arraylike("rot90", m)
  nd = ndim_of(m)
  if nd < 2:
    raise ValueError(f"rot90 requires its first argument to have ndim at least two, but got "
                     f"first argument of shape {shape_of(m)}, which has ndim {nd}")
  ax1, ax2 = (canonicalize_axis(a, nd, "rot90") for a in axes)
  if ax1 == ax2:
    raise ValueError("Axes must be different")
  k = operator.index(k) % 4
  if k == 0:
    return m
  if k == 2:
    return flip(flip(m, ax1), ax2)
  perm = list(range(nd))
  perm[ax1], perm[ax2] = perm[ax2], perm[ax1]
  return transpose(flip(m, ax2), perm) if k == 1 else flip(transpose(m, perm), ax2)


# ---------------------------------------------------------------------------
# Joining


def _concatenate_array(arr: ArrayLike, axis: int | None, dtype: Any = None) -> Array:
  """The concatenation of the slices `arr[0], arr[1], ...` of one array, without
  unstacking it: one reshape that moves the leading axis next to `axis` (JAX's fast path
  for an array argument of `concatenate`)."""
  arr = asarray(arr, dtype=dtype)
  shape = shape_of(arr)
  if len(shape) == 0 or shape[0] == 0:
    raise ValueError("Need at least one array to concatenate.")
  if axis is None:
    return lax.reshape(arr, (math.prod(shape),))
  if len(shape) == 1:
    raise ValueError("Zero-dimensional arrays cannot be concatenated.")
  axis = canonicalize_axis(axis, len(shape) - 1, "concatenate")
  new_shape = shape[1:axis + 1] + (shape[0] * shape[axis + 1],) + shape[axis + 2:]
  dimensions = (*range(1, axis + 1), 0, *range(axis + 1, len(shape)))
  return lax.reshape(arr, new_shape,
                     None if dimensions == tuple(range(len(shape))) else dimensions)


def concatenate(arrays: Sequence[ArrayLike], axis: int | None = 0, dtype: Any = None) -> Array:
  """Joins arrays along an existing axis (`axis=None` flattens first), promoting dtypes.

  An array argument (rather than a sequence) stands for the sequence of its slices along
  axis 0, joined by one reshape, as in JAX.

  Raises:
    ValueError: for an empty list, 0-d inputs or mismatched shapes off the axis.
  """
  if isinstance(arrays, (list, tuple)) and not KEY_TYPES.isdisjoint(map(type, arrays)):
    return on_keys(concatenate, arrays, axis, dtype, same=arrays,
                   reuse=CONCATENATE if len(arrays) > 1 else FORWARD)
  if isinstance(arrays, (np.ndarray, Array, Tracer)):
    return _concatenate_array(arrays, axis, dtype)
  if len(arrays) == 0:
    raise ValueError("Need at least one array to concatenate.")
  arrays = [asarray(a) for a in arrays]
  if axis is None:
    arrays = [ravel(a) for a in arrays]
    axis = 0
  if any(ndim_of(a) == 0 for a in arrays):
    raise ValueError("Zero-dimensional arrays cannot be concatenated.")
  arrays = promote_dtypes(*arrays)
  if dtype is not None:
    arrays = [lax.convert_element_type(a, dtypes.canonicalize_dtype(dtype)) for a in arrays]
  axis = canonicalize_axis(axis, ndim_of(arrays[0]), "concatenate")
  if len(arrays) == 1:
    return arrays[0]
  return lax.concatenate(arrays, axis)


concat = concatenate


def stack(arrays: Sequence[ArrayLike], axis: int = 0, out: None = None,
          dtype: Any = None) -> Array:
  """Joins arrays of one shape along a new axis (the `stack` primitive, as JAX's).

  Args:
    arrays: non-empty sequence of arrays `T_k[*s]` (or scalars) of one shape, promoted to
      their common dtype T; an array `T[n, *s]` stands for the sequence of its slices.
    axis: position of the new axis in the result, in `[-(len(s) + 1), len(s)]`.
    out: unsupported (must be None), as in JAX.
    dtype: the result dtype, to which every array is converted (instead of promotion).

  Returns:
    `T[*s[:axis], n, *s[axis:]]` for `n` arrays, weakly typed only when every array is.

  Raises:
    ValueError: for an empty sequence, differing shapes or an out-of-range axis.
    TypeError: for an element that is not an array or scalar (a nested list).
    NotImplementedError: if `out` is given.
  """
  if isinstance(arrays, (list, tuple)) and not KEY_TYPES.isdisjoint(map(type, arrays)):
    return on_keys(stack, arrays, axis, out, dtype, same=arrays, reuse=STACK)
  if not len(arrays):
    raise ValueError("Need at least one array to stack.")
  if out is not None:
    raise NotImplementedError("The 'out' argument to jnp.stack is not supported.")
  if isinstance(arrays, (np.ndarray, Array, Tracer)):
    axis = canonicalize_axis(axis, ndim_of(arrays), "stack")
    return concatenate(expand_dims(arrays, axis + 1), axis=axis, dtype=dtype)
  arrays = list(arrays)
  check_arraylike("stack", *arrays)
  if dtype is not None:
    arrays = [asarray(a, dtype=dtype) for a in arrays]
  else:
    arrays = promote_dtypes(*arrays)
  return lax.stack(arrays, axis)


def _stack_check(name, tup):
  if isinstance(tup, (Array, Tracer, np.ndarray)):
    if isinstance(tup, np.ndarray):
      return list(tup)
    return [tup[i] for i in range(shape_of(tup)[0])]
  if len(tup) == 0:
    raise ValueError(f"{name}: need at least one array to concatenate.")
  return list(tup)


def hstack(tup: Sequence[ArrayLike], dtype: Any = None) -> Array:
  """Concatenates along axis 1 (axis 0 for 1-D inputs)."""
  arrs = [atleast_1d(as_array(a)) for a in _stack_check("hstack", tup)]
  return concatenate(arrs, 0 if ndim_of(arrs[0]) == 1 else 1, dtype=dtype)


def vstack(tup: Sequence[ArrayLike], dtype: Any = None) -> Array:
  """Concatenates along axis 0 after `atleast_2d`."""
  arrs = [atleast_2d(as_array(a)) for a in _stack_check("vstack", tup)]
  return concatenate(arrs, 0, dtype=dtype)


row_stack = vstack


def dstack(tup: Sequence[ArrayLike], dtype: Any = None) -> Array:
  """Concatenates along axis 2 after `atleast_3d`."""
  arrs = [atleast_3d(as_array(a)) for a in _stack_check("dstack", tup)]
  return concatenate(arrs, 2, dtype=dtype)


def column_stack(tup: Sequence[ArrayLike]) -> Array:
  """Stacks 1-D arrays as columns (`[n]` becomes `[n, 1]`), concatenating along axis 1."""
  arrs = []
  for a in _stack_check("column_stack", tup):
    a = as_array(a)
    arrs.append(reshape(a, (-1, 1)) if ndim_of(a) < 2 else a)
  return concatenate(arrs, 1)


def block(arrays: Any) -> Array:
  """An array assembled from nested lists of blocks (numpy.block): the innermost lists
  join along the last axis, the outer ones along earlier axes.

  Raises:
    ValueError: for empty lists or inconsistent nesting depths.
  """
  def depth(x):
    if isinstance(x, list):
      if not x:
        raise ValueError("Lists cannot be empty")
      ds = {depth(v) for v in x}
      if len(ds) != 1:
        raise ValueError("List depths are mismatched")
      return 1 + ds.pop()
    return 0

  d = depth(arrays)
  if d == 0:
    return as_array(arrays)
  leaves = []

  def collect(x):
    if isinstance(x, list):
      for v in x:
        collect(v)
    else:
      leaves.append(as_array(x))

  collect(arrays)
  nd = builtins.max(d, *(ndim_of(v) for v in leaves))

  def build(x, level):
    if not isinstance(x, list):
      x = as_array(x)
      return reshape(x, (1,) * (nd - ndim_of(x)) + shape_of(x))
    return concatenate([build(v, level + 1) for v in x], axis=nd - d + level)

  return build(arrays, 0)


@jit(static_argnames=("axis",))
def append(arr: ArrayLike, values: ArrayLike, axis: int | None = None) -> Array:
  """`values` appended to `arr` along `axis` (both flattened when None), in their promoted
  dtype; jitted as JAX's (`axis` static). Raises ValueError for shapes that do not
  concatenate."""
  if axis is None:
    return concatenate([ravel(arr), ravel(values)], 0)
  return concatenate([arr, values], axis)


# ---------------------------------------------------------------------------
# Splitting


def _split(name: str, ary, indices_or_sections, axis: int) -> list[Array]:
  """The pieces as one `split` equation (JAX's `_split`: `lax.split` with the sizes as
  `np.int64`, which its jaxpr prints); split points out of order, which JAX rejects, give
  NumPy's (possibly overlapping) pieces, as static slices."""
  ary = as_array(ary)
  axis = canonicalize_axis(axis, ndim_of(ary), name)
  size = shape_of(ary)[axis]
  if isinstance(indices_or_sections, (tuple, list)) or (
      isinstance(indices_or_sections, (np.ndarray, Array)) and np.ndim(indices_or_sections)):
    # NB: as JAX's, the points one by one (a traced array's first element is what fails)
    points = (list(indices_or_sections)
              if isinstance(indices_or_sections, (tuple, list, Tracer))
              else np.asarray(indices_or_sections).tolist())
    bounds = [0] + [operator.index(check_concrete(
        i, name, "indices_or_sections", context=f"in jax.numpy.{name} argument 1"))
        for i in points] + [size]
    bounds = [builtins.min(builtins.max(b if b >= 0 else b + size, 0), size) for b in bounds]
    if any(lo > hi for lo, hi in zip(bounds, bounds[1:])):
      return [slice_axis(ary, bounds[i], builtins.max(bounds[i], bounds[i + 1]), axis)
              for i in range(len(bounds) - 1)]
    sizes = [hi - lo for lo, hi in zip(bounds, bounds[1:])]
  else:
    # NB: int(), as JAX's (a float count of sections is truncated)
    sections = int(check_concrete(indices_or_sections, name, "indices_or_sections",
                                  context=f"in jax.numpy.{name} argument 1"))
    if sections <= 0:
      raise ValueError(f"{name}: number of sections must be larger than 0, got {sections}.")
    part, r = builtins.divmod(size, sections)
    if r and name != "array_split":
      raise ValueError(f"array split does not result in an equal division: rest is {r}")
    sizes = [part + 1] * r + [part] * (sections - r)
  return list(lax.split(ary, [np.int64(n) for n in sizes], axis=axis))


def split(ary: ArrayLike, indices_or_sections: int | Sequence[int], axis: int = 0
          ) -> list[Array]:
  """Splits into equal sections (an int) or at the given indices along `axis`.

  Raises:
    ValueError: if an int number of sections does not divide the axis.
  """
  return _split("split", ary, indices_or_sections, axis)


def array_split(ary: ArrayLike, indices_or_sections: int | Sequence[int], axis: int = 0
                ) -> list[Array]:
  """Like `split`, but the sections may differ in size by one (the first ones larger)."""
  return _split("array_split", ary, indices_or_sections, axis)


def hsplit(ary: ArrayLike, indices_or_sections) -> list[Array]:
  """`split` along axis 1 (axis 0 for 1-D input)."""
  ary = as_array(ary)
  return _split("hsplit", ary, indices_or_sections, 1 if ndim_of(ary) > 1 else 0)


def vsplit(ary: ArrayLike, indices_or_sections) -> list[Array]:
  """`split` along axis 0 (1-D input too, as JAX's; NumPy's needs 2 dimensions)."""
  return _split("vsplit", as_array(ary), indices_or_sections, 0)


def dsplit(ary: ArrayLike, indices_or_sections) -> list[Array]:
  """`split` along axis 2. Raises ValueError for fewer than 3 dimensions."""
  ary = as_array(ary)
  if ndim_of(ary) < 3:
    raise ValueError("dsplit only works on arrays of 3 or more dimensions")
  return _split("dsplit", ary, indices_or_sections, 2)


def unstack(x: ArrayLike, /, *, axis: int = 0) -> tuple[Array, ...]:
  """The slices of `x` along `axis`, as a tuple (the `unstack` primitive, as JAX's).

  Args:
    x: array `T[*s]` of rank >= 1.
    axis: the axis to unstack, in `[-len(s), len(s))`.

  Returns:
    A tuple of `s[axis]` arrays `T[*s without axis]`.

  Raises:
    ValueError: for a scalar `x` or an out-of-range axis.
  """
  x = as_array(x)
  return lax.unstack(x, axis=canonicalize_axis(axis, ndim_of(x), "unstack"))


# ---------------------------------------------------------------------------
# Tiling and broadcasting


def tile(A: ArrayLike, reps: int | Sequence[int]) -> Array:
  """`A` repeated `reps` times along each axis, as `numpy.tile`: reps and A's shape are
  left-padded with 1s to a common length (JAX's `lax.tile` primitive).

  Args:
    A: array or scalar `T[*s]`.
    reps: an int or a sequence of ints (or symbolic dimensions).

  Returns:
    Array of shape `s * reps` elementwise (after the padding), A's dtype.

  Raises:
    TypeError: for `A` not an array or scalar, or a non-integer repeat.
  """
  if type(A) in KEY_TYPES:
    return on_keys(tile, A, reps)
  A = ensure_arraylike("tile", A)
  try:
    reps = tuple(iter(reps))
  except TypeError:
    reps = (reps,)
  reps = tuple(r if shape_poly.is_symbolic_dim(r) else operator.index(r) for r in reps)
  nd = ndim_of(A)
  reps = (1,) * (nd - len(reps)) + reps
  if len(reps) > nd:
    A = lax.expand_dims(A, tuple(range(len(reps) - nd)))
  return lax.tile(A, reps)


@jit(static_argnames=("new_shape",))
def resize(a: ArrayLike, new_shape: int | Sequence[int]) -> Array:
  """`a` flattened, repeated cyclically to fill `new_shape` (zeros when `a` is empty);
  jitted as JAX's (`new_shape` static: an int or a tuple).

  Raises:
    TypeError: for `a` not an array or scalar, or a non-integer shape.
    ValueError: for negative dimensions.
  """
  check_arraylike("resize", a)
  shape = (new_shape,) if isinstance(new_shape, (int, np.integer)) else tuple(new_shape)
  if builtins.any(d < 0 for d in shape):
    raise ValueError("all elements of `new_shape` must be non-negative")
  shape = canonical_shape(shape, "new_shape")
  arr = ravel(a)
  size = math.prod(shape)
  if shape_of(arr)[0] == 0 or size == 0:
    return zeros(shape, dtype_of(arr))
  tiled = tile(arr, -(-size // shape_of(arr)[0]))
  return reshape(tiled[:size] if shape_of(tiled)[0] > size else tiled, shape)


def _symbolic_broadcast_shapes(shapes) -> tuple:
  """NumPy broadcasting of shapes holding symbolic dimensions: per dimension, equal sizes or
  size 1."""
  shapes = [tuple(s) if isinstance(s, (tuple, list)) else (s,) for s in shapes]
  rank = builtins.max(len(s) for s in shapes)
  out = []
  for i in range(rank):
    ds = [s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0]
    sizes = []
    for d in ds:
      if not (shape_poly.is_constant_dim(d) and d == 1) and not builtins.any(
          d == e for e in sizes):
        sizes.append(d)
    if len(sizes) > 1:
      raise ValueError(f"Incompatible shapes for broadcasting: shapes={list(shapes)}")
    out.append(sizes[0] if sizes else 1)
  return tuple(out)


def broadcast_shapes(*shapes) -> tuple[int, ...]:
  """NumPy broadcasting of shapes. Raises ValueError naming the shapes."""
  if any(shape_poly.is_symbolic_dim(d) for s in shapes
         for d in (s if isinstance(s, (tuple, list)) else (s,))):   # export
    return _symbolic_broadcast_shapes(shapes)
  shapes = [s if isinstance(s, (tuple, list)) else (s,) for s in shapes]   # (as JAX's)
  try:
    return tuple(np.broadcast_shapes(*[lax_shape.check_broadcast_shape(s) for s in shapes]))
  except ValueError:
    # NB: JAX's words (its lax.broadcast_shapes): the shapes as a list of tuples
    raise ValueError("Incompatible shapes for broadcasting: shapes="
                     f"{[tuple(s) if isinstance(s, (tuple, list)) else (s,) for s in shapes]}"
                     ) from None


def broadcast_to(array: ArrayLike, shape: Sequence[int], *, out_sharding: Any = None) -> Array:
  """Broadcasts to `shape` under NumPy's rules, laid out by `out_sharding` when given (a
  NamedSharding, or a PartitionSpec under `set_mesh`; the result's type on a mesh of
  Explicit axes). Raises ValueError if incompatible."""
  if type(array) in KEY_TYPES and out_sharding is None:   # typed PRNG keys: broadcast them
    shape = canonical_shape(shape)
    src = tuple(array.shape)
    if len(src) > len(shape) or any(a not in (1, b) for a, b in
                                    zip(src[::-1], shape[::-1])):
      raise ValueError(f"Incompatible types for broadcasting: input type="
                       f"{array.dtype}[{','.join(map(str, src))}] and requested type="
                       f"{array.dtype}[{','.join(map(str, shape))}]")
    return on_keys(broadcast_to_shape, array, shape, reuse=FORWARD)
  array = ensure_arraylike("broadcast_to", array)
  shape = canonical_shape(shape)
  _check_broadcast_to(array, shape)
  out = broadcast_to_shape(array, shape)
  return out if out_sharding is None else reshard(out, out_sharding)


def _check_broadcast_to(array, shape) -> None:
  """JAX's errors of `broadcast_to` (its `lax.broadcast_to`): a target of lower rank, or a
  dimension neither 1 nor the target's."""
  aval = core.get_aval(array)
  src = tuple(aval.shape)
  if src == tuple(shape):
    return
  if len(shape) < len(src):
    raise ValueError(f"Cannot broadcast to shape with fewer dimensions: arr_shape={src} "
                     f"shape={tuple(shape)}")
  tail = tuple(shape)[len(shape) - len(src):]
  if any(not shape_poly.is_symbolic_dim(a) and not shape_poly.is_symbolic_dim(b)
         and a != 1 and a != b for a, b in zip(src, tail)):
    want = ShapedArray(tuple(shape), aval.dtype)
    raise ValueError(f"Incompatible types for broadcasting: input type={aval} and requested "
                     f"type={want.str_short(False)}")


def broadcast_arrays(*args: ArrayLike) -> list[Array]:
  """The inputs broadcast to their common shape.

  Raises:
    ValueError: if the shapes do not broadcast."""
  args = [asarray(a) for a in args]
  shape = broadcast_shapes(*[shape_of(a) for a in args])
  return [broadcast_to_shape(a, shape) for a in args]


# ---------------------------------------------------------------------------
# Diagonals and triangles


def _tri_select(name, m, k, lower: bool):
  m = as_array(m)
  s = shape_of(m)
  if len(s) < 2:
    raise ValueError(f"Argument to jax.numpy.{name} must be at least 2D")
  mask = lax.broadcast(tri(s[-2], s[-1], k if lower else k - 1, dtypes.bool_), s[:-2])
  z = zeros_like(m)
  return lax.select(mask, m, z) if lower else lax.select(mask, z, m)


@jit(static_argnames=("k",))
def tril(m: ArrayLike, k: int = 0) -> Array:
  """`m` with the elements above the k-th diagonal zeroed (on the last two axes). Jitted
  with `k` static, as JAX's (`jit[name=tril]` in a traced program).

  Raises:
    ValueError: for fewer than 2 dimensions."""
  return _tri_select("tril", m, k, True)


@jit(static_argnames=("k",))
def triu(m: ArrayLike, k: int = 0) -> Array:
  """`m` with the elements below the k-th diagonal zeroed (on the last two axes). Jitted
  with `k` static, as JAX's (`jit[name=triu]` in a traced program).

  Raises:
    ValueError: for fewer than 2 dimensions."""
  return _tri_select("triu", m, k, False)


# ---------------------------------------------------------------------------
# Functions applied over axes


def apply_over_axes(func: Any, a: ArrayLike, axes: Sequence[int]) -> Array:
  """`func(a, axis)` applied for each axis in turn, keeping the rank (a reduced axis is
  re-inserted with size 1)."""
  a = as_array(a)
  for ax in axes:
    b = as_array(func(a, ax))
    a = b if ndim_of(b) == ndim_of(a) else expand_dims(b, ax)
  return a
