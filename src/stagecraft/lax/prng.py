"""Typed PRNG keys in programs: the key dtype `key<fry>` and JAX's key primitives.

A value of dtype `key<fry>` and shape `s` is an array of Threefry-2x32 keys; in a compiled
program it is its key data `u32[*s, 2]` (`core.physical_aval`, `lowering.ir_type`). The
primitives, with JAX 0.10.2's names, params and printed forms:

  random_seed[impl=fry] seeds        int[*s]  -> key<fry>[*s]
  random_wrap[impl=fry] data         u32[*s, 2] -> key<fry>[*s]
  random_unwrap keys                 key<fry>[*s] -> u32[*s, 2]
  random_bits[bit_width=w shape=t]   key<fry>[*s] -> uint{w}[*s, *t]
  random_split[shape=t] keys         key<fry>[*s] -> key<fry>[*s, *t]
  random_fold_in keys msgs           key<fry>[*s], u32[*s] -> key<fry>[*s]

Each lowers to the Threefry functions below on the key data (JAX's threefry2x32 PRNG
implementation, `jax_threefry_partitionable` read when lowered, as JAX's rules do), is
batched over leading key axes, and has zero derivatives. Other primitives on key values
(`slice`, `select_n`, ...) lower on the data (`_lower_physical` below, installed as
`lowering.extended_rule`).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from stagecraft import core, dtypes
from stagecraft.config import config
from stagecraft.core import Primitive, ShapedArray
from stagecraft.interpreters import ad, batching, lowering
from stagecraft.interpreters import partial_eval as pe
from stagecraft.lax import random_bits
from stagecraft.runtime import dispatch
from stagecraft.lax import shape as lax_shape
from stagecraft.lax import elementwise as lax_ew
from stagecraft.lax import reduction as lax_red

__all__ = ["KeyTy", "key_dtype", "is_key_aval", "random_seed_p", "random_wrap_p",
           "random_unwrap_p", "random_bits_p", "random_split_p", "random_fold_in_p",
           "threefry_seed", "threefry_split", "threefry_fold_in", "threefry_random_bits"]

_u32 = np.dtype(np.uint32)
_UINT = {8: np.dtype(np.uint8), 16: np.dtype(np.uint16), 32: _u32, 64: np.dtype(np.uint64)}


class _ThreefryImpl:
  """The Threefry-2x32 implementation as a primitive param (printed `fry`, as JAX's)."""
  name = "threefry2x32"
  tag = "fry"
  key_shape = (2,)

  def __repr__(self):
    return self.tag

  __str__ = __repr__

  def __eq__(self, other):
    return type(other) is _ThreefryImpl

  def __hash__(self):
    return hash(_ThreefryImpl)


threefry_impl = _ThreefryImpl()


class KeyTy:
  """The dtype of typed Threefry keys, printed `key<fry>` as JAX prints it."""
  name = "key<fry>"
  itemsize = 8
  impl = "threefry2x32"
  type = dtypes.prng_key   # jnp.issubdtype(key.dtype, dtypes.prng_key), as in JAX

  def __repr__(self):
    return self.name

  __str__ = __repr__

  def __eq__(self, other):
    return type(other) is KeyTy

  def __hash__(self):
    return hash(KeyTy)

  @staticmethod
  def physical_aval(aval: ShapedArray) -> ShapedArray:
    """`key<fry>[*s]` -> `u32[*s, 2]` (the key data in programs)."""
    return ShapedArray((*aval.shape, 2), _u32, sharding=aval._sharding, vma=aval.vma)


key_dtype = KeyTy()


def is_key_aval(aval: Any) -> bool:
  """Whether `aval` is an aval of typed keys (dtype `key<fry>`)."""
  return type(getattr(aval, "dtype", None)) is KeyTy


def key_aval(data_aval: Any) -> ShapedArray:
  """`u32[*s, 2]` -> `key<fry>[*s]` (weak type dropped, sharding dropped)."""
  return _key_aval(tuple(data_aval.shape[:-1]), data_aval)


def _key_aval(shape: tuple, like: Any = None) -> ShapedArray:
  lowering.extended_avals[0] = True
  return ShapedArray(tuple(shape), key_dtype, vma=getattr(like, "vma", frozenset()))


def _check_keys(name: str, aval: Any) -> None:
  if not is_key_aval(aval):
    raise TypeError(f"{name} expects an array of typed PRNG keys (dtype key<fry>), got "
                    f"{aval.str_short()}.")


# ---------------------------------------------------------------------------
# The Threefry functions on key data (JAX's threefry2x32 PRNG with
# `jax_threefry_partitionable` on: element `i` of `shape` is threefry2x32(key, (hi(i),
# lo(i))) of its 64-bit row-major count; off: JAX's original flat-count scheme).


def _threefry_counts(data, shape):
  k1 = lax_shape.squeeze(lax_shape.slice(data, (0,), (1,)), (0,))
  k2 = lax_shape.squeeze(lax_shape.slice(data, (1,), (2,)), (0,))
  if shape:
    hi, lo = random_bits.iota_2x32_shape(shape)
  else:
    hi = lo = np.zeros((), _u32)
  return random_bits.threefry2x32(k1, k2, hi, lo)


def _threefry_flat_counts(data, n: int):
  """`u32[n]`: the Threefry-2x32 encryptions under key `data` of the counts 0..n-1 taken as
  blocks `(c[i], c[i + m])` of the count vector padded with a zero to even length 2m, the
  m first words of the output followed by the m second, cut to n (JAX's scheme with
  `jax_threefry_partitionable` off)."""
  m = (n + 1) // 2
  counts = lax_shape.iota(_u32, 2 * m)
  if n % 2:
    counts = lax_shape.concatenate([lax_shape.slice(counts, (0,), (n,)),
                                    np.zeros((1,), _u32)], 0)
  k1 = lax_shape.squeeze(lax_shape.slice(data, (0,), (1,)), (0,))
  k2 = lax_shape.squeeze(lax_shape.slice(data, (1,), (2,)), (0,))
  y1, y2 = random_bits.threefry2x32(k1, k2, lax_shape.slice(counts, (0,), (m,)),
                                    lax_shape.slice(counts, (m,), (2 * m,)))
  return lax_shape.slice(lax_shape.concatenate([y1, y2], 0), (0,), (n,))


def _stack_last(y1, y2):
  nd = len(y1.shape)
  shape = (*y1.shape, 1)
  return lax_shape.concatenate([lax_shape.reshape(y1, shape), lax_shape.reshape(y2, shape)],
                               nd)


def threefry_seed(seed):
  """Key data `u32[2]` of an integer seed: `[seed >> 32, seed mod 2**32]` (JAX's
  `threefry_seed`; the high word is 0 for seeds of 32 bits or fewer)."""
  k2 = lax_ew.convert_element_type(seed, _u32)
  if np.dtype(seed.dtype).itemsize == 8:
    k1 = lax_ew.convert_element_type(lax_ew.shift_right_logical(
        seed, np.array(32, seed.dtype)), _u32)
  else:
    k1 = np.zeros((), _u32)
  return _stack_last(lax_shape.reshape(k1, ()), lax_shape.reshape(k2, ()))


def threefry_split(data, shape: tuple[int, ...]):
  """Key data `u32[*shape, 2]` of the keys split from key data `u32[2]`."""
  if not config.threefry_partitionable:
    return lax_shape.reshape(_threefry_flat_counts(data, 2 * math.prod(shape)), (*shape, 2))
  y1, y2 = _threefry_counts(data, shape)
  return _stack_last(y1, y2)


def threefry_fold_in(data, msg):
  """Key data `u32[2]` of key data `u32[2]` folded with a `u32[]` message."""
  k1 = lax_shape.squeeze(lax_shape.slice(data, (0,), (1,)), (0,))
  k2 = lax_shape.squeeze(lax_shape.slice(data, (1,), (2,)), (0,))
  y1, y2 = random_bits.threefry2x32(k1, k2, np.zeros((), _u32), msg)
  return _stack_last(y1, y2)


def threefry_random_bits(data, bit_width: int, shape: tuple[int, ...]):
  """`uint{bit_width}[*shape]` bits from key data `u32[2]`: for 32 bits and fewer the
  (truncated) xor of the two Threefry words of each position, for 64 bits (x64 only) the
  two words concatenated, `y1 * 2**32 + y2` (JAX's partitionable Threefry)."""
  if not config.threefry_partitionable:
    return _random_bits_flat(data, bit_width, shape)
  y1, y2 = _threefry_counts(data, shape)
  if bit_width == 64:
    hi = lax_ew.convert_element_type(y1, _UINT[64])
    lo = lax_ew.convert_element_type(y2, _UINT[64])
    return lax_ew.bitwise_or(lax_ew.shift_left(hi, np.array(32, _UINT[64])), lo)
  out = lax_ew.bitwise_xor(y1, y2)
  return out if bit_width == 32 else lax_ew.convert_element_type(out, _UINT[bit_width])


def _random_bits_flat(data, bit_width: int, shape: tuple[int, ...]):
  """`threefry_random_bits` with `jax_threefry_partitionable` off (JAX's original scheme):
  the encrypted counts 0..w-1, w the number of 32-bit words the draws need; 64-bit draws
  join word i (high) with word i + size (low), 8- and 16-bit draws are the pieces of each
  word, lowest bits first, word by word."""
  size = math.prod(shape)
  words = -(-bit_width * size // 32)
  if words >= 2 ** 32 - 1:
    raise NotImplementedError("random bits with jax_threefry_partitionable off need fewer "
                              "than 2**32 - 1 words per call in stagecraft.")
  bits = _threefry_flat_counts(data, words)
  if bit_width == 64:
    hi = lax_ew.convert_element_type(lax_shape.slice(bits, (0,), (size,)), _UINT[64])
    lo = lax_ew.convert_element_type(lax_shape.slice(bits, (size,), (2 * size,)), _UINT[64])
    bits = lax_ew.bitwise_or(lax_ew.shift_left(hi, np.array(32, _UINT[64])), lo)
  elif bit_width < 32:
    per = 32 // bit_width
    shifts = np.arange(per, dtype=_u32) * np.uint32(bit_width)
    pieces = lax_ew.shift_right_logical(
        lax_shape.broadcast_in_dim(bits, (words, per), (0,)),
        lax_shape.broadcast_in_dim(shifts, (words, per), (1,)))
    pieces = lax_ew.bitwise_and(pieces, np.uint32(2 ** bit_width - 1))
    bits = lax_shape.slice(lax_shape.reshape(pieces, (words * per,)), (0,), (size,))
    bits = lax_ew.convert_element_type(bits, _UINT[bit_width])
  return lax_shape.reshape(bits, tuple(shape))


# ---------------------------------------------------------------------------
# Lowering on the key data: `fun` of one key's data (and messages), vmapped over the leading
# key axes.


def _over_keys(fun, nkey_axes: int, *xs):
  """`fun(*xs)` for each position of the `nkey_axes` leading axes of every `xs`."""
  if not nkey_axes:
    return fun(*xs)
  n = xs[0].shape[0]

  def one(*ys):
    return [_over_keys(fun, nkey_axes - 1, *ys)]
  outs, dims = batching.batch_flat(one, xs, [0] * len(xs), batching.AxisData(None, n))
  return batching.moveaxis(outs[0], dims[0], 0)


def _lower_on_data(fun):
  """A lowering rule that emits `fun(*data)` traced on the operands' physical avals."""
  def rule(ctx, *operands, **params):
    in_avals = [core.physical_aval(a) for a in ctx.avals_in]

    def flat(*xs):
      return [fun(*xs, **params)]
    jaxpr, consts = pe.trace_to_jaxpr(flat, in_avals)
    names = [lowering.dense_constant(ctx.fb, c, core.get_aval(c)) for c in consts]
    return lowering.jaxpr_subcomp(ctx.fb, jaxpr, names, operands)
  return rule


def _register(prim: Primitive, abstract_eval, lower, batch) -> None:
  prim.def_abstract_eval(abstract_eval)
  lowering.register_lowering(prim, lower)
  lowering.extended_dtype_rules.add(prim)
  dispatch.lowering_reads_config[prim] = lambda: config.threefry_partitionable
  ad.defjvp_zero(prim)
  batching.primitive_batchers[prim] = batch


def _moved_to_front(x, d):
  return x if d == 0 else batching.moveaxis(x, d, 0)


# random_seed[impl=fry] seeds -> keys of the seeds' shape.
random_seed_p = Primitive("random_seed")


def _random_seed_abstract_eval(seeds, *, impl):
  if not dtypes.is_integer(seeds.dtype):
    raise TypeError(f"random_seed expects integer seeds, got {seeds.str_short()}.")
  return _key_aval(seeds.shape, seeds)


def _random_seed_lower(ctx, seeds, *, impl):
  n = len(ctx.avals_in[0].shape)
  return [_lower_on_data(lambda s: _over_keys(threefry_seed, n, s))(ctx, seeds)[0]]


_register(random_seed_p, _random_seed_abstract_eval, _random_seed_lower,
          lambda args, dims, *, impl: (random_seed_p.bind(args[0], impl=impl), dims[0]))


# random_wrap[impl=fry] data -> keys.
random_wrap_p = Primitive("random_wrap")


def _random_wrap_abstract_eval(base, *, impl):
  if base.dtype != _u32 or not base.shape or base.shape[-1] != 2:
    raise TypeError(f"random_wrap: key data must be uint32 with a trailing axis of size 2 "
                    f"(the threefry2x32 key shape), got {base.str_short()}.")
  return _key_aval(base.shape[:-1], base)


def _random_wrap_batch(args, dims, *, impl):
  x, d = args[0], dims[0]
  if d == len(x.shape) - 1:   # the batch axis may not be the key-data axis
    x, d = batching.moveaxis(x, d, 0), 0
  return random_wrap_p.bind(x, impl=impl), d


_register(random_wrap_p, _random_wrap_abstract_eval, lambda ctx, x, *, impl: [x],
          _random_wrap_batch)


# random_unwrap keys -> data.
random_unwrap_p = Primitive("random_unwrap")


def _random_unwrap_abstract_eval(keys):
  _check_keys("random_unwrap", keys)
  return ShapedArray((*keys.shape, 2), _u32, vma=keys.vma)


_register(random_unwrap_p, _random_unwrap_abstract_eval, lambda ctx, x: [x],
          lambda args, dims: (random_unwrap_p.bind(args[0]), dims[0]))


# random_bits[bit_width shape] keys -> uint bits of shape keys.shape + shape.
random_bits_p = Primitive("random_bits")


def _random_bits_abstract_eval(keys, *, bit_width, shape):
  _check_keys("random_bits", keys)
  if bit_width not in _UINT:
    raise TypeError(f"requires a bit width of 8, 16, 32 or 64, got {bit_width}")
  return ShapedArray((*keys.shape, *shape), dtypes.canonicalize_dtype(_UINT[bit_width]),
                     vma=keys.vma)


def _random_bits_lower(ctx, keys, *, bit_width, shape):
  n = len(ctx.avals_in[0].shape)
  fun = lambda d: _over_keys(lambda k: threefry_random_bits(k, bit_width, shape), n, d)
  return _lower_on_data(fun)(ctx, keys)


_register(random_bits_p, _random_bits_abstract_eval, _random_bits_lower,
          lambda args, dims, *, bit_width, shape: (random_bits_p.bind(
              _moved_to_front(args[0], dims[0]), bit_width=bit_width, shape=shape), 0))


# random_split[shape] keys -> keys of shape keys.shape + shape.
random_split_p = Primitive("random_split")


def _random_split_abstract_eval(keys, *, shape):
  _check_keys("random_split", keys)
  return _key_aval((*keys.shape, *shape), keys)


def _random_split_lower(ctx, keys, *, shape):
  n = len(ctx.avals_in[0].shape)
  return _lower_on_data(lambda d: _over_keys(lambda k: threefry_split(k, shape), n, d))(
      ctx, keys)


_register(random_split_p, _random_split_abstract_eval, _random_split_lower,
          lambda args, dims, *, shape: (random_split_p.bind(
              _moved_to_front(args[0], dims[0]), shape=shape), 0))


# random_fold_in keys msgs -> keys (msgs u32 of the keys' shape).
random_fold_in_p = Primitive("random_fold_in")


def _random_fold_in_abstract_eval(keys, msgs):
  _check_keys("random_fold_in", keys)
  if msgs.dtype != _u32 or msgs.shape != keys.shape:
    raise TypeError(f"random_fold_in: messages must be uint32 of the keys' shape "
                    f"{keys.shape}, got {msgs.str_short()}.")
  return _key_aval(keys.shape, keys)


def _random_fold_in_lower(ctx, keys, msgs):
  n = len(ctx.avals_in[0].shape)
  return _lower_on_data(lambda d, m: _over_keys(threefry_fold_in, n, d, m))(ctx, keys, msgs)


def _random_fold_in_batch(args, dims):
  (keys, msgs), (dk, dm) = args, dims
  size = next(x.shape[d] for x, d in zip(args, dims) if d is not batching.not_mapped)
  keys = (batching.broadcast(keys, size, 0) if dk is batching.not_mapped
          else _moved_to_front(keys, dk))
  msgs = (batching.broadcast(msgs, size, 0) if dm is batching.not_mapped
          else _moved_to_front(msgs, dm))
  return random_fold_in_p.bind(keys, msgs), 0


_register(random_fold_in_p, _random_fold_in_abstract_eval, _random_fold_in_lower,
          _random_fold_in_batch)


# ---------------------------------------------------------------------------
# Other primitives on keys (slice, select_n, concatenate, ...): lowered on the key data.


def _lower_physical(fb, eqn, operands: Sequence[str]) -> list[str]:
  """Lowers `eqn`, which has extended-dtype operands or results, on their data: the
  primitive vmapped over the data's trailing axis (other operands unbatched)."""
  prim, params = eqn.primitive, eqn.params
  in_avals = [v.aval for v in eqn.invars]
  ext = [not isinstance(a.dtype, np.dtype) for a in in_avals]
  out_ext = [not isinstance(v.aval.dtype, np.dtype) for v in eqn.outvars]
  size = next(core.physical_aval(a).shape[-1] for a, e in zip(in_avals, ext) if e)

  def flat(*xs):
    def one(*ys):
      out = prim.bind(*ys, **params)
      return list(out) if prim.multiple_results else [out]
    dims = [len(a.shape) if e else batching.not_mapped for a, e in zip(in_avals, ext)]
    outs, out_dims = batching.batch_flat(one, xs, dims, batching.AxisData(None, size))
    res = []
    for o, d, e in zip(outs, out_dims, out_ext):
      if not e:
        if d is not batching.not_mapped:
          if prim is lax_ew.eq_p:   # keys are equal when all their data words are
            o = lax_red.reduce_and_p.bind(o, axes=(d,))
          elif prim is lax_ew.ne_p:   # ... and differ when any word does
            o = lax_red.reduce_or_p.bind(o, axes=(d,))
          else:
            # NB: an operand the batching rule broadcast along the data axis: the same
            # value at each position
            o = lax_shape.squeeze(lax_shape.slice_in_dim(o, 0, 1, axis=d), (d,))
        res.append(o)
      else:
        res.append(batching.moveaxis(o, d, len(o.shape) - 1) if d is not batching.not_mapped
                   else batching.broadcast(o, size, len(o.shape)))
    return res

  jaxpr, consts = pe.trace_to_jaxpr(flat, [core.physical_aval(a) for a in in_avals])
  const_names = [lowering.dense_constant(fb, c, core.get_aval(c)) for c in consts]
  return lowering.jaxpr_subcomp(fb, jaxpr, const_names, operands)


lowering.extended_rule[0] = _lower_physical
