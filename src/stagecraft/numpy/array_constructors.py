"""`array` and `asarray`: Arrays from Python scalars, nested lists, NumPy arrays, Arrays and
tracers, with JAX's numpy's default dtypes.

The bottom of `stagecraft.numpy`: it imports no other module of the package, so that the helpers
in `util` (which turn lists and scalars into Arrays) can build on it."""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from stagecraft import core, dtypes, lax
from stagecraft import sharding as sharding_lib
from stagecraft.core import Tracer
from stagecraft.lax.utils import KEY_TYPES
from stagecraft.interpreters import partial_eval as pe
from stagecraft.runtime import dispatch, spmd
from stagecraft.runtime.array import Array

__all__ = ["array", "asarray"]

_OBJECT_DTYPE = np.dtype(object)


def _nested_has_traced(obj) -> bool:
  if isinstance(obj, (list, tuple)):
    return any(_nested_has_traced(o) for o in obj)
  return isinstance(obj, (Tracer, Array))


def _nested_leaves(obj) -> list:
  if isinstance(obj, (list, tuple)):
    return [leaf for o in obj for leaf in _nested_leaves(o)]
  return [obj]


def _list_dtype(obj) -> np.dtype | None:
  """The dtype a nested list/tuple of host values converts to, as JAX's `array`: the JAX type
  promotion of its leaves (Python scalars weak, so `[0, np.float16(1)]` is float16; under
  strict promotion distinct strong dtypes raise TypePromotionError); an empty list is the
  default float. None for anything else (NumPy's own inference, then JAX's errors for invalid
  leaves)."""
  if not isinstance(obj, (list, tuple)):
    return None
  leaves = _nested_leaves(obj)
  if not leaves:
    return dtypes.default_float_dtype()
  if any(leaf is None or isinstance(leaf, (str, bytes)) for leaf in leaves):
    return None
  try:
    return dtypes.result_type(*leaves)
  except dtypes.TypePromotionError:
    raise
  except (TypeError, ValueError):
    return None


def _stack_rows(rows: list, dtype) -> Any:
  """JAX's conversion of a list holding traced values: each row converted to `dtype` (not
  weak), given a leading axis, and concatenated, 16 at a time (JAX's tree of
  concatenations)."""
  out = [lax.expand_dims(array(r, dtype, copy=False), (0,)) for r in rows]
  while len(out) > 16:
    out = [lax.concatenate(out[i:i + 16], 0) for i in range(0, len(out), 16)]
  return lax.concatenate(out, 0)


def _check_order(order):
  if order is not None and order != "K":
    raise NotImplementedError("Only implemented for order='K'")


def copy_array(x):
  """A new Array with the value of the Array `x`, on the same device or devices (a device
  copy: the result survives `x.delete()` and donation of `x`); for a tracer, or any `x` while
  a transformation traces, a staged `copy` equation (`lax.copy_p`, as JAX's
  `jnp.array(x, copy=True)` stages it)."""
  trace = core.current_trace()
  if isinstance(x, Tracer) or not (trace is core.eval_trace
                                   or isinstance(trace, core.CompileTimeEvalTrace)):
    # a concrete Array under a trace is staged as `copy` of the constant, as JAX's: XLA can
    # still fold what is computed from it (an optimization_barrier would stop that and change
    # the numbers, e.g. `lgamma` of a constant)
    return lax.copy_p.bind(x)
  # NB: one eager identity program: XLA allocates its result, distinct from the (undonated)
  # operand, and the eager path keeps the operand's device or sharding.
  return lax.optimization_barrier(x)


def _check_leaves(obj) -> None:
  """Raises JAX's error for the first leaf of nested lists/tuples `obj` that no array holds:
  ValueError for a None anywhere, else TypeError naming the first non-numeric leaf. Called
  only once NumPy has refused `obj` or made a string or object array of it."""
  leaves, stack = [], [obj]
  while stack:
    x = stack.pop()
    if isinstance(x, (list, tuple)):
      stack.extend(reversed(x))
    else:
      leaves.append(x)
  if any(leaf is None for leaf in leaves):
    raise ValueError("None is not a valid value for jnp.array")
  for leaf in leaves:
    try:
      dt = np.asarray(leaf).dtype
    except Exception:   # noqa: BLE001 (the leaf is what cannot be converted)
      dt = _OBJECT_DTYPE
    if dt.kind in "USOV":
      raise TypeError(f"Value '{leaf}' with dtype {dt} is not a valid JAX array type. "
                      f"Only arrays of numeric types are supported by JAX.")


def _place(out, device):
  """`out` put on `device` (a device or sharding; committed), for concrete Arrays."""
  if device is None or isinstance(out, Tracer):
    return out
  return spmd.device_put(out, device)


def _kind(dtype) -> str | None:
  try:
    return np.dtype(dtype).kind
  except TypeError:   # an extended dtype (typed keys)
    return None


def array(object: Any, dtype: Any = None, *args, copy: bool = True, order: str | None = "K",
          ndmin: int = 0, device: Any = None, out_sharding: Any = None) -> Array:
  """Creates an Array from `object` (a nested list/tuple of scalars or arrays, a NumPy array,
  an Array, or a scalar).

  Args:
    object: the data.
    dtype: the result dtype (canonicalized; default: inferred as JAX's numpy does — Python
      floats give float32 unless x64 is on; a bare Python scalar gives a weakly typed
      result).
    copy: copy an Array input (default True, so the result never shares a buffer with it;
      host data is always copied). Passing copy, order or ndmin positionally is deprecated,
      as in JAX.
    order: 'K' or None (other layouts are not supported).
    ndmin: the least number of dimensions of the result (ones are prepended).
    device: a device or sharding to commit the result to.
    out_sharding: as `device` (a sharding).

  Returns:
    Array (or a tracer when `object` holds tracers).

  Raises:
    TypeError: for objects that are not array-like, strings and bytes included (JAX's
      message: "Value 'abc' with dtype <U3 is not a valid JAX array type. ..."). With
      `dtype`, such data is converted by NumPy (`np.asarray(object, dtype)`, as JAX does),
      so strings of numbers convert and NumPy's ValueError/TypeError stands otherwise.
    NotImplementedError: for `order` other than 'K' or None.
    OverflowError: for a Python int out of the range of the result dtype.
  """
  if type(object) in KEY_TYPES and not ndmin and (dtype is None or dtype == object.dtype):
    return object.copy() if copy else object
  if args:
    warnings.warn("Passing the copy, order, and ndmin arguments to jnp.array positionally "
                  "is deprecated. Use keyword arguments instead.", DeprecationWarning,
                  stacklevel=2)
    if len(args) > 3:
      raise TypeError(f"array() takes at most 5 positional arguments ({2 + len(args)} given)")
    for i, (name, given, default) in enumerate(zip(("copy", "order", "ndmin"),
                                                   (copy, order, ndmin), (True, "K", 0))):
      if i < len(args) and given != default:   # NB: as JAX's, a keyword left at its default
        raise TypeError(f"array() got multiple values for argument '{name}'")
    copy, order, ndmin = (*args, *(copy, order, ndmin)[len(args):])
  _check_order(order)
  if dtype is not None:
    dtype = dtypes.check_user_dtype(dtype, "array")
  device = device if device is not None else out_sharding
  if (not copy and isinstance(object, np.ma.MaskedArray) and device is None
      and ndmin <= object.ndim and (dtype is None or np.dtype(dtype) == object.dtype)):
    # NB: as JAX's (whose no-copy path puts the array on the device): JAX's ValueError;
    # a copy, or a conversion, strips the mask
    core.get_aval(object)
  if isinstance(object, (Array, Tracer)):
    if copy and isinstance(object, Tracer):   # as JAX: the staged copy, then the conversion
      object, copy = copy_array(object), False
    out = object if dtype is None else lax.convert_element_type(
        object, dtypes.canonicalize_dtype(dtype))
    if copy and out is object:
      out = copy_array(out)
  elif isinstance(object, (list, tuple)) and _nested_has_traced(object):
    leaves = _nested_leaves(object)
    if any(leaf is None for leaf in leaves):
      raise ValueError("None is not a valid value for jnp.array")
    out = _stack_rows(object, dtypes.canonicalize_dtype(
        dtypes.result_type(*leaves) if dtype is None else dtype))
  else:
    if hasattr(object, "__jax_array__"):
      return array(object.__jax_array__(), dtype, copy=copy, order=order, ndmin=ndmin,
                   device=device)
    base = dtypes.python_scalar_base(object)
    if base is not None:   # an IntEnum member: its int, as JAX canonicalizes it
      object = base(object)
    is_scalar = dtypes.is_python_scalar(object)
    weak = is_scalar and type(object) is not bool and dtype is None
    if is_scalar:
      dt = dtypes.python_scalar_dtype(type(object)) if dtype is None else (
          dtypes.canonicalize_dtype(dtype))
      if type(object) is int and dtype is None:
        core.check_int_range(object, dt)
      host = np.asarray(object, dt)
    else:
      wide = _list_dtype(object) if dtype is None else None
      try:
        host = np.asarray(object) if wide is None else np.asarray(object, wide)
      except ValueError:   # ragged nesting: NumPy's ValueError, as JAX (a None first)
        _check_leaves(object)
        raise
      except OverflowError:   # a Python int out of the result dtype's range: NumPy's, as JAX
        raise
      except Exception as e:
        raise TypeError(f"array: cannot convert an object of type {type(object).__name__} "
                        f"to an array: {e}") from e
      if dtype is not None and (host.dtype.kind == "T") != (_kind(dtype) == "T"):
        # NB: to or from a string array: JAX's words
        raise TypeError(f"Cannot make an array with dtype {np.dtype(dtype)} from an object "
                        f"with dtype {host.dtype}.")
      if host.dtype.kind in "USO" and dtype is not None:
        # As JAX: with a dtype, NumPy converts the data to it (jnp.array("1.5", dtype=float)
        # is 1.5) and NumPy's error stands for what it cannot convert ("could not convert
        # string to float: 'abc'"); a None leaf is JAX's ValueError first.
        if not isinstance(object, np.ndarray) and any(
            leaf is None for leaf in _nested_leaves(object)):
          raise ValueError("None is not a valid value for jnp.array")
        host = np.asarray(object, dtype=dtypes.canonicalize_dtype(dtype))
      if host.dtype.kind in "USO":   # strings, bytes, objects, None: JAX's errors
        if isinstance(object, np.ndarray):
          raise TypeError(f"Value '{object}' with dtype {host.dtype} is not a valid JAX "
                          f"array type. Only arrays of numeric types are supported by JAX.")
        _check_leaves(object)
        raise TypeError(f"Value '{object}' with dtype {host.dtype} is not a valid JAX array "
                        f"type. Only arrays of numeric types are supported by JAX.")
      if host.dtype.type is np.void:   # raw bytes or records: no array type holds them
        raise TypeError(f"array: an array of dtype {host.dtype} (raw bytes or records) is "
                        f"not a valid array type; only arrays of numeric types are "
                        f"supported. View it as a numeric dtype first (x.view(np.uint8)).")
      dt = dtypes.canonicalize_dtype(host.dtype if dtype is None else dtype)
      host = host.astype(dt, copy=False)
    aval = core.ShapedArray(host.shape, dt, weak)
    out = pe.literal_array(Array(dispatch.to_buffer(host, aval), aval))
    if device is None and core.current_trace() is core.eval_trace:
      mesh = sharding_lib.concrete_mesh()
      if mesh is not None:   # NB: as JAX's, under `set_mesh`: replicated over it, `P()`
        device = sharding_lib.NamedSharding(mesh, sharding_lib.PartitionSpec())
  shape = core.get_aval(out).shape
  if ndmin > len(shape):   # as JAX's: a broadcast_in_dim adding leading dimensions
    out = lax.expand_dims(out, tuple(range(ndmin - len(shape))))
  return _place(out, device)


def asarray(a: Any, dtype: Any = None, order: str | None = None, *, copy: bool | None = None,
            device: Any = None, out_sharding: Any = None) -> Array:
  """Like `array`, but an Array (or tracer) of the right dtype is returned as it is unless
  `copy=True`.

  Args:
    a, dtype, order, device, out_sharding: as for `array`.
    copy: True: always copy; None or False: copy only where a conversion is needed (host
      data is always copied to the device).

  Raises:
    As `array`.
  """
  if type(a) in KEY_TYPES and (dtype is None or dtype == a.dtype):
    return a.copy() if copy else a
  _check_order(order)
  if dtype is not None:
    dtype = dtypes.check_user_dtype(dtype, "asarray")
  device = device if device is not None else out_sharding
  if isinstance(a, (Array, Tracer)) and (dtype is None or dtype == a.dtype):
    if dtype is not None and core.get_aval(a).weak_type:
      # an explicit dtype makes the result strongly typed (JAX's `convert_element_type`
      # with weak_type=False; optimistix compares `eval_shape` structures with weak types)
      a = lax.convert_element_type(a, dtype, weak_type=False)
    return _place(copy_array(a) if copy else a, device)
  return array(a, dtype=dtype, copy=bool(copy), device=device)
