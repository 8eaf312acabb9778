"""`stagecraft.interpreters.xla`: JAX 0.10.2's small `jax.interpreters.xla` module (three
names), so that libraries that read it at import time import: TensorFlow Probability's JAX
substrate (dynamax's distributions) registers its `NumpyVariable` array class by copying
`canonicalize_dtype_handlers[numpy.ndarray]`.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from jaxlib import xla_client as _xc

from stagecraft import core, dtypes

__all__ = ["apply_primitive", "canonicalize_dtype_handlers", "Backend"]

#: The PJRT client class (JAX's `xla.Backend`).
Backend = _xc.Client


def _canonicalize_array(x: Any) -> np.ndarray:
  return np.asarray(x, dtypes.canonicalize_dtype(np.asarray(x).dtype))


def _canonicalize_python_scalar(x: Any) -> Any:
  return np.asarray(x, dtypes.canonicalize_dtype(np.result_type(type(x))))


#: Per Python type, a function from a value to that value with its dtype made canonical
#: (64-bit types narrowed unless `jax_enable_x64`): numpy arrays and scalars and Python
#: scalars, as JAX's table. stagecraft's own conversions read `dtypes.canonicalize_dtype`
#: directly; entries libraries add here are kept but not consulted.
canonicalize_dtype_handlers: dict[type, Callable[[Any], Any]] = {
    np.ndarray: _canonicalize_array,
    **{t: _canonicalize_python_scalar for t in (bool, int, float, complex)},
    **{np.dtype(c).type: _canonicalize_array for c in "?bhilqBHILQefdgFDG"},
}


def apply_primitive(prim: core.Primitive, *args: Any, **params: Any) -> Any:
  """Runs primitive `prim` on concrete `args` with `params` (JAX's `xla.apply_primitive`):
  `prim.bind(*args, **params)` outside any transformation.

  Returns:
    The primitive's result (a list of arrays when `prim.multiple_results`).
  """
  return prim.bind(*args, **params)
