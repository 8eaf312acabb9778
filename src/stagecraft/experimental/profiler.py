"""`stagecraft.experimental.profiler`: JAX 0.10.2's `jax.experimental.profiler`."""
from __future__ import annotations

from jaxlib import _profiler

__all__ = ["get_profiled_instructions_proto"]


def get_profiled_instructions_proto(tensorboard_dir: str) -> bytes:
  """The serialized `ProfiledInstructionsProto` (XLA's tsl/profiler protobuf) of the profile
  under `tensorboard_dir` (``<log_dir>/plugin/profile/<run_dir>/``), converted from its xplane
  by the XLA runtime's profiler (jaxlib `_profiler`, the runtime layer, as `stagecraft.profiler`).

  Returns bytes, empty unless the profile has GPU kernels (so on CPU it is ``b''``).
  Raises jaxlib's `JaxRuntimeError` (``NOT_FOUND: <dir>; No such file or directory``) when
  the directory does not exist.
  """
  return _profiler.get_profiled_instructions_proto(tensorboard_dir)
