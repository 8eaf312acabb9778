"""Details found by running JAX 0.10.2's own test files on stagecraft through a scratch
harness (session 36). JAX is the oracle in each test."""
import jax
import jax.scipy.spatial.transform as jst
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
import stagecraft.scipy.spatial.transform as sst


def _bits(x):
  return np.asarray(x).tobytes()


# -- scipy.spatial.transform: no rank promotion; JAX's bits ------------------------------------

_Q = np.random.RandomState(0).randn(3, 4).astype(np.float32)


@pytest.mark.parametrize("shape", ["single", "stack"])
@pytest.mark.parametrize("method", ["inv_rotvec", "inv_quat", "magnitude", "as_matrix"])
def test_rotation_runs_under_rank_promotion_raise_with_jax_bits(shape, method):
  q = _Q[0] if shape == "single" else _Q

  def run(ns):
    r = ns.Rotation.from_quat(q)
    if method == "inv_rotvec":
      return r.inv().as_rotvec()
    if method == "inv_quat":
      return r.inv().as_quat()
    if method == "magnitude":
      return r.magnitude()
    return r.as_matrix()

  with sc.numpy_rank_promotion("raise"), jax.numpy_rank_promotion("raise"):
    ours, theirs = run(sst), run(jst)
  assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
  assert _bits(ours) == _bits(theirs)


@pytest.mark.parametrize("times", [0.0, np.zeros(1), np.zeros(2), np.array([0.5, 1.5])],
                         ids=["scalar", "one", "two", "between"])
def test_slerp_runs_under_rank_promotion_raise_with_jax_bits(times):
  def run(ns, lib):
    key_times = lib.numpy.arange(3, dtype=np.float32)
    return ns.Slerp.init(key_times, ns.Rotation.from_quat(_Q))(times).as_rotvec()

  with sc.numpy_rank_promotion("raise"), jax.numpy_rank_promotion("raise"):
    ours, theirs = run(sst, sc), run(jst, jax)
  assert ours.shape == theirs.shape
  assert _bits(ours) == _bits(theirs)
