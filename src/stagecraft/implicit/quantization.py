"""Blockwise-quantized weights as implicit arrays: 4-bit NormalFloat (`ArrayNF4`) and absmax
int8 (`Array8bit`), with `dot_general` handlers that dequantize inside the program.

Layout (both classes): the weight, flattened in row-major order and zero-padded to a
multiple of `block_size`, is cut into blocks of `block_size` values; each block stores its
absolute maximum as a float32 scale (`absmax: f32[n_blocks]`) and its values divided by it,
encoded as NF4 codes (two 4-bit codes per uint8, high nibble first: `packed:
u8[n_blocks, block_size/2]`) or as int8 (`codes: i8[n_blocks, block_size]`, value/127).

`dot_general` with a 2-D quantized operand dequantizes it row chunk by row chunk inside a
`scan` (about `chunk_elements` values at a time) when the weight is large, so no
full-precision copy of the weight exists outside the compiled program (nor, when chunked,
inside it); small or higher-rank weights are dequantized whole inside the program. The
`reshape`, `convert_element_type` and 2-D `transpose` handlers are lazy (metadata only).

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


@dataclasses.dataclass
class QuantizedArray(ImplicitArray):
  """Base of the blockwise-quantized arrays (see the module docstring for the layout).

  `transposed` marks a lazy 2-D transpose: the stored weight has shape `shape[::-1]`.
  """
  absmax: Any
  block_size: int = aux_field(default=64)
  transposed: bool = aux_field(default=False)

  #: About how many values one chunk of the chunked dequantizing matmul dequantizes.
  chunk_elements: ClassVar[int] = 1 << 20

  def dequantize_blocks(self, data, absmax):
    """`f32[n, block_size]` values of the blocks `data` (with scales `absmax: f32[n]`)."""
    raise NotImplementedError

  @property
  def stored_shape(self) -> tuple[int, ...]:
    return tuple(self.shape[::-1]) if self.transposed else tuple(self.shape)

  def _data(self):
    raise NotImplementedError

  def materialize(self):
    vals = self.dequantize_blocks(self._data(), self.absmax)
    n = int(np.prod(self.stored_shape, dtype=np.int64))
    out = jnp.reshape(jnp.reshape(vals, (-1,))[:n], self.stored_shape)
    if self.transposed:
      out = lax.transpose(out, (1, 0))
    return lax.convert_element_type(out, self.dtype)

  def _replace_data(self, data, absmax, shape):
    raise NotImplementedError

  def _whole_blocks(self, shape) -> int | None:
    """Blocks in an array of `shape`, when it is a whole number of blocks."""
    n = int(np.prod(shape, dtype=np.int64))
    return None if n % self.block_size else n // self.block_size

  def unstack(self):
    """Slices along the leading axis are runs of whole blocks when the slice size is a
    multiple of `block_size`: the codes and scales are reshaped to `(n, blocks per slice,
    ...)`, so `lax.scan` over the array gives the body each slice as a quantized array.
    None otherwise (transposed, 1-D, or blocks straddling slices)."""
    nb = self._whole_blocks(self.shape[1:])
    if self.transposed or len(self.shape) < 2 or nb is None or self.absmax.ndim != 1:
      return None
    n, data = self.shape[0], self._data()
    return self._replace_data(jnp.reshape(data, (n, nb, *data.shape[1:])),
                              jnp.reshape(self.absmax, (n, nb)), tuple(self.shape[1:]))

  @classmethod
  def stack(cls, stacked, length):
    """The inverse of `unstack` (slices of whole blocks are concatenated into one quantized
    array of shape `(length, *shape)`); other stacks are wrapped in `Stacked`."""
    nb = stacked._whole_blocks(stacked.shape)
    if stacked.transposed or nb is None or stacked.absmax.shape != (length, nb):
      return super().stack(stacked, length)
    data = stacked._data()
    return stacked._replace_data(jnp.reshape(data, (length * nb, *data.shape[2:])),
                                 jnp.reshape(stacked.absmax, (length * nb,)),
                                 (int(length), *stacked.shape))

  @property
  def nbytes(self) -> int:
    """Bytes of the stored data and scales."""
    return sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize
               for x in (self._data(), self.absmax))


@dataclasses.dataclass
class ArrayNF4(QuantizedArray, warn_on_materialize=True):
  """A weight quantized to 4-bit NormalFloat (QLoRA): `packed: u8[n_blocks, block_size/2]`,
  `absmax: f32[n_blocks]`. Memory: 4 bits per value plus 32 bits per block (0.1406x of
  float32 at `block_size=64`).

  Example:
    >>> import numpy as np
    >>> w = np.random.default_rng(0).standard_normal((128, 64)).astype(np.float32)
    >>> q = ArrayNF4.quantize(w)
    >>> q.aval, q.packed.shape, q.absmax.shape
    (ShapedArray(float32[128,64]), (128, 32), (128,))
  """
  packed: Any = None

  def _data(self):
    return self.packed

  def _replace_data(self, data, absmax, shape):
    return dataclasses.replace(self, absmax=absmax, packed=data, shape=shape)

  @classmethod
  def quantize(cls, w, block_size: int = 64) -> "ArrayNF4":
    """Quantizes `w` (any shape, float) blockwise to NF4: each value divided by its block's
    absmax is rounded to the nearest NF4 value.

    Args:
      w: `f[*s]` array.
      block_size: values per block (a positive even int).

    Returns:
      ArrayNF4 standing for `T[*s]`, T the dtype of `w` (float32 for non-float input).

    Raises:
      ValueError: for a block size that is not a positive even int.
    """
    _check_block_size(cls.__name__, block_size, even=True)
    aval = core.get_aval(w)
    blocks, absmax = _blocks(w, block_size)
    x = blocks / absmax[:, None]
    codes = jnp.zeros(x.shape, np.uint8)
    for m in _NF4_MIDPOINTS:   # the code is the number of midpoints below the value
      codes = codes + (x > float(m)).astype(np.uint8)
    packed = lax.bitwise_or(lax.shift_left(codes[:, 0::2], np.uint8(4)), codes[:, 1::2])
    dtype = aval.dtype if np.issubdtype(aval.dtype, np.floating) else np.float32
    return cls(absmax, block_size=block_size, packed=packed, shape=aval.shape, dtype=dtype)

  def dequantize_blocks(self, data, absmax):
    hi = lax.shift_right_logical(data, np.uint8(4))
    lo = lax.bitwise_and(data, np.uint8(15))
    codes = jnp.reshape(jnp.stack([hi, lo], axis=-1), (data.shape[0], -1))
    vals = jnp.take(jnp.asarray(NF4_VALUES), codes.astype(np.int32))
    return vals * absmax[:, None]


@dataclasses.dataclass
class Array8bit(QuantizedArray):
  """A weight quantized blockwise to int8 by absmax: `codes: i8[n_blocks, block_size]`
  (round(127 * value / absmax)), `absmax: f32[n_blocks]`. A matmul with float32 activations
  returns float32 (the declared dtype)."""
  codes: Any = None

  def _data(self):
    return self.codes

  def _replace_data(self, data, absmax, shape):
    return dataclasses.replace(self, absmax=absmax, codes=data, shape=shape)

  @classmethod
  def quantize(cls, w, block_size: int = 64) -> "Array8bit":
    """Quantizes `w` blockwise to int8 (round to nearest of value/absmax * 127).

    Raises:
      ValueError: for a block size that is not a positive int.
    """
    _check_block_size(cls.__name__, block_size, even=False)
    aval = core.get_aval(w)
    blocks, absmax = _blocks(w, block_size)
    codes = jnp.round(blocks / absmax[:, None] * 127.0).astype(np.int8)
    dtype = aval.dtype if np.issubdtype(aval.dtype, np.floating) else np.float32
    return cls(absmax, block_size=block_size, codes=codes, shape=aval.shape, dtype=dtype)

  def dequantize_blocks(self, data, absmax):
    return data.astype(np.float32) * (absmax / 127.0)[:, None]


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


def _matmul_2d(x2, q: QuantizedArray, contract_stored: int, precision, pet):
  """`x2: f[m, k]` times the stored 2-D weight `S` of `q`: `x2 @ S` when
  `contract_stored == 0`, `x2 @ S.T` when 1; chunked over the rows of `S`."""
  rows, cols = q.stored_shape
  dims = (((1,), (contract_stored,)), ((), ()))
  r = _chunk_rows(q)
  data = q._data()
  if r is None:
    s = q.dequantize_blocks(data, q.absmax)
    s = jnp.reshape(jnp.reshape(s, (-1,))[:rows * cols], (rows, cols)).astype(q.dtype)
    return lax.dot_general(x2, s, dims, precision, pet)
  nch = rows // r
  data_c = jnp.reshape(data, (nch, -1, data.shape[1]))
  absmax_c = jnp.reshape(q.absmax, (nch, -1))
  m = x2.shape[0]

  def wchunk(d, a):
    return jnp.reshape(q.dequantize_blocks(d, a), (r, cols)).astype(q.dtype)

  if contract_stored == 0:
    xs = jnp.transpose(jnp.reshape(x2, (m, nch, r)), (1, 0, 2))
    out_dtype = core.get_aval(lax.dot_general(x2[:, :r], wchunk(data_c[0], absmax_c[0]), dims,
                                              precision, pet)).dtype

    def body(acc, inp):
      d, a, xc = inp
      return acc + lax.dot_general(xc, wchunk(d, a), dims, precision, pet), None
    acc, _ = lax.scan(body, jnp.zeros((m, cols), out_dtype), (data_c, absmax_c, xs))
    return acc

  def body2(c, inp):
    d, a = inp
    return c, lax.dot_general(x2, wchunk(d, a), dims, precision, pet)
  _, ys = lax.scan(body2, 0, (data_c, absmax_c))          # [nch, m, r]
  return jnp.reshape(jnp.transpose(ys, (1, 0, 2)), (m, rows))


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
