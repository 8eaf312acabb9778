"""`stagecraft.scipy`: SciPy functions with JAX's `jax.scipy` semantics.

Submodules load on first use (`stagecraft.scipy.stats` or `import stagecraft.scipy.stats`).
"""
import importlib as _importlib

from stagecraft.scipy import special

__all__ = ["special", "linalg", "stats", "optimize", "signal", "ndimage", "integrate",
           "interpolate", "spatial", "fft", "cluster", "sparse"]


def __getattr__(name):
  if name in __all__:
    return _importlib.import_module(f"{__name__}.{name}")
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
