"""vmap of dot_general, convolutions, windowed reductions, FFTs and linear algebra: each
batched result equals a Python loop over the batch, stacked along out_axes."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import stagecraft
from stagecraft import lax, vmap, jit, grad, make_jaxpr
from stagecraft import numpy as snp
from stagecraft.lax import linalg as slinalg
from stagecraft.lax import windowed

from _util import assert_trees_allclose

B = 3
rng = np.random.default_rng(0)


def _r(*shape, dtype=np.float32):
  return rng.standard_normal(shape).astype(dtype)


def _take(x, axis, i):
  return x if axis is None else np.take(x, i, axis=axis)


def _loop(f, args, in_axes, out_axes=0, size=B):
  outs = [f(*[_take(a, ax, i) for a, ax in zip(args, in_axes)]) for i in range(size)]
  if isinstance(outs[0], (tuple, list)):
    return [np.stack([np.asarray(o[k]) for o in outs], axis=out_axes)
            for k in range(len(outs[0]))]
  return np.stack([np.asarray(o) for o in outs], axis=out_axes)


def _batched(x, ax, size=B):
  """`x` (one example) stacked `size` times (different data) along `ax` (None: `x`)."""
  if ax is None:
    return x
  return np.stack([x + i * 0.37 for i in range(size)], axis=ax).astype(x.dtype)


def check(f, args, in_axes, out_axes=0, rtol=2e-4, atol=2e-4, jit_too=False):
  got = vmap(f, in_axes=in_axes, out_axes=out_axes)(*args)
  want = _loop(f, args, in_axes, out_axes)
  assert_trees_allclose(got, want, rtol=rtol, atol=atol)
  if jit_too:
    got = vmap(jit(f), in_axes=in_axes, out_axes=out_axes)(*args)
    assert_trees_allclose(got, want, rtol=rtol, atol=atol)


def _eqn_names(jaxpr):
  return [e.primitive.name for e in jaxpr.jaxpr.eqns]


# ---------------------------------------------------------------------------
# dot_general

DOT_CASES = [
    # (lhs shape, rhs shape, dimension numbers)
    ((4, 5), (5, 6), (((1,), (0,)), ((), ()))),                 # matmul
    ((5,), (5,), (((0,), (0,)), ((), ()))),                      # inner
    ((4,), (6,), (((), ()), ((), ()))),                          # outer
    ((2, 4, 5), (2, 5, 3), (((2,), (1,)), ((0,), (0,)))),       # batch matmul
    ((5, 2, 4), (3, 5, 2), (((0,), (1,)), ((1,), (2,)))),       # permuted dims
    ((4, 5, 6), (6, 5), (((1, 2), (1, 0)), ((), ()))),          # two contractions
]


@pytest.mark.parametrize("case", range(len(DOT_CASES)))
@pytest.mark.parametrize("axes", [(0, 0), (1, None), (None, -1), (-1, 1), (None, 0)])
def test_dot_general(case, axes):
  ls, rs, dn = DOT_CASES[case]
  ax_l, ax_r = axes
  if ax_l is not None and abs(ax_l) > len(ls) or ax_r is not None and abs(ax_r) > len(rs):
    pytest.skip("axis out of range for this rank")
  lhs = _batched(_r(*ls), ax_l)
  rhs = _batched(_r(*rs), ax_r)
  f = lambda a, b: lax.dot_general(a, b, dn)
  check(f, (lhs, rhs), axes)
  check(f, (lhs, rhs), axes, out_axes=-1)


@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4),
       st.sampled_from([0, 1, 2, None]), st.sampled_from([0, 1, 2, None]))
def test_dot_general_hypothesis(m, k, n, ax_l, ax_r):
  if ax_l is None and ax_r is None:
    ax_r = 0
  lhs = _batched(_r(m, k), ax_l)
  rhs = _batched(_r(k, n), ax_r)
  check(lambda a, b: lax.dot(a, b), (lhs, rhs), (ax_l, ax_r))


@pytest.mark.parametrize("axes", [(0, 0), (1, None), (None, 1)])
def test_dot_no_transpose(axes):
  lhs = np.zeros((B, 4, 5) if axes[0] == 0 else (4, B, 5) if axes[0] == 1 else (4, 5),
                 np.float32)
  rhs = np.zeros((B, 5, 6) if axes[1] == 0 else (5, B, 6) if axes[1] == 1 else (5, 6),
                 np.float32)
  # the batch dim lands where JAX's rule puts it: front (both batched) or in the free dims
  out_axes = {(0, 0): 0, (1, None): 1, (None, 1): 1}[axes]
  jp = make_jaxpr(vmap(lambda a, b: a @ b, in_axes=axes, out_axes=out_axes))(lhs, rhs)
  names = _eqn_names(jp)
  assert names == ["dot_general"], jp


def test_dot_jit():
  lhs, rhs = _batched(_r(4, 5), 1), _r(5, 2)
  check(lambda a, b: lax.dot(a, b), (lhs, rhs), (1, None), jit_too=True)


def test_elementwise_and_reduction_no_transpose():
  x = np.zeros((4, B, 5), np.float32)
  jp = make_jaxpr(vmap(lambda v: snp.sum(snp.sin(v) * 2.0, axis=0), in_axes=1))(x)
  assert "transpose" not in _eqn_names(jp), jp


# ---------------------------------------------------------------------------
# stagecraft.numpy contractions


@pytest.mark.parametrize("axes", [(0, None), (None, 0), (1, 2), (0, 0)])
def test_numpy_matmul(axes):
  a = _batched(_r(3, 4), axes[0])
  b = _batched(_r(4, 2), axes[1])
  check(lambda x, y: snp.matmul(x, y), (a, b), axes, jit_too=True)


@pytest.mark.parametrize("spec,shapes,axes", [
    ("ij,jk->ik", [(3, 4), (4, 2)], (0, 1)),
    ("ij,jk->ki", [(3, 4), (4, 2)], (None, 1)),
    ("i,i->", [(4,), (4,)], (0, None)),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], (2, 0)),
    ("ij,kj->", [(3, 4), (2, 4)], (1, 1)),
])
def test_numpy_einsum(spec, shapes, axes):
  args = [_batched(_r(*s), ax) for s, ax in zip(shapes, axes)]
  check(lambda x, y: snp.einsum(spec, x, y), args, axes, rtol=1e-3, atol=1e-3)


def _well_conditioned(n, dtype=np.float32):
  return (_r(n, n) + n * np.eye(n)).astype(dtype)


@pytest.mark.parametrize("axes", [(0, 0), (None, 0), (1, None), (2, 1)])
def test_numpy_solve(axes):
  a = _batched(_well_conditioned(4), axes[0])
  b = _batched(_r(4, 2), axes[1])
  check(lambda x, y: snp.linalg.solve(x, y), (a, b), axes, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("ax", [0, 1, -1])
def test_numpy_inv(ax):
  a = _batched(_well_conditioned(3), ax)
  check(lambda x: snp.linalg.inv(x), (a,), (ax,), rtol=1e-3, atol=1e-3, jit_too=True)


def test_per_example_gradients():
  w = _r(5, 2)
  xs = _r(7, 5)
  ys = _r(7, 2)

  def loss(w, x, y):
    return snp.sum((snp.tanh(x @ w) - y) ** 2)

  g = grad(loss)
  got = vmap(g, in_axes=(None, 0, 0))(w, xs, ys)
  want = np.stack([np.asarray(g(w, xs[i], ys[i])) for i in range(7)])
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
  got_jit = jit(vmap(g, in_axes=(None, 0, 0)))(w, xs, ys)
  np.testing.assert_allclose(np.asarray(got_jit), want, rtol=1e-4, atol=1e-5)
  # vmap(grad(f), in_axes=(None, 0)) with the data as one batched arg
  data = np.concatenate([xs, ys], axis=1)
  g2 = grad(lambda w, d: loss(w, d[:5], d[5:]))
  got2 = vmap(g2, in_axes=(None, 0))(w, data)
  np.testing.assert_allclose(np.asarray(got2), want, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------
# conv_general_dilated

CONV_CASES = [
    # lhs shape, rhs shape, dimension numbers, feature_group_count, batch_group_count, extra
    ((2, 3, 6, 6), (4, 3, 3, 3), ("NCHW", "OIHW", "NCHW"), 1, 1, {}),
    ((2, 6, 6, 3), (3, 3, 3, 4), ("NHWC", "HWIO", "NHWC"), 1, 1,
     dict(window_strides=(2, 1), padding="SAME")),
    ((2, 4, 7), (6, 2, 3), ("NCH", "OIH", "NCH"), 2, 1,
     dict(rhs_dilation=(2,), padding=((1, 2),))),
    ((4, 3, 7), (6, 3, 2), ("NCH", "OIH", "NCH"), 1, 2,
     dict(lhs_dilation=(2,), padding=((0, 1),))),
    ((7, 3, 4), (2, 6, 3), ("HCN", "HOI", "CHN"), 1, 2, dict(padding=((1, 0),))),
    ((7, 4, 2), (3, 2, 6), ("HCN", "HIO", "NHC"), 2, 1, dict(window_strides=(2,))),
]


@pytest.mark.parametrize("case", range(len(CONV_CASES)))
@pytest.mark.parametrize("axes", [(0, None), (None, 0), (1, -1), (-1, 0)])
def test_conv(case, axes):
  ls, rs, dn, fgc, bgc, extra = CONV_CASES[case]
  kw = dict(window_strides=(1,) * (len(ls) - 2), padding="VALID")
  kw.update(extra)
  lhs = _batched(_r(*ls), axes[0])
  rhs = _batched(_r(*rs), axes[1])

  def f(l, r):
    return lax.conv_general_dilated(l, r, dimension_numbers=dn, feature_group_count=fgc,
                                    batch_group_count=bgc, **kw)
  check(f, (lhs, rhs), axes, rtol=1e-3, atol=1e-3, jit_too=(case == 0))
  check(f, (lhs, rhs), axes, out_axes=2, rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------------------
# windowed reductions


WINDOW_OPS = {
    "sum": lambda x: lax.reduce_window(x, 0.0, lax.add, (2, 2), (1, 2), "VALID"),
    "max": lambda x: lax.reduce_window(x, -np.inf, lax.max, (2, 3), (2, 1), "SAME"),
    "min": lambda x: lax.reduce_window(x, np.inf, lax.min, (3, 2), (1, 1),
                                       ((1, 0), (0, 1))),
}


@pytest.mark.parametrize("op", sorted(WINDOW_OPS))
@pytest.mark.parametrize("ax", [0, 1, 2])
def test_reduce_window(op, ax):
  x = _batched(_r(5, 6), ax)
  check(WINDOW_OPS[op], (x,), (ax,), jit_too=(ax == 1))


@given(st.integers(0, 2), st.integers(1, 3), st.integers(1, 3), st.integers(1, 2))
def test_reduce_window_hypothesis(ax, w0, w1, s):
  x = _batched(_r(4, 5), ax)
  f = lambda v: lax.reduce_window(v, -np.inf, lax.max, (w0, w1), (s, 1), "VALID")
  check(f, (x,), (ax,))


def test_reduce_window_no_transpose():
  x = np.zeros((5, B, 6), np.float32)
  jp = make_jaxpr(vmap(WINDOW_OPS["max"], in_axes=1, out_axes=1))(x)
  assert "transpose" not in _eqn_names(jp), jp


@pytest.mark.parametrize("sel", ["ge", "le"])
@pytest.mark.parametrize("axes", [(0, 0), (1, None), (None, 2), (2, 0)])
def test_select_and_scatter_add(sel, axes):
  prim = lax.ge_p if sel == "ge" else lax.le_p
  operand = _batched(_r(5, 6), axes[1])
  src_shape = lax.reduce_window_shape_tuple((5, 6), (2, 2), (2, 1), ((0, 1), (1, 0)))
  source = _batched(_r(*src_shape), axes[0])
  f = lambda s, o: windowed.select_and_scatter_add(s, o, prim, (2, 2), (2, 1),
                                                   ((0, 1), (1, 0)))
  check(f, (source, operand), axes)


@pytest.mark.parametrize("sel", ["ge", "le"])
@pytest.mark.parametrize("axes", [(0, 0), (1, None), (None, 2)])
def test_select_and_gather_add(sel, axes):
  prim = lax.ge_p if sel == "ge" else lax.le_p
  t = _batched(_r(5, 6), axes[0])
  o = _batched(_r(5, 6), axes[1])
  f = lambda t, o: windowed.select_and_gather_add(t, o, prim, (2, 3), (1, 2),
                                                  ((0, 0), (1, 1)), (1, 1), (1, 1))
  check(f, (t, o), axes)


def test_max_pool_grad_per_example():
  xs = _batched(_r(4, 6), 0)
  f = lambda x: snp.sum(lax.reduce_window(x, -np.inf, lax.max, (2, 2), (2, 2), "VALID") ** 2)
  g = grad(f)
  check(g, (xs,), (0,))


# ---------------------------------------------------------------------------
# FFT


FFT_CASES = [
    ("FFT", (4, 6), (6,), np.complex64),
    ("IFFT", (4, 6), (4, 6), np.complex64),
    ("RFFT", (3, 8), (8,), np.float32),
    ("IRFFT", (3, 5), (8,), np.complex64),
]


@pytest.mark.parametrize("case", range(len(FFT_CASES)))
@pytest.mark.parametrize("ax", [0, 1, -1])
def test_fft(case, ax):
  kind, shp, lengths, dt = FFT_CASES[case]
  x = _r(*shp)
  if dt == np.complex64:
    x = (x + 1j * _r(*shp)).astype(dt)
  x = _batched(x, ax)
  check(lambda v: lax.fft(v, kind, lengths), (x,), (ax,), rtol=1e-3, atol=1e-3,
        jit_too=(ax == 0))


def test_fft_leading_bdim_no_transpose():
  x = np.zeros((4, B, 6), np.complex64)
  jp = make_jaxpr(vmap(lambda v: lax.fft(v, "FFT", (6,)), in_axes=1, out_axes=1))(x)
  assert "transpose" not in _eqn_names(jp), jp


# ---------------------------------------------------------------------------
# linear algebra


def _spd(n):
  a = _r(n, n)
  return (a @ a.T + n * np.eye(n)).astype(np.float32)


def _spd_batched(n, ax):
  if ax is None:
    return _spd(n)
  return np.stack([_spd(n) for _ in range(B)], axis=ax)


LINALG_UNARY = {
    "cholesky": (lambda x: slinalg.cholesky(x), "spd", (4, 4)),
    "eigh_w": (lambda x: slinalg.eigh(x)[1], "spd", (4, 4)),
    "eigh_abs_v": (lambda x: lax.abs(slinalg.eigh(x)[0][..., 0, :]), "spd", (4, 4)),
    "lu": (lambda x: list(slinalg.lu(x)), "gen", (4, 4)),
    "qr_r_abs": (lambda x: lax.abs(slinalg.qr(x)[1]), "gen", (5, 3)),
    "qr_reconstruct": (lambda x: snp.matmul(*slinalg.qr(x, full_matrices=False)), "gen",
                       (5, 3)),
    "svd_s": (lambda x: slinalg.svd(x, compute_uv=False), "gen", (4, 3)),
    "svd_reconstruct": (lambda x: (lambda u, s, vt: (u * s[..., None, :]) @ vt)(
        *slinalg.svd(x, full_matrices=False)), "gen", (3, 4)),
    "geqrf": (lambda x: list(slinalg.geqrf(x)), "gen", (4, 3)),
    "householder": (lambda x: slinalg.householder_product(*slinalg.geqrf(x)), "gen", (4, 3)),
}


@pytest.mark.parametrize("name", sorted(LINALG_UNARY))
@pytest.mark.parametrize("ax", [0, 1, 2])
def test_linalg_unary(name, ax):
  f, kind, shp = LINALG_UNARY[name]
  if kind == "spd":
    x = _spd_batched(shp[0], ax)
  else:
    x = _batched(_r(*shp), ax)
  check(f, (x,), (ax,), rtol=1e-3, atol=1e-3)


def test_linalg_batched_input_leading_bdim_no_transpose():
  x = np.stack([_spd(3)] * 4)[:, None].repeat(B, axis=1)  # (4, B, 3, 3)
  chol = lambda a: slinalg.cholesky(a, symmetrize_input=False)
  jp = make_jaxpr(vmap(chol, in_axes=1, out_axes=1))(x)
  # cholesky reads the input as it is (JAX transposes the batch dim to the front first);
  # the iota mask zeroing the upper part follows, batched as JAX batches it.
  first = jp.jaxpr.eqns[0]
  assert first.primitive.name == "cholesky" and first.invars[0] is jp.jaxpr.invars[0], jp
  np.testing.assert_allclose(np.asarray(vmap(chol, in_axes=1, out_axes=1)(x)),
                             np.linalg.cholesky(x), rtol=1e-4, atol=1e-4)


def test_householder_product_batched_taus_only():
  a, taus = slinalg.geqrf(_r(4, 3))
  a = np.asarray(a)
  taus = _batched(np.asarray(taus), 0)
  check(lambda t, a: slinalg.householder_product(a, t), (taus, a), (0, None), rtol=1e-3,
        atol=1e-3)


def _tri(n, lower=True):
  a = _r(n, n)
  a = np.tril(a) if lower else np.triu(a)
  return (a + 3 * np.eye(n)).astype(np.float32)


@pytest.mark.parametrize("left_side", [True, False])
@pytest.mark.parametrize("lower,transpose_a", [(True, False), (False, True)])
@pytest.mark.parametrize("axes", [(None, 0), (None, 1), (None, 2), (0, 0), (1, None), (2, 1)])
def test_triangular_solve(left_side, lower, transpose_a, axes):
  n, k = 4, 3
  a = _tri(n, lower)
  a = a if axes[0] is None else np.stack([_tri(n, lower) for _ in range(B)], axis=axes[0])
  b = _batched(_r(n, k) if left_side else _r(k, n), axes[1])
  f = lambda a, b: slinalg.triangular_solve(a, b, left_side=left_side, lower=lower,
                                            transpose_a=transpose_a)
  check(f, (a, b), axes, rtol=1e-3, atol=1e-3)


def test_triangular_solve_b_only_folds_without_new_solves():
  a = _tri(4)
  b = np.zeros((B, 4, 2), np.float32)
  f = lambda b: slinalg.triangular_solve(a, b, left_side=True, lower=True)
  jp = make_jaxpr(vmap(f))(b)
  solves = [e for e in jp.jaxpr.eqns if e.primitive.name == "triangular_solve"]
  assert len(solves) == 1
  assert solves[0].invars[0].aval.shape == (4, 4)   # a not broadcast
  assert solves[0].invars[1].aval.shape == (4, 2 * B)


def test_vmap_of_jit_linalg():
  a = _spd_batched(3, 0)
  b = _batched(_r(3, 2), 0)
  f = jit(lambda a, b: slinalg.triangular_solve(slinalg.cholesky(a), b, left_side=True,
                                                lower=True))
  check(f, (a, b), (0, 0), rtol=1e-3, atol=1e-3)


def test_triangular_solve_a_batched_at_leading_dim_stays():
  a = np.stack([np.stack([_tri(3) for _ in range(B)]) for _ in range(2)])  # (2, B, 3, 3)
  b = _r(2, 3, 2)
  f = lambda a, b: slinalg.triangular_solve(a, b, left_side=True, lower=True)
  jp = make_jaxpr(vmap(f, in_axes=(1, None), out_axes=1))(a, b)
  assert "transpose" not in _eqn_names(jp), jp
  check(f, (a, b), (1, None), out_axes=1, rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------------------
# Compositions: nested vmap, per-example gradients through convolutions and pooling


def test_nested_vmap_dot_and_conv():
  x = _r(2, B, 4, 5)
  y = _r(5, 2)
  f = lambda a, b: a @ b
  got = vmap(vmap(f, in_axes=(0, None)), in_axes=(1, None))(x, y)
  want = np.einsum("ibjk,kl->bijl", x, y)
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
  lhs = _r(2, B, 1, 3, 6)
  rhs = _r(2, 4, 3, 3)
  conv = lambda l, r: lax.conv(l, r, (1,), "SAME")
  got = vmap(vmap(conv, in_axes=(0, 0)), in_axes=(1, None))(lhs, rhs)
  want = np.stack([np.stack([np.asarray(conv(lhs[i, b], rhs[i])) for i in range(2)])
                   for b in range(B)])
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("fgc", [1, 2])
def test_per_example_conv_gradients(fgc):
  w = _r(4, 4 // fgc, 3, 3)
  xs = _r(B, 1, 4, 5, 5)

  def loss(w, x):
    y = lax.conv_general_dilated(x, w, (1, 1), "SAME", feature_group_count=fgc)
    return snp.sum(snp.tanh(y) ** 2)

  g = grad(loss)
  check(g, (w, xs), (None, 0), rtol=1e-3, atol=1e-3)
  check(grad(loss, argnums=1), (w, xs), (None, 0), rtol=1e-3, atol=1e-3)


@given(st.integers(1, 3), st.integers(1, 3), st.sampled_from([0, 1, 2, 3, None]),
       st.sampled_from([0, 1, 2, 3, None]), st.integers(1, 2))
def test_conv_hypothesis(c, o, ax_l, ax_r, stride):
  if ax_l is None and ax_r is None:
    ax_l = 0
  lhs = _batched(_r(2, c, 5), ax_l)
  rhs = _batched(_r(o, c, 2), ax_r)
  f = lambda l, r: lax.conv(l, r, (stride,), "VALID")
  check(f, (lhs, rhs), (ax_l, ax_r), rtol=1e-3, atol=1e-3)


def test_reduce_window_dilations():
  x = _batched(_r(6, 7), 1)
  f = lambda v: lax.reduce_window(v, 0.0, lax.add, (2, 2), (1, 2), ((1, 0), (0, 2)),
                                  base_dilation=(2, 1), window_dilation=(1, 2))
  check(f, (x,), (1,), out_axes=-1)


def test_fft_2d_batch_inside():
  x = (_r(4, B, 6) + 1j * _r(4, B, 6)).astype(np.complex64)
  f = lambda v: lax.fft(v, "FFT", (4, 6))
  check(f, (x,), (1,), rtol=1e-3, atol=1e-3)
  got = vmap(f, in_axes=1)(x)
  np.testing.assert_allclose(np.asarray(got), np.fft.fft2(np.moveaxis(x, 1, 0)), rtol=1e-3,
                             atol=1e-3)


def _hpd(n):
  a = _r(n, n, dtype=np.float64) + 1j * _r(n, n, dtype=np.float64)
  return a @ a.conj().T + n * np.eye(n)


@pytest.mark.parametrize("ax", [0, 2])
def test_complex128_linalg(ax):
  with stagecraft.enable_x64():
    x = np.stack([_hpd(3) for _ in range(B)], axis=ax)
    b = _r(3, 2, dtype=np.float64) + 1j * _r(3, 2, dtype=np.float64)

    def f(a, b):
      l = slinalg.cholesky(a)
      y = slinalg.triangular_solve(l, b, left_side=True, lower=True)
      x = slinalg.triangular_solve(l, y, left_side=True, lower=True, transpose_a=True,
                                   conjugate_a=True)
      return x, slinalg.eigh(a)[1], slinalg.svd(a, compute_uv=False)

    got = vmap(f, in_axes=(ax, None))(x, b)
    want = _loop(f, (x, b), (ax, None))
    assert_trees_allclose(got, want, rtol=1e-10, atol=1e-10, check_dtypes=True)
    np.testing.assert_allclose(np.asarray(got[0]),
                               np.linalg.solve(np.moveaxis(x, ax, 0), b), rtol=1e-10)
