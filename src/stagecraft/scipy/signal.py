"""`stagecraft.scipy.signal`: JAX's `jax.scipy.signal` (convolution and correlation, direct or
by FFT; detrending; short-time Fourier transforms and Welch spectral estimates), composed from
`stagecraft.lax` and `stagecraft.numpy`."""
from __future__ import annotations

import operator
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from stagecraft import core, dtypes, lax
from stagecraft import numpy as jnp
from stagecraft.numpy import fft as jnp_fft
from stagecraft.numpy import linalg
from stagecraft.numpy.util import canonicalize_axis, check_arraylike, promote_dtypes_inexact
from stagecraft.pjit import jit

__all__ = ["convolve", "convolve2d", "correlate", "correlate2d", "csd", "detrend",
           "fftconvolve", "istft", "stft", "welch"]

_MODES = ("full", "same", "valid")


def _static_int(x: Any, what: str) -> int:
  if isinstance(x, core.Tracer):
    raise core.ConcretizationTypeError(
        f"Abstract tracer value encountered where concrete value is expected: the {what} "
        "must be a static Python integer, not a traced array.")
  return operator.index(x) if not isinstance(x, (float, np.floating)) else int(x)


# ---------------------------------------------------------------------------
# Convolution and correlation


def fftconvolve(in1: Any, in2: Any, mode: str = "full",
                axes: Sequence[int] | int | None = None):
  """N-dimensional convolution computed with FFTs (`scipy.signal.fftconvolve`).

  Args:
    in1: array `T[*s1]`.
    in2: array `T[*s2]` with `in1.ndim == in2.ndim`; integers and bools are promoted to the
      default float dtype, real and complex inputs to their common dtype.
    mode: `"full"` (size `s1 + s2 - 1`), `"same"` (size `s1`, centred) or `"valid"` (size
      `s1 - s2 + 1`, only where the inputs overlap fully; needs one input at least as large
      as the other along every convolved axis, and swaps them if `in2` is the larger).
    axes: the axes to convolve over (default all); along the others the inputs must have
      equal sizes and are treated as a batch.

  Returns:
    The convolution, of the promoted (inexact) dtype; real for real inputs.

  Raises:
    ValueError: for different ranks, an unknown mode, unequal batch axes, or `"valid"` mode
      where neither input is the larger in every dimension.

  Algorithm: the convolution theorem: multiply the zero-padded (`s1 + s2 - 1`) discrete
  Fourier transforms (`rfftn` for real inputs) and transform back, then take the centred
  part the mode asks for (as `scipy.signal.fftconvolve`).
  """
  check_arraylike("fftconvolve", in1, in2)
  in1, in2 = promote_dtypes_inexact(jnp.asarray(in1), jnp.asarray(in2))
  if in1.ndim != in2.ndim:
    raise ValueError("in1 and in2 should have the same dimensionality")
  if mode not in _MODES:
    raise ValueError("mode must be one of ['same', 'full', 'valid']")
  if axes is None:
    conv_axes = tuple(range(in1.ndim))
  else:
    axes_t = (axes,) if isinstance(axes, (int, np.integer)) else tuple(axes)
    conv_axes = tuple(sorted({canonicalize_axis(a, in1.ndim, "fftconvolve") for a in axes_t}))
    mapped = [i for i in range(in1.ndim) if i not in conv_axes]
    if any(in1.shape[i] != in2.shape[i] for i in mapped):
      raise ValueError(f"mapped axes must have same shape; got in1.shape={in1.shape} "
                       f"in2.shape={in2.shape} axes={axes}")
  s1 = [in1.shape[a] for a in conv_axes]
  s2 = [in2.shape[a] for a in conv_axes]
  if mode == "valid":
    bigger = all(a >= b for a, b in zip(s1, s2))
    smaller = all(a <= b for a, b in zip(s1, s2))
    if not (bigger or smaller):
      raise ValueError("For 'valid' mode, One input must be at least as large as the other "
                       "in every dimension.")
    if smaller:
      in1, in2, s1, s2 = in2, in1, s2, s1
  return _fftconvolve_core(in1, in2, mode=mode, conv_axes=conv_axes)


# NB: the library's array code runs as one staged program per static configuration (one
# compilation, rather than one per eager operation).
@partial(jit, static_argnames=("mode", "conv_axes"))
def _fftconvolve_core(in1, in2, *, mode, conv_axes):
  s1 = [in1.shape[a] for a in conv_axes]
  s2 = [in2.shape[a] for a in conv_axes]
  full = [a + b - 1 for a, b in zip(s1, s2)]
  if all(a == 1 or b == 1 for a, b in zip(s1, s2)):
    conv = in1 * in2
  elif dtypes.is_complex(in1.dtype):
    conv = jnp_fft.ifftn(jnp_fft.fftn(in1, full, conv_axes) * jnp_fft.fftn(in2, full, conv_axes),
                         full, conv_axes)
  else:
    conv = jnp_fft.irfftn(jnp_fft.rfftn(in1, full, conv_axes)
                          * jnp_fft.rfftn(in2, full, conv_axes), full, conv_axes)
  if mode == "full":
    out = full
  elif mode == "same":
    out = s1
  else:
    out = [a - b + 1 for a, b in zip(s1, s2)]
  starts = [0] * conv.ndim
  sizes = list(conv.shape)
  for a, f, o in zip(conv_axes, full, out):
    starts[a], sizes[a] = (f - o) // 2, o
  return lax.slice(conv, starts, [s + z for s, z in zip(starts, sizes)])


def _convolve_nd(in1: Any, in2: Any, mode: str, precision: Any):
  """Direct N-d convolution of two same-rank arrays through `lax.conv_general_dilated`."""
  if mode not in _MODES:
    raise ValueError("mode must be one of ['full', 'same', 'valid']")
  in1, in2 = jnp.asarray(in1), jnp.asarray(in2)
  if in1.ndim != in2.ndim:
    raise ValueError("in1 and in2 must have the same number of dimensions")
  if in1.size == 0 or in2.size == 0:
    raise ValueError(f"zero-size arrays not supported in convolutions, got shapes {in1.shape} "
                     f"and {in2.shape}.")
  in1, in2 = promote_dtypes_inexact(in1, in2)
  bigger = all(a >= b for a, b in zip(in1.shape, in2.shape))
  smaller = all(a <= b for a, b in zip(in1.shape, in2.shape))
  if not (bigger or smaller):
    raise ValueError("One input must be smaller than the other in every dimension.")
  n2_orig = in2.shape
  big, kernel = (in2, in1) if smaller else (in1, in2)
  nk = kernel.shape
  # The output index m is the full-convolution index m + nk - 1 - lo; "same" centres on the
  # original in1 as scipy does (first kept full index (n2 - 1) // 2).
  if mode == "valid":
    padding = [(0, 0)] * big.ndim
  elif mode == "full":
    padding = [(k - 1, k - 1) for k in nk]
  else:
    n1 = in1.shape
    padding = []
    for k, b, a1, a2 in zip(nk, big.shape, n1, n2_orig):
      lo = k - 1 - (a2 - 1) // 2
      padding.append((lo, a1 - b + k - 1 - lo))
  if isinstance(precision, list):
    precision = tuple(precision)   # a static (hashable) argument of the staged program
  return _conv_core(big, kernel, padding=tuple(padding), precision=precision)


@partial(jit, static_argnames=("padding", "precision"))
def _conv_core(big, kernel, *, padding, precision):
  out = lax.conv_general_dilated(big[None, None], jnp.flip(kernel)[None, None],
                                 (1,) * big.ndim, padding, precision=precision)
  return out[0, 0]


def convolve(in1: Any, in2: Any, mode: str = "full", method: str = "auto",
             precision: Any = None):
  """N-dimensional convolution (`scipy.signal.convolve`).

  Args:
    in1: array `T[*s1]`.
    in2: array `T[*s2]` of the same rank; one input must be at least as large as the other
      in every dimension. Integers and bools are promoted to the default float dtype.
    mode: `"full"`, `"same"` (the size of `in1`, centred as SciPy) or `"valid"`.
    method: `"auto"` or `"direct"` (`lax.conv_general_dilated`) or `"fft"` (`fftconvolve`).
    precision: the `lax.Precision` of the direct convolution.

  Returns:
    The convolution, of the promoted inexact dtype.

  Raises:
    ValueError: for an unknown mode or method, different ranks, empty inputs, or inputs
      neither of which is the larger in every dimension.

  Algorithm: `lax.conv_general_dilated` with the flipped smaller input as the kernel and
  the padding that selects the requested part of the full convolution.
  """
  if method == "fft":
    return fftconvolve(in1, in2, mode=mode)
  if method in ("direct", "auto"):
    return _convolve_nd(in1, in2, mode, precision)
  raise ValueError(f"Got method={method!r}; expected 'auto', 'fft', or 'direct'.")


def convolve2d(in1: Any, in2: Any, mode: str = "full", boundary: str = "fill",
               fillvalue: float = 0, precision: Any = None):
  """2-D convolution (`scipy.signal.convolve2d`); see `convolve`.

  Raises:
    NotImplementedError: unless `boundary="fill"` and `fillvalue=0` (as JAX).
    ValueError: if an input is not 2-D, or as `convolve`.
  """
  if boundary != "fill" or fillvalue != 0:
    raise NotImplementedError("convolve2d() only supports boundary='fill', fillvalue=0")
  if np.ndim(in1) != 2 or np.ndim(in2) != 2:
    raise ValueError("convolve2d() only supports 2-dimensional inputs.")
  return _convolve_nd(in1, in2, mode, precision)


def correlate(in1: Any, in2: Any, mode: str = "full", method: str = "auto",
              precision: Any = None):
  """N-dimensional cross-correlation (`scipy.signal.correlate`):
  `z[k] = sum_n in1[n + k] * conj(in2[n])`, i.e. the convolution of `in1` with the flipped
  conjugate of `in2`. Arguments, results and errors as `convolve`."""
  check_arraylike("correlate", in1, in2)
  in2 = jnp.asarray(in2)
  return convolve(in1, jnp.flip(jnp.conj(in2)), mode, method=method, precision=precision)


def correlate2d(in1: Any, in2: Any, mode: str = "full", boundary: str = "fill",
                fillvalue: float = 0, precision: Any = None):
  """2-D cross-correlation (`scipy.signal.correlate2d`), with SciPy's conventions: in
  `"valid"` mode a larger `in2` gives the correlation of `in2` with `in1`, reversed.

  Raises:
    NotImplementedError: unless `boundary="fill"` and `fillvalue=0` (as JAX).
    ValueError: if an input is not 2-D, or as `convolve`.
  """
  if boundary != "fill" or fillvalue != 0:
    raise NotImplementedError("correlate2d() only supports boundary='fill', fillvalue=0")
  if np.ndim(in1) != 2 or np.ndim(in2) != 2:
    raise ValueError("correlate2d() only supports 2-dimensional inputs.")
  in1, in2 = jnp.asarray(in1), jnp.asarray(in2)
  in2_larger = all(a <= b for a, b in zip(in1.shape, in2.shape)) and in1.shape != in2.shape
  if mode == "valid" and in2_larger:
    return _convolve_nd(jnp.flip(in2), jnp.conj(in1), mode, precision)
  # flip(flip(a) * b) is the correlation a (*) b, centred on a as scipy's correlate2d.
  return jnp.flip(_convolve_nd(jnp.flip(in1), jnp.conj(in2), mode, precision))


# ---------------------------------------------------------------------------
# Detrending


def detrend(data: Any, axis: int = -1, type: str = "linear",
            bp: int | Sequence[int] | np.ndarray = 0, overwrite_data: None = None):
  """Removes a linear (or piecewise linear) or constant trend along `axis`
  (`scipy.signal.detrend`).

  Args:
    data: array `T[*s]`; integers are promoted to the default float dtype.
    axis: the axis to detrend along.
    type: `"linear"` (least-squares line, piecewise between the breakpoints `bp`) or
      `"constant"` (the mean).
    bp: static breakpoints (indices along `axis`) for `"linear"`.
    overwrite_data: unsupported; must be None.

  Returns:
    `data` minus its trend, of the promoted inexact dtype and shape `s`.

  Raises:
    NotImplementedError: if `overwrite_data` is given.
    ValueError: for an unknown type or breakpoints outside `[0, s[axis]]`.

  Algorithm: per segment, the least-squares fit of `a + b t` (`jnp.linalg.lstsq`), as
  SciPy's `detrend`.
  """
  if overwrite_data is not None:
    raise NotImplementedError("overwrite_data argument not implemented.")
  if type not in ("constant", "linear"):
    raise ValueError("Trend type must be 'linear' or 'constant'.")
  x, = promote_dtypes_inexact(jnp.asarray(data))
  if type == "constant":
    return x - x.mean(axis, keepdims=True)
  n = x.shape[axis]
  bps = np.sort(np.unique(np.r_[0, bp, n]))
  if bps[0] < 0 or bps[-1] > n:
    raise ValueError("Breakpoints must be non-negative and less than length of data along "
                     "given axis.")
  axis = canonicalize_axis(axis, x.ndim, "detrend")
  return _detrend_linear(x, axis=axis, bps=tuple(int(b) for b in bps))


@partial(jit, static_argnames=("axis", "bps"))
def _detrend_linear(x, *, axis, bps):
  n = x.shape[axis]
  x = jnp.moveaxis(x, axis, 0)
  shape = x.shape
  x = x.reshape(n, -1)
  pieces = []
  for lo, hi in zip(bps[:-1], bps[1:]):
    m = hi - lo
    if m == 0:
      continue
    seg = x[lo:hi]
    t = jnp.arange(1, m + 1, dtype=x.dtype) / np.asarray(m, x.dtype)
    A = jnp.stack([jnp.ones(m, x.dtype), t], axis=1)
    coef = linalg.lstsq(A, seg)[0]
    pieces.append(seg - jnp.matmul(A, coef, precision=lax.Precision.HIGHEST))
  x = jnp.concatenate(pieces, axis=0) if pieces else x
  return jnp.moveaxis(x.reshape(shape), 0, axis)


# ---------------------------------------------------------------------------
# Windowed FFTs


def _named_window(window: Any, n: int, dtype: Any) -> np.ndarray:
  """The window `window` (a SciPy window name or tuple) of length n, as a NumPy array;
  `"hann"` is the periodic Hann window `sin(pi k / n)^2` (SciPy's `get_window`)."""
  if isinstance(window, str) and window == "hann":
    win = np.ones(1) if n == 1 else np.sin(np.linspace(0, np.pi, n, endpoint=False)) ** 2
  else:
    try:
      from scipy.signal import get_window  # optional, as in JAX: the other named windows
    except ImportError as err:
      raise ImportError(f"scipy must be available to use window={window!r}") from err
    win = get_window(window, n)
  return np.asarray(win).astype(dtypes.canonicalize_dtype(dtype))


def _window_and_nperseg(window: Any, nperseg: int | None, input_length: int, dtype: Any):
  """The window array and segment length from `window` and `nperseg` (SciPy's rules, with
  JAX's default: a named window without `nperseg` spans the whole input)."""
  if isinstance(window, (str, tuple)):
    n = input_length if nperseg is None else int(nperseg)
    if n > input_length:
      warnings.warn(f"nperseg={n} is greater than input_length={input_length}, using "
                    f"nperseg={input_length}")
      n = input_length
    return _named_window(window, n, dtype), n
  win = jnp.asarray(window, dtype=dtype)
  n = win.size if nperseg is None else int(nperseg)
  if win.ndim != 1:
    raise ValueError("window must be 1-D")
  if input_length < win.size:
    raise ValueError("window is longer than input signal")
  if n != win.size:
    raise ValueError("value specified for nperseg is different from length of window")
  return win, n


def _odd_ext(x: Any, n: int):
  """`x` extended by n points at both ends of its last axis by odd (point) reflection."""
  if n < 1:
    return x
  if n > x.shape[-1] - 1:
    raise ValueError(f"The extension length n ({n}) is too big. It must not exceed "
                     f"x.shape[axis]-1, which is {x.shape[-1] - 1}.")
  first, last = x[..., :1], x[..., -1:]
  left = jnp.flip(x[..., 1:n + 1], axis=-1)
  right = jnp.flip(x[..., -(n + 1):-1], axis=-1)
  return jnp.concatenate([2 * first - left, x, 2 * last - right], axis=-1)


def _extend(x: Any, boundary: str, n: int):
  width = [(0, 0)] * (x.ndim - 1) + [(n, n)]
  if boundary == "even":
    return jnp.pad(x, width, "reflect")
  if boundary == "odd":
    return _odd_ext(x, n)
  if boundary == "constant":
    return jnp.pad(x, width, "edge")
  return jnp.pad(x, width, "constant", constant_values=0)


_BOUNDARIES = ("even", "odd", "constant", "zeros", None)


def _segments(x: Any, nperseg: int, step: int):
  """`x[..., L]` cut into overlapping segments `[..., nseg, nperseg]` starting every `step`."""
  starts = np.arange(0, x.shape[-1] - nperseg + 1, step)
  idx = starts[:, None] + np.arange(nperseg)[None, :]
  return x[..., idx]


def _windowed_fft(x: Any, win: Any, detrend_func: Callable, nperseg: int, noverlap: int,
                  nfft: int, twosided: bool):
  if dtypes.is_integer(x.dtype):
    x = x.astype(win.dtype)
  seg = detrend_func(_segments(x, nperseg, nperseg - noverlap))
  if dtypes.is_complex(win.dtype):
    seg = seg.astype(win.dtype)
  seg = win.reshape((1,) * (seg.ndim - 1) + win.shape) * seg   # ranks equal ('raise')
  return jnp_fft.fft(seg, n=nfft) if twosided else jnp_fft.rfft(jnp.real(seg), n=nfft)


def _complex_dtype(dt: Any):
  return np.dtype(np.result_type(dt, np.complex64))


def _spectral_helper(x: Any, y: Any, fs: Any = 1.0, window: Any = "hann",
                     nperseg: int | None = None, noverlap: int | None = None,
                     nfft: int | None = None, detrend_type: Any = "constant",
                     return_onesided: bool = True, scaling: str = "density", axis: int = -1,
                     mode: str = "psd", boundary: str | None = None, padded: bool = False):
  """SciPy's `_spectral_helper`: frequencies, segment times and the windowed FFTs of `x`
  (`mode="stft"`) or their (cross) periodograms (`mode="psd"`, `y` None for auto spectra).
  Checks the arguments and settles the static ones, then runs `_spectral_core`."""
  if mode not in ("psd", "stft"):
    raise ValueError(f"Unknown value for mode {mode}, must be one of: ('psd', 'stft')")
  if boundary not in _BOUNDARIES:
    raise ValueError(f"Unknown boundary option '{boundary}', must be one of: "
                     f"{list(_BOUNDARIES)}")
  axis = _static_int(axis, "axis of windowed-FFT")
  if y is None:
    check_arraylike("spectral_helper", x)
    x, = promote_dtypes_inexact(jnp.asarray(x))
    axis = canonicalize_axis(axis, x.ndim, "spectral_helper")
    outershape = tuple(d for i, d in enumerate(x.shape) if i != axis)
  else:
    if mode != "psd":
      raise ValueError("two-argument mode is available only when mode=='psd'")
    check_arraylike("spectral_helper", x, y)
    x, y = promote_dtypes_inexact(jnp.asarray(x), jnp.asarray(y))
    if x.ndim != y.ndim:
      raise ValueError(f"two-arguments must have the same rank ({x.ndim} vs {y.ndim}).")
    axis = canonicalize_axis(axis, x.ndim, "spectral_helper")
    try:
      outershape = np.broadcast_shapes(
          tuple(d for i, d in enumerate(x.shape) if i != axis),
          tuple(d for i, d in enumerate(y.shape) if i != axis))
    except ValueError as err:
      raise ValueError("x and y cannot be broadcast together.") from err
  result_dtype = _complex_dtype(x.dtype)
  freq_dtype = np.dtype(np.finfo(result_dtype).dtype)
  if nperseg is not None:
    nperseg = _static_int(nperseg, "nperseg of windowed-FFT")
    if nperseg < 1:
      raise ValueError("nperseg must be a positive integer")
  win, nperseg = _window_and_nperseg(window, nperseg, x.shape[axis], x.dtype)
  noverlap = nperseg // 2 if noverlap is None else _static_int(noverlap,
                                                               "noverlap of windowed-FFT")
  nfft = nperseg if nfft is None else _static_int(nfft, "nfft of windowed-FFT")

  if y is None and x.size == 0:
    z = jnp.zeros(x.shape, freq_dtype)
    return z, z, jnp.zeros(x.shape, result_dtype)
  if y is not None and (x.size == 0 or y.size == 0):
    shape = list(outershape)
    shape.insert(axis, min(x.shape[axis], y.shape[axis]))
    z = jnp.zeros(shape, freq_dtype)
    return z, z, jnp.zeros(shape, result_dtype)
  if nfft < nperseg:
    raise ValueError("nfft must be greater than or equal to nperseg.")
  if noverlap >= nperseg:
    raise ValueError("noverlap must be less than nperseg.")
  if not (isinstance(detrend_type, str) or callable(detrend_type) or not detrend_type):
    raise ValueError(f"Unsupported detrend type: {detrend_type}")
  if scaling not in ("density", "spectrum"):
    raise ValueError(f"Unknown scaling: {scaling}")
  twosided = not return_onesided
  if return_onesided and (dtypes.is_complex(x.dtype)
                          or (y is not None and dtypes.is_complex(y.dtype))):
    twosided = True
    warnings.warn("Input data is complex, switching to return_onesided=False")
  return _spectral_core(
      x, y, win, fs, axis=axis, last_axis=axis == len(outershape), nperseg=nperseg,
      noverlap=noverlap, nfft=nfft, detrend_type=detrend_type or False, twosided=twosided,
      scaling=scaling, mode=mode, boundary=boundary, padded=padded)


@partial(jit, static_argnames=("axis", "last_axis", "nperseg", "noverlap", "nfft",
                               "detrend_type", "twosided", "scaling", "mode", "boundary",
                               "padded"))
def _spectral_core(x, y, win, fs, *, axis, last_axis, nperseg, noverlap, nfft, detrend_type,
                   twosided, scaling, mode, boundary, padded):
  result_dtype = _complex_dtype(x.dtype)
  freq_dtype = np.dtype(np.finfo(result_dtype).dtype)
  x = jnp.moveaxis(x, axis, -1)
  if y is not None and y.ndim > 1:
    y = jnp.moveaxis(y, axis, -1)
  if y is not None and x.shape[-1] != y.shape[-1]:
    n = max(x.shape[-1], y.shape[-1])
    x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, n - x.shape[-1])])
    y = jnp.pad(y, [(0, 0)] * (y.ndim - 1) + [(0, n - y.shape[-1])])
  nstep = nperseg - noverlap
  if boundary is not None:
    x = _extend(x, boundary, nperseg // 2)
    if y is not None:
      y = _extend(y, boundary, nperseg // 2)
  if padded:
    nadd = (-(x.shape[-1] - nperseg) % nstep) % nperseg
    x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, nadd)])
    if y is not None:
      y = jnp.pad(y, [(0, 0)] * (y.ndim - 1) + [(0, nadd)])

  if isinstance(detrend_type, str):
    detrend_func = lambda d: detrend(d, type=detrend_type, axis=-1)
  elif callable(detrend_type) and not last_axis:
    # as SciPy: the callable sees the segments along the caller's axis
    def detrend_func(d):
      return jnp.moveaxis(detrend_type(jnp.moveaxis(d, -1, axis)), axis, -1)
  elif callable(detrend_type):
    detrend_func = detrend_type
  else:
    detrend_func = lambda d: d

  if scaling == "density":
    scale = 1.0 / (fs * (win * win).sum())
  else:
    scale = 1.0 / win.sum() ** 2
  if mode == "stft":
    scale = jnp.sqrt(scale)
  if twosided:
    freqs = jnp_fft.fftfreq(nfft, 1 / fs, dtype=freq_dtype)
  else:
    freqs = jnp_fft.rfftfreq(nfft, 1 / fs, dtype=freq_dtype)

  result = _windowed_fft(x, win, detrend_func, nperseg, noverlap, nfft, twosided)
  if y is not None:
    result = jnp.conj(result) * _windowed_fft(y, win, detrend_func, nperseg, noverlap, nfft,
                                              twosided)
  elif mode == "psd":
    result = jnp.conj(result) * result
  result = result * jnp.asarray(scale).astype(result_dtype)
  if not twosided and mode == "psd":
    end = result.shape[-1] if nfft % 2 else result.shape[-1] - 1
    result = result.at[..., 1:end].multiply(2)
  time = jnp.arange(nperseg / 2, x.shape[-1] - nperseg / 2 + 1, nstep,
                    dtype=freq_dtype) / fs
  if boundary is not None:
    time = time - (nperseg / 2) / fs
  result = result.astype(result_dtype)
  if y is None and mode != "stft":
    result = jnp.real(result)
  return freqs, time, jnp.moveaxis(result, -1, axis)


def stft(x: Any, fs: Any = 1.0, window: Any = "hann", nperseg: int = 256,
         noverlap: int | None = None, nfft: int | None = None, detrend: Any = False,
         return_onesided: bool = True, boundary: str | None = "zeros", padded: bool = True,
         axis: int = -1):
  """Short-time Fourier transform (`scipy.signal.stft`).

  Args:
    x: the signal `T[..., L, ...]` (time along `axis`); integers become the default float.
    fs: the sampling frequency.
    window: `"hann"`, another SciPy window name or tuple (needs SciPy), or a 1-D array.
    nperseg: the segment length (at most the signal length; a longer one warns and is cut).
    noverlap: the overlap of segments (default `nperseg // 2`).
    nfft: the FFT length (default `nperseg`; zero-pads the segments if longer).
    detrend: False, `"constant"`, `"linear"` or a callable on segments.
    return_onesided: one-sided spectrum for real input (complex input is two-sided, with a
      warning).
    boundary: extension of the signal at both ends: `"zeros"`, `"even"`, `"odd"`,
      `"constant"` or None.
    padded: zero-pad the end to a whole number of segments.
    axis: the time axis.

  Returns:
    `(f, t, Zxx)`: frequencies `R[F]`, segment times `R[N]` and the STFT, complex, with the
    frequency axis at `axis` and the segment axis last. R is the real dtype of `x`.

  Raises:
    ValueError: for invalid segment/overlap/FFT lengths, windows or options.

  Algorithm: SciPy's windowed-FFT helper; the segments are scaled by `1 / sum(window)`.
  """
  return _spectral_helper(x, None, fs, window, nperseg, noverlap, nfft, detrend,
                          return_onesided, scaling="spectrum", axis=axis, mode="stft",
                          boundary=boundary, padded=padded)


def _median_bias(n: int, dtype: Any):
  """The bias of the median of n periodograms relative to their mean (Allen et al.,
  "FINDCHIRP", Phys. Rev. D 85 (2012), appendix B)."""
  k = np.arange(2., n, 2)
  return np.asarray(1 + np.sum(1. / (k + 1) - 1. / k), dtype)


def csd(x: Any, y: Any, fs: Any = 1.0, window: Any = "hann", nperseg: int | None = None,
        noverlap: int | None = None, nfft: int | None = None, detrend: Any = "constant",
        return_onesided: bool = True, scaling: str = "density", axis: int = -1,
        average: str = "mean"):
  """Cross power spectral density by Welch's method (`scipy.signal.csd`).

  Args:
    x, y: the signals (time along `axis`; their other axes broadcast). `y=None` computes the
      power spectral density of `x` (as `welch`, but with a complex result dtype).
    fs, window, nperseg, noverlap, nfft, detrend, return_onesided, axis: as `stft`, except
      that without `nperseg` a named window spans the whole signal (JAX's default) and the
      default detrending is `"constant"`.
    scaling: `"density"` (V**2/Hz) or `"spectrum"` (V**2).
    average: `"mean"` or `"median"` (bias-corrected) over the segments.

  Returns:
    `(f, Pxy)`: frequencies `R[F]` and the spectral density, complex (real for `y=None`),
    with the frequency axis at `axis`.

  Raises:
    ValueError: for an unknown `average`, or as `stft`.

  Algorithm: Welch (1967): average the modified periodograms `conj(X_k) Y_k` of windowed,
  overlapping segments; one-sided spectra double all but the DC (and Nyquist) bins.
  """
  freqs, _, pxy = _spectral_helper(x, y, fs, window, nperseg, noverlap, nfft, detrend,
                                   return_onesided, scaling, axis, mode="psd")
  if y is not None:
    pxy = pxy + 0j
  if pxy.ndim >= 2 and pxy.size > 0:
    if pxy.shape[-1] > 1:
      if average == "median":
        bias = _median_bias(pxy.shape[-1], np.finfo(pxy.dtype).dtype)
        if dtypes.is_complex(pxy.dtype):
          pxy = jnp.median(jnp.real(pxy), axis=-1) + 1j * jnp.median(jnp.imag(pxy), axis=-1)
        else:
          pxy = jnp.median(pxy, axis=-1)
        pxy = pxy / bias
      elif average == "mean":
        pxy = pxy.mean(axis=-1)
      else:
        raise ValueError(f'average must be "median" or "mean", got {average}')
    else:
      pxy = jnp.reshape(pxy, pxy.shape[:-1])
  return freqs, pxy


def welch(x: Any, fs: Any = 1.0, window: Any = "hann", nperseg: int | None = None,
          noverlap: int | None = None, nfft: int | None = None, detrend: Any = "constant",
          return_onesided: bool = True, scaling: str = "density", axis: int = -1,
          average: str = "mean"):
  """Power spectral density by Welch's method (`scipy.signal.welch`): `csd(x, None, ...)`
  with a real result. Arguments, results, errors and algorithm as `csd`."""
  freqs, pxx = csd(x, None, fs=fs, window=window, nperseg=nperseg, noverlap=noverlap,
                   nfft=nfft, detrend=detrend, return_onesided=return_onesided,
                   scaling=scaling, axis=axis, average=average)
  return freqs, jnp.real(pxx)


def _overlap_add(frames: Any, step: int):
  """Sums `frames[..., nframes, L]` placed every `step` samples: `[..., step (n-1) + L]`."""
  *batch, nframes, length = frames.shape
  out_len = step * (nframes - 1) + length
  idx = (np.arange(nframes)[:, None] * step + np.arange(length)[None, :]).reshape(-1)
  flat = frames.reshape(*batch, nframes * length)
  return jnp.zeros((*batch, out_len), frames.dtype).at[..., idx].add(flat)


def istft(Zxx: Any, fs: Any = 1.0, window: Any = "hann", nperseg: int | None = None,
          noverlap: int | None = None, nfft: int | None = None, input_onesided: bool = True,
          boundary: bool = True, time_axis: int = -1, freq_axis: int = -2):
  """Inverse short-time Fourier transform (`scipy.signal.istft`).

  Args:
    Zxx: the STFT, at least 2-D, with frequencies along `freq_axis` and segments along
      `time_axis`; converted to complex.
    fs, window: as `stft`.
    nperseg: the segment length (default `2 (F - 1)` one-sided, `F` two-sided).
    noverlap: default `nperseg // 2`.
    nfft: the FFT length (default from `Zxx`; odd `nperseg` one-sided gives `nperseg`).
    input_onesided: whether `Zxx` is a one-sided spectrum.
    boundary: whether `stft` extended the signal (the extension is then removed).
    time_axis, freq_axis: the axes of `Zxx`.

  Returns:
    `(t, x)`: times `R[len]` (`arange(x.shape[0]) / fs`, as SciPy) and the signal, real for
    one-sided input, with the time axis where `time_axis` was.

  Raises:
    ValueError: for inputs of rank < 2, equal axes, or invalid lengths or windows.

  Algorithm: inverse FFT of each segment, weighted overlap-add, division by the summed
  squared window (Griffin & Lim, 1984), as SciPy.
  """
  Zxx = jnp.asarray(Zxx)
  if Zxx.ndim < 2:
    raise ValueError("Input stft must be at least 2d!")
  freq_axis = canonicalize_axis(freq_axis, Zxx.ndim, "istft")
  time_axis = canonicalize_axis(time_axis, Zxx.ndim, "istft")
  if freq_axis == time_axis:
    raise ValueError("Must specify differing time and frequency axes!")
  Zxx = Zxx.astype(_complex_dtype(Zxx.dtype))
  n_default = 2 * (Zxx.shape[freq_axis] - 1) if input_onesided else Zxx.shape[freq_axis]
  nperseg = _static_int(nperseg or n_default, "nperseg: segment length of STFT")
  if nperseg < 1:
    raise ValueError("nperseg must be a positive integer")
  if nfft is None:
    nfft = n_default + 1 if input_onesided and nperseg == n_default + 1 else n_default
  else:
    nfft = _static_int(nfft, "nfft of STFT")
  if nfft < nperseg:
    raise ValueError(f"FFT length ({nfft}) must be longer than nperseg ({nperseg}).")
  noverlap = _static_int(noverlap or nperseg // 2, "noverlap of STFT")
  if noverlap >= nperseg:
    raise ValueError("noverlap must be less than nperseg.")
  if isinstance(window, (str, tuple)):
    win = _named_window(window, nperseg, np.finfo(Zxx.dtype).dtype)
  else:
    win = jnp.asarray(window)
    if win.ndim != 1:
      raise ValueError("window must be 1-D")
    if win.shape[0] != nperseg:
      raise ValueError(f"window must have length of {nperseg}")
  return _istft_core(Zxx, win, fs, nperseg=nperseg, nstep=nperseg - noverlap, nfft=nfft,
                     input_onesided=bool(input_onesided), boundary=bool(boundary),
                     time_axis=time_axis, freq_axis=freq_axis)


@partial(jit, static_argnames=("nperseg", "nstep", "nfft", "input_onesided", "boundary",
                               "time_axis", "freq_axis"))
def _istft_core(Zxx, win, fs, *, nperseg, nstep, nfft, input_onesided, boundary, time_axis,
                freq_axis):
  if time_axis != Zxx.ndim - 1 or freq_axis != Zxx.ndim - 2:
    outer = tuple(i for i in range(Zxx.ndim) if i not in (time_axis, freq_axis))
    Zxx = jnp.transpose(Zxx, outer + (freq_axis, time_axis))
  ifunc = jnp_fft.irfft if input_onesided else jnp_fft.ifft
  xsubs = ifunc(Zxx, axis=-2, n=nfft)[..., :nperseg, :]
  if dtypes.is_complex(xsubs.dtype) and not dtypes.is_complex(win.dtype):
    win = win.astype(_complex_dtype(win.dtype))   # strict dtype promotion: complex with complex
  xsubs = xsubs * win.sum()   # undoes stft's 'spectrum' scaling
  # NB: win at xsubs' rank, so rank promotion 'raise' holds
  x = _overlap_add(jnp.swapaxes(xsubs * win.reshape((1,) * (xsubs.ndim - 2) + (-1, 1)), -2, -1),
                   nstep)
  nseg = xsubs.shape[-1]
  norm = _overlap_add(jnp.broadcast_to((win * win)[None, :], (nseg, nperseg)), nstep)
  if boundary:
    half = nperseg // 2
    x = x[..., half:x.shape[-1] - half]
    norm = norm[..., half:norm.shape[-1] - half]
  big = (jnp.real(norm) if dtypes.is_complex(norm.dtype) else norm) > 1e-10
  denom = jnp.where(big, norm, jnp.ones_like(norm))
  x = x / denom.reshape((1,) * (x.ndim - denom.ndim) + denom.shape)   # ranks equal ('raise')
  if x.ndim > 1 and time_axis != Zxx.ndim - 1:
    if freq_axis < time_axis:
      time_axis -= 1
    x = jnp.moveaxis(x, -1, time_axis)
  time = jnp.arange(x.shape[0], dtype=np.finfo(x.dtype).dtype) / fs
  return time, x
