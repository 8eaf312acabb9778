"""`stagecraft.scipy.spatial.transform`: 3-D rotations (`Rotation`) and their spherical
linear interpolation (`Slerp`), as JAX's `jax.scipy.spatial.transform`.

A `Rotation` holds unit quaternions `quat: T[..., 4]` in scalar-last order (x, y, z, w), as
SciPy's `Rotation.as_quat()`; `quat` of shape `[4]` is a single rotation, `[N, 4]` a stack
of N. Both classes are NamedTuples, so they are pytrees: they pass through `jit`, `grad` and
`vmap`. All conversions are composed from `stagecraft.numpy` on the last axis, so they
broadcast over leading axes and are differentiable.

References:
  J. Diebel, "Representing attitude: Euler angles, unit quaternions, and rotation vectors"
  (2006) for the conversions; F. L. Markley, "Unit quaternion from rotation matrix",
  J. Guidance, Control and Dynamics 31(2), 2008 (from_matrix); E. Bernardes and S. Viollet,
  "Quaternion to Euler angles conversion: a direct, general and computationally efficient
  method", PLoS ONE 17(11), 2022 (as_euler); F. L. Markley et al., "Averaging quaternions",
  J. Guidance, Control and Dynamics 30(4), 2007 (mean); K. Shoemake, "Animating rotation
  with quaternion curves", SIGGRAPH 1985 (Slerp). The behaviour follows SciPy's
  `scipy.spatial.transform.Rotation` and JAX's version of it.
"""
from __future__ import annotations

import functools
import re
import typing
from typing import Any, Sequence

import numpy as np

from stagecraft import lax
from stagecraft import numpy as jnp
from stagecraft import random as jrandom
from stagecraft.numpy import linalg as jnp_linalg
from stagecraft.numpy.util import promote_dtypes_inexact
from stagecraft.pjit import jit

__all__ = ["Rotation", "Slerp"]


# ---------------------------------------------------------------------------
# Quaternion helpers on the last axis (x, y, z, w). As JAX's (whose helpers are vectorized,
# not jitted), they run operation by operation on eager values, so XLA fuses nothing that
# JAX's does not and the results are JAX's bit for bit (a jitted `as_matrix` contracts
# `-z*z + w*w` into a fused multiply-add: 1.3e-08 where JAX prints 0); `_mean` stays jitted.


def _sq_norm(v):
  """|v|^2 over the last axis as a dot product (as JAX's vectorized `jnp.dot(v, v)`: the
  same contraction, so the same bits as a sum of squares is not)."""
  return jnp.einsum("...i,...i->...", v, v)


def _safe_norm(v):
  """|v| over the last axis, with a zero (not NaN) gradient at v = 0."""
  sq = _sq_norm(v)
  nonzero = sq > 0
  return jnp.where(nonzero, jnp.sqrt(jnp.where(nonzero, sq, 1)), 0)


def _norm(v):
  return jnp.sqrt(_sq_norm(v))


def _normalize(q):
  return q / _norm(q)[..., None]


def _compose(p, q):
  """The Hamilton product p q: the rotation q followed by p."""
  px, py, pz, pw = (p[..., i] for i in range(4))
  qx, qy, qz, qw = (q[..., i] for i in range(4))
  cross = jnp.cross(p[..., :3], q[..., :3])
  return jnp.stack([pw * qx + qw * px + cross[..., 0],
                    pw * qy + qw * py + cross[..., 1],
                    pw * qz + qw * pz + cross[..., 2],
                    pw * qw - px * qx - py * qy - pz * qz], axis=-1)


def _as_matrix(q):
  x, y, z, w = (q[..., i] for i in range(4))
  x2, y2, z2, w2 = x * x, y * y, z * z, w * w
  xy, zw, xz, yw, yz, xw = x * y, z * w, x * z, y * w, y * z, x * w
  rows = [[x2 - y2 - z2 + w2, 2 * (xy - zw), 2 * (xz + yw)],
          [2 * (xy + zw), -x2 + y2 - z2 + w2, 2 * (yz - xw)],
          [2 * (xz - yw), 2 * (yz + xw), -x2 - y2 + z2 + w2]]
  return jnp.stack([jnp.stack(r, axis=-1) for r in rows], axis=-2)


def _from_matrix(m):
  """Markley's method: build the quaternion from the largest of |x|, |y|, |z|, |w| (chosen
  by the largest of the diagonal entries and the trace), which avoids cancellation."""
  trace = m[..., 0, 0] + m[..., 1, 1] + m[..., 2, 2]
  decision = jnp.stack([m[..., 0, 0], m[..., 1, 1], m[..., 2, 2], trace], axis=-1)
  choice = jnp.argmax(decision, axis=-1)
  candidates = []
  for i in range(3):
    j, k = (i + 1) % 3, (i + 2) % 3
    comp = [None] * 4
    comp[i] = 1 - trace + 2 * m[..., i, i]
    comp[j] = m[..., j, i] + m[..., i, j]
    comp[k] = m[..., k, i] + m[..., i, k]
    comp[3] = m[..., k, j] - m[..., j, k]
    candidates.append(jnp.stack(comp, axis=-1))
  candidates.append(jnp.stack([m[..., 2, 1] - m[..., 1, 2], m[..., 0, 2] - m[..., 2, 0],
                               m[..., 1, 0] - m[..., 0, 1], 1 + trace], axis=-1))
  q = candidates[3]
  for i in range(3):
    q = jnp.where((choice == i)[..., None], candidates[i], q)
  return _normalize(q)


def _from_rotvec(v, degrees: bool):
  if degrees:
    v = jnp.deg2rad(v)
  angle = _safe_norm(v)
  angle2 = angle * angle
  small = 0.5 - angle2 / 48 + angle2 * angle2 / 3840   # Taylor series of sin(a/2)/a
  is_small = angle <= 1e-3
  large = jnp.sin(angle / 2) / jnp.where(is_small, 1, angle)
  scale = jnp.where(is_small, small, large)
  return jnp.concatenate([scale[..., None] * v, jnp.cos(angle / 2)[..., None]], axis=-1)


def _as_rotvec(q, degrees: bool):
  q = jnp.where((q[..., 3] < 0)[..., None], -q, q)   # w >= 0: the angle is in [0, pi]
  angle = 2.0 * jnp.arctan2(_safe_norm(q[..., :3]), q[..., 3])
  angle2 = angle * angle
  small = 2 + angle2 / 12 + 7 * angle2 * angle2 / 2880   # Taylor series of a / sin(a/2)
  is_small = angle <= 1e-3
  safe_angle = jnp.where(is_small, 1, angle)
  large = safe_angle / jnp.sin(safe_angle / 2)
  scale = jnp.where(is_small, small, large)
  if degrees:
    scale = jnp.rad2deg(scale)
  return scale[..., None] * q[..., :3]


def _as_mrp(q):
  sign = jnp.where(q[..., 3] < 0, -1.0, 1.0)
  return sign[..., None] * q[..., :3] / (1.0 + sign * q[..., 3])[..., None]


def _from_mrp(p):
  sq1 = jnp.sum(p * p, axis=-1) + 1
  return jnp.concatenate([2 * p, (2 - sq1)[..., None]], axis=-1) / sq1[..., None]


def _make_canonical(q):
  """q or -q, whichever has w > 0 (or, where w == 0, the first nonzero of x, y, z > 0)."""
  neg, zero = q < 0, q == 0
  flip = (neg[..., 3] | (zero[..., 3] & neg[..., 0])
          | (zero[..., 3] & zero[..., 0] & neg[..., 1])
          | (zero[..., 3] & zero[..., 0] & zero[..., 1] & neg[..., 2]))
  return jnp.where(flip[..., None], -q, q)


_AXIS = {"x": 0, "y": 1, "z": 2}


def _check_seq(seq: Any, lengths: range) -> None:
  """Validates an Euler axis sequence (all lower case: extrinsic; all upper: intrinsic)."""
  if not isinstance(seq, str) or len(seq) not in lengths:
    if len(lengths) == 1:
      raise ValueError(f"Expected 3 axes, got {seq}.")
    raise ValueError("Expected axis specification to be a non-empty string of upto 3 "
                     f"characters, got {seq}")
  intrinsic = re.match(r"^[XYZ]{1,3}$", seq) is not None
  extrinsic = re.match(r"^[xyz]{1,3}$", seq) is not None
  if not (intrinsic or extrinsic):
    raise ValueError("Expected axes from `seq` to be from ['x', 'y', 'z'] or "
                     f"['X', 'Y', 'Z'], got {seq}")
  if any(seq[i] == seq[i + 1] for i in range(len(seq) - 1)):
    raise ValueError(f"Expected consecutive axes to be different, got {seq}")


def _elementary_quat(axis: int, angle):
  half = angle / 2.0
  zero = jnp.zeros_like(half)
  comps = [jnp.sin(half) if c == axis else zero for c in range(3)] + [jnp.cos(half)]
  q = jnp.stack(comps, axis=-1)
  # NB: as JAX's (its components are set into a strongly typed zeros array): not weak,
  # whatever the angles' type (`from_euler('z', 90, degrees=True)`)
  return lax.convert_element_type(q, q.dtype)


def _as_euler(q, seq: str, degrees: bool):
  """Bernardes & Viollet's direct conversion: angles from the quaternion's components
  permuted to the axis sequence, with the two gimbal-lock cases (middle angle 0 or pi)
  resolved by setting the third angle to 0."""
  extrinsic = seq.islower()
  axes = [_AXIS[c] for c in seq.lower()]
  if not extrinsic:
    axes = axes[::-1]
  i, j, k = axes
  symmetric = i == k
  if symmetric:
    k = 3 - i - j
  sign = (i - j) * (j - k) * (k - i) // 2   # +1 for an even permutation of (x, y, z)
  w, qi, qj, qk = q[..., 3], q[..., i], q[..., j], q[..., k]
  if symmetric:
    a, b, c, d = w, qi, qj, qk * sign
  else:
    a, b, c, d = w - qj, qi + qk * sign, qj + w, qk * sign - qi
  eps = 1e-7
  middle = 2 * jnp.arctan2(jnp.hypot(c, d), jnp.hypot(a, b))
  case = jnp.where(jnp.abs(middle - np.pi) <= eps, 2, 0)
  case = jnp.where(jnp.abs(middle) <= eps, 1, case)
  half_sum = jnp.arctan2(b, a)
  half_diff = jnp.arctan2(d, c)
  regular = case == 0
  degenerate = jnp.where(case == 1, 2 * half_sum, 2 * half_diff * (-1 if extrinsic else 1))
  zero = jnp.zeros_like(middle)
  if extrinsic:   # the first angle is angles[0], the third angles[2]
    first = jnp.where(regular, half_sum - half_diff, degenerate)
    third = jnp.where(regular, half_sum + half_diff, zero)
    angles = [first, middle, third]
  else:           # the sequence was reversed: the first angle is angles[2]
    first = jnp.where(regular, half_sum - half_diff, zero)
    third = jnp.where(regular, half_sum + half_diff, degenerate)
    angles = [third, middle, first]
  if not symmetric:
    t = 2 if extrinsic else 0
    angles[t] = angles[t] * sign
    angles[1] = angles[1] - np.pi / 2
  out = (jnp.stack(angles, axis=-1) + np.pi) % (2 * np.pi) - np.pi
  return jnp.rad2deg(out) if degrees else out


def _from_euler(angles, seq: str, degrees: bool):
  """Composes the elementary rotations: intrinsic (upper-case) sequences multiply on the
  right (each rotation about the already-rotated axes), extrinsic ones on the left."""
  intrinsic = seq.isupper()
  if degrees:
    angles = jnp.deg2rad(angles)
  axes = [_AXIS[c] for c in seq.lower()]
  q = _elementary_quat(axes[0], angles[..., 0])
  for n in range(1, len(axes)):
    e = _elementary_quat(axes[n], angles[..., n])
    q = _compose(q, e) if intrinsic else _compose(e, q)
  return q


def _compose_normalized(p, q):
  return _normalize(_compose(p, q))


def _apply(q, vectors, inverse: bool):
  m = _as_matrix(q)
  if inverse:
    m = jnp.swapaxes(m, -1, -2)
  return jnp.matmul(m, vectors[..., None])[..., 0]


def _magnitude(q):
  return 2.0 * jnp.arctan2(_safe_norm(q[..., :3]), jnp.abs(q[..., 3]))


@jit
def _mean(q, w):
  k = jnp.matmul(w[None, :] * q.T, q)
  _, v = jnp_linalg.eigh(k)
  return v[:, -1]


def _conjugate(quat):
  """The conjugate quaternions (-x, -y, -z, w) of `quat[..., 4]` (no rank promotion, so that
  it runs under jax_numpy_rank_promotion='raise')."""
  return jnp.concatenate([-quat[..., :3], quat[..., 3:]], axis=-1)


def _slerp_init(quat):
  """(first N-1 key quaternions, each step's relative rotation vector)."""
  start, end = quat[:-1], quat[1:]
  inv_start = _conjugate(start)
  return start, _as_rotvec(_compose_normalized(inv_start, end), False)


def _slerp_eval(key_times, timedelta, start, rotvecs, t):
  ind = jnp.maximum(jnp.searchsorted(key_times, t) - 1, 0)
  alpha = (t - key_times[ind]) / timedelta[ind]
  return _compose_normalized(start[ind], _from_rotvec(rotvecs[ind] * alpha[:, None], False))


def _as_inexact_array(x: Any):
  x, = promote_dtypes_inexact(jnp.asarray(x))
  return x


def _check_last_dim(name: str, x, n: int):
  if x.ndim == 0 or x.shape[-1] != n:
    raise ValueError(f"Expected `{name}` to have shape (..., {n}), got {tuple(x.shape)}.")


# ---------------------------------------------------------------------------


class Rotation(typing.NamedTuple):
  """Rotations in 3 dimensions (JAX's `jax.scipy.spatial.transform.Rotation`, after
  SciPy's `scipy.spatial.transform.Rotation`).

  Build one with a `from_*` classmethod, never from raw quaternions that may not be unit
  (`Rotation(q)` does not normalize; `Rotation.from_quat(q)` does). A Rotation is a
  NamedTuple of one array, `quat: T[4]` (single) or `T[N, 4]` (N rotations), scalar last.

  Examples:
    >>> r = Rotation.from_euler('z', 90, degrees=True)
    >>> r.apply(jnp.array([1., 0., 0.])).round(6)
    Array([0., 1., 0.], dtype=float32)
    >>> (r * r).magnitude()
    Array(3.1415927, dtype=float32)
  """
  quat: Any

  # -- constructors ------------------------------------------------------------------

  @classmethod
  def concatenate(cls, rotations: Sequence["Rotation"]) -> "Rotation":
    """The rotations of `rotations` (single ones included) as one stack `T[sum N_i, 4]`."""
    return cls(jnp.concatenate([jnp.atleast_2d(r.quat) for r in rotations]))

  @classmethod
  def from_euler(cls, seq: str, angles: Any, degrees: bool = False) -> "Rotation":
    """From Euler angles.

    Args:
      seq: 1 to 3 axes, all from 'xyz' (extrinsic: rotations about the fixed frame's axes)
        or all from 'XYZ' (intrinsic: about the rotating frame's axes), no axis twice in a
        row.
      angles: `T[..., len(seq)]` (a scalar for one axis), in radians or degrees.
      degrees: whether `angles` are in degrees.

    Returns:
      Rotation with `quat: T[..., 4]`.

    Raises:
      ValueError: for a malformed `seq` (SciPy's messages) or `angles` whose last
        dimension is not `len(seq)`.
    """
    _check_seq(seq, range(1, 4))
    angles = jnp.atleast_1d(_as_inexact_array(angles))
    _check_last_dim("angles", angles, len(seq))
    return cls(_from_euler(angles, seq, bool(degrees)))

  @classmethod
  def from_matrix(cls, matrix: Any) -> "Rotation":
    """From rotation matrices `T[..., 3, 3]` (Markley's method; the result is normalized)."""
    matrix = _as_inexact_array(matrix)
    if matrix.ndim < 2 or matrix.shape[-2:] != (3, 3):
      raise ValueError(f"Expected `matrix` to have shape (..., 3, 3), got "
                       f"{tuple(matrix.shape)}.")
    return cls(_from_matrix(matrix))

  @classmethod
  def from_mrp(cls, mrp: Any) -> "Rotation":
    """From Modified Rodrigues Parameters `T[..., 3]` (`axis * tan(angle / 4)`)."""
    mrp = _as_inexact_array(mrp)
    _check_last_dim("mrp", mrp, 3)
    return cls(_from_mrp(mrp))

  @classmethod
  def from_quat(cls, quat: Any, *, scalar_first: bool = False) -> "Rotation":
    """From quaternions `T[..., 4]` (x, y, z, w; (w, x, y, z) with `scalar_first`), which
    are normalized."""
    quat = _as_inexact_array(quat)
    _check_last_dim("quat", quat, 4)
    if scalar_first:
      quat = jnp.roll(quat, shift=-1, axis=-1)
    return cls(_normalize(quat))

  @classmethod
  def from_rotvec(cls, rotvec: Any, degrees: bool = False) -> "Rotation":
    """From rotation vectors `T[..., 3]` (axis times angle, in radians or degrees); a
    Taylor series near 0 keeps it accurate and differentiable there."""
    rotvec = _as_inexact_array(rotvec)
    _check_last_dim("rotvec", rotvec, 3)
    return cls(_from_rotvec(rotvec, bool(degrees)))

  @classmethod
  def identity(cls, num: int | None = None, dtype: Any = float) -> "Rotation":
    """The identity: `quat = [0, 0, 0, 1]`, or `num` copies `[num, 4]` (dtype canonicalized:
    float32 unless x64 is on)."""
    quat = jnp.array([0.0, 0.0, 0.0, 1.0], dtype=dtype)
    if num is not None:
      quat = jnp.broadcast_to(quat, (int(num), 4))
    return cls(quat)

  @classmethod
  def random(cls, random_key: Any, num: int | None = None) -> "Rotation":
    """Uniformly distributed rotations: a single one, or `num` of them.

    Algorithm: a standard normal 4-vector, normalized, is uniform on the unit sphere S^3,
    and the rotations of uniform unit quaternions are uniform (Haar) on SO(3) (Shoemake,
    "Uniform random rotations", Graphics Gems III, 1992). JAX raises NotImplementedError
    here; this extends it.
    """
    shape = (4,) if num is None else (int(num), 4)
    return cls(_normalize(jrandom.normal(random_key, shape)))

  # -- container -----------------------------------------------------------------------

  def __getitem__(self, indexer: Any) -> "Rotation":
    """The rotation(s) at `indexer` (any NumPy index of the leading axis).

    Raises:
      TypeError: for a single rotation.
    """
    if self.single:
      raise TypeError("Single rotation is not subscriptable.")
    return Rotation(self.quat[indexer])

  def __len__(self) -> int:
    """The number of rotations N.

    Raises:
      TypeError: for a single rotation.
    """
    if self.single:
      raise TypeError("Single rotation has no len().")
    return self.quat.shape[0]

  @property
  def single(self) -> bool:
    """Whether this is one rotation (`quat` of shape [4])."""
    return self.quat.ndim == 1

  # -- operations ----------------------------------------------------------------------

  def __mul__(self, other: "Rotation") -> "Rotation":
    """The composition: `other` first, then `self` (broadcast as SciPy: 1 with N, N with
    N)."""
    if not isinstance(other, Rotation):
      return NotImplemented
    return Rotation(_compose_normalized(self.quat, other.quat))

  def apply(self, vectors: Any, inverse: bool = False):
    """Rotates `vectors: T[..., 3]` (by the inverse with `inverse=True`): a single
    rotation with N vectors, N rotations with a single vector, or N with N.

    Returns:
      `T[..., 3]`.
    """
    vectors = _as_inexact_array(vectors)
    _check_last_dim("vectors", vectors, 3)
    return _apply(self.quat, vectors, bool(inverse))

  def as_euler(self, seq: str, degrees: bool = False):
    """Euler angles `T[..., 3]` for the 3-axis sequence `seq` (see `from_euler`): the first
    and third in [-pi, pi), the middle one in [0, pi] (symmetric sequences such as 'zxz')
    or [-pi/2, pi/2]. In gimbal lock the third angle is set to 0 (SciPy also warns).

    Raises:
      ValueError: if `seq` is not 3 valid axes.
    """
    _check_seq(seq, range(3, 4))
    return _as_euler(self.quat, seq, bool(degrees))

  def as_matrix(self):
    """Rotation matrices `T[..., 3, 3]`."""
    return _as_matrix(self.quat)

  def as_mrp(self):
    """Modified Rodrigues Parameters `T[..., 3]`, with the angle in [0, pi] (|mrp| <= 1)."""
    return _as_mrp(self.quat)

  def as_rotvec(self, degrees: bool = False):
    """Rotation vectors `T[..., 3]` (axis times angle, angle in [0, pi]; radians or
    degrees)."""
    return _as_rotvec(self.quat, bool(degrees))

  def as_quat(self, canonical: bool = False, scalar_first: bool = False):
    """Quaternions `T[..., 4]`: (x, y, z, w), or (w, x, y, z) with `scalar_first`; with
    `canonical`, the one of q and -q with w > 0 (ties broken by x, then y, then z)."""
    quat = _make_canonical(self.quat) if canonical else self.quat
    return jnp.roll(quat, shift=1, axis=-1) if scalar_first else quat

  def inv(self) -> "Rotation":
    """The inverse rotation(s) (the conjugate quaternions)."""
    return Rotation(_conjugate(self.quat))

  def magnitude(self):
    """The rotation angle(s) in radians, in [0, pi]: `T[...]`."""
    return _magnitude(self.quat)

  def mean(self, weights: Any = None) -> "Rotation":
    """The (weighted) mean rotation of a stack of N: the unit quaternion maximizing
    `sum_i w_i (q . q_i)^2`, the eigenvector of `sum_i w_i q_i q_i^T` with the largest
    eigenvalue (Markley et al. 2007).

    Raises:
      TypeError: for a single rotation.
      ValueError: if `weights` is not a vector of N values.
    """
    n = len(self)
    dtype = self.quat.dtype
    w = (jnp.ones(n, dtype=dtype) if weights is None
         else jnp.asarray(weights, dtype=dtype))
    if w.ndim != 1:
      raise ValueError(f"Expected `weights` to be 1 dimensional, got shape {w.shape}.")
    if w.shape[0] != n:
      raise ValueError(f"Expected `weights` to have number of values equal to number of "
                       f"rotations, got {w.shape[0]} values and {n} rotations.")
    return Rotation(_mean(self.quat, w))


class Slerp(typing.NamedTuple):
  """Spherical linear interpolation of rotations (JAX's
  `jax.scipy.spatial.transform.Slerp`, after SciPy's): between key rotations R_i at key
  times t_i, the rotation at t in [t_i, t_{i+1}] is `R_i * exp(alpha * log(R_i^-1
  R_{i+1}))` with `alpha = (t - t_i) / (t_{i+1} - t_i)` (Shoemake 1985): the constant
  angular velocity path.

  Build one with `Slerp.init(times, rotations)`; call it with the times to evaluate.
  Fields: `times: T[N]`, `timedelta: T[N-1]`, `rotations` (the first N-1 key rotations),
  `rotvecs: T[N-1, 3]` (each step's relative rotation vector).

  Examples:
    >>> rots = Rotation.from_euler('z', jnp.array([[0.], [90.]]), degrees=True)
    >>> s = Slerp.init(jnp.array([0., 1.]), rots)
    >>> s(0.5).as_rotvec()   # 45 degrees about z
    Array([0.        , 0.        , 0.78539824], dtype=float32)
  """
  times: Any
  timedelta: Any
  rotations: Rotation
  rotvecs: Any

  @classmethod
  def init(cls, times: Any, rotations: Rotation) -> "Slerp":
    """The interpolator through `rotations` (N >= 2) at increasing key `times: T[N]`.

    Raises:
      TypeError: if `rotations` is not a Rotation.
      ValueError: for fewer than 2 rotations, or `times` that is not a vector of N values.
      (Times that do not increase are not checked: they may be traced.)
    """
    if not isinstance(rotations, Rotation):
      raise TypeError("`rotations` must be a `Rotation` instance.")
    if rotations.single or len(rotations) == 1:
      raise ValueError("`rotations` must be a sequence of at least 2 rotations.")
    times = jnp.asarray(times, dtype=rotations.quat.dtype)
    if times.ndim != 1:
      raise ValueError(f"Expected times to be specified in a 1 dimensional array, got "
                       f"{times.ndim} dimensions.")
    if times.shape[0] != len(rotations):
      raise ValueError(f"Expected number of rotations to be equal to number of timestamps "
                       f"given, got {len(rotations)} rotations and {times.shape[0]} "
                       f"timestamps.")
    start, rotvecs = _slerp_init(rotations.quat)
    return cls(times=times, timedelta=jnp.diff(times), rotations=Rotation(start),
               rotvecs=rotvecs)

  def __call__(self, times: Any) -> Rotation:
    """The interpolated rotations at `times` (a scalar: a single rotation; a vector T[M]: M
    rotations). Times before the first key time or after the last extrapolate the first or
    last step.

    Raises:
      ValueError: if `times` has more than 1 dimension.
    """
    t = jnp.asarray(times, dtype=self.times.dtype)
    if t.ndim > 1:
      raise ValueError("`times` must be at most 1-dimensional.")
    single = t.ndim == 0
    t = jnp.atleast_1d(t)
    result = Rotation(_slerp_eval(self.times, self.timedelta, self.rotations.quat,
                                  self.rotvecs, t))
    return result[0] if single else result
