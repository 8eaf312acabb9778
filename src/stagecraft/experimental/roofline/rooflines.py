"""Per-primitive roofline rules (JAX 0.10.2's `jax.experimental.roofline.rooflines`).

Counted (as JAX counts them): elementwise unary ops (one flop per element, operand + result
bytes), binary ops (one flop per element of the broadcast shape, both operands + result),
`cum{sum,prod,max,min}` (flops: the length of the scanned axis), `cumlogsumexp` (twice
that), `dot_general` (2 * lhs.size * rhs.size / (contracted size * batch size) flops, in
both `flops` and `unfused_flops`; lhs, result and rhs bytes unless pinned in VMEM),
`reduce_sum` ((n - 1) adds per result element), `select_n` (one per result element),
`pure_callback` / `io_callback` (operand + result bytes) and `debug_callback` (operand
bytes). The primitives JAX counts as free (data movement, control flow, linear algebra
calls, RNG, ...; `_STANDARD` below) count nothing.

Also as JAX's: `conv_general_dilated` (2 flops per multiply-add on valid positions).
`all_to_all` and `ppermute` follow JAX's torus models; `gather` and the `scatter*` family are
counted as JAX counts them (FILL_OR_DROP index checks; a scatter's `update_jaxpr` flops per
update).
Collectives counted as JAX's ring model: `all_gather`, `reduce_scatter`, `pmin`/`pmax` (one
element per operand) and `psum_invariant` (twice a ring).
"""
from __future__ import annotations

import dataclasses
import importlib
import itertools
import pkgutil

import numpy as np

from stagecraft import core
from stagecraft import lax as _lax
from stagecraft.interpreters import ad
from stagecraft.lax import control_flow as _cf
from stagecraft.lax.conv import conv_dimension_numbers as _conv_dimension_numbers

_FLOPS_PER_FMA = 2

# NB: the package's `roofline` attribute is the function; the interpreter module by its path
rl = importlib.import_module("stagecraft.experimental.roofline.roofline")


def _primitives_by_name() -> dict[str, core.Primitive]:
  """stagecraft's primitives (those of `lax` and its control flow, and `add_any`) by name."""
  mods = [importlib.import_module(f"stagecraft.lax.{m.name}")
          for m in pkgutil.iter_modules(_lax.__path__) if not m.ispkg]
  mods += [importlib.import_module(f"stagecraft.lax.control_flow.{m.name}")
           for m in pkgutil.iter_modules(_cf.__path__)]
  found = {ad.add_any_p.name: ad.add_any_p}
  for m in mods:
    for v in vars(m).values():
      if isinstance(v, core.Primitive):
        found.setdefault(v.name, v)
  return found


_PRIMS = _primitives_by_name()

# Primitives JAX 0.10.2 registers with its zero rule (`register_standard_roofline`).
_STANDARD = """acosh add_any after_all approx_top_k argmax argmin asinh atan2 atanh
bitcast_convert_type broadcast_in_dim call_hi_primitive cholesky cholesky_update clamp clz
complex composite concatenate cond convert_element_type copy create_token custom_linear_solve
dce_sink device_put dynamic_slice dynamic_update_slice eig eigh empty empty2 eq_to eval_jaxpr
exp2 fft from_edtype geqp3 geqrf hessenberg householder_product igamma igamma_grad_a igammac
iota iota_2x32_shape le_to lt_to lu lu_pivots_to_permutation mulhi name nextafter
optimization_barrier ormqr pad platform_index polygamma population_count pow pvary qr
ragged_dot_general random_bits random_clone random_fold_in random_gamma random_seed
random_split random_unwrap random_wrap reduce reduce_and reduce_max reduce_min reduce_or
reduce_precision reduce_prod reduce_window reduce_window_max reduce_window_min
reduce_window_sum reduce_xor regularized_incomplete_beta remat2 reshape rev rng_bit_generator
rng_uniform scan schur select_and_gather_add select_and_scatter select_and_scatter_add
shard_map sharding_constraint shift_left shift_right_arithmetic shift_right_logical slice
sort split squeeze stack stage stop_gradient svd symmetric_product tanh tie tile to_edtype
top_k transpose triangular_solve tridiagonal tridiagonal_solve unstack while zeros_like
zeta""".split()

for _n in _STANDARD:
  if _n in _PRIMS:
    rl.register_standard_roofline(_PRIMS[_n])


def _register(names: str, rule) -> None:
  for n in names.split():
    if n in _PRIMS:
      rl.register_roofline(_PRIMS[n])(rule)


def _shapes(avals):
  return [rl.RooflineShape.from_aval(a) for a in avals]


def _unary(ctx, *args, **kw) -> rl.RooflineResult:
  (x,), (out,) = _shapes(ctx.avals_in), _shapes(ctx.avals_out[:1])
  return rl.RooflineResult(unfused_flops=x.size,
                           unfused_hbm_bytes=x.bytes + out.bytes)


_register("""abs acos asin atan cbrt ceil conj cos cosh exp expm1 floor imag integer_pow
is_finite log log1p logistic neg not real round rsqrt sign sin sinh sqrt square tan
bessel_i0e bessel_i1e digamma erf_inv erf erfc lgamma""", _unary)


def _binary(ctx, *args, **kw) -> rl.RooflineResult:
  lhs, rhs = _shapes(ctx.avals_in)
  (out,) = _shapes(ctx.avals_out[:1])
  # NB: dimensions paired from the front, as JAX's rule does
  bshape = [max(a, b) for a, b in itertools.zip_longest(lhs.shape, rhs.shape, fillvalue=1)]
  return rl.RooflineResult(unfused_flops=int(np.prod(bshape)),
                           unfused_hbm_bytes=lhs.bytes + rhs.bytes + out.bytes)


_register("add sub mul div rem and or xor gt lt ge le eq ne min max", _binary)


def _cumulative(ctx, *args, axis: int, **kw) -> rl.RooflineResult:
  (x,), (out,) = _shapes(ctx.avals_in), _shapes(ctx.avals_out[:1])
  return rl.RooflineResult(unfused_flops=x.shape[axis],
                           unfused_hbm_bytes=x.bytes + out.bytes)


_register("cummax cummin cumprod cumsum", _cumulative)


def _cumlogsumexp(ctx, *args, axis: int, **kw) -> rl.RooflineResult:
  # S exps, S - 1 adds and one log along the axis: 2 S.
  (x,), (out,) = _shapes(ctx.avals_in), _shapes(ctx.avals_out[:1])
  return rl.RooflineResult(unfused_flops=2 * x.shape[axis],
                           unfused_hbm_bytes=x.bytes + out.bytes)


_register("cumlogsumexp", _cumlogsumexp)


def _dot_general(ctx, *args, dimension_numbers, **kw) -> rl.RooflineResult:
  lhs, rhs = _shapes(ctx.avals_in)
  (out,) = _shapes(ctx.avals_out[:1])
  (lc, _), (lb, _) = dimension_numbers
  flops = (_FLOPS_PER_FMA * lhs.size * rhs.size / np.prod([lhs.shape[i] for i in lc])
           / np.prod([lhs.shape[i] for i in lb]))
  hbm = 0
  if not ctx.pin_lhs_in_vmem:
    hbm += lhs.bytes + out.bytes
  if not ctx.pin_rhs_in_vmem:
    hbm += rhs.bytes
  return rl.RooflineResult(flops=int(flops), unfused_flops=int(flops), hbm_bytes=hbm,
                           unfused_hbm_bytes=hbm)


_register("dot_general", _dot_general)


def _reduce_sum(ctx, *args, axes, **kw) -> rl.RooflineResult:
  (x,) = _shapes(ctx.avals_in)
  n = np.prod([x.shape[i] for i in axes])
  kept = np.prod([x.shape[i] for i in set(range(len(x.shape))) - set(axes)])
  # n - 1 adds per result element; input plus result (the accumulator) bytes
  return rl.RooflineResult(unfused_flops=int((n - 1) * kept),
                           unfused_hbm_bytes=int(x.dtype.itemsize * (x.size + kept)))


_register("reduce_sum", _reduce_sum)


def _select_n(ctx, *args, **kw) -> rl.RooflineResult:
  which = _shapes(ctx.avals_in[:1])[0]
  (out,) = _shapes(ctx.avals_out[:1])
  return rl.RooflineResult(unfused_flops=out.size,
                           unfused_hbm_bytes=which.bytes + out.bytes)


_register("select_n", _select_n)


def _callback_with_results(ctx, *args, **kw) -> rl.RooflineResult:
  # host transfer of the operands and results; the callback itself is not seen
  return rl.RooflineResult(unfused_hbm_bytes=rl.RooflineShape.total_bytes(ctx.avals_in)
                           + rl.RooflineShape.total_bytes(ctx.avals_out))


_register("pure_callback io_callback", _callback_with_results)


def _debug_callback(ctx, *args, **kw) -> rl.RooflineResult:
  return rl.RooflineResult(unfused_hbm_bytes=rl.RooflineShape.total_bytes(ctx.avals_in))


_register("debug_callback", _debug_callback)


def _zero_if_trivial(ctx, axes) -> rl.RooflineResult | None:
  """Zero ICI traffic (one entry per axis) when the named axes hold one device in all."""
  if np.prod([ctx.mesh.shape[a] for a in axes]) > 1:
    return None
  return rl.RooflineResult(ici_bytes={a: 0 for a in axes}, ici_latency={a: 0 for a in axes})


def _ring(ctx, *args, axes, is_reduce: bool = True, **kw) -> rl.RooflineResult:
  """A ring collective over `axes`, one phase per axis, largest first (JAX's model): each
  phase sends the current shard to the axis's other devices, then the shard grows by the
  axis size; a reduction starts from the operand divided among all devices. Latency: the
  largest axis size times the number of axes (the slowest ring bounds it)."""
  zero = _zero_if_trivial(ctx, axes)
  if zero is not None:
    return zero
  sizes = ctx.mesh.shape
  shard = rl.RooflineShape.total_bytes(ctx.avals_in)
  if is_reduce:
    shard /= np.prod([sizes[a] for a in axes])
  order = sorted(axes, key=lambda a: sizes[a], reverse=True)
  shard //= len(order)
  sent = 0
  for a in order:
    sent += shard * (sizes[a] - 1)
    shard *= sizes[a]
  latency = sizes[order[0]] * len(order)
  return rl.RooflineResult(ici_bytes={a: int(sent) for a in order},
                           ici_latency={a: int(latency) for a in order})


_register("reduce_scatter",
          lambda ctx, *args, axis_name, **kw: _ring(ctx, *args, axes=axis_name, **kw))
_register("all_gather", lambda ctx, *args, axis_name, **kw: _ring(
    ctx, *args, axes=axis_name, is_reduce=False, **kw))


def _scalar_collective(ctx, *args, axes, **kw) -> rl.RooflineResult:
  # pmin/pmax modelled as a ring all-gather of one element per operand
  ones = [core.ShapedArray((1,), a.dtype) for a in ctx.avals_in]
  return _ring(dataclasses.replace(ctx, avals_in=ones), *args, axes=axes, is_reduce=False, **kw)


_register("pmin pmax", _scalar_collective)


def _psum_invariant(ctx, *args, axes, **kw) -> rl.RooflineResult:
  # an all-reduce: a reduce-scatter then an all-gather, twice a ring's traffic and latency
  ring = _ring(ctx, *args, axes=axes, **kw)
  return rl.RooflineResult(ici_bytes={k: 2 * v for k, v in ring.ici_bytes.items()},
                           ici_latency={k: 2 * v for k, v in ring.ici_latency.items()})


_register("psum_invariant", _psum_invariant)


def _gather(ctx, *args, mode, **kw) -> rl.RooflineResult:
  """A copy the size of the result (read and written) plus a read of the indices. With
  FILL_OR_DROP: 4 flops per index (two bound checks, an and, a reduce to one flag per
  window) and one select per result element (JAX's count)."""
  _, idx = _shapes(ctx.avals_in)
  (out,) = _shapes(ctx.avals_out[:1])
  flops = 0
  if getattr(mode, "name", None) == "FILL_OR_DROP":
    flops = 4 * idx.size + out.size
  return rl.RooflineResult(unfused_flops=flops, unfused_hbm_bytes=2 * out.bytes + idx.bytes)


_register("gather", _gather)


def _scatter(ctx, *args, **kw) -> rl.RooflineResult:
  """Reads operand and updates and writes the result (3x the updates' bytes) plus the
  indices; flops: those of `update_jaxpr` on scalars (counted by `roofline` itself) times
  the number of updates (none for a plain scatter)."""
  _, idx, upd = _shapes(ctx.avals_in)
  update_jaxpr = kw.get("update_jaxpr")
  flops = 0
  if ctx.primitive.name != "scatter":
    # NB: stagecraft's scatter-add/sub/mul/min/max are named by their combiner, one binary
    # op (one flop) per update where JAX runs the same count on its `update_jaxpr`
    flops = upd.size
  elif update_jaxpr:
    jaxpr = update_jaxpr.jaxpr if isinstance(update_jaxpr, core.ClosedJaxpr) else update_jaxpr
    consts = update_jaxpr.consts if isinstance(update_jaxpr, core.ClosedJaxpr) else []
    fn = lambda *xs: core.eval_jaxpr(jaxpr, consts, *xs)
    scalars = [core.ShapeDtypeStruct((), upd.dtype) for _ in jaxpr.invars]
    _, per_element = rl.roofline(fn)(*scalars)
    flops = per_element.unfused_flops * upd.size
  return rl.RooflineResult(unfused_flops=flops,
                           unfused_hbm_bytes=3 * upd.bytes + idx.bytes)


_register("scatter scatter-add scatter-sub scatter-mul scatter-min scatter-max", _scatter)


def _scatter_apply(ctx, *args, jaxpr, consts, **kw) -> rl.RooflineResult:
  """`scatter_apply` (JAX's scatter with `func` as its `update_jaxpr`): the bytes of a
  scatter; flops: `func`'s on a scalar times the number of updates."""
  _, idx, upd = _shapes(ctx.avals_in)
  fn = lambda *xs: core.eval_jaxpr(jaxpr, list(consts), *xs)
  _, per_element = rl.roofline(fn)(*[core.ShapeDtypeStruct((), upd.dtype)
                                     for _ in jaxpr.invars])
  return rl.RooflineResult(unfused_flops=per_element.unfused_flops * upd.size,
                           unfused_hbm_bytes=3 * upd.bytes + idx.bytes)


_register("scatter-apply", _scatter_apply)
if "scatter-apply" in _PRIMS:
  rl.jaxpr_param_not_a_body.add(_PRIMS["scatter-apply"])


def _axes(names) -> tuple:
  return tuple(names) if isinstance(names, (tuple, list)) else (names,)


def _all_to_all(ctx, *args, axis_name, **kw) -> rl.RooflineResult:
  """JAX's bisection model: the full array (operand bytes times the devices of the axes)
  moves half across the bisection, whose width is the smallest axis's size to the power of
  (axes - 1), doubled by wraparound when that size exceeds 2; latency: half of each axis's
  size, summed."""
  axes = _axes(axis_name)
  zero = _zero_if_trivial(ctx, axes)
  if zero is not None:
    return zero
  sizes = ctx.mesh.shape
  total = rl.RooflineShape.total_bytes(ctx.avals_in) * np.prod([sizes[a] for a in axes])
  smallest = sizes[sorted(axes, key=lambda a: sizes[a])[0]]
  width = smallest ** (len(axes) - 1) * (2 if smallest > 2 else 1)
  sent = total / 2 / width
  latency = sum(sizes[a] / 2 for a in axes)
  return rl.RooflineResult(ici_bytes={a: int(sent) for a in axes},
                           ici_latency={a: int(latency) for a in axes})


_register("all_to_all", _all_to_all)


def _ppermute(ctx, *args, axis_name, perm, **kw) -> rl.RooflineResult:
  """Each (src, dst) pair walks the torus of the axes dimension by dimension, the short way
  round (clockwise on ties); traffic: the operand bytes times the most pairs sharing one
  link; latency: the longest walk (JAX's model)."""
  axes = _axes(axis_name)
  zero = _zero_if_trivial(ctx, axes)
  if zero is not None:
    return zero
  dims = [ctx.mesh.shape.get(a, 1) for a in axes]
  shard = rl.RooflineShape.total_bytes(ctx.avals_in)
  links: dict = {}
  latency = 0
  for src, dst in perm:
    if src == dst:
      continue
    s = tuple(int(i) for i in np.unravel_index(src, dims))
    d = tuple(int(i) for i in np.unravel_index(dst, dims))
    hops = 0
    for k, n in enumerate(dims):
      if s[k] == d[k]:
        continue
      fwd, back = (d[k] - s[k]) % n, (s[k] - d[k]) % n
      step = 1 if fwd <= back else -1
      pos = s[k]
      while pos != d[k]:
        here = s[:k] + (pos,) + s[k + 1:]
        pos = (pos + step) % n
        there = s[:k] + (pos,) + s[k + 1:]
        link = tuple(sorted([here, there]))
        links[link] = links.get(link, 0) + 1
      hops += min(fwd, back)
    latency = max(latency, hops)
  sent = shard * max(links.values(), default=0)
  return rl.RooflineResult(ici_bytes={a: int(sent) for a in axes},
                           ici_latency={a: int(latency) for a in axes})


_register("ppermute", _ppermute)


def _valid_positions_1d(stride: int, base_dil: int, win_dil: int, k: int, n_in: int,
                        n_out: int, pad: tuple[int, int]) -> int:
  """How many (kernel index, output index) pairs of one spatial dimension read an input
  element (not padding, not a hole of the base dilation): XLA's count, which JAX's rule
  follows, with its two shortcuts for the shapes of a weight gradient."""
  lo, hi = pad
  if (n_in == n_out == k == base_dil and win_dil == 1 and stride == max(1, n_in - 1)
      and lo == 0 and hi == 0):
    return n_in
  if (n_in == 1 and k == n_out and win_dil == 1 and base_dil == 1 and stride == 1
      and lo == n_out - 1 and hi == n_out - 1):
    return n_out
  count = 0
  for ki in range(k):
    if stride == 1 and base_dil == 1:
      base = lo - ki * win_dil
      count += max(min(n_in + base, n_out) - max(0, base), 0)
      continue
    for oi in range(n_out):
      pos = oi * stride - lo + ki * win_dil
      q = int(pos / base_dil)   # NB: truncation toward zero, as JAX's
      if pos == q * base_dil and 0 <= q < n_in:
        count += 1
  return count


def _conv(ctx, *args, window_strides, padding, lhs_dilation, rhs_dilation,
          dimension_numbers, batch_group_count, **kw) -> rl.RooflineResult:
  """2 flops per multiply-add actually done: input features x output features x
  (batch / batch_group_count) x the valid spatial positions; bytes of lhs, rhs and result."""
  lhs, rhs = _shapes(ctx.avals_in)
  (out,) = _shapes(ctx.avals_out[:1])
  dn = _conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
  valid = 1
  for d in range(len(dn.lhs_spec) - 2):
    valid *= _valid_positions_1d(
        window_strides[d], lhs_dilation[d], rhs_dilation[d], rhs.shape[dn.rhs_spec[2 + d]],
        lhs.shape[dn.lhs_spec[2 + d]], out.shape[dn.out_spec[2 + d]], padding[d])
  fmas = (rhs.shape[dn.rhs_spec[1]] * out.shape[dn.out_spec[1]]
          * (lhs.shape[dn.lhs_spec[0]] / batch_group_count) * valid)
  return rl.RooflineResult(unfused_flops=int(fmas * _FLOPS_PER_FMA),
                           unfused_hbm_bytes=lhs.bytes + rhs.bytes + out.bytes)


_register("conv_general_dilated", _conv)
