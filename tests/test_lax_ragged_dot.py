"""`lax.ragged_dot`, `lax.ragged_dot_general` and `lax.RaggedDotDimensionNumbers` against
JAX (the oracle) and a NumPy loop over the groups: values for the three modes, printed
jaxprs, derivatives (JVP, VJP, finite differences), batching and errors."""
import re

import jax
import numpy as np
import pytest
from hypothesis import given, strategies as st
from jax import lax as jlax

import stagecraft as sc
from stagecraft import lax
from stagecraft.test_util import check_grads

RDN, JRDN = lax.RaggedDotDimensionNumbers, jlax.RaggedDotDimensionNumbers


def _rand(shape, dtype=np.float32, seed=0):
  return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _np_ragged_dot(x, w, sizes):
  """Mode 1 by a loop over the groups: rows of group i times w[i]; other rows 0."""
  out = np.zeros((x.shape[0], w.shape[2]), np.float64)
  start = 0
  for i, n in enumerate(sizes):
    end = min(start + int(n), x.shape[0])
    out[start:end] = x[start:end].astype(np.float64) @ w[i].astype(np.float64)
    start = end
  return out


def _np_ragged_contracting(a, b, sizes):
  """Mode 2 (lhs [m,k], rhs [k,n]): result i contracts the k of group i."""
  out = np.zeros((len(sizes), a.shape[0], b.shape[1]), np.float64)
  start = 0
  for i, n in enumerate(sizes):
    end = min(start + int(n), a.shape[1])
    out[i] = a[:, start:end].astype(np.float64) @ b[start:end].astype(np.float64)
    start = end
  return out


def _group_sizes(draw, m, g):
  cuts = sorted(draw(st.lists(st.integers(0, m), min_size=g - 1, max_size=g - 1)))
  total = draw(st.integers(cuts[-1] if cuts else 0, m))
  edges = [0, *cuts, total]
  return np.diff(edges).astype(np.int32)


@st.composite
def _mode1_case(draw):
  m, k, n, g = (draw(st.integers(1, 6)), draw(st.integers(1, 4)), draw(st.integers(1, 4)),
                draw(st.integers(1, 4)))
  return m, k, n, _group_sizes(draw, m, g), draw(st.integers(0, 100))


@given(_mode1_case())
def test_ragged_dot_matches_a_loop_over_groups(case):
  m, k, n, sizes, seed = case
  x, w = _rand((m, k), seed=seed), _rand((len(sizes), k, n), seed=seed + 1)
  got = lax.ragged_dot(x, w, sizes)
  assert got.shape == (m, n) and got.dtype == np.float32
  np.testing.assert_allclose(np.asarray(got), _np_ragged_dot(x, w, sizes), rtol=1e-5,
                             atol=1e-5)


@given(_mode1_case())
def test_ragged_contracting_matches_a_loop_over_groups(case):
  k, m, n, sizes, seed = case
  a, b = _rand((m, k), seed=seed), _rand((k, n), seed=seed + 1)
  dims = RDN((([1], [0]), ([], [])), [1], [])
  got = lax.ragged_dot_general(a, b, sizes, dims)
  np.testing.assert_allclose(np.asarray(got), _np_ragged_contracting(a, b, sizes),
                             rtol=1e-5, atol=1e-5)


# (lhs shape, rhs shape, group_sizes shape, dims as (dot dims, ragged, group))
GENERAL = {
    "mode1": ((6, 4), (3, 4, 5), (3,), ((([1], [1]), ([], [])), [0], [0])),
    "mode1_batch": ((2, 6, 4), (3, 2, 4, 5), (2, 3), ((([2], [2]), ([0], [1])), [1], [0])),
    "mode1_rhs_group_last": ((6, 4), (4, 5, 3), (3,), ((([1], [0]), ([], [])), [0], [2])),
    "mode1_two_free": ((3, 6, 4), (3, 4, 2), (3, 3), ((([2], [1]), ([], [])), [1], [0])),
    "mode2": ((3, 6), (6, 2), (3,), ((([1], [0]), ([], [])), [1], [])),
    "mode2_batch": ((2, 3, 6), (2, 6, 4), (2, 3), ((([2], [1]), ([0], [0])), [2], [])),
    "mode3": ((4, 3, 5), (4, 5, 2), (2,), ((([2], [1]), ([0], [0])), [0], [])),
}


def _general_args(name, seed=0):
  ls, rs, gs, (dd, rag, grp) = GENERAL[name]
  x, y = _rand(ls, seed=seed), _rand(rs, seed=seed + 1)
  rng = np.random.default_rng(seed + 2)
  total = ls[rag[0]]
  sizes = rng.multinomial(total - rng.integers(0, 2), [1 / gs[-1]] * gs[-1],
                          size=gs[:-1] or None).astype(np.int32)
  return x, y, sizes, RDN(dd, rag, grp), JRDN(dd, rag, grp)


@pytest.mark.parametrize("name", sorted(GENERAL))
def test_ragged_dot_general_values_and_jaxpr_as_jax(name):
  x, y, gs, dims, jdims = _general_args(name)
  got = lax.ragged_dot_general(x, y, gs, dims)
  want = jlax.ragged_dot_general(x, y, gs, jdims)
  assert got.shape == want.shape and got.dtype == want.dtype
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(sc.jit(lax.ragged_dot_general, static_argnums=3)(
      x, y, gs, dims)), want, rtol=1e-5, atol=1e-5)
  assert (str(sc.make_jaxpr(lambda a, b, c: lax.ragged_dot_general(a, b, c, dims))(x, y, gs))
          == str(jax.make_jaxpr(lambda a, b, c: jlax.ragged_dot_general(a, b, c, jdims))(
              x, y, gs)))


@pytest.mark.parametrize("name", ["mode1", "mode1_batch", "mode1_rhs_group_last",
                                  "mode1_two_free"])
def test_mode1_gradients_as_jax(name):
  x, y, gs, dims, jdims = _general_args(name, seed=3)
  f = lambda a, b: (lax.ragged_dot_general(a, b, gs, dims) ** 2).sum()
  jf = lambda a, b: (jlax.ragged_dot_general(a, b, gs, jdims) ** 2).sum()
  for got, want in zip(sc.grad(f, (0, 1))(x, y), jax.grad(jf, (0, 1))(x, y)):
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
  assert str(sc.make_jaxpr(sc.grad(f, (0, 1)))(x, y)) == str(
      jax.make_jaxpr(jax.grad(jf, (0, 1)))(x, y))
  with sc.enable_x64():   # finite differences in float64
    check_grads(lambda a, b: lax.ragged_dot_general(a, b, gs, dims),
                (x.astype(np.float64), y.astype(np.float64)), order=1, modes=("fwd", "rev"))


def test_ragged_dot_second_order_and_dtypes():
  x, w, gs = _rand((5, 3)), _rand((2, 3, 4), seed=1), np.array([2, 3], np.int32)
  with sc.enable_x64():
    check_grads(lambda a, b: lax.ragged_dot(a, b, gs), (x.astype(np.float64),
                                                        w.astype(np.float64)),
                order=2, modes=("fwd",))
    # reverse over reverse needs mode 2's transpose, which JAX does not have either
    mixed = lambda rd, g: g(lambda a: g(lambda b: (rd(a, b, gs) ** 2).sum())(w).sum())(x)
    with pytest.raises(NotImplementedError, match="mode RAGGED_CONTRACTING"):
      mixed(jlax.ragged_dot, jax.grad)
    with pytest.raises(NotImplementedError, match="mode RAGGED_CONTRACTING"):
      mixed(lax.ragged_dot, sc.grad)
  # forward over reverse works (JAX's vmap of it does not): H is block diagonal,
  # H[g,k,n,g,k',n] = 2 sum over the rows r of group g of x[r,k] x[r,k']
  h = sc.hessian(lambda b: (lax.ragged_dot(x, b, gs) ** 2).sum())(w)
  want = np.zeros((2, 3, 4, 2, 3, 4))
  for g, rows in enumerate([slice(0, 2), slice(2, 5)]):
    gram = 2 * x[rows].T.astype(np.float64) @ x[rows]
    for n in range(4):
      want[g, :, n, g, :, n] = gram
  np.testing.assert_allclose(np.asarray(h), want, rtol=1e-5, atol=1e-5)
  with sc.enable_x64():
    got = lax.ragged_dot(x.astype(np.float64), w.astype(np.float64), gs.astype(np.int64))
    assert got.dtype == np.float64
    np.testing.assert_allclose(np.asarray(got), _np_ragged_dot(x, w, gs), rtol=1e-12)
  out = lax.ragged_dot(x, w, gs, preferred_element_type=np.float64)   # x64 off: float32
  assert out.dtype == np.float32
  i = lax.ragged_dot(np.ones((5, 3), np.int8), np.ones((2, 3, 4), np.int8), gs,
                     preferred_element_type=np.int32)
  assert i.dtype == np.int32 and int(np.asarray(i)[0, 0]) == 3
  bf = lax.ragged_dot(x, w, gs, precision="BF16_BF16_F32")
  np.testing.assert_allclose(np.asarray(bf), jlax.ragged_dot(x, w, gs, precision="BF16_BF16_F32"),
                             rtol=1e-6, atol=1e-6)
  assert "precision=BF16_BF16_F32" in str(sc.make_jaxpr(
      lambda a: lax.ragged_dot(a, w, gs, precision="BF16_BF16_F32"))(x))


@pytest.mark.parametrize("name", ["mode2", "mode3"])
def test_transpose_not_implemented_outside_mode1_as_jax(name):
  x, y, gs, dims, jdims = _general_args(name)
  with pytest.raises(NotImplementedError) as theirs:
    jax.grad(lambda a: jlax.ragged_dot_general(a, y, gs, jdims).sum())(x)
  with pytest.raises(NotImplementedError, match=re.escape(str(theirs.value))):
    sc.grad(lambda a: lax.ragged_dot_general(a, y, gs, dims).sum())(x)
  # forward mode works (JVP is bilinear) and agrees with JAX
  t = _rand(x.shape, seed=9)
  got = sc.jvp(lambda a: lax.ragged_dot_general(a, y, gs, dims), (x,), (t,))[1]
  want = jax.jvp(lambda a: jlax.ragged_dot_general(a, y, gs, jdims), (x,), (t,))[1]
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


VMAP_CASES = [(name, axes) for name in sorted(GENERAL)
              for axes in [(0, 0, 0), (0, None, None), (None, 0, 0), (1, None, 0)]
              if name in ("mode1", "mode1_batch", "mode2_batch") or axes == (0, 0, 0)]
VMAP_CASES += [("mode1_two_free", (0, None, 0)), ("mode3", (0, 0, None))]


@pytest.mark.parametrize("name,axes", VMAP_CASES)
def test_vmap_matches_a_loop(name, axes):
  x, y, gs, dims, jdims = _general_args(name)
  B = 3
  args = []
  for v, ax, seed in zip((x, y, gs), axes, (5, 6, 7)):
    if ax is None:
      args.append(v)
    elif v.dtype == np.int32:
      args.append(np.stack([np.random.default_rng(seed + i).permutation(v.ravel())
                            .reshape(v.shape) for i in range(B)], ax))
    else:
      args.append(np.stack([_rand(v.shape, seed=seed + i) for i in range(B)], ax))
  got = sc.vmap(lambda a, b, c: lax.ragged_dot_general(a, b, c, dims), axes)(*args)
  take = lambda v, ax, i: v if ax is None else np.take(v, i, axis=ax)
  want = np.stack([np.asarray(jlax.ragged_dot_general(*(take(v, ax, i) for v, ax in
                                                         zip(args, axes)), jdims))
                   for i in range(B)])
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_vmap_of_grad_and_jvp_of_vmap():
  x, w, gs = _rand((4, 5, 3)), _rand((2, 3, 4), seed=1), np.array([2, 3], np.int32)
  f = lambda a, b: (lax.ragged_dot(a, b, gs) ** 2).sum()
  jf = lambda a, b: (jlax.ragged_dot(a, b, gs) ** 2).sum()
  got = sc.vmap(sc.grad(f, (0, 1)), (0, None))(x, w)
  want = [np.stack(v) for v in zip(*[jax.grad(jf, (0, 1))(x[i], w) for i in range(4)])]
  for a, b in zip(got, want):
    np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5, atol=1e-5)


def test_rows_past_the_groups_and_empty_groups_are_zero():
  x, w = np.ones((5, 2), np.float32), np.ones((3, 2, 2), np.float32)
  out = np.asarray(lax.ragged_dot(x, w, np.array([0, 2, 1], np.int32)))
  np.testing.assert_array_equal(out, np.array([[2, 2]] * 3 + [[0, 0]] * 2, np.float32))


def test_dimension_numbers_class():
  d = RDN([[[1], [1]], [[], []]], [0], [0])
  assert d.dot_dimension_numbers == (((1,), (1,)), ((), ()))
  assert d == RDN((((1,), (1,)), ((), ())), (0,), (0,)) and hash(d) == hash(RDN(
      (([1], [1]), ([], [])), [0], [0]))
  assert repr(d) == repr(JRDN([[[1], [1]], [[], []]], [0], [0]))
  with pytest.raises(Exception):
    d.lhs_ragged_dimensions = (1,)
  # JAX's own object is accepted
  x, w, gs = _rand((4, 2)), _rand((2, 2, 3), seed=1), np.array([1, 3], np.int32)
  np.testing.assert_allclose(np.asarray(lax.ragged_dot_general(x, w, gs, JRDN(
      (([1], [1]), ([], [])), [0], [0]))), jlax.ragged_dot(x, w, gs), rtol=1e-6)


ERRORS = [
    ("group_sizes rank 0", (6, 4), (3, 4, 5), (), np.int32, ((([1], [1]), ([], [])), [0], [0])),
    ("float group_sizes", (6, 4), (3, 4, 5), (3,), np.float32,
     ((([1], [1]), ([], [])), [0], [0])),
    ("two ragged dims", (6, 4), (3, 4, 5), (3,), np.int32,
     ((([1], [1]), ([], [])), [0, 1], [0])),
    ("ragged dim out of range", (6, 4), (3, 4, 5), (3,), np.int32,
     ((([1], [1]), ([], [])), [2], [0])),
    ("no group dim in mode 1", (6, 4), (4, 5), (3,), np.int32,
     ((([1], [0]), ([], [])), [0], [])),
    ("group dim in mode 2", (3, 6), (2, 6, 2), (2,), np.int32,
     ((([1], [1]), ([], [])), [1], [0])),
    ("group dim size", (6, 4), (2, 4, 5), (3,), np.int32, ((([1], [1]), ([], [])), [0], [0])),
    ("group dim contracted", (6, 4), (4, 4, 5), (4,), np.int32,
     ((([1], [0]), ([], [])), [0], [0])),
    ("group dim out of range", (6, 4), (3, 4, 5), (3,), np.int32,
     ((([1], [1]), ([], [])), [0], [3])),
    ("group_sizes shape", (2, 6, 4), (3, 2, 4, 5), (3, 3), np.int32,
     ((([2], [2]), ([0], [1])), [1], [0])),
    ("contracting sizes", (6, 4), (3, 5, 5), (3,), np.int32,
     ((([1], [1]), ([], [])), [0], [0])),
]


@pytest.mark.parametrize("case", ERRORS, ids=[c[0] for c in ERRORS])
def test_errors_as_jax(case):
  _, ls, rs, gs_shape, gs_dtype, (dd, rag, grp) = case
  x, y, gs = np.ones(ls, np.float32), np.ones(rs, np.float32), np.ones(gs_shape, gs_dtype)
  with pytest.raises(TypeError) as theirs:
    jlax.ragged_dot_general(x, y, gs, JRDN(dd, rag, grp))
  with pytest.raises(TypeError) as ours:
    lax.ragged_dot_general(x, y, gs, RDN(dd, rag, grp))
  if "contracting sizes" not in case[0]:
    assert str(ours.value) == str(theirs.value)


def test_group_offset_is_not_implemented_as_jax():
  x, w, gs = _rand((4, 2)), _rand((2, 2, 3), seed=1), np.array([1, 3], np.int32)
  off = np.array([0], np.int32)
  # NB: JAX 0.10 raises this message when computing (its eager call fails earlier, hashing
  # the array param: TypeError); stagecraft raises it when called.
  with pytest.raises(NotImplementedError, match="Unimplemented group_offset support."):
    lax.ragged_dot(x, w, gs, group_offset=off)
  with pytest.raises(TypeError, match="RaggedDotDimensionNumbers"):
    lax.ragged_dot_general(x, w, gs, (((1,), (1,)), ((), ())))
