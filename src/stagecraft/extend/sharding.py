"""`stagecraft.extend.sharding`: the runtime's sharding classes and HLO sharding protos (JAX's
`jax.extend.sharding`), from jaxlib, which stagecraft uses as its XLA runtime.

  >>> hlo = xla_client.HloSharding.replicate()
  >>> get_hlo_sharding_from_serialized_proto(get_serialized_proto_from_hlo_sharding(hlo)) == hlo
  True
"""
from __future__ import annotations

from jaxlib import _jax as _runtime
from jaxlib import xla_client

__all__ = ["GSPMDSharding", "get_hlo_sharding_from_serialized_proto",
           "get_op_sharding_from_serialized_proto", "get_serialized_proto_from_hlo_sharding",
           "xla_client"]

#: The runtime's sharding described by an HLO sharding over a device list.
GSPMDSharding = _runtime.GSPMDSharding


def get_op_sharding_from_serialized_proto(sharding: bytes) -> xla_client.OpSharding:
  """The `OpSharding` proto serialized in `sharding`."""
  proto = xla_client.OpSharding()
  proto.ParseFromString(sharding)
  return proto


def get_hlo_sharding_from_serialized_proto(sharding: bytes) -> xla_client.HloSharding:
  """The `HloSharding` of the `OpSharding` proto serialized in `sharding`."""
  return xla_client.HloSharding.from_proto(get_op_sharding_from_serialized_proto(sharding))


def get_serialized_proto_from_hlo_sharding(sharding: xla_client.HloSharding) -> bytes:
  """`sharding` as a serialized `OpSharding` proto."""
  return sharding.to_proto().SerializeToString()
