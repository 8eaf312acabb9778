"""JAX's `random_gamma` primitive: gamma samples for typed keys, the primitive of
`random.gamma`, `loggamma` and the samplers built on them (beta, dirichlet, t, chisquare, f,
generalized_normal).

`random_gamma[log_space] keys a`: keys `key<fry>[*k]`, shape parameters `a: T[*k, *r]` ->
`T[*k, *r]` (the log of the samples when `log_space`). Each key is split into `prod(r)`
keys, one per element of its block of `a`, and each element runs its own Marsaglia-Tsang
rejection loop (JAX's `_gamma_impl` / `_gamma_one`, with the same draws, so the samples are
JAX's). The rules:

- lowering: the per-element loops batched as `vmap` batches them (one `while` running until
  every element accepts);
- JVP in `a`: implicit reparameterization, `da * random_gamma_grad(a, sample)` (over the
  flattened elements with `lax.map`, as JAX on CPU; in log space divided by the sample);
- batching: the batch axes of keys and `a` moved first (an unbatched operand broadcast).
"""
from __future__ import annotations

import math

import numpy as np

from stagecraft import core, dtypes
from stagecraft.config import config
from stagecraft.interpreters import ad, batching, lowering
from stagecraft.interpreters import partial_eval as pe
from stagecraft.lax import elementwise as ew
from stagecraft.lax import prng
from stagecraft.lax import shape as lax_shape
from stagecraft.lax.control_flow.loops import map as lax_map
from stagecraft.lax.control_flow.while_op import while_loop
from stagecraft.lax.special import random_gamma_grad
from stagecraft.runtime import dispatch

__all__ = ["random_gamma_p"]

_UINT = {8: np.dtype(np.uint8), 16: np.dtype(np.uint16), 32: np.dtype(np.uint32),
         64: np.dtype(np.uint64)}


# ---------------------------------------------------------------------------
# One element's draws, on a key `key<fry>[]` (the operations of `random.uniform`, `normal`
# and `exponential` at shape (), so the numbers are theirs).


def _key_at(keys, i: int):
  """`keys[i]` of keys `key<fry>[n]`."""
  return lax_shape.squeeze(lax_shape.slice(keys, (i,), (i + 1,)), (0,))


def _uniform(key, minval, maxval, dtype):
  """A uniform `T[]` in `[minval, maxval)`: random mantissa bits under the exponent of 1.0,
  minus 1, scaled (`random.uniform`'s algorithm)."""
  minval = ew.convert_element_type(minval, dtype)
  maxval = ew.convert_element_type(maxval, dtype)
  finfo = dtypes.finfo(dtype)
  nbits, nmant = finfo.bits, finfo.nmant
  rng_bits = 8 if nmant < 8 else nbits
  uint = _UINT[nbits]
  bits = prng.random_bits_p.bind(key, bit_width=rng_bits, shape=())
  if rng_bits != nbits:
    bits = ew.convert_element_type(bits, uint)
  float_bits = ew.shift_right_logical(bits, np.array(rng_bits - nmant, uint))
  float_bits = ew.bitwise_or(float_bits, np.array(1.0, dtype).view(uint))
  floats = ew.sub(ew.bitcast_convert_type(float_bits, dtype), np.array(1.0, dtype))
  return ew.max(minval, lax_shape.reshape(ew.add(ew.mul(floats, ew.sub(maxval, minval)),
                                                 minval), ()))


def _normal(key, dtype):
  """A standard normal `T[]`: `sqrt(2) erf_inv(u)`, u uniform in `(-1, 1)`."""
  lo = np.nextafter(np.array(-1., dtype), np.array(0., dtype), dtype=dtype)
  u = _uniform(key, lo, np.array(1., dtype), dtype)
  return ew.mul(np.array(np.sqrt(2), dtype), ew.erf_inv(u))


def _exponential(key, dtype):
  """A standard exponential `T[]`: `-log1p(-u)`, u uniform in `[0, 1)`."""
  return ew.neg(ew.log1p(ew.neg(_uniform(key, 0., 1., dtype))))


def _gamma_one(key, alpha, log_space: bool):
  """One Gamma(alpha) sample (its log if `log_space`) from a key `key<fry>[]`, `alpha: T[]`.

  Algorithm: Marsaglia and Tsang, "A simple method for generating gamma variables" (2000),
  as JAX's `_gamma_one`: with `d = alpha - 1/3`, `c = 1 / (3 sqrt d)`, draw normals x until
  `v = 1 + c x > 0`, accept `d v^3` when `u < 1 - 0.0331 x^4` or
  `log u < x^2 / 2 + d (1 - v^3 + log v^3)`. For `alpha < 1` sample `Gamma(alpha + 1)` and
  multiply by `u^(1/alpha)` (the boost); in log space add `-e / alpha`, e exponential.
  """
  dtype = core.get_aval(alpha).dtype
  zero, one, two, minus_one = (np.array(v, dtype) for v in (0, 1, 2, -1))
  one_over_two, one_over_three = np.array(0.5, dtype), np.array(1. / 3., dtype)
  squeeze_const = np.array(0.0331, dtype)
  boost_mask = ew.ge(alpha, one)
  alpha_orig = alpha
  alpha = ew.select(boost_mask, alpha, ew.add(alpha, one))
  d = ew.sub(alpha, one_over_three)
  c = ew.div(one_over_three, ew.sqrt(d))

  def cond_fn(kXVU):
    _, X, V, U = kXVU
    # NB: both tests are evaluated (as JAX: a `cond` would not batch better).
    return ew.bitwise_and(
        ew.ge(U, ew.sub(one, ew.mul(squeeze_const, ew.mul(X, X)))),
        ew.ge(ew.log(U), ew.add(ew.mul(X, one_over_two),
                                ew.mul(d, ew.add(ew.sub(one, V), ew.log(V))))))

  def next_kxv(kxv):
    keys = prng.random_split_p.bind(kxv[0], shape=(2,))
    x = _normal(_key_at(keys, 1), dtype)
    return _key_at(keys, 0), x, ew.add(one, ew.mul(x, c))

  def body_fn(kXVU):
    keys = prng.random_split_p.bind(kXVU[0], shape=(3,))
    _, x, v = while_loop(lambda kxv: ew.le(kxv[2], zero), next_kxv,
                         (_key_at(keys, 1), zero, minus_one))
    X = ew.mul(x, x)
    V = ew.mul(ew.mul(v, v), v)
    U = _uniform(_key_at(keys, 2), 0., 1., dtype)
    return _key_at(keys, 0), X, V, U

  keys = prng.random_split_p.bind(key, shape=(2,))
  # The initial state makes cond_fn true: U = 2 passes both tests.
  _, _, V, _ = while_loop(cond_fn, body_fn, (_key_at(keys, 0), zero, one, two))
  subkey = _key_at(keys, 1)
  if log_space:
    log_samples = ew.neg(_exponential(subkey, dtype))
    log_boost = ew.select(ew.bitwise_or(boost_mask, ew.eq(log_samples, zero)), zero,
                          ew.mul(log_samples, ew.div(one, alpha_orig)))
    return ew.add(ew.add(ew.log(d), ew.log(V)), log_boost)
  samples = ew.sub(one, _uniform(subkey, 0., 1., dtype))
  boost = ew.select(boost_mask, one, ew.pow(samples, ew.div(one, alpha_orig)))
  return ew.mul(ew.mul(d, V), boost)


def _gamma_impl(keys, a, *, log_space: bool):
  """Samples `T[*k, *r]` for keys `key<fry>[*k]` and `a: T[*k, *r]` (JAX's `_gamma_impl`
  with `use_vmap`): each key split into `prod(r)` keys, the elements' loops batched."""
  aval = core.get_aval(a)
  size = math.prod(aval.shape)
  if not size:
    return lax_shape.full(aval.shape, 0, aval.dtype)
  count = math.prod(aval.shape[len(core.get_aval(keys).shape):])
  keys = lax_shape.reshape(prng.random_split_p.bind(keys, shape=(count,)), (size,))
  (samples,), (bdim,) = batching.batch_flat(
      lambda key, alpha: [_gamma_one(key, alpha, log_space)],
      [keys, lax_shape.reshape(a, (size,))], [0, 0], batching.AxisData(None, size))
  return lax_shape.reshape(batching.matchaxis(samples, bdim, 0, size), aval.shape)


def _gamma_grad(sample, a, *, log_space: bool):
  """`d sample / d a` at a fixed CDF value, elementwise: `random_gamma_grad` mapped over the
  flattened elements with `lax.map` (JAX's `_gamma_grad` on CPU)."""
  shape = core.get_aval(a).shape
  n = math.prod(shape)
  samples = lax_shape.reshape(sample, (n,))
  alphas = lax_shape.reshape(a, (n,))
  if log_space:
    # d log(x) = dx / x; exp(log x) may round to 0: use the smallest normal float instead.
    samples = ew.exp(samples)
    zero = np.array(0, core.get_aval(samples).dtype)
    tiny = lax_shape.full_like(samples, dtypes.finfo(core.get_aval(samples).dtype).tiny)
    samples = ew.select(ew.eq(samples, zero), tiny, samples)
    grad = lambda alpha, x: ew.div(random_gamma_grad(alpha, x), x)
  else:
    grad = random_gamma_grad
  grads = lax_map(lambda args: grad(*args), (alphas, samples))
  return lax_shape.reshape(grads, shape)


def _random_gamma_abstract_eval(keys, a, *, log_space):
  if not isinstance(keys.dtype, prng.KeyTy):
    raise TypeError(f"random_gamma expects keys, got {keys.str_short()}.")
  if tuple(a.shape[:len(keys.shape)]) != tuple(keys.shape):
    raise TypeError(f"random_gamma: the keys' shape {keys.shape} must lead the shape of a, "
                    f"{a.shape}.")
  return core.ShapedArray(a.shape, a.dtype, vma=a.vma)


def _random_gamma_lower(ctx, keys, a, *, log_space):
  def flat(k, x):
    return [_gamma_impl(k, x, log_space=log_space)]
  jaxpr, consts = pe.trace_to_jaxpr(flat, list(ctx.avals_in))
  names = [lowering.dense_constant(ctx.fb, c, core.get_aval(c)) for c in consts]
  return lowering.jaxpr_subcomp(ctx.fb, jaxpr, names, [keys, a])


def _random_gamma_batch(args, dims, *, log_space):
  size = next(x.shape[d] for x, d in zip(args, dims) if d is not None)
  keys, a = (batching.bdim_at_front(x, d, size) for x, d in zip(args, dims))
  return random_gamma_p.bind(keys, a, log_space=log_space), 0


random_gamma_p = core.Primitive("random_gamma")
random_gamma_p.def_abstract_eval(_random_gamma_abstract_eval)
lowering.register_lowering(random_gamma_p, _random_gamma_lower)
lowering.extended_dtype_rules.add(random_gamma_p)
dispatch.lowering_reads_config[random_gamma_p] = lambda: config.threefry_partitionable
ad.defjvp2(random_gamma_p, None,
           lambda t, ans, keys, a, **kw: ew.mul(t, _gamma_grad(ans, a, **kw)))
batching.primitive_batchers[random_gamma_p] = _random_gamma_batch
