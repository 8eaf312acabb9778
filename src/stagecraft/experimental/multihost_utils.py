"""`stagecraft.experimental.multihost_utils`: helpers for programs over several processes, as
JAX's `jax.experimental.multihost_utils`.

With one process each is what JAX does there (host values come back as NumPy arrays). Over
several processes (after `stagecraft.distributed.initialize`) the exchanges run as a `pmap`
over every device of every process, each process contributing through its first local
device: a `psum` broadcasts (`broadcast_one_to_all`, `sync_global_devices`) and an
`all_gather` collects (`process_allgather`, `assert_equal`).

  >>> from stagecraft.experimental import multihost_utils
  >>> multihost_utils.process_allgather({"a": 1.5})["a"].shape   # (processes,)
  (1,)
"""
from __future__ import annotations

import contextlib
import zlib
from typing import Any, Iterator, Sequence

import numpy as np

from stagecraft import api, distributed, pjit, tree_util
from stagecraft.lax import parallel
from stagecraft.lax import spmd as spmd_lax
from stagecraft.runtime import client, spmd
from stagecraft.runtime.array import Array
from stagecraft.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = ["broadcast_one_to_all", "sync_global_devices", "process_allgather", "assert_equal",
           "host_local_array_to_global_array", "global_array_to_host_local_array",
           "reached_preemption_sync_point", "live_devices", "ProcessFailureError"]


def _host(x: Any) -> np.ndarray:
  return np.asarray(x)


def _per_device(x: np.ndarray, contribute: bool) -> np.ndarray:
  """This process's pmap argument: `x` on its first local device (when it contributes),
  zeros elsewhere."""
  n = client.local_device_count()
  out = np.zeros((n, *x.shape), x.dtype)
  if contribute:
    out[0] = x
  return out


def _first_of_each_process() -> list[int]:
  """Positions, in the global device order pmap maps over, of each process's first device."""
  seen, rows = set(), []
  for i, d in enumerate(client.devices()):
    if d.process_index not in seen:
      seen.add(d.process_index)
      rows.append(i)
  return rows


def broadcast_one_to_all(in_tree: Any, is_source: bool | None = None) -> Any:
  """Process `is_source`'s values of `in_tree`, in every process.

  Args:
    in_tree: a pytree of arrays or scalars with the same structure, shapes and dtypes in
      every process.
    is_source: whether this process is the source (default: process 0 is).

  Returns:
    The source's values as NumPy arrays, in `in_tree`'s structure.
  """
  if is_source is None:
    is_source = client.process_index() == 0
  leaves, treedef = tree_util.tree_flatten(in_tree)
  hosts = [_host(x) for x in leaves]
  if client.process_count() == 1:
    return tree_util.tree_unflatten(treedef, hosts)
  summed = api.pmap(lambda *xs: [parallel.psum(x, "i") for x in xs], "i")(
      *[_per_device(x.astype(np.int32) if x.dtype == np.bool_ else x, bool(is_source))
        for x in hosts])
  out = [np.asarray(s.addressable_shards[0].data)[0].astype(h.dtype)
         for s, h in zip(summed, hosts)]
  return tree_util.tree_unflatten(treedef, out)


def process_allgather(in_tree: Any, tiled: bool = False) -> Any:
  """Every process's values of `in_tree`, stacked (or concatenated) in process order.

  Args:
    in_tree: a pytree of arrays or scalars with the same structure, shapes and dtypes in
      every process.
    tiled: concatenate along the first axis instead of stacking along a new leading axis.

  Returns:
    NumPy arrays: each leaf of shape `(process_count, *shape)`, or with `tiled`
    `(process_count * shape[0], *shape[1:])` (scalars stay scalars with one process); a
    leaf that is an Array over the devices of several processes comes back whole, its
    global shape (as in JAX).
  """
  leaves, treedef = tree_util.tree_flatten(in_tree)
  out: list = [None] * len(leaves)
  local = []
  for i, x in enumerate(leaves):
    if _spans_processes(x):
      # NB: as JAX's, an Array over the devices of several processes comes back whole
      # (replicated over its mesh, then read here); `tiled` does not apply to it.
      rep = NamedSharding(x.sharding.mesh, PartitionSpec())
      full = pjit.jit(lambda v: spmd_lax.reshard(v, rep), out_shardings=rep)(x)
      out[i] = np.asarray(full.addressable_shards[0].data)
    else:
      local.append(i)
  hosts = [_host(leaves[i]) for i in local]
  if client.process_count() == 1:
    for i, h in zip(local, hosts):
      out[i] = h if tiled else h[None]
    return tree_util.tree_unflatten(treedef, out)
  if local:
    gathered = api.pmap(lambda *xs: [parallel.all_gather(x, "i") for x in xs], "i")(
        *[_per_device(h, True) for h in hosts])
    rows = _first_of_each_process()
    for i, g in zip(local, gathered):
      full = np.asarray(g.addressable_shards[0].data)[0][rows]
      out[i] = np.concatenate(list(full), axis=0) if tiled and full.ndim > 1 else full
  return tree_util.tree_unflatten(treedef, out)


def _spans_processes(x: Any) -> bool:
  """Whether `x` is an Array with pieces on the devices of other processes."""
  sh = getattr(x, "_sharding", None) if type(x) is Array else None
  me = client.process_index()
  return sh is not None and any(d.process_index != me for d in sh.device_set)


def assert_equal(in_tree: Any, fail_message: str = "") -> None:
  """Raises AssertionError unless `in_tree` has the same values in every process.

  Raises:
    AssertionError: naming `fail_message` and the values that differ.
  """
  gathered = process_allgather(in_tree)
  for g in tree_util.tree_leaves(gathered):
    if not all(np.array_equal(g[0], gi) for gi in g[1:]):
      raise AssertionError(f"{fail_message} Expected: {g[0]}; got: {g}.")


def sync_global_devices(name: str) -> None:
  """Waits until every process reaches the call with the same `name` (a barrier).

  Raises:
    AssertionError: if the processes passed different names.
  """
  h = np.uint32(zlib.crc32(name.encode()))
  assert_equal(h, f"sync_global_devices name mismatch ('{name}')")


def _spec_tree(pspecs: Any, tree: Any) -> list:
  leaves = tree_util.tree_leaves(tree)
  if isinstance(pspecs, PartitionSpec):
    return [pspecs] * len(leaves)
  return tree_util.tree_structure(tree).flatten_up_to(pspecs)


def host_local_array_to_global_array(local_inputs: Any, global_mesh: Mesh,
                                     pspecs: Any) -> Any:
  """Global Arrays laid out by `NamedSharding(global_mesh, spec)` from each process's local
  parts (`make_array_from_process_local_data` per leaf).

  Args:
    local_inputs: a pytree of this process's blocks (arrays).
    global_mesh: the mesh over every process's devices.
    pspecs: a PartitionSpec, or a pytree of them prefixing `local_inputs`.
  """
  leaves, treedef = tree_util.tree_flatten(local_inputs)
  out = [spmd.make_array_from_process_local_data(NamedSharding(global_mesh, s), x)
         for x, s in zip(leaves, _spec_tree(pspecs, local_inputs))]
  return tree_util.tree_unflatten(treedef, out)


def global_array_to_host_local_array(global_inputs: Any, global_mesh: Mesh,
                                     pspecs: Any) -> Any:
  """The inverse of `host_local_array_to_global_array`: each process's blocks of global
  Arrays. With one process a global Array is its own local part (laid out by `pspecs`).

  Raises:
    NotImplementedError: over several processes (use `addressable_shards`).
  """
  if client.process_count() > 1:
    raise NotImplementedError("global_array_to_host_local_array over several processes: "
                              "read each Array's addressable_shards instead.")
  leaves, treedef = tree_util.tree_flatten(global_inputs)
  out = [spmd.device_put_sharded(x, NamedSharding(global_mesh, s))
         for x, s in zip(leaves, _spec_tree(pspecs, global_inputs))]
  return tree_util.tree_unflatten(treedef, out)


def reached_preemption_sync_point(step_id: int) -> bool:
  """Whether a preemption notice asks the processes to save at `step_id`. stagecraft runs no
  preemption service, so never (as JAX without one)."""
  return False


class ProcessFailureError(Exception):
  """Raised by `live_devices` when processes hosting some of its devices failed (JAX's
  class). `failed_devices`: the set of those devices."""

  def __init__(self, failed_devices: set):
    self.failed_devices = failed_devices
    super().__init__(f"Devices failed: {failed_devices}")


@contextlib.contextmanager
def live_devices(devices: Sequence[Any]) -> Iterator[list]:
  """A context manager yielding the devices of `devices` whose processes are alive, sorted
  by id (JAX's `multihost_utils.live_devices`, marked unstable there).

  With one process, after `stagecraft.distributed.initialize`, every device is alive: it
  yields `devices` sorted by id. Exceptions raised in the body propagate.

  Raises:
    RuntimeError: if `stagecraft.distributed.initialize` has not run (JAX's message).
    ValueError: for no devices, or none of this process.
    NotImplementedError: over several processes (stagecraft does not watch the health of
      other processes).
  """
  if not distributed.is_initialized():
    raise RuntimeError("Distributed JAX not initialized.")
  if not devices:
    raise ValueError("No devices provided.")
  me = client.process_index()
  if all(d.process_index != me for d in devices):
    raise ValueError("Provided devices do not have any local devices.")
  if client.process_count() > 1:
    raise NotImplementedError("live_devices over several processes: stagecraft does not "
                              "track the health of other processes.")
  yield sorted(devices, key=lambda d: d.id)
