"""`stagecraft.experimental.compilation_cache.compilation_cache`: the persistent compilation
cache's directory, as JAX's module of that name.

  >>> from stagecraft.experimental.compilation_cache import compilation_cache as cc
  >>> cc.set_cache_dir("/tmp/stagecraft-cache")   # doctest: +SKIP

`set_cache_dir(path)` is `config.update("jax_compilation_cache_dir", path)`: from then on
every program compiled in this process is looked up in, and stored to, `path`
(stagecraft/runtime/cache.py describes the entries and their checks). The cache is trusted
only as far as that module says: an entry loads only when its recorded key is the program's.
stagecraft reads the directory from the config at each compilation, so a new directory takes
effect at once and `reset_cache()` has no state to reset (JAX's keeps the first directory
until `reset_cache()`).
"""
from __future__ import annotations

import os

from stagecraft.config import config

__all__ = ["set_cache_dir", "reset_cache"]


def set_cache_dir(path: str | os.PathLike) -> None:
  """Sets the persistent compilation cache directory (JAX's
  `compilation_cache.set_cache_dir`): programs compiled from now on are stored there and,
  in later runs, loaded from there instead of being compiled again.

  Args:
    path: a directory (a str; created on the first store), or None (or "") to turn the
      persistent cache off.

  Raises:
    ValueError: for a path that is neither a str nor None (JAX's message).
  """
  config.update("jax_compilation_cache_dir", path)


def reset_cache() -> None:
  """Gets the cache back to its uninitialized state (JAX's `compilation_cache.reset_cache`).

  stagecraft's persistent cache holds no state between compilations (the directory is read
  from the config each time), so this does nothing; the directory set stays set.
  """
