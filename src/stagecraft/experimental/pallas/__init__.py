"""`stagecraft.experimental.pallas`: JAX 0.10.2's `jax.experimental.pallas` (Pallas kernels)
in interpret mode. `pallas_call(..., interpret=True)` runs a kernel over its grid as JAX's
interpreter does (see `stagecraft.experimental.pallas.core`); without `interpret` it raises
JAX's CPU error. The TPU/GPU-only operations (semaphores, `core_map`, `kernel`, ...) raise
NotImplementedError. Submodules: `tpu`, `triton`, `mosaic_gpu` (their compiler params and
the operations that run in interpret mode).
"""
import importlib as _importlib

from stagecraft.experimental.pallas.core import (
    Blocked as Blocked, BlockSpec as BlockSpec, BoundedSlice as BoundedSlice,
    Buffered as Buffered, CompilerParams as CompilerParams, CostEstimate as CostEstimate,
    Element as Element, GridSpec as GridSpec, Indirect as Indirect, MemoryRef as MemoryRef,
    MemorySpace as MemorySpace, RevisitMode as RevisitMode, Squeezed as Squeezed,
    cdiv as cdiv, no_block_spec as no_block_spec, num_programs as num_programs,
    pallas_call as pallas_call, pallas_call_p as pallas_call_p, program_id as program_id,
    squeezed as squeezed)
from stagecraft.experimental.pallas.helpers import (
    align_to as align_to, broadcast_to as broadcast_to, debug_print as debug_print,
    delay as delay, empty as empty, empty_like as empty_like,
    empty_ref_like as empty_ref_like, estimate_cost as estimate_cost, loop as loop,
    multiple_of as multiple_of, next_power_of_2 as next_power_of_2,
    not_implemented as _not_implemented, reciprocal as reciprocal,
    run_scoped as run_scoped, run_state as run_state,
    strides_from_shape as strides_from_shape, when as when, with_scoped as with_scoped)
from stagecraft.indexing import Slice as Slice, ds as ds, dslice as dslice
from stagecraft.config import State as _State

BlockDim = Blocked | Element | Squeezed | BoundedSlice | Indirect
ANY = MemorySpace.ANY
HOST = MemorySpace.HOST

_P = "jax.experimental.pallas."
core_map = _not_implemented(_P + "core_map", "a TPU/GPU core mesh")
kernel = _not_implemented(_P + "kernel", "a TPU/GPU core mesh (pl.kernel)")
lower_as_mlir = _not_implemented(_P + "lower_as_mlir", "Mosaic/Triton lowering")
pallas_export_experimental = _not_implemented(_P + "pallas_export_experimental",
                                              "exporting Mosaic kernels")
get_global = _not_implemented(_P + "get_global", "TPU/GPU global scratch buffers")
select_ref = _not_implemented(_P + "select_ref", "dynamic ref selection (TPU/GPU)")
semaphore_read = _not_implemented(_P + "semaphore_read", "TPU/GPU semaphores")
semaphore_signal = _not_implemented(_P + "semaphore_signal", "TPU/GPU semaphores")
semaphore_wait = _not_implemented(_P + "semaphore_wait", "TPU/GPU semaphores")
debug_check = _not_implemented(_P + "debug_check", "Pallas debug checks")
enable_debug_checks = _State("pallas_enable_debug_checks", True)
enable_poison_buffers = _State("pallas_poison_buffers", True)


class semaphore:
  """The dtype of TPU/GPU semaphores (a marker: stagecraft has no semaphores)."""


class DeviceIdType:
  """How a remote device is named (MESH or LOGICAL): TPU/GPU communication, a marker."""
  MESH = "mesh"
  LOGICAL = "logical"


def __getattr__(name):
  if name == "dot":   # deprecated in JAX 0.10.2: moved to pallas.triton
    import warnings
    warnings.warn("jax.experimental.pallas.dot was moved to jax.experimental.pallas.triton. "
                  "Accessing it via jax.experimental.pallas is deprecated. You can use "
                  "jax.numpy.dot, jax.numpy.einsum or the @ operator instead in a TPU or "
                  "MGPU kernel.", DeprecationWarning, stacklevel=2)
    return _importlib.import_module(f"{__name__}.triton").dot
  if name in ("tpu", "triton", "mosaic_gpu"):
    return _importlib.import_module(f"{__name__}.{name}")
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
