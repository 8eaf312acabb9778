"""`stagecraft.flatten_util`: ravel a pytree of arrays into one flat vector and back, as
JAX's `jax.flatten_util`.

The flat vector is the concatenation of the raveled leaves (in `tree_flatten` order), in the
dtype that `dtypes.result_type` gives for the leaves' dtypes. The returned `unravel` splits a
vector of that length back into leaves of the original shapes (and, when the leaves had
different dtypes, casts each piece back to its leaf's dtype).
"""
from __future__ import annotations

import math
from typing import Any, Callable
import warnings

import numpy as np

from stagecraft import core, dtypes, lax, tree_util

__all__ = ["ravel_pytree"]


def _leaf_dtype(x: Any) -> np.dtype:
  return dtypes.dtype(x, canonicalize=True)


def _leaf_shape(x: Any) -> tuple[int, ...]:
  return tuple(core.get_aval(x).shape) if not isinstance(x, (bool, int, float, complex)) else ()


class _Unravel:
  """The `unravel` half of `ravel_pytree`: a hashable callable (equal to another one made
  for the same tree structure, shapes and dtypes), so it may be a static argument of `jit`.

  `from_dtypes` is None when every leaf had the result dtype: then `unravel` keeps the
  dtype of the vector it is given (JAX's dtype-polymorphic unravel).
  """
  # NB: weakly referenceable, as JAX's (jit of an unravel)
  __slots__ = ("treedef", "sizes", "shapes", "from_dtypes", "to_dtype", "__weakref__")

  def __init__(self, treedef, sizes, shapes, from_dtypes, to_dtype):
    self.treedef, self.sizes, self.shapes = treedef, sizes, shapes
    self.from_dtypes, self.to_dtype = from_dtypes, to_dtype

  def _key(self):
    return (self.treedef, self.sizes, self.shapes, self.from_dtypes, self.to_dtype)

  def __eq__(self, other):
    return type(other) is _Unravel and self._key() == other._key()

  def __hash__(self):
    return hash(self._key())

  def __repr__(self):
    return f"unravel_pytree({self.treedef})"

  def __call__(self, flat: Any) -> Any:
    """`flat`: a vector `T[n]` (n: the total size of the leaves) -> the pytree.

    Raises:
      ValueError: if `flat` does not have `n` entries along its first axis.
      TypeError: if the leaves had mixed dtypes and `flat` is not of their result dtype.
    """
    if not self.sizes:
      return tree_util.tree_unflatten(self.treedef, [])
    aval = core.get_aval(flat)
    if self.from_dtypes is not None and aval.dtype != self.to_dtype:
      raise TypeError(f"unravel function given array of dtype {aval.dtype}, but expected "
                      f"dtype {self.to_dtype}")
    total = sum(self.sizes)
    if aval.ndim == 0 or aval.shape[0] != total:
      shape = list(aval.shape)
      raise ValueError(f"Sum of sizes {total} must be equal to dimension 0 of the operand "
                       f"shape {shape}")
    chunks = lax.split(flat, self.sizes)
    leaves = [lax.reshape(c, s) for c, s in zip(chunks, self.shapes)]
    if self.from_dtypes is not None:
      with warnings.catch_warnings():   # as JAX: a complex flat array cast back to real
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)   # leaves is expected
        leaves = [lax.convert_element_type(l, dt) for l, dt in zip(leaves, self.from_dtypes)]
    return tree_util.tree_unflatten(self.treedef, leaves)


def ravel_pytree(pytree: Any) -> tuple[Any, Callable[[Any], Any]]:
  """Ravels (flattens) a pytree of arrays and scalars into one 1-D array.

  Args:
    pytree: a pytree whose leaves are arrays, NumPy arrays or Python scalars (tracers too:
      this works under `jit`, `grad` and `vmap`).

  Returns:
    `(flat, unravel)`: `flat` is `T[n]`, the leaves raveled and concatenated in
    `tree_flatten` order, n the sum of their sizes and T the result type of the leaves'
    dtypes (Python scalars count as their default dtype, e.g. int32/float32 without x64);
    with no leaves it is an empty float32 vector. `unravel(v)` maps a vector `T[n]` back to
    a pytree of the same structure and leaf shapes; where the leaves had different dtypes
    each leaf is cast back to its own dtype (otherwise the leaves keep `v`'s dtype).
    `unravel` is hashable.

  Raises (from `unravel`):
    ValueError: `Sum of sizes n must be equal to dimension 0 of the operand shape [m]` for
      a vector of the wrong length.
    TypeError: for a vector of another dtype when the leaves had mixed dtypes.

  Algorithm: reshape + convert_element_type + concatenate, and split + reshape + convert
  back (the layout of JAX's `ravel_pytree`).

  Examples:
    >>> import stagecraft.numpy as jnp
    >>> flat, unravel = ravel_pytree({"a": jnp.ones(2), "b": jnp.zeros((1, 2))})
    >>> flat
    Array([1., 1., 0., 0.], dtype=float32)
    >>> unravel(flat)["b"].shape
    (1, 2)
  """
  leaves, treedef = tree_util.tree_flatten(pytree)
  if not leaves:
    flat = lax.full((0,), 0, np.dtype("float32"))
    return flat, _Unravel(treedef, (), (), None, np.dtype("float32"))
  from_dtypes = tuple(_leaf_dtype(l) for l in leaves)
  to_dtype = dtypes.result_type(*from_dtypes)
  shapes = tuple(_leaf_shape(l) for l in leaves)
  sizes = tuple(math.prod(s) for s in shapes)
  if all(dt == to_dtype for dt in from_dtypes):
    pieces = [lax.reshape(l, (n,)) for l, n in zip(leaves, sizes)]
    unravel = _Unravel(treedef, sizes, shapes, None, to_dtype)
  else:
    pieces = [lax.reshape(lax.convert_element_type(l, to_dtype), (n,))
              for l, n in zip(leaves, sizes)]
    unravel = _Unravel(treedef, sizes, shapes, from_dtypes, to_dtype)
  return lax.concatenate(pieces, 0), unravel
