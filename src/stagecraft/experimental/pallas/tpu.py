"""`jax.experimental.pallas.tpu` (`pltpu`) for interpret mode: the TPU compiler params,
memory spaces (`pltpu.VMEM(shape, dtype)` scratch buffers), `PrefetchScalarGridSpec`, the
interpret-mode switches, and the TPU operations that have a meaning on arrays and refs
(`roll`, `sync_copy`, and DMA copies done at once: `make_async_copy(...).start()`
copies, `.wait()` does nothing). The other TPU-only names (semaphores, remote DMAs, PRNG,
pipelines, chip info, ...) are functions raising NotImplementedError naming what they need.

Layer 8.
"""
from __future__ import annotations

import contextlib
import dataclasses
import enum
from typing import Any, Mapping, Sequence

import numpy as np

from stagecraft.core import ShapedArray
from stagecraft.experimental.pallas import core as pl_core
from stagecraft.experimental.pallas.core import (CompilerParams as _Base, GridSpec, MemoryRef,
                                                 no_block_spec)
from stagecraft.experimental.pallas.helpers import not_implemented
from stagecraft.numpy import indexing as np_indexing, lax_numpy, manipulation

__all__ = ["ANY", "ARBITRARY", "CMEM", "CORE_PARALLEL", "CompilerParams",
           "GridDimensionSemantics", "HBM", "InterpretParams", "MemorySpace", "PARALLEL",
           "PrefetchScalarGridSpec", "SEMAPHORE", "SMEM", "SUBCORE_PARALLEL", "SemaphoreType",
           "VMEM", "VMEM_SHARED", "async_copy", "force_tpu_interpret_mode", "is_tpu_device",
           "make_async_copy", "reset_tpu_interpret_mode_state", "roll",
           "set_tpu_interpret_mode", "sync_copy"]


class GridDimensionSemantics(enum.Enum):
  """Whether a grid axis may run in parallel (a hint; interpret mode runs the grid in
  order)."""
  PARALLEL = "parallel"
  CORE_PARALLEL = "core_parallel"
  SUBCORE_PARALLEL = "subcore_parallel"
  ARBITRARY = "arbitrary"


PARALLEL = GridDimensionSemantics.PARALLEL
CORE_PARALLEL = GridDimensionSemantics.CORE_PARALLEL
SUBCORE_PARALLEL = GridDimensionSemantics.SUBCORE_PARALLEL
ARBITRARY = GridDimensionSemantics.ARBITRARY


class SideEffectType(enum.Enum):
  """Whether a TPU kernel has side effects (kept in the compiler params)."""
  PURE = "pure"
  DATAFLOW_SIDE_EFFECTING = "dataflow_side_effecting"
  SIDE_EFFECTING = "side_effecting"


@dataclasses.dataclass(frozen=True, init=False)
class CompilerParams(_Base):
  """Mosaic TPU compiler parameters (JAX's fields; interpret mode ignores them)."""
  BACKEND = "mosaic_tpu"
  dimension_semantics: tuple | None = None
  allow_input_fusion: tuple | None = None
  vmem_limit_bytes: int | None = None
  collective_id: int | None = None
  has_side_effects: Any = False
  flags: Mapping[str, Any] | None = None
  internal_scratch_in_bytes: int | None = None
  serialization_format: int = 1
  disable_bounds_checks: bool = False
  disable_semaphore_checks: bool = False
  skip_device_barrier: bool = False
  allow_collective_id_without_custom_barrier: bool = False
  shape_invariant_numerics: bool = True
  use_tc_tiling_on_sc: bool | None = None
  needs_layout_passes: bool = True
  fuse_transposed_lhs_in_matmul: bool = False

  def __init__(self, dimension_semantics: Sequence[Any] | None = None,
               allow_input_fusion: Sequence[bool] | None = None,
               vmem_limit_bytes: int | None = None, collective_id: int | None = None,
               has_side_effects: Any = False, flags: Mapping[str, Any] | None = None,
               internal_scratch_in_bytes: int | None = None, serialization_format: int = 1,
               disable_bounds_checks: bool = False, disable_semaphore_checks: bool = False,
               skip_device_barrier: bool = False,
               allow_collective_id_without_custom_barrier: bool = False,
               shape_invariant_numerics: bool = True, use_tc_tiling_on_sc: bool | None = None,
               needs_layout_passes: bool = True, fuse_transposed_lhs_in_matmul: bool = False):
    values = dict(locals())
    del values["self"]
    values["dimension_semantics"] = (None if dimension_semantics is None
                                     else tuple(dimension_semantics))
    values["allow_input_fusion"] = (None if allow_input_fusion is None
                                    else tuple(allow_input_fusion))
    values["flags"] = None if flags is None else dict(flags)
    for k, v in values.items():
      object.__setattr__(self, k, v)

  replace = dataclasses.replace


class MemorySpace(enum.Enum):
  """TPU memory spaces; `MemorySpace.VMEM(shape, dtype)` is a scratch buffer's type (a
  `MemoryRef`). In interpret mode every space is ordinary device memory."""
  VMEM = "vmem"
  VMEM_SHARED = "vmem_shared"
  SMEM = "smem"
  CMEM = "cmem"
  SEMAPHORE = "semaphore_mem"
  HBM = "hbm"

  def __str__(self) -> str:
    return self.value

  def __repr__(self) -> str:
    return self.name

  def from_type(self, ty: Any) -> MemoryRef:
    return MemoryRef(ty, memory_space=self)

  def __call__(self, shape: Sequence[int], dtype: Any) -> MemoryRef:
    return self.from_type(ShapedArray(tuple(shape), np.dtype(dtype)))

  def like(self, x: Any) -> MemoryRef:
    return self(tuple(x.shape), x.dtype)


VMEM = MemorySpace.VMEM
VMEM_SHARED = MemorySpace.VMEM_SHARED
SMEM = MemorySpace.SMEM
CMEM = MemorySpace.CMEM
HBM = MemorySpace.HBM
SEMAPHORE = MemorySpace.SEMAPHORE
ANY = pl_core.MemorySpace.ANY


class SemaphoreType(enum.Enum):
  """TPU semaphore kinds; `SemaphoreType.DMA((2,))` is a scratch semaphore array (an int32
  buffer in interpret mode: DMAs complete at once, so waits never block)."""
  REGULAR = "regular"
  DMA = "dma"
  BARRIER = "barrier"

  def __call__(self, shape: tuple[int, ...]) -> MemoryRef:
    return MemoryRef(ShapedArray(tuple(shape), np.dtype(np.int32)), MemorySpace.SEMAPHORE)

  def get_array_aval(self) -> ShapedArray:
    return self(()).get_array_aval()

  def get_ref_aval(self):
    return self(()).get_ref_aval()


@dataclasses.dataclass(init=False, kw_only=True)
class PrefetchScalarGridSpec(GridSpec):
  """A GridSpec whose first `num_scalar_prefetch` operands are scalar-prefetch arrays:
  passed whole, as refs, to every index map (after the program ids) and to the kernel
  (before the other refs)."""
  num_scalar_prefetch: int

  def __init__(self, num_scalar_prefetch: int, grid: Any = (),
               in_specs: Any = no_block_spec, out_specs: Any = no_block_spec,
               scratch_shapes: Any = ()):
    super().__init__(grid, in_specs, out_specs, scratch_shapes)
    self.num_scalar_prefetch = num_scalar_prefetch


@dataclasses.dataclass(frozen=True, kw_only=True)
class InterpretParams:
  """TPU interpret mode's parameters. stagecraft runs a pallas_call given
  `interpret=InterpretParams(...)` with its one interpreter (as `interpret=True`): the
  simulation of DMAs, semaphores and races these fields control is not modelled."""
  dma_execution_mode: str = "on_wait"
  detect_races: bool = False
  skip_floating_point_ops: bool = False
  uninitialized_memory: str = "nan"
  num_cores_or_threads_per_device: int = 1
  vector_clock_size: int | None = None
  random_seed: int | None = None
  grid_point_recorder: Any = None
  allow_hbm_allocation_in_run_scoped: bool = False
  out_of_bounds_reads: str = "raise"


@contextlib.contextmanager
def force_tpu_interpret_mode(params: InterpretParams = InterpretParams()):
  """Runs every pallas_call in its block in interpret mode."""
  saved = pl_core.force_interpret(params)
  try:
    yield
  finally:
    pl_core.force_interpret(saved)


def set_tpu_interpret_mode(params: InterpretParams = InterpretParams()) -> None:
  """Runs every later pallas_call in interpret mode."""
  pl_core.force_interpret(params)


def reset_tpu_interpret_mode_state() -> None:
  """Resets the simulated TPU state (none in stagecraft's interpreter)."""


def is_tpu_device() -> bool:
  """Whether the default device is a TPU: False (stagecraft runs on CPU)."""
  return False


def roll(x: Any, shift: Any, axis: int, *, stride: int | None = None,
         stride_axis: int | None = None) -> Any:
  """`jnp.roll(x, shift, axis)` (TPU's `roll`; a `stride` rolls each slice along
  `stride_axis` by `shift + i * stride`).

  Raises:
    ValueError: a negative shift or stride (JAX's messages).
  """
  if isinstance(shift, int) and shift < 0:
    raise ValueError("shift must be non-negative.")
  if stride is None:
    return lax_numpy.roll(x, shift, axis)
  if stride < 0:
    raise ValueError("stride must be non-negative.")
  parts = [lax_numpy.roll(np_indexing.take(x, i, axis=stride_axis), shift + i * stride,
                             axis if axis < stride_axis else axis - 1)
           for i in range(x.shape[stride_axis])]
  return manipulation.stack(parts, axis=stride_axis)


def sync_copy(src_ref: Any, dst_ref: Any, *, add: bool = False) -> None:
  """Copies `src_ref`'s value into `dst_ref` (adds it with `add=True`)."""
  v = src_ref[...]
  dst_ref[...] = dst_ref[...] + v if add else v


class _AsyncCopy:
  """A DMA done at `start()` (interpret mode: at once); `wait()` does nothing."""

  def __init__(self, src_ref, dst_ref, add=False):
    self.src_ref, self.dst_ref, self.add = src_ref, dst_ref, add

  def start(self, priority: int = 0) -> None:
    sync_copy(self.src_ref, self.dst_ref, add=self.add)

  def wait(self) -> None:
    pass

  def wait_recv(self) -> None:
    pass

  def wait_send(self) -> None:
    pass


def make_async_copy(src_ref: Any, dst_ref: Any, sem: Any, *, add: bool = False) -> _AsyncCopy:
  """A copy descriptor from `src_ref` to `dst_ref` (`.start()`, `.wait()`); the semaphore
  is not used (the copy completes at `start()`)."""
  return _AsyncCopy(src_ref, dst_ref, add)


def async_copy(src_ref: Any, dst_ref: Any, sem: Any, *, priority: int = 0,
               add: bool = False) -> _AsyncCopy:
  """Starts (and, in interpret mode, completes) a copy; returns its descriptor."""
  copy = make_async_copy(src_ref, dst_ref, sem, add=add)
  copy.start(priority)
  return copy


_TPU_ONLY = {
    "einshape": "Mosaic's einshape", "core": "TPU core internals",
    "CoreType": "TPU core meshes", "create_tensorcore_mesh": "TPU core meshes",
    "dma_semaphore": "TPU semaphores", "core_barrier": "TPU core meshes",
    "run_on_first_core": "TPU core meshes", "LoweringException": "Mosaic lowering",
    "BufferedRef": "TPU pipelines", "BufferedRefBase": "TPU pipelines",
    "BufferType": "TPU pipelines", "emit_pipeline": "TPU pipelines (emit_pipeline)",
    "emit_pipeline_with_allocations": "TPU pipelines (emit_pipeline)",
    "async_remote_copy": "remote DMAs between TPU devices", "bitcast": "TPU bitcasts",
    "get_barrier_semaphore": "TPU semaphores", "load": "TPU masked loads",
    "store": "TPU masked stores", "make_async_remote_copy": "remote DMAs between TPU devices",
    "matmul_push_rhs": "the TPU MXU", "matmul_acc_lhs": "the TPU MXU",
    "matmul_pop": "the TPU MXU", "pack_elementwise": "TPU packing",
    "unpack_elementwise": "TPU packing", "prng_random_bits": "the TPU hardware PRNG",
    "prng_seed": "the TPU hardware PRNG", "stochastic_round": "the TPU hardware PRNG",
    "touch": "TPU memory", "trace_value": "TPU tracing",
    "with_memory_space_constraint": "TPU memory spaces", "sample_block": "the TPU PRNG",
    "stateful_bernoulli": "the TPU PRNG", "stateful_bits": "the TPU PRNG",
    "stateful_normal": "the TPU PRNG", "stateful_uniform": "the TPU PRNG",
    "to_pallas_key": "the TPU PRNG", "ChipVersion": "TPU chip information",
    "get_tpu_info": "TPU chip information", "get_tpu_info_for_chip": "TPU chip information",
    "Tiling": "TPU tilings", "TpuInfo": "TPU chip information",
    "semaphore": "TPU semaphores", "semaphore_read": "TPU semaphores",
    "semaphore_signal": "TPU semaphores", "semaphore_wait": "TPU semaphores",
    "DeviceIdType": "TPU remote devices",
}


def __getattr__(name):
  if name in _TPU_ONLY:
    return not_implemented(f"jax.experimental.pallas.tpu.{name}", _TPU_ONLY[name])
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
