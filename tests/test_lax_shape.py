"""lax/shape.py and lax/slicing.py: eager and staged results against NumPy (and jax.lax where
NumPy has no equivalent: negative/interior padding, clamped dynamic slices), abstract eval
against the executed result, and error messages."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import jax  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import re  # noqa: E402
import pytest  # noqa: E402
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

from _util import staged_call  # noqa: E402
from stagecraft import core, lax  # noqa: E402
from stagecraft.interpreters import lowering  # noqa: E402
from stagecraft.interpreters import partial_eval as pe  # noqa: E402

DTYPES = [np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.bool_),
          np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)]
dtype_st = st.sampled_from(DTYPES)
shape_st = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
nonscalar_shape_st = hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4)


def make(shape, dtype, seed=0):
  rng = np.random.default_rng(seed)
  if dtype == np.bool_:
    return rng.integers(0, 2, shape).astype(bool)
  return rng.integers(-9, 10, shape).astype(dtype)


@st.composite
def arrays(draw, shape=shape_st, dtype=dtype_st):
  return make(draw(shape), draw(dtype), draw(st.integers(0, 2**16)))


def assert_same(got, want):
  got = np.asarray(got)
  want = np.asarray(want)
  assert got.dtype == want.dtype, (got.dtype, want.dtype)
  assert got.shape == want.shape, (got.shape, want.shape)
  if got.dtype in (np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)):
    got, want = got.astype(np.float32), want.astype(np.float32)
  np.testing.assert_array_equal(got, want)


def check(fun, want, *args):
  """`fun(*args)` eagerly and staged equals `want`, and the traced out aval is the aval of
  both results (shape, dtype and weak type)."""
  eager = fun(*args)
  staged = staged_call(fun, *args)
  assert_same(eager, want)
  assert_same(staged, want)
  jaxpr, _ = pe.trace_to_jaxpr(lambda *xs: [fun(*xs)], [core.get_aval(a) for a in args])
  core.check_jaxpr(jaxpr)
  (out_aval,) = jaxpr.out_avals
  assert out_aval.shape == np.shape(want) and out_aval.dtype == np.asarray(want).dtype
  assert staged.aval == out_aval
  if hasattr(eager, "aval"):   # identity shortcuts may hand back a host operand
    assert eager.aval == out_aval
  return eager


# ---------------------------------------------------------------------------
# broadcast_in_dim, broadcast, full, expand_dims


@given(st.data())
def test_broadcast_in_dim(data):
  s = data.draw(shape_st)
  n_new = data.draw(st.integers(0, 2))
  out_ndim = len(s) + n_new
  dims = sorted(data.draw(st.permutations(range(out_ndim)))[:len(s)])
  out = [data.draw(st.integers(0, 3)) for _ in range(out_ndim)]
  s = list(s)
  for i, d in enumerate(dims):   # operand dims are kept, or 1 and broadcast
    out[d] = s[i] if s[i] != 1 and data.draw(st.booleans()) else out[d]
    s[i] = out[d] if s[i] != 1 else 1
  x = make(tuple(s), data.draw(dtype_st), data.draw(st.integers(0, 99)))
  expanded = [1] * out_ndim
  for i, d in enumerate(dims):
    expanded[d] = s[i]
  want = np.broadcast_to(x.reshape(expanded), out)
  check(lambda x: lax.broadcast_in_dim(x, out, dims), want, x)


def test_broadcast_in_dim_unsorted_dims_transposes():
  x = make((2, 3), np.float32)
  check(lambda x: lax.broadcast_in_dim(x, [3, 4, 2], np.array([2, 0])),
        np.broadcast_to(x.T[:, None, :], (3, 4, 2)), x)


def test_broadcast_in_dim_python_scalar_is_weak():
  y = lax.broadcast_in_dim(2.0, (2, 3), ())
  assert y.aval == core.ShapedArray((2, 3), np.dtype(np.float32), True)
  assert_same(y, np.full((2, 3), 2.0, np.float32))
  assert lax.broadcast_in_dim(np.float32(2), (2,), ()).aval.weak_type is False


@given(arrays(), st.lists(st.integers(0, 3), max_size=2))
def test_broadcast(x, sizes):
  check(lambda x: lax.broadcast(x, sizes), np.broadcast_to(x, (*sizes, *x.shape)), x)


@pytest.mark.parametrize("fill,dtype,want_dtype,weak", [
    (1.5, None, np.float32, True), (3, None, np.int32, True), (True, None, np.bool_, False),
    (np.float16(2), None, np.float16, False), (2, np.float32, np.float32, False),
    (2.5, ml_dtypes.bfloat16, ml_dtypes.bfloat16, False), (1, np.bool_, np.bool_, False)])
def test_full(fill, dtype, want_dtype, weak):
  y = lax.full((2, 0, 3) if weak else (2, 3), fill, dtype)
  assert y.aval.weak_type is weak
  assert_same(y, np.full(y.shape, fill, want_dtype))
  jaxpr, _ = pe.trace_to_jaxpr(lambda: [lax.full((2, 3), fill, dtype)], [])
  assert jaxpr.out_avals[0] == y.aval.update(shape=(2, 3))


def test_full_of_traced_value_converts():
  x = np.float32(1.25)
  check(lambda x: lax.full((3,), x, np.int32), np.full((3,), 1, np.int32), x)
  check(lambda x: lax.full((2, 2), x), np.full((2, 2), 1.25, np.float32), x)


@given(st.data())
def test_expand_dims(data):
  x = data.draw(arrays())
  ndim_out = x.ndim + data.draw(st.integers(0, 2))
  pos = data.draw(st.permutations(range(ndim_out)))[:ndim_out - x.ndim]
  dims = [p - ndim_out if data.draw(st.booleans()) else p for p in pos]
  check(lambda x: lax.expand_dims(x, dims), np.expand_dims(x, tuple(dims)), x)


# ---------------------------------------------------------------------------
# reshape, collapse, transpose, squeeze, rev


@given(arrays(), st.sampled_from(["flat", "reversed", "ones", "split"]))
def test_reshape(x, how):
  new = {"flat": (x.size,), "reversed": x.shape[::-1], "ones": (1, *x.shape, 1),
         "split": (x.size // 2, 2) if x.size % 2 == 0 else (1, x.size)}[how]
  check(lambda x: lax.reshape(x, new), x.reshape(new), x)


@given(st.data())
def test_reshape_with_dimensions(data):
  x = data.draw(arrays(shape=nonscalar_shape_st))
  perm = data.draw(st.permutations(range(x.ndim)))
  check(lambda x: lax.reshape(x, (x.size,), perm), np.transpose(x, perm).reshape(-1), x)


@given(arrays(), st.integers(-4, 4), st.one_of(st.none(), st.integers(-4, 4)))
def test_collapse(x, start, stop):
  lo, hi, _ = slice(start, stop).indices(x.ndim)
  if hi < lo:
    with pytest.raises(ValueError, match="Invalid dimension range passed to collapse"):
      lax.collapse(x, start, stop)
    return
  want = x.reshape(x.shape[:lo] + (int(np.prod(x.shape[lo:hi])),) + x.shape[hi:])
  check(lambda x: lax.collapse(x, start, stop), want, x)


@given(st.data())
def test_transpose(data):
  x = data.draw(arrays())
  perm = data.draw(st.permutations(range(x.ndim)))
  check(lambda x: lax.transpose(x, perm), np.transpose(x, perm), x)


@given(st.data())
def test_squeeze(data):
  shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=3))
  ones = [i for i, d in enumerate(shape) if d == 1]
  dims = data.draw(st.permutations(ones))[:data.draw(st.integers(0, len(ones)))]
  dims = [d - len(shape) if data.draw(st.booleans()) else d for d in dims]
  x = make(shape, data.draw(dtype_st))
  check(lambda x: lax.squeeze(x, dims), np.squeeze(x, tuple(dims)), x)


@given(st.data())
def test_rev(data):
  x = data.draw(arrays())
  dims = data.draw(st.permutations(range(x.ndim)))[:data.draw(st.integers(0, x.ndim))]
  check(lambda x: lax.rev(x, dims), np.flip(x, tuple(dims)), x)


def test_identity_wrappers_skip_the_primitive_for_arrays_only():
  x = make((2, 3), np.float32)
  jaxpr, _ = pe.trace_to_jaxpr(
      lambda x: [lax.reshape(lax.transpose(lax.squeeze(lax.broadcast_in_dim(
          x, (2, 3), (0, 1)), ()), (0, 1)), (2, 3))], [core.get_aval(x)])
  assert not jaxpr.eqns
  y = lax.reshape(x, (2, 3))   # host operands are still bound: the result is an Array
  assert y.aval == core.ShapedArray((2, 3), np.dtype(np.float32))


# ---------------------------------------------------------------------------
# concatenate, pad, iota


@given(st.data())
def test_concatenate(data):
  base = list(data.draw(nonscalar_shape_st))
  dim = data.draw(st.integers(0, len(base) - 1))
  dtype = data.draw(dtype_st)
  xs = []
  for k in range(data.draw(st.integers(1, 3))):
    base[dim] = data.draw(st.integers(0, 3))
    xs.append(make(tuple(base), dtype, k))
  d = dim - len(base) if data.draw(st.booleans()) else dim
  check(lambda *xs: lax.concatenate(xs, d), np.concatenate(xs, dim), *xs)


def test_concatenate_weak_type_needs_all_weak():
  weak = lax.full((2,), 1.0)
  strong = np.ones(2, np.float32)
  assert lax.concatenate([weak, weak], 0).aval.weak_type
  assert not lax.concatenate([weak, strong], 0).aval.weak_type


pad_config_st = st.lists(st.tuples(st.integers(-2, 2), st.integers(-2, 2), st.integers(0, 2)),
                         min_size=3, max_size=3)


@given(arrays(), pad_config_st)
def test_pad_against_jax(x, config):
  config = config[:x.ndim]
  shape = [lo + hi + (0 if d == 0 else d + (d - 1) * i) for (lo, hi, i), d in zip(config, x.shape)]
  if any(d < 0 for d in shape):
    with pytest.raises(ValueError, match="Dimension size after padding is not at least 0"):
      lax.pad(x, x.dtype.type(1), config)
    return
  pv = np.asarray(1, x.dtype)[()]
  want = np.asarray(jax.lax.pad(x, pv, config))
  check(lambda x, pv: lax.pad(x, pv, config), want, x, pv)


@given(arrays(dtype=st.sampled_from([np.dtype(np.float32), np.dtype(np.int32)])),
       st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), min_size=3, max_size=3))
def test_pad_against_numpy_with_python_scalar(x, widths):
  widths = widths[:x.ndim]
  want = np.pad(x, widths, constant_values=7) if x.ndim else x
  check(lambda x: lax.pad(x, x.dtype.type(7), [(lo, hi, 0) for lo, hi in widths]), want, x)
  if x.dtype != np.int32:   # as JAX: the Python int 7 is int32, not promoted
    with pytest.raises(TypeError, match="pad operand and padding_value must be same dtype: "
                                        "got float32 and int32."):
      lax.pad(x, 7, [(lo, hi, 0) for lo, hi in widths])


@pytest.mark.parametrize("dtype", [np.int32, np.float32, np.float16, ml_dtypes.bfloat16,
                                   np.complex64, np.uint8])
@pytest.mark.parametrize("shape,dimension", [((0,), 0), ((5,), 0), ((2, 3), 1), ((2, 0, 3), -3)])
def test_broadcasted_iota(dtype, shape, dimension):
  idx = np.arange(shape[dimension], dtype=dtype).reshape(
      [-1 if i == dimension % len(shape) else 1 for i in range(len(shape))])
  want = np.broadcast_to(idx, shape)
  y = check(lambda: lax.broadcasted_iota(dtype, shape, dimension), want)
  assert y.aval.weak_type is False


def test_iota():
  check(lambda: lax.iota(np.int32, 4), np.arange(4, dtype=np.int32))
  check(lambda: lax.iota(np.float32, 0), np.arange(0, dtype=np.float32))
  # canonicalized (x64 off), with JAX's warning (tests/test_x64_dtype_warning.py)
  with pytest.warns(UserWarning, match="int64 requested in broadcasted_iota is not available"):
    assert_same(lax.iota(np.int64, 3), np.arange(3, dtype=np.int32))


# ---------------------------------------------------------------------------
# slice, slice_in_dim, index_in_dim


@st.composite
def slice_args(draw):
  x = draw(arrays(shape=nonscalar_shape_st))
  starts, limits, strides = [], [], []
  for d in x.shape:
    a, b = sorted([draw(st.integers(0, d)), draw(st.integers(0, d))])
    starts.append(a)
    limits.append(b)
    strides.append(draw(st.integers(1, 3)))
  return x, starts, limits, strides if draw(st.booleans()) else None


@given(slice_args())
def test_slice(args):
  x, starts, limits, strides = args
  idx = tuple(slice(a, b, s) for a, b, s in zip(starts, limits, strides or [1] * x.ndim))
  check(lambda x: lax.slice(x, starts, limits, strides), x[idx], x)


@given(st.data())
def test_slice_in_dim_and_index_in_dim(data):
  x = data.draw(arrays(shape=nonscalar_shape_st))
  axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
  n = x.shape[axis]
  start = data.draw(st.one_of(st.none(), st.integers(-n, n)))
  limit = data.draw(st.one_of(st.none(), st.integers(-n, n)))
  stride = data.draw(st.integers(1, 2))
  lo, hi, _ = slice(start, limit).indices(n)
  if hi >= lo:
    want = x[(slice(None),) * (axis % x.ndim) + (slice(start, limit, stride),)]
    check(lambda x: lax.slice_in_dim(x, start, limit, stride, axis), want, x)
  if n:
    i = data.draw(st.integers(-n, n - 1))
    keep = data.draw(st.booleans())
    want = np.take(x, [i] if keep else i, axis=axis)
    check(lambda x: lax.index_in_dim(x, i, axis, keepdims=keep), want, x)


def test_index_in_dim_out_of_bounds():
  with pytest.raises(IndexError, match="index 3 is out of bounds for axis 1 with size 3"):
    lax.index_in_dim(np.zeros((2, 3)), 3, 1)


# ---------------------------------------------------------------------------
# dynamic_slice, dynamic_update_slice and their *_in_dim wrappers (jax.lax is the oracle
# for clamping and negative indices)


@st.composite
def dynamic_slice_args(draw):
  x = draw(arrays(shape=nonscalar_shape_st))
  sizes = [draw(st.integers(0, d)) for d in x.shape]
  starts = [draw(st.integers(-d - 2, d + 2)) for d in x.shape]
  return x, starts, sizes


@given(dynamic_slice_args())
def test_dynamic_slice_static_indices(args):
  x, starts, sizes = args
  want = np.asarray(jax.lax.dynamic_slice(x, starts, sizes))
  check(lambda x: lax.dynamic_slice(x, starts, sizes), want, x)


@given(dynamic_slice_args(), st.sampled_from([np.int32, np.int16, np.uint8]))
def test_dynamic_slice_traced_indices(args, idx_dtype):
  x, starts, sizes = args
  if idx_dtype == np.uint8:
    starts = [abs(s) for s in starts]
  idx = [np.asarray(s, idx_dtype)[()] for s in starts]
  want = np.asarray(jax.lax.dynamic_slice(x, idx, sizes))
  check(lambda x, *i: lax.dynamic_slice(x, i, sizes), want, x, *idx)


def test_dynamic_slice_mixed_index_dtypes_raise_as_jax():
  # As JAX's: indices keep their dtypes (a Python int the default int's) and must agree.
  import jax
  x = make((4, 5), np.float32)
  want = x[1:3, 2:4]
  for idx in [(np.int16(1), np.int32(2)), (np.uint8(1), 2)]:
    for name, args in [("dynamic_slice", (x, idx, (2, 2))),
                       ("dynamic_update_slice", (x, x[:2, :2], idx))]:
      with pytest.raises(TypeError) as e:
        getattr(jax.lax, name)(*args)
      with pytest.raises(TypeError, match=re.escape(str(e.value))):
        getattr(lax, name)(*args)
  check(lambda x, i, j: lax.dynamic_slice(x, (i, j), (2, 2)), want, x, np.int16(1), np.int16(2))
  check(lambda x: lax.dynamic_slice(x, np.array([1, 2]), (2, 2)), want, x)
  check(lambda x, i: lax.dynamic_slice(x, i, (2, 2)), want, x, np.array([1, 2], np.int32))


def test_dynamic_slice_allow_negative_indices_false():
  x = np.arange(5, dtype=np.int32)
  assert_same(lax.dynamic_slice(x, (-1,), (2,)), x[3:])
  check(lambda x, i: lax.dynamic_slice(x, (i,), (2,), allow_negative_indices=False), x[:2],
        x, np.array(-1, np.int32))   # a traced negative index is clamped
  with pytest.raises(ValueError, match=r"Index -1 is out of bounds for dimension 5 if "
                     r"allow_negative_indices=False"):
    lax.dynamic_slice(x, (-1,), (2,), allow_negative_indices=False)


@given(st.data())
def test_dynamic_update_slice(data):
  x, starts, sizes = data.draw(dynamic_slice_args())
  update = make(tuple(sizes), x.dtype, 7)
  traced = data.draw(st.booleans())
  want = np.asarray(jax.lax.dynamic_update_slice(x, update, starts))
  if traced:
    idx = [np.int32(s) for s in starts]
    check(lambda x, u, *i: lax.dynamic_update_slice(x, u, i), want, x, update, *idx)
  else:
    check(lambda x, u: lax.dynamic_update_slice(x, u, starts), want, x, update)


@given(st.data())
def test_dynamic_in_dim_wrappers(data):
  x = data.draw(arrays(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4)))
  axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
  n = x.shape[axis]
  i = data.draw(st.integers(-n - 1, n))
  size = data.draw(st.integers(0, n))
  keep = data.draw(st.booleans())
  ji = np.int32(i)
  check(lambda x, i: lax.dynamic_slice_in_dim(x, i, size, axis),
        np.asarray(jax.lax.dynamic_slice_in_dim(x, ji, size, axis)), x, ji)
  check(lambda x, i: lax.dynamic_index_in_dim(x, i, axis, keep),
        np.asarray(jax.lax.dynamic_index_in_dim(x, ji, axis, keep)), x, ji)
  upd_shape = list(x.shape)
  upd_shape[axis] = size
  u = make(tuple(upd_shape), x.dtype, 3)
  check(lambda x, u, i: lax.dynamic_update_slice_in_dim(x, u, i, axis),
        np.asarray(jax.lax.dynamic_update_slice_in_dim(x, u, ji, axis)), x, u, ji)
  u1 = np.take(u if size else x, 0, axis=axis)
  if keep:
    u1 = np.expand_dims(u1, axis)
  check(lambda x, u, i: lax.dynamic_update_index_in_dim(x, u, i, axis),
        np.asarray(jax.lax.dynamic_update_index_in_dim(x, u1, ji, axis)), x, u1, ji)


def test_dynamic_update_slice_weak_type():
  weak = lax.full((3,), 1.0)
  assert lax.dynamic_update_slice(weak, lax.full((1,), 2.0), (1,)).aval.weak_type is False
  assert lax.dynamic_slice(weak, (1,), (1,)).aval.weak_type is True


# ---------------------------------------------------------------------------
# Lowering text (StableHLO attribute forms)


@pytest.mark.parametrize("fun,snippet", [
    (lambda x: lax.transpose(x, (1, 0)),
     '"stablehlo.transpose"(%arg0) {permutation = array<i64: 1, 0>}'),
    (lambda x: lax.broadcast_in_dim(x, (2, 3, 4), (1, 2)),
     '"stablehlo.broadcast_in_dim"(%arg0) {broadcast_dimensions = array<i64: 1, 2>}'),
    (lambda x: lax.pad(x, 0.0, [(1, -1, 2), (0, 0, 0)]),
     "{edge_padding_low = array<i64: 1, 0>, edge_padding_high = array<i64: -1, 0>, "
     "interior_padding = array<i64: 2, 0>}"),
    (lambda x: lax.concatenate([x, x], 1), "{dimension = 1 : i64}"),
    (lambda x: lax.slice(x, (0, 1), (3, 4), (2, 1)),
     "{start_indices = array<i64: 0, 1>, limit_indices = array<i64: 3, 4>, "
     "strides = array<i64: 2, 1>}"),
    (lambda x: lax.dynamic_slice(x, (1, 2), (2, 2)), "{slice_sizes = array<i64: 2, 2>}"),
    (lambda x: lax.rev(x, (0,)), '"stablehlo.reverse"(%arg0) {dimensions = array<i64: 0>}'),
])
def test_lowering_text(fun, snippet):
  x = core.ShapedArray((3, 4), np.dtype(np.float32))
  jaxpr, _ = pe.trace_to_jaxpr(lambda x: [fun(x)], [x])
  assert snippet in lowering.lower_jaxpr_to_module("f", jaxpr)


# ---------------------------------------------------------------------------
# Errors

x34 = np.zeros((3, 4), np.float32)


@pytest.mark.parametrize("fun,exc,match", [
    (lambda: lax.reshape(np.zeros((3, 5)), (4, 4)), TypeError,
     r"reshape total size must be unchanged, got new_sizes \(4, 4\) for shape \(3, 5\)"),
    (lambda: lax.reshape(x34, (12,), (0, 0)), TypeError,
     r"reshape dimensions must be a permutation of operand dimensions"),
    (lambda: lax.reshape(x34, (2.5, 4)), TypeError, r"Shapes must be 1D sequences of concrete "
     r"values of integer type, got \(2.5, 4\)"),   # JAX's message
    (lambda: lax.broadcast(x34, 12), TypeError, r"Wrap it in a tuple: \(12,\)"),
    (lambda: lax.reshape(x34, (-1, 12)), TypeError, r"must have every element be nonnegative"),
    (lambda: lax.broadcast_in_dim(x34, (3, 5), (0, 1)), TypeError,
     r"operand dimension sizes must either be 1, or be equal .* got operand of shape \(3, 4\), "
     r"target broadcast shape \(3, 5\)"),
    (lambda: lax.broadcast_in_dim(x34, (3, 4), (0,)), TypeError,
     r"broadcast_dimensions must have length equal to operand ndim; got broadcast_dimensions "
     r"\(0,\) for operand f32\[3,4\]"),
    (lambda: lax.broadcast_in_dim(x34, (4,), (0, 1)), TypeError, r"equal or higher rank"),
    (lambda: lax.broadcast_in_dim(x34, (3, 4), (0, 2)), TypeError,
     r"must be a subset of output dimensions"),
    (lambda: lax.broadcast_in_dim(x34, (3, 4, 4), (1, 1)), TypeError, r"must not contain dup"),
    (lambda: lax.transpose(x34, (0,)), TypeError,
     r"got permutation \(0,\) for operand shape \(3, 4\)"),
    (lambda: lax.squeeze(x34, (0,)), ValueError,
     r"size not equal to one, got shape=\(3, 4\) and dimensions=\(0,\)"),
    (lambda: lax.squeeze(x34, (2,)), ValueError, r"axis 2 is out of bounds for array of dimension 2$"),   # JAX's
    (lambda: lax.expand_dims(x34, (0, 0)), ValueError, r"repeated axis in lax.expand_dims"),
    (lambda: lax.expand_dims(x34, (0, -4)), ValueError, r"duplicate axes"),
    (lambda: lax.rev(x34, (0, 0)), TypeError, r"^rev dimensions must be unique, got \(0, 0\)\.$"),   # JAX's
    (lambda: lax.rev(x34, (2,)), TypeError, r"rev dimensions must all be less than operand ndim, got dimensions \(2,\) for operand ndim 2\."),
    (lambda: lax.concatenate([], 0), ValueError, r"non-empty sequence"),
    (lambda: lax.concatenate([x34, np.zeros((3, 4), np.int32)], 0), TypeError,
     r"requires arguments to have the same dtypes, got float32, int32"),
    (lambda: lax.concatenate([x34, np.zeros((2, 4), np.float32)], 1), TypeError,
     r"differ in dimensions other than the one being concatenated: concatenating along "
     r"dimension 1 for shapes f32\[3,4\], f32\[2,4\]"),
    (lambda: lax.concatenate([x34, np.zeros(4, np.float32)], 0), TypeError,
     r"different numbers of dimensions"),
    (lambda: lax.concatenate([np.float32(1), np.float32(2)], 0), TypeError, r"rank >= 1"),
    (lambda: lax.pad(x34, np.int32(0), [(0, 0, 0)] * 2), TypeError,
     r"pad operand and padding_value must be same dtype: got float32 and int32"),
    (lambda: lax.pad(x34, 0.0, [(0, 0, 0)]), ValueError, r"length of padding_config must equal"),
    (lambda: lax.pad(x34, 0.0, [(0, 0, -1)] * 2), ValueError, r"interior padding .* nonnegative"),
    (lambda: lax.pad(x34, 0.0, [(0, 0)] * 2), TypeError, r"\(lo, hi, interior\) integer triples"),
    (lambda: lax.pad(x34, np.zeros(2, np.float32), [(0, 0, 0)] * 2), ValueError,
     r"padding_value must be a scalar"),
    (lambda: lax.iota(np.bool_, 3), TypeError, r"iota does not accept dtype bool"),
    (lambda: lax.broadcasted_iota(np.int32, (2, 3), 2), ValueError,
     r"iota dimension must be between 0 and len\(shape\), got dimension=2 for shape=\(2, 3\)"),
    (lambda: lax.full((2,), np.zeros(2)), TypeError, r"scalar fill_value, got fill_value of "
     r"shape \(2,\)"),
    (lambda: lax.slice(x34, (0, 0), (3, 5)), TypeError,
     r"limit_indices must be less than or equal to operand shape, got limit_indices \(3, 5\) "
     r"for operand shape \(3, 4\)"),
    (lambda: lax.slice(x34, (2, 0), (1, 4)), TypeError,
     r"limit_indices must be greater than or equal to start_indices"),
    (lambda: lax.slice(x34, (0,), (3,)), TypeError, r"start_indices must have length equal"),
    (lambda: lax.slice(x34, (0, 0), (3, 4), (1, 0)), TypeError, r"strides must be positive"),
    (lambda: lax.slice(x34, (-1, 0), (3, 4)), TypeError, r"nonnegative"),
    (lambda: lax.dynamic_slice(x34, (0,), (1, 1)), ValueError,
     r"Length of slice indices must match number of operand dimensions"),
    (lambda: lax.dynamic_slice(x34, (0, 0), (4, 1)), TypeError,
     r"slice_sizes must be less than or equal to operand shape, got slice_sizes \(4, 1\)"),
    (lambda: lax.dynamic_slice(x34, (0.5, 0), (1, 1)), TypeError,
     r"index arguments to dynamic_slice must be integers of the same type, got: float32, "
     r"int32$"),   # JAX's: the Python int keeps the default int dtype
    (lambda: lax.dynamic_slice(x34, (np.zeros(2, np.int32), 0), (1, 1)), TypeError,
     r"start_indices arguments to dynamic_slice must be scalars"),
    (lambda: lax.dynamic_slice_p.bind(x34, np.int16(0), np.int32(0), slice_sizes=(1, 1)),
     TypeError, r"integers of the same type, got: int16, int32$"),   # JAX's message
    (lambda: lax.dynamic_update_slice(x34, np.zeros((4, 1), np.float32), (0, 0)), TypeError,
     r"update shape must be smaller than operand shape, got update shape \(4, 1\)"),
    (lambda: lax.dynamic_update_slice(x34, np.zeros(4, np.float32), (0, 0)), TypeError,
     r"update must have the same rank as operand"),
    (lambda: lax.dynamic_update_slice(x34, np.zeros((1, 1), np.int32), (0, 0)), TypeError,
     r"same dtypes, got float32, int32"),
    (lambda: lax.reshape_p.bind(x34, new_sizes=(12,), dimensions=(0, 0)), TypeError,
     r"reshape dimensions must be a permutation of operand dimensions, got dimensions "
     r"\(0, 0\) for shape \(3, 4\)"),
    (lambda: lax.broadcast_in_dim_p.bind(x34, shape=[3, 4], broadcast_dimensions=(0, 1)),
     TypeError, r"must be a tuple of Python ints"),
])
def test_errors(fun, exc, match):
  with pytest.raises(exc, match=match):
    fun()


def test_errors_when_traced():
  x = core.ShapedArray((3, 4), np.dtype(np.float32))
  with pytest.raises(TypeError, match=r"reshape total size must be unchanged"):
    pe.trace_to_jaxpr(lambda x: [lax.reshape(x, (5,))], [x])
  with pytest.raises(TypeError, match=r"Shapes must be 1D sequences of concrete values"):
    pe.trace_to_jaxpr(lambda x: [lax.reshape(x, (x, 2))], [x])
