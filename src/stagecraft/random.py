"""`stagecraft.random`: counter-based pseudo-random numbers with JAX's `random`'s API and bits.

Keys are Threefry-2x32 keys (JAX's default `threefry2x32` implementation): two uint32 words.
`PRNGKey(seed)` gives a raw `u32[2]` key; `key(seed)` gives a typed key (a `PRNGKeyArray`, of
dtype `key<fry>`) wrapping the same data. Every function accepts both and, for the same key,
returns the same values as JAX's `random` with JAX 0.10's defaults (`jax_threefry_partitionable`
on, `jax_use_high_dynamic_range_gumbel` off): integers and bits bit for bit, floats up to
the rounding of the transcendental functions XLA calls.

How bits are made (JAX's partitionable Threefry): element `i` (row-major) of a `shape` array
of 32-bit draws is `y1 ^ y2` where `(y1, y2) = threefry2x32(key, (hi(i), lo(i)))`, `i` a
64-bit count; `split(key, shape)` returns `(y1, y2)` at each position of `shape` as the new
keys. Floats come from the top mantissa bits, as in JAX's `uniform`. With
`jax_threefry_partitionable` off (mctx's tests set it), JAX's original scheme: the counts
0..w-1 of the w words needed are encrypted as blocks `(c[i], c[i + w/2])` and read in order
(`_threefry_flat_counts`), so those draws too equal JAX's.

Every sampler is a jitted function of the key data (shapes and dtypes static), so eager
calls compile once per signature, as JAX's do.

The gamma family (`gamma`, `loggamma`, `beta`, `dirichlet`, `t`, `chisquare`, `f`,
`generalized_normal`, `ball`), `poisson` and `binomial` use JAX's rejection samplers in
`while_loop`s with JAX's key splitting, so they draw JAX's samples too (up to rounding where
an acceptance test is close).

With x64 on (`stagecraft.enable_x64()`), as in JAX: seeds are 64-bit (the key is
`[seed >> 32, seed mod 2**32]`), the default dtypes are float64/int64/uint64, and 64-bit
draws take both Threefry words of a position, `y1 * 2**32 + y2`, instead of their xor.

JAX's `random_gamma_p` (its gamma primitive) has no counterpart: `gamma` here is a
`custom_jvp` over `lax` loops, since libraries register no primitives.
"""
from __future__ import annotations

import functools
import inspect
import math
import operator
import warnings
from functools import partial
from typing import Any, Sequence

import numpy as np

from stagecraft import core, dtypes, key_reuse, lax, shape_poly, sharding, traceback_util
from stagecraft import tree_util
from stagecraft import numpy as jnp
from stagecraft.config import config, numpy_rank_promotion
from stagecraft.custom_derivatives import custom_jvp
from stagecraft.lax import prng, random_bits, spmd, utils as lax_utils
from stagecraft.lax.random_gamma import random_gamma_p
from stagecraft.lax.shape import canonicalize_shape
from stagecraft.numpy import util as jnp_util
from stagecraft.pjit import jit
from stagecraft.runtime.array import Array

__all__ = ["PRNGKeyArray", "KeyTy", "PRNGKey", "key", "key_data", "wrap_key_data", "key_impl",
           "split", "fold_in", "clone", "bits", "uniform", "normal", "randint", "bernoulli",
           "categorical", "choice", "permutation", "truncated_normal", "gumbel",
           "laplace", "logistic", "exponential", "cauchy", "rademacher", "maxwell",
           "double_sided_maxwell", "pareto", "weibull_min", "lognormal", "rayleigh",
           "triangular", "wald", "geometric", "gamma", "loggamma", "beta", "dirichlet",
           "t", "chisquare", "f", "generalized_normal", "ball", "poisson", "binomial",
           "multinomial", "multivariate_normal", "orthogonal",
           "default_prng_impl", "key_dtype"]

_u32 = np.dtype(np.uint32)
_UINT = {8: np.dtype(np.uint8), 16: np.dtype(np.uint16), 32: _u32, 64: np.dtype(np.uint64)}
_IMPL_NAME = "threefry2x32"

# ---------------------------------------------------------------------------
# Typed keys


KeyTy = prng.KeyTy
_key_dtype = prng.key_dtype


class PRNGKeyArray:
  """An array of typed PRNG keys: `key<fry>[*s]` over `u32[*s, 2]` key data.

  Made by `key`, `wrap_key_data`, and by `split`/`fold_in` of typed keys. It is a pytree
  leaf, as in JAX (`tree_leaves(key) == [key]`); the transformations (`jit`, `vmap`, `grad`,
  `scan`, `cond`, ...) trace its keys (`key<fry>[*s]`), so it passes through them as an
  argument and a result (`tree_util.register_staged_leaf`).
  It has no arithmetic; `key_data` gives the data.

  Attributes:
    shape, ndim, size: of the key array (without the trailing key-data axis).
    dtype: `KeyTy()`, printed `key<fry>`.
  """
  # NB: a key array holds its key data `u32[*s, 2]` (`_data`), its keys `key<fry>[*s]`
  # (`_keys`: the value the transformations trace, so programs take and return keys as JAX's
  # do), or both; each is made from the other when first read: for concrete Arrays a view
  # of the same buffer (kept), for tracers a `random_unwrap` / `random_wrap` equation (not
  # kept: the tracer may belong to a trace that ends before the key array does).
  __slots__ = ("_data", "_keys", "kr_var")
  __array_priority__ = 100

  def __init__(self, key_data: Any, kr_var: key_reuse.KeyVar | None = None):
    self._data = key_data
    # NB: traced data is wrapped now, in the trace that made it: flattening the key array
    # (which gives its keys) must not bind anything, and may happen after that trace ended
    self._keys = _wrap(key_data) if isinstance(key_data, core.Tracer) else None
    # NB: the keys' consumed state, read only with config debug_key_reuse on (key_reuse)
    self.kr_var = key_reuse.KeyVar() if kr_var is None else kr_var

  @classmethod
  def _from_keys(cls, keys: Any, kr_var: key_reuse.KeyVar | None = None) -> "PRNGKeyArray":
    """A key array of a value of dtype `key<fry>` (an Array or a tracer)."""
    out = cls(None, kr_var)
    out._keys = keys
    return out

  @property
  def _base_array(self) -> Any:
    """The key data `u32[*s, 2]`."""
    data = self._data
    if data is None:
      keys = self._keys
      if type(keys) is Array:
        data = self._data = keys._physical()
      elif isinstance(keys, core.Tracer):
        data = prng.random_unwrap_p.bind(keys)
      else:
        return keys   # NB: a placeholder (a ShapeDtypeStruct of keys, ...)
    return data

  def _key_value(self) -> Any:
    """The keys `key<fry>[*s]` (an Array or a tracer)."""
    keys = self._keys
    if keys is None:
      data = self._data
      if isinstance(data, np.ndarray) and data.dtype == _u32 and data.shape[-1:] == (2,):
        data = self._data = jnp.asarray(data)
      if type(data) is not Array:
        return data   # NB: not key data: a placeholder of code that maps over leaves
      keys = self._keys = Array(data._buf, prng.key_aval(data.aval), data._device,
                                _keys_sharding(data._sharding, len(data.shape) - 1))
    return keys

  @property
  def shape(self) -> tuple:
    keys = self._keys
    return tuple(keys.shape) if keys is not None else tuple(np.shape(self._data)[:-1])

  ndim = property(lambda self: len(self.shape))
  size = property(lambda self: math.prod(self.shape))
  dtype = property(lambda self: _key_dtype)
  itemsize = KeyTy.itemsize

  @property
  def sharding(self):
    """The keys' sharding: their key data's, without the trailing key-data axis (a
    NamedSharding's spec keeps the entries of the key array's own `ndim` axes; JAX's
    logical sharding of a key array). Raises as the key data's `sharding` does (e.g. under
    a transformation)."""
    s = self._base_array.sharding
    if isinstance(s, sharding.NamedSharding):
      spec = tuple(s.spec)[:self.ndim]
      return sharding.NamedSharding(s.mesh, sharding.PartitionSpec(*spec),
                                    memory_kind=s.memory_kind)
    return s

  def __repr__(self):
    return f"Array({self.shape}, dtype={self.dtype.name}) overlaying:\n{self._base_array}"

  __str__ = __repr__

  def __len__(self):
    if not self.shape:
      raise TypeError("len() of unsized object")
    return self.shape[0]

  def __iter__(self):
    if not self.shape:
      raise TypeError("iteration over a 0-d key array")
    if key_reuse.enabled() and key_reuse.staging():
      return self._traced_iter()
    # NB: as JAX's: iterating eagerly makes fresh keys and consumes none
    return (PRNGKeyArray(self._base_array[i]) for i in range(self.shape[0]))

  def _traced_iter(self):
    # NB: as JAX's: traced, each key is a `slice`, which consumes it
    for i in range(self.shape[0]):
      mask = np.zeros(self.shape, dtype=bool)
      mask[i] = True
      key_reuse.sink(self, "slice", 0, mask)
      yield PRNGKeyArray(self._base_array[i])

  def __getitem__(self, idx):
    if idx is Ellipsis or (isinstance(idx, tuple) and idx in ((), (Ellipsis,))):
      return self   # NB: as JAX's arrays: `keys[...] is keys` (flax.nnx's variables rely on it)
    idx = idx if isinstance(idx, tuple) else (idx,)
    n = sum(np.ndim(i) if getattr(i, "dtype", None) == np.bool_ else 1
            for i in idx if i is not None and i is not Ellipsis)
    if n > self.ndim:   # as JAX's: counted against the key array's own shape
      raise IndexError(f"Too many indices: array is {self.ndim}-dimensional, but {n} were "
                       f"indexed")
    out = PRNGKeyArray._from_keys(self._key_value()[idx])   # NB: on the keys, as JAX's
    if key_reuse.enabled():
      _index_consumption(self, idx, out)
    return out

  def __bool__(self):
    raise TypeError("key array cannot be converted to boolean.")

  def __array__(self, dtype=None, copy=None):
    lib = "jax" if traceback_util.library_name[0] == "JAX" else "stagecraft"   # the runner
    raise TypeError(f"JAX array with PRNGKey dtype cannot be converted to a NumPy array. "
                    f"Use {lib}.random.key_data(arr) if you wish to extract the "
                    f"underlying integer array.")

  def __eq__(self, other):
    if not isinstance(other, PRNGKeyArray):
      return _compare_other("equal", other)
    return jnp.equal(self, other)   # NB: `eq` of the keys, as JAX's

  def __ne__(self, other):
    if not isinstance(other, PRNGKeyArray):
      return _compare_other("not_equal", other)
    return jnp.not_equal(self, other)

  __hash__ = None  # type: ignore[assignment]

  def take(self, *args: Any, **kwargs: Any) -> "PRNGKeyArray":
    """`jnp.take` of the keys (a key-typed `gather`)."""
    return jnp.take(self, *args, **kwargs)

  def copy(self) -> "PRNGKeyArray":
    """A copy of the keys (a `copy` of the keys, as JAX's)."""
    return _forwarded(self, lax_utils.on_keys(partial(jnp.array, copy=True), self))

  def reshape(self, *shape: Any, order: str = "C") -> "PRNGKeyArray":
    """The keys in a new shape (`shape` as for `jnp.reshape`; -1 infers one axis)."""
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
      shape = tuple(shape[0])
    return _forwarded(self, lax_utils.on_keys(partial(jnp.reshape, shape=shape, order=order),
                                              self))

  def ravel(self, order: str = "C") -> "PRNGKeyArray":
    """The keys as a 1-D key array."""
    return self.reshape(-1, order=order)

  flatten = ravel

  def squeeze(self, axis: Any = None) -> "PRNGKeyArray":
    """The keys without the given (default: every) axis of size 1."""
    if axis is None:
      axis = tuple(i for i, d in enumerate(self.shape) if d == 1)
    axis = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    return _forwarded(self, lax_utils.on_keys(partial(jnp.squeeze, axis=axis), self))

  def transpose(self, *axes: Any) -> "PRNGKeyArray":
    """The keys with their axes permuted (default: reversed); the key data stays last."""
    if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
      axes = axes[0]
    perm = (tuple(range(self.ndim))[::-1] if axes in ((), None)
            else tuple(a % self.ndim for a in axes))
    out = lax_utils.on_keys(partial(jnp.transpose, axes=perm), self)
    if key_reuse.enabled() and key_reuse.staging():
      # NB: JAX's key reuse table has no rule for transpose: traced, it consumes its operand
      # and its result counts as consumed; eagerly it is not checked
      key_reuse.sink(self, "transpose")
      out.kr_var.consumed = True
    return out

  T = property(lambda self: self.transpose())

  def swapaxes(self, axis1: int, axis2: int) -> "PRNGKeyArray":
    """The keys with two axes exchanged."""
    perm = list(range(self.ndim))
    perm[axis1], perm[axis2] = perm[axis2], perm[axis1]
    return self.transpose(perm)

  def block_until_ready(self):
    if hasattr(self._base_array, "block_until_ready"):
      self._base_array.block_until_ready()
    return self

  # -- JAX's Array API that reads no key values: placement, buffers, lifetime. Each reads
  # the key data's and answers for the keys (shards and shapes without the key-data axis).

  @property
  def aval(self) -> core.ShapedArray:
    """The keys' type, `ShapedArray(key<fry>[*s])`."""
    return core.get_aval(self._key_value())

  devices = property(lambda self: self._base_array.devices)
  device = property(lambda self: self._base_array.device)
  @property
  def committed(self) -> bool:
    """Whether the keys stay where they are (JAX's commitment): their value's or their
    data's, whichever the key array was made from."""
    return any(v.committed for v in (self._keys, self._data) if type(v) is Array)

  is_fully_replicated = property(lambda self: self._base_array.is_fully_replicated)
  is_fully_addressable = property(lambda self: self._base_array.is_fully_addressable)
  nbytes = property(lambda self: self.size * self.itemsize)

  def on_device_size_in_bytes(self) -> int:
    return self._base_array.on_device_size_in_bytes()

  def unsafe_buffer_pointer(self) -> int:
    return self._base_array.unsafe_buffer_pointer()

  def copy_to_host_async(self) -> None:
    self._base_array.copy_to_host_async()

  def delete(self) -> None:
    """Deletes the keys' buffer (their data's: the keys are a view of it)."""
    self._base_array.delete()

  def is_deleted(self) -> bool:
    return self._base_array.is_deleted()

  def _key_shards(self, shards: list) -> list:
    return [sharding.Shard(s.device, s.index, s.replica_id, PRNGKeyArray(s.data))
            for s in shards]

  @property
  def addressable_shards(self) -> list:
    """One `Shard` per device holding keys: its index (into the key data, as JAX's), its keys."""
    return self._key_shards(self._base_array.addressable_shards)

  @property
  def global_shards(self) -> list:
    return self._key_shards(self._base_array.global_shards)

  def addressable_data(self, index: int) -> "PRNGKeyArray":
    return PRNGKeyArray(self._base_array.addressable_data(index))

  at = property(lambda self: _KeyIndexUpdateHelper(self))
  at.__doc__ = """`keys.at[idx].set(other_keys)` / `.get()`, as for arrays (JAX's key arrays
  support these two; the arithmetic updates raise TypeError)."""

  def __pos__(self):
    return self

  def __neg__(self):
    raise TypeError(_unary_message("neg", "integer, floating, complexfloating"))

  def __abs__(self):
    raise TypeError(_unary_message("abs", "floating, complexfloating, signedinteger"))

  def __invert__(self):
    raise TypeError(_unary_message("not", "integer, bool"))


def _abstract_method(name: str):
  """A method JAX's key arrays lack (its abstract base class's): NotImplementedError for
  concrete keys; traced keys are tracers in JAX, whose method calls the jnp function, which
  rejects the key dtype (its TypeError/ValueError)."""
  def method(self, *args: Any, **kwargs: Any):
    keys = self._key_value()
    if not isinstance(keys, core.Tracer):
      raise NotImplementedError(f"Cannot call abstract method {name}")
    fun = getattr(jnp, name, None)
    if fun is None:
      return getattr(keys, name)(*args, **kwargs)
    return fun(self, *args, **kwargs)
  method.__name__ = name
  return method


for _name in ("all", "any", "argmax", "argmin", "argpartition", "argsort", "astype",
              "byteswap", "choose", "clip", "compress", "conj", "conjugate", "cumprod",
              "cumsum", "diagonal", "dot", "item", "max", "mean", "min", "nonzero", "prod",
              "ptp", "repeat", "round", "searchsorted", "sort", "std", "sum", "to_device",
              "trace", "var", "view"):
  setattr(PRNGKeyArray, _name, _abstract_method(_name))


def _keys_sharding(s: Any, ndim: int) -> Any:
  """The sharding of keys `key<fry>[*s]` (`ndim` axes) whose data has sharding `s`: a
  NamedSharding's spec without the entry of the data's trailing axis."""
  if isinstance(s, sharding.NamedSharding) and len(tuple(s.spec)) > ndim:
    return sharding.NamedSharding(s.mesh, sharding.PartitionSpec(*tuple(s.spec)[:ndim]),
                                  memory_kind=s.memory_kind)
  return s


# Typed keys have no arithmetic. As JAX's: the operators raise the TypeError of the jnp
# function (a key with another dtype) or of the lax primitive (two keys) they call.
_NUMBER = "integer, floating, complexfloating"
_ORDERED = "integer, floating, bool"
_LOGICAL = "integer, bool"


def _unary_message(prim: str, kinds: str) -> str:
  return (f"{prim} does not accept dtype {_key_dtype.name}. Accepted dtypes are subtypes of "
          f"{kinds}.")


def _other_dtype(x: Any) -> Any:
  """The dtype JAX gives the non-key operand of a binary operator (Python scalars: their
  default dtypes), or None for a value that is no array."""
  if isinstance(x, (bool, int, float, complex, np.generic, np.ndarray)) or hasattr(x, "dtype"):
    return jnp.result_type(x)
  return None


def _compare_other(name: str, other: Any) -> Any:
  """`keys == other` for a non-key `other`: JAX's TypeError for an array-like, else
  NotImplemented (Python's identity comparison)."""
  dt = _other_dtype(other)
  if dt is None:
    return NotImplemented
  raise TypeError(f"{name} does not accept dtypes {_key_dtype.name}, {dt}.")


def _def_binary(dunder: str, jnp_name: str, lax_name: str | None, kinds: str | None,
                reflected_name: str | None = None) -> None:
  """Defines `PRNGKeyArray.__dunder__` (and `__rdunder__`), raising JAX's TypeError.
  `lax_name`/`kinds`: the primitive's message for two keys (None: "Cannot interpret");
  `reflected_name`: the jnp function the reflected form calls (comparisons swap)."""
  def op(self, other):
    if type(other) is PRNGKeyArray:
      if lax_name is None:
        raise TypeError(f"Cannot interpret '{_key_dtype.name}' as a data type")
      raise TypeError(f"{lax_name} does not accept dtype {_key_dtype.name} at position 0. "
                      f"Accepted dtypes at position 0 are subtypes of {kinds}.")
    dt = _other_dtype(other)
    if dt is None:
      return NotImplemented
    raise TypeError(f"{jnp_name} does not accept dtypes {_key_dtype.name}, {dt}.")

  def rop(self, other):
    dt = _other_dtype(other)
    if dt is None:
      return NotImplemented
    if reflected_name is not None:
      raise TypeError(f"{reflected_name} does not accept dtypes {_key_dtype.name}, {dt}.")
    raise TypeError(f"{jnp_name} does not accept dtypes {dt}, {_key_dtype.name}.")

  setattr(PRNGKeyArray, f"__{dunder}__", op)
  if reflected_name is None:
    setattr(PRNGKeyArray, f"__r{dunder}__", rop)


for _args in [("add", "add", "add", _NUMBER), ("sub", "subtract", "sub", _NUMBER),
              ("mul", "multiply", "mul", _NUMBER), ("truediv", "true_divide", None, None),
              ("floordiv", "floor_divide", None, None), ("mod", "remainder", None, None),
              ("and", "bitwise_and", "and", _LOGICAL), ("or", "bitwise_or", "or", _LOGICAL),
              ("xor", "bitwise_xor", "xor", _LOGICAL), ("lshift", "left_shift", None, None),
              ("rshift", "right_shift", None, None),
              ("lt", "less", "lt", _ORDERED, "greater"),
              ("le", "less_equal", "le", _ORDERED, "greater_equal"),
              ("gt", "greater", "gt", _ORDERED, "less"),
              ("ge", "greater_equal", "ge", _ORDERED, "less_equal")]:
  _def_binary(*_args)


def _key_pow(self, other):
  # NB: as JAX's: an integer (or key) exponent fails on the dtype, a float one on promotion
  if type(other) is PRNGKeyArray:
    raise TypeError(f"Cannot interpret '{_key_dtype.name}' as a data type")
  dt = _other_dtype(other)
  if dt is None:
    return NotImplemented
  if not dtypes.issubdtype(dt, np.inexact):
    raise TypeError(f"Cannot interpret '{_key_dtype.name}' as a data type")
  raise TypeError(f"power does not accept dtypes {_key_dtype.name}, {dt}.")


def _key_rpow(self, other):
  dt = _other_dtype(other)
  if dt is None:
    return NotImplemented
  raise TypeError(f"power does not accept dtypes {dt}, {_key_dtype.name}.")


PRNGKeyArray.__pow__ = _key_pow
PRNGKeyArray.__rpow__ = _key_rpow


class _KeyIndexUpdateHelper:
  """`keys.at`: `keys.at[idx]` names the keys to get or set."""
  __slots__ = ("keys",)

  def __init__(self, keys: PRNGKeyArray):
    self.keys = keys

  def __getitem__(self, idx: Any) -> "_KeyIndexUpdateRef":
    return _KeyIndexUpdateRef(self.keys, idx)

  def __repr__(self):
    return f"_KeyIndexUpdateHelper({self.keys!r})"


class _KeyIndexUpdateRef:
  """`keys.at[idx]`: `.get()` gives `keys[idx]`, `.set(new_keys)` a copy of `keys` with the
  keys at `idx` replaced (`new_keys` broadcast to the indexed shape); both take the
  array `.at` keywords (`mode`, `indices_are_sorted`, `unique_indices`, `fill_value`).
  The arithmetic updates (`add`, `multiply`, `min`, ...) raise TypeError, as JAX's."""
  __slots__ = ("keys", "idx")

  def __init__(self, keys: PRNGKeyArray, idx: Any):
    self.keys, self.idx = keys, idx

  def get(self, **kwargs: Any) -> PRNGKeyArray:
    return lax_utils.on_keys(lambda a: a.at[self.idx].get(**kwargs), self.keys,
                             reuse=lax_utils.FORWARD)

  def set(self, values: Any, **kwargs: Any) -> PRNGKeyArray:
    if type(values) is not PRNGKeyArray:
      raise TypeError(f"Cannot interpret '{_key_dtype.name}' as a data type")
    return lax_utils.on_keys(lambda a, v: a.at[self.idx].set(v, **kwargs),
                                 self.keys, values,
                             reuse=lax_utils.SCATTER)

  def _no_arithmetic(self, *args: Any, **kwargs: Any):
    raise TypeError(f"Cannot interpret '{_key_dtype.name}' as a data type")

  add = subtract = multiply = mul = divide = power = min = max = apply = _no_arithmetic


def _forwarded(key: PRNGKeyArray, out: PRNGKeyArray) -> PRNGKeyArray:
  """`out`, the keys of `key` in another form (JAX's `Forward` rules: reshape, squeeze,
  copy): traced it shares their consumed state, eagerly it starts with a copy of it."""
  if key_reuse.enabled():
    out.kr_var = (key.kr_var if key_reuse.staging() else
                  key_reuse.KeyVar(np.copy(key.kr_var.consumed)
                                   if isinstance(key.kr_var.consumed, np.ndarray)
                                   else key.kr_var.consumed))
  return out


def _index_consumption(key: PRNGKeyArray, idx: tuple, out: PRNGKeyArray) -> None:
  """Key reuse for `key[idx]` (JAX's rules): static ints and slices are a `slice`, which
  consumes the selected keys and gives fresh ones; other indices gather, passing the
  keys' state on."""
  static = all(isinstance(i, (int, np.integer, slice)) and not isinstance(i, bool)
               and (not isinstance(i, slice) or all(
                   b is None or isinstance(b, (int, np.integer)) for b in
                   (i.start, i.stop, i.step)))
               for i in idx)
  if not static:
    _forwarded(key, out)
    return
  mask = np.zeros(key.shape, dtype=bool)
  mask[idx] = True
  if mask.all():   # NB: as JAX's indexing: selecting every key is no slice
    _forwarded(key, out)
    return
  key_reuse.sink(key, "slice", 0, mask)


# A leaf for users (`tree_leaves(key) == [key]`, as in JAX); the transformations trace its
# keys and rebuild the key array around them.
def _rebuild(_, children):
  x = children[0]
  if type(getattr(x, "dtype", None)) is KeyTy:   # keys (Array, tracer, ShapeDtypeStruct)
    return PRNGKeyArray._from_keys(x)
  return PRNGKeyArray(x)   # NB: key data, or a placeholder of code that maps over leaves


tree_util.register_staged_leaf(PRNGKeyArray, lambda k: (k._key_value(), None), _rebuild,
                               data=lambda k: k._base_array)
tree_util.register_staged_dtype(KeyTy, lambda aval: aval, PRNGKeyArray._from_keys)
key_reuse.register_key_type(PRNGKeyArray)
# Primitives bound on key arrays (`lax.concatenate(keys)`, `lax.add(k, k)`) bind on their keys
# (their abstract value: that of their keys)
core.staged_leaves[PRNGKeyArray] = (PRNGKeyArray._key_value, KeyTy, PRNGKeyArray._from_keys)
core.pytype_aval_mappings[PRNGKeyArray] = lambda k: core.get_aval(k._key_value())
core.staged_leaves_hook[0] = lambda prim, ins, outs: (
    key_reuse.primitive_operation(prim, ins, outs) if key_reuse.enabled() else None)
# Typed keys are arrays for `isinstance(key, stagecraft.Array)` (and `jnp.ndarray`), as JAX's
# are: libraries (flax.nnx.Rngs, equinox) test it before `issubdtype(key.dtype, prng_key)`.
Array.register(PRNGKeyArray)


def key_dtype(impl_spec: Any = None) -> KeyTy:
  """The dtype of typed keys, `key<fry>` (JAX's `random.key_dtype`).

  Args:
    impl_spec: None, `'threefry2x32'` or its implementation object (the parameter is
      named as JAX 0.10.2's); other implementations raise as `_check_impl` does.
  Returns:
    the key dtype `key<fry>`.
  """
  _check_impl(impl_spec)
  return _key_dtype


def default_prng_impl() -> str:
  """The name of the PRNG implementation: always `'threefry2x32'`."""
  return _IMPL_NAME


# JAX 0.10.2's PRNG implementation names, in the order its messages list them.
_JAX_IMPL_NAMES = ("philox2x32", "philox4x32", "threefry2x32", "rbg", "unsafe_rbg",
                   "threefry4x32")


def _check_impl(impl) -> None:
  """Checks an `impl=` / `dtype=` spec: None, a name, a key dtype or the implementation.

  Raises:
    TypeError: for a spec of another type (JAX's words).
    ValueError: for an unknown name (JAX's words), or a name of JAX's other
      implementations (stagecraft implements only threefry2x32).
  """
  if impl is None:
    return
  if isinstance(impl, KeyTy):
    name = impl.impl
  elif isinstance(impl, str):
    name = impl
  elif impl == prng.threefry_impl:
    return
  elif isinstance(getattr(impl, "name", None), str) and hasattr(impl, "key_shape"):
    name = impl.name   # NB: an `extend.random.PRNGImpl` (a layer above: by its fields)
  else:
    raise TypeError(f"unrecognized type {type(impl)} for specifying PRNG implementation.")
  if name == _IMPL_NAME:
    return
  if name in _JAX_IMPL_NAMES:
    raise ValueError(f'unrecognized PRNG implementation "{name}". Did you mean one of: '
                     f'"{_IMPL_NAME}"? (stagecraft implements only threefry2x32.)')
  listed = ", ".join(f'"{n}"' for n in _JAX_IMPL_NAMES)
  raise ValueError(f'unrecognized PRNG implementation "{name}". Did you mean one of: '
                   f'{listed}?')


def _check_key_data(data: Any) -> Any:
  """Raw key data as an array, validated as JAX's `_check_prng_key_data` does."""
  if isinstance(data, (list, tuple)):
    data = np.asarray(data)
  if not all(hasattr(data, a) for a in ("ndim", "shape", "dtype")):
    raise TypeError(f"unexpected PRNG key type {type(data)}")
  if data.ndim < 1:
    raise TypeError(f"JAX encountered invalid PRNG key data: expected key_data.ndim >= 1; "
                    f"got ndim={data.ndim}")
  if tuple(data.shape[-1:]) != (2,):
    raise TypeError(f"JAX encountered invalid PRNG key data: expected key_data.shape to end "
                    f"with (2,); got shape={tuple(data.shape)} for impl=threefry2x32")
  if np.dtype(data.dtype) != _u32:
    raise TypeError(f"JAX encountered invalid PRNG key data: expected key_data.dtype = "
                    f"uint32; got dtype={np.dtype(data.dtype).name}")
  return data


def _check_prng_key(name: str, key: Any, allow_batched: bool = False, *,
                    keys: bool = False) -> tuple[Any, bool]:
  """`(key data u32[*s, 2], typed)`; a single key (`s == ()`) unless `allow_batched`.
  With `keys`, `(keys key<fry>[*s], typed)` (a raw key wrapped: `random_wrap`, as JAX's).

  Warns:
    UserWarning: for a raw key with `jax_legacy_prng_key="warn"` (JAX's words).

  Raises:
    TypeError: for data that is not `u32[..., 2]`.
    ValueError: for a batch of keys where one key is expected; for a raw key with
      `jax_legacy_prng_key="error"` (JAX's words).
  """
  if isinstance(key, PRNGKeyArray):
    typed, shape = True, key.shape
    if key_reuse.enabled():
      op = (_KEY_USE_UNJITTED.get(name, "random_bits") if config.disable_jit
            else _KEY_USE.get(name, "jit"))
      if op is not None:
        key_reuse.sink(key, op)
  else:
    data, typed = _check_key_data(key), False
    shape = tuple(data.shape)   # NB: as JAX's message: a raw key's whole shape
    mode = config.legacy_prng_key
    if mode != "allow":   # jax_legacy_prng_key: a raw key after the key-data check, as JAX's
      msg = ("Legacy uint32 key array passed as key to jax.random function. Please create "
             "keys using jax.random.key(). If use of a raw key array was intended, set "
             'jax_legacy_prng_key="allow".')
      if mode == "error":
        raise ValueError(msg)
      warnings.warn(msg, stacklevel=3)
  if not allow_batched and (len(shape) > 0 if typed else len(shape) > 1):
    raise ValueError(f"{name} accepts a single key, but was given a key array of shape "
                     f"{tuple(shape)} != (). Use stagecraft.vmap for batching.")
  if typed:
    return (key._key_value() if keys else key._base_array), True
  return (_wrap(data) if keys else data), False


# With debug_key_reuse: the operation that consumes a key given to each function of this
# module, as JAX names it in its messages (None: the key is not consumed). The samplers not
# listed are jitted functions in JAX ("jit").
_KEY_USE = {"split": "random_split", "bits": "random_bits", "multinomial": "random_split",
            "fold_in": None, "key_data": None, "key_impl": None}
# Under `disable_jit` JAX's samplers run unjitted, and the first operation on the key names
# itself: `random_bits`, unless listed here.
_KEY_USE_UNJITTED = {
    **{n: "random_split" for n in (
        "split", "multinomial", "choice", "permutation", "shuffle", "poisson", "beta", "t",
        "randint", "double_sided_maxwell", "wald", "f", "generalized_normal", "ball",
        "binomial")},
    **{n: "random_gamma" for n in ("gamma", "loggamma", "dirichlet", "chisquare")},
    "fold_in": None, "key_data": None, "key_impl": None}


def _return_key_values(typed: bool, keys: Any) -> Any:
  return PRNGKeyArray._from_keys(keys) if typed else _unwrap(keys)


# ---------------------------------------------------------------------------
# Key construction


def _seed_data(ctor_name: str, seed: Any, keys: bool = False) -> Any:
  if isinstance(seed, PRNGKeyArray):
    raise TypeError(f"{ctor_name} accepts a scalar seed, but was given a PRNG key.")
  if np.ndim(seed) if not hasattr(seed, "ndim") else seed.ndim:
    raise TypeError(f"{ctor_name} accepts a scalar seed, but was given an array of shape "
                    f"{tuple(np.shape(seed))} != (). Use stagecraft.vmap for batching")
  if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, int) and not (
      hasattr(seed, "dtype") and dtypes.is_integer(np.dtype(seed.dtype))):
    raise TypeError(f"PRNG key seed must be an integer; got {seed!r}")
  if isinstance(seed, int):
    # NB: as JAX: the seed goes through int64 (OverflowError beyond it); without x64 it is
    # then truncated to 32 bits, so the high word is 0.
    seed = np.int64(seed)
    if not dtypes.canonicalize_dtype(np.int64).itemsize == 8:
      seed = seed.astype(np.int32)   # NB: wraps, as JAX's `jnp.asarray` (`0:i32[]` in programs)
  seed = jnp.asarray(seed)
  if config.random_seed_offset:   # jax_random_seed_offset: added to every seed, as JAX's
    seed = seed + config.random_seed_offset
  out = prng.random_seed_p.bind(seed, impl=prng.threefry_impl)
  return out if keys else _unwrap(out)


def _threefry_seed(seed):
  # The key is the 64-bit seed as two words: `[seed >> 32, seed mod 2**32]` (JAX's
  # `threefry_seed`, the lowering of `random_seed`); the high word is 0 for seeds of 32 bits
  # or fewer.
  return prng.random_unwrap_p.bind(prng.random_seed_p.bind(jnp.asarray(seed),
                                                           impl=prng.threefry_impl))


def PRNGKey(seed: Any, *, impl: Any = None) -> Any:
  """A raw (legacy) Threefry key, `u32[2]`, from an integer seed (JAX's `random.PRNGKey`).

  Args:
    seed: a Python int (taken modulo 2**32 after int64 conversion) or an integer scalar
      array.
    impl: None or `'threefry2x32'`.

  Returns:
    `u32[2]`: `[0, seed mod 2**32]`.

  Raises:
    TypeError: for a non-integer or non-scalar seed, or a key as seed.
    OverflowError: for a Python int outside int64.

  Examples:
    >>> PRNGKey(42)
    Array([ 0, 42], dtype=uint32)
  """
  _check_impl(impl)
  return _seed_data("PRNGKey", seed)


def key(seed: Any, *, impl: Any = None, dtype: Any = None) -> PRNGKeyArray:
  """A typed Threefry key, `key<fry>[]`, from an integer seed (JAX's `random.key`).

  Args:
    seed: as for `PRNGKey`.
    impl, dtype: None, `'threefry2x32'` or `KeyTy()`.

  Returns:
    A scalar `PRNGKeyArray` over the data `PRNGKey(seed)`.

  Raises:
    TypeError: as `PRNGKey`.
    ValueError: if both `impl` and `dtype` are given.

  Examples:
    >>> key(0)
    Array((), dtype=key<fry>) overlaying:
    [0 0]
  """
  if impl is not None and dtype is not None:
    raise ValueError("Cannot specify both `impl` and `dtype` arguments to stagecraft.random.key")
  _check_impl(impl if dtype is None else dtype)
  return PRNGKeyArray._from_keys(_seed_data("key", seed, keys=True))


def key_data(keys: Any) -> Any:
  """The `u32[*s, 2]` data of keys `key<fry>[*s]` (raw keys are returned as they are)."""
  data, _ = _check_prng_key("key_data", keys, allow_batched=True)
  return data


def wrap_key_data(key_bits_array: Any, *, impl: Any = None, dtype: Any = None) -> PRNGKeyArray:
  """Typed keys `key<fry>[*s]` over key data `u32[*s, 2]` (JAX's `random.wrap_key_data`).

  Raises:
    TypeError: if the data is not `u32[..., 2]`.
    ValueError: if both `impl` and `dtype` are given.
  """
  if impl is not None and dtype is not None:
    raise ValueError("Cannot specify both `impl` and `dtype` arguments to "
                     "stagecraft.random.wrap_key_data")
  _check_impl(impl if dtype is None else dtype)
  return PRNGKeyArray(_check_key_data(key_bits_array))


def key_impl(keys: Any) -> str:
  """The implementation name of `keys`: `'threefry2x32'`."""
  _check_prng_key("key_impl", keys, allow_batched=True)
  return _IMPL_NAME


def clone(key: Any) -> Any:
  """A copy of `key` that key reuse checking (config `debug_key_reuse`) sees as a fresh,
  unconsumed key; `key` itself is not consumed. Raw keys are returned as they are.

  Example: with reuse checking on, `normal(key)` then `normal(clone(key))` raises nothing.
  """
  if isinstance(key, PRNGKeyArray):
    return PRNGKeyArray(key._base_array)
  return key


# ---------------------------------------------------------------------------
# The Threefry key functions and bits (JAX's prng.py / threefry2x32.py with
# `jax_threefry_partitionable`).


def _wrap(data):
  """Keys `key<fry>[*s]` over key data `u32[*s, 2]` (`random_wrap`; for a concrete Array a
  view of the same buffer, with no program run)."""
  if (type(data) is Array and data.aval.dtype == _u32 and data.shape[-1:] == (2,)
      and core.trace_state.trace is core.eval_trace):
    return Array(data._buf, prng.key_aval(data.aval), data._device,
                 _keys_sharding(data._sharding, len(data.shape) - 1))
  return prng.random_wrap_p.bind(data, impl=prng.threefry_impl)


def _unwrap(keys):
  """Key data `u32[*s, 2]` of keys `key<fry>[*s]` (`random_unwrap`; for a concrete Array a
  view of the same buffer)."""
  if type(keys) is Array and core.trace_state.trace is core.eval_trace:
    return keys._physical()
  return prng.random_unwrap_p.bind(keys)


def _is_keys(x) -> bool:
  return type(getattr(x, "dtype", None)) is KeyTy


def _as_keys(x):
  return x if _is_keys(x) else _wrap(x)


def _split_data(x, shape):
  """Keys split from a key (JAX's `random_split`): `key<fry>[*shape]` from keys
  `key<fry>[]`, or key data `u32[*shape, 2]` from key data `u32[2]`."""
  out = prng.random_split_p.bind(_as_keys(x), shape=tuple(shape))
  return out if _is_keys(x) else _unwrap(out)


def _fold_in_data(x, msg):
  """A key folded with a `u32[]` message (keys in, keys out; key data in, key data out)."""
  out = prng.random_fold_in_p.bind(_as_keys(x), msg)
  return out if _is_keys(x) else _unwrap(out)


def _random_bits(x, bit_width: int, shape: tuple[int, ...]):
  """`uint{bit_width}[*shape]` bits from a key or key data `u32[2]` (JAX's `random_bits`:
  see `lax.prng.threefry_random_bits`)."""
  return _key_bits(_as_keys(x), bit_width, shape)


def _key_bits(keys, bit_width: int, shape: tuple[int, ...]):
  if bit_width == 64 and dtypes.canonicalize_dtype(np.uint64) != _UINT[64]:
    raise TypeError("64-bit random bits need x64: enable it with "
                    "`stagecraft.config.update('jax_enable_x64', True)`.")
  return prng.random_bits_p.bind(keys, bit_width=bit_width, shape=tuple(shape))


def split(key: Any, num: int | Sequence[int] = 2) -> Any:
  """Splits a key into `num` new keys along a new leading axis (JAX's `random.split`).

  Args:
    key: a single key (typed `key<fry>[]` or raw `u32[2]`).
    num: a non-negative int n, or a shape tuple `s`.

  Returns:
    Keys `key<fry>[n]` / `key<fry>[*s]` (raw `u32[n, 2]` / `u32[*s, 2]` for a raw key).

  Raises:
    ValueError: if `key` is a batch of keys.
    TypeError: for invalid key data.

  Examples:
    >>> split(PRNGKey(0))
    Array([[1797259609, 2579123966],
           [ 928981903, 3453687069]], dtype=uint32)
  """
  keys, typed = _check_prng_key("split", key, keys=True)
  shape = (tuple(canonicalize_shape("split", "num", num)) if isinstance(num, Sequence)
           else (operator.index(num),))
  return _return_key_values(typed, prng.random_split_p.bind(keys, shape=shape))


def fold_in(key: Any, data: Any) -> Any:
  """A new key from `key` and a 32-bit integer `data` (JAX's `random.fold_in`).

  Args:
    key: a single key.
    data: an integer scalar, taken as uint32 (Python ints must lie in [0, 2**32)).

  Returns:
    A key of the same kind as `key`: `threefry2x32(key, (0, data))`.

  Raises:
    TypeError: if `data` is not a scalar.
    OverflowError: for a Python int outside uint32.

  Examples:
    >>> fold_in(PRNGKey(0), 1)
    Array([ 928981903, 3453687069], dtype=uint32)
  """
  keys, typed = _check_prng_key("fold_in", key, keys=True)
  if np.ndim(data) if not hasattr(data, "ndim") else data.ndim:
    raise TypeError(f"fold_in accepts a scalar, but was given an array of shape "
                    f"{tuple(np.shape(data))} != (). Use stagecraft.vmap for batching.")
  if isinstance(data, int) and not isinstance(data, bool):
    if not 0 <= data < 2 ** 32:
      raise OverflowError(f"Python integer {data} out of bounds for uint32")
    data = np.uint32(data)
  msg = lax.convert_element_type(data, _u32)
  return _return_key_values(typed, prng.random_fold_in_p.bind(keys, msg))


def _canonical_shape(name: str, shape: Any) -> tuple[int, ...]:
  """A sampler's `shape` as a tuple of ints; a single int `n` means `(n,)`, as in JAX
  (`random.normal(key, 3)`; flax.nnx's tests draw so). `choice` alone insists on a
  sequence (checked there)."""
  if isinstance(shape, (int, np.integer)) and not isinstance(shape, (bool, np.bool_)):
    shape = (shape,)
  shape = canonicalize_shape(name, "shape", shape)
  if any(not shape_poly.is_symbolic_dim(d) and d < 0 for d in shape):
    # NB: JAX 0.10.2 fails later, in MLIR ("invalid tensor dimension size").
    raise TypeError(f"{name} shape must have every element be nonnegative, got {shape}.")
  return shape


def _promote_inexact(*args):
  """`promote_dtypes_inexact` with NumPy arrays first made canonical (`jnp.asarray`).

  NB: `numpy.util.promote_dtypes_inexact` returns a float64 NumPy array unchanged without
  x64 (its aval is already f32), which would then draw 64-bit bits."""
  args = [a if dtypes.is_python_scalar(a) else jnp.asarray(a) for a in args]
  return jnp_util.promote_dtypes_inexact(*args)


def _promote_inexact_as_jax(*args):
  """`promote_dtypes_inexact`, with a Python scalar made strongly typed when the promoted
  type is (JAX converts every argument to the common weak type; stagecraft's numpy helper
  leaves Python scalars weak, which a `scan` carry would keep)."""
  out = jnp_util.promote_dtypes_inexact(*args)
  if any(not core.get_aval(x).weak_type for x in out):
    out = [lax.convert_element_type(x, core.get_aval(x).dtype) if dtypes.is_python_scalar(x)
           or core.get_aval(x).weak_type else x for x in out]
  return out


def _float_dtype(name: str, dtype: Any, kinds: str = "float") -> np.dtype:
  # NB: JAX's random functions check the user's dtype without naming themselves.
  dt = dtypes.check_user_dtype(float if dtype is None else dtype)
  ok = dtypes.is_float(dt) if kinds == "float" else dtypes.is_inexact(dt)
  if not ok:
    what = "a float dtype" if kinds == "float" else "a float or complex dtype"
    raise ValueError(f"dtype argument to `{name}` must be {what}, got {dt.name}")
  return dt


def bits(key: Any, shape: Sequence[int] = (), dtype: Any = None) -> Any:
  """Uniformly random unsigned integers (JAX's `random.bits`).

  Args:
    key: a single key.
    shape: the result shape `s`.
    dtype: uint8, uint16, uint32 or uint64 (default uint32; uint64 under x64; without x64
      uint64 is canonicalized to uint32).

  Returns:
    `dtype[*s]`.

  Raises:
    ValueError: if `dtype` is not an unsigned integer dtype.

  Examples:
    >>> bits(PRNGKey(0), (3,))
    Array([4070199207, 4202968722, 1427181096], dtype=uint32)
  """
  keys, _ = _check_prng_key("bits", key, keys=True)
  dt = dtypes.default_uint_dtype() if dtype is None else dtypes.check_user_dtype(dtype)
  if not dtypes.is_unsigned(dt):
    raise ValueError(f"dtype argument to `bits` must be an unsigned int dtype, got {dt.name}")
  # NB: not jitted, as JAX's `bits`: the program holds `random_bits` of the keys
  return _key_bits(keys, dt.itemsize * 8, _canonical_shape("bits", shape))


# JAX's private raw-key Threefry functions (`jax._src.random.threefry2x32.threefry_seed`,
# ...), which `stagecraft.compat` serves under those names while installed: quax's PRNG
# example builds its keys with them. Same bits as the public functions.


def _jax_threefry_seed(seed: Any) -> Any:
  """`u32[2]`: the raw key of an integer scalar seed (`PRNGKey(seed)`'s data)."""
  return _threefry_seed(jnp.asarray(seed))


def _jax_threefry_split(key: Any, shape: Sequence[int]) -> Any:
  """`u32[*shape, 2]`: the raw keys `split` makes from raw key data `u32[2]`."""
  return _split_data(_check_key_data(key), tuple(int(d) for d in shape))


def _jax_threefry_fold_in(key: Any, data: Any) -> Any:
  """`u32[2]`: raw key data folded with the scalar `data`, as `fold_in`."""
  return _fold_in_data(_check_key_data(key), jnp.asarray(data, dtype=_u32))


def _jax_threefry_random_bits(key: Any, bit_width: int, shape: Sequence[int]) -> Any:
  """`uint{bit_width}[*shape]` bits from raw key data `u32[2]`, as `bits`.

  Raises:
    TypeError: for a bit width other than 8, 16, 32 or 64 (JAX's words).
  """
  if bit_width not in (8, 16, 32, 64):
    raise TypeError("requires 8-, 16-, 32- or 64-bit field width.")
  return _random_bits(_check_key_data(key), bit_width, tuple(int(d) for d in shape))


# ---------------------------------------------------------------------------
# Continuous distributions


def _broadcast_to_rank(x, rank):
  nd = np.ndim(x)
  return lax.expand_dims(x, tuple(range(rank - nd))) if nd < rank else x


def _check_shape(name: str, shape, *param_shapes) -> None:
  if param_shapes:
    shape_ = jnp.broadcast_shapes(shape, *param_shapes)
    if tuple(shape) != tuple(shape_):
      raise ValueError(f"{name} parameter shapes must be broadcast-compatible with shape "
                       f"argument, and the result of broadcasting the shapes must equal the "
                       f"shape argument, but got result {tuple(shape_)} for shape argument "
                       f"{tuple(shape)}.")


def _uniform(keys, minval, maxval, shape, dtype):
  """JAX's `_uniform`: random mantissa bits under the exponent of 1.0, minus 1, scaled (the
  same operations in the same order, so the programs print as JAX's)."""
  minval = lax.convert_element_type(minval, dtype)
  maxval = lax.convert_element_type(maxval, dtype)
  minval = _broadcast_to_rank(minval, len(shape))
  maxval = _broadcast_to_rank(maxval, len(shape))
  finfo = dtypes.finfo(dtype)
  nbits, nmant = finfo.bits, finfo.nmant
  if nbits not in (8, 16, 32, 64):
    raise TypeError(f"uniform only accepts 8-, 16-, 32- or 64-bit dtypes, got "
                    f"{np.dtype(dtype).name}.")
  rng_bits = 8 if nmant < 8 else nbits   # NB: bfloat16 (7 mantissa bits) draws 8 bits
  uint = _UINT[nbits]
  b = _random_bits(keys, rng_bits, shape)
  if rng_bits != nbits:
    b = lax.convert_element_type(b, uint)
  float_bits = lax.shift_right_logical(b, np.array(rng_bits - nmant, uint))
  float_bits = lax.bitwise_or(float_bits, np.array(1.0, dtype).view(uint))
  floats = lax.bitcast_convert_type(float_bits, dtype) - np.array(1.0, dtype)
  return lax.max(minval, lax.reshape(floats * (maxval - minval) + minval, tuple(shape)))


# NB: JAX's samplers call `uniform`, whose jitted `_uniform` is an equation of their programs
_uniform = jit(_uniform, static_argnums=(3, 4))


def uniform(key: Any, shape: Sequence[int] = (), dtype: Any = None, minval: Any = 0.,
            maxval: Any = 1.) -> Any:
  """Uniform floats in `[minval, maxval)` (JAX's `random.uniform`).

  Args:
    key: a single key.
    shape: the result shape `s`.
    dtype: a floating dtype T (default float32; float64 under x64).
    minval, maxval: bounds broadcastable to `s`.

  Returns:
    `T[*s]`.

  Raises:
    ValueError: if T is not floating.

  Algorithm: `nmant` random bits (of `nbits` drawn) fill the mantissa of a float in
  `[1, 2)`; subtracting 1 gives `[0, 1)`, then `u * (maxval - minval) + minval`, floored at
  `minval` (JAX's `_uniform`).

  Examples:
    >>> uniform(PRNGKey(0), (2,))
    Array([0.947667 , 0.9785799], dtype=float32)
  """
  data, _ = _check_prng_key("uniform", key, keys=True)
  dt = _float_dtype("uniform", dtype)
  return _uniform(data, minval, maxval, _canonical_shape("uniform", shape), dt)


@partial(jit, static_argnums=(1, 2))
def _normal_real(data, shape, dtype):
  lo = np.nextafter(np.array(-1., dtype), np.array(0., dtype), dtype=dtype)
  u = _uniform(data, lo, np.array(1., dtype), shape, dtype)
  return lax.mul(np.array(np.sqrt(2), dtype), lax.erf_inv(u))


@partial(jit, static_argnums=(1, 2))
def _normal(data, shape, dtype):
  if dtypes.is_complex(dtype):
    real = np.dtype(np.float32) if dtype == np.complex64 else np.dtype(np.float64)
    k_re, k_im = _split_data(data, (2,))
    re = _normal_real(k_re, shape, real).astype(dtype)
    im = _normal_real(k_im, shape, real).astype(dtype)
    return (re + 1j * im) / np.array(np.sqrt(2), dtype)
  return _normal_real(data, shape, dtype)


def normal(key: Any, shape: Sequence[int] = (), dtype: Any = None) -> Any:
  """Standard normal samples (JAX's `random.normal`).

  Args:
    key: a single key.
    shape: the result shape `s`.
    dtype: a floating or complex dtype T (default float32; float64 under x64). Complex
      samples have independent real and imaginary parts of variance 1/2 each.

  Returns:
    `T[*s]`.

  Raises:
    ValueError: if T is not floating or complex.

  Algorithm: `sqrt(2) * erf_inv(u)` with u uniform in `(-1, 1)` (inverse-CDF sampling).

  Examples:
    >>> normal(PRNGKey(0), (2,))
    Array([1.6226422, 2.0252647], dtype=float32)
  """
  data, _ = _check_prng_key("normal", key, keys=True)
  dt = _float_dtype("normal", dtype, "inexact")
  return _normal(data, _canonical_shape("normal", shape), dt)


def _factor_cov(cov, method: str):
  """A matrix `A` with `A A^T = cov` (batched over leading axes)."""
  if method == "svd":
    u, sv, _ = jnp.linalg.svd(cov)
    return u * jnp.sqrt(sv[..., None, :])
  if method == "eigh":
    w, v = jnp.linalg.eigh(cov)
    return v * jnp.sqrt(w[..., None, :])
  return jnp.linalg.cholesky(cov)


@partial(jit, static_argnums=(3, 4, 5))
def _multivariate_normal(data, mean, cov, shape, dtype, method):
  factor = _factor_cov(cov, method)
  n = _normal(data, (*shape, mean.shape[-1]), dtype)
  # NB: as JAX's: the mean broadcasts against the samples even under
  # jax_numpy_rank_promotion='raise' (or 'warn': no warning)
  with numpy_rank_promotion("allow"):
    return mean + jnp.einsum("...ij,...j->...i", factor, n)


def multivariate_normal(key: Any, mean: Any, cov: Any, shape: Sequence[int] | None = None,
                        dtype: Any = None, method: str = "cholesky") -> Any:
  """Multivariate normal samples with `mean` and covariance `cov` (JAX's
  `random.multivariate_normal`).

  Args:
    key: a single key.
    mean: means `f[*b1, n]`.
    cov: positive (semi-)definite covariances `f[*b2, n, n]`.
    shape: the batch shape `s`, broadcast-compatible with `b1` and `b2`; default their
      broadcast shape.
    dtype: a floating dtype T of the normal draws (default: the promoted dtype of `mean`
      and `cov`).
    method: how to factor `cov = A A^T`: `'cholesky'` (default), `'svd'` (`A = U sqrt(S)`)
      or `'eigh'` (`A = V sqrt(W)`); use the last two for singular `cov`.

  Returns:
    `mean + A z` with z standard normal `T[*s, n]` (`normal(key, (*s, n), T)`), of shape
    `(*s, n)` and the promoted dtype of `mean`, `cov` and T.

  Raises:
    ValueError: for an unknown method, a non-floating T, `mean` of rank 0, `cov` of rank
      below 2 or not `(..., n, n)`, or batch shapes that do not broadcast to `shape`.

  Algorithm: the affine transformation of standard normals (e.g. Gentle, "Random Number
  Generation and Monte Carlo Methods", 2003, sec. 5.3.1), with JAX's key use.

  Examples:
    >>> import numpy as np
    >>> multivariate_normal(PRNGKey(0), np.zeros(2, np.float32), np.eye(2, dtype=np.float32),
    ...                     (2,))
    Array([[ 1.6226422 ,  2.0252647 ],
           [-0.43359444, -0.07861735]], dtype=float32)
  """
  data, _ = _check_prng_key("multivariate_normal", key, keys=True)
  mean, cov = _promote_inexact(mean, cov)
  if method not in ("svd", "eigh", "cholesky"):
    raise ValueError("method must be one of {'svd', 'eigh', 'cholesky'}")
  dt = (dtypes.dtype(mean, canonicalize=True) if dtype is None
        else dtypes.check_user_dtype(dtype))
  if not dtypes.is_float(dt):
    raise ValueError(f"dtype argument to `multivariate_normal` must be a float dtype, "
                     f"got {dt.name}")
  mean_shape, cov_shape = np.shape(mean), np.shape(cov)
  if len(mean_shape) < 1:
    raise ValueError(f"multivariate_normal requires mean.ndim >= 1, got mean.ndim == "
                     f"{len(mean_shape)}")
  if len(cov_shape) < 2:
    raise ValueError(f"multivariate_normal requires cov.ndim >= 2, got cov.ndim == "
                     f"{len(cov_shape)}")
  n = mean_shape[-1]
  if tuple(cov_shape[-2:]) != (n, n):
    raise ValueError(f"multivariate_normal requires cov.shape == (..., n, n) for n={n}, "
                     f"but got cov.shape == {tuple(cov_shape)}.")
  if shape is None:
    shape = tuple(jnp.broadcast_shapes(mean_shape[:-1], cov_shape[:-2]))
  else:
    shape = _canonical_shape("multivariate_normal", shape)
    _check_shape("normal", shape, mean_shape[:-1], cov_shape[:-2])
  return _multivariate_normal(data, mean, cov, tuple(shape), dt, method)


@partial(jit, static_argnums=(1, 2, 3, 4))
def _orthogonal(data, n, m, shape, dtype):
  z = _normal(data, (*shape, max(n, m), min(n, m)), dtype)
  q, r = jnp.linalg.qr(z)
  d = jnp.diagonal(r, axis1=-2, axis2=-1)   # NB: jnp.linalg.diagonal takes axes 0, 1 here
  x = q * jnp.expand_dims(jnp.sign(d), -2)
  return jnp.matrix_transpose(x) if n < m else x


def orthogonal(key: Any, n: int, shape: Sequence[int] = (), dtype: Any = None,
               m: int | None = None) -> Any:
  """Uniform samples from the orthogonal group O(n) (the unitary group U(n) for a complex
  dtype), or semi-orthogonal `n x m` matrices (JAX's `random.orthogonal`).

  Args:
    key: a single key.
    n: the number of rows (static).
    shape: the batch shape `s`.
    dtype: a floating or complex dtype T (default float32; float64 under x64).
    m: the number of columns (static); default `n`.

  Returns:
    `T[*s, n, m]` with orthonormal rows (`n <= m`) or columns (`m <= n`).

  Raises:
    ValueError: if T is not floating or complex.
    TypeError: if `n` or `m` is not an integer.

  Algorithm: Mezzadri, "How to generate random matrices from the classical compact
  groups", Notices of the AMS 54(5), 2007: the Q of a QR factorization of a
  `max(n, m) x min(n, m)` standard normal matrix, its columns multiplied by the signs
  (phases) of R's diagonal; transposed (not conjugated) when `n < m`.

  Examples:
    >>> q = orthogonal(PRNGKey(0), 3)
    >>> bool(abs(q @ q.T - np.eye(3)).max() < 1e-5)
    True
  """
  shape = _canonical_shape("orthogonal", shape)
  data, _ = _check_prng_key("orthogonal", key, keys=True)
  dt = _float_dtype("normal", dtype, "inexact")
  n = operator.index(n)
  m = n if m is None else operator.index(m)
  return _orthogonal(data, n, m, shape, dt)


@partial(jit, static_argnums=(3, 4))
def _truncated_normal(data, lower, upper, shape, dtype):
  sqrt2 = np.array(np.sqrt(2), dtype)
  lower = lax.convert_element_type(lower, dtype)
  upper = lax.convert_element_type(upper, dtype)
  a = lax.erf(lower / sqrt2)
  b = lax.erf(upper / sqrt2)
  u = _uniform(data, a, b, shape, dtype)
  out = sqrt2 * lax.erf_inv(u)
  # Clamp to the open interval (lower, upper): rounding may land on a bound.
  return jnp.clip(out, lax.nextafter(lax.stop_gradient(lower), np.array(np.inf, dtype)),
                  lax.nextafter(lax.stop_gradient(upper), np.array(-np.inf, dtype)))


def truncated_normal(key: Any, lower: Any, upper: Any, shape: Sequence[int] | None = None,
                     dtype: Any = None) -> Any:
  """Standard normal samples truncated to `(lower, upper)` (JAX's `random.truncated_normal`).

  Args:
    key: a single key.
    lower, upper: bounds, broadcastable to `shape`.
    shape: the result shape `s`; default: the broadcast shape of the bounds.
    dtype: a floating dtype T (default float32; float64 under x64).

  Returns:
    `T[*s]`, in the open interval `(lower, upper)`.

  Raises:
    ValueError: if T is not floating, or the bounds do not broadcast to `shape`.

  Algorithm: inverse CDF: `sqrt(2) erf_inv(u)` with u uniform in
  `[erf(lower/sqrt 2), erf(upper/sqrt 2))`, then clipped inside the bounds.
  """
  data, _ = _check_prng_key("truncated_normal", key, keys=True)
  dt = _float_dtype("truncated_normal", dtype)
  if shape is None:
    shape = jnp.broadcast_shapes(np.shape(lower), np.shape(upper))
  else:
    shape = _canonical_shape("truncated_normal", shape)
    _check_shape("truncated_normal", shape, np.shape(lower), np.shape(upper))
  return _truncated_normal(data, lower, upper, tuple(shape), dt)


def _bits_to_unit_float32(b):
  """`f32[*s]` in (0, 1) from `u32[2, *s]`: the 64-bit fixed-point fraction `0.hi lo`
  rounded down to float32 with all its leading zero bits turned into exponent, so that
  values near 0 keep 24 significant bits (JAX's `_safe_int_to_float`)."""
  u32 = lambda v: np.array(v, _u32)
  hi, lo = b[0], b[1]
  hiclz, loclz = lax.clz(hi), lax.clz(lo)
  hi_zero = lax.eq(hiclz, u32(32))
  # The 32 bits after the leading one (shifts by 32 give 0, as in XLA).
  top = lax.bitwise_or(
      lax.shift_left(hi, hiclz),
      lax.select(hi_zero, lax.shift_left(lo, loclz),
                 lax.shift_right_logical(lo, lax.sub(u32(32), hiclz))))
  mantissa = lax.bitwise_and(lax.shift_right_logical(top, u32(8)), u32((1 << 23) - 1))
  nzeros = lax.select(hi_zero, lax.add(u32(32), loclz), hiclz)
  exponent = lax.shift_left(lax.sub(u32(126), nzeros), u32(23))
  exponent = lax.bitwise_and(exponent, u32((1 << 30) - (1 << 22)))
  return lax.bitcast_convert_type(lax.bitwise_or(exponent, mantissa), np.float32)


@partial(jit, static_argnums=(1, 2, 3))
def _gumbel(data, shape, dtype, mode):
  info = dtypes.finfo(dtype)
  if mode == "highest" and dtype == np.float32:
    # 64 random bits per sample: u as a 64-bit fixed-point fraction, with `1 - u` (exact
    # in fixed point) when u < 1/2, so that both tails keep full float32 precision.
    b = _random_bits(data, 32, (2, *shape))
    neg = lax.bitwise_not(b)
    carry = lax.convert_element_type(lax.eq(neg[1], np.array(0xFFFFFFFF, _u32)), _u32)
    neg = lax.add(neg, jnp.stack([carry, jnp.ones_like(carry)]))
    flip = lax.lt(b[0], np.array(1 << 31, _u32))
    x = _bits_to_unit_float32(jnp.where(flip, b, neg))
    return jnp.where(flip, -jnp.log(-jnp.log1p(-x)), -jnp.log(-jnp.log(x)))
  if mode in ("high", "highest"):
    # NB: keyword arguments, as JAX's call (jit flattens them by name: maxval, minval)
    high, low = _uniform(data, minval=0., maxval=1., shape=(2, *shape), dtype=dtype)
    x = jnp.where(high >= 0.5, high,
                  high + np.array(2. ** -info.nmant, dtype) * low + np.array(info.tiny, dtype))
    return -jnp.log(-jnp.log1p(-x))
  return -jnp.log(-jnp.log(_uniform(data, minval=info.tiny, maxval=1., shape=shape,
                                    dtype=dtype)))


def _gumbel_mode(mode: str | None) -> str:
  mode = "low" if mode is None else mode
  if mode not in ("highest", "high", "low"):
    raise ValueError(f"Must provide valid mode for gumbel got: {mode}")
  return mode


def gumbel(key: Any, shape: Sequence[int] = (), dtype: Any = None,
           mode: str | None = None) -> Any:
  """Standard Gumbel samples (JAX's `random.gumbel`): density `exp(-(x + exp(-x)))`.

  Args:
    key: a single key.
    shape: the result shape `s`.
    dtype: a floating dtype T (default float32; float64 under x64).
    mode: `"low"` (default: `-log(-log(u))`, u uniform in `[tiny, 1)`), `"high"` (two
      draws per sample for a finer u near 0) or `"highest"` (float32: u from 64 random
      bits with exact `1 - u`, so both tails reach ~float32's range; other dtypes: as
      `"high"`).

  Returns:
    `T[*s]`.

  Raises:
    ValueError: for a non-floating T or an unknown mode.
  """
  data, _ = _check_prng_key("gumbel", key, keys=True)
  dt = _float_dtype("gumbel", dtype)
  return _gumbel(data, _canonical_shape("gumbel", shape), dt, _gumbel_mode(mode))


def _unary_sampler(name: str, impl, doc: str):
  """The public sampler `name(key, shape=(), dtype=None)` calling the jitted `impl` (JAX's
  `_laplace`, `_exponential`, ...: named so in programs)."""
  def sampler(key: Any, shape: Sequence[int] = (), dtype: Any = None) -> Any:
    data, _ = _check_prng_key(name, key, keys=True)
    return impl(data, _canonical_shape(name, shape), _float_dtype(name, dtype))
  sampler.__name__ = sampler.__qualname__ = name
  sampler.__doc__ = f"""{doc} (`stagecraft.random.{name}`).

  Args:
    key: a single key.
    shape: the result shape `s`.
    dtype: a floating dtype T (default float32; float64 under x64).

  Returns:
    `T[*s]`.

  Raises:
    ValueError: if T is not floating.
  """
  return sampler


def _key_at(keys, i: int):
  """`keys[i]` of split keys `key<fry>[n]` (or key data `u32[n, 2]`), as JAX's indexing
  stages it: a slice without strides, then a squeeze."""
  rest = tuple(np.shape(keys)[1:])
  return lax.squeeze(lax.slice(keys, (i,) + (0,) * len(rest), (i + 1, *rest)), (0,))


@partial(jit, static_argnums=(1, 2))
def _laplace(data, shape, dtype):
  u = _uniform(data, -1. + dtypes.finfo(dtype).epsneg, 1., shape, dtype)
  return lax.mul(lax.sign(u), lax.log1p(lax.neg(lax.abs(u))))


@partial(jit, static_argnums=(1, 2))
def _logistic(data, shape, dtype):
  x = _uniform(data, dtypes.finfo(dtype).tiny, 1., shape, dtype)
  return lax.sub(lax.log(x), lax.log1p(lax.neg(x)))


@partial(jit, static_argnums=(1, 2))
def _exponential(data, shape, dtype):
  u = _uniform(data, 0., 1., shape, dtype)
  return lax.neg(lax.log1p(lax.neg(u)))   # log(1 - u): u = 0 is fine, 1 never drawn


@partial(jit, static_argnums=(1, 2))
def _cauchy(data, shape, dtype):
  u = _uniform(data, dtypes.finfo(dtype).eps, 1., shape, dtype)
  return lax.tan(lax.mul(np.array(np.pi, dtype), lax.sub(u, np.array(0.5, dtype))))


@partial(jit, static_argnums=(1, 2))
def _maxwell(data, shape, dtype):
  # NB: `_normal` (then `_normal_real`) and `jnp.linalg.norm`, each a jit of its own as JAX's
  return jnp.linalg.norm(_normal(data, (*shape, 3), dtype), axis=-1)


laplace = _unary_sampler("laplace", _laplace,
                         "Laplace samples, density `exp(-|x|) / 2`; "
                         "`sign(u) log1p(-|u|)` with u uniform in `(-1, 1)`")
logistic = _unary_sampler("logistic", _logistic,
                          "Standard logistic samples; `log(u) - log1p(-u)`, u uniform")
exponential = _unary_sampler("exponential", _exponential,
                             "Standard exponential samples, density `exp(-x)`; "
                             "`-log1p(-u)`, u uniform in `[0, 1)`")
cauchy = _unary_sampler("cauchy", _cauchy,
                        "Standard Cauchy samples; `tan(pi (u - 1/2))`, u uniform in "
                        "`[eps, 1)`")
maxwell = _unary_sampler("maxwell", _maxwell,
                         "Maxwell samples: the norm of 3 standard normals")


@partial(jit, static_argnums=(2, 3))
def _pareto(data, b, shape, dtype):
  b = lax.convert_element_type(b, dtype)
  return lax.exp(lax.div(_exponential(data, shape, dtype), b))


def pareto(key: Any, b: Any, shape: Sequence[int] | None = None, dtype: Any = None) -> Any:
  """Pareto samples with shape parameter `b`: `exp(e / b)`, e exponential
  (JAX's `random.pareto`). Returns `T[*shape]` (default shape: `b`'s)."""
  data, _ = _check_prng_key("pareto", key, keys=True)
  dt = _float_dtype("pareto", dtype)
  shape = np.shape(b) if shape is None else _canonical_shape("pareto", shape)
  _check_shape("pareto", shape, np.shape(b))
  return _pareto(data, b, tuple(shape), dt)


@partial(jit, static_argnums=(2, 3), inline=True)   # NB: inlined, as JAX's
def _lognormal(data, sigma, shape, dtype):
  sigma = lax.convert_element_type(sigma, dtype)
  return lax.exp(lax.mul(_normal(data, shape, dtype), sigma))


def lognormal(key: Any, sigma: Any = 1., shape: Sequence[int] | None = None,
              dtype: Any = None) -> Any:
  """Log-normal samples `exp(sigma * n)`, n standard normal (JAX's `random.lognormal`)."""
  data, _ = _check_prng_key("lognormal", key, keys=True)
  dt = _float_dtype("lognormal", dtype)
  shape = np.shape(sigma) if shape is None else _canonical_shape("lognormal", shape)
  _check_shape("lognormal", shape, np.shape(sigma))
  return _lognormal(data, sigma, tuple(shape), dt)


@partial(jit, static_argnums=(2, 3))
def _rayleigh(data, scale, shape, dtype):
  u = _uniform(data, 0., 1., shape, dtype)
  scale = jnp.broadcast_to(lax.convert_element_type(scale, dtype), shape)
  return lax.mul(scale, lax.sqrt(lax.mul(lax.log(u), np.array(-2, dtype))))


def rayleigh(key: Any, scale: Any, shape: Sequence[int] | None = None,
             dtype: Any = None) -> Any:
  """Rayleigh samples `scale * sqrt(-2 log(u))` (JAX's `random.rayleigh`)."""
  data, _ = _check_prng_key("rayleigh", key, keys=True)
  dt = _float_dtype("rayleigh", dtype)
  shape = np.shape(scale) if shape is None else _canonical_shape("rayleigh", shape)
  _check_shape("rayleigh", shape, np.shape(scale))
  return _rayleigh(data, scale, tuple(shape), dt)


@partial(jit, static_argnums=(3, 4))
def _weibull_min(data, scale, concentration, shape, dtype):
  random_uniform = _uniform(data, 0, 1, shape, dtype)   # NB: int bounds, as JAX's call
  # Inverse CDF of the Weibull distribution.
  return jnp.power(-jnp.log1p(-random_uniform), 1.0 / concentration) * scale


def weibull_min(key: Any, scale: Any, concentration: Any, shape: Sequence[int] = (),
                dtype: Any = None) -> Any:
  """Weibull samples `scale * (-log1p(-u)) ** (1 / concentration)`
  (JAX's `random.weibull_min`)."""
  data, _ = _check_prng_key("weibull_min", key, keys=True)
  dt = _float_dtype("weibull_min", dtype)
  return _weibull_min(data, scale, concentration, _canonical_shape("weibull_min", shape), dt)


@partial(jit, static_argnums=(3, 4))
def _double_sided_maxwell(data, loc, scale, shape, dtype):
  params_shapes = jnp.broadcast_shapes(np.shape(loc), np.shape(scale))
  if not shape:
    shape = params_shapes
  shape = tuple(shape) + tuple(params_shapes)
  k_m, k_sign = _split_data(data, (2,))
  maxwell_rvs = _maxwell(k_m, shape, dtype)
  random_sign = _rademacher(k_sign, shape, dtype)
  return random_sign * maxwell_rvs * scale + loc


def double_sided_maxwell(key: Any, loc: Any, scale: Any, shape: Sequence[int] = (),
                         dtype: Any = None) -> Any:
  """Double-sided Maxwell samples `loc + scale * sign * maxwell`
  (JAX's `random.double_sided_maxwell`); the result shape is `shape + broadcast(loc, scale)`."""
  data, _ = _check_prng_key("double_sided_maxwell", key, keys=True)
  dt = _float_dtype("double_sided_maxwell", dtype)
  return _double_sided_maxwell(data, loc, scale,
                               _canonical_shape("double_sided_maxwell", shape), dt)


def _broadcast_shape_of(name, shape, *params):
  """JAX's `_check_broadcast_shapes`: the params' broadcast shape, or `shape` checked."""
  if shape is None:
    return tuple(jnp.broadcast_shapes(*(np.shape(p) for p in params))) if params else ()
  shape = _canonical_shape(name, shape)
  _check_shape(name, shape, *(np.shape(p) for p in params))
  return shape


@partial(jit, static_argnums=(4, 5), inline=True)   # NB: inlined, as JAX's
def _triangular(data, left, mode, right, shape, dtype):
  left = jnp.broadcast_to(lax.convert_element_type(left, dtype), shape)
  right = jnp.broadcast_to(lax.convert_element_type(right, dtype), shape)
  mode = jnp.broadcast_to(lax.convert_element_type(mode, dtype), shape)
  fc = (mode - left) / (right - left)
  u = _uniform(data, 0., 1., shape, dtype)
  out1 = left + lax.sqrt(u * (right - left) * (mode - left))
  out2 = right - lax.sqrt((1 - u) * (right - left) * (right - mode))
  return lax.select(u < fc, out1, out2)


def triangular(key: Any, left: Any, mode: Any, right: Any,
               shape: Sequence[int] | None = None, dtype: Any = None) -> Any:
  """Triangular samples on `[left, right]` with peak `mode`, by inverse CDF
  (JAX's `random.triangular`); `T[*shape]`, default shape: the parameters' broadcast."""
  data, _ = _check_prng_key("triangular", key, keys=True)
  dt = _float_dtype("triangular", dtype)
  shape = _broadcast_shape_of("triangular", shape, left, mode, right)
  return _triangular(data, left, mode, right, shape, dt)


@partial(jit, static_argnums=(2, 3))
def _wald(data, mean, shape, dtype):
  k1, k2 = _split_data(data, (2,))
  mean = jnp.broadcast_to(lax.convert_element_type(mean, dtype), shape)
  v = _normal(k1, shape, dtype)
  z = _uniform(k2, 0., 1., shape, dtype)
  y = lax.integer_pow(v, 2)
  y_sq = lax.integer_pow(y, 2)
  mean_sq = lax.integer_pow(mean, 2)
  sqrt_term = lax.sqrt(4 * mean * y + mean_sq * y_sq)
  x = mean + mean_sq * y / 2 - mean / 2 * sqrt_term
  return lax.select(lax.le(z, mean / (mean + x)), x, mean_sq / x)


def wald(key: Any, mean: Any, shape: Sequence[int] | None = None, dtype: Any = None) -> Any:
  """Wald (inverse Gaussian) samples with `mean` (JAX's `random.wald`; Michael, Schucany and
  Haas's transformation method); `T[*shape]`, default shape: `mean`'s."""
  data, _ = _check_prng_key("wald", key, keys=True)
  dt = _float_dtype("wald", dtype)
  shape = _broadcast_shape_of("wald", shape, mean)
  return _wald(data, mean, shape, dt)


# ---------------------------------------------------------------------------
# Discrete distributions


def _convert_and_clip_integer(val, dtype):
  """`val` (integer) converted to integer `dtype`, clipped to its range instead of wrapping."""
  vi, di = np.iinfo(val.dtype), np.iinfo(dtype)
  lo, hi = max(di.min, vi.min), min(di.max, vi.max)
  if not core.get_aval(val).weak_type:   # NB: the bounds as weakly typed as `val`, as JAX's
    lo, hi = np.array(lo, val.dtype), np.array(hi, val.dtype)
  return jnp.clip(val, lo, hi).astype(dtype)


def _as_int32(x):
  """`jnp.asarray(x).astype('int32')`; a host value converted on the host, as JAX folds the
  conversion of a constant (a literal in programs, no equation)."""
  arr = jnp.asarray(x)
  if dtypes.is_python_scalar(x) or isinstance(x, (np.ndarray, np.generic)):
    return jnp.asarray(np.asarray(arr).astype(np.int32))
  return arr.astype(np.int32)


@partial(jit, static_argnums=(3, 4))
def _randint(data, minval, maxval, shape, dtype):
  minval = jnp.asarray(minval)
  maxval = jnp.asarray(maxval)
  if not dtypes.is_integer(minval.dtype):
    minval = minval.astype(int)
  if not dtypes.is_integer(maxval.dtype):
    maxval = maxval.astype(int)
  # maxval beyond the dtype's range (randint(..., 0, 256, uint8)): the span grows by one.
  # (JAX's operations in JAX's order, so the program prints as JAX's.)
  maxval_out_of_range = lax.gt(maxval, _convert_and_clip_integer(
      jnp.array(np.iinfo(dtype).max, dtype), maxval.dtype))
  minval = _convert_and_clip_integer(minval, dtype)
  maxval = _convert_and_clip_integer(maxval, dtype)
  minval = _broadcast_to_rank(minval, len(shape))
  maxval = _broadcast_to_rank(maxval, len(shape))
  nbits = np.iinfo(dtype).bits
  k1, k2 = _split_data(data, (2,))
  higher_bits = _random_bits(k1, nbits, shape)
  lower_bits = _random_bits(k2, nbits, shape)
  unsigned = _UINT[nbits]
  span = lax.convert_element_type(maxval - minval, unsigned)
  span = lax.select(maxval <= minval, lax.full_like(span, 1), span)   # jax#222: minval
  span = lax.select(maxval_out_of_range & (maxval > minval),
                    lax.add(span, np.array(1, unsigned)), span)
  # (hi * 2**nbits + lo) mod span, without 2*nbits-bit integers:
  # (a * b) mod n = ((a mod n) * (b mod n)) mod n.
  # NB: `lax.rem`, not `jnp.remainder`: a full range wraps the span to 0, and XLA's
  # `x rem 0 = x` then leaves the bits as they are (JAX relies on this too).
  multiplier = lax.rem(np.array(2 ** (nbits // 2), unsigned), span)
  multiplier = lax.rem(lax.mul(multiplier, multiplier), span)
  random_offset = lax.add(lax.mul(lax.rem(higher_bits, span), multiplier),
                          lax.rem(lower_bits, span))
  random_offset = lax.rem(random_offset, span)
  return lax.add(minval, lax.convert_element_type(random_offset, dtype))


def randint(key: Any, shape: Sequence[int], minval: Any, maxval: Any,
            dtype: Any = None) -> Any:
  """Uniform integers in `[minval, maxval)` (JAX's `random.randint`).

  Args:
    key: a single key.
    shape: the result shape `s`.
    minval, maxval: integer bounds broadcastable to `s`, clipped to the dtype's range (a
      `maxval` one past the dtype's maximum is allowed); `maxval <= minval` gives `minval`.
    dtype: an integer dtype T (default int32; int64 under x64).

  Returns:
    `T[*s]`.

  Raises:
    TypeError: if T is not an integer dtype.

  Algorithm: JAX's: two `nbits` draws `hi, lo` (at least 32 bits) and
  `(hi * 2**nbits + lo) mod span`, computed with modular identities; slightly biased when
  the span is not a power of 2 (bias ~ span**2 / 2**64).

  Examples:
    >>> randint(PRNGKey(0), (4,), 0, 10)
    Array([9, 0, 2, 3], dtype=int32)
  """
  data, _ = _check_prng_key("randint", key, keys=True)
  dt = dtypes.check_user_dtype(int if dtype is None else dtype)
  if not dtypes.is_integer(dt):
    raise TypeError(f"randint only accepts integer dtypes, got {dt.name}")
  shape = _canonical_shape("randint", shape)
  _check_shape("randint", shape, np.shape(minval), np.shape(maxval))
  info = np.iinfo(dt)
  sampling = dt
  if info.bits < 32:   # sample in 32 bits to avoid bias, as JAX does
    sampling = np.dtype(np.int32)
    minval = _as_int32(minval).clip(int(info.min), int(info.max))
    maxval = _as_int32(maxval).clip(int(info.min), int(info.max) + 1)
  return _randint(data, minval, maxval, shape, sampling).astype(dt)


@partial(jit, static_argnums=(2, 3))
def _bernoulli(data, p, shape, mode):
  dtype = p.dtype
  if mode == "high":
    u = _uniform(data, 0., 1., (2, *shape), dtype)
    u1, u2 = u[0], u[1] * np.array(2. ** -dtypes.finfo(dtype).nmant, dtype)
    return u2 < p - u1
  return _uniform(data, 0., 1., shape, dtype) < p


def bernoulli(key: Any, p: Any = 0.5, shape: Sequence[int] | None = None,
              mode: str = "low") -> Any:
  """Bernoulli samples, True with probability `p` (JAX's `random.bernoulli`).

  Args:
    key: a single key.
    p: probabilities, a floating array broadcastable to `shape` (Python floats: float32).
    shape: the result shape `s`; default `p`'s shape.
    mode: `"low"` (`u < p`, one draw) or `"high"` (two draws, correct for p below ~1e-7).

  Returns:
    `bool[*s]`.

  Raises:
    TypeError: if `p` is not floating.
    ValueError: for an unknown mode or shapes that do not broadcast.

  Examples:
    >>> bernoulli(PRNGKey(0), 0.5, (4,))
    Array([False, False,  True,  True], dtype=bool)
  """
  if mode not in ("high", "low"):
    raise ValueError(f"got mode={mode!r}, expected 'high' or 'low'")
  data, _ = _check_prng_key("bernoulli", key, keys=True)
  dt = dtypes.canonicalize_dtype(dtypes.dtype(p))
  if not dtypes.is_float(dt):
    raise TypeError(f"bernoulli probability `p` must have a floating dtype, got {dt}.")
  aval = core.get_aval(p)
  if aval.dtype != dt or aval.weak_type:
    # NB: an array of the dtype already passes as it is (JAX forwards the conversion)
    p = lax.convert_element_type(p, dt)
  if shape is None:
    shape = np.shape(p)
  else:
    shape = _canonical_shape("bernoulli", shape)
    _check_shape("bernoulli", shape, np.shape(p))
  return _bernoulli(data, p, tuple(shape), mode)


def rademacher(key: Any, shape: Sequence[int] = (), dtype: Any = int) -> Any:
  """Uniform samples from {-1, 1} (JAX's `random.rademacher`); `T[*shape]`, T default int32
  (int64 under x64)."""
  data, _ = _check_prng_key("rademacher", key, keys=True)
  dt = dtypes.check_user_dtype(dtype)
  return _rademacher(data, _canonical_shape("rademacher", shape), dt)


@partial(jit, static_argnums=(1, 2))
def _rademacher(data, shape, dtype):
  # NB: p = 0.5 is a Python float, so the uniforms are float64 under x64 (as JAX).
  p = np.array(0.5, dtypes.default_float_dtype())
  bernoulli_samples = _bernoulli(data, jnp.asarray(p), shape, "low")
  return (2 * bernoulli_samples.astype(dtype) - 1).astype(dtype)


@partial(jit, static_argnums=(2, 3))
def _geometric(data, p, shape, dtype):
  p, = _promote_inexact(p)   # NB: inside the jit, as JAX's (`p` enters as given)
  u = _uniform(data, 0., 1., shape, p.dtype)
  u = jnp.where(u == 0, 1, u)   # as JAX: u = 0 maps to 1, so log(u) is finite
  log_u = lax.log(u)
  log_one_minus_p = jnp.broadcast_to(lax.log1p(-p), shape)
  g = lax.floor(lax.div(log_u, log_one_minus_p)) + 1
  return g.astype(dtype)


def geometric(key: Any, p: Any, shape: Sequence[int] | None = None, dtype: Any = None) -> Any:
  """Geometric samples: the number of Bernoulli(p) trials up to the first success
  (JAX's `random.geometric`); `I[*shape]`, I default int32 (int64 under x64).

  Raises:
    ValueError: if the dtype is not an integer dtype.
  """
  data, _ = _check_prng_key("geometric", key, keys=True)
  dt = dtypes.check_user_dtype(int if dtype is None else dtype)
  if not dtypes.is_integer(dt):
    raise ValueError(f"dtype argument to `geometric` must be an int dtype, got {dt.name}")
  shape = _broadcast_shape_of("geometric", shape, p)
  return _geometric(data, p, shape, dt)


def _categorical(data, logits, shape, batch_shape, axis, replace, mode):
  # NB: not jitted, as JAX's: the program holds `_gumbel`'s jit and the argmax / top_k
  shape_prefix = shape[:len(shape) - len(batch_shape)]
  if replace:
    if axis >= 0:
      axis -= logits.ndim
    logits_shape = list(shape[len(shape) - len(batch_shape):])
    logits_shape.insert(axis % logits.ndim, logits.shape[axis])
    g = _gumbel(data, (*shape_prefix, *logits_shape), logits.dtype, mode)
    return jnp.argmax(g + lax.expand_dims(logits, tuple(range(len(shape_prefix)))),
                      axis=axis)
  logits = logits + _gumbel(data, logits.shape, logits.dtype, mode)
  k = math.prod(shape_prefix)
  _, indices = lax.top_k(jnp.moveaxis(logits, axis, -1), k)
  dimensions = (indices.ndim - 1, *range(indices.ndim - 1))
  return lax.reshape(indices, shape, dimensions)


def categorical(key: Any, logits: Any, axis: int = -1, shape: Sequence[int] | None = None,
                replace: bool = True, mode: str | None = None) -> Any:
  """Samples from categorical distributions given by `logits` (JAX's `random.categorical`).

  Args:
    key: a single key.
    logits: unnormalized log-probabilities `T[*b0, n, *b1]`, n categories along `axis`.
    axis: the category axis.
    shape: the result shape; it must end with the batch shape `b = (*b0, *b1)`. Default `b`.
    replace: with replacement (the Gumbel-max trick) or without (Gumbel top-k; the
      leading `shape[:-len(b)]` draws are distinct).
    mode: the Gumbel sampler's mode: None (`"low"`), `"low"`, `"high"` or `"highest"`.

  Returns:
    `int32[*shape]` category indices.

  Raises:
    ValueError: if `shape` does not end with the batch shape, or (without replacement)
      more samples than categories are asked for.
    IndexError: if `axis` is out of range for `logits` (NumPy's words, as JAX's).

  Examples:
    >>> import numpy as np
    >>> categorical(PRNGKey(0), np.log(np.array([0.1, 0.2, 0.7], np.float32)), shape=(5,))
    Array([1, 2, 2, 1, 2], dtype=int32)
  """
  data, _ = _check_prng_key("categorical", key, keys=True)
  logits = jnp.asarray(logits)
  axis = operator.index(axis)
  # NB: an axis out of range raises NumPy's IndexError from deleting it from the shape, as
  # in JAX ("index 1 is out of bounds for axis 0 with size 1").
  batch_shape = tuple(np.delete(np.array(logits.shape, dtype=np.int64), axis).tolist())
  if shape is None:
    shape = batch_shape
  else:
    shape = _canonical_shape("categorical", shape)
    _check_shape("categorical", shape, batch_shape)
  if not replace:
    k = math.prod(shape[:len(shape) - len(batch_shape)])
    if k > logits.shape[axis]:
      raise ValueError(f"Number of samples without replacement ({k}) cannot exceed number "
                       f"of categories ({logits.shape[axis]}).")
  mode = _gumbel_mode(mode)
  return _categorical(data, logits, tuple(shape), batch_shape, axis, bool(replace), mode)


# ---------------------------------------------------------------------------
# Permutations and choice (sorting by random keys)


def _sort_key_val(keys, values, dimension):
  return lax.sort_key_val(keys, values, dimension, is_stable=True)


def _shuffle(data, x, axis):
  # JAX's _shuffle: sort by fresh 32-bit keys, `num_rounds` times so that, with high
  # probability, some round gives all elements distinct keys (tjablin's heuristic).
  exponent = 3
  uint32max = np.iinfo(np.uint32).max
  num_rounds = int(np.ceil(exponent * np.log(max(1, x.size)) / np.log(uint32max)))
  for _ in range(num_rounds):
    data, subkey = _split_data(data, (2,))   # NB: unpacked, as JAX's (slices of stride 1)
    sort_keys = _random_bits(subkey, 32, x.shape)
    _, x = _sort_key_val(sort_keys, x, axis)
  return x


_shuffle = jit(_shuffle, static_argnums=(2,))   # NB: named `_shuffle` in programs, as JAX's


def _permute_along_impl(data, x, axis):
  """`take(x, _shuffle(key, arange(n)), axis)`: the same sort keys permute whole slices.

  NB: a stable sort of each 1-D slice by the keys of `arange(n)` is the permutation that
  sorting `arange(n)` gives, so this equals JAX's gather of the shuffled indices."""
  n = x.shape[axis]
  num_rounds = int(np.ceil(3 * np.log(max(1, n)) / np.log(np.iinfo(np.uint32).max)))
  for _ in range(num_rounds):
    keys = _split_data(data, (2,))
    data, subkey = keys[0], keys[1]
    sort_keys = _random_bits(subkey, 32, (n,))
    sort_keys = lax.broadcast_in_dim(sort_keys, x.shape, (axis,))
    _, x = _sort_key_val(sort_keys, x, axis)
  return x


_permute_along = jit(_permute_along_impl, static_argnums=(2,))


def permutation(key: Any, x: Any, axis: int = 0, independent: bool = False) -> Any:
  """A random permutation of `arange(x)` or of `x` along `axis` (JAX's `random.permutation`).

  Args:
    key: a single key.
    x: an int n (permute `arange(n)`) or an array `T[*s]` (at least 1-D).
    axis: the axis to permute.
    independent: permute each 1-D slice along `axis` independently.

  Returns:
    `int32[n]`, or `T[*s]` with the slices along `axis` permuted.

  Raises:
    TypeError: if `x` is a non-integer scalar.

  Algorithm: sort by random 32-bit keys, repeated `ceil(3 ln n / ln(2**32 - 1))` times
  (JAX's `_shuffle`).

  Examples:
    >>> permutation(PRNGKey(0), 5)
    Array([0, 1, 4, 3, 2], dtype=int32)
  """
  data, _ = _check_prng_key("permutation", key, keys=True)
  if not np.ndim(x):
    if not dtypes.is_integer(dtypes.dtype(x)):
      raise TypeError("x must be an integer or at least 1-dimensional")
    n = operator.index(x) if not hasattr(x, "item") else int(x.item())
    return _shuffle(data, jnp.arange(n), 0)
  x = jnp.asarray(x)
  axis = lax_utils.canonicalize_axes("permutation", (axis,), x.ndim)[0]
  if independent or x.ndim == 1:
    return _shuffle(data, x, axis)
  return _permute_along(data, x, axis)


def _take(arr, ind, axis):
  """`jnp.take(arr, ind, axis)` for in-range indices `i32[*k]`: `T[*s[:axis], *k, *s[axis+1:]]`."""
  offset_dims = (*range(axis), *range(axis + ind.ndim, arr.ndim - 1 + ind.ndim))
  dnums = lax.GatherDimensionNumbers(offset_dims=offset_dims, collapsed_slice_dims=(axis,),
                                     start_index_map=(axis,))
  slice_sizes = tuple(1 if i == axis else d for i, d in enumerate(arr.shape))
  return lax.gather(arr, ind[..., None], dnums, slice_sizes,
                    mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS)


def _choice(data, arr, p, shape, replace, axis, n_inputs, has_p, mode):
  # NB: not jitted, as JAX's `choice`: the program holds the samplers' jits
  n_draws = math.prod(shape)
  int_ = dtypes.default_int_dtype()   # NB: int64 under x64, which changes the bits drawn
  if not has_p:
    if replace:
      ind = _randint(data, 0, n_inputs, shape, int_)
      result = ind if arr.ndim == 0 else _take(arr, ind, axis)
    else:
      slices = (slice(None),) * axis + (slice(n_draws),)
      if arr.ndim == 0:
        result = _shuffle(data, jnp.arange(n_inputs), 0)[slices]
      elif arr.ndim == 1:
        result = _shuffle(data, arr, axis)[slices]
      else:
        result = _permute_along_impl(data, arr, axis)[slices]
  else:
    if replace:
      p_cuml = lax.cumsum(p, 0)
      r = p_cuml[-1] * (1 - _uniform(data, 0., 1., shape, p_cuml.dtype))
      ind = _searchsorted_left(p_cuml, r).astype(int_)
    else:
      g = _gumbel(data, (n_inputs,), p.dtype, mode) + jnp.log(p)
      ind = lax.top_k(g, n_draws)[1].astype(int_)
    result = ind if arr.ndim == 0 else _take(arr, ind, axis)
  return jnp.reshape(result, shape if arr.ndim == 0 else
                     arr.shape[0:axis] + tuple(shape) + arr.shape[axis + 1:])


def _searchsorted_left(sorted_arr, v):
  """`jnp.searchsorted(sorted_arr, v)` (side='left') for a short sorted `f[n]`: the number of
  elements `< v`, by comparison (O(n) per value; JAX's default method scans)."""
  # NB: ranks made equal first, so it runs under jax_numpy_rank_promotion='raise'
  less = jnp.reshape(sorted_arr, (1,) * v.ndim + sorted_arr.shape) < v[..., None]
  return jnp.sum(less.astype(np.int32), axis=-1)


def choice(key: Any, a: Any, shape: Sequence[int] = (), replace: bool = True,
           p: Any = None, axis: int = 0, mode: str | None = None) -> Any:
  """Random samples from `a` (`arange(a)` for an int), as JAX's `random.choice`.

  Args:
    key: a single key.
    a: an int n or an array `T[..., n, ...]` with n entries along `axis`.
    shape: the sample shape `s` (a sequence).
    replace: with (default) or without replacement.
    p: optional probabilities `f[n]` (need not be normalized).
    axis: the axis of `a` to sample along.
    mode: the Gumbel sampler's mode (without replacement, with `p`): None (`"low"`),
      `"low"`, `"high"` or `"highest"`, as for `gumbel`.

  Returns:
    `int32[*s]` for an int `a`, else `T[*a.shape[:axis], *s, *a.shape[axis+1:]]`.

  Raises:
    TypeError: if `shape` is not a sequence.
    ValueError: if `a` is empty while draws are asked for, `p` has the wrong shape, or
      (without replacement) more draws than entries are asked for.

  Algorithm: as JAX: `randint` (with replacement), a permutation's prefix (without), a
  cumulative-sum search (with `p`), or the Gumbel top-k trick (with `p`, without
  replacement).

  Examples:
    >>> choice(PRNGKey(0), 10, (3,), replace=False)
    Array([0, 1, 8], dtype=int32)
  """
  data, _ = _check_prng_key("choice", key, keys=True)
  if not isinstance(shape, Sequence):
    raise TypeError(f"shape argument of stagecraft.random.choice must be a sequence, got {shape}")
  shape = _canonical_shape("choice", shape)
  arr = jnp.asarray(a)
  if arr.ndim == 0:
    n_inputs = operator.index(a) if not hasattr(a, "item") else int(a.item())
  else:
    axis = lax_utils.canonicalize_axes("choice", (axis,), arr.ndim)[0]
    n_inputs = arr.shape[axis]
  n_draws = math.prod(shape)
  if n_draws == 0:
    return jnp.zeros(shape, dtype=arr.dtype)
  if n_inputs <= 0:
    raise ValueError("a must be greater than 0 unless no samples are taken")
  if not replace and n_draws > n_inputs:
    raise ValueError(f"Cannot take a larger sample (size {n_draws}) than population (size "
                     f"{n_inputs}) when 'replace=False'")
  if p is not None:
    p = jnp.asarray(p)
    if not dtypes.is_inexact(p.dtype):
      p = p.astype(dtypes.default_float_dtype())
    if p.shape != (n_inputs,):
      raise ValueError(f"p must be None or a 1D vector with the same size as a.shape[axis]. "
                       f"p has shape {p.shape} and a.shape[axis] is {n_inputs}.")
    # NB: as JAX, the mode is checked only where the Gumbel sampler is used.
    mode = _gumbel_mode(mode) if not replace else None
  else:
    p, mode = np.zeros((), np.float32), None
  return _choice(data, arr, p, shape, bool(replace), axis if arr.ndim else 0, n_inputs,
                 p.ndim == 1, mode)


def _check_all_safe_to_cast(name: str, dtype: np.dtype, *args) -> None:
  """JAX's check for parameters of `beta`, `t`, `chisquare`, `f`: each must promote to the
  sample dtype (Python scalars always do), e.g. no float32 array for float16 samples.

  Raises:
    TypePromotionError (a ValueError): for a parameter whose dtype does not.
  """
  for arg in args:
    if dtypes.dtype(arg) != dtype and dtypes.result_type(arg, dtype) != dtype:
      raise dtypes.TypePromotionError(
          f"In arguments to {name}, cannot safely cast argument of type "
          f"{dtypes.dtype(arg, canonicalize=True)} to {dtype}")


# ---------------------------------------------------------------------------
# Gamma family: JAX's `random_gamma` primitive (`lax.random_gamma`: Marsaglia-Tsang
# rejection, one loop per element, batched; so the stream is JAX's) under the jit `_gamma`.


@partial(jit, static_argnames=("shape", "dtype", "log_space"))
def _gamma(data, a, shape, dtype, log_space=False):
  a = lax.convert_element_type(a, dtype)
  if tuple(np.shape(a)) != tuple(shape):
    a = jnp.broadcast_to(a, shape)
  return random_gamma_p.bind(data, a, log_space=log_space)


def _gamma_shape(name: str, shape, a) -> tuple[int, ...]:
  if shape is None:
    return tuple(np.shape(a))
  shape = _canonical_shape(name, shape)
  _check_shape(name, shape, np.shape(a))
  return tuple(shape)


def gamma(key: Any, a: Any, shape: Sequence[int] | None = None, dtype: Any = None) -> Any:
  """Standard gamma samples, density `x^(a-1) e^-x / Gamma(a)` on `x >= 0` (JAX's
  `random.gamma`). Divide by a rate (or multiply by a scale) for other gamma distributions.

  Args:
    key: a single key (typed `key<fry>[]` or raw `u32[2]`).
    a: the shape parameter(s) `a > 0`, broadcastable to `shape`.
    shape: the result shape `s`; default `a`'s shape.
    dtype: a floating dtype T (default float32; float64 under x64); `a` is converted to T.

  Returns:
    `T[*s]`. Differentiable with respect to `a` by implicit reparameterization (the
    derivative of the sample at a fixed CDF value, `-(dP/da) / (dP/dx)`), as JAX.

  Raises:
    ValueError: if T is not floating, or `a`'s shape does not broadcast to `shape`.
    TypeError: for invalid key data.

  Algorithm: Marsaglia-Tsang rejection (`_gamma_one`), one `while_loop` per element under
  `vmap`, element i keyed by `split(key, a.size)[i]`, exactly as JAX: for the same key the
  samples are JAX's up to the rounding of the transcendental functions (rare rounding
  differences can flip an acceptance test, giving a different sample there).

  Examples:
    >>> gamma(PRNGKey(0), 2.0, (3,))  # JAX's samples for this key
    Array([1.5897877, 1.7599413, 1.1290071], dtype=float32)
  """
  data, _ = _check_prng_key("gamma", key, keys=True)
  dt = _float_dtype("gamma", dtype)
  return _gamma(data, a, _gamma_shape("gamma", shape, a), dt, False)


def loggamma(key: Any, a: Any, shape: Sequence[int] | None = None, dtype: Any = None) -> Any:
  """Logarithms of standard gamma samples (JAX's `random.loggamma`):
  `exp(loggamma(key, a, s))` equals `gamma(key, a, s)` up to rounding, but stays accurate
  (no underflow to 0) for small `a`, where samples crowd near 0.

  Args:
    key: a single key.
    a: the shape parameter(s) `a > 0`, broadcastable to `shape`.
    shape: the result shape `s`; default `a`'s shape.
    dtype: a floating dtype T (default float32; float64 under x64).

  Returns:
    `T[*s]`; differentiable with respect to `a` (as `gamma`, divided by the sample).

  Raises:
    ValueError: if T is not floating (the message names `gamma`, as JAX's does), or the
      shapes do not broadcast.
  """
  data, _ = _check_prng_key("loggamma", key, keys=True)
  dt = _float_dtype("gamma", dtype)
  return _gamma(data, a, _gamma_shape("gamma", shape, a), dt, True)


@partial(jit, static_argnums=(3, 4))
def _beta(data, a, b, shape, dtype):
  a = lax.convert_element_type(a, dtype)
  b = lax.convert_element_type(b, dtype)
  key_a, key_b = _split_data(data, (2,))
  a = jnp.broadcast_to(a, shape)
  b = jnp.broadcast_to(b, shape)
  log_gamma_a = _gamma(key_a, a, shape, dtype, True)
  log_gamma_b = _gamma(key_b, b, shape, dtype, True)
  # gamma_a / (gamma_a + gamma_b) without underflow: scale both by the larger.
  log_max = lax.max(log_gamma_a, log_gamma_b)
  gamma_a_scaled = jnp.exp(log_gamma_a - log_max)
  gamma_b_scaled = jnp.exp(log_gamma_b - log_max)
  return gamma_a_scaled / (gamma_a_scaled + gamma_b_scaled)


def beta(key: Any, a: Any, b: Any, shape: Sequence[int] | None = None,
         dtype: Any = None) -> Any:
  """Beta(a, b) samples, density proportional to `x^(a-1) (1-x)^(b-1)` on `[0, 1]`
  (JAX's `random.beta`).

  Args:
    key: a single key.
    a, b: positive parameters, broadcastable to `shape`.
    shape: the result shape `s`; default: the broadcast shape of `a` and `b`.
    dtype: a floating dtype T (default float32; float64 under x64).

  Returns:
    `T[*s]`.

  Raises:
    ValueError: if T is not floating or the shapes do not broadcast to `shape`.

  Algorithm: `G_a / (G_a + G_b)` from two log-space gamma samples (keys `split(key)`).
  """
  data, _ = _check_prng_key("beta", key, keys=True)
  dt = _float_dtype("beta", dtype)
  _check_all_safe_to_cast("beta", dt, a, b)
  shape = _broadcast_shape_of("beta", shape, a, b)
  return _beta(data, a, b, tuple(shape), dt)


@partial(jit, static_argnums=(2, 3))
def _dirichlet(data, alpha, shape, dtype):
  alpha = lax.convert_element_type(alpha, dtype)
  log_gamma_samples = _gamma(data, alpha, (*shape, alpha.shape[-1]), dtype, True)
  # the normalized gammas: JAX's `nn.softmax` over the last axis (its operations, the
  # maximum's derivative stopped; stagecraft.nn imports random, so it is not called)
  x_max = jnp.max(log_gamma_samples, -1, initial=-np.inf, keepdims=True)
  unnormalized = jnp.exp(log_gamma_samples - lax.stop_gradient(x_max))
  return unnormalized / jnp.sum(unnormalized, -1, keepdims=True)


def dirichlet(key: Any, alpha: Any, shape: Sequence[int] | None = None,
              dtype: Any = None) -> Any:
  """Dirichlet samples, density proportional to `prod_i x_i^(alpha_i - 1)` on the simplex
  (JAX's `random.dirichlet`).

  Args:
    key: a single key.
    alpha: concentrations `f[*b, n]` (positive).
    shape: the batch shape `s`, broadcast-compatible with `b`; default `b`.
    dtype: a floating dtype T (default float32; float64 under x64).

  Returns:
    `T[*s, n]`, each row summing to 1.

  Raises:
    ValueError: if T is not floating, `alpha` is a scalar, or `b` does not broadcast to `s`.

  Algorithm: the softmax of log-space gamma samples `loggamma(key, alpha, (*s, n))`.
  """
  data, _ = _check_prng_key("dirichlet", key, keys=True)
  dt = _float_dtype("dirichlet", dtype)
  if not np.ndim(alpha) >= 1:
    raise ValueError(f"dirichlet requires alpha.ndim >= 1, got alpha.ndim == {np.ndim(alpha)}")
  if shape is None:
    shape = tuple(np.shape(alpha)[:-1])
  else:
    shape = _canonical_shape("dirichlet", shape)
    _check_shape("dirichlet", shape, np.shape(alpha)[:-1])
  return _dirichlet(data, alpha, tuple(shape), dt)


@partial(jit, static_argnums=(2, 3))
def _t(data, df, shape, dtype):
  df = lax.convert_element_type(df, dtype)
  key_n, key_g = _split_data(data, (2,))
  n = _normal(key_n, shape, dtype)
  half_df = lax.div(df, np.array(2, dtype))
  g = _gamma(key_g, half_df, shape, dtype, False)
  return n * jnp.sqrt(half_df / g)


def t(key: Any, df: Any, shape: Sequence[int] | None = None, dtype: Any = None) -> Any:
  """Student's t samples with `df` degrees of freedom (JAX's `random.t`):
  `n * sqrt((df/2) / g)`, n standard normal, g ~ Gamma(df/2).

  Returns:
    `T[*s]`, s = `shape` (default `df`'s shape), T a float dtype (default float32; float64
    under x64).

  Raises:
    ValueError: if T is not floating or `df` does not broadcast to `shape`.
  """
  data, _ = _check_prng_key("t", key, keys=True)
  dt = _float_dtype("t", dtype)
  _check_all_safe_to_cast("t", dt, df)
  shape = _broadcast_shape_of("t", shape, df)
  return _t(data, df, tuple(shape), dt)


@partial(jit, static_argnums=(2, 3))
def _chisquare(data, df, shape, dtype):
  df = lax.convert_element_type(df, dtype)
  two = np.array(2, dtype)
  half_df = lax.div(df, two)
  log_g = _gamma(data, half_df, shape, dtype, True)
  return lax.mul(jnp.exp(log_g), two)


def chisquare(key: Any, df: Any, shape: Sequence[int] | None = None,
              dtype: Any = None) -> Any:
  """Chi-square samples with `df` degrees of freedom (JAX's `random.chisquare`):
  `2 exp(loggamma(key, df / 2))`.

  Returns:
    `T[*s]`, s = `shape` (default `df`'s shape), T a float dtype (default float32; float64
    under x64).

  Raises:
    ValueError: if T is not floating or `df` does not broadcast to `shape`.
  """
  data, _ = _check_prng_key("chisquare", key, keys=True)
  dt = _float_dtype("chisquare", dtype)
  _check_all_safe_to_cast("chisquare", dt, df)
  shape = _broadcast_shape_of("chisquare", shape, df)
  return _chisquare(data, df, tuple(shape), dt)


@partial(jit, static_argnums=(3, 4))
def _f(data, dfnum, dfden, shape, dtype):
  dfden = lax.convert_element_type(dfden, dtype)
  dfnum = lax.convert_element_type(dfnum, dtype)
  key_dfd, key_dfn = _split_data(data, (2,))
  chi2_dfn = _chisquare(key_dfn, dfnum, shape, dtype)
  chi2_dfd = _chisquare(key_dfd, dfden, shape, dtype)
  return lax.div(lax.div(chi2_dfn, dfnum), lax.div(chi2_dfd, dfden))


def f(key: Any, dfnum: Any, dfden: Any, shape: Sequence[int] | None = None,
      dtype: Any = None) -> Any:
  """F-distribution samples (JAX's `random.f`): `(c1 / dfnum) / (c2 / dfden)` for
  chi-square samples c1, c2 with `dfnum`, `dfden` degrees of freedom.

  Returns:
    `T[*s]`, s = `shape` (default: the parameters' broadcast shape), T float (default
    float32).

  Raises:
    ValueError: if T is not floating or the parameters do not broadcast to `shape`.
  """
  data, _ = _check_prng_key("f", key, keys=True)
  dt = _float_dtype("f", dtype)
  _check_all_safe_to_cast("f", dt, dfnum, dfden)
  shape = _broadcast_shape_of("f", shape, dfnum, dfden)
  return _f(data, dfnum, dfden, tuple(shape), dt)


@partial(jit, static_argnums=(2, 3))
def _generalized_normal(data, p, shape, dtype):
  # NB: the keys indexed (not unpacked) and `1 / p` taken twice, as JAX's program
  keys = prng.random_split_p.bind(data, shape=(2,))
  g = _gamma(_key_at(keys, 0), 1 / p, shape, dtype, False)
  r = _rademacher(_key_at(keys, 1), shape, dtype)
  return r * g ** (1 / p)


def generalized_normal(key: Any, p: Any, shape: Sequence[int] = (), dtype: Any = None) -> Any:
  """Generalized normal samples, density proportional to `exp(-|x|^p)` (JAX's
  `random.generalized_normal`): `r * g^(1/p)`, r a random sign, g ~ Gamma(1/p).

  Args:
    key: a single key.
    p: the shape parameter `p > 0`, a scalar.
    shape: the result shape `s`.
    dtype: a floating dtype T (default float32; float64 under x64).

  Returns:
    `T[*s]`.

  Raises:
    ValueError: if T is not floating.
  """
  data, _ = _check_prng_key("generalized_normal", key, keys=True)
  dt = _float_dtype("generalized_normal", dtype)
  return _generalized_normal(data, p, _canonical_shape("generalized_normal", shape), dt)


@partial(jit, static_argnums=(2, 3, 4))
def _ball(data, p, d, shape, dtype):
  k1, k2 = _split_data(data, (2,))
  g = _generalized_normal(k1, p, (*shape, d), dtype)
  e = _exponential(k2, shape, dtype)
  return g / (((jnp.abs(g) ** p).sum(-1) + e) ** (1 / p))[..., None]


def ball(key: Any, d: int, p: Any = 2, shape: Sequence[int] = (), dtype: Any = None) -> Any:
  """Uniform samples from the unit Lp ball in d dimensions (JAX's `random.ball`; Barthe,
  Guedon, Mendelson and Naor, arXiv:math/0503650): `g / (sum |g|^p + e)^(1/p)`, g
  generalized normal, e exponential.

  Args:
    key: a single key.
    d: the dimension, a non-negative int (static).
    p: the norm's p, a scalar.
    shape: the batch shape `s`.
    dtype: a floating dtype T (default float32; float64 under x64).

  Returns:
    `T[*s, d]`.

  Raises:
    ValueError: if T is not floating.
    TypeError: if `d` is not an int.
  """
  data, _ = _check_prng_key("ball", key, keys=True)
  dt = _float_dtype("ball", dtype)
  shape = _canonical_shape("ball", shape)
  return _ball(data, p, operator.index(d), shape, dt)


# ---------------------------------------------------------------------------
# Poisson and binomial: JAX's rejection loops over whole arrays (one loop, a batched
# acceptance mask), so the bits are JAX's.


@partial(jit, static_argnums=(2, 3, 4))
def _poisson_knuth(data, lam, shape, dtype, max_iters):
  # Knuth: count uniforms until their product drops below exp(-lam).
  def body_fn(carry):
    i, k, key, log_prod = carry
    key, subkey = _split_data(key, (2,))   # NB: unpacked, as JAX's (slices of stride 1)
    k = lax.select(log_prod > -lam, k + 1, k)
    u = _uniform(subkey, 0., 1., shape, np.dtype(np.float32))
    return i + 1, k, key, log_prod + jnp.log(u)

  def cond_fn(carry):
    i, log_prod = carry[0], carry[3]
    return (log_prod > -lam).any() & (i < max_iters)

  k_init = lax.full_like(lam, 0, dtype, shape)
  log_rate_init = lax.full_like(lam, 0, np.float32, shape)
  # NB: the count starts as a Python 0 (weakly typed), as JAX's
  k = lax.while_loop(cond_fn, body_fn, (0, k_init, data, log_rate_init))[1]
  return (k - 1).astype(dtype)


@partial(jit, static_argnums=(2, 3, 4))
def _poisson_rejection(data, lam, shape, dtype, max_iters):
  # Hörmann (1993), "The transformed rejection method for generating Poisson random
  # variables" (PTRS), as JAX.
  log_lam = lax.log(lam)
  b = 0.931 + 2.53 * lax.sqrt(lam)
  a = -0.059 + 0.02483 * b
  inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
  v_r = 0.9277 - 3.6224 / (b - 2)

  def body_fn(carry):
    i, k_out, accepted, key = carry
    key, subkey_0, subkey_1 = _split_data(key, (3,))
    u = _uniform(subkey_0, 0., 1., shape, lam.dtype) - 0.5
    v = _uniform(subkey_1, 0., 1., shape, lam.dtype)
    u_shifted = 0.5 - abs(u)
    k = lax.floor((2 * a / u_shifted + b) * u + lam + 0.43)
    s = lax.log(v * inv_alpha / (a / (u_shifted * u_shifted) + b))
    tt = -lam + k * log_lam - lax.lgamma(k + 1)
    accept1 = (u_shifted >= 0.07) & (v <= v_r)
    reject = (k < 0) | ((u_shifted < 0.013) & (v > u_shifted))
    accept2 = s <= tt
    accept = accept1 | (~reject & accept2)
    k_out = lax.select(accept, k, k_out)
    accepted = accepted | accept
    return i + 1, k_out, accepted, key

  def cond_fn(carry):
    i, _, accepted, _ = carry
    return (~accepted).any() & (i < max_iters)

  k_init = lax.full_like(lam, -1, lam.dtype, shape)
  accepted = lax.full_like(lam, False, np.dtype(bool), shape)
  k = lax.while_loop(cond_fn, body_fn, (0, k_init, accepted, data))[1]
  return k.astype(dtype)


@partial(jit, static_argnums=(2, 3))
def _poisson(data, lam, shape, dtype):
  use_knuth = lax.ne(lam, lam) | (lam < 10)
  lam_knuth = lax.select(use_knuth, lam, lax.full_like(lam, 0.0))
  # Rejection accepts at most ~89% as lam grows: an arbitrary large rate for masked lanes.
  lam_rejection = lax.select(use_knuth, lax.full_like(lam, 1e5), lam)
  max_iters = dtype.type(np.iinfo(dtype).max)   # (a static argument of both loops' jits)
  result = lax.select(use_knuth, _poisson_knuth(data, lam_knuth, shape, dtype, max_iters),
                      _poisson_rejection(data, lam_rejection, shape, dtype, max_iters))
  return lax.select(lam == 0, jnp.zeros_like(result), result)


def poisson(key: Any, lam: Any, shape: Sequence[int] | None = None, dtype: Any = None) -> Any:
  """Poisson samples with rate `lam` (JAX's `random.poisson`).

  Args:
    key: a single key.
    lam: rates `>= 0`, broadcastable to `shape` (computed in float32).
    shape: the result shape `s`; default `lam`'s shape.
    dtype: an integer dtype I (default int32; int64 under x64).

  Returns:
    `I[*s]`: 0 where `lam == 0`, -1 where `lam` is NaN (as JAX).

  Raises:
    ValueError: if I is not an integer dtype or `lam` does not broadcast to `shape`.

  Algorithm: as JAX (and TensorFlow, NumPy): Knuth's product of uniforms for `lam < 10`,
  Hörmann's transformed rejection (PTRS) otherwise; both loops run over the whole array
  and the result selects per element.

  Examples:
    >>> poisson(PRNGKey(0), 3.0, (5,))
    Array([0, 0, 4, 4, 1], dtype=int32)
  """
  data, _ = _check_prng_key("poisson", key, keys=True)
  dt = dtypes.check_user_dtype(int if dtype is None else dtype)
  if not dtypes.is_integer(dt):
    raise ValueError(f"dtype argument to `poisson` must be an int dtype, got {dt.name}")
  if shape is None:
    shape = tuple(np.shape(lam))
  else:
    shape = _canonical_shape("poisson", shape)
    _check_shape("poisson", shape, np.shape(lam))
  if shape or not dtypes.is_python_scalar(lam):
    # NB: a Python scalar for shape () converts on the host (JAX folds the conversion of
    # the array `broadcast_to` makes of it, also under vmap)
    lam = jnp.broadcast_to(lam, shape)
  lam = lax.convert_element_type(lam, np.float32)
  return _poisson(data, lam, tuple(shape), dt)


def _stirling_approx_tail(k):
  """`log k! - log(sqrt(2 pi k) (k/e)^k)`: tabulated for `k <= 9`, else the series
  `(1/12 - (1/360 - 1/1260/(k+1)^2)/(k+1)^2)/(k+1)` (JAX's `_stirling_approx_tail`)."""
  tail_vals = jnp.array([0.0810614667953272, 0.0413406959554092, 0.0276779256849983,
                         0.02079067210376509, 0.0166446911898211, 0.0138761288230707,
                         0.0118967099458917, 0.0104112652619720, 0.00925546218271273,
                         0.00833056343336287], dtype=k.dtype)
  use_tail_values = k <= 9
  k = lax.clamp(np.array(0., k.dtype), k, np.array(9., k.dtype))
  kp1sq = (k + 1) * (k + 1)
  approx = (1.0 / 12 - (1.0 / 360 - 1.0 / 1260 / kp1sq) / kp1sq) / (k + 1)
  k = jnp.floor(k)
  return lax.select(use_tail_values, tail_vals[jnp.asarray(k, dtype="int32")], approx)


def _full_like_literal(x, value: float):
  """`lax.full_like(x, value)`; for a weakly typed `x` the Python float itself is the
  constant, as JAX's (printed `0.01:f32[]`, not rounded to float32)."""
  aval = core.get_aval(x)
  if not aval.weak_type:
    return lax.full_like(x, value)
  return lax.broadcast_in_dim(value, aval.shape, ()) if aval.shape else value


@partial(jit, static_argnums=(3, 4, 5), inline=True)   # NB: inlined, as JAX's
def _binomial_inversion(data, count, prob, shape, dtype, max_iters):
  # Count geometric waiting times until they exceed `count`.
  log1minusprob = jnp.log1p(-prob)

  def body_fn(carry):
    i, num_geom, geom_sum, key = carry
    subkey, key = _split_data(key, (2,))
    num_geom_out = lax.select(geom_sum <= count, num_geom + 1, num_geom)
    u = _uniform(subkey, 0., 1., shape, prob.dtype)
    geom = jnp.ceil(jnp.log(u) / log1minusprob)
    geom_sum = geom_sum + geom
    return i + 1, num_geom_out, geom_sum, key

  def cond_fn(carry):
    i, geom_sum = carry[0], carry[2]
    return (geom_sum <= count).any() & (i < max_iters)

  num_geom_init = lax.full_like(prob, 0, prob.dtype, shape)
  geom_sum_init = lax.full_like(prob, 0, prob.dtype, shape)
  k = lax.while_loop(cond_fn, body_fn, (0, num_geom_init, geom_sum_init, data))[1]
  return (k - 1).astype(dtype)


@partial(jit, static_argnums=(3, 4, 5), inline=True)   # NB: inlined, as JAX's
def _btrs(data, count, prob, shape, dtype, max_iters):
  # Hörmann (1993), "The generation of binomial random variates" (BTRS).
  stddev = jnp.sqrt(count * prob * (1 - prob))
  b = 1.15 + 2.53 * stddev
  # NB: `0.01 * prob` with lax.mul for a weakly typed `prob`, which keeps the Python constant
  # (JAX's literal `0.01`, where stagecraft's NumPy promotion would round it to float32)
  a = -0.0873 + 0.0248 * b + (lax.mul(0.01, prob) if core.get_aval(prob).weak_type
                               else 0.01 * prob)
  c = count * prob + 0.5
  v_r = 0.92 - 4.2 / b
  r = prob / (1 - prob)
  alpha = (2.83 + 5.1 / b) * stddev
  m = jnp.floor((count + 1) * prob)

  def body_fn(carry):
    i, k_out, accepted, key = carry
    key, subkey_0, subkey_1 = _split_data(key, (3,))
    u = _uniform(subkey_0, 0., 1., shape, prob.dtype)
    v = _uniform(subkey_1, 0., 1., shape, prob.dtype)
    u = u - 0.5
    us = 0.5 - jnp.abs(u)
    accept1 = (us >= 0.07) & (v <= v_r)
    k = jnp.floor((2 * a / us + b) * u + c)
    reject = (k < 0) | (k > count)
    v = jnp.log(v * alpha / (a / (us * us) + b))
    ub = ((m + 0.5) * jnp.log((m + 1) / (r * (count - m + 1)))
          + (count + 1) * jnp.log((count - m + 1) / (count - k + 1))
          + (k + 0.5) * jnp.log(r * (count - k + 1) / (k + 1))
          + _stirling_approx_tail(m) + _stirling_approx_tail(count - m)
          - _stirling_approx_tail(k) - _stirling_approx_tail(count - k))
    accept2 = v <= ub
    accept = accept1 | (~reject & accept2)
    k_out = lax.select(accept, k, k_out)
    accepted = accepted | accept
    return i + 1, k_out, accepted, key

  def cond_fn(carry):
    i, accepted = carry[0], carry[2]
    return (~accepted).any() & (i < max_iters)

  k_init = lax.full_like(prob, -1, prob.dtype, shape)
  init = (0, k_init, jnp.full(shape, False, bool), data)
  return lax.while_loop(cond_fn, body_fn, init)[1].astype(dtype)


@partial(jit, static_argnums=(3, 4), inline=True)   # NB: inlined, as JAX's
def _binomial(data, count, prob, shape, dtype):
  prob, = jnp_util.promote_dtypes_inexact(prob)
  count = lax.convert_element_type(count, prob.dtype)
  count = jnp.broadcast_to(count, shape)
  prob = jnp.broadcast_to(prob, shape)
  p_lt_half = prob < 0.5
  q = lax.select(p_lt_half, prob, 1.0 - prob)
  count_nan_or_neg = lax.ne(count, count) | (count < 0.0)
  count_inf = jnp.isinf(count)
  q_is_nan = lax.ne(q, q)
  q_l_0 = q < 0.0
  q = lax.select(q_is_nan | q_l_0, _full_like_literal(q, 0.01), q)
  use_inversion = count_nan_or_neg | (count * q <= 10.0)
  count = jnp.floor(count)   # as numpy for a float count
  count_inv = lax.select(use_inversion, count, lax.full_like(count, 0.0))
  count_btrs = lax.select(use_inversion, lax.full_like(count, 1e4), count)
  q_btrs = lax.select(use_inversion, lax.full_like(q, 0.5), q)
  # NB: as JAX's, the loops' bound is the dtype's largest float (the count compared as one)
  max_iters = dtype.type(dtypes.finfo(dtype).max)
  samples = lax.select(use_inversion,
                       _binomial_inversion(data, count_inv, q, shape, dtype, max_iters),
                       _btrs(data, count_btrs, q_btrs, shape, dtype, max_iters))
  # NaN for a NaN or negative q or count, inf for an infinite count
  invalid = q_l_0 | q_is_nan | count_nan_or_neg
  samples = lax.select(invalid, jnp.full_like(samples, np.nan, dtype), samples)
  samples = lax.select(count_inf & (~invalid), jnp.full_like(samples, np.inf, dtype), samples)
  return lax.select(p_lt_half | count_nan_or_neg | q_is_nan | count_inf, samples,
                    count.astype(dtype) - samples)


def binomial(key: Any, n: Any, p: Any, shape: Sequence[int] | None = None,
             dtype: Any = None) -> Any:
  """Binomial(n, p) samples as floats (JAX's `random.binomial`).

  Args:
    key: a single key.
    n: numbers of trials (floats are floored), broadcastable to `shape`.
    p: success probabilities, broadcastable to `shape`.
    shape: the result shape `s`; default: the broadcast shape of `n` and `p`.
    dtype: a floating dtype T (default float32; float64 under x64).

  Returns:
    `T[*s]`: NaN where `p` is NaN or negative or `n` is NaN or negative; inf where `n` is
    inf.

  Raises:
    ValueError: if T is not floating or the shapes do not broadcast to `shape`.

  Algorithm: as JAX (TensorFlow): with `q = min(p, 1 - p)`, geometric waiting times
  (inversion) where `n q <= 10`, Hörmann's BTRS transformed rejection elsewhere; `n - k`
  for `p >= 1/2`.
  """
  data, _ = _check_prng_key("binomial", key, keys=True)
  dt = _float_dtype("binomial", dtype)
  shape = _broadcast_shape_of("binomial", shape, n, p)
  return _binomial(data, n, p, tuple(shape), dt)


def _broadcasts_to(src, dst) -> bool:
  src, dst = tuple(src), tuple(dst)
  return len(src) <= len(dst) and all(a in (1, b) for a, b in zip(src[::-1], dst[::-1]))


def multinomial(key: Any, n: Any, p: Any, *, shape: Sequence[int] | None = None,
                dtype: Any = None, unroll: int | bool = 1) -> Any:
  """Multinomial counts of `n` trials over outcomes with probabilities `p` (JAX's
  `random.multinomial`).

  Args:
    key: a single key.
    n: numbers of trials, broadcastable to `shape[:-1]`.
    p: outcome probabilities `f[*b, k]`, outcomes along the last axis (rows should sum
      to 1).
    shape: the result shape `(*s, k)` (as JAX's code: the full shape, outcome axis
      included), broadcast-compatible with `p`; default `p`'s shape.
    dtype: the result dtype (default float32; float64 under x64).
    unroll: the `lax.scan` unroll over the k outcomes.

  Returns:
    `dtype[*shape]` counts summing to `n` along the last axis.

  Raises:
    ValueError: if `n` or `p` does not broadcast to `shape`.

  Algorithm: conditional binomials: with key i of `split(key, k)`, outcome i's count is
  `binomial(n_left, p_i / (p_i + ... + p_k))`, `n_left` the trials not yet assigned (a
  `scan` over the outcomes), as JAX; `n` and `p` are promoted to one floating dtype.

  Examples:
    >>> multinomial(PRNGKey(0), 10., np.array([0.2, 0.3, 0.5], np.float32))
    Array([1., 1., 8.], dtype=float32)
  """
  data, _ = _check_prng_key("multinomial", key, keys=True)
  n, p = _promote_inexact_as_jax(n, p)
  shape = np.shape(p) if shape is None else _canonical_shape("multinomial", shape)
  if not shape:
    raise ValueError(f"multinomial needs p with at least one axis (the outcomes); got "
                     f"shape {np.shape(p)}.")
  if not (_broadcasts_to(np.shape(n), shape[:-1]) and _broadcasts_to(np.shape(p), shape)):
    raise ValueError(f"multinomial: n of shape {np.shape(n)} and p of shape "
                     f"{np.shape(p)} must broadcast to shape[:-1] = {shape[:-1]} and "
                     f"shape = {shape}.")
  # NB: JAX's multinomial converts its counts with astype, whose name its x64 warning gives.
  dt = dtypes.check_user_dtype(float if dtype is None else dtype, "astype")
  # NB: not jitted, as JAX's: the program holds the scan of conditional binomials
  n = jnp.broadcast_to(n, shape[:-1])
  p = jnp.broadcast_to(p, shape)

  def step(remainder, ratio_key):
    ratio, k = ratio_key
    count = _binomial(k, remainder, ratio.clip(0, 1), remainder.shape, remainder.dtype)
    return remainder - count, count

  p = jnp.moveaxis(p, -1, 0)
  remaining_probs = lax.cumsum(p, 0, reverse=True)
  ratios = p / jnp.where(remaining_probs == 0, 1, remaining_probs)
  keys = prng.random_split_p.bind(data, shape=(ratios.shape[0],))
  _, counts = lax.scan(step, n, (ratios, keys), unroll=unroll)
  return jnp.moveaxis(counts, 0, -1).astype(dt)


# ---------------------------------------------------------------------------
# out_sharding= (JAX's sharding in types)


def _with_out_sharding(fun):
  """`fun` with JAX's keyword-only `out_sharding=None` argument (a NamedSharding, or a
  PartitionSpec over the mesh set by `sharding.set_mesh`): the sample is drawn as without
  it (the same numbers) and then laid out by `out_sharding` with `lax.spmd.reshard`, so on
  an Explicit mesh its type has that sharding (`float32[8@x,4]`), as JAX's, which draws it
  under `auto_axes`. A NamedSharding that splits no dimension (`typeof(x).sharding`
  outside explicit-sharding mode, as flax.nnx's Dropout passes) leaves the sample as drawn.

  Raises:
    TypeError: `out_sharding` is not a NamedSharding or a PartitionSpec (JAX's message).
    ValueError: a PartitionSpec with no mesh set (JAX's message), or a spec that does not
      fit the sample (from `reshard`).
  """
  name = fun.__name__

  @functools.wraps(fun)
  def sampler(*args, out_sharding=None, **kwargs):
    if out_sharding is not None:
      if not isinstance(out_sharding, (sharding.NamedSharding, sharding.PartitionSpec)):
        raise TypeError(f"`out_sharding` argument of {name} only supports instances of "
                        f"`NamedSharding` or `PartitionSpec`. Got {out_sharding} of type: "
                        f"{type(out_sharding)}")
      if (isinstance(out_sharding, sharding.PartitionSpec)
          and sharding.get_abstract_mesh().empty):
        raise ValueError("Using PartitionSpec when you are not under a mesh context is not "
                         "allowed. Please pass a NamedSharding instance or enter into a mesh "
                         f"context via `jax.set_mesh`. Got {out_sharding}")
    out = fun(*args, **kwargs)
    if out_sharding is None:
      return out
    spec = (out_sharding.spec if isinstance(out_sharding, sharding.NamedSharding)
            else out_sharding)
    if all(e is None for e in spec):
      return out   # NB: the sample is unsplit already
    return spmd.reshard(out, out_sharding)
  sig = inspect.signature(fun)
  sampler.__signature__ = sig.replace(parameters=[
      *sig.parameters.values(),
      inspect.Parameter("out_sharding", inspect.Parameter.KEYWORD_ONLY, default=None)])
  return sampler


ball = _with_out_sharding(ball)
bernoulli = _with_out_sharding(bernoulli)
beta = _with_out_sharding(beta)
bits = _with_out_sharding(bits)
categorical = _with_out_sharding(categorical)
cauchy = _with_out_sharding(cauchy)
chisquare = _with_out_sharding(chisquare)
dirichlet = _with_out_sharding(dirichlet)
exponential = _with_out_sharding(exponential)
f = _with_out_sharding(f)
gamma = _with_out_sharding(gamma)
generalized_normal = _with_out_sharding(generalized_normal)
geometric = _with_out_sharding(geometric)
gumbel = _with_out_sharding(gumbel)
laplace = _with_out_sharding(laplace)
loggamma = _with_out_sharding(loggamma)
logistic = _with_out_sharding(logistic)
lognormal = _with_out_sharding(lognormal)
maxwell = _with_out_sharding(maxwell)
multivariate_normal = _with_out_sharding(multivariate_normal)
normal = _with_out_sharding(normal)
orthogonal = _with_out_sharding(orthogonal)
pareto = _with_out_sharding(pareto)
permutation = _with_out_sharding(permutation)
poisson = _with_out_sharding(poisson)
rademacher = _with_out_sharding(rademacher)
randint = _with_out_sharding(randint)
rayleigh = _with_out_sharding(rayleigh)
t = _with_out_sharding(t)
triangular = _with_out_sharding(triangular)
truncated_normal = _with_out_sharding(truncated_normal)
uniform = _with_out_sharding(uniform)
wald = _with_out_sharding(wald)
