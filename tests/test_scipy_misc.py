"""`stagecraft.scipy.integrate.trapezoid`, `scipy.cluster.vq.vq`,
`scipy.interpolate.RegularGridInterpolator` and `scipy.ndimage.map_coordinates` against SciPy
and JAX 0.10.2 (whose `map_coordinates` boundary modes follow SciPy's documentation rather than
its implementation); dtypes with x64 off and on; gradients; `jit`; errors."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.cluster.vq as svq
import scipy.integrate as sint
import scipy.interpolate as sinterp
import scipy.ndimage as sndi

import jax.numpy as jjnp
import jax.scipy.ndimage as jndi

import stagecraft as sc
import stagecraft.scipy as scs
from stagecraft.scipy import integrate, interpolate, ndimage
from stagecraft.scipy.cluster import vq
from stagecraft.test_util import check_grads


def test_lazy_submodules():
  assert scs.cluster.vq.vq is vq.vq
  assert scs.integrate.trapezoid is integrate.trapezoid
  assert scs.interpolate.RegularGridInterpolator is interpolate.RegularGridInterpolator
  assert scs.ndimage.map_coordinates is ndimage.map_coordinates


# ---------------------------------------------------------------------------
# integrate


def test_trapezoid_matches_scipy():
  rng = np.random.default_rng(0)
  y = rng.normal(size=(4, 7)).astype(np.float32)
  x = np.sort(rng.normal(size=7)).astype(np.float32)
  out = integrate.trapezoid(y, x)
  assert out.dtype == np.float32 and out.shape == (4,)
  np.testing.assert_allclose(np.asarray(out), sint.trapezoid(y, x), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.asarray(integrate.trapezoid(y, dx=0.5, axis=0)),
                             sint.trapezoid(y, dx=0.5, axis=0), rtol=1e-5)
  assert float(integrate.trapezoid(np.arange(5))) == 8.0
  with sc.enable_x64():
    y64 = y.astype(np.float64)
    out = integrate.trapezoid(y64, x.astype(np.float64))
    assert out.dtype == np.float64
    np.testing.assert_allclose(np.asarray(out), sint.trapezoid(y64, x.astype(np.float64)),
                               rtol=1e-13)
    check_grads(lambda y, x: integrate.trapezoid(y, x), (y64, x.astype(np.float64)), order=1)


# ---------------------------------------------------------------------------
# cluster.vq


@pytest.mark.parametrize("x64", [False, True])
def test_vq_matches_scipy(x64):
  rng = np.random.default_rng(1)
  dt = np.float64 if x64 else np.float32
  obs, cb = rng.normal(size=(12, 3)).astype(dt), rng.normal(size=(5, 3)).astype(dt)
  with sc.enable_x64(x64):
    code, dist = vq.vq(obs, cb)
  want_code, want_dist = svq.vq(obs, cb)
  assert dist.dtype == dt and code.shape == (12,)
  np.testing.assert_array_equal(np.asarray(code), want_code)
  np.testing.assert_allclose(np.asarray(dist), want_dist, rtol=1e-5)
  code, dist = vq.vq(np.array([0., 2.5, 9.]), np.array([0., 3., 10.]))   # 1-D: scalar features
  np.testing.assert_array_equal(np.asarray(code), [0, 1, 2])
  np.testing.assert_allclose(np.asarray(dist), [0., .5, 1.])
  code, _ = vq.vq(np.array([[1, 1]]), np.array([[0, 0], [2, 2]]))     # ties: the first code
  assert int(code[0]) == 0


def test_vq_errors():
  with pytest.raises(ValueError, match="should have the same rank"):
    vq.vq(np.ones((3, 2)), np.ones(2))
  with pytest.raises(ValueError, match="ndim different than 1 or 2"):
    vq.vq(np.ones((3, 2, 1)), np.ones((3, 2, 1)))
  with pytest.raises(TypeError, match="requires ndarray or scalar arguments"):
    vq.vq("abc", np.ones(2))


# ---------------------------------------------------------------------------
# interpolate.RegularGridInterpolator

GRID = (np.linspace(0, 1, 5), np.array([0., .3, .5, 1.2]))


@pytest.mark.parametrize("method", ["linear", "nearest"])
def test_regular_grid_matches_scipy(method):
  rng = np.random.default_rng(2)
  values = rng.normal(size=(5, 4))
  pts = rng.uniform(-0.2, 1.3, size=(9, 2))
  inside = np.clip(pts, [0, 0], [1, 1.2])
  with sc.enable_x64():
    for fill in (np.nan, -1., None):
      ours = interpolate.RegularGridInterpolator(GRID, values, method=method, fill_value=fill)
      ref = sinterp.RegularGridInterpolator(GRID, values, method=method, bounds_error=False,
                                            fill_value=fill)
      out = ours(pts)
      assert out.dtype == np.float64
      np.testing.assert_allclose(np.asarray(out), ref(pts), rtol=1e-12, atol=1e-12)
    ours = interpolate.RegularGridInterpolator(GRID, values, method=method)
    ref = sinterp.RegularGridInterpolator(GRID, values, method=method)
    np.testing.assert_allclose(np.asarray(ours(inside)), ref(inside), rtol=1e-12)
    # the call-time method overrides the default
    other = "nearest" if method == "linear" else "linear"
    np.testing.assert_allclose(np.asarray(ours(inside, method=other)),
                               ref(inside, method=other), rtol=1e-12)


def test_regular_grid_shapes_dtypes_jit_and_grads():
  rng = np.random.default_rng(3)
  values = rng.normal(size=(5, 4, 3)).astype(np.float32)
  interp = interpolate.RegularGridInterpolator(GRID, values)
  pts = rng.uniform(0, 1, size=(2, 6, 2)).astype(np.float32)
  out = interp(pts)
  assert out.shape == (2, 6, 3) and out.dtype == np.float32
  ref = sinterp.RegularGridInterpolator(GRID, values)(pts.reshape(-1, 2)).reshape(2, 6, 3)
  np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-5, atol=1e-6)
  # coordinates as a tuple of broadcasting arrays
  np.testing.assert_allclose(np.asarray(interp((pts[..., 0], pts[..., 1]))), ref, rtol=1e-5,
                             atol=1e-6)
  # the interpolator is a pytree: it goes through jit as an argument
  jitted = sc.jit(lambda f, p: f(p))(interp, pts)
  np.testing.assert_allclose(np.asarray(jitted), np.asarray(out), rtol=1e-6)
  assert interpolate.RegularGridInterpolator(GRID, np.ones((5, 4), np.int32)).values.dtype == \
      np.float32
  with sc.enable_x64():
    v64 = values[..., 0].astype(np.float64)
    p64 = np.array([[0.3, 0.4], [0.7, 0.9]])
    check_grads(lambda v, p: interpolate.RegularGridInterpolator(GRID, v)(p), (v64, p64),
                order=1)


def test_regular_grid_errors():
  v = np.ones((5, 4))
  with pytest.raises(ValueError, match="method 'cubic' is not defined"):
    interpolate.RegularGridInterpolator(GRID, v, method="cubic")
  with pytest.raises(NotImplementedError, match="`bounds_error` takes no effect under JIT"):
    interpolate.RegularGridInterpolator(GRID, v, bounds_error=True)
  with pytest.raises(ValueError, match="there are 3 point arrays, but values has 2"):
    interpolate.RegularGridInterpolator(GRID + (np.arange(3.),), v)
  with pytest.raises(ValueError, match="fill_value must be either 'None' or of a type"):
    interpolate.RegularGridInterpolator(GRID, v, fill_value=1j)
  interp = interpolate.RegularGridInterpolator(GRID, v)
  with pytest.raises(ValueError, match="the requested sample points xi have dimension 3"):
    interp(np.ones((4, 3)))
  with pytest.raises(ValueError, match="method 'spline' is not defined"):
    interp(np.ones((4, 2)), method="spline")


# ---------------------------------------------------------------------------
# ndimage.map_coordinates

MODES = ["constant", "nearest", "wrap", "mirror", "reflect"]
SCIPY_MODE = {"constant": "grid-constant", "wrap": "grid-wrap"}


@pytest.mark.parametrize("order", [0, 1])
def test_map_coordinates_matches_jax_and_scipy(order):
  rng = np.random.default_rng(4)
  img = rng.normal(size=(5, 6)).astype(np.float32)
  coords = [rng.uniform(-3, 8, size=(3, 4)).astype(np.float32) for _ in range(2)]
  for mode in MODES:
    out = ndimage.map_coordinates(img, coords, order, mode, cval=1.5)
    assert out.dtype == np.float32 and out.shape == (3, 4)
    want = jndi.map_coordinates(jjnp.asarray(img), [jjnp.asarray(c) for c in coords], order,
                                mode, cval=1.5)
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), rtol=1e-6, atol=1e-6)
    if order == 1 or mode == "nearest":   # SciPy rounds order-0 halves differently
      ref = sndi.map_coordinates(img, np.stack(coords), order=order,
                                 mode=SCIPY_MODE.get(mode, mode), cval=1.5, prefilter=False)
      np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-5, atol=1e-5)


def test_map_coordinates_dtypes_and_grads():
  rng = np.random.default_rng(5)
  img = np.arange(30, dtype=np.int32).reshape(5, 6)
  coords = [np.array([0.5, 1.5, 3.2, -1.]), np.array([2.5, 0.49, 5.9, 1.])]
  out = ndimage.map_coordinates(img, coords, 1)
  assert out.dtype == np.int32
  np.testing.assert_array_equal(np.asarray(out), np.asarray(jndi.map_coordinates(
      jjnp.asarray(img), [jjnp.asarray(c) for c in coords], 1)))
  icoords = [np.array([0, 2, 7]), np.array([1, -1, 3])]
  for order in (0, 1):
    np.testing.assert_allclose(
        np.asarray(ndimage.map_coordinates(img.astype(np.float32), icoords, order, "mirror")),
        np.asarray(jndi.map_coordinates(jjnp.asarray(img, np.float32),
                                        [jjnp.asarray(c) for c in icoords], order, "mirror")))
  f = sc.jit(lambda x, c: ndimage.map_coordinates(x, [c, c], 1, "reflect"))
  c = rng.uniform(-1, 6, size=7).astype(np.float32)
  np.testing.assert_allclose(np.asarray(f(img.astype(np.float32), c)), sndi.map_coordinates(
      img.astype(np.float32), np.stack([c, c]), order=1, mode="reflect", prefilter=False),
      rtol=1e-5, atol=1e-5)
  with sc.enable_x64():
    x = rng.normal(size=(4, 5))
    cs = [np.array([0.3, 1.6, 2.2]), np.array([3.7, 0.4, 1.1])]
    assert ndimage.map_coordinates(x, cs, 1).dtype == np.float64
    check_grads(lambda x, a, b: ndimage.map_coordinates(x, [a, b], 1, "nearest"), (x, *cs),
                order=1)


def test_map_coordinates_errors():
  img = np.ones((3, 3), np.float32)
  with pytest.raises(ValueError, match="coordinates must be a sequence of length input.ndim, "
                     "but 1 != 2"):
    ndimage.map_coordinates(img, [np.zeros(2)], 1)
  with pytest.raises(NotImplementedError, match="does not yet support mode grid-wrap"):
    ndimage.map_coordinates(img, [np.zeros(2)] * 2, 1, mode="grid-wrap")
  with pytest.raises(NotImplementedError, match="currently requires order<=1"):
    ndimage.map_coordinates(img, [np.zeros(2)] * 2, 3)
