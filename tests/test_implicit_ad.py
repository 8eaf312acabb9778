"""Implicit arrays under differentiation (stagecraft.implicit):

1. `ste` with an implicit quantizer: `ste(lambda w: ArrayNF4.quantize(w, 64))(w)` used under
   `implicit` runs the NF4 matmul handler forward and gives `w` the dense straight-through
   gradient (the gradient with respect to the dequantized weight), eagerly, under jit, vmap
   and through scan.
2. custom_jvp / custom_vjp rules see implicit operands (and implicit residuals) as
   themselves, and what they do with them goes to the handlers.
3. scan keeps implicit `xs` and `ys` implicit; cond takes an implicit index and implicit
   operands.

Values are checked against dense computations with JAX (the oracle) or NumPy, and against
finite differences where a derivative is a true one.
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Union

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import core, lax
from stagecraft.implicit import (ImplicitArray, MaterializationWarning, Stacked,
                                 StraightThrough, implicit, materialize, register, stack, ste)
from stagecraft.implicit.quantization import Array8bit, ArrayNF4, QuantizedArray
from stagecraft.runtime.array import Array

rng = np.random.default_rng(42)
ArrayLike = Union[Array, core.Tracer, np.ndarray, np.generic, float, int]


def f32(*shape):
  return rng.standard_normal(shape).astype(np.float32)


def close(a, b, tol=2e-5):
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


@pytest.fixture
def count_materialize(monkeypatch):
  calls = []
  orig = QuantizedArray.materialize

  def counted(self):
    calls.append(type(self).__name__)
    return orig(self)
  monkeypatch.setattr(QuantizedArray, "materialize", counted)
  return calls


def quant(w):
  return ArrayNF4.quantize(w, 64)


def dequant(w, cls=ArrayNF4, bs=64):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    return np.asarray(materialize(cls.quantize(w, bs)))


# ---------------------------------------------------------------------------
# 1. ste with an implicit quantizer


def _mlp_loss(w, x):
  q = ste(quant)(w)
  return jnp.sum(implicit(lambda x, q: jnp.tanh(x @ q))(x, q) ** 2)


def _dense_loss(W, x):
  return jjnp.sum(jjnp.tanh(x @ W) ** 2)


def test_ste_nf4_gradient_is_the_dense_straight_through_gradient(count_materialize):
  w, x = f32(64, 8), f32(4, 64)
  W = dequant(w)
  want = jax.grad(_dense_loss)(W, x)                # d/dW at W = dequantize(quantize(w))
  count_materialize.clear()
  assert type(ste(quant)(w)) is StraightThrough
  close(_mlp_loss(w, x), _dense_loss(W, x))
  close(sc.grad(_mlp_loss)(w, x), want)
  close(sc.jit(sc.grad(_mlp_loss))(w, x), want)
  close(sc.grad(sc.jit(_mlp_loss))(w, x), want)
  gw, gx = sc.grad(_mlp_loss, argnums=(0, 1))(w, x)
  close(gw, want)
  close(gx, jax.grad(_dense_loss, argnums=1)(W, x))
  # The forward matmul is the NF4 handler's: the weight is never materialized.
  assert count_materialize == []


def test_ste_forward_program_holds_the_codes_not_a_float_weight():
  w, x = f32(64, 8), f32(4, 64)
  text = str(sc.make_jaxpr(sc.grad(_mlp_loss))(w, x))
  # The forward matmul dequantizes u8 codes inside the program; the gradient is x^T @ ct.
  assert "u8[8,32]" in text
  jaxpr = sc.make_jaxpr(sc.grad(_mlp_loss))(w, x).jaxpr
  dots = [e for e in jaxpr.eqns if e.primitive.name == "dot_general"]
  assert len(dots) >= 2


@pytest.mark.parametrize("cls,bs", [(ArrayNF4, 64), (Array8bit, 32)])
def test_ste_transposed_weight_and_both_classes(cls, bs, count_materialize):
  w, x = f32(64, 16), f32(3, 16)

  def loss(w, x):
    q = ste(lambda w: cls.quantize(w, bs))(w)
    return jnp.sum(jnp.sin(implicit(lambda x, q: x @ q.T)(x, q)))
  W = dequant(w, cls, bs)
  want = jax.grad(lambda W: jjnp.sum(jjnp.sin(x @ W.T)))(W)
  count_materialize.clear()
  close(sc.grad(loss)(w, x), want)
  close(sc.jit(sc.grad(loss))(w, x), want)
  assert count_materialize == []


def test_ste_under_vmap():
  w, xs = f32(64, 8), f32(3, 4, 64)
  W = dequant(w)
  # Per-example gradients: vmap of grad.
  per = sc.vmap(sc.grad(_mlp_loss), in_axes=(None, 0))(w, xs)
  close(per, jax.vmap(jax.grad(_dense_loss), in_axes=(None, 0))(W, xs))
  # grad of a vmapped implicit function.
  def loss(w, xs):
    q = ste(quant)(w)
    return jnp.sum(sc.vmap(implicit(lambda x, q: jnp.tanh(x @ q)), in_axes=(0, None))(xs, q))
  want = jax.grad(lambda W: jjnp.sum(jax.vmap(lambda x: jjnp.tanh(x @ W))(xs)))(W)
  close(sc.grad(loss)(w, xs), want)
  close(sc.jit(sc.grad(loss))(w, xs), want)


def test_ste_through_scan_over_stacked_layers(count_materialize):
  ws, h = f32(3, 32, 32), f32(2, 32)

  def loss(ws, h):
    qs = ste(quant)(ws)                                 # f32[3,32,32] -> NF4 per layer
    body = lambda h, q: (jnp.tanh(h @ q), None)
    return jnp.sum(implicit(lambda h, qs: lax.scan(body, h, qs)[0])(h, qs))

  def dense(Ws, h):
    return jjnp.sum(jax.lax.scan(lambda h, w: (jjnp.tanh(h @ w), None), h, Ws)[0])
  Ws = dequant(ws)
  count_materialize.clear()
  close(loss(ws, h), dense(Ws, h))
  close(sc.grad(loss)(ws, h), jax.grad(dense)(Ws, h))
  close(sc.jit(sc.grad(loss, argnums=(0, 1)))(ws, h)[1], jax.grad(dense, argnums=1)(Ws, h))
  assert count_materialize == []


def test_ste_forward_mode_and_dense_quantizer():
  w, t = f32(64, 8), f32(64, 8)
  x = f32(4, 64)
  W = dequant(w)
  # jvp: the tangent of the straight-through weight is the tangent of w.
  _, out_t = sc.jvp(lambda w: implicit(lambda x, q: x @ q)(x, ste(quant)(w)), (w,), (t,))
  close(out_t, x @ t)
  # A dense fake quantizer (fn returns an array): identity gradient, forward mode too.
  fake = ste(lambda w: materialize(quant(w)))
  close(fake(w), W)
  c = f32(64, 8)
  close(sc.grad(lambda w: jnp.sum(fake(w) * c))(w), c)
  close(sc.jvp(fake, (w,), (t,))[1], t)
  # materialize of the straight-through array differentiates as the identity.
  close(sc.grad(lambda w: jnp.sum(materialize(ste(quant)(w)) ** 2))(w), 2 * W)


def test_ste_finite_differences_of_the_surrogate():
  # The straight-through gradient is the derivative of the loss in the dequantized weight
  # (the quantizer held fixed): check that derivative by central differences in W.
  w, x = f32(64, 8), f32(4, 64)
  W = dequant(w).astype(np.float64)
  g = np.asarray(sc.grad(_mlp_loss)(w, x))
  f = lambda W: np.sum(np.tanh(x.astype(np.float64) @ W) ** 2)
  for (i, j) in [(0, 0), (5, 3), (63, 7), (31, 4)]:
    e = np.zeros_like(W)
    e[i, j] = 1e-4
    fd = (f(W + e) - f(W - e)) / 2e-4
    np.testing.assert_allclose(g[i, j], fd, rtol=1e-3, atol=1e-4)


def test_ste_second_order_and_primitive_without_handler():
  w, x = f32(16, 4), f32(2, 16)
  q16 = lambda w: ArrayNF4.quantize(w, 16)
  W = dequant(w, ArrayNF4, 16)
  # The straight-through weight differentiates as the identity at every order.
  H = sc.hessian(lambda w: jnp.sum(implicit(lambda x, q: jnp.tanh(x @ q))(x, ste(q16)(w))))(w)
  close(H, jax.hessian(lambda W: jjnp.sum(jjnp.tanh(x @ W)))(W), 1e-5)
  # A primitive with no NF4 handler materializes the weight (warned: `sin` forward, `cos`
  # in its tangent), gradient cos(W).
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    g = sc.grad(lambda w: jnp.sum(implicit(jnp.sin)(ste(q16)(w))))(w)
  assert {c.category for c in caught} == {MaterializationWarning}
  assert any("`sin`" in str(c.message) for c in caught)
  close(g, np.cos(W))


def test_ste_shape_mismatch_is_a_type_error():
  with pytest.raises(TypeError, match=r"ste\(.*\): the function returned f32\[2\] for an "
                                      r"input of f32\[4\]"):
    ste(lambda w: w[:2])(jnp.ones(4))


# ---------------------------------------------------------------------------
# 2. custom_jvp / custom_vjp rules see implicit operands


def test_custom_jvp_rule_sees_the_nf4_array(count_materialize):
  seen = []

  @sc.custom_jvp
  def layer(x, w):
    return jnp.tanh(x @ w)

  @layer.defjvp
  def layer_jvp(primals, tangents):
    (x, w), (dx, dw) = primals, tangents
    seen.append(type(w))
    y = jnp.tanh(x @ w)                    # the NF4 handler, through the operator
    return y, (1 - y ** 2) * (dx @ w + x @ dw)

  w, x = f32(64, 8), f32(4, 64)
  q = quant(w)
  W = dequant(w)
  count_materialize.clear()
  loss = lambda x, q: jnp.sum(implicit(layer)(x, q))
  want = jax.grad(lambda x: jjnp.sum(jjnp.tanh(x @ W)))(x)
  close(sc.grad(loss)(x, q), want)
  assert seen == [ArrayNF4]
  close(sc.jit(sc.grad(loss))(x, q), want)
  assert seen[-1] is ArrayNF4
  out, t = sc.jvp(lambda x: implicit(layer)(x, q), (x,), (x,))
  close(t, (1 - np.tanh(x @ W) ** 2) * (x @ W))
  assert count_materialize == []
  # With a straight-through weight the rule sees it, and w gets the dense gradient.
  g = sc.grad(lambda w: loss(x, ste(quant)(w)))(w)
  assert seen[-1] is StraightThrough
  close(g, jax.grad(lambda W: jjnp.sum(jjnp.tanh(x @ W)))(W))


def test_custom_vjp_rules_see_the_nf4_array_and_residual(count_materialize):
  seen = []

  @sc.custom_vjp
  def lin(x, w):
    return x @ w

  def lin_fwd(x, w):
    seen.append(("fwd", type(w)))
    return x @ w, (x, w)

  def lin_bwd(res, g):
    x, w = res
    seen.append(("bwd", type(w)))
    return g @ w.T, x.T @ g
  lin.defvjp(lin_fwd, lin_bwd)

  w, x = f32(64, 16), f32(4, 64)
  q = quant(w)
  W = dequant(w)
  count_materialize.clear()
  loss = lambda x, q: jnp.sum(jnp.sin(implicit(lin)(x, q)))
  want = jax.grad(lambda x: jjnp.sum(jjnp.sin(x @ W)))(x)
  close(sc.grad(loss)(x, q), want)
  assert seen == [("fwd", ArrayNF4), ("bwd", ArrayNF4)]
  close(sc.jit(sc.grad(loss))(x, q), want)
  assert count_materialize == []
  # The bwd rule's dense cotangent for the weight reaches w through ste.
  g = sc.grad(lambda w: loss(x, ste(quant)(w)))(w)
  close(g, jax.grad(lambda W: jjnp.sum(jjnp.sin(x @ W)))(W))


@dataclasses.dataclass
class LowRank(ImplicitArray):
  """W + U @ V, differentiable in all three children."""
  w: Any
  u: Any
  v: Any

  def compute_shape(self):
    return tuple(core.get_aval(self.w).shape)

  def compute_dtype(self):
    return core.get_aval(self.w).dtype

  def materialize(self):
    return self.w + self.u @ self.v


@register("dot_general")
def _lowrank_dot(x: ArrayLike, m: LowRank, *, dimension_numbers, precision,
                 preferred_element_type):
  dn = dimension_numbers
  xw = lax.dot_general(x, m.w, dn, precision, preferred_element_type)
  xu = lax.dot_general(x, m.u, dn, precision, preferred_element_type)
  return xw + lax.dot_general(xu, m.v, dn, precision, preferred_element_type)


def test_custom_vjp_dense_cotangent_pulled_back_to_the_children():
  w, u, v, x = f32(6, 5), f32(6, 2), f32(2, 5), f32(3, 6)
  seen = []

  @sc.custom_vjp
  def lin(x, m):
    return x @ m

  def fwd(x, m):
    seen.append(type(m))
    return x @ m, (x, m)

  def bwd(res, g):
    x, m = res
    return g @ jnp.asarray(m).T, x.T @ g      # jnp.asarray: the dense weight, on request
  lin.defvjp(fwd, bwd)

  def loss(w, u, v):
    return jnp.sum(jnp.tanh(implicit(lin)(x, LowRank(w, u, v))))

  def dense(w, u, v):
    return jjnp.sum(jjnp.tanh(x @ (w + u @ v)))
  with warnings.catch_warnings():
    # jnp.asarray(m) in the bwd rule materializes (no handler for the transpose): warned.
    warnings.simplefilter("ignore", MaterializationWarning)
    got = sc.grad(loss, argnums=(0, 1, 2))(w, u, v)
  assert seen == [LowRank]
  for a, b in zip(got, jax.grad(dense, argnums=(0, 1, 2))(w, u, v)):
    close(a, b, 1e-4)
  # Finite differences in u.
  e = np.zeros_like(u)
  e[1, 0] = 1e-2
  fd = (float(loss(w, u + e, v)) - float(loss(w, u - e, v))) / 2e-2
  np.testing.assert_allclose(np.asarray(got[1])[1, 0], fd, rtol=2e-2, atol=1e-3)


def test_rule_using_a_jnp_function_on_an_implicit_operand_dispatches_or_warns():
  @sc.custom_jvp
  def f(x, w):
    return jnp.sum(x @ w)

  @f.defjvp
  def f_jvp(primals, tangents):
    (x, w), (dx, dw) = primals, tangents
    return f(x, w), jnp.sum(jnp.matmul(dx, w)) + jnp.sum(jnp.tanh(w)) * 0.0

  w, x = f32(64, 8), f32(4, 64)
  q = quant(w)
  W = dequant(w)
  # jnp.matmul(dx, w) goes to the NF4 handler; jnp.tanh(w) has none: materialized, warned.
  with pytest.warns(MaterializationWarning, match="`tanh`"):
    g = sc.grad(lambda x: implicit(f)(x, q))(x)
  close(g, np.broadcast_to(W.sum(1), x.shape))


def test_operators_on_implicit_arrays_outside_implicit():
  w, x = f32(64, 8), f32(4, 64)
  q = quant(w)
  W = dequant(w)
  close(x @ q, x @ W, 1e-4)                 # Array.__matmul__ defers to ArrayNF4.__rmatmul__
  close(q.T @ x.T, W.T @ x.T, 1e-4)
  assert type(q.T) is ArrayNF4 and q.T.transposed
  with pytest.warns(MaterializationWarning, match="ArrayNF4 used as an array"):
    s = jnp.sum(q)
  close(s, W.sum(), 1e-3)


# ---------------------------------------------------------------------------
# 3. scan's implicit xs and ys, cond's implicit index and operands


def _scan_net(h, qs):
  def body(h, q):
    y = h @ q
    return jnp.tanh(y), jnp.sum(y, axis=1)
  return lax.scan(body, h, qs)


def _dense_scan_net(h, Ws):
  def body(h, w):
    y = h @ w
    return jjnp.tanh(y), jjnp.sum(y, axis=1)
  return jax.lax.scan(body, h, Ws)


@pytest.mark.parametrize("build", ["quantize_3d", "stack"])
def test_scan_over_stacked_quantized_xs_stays_implicit(build, count_materialize):
  ws, h = f32(3, 32, 32), f32(2, 32)
  if build == "quantize_3d":
    qs = ArrayNF4.quantize(ws, 64)
  else:
    qs = stack([ArrayNF4.quantize(w, 64) for w in ws])
  assert type(qs) is ArrayNF4 and qs.shape == (3, 32, 32)
  Ws = np.stack([dequant(w) for w in ws])
  count_materialize.clear()
  want = _dense_scan_net(h, Ws)
  for got in (implicit(_scan_net)(h, qs), sc.jit(implicit(_scan_net))(h, qs)):
    close(got[0], want[0], 1e-4)
    close(got[1], want[1], 1e-4)
  g = sc.grad(lambda h: jnp.sum(implicit(_scan_net)(h, qs)[0]))(h)
  close(g, jax.grad(lambda h: jjnp.sum(_dense_scan_net(h, Ws)[0]))(h), 1e-4)
  assert count_materialize == []
  # The scanned program takes the codes (u8), not a float32 stack of weights.
  jaxpr = sc.make_jaxpr(implicit(_scan_net))(h, qs).jaxpr
  scan_eqn = [e for e in jaxpr.eqns if e.primitive.name == "scan"][0]
  assert any(v.aval.str_short() == "u8[3,16,32]" for v in scan_eqn.invars)
  assert not any(v.aval.str_short() == "f32[3,32,32]" for v in scan_eqn.invars)


def test_scan_reverse_and_implicit_ys(count_materialize):
  ws, h = f32(4, 16, 16), f32(2, 16)
  qs = ArrayNF4.quantize(ws, 16)
  Ws = np.asarray(materialize(qs))
  count_materialize.clear()
  got = implicit(lambda h, qs: lax.scan(lambda h, q: (h @ q, h), h, qs, reverse=True))(h, qs)
  want = jax.lax.scan(lambda h, w: (h @ w, h), h, Ws, reverse=True)
  close(got[0], want[0], 1e-4)
  close(got[1], want[1], 1e-4)
  # ys that are implicit stay implicit: the quantized slices come back stacked.
  ys = implicit(lambda qs: lax.scan(lambda c, q: (c, q), 0.0, qs)[1])(qs)
  assert type(ys) is ArrayNF4 and ys.shape == (4, 16, 16)
  assert count_materialize == []
  close(materialize(ys), Ws)


@dataclasses.dataclass
class Scale(ImplicitArray):
  """x * s, with a lazy mul and sum; no natural stacked layout."""
  x: Any
  s: Any

  def compute_shape(self):
    return tuple(core.get_aval(self.x).shape)

  def compute_dtype(self):
    return core.get_aval(self.x).dtype

  def materialize(self):
    _scale_materialized[0] += 1
    return self.x * self.s


_scale_materialized = [0]


@register("mul")
def _scale_mul(a: Scale, b: ArrayLike):
  return Scale(a.x * b, a.s)


@register("reduce_sum")
def _scale_sum(a: Scale, *, axes, **_):
  return lax.reduce_sum(a.x, axes) * a.s


def test_scan_ys_and_xs_of_a_class_without_layout_use_stacked():
  _scale_materialized[0] = 0
  xs, ss = f32(3, 5), np.array([1.0, 2.0, 3.0], np.float32)
  # ys: per-step Scale outputs, stacked as `Stacked` (leaf by leaf).
  ys = implicit(lambda x: lax.scan(lambda c, s: (c, x * s), 0.0, ss)[1])(
      Scale(jnp.asarray(xs[0]), 2.0))
  assert type(ys) is Stacked and ys.shape == (3, 5)
  assert _scale_materialized[0] == 0
  close(materialize(ys), np.outer(ss, xs[0] * 2.0))
  # xs: a Stacked of Scale arrays reaches the body as Scale slices (the sum handler runs).
  st = stack([Scale(jnp.asarray(x), s) for x, s in zip(xs, ss)])
  assert type(st) is Stacked and st.shape == (3, 5)
  _scale_materialized[0] = 0
  total = implicit(lambda st: lax.scan(lambda c, a: (c + jnp.sum(a), None), 0.0, st)[0])(st)
  close(total, (xs * ss[:, None]).sum(), 1e-4)
  assert _scale_materialized[0] == 0
  # grad with respect to the slices' children, through the scan.
  def loss(xs):
    st = stack([Scale(xs[i], ss[i]) for i in range(3)])
    return implicit(lambda st: lax.scan(lambda c, a: (c + jnp.sum(a * a), None), 0.0,
                                        st)[0])(st)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", MaterializationWarning)   # a * a: no Scale*Scale handler
    close(sc.grad(loss)(jnp.asarray(xs)), 2 * xs * ss[:, None] ** 2, 1e-4)


def test_scan_over_implicit_xs_without_layout_materializes_with_a_warning():
  x = Scale(jnp.asarray(f32(3, 4)), 2.0)
  f = implicit(lambda x: lax.scan(lambda c, r: (c + r, None), jnp.zeros(4), x)[0])
  with pytest.warns(MaterializationWarning, match="scan over Scale as xs"):
    out = f(x)
  close(out, np.asarray(x.x).sum(0) * 2.0)


@dataclasses.dataclass
class Boxed(ImplicitArray, warn_on_materialize=True):
  """An array held as is: an implicit scalar index or predicate."""
  v: Any

  def compute_shape(self):
    return tuple(core.get_aval(self.v).shape)

  def compute_dtype(self):
    return core.get_aval(self.v).dtype

  def materialize(self):
    return self.v


@register("convert_element_type")
def _boxed_convert(a: Boxed, *, new_dtype, weak_type, **_):
  return Boxed(lax.convert_element_type(a.v, new_dtype, weak_type))


@register("ne")
def _boxed_ne(a: Boxed, b: ArrayLike):
  return Boxed(lax.ne(a.v, b))


def test_cond_with_implicit_index_and_implicit_operands(count_materialize):
  w, x = f32(64, 8), f32(4, 64)
  q = quant(w)
  W = dequant(w)
  count_materialize.clear()

  def f(p, x, q):
    return lax.cond(p, lambda x, q: jnp.tanh(x @ q), lambda x, q: jnp.sin(x @ q), x, q)
  for p in (True, False):
    want = np.tanh(x @ W) if p else np.sin(x @ W)
    pb = Boxed(jnp.asarray(p))
    close(implicit(f)(pb, x, q), want, 1e-4)
    close(sc.jit(implicit(f))(pb, x, q), want, 1e-4)
    g = sc.grad(lambda x: jnp.sum(implicit(f)(pb, x, q)))(x)
    dense = (lambda x: jjnp.sum(jjnp.tanh(x @ W))) if p else (lambda x: jjnp.sum(jjnp.sin(x @ W)))
    close(g, jax.grad(dense)(x), 1e-4)
    # An implicit operand returned by both branches stays implicit.
    out = implicit(lambda p, q: lax.cond(p, lambda q: q, lambda q: q.T.T, q))(pb, q)
    assert type(out) is ArrayNF4
  assert count_materialize == []
  # A straight-through weight through cond: the dense gradient reaches w.
  def loss(w, p):
    return jnp.sum(implicit(f)(Boxed(p), x, ste(quant)(w)))
  close(sc.grad(loss)(w, jnp.asarray(True)),
        jax.grad(lambda W: jjnp.sum(jjnp.tanh(x @ W)))(W), 1e-4)
  close(sc.jit(sc.grad(loss))(w, jnp.asarray(False)),
        jax.grad(lambda W: jjnp.sum(jjnp.sin(x @ W)))(W), 1e-4)


def test_switch_index_implicit():
  x = f32(5)
  branches = [lambda x: x * 2.0, lambda x: jnp.sin(x), lambda x: -x]
  f = implicit(lambda i, x: lax.switch(i, branches, x))
  for i, want in [(0, x * 2), (1, np.sin(x)), (2, -x), (7, -x)]:
    # switch clamps the index (no clamp handler for Boxed): materialized, with a warning.
    with pytest.warns(MaterializationWarning, match="`clamp`"):
      close(f(Boxed(jnp.asarray(i, np.int32)), x), want)


def test_stack_without_whole_blocks_is_a_stacked_of_quantized_slices(count_materialize):
  # 5*3 = 15 values per slice: blocks of 16 straddle slices, so `stack` keeps the slices
  # apart (`Stacked`), and scan still hands the body each quantized slice.
  ws = f32(4, 5, 3)
  qs = [Array8bit.quantize(w, 16) for w in ws]
  st = stack(qs)
  assert type(st) is Stacked and st.shape == (4, 5, 3)
  Ws = np.stack([np.asarray(q.materialize()) for q in qs])
  count_materialize.clear()
  h = f32(2, 5)
  got = implicit(lambda h, st: lax.scan(lambda c, q: (c, h @ q), 0.0, st)[1])(h, st)
  close(got, np.einsum("bi,lij->lbj", h, Ws), 1e-4)
  assert count_materialize == []
  # A slice passed through comes back as the same Stacked.
  back = implicit(lambda st: lax.scan(lambda c, q: (c, q), 0.0, st)[1])(st)
  assert type(back) is Stacked
  close(materialize(back), Ws)


def test_custom_rules_under_vmap_of_grad(count_materialize):
  @sc.custom_vjp
  def lin(x, w):
    return x @ w
  lin.defvjp(lambda x, w: (x @ w, (x, w)), lambda res, g: (g @ res[1].T, res[0].T @ g))
  w, xs = f32(64, 8), f32(3, 2, 64)
  q = quant(w)
  W = dequant(w)
  count_materialize.clear()
  loss = lambda x, q: jnp.sum(jnp.tanh(implicit(lin)(x, q)))
  per = sc.vmap(sc.grad(loss), in_axes=(0, None))(xs, q)
  close(per, jax.vmap(jax.grad(lambda x: jjnp.sum(jjnp.tanh(x @ W))))(xs), 1e-4)
  assert count_materialize == []


# A jnp/lax function binding an implicit array directly (jnp.tanh(w)) inside a function that
# a custom rule traces: the staging trace converts it through `__jax_array__`.
def test_primitive_on_an_implicit_array_inside_a_function_traced_by_a_rule():
  @sc.custom_jvp
  def inner(w):
    return jnp.sum(jnp.tanh(w))
  inner.defjvp(lambda p, t: (inner(*p), jnp.sum(t[0]) * 0.0))

  @sc.custom_jvp
  def f(x, w):
    return jnp.sum(x @ w)

  @f.defjvp
  def f_jvp(primals, tangents):
    (x, w), (dx, dw) = primals, tangents
    return f(x, w), jnp.sum(dx @ w) + 0.0 * inner(w)
  w, x = f32(64, 8), f32(4, 64)
  q = quant(w)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    g = sc.grad(lambda x: implicit(f)(x, q))(x)
  assert any("`tanh`" in str(c.message) for c in caught)   # no tanh handler for NF4
  close(g, np.broadcast_to(dequant(w).sum(1), x.shape))
