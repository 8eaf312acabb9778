"""Tests of stagecraft.implicit: ImplicitArray, register (multiple dispatch, precedence),
use_implicit with the materialization fallback, the higher-order handlers (jit, cond,
while, scan, custom_jvp/vjp, custom_dce, checkpoint) without materializing, composition with
jit/grad/vmap, ste, a LoRA-style class, nested implicit arrays and the error messages."""
from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Union

import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import core, lax
from stagecraft.implicit import (ImplicitArray, MaterializationError, MaterializationWarning,
                                 aux_field, flatten_one_implicit_layer, implicit,
                                 implicit_depth, materialize, register, ste,
                                 tree_flatten_with_implicit, tree_leaves_with_implicit,
                                 tree_map_with_implicit, tree_structure_with_implicit,
                                 use_implicit)
from stagecraft.runtime import dispatch
from stagecraft.runtime.array import Array

ArrayLike = Union[Array, core.Tracer, np.ndarray, float, int]
rng = np.random.default_rng(0)


def f32(*shape):
  return rng.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------------------
# Test classes


@dataclasses.dataclass
class LoRA(ImplicitArray):
  """W + A @ B, never built by the matmul handler."""
  w: Any
  a: Any
  b: Any

  def compute_shape(self):
    return tuple(self.w.shape)

  def compute_dtype(self):
    return self.w.dtype

  def materialize(self):
    _lora_materialized[0] += 1
    return self.w + self.a @ self.b


_lora_materialized = [0]


@register("dot_general")
def _lora_dot(x: ArrayLike, y: LoRA, *, dimension_numbers, precision, preferred_element_type):
  dn = dimension_numbers
  xw = lax.dot_general(x, y.w, dn, precision, preferred_element_type)
  xa = lax.dot_general(x, y.a, dn, precision, preferred_element_type)
  return xw + lax.dot_general(xa, y.b, dn, precision, preferred_element_type)


_mat_calls = [0]


@dataclasses.dataclass
class Scaled(ImplicitArray, warn_on_materialize=True):
  """x * scale with a static scale; counts its materializations."""
  x: Any
  scale: float = aux_field(default=2.0)

  def compute_shape(self):
    return tuple(core.get_aval(self.x).shape)

  def compute_dtype(self):
    return core.get_aval(self.x).dtype

  def materialize(self):
    _mat_calls[0] += 1
    return self.x * self.scale


@register("mul")
def _scaled_mul(a: Scaled, b: ArrayLike):
  return Scaled(a.x * b, scale=a.scale)


@register("add")
def _scaled_add(a: Scaled, b: Scaled):
  if a.scale == b.scale:
    return Scaled(a.x + b.x, scale=a.scale)
  return Scaled(a.x * (a.scale / b.scale) + b.x, scale=b.scale)


@register("neg")
def _scaled_neg(a: Scaled):
  return Scaled(a.x, scale=-a.scale)     # changes the aux data (for the loop-carry test)


@register("reduce_sum")
def _scaled_sum(a: Scaled, *, axes, **_):
  return lax.reduce_sum(a.x, axes) * a.scale


@pytest.fixture(autouse=True)
def _reset_counts():
  _mat_calls[0] = 0
  yield


def _no_materialize():
  assert _mat_calls[0] == 0, f"materialized {_mat_calls[0]} times"


# ---------------------------------------------------------------------------
# The class


def test_aval_pytree_and_astype():
  s = Scaled(jnp.ones((2, 3)), scale=3.0)
  assert s.aval == core.ShapedArray((2, 3), np.dtype(np.float32))
  leaves, tree = sc.tree_util.tree_flatten(s)
  assert len(leaves) == 1
  back = sc.tree_util.tree_unflatten(tree, leaves)
  assert type(back) is Scaled and back.scale == 3.0 and back.shape == (2, 3)
  paths = sc.tree_util.tree_flatten_with_path(s)[0]
  assert sc.tree_util.keystr(paths[0][0]) == ".x"
  h = s.astype(np.float16)
  assert h.dtype == np.float16 and s.dtype == np.float32
  np.testing.assert_allclose(np.asarray(materialize(h)), np.full((2, 3), 3.0, np.float16))
  assert materialize(h).dtype == np.float16


def test_shape_discovery_from_materialize():
  @dataclasses.dataclass
  class Doubled(ImplicitArray):
    x: Any

    def materialize(self):
      return jnp.concatenate([self.x, self.x])

  d = Doubled(jnp.ones(3, np.int32))
  assert d.aval.shape == (6,) and d.dtype == np.int32
  with pytest.warns(UserWarning, match=r"shape \(5,\) given does not match the shape \(6,\)"):
    Doubled(jnp.ones(3), shape=(5,))


def test_non_dataclass_subclass_error():
  class NotADataclass(ImplicitArray):
    def materialize(self):
      return 0.0
  with pytest.raises(TypeError, match=r"NotADataclass must be a dataclass.*"
                                      r"@dataclasses.dataclass"):
    NotADataclass(shape=(), dtype=np.float32)


def test_unknown_primitive_name_error():
  with pytest.raises(ValueError, match=r"Unknown primitive name 'dot_genral'.*"
                                       r"Did you mean 'dot_general'"):
    register("dot_genral")
  with pytest.raises(TypeError, match="expected a stagecraft Primitive or a primitive name"):
    register(3)


def test_materialize_error_propagates_with_context():
  @dataclasses.dataclass
  class Broken(ImplicitArray):
    x: Any

    def materialize(self):
      raise ValueError("codebook missing")

  b = Broken(jnp.ones(3), shape=(3,), dtype=np.float32)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", MaterializationWarning)
    with pytest.raises(MaterializationError, match=r"materialize\(\) of Broken \(standing "
                                                   r"for f32\[3\]\) raised ValueError: "
                                                   r"codebook missing") as e:
      implicit(jnp.sin)(b)
  assert isinstance(e.value.__cause__, ValueError)
  with pytest.raises(TypeError, match=r"Broken: shape and dtype were not given"):
    Broken(jnp.ones(3))


# ---------------------------------------------------------------------------
# Dispatch


def test_handler_by_type_and_output_stays_implicit():
  assert use_implicit is implicit
  s = Scaled(jnp.arange(3.0))
  out = implicit(lambda s, y: s * y)(s, jnp.full(3, 2.0, np.float32))
  assert type(out) is Scaled
  np.testing.assert_allclose(np.asarray(out.x), [0, 2, 4])
  total = implicit(lambda s, t: jnp.sum(s + t))(Scaled(jnp.ones(3)), Scaled(jnp.ones(3), 4.0))
  np.testing.assert_allclose(float(total), 3 * (2 + 4))
  _no_materialize()


def test_precedence_and_primitive_argument():
  @dataclasses.dataclass
  class Tagged(ImplicitArray):
    x: Any

    def compute_shape(self):
      return tuple(self.x.shape)

    def compute_dtype(self):
      return self.x.dtype

    def materialize(self):
      return self.x

  @register("neg")
  def _low(a: Tagged):
    return a.x * 10.0

  @register("neg", precedence=5)
  def _high(a: Tagged):
    return a.x * 20.0

  np.testing.assert_allclose(np.asarray(implicit(lax.neg)(Tagged(jnp.ones(2)))), [20, 20])

  seen = []

  @register("exp")
  def _with_prim(prim: core.Primitive, a: Tagged):
    seen.append(prim.name)
    return a.x + 1.0
  np.testing.assert_allclose(np.asarray(implicit(jnp.exp)(Tagged(jnp.ones(2)))), [2, 2])
  assert seen == ["exp"]


def test_materialize_fallback_warns_and_can_be_silenced(monkeypatch):
  s = Scaled(jnp.arange(3.0))
  with pytest.warns(MaterializationWarning, match=r"No implicit-array handler for primitive "
                                                  r"`sin`.*materializing Scaled"):
    out = implicit(jnp.sin)(s)
  np.testing.assert_allclose(np.asarray(out), np.sin(2 * np.arange(3.0)), rtol=1e-6)
  assert _mat_calls[0] == 1
  monkeypatch.setenv("STAGECRAFT_IMPLICIT_WARN", "0")
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    implicit(jnp.cos)(s)

  @dataclasses.dataclass
  class Quiet(ImplicitArray, warn_on_materialize=False):
    x: Any

    def materialize(self):
      return self.x
  monkeypatch.delenv("STAGECRAFT_IMPLICIT_WARN")
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    implicit(jnp.cos)(Quiet(jnp.ones(2)))


def test_handler_returning_wrong_shape_is_an_error():
  @dataclasses.dataclass
  class Bad(ImplicitArray):
    x: Any

    def materialize(self):
      return self.x

  @register("tanh")
  def _bad(a: Bad):
    return jnp.zeros(5)
  with pytest.raises(TypeError, match=r"handler for `tanh` returned output 0 of type f32\[5\], "
                                      r"but the primitive gives f32\[3\]"):
    implicit(jnp.tanh)(Bad(jnp.ones(3)))


# ---------------------------------------------------------------------------
# LoRA and nesting


def _lora(k=6, n=5, r=2):
  return LoRA(jnp.asarray(f32(k, n)), jnp.asarray(f32(k, r)), jnp.asarray(f32(r, n)))


def test_lora_matmul_never_builds_w_plus_ab():
  _lora_materialized[0] = 0
  y = _lora()
  x = f32(3, 6)
  want = x @ (np.asarray(y.w) + np.asarray(y.a) @ np.asarray(y.b))
  f = implicit(lambda x, y: x @ y)
  np.testing.assert_allclose(np.asarray(f(x, y)), want, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(sc.jit(f)(x, y)), want, rtol=1e-5, atol=1e-5)
  assert _lora_materialized[0] == 0
  # The staged program has no f32[6,5] add (W + A @ B is never formed).
  jaxpr = sc.make_jaxpr(f)(x, y)
  assert not any(e.primitive.name == "add" and e.outvars[0].aval.shape == (6, 5)
                 for e in jaxpr.eqns)


def test_lora_grad_through_factors():
  y = _lora()
  x = f32(3, 6)

  def loss(a, b):
    return jnp.sum(implicit(lambda x, y: x @ y)(x, LoRA(y.w, a, b)) ** 2)
  ga, gb = sc.grad(loss, argnums=(0, 1))(y.a, y.b)
  import jax
  import jax.numpy as jjnp
  ja, jb = jax.grad(lambda a, b: jjnp.sum((x @ (np.asarray(y.w) + a @ b)) ** 2),
                    argnums=(0, 1))(np.asarray(y.a), np.asarray(y.b))
  np.testing.assert_allclose(np.asarray(ga), ja, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(np.asarray(gb), jb, rtol=1e-4, atol=1e-4)


def test_nested_implicit_arrays():
  inner = Scaled(jnp.arange(4.0), 2.0)
  outer = Scaled(inner, 3.0)
  assert implicit_depth(outer) == 2 and implicit_depth([inner, 1.0]) == 1
  assert implicit_depth(jnp.ones(2)) == 0
  # materialize of the outer runs with the inner implicit (its mul goes to the handler).
  np.testing.assert_allclose(np.asarray(materialize(outer)), 6 * np.arange(4.0))
  assert _mat_calls[0] == 2          # the outer's materialize, then the inner one's
  _mat_calls[0] = 0
  out = implicit(lambda s: jnp.sum(s))(outer)
  np.testing.assert_allclose(float(out), 6 * 6.0)
  leaves, tree = flatten_one_implicit_layer({"a": outer, "b": 1.0})
  assert len(leaves) == 2 and type(leaves[0]) is Scaled and leaves[0] is inner
  back = tree.unflatten(leaves)
  assert type(back["a"]) is Scaled and back["a"].x is inner


def test_tree_utilities_treat_implicit_as_leaves():
  s = Scaled(jnp.ones(2))
  tree = {"w": s, "b": jnp.zeros(2)}
  leaves, td = tree_flatten_with_implicit(tree)
  assert any(x is s for x in leaves) and len(leaves) == 2
  assert tree_leaves_with_implicit(tree) == leaves
  assert tree_structure_with_implicit(tree) == td
  mapped = tree_map_with_implicit(lambda x: type(x).__name__, tree)
  assert mapped == {"w": "Scaled", "b": "Array"}


# ---------------------------------------------------------------------------
# Higher-order primitives: the implicit operand goes through without materializing


def test_jit_inside_implicit_stays_staged_and_does_not_recompile():
  @sc.jit
  def inner(s, y):
    return jnp.sum(s * y)

  f = implicit(lambda s, y: inner(s, y))
  s, y = Scaled(jnp.arange(3.0)), jnp.ones(3)
  jaxpr = sc.make_jaxpr(f)(s, y)
  assert [e.primitive.name for e in jaxpr.eqns] == ["jit"]
  np.testing.assert_allclose(float(f(s, y)), 6.0)
  n = dispatch.compile_count[0]
  np.testing.assert_allclose(float(f(Scaled(jnp.ones(3)), y)), 6.0)
  assert dispatch.compile_count[0] == n
  _no_materialize()


def test_jit_of_implicit_is_one_program():
  f = sc.jit(implicit(lambda s, y: jnp.sum(s * y)))
  s, y = Scaled(jnp.arange(3.0)), jnp.ones(3)
  n = dispatch.compile_count[0]
  np.testing.assert_allclose(float(f(s, y)), 6.0)
  assert dispatch.compile_count[0] == n + 1
  f(Scaled(jnp.ones(3)), y)
  assert dispatch.compile_count[0] == n + 1
  _no_materialize()


def test_cond_with_implicit_operand():
  def f(p, s, y):
    return lax.cond(p, lambda s, y: jnp.sum(s * y), lambda s, y: jnp.sum(s * (y + 1.0)), s, y)
  s, y = Scaled(jnp.arange(3.0)), jnp.ones(3)
  g = implicit(f)
  assert float(g(True, s, y)) == 6.0 and float(g(False, s, y)) == 12.0
  assert float(sc.jit(g)(False, s, y)) == 12.0
  # Both branches return a Scaled with the same aux data: the output stays implicit.
  out = implicit(lambda p, s: lax.cond(p, lambda s: s * 2.0, lambda s: s * 3.0, s))(False, s)
  assert type(out) is Scaled
  np.testing.assert_allclose(np.asarray(out.x), 3 * np.arange(3.0))
  _no_materialize()


def test_cond_branches_with_different_output_structure_materialize_outputs():
  s = Scaled(jnp.arange(3.0))
  with pytest.warns(MaterializationWarning, match="`sin`"):
    out = implicit(lambda p, s: lax.cond(p, lambda s: s * 2.0, jnp.sin, s))(True, s)
  np.testing.assert_allclose(np.asarray(out), 4 * np.arange(3.0))


def test_while_loop_carry_keeps_metadata():
  def f(s):
    def body(c):
      i, s = c
      return i + 1, s * 2.0
    return lax.while_loop(lambda c: c[0] < 3, body, (0, s))
  i, out = implicit(f)(Scaled(jnp.ones(2), 5.0))
  assert int(i) == 3 and type(out) is Scaled and out.scale == 5.0
  np.testing.assert_allclose(np.asarray(out.x), [8, 8])
  i, out = sc.jit(implicit(f))(Scaled(jnp.ones(2), 5.0))
  np.testing.assert_allclose(np.asarray(out.x), [8, 8])
  _no_materialize()


def test_while_loop_closed_over_implicit_and_differentiable_const():
  # quax #15: a constant closed over by the body must be differentiable.
  def loss(w, s):
    def f(s):
      def body(c):
        i, acc = c
        return i + 1, acc + jnp.sum(s * w)
      return lax.while_loop(lambda c: c[0] < 3, body, (0, 0.0))[1]
    return implicit(f)(s)
  s = Scaled(jnp.arange(3.0))
  w = jnp.ones(3)
  np.testing.assert_allclose(float(loss(w, s)), 3 * 2 * 3.0)
  g = sc.jacfwd(loss)(w, s)
  np.testing.assert_allclose(np.asarray(g), 3 * 2 * np.arange(3.0))
  _no_materialize()


def test_while_loop_metadata_change_is_a_type_error():
  def f(s):
    return lax.while_loop(lambda s: jnp.sum(s) < 100.0, lambda s: -s, s)
  with pytest.raises(TypeError, match=r"while_loop: the carry at position 0 is "
                                      r"Scaled\(shape=\(2,\), dtype=dtype\('float32'\), "
                                      r"scale=2.0\) but the loop body returns Scaled\(.*"
                                      r"scale=-2.0\).*keep its static metadata"):
    implicit(f)(Scaled(jnp.ones(2)))


def test_scan_with_implicit_carry_and_const():
  def f(s, t, xs):
    def body(c, x):
      return c * 2.0, jnp.sum(t * x)
    return lax.scan(body, s, xs)
  s, t = Scaled(jnp.ones(2), 3.0), Scaled(jnp.arange(2.0), 1.0)
  xs = jnp.ones((4, 2))
  c, ys = implicit(f)(s, t, xs)
  assert type(c) is Scaled and c.scale == 3.0
  np.testing.assert_allclose(np.asarray(c.x), [16, 16])
  np.testing.assert_allclose(np.asarray(ys), [1, 1, 1, 1])
  c2, ys2 = sc.jit(implicit(f))(s, t, xs)
  np.testing.assert_allclose(np.asarray(c2.x), [16, 16])
  _no_materialize()


def test_custom_jvp_call_with_implicit_operand():
  @sc.custom_jvp
  def g(x):
    return jnp.sum(x * 2.0)

  @g.defjvp
  def g_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return g(x), jnp.sum(t) * 2.0

  s = Scaled(jnp.arange(3.0), 2.0)
  out = implicit(g)(s)
  np.testing.assert_allclose(float(out), 2 * 2 * 3.0)
  _no_materialize()                          # the forward pass does not materialize
  # Differentiating through it materializes inside the JVP rule (tangent of materialize).
  d = sc.grad(lambda x: implicit(g)(Scaled(x, 2.0)))(jnp.arange(3.0))
  np.testing.assert_allclose(np.asarray(d), [4, 4, 4])


def test_custom_vjp_call_with_implicit_operand():
  @sc.custom_vjp
  def g(x, y):
    return jnp.sum(x * y)
  g.defvjp(lambda x, y: (g(x, y), (x, y)), lambda res, c: (res[1] * c * 10.0, res[0] * c))
  s, y = Scaled(jnp.arange(3.0), 2.0), jnp.ones(3)
  np.testing.assert_allclose(float(implicit(g)(s, y)), 6.0)
  np.testing.assert_allclose(float(sc.jit(implicit(g))(s, y)), 6.0)
  _no_materialize()                          # the forward pass does not materialize
  # grad: the bwd's cotangent for the materialized operand (10 * y) is pulled back to the
  # child x through materialize (x * 2): 20 * y.
  gx, gy = sc.grad(lambda x, y: implicit(g)(Scaled(x, 2.0), y), argnums=(0, 1))(
      jnp.arange(3.0), y)
  np.testing.assert_allclose(np.asarray(gx), [20, 20, 20])
  np.testing.assert_allclose(np.asarray(gy), 2 * np.arange(3.0))


def test_custom_dce_and_checkpoint_with_implicit_operand():
  f = implicit(sc.checkpoint(lambda s, y: jnp.sum(s * y)))
  s = Scaled(jnp.arange(3.0))
  np.testing.assert_allclose(float(f(s, jnp.ones(3))), 6.0)
  from stagecraft.custom_dce import custom_dce

  @custom_dce
  def h(s, y):
    return jnp.sum(s * y), y * 2.0

  @h.def_dce
  def h_dce(used_outs, s, y):
    return [jnp.sum(s * y) if used_outs[0] else None, y * 2.0 if used_outs[1] else None]
  a, b = implicit(h)(s, jnp.ones(3))
  np.testing.assert_allclose(float(a), 6.0)
  _no_materialize()


# ---------------------------------------------------------------------------
# Composition and ste


def test_grad_and_vmap_outside_implicit():
  s = Scaled(jnp.arange(3.0), 2.0)
  loss = implicit(lambda y, s: jnp.sum(s * y * y))
  np.testing.assert_allclose(np.asarray(sc.grad(loss)(jnp.ones(3), s)), 4 * np.arange(3.0))
  ys = jnp.asarray(f32(4, 3))
  out = sc.vmap(loss, in_axes=(0, None))(ys, s)
  np.testing.assert_allclose(np.asarray(out),
                             (2 * np.arange(3.0) * np.asarray(ys) ** 2).sum(1), rtol=1e-5)
  _no_materialize()


def test_ste_gradient_passes_through():
  def fake_quant(w):
    return jnp.round(w * 4.0) / 4.0
  w = jnp.asarray(f32(5))
  x = jnp.asarray(f32(5))
  g = sc.grad(lambda w: jnp.sum(ste(fake_quant)(w) * x))(w)
  np.testing.assert_allclose(np.asarray(g), np.asarray(x))
  np.testing.assert_allclose(np.asarray(ste(fake_quant)(w)), np.round(np.asarray(w) * 4) / 4)
  # Implicit outputs are materialized in the backward pass.
  g2 = sc.grad(lambda w: jnp.sum(materialize(ste(lambda v: Scaled(v, 1.0))(w)) * x))(w)
  np.testing.assert_allclose(np.asarray(g2), np.asarray(x))


def test_implicit_inside_jit_and_grad_with_array_built_inside():
  f = implicit(lambda s, y: jnp.sum(s * y))
  g = sc.jit(lambda x, y: f(Scaled(x, 3.0), y))
  np.testing.assert_allclose(float(g(jnp.arange(3.0), jnp.ones(3))), 9.0)
  d = sc.grad(lambda x: f(Scaled(x, 3.0), jnp.arange(3.0)))(jnp.ones(3))
  np.testing.assert_allclose(np.asarray(d), 3 * np.arange(3.0))
  _no_materialize()


def test_scan_closed_over_const_reverse_mode():
  def loss(w, s):
    def f(s):
      return lax.scan(lambda c, _: (c + jnp.sum(s * w), None), 0.0, None, length=3)[0]
    return implicit(f)(s)
  s = Scaled(jnp.arange(3.0))
  g = sc.grad(loss)(jnp.ones(3), s)
  np.testing.assert_allclose(np.asarray(g), 3 * 2 * np.arange(3.0))
  g2 = sc.jit(sc.grad(loss))(jnp.ones(3), s)
  np.testing.assert_allclose(np.asarray(g2), 3 * 2 * np.arange(3.0))
  _no_materialize()
