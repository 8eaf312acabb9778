"""Array memory layouts: `Layout` (the order of an array's axes in memory, its tiling and
the element size of sub-byte types), `Layout.AUTO` (the compiler chooses) and `Format` (a
layout with a sharding), as JAX's `jax.experimental.layout` names them.

The runtime (PJRT) reports a buffer's layout and a compiled program's argument and result
layouts as `PjRtLayout`s; `Layout.from_pjrt_layout` reads them. A program is asked for
layouts by the `mhlo.layout_mode` attribute of `main`'s arguments and results
(`layout_mode`: `"auto"` or XLA's minor-to-major text, `"{0,1}"`), which PJRT's compiler
honours (used by `pjit`'s Format path).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft.sharding import Sharding

__all__ = ["Layout", "Format", "AutoLayout", "default_layout", "layout_mode",
           "user_layout_matches"]


class _AutoLayout:
  """`Layout.AUTO`: the compiler chooses the layout (printed `AUTO`)."""
  __slots__ = ()

  def __repr__(self):
    return "AUTO"


AutoLayout = _AutoLayout()


class Layout:
  """A memory layout of an array.

  Args:
    major_to_minor: a permutation of the array's axes, the slowest-varying first (a rank-2
      row-major array is `(0, 1)`).
    tiling: tuples of tile sizes, the innermost tiling last; None: untiled / unspecified.
    sub_byte_element_size_in_bits: the element size in bits of a sub-byte dtype (0: the
      dtype's own).

  `Layout.AUTO` asks the compiler to choose. Compared and hashed by all three fields.
  """
  __slots__ = ("major_to_minor", "tiling", "sub_byte_element_size_in_bits")
  AUTO = AutoLayout

  def __init__(self, major_to_minor, tiling=None, sub_byte_element_size_in_bits: int = 0):
    self.major_to_minor = tuple(major_to_minor)
    self.tiling = None if tiling is None else tuple(tuple(t) for t in tiling)
    self.sub_byte_element_size_in_bits = sub_byte_element_size_in_bits

  @staticmethod
  def from_pjrt_layout(pjrt_layout: Any) -> "Layout":
    """The Layout of a runtime `PjRtLayout` (XLA's minor-to-major order reversed; its tiles,
    `()` when untiled; its element size)."""
    xl = pjrt_layout._xla_layout()
    return Layout(tuple(xl.minor_to_major())[::-1], xl.tiling(), xl.element_size_in_bits())

  def _key(self):
    return (self.major_to_minor, self.tiling, self.sub_byte_element_size_in_bits)

  def __repr__(self):
    return (f"Layout(major_to_minor={self.major_to_minor}, tiling={self.tiling}, "
            f"sub_byte_element_size_in_bits={self.sub_byte_element_size_in_bits})")

  def __hash__(self):
    return hash(self._key())

  def __eq__(self, other):
    return isinstance(other, Layout) and self._key() == other._key()

  def update(self, **kwargs) -> "Layout":
    """A copy with the given fields (`major_to_minor`, `tiling`,
    `sub_byte_element_size_in_bits`) replaced."""
    fields = dict(zip(("major_to_minor", "tiling", "sub_byte_element_size_in_bits"),
                      self._key()))
    fields.update(kwargs)
    return Layout(fields["major_to_minor"], fields["tiling"],
                  fields["sub_byte_element_size_in_bits"])

  def check_compatible_aval(self, aval_shape) -> None:
    """Raises ValueError (JAX's words) when the layout's rank is not `len(aval_shape)`."""
    if len(self.major_to_minor) != len(aval_shape):
      raise ValueError(
          f"Length of major_to_minor and the rank of the value should match. Got "
          f"major_to_minor={self.major_to_minor} and shape={tuple(aval_shape)}")

  def _xla_text(self, dtype) -> str:
    """XLA's text of this layout for an array of `dtype`: `{1,0}`, with tiles
    `{1,0:T(8,128)}` (and the element size of sub-byte integers, `E(4)`)."""
    m2m = ",".join(map(str, self.major_to_minor[::-1]))
    if self.tiling is None:
      return "{" + m2m + "}"
    parts = "".join(f"T({','.join(map(str, t))})" for t in self.tiling)
    bits = self.sub_byte_element_size_in_bits
    dt = np.dtype(dtype)
    if not bits and dt.kind in "iu" and dt.itemsize * 8 < 8:
      bits = dt.itemsize * 8
    if bits:
      parts += f"E({bits})"
    return "{" + m2m + (":" + parts if parts else "") + "}"


class Format:
  """A layout and a sharding: how an array is laid out in memory and over devices.

  Args:
    layout: a `Layout`, `Layout.AUTO` or None (the default layout).
    sharding: a `Sharding` or None (unspecified); required with a concrete `Layout`.

  Raises:
    ValueError: a concrete `Layout` without a sharding.
    TypeError: a layout or sharding of another type.
  """
  __slots__ = ("layout", "sharding")

  def __init__(self, layout: Any = None, sharding: Any = None):
    if isinstance(layout, Layout) and sharding is None:
      raise ValueError(
          f"Sharding has to be concrete when layout is of type {type(layout)}. Please pass a"
          f" `jax.sharding.NamedSharding` or `jax.sharding.SingleDeviceSharding` to the "
          f"sharding argument. Got sharding {sharding}")
    if not isinstance(layout, (Layout, type(None), _AutoLayout)):
      raise TypeError(
          f"Invalid value received for the layout argument. Expected values are `None`, "
          f"`Layout.AUTO` or an instance of `Layout`. Got {layout} of type {type(layout)}")
    if not isinstance(sharding, (Sharding, type(None))):
      raise TypeError(
          f"Invalid value received for the sharding argument. Expected values are `None` "
          f"or an instance of `jax.Sharding`. Got {sharding} of type {type(sharding)}")
    self.layout = layout
    self.sharding = sharding

  def __repr__(self):
    return f"Format(layout={self.layout}, sharding={self.sharding})"

  def __hash__(self):
    return hash((self.layout, self.sharding))

  def __eq__(self, other):
    return (isinstance(other, Format) and self.layout == other.layout
            and self.sharding == other.sharding)


def default_layout(ndim: int) -> Layout:
  """The runtime's default (row-major, untiled) layout of a rank-`ndim` array, as the CPU
  runtime reports it (`tiling=()`)."""
  return Layout(tuple(range(ndim)), ())


def layout_mode(layout: Any, dtype) -> str | None:
  """The `mhlo.layout_mode` attribute value of a requested layout: None (no attribute) for
  None, `"auto"` for `Layout.AUTO`, XLA's layout text for a `Layout`."""
  if layout is None:
    return None
  if layout is AutoLayout:
    return "auto"
  if not layout.tiling and layout.major_to_minor == tuple(range(len(layout.major_to_minor))):
    return None   # NB: as JAX, the default layout is not written
  return layout._xla_text(dtype)


def user_layout_matches(user: Any, xla: Layout) -> bool:
  """Whether the runtime's layout `xla` is the user's `user` (an untiled user layout
  compares its axis order only)."""
  if isinstance(user, Layout) and not user.tiling:
    return user.major_to_minor == xla.major_to_minor
  return user == xla

