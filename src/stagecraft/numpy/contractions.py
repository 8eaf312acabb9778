"""Tensor contractions on `dot_general`: matmul, dot, vdot, tensordot, einsum.

einsum's pairwise contraction order comes from opt_einsum (Smith & Gray, "opt_einsum - A
Python package for optimizing contraction order for einsum-like expressions", JOSS 2018);
each pairwise step is one `dot_general` with batch and contracting dimensions.
"""
from __future__ import annotations

import collections
import functools
import operator
from typing import Any, Callable, Sequence

import numpy as np
import opt_einsum

from stagecraft import core, dtypes, lax
from stagecraft.lax.spmd import reshard, reshard_to_type
from stagecraft.sharding import NamedSharding
from stagecraft.runtime.array import Array
from stagecraft.numpy.array_constructors import array, asarray
from stagecraft.numpy.array_creation import zeros_like
from stagecraft.numpy.manipulation import (broadcast_shapes, broadcast_to, expand_dims,
                                           flip, moveaxis, ravel, reshape, squeeze)
from stagecraft.numpy.ufuncs import conjugate, multiply
from stagecraft.numpy.util import (ArrayLike, canonicalize_axis, check_arraylike, dtype_of,
                                   ensure_arraylike, ndim_of, promote_dtypes,
                                   promote_dtypes_inexact, shape_of)
from stagecraft.numpy.vectorize import vectorize
from stagecraft.pjit import jit

__all__ = ["matmul", "dot", "vdot", "tensordot", "einsum", "einsum_path", "outer", "inner",
           "kron", "cross", "vecdot", "matvec", "vecmat", "convolve", "correlate"]


def _dot(a, b, contract, batch=((), ()), precision=None, preferred_element_type=None,
         out_sharding=None, fun_name="dot"):
  # NB: as JAX's jnp functions, the operands keep their dtypes (dot_general takes mixed
  # ones) and the promoted dtype is passed as the preferred element type (printed
  # `preferred_element_type=float32`); the result takes the promotion's weak type.
  if preferred_element_type is None:
    preferred_element_type, weak = dtypes.result_type(a, b, return_weak_type_flag=True)
  else:
    preferred_element_type = dtypes.check_user_dtype(preferred_element_type, fun_name)
    weak = False
  out = lax.dot_general(a, b, (contract, batch), precision=precision,
                        preferred_element_type=preferred_element_type,
                        out_sharding=out_sharding)
  return lax.convert_element_type(out, preferred_element_type, weak)


def matmul(a: ArrayLike, b: ArrayLike, *, precision=None, preferred_element_type=None,
           out_sharding=None):
  """Matrix product with NumPy's `matmul` semantics.

  Shapes: `[..., n, k] @ [..., k, m] -> [..., n, m]` with broadcast batch dimensions; a 1-D
  operand is a vector (its dimension is removed from the result). `out_sharding` (a
  PartitionSpec or NamedSharding of the result) is the contraction's, as in
  `lax.dot_general`: needed when a contracting dimension is split on both sides.

  Raises:
    ValueError: for 0-d operands, mismatched contracting sizes or unbroadcastable batches.
  """
  check_arraylike("matmul", a, b)   # as JAX's: lists are no array-likes
  a, b = asarray(a), asarray(b)
  sa, sb = shape_of(a), shape_of(b)
  if not sa or not sb:
    raise ValueError(f"matmul: 0-d operands are not allowed (shapes {sa} and {sb}); use "
                     f"multiply or the * operator.")
  kw = dict(precision=precision, preferred_element_type=preferred_element_type,
            fun_name="matmul")
  ca = len(sa) - 1
  cb = 0 if len(sb) == 1 else len(sb) - 2
  if sa[ca] != sb[cb]:   # JAX's error (the contraction's)
    raise TypeError(f"dot_general requires contracting dimensions to have the same shape, "
                    f"got ({sa[ca]},) and ({sb[cb]},).")
  if len(sa) == 1 or len(sb) <= 2:
    # A vector operand or an unbatched right matrix: one dot_general whose output is already
    # in matmul's order (a's free dims, then b's), no reshape or transpose.
    return _dot(a, b, ((ca,), (cb,)), out_sharding=out_sharding, **kw)
  if len(sa) == 2:
    # [n, k] @ [..., k, m]: contract without broadcasting a, then move n next to m.
    # NB: as JAX's matmul, `out_sharding` is the contraction's (dimensions n, *batch, m).
    out = _dot(a, b, ((1,), (cb,)), out_sharding=out_sharding, **kw)
    nb = len(sb) - 2
    return lax.transpose(out, (*range(1, nb + 1), 0, nb + 1))
  batch = broadcast_shapes(sa[:-2], sb[:-2])
  a = broadcast_to(a, (*batch, *sa[-2:]))
  b = broadcast_to(b, (*batch, *sb[-2:]))
  nb = len(batch)
  return _dot(a, b, ((nb + 1,), (nb,)), (tuple(range(nb)), tuple(range(nb))),
              out_sharding=out_sharding, **kw)


def dot(a: ArrayLike, b: ArrayLike, *, precision=None, preferred_element_type=None,
        out_sharding=None):
  """NumPy's `dot`: multiply for scalars, inner product of vectors, and for N-D the sum
  over the last axis of `a` and the second-to-last of `b` (result: a's free dims, then b's).
  `out_sharding` is the contraction's, as in `lax.dot_general`.
  """
  check_arraylike("dot", a, b)   # as JAX's: lists are no array-likes
  a, b = asarray(a), asarray(b)
  sa, sb = shape_of(a), shape_of(b)
  if not sa or not sb:   # as JAX's: a dot_general that contracts nothing
    return _dot(a, b, ((), ()), precision=precision,
                preferred_element_type=preferred_element_type, out_sharding=out_sharding)
  cb = 0 if len(sb) == 1 else len(sb) - 2
  if sa[-1] != sb[cb]:   # JAX's error (the contraction's)
    raise TypeError(f"dot_general requires contracting dimensions to have the same shape, "
                    f"got ({sa[-1]},) and ({sb[cb]},).")
  return _dot(a, b, ((len(sa) - 1,), (cb,)), precision=precision,
              preferred_element_type=preferred_element_type, out_sharding=out_sharding)


def vdot(a: ArrayLike, b: ArrayLike, *, precision=None, preferred_element_type=None):
  """Dot product of the flattened inputs (the first conjugated for complex inputs)."""
  a, b = ensure_arraylike("vdot", a, b)
  if dtypes.is_complex(dtype_of(a)):   # NB: conjugated before the ravel, as JAX's
    a = conjugate(a)
  return dot(ravel(a), ravel(b), precision=precision,
             preferred_element_type=preferred_element_type)


def tensordot(a: ArrayLike, b: ArrayLike, axes: int | Sequence = 2, *, precision=None,
              preferred_element_type=None, out_sharding=None):
  """Sums products over `axes`: an int n (last n of a with first n of b) or a pair of
  sequences of axes. `out_sharding` is the contraction's, as in `lax.dot_general`.

  Raises:
    TypeError: for an int `axes` larger than either rank (JAX's error).
    ValueError: for mismatched axis sizes or counts.
  """
  check_arraylike("tensordot", a, b)   # as JAX's: lists are no array-likes
  a, b = asarray(a), asarray(b)
  na, nb = len(shape_of(a)), len(shape_of(b))
  if isinstance(axes, (int, np.integer)):
    n = operator.index(axes)
    if n > min(na, nb):   # JAX's error (NumPy raises ValueError)
      raise TypeError(f"Number of tensordot axes (axes {n}) exceeds input ranks "
                      f"({shape_of(a)} and {shape_of(b)})")
    n = max(n, 0)          # as JAX: a negative count contracts nothing (an outer product)
    ca, cb = tuple(range(na - n, na)), tuple(range(n))
  else:
    if not isinstance(axes, (tuple, list)) or len(axes) != 2:   # JAX's error
      raise TypeError("tensordot axes argument must be an int, a pair of ints, or a pair of "
                      "lists/tuples of ints.")
    ax_a, ax_b = axes
    ints = isinstance(ax_a, (int, np.integer)) and isinstance(ax_b, (int, np.integer))
    if not ints and not (isinstance(ax_a, (tuple, list)) and isinstance(ax_b, (tuple, list))):
      raise TypeError(f"tensordot requires both axes lists to be either ints, tuples or "
                      f"lists, got {ax_a} and {ax_b}")
    if not ints and len(ax_a) != len(ax_b):   # JAX's error, naming the lists as given
      raise TypeError(f"tensordot requires axes lists to have equal length, got {ax_a} and "
                      f"{ax_b}.")
    ax_a = (ax_a,) if ints else tuple(ax_a)
    ax_b = (ax_b,) if ints else tuple(ax_b)
    ca = tuple(canonicalize_axis(x, na, "tensordot") for x in ax_a)
    cb = tuple(canonicalize_axis(x, nb, "tensordot") for x in ax_b)
  return _dot(a, b, (ca, cb), precision=precision,
              preferred_element_type=preferred_element_type, out_sharding=out_sharding,
              fun_name="tensordot")


class _LeftToRight(opt_einsum.paths.PathOptimizer):
  """The path of `optimize=False`: contract the operands pairwise, left to right."""

  def __call__(self, inputs, output, size_dict, memory_limit=None):
    return [(0, 1)] * (len(inputs) - 1)


class _Shape:
  """What opt_einsum sees of an operand: its shape (the operand stays on our side)."""

  def __init__(self, shape):
    self.shape = shape


def _path_type(optimize):
  return "optimal" if optimize is True else _LeftToRight() if optimize is False else optimize


def einsum(subscripts, /, *operands, out: None = None, optimize: str | bool | list = "auto",
           precision=None, preferred_element_type=None, out_sharding=None,
           _dot_general: Callable[..., Any] | None = None):
  """Einstein summation, e.g. `einsum('bij,bjk->bik', x, y)`, with NumPy's conventions:
  implicit output (the indices seen once, sorted), `...` for broadcast dimensions, repeated
  indices within one operand (`'ii->i'` takes a diagonal, `'ii->'` a trace, `'iij->j'`),
  and the interleaved form `einsum(x, [0, 1], y, [1, 2], [0, 2])`.

  Args:
    subscripts: the subscripts string, or the first operand of the interleaved form.
    operands: arrays (after promotion to a common dtype).
    out: unsupported (must be None).
    optimize: the contraction order: 'auto' (default), any opt_einsum strategy ('greedy',
      'optimal', 'dp', 'branch-2', 'random-greedy', 'auto-hq', ...), True ('optimal'),
      False (left to right), or an explicit path such as `[(0, 1), (0, 1)]` (the first
      result of `einsum_path`).
    precision, preferred_element_type: passed to each `dot_general`.
    out_sharding: the result's sharding (a NamedSharding, or a PartitionSpec under
      `set_mesh`): as JAX's, the contractions run on unsplit operand types and the result
      is resharded to it (its type on a mesh of Explicit axes).
    _dot_general: JAX's private override of the contraction, called as
      `_dot_general(lhs, rhs, dimension_numbers, precision, preferred_element_type=...)`
      in place of `lax.dot_general` (flax's fp8 and attention layers pass one).

  Returns:
    Array with the output indices' dimensions, in the promoted dtype (or
    `preferred_element_type`).

  Raises:
    ValueError: for malformed subscripts or mismatched label sizes (opt_einsum's message).
    NotImplementedError: for `out`.

  Algorithm: opt_einsum (Smith & Gray, JOSS 2018) orders the contractions; in each step a
  label repeated within one operand is masked with a Kronecker delta and summed, labels seen in
  only one operand and not kept are summed out, and a pair of operands is contracted by
  one `dot_general` with batch and contracting dimensions.
  """
  if out is not None:
    raise NotImplementedError("The 'out' argument to jnp.einsum is not supported.")
  if out_sharding is not None and _one_contraction(subscripts, operands, optimize):
    # NB: as JAX's, one contraction of two operands passes out_sharding to its dot_general
    # (so an unreduced result is typed by dot_general's rule)
    return _einsum(subscripts, operands, optimize, precision, preferred_element_type,
                   _dot_general, out_sharding)
  if out_sharding is not None:
    unsplit = [reshard_to_type(x, None, getattr(core.get_aval(x), "_sharding", None))
               if isinstance(x, (Array, core.Tracer)) else x for x in (subscripts, *operands)]
    return reshard(einsum(*unsplit, optimize=optimize, precision=precision,
                          preferred_element_type=preferred_element_type,
                          _dot_general=_dot_general), out_sharding)
  return _einsum(subscripts, operands, optimize, precision, preferred_element_type,
                 _dot_general, None)


def _one_contraction(subscripts, operands, optimize) -> bool:
  """Whether einsum's path is a single contraction of two operands."""
  args = (subscripts, *operands)
  if isinstance(subscripts, str):
    is_array = [i > 0 for i in range(len(args))]
  else:
    is_array = [i % 2 == 0 and i != len(args) - 1 for i in range(len(args))]
  if sum(is_array) != 2:
    return False
  proxies = [_Shape(shape_of(a)) if arr else a for a, arr in zip(args, is_array)]
  _, contractions = opt_einsum.contract_path(
      *proxies, einsum_call=True, use_blas=True, optimize=_path_type(optimize))
  return len(contractions) == 1 and len(contractions[0][0]) == 2


def _einsum(subscripts, operands, optimize, precision, preferred_element_type, _dot_general,
            out_sharding):
  args = (subscripts, *operands)
  if isinstance(subscripts, str):
    is_array = [i > 0 for i in range(len(args))]
  else:   # interleaved: arrays at even positions, sublists at odd ones, maybe an output one
    is_array = [i % 2 == 0 and i != len(args) - 1 for i in range(len(args))]
  arrays = [asarray(getattr(a, "__jax_array__", lambda: a)()) if arr else a
            for a, arr in zip(args, is_array)]
  proxies = [_Shape(shape_of(a)) if arr else a for a, arr in zip(arrays, is_array)]
  ops_by_id = {id(p): a for p, a, arr in zip(proxies, arrays, is_array) if arr}
  ordered, contractions = opt_einsum.contract_path(
      *proxies, einsum_call=True, use_blas=True, optimize=_path_type(optimize))
  operands = [asarray(ops_by_id[id(p)]) for p in ordered]
  # NB: as JAX's: the operands keep their dtypes; sums convert to the promoted dtype and
  # dot_general takes it as its preferred element type.
  if preferred_element_type is None:
    pet, weak = dtypes.result_type(*operands, return_weak_type_flag=True)
  else:
    pet, weak = dtypes.check_user_dtype(preferred_element_type, "einsum"), False
  for contract_inds, _, einsum_str, _, _ in contractions:
    ops = [operands.pop(i) for i in contract_inds]
    inputs, output = einsum_str.split("->")
    in_specs = inputs.split(",")
    if len(ops) == 1:
      result = _einsum_unary(ops[0], in_specs[0], output, pet)
    elif len(ops) > 2:
      # NB: JAX's message
      raise NotImplementedError(
          "jax.numpy.einsum does not support simultaneous contraction of 3 or more operands. "
          "Typically this means you've passed an unsupported path to the einsum optimize "
          "parameter.")
    else:
      result = _einsum_binary(ops[0], ops[1], in_specs[0], in_specs[1], output, precision,
                              pet, _dot_general or lax.dot_general, out_sharding)
    operands.append(result)
  return lax.convert_element_type(operands[0], pet, weak)


def _delta(shape: tuple, axes: list[int]):
  """The bool Kronecker delta over `axes` of `shape`: true where the indices along `axes` are
  all equal (uint32 iotas compared pairwise), broadcast along the other axes."""
  base = tuple(shape[a] for a in axes)
  iotas = [lax.broadcasted_iota(np.uint32, base, i) for i in range(len(base))]
  eye = functools.reduce(lax.bitwise_and, [lax.eq(i, j) for i, j in zip(iotas[:-1], iotas[1:])])
  if base == tuple(shape):
    return eye
  return lax.broadcast_in_dim(eye, tuple(shape), tuple(axes))


def _summable(x, pet):
  """`x` converted to `pet` where promoting with it changes x's dtype (JAX's einsum sums in
  the promoted dtype)."""
  return x if dtypes.result_type(x, pet) == dtype_of(x) else lax.convert_element_type(x, pet)


def _reduce_add(x, axes: tuple):
  """The sum of `x` over `axes`; for bool operands their OR (JAX's einsum reduces bools with
  `bitwise_or`)."""
  return (lax.reduce_or if dtype_of(x) == dtypes.bool_ else lax.reduce_sum)(x, axes)


def _sum_repeats(x, spec: str, keep: str, pet) -> tuple:
  """`x` with each label repeated in `spec` reduced to one axis (kept, last of its axes, if
  in `keep`) or summed out: masked with the Kronecker delta of its axes and summed (JAX's
  einsum). Returns `(x, the spec that labels it)`."""
  for c, count in collections.Counter(spec).items():
    if count > 1:
      axes = [i for i, n in enumerate(spec) if n == c]
      x = lax.select(_delta(shape_of(x), axes), x, lax.full_like(x, 0))
      x = _summable(x, pet)
      if c not in keep:
        x = _reduce_add(x, tuple(axes))
        spec = spec.replace(c, "")
      else:
        x = _reduce_add(x, tuple(axes[:-1]))
        spec = spec.replace(c, "", count - 1)
  return x, spec


def _sum_uniques(x, spec: str, keep: set[str], pet):
  """`x` with the labels seen once in `spec` and not in `keep` summed out."""
  axes = tuple(i for i, c in enumerate(spec) if c not in keep and spec.count(c) == 1)
  if axes:
    x = _reduce_add(_summable(x, pet), axes)
    spec = "".join(c for i, c in enumerate(spec) if i not in axes)
  return x, spec


def _einsum_unary(x, spec: str, out: str, pet):
  x, spec = _sum_uniques(x, spec, set(out), pet)
  x, spec = _sum_repeats(x, spec, out, pet)
  perm = tuple(spec.index(c) for c in out)
  return lax.transpose(x, perm) if perm != tuple(range(len(perm))) else x


def _squeeze_broadcast_dims(x, spec: str, other_shape: tuple, other_spec: str):
  """`x` without its size-1 dimensions whose label has another size in the other operand
  (they broadcast against it; JAX's einsum `filter_singleton_dims`), and their spec."""
  drop = [i for i, c in enumerate(spec) if shape_of(x)[i] == 1 and c in other_spec
          and other_shape[other_spec.index(c)] != 1]
  if not drop:
    return x, spec
  return lax.squeeze(x, drop), "".join(c for i, c in enumerate(spec) if i not in drop)


def _einsum_binary(a, b, sa: str, sb: str, out: str, precision, preferred_element_type,
                   dot_general: Callable[..., Any] = lax.dot_general, out_sharding=None):
  a, sa = _squeeze_broadcast_dims(a, sa, shape_of(b), sb)
  b, sb = _squeeze_broadcast_dims(b, sb, shape_of(a), sa)
  a, sa = _sum_uniques(a, sa, set(sb) | set(out), preferred_element_type)
  b, sb = _sum_uniques(b, sb, set(sa) | set(out), preferred_element_type)
  a, sa = _sum_repeats(a, sa, out + sb, preferred_element_type)
  b, sb = _sum_repeats(b, sb, out + sa, preferred_element_type)
  batch = [c for c in sa if c in sb and c in out]
  contract = [c for c in sa if c in sb and c not in out]
  free = lambda s, t: "".join(c for c in s if c not in t)
  if out == "".join(batch) + free(sb, sa) + free(sa, sb):
    # NB: as JAX's einsum, the second operand goes first when that order gives the result
    # without a transpose (opt_einsum lists the operands of a step last first); else the
    # given order, transposed if need be.
    a, b, sa, sb = b, a, sb, sa
  dn = ((tuple(sa.index(c) for c in contract), tuple(sb.index(c) for c in contract)),
        (tuple(sa.index(c) for c in batch), tuple(sb.index(c) for c in batch)))
  rspec = "".join(batch) + "".join(c for c in sa if c not in sb) + "".join(
      c for c in sb if c not in sa)
  extra = {}
  if out_sharding is not None:
    # NB: the result's entries in dot_general's order of labels (JAX's inverse sharding)
    spec = out_sharding.spec if isinstance(out_sharding, NamedSharding) else out_sharding
    ents = tuple(spec) + (None,) * (len(out) - len(spec))
    spec = spec.update(partitions=[ents[out.index(c)] for c in rspec])
    extra["out_sharding"] = (out_sharding.update(spec=spec)
                             if isinstance(out_sharding, NamedSharding) else spec)
  r = dot_general(a, b, dn, precision, preferred_element_type=preferred_element_type, **extra)
  perm = tuple(rspec.index(c) for c in out)
  return lax.transpose(r, perm) if perm != tuple(range(len(perm))) else r


def einsum_path(subscripts, /, *operands, optimize: str | bool | list = "auto"):
  """The contraction order `einsum` would use, as opt_einsum reports it.

  Args:
    subscripts, operands: as for `einsum` (only the operands' shapes are used; objects with
      a `shape`, such as `ShapeDtypeStruct`, are accepted).
    optimize: as for `einsum`: 'auto', an opt_einsum strategy, True ('optimal'), False (left
      to right) or an explicit path.

  Returns:
    `(path, info)`: the list of contracted position tuples (usable as `optimize=` of
    `einsum`) and opt_einsum's `PathInfo` report (printable).

  Raises:
    ValueError: as `einsum`.
  """
  args = [a if isinstance(a, (str, list)) or hasattr(a, "shape") or
          (i > 0 and isinstance(a, tuple)) else asarray(a)
          for i, a in enumerate((subscripts, *operands))]
  return opt_einsum.contract_path(*args, optimize=_path_type(optimize))


def outer(a: ArrayLike, b: ArrayLike, out: None = None):
  """The outer product of the flattened inputs: `[m] x [n] -> [m, n]` (logical AND for
  bool)."""
  if out is not None:
    raise NotImplementedError("The 'out' argument to jnp.outer is not supported.")
  check_arraylike("outer", a, b)   # as JAX's: lists are no array-likes
  a, b = ravel(asarray(a)), ravel(asarray(b))
  return multiply(expand_dims(a, 1), expand_dims(b, 0))


def inner(a: ArrayLike, b: ArrayLike, *, precision=None, preferred_element_type=None):
  """Sum of products over the last axes: `[*a, k] x [*b, k] -> [*a, *b]` (a product for
  scalars).

  Raises:
    ValueError: if the last dimensions differ.
  """
  check_arraylike("inner", a, b)   # as JAX's: lists are no array-likes
  a, b = asarray(a), asarray(b)
  if not shape_of(a) or not shape_of(b):
    return multiply(a, b)
  if shape_of(a)[-1] != shape_of(b)[-1]:
    raise ValueError(f"inner: the last dimensions differ: {shape_of(a)} and {shape_of(b)}.")
  # NB: JAX's inner is its tensordot, whose name its messages give.
  return _dot(a, b, ((len(shape_of(a)) - 1,), (len(shape_of(b)) - 1,)), precision=precision,
              preferred_element_type=preferred_element_type, fun_name="tensordot")


@jit
def kron(a: ArrayLike, b: ArrayLike):
  """The Kronecker product: blocks `a[i, j] * b`, shape `a.shape * b.shape` (after left-
  padding the smaller rank with 1s). Jitted as JAX's (`jit[name=kron]`): both operands get
  interleaved size-1 axes and one `mul` broadcasts them, then a reshape merges the pairs.

  Raises:
    TypeError: `a` or `b` not an array or scalar (a list).
  """
  check_arraylike("kron", a, b)
  a, b = promote_dtypes(a, b)
  na, nb = ndim_of(a), ndim_of(b)
  if na < nb:
    a = expand_dims(a, tuple(range(nb - na)))
  elif nb < na:
    b = expand_dims(b, tuple(range(na - nb)))
  nd = ndim_of(a)
  out_shape = tuple(x * y for x, y in zip(shape_of(a), shape_of(b)))
  a = expand_dims(a, tuple(range(1, 2 * nd, 2)))
  b = expand_dims(b, tuple(range(0, 2 * nd, 2)))
  return reshape(lax.mul(a, b), out_shape)


@jit(static_argnames=("axisa", "axisb", "axisc", "axis"))
def cross(a: ArrayLike, b: ArrayLike, axisa: int = -1, axisb: int = -1, axisc: int = -1,
          axis: int | None = None):
  """The cross product of 2- or 3-vectors along the given axes (broadcast elsewhere); for
  two 2-vectors, the scalar z-component.

  Jitted as JAX's (`jit[name=cross]`; static axes): the vector axes move last, the three
  components are computed from the components of the inputs (a missing third one is 0) and
  joined along a new leading axis (`concatenate`), which moves to `axisc`.

  Args:
    a, b: arrays `[*s, 2 or 3]` (the vector axis at `axisa` / `axisb`), broadcast together.
    axisa, axisb, axisc: the vector axes of `a`, `b` and the result.
    axis: overrides all three.

  Returns:
    `[*s, 3]` (vector axis at `axisc`), or `[*s]` for two 2-vectors.

  Raises:
    TypeError: `a` or `b` not an array or scalar (a list).
    ValueError: if a vector dimension is neither 2 nor 3.
  """
  check_arraylike("cross", a, b)
  if axis is not None:
    axisa = axisb = axisc = axis
  a = moveaxis(a, axisa, -1)
  b = moveaxis(b, axisb, -1)
  if a.shape[-1] not in (2, 3) or b.shape[-1] not in (2, 3):
    raise ValueError("Dimension must be either 2 or 3 for cross product")
  if a.shape[-1] == 2 and b.shape[-1] == 2:
    return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]
  a0, a1 = a[..., 0], a[..., 1]
  a2 = a[..., 2] if a.shape[-1] == 3 else zeros_like(a0)
  b0, b1 = b[..., 0], b[..., 1]
  b2 = b[..., 2] if b.shape[-1] == 3 else zeros_like(b0)
  c = array([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0])
  return moveaxis(c, 0, axisc)


def vecdot(x1: ArrayLike, x2: ArrayLike, /, *, axis: int = -1, precision=None,
           preferred_element_type=None):
  """The (conjugated) dot product of vectors along `axis`, broadcasting the other axes:
  `sum(conj(x1) * x2, axis)`.

  As JAX's: `vdot` vectorized over the broadcast batch (signature `(n),(n)->()`), so a traced
  program holds one batched `dot_general`.

  Args:
    x1, x2: arrays `[*s1, n]`, `[*s2, n]` (the vector axis at `axis`), batch shapes
      broadcast together.
    axis: the vector axis.

  Returns:
    `[*broadcast(s1, s2)]`, the promoted dtype (or `preferred_element_type`).

  Raises:
    TypeError: `x1` or `x2` not an array or scalar (a list).
    ValueError: if the vector dimensions differ.
  """
  x1, x2 = ensure_arraylike("jnp.vecdot", x1, x2)
  if x1.shape[axis] != x2.shape[axis]:
    raise ValueError(f"axes must match; got shapes {x1.shape} and {x2.shape} with {axis=}")
  x1, x2 = moveaxis(x1, axis, -1), moveaxis(x2, axis, -1)
  return vectorize(functools.partial(vdot, precision=precision,
                                     preferred_element_type=preferred_element_type),
                   signature="(n),(n)->()")(x1, x2)


def matvec(x1: ArrayLike, x2: ArrayLike, /):
  """Matrix-vector product with broadcast batches: `[..., m, n] x [..., n] -> [..., m]`."""
  check_arraylike("matvec", x1, x2)
  return squeeze(matmul(x1, expand_dims(asarray(x2), -1)), -1)


def vecmat(x1: ArrayLike, x2: ArrayLike, /):
  """Vector-matrix product `conj(x1) @ x2` with broadcast batches:
  `[..., m] x [..., m, n] -> [..., n]`."""
  check_arraylike("matvec", x1, x2)   # NB: JAX 0.10.2 names matvec here
  return squeeze(matmul(expand_dims(conjugate(asarray(x1)), -2), x2), -2)


@jit(static_argnames=("mode", "op", "precision", "preferred_element_type"))
def _conv(x, y, mode, op, precision, preferred_element_type=None):
  """The body of `convolve` and `correlate` (jitted under this name, as JAX's): one
  `conv_general_dilated` of `x[None, None, :]` with (flipped, or conjugated) `y`, padded for
  `mode`; correlate of a shorter `x` swaps the operands and reverses the result."""
  if ndim_of(x) != 1 or ndim_of(y) != 1:
    raise ValueError(f"{op}() only support 1-dimensional inputs.")
  if preferred_element_type is None:   # NumPy's default: an inexact result
    x, y = promote_dtypes_inexact(x, y)
  else:
    x, y = promote_dtypes(x, y)
  if shape_of(x)[0] == 0 or shape_of(y)[0] == 0:
    raise ValueError(f"{op}: inputs cannot be empty, got shapes {shape_of(x)} and {shape_of(y)}.")
  reverse = False
  if op == "correlate":
    y = conjugate(y)
    if shape_of(x)[0] < shape_of(y)[0]:
      x, y, reverse = y, x, True
  elif op == "convolve":
    if shape_of(x)[0] < shape_of(y)[0]:
      x, y = y, x
    y = flip(y)
  m = shape_of(y)[0]
  if mode == "valid":
    padding = [(0, 0)]
  elif mode == "same":
    padding = [(m // 2, m - m // 2 - 1)]
  elif mode == "full":
    padding = [(m - 1, m - 1)]
  else:
    raise ValueError("mode must be one of ['full', 'same', 'valid']")
  out = lax.conv_general_dilated(x[None, None, :], y[None, None, :], (1,), padding,
                                 precision=precision,
                                 preferred_element_type=preferred_element_type)
  return out[0, 0, ::-1] if reverse else out[0, 0, :]


@jit(static_argnames=("mode", "precision", "preferred_element_type"))
def convolve(a: ArrayLike, v: ArrayLike, mode: str = "full", *, precision=None,
             preferred_element_type=None):
  """Discrete linear convolution of 1-D arrays: `out[k] = sum_j a[j] * v[k - j]`.

  Args:
    a: `[n]`; v: `[m]` (integers promote to the default float unless
      `preferred_element_type` is given).
    mode: 'full' (`n + m - 1` outputs), 'same' (`max(n, m)`) or 'valid'
      (`max(n, m) - min(n, m) + 1`).

  Raises:
    ValueError: for non-1-D or empty inputs, or an unknown mode.
  """
  a, v = ensure_arraylike("convolve", a, v)
  return _conv(a, v, mode=mode, op="convolve", precision=precision,
               preferred_element_type=preferred_element_type)


@jit(static_argnames=("mode", "precision", "preferred_element_type"))
def correlate(a: ArrayLike, v: ArrayLike, mode: str = "valid", *, precision=None,
              preferred_element_type=None):
  """Cross-correlation of 1-D arrays: `out[k] = sum_j a[j + k] * conj(v[j])` (modes as in
  `convolve`; default 'valid').

  Raises:
    ValueError: for non-1-D or empty inputs, or an unknown mode.
  """
  a, v = ensure_arraylike("correlate", a, v)
  return _conv(a, v, mode=mode, op="correlate", precision=precision,
               preferred_element_type=preferred_element_type)
