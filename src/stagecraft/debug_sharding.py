"""Drawing how an array is laid out over devices (`debug.visualize_sharding`), with `rich`.

The array (1-D or 2-D) is drawn as a table: one cell per block of the array that some
devices hold, sized in proportion to the block, labelled with the platform and the ids of
the devices holding it (`CPU 0,1` for a block replicated on devices 0 and 1). The layout
(cell sizes, padding, the box) is JAX's `jax.debug.visualize_sharding`'s, so the printed
text is the same; colours come from a matplotlib colormap (`tab20b` unless `color_map` is
given) and are left out where matplotlib is missing or the console has no colours.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import rich.align
import rich.box
import rich.console
import rich.padding
import rich.style
import rich.table

__all__ = ["draw", "blocks"]

# A cell's width per unit of height, so that square blocks look square in a terminal.
_WIDTH_PER_HEIGHT = 2.5


def _block_index(size: int, index: Any, axis: int) -> tuple[int, int]:
  """(position of the block along the axis, its length) of a device's index on one axis."""
  if isinstance(index, (int, np.integer)):
    index = slice(int(index), int(index) + 1)
  if index.start is None and index.stop is None:
    return 0, size
  start = 0 if index.start is None else index.start
  stop = size if index.stop is None else index.stop
  length = stop - start
  if length <= 0 or start % length or size % length:
    raise ValueError(f"visualize_sharding: the block {index} of axis {axis} (size {size}) is "
                     f"not one of equal blocks tiling the axis.")
  return start // length, length


def blocks(shape: Sequence[int], sharding) -> tuple[dict, dict, dict]:
  """The grid of blocks of an array of `shape` under `sharding`.

  Returns:
    `(devices, heights, widths)`, each keyed by the block's `(row, column)`: the ids of the
    devices holding it, its height as a fraction of the array's (None for a 1-D array) and
    its width as a fraction.
  """
  shape = tuple(shape)
  devices: dict[tuple[int, int], set[int]] = {}
  heights: dict[tuple[int, int], float | None] = {}
  widths: dict[tuple[int, int], float] = {}
  for dev, index in sharding.devices_indices_map(shape).items():
    pos = [_block_index(n, i, ax) for ax, (n, i) in enumerate(zip(shape, index))]
    if len(shape) == 2:
      key = (pos[0][0], pos[1][0])
      heights[key] = pos[0][1] / shape[0]
      widths[key] = pos[1][1] / shape[1]
    else:
      key = (0, pos[0][0])
      heights[key] = None
      widths[key] = pos[0][1] / shape[0]
    devices.setdefault(key, set()).add(dev.id)
  return devices, heights, widths


def _hex(color) -> str:
  if isinstance(color, str):
    return color
  r, g, b = (int(c * 255) for c in color[:3])
  return f"#{r:02X}{g:02X}{b:02X}"


def _text_color(bg: str) -> str:
  """Black on light backgrounds, white on dark ones (ITU-R BT.601 luma)."""
  r, g, b = (int(bg[i:i + 2], 16) for i in (1, 3, 5))
  return "#000000" if 0.299 * r + 0.587 * g + 0.114 * b > 186 else "#ffffff"


def _colors(color_map: Callable, n: int):
  """`n` colours from `color_map`, stepping about half way round the map each time so that
  neighbouring cells differ."""
  values = np.linspace(0, 1, n)
  step = n // 2 + (1 if n % 2 == 0 else 0)
  i = 0
  for _ in range(n):
    yield color_map(values[i])
    i = (i + step) % n


def draw(shape: Sequence[int], sharding, *, use_color: bool = True, scale: float = 1.0,
         min_width: int = 9, max_width: int = 80, color_map: Callable | None = None) -> None:
  """Prints the table of the blocks of an array of `shape` (1-D or 2-D) under `sharding`
  (anything with `devices_indices_map(shape)` and `device_set`, as NamedSharding).

  Args:
    shape: the array's shape.
    sharding: its sharding.
    use_color: colour the cells (needs matplotlib for the default colormap and a console
      with colours); without colour the cells are boxed.
    scale: the height of the drawing is `10 * scale` lines (2-D).
    min_width, max_width: bounds of a cell's width in characters; `max_width` is also the
      console's width.
    color_map: `value in [0, 1] -> (r, g, b[, a])` with components in [0, 1].

  Raises:
    ValueError: for shapes of other ranks, or blocks that do not tile the array.
  """
  shape = tuple(shape)
  if not 1 <= len(shape) <= 2:
    raise ValueError("`visualize_sharding` only works for shapes with 1 and 2 dimensions.")
  console = rich.console.Console(width=max_width)
  use_color = use_color and console.color_system is not None
  if use_color and not color_map:
    try:
      import matplotlib   # noqa: PLC0415  (optional; only its colormap is used)
      color_map = matplotlib.colormaps["tab20b"]
    except ModuleNotFoundError:
      use_color = False

  base_height = int(10 * scale)
  base_width = int(base_height * (shape[1] if len(shape) == 2 else 1) / shape[0])
  kind = next(iter(sharding.device_set)).platform.upper()
  devices, heights, widths = blocks(shape, sharding)
  nrows = max(r for r, _ in devices) + 1
  ncols = max(c for _, c in devices) + 1
  colors = _colors(color_map, nrows * ncols) if use_color else None

  table = rich.table.Table(show_header=False, show_lines=not use_color, padding=0,
                           highlight=not use_color, pad_edge=False,
                           box=None if use_color else rich.box.SQUARE)
  for r in range(nrows):
    row = []
    for c in range(ncols):
      label = f"{kind} " + ",".join(str(i) for i in sorted(devices[r, c]))
      width = int(widths[r, c] * base_width * _WIDTH_PER_HEIGHT)
      width = min(max(width, min_width), max_width)
      height = 1 if heights[r, c] is None else int(heights[r, c] * base_height)
      left, extra = divmod(width - len(label) - 2, 2)
      right = left + extra
      top, extra = divmod(height - 2, 2)
      bottom = top + extra
      bg = fg = None
      if colors is not None:
        bg = _hex(next(colors))
        fg = _text_color(bg)
        top, right, bottom, left = top + 1, right + 1, bottom + 1, left + 1
      row.append(rich.padding.Padding(
          rich.align.Align(label, "center", vertical="middle"),
          (max(top, 0), max(right, 0), max(bottom, 0), max(left, 0)),
          style=rich.style.Style(bgcolor=bg, color=fg)))
    table.add_row(*row)
  console.print(table, end="\n\n")
