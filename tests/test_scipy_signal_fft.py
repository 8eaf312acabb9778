"""`stagecraft.scipy.signal` and `stagecraft.scipy.fft` against SciPy (and JAX 0.10.2 where
JAX's defaults differ from SciPy's): convolution/correlation in every mode and method,
detrending, STFT/ISTFT, Welch and CSD spectra, DCTs; dtypes with x64 off and on; gradients;
errors."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.fft as sfft
from hypothesis import given
from hypothesis import strategies as st
import scipy.signal as ssig

import jax.numpy as jjnp
import jax.scipy.signal as jsig

import stagecraft as sc
from stagecraft.scipy import fft as dcts
from stagecraft.scipy import signal
from stagecraft.test_util import check_grads

MODES = ["full", "same", "valid"]
SHAPES = [((7,), (3,)), ((4,), (6,)), ((5, 6), (2, 3)), ((2, 4), (5, 6)), ((4, 4), (4, 4))]


def _rand(rng, shape, dtype):
  x = rng.normal(size=shape)
  if np.issubdtype(dtype, np.complexfloating):
    x = x + 1j * rng.normal(size=shape)
  return x.astype(dtype)


def close(a, b, dtype=np.float32, tol=None):
  a, b = np.asarray(a), np.asarray(b)
  assert a.shape == b.shape, (a.shape, b.shape)
  if tol is None:
    tol = 1e-10 if np.dtype(dtype) in (np.float64, np.complex128) else 2e-5
  np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1., float(np.abs(b).max(initial=0))))


@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_convolve_correlate_match_scipy(shapes):
  rng = np.random.default_rng(0)
  a, b = _rand(rng, shapes[0], np.float32), _rand(rng, shapes[1], np.float32)
  for mode in MODES:
    out = signal.convolve(a, b, mode)
    assert out.dtype == np.float32
    close(out, ssig.convolve(a, b, mode))
    close(signal.correlate(a, b, mode), ssig.correlate(a, b, mode))
    out = signal.correlate(a, b, mode, method="fft")   # fftconvolve underneath
    assert out.dtype == np.float32
    close(out, ssig.correlate(a, b, mode, method="fft"))
    if len(shapes[0]) == 2:
      close(signal.convolve2d(a, b, mode), ssig.convolve2d(a, b, mode))
      close(signal.correlate2d(a, b, mode), ssig.correlate2d(a, b, mode))


@given(st.integers(1, 9), st.integers(1, 9), st.sampled_from(MODES), st.integers(0, 2**16))
def test_convolve_1d_property(n1, n2, mode, seed):
  rng = np.random.default_rng(seed)
  a, b = _rand(rng, (n1,), np.float32), _rand(rng, (n2,), np.float32)
  close(signal.convolve(a, b, mode, precision="highest"), ssig.convolve(a, b, mode))
  close(signal.fftconvolve(a, b, mode), ssig.fftconvolve(a, b, mode), tol=1e-4)


@pytest.mark.parametrize("dtype", [np.float64, np.complex64, np.complex128])
def test_convolve_dtypes(dtype):
  rng = np.random.default_rng(1)
  a, b = _rand(rng, (5, 6), dtype), _rand(rng, (3, 2), dtype)
  with sc.enable_x64(dtype in (np.float64, np.complex128)):
    for mode in MODES:
      for fn, ref in [(signal.correlate2d, ssig.correlate2d),
                      (signal.fftconvolve, ssig.fftconvolve)]:
        out = fn(a, b, mode)
        assert out.dtype == dtype
        close(out, ref(a, b, mode), dtype)
      close(signal.correlate2d(b, a, mode), ssig.correlate2d(b, a, mode), dtype)


def test_integer_inputs_promote():
  x, y = np.array([1, 2, 3, 2, 1]), np.array([1, 1, 1])
  out = signal.convolve(x, y)
  assert out.dtype == np.float32
  np.testing.assert_array_equal(np.asarray(out), [1., 3., 6., 7., 6., 3., 1.])
  np.testing.assert_array_equal(np.asarray(signal.correlate(x, np.array([1, 3, 2]), "same")),
                                [7., 13., 15., 11., 5.])
  with sc.enable_x64():
    assert signal.fftconvolve(x, y).dtype == np.float64


def test_fftconvolve_axes():
  rng = np.random.default_rng(2)
  a, b = _rand(rng, (3, 10), np.float32), _rand(rng, (3, 4), np.float32)
  for mode in MODES:
    close(signal.fftconvolve(a, b, mode, axes=1), ssig.fftconvolve(a, b, mode, axes=1))
    close(signal.fftconvolve(a.T, b.T, mode, axes=[0]), ssig.fftconvolve(a.T, b.T, mode, axes=[0]))
  with pytest.raises(ValueError, match="mapped axes must have same shape"):
    signal.fftconvolve(a, b[:2], axes=1)


def test_convolution_jit_and_grads():
  rng = np.random.default_rng(3)
  a, b = _rand(rng, (6,), np.float32), _rand(rng, (3,), np.float32)
  f = sc.jit(lambda a, b: signal.convolve(a, b, "same"))
  close(f(a, b), ssig.convolve(a, b, "same"))
  with sc.enable_x64():
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    check_grads(lambda a, b: signal.convolve(a, b, "same"), (a64, b64), order=1)
    check_grads(lambda a, b: signal.fftconvolve(a, b, "valid"), (a64, b64), order=1)
    check_grads(lambda a, b: signal.correlate2d(a, b), (a64.reshape(2, 3), b64[None, :2]), order=1)


def test_convolution_errors():
  x = np.ones(4, np.float32)
  with pytest.raises(ValueError, match="mode must be one of"):
    signal.convolve(x, x, "bad")
  with pytest.raises(ValueError, match="expected 'auto', 'fft', or 'direct'"):
    signal.convolve(x, x, method="spectral")
  with pytest.raises(ValueError, match="same number of dimensions"):
    signal.convolve(x, np.ones((2, 2)))
  with pytest.raises(ValueError, match="smaller than the other in every dimension"):
    signal.convolve(np.ones((2, 5)), np.ones((3, 3)))
  with pytest.raises(ValueError, match="zero-size arrays"):
    signal.convolve(np.ones(0), x)
  with pytest.raises(ValueError, match="should have the same dimensionality"):
    signal.fftconvolve(x, np.ones((2, 2)))
  with pytest.raises(ValueError, match="For 'valid' mode"):
    signal.fftconvolve(np.ones((2, 5)), np.ones((3, 3)), "valid")
  with pytest.raises(NotImplementedError, match="boundary='fill'"):
    signal.convolve2d(np.ones((2, 2)), np.ones((2, 2)), boundary="wrap")
  with pytest.raises(NotImplementedError, match="boundary='fill'"):
    signal.correlate2d(np.ones((2, 2)), np.ones((2, 2)), fillvalue=1)
  with pytest.raises(ValueError, match="only supports 2-dimensional inputs"):
    signal.correlate2d(x, x)


def test_detrend_matches_scipy():
  rng = np.random.default_rng(4)
  x = _rand(rng, (3, 40), np.float32) + np.arange(40, dtype=np.float32)
  close(signal.detrend(x), ssig.detrend(x), tol=1e-4)
  close(signal.detrend(x, type="constant"), ssig.detrend(x, type="constant"), tol=1e-4)
  close(signal.detrend(x, bp=[10, 25]), ssig.detrend(x, bp=[10, 25]), tol=1e-4)
  close(signal.detrend(x.T, axis=0), ssig.detrend(x.T, axis=0), tol=1e-4)
  with sc.enable_x64():
    x64 = x.astype(np.float64)
    out = signal.detrend(x64, bp=5)
    assert out.dtype == np.float64
    close(out, ssig.detrend(x64, bp=5), np.float64, tol=1e-9)
  assert signal.detrend(np.arange(6)).dtype == np.float32
  with pytest.raises(ValueError, match="Trend type must be 'linear' or 'constant'"):
    signal.detrend(x, type="quadratic")
  with pytest.raises(ValueError, match="Breakpoints must be non-negative"):
    signal.detrend(x, bp=[50])
  with pytest.raises(NotImplementedError, match="overwrite_data"):
    signal.detrend(x, overwrite_data=True)


STFT_CASES = [dict(nperseg=16, noverlap=4, nfft=20), dict(nperseg=15, boundary="even"),
              dict(nperseg=16, boundary="odd", padded=False, detrend="linear"),
              dict(nperseg=16, boundary="constant", return_onesided=False),
              dict(nperseg=12, window="hamming", fs=10., boundary=None)]


@pytest.mark.parametrize("kw", STFT_CASES, ids=str)
def test_stft_istft_match_scipy(kw):
  rng = np.random.default_rng(5)
  x = _rand(rng, (2, 50), np.float32)
  for axis, xx in [(-1, x), (0, x.T)]:
    f, t, z = signal.stft(xx, axis=axis, **kw)
    f2, t2, z2 = ssig.stft(xx, axis=axis, **kw)
    assert z.dtype == np.complex64 and f.dtype == t.dtype == np.float32
    close(f, f2)
    close(t, t2)
    close(z, z2, tol=1e-4)
  inv = {k: v for k, v in kw.items() if k in ("nperseg", "noverlap", "nfft", "window", "fs")}
  inv["input_onesided"] = kw.get("return_onesided", True)
  inv["boundary"] = kw.get("boundary", "zeros") is not None
  ti, xi = signal.istft(z, time_axis=-1, freq_axis=0, **inv)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")   # SciPy's NOLA check warns for some of these windows
    ti2, xi2 = ssig.istft(z2, time_axis=-1, freq_axis=0, **inv)
  close(ti, ti2)
  close(xi, xi2, tol=1e-4)


def test_stft_roundtrip_and_x64():
  rng = np.random.default_rng(6)
  with sc.enable_x64():
    x = rng.normal(size=(3, 64))
    f, t, z = signal.stft(x, nperseg=16)
    assert z.dtype == np.complex128 and f.dtype == np.float64
    close(z, ssig.stft(x, nperseg=16)[2], np.float64)
    _, xr = signal.istft(z, nperseg=16)
    close(xr[..., :64], x, np.float64, tol=1e-9)


WELCH_CASES = [dict(nperseg=16, average="median"),
               dict(nperseg=16, scaling="spectrum", nfft=17, return_onesided=False),
               dict(nperseg=10, noverlap=3, detrend="linear"),
               dict(window=np.hanning(8), detrend=False)]


@pytest.mark.parametrize("kw", WELCH_CASES, ids=lambda k: ",".join(sorted(k)))
def test_welch_csd_match_scipy(kw):
  rng = np.random.default_rng(7)
  x, y = _rand(rng, (2, 60), np.float32), _rand(rng, (2, 60), np.float32)
  f, p = signal.welch(x, **kw)
  f2, p2 = ssig.welch(x, **kw)
  assert p.dtype == np.float32
  close(f, f2)
  close(p, p2, tol=1e-4)
  f, p = signal.csd(x, y, **kw)
  assert p.dtype == np.complex64
  close(p, ssig.csd(x, y, **kw)[1], tol=1e-4)
  close(signal.welch(x.T, axis=0, **kw)[1], ssig.welch(x.T, axis=0, **kw)[1], tol=1e-4)


def test_spectral_defaults_and_special_cases_match_jax():
  rng = np.random.default_rng(8)
  x = _rand(rng, (300,), np.float32)
  # JAX's default segment is the whole signal (SciPy's is 256 samples)
  f, p = signal.welch(x)
  fj, pj = jsig.welch(jjnp.asarray(x))
  close(f, fj)
  close(p, pj, tol=1e-4)
  f, t, z = signal.stft(x)   # nperseg=256 by default, as SciPy
  close(z, ssig.stft(x)[2], tol=1e-4)
  y = _rand(rng, (280,), np.float32)   # zero-padded to x's length
  close(signal.csd(x, y, nperseg=32)[1], ssig.csd(x, y, nperseg=32)[1], tol=1e-4)
  f, pxx = signal.csd(x, None, nperseg=32)
  assert pxx.dtype == np.float32   # the auto spectrum of csd(x, None) stays real, as in JAX
  close(pxx, ssig.welch(x, nperseg=32)[1], tol=1e-4)
  with pytest.warns(UserWarning, match="nperseg=400 is greater than input_length=300"):
    assert signal.welch(x, nperseg=400)[0].shape == (151,)
  xc = _rand(rng, (64,), np.complex64)
  with pytest.warns(UserWarning, match="Input data is complex, switching"):
    f, p = signal.welch(xc, nperseg=16)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    close(p, ssig.welch(xc, nperseg=16)[1], tol=1e-4)


def test_detrend_callable_and_jit():
  rng = np.random.default_rng(9)
  x = _rand(rng, (2, 48), np.float32)
  ours = signal.welch(x, nperseg=16, detrend=lambda d: d - d.mean(-1, keepdims=True))[1]
  ref = ssig.welch(x, nperseg=16, detrend=lambda d: d - d.mean(-1, keepdims=True))[1]
  close(ours, ref, tol=1e-4)
  jitted = sc.jit(lambda x: signal.welch(x, nperseg=16)[1])(x)
  close(jitted, ssig.welch(x, nperseg=16)[1], tol=1e-4)


def test_spectral_errors():
  x = np.ones(32, np.float32)
  with pytest.raises(ValueError, match="nperseg must be a positive integer"):
    signal.welch(x, nperseg=0)
  with pytest.raises(ValueError, match="noverlap must be less than nperseg"):
    signal.welch(x, nperseg=8, noverlap=8)
  with pytest.raises(ValueError, match="nfft must be greater than or equal to nperseg"):
    signal.stft(x, nperseg=8, nfft=4)
  with pytest.raises(ValueError, match="Unknown boundary option"):
    signal.stft(x, nperseg=8, boundary="periodic")
  with pytest.raises(ValueError, match="Unknown scaling"):
    signal.welch(x, nperseg=8, scaling="power")
  with pytest.raises(ValueError, match='average must be "median" or "mean"'):
    signal.welch(x, nperseg=8, average="max")
  with pytest.raises(ValueError, match="window must be 1-D"):
    signal.welch(x, window=np.ones((2, 2)))
  with pytest.raises(ValueError, match="different from length of window"):
    signal.welch(x, window=np.ones(8), nperseg=6)
  with pytest.raises(ValueError, match="Input stft must be at least 2d"):
    signal.istft(np.ones(4))
  with pytest.raises(ValueError, match="Must specify differing time and frequency axes"):
    signal.istft(np.ones((4, 4)), time_axis=0, freq_axis=0)
  with pytest.raises(ValueError, match=r"FFT length \(4\) must be longer than nperseg \(8\)"):
    signal.istft(np.ones((5, 4)), nperseg=8, nfft=4)


# ---------------------------------------------------------------------------
# scipy.fft


@pytest.mark.parametrize("shape", [(1,), (6,), (3, 7), (2, 3, 5)], ids=str)
@pytest.mark.parametrize("norm", [None, "ortho"])
def test_dct_idct_match_scipy(shape, norm):
  rng = np.random.default_rng(10)
  x = _rand(rng, shape, np.float32)
  for axis in (-1, 0):
    for n in (None, 3, 9) if len(shape) == 1 else (None,):
      out = dcts.dct(x, n=n, axis=axis, norm=norm)
      assert out.dtype == np.float32
      close(out, sfft.dct(x, n=n, axis=axis, norm=norm), tol=1e-4)
      close(dcts.idct(x, n=n, axis=axis, norm=norm), sfft.idct(x, n=n, axis=axis, norm=norm),
            tol=1e-4)
  close(dcts.dctn(x, norm=norm), sfft.dctn(x, norm=norm), tol=1e-4)
  close(dcts.idctn(x, norm=norm), sfft.idctn(x, norm=norm), tol=1e-4)
  if len(shape) > 1:
    close(dcts.dctn(x, s=[2, 4], norm=norm), sfft.dctn(x, s=[2, 4], norm=norm), tol=1e-4)
    close(dcts.idctn(x, s=[4, 2], axes=[0, -1], norm=norm),
          sfft.idctn(x, s=[4, 2], axes=[0, -1], norm=norm), tol=1e-4)


def test_dct_dtypes_roundtrip_and_grads():
  rng = np.random.default_rng(11)
  xc = _rand(rng, (4, 6), np.complex64)
  out = dcts.dctn(xc, norm="ortho")
  assert out.dtype == np.complex64
  close(out, sfft.dctn(xc, norm="ortho"), tol=1e-4)
  assert dcts.dct(np.arange(6)).dtype == np.float32
  close(dcts.dct(np.arange(6)), sfft.dct(np.arange(6.)), tol=1e-5)
  with sc.enable_x64():
    x = rng.normal(size=(5, 6))
    for norm in ("backward", "ortho"):
      y = dcts.dctn(x, norm=norm)
      assert y.dtype == np.float64
      close(y, sfft.dctn(x, norm=norm), np.float64)
      close(dcts.idctn(y, norm=norm), x, np.float64)
    assert dcts.dct(np.arange(4)).dtype == np.float64
    check_grads(lambda x: dcts.dct(x, norm="ortho"), (x,), order=1)
    check_grads(lambda x: dcts.idctn(x, s=[4, 7]), (x,), order=1)
  f = sc.jit(lambda x: dcts.idct(dcts.dct(x)))
  close(f(x.astype(np.float32)), x, tol=1e-5)


def test_dct_errors():
  x = np.ones(4, np.float32)
  for fn in (dcts.dct, dcts.idct, dcts.dctn, dcts.idctn):
    with pytest.raises(NotImplementedError, match="Only DCT type 2 is implemented"):
      fn(x, type=3)
    with pytest.raises(ValueError, match="norm='forward' is not implemented"):
      fn(x, norm="forward")
  with pytest.raises(ValueError, match="s must have at most x.ndim"):
    dcts.dctn(x, s=[2, 2])
