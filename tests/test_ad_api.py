"""The public autodiff API end to end: grad of an MLP against JAX, jaxpr economy (no
materialized zeros, no duplicated forward work), nested transformations, jacobians,
checkpoint, float0 and the error messages."""
import numpy as np
import pytest

import jax
import jax.numpy as jjnp

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import lax
from stagecraft.interpreters import ad, lowering, partial_eval as pe
from stagecraft.test_util import check_grads

from _util import assert_trees_allclose


def _count(jaxpr, name=None):
  """Equations in a jaxpr, recursively through sub-jaxprs (params holding jaxprs)."""
  from stagecraft.core import ClosedJaxpr, Jaxpr
  j = jaxpr.jaxpr if isinstance(jaxpr, ClosedJaxpr) else jaxpr
  n = 0
  for e in j.eqns:
    subs = [v for v in e.params.values() if isinstance(v, (ClosedJaxpr, Jaxpr))]
    if subs:
      n += sum(_count(s, name) for s in subs)
    else:
      n += name is None or e.primitive.name == name
  return n


def _jax_count(jaxpr, name=None):
  n = 0
  for e in jaxpr.eqns:
    subs = [v for v in e.params.values() if hasattr(v, "eqns") or hasattr(v, "jaxpr")]
    if subs:
      n += sum(_jax_count(getattr(s, "jaxpr", s), name) for s in subs)
    else:
      n += name is None or e.primitive.name == name
  return n


# ---------------------------------------------------------------------------
# An MLP against JAX


def _init_mlp(sizes, seed=0):
  rng = np.random.default_rng(seed)
  return [(rng.standard_normal((m, n)).astype(np.float32) / np.sqrt(m),
           rng.standard_normal(n).astype(np.float32) * 0.1) for m, n in zip(sizes, sizes[1:])]


def _mlp_loss(np_mod, tanh):
  def loss(params, x, y):
    h = x
    for i, (w, b) in enumerate(params):
      h = np_mod.dot(h, w) + b
      if i < len(params) - 1:
        h = tanh(h)
    return np_mod.mean((h - y) ** 2)
  return loss


def test_grad_of_3_layer_mlp_equals_jax():
  params = _init_mlp([8, 16, 16, 4])
  rng = np.random.default_rng(1)
  x = rng.standard_normal((5, 8)).astype(np.float32)
  y = rng.standard_normal((5, 4)).astype(np.float32)
  ours = sc.grad(_mlp_loss(jnp, jnp.tanh))(params, x, y)
  ref = jax.grad(_mlp_loss(jjnp, jjnp.tanh))(params, x, y)
  assert_trees_allclose(ours, ref, rtol=2e-5, atol=2e-6)
  jitted = sc.jit(sc.grad(_mlp_loss(jnp, jnp.tanh)))(params, x, y)
  assert_trees_allclose(jitted, ref, rtol=2e-5, atol=2e-6)


def test_grad_jaxpr_has_no_duplicated_forward_and_no_more_equations_than_jax():
  params = _init_mlp([8, 16, 16, 4])
  x = np.ones((5, 8), np.float32)
  y = np.ones((5, 4), np.float32)
  ours = sc.make_jaxpr(sc.grad(_mlp_loss(jnp, jnp.tanh)))(params, x, y)
  ref = jax.make_jaxpr(jax.grad(_mlp_loss(jjnp, jjnp.tanh)))(params, x, y)
  assert _count(ours, "tanh") == 2          # each hidden layer's tanh computed once
  assert _count(ours, "dot_general") == 3 + 5   # forward 3, backward 2 per layer but first: 5
  assert _count(ours) <= _jax_count(ref.jaxpr), (str(ours), str(ref))


def test_no_materialized_zero_tangents_for_unused_inputs():
  def f(x, y, z):
    return jnp.sum(jnp.sin(x) * y)           # z unused
  x = np.ones(3, np.float32)
  jaxpr = sc.make_jaxpr(sc.grad(f, argnums=(0, 1)))(x, x, x)
  # Nothing but the forward (sin, mul, sum) and the backward (cos, muls, broadcast of the
  # output cotangent): no zeros for z, no add_any of zeros.
  names = [e.primitive.name for e in jaxpr.jaxpr.eqns]
  assert "add_any" not in names
  assert names.count("sin") == 1 and names.count("cos") == 1
  ref = jax.make_jaxpr(jax.grad(lambda x, y, z: jjnp.sum(jjnp.sin(x) * y),
                                argnums=(0, 1)))(x, x, x)
  assert len(names) <= _jax_count(ref.jaxpr)


def test_linearize_jaxpr_is_linear_and_staged():
  y, f_jvp = sc.linearize(lambda x: jnp.sin(x) * x, np.float32(0.5))
  assert float(y) == pytest.approx(np.sin(0.5) * 0.5, rel=1e-6)
  assert float(f_jvp(np.float32(2.0))) == pytest.approx(
      2 * (np.cos(0.5) * 0.5 + np.sin(0.5)), rel=1e-6)


# ---------------------------------------------------------------------------
# Nested transformations


def test_grad_of_grad_jvp_of_grad_grad_of_jit_of_grad():
  f = lambda x: jnp.sin(x) * x ** 2
  df = lambda x: np.cos(x) * x ** 2 + 2 * x * np.sin(x)
  d2f = lambda x: -np.sin(x) * x ** 2 + 4 * x * np.cos(x) + 2 * np.sin(x)
  d3f = lambda x: (-np.cos(x) * x ** 2 - 6 * x * np.sin(x) + 6 * np.cos(x))
  x = 0.8
  assert float(sc.grad(f)(x)) == pytest.approx(df(x), rel=1e-5)
  assert float(sc.grad(sc.grad(f))(x)) == pytest.approx(d2f(x), rel=1e-5)
  assert float(sc.jvp(sc.grad(f), (x,), (1.,))[1]) == pytest.approx(d2f(x), rel=1e-5)
  assert float(sc.grad(sc.jit(sc.grad(f)))(x)) == pytest.approx(d2f(x), rel=1e-5)
  assert float(sc.grad(sc.grad(sc.grad(f)))(x)) == pytest.approx(d3f(x), rel=1e-4)
  assert float(sc.jit(sc.grad(sc.jit(sc.grad(f))))(x)) == pytest.approx(d2f(x), rel=1e-5)


def test_grad_of_jit_stays_one_staged_call():
  f = sc.jit(lambda x: jnp.sum(jnp.tanh(x)))
  text = str(sc.make_jaxpr(sc.grad(f))(np.ones(3, np.float32)))
  assert text.count("jit[") >= 2   # the forward call and the transposed call, not inlined


def test_check_grads_on_compositions():
  with sc.enable_x64():
    x = np.array([0.3, -0.7, 1.1])
    check_grads(lambda x: jnp.sum(jnp.exp(jnp.sin(x)) * x), (x,), order=2)
    check_grads(lambda x, y: jnp.dot(jnp.tanh(x), y), (x, x[::-1].copy()), order=2)


# ---------------------------------------------------------------------------
# float0, allow_int, has_aux, holomorphic


def test_integer_inputs_get_float0():
  f = lambda x, n: x * n
  gx, gn = sc.grad(f, argnums=(0, 1), allow_int=True)(2.0, 3)
  assert float(gx) == 3.0
  assert gn.dtype == sc.dtypes.float0 and np.shape(gn) == ()
  y, t = sc.jvp(f, (2.0, 3), (1.0, np.zeros((), sc.dtypes.float0)))
  assert float(t) == 3.0
  _, vjp_fn = sc.vjp(f, 2.0, 3)
  ct_x, ct_n = vjp_fn(1.0)
  assert float(ct_x) == 3.0 and ct_n.dtype == sc.dtypes.float0


def test_has_aux_and_holomorphic():
  g, aux = sc.grad(lambda x: (x ** 2, {"x": x}), has_aux=True)(3.0)
  assert float(g) == 6.0 and float(aux["x"]) == 3.0
  z = np.complex64(1 + 2j)
  gz = sc.grad(lambda z: z ** 2, holomorphic=True)(z)
  assert complex(gz) == pytest.approx(2 * z)


def test_error_messages():
  with pytest.raises(TypeError, match=r"Gradient only defined for scalar-output functions. "
                                      r"Output had shape: \(3,\)"):
    sc.grad(lambda x: x * 2)(np.ones(3, np.float32))
  with pytest.raises(TypeError, match="grad requires real- or complex-valued inputs .* but "
                                      "got int32. If you want to use Boolean- or integer-valued "
                                      "inputs, use vjp or set allow_int to True"):
    sc.grad(lambda x: x * 2.0)(3)
  with pytest.raises(TypeError, match="grad requires real-valued outputs"):
    sc.grad(lambda x: x * 1j)(1.0)
  with pytest.raises(TypeError, match="argnums"):   # JAX 0.10.2's type
    sc.grad(lambda x: x, argnums=2)(1.0)


def test_stop_gradient():
  f = lambda x: x * lax.stop_gradient(x) + x
  assert float(sc.grad(f)(3.0)) == 4.0
  assert float(sc.grad(sc.grad(lambda x: lax.stop_gradient(x ** 2) * x))(3.0)) == 0.0


# ---------------------------------------------------------------------------
# Jacobians and Hessians


def _vec_fun(x, y):
  return {"a": jnp.sin(x) * y[0], "b": jnp.sum(x ** 2) * y}


def test_jacfwd_jacrev_equal_jax():
  x = np.array([0.1, 0.5, -0.3], np.float32)
  y = np.array([2.0, -1.0], np.float32)
  jf = lambda x, y: {"a": jjnp.sin(x) * y[0], "b": jjnp.sum(x ** 2) * y}
  for ours_t, ref_t in ((sc.jacfwd, jax.jacfwd), (sc.jacrev, jax.jacrev)):
    ours = ours_t(_vec_fun, argnums=(0, 1))(x, y)
    ref = ref_t(jf, argnums=(0, 1))(x, y)
    for k in ("a", "b"):
      for i in range(2):
        assert ours[k][i].shape == ref[k][i].shape
        np.testing.assert_allclose(ours[k][i], ref[k][i], rtol=1e-5, atol=1e-6)
    single = ours_t(_vec_fun)(x, y)
    np.testing.assert_allclose(single["a"], ref["a"][0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [3, 40])
def test_jacobians_are_one_batched_program(n):
  # The linear map is vmapped over the basis: the staged Jacobian has the same equations
  # for 3 or 40 columns (a loop over basis vectors would grow with n).
  f = lambda x: jnp.sin(x) * jnp.sum(x ** 2)
  x = np.linspace(-1, 1, n).astype(np.float32)
  jf = lambda x: jjnp.sin(x) * jjnp.sum(x ** 2)
  for ours_t, ref_t in ((sc.jacfwd, jax.jacfwd), (sc.jacrev, jax.jacrev)):
    eqns = sc.make_jaxpr(ours_t(f))(x).jaxpr.eqns
    # the basis is built in the trace (iota, eq, ...) as JAX's is: JAX stages 25 / 24 here
    n_ref = len(jax.make_jaxpr(ref_t(jf))(x).jaxpr.eqns)
    assert len(eqns) <= n_ref and sum(e.primitive.name == "sin" for e in eqns) == 1
    np.testing.assert_allclose(sc.jit(ours_t(f))(x), ref_t(jf)(x), rtol=1e-5, atol=1e-6)


def test_jacobian_edge_cases_equal_jax():
  # Empty inputs, integer inputs with allow_int (float0 blocks), mixed pytree leaves.
  assert sc.jacfwd(lambda x: jnp.sum(x) * 2)(np.zeros((0,), np.float32)).shape == (0,)
  assert sc.jacrev(lambda x: x * 2)(np.zeros((0, 2), np.float32)).shape == (0, 2, 0, 2)
  gx, gn = sc.jacrev(lambda x, n: x * n, argnums=(0, 1), allow_int=True)(
      np.ones(2, np.float32), 3)
  np.testing.assert_array_equal(gx, 3 * np.eye(2))
  assert gn.dtype == sc.dtypes.float0 and gn.shape == (2,)
  z = np.array([1 + 2j, 3 - 1j], np.complex64)
  for ours_t, ref_t in ((sc.jacfwd, jax.jacfwd), (sc.jacrev, jax.jacrev)):
    np.testing.assert_allclose(ours_t(lambda z: z ** 2, holomorphic=True)(z),
                               ref_t(lambda z: z ** 2, holomorphic=True)(z), rtol=1e-6)


def test_hessian_equals_jax():
  f = lambda x: jnp.sum(jnp.tanh(x) ** 2 * x[::-1])
  jf = lambda x: jjnp.sum(jjnp.tanh(x) ** 2 * x[::-1])
  x = np.array([0.1, 0.5, -0.3, 1.2], np.float32)
  np.testing.assert_allclose(sc.hessian(f)(x), jax.hessian(jf)(x), rtol=1e-4, atol=1e-5)


def test_jacobian_errors():
  with pytest.raises(TypeError, match="jacfwd requires real-valued inputs"):
    sc.jacfwd(lambda x: x)(np.arange(3))
  with pytest.raises(TypeError, match="jacrev requires real-valued outputs"):
    sc.jacrev(lambda x: x * 1j)(np.ones(2, np.float32))


# ---------------------------------------------------------------------------
# checkpoint / remat


def test_checkpoint_values_and_gradients():
  def block(x):
    return jnp.sin(jnp.sin(x) * 2.0)
  x = np.array([0.3, -0.4], np.float32)
  ref = sc.grad(lambda x: jnp.sum(block(x)))(x)
  for f in (sc.checkpoint(block), sc.remat(block)):
    np.testing.assert_allclose(sc.grad(lambda x: jnp.sum(f(x)))(x), ref, rtol=1e-6)
    np.testing.assert_allclose(sc.jit(sc.grad(lambda x: jnp.sum(f(x))))(x), ref, rtol=1e-6)
    np.testing.assert_allclose(f(x), block(x), rtol=1e-6)


def test_checkpoint_saves_no_residuals():
  def block(x):
    return jnp.sin(jnp.sin(x))
  x = np.array([0.3, -0.4], np.float32)
  plain = sc.make_jaxpr(sc.grad(lambda x: jnp.sum(block(x))))(x)
  remat = sc.make_jaxpr(sc.grad(lambda x: jnp.sum(sc.checkpoint(block)(x))))(x)
  # Without checkpoint the forward sines are computed once and their cosines are residuals;
  # with it the backward call recomputes the inner sine from the input.
  assert _count(plain, "sin") == 2
  assert _count(remat, "sin") == 3
  text = str(remat)
  assert "remat2[" in text and "differentiated=True" in text
  # The linearized function's residuals are the checkpoint's inputs only.
  _, lin, residuals, _ = ad.linearize_flat(
      lambda x: [jnp.sum(sc.checkpoint(block)(x))], [x])
  assert len(residuals) == 1 and residuals[0].shape == (2,)
  _, lin, residuals, _ = ad.linearize_flat(
      lambda x: [jnp.sum(block(x))], [x])
  assert len(residuals) == 2


def test_checkpoint_prevent_cse_barrier_in_lowering():
  f = sc.checkpoint(lambda x: jnp.sin(jnp.sin(x)))
  g = sc.grad(lambda x: jnp.sum(f(x)))
  jaxpr, _ = pe.trace_to_jaxpr(lambda x: [g(x)], [sc.ShapedArray((2,), np.dtype(np.float32))])
  assert "optimization_barrier" in lowering.lower_jaxpr_to_module("m", jaxpr)
  np.testing.assert_allclose(sc.jit(g)(np.ones(2, np.float32)),
                             np.cos(np.sin(1.0)) * np.cos(1.0) * np.ones(2), rtol=1e-6)


def test_checkpoint_policy_error():
  with pytest.raises(TypeError, match="policy must be None or a callable"):
    sc.checkpoint(lambda x: x, policy=3)


def test_check_grads_complex_and_detects_wrong_rules():
  with sc.enable_x64():
    z = np.array([0.3 + 0.2j, 1.2 - 0.5j])
    check_grads(lambda z: jnp.sin(z) * z, (z,), order=2)
    check_grads(lambda z: jnp.abs(z) ** 2, (z,), order=2)
    check_grads(lambda x: jnp.exp(1j * x), (np.array([0.3, 1.2]),), order=2)

    @sc.custom_jvp
    def f(z):
      return jnp.sin(z)
    f.defjvp(lambda p, t: (f(*p), jnp.cos(jnp.conj(p[0])) * t[0]))   # wrong for complex
    with pytest.raises(AssertionError):
      check_grads(f, (z,), order=1, modes=("fwd",))
    with pytest.raises(AssertionError):
      check_grads(f, (z,), order=1, modes=("rev",))
