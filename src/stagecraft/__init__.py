"""stagecraft: a JAX-style staging compiler (trace -> jaxpr -> StableHLO -> XLA)."""
from stagecraft.config import config, disable_jit, enable_x64
from stagecraft import dtypes, tree_util
from stagecraft.core import ShapeDtypeStruct, ShapedArray
from stagecraft.runtime import (Array, block_until_ready, default_device, device_count,
                                device_put, devices, local_device_count, local_devices)
from stagecraft import lax

__version__ = "0.1.0"
