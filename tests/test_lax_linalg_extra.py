"""The lax.linalg primitives beyond the basic decompositions (eig, schur, hessenberg,
tridiagonal, tridiagonal_solve, ormqr, geqp3 / qr(pivoting=True), lu_pivots_to_permutation,
cholesky_update, symmetric_product, qdwh) and numpy.linalg.eig/eigvals: values against
NumPy/SciPy, properties (reconstructions), dtypes x64 off and on, derivatives against finite
differences, vmap, and the errors (bad input, derivatives JAX does not define, other
platforms)."""
import numpy as np
import pytest
import scipy.linalg as sl

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.interpreters import lowering
from stagecraft.lax import linalg as L
from stagecraft.test_util import check_grads

RNG = np.random.default_rng(7)
REAL = [np.float32, np.float64]
ALL = [np.float32, np.float64, np.complex64, np.complex128]


def rand(shape, dtype):
  x = RNG.standard_normal(shape)
  if np.dtype(dtype).kind == "c":
    x = x + 1j * RNG.standard_normal(shape)
  return x.astype(dtype)


def tol(dtype):
  return 2e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10


def x64_for(dtype):
  """enable_x64 for the 64-bit dtypes (x64 off for the 32-bit ones)."""
  if np.dtype(dtype) in (np.float64, np.complex128):
    return sc.enable_x64()
  return sc.enable_x64(False)


def cplx(dtype):
  return np.complex128 if np.dtype(dtype) in (np.float64, np.complex128) else np.complex64


def _H(x):
  return np.conj(np.swapaxes(x, -1, -2))


# ---------------------------------------------------------------------------
# eig


@pytest.mark.parametrize("dtype", ALL)
def test_eig_reconstructs_and_matches_numpy(dtype):
  a = rand((2, 4, 4), dtype)
  with x64_for(dtype):
    w, vl, vr = (np.asarray(v) for v in L.eig(a))
  assert w.dtype == vl.dtype == vr.dtype == cplx(dtype)
  t = tol(dtype) * 20
  # A V = V diag(w); VL^H A = diag(w) VL^H; unit-norm eigenvectors
  np.testing.assert_allclose(a @ vr, vr * w[..., None, :], atol=t)
  np.testing.assert_allclose(_H(vl) @ a, w[..., :, None] * _H(vl), atol=t)
  np.testing.assert_allclose(np.linalg.norm(vr, axis=-2), 1, atol=t)
  want = np.linalg.eigvals(a.astype(np.complex128))
  dist = np.abs(w[..., :, None] - want[..., None, :])   # every eigenvalue has a match
  assert dist.min(-1).max() < t * 10 and dist.min(-2).max() < t * 10
  # the largest-magnitude component of each eigenvector is real (geev's normalisation)
  k = np.argmax(np.abs(vr), axis=-2)
  np.testing.assert_allclose(np.take_along_axis(vr, k[..., None, :], -2).imag, 0, atol=t)


def test_eig_output_selection_and_numpy_api():
  a = rand((3, 3), np.float32)
  assert len(L.eig(a, compute_left_eigenvectors=False)) == 2
  assert len(L.eig(a, compute_left_eigenvectors=False, compute_right_eigenvectors=False)) == 1
  res = jnp.linalg.eig(a)
  assert type(res).__name__ == "EigResult" and res.eigenvalues.dtype == np.complex64
  np.testing.assert_allclose(np.asarray(res.eigenvectors) @ np.diag(np.asarray(res[0])),
                             a @ np.asarray(res[1]), atol=1e-4)
  ints = np.int32([[2, 1], [1, 3]])
  np.testing.assert_allclose(np.sort(np.asarray(jnp.linalg.eigvals(ints)).real),
                             np.sort(np.linalg.eigvals(ints)), rtol=1e-5)
  assert jnp.linalg.eigvals(ints).dtype == np.complex64
  with sc.enable_x64():
    assert jnp.linalg.eigvals(ints).dtype == np.complex64   # as JAX: int32 -> float32 kinds
    w, v = jnp.linalg.eig(np.diag([1.0, 2.0]))
    np.testing.assert_allclose(np.asarray(w), [1, 2])
  assert jnp.linalg.eigvals(np.zeros((0, 0), np.float32)).shape == (0,)


def test_eig_matches_jax_jit_and_vmap():
  a = rand((3, 4, 4), np.float64)
  with sc.enable_x64():
    eager = jnp.linalg.eigvals(a)
    staged = sc.jit(jnp.linalg.eigvals)(a)
    mapped = sc.vmap(jnp.linalg.eigvals)(a)
  for x in (staged, mapped):
    np.testing.assert_allclose(np.asarray(x), np.asarray(eager), atol=1e-12)


def test_eig_gradients():
  a = rand((3, 3), np.float64)
  with sc.enable_x64():
    check_grads(lambda x: jnp.linalg.eigvals(x), (a,), order=1, modes=("fwd", "rev"))
    check_grads(lambda x: L.eig(x, enable_eigvec_derivs=True), (a,), order=1,
                modes=("fwd", "rev"))
    c = rand((3, 3), np.complex128)
    check_grads(lambda x: L.eig(x, compute_left_eigenvectors=False,
                                enable_eigvec_derivs=True)[1], (c,), order=1, modes=("fwd",))
  with pytest.raises(NotImplementedError, match="enable_eigvec_derivs=True"):
    sc.jvp(lambda x: jnp.linalg.eig(x)[1], (a.astype(np.float32),),
           (a.astype(np.float32),))


def test_eig_errors():
  with pytest.raises(ValueError, match="square"):
    L.eig(np.ones((2, 3), np.float32))
  with pytest.raises(TypeError, match="does not accept dtype int32"):
    L.eig(np.ones((2, 2), np.int32))
  with pytest.raises(ValueError, match=r"shape \[..., n, n\]"):
    jnp.linalg.eig(np.ones((2, 3)))
  with pytest.raises(ValueError, match="Only the lapack implementation"):
    L.eig(np.eye(2, dtype=np.float32), implementation=L.EigImplementation.MAGMA)


# ---------------------------------------------------------------------------
# schur, hessenberg, tridiagonal


@pytest.mark.parametrize("dtype", ALL)
def test_schur_and_hessenberg_reconstruct(dtype):
  a = rand((2, 4, 4), dtype)
  t = tol(dtype) * 20
  with x64_for(dtype):
    T, Q = (np.asarray(v) for v in L.schur(a))
    T_only, = L.schur(a, compute_schur_vectors=False)
    h, taus = (np.asarray(v) for v in L.hessenberg(a))
  assert T.dtype == Q.dtype == np.dtype(dtype)
  np.testing.assert_allclose(Q @ T @ _H(Q), a, atol=t)
  np.testing.assert_allclose(_H(Q) @ Q, np.broadcast_to(np.eye(4), Q.shape), atol=t)
  np.testing.assert_allclose(np.asarray(T_only), T, atol=t)
  # strictly below the first subdiagonal: zero (and zero on it for complex input)
  assert np.abs(np.tril(T, -2)).max() == 0
  if np.dtype(dtype).kind == "c":
    assert np.abs(np.tril(T, -1)).max() == 0
  assert taus.shape == (2, 3)
  for i in range(2):
    want = sl.hessenberg(a[i].astype(np.complex128 if np.dtype(dtype).kind == "c" else
                                      np.float64))
    np.testing.assert_allclose(np.abs(np.triu(h[i], -1)), np.abs(want), atol=t * 5)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
@pytest.mark.parametrize("lower", [True, False])
def test_tridiagonal(dtype, lower):
  a = rand((5, 5), dtype)
  a = a + _H(a)
  with x64_for(dtype):
    arr, d, e, taus = (np.asarray(v) for v in L.tridiagonal(a, lower=lower))
  rdt = np.float32 if np.dtype(dtype) == np.float32 else np.float64
  assert d.dtype == e.dtype == rdt and taus.dtype == np.dtype(dtype)
  assert (arr.shape, d.shape, e.shape, taus.shape) == ((5, 5), (5,), (4,), (4,))
  np.testing.assert_allclose(np.diagonal(arr).real, d, atol=tol(dtype))
  off = np.diagonal(arr, -1 if lower else 1)
  np.testing.assert_allclose(np.abs(off), np.abs(e), atol=tol(dtype))
  np.testing.assert_allclose(sl.eigvalsh_tridiagonal(d.astype(np.float64), e.astype(np.float64)),
                             np.linalg.eigvalsh(a), atol=tol(dtype) * 50)


def test_not_differentiable_and_errors():
  a = rand((3, 3), np.float32)
  for f in (lambda x: L.schur(x)[0], lambda x: L.hessenberg(x)[0],
            lambda x: L.tridiagonal(x)[1]):
    with pytest.raises(NotImplementedError, match="Differentiation rule for"):
      sc.jvp(f, (a,), (a,))
  with pytest.raises(NotImplementedError, match="sort feature"):
    L.schur(a, sort_eig_vals=True)
  with pytest.raises(ValueError, match="non-empty square"):
    L.tridiagonal(np.zeros((0, 0), np.float32))
  with pytest.raises(ValueError, match="square"):
    L.hessenberg(np.ones((2, 3), np.float32))


def test_cpu_only_primitives_name_themselves_on_other_platforms():
  a = rand((3, 3), np.float32)
  d = rand((3,), np.float32)
  # (tridiagonal, tridiagonal_solve, ormqr, eig and geqp3 (pivoted qr) have GPU kernels:
  # tests/test_linalg_gpu.py; schur and hessenberg are CPU-only in JAX too)
  cases = {"schur": lambda: L.schur(a), "hessenberg": lambda: L.hessenberg(a)}
  for name, f in cases.items():
    jaxpr = sc.make_jaxpr(f)().jaxpr
    module = lowering.ModuleContext("f", platform="gpu")
    with pytest.raises(NotImplementedError, match=rf"lax\.linalg\.{name} is implemented on "
                                                  r"CPU only .*'gpu'"):
      lowering.lower_jaxpr_to_module("f", jaxpr, module=module)


# ---------------------------------------------------------------------------
# tridiagonal_solve


def _tri_dense(dl, d, du):
  return np.diag(d) + np.diag(dl[1:], -1) + np.diag(du[:-1], 1)


@pytest.mark.parametrize("dtype", ALL)
def test_tridiagonal_solve(dtype):
  m = 6
  dl, du = rand((3, m), dtype), rand((3, m), dtype)
  d = rand((3, m), dtype) + 5
  b = rand((3, m, 2), dtype)
  with x64_for(dtype):
    x = np.asarray(L.tridiagonal_solve(dl, d, du, b))
    xp = np.asarray(L.tridiagonal_solve(dl, d, du, b, perturb_singular=True))
  assert x.dtype == np.dtype(dtype)
  for i in range(3):
    want = np.linalg.solve(_tri_dense(dl[i], d[i], du[i]).astype(np.complex128), b[i])
    np.testing.assert_allclose(x[i], want, atol=tol(dtype) * 10)
    np.testing.assert_allclose(xp[i], want, atol=tol(dtype) * 10)


def test_tridiagonal_solve_singular_grad_and_vmap():
  m = 4
  dl, d, du = rand((m,), np.float64), rand((m,), np.float64) + 4, rand((m,), np.float64)
  b = rand((m, 2), np.float64)
  with sc.enable_x64():
    zero = np.zeros(m)
    assert np.isnan(np.asarray(L.tridiagonal_solve(zero, zero, zero, b))).all()
    assert np.isfinite(np.asarray(L.tridiagonal_solve(zero + 1, zero + 1, zero + 1, b,
                                                      perturb_singular=True))).all()
    check_grads(lambda *v: L.tridiagonal_solve(*v), (dl, d, du, b), order=1,
                modes=("fwd", "rev"))
    bs = rand((5, m, 2), np.float64)
    only_b = sc.vmap(lambda v: L.tridiagonal_solve(dl, d, du, v))(bs)
    ds = rand((5, m), np.float64) + 4
    both = sc.vmap(lambda dd, v: L.tridiagonal_solve(dl, dd, du, v), in_axes=(0, 2),
                   out_axes=1)(ds, np.moveaxis(bs, 0, 2))
  for i in range(5):
    np.testing.assert_allclose(np.asarray(only_b)[i],
                               np.linalg.solve(_tri_dense(dl, d, du), bs[i]), atol=1e-10)
    np.testing.assert_allclose(np.asarray(both)[:, i],
                               np.linalg.solve(_tri_dense(dl, ds[i], du), bs[i]), atol=1e-10)
  with pytest.raises(TypeError, match="same shape"):
    L.tridiagonal_solve(dl[:3], d, du, b)
  with pytest.raises(TypeError, match="leading ndim-1"):
    L.tridiagonal_solve(dl, d, du, b[:3])


# ---------------------------------------------------------------------------
# qr(pivoting=True), geqp3, ormqr, householder_product, lu_pivots_to_permutation


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
@pytest.mark.parametrize("shape", [(5, 3), (3, 5)])
def test_qr_pivoting(dtype, shape):
  a = rand(shape, dtype)
  with x64_for(dtype):
    q, r, p = (np.asarray(v) for v in L.qr(a, pivoting=True, full_matrices=False))
    q_full, r_full, p_full = (np.asarray(v) for v in L.qr(a, pivoting=True))
  qs, rs, ps = sl.qr(a, pivoting=True, mode="economic")
  np.testing.assert_array_equal(p, ps)
  np.testing.assert_array_equal(p_full, ps)
  assert p.dtype == np.int32
  np.testing.assert_allclose(q @ r, a[:, p], atol=tol(dtype) * 10)
  np.testing.assert_allclose(q_full @ r_full, a[:, p], atol=tol(dtype) * 10)
  np.testing.assert_allclose(np.abs(r), np.abs(rs), atol=tol(dtype) * 10)
  assert np.all(np.diff(np.abs(np.diagonal(r))) <= 1e-5)


def test_qr_pivoting_grad_and_batch():
  a = rand((2, 4, 3), np.float64)
  with sc.enable_x64():
    check_grads(lambda x: L.qr(x, pivoting=True, full_matrices=False)[:2], (a[0],), order=1,
                modes=("fwd", "rev"))
    q, r, p = (np.asarray(v) for v in sc.vmap(lambda x: L.qr(x, pivoting=True))(a))
  for i in range(2):
    np.testing.assert_allclose(q[i] @ r[i], a[i][:, p[i]], atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
@pytest.mark.parametrize("left,transpose", [(True, False), (True, True), (False, False),
                                            (False, True)])
def test_ormqr(dtype, left, transpose):
  a = rand((2, 5, 3), dtype)
  c = rand((2, 5, 4) if left else (2, 4, 5), dtype)
  with x64_for(dtype):
    h, taus = L.geqrf(a)
    got = np.asarray(L.ormqr(h, taus, c, left=left, transpose=transpose))
    with pytest.raises(ValueError, match="same number of"):
      L.ormqr(h, taus, c[..., :3, :3], left=left)
    with pytest.raises(NotImplementedError, match="Differentiation rule for 'ormqr'"):
      sc.jvp(lambda v: L.ormqr(h, taus, v), (c,), (c,))
  q = np.stack([np.linalg.qr(x, "complete")[0] for x in a.astype(np.complex128)])
  q = _H(q) if transpose else q
  want = q @ c if left else c @ q
  np.testing.assert_allclose(got, want, atol=tol(dtype) * 10)


def test_lu_pivots_to_permutation_primitive():
  piv = np.int32([[2, 2, 3], [0, 1, 2]])
  perm = np.asarray(L.lu_pivots_to_permutation(piv, 5))
  np.testing.assert_array_equal(perm, [[2, 0, 3, 1, 4], [0, 1, 2, 3, 4]])
  assert "lu_pivots_to_permutation[permutation_size=5]" in str(
      sc.make_jaxpr(lambda p: L.lu_pivots_to_permutation(p, 5))(piv[0]))
  np.testing.assert_array_equal(
      np.asarray(sc.vmap(lambda p: L.lu_pivots_to_permutation(p, 5))(piv)), perm)
  with pytest.raises(ValueError, match="has to exceed"):
    L.lu_pivots_to_permutation(piv, 2)
  with pytest.raises(TypeError, match="int32"):
    L.lu_pivots_to_permutation(piv.astype(np.float32), 5)


# ---------------------------------------------------------------------------
# cholesky_update, symmetric_product


@pytest.mark.parametrize("dtype", REAL)
def test_cholesky_update(dtype):
  a = rand((2, 4, 4), dtype)
  spd_ = a @ np.swapaxes(a, -1, -2) + 4 * np.eye(4)
  r = np.linalg.cholesky(spd_.astype(np.float64)).swapaxes(-1, -2).astype(dtype)
  w = rand((2, 4), dtype)
  with x64_for(dtype):
    r2 = np.asarray(L.cholesky_update(r, w))
  assert r2.dtype == np.dtype(dtype)
  want = np.linalg.cholesky(spd_ + w[..., :, None] * w[..., None, :]).swapaxes(-1, -2)
  np.testing.assert_allclose(r2, want, atol=tol(dtype) * 20)
  if dtype == np.float64:
    with sc.enable_x64():
      check_grads(L.cholesky_update, (r[0, :2, :2], w[0, :2]), order=1, modes=("fwd", "rev"))
  with pytest.raises(ValueError, match="Rank-1 update"):
    L.cholesky_update(r, w[..., :3])
  with pytest.raises(TypeError, match="float32 or float64"):
    L.cholesky_update(r.astype(np.complex64), w.astype(np.complex64))


def test_symmetric_product():
  a, c = rand((2, 3, 4), np.float64), rand((2, 3, 3), np.float64)
  c = c + np.swapaxes(c, -1, -2)
  with sc.enable_x64():
    got = L.symmetric_product(a, c, alpha=2.0, beta=0.5)
    sym = L.symmetric_product(a, np.triu(c), alpha=1.0, beta=1.0, symmetrize_output=True)
    check_grads(lambda x, y: L.symmetric_product(x, y, alpha=2.0, beta=0.5), (a, c), order=1,
                modes=("fwd", "rev"))
  np.testing.assert_allclose(np.asarray(got), 2 * a @ np.swapaxes(a, -1, -2) + 0.5 * c)
  lo = np.tril(a @ np.swapaxes(a, -1, -2) + np.triu(c))
  np.testing.assert_allclose(np.asarray(sym), lo + np.swapaxes(np.tril(lo, -1), -1, -2))
  with pytest.raises(ValueError, match="symmetric_product expects"):
    L.symmetric_product(a, c[..., :2, :2])


# ---------------------------------------------------------------------------
# qdwh


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
def test_qdwh_matches_scipy_polar(dtype):
  a = rand((6, 4), dtype)
  with x64_for(dtype):
    u, h, k, ok = L.qdwh(a)
  up, hp = sl.polar(a.astype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64))
  t = 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10
  np.testing.assert_allclose(np.asarray(u), up, atol=t)
  np.testing.assert_allclose(np.asarray(h), hp, atol=t * 10)
  assert bool(ok) and 0 < int(k) <= 10
  assert np.asarray(u).dtype == np.dtype(dtype) and np.asarray(k).dtype == np.int32


def test_qdwh_errors_and_iteration_limit():
  a = rand((4, 4), np.float32) * 1e3
  _, _, k, ok = L.qdwh(a, max_iterations=1)
  assert int(k) == 1 and not bool(ok)
  with pytest.raises(ValueError, match="M >= N"):
    L.qdwh(np.ones((2, 3), np.float32))
  with pytest.raises(ValueError, match="rank 2"):
    L.qdwh(np.ones((2, 3, 3), np.float32))


# ---------------------------------------------------------------------------
# The enums and the accepted options of eigh and svd


def test_names_and_signatures_match_jax():
  import inspect

  import jax.lax.linalg as jl
  names = {n for n in dir(jl) if not n.startswith("_")}
  assert names <= set(L.__all__)
  for n in sorted(names):
    f = getattr(jl, n)
    if callable(f) and not isinstance(f, type) and not n.endswith("_p"):
      assert (list(inspect.signature(f).parameters)
              == list(inspect.signature(getattr(L, n)).parameters)), n


def test_enums_and_options():
  assert L.EigImplementation.LAPACK.value == "lapack"
  assert [e.value for e in L.EighImplementation] == ["qr", "jacobi", "qdwh"]
  assert L.SvdAlgorithm.DIVIDE_AND_CONQUER.value == "divide_and_conquer"
  a = rand((3, 3), np.float32)
  a = a + a.T
  v, w = L.eigh(a, implementation=L.EighImplementation.QR)
  np.testing.assert_allclose(np.asarray(w), np.linalg.eigvalsh(a), atol=1e-4)
  s = L.svd(a, compute_uv=False, algorithm=L.SvdAlgorithm.QR)
  np.testing.assert_allclose(np.asarray(s), np.linalg.svd(a, compute_uv=False), atol=1e-4)
  # JAX's messages (raised when lowered for CPU).
  with pytest.raises(NotImplementedError, match="QDWH implementation is only supported on TPU"):
    L.eigh(a, implementation=L.EighImplementation.QDWH)
  if sc.default_backend() == "cpu":   # (cuSOLVER has Jacobi kernels: tests/test_linalg_gpu.py)
    with pytest.raises(NotImplementedError, match="Jacobi implementation is not supported on "):
      L.eigh(a, implementation=L.EighImplementation.JACOBI)
    with pytest.raises(NotImplementedError, match="Jacobi and Polar algorithms are not "):
      L.svd(a, algorithm=L.SvdAlgorithm.JACOBI)
  # SvdAlgorithm.QR is LAPACK's gesvd on CPU (gesdd otherwise), as in JAX.
  u, s, vt = L.svd(a, algorithm=L.SvdAlgorithm.QR)
  np.testing.assert_allclose(np.asarray(u * s) @ np.asarray(vt), a, atol=1e-4)
  assert sc.default_backend() != "cpu" or "lapack_sgesvd_ffi" in sc.jit(
      lambda x: L.svd(x, algorithm=L.SvdAlgorithm.QR)).lower(a).as_text()
