"""lax.gather and the lax.scatter family against jax.lax on the same dimension numbers (batching
dims, every mode, out-of-bounds and empty indices), eager and staged, the abstract eval
against what executes, fill values, and the error messages (JAX's)."""
import os
import re
import sys

import jax
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import stagecraft as sc
from stagecraft import core, lax
from stagecraft.interpreters import lowering, partial_eval as pe

sys.path.insert(0, os.path.dirname(__file__))
from _util import staged_call  # noqa: E402

GDN, SDN = lax.GatherDimensionNumbers, lax.ScatterDimensionNumbers
from _cases import f32  # noqa: E402


def _data(rng, shape, dtype):
  dtype = np.dtype(dtype)
  if dtype == np.bool_:
    return rng.random(shape) < 0.5
  if np.issubdtype(dtype, np.integer):
    return rng.integers(0, 100, shape).astype(dtype)
  return rng.integers(-20, 20, shape).astype(dtype)   # integral floats: sums are exact


def _jax_gdn(dn):
  return jax.lax.GatherDimensionNumbers(*dn)


def _jax_sdn(dn):
  return jax.lax.ScatterDimensionNumbers(*dn)


def _check_aval(fun, args, result):
  jaxpr, _ = pe.trace_to_jaxpr(lambda *a: [fun(*a)], [core.get_aval(a) for a in args])
  core.check_jaxpr(jaxpr)
  out, = jaxpr.out_avals
  assert (out.shape, out.dtype) == (result.shape, result.dtype)
  assert out == result.aval


def _same(a, b):
  a, b = np.asarray(a), np.asarray(b)
  assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
  np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------
# gather: (operand shape, indices, dimension numbers, slice sizes); indices include
# out-of-bounds values, so every mode differs somewhere.
GATHER_CASES = [
    ((5,), [[0], [2]], GDN((), (0,), (0,)), (1,)),
    ((5,), [[0], [7], [-1], [4]], GDN((), (0,), (0,)), (1,)),
    ((10,), [[0], [0], [9]], GDN((1,), (), (0,)), (2,)),
    ((10, 5), [[0], [2], [1]], GDN((1,), (0,), (0,)), (1, 3)),
    ((10, 5), [[0, 2], [1, 0], [9, 4], [-3, 1]], GDN((1,), (0,), (0, 1)), (1, 3)),
    ((10, 5), [[[0, 2], [1, 0]], [[9, 9], [3, 3]]], GDN((2,), (0,), (1, 0)), (1, 2)),
    ((3, 4, 5), [[1, 2]], GDN((1, 2), (0,), (0, 2)), (1, 4, 2)),
    ((4, 6), [[[1], [3]], [[0], [5]], [[2], [2]]], GDN((0,), (1,), (1,)), (4, 1)),
    # batching dims (operand_batching_dims / start_indices_batching_dims)
    ((2, 5), [[[0], [2]], [[1], [6]]], GDN((), (1,), (1,), (0,), (0,)), (1, 1)),
    ((2, 3, 10), [[[0], [1]], [[2], [3]], [[4], [9]]], GDN((2,), (), (2,), (0, 1), (1, 0)),
     (1, 1, 3)),
    ((3, 4, 2), [[[1, 0]], [[3, 1]], [[0, 5]]], GDN((1,), (1,), (1, 2), (0,), (0,)),
     (1, 1, 1)),
    # empty indices, empty slices, zero-size operand dims
    ((5,), np.zeros((0, 1), np.int32), GDN((), (0,), (0,)), (1,)),
    ((4, 3), [[1], [2]], GDN((1,), (0,), (0,)), (1, 0)),
    ((4, 0), [[1], [2]], GDN((1,), (0,), (0,)), (1, 0)),
    # no index components: the whole operand
    ((3, 2), np.zeros((0,), np.int32), GDN((0, 1), (), ()), (3, 2)),
]
MODES = ["clip", "fill", "promise_in_bounds"]


def _gather_args(case, dtype=f32, index_dtype=np.int32, seed=0):
  shape, idx, dn, sizes = case
  x = _data(np.random.default_rng(seed), shape, dtype)
  return x, np.asarray(idx).astype(index_dtype), dn, sizes


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", GATHER_CASES, ids=lambda c: f"{c[0]}-{c[2]}")
def test_gather_matches_jax(case, mode):
  x, idx, dn, sizes = _gather_args(case)
  want = jax.lax.gather(x, idx, _jax_gdn(dn), sizes, mode=mode)
  fun = lambda x, i: lax.gather(x, i, dn, sizes, mode=mode)
  got = fun(x, idx)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))   # NaN == NaN here
  assert got.dtype == want.dtype
  np.testing.assert_array_equal(np.asarray(staged_call(fun, x, idx)), np.asarray(want))
  _check_aval(fun, (x, idx), got)


@pytest.mark.parametrize("dtype,index_dtype", [
    (np.float32, np.int8), (np.int32, np.uint8), (np.uint8, np.int32), (np.bool_, np.int16),
    (np.float16, np.uint32), (np.int16, np.int32)], ids=repr)
def test_gather_fill_default_values_and_index_dtypes(dtype, index_dtype):
  x = _data(np.random.default_rng(1), (6, 3), dtype)
  idx = np.array([[0], [5], [200], [3]]).astype(index_dtype)
  if np.issubdtype(index_dtype, np.signedinteger):
    idx[3, 0] = -1
  dn = GDN((1,), (0,), (0,))
  want = jax.lax.gather(x, idx, _jax_gdn(dn), (1, 3), mode="fill")
  got = lax.gather(x, idx, dn, (1, 3), mode="fill")
  _same(got, want)
  np.testing.assert_array_equal(np.asarray(got)[2], np.asarray(want)[2])   # the fill row


@pytest.mark.parametrize("fill", [-1, 0.5, np.nan, np.float32(7)])
def test_gather_custom_fill_value(fill):
  x = np.arange(8, dtype=np.float32).reshape(4, 2)
  idx = np.array([[1], [4], [-1]], np.int32)
  dn = GDN((1,), (0,), (0,))
  want = jax.lax.gather(x, idx, _jax_gdn(dn), (1, 2), mode="fill", fill_value=fill)
  _same(lax.gather(x, idx, dn, (1, 2), mode="fill", fill_value=fill), want)


def test_gather_default_mode_is_promise_in_bounds():
  x = np.arange(5, dtype=np.int32)
  idx = np.array([[7], [-2]], np.int32)
  dn = GDN((), (0,), (0,))
  jaxpr, _ = pe.trace_to_jaxpr(lambda a, i: [lax.gather(a, i, dn, (1,))],
                               [core.get_aval(x), core.get_aval(idx)])
  assert jaxpr.eqns[0].params["mode"] is lax.GatherScatterMode.PROMISE_IN_BOUNDS
  assert jaxpr.eqns[0].params["fill_value"] is None
  _same(lax.gather(x, idx, dn, (1,)), np.array([4, 0], np.int32))   # XLA clamps


def test_gather_weak_type_and_params_printed():
  idx = np.array([[1]], np.int32)
  dn = GDN((), (0,), (0,))
  jaxpr, _ = pe.trace_to_jaxpr(
      lambda x: [lax.gather(x, idx, dn, (1,), mode="fill")],
      [core.ShapedArray((3,), f32, weak_type=True)])
  assert jaxpr.out_avals[0].weak_type
  text = str(jaxpr)
  assert "gather[" in text and "mode=GatherScatterMode.FILL_OR_DROP" in text
  assert "fill_value=nan" in text
  assert ("dimension_numbers=GatherDimensionNumbers(offset_dims=(), "
          "collapsed_slice_dims=(0,)") in text


def test_gather_fill_lowering_is_gather_then_select():
  dn = GDN((1,), (0,), (0,))
  x, idx = np.zeros((3, 4), np.float32), np.zeros((2, 1), np.int32)
  jaxpr, consts = pe.trace_to_jaxpr(lambda a, i: [lax.gather(a, i, dn, (1, 4), mode="fill")],
                                    [core.get_aval(x), core.get_aval(idx)])
  text = lowering.lower_jaxpr_to_module("g", jaxpr)
  assert '"stablehlo.gather"' in text and "stablehlo.select" in text
  assert "collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1" in text
  jaxpr, _ = pe.trace_to_jaxpr(lambda a, i: [lax.gather(a, i, dn, (1, 4), mode="clip")],
                               [core.get_aval(x), core.get_aval(idx)])
  text = lowering.lower_jaxpr_to_module("g", jaxpr)
  assert '"stablehlo.gather"' in text and "stablehlo.select" not in text


def test_gather_under_jit_with_traced_indices():
  x = np.arange(20, dtype=np.float32).reshape(5, 4)
  dn = GDN((1,), (0,), (0,))
  f = sc.jit(lambda a, i: lax.gather(a, i, dn, (1, 4), mode="fill", fill_value=-1))
  idx = np.array([[4], [5], [0]], np.int32)
  _same(f(x, idx), jax.jit(lambda a, i: jax.lax.gather(a, i, _jax_gdn(dn), (1, 4), mode="fill",
                                                        fill_value=-1))(x, idx))


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_gather_take_rows_vs_numpy(data):
  shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
  axis = data.draw(st.integers(0, len(shape) - 1))
  n = data.draw(st.integers(0, 5))
  rows = np.asarray(data.draw(st.lists(st.integers(-2, shape[axis] + 1), min_size=n,
                                       max_size=n)), np.int32).reshape(n, 1)
  x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
  nd = len(shape)
  dn = GDN(offset_dims=tuple(range(1, nd)), collapsed_slice_dims=(axis,),
           start_index_map=(axis,))
  sizes = tuple(1 if d == axis else s for d, s in enumerate(shape))
  got = np.asarray(lax.gather(x, rows, dn, sizes, mode="clip"))
  want = np.moveaxis(np.take(x, rows[:, 0], axis=axis, mode="clip"), axis, 0)
  np.testing.assert_array_equal(got, want)


GATHER_ERRORS = [
    (np.zeros((5,)), np.zeros((2, 1), np.float32), GDN((), (0,), (0,)), (1,), ValueError,
     "indices must have an integer type"),
    (np.zeros((5,)), np.zeros((2, 2), np.int32), GDN((), (0,), (0,)), (1,), TypeError,
     "Gather op has 1 elements in start_index_map and the bound of dimension "
     "index_vector_dim=1 of indices is 2. These two numbers must be equal."),
    (np.zeros((5, 3)), np.zeros((2, 1), np.int32), GDN((1,), (0,), (0,)), (2, 3), TypeError,
     "Gather op can only collapse slice dims with bound 1, but bound is 2 for index 0 at "
     "position 0."),
    (np.zeros((5, 3)), np.zeros((2, 1), np.int32), GDN((1,), (0,), (0,)), (1, 4), TypeError,
     "Slice size at index 1 in gather op is out of range, must be within [0, 3 + 1), got 4."),
    (np.zeros((5, 3)), np.zeros((2, 1), np.int32), GDN((1,), (0,), (0,)), (1,), TypeError,
     "Gather op must have one slice size for every input dimension"),
    (np.zeros((5, 3)), np.zeros((2, 1), np.int32), GDN((2,), (0,), (0,)), (1, 3), TypeError,
     "Offset dimension 0 in gather op is out of bounds; got 2, but should have been in [0, 2)"),
    (np.zeros((5, 3)), np.zeros((2, 1), np.int32), GDN((1,), (0,), (3,)), (1, 3), TypeError,
     "Invalid start_index_map; domain is [0, 2), got: 0->3."),
    (np.zeros((2, 5)), np.zeros((3, 1), np.int32), GDN((), (1,), (1,), (0,), (0,)), (1, 1),
     TypeError, "Gather op requires operand batching dimensions and indices batching "
                "dimensions to have the same shape, got (2,) and (3,)."),
    (np.zeros((5, 3)), np.zeros((2, 1), np.int32), GDN((0,), (), (0,)), (1, 1), TypeError,
     "All components of the offset index in a gather op must either be a offset dimension "
     "or explicitly collapsed/batching"),
]


@pytest.mark.parametrize("x,idx,dn,sizes,exc,msg", GATHER_ERRORS, ids=lambda v: str(v)[:20])
def test_gather_errors_match_jax(x, idx, dn, sizes, exc, msg):
  x = x.astype(np.float32)
  with pytest.raises(exc, match=re.escape(msg)):
    lax.gather(x, idx, dn, sizes)
  with pytest.raises(exc, match=re.escape(msg.split(";")[0])):
    jax.lax.gather(x, idx, _jax_gdn(dn), sizes)


def test_gather_bad_mode_and_dnums_type():
  with pytest.raises(ValueError, match='Unknown gather mode "wrap"'):
    lax.gather(np.zeros(3), np.zeros((1, 1), np.int32), GDN((), (0,), (0,)), (1,), mode="wrap")
  with pytest.raises(TypeError, match="dimension_numbers must be a lax.GatherDimensionNumbers"):
    lax.gather(np.zeros(3), np.zeros((1, 1), np.int32), ((), (0,), (0,)), (1,))
  assert lax.GatherScatterMode.from_any(None) is lax.GatherScatterMode.FILL_OR_DROP
  assert lax.GatherScatterMode.from_any("drop") is lax.GatherScatterMode.FILL_OR_DROP


# ---------------------------------------------------------------------------
# scatter family: (operand shape, indices, updates shape, dimension numbers).
SCATTER_CASES = [
    ((5,), [[0], [2]], (2,), SDN((), (0,), (0,))),
    ((5,), [[1], [1], [7], [-1], [4]], (5,), SDN((), (0,), (0,))),
    ((10,), [[0], [0], [9]], (3, 2), SDN((1,), (), (0,))),
    ((10, 5), [[0], [2], [1]], (3, 3), SDN((1,), (0,), (0,))),
    ((10, 5), [[0, 2], [8, 4], [-1, 0], [3, 3]], (4, 3), SDN((1,), (0,), (0, 1))),
    ((4, 6), [[[1], [3]], [[0], [5]]], (4, 2, 2), SDN((0,), (1,), (1,))),
    ((2, 5), [[[0], [2]], [[1], [6]]], (2, 2), SDN((), (1,), (1,), (0,), (0,))),
    ((2, 3, 10), [[[0], [1]], [[2], [3]], [[4], [9]]], (3, 2, 3),
     SDN((2,), (), (2,), (0, 1), (1, 0))),
    ((5,), np.zeros((0, 1), np.int32), (0,), SDN((), (0,), (0,))),
    ((3, 2), np.zeros((0,), np.int32), (3, 2), SDN((0, 1), (), ())),
]
OPS = ["scatter", "scatter_add", "scatter_sub", "scatter_mul", "scatter_min", "scatter_max"]
SCATTER_MODES = ["clip", None, "promise_in_bounds"]


@pytest.mark.parametrize("mode", SCATTER_MODES)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("case", SCATTER_CASES, ids=lambda c: f"{c[0]}-{c[3]}")
def test_scatter_matches_jax(case, op, mode):
  shape, idx, ushape, dn = case
  rng = np.random.default_rng(2)
  x, u = _data(rng, shape, f32), _data(rng, ushape, f32)
  idx = np.asarray(idx, np.int32)
  want = getattr(jax.lax, op)(x, idx, u, _jax_sdn(dn), mode=mode)
  fun = lambda x, i, u: getattr(lax, op)(x, i, u, dn, mode=mode)
  got = fun(x, idx, u)
  _same(got, want)
  _check_aval(fun, (x, idx, u), got)
  if mode is None:
    _same(staged_call(fun, x, idx, u), want)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.bool_, np.float16], ids=repr)
def test_scatter_dtypes(op, dtype):
  if dtype == np.bool_ and op in ("scatter_sub", "scatter_add", "scatter_mul"):
    # JAX's message names the combining lax function (sub, add, mul) at position 0.
    name = op[len("scatter_"):]
    with pytest.raises(TypeError, match=re.escape(
        f"{name} does not accept dtype bool at position 0. Accepted dtypes at position 0 are "
        f"subtypes of integer, floating, complexfloating.")):
      getattr(lax, op)(np.zeros(3, bool), np.zeros((1, 1), np.int32), np.zeros(1, bool),
                       SDN((), (0,), (0,)))
    with pytest.raises(TypeError, match=re.escape(f"{name} does not accept dtype bool")):
      getattr(jax.lax, op)(np.zeros(3, bool), np.zeros((1, 1), np.int32), np.zeros(1, bool),
                           _jax_sdn(SDN((), (0,), (0,))))
    return
  rng = np.random.default_rng(3)
  x = _data(rng, (6,), dtype)
  u = _data(rng, (4,), dtype)
  idx = np.array([[1], [1], [5], [6]], np.int32)
  dn = SDN((), (0,), (0,))
  got = getattr(lax, op)(x, idx, u, dn)
  if dtype == np.bool_:   # JAX's regions for bool: max is OR, min is AND
    ref = {"scatter": None, "scatter_max": np.logical_or, "scatter_min": np.logical_and}[op]
    want = x.copy()
    if ref is None:
      want[[1, 5]] = u[[1, 2]]  # NB: one of the repeated writes wins; check the others
      np.testing.assert_array_equal(np.asarray(got)[[0, 2, 3, 4, 5]], want[[0, 2, 3, 4, 5]])
      return
    ref.at(want, [1, 1, 5], u[:3])
    _same(got, want)
    return
  _same(got, getattr(jax.lax, op)(x, idx, u, _jax_sdn(dn)))


def test_scatter_add_accumulates_repeated_indices_vs_numpy():
  x = np.zeros((4, 3), np.float32)
  idx = np.array([[0], [2], [0], [0], [3]], np.int32)
  u = np.arange(15, dtype=np.float32).reshape(5, 3)
  want = x.copy()
  np.add.at(want, idx[:, 0], u)
  _same(lax.scatter_add(x, idx, u, SDN((1,), (0,), (0,))), want)
  f = sc.jit(lambda x, i, u: lax.scatter_add(x, i, u, SDN((1,), (0,), (0,)),
                                             indices_are_sorted=False, unique_indices=False))
  _same(f(x, idx, u), want)


def test_scatter_clip_lowering_clamps_indices():
  x, idx, u = np.zeros(5, np.float32), np.zeros((2, 1), np.int32), np.zeros(2, np.float32)
  avals = [core.get_aval(a) for a in (x, idx, u)]
  dn = SDN((), (0,), (0,))
  jaxpr, _ = pe.trace_to_jaxpr(lambda *a: [lax.scatter_add(*a, dn, mode="clip")], avals)
  text = lowering.lower_jaxpr_to_module("s", jaxpr)
  assert '"stablehlo.clamp"' in text and '"stablehlo.scatter"' in text
  assert "update_window_dims" not in text and "inserted_window_dims = [0]" in text
  jaxpr, _ = pe.trace_to_jaxpr(lambda *a: [lax.scatter_add(*a, dn)], avals)
  assert "clamp" not in lowering.strip_locations(lowering.lower_jaxpr_to_module("s", jaxpr))
  assert jaxpr.eqns[0].primitive.name == "scatter-add"
  assert jaxpr.eqns[0].params["mode"] is lax.GatherScatterMode.FILL_OR_DROP


def test_scatter_keeps_operand_weak_type():
  jaxpr, _ = pe.trace_to_jaxpr(
      lambda x, u: [lax.scatter(x, np.zeros((1, 1), np.int32), u, SDN((), (0,), (0,)))],
      [core.ShapedArray((3,), f32, True), core.ShapedArray((1,), f32)])
  assert jaxpr.out_avals[0].weak_type


SCATTER_ERRORS = [
    (np.zeros(5), np.zeros((2, 1), np.int32), np.zeros((2, 2)), SDN((), (0,), (0,)),
     "Updates tensor must be of rank 1; got 2."),
    (np.zeros((5, 3)), np.zeros((2, 1), np.int32), np.zeros((2, 4)), SDN((1,), (0,), (0,)),
     "Bounds of the window dimensions of updates must not exceed the bounds of the "
     "corresponding dimensions of operand. For dimension 1, updates bound is 4, operand bound "
     "is 3."),
    (np.zeros(5), np.zeros((2, 1), np.int32), np.zeros((3,)), SDN((), (0,), (0,)),
     "Bounds of the scatter dimensions of updates must be the same as the bounds of the "
     "corresponding dimensions of scatter indices. For scatter dimension 0, updates bound is "
     "3, indices bound is 2."),
    (np.zeros((5, 3)), np.zeros((2, 1), np.int32), np.zeros((2,)), SDN((), (0,), (0,)),
     "Scatter op has window of size 1; doesn't match operand of rank 2."),
    (np.zeros(5), np.zeros((2, 2), np.int32), np.zeros((2,)), SDN((), (0,), (0,)),
     "Scatter op has 1 elements in scatter_dims_to_operand_dims and the bound of dimension "
     "index_vector_dim=1 of indices is 2. These two numbers must be equal"),
    (np.zeros((5, 3)), np.zeros((2, 1), np.int32), np.zeros((2, 3)), SDN((1,), (1, 0), (0,)),
     "inserted_window_dims in scatter op must be sorted; got (1, 0)"),
]


@pytest.mark.parametrize("x,idx,u,dn,msg", SCATTER_ERRORS, ids=lambda v: str(v)[:20])
def test_scatter_errors_match_jax(x, idx, u, dn, msg):
  x, u = x.astype(np.float32), u.astype(np.float32)
  with pytest.raises(TypeError, match=re.escape(msg)):
    lax.scatter_add(x, idx, u, dn)
  with pytest.raises(TypeError, match=re.escape(msg)):
    jax.lax.scatter_add(x, idx, u, _jax_sdn(dn))


def test_scatter_dtype_errors():
  dn = SDN((), (0,), (0,))
  with pytest.raises(TypeError, match=re.escape(   # JAX's message
      "lax.scatter requires arguments to have the same dtypes, got float32, int32.")):
    lax.scatter_add(np.zeros(3, np.float32), np.zeros((1, 1), np.int32), np.zeros(1, np.int32),
                    dn)
  with pytest.raises(ValueError, match="indices must have an integer type"):
    lax.scatter(np.zeros(3, np.float32), np.zeros((1, 1), np.float32),
                np.zeros(1, np.float32), dn)


def test_scatter_max_min_complex_lexicographic_as_jax():
  # JAX 0.10.2 accepts complex scatter-max/min: real part first, then imaginary part.
  dn = SDN((), (0,), (0,))
  c64 = np.complex64
  x = np.array([1 + 2j, 1 + 3j, -1 + 9j, 2 - 1j], c64)
  idx = np.array([[0], [0], [1], [2], [3], [3]], np.int32)
  u = np.array([1 + 1j, 9j, 1 + 2j, -1 + 10j, 2 - 1j, 2 - 2j], c64)
  expected = {"scatter_max": [1 + 2j, 1 + 3j, -1 + 10j, 2 - 1j],
              "scatter_min": [9j, 1 + 2j, -1 + 9j, 2 - 2j]}
  for name, want in expected.items():
    out = getattr(lax, name)(x, idx, u, dn)
    _same(out, np.array(want, c64))
    _same(out, getattr(jax.lax, name)(x, idx, u, _jax_sdn(dn)))
    _same(staged_call(lambda a, i, b: getattr(lax, name)(a, i, b, dn), x, idx, u), out)
    _check_aval(lambda a, i, b: getattr(lax, name)(a, i, b, dn), (x, idx, u), out)


# ---------------------------------------------------------------------------
# scatter_apply (against JAX's)

_APPLY_DN = dict(update_window_dims=(), inserted_window_dims=(0,),
                 scatter_dims_to_operand_dims=(0,))


@pytest.mark.parametrize("mode", [None, "clip", "fill"])
def test_scatter_apply_matches_jax(mode):
  import jax
  x = np.linspace(-2, 2, 6).astype(np.float32)
  idx = np.array([[1], [4], [4], [9]], np.int32)    # a repeat (applied twice), one out of bounds
  ours_dn = lax.ScatterDimensionNumbers(**_APPLY_DN)
  theirs_dn = jax.lax.ScatterDimensionNumbers(**_APPLY_DN)
  f_ours = lambda v: sc.numpy.sin(v) * 3 + 1
  f_theirs = lambda v: jax.numpy.sin(v) * 3 + 1
  got = lax.scatter_apply(x, idx, f_ours, ours_dn, update_shape=(4,), mode=mode)
  want = jax.lax.scatter_apply(x, idx, f_theirs, theirs_dn, update_shape=(4,), mode=mode)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
  xs = np.stack([x, -x])
  got = sc.vmap(lambda v: lax.scatter_apply(v, idx, f_ours, ours_dn, update_shape=(4,),
                                            mode=mode))(xs)
  want = jax.vmap(lambda v: jax.lax.scatter_apply(v, idx, f_theirs, theirs_dn,
                                                  update_shape=(4,), mode=mode))(xs)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
  idxs = np.stack([idx, idx - 1])
  got = sc.jit(sc.vmap(lambda i: lax.scatter_apply(x, i, f_ours, ours_dn, update_shape=(4,),
                                                   mode=mode)))(idxs)
  want = jax.vmap(lambda i: jax.lax.scatter_apply(x, i, f_theirs, theirs_dn, update_shape=(4,),
                                                  mode=mode))(idxs)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)


def test_scatter_apply_errors():
  x = np.arange(4, dtype=np.float32)
  dn = lax.ScatterDimensionNumbers(**_APPLY_DN)
  idx = np.array([[1]], np.int32)
  with pytest.raises(TypeError, match=r"func must map a f32\[\] scalar to one f32\[\] scalar, "
                                      r"got i32\[\]"):
    lax.scatter_apply(x, idx, lambda v: lax.convert_element_type(v, np.int32), dn,
                      update_shape=(1,))
  with pytest.raises(NotImplementedError, match="scatter_apply is not differentiable"):
    sc.grad(lambda v: lax.scatter_apply(v, idx, sc.numpy.sin, dn, update_shape=(1,)).sum())(x)
