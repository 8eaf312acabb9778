"""`stagecraft.export` (JAX's `jax.export`): jitted functions exported as versioned StableHLO,
serialized to bytes and called back (see `stagecraft.export._export`).

    >>> import numpy as np, stagecraft as sc, stagecraft.numpy as jnp
    >>> from stagecraft import export
    >>> exp = export.export(sc.jit(jnp.cos))(np.zeros(2, np.float32))
    >>> export.deserialize(exp.serialize()).call(np.zeros(2, np.float32))
    Array([1., 1.], dtype=float32)
"""
from stagecraft.export._export import (DisabledSafetyCheck, Exported, SymbolicScope,
                                       default_export_platform, deserialize, export,
                                       is_symbolic_dim,
                                       maximum_supported_calling_convention_version,
                                       minimum_supported_calling_convention_version,
                                       register_namedtuple_serialization,
                                       register_pytree_node_serialization, symbolic_args_specs,
                                       symbolic_shape)

__all__ = ["DisabledSafetyCheck", "Exported", "export", "deserialize",
           "register_pytree_node_serialization", "register_namedtuple_serialization",
           "maximum_supported_calling_convention_version",
           "minimum_supported_calling_convention_version", "default_export_platform",
           "SymbolicScope", "is_symbolic_dim", "symbolic_shape", "symbolic_args_specs"]
