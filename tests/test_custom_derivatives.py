"""custom_jvp and custom_vjp: JAX's documented examples, every interpreter (eager, jit,
jvp, grad, grad of grad, grad of jit), and the error messages."""
from functools import partial

import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import custom_jvp, custom_vjp
from stagecraft.custom_derivatives import SymbolicZero
from stagecraft.errors import UnexpectedTracerError


# ---------------------------------------------------------------------------
# custom_jvp


@custom_jvp
def log1pexp(x):
  return jnp.log(1. + jnp.exp(x))


@log1pexp.defjvp
def log1pexp_jvp(primals, tangents):
  x, = primals
  x_dot, = tangents
  return log1pexp(x), (1 - 1 / (1 + jnp.exp(x))) * x_dot


def test_log1pexp_documented_results():
  # The naive derivative is nan at x=100 (inf/inf); the custom rule gives 1.
  assert float(log1pexp(3.)) == pytest.approx(np.log1p(np.exp(3.)), rel=1e-6)
  assert float(sc.grad(log1pexp)(100.)) == 1.0
  assert float(sc.jit(sc.grad(log1pexp))(100.)) == 1.0
  assert float(sc.grad(log1pexp)(0.)) == pytest.approx(0.5)
  y, t = sc.jvp(log1pexp, (3.,), (2.,))
  assert float(t) == pytest.approx(2 * (1 - 1 / (1 + np.exp(3.))), rel=1e-6)


def test_custom_jvp_is_one_staged_call():
  text = str(sc.make_jaxpr(log1pexp)(3.))
  assert "custom_jvp_call[" in text and "jvp=log1pexp_jvp" in text
  # Under grad, the rule (not the primal jaxpr) is differentiated: no exp-of-exp overflow path.
  g = str(sc.make_jaxpr(sc.grad(log1pexp))(3.))
  assert "custom_jvp_call" in g


def _sin_times():
  @custom_jvp
  def f(x, y):
    return jnp.sin(x) * y

  @f.defjvp
  def f_jvp(primals, tangents):
    x, y = primals
    x_dot, y_dot = tangents
    return f(x, y), jnp.cos(x) * x_dot * y + jnp.sin(x) * y_dot
  return f


def test_defjvp_value_and_grad_documented():
  f = _sin_times()
  v, g = sc.value_and_grad(f)(np.float32(1.0), np.float32(2.0))
  assert np.round(float(v), 2) == 1.68 and np.round(float(g), 2) == 1.08
  gx, gy = sc.grad(f, argnums=(0, 1))(1.0, 2.0)
  np.testing.assert_allclose([gx, gy], [np.cos(1.) * 2, np.sin(1.)], rtol=1e-6)


def test_defjvps_matches_defjvp():
  @custom_jvp
  def f(x, y):
    return jnp.sin(x) * y

  f.defjvps(lambda x_dot, primal_out, x, y: jnp.cos(x) * x_dot * y,
            lambda y_dot, primal_out, x, y: jnp.sin(x) * y_dot)
  v, g = sc.value_and_grad(f)(np.float32(1.0), np.float32(2.0))
  assert np.round(float(v), 2) == 1.68 and np.round(float(g), 2) == 1.08
  _, t = sc.jvp(f, (1.0, 2.0), (0.5, -1.0))
  assert float(t) == pytest.approx(np.cos(1.) * 0.5 * 2 - np.sin(1.), rel=1e-6)


def test_second_derivative_differentiates_the_rule():
  @custom_jvp
  def my_sin(x):
    return jnp.sin(x)

  @my_sin.defjvp
  def my_sin_jvp(primals, tangents):
    x, = primals
    return my_sin(x), 3.0 * jnp.cos(x) * tangents[0]   # deliberately not the true rule

  x = 0.7
  assert float(sc.grad(my_sin)(x)) == pytest.approx(3 * np.cos(x), rel=1e-6)
  assert float(sc.grad(sc.grad(my_sin))(x)) == pytest.approx(-3 * np.sin(x), rel=1e-6)
  assert float(sc.jit(sc.grad(sc.grad(my_sin)))(x)) == pytest.approx(-3 * np.sin(x), rel=1e-5)


def test_nondiff_argnums_documented_app():
  @partial(custom_jvp, nondiff_argnums=(0,))
  def app(f, x):
    return f(x)

  def app_jvp(f, primals, tangents):
    x, = primals
    x_dot, = tangents
    return f(x), 2. * x_dot
  app.defjvp(app_jvp)

  assert float(app(lambda x: x ** 3, 3.)) == 27.
  y, t = sc.jvp(lambda x: app(lambda y: y ** 3, x), (3.,), (1.,))
  assert (float(y), float(t)) == (27., 2.)
  assert float(sc.grad(lambda x: app(lambda y: y ** 3, x))(3.)) == 2.


def test_nondiff_array_argument_is_a_constant():
  @partial(custom_jvp, nondiff_argnums=(1,))
  def scale(x, s):
    return x * s

  @scale.defjvp
  def scale_jvp(s, primals, tangents):
    return scale(primals[0], s), tangents[0] * s

  # d/ds is dropped (s is non-differentiable), d/dx = s.
  g = sc.grad(lambda x, s: scale(x, s), argnums=(0, 1))(2.0, 5.0)
  assert float(g[0]) == 5.0 and float(g[1]) == 0.0


def test_symbolic_zeros():
  seen = []

  @custom_jvp
  def f(x, y):
    return x * y

  def f_jvp(primals, tangents):
    x, y = primals
    xd, yd = tangents
    seen.append((type(xd) is SymbolicZero, type(yd) is SymbolicZero))
    t = 0.
    if type(xd) is not SymbolicZero:
      t = t + xd * y
    if type(yd) is not SymbolicZero:
      t = t + x * yd
    return f(x, y), t
  f.defjvp(f_jvp, symbolic_zeros=True)

  assert float(sc.grad(f)(2., 3.)) == 3.
  assert seen[-1] == (False, True)
  assert float(sc.grad(f, argnums=1)(2., 3.)) == 2.
  assert seen[-1] == (True, False)


def test_pytree_inputs_and_outputs():
  @custom_jvp
  def f(d):
    return {"s": d["a"] * d["b"], "c": jnp.cos(d["a"])}

  @f.defjvp
  def f_jvp(primals, tangents):
    (d,), (t,) = primals, tangents
    return f(d), {"s": t["a"] * d["b"] + d["a"] * t["b"], "c": -jnp.sin(d["a"]) * t["a"]}

  d = {"a": 1.5, "b": -2.0}
  g = sc.grad(lambda d: f(d)["s"] + f(d)["c"])(d)
  np.testing.assert_allclose([g["a"], g["b"]], [-2.0 - np.sin(1.5), 1.5], rtol=1e-6)


def test_custom_jvp_inside_jit_and_closure_over_jit_argument():
  f = _sin_times()

  @sc.jit
  def g(x, y):
    return sc.grad(lambda x: f(x, y))(x)

  assert float(g(1.0, 2.0)) == pytest.approx(np.cos(1.) * 2, rel=1e-6)


def test_error_no_rule():
  @custom_jvp
  def f(x):
    return x
  with pytest.raises(AttributeError, match="No JVP defined for custom_jvp function f using "
                                           "defjvp"):
    f(1.)


def test_error_rule_not_a_pair():
  @custom_jvp
  def f(x):
    return jnp.sin(x)
  f.defjvp(lambda p, t: f(*p))
  with pytest.raises(TypeError, match="must produce a pair"):
    sc.jvp(f, (1.,), (1.,))


def test_error_mismatched_tangent_type():
  @custom_jvp
  def f(x):
    return jnp.sin(x)
  f.defjvp(lambda p, t: (f(*p), jnp.ones(2)))
  with pytest.raises(TypeError, match=r"Expected float32\[\] \(tangent type of float32\[\]\) but got "
                                      r"float32\[2\]"):
    sc.grad(f)(1.)


def test_error_mismatched_structures():
  @custom_jvp
  def f(x):
    return jnp.sin(x)
  f.defjvp(lambda p, t: ((f(*p), f(*p)), t[0]))
  with pytest.raises(TypeError, match="equal container"):
    sc.jvp(f, (1.,), (1.,))

  @custom_jvp
  def g(x):
    return jnp.sin(x)
  g.defjvp(lambda p, t: ((g(*p), g(*p)), (t[0], t[0])))
  # As JAX: a JVP trace calls the rule directly without tracing g, so nothing to compare
  # with; once g is staged (jit), its traced output is checked against the rule's.
  assert len(sc.jvp(g, (1.,), (1.,))[0]) == 2
  with pytest.raises(TypeError, match="had container/pytree structure"):
    sc.jvp(sc.jit(g), (1.,), (1.,))


def test_error_differentiating_closed_over_value():
  def outer(w):
    @custom_jvp
    def f(x):
      return x * w
    f.defjvp(lambda p, t: (f(*p), t[0] * w))
    return f(2.)
  # The rule closes over w, a value being differentiated: JAX raises UnexpectedTracerError
  # when the rule runs directly (eager and under jit), and the closed-over TypeError once
  # the function was staged (grad of jit).
  with pytest.raises(sc.UnexpectedTracerError, match="custom_jvp or custom_vjp rule"):
    sc.grad(outer)(3.)
  with pytest.raises(sc.UnexpectedTracerError, match="custom_jvp or custom_vjp rule"):
    sc.jit(sc.grad(outer))(3.)
  with pytest.raises(TypeError, match="closed-over value"):
    sc.grad(sc.jit(outer))(3.)


# ---------------------------------------------------------------------------
# custom_vjp


def _sin_times_vjp():
  @custom_vjp
  def f(x, y):
    return jnp.sin(x) * y

  def f_fwd(x, y):
    return f(x, y), (jnp.cos(x), jnp.sin(x), y)

  def f_bwd(res, g):
    cos_x, sin_x, y = res
    return (cos_x * g * y, sin_x * g)

  f.defvjp(f_fwd, f_bwd)
  return f


def test_custom_vjp_documented_value_and_grad():
  f = _sin_times_vjp()
  v, g = sc.value_and_grad(f)(np.float32(1.0), np.float32(2.0))
  assert np.round(float(v), 2) == 1.68 and np.round(float(g), 2) == 1.08
  assert float(f(1.0, 2.0)) == pytest.approx(np.sin(1.) * 2, rel=1e-6)


@custom_vjp
def clip_gradient(lo, hi, x):
  return x


def _clip_fwd(lo, hi, x):
  return x, (lo, hi)


def _clip_bwd(res, g):
  lo, hi = res
  return (None, None, jnp.clip(g, lo, hi))


clip_gradient.defvjp(_clip_fwd, _clip_bwd)


def test_gradient_clipping_documented():
  def clip_sin(x):
    x = clip_gradient(-0.75, 0.75, x)
    return jnp.sin(x)

  t = np.linspace(0, 10, 50, dtype=np.float32)[:8]
  g = [float(sc.grad(clip_sin)(ti)) for ti in t]
  np.testing.assert_allclose(g, np.clip(np.cos(t), -0.75, 0.75), rtol=1e-6)
  gj = sc.jit(sc.grad(clip_sin))
  np.testing.assert_allclose([float(gj(ti)) for ti in t], np.clip(np.cos(t), -0.75, 0.75),
                             rtol=1e-6)
  # Clipping the cotangent flowing into sin's output instead scales it to 0.75.
  g2 = [float(sc.grad(lambda x: clip_gradient(-0.75, 0.75, jnp.sin(x)))(ti)) for ti in t]
  np.testing.assert_allclose(g2, 0.75 * np.cos(t), rtol=1e-6)


def test_custom_vjp_nondiff_argnums_documented_app():
  @partial(custom_vjp, nondiff_argnums=(0,))
  def app(f, x):
    return f(x)

  def app_fwd(f, x):
    return f(x), x

  def app_bwd(f, x, g):
    return (5 * g,)

  app.defvjp(app_fwd, app_bwd)
  assert float(app(lambda x: x ** 2, 4.)) == 16.
  assert float(sc.grad(app, 1)(lambda x: x ** 2, 4.)) == 5.


def test_custom_vjp_pytree_residuals_and_multiple_outputs():
  @custom_vjp
  def f(x, y):
    return x * y, jnp.sin(x)

  def fwd(x, y):
    return f(x, y), {"x": x, "y": y, "c": jnp.cos(x)}

  def bwd(res, cts):
    g1, g2 = cts
    return (g1 * res["y"] + g2 * res["c"], g1 * res["x"])

  f.defvjp(fwd, bwd)
  x, y = 0.3, -1.7
  # Only the first output is used: the second output's cotangent arrives as zeros.
  g = sc.grad(lambda x, y: f(x, y)[0], argnums=(0, 1))(x, y)
  np.testing.assert_allclose(g, [y, x], rtol=1e-6)
  g = sc.grad(lambda x, y: f(x, y)[0] + 2 * f(x, y)[1], argnums=(0, 1))(x, y)
  np.testing.assert_allclose(g, [y + 2 * np.cos(x), x], rtol=1e-6)


def test_grad_of_jit_of_custom_vjp_and_jaxpr():
  f = _sin_times_vjp()
  g = sc.grad(sc.jit(f))(1.0, 2.0)
  assert float(g) == pytest.approx(np.cos(1.) * 2, rel=1e-6)
  assert "custom_vjp_call[" in str(sc.make_jaxpr(f)(1.0, 2.0))
  assert "custom_lin" not in str(sc.make_jaxpr(sc.grad(f))(1.0, 2.0))


def test_custom_vjp_symbolic_zeros():
  seen = []

  @custom_vjp
  def f(x, y):
    return x * y

  def fwd(x, y):
    seen.append((x.perturbed, y.perturbed))
    return f(x.value, y.value), (x.value, y.value)

  def bwd(res, g):
    return (g * res[1], g * res[0])

  f.defvjp(fwd, bwd, symbolic_zeros=True)
  assert float(sc.grad(f)(2., 3.)) == 3.
  assert seen[-1] == (True, False)


def test_error_jvp_of_custom_vjp():
  f = _sin_times_vjp()
  with pytest.raises(TypeError, match=r"can't apply forward-mode autodiff \(jvp\) to a "
                                      r"custom_vjp function"):
    sc.jvp(f, (1., 2.), (1., 0.))


def test_error_vjp_no_rule():
  @custom_vjp
  def f(x):
    return x
  with pytest.raises(AttributeError, match="No VJP defined for custom_vjp function f using "
                                           "defvjp"):
    f(1.)


def test_error_bwd_structure_and_types():
  @custom_vjp
  def f(x, y):
    return x * y
  f.defvjp(lambda x, y: (f(x, y), (x, y)), lambda res, g: (g,))
  with pytest.raises(TypeError, match="Custom VJP bwd rule must produce an output with the "
                                      "same container"):
    sc.grad(f)(1., 2.)

  @custom_vjp
  def h(x):
    return x * 2
  h.defvjp(lambda x: (h(x), None), lambda res, g: (jnp.ones(3),))
  with pytest.raises(ValueError, match=r"at output\[0\] the bwd rule produced an output of "
                                       r"type float32\[3\] corresponding to an input of type "
                                       r"float32\[\]"):
    sc.grad(h)(1.)


def test_error_fwd_not_a_pair_and_wrong_primal():
  @custom_vjp
  def f(x):
    return x * 2
  f.defvjp(lambda x: f(x), lambda res, g: (g,))
  with pytest.raises(TypeError, match="must produce a pair"):
    sc.grad(f)(1.)

  @custom_vjp
  def h(x):
    return x * 2
  h.defvjp(lambda x: (jnp.ones(2), None), lambda res, g: (g,))
  # As JAX: called directly, the fwd rule's output is the primal output (grad then finds it
  # is not a scalar); checked against h's own output once h is staged.
  with pytest.raises(TypeError, match="Output had shape: \\(2,\\)"):
    sc.grad(h)(1.)
  with pytest.raises(TypeError, match="had shapes/dtypes of"):
    sc.grad(sc.jit(h))(1.)


def test_error_tracer_in_nondiff_argnums():
  @partial(custom_vjp, nondiff_argnums=(0,))
  def f(a, x):
    return a * x
  f.defvjp(lambda a, x: (f(a, x), None), lambda a, res, g: (g * a,))
  with pytest.raises(UnexpectedTracerError, match="nondiff_argnums"):
    sc.grad(lambda a, x: f(a, x), argnums=0)(2., 3.)
  with pytest.raises(UnexpectedTracerError, match="nondiff_argnums"):
    sc.jit(lambda a, x: f(a, x))(2., 3.)
