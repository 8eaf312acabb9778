"""sin and cos of complex numbers lower as JAX's (from the real sin, cos and expm1, not
StableHLO's complex sine/cosine): results equal JAX's bit for bit, eagerly and under jit,
and so do the functions built on them (the holomorphic gradient of a Cholesky loss from
JAX's complex-differentiation guide). The Cholesky JVP's `phi` divides as JAX's does."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp

_PARTS = [0.0, 1e-30, 1e-7, 0.5, 3.0, 30.0, 90.0, 100.0, 1e5, np.inf, np.nan]
_PARTS = _PARTS + [-v for v in _PARTS]
_Z = np.array([complex(a, b) for a in _PARTS for b in _PARTS])


def _same_bits(a, b) -> np.ndarray:
  a, b = np.asarray(a), np.asarray(b)
  if np.iscomplexobj(a):
    real = np.float32 if a.dtype == np.complex64 else np.float64
    a, b = a.view(real), b.view(real)
  return (a == b) | (np.isnan(a) & np.isnan(b))


@pytest.mark.parametrize("name", ["sin", "cos", "tan", "sinh", "cosh", "sinc"])
@pytest.mark.parametrize("x64", [False, True])
def test_complex_trig_bitwise_as_jax(name, x64):
  dt = np.complex128 if x64 else np.complex64
  with sc.enable_x64(x64), jax.enable_x64(x64):
    x = _Z.astype(dt)
    for how in ("eager", "jit"):
      ours = getattr(snp, name) if how == "eager" else sc.jit(getattr(snp, name))
      theirs = getattr(jnp, name) if how == "eager" else jax.jit(getattr(jnp, name))
      got, want = ours(x), theirs(x)
      assert got.dtype == want.dtype
      same = _same_bits(got, want)
      assert same.all(), (how, x[~same.reshape(-1, 2).all(1)][:5])


def test_real_sin_cos_unchanged():
  x = np.linspace(-10, 10, 101, dtype=np.float32)
  for name in ("sin", "cos"):
    assert _same_bits(getattr(snp, name)(x), getattr(jnp, name)(x)).all()


_A = np.array([[5., 2. + 3j, 5j], [2. - 3j, 7., 1. + 7j], [-5j, 1. - 7j, 12.]], np.complex64)


def _cholesky_loss(np_):
  def f(X):
    L = np_.linalg.cholesky(X)
    return np_.sum((L - np_.sin(L)) ** 2)
  return f


def test_holomorphic_cholesky_gradient_as_jax():
  """JAX's complex-differentiation guide: the same digits."""
  theirs = jax.grad(_cholesky_loss(jnp), holomorphic=True)
  ours = sc.grad(_cholesky_loss(snp), holomorphic=True)
  assert _same_bits(ours(_A), theirs(_A)).all()
  assert _same_bits(sc.jit(ours)(_A), jax.jit(theirs)(_A)).all()
  assert repr(ours(_A)) == repr(theirs(_A))
  assert str(sc.make_jaxpr(ours)(_A)) == str(jax.make_jaxpr(theirs)(_A))


def test_batched_cholesky_jvp_values():
  rng = np.random.default_rng(0)
  m = rng.standard_normal((2, 3, 3)).astype(np.float32)
  a = m @ m.transpose(0, 2, 1) + 3 * np.eye(3, dtype=np.float32)
  t = rng.standard_normal((2, 3, 3)).astype(np.float32)
  t = t + t.transpose(0, 2, 1)
  _, ours = sc.jvp(snp.linalg.cholesky, (a,), (t,))
  _, theirs = jax.jvp(jnp.linalg.cholesky, (a,), (t,))
  np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-5, atol=1e-5)
  eps = 1e-3   # central differences of the factor
  fd = (np.linalg.cholesky(a + eps * t) - np.linalg.cholesky(a - eps * t)) / (2 * eps)
  np.testing.assert_allclose(np.asarray(ours), fd, rtol=2e-2, atol=2e-2)
