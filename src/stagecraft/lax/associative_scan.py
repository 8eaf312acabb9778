"""`associative_scan`: an inclusive scan with any associative binary operation, in parallel
(log depth), composed of slices, pads and concatenates (JAX's `lax.associative_scan`).

The cumulative reductions (`cumprod`, `cummax`, `cummin`, `cumlogsumexp`; lax/cumulative.py)
take their JVPs from the JVP of this composition, as in JAX: their single-op lowering
(`reduce_window`) is not differentiable, but each step here is.
"""
from __future__ import annotations

import operator
from typing import Any, Callable

import numpy as np

from stagecraft import core, dtypes, tree_util
from stagecraft.tree_util import treedef_str
from stagecraft.lax import utils
from stagecraft.lax.elementwise import add, bitwise_or
from stagecraft.lax.shape import concatenate, pad, rev, slice_in_dim

__all__ = ["associative_scan"]


def _interleave(a: Any, b: Any, axis: int) -> Any:
  """`a` and `b` interleaved along `axis` (a first): `a[0], b[0], a[1], b[1], ...`, where
  `a` has as many elements as `b` or one more. Each is padded with zeros into the other's
  gaps and the two are added (OR for bool)."""
  a_aval, b_aval = core.get_aval(a), core.get_aval(b)
  na, nb = a_aval.shape[axis], b_aval.shape[axis]
  a_pad = [(0, 0, 0)] * a_aval.ndim
  b_pad = [(0, 0, 0)] * b_aval.ndim
  a_pad[axis] = (0, 1 if na == nb else 0, 1)
  b_pad[axis] = (1, 0 if na == nb else 1, 1)
  op = bitwise_or if a_aval.dtype == dtypes.bool_ else add
  return op(pad(a, np.zeros((), a_aval.dtype), a_pad),
            pad(b, np.zeros((), b_aval.dtype), b_pad))


def associative_scan(fn: Callable[[Any, Any], Any], elems: Any, reverse: bool = False,
                     axis: int = 0) -> Any:
  """Scans `elems` along `axis` with the associative binary operation `fn`, in parallel.

  Element k of the result combines elements 0..k of `elems`: for `elems = [a, b, c, ...]`
  it is `[a, fn(a, b), fn(fn(a, b), c), ...]`; with `reverse=True` and
  `elems = [..., x, y, z]` it is `[..., fn(fn(z, y), x), fn(z, y), z]`. `fn` is applied
  O(log n) times, each time to whole arrays of pairs (so it must work elementwise along
  `axis`), with about 2n applications in all.

  Args:
    fn: `fn(a, b) -> c`, associative (`fn(a, fn(b, c)) == fn(fn(a, b), c)`); `a`, `b` and
      `c` are pytrees like `elems` whose arrays have any size `m` in place of the `axis`
      dimension, combined elementwise along it.
    elems: an array `T[*s]` or a pytree of arrays that share the size `n` of dimension
      `axis`.
    reverse: scan from the end of `axis` towards its start.
    axis: the dimension to scan; negative counts from the end.

  Returns:
    A pytree with the structure, shapes and dtypes of `elems`.

  Raises:
    TypeError: if `fn` is not callable.
    ValueError: if `axis` is out of range or the arrays differ in the size of `axis`.

  Algorithm: Blelloch's parallel prefix scan, as JAX implements it: combine adjacent
  pairs, scan the half-size result recursively (its elements are the odd elements of the
  answer), combine those with the remaining even elements, and interleave the two.

  References:
    Blelloch, Guy E. 1990. "Prefix Sums and Their Applications." Technical Report
    CMU-CS-90-190, School of Computer Science, Carnegie Mellon University.

  Examples:
    >>> import numpy as np
    >>> from stagecraft import lax
    >>> np.asarray(associative_scan(lax.add, np.arange(4, dtype=np.int32)))
    array([0, 1, 3, 6], dtype=int32)
    >>> np.asarray(associative_scan(lax.add, np.arange(4, dtype=np.int32), reverse=True))
    array([6, 6, 5, 3], dtype=int32)
    >>> np.asarray(associative_scan(lax.max, np.array([[1, 5], [3, 2], [4, 1]], np.int32)))
    array([[1, 5],
           [3, 5],
           [4, 5]], dtype=int32)
  """
  if not callable(fn):
    raise TypeError("lax.associative_scan: fn argument should be callable.")
  elems_flat, tree = tree_util.tree_flatten(elems)
  if not elems_flat:
    raise ValueError("associative_scan: elems has no arrays; pass an array or a pytree of "
                     "arrays.")
  ndim = core.get_aval(elems_flat[0]).ndim
  if ndim == 0:   # JAX's words (its axis canonicalization)
    raise ValueError(f"axis {axis} is out of bounds for array of dimension 0")
  (axis,) = utils.canonicalize_axes("associative_scan", (operator.index(axis),), ndim)
  num_elems = core.get_aval(elems_flat[0]).shape[axis]
  shapes = [core.get_aval(e).shape for e in elems_flat]
  if not all(len(s) > axis and s[axis] == num_elems for s in shapes):
    # NB: JAX's words, "first dimension" whatever the axis
    raise ValueError(f"Array inputs to associative_scan must have the same first dimension. "
                     f"(saw: {shapes})")
  if reverse:
    elems_flat = [rev(e, (axis,)) for e in elems_flat]

  def combine(a_flat, b_flat):
    c = fn(tree_util.tree_unflatten(tree, a_flat), tree_util.tree_unflatten(tree, b_flat))
    c_flat, c_tree = tree_util.tree_flatten(c)
    if c_tree != tree:
      raise TypeError(f"associative_scan: fn must return a value with the structure of "
                      f"elems, {treedef_str(tree)}, but returned {treedef_str(c_tree)}.")
    return c_flat

  def scan(elems):
    n = core.get_aval(elems[0]).shape[axis]
    if n < 2:
      return elems
    # Combine adjacent pairs; scanning the pairs gives the odd elements of the answer.
    reduced = combine([slice_in_dim(e, 0, -1, stride=2, axis=axis) for e in elems],
                      [slice_in_dim(e, 1, None, stride=2, axis=axis) for e in elems])
    odd_elems = scan(reduced)
    # Each even element (after the first) is an odd element combined with the next input.
    if n % 2 == 0:
      even_elems = combine([slice_in_dim(e, 0, -1, axis=axis) for e in odd_elems],
                           [slice_in_dim(e, 2, None, stride=2, axis=axis) for e in elems])
    else:
      even_elems = combine(odd_elems,
                           [slice_in_dim(e, 2, None, stride=2, axis=axis) for e in elems])
    even_elems = [concatenate([slice_in_dim(e, 0, 1, axis=axis), r], axis)
                  for e, r in zip(elems, even_elems)]
    return [_interleave(even, odd, axis) for even, odd in zip(even_elems, odd_elems)]

  scans = scan(elems_flat)
  if reverse:
    scans = [rev(s, (axis,)) for s in scans]
  return tree_util.tree_unflatten(tree, scans)
