"""`stagecraft.experimental.layout`: JAX's `jax.experimental.layout` names.

stagecraft lets XLA choose every array's memory layout (its default, major-to-minor
layouts); `Layout` and `Format` describe a layout and a (layout, sharding) pair as JAX's do,
so that code which builds them or tests `isinstance(s, Format)` (flax's sharding helpers)
runs. Asking for a layout other than the default raises `NotImplementedError`.
"""
from __future__ import annotations

from typing import Any, Sequence

__all__ = ["Layout", "Format", "with_layout_constraint"]


class _AutoLayout:
  """`Layout.AUTO`: let the compiler choose the layout."""

  def __repr__(self):
    return "AUTO"


class Layout:
  """A memory layout: `major_to_minor` axis order, `tiling` and the element size of sub-byte
  types, as JAX's `Layout` (a description only: stagecraft keeps XLA's default layouts).

  Args:
    major_to_minor: a permutation of the array's axes, the slowest-varying first.
    tiling: tuples of tile sizes, innermost tiling last.
    sub_byte_element_size_in_bits: the element size of a sub-byte dtype (0: the dtype's).
  """
  AUTO = _AutoLayout()

  def __init__(self, major_to_minor: Sequence[int], tiling: Sequence[Sequence[int]] = (),
               *, sub_byte_element_size_in_bits: int = 0):
    self.major_to_minor = tuple(major_to_minor)
    self.tiling = tuple(tuple(t) for t in tiling)
    self.sub_byte_element_size_in_bits = sub_byte_element_size_in_bits

  def _key(self):
    return (self.major_to_minor, self.tiling, self.sub_byte_element_size_in_bits)

  def __eq__(self, other):
    return isinstance(other, Layout) and self._key() == other._key()

  def __hash__(self):
    return hash(self._key())

  def __repr__(self):
    return (f"Layout(major_to_minor={self.major_to_minor}, tiling={self.tiling}, "
            f"sub_byte_element_size_in_bits={self.sub_byte_element_size_in_bits})")


class Format:
  """A layout and a sharding together, as JAX's `Format(layout=None, sharding=None)`
  (`None` is the default of each)."""

  def __init__(self, layout: Any = None, sharding: Any = None):
    if layout is not None and not isinstance(layout, (Layout, _AutoLayout)):
      raise TypeError(f"Format: expected a Layout, Layout.AUTO or None as layout, got "
                      f"{type(layout).__name__}")
    self.layout = layout
    self.sharding = sharding

  def __eq__(self, other):
    return (isinstance(other, Format) and self.layout == other.layout
            and self.sharding == other.sharding)

  def __hash__(self):
    return hash((self.layout, self.sharding))

  def __repr__(self):
    return f"Format(layout={self.layout!r}, sharding={self.sharding!r})"


def with_layout_constraint(x: Any, layouts: Any) -> Any:
  """JAX's `with_layout_constraint`. stagecraft keeps XLA's default layouts, so this
  raises `NotImplementedError` (a constraint would be silently ignored otherwise)."""
  raise NotImplementedError("stagecraft keeps XLA's default array layouts: "
                            "with_layout_constraint is not supported.")
