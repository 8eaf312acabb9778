"""`stagecraft.scipy`: SciPy functions with `jax.scipy`'s semantics (for now `special`)."""
from stagecraft.scipy import special  # noqa: F401
