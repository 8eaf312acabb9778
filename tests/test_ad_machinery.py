"""The autodiff machinery (JVP trace, linearize by partial evaluation, transpose), checked
with test-local primitives whose rules are registered here. The built-in primitives get
their rules with the autodiff issue; these tests pin the machinery independently."""
import numpy as np
import pytest

import stagecraft
from stagecraft import core, lax
from stagecraft.errors import MissingRuleError
from stagecraft.interpreters import ad, lowering


def _unop(name, hlo):
  p = core.Primitive(name)
  p.def_abstract_eval(lambda x: x)
  lowering.register_lowering(p, lambda ctx, x: [ctx.elementwise(hlo, x)])
  return p


def _binop(name, hlo):
  p = core.Primitive(name)
  p.def_abstract_eval(lambda x, y: x)
  lowering.register_lowering(p, lambda ctx, x, y: [ctx.elementwise(hlo, x, y)])
  return p


t_sin = _unop("t_sin", "stablehlo.sine")
t_cos = _unop("t_cos", "stablehlo.cosine")
t_neg = _unop("t_neg", "stablehlo.negate")
t_mul = _binop("t_mul", "stablehlo.multiply")
t_add = _binop("t_add", "stablehlo.add")
t_nodiff = _unop("t_nodiff", "stablehlo.exponential")   # no JVP rule on purpose
t_nolin = _unop("t_nolin", "stablehlo.negate")          # linear JVP but no transpose

ad.defjvp(t_sin, lambda t, x: t_mul.bind(t, t_cos.bind(x)))
ad.defjvp(t_cos, lambda t, x: t_mul.bind(t, t_neg.bind(t_sin.bind(x))))
ad.deflinear2(t_neg, lambda ct, x: [t_neg.bind(ct)])
ad.deflinear2(t_add, lambda ct, x, y: [ct if ad.is_undefined_primal(x) else None,
                                      ct if ad.is_undefined_primal(y) else None])
ad.defbilinear(t_mul, lambda ct, x, y: t_mul.bind(ct, y), lambda ct, x, y: t_mul.bind(x, ct))
ad.primitive_jvps[t_nolin] = lambda p, t: (t_nolin.bind(*p), t_nolin.bind(*t))


def f(x):              # sin(x * x)
  return t_sin.bind(t_mul.bind(x, x))


def df(x):             # 2x cos(x^2)
  return 2 * x * np.cos(x * x)


X = np.array([0.3, -1.2, 2.0], np.float32)


def test_jvp_matches_analytic():
  y, t = stagecraft.jvp(f, (X,), (np.ones(3, np.float32),))
  np.testing.assert_allclose(y, np.sin(X * X), rtol=1e-6)
  np.testing.assert_allclose(t, df(X), rtol=1e-5)


def test_jvp_symbolic_zero_for_independent_output():
  y, t = stagecraft.jvp(lambda x: (f(x), np.float32(3.0)), (X,), (np.ones(3, np.float32),))
  np.testing.assert_allclose(t[1], 0.0)


def test_linearize_reuses_primal_and_is_linear():
  y, f_jvp = stagecraft.linearize(f, X)
  np.testing.assert_allclose(f_jvp(np.ones(3, np.float32)), df(X), rtol=1e-5)
  np.testing.assert_allclose(f_jvp(2 * np.ones(3, np.float32)), 2 * df(X), rtol=1e-5)


def test_grad_and_value_and_grad_scalar():
  x = np.float32(0.7)
  np.testing.assert_allclose(stagecraft.grad(f)(x), df(x), rtol=1e-5)
  v, g = stagecraft.value_and_grad(f)(x)
  np.testing.assert_allclose(v, np.sin(x * x), rtol=1e-6)
  np.testing.assert_allclose(g, df(x), rtol=1e-5)


def test_grad_matches_finite_differences_in_float64():
  with stagecraft.enable_x64():
    x = 0.37
    eps = 1e-4
    fd = (np.sin((x + eps) ** 2) - np.sin((x - eps) ** 2)) / (2 * eps)
    np.testing.assert_allclose(stagecraft.grad(f)(np.float64(x)), fd, rtol=1e-7)


def test_vjp_multiple_inputs_and_outputs():
  def g(x, y):
    return t_mul.bind(x, y), t_add.bind(x, t_neg.bind(y))
  (a, b), vjp_fn = stagecraft.vjp(g, X, 2 * X)
  ca, cb = np.ones(3, np.float32), 3 * np.ones(3, np.float32)
  gx, gy = vjp_fn((ca, cb))
  np.testing.assert_allclose(gx, ca * 2 * X + cb, rtol=1e-6)
  np.testing.assert_allclose(gy, ca * X - cb, rtol=1e-6)


def test_second_order_grad_of_grad():
  x = np.float32(0.4)
  g2 = stagecraft.grad(stagecraft.grad(lambda x: t_sin.bind(x)))(x)
  np.testing.assert_allclose(g2, -np.sin(x), rtol=1e-5)


def test_jvp_of_grad_and_nested_jvp():
  x = np.float32(0.4)
  _, t = stagecraft.jvp(stagecraft.grad(lambda x: t_sin.bind(x)), (x,), (np.float32(1.0),))
  np.testing.assert_allclose(t, -np.sin(x), rtol=1e-5)
  inner = lambda x: stagecraft.jvp(lambda y: t_sin.bind(y), (x,), (np.float32(1.0),))[1]
  _, t2 = stagecraft.jvp(inner, (x,), (np.float32(1.0),))
  np.testing.assert_allclose(t2, -np.sin(x), rtol=1e-5)


def test_no_perturbation_confusion():
  # d/dx [x * d/dy (x + y)] = d/dx [x * 1] = 1 (Siskind & Pearlmutter's example).
  def outer(x):
    inner = stagecraft.jvp(lambda y: t_add.bind(x, y), (np.float32(1.0),), (np.float32(1.0),))[1]
    return t_mul.bind(x, inner)
  _, t = stagecraft.jvp(outer, (np.float32(2.0),), (np.float32(1.0),))
  np.testing.assert_allclose(t, 1.0)


def test_grad_inside_jit():
  gf = stagecraft.jit(stagecraft.grad(lambda x: t_sin.bind(t_mul.bind(x, x))))
  np.testing.assert_allclose(gf(np.float32(0.7)), df(np.float32(0.7)), rtol=1e-5)


def test_has_aux():
  def h(x):
    return t_sin.bind(x), {"aux": x}
  g, aux = stagecraft.grad(h, has_aux=True)(np.float32(0.5))
  np.testing.assert_allclose(g, np.cos(0.5), rtol=1e-6)
  np.testing.assert_allclose(aux["aux"], 0.5)


def test_integer_input_gets_float0_cotangent():
  _, vjp_fn = stagecraft.vjp(lambda x, n: t_sin.bind(x), np.float32(0.5), np.int32(3))
  gx, gn = vjp_fn(np.float32(1.0))
  assert gn.dtype == stagecraft.dtypes.float0 and gn.shape == ()
  np.testing.assert_allclose(gx, np.cos(0.5), rtol=1e-6)


def test_errors():
  with pytest.raises(TypeError, match=r"Gradient only defined for scalar-output functions. "
                                      r"Output had shape: \(3,\)"):
    stagecraft.grad(f)(X)
  with pytest.raises(TypeError, match="grad requires real- or complex-valued inputs"):
    stagecraft.grad(lambda n: n)(np.int32(1))
  with pytest.raises(MissingRuleError, match="Differentiation rule for 't_nodiff' not implemented"):
    stagecraft.grad(lambda x: t_nodiff.bind(x))(np.float32(1.0))
  with pytest.raises(MissingRuleError, match=r"Transpose rule \(for reverse-mode differentiation\) for 't_nolin' not implemented"):
    stagecraft.grad(lambda x: t_nolin.bind(x))(np.float32(1.0))
  with pytest.raises(TypeError, match="must be tuples or lists"):
    stagecraft.jvp(f, X, X)
  with pytest.raises(TypeError, match="expected tangent dtype float32, but got tangent dtype "
                                      "int32"):
    stagecraft.jvp(f, (X,), (np.ones(3, np.int32),))
  _, vjp_fn = stagecraft.vjp(f, X)
  with pytest.raises(ValueError, match=r"unexpected JAX type \(e.g. shape/dtype\) for "
                     r"argument to VJP function: got float32\[4\], but expected float32\[3\]"):
    vjp_fn(np.ones(4, np.float32))


def test_grad_of_jit_stays_staged():
  jf = stagecraft.jit(f)
  x = np.float32(0.7)
  np.testing.assert_allclose(stagecraft.grad(jf)(x), df(x), rtol=1e-5)
  _, t = stagecraft.jvp(jf, (X,), (np.ones(3, np.float32),))
  np.testing.assert_allclose(t, df(X), rtol=1e-5)
  text = str(stagecraft.make_jaxpr(stagecraft.grad(jf))(x))
  # the forward call and the transposed linear call are both staged `jit` equations, and
  # both keep the function's name (as JAX 0.10.2's)
  assert text.count("name=f\n") >= 2 and "jvp(" not in text and "transpose(" not in text, text


def test_grad_of_jit_of_grad_and_grad_of_grad_of_jit():
  x = np.float32(0.4)
  sin = lambda x: t_sin.bind(x)
  np.testing.assert_allclose(
      stagecraft.grad(stagecraft.jit(stagecraft.grad(sin)))(x), -np.sin(x), rtol=1e-5)
  np.testing.assert_allclose(
      stagecraft.grad(stagecraft.grad(stagecraft.jit(sin)))(x), -np.sin(x), rtol=1e-5)


def test_check_grads_orders_1_and_2():
  from stagecraft.test_util import check_grads
  with stagecraft.enable_x64():
    x = np.array([0.3, -0.8, 1.1])
    check_grads(f, (x,), order=2)
    check_grads(lambda x, y: t_mul.bind(t_sin.bind(x), y), (x, 2 * x), order=2)
  check_grads(f, (X,), order=1)   # float32 tolerances


def test_check_grads_catches_a_wrong_rule():
  from stagecraft.test_util import check_grads
  bad = _unop("t_bad_sin", "stablehlo.sine")
  ad.defjvp(bad, lambda t, x: t)          # wrong: d sin = cos
  with stagecraft.enable_x64():
    with pytest.raises(AssertionError, match="JVP differs from finite differences"):
      check_grads(lambda x: bad.bind(x), (np.array([0.5, 1.0]),), order=1, modes=["fwd"])
