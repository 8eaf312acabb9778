"""stagecraft.image (resize, scale_and_translate, ResizeMethod) against JAX's jax.image (the
oracle), an independent NumPy linear interpolation, and finite differences."""
import jax
import jax.image as jimage
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import image
from stagecraft.image import ResizeMethod
from stagecraft.test_util import check_grads

METHODS = ["nearest", "linear", "cubic", "lanczos3", "lanczos5", "cubic-pytorch", "area"]
RNG = np.random.default_rng(0)
X = RNG.standard_normal((5, 7, 2)).astype(np.float32)

# JAX's scale_and_translate runs op by op unless jitted: jit the oracle (much faster).
_jax_sat = jax.jit(jimage.scale_and_translate, static_argnums=(1, 2, 5, 6))


def _close(a, b, rtol=2e-6, atol=2e-6):
  a, b = np.asarray(a), np.asarray(b)
  assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
  np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=atol)


@pytest.mark.parametrize("method", METHODS)
def test_resize_matches_jax(method):
  # Dimension 0 is upsampled, dimension 1 downsampled (where antialiasing matters).
  for antialias in [True, False]:
    _close(image.resize(X, (9, 4, 2), method, antialias=antialias),
           jimage.resize(X, (9, 4, 2), method, antialias=antialias))


@pytest.mark.parametrize("method", ["linear", "cubic", "lanczos3", "area"])
def test_scale_and_translate_matches_jax(method):
  scale = np.array([1.7, 0.6], np.float32)
  trans = np.array([0.3, -1.2], np.float32)
  for antialias in [True, False]:
    _close(image.scale_and_translate(X, (8, 5, 2), (0, 1), scale, trans, method, antialias),
           _jax_sat(X, (8, 5, 2), (0, 1), scale, trans, method, antialias))


def test_scale_and_translate_negative_dims_and_jit():
  scale, trans = np.array([0.5], np.float32), np.array([2.0], np.float32)
  f = sc.jit(lambda x, s, t: image.scale_and_translate(x, (5, 4, 2), (-2,), s, t, "cubic"))
  _close(f(X, scale, trans),
         _jax_sat(X, (5, 4, 2), (1,), scale, trans, "cubic"))


def test_linear_upsampling_is_interpolation():
  # Independent check of the half-pixel convention: upsampling by 2 with the triangle kernel
  # samples the input at (i + 0.5) / 2 - 0.5, clamped to the edge pixels.
  x = RNG.standard_normal(6)
  n = 12
  sample = (np.arange(n) + 0.5) / 2 - 0.5
  expected = np.interp(sample, np.arange(6), x)
  with sc.enable_x64():
    out = image.resize(x, (n,), "bilinear")
    assert out.dtype == np.float64
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-12, atol=1e-12)


def test_area_downsampling_is_block_mean():
  x = RNG.standard_normal((6, 4)).astype(np.float32)
  out = image.resize(x, (3, 2), "area")
  np.testing.assert_allclose(np.asarray(out), x.reshape(3, 2, 2, 2).mean(axis=(1, 3)),
                             rtol=1e-6, atol=1e-6)


def test_identity_and_nearest_dtypes():
  xi = np.arange(12, dtype=np.int32).reshape(3, 4)
  out = image.resize(xi, (3, 4), "linear")
  assert out.dtype == np.float32
  np.testing.assert_array_equal(np.asarray(out), xi.astype(np.float32))
  near = image.resize(xi, (6, 2), "nearest")
  assert near.dtype == np.int32
  np.testing.assert_array_equal(np.asarray(near), np.asarray(jimage.resize(xi, (6, 2), "nearest")))
  xb = jnp.asarray(X).astype(jnp.bfloat16)
  _close(image.resize(xb, (4, 4, 2), "linear"),
         jimage.resize(np.asarray(xb), (4, 4, 2), "linear"), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("method", ["linear", "lanczos3"])
def test_resize_x64_matches_jax(method):
  x = RNG.standard_normal((4, 6))
  with sc.enable_x64(), jax.enable_x64(True):
    a = image.resize(x, (7, 3), method)
    b = jimage.resize(x, (7, 3), method)
    assert a.dtype == np.float64
    _close(a, b, rtol=1e-12, atol=1e-12)
    # A float32 image under x64: the weights are computed in float64, then cast.
    _close(image.resize(x.astype(np.float32), (7, 3), method),
           jimage.resize(x.astype(np.float32), (7, 3), method))


@settings(max_examples=8)
@given(m=st.integers(1, 7), n=st.integers(1, 9), method=st.sampled_from(["linear", "cubic"]))
def test_resize_1d_sizes(m, n, method):
  x = np.linspace(-1.0, 2.0, m, dtype=np.float32) ** 2
  _close(image.resize(x, (n,), method), jimage.resize(x, (n,), method))


@pytest.mark.parametrize("method", ["linear", "cubic", "lanczos3"])
def test_resize_grads(method):
  x = RNG.standard_normal((4, 5))
  with sc.enable_x64():
    check_grads(lambda x: image.resize(x, (7, 3), method), (x,), order=1)


def test_scale_and_translate_grads_match_jax():
  x = RNG.standard_normal((4, 6))
  scale, trans = np.array([1.7, 0.6]), np.array([0.3, -1.2])

  def loss(mod, x, s, t):
    return (mod.scale_and_translate(x, (8, 5), (0, 1), s, t, "lanczos3") ** 2).sum()

  with sc.enable_x64(), jax.enable_x64(True):
    ours = sc.grad(lambda *a: loss(image, *a), argnums=(0, 1, 2))(x, scale, trans)
    theirs = jax.jit(jax.grad(lambda *a: loss(jimage, *a), argnums=(0, 1, 2)))(x, scale, trans)
    for a, b in zip(ours, theirs):
      _close(a, b, rtol=1e-10, atol=1e-10)


def test_vmap_resize():
  xs = RNG.standard_normal((3, 4, 5)).astype(np.float32)
  out = sc.vmap(lambda x: image.resize(x, (6, 2), "cubic"))(xs)
  _close(out, jimage.resize(xs, (3, 6, 2), "cubic"))


def test_resize_method_enum():
  assert [m.name for m in ResizeMethod] == [m.name for m in jimage.ResizeMethod]
  assert [m.value for m in ResizeMethod] == [m.value for m in jimage.ResizeMethod]
  for s in ["nearest", "linear", "bilinear", "trilinear", "triangle", "lanczos3", "lanczos5",
            "cubic", "bicubic", "tricubic", "cubic-pytorch", "bicubic-pytorch", "area"]:
    assert ResizeMethod.from_string(s).name == jimage.ResizeMethod.from_string(s).name
  with pytest.raises(ValueError, match='Unknown resize method "foo"'):
    ResizeMethod.from_string("foo")
  _close(image.resize(X, (3, 3, 2), ResizeMethod.LANCZOS3),
         jimage.resize(X, (3, 3, 2), jimage.ResizeMethod.LANCZOS3))


def test_errors():
  with pytest.raises(ValueError, match="shape must have length equal to the number of "
                                       "dimensions of x"):
    image.resize(X, (3, 3), "linear")
  with pytest.raises(ValueError, match="Unknown resize method"):
    image.resize(X, (3, 3, 2), "bogus")
  with pytest.raises(TypeError, match="method must be a ResizeMethod"):
    image.resize(X, (3, 3, 2), 3)
  with pytest.raises(TypeError, match="shape must be a sequence of static integers"):
    image.resize(X, (3.5, 3, 2), "linear")
  with pytest.raises(ValueError, match="Nearest neighbor resampling is not currently "
                                       "supported"):
    image.scale_and_translate(X, (5, 7, 2), (0,), [1.0], [0.0], "nearest")
  with pytest.raises(ValueError, match="one entry per spatial dimension"):
    image.scale_and_translate(X, (5, 7, 2), (0, 1), [1.0], [0.0], "linear")
  with pytest.raises(ValueError, match="is not in spatial_dims"):
    image.scale_and_translate(X, (5, 8, 2), (0,), [1.0], [0.0], "linear")
  with pytest.raises(ValueError, match="out of bounds"):
    image.scale_and_translate(X, (5, 7, 2), (3,), [1.0], [0.0], "linear")
