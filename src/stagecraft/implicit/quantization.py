"""Blockwise-quantized weights as implicit arrays: 4-bit NormalFloat (`ArrayNF4`) and absmax
int8 (`Array8bit`), with `dot_general` handlers that dequantize inside the program.

Layout (both classes): the weight, flattened in row-major order and zero-padded to a
multiple of `block_size`, is cut into blocks of `block_size` values; each block has a scale,
its absolute maximum, and stores its values divided by it, encoded as NF4 codes (two 4-bit
codes per uint8, high nibble first: `packed: u8[n_blocks, block_size/2]`) or as int8
(`codes: i8[n_blocks, block_size]`, value/127). The scales are `absmax: f32[n_blocks]`, or,
with QLoRA's double quantization (the default of `ArrayNF4.quantize`), int8 codes
`absmax: i8[n_blocks]` of each scale's deviation from the mean of its group of
`absmax_group` (256) blocks, with a float32 scale and that mean per group
(`absmax_scale`, `absmax_offset`): 4.127 instead of 4.5 bits per value at
`block_size=64`. The values are encoded against the dequantized scales. QLoRA stores the
scales as 8-bit floats with one mean per tensor; here a linear int8 code per group and a
mean per group (the deviations from the group mean are narrow: the measured relative error
of the dequantized weight is within 0.01% of single quantization's, of matmul results
within 0.1%), which also keeps groups inside the slices of a stack of layers (see
`QuantizedArray`).

`dot_general` with a 2-D quantized operand dequantizes it chunk by chunk of rows inside a
`scan` (about `chunk_elements` values at a time, sized to stay in cache with their dot), so
no full-precision copy of the weight exists outside the compiled program (nor, when
chunked, inside it). NF4 chunks are dequantized as two column planes, the high and low
nibbles (even and odd columns), each with a 15-select tree on the code bits: no gather, and
no interleaving shuffle of dequantized values (the even/odd interleave is applied to the
small activation or output instead). Higher-rank weights are dequantized whole inside the
program. The `reshape`, `convert_element_type` and 2-D `transpose` handlers are lazy
(metadata only).

References:
  Dettmers, Pagnoni, Holtzman, Zettlemoyer. QLoRA: Efficient Finetuning of Quantized LLMs
  (2023), section 3 and appendix E (the 16 NF4 values). Dettmers et al., 8-bit Optimizers
  via Block-wise Quantization (2022), for blockwise absmax int8.
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Union

import numpy as np

import stagecraft.numpy as jnp
from stagecraft import core, lax
from stagecraft.api import eval_shape
from stagecraft.implicit.core import ImplicitArray, aux_field, register
from stagecraft.runtime.array import Array

__all__ = ["NF4_VALUES", "ArrayNF4", "Array8bit", "QuantizedArray"]

#: The 16 NormalFloat-4 values of QLoRA (appendix E): quantiles of N(0, 1) normalized to
#: [-1, 1], with an exact zero (8 positive and 7 negative quantiles).
NF4_VALUES = np.array([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0], np.float32)

_NF4_MIDPOINTS = (NF4_VALUES[1:] + NF4_VALUES[:-1]) / 2

ArrayLike = Union[Array, core.Tracer, np.ndarray, np.generic, float, int]


def _blocks(w, block_size: int):
  """`w` flattened, zero-padded and cut into `f32[n_blocks, block_size]`, with its absmax
  (a block of zeros gets scale 1)."""
  flat = jnp.reshape(jnp.asarray(w, np.float32), (-1,))
  pad = (-flat.shape[0]) % block_size
  if pad:
    flat = jnp.concatenate([flat, jnp.zeros((pad,), np.float32)])
  blocks = jnp.reshape(flat, (-1, block_size))
  absmax = jnp.max(jnp.abs(blocks), axis=1)
  absmax = jnp.where(absmax == 0, jnp.ones_like(absmax), absmax)
  return blocks, absmax


def _check_block_size(cls_name: str, block_size: int, even: bool):
  if not isinstance(block_size, (int, np.integer)) or block_size < 1 or (even and
                                                                         block_size % 2):
    raise ValueError(f"{cls_name}.quantize: block_size must be a positive "
                     f"{'even ' if even else ''}int, got {block_size!r}.")


def _double_quantize(absmax, group: int):
  """QLoRA's double quantization of block scales `absmax: f32[..., n]` (leading axes: a
  stack quantized independently): in groups of `group` consecutive scales (the last one
  padded with copies of the last scale), each scale minus its group's mean is stored as an
  int8 code of the group's largest deviation. Returns `(codes: i8[..., n],
  scale: f32[..., n_groups], offset: f32[..., n_groups])`."""
  n, lead = absmax.shape[-1], absmax.shape[:-1]
  pad = (-n) % group
  a = absmax
  if pad:
    a = jnp.concatenate([a, jnp.broadcast_to(a[..., -1:], (*lead, pad))], axis=-1)
  a = jnp.reshape(a, (*lead, -1, group))
  offset = jnp.mean(a, axis=-1)
  dev = a - offset[..., None]
  scale = jnp.max(jnp.abs(dev), axis=-1)
  scale = jnp.where(scale == 0, jnp.ones_like(scale), scale)
  codes = jnp.round(dev / scale[..., None] * 127.0).astype(np.int8)
  return jnp.reshape(codes, (*lead, -1))[..., :n], scale, offset


def _dequantize_scales(codes, scale, offset, group: int):
  """The block scales `f32[..., n]` of double-quantized `codes: i8[..., n]` with per-group
  `scale, offset: f32[..., n_groups]` (leading axes are a stack of independent arrays)."""
  n, ng = codes.shape[-1], scale.shape[-1]
  c = codes.astype(np.float32)
  if ng * group != n:
    c = jnp.concatenate([c, jnp.zeros((*c.shape[:-1], ng * group - n), np.float32)], axis=-1)
  c = jnp.reshape(c, (*c.shape[:-1], ng, group))
  vals = c * (scale / 127.0)[..., None] + offset[..., None]
  return jnp.reshape(vals, (*vals.shape[:-2], ng * group))[..., :n]


@dataclasses.dataclass
class QuantizedArray(ImplicitArray):
  """Base of the blockwise-quantized arrays (see the module docstring for the layout).

  `absmax` holds the block scales: `f32[n_blocks]`, or, double quantized (QLoRA section 3),
  `i8[n_blocks]` codes with `absmax_scale, absmax_offset: f32[n_groups]` for groups of
  `absmax_group` consecutive blocks (scale = code * absmax_scale / 127 + absmax_offset).
  A stack (`shape[0]` slices of whole blocks: quantized from a 3-D or higher weight, or
  stacked by `scan`) double quantizes each slice's scales on its own: `i8[shape[0], nb]`
  codes with `f32[shape[0], n_groups]` scales and offsets.
  `transposed` marks a lazy 2-D transpose: the stored weight has shape `shape[::-1]`.
  """
  absmax: Any
  absmax_scale: Any = None
  absmax_offset: Any = None
  block_size: int = aux_field(default=64)
  transposed: bool = aux_field(default=False)
  absmax_group: int = aux_field(default=256)

  #: About how many values one chunk of the chunked dequantizing matmul dequantizes.
  chunk_elements: ClassVar[int] = 1 << 18
  #: The dataclass field holding the codes.
  _data_field: ClassVar[str] = ""

  #: Column planes of `dequantize_planes` (see `_matmul_2d`).
  planes: ClassVar[int] = 1

  def dequantize_blocks(self, data, absmax):
    """`f32[n, block_size]` values of the blocks `data` (with scales `absmax: f32[n]`)."""
    raise NotImplementedError

  def dequantize_planes(self, data, absmax):
    """The values of the blocks `data` as `planes` arrays `f32[n, block_size/planes]`,
    plane k holding the values at positions k, k + planes, ... of each block."""
    raise NotImplementedError

  @property
  def double_quantized(self) -> bool:
    return self.absmax_scale is not None

  def block_scales(self):
    """The block scales as `f32[n_blocks]` (dequantized first when double quantized)."""
    if not self.double_quantized:
      return self.absmax
    return jnp.reshape(_dequantize_scales(self.absmax, self.absmax_scale, self.absmax_offset,
                                          self.absmax_group), (-1,))

  @classmethod
  def _build(cls, w, block_size: int, double_quant: bool, group: int, codes_fn):
    """Cuts `w` into blocks, (double) quantizes their absmax, and encodes the blocks with
    `codes_fn(blocks / scales) -> codes`."""
    if not isinstance(group, (int, np.integer)) or group < 1:
      raise ValueError(f"{cls.__name__}.quantize: absmax_group must be a positive int, got "
                       f"{group!r}.")
    aval = core.get_aval(w)
    blocks, absmax = _blocks(w, block_size)
    kw: dict = {}
    if double_quant:
      per = int(np.prod(aval.shape[1:], dtype=np.int64))
      stacked = len(aval.shape) >= 3 and aval.shape[0] > 0 and per % block_size == 0
      lead = (aval.shape[0], per // block_size) if stacked else (-1,)
      codes, scale, offset = _double_quantize(jnp.reshape(absmax, lead), int(group))
      absmax = jnp.reshape(_dequantize_scales(codes, scale, offset, int(group)), (-1,))
      kw = dict(absmax_scale=scale, absmax_offset=offset, absmax_group=int(group))
      stored = codes
    else:
      stored = absmax
    data = codes_fn(blocks / absmax[:, None])
    dtype = aval.dtype if np.issubdtype(aval.dtype, np.floating) else np.float32
    return cls(stored, block_size=block_size, shape=aval.shape, dtype=dtype,
               **{cls._data_field: data}, **kw)

  @property
  def stored_shape(self) -> tuple[int, ...]:
    return tuple(self.shape[::-1]) if self.transposed else tuple(self.shape)

  def _data(self):
    return getattr(self, self._data_field)

  def materialize(self):
    vals = self.dequantize_blocks(self._data(), self.block_scales())
    n = int(np.prod(self.stored_shape, dtype=np.int64))
    out = jnp.reshape(jnp.reshape(vals, (-1,))[:n], self.stored_shape)
    if self.transposed:
      out = lax.transpose(out, (1, 0))
    return lax.convert_element_type(out, self.dtype)

  def _replace_data(self, data, absmax, shape, scale=None, offset=None):
    return dataclasses.replace(self, absmax=absmax, absmax_scale=scale, absmax_offset=offset,
                               shape=shape, **{self._data_field: data})

  def _whole_blocks(self, shape) -> int | None:
    """Blocks in an array of `shape`, when it is a whole number of blocks."""
    n = int(np.prod(shape, dtype=np.int64))
    return None if n % self.block_size else n // self.block_size

  def unstack(self):
    """Slices along the leading axis are runs of whole blocks when the slice size is a
    multiple of `block_size`: the codes and scales are reshaped to `(n, blocks per slice,
    ...)`, so `lax.scan` over the array gives the body each slice as a quantized array.
    Double-quantized scales stay so when quantized per slice (a stack) or when a slice is
    a whole number of scale groups; else they are dequantized (one float32 per block) for
    the slices. None otherwise (transposed, 1-D, or blocks straddling slices)."""
    nb = self._whole_blocks(self.shape[1:])
    if self.transposed or len(self.shape) < 2 or nb is None:
      return None
    n, data = self.shape[0], self._data()
    data = jnp.reshape(data, (n, nb, *data.shape[1:]))
    shape = tuple(self.shape[1:])
    if not self.double_quantized:
      if self.absmax.ndim != 1:
        return None
      return self._replace_data(data, jnp.reshape(self.absmax, (n, nb)), shape)
    if self.absmax.shape == (n, nb):
      return self._replace_data(data, self.absmax, shape, self.absmax_scale,
                                self.absmax_offset)
    if self.absmax.ndim == 1 and nb % self.absmax_group == 0:
      ng = nb // self.absmax_group
      return self._replace_data(data, jnp.reshape(self.absmax, (n, nb)), shape,
                                jnp.reshape(self.absmax_scale, (n, ng)),
                                jnp.reshape(self.absmax_offset, (n, ng)))
    return self._replace_data(data, jnp.reshape(self.block_scales(), (n, nb)), shape)

  @classmethod
  def stack(cls, stacked, length):
    """The inverse of `unstack` (slices of whole blocks are concatenated into one quantized
    array of shape `(length, *shape)`, double-quantized slices keeping their own scale
    groups); other stacks are wrapped in `Stacked`."""
    nb = stacked._whole_blocks(stacked.shape)
    if stacked.transposed or nb is None or stacked.absmax.shape != (length, nb):
      return super().stack(stacked, length)
    data = stacked._data()
    data = jnp.reshape(data, (length * nb, *data.shape[2:]))
    shape = (int(length), *stacked.shape)
    if not stacked.double_quantized:
      return stacked._replace_data(data, jnp.reshape(stacked.absmax, (length * nb,)), shape)
    return stacked._replace_data(data, stacked.absmax, shape, stacked.absmax_scale,
                                 stacked.absmax_offset)

  @property
  def nbytes(self) -> int:
    """Bytes of the stored data and scales."""
    return sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize
               for x in (self._data(), self.absmax, self.absmax_scale, self.absmax_offset)
               if x is not None)


def _nf4_codes(x):
  """`u8[n, bs/2]` packed NF4 codes of `x: f32[n, bs]` (values in [-1, 1]): the code is the
  number of midpoints between NF4 values below the value; high nibble first."""
  codes = jnp.zeros(x.shape, np.uint8)
  for m in _NF4_MIDPOINTS:
    codes = codes + (x > float(m)).astype(np.uint8)
  return lax.bitwise_or(lax.shift_left(codes[:, 0::2], np.uint8(4)), codes[:, 1::2])


@dataclasses.dataclass
class ArrayNF4(QuantizedArray, warn_on_materialize=True):
  """A weight quantized to 4-bit NormalFloat (QLoRA): `packed: u8[n_blocks, block_size/2]`
  and the block scales (`absmax`, double quantized by default). Memory at
  `block_size=64`: 4 bits per value plus 8 bits per block and 64 bits per 256 blocks
  (0.1290x of float32) double quantized, 32 bits per block (0.1406x) single.

  Example:
    >>> import numpy as np
    >>> w = np.random.default_rng(0).standard_normal((128, 64)).astype(np.float32)
    >>> q = ArrayNF4.quantize(w)
    >>> q.aval, q.packed.shape, q.absmax.dtype, q.absmax_scale.shape
    (ShapedArray(float32[128,64]), (128, 32), dtype('int8'), (1,))
  """
  packed: Any = None
  _data_field: ClassVar[str] = "packed"
  planes: ClassVar[int] = 2

  @classmethod
  def quantize(cls, w, block_size: int = 64, double_quant: bool = True,
               absmax_group: int = 256) -> "ArrayNF4":
    """Quantizes `w` (any shape, float) blockwise to NF4: each value divided by its block's
    scale is rounded to the nearest NF4 value.

    Args:
      w: `f[*s]` array.
      block_size: values per block (a positive even int).
      double_quant: quantize the block scales too (QLoRA section 3): each block's absmax,
        minus the mean of its group of `absmax_group` blocks, becomes an int8 code of the
        group's largest deviation (stored as float32 with the mean). The values are then
        encoded against the dequantized scales.
      absmax_group: blocks per group of the double quantization (QLoRA: 256).

    Returns:
      ArrayNF4 standing for `T[*s]`, T the dtype of `w` (float32 for non-float input).

    Raises:
      ValueError: for a block size that is not a positive even int, or a group size that
        is not a positive int.
    """
    _check_block_size(cls.__name__, block_size, even=True)
    return cls._build(w, block_size, double_quant, absmax_group, _nf4_codes)

  def dequantize_blocks(self, data, absmax):
    hi = lax.shift_right_logical(data, np.uint8(4))
    lo = lax.bitwise_and(data, np.uint8(15))
    codes = jnp.reshape(jnp.stack([hi, lo], axis=-1), (data.shape[0], -1))
    return _nf4_lookup(codes) * absmax[:, None]

  def dequantize_planes(self, data, absmax):
    """The even and odd values of the blocks (the high and low nibbles), each
    `f32[n, block_size/2]`."""
    return [_nf4_lookup(lax.shift_right_logical(data, np.uint8(4))) * absmax[:, None],
            _nf4_lookup(lax.bitwise_and(data, np.uint8(15))) * absmax[:, None]]


def _nf4_lookup(codes):
  """`f32` NF4 values of `codes: u8` in [0, 16): a binary tree of 15 selects on the four
  code bits, tested on the uint8 codes. On XLA:CPU this vectorizes; a gather from the
  16-entry table (`jnp.take`) measured no faster, an int32 bit test slightly slower."""
  level = [lax.full(codes.shape, float(v), np.float32) for v in NF4_VALUES]
  for bit in range(4):
    on = lax.ne(lax.bitwise_and(codes, np.uint8(1 << bit)), np.uint8(0))
    level = [lax.select(on, level[2 * j + 1], level[2 * j]) for j in range(len(level) // 2)]
  return level[0]


@dataclasses.dataclass
class Array8bit(QuantizedArray):
  """A weight quantized blockwise to int8 by absmax: `codes: i8[n_blocks, block_size]`
  (round(127 * value / absmax)), `absmax: f32[n_blocks]` (or double quantized, as for
  ArrayNF4). A matmul with float32 activations returns float32 (the declared dtype)."""
  codes: Any = None
  _data_field: ClassVar[str] = "codes"
  planes: ClassVar[int] = 1

  @classmethod
  def quantize(cls, w, block_size: int = 64, double_quant: bool = False,
               absmax_group: int = 256) -> "Array8bit":
    """Quantizes `w` blockwise to int8 (round to nearest of value/absmax * 127).

    `double_quant` and `absmax_group` quantize the block scales as in `ArrayNF4.quantize`
    (off by default: the scales are 1/16 of the int8 codes' bytes at `block_size=64`).

    Raises:
      ValueError: for a block size that is not a positive int, or a group size that is not
        a positive int.
    """
    _check_block_size(cls.__name__, block_size, even=False)
    return cls._build(w, block_size, double_quant, absmax_group,
                      lambda x: jnp.round(jnp.clip(x, -1.0, 1.0) * 127.0).astype(np.int8))

  def dequantize_blocks(self, data, absmax):
    return data.astype(np.float32) * (absmax / 127.0)[:, None]

  def dequantize_planes(self, data, absmax):
    return [self.dequantize_blocks(data, absmax)]


# ---------------------------------------------------------------------------
# Handlers


def _chunk_rows(q: QuantizedArray) -> int | None:
  """Rows of the stored 2-D weight per chunk, or None when it is not chunked (small, or
  chunks would not align with blocks)."""
  rows, cols = q.stored_shape
  if rows * cols <= q.chunk_elements or (rows * cols) % q.block_size:
    return None
  r = max(1, q.chunk_elements // cols)
  while r > 1 and (rows % r or (r * cols) % q.block_size):
    r -= 1
  if rows % r or (r * cols) % q.block_size or r == rows:
    return None
  return r


def _planes(q: QuantizedArray, data, scales, rows: int):
  """The `rows` stored rows held by the blocks `data` (scales `f32[n]`) as column planes
  `P_k: T[rows, cols/p]`, `P_k[i, j] = S[i, p*j + k]` (p = `q.planes`), in dtype T of `q`."""
  cols = q.stored_shape[1]
  n = rows * cols // q.planes
  return [jnp.reshape(jnp.reshape(v, (-1,))[:n], (rows, cols // q.planes)).astype(q.dtype)
          for v in q.dequantize_planes(data, scales)]


def _matmul_2d(x2, q: QuantizedArray, contract_stored: int, precision, pet):
  """`x2: f[m, k]` times the stored 2-D weight `S` of `q`: `x2 @ S` when
  `contract_stored == 0`, `x2 @ S.T` when 1.

  The weight is dequantized as column planes (`_planes`: for NF4 the high and low nibbles
  of the packed bytes, i.e. the even and odd columns, so no interleaving shuffle is
  needed; the interleave is applied to the small activation or output instead), chunk by
  chunk of about `chunk_elements` values inside a `scan` so each dequantized chunk stays
  in cache next to its dot."""
  rows, cols = q.stored_shape
  p = q.planes
  if cols % p:
    s = q.materialize()
    s = lax.transpose(s, (1, 0)) if q.transposed else s
    return lax.dot_general(x2, s, (((1,), (contract_stored,)), ((), ())), precision, pet)
  m = x2.shape[0]
  data, scales = q._data(), q.block_scales()
  r = _chunk_rows(q)
  nch = 1 if r is None else rows // r
  r = rows if r is None else r
  dims = (((1,), (0,)), ((), ()))
  dims_t = (((1,), (1,)), ((), ()))
  xs_planes = None if contract_stored == 0 else [x2[:, k::p] for k in range(p)]

  def one_chunk(d, a, xc):
    ps = _planes(q, d, a, r)
    if contract_stored == 0:           # partial sums of x2[:, chunk rows] @ P_k
      return [lax.dot_general(xc, pk, dims, precision, pet) for pk in ps]
    out = None                         # x2 @ S[chunk rows].T = sum_k x2[:, k::p] @ P_k.T
    for xk, pk in zip(xs_planes, ps):
      t = lax.dot_general(xk, pk, dims_t, precision, pet)
      out = t if out is None else out + t
    return out

  if nch == 1:
    res = one_chunk(data, scales, x2)
    if contract_stored == 1:
      return res
    outs = res
  else:
    data_c = jnp.reshape(data, (nch, -1, *data.shape[1:]))
    scales_c = jnp.reshape(scales, (nch, -1))
    if contract_stored == 0:
      xs = jnp.transpose(jnp.reshape(x2, (m, nch, r)), (1, 0, 2))
      out_aval = eval_shape(lambda a, b: lax.dot_general(a, b, dims, precision, pet),
                            core.ShapeDtypeStruct((m, r), x2.dtype),
                            core.ShapeDtypeStruct((r, cols // p), q.dtype))

      def body(acc, inp):
        return [a + b for a, b in zip(acc, one_chunk(*inp))], None
      outs, _ = lax.scan(body, [jnp.zeros(out_aval.shape, out_aval.dtype)] * p,
                         (data_c, scales_c, xs))
    else:
      _, ys = lax.scan(lambda c, inp: (c, one_chunk(inp[0], inp[1], None)), 0,
                       (data_c, scales_c))        # [nch, m, r]
      return jnp.reshape(jnp.transpose(ys, (1, 0, 2)), (m, rows))
  if p == 1:
    return outs[0]
  return jnp.reshape(jnp.stack(outs, axis=-1), (m, cols))


def _dot(x, q: QuantizedArray, q_is_lhs: bool, dimension_numbers, precision,
         preferred_element_type):
  (lc, rc), (lb, rbd) = dimension_numbers
  qc, xc = (lc, rc) if q_is_lhs else (rc, lc)
  x_aval = core.get_aval(x)
  if len(q.shape) != 2 or lb or rbd or len(qc) != 1:
    w = q.materialize()
    args = (w, x) if q_is_lhs else (x, w)
    return lax.dot_general(*args, dimension_numbers, precision, preferred_element_type)
  qd, xd = qc[0], xc[0]
  stored = (1 - qd) if q.transposed else qd
  free = [i for i in range(x_aval.ndim) if i != xd]
  free_shape = tuple(x_aval.shape[i] for i in free)
  x2 = jnp.reshape(lax.transpose(x, (*free, xd)), (-1, x_aval.shape[xd]))
  out2 = _matmul_2d(x2, q, stored, precision, preferred_element_type)     # [m, n]
  n = q.shape[1 - qd]
  if q_is_lhs:
    return jnp.reshape(lax.transpose(out2, (1, 0)), (n, *free_shape))
  return jnp.reshape(out2, (*free_shape, n))


@register("dot_general")
def _dot_x_q(lhs: ArrayLike, rhs: QuantizedArray, *, dimension_numbers, precision,
             preferred_element_type):
  return _dot(lhs, rhs, False, dimension_numbers, precision, preferred_element_type)


@register("dot_general")
def _dot_q_x(lhs: QuantizedArray, rhs: ArrayLike, *, dimension_numbers, precision,
             preferred_element_type):
  return _dot(rhs, lhs, True, dimension_numbers, precision, preferred_element_type)


@register("dot_general")
def _dot_q_q(lhs: QuantizedArray, rhs: QuantizedArray, *, dimension_numbers, precision,
             preferred_element_type):
  return _dot(rhs.materialize(), lhs, True, dimension_numbers, precision,
              preferred_element_type)


@register("transpose")
def _transpose_q(x: QuantizedArray, *, permutation):
  if len(x.shape) == 2 and tuple(permutation) == (1, 0):
    return dataclasses.replace(x, transposed=not x.transposed, shape=x.shape[::-1])
  if tuple(permutation) == tuple(range(len(x.shape))):
    return x
  return lax.transpose(x.materialize(), permutation)


@register("reshape")
def _reshape_q(x: QuantizedArray, *, new_sizes, dimensions, **_):
  if not x.transposed and dimensions is None:
    return dataclasses.replace(x, shape=tuple(new_sizes))   # row-major blocks: free
  return lax.reshape(x.materialize(), new_sizes, dimensions)


@register("convert_element_type")
def _convert_q(x: QuantizedArray, *, new_dtype, weak_type, **_):
  if np.issubdtype(np.dtype(new_dtype), np.floating) and not weak_type:
    return x.astype(new_dtype)
  return lax.convert_element_type(x.materialize(), new_dtype, weak_type)
