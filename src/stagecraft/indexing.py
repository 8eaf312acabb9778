"""`ds` (`dslice`): a slice given by a start index, which may be traced, and a static size
(JAX's `jax.ds`, as used by `pl.ds` and `Ref` indexing).

  >>> ds(2, 3)
  Slice(start=2, size=3, stride=1)
  >>> ds(None)
  slice(None, None, None)
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Any

import numpy as np

from stagecraft import tree_util

__all__ = ["Slice", "ds", "dslice"]


def _is_static(x: Any) -> bool:
  return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


@tree_util.register_pytree_node_class
@dataclasses.dataclass(slots=True)
class Slice:
  """The elements `start, start + stride, ..., start + (size - 1) * stride` of an axis.

  `start` and `size` may be Python ints or (traced) integer arrays; a static one is kept in
  the treedef, a dynamic one is a leaf, so a `Slice` passes through `jit`.

  Raises:
    ValueError: if `stride` is negative.
  """
  start: Any
  size: Any
  stride: int = 1

  def __post_init__(self):
    if self.stride < 0:
      raise ValueError(f"`stride` must be >= 0, got {self.stride}.")

  @property
  def is_dynamic_start(self) -> bool:
    return not _is_static(self.start)

  @property
  def is_dynamic_size(self) -> bool:
    return not _is_static(self.size)

  def tree_flatten(self):
    start_dyn, size_dyn = self.is_dynamic_start, self.is_dynamic_size
    children = (self.start if start_dyn else None, self.size if size_dyn else None)
    aux = (None if start_dyn else self.start, None if size_dyn else self.size, self.stride)
    return children, aux

  @classmethod
  def tree_unflatten(cls, aux, children) -> "Slice":
    start, size = (c if c is not None else a for c, a in zip(children, aux[:2]))
    return cls(start, size, aux[2])

  @classmethod
  def from_slice(cls, slc: slice, size: int) -> "Slice":
    """The `Slice` that `slc` selects from an axis of length `size`.

    Raises:
      ValueError: if `slc` has a step below 1.
    """
    start, stop, step = slc.indices(operator.index(size))
    if step < 1:
      raise ValueError(f"slice must have a step >= 1 (found: {step})")
    return cls(start, len(range(start, stop, step)), step)


def ds(start: Any, size: Any = None, stride: int | None = None) -> slice | Slice:
  """A `Slice` from a start index and a size, read like Python's slices:
  `ds(None)` is `:`, `ds(j)` is `:j`, `ds(i, n)` is `i:i+n` and `ds(i, n, s)` is
  `i:i+n*s:s` (`n` elements).

  Args:
    start: the first index (an int or a traced integer scalar), or None for the whole axis.
    size: the number of elements (None: `start` is the size and the slice starts at 0).
    stride: a static step (default 1).

  Returns:
    `slice(None)` when `start` is None, else a `Slice`.

  Raises:
    ValueError: if `stride` is not a Python int, or is negative.
  """
  if start is None:
    return slice(None)
  if stride is None:
    stride = 1
  if not isinstance(stride, int):
    raise ValueError(f"Non-static stride in `dslice`: got {stride!r}; the stride must be a "
                     f"Python int.")
  if size is None:
    start, size = 0, start
  return Slice(start, size, stride)


dslice = ds
