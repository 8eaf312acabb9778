"""`stagecraft.scipy.sparse.linalg` (`cg`, `gmres`, `bicgstab`) against NumPy's direct
solve, SciPy's solvers and JAX 0.10.2's: values (matrices, functions, pytrees,
preconditioners, x0, maxiter), derivatives (check_grads and vs JAX), jit, vmap, x64, and the
errors JAX raises."""
import jax
import jax.scipy.sparse.linalg as jsl
import numpy as np
import pytest
import scipy.sparse.linalg as spl

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.scipy.sparse import linalg as ssl
from stagecraft.test_util import check_grads

f32 = np.float32
_R = np.random.default_rng(1)
N = 8
_G = _R.standard_normal((N, N))
SPD = (_G @ _G.T + N * np.eye(N)).astype(f32)
GEN = (_G + N * np.eye(N)).astype(f32)
B = _R.standard_normal(N).astype(f32)
X0 = _R.standard_normal(N).astype(f32)
DIAG_PRE = np.diag(1 / np.diag(GEN)).astype(f32)

SOLVERS = {"cg": (ssl.cg, jsl.cg, spl.cg, SPD),
           "bicgstab": (ssl.bicgstab, jsl.bicgstab, spl.bicgstab, GEN),
           "gmres": (ssl.gmres, jsl.gmres, spl.gmres, GEN)}


# NB: the solvers are jitted in these tests: eagerly, each of their many small operations
# would be compiled on its own.
@pytest.mark.parametrize("name,opts", [
    ("cg", {}), ("cg", {"x0": X0}), ("cg", {"M": "pre"}), ("cg", {"maxiter": 2}),
    ("bicgstab", {}), ("bicgstab", {"M": "pre"}), ("bicgstab", {"tol": 1e-3}),
    ("gmres", {"x0": X0, "M": "pre"}), ("gmres", {"maxiter": 1, "restart": 2})])
def test_values_as_jax_and_numpy(name, opts):
  ours, theirs, _, a = SOLVERS[name]
  opts = dict(opts)
  if opts.get("M") == "pre":
    opts["M"] = DIAG_PRE if name != "cg" else np.diag(1 / np.diag(SPD)).astype(f32)
  got = sc.jit(lambda a, b: ours(a, b, **opts))(a, B)
  want = jax.jit(lambda a, b: theirs(a, b, **opts))(a, B)
  np.testing.assert_allclose(got[0], want[0], rtol=2e-4, atol=2e-5)
  assert got[0].dtype == want[0].dtype and got[0].shape == want[0].shape
  if name == "gmres":
    assert int(got[1]) == int(want[1]) == 0
  else:
    assert got[1] is None
  if "maxiter" not in opts and "tol" not in opts and "atol" not in opts:
    np.testing.assert_allclose(got[0], np.linalg.solve(a, B), rtol=2e-3, atol=1e-4)


@pytest.mark.parametrize("method,restart", [("batched", 20), ("incremental", 3)])
def test_gmres_methods_as_jax_and_scipy(method, restart):
  got, info = sc.jit(lambda a, b: ssl.gmres(a, b, restart=restart, solve_method=method))(
      GEN, B)
  want, _ = jax.jit(lambda a, b: jsl.gmres(a, b, restart=restart, solve_method=method))(
      GEN, B)
  np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)
  ref, ok = spl.gmres(GEN.astype(np.float64), B.astype(np.float64), restart=restart,
                      rtol=1e-10)
  assert ok == 0
  np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-4)


def test_function_operators_and_pytrees():
  # A block-diagonal operator on a dict: both blocks solved at once.
  b = {"u": B, "v": B[:3]}
  small = SPD[:3, :3]

  def ours_op(x):
    return {"u": jnp.dot(SPD, x["u"]), "v": jnp.dot(small, x["v"])}

  def jax_op(x):
    return {"u": jax.numpy.dot(SPD, x["u"]), "v": jax.numpy.dot(small, x["v"])}
  for name in ("cg", "gmres"):
    ours, theirs = SOLVERS[name][:2]
    got, want = sc.jit(lambda b: ours(ours_op, b)[0])(b), jax.jit(lambda b: theirs(jax_op, b)[0])(b)
    assert sorted(got) == ["u", "v"]
    np.testing.assert_allclose(got["u"], np.linalg.solve(SPD, B), rtol=2e-3, atol=1e-4)
    np.testing.assert_allclose(got["v"], np.linalg.solve(small, B[:3]), rtol=2e-3, atol=1e-4)
    for k in b:
      np.testing.assert_allclose(got[k], want[k], rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_derivatives(name):
  ours, theirs, _, a = SOLVERS[name]
  if name != "gmres":   # (gmres's programs are the slowest to compile: vs JAX only)
    with sc.enable_x64():
      a64, b64 = a.astype(np.float64), B.astype(np.float64)
      f = sc.jit(lambda a, b: ours(a, b, tol=1e-12)[0])
      check_grads(f, (a64, b64), order=1, modes=("fwd", "rev"), atol=1e-4, rtol=1e-4)
  # vs JAX's gradient, float32.
  gs = sc.jit(sc.grad(lambda a, b: ours(a, b)[0].sum(), (0, 1)))(a, B)
  gj = jax.jit(jax.grad(lambda a, b: theirs(a, b)[0].sum(), (0, 1)))(a, B)
  for g, w in zip(gs, gj):
    np.testing.assert_allclose(g, w, rtol=2e-3, atol=2e-4)


def test_eager_and_vmap():
  bs = np.stack([B, 2 * B, -B])
  got = ssl.cg(SPD, B)[0]   # eagerly, once
  np.testing.assert_allclose(got, jax.jit(lambda a, b: jsl.cg(a, b)[0])(SPD, B), rtol=2e-4,
                             atol=2e-5)
  for name in ("cg", "bicgstab", "gmres"):
    ours, theirs, _, a = SOLVERS[name]
    got = sc.jit(sc.vmap(lambda b: ours(a, b)[0]))(bs)
    want = np.stack([np.linalg.solve(a, b) for b in bs])
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-4)


def test_x64_dtype():
  with sc.enable_x64(), jax.enable_x64(True):
    a64, b64 = SPD.astype(np.float64), B.astype(np.float64)
    x, _ = sc.jit(lambda a, b: ssl.cg(a, b, tol=1e-12))(a64, b64)
    assert x.dtype == np.float64
    np.testing.assert_allclose(x, np.linalg.solve(a64, b64), rtol=1e-9)
    x, info = sc.jit(lambda a, b: ssl.gmres(a, b, tol=1e-12))(GEN.astype(np.float64), b64)
    np.testing.assert_allclose(x, np.linalg.solve(GEN.astype(np.float64), b64), rtol=1e-8)


def test_complex_bicgstab():
  c = (GEN + 0.5j * np.eye(N)).astype(np.complex64)
  bc = (B + 1j * B[::-1]).astype(np.complex64)
  for ours, theirs in ((ssl.bicgstab, jsl.bicgstab),):
    got = sc.jit(lambda a, b: ours(a, b)[0])(c, bc)
    assert got.dtype == np.complex64
    np.testing.assert_allclose(got, np.linalg.solve(c, bc), rtol=2e-3, atol=2e-4)
    want = jax.jit(lambda a, b: theirs(a, b)[0])(c, bc)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)


def _msg(f):
  with pytest.raises(Exception) as e:
    f()
  return type(e.value), str(e.value)


@pytest.mark.parametrize("case", ["nonsquare", "not_linear_op", "x0_shape", "x0_tree",
                                  "method"])
def test_errors_as_jax(case):
  def call(mod):
    if case == "nonsquare":
      return lambda: mod.cg(np.ones((2, 3), f32), np.ones(2, f32))
    if case == "not_linear_op":
      return lambda: mod.cg("A", np.ones(2, f32))
    if case == "x0_shape":
      return lambda: mod.bicgstab(GEN, B, x0=np.ones(3, f32))
    if case == "x0_tree":
      return lambda: mod.cg(SPD, B, x0=(X0,))
    return lambda: mod.gmres(GEN, B, solve_method="qr")
  ts, ms = _msg(call(ssl))
  tj, mj = _msg(call(jsl))
  assert ts is tj
  if case not in ("x0_tree", "not_linear_op"):   # treedefs and reprs print differently
    assert ms == mj
  else:
    assert ms.split(":")[0] == mj.split(":")[0]
