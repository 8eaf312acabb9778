"""`JAXSparse`: the base class of the sparse array formats (JAX's
`jax.experimental.sparse.JAXSparse`)."""
from __future__ import annotations

import abc
import math
from typing import Any, Sequence

import numpy as np

__all__ = ["JAXSparse"]


class JAXSparse(abc.ABC):
  """The base class of sparse arrays: a pytree of device arrays (`data`, index arrays) and
  a static `shape`.

  Subclasses define `tree_flatten`/`tree_unflatten`, `todense`, `transpose`, `__matmul__`.
  """
  data: Any
  shape: tuple[int, ...]
  nse: property
  dtype: property

  # NB: NumPy's operators on a sparse operand defer to the sparse array's (JAX's choice).
  __array_priority__ = 2000

  def __init__(self, args: Sequence[Any], *, shape: Sequence[int]):
    self.shape = tuple(int(d) for d in shape)

  size = property(lambda self: math.prod(self.shape))
  ndim = property(lambda self: len(self.shape))

  def __len__(self):
    return self.shape[0]

  def __repr__(self):
    name = type(self).__name__
    try:
      nse = self.nse
      dtype = self.dtype
      shape = list(self.shape)
    except Exception:  # pylint: disable=broad-except
      return f"{name}(<invalid>)"
    return f"{name}({np.dtype(dtype).name}{shape}, nse={nse})"

  @abc.abstractmethod
  def tree_flatten(self):
    ...

  @abc.abstractmethod
  def transpose(self, axes=None):
    ...

  @property
  def T(self):
    return self.transpose()

  def block_until_ready(self):
    for arg in self.tree_flatten()[0]:
      arg.block_until_ready()
    return self

  def __neg__(self):
    raise NotImplementedError(f"{type(self).__name__} does not support negation")

  def __pos__(self):
    return self
