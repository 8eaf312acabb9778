"""Details found by running JAX 0.10.2's own test files (`fft_test.py`, `lax_control_flow_test.py`,
`scipy_optimize_test.py`, ...) on stagecraft through a scratch harness. JAX is the oracle in each test."""
import jax
import jax.scipy.optimize  # noqa: F401 -- the oracle's submodule
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
import stagecraft.scipy.optimize  # noqa: F401
from _util import assert_same_error, error_of


_message = error_of
_same_error = assert_same_error


# -- jax.numpy.fft: the messages name jax.numpy.fft.<name>, axes shown as given -------------

@pytest.mark.parametrize("name", ["fftn", "ifftn", "rfftn", "irfftn"])
def test_fftn_repeated_axes_message_as_jax(name):
  x = np.ones((2, 3), np.float32)
  _same_error(lambda: getattr(jnp.fft, name)(x, axes=[1, 1]),
              lambda: getattr(jax.numpy.fft, name)(x, axes=[1, 1]))
  _same_error(lambda: getattr(jnp.fft, name)(x, axes=(0, 0)),
              lambda: getattr(jax.numpy.fft, name)(x, axes=(0, 0)))


@pytest.mark.parametrize("name", ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"])
def test_fft_axis_message_as_jax(name):
  x = np.ones((2, 3), np.float32)
  _same_error(lambda: getattr(jnp.fft, name)(x, axis=(0, 1)),
              lambda: getattr(jax.numpy.fft, name)(x, axis=(0, 1)))


@pytest.mark.parametrize("name", ["fft2", "ifft2", "rfft2", "irfft2"])
def test_fft2_axes_message_as_jax(name):
  x = np.ones((2, 3, 4), np.float32)
  _same_error(lambda: getattr(jnp.fft, name)(x, axes=(0, 1, 2)),
              lambda: getattr(jax.numpy.fft, name)(x, axes=(0, 1, 2)))


@pytest.mark.parametrize("name", ["fftfreq", "rfftfreq"])
def test_fftfreq_messages_as_jax(name):
  _same_error(lambda: getattr(jnp.fft, name)(n=[0, 1, 2]),
              lambda: getattr(jax.numpy.fft, name)(n=[0, 1, 2]))
  _same_error(lambda: getattr(jnp.fft, name)(n=4, d=[1, 2]),
              lambda: getattr(jax.numpy.fft, name)(n=4, d=[1, 2]))


def test_promote_dtypes_complex_as_jax():
  from jax._src.numpy.util import promote_dtypes_complex as theirs

  from stagecraft.numpy.util import promote_dtypes_complex as ours
  for args in [(np.ones(2, np.int8),), (np.ones(3, np.float32),), (np.ones(2, np.float16),),
               (np.ones(2, np.complex64), np.ones(2, np.float32)), (np.ones(2, np.int16),
                                                                   np.ones(2, np.float16))]:
    got, want = ours(*args), theirs(*args)
    assert [g.dtype for g in got] == [w.dtype for w in want]
    assert [getattr(g, "weak_type", False) for g in got] == \
        [getattr(w, "weak_type", False) for w in want]


# -- lax control flow (JAX's lax_control_flow_test.py) ------------------------------------

def _both(fn):
  """fn(lax, jnp) run with stagecraft's modules and with JAX's."""
  return (lambda: fn(sc.lax, jnp)), (lambda: fn(jax.lax, jax.numpy))


@pytest.mark.parametrize("unroll", [0, 1, 2, 3, 5, 7, True, False])
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_unroll_values_as_jax(unroll, reverse):
  xs = np.arange(1, 6, dtype=np.float32)

  def run(lax, jnp_):
    body = lambda c, x: (c * 0.5 + x, jnp_.sin(c) + x)
    return lax.scan(body, np.float32(1.0), xs, reverse=reverse, unroll=unroll)
  ours, theirs = _both(run)
  got, want = ours(), theirs()
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6)
  g_grad = sc.grad(lambda c: ours()[0] * c)(1.0)
  w_grad = jax.grad(lambda c: theirs()[0] * c)(1.0)
  np.testing.assert_allclose(g_grad, w_grad, rtol=1e-6)


def test_scan_unroll_errors_as_jax():
  xs = np.arange(5)
  _same_error(*_both(lambda lax, _: lax.scan(lambda c, x: (c, x), 0, xs, unroll=-1)))
  f = lambda n, x: sc.lax.scan(lambda c, z: (c, z), x, (), 10, unroll=n)
  with pytest.raises(sc.errors.ConcretizationTypeError,
                     match="The `unroll` argument to `scan` expects a concrete `int` or "
                           "`bool` value"):
    sc.jit(f)(3, 1.0)
  with pytest.raises(sc.errors.ConcretizationTypeError, match="`unroll` argument"):
    sc.jit(f)(True, 1.0)


@pytest.mark.parametrize("call", [
    lambda lax, _: lax.fori_loop(0, 1, 42, 0),
    lambda lax, _: lax.while_loop(42, 42, 0),
    lambda lax, _: lax.switch(0, [42]),
    lambda lax, _: lax.cond(0, 42, 42),
    lambda lax, _: lax.scan(42, 0, 1),
    lambda lax, _: lax.associative_scan(42, 0),
    lambda lax, _: lax.cond("foo", lambda: 1, lambda: 2),
    lambda lax, _: lax.switch("foo", [lambda: 1]),
    lambda lax, _: lax.scan(lambda c, x: c + x, 0.0, np.ones(3, np.float32)),
    lambda lax, _: lax.while_loop(lambda c: (c, c), lambda c: c, 1.0),
    lambda lax, _: lax.fori_loop(np.int16(0), np.int32(3), lambda i, c: c, 0),
    lambda lax, _: lax.fori_loop(0, 2.5, lambda i, c: c, 0),
    lambda lax, _: lax.switch((1.0, 1.0), [lambda: 1]),
    lambda lax, _: lax.while_loop(lambda c: c * 1.0, lambda c: c, 1.0),
    lambda lax, _: lax.while_loop(lambda c: c < 1.0, lambda c: c, np.zeros(3, np.float32)),
], ids=["fori", "while", "switch", "cond", "scan", "assoc", "cond_str", "switch_str",
        "scan_pair", "while_pytree_pred", "fori_dtypes", "fori_int_float", "switch_tuple",
        "while_float_pred", "while_vector_pred"])
def test_control_flow_argument_errors_as_jax(call):
  t1, m1 = _message(_both(call)[0])
  t2, m2 = _message(_both(call)[1])
  assert t1.__name__ == t2.__name__
  assert m1.split("\n")[0].startswith(m2.split("\n")[0].rstrip(".")), (m1, m2)


def test_fori_loop_float_and_mixed_bounds_as_jax():
  # static float bounds (JAX's int() of them), differentiable through the scan
  func = lambda lax: (lambda x: lax.fori_loop(x, x + 2.0, lambda i, c: c * 2.0, x))
  np.testing.assert_allclose(sc.grad(func(sc.lax))(1.0), jax.grad(func(jax.lax))(1.0))
  np.testing.assert_allclose(sc.linearize(func(sc.lax), 1.0)[0],
                             jax.linearize(func(jax.lax), 1.0)[0])
  # a Python int bound takes the other's signed dtype
  g = lambda lax: lax.fori_loop(0, np.int16(4), lambda i, c: c + i, np.int16(0))
  got, want = g(sc.lax), g(jax.lax)
  assert got.dtype == want.dtype and int(got) == int(want)


def test_lbfgs_complex_under_strict_promotion_as_jax():
  # JAX's scipy_optimize_test: the experimental L-BFGS on a complex x0, with
  # jax_numpy_dtype_promotion='strict' (as JAX's test cases run)
  z0 = np.array([1., 2. - 3.j, 4., -5.j], np.complex64)

  def run(lib):
    f = lambda z: lib.numpy.real(lib.numpy.dot(lib.numpy.conj(z - z0), z - z0))
    with lib.numpy_dtype_promotion("strict"):
      return lib.jit(lambda x0: lib.scipy.optimize.minimize(
          f, x0, method="l-bfgs-experimental-do-not-rely-on-this",
          options=dict(gtol=1e-6)).x)(np.zeros_like(z0))
  got, want = run(sc), run(jax)
  assert got.dtype == want.dtype == np.complex64
  np.testing.assert_allclose(np.asarray(got), z0, atol=1e-5)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)


# -- jax.scipy.signal under jax_numpy_rank_promotion='raise' and strict promotion ---------

@pytest.mark.parametrize("name", ["stft", "istft", "welch", "csd"])
@pytest.mark.parametrize("shape", [(3, 50), (2, 3, 40)])
def test_signal_under_rank_raise_and_strict_as_jax(name, shape):
  import jax.scipy.signal  # noqa: F401 -- the oracle's submodule

  import stagecraft.scipy.signal  # noqa: F401
  x = np.random.RandomState(0).randn(*shape).astype(np.float32)

  def run(lib):
    sig = lib.scipy.signal
    with lib.numpy_rank_promotion("raise"), lib.numpy_dtype_promotion("strict"):
      if name == "stft":
        return sig.stft(x, nperseg=16)
      if name == "istft":
        zxx = np.asarray(jax.scipy.signal.stft(x, nperseg=16)[2])
        return sig.istft(zxx, nperseg=16)
      if name == "welch":
        return sig.welch(x, nperseg=16)
      return sig.csd(x, x[..., ::-1].copy(), nperseg=16)
  got, want = run(sc), run(jax)
  for g, w in zip(got, want):
    assert g.dtype == w.dtype and g.shape == w.shape
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-5, atol=2e-6)
