"""`stagecraft.scipy`: SciPy functions with JAX's `scipy`'s semantics (for now `special`)."""
from stagecraft.scipy import special

__all__ = ["special"]
