"""`stagecraft.experimental.random`: JAX 0.10.2's experimental stateful PRNG
(`jax.experimental.random`): `stateful_rng(seed)` makes a `StatefulPRNG`, a typed PRNG key
(`_base_key`) and a scalar integer `Ref` counter (`_counter`). Each draw derives a fresh key
as `random.fold_in(_base_key, counter)` and adds one to the counter, so repeated draws differ
without the user threading keys; the counter is a `Ref`, so draws inside `jit` update it
(the ref is discharged at the jit boundary, `stagecraft.state`). `split(n)` makes a
generator of `n` keys and `n` counters to pass to `vmap`; `spawn(n)` a list of generators.

The keys and values are JAX's bit for bit (the same Threefry keys and samplers).

  >>> rng = stateful_rng(42)
  >>> rng.uniform()
  Array(0.5302608, dtype=float32)
  >>> rng.uniform()
  Array(0.72766423, dtype=float32)

Algorithm: JAX 0.10.2's `jax/_src/random/stateful_rng.py` (behaviour reimplemented).
"""
from __future__ import annotations

import dataclasses
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from stagecraft import core, dtypes, tree_util
from stagecraft import numpy as jnp
from stagecraft import random as _random
from stagecraft import ref as _ref
from stagecraft.api import new_ref
from stagecraft.state import Ref

__all__ = ["StatefulPRNG", "stateful_rng"]


def _size_shape(size: Any, *args: Any) -> tuple[int, ...]:
  """The shape of a draw: `size` as a tuple of ints, or (for None) the broadcast shape of the
  parameter arrays `args`."""
  if size is None:
    return tuple(np.broadcast_shapes(*(np.shape(a) for a in args)))
  if isinstance(size, (int, np.number)):
    return (operator.index(size),)
  return tuple(operator.index(d) for d in size)


def _is_key(x: Any) -> bool:
  dtype = getattr(x, "dtype", None)
  return (dtype is not None and hasattr(x, "shape")
          and dtypes.issubdtype(dtype, dtypes.prng_key))


@tree_util.register_dataclass
@dataclasses.dataclass(frozen=True, slots=True)
class StatefulPRNG:
  """A stateful random generator (make one with `stateful_rng`), as JAX's
  `jax.experimental.random.StatefulPRNG`: a frozen dataclass registered as a pytree whose
  two leaves are `_base_key` (a typed PRNG key array: a scalar key, or a key per generator
  after `split`) and `_counter` (an integer `Ref` of the key's shape, the number of keys
  drawn so far).

  Raises:
    ValueError: `_base_key` is not a typed PRNG key, or `_counter` is not a `Ref`
      (JAX's messages).
  """
  _base_key: Any
  _counter: Any

  def __post_init__(self):
    # NB: pytree unflattening with bare `object()` placeholder leaves must pass (JAX skips
    # its own sentinel); None and other values are checked, as JAX's.
    if type(self._base_key) is object:
      return
    if not _is_key(self._base_key):
      raise ValueError(f"Expected base_key to be a typed PRNG key; got {self._base_key}")
    if not isinstance(self._counter, Ref):
      raise ValueError(f"Expected counter to be a scalar integer ref; got {self._counter}")

  def key(self, shape: int | Sequence[int] = ()) -> Any:
    """A new PRNG key (of the base key's impl) and one more on the counter: the base key
    folded with the counter's value; with a non-empty `shape`, that key split into a key
    array of `shape`.

    Raises:
      ValueError: on a generator made by `split` (use it under `vmap`).
    """
    if self._base_key.shape:
      raise ValueError("cannot operate on split stateful generator")
    k = _random.fold_in(self._base_key, self._counter[...])
    _ref.addupdate(self._counter, None, 1)
    shape = _size_shape(shape)
    return _random.split(k, shape) if shape else k

  def random(self, size: int | Sequence[int] | None = None, dtype: Any = float) -> Any:
    """Floats in [0, 1) of shape `size` (() for None) and float `dtype` (float32 unless x64),
    from `random.uniform` with a fresh key."""
    return _random.uniform(self.key(), shape=_size_shape(size), dtype=dtype)

  def uniform(self, low: Any = 0, high: Any = 1, size: int | Sequence[int] | None = None, *,
              dtype: Any = float) -> Any:
    """Uniform floats in [low, high) of shape `size` (for None, the broadcast shape of
    `low` and `high`) and float `dtype`, from `random.uniform` with a fresh key."""
    return _random.uniform(self.key(), _size_shape(size, low, high), minval=low,
                           maxval=high, dtype=dtype)

  def normal(self, loc: Any = 0, scale: Any = 1, size: int | Sequence[int] | None = None, *,
             dtype: Any = float) -> Any:
    """Normal samples `loc + scale * z` of shape `size` (for None, the broadcast shape of
    `loc` and `scale`) cast to float `dtype`; `z` from `random.normal` with a fresh key."""
    z = _random.normal(self.key(), _size_shape(size, loc, scale), dtype)
    return (jnp.asarray(loc) + jnp.asarray(scale) * z).astype(dtype)

  def integers(self, low: Any, high: Any = None, size: int | Sequence[int] | None = None, *,
               dtype: Any = int) -> Any:
    """Integers in [low, high) (in [0, low) when `high` is None) of shape `size` (for None,
    the broadcast shape of the bounds) and integer `dtype`, from `random.randint` with a
    fresh key."""
    if high is None:
      low, high = 0, low
    return _random.randint(self.key(), _size_shape(size, low, high), minval=low,
                           maxval=high, dtype=dtype)

  def split(self, num: int | Sequence[int]) -> StatefulPRNG:
    """One generator holding `num` independent child generators (a key array of shape
    `num` and a zero int counter `Ref` of that shape), to be mapped over by `vmap`; draws on
    it directly raise ValueError (see `key`)."""
    return StatefulPRNG(_base_key=self.key(num),
                        _counter=new_ref(jnp.zeros(num, dtype=int)))

  def spawn(self, n_children: int) -> list[StatefulPRNG]:
    """A list of `n_children` independent generators, each a key of `self.key(n_children)`
    with a new zero counter."""
    return [type(self)(k, new_ref(0)) for k in self.key(n_children)]


def stateful_rng(seed: Any = None, *, impl: Any = None) -> StatefulPRNG:
  """A new `StatefulPRNG` (JAX's `jax.experimental.random.stateful_rng`): its base key is
  `random.key(seed, impl=impl)` and its counter a new `Ref(0)`.

  Args:
    seed: an integer scalar (32 or 64 bit). None seeds from the OS entropy of
      `numpy.random.SeedSequence()` (masked to a non-negative int64), as JAX does.
    impl: the PRNG implementation (as `random.key`'s `impl`; Threefry by default).

  Raises:
    TypeError: `seed` is None inside a transformation (JAX's message).
  """
  if seed is None:
    if type(core.current_trace()) is not core.EvalTrace:
      raise TypeError(
          "When used within transformed code, jax.experimental.random.stateful_rng()"
          " requires an explicit seed to be set.")
    entropy = np.random.SeedSequence().entropy
    seed = np.int64(int(entropy) & np.iinfo(np.int64).max)
  return StatefulPRNG(_base_key=_random.key(seed, impl=impl), _counter=new_ref(0))
