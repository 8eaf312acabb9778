"""The XLA runtime through PJRT: client and devices, Array, transfers, compile, execute."""
from stagecraft.runtime.array import Array
from stagecraft.runtime.client import (default_device, device_count, devices, get_backend,
                                       local_device_count, local_devices, process_count,
                                       process_index)
from stagecraft.runtime.dispatch import block_until_ready
from stagecraft.runtime.spmd import device_put

__all__ = ["Array", "default_device", "device_count", "devices", "get_backend",
           "local_device_count", "local_devices", "process_count", "process_index",
           "block_until_ready", "device_put"]
