"""`dot_product_attention`: scaled dot-product attention (JAX's `nn.dot_product_attention`),
composed from `stagecraft.numpy` einsums, masks and `nn.softmax`.

Shapes use JAX's letters: B batch, T query length, S key/value length, N query heads,
K key/value heads (N a multiple of K: multi-head, grouped-query or multi-query attention),
G = N // K query heads per key/value head, H head dimension.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from stagecraft import dtypes, lax
from stagecraft import numpy as jnp
from stagecraft.lax.dot import DotAlgorithmPreset
from stagecraft.pjit import jit
from stagecraft.runtime import client
from stagecraft.scipy.special import logsumexp

__all__ = ["dot_product_attention"]


def _large_negative(dtype) -> Any:
  """The logit given to masked-out entries: -0.7 times the largest finite value of `dtype`,
  capped at float32's range (softmax runs in float32), as JAX's."""
  big = min(float(dtypes.finfo(dtype).max), float(dtypes.finfo(np.float32).max))
  return jnp.asarray(-0.7 * big, dtype=dtype)


def _softmax(x):
  """`nn.softmax(x, axis=-1)` (its default form: the maximum subtracted, its gradient
  stopped). NB: here, not imported, as `stagecraft.nn` imports this module."""
  x_max = jnp.max(x, -1, initial=-np.inf, keepdims=True)
  unnormalized = jnp.exp(x - lax.stop_gradient(x_max))
  return unnormalized / jnp.sum(unnormalized, -1, keepdims=True)


def _check(t, shape: Sequence[int], dtype, name: str) -> None:
  """JAX's checks (and messages): rank, dtype, and the sizes that are not -1."""
  if t is None:
    return
  if t.ndim != len(shape):
    raise ValueError(f"{name} ndim should be {len(shape)}, but got {t.ndim}")
  if dtype is not None and t.dtype != dtype:
    raise ValueError(f"{name} dtype should be {dtype}, but got {t.dtype}")
  for i in range(t.ndim):
    if shape[i] != -1 and t.shape[i] != shape[i]:
      raise ValueError(f"{name} shape should be {list(shape)}: but got {t.shape}")


def _grouped(t, B: int, N: int, K: int, T: int, S: int, name: str):
  """A bias or mask `[B|1, N|1, T|1, S|1]` as `[B|1, K|1, G|1, T|1, S|1]`, which broadcasts
  against the grouped logits `[B, K, G, T, S]`."""
  if t is None:
    return None
  tb, tn, tt, ts = t.shape
  if tb not in (1, B) or tn not in (1, N) or tt not in (1, T) or ts not in (1, S):
    raise ValueError(f"{name} shape {t.shape} is not broadcastable to the logits' "
                     f"(B, N, T, S) = {(B, N, T, S)}")
  if tn == 1:
    return jnp.expand_dims(t, 2)
  return jnp.reshape(t, (tb, K, N // K, tt, ts))


def _attention_xla_impl(query, key, value, bias, mask, q_seqlen, kv_seqlen, scale, *,
                        is_causal: bool, local_window_size, return_residual: bool):
  B, T, N, H = query.shape
  _, S, K, _ = key.shape
  G = N // K
  q = jnp.reshape(query, (B, T, K, G, H))
  logits_dtype = jnp.promote_types(query.dtype, np.float32)
  # NB: as JAX, 16-bit inputs name the algorithm that multiplies them exactly into a
  # float32 accumulator (JAX issue 24047); XLA's CPU backend has no F16_F16_F32, where JAX
  # falls back to the default (eagerly; jitted it fails), as this does.
  precision = None
  if query.dtype == dtypes.bfloat16:
    precision = DotAlgorithmPreset.BF16_BF16_F32
  elif query.dtype == np.float16 and client.get_backend().platform != "cpu":
    precision = DotAlgorithmPreset.F16_F16_F32
  logits = jnp.einsum("BTKGH,BSKH->BKGTS", q, key, precision=precision,
                      preferred_element_type=logits_dtype)
  logits = logits * jnp.array(scale, dtype=logits.dtype)
  bias = _grouped(bias, B, N, K, T, S, "bias")
  if bias is not None:
    logits = (logits + bias).astype(logits.dtype)

  keep = None
  def both(m):
    return m if keep is None else jnp.logical_and(keep, m)
  mask = _grouped(mask, B, N, K, T, S, "mask")
  if mask is not None:
    keep = both(mask)
  # NB: every mask has the logits' rank [B, K, G, T, S] (no rank promotion: JAX's tests run
  # under jax_numpy_rank_promotion='raise')
  q_pos = jnp.arange(T)[None, None, None, :, None]
  k_pos = jnp.arange(S)[None, None, None, None, :]
  if is_causal:
    keep = both(q_pos >= k_pos)
  if local_window_size is not None:
    left, right = local_window_size
    keep = both(jnp.logical_and(q_pos <= k_pos + left, q_pos >= k_pos - right))
  if q_seqlen is not None:
    keep = both(q_pos < q_seqlen[:, None, None, None, None])
  if kv_seqlen is not None:
    keep = both(k_pos < kv_seqlen[:, None, None, None, None])
  if keep is not None:
    logits = jnp.where(jnp.broadcast_to(keep, logits.shape), logits,
                       _large_negative(logits.dtype))

  logits = logits.astype(np.float32)   # softmax always in float32, as JAX
  probs = _softmax(logits).astype(key.dtype)
  encoded = jnp.einsum("BKGTS,BSKH->BTKGH", probs, value)
  if q_seqlen is not None:
    valid = jnp.arange(T)[None, :] < q_seqlen[:, None]
    encoded = encoded * valid[:, :, None, None, None].astype(encoded.dtype)
  encoded = jnp.reshape(encoded, (B, T, N, H))
  if not return_residual:
    return encoded
  lse = logsumexp(logits, axis=-1).astype(key.dtype)             # [B, K, G, T]
  lse = jnp.reshape(jnp.transpose(lse, (0, 3, 1, 2)), (B, T, N))
  return encoded, lax.stop_gradient(lse)


# NB: jitted (JAX's is not), so an eager call compiles one program, not one per operation.
_attention_xla = jit(_attention_xla_impl, static_argnames=(
    "is_causal", "local_window_size", "return_residual"))


def dot_product_attention(query: Any, key: Any, value: Any, bias: Any = None, mask: Any = None,
                          *, scale: float | None = None, is_causal: bool = False,
                          query_seq_lengths: Any = None, key_value_seq_lengths: Any = None,
                          local_window_size: int | tuple[int, int] | None = None,
                          implementation: str | None = None, return_residual: bool = False):
  """Scaled dot-product attention `softmax(Q K^T * scale + bias) V`, per head (JAX's
  `nn.dot_product_attention`).

  Args:
    query: `T[B,T,N,H]` or `T[T,N,H]`.
    key: `T[B,S,K,H]` or `T[S,K,H]`, N a multiple of K (K == N: multi-head attention;
      K < N: grouped-query attention, each key/value head serving N // K query heads;
      K == 1: multi-query attention).
    value: same shape and dtype as `key`.
    bias: optional array added to the logits, of rank <= 4 (leading size-1 axes are added),
      broadcastable to `[B,N,T,S]` with its head axis of size 1 or N.
    mask: optional bool array, like `bias`: True marks the entries that take part.
    scale: multiplies the logits; default `1 / sqrt(H)`.
    is_causal: mask out keys after the query position (`s > t`).
    query_seq_lengths: optional int32 `[B]`: queries at positions >= length are padding
      (their logits are masked and their outputs are 0).
    key_value_seq_lengths: optional int32 `[B]`: keys at positions >= length are masked.
    local_window_size: `(left, right)` or an int for both: query t attends to keys
      `t - left <= s <= t + right`.
    implementation: None or 'xla' (masks and einsums; the only one here). 'cudnn' raises
      RuntimeError ("cuDNN is not detected.", JAX's message off GPUs: stagecraft has no
      cuDNN attention kernel).
    return_residual: also return the logsumexp of the (masked, float32) logits,
      `T[B,T,N]` (or `T[T,N]`), with its gradient stopped (FlashAttention-2's residual).

  Returns:
    The attention output, with `query`'s shape and `key`'s dtype; with `return_residual`,
    the pair (output, residual). Rows whose every key is masked get uniform weights (all of
    their logits equal the same large negative number), as in JAX.

  Raises:
    ValueError: for mismatched shapes or dtypes, non-int32 sequence lengths, a non-bool mask,
      N not a multiple of K, or an unknown `implementation` (JAX's messages).
    RuntimeError: for `implementation='cudnn'`.

  Algorithm: Vaswani et al., "Attention Is All You Need" (2017), eq. 1; grouped-query
  heads as Ainslie et al. (2023). The logits are accumulated in float32 at least
  (`preferred_element_type`; bfloat16 inputs with the BF16_BF16_F32 dot algorithm), masked
  entries get `-0.7 * finfo(dtype).max`, and the softmax runs in float32, as JAX's 'xla'
  implementation does.

  Examples:
    >>> import numpy as np
    >>> q = np.ones((2, 3, 4, 8), np.float32)
    >>> dot_product_attention(q, q, q, is_causal=True).shape
    (2, 3, 4, 8)
  """
  output_shape = jnp.asarray(query).shape

  def ensure_4d(t):
    t = jnp.asarray(t)
    return jnp.expand_dims(t, tuple(range(4 - t.ndim))) if t.ndim < 4 else t

  query_arr, key_arr, value_arr = ensure_4d(query), ensure_4d(key), ensure_4d(value)
  bias = None if bias is None else ensure_4d(bias)
  mask = None if mask is None else ensure_4d(mask)
  q_seqlen = None if query_seq_lengths is None else jnp.asarray(query_seq_lengths)
  kv_seqlen = None if key_value_seq_lengths is None else jnp.asarray(key_value_seq_lengths)
  if isinstance(local_window_size, (int, np.integer)):
    local_window_size = (int(local_window_size), int(local_window_size))
  elif local_window_size is not None:
    local_window_size = tuple(local_window_size)
    if len(local_window_size) != 2:
      raise ValueError(f"local_window_size must be an int or a pair (left, right), got "
                       f"{local_window_size}")

  B, S, K, H = key_arr.shape
  _check(value_arr, [B, S, K, H], key_arr.dtype, "value")
  _check(query_arr, [B, -1, -1, H], key_arr.dtype, "query")
  _check(mask, [-1] * 4, np.dtype(bool), "mask")
  _check(bias, [-1] * 4, None, "bias")
  _check(q_seqlen, [B], np.dtype("int32"), "query_seq_lengths")
  _check(kv_seqlen, [B], np.dtype("int32"), "key_value_seq_lengths")
  if query_arr.shape[-2] % K != 0:
    raise ValueError(f"The number of query heads must be a multiple of key/value heads, but "
                     f"got {query_arr.shape[-2]} vs {K}")
  scale_val = (1.0 / np.sqrt(H)) if scale is None else scale

  if implementation == "cudnn":
    raise RuntimeError("cuDNN is not detected.")
  if implementation not in (None, "xla"):
    raise ValueError(f"Unsupported implementation option: {implementation}")
  out = _attention_xla(query_arr, key_arr, value_arr, bias, mask, q_seqlen, kv_seqlen,
                       scale_val, is_causal=bool(is_causal),
                       local_window_size=local_window_size,
                       return_residual=bool(return_residual))
  if return_residual:
    out, residual = out
    return jnp.reshape(out, output_shape), jnp.reshape(residual, output_shape[:-1])
  return jnp.reshape(out, output_shape)
