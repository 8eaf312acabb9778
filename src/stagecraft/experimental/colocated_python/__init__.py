"""`stagecraft.experimental.colocated_python`: JAX's colocated Python (run Python code on the
CPU host next to the accelerator devices that hold a function's arguments).

stagecraft runs in one process whose devices are those of its runtime: the colocated host
is this process. `colocated_cpu_devices` finds the CPU devices as JAX does; a function made
by `colocated_python` (or a class by `colocated_python_class`) runs here, in this process,
when called, with the values JAX's gives on a CPU backend. Libraries import the module
(orbax's checkpointing does, at import) and only use it on multi-host accelerator setups.

  >>> import stagecraft as sc, stagecraft.numpy as jnp
  >>> f = colocated_python(lambda x: x + 1)
  >>> f(jnp.ones(2))
  Array([2., 2.], dtype=float32)
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

from stagecraft.runtime import client
from stagecraft.sharding import Mesh

__all__ = ["colocated_cpu_devices", "colocated_python", "colocated_python_class"]


def colocated_cpu_devices(devices_or_mesh: Any) -> Any:
  """The CPU devices colocated with `devices_or_mesh` (JAX's `colocated_cpu_devices`).

  Args:
    devices_or_mesh: a sequence of devices, or a `Mesh`.

  Returns:
    For devices, a list of as many CPU devices, in order: for each device, the next unused
    CPU device of its process (JAX's assignment on backends without colocation ids, the
    CPU backend's included). For a mesh, a `Mesh` of the same shape, axis names and axis
    types over those CPU devices.

  Raises:
    ValueError: a process with fewer CPU devices than devices asked for (JAX's message).
  """
  if isinstance(devices_or_mesh, Mesh):
    mesh = devices_or_mesh
    flat = colocated_cpu_devices(tuple(mesh.devices.flat))
    return Mesh(np.array(flat, dtype=object).reshape(mesh.devices.shape), mesh.axis_names,
                axis_types=mesh.axis_types)
  devices = tuple(devices_or_mesh)
  if not devices:
    return []
  cpus = (client.devices() if devices[0].platform == "cpu"
          else client.devices(backend="cpu"))
  free: dict[int, list] = {}
  for d in cpus:
    free.setdefault(d.process_index, []).append(d)
  out = []
  for d in devices:
    avail = free.get(d.process_index, [])
    if not avail:
      raise ValueError(f"Process {d.process_index} does not have enough local CPU devices")
    out.append(avail.pop(0))
  return out


class _Colocated:
  """A colocated Python callable: calls `fun` in this process (see the module docstring)."""

  def __init__(self, fun: Callable[..., Any], spec: dict):
    self._fun = fun
    self._spec = spec
    functools.update_wrapper(self, fun)

  def specialize(self, in_specs: Any = None, out_specs_fn: Callable | None = None,
                 devices: Sequence[Any] | None = None) -> "_Colocated":
    """The callable with its input specs, output specs function or devices given (JAX
    uses them to run without example arguments); here they are recorded and the call is
    the same."""
    spec = dict(self._spec)
    for k, v in (("in_specs", in_specs), ("out_specs_fn", out_specs_fn),
                 ("devices", devices)):
      if v is not None:
        spec[k] = v
    return _Colocated(self._fun, spec)

  def __call__(self, *args, **kwargs):
    return self._fun(*args, **kwargs)


def colocated_python(fun: Callable[..., Any]) -> Callable[..., Any]:
  """`fun` as a colocated Python callable (JAX's `colocated_python`): calling it runs `fun`
  on the host of its arguments' devices, which in stagecraft is this process; `specialize`
  is accepted as JAX's.

  Raises:
    TypeError: if `fun` is not callable.
  """
  if not callable(fun):
    raise TypeError(f"colocated_python: expected a callable, got {fun!r}")
  return _Colocated(fun, {})


def colocated_python_class(cls: type) -> type:
  """`cls` for colocated Python objects (JAX's `colocated_python_class`): its methods run on
  the host of their arguments' devices, which in stagecraft is this process, so the class
  itself serves (its instances are made when constructed, not at their first method call).

  Raises:
    TypeError: if `cls` is not a class.
  """
  if not isinstance(cls, type):
    raise TypeError(f"colocated_python_class: expected a class, got {cls!r}")
  return cls
