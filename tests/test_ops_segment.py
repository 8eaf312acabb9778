"""stagecraft.ops segment reductions against a NumPy reference (`np.<ufunc>.at`), JAX's
jax.ops (dtypes, gradients, error types) and finite differences."""
import jax
import jax.ops as jops
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import stagecraft as sc
from stagecraft import ops
from stagecraft.errors import ConcretizationTypeError
from stagecraft.test_util import check_grads

NAMES = ["segment_sum", "segment_prod", "segment_max", "segment_min"]
UFUNC = {"segment_sum": np.add, "segment_prod": np.multiply, "segment_max": np.maximum,
         "segment_min": np.minimum}
RNG = np.random.default_rng(0)


def _identity(name, dtype):
  if name == "segment_sum":
    return 0
  if name == "segment_prod":
    return 1
  if dtype == np.bool_:
    return name == "segment_min"
  if np.issubdtype(dtype, np.integer):
    return np.iinfo(dtype).max if name == "segment_min" else np.iinfo(dtype).min
  return np.inf if name == "segment_min" else -np.inf


def _reference(name, data, ids, n, mode="drop"):
  """The segment reduction in NumPy: unbuffered ufunc.at over the kept ids."""
  data = np.asarray(data)
  out = np.full((n,) + data.shape[1:], _identity(name, data.dtype), dtype=data.dtype)
  ids = np.asarray(ids)
  if mode == "clip":
    ids = np.clip(ids, 0, n - 1)
  keep = (ids >= 0) & (ids < n)
  UFUNC[name].at(out, ids[keep], data[keep])
  return out


def _data(dtype, shape):
  if dtype == np.bool_:
    return RNG.integers(0, 2, shape).astype(bool)
  if np.issubdtype(dtype, np.integer):
    return RNG.integers(-3 if np.issubdtype(dtype, np.signedinteger) else 0, 4,
                        shape).astype(dtype)
  return RNG.uniform(0.5, 1.5, shape).astype(dtype) * RNG.choice([-1, 1], shape)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int8, np.uint8])
def test_matches_numpy_and_jax(name, dtype):
  data = _data(dtype, (9, 2))
  ids = np.array([0, 2, 2, -1, 5, 1, 7, 2, 0])   # -1 and 7 (>= num_segments) are dropped
  out = getattr(ops, name)(data, ids, num_segments=6)
  assert out.dtype == dtype and out.shape == (6, 2)
  np.testing.assert_allclose(np.asarray(out), _reference(name, data, ids, 6), rtol=1e-6)
  np.testing.assert_array_equal(np.asarray(out), np.asarray(getattr(jops, name)(data, ids, 6)))


@pytest.mark.parametrize("name", ["segment_max", "segment_min"])
def test_bool_extrema(name):
  data = np.array([True, False, False, True, False])
  ids = np.array([0, 0, 1, 2, 2])
  out = getattr(ops, name)(data, ids, 4)
  assert out.dtype == np.bool_
  np.testing.assert_array_equal(np.asarray(out), _reference(name, data, ids, 4))
  np.testing.assert_array_equal(np.asarray(out), np.asarray(getattr(jops, name)(data, ids, 4)))


@pytest.mark.parametrize("name", NAMES)
def test_options(name):
  data = _data(np.float32, (8,))
  ids = np.array([0, 0, 1, 3, 3, 3, 4, -2])
  f = getattr(ops, name)
  g = getattr(jops, name)
  # num_segments inferred from max(segment_ids) + 1.
  np.testing.assert_allclose(np.asarray(f(data, ids)), _reference(name, data, ids, 5),
                             rtol=1e-6)
  # 'clip' clamps out-of-range ids (negative ones to 0) instead of dropping them.
  np.testing.assert_allclose(np.asarray(f(data, ids, 4, mode="clip")),
                             _reference(name, data, ids, 4, mode="clip"), rtol=1e-6)
  np.testing.assert_allclose(np.asarray(f(data, ids, 4, mode=sc.lax.GatherScatterMode.CLIP)),
                             np.asarray(g(data, ids, 4, mode="clip")), rtol=1e-6)
  # Buckets change the association only.
  np.testing.assert_allclose(np.asarray(f(data, ids, 5, bucket_size=3)),
                             _reference(name, data, ids, 5), rtol=1e-6)
  s = np.sort(ids[ids >= 0])
  np.testing.assert_allclose(np.asarray(f(data[:7], s, 5, indices_are_sorted=True)),
                             _reference(name, data[:7], s, 5), rtol=1e-6)
  u = np.array([3, 0, 1])
  np.testing.assert_allclose(np.asarray(f(data[:3], u, 4, unique_indices=True)),
                             _reference(name, data[:3], u, 4), rtol=1e-6)
  assert f(data, ids, 0).shape == (0,)


def test_bucketed_sum_is_more_accurate():
  data = np.full(20000, 0.1, np.float32)
  ids = np.zeros(20000, np.int32)
  exact = 20000 * np.float64(np.float32(0.1))
  plain = float(ops.segment_sum(data, ids, 1)[0])
  bucketed = float(ops.segment_sum(data, ids, 1, bucket_size=100)[0])
  assert abs(bucketed - exact) <= abs(plain - exact)
  np.testing.assert_allclose(bucketed, float(jops.segment_sum(data, ids, 1, bucket_size=100)[0]),
                             rtol=1e-6)


@settings(max_examples=10)
@given(m=st.integers(0, 12), n=st.integers(1, 6), name=st.sampled_from(NAMES),
       seed=st.integers(0, 2 ** 16))
def test_random_segments(m, n, name, seed):
  rng = np.random.default_rng(seed)
  data = rng.uniform(-2, 2, (m, 3)).astype(np.float32)
  ids = rng.integers(-1, n + 1, m)
  out = getattr(ops, name)(data, ids, n)
  np.testing.assert_allclose(np.asarray(out), _reference(name, data, ids, n), rtol=1e-5)


def test_x64():
  data = RNG.standard_normal((6, 2))
  ids = np.array([0, 1, 1, 2, 2, 2], np.int64)
  with sc.enable_x64():
    for name in NAMES:
      out = getattr(ops, name)(data, ids)
      assert out.dtype == np.float64
      np.testing.assert_allclose(np.asarray(out), _reference(name, data, ids, 3), rtol=1e-14)
    out = ops.segment_max(np.arange(6, dtype=np.int64), ids, 4)
    assert out.dtype == np.int64 and int(out[3]) == np.iinfo(np.int64).min


def test_jit_and_vmap():
  data = _data(np.float32, (6,))
  ids = np.array([0, 1, 1, 2, 2, 2])
  f = sc.jit(ops.segment_sum, static_argnums=2)
  np.testing.assert_allclose(np.asarray(f(data, ids, 3)), _reference("segment_sum", data, ids, 3),
                             rtol=1e-6)
  batch = _data(np.float32, (4, 6))
  out = sc.vmap(lambda d: ops.segment_max(d, ids, 3))(batch)
  np.testing.assert_allclose(np.asarray(out),
                             np.stack([_reference("segment_max", d, ids, 3) for d in batch]))


def test_grads():
  data = RNG.standard_normal((7, 2))
  ids = np.array([0, 1, 1, 2, 2, 2, 5])
  with sc.enable_x64():
    check_grads(lambda d: ops.segment_sum(d, ids, 4), (data,), order=2)
    check_grads(lambda d: ops.segment_max(d, ids, 3), (data,), order=1)   # no empty segment
    check_grads(lambda d: ops.segment_prod(d[:3], np.array([2, 0, 1]), 3, unique_indices=True),
                (data,), order=1)


@pytest.mark.parametrize("name", ["segment_max", "segment_min", "segment_sum"])
def test_grads_with_ties_match_jax(name):
  data = np.array([1.0, 1.0, 2.0, 3.0, 3.0, -1.0], np.float32)
  ids = np.array([0, 0, 1, 1, 1, 2])
  w = np.array([1.0, 2.0, 3.0], np.float32)
  ours = sc.grad(lambda d: (getattr(ops, name)(d, ids, 3) * w).sum())(data)
  theirs = jax.grad(lambda d: (getattr(jops, name)(d, ids, 3) * w).sum())(data)
  np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-6)


def test_errors():
  ids = np.array([0, 0])
  with pytest.raises(TypeError, match="segment_sum requires ndarray or scalar arguments, "
                                      "got <class 'list'> at position 0"):
    ops.segment_sum([1.0, 2.0], ids)
  with pytest.raises(ValueError, match="num_segments must be non-negative"):
    ops.segment_sum(np.ones(2), ids, -1)
  with pytest.raises(TypeError, match="add does not accept dtype bool"):
    ops.segment_sum(np.array([True, False]), ids, 2)
  with pytest.raises(TypeError, match="mul does not accept dtype bool"):
    ops.segment_prod(np.array([True, False]), ids, 2)
  with pytest.raises(TypeError, match="integer dtype"):
    ops.segment_min(np.ones(2), np.array([0.0, 1.0]), 2)
  with pytest.raises(ConcretizationTypeError, match="`num_segments` argument"):
    sc.jit(ops.segment_sum)(np.ones(2), ids, 3)
  with pytest.raises(ConcretizationTypeError, match="`num_segments` argument"):
    sc.jit(ops.segment_sum)(np.ones(2), ids)
  with pytest.raises(NotImplementedError, match="out_sharding"):
    ops.segment_sum(np.ones(2), ids, 2, out_sharding=object())
  with pytest.raises(NotImplementedError, match="unique_indices=True"):
    sc.grad(lambda d: ops.segment_prod(d, ids, 1).sum())(np.ones(2, np.float32))
