"""`array` and `asarray`: Arrays from Python scalars, nested lists, NumPy arrays, Arrays and
tracers, with JAX's numpy's default dtypes.

The bottom of `stagecraft.numpy`: it imports no other module of the package, so that the helpers
in `util` (which turn lists and scalars into Arrays) can build on it."""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import core, dtypes, lax
from stagecraft.core import Tracer
from stagecraft.runtime import dispatch
from stagecraft.runtime.array import Array

__all__ = ["array", "asarray"]

_OBJECT_DTYPE = np.dtype(object)


def _nested_has_traced(obj) -> bool:
  if isinstance(obj, (list, tuple)):
    return any(_nested_has_traced(o) for o in obj)
  return isinstance(obj, (Tracer, Array))


def _stack_leaves(leaves: list) -> Array:
  """`stack(leaves)` for the Arrays and tracers of a nested list: a new leading axis, then one
  concatenate in the promoted dtype (the equations `stack` would stage)."""
  shapes = [core.get_aval(a).shape for a in leaves]
  if len(set(shapes)) != 1:
    raise ValueError(f"All input arrays must have the same shape, got {shapes}.")
  leaves = [lax.expand_dims(a, (0,)) for a in leaves]
  if len(leaves) == 1:
    return leaves[0]
  dtype, weak = dtypes.result_type(*leaves, return_weak_type_flag=True)
  avals = [core.get_aval(a) for a in leaves]
  return lax.concatenate([a if (aval.dtype, aval.weak_type) == (dtype, weak) else
                          lax.convert_element_type(a, dtype, weak_type=weak)
                          for a, aval in zip(leaves, avals)], 0)


def array(object: Any, dtype: Any = None, copy: bool = True, ndmin: int = 0) -> Array:
  """Creates an Array from `object` (a nested list/tuple of scalars or arrays, a NumPy array,
  an Array, or a scalar).

  Args:
    object: the data.
    dtype: the result dtype (canonicalized; default: inferred as JAX's numpy does — Python
      floats give float32 unless x64 is on; a bare Python scalar gives a weakly typed
      result).
    copy, ndmin: as in NumPy.

  Returns:
    Array (or a tracer when `object` holds tracers).

  Raises:
    TypeError: for objects that are not array-like.
  """
  if isinstance(object, (Array, Tracer)):
    out = object if dtype is None else lax.convert_element_type(
        object, dtypes.canonicalize_dtype(dtype))
  elif isinstance(object, (list, tuple)) and _nested_has_traced(object):
    out = _stack_leaves([array(o) for o in object]) if object else array(np.zeros((0,)))
    if dtype is not None:
      out = lax.convert_element_type(out, dtypes.canonicalize_dtype(dtype))
  else:
    if hasattr(object, "__jax_array__"):
      return array(object.__jax_array__(), dtype, copy, ndmin)
    is_scalar = dtypes.is_python_scalar(object)
    weak = is_scalar and type(object) is not bool and dtype is None
    if is_scalar:
      dt = dtypes.python_scalar_dtype(type(object)) if dtype is None else (
          dtypes.canonicalize_dtype(dtype))
      if type(object) is int and dtype is None:
        core.check_int_range(object, dt)
      host = np.asarray(object, dt)
    else:
      try:
        host = np.asarray(object)
      except Exception as e:
        raise TypeError(f"array: cannot convert an object of type {type(object).__name__} "
                        f"to an array: {e}") from e
      if host.dtype == _OBJECT_DTYPE:
        raise TypeError(f"array: expected numbers or nested lists of numbers, got an object "
                        f"array from {type(object).__name__}.")
      dt = dtypes.canonicalize_dtype(host.dtype if dtype is None else dtype)
      host = host.astype(dt, copy=False)
    aval = core.ShapedArray(host.shape, dt, weak)
    out = Array(dispatch.to_buffer(host, aval), aval)
  shape = core.get_aval(out).shape
  if ndmin > len(shape):
    out = lax.reshape(out, (1,) * (ndmin - len(shape)) + shape)
  return out


def asarray(a: Any, dtype: Any = None, order: str | None = None, *, copy=None) -> Array:
  """Like `array`, without copying Arrays of the right dtype."""
  if isinstance(a, (Array, Tracer)) and (dtype is None or
                                         dtypes.canonicalize_dtype(dtype) == a.dtype):
    return a
  return array(a, dtype=dtype)
