"""Tests of stagecraft.implicit.quantization: NF4 (QLoRA) and blockwise int8 against NumPy
references, memory, quantization error, and the dequantizing dot_general handlers under
implicit/jit/vmap/grad."""
from __future__ import annotations

import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.implicit import implicit
from stagecraft.implicit.quantization import NF4_VALUES, Array8bit, ArrayNF4, QuantizedArray

rng = np.random.default_rng(1)


def f32(*shape):
  return rng.standard_normal(shape).astype(np.float32)


def double_quant_reference(absmax: np.ndarray, group: int = 256) -> np.ndarray:
  """NumPy QLoRA double quantization of block scales: per group of `group` scales (the last
  padded with its last scale), int8 codes of the deviation from the group mean."""
  n = absmax.size
  a = np.concatenate([absmax, np.full((-n) % group, absmax[-1], np.float32)]).reshape(-1, group)
  offset = a.mean(1, keepdims=True, dtype=np.float32)
  dev = a - offset
  scale = np.abs(dev).max(1, keepdims=True)
  scale[scale == 0] = 1
  codes = np.round(dev / scale * np.float32(127)).astype(np.int8)
  return (codes.astype(np.float32) * (scale / np.float32(127)) + offset).reshape(-1)[:n]


def nf4_reference(w: np.ndarray, bs: int = 64, double_quant: bool = True) -> np.ndarray:
  """NumPy NF4 quantize + dequantize (nearest code value after absmax scaling; the scales
  double quantized as ArrayNF4.quantize's default)."""
  flat = w.reshape(-1).astype(np.float32)
  pad = (-flat.size) % bs
  blocks = np.concatenate([flat, np.zeros(pad, np.float32)]).reshape(-1, bs)
  absmax = np.abs(blocks).max(1)
  absmax[absmax == 0] = 1
  if double_quant:
    absmax = double_quant_reference(absmax)
  absmax = absmax[:, None]
  idx = np.abs(blocks[..., None] / absmax[..., None] - NF4_VALUES).argmin(-1)
  return (NF4_VALUES[idx] * absmax).reshape(-1)[:flat.size].reshape(w.shape)


def int8_reference(w: np.ndarray, bs: int = 64) -> np.ndarray:
  flat = w.reshape(-1).astype(np.float32)
  pad = (-flat.size) % bs
  blocks = np.concatenate([flat, np.zeros(pad, np.float32)]).reshape(-1, bs)
  absmax = np.abs(blocks).max(1, keepdims=True)
  absmax[absmax == 0] = 1
  codes = np.round(blocks / absmax * 127).astype(np.int8)
  return (codes * (absmax / 127)).reshape(-1)[:flat.size].reshape(w.shape)


@pytest.fixture
def count_materialize(monkeypatch):
  calls = []
  orig = QuantizedArray.materialize

  def counted(self):
    calls.append(type(self).__name__)
    return orig(self)
  monkeypatch.setattr(QuantizedArray, "materialize", counted)
  return calls


def test_nf4_code_values_are_the_papers():
  assert NF4_VALUES.shape == (16,) and NF4_VALUES[0] == -1 and NF4_VALUES[-1] == 1
  assert NF4_VALUES[7] == 0 and np.all(np.diff(NF4_VALUES) > 0)
  assert (NF4_VALUES > 0).sum() == 8 and (NF4_VALUES < 0).sum() == 7   # asymmetric
  np.testing.assert_allclose(NF4_VALUES[8], 0.07958029955625534)


@pytest.mark.parametrize("double_quant", [True, False])
@pytest.mark.parametrize("shape,bs", [((64, 32), 64), ((7, 5), 16), ((100,), 64)])
def test_nf4_round_trip_matches_numpy(shape, bs, double_quant):
  w = f32(*shape)
  q = ArrayNF4.quantize(w, block_size=bs, double_quant=double_quant)
  assert q.aval.shape == shape and q.packed.dtype == np.uint8
  assert q.packed.shape[1] == bs // 2
  assert q.double_quantized == double_quant
  assert q.absmax.dtype == (np.int8 if double_quant else np.float32)
  np.testing.assert_allclose(np.asarray(q.materialize()),
                             nf4_reference(w, bs, double_quant), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("shape,bs", [((64, 32), 64), ((7, 5), 16)])
def test_int8_round_trip_matches_numpy(shape, bs):
  w = f32(*shape)
  q = Array8bit.quantize(w, block_size=bs)
  assert q.codes.dtype == np.int8
  np.testing.assert_allclose(np.asarray(q.materialize()), int8_reference(w, bs), atol=1e-6)


def test_memory_and_nf4_error_on_standard_normal():
  w = rng.standard_normal((512, 256)).astype(np.float32)
  q4, q8 = ArrayNF4.quantize(w, double_quant=False), Array8bit.quantize(w)
  assert q4.nbytes / w.nbytes <= 0.1407     # 4 bits + one f32 scale per 64 values: 0.1406
  assert q8.nbytes / w.nbytes <= 0.266
  mae = np.abs(np.asarray(q4.materialize()) - w).mean()
  # QLoRA: NF4 is information-theoretically optimal for normal weights, so it beats a
  # uniform 4-bit absmax grid of the same blocks (16 levels on [-1, 1]).
  flat = w.reshape(-1, 64)
  am = np.abs(flat).max(1, keepdims=True)
  uniform = np.linspace(-1, 1, 16)
  u = uniform[np.abs(flat[..., None] / am[..., None] - uniform).argmin(-1)] * am
  mae_uniform = np.abs(u - flat).mean()
  assert 0.06 < mae < 0.08 and mae < 0.9 * mae_uniform, (mae, mae_uniform)
  assert np.abs(np.asarray(q8.materialize()) - w).mean() < 0.006


def test_linear_layer_with_nf4_weight(count_materialize):
  # The reference's example: a linear layer with NF4 weights under `implicit`.
  w, b, x = f32(64, 32), f32(32), f32(8, 64)
  q = ArrayNF4.quantize(w)

  @implicit
  def linear(x, w, b):
    return x @ w + b
  want = x @ nf4_reference(w) + b
  np.testing.assert_allclose(np.asarray(linear(x, q, b)), want, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(np.asarray(sc.jit(linear)(x, q, b)), want, rtol=1e-4, atol=1e-4)
  assert count_materialize == []
  # The compiled program takes the packed codes and scales, not an f32[64,32] weight.
  jaxpr = sc.make_jaxpr(sc.jit(linear))(x, q, b)
  in_avals = [a.str_short() for a in jaxpr.jaxpr.in_avals]
  assert "u8[32,32]" in in_avals and "f32[64,32]" not in in_avals


@pytest.mark.parametrize("cls", [ArrayNF4, Array8bit])
def test_matmul_orientations(cls, count_materialize):
  w = f32(48, 40)
  q = cls.quantize(w, block_size=16)
  wd = np.asarray(q.materialize())
  count_materialize.clear()
  x, y = f32(5, 48), f32(40, 3)
  cases = [
      (lambda x, q: x @ q, x, x @ wd),
      (lambda x, q: q @ x, y, wd @ y),
      (lambda x, q: x @ q.T, f32(5, 40), None),
      (lambda x, q: q.T @ x, f32(48, 2), None),
      (lambda x, q: jnp.einsum("bsk,kn->bsn", x, q), f32(2, 3, 48), None),
  ]
  for fn, arg, want in cases:
    if want is None:
      want = fn(arg, wd)
    for f in (implicit(fn), sc.jit(implicit(fn))):
      out = f(arg, q)
      assert out.dtype == np.float32
      np.testing.assert_allclose(np.asarray(out), want, rtol=1e-4, atol=1e-4)
  assert count_materialize == []


@pytest.mark.parametrize("transposed", [False, True])
def test_chunked_dequantizing_matmul(monkeypatch, transposed, count_materialize):
  monkeypatch.setattr(QuantizedArray, "chunk_elements", 256)
  w = f32(64, 32)
  q = ArrayNF4.quantize(w.T.copy() if transposed else w, block_size=32)
  wd = np.asarray(q.materialize())
  count_materialize.clear()
  x = f32(4, 64)
  f = implicit(lambda x, q: x @ q.T if transposed else x @ q)
  jaxpr = sc.make_jaxpr(f)(x, q)
  assert any(e.primitive.name == "scan" for e in jaxpr.eqns)
  want = x @ (wd.T if transposed else wd)
  np.testing.assert_allclose(np.asarray(sc.jit(f)(x, q)), want, rtol=1e-4, atol=1e-4)
  assert count_materialize == []


def test_vmap_over_inputs_and_grad(count_materialize):
  w = f32(32, 16)
  q = ArrayNF4.quantize(w, block_size=32)
  wd = nf4_reference(w, 32)
  xs = f32(6, 32)
  f = implicit(lambda x, q: jnp.tanh(x @ q))
  out = sc.vmap(f, in_axes=(0, None))(xs, q)
  np.testing.assert_allclose(np.asarray(out), np.tanh(xs @ wd), rtol=1e-4, atol=1e-5)
  out2 = sc.jit(sc.vmap(f, in_axes=(0, None)))(xs, q)
  np.testing.assert_allclose(np.asarray(out2), np.tanh(xs @ wd), rtol=1e-4, atol=1e-5)
  g = sc.grad(lambda x: jnp.sum(f(x, q)))(xs[0])
  want = wd @ (1 - np.tanh(xs[0] @ wd) ** 2)
  np.testing.assert_allclose(np.asarray(g), want, rtol=1e-4, atol=1e-5)
  assert count_materialize == []


def test_lazy_reshape_and_convert(count_materialize):
  w = f32(8, 16)
  q = Array8bit.quantize(w, block_size=16)
  wd = int8_reference(w, 16)
  r = implicit(lambda q: q.reshape(16, 8))(q)
  assert type(r) is Array8bit and r.shape == (16, 8)
  c = implicit(lambda q: q.astype(np.float16))(q)
  assert type(c) is Array8bit and c.dtype == np.float16
  np.testing.assert_allclose(np.asarray(c.materialize()), wd.astype(np.float16), rtol=1e-3)
  np.testing.assert_allclose(np.asarray(r.materialize()), wd.reshape(16, 8), atol=1e-6)


def test_quantize_under_jit_and_block_size_errors():
  w = f32(16, 8)
  q = sc.jit(lambda w: ArrayNF4.quantize(w, 32))(w)
  np.testing.assert_allclose(np.asarray(q.materialize()), nf4_reference(w, 32), atol=1e-6)
  with pytest.raises(ValueError, match="block_size must be a positive even int, got 3"):
    ArrayNF4.quantize(w, 3)
  with pytest.raises(ValueError, match="block_size must be a positive int, got 0"):
    Array8bit.quantize(w, 0)


def test_nf4_weight_through_loops_and_custom_vjp(count_materialize):
  from stagecraft import lax
  w = f32(16, 16)
  q = ArrayNF4.quantize(w, block_size=16)
  wd = nf4_reference(w, 16)
  x = f32(2, 16)

  def rnn(x, q):
    def body(h, _):
      return jnp.tanh(h @ q), None
    return lax.scan(body, x, None, length=3)[0]
  want = x
  for _ in range(3):
    want = np.tanh(want @ wd)
  np.testing.assert_allclose(np.asarray(sc.jit(implicit(rnn))(x, q)), want, rtol=1e-4,
                             atol=1e-5)

  @sc.custom_vjp
  def layer(x, w):
    return x @ w
  layer.defvjp(lambda x, w: (x @ w, (x, w)), lambda r, g: (g @ r[1].T, r[0].T @ g))
  gx = sc.grad(lambda x: jnp.sum(implicit(layer)(x, q) ** 2))(x)
  np.testing.assert_allclose(np.asarray(gx), 2 * (x @ wd) @ wd.T, rtol=1e-4, atol=1e-4)
  assert count_materialize == []    # the custom_vjp rules see the ArrayNF4 (NF4 matmuls)


def test_ste_quantization_aware_training():
  from stagecraft.implicit import ste
  w, x = f32(64), f32(64)
  fake = ste(lambda w: ArrayNF4.quantize(w, 64).materialize())
  np.testing.assert_allclose(np.asarray(fake(w)), nf4_reference(w), atol=1e-6)
  g = sc.grad(lambda w: jnp.sum(fake(w) * x))(w)
  np.testing.assert_allclose(np.asarray(g), x)


def test_vmap_over_a_stack_of_nf4_weights(count_materialize):
  ws = f32(3, 32, 16)
  qs_list = [ArrayNF4.quantize(w, 16) for w in ws]
  qs = sc.tree_util.tree_map(lambda *a: jnp.stack(a), *qs_list)   # children stacked
  x = f32(2, 32)
  out = sc.vmap(implicit(lambda x, q: x @ q), in_axes=(None, 0))(x, qs)
  want = np.stack([x @ nf4_reference(w, 16) for w in ws])
  np.testing.assert_allclose(np.asarray(out), want, rtol=1e-4, atol=1e-4)
  assert count_materialize == []
