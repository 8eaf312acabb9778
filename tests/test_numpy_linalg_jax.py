"""`stagecraft.numpy.linalg` against JAX 0.10.2's `jax.numpy.linalg`: printed jaxprs (the
functions JAX jits are jitted with the same names and static arguments), values, dtypes and
weak types (x64 off and on), derivatives, vmap, JAX's error messages, and the tensor
functions (`tensorinv`, `tensorsolve`) against NumPy."""
import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.test_util import check_grads

f32, c64 = np.float32, np.complex64
_R = np.random.default_rng(0)
A = _R.standard_normal((4, 4)).astype(f32)
S = (A @ A.T + 4 * np.eye(4)).astype(f32)
RECT = _R.standard_normal((5, 3)).astype(f32)
BATCH = _R.standard_normal((2, 4, 4)).astype(f32)
_C = (_R.standard_normal((3, 3)) + 1j * _R.standard_normal((3, 3))).astype(c64)
CPLX = _C
HERM = (_C @ _C.conj().T + 3 * np.eye(3)).astype(c64)
V = _R.standard_normal(4).astype(f32)
T236 = _R.standard_normal((2, 3, 6)).astype(f32)
TINV = (np.eye(6) + 0.1 * _R.standard_normal((6, 6))).astype(f32).reshape(2, 3, 6)
ONES23 = np.ones((2, 3), f32)


def _case(name, *args, **kw):
  return pytest.param(name, args, kw, id=f"{name}-{len(args)}-{sorted(kw.items())}")


# Printed jaxprs equal to JAX's (whole program, inner equations included).
SAME = [
    _case("matrix_rank", BATCH, rtol=0.1), _case("pinv", RECT, rtol=0.1),
    _case("cholesky", S), _case("cholesky", S, upper=True), _case("cholesky", HERM, upper=True),
    _case("cholesky", S, symmetrize_input=False),
    _case("svd", RECT), _case("svd", RECT, full_matrices=False),
    _case("svd", RECT, compute_uv=False), _case("svd", S, hermitian=True, compute_uv=False),
    _case("svd", CPLX), _case("svdvals", BATCH),
    _case("eigh", S), _case("eigh", S, UPLO="U"), _case("eigh", HERM),
    _case("eigh", S, symmetrize_input=False), _case("eigvalsh", S),
    _case("eigvalsh", HERM, UPLO="U"), _case("eigvals", A), _case("eig", A),
    _case("qr", RECT), _case("qr", RECT, mode="complete"), _case("qr", RECT, mode="r"),
    _case("qr", RECT, mode="raw"), _case("qr", CPLX),
    _case("norm", A), _case("norm", V), _case("norm", A, ord=1), _case("norm", A, ord=-1),
    _case("norm", A, ord=np.inf), _case("norm", A, ord=-np.inf), _case("norm", A, ord=2),
    _case("norm", A, ord=-2), _case("norm", A, ord="nuc"),
    _case("norm", A, ord="fro", keepdims=True),
    _case("norm", BATCH, axis=(0, 2), ord=1, keepdims=True), _case("norm", BATCH, axis=1, ord=3),
    _case("norm", V, ord=0), _case("norm", V, ord=np.inf), _case("norm", CPLX, ord=2),
    _case("norm", BATCH, axis=(2, 1), ord=np.inf),
    _case("matrix_norm", BATCH), _case("matrix_norm", BATCH, ord="nuc", keepdims=True),
    _case("vector_norm", BATCH, axis=(1, 2), ord=1), _case("vector_norm", V, ord=0.5),
    _case("vector_norm", CPLX),
    _case("matrix_rank", A), _case("matrix_rank", S, hermitian=True), _case("matrix_rank", V),
    _case("matrix_power", A, n=0), _case("matrix_power", A, n=1), _case("matrix_power", A, n=2),
    _case("matrix_power", A, n=3), _case("matrix_power", A, n=5),
    _case("matrix_power", A.astype(np.int32), n=3),
    _case("pinv", RECT), _case("pinv", CPLX), _case("pinv", BATCH),
    _case("cond", A), _case("cond", A, p=-2), _case("cond", RECT),
    _case("det", A[:1, :1]), _case("det", A[:2, :2]), _case("det", A[:3, :3]), _case("det", CPLX),
    _case("slogdet", A[:1, :1]), _case("slogdet", A[:2, :2]),
    _case("lstsq", RECT, RECT[:, 0]), _case("lstsq", A, A[:, :2]),
    _case("multi_dot", [A, A, A]), _case("multi_dot", [RECT.T, RECT, A[:3, :3]]),
    _case("outer", V, V), _case("matmul", BATCH, A), _case("tensordot", BATCH, A),
    _case("tensordot", BATCH, A, axes=1), _case("matrix_transpose", BATCH),
    # take_along_axis jitted as JAX's (svd(hermitian=True)).
    _case("svd", S, hermitian=True), _case("pinv", S, hermitian=True),
    # einsum's operand order as JAX's (multi_dot).
    _case("multi_dot", [V, A, A, V]), _case("multi_dot", [A, V]),
    # jnp.trace and jnp.cross jitted as JAX's; jnp.vecdot a vectorized vdot.
    _case("trace", BATCH), _case("trace", BATCH, offset=1),
    _case("cross", RECT, RECT), _case("cross", RECT.T, RECT.T, axis=0),
    _case("vecdot", BATCH, A), _case("vecdot", RECT, RECT, axis=0),
    # jnp.diagonal jitted as JAX's; the `copy` of jnp.array(tracer, dtype) (lstsq's rcond).
    _case("diagonal", BATCH, offset=-1), _case("lstsq", RECT, RECT, rcond=0.1),
    # solve as JAX's: a custom_linear_solve over one LU (vecmat by linear transposition, which
    # records the identity broadcast of matvec's input); inv, matrix_power(n < 0),
    # cond(p not in None/2/-2), tensorinv and tensorsolve call solve.
    _case("solve", A, V), _case("solve", BATCH, A), _case("inv", A),
    _case("matrix_power", A, n=-2), _case("cond", A, p=1), _case("cond", A, p="fro"),
    _case("tensorinv", TINV), _case("tensorsolve", T236, ONES23),
    # det (n >= 4) and slogdet (n >= 3): jnp.diagonal of the square LU factor is JAX's
    # platform_dependent (a platform_index and a cond with branches_platforms).
    _case("det", A), _case("slogdet", A), _case("slogdet", A, method="qr"),
]


def _jaxprs(name, args, kw):
  fj, fs = getattr(jjnp.linalg, name), getattr(jnp.linalg, name)
  jj = jax.make_jaxpr(lambda *x: fj(*x, **kw))(*args)
  js = sc.make_jaxpr(lambda *x: fs(*x, **kw))(*args)
  return jj, js


@pytest.mark.parametrize("name,args,kw", SAME)
def test_jaxpr_same_as_jax(name, args, kw):
  jj, js = _jaxprs(name, args, kw)
  assert str(js) == str(jj)


def test_jaxpr_same_as_jax_x64():
  a64, r64 = A.astype(np.float64), RECT.astype(np.float64)
  with sc.enable_x64(), jax.enable_x64(True):
    for name, args, kw in [("norm", (a64,), dict(ord=2)), ("matrix_rank", (a64,), {}),
                           ("pinv", (r64,), {}), ("pinv", (r64,), dict(rtol=0.1)),
                           ("eigvalsh", (S,), {}), ("svd", (a64,), {}), ("qr", (r64,), {}),
                           ("det", (a64[:3, :3],), {}), ("slogdet", (a64[:2, :2],), {}),
                           ("cond", (a64,), {}), ("matrix_power", (a64,), dict(n=6))]:
      jj, js = _jaxprs(name, args, kw)
      assert str(js) == str(jj), name
    # lax.linalg.cholesky masks the upper triangle with int64 iotas under x64, as JAX's.
    jj, js = _jaxprs("cholesky", (S.astype(np.float64),), {})
    assert str(js) == str(jj)


# -- values, dtypes and weak types ---------------------------------------------------------

VALUES = SAME + [
    _case("norm", 3.0), _case("norm", 3), _case("vector_norm", V.astype(np.int32), ord=1),
    _case("vector_norm", V.astype(np.int32), ord=np.inf), _case("vector_norm", V.astype(np.int32)),
    _case("det", A.astype(np.int32)), _case("inv", S.astype(np.float64)),
    _case("slogdet", CPLX), _case("slogdet", HERM), _case("slogdet", np.zeros((2, 0, 0), f32)),
    _case("det", np.zeros((4, 4), f32)), _case("slogdet", np.zeros((4, 4), f32)),
    _case("cond", np.zeros((3, 3), f32)), _case("cond", np.zeros((3, 3), f32), p=1),
    _case("lstsq", np.zeros((3, 0), f32), np.ones(3, f32)),
    _case("pinv", np.zeros((2, 0, 3), f32)), _case("matrix_rank", np.zeros((3, 3), f32)),
    _case("eigh", np.array([[2., 1.], [5., 3.]], f32), UPLO="U"),
]


def _leaves_equal(got, want, rtol):
  lw = jax.tree_util.tree_leaves(want)
  lg = sc.tree_util.tree_leaves(got)
  assert len(lg) == len(lw)
  for g, w in zip(lg, lw):
    assert (g.shape, g.dtype, g.weak_type) == (w.shape, w.dtype, w.weak_type)
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=rtol,
                               equal_nan=True)


@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("name,args,kw", VALUES)
def test_values_as_jax(name, args, kw, x64):
  fj, fs = getattr(jjnp.linalg, name), getattr(jnp.linalg, name)
  with sc.enable_x64(x64), jax.enable_x64(x64):
    want = fj(*args, **kw)
    got = fs(*args, **kw)
    if type(want).__name__ in ("SVDResult", "EighResult", "QRResult", "SlogdetResult",
                               "EigResult"):
      assert type(got).__name__ == type(want).__name__
      assert got._fields == want._fields
    _leaves_equal(got, want, 2e-4)


def test_results_under_jit_and_vmap():
  for name, args, kw in [("det", (BATCH,), {}), ("slogdet", (BATCH,), {}),
                         ("inv", (BATCH,), {}), ("pinv", (BATCH,), {}),
                         ("norm", (BATCH,), dict(ord=2, axis=(0, 1))),
                         ("matrix_rank", (BATCH,), {}), ("cond", (BATCH,), dict(p=1)),
                         ("eigvalsh", (BATCH,), {}), ("matrix_power", (BATCH,), dict(n=-3))]:
    fj, fs = getattr(jjnp.linalg, name), getattr(jnp.linalg, name)
    want = jax.vmap(lambda x: fj(x, **kw))(*args)
    _leaves_equal(sc.vmap(lambda x: fs(x, **kw))(*args), want, 2e-4)
    _leaves_equal(sc.jit(lambda x: fs(x, **kw))(*args), fj(*args, **kw), 2e-4)


# -- derivatives ----------------------------------------------------------------------------

def _grads_as_jax(name, args, kw, argnums=0, tol=1e-7):
  """Reverse- and forward-mode derivatives of a scalar function of the results equal JAX's
  (x64 on both sides; each side jitted, so that it compiles once)."""
  fj, fs = getattr(jjnp.linalg, name), getattr(jnp.linalg, name)

  def scal(f, np_, leaves):
    def g(*x):
      return sum(np_.sum(np_.real(l) * (i + 1)) for i, l in enumerate(leaves(f(*x, **kw))))
    return g

  def side(api, np_, f, leaves):
    def run(args, t):
      g = api.grad(scal(f, np_, leaves), argnums)(*args)
      part = lambda x: f(*args[:argnums], x, *args[argnums + 1:], **kw)  # noqa: E731
      return g, api.jvp(part, (args[argnums],), (t,))[1]
    return api.jit(run)

  rng = np.random.default_rng(1)
  with sc.enable_x64(), jax.enable_x64(True):
    args = [np.asarray(a, np.complex128 if np.iscomplexobj(a) else np.float64) for a in args]
    t = rng.standard_normal(np.shape(args[argnums])).astype(args[argnums].dtype)
    gj, tj = side(jax, jjnp, fj, jax.tree_util.tree_leaves)(args, t)
    gs, ts = side(sc, jnp, fs, sc.tree_util.tree_leaves)(args, t)
    np.testing.assert_allclose(np.asarray(gs), np.asarray(gj), rtol=tol, atol=tol)
    for a, b in zip(sc.tree_util.tree_leaves(ts), jax.tree_util.tree_leaves(tj)):
      assert (a.shape, a.dtype) == (b.shape, b.dtype)
      if a.dtype != jax.dtypes.float0:   # the tangent of lstsq's integer rank
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


_SING4 = np.array([[1., 2., 3., 4.], [2., 4., 6., 8.], [0., 1., 5., 2.], [3., 1., 0., 1.]])
_RANK2 = np.array([[1., 2., 3., 4.], [2., 4., 6., 8.], [3., 6., 9., 12.], [3., 1., 0., 1.]])


@pytest.mark.parametrize("name,args,kw", [
    _case("det", A), _case("det", A[:3, :3]), _case("det", A[:1, :1]), _case("det", _SING4),
    _case("det", _RANK2), _case("det", BATCH), _case("det", CPLX @ CPLX + np.eye(3)),
    _case("det", np.kron(np.eye(2), CPLX)),
    _case("slogdet", A), _case("slogdet", A[:2, :2]), _case("slogdet", A[:1, :1]),
    _case("slogdet", np.kron(np.eye(2), CPLX)), _case("slogdet", CPLX[:2, :2]),
    _case("slogdet", A, method="qr"),
    _case("inv", A), _case("pinv", RECT), _case("pinv", RECT.T), _case("pinv", S, hermitian=True),
    _case("norm", A, ord=2), _case("norm", A, ord="nuc"), _case("eigvalsh", S),
    _case("cholesky", S, upper=True), _case("matrix_power", A, n=-3), _case("cond", A),
    _case("tensorinv", TINV), _case("svdvals", RECT),
])
def test_grads_as_jax(name, args, kw):
  _grads_as_jax(name, args, kw)


def test_grads_solve_lstsq_tensorsolve():
  _grads_as_jax("solve", (A, BATCH), {}, argnums=0)
  _grads_as_jax("solve", (A, BATCH), {}, argnums=1)
  _grads_as_jax("lstsq", (RECT, RECT[:, :2]), {}, argnums=0, tol=1e-6)
  _grads_as_jax("tensorsolve", (T236, ONES23), {}, argnums=0)


def test_check_grads_finite_differences():
  with sc.enable_x64():
    a = A.astype(np.float64)
    check_grads(jnp.linalg.det, (a,), order=1, modes=("fwd", "rev"))
    check_grads(lambda x: jnp.linalg.slogdet(x)[1], (a,), order=1, modes=("fwd", "rev"))
    check_grads(jnp.linalg.pinv, (RECT.astype(np.float64),), order=1, modes=("fwd", "rev"))
    check_grads(lambda x: jnp.linalg.tensorinv(x, ind=2), (TINV.astype(np.float64),),
                order=1, modes=("fwd", "rev"))


def test_det_grad_at_singular_matrices_is_the_adjugate():
  """d det / da = adj(a)^T, finite for a of rank n-1 and 0 for rank < n-1."""
  with sc.enable_x64():
    g = np.asarray(sc.grad(jnp.linalg.det)(_SING4))
    adj = np.zeros((4, 4))
    for i in range(4):
      for j in range(4):
        adj[i, j] = (-1) ** (i + j) * np.linalg.det(np.delete(np.delete(_SING4, i, 0), j, 1))
    np.testing.assert_allclose(g, adj, atol=1e-10)
    assert not np.any(np.asarray(sc.grad(jnp.linalg.det)(_RANK2)))


# -- tensorinv / tensorsolve ----------------------------------------------------------------

@pytest.mark.parametrize("x64", [False, True])
def test_tensorinv_numpy(x64):
  with sc.enable_x64(x64):
    a = np.eye(24).reshape(4, 6, 8, 3) + 0.05 * _R.standard_normal((4, 6, 8, 3))
    a = a.astype(np.float64 if x64 else f32)
    want = np.linalg.tensorinv(a, ind=2)
    got = jnp.linalg.tensorinv(a, ind=2)
    assert got.shape == (8, 3, 4, 6) and got.dtype == a.dtype
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
    b = a.reshape(24, 24)
    np.testing.assert_allclose(np.asarray(jnp.linalg.tensorinv(a.reshape(4, 6, 24), ind=2)),
                               np.linalg.tensorinv(a.reshape(4, 6, 24), ind=2), rtol=1e-4,
                               atol=1e-4)
    np.testing.assert_allclose(np.asarray(jnp.linalg.tensorinv(b, ind=1)),
                               np.linalg.inv(b), rtol=1e-4, atol=1e-4)
    e = np.eye(4, dtype=np.int32).reshape(4, 2, 2)
    with jax.enable_x64(x64):
      assert jnp.linalg.tensorinv(e, ind=1).dtype == jjnp.linalg.tensorinv(e, ind=1).dtype


@pytest.mark.parametrize("axes", [None, (0, 1), (1,), (1, 3), (1, 0)])
def test_tensorsolve_numpy(axes):
  """NumPy's semantics: the axes listed are moved to the end one after the other (JAX
  0.10.2 sorts them, which differs for (1, 0))."""
  a0 = (np.eye(6).reshape(2, 3, 2, 3) + 0.1 * _R.standard_normal((2, 3, 2, 3))).astype(f32)
  b = _R.standard_normal((2, 3)).astype(f32)
  a = {None: a0, (0, 1): a0.transpose(2, 3, 0, 1), (1,): a0.reshape(2, 3, 6).transpose(0, 2, 1),
       (1, 3): a0.transpose(0, 2, 1, 3), (1, 0): a0.transpose(3, 2, 0, 1)}[axes]
  a = np.ascontiguousarray(a)
  if axes == (1,):
    b = b.reshape(2, 3)
  want = np.linalg.tensorsolve(a, b, axes=axes)
  got = jnp.linalg.tensorsolve(a, b, axes=axes)
  assert got.shape == want.shape and got.dtype == f32
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
  if axes != (1, 0):
    np.testing.assert_allclose(np.asarray(got), np.asarray(jjnp.linalg.tensorsolve(a, b, axes)),
                               rtol=1e-5, atol=1e-5)
  with sc.enable_x64():
    got = jnp.linalg.tensorsolve(a.astype(np.float64), b.astype(np.float64), axes=axes)
    assert got.dtype == np.float64
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)


def test_tensor_errors_as_jax():
  with pytest.raises(ValueError, match=r"ind must be a positive integer; got ind=0"):
    jnp.linalg.tensorinv(TINV, ind=0)
  with pytest.raises(TypeError):
    jnp.linalg.tensorinv(TINV, ind=1.5)
  with pytest.raises(ValueError, match=r"tensorinv is only possible when the product of the "
                     r"first `ind` dimensions equals that of the remaining dimensions. got "
                     r"arr.shape=\(2, 3, 6\) with ind=1."):
    jnp.linalg.tensorinv(TINV, ind=1)
  with pytest.raises(ValueError, match=r"leading shape of a must match shape of b. got "
                     r"a.shape=\(2, 3, 6\), b.shape=\(3, 2\)"):
    jnp.linalg.tensorsolve(T236, ONES23.T)
  with pytest.raises(ValueError, match=r"Input arrays must have prod\(a.shape\[:b.ndim\]\) == "
                     r"prod\(a.shape\[b.ndim:\]\); got a.shape=\(2, 3, 5\), b.ndim=2."):
    jnp.linalg.tensorsolve(T236[..., :5], ONES23)
  with pytest.raises(TypeError, match="tensorinv requires ndarray or scalar arguments"):
    jnp.linalg.tensorinv(TINV.tolist())
  for f, args in [(jnp.linalg.tensorinv, (TINV, 0)), (jnp.linalg.tensorsolve, (T236, ONES23.T))]:
    jf = getattr(jjnp.linalg, f.__name__)
    with pytest.raises(ValueError) as ours:
      f(*args)
    with pytest.raises(ValueError) as theirs:
      jf(*args)
    assert str(ours.value) == str(theirs.value)


# -- JAX's errors ---------------------------------------------------------------------------

@pytest.mark.parametrize("name,args,kw,exc", [
    ("matrix_power", (V,), dict(n=2), TypeError), ("matrix_power", (RECT,), dict(n=2), TypeError),
    ("matrix_power", (A,), dict(n=1.5), TypeError),
    ("cross", (RECT[:, :2], RECT[:, :2]), {}, ValueError), ("outer", (A, V), {}, ValueError),
    ("matrix_transpose", (V,), {}, ValueError),
    ("multi_dot", ([A, A][:1],), {}, ValueError), ("multi_dot", ([A, BATCH],), {}, ValueError),
    ("multi_dot", ([A, RECT],), {}, ValueError),
    ("cond", (V,), {}, ValueError), ("cond", (np.zeros((0, 0), f32),), {}, ValueError),
    ("cond", (RECT,), dict(p=1), ValueError),
    ("slogdet", (A,), dict(method="bogus"), ValueError),
    ("slogdet", (CPLX,), dict(method="qr"), NotImplementedError),
    ("inv", (RECT,), {}, ValueError), ("det", (RECT,), {}, ValueError),
    ("matrix_rank", (A,), dict(rtol=0.1, tol=0.1), ValueError),
    ("pinv", (A,), dict(rtol=0.1, rcond=0.1), ValueError),
    ("lstsq", (A, RECT), {}, ValueError), ("lstsq", (BATCH, BATCH), {}, TypeError),
    ("det", (A.tolist(),), {}, TypeError), ("svd", ((A, A),), {}, TypeError),
    ("norm", ([1.0, 2.0],), {}, TypeError),
])
def test_errors_as_jax(name, args, kw, exc):
  fj, fs = getattr(jjnp.linalg, name), getattr(jnp.linalg, name)
  with pytest.raises(exc) as theirs:
    fj(*args, **kw)
  with pytest.raises(exc) as ours:
    fs(*args, **kw)
  if (name, len(args[0])) != ("multi_dot", 1):   # JAX's message there is mistaken
    assert str(ours.value) == str(theirs.value)


def test_signatures_as_jax():
  import inspect
  for name in jjnp.linalg.__all__ if hasattr(jjnp.linalg, "__all__") else dir(jjnp.linalg):
    if name.startswith("_") or not callable(getattr(jjnp.linalg, name)):
      continue
    fs = getattr(jnp.linalg, name)
    if isinstance(fs, type):
      continue
    sj = inspect.signature(getattr(jjnp.linalg, name))
    ss = inspect.signature(fs)
    def shape(sig):
      return [(p.name, p.kind, p.default if not isinstance(p.default, float) or
               not np.isnan(p.default) else "nan") for p in sig.parameters.values()]
    assert shape(ss) == shape(sj), name
