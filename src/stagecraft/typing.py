"""Type annotations for stagecraft code (`jax.typing`): `ArrayLike` for values that functions
accept as arrays, `DTypeLike` for values accepted as dtypes.

  >>> import stagecraft.numpy as jnp
  >>> from stagecraft.typing import ArrayLike
  >>> def double(x: ArrayLike):
  ...   return jnp.asarray(x) * 2

As in JAX, annotate inputs with `ArrayLike` and outputs with `stagecraft.Array`; sequences
(lists, tuples) are deliberately not `ArrayLike`.
"""
from __future__ import annotations

import typing
from typing import Any, Protocol, Union

import numpy as np

from stagecraft.runtime.array import Array

__all__ = ["ArrayLike", "DTypeLike"]


@typing.runtime_checkable
class SupportsDType(Protocol):
  """Anything with a `dtype` attribute (an array, `stagecraft.numpy.float32`)."""

  @property
  def dtype(self, /) -> np.dtype: ...


StaticScalar = Union[np.bool_, np.number, bool, int, float, complex]
"""NumPy and Python scalars."""

ArrayLike = Union[Array, np.ndarray, StaticScalar]
"""Values that convert implicitly to an Array: Arrays (tracers included), NumPy arrays,
NumPy scalars and Python scalars."""

DTypeLike = Union[str, type[Any], np.dtype, SupportsDType]
"""Values accepted as a dtype: a name (`'float32'`), a scalar type (`np.float32`, `float`),
a NumPy dtype, or anything with a `dtype` attribute."""
