"""The PJRT client and devices (jax/jaxlib used only as the XLA runtime; DESIGN.md)."""
from __future__ import annotations

import functools
import os
from typing import Any

from jax.extend import backend as xb
from jaxlib import xla_client as xc

__all__ = ["configure", "check_not_forked", "get_backend", "devices", "local_devices", "device_count", "local_device_count",
           "default_device", "process_index", "process_count", "single_device_sharding",
           "device_list", "compile_options"]

_KNOWN_BACKENDS = ("cpu", "cuda", "gpu", "rocm", "tpu")


@functools.lru_cache(maxsize=None)
def get_backend(backend: str | None = None):
  """The PJRT client for `backend` ('cpu', 'gpu'/'cuda'; None: the default one).

  Raises:
    RuntimeError: if the backend is not available (the message lists those that are).
  """
  if backend is not None and not isinstance(backend, str):
    raise TypeError(f"backend must be a string such as 'cpu' or 'gpu', got {backend!r}.")
  check_not_forked()
  if backend is None and _platforms[0]:
    backend = _platforms[0].split(",")[0].strip() or None
  try:
    b = xb.get_backend(backend)
    if _started_in[0] is None:
      _started_in[0] = os.getpid()
    return b
  except RuntimeError as e:
    raise RuntimeError(f"Backend {backend!r} is not available: {e}. Available backends: "
                       f"{sorted(xb.backends())}.") from e


_platforms: list = [None]


def configure(option: str, value) -> None:
  """Applies a runtime option set through `config.update` (called by the config layer):
  `platforms` / `platform_name` pick the default backend; `num_cpu_devices` sets the number
  of CPU devices, which the runtime reads when it starts.

  Raises:
    RuntimeError: for `num_cpu_devices` once the runtime has started (as JAX).
  """
  if option in ("platforms", "platform_name"):
    if _started_in[0] is not None and value and value != _platforms[0]:
      get_backend.cache_clear()
    _platforms[0] = value or None
  elif option == "num_cpu_devices":
    if _started_in[0] is not None:
      raise RuntimeError("jax_num_cpu_devices config should be updated before backends are "
                         "initialized.")
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    if value is not None and value > 0:
      flags.append(f"--xla_force_host_platform_device_count={int(value)}")
    os.environ["XLA_FLAGS"] = " ".join(flags)


# The process the runtime started in: its thread pools do not survive fork(), so a forked
# child that compiles (or starts a backend) would deadlock inside XLA (JAX's too).
_started_in: list = [None]


def check_not_forked() -> None:
  """Raises RuntimeError in a process forked after the runtime started (compiling there
  would deadlock; running executables compiled before the fork and transfers still work);
  does nothing otherwise.

  Raises:
    RuntimeError: naming both processes and the fix.
  """
  pid = _started_in[0]
  if pid is not None and pid != os.getpid():
    raise RuntimeError(
        f"The stagecraft runtime (XLA) was started in process {pid}, and this process "
        f"({os.getpid()}) is a fork of it: XLA's threads do not survive fork(), so compiling "
        f"here would deadlock. Start worker processes with the 'spawn' or "
        f"'forkserver' start method (multiprocessing.get_context('spawn')), or fork before "
        f"the first stagecraft computation.")


def devices(backend: str | None = None) -> list[Any]:
  """All devices of `backend` (default backend when None), in id order."""
  return list(get_backend(backend).devices())


def local_devices(backend: str | None = None) -> list[Any]:
  """The devices of `backend` attached to this process."""
  return list(get_backend(backend).local_devices())


def device_count(backend: str | None = None) -> int:
  """The number of devices of `backend` (all processes)."""
  return len(devices(backend))


def local_device_count(backend: str | None = None) -> int:
  """The number of devices of `backend` attached to this process."""
  return len(local_devices(backend))


@functools.lru_cache(maxsize=None)
def default_device():
  return local_devices()[0]


def process_index() -> int:
  """The index of this process among the processes of a distributed run (0 alone)."""
  return get_backend().process_index()


def process_count() -> int:
  """The number of processes of a distributed run (1 alone)."""
  return max(d.process_index for d in devices()) + 1


@functools.lru_cache(maxsize=None)
def single_device_sharding(device):
  import jax.sharding  # the runtime's sharding objects, needed by PJRT transfers
  return jax.sharding.SingleDeviceSharding(device)


@functools.lru_cache(maxsize=None)
def device_list(devs: tuple) -> Any:
  return xc.DeviceList(devs)


def compile_options(num_replicas: int = 1, num_partitions: int = 1, device_assignment=None):
  """XLA compile options for `num_replicas` x `num_partitions` devices."""
  return xb.get_compile_options(num_replicas=num_replicas, num_partitions=num_partitions,
                                device_assignment=device_assignment)
