"""`nn.dot_product_attention` against JAX's (the oracle; implementation 'xla'): shapes and
dtypes, bias, masks, causal and local windows, padding lengths, grouped-query heads, the
residual, derivatives, jit/vmap and errors in JAX's words; and against a NumPy reference."""
import re

import jax
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import stagecraft as sc
import stagecraft.numpy as snp
from stagecraft import nn
from stagecraft.test_util import check_grads

BF16 = np.dtype(ml_dtypes.bfloat16)


def _rand(shape, dtype=np.float32, seed=0):
  return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _qkv(B=2, T=4, S=5, N=6, K=3, H=8, dtype=np.float32, seed=0):
  q = _rand((B, T, N, H), seed=seed)
  k, v = _rand((B, S, K, H), seed=seed + 1), _rand((B, S, K, H), seed=seed + 2)
  return [t.astype(dtype) for t in (q, k, v)]


def _ours(x):
  x = np.asarray(x)
  if x.dtype in (BF16, np.dtype(np.float16)):
    return snp.asarray(x.astype(np.float32)).astype(x.dtype)
  return x


def _jax(*args, **kw):
  """JAX's attention, jitted (one compile instead of one per operation)."""
  return jax.jit(lambda *a: jax.nn.dot_product_attention(*a, **kw))(*args)


def _np_attention(q, k, v, bias=None, mask=None, scale=None):
  """Attention in float64 by the formula, K heads repeated to N."""
  q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
  N, K = q.shape[2], k.shape[2]
  k, v = np.repeat(k, N // K, axis=2), np.repeat(v, N // K, axis=2)
  scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
  logits = np.einsum("btnh,bsnh->bnts", q, k) * scale
  if bias is not None:
    logits = logits + bias
  if mask is not None:
    logits = np.where(mask, logits, -1e300)
  p = np.exp(logits - logits.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  return np.einsum("bnts,bsnh->btnh", p, v)


CASES = {
    "plain": {},
    "causal": dict(is_causal=True),
    "bias_full": dict(bias=_rand((2, 6, 4, 5), seed=7)),
    "bias_shared": dict(bias=_rand((1, 1, 4, 5), seed=7)),
    "bias_3d": dict(bias=_rand((1, 4, 5), seed=7)),
    "mask": dict(mask=np.random.default_rng(1).random((2, 1, 4, 5)) > 0.3),
    "mask_per_head": dict(mask=np.random.default_rng(2).random((1, 6, 4, 5)) > 0.3),
    "mask_all_out": dict(mask=np.zeros((1, 6, 4, 5), bool)),
    "lengths": dict(query_seq_lengths=np.array([2, 4], np.int32),
                    key_value_seq_lengths=np.array([3, 1], np.int32)),
    "window": dict(local_window_size=(1, 0)),
    "window_int_causal_scale": dict(local_window_size=1, is_causal=True, scale=0.3),
    "everything": dict(bias=_rand((2, 1, 4, 5), seed=8), is_causal=True,
                       mask=np.random.default_rng(3).random((2, 6, 1, 5)) > 0.2,
                       key_value_seq_lengths=np.array([5, 3], np.int32), scale=0.5),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_jax(name):
  q, k, v = _qkv()
  kw = CASES[name]
  got = nn.dot_product_attention(q, k, v, **kw)
  want = _jax(q, k, v, **kw)
  assert got.shape == want.shape and got.dtype == want.dtype
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["plain", "causal", "lengths"])
def test_residual_matches_jax(name):
  q, k, v = _qkv()
  out, res = nn.dot_product_attention(q, k, v, return_residual=True, **CASES[name])
  jout, jres = _jax(q, k, v, return_residual=True, **CASES[name])
  assert res.shape == jres.shape == (2, 4, 6)
  np.testing.assert_allclose(np.asarray(out), jout, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(np.asarray(res), jres, rtol=1e-6, atol=1e-6)
  # the residual's gradient is stopped
  g = sc.grad(lambda a: nn.dot_product_attention(a, k, v, return_residual=True)[1].sum())(q)
  assert not np.asarray(g).any()


@settings(max_examples=10)
@given(st.integers(1, 2), st.integers(1, 4), st.integers(1, 4), st.sampled_from([1, 2, 4]),
       st.sampled_from([(1, 1), (2, 1), (2, 2), (4, 2)]), st.booleans())
def test_shapes_and_heads_vs_numpy(B, T, S, H, heads, causal):
  N, K = heads
  q, k, v = _qkv(B, T, S, N, K, H, seed=B + T + S)
  mask = None
  if causal:
    mask = np.tril(np.ones((T, S), bool))[None, None]
    if not mask.any(-1).all():
      return   # a row with no key: the formula's reference is undefined
  got = nn.dot_product_attention(q, k, v, is_causal=causal)
  np.testing.assert_allclose(np.asarray(got), _np_attention(q, k, v, mask=mask),
                             rtol=2e-5, atol=2e-5)


def test_unbatched_inputs_and_x64():
  q, k, v = _qkv(B=1)
  got = nn.dot_product_attention(q[0], k[0], v[0], is_causal=True)
  assert got.shape == (4, 6, 8)
  np.testing.assert_allclose(np.asarray(got), _jax(q[0], k[0], v[0], is_causal=True),
                             rtol=1e-6, atol=1e-6)
  out, res = nn.dot_product_attention(q[0], k[0], v[0], return_residual=True)
  assert res.shape == (4, 6)
  with sc.enable_x64():
    q64, k64, v64 = (t.astype(np.float64) for t in (q, k, v))
    got = nn.dot_product_attention(q64, k64, v64, bias=CASES["bias_shared"]["bias"])
    assert got.dtype == np.float64
    # NB: the softmax runs in float32 (as JAX's), so float64 inputs get float32's accuracy
    np.testing.assert_allclose(np.asarray(got), _np_attention(
        q64, k64, v64, bias=CASES["bias_shared"]["bias"]), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [BF16, np.float16])
def test_16_bit_inputs_match_jax(dtype):
  q, k, v = _qkv(dtype=dtype)
  got = nn.dot_product_attention(*map(_ours, (q, k, v)), is_causal=True,
                                 bias=_ours(CASES["bias_shared"]["bias"].astype(dtype)))
  want = jax.nn.dot_product_attention(q, k, v, is_causal=True,
                                      bias=CASES["bias_shared"]["bias"].astype(dtype))
  assert got.dtype == want.dtype == dtype
  np.testing.assert_allclose(np.asarray(got).astype(np.float32),
                             np.asarray(want).astype(np.float32), rtol=1e-2, atol=1e-2)
  if dtype == BF16:   # the BF16_BF16_F32 dot algorithm, as JAX's
    text = str(sc.make_jaxpr(lambda *a: nn.dot_product_attention(*a))(*map(_ours, (q, k, v))))
    assert "precision=BF16_BF16_F32" in text and "preferred_element_type=float32" in text
  # jitted too (JAX's jit of float16 fails on CPU asking for F16_F16_F32)
  jitted = sc.jit(nn.dot_product_attention)(*map(_ours, (q, k, v)))
  np.testing.assert_allclose(np.asarray(jitted).astype(np.float32), np.asarray(
      jax.nn.dot_product_attention(q, k, v)).astype(np.float32), rtol=1e-2, atol=1e-2)


def test_gradients_match_jax_and_finite_differences():
  q, k, v = _qkv(T=3, S=4, N=4, K=2, H=4)
  kw = dict(is_causal=True, bias=_rand((1, 4, 3, 4), seed=5),
            key_value_seq_lengths=np.array([4, 2], np.int32))
  f = lambda a, b, c, d: (nn.dot_product_attention(a, b, c, bias=d, **{
      n: kw[n] for n in ("is_causal", "key_value_seq_lengths")}) ** 2).sum()
  jf = lambda a, b, c, d: (jax.nn.dot_product_attention(a, b, c, bias=d, **{
      n: kw[n] for n in ("is_causal", "key_value_seq_lengths")}) ** 2).sum()
  for got, want in zip(sc.grad(f, (0, 1, 2, 3))(q, k, v, kw["bias"]),
                       jax.jit(jax.grad(jf, (0, 1, 2, 3)))(q, k, v, kw["bias"])):
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=2e-5)
  with sc.enable_x64():   # (the float32 softmax limits the finite differences' accuracy)
    args = tuple(t.astype(np.float64) for t in (q, k, v))
    check_grads(lambda a, b, c: nn.dot_product_attention(a, b, c, is_causal=True), args,
                order=1, modes=("fwd", "rev"), atol=5e-3, rtol=5e-3)


def test_jit_and_vmap():
  q, k, v = _qkv()
  want = _jax(q, k, v, is_causal=True)
  np.testing.assert_allclose(np.asarray(sc.jit(
      lambda *a: nn.dot_product_attention(*a, is_causal=True))(q, k, v)), want,
      rtol=1e-6, atol=1e-6)
  got = sc.vmap(lambda a, b, c: nn.dot_product_attention(a, b, c, is_causal=True))(q, k, v)
  np.testing.assert_allclose(np.asarray(got), jax.jit(jax.vmap(
      lambda a, b, c: jax.nn.dot_product_attention(a, b, c, is_causal=True)))(q, k, v),
      rtol=1e-6, atol=1e-6)


def _bad_cases():
  q, k, v = _qkv()
  return {
      "value_shape": ((q, k, v[..., :4]), {}),
      "value_dtype": ((q, k, v.astype(np.float16)), {}),
      "query_head_dim": ((q[..., :4], k, v), {}),
      "query_dtype": ((q.astype(np.float16), k, v), {}),
      "heads_multiple": ((q[:, :, :4], k, v), {}),
      "mask_dtype": ((q, k, v), dict(mask=np.ones((2, 6, 4, 5), np.float32))),
      "bias_rank": ((q, k, v), dict(bias=np.ones((1, 2, 6, 4, 5), np.float32))),
      "lengths_dtype": ((q, k, v), dict(query_seq_lengths=np.array([1.0, 2.0], np.float32))),
      "lengths_shape": ((q, k, v), dict(key_value_seq_lengths=np.array([1, 2, 3], np.int32))),
      "implementation": ((q, k, v), dict(implementation="foo")),
  }


@pytest.mark.parametrize("name", sorted(_bad_cases()))
def test_errors_as_jax(name):
  args, kw = _bad_cases()[name]
  with pytest.raises(ValueError) as theirs:
    jax.nn.dot_product_attention(*args, **kw)
  with pytest.raises(ValueError, match=re.escape(str(theirs.value))):
    nn.dot_product_attention(*map(_ours, args), **kw)


def test_cudnn_and_bad_bias_errors():
  q, k, v = _qkv()
  with pytest.raises(RuntimeError) as theirs:
    jax.nn.dot_product_attention(q, k, v, implementation="cudnn")
  with pytest.raises(RuntimeError, match=re.escape(str(theirs.value))):
    nn.dot_product_attention(q, k, v, implementation="cudnn")
  # JAX fails on an assert here; stagecraft names the shapes
  with pytest.raises(ValueError, match=r"bias shape \(1, 2, 4, 5\) is not broadcastable"):
    nn.dot_product_attention(q, k, v, bias=np.ones((2, 4, 5), np.float32))
  with pytest.raises(ValueError, match="local_window_size must be an int or a pair"):
    nn.dot_product_attention(q, k, v, local_window_size=(1, 2, 3))
