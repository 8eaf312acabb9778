"""`stagecraft.experimental.compute_on`: JAX's annotations for where a computation runs
(`compute_on('device_host')` offloads to the host on TPU/GPU).

stagecraft's runtime is the CPU, where the host is the device: the annotations are checked
as JAX checks them and the computations run where they would anyway, with the same values
and jaxprs as JAX's on CPU (whose jaxprs do not record the compute type either).

  >>> import stagecraft as sc, stagecraft.numpy as jnp
  >>> @sc.jit
  ... def f(x):
  ...   with compute_on("device_host"):
  ...     y = x * 2
  ...   return y + 1
  >>> f(jnp.arange(3.0))
  Array([1., 3., 5.], dtype=float32)
"""
from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable

__all__ = ["compute_on", "compute_on2"]

_VALID = ("device_host", "device", "tpu_sparsecore")
_state = threading.local()


def _check(compute_type: Any) -> str:
  if not isinstance(compute_type, str):
    raise TypeError("`compute_on`'s compute_type argument must be a string.")
  if compute_type not in _VALID and not compute_type.startswith("gpu_stream:"):
    raise ValueError(f"Invalid compute type {compute_type}. Current supported values are "
                     f"`device_host`, `device`, `tpu_sparsecore`, and `gpu_stream:#`.")
  return compute_type


def current_compute_type() -> str | None:
  """The compute type of the innermost `compute_on` block on this thread, or None."""
  return getattr(_state, "compute_type", None)


@contextlib.contextmanager
def compute_on(compute_type: str):
  """Marks the computations staged in the block to run on `compute_type`: "device_host",
  "device", "tpu_sparsecore" or "gpu_stream:N" (on stagecraft's CPU runtime they run on the
  CPU, as they would without the block).

  Raises:
    TypeError: `compute_type` is not a string.
    ValueError: it is not one of the values above (JAX's message)."""
  _check(compute_type)
  prev = current_compute_type()
  _state.compute_type = compute_type
  try:
    yield
  finally:
    _state.compute_type = prev


def compute_on2(f: Callable | None = None, *, compute_type: str, out_memory_spaces: Any,
                compiler_options: dict | None = None):
  """`f` with its computation marked to run on `compute_type` and its results placed in
  `out_memory_spaces` (a memory space, or a pytree prefix of `f`'s results, or None); as
  a decorator without `f`. On stagecraft's CPU runtime every memory space is the host's:
  `f` runs as it is.

  Raises:
    TypeError, ValueError: `compute_type` as in `compute_on` (when the result is made)."""
  _check(compute_type)
  if compiler_options is not None and not isinstance(compiler_options, dict):
    raise TypeError(f"compute_on2: compiler_options must be a dict or None, got "
                    f"{type(compiler_options).__name__}.")
  if f is None:
    return functools.partial(compute_on2, compute_type=compute_type,
                             out_memory_spaces=out_memory_spaces,
                             compiler_options=compiler_options)

  @functools.wraps(f)
  def wrapped(*args):
    with compute_on(compute_type):
      return f(*args)
  return wrapped
