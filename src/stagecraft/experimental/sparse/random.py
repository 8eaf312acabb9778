"""Random sparse arrays (JAX's `jax.experimental.sparse.random`)."""
from __future__ import annotations

import math
import operator
from typing import Any, Callable, Sequence

import numpy as np

import stagecraft.numpy as jnp
from stagecraft import random as sc_random
from stagecraft.experimental.sparse.bcoo import BCOO

__all__ = ["random_bcoo"]


def random_bcoo(key: Any, shape: Sequence[int], *, dtype: Any = jnp.float_,
                indices_dtype: Any = None, nse: float | int = 0.2, n_batch: int = 0, n_dense: int = 0,
                unique_indices: bool = True, sorted_indices: bool = False,
                generator: Callable = sc_random.uniform, **kwds) -> BCOO:
  """A random BCOO array (JAX's `random_bcoo`).

  Args:
    key: a PRNG key.
    shape: the dense shape.
    dtype: the data dtype.
    indices_dtype: the indices' dtype (default int32).
    nse: the number of stored elements per batch, or a fraction (< 1) of the sparse size.
    n_batch, n_dense: the layout.
    unique_indices: draw distinct indices (without replacement).
    sorted_indices: sort the indices.
    generator: `generator(key, shape, dtype, **kwds)` draws the data.

  Returns:
    A BCOO array (the values differ from JAX's: stagecraft's own draws).
  """
  shape = tuple(shape)
  n_sparse = len(shape) - n_batch - n_dense
  sparse_shape = shape[n_batch:n_batch + n_sparse]
  size = math.prod(sparse_shape)
  if 0 <= nse < 1:
    nse = int(math.ceil(nse * size))
  nse = operator.index(nse)
  batch = shape[:n_batch]
  dense = shape[n_batch + n_sparse:]
  k1, k2 = sc_random.split(key)
  nb = math.prod(batch)
  keys = sc_random.split(k1, max(nb, 1))
  flat = []
  for i in range(nb):
    if unique_indices:
      flat.append(sc_random.permutation(keys[i], size)[:nse])
    else:
      flat.append(sc_random.randint(keys[i], (nse,), 0, size))
  flat = jnp.stack(flat).reshape(batch + (nse,))
  if sorted_indices:
    flat = jnp.sort(flat, axis=-1)
  idx = jnp.stack(jnp.unravel_index(flat, sparse_shape), axis=-1) if n_sparse else \
      jnp.zeros(batch + (nse, 0), np.int32)
  idx = idx.astype(indices_dtype or np.int32)
  data = generator(k2, batch + (nse,) + dense, dtype, **kwds)
  return BCOO((data, idx), shape=shape, indices_sorted=sorted_indices,
              unique_indices=unique_indices)
