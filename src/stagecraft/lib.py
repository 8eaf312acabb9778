"""`jax.lib`'s one public name: `__version__`, the version string of the jaxlib runtime that
compiles and runs stagecraft's programs (libraries test it, e.g. equinox's tests skip a
timing on one jaxlib version).

  >>> from stagecraft import lib
  >>> import jaxlib
  >>> lib.__version__ == jaxlib.__version__
  True
"""
from stagecraft.runtime import cache as _cache

__all__ = ["__version__"]

#: The jaxlib runtime's version string (e.g. "0.10.2").
__version__: str = _cache.JAXLIB_VERSION
