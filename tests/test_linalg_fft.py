"""stagecraft.numpy.fft and stagecraft.numpy.linalg (and the lax.fft / lax.linalg primitives)
against NumPy (values) and jax.numpy (dtypes and weak types via `jax.eval_shape`); eager and
staged; the abstract eval against what executes; LAPACK failures; error messages."""
import os
import sys
import warnings

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(__file__))
from _util import assert_trees_allclose, staged_call  # noqa: E402

import stagecraft as sc  # noqa: E402
import stagecraft.numpy as jnp  # noqa: E402
from stagecraft import core, lax  # noqa: E402
from stagecraft.interpreters import lowering, partial_eval as pe  # noqa: E402
from stagecraft.lax import linalg as lax_linalg  # noqa: E402

from _cases import c64, f32, i32  # noqa: E402
RNG = np.random.default_rng(1)


def rand(shape, dtype=f32):
  x = RNG.normal(size=shape)
  if np.dtype(dtype).kind == "c":
    x = x + 1j * RNG.normal(size=shape)
  return x.astype(dtype)


def spd(shape, dtype=f32):
  a = rand(shape, dtype)
  return (a @ np.conj(np.swapaxes(a, -1, -2)) + shape[-1] * np.eye(shape[-1])).astype(dtype)


def _flat(x):
  if isinstance(x, (tuple, list)):
    return [y for v in x for y in _flat(v)]
  return [x]


def check(fn, args, np_fn=None, rtol=2e-5, atol=2e-5, jax_fn=None, staged=False):
  """fn(module, *args) on stagecraft vs NumPy (values) and jax.numpy (avals)."""
  got = _flat(fn(jnp, *args))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    want = _flat(np_fn(*args) if np_fn else fn(np, *args))
    jargs = [jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype) for a in args]
    jwant = jax.tree_util.tree_leaves(jax.eval_shape(lambda *a: (jax_fn or fn)(jjnp, *a),
                                                     *jargs))
  assert len(got) == len(want) == len(jwant)
  for g, w, j in zip(got, want, jwant):
    assert (g.shape, g.dtype, g.weak_type) == (j.shape, j.dtype, j.weak_type), (g.aval, j)
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)
  if staged:
    st_ = _flat(staged_call(lambda *a: fn(jnp, *a), *args))
    assert len(st_) == len(got)
    for s, g in zip(st_, got):
      assert s.aval == g.aval
      np.testing.assert_allclose(np.asarray(s), np.asarray(g), rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------
# FFT

X345 = rand((3, 4, 5))
C45 = rand((4, 5), c64)

FFT_CASES = [
    ("fft", lambda m, x: (m.fft.fft(x), m.fft.fft(x, 7), m.fft.fft(x, 3, axis=0)), (X345,)),
    ("ifft", lambda m, x: (m.fft.ifft(x), m.fft.ifft(x, 6, axis=1, norm="ortho")), (C45,)),
    ("rfft irfft", lambda m, x: (m.fft.rfft(x), m.fft.irfft(x), m.fft.irfft(x, 7, axis=0)),
     (X345,)),
    ("norms", lambda m, x: [f(x, norm=nm) for f in (m.fft.fft, m.fft.ifft, m.fft.rfft)
                            for nm in ("backward", "ortho", "forward")], (X345,)),
    ("fft2", lambda m, x: (m.fft.fft2(x), m.fft.ifft2(x, (3, 6)), m.fft.rfft2(x),
                           m.fft.irfft2(x, axes=(0, 2))), (X345,)),
    ("fftn", lambda m, x: (m.fft.fftn(x), m.fft.ifftn(x, axes=(0, 2)), m.fft.rfftn(x, (2, 6)),
                           m.fft.irfftn(x), m.fft.irfftn(x, (3, 4, 9), norm="ortho")),
     (X345,)),
    ("fftn 4d", lambda m, x: (m.fft.fftn(x), m.fft.irfftn(m.fft.rfftn(x), x.shape)),
     (rand((2, 3, 2, 4)),)),
    ("hfft", lambda m, x: (m.fft.hfft(x), m.fft.ihfft(x.real)), (C45,)),
    ("int input", lambda m, x: (m.fft.fft(x), m.fft.rfft(x)), (np.arange(6, dtype=i32),)),
    ("freq", lambda m: (m.fft.fftfreq(5), m.fft.fftfreq(8, 0.1), m.fft.rfftfreq(5, 2.0),
                        m.fft.rfftfreq(8)), ()),
    ("shift", lambda m, x: (m.fft.fftshift(x), m.fft.ifftshift(x), m.fft.fftshift(x, axes=1),
                            m.fft.ifftshift(x, axes=(0,))), (X345,)),
]


@pytest.mark.parametrize("case", FFT_CASES, ids=lambda c: c[0])
def test_fft(case):
  name, fn, args = case
  check(fn, args, staged=name in ("fft", "rfft irfft", "fftn 4d", "norms"))


def test_lax_fft_primitive():
  x = rand((2, 8), c64)
  for typ, lengths, want in [("fft", (8,), np.fft.fft(x)), ("ifft", (2, 8), np.fft.ifft2(x)),
                             (lax.FftType.RFFT, (8,), np.fft.rfft(x.real)),
                             ("IRFFT", (8,), np.fft.irfft(x[:, :5]))]:
    arg = x.real.copy() if typ == lax.FftType.RFFT else x[:, :5] if typ == "IRFFT" else x
    got = lax.fft(arg, typ, lengths)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    jaxpr, _ = pe.trace_to_jaxpr(lambda a: [lax.fft(a, typ, lengths)], [core.get_aval(arg)])
    assert jaxpr.out_avals == [got.aval]
  text = lowering.lower_jaxpr_to_module(
      "f", pe.trace_to_jaxpr(lambda a: [lax.fft(a, "irfft", (8,))], [core.get_aval(x[:, :5])])[0])
  assert "stablehlo.fft" in text and "fft_type = #stablehlo<fft_type IRFFT>" in text
  assert "fft_length = array<i64: 8>" in text
  assert lax.fft(x, "fft", ()).dtype == c64


def test_fft_errors():
  with pytest.raises(ValueError, match="only real valued inputs"):
    jnp.fft.rfft(C45)
  with pytest.raises(ValueError, match="Shape should be positive"):
    jnp.fft.fft(X345, 0)
  with pytest.raises(ValueError, match="does not support repeated axes"):
    jnp.fft.fftn(X345, axes=(0, 0))
  with pytest.raises(ValueError, match="Shape and axes have different lengths"):
    jnp.fft.fftn(X345, s=(2, 3), axes=(0,))
  with pytest.raises(ValueError, match="does not support multiple axes"):
    jnp.fft.fft(X345, axis=(0, 1))
  with pytest.raises(ValueError, match="only supports 2 axes"):
    jnp.fft.fft2(X345, axes=(0, 1, 2))
  with pytest.raises(ValueError, match="Invalid norm value"):
    jnp.fft.fft(X345, norm="bogus")
  with pytest.raises(ValueError, match="only takes an int"):
    jnp.fft.fftfreq([2, 3])
  with pytest.raises(TypeError, match="Unknown FFT type"):
    lax.fft(C45, "dft", (5,))
  with pytest.raises(ValueError, match="FFT input must be complex64 or complex128"):
    lax.fft_p.bind(X345, fft_type=lax.FftType.FFT, fft_lengths=(5,))
  with pytest.raises(ValueError, match="minor dimensions must be equal to fft_lengths"):
    lax.fft(C45, "fft", (4,))
  with pytest.raises(ValueError, match="at least as many input dimensions"):
    lax.fft(C45, "fft", (1, 4, 5))


@settings(max_examples=8)
@given(st.integers(1, 9), st.integers(1, 3), st.sampled_from(["backward", "ortho", "forward"]))
def test_fft_roundtrip_property(n, batch, norm):
  x = rand((batch, n))
  np.testing.assert_allclose(np.asarray(jnp.fft.fft(x, norm=norm)),
                             np.fft.fft(x, norm=norm), rtol=1e-4, atol=1e-4)
  back = jnp.fft.irfft(jnp.fft.rfft(x, norm=norm), n, norm=norm)
  np.testing.assert_allclose(np.asarray(back), x, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------
# linalg

A = rand((2, 4, 4))
S = spd((2, 4, 4))
SC = spd((3, 3), c64)
B = rand((2, 4, 3))


def _svd_np(x, **kw):
  return np.linalg.svd(x, **kw)


LINALG_CASES = [
    ("cholesky", lambda m, a: (m.linalg.cholesky(a), m.linalg.cholesky(a, upper=True)), (S,)),
    ("cholesky complex", lambda m, a: m.linalg.cholesky(a), (SC,)),
    ("det", lambda m, a: (m.linalg.det(a), m.linalg.det(a[:, :2, :2]), m.linalg.det(a[:, :3, :3]),
                          m.linalg.det(a[0, :1, :1])), (A,)),
    ("det complex", lambda m, a: m.linalg.det(a), (SC,)),
    ("slogdet", lambda m, a: (tuple(m.linalg.slogdet(a)), tuple(m.linalg.slogdet(a[:, :2, :2]))),
     (A,)),
    ("slogdet complex", lambda m, a: tuple(m.linalg.slogdet(a)), (SC,)),
    ("inv", lambda m, a: m.linalg.inv(a), (A,)),
    ("inv int", lambda m, a: m.linalg.inv(a), (np.int32([[2, 1], [1, 3]]),)),
    ("solve", lambda m, a, b: (m.linalg.solve(a, b), m.linalg.solve(a[0], b[0, :, 0]),
                               m.linalg.solve(a, b[0])), (A, B)),
    ("solve complex", lambda m, a: m.linalg.solve(a, a[:, :1]), (SC,)),
    ("norm matrix", lambda m, a: [m.linalg.norm(a, o, axis=(1, 2)) for o in
                                  (None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf)]
     + [m.linalg.norm(a[0]), m.linalg.norm(a, 1, (2, 1), keepdims=True)], (A,)),
    ("norm vector", lambda m, a: [m.linalg.norm(a, o, axis=-1) for o in
                                  (None, 0, 1, 2, 3, 0.5, np.inf, -np.inf)]
     + [m.linalg.norm(a), m.linalg.norm(a[0, 0], 1)], (A,)),
    ("norm complex", lambda m, a: (m.linalg.norm(a), m.linalg.norm(a, 2), m.linalg.norm(a, 1)),
     (SC,)),
    ("qr", lambda m, a: (m.linalg.qr(a, "r"), m.linalg.qr(a[:, :3, :], "r"),
                         tuple(m.linalg.qr(a[:, :, :2], "complete"))), (A,)),
    ("eigvalsh", lambda m, a: (m.linalg.eigvalsh(a), m.linalg.eigh(a).eigenvalues), (S,)),
    ("eigvalsh complex", lambda m, a: m.linalg.eigvalsh(a), (SC,)),
    ("svd values", lambda m, a: (m.linalg.svd(a, compute_uv=False),
                                 m.linalg.svd(a[:, :2], compute_uv=False),
                                 m.linalg.svdvals(a[:, :, :3])), (A,)),
    ("pinv rank", lambda m, a: (m.linalg.pinv(a[:, :, :3]), m.linalg.matrix_rank(a),
                                m.linalg.matrix_rank(a[0] * 0)), (A,)),
    ("matrix_power", lambda m, a: [m.linalg.matrix_power(a, n) for n in (0, 1, 2, 5, -1)],
     (A,)),
    ("multi_dot cond", lambda m, a, b: (m.linalg.multi_dot([a[0], a[1], b[0]]),
                                        m.linalg.cond(a), m.linalg.cond(a, "fro")), (A, B)),
]


@pytest.mark.parametrize("case", LINALG_CASES, ids=lambda c: c[0])
def test_linalg(case):
  name, fn, args = case
  # NB: jnp's matrix_rank is int32, NumPy's int64.
  check(fn, args, rtol=2e-4, atol=2e-4,
        staged=name in ("cholesky", "det", "slogdet", "solve", "norm matrix", "inv"))


def test_decompositions_reconstruct():
  for a in (A, SC):
    q, r = jnp.linalg.qr(a)
    np.testing.assert_allclose(np.asarray(q @ r), a, atol=1e-4)
    assert np.allclose(np.tril(np.asarray(r), -1), 0)
    u, s, vh = jnp.linalg.svd(a, full_matrices=False)
    np.testing.assert_allclose(np.asarray((u * s.astype(u.dtype)[..., None, :]) @ vh), a,
                               atol=1e-4)
    u, s, vh = jnp.linalg.svd(a)
    assert u.shape == a.shape and vh.shape == a.shape
  w, v = jnp.linalg.eigh(S)
  np.testing.assert_allclose(np.asarray(S @ v), np.asarray(v * w[..., None, :]), atol=2e-4)
  u, s, vh = jnp.linalg.svd(S, hermitian=True)
  np.testing.assert_allclose(np.asarray((u * s[..., None, :]) @ vh), S, atol=2e-4)
  lu, piv, perm = lax_linalg.lu(A[:, :, :3])
  l = np.tril(np.asarray(lu), -1) + np.eye(4, 3)
  u = np.triu(np.asarray(lu))[:, :3]
  np.testing.assert_allclose(A[:, :, :3][np.arange(2)[:, None], np.asarray(perm)], l @ u,
                             atol=1e-5)
  assert piv.dtype == i32 and piv.shape == (2, 3) and perm.shape == (2, 4)
  x, resid, rank, s = jnp.linalg.lstsq(A[0, :, :3], B[0])
  want = np.linalg.lstsq(A[0, :, :3], B[0], rcond=None)
  assert_trees_allclose((x, resid, rank, s), want, rtol=1e-4, atol=1e-4)


def test_lax_linalg_primitives_staged_and_abstract_eval():
  fns = [lambda a: [lax_linalg.cholesky(a)], lambda a: list(lax_linalg.lu_p.bind(a)),
         lambda a: list(lax_linalg.geqrf(a)), lambda a: list(lax_linalg.eigh(a)),
         lambda a: list(lax_linalg.svd(a, full_matrices=False)),
         lambda a: [lax_linalg.triangular_solve(a, a, left_side=True, lower=True)]]
  for f in fns:
    for x in (S, SC):
      jaxpr, _ = pe.trace_to_jaxpr(f, [core.get_aval(x)])
      eager = f(x)
      assert jaxpr.out_avals == [o.aval for o in eager]
      assert_trees_allclose(_flat(staged_call(f, x)), eager, rtol=1e-6, atol=1e-6)
  text = lowering.lower_jaxpr_to_module(
      "f", pe.trace_to_jaxpr(lambda a: [lax_linalg.cholesky(a)], [core.get_aval(S)])[0])
  assert 'call_target_name = "lapack_spotrf_ffi"' in text and "api_version = 4" in text
  assert "operand_layouts = [dense<[1, 2, 0]> : tensor<3xindex>]" in text
  t = lax_linalg.triangular_solve(np.triu(S[0]), B[0], left_side=True, transpose_a=True)
  np.testing.assert_allclose(np.asarray(t), np.linalg.solve(np.triu(S[0]).T, B[0]), rtol=1e-4)


def test_failures_give_nan_not_errors():
  bad = -np.eye(3, dtype=f32)
  L = jnp.linalg.cholesky(bad)
  assert np.isnan(np.asarray(L)[np.tril_indices(3)]).all()
  assert (np.asarray(L)[np.triu_indices(3, 1)] == 0).all()
  singular = np.ones((4, 4), f32)
  assert jnp.linalg.det(singular).item() == 0
  sign, logdet = jnp.linalg.slogdet(singular)
  assert sign.item() == 0 and logdet.item() == -np.inf
  assert not np.isfinite(np.asarray(jnp.linalg.inv(singular))).all()
  assert jnp.linalg.cond(singular).item() == np.inf
  w = jnp.linalg.eigvalsh(np.full((2, 2), np.nan, f32))
  assert np.isnan(np.asarray(w)).all()


def test_empty_matrices():
  e = np.zeros((2, 0, 0), f32)
  assert jnp.linalg.cholesky(e).shape == (2, 0, 0)
  assert jnp.linalg.det(e).tolist() == [1.0, 1.0]
  assert jnp.linalg.inv(e).shape == (2, 0, 0)
  assert jnp.linalg.svd(np.zeros((3, 0), f32), compute_uv=False).shape == (0,)
  assert jnp.linalg.eigh(e).eigenvectors.shape == (2, 0, 0)


def test_linalg_errors():
  with pytest.raises(ValueError, match=r"must have shape \[..., n, n\]"):
    jnp.linalg.det(A[:, :3])
  with pytest.raises(ValueError, match=r"must have shape \[..., n, n\]"):
    jnp.linalg.inv(A[0, 0])
  with pytest.raises(ValueError, match="at least two dimensional"):
    jnp.linalg.solve(A[0, 0], A[0, 0])
  with pytest.raises(ValueError, match="Invalid shapes for solve"):
    jnp.linalg.solve(A, B[:, :, 0])
  with pytest.raises(ValueError, match="UPLO must be one of"):
    jnp.linalg.eigh(S, UPLO="X")
  with pytest.raises(ValueError, match="Unsupported QR decomposition mode"):
    jnp.linalg.qr(A, "bogus")
  with pytest.raises(ValueError, match="Invalid order 'bogus' for matrix norm"):
    jnp.linalg.norm(A[0], "bogus")
  with pytest.raises(ValueError, match="Invalid order 'inf' for vector norm"):
    jnp.linalg.norm(A[0, 0], "inf")
  with pytest.raises(ValueError, match="Improper number of axes"):
    jnp.linalg.norm(A, axis=(0, 1, 2))
  with pytest.raises(TypeError, match="exponent must be an integer"):
    jnp.linalg.matrix_power(A, 1.5)
  with pytest.raises(TypeError, match="cholesky does not accept dtype int32"):
    lax_linalg.cholesky(np.eye(2, dtype=np.int32))
  with pytest.raises(ValueError, match="rank >= 2"):
    lax_linalg.svd(A[0, 0])
  with pytest.raises(TypeError, match="does not fit b"):
    lax_linalg.triangular_solve(S, B.transpose(0, 2, 1), left_side=True)


def test_jit_linalg_pipeline():
  @sc.jit
  def f(a, b):
    x = jnp.linalg.solve(a, b)
    return jnp.linalg.norm(a @ x - b), jnp.linalg.slogdet(a).logabsdet
  r, ld = f(S, B)
  assert r.item() < 1e-4
  np.testing.assert_allclose(np.asarray(ld), np.linalg.slogdet(S)[1], rtol=1e-5)
