"""Cumulative reductions along one axis: `cumsum`, `cumprod`, `cummax`, `cummin`,
`cumlogsumexp` (JAX's `lax`'s names and params `axis`, `reverse`).

Each lowers, as JAX does on CPU and GPU, to one `stablehlo.reduce_window` whose window covers
the whole axis (size n, stride 1) over the operand padded with n-1 identity elements before
it (after it for `reverse`): output element i reduces elements 0..i (i..n-1). XLA rewrites
such a window into a log-depth parallel prefix scan, so this is not the O(n^2) it looks.
The window's region applies the binary op, started from its identity, as the reduce_*
primitives do (lax/reduction.py).

Autodiff (JAX's rules): cumsum is linear (its transpose is the cumsum the other way); the
others' JVPs are those of `associative_scan` with their binary op, since reduce_window is not
differentiable any number of times.
"""
from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from stagecraft import core, dtypes
from stagecraft.core import Primitive, ShapedArray
from stagecraft.interpreters import ad, batching, lowering
from stagecraft.interpreters.lowering import ir_type
from stagecraft.lax import elementwise, utils
from stagecraft.lax.associative_scan import associative_scan
from stagecraft.lax.elementwise import emit_compare
from stagecraft.lax.reduction import max_identity, min_identity, prod_identity, sum_identity
from stagecraft.lax.windowed import emit_reduce_window

__all__ = ["cumsum_p", "cumprod_p", "cummax_p", "cummin_p", "cumlogsumexp_p", "cumsum",
           "cumprod", "cummax", "cummin", "cumlogsumexp"]

# Accepted dtypes: JAX accepts every number type (not bool) for all five; max/min order
# complex numbers lexicographically (`elementwise.emit_minmax`, as reduce_max), and
# cumlogsumexp takes floating and complex dtypes (JAX fails later, in lowering, for
# integers; stagecraft rejects them in the abstract eval).
_number = (utils.int_kind, utils.float_kind, utils.complex_kind)


def _cumred_abstract_eval(name, accepted, x: ShapedArray, *, axis, reverse):
  """Same aval as `x` (weak type kept, as JAX). Messages are JAX's."""
  if not any(pred(x.dtype) for _, pred in accepted):
    # NB: JAX's message says "number" for every non-number (bool); the narrower dtype sets
    # of max/min/logsumexp name their own kinds.
    number = any(pred(x.dtype) for _, pred in _number)
    kinds = ", ".join(k for k, _ in accepted) if number else "number"
    raise TypeError(f"{name} does not accept dtype {x.dtype.name}. Accepted dtypes are "
                    f"subtypes of {kinds}.")
  if axis < 0:
    raise ValueError("XLA operations do not allow negative axes")
  if axis >= x.ndim:
    raise ValueError(f"axis {axis} is out of bounds for array of shape {x.shape}")
  return x


def _logaddexp_region(ctx, a: str, b: str, aval: ShapedArray) -> str:
  """log(exp(a) + exp(b)) = max + log1p(exp(-|a - b|)), as JAX's lax.logaddexp: when a - b is
  NaN (a NaN operand, or infinities of one sign) the result is a + b, so -inf with -inf
  stays -inf, +inf with +inf stays +inf and NaN propagates. Complex: see
  `_complex_logaddexp_region`."""
  if dtypes.is_complex(aval.dtype):
    return _complex_logaddexp_region(ctx, a, b, aval)
  e = partial(ctx.elementwise, aval=aval)
  amax = e("stablehlo.maximum", a, b)
  delta = e("stablehlo.subtract", a, b)
  isnan = emit_compare(ctx, "NE", delta, delta, aval)
  tail = e("stablehlo.log_plus_one",
           e("stablehlo.exponential", e("stablehlo.negate", e("stablehlo.abs", delta))))
  total, finite = e("stablehlo.add", a, b), e("stablehlo.add", amax, tail)
  r = ctx.fb.fresh()
  ctx.fb.emit(f"{r} = stablehlo.select {isnan}, {total}, {finite} : tensor<i1>, "
              f"{ir_type(aval)}")
  return r


def _complex_logaddexp_region(ctx, a: str, b: str, aval: ShapedArray) -> str:
  """Complex log(exp(a) + exp(b)) as JAX's logaddexp computes it: with m the lexicographic
  maximum, `m + log1p(exp(a + b - 2m))`, whose imaginary part is then wrapped into
  [-pi, pi) (`rem(im + pi, 2pi)`, plus 2pi where negative, minus pi). -inf + 0j is the
  identity; two infinite real parts give NaN, as in JAX."""
  e = partial(ctx.elementwise, aval=aval)
  amax = elementwise.emit_minmax(ctx, "GT", a, b, aval)
  delta = e("stablehlo.subtract", e("stablehlo.add", a, b),
            e("stablehlo.multiply", amax, ctx.constant(2, aval)))
  out = e("stablehlo.add", amax, e("stablehlo.log_plus_one", e("stablehlo.exponential", delta)))
  r_aval = aval.update(dtype=np.dtype(np.finfo(aval.dtype).dtype))
  part = lambda name: ctx.op(f"stablehlo.{name}", [out], [r_aval],  # noqa: E731
                             operand_avals=[aval])[0]
  re, im = part("real"), part("imag")
  r = partial(ctx.elementwise, aval=r_aval)
  pi, two_pi = ctx.constant(np.pi, r_aval), ctx.constant(2 * np.pi, r_aval)
  rem = r("stablehlo.remainder", r("stablehlo.add", im, pi), two_pi)
  negative = emit_compare(ctx, "LT", rem, ctx.constant(0, r_aval), r_aval)
  rem = ctx.op("stablehlo.select", [negative, r("stablehlo.add", rem, two_pi), rem], [r_aval],
               operand_avals=[r_aval.update(dtype=dtypes.bool_), r_aval, r_aval])[0]
  im = r("stablehlo.subtract", rem, pi)
  return ctx.op("stablehlo.complex", [re, im], [aval], operand_avals=[r_aval, r_aval])[0]


def _cumred_lowering(op, identity, ctx, x, *, axis, reverse):
  aval, = ctx.avals_in
  n = aval.shape[axis]
  if n == 0:   # nothing to reduce (JAX returns the operand too)
    return [x]
  scalar = ShapedArray((), aval.dtype)
  if callable(op):
    combine = lambda a, b: op(ctx, a, b, scalar)
  else:
    combine = lambda a, b: ctx.elementwise(op, a, b, aval=scalar)
  # A window over the whole axis, padded so output i sees inputs 0..i (or i..n-1 reversed).
  ones = (1,) * aval.ndim
  window = tuple(n if d == axis else 1 for d in range(aval.ndim))
  pad = tuple(((0, n - 1) if reverse else (n - 1, 0)) if d == axis else (0, 0)
              for d in range(aval.ndim))
  return emit_reduce_window(ctx, x, identity(aval.dtype), combine, window, ones, pad, ones,
                            ones)


def _minmax_region(direction, ctx, a: str, b: str, aval: ShapedArray) -> str:
  return elementwise.emit_minmax(ctx, direction, a, b, aval)


def _logaddexp_identity(dtype):
  return np.array(-np.inf, dtype)


def _cumulative(name, op, identity, accepted) -> Primitive:
  p = Primitive(name)
  p.def_abstract_eval(partial(_cumred_abstract_eval, name, accepted))
  lowering.register_lowering(p, partial(_cumred_lowering, op, identity))
  return p


# One line per primitive: abstract eval (accepted dtypes) and lowering (region op, identity).
cumsum_p = _cumulative("cumsum", "stablehlo.add", sum_identity, _number)
cumprod_p = _cumulative("cumprod", "stablehlo.multiply", prod_identity, _number)
cummax_p = _cumulative("cummax", partial(_minmax_region, "GT"), max_identity, _number)
cummin_p = _cumulative("cummin", partial(_minmax_region, "LT"), min_identity, _number)
cumlogsumexp_p = _cumulative("cumlogsumexp", _logaddexp_region, _logaddexp_identity,
                             utils.inexact)


# -- Autodiff rules (JAX's). cumsum is linear; its transpose sums the other way. The others'
# JVPs are the JVPs of `associative_scan` with their binary op, whose steps (slices, pads,
# the op) are differentiable any number of times where reduce_window is not.


def _logaddexp(a: Any, b: Any) -> Any:
  """log(exp(a) + exp(b)) composed of lax ops as `_logaddexp_region` computes it (`a + b`
  where `a - b` is NaN: infinities of one sign, or a NaN); complex as
  `_complex_logaddexp_region`."""
  amax = elementwise.max(a, b)
  if dtypes.is_complex(core.get_aval(amax).dtype):
    c = partial(utils.weak_const, amax)
    out = elementwise.add(amax, elementwise.log1p(elementwise.exp(elementwise.sub(
        elementwise.add(a, b), elementwise.mul(amax, c(2))))))
    im = elementwise.imag(out)
    pi = utils.weak_const(im, np.pi)
    rem = elementwise.rem(elementwise.add(im, pi), utils.weak_const(im, 2 * np.pi))
    rem = elementwise.select(elementwise.lt(rem, utils.weak_const(im, 0)),
                             elementwise.add(rem, utils.weak_const(im, 2 * np.pi)), rem)
    return elementwise.complex(elementwise.real(out), elementwise.sub(rem, pi))
  delta = elementwise.sub(a, b)
  finite = elementwise.add(amax, elementwise.log1p(elementwise.exp(
      elementwise.neg(elementwise.abs(delta)))))
  return elementwise.select(elementwise.ne(delta, delta), elementwise.add(a, b), finite)


def _cumulative_jvp(combine_fn, primals, tangents, *, axis, reverse):
  fun = lambda x: [associative_scan(combine_fn, x, reverse=reverse, axis=axis)]
  p_out, t_out = ad.jvp_flat(fun, primals, tangents)
  return p_out[0], t_out[0]


ad.deflinear_args(cumsum_p, lambda ct, x, *, axis, reverse: [
    cumsum_p.bind(ct, axis=axis, reverse=not reverse)])
ad.primitive_jvps[cumprod_p] = partial(_cumulative_jvp, elementwise.mul)
ad.primitive_jvps[cummax_p] = partial(_cumulative_jvp, elementwise.max)
ad.primitive_jvps[cummin_p] = partial(_cumulative_jvp, elementwise.min)
ad.primitive_jvps[cumlogsumexp_p] = partial(_cumulative_jvp, _logaddexp)



def _cumulative_batch_rule(prim, args, dims, *, axis, reverse):
  """The batch dim stays where it is; the axis skips it."""
  operand, = args
  bdim, = dims
  return prim.bind(operand, axis=axis if axis < bdim else axis + 1, reverse=reverse), bdim


for _p in (cumsum_p, cumprod_p, cummax_p, cummin_p, cumlogsumexp_p):
  batching.primitive_batchers[_p] = partial(_cumulative_batch_rule, _p)
del _p


def _cumulative_wrapper(p: Primitive, what: str, dtypes_doc: str, extra: str = ""):
  def f(operand: Any, axis: int = 0, reverse: bool = False):
    return p.bind(operand, axis=int(axis), reverse=bool(reverse))
  f.__name__ = f.__qualname__ = p.name
  f.__doc__ = f"""Computes the cumulative {what} of `operand` along `axis` (`stagecraft.lax.{p.name}`).

  Output element i along `axis` combines input elements 0..i, or i..n-1 when `reverse`.{extra}

  Args:
    operand: array `T[*s]`; T {dtypes_doc}.
    axis: int in `[0, ndim)`; negative axes are rejected, as in JAX (normalize them with
      `axis % ndim`).
    reverse: accumulate from the end of the axis.

  Returns:
    Array `T[*s]`, weak type kept. An empty axis gives an empty result.

  Raises:
    TypeError: if T is not accepted.
    ValueError: if `axis` is negative or not less than the rank.
  """
  return f


cumsum = _cumulative_wrapper(cumsum_p, "sum", "integer, floating or complex (not bool)",
                             " Integers wrap around on overflow.")
cumprod = _cumulative_wrapper(cumprod_p, "product", "integer, floating or complex (not bool)",
                              " Integers wrap around on overflow.")
cummax = _cumulative_wrapper(cummax_p, "maximum", "integer, floating or complex (not bool)",
                             " NaN propagates (as `numpy.maximum.accumulate`); complex "
                             "numbers order lexicographically (real, then imaginary part).")
cummin = _cumulative_wrapper(cummin_p, "minimum", "integer, floating or complex (not bool)",
                             " NaN propagates (as `numpy.minimum.accumulate`); complex "
                             "numbers order lexicographically (real, then imaginary part).")
cumlogsumexp = _cumulative_wrapper(
    cumlogsumexp_p, "log-sum-exp (`log(cumsum(exp(x)))` without overflow)",
    "floating or complex",
    " Computed with JAX's `logaddexp` (`max + log1p(exp(-|a - b|))`); -inf is the identity,"
    " +inf absorbs, NaN propagates (as `numpy.logaddexp.accumulate`). Complex: the"
    " lexicographic maximum m gives `m + log1p(exp(a + b - 2m))`, the imaginary part wrapped"
    " into [-pi, pi), as JAX.")
cumsum.__doc__ += """
  Examples:
    >>> import numpy as np
    >>> np.asarray(cumsum(np.array([1, 2, 3], np.int32)))
    array([1, 3, 6], dtype=int32)
    >>> np.asarray(cumsum(np.array([1, 2, 3], np.int32), reverse=True))
    array([6, 5, 3], dtype=int32)
  """
