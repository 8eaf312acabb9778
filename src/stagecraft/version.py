"""stagecraft's version (`stagecraft.version`, as `jax.version`): `__version__` is the
version string and `__version_info__` its numbers as a tuple of ints.

  >>> from stagecraft import version
  >>> version.__version_info__ == tuple(int(p) for p in version.__version__.split("."))
  True
"""
from __future__ import annotations

__all__ = ["__version__", "__version_info__"]

__version__ = "0.1.0"
_version = __version__
__version_info__ = tuple(int(p) for p in __version__.split("."))
