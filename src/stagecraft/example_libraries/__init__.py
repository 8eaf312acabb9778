"""`stagecraft.example_libraries`: JAX's example libraries (`jax.example_libraries`).

`stax` (neural-network layers as `(init_fun, apply_fun)` pairs) and `optimizers`
(`(init_fun, update_fun, get_params)` triples), written for stagecraft from JAX's
documented behaviour; the same keys give the same parameters, and the same steps the same
numbers, as JAX's. Submodules load on first use (`import stagecraft.example_libraries.stax`
or `stagecraft.example_libraries.stax`).
"""
import importlib as _importlib

__all__ = ["optimizers", "stax"]


def __getattr__(name):
  if name in __all__:
    return _importlib.import_module(f"{__name__}.{name}")
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
