"""stagecraft.scipy.linalg against scipy.linalg (values, x64 off and on), JAX's signatures
and dtypes, properties of the decompositions, derivatives against finite differences where
JAX differentiates, batching, and the error paths."""
import inspect
import warnings

import jax.scipy.linalg as jsl
import numpy as np
import pytest
import scipy.linalg as sl

import stagecraft as sc
import stagecraft.numpy as jnp
import stagecraft.scipy.linalg as L
from stagecraft.test_util import check_grads

RNG = np.random.default_rng(3)


def rand(shape, dtype=np.float64):
  x = RNG.standard_normal(shape)
  if np.dtype(dtype).kind == "c":
    x = x + 1j * RNG.standard_normal(shape)
  return x.astype(dtype)


def spd(n, dtype=np.float64, batch=()):
  a = rand((*batch, n, n), dtype)
  return (a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)).astype(dtype)


def x64_for(dtype):
  return sc.enable_x64(np.dtype(dtype) in (np.float64, np.complex128))


def tol(dtype):
  return 5e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-9


def close(got, want, dtype, scale=1.0):
  got = np.asarray(got)
  assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
  np.testing.assert_allclose(got, want, atol=tol(dtype) * scale, rtol=tol(dtype) * scale)


def _H(x):
  return np.conj(np.swapaxes(x, -1, -2))


def test_public_names_and_signatures_match_jax():
  jax_names = sorted(n for n in dir(jsl) if not n.startswith("_"))
  assert sorted(L.__all__) == jax_names
  for name in jax_names:
    ours = inspect.signature(getattr(L, name)).parameters
    theirs = inspect.signature(getattr(jsl, name)).parameters
    assert list(ours) == list(theirs), name
    for p in theirs:
      assert ours[p].kind == theirs[p].kind, (name, p)
      if theirs[p].default is not inspect.Parameter.empty:
        assert ours[p].default == theirs[p].default, (name, p)


# ---------------------------------------------------------------------------
# Values against SciPy, float32/complex64 with x64 off, float64/complex128 with x64 on.

# x64 off with a real dtype, x64 on with a complex one (each function also sees the other
# kinds of dtype in some test).
DTYPES = [np.float32, np.complex128]


@pytest.mark.parametrize("dtype", DTYPES)
def test_cholesky_family(dtype):
  a, b = spd(4, dtype), rand((4, 2), dtype)
  with x64_for(dtype):
    for lower in (False, True):
      close(L.cholesky(a, lower=lower), sl.cholesky(a, lower=lower), dtype)
      c = L.cho_factor(a, lower=lower)
      assert c[1] is lower
      close(L.cho_solve(c, b), sl.cho_solve(sl.cho_factor(a, lower=lower), b), dtype, 10)
      close(L.cho_solve(c, b[:, 0]), np.linalg.solve(a, b[:, 0]), dtype, 10)
    close(L.solve(a, b, assume_a="pos"), sl.solve(a, b, assume_a="pos"), dtype, 10)


@pytest.mark.parametrize("dtype", DTYPES)
def test_lu_family_and_solves(dtype):
  a, b = rand((4, 4), dtype), rand((4, 3), dtype)
  with x64_for(dtype):
    lu, piv = L.lu_factor(a)
    lus, pivs = sl.lu_factor(a)
    close(lu, lus, dtype, 10)
    np.testing.assert_array_equal(np.asarray(piv), pivs)
    for trans in (0, 1, 2):
      close(L.lu_solve((lu, piv), b, trans=trans), sl.lu_solve((lus, pivs), b, trans=trans),
            dtype, 100)
    for shape in [(4, 4), (4, 2), (2, 4)]:
      for got, want in zip(L.lu(a[:shape[0], :shape[1]]), sl.lu(a[:shape[0], :shape[1]])):
        close(got, want, dtype, 10)
    for got, want in zip(L.lu(a, permute_l=True), sl.lu(a, permute_l=True)):
      close(got, want, dtype, 10)
    close(L.solve(a, b), sl.solve(a, b), dtype, 100)
    close(L.inv(a), sl.inv(a), dtype, 100)
    close(L.det(a), sl.det(a), dtype, 10)
    t = np.triu(a) + 3 * np.eye(4)
    for trans in (0, 1, 2, "N", "T", "C"):
      close(L.solve_triangular(t, b, trans=trans), sl.solve_triangular(t, b, trans=trans),
            dtype, 10)
    close(L.solve_triangular(a, b[:, 0], lower=True, unit_diagonal=True),
          sl.solve_triangular(a, b[:, 0], lower=True, unit_diagonal=True), dtype, 10)


@pytest.mark.parametrize("dtype", DTYPES)
def test_decompositions(dtype):
  a = rand((5, 3), dtype)
  sq = rand((4, 4), dtype)
  herm = sq + _H(sq)
  with x64_for(dtype):
    close(L.svd(a, compute_uv=False), sl.svd(a, compute_uv=False), np.float32 if
          np.dtype(dtype) in (np.float32, np.complex64) else np.float64)
    u, s, vh = L.svd(a, full_matrices=False)
    np.testing.assert_allclose(np.asarray(u) * np.asarray(s) @ np.asarray(vh), a,
                               atol=tol(dtype) * 10)
    for mode in ("full", "economic"):
      q, r = (np.asarray(v) for v in L.qr(a, mode=mode))
      qs, rs = sl.qr(a, mode=mode)
      np.testing.assert_allclose(np.abs(q), np.abs(qs), atol=tol(dtype) * 10)
      close(np.abs(r), np.abs(rs), np.abs(r).dtype, 10)
    r, p = L.qr(a, mode="r", pivoting=True)
    rs, ps = sl.qr(a, mode="r", pivoting=True)
    np.testing.assert_array_equal(np.asarray(p), ps)
    np.testing.assert_allclose(np.abs(np.asarray(r)), np.abs(rs), atol=tol(dtype) * 10)
    w = L.eigh(herm, eigvals_only=True)
    close(w, sl.eigh(herm, eigvals_only=True), np.asarray(w).dtype, 10)
    w, v = (np.asarray(x) for x in L.eigh(herm, lower=False))
    np.testing.assert_allclose(herm @ v, v * w, atol=tol(dtype) * 20)
    h, q = (np.asarray(x) for x in L.hessenberg(sq, calc_q=True))
    np.testing.assert_allclose(q @ h @ _H(q), sq, atol=tol(dtype) * 10)
    np.testing.assert_allclose(np.tril(h, -2), 0)
    close(np.abs(h), np.abs(sl.hessenberg(sq)), np.abs(h).dtype, 10)
    for output in ("real", "complex"):
      t, z = (np.asarray(x) for x in L.schur(sq, output=output))
      np.testing.assert_allclose(z @ t @ _H(z), sq, atol=tol(dtype) * 10)
      if output == "complex" or np.dtype(dtype).kind == "c":
        assert t.dtype.kind == "c"
        np.testing.assert_allclose(np.tril(t, -1), 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_generalized_eigh(dtype):
  a, b = rand((4, 4), dtype), spd(4, dtype)
  a = a + a.T
  with x64_for(dtype):
    for type_ in (1, 2, 3):
      w, v = L.eigh(a, b, type=type_)
      ws, vs = sl.eigh(a, b, type=type_)
      close(w, ws, dtype, 50)
      np.testing.assert_allclose(np.abs(np.asarray(v)), np.abs(vs), atol=tol(dtype) * 100)
    close(L.eigh(a, b, lower=False, eigvals_only=True), sl.eigh(a, b, eigvals_only=True),
          dtype, 50)


def test_rsf2csf_and_matrix_functions():
  a = rand((4, 4))
  with sc.enable_x64():
    T, Z = sl.schur(a)
    t, z = (np.asarray(x) for x in L.rsf2csf(T, Z))
    np.testing.assert_allclose(np.tril(t, -1), 0)
    np.testing.assert_allclose(z @ t @ _H(z), a, atol=1e-12)
    np.testing.assert_allclose(_H(z) @ z, np.eye(4), atol=1e-12)
    tb, zb = L.rsf2csf(np.stack([T, T]), Z)   # broadcast batch
    np.testing.assert_allclose(np.asarray(tb)[1], t, atol=1e-12)
    close(L.sqrtm(a), sl.sqrtm(a.astype(complex)), np.complex128, 1e3)
    s = spd(4)
    close(L.sqrtm(s), sl.sqrtm(s).astype(complex), np.complex128, 1e3)
    close(L.funm(a, jnp.sin), sl.funm(a, np.sin).astype(complex), np.complex128, 1e3)
    f, err = L.funm(a, jnp.exp, disp=False)
    close(f, sl.expm(a).astype(complex), np.complex128, 1e3)
    assert 0 < float(err) <= 1
  x = np.asarray(L.sqrtm(a.astype(np.float32)))
  assert x.dtype == np.complex64
  np.testing.assert_allclose(x @ x, a, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.complex64, np.float64, np.complex128])
def test_expm(dtype):
  with x64_for(dtype):
    for scale in (0.01, 0.3, 1.0, 8.0):   # several Pade degrees and squarings
      a = rand((4, 4), dtype) * scale
      close(L.expm(a), sl.expm(a), dtype, 100 * max(1, scale ** 2))
    a = rand((2, 3, 3), dtype)
    close(L.expm(a), sl.expm(a), dtype, 100)
    t = np.triu(rand((4, 4), dtype))
    close(L.expm(t, upper_triangular=True), sl.expm(t), dtype, 100)
    e = rand((3, 3), dtype)
    got_e, got_l = L.expm_frechet(a[0], e)
    want_e, want_l = sl.expm_frechet(a[0], e)
    close(got_e, want_e, dtype, 100)
    close(got_l, want_l, dtype, 100)
    close(L.expm_frechet(a[0], e, compute_expm=False), want_l, dtype, 100)
  assert np.isnan(np.asarray(L.expm(np.eye(2, dtype=np.float32) * 1e6, max_squarings=4))).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_expm_equals_jax_bit_for_bit(dtype):
  """The Pade sums run in JAX's order (highest power first), so results are JAX's to the
  bit (diffrax's neural CDE example builds its data with expm under vmap)."""
  import jax
  rng = np.random.default_rng(0)
  with x64_for(dtype), jax.enable_x64(dtype == np.float64):
    for n in (2, 3, 5):
      for scale in (0.01, 0.3, 1.0, 3.0, 10.0):   # each Pade degree, and squarings
        a = (rng.standard_normal((n, n)) * scale).astype(dtype)
        np.testing.assert_array_equal(np.asarray(L.expm(a)), np.asarray(jsl.expm(a)))
    ts = np.linspace(0, 12, 20).astype(dtype)
    m = np.array([[-0.3, 2], [-2, -0.3]], dtype)
    np.testing.assert_array_equal(
        np.asarray(sc.vmap(lambda t: L.expm(t * m))(ts)),
        np.asarray(jax.vmap(lambda t: jsl.expm(t * m))(ts)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_polar(dtype):
  a = rand((5, 3), dtype)
  with x64_for(dtype):
    for method in ("qdwh", "svd"):
      u, p = L.polar(a, method=method)
      us, ps = sl.polar(a)
      close(u, us, dtype, 10)
      close(p, ps, dtype, 10)
    u, p = L.polar(a.T, side="left")
    us, ps = sl.polar(a.T, side="left")
    close(u, us, dtype, 10)
    close(p, ps, dtype, 10)
    ub, pb = L.polar(np.stack([a, 2 * a]))   # batched qdwh
    close(np.asarray(ub)[1], sl.polar(2 * a)[0], dtype, 10)
    close(np.asarray(pb)[0], sl.polar(a)[1], dtype, 10)
  with pytest.raises(NotImplementedError, match="method='qdwh' only supports"):
    L.polar(a.T)


def test_solve_sylvester():
  a, b, c = rand((4, 4)), rand((3, 3)), rand((4, 3))
  with sc.enable_x64():
    for method in ("schur", "eigen"):
      close(L.solve_sylvester(a, b, c, method=method), sl.solve_sylvester(a, b, c),
            np.float64, 1e4)
    cc = rand((4, 3), np.complex128)   # (SciPy is wrong for real A, B with complex C)
    x = np.asarray(L.solve_sylvester(a, b, cc))
    assert x.dtype == np.complex128
    np.testing.assert_allclose(a @ x + x @ b, cc, atol=1e-12)
    assert np.isnan(np.asarray(L.solve_sylvester(np.eye(2), -np.eye(2), np.ones((2, 2))))).all()
  with pytest.raises(ValueError, match="Incompatible shapes"):
    L.solve_sylvester(a, b, c.T)
  with pytest.raises(ValueError, match="Unrecognized method"):
    L.solve_sylvester(a, b, c, method="x")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_eigh_tridiagonal(dtype):
  d, e = rand((6,), dtype), rand((5,), dtype)
  with x64_for(dtype):
    close(L.eigh_tridiagonal(d, e, eigvals_only=True),
          sl.eigh_tridiagonal(d, e, eigvals_only=True), dtype, 10)
    w, v = L.eigh_tridiagonal(d, e)
    ws, vs = sl.eigh_tridiagonal(d, e)
    close(w, ws, dtype, 10)
    np.testing.assert_allclose(np.abs(np.asarray(v)), np.abs(vs), atol=tol(dtype) * 100)
    w, v = L.eigh_tridiagonal(d, e, select="i", select_range=(2, 4))
    ws, vs = sl.eigh_tridiagonal(d, e, select="i", select_range=(2, 4))
    close(w, ws, dtype, 10)
    assert np.asarray(v).shape == (6, 3)
  with pytest.raises(NotImplementedError, match="select='v'"):
    L.eigh_tridiagonal(d, e, select="v")
  with pytest.raises(TypeError, match="same dtype"):
    L.eigh_tridiagonal(d, e.astype(np.float16))


def test_qr_multiply():
  a, c = rand((5, 3)), rand((2, 5))
  with sc.enable_x64():
    for kw in ({}, {"pivoting": True}, {"conjugate": True}):
      for got, want in zip(L.qr_multiply(a, c, **kw), sl.qr_multiply(a, c, **kw)):
        np.testing.assert_allclose(np.asarray(got), want, atol=1e-12)
    for got, want in zip(L.qr_multiply(a, c[:, :3].T, mode="left"),
                         sl.qr_multiply(a, c[:, :3].T, mode="left")):
      np.testing.assert_allclose(np.asarray(got), want, atol=1e-12)
    got, _ = L.qr_multiply(a, c[0])
    np.testing.assert_allclose(np.asarray(got), sl.qr_multiply(a, c[0])[0], atol=1e-12)
  with pytest.raises(ValueError, match="not compatible for c @ Q"):
    L.qr_multiply(a, c.T)
  with pytest.raises(ValueError, match="mode must be"):
    L.qr_multiply(a, c, mode="x")


# ---------------------------------------------------------------------------
# Special matrices


def test_special_matrices():
  x = rand((4,), np.float32)
  y = rand((3,), np.float32)
  cases = [("toeplitz", (x, y)), ("toeplitz", (x,)), ("hankel", (x, y)), ("hankel", (x,)),
           ("circulant", (x,)), ("leslie", (x, y)), ("companion", (x,)), ("fiedler", (x,)),
           ("fiedler_companion", (x,)), ("fiedler_companion", (x[:2],)),
           ("block_diag", (x[:2], np.ones((2, 3), np.float32), np.float32(3)))]
  for name, args in cases:
    got, want = getattr(L, name)(*args), getattr(sl, name)(*args)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6, err_msg=name)
    assert np.asarray(got).dtype == jsl.__dict__[name](*args).dtype, name
  for mode, n in (("full", 3), ("same", 6), ("same", 2), ("valid", 2)):
    np.testing.assert_allclose(np.asarray(L.convolution_matrix(x, n, mode)),
                               sl.convolution_matrix(x, n, mode), rtol=1e-6)
  np.testing.assert_array_equal(np.asarray(L.toeplitz(np.int32([1, 2, 3]))),
                                sl.toeplitz([1, 2, 3]))
  assert L.toeplitz(np.int32([1, 2])).dtype == np.int32
  c = np.array([1 + 1j, 2, 3j], np.complex64)
  np.testing.assert_allclose(np.asarray(L.toeplitz(c)), sl.toeplitz(c))
  batched = L.toeplitz(rand((2, 3), np.float32), rand((2, 4), np.float32))
  assert batched.shape == (2, 3, 4)
  assert L.block_diag().shape == (1, 0)


def test_constant_matrices_and_dtypes():
  for n in (1, 4, 6):
    np.testing.assert_allclose(np.asarray(L.hilbert(n)), sl.hilbert(n), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(L.invhilbert(n)), sl.invhilbert(n), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(L.helmert(n)), sl.helmert(n), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(L.helmert(n, full=True)), sl.helmert(n, full=True),
                               rtol=1e-6, atol=1e-7)
    for kind in (None, "lower", "upper"):
      np.testing.assert_allclose(np.asarray(L.pascal(n, kind)), sl.pascal(n, kind or
                                                                          "symmetric"))
      np.testing.assert_allclose(np.asarray(L.invpascal(n, kind)),
                                 sl.invpascal(n, kind or "symmetric"))
  np.testing.assert_array_equal(np.asarray(L.hadamard(8)), sl.hadamard(8))
  for scale in (None, "sqrtn", "n"):
    np.testing.assert_allclose(np.asarray(L.dft(5, scale)), sl.dft(5, scale), rtol=1e-6,
                               atol=1e-6)
  assert (L.hilbert(2).dtype, L.hadamard(2).dtype, L.dft(2).dtype) == (
      np.float32, np.int32, np.complex64)
  assert L.hadamard(2, np.float32).dtype == np.float32
  with sc.enable_x64():
    assert (L.hilbert(2).dtype, L.hadamard(2).dtype, L.dft(2).dtype, L.pascal(2).dtype) == (
        np.float64, np.int64, np.complex128, np.float64)
  with pytest.raises(ValueError, match="power of 2"):
    L.hadamard(6)
  with pytest.raises(ValueError, match="complex"):
    L.dft(3, dtype=np.float32)
  with pytest.raises(ValueError, match="kind"):
    L.pascal(3, "diag")


# ---------------------------------------------------------------------------
# Derivatives (where JAX differentiates), vmap, jit


def test_gradients():
  # NB: its own generator (the module's RNG is consumed in test order, which differs under
  # xdist) and well-conditioned matrices for det/inv/solve (finite differences of an
  # ill-conditioned inverse fail check_grads, JAX's as well).
  rng = np.random.default_rng(11)
  a, b = rng.standard_normal((3, 3)), rng.standard_normal((3, 2))
  eye = np.eye(3)
  a_ok = a + 3 * eye
  fns = {
      "cholesky": (lambda x: L.cholesky(x @ x.T + 3 * eye), (a,)),
      "solve_triangular": (lambda x, y: L.solve_triangular(x + 4 * eye, y, trans=1),
                           (a, b)),
      "expm": (L.expm, (0.5 * a,)),
      "det": (L.det, (a,)),
      "inv": (L.inv, (a_ok,)),
      "solve": (L.solve, (a_ok, b)),
      "eigh": (lambda x: L.eigh(x + x.T), (a,)),
      "lu_solve": (lambda x, y: L.lu_solve(L.lu_factor(x), y, trans=2), (a_ok, b)),
  }
  with sc.enable_x64():
    for name, (f, args) in fns.items():
      try:
        check_grads(f, args, order=1, modes=("fwd", "rev"))
      except AssertionError as e:
        raise AssertionError(f"{name}: {e}") from e
    check_grads(lambda x: L.expm(x), (rng.standard_normal((3, 3)) * 3,), order=1,
                modes=("rev",))


def test_vmap_and_jit_agree_with_eager():
  a = rand((3, 4, 4))
  b = rand((3, 4, 2))
  with sc.enable_x64():
    for f in (lambda x, y: L.cho_solve(L.cho_factor(x @ _T(x) + 4 * jnp.eye(4)), y),
              lambda x, y: L.expm(x) @ y):
      eager = np.asarray(f(a, b))
      np.testing.assert_allclose(np.asarray(sc.vmap(f)(a, b)), eager, atol=1e-12)
      np.testing.assert_allclose(np.asarray(sc.jit(f)(a, b)), eager, atol=1e-12)
      for i in range(3):
        np.testing.assert_allclose(np.asarray(f(a[i], b[i])), eager[i], atol=1e-12)


def _T(x):
  return jnp.swapaxes(x, -1, -2)


# ---------------------------------------------------------------------------
# Errors and warnings


def test_errors_and_warnings():
  a = rand((3, 3), np.float32)
  with pytest.raises(ValueError, match="assume_a"):
    L.solve(a, a, assume_a="diag")
  with pytest.raises(ValueError, match="Invalid 'trans'"):
    L.solve_triangular(a, a, trans=3)
  with pytest.raises(ValueError, match="trans"):
    L.lu_solve(L.lu_factor(a), a, trans=5)
  with pytest.raises(ValueError, match="Unsupported QR decomposition mode 'raw'"):
    L.qr(a, mode="raw")
  with pytest.raises(ValueError, match="'real' or 'complex'"):
    L.schur(a, output="x")
  with pytest.raises(NotImplementedError, match="eigvals=None"):
    L.eigh(a, eigvals=(0, 1))
  with pytest.raises(NotImplementedError, match="Blocked"):
    L.sqrtm(a, blocksize=2)
  with pytest.raises(ValueError, match="square"):
    L.expm(np.ones((2, 3), np.float32))
  with pytest.raises(ValueError, match="same shape"):
    L.expm_frechet(a, a[:2, :2])
  with pytest.raises(ValueError, match="square"):
    L.funm(np.ones((2, 3)), jnp.exp)
  with pytest.raises(ValueError, match="at most 2"):
    L.block_diag(np.ones((1, 2, 3)))
  with pytest.raises(ValueError, match="must be square"):
    L.rsf2csf(np.ones((2, 3)), np.ones((2, 2)))
  with pytest.raises(ValueError, match="side"):
    L.polar(a, side="top")
  with pytest.raises(ValueError, match="do not fit"):
    L.cho_solve(L.cho_factor(spd(3, np.float32)), np.ones((4, 2), np.float32))
  with pytest.raises(ValueError, match="n must be a positive"):
    L.convolution_matrix(np.ones(3), 0)
  with pytest.raises(NotImplementedError, match="Differentiation rule for 'schur'"):
    sc.jvp(lambda x: L.schur(x)[0], (a,), (a,))
  batch_a = np.stack([np.eye(3, dtype=np.float32)] * 2)
  with pytest.warns(FutureWarning, match="batched 1D solves"):
    out = L.solve_triangular(batch_a, np.ones((2, 3), np.float32))
  assert out.shape == (2, 3)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert L.solve_triangular(batch_a, np.ones((2, 3, 1), np.float32)).shape == (2, 3, 1)
