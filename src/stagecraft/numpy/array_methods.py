"""Python operators and NumPy-style methods of `Array` and of tracers, routed to
`stagecraft.numpy` (and so to primitives). Attached at import, as JAX does."""
from __future__ import annotations

import numpy as np

from stagecraft import core
from stagecraft.core import Tracer
from stagecraft.numpy import contractions, indexing, lax_numpy as jnp, reductions
from stagecraft.runtime.array import Array

try:
  from jaxlib._jax import ArrayImpl as _JaxArray
except ImportError:  # pragma: no cover
  _JaxArray = Array

_accepted = (Array, Tracer, np.ndarray, np.generic, int, float, complex, bool, _JaxArray,
             core.WeakScalarValue)


def _binop(fn, swap=False):
  def op(self, other):
    if not isinstance(other, _accepted):
      return NotImplemented
    return fn(other, self) if swap else fn(self, other)
  return op


def _reshape(self, *shape, order="C"):
  if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
    shape = shape[0]
  return jnp.reshape(self, shape, order)


def _transpose(self, *axes):
  if len(axes) == 1 and (axes[0] is None or not isinstance(axes[0], (int, np.integer))):
    axes = axes[0]
  return jnp.transpose(self, axes or None)


_methods = {
    "__add__": _binop(jnp.add), "__radd__": _binop(jnp.add, True),
    "__sub__": _binop(jnp.subtract), "__rsub__": _binop(jnp.subtract, True),
    "__mul__": _binop(jnp.multiply), "__rmul__": _binop(jnp.multiply, True),
    "__truediv__": _binop(jnp.divide), "__rtruediv__": _binop(jnp.divide, True),
    "__floordiv__": _binop(jnp.floor_divide), "__rfloordiv__": _binop(jnp.floor_divide, True),
    "__mod__": _binop(jnp.remainder), "__rmod__": _binop(jnp.remainder, True),
    "__pow__": _binop(jnp.power), "__rpow__": _binop(jnp.power, True),
    "__matmul__": _binop(contractions.matmul), "__rmatmul__": _binop(contractions.matmul, True),
    "__and__": _binop(jnp.bitwise_and), "__rand__": _binop(jnp.bitwise_and, True),
    "__or__": _binop(jnp.bitwise_or), "__ror__": _binop(jnp.bitwise_or, True),
    "__xor__": _binop(jnp.bitwise_xor), "__rxor__": _binop(jnp.bitwise_xor, True),
    "__eq__": _binop(jnp.equal), "__ne__": _binop(jnp.not_equal),
    "__lt__": _binop(jnp.less), "__le__": _binop(jnp.less_equal),
    "__gt__": _binop(jnp.greater), "__ge__": _binop(jnp.greater_equal),
    "__neg__": jnp.negative, "__pos__": jnp.positive, "__abs__": jnp.absolute,
    "__invert__": jnp.invert, "__getitem__": indexing.getitem,
    "__round__": lambda self, ndigits=None: jnp.round(self, ndigits or 0),
    "astype": lambda self, dtype, copy=False: jnp.astype(self, dtype),
    "reshape": _reshape, "transpose": _transpose,
    "T": property(lambda self: jnp.transpose(self)),
    "mT": property(lambda self: jnp.matrix_transpose(self)),
    "ravel": jnp.ravel, "flatten": lambda self, order="C": jnp.ravel(self, order),
    "squeeze": jnp.squeeze, "swapaxes": jnp.swapaxes, "clip": jnp.clip,
    "round": jnp.round, "dot": contractions.dot,
    "sum": reductions.sum, "prod": reductions.prod, "max": reductions.max,
    "min": reductions.min, "mean": reductions.mean, "var": reductions.var,
    "std": reductions.std, "all": reductions.all, "any": reductions.any,
    "argmax": reductions.argmax, "argmin": reductions.argmin,
    "at": property(indexing._IndexUpdateHelper),
}


def _attach(cls):
  for name, fn in _methods.items():
    setattr(cls, name, fn)


_attach(Array)
_attach(Tracer)
