"""`ragged_dot_general`: dot products whose lhs is cut into groups along one dimension
(mixture-of-experts layers, grouped GEMMs), with its wrappers `ragged_dot` and
`ragged_dot_general` and `RaggedDotDimensionNumbers`, as JAX 0.10's `lax` has them.

`group_sizes` (integer, `[*prefix, g]` or `[g]`) cuts the lhs ragged dimension into `g`
consecutive groups: group `i` covers the rows `[sum(sizes[:i]), sum(sizes[:i+1]))`; rows past
the last group belong to none. The three modes (JAX's names), by the kind of the ragged
dimension of lhs:

1. non-contracting (`ragged_dot`): `[b..,m..,k..] x [g,b..,k..,n..] -> [b..,m..,n..]`; rows of
   group `i` are multiplied by slice `i` of rhs's group dimension (rows in no group give 0).
2. contracting: `[b..,m..,k..] x [b..,k..,n..] -> [g,b..,m..,n..]`; result `i` contracts only
   the `k` of group `i`.
3. batch: `[b..,m..,k..] x [b..,k..,n..] -> [b..,m..,n..]`, a plain `dot_general` (the group
   sizes are not used, as in JAX's CPU lowering).

`group_sizes` of rank > 1 gives different sizes per index of the `prefix` dimensions: the
batch dimensions, then lhs's non-contracting (mode 1) or contracting (mode 2) dimensions
before the ragged one (mode 3: the batch dimensions before the ragged one).

The primitive lowers, on every platform, to masks and one `dot_general` (JAX's CPU lowering;
XLA's `chlo.ragged_dot` is not used): the lhs (and in mode 2 the rhs) is expanded with a
leading group axis in which rows outside the group are zero. Its derivative is JAX's: the JVP
is bilinear; the transpose exists for mode 1 (the cotangent of lhs is a mode-1 ragged dot,
that of rhs a mode-2 one) and raises NotImplementedError in modes 2 and 3, as in JAX.
`group_offset` is accepted and, as in JAX 0.10, not implemented.
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Any, Sequence

import numpy as np

from stagecraft import core, dtypes, sharding
from stagecraft.core import Primitive, ShapedArray, get_aval
from stagecraft.interpreters import ad, batching, mlir
from stagecraft.lax.dot import canonicalize_precision, dot_general_aval, dot_general_p
from stagecraft.lax.cumulative import cumsum
from stagecraft.lax.elementwise import (bitwise_and, convert_element_type, le, lt, select,
                                        sub)
from stagecraft.lax.shape import broadcast_in_dim, broadcasted_iota, transpose

__all__ = ["RaggedDotDimensionNumbers", "ragged_dot_general_p", "ragged_dot",
           "ragged_dot_general", "broadcast_like"]


@dataclasses.dataclass(frozen=True)
class RaggedDotDimensionNumbers:
  """The dimensions of a ragged dot (JAX's `lax.RaggedDotDimensionNumbers`).

  Attributes:
    dot_dimension_numbers: `((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))`,
      as for `dot_general`.
    lhs_ragged_dimensions: one lhs dimension (a sequence of length 1), cut into groups.
    rhs_group_dimensions: the rhs dimension indexed by group: one in mode 1 (ragged
      non-contracting), none in modes 2 and 3.

  All fields are stored as tuples, so the object is hashable (it is a primitive param).
  """
  dot_dimension_numbers: Any
  lhs_ragged_dimensions: Sequence[int]
  rhs_group_dimensions: Sequence[int]

  def __init__(self, dot_dimension_numbers, lhs_ragged_dimensions, rhs_group_dimensions):
    dims = tuple(tuple(tuple(int(d) for d in ds) for ds in pair)
                 for pair in dot_dimension_numbers)
    object.__setattr__(self, "dot_dimension_numbers", dims)
    object.__setattr__(self, "lhs_ragged_dimensions",
                       tuple(int(d) for d in lhs_ragged_dimensions))
    object.__setattr__(self, "rhs_group_dimensions",
                       tuple(int(d) for d in rhs_group_dimensions))


_BASIC = RaggedDotDimensionNumbers((([1], [1]), ([], [])), [0], [0])


class _Mode(enum.Enum):
  """JAX's RaggedDotMode: the kind of lhs dimension that is ragged."""
  RAGGED_NONCONTRACTING = 1
  RAGGED_CONTRACTING = 2
  RAGGED_BATCH = 3


def _free(ndim: int, *used) -> list[int]:
  taken = {d for ds in used for d in ds}
  return [d for d in range(ndim) if d not in taken]


def _mode_and_dim(lhs_ndim: int, dnums: RaggedDotDimensionNumbers) -> tuple[_Mode, int]:
  (lc, _), (lb, _) = dnums.dot_dimension_numbers
  d = dnums.lhs_ragged_dimensions[0]
  if d in lc:
    return _Mode.RAGGED_CONTRACTING, d
  if d in lb:
    return _Mode.RAGGED_BATCH, d
  if d in _free(lhs_ndim, lc, lb):
    return _Mode.RAGGED_NONCONTRACTING, d
  raise TypeError(f"lhs_ragged_dim {d} not found in lhs_noncontracting "
                  f"{_free(lhs_ndim, lc, lb)}, lhs_contracting {list(lc)}, or lhs_batch "
                  f"{list(lb)}.")


def _prefix_dims(mode: _Mode, ndim: int, ragged_dim: int, batch, contract) -> list[int]:
  """The dimensions (of lhs or, in mode 2, rhs) that index `group_sizes[..., :]`."""
  batch, contract = list(batch), list(contract)
  if mode is _Mode.RAGGED_NONCONTRACTING:
    nc = _free(ndim, contract, batch)
    return batch + nc[:nc.index(ragged_dim)]
  if mode is _Mode.RAGGED_CONTRACTING:
    return batch + contract[:contract.index(ragged_dim)]
  return batch[:batch.index(ragged_dim)]


def _check_in_range(dim: int, rank: int, what: str, arg: str) -> None:
  if not 0 <= dim < rank:
    raise TypeError(f"ragged_dot_general requires {what} numbers to be nonnegative and less "
                    f"than the number of axes of the {arg} value, got {dim} for {arg} of "
                    f"rank {rank}.")


def _dense_rhs(rhs: ShapedArray, dnums: RaggedDotDimensionNumbers):
  """rhs's aval without its group dimension, and the dot dimension numbers renumbered to
  match: the ragged dot's shape is that dot_general's (plus `g` in mode 2)."""
  (lc, rc), (lb, rb) = dnums.dot_dimension_numbers
  if not dnums.rhs_group_dimensions:
    return rhs, dnums.dot_dimension_numbers
  g = dnums.rhs_group_dimensions[0]
  shift = lambda ds: tuple(d - (d > g) for d in ds)
  shape = tuple(s for i, s in enumerate(rhs.shape) if i != g)
  return rhs.update(shape=shape), ((lc, shift(rc)), (lb, shift(rb)))


def _ragged_dot_general_abstract_eval(lhs, rhs, group_sizes, *, ragged_dot_dimension_numbers,
                                      precision, preferred_element_type, group_offset=None,
                                      out_sharding=None):
  dnums = ragged_dot_dimension_numbers
  if len(dnums.lhs_ragged_dimensions) != 1:
    raise TypeError("ragged_dot_general expects exactly one lhs ragged dimension.")
  ragged = dnums.lhs_ragged_dimensions[0]
  _check_in_range(ragged, lhs.ndim, "lhs ragged dimension", "lhs")
  mode = _mode_and_dim(lhs.ndim, dnums)[0]
  (lc, rc), (lb, rb) = dnums.dot_dimension_numbers
  if group_sizes.ndim == 0:
    raise TypeError("expected rank of group_sizes to be >=1.")
  if group_sizes.ndim != 1:
    prefix = _prefix_dims(mode, lhs.ndim, ragged, lb, lc)
    want = tuple(lhs.shape[i] for i in prefix) + (group_sizes.shape[-1],)
    if tuple(group_sizes.shape) != want:
      raise TypeError(f"expected group_sizes to have shape {want}, got "
                      f"{tuple(group_sizes.shape)}.")
  g = group_sizes.shape[-1]
  groups = dnums.rhs_group_dimensions
  if mode is _Mode.RAGGED_NONCONTRACTING:
    if len(groups) != 1:
      raise TypeError("ragged_dot_general requires exactly one rhs group dimension when lhs "
                      "ragged dimension is noncontracting.")
    _check_in_range(groups[0], rhs.ndim, "rhs group dimension", "rhs")
    if groups[0] in rb or groups[0] in rc:
      raise TypeError("ragged_dot_general requires rhs group dimension numbers to be "
                      "distinct from contracting and batch dimensions.")
    if rhs.shape[groups[0]] != g:
      raise TypeError(f"expected rhs group dimension size to be {g}, got "
                      f"{rhs.shape[groups[0]]}.")
  elif groups:
    raise TypeError("ragged_dot_general requires zero group dimensions in the rhs when lhs "
                    "ragged dimension is contracting or batch.")
  if not dtypes.is_integer(group_sizes.dtype):
    raise TypeError("ragged_dot_general requires that group_sizes.dtype is subtype of "
                    "np.integer.")
  dense_rhs, dims = _dense_rhs(rhs, dnums)
  out = dot_general_aval(lhs, dense_rhs, dims, precision, preferred_element_type)
  if mode is _Mode.RAGGED_CONTRACTING:
    out = out.update(shape=(g, *out.shape))
  return out


# ---------------------------------------------------------------------------
# The lowering: masks and one dot_general (JAX's `_ragged_dot_general_impl`, written anew).


def _expand(x, dim: int, group_sizes, prefix: Sequence[int]):
  """`x[*s]` as `[g, *s]`: slice `i` keeps the entries of group `i` along `dim` (others 0).
  `group_sizes` is `[*prefix sizes, g]`, its leading dimensions being x's `prefix` dims."""
  xa, ga = get_aval(x), get_aval(group_sizes)
  shape = (ga.shape[-1], *xa.shape)
  ends = cumsum(group_sizes, axis=ga.ndim - 1)
  starts = sub(ends, group_sizes)
  gdims = tuple(p + 1 for p in prefix) + (0,)
  iota = broadcasted_iota(ga.dtype, shape, dim + 1)
  inside = bitwise_and(le(broadcast_in_dim(starts, shape, gdims), iota),
                       lt(iota, broadcast_in_dim(ends, shape, gdims)))
  xb = broadcast_in_dim(x, shape, tuple(range(1, len(shape))))
  zeros = broadcast_in_dim(np.zeros((), xa.dtype), shape, ())
  return select(inside, xb, zeros)


def _ragged_dot_general_impl(lhs, rhs, group_sizes, *, ragged_dot_dimension_numbers,
                             precision, preferred_element_type, group_offset=None,
                             out_sharding=None):
  if group_offset is not None:
    raise NotImplementedError("Unimplemented group_offset support.")
  dnums = ragged_dot_dimension_numbers
  la = get_aval(lhs)
  mode, ragged = _mode_and_dim(la.ndim, dnums)
  (lc, rc), (lb, rb) = dnums.dot_dimension_numbers
  lprefix = _prefix_dims(mode, la.ndim, ragged, lb, lc)
  if get_aval(group_sizes).ndim == 1:
    group_sizes = broadcast_in_dim(group_sizes,
                                   (*(la.shape[i] for i in lprefix), get_aval(group_sizes).shape[0]),
                                   (len(lprefix),))
  dot = lambda x, y, dims: dot_general_p.bind(
      x, y, dimension_numbers=dims, precision=precision,
      preferred_element_type=preferred_element_type)
  inc = lambda ds: tuple(d + 1 for d in ds)
  if mode is _Mode.RAGGED_NONCONTRACTING:
    return dot(_expand(lhs, ragged, group_sizes, lprefix), rhs,
               ((inc(lc) + (0,), rc + dnums.rhs_group_dimensions), (inc(lb), rb)))
  if mode is _Mode.RAGGED_CONTRACTING:
    rragged = rc[lc.index(ragged)]
    rprefix = _prefix_dims(mode, get_aval(rhs).ndim, rragged, rb, rc)
    return dot(_expand(lhs, ragged, group_sizes, lprefix),
               _expand(rhs, rragged, group_sizes, rprefix),
               ((inc(lc), inc(rc)), ((0,) + inc(lb), (0,) + inc(rb))))
  return dot(lhs, rhs, dnums.dot_dimension_numbers)


# ---------------------------------------------------------------------------
# Autodiff (JAX's rules)


def _ragged_dot_general_jvp(primals, tangents, *, ragged_dot_dimension_numbers, precision,
                            preferred_element_type, group_offset=None, out_sharding=None):
  if group_offset is not None:
    raise NotImplementedError("Unimplemented group_offset support.")
  x, y, gs = primals
  dx, dy, _ = tangents
  params = dict(ragged_dot_dimension_numbers=ragged_dot_dimension_numbers,
                precision=precision, preferred_element_type=preferred_element_type)
  out = ragged_dot_general_p.bind(x, y, gs, **params)
  t = ad.Zero(ad.tangent_aval(get_aval(out)))
  if type(dx) is not ad.Zero:
    t = ad.add_tangents(t, ragged_dot_general_p.bind(dx, y, gs, **params))
  if type(dy) is not ad.Zero:
    t = ad.add_tangents(t, ragged_dot_general_p.bind(x, dy, gs, **params))
  return out, t


def _ranges_like(*xs):
  start = 0
  for x in xs:
    yield tuple(range(start, start + len(x)))
    start += len(x)


def _ragged_dot_general_transpose(ct, x, y, group_sizes, *, ragged_dot_dimension_numbers,
                                  precision, preferred_element_type, group_offset=None,
                                  out_sharding=None):
  if group_offset is not None:
    raise NotImplementedError("Unimplemented group_offset support.")
  dnums = ragged_dot_dimension_numbers
  (x_contract, y_contract), (x_batch, y_batch) = dnums.dot_dimension_numbers
  x_aval = x.aval if ad.is_undefined_primal(x) else get_aval(x)
  y_aval = y.aval if ad.is_undefined_primal(y) else get_aval(y)
  y_group = dnums.rhs_group_dimensions
  x_kept = _free(x_aval.ndim, x_contract, x_batch)
  y_kept = _free(y_aval.ndim, y_contract, y_batch, y_group)
  mode, ragged = _mode_and_dim(x_aval.ndim, dnums)

  def check(name):
    if mode is not _Mode.RAGGED_NONCONTRACTING:
      raise NotImplementedError(f"Unimplemented {name} for ragged dot general in mode "
                                f"{mode.name}.")

  def grad(lhs, rhs, dims, unsorted_axes, aval):
    out = ragged_dot_general_p.bind(lhs, rhs, group_sizes, ragged_dot_dimension_numbers=dims,
                                    precision=precision,
                                    preferred_element_type=preferred_element_type)
    out = transpose(out, tuple(int(i) for i in np.argsort(unsorted_axes)))
    if get_aval(out).dtype != aval.dtype:
      out = convert_element_type(out, aval.dtype, aval.weak_type)
    return out

  x_bar = y_bar = None
  if ad.is_undefined_primal(x):
    check("grad_x_dims")
    ans_batch, _, ans_y = _ranges_like(x_batch, x_kept, y_kept)
    dims = RaggedDotDimensionNumbers(((ans_y, y_kept), (ans_batch, y_batch)),
                                     [len(x_batch) + x_kept.index(ragged)], y_group)
    x_contract_by_y = [x_contract[i] for i in np.argsort(y_contract)]
    x_bar = grad(ct, y, dims, [*x_batch, *x_kept, *x_contract_by_y], x_aval)
  if ad.is_undefined_primal(y):
    check("grad_y_dims")
    ans_batch, ans_x, _ = _ranges_like(x_batch, x_kept, y_kept)
    dims = RaggedDotDimensionNumbers(((x_kept, ans_x), (x_batch, ans_batch)), [ragged], [])
    y_contract_by_x = [y_contract[i] for i in np.argsort(x_contract)]
    y_bar = grad(x, ct, dims, [*y_group, *y_batch, *y_contract_by_x, *y_kept], y_aval)
  return [x_bar, y_bar, None]


# ---------------------------------------------------------------------------
# Batching: the mapped axis becomes a new leading batch dimension of the dot (or, when only
# lhs is mapped and group_sizes is not, a leading free dimension of lhs, so rhs is not
# broadcast).


def _ragged_dot_general_batch_rule(args, dims, *, ragged_dot_dimension_numbers, precision,
                                   preferred_element_type, group_offset=None,
                                   out_sharding=None):
  if group_offset is not None:
    raise NotImplementedError("Unimplemented group_offset support.")
  lhs, rhs, gs = args
  ld, rd, gd = dims
  dnums = ragged_dot_dimension_numbers
  size = next(get_aval(a).shape[d] for a, d in zip(args, dims) if d is not batching.not_mapped)
  la = get_aval(lhs)
  old_ndim = la.ndim - (ld is not batching.not_mapped)
  mode, ragged = _mode_and_dim(old_ndim, dnums)
  (lc, rc), (lb, rb) = dnums.dot_dimension_numbers
  old_prefix = _prefix_dims(mode, old_ndim, ragged, lb, lc)
  inc = lambda ds: tuple(d + 1 for d in ds)
  lhs = batching.bdim_at_front(lhs, ld, size)
  as_free = rd is batching.not_mapped and gd is batching.not_mapped
  if as_free:
    new_dims = ((inc(lc), rc), (inc(lb), rb))
    groups = dnums.rhs_group_dimensions
  else:
    rhs = batching.bdim_at_front(rhs, rd, size)
    new_dims = ((inc(lc), inc(rc)), ((0,) + inc(lb), (0,) + inc(rb)))
    groups = inc(dnums.rhs_group_dimensions)
  new = RaggedDotDimensionNumbers(new_dims, inc(dnums.lhs_ragged_dimensions), groups)
  new_ndim = old_ndim + 1
  new_prefix = _prefix_dims(mode, new_ndim, ragged + 1, new_dims[1][0], new_dims[0][0])
  ga = get_aval(gs)
  core_ndim = ga.ndim - (gd is not batching.not_mapped)
  if core_ndim > 1 or gd is not batching.not_mapped:
    # group_sizes, indexed by the new prefix dimensions (0: the mapped one).
    used = old_prefix if core_ndim > 1 else []
    gdims = [new_prefix.index(p + 1) for p in used] + [len(new_prefix)]
    if gd is not batching.not_mapped:
      gs = batching.moveaxis(gs, gd, 0)
      gdims = [new_prefix.index(0)] + gdims
    shape = (*(get_aval(lhs).shape[i] for i in new_prefix), ga.shape[-1])
    gs = broadcast_in_dim(gs, shape, tuple(gdims))
  out = ragged_dot_general_p.bind(lhs, rhs, gs, ragged_dot_dimension_numbers=new,
                                  precision=precision,
                                  preferred_element_type=preferred_element_type)
  out_dim = len(lb) if as_free else 0
  return out, out_dim + (mode is _Mode.RAGGED_CONTRACTING)


def _ragged_dot_general_pp_rule(eqn, context):
  # As JAX prints it: every param, None included.
  params = dict(eqn.params)
  for k in ("group_offset", "out_sharding"):
    params.setdefault(k, None)
  return sorted(params.items())


ragged_dot_general_p = Primitive("ragged_dot_general")
ragged_dot_general_p.def_abstract_eval(_ragged_dot_general_abstract_eval)
mlir.register_lowering(ragged_dot_general_p,
                       mlir.lower_fun(_ragged_dot_general_impl, multiple_results=False))
ad.primitive_jvps[ragged_dot_general_p] = _ragged_dot_general_jvp
ad.primitive_transposes[ragged_dot_general_p] = _ragged_dot_general_transpose
batching.primitive_batchers[ragged_dot_general_p] = _ragged_dot_general_batch_rule
core.pp_eqn_rules[ragged_dot_general_p] = _ragged_dot_general_pp_rule
# DCE: the default rule (pure).


# ---------------------------------------------------------------------------
# Wrappers


def ragged_dot_general(lhs: Any, rhs: Any, group_sizes: Any,
                       ragged_dot_dimension_numbers: RaggedDotDimensionNumbers,
                       precision: Any = None, preferred_element_type: Any = None,
                       group_offset: Any = None, out_sharding: Any = None):
  """Ragged matrix multiplication with general dimensions (JAX's `lax.ragged_dot_general`).

  Args:
    lhs: array `A[*ls]` with one ragged dimension.
    rhs: array `B[*rs]`; in mode 1 with a group dimension of size g.
    group_sizes: integer array `I[g]` or `I[*prefix, g]` (see the module docstring);
      entries should be non-negative and sum to at most the ragged dimension's size.
    ragged_dot_dimension_numbers: a `RaggedDotDimensionNumbers`.
    precision: as for `dot_general` (a `Precision`, a pair, or a dot algorithm).
    preferred_element_type: as for `dot_general`.
    group_offset: not implemented (as in JAX 0.10): must be None when the result is
      computed or differentiated.
    out_sharding: None, or a sharding that does not split the result.

  Returns:
    The `dot_general` result `T[*batch, *lhs_free, *rhs_free]` (rhs's group dimension is
    not a free dimension), with a leading dimension of size g in mode 2; T as for
    `dot_general`.

  Raises:
    TypeError: for bad dimension numbers, group_sizes of the wrong shape or a non-integer
      dtype, or an rhs group dimension of the wrong size (JAX's messages).
    NotImplementedError: for `group_offset`, and for the transpose (reverse-mode
      derivative) in modes 2 and 3.
  """
  if not isinstance(ragged_dot_dimension_numbers, RaggedDotDimensionNumbers):
    foreign = ragged_dot_dimension_numbers
    if type(foreign).__name__ != "RaggedDotDimensionNumbers":
      raise TypeError(f"ragged_dot_general: ragged_dot_dimension_numbers must be a "
                      f"lax.RaggedDotDimensionNumbers, got {foreign!r}.")
    ragged_dot_dimension_numbers = RaggedDotDimensionNumbers(
        foreign.dot_dimension_numbers, foreign.lhs_ragged_dimensions,
        foreign.rhs_group_dimensions)
  if out_sharding is not None:
    sharding.check_out_sharding(out_sharding, "ragged_dot_general")
  pref = (None if preferred_element_type is None
          else dtypes.canonicalize_dtype(preferred_element_type))
  params = dict(ragged_dot_dimension_numbers=ragged_dot_dimension_numbers,
                precision=canonicalize_precision(precision),
                preferred_element_type=pref)
  if group_offset is not None:
    # NB: JAX 0.10 binds it and fails when computing; an array param would not hash here.
    raise NotImplementedError("Unimplemented group_offset support.")
  return ragged_dot_general_p.bind(lhs, rhs, group_sizes, **params)


def ragged_dot(lhs: Any, rhs: Any, group_sizes: Any, precision: Any = None,
               preferred_element_type: Any = None, group_offset: Any = None,
               out_sharding: Any = None):
  """Grouped matrix product (JAX's `lax.ragged_dot`): rows
  `[sum(group_sizes[:i]), sum(group_sizes[:i+1]))` of `lhs` are multiplied by `rhs[i]`.

  Args:
    lhs: array `A[m,k]`.
    rhs: array `B[g,k,n]`.
    group_sizes: integer array `I[g]`; rows past `sum(group_sizes)` give zeros.
    precision, preferred_element_type, group_offset, out_sharding: as for
      `ragged_dot_general`.

  Returns:
    `T[m,n]`; T as for `dot_general`.

  Raises:
    TypeError: as for `ragged_dot_general` (e.g. `rhs.shape[0] != g`).

  Examples:
    >>> import numpy as np
    >>> x = np.ones((3, 2), np.float32); w = np.stack([np.eye(2), 2 * np.eye(2)]).astype(np.float32)
    >>> ragged_dot(x, w, np.array([1, 2], np.int32))
    Array([[1., 1.],
           [2., 2.],
           [2., 2.]], dtype=float32)
  """
  return ragged_dot_general(lhs, rhs, group_sizes, _BASIC, precision=precision,
                            preferred_element_type=preferred_element_type,
                            group_offset=group_offset, out_sharding=out_sharding)


# NB: a shape op, here because lax/shape.py belongs to another owner; it may move there.
def broadcast_like(arr: Any, like_arr: Any):
  """Broadcasts `arr` to the shape of `like_arr` (JAX's `lax.broadcast_like`), NumPy-style:
  trailing dimensions align, size-1 dimensions stretch.

  Args:
    arr: array `T[*s]`.
    like_arr: array (or anything with a shape) `U[*t]`; only its shape is used.

  Returns:
    `T[*t]`.

  Raises:
    ValueError: if `s` does not broadcast to `t`.
  """
  like = get_aval(like_arr)
  s, t = tuple(get_aval(arr).shape), tuple(like.shape)
  lead = len(t) - len(s)
  if lead < 0 or any(d != 1 and d != t[lead + i] for i, d in enumerate(s)):
    raise ValueError(f"Incompatible shapes for broadcasting: {s} and requested shape {t}")
  if s == t:
    return arr
  return broadcast_in_dim(arr, t, tuple(range(lead, len(t))))
