"""The real `jax` modules that stagecraft's runtime uses, kept apart from user imports.

stagecraft's runtime is jaxlib; it imports the real jax only on the paths that need it
(`runtime/client.py`: clients of non-CPU platforms and PJRT plugins, a distributed run's
service and collectives; `extend.backend.register_backend_factory`), never at
`import stagecraft`. `stagecraft.compat.install()`
(and `python -m stagecraft run script.py`) then serves the user's `import jax` from stagecraft,
so from that point on an `import jax.sharding` would return `stagecraft.sharding`. The
runtime therefore reads those modules through `jax_module`, which remembers each real module
the first time it is asked for; `capture()` asks for all of them before the alias is
installed.

  >>> from stagecraft.runtime import jax_runtime
  >>> jax_runtime.jax_module("jax.sharding").__name__
  'jax.sharding'
"""
from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["RUNTIME_MODULES", "jax_module", "capture", "captured"]

#: The real jax modules stagecraft's runtime reads (client, sharding and distributed).
RUNTIME_MODULES = ("jax", "jax.sharding", "jax.distributed", "jax.extend.backend")

_real: dict[str, ModuleType] = {}


def jax_module(name: str = "jax") -> ModuleType:
  """The real JAX module `name` (`"jax"`, `"jax.sharding"`, ...), even while `import jax`
  is served by stagecraft.

  Args:
    name: a dotted module name of the jax package.

  Returns:
    The module object, imported on the first call and remembered afterwards.

  Raises:
    ImportError: if `name` was not captured before `stagecraft.compat.install()` aliased
      `jax` to stagecraft, so that importing it now would give stagecraft's module.
  """
  mod = _real.get(name)
  if mod is None:
    mod = importlib.import_module(name)
    if getattr(mod, "__name__", None) != name:
      raise ImportError(
          f"stagecraft's runtime needs the real {name!r}, but `import {name}` now gives "
          f"{getattr(mod, '__name__', mod)!r} (jax is served by stagecraft since "
          f"stagecraft.compat.install()). Add {name!r} to "
          f"stagecraft.runtime.jax_runtime.RUNTIME_MODULES so that install() captures it "
          f"first.")
    _real[name] = mod
  return mod


def capture(names=RUNTIME_MODULES) -> dict[str, ModuleType]:
  """Imports and remembers the real modules `names` (default: all the runtime reads);
  returns them by name. Called by `stagecraft.compat.install()` before it aliases `jax`."""
  return {n: jax_module(n) for n in names}


def captured() -> tuple[str, ...]:
  """The names of the real jax modules the runtime has imported so far (none until a path
  that needs jax runs, or `capture()`)."""
  return tuple(_real)
