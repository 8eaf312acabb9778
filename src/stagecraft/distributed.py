"""Several processes as one computation: a wrapper of the PJRT distributed runtime.

`initialize` starts the runtime's coordination service (in process 0) and client (in every
process), and makes the CPU backend exchange collectives over gloo (TCP), so that
`stagecraft.devices()` lists the devices of all processes and `pmap` maps over all of them:
each process passes its local part of a mapped argument (leading axis = its local device
count) and gets back results whose `addressable_shards` are its local pieces. This is the
runtime's own distributed service (DESIGN.md: wrap it, don't write one); it must start
before the backend does, i.e. before the first computation of the process. It is the one
part of the runtime that imports the real jax (on `initialize` only), whose backend
registry then makes the clients with the service's collectives.
"""
from __future__ import annotations

from typing import Sequence

from stagecraft.runtime import client
from stagecraft.runtime.jax_runtime import jax_module

__all__ = ["initialize", "shutdown", "is_initialized"]

_state = {"initialized": False}


def is_initialized() -> bool:
  """Whether `initialize` has run in this process."""
  return _state["initialized"]


def initialize(coordinator_address: str, num_processes: int, process_id: int,
               local_device_ids: int | Sequence[int] | None = None, *,
               initialization_timeout: int = 60, heartbeat_timeout_seconds: int = 20) -> None:
  """Joins this process to a distributed run.

  Args:
    coordinator_address: `host:port` of process 0's coordination service (e.g.
      `"127.0.0.1:12345"`); every process passes the same address.
    num_processes: the number of processes (>= 1).
    process_id: this process's index in `[0, num_processes)`.
    local_device_ids: the local devices this process uses (default: all).
    initialization_timeout: seconds to wait for every process to join; a process that
      never joins makes the others raise instead of waiting forever.
    heartbeat_timeout_seconds: seconds after which a process that stopped answering is
      declared dead (the others then fail instead of hanging).

  Raises:
    TypeError / ValueError: for arguments of the wrong type or out of range (naming them).
    RuntimeError: if called twice, after the backend started (call it first thing), or
      when the other processes do not join in time (the message names the address).
  """
  if not isinstance(coordinator_address, str) or ":" not in coordinator_address:
    raise ValueError(f"distributed.initialize: coordinator_address must be 'host:port', got "
                     f"{coordinator_address!r}.")
  for name, v in (("num_processes", num_processes), ("process_id", process_id)):
    if not isinstance(v, int) or isinstance(v, bool):
      raise TypeError(f"distributed.initialize: {name} must be an int, got {v!r}.")
  if num_processes < 1:
    raise ValueError(f"distributed.initialize: num_processes must be >= 1, got "
                     f"{num_processes}.")
  if not 0 <= process_id < num_processes:
    raise ValueError(f"distributed.initialize: process_id must be in [0, {num_processes}), "
                     f"got {process_id}.")
  if _state["initialized"]:
    raise RuntimeError("distributed.initialize should only be called once.")
  if client.get_backend.cache_info().currsize:
    raise RuntimeError("distributed.initialize must be called before any computation (the "
                       "backend has already started in this process). Call it first, right "
                       "after the imports.")
  # NB: the distributed service (coordinator, gloo collectives of the CPU client) is JAX's:
  # from here on the runtime's clients come from JAX's backend registry, which wires them.
  jax = jax_module("jax")
  client.use_jax_backends("distributed.initialize")
  try:
    jax.distributed.initialize(coordinator_address, num_processes, process_id,
                               local_device_ids, cluster_detection_method="deactivate",
                               initialization_timeout=initialization_timeout,
                               heartbeat_timeout_seconds=heartbeat_timeout_seconds)
  except Exception as e:
    raise RuntimeError(f"distributed.initialize: process {process_id} of {num_processes} could "
                       f"not join the run coordinated at {coordinator_address} within "
                       f"{initialization_timeout} s: {e}") from e
  _state["initialized"] = True


def shutdown() -> None:
  """Leaves the distributed run (waits for the other processes to leave too)."""
  if _state["initialized"]:
    jax = jax_module("jax")
    jax.distributed.shutdown()
    _state["initialized"] = False
