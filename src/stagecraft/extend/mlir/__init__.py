"""`stagecraft.extend.mlir` (JAX's `jax.extend.mlir`): the runtime's StableHLO artifact
functions (from jaxlib), which work on the module text stagecraft lowers to. MLIR's Python
bindings (`ir`, `passmanager`, `dialects`) do not exist here: any use of them raises a
NotImplementedError that says to use `stagecraft.interpreters.mlir.lower_fun`.

  >>> import stagecraft, stagecraft.numpy as jnp
  >>> text = stagecraft.jit(jnp.sin).lower(jnp.ones(3)).as_text()
  >>> isinstance(serialize_portable_artifact(text, "1.0.0"), bytes)
  True
"""
from __future__ import annotations

from jaxlib import xla_client as _xc

from stagecraft.extend.mlir import dialects, ir, passmanager

__all__ = ["deserialize_portable_artifact", "dialects", "hlo_to_stablehlo", "ir",
           "passmanager", "refine_polymorphic_shapes", "serialize_portable_artifact"]

_runtime_mlir = _xc._xla.mlir
#: `serialize_portable_artifact(module_text, target_version) -> bytes` (versioned StableHLO).
serialize_portable_artifact = _runtime_mlir.serialize_portable_artifact
#: `deserialize_portable_artifact(bytes) -> str` (the module text back).
deserialize_portable_artifact = _runtime_mlir.deserialize_portable_artifact
#: `refine_polymorphic_shapes(module, ...)`: the runtime's shape refinement pass.
refine_polymorphic_shapes = _runtime_mlir.refine_polymorphic_shapes
#: `hlo_to_stablehlo(hlo_module_proto_bytes) -> bytes` (StableHLO bytecode).
hlo_to_stablehlo = _runtime_mlir.hlo_to_stablehlo
