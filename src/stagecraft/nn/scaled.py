"""Block-scaled matmuls (JAX's `nn.scaled_matmul`, `nn.scaled_dot_general`,
`nn.get_scaled_dot_general_config`): low-precision (mxfp8, nvfp4) contractions with one scale
per block of `block_size` elements along the contracting dimension, as cuDNN computes them on
recent NVIDIA GPUs.

The contraction itself is the `scaled_matmul_wrapper` primitive (`lax/dot.py`), which only
GPUs lower: elsewhere running it raises JAX's NotImplementedError ("MLIR translation rule for
primitive 'scaled_matmul' not found for platform cpu"), while tracing (`make_jaxpr`,
`eval_shape`) works. `scaled_dot_general` quantizes its high-precision operands first (the
quantization recipe of JAX's `cudnn.scaled_matmul_stablehlo`: per-block amax over the data
type's max, rounded up to a power of two for mxfp8's e8m0 scales) and has JAX's custom VJP.
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import ml_dtypes
import numpy as np

from stagecraft import dtypes
from stagecraft import numpy as jnp
from stagecraft.custom_derivatives import custom_vjp
from stagecraft.lax.dot import dot_general, scaled_matmul_wrapper_p
from stagecraft.lax.elementwise import shift_left, shift_right_logical
from stagecraft.lax.misc import optimization_barrier
from stagecraft.lax.shape import transpose
from stagecraft.pjit import jit

__all__ = ["BlockScaleConfig", "scaled_matmul", "scaled_dot_general",
           "get_scaled_dot_general_config"]


@dataclasses.dataclass(slots=True)
class BlockScaleConfig:
  """A block-scaled quantization format (JAX's `BlockScaleConfig`): `mode` ('mxfp8' or
  'nvfp4'), `block_size` (elements per scale), `data_type` and `scale_type` (dtypes of the
  quantized data and its scales), `global_scale` (nvfp4's float32 `[1]` tensor scale, else
  None) and `infer_only`."""
  mode: str
  block_size: int
  data_type: Any
  scale_type: Any
  global_scale: Any
  infer_only: bool


def get_scaled_dot_general_config(mode: str, global_scale: Any = None) -> BlockScaleConfig:
  """The `BlockScaleConfig` of `mode` for `scaled_dot_general` (JAX's
  `nn.get_scaled_dot_general_config`).

  'mxfp8': blocks of 32, float8_e4m3fn data, float8_e8m0fnu scales, no global scale.
  'nvfp4': blocks of 16, float4_e2m1fn data, float8_e4m3fn scales, `global_scale` (default
  a float32 `[1.]`).

  Raises:
    ValueError: another mode ("Unsupported mode: ...").
  """
  if mode == "nvfp4":
    one = jnp.ones((1,), dtype=np.float32)
    return BlockScaleConfig(mode="nvfp4", block_size=16, data_type=ml_dtypes.float4_e2m1fn,
                            scale_type=ml_dtypes.float8_e4m3fn,
                            global_scale=one if global_scale is None else global_scale,
                            infer_only=False)
  if mode == "mxfp8":
    return BlockScaleConfig(mode="mxfp8", block_size=32, data_type=ml_dtypes.float8_e4m3fn,
                            scale_type=ml_dtypes.float8_e8m0fnu, global_scale=None,
                            infer_only=False)
  raise ValueError(f"Unsupported mode: {mode}")


@jit(static_argnames=("preferred_element_type",))
def _scaled_matmul(lhs, rhs, lhs_scales, rhs_scales, preferred_element_type=np.dtype("float32")):
  return scaled_matmul_wrapper_p.bind(lhs, rhs, lhs_scales, rhs_scales,
                                      preferred_element_type=preferred_element_type)[0]


def _matmul_wrapper(lhs, rhs, lhs_scales, rhs_scales, preferred_element_type=np.float32):
  if lhs.shape[2] != rhs.shape[2]:
    raise AssertionError   # NB: as JAX's `assert lhs_K == rhs_K`
  dtype = dtypes.check_user_dtype(preferred_element_type, "scaled_matmul_wrapper")
  return _scaled_matmul(lhs, rhs, lhs_scales, rhs_scales, preferred_element_type=dtype)


def scaled_matmul(lhs: Any, rhs: Any, lhs_scales: Any, rhs_scales: Any,
                  preferred_element_type: Any = np.float32) -> Any:
  """Block-scaled batched matmul (JAX's `nn.scaled_matmul`): with `s_a = K // K_a`,
  `lhs * repeat(lhs_scales, s_a, -1)` contracted with the same of `rhs` along the last dim,
  `einsum('BMK,BNK->BMN')`.

  Args:
    lhs: `[B, M, K]` (e.g. float8_e4m3fn).
    rhs: `[B, N, K]`.
    lhs_scales: `[B, M, K_a]`, `K % K_a == 0` (e.g. float8_e8m0fnu).
    rhs_scales: `[B, N, K_a]`.
    preferred_element_type: the result dtype (float32 by default).

  Returns:
    `[B, M, N]` of `preferred_element_type`; only GPUs run it (elsewhere JAX's
    NotImplementedError at lowering).

  Raises:
    ValueError: operands not all 3-D, batch or contracting sizes that differ, scales that do
      not match their operand's non-contracting size (JAX's messages).
  """
  a, b, sa, sb = (jnp.asarray(x) if not hasattr(x, "shape") else x
                  for x in (lhs, rhs, lhs_scales, rhs_scales))
  if not all(x.ndim == 3 for x in (a, b, sa, sb)):
    raise ValueError("scaled_matmul requires all inputs to be 3-dimensional arrays")
  (ba, m, ka), (bb, n, kb) = a.shape, b.shape
  if ka != kb or ba != bb:
    raise ValueError(f"scaled_matmul requires inputs a and b to have matching batch (B) and "
                     f"contract (K) dimensions, but got shapes {a.shape} and {b.shape}")
  (bsa, msa, ksa), (bsb, nsb, ksb) = sa.shape, sb.shape
  if ksa != ksb or bsa != bsb:
    raise ValueError(f"scaled_matmul requires scales to have matching batch (B) and contract "
                     f"(K) dimensions, but got shapes {sa.shape} and {sb.shape}")
  if msa != m or nsb != n:
    raise ValueError(f"scaled_matmul requires scales to match non-contract dimensions of "
                     f"inputs, but got shapes a: {a.shape}, b: {b.shape}, a_scales: "
                     f"{sa.shape}, b_scales: {sb.shape}")
  dtype = dtypes.check_user_dtype(preferred_element_type, "scaled_matmul")
  return _matmul_wrapper(a, b, sa, sb, preferred_element_type=dtype)


# ---------------------------------------------------------------------------
# scaled_dot_general: normalize to [B, M, K], quantize, scaled_matmul, restore.


def _to_bmk(x, contracting, batch):
  """`x` transposed to (batch, free, contracting) order and reshaped to `[B, M, K]`."""
  order = range(x.ndim)
  b = [d for d in order if d in batch]
  k = [d for d in order if d in contracting]
  m = [d for d in order if d not in contracting and d not in batch]
  sizes = lambda ds: [x.shape[d] for d in ds]
  t = jnp.transpose(x, b + m + k)
  return jnp.reshape(t, (np.prod(sizes(b), dtype=int), np.prod(sizes(m)), np.prod(sizes(k))))


def _dot_shape(lhs_shape, rhs_shape, lhs_dn, rhs_dn):
  (lc, lb), (rc, rb) = lhs_dn, rhs_dn
  return tuple([d for i, d in enumerate(lhs_shape) if i in lb] +
               [d for i, d in enumerate(lhs_shape) if i not in lc and i not in lb] +
               [d for i, d in enumerate(rhs_shape) if i not in rc and i not in rb])


def _e8m0_round_up(x):
  """The e8m0 exponent byte of float32 `x` rounded up to a power of two (uint8)."""
  bits = x.astype(np.float32).view(np.uint32)
  # NB: lax's shifts by a uint32 scalar, as JAX's `>> 23` on uint32 prints.
  exp = shift_right_logical(bits, np.uint32(23))
  mant = bits & 0x7FFFFF
  up = jnp.logical_and(jnp.logical_and(mant > 0, exp != 0xFE),
                       ~jnp.logical_and(exp == 0, mant <= 0x400000))
  return jnp.where(up, exp + 1, exp).astype(np.uint8)


def _e8m0_value(x, dtype):
  """The power of two an e8m0 byte `x` stands for, in `dtype` (zero becomes the smallest
  normal)."""
  v = shift_left(x.astype(np.uint32), np.uint32(23)).view(np.float32)
  tiny = 2**-15 if dtype == np.float16 else 2**-127
  return jnp.where(v == 0, jnp.array(tiny, np.float32), v).astype(dtype)


def _quantize(x, config):
  shape = x.shape
  bs = config.block_size
  if not (shape[-1] >= bs and shape[-1] % bs == 0):
    raise AssertionError   # NB: as JAX's assertion on the contracting size
  x = x.reshape(shape[:-1] + (shape[-1] // bs, bs))
  top = dtypes.finfo(config.data_type).max.astype(x.dtype)

  def block_scales(v):
    return jnp.max(jnp.abs(v), axis=-1, keepdims=True) / top

  if config.mode == "mxfp8":
    scales = _e8m0_round_up(block_scales(x))
    scaled = x / _e8m0_value(scales, x.dtype)
  elif config.mode == "nvfp4":
    scale_top = dtypes.finfo(config.scale_type).max.astype(x.dtype)
    x /= config.global_scale
    scales = jnp.clip(block_scales(x), 0, scale_top)
    scales = optimization_barrier(scales.astype(config.scale_type))
    scaled = x / scales.astype(np.float32)
  else:
    raise ValueError(f"Unrecognized mode: {config.mode}.")
  q = jnp.clip(scaled, -top, top).astype(config.data_type).reshape(shape)
  scales = jnp.reshape(scales, scales.shape[:-1]).view(config.scale_type)
  return q, scales


def _scaled_dot(lhs, rhs, dimension_numbers, preferred_element_type, configs):
  if preferred_element_type is None:
    preferred_element_type = dtypes.result_type(lhs, rhs)
  else:
    preferred_element_type = dtypes.check_user_dtype(preferred_element_type, "scaled_dot_impl")
  (lc, rc), (lb, rb) = dimension_numbers
  lhs3, rhs3 = _to_bmk(lhs, lc, lb), _to_bmk(rhs, rc, rb)
  a, sa = _quantize(lhs3, configs[0])
  b, sb = _quantize(rhs3, configs[1])
  nvfp4 = configs[0].mode == "nvfp4"
  out = _matmul_wrapper(a, b, sa, sb,
                        preferred_element_type=np.float32 if nvfp4 else preferred_element_type)
  if nvfp4:
    out *= configs[0].global_scale * configs[1].global_scale
    out = out.astype(preferred_element_type)
  return jnp.reshape(out, _dot_shape(lhs.shape, rhs.shape, (lc, lb), (rc, rb)))


def _transpose_lhs(g, x, y, *, dimension_numbers, preferred_element_type, configs,
                   swap_ans=False):
  (xc, yc), (xb, yb) = dimension_numbers
  x_kept = [d for d in range(x.ndim) if d not in xc and d not in xb]
  y_kept = [d for d in range(y.ndim) if d not in yc and d not in yb]
  nb = len(xb)
  if swap_ans:
    ans_y = list(range(nb, nb + len(y_kept)))
  else:
    ans_y = list(range(nb + len(x_kept), nb + len(x_kept) + len(y_kept)))
  ans_batch = list(range(nb))
  xc_by_y = list(np.take(xc, np.argsort(yc)))
  out_axes = np.argsort(list(xb) + x_kept + xc_by_y)
  y_dn, g_dn = (y_kept, yb), (ans_y, ans_batch)
  y3, g3 = _to_bmk(y, *y_dn), _to_bmk(g, *g_dn)
  if configs[0].mode != "nvfp4":
    gq, gs = _quantize(g3, configs[0])
    yq, ys = _quantize(y3, configs[1])
    out = _matmul_wrapper(gq, yq, gs, ys, preferred_element_type)
  else:
    out = jnp.matmul(g3, jnp.permute_dims(y3, (0, 2, 1)),
                     preferred_element_type=preferred_element_type)
  out = jnp.reshape(out, _dot_shape(g.shape, y.shape, g_dn, y_dn))
  return transpose(out, tuple(int(a) for a in out_axes))


def _transpose_rhs(g, x, y, *, dimension_numbers, preferred_element_type, configs):
  (xc, yc), (xb, yb) = dimension_numbers
  return _transpose_lhs(g, y, x, dimension_numbers=((yc, xc), (yb, xb)),
                        preferred_element_type=preferred_element_type, configs=configs,
                        swap_ans=True)


def scaled_dot_general_fn(lhs, rhs, dimension_numbers, preferred_element_type, configs):
  return _scaled_dot(lhs, rhs, dimension_numbers, preferred_element_type, configs)


def scaled_dot_fwd(lhs, rhs, dimension_numbers, preferred_element_type, configs):
  return _scaled_dot(lhs, rhs, dimension_numbers, preferred_element_type, configs), (lhs, rhs)


def scaled_dot_bwd(dimension_numbers, preferred_element_type, configs, res, g):
  lhs, rhs = res
  kw = dict(dimension_numbers=dimension_numbers, preferred_element_type=preferred_element_type)
  grad_lhs = _transpose_lhs(g, lhs, rhs, configs=[configs[2], configs[1]], **kw)
  grad_rhs = _transpose_rhs(g, lhs, rhs, configs=[configs[2], configs[0]], **kw)
  if configs[2].mode == "nvfp4":
    # Straight-through estimator, zeroed where the forward pass clipped.
    top = dtypes.finfo(configs[0].data_type).max.astype(lhs.dtype)
    scale_top = dtypes.finfo(configs[0].scale_type).max.astype(lhs.dtype)
    grad_lhs = jnp.where(jnp.abs(lhs) <= configs[0].global_scale * top * scale_top, grad_lhs, 0)
    grad_rhs = jnp.where(jnp.abs(rhs) <= configs[1].global_scale * top * scale_top, grad_rhs, 0)
  return grad_lhs, grad_rhs


scaled_dot_general_fn = custom_vjp(scaled_dot_general_fn, nondiff_argnums=(2, 3, 4))
scaled_dot_general_fn.defvjp(scaled_dot_fwd, scaled_dot_bwd)


def scaled_dot_general(lhs: Any, rhs: Any, dimension_numbers: Any,
                       preferred_element_type: Any = np.float32,
                       configs: list[BlockScaleConfig] | None = None,
                       implementation: str | None = None) -> Any:
  """`dot_general` with block-scaled quantized operands (JAX's `nn.scaled_dot_general`):
  `lhs` and `rhs` are quantized per `configs[0]`, `configs[1]` (see
  `get_scaled_dot_general_config`), contracted by `scaled_matmul`, and the result reshaped
  to `dot_general`'s (batch dims, lhs free dims, rhs free dims). Its VJP quantizes the
  cotangent per `configs[2]`.

  Args:
    lhs, rhs: high-precision arrays; each contracting size a multiple of the block size.
    dimension_numbers: `((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))`.
    preferred_element_type: the result dtype (float32; bfloat16 and float16 too).
    configs: three `BlockScaleConfig`s (lhs, rhs, gradients); None: plain `lax.dot_general`.
    implementation: deprecated and ignored (a DeprecationWarning when given).

  Returns:
    The contraction, of `preferred_element_type`. With configs, only GPUs run it: elsewhere
    JAX's NotImplementedError at lowering (tracing works).
  """
  if implementation is not None:
    warnings.warn("Backend selector, now ignored. The system chooses the backend "
                  "automatically.", DeprecationWarning)
  if configs is None:
    return dot_general(lhs, rhs, dimension_numbers,
                       preferred_element_type=preferred_element_type)
  dtype = np.dtype(preferred_element_type)
  if dtype not in (np.dtype("float32"), np.dtype(ml_dtypes.bfloat16), np.dtype("float16")):
    # NB: JAX's message has this unfilled placeholder.
    raise TypeError("Only support preferred_element_type in (f32, bf16, f16), but got "
                    "{preferred_element_type}")
  (lc, rc), (lb, rb) = dimension_numbers
  dn = ((tuple(lc), tuple(rc)), (tuple(lb), tuple(rb)))
  lhs_b, rhs_b, dn_b = lhs, rhs, dn
  (lc, rc), (lb, rb) = dn
  if lb == ():   # a trailing size-1 batch dim
    lhs_b = jnp.expand_dims(lhs, axis=jnp.ndim(lhs))
    lb = (jnp.ndim(lhs),)
  if rb == ():
    rhs_b = jnp.expand_dims(rhs, axis=jnp.ndim(rhs))
    rb = (jnp.ndim(rhs),)
  dn_b = ((lc, rc), (lb, rb))
  out = scaled_dot_general_fn(lhs_b, rhs_b, dn_b, preferred_element_type, configs)
  if dn_b != dn:
    return jnp.squeeze(out, axis=0)
  return out
