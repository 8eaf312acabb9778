"""`stagecraft.scipy.cluster`: JAX's `jax.scipy.cluster` (the `vq` submodule)."""
from stagecraft.scipy.cluster import vq

__all__ = ["vq"]
