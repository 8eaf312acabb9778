"""Array creation without arithmetic: filled arrays (`full`, `zeros`, `ones`, `empty` and their
`_like` forms), `arange`, `eye`, `identity`, `tri`, `meshgrid`, and Arrays from host data
(`copy`, `frombuffer`, `fromstring`, `load`; `save` and `savez` write host data).

Ranges computed in the graph (`linspace`, `logspace`, `geomspace`) and index grids (`indices`,
`fromfunction`) are in `lax_numpy`, above the ufuncs and joins they use."""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

from stagecraft import core, dlpack, dtypes, lax, shape_poly, tree_util
from stagecraft import sharding as sharding_lib
from stagecraft.errors import ConcretizationTypeError
from stagecraft.lax import elementwise, prng
from stagecraft.lax import shape as lax_shape
from stagecraft.lax.spmd import reshard, reshard_to_type
from stagecraft.lax.utils import FORWARD, KEY_TYPES, on_keys
from stagecraft.numpy.array_constructors import array, asarray
from stagecraft.numpy.util import (ArrayLike, as_array, asarray_or_scalar, broadcast_to_shape,
                                   canonical_shape, check_concrete, convert_dtype, dtype_of,
                                   ndim_of, python_scalar_value, shape_of)
from stagecraft.interpreters import partial_eval as pe
from stagecraft.runtime import dispatch, spmd
from stagecraft.runtime.array import Array

__all__ = ["full", "zeros", "ones", "empty", "zeros_like", "ones_like", "full_like", "empty_like",
           "arange", "eye", "identity", "tri", "meshgrid", "copy", "frombuffer", "fromstring",
           "fromiter", "fromfile", "load", "save", "savez", "from_dlpack"]


# ---------------------------------------------------------------------------
# Placement (`device=` and JAX's `out_sharding=`)


def placed(x: Any, device: Any, out_sharding: Any, where: str, like: Any = None) -> Any:
  """(A helper of the package, not in `stagecraft.numpy`.) `x` committed to `device` (a device or a sharding), or laid out by `out_sharding` (a
  NamedSharding, or a PartitionSpec over the mesh of `set_mesh`): on a mesh of Explicit axes
  the result's type has that sharding (`f32[8@x,4]`), as `reshard` gives it. Without
  either, the `_like` forms (`like`: their prototype, when the shape is kept) keep the
  prototype's sharding in types, as JAX's `full_like` does.

  Raises:
    ValueError: both `device` and `out_sharding` given; a bare PartitionSpec with no mesh
      set; a spec that does not fit the shape.
  """
  if device is not None and out_sharding is not None:
    raise ValueError(f"{where}: pass only one of `device` and `out_sharding`, got "
                     f"device={device!r} and out_sharding={out_sharding!r}.")
  if out_sharding is not None:
    return reshard(x, out_sharding)
  if device is not None:
    return spmd.device_put(x, device)
  ts = getattr(getattr(like, "aval", None), "_sharding", None)
  if ts is not None and isinstance(like, (Array, core.Tracer)):
    return reshard_to_type(x, ts, None)
  if (type(like) is Array and like.committed and type(x) is Array
      and not x.aval.weak_type and like._buf is not None):
    # NB: as JAX's `full_like`: a concrete, committed prototype's sharding (a device, or a
    # NamedSharding over a concrete mesh: optax's zeros_like of sharded parameters)
    return spmd.device_put(x, like.sharding)
  if (hasattr(like, "__jax_array__") and not isinstance(like, (Array, core.Tracer))
      and type(x) is Array and not x.aval.weak_type):
    # NB: as JAX's `full_like`: a duck array's own sharding over a concrete mesh (optax's
    # zeros_like of flax's hijax Variables)
    s = getattr(like, "sharding", None)
    if isinstance(s, sharding_lib.NamedSharding) and isinstance(s.mesh, sharding_lib.Mesh):
      return spmd.device_put(x, s)
  return x


# ---------------------------------------------------------------------------
# Filled arrays


def full(shape: Any, fill_value: ArrayLike, dtype: Any = None, *, device: Any = None,
         out_sharding: Any = None) -> Array:
  """An array of `shape` filled with `fill_value` (its dtype unless `dtype` is given),
  committed to `device` or laid out by `out_sharding` (see `zeros`).

  With a typed-key `dtype` (`keys.dtype`, `key<fry>`) the result is a key array whose key
  data words all hold `fill_value` converted to uint32 (or, for a key `fill_value`, whose
  keys are that key broadcast), as JAX's."""
  if dtype is None and type(fill_value) in KEY_TYPES:   # the keys broadcast, as JAX's
    return placed(on_keys(broadcast_to_shape, fill_value, canonical_shape(shape),
                          reuse=FORWARD), device, out_sharding, "full")
  if _is_key_dtype(dtype):
    return placed(_keys_full(shape, fill_value), device, out_sharding, "full")
  if dtype is not None:
    dtype = dtypes.check_user_dtype(dtype, "full")
  return placed(_full(shape, fill_value, dtype), device, out_sharding, "full")


def _full(shape: Any, fill_value: ArrayLike, dtype: Any = None) -> Array:
  shape = canonical_shape(shape)
  fill = asarray_or_scalar(fill_value)
  if shape_of(fill) == ():
    if dtype is not None:
      dt = dtypes.canonicalize_dtype(dtype)
    elif dtypes.is_python_scalar(fill):
      dt = dtypes.python_scalar_dtype(type(fill))
    else:
      dt = dtype_of(fill)
    # NB: as JAX, a weakly typed fill (a Python scalar) without a dtype gives a weak result.
    return _filled(shape, fill, dt, dtype is None and dtypes.is_weakly_typed(fill))
  # NB: as JAX, `asarray(fill, dtype)`: NumPy data converted on the host
  return broadcast_to_shape(asarray(fill, dtype), shape)


def _filled(shape: tuple[int, ...], fill: Any, dtype: np.dtype, weak: bool) -> Array:
  """`T[*shape]` filled with the scalar `fill`, as JAX's `lax.full` builds it: the fill is
  converted first (a static fill on the host, a traced one
  by `convert_element_type`), then broadcast (a Python int wraps around to `dtype`:
  `full((), 2**32 - 1, uint32)` and `full((), 2**31, int32)` as JAX's; OverflowError, in
  NumPy's words, beyond 64 bits); for `shape == ()` there is nothing to
  broadcast, so a static fill gives a constant (a literal in a jaxpr, no equation)."""
  # NB: so is a closed-over Array while tracing (JAX stages it as a constvar).
  if isinstance(fill, core.Tracer) or (
      type(fill) is Array and not pe.is_literal_array(fill)
      and not isinstance(core.current_trace(), core.EvalTrace)):
    value = convert_dtype(fill, dtype, weak)
    return value if shape == () else lax.broadcast_in_dim(value, shape, ())
  if type(fill) is int:
    # NB: as JAX's `lax.full`: the int goes through NumPy (int64, uint64 above 2**63-1,
    # NumPy's OverflowError beyond) and wraps around to `dtype`; no default-int range check
    value = np.asarray(fill).astype(dtype)[()]
  elif dtypes.is_python_scalar(fill):
    value = python_scalar_value(fill, dtype)
  else:
    value = np.asarray(fill).astype(dtype)[()]
  if shape == ():
    aval = core.ShapedArray((), dtype, weak)
    return pe.literal_array(Array(dispatch.to_buffer(np.asarray(value), aval), aval))
  return lax.broadcast_in_dim(lax.utils.weak_scalar(value) if weak else value, shape, ())


def _is_key_dtype(dtype: Any) -> bool:
  """Whether `dtype` is a typed-key dtype (`key<fry>`: a staged leaf's dtype)."""
  return core.is_extended_dtype(dtype)


def _keys_full(shape: Any, fill: Any) -> Any:
  """Typed keys `key<fry>[*shape]` whose key data words all hold `fill` (JAX's `lax.full` of
  a key dtype: the data `u32[*shape, 2]` filled, then `random_wrap`), or, for a key `fill`,
  that key broadcast."""
  shape = canonical_shape(shape)
  if type(fill) in KEY_TYPES and fill.shape:
    return on_keys(broadcast_to_shape, fill, shape, reuse=FORWARD)
  if type(fill) in KEY_TYPES:   # its data (`random_unwrap` of its keys), broadcast
    data = prng.random_unwrap_p.bind(tree_util.staged_leaf_value(fill)[0])
    data = broadcast_to_shape(data, (*shape, *data.shape))
  else:
    data = full((*shape, *prng.threefry_impl.key_shape), fill, np.uint32)
  keys = prng.random_wrap_p.bind(data, impl=prng.threefry_impl)
  return tree_util.staged_aval(core.get_aval(keys))[1](keys)


def _check_shape_not_split(name: str, shape: Any, dtype: Any) -> None:
  """`jnp.zeros(3, 4)`: an int where the dtype goes after an int shape is, as JAX says, most
  likely a shape tuple written without its parentheses; raises JAX's TypeError saying so."""
  if isinstance(shape, int) and isinstance(dtype, int):
    raise TypeError(
        f"Cannot interpret '{dtype}' as a data type.\n\nDid you accidentally write "
        f"`jax.numpy.{name}({shape}, {dtype})` when you meant "
        f"`jax.numpy.{name}(({shape}, {dtype}))`, i.e. with a single tuple argument for the "
        f"shape?")


def zeros(shape: Any, dtype: Any = None, *, device: Any = None,
          out_sharding: Any = None) -> Array:
  """An array of zeros; dtype defaults to float32 (float64 with x64).

  Args:
    device: a device or sharding to commit the result to.
    out_sharding: a NamedSharding or (under `set_mesh`) a PartitionSpec laying the result
      out; on a mesh of Explicit axes it is the result's type (`float32[8@x,4]`).

  Raises:
    ValueError: both `device` and `out_sharding`; a spec that does not fit `shape`.
    TypeError: a `dtype` that is no dtype, in NumPy's words (`jnp.zeros(3, 4)`: JAX's hint
      that the shape wants a tuple); a dtype that is not a number, bool or string type.
  """
  _check_shape_not_split("zeros", shape, dtype)
  if _is_key_dtype(dtype):   # typed keys of key data 0 (see `full`)
    return placed(_keys_full(shape, 0), device, out_sharding, "zeros")
  dt = dtypes.check_user_dtype(float if dtype is None else dtype, "zeros")
  return placed(_filled(canonical_shape(shape), 0, dt, False), device, out_sharding, "zeros")


def ones(shape: Any, dtype: Any = None, *, device: Any = None,
         out_sharding: Any = None) -> Array:
  """An array of ones; dtype defaults to float32 (float64 with x64); `device` and
  `out_sharding` as in `zeros`."""
  _check_shape_not_split("ones", shape, dtype)
  if _is_key_dtype(dtype):   # typed keys of key data 1 (see `full`)
    return placed(_keys_full(shape, 1), device, out_sharding, "ones")
  dt = dtypes.check_user_dtype(float if dtype is None else dtype, "ones")
  return placed(_filled(canonical_shape(shape), 1, dt, False), device, out_sharding, "ones")


def empty(shape: Any, dtype: Any = None, *, device: Any = None,
          out_sharding: Any = None) -> Array:
  """Like `zeros` (arrays are immutable, so "uninitialized" memory would be useless)."""
  _check_shape_not_split("empty", shape, dtype)
  if _is_key_dtype(dtype):
    return zeros(shape, dtype, device=device, out_sharding=out_sharding)
  dt = dtypes.check_user_dtype(float if dtype is None else dtype, "empty")
  return zeros(shape, dt, device=device, out_sharding=out_sharding)


def _like_dtype(a, dtype):
  return dtypes.canonicalize_dtype(dtype) if dtype is not None else dtype_of(a)


def _duck_array(a: Any) -> Any:
  """`a`, or for an object that only has `shape` and `dtype` (a ShapeDtypeStruct: JAX's
  `*_like` take such duck-typed arrays) a stand-in of them that holds no memory."""
  if isinstance(a, np.ma.MaskedArray):   # only its shape and dtype are read, as JAX's
    return np.broadcast_to(np.zeros((), a.dtype), a.shape)
  if isinstance(a, (Array, core.Tracer, np.ndarray, np.generic)):
    return a
  shape, dtype = getattr(a, "shape", None), getattr(a, "dtype", None)
  if shape is None or dtype is None or not isinstance(dtype, np.dtype):
    return a
  return np.broadcast_to(np.zeros((), dtype), tuple(shape))


def _filled_like(a, fill_value, dtype, shape) -> Array:
  """`fill_value` with the shape and dtype of `a` (or the given ones); as JAX's `full_like`,
  weakly typed when `a` is and no dtype is given, with no conversion equation."""
  a = _duck_array(a)
  dt = _like_dtype(a, dtype)
  shape = shape_of(a) if shape is None else canonical_shape(shape)
  weak = dtype is None and dtypes.is_weakly_typed(a)
  fill = asarray_or_scalar(fill_value)
  if shape_of(fill) == ():
    return _filled(shape, fill, dt, weak)
  out = broadcast_to_shape(asarray(fill, dt), shape)
  return elementwise.convert_element_type_p.bind(out, new_dtype=dt, weak_type=True) if (
      weak) else out


def zeros_like(a: ArrayLike, dtype: Any = None, shape: Any = None, *, device: Any = None,
               out_sharding: Any = None) -> Array:
  """Zeros with the shape and dtype of `a` (or the given `dtype`/`shape`); weakly typed
  when `a` is and no dtype is given, as in JAX."""
  if type(a) in KEY_TYPES and dtype is None:
    return _keys_filled(a, 0, shape)
  if dtype is not None:
    dtype = dtypes.check_user_dtype(dtype, "zeros_like")
  return placed(_filled_like(a, 0, dtype, shape), device, out_sharding, "zeros_like",
                 a if shape is None else None)


def ones_like(a: ArrayLike, dtype: Any = None, shape: Any = None, *, device: Any = None,
              out_sharding: Any = None) -> Array:
  """Ones with the shape and dtype of `a` (or the given `dtype`/`shape`); weakly typed
  when `a` is and no dtype is given, as in JAX."""
  if type(a) in KEY_TYPES and dtype is None:
    return _keys_filled(a, 1, shape)
  if dtype is not None:
    dtype = dtypes.check_user_dtype(dtype, "ones_like")
  return placed(_filled_like(a, 1, dtype, shape), device, out_sharding, "ones_like",
                 a if shape is None else None)


def full_like(a: ArrayLike, fill_value: ArrayLike, dtype: Any = None, shape: Any = None, *,
              device: Any = None, out_sharding: Any = None) -> Array:
  """`fill_value` with the shape and dtype of `a` (or the given `dtype`/`shape`); weakly
  typed when `a` is and no dtype is given, as in JAX."""
  if type(a) in KEY_TYPES and dtype is None:
    return _keys_filled(a, fill_value, shape)
  if dtype is not None:
    dtype = dtypes.check_user_dtype(dtype, "full_like")
  return placed(_filled_like(a, fill_value, dtype, shape), device, out_sharding,
                 "full_like", a if shape is None else None)


def _keys_filled(keys: Any, value: Any, shape: Any) -> Any:
  """A typed key array like `keys` (or of `shape`) whose key data words all hold `value`
  (JAX's `zeros_like` of keys: key data of zeros)."""
  shape = tuple(keys.shape) if shape is None else canonical_shape(shape)
  if type(value) in KEY_TYPES and value.shape:   # as JAX's: the keys broadcast
    return on_keys(broadcast_to_shape, value, shape, reuse=FORWARD)
  if type(value) in KEY_TYPES:   # a key: its data, broadcast (JAX's full of a key)
    data = tree_util.staged_leaf_data(value)[0]
    data = broadcast_to_shape(data, (*shape, *data.shape[len(value.shape):]))
  else:   # NB: the prototype's data is not read (JAX's jaxpr has no random_unwrap of it)
    size = core.physical_aval(core.get_aval(keys)).shape[len(keys.shape):]
    data = full((*shape, *size), value, np.uint32)
  return tree_util.staged_leaf_from_data(keys, data)


def empty_like(prototype: ArrayLike, dtype: Any = None, shape: Any = None, *,
               device: Any = None) -> Array:
  """Like `zeros_like` (committed to `device`, a device or sharding, when given)."""
  if dtype is not None:
    # NB: JAX's empty_like names ones_like in the message.
    dtype = dtypes.check_user_dtype(dtype, "ones_like")
  return zeros_like(prototype, dtype, shape, device=device)


# ---------------------------------------------------------------------------
# Ranges, identity matrices and grids


def arange(start: Any, stop: Any = None, step: Any = None, dtype: Any = None, *,
           device: Any = None, out_sharding: Any = None) -> Array:
  """Evenly spaced values in [start, stop) with `step` (all concrete, as in JAX's numpy),
  committed to `device` or laid out by `out_sharding` (see `zeros`).

  Dtype: int32 for integer arguments, float32 if any is a float (64-bit with x64).

  Raises:
    ConcretizationTypeError: if an argument is traced.
  """
  # NB: as JAX's, `arange(n)` names its one argument `stop`.
  for v, w in ((start, "start" if stop is not None else "stop"), (stop, "stop"),
               (step, "step")):
    check_concrete(v, "arange", w)
  if dtype is not None:
    dtype = dtypes.check_user_dtype(dtype, "arange")
  return placed(_arange(start, stop, step, dtype), device, out_sharding, "arange")


def _arange(start: Any, stop: Any, step: Any, dtype: Any) -> Array:
  """`arange` built in the graph as JAX's numpy builds it: `iota` (from 0), `start + iota`
  (unit step) or `start + step * iota` (computed in float32 for 16-bit floats), so a traced
  program holds the iota rather than a constant."""
  if shape_poly.is_symbolic_dim(start) or shape_poly.is_symbolic_dim(stop):
    return _symbolic_arange(start, stop, step, dtype)
  start_name = "stop" if stop is None and step is None else "start"
  for name, v in ((start_name, start), ("stop", stop), ("step", step)):
    if v is not None and np.ndim(v) != 0:
      raise ValueError(f"jax.numpy.arange: arguments must be scalars; got {name}={v}")
  if dtype is not None:
    dt = dtypes.canonicalize_dtype(dtype)
  else:
    dt = dtypes.canonicalize_dtype(dtypes.result_type(
        *(v for v in (start, stop, step) if v is not None)))
  if any(v is not None and dtypes.is_complex(dtypes.result_type(v))
         for v in (start, stop, step)):
    raise ValueError("Passing complex start/stop/step to jnp.arange is no longer supported "
                     "starting in JAX v0.10.0.")
  if stop is None:
    start, stop = 0, start
  if step is not None:
    work = (np.dtype(np.float32) if dtypes.is_float(dt) and np.dtype(dt).itemsize < 4
            else dt)
    size = max(0, int(np.ceil((stop - start) / step)))
    return lax.convert_element_type(
        lax.add(lax.convert_element_type(start, work),
                lax.mul(lax.convert_element_type(step, work),
                        lax.broadcasted_iota(work, (size,), 0))), dt)
  if start == 0:
    return lax.broadcasted_iota(dt, (max(0, int(np.ceil(stop))),), 0)
  size = max(0, int(np.ceil(stop - start)))
  return lax.add(lax.convert_element_type(start, dt), lax.broadcasted_iota(dt, (size,), 0))


def _symbolic_arange(start: Any, stop: Any, step: Any, dtype: Any) -> Array:
  """`arange` with a symbolic dimension as a bound (export): an `iota` of the symbolic
  length, for integer bounds and a positive int step.

  Raises:
    NotImplementedError: a float bound or step, or a step that is not a positive int.
  """
  if stop is None:
    start, stop = 0, start
  step = 1 if step is None else step
  if not isinstance(step, (int, np.integer)) or step <= 0 or not all(
      shape_poly.is_symbolic_dim(v) or isinstance(v, (int, np.integer)) for v in (start, stop)):
    raise NotImplementedError(f"arange({start}, {stop}, {step}) with a symbolic dimension is "
                              f"supported for int bounds and a positive int step only.")
  dt = dtypes.default_int_dtype() if dtype is None else dtypes.canonicalize_dtype(dtype)
  size = (stop - start + step - 1) // step
  if not size >= 0:   # NB: for a symbolic size, decided from its bounds (or inconclusive)
    size = 0
  out = lax.iota(dt, size)
  if step != 1:
    out = lax.mul(out, np.asarray(step, dt))
  if not (isinstance(start, (int, np.integer)) and start == 0):
    out = lax.add(out, lax.convert_element_type(start, dt))
  return out


def _dims(name: str, N: Any, M: Any) -> tuple[int, int]:
  """`(N, M)` as static ints (M defaults to N).

  Raises:
    TypeError: for a traced `N` or `M`, in JAX's words: eye's names the argument, tri's the
      shape `(N, M)`.
  """
  dim = lambda d: d if shape_poly.is_symbolic_dim(d) else operator.index(d)  # noqa: E731

  def static(d, what):
    try:
      return check_concrete(d, name, what)
    except ConcretizationTypeError:
      if name == "eye":
        # NB: JAX's words differ for N and M
        raise lax_shape.shape_error((d,), f"argument of 'N' jnp.eye()" if what == "N" else
                                    f"argument 'M' of jnp.eye()") from None
      raise lax_shape.shape_error((N, N if M is None else M)) from None

  N = dim(static(N, "N"))
  M = N if M is None else dim(static(M, "M"))
  if N < 0 or M < 0:
    raise ValueError(f"negative dimensions are not allowed, got {N} and {M}")
  return N, M


def _offset(k: Any, strict: bool = False) -> Any:
  """The diagonal offset `k` as JAX's numpy takes it: a Python int is a weakly typed scalar
  of the default int dtype (int64 with x64), clipped to the int32 range; other values must
  be scalar integer arrays (traced ones allowed)."""
  if type(k) is int:
    info = np.iinfo(np.int32)
    dt = dtypes.default_int_dtype()
    # `strict` (tri, as JAX's: k is converted to an array): beyond int32 without x64 is
    # JAX's OverflowError, in its words; eye clips, as JAX's.
    if strict and dt == np.int32 and not info.min <= k <= info.max:
      raise OverflowError(f"Python int {k} too large to convert to int32")
    return np.asarray(min(max(k, info.min), info.max), dt)
  return k if isinstance(k, (Array, core.Tracer)) else asarray(k)


def _add_offset(iota: Any, offset: Any) -> Any:
  """`iota + offset` in the iota's dtype: a static offset as a literal, else converted."""
  dt = dtype_of(iota)
  if isinstance(offset, np.ndarray):
    return lax.add(iota, offset.astype(dt)[()])
  return lax.add(iota, offset if dtype_of(offset) == dt else lax.convert_element_type(offset, dt))


def _as_dtype(mask: Any, dt: np.dtype) -> Array:
  return mask if dt == dtypes.bool_ else lax.convert_element_type(mask, dt)


def eye(N: int, M: int | None = None, k: Any = 0, dtype: Any = None, *,
        device: Any = None) -> Array:
  """A 2-D array `dtype[N, M]` with ones on the k-th diagonal (`j == i + k`) and zeros
  elsewhere; dtype defaults to float32 (float64 with x64); committed to `device` (a device
  or sharding) when given.

  Staged as JAX's numpy stages it: two `iota`s of the offset's integer dtype (the default
  int for a Python `k`: int64 with x64), `add`, `eq`, `convert_element_type`.

  Raises:
    ValueError: `k` not a scalar integer; negative dimensions.
    TypeError: traced `N` or `M` (JAX's "Shapes must be 1D sequences of concrete values").
  """
  dt = dtypes.check_user_dtype(float if dtype is None else dtype, "eye")
  offset = _offset(k)
  if np.ndim(offset) != 0 or not dtypes.is_integer(dtype_of(offset)):
    raise ValueError(f"k must be a scalar integer; got {k}")
  N, M = _dims("eye", N, M)
  rows = lax.broadcasted_iota(dtype_of(offset), (N, M), 0)
  cols = lax.broadcasted_iota(dtype_of(offset), (N, M), 1)
  return placed(_as_dtype(lax.eq(_add_offset(rows, offset), cols), dt), device, None, "eye")


def identity(n: int, dtype: Any = None) -> Array:
  """The n x n identity matrix: `eye(n, dtype=dtype)`."""
  if dtype is not None:
    dtype = dtypes.check_user_dtype(dtype, "identity")
  return eye(n, dtype=dtype)


def tri(N: int, M: int | None = None, k: Any = 0, dtype: Any = None) -> Array:
  """`dtype[N, M]` with ones at and below the k-th diagonal (`j <= i + k`), zeros elsewhere.
  Default dtype float32 (as JAX's numpy, also with x64).

  Staged as JAX's `lax._tri`: `iota` rows, `add` k, `iota` columns, `ge`, convert; the
  iotas are int32 unless the shape or k's dtype needs int64 (a Python `k` with x64).

  Raises:
    TypeError: `k` not an integer.
    TypeError: traced `N` or `M` (JAX's "Shapes must be 1D sequences of concrete values").
  """
  dt = dtypes.float32 if dtype is None else dtypes.check_user_dtype(dtype, "tri")
  offset = _offset(k, strict=True)
  if not dtypes.is_integer(dtype_of(offset)):
    raise TypeError(f"offset must be an integer, got {k!r}")
  N, M = _dims("tri", N, M)
  # NB: a symbolic dimension (export) takes the default int dtype, as JAX's
  # `int_dtype_for_dim`
  fits = all(np.dtype(dtypes.default_int_dtype()) == np.int32 if shape_poly.is_symbolic_dim(d)
             else d <= np.iinfo(np.int32).max for d in (N, M))
  shape_dt = dtypes.int32 if fits else dtypes.int64
  if np.iinfo(dtype_of(offset)).max > np.iinfo(shape_dt).max or (
      np.iinfo(dtype_of(offset)).min < np.iinfo(shape_dt).min):
    shape_dt = dtypes.int64
  rows = _add_offset(lax.broadcasted_iota(shape_dt, (N, M), 0), offset)
  return _as_dtype(lax.ge(rows, lax.broadcasted_iota(shape_dt, (N, M), 1)), dt)


def meshgrid(*xi: ArrayLike, copy: bool = True, sparse: bool = False,
             indexing: str = "xy") -> list[Array]:
  """Coordinate arrays from 1-D coordinate vectors `x_i[n_i]`.

  Returns:
    One array per input, each `[n_1, ..., n_k]` for `indexing='ij'` (`[n_2, n_1, n_3...]`
    for 'xy'); with `sparse`, size 1 along every axis but its own.

  Raises:
    ValueError: for inputs that are not 1-D, `copy=False`, or another `indexing`.
  """
  args = [as_array(x) for x in xi]
  if not copy:
    raise ValueError("stagecraft.numpy.meshgrid only supports copy=True")
  if indexing not in ("xy", "ij"):
    raise ValueError(f"Valid values for indexing are 'xy' and 'ij', got {indexing}")
  if any(ndim_of(a) != 1 for a in args):
    raise ValueError(f"Arguments to stagecraft.numpy.meshgrid must be 1D, got shapes "
                     f"{[shape_of(a) for a in args]}")
  if indexing == "xy" and len(args) >= 2:
    args[0], args[1] = args[1], args[0]
  shape = [1 if sparse else shape_of(a)[0] for a in args]
  out = []
  for i, a in enumerate(args):
    s = [*shape[:i], shape_of(a)[0], *shape[i + 1:]] if sparse else shape
    out.append(lax.broadcast_in_dim(a, tuple(s), (i,)))
  if indexing == "xy" and len(args) >= 2:
    out[0], out[1] = out[1], out[0]
  return out


# ---------------------------------------------------------------------------
# Arrays from host data


def copy(a: ArrayLike, order: str | None = None) -> Array:
  """A copy of `a` (Arrays are immutable, so this is `asarray(a)`)."""
  return array(a, copy=True)


def frombuffer(buffer: Any, dtype: Any = float, count: int = -1, offset: int = 0) -> Array:
  """An Array from a bytes-like buffer (`numpy.frombuffer`, then copied to the device)."""
  return array(np.frombuffer(buffer, dtype=dtype, count=count, offset=offset))


def fromstring(string: str, dtype: Any = float, count: int = -1, *, sep: str) -> Array:
  """An Array from text data (`numpy.fromstring` with a separator)."""
  return array(np.fromstring(string, dtype=dtype, count=count, sep=sep))


def fromiter(*args, **kwargs):
  """Not supported: iterators may be impure; use `array(list(iterable))`."""
  raise NotImplementedError("jnp.fromiter() is not implemented because it may be "
                            "non-pure and thus unsafe for use with JIT and other JAX "
                            "transformations. Consider using jnp.asarray(np.fromiter(...)) "
                            "instead.")


def fromfile(*args, **kwargs):
  """Not supported: reading files is impure; use `asarray(numpy.fromfile(...))`."""
  raise NotImplementedError("jnp.fromfile() is not implemented because it may be non-pure "
                            "and thus unsafe for use with JIT and other JAX transformations. "
                            "Consider using jnp.asarray(np.fromfile(...)) instead.")


def load(file: Any, *args, **kwargs):
  """`numpy.load`; arrays come back as Arrays. As JAX's: NumPy writes bfloat16 (which it
  does not know) as 2-byte voids, read back here as bfloat16; a dtype the runtime cannot
  hold (objects, other voids, strings) comes back as NumPy's array."""
  out = np.load(file, *args, **kwargs)
  if isinstance(out, np.ndarray):
    if out.dtype == np.dtype("V2"):
      out = out.view(dtypes.bfloat16)
    try:
      return asarray(out)
    except (TypeError, ValueError):   # a dtype stagecraft has no arrays of
      return out
  return out


save, savez = np.save, np.savez


def from_dlpack(x: Any, /, *, device: Any = None, copy: bool | None = None) -> Array:
  """An Array from an object implementing the DLPack protocol (`__dlpack__`: NumPy arrays,
  Arrays, jax.Arrays, CPU tensors of other libraries): `stagecraft.dlpack.from_dlpack`
  (JAX's `jnp.from_dlpack`), which shares aligned host memory unless `copy=True`.

  Args:
    x: the DLPack-capable object.
    device: a device or sharding to commit the result to.
    copy: True: always copy; False: never copy; None: copy only when needed.

  Raises:
    ValueError: `copy=False` where a copy is needed (JAX's "Specified ... which requires a
      copy ...").
    TypeError: if `x` does not implement DLPack.
  """
  if not hasattr(x, "__dlpack__"):
    raise TypeError(f"from_dlpack: expected an object with a __dlpack__ method, got "
                    f"{type(x).__name__}.")
  return dlpack.from_dlpack(x, device=device, copy=copy)
