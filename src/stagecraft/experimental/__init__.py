"""`stagecraft.experimental`: JAX's `jax.experimental` names (submodules load on first use)."""
import importlib as _importlib

from stagecraft.callback import io_callback

__all__ = ["io_callback", "checkify", "ode"]

_SUBMODULES = ("ode", "checkify")


def __getattr__(name):
  if name in _SUBMODULES:
    return _importlib.import_module(f"{__name__}.{name}")
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
