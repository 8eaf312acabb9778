"""Python operators and NumPy-style methods of `Array` and of tracers, routed to
`stagecraft.numpy` (and so to primitives). Attached at import, as JAX does."""
from __future__ import annotations

import numpy as np

from stagecraft import core
from stagecraft.core import Tracer
from stagecraft.numpy import contractions, indexing, lax_numpy, manipulation, reductions, ufuncs
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
  return manipulation.reshape(self, shape, order)


def _transpose(self, *axes):
  if len(axes) == 1 and (axes[0] is None or not isinstance(axes[0], (int, np.integer))):
    axes = axes[0]
  return manipulation.transpose(self, axes or None)


_methods = {
    "__add__": _binop(ufuncs.add), "__radd__": _binop(ufuncs.add, True),
    "__sub__": _binop(ufuncs.subtract), "__rsub__": _binop(ufuncs.subtract, True),
    "__mul__": _binop(ufuncs.multiply), "__rmul__": _binop(ufuncs.multiply, True),
    "__truediv__": _binop(ufuncs.divide), "__rtruediv__": _binop(ufuncs.divide, True),
    "__floordiv__": _binop(ufuncs.floor_divide), "__rfloordiv__": _binop(ufuncs.floor_divide, True),
    "__mod__": _binop(ufuncs.remainder), "__rmod__": _binop(ufuncs.remainder, True),
    "__pow__": _binop(ufuncs.power), "__rpow__": _binop(ufuncs.power, True),
    "__matmul__": _binop(contractions.matmul), "__rmatmul__": _binop(contractions.matmul, True),
    "__and__": _binop(ufuncs.bitwise_and), "__rand__": _binop(ufuncs.bitwise_and, True),
    "__or__": _binop(ufuncs.bitwise_or), "__ror__": _binop(ufuncs.bitwise_or, True),
    "__xor__": _binop(ufuncs.bitwise_xor), "__rxor__": _binop(ufuncs.bitwise_xor, True),
    "__eq__": _binop(ufuncs.equal), "__ne__": _binop(ufuncs.not_equal),
    "__lt__": _binop(ufuncs.less), "__le__": _binop(ufuncs.less_equal),
    "__gt__": _binop(ufuncs.greater), "__ge__": _binop(ufuncs.greater_equal),
    "__neg__": ufuncs.negative, "__pos__": ufuncs.positive, "__abs__": ufuncs.absolute,
    "__invert__": ufuncs.invert, "__getitem__": indexing.getitem,
    "__round__": lambda self, ndigits=None: ufuncs.round(self, ndigits or 0),
    "astype": lambda self, dtype, copy=False: lax_numpy.astype(self, dtype),
    "reshape": _reshape, "transpose": _transpose,
    "T": property(lambda self: manipulation.transpose(self)),
    "mT": property(lambda self: manipulation.matrix_transpose(self)),
    "ravel": manipulation.ravel, "flatten": lambda self, order="C": manipulation.ravel(self, order),
    "squeeze": manipulation.squeeze, "swapaxes": manipulation.swapaxes, "clip": ufuncs.clip,
    "round": ufuncs.round, "dot": contractions.dot,
    "sum": reductions.sum, "prod": reductions.prod, "max": reductions.max,
    "min": reductions.min, "mean": reductions.mean, "var": reductions.var,
    "std": reductions.std, "all": reductions.all, "any": reductions.any,
    "argmax": reductions.argmax, "argmin": reductions.argmin,
    "at": property(indexing.at),
}


def _attach(cls):
  for name, fn in _methods.items():
    setattr(cls, name, fn)


_attach(Array)
_attach(Tracer)
