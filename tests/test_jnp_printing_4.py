"""More `stagecraft.numpy` programs printed as JAX 0.10.2 prints them, character for
character, with their values (eager and under `jit`, x64 off and on), gradients and errors:
`searchsorted` with each method ('scan', 'scan_unrolled', 'sort', 'compare_all'; the
total-order comparisons `lt_to`/`le_to`/`eq_to`), `sort`/`argsort` (int32 iotas, int64 with
x64), `atleast_1d/2d/3d`, `diagonal`/`diag`, `arange`, einsum over repeated labels (a
Kronecker-delta mask), contractions of mixed dtypes (`dot_general` with a preferred element
type), `average`, `take_along_axis(mode='one_hot')`, scalar constants made while staging
(`full((), 0.1) + x`), and `asarray` of strings (JAX's TypeError).

`KNOWN_DIFFERENCES` lists programs that still print differently (each with its cause); they
are asserted to differ, so that a fix shows up as a failure asking to move them.
"""
from __future__ import annotations

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.lax.sort import eq_to_p, le_to_p, lt_to_p
from stagecraft.test_util import check_grads

from _util import as_x64, assert_like_jax, jnp_error_tests, jnp_printing_tests

_RNG = np.random.default_rng(4)
F = _RNG.standard_normal((3, 4)).astype(np.float32)
G = _RNG.standard_normal((3, 3, 3)).astype(np.float32)
V = _RNG.standard_normal(4).astype(np.float32)
A = _RNG.standard_normal((5, 3)).astype(np.float32)
B = _RNG.standard_normal((5, 3)).astype(np.float32)
AI = (A * 3).astype(np.int32)
# sorted, with -inf, both zeros, ties and NaN (last, as lax.sort puts it)
S = np.array([-np.inf, -1., -0., 0., 1., 2., 2., np.nan], np.float32)
Q = np.array([np.nan, -np.nan, -0., 0., 2., 3., -np.inf, np.inf, 1.5], np.float32)
IDX = np.array([[0, -1], [3, 1], [2, 5]], np.int32)

_METHODS = ("scan", "scan_unrolled", "sort", "compare_all")

# name -> (m -> function, args); m is jax.numpy or stagecraft.numpy.
CASES = {
    "dot_weak": (lambda m: lambda: m.dot(m.asarray(2.0), 3.0), ()),
    "take_along_axis_one_hot_broadcast": (
        lambda m: lambda x, i: m.take_along_axis(x, i, axis=1, mode="one_hot"), (F[:1], IDX)),
    "einsum_broadcast_size1": (lambda m: lambda x, y: m.einsum("bjk,bjk->bk", x, y),
                               (F[:1, :, None], F[:, :, None] * 2)),
    **{f"searchsorted_{k}_{side}": (
        lambda m, k=k, side=side: lambda a, v: m.searchsorted(a, v, side=side, method=k),
        (S, Q)) for k in _METHODS for side in ("left", "right")},
    **{f"searchsorted_{k}_scalar": (
        lambda m, k=k: lambda a, v: m.searchsorted(a, v, method=k), (S, np.float32(0.5)))
       for k in _METHODS},
    **{f"searchsorted_{k}_2d": (
        lambda m, k=k: lambda a, v: m.searchsorted(a, v, side="right", method=k), (S, F))
       for k in _METHODS},
    "searchsorted_int": (lambda m: m.searchsorted, (np.arange(5, dtype=np.int32),
                                                    IDX)),
    "searchsorted_uint": (lambda m: lambda a, v: m.searchsorted(a, v, side="right"),
                          (np.arange(5, dtype=np.uint8), np.uint8(3))),
    "searchsorted_bool": (lambda m: m.searchsorted, (np.array([False, True, True]),
                                                     np.array([True, False]))),
    "searchsorted_complex": (lambda m: m.searchsorted, (np.sort_complex(V + 1j * V[::-1]),
                                                        (V + 1j).astype(np.complex64))),
    "searchsorted_complex_all": (
        lambda m: lambda a, v: m.searchsorted(a, v, method="compare_all"),
        (np.sort_complex(V + 1j * V[::-1]).astype(np.complex64), (V + 1j).astype(np.complex64))),
    "searchsorted_mixed": (lambda m: m.searchsorted, (np.arange(5, dtype=np.int32), F)),
    "searchsorted_sorter": (lambda m: lambda a, v, s: m.searchsorted(a, v, sorter=s),
                            (V, F, np.argsort(V).astype(np.int32))),
    "searchsorted_empty": (lambda m: m.searchsorted, (V[:0], F)),
    "searchsorted_python_scalar": (lambda m: lambda a: m.searchsorted(a, 1.5), (S,)),
    "digitize_method_sort": (lambda m: lambda x: m.digitize(x, np.array([-1., 0., 1.],
                                                                        np.float32),
                                                            method="sort"), (F,)),
    "sort": (lambda m: m.sort, (V,)),
    "sort_2d_axis0": (lambda m: lambda x: m.sort(x, axis=0), (F,)),
    "sort_descending": (lambda m: lambda x: m.sort(x, descending=True), (F,)),
    "argsort": (lambda m: m.argsort, (V,)),
    "argsort_2d": (lambda m: m.argsort, (F,)),
    "argsort_2d_axis0": (lambda m: lambda x: m.argsort(x, axis=0), (F,)),
    "argsort_none": (lambda m: lambda x: m.argsort(x, axis=None), (F,)),
    "argsort_descending": (lambda m: lambda x: m.argsort(x, descending=True), (F,)),
    "argsort_unstable": (lambda m: lambda x: m.argsort(x, stable=False), (F,)),
    "argsort_dtype": (lambda m: lambda x: m.argsort(x, dtype=np.int16), (V,)),
    "atleast_1d": (lambda m: lambda x: m.atleast_1d(x, x), (np.float32(1),)),
    "atleast_2d": (lambda m: m.atleast_2d, (V,)),
    "atleast_2d_scalar": (lambda m: m.atleast_2d, (np.float32(1),)),
    "atleast_2d_matrix": (lambda m: m.atleast_2d, (F,)),
    "atleast_3d": (lambda m: m.atleast_3d, (V,)),
    "atleast_3d_matrix": (lambda m: m.atleast_3d, (F,)),
    "vstack": (lambda m: lambda a, b: m.vstack([a, b]), (V, V)),
    "hstack": (lambda m: lambda a, b: m.hstack([a, b]), (V, np.float32(1))),
    "diagonal": (lambda m: m.diagonal, (F,)),
    "diagonal_offset": (lambda m: lambda x: m.diagonal(x, 1), (F,)),
    "diagonal_negative_offset": (lambda m: lambda x: m.diagonal(x, -1), (F,)),
    "diagonal_empty": (lambda m: lambda x: m.diagonal(x, 5), (F,)),
    "diagonal_axes": (lambda m: lambda x: m.diagonal(x, 1, 0, 2), (G,)),
    # A square matrix's diagonal is platform_dependent (platform_index and a cond with
    # branches_platforms), as JAX's.
    "diagonal_square": (lambda m: m.diagonal, (G[0],)),
    "diagonal_method": (lambda m: lambda x: m.asarray(x).diagonal(), (F,)),
    "diag_matrix": (lambda m: m.diag, (F,)),
    "diag_vector": (lambda m: m.diag, (V,)),
    "diag_vector_k": (lambda m: lambda v: m.diag(v, -1), (V,)),
    "diag_vector_k2": (lambda m: lambda v: m.diag(v, 2), (V,)),
    "arange": (lambda m: lambda: m.arange(3), ()),
    "arange_start": (lambda m: lambda: m.arange(1, 4), ()),
    "arange_step": (lambda m: lambda: m.arange(1, 7, 2), ()),
    "arange_float": (lambda m: lambda: m.arange(0.5, 3), ()),
    "arange_float_step": (lambda m: lambda: m.arange(1., 2., .25), ()),
    "arange_negative_step": (lambda m: lambda: m.arange(5, 1, -1), ()),
    "arange_f16": (lambda m: lambda: m.arange(0, 1, 0.1, dtype=np.float16), ()),
    "einsum_ii_i": (lambda m: lambda a: m.einsum("ii->i", a), (G[0],)),
    "einsum_trace": (lambda m: lambda a: m.einsum("ii->", a), (G[0],)),
    "einsum_iij_j": (lambda m: lambda a: m.einsum("iij->j", a), (G,)),
    "einsum_iii_i": (lambda m: lambda a: m.einsum("iii->i", a), (G,)),
    "einsum_iji_j": (lambda m: lambda a: m.einsum("iji->j", a), (G,)),
    "einsum_ii_i_i": (lambda m: lambda a, v: m.einsum("ii,i->i", a, v), (G[0], V[:3])),
    "einsum_ij_jj": (lambda m: lambda a, b: m.einsum("ij,jj->i", a, b), (F[:, :3], G[1])),
    "einsum_iij_jk": (lambda m: lambda a, b: m.einsum("iij,jk->ik", a, b), (G, F[:, :3])),
    "einsum_mixed": (lambda m: lambda a, b: m.einsum("ij,kj->ik", a, b), (AI, B)),
    "einsum_mixed_unary": (lambda m: lambda a, b: m.einsum("ij,k->", a, b), (AI, V)),
    "dot_mixed": (lambda m: m.dot, (AI, B.T)),
    "dot_mixed_vectors": (lambda m: m.dot, (AI[0], B[0])),
    "dot_scalar": (lambda m: m.dot, (AI, np.float32(2))),
    "dot_python_scalar": (lambda m: lambda a: m.dot(a, 2.0), (A,)),
    "matmul_mixed": (lambda m: m.matmul, (AI, B.T)),
    "matmul_bool": (lambda m: m.matmul, (A > 0, B.T)),
    "matmul_f16": (lambda m: m.matmul, (A.astype(np.float16), B.T)),
    "matmul_preferred": (lambda m: lambda a, b: m.matmul(a, b, preferred_element_type=np.int32),
                         (AI.astype(np.int8), AI.T.astype(np.int8))),
    "vdot_mixed": (lambda m: m.vdot, (AI, B)),
    "vecdot_mixed": (lambda m: m.vecdot, (AI, B)),
    "vecdot_complex": (lambda m: m.vecdot, (A.astype(np.complex64), B)),
    "inner_mixed": (lambda m: m.inner, (AI, B)),
    "tensordot_mixed": (lambda m: lambda a, b: m.tensordot(a, b, ([0], [0])), (AI, B)),
    "average": (lambda m: lambda x, w: m.average(x, axis=1, weights=w), (F, V)),
    "average_axis0": (lambda m: lambda x, w: m.average(x, axis=0, weights=w), (F, V[:3])),
    "average_none": (lambda m: m.average, (F,)),
    "average_returned": (lambda m: lambda x: m.average(x, axis=0, returned=True), (F,)),
    "average_weights_returned": (lambda m: lambda x, w: m.average(x, 1, w, returned=True),
                                 (F, V)),
    "average_int_keepdims": (lambda m: lambda x: m.average(x, 1, keepdims=True), (AI,)),
    "take_along_axis_one_hot": (lambda m: lambda x, i: m.take_along_axis(x, i, axis=1,
                                                                         mode="one_hot"),
                                (F, IDX)),
    "take_along_axis_one_hot_axis0": (
        lambda m: lambda x, i: m.take_along_axis(x, i, axis=0, mode="one_hot"),
        (F.T, IDX.T % 3)),
    "take_along_axis_one_hot_1d": (
        lambda m: lambda x, i: m.take_along_axis(x, i, axis=0, mode="one_hot"), (V, IDX[:, 0])),
    "take_along_axis_one_hot_3d": (
        lambda m: lambda x, i: m.take_along_axis(x, i, axis=1, mode="one_hot"),
        (G, np.ones((3, 2, 3), np.int32))),
    "take_along_axis_one_hot_int": (
        lambda m: lambda x, i: m.take_along_axis(x, i, axis=1, mode="one_hot"),
        (AI.T, IDX % 3)),
    "full_scalar_plus": (lambda m: lambda x: m.full((), 0.1) + x, (V,)),
    "full_scalar_plus_f16": (lambda m: lambda x: m.full((), 0.1) + x, (V.astype(np.float16),)),
    "full_int_scalar_plus_f16": (lambda m: lambda x: m.full((), 2) + x,
                                 (np.float16(1),)),
    "asarray_scalar_plus_f16": (lambda m: lambda x: m.asarray(0.1) + x,
                                (V.astype(np.float16),)),
    "histogram": (lambda m: lambda x: m.histogram(x, 3), (F,)),
    "interp": (lambda m: m.interp, (V, np.sort(F[0]), F[1])),
    "average_tuple_axis": (lambda m: lambda x, w: m.average(x, axis=(2, 0), weights=w),
                           (G, G[:, 0].T.copy())),
}

X64_CASES = ["searchsorted_scan_left", "searchsorted_sort_right", "searchsorted_compare_all_2d",
             "searchsorted_int", "argsort", "argsort_2d", "argsort_none", "sort_descending",
             "arange_start", "arange_float_step", "diagonal", "diag_vector_k", "einsum_ii_i",
             "dot_mixed", "matmul_mixed", "average", "take_along_axis_one_hot",
             "full_scalar_plus_f16", "atleast_2d"]

# Programs still printed differently from JAX, with the cause; values are checked all the
# same.
KNOWN_DIFFERENCES = {
}

globals().update(jnp_printing_tests(
    CASES, X64_CASES, {k: v for k, (v, _) in KNOWN_DIFFERENCES.items()}))


# ---------------------------------------------------------------------------
# searchsorted: every method gives NumPy's indices under lax.sort's total order


def _numpy_searchsorted(a, v, side):
  """NumPy's searchsorted on keys mapped to lax.sort's order (-0.0 == 0.0, NaNs last)."""
  def key(x):
    x = np.where(x == 0, 0, x).astype(np.float64)
    return np.where(np.isnan(x), np.inf, np.where(np.isinf(x), np.sign(x) * 1e300, x)), \
        np.isnan(x)
  ka, na = key(a)
  kv, nv = key(v)
  # lexicographic on (is_nan, value): NaNs above everything and equal to each other
  ra = na * 2.0e300 + np.where(na, 0, ka)
  rv = nv * 2.0e300 + np.where(nv, 0, kv)
  return np.searchsorted(ra, rv, side=side)


@pytest.mark.parametrize("method", _METHODS)
@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_methods_like_numpy(method, side):
  want = _numpy_searchsorted(S, Q, side)
  got = jnp.searchsorted(S, Q, side=side, method=method)
  np.testing.assert_array_equal(np.asarray(got), want)
  np.testing.assert_array_equal(
      np.asarray(sc.jit(lambda a, v: jnp.searchsorted(a, v, side=side, method=method))(S, Q)),
      want)


@given(st.lists(st.integers(-4, 4), min_size=0, max_size=9),
       st.lists(st.integers(-5, 5), min_size=0, max_size=6),
       st.sampled_from(_METHODS), st.sampled_from(["left", "right"]), st.booleans())
def test_searchsorted_random_like_numpy(a, v, method, side, x64):
  a = np.sort(np.array(a, np.float64)) / 2
  v = np.array(v, np.float64) / 2
  want = np.searchsorted(a, v, side=side)
  if x64:
    with sc.enable_x64():
      got = jnp.searchsorted(a, v, side=side, method=method)
  else:
    got = jnp.searchsorted(a.astype(np.float32), v.astype(np.float32), side=side,
                           method=method)
  assert got.dtype == np.int32   # as JAX's, also with x64
  np.testing.assert_array_equal(np.asarray(got), want)


def test_searchsorted_under_vmap_and_grad():
  qs = np.stack([Q, Q[::-1]])
  for method in _METHODS:
    got = sc.vmap(lambda v: jnp.searchsorted(S, v, method=method))(qs)
    want = jax.vmap(lambda v: jjnp.searchsorted(S, v, method=method))(qs)
    assert_like_jax(got, want, method)
  # interp is differentiable in x and fp through the (piecewise constant) search
  xp = np.sort(F[0])
  for argnum in (0, 2):
    got = sc.grad(lambda *a: jnp.interp(*a).sum(), argnum)(V, xp, F[1])
    want = jax.grad(lambda *a: jjnp.interp(*a).sum(), argnum)(V, xp, F[1])
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)


def test_total_order_comparisons():
  x = np.array([-np.inf, -1., -0., 0., 1., np.inf, np.nan], np.float32)
  ordered = np.arange(len(x))
  ordered[3] = 3   # -0.0 < 0.0 in the total order: distinct ranks
  lt = np.asarray(lt_to_p.bind(x[:, None], x[None, :]))
  le = np.asarray(le_to_p.bind(x[:, None], x[None, :]))
  eq = np.asarray(eq_to_p.bind(x[:, None], x[None, :]))
  np.testing.assert_array_equal(lt, ordered[:, None] < ordered[None, :])
  np.testing.assert_array_equal(le, ordered[:, None] <= ordered[None, :])
  np.testing.assert_array_equal(eq, ordered[:, None] == ordered[None, :])
  i = np.array([3, -2, 0], np.int32)
  np.testing.assert_array_equal(np.asarray(lt_to_p.bind(i, np.int32(0))), i < 0)
  u = np.array([3, 250, 0], np.uint8)
  np.testing.assert_array_equal(np.asarray(le_to_p.bind(u, np.uint8(3))), u <= 3)
  # batched (vmap) and printed as JAX's `lt_to`
  got = sc.vmap(lambda a, b: lt_to_p.bind(a, b), (0, None))(x, np.float32(0))
  np.testing.assert_array_equal(np.asarray(got), ordered < 3)
  assert "lt_to a b" in str(sc.make_jaxpr(lambda a, b: lt_to_p.bind(a, b))(x, x))
  assert str(jax.lax.lt_to_p) == str(lt_to_p) == "lt_to"
  with pytest.raises(TypeError):
    lt_to_p.bind(x, x.astype(np.float16))


# ---------------------------------------------------------------------------
# Gradients: the same as JAX's, and as finite differences where smooth

GRAD_CASES = {
    "dot_mixed": (lambda m: lambda b: (m.dot(AI, b) ** 2).sum(), (B.T,)),
    "einsum_mixed": (lambda m: lambda b: (m.einsum("ij,kj->ik", AI, b) ** 2).sum(), (B,)),
    "einsum_diagonal": (lambda m: lambda a: (m.einsum("ii->i", a) ** 2).sum(), (G[0],)),
    "einsum_iij_jk": (lambda m: lambda a, b: m.einsum("iij,jk->ik", a, b).sum(),
                      (G, F[:, :3])),
    "diagonal": (lambda m: lambda x: (m.diagonal(x, 1) ** 2).sum(), (F,)),
    "diag_vector": (lambda m: lambda v: (m.diag(v, -1) * m.arange(25.).reshape(5, 5)).sum(),
                    (V,)),
    "average": (lambda m: lambda x, w: m.average(x, axis=1, weights=w).sum(),
                (F, np.abs(V) + 0.5)),
    "one_hot": (lambda m: lambda x: (m.take_along_axis(x, IDX, 1, mode="one_hot") ** 2).sum(),
                (F,)),
    "atleast_3d": (lambda m: lambda x: (m.atleast_3d(x) ** 2).sum(), (V,)),
}


globals().update(jnp_printing_tests({}, [], grad_cases=GRAD_CASES, grad_atol=1e-5))


@pytest.mark.parametrize("name", ["einsum_diagonal", "average", "one_hot", "diag_vector"])
def test_grad_finite_differences(name):
  mk, args = GRAD_CASES[name]
  with sc.enable_x64():
    check_grads(mk(jnp), as_x64(args), order=1, modes=("fwd", "rev"))


# ---------------------------------------------------------------------------
# Errors: JAX's exception types and messages

ERROR_CASES = {
    "asarray_str": lambda m: m.asarray("abc"),
    "array_str": lambda m: m.array("abc"),
    "asarray_str_list": lambda m: m.asarray(["x", "y"]),
    "asarray_bytes": lambda m: m.asarray(b"ab"),
    "searchsorted_side": lambda m: m.searchsorted(S, Q, side="middle"),
    "searchsorted_method": lambda m: m.searchsorted(S, Q, method="foo"),
    "searchsorted_2d": lambda m: m.searchsorted(F, V),
    "searchsorted_list": lambda m: m.searchsorted([1., 2.], V),
    "diagonal_1d": lambda m: m.diagonal(V),
    "diagonal_list": lambda m: m.diagonal([[1., 2.]]),
    "diag_3d": lambda m: m.diag(G),
    "diag_list": lambda m: m.diag([1., 2.]),
    "atleast_2d_list": lambda m: m.atleast_2d([1., 2.]),
    "average_weights_no_axis": lambda m: m.average(F, weights=V),
    "average_weights_shape": lambda m: m.average(F, 1, weights=V[:3]),
    "arange_array": lambda m: m.arange(np.arange(3)),
    "arange_complex": lambda m: m.arange(1j),
}
MESSAGE_CASES = ["asarray_str", "array_str", "asarray_str_list", "asarray_bytes",
                 "searchsorted_side", "searchsorted_method", "searchsorted_2d",
                 "searchsorted_list", "diagonal_1d", "diagonal_list", "diag_3d", "diag_list",
                 "average_weights_no_axis", "average_weights_shape",
                 "arange_array", "arange_complex"]


globals().update(jnp_error_tests(ERROR_CASES, MESSAGE_CASES))
