"""`stagecraft.extend.random`: the PRNG implementation API of JAX's `jax.extend.random`, for
the one implementation stagecraft has, Threefry-2x32 (`stagecraft.random`'s keys and bits,
which equal JAX's).

  >>> import numpy as np
  >>> import stagecraft.random as sr
  >>> key = seed_with_impl(threefry_prng_impl, 0)
  >>> np.asarray(sr.key_data(key)).tolist()
  [0, 0]
  >>> threefry_prng_impl.key_shape, str(threefry_prng_impl)
  ((2,), 'fry')

Not available: `define_prng_impl` (raises: `stagecraft.random` implements Threefry only) and
JAX's RBG implementations (`rbg_prng_impl`, `unsafe_rbg_prng_impl`).
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from stagecraft import dtypes, lax
from stagecraft import numpy as jnp
from stagecraft import random as _random
from stagecraft.api import vmap
from stagecraft.lax.random_bits import threefry2x32, threefry2x32_p
from stagecraft.pjit import jit

__all__ = ["PRNGImpl", "define_prng_impl", "random_seed", "seed_with_impl", "threefry2x32_p",
           "threefry_2x32", "threefry_prng_impl",
           # JAX's functions on typed keys (jax._src.random.prng; earlier jax.extend.random)
           "random_bits", "random_split", "random_fold_in", "random_wrap", "random_unwrap"]

_THREEFRY = "threefry2x32"


class PRNGImpl(NamedTuple):
  """A PRNG implementation: the shape of its key data and its functions on raw key data
  (JAX's `PRNGImpl`): `seed(seed) -> key`, `split(key, shape) -> keys[*shape]`,
  `random_bits(key, bit_width, shape) -> uint{bit_width}[*shape]`, `fold_in(key, data)`.
  `str(impl)` is its tag (`fry`)."""
  key_shape: tuple[int, ...]
  seed: Callable
  split: Callable
  random_bits: Callable
  fold_in: Callable
  name: str = "<unnamed>"
  tag: str = "?"

  @property
  def impl(self) -> str:
    """The implementation's name (what `stagecraft.random.key(..., impl=)` accepts)."""
    return self.name

  def __str__(self) -> str:
    return self.tag

  def pprint(self) -> str:
    return f"{self.name} [{self.tag}]"


def _bits(key: Any, bit_width: int, shape: tuple[int, ...]) -> Any:
  return _random.bits(key, shape, np.dtype(f"uint{bit_width}"))


#: The Threefry-2x32 implementation (keys `u32[2]`), stagecraft's only one.
threefry_prng_impl = PRNGImpl(
    key_shape=(2,), seed=_random.PRNGKey,
    split=lambda key, shape: _random.split(key, shape),
    random_bits=_bits, fold_in=_random.fold_in, name=_THREEFRY, tag="fry")


def _check_impl(impl: Any) -> None:
  name = getattr(impl, "name", impl)
  if name != _THREEFRY:
    raise ValueError(f"unrecognized PRNG implementation {impl!r}: stagecraft implements only "
                     f"{_THREEFRY} (stagecraft.extend.random.threefry_prng_impl).")


def seed_with_impl(impl: PRNGImpl, seed: Any) -> Any:
  """A typed key (`key<fry>[]`) of implementation `impl` from an integer `seed`.

  Raises:
    ValueError: for an implementation other than Threefry.
    TypeError: for a seed that is not an integer scalar.
  """
  _check_impl(impl)
  return _random.key(seed)


def random_seed(seeds: Any, impl: PRNGImpl) -> Any:
  """Typed keys `key<fry>[*s]`, one per integer of `seeds` (an int or an integer array of
  shape `s`), as `stagecraft.random.key` makes them.

  Raises:
    ValueError: for an implementation other than Threefry.
    TypeError: for seeds that are not integers.
  """
  _check_impl(impl)
  if isinstance(seeds, int) or np.ndim(seeds) == 0:
    return _random.key(seeds)
  seeds = jnp.asarray(seeds)
  if not dtypes.is_integer(np.dtype(seeds.dtype)):
    raise TypeError(f"PRNG key seeds must be integers; got dtype {np.dtype(seeds.dtype)}.")
  flat = vmap(_random.key)(seeds.reshape(-1))
  data = _random.key_data(flat).reshape((*seeds.shape, 2))
  return _random.wrap_key_data(data)


def _over_keys(fn: Callable, keys: Any, *args) -> Any:
  """`fn(key_data, *args)` for each key of the typed keys `keys` (any batch shape); results
  get the keys' batch shape in front."""
  data = _random.key_data(keys)
  batch = tuple(data.shape[:-1])
  if not batch:
    return fn(data, *args)
  out = vmap(lambda d: fn(d, *args))(data.reshape(-1, 2))
  return out.reshape((*batch, *out.shape[1:]))


def _typed(keys: Any, name: str) -> None:
  if not isinstance(keys, _random.PRNGKeyArray):
    raise TypeError(f"{name} accepts typed keys (stagecraft.random.key, wrap_key_data), got "
                    f"{type(keys).__name__}.")


def random_bits(keys: Any, bit_width: int, shape: tuple[int, ...]) -> Any:
  """Random bits `uint{bit_width}[*k, *shape]` from typed keys `key<fry>[*k]` (each key as
  `stagecraft.random.bits` draws them).

  Raises:
    TypeError: for raw (untyped) keys or a bit width not in 8, 16, 32, 64.
  """
  _typed(keys, "random_bits")
  if bit_width not in (8, 16, 32, 64):
    raise TypeError(f"random_bits: bit_width must be 8, 16, 32 or 64, got {bit_width}.")
  return _over_keys(lambda d: _bits(d, bit_width, tuple(shape)), keys)


def random_split(keys: Any, shape: tuple[int, ...]) -> Any:
  """Typed keys `key<fry>[*k, *shape]`: each key of `keys` (`key<fry>[*k]`) split into
  `shape` new ones."""
  _typed(keys, "random_split")
  return _random.wrap_key_data(_over_keys(lambda d: _random.split(d, tuple(shape)), keys))


def random_fold_in(keys: Any, msgs: Any) -> Any:
  """Typed keys `key<fry>[*k]`: each key folded with the uint32 `msgs` (a scalar)."""
  _typed(keys, "random_fold_in")
  return _random.wrap_key_data(_over_keys(lambda d: _random.fold_in(d, msgs), keys))


def random_wrap(base_arr: Any, *, impl: PRNGImpl) -> Any:
  """Typed keys over the key data `base_arr` (`u32[*k, 2]`).

  Raises:
    ValueError: for an implementation other than Threefry.
    TypeError: if the data is not `u32[..., 2]`.
  """
  _check_impl(impl)
  return _random.wrap_key_data(base_arr)


def random_unwrap(keys: Any) -> Any:
  """The key data `u32[*k, 2]` of typed keys `key<fry>[*k]`."""
  _typed(keys, "random_unwrap")
  return _random.key_data(keys)


def define_prng_impl(*, key_shape: tuple[int, ...], seed: Callable, split: Callable,
                     random_bits: Callable, fold_in: Callable, name: str = "<unnamed>",
                     tag: str = "?") -> Any:
  """JAX's hook for a new PRNG implementation.

  Raises:
    NotImplementedError: always: `stagecraft.random` implements Threefry-2x32 only, and its
      key type is not parameterized by implementation.
  """
  raise NotImplementedError(
      f"define_prng_impl(name={name!r}): stagecraft.random implements only the "
      f"{_THREEFRY} PRNG; custom implementations are not supported. Compute with "
      f"your implementation's functions on raw key data instead.")


@jit
def _threefry_2x32(key1, key2, count):
  flat = count.reshape(-1)
  n = flat.shape[0]
  if n % 2:
    flat = jnp.concatenate([flat, jnp.zeros((1,), np.uint32)])
  half = flat.shape[0] // 2
  y1, y2 = threefry2x32(key1, key2, flat[:half], flat[half:])
  out = jnp.concatenate([y1, y2])
  return lax.reshape(out[:n], count.shape)


def threefry_2x32(keypair: Any, count: Any) -> Any:
  """Hashes `count` with Threefry-2x32 under the key `keypair` (JAX's `threefry_2x32`).

  The flattened counts (padded with one zero if their number is odd) are split into halves
  `(x1, x2)`, encrypted pairwise, and the two output words concatenated back into the shape
  of `count`.

  Args:
    keypair: two `u32[]` key words.
    count: `u32[*s]` counts.

  Returns:
    `u32[*s]`.

  Raises:
    TypeError: if the key words or the counts are not uint32 (JAX's message).

  References:
    Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011.
  """
  key1, key2 = keypair
  types = [np.dtype(x.dtype) if hasattr(x, "dtype") else np.asarray(x).dtype
           for x in (key1, key2, count)]
  if not all(t == np.uint32 for t in types):
    raise TypeError(f"threefry_2x32 requires uint32 arguments, got {types}")
  return _threefry_2x32(key1, key2, count)
