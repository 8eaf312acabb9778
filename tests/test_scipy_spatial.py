"""stagecraft.scipy.spatial.transform (Rotation, Slerp) against SciPy's
scipy.spatial.transform (values) and JAX's jax.scipy.spatial.transform (degenerate cases,
structure), with finite-difference gradients."""
import warnings

import jax
import jax.scipy.spatial.transform as jtr
import numpy as np
import pytest
from scipy.spatial.transform import Rotation as SR, Slerp as SSlerp

import stagecraft as sc
from stagecraft import tree_util
from stagecraft.scipy.spatial.transform import Rotation, Slerp
from stagecraft.test_util import check_grads

RNG = np.random.default_rng(0)
Q = RNG.standard_normal((6, 4))
V = RNG.standard_normal((6, 3))
SEQS = ["xyz", "ZYX", "zxz", "XYX", "yzy", "xzy", "YXZ"]

# JAX's transform module runs op by op unless jitted: jit the oracle calls.
_jax_from_euler = jax.jit(lambda seq, a: jtr.Rotation.from_euler(seq, a).as_quat(),
                          static_argnums=0)
_jax_as_euler = jax.jit(lambda seq, q: jtr.Rotation.from_quat(q).as_euler(seq),
                        static_argnums=0)


def _tol(x64):
  return dict(rtol=1e-10, atol=1e-10) if x64 else dict(rtol=2e-5, atol=2e-5)


def _close(a, b, x64=False, **kw):
  a, b = np.asarray(a), np.asarray(b)
  assert a.shape == b.shape, (a.shape, b.shape)
  np.testing.assert_allclose(a, b, **(kw or _tol(x64)))


@pytest.mark.parametrize("x64", [False, True])
def test_conversions_match_scipy(x64):
  sr = SR.from_quat(Q)
  with sc.enable_x64(x64):
    r = Rotation.from_quat(Q)
    assert r.quat.dtype == (np.float64 if x64 else np.float32)
    _close(r.as_quat(), sr.as_quat(), x64)
    _close(r.as_quat(canonical=True), sr.as_quat(canonical=True), x64)
    _close(r.as_quat(scalar_first=True), sr.as_quat(scalar_first=True), x64)
    _close(r.as_matrix(), sr.as_matrix(), x64)
    _close(r.as_rotvec(), sr.as_rotvec(), x64)
    _close(r.as_rotvec(degrees=True), sr.as_rotvec(degrees=True), x64, rtol=2e-5, atol=2e-3)
    _close(r.as_mrp(), sr.as_mrp(), x64)
    _close(r.magnitude(), sr.magnitude(), x64)
    _close(r.inv().as_matrix(), sr.inv().as_matrix(), x64)
    for seq in SEQS:
      _close(r.as_euler(seq), sr.as_euler(seq), x64)
    _close(r.as_euler("xyz", degrees=True), sr.as_euler("xyz", degrees=True), x64,
           rtol=1e-5, atol=1e-3)
    m = sr.as_matrix()
    _close(Rotation.from_matrix(m).as_matrix(), m, x64)
    _close(Rotation.from_rotvec(sr.as_rotvec()).as_quat(canonical=True),
           sr.as_quat(canonical=True), x64)
    _close(Rotation.from_rotvec(sr.as_rotvec(degrees=True), degrees=True).as_matrix(), m, x64)
    _close(Rotation.from_mrp(sr.as_mrp()).as_matrix(), m, x64)
    _close(Rotation.from_quat(sr.as_quat(scalar_first=True), scalar_first=True).as_matrix(), m,
           x64)


@pytest.mark.parametrize("seq", SEQS + ["z", "xY".lower(), "X"])
def test_from_euler_matches_scipy(seq):
  angles = RNG.uniform(-3, 3, (5, len(seq)))
  _close(Rotation.from_euler(seq, angles).as_matrix(), SR.from_euler(seq, angles).as_matrix())
  deg = np.rad2deg(angles[0])
  _close(Rotation.from_euler(seq, deg, degrees=True).as_quat(),
         SR.from_euler(seq, deg, degrees=True).as_quat())
  r = Rotation.from_euler("z", 90, degrees=True)
  assert r.single and r.quat.dtype == np.float32


def test_euler_gimbal_lock_matches_jax():
  # Middle angle 0 or pi (or +-pi/2 for asymmetric sequences): the third angle is set to 0.
  for seq, mid in [("zxz", 0.0), ("XYX", np.pi), ("xyz", np.pi / 2), ("ZYX", -np.pi / 2)]:
    angles = np.array([[0.3, mid, 0.2], [-1.1, mid, 0.7]], np.float32)
    q = np.asarray(_jax_from_euler(seq, angles))
    ours = Rotation.from_quat(q).as_euler(seq)
    theirs = _jax_as_euler(seq, q)
    _close(ours, theirs, atol=1e-5, rtol=1e-5)
    # The angles still describe the same rotation (SciPy agrees, with its warning).
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", UserWarning)
      _close(Rotation.from_euler(seq, ours).as_matrix(), SR.from_quat(q).as_matrix(),
             atol=1e-4, rtol=1e-4)


def test_from_matrix_branches_match_jax():
  # Each of the four branches of Markley's method: trace largest, or m00, m11, m22.
  mats = np.stack([np.eye(3), np.diag([1.0, -1.0, -1.0]), np.diag([-1.0, 1.0, -1.0]),
                   np.diag([-1.0, -1.0, 1.0]), SR.from_rotvec([2.9, 0.1, 0.2]).as_matrix()])
  theirs = jax.jit(lambda m: jtr.Rotation.from_matrix(m).as_quat())(mats)
  _close(Rotation.from_matrix(mats).as_quat(), theirs)
  _close(Rotation.from_matrix(mats).as_matrix(), mats, atol=1e-6, rtol=1e-6)


def test_apply_compose_mean_concatenate():
  sr, r = SR.from_quat(Q), Rotation.from_quat(Q)
  _close(r.apply(V), sr.apply(V))
  _close(r.apply(V, inverse=True), sr.apply(V, inverse=True))
  _close(r[0].apply(V), sr[0].apply(V))
  _close(r.apply(V[0]), sr.apply(V[0]))
  _close((r * r[::-1]).as_matrix(), (sr * sr[::-1]).as_matrix())
  _close((r[2] * r).as_matrix(), (sr[2] * sr).as_matrix())
  w = RNG.uniform(0.1, 1.0, 6)
  _close(r.mean().as_matrix(), sr.mean().as_matrix(), atol=1e-5, rtol=1e-5)
  _close(r.mean(w).as_matrix(), sr.mean(w).as_matrix(), atol=1e-5, rtol=1e-5)
  both = Rotation.concatenate([r, r[1]])
  _close(both.as_quat(), SR.concatenate([sr, sr[1]]).as_quat())
  assert len(both) == 7 and not both.single


def test_container_and_identity():
  r = Rotation.from_quat(Q)
  assert len(r) == 6 and not r.single and r[1:3].quat.shape == (2, 4) and r[0].single
  np.testing.assert_array_equal(np.asarray(Rotation.identity().quat), [0, 0, 0, 1])
  assert Rotation.identity(3).quat.shape == (3, 4)
  _close(Rotation.identity(2).apply(V[:2]), V[:2])
  with pytest.raises(TypeError, match="Single rotation is not subscriptable"):
    r[0][0]
  with pytest.raises(TypeError, match=r"Single rotation has no len\(\)"):
    len(r[0])


def test_random_rotations_are_uniform():
  r = Rotation.random(sc.random.key(0), 4000)
  assert r.quat.shape == (4000, 4)
  np.testing.assert_allclose(np.linalg.norm(np.asarray(r.quat), axis=-1), 1.0, rtol=1e-6)
  # Haar measure on SO(3): E[R] = 0 and E[trace R] = 0 (std of the means ~ 0.01 here).
  m = np.asarray(r.as_matrix())
  assert np.abs(m.mean(axis=0)).max() < 0.05
  assert Rotation.random(sc.random.key(1)).single


def test_slerp_matches_scipy():
  times = np.array([0.0, 1.0, 3.0, 4.0, 7.0, 8.0])
  sr = SR.from_quat(Q)
  s = Slerp.init(times, Rotation.from_quat(Q))
  ss = SSlerp(times, sr)
  t = np.array([0.0, 0.5, 2.2, 3.0, 3.9, 7.9, 8.0])
  _close(s(t).as_matrix(), ss(t).as_matrix())
  one = s(2.2)
  assert one.single
  _close(one.as_matrix(), ss(2.2).as_matrix())
  j = jax.jit(lambda t, q: jtr.Slerp.init(t, jtr.Rotation.from_quat(q)).rotvecs)(times, Q)
  _close(s.rotvecs, j)


def test_pytree_jit_vmap():
  r = Rotation.from_quat(Q)
  leaves, treedef = tree_util.tree_flatten(r)
  assert len(leaves) == 1
  out = sc.jit(lambda r, v: r.apply(v))(r, V)
  _close(out, SR.from_quat(Q).apply(V))
  eul = sc.vmap(lambda q: Rotation.from_quat(q).as_euler("zyx"))(Q)
  _close(eul, SR.from_quat(Q).as_euler("zyx"))
  s = sc.jit(lambda s, t: s(t).quat)(Slerp.init(np.arange(6.0), r), np.array([0.5, 1.5]))
  assert s.shape == (2, 4)


def test_grads():
  rv = RNG.standard_normal(3)
  with sc.enable_x64():
    # rotvec -> matrix -> quat, and quat -> (rotvec, euler, mrp).
    check_grads(lambda v: Rotation.from_matrix(Rotation.from_rotvec(v).as_matrix()).as_quat(),
                (rv,), order=1)
    check_grads(lambda q: (lambda r: (r.as_rotvec(), r.as_euler("xyz"), r.as_mrp()))(
        Rotation.from_quat(q)), (Q[1],), order=1)
    # At the identity the gradients are finite (the small-angle series).
    g = sc.jacfwd(lambda v: Rotation.from_rotvec(v).apply(np.array([1.0, 2.0, 3.0])))(
        np.zeros(3))
    assert np.all(np.isfinite(np.asarray(g)))
    # d(R v)/d(rotvec) at 0 is -[v]_x (the cross-product matrix of v).
    _close(g, -np.array([[0, -3, 2], [3, 0, -1], [-2, 1, 0]]), x64=True)


def test_errors():
  r = Rotation.from_quat(Q)
  with pytest.raises(ValueError, match="Expected axis specification to be a non-empty string"):
    Rotation.from_euler("xyzx", [1, 2, 3, 4])
  with pytest.raises(ValueError, match=r"Expected axes from `seq` to be from \['x', 'y', 'z'\]"):
    Rotation.from_euler("xYz", [1, 2, 3])
  with pytest.raises(ValueError, match="Expected consecutive axes to be different"):
    Rotation.from_euler("xxz", [1, 2, 3])
  with pytest.raises(ValueError, match="Expected 3 axes"):
    r.as_euler("xy")
  with pytest.raises(ValueError, match=r"shape \(\.\.\., 3\)"):
    Rotation.from_euler("xyz", [1.0, 2.0])
  with pytest.raises(ValueError, match=r"shape \(\.\.\., 4\)"):
    Rotation.from_quat([1.0, 2.0, 3.0])
  with pytest.raises(ValueError, match=r"shape \(\.\.\., 3, 3\)"):
    Rotation.from_matrix(np.eye(4))
  with pytest.raises(ValueError, match="Expected `weights` to have number of values"):
    r.mean(np.ones(3))
  with pytest.raises(TypeError, match="`rotations` must be a `Rotation` instance"):
    Slerp.init([0, 1], Q[:2])
  with pytest.raises(ValueError, match="at least 2 rotations"):
    Slerp.init([0], r[:1])
  with pytest.raises(ValueError, match="Expected number of rotations to be equal"):
    Slerp.init([0, 1, 2], r)
  with pytest.raises(ValueError, match="`times` must be at most 1-dimensional"):
    Slerp.init(np.arange(6.0), r)(np.zeros((2, 2)))
