"""JAX's `colocated_python.serialization` module: `DeviceList` (jaxlib's, which libraries
name in annotations evaluated at import: orbax.checkpoint); nothing else of it runs on
stagecraft (see the package)."""
from jaxlib import xla_client as _xc

#: jaxlib's list of devices (what JAX's module names `DeviceList`).
DeviceList = _xc.DeviceList
