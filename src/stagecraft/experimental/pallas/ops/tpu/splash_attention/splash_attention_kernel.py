"""Splash attention's kernel-side API (`jax.experimental.pallas.ops.tpu.splash_attention.
splash_attention_kernel`): the configuration types (`SegmentIds`, `QKVLayout`,
`BlockSizes`) as in JAX 0.10.2, and the kernel factories as stand-ins that raise
NotImplementedError (the kernels are TPU Mosaic programs; stagecraft runs Pallas only in
interpret mode)."""
from __future__ import annotations

import dataclasses
import enum
from typing import Any, NamedTuple

import numpy as np

from stagecraft.experimental.pallas.helpers import not_implemented

__all__ = ["SegmentIds", "QKVLayout", "BlockSizes", "DEFAULT_MASK_VALUE", "NUM_LANES",
           "NUM_SUBLANES", "make_splash_mha", "make_splash_mqa",
           "make_splash_mha_single_device", "make_splash_mqa_single_device",
           "make_masked_mha_reference", "make_masked_mqa_reference", "from_head_minor"]

# A large negative logit for masked-out positions: 70% of float32's largest value.
DEFAULT_MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)
NUM_LANES = 128
NUM_SUBLANES = 8


class SegmentIds(NamedTuple):
  """Segment ids of the query (`q`, int array [q_seq_len]) and key/value (`kv`, int array
  [kv_seq_len]) sequences: a query attends only to keys with the same id."""
  q: Any
  kv: Any


class QKVLayout(enum.IntEnum):
  """Physical layout of q/k/v: head dimension last (`HEAD_DIM_MINOR`, [..., seq, head]) or
  sequence last (`SEQ_MINOR`, [..., head, seq])."""
  HEAD_DIM_MINOR = enum.auto()
  SEQ_MINOR = enum.auto()


def from_head_minor(vals: tuple, layout: QKVLayout) -> tuple:
  """`vals` (a shape tuple given head-minor) reordered for `layout`: unchanged for
  HEAD_DIM_MINOR, the last two entries swapped for SEQ_MINOR."""
  if layout == QKVLayout.HEAD_DIM_MINOR:
    return vals
  return (*vals[:-2], vals[-1], vals[-2])


@dataclasses.dataclass(frozen=True, slots=True)
class BlockSizes:
  """Tile sizes of the Splash kernels (ints; the `*_compute` sizes default to their
  loading sizes). Raises ValueError when dq block sizes are given with the fused backward
  kernel, as JAX does."""
  block_q: int
  block_kv: int
  block_kv_compute: int | None = None
  block_q_dkv: int | None = None
  block_kv_dkv: int | None = None
  block_kv_dkv_compute: int | None = None
  block_q_dq: int | None = None
  block_kv_dq: int | None = None
  use_fused_bwd_kernel: bool = False
  q_layout: QKVLayout = QKVLayout.HEAD_DIM_MINOR
  k_layout: QKVLayout = QKVLayout.HEAD_DIM_MINOR
  v_layout: QKVLayout = QKVLayout.HEAD_DIM_MINOR

  def __post_init__(self):
    if self.block_kv_compute is None:
      object.__setattr__(self, "block_kv_compute", self.block_kv)
    if self.block_kv_dkv_compute is None:
      object.__setattr__(self, "block_kv_dkv_compute", self.block_kv_dkv)
    if self.use_fused_bwd_kernel and (self.block_q_dq is not None
                                      or self.block_kv_dq is not None):
      raise ValueError("Block sizes for dq kernel are not needed with a fused kernel.")

  @property
  def has_backward_blocks(self) -> bool:
    """Whether every block size the backward kernels need is set."""
    need = [self.block_q_dkv, self.block_kv_dkv, self.block_kv_dkv_compute]
    if not self.use_fused_bwd_kernel:
      need += [self.block_q_dq, self.block_kv_dq]
    return all(b is not None for b in need)

  @classmethod
  def get_default(cls) -> "BlockSizes":
    """All forward and backward block sizes 128."""
    return cls(block_q=128, block_kv=128, block_kv_compute=128, block_q_dkv=128,
               block_kv_dkv=128, block_kv_dkv_compute=128, block_q_dq=128,
               block_kv_dq=128)


_P = "jax.experimental.pallas.ops.tpu.splash_attention."
_TPU = "a TPU (the Splash attention Mosaic kernel)"
make_splash_mha = not_implemented(_P + "make_splash_mha", _TPU)
make_splash_mqa = not_implemented(_P + "make_splash_mqa", _TPU)
make_splash_mha_single_device = not_implemented(_P + "make_splash_mha_single_device", _TPU)
make_splash_mqa_single_device = not_implemented(_P + "make_splash_mqa_single_device", _TPU)
make_masked_mha_reference = not_implemented(_P + "make_masked_mha_reference",
                                            "the Splash reference kernel (not provided)")
make_masked_mqa_reference = not_implemented(_P + "make_masked_mqa_reference",
                                            "the Splash reference kernel (not provided)")
