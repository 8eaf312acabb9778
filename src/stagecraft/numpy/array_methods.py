"""Python operators and NumPy-style methods of `Array` and of tracers, routed to
`stagecraft.numpy` (and so to primitives). Attached at import, as JAX does; the set and the
signatures are those of `jax.Array` (JAX 0.10.2)."""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

from stagecraft import core, dtypes, lax
from stagecraft.core import Tracer
from stagecraft.errors import ConcretizationTypeError
from stagecraft.numpy import (array_constructors, contractions, indexing, lax_numpy,
                              manipulation, reductions, sorting, ufuncs)
from stagecraft.runtime import spmd
from stagecraft.runtime.array import Array

try:
  from jaxlib._jax import ArrayImpl as _JaxArray
except ImportError:  # pragma: no cover
  _JaxArray = Array

_accepted = (Array, Tracer, np.ndarray, np.generic, int, float, complex, bool, _JaxArray,
             core.WeakScalarValue)


def _binop(fn, swap=False, opchar: str = "", rejected: tuple = ()):
  """The operator method `fn(self, other)` (`fn(other, self)` if `swap`). As JAX's: an
  operand with `__jax_array__` (a flax.nnx Variable) is converted first; an operand of a
  type in `rejected` (Python collections, for `==`/`!=`, `+`, `*`) raises JAX's TypeError
  (Python would fall back to identity or sequence repetition); others give NotImplemented."""
  def op(self, other):
    if type(other) is not Array:
      if hasattr(other, "__jax_array__"):
        other = other.__jax_array__()
      if not isinstance(other, _accepted):
        if type(other) in rejected:
          a, b = (other, self) if swap else (self, other)
          raise TypeError(f"unsupported operand type(s) for {opchar}: "
                          f"{type(a).__name__!r} and {type(b).__name__!r}")
        return NotImplemented
    return fn(other, self) if swap else fn(self, other)
  return op


_SEQS = (tuple, list)
_COLLECTIONS = (dict, list, set, tuple)


def _reshape(self, *shape, order="C", out_sharding=None):
  if len(shape) == 1:   # NB: `x.reshape(7)` is reshape(x, 7), as JAX's (its messages say `7`)
    shape = shape[0]
  if out_sharding is not None:
    return manipulation.reshape(self, shape, order, out_sharding=out_sharding)
  return manipulation.reshape(self, shape, order)


def _transpose(self, *axes):
  if len(axes) == 1 and (axes[0] is None or not isinstance(axes[0], (int, np.integer))):
    axes = axes[0]
  return manipulation.transpose(self, axes or None)


def _round(self, decimals=0, out=None):
  if out is not None:
    raise NotImplementedError("The 'out' argument to jnp.round is not supported.")
  return ufuncs.round(self, decimals)


def _operator_round(self, ndigits=None):
  """`round(x)`: to the default integer dtype (as Python's round of a number); `round(x, n)`:
  the float rounded to n decimals (as JAX's numpy)."""
  out = ufuncs.round(self, ndigits or 0)
  return out if ndigits is not None else lax_numpy.astype(out, int)


def _contains(self, other):
  """`other in x`: whether the 1-D `x` holds the scalar `other` (an Array; JAX's rules,
  stricter than NumPy's)."""
  if other is None or isinstance(other, str):
    raise TypeError(f"Array.__contains__: unsupported operand type {type(other)}.")
  query = array_constructors.asarray(other)
  if self.ndim != 1:
    raise ValueError(f"Array.__contains__: search array must be one-dimensional, got "
                     f"arr.shape={self.shape}.")
  if query.ndim != 0:
    raise ValueError(f"Array.__contains__: query value must be a scalar, got "
                     f"query.shape={query.shape}")
  return reductions.any(ufuncs.equal(self, query))


def _setitem(self, idx, value):
  raise TypeError("JAX arrays are immutable and do not support in-place item assignment. "
                  "Instead of x[idx] = y, use x = x.at[idx].set(y) or another .at[] method: "
                  "https://docs.jax.dev/en/latest/_autosummary/jax.numpy.ndarray.at.html")


def _flat(self):
  raise NotImplementedError("JAX Arrays do not implement the arr.flat property: consider "
                            "arr.flatten() instead.")


def _array_namespace(self, *, api_version=None):
  """The Array API namespace of these arrays: `stagecraft.numpy`.

  Raises:
    ValueError: for an `api_version` other than None and '2024.12' (JAX's one version).
  """
  if api_version is not None and api_version != "2024.12":
    raise ValueError(f"api_version={api_version!r} is not available; available versions "
                     f"are: ['2024.12']")
  return sys.modules[__package__]   # NB: this package, already imported (no upward import)


def view(self, dtype: Any = None, type: None = None):
  """The bits of `self` reinterpreted as `dtype`; with a different item size, the last axis
  shrinks or grows accordingly (bool counts as 8 bits, complex as two floats).

  Raises:
    NotImplementedError: for `type`.
    ValueError: for a 0-d array and a different item size, or a last axis whose byte size
      the new item size does not divide.
  """
  if type is not None:
    raise NotImplementedError("`type` argument of array.view() is not supported.")
  if dtype is None:
    return self
  dtype = dtypes.check_user_dtype(dtype, "view")
  src = self.dtype
  bits_in, bits_out = dtypes.itemsize_bits(src), dtypes.itemsize_bits(dtype)   # int4: 4
  if self.ndim == 0:
    if bits_in != bits_out:
      raise ValueError("view() of a 0d array is only supported if the itemsize is unchanged.")
    return manipulation.squeeze(view(manipulation.expand_dims(self, 0), dtype))
  if (self.shape[-1] * bits_in) % bits_out:
    raise ValueError("When changing to a larger dtype, its size must be a divisor of the "
                     "total size in bytes of the last axis of the array.")
  if src == dtype:
    return self
  if src == dtypes.bool_:
    return view(lax.convert_element_type(self, np.uint8), dtype)
  if dtypes.is_complex(src):   # interleave (real, imag) pairs on the last axis
    re, im = ufuncs.real(self), ufuncs.imag(self)
    pairs = manipulation.stack([re, im], axis=-1)
    return view(manipulation.reshape(pairs, (*self.shape[:-1], 2 * self.shape[-1])), dtype)
  if dtype == dtypes.bool_:
    return lax.convert_element_type(view(self, np.uint8), dtype)
  if dtypes.is_complex(dtype):
    part = np.dtype(f"float{dtype.itemsize * 4}")
    flt = view(self, part)
    flt = manipulation.reshape(flt, (*flt.shape[:-1], flt.shape[-1] // 2, 2))
    return lax.complex(flt[..., 0], flt[..., 1])
  if bits_in < bits_out:
    k = bits_out // bits_in
    return lax.bitcast_convert_type(
        manipulation.reshape(self, (*self.shape[:-1], self.shape[-1] // k, k)), dtype)
  if bits_in > bits_out:
    out = lax.bitcast_convert_type(self, dtype)
    # NB: the size spelled out (a -1 cannot be resolved for an empty array)
    return manipulation.reshape(out, (*self.shape[:-1], self.shape[-1] * (bits_in // bits_out)))
  return lax.bitcast_convert_type(self, dtype)


def byteswap(self):
  """The array with the bytes of each element reversed (little- <-> big-endian); complex
  values swap their real and imaginary parts separately."""
  if dtypes.is_complex(self.dtype):
    return lax.complex(byteswap(ufuncs.real(self)), byteswap(ufuncs.imag(self)))
  if self.dtype.itemsize == 1:
    return array_constructors.array(self, copy=True)
  x = self if self.ndim else manipulation.expand_dims(self, 0)
  u8 = view(x, np.uint8)
  n = self.dtype.itemsize
  u8 = manipulation.reshape(u8, (*x.shape, n))
  u8 = lax.rev(u8, (u8.ndim - 1,))
  out = view(manipulation.reshape(u8, (*x.shape[:-1], x.shape[-1] * n)), self.dtype)
  return out if self.ndim else manipulation.squeeze(out, 0)


def _multi_slice(self, start_indices, limit_indices, removed_dims):
  """Slices `self[starts:limits]` for each entry, with the `removed_dims` squeezed."""
  out = []
  for starts, limits, removed in zip(start_indices, limit_indices, removed_dims):
    sliced = lax.slice(self, starts, limits)
    out.append(lax.squeeze(sliced, removed) if removed else sliced)
  return out


def _to_device(self, device, *, stream=None):
  if stream is not None:
    raise NotImplementedError("stream argument of array.to_device()")
  if isinstance(self, Tracer):
    return self   # NB: placement inside a trace is the enclosing computation's
  return spmd.device_put(self, device)


def _addressable_data(self, index: int):
  return self.addressable_shards[index].data


def _concrete_only(name: str, text: str, is_property: bool):
  """The method (property) `name` of arrays, which a tracer has no value for: it raises
  JAX's ConcretizationTypeError, whose context line is `text` (with `{what}`, the traced
  value) followed by the value's origin (so that, as in JAX's, the origin is named twice)."""
  def raise_(self, *args, **kwargs):
    what = f"traced array with shape {self.aval.str_short(False)}"
    origin = self._trace.origin_msg(self)
    raise self._concretization_error(name, fix=text.format(what=what) + origin)
  return property(raise_) if is_property else raise_


# JAX's words for each (`jax._src.core.Tracer`).
_CONCRETE_ONLY = {
    "committed": ("The 'committed' attribute is not available on {what}.", True),
    "addressable_shards": ("The 'addressable_shards' attribute is not available on {what}.",
                           True),
    "global_shards": ("The global_shards property was called on {what}.", True),
    "is_fully_addressable": ("The is_fully_addressable property was called on {what}.", True),
    "is_fully_replicated": ("The is_fully_replicated property was called on {what}.", True),
    "traceback": ("The traceback property was called on {what}.", True),
    "addressable_data": ("The addressable_data() method was called on {what}.", False),
    "delete": ("The delete() method was called on {what}.", False),
    "devices": ("The devices() method was called on {what}.", False),
    "is_deleted": ("The is_deleted() method was called on {what}.", False),
    "on_device_size_in_bytes": ("The on_device_size_in_bytes() method was called on {what}.",
                                False),
    "unsafe_buffer_pointer": ("The unsafe_buffer_pointer() method was called on {what}.",
                              False),
    "tolist": ("The tolist() method was called on {what}.", False),
    "tobytes": ("The tobytes() method was called on {what}.", False),
    "__dlpack__": ("The __dlpack__() method was called on {what}.", False),
}


def _tracer_device(self):
  raise AttributeError(f"{type(self).__name__} has no attribute device")




def _tracer_iter(self):
  """Iterates a traced array over its first axis, as JAX's tracers do: one
  `lax.index_in_dim(x, i, keepdims=False)` (a slice and a squeeze) per row."""
  if not self.ndim:
    raise TypeError("iteration over a 0-d array")
  return (lax.index_in_dim(self, i, keepdims=False) for i in range(self.shape[0]))


_methods = {
    "__add__": _binop(ufuncs.add, False, "+", _SEQS),
    "__radd__": _binop(ufuncs.add, True, "+", _SEQS),
    "__sub__": _binop(ufuncs.subtract), "__rsub__": _binop(ufuncs.subtract, True),
    "__mul__": _binop(ufuncs.multiply, False, "*", _SEQS),
    "__rmul__": _binop(ufuncs.multiply, True, "*", _SEQS),
    "__truediv__": _binop(ufuncs.divide), "__rtruediv__": _binop(ufuncs.divide, True),
    "__floordiv__": _binop(ufuncs.floor_divide), "__rfloordiv__": _binop(ufuncs.floor_divide, True),
    "__mod__": _binop(ufuncs.remainder), "__rmod__": _binop(ufuncs.remainder, True),
    "__divmod__": _binop(ufuncs.divmod), "__rdivmod__": _binop(ufuncs.divmod, True),
    "__pow__": _binop(ufuncs.power), "__rpow__": _binop(ufuncs.power, True),
    "__matmul__": _binop(contractions.matmul), "__rmatmul__": _binop(contractions.matmul, True),
    "__and__": _binop(ufuncs.bitwise_and), "__rand__": _binop(ufuncs.bitwise_and, True),
    "__or__": _binop(ufuncs.bitwise_or), "__ror__": _binop(ufuncs.bitwise_or, True),
    "__xor__": _binop(ufuncs.bitwise_xor), "__rxor__": _binop(ufuncs.bitwise_xor, True),
    "__lshift__": _binop(ufuncs.left_shift), "__rlshift__": _binop(ufuncs.left_shift, True),
    "__rshift__": _binop(ufuncs.right_shift), "__rrshift__": _binop(ufuncs.right_shift, True),
    # NB: JAX's `!=` names the operator `==` in its message
    "__eq__": _binop(ufuncs.equal, False, "==", _COLLECTIONS),
    "__ne__": _binop(ufuncs.not_equal, False, "==", _COLLECTIONS),
    "__lt__": _binop(ufuncs.less), "__le__": _binop(ufuncs.less_equal),
    "__gt__": _binop(ufuncs.greater), "__ge__": _binop(ufuncs.greater_equal),
    "__neg__": ufuncs.negative, "__pos__": ufuncs.positive, "__abs__": ufuncs.absolute,
    "__invert__": ufuncs.invert, "__getitem__": indexing.getitem, "__setitem__": _setitem,
    "__round__": _operator_round, "__contains__": _contains,
    "__copy__": lambda self: array_constructors.array(self, copy=True),
    "__deepcopy__": lambda self, memo: array_constructors.array(self, copy=True),
    "__array_namespace__": _array_namespace,
    "astype": lambda self, dtype, copy=False, device=None: array_constructors.asarray(
        lax_numpy.astype(self, dtype), copy=copy, device=device),
    "reshape": _reshape, "transpose": _transpose,
    "T": property(lambda self: manipulation.transpose(self)),
    "mT": property(lambda self: manipulation.matrix_transpose(self)),
    "ravel": lambda self, order="C", *, out_sharding=None: manipulation.ravel(
        self, order, out_sharding=out_sharding),
    "flatten": lambda self, order="C", *, out_sharding=None: manipulation.ravel(
        self, order, out_sharding=out_sharding),
    "squeeze": lambda self, axis=None: manipulation.squeeze(self, axis),
    "swapaxes": manipulation.swapaxes,
    "clip": lambda self, min=None, max=None: ufuncs.clip(self, min=min, max=max),
    "round": _round, "dot": contractions.dot,
    "conj": ufuncs.conjugate, "conjugate": ufuncs.conjugate,
    "real": property(ufuncs.real), "imag": property(ufuncs.imag),
    "sum": reductions.sum, "prod": reductions.prod, "max": reductions.max,
    "min": reductions.min, "mean": reductions.mean, "var": reductions.var,
    "std": reductions.std, "all": reductions.all, "any": reductions.any,
    "argmax": reductions.argmax, "argmin": reductions.argmin, "ptp": reductions.ptp,
    "cumsum": reductions.cumsum, "cumprod": reductions.cumprod,
    "sort": sorting.sort, "argsort": sorting.argsort, "argpartition": sorting.argpartition,
    "searchsorted": sorting.searchsorted,
    "nonzero": lambda self, *, fill_value=None, size=None: indexing.nonzero(
        self, size=size, fill_value=fill_value),
    "take": indexing.take,
    "compress": lambda self, condition, axis=None, *, out=None, size=None, fill_value=0: (
        lax_numpy.compress(condition, self, axis, size=size, fill_value=fill_value, out=out)),
    "choose": lambda self, choices, out=None, mode="raise": lax_numpy.choose(
        self, choices, out, mode),
    "repeat": lambda self, repeats, axis=None, *, total_repeat_length=None, out_sharding=None: (
        lax_numpy.repeat(self, repeats, axis, total_repeat_length=total_repeat_length,
                         out_sharding=out_sharding)),
    "diagonal": lax_numpy.diagonal, "trace": lax_numpy.trace,
    "copy": lambda self: array_constructors.array(self, copy=True),
    "view": view, "byteswap": byteswap,
    "to_device": _to_device,
    "_split": manipulation.split, "_multi_slice": _multi_slice,
    "flat": property(_flat),
    "at": property(indexing.at),
}

# Attributes of a buffer: on Arrays they read the buffer; on tracers they raise as JAX's do.
_array_only = {
    "addressable_data": _addressable_data,
    "is_fully_addressable": property(lambda self: True),   # NB: one process
    "global_shards": property(lambda self: self.addressable_shards),
    "tobytes": lambda self, order="C": np.asarray(self).tobytes(order),
}
_tracer_only = {
    # NB: an Array's warns (deprecated; runtime/array.py), a tracer's answers, as JAX's
    "__numpy_dtype__": property(lambda self: self.dtype),
    "nbytes": property(lambda self: self.size * self.dtype.itemsize),
    "itemsize": property(lambda self: self.dtype.itemsize),
    "device": property(_tracer_device),
    "__iter__": _tracer_iter,
    **{name: _concrete_only(name, *spec) for name, spec in _CONCRETE_ONLY.items()},
}
# NB: `sharding`, `block_until_ready` and `copy_to_host_async` of a tracer are AttributeErrors
# in JAX's words (`core.Tracer.__getattr__`), so that `hasattr` answers False.


def _attach(cls, methods):
  for name, fn in methods.items():
    setattr(cls, name, fn)


_attach(Array, _methods)
_attach(Tracer, _methods)
_attach(Array, _array_only)
_attach(Tracer, _tracer_only)
