"""Tensor contractions on `dot_general`: matmul, dot, vdot, tensordot, einsum.

einsum's pairwise contraction order comes from opt_einsum (Smith & Gray, "opt_einsum - A
Python package for optimizing contraction order for einsum-like expressions", JOSS 2018);
each pairwise step is one `dot_general` with batch and contracting dimensions.
"""
from __future__ import annotations

import operator
from typing import Sequence

import numpy as np
import opt_einsum

from stagecraft import dtypes, lax
from stagecraft.numpy import lax_numpy as jnp
from stagecraft.numpy.lax_numpy import ArrayLike, _dtype, _shape, asarray


def _dot(a, b, contract, batch=((), ()), precision=None, preferred_element_type=None):
  return lax.dot_general(a, b, (contract, batch), precision=precision,
                         preferred_element_type=preferred_element_type)


def matmul(a: ArrayLike, b: ArrayLike, *, precision=None, preferred_element_type=None):
  """Matrix product with NumPy's `matmul` semantics.

  Shapes: `[..., n, k] @ [..., k, m] -> [..., n, m]` with broadcast batch dimensions; a 1-D
  operand is a vector (its dimension is removed from the result).

  Raises:
    ValueError: for 0-d operands, mismatched contracting sizes or unbroadcastable batches.
  """
  a, b = jnp.promote_dtypes(asarray(a), asarray(b))
  sa, sb = _shape(a), _shape(b)
  if not sa or not sb:
    raise ValueError(f"matmul: 0-d operands are not allowed (shapes {sa} and {sb}); use "
                     f"multiply or the * operator.")
  squeeze = []
  if len(sa) == 1:
    a = jnp.reshape(a, (1, sa[0]))
    squeeze.append(-2)
  if len(sb) == 1:
    b = jnp.reshape(b, (sb[0], 1))
    squeeze.append(-1)
  sa, sb = _shape(a), _shape(b)
  if sa[-1] != sb[-2]:
    raise ValueError(f"matmul: contracting dimensions differ: {sa[-1]} (last of the first "
                     f"operand {sa}) and {sb[-2]} (second to last of the second {sb}).")
  if len(sb) == 2:
    out = _dot(a, b, ((len(sa) - 1,), (0,)), precision=precision,
               preferred_element_type=preferred_element_type)
  else:
    batch = jnp.broadcast_shapes(sa[:-2], sb[:-2])
    a = jnp.broadcast_to(a, (*batch, *sa[-2:]))
    b = jnp.broadcast_to(b, (*batch, *sb[-2:]))
    nb = len(batch)
    out = _dot(a, b, ((nb + 1,), (nb,)), (tuple(range(nb)), tuple(range(nb))),
               precision=precision, preferred_element_type=preferred_element_type)
  if squeeze:
    nd = len(_shape(out))
    out = jnp.squeeze(out, tuple(nd + s for s in squeeze))
  return out


def dot(a: ArrayLike, b: ArrayLike, *, precision=None, preferred_element_type=None):
  """NumPy's `dot`: multiply for scalars, inner product of vectors, and for N-D the sum
  over the last axis of `a` and the second-to-last of `b` (result: a's free dims, then b's).
  """
  a, b = jnp.promote_dtypes(asarray(a), asarray(b))
  sa, sb = _shape(a), _shape(b)
  if not sa or not sb:
    return jnp.multiply(a, b)
  cb = 0 if len(sb) == 1 else len(sb) - 2
  if sa[-1] != sb[cb]:
    raise ValueError(f"dot: shapes {sa} and {sb} not aligned: {sa[-1]} (dim {len(sa) - 1}) "
                     f"!= {sb[cb]} (dim {cb}).")
  return _dot(a, b, ((len(sa) - 1,), (cb,)), precision=precision,
              preferred_element_type=preferred_element_type)


def vdot(a: ArrayLike, b: ArrayLike, *, precision=None, preferred_element_type=None):
  """Dot product of the flattened inputs (the first conjugated for complex inputs)."""
  a, b = jnp.ravel(asarray(a)), jnp.ravel(asarray(b))
  if dtypes.is_complex(_dtype(a)):
    raise NotImplementedError("vdot of complex arrays needs conj (not available yet).")
  return dot(a, b, precision=precision, preferred_element_type=preferred_element_type)


def tensordot(a: ArrayLike, b: ArrayLike, axes: int | Sequence = 2, *, precision=None,
              preferred_element_type=None):
  """Sums products over `axes`: an int n (last n of a with first n of b) or a pair of
  sequences of axes.

  Raises:
    ValueError: for mismatched axis sizes or counts.
  """
  a, b = jnp.promote_dtypes(asarray(a), asarray(b))
  na, nb = len(_shape(a)), len(_shape(b))
  if isinstance(axes, (int, np.integer)):
    n = operator.index(axes)
    if n > min(na, nb) or n < 0:
      raise ValueError(f"tensordot: axes={n} out of range for shapes {_shape(a)} and "
                       f"{_shape(b)}.")
    ca, cb = tuple(range(na - n, na)), tuple(range(n))
  else:
    if len(axes) != 2:
      raise ValueError(f"tensordot: axes must be an int or a pair of sequences, got {axes}.")
    ax_a, ax_b = axes
    ax_a = (ax_a,) if isinstance(ax_a, int) else tuple(ax_a)
    ax_b = (ax_b,) if isinstance(ax_b, int) else tuple(ax_b)
    if len(ax_a) != len(ax_b):
      raise ValueError(f"tensordot: axes {ax_a} and {ax_b} differ in length.")
    ca = tuple(jnp._canon_axis(x, na, "tensordot") for x in ax_a)
    cb = tuple(jnp._canon_axis(x, nb, "tensordot") for x in ax_b)
  return _dot(a, b, (ca, cb), precision=precision,
              preferred_element_type=preferred_element_type)


def einsum(subscripts: str, *operands: ArrayLike, optimize: str | bool = "auto",
           precision=None, preferred_element_type=None):
  """Einstein summation, e.g. `einsum('bij,bjk->bik', x, y)`.

  The contraction order comes from opt_einsum (`optimize`: 'auto', 'greedy', 'optimal',
  True or False); each pairwise contraction is one dot_general.

  Raises:
    ValueError: for malformed subscripts or operand shapes (opt_einsum's message).
    NotImplementedError: for repeated indices within one operand (diagonals).
  """
  operands = jnp.promote_dtypes(*[asarray(o) for o in operands])
  shapes = [_shape(o) for o in operands]
  # optimize=False: contract left to right, one pair at a time (opt_einsum's own False
  # contracts all operands in one step, which the pairwise lowering below cannot take).
  opt = "auto" if optimize is True else (
      ([(0, 1)] * (len(operands) - 1) or [(0,)]) if optimize is False else optimize)
  _, contractions = opt_einsum.contract_path(subscripts, *shapes, einsum_call=True,
                                             use_blas=True, optimize=opt, shapes=True)
  operands = list(operands)
  for contract_inds, _, einsum_str, _, _ in contractions:
    ops = [operands.pop(i) for i in contract_inds]
    inputs, output = einsum_str.split("->")
    in_specs = inputs.split(",")
    if len(ops) == 1:
      result = _einsum_unary(ops[0], in_specs[0], output)
    else:
      result = _einsum_binary(ops[0], ops[1], in_specs[0], in_specs[1], output, precision,
                              preferred_element_type)
    operands.append(result)
  return operands[0]


def _check_no_repeats(spec: str):
  if len(set(spec)) != len(spec):
    raise NotImplementedError(f"einsum: repeated indices within one operand ('{spec}', a "
                              f"diagonal) are not supported yet.")


def _sum_out(x, spec: str, keep: set[str]):
  axes = tuple(i for i, c in enumerate(spec) if c not in keep)
  if axes:
    x = lax.reduce_sum(x, axes)
    spec = "".join(c for c in spec if c in keep)
  return x, spec


def _einsum_unary(x, spec: str, out: str):
  _check_no_repeats(spec)
  x, spec = _sum_out(x, spec, set(out))
  perm = tuple(spec.index(c) for c in out)
  return lax.transpose(x, perm) if perm != tuple(range(len(perm))) else x


def _einsum_binary(a, b, sa: str, sb: str, out: str, precision, preferred_element_type):
  _check_no_repeats(sa)
  _check_no_repeats(sb)
  a, sa = _sum_out(a, sa, set(sb) | set(out))
  b, sb = _sum_out(b, sb, set(sa) | set(out))
  batch = [c for c in sa if c in sb and c in out]
  contract = [c for c in sa if c in sb and c not in out]
  dn = ((tuple(sa.index(c) for c in contract), tuple(sb.index(c) for c in contract)),
        (tuple(sa.index(c) for c in batch), tuple(sb.index(c) for c in batch)))
  r = lax.dot_general(a, b, dn, precision=precision,
                      preferred_element_type=preferred_element_type)
  rspec = "".join(batch) + "".join(c for c in sa if c not in sb) + "".join(
      c for c in sb if c not in sa)
  perm = tuple(rspec.index(c) for c in out)
  return lax.transpose(r, perm) if perm != tuple(range(len(perm))) else r
