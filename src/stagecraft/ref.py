"""Mutable array references, as JAX 0.10.2's `jax.ref` module: `Ref` (made by `new_ref`),
its type `AbstractRef` (`typeof(ref)`), and the functional forms of reading and writing
one (`get`, `set`, `swap`, `addupdate`), usable eagerly and inside `jit` (see
`stagecraft.state` for how refs cross the jit boundary).

  >>> import stagecraft.numpy as jnp
  >>> from stagecraft import ref
  >>> r = ref.new_ref(jnp.arange(4.0))
  >>> ref.swap(r, 0, 5.0)
  Array(0., dtype=float32)
  >>> ref.addupdate(r, 1, 10.0)
  >>> ref.get(r)
  Array([ 5., 11.,  2.,  3.], dtype=float32)
"""
from __future__ import annotations

from typing import Any

import stagecraft.numpy as jnp
from stagecraft.api import new_ref
from stagecraft.state import AbstractRef, Ref, freeze

__all__ = ["AbstractRef", "Ref", "addupdate", "empty_ref", "free_ref", "freeze", "get",
           "new_ref", "set", "swap"]


def _index(idx: Any) -> Any:
  return Ellipsis if idx is None or idx == () else idx


def _check(ref: Any, fn: str) -> None:
  if not isinstance(ref, Ref):
    raise TypeError(f"ref.{fn}: expected a Ref (made by new_ref), got {type(ref).__name__}.")


def get(ref: Ref, idx: Any = None) -> Any:
  """`ref[idx]` (the whole value when `idx` is None): an Array of the indexed shape and the
  ref's dtype.

  Raises:
    TypeError: if `ref` is not a `Ref`.
  """
  _check(ref, "get")
  return ref[_index(idx)]


def set(ref: Ref, idx: Any, value: Any) -> None:   # noqa: A001 (JAX's name)
  """Writes `value` into `ref[idx]` (the whole ref when `idx` is None); returns None.

  Raises:
    TypeError: if `ref` is not a `Ref`.
    ValueError: a value of another dtype or shape than the indexed ref (JAX's `swap`
      messages).
  """
  _check(ref, "set")
  ref[_index(idx)] = value


def swap(ref: Ref, idx: Any, value: Any, _function_name: str = "ref_swap") -> Any:
  """Writes `value` into `ref[idx]` and returns the value it replaced (same shape and
  dtype as `value`).

  Raises:
    TypeError: if `ref` is not a `Ref`.
    ValueError: as `set`.
  """
  _check(ref, "swap")
  idx = _index(idx)
  old = ref[idx]
  ref[idx] = value
  return old


def addupdate(ref: Ref, idx: Any, x: Any) -> None:
  """Adds `x` to `ref[idx]` in place (`ref[idx] += x`); returns None.

  Raises:
    TypeError: if `ref` is not a `Ref`.
    ValueError: as `set`.
  """
  _check(ref, "addupdate")
  idx = _index(idx)
  cur, x = ref[idx], jnp.asarray(x)
  if x.shape != cur.shape:   # as JAX: no broadcasting
    raise ValueError(f"Invalid shape for `addupdate`. Ref shape: {ref.shape}. Expected "
                     f"shape: {cur.shape}. Value shape: {x.shape}. Transforms: (). ")
  if x.dtype != cur.dtype:
    # NB: JAX's text, "Value shape" included
    raise ValueError(f"Invalid dtype for `addupdate`. Ref dtype: {ref.dtype}. Value shape: "
                     f"{x.dtype}. ")
  ref._set(idx, cur + x, keep_weak=True)


def empty_ref(ty: Any, memory_space: Any = None) -> Ref:
  """A new ref of type `ty` (an aval or `ShapeDtypeStruct`: its shape and dtype) whose
  contents are unspecified until written (stagecraft fills it with zeros).

  Raises:
    NotImplementedError: for a `memory_space` (stagecraft's refs live in device memory).
  """
  return new_ref(jnp.zeros(ty.shape, ty.dtype), memory_space=memory_space)


def free_ref(ref: Ref) -> None:
  """Invalidates `ref`: later reads and writes raise (as after `freeze`).

  Raises:
    TypeError: if `ref` is not a `Ref`.
  """
  _check(ref, "free_ref")
  freeze(ref)
