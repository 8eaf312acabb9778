"""lax.linalg on GPUs: the decompositions lower to the cuSOLVER kernels that jaxlib's CUDA
plugin registers (`cusolver_potrf_ffi`, `cusolver_getrf_ffi`, `cusolver_geqrf_ffi`,
`cusolver_orgqr_ffi`, `cusolver_syevd_ffi`, `cusolver_gesvdj_ffi`, `cusolver_gesvd_ffi`).

The first half runs everywhere: the module stagecraft lowers for `cuda` calls the same
kernels with the same attributes and layouts as JAX 0.10.2's cuda lowering (JAX lowers for
cuda without a GPU, so JAX is the oracle on CPU too). The second half runs only where the
default backend is a GPU and checks the numbers against NumPy."""
from __future__ import annotations

import re

import jax
import numpy as np
import pytest

import stagecraft as sc
from stagecraft import export as sc_export


def _ours(f, *args, unstable_target=None):
  checks = [] if unstable_target is None else [
      sc_export.DisabledSafetyCheck.custom_call(unstable_target)]
  return sc_export.export(sc.jit(f), platforms=["cuda"], disabled_checks=checks)(
      *args).mlir_module()


def _theirs(f, *args):
  return jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",)).as_text()


_CALL = re.compile(r"stablehlo\.custom_call @(\w+)\((.*)$", re.M)


def _calls(text):
  """(target, sorted FFI attributes, operand layouts, result layouts) of each custom call."""
  out = []
  for target, rest in _CALL.findall(text):
    cfg = re.search(r"(?<![\w.])(?:mhlo\.)?backend_config = \{([^}]*)\}", rest)
    attrs = sorted(a.strip() for a in cfg.group(1).split(",") if a.strip()) if cfg else []
    ops = re.search(r"operand_layouts = (\[.*?\])(?=, (?:output|result))", rest).group(1)
    res = re.search(r"result_layouts = (\[.*?\])(?=[,}])", rest).group(1)
    out.append((target, attrs, ops, res))
  return out


def _svd(**kw):
  return lambda m: (lambda a: m.lax.linalg.svd(a, **kw))


def _qr_alg(m):
  return m.lax.linalg.SvdAlgorithm.QR


CASES = {
    # name: (function of the module (jax or stagecraft), argument shape)
    "cholesky": (lambda m: m.lax.linalg.cholesky, (2, 4, 4)),
    "geqrf+orgqr (qr)": (lambda m: m.numpy.linalg.qr, (2, 5, 3)),
    "qr wide": (lambda m: m.numpy.linalg.qr, (3, 5)),
    "eigh": (lambda m: m.lax.linalg.eigh, (2, 4, 4)),
    "eigh upper": (lambda m: (lambda a: m.lax.linalg.eigh(a, lower=False,
                                                          symmetrize_input=False)), (3, 3)),
    "eigh jacobi": (lambda m: (lambda a: m.lax.linalg.eigh(
        a, implementation=m.lax.linalg.EighImplementation.JACOBI)), (4, 4)),
    "eigh qr": (lambda m: (lambda a: m.lax.linalg.eigh(
        a, implementation=m.lax.linalg.EighImplementation.QR)), (4, 4)),
    "svd gesvdj": (_svd(), (2, 5, 3)),
    "svd gesvdj thin": (_svd(full_matrices=False), (3, 5)),
    "svd gesvdj thin econ": (_svd(full_matrices=False), (2, 40, 50)),
    "svd gesvdj values": (_svd(compute_uv=False), (2, 5, 3)),
    "svd gesvd (m > 1024)": (_svd(), (1030, 4)),
    "svd QR": (lambda m: (lambda a: m.lax.linalg.svd(a, algorithm=_qr_alg(m))), (5, 3)),
    "svd QR wide thin": (lambda m: (lambda a: m.lax.linalg.svd(
        a, full_matrices=False, algorithm=_qr_alg(m))), (2, 3, 5)),
    "svd QR values": (lambda m: (lambda a: m.lax.linalg.svd(
        a, compute_uv=False, algorithm=_qr_alg(m))), (2, 3, 5)),
    "pinv": (lambda m: m.numpy.linalg.pinv, (2, 5, 3)),
}


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
@pytest.mark.parametrize("name", sorted(CASES))
def test_cuda_lowering_calls_the_cusolver_kernels_as_jax(name, dtype):
  fn, shp = CASES[name]
  x = jax.ShapeDtypeStruct(shp, dtype)
  ours = _calls(_ours(fn(sc), sc.ShapeDtypeStruct(shp, dtype)))
  theirs = _calls(_theirs(fn(jax), x))
  assert ours and all(t[0].startswith("cusolver_") for t in ours), ours
  assert ours == theirs


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_cuda_lu_getrf_as_jax(dtype):
  """getrf is JAX's; JAX's lu also emits `cu_lu_pivots_to_permutation` for its third
  output, which stagecraft composes from the pivots (platform-independent)."""
  x = sc.ShapeDtypeStruct((2, 4, 4), dtype)
  ours = _calls(_ours(sc.lax.linalg.lu, x))
  theirs = _calls(_theirs(jax.lax.linalg.lu, jax.ShapeDtypeStruct((2, 4, 4), dtype)))
  assert ours == [c for c in theirs if c[0] == "cusolver_getrf_ffi"]


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_cuda_tridiagonal_ormqr_and_gtsv2_as_jax(dtype):
  from jax._src.lax import linalg as jax_linalg
  s_, j_ = sc.ShapeDtypeStruct, jax.ShapeDtypeStruct
  for lower in (True, False):
    ours = _calls(_ours(lambda a: sc.lax.linalg.tridiagonal(a, lower=lower), s_((2, 4, 4), dtype)))
    theirs = _calls(_theirs(lambda a: jax.lax.linalg.tridiagonal(a, lower=lower),
                            j_((2, 4, 4), dtype)))
    assert ours == theirs and ours[0][0] == "cusolver_sytrd_ffi"
  for left, transpose in ((True, False), (False, True)):
    c_shape = (2, 4, 2) if left else (2, 2, 4)
    ours = _calls(_ours(lambda a, t, c: sc.lax.linalg.ormqr(a, t, c, left=left, transpose=transpose),
                        s_((2, 4, 3), dtype), s_((2, 3), dtype), s_(c_shape, dtype)))
    theirs = _calls(_theirs(lambda a, t, c: jax_linalg.ormqr(a, t, c, left=left, transpose=transpose),
                            j_((2, 4, 3), dtype), j_((2, 3), dtype), j_(c_shape, dtype)))
    assert ours == theirs and ours[0][0] == "cusolver_ormqr_ffi"
  for perturb in (False, True):
    avals = [(2, 5), (2, 5), (2, 5), (2, 5, 3)]
    ours = _calls(_ours(lambda *xs: sc.lax.linalg.tridiagonal_solve(*xs, perturb_singular=perturb),
                        *[s_(a, dtype) for a in avals],
                        unstable_target="cu_tridiagonal_solve_perturbed"))
    theirs = _calls(_theirs(lambda *xs: jax.lax.linalg.tridiagonal_solve(
        *xs, perturb_singular=perturb), *[j_(a, dtype) for a in avals]))
    assert ours == theirs, (ours, theirs)


@pytest.mark.parametrize("m", [1, 2])
def test_small_tridiagonal_solve_used_on_gpus(m):
  """cuSPARSE's gtsv2 needs m >= 3: smaller systems are solved in the program (JAX too)."""
  from stagecraft.lax.linalg import _small_tridiagonal_solve
  rng = np.random.default_rng(m)
  dl, d, du = (rng.standard_normal((3, m)).astype(np.float32) for _ in range(3))
  d = d + 3
  dl[:, 0] = 0
  du[:, -1] = 0
  b = rng.standard_normal((3, m, 2)).astype(np.float32)
  x = np.asarray(sc.jit(_small_tridiagonal_solve)(dl, d, du, b))
  a = np.zeros((3, m, m), np.float32)
  for i in range(m):
    a[:, i, i] = d[:, i]
    if i:
      a[:, i, i - 1] = dl[:, i]
      a[:, i - 1, i] = du[:, i - 1]
  np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-5, atol=1e-5)
  text = _ours(sc.lax.linalg.tridiagonal_solve, *[sc.ShapeDtypeStruct(v.shape, v.dtype)
                                                  for v in (dl, d, du, b)])
  assert "custom_call" not in text


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
@pytest.mark.parametrize("left", [False, True])
def test_cuda_eig_and_pivoted_qr_use_the_hybrid_kernels_as_jax(dtype, left):
  """eig and qr(pivoting=True) lower to jaxlib's hybrid kernels (host LAPACK or MAGMA) with
  JAX's attributes (`left`, `right`, `magma`) and layouts; JAX 0.10.2 without cuSOLVER's
  geev (as when lowering on a CPU machine) does the same."""
  s_, j_ = sc.ShapeDtypeStruct, jax.ShapeDtypeStruct
  kind = "real" if dtype == np.float32 else "comp"
  eig = lambda m: (lambda a: m.lax.linalg.eig(a, compute_left_eigenvectors=left))
  ours = _calls(_ours(eig(sc), s_((2, 3, 3), dtype), unstable_target=f"cuhybrid_eig_{kind}"))
  theirs = _calls(_theirs(eig(jax), j_((2, 3, 3), dtype)))
  if theirs[0][0] == "cusolver_geev_ffi":
    # JAX on a machine with cuSOLVER >= 11.7.1 and no left eigenvectors requested: cuSOLVER's
    # geev. stagecraft keeps the hybrid kernel there (docs/differences.md).
    assert not left and ours[0][0] == f"cuhybrid_eig_{kind}"
  else:
    assert ours == theirs and ours[0][0] == f"cuhybrid_eig_{kind}"
  assert f'left = {"true" if left else "false"}' in ours[0][1]
  qr = lambda m: (lambda a: m.lax.linalg.qr(a, pivoting=True, full_matrices=left))
  ours = _calls(_ours(qr(sc), s_((4, 3), dtype), unstable_target="cuhybrid_geqp3"))
  theirs = _calls(_theirs(qr(jax), j_((4, 3), dtype)))
  assert ours == theirs and ours[0][0] == "cuhybrid_geqp3"
  with pytest.raises(NotImplementedError, match="CUSOLVER"):
    _ours(lambda a: sc.lax.linalg.eig(
        a, implementation=sc.lax.linalg.EigImplementation.CUSOLVER), s_((3, 3), dtype))


def test_cuda_unsupported_algorithms_raise():
  x = sc.ShapeDtypeStruct((4, 4), np.float32)
  with pytest.raises(NotImplementedError, match="POLAR"):
    _ours(lambda a: sc.lax.linalg.svd(a, algorithm=sc.lax.linalg.SvdAlgorithm.POLAR), x)
  with pytest.raises(NotImplementedError, match="QDWH implementation is only supported on TPU"):
    _ours(lambda a: sc.lax.linalg.eigh(a, implementation=sc.lax.linalg.EighImplementation.QDWH),
          x)


# ---------------------------------------------------------------------------
# On a GPU: the numbers.

on_gpu = pytest.mark.skipif(sc.default_backend() != "gpu", reason="needs a GPU backend")
RNG = np.random.default_rng(0)


def _rand(shape, dtype):
  x = RNG.standard_normal(shape)
  if np.dtype(dtype).kind == "c":
    x = x + 1j * RNG.standard_normal(shape)
  return x.astype(dtype)


def _spd(n, dtype, batch=()):
  a = _rand((*batch, n, n), dtype)
  return (a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)).astype(dtype)


TOL = {np.float32: 2e-3, np.complex64: 2e-3, np.float64: 1e-9, np.complex128: 1e-9}
DTYPES = [np.float32, np.complex64]


@on_gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_cholesky_lu_qr(dtype):
  a = _spd(5, dtype, (2,))
  l = np.asarray(sc.lax.linalg.cholesky(a))
  np.testing.assert_allclose(l, np.linalg.cholesky(a), rtol=TOL[dtype], atol=TOL[dtype])
  bad = np.asarray(sc.lax.linalg.cholesky(-a))   # not PD: NaN below the diagonal, as JAX
  np.testing.assert_array_equal(np.isnan(bad), np.broadcast_to(np.tri(5, dtype=bool), bad.shape))
  g = _rand((2, 5, 5), dtype)
  lu, piv, perm = (np.asarray(t) for t in sc.lax.linalg.lu(g))
  low = np.tril(lu, -1) + np.eye(5)
  np.testing.assert_allclose(low @ np.triu(lu), np.take_along_axis(g, perm[..., None], -2),
                             rtol=TOL[dtype], atol=5 * TOL[dtype])
  r = _rand((2, 6, 4), dtype)
  q, rr = (np.asarray(t) for t in sc.numpy.linalg.qr(r))
  np.testing.assert_allclose(q @ rr, r, atol=5 * TOL[dtype])
  np.testing.assert_allclose(np.conj(np.swapaxes(q, -1, -2)) @ q, np.broadcast_to(np.eye(4), (2, 4, 4)),
                             atol=5 * TOL[dtype])


@on_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("impl", ["default", "QR", "JACOBI"])
def test_gpu_eigh(dtype, impl):
  a = _spd(6, dtype, (3,))
  kw = {} if impl == "default" else {
      "implementation": getattr(sc.lax.linalg.EighImplementation, impl)}
  v, w = (np.asarray(t) for t in sc.lax.linalg.eigh(a, **kw))
  np.testing.assert_allclose(w, np.linalg.eigvalsh(a), rtol=TOL[dtype], atol=TOL[dtype] * 10)
  np.testing.assert_allclose(a @ v, v * w[..., None, :].astype(dtype), atol=TOL[dtype] * 50)


@on_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,kw", [
    ((2, 6, 4), {}), ((2, 4, 6), {"full_matrices": False}), ((40, 50), {"full_matrices": False}),
    ((6, 4), {"algorithm": "QR"}), ((2, 4, 6), {"algorithm": "QR", "full_matrices": False}),
    ((4, 6), {"algorithm": "QR"}), ((1030, 5), {"full_matrices": False})])
def test_gpu_svd(dtype, shape, kw):
  kw = dict(kw)
  if "algorithm" in kw:
    kw["algorithm"] = getattr(sc.lax.linalg.SvdAlgorithm, kw["algorithm"])
  a = _rand(shape, dtype)
  u, s, vt = (np.asarray(t) for t in sc.lax.linalg.svd(a, **kw))
  np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), rtol=TOL[dtype],
                             atol=TOL[dtype] * 10)
  k = s.shape[-1]
  recon = (u[..., :, :k] * s[..., None, :].astype(dtype)) @ vt[..., :k, :]
  np.testing.assert_allclose(recon, a, atol=TOL[dtype] * 20)
  s_only = np.asarray(sc.lax.linalg.svd(a, compute_uv=False, **{
      k_: v for k_, v in kw.items() if k_ == "algorithm"}))
  np.testing.assert_allclose(s_only, s, rtol=TOL[dtype], atol=TOL[dtype] * 10)


@on_gpu
def test_gpu_numpy_linalg_and_grads():
  a = _spd(4, np.float32, (2,))
  b = _rand((2, 4, 3), np.float32)
  np.testing.assert_allclose(np.asarray(sc.numpy.linalg.solve(a, b)), np.linalg.solve(a, b),
                             rtol=1e-3, atol=1e-3)
  np.testing.assert_allclose(np.asarray(sc.numpy.linalg.inv(a)), np.linalg.inv(a), rtol=1e-3,
                             atol=1e-3)
  np.testing.assert_allclose(np.asarray(sc.numpy.linalg.det(a)), np.linalg.det(a), rtol=1e-3)
  g = _rand((5, 3), np.float32)
  np.testing.assert_allclose(np.asarray(sc.numpy.linalg.pinv(g)), np.linalg.pinv(g), atol=1e-3)
  # derivatives through the GPU kernels, against the CPU (LAPACK) ones
  f = lambda x: sc.numpy.sum(sc.numpy.linalg.eigh(x)[0] ** 2) + sc.numpy.sum(
      sc.numpy.linalg.svd(x, compute_uv=False)) + sc.numpy.sum(sc.numpy.linalg.cholesky(x))
  grad_gpu = np.asarray(sc.grad(f)(a[0]))
  cpu = sc.devices("cpu")[0]
  grad_cpu = np.asarray(sc.jit(sc.grad(f), device=cpu)(a[0]))
  np.testing.assert_allclose(grad_gpu, grad_cpu, rtol=2e-3, atol=2e-3)


def test_modules_are_lowered_for_the_target_devices_platform():
  """`jit(f, device=d)` lowers for d's platform, not the default backend's (on a GPU machine,
  a jit on a CPU device must call LAPACK, not cuSOLVER)."""
  import types
  from stagecraft.interpreters import lowering
  x = np.eye(3, dtype=np.float32)
  with lowering.for_device(types.SimpleNamespace(platform="cuda")):
    text = sc.jit(sc.lax.linalg.cholesky).lower(x).as_text()
    assert "cusolver_potrf_ffi" in text
    with lowering.for_device(None):   # no device: unchanged
      assert "cusolver_syevd_ffi" in sc.jit(sc.lax.linalg.eigh).lower(x).as_text()
  cpu = sc.devices("cpu")[0]
  text = sc.jit(sc.lax.linalg.cholesky, device=cpu).lower(x).as_text()
  assert "lapack_spotrf_ffi" in text
  np.testing.assert_allclose(np.asarray(sc.jit(sc.lax.linalg.cholesky, device=cpu)(x)), x)


@on_gpu
def test_gpu_tridiagonal_ormqr_tridiagonal_solve():
  rng = np.random.default_rng(5)
  a = _spd(5, np.float32, (2,))
  arr, d, e, taus = (np.asarray(t) for t in sc.lax.linalg.tridiagonal(a))
  t = np.zeros_like(a)
  idx = np.arange(5)
  t[:, idx, idx] = d
  t[:, idx[1:], idx[:-1]] = e
  t[:, idx[:-1], idx[1:]] = e
  np.testing.assert_allclose(np.linalg.eigvalsh(t), np.linalg.eigvalsh(a), rtol=1e-3, atol=1e-3)
  x = rng.standard_normal((6, 4)).astype(np.float32)
  q_ref, _ = np.linalg.qr(x, mode="complete")
  h, tau = sc.lax.linalg.geqrf(x)
  c = rng.standard_normal((6, 2)).astype(np.float32)
  qc = np.asarray(sc.lax.linalg.ormqr(h, tau, c, left=True, transpose=False))
  q = np.asarray(sc.lax.linalg.householder_product(
      np.pad(np.asarray(h), ((0, 0), (0, 2))), np.pad(np.asarray(tau), (0, 2))))
  np.testing.assert_allclose(qc, q @ c, rtol=1e-3, atol=1e-3)
  for m in (2, 6):
    dl, dd, du = (rng.standard_normal((m,)).astype(np.float32) for _ in range(3))
    dd = dd + 4
    dl[0] = 0
    du[-1] = 0
    b = rng.standard_normal((m, 3)).astype(np.float32)
    full = np.diag(dd) + np.diag(dl[1:], -1) + np.diag(du[:-1], 1)
    np.testing.assert_allclose(np.asarray(sc.lax.linalg.tridiagonal_solve(dl, dd, du, b)),
                               np.linalg.solve(full, b), rtol=1e-3, atol=1e-3)


@on_gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_eig_and_pivoted_qr(dtype):
  a = _rand((2, 5, 5), dtype)
  w, vl, vr = (np.asarray(t) for t in sc.lax.linalg.eig(a))
  ref = np.linalg.eigvals(a)
  np.testing.assert_allclose(np.sort_complex(w), np.sort_complex(ref), rtol=1e-3, atol=1e-3)
  np.testing.assert_allclose(a @ vr, vr * w[..., None, :], atol=1e-3)
  np.testing.assert_allclose(np.conj(np.swapaxes(vl, -1, -2)) @ a,
                             w[..., :, None] * np.conj(np.swapaxes(vl, -1, -2)), atol=1e-3)
  w2 = np.asarray(sc.numpy.linalg.eigvals(a))
  np.testing.assert_allclose(np.sort_complex(w2), np.sort_complex(ref), rtol=1e-3, atol=1e-3)
  x = _rand((6, 4), dtype)
  q, r, p = (np.asarray(t) for t in sc.lax.linalg.qr(x, pivoting=True, full_matrices=False))
  np.testing.assert_allclose(q @ r, x[:, p], atol=1e-3)
  assert np.all(np.diff(np.abs(np.diagonal(r))) <= 1e-4)   # pivoting: |R_ii| decreasing

