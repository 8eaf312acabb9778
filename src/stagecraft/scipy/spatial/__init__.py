"""`stagecraft.scipy.spatial`: JAX's `jax.scipy.spatial` (for now the `transform` submodule:
`Rotation` and `Slerp`)."""
from stagecraft.scipy.spatial import transform

__all__ = ["transform"]
