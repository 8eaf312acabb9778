"""`stagecraft.scipy.sparse`: JAX's `jax.scipy.sparse` (the iterative solvers of
`stagecraft.scipy.sparse.linalg`: `cg`, `gmres`, `bicgstab`)."""
from stagecraft.scipy.sparse import linalg

__all__ = ["linalg"]
