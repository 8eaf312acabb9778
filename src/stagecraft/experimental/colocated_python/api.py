"""The entry points of JAX's colocated-Python API; stagecraft runs none (see the package)."""
from __future__ import annotations

from typing import Any, Callable

_WHY = ("colocated Python needs a runtime with colocated CPU devices (Pathways/IFRT); "
        "stagecraft runs on single-process PJRT and has none.")


def colocated_cpu_devices(devices_or_mesh: Any) -> Any:
  """JAX's: the CPU devices colocated with `devices_or_mesh`.

  Raises:
    NotImplementedError: always (stagecraft has no colocated CPU devices).
  """
  raise NotImplementedError(f"colocated_cpu_devices: {_WHY}")


def colocated_python(fun: Callable[..., Any]) -> Any:
  """JAX's decorator running `fun` on colocated CPU devices.

  Raises:
    NotImplementedError: always (stagecraft has no colocated CPU devices).
  """
  raise NotImplementedError(f"colocated_python: {_WHY}")


def colocated_python_class(cls: type) -> Any:
  """JAX's class decorator for objects living on colocated CPU devices.

  Raises:
    NotImplementedError: always (stagecraft has no colocated CPU devices).
  """
  raise NotImplementedError(f"colocated_python_class: {_WHY}")
