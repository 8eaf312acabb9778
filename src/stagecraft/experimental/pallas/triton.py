"""`jax.experimental.pallas.triton` (`plt`) for interpret mode: the Triton compiler params
and the GPU kernel operations that have a meaning on refs: masked `load`/`store`, the atomic
read-modify-writes (done in order: the grid runs sequentially), `dot`, `approx_tanh`,
`max_contiguous` (a hint), `debug_barrier` (nothing). `elementwise_inline_asm` raises
NotImplementedError (it needs PTX).

Layer 8.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from stagecraft.experimental.pallas.core import CompilerParams as _Base
from stagecraft.experimental.pallas.helpers import not_implemented
from stagecraft.lax import elementwise as lax_elementwise
from stagecraft.numpy import contractions, ufuncs

__all__ = ["CompilerParams", "approx_tanh", "atomic_add", "atomic_and", "atomic_cas",
           "atomic_max", "atomic_min", "atomic_or", "atomic_xchg", "atomic_xor",
           "debug_barrier", "dot", "elementwise_inline_asm", "load", "max_contiguous", "store"]


@dataclasses.dataclass(frozen=True)
class CompilerParams(_Base):
  """Triton compiler parameters (interpret mode ignores them)."""
  BACKEND = "triton"
  num_warps: int | None = None
  num_stages: int | None = None


def _where(mask, a, b):
  return a if mask is None else ufuncs.where(mask, a, b)


def load(ref: Any, *, mask: Any = None, other: Any = None, cache_modifier: str | None = None,
         eviction_policy: str | None = None, volatile: bool = False) -> Any:
  """`ref[...]` (a ref or a view `ref.at[idx]`, index arrays gather), with `other` (or
  the loaded value) where `mask` is False."""
  v = ref[...]
  if mask is None or other is None:
    return v
  return ufuncs.where(mask, v, lax_elementwise.convert_element_type(other, v.dtype))


def store(ref: Any, val: Any, *, mask: Any = None, eviction_policy: str | None = None) -> None:
  """Writes `val` into `ref` (a ref or a view) where `mask` holds (everywhere without
  one)."""
  if mask is None:
    ref[...] = val
  else:
    ref[...] = ufuncs.where(mask, val, ref[...])


def _rmw(ref: Any, idx: Any, val: Any, mask: Any, op: str) -> Any:
  if idx is None or (type(idx) is tuple and not idx):
    idx = Ellipsis
  old = ref[idx]
  cur = ref[...]
  at = cur.at[idx]
  if op == "add":   # as JAX's interpreter: duplicate indices do not accumulate
    new = at.set(_where(mask, old + val, old))
  elif op == "xchg":
    new = at.set(_where(mask, val, old))
  else:
    fn = {"max": ufuncs.maximum, "min": ufuncs.minimum, "and": ufuncs.bitwise_and,
          "or": ufuncs.bitwise_or, "xor": ufuncs.bitwise_xor}[op]
    new = at.set(_where(mask, fn(old, val), old))
  ref[...] = new
  return old


def atomic_add(x_ref_or_view, idx, val, *, mask: Any = None):
  """`x[idx] += val` where `mask` holds; returns the old `x[idx]`. As in JAX's interpret
  mode, an index repeated in `idx` is written once (the updates are not accumulated)."""
  return _rmw(x_ref_or_view, idx, val, mask, "add")


def atomic_xchg(x_ref_or_view, idx, val, *, mask: Any = None):
  """`x[idx] = val` where `mask` holds; returns the old `x[idx]`."""
  return _rmw(x_ref_or_view, idx, val, mask, "xchg")


def atomic_max(x_ref_or_view, idx, val, *, mask: Any = None):
  """`x[idx] = max(x[idx], val)` where `mask` holds; returns the old `x[idx]`."""
  return _rmw(x_ref_or_view, idx, val, mask, "max")


def atomic_min(x_ref_or_view, idx, val, *, mask: Any = None):
  """`x[idx] = min(x[idx], val)` where `mask` holds; returns the old `x[idx]`."""
  return _rmw(x_ref_or_view, idx, val, mask, "min")


def atomic_and(x_ref_or_view, idx, val, *, mask: Any = None):
  """`x[idx] &= val` where `mask` holds; returns the old `x[idx]`."""
  return _rmw(x_ref_or_view, idx, val, mask, "and")


def atomic_or(x_ref_or_view, idx, val, *, mask: Any = None):
  """`x[idx] |= val` where `mask` holds; returns the old `x[idx]`."""
  return _rmw(x_ref_or_view, idx, val, mask, "or")


def atomic_xor(x_ref_or_view, idx, val, *, mask: Any = None):
  """`x[idx] ^= val` where `mask` holds; returns the old `x[idx]`."""
  return _rmw(x_ref_or_view, idx, val, mask, "xor")


def atomic_cas(ref: Any, cmp: Any, val: Any) -> Any:
  """Writes `val` into `ref` where it holds `cmp`; returns the old value."""
  old = ref[...]
  ref[...] = ufuncs.where(old == cmp, val, old)
  return old


def approx_tanh(x: Any) -> Any:
  """`tanh(x)` (exact here; Triton uses an approximation)."""
  return ufuncs.tanh(x)


def max_contiguous(x: Any, values: Any) -> Any:
  """A hint that `x` has runs of contiguous values; returns `x`."""
  return x


def debug_barrier() -> None:
  """Synchronizes the grid's programs: nothing to do in sequential interpret mode."""


def dot(a: Any, b: Any, trans_a: bool = False, trans_b: bool = False,
        allow_tf32: bool | None = None, precision: Any = None) -> Any:
  """`a @ b` (each transposed first if asked), at `precision`."""
  if trans_a:
    a = a.T
  if trans_b:
    b = b.T
  return contractions.dot(a, b, precision=precision)


elementwise_inline_asm = not_implemented(
    "jax.experimental.pallas.triton.elementwise_inline_asm", "PTX inline assembly (a GPU)")
