"""More `stagecraft.numpy` programs printed as JAX 0.10.2 prints them, character for
character, with their values (eager and under `jit`, x64 off and on), gradients and errors:
set operations (`unique` with `size=` / `fill_value=` / the returned indices and counts /
`axis`, the Array API's `unique_*`, `isin` with each method, `intersect1d` with indices,
`union1d`, `setdiff1d`, `setxor1d`: the jitted `_unique_sorted_mask`, `_in1d`,
`_intersect1d_size`, `_setxor1d_size`), contractions (`convolve` / `correlate`: the jitted
`_conv` over `conv_general_dilated`; `kron`, `outer`, `inner`, `tensordot`, `vdot`) and
polynomials (`polyval` as a `scan`, `polyfit` with weights, `full` and `cov`, `polyadd`,
`polysub`, `polymul`, `polyder`, `polyint`, `poly`, `roots`, `vander`), plus the printing
fixes they needed: scatter-add's update jaxpr printed once when shared, `out_sharding` of
`conv_general_dilated`, a `scan`'s `unroll` above its length, `power` of operands with
size-1 dimensions (lax broadcasts them).

`KNOWN_DIFFERENCES` lists programs that still print differently (each with its cause); they
are asserted to differ, so that a fix shows up as a failure asking to move them.
"""
from __future__ import annotations

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp

from _util import assert_like_jax, jnp_printing_tests

_RNG = np.random.default_rng(7)
F = _RNG.standard_normal((3, 4)).astype(np.float32)
V = _RNG.standard_normal(4).astype(np.float32)
X = _RNG.standard_normal(20).astype(np.float32)
I = _RNG.integers(0, 5, 12).astype(np.int32)
J = _RNG.integers(2, 8, 7).astype(np.int32)
I2 = _RNG.integers(0, 3, (4, 3)).astype(np.int32)
R5 = np.arange(5, dtype=np.int32)
R39 = np.arange(3, 9, dtype=np.int32)
XN = np.array([1., np.nan, 2., np.nan, 1., -0., 0.], np.float32)
C = (F + 1j * F[::-1]).astype(np.complex64)


def _lax(m):
  return jax.lax if m is jjnp else sc.lax


# name -> (m -> function, args); m is jax.numpy or stagecraft.numpy.
CASES = {
    # -- unique and the Array API's unique_*
    "unique_size": (lambda m: lambda x: m.unique(x, size=4), (I,)),
    "unique_fill": (lambda m: lambda x: m.unique(x, size=6, fill_value=-1), (I,)),
    "unique_index": (lambda m: lambda x: m.unique(x, size=6, return_index=True), (I,)),
    "unique_inverse": (lambda m: lambda x: m.unique(x, size=6, return_inverse=True), (I,)),
    "unique_counts": (lambda m: lambda x: m.unique(x, size=6, return_counts=True), (I,)),
    "unique_all_flags": (lambda m: lambda x: m.unique(x, True, True, True, size=6), (I2,)),
    "unique_axis": (lambda m: lambda x: m.unique(x, axis=0, size=3), (I2,)),
    "unique_axis1_fill": (lambda m: lambda x: m.unique(x, axis=1, size=3, fill_value=0,
                                                       return_counts=True), (I2,)),
    "unique_float": (lambda m: lambda x: m.unique(x, size=5), (X,)),
    "unique_nan": (lambda m: lambda x: m.unique(x, size=5, return_counts=True), (XN,)),
    "unique_nan_distinct": (lambda m: lambda x: m.unique(x, size=6, equal_nan=False), (XN,)),
    "unique_complex": (lambda m: lambda x: m.unique(x, size=4), (C,)),
    "unique_values": (lambda m: lambda x: m.unique_values(x, size=5), (I,)),
    "unique_counts_fn": (lambda m: lambda x: m.unique_counts(x, size=5), (I,)),
    "unique_inverse_fn": (lambda m: lambda x: m.unique_inverse(x, size=5), (I2,)),
    "unique_all": (lambda m: lambda x: m.unique_all(x, size=5, fill_value=0), (I,)),
    # -- two sets
    "intersect1d": (lambda m: lambda a, b: m.intersect1d(a, b, size=4), (I, J)),
    "intersect1d_fill": (lambda m: lambda a, b: m.intersect1d(a, b, size=4, fill_value=-1),
                         (I, J)),
    "intersect1d_unique": (lambda m: lambda a, b: m.intersect1d(a, b, assume_unique=True,
                                                                size=4), (R5, R39)),
    "intersect1d_indices": (lambda m: lambda a, b: m.intersect1d(a, b, return_indices=True,
                                                                 size=4), (I, J)),
    "intersect1d_unique_indices": (
        lambda m: lambda a, b: m.intersect1d(a, b, True, True, size=3), (R5, R39)),
    "intersect1d_mixed": (lambda m: lambda a, b: m.intersect1d(a, b, size=3), (I, X)),
    "union1d": (lambda m: lambda a, b: m.union1d(a, b, size=8), (I, J)),
    "union1d_fill": (lambda m: lambda a, b: m.union1d(a, b, size=10, fill_value=0), (I, J)),
    "setdiff1d": (lambda m: lambda a, b: m.setdiff1d(a, b, size=4), (I, J)),
    "setdiff1d_fill": (lambda m: lambda a, b: m.setdiff1d(a, b, size=4, fill_value=9),
                       (I2, J)),
    "setdiff1d_unique": (lambda m: lambda a, b: m.setdiff1d(a, b, assume_unique=True, size=3),
                         (R5, J)),
    "setxor1d": (lambda m: lambda a, b: m.setxor1d(a, b, size=5), (I, J)),
    "setxor1d_fill": (lambda m: lambda a, b: m.setxor1d(a, b, size=5, fill_value=0), (I, J)),
    "setxor1d_unique": (lambda m: lambda a, b: m.setxor1d(a, b, assume_unique=True, size=5),
                        (R5, R39)),
    "isin": (lambda m: m.isin, (I2, J)),
    "isin_invert": (lambda m: lambda a, b: m.isin(a, b, invert=True), (I2, J)),
    "isin_float": (lambda m: m.isin, (F, V)),
    "isin_mixed": (lambda m: m.isin, (I2, V)),
    "isin_binary_search": (lambda m: lambda a, b: m.isin(a, b, method="binary_search"),
                           (I2, J)),
    "isin_sort": (lambda m: lambda a, b: m.isin(a, b, method="sort"), (I, J)),
    "isin_sort_invert": (lambda m: lambda a, b: m.isin(a, b, invert=True, method="sort",
                                                       assume_unique=True), (R5, J)),
    # -- contractions
    "convolve": (lambda m: m.convolve, (X, V)),
    "convolve_same": (lambda m: lambda a, b: m.convolve(a, b, mode="same"), (X, V)),
    "convolve_valid": (lambda m: lambda a, b: m.convolve(a, b, mode="valid"), (V, X)),
    "convolve_int": (lambda m: m.convolve, (I, J)),
    "convolve_precision": (lambda m: lambda a, b: m.convolve(a, b, precision="highest"),
                           (X, V)),
    "convolve_preferred": (lambda m: lambda a, b: m.convolve(
        a, b, preferred_element_type=np.float32), (I, J)),
    "convolve_complex": (lambda m: m.convolve, (X.astype(np.complex64), V)),
    "correlate": (lambda m: m.correlate, (X, V)),
    "correlate_full": (lambda m: lambda a, b: m.correlate(a, b, mode="full"), (V, X)),
    "correlate_same": (lambda m: lambda a, b: m.correlate(a, b, mode="same"), (X, V)),
    "correlate_complex": (lambda m: lambda a, b: m.correlate(a, b, "full"),
                          (X, (V + 1j).astype(np.complex64))),
    "kron": (lambda m: m.kron, (F, V)),
    "kron_2d": (lambda m: m.kron, (F, F[:2, :2])),
    "kron_int": (lambda m: m.kron, (I2, J)),
    "outer": (lambda m: m.outer, (V, X)),
    "outer_2d": (lambda m: m.outer, (F, V)),
    "outer_bool": (lambda m: m.outer, (V > 0, X > 0)),
    "inner": (lambda m: m.inner, (F, V)),
    "inner_scalar": (lambda m: m.inner, (np.float32(2), V)),
    "inner_2d": (lambda m: m.inner, (F, F)),
    "inner_int": (lambda m: m.inner, (I2, I2)),
    "tensordot": (lambda m: lambda a, b: m.tensordot(a, b, 1), (F, F.T)),
    "tensordot_2": (lambda m: m.tensordot, (F, F)),
    "tensordot_axes": (lambda m: lambda a, b: m.tensordot(a, b, axes=((0,), (1,))),
                       (F, F[:, :3])),
    "tensordot_axes_pair": (lambda m: lambda a, b: m.tensordot(a, b, axes=([1, 0], [0, 1])),
                            (F, F.T)),
    "tensordot_int_float": (lambda m: lambda a, b: m.tensordot(a, b, 1), (I2, F)),
    "vdot": (lambda m: m.vdot, (F, F)),
    "vdot_complex": (lambda m: m.vdot, (C, F)),
    "vdot_precision": (lambda m: lambda a, b: m.vdot(a, b, precision="highest"), (V, V)),
    "vecdot_complex": (lambda m: m.vecdot, (C, F)),
    # -- polynomials
    "polyval": (lambda m: m.polyval, (V, X)),
    "polyval_int": (lambda m: m.polyval, (J, I)),
    "polyval_unroll": (lambda m: lambda p, x: m.polyval(p, x, unroll=2), (V, X)),
    "polyval_2d": (lambda m: m.polyval, (V, F)),
    "polyfit": (lambda m: lambda x, y: m.polyfit(x, y, 2), (X, X ** 2)),
    "polyfit_w": (lambda m: lambda x, y, w: m.polyfit(x, y, 1, w=w), (X, X ** 2, np.abs(X))),
    "polyfit_full": (lambda m: lambda x, y: m.polyfit(x, y, 2, full=True), (X, X ** 2)),
    "polyfit_cov": (lambda m: lambda x, y: m.polyfit(x, y, 2, cov=True), (X, X ** 2)),
    "polyfit_cov_unscaled": (lambda m: lambda x, y: m.polyfit(x, y, 2, cov="unscaled"),
                             (X, X ** 2)),
    "polyfit_2d": (lambda m: lambda x, y: m.polyfit(x, y, 2), (X, np.stack([X, X ** 3], 1))),
    "polyfit_2d_cov": (lambda m: lambda x, y: m.polyfit(x, y, 1, cov=True),
                       (X, np.stack([X, X ** 3], 1))),
    "polyfit_2d_w": (lambda m: lambda x, y, w: m.polyfit(x, y, 1, w=w),
                     (X, np.stack([X, X ** 3], 1), np.abs(X))),
    "polyadd": (lambda m: m.polyadd, (V, X[:6])),
    "polyadd_int": (lambda m: m.polyadd, (J, I)),
    "polysub": (lambda m: m.polysub, (V, X[:6])),
    "polymul": (lambda m: m.polymul, (V, X[:6])),
    "polymul_int": (lambda m: m.polymul, (J, I)),
    "polyder": (lambda m: m.polyder, (X[:6],)),
    "polyder_m2": (lambda m: lambda p: m.polyder(p, 2), (X[:6],)),
    "polyder_int": (lambda m: m.polyder, (J,)),
    "polyint": (lambda m: m.polyint, (X[:6],)),
    "polyint_m2_k": (lambda m: lambda p: m.polyint(p, 2, k=np.array([1., 2.], np.float32)),
                     (X[:6],)),
    "polyint_int": (lambda m: m.polyint, (J,)),
    "polydiv": (lambda m: m.polydiv, (X[:6], V)),
    "poly": (lambda m: m.poly, (V,)),
    "poly_matrix": (lambda m: m.poly, (F[:3, :3],)),
    "roots": (lambda m: lambda p: m.roots(p, strip_zeros=False), (V,)),
    "roots_leading_zeros": (lambda m: lambda p: m.roots(p, strip_zeros=False),
                            (np.array([0., 0., 1., -3., 2.], np.float32),)),
    "vander": (lambda m: m.vander, (V,)),
    "vander_int": (lambda m: m.vander, (J,)),
    "vander_N": (lambda m: lambda x: m.vander(x, 3), (V,)),
    "vander_increasing": (lambda m: lambda x: m.vander(x, 5, increasing=True), (V,)),
    # -- the printing fixes below them
    "power_size1_dims": (lambda m: m.power, (V[:, None], V[None, :])),
    "power_float_int_size1_dims": (lambda m: m.power, (V[:, None], J[None, :3])),
    "power_rank_promotion": (lambda m: m.power, (np.abs(F), V)),
    "scan_unroll_above_length": (
        lambda m: lambda x: _lax(m).scan(lambda c, y: (c * y + 1, None), np.float32(0), x,
                                         unroll=16)[0], (V,)),
    "scatter_add_twice": (
        lambda m: lambda x, i: m.asarray(x).at[i].add(1.).at[i + 1].add(x[0]),
        (V, np.int32(1))),
}

X64_CASES = ["unique_size", "unique_all_flags", "unique_float", "intersect1d_indices",
             "union1d", "setdiff1d", "setxor1d", "isin_float", "convolve", "correlate_complex",
             "kron", "vdot_complex", "polyval", "polyfit_full", "polyfit_cov", "polyint_m2_k",
             "poly_matrix", "roots", "vander"]

# Programs still printed differently from JAX, with the cause; values are checked all the
# same.
KNOWN_DIFFERENCES: dict = {}

_KNOWN = {k: v for k, (v, _) in KNOWN_DIFFERENCES.items()}
# Programs printed as JAX's compute JAX's values (the primitives' values are tested on their
# own); the values of these, eager and jitted, are compared too. The set operations (each
# many small jitted functions, compiled one by one when eager) are compared jitted only,
# below, and against NumPy.
VALUE_CASES = ["convolve_same", "convolve_int", "correlate_complex", "kron_int",
               "vdot_complex", "polyval", "polyfit_cov", "polyint_m2_k", "polydiv",
               "poly_matrix", "roots_leading_zeros", "vander_increasing", "power_size1_dims",
               "scan_unroll_above_length", "scatter_add_twice", "vander_int"]
X64_VALUE_CASES = ["convolve", "correlate_complex", "polyval", "polyfit_full", "roots",
                   "vander"]
JIT_VALUE_CASES = ["unique_all_flags", "unique_axis1_fill", "unique_nan", "unique_complex",
                   "intersect1d_indices", "intersect1d_unique_indices", "union1d_fill",
                   "setdiff1d_fill", "setxor1d", "setxor1d_unique", "isin_sort"]
globals().update(jnp_printing_tests(
    CASES, X64_CASES, _KNOWN, value_cases=VALUE_CASES, x64_value_cases=X64_VALUE_CASES,
    x64_narrow_too=False, rtol=2e-4, atol=2e-4, x64_tol=1e-9))


@pytest.mark.parametrize("name", JIT_VALUE_CASES)
def test_jit_values_like_jax(name):
  mk, args = CASES[name]
  assert_like_jax(sc.jit(mk(jnp))(*args), jax.jit(mk(jjnp))(*args), name)


# ---------------------------------------------------------------------------
# Values against NumPy (concrete inputs: data-dependent sizes, no `size=`)


def test_set_operations_like_numpy():
  i2 = I2.ravel()
  kw = dict(return_index=True, return_inverse=True, return_counts=True)
  for got, want in zip(jnp.unique(I2, **kw), np.unique(I2, **kw)):
    np.testing.assert_array_equal(np.asarray(got), want.reshape(np.shape(got)))
  got = jnp.unique(I2, axis=1, return_counts=True)
  want = np.unique(I2, axis=1, return_counts=True)
  for g, w in zip(got, want):
    np.testing.assert_array_equal(np.asarray(g), w)
  np.testing.assert_array_equal(np.asarray(jnp.unique_values(XN)), [-0., 1., 2., np.nan,
                                                                    np.nan])
  got = jnp.intersect1d(i2, J, return_indices=True)
  want = np.intersect1d(i2, J, return_indices=True)
  for g, w in zip(got, want):
    np.testing.assert_array_equal(np.asarray(g), w)
  np.testing.assert_array_equal(np.asarray(jnp.union1d(I, J)), np.union1d(I, J))
  np.testing.assert_array_equal(np.asarray(jnp.setdiff1d(I, J)), np.setdiff1d(I, J))
  np.testing.assert_array_equal(np.asarray(jnp.setxor1d(I, J)), np.setxor1d(I, J))
  for method, invert in (("auto", True), ("sort", True)):
    np.testing.assert_array_equal(np.asarray(jnp.isin(I2, J, invert=invert, method=method)),
                                  np.isin(I2, J, invert=invert), err_msg=method)
  # with a size: padded with the first value (unique) or fill_value, truncated if smaller
  got = sc.jit(lambda x: jnp.unique(x, size=8, return_counts=True))(I)
  n = len(np.unique(I))
  np.testing.assert_array_equal(np.asarray(got[0])[:n], np.unique(I))
  assert (np.asarray(got[0])[n:] == np.unique(I)[0]).all()
  assert (np.asarray(got[1])[n:] == 0).all()
  np.testing.assert_array_equal(np.asarray(jnp.setdiff1d(I, J, size=1)),
                                np.setdiff1d(I, J)[:1])


def test_polynomials_like_numpy():
  with sc.enable_x64():
    x, v = X.astype(np.float64), V.astype(np.float64)
    np.testing.assert_allclose(np.asarray(jnp.polyval(v, x)), np.polyval(v, x), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(jnp.polymul(v, x[:6])), np.polymul(v, x[:6]),
                               rtol=1e-12)
    np.testing.assert_allclose(np.asarray(jnp.polyint(x[:6], 2, k=np.array([1., 2.]))),
                               np.polyint(x[:6], 2, k=[1., 2.]), rtol=1e-12)
    y = np.stack([x ** 2 - 1, 2 * x ** 3], 1)
    for kw in (dict(w=np.abs(x)), dict(cov=True)):
      got = jnp.polyfit(x, y, 3, **kw)
      want = np.polyfit(x, y, 3, **kw)
      for g, w in zip(got if kw.get("cov") else [got], want if kw.get("cov") else [want]):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-7, atol=1e-9)
    p = np.array([0., 0., 1., -6., 11., -6.])
    np.testing.assert_allclose(np.sort(np.asarray(jnp.roots(p)).real), [1., 2., 3.],
                               rtol=1e-10)
    r = np.asarray(jnp.roots(p, strip_zeros=False))
    assert np.isnan(r[-2:]).all()
    np.testing.assert_allclose(np.sort(r[:3].real), [1., 2., 3.], rtol=1e-10)
    np.testing.assert_allclose(np.asarray(jnp.poly(np.array([1., 2., 3.]))),
                               np.poly([1., 2., 3.]))
    np.testing.assert_allclose(np.asarray(jnp.vander(v, 6, increasing=True)),
                               np.vander(v, 6, increasing=True), rtol=1e-12)
  np.testing.assert_allclose(np.asarray(jnp.convolve(X, V, mode="same")),
                             np.convolve(X, V, mode="same"), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(jnp.correlate(V, X, mode="full")),
                             np.correlate(V, X, mode="full"), rtol=1e-5, atol=1e-5)
  c = (V + 1j * V[::-1]).astype(np.complex64)
  np.testing.assert_allclose(np.asarray(jnp.correlate(X, c, mode="full")),
                             np.correlate(X, c, mode="full"), rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(np.asarray(jnp.kron(I2, J)), np.kron(I2, J))


# ---------------------------------------------------------------------------
# Gradients: the same as JAX's

GRAD_CASES = {
    "polyval": (lambda m: lambda p, x: m.polyval(p, x).sum(), (V, X)),
    "convolve": (lambda m: lambda a, b: (m.convolve(a, b, mode="same") ** 2).sum(), (X, V)),
    "correlate": (lambda m: lambda a, b: (m.correlate(a, b) ** 2).sum(), (X, V)),
    "kron": (lambda m: lambda a, b: (m.kron(a, b) ** 2).sum(), (F, V)),
    "polyfit": (lambda m: lambda y: m.polyfit(X, y, 2).sum(), (X ** 2,)),
    "polyint": (lambda m: lambda p: m.polyint(p, 2).sum(), (V,)),
    "unique_values_sum": (lambda m: lambda x: m.unique(x, size=3, fill_value=0.).sum(),
                          (F[0],)),
}

globals().update(jnp_printing_tests({}, [], grad_cases=GRAD_CASES, grad_atol=1e-4))


# ---------------------------------------------------------------------------
# Errors: JAX's exception types and messages

ERROR_CASES = {
    "unique_traced": lambda m: jax.jit(m.unique) if m is jjnp else sc.jit(m.unique),
    "unique_empty_size": lambda m: lambda: m.unique(np.zeros(0, np.int32), size=2),
    "setdiff1d_traced": lambda m: (jax.jit if m is jjnp else sc.jit)(
        lambda a: m.setdiff1d(a, J)),
    "union1d_traced": lambda m: (jax.jit if m is jjnp else sc.jit)(lambda a: m.union1d(a, J)),
    "isin_method": lambda m: lambda a: m.isin(a, J, method="bogus"),
    "roots_traced": lambda m: (jax.jit if m is jjnp else sc.jit)(m.roots),
    "roots_2d": lambda m: lambda a: m.roots(a.reshape(2, 6)),
    "polyfit_deg": lambda m: lambda a: m.polyfit(a, a, -1),
    "polyfit_w_shape": lambda m: lambda a: m.polyfit(a, a, 1, w=a[:3]),
    "polyint_k": lambda m: lambda a: m.polyint(a, 2, k=np.ones(3)),
    "polyder_negative": lambda m: lambda a: m.polyder(a, -1),
    "vander_2d": lambda m: lambda a: m.vander(a.reshape(3, 4)),
    "vander_negative": lambda m: lambda a: m.vander(a, -1),
    "convolve_2d": lambda m: lambda a: m.convolve(a.reshape(3, 4), a),
    "convolve_mode": lambda m: lambda a: m.convolve(a, a, mode="bogus"),
    "convolve_empty": lambda m: lambda a: m.convolve(a[:0], a),
    "kron_list": lambda m: lambda a: m.kron([1, 2], a),
}
# those whose first two lines (JAX's message, before the origin and traceback detail) are
# compared
MESSAGE_CASES = ["unique_empty_size", "isin_method", "roots_2d", "polyfit_deg",
                 "polyfit_w_shape", "polyint_k", "polyder_negative", "vander_2d",
                 "vander_negative", "convolve_2d", "convolve_mode", "convolve_empty",
                 "unique_traced", "setdiff1d_traced", "union1d_traced", "roots_traced"]


@pytest.mark.parametrize("name", sorted(ERROR_CASES))
def test_errors_like_jax(name):
  f = ERROR_CASES[name]
  arg = X[:12].astype(np.float32)
  with pytest.raises(Exception) as want:
    f(jjnp)() if name == "unique_empty_size" else f(jjnp)(arg)
  with pytest.raises(Exception) as got:
    f(jnp)() if name == "unique_empty_size" else f(jnp)(arg)
  # NB: by name: JAX's ConcretizationTypeError is not stagecraft's
  assert type(got.value).__name__ == type(want.value).__name__, (got.value, want.value)
  if name in MESSAGE_CASES:
    lines = lambda e: str(e).split("\n---")[0].split("\n")[:2]  # noqa: E731
    assert lines(got.value) == lines(want.value)


def test_unique_traced_message_names_the_fix():
  with pytest.raises(sc.errors.ConcretizationTypeError,
                     match=r"traced array with shape int32\[12\]\nThe error arose for the "
                           r"first argument of jnp.unique\(\). To make jnp.unique\(\) "
                           r"compatible with JIT"):
    sc.jit(jnp.unique)(I)


def test_unique_named_tuples_like_jax():
  for fn in ("unique_all", "unique_counts", "unique_inverse"):
    got = sc.eval_shape(lambda x: getattr(jnp, fn)(x, size=3), I2)
    want = jax.eval_shape(lambda x: getattr(jjnp, fn)(x, size=3), I2)
    assert type(got)._fields == type(want)._fields, fn
    assert [(g.shape, g.dtype) for g in got] == [(w.shape, w.dtype) for w in want], fn
