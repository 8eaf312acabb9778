"""`stagecraft.numpy`: the NumPy API with JAX's numpy's semantics, composed from primitives.

Its modules, each importing only modules listed before it: `array_constructors` (`array`,
`asarray`), `scalar_types` (`float32`...), `util` (internal helpers), `array_creation`,
`manipulation` (shape manipulation), `ufuncs` (elementwise functions), `reductions`,
`indexing`, `sorting`, `lax_numpy` (the rest of the surface, built on those), then
`contractions`, `linalg`, `fft`, `setops`, `statistics`, `polynomial`, `index_tricks`,
`window_functions`, and `array_methods` (the operators and methods of Array). Each public
module lists its API in `__all__`."""
import copy as _copy
import types as _types

from stagecraft.numpy.array_constructors import *  # noqa: F401,F403
from stagecraft.numpy.array_creation import *  # noqa: F401,F403
from stagecraft.numpy.manipulation import *  # noqa: F401,F403
from stagecraft.numpy.ufuncs import *  # noqa: F401,F403
from stagecraft.numpy.reductions import *  # noqa: F401,F403
from stagecraft.numpy.lax_numpy import *  # noqa: F401,F403
from stagecraft.numpy.contractions import *  # noqa: F401,F403
from stagecraft.numpy.sorting import *  # noqa: F401,F403
from stagecraft.numpy.setops import *  # noqa: F401,F403
from stagecraft.numpy.statistics import *  # noqa: F401,F403
from stagecraft.numpy.polynomial import *  # noqa: F401,F403
from stagecraft.numpy.index_tricks import *  # noqa: F401,F403
from stagecraft.numpy.window_functions import *  # noqa: F401,F403
from stagecraft.numpy.scalar_types import *  # noqa: F401,F403
# NB: after ufuncs, whose three-argument `where` this one extends with the one-argument form.
from stagecraft.numpy.indexing import (argwhere, flatnonzero, nonzero, put, take,  # noqa: F401
                                       take_along_axis, where)
from stagecraft.numpy import fft, linalg  # noqa: F401  (submodules)
from stagecraft.numpy.array_api_metadata import (__array_api_version__,  # noqa: F401
                                                  __array_namespace_info__)
from stagecraft.numpy import array_methods as _array_methods  # noqa: F401  (attaches methods)
from stagecraft.runtime.array import Array as ndarray  # noqa: F401
from stagecraft.numpy.vectorize import apply_along_axis, vectorize  # noqa: F401
from stagecraft.numpy.ufunc_api import frompyfunc, ufunc  # noqa: F401
# NB: JAX's ufunc objects replace the plain functions of the same names from `ufuncs`.
from stagecraft.numpy.ufunc_api import (add, bitwise_and, bitwise_or, bitwise_xor,  # noqa: F401
                                        logaddexp, logaddexp2, logical_and, logical_or,
                                        logical_xor, maximum, minimum, multiply, negative,
                                        subtract)


def _named(f, name: str):
  """`f` as a function of its own name (JAX's aliases are functions of their own: `jnp.abs`
  is `abs`, not `absolute`); the same code, closure and attributes (a jitted one shares
  its caches)."""
  if not isinstance(f, _types.FunctionType):   # a jitted function: a copy, renamed
    g = _copy.copy(f)
    g.__name__ = g.__qualname__ = name
    return g
  g = _types.FunctionType(f.__code__, f.__globals__, name, f.__defaults__, f.__closure__)
  g.__kwdefaults__ = f.__kwdefaults__
  g.__dict__.update(f.__dict__)
  g.__doc__, g.__module__, g.__qualname__ = f.__doc__, f.__module__, name
  g.__annotations__ = dict(f.__annotations__)
  return g


for _name in ("abs", "acos", "acosh", "amax", "amin", "asin", "asinh", "atan", "atan2",
              "atanh", "bitwise_invert", "bitwise_left_shift", "bitwise_not",
              "bitwise_right_shift", "concat", "conj", "degrees", "mod", "pow", "radians",
              "true_divide"):
  if getattr(globals()[_name], "__name__", _name) != _name:
    globals()[_name] = _named(globals()[_name], _name)
del _name
