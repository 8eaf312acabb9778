"""`stagecraft.image`: image resampling, as JAX's `jax.image` (`resize`,
`scale_and_translate`, `ResizeMethod`).

Resampling is separable: for each spatial dimension of size m resampled to size n, a weight
matrix `W[m, n]` holds the contribution of input pixel j to output pixel i, and the image is
contracted with one such matrix per dimension (one einsum). Pixels are half-centred (pixel
j covers [j, j+1) and has centre j + 0.5). With a scale s and translation t, output pixel i
samples the input at `(i + 0.5 - t) / s - 0.5`; `W[j, i] = k((sample_i - j) / ks)`, where k
is the kernel and ks = max(1/s, 1) with antialiasing (a wider, low-pass kernel when
downsampling), 1 otherwise. Each column is normalized to sum to 1, and output pixels whose
sample falls outside the input are zero.

This is the scheme of TensorFlow's `scale_and_translate` op (tensorflow/core/kernels/image/
scale_and_translate_op.cc). The kernels: the triangle (linear interpolation), Keys' cubic
convolution kernel (R. G. Keys, "Cubic convolution interpolation for digital image
processing", IEEE Trans. ASSP 29(6), 1981; a = -0.5, and a = -0.75 for the OpenCV/PyTorch
variant), Lanczos windowed sinc kernels of radius 3 and 5 (C. E. Duchon, "Lanczos filtering
in one and two dimensions", J. Appl. Meteorology 18, 1979), and the box overlap of area
resampling.
"""
from __future__ import annotations

import enum
import functools
import operator
import string
from typing import Any, Sequence

import numpy as np

from stagecraft import dtypes
from stagecraft import numpy as jnp
from stagecraft.lax.dot import Precision
from stagecraft.numpy.util import promote_dtypes_inexact
from stagecraft.pjit import jit

__all__ = ["ResizeMethod", "resize", "scale_and_translate"]


class ResizeMethod(enum.Enum):
  """An image resampling method (JAX's `jax.image.ResizeMethod`).

  NEAREST: nearest-neighbour sampling (`resize` only).
  LINEAR: linear interpolation (the triangle kernel, radius 1).
  LANCZOS3, LANCZOS5: Lanczos resampling with a windowed sinc of radius 3 or 5.
  CUBIC: cubic interpolation with Keys' kernel, a = -0.5 (radius 2).
  CUBIC_PYTORCH: PyTorch's bicubic: CUBIC with antialiasing; without it, Keys' kernel with
    a = -0.75 and the image's edge pixels repeated outside it.
  AREA: area averaging: each output pixel is the mean of the input it covers (a box filter
    when upsampling, as TensorFlow's).
  """
  NEAREST = 0
  LINEAR = 1
  LANCZOS3 = 2
  LANCZOS5 = 3
  CUBIC = 4
  CUBIC_PYTORCH = 5
  AREA = 6

  @staticmethod
  def from_string(s: str) -> "ResizeMethod":
    """The method named `s`: 'nearest'; 'linear', 'bilinear', 'trilinear' or 'triangle';
    'lanczos3'; 'lanczos5'; 'cubic', 'bicubic' or 'tricubic'; 'cubic-pytorch' or
    'bicubic-pytorch'; 'area'.

    Raises:
      ValueError: `Unknown resize method "s"` for other strings.
    """
    method = _METHOD_NAMES.get(s) if isinstance(s, str) else None
    if method is None:
      raise ValueError(f'Unknown resize method "{s}"')
    return method


_METHOD_NAMES = {
    "nearest": ResizeMethod.NEAREST,
    "linear": ResizeMethod.LINEAR, "bilinear": ResizeMethod.LINEAR,
    "trilinear": ResizeMethod.LINEAR, "triangle": ResizeMethod.LINEAR,
    "lanczos3": ResizeMethod.LANCZOS3, "lanczos5": ResizeMethod.LANCZOS5,
    "cubic": ResizeMethod.CUBIC, "bicubic": ResizeMethod.CUBIC, "tricubic": ResizeMethod.CUBIC,
    "cubic-pytorch": ResizeMethod.CUBIC_PYTORCH, "bicubic-pytorch": ResizeMethod.CUBIC_PYTORCH,
    "area": ResizeMethod.AREA,
}


def _as_method(method: Any) -> ResizeMethod:
  if isinstance(method, ResizeMethod):
    return method
  if isinstance(method, str):
    return ResizeMethod.from_string(method)
  raise TypeError(f"method must be a ResizeMethod or its name (e.g. 'linear'), got "
                  f"{method!r}.")


# ---------------------------------------------------------------------------
# Kernels: functions of the non-negative distance x (in input pixels, divided by the kernel
# scale) from a sample to a pixel centre.


def _triangle_kernel(x):
  return jnp.maximum(0, 1 - jnp.abs(x))


def _keys_cubic_kernel(a: float, x):
  """Keys' piecewise cubic: (a+2)x^3 - (a+3)x^2 + 1 on [0, 1), a x^3 - 5a x^2 + 8a x - 4a on
  [1, 2), 0 beyond (Horner form)."""
  inner = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
  outer = ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
  return jnp.where(x >= 2.0, 0.0, jnp.where(x >= 1.0, outer, inner))


def _lanczos_kernel(radius: float, x):
  """sinc(x) sinc(x / radius) for x <= radius, 0 beyond; 1 near 0 (x <= 1e-3, where the
  quotient loses accuracy)."""
  y = radius * jnp.sin(np.pi * x) * jnp.sin(np.pi * x / radius)
  safe = jnp.where(x != 0, np.pi ** 2 * (x * x), 1)   # NB: no 0/0 in values or gradients
  out = jnp.where(x > 1e-3, jnp.divide(y, safe), 1)
  return jnp.where(x > radius, 0.0, out)


_AREA = "area"   # marks the area method, whose weights are overlaps, not kernel values

# method -> (radius, kernel)
_KERNELS: dict[ResizeMethod, tuple[int, Any]] = {
    ResizeMethod.LINEAR: (1, _triangle_kernel),
    ResizeMethod.LANCZOS3: (3, functools.partial(_lanczos_kernel, 3.0)),
    ResizeMethod.LANCZOS5: (5, functools.partial(_lanczos_kernel, 5.0)),
    ResizeMethod.CUBIC: (2, functools.partial(_keys_cubic_kernel, -0.5)),
    ResizeMethod.CUBIC_PYTORCH: (2, functools.partial(_keys_cubic_kernel, -0.75)),
    ResizeMethod.AREA: (1, _AREA),
}

# Columns whose weights sum to less than this are all zero (as TensorFlow's kernel).
_MIN_TOTAL_WEIGHT = 1000.0 * float(np.finfo(np.float32).eps)


def _normalize_columns(w):
  total = jnp.sum(w, axis=0, keepdims=True)
  safe_total = jnp.where(total != 0, total, 1)
  return jnp.where(jnp.abs(total) > _MIN_TOTAL_WEIGHT, jnp.divide(w, safe_total), 0)


def _weight_matrix(in_size: int, out_size: int, scale, translation, kernel, antialias: bool,
                   edge_padding: bool, radius: int):
  """The resampling weights `W[in_size, out_size]` of one dimension, in the result dtype of
  `scale` and `translation` (Python floats: the default float dtype)."""
  dtype = dtypes.result_type(scale, translation)
  inv_scale = 1.0 / scale
  # Downsampling with antialiasing stretches the kernel by 1/scale: a low-pass filter.
  kernel_scale = jnp.maximum(inv_scale, 1.0) if antialias else 1.0
  out_pos = jnp.arange(out_size, dtype=dtype)
  # The input coordinate (pixel index units) at the centre of each output pixel.
  sample = (out_pos + 0.5) * inv_scale - translation * inv_scale - 0.5
  pad = radius if edge_padding else 0   # edge padding is only used without antialiasing
  in_pos = jnp.arange(-pad, in_size + pad, dtype=dtype)
  if kernel is _AREA:
    # The overlap of output pixel i's footprint [lo_i, lo_i + 1/s) with [j, j + 1).
    lo = out_pos * inv_scale - translation * inv_scale
    hi = lo + inv_scale
    w = jnp.maximum(0.0, jnp.minimum(hi[None, :], in_pos[:, None] + 1.0)
                    - jnp.maximum(lo[None, :], in_pos[:, None]))
  else:
    w = kernel(jnp.abs(sample[None, :] - in_pos[:, None]) / kernel_scale)
  if edge_padding:
    # Pixels beyond the edge repeat the edge pixel: move their weight onto it.
    rows = np.clip(np.arange(-pad, in_size + pad), 0, in_size - 1)
    cols = np.arange(out_size)
    w = jnp.zeros((in_size, out_size), dtype=w.dtype).at[
        rows[:, None], np.broadcast_to(cols[None, :], (rows.shape[0], out_size))].add(w)
    return _normalize_columns(w)
  w = _normalize_columns(w)
  inside = jnp.logical_and(sample >= -0.5, sample <= in_size - 0.5)
  return jnp.where(inside[None, :], w, 0)


def _letters(n: int) -> str:
  return (string.ascii_lowercase + string.ascii_uppercase)[:n]


def _resample(x, out_shape: tuple[int, ...], dims: Sequence[int], scales, translations,
              method: ResizeMethod, antialias: bool, precision):
  """Contracts `x` with one weight matrix per dimension in `dims` (one einsum)."""
  if not dims:
    return x
  radius, kernel = _KERNELS[method]
  edge_padding = method is ResizeMethod.CUBIC_PYTORCH and not antialias
  if x.ndim + len(dims) > 52:
    raise ValueError(f"image has too many dimensions ({x.ndim}) to resample.")
  names = _letters(x.ndim + len(dims))
  in_spec, out_spec = list(names[:x.ndim]), list(names[:x.ndim])
  operands, specs = [x], ["".join(in_spec)]
  for i, d in enumerate(dims):
    w = _weight_matrix(x.shape[d], out_shape[d], scales[i], translations[i], kernel,
                       antialias, edge_padding, radius)
    operands.append(w.astype(x.dtype))
    specs.append(in_spec[d] + names[x.ndim + i])
    out_spec[d] = names[x.ndim + i]
  return jnp.einsum(",".join(specs) + "->" + "".join(out_spec), *operands,
                    precision=precision)


def _check_shape(shape: Any, image) -> tuple[int, ...]:
  try:
    shape = tuple(operator.index(d) for d in shape)
  except TypeError as e:
    raise TypeError(f"shape must be a sequence of static integers, got {shape!r}.") from e
  if any(d < 0 for d in shape):
    raise ValueError(f"shape must not have negative dimensions, got {shape}.")
  if len(shape) != image.ndim:
    raise ValueError(f"shape must have length equal to the number of dimensions of x;  "
                     f"{shape} vs {tuple(image.shape)}")
  return shape


def _canonical_dim(d: Any, ndim: int) -> int:
  d = operator.index(d)
  if not -ndim <= d < ndim:
    raise ValueError(f"spatial dimension {d} is out of bounds for an image with {ndim} "
                     f"dimensions.")
  return d % ndim


def scale_and_translate(image: Any, shape: Sequence[int], spatial_dims: Sequence[int],
                        scale: Any, translation: Any, method: str | ResizeMethod,
                        antialias: bool = True, precision: Any = Precision.HIGHEST):
  """Resamples `image` under a scale and translation of its spatial dimensions.

  An input location x along `spatial_dims[k]` maps to the output location
  `x * scale[k] + translation[k]`; each output pixel is computed at the inverse image of its
  centre (pixels are half-centred: pixel i spans [i, i+1)). Output pixels whose sample lies
  outside the input are 0.

  Args:
    image: array `T[*s]`; integer and bool images are promoted to the default float dtype.
    shape: the output shape `o` (static ints, one per dimension of `image`; dimensions not
      in `spatial_dims` must keep their size).
    spatial_dims: the K dimensions to resample (negative indices count from the end).
    scale: array `S[K]`: the scale of each spatial dimension (may be traced;
      differentiable).
    translation: array `S[K]`: the translation of each, in output pixels (may be traced;
      differentiable).
    method: a `ResizeMethod` other than NEAREST, or its name ('linear', 'cubic',
      'lanczos3', 'lanczos5', 'cubic-pytorch', 'area', ...).
    antialias: widen the kernel by 1/scale when downsampling (a low-pass filter); no effect
      when upsampling.
    precision: the `lax.Precision` of the contractions.

  Returns:
    `T'[*o]` with T' the inexact dtype of `image`; differentiable in `image`, `scale` and
    `translation`.

  Raises:
    ValueError: if `len(shape) != image.ndim`, for NEAREST or an unknown method name, or if
      `spatial_dims`, `scale` and `translation` do not have the same length.
    TypeError: for a `method` that is neither a ResizeMethod nor a string.

  Algorithm: TensorFlow's separable kernel resampling (`ScaleAndTranslate`): one
  normalized weight matrix per spatial dimension (see the module docstring for the
  kernels), contracted with the image in one einsum.

  Examples:
    >>> import stagecraft.numpy as jnp
    >>> scale_and_translate(jnp.array([0., 1., 2., 3.]), (4,), (0,), jnp.array([1.]),
    ...                     jnp.array([0.5]), "linear")
    Array([0. , 0.5, 1.5, 2.5], dtype=float32)
  """
  image = jnp.asarray(image)
  shape = _check_shape(shape, image)
  method = _as_method(method)
  if method is ResizeMethod.NEAREST:
    raise ValueError("Nearest neighbor resampling is not currently supported for "
                     "scale_and_translate.")
  if method is ResizeMethod.CUBIC_PYTORCH and antialias:
    method = ResizeMethod.CUBIC
  dims = tuple(_canonical_dim(d, image.ndim) for d in spatial_dims)
  image, = promote_dtypes_inexact(image)
  scale, translation = promote_dtypes_inexact(scale, translation)
  if jnp.ndim(scale) != 1 or jnp.ndim(translation) != 1 or not (
      len(dims) == jnp.shape(scale)[0] == jnp.shape(translation)[0]):
    raise ValueError(f"scale and translation must be vectors with one entry per spatial "
                     f"dimension: got {len(dims)} spatial_dims, scale of shape "
                     f"{jnp.shape(scale)} and translation of shape {jnp.shape(translation)}.")
  for d in range(image.ndim):
    if d not in dims and shape[d] != image.shape[d]:
      raise ValueError(f"dimension {d} is not in spatial_dims {tuple(spatial_dims)}, so its "
                       f"size must stay {image.shape[d]}; shape asks for {shape[d]}.")
  return _scale_and_translate(image, scale, translation, shape, dims, method, bool(antialias),
                              precision)


@functools.partial(jit, static_argnums=(3, 4, 5, 6, 7))
def _scale_and_translate(image, scale, translation, shape: tuple[int, ...],
                         dims: tuple[int, ...], method: ResizeMethod, antialias: bool,
                         precision):
  return _resample(image, shape, dims, [scale[i] for i in range(len(dims))],
                   [translation[i] for i in range(len(dims))], method, antialias, precision)


def _nearest_indices(in_size: int, out_size: int) -> np.ndarray:
  """The input pixel under each output pixel's centre, floor((i + 0.5) * m / n), computed in
  float32 as JAX does (so ties round the same way)."""
  f32 = np.float32
  pos = (np.arange(out_size, dtype=f32) + f32(0.5)) * f32(in_size) / f32(out_size)
  return np.floor(pos).astype(np.int32)


@functools.partial(jit, static_argnums=(1, 2, 3, 4))
def _resize(image, shape: tuple[int, ...], method: ResizeMethod, antialias: bool, precision):
  dims = tuple(d for d in range(image.ndim) if image.shape[d] != shape[d])
  if method is ResizeMethod.NEAREST:
    for d in dims:
      image = jnp.take(image, _nearest_indices(image.shape[d], shape[d]), axis=d)
    return image
  image, = promote_dtypes_inexact(image)
  if method is ResizeMethod.CUBIC_PYTORCH and antialias:
    method = ResizeMethod.CUBIC
  scales = [1.0 if shape[d] == 0 else shape[d] / image.shape[d] for d in dims]
  return _resample(image, shape, dims, scales, [0.0] * len(dims), method, antialias,
                   precision)


def resize(image: Any, shape: Sequence[int], method: str | ResizeMethod,
           antialias: bool = True, precision: Any = Precision.HIGHEST):
  """Resizes `image` to `shape` (JAX's `jax.image.resize`).

  Every dimension whose size changes is resampled (`resize` does not tell batch or
  channel dimensions apart: keep their size in `shape`), with scale `new / old` and no
  translation, so the image's corners stay at the corners (half-pixel centres, as
  TensorFlow's `resize` and PyTorch's `align_corners=False`).

  Args:
    image: array `T[*s]`.
    shape: the output shape `o`: static ints, one per dimension of `image`.
    method: a `ResizeMethod` or its name: 'nearest'; 'linear'/'bilinear'/'trilinear'/
      'triangle'; 'cubic'/'bicubic'/'tricubic'; 'cubic-pytorch'/'bicubic-pytorch';
      'lanczos3'; 'lanczos5'; 'area'.
    antialias: widen the kernel when downsampling (a low-pass filter); no effect when
      upsampling, nor with 'nearest'.
    precision: the `lax.Precision` of the contractions (ignored by 'nearest').

  Returns:
    `T[*o]` for 'nearest' (any dtype); otherwise the inexact dtype of `image` (integer and
    bool images become the default float dtype). Differentiable in `image`.

  Raises:
    ValueError: if `len(shape) != image.ndim`, or for an unknown method name.
    TypeError: for a non-integer shape, or a `method` that is neither a ResizeMethod nor a
      string.

  Algorithm: 'nearest' takes the input pixel under each output pixel's centre; the other
  methods use the separable kernel resampling of `scale_and_translate` (TensorFlow's
  `ScaleAndTranslate`; Keys 1981 for the cubic kernels, Lanczos windowed sinc kernels).

  Examples:
    >>> import stagecraft.numpy as jnp
    >>> resize(jnp.array([0., 1., 2., 3.]), (2,), "linear", antialias=False)
    Array([0.5, 2.5], dtype=float32)
    >>> resize(jnp.array([[1, 2]]), (1, 4), "nearest")
    Array([[1, 1, 2, 2]], dtype=int32)
  """
  image = jnp.asarray(image)
  shape = _check_shape(shape, image)
  return _resize(image, shape, _as_method(method), bool(antialias), precision)
