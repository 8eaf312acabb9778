"""`stagecraft.experimental.layout`: JAX's `jax.experimental.layout` (`Layout`, `Format`,
`with_layout_constraint`). The classes live in `stagecraft.layout`; `jit` takes Formats in
`in_shardings`/`out_shardings` (pjit.py), `device_put` takes a Format (api.py) and
`Array.format` reports an array's (runtime/array.py)."""
from __future__ import annotations

from typing import Any

from stagecraft.layout import Format, Layout

__all__ = ["Layout", "Format", "with_layout_constraint"]


def with_layout_constraint(x: Any, layouts: Any) -> Any:
  """JAX's `with_layout_constraint` (a layout for an intermediate value inside `jit`).
  Not supported: raises NotImplementedError (a constraint would be silently ignored)."""
  raise NotImplementedError("stagecraft does not support with_layout_constraint: layouts "
                            "can be set on jit's arguments and results (Format in "
                            "in_shardings/out_shardings) only.")
