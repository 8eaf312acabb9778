"""`stagecraft.experimental.mesh_utils`: device meshes as JAX's `jax.experimental.mesh_utils`.

On CPU and GPU a mesh is the devices in their given order, reshaped (JAX's TPU-topology
handlers do not apply there); a hybrid mesh tiles one such mesh per granule (a process, or
a slice of devices with a `slice_index`) over the data-center-network grid.

  >>> import stagecraft
  >>> from stagecraft.experimental import mesh_utils
  >>> mesh_utils.create_device_mesh((1, stagecraft.device_count())).shape[0]
  1
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from stagecraft.runtime import client

__all__ = ["create_device_mesh", "create_hybrid_device_mesh", "device_kind_handler_dict"]

#: Mesh builders per device kind (JAX's extension point; none needed on CPU and GPU).
device_kind_handler_dict: dict[str, Any] = {}


def _shape(name: str, shape: Sequence[int]) -> tuple[int, ...]:
  try:
    out = tuple(int(d) for d in shape)
  except TypeError:
    raise TypeError(f"{name} must be a sequence of ints, got {shape!r}.") from None
  if any(d < 1 for d in out):
    raise ValueError(f"{name} must have positive sizes, got {shape!r}.")
  return out


def create_device_mesh(mesh_shape: Sequence[int], devices: Sequence[Any] | None = None, *,
                       contiguous_submeshes: bool = False,
                       allow_split_physical_axes: bool = False) -> np.ndarray:
  """A NumPy array of devices of shape `mesh_shape` (for `Mesh(devices, axis_names)`).

  Args:
    mesh_shape: the mesh's shape; its product must be the number of devices.
    devices: the devices to lay out (default: `stagecraft.devices()`), in row-major order.
    contiguous_submeshes, allow_split_physical_axes: TPU topology options of JAX's; accepted
      and without effect on CPU and GPU devices (as in JAX there).

  Returns:
    An object array of shape `mesh_shape` holding the devices.

  Raises:
    ValueError: if the product of `mesh_shape` is not the number of devices (JAX's message).
  """
  shape = _shape("mesh_shape", mesh_shape)
  devs = list(client.devices() if devices is None else devices)
  if math.prod(shape) != len(devs):
    raise ValueError(f"Number of devices {len(devs)} must equal the product of mesh_shape "
                     f"{tuple(mesh_shape)}")
  handler = device_kind_handler_dict.get(getattr(devs[0], "device_kind", None))
  if handler is not None:
    mesh = handler(devs, shape)
    if mesh is not None:
      return mesh
  out = np.empty(len(devs), dtype=object)
  out[:] = devs
  return out.reshape(shape)


def create_hybrid_device_mesh(mesh_shape: Sequence[int], dcn_mesh_shape: Sequence[int],
                              devices: Sequence[Any] | None = None, *,
                              process_is_granule: bool = False,
                              should_sort_granules_by_key: bool = True,
                              allow_split_physical_axes: bool = False) -> np.ndarray:
  """A mesh of shape `mesh_shape * dcn_mesh_shape` (elementwise) built from one
  `mesh_shape` mesh per granule, the granules tiled over the grid `dcn_mesh_shape`.

  Args:
    mesh_shape: the mesh within one granule.
    dcn_mesh_shape: the grid of granules (same rank as `mesh_shape`).
    devices: the devices (default: all).
    process_is_granule: group devices by `process_index` (else by `slice_index`, which CPU
      and GPU devices lack).
    should_sort_granules_by_key: order the granules by their index (else as first seen).
    allow_split_physical_axes: accepted, as for `create_device_mesh`.

  Raises:
    ValueError: if the shapes have different ranks, a device has no `slice_index` without
      `process_is_granule`, the number of granules is not the product of `dcn_mesh_shape`,
      or a granule's devices do not fill `mesh_shape` (JAX's messages).
  """
  shape, dcn = _shape("mesh_shape", mesh_shape), _shape("dcn_mesh_shape", dcn_mesh_shape)
  if len(shape) != len(dcn):
    raise ValueError(f"mesh_shape {tuple(mesh_shape)} and dcn_mesh_shape "
                     f"{tuple(dcn_mesh_shape)} must have the same rank.")
  devs = list(client.devices() if devices is None else devices)
  attr = "process_index" if process_is_granule else "slice_index"
  groups: dict[Any, list] = {}
  for d in devs:
    if not hasattr(d, attr):
      raise ValueError(f"Device {d} does not have attribute {attr}. See "
                       f"`process_is_granule` option.")
    groups.setdefault(getattr(d, attr), []).append(d)
  keys = sorted(groups) if should_sort_granules_by_key else list(groups)
  if len(keys) != math.prod(dcn):
    raise ValueError(f"Number of slices {len(keys)} must equal the product of "
                     f"dcn_mesh_shape {tuple(dcn_mesh_shape)}")
  meshes = [create_device_mesh(shape, groups[k], contiguous_submeshes=False,
                               allow_split_physical_axes=allow_split_physical_axes)
            for k in keys]
  grid = np.empty(len(meshes), dtype=object)
  grid[:] = meshes
  return np.block(grid.reshape(dcn).tolist())
