"""Autodiff rules of dot_general, conv_general_dilated, the windowed reductions
(reduce_window_sum/max/min, select_and_gather_add, select_and_scatter_add), fft and the
linear-algebra primitives: finite-difference checks (float64, orders 1 and 2, forward and
reverse mode) and comparisons with JAX's derivatives."""
import zlib

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft
import stagecraft.numpy as jnp
from stagecraft import lax
from stagecraft.interpreters import lowering, partial_eval as pe
from stagecraft.lax import linalg as lax_linalg
from stagecraft.test_util import check_grads

from _util import assert_trees_allclose

RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _seed_per_test(request):
  """Each test draws its inputs from its own seed, independent of the tests that ran before."""
  global RNG
  RNG = np.random.default_rng(zlib.crc32(request.node.name.encode()))


def _randn(*shape):
  return RNG.standard_normal(shape)


def _crandn(*shape):
  return RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)


def _allclose_tree(got, want, **tol):
  assert_trees_allclose(got, want, **tol)


def _like(out, rng, cplx_imag=True):
  """A random cotangent/tangent shaped like each leaf of `out` (complex for complex leaves)."""
  def one(o):
    if not hasattr(o, "dtype"):
      o = np.asarray(o)
    v = rng.standard_normal(o.shape)
    if np.issubdtype(o.dtype, np.complexfloating) and cplx_imag:
      v = v + 1j * rng.standard_normal(o.shape)
    return v.astype(o.dtype)
  return jax.tree_util.tree_map(one, tuple(out) if isinstance(out, list) else out)


def _compare_with_jax(f, jf, args, tol=1e-8, seed=0):
  """jvp and vjp of `f` (stagecraft) and `jf` (JAX) agree at `args` (x64 on both sides)."""
  rng = np.random.default_rng(seed)
  with stagecraft.enable_x64(), jax.enable_x64(True):
    ct = _like(jax.eval_shape(jf, *args), rng)
    tangents = tuple(_like(a, rng) for a in args)

    @jax.jit  # one compilation for JAX's side instead of one per operation
    def jax_side(args, ct, tangents):
      jout, jvjp = jax.vjp(jf, *args)
      return jout, jvjp(ct), jax.jvp(jf, args, tangents)[1]

    @stagecraft.jit  # the same on stagecraft's side: the rules run while tracing
    def our_side(args, ct, tangents):
      out, vjp = stagecraft.vjp(f, *args)
      return out, vjp(ct), stagecraft.jvp(f, args, tangents)[1]

    jout, jct, jt = jax_side(args, ct, tangents)
    out, out_ct, out_t = our_side(args, ct, tangents)
    _allclose_tree(out, jout, rtol=tol, atol=tol)
    _allclose_tree(out_ct, jct, rtol=tol, atol=tol)
    _allclose_tree(out_t, jt, rtol=tol, atol=tol)


# ---------------------------------------------------------------------------
# dot_general

DOT_CASES = [
    ((3, 4), (4, 5), (((1,), (0,)), ((), ()))),                  # matmul
    ((4,), (4,), (((0,), (0,)), ((), ()))),                      # inner product
    ((3,), (5,), (((), ()), ((), ()))),                          # outer product
    ((2, 3, 4), (2, 4, 5), (((2,), (1,)), ((0,), (0,)))),        # batched matmul
    ((4, 2, 3), (3, 6, 2), (((2,), (0,)), ((1,), (2,)))),        # batch dims not leading
    ((5, 3, 2), (2, 7, 3, 5), (((1,), (2,)), ((0, 2), (3, 0)))),  # two batch dims, swapped
    ((3, 4, 5), (5, 4, 2), (((1, 2), (1, 0)), ((), ()))),        # two contracting dims
]


@pytest.mark.parametrize("ls,rs,dn", DOT_CASES, ids=[str(c[2]) for c in DOT_CASES])
def test_dot_general_grads(ls, rs, dn):
  with stagecraft.enable_x64():
    check_grads(lambda x, y: lax.dot_general(x, y, dn), (_randn(*ls), _randn(*rs)), 2)


def test_dot_general_mixed_dtypes_and_preferred_element_type():
  x, y = _randn(3, 4), _randn(4, 2)
  x32 = x.astype(np.float32)
  with stagecraft.enable_x64():
    # f32 @ f64 -> f64: the f32 operand's cotangent is converted back to f32.
    f = lambda x, y: lax.dot(x, y)  # noqa: E731
    _, vjp = stagecraft.vjp(f, x32, y)
    ct = _randn(3, 2)
    gx, gy = vjp(ct)
    assert gx.dtype == np.float32 and gy.dtype == np.float64
    np.testing.assert_allclose(np.asarray(gx), ct @ y.T, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(gy), x32.astype(np.float64).T @ ct, rtol=1e-12)
    # f32 operands accumulated in f64.
    g = lambda x, y: lax.dot(x, y, preferred_element_type=np.float64)  # noqa: E731
    out, vjp = stagecraft.vjp(g, x32, y.astype(np.float32))
    assert out.dtype == np.float64
    gx, gy = vjp(ct)
    assert gx.dtype == gy.dtype == np.float32
    np.testing.assert_allclose(np.asarray(gx), ct @ y.T, rtol=1e-5)
    check_grads(g, (x32, y.astype(np.float32)), 1, atol=1e-2, rtol=1e-2)


def test_dot_general_matches_jax():
  lhs, rhs = _randn(2, 3, 4), _randn(2, 4, 5)
  dn = (((2,), (1,)), ((0,), (0,)))
  _compare_with_jax(lambda x, y: lax.dot_general(x, y, dn),
                    lambda x, y: jax.lax.dot_general(x, y, dn), (lhs, rhs))
  # complex operands follow JAX's convention (transposes, not adjoints)
  _compare_with_jax(lambda x, y: lax.dot_general(x, y, dn),
                    lambda x, y: jax.lax.dot_general(x, y, dn),
                    (_crandn(2, 3, 4), _crandn(2, 4, 5)))


# ---------------------------------------------------------------------------
# conv_general_dilated

CONV_CASES = {
    "1d_valid": ((2, 3, 7), (4, 3, 3), dict(window_strides=(1,), padding="VALID")),
    "1d_strided_same": ((2, 2, 9), (3, 2, 4), dict(window_strides=(2,), padding="SAME")),
    "2d_same_strides": ((2, 3, 8, 7), (4, 3, 3, 2), dict(window_strides=(2, 1), padding="SAME")),
    "2d_explicit_dilations": ((2, 3, 8, 7), (4, 3, 3, 2),
                              dict(window_strides=(2, 3), padding=((1, 2), (0, 1)),
                                   lhs_dilation=(2, 1), rhs_dilation=(1, 2))),
    "2d_negative_padding": ((1, 2, 7, 6), (2, 2, 2, 2),
                            dict(window_strides=(1, 2), padding=((-1, 2), (1, -1)))),
    "feature_group_count_2": ((2, 4, 8, 7), (6, 2, 3, 2),
                              dict(window_strides=(1, 2), padding="SAME", feature_group_count=2)),
    "batch_group_count_2": ((4, 3, 8, 7), (6, 3, 3, 2),
                            dict(window_strides=(1, 1), padding=((1, 0), (2, 1)),
                                 batch_group_count=2)),
    "nhwc_hwio": ((2, 8, 7, 3), (3, 2, 3, 4),
                  dict(window_strides=(2, 1), padding="SAME",
                       dimension_numbers=("NHWC", "HWIO", "NHWC"), rhs_dilation=(2, 1))),
    "nhwc_groups_nchw_out": ((2, 8, 7, 4), (3, 2, 2, 6),
                             dict(window_strides=(2, 1), padding="VALID",
                                  dimension_numbers=("NHWC", "HWIO", "NCHW"),
                                  feature_group_count=2)),
}


@pytest.mark.parametrize("name", list(CONV_CASES))
def test_conv_general_dilated_grads(name):
  ls, rs, kw = CONV_CASES[name]
  with stagecraft.enable_x64():
    check_grads(lambda x, w: lax.conv_general_dilated(x, w, **kw), (_randn(*ls), _randn(*rs)),
                2)


@pytest.mark.parametrize("name", ["2d_explicit_dilations", "batch_group_count_2",
                                  "nhwc_groups_nchw_out"])
def test_conv_general_dilated_matches_jax(name):
  ls, rs, kw = CONV_CASES[name]
  _compare_with_jax(lambda x, w: lax.conv_general_dilated(x, w, **kw),
                    lambda x, w: jax.lax.conv_general_dilated(x, w, **kw),
                    (_randn(*ls), _randn(*rs)), tol=1e-10)


def test_conv_transpose_grads():
  x, w = _randn(1, 5, 4, 2), _randn(3, 3, 2, 3)
  with stagecraft.enable_x64():
    check_grads(lambda x, w: lax.conv_transpose(x, w, (2, 2), "SAME"), (x, w), 1)


def test_conv_net_grad_matches_jax():
  """grad of a small conv net's loss (float32) against jax.grad."""
  rng = np.random.default_rng(3)
  x = rng.standard_normal((4, 10, 10, 3)).astype(np.float32)
  y = rng.standard_normal((4, 5)).astype(np.float32)
  params = [(0.3 * rng.standard_normal((3, 3, 3, 8))).astype(np.float32),
            (0.1 * rng.standard_normal((8,))).astype(np.float32),
            (0.2 * rng.standard_normal((3, 3, 4, 8))).astype(np.float32),
            (0.2 * rng.standard_normal((2 * 2 * 8, 5))).astype(np.float32)]
  dn = ("NHWC", "HWIO", "NHWC")

  def make_loss(L, np_):
    def loss(params, x, y):
      w1, b1, w2, w3 = params
      h = L.conv_general_dilated(x, w1, (1, 1), "SAME", dimension_numbers=dn)
      h = np_.maximum(h + b1, 0.0)
      h = L.reduce_window(h, -np.inf, L.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
      h = L.conv_general_dilated(h, w2, (1, 1), "SAME", dimension_numbers=dn,
                                 feature_group_count=2)
      h = np_.tanh(h)
      h = L.reduce_window(h, 0.0, L.add, (1, 3, 3, 1), (1, 2, 2, 1),
                         ((0, 0), (0, 1), (0, 1), (0, 0))) / 9.0
      h = np_.reshape(h, (h.shape[0], -1))
      logits = L.dot(h, w3)
      return np_.mean((logits - y) ** 2)
    return loss

  loss, jloss = make_loss(lax, jnp), make_loss(jax.lax, jjnp)
  val, grads = stagecraft.value_and_grad(loss)(params, x, y)
  jval, jgrads = jax.jit(jax.value_and_grad(jloss))(params, x, y)
  np.testing.assert_allclose(np.asarray(val), jval, rtol=1e-5)
  assert_trees_allclose(grads, jgrads, rtol=2e-4, atol=2e-5, check_dtypes=True)
  jitted = stagecraft.jit(stagecraft.grad(loss))(params, x, y)
  assert_trees_allclose(jitted, jgrads, rtol=2e-4, atol=2e-5)


# ---------------------------------------------------------------------------
# Windowed reductions (pooling)

POOL_CASES = {
    "1d_same": ((7,), dict(window_dimensions=(3,), window_strides=(2,), padding="SAME")),
    "3d_explicit_pad": ((2, 7, 6), dict(window_dimensions=(1, 3, 2), window_strides=(1, 2, 2),
                                        padding=((0, 0), (1, 2), (0, 1)))),
    "nhwc_pool": ((2, 6, 5, 3), dict(window_dimensions=(1, 2, 2, 1),
                                     window_strides=(1, 2, 2, 1), padding="SAME")),
    "base_dilation": ((5, 6), dict(window_dimensions=(2, 3), window_strides=(1, 2),
                                   padding="VALID", base_dilation=(2, 1))),
}


@pytest.mark.parametrize("name", list(POOL_CASES))
def test_avg_pool_grads(name):
  shape, kw = POOL_CASES[name]
  size = float(np.prod(kw["window_dimensions"]))
  with stagecraft.enable_x64():
    check_grads(lambda x: lax.div(lax.reduce_window_sum(x, **kw), size), (_randn(*shape),), 2)


@pytest.mark.parametrize("name", list(POOL_CASES))
@pytest.mark.parametrize("fn", ["max", "min"])
def test_max_min_pool_grads(name, fn):
  shape, kw = POOL_CASES[name]
  pool = lax.reduce_window_max if fn == "max" else lax.reduce_window_min
  with stagecraft.enable_x64():
    check_grads(lambda x: pool(x, **kw), (_randn(*shape),), 2)


def test_window_dilation_forward_mode_only():
  x = _randn(5, 6)
  kw = dict(window_dimensions=(2, 2), window_strides=(1, 1), padding="VALID",
            window_dilation=(2, 1))
  with stagecraft.enable_x64():
    check_grads(lambda x: lax.reduce_window_max(x, **kw), (x,), 2, modes=("fwd",))
    check_grads(lambda x: lax.reduce_window_sum(x, **kw), (x,), 2)
    with pytest.raises(NotImplementedError, match="window_dilation=\\(2, 1\\)"):
      stagecraft.grad(lambda x: jnp.sum(lax.reduce_window_max(x, **kw)))(x)


TIES = np.array([[1., 1., 2., 2.], [0., 1., 2., 2.], [3., 3., 3., 0.]], np.float32)


@pytest.mark.parametrize("strides,padding", [((1, 1), "SAME"), ((2, 1), ((1, 0), (0, 1))),
                                             ((1, 2), "VALID")])
@pytest.mark.parametrize("fn", ["max", "min"])
def test_pool_with_ties_matches_jax(strides, padding, fn):
  """With ties the selected element is the first maximum (minimum) of each window, as in
  JAX: the gradient goes to it alone, in both modes."""
  pool = lax.reduce_window_max if fn == "max" else lax.reduce_window_min
  jop, init = (jax.lax.max, -np.inf) if fn == "max" else (jax.lax.min, np.inf)
  weights = np.arange(1, 13, dtype=np.float32).reshape(3, 4)

  def f(x):
    return pool(x, (2, 2), strides, padding)

  def jf(x):
    return jax.lax.reduce_window(x, init, jop, (2, 2), strides, padding)

  def loss(x):
    y = f(x)
    return jnp.sum(y * np.arange(1, y.size + 1, dtype=np.float32).reshape(y.shape))

  def jloss(x):
    y = jf(x)
    return jjnp.sum(y * np.arange(1, y.size + 1, dtype=np.float32).reshape(y.shape))

  g = np.asarray(stagecraft.grad(loss)(TIES))
  np.testing.assert_array_equal(g, jax.jit(jax.grad(jloss))(TIES))
  assert np.count_nonzero(g) < TIES.size   # ties: only one element of each window selected
  np.testing.assert_array_equal(np.asarray(stagecraft.jvp(f, (TIES,), (weights,))[1]),
                                jax.jit(lambda x, t: jax.jvp(jf, (x,), (t,))[1])(TIES, weights))


def test_select_and_scatter_and_gather_add_grads():
  x = _randn(6, 5)
  kw = dict(window_dimensions=(2, 3), window_strides=(2, 1), padding=((0, 1), (1, 1)))
  src = _randn(*np.shape(lax.reduce_window_max(x, **kw)))
  with stagecraft.enable_x64():
    for prim in (lax.ge_p, lax.le_p):
      check_grads(lambda s: lax.select_and_scatter_add(s, x, prim, **kw), (src,), 2)
      check_grads(lambda t: lax.select_and_gather_add(t, x, prim, **kw), (_randn(6, 5),), 2)
      check_grads(lambda t: lax.select_and_gather_add(t, x, prim, base_dilation=(1, 2), **kw),
                  (_randn(6, 5),), 2)
    # The operand only selects: its derivative is zero.
    _, t_out = stagecraft.jvp(lambda x: lax.select_and_scatter_add(src, x, lax.ge_p, **kw),
                              (x,), (np.ones_like(x),))
    np.testing.assert_array_equal(np.asarray(t_out), np.zeros_like(x))


def test_select_and_gather_add_values():
  x = np.array([[1., 3., 2., 0.], [5., 3., 5., 1.]], np.float32)
  t = np.arange(8, dtype=np.float32).reshape(2, 4)
  out = lax.select_and_gather_add(t, x, lax.ge_p, (2, 2), (1, 2), "VALID")
  np.testing.assert_array_equal(np.asarray(out), [[4., 6.]])   # the first 5 in each window
  out = lax.select_and_gather_add(t, x, lax.le_p, (1, 2), (1, 1), ((0, 0), (1, 0)))
  np.testing.assert_array_equal(np.asarray(out), [[0., 0., 2., 3.], [4., 5., 5., 7.]])
  with pytest.raises(TypeError, match="same shape and dtype"):
    lax.select_and_gather_add(t[:, :2], x, lax.ge_p, (2, 2), (1, 2), "VALID")


# ---------------------------------------------------------------------------
# fft

FFT_CASES = [("fft", (3, 4), (4,)), ("ifft", (2, 3, 4), (3, 4)), ("rfft", (3, 6), (6,)),
             ("rfft", (2, 5), (2, 5)), ("irfft", (3, 4), (6,)), ("irfft", (2, 3), (2, 5)),
             ("irfft", (2, 4), (2, 7))]


def _fft_real_io(typ, lengths):
  """The transform as a real function (real and imaginary parts in and out), so that finite
  differences check it in both modes."""
  def f(*parts):
    x = lax.complex(*parts) if len(parts) == 2 else parts[0]
    y = lax.fft(x, typ, lengths)
    return (lax.real(y), lax.imag(y)) if np.issubdtype(y.dtype, np.complexfloating) else y
  return f


@pytest.mark.parametrize("typ,shape,lengths", FFT_CASES)
def test_fft_grads(typ, shape, lengths):
  args = (_randn(*shape),) if typ == "rfft" else (_randn(*shape), _randn(*shape))
  with stagecraft.enable_x64():
    check_grads(_fft_real_io(typ, lengths), args, 2)


@pytest.mark.parametrize("typ,shape,lengths", FFT_CASES)
def test_fft_complex_matches_jax(typ, shape, lengths):
  x = _randn(*shape) if typ == "rfft" else _crandn(*shape)
  _compare_with_jax(lambda x: lax.fft(x, typ, lengths),
                    lambda x: jax.lax.fft(x, typ.upper(), lengths), (x,), tol=1e-10)


def test_numpy_fft_grad_matches_jax():
  x = _randn(8)
  with stagecraft.enable_x64(), jax.enable_x64(True):
    g = stagecraft.grad(lambda x: jnp.sum(jnp.abs(jnp.fft.rfft(x)) ** 2))(x)
    jg = jax.grad(lambda x: jjnp.sum(jjnp.abs(jjnp.fft.rfft(x)) ** 2))(x)
  np.testing.assert_allclose(np.asarray(g), jg, rtol=1e-10)


# ---------------------------------------------------------------------------
# lax.linalg


def _spd(n, batch=()):
  a = _randn(*batch, n, n)
  return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


def _orthonormal(m, k):
  return np.linalg.qr(_randn(m, k))[0]


def _with_eigenvalues(w):
  """A symmetric matrix with eigenvalues `w` (well separated, so that finite differences of
  the eigenvectors are well conditioned)."""
  q = _orthonormal(len(w), len(w))
  return (q * np.asarray(w)) @ q.T


def _with_singular_values(m, n, s):
  return (_orthonormal(m, len(s)) * np.asarray(s)) @ _orthonormal(n, len(s)).T


def _triangular(n, lower, batch=()):
  a = _randn(*batch, n, n) + 3 * np.eye(n)
  return np.tril(a) if lower else np.triu(a)


LINALG_CASES = {
    "cholesky": (lax_linalg.cholesky, lambda: (_spd(4, (2,)),)),
    "eigh": (lax_linalg.eigh, lambda: (_with_eigenvalues([-1., 0.5, 2., 4.]),)),
    "lu_wide_batched": (lambda x: lax_linalg.lu(x)[0], lambda: (_randn(2, 3, 5),)),
    "lu_tall": (lambda x: lax_linalg.lu(x)[0], lambda: (_randn(5, 3),)),
    "triangular_solve_left_lower": (
        lambda a, b: lax_linalg.triangular_solve(a, b, left_side=True, lower=True),
        lambda: (_triangular(4, True), _randn(4, 3))),
    "triangular_solve_right_upper_transposed": (
        lambda a, b: lax_linalg.triangular_solve(a, b, left_side=False, lower=False,
                                                 transpose_a=True),
        lambda: (_triangular(4, False), _randn(2, 4))),
    "triangular_solve_unit_batched": (
        lambda a, b: lax_linalg.triangular_solve(a, b, left_side=True, lower=True,
                                                 unit_diagonal=True),
        lambda: (_triangular(3, True, (2,)), _randn(2, 3, 5))),
    "qr_reduced": (lambda x: lax_linalg.qr(x, full_matrices=False), lambda: (_randn(5, 3),)),
    "qr_full_tall": (lambda x: lax_linalg.qr(x, full_matrices=True), lambda: (_randn(5, 3),)),
    "qr_wide": (lambda x: lax_linalg.qr(x), lambda: (_randn(3, 5),)),
    "qr_square_batched": (lambda x: lax_linalg.qr(x), lambda: (_randn(2, 4, 4),)),
    "svd_values": (lambda x: lax_linalg.svd(x, compute_uv=False),
                   lambda: (_with_singular_values(4, 3, [3., 2., 0.5]),)),
    "svd_tall": (lambda x: lax_linalg.svd(x, full_matrices=False),
                 lambda: (_with_singular_values(5, 3, [3., 2., 0.5]),)),
    "svd_wide": (lambda x: lax_linalg.svd(x, full_matrices=False),
                 lambda: (_with_singular_values(3, 5, [4., 1.5, 0.5]),)),
    "svd_square_full": (lambda x: lax_linalg.svd(x),
                        lambda: (_with_singular_values(4, 4, [4., 2.5, 1., 0.3]),)),
}


@pytest.mark.parametrize("name", list(LINALG_CASES))
def test_lax_linalg_grads(name):
  f, make_args = LINALG_CASES[name]
  with stagecraft.enable_x64():
    check_grads(f, make_args(), 2)


def _hpd(n):
  a = _crandn(n, n)
  return a @ a.conj().T + n * np.eye(n)


COMPLEX_LINALG_CASES = {
    "cholesky": (lax_linalg.cholesky, jax.lax.linalg.cholesky, lambda: (_hpd(3),)),
    "eigh_values": (lambda x: lax_linalg.eigh(x)[1], lambda x: jax.lax.linalg.eigh(x)[1],
                    lambda: (_hpd(3),)),
    "lu": (lambda x: lax_linalg.lu(x)[0], lambda x: jax.lax.linalg.lu(x)[0],
           lambda: (_crandn(3, 4),)),
    "qr_reduced": (lambda x: lax_linalg.qr(x, full_matrices=False),
                   lambda x: jax.lax.linalg.qr(x, full_matrices=False), lambda: (_crandn(4, 3),)),
    "qr_full": (lambda x: lax_linalg.qr(x), lambda x: jax.lax.linalg.qr(x),
                lambda: (_crandn(4, 3),)),
    "svd_values": (lambda x: lax_linalg.svd(x, compute_uv=False),
                   lambda x: jax.lax.linalg.svd(x, compute_uv=False), lambda: (_crandn(3, 4),)),
    "triangular_solve_adjoint": (
        lambda a, b: lax_linalg.triangular_solve(a, b, left_side=True, lower=True,
                                                 transpose_a=True, conjugate_a=True),
        lambda a, b: jax.lax.linalg.triangular_solve(a, b, left_side=True, lower=True,
                                                     transpose_a=True, conjugate_a=True),
        lambda: (np.tril(_crandn(3, 3)) + 3 * np.eye(3), _crandn(3, 2))),
    "triangular_solve_conj": (
        lambda a, b: lax_linalg.triangular_solve(a, b, lower=False, conjugate_a=True),
        lambda a, b: jax.lax.linalg.triangular_solve(a, b, lower=False, conjugate_a=True),
        lambda: (np.triu(_crandn(3, 3)) + 3 * np.eye(3), _crandn(2, 3))),
}


@pytest.mark.parametrize("name", list(COMPLEX_LINALG_CASES))
def test_lax_linalg_complex_matches_jax(name):
  f, jf, make_args = COMPLEX_LINALG_CASES[name]
  _compare_with_jax(f, jf, make_args())


COMPLEX_GRAD_CASES = {
    "dot": (lambda x, y: lax.dot(x, y), lambda: (_crandn(3, 4), _crandn(4, 2))),
    "conv": (lambda x, w: lax.conv_general_dilated(x, w, (2,), "SAME"),
             lambda: (_crandn(2, 3, 6), _crandn(4, 3, 3))),
    "fft": (lambda x: lax.fft(x, "fft", (4,)), lambda: (_crandn(3, 4),)),
    "ifft": (lambda x: lax.fft(x, "ifft", (2, 3)), lambda: (_crandn(2, 3),)),
    "irfft": (lambda x: lax.fft(x, "irfft", (6,)), lambda: (_crandn(3, 4),)),
    "cholesky": (lax_linalg.cholesky, lambda: (_hpd(3),)),
    "qr_full": (lambda x: lax_linalg.qr(x), lambda: (_crandn(4, 3),)),
    "triangular_solve": (COMPLEX_LINALG_CASES["triangular_solve_adjoint"][0],
                         COMPLEX_LINALG_CASES["triangular_solve_adjoint"][2]),
}


@pytest.mark.parametrize("name", list(COMPLEX_GRAD_CASES))
def test_complex_inputs_grads(name):
  f, make_args = COMPLEX_GRAD_CASES[name]
  with stagecraft.enable_x64():
    check_grads(f, make_args(), 2)


def test_linalg_real_matches_jax():
  x = _randn(4, 3)
  _compare_with_jax(lambda x: lax_linalg.svd(x, full_matrices=False),
                    lambda x: jax.lax.linalg.svd(x, full_matrices=False), (x,))
  a = _spd(4)
  _compare_with_jax(lax_linalg.eigh, jax.lax.linalg.eigh, (a,))


def test_svd_full_matrices_jvp_raises_for_non_square():
  with stagecraft.enable_x64():
    with pytest.raises(NotImplementedError, match="full_matrices=False"):
      stagecraft.jvp(lambda x: lax_linalg.svd(x), (_randn(4, 3),), (_randn(4, 3),))


def test_lu_pivots_have_float0_tangents():
  a = _randn(3, 3)
  with stagecraft.enable_x64():
    _, (t_lu, t_piv, t_perm) = stagecraft.jvp(lax_linalg.lu, (a,), (_randn(3, 3),))
  assert t_piv.dtype == jax.dtypes.float0 and t_perm.dtype == jax.dtypes.float0
  assert np.asarray(t_lu).dtype == np.float64


def test_qr_primitive_lowers_to_geqrf_and_reconstructs():
  x = _randn(2, 5, 3).astype(np.float32)
  jaxpr, _ = pe.trace_to_jaxpr(lambda a: list(lax_linalg.qr(a)), [stagecraft.core.get_aval(x)])
  assert [e.primitive.name for e in jaxpr.eqns] == ["qr"]
  text = lowering.lower_jaxpr_to_module("f", jaxpr)
  assert "lapack_sgeqrf_ffi" in text and "lapack_sorgqr_ffi" in text
  for full, (qs, rs) in ((True, ((2, 5, 5), (2, 5, 3))), (False, ((2, 5, 3), (2, 3, 3)))):
    q, r = lax_linalg.qr(x, full_matrices=full)
    assert q.shape == qs and r.shape == rs
    q, r = np.asarray(q), np.asarray(r)
    np.testing.assert_allclose(q @ r, x, atol=1e-5)
    eye = np.broadcast_to(np.eye(qs[-1]), (2, qs[-1], qs[-1]))
    np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q, eye, atol=1e-5)
    assert np.allclose(np.tril(r, -1), 0)
  c = _crandn(3, 4).astype(np.complex64)
  q, r = lax_linalg.qr(c)
  np.testing.assert_allclose(np.asarray(q) @ np.asarray(r), c, atol=1e-5)


# ---------------------------------------------------------------------------
# stagecraft.numpy.linalg, differentiated through the primitives above

A4 = _randn(4, 4) + 4 * np.eye(4)
S4 = _with_eigenvalues([1., 2.5, 4.5, 7.])
R53 = _with_singular_values(5, 3, [3., 1.8, 0.6])
B42 = _randn(4, 2)
B52 = _randn(5, 2)

NUMPY_LINALG_CASES = {
    "solve": (lambda a, b: jnp.linalg.solve(a, b), lambda a, b: jjnp.linalg.solve(a, b),
              (A4, B42)),
    "solve_vector": (lambda a, b: jnp.linalg.solve(a, b), lambda a, b: jjnp.linalg.solve(a, b),
                     (A4, B42[:, 0])),
    "inv": (jnp.linalg.inv, jjnp.linalg.inv, (A4,)),
    "det_2x2": (jnp.linalg.det, jjnp.linalg.det, (A4[:2, :2],)),
    "det_lu": (jnp.linalg.det, jjnp.linalg.det, (A4,)),
    "slogdet": (lambda a: jnp.linalg.slogdet(a)[1], lambda a: jjnp.linalg.slogdet(a)[1], (A4,)),
    "eigh": (lambda a: jnp.linalg.eigh(a)[0], lambda a: jjnp.linalg.eigh(a)[0], (S4,)),
    "eigh_vectors": (lambda a: jnp.abs(jnp.linalg.eigh(a)[1]),
                     lambda a: jjnp.abs(jjnp.linalg.eigh(a)[1]), (S4,)),
    "eigvalsh": (jnp.linalg.eigvalsh, jjnp.linalg.eigvalsh, (S4,)),
    "cholesky": (jnp.linalg.cholesky, jjnp.linalg.cholesky, (S4,)),
    "qr": (lambda a: jnp.linalg.qr(a), lambda a: jjnp.linalg.qr(a), (R53,)),
    "qr_complete": (lambda a: jnp.linalg.qr(a, mode="complete"),
                    lambda a: jjnp.linalg.qr(a, mode="complete"), (R53,)),
    "svd": (lambda a: jnp.abs(jnp.linalg.svd(a, full_matrices=False)[0]),
            lambda a: jjnp.abs(jjnp.linalg.svd(a, full_matrices=False)[0]), (R53,)),
    "svdvals": (jnp.linalg.svdvals, jjnp.linalg.svdvals, (R53,)),
    "norm_fro": (lambda a: jnp.linalg.norm(a), lambda a: jjnp.linalg.norm(a), (R53,)),
    "norm_2": (lambda a: jnp.linalg.norm(a, 2), lambda a: jjnp.linalg.norm(a, 2), (R53,)),
    "norm_nuc": (lambda a: jnp.linalg.norm(a, "nuc"), lambda a: jjnp.linalg.norm(a, "nuc"),
                 (R53,)),
    "pinv": (jnp.linalg.pinv, jjnp.linalg.pinv, (R53,)),
    "lstsq": (lambda a, b: jnp.linalg.lstsq(a, b)[0], lambda a, b: jjnp.linalg.lstsq(a, b)[0],
              (R53, B52)),
    "matrix_power": (lambda a: jnp.linalg.matrix_power(a, 3),
                     lambda a: jjnp.linalg.matrix_power(a, 3), (A4,)),
    "matrix_power_negative": (lambda a: jnp.linalg.matrix_power(a, -2),
                              lambda a: jjnp.linalg.matrix_power(a, -2), (A4,)),
    "cond": (jnp.linalg.cond, jjnp.linalg.cond, (A4,)),
    "multi_dot": (lambda a, b: jnp.linalg.multi_dot([a, a, b]),
                  lambda a, b: jjnp.linalg.multi_dot([a, a, b]), (A4, B42)),
}
# Second derivatives for a representative subset (the rest: first order plus JAX).
SECOND_ORDER = {"solve", "det_lu", "eigh", "cholesky", "qr"}


def _first(out):
  return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("name", list(NUMPY_LINALG_CASES))
def test_numpy_linalg_grads(name):
  f, jf, args = NUMPY_LINALG_CASES[name]
  argnums = tuple(range(len(args)))
  with stagecraft.enable_x64():
    check_grads(f, args, 2 if name in SECOND_ORDER else 1)
    grads = stagecraft.grad(lambda *a: jnp.sum(jnp.sin(_first(f(*a)))), argnums)(*args)
  with jax.enable_x64(True):
    jgrads = jax.jit(jax.grad(lambda *a: jjnp.sum(jjnp.sin(_first(jf(*a)))), argnums))(*args)
  assert_trees_allclose(grads, jgrads, rtol=1e-7, atol=1e-8)
