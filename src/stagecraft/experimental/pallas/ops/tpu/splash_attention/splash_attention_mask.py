"""Splash attention masks (`jax.experimental.pallas.ops.tpu.splash_attention.
splash_attention_mask`), plain NumPy as in JAX 0.10.2.

A mask describes which (query, key) positions may attend: `mask.shape` is
(q_seq_len, kv_seq_len) ((heads, q, kv) for `MultiHeadMask`) and `mask[q_slice, kv_slice]`
is a bool NumPy array for that block. Lazy masks (`CausalMask`, `LocalMask`,
`ChunkedCausalMask`, `FullMask`) compute blocks from index arithmetic; `NumpyMask` wraps a
dense bool array; `m1 | m2` and `m1 & m2` combine masks of equal shape (ValueError
otherwise). The `make_*` functions build dense bool arrays.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["Mask", "LogicalOr", "LogicalAnd", "MultiHeadMask", "CausalMask",
           "ChunkedCausalMask", "LocalMask", "NumpyMask", "FullMask", "make_causal_mask",
           "make_local_attention_mask", "make_chunk_attention_mask", "make_random_mask"]


def _grid(shape):
  q, kv = shape
  return np.arange(q, dtype=np.int32)[:, None], np.arange(kv, dtype=np.int32)[None, :]


def make_causal_mask(shape: tuple[int, int], offset: int = 0) -> np.ndarray:
  """Dense causal mask, bool [q, kv]: True where `q + offset >= kv`."""
  qi, ki = _grid(shape)
  return (qi + offset >= ki).astype(np.bool_)


def make_local_attention_mask(shape: tuple[int, int],
                              window_size: tuple[int | None, int | None], *,
                              offset: int = 0) -> np.ndarray:
  """Dense local-window mask, bool [q, kv]: `kv` within `left` before and `right` after
  `q + offset` (`window_size = (left, right)`, None for no limit on that side)."""
  qi, ki = _grid(shape)
  out = np.ones(tuple(shape), dtype=np.bool_)
  left, right = window_size
  if left is not None:
    out &= ki >= qi + offset - left
  if right is not None:
    out &= ki <= qi + offset + right
  return out


def make_chunk_attention_mask(shape: tuple[int, int], chunk_size: int) -> np.ndarray:
  """Dense chunked causal mask, bool [q, kv]: causal within blocks of `chunk_size`
  positions, nothing across blocks. ValueError for a non-positive `chunk_size`."""
  if chunk_size <= 0:
    raise ValueError("chunk_size must be positive")
  qi, ki = _grid(shape)
  return ((qi // chunk_size) == (ki // chunk_size)) & (qi >= ki)


def make_random_mask(shape: tuple[int, int], sparsity: float, seed: int) -> np.ndarray:
  """Random bool mask: each entry True with probability `1 - sparsity`, drawn from NumPy's
  global RNG after `np.random.seed(seed)` (as JAX does, so the draws match)."""
  np.random.seed(seed)
  return np.random.binomial(n=1, p=1.0 - sparsity, size=shape).astype(np.bool_)


class Mask:
  """Base class of Splash attention masks (see the module docstring)."""

  @property
  def shape(self) -> tuple[int, ...]:
    raise NotImplementedError

  def __getitem__(self, idx) -> np.ndarray:
    raise NotImplementedError

  def __bool__(self) -> bool:
    raise NotImplementedError(
        "Conversion to bool is unsupported. Could be caused by using logical instead of "
        "bitwise operations on masks.")

  def _check_same_shape(self, other: "Mask") -> None:
    if self.shape != other.shape:
      raise ValueError(f"Invalid shape for other: {other.shape}, expected: {self.shape}")

  def __or__(self, other: "Mask") -> "Mask":
    self._check_same_shape(other)
    return LogicalOr(self, other)

  def __and__(self, other: "Mask") -> "Mask":
    self._check_same_shape(other)
    return LogicalAnd(self, other)


@dataclasses.dataclass
class LogicalOr(Mask):
  """Union of two masks of equal shape."""
  left: Mask
  right: Mask

  def __post_init__(self):
    self.left._check_same_shape(self.right)

  @property
  def shape(self):
    return self.left.shape

  def __getitem__(self, idx):
    return self.left[idx] | self.right[idx]

  def __hash__(self):
    return hash((type(self), self.left, self.right))


@dataclasses.dataclass
class LogicalAnd(Mask):
  """Intersection of two masks of equal shape."""
  left: Mask
  right: Mask

  def __post_init__(self):
    self.left._check_same_shape(self.right)

  @property
  def shape(self):
    return self.left.shape

  def __getitem__(self, idx):
    return self.left[idx] & self.right[idx]

  def __hash__(self):
    return hash((type(self), self.left, self.right))


@dataclasses.dataclass
class MultiHeadMask(Mask):
  """One 2-D mask per head; shape (heads, q, kv). ValueError for no masks, masks of
  different shapes, non-masks, or nested MultiHeadMasks."""
  masks: Sequence[Mask]

  def __post_init__(self):
    if not self.masks:
      raise ValueError("Unsupported empty tuple of masks")
    first = self.masks[0].shape
    for m in self.masks[1:]:
      if m.shape != first:
        raise ValueError(f"Unexpected mask shape, got: {m.shape}, expected: {first}")
    if not all(isinstance(m, Mask) for m in self.masks):
      raise ValueError("masks should be of type Mask")
    if any(isinstance(m, MultiHeadMask) for m in self.masks):
      raise ValueError("Nesting MultiHeadMasks is not supported")

  @property
  def shape(self):
    return (len(self.masks),) + tuple(self.masks[0].shape)

  def __getitem__(self, idx):
    if len(idx) != 3:
      raise NotImplementedError(f"Unsupported slice: {idx}")
    heads, rest = idx[0], idx[1:]
    if isinstance(heads, int):
      return self.masks[heads][rest]
    return np.stack([m[rest] for m in self.masks[heads]])

  def __eq__(self, other):
    if not isinstance(other, type(self)):
      return NotImplemented
    return self.masks == other.masks

  def __hash__(self):
    return hash((type(self),) + tuple(hash(m) for m in self.masks))


def _full_slice(s: slice, size: int) -> tuple[int, int]:
  if s.step not in (None, 1):
    raise NotImplementedError(f"Unsupported slice step: {s.step}")
  start = 0 if s.start is None else s.start
  stop = size if s.stop is None else s.stop
  if start < 0 or stop > size:
    raise NotImplementedError(f"Unsupported slice: {s} for size {size}")
  return start, stop


class _IndexMask(Mask):
  """A 2-D mask computed blockwise from (query index, key index) grids by
  `mask_function(q_ids [n,1], kv_ids [1,m]) -> bool [n,m]`. `shard_count` must have a
  square dividing q_seq_len (ValueError otherwise)."""

  def __init__(self, shape: tuple[int, int], mask_function: Callable[..., Any],
               shard_count: int = 1):
    self._shape = shape
    self.mask_function = mask_function
    n = shard_count * shard_count
    if shape[0] % n != 0:
      raise ValueError(f"Shard count squared ({n}) must divide Q seq_len ({shape[0]}) "
                       "evenly.")
    self.q_sequence = np.arange(shape[0], dtype=np.int32)

  @property
  def shape(self):
    return self._shape

  def __getitem__(self, idx):
    if len(idx) != 2 or not all(isinstance(s, slice) for s in idx):
      raise NotImplementedError(f"Unsupported slice: {idx}")
    q0, q1 = _full_slice(idx[0], self.shape[0])
    k0, k1 = _full_slice(idx[1], self.shape[1])
    return self.mask_function(self.q_sequence[q0:q1][:, None], np.arange(k0, k1)[None, :])

  def _key(self):
    raise NotImplementedError

  def __eq__(self, other):
    if not isinstance(other, type(self)):
      return NotImplemented
    return self._key() == other._key() and np.array_equal(self.q_sequence,
                                                          other.q_sequence)

  def __hash__(self):
    return hash((type(self),) + self._key() + (self.q_sequence.tobytes(),))


class CausalMask(_IndexMask):
  """Lazy causal mask: query `i` sees keys `j <= i + offset`."""

  def __init__(self, shape: tuple[int, int], offset: int = 0, shard_count: int = 1):
    self.offset = offset
    super().__init__(shape, lambda q, k: q + self.offset >= k, shard_count)

  def _key(self):
    return (self.shape, self.offset)


class ChunkedCausalMask(_IndexMask):
  """Lazy chunked causal mask (causal inside blocks of `chunk_size` positions).
  ValueError for a non-positive `chunk_size`."""

  def __init__(self, shape: tuple[int, int], chunk_size: int, shard_count: int = 1):
    if chunk_size <= 0:
      raise ValueError("chunk_size must be positive")
    self.chunk_size = chunk_size
    super().__init__(
        shape, lambda q, k: ((q // self.chunk_size) == (k // self.chunk_size)) & (q >= k),
        shard_count)

  def _key(self):
    return (self.shape, self.chunk_size)


class LocalMask(_IndexMask):
  """Lazy local-window mask (`window_size = (left, right)`, None for unbounded; query
  positions shifted by `offset`)."""

  def __init__(self, shape: tuple[int, int], window_size: tuple[int | None, int | None],
               offset: int, shard_count: int = 1):
    self.window_size = window_size
    self.offset = offset
    super().__init__(shape, self._compute, shard_count)

  def _compute(self, q, k):
    left, right = self.window_size
    if left is None and right is None:
      return np.ones((q.shape[0], k.shape[1]), dtype=np.bool_)
    q = q + self.offset
    out = np.ones((q.shape[0], k.shape[1]), dtype=np.bool_)
    if left is not None:
      out &= k >= q - left
    if right is not None:
      out &= k <= q + right
    return out

  def _key(self):
    return (self.shape, self.window_size, self.offset)

  def __eq__(self, other):
    if not isinstance(other, type(self)):
      return False
    return super().__eq__(other)

  __hash__ = _IndexMask.__hash__


@dataclasses.dataclass
class NumpyMask(Mask):
  """A mask held as a dense 2-D bool NumPy array (ValueError otherwise)."""
  array: np.ndarray

  def __post_init__(self):
    if self.array.ndim != 2:
      raise ValueError("Expected a 2-dim array")
    if self.array.dtype != np.bool_:
      raise ValueError("Mask must be a boolean array")

  @property
  def shape(self):
    return self.array.shape

  def __getitem__(self, idx):
    return self.array[idx]

  def __eq__(self, other):
    if not isinstance(other, type(self)):
      return NotImplemented
    return np.array_equal(self.array, other.array)

  def __hash__(self):
    return hash((type(self), self.array.tobytes()))


@dataclasses.dataclass(frozen=True)
class FullMask(Mask):
  """Every query sees every key; `_shape` must be a tuple (ValueError otherwise)."""
  _shape: tuple[int, int]

  def __post_init__(self):
    if not isinstance(self._shape, tuple):
      raise ValueError(f"Unsupported shape type: {type(self._shape)}")

  @property
  def shape(self):
    return self._shape

  def __getitem__(self, idx):
    if len(idx) != 2 or not all(isinstance(s, slice) for s in idx):
      raise NotImplementedError(f"Unsupported slice: {idx}")
    q0, q1 = _full_slice(idx[0], self.shape[0])
    k0, k1 = _full_slice(idx[1], self.shape[1])
    return np.ones((q1 - q0, k1 - k0), dtype=np.bool_)

  def __eq__(self, other):
    if not isinstance(other, type(self)):
      return NotImplemented
    return self.shape == other.shape

  def __hash__(self):
    return hash((type(self), self.shape))
