"""`stagecraft.experimental`: JAX's `jax.experimental` names (submodules load on first use)."""
import importlib as _importlib

from stagecraft.callback import io_callback

__all__ = ["io_callback", "checkify", "ode"]

_SUBMODULES = ("ode", "checkify", "serialize_executable", "compute_on",
               "custom_partitioning", "shard_map", "compilation_cache", "pjit", "jet",
               "mesh_utils", "multihost_utils", "layout", "hijax", "sparse", "key_reuse",
               "colocated_python", "pallas", "random", "shard_alike", "control_deps", "profiler",
               "topologies", "scheduling_groups", "rnn", "roofline", "buffer_callback")


def deprecation_getattr(module: str, deprecations: dict):
  """A module `__getattr__` for deprecated names (JAX's `deprecation_getattr`): reading
  `name` in `deprecations` (name -> (message, value)) warns with a DeprecationWarning the
  first time in the process (the lookup is cached) and returns the value."""
  import functools  # NB: only modules with deprecated names build one
  import warnings

  @functools.cache
  def getattr_(name: str):
    if name in deprecations:
      message, value = deprecations[name]
      warnings.warn(message, DeprecationWarning, stacklevel=2)
      return value
    raise AttributeError(f"module {module!r} has no attribute {name!r}")
  return getattr_


def __getattr__(name):
  if name == "cur_qdd":   # JAX's `jax.experimental.cur_qdd` (of mutable hijax values)
    return _importlib.import_module(f"{__name__}.hijax").cur_qdd
  if name in _SUBMODULES:
    return _importlib.import_module(f"{__name__}.{name}")
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
  return sorted({*globals(), *_SUBMODULES})
