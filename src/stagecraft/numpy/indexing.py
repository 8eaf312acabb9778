"""Basic indexing (`x[...]`): integers, slices (any step), None and Ellipsis, with static
`slice`/`rev` and, for traced integer indices, `dynamic_slice`. Advanced (array) indexing is
a later issue and raises a clear IndexError."""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

from stagecraft import dtypes, lax
from stagecraft.core import Tracer
from stagecraft.numpy import lax_numpy as jnp
from stagecraft.runtime.array import Array


def _is_int_index(i) -> bool:
  if isinstance(i, (bool, np.bool_)):
    return False
  if isinstance(i, (int, np.integer)):
    return True
  if isinstance(i, (Array, np.ndarray)) and i.ndim == 0 and dtypes.is_integer(i.dtype):
    return True
  return False


def _is_traced_int(i) -> bool:
  return isinstance(i, Tracer) and i.ndim == 0 and dtypes.is_integer(i.dtype)


def _advanced_error(i) -> IndexError:
  what = type(i).__name__
  if hasattr(i, "shape"):
    what = f"an array of shape {tuple(i.shape)} and dtype {np.dtype(i.dtype).name}"
  return IndexError(
      f"Only integers, slices (`:`), ellipsis (`...`), None (`newaxis`) and scalar integer "
      f"arrays are valid indices here; got {what}. Advanced indexing with integer or boolean "
      f"arrays is not supported yet: use stagecraft.lax.dynamic_slice for traced offsets.")


def getitem(x: Any, idx: Any):
  """`x[idx]` for basic indices.

  Raises:
    IndexError: for out-of-bounds static integers, too many indices, several ellipses, or
      advanced (array) indices.
  """
  x = jnp.asarray(x)
  shape = x.shape
  nd = len(shape)
  if not isinstance(idx, tuple):
    idx = (idx,)
  n_ellipsis = sum(1 for i in idx if i is Ellipsis)
  if n_ellipsis > 1:
    raise IndexError("an index can only have a single ellipsis ('...')")
  consumed = sum(1 for i in idx if i is not None and i is not Ellipsis)
  if consumed > nd:
    raise IndexError(f"too many indices for array: array is {nd}-dimensional, but "
                     f"{consumed} were indexed")
  if n_ellipsis:
    k = idx.index(Ellipsis)
    idx = idx[:k] + (slice(None),) * (nd - consumed) + idx[k + 1:]
  else:
    idx = idx + (slice(None),) * (nd - consumed)

  start, limit, stride = [0] * nd, list(shape), [1] * nd
  rev_dims, squeeze_dims, dynamic = [], [], []
  out_shape = []
  dim = 0
  for i in idx:
    if i is None:
      out_shape.append(1)
      continue
    n = shape[dim]
    if isinstance(i, slice):
      st, sp, step = i.indices(n)
      length = len(range(st, sp, step))
      if step < 0:
        rev_dims.append(dim)
        st, step = n - 1 - st, -step
      start[dim], stride[dim] = st, step
      limit[dim] = st + (length - 1) * step + 1 if length else st
      out_shape.append(length)
    elif _is_int_index(i):
      k = operator.index(i) if not isinstance(i, Array) else int(i)
      if not -n <= k < n:
        raise IndexError(f"index {k} is out of bounds for axis {dim} with size {n}")
      k %= n
      start[dim], limit[dim] = k, k + 1
      squeeze_dims.append(dim)
    elif _is_traced_int(i):
      dynamic.append((dim, i))
      squeeze_dims.append(dim)
    else:
      raise _advanced_error(i)
    dim += 1

  out = x
  if rev_dims:
    out = lax.rev(out, tuple(rev_dims))
  if any(s != 0 for s in start) or list(limit) != list(shape) or any(s != 1 for s in stride):
    out = lax.slice(out, tuple(start), tuple(limit),
                    None if all(s == 1 for s in stride) else tuple(stride))
  if dynamic:
    cur = out.shape
    starts = [np.int32(0)] * nd
    sizes = list(cur)
    for d, i in dynamic:
      i = lax.convert_element_type(i, dtypes.int32) if i.dtype != dtypes.int32 else i
      # NB: negative indices count from the end, as NumPy; dynamic_slice then clamps.
      starts[d] = lax.select(lax.lt(i, np.int32(0)), lax.add(i, np.int32(cur[d])), i)
      sizes[d] = 1
    # Already wrapped once above: lax must not wrap again (x[-7] of size 5 clamps to 0).
    out = lax.dynamic_slice(out, starts, tuple(sizes), allow_negative_indices=False)
  if squeeze_dims:
    out = lax.squeeze(out, tuple(squeeze_dims))
  if tuple(out.shape) != tuple(out_shape):   # inserts the None (newaxis) dimensions
    out = lax.reshape(out, tuple(out_shape))
  return out
