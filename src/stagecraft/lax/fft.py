"""The fast Fourier transform primitive `fft` (JAX's `lax.fft`): one `stablehlo.fft` over the
trailing `len(fft_lengths)` dimensions, forward or inverse, complex-to-complex (FFT, IFFT),
real-to-complex (RFFT) or complex-to-real (IRFFT). The inverse transforms are normalized by
1/n as XLA defines them (`numpy.fft`'s default "backward" norm)."""
from __future__ import annotations

import enum
import math
from typing import Any, Sequence

import numpy as np

from stagecraft import core, dtypes, shape_poly
from stagecraft.core import Primitive, ShapedArray
from stagecraft.interpreters import ad, batching, lowering
from stagecraft.interpreters.lowering import i64_array
from stagecraft.lax.elementwise import conj, convert_element_type, mul
from stagecraft.lax.shape import broadcast_in_dim

__all__ = ["FftType", "fft_p", "fft"]


class FftType(enum.IntEnum):
  """Which transform `fft` computes (JAX's names and values)."""
  FFT = 0     # forward, complex to complex
  IFFT = 1    # inverse, complex to complex
  RFFT = 2    # forward, real to complex (the non-negative frequencies: n // 2 + 1)
  IRFFT = 3   # inverse, complex (non-negative frequencies) to real


_complex_of = {dtypes.float32: dtypes.complex64, dtypes.float64: dtypes.complex128}
_real_of = {v: k for k, v in _complex_of.items()}


def _fft_abstract_eval(x: ShapedArray, *, fft_type, fft_lengths):
  """Shapes and dtypes as in JAX (and its messages):
  FFT/IFFT `c[*b, *n] -> c[*b, *n]`; RFFT `f[*b, *n] -> c[*b, *n[:-1], n[-1] // 2 + 1]`;
  IRFFT `c[*b, *n[:-1], m] -> f[*b, *n]`."""
  k = len(fft_lengths)
  if k > x.ndim:
    raise ValueError(f"FFT input shape {x.shape} must have at least as many input "
                     f"dimensions as fft_lengths {fft_lengths}.")
  minor = x.shape[x.ndim - k:]
  if fft_type == FftType.RFFT:
    if x.dtype not in _complex_of:
      raise ValueError(f"RFFT input must be float32 or float64, got {x.dtype}")
    if minor != fft_lengths:
      raise ValueError(f"RFFT input shape {x.shape} minor dimensions must be equal to "
                       f"fft_lengths {fft_lengths}")
    shape = x.shape[:x.ndim - k] + fft_lengths[:-1] + (fft_lengths[-1] // 2 + 1,)
    dtype = _complex_of[x.dtype]
  elif fft_type == FftType.IRFFT:
    if not dtypes.is_complex(x.dtype):
      raise ValueError(f"IRFFT input must be complex64 or complex128, got {x.dtype}")
    if minor[:-1] != fft_lengths[:-1]:
      raise ValueError(f"IRFFT input shape {x.shape} minor dimensions must be equal to all "
                       f"except the last fft_length, got fft_lengths={fft_lengths}")
    shape = x.shape[:x.ndim - k] + fft_lengths
    dtype = _real_of[x.dtype]
  else:
    if not dtypes.is_complex(x.dtype):
      raise ValueError(f"FFT input must be complex64 or complex128, got {x.dtype}")
    if minor != fft_lengths:
      raise ValueError(f"FFT input shape {x.shape} minor dimensions must be equal to "
                       f"fft_lengths {fft_lengths}")
    shape, dtype = x.shape, x.dtype
  return ShapedArray(shape, dtype, x.weak_type)


def _fft_lowering(ctx, x, *, fft_type, fft_lengths):
  return ctx.op("stablehlo.fft", [x],
                attrs=f"fft_type = #stablehlo<fft_type {FftType(fft_type).name}>, "
                      f"fft_length = {i64_array(fft_lengths)}")


def _hermitian_mask(n_freq: int, n: int, ndim: int, dtype) -> np.ndarray:
  """Weights of the non-negative frequencies of a real signal of length `n`: 1 for the DC
  term (and the Nyquist term when `n` is even), 2 for the others, which stand for a
  conjugate pair. Shaped to broadcast along the last of `ndim` axes."""
  mask = np.full((n_freq,), 2.0)
  mask[0] = 1.0
  if n % 2 == 0:
    mask[-1] = 1.0
  return mask.reshape((1,) * (ndim - 1) + (n_freq,)).astype(dtype)


def _scale(x, c: np.ndarray):
  """x * c for a host constant `c` that broadcasts against x (linear in x)."""
  aval = core.get_aval(x)
  if c.shape != aval.shape:
    keep = tuple(i for i, d in enumerate(c.shape) if d != 1)
    c = broadcast_in_dim(c.reshape(tuple(c.shape[i] for i in keep)), aval.shape, keep)
  return mul(x, c)


def _fft_transpose(ct, x, *, fft_type, fft_lengths):
  """JAX's `_fft_transpose_rule`: FFT and IFFT are symmetric (their own transposes); RFFT
  transposes to a scaled IRFFT of the conjugate cotangent with the Hermitian weights divided
  out, IRFFT to the conjugate of a weighted, 1/n-scaled RFFT."""
  n = math.prod(fft_lengths)
  ct_aval = core.get_aval(ct)
  if fft_type == FftType.RFFT:
    w = 1.0 / _hermitian_mask(ct_aval.shape[-1], fft_lengths[-1], ct_aval.ndim, np.float64)
    out = fft_p.bind(_scale(conj(ct), (w * n).astype(ct_aval.dtype)), fft_type=FftType.IRFFT,
                     fft_lengths=fft_lengths)
  elif fft_type == FftType.IRFFT:
    y = fft_p.bind(ct, fft_type=FftType.RFFT, fft_lengths=fft_lengths)
    y_aval = core.get_aval(y)
    w = _hermitian_mask(y_aval.shape[-1], fft_lengths[-1], y_aval.ndim, np.float64) / n
    out = conj(_scale(y, w.astype(y_aval.dtype)))  # JAX's convention for complex gradients
  else:
    out = fft_p.bind(ct, fft_type=fft_type, fft_lengths=fft_lengths)
  out_aval = core.get_aval(out)
  if out_aval.weak_type != x.aval.weak_type:
    out = convert_element_type(out, x.aval.dtype, x.aval.weak_type)
  return [out]


fft_p = Primitive("fft")
fft_p.def_abstract_eval(_fft_abstract_eval)
lowering.register_lowering(fft_p, _fft_lowering)
ad.deflinear_args(fft_p, _fft_transpose)


def _fft_batch_rule(batched_args, batch_dims, *, fft_type, fft_lengths):
  """JAX's `_fft_batching_rule`: the transform is over the trailing dims, so a batch axis
  among the leading ones stays where it is; one among the transformed dims moves to the
  front."""
  (x,), (bdim,) = batched_args, batch_dims
  ndim = core.get_aval(x).ndim
  if bdim >= ndim - len(fft_lengths):
    x, bdim = batching.moveaxis(x, bdim, 0), 0
  return fft_p.bind(x, fft_type=fft_type, fft_lengths=fft_lengths), bdim


batching.primitive_batchers[fft_p] = _fft_batch_rule


def fft(x: Any, fft_type: FftType | str, fft_lengths: Sequence[int]):
  """The FFT of `x` over its trailing `len(fft_lengths)` dimensions (JAX's `lax.fft`).

  Args:
    x: array; converted to complex (FFT, IFFT, IRFFT: complex64 unless it is 64-bit) or to
      floating (RFFT).
    fft_type: an `FftType` or its name ('fft', 'ifft', 'rfft', 'irfft', any case).
    fft_lengths: the transform lengths; equal to the trailing dimensions, except that for
      IRFFT the last trailing dimension holds `fft_lengths[-1] // 2 + 1` frequencies.

  Returns:
    The transform (see `FftType`); the inverse transforms include the 1/n factor. An empty
    `fft_lengths` returns the converted `x`.

  Raises:
    TypeError: for an unknown `fft_type`.
    ValueError: for complex input to RFFT, or shapes that do not match `fft_lengths`.

  Examples:
    >>> import numpy as np
    >>> np.asarray(fft(np.array([1., 0., 0., 0.], np.complex64), "fft", (4,)))
    array([1.+0.j, 1.+0.j, 1.+0.j, 1.+0.j], dtype=complex64)
  """
  if isinstance(fft_type, str):
    try:
      typ = FftType[fft_type.upper()]
    except KeyError:
      raise TypeError(f"Unknown FFT type value '{fft_type}'") from None
  elif isinstance(fft_type, (FftType, int)):
    typ = FftType(fft_type)
  else:
    raise TypeError(f"Unknown FFT type value '{fft_type}'")
  aval = core.get_aval(x)
  if typ == FftType.RFFT:
    if dtypes.is_complex(aval.dtype):
      raise ValueError("only real valued inputs supported for rfft")
    target = aval.dtype if dtypes.is_inexact(aval.dtype) else dtypes.default_float_dtype()
  else:
    target = aval.dtype if dtypes.is_complex(aval.dtype) else (
        dtypes.complex128 if aval.dtype == dtypes.float64 else dtypes.default_complex_dtype())
  target = dtypes.canonicalize_dtype(target)
  if aval.dtype != target:
    x = convert_element_type(x, target)
  if len(fft_lengths) == 0:
    return x
  lengths = tuple(n if shape_poly.is_symbolic_dim(n) else int(n)   # symbolic: export
                  for n in fft_lengths)
  return fft_p.bind(x, fft_type=typ, fft_lengths=lengths)

