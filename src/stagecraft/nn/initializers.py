"""`stagecraft.nn.initializers`: weight initializers, as JAX's `nn.initializers`.

An initializer is a function `init(key, shape, dtype=float32, out_sharding=None) ->
T[*shape]` (`out_sharding`, a NamedSharding or PartitionSpec, lays the result out as JAX's
samplers' `out_sharding` does; `orthogonal` and `delta_orthogonal` take none, raising
NotImplementedError as JAX's do); the functions
below (other than `zeros` and `ones`, which are initializers themselves) build one. For the
same key they return what JAX's return (they draw with `stagecraft.random`, which
reproduces JAX's `random`).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from stagecraft import dtypes, random
from stagecraft import numpy as jnp
from stagecraft.lax.shape import canonicalize_shape

__all__ = ["Initializer", "zeros", "ones", "constant", "uniform", "normal", "truncated_normal",
           "variance_scaling", "glorot_uniform", "glorot_normal", "xavier_uniform",
           "xavier_normal", "lecun_uniform", "lecun_normal", "he_uniform", "he_normal",
           "kaiming_uniform", "kaiming_normal", "orthogonal", "delta_orthogonal"]

#: `init(key, shape, dtype=None, out_sharding=None) -> Array`.
Initializer = Callable[..., Any]


def _dtype(dtype):
  return dtypes.canonicalize_dtype(dtypes.default_float_dtype() if dtype is None else dtype)


def zeros(key: Any, shape: Sequence[int], dtype: Any = None, out_sharding: Any = None):
  """All zeros `T[*shape]` (T default float32), laid out by `out_sharding` as `jnp.zeros`'s;
  `key` is ignored."""
  return jnp.zeros(shape, _dtype(dtype), out_sharding=out_sharding)


def ones(key: Any, shape: Sequence[int], dtype: Any = None, out_sharding: Any = None):
  """All ones `T[*shape]` (T default float32), laid out by `out_sharding` as `jnp.ones`'s;
  `key` is ignored."""
  return jnp.ones(shape, _dtype(dtype), out_sharding=out_sharding)


def constant(value: Any, dtype: Any = None) -> Initializer:
  """An initializer filling with `value`.

  Examples:
    >>> constant(-7)(random.key(42), (2, 3))
    Array([[-7., -7., -7.],
           [-7., -7., -7.]], dtype=float32)
  """
  def init(key, shape, dtype=dtype, out_sharding=None):
    return jnp.full(shape, value, dtype=_dtype(dtype), out_sharding=out_sharding)
  return init


def uniform(scale: Any = 1e-2, dtype: Any = None) -> Initializer:
  """An initializer of uniform values in `[0, scale)`."""
  def init(key, shape, dtype=dtype, out_sharding=None):
    dt = _dtype(dtype)
    return random.uniform(key, shape, dt, out_sharding=out_sharding) * jnp.array(scale, dt)
  return init


def normal(stddev: Any = 1e-2, dtype: Any = None) -> Initializer:
  """An initializer of normal values with mean 0 and standard deviation `stddev`."""
  def init(key, shape, dtype=dtype, out_sharding=None):
    dt = _dtype(dtype)
    return random.normal(key, shape, dt, out_sharding=out_sharding) * jnp.array(stddev, dt)
  return init


def truncated_normal(stddev: Any = 1e-2, dtype: Any = None, lower: Any = -2.0,
                     upper: Any = 2.0) -> Initializer:
  """An initializer of `stddev * truncated_normal(lower, upper)` values (no variance
  correction for the truncation, as JAX)."""
  def init(key, shape, dtype=dtype, out_sharding=None):
    dt = _dtype(dtype)
    return random.truncated_normal(key, lower, upper, shape, dt,
                                   out_sharding=out_sharding) * jnp.array(stddev, dt)
  return init


def _compute_fans(shape, in_axis=-2, out_axis=-1, batch_axis=()):
  """`(fan_in, fan_out)`: the in/out sizes times the receptive field (the other axes)."""
  if isinstance(in_axis, int) and in_axis == -2 and len(shape) <= 1:
    raise ValueError(f"Can't compute input and output sizes of a {len(shape)}-dimensional "
                     f"weights tensor with default in_axis. Must be at least 2D or specify "
                     f"in_axis explicitly.")

  def size(axes):
    return shape[axes] if isinstance(axes, int) else math.prod(shape[i] for i in axes)
  in_size, out_size, batch_size = size(in_axis), size(out_axis), size(batch_axis)
  receptive_field_size = math.prod(shape) / in_size / out_size / batch_size
  return in_size * receptive_field_size, out_size * receptive_field_size


def _complex_uniform(key, shape, dtype):
  key_r, key_theta = random.split(key)
  real = np.array(0, dtype).real.dtype
  r = jnp.sqrt(2 * random.uniform(key_r, shape, real)).astype(dtype)
  theta = 2 * np.pi * random.uniform(key_theta, shape, real).astype(dtype)
  return r * jnp.exp(1j * theta)


def _complex_truncated_normal(key, upper, shape, dtype):
  key_r, key_theta = random.split(key)
  real = np.array(0, dtype).real.dtype
  t = ((1 - jnp.exp(jnp.array(-upper ** 2, dtype)))
       * random.uniform(key_r, shape, real).astype(dtype))
  r = jnp.sqrt(-jnp.log(1 - t))
  theta = 2 * np.pi * random.uniform(key_theta, shape, real).astype(dtype)
  return r * jnp.exp(1j * theta)


def variance_scaling(scale: Any, mode: str, distribution: str,
                     in_axis: int | Sequence[int] = -2, out_axis: int | Sequence[int] = -1,
                     batch_axis: int | Sequence[int] = (), dtype: Any = None) -> Initializer:
  """An initializer whose samples have variance `scale / n` (`JAX's nn.initializers.
  variance_scaling`).

  Args:
    scale: the variance scale (positive).
    mode: what n is: `"fan_in"`, `"fan_out"`, `"fan_avg"` (their mean) or `"fan_geo_avg"`
      (their geometric mean); the fans multiply the in/out axis sizes by the receptive
      field (the axes not in `in_axis`, `out_axis`, `batch_axis`).
    distribution: `"truncated_normal"` (cut at 2 standard deviations, rescaled to keep
      the variance), `"normal"`, or `"uniform"` (a disk for complex dtypes).
    in_axis, out_axis, batch_axis: axes (ints or sequences) of the weight shape.
    dtype: the default dtype.

  Returns:
    `init(key, shape, dtype=dtype, out_sharding=None) -> T[*shape]` (`out_sharding` lays a
    real sample out as the samplers' `out_sharding`; complex samples ignore it, as JAX's);
    it raises ValueError for an unknown mode
    or distribution, or a shape of rank < 2 with the default `in_axis`.

  Examples:
    >>> init = variance_scaling(2.0, "fan_in", "normal")
    >>> init(random.key(0), (64, 32)).shape
    (64, 32)
  """
  def init(key, shape, dtype=dtype, out_sharding=None):
    shape = canonicalize_shape("variance_scaling", "shape", shape)
    dt = _dtype(dtype)
    fan_in, fan_out = _compute_fans(shape, in_axis, out_axis, batch_axis)
    if mode == "fan_in":
      denominator = fan_in
    elif mode == "fan_out":
      denominator = fan_out
    elif mode == "fan_avg":
      denominator = (fan_in + fan_out) / 2
    elif mode == "fan_geo_avg":
      denominator = (fan_in * fan_out) ** 0.5
    else:
      raise ValueError(f"invalid mode for variance scaling initializer: {mode}")
    variance = jnp.array(scale / denominator, dtype=dt)
    if distribution == "truncated_normal":
      if dtypes.is_float(dt):
        # 0.87962566... is the standard deviation of a standard normal cut at +-2.
        stddev = jnp.sqrt(variance) / jnp.array(0.8796256610342398, dt)
        return random.truncated_normal(key, -2, 2, shape, dt,
                                       out_sharding=out_sharding) * stddev
      stddev = jnp.sqrt(variance) / jnp.array(0.9531116438049121, dt)
      return _complex_truncated_normal(key, 2, shape, dt) * stddev
    if distribution == "normal":
      return random.normal(key, shape, dt, out_sharding=out_sharding) * jnp.sqrt(variance)
    if distribution == "uniform":
      if dtypes.is_float(dt):
        return (random.uniform(key, shape, dt, -1, out_sharding=out_sharding)
                * jnp.sqrt(3 * variance))
      return _complex_uniform(key, shape, dt) * jnp.sqrt(variance)
    raise ValueError(f"invalid distribution for variance scaling initializer: {distribution}")
  return init


def _specialize(name: str, scale: float, mode: str, distribution: str, ref: str):
  def builder(in_axis: int | Sequence[int] = -2, out_axis: int | Sequence[int] = -1,
              batch_axis: int | Sequence[int] = (), dtype: Any = None) -> Initializer:
    return variance_scaling(scale, mode, distribution, in_axis=in_axis, out_axis=out_axis,
                            batch_axis=batch_axis, dtype=dtype)
  builder.__name__ = builder.__qualname__ = name
  builder.__doc__ = (f"`variance_scaling({scale}, {mode!r}, {distribution!r})` "
                     f"(`stagecraft.nn.initializers.{name}`; {ref}).")
  return builder


glorot_uniform = _specialize("glorot_uniform", 1.0, "fan_avg", "uniform",
                             "Glorot, Bengio, AISTATS 2010")
glorot_normal = _specialize("glorot_normal", 1.0, "fan_avg", "truncated_normal",
                            "Glorot, Bengio, AISTATS 2010")
lecun_uniform = _specialize("lecun_uniform", 1.0, "fan_in", "uniform",
                            "Klambauer et al., arXiv:1706.02515")
lecun_normal = _specialize("lecun_normal", 1.0, "fan_in", "truncated_normal",
                           "Klambauer et al., arXiv:1706.02515")
he_uniform = _specialize("he_uniform", 2.0, "fan_in", "uniform", "He et al., arXiv:1502.01852")
he_normal = _specialize("he_normal", 2.0, "fan_in", "truncated_normal",
                        "He et al., arXiv:1502.01852")
xavier_uniform = glorot_uniform
xavier_normal = glorot_normal
kaiming_uniform = he_uniform
kaiming_normal = he_normal


def orthogonal(scale: Any = 1.0, column_axis: int = -1, dtype: Any = None) -> Initializer:
  """An initializer of (scaled) orthogonal matrices along `column_axis`, as JAX's
  `nn.initializers.orthogonal`: the array, viewed as a matrix whose columns run along
  `column_axis` and rows over the other axes, has orthonormal rows or columns (whichever are
  fewer), times `scale`.

  Algorithm (Saxe, McClelland, Ganguli, arXiv:1312.6120): the QR factorization `A = QR` of a
  standard-normal matrix `A`, with each column of `Q` multiplied by the sign of `R`'s
  diagonal entry so that `Q` is Haar-distributed (Mezzadri, arXiv:math-ph/0609050).

  The returned `init(key, shape, dtype)` raises `ValueError` for a shape of rank below 2.
  """
  def init(key: Any, shape: Sequence[int], dtype: Any = dtype, out_sharding: Any = None):
    if out_sharding is not None:
      raise NotImplementedError   # as JAX's
    dt = _dtype(dtype)
    shape = canonicalize_shape("orthogonal", "shape", shape)
    if len(shape) < 2:
      raise ValueError(f"orthogonal initializer requires at least a 2D shape, got {shape}")
    if math.prod(shape) == 0:   # as JAX's: a zero-size array has no rows to orthogonalize
      return jnp.zeros(shape, dt)
    n_cols = shape[column_axis]
    n_rows = math.prod(shape) // n_cols
    mshape = (n_cols, n_rows) if n_rows < n_cols else (n_rows, n_cols)
    a = random.normal(key, mshape, dt)
    q, r = jnp.linalg.qr(a)
    q = q * jnp.sign(jnp.diagonal(r))[None, :]
    if n_rows < n_cols:
      q = q.T
    rest = tuple(d for i, d in enumerate(shape) if i != column_axis % len(shape))
    q = jnp.reshape(q, rest + (n_cols,))
    return scale * jnp.moveaxis(q, -1, column_axis)
  return init


def delta_orthogonal(scale: Any = 1.0, column_axis: int = -1, dtype: Any = None) -> Initializer:
  """The delta-orthogonal initializer of convolution kernels, as JAX's
  `nn.initializers.delta_orthogonal`: zero everywhere but the spatial center, which holds an
  `orthogonal(scale, column_axis)` matrix of shape `shape[-2:]` (Xiao et al., "Dynamical
  Isometry and a Mean Field Theory of CNNs", arXiv:1806.05393, Algorithm 2).

  The returned `init(key, shape, dtype)` takes a 3-, 4- or 5-D shape (1-3 spatial axes, then
  input and output features) with `shape[-2] <= shape[-1]`, else raises `ValueError`.
  """
  def init(key: Any, shape: Sequence[int], dtype: Any = dtype, out_sharding: Any = None):
    if out_sharding is not None:
      raise NotImplementedError   # as JAX's
    dt = _dtype(dtype)
    shape = canonicalize_shape("delta_orthogonal", "shape", shape)
    if len(shape) not in (3, 4, 5):
      raise ValueError(f"Delta orthogonal initializer requires a 3D, 4D or 5D shape, got "
                       f"{shape}.")
    if shape[-1] < shape[-2]:
      raise ValueError(f"`fan_in` must be less or equal than `fan_out`, got shape {shape}.")
    ortho = orthogonal(scale=scale, column_axis=column_axis, dtype=dt)(key, shape[-2:])
    center = tuple((k - 1) // 2 for k in shape[:-2])
    return jnp.zeros(shape, dt).at[center].set(ortho)
  return init
