"""`jax.experimental.pallas.mosaic_gpu` (`plgpu`): its `CompilerParams` (kept, unused) and
its names, each a function raising NotImplementedError: Mosaic GPU kernels (TMA copies,
barriers, WGMMA, tensor memory) need an NVIDIA GPU and have no interpret mode in stagecraft.

Layer 8.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from stagecraft.experimental.pallas.core import CompilerParams as _Base
from stagecraft.experimental.pallas.helpers import not_implemented

__all__ = ["CompilerParams"]


@dataclasses.dataclass(frozen=True)
class CompilerParams(_Base):
  """Mosaic GPU compiler parameters (kept; stagecraft runs no Mosaic GPU kernels)."""
  BACKEND = "mosaic_gpu"
  approx_math: bool = False
  dimension_semantics: Sequence[Any] | None = None
  max_concurrent_steps: int = 1
  unsafe_no_auto_barriers: bool = False
  reduction_scratch_bytes: int = 0
  profile_space: int = 0
  profile_dir: str = ""
  lowering_semantics: Any = None


def __getattr__(name):
  if name.startswith("__"):
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
  return not_implemented(f"jax.experimental.pallas.mosaic_gpu.{name}",
                         "Mosaic GPU (an NVIDIA GPU)")
