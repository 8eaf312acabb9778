"""`stagecraft.experimental.topologies`: JAX 0.10.2's `jax.experimental.topologies`.

A `TopologyDescription` holds a list of devices. `get_attached_topology` gives the devices of
a running backend (on CPU: the CPU client's devices); `get_topology_desc` asks a PJRT plugin
for compile-only devices of a named topology, which needs a TPU (libtpu) or another plugin
with a topology factory: on a CPU-only install it raises JAX's errors. `make_mesh` arranges a
topology's devices into a `Mesh` through `mesh_utils.create_device_mesh`.
"""
from __future__ import annotations

from typing import Sequence

from jaxlib import _jax

from stagecraft import sharding as _sharding
from stagecraft.experimental import mesh_utils
from stagecraft.runtime import client as _client

__all__ = ["Device", "TopologyDescription", "get_attached_topology", "get_topology_desc",
           "make_mesh"]

Device = _jax.Device


class TopologyDescription:
  """A topology: `devices`, a list of devices (real, or compile-only ones from a plugin)."""

  def __init__(self, devices: list[Device]):
    self.devices: list[Device] = devices


def get_attached_topology(platform: str | None = None) -> TopologyDescription:
  """The topology of the devices of backend `platform` (None: the default backend).

  Raises RuntimeError (JAX's "Unknown backend ..." words) for an unavailable backend.
  """
  return TopologyDescription(_client.devices(platform))


def get_topology_desc(topology_name: str = "", platform: str | None = None,
                      **kwargs) -> TopologyDescription:
  """Compile-only devices of topology `topology_name` on `platform` (None means TPU).

  Needs a PJRT plugin that describes topologies; none is present on a CPU-only install, so:

  Raises:
    RuntimeError: for platform None or "tpu", as JAX's when libtpu is not installed; for
      "gpu" (an alias, resolved among the platforms present), JAX's "Unknown backend" text.
    NotImplementedError: "topology not implemented for <platform>" for any other platform.
  """
  del topology_name, kwargs
  if platform == "tpu" or platform is None:
    raise RuntimeError("JAX TPU support not installed; cannot generate TPU topology. See "
                       "https://github.com/jax-ml/jax#installation")
  if platform == "gpu":
    raise RuntimeError("Unknown backend: 'gpu' requested, but no platforms that are "
                       "instances of gpu are present. Platforms present are: cpu")
  raise NotImplementedError(f"topology not implemented for {platform}")


def make_mesh(topo: TopologyDescription, mesh_shape: Sequence[int],
              axis_names: tuple[str, ...], *,
              contiguous_submeshes: bool = False) -> _sharding.Mesh:
  """A `Mesh` of `topo`'s devices of shape `mesh_shape` named `axis_names`
  (`mesh_utils.create_device_mesh`, whose ValueError it raises when the device count is not
  the product of `mesh_shape`)."""
  devices = mesh_utils.create_device_mesh(mesh_shape, list(topo.devices),
                                          contiguous_submeshes=contiguous_submeshes)
  return _sharding.Mesh(devices, axis_names)
