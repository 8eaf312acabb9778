"""`stagecraft.experimental.sparse.linalg.lobpcg_standard` against JAX 0.10.2's (the oracle,
run in the same test) and against `numpy.linalg.eigh`: eigenvalues, output dtypes and
shapes, iteration counts, eager and under `jit`, float32 and float64, and the argument
errors (types and messages)."""
import numpy as np
import pytest

import jax
import jax.numpy as jjnp
from jax.experimental.sparse import linalg as jax_linalg

import stagecraft
import stagecraft.numpy as snp
from stagecraft.experimental.sparse import linalg as sc_linalg


def _spd(n, spectrum, seed):
  """A dense symmetric matrix with the given eigenvalues and random eigenvectors."""
  q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((n, n)))
  return (q * np.asarray(spectrum)) @ q.T


def _start(n, k, seed):
  return np.random.default_rng(seed + 100).standard_normal((n, k))


def _top_k(a, k):
  return np.linalg.eigvalsh(np.asarray(a, np.float64))[::-1][:k]


# (name, matrix, k, m, tol, eigenvalue tolerance relative to the largest): small problems.
# With tol=1e-5 the residual test stops at |r| ~ 1e-5 * 10 * n * 2 * 10, and the Ritz value
# is then off by about |r|^2 / gap (~1e-3 here): hence that case's looser tolerance.
_N = 40
CASES = [
    ("diag", np.diag(np.arange(1.0, _N + 1.0)), 3, 100, None, 1e-5),
    ("random_spd", _spd(_N, np.geomspace(1.0, 100.0, _N), seed=0), 3, 100, None, 1e-5),
    ("random_spd_k1", _spd(30, np.linspace(1.0, 10.0, 30), seed=1), 1, 50, 1e-5, 1e-3),
]


def _check_against(out, ref, a, k, dtype, eig_tol):
  theta, u, i = out
  jtheta, ju, ji = ref
  # Same dtypes and shapes as JAX's outputs.
  assert theta.shape == jtheta.shape == (k,)
  assert u.shape == ju.shape == (a.shape[0], k)
  assert theta.dtype == jtheta.dtype == dtype
  assert u.dtype == ju.dtype == dtype
  # int32, or int64 under x64 (the counter starts as a weak Python 0), as in JAX.
  assert np.asarray(i).dtype == np.asarray(ji).dtype
  assert np.shape(i) == np.shape(ji) == ()
  theta, u = np.asarray(theta, np.float64), np.asarray(u, np.float64)
  exact = _top_k(a, k)
  scale = exact[0]
  np.testing.assert_allclose(theta, exact, atol=eig_tol * scale)
  np.testing.assert_allclose(theta, np.asarray(jtheta, np.float64), atol=eig_tol * scale)
  # Eigenvectors: orthonormal, and eigenpairs of `a` (up to sign, so checked by residual).
  np.testing.assert_allclose(u.T @ u, np.eye(k), atol=100 * eig_tol)
  resid = np.linalg.norm(a @ u - u * theta, axis=0) / scale
  assert np.all(resid < np.sqrt(eig_tol) * 10), resid
  # Iteration counts: the algorithm is JAX's step for step, and on every case here the
  # counts agree exactly (asserted by the callers). In general a rounding difference
  # between the two compiled programs could flip a borderline convergence test and move
  # the count by a step, so the shared check allows a small range.
  assert abs(int(i) - int(ji)) <= 2, (int(i), int(ji))
  return int(i), int(ji)


@pytest.mark.parametrize("name,a,k,m,tol,eig_tol", CASES, ids=[c[0] for c in CASES])
def test_matrix_float32(name, a, k, m, tol, eig_tol):
  n = a.shape[0]
  a32, x32 = a.astype(np.float32), _start(n, k, 0).astype(np.float32)
  out = sc_linalg.lobpcg_standard(snp.asarray(a32), snp.asarray(x32), m, tol)
  ref = jax_linalg.lobpcg_standard(jjnp.asarray(a32), jjnp.asarray(x32), m, tol)
  i, ji = _check_against(out, ref, a, k, np.float32, eig_tol=eig_tol)
  # Measured: bit-identical to JAX's eigenvalues on these cases (same steps, same XLA ops
  # on the same backend); asserted to a few ulps so a harmless change of lowering passes.
  np.testing.assert_allclose(np.asarray(out[0]), np.asarray(ref[0]), rtol=1e-6)
  assert i == ji   # measured: identical counts on these cases
  assert 0 < i < m


def test_matrix_float64():
  name, a, k, m, tol, _ = CASES[1]
  n = a.shape[0]
  x = _start(n, k, 0)
  with stagecraft.enable_x64():
    out = sc_linalg.lobpcg_standard(snp.asarray(a), snp.asarray(x), m, tol)
  with jax.enable_x64(True):
    ref = jax_linalg.lobpcg_standard(jjnp.asarray(a), jjnp.asarray(x), m, tol)
    ref = tuple(np.asarray(r) for r in ref)
  i, ji = _check_against(out, ref, a, k, np.float64, eig_tol=1e-12)
  assert i == ji


def test_numpy_matrix_operand():
  # A NumPy matrix takes the matrix path (as JAX's does).
  name, a, k, m, tol, _ = CASES[0]
  a32, x32 = a.astype(np.float32), _start(a.shape[0], k, 0).astype(np.float32)
  out = sc_linalg.lobpcg_standard(a32, x32, m, tol)
  ref = jax_linalg.lobpcg_standard(a32, x32, m, tol)
  _check_against(out, ref, a, k, np.float32, eig_tol=1e-5)


# A callable operator: the matrix-free action of a ring (cyclic) Laplacian plus a shift,
# written once for each library; its top eigenvalues are 2 + 2 - 2 cos(2 pi j / n).
_RING_N = 48


def _ring_dense(n):
  a = 4.0 * np.eye(n) - np.roll(np.eye(n), 1, axis=0) - np.roll(np.eye(n), -1, axis=0)
  return a + np.diag(np.linspace(0.0, 1.0, n))   # split the degenerate pairs


_RING_DIAG = np.linspace(0.0, 1.0, _RING_N).astype(np.float32)


def _sc_ring(x):
  return 4.0 * x - snp.roll(x, 1, axis=0) - snp.roll(x, -1, axis=0) + \
      snp.asarray(_RING_DIAG)[:, None] * x


def _jax_ring(x):
  return 4.0 * x - jjnp.roll(x, 1, axis=0) - jjnp.roll(x, -1, axis=0) + \
      jjnp.asarray(_RING_DIAG)[:, None] * x


def test_callable_operator():
  k, m = 2, 60
  a = _ring_dense(_RING_N)
  x = _start(_RING_N, k, 3).astype(np.float32)
  out = sc_linalg.lobpcg_standard(_sc_ring, snp.asarray(x), m)
  ref = jax_linalg.lobpcg_standard(_jax_ring, jjnp.asarray(x), m)
  # float32 elementwise action (not a HIGHEST dot): a looser eigenvalue tolerance.
  _check_against(out, ref, a.astype(np.float32).astype(np.float64), k, np.float32,
                 eig_tol=1e-4)


def test_under_jit_and_zero_tol():
  # Under jit the matrix is a tracer (still the matrix path); tol=0 never converges, so
  # exactly m iterations run, as in JAX.
  name, a, k, _, _, _ = CASES[1]
  a32, x32 = a.astype(np.float32), _start(a.shape[0], k, 0).astype(np.float32)
  m = 30
  f = stagecraft.jit(lambda a, x: sc_linalg.lobpcg_standard(a, x, m, 0.0))
  jf = jax.jit(lambda a, x: jax_linalg.lobpcg_standard(a, x, m, 0.0))
  out = f(snp.asarray(a32), snp.asarray(x32))
  ref = jf(jjnp.asarray(a32), jjnp.asarray(x32))
  i, ji = _check_against(out, ref, a, k, np.float32, eig_tol=1e-5)
  assert i == ji == m


def _errors(fn, a, x):
  with pytest.raises(Exception) as info:
    fn(a, x)
  return type(info.value), str(info.value)


@pytest.mark.parametrize("case", ["k_zero", "k_too_large", "dtype", "shape"])
def test_argument_errors(case):
  n = 30
  a = np.eye(n, dtype=np.float32)
  if case == "k_zero":
    x = np.zeros((n, 0), np.float32)
  elif case == "k_too_large":
    x = np.ones((n, 6), np.float32)   # 5 * 6 >= 30
  elif case == "dtype":
    x = np.ones((n, 2), np.float32)
  else:
    x = np.ones((n, 2), np.float32)

  if case == "dtype":
    sc_a = lambda v: snp.ones_like(v, dtype=snp.int32)
    jax_a = lambda v: jjnp.ones_like(v, dtype=jjnp.int32)
  elif case == "shape":
    sc_a = lambda v: snp.ones((n + 1, 1), snp.float32)
    jax_a = lambda v: jjnp.ones((n + 1, 1), jjnp.float32)
  else:
    sc_a, jax_a = snp.asarray(a), jjnp.asarray(a)
  got = _errors(sc_linalg.lobpcg_standard, sc_a, snp.asarray(x))
  want = _errors(jax_linalg.lobpcg_standard, jax_a, jjnp.asarray(x))
  assert got == want
  assert got[0] is ValueError
