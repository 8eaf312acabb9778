"""The PJRT client and devices (jax/jaxlib used only as the XLA runtime; DESIGN.md)."""
from __future__ import annotations

import functools
import os
import warnings
from typing import Any

from jax.extend import backend as xb
from jaxlib import xla_client as xc

from stagecraft.runtime.jax_runtime import jax_module

__all__ = ["configure", "check_not_forked", "get_backend", "devices", "local_devices", "device_count", "local_device_count",
           "default_device", "process_index", "process_count", "single_device_sharding",
           "device_list", "compile_options", "Device", "default_backend", "process_indices",
           "host_id", "host_count", "host_ids"]

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
      _first_local_device.cache_clear()
    _platforms[0] = value or None
  elif option == "default_device":
    _default_device[0] = value
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
def _first_local_device():
  return local_devices()[0]


#: The device `config.update("jax_default_device", d)` (or `with default_device(d):`) set:
#: a Device, a platform name, or None for the default backend's first device.
_default_device: list = [None]


def default_device():
  """The device uncommitted computations and transfers go to: the `jax_default_device`
  option's device (a platform name gives that platform's first local device), else the
  default backend's first local device."""
  d = _default_device[0]
  if d is None:
    return _first_local_device()
  if isinstance(d, str):
    return local_devices(backend=d)[0]
  return d


default_device.cache_clear = _first_local_device.cache_clear


def default_device_option():
  """The `jax_default_device` option as set (a Device, a platform name or None): part of
  the eager caches' keys, whose executables are compiled for the default device."""
  return _default_device[0]


def process_index() -> int:
  """The index of this process among the processes of a distributed run (0 alone)."""
  return get_backend().process_index()


def process_count() -> int:
  """The number of processes of a distributed run (1 alone)."""
  return max(d.process_index for d in devices()) + 1


@functools.lru_cache(maxsize=None)
def single_device_sharding(device):
  jax = jax_module("jax")  # the runtime's sharding objects, needed by PJRT transfers
  return jax.sharding.SingleDeviceSharding(device)


@functools.lru_cache(maxsize=None)
def device_list(devs: tuple) -> Any:
  return xc.DeviceList(devs)


def compile_options(num_replicas: int = 1, num_partitions: int = 1, device_assignment=None):
  """XLA compile options for `num_replicas` x `num_partitions` devices."""
  return xb.get_compile_options(num_replicas=num_replicas, num_partitions=num_partitions,
                                device_assignment=device_assignment)


Device = xc.Device
"""The runtime's device class (`stagecraft.devices()[0]` is one): for `isinstance` checks."""


def default_backend() -> str:
  """The platform name of the default backend: `'cpu'`, `'gpu'` (CUDA or ROCm) or `'tpu'`."""
  return get_backend().platform


def _backend_devices(backend) -> list:
  if backend is not None and not isinstance(backend, str):   # a client object, as JAX takes
    return list(backend.devices())
  return devices(backend)


def process_indices(backend: str | Any | None = None) -> list[int]:
  """The indices of the processes of a distributed run, `[0, ..., process_count() - 1]`.

  Args:
    backend: a backend name (`'cpu'`, `'gpu'`), a client, or None for the default backend.
  """
  return list(range(max(d.process_index for d in _backend_devices(backend)) + 1))


def _renamed(old: str, new: str) -> None:
  warnings.warn(f"jax.{old} has been renamed to jax.{new}. This alias will eventually be "
                f"removed; please update your code.", UserWarning, stacklevel=3)


def host_id(backend: str | Any | None = None) -> int:
  """Deprecated alias of `process_index` (warns, as JAX does)."""
  _renamed("host_id", "process_index")
  if backend is not None and not isinstance(backend, str):
    return backend.process_index()
  return get_backend(backend).process_index()


def host_count(backend: str | Any | None = None) -> int:
  """Deprecated alias of `process_count` (warns, as JAX does)."""
  _renamed("host_count", "process_count")
  return len(process_indices(backend))


def host_ids(backend: str | Any | None = None) -> list[int]:
  """Deprecated alias of `process_indices` (warns, as JAX does)."""
  _renamed("host_ids", "process_indices")
  return process_indices(backend)
