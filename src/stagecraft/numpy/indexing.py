"""NumPy indexing: `x[idx]` (basic and advanced), the `x.at[idx]` updates, and the index
functions `take`, `take_along_axis`, `put`, `nonzero`, `argwhere`, `flatnonzero` and the
one-argument `where`.

Reads follow JAX's numpy's "auto" strategy, so that jaxprs print as JAX's: an index of
static in-bounds integers, slices, None and Ellipsis is one static `slice` (then `rev` for
negative steps, `squeeze` for the integers and `broadcast_in_dim` for the Nones); otherwise
scalar integers of any kind (out-of-bounds Python ints, NumPy 0-d arrays, traced scalars),
slices of step +-1 and `ds(start, size)` give one `dynamic_slice`, its start indices staged
and wrapped by `lax.dynamic_slice`. Everything else becomes one `gather` (reads) or
`scatter` (updates), built as JAX's `_index_to_gather` builds it: integer arrays broadcast
together and their dimensions replace the indexed ones, in place when the advanced indices
are adjacent in the index tuple and at the front otherwise (NumPy's rule); slices become
offset dimensions (step 1) or index arrays (other steps: `start + step * iota`, staged).
Boolean masks must be concrete (NumPy arrays, or Arrays outside a trace): they become integer
arrays (`numpy.nonzero`) when the index is built, also under jit. Out-of-bounds indices follow
JAX's numpy: reads clamp (or fill, with `mode='fill'`), updates drop; integers into an axis
of size 0 raise IndexError.
"""
from __future__ import annotations

import operator
import string
import warnings
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from stagecraft import traceback_util
from stagecraft.errors import NonConcreteBooleanIndexError
from stagecraft.indexing import Slice as ds_Slice
from stagecraft import core, dtypes, lax, shape_poly
from stagecraft.config import config
from stagecraft.errors import InconclusiveDimensionOperation
from stagecraft.core import Tracer
from stagecraft.numpy import array_constructors, contractions, reductions, ufuncs
from stagecraft.numpy.array_constructors import asarray
from stagecraft.numpy.array_creation import arange, ones_like, zeros
from stagecraft.numpy.manipulation import (atleast_1d, broadcast_shapes, broadcast_to, concatenate,
                                           ravel, reshape, tile, transpose, vstack)
from stagecraft.numpy.ufuncs import (clip, floor_divide, greater_equal, not_equal,
                                     remainder)
from stagecraft.numpy.util import (ArrayLike, as_array, canonicalize_axis, dtype_of,
                                   ensure_arraylike, lax_const, promote_dtypes, shape_of)
from stagecraft.lax.utils import FORWARD, KEY_TYPES, on_keys
from stagecraft.pjit import jit
from stagecraft.runtime.array import Array

__all__ = ["take", "take_along_axis", "put", "nonzero", "argwhere", "flatnonzero", "where",
           "NonConcreteBooleanIndexError"]

_index_dtype = np.dtype(np.int32)


# NonConcreteBooleanIndexError: stagecraft.errors' (JAX's class tree).

# ---------------------------------------------------------------------------
# Parsing: each index becomes (kind, value).

_NONE, _ELLIPSIS, _SLICE, _INT, _BOOL, _ARRAY = "none", "ellipsis", "slice", "int", "bool", "array"
_DSLICE = "dslice"   # a `ds(start, size, stride)`: static size, start static or traced


def _non_tuple_error(idx) -> TypeError:
  unpack = any((isinstance(i, (np.ndarray, Array, Tracer)) and np.ndim(i) != 0)
               or isinstance(i, (Sequence, slice)) or i is Ellipsis or i is None for i in idx)
  fix = "`arr[tuple(seq)]`" if unpack else "`arr[array(seq)]`"
  return TypeError(f"Using a non-tuple sequence for multidimensional indexing is not allowed; "
                   f"use {fix} instead of `arr[seq]` (as stagecraft.numpy requires).")


def _has_traced(seq) -> bool:
  if isinstance(seq, (list, tuple)):
    return any(_has_traced(s) for s in seq)
  return isinstance(seq, (Tracer, Array))


def _classify(i, position: int):
  if i is None:
    return _NONE, None
  if i is Ellipsis:
    return _ELLIPSIS, None
  if isinstance(i, ds_Slice):   # stagecraft.ds(start, size, stride), as jax.ds
    if i.is_dynamic_size:
      # NB: a TypeError, as JAX's (its shape check's "Shapes must be 1D sequences of
      # concrete values of integer type")
      raise TypeError(f"Shapes must be 1D sequences of concrete values of integer type: ds() "
                      f"with a traced size cannot index an array (position {position}), the "
                      f"result's shape would depend on it. Pass a static size (e.g. with "
                      f"static_argnums).")
    return _DSLICE, i
  if isinstance(i, slice):
    for v in (i.start, i.stop, i.step):
      if v is not None and (isinstance(v, Tracer) or not (
          hasattr(v, "__index__") or shape_poly.is_symbolic_dim(v))):
        raise IndexError(f"Slice entries must be static integers. Got {i} at position "
                         f"{position}. Use lax.dynamic_slice for traced bounds.")
    return _SLICE, slice(*(None if v is None else v if shape_poly.is_symbolic_dim(v)
                           else operator.index(v) for v in (i.start, i.stop, i.step)))
  if isinstance(i, (bool, np.bool_)):
    return _BOOL, np.asarray(i)
  if isinstance(i, (int, np.integer)):
    return _INT, i   # NB: kept as given (its NumPy dtype is the dynamic_slice index dtype)
  if isinstance(i, str):
    raise TypeError(f"{traceback_util.library_name[0]} does not support string indexing; "
                    f"got idx={i!r}")   # "JAX" under the JAX runner
  if isinstance(i, (list, tuple)):
    if not i:
      return _ARRAY, np.zeros((0,), _index_dtype)   # NB: [] would be float64 in NumPy
    # NB: under a trace a list is an Array (JAX's `convert_sequences_to_arrays`): its sign
    # test for negative indices is staged, as in JAX.
    i = (array_constructors.array(i) if _has_traced(i)
         else np.asarray(i) if core.current_trace() is core.eval_trace else asarray(i))
  if isinstance(i, (np.ndarray, Array, Tracer)):
    dt = np.dtype(i.dtype)
    if dt == dtypes.bool_:
      return _BOOL, i
    if dtypes.is_integer(dt):
      return _ARRAY, i
    raise TypeError(f"Indexer must have integer or boolean type, got indexer with type "
                    f"{dt.name} at position {position}.")
  if isinstance(i, (float, complex, np.generic)):
    raise TypeError(f"Indexer must have integer or boolean type, got indexer with type "
                    f"{np.dtype(type(i)).name} at position {position}.")
  raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), newaxis (`None`) and "
                   f"integer or boolean arrays are valid indices. Got {i!r} at position "
                   f"{position}.")


def _parse(idx, shape) -> list[tuple[str, Any]]:
  """The index as a list of (kind, value), one per entry; checks the counts."""
  if not isinstance(idx, tuple):
    if isinstance(idx, Sequence) and not isinstance(idx, str):
      raise _non_tuple_error(idx)
    idx = (idx,)
  entries = [_classify(i, k) for k, i in enumerate(idx)]
  if sum(1 for k, _ in entries if k == _ELLIPSIS) > 1:
    raise IndexError("an index can only have a single ellipsis ('...')")
  consumed = sum(np.ndim(v) if k == _BOOL else 1 for k, v in entries
                 if k not in (_NONE, _ELLIPSIS))
  if consumed > len(shape):
    raise IndexError(f"Too many indices: array is {len(shape)}-dimensional, but "
                     f"{consumed} were indexed")
  return entries


def _check_static_ints(entries, shape, normalize_indices: bool) -> None:
  """IndexError for static integers into a size-0 axis (NumPy's message); other
  out-of-bounds static integers clamp, as in JAX, unless `jax_check_static_indices` is on
  (then every out-of-bounds static integer raises JAX's IndexError)."""
  nd = len(shape)
  strict = config.jax_check_static_indices
  consumed = sum(np.ndim(v) if k == _BOOL else 1 for k, v in entries
                 if k not in (_NONE, _ELLIPSIS))
  axis = 0
  for kind, v in entries:
    if kind == _ELLIPSIS:
      axis += nd - consumed
    elif kind == _BOOL:
      axis += np.ndim(v)
    elif kind != _NONE:
      if kind == _INT:
        n, v = shape[axis], int(v)
        wrapped = v + n if normalize_indices and v < 0 else v
        if strict and not 0 <= wrapped < n:
          raise IndexError(f"index {v} out of bounds for axis {axis} with size {n} "
                           f"({normalize_indices=})")
        if n == 0 and not 0 <= wrapped < n:   # NB: other out-of-bounds indices clamp (JAX)
          raise IndexError(f"index {v} is out of bounds for axis {axis} with size {n}")
      axis += 1


def _expand_ellipsis(entries, nd: int):
  """The entries with the ellipsis and the implicit trailing axes as full slices."""
  consumed = sum(1 for k, _ in entries if k not in (_NONE, _ELLIPSIS))
  full = [(_SLICE, slice(None))] * (nd - consumed)
  k = next((j for j, (kind, _) in enumerate(entries) if kind == _ELLIPSIS), None)
  return entries + full if k is None else entries[:k] + full + entries[k + 1:]


def _finish_slice(out, rev_axes, squeeze_axes, newaxis_dims):
  """The common tail of both slice strategies: rev, squeeze, then expand_dims (a
  `broadcast_in_dim`) for the None (newaxis) entries, in JAX's order."""
  if rev_axes:
    out = lax.rev(out, tuple(rev_axes))
  if squeeze_axes:
    out = lax.squeeze(out, tuple(squeeze_axes))
  if newaxis_dims:
    out = lax.expand_dims(out, tuple(newaxis_dims))
  return out


def _static_slice_take(x, entries, normalize_indices: bool, clip: bool):
  """`x[idx]` as one static `slice` (JAX's `_static_slice`), or None when the index is not
  all static integers, slices, None and Ellipsis, or (unless `clip`) a static integer is
  out of bounds, or `x`'s shape is symbolic (export): JAX then tries
  `_dynamic_slice_take`."""
  if not all(k in (_NONE, _ELLIPSIS, _SLICE, _INT) for k, _ in entries):
    return None
  if not shape_poly.is_constant_shape(x.shape):   # as JAX: a gather sizes symbolic slices
    return None
  shape = x.shape
  start, limit, strides = [], [], []
  rev_axes, squeeze_axes, newaxis_dims = [], [], []
  axis = 0
  for kind, i in _expand_ellipsis(entries, len(shape)):
    if kind == _NONE:
      newaxis_dims.append(len(start) - len(squeeze_axes) + len(newaxis_dims))
      continue
    n = shape[axis]
    if kind == _INT:
      k = int(i)
      wrapped = k + n if normalize_indices and k < 0 else k
      if not clip and not 0 <= wrapped < n:
        return None
      if n == 0:
        raise IndexError(f"index {k} is out of bounds for axis {axis} with size {n}")
      wrapped = min(max(wrapped, 0), n - 1)
      start.append(wrapped)
      limit.append(wrapped + 1)
      strides.append(1)
      squeeze_axes.append(axis)
    else:
      st, sp, step = i.indices(n)
      if step < 0:   # NB: the same elements in ascending order, reversed after the slice
        new_start = min(n, sp + 1 + abs(st - sp - 1) % -step)
        start.append(new_start)
        limit.append(max(new_start, st + 1))
        strides.append(-step)
        rev_axes.append(axis)
      else:
        start.append(st)
        limit.append(max(st, sp))
        strides.append(step)
    axis += 1
  out = x
  unit = all(s == 1 for s in strides)
  if not (unit and all((a, b) == (0, n) for a, b, n in zip(start, limit, shape))):
    out = lax.slice(out, tuple(start), tuple(limit), None if unit else tuple(strides))
  return _finish_slice(out, rev_axes, squeeze_axes, newaxis_dims)


def _as_start_index(i, dtype):
  """A start index converted to `dtype`: traced ones by `convert_element_type`, static ones
  (Python, NumPy, concrete Arrays) on the host, as JAX folds them."""
  if isinstance(i, Tracer):
    return lax.convert_element_type(i, dtype)
  return np.asarray(i).astype(dtype)


def _dynamic_slice_take(x, entries, normalize_indices: bool):
  """`x[idx]` as one `dynamic_slice` (JAX's `_dynamic_slice`): for indices of scalar
  integers (static or traced), slices of step 1 or -1, None and Ellipsis; None otherwise.
  Every start index is staged (with several, converted to int32 first) and wrapped by
  `dynamic_slice` when negative, as in JAX."""
  for k, v in entries:
    if k == _SLICE and v.step not in (None, 1, -1) or k == _DSLICE and v.stride != 1:
      return None
    if k in (_BOOL, _ARRAY) and (k == _BOOL or np.ndim(v) != 0):
      return None
  shape = x.shape
  starts, sizes = [], []
  rev_axes, squeeze_axes, newaxis_dims = [], [], []
  trivial = True
  axis = 0
  for kind, i in _expand_ellipsis(entries, len(shape)):
    if kind == _NONE:
      newaxis_dims.append(len(starts) - len(squeeze_axes) + len(newaxis_dims))
      continue
    n = shape[axis]
    if kind in (_INT, _ARRAY):
      trivial = False
      if n == 0:
        raise IndexError(f"index is out of bounds for axis {axis} with size 0")
      starts.append(asarray(i))
      sizes.append(1)
      squeeze_axes.append(axis)
    elif kind == _DSLICE:
      trivial = False
      starts.append(i.start)
      sizes.append(int(i.size))
    else:
      if shape_poly.is_symbolic_dim(n):   # as JAX: a slice of a symbolic axis is a gather
        return None
      trivial = trivial and i == slice(None)
      st, sp, step = i.indices(n)
      if step < 0:
        starts.append(sp + 1)
        sizes.append(max(0, st - sp))
        rev_axes.append(axis)
      else:
        starts.append(st)
        sizes.append(max(0, sp - st))
    axis += 1
  out = x
  if not trivial:
    if len(starts) > 1:
      dt = _index_dtype if all(_fits(n, _index_dtype) for n in shape) else np.dtype(np.int64)
      starts = [_as_start_index(i, dt) for i in starts]
    out = lax.dynamic_slice(out, starts, tuple(sizes),
                            allow_negative_indices=normalize_indices)
  return _finish_slice(out, rev_axes, squeeze_axes, newaxis_dims)


# ---------------------------------------------------------------------------
# Gather indexing (JAX's _index_to_gather), shared by reads and updates.


class _GatherIndexer(NamedTuple):
  slice_shape: tuple[int, ...]          # shape of x[idx] (newaxis dims included)
  gather_slice_shape: tuple[int, ...]   # slice_sizes of the gather
  gather_indices: Any                   # int32[*batch, k]
  dnums: lax.GatherDimensionNumbers
  unique_indices: bool                  # no advanced index: starts cannot repeat
  indices_are_sorted: bool
  reversed_y_dims: tuple[int, ...]      # dims of the gather output to reverse
  newaxis_dims: tuple[int, ...]         # dims of x[idx] made by None
  scalar_bool_dims: tuple[int, ...]     # dims inserted into x for scalar bool indices


def _bool_error(mask: Tracer, position: int) -> NonConcreteBooleanIndexError:
  origin = mask._trace.origin_msg(mask)
  return NonConcreteBooleanIndexError(
      f"Array boolean indices must be concrete; got {mask.aval.str_short(False)}\n"
      f"(the traced mask at position {position}){origin}\nThe shape of x[mask] is the "
      f"number of True values, "
      f"which is not known when tracing (under jit shapes are static). Use "
      f"`jnp.where(mask, x, 0)` to keep the shape (zeros where the mask is False), or "
      f"`jnp.nonzero(mask, size=N)` for at most N indices of static size, or pass the mask "
      f"as a NumPy array (a constant).")


def _expand(shape, entries):
  """Ellipsis -> full slices; boolean arrays -> integer arrays (`np.nonzero`); a scalar bool
  -> a new axis of size 1 indexed by `arange(int(b))`. Returns the (expanded) shape, items
  `(kind, value, position)` each consuming one axis (None: none), and the new axes."""
  nd = len(shape)
  consumed = sum(np.ndim(v) if k == _BOOL else 1 for k, v in entries
                 if k not in (_NONE, _ELLIPSIS))
  items, new_shape, scalar_bool_dims = [], [], []
  axis = 0
  for pos, (kind, v) in enumerate(entries):
    if kind == _ELLIPSIS:
      for _ in range(nd - consumed):
        items.append((_SLICE, slice(None), pos))
        new_shape.append(shape[axis])
        axis += 1
    elif kind == _NONE:
      items.append((_NONE, None, pos))
    elif kind == _BOOL and np.ndim(v) == 0:
      if isinstance(v, Tracer):
        raise _bool_error(v, pos)
      scalar_bool_dims.append(len(new_shape))
      new_shape.append(1)
      items.append((_ARRAY, np.arange(int(bool(v))), pos))   # NB: intp, as NumPy's (JAX's)
    elif kind == _BOOL:
      if isinstance(v, Tracer):
        raise _bool_error(v, pos)
      mask = np.asarray(v)
      want = shape[axis:axis + mask.ndim]
      # NB: as NumPy's and JAX's, an empty mask indexes as its (empty) nonzero indices
      # whatever its shape (`x[np.empty(0, bool)]` is empty)
      if mask.shape != tuple(want) and mask.size:
        raise IndexError(f"boolean index did not match shape of indexed array in index "
                         f"{pos}: got {mask.shape}, expected {tuple(want)}")
      for i in np.nonzero(mask):   # NB: intp indices, wrapped in their (canonical) dtype
        items.append((_ARRAY, i, pos))
        new_shape.append(shape[axis])
        axis += 1
    else:
      items.append((kind, int(v) if kind == _INT else v, pos))
      new_shape.append(shape[axis])
      axis += 1
  for j in range(axis, nd):   # implicit trailing full slices
    items.append((_SLICE, slice(None), len(entries) + j))
    new_shape.append(shape[j])
  return tuple(new_shape), items, tuple(scalar_bool_dims)


def _normalize_index(i, n: int, normalize: bool):
  """`i` with negative values wrapped once (JAX's `normalize_indices`), in its own
  (canonical) dtype: Python ints on the host; NumPy arrays on the host outside a trace and,
  under a trace, with the sign test on the host and the wrap staged (`add`, `select_n`), as
  JAX does it; other arrays staged. Where `n` does not fit the index dtype, `i` is
  converted to int32 first."""
  if isinstance(i, int):
    return i + n if normalize and i < 0 else i
  if not normalize or dtypes.is_unsigned(i.dtype):
    return i
  if shape_poly.is_symbolic_dim(n):   # symbolic dimension (export): its value, staged
    nv = lax.convert_element_type(n, i.dtype if _fits(n, i.dtype) else _index_dtype)
    i = lax.convert_element_type(i, nv.dtype) if i.dtype != nv.dtype else i
    return lax.select(lax.lt(i, lax.full_like(i, 0)), lax.add(i, nv), i)
  if isinstance(i, np.ndarray):
    i = i.astype(dtypes.canonicalize_dtype(i.dtype))
    if not _fits(n, i.dtype):
      i = i.astype(_index_dtype)
    if core.current_trace() is core.eval_trace:
      return np.where(i < 0, i + np.asarray(n, i.dtype), i)
    return lax.select(i < 0, lax.add(i, np.asarray(n, i.dtype)), i)
  if not _fits(n, i.dtype):
    i = lax.convert_element_type(i, _index_dtype)
  # the size as JAX's `lax._const(i, n)`: weak for a weak scalar index, which stays weak
  # until the index is converted to int32 (a `convert_element_type` equation, as JAX's)
  return lax.select(lax.lt(i, np.zeros((), i.dtype)), lax.add(i, lax_const(i, n)), i)


def _convert_index(i):
  """`i` as int32 (not weakly typed): on the host for Python and NumPy values, else
  staged."""
  if isinstance(i, (int, np.integer, np.ndarray)):
    return np.asarray(i).astype(_index_dtype)
  if shape_poly.is_symbolic_dim(i):   # a symbolic dimension (export): its value, staged
    return lax.convert_element_type(i, _index_dtype)
  if i.dtype != _index_dtype or i.weak_type:
    return lax.convert_element_type(i, _index_dtype)
  return i


def _as_index(i, n: int, normalize: bool):
  """`i` as int32 with negative values wrapped once (NumPy values on the host)."""
  return _convert_index(_normalize_index(i, n, normalize))


def _fits(n: int, dt) -> bool:
  """Whether the axis size `n` is representable in the integer dtype `dt` (a symbolic one
  is assumed to be, as JAX does)."""
  return shape_poly.is_symbolic_dim(n) or n <= np.iinfo(dt).max


def _broadcast_indices(arrays):
  shapes = [tuple(np.shape(a)) for a in arrays]
  try:
    shape = tuple(broadcast_shapes(*shapes))   # symbolic dimensions too (export)
  except ValueError:
    raise IndexError("shape mismatch: indexing arrays could not be broadcast together with "
                     "shapes " + " ".join(map(str, shapes))) from None
  out = []
  for a in arrays:
    if tuple(np.shape(a)) == shape:
      out.append(a)
    elif isinstance(a, np.ndarray):
      out.append(np.broadcast_to(a, shape))
    else:
      out.append(broadcast_to(a, shape))
  return out, shape


def _stack_indices(pieces, shape) -> Any:
  """int32[*shape, len(pieces)]: each piece broadcast from its start dim (JAX's layout).

  Static scalar pieces (integer indices, slice starts) are staged as JAX stages them under a
  trace, a `broadcast_in_dim` of the literal per piece (and a `concatenate` of several);
  outside any trace, and for pieces that are all index arrays, the indices are built on the
  host."""
  if not pieces:
    return np.zeros((0,), _index_dtype)
  shape = tuple(shape)
  host = all(isinstance(g, np.ndarray) for g, _ in pieces)
  if host and (core.current_trace() is core.eval_trace
               or all(g.ndim for g, _ in pieces)):
    cols = [np.broadcast_to(g.reshape((1,) * d + g.shape + (1,) * (len(shape) - d - g.ndim)),
                            shape) for g, d in pieces]
    return np.stack(cols, axis=-1).astype(_index_dtype)
  pieces = [(g[()] if isinstance(g, np.ndarray) and g.ndim == 0 else g, d) for g, d in pieces]
  if len(pieces) == 1:
    g, _ = pieces[0]
    return lax.expand_dims(g, (np.ndim(g),))
  cols = [lax.broadcast_in_dim(g, shape + (1,), tuple(range(d, d + np.ndim(g))))
          for g, d in pieces]
  return lax.concatenate(cols, len(shape))


def _index_to_gather(shape, entries, normalize_indices: bool = True) -> _GatherIndexer:
  shape, items, scalar_bool_dims = _expand(shape, entries)
  any_array = any(k == _ARRAY and np.ndim(v) > 0 for k, v, _ in items)
  advanced = [j for j, (k, v, _) in enumerate(items)
              if any_array and k in (_ARRAY, _INT)]
  positions = sorted({items[j][2] for j in advanced})
  contiguous = not positions or positions[-1] - positions[0] + 1 == len(positions)
  x_axes_of = {}
  x_axis = 0
  for j, (k, _, _) in enumerate(items):
    if k != _NONE:
      x_axes_of[j] = x_axis
      x_axis += 1
  # NB: every integer index is wrapped first, in index order, as JAX's `normalize_indices`
  # does before it builds the gather indices (converted to int32 as they are used).
  index_of = {j: _normalize_index(v, shape[x_axes_of[j]], normalize_indices)
              for j, (k, v, _) in enumerate(items)
              if k in (_INT, _ARRAY) and (j in advanced or shape[x_axes_of[j]] != 0)}

  offset_dims, collapsed_slice_dims, start_index_map = [], [], []
  pieces, gather_indices_shape = [], []
  slice_shape, newaxis_dims, reversed_y_dims, gather_slice_shape = [], [], [], []
  y_axis = collapsed_y_axis = 0
  for j, (kind, v, _) in enumerate(items):
    if advanced and j == (advanced[0] if contiguous else 0):
      arrays, bshape = _broadcast_indices(
          [index_of[a] for a in advanced])
      arrays = [_convert_index(a) for a in arrays]
      start_dim = len(gather_indices_shape)
      pieces.extend((a, start_dim) for a in arrays)
      gather_indices_shape += bshape
      start_index_map.extend(x_axes_of[a] for a in advanced)
      collapsed_slice_dims.extend(x_axes_of[a] for a in advanced)
      slice_shape += bshape
      y_axis += len(bshape)
      collapsed_y_axis += len(bshape)
    if j in x_axes_of and j in advanced:
      gather_slice_shape.append(1)
      continue
    if kind == _NONE:
      slice_shape.append(1)
      newaxis_dims.append(y_axis)
      y_axis += 1
      continue
    n = shape[x_axes_of[j]]
    if kind in (_INT, _ARRAY):   # a scalar index (no advanced indices around)
      if n == 0:
        raise IndexError(f"index is out of bounds for axis {x_axes_of[j]} with size 0")
      pieces.append((_convert_index(index_of[j]), len(gather_indices_shape)))
      collapsed_slice_dims.append(x_axes_of[j])
      gather_slice_shape.append(1)
      start_index_map.append(x_axes_of[j])
      continue
    if kind == _DSLICE:
      start, step, size = v.start, v.stride, int(v.size)
    elif shape_poly.is_symbolic_dim(n):   # symbolic dimension (export): JAX's sizes
      start, step, size = shape_poly.canonicalize_slice(v, n)
    else:
      start, stop, step = v.indices(n)
      size = len(range(start, stop, step))
    slice_shape.append(size)
    if step == 1:
      if size != n:
        pieces.append((_convert_index(start), len(gather_indices_shape)))
        start_index_map.append(x_axes_of[j])
      gather_slice_shape.append(size)
      offset_dims.append(collapsed_y_axis)
    else:
      if core.current_trace() is core.eval_trace and not isinstance(start, Tracer):
        idx = (int(start) + step * np.arange(size)).astype(_index_dtype)
      else:   # NB: staged as JAX stages it: start + step * iota
        # NB: a traced start goes through jnp.array(start, int32), a `copy`, as in JAX
        first = (array_constructors.array(start, dtype=_index_dtype)
                 if isinstance(start, Tracer) else _convert_index(start))
        idx = lax.add(first,
                      lax.mul(np.asarray(step, _index_dtype), lax.iota(_index_dtype, size)))
      if step < 0:   # NB: gather ascending (sorted indices), then reverse, as JAX does
        reversed_y_dims.append(collapsed_y_axis)
        idx = idx[::-1].copy() if isinstance(idx, np.ndarray) else lax.rev(idx, (0,))
      gather_slice_shape.append(1)
      pieces.append((idx, len(gather_indices_shape)))
      start_index_map.append(x_axes_of[j])
      gather_indices_shape.append(size)
      collapsed_slice_dims.append(x_axes_of[j])
    collapsed_y_axis += 1
    y_axis += 1

  dnums = lax.GatherDimensionNumbers(offset_dims=tuple(offset_dims),
                                     collapsed_slice_dims=tuple(sorted(collapsed_slice_dims)),
                                     start_index_map=tuple(start_index_map))
  return _GatherIndexer(tuple(slice_shape), tuple(gather_slice_shape),
                        _stack_indices(pieces, gather_indices_shape), dnums,
                        not advanced, not advanced, tuple(reversed_y_dims),
                        tuple(newaxis_dims), scalar_bool_dims)


def _static_fill_value(fill_value):
  if fill_value is None:
    return None
  if isinstance(fill_value, Tracer):
    raise fill_value._concretization_error(
        "get", fix="The fill_value argument to indexed get() must be a static scalar (a "
                   "Python or NumPy scalar).")
  if np.ndim(fill_value) != 0:
    raise ValueError("fill_value argument to indexed get() must be a scalar")
  return np.asarray(fill_value)[()].item()


def rewriting_take(x: ArrayLike, idx: Any, *, indices_are_sorted: bool = False,
                   unique_indices: bool = False, mode: Any = None, fill_value: Any = None,
                   normalize_indices: bool = True):
  """`x[idx]`, with the options of `x.at[idx].get(...)` (JAX's numpy's `rewriting_take`).

  Raises:
    IndexError: for static integers into a size-0 axis (other out-of-bounds integers
      clamp, as in JAX), too many indices,
      several ellipses, boolean masks of the wrong shape, traced boolean masks
      (NonConcreteBooleanIndexError) or traced slice bounds.
    TypeError: for float or string indices, or a non-tuple sequence of indices.
  """
  x = asarray(x)
  entries = _parse(idx, x.shape)
  parsed_mode = None if mode is None else lax.GatherScatterMode.from_any(mode)
  # As JAX's "auto" strategy: a static slice, else a dynamic slice, else a gather.
  if parsed_mode in (None, lax.GatherScatterMode.PROMISE_IN_BOUNDS,
                     lax.GatherScatterMode.CLIP):
    if parsed_mode != lax.GatherScatterMode.CLIP:
      _check_static_ints(entries, x.shape, normalize_indices)
    out = _static_slice_take(x, entries, normalize_indices,
                             clip=parsed_mode == lax.GatherScatterMode.CLIP)
    if out is None:
      out = _dynamic_slice_take(x, entries, normalize_indices)
    if out is not None:
      return out
  fill_value = _static_fill_value(fill_value)
  gi = _index_to_gather(x.shape, entries, normalize_indices)
  y = x
  if gi.scalar_bool_dims:
    y = lax.expand_dims(y, gi.scalar_bool_dims)
  if 0 in gi.slice_shape:   # as JAX: no gather for an empty result
    out = lax.full(gi.slice_shape, np.zeros((), x.dtype))
    return lax.convert_element_type(out, x.dtype, weak_type=True) if x.weak_type else out
  if np.size(gi.gather_indices):
    y = lax.gather(y, gi.gather_indices, gi.dnums, gi.gather_slice_shape,
                   unique_indices=unique_indices or gi.unique_indices,
                   indices_are_sorted=indices_are_sorted or gi.indices_are_sorted,
                   mode=parsed_mode, fill_value=fill_value)
  if gi.reversed_y_dims:
    y = lax.rev(y, gi.reversed_y_dims)
  if gi.newaxis_dims:
    y = lax.expand_dims(y, gi.newaxis_dims)
  return y


def getitem(x: ArrayLike, idx: Any):
  """`x[idx]`: NumPy basic and advanced indexing with JAX's numpy's semantics (see the module
  docstring; out-of-bounds array indices clamp)."""
  return rewriting_take(x, idx)


# ---------------------------------------------------------------------------
# Indexed updates: x.at[idx].set(y) and friends.


def _scatter_update(x, idx, y, scatter_op: Callable, *, indices_are_sorted: bool,
                    unique_indices: bool, mode: Any, normalize_indices: bool,
                    no_bool: str | None = None):
  """`x[idx] op= y` out of place (JAX's `_scatter_update`): one scatter of `y` broadcast to
  the shape of `x[idx]`; the result has the dtype and weak type of `x`.

  Warns:
    FutureWarning: when `y`'s dtype does not cast safely to `x`'s (JAX's deprecation).

  Raises:
    TypeError: with `no_bool` (the combiner's name) for a bool `x`, unless `x[idx]` is empty
      (JAX returns `x` then, unchecked).
  """
  x = asarray(x)
  if (type(y) is int and dtypes.is_integer(x.dtype)
      and np.iinfo(x.dtype).min <= y <= np.iinfo(x.dtype).max):
    y = asarray(y, x.dtype)
  else:
    y = asarray(y)
  gi = _index_to_gather(x.shape, _parse(idx, x.shape), normalize_indices)
  if y.dtype != x.dtype and dtypes.result_type(y, x.dtype) != x.dtype:
    # NB: JAX deprecated updates that do not cast safely to x's dtype (it still casts); its
    # warning points into its own module.
    warnings.warn(f"scatter inputs have incompatible types: cannot safely cast value from "
                  f"dtype={y.dtype} to dtype={x.dtype} with jax_numpy_dtype_promotion="
                  f"{config.numpy_dtype_promotion}. In future JAX releases this will "
                  f"result in an error.", FutureWarning, stacklevel=1)
  if 0 in gi.slice_shape:
    return x
  if no_bool is not None and x.dtype == dtypes.bool_:
    # NB: JAX's scatter combiners are the arithmetic lax ops, which reject bool
    raise TypeError(f"{no_bool} does not accept dtype bool at position 0. Accepted dtypes at "
                    f"position 0 are subtypes of integer, floating, complexfloating.")
  dtype, weak = x.dtype, x.weak_type
  if not isinstance(y, Tracer) and y.ndim == 0 and isinstance(y.dtype, np.dtype):
    # NB: a concrete scalar update is converted on the host and enters the scatter as a
    # literal, as JAX's tracing folds the conversion of a constant scalar.
    to_dtype, to_weak = dtypes.result_type(x, y, return_weak_type_flag=True)
    with np.errstate(over="ignore", invalid="ignore"):   # out of range: inf, as XLA gives
      y_host = np.asarray(y).astype(to_dtype)[()]
    x = x if (x.dtype, x.weak_type) == (to_dtype, to_weak) else lax.convert_element_type(
        x, to_dtype, weak_type=to_weak)
    y = lax.utils.weak_scalar(y_host) if to_weak else y_host
  else:
    x, y = promote_dtypes(x, y)
  y = broadcast_to(y, gi.slice_shape)
  if gi.newaxis_dims:
    y = lax.squeeze(y, gi.newaxis_dims)
  if gi.reversed_y_dims:
    y = lax.rev(y, gi.reversed_y_dims)
  if gi.scalar_bool_dims:
    x = lax.expand_dims(x, gi.scalar_bool_dims)
  dnums = lax.ScatterDimensionNumbers(
      update_window_dims=gi.dnums.offset_dims, inserted_window_dims=gi.dnums.collapsed_slice_dims,
      scatter_dims_to_operand_dims=gi.dnums.start_index_map)
  out = scatter_op(x, gi.gather_indices, y, dnums,
                   indices_are_sorted=indices_are_sorted or gi.indices_are_sorted,
                   unique_indices=unique_indices or gi.unique_indices, mode=mode)
  if gi.scalar_bool_dims:
    out = lax.squeeze(out, gi.scalar_bool_dims)
  if out.dtype != dtype or out.weak_type != weak:
    out = lax.convert_element_type(out, dtype, weak_type=weak)
  return out


class _IndexUpdateHelper:
  """`x.at`: index it (`x.at[idx]`) to get an `_IndexUpdateRef` with the update methods.

  None of the methods modifies `x`: each returns a new array. Repeated indices all apply for
  `add`/`multiply`/`min`/`max` (as `np.add.at`); for `set` one of them wins. Out-of-bounds
  updates are dropped unless `mode='clip'`; `get` clamps out-of-bounds array indices unless
  `mode='fill'`, and raises IndexError for static out-of-bounds integers (as `x[idx]`)
  unless `mode` is 'clip' or 'fill'.

  Examples:
    >>> import stagecraft.numpy as jnp
    >>> x = jnp.arange(5.0)
    >>> x.at[jnp.array([1, 1, 3])].add(10.0)
    Array([ 0., 21.,  2., 13.,  4.], dtype=float32)
    >>> x.at[10].get(mode='fill', fill_value=-1.0)
    Array(-1., dtype=float32)
  """
  __slots__ = ("array",)

  def __init__(self, array):
    self.array = array

  def __getitem__(self, index) -> "_IndexUpdateRef":
    return _IndexUpdateRef(self.array, index)

  def __repr__(self):
    return f"_IndexUpdateHelper({self.array!r})"


def at(x) -> _IndexUpdateHelper:
  """`x.at`, the property `array_methods` attaches to Array and tracers."""
  return _IndexUpdateHelper(x)


class _IndexUpdateRef:
  """`x.at[idx]`: the update methods, each the pure form of an in-place NumPy update.

  Every method takes the keyword options `indices_are_sorted`, `unique_indices` (promises
  that may speed up the computation), `mode` ('promise_in_bounds', 'clip', 'drop'/'fill' or
  a `lax.GatherScatterMode`; updates default to dropping out-of-bounds indices, `get` to
  clamping them) and `wrap_negative_indices` (default True: negative indices count from the
  end; False: they are out of bounds).
  """
  __slots__ = ("array", "index")

  def __init__(self, array, index):
    self.array = array
    self.index = index

  def __repr__(self):
    return f"_IndexUpdateRef({self.array!r}, {self.index!r})"

  def get(self, *, indices_are_sorted: bool = False, unique_indices: bool = False,
          mode: Any = None, fill_value: Any = None, wrap_negative_indices: bool = True):
    """`x[idx]`; with `mode='fill'`, out-of-bounds elements are `fill_value` (default NaN
    for inexact dtypes, the minimum of signed integers, the maximum of unsigned ones, True
    for bool)."""
    return rewriting_take(self.array, self.index, indices_are_sorted=indices_are_sorted,
                          unique_indices=unique_indices, mode=mode, fill_value=fill_value,
                          normalize_indices=wrap_negative_indices)

  def _update(self, values, op, indices_are_sorted, unique_indices, mode,
              wrap_negative_indices, no_bool=None):
    return _scatter_update(self.array, self.index, values, op,
                           indices_are_sorted=indices_are_sorted,
                           unique_indices=unique_indices, mode=mode,
                           normalize_indices=wrap_negative_indices, no_bool=no_bool)

  def set(self, values: ArrayLike, *, indices_are_sorted: bool = False,
          unique_indices: bool = False, mode: Any = None, wrap_negative_indices: bool = True):
    """`x[idx] = values`, out of place."""
    return self._update(values, lax.scatter, indices_are_sorted, unique_indices, mode,
                        wrap_negative_indices)

  def apply(self, func: Callable, *, indices_are_sorted: bool = False,
            unique_indices: bool = False, mode: Any = None,
            wrap_negative_indices: bool = True):
    """`func` (a unary function of one element) applied to `x[idx]`, out of place: a
    repeated index applies it again (`np.negative.at(x, idx)`; `x.at[idx].set(func(x[idx]))`
    applies it once). One `scatter-apply` (`lax.scatter_apply`, not differentiable)."""
    def scatter_op(x, indices, y, dnums, **kwargs):
      return lax.scatter_apply(x, indices, func, dnums, update_shape=y.shape, **kwargs)
    return _scatter_update(self.array, self.index, np.zeros((), self.array.dtype), scatter_op,
                           indices_are_sorted=indices_are_sorted,
                           unique_indices=unique_indices, mode=mode,
                           normalize_indices=wrap_negative_indices)

  def add(self, values: ArrayLike, *, indices_are_sorted: bool = False,
          unique_indices: bool = False, mode: Any = None, wrap_negative_indices: bool = True):
    """`x[idx] += values`, out of place; repeated indices accumulate (`np.add.at`).

    Raises:
      TypeError: if `x` is bool and `x[idx]` is not empty (as JAX).
    """
    return self._update(values, lax.scatter_add, indices_are_sorted, unique_indices, mode,
                        wrap_negative_indices, no_bool="add")

  def subtract(self, values: ArrayLike, *, indices_are_sorted: bool = False,
               unique_indices: bool = False, mode: Any = None,
               wrap_negative_indices: bool = True):
    """`x[idx] -= values`, out of place; repeated indices accumulate."""
    return self._update(values, lax.scatter_sub, indices_are_sorted, unique_indices, mode,
                        wrap_negative_indices)

  def multiply(self, values: ArrayLike, *, indices_are_sorted: bool = False,
               unique_indices: bool = False, mode: Any = None,
               wrap_negative_indices: bool = True):
    """`x[idx] *= values`, out of place; repeated indices accumulate.

    Raises:
      TypeError: if `x` is bool and `x[idx]` is not empty (as JAX).
    """
    return self._update(values, lax.scatter_mul, indices_are_sorted, unique_indices, mode,
                        wrap_negative_indices, no_bool="mul")

  mul = multiply

  def divide(self, values: ArrayLike, *, indices_are_sorted: bool = False,
             unique_indices: bool = False, mode: Any = None,
             wrap_negative_indices: bool = True):
    """`x[idx] /= values`, out of place (true division: integers give floats, as JAX).

    Raises:
      TypeError: if `x` is bool and `x[idx]` is not empty (as JAX).
    """
    return ufuncs.divide(self.array, _scatter_update(
        ones_like(self.array), self.index, values, lax.scatter_mul,
        indices_are_sorted=indices_are_sorted, unique_indices=unique_indices, mode=mode,
        normalize_indices=wrap_negative_indices, no_bool="mul"))

  def power(self, values: ArrayLike, *, indices_are_sorted: bool = False,
            unique_indices: bool = False, mode: Any = None,
            wrap_negative_indices: bool = True):
    """`x[idx] **= values`, out of place.

    Raises:
      TypeError: if `x` is bool and `x[idx]` is not empty (as JAX).
    """
    return ufuncs.power(self.array, _scatter_update(
        ones_like(self.array), self.index, values, lax.scatter_mul,
        indices_are_sorted=indices_are_sorted, unique_indices=unique_indices, mode=mode,
        normalize_indices=wrap_negative_indices, no_bool="mul"))

  def min(self, values: ArrayLike, *, indices_are_sorted: bool = False,
          unique_indices: bool = False, mode: Any = None, wrap_negative_indices: bool = True):
    """`x[idx] = minimum(x[idx], values)`, out of place; repeated indices accumulate."""
    return self._update(values, lax.scatter_min, indices_are_sorted, unique_indices, mode,
                        wrap_negative_indices)

  def max(self, values: ArrayLike, *, indices_are_sorted: bool = False,
          unique_indices: bool = False, mode: Any = None, wrap_negative_indices: bool = True):
    """`x[idx] = maximum(x[idx], values)`, out of place; repeated indices accumulate."""
    return self._update(values, lax.scatter_max, indices_are_sorted, unique_indices, mode,
                        wrap_negative_indices)


# ---------------------------------------------------------------------------
# take, take_along_axis, put


def take(a: ArrayLike, indices: ArrayLike, axis: int | None = None, out: None = None,
         mode: str | None = None, unique_indices: bool = False,
         indices_are_sorted: bool = False, fill_value: Any = None):
  """Elements of `a` at `indices` along `axis` (JAX's `numpy.take`), one gather.

  As JAX's numpy, the computation is a jitted function, `_take` (static `axis`, `mode`,
  `unique_indices`, `indices_are_sorted`, `fill_value`): a `jit[name=_take]` equation in a
  traced program.

  Args:
    a: array `T[*s]`.
    indices: integer array `I[*i]`; negative values count from the end.
    axis: the axis taken from; None flattens `a` first.
    out: unsupported (must be None).
    mode: 'fill' or None (default: out-of-bounds indices give `fill_value`), 'clip' (clamp
      into range), 'wrap' (indices modulo the axis size).
    unique_indices, indices_are_sorted: promises that may speed up the computation.
    fill_value: static scalar for 'fill' (default NaN for inexact, the minimum of signed
      integers, the maximum of unsigned ones, True for bool).

  Returns:
    `T[*s[:axis], *i, *s[axis+1:]]`.

  Raises:
    TypeError: for `a` or `indices` not an array or scalar (a list), or non-integer indices.
    NotImplementedError: for `out` or `mode='raise'` (NumPy's default).
    ValueError: for an unknown mode or an axis out of bounds.
    IndexError: when taking a non-empty set of indices from an empty axis.

  Examples:
    >>> import numpy as np
    >>> np.asarray(take(np.array([1., 2., 3.], np.float32), np.array([2, -1, 5])))
    array([ 3.,  3., nan], dtype=float32)
  """
  if type(a) in KEY_TYPES:
    return on_keys(take, a, indices, axis, out, mode, unique_indices, indices_are_sorted,
                       fill_value, reuse=FORWARD)
  return _take(a, indices, None if axis is None else operator.index(axis), out, mode,
               unique_indices=unique_indices, indices_are_sorted=indices_are_sorted,
               fill_value=fill_value)


@jit(static_argnames=("axis", "mode", "unique_indices", "indices_are_sorted", "fill_value"))
def _take(a, indices, axis=None, out=None, mode=None, unique_indices=False,
          indices_are_sorted=False, fill_value=None):
  """The body of `take` (jitted under this name, as JAX's)."""
  if out is not None:
    raise NotImplementedError("The 'out' argument to jnp.take is not supported.")
  a, indices = ensure_arraylike("take", a, indices)
  if not dtypes.is_integer(indices.dtype):
    raise TypeError(f"take indices must be of integer type, got {indices.dtype}")
  if axis is None:
    a = ravel(a)
    axis = 0
  else:
    axis = canonicalize_axis(axis, a.ndim, "take")
  n = a.shape[axis]
  if mode is None or mode == "fill":
    gather_mode = lax.GatherScatterMode.FILL_OR_DROP
    # NB: gather takes no negative indices: they are wrapped once here.
    indices = ufuncs.where(ufuncs.less(indices, 0), ufuncs.add(indices, n), indices)
  elif mode == "raise":
    raise NotImplementedError("The 'raise' mode to jnp.take is not supported: out-of-bounds "
                              "indices cannot raise inside a computation. Use 'fill' (the "
                              "default), 'clip' or 'wrap'.")
  elif mode == "wrap":
    indices = remainder(indices, np.asarray(n, indices.dtype))
    gather_mode = lax.GatherScatterMode.PROMISE_IN_BOUNDS
  elif mode == "clip":
    gather_mode = lax.GatherScatterMode.CLIP
  else:
    raise ValueError(f"Invalid mode '{mode}' for np.take; expected 'fill', 'clip' or 'wrap'.")
  k = indices.ndim
  if n == 0:
    if indices.size != 0:
      raise IndexError("Cannot do a non-empty jnp.take() from an empty axis.")
    return a
  if indices.size == 0:
    return lax.full_like(a, 0, shape=a.shape[:axis] + indices.shape + a.shape[axis + 1:])
  slice_sizes = a.shape[:axis] + (1,) + a.shape[axis + 1:]
  dnums = lax.GatherDimensionNumbers(
      offset_dims=tuple(range(axis)) + tuple(range(axis + k, a.ndim + k - 1)),
      collapsed_slice_dims=(axis,), start_index_map=(axis,))
  return lax.gather(a, indices[..., None], dnums, slice_sizes, mode=gather_mode,
                    unique_indices=unique_indices, indices_are_sorted=indices_are_sorted,
                    fill_value=fill_value)


@jit(static_argnames=("axis", "mode", "fill_value", "wrap_negative_indices"))
def take_along_axis(arr: ArrayLike, indices: ArrayLike, axis: int | None = -1,
                    mode: Any = None, fill_value: Any = None, *,
                    wrap_negative_indices: bool | None = None):
  """`arr` indexed along `axis` by `indices` matched elementwise on the other axes
  (JAX's `numpy.take_along_axis`): one gather with batching dimensions.

  As JAX's numpy, a jitted function (`jit[name=take_along_axis]` in a traced program;
  static `axis`, `mode`, `fill_value`, `wrap_negative_indices`).

  Args:
    arr: array `T[*s]`.
    indices: integer array of the same rank, broadcast-compatible with `arr` on the other
      axes (or 1-D when `axis` is None). Where negative indices are wrapped, they are first
      converted to int32 (int64 for an axis longer than the int32 range), as JAX's.
    axis: the axis; None flattens `arr`.
    mode: None/'fill' (out-of-bounds give `fill_value`), 'clip', 'promise_in_bounds', or
      'one_hot' (a contraction with the one-hot encoding of the indices, as JAX's; out of
      bounds give 0).
    fill_value: static scalar for 'fill' (JAX's default per dtype).
    wrap_negative_indices: negative indices count from the end; default: True unless mode
      is 'promise_in_bounds' (JAX's legacy rule).

  Returns:
    `T[*o]`, `o` the broadcast of the shapes of `indices` and `arr` (with `o[axis]` from
    `indices`).

  Raises:
    TypeError: for `arr` or `indices` not an array or scalar (a list), or non-integer
      indices.
    ValueError: if the ranks differ, or `axis` is None and `indices` is not 1-D.
  """
  return _take_along_axis(arr, indices, axis, mode, fill_value,
                          wrap_negative_indices=wrap_negative_indices)


def _take_along_axis(arr, indices, axis=-1, mode=None, fill_value=None, *,
                     wrap_negative_indices=None):
  """The body of `take_along_axis` (library callers that print no jit of their own use it
  directly)."""
  a, indices = ensure_arraylike("take_along_axis", arr, indices)
  idx_shape = indices.shape
  if not dtypes.is_integer(indices.dtype):
    raise TypeError(f"take_along_axis indices must be of integer type, got {indices.dtype}")
  if axis is None:
    if len(idx_shape) != 1:
      raise ValueError(f"take_along_axis indices must be 1D if axis=None, got shape "
                       f"{idx_shape}")
    a = ravel(a)
    axis = 0
  rank = a.ndim
  if rank != len(idx_shape):
    raise ValueError(f"indices and arr must have the same number of dimensions; "
                     f"{len(idx_shape)} vs. {rank}")
  axis = canonicalize_axis(axis, rank, "take_along_axis")
  axis_size = a.shape[axis]
  arr_shape = a.shape[:axis] + (1,) + a.shape[axis + 1:]
  out_shape = broadcast_shapes(idx_shape, arr_shape)
  if axis_size == 0:
    return lax.full(out_shape, 0, a.dtype)
  if wrap_negative_indices is None:
    wrap_negative_indices = mode != "promise_in_bounds"
  if wrap_negative_indices:
    # NB: the sum of a negative index and the axis size must not overflow.
    idt = np.dtype(np.int64 if axis_size > np.iinfo(np.int32).max else np.int32)
    indices = lax.convert_element_type(indices, idt)
    indices = lax.select(indices < 0, lax.add(indices, np.asarray(axis_size, idt)), indices)
  if mode == "one_hot":
    return _take_one_hot(a, indices, axis)
  index_dims = [i for i, d in enumerate(idx_shape) if i == axis or d != 1]
  gather_index_shape = tuple(out_shape[i] for i in index_dims) + (1,)
  gather_indices = lax.reshape(indices, gather_index_shape)
  slice_sizes, offset_dims, start_index_map, collapsed = [], [], [], []
  obatch, ibatch, squeeze = [], [], []
  new_i = j = 0
  for i in range(rank):
    if i == axis:
      slice_sizes.append(1)
      start_index_map.append(new_i)
      collapsed.append(new_i)
      new_i += 1
      j += 1
    elif idx_shape[i] == 1:   # take the whole axis of arr: no index needed
      offset_dims.append(i)
      slice_sizes.append(arr_shape[i])
      new_i += 1
    elif arr_shape[i] == 1:   # arr broadcasts along this axis: squeeze it away
      squeeze.append(i)
      j += 1
    else:                     # matched elementwise: a batching dimension
      slice_sizes.append(0 if arr_shape[i] == 0 else 1)
      obatch.append(new_i)
      ibatch.append(j)
      new_i += 1
      j += 1
  if squeeze:
    a = lax.squeeze(a, tuple(squeeze))
  dnums = lax.GatherDimensionNumbers(
      offset_dims=tuple(offset_dims), collapsed_slice_dims=tuple(collapsed),
      start_index_map=tuple(start_index_map), operand_batching_dims=tuple(obatch),
      start_indices_batching_dims=tuple(ibatch))
  return lax.gather(a, gather_indices, dnums, tuple(slice_sizes),
                    mode="fill" if mode is None else mode, fill_value=fill_value)


@jit(static_argnames=("num_classes",))
def _one_hot(x, num_classes: int):
  """`x[..., None] == arange(num_classes)`: bool `[*s, num_classes]` (as JAX's
  `nn.one_hot(x, num_classes, dtype=bool)`, jitted under this name)."""
  nd = x.ndim
  lhs = lax.expand_dims(x, (nd,))
  rhs = lax.broadcasted_iota(x.dtype, (1,) * nd + (num_classes,), nd)
  return lax.eq(lhs, rhs)


def _take_one_hot(a, indices, axis: int):
  """`take_along_axis(..., mode='one_hot')`: the one-hot encoding of the (wrapped) indices
  contracted with `a` along `axis` by `einsum`, as JAX's (`'...b,b->...'` for a 1-D `a`,
  else `'<pre>y...z,<pre>z...-><pre>y...'` at `Precision.HIGHEST`); out-of-range indices
  give 0.

  Raises:
    ValueError: for more than 50 dimensions before `axis` (JAX's message)."""
  hot = _one_hot(indices, a.shape[axis])
  if a.ndim == 1:
    return contractions.einsum("...b,b->...", hot, a, preferred_element_type=a.dtype)
  if axis > len(string.ascii_letters) - 2:
    raise ValueError("One Hot indexing is only supported for up to 50 leading dimensions.")
  pre = string.ascii_letters[:axis]
  return contractions.einsum(f"{pre}y...z,{pre}z...->{pre}y...", hot, a,
                             precision=lax.Precision.HIGHEST, preferred_element_type=a.dtype)


def take_axis(x, idx, axis: int):
  """x at the (traced or concrete) in-range integer indices `idx[m]` along `axis`, as one
  `take_along_axis(..., mode="clip")`. A helper of the library, not in `stagecraft.numpy`."""
  x = as_array(x)
  idx = as_array(idx)
  shape = list(shape_of(x))
  shape[axis] = shape_of(idx)[0]
  idx = lax.broadcast_in_dim(idx, tuple(shape), (axis,))
  return _take_along_axis(x, idx, axis=axis, mode="clip")


def _tile_to_size(v, n: int):
  """The 1-D `v` repeated cyclically (one `tile`), then cut to length `n`."""
  size = shape_of(v)[0]
  if size < n:
    v = tile(v, -(-n // size))
  return v[:n] if shape_of(v)[0] > n else v


def _unravel_clipped(flat, shape):
  """The index tuple of the flat indices `flat` into `shape`, by repeated `divmod` (JAX's
  `unravel_index`): indices past either end clip to the first or last position."""
  out = [0] * len(shape)
  for i, s in reversed(list(enumerate(shape))):
    flat, out[i] = ufuncs.divmod(flat, s)
  oob_pos = flat > 0
  oob_neg = asarray(False) if dtypes.is_unsigned(dtype_of(flat)) else flat < -1
  return tuple(ufuncs.where(oob_pos, s - 1, ufuncs.where(oob_neg, 0, i))
               for s, i in zip(shape, out))


def put(a: ArrayLike, ind: ArrayLike, v: ArrayLike, mode: str | None = None, *,
        inplace: bool = True):
  """`a` with `v` written at the flat indices `ind` (JAX's `numpy.put`), out of place, as
  JAX's program: one scatter at the unravelled indices.

  Args:
    a: array `T[*s]`.
    ind: integer indices into the flattened `a`.
    v: values, repeated cyclically to the number of indices (as NumPy).
    mode: None (indices in `[-size, size)`, negative ones counting from the end; others
      clip to the first or last element), 'clip' (clamped into `[0, size)`) or 'wrap'
      (modulo the size).
    inplace: must be False: Arrays are immutable, the result is a new array.

  Returns:
    `T[*s]`.

  Raises:
    ValueError: if `inplace` is not False, or for an unknown mode.
    NotImplementedError: for `mode='raise'`.
  """
  if inplace:
    raise ValueError("stagecraft.numpy.put cannot modify arrays in-place, because JAX arrays are "
                     "immutable. Pass inplace=False to instead return an updated array.")
  arr, ind_arr, _ = ensure_arraylike("put", a, ind, v)
  ind_arr = ravel(ind_arr)
  v_arr = ravel(v)
  if not arr.size or not ind_arr.size or not v_arr.size:
    return arr
  v_arr = _tile_to_size(v_arr, ind_arr.size)
  if mode is None:
    scatter_mode = "drop"
  elif mode == "clip":
    ind_arr = clip(ind_arr, 0, arr.size - 1)
    scatter_mode = "promise_in_bounds"
  elif mode == "wrap":
    ind_arr = ufuncs.remainder(ind_arr, arr.size)
    scatter_mode = "promise_in_bounds"
  elif mode == "raise":
    raise NotImplementedError("The 'raise' mode to jnp.put is not supported.")
  else:
    raise ValueError(f"mode should be one of 'wrap' or 'clip'; got mode={mode!r}")
  return at(arr)[_unravel_clipped(ind_arr, shape_of(arr))].set(v_arr, mode=scatter_mode)


# ---------------------------------------------------------------------------
# nonzero, argwhere, flatnonzero, where(condition)


def _nonzero_fill(fill_value, ndim: int):
  fills = fill_value if isinstance(fill_value, tuple) else (fill_value,) * ndim
  if len(fills) != ndim or any(np.shape(f) != () for f in fills):
    raise ValueError(f"fill_value must be a scalar or a tuple of length {ndim}; got "
                     f"{fill_value}")
  return fills


def nonzero(a: ArrayLike, *, size: int | None = None,
            fill_value: Any = None) -> tuple[Any, ...]:
  """Indices of the nonzero elements of `a`, one default-int array per dimension
  (JAX's `numpy.nonzero`).

  The number of nonzeros depends on the values, so under jit (or for any traced `a`) the
  static `size` is required: the first `size` indices are returned, padded with
  `fill_value` (default 0). As JAX's program: the flat index of the k-th nonzero is the
  number of elements whose running count of nonzeros is below k + 1 (a `cumsum` of a
  `bincount` of the running count), split into one index per dimension by `//` and `%`.

  Args:
    a: array `T[*s]` of rank >= 1.
    size: static number of indices to return; None returns them all (concrete `a` only).
    fill_value: padding: a scalar or one scalar per dimension.

  Returns:
    A tuple of `ndim` arrays `int[n]` (int32; int64 with x64; `n = size`, or the number of
    nonzeros).

  Raises:
    TypeError: `a` not an array or scalar (a list).
    ValueError: for a 0-d `a`, or a `fill_value` of the wrong length.
    ConcretizationTypeError: if `a` is traced and `size` is None.

  Examples:
    >>> import numpy as np
    >>> [np.asarray(i) for i in nonzero(np.array([0, 3, 0, 5]), size=3, fill_value=-1)]
    [array([ 1,  3, -1], dtype=int32)]
  """
  arr = ensure_arraylike("nonzero", a)
  if np.ndim(arr) == 0:
    raise ValueError("Calling nonzero on 0d arrays is not allowed. Use "
                     "jnp.atleast_1d(scalar).nonzero() instead.")
  if type(arr) in KEY_TYPES:   # as JAX's: its `a != 0` raises the TypeError of key dtypes
    arr.__ne__(0)
  shape = tuple(arr.shape)
  idx_dt = dtypes.default_int_dtype()
  fills = None if fill_value is None else _nonzero_fill(fill_value, len(shape))
  if size is not None:
    if isinstance(size, Tracer):
      raise size._concretization_error(
          "nonzero", fix="The size argument of jnp.nonzero must be a static Python int.")
    size = operator.index(size)
  if not isinstance(arr, Tracer):   # concrete: NumPy on the host (the same values)
    found = np.nonzero(np.asarray(arr))
    if size is None:
      return tuple(asarray(i.astype(idx_dt)) for i in found)
    out = []
    for k, i in enumerate(found):
      i = i[:size].astype(idx_dt)
      pad = np.full(size - i.shape[0], 0 if fills is None else fills[k], idx_dt)
      out.append(asarray(np.concatenate([i, pad])))
    return tuple(out)
  if size is None:
    raise arr._concretization_error(
        "nonzero", fix="The size argument of jnp.nonzero must be statically specified to "
                       "use jnp.nonzero within transformations: pass size=N (and optionally "
                       "fill_value) to get at most N indices.")
  if arr.size == 0 or size == 0:
    return tuple(zeros(size, idx_dt) for _ in shape)
  mask = arr if arr.dtype == dtypes.bool_ else not_equal(arr, 0)
  running = reductions.cumsum(mask)
  # NB: `bincount(running, length=size)`, inlined (numpy.statistics is a higher layer)
  counts = zeros(size, idx_dt).at[clip(running, 0)].add(np.array(1, idx_dt), mode="drop")
  flat = reductions.cumsum(counts)
  strides = (np.cumprod(shape[::-1])[::-1] // shape).astype(dtype_of(flat))
  out = tuple(remainder(floor_divide(flat, st), d) for st, d in zip(strides, shape))
  if fills is not None:
    pad = greater_equal(arange(size), reductions.sum(mask))
    out = tuple(ufuncs.where(pad, f, o) for f, o in zip(fills, out))
  return out


def flatnonzero(a: ArrayLike, *, size: int | None = None, fill_value: Any = None):
  """Indices of the nonzero elements of the flattened `a`: `nonzero(ravel(a))[0]`
  (JAX's `numpy.flatnonzero`; `size` and `fill_value` as for `nonzero`)."""
  return nonzero(ravel(a), size=size, fill_value=fill_value)[0]


def argwhere(a: ArrayLike, *, size: int | None = None, fill_value: Any = None):
  """The indices of the nonzero elements of `a`, one row per element
  (JAX's `numpy.argwhere`: the transposed stack of `nonzero`'s arrays; `size` and
  `fill_value` as for `nonzero`).

  Returns:
    `int[n, ndim]` (`int[n, 0]` for a 0-d `a`).

  Raises:
    As `nonzero`.
  """
  a = ensure_arraylike("argwhere", a)
  result = transpose(vstack(nonzero(atleast_1d(a), size=size, fill_value=fill_value)))
  if np.ndim(a) == 0:
    return reshape(result[:0], (shape_of(result)[0], 0))
  return reshape(result, (shape_of(result)[0], np.ndim(a)))


def where(condition: ArrayLike, x: ArrayLike = None, y: ArrayLike = None, /, *,
          size: int | None = None, fill_value: Any = None):
  """`x` where `condition` else `y`; with `condition` alone, `nonzero(condition)`
  (JAX's `numpy.where`).

  Args:
    condition: bool-like array.
    x, y: array-likes (both or neither).
    size, fill_value: for the one-argument form, as for `nonzero` (`size` is required
      under jit).

  Raises:
    ValueError: if only one of `x` and `y` is given.
    ConcretizationTypeError: for the one-argument form under jit without `size`.
  """
  if x is None and y is None:
    return nonzero(condition, size=size, fill_value=fill_value)
  if x is None or y is None:
    raise ValueError(f"where: either both or neither of x and y must be given, got x={x!r} "
                     f"and y={y!r}. Pass both for a select, or neither for nonzero.")
  return ufuncs.where(condition, x, y)
