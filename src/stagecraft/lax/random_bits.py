"""Random-bit primitives: the Threefry-2x32 block cipher (`threefry2x32`), the 64-bit counter
iota behind JAX's partitionable Threefry (`iota_2x32_shape`), and XLA's stateless
`rng_bit_generator`.

`threefry2x32` lowers straight to StableHLO integer ops (add, xor, shift_left,
shift_right_logical, or) in a 5-trip `stablehlo.while`: the 20-round Threefry-2x32 of Salmon
et al., exactly as JAX's threefry2x32 lowering computes it
(JAX's CPU lowering rolls the loop the same way), so that `stagecraft.random` reproduces
JAX's `random` bit for bit.
"""
from __future__ import annotations

import enum
import math
from typing import Any, Sequence

import numpy as np

from stagecraft import core, dtypes
from stagecraft.core import Primitive, ShapedArray
from stagecraft.interpreters import ad, batching, lowering
from stagecraft.lax import utils
from stagecraft.lax.elementwise import broadcast_operand, defbroadcasting
from stagecraft.lax.shape import canonicalize_shape, index_in_dim, laid_out
from stagecraft.lax.slicing import dynamic_update_index_in_dim

__all__ = ["threefry2x32_p", "iota_2x32_shape_p", "rng_bit_generator_p", "RandomAlgorithm",
           "threefry2x32", "iota_2x32_shape", "rng_bit_generator"]

_u32 = np.dtype(np.uint32)
_u64 = np.dtype(np.uint64)

# ---------------------------------------------------------------------------
# threefry2x32(key1, key2, x1, x2) -> (y1, y2): uint32 arrays of one shape (rank-0 operands
# broadcast, as JAX's broadcasting shape rule allows).
threefry2x32_p = Primitive("threefry2x32")
threefry2x32_p.multiple_results = True

# Rotation distances of the 20 rounds: four rounds with R0, four with R1, alternating
# (Salmon et al. 2011, Table 4, Threefry-2x32); a key injection follows every four rounds.
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_KS_PARITY = 0x1BD11BDA   # Threefish's key-schedule parity constant C240


def _threefry2x32_abstract_eval(key1, key2, x1, x2):
  args = (key1, key2, x1, x2)
  if any(a.dtype != _u32 for a in args):
    got = ", ".join(a.str_short() for a in args)
    raise TypeError(f"Arguments to threefry2x32 must have uint32 type, got {got}. Convert "
                    f"them with lax.convert_element_type(x, 'uint32') (or "
                    f"lax.bitcast_convert_type for signed data).")
  shape = utils.broadcasting_shape("threefry2x32", args)
  return [ShapedArray(shape, _u32)] * 2


def _threefry2x32_lowering(ctx, key1, key2, x1, x2):
  """The 20 rounds as a 5-trip `stablehlo.while` of 4 rounds and a key injection each (JAX's
  CPU lowering, `use_rolled_loops=True`).

  NB: the loop is also a fusion boundary. Unrolled, the ~150 ops fuse into each consumer;
  where a consumer cannot be vectorized (randint's integer remainders) LLVM then fully
  unrolls small loops over that body, and compiles took seconds.
  """
  aval = ctx.avals_out[0]
  scalar = aval.update(shape=())
  key1, key2, x1, x2 = [broadcast_operand(ctx, v, a, aval.shape)
                        for v, a in zip((key1, key2, x1, x2), ctx.avals_in)]

  def full(v) -> str:   # a constant of the operands' shape (per region: constants dedupe)
    return broadcast_operand(ctx, ctx.constant(v, scalar), scalar, aval.shape)

  def ew(op, a, b, av=aval):
    return ctx.elementwise(f"stablehlo.{op}", a, b, aval=av)

  ks = [key1, key2, ew("xor", ew("xor", key1, key2), full(_KS_PARITY))]
  x = [ew("add", x1, ks[0]), ew("add", x2, ks[1])]
  i0 = ctx.constant(0, scalar)
  state_avals = [scalar] + [aval] * 5   # i, x0, x1, and the key schedule rotated by one

  def cond(i, *_):
    five = ctx.constant(5, scalar)
    r = ctx.fb.fresh()
    t = lowering.ir_type(scalar)
    ctx.fb.emit(f"{r} = stablehlo.compare LT, {i}, {five}, UNSIGNED : ({t}, {t}) -> "
                f"tensor<i1>")
    return [r]

  def body(i, x0, x1, k0, k1, k2):
    # The rotation distances of this group: _ROTATIONS[i % 2].
    even = ctx.elementwise("stablehlo.and", i, ctx.constant(1, scalar), aval=scalar)
    pred = ctx.fb.fresh()
    t = lowering.ir_type(scalar)
    ctx.fb.emit(f"{pred} = stablehlo.compare EQ, {even}, {ctx.constant(0, scalar)}, UNSIGNED"
                f" : ({t}, {t}) -> tensor<i1>")
    for r0, r1 in zip(*_ROTATIONS):
      rot = ctx.fb.fresh()
      ctx.fb.emit(f"{rot} = stablehlo.select {pred}, {ctx.constant(r0, scalar)}, "
                  f"{ctx.constant(r1, scalar)} : tensor<i1>, {t}")
      unrot = ew("subtract", ctx.constant(32, scalar), rot, scalar)
      rot, unrot = (broadcast_operand(ctx, v, scalar, aval.shape) for v in (rot, unrot))
      x0 = ew("add", x0, x1)
      x1 = ew("xor", x0, ew("or", ew("shift_left", x1, rot), ew("shift_right_logical", x1,
                                                                  unrot)))
    i1 = ew("add", i, ctx.constant(1, scalar), scalar)
    x0 = ew("add", x0, k0)
    x1 = ew("add", ew("add", x1, k1), broadcast_operand(ctx, i1, scalar, aval.shape))
    return [i1, x0, x1, k1, k2, k0]

  regions = [ctx.region(state_avals, [ShapedArray((), dtypes.bool_)], cond),
             ctx.region(state_avals, state_avals, body)]
  outs = ctx.op("stablehlo.while", [i0, *x, ks[1], ks[2], ks[0]], state_avals,
                regions=regions, operand_avals=state_avals)
  return outs[1:3]


threefry2x32_p.def_abstract_eval(_threefry2x32_abstract_eval)
lowering.register_lowering(threefry2x32_p, _threefry2x32_lowering)
ad.defjvp_zero(threefry2x32_p)   # uint32 bits: float0 tangents
# Elementwise with rank-0 broadcasting (JAX: `batching.defbroadcasting(threefry2x32_p)`).
defbroadcasting(threefry2x32_p)


def threefry2x32(key1: Any, key2: Any, x1: Any, x2: Any) -> list[Any]:
  """Applies the Threefry-2x32 block cipher elementwise (`jax.extend.random.threefry2x32_p`).

  Each position encrypts the 64-bit block `(x1, x2)` under the 64-bit key `(key1, key2)`
  with 20 rounds.

  Args:
    key1, key2: the key words, `u32[*s]` or `u32[]`.
    x1, x2: the counter words, `u32[*s]` or `u32[]`.

  Returns:
    `[y1, y2]`, two `u32[*s]` arrays.

  Raises:
    TypeError: if an operand is not uint32, or the shapes differ (other than rank 0).

  References:
    Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011.

  Examples:
    >>> import numpy as np
    >>> u = lambda v: np.uint32(v)
    >>> [int(y) for y in threefry2x32(u(0), u(0), u(0), u(0))]
    [1797259609, 2579123966]
  """
  return threefry2x32_p.bind(key1, key2, x1, x2)


# ---------------------------------------------------------------------------
# iota_2x32_shape(shape) -> (hi, lo): the row-major index of each position as a 64-bit
# integer, split into its high and low uint32 words (JAX's counter for partitionable
# Threefry; computed in uint64 inside the lowering, so no x64 flag is needed).
iota_2x32_shape_p = Primitive("iota_2x32_shape")
iota_2x32_shape_p.multiple_results = True


def _iota_2x32_shape_abstract_eval(*, shape):
  return [ShapedArray(shape, _u32)] * 2


def _iota_2x32_shape_lowering(ctx, *, shape):
  out = ctx.avals_out[0]
  if not shape:
    zero = ctx.constant(0, out)
    return [zero, zero]
  a64 = ShapedArray(shape, _u64)
  s64 = ShapedArray((), _u64)

  def full(v):
    return broadcast_operand(ctx, ctx.constant(v, s64), s64, shape)

  counts = None
  strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]
  for dim, stride in enumerate(strides):
    i = ctx.op("stablehlo.iota", [], [a64], attrs=f"iota_dimension = {dim} : i64",
               operand_avals=[])[0]
    if stride != 1:
      i = ctx.elementwise("stablehlo.multiply", i, full(stride), aval=a64)
    counts = i if counts is None else ctx.elementwise("stablehlo.add", counts, i, aval=a64)
  hi = ctx.elementwise("stablehlo.shift_right_logical", counts, full(32), aval=a64)
  lo = ctx.op("stablehlo.convert", [counts], [out], operand_avals=[a64])[0]
  hi = ctx.op("stablehlo.convert", [hi], [out], operand_avals=[a64])[0]
  return [hi, lo]


iota_2x32_shape_p.def_abstract_eval(_iota_2x32_shape_abstract_eval)
lowering.register_lowering(iota_2x32_shape_p, _iota_2x32_shape_lowering)
ad.defjvp_zero(iota_2x32_shape_p)
# iota_2x32_shape has no operands, so vmap never calls this rule (it is registered so that
# every primitive has one): the result does not depend on the batch.
batching.primitive_batchers[iota_2x32_shape_p] = lambda args, dims, *, shape: (
    iota_2x32_shape_p.bind(shape=shape), [batching.not_mapped] * 2)


def iota_2x32_shape(shape: Sequence[int]) -> list[Any]:
  """The row-major position of each element as a 64-bit count in two uint32 words.

  Args:
    shape: the result shape `s`.

  Returns:
    `[hi, lo]`, two `u32[*s]` arrays: the high and low 32 bits of
    `iota(uint64, prod(s)).reshape(s)` (as JAX's `prng.iota_2x32_shape`).

  Examples:
    >>> import numpy as np
    >>> hi, lo = iota_2x32_shape((2, 3))
    >>> np.asarray(lo)
    array([[0, 1, 2],
           [3, 4, 5]], dtype=uint32)
  """
  return iota_2x32_shape_p.bind(shape=canonicalize_shape("iota_2x32_shape", "shape", shape))


# ---------------------------------------------------------------------------
# rng_bit_generator(key, shape, dtype, algorithm) -> (new_key, bits): XLA's stateless bit
# generator. The key is u32[4] (bitcast to the u64[2] state XLA wants) or u64[2].


class RandomAlgorithm(enum.IntEnum):
  """The algorithm of `rng_bit_generator` (JAX's `lax.RandomAlgorithm`)."""
  RNG_DEFAULT = 0   # the platform's default
  RNG_THREE_FRY = 1
  RNG_PHILOX = 2

  def __str__(self):
    return self.name


_ALGORITHM_ATTR = {RandomAlgorithm.RNG_DEFAULT: "DEFAULT",
                   RandomAlgorithm.RNG_THREE_FRY: "THREE_FRY",
                   RandomAlgorithm.RNG_PHILOX: "PHILOX"}
_RBG_DTYPES = frozenset(np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))

rng_bit_generator_p = Primitive("rng_bit_generator")
rng_bit_generator_p.multiple_results = True


def _rng_bit_generator_abstract_eval(key, *, shape, dtype, algorithm):
  if not ((key.shape == (4,) and key.dtype == _u32) or
          (key.shape == (2,) and key.dtype == _u64)):
    raise TypeError(f"rng_bit_generator: the key must be u32[4] (or u64[2]), got "
                    f"{key.str_short()}. Make one with lax.convert_element_type and "
                    f"concatenate, or from two random.key_data keys.")
  if dtype not in _RBG_DTYPES:
    raise TypeError(f"rng_bit_generator: unsupported dtype {np.dtype(dtype).name}")
  return [key.strip_weak_type(), ShapedArray(shape, dtype)]


def _rng_bit_generator_lowering(ctx, key, *, shape, dtype, algorithm):
  key_aval = ctx.avals_in[0]
  state = ShapedArray((2,), _u64)
  if key_aval.dtype == _u32:   # u32[4] -> u32[2,2] -> u64[2]
    pairs = ShapedArray((2, 2), _u32)
    key = ctx.op("stablehlo.reshape", [key], [pairs])[0]
    key = ctx.op("stablehlo.bitcast_convert", [key], [state], operand_avals=[pairs])[0]
  attr = f"rng_algorithm = #stablehlo<rng_algorithm {_ALGORITHM_ATTR[algorithm]}>"
  new_key, bits = ctx.op("stablehlo.rng_bit_generator", [key], [state, ctx.avals_out[1]],
                         attrs=attr, operand_avals=[state])
  if key_aval.dtype == _u32:
    pairs = ShapedArray((2, 2), _u32)
    new_key = ctx.op("stablehlo.bitcast_convert", [new_key], [pairs], operand_avals=[state])[0]
    new_key = ctx.op("stablehlo.reshape", [new_key], [key_aval], operand_avals=[pairs])[0]
  return [new_key, bits]


rng_bit_generator_p.def_abstract_eval(_rng_bit_generator_abstract_eval)
lowering.register_lowering(rng_bit_generator_p, _rng_bit_generator_lowering)
ad.defjvp_zero(rng_bit_generator_p)


def _rng_bit_generator_batch(args, dims, *, shape, dtype, algorithm):
  """JAX's `_rng_bit_generator_batching_rule`: the bits of the whole batch come from the
  FIRST key (one generator call of shape `(batch, *shape)`), whose new state replaces it;
  the other keys are returned unchanged. So, as in JAX, vmap over keys is not a loop over
  them."""
  (keys,), (d,) = args, dims
  keys = batching.moveaxis(keys, d, 0)
  size = core.get_aval(keys).shape[0]
  key = index_in_dim(keys, 0, 0, keepdims=False)
  new_key, bits = rng_bit_generator_p.bind(key, shape=(size, *shape), dtype=dtype,
                                           algorithm=algorithm)
  new_keys = dynamic_update_index_in_dim(keys, new_key, np.int32(0), 0)
  return [new_keys, bits], [0, 0]


batching.primitive_batchers[rng_bit_generator_p] = _rng_bit_generator_batch


def rng_bit_generator(key: Any, shape: Sequence[int], dtype: Any = np.uint32,
                      algorithm: RandomAlgorithm = RandomAlgorithm.RNG_DEFAULT, *,
                      out_sharding: Any = None):
  """Stateless random bits from XLA's RngBitGenerator (JAX's `lax.rng_bit_generator`).

  The bits depend on the algorithm and, for `RNG_DEFAULT`, on the platform; they are not the
  bits of `stagecraft.random` (use that for reproducible streams).

  Args:
    key: the generator state, `u32[4]` (or `u64[2]` when x64 is on).
    shape: the shape `s` of the bits.
    dtype: uint8, uint16, uint32 (default) or uint64 (needs x64).
    algorithm: a `RandomAlgorithm`: RNG_DEFAULT, RNG_THREE_FRY or RNG_PHILOX.
    out_sharding: None, or a NamedSharding / PartitionSpec laying the bits out.

  Returns:
    `(new_key, bits)`: the next state (the key's aval) and `dtype[*s]`.

  Raises:
    TypeError: for a key that is not `u32[4]`/`u64[2]`, or a dtype that is not unsigned.

  Examples:
    >>> import numpy as np
    >>> new_key, bits = rng_bit_generator(np.zeros(4, np.uint32), (3,))
    >>> bits.shape, bits.dtype
    ((3,), dtype('uint32'))
  """
  shape = canonicalize_shape("rng_bit_generator", "shape", shape)
  dtype = dtypes.check_user_dtype(dtype, "rng_bit_generator")
  new_key, bits = rng_bit_generator_p.bind(key, shape=shape, dtype=dtype,
                                           algorithm=RandomAlgorithm(algorithm))
  return new_key, laid_out(bits, out_sharding)
