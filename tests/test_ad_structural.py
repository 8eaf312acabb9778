"""JVP and transpose rules of the shape, slicing, gather/scatter, reduction, cumulative and
sort primitives: finite-difference checks (orders 1 and 2, forward and reverse, float64) of
every differentiable primitive through its `lax` wrapper, JAX's gradients where the
derivative is a convention (ties, zeros, duplicates), `lax.associative_scan` against a
Python loop, and the errors of the unsupported cases."""
import operator
import re

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import stagecraft
import stagecraft.numpy as jnp
from stagecraft import dtypes, lax
from stagecraft.test_util import check_grads

from _util import assert_trees_allclose

RNG = np.random.default_rng(0)
X = RNG.standard_normal((5, 4))
X3 = RNG.standard_normal((3, 1, 4))
V4 = RNG.standard_normal((4, 4))
IDX = np.array([0, 3, 3, 1])          # a repeated index
UIDX = np.array([0, 3, 2])            # unique indices
OOB = np.array([1, 7])                # 7 is out of bounds for 5 rows
XT = np.array([[1., 3., 3., -2.], [0.5, 0.5, 0.5, 0.25], [-1., 2., 0., 2.]])   # ties
XZ = np.array([[2., 0., -1.5, 3.], [0., 1.25, 0., 2.], [-1., 0.5, 4., 0.75]])  # zeros


def _at(x):
  return jnp.asarray(x).at


def _dn_gather_rows():
  # x[idx, :] written out: rows gathered, the column dimension kept as an offset dim.
  return lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,),
                                    start_index_map=(0,))


def _dn_scatter_rows():
  return lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                     scatter_dims_to_operand_dims=(0,))


def _dn_gather_points():
  # x[i, j] at points: both dimensions collapsed, index vectors of length 2.
  return lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0, 1),
                                    start_index_map=(0, 1))


POINTS = np.array([[0, 1], [4, 3], [2, 2], [0, 1]], np.int32)

# (name, function, arguments): every differentiable primitive through its lax wrapper, and
# the gather/scatter configurations that NumPy indexing produces.
CASES = [
    # -- shape
    ("broadcast_in_dim", lambda x: lax.broadcast_in_dim(x, (2, 4, 3, 5, 4), (2, 1, 4)), (X3,)),
    ("broadcast_in_dim_unsorted", lambda x: lax.broadcast_in_dim(x, (4, 2, 5, 3), (3, 2, 0)),
     (X3,)),
    ("broadcast_scalar", lambda x: lax.broadcast_in_dim(x, (2, 3), ()), (np.float64(1.5),)),
    ("expand_dims", lambda x: lax.expand_dims(x, (0, 3)), (X,)),
    ("reshape", lambda x: lax.reshape(x, (2, 10)), (X,)),
    ("reshape_dimensions", lambda x: lax.reshape(x, (4, 5), (1, 0)), (X,)),
    ("transpose", lambda x: lax.transpose(x, (2, 0, 1)), (X3,)),
    ("squeeze", lambda x: lax.squeeze(x, (1,)), (X3,)),
    ("rev", lambda x: lax.rev(x, (0, 2)), (X3,)),
    ("concatenate", lambda x, y: lax.concatenate([x, y, x], 1), (X, X[:, :2])),
    ("concatenate_const", lambda x: lax.concatenate([np.ones((5, 1)), x], 1), (X,)),
    ("pad", lambda x, p: lax.pad(x, p, ((1, 2, 0), (0, 1, 0))), (X, np.float64(0.5))),
    ("pad_negative_interior", lambda x, p: lax.pad(x, p, ((1, -2, 2), (-1, 3, 1))),
     (X, np.float64(-0.25))),
    ("pad_crop_all_low", lambda x, p: lax.pad(x, p, ((-3, 0, 1), (0, -2, 0))),
     (X, np.float64(2.0))),
    # -- slicing
    ("slice", lambda x: lax.slice(x, (1, 1), (4, 3)), (X,)),
    ("slice_strided", lambda x: lax.slice(x, (1, 0), (5, 4), (2, 3)), (X,)),
    ("slice_in_dim", lambda x: lax.slice_in_dim(x, -3, None, axis=0), (X,)),
    ("dynamic_slice", lambda x: lax.dynamic_slice(x, (np.int32(1), np.int32(2)), (3, 2)),
     (X,)),
    ("dynamic_slice_clamped", lambda x: lax.dynamic_slice(x, (np.int32(4), np.int32(-1)),
                                                          (3, 2)), (X,)),
    ("dynamic_update_slice", lambda x, u: lax.dynamic_update_slice(
        x, u, (np.int32(1), np.int32(3))), (X, V4[:2, :2])),
    ("dynamic_update_index_in_dim", lambda x, u: lax.dynamic_update_index_in_dim(
        x, u, np.int32(-2), 0), (X, V4[0])),
    # -- gather (dimension numbers of x[idx], x[idx, 1:3], points, take, modes)
    ("gather_rows", lambda x: lax.gather(x, IDX[:, None], _dn_gather_rows(), (1, 4)), (X,)),
    ("gather_points", lambda x: lax.gather(x, POINTS, _dn_gather_points(), (1, 1)), (X,)),
    ("getitem_array", lambda x: jnp.asarray(x)[IDX], (X,)),
    ("getitem_array_slice", lambda x: jnp.asarray(x)[IDX, 1:3], (X,)),
    ("getitem_two_arrays", lambda x: jnp.asarray(x)[IDX, np.array([1, 0, 3, 1])], (X,)),
    ("take_axis1", lambda x: jnp.take(x, np.array([3, 0, 0]), axis=1), (X,)),
    ("get_fill_oob", lambda x: _at(x)[OOB].get(mode="fill", fill_value=0.0), (X,)),
    ("get_clip_oob", lambda x: _at(x)[OOB].get(mode="clip"), (X,)),
    ("index_take", lambda x: lax.index_take(x, (IDX, np.array([1, 0, 3, 1])), (0, 1)), (X,)),
    # -- scatters
    ("scatter_add_lax", lambda x, v: lax.scatter_add(x, IDX[:, None], v, _dn_scatter_rows()),
     (X, V4)),
    ("at_add", lambda x, v: _at(x)[IDX].add(v), (X, V4)),
    ("at_add_drop_oob", lambda x, v: _at(x)[OOB].add(v), (X, V4[:2])),
    ("at_add_clip", lambda x, v: _at(x)[OOB].add(v, mode="clip"), (X, V4[:2])),
    ("at_add_points", lambda x, v: _at(x)[IDX, np.array([1, 0, 3, 1])].add(v), (X, V4[0])),
    ("at_subtract", lambda x, v: _at(x)[IDX].subtract(v), (X, V4)),
    ("at_set", lambda x, v: _at(x)[IDX].set(v), (X, V4)),
    ("at_set_unique", lambda x, v: _at(x)[UIDX].set(v, unique_indices=True), (X, V4[:3])),
    ("at_set_slice", lambda x, v: _at(x)[1:3, IDX[:2]].set(v), (X, V4[:2, :2])),
    ("at_multiply_operand", lambda x: _at(x)[IDX].multiply(V4), (X,)),
    ("at_multiply_unique", lambda x, v: _at(x)[UIDX].multiply(v, unique_indices=True),
     (X, V4[:3])),
    ("at_min", lambda x, v: _at(x)[IDX].min(v), (X, V4)),
    ("at_max", lambda x, v: _at(x)[IDX].max(v), (X, V4)),
    # -- reductions
    ("reduce_sum", lambda x: lax.reduce_sum(x, (0, 2)), (X3,)),
    ("reduce_max", lambda x: lax.reduce_max(x, (0,)), (X,)),
    ("reduce_min", lambda x: lax.reduce_min(x, (0, 2)), (X3,)),
    ("reduce_prod", lambda x: lax.reduce_prod(x, (1,)), (X,)),
    ("reduce_prod_all", lambda x: lax.reduce_prod(x, (0, 1, 2)), (X3,)),
    ("reduce_prod_zeros", lambda x: lax.reduce_prod(x, (1,)), (XZ,)),
    # (1 + a)(1 + b) - 1: associative and commutative, with identity 0
    ("reduce_general", lambda x: lax.reduce(x * 0.3, np.float64(0),
                                            lambda a, b: a + b + a * b, (0,)), (X,)),
    ("reduce_general_pytree", lambda x, y: lax.reduce(
        (x, y), (np.float64(0), np.float64(1)), lambda a, b: (a[0] + b[0], a[1] * b[1]),
        (1,)), (X, X * 0.5)),
    ("reduce_general_max_abs", lambda x: lax.reduce(
        x, np.float64(0), lambda a, b: lax.max(lax.abs(a), lax.abs(b)), (0,)), (X,)),
    # -- cumulative
    ("cumsum", lambda x: lax.cumsum(x, 0), (X,)),
    ("cumsum_reverse", lambda x: lax.cumsum(x, 1, reverse=True), (X,)),
    ("cumprod", lambda x: lax.cumprod(x, 0), (X,)),
    ("cumprod_reverse", lambda x: lax.cumprod(x, 1, reverse=True), (X,)),
    ("cumprod_zeros", lambda x: lax.cumprod(x, 1), (XZ,)),
    ("cummax", lambda x: lax.cummax(x, 0), (X,)),
    ("cummax_reverse", lambda x: lax.cummax(x, 1, reverse=True), (X,)),
    ("cummin", lambda x: lax.cummin(x, 1), (X,)),
    ("cumlogsumexp", lambda x: lax.cumlogsumexp(x, 0), (X,)),
    ("cumlogsumexp_reverse", lambda x: lax.cumlogsumexp(x, 1, reverse=True), (X,)),
    ("associative_scan_mul", lambda x: lax.associative_scan(lax.mul, x, axis=1), (X,)),
    # -- sort and top_k
    ("sort", lambda x: lax.sort(x, 0), (X,)),
    ("sort_last", lambda x: lax.sort(x), (X,)),
    ("sort_key_val", lambda x, y: lax.sort_key_val(x, y, 0), (X, X * 2.0)),
    ("sort_num_keys", lambda x, y: lax.sort(
        (np.array([[1, 0, 1, 0], [2, 2, 1, 1]], np.int32), x, y), 1, num_keys=2)[1:],
     (X[:2], X[2:4])),
    ("top_k", lambda x: lax.top_k(x, 2)[0], (X,)),
    ("top_k_axis0", lambda x: lax.top_k(x, 3, axis=0)[0], (X,)),
]


@pytest.mark.parametrize("name,fun,args", CASES, ids=[c[0] for c in CASES])
def test_check_grads(name, fun, args):
  with stagecraft.enable_x64():
    check_grads(fun, args, order=2, modes=("fwd", "rev"))


# ---------------------------------------------------------------------------
# Conventions, against JAX (float64 on both sides)


def _both_grads(f_sc, f_jax, *args, argnums=0):
  got = stagecraft.grad(f_sc, argnums=argnums)(*args)
  with jax.enable_x64(True):
    want = jax.grad(f_jax, argnums=argnums)(*args)
  return got, want


def _assert_tree_close(got, want, rtol=1e-12, atol=1e-12):
  assert_trees_allclose(got, want, rtol=rtol, atol=atol)


W = RNG.standard_normal((3,))
W4 = RNG.standard_normal((4,))


@pytest.mark.parametrize("axes", [(0,), (1,), (0, 1)])
@pytest.mark.parametrize("op", ["max", "min"])
def test_reduce_chooser_ties_average_as_jax(op, axes):
  with stagecraft.enable_x64():
    x = XT if op == "max" else -XT
    f_sc = lambda x: jnp.sum(jnp.sin(getattr(lax, f"reduce_{op}")(x, axes)))
    f_jx = lambda x: jjnp.sum(jjnp.sin(getattr(jax.lax, f"reduce_{op}")(x, axes)))
    got, want = _both_grads(f_sc, f_jx, x)
  _assert_tree_close(got, want)
  if axes == (1,) and op == "max":   # the tied maxima share the gradient equally
    np.testing.assert_allclose(np.asarray(got)[1], np.cos(0.5) / 3 * np.array([1, 1, 1, 0]))


@pytest.mark.parametrize("axes", [(0,), (1,), (0, 1)])
def test_reduce_prod_with_zeros_as_jax(axes):
  with stagecraft.enable_x64():
    f_sc = lambda x: jnp.sum(lax.reduce_prod(x, axes) * 1.5)
    f_jx = lambda x: jjnp.sum(jax.lax.reduce_prod(x, axes) * 1.5)
    got, want = _both_grads(f_sc, f_jx, XZ)
  _assert_tree_close(got, want)
  # One zero in a row: only the zero has a nonzero derivative (the product of the others).
  if axes == (1,):
    np.testing.assert_allclose(np.asarray(got)[0], 1.5 * np.array([0., 2 * -1.5 * 3, 0, 0]))


def test_sort_duplicates_jvp_as_jax():
  """At ties the derivative is a convention: the tangents follow the stable sort's
  permutation (finite differences would average them)."""
  t = RNG.standard_normal(XT.shape)
  with stagecraft.enable_x64():
    out, t_out = stagecraft.jvp(lambda x: lax.sort(x, 1), (XT,), (t,))
    with jax.enable_x64(True):
      j_out, j_t_out = jax.jvp(lambda x: jax.lax.sort(x, dimension=1), (XT,), (t,))
  np.testing.assert_array_equal(np.asarray(out), np.asarray(j_out))
  np.testing.assert_array_equal(np.asarray(t_out), np.asarray(j_t_out))
  # Row 0 is [1, 3, 3, -2]: sorted [-2, 1, 3, 3] takes tangents from positions 3, 0, 1, 2.
  np.testing.assert_array_equal(np.asarray(t_out)[0], t[0, [3, 0, 1, 2]])


def test_sort_multiple_operands_grad_as_jax():
  keys = np.array([[2, 1, 2, 1], [0, 0, 1, 1], [3, 2, 1, 0]], np.int32)
  with stagecraft.enable_x64():
    f_sc = lambda x, y: jnp.sum(W4 * lax.sort((keys, x, y), 1, num_keys=2)[2] *
                                lax.sort((keys, x, y), 1, num_keys=2)[1])
    f_jx = lambda x, y: jjnp.sum(W4 * jax.lax.sort((keys, x, y), dimension=1, num_keys=2)[2] *
                                 jax.lax.sort((keys, x, y), dimension=1, num_keys=2)[1])
    got, want = _both_grads(f_sc, f_jx, XT, XT * 3.0, argnums=(0, 1))
  _assert_tree_close(got, want)


def test_top_k_ties_grad_as_jax():
  with stagecraft.enable_x64():
    f_sc = lambda x: jnp.sum(lax.top_k(x, 3)[0] * W[None, :])
    f_jx = lambda x: jjnp.sum(jax.lax.top_k(x, 3)[0] * W[None, :])
    got, want = _both_grads(f_sc, f_jx, XT)
  _assert_tree_close(got, want)


@pytest.mark.parametrize("method", ["set", "min", "max", "add", "multiply"])
def test_scatter_duplicates_grad_as_jax(method):
  # Updates that tie with each other and with the operand at the repeated index 3.
  x = X.copy()
  v = V4.copy()
  v[1] = v[2] = x[3]
  kw = {}
  argnums = (0, 1)
  if method == "multiply":
    argnums, kw = (0,), {}
  with stagecraft.enable_x64():
    f_sc = lambda x, v: jnp.sum(jnp.sin(getattr(jnp.asarray(x).at[IDX], method)(v, **kw)))
    f_jx = lambda x, v: jjnp.sum(jjnp.sin(getattr(jjnp.asarray(x).at[IDX], method)(v, **kw)))
    got, want = _both_grads(f_sc, f_jx, x, v, argnums=argnums)
  _assert_tree_close(got, want)


JNP_CASES = [
    ("take", lambda m: lambda x: m.sum(m.sin(m.take(x, np.array([2, 0, 2, 3]), axis=1)))),
    ("cumprod", lambda m: lambda x: m.sum(m.cumprod(x, axis=1) * 0.5)),
    ("max", lambda m: lambda x: m.sum(m.max(x, axis=0) ** 2)),
    ("sort", lambda m: lambda x: m.sum(m.sort(x, axis=1) * W4)),
    ("concatenate", lambda m: lambda x: m.sum(m.concatenate([x, m.sin(x), x[:1]], 0) ** 2)),
    ("pad", lambda m: lambda x: m.sum(m.pad(x, ((1, 2), (0, 3)), constant_values=0.5) ** 2)),
    ("pad_edge", lambda m: lambda x: m.sum(m.pad(x, ((2, 1), (1, 1)), mode="edge") ** 2)),
]


@pytest.mark.parametrize("name,make", JNP_CASES, ids=[c[0] for c in JNP_CASES])
@pytest.mark.parametrize("x", [XT, XZ], ids=["ties", "zeros"])
def test_numpy_grad_as_jax(name, make, x):
  with stagecraft.enable_x64():
    got, want = _both_grads(make(jnp), make(jjnp), x)
  _assert_tree_close(got, want)


def test_grad_under_jit_matches_eager():
  def f(x, v):
    y = _at(x)[IDX].add(v)
    y = lax.dynamic_update_slice(y, lax.cumprod(y[:2], 1), (np.int32(2), np.int32(0)))
    return jnp.sum(lax.sort(y, 0)[1:] * lax.reduce_max(y, (0,)))
  with stagecraft.enable_x64():
    eager = stagecraft.grad(f, argnums=(0, 1))(X, V4)
    staged = stagecraft.jit(stagecraft.grad(f, argnums=(0, 1)))(X, V4)
  _assert_tree_close(eager, staged, rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------------
# Integer operands: no cotangent, zero tangents


def test_dynamic_indices_get_no_cotangent():
  with stagecraft.enable_x64():
    f = lambda x, i: lax.dynamic_slice(x, (i, np.int32(0)), (2, 4))
    out, vjp = stagecraft.vjp(f, X, np.int32(2))
    ct_x, ct_i = vjp(np.ones((2, 4)))
  expected = np.zeros_like(X)
  expected[2:4] = 1
  np.testing.assert_array_equal(np.asarray(ct_x), expected)
  assert ct_i.dtype == dtypes.float0 and ct_i.shape == ()


def test_gather_indices_get_no_cotangent():
  with stagecraft.enable_x64():
    f = lambda x, idx: jnp.asarray(x)[idx]
    _, vjp = stagecraft.vjp(f, X, IDX.astype(np.int32))
    ct_x, ct_idx = vjp(np.ones((4, 4)))
  np.testing.assert_array_equal(np.asarray(ct_x)[:, 0], [1, 1, 0, 2, 0])
  assert ct_idx.dtype == dtypes.float0 and ct_idx.shape == (4,)


def test_index_outputs_have_zero_tangents():
  with stagecraft.enable_x64():
    for f in (lambda x: lax.argmax(x, 1, np.int32), lambda x: lax.argmin(x, 0, np.int32),
              lambda x: lax.top_k(x, 2)[1]):
      _, t = stagecraft.jvp(f, (X,), (np.ones_like(X),))
      assert t.dtype == dtypes.float0
    # A derivative through an argmax-chosen index: only the chosen elements contribute.
    g = stagecraft.grad(lambda x: jnp.sum(lax.dynamic_index_in_dim(
        x, lax.argmax(x[:, 0], 0, np.int32), 0)))(X)
  expected = np.zeros_like(X)
  expected[np.argmax(X[:, 0])] = 1
  np.testing.assert_array_equal(np.asarray(g), expected)


# ---------------------------------------------------------------------------
# Unsupported cases: JAX's errors


def test_scatter_mul_updates_need_unique_indices():
  with stagecraft.enable_x64():
    with pytest.raises(NotImplementedError, match="unique_indices=True"):
      stagecraft.grad(lambda v: jnp.sum(_at(X)[IDX].multiply(v)))(V4)


def test_general_reduce_init_tangent_error():
  with stagecraft.enable_x64():
    with pytest.raises(NotImplementedError, match="non-zero tangents for the initial values"):
      stagecraft.grad(lambda x: jnp.sum(lax.reduce(x, x[0, 0], lax.max, (0,))))(X)


def test_general_reduce_non_elementwise_computation_error():
  def computation(a, b):   # a dot of scalars: an outer product on arrays
    return lax.dot_general(a, b, (((), ()), ((), ())))
  with stagecraft.enable_x64():
    y = lax.reduce(X, np.float64(1), computation, (0,))
    np.testing.assert_allclose(np.asarray(y), np.prod(X, 0))
    with pytest.raises(NotImplementedError, match="primitive 'reduce'"):
      stagecraft.grad(lambda x: jnp.sum(lax.reduce(x, np.float64(1), computation, (0,))))(X)


# ---------------------------------------------------------------------------
# associative_scan against a Python loop


def _loop_scan(fn, xs, axis, reverse):
  xs = np.moveaxis(np.asarray(xs), axis, 0)
  order = range(len(xs) - 1, -1, -1) if reverse else range(len(xs))
  out, acc = np.empty_like(xs), None
  for k in order:
    acc = xs[k] if acc is None else fn(acc, xs[k])
    out[k] = acc
  return np.moveaxis(out, 0, axis)


@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=3), data=st.data(),
       reverse=st.booleans(), op=st.sampled_from(["add", "max"]))
def test_associative_scan_matches_loop(shape, data, reverse, op):
  axis = data.draw(st.integers(-len(shape), len(shape) - 1))
  x = np.random.default_rng(len(shape) * 7 + shape[0]).integers(-9, 9, shape).astype(np.int32)
  lax_op, np_op = {"add": (lax.add, np.add), "max": (lax.max, np.maximum)}[op]
  out = lax.associative_scan(lax_op, x, reverse=reverse, axis=axis)
  np.testing.assert_array_equal(np.asarray(out), _loop_scan(np_op, x, axis % len(shape),
                                                            reverse))


@pytest.mark.parametrize("n", [1, 2, 5, 8])
@pytest.mark.parametrize("reverse", [False, True])
def test_associative_scan_pytree_matches_loop(n, reverse):
  # Composition of affine maps x -> a x + b, a pytree {"a", "b"}: the linear recurrence
  # h_k = a_k h_{k-1} + b_k, associative but not commutative.
  a = RNG.uniform(0.5, 1.5, (n, 3)).astype(np.float32)
  b = RNG.standard_normal((n, 3)).astype(np.float32)

  def compose(p, q):   # p first, then q
    return {"a": q["a"] * p["a"], "b": q["a"] * p["b"] + q["b"]}

  out = lax.associative_scan(compose, {"a": a, "b": b}, reverse=reverse)
  want_a = _loop_scan(operator.mul, a, 0, reverse)
  pairs = np.stack([a, b], -1)
  want_b = _loop_scan(lambda p, q: np.stack([q[..., 0] * p[..., 0],
                                             q[..., 0] * p[..., 1] + q[..., 1]], -1),
                      pairs, 0, reverse)[..., 1]
  assert set(out) == {"a", "b"}
  np.testing.assert_allclose(np.asarray(out["a"]), want_a, rtol=1e-5)
  np.testing.assert_allclose(np.asarray(out["b"]), want_b, rtol=1e-5, atol=1e-5)


def test_associative_scan_bool_and_errors():
  x = np.array([False, True, False, False, True])
  np.testing.assert_array_equal(np.asarray(lax.associative_scan(lax.bitwise_or, x)),
                                [False, True, True, True, True])
  with pytest.raises(TypeError, match="should be callable"):
    lax.associative_scan(3, x)
  with pytest.raises(ValueError, match=re.escape(
      "Array inputs to associative_scan must have the same first dimension. (saw: [(3,), (4,)])")):
    lax.associative_scan(lambda a, b: a, (np.ones(3), np.ones(4)))
  with pytest.raises(ValueError, match="out of bounds"):
    lax.associative_scan(lax.add, np.ones((2, 3)), axis=2)
