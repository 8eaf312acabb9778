"""Eager jnp ufuncs give JAX's results bit for bit (NaNs as NaNs), for float32, float16,
bfloat16 and complex64 inputs spanning tiny to huge magnitudes, zeros of both signs,
infinities and NaN: users print these numbers, so they must be JAX's, not merely close."""
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import stagecraft.numpy as snp

UNARY = ["sin", "cos", "tan", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh",
         "arcsinh", "arccosh", "arctanh", "exp", "exp2", "expm1", "log", "log2", "log10",
         "log1p", "sqrt", "cbrt", "reciprocal", "square", "abs", "sign", "floor", "ceil",
         "round", "rint", "trunc", "negative", "deg2rad", "rad2deg", "sinc", "i0", "fabs",
         "signbit", "isfinite", "spacing"]
BINARY = ["add", "subtract", "multiply", "divide", "power", "float_power", "arctan2", "hypot",
          "maximum", "minimum", "fmax", "fmin", "logaddexp", "logaddexp2", "floor_divide",
          "remainder", "fmod", "copysign", "nextafter", "heaviside"]
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16,
          "complex64": np.complex64}


def _values(dt) -> np.ndarray:
  rng = np.random.default_rng(0)
  base = np.concatenate(
      [rng.standard_normal(50) * s for s in (1e-3, 1.0, 10.0, 1e3)]
      + [np.array([0., -0., 1., -1., 0.5, np.inf, -np.inf, np.nan, 1e-40, 88.7, -88.7,
                   1e30])])
  with np.errstate(all="ignore"):   # inf * 1j, and 1e30 as float16, on purpose
    if np.issubdtype(dt, np.complexfloating):
      return (base + 1j * rng.permutation(base)).astype(dt)
    return base.astype(dt)


def _differing(got, want) -> np.ndarray:
  got, want = np.asarray(got), np.asarray(want)
  assert (got.shape, got.dtype) == (want.shape, want.dtype)
  if np.iscomplexobj(got):
    got, want = np.stack([got.real, got.imag]), np.stack([want.real, want.imag])
  bits_g = got.view(np.uint8).reshape(got.size, -1)
  bits_w = want.view(np.uint8).reshape(want.size, -1)
  both_nan = np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64))
  return ~((bits_g == bits_w).all(1) | both_nan.ravel())


def _supported(fn, *args):
  try:
    return fn(*args)
  except (TypeError, ValueError, NotImplementedError):
    return None


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_unary_ufuncs_bitwise_as_jax(dtype):
  x = _values(DTYPES[dtype])
  bad = {}
  for name in UNARY:
    want = _supported(getattr(jnp, name), x)
    if want is None:   # not defined for this dtype in JAX (e.g. spacing of complex)
      with pytest.raises((TypeError, ValueError, NotImplementedError)):
        getattr(snp, name)(x)
      continue
    n = int(_differing(getattr(snp, name)(x), want).sum())
    if n:
      bad[name] = n
  assert not bad, f"elements differing from JAX's ({dtype}): {bad}"


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_binary_ufuncs_bitwise_as_jax(dtype):
  x = _values(DTYPES[dtype])
  y = np.random.default_rng(1).permutation(x)
  bad = {}
  for name in BINARY:
    want = _supported(getattr(jnp, name), x, y)
    if want is None:
      with pytest.raises((TypeError, ValueError, NotImplementedError)):
        getattr(snp, name)(x, y)
      continue
    n = int(_differing(getattr(snp, name)(x, y), want).sum())
    if n:
      bad[name] = n
  assert not bad, f"elements differing from JAX's ({dtype}): {bad}"
