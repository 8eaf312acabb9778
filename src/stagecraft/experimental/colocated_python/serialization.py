"""`stagecraft.experimental.colocated_python.serialization`: the name of a module of JAX's colocated
Python machinery (`jax.experimental.colocated_python.serialization`, its internals: how calls and
their arguments are sent to a colocated host).

stagecraft runs colocated Python in its own process (see the package), so it has no such
machinery and this module holds only `DeviceList` (jaxlib's list of devices, which JAX's module exports
and libraries name in annotations): it exists so that libraries that import it along with
the package (orbax's checkpointing, for its multi-host transport) import; reading another
name from it raises AttributeError.
"""
from jaxlib import xla_client as _xc

__all__ = ["DeviceList"]

#: jaxlib's device list, as JAX's module exports it.
DeviceList = _xc.DeviceList
