"""More `stagecraft.numpy` programs printed as JAX 0.10.2 prints them, character for
character, with their values (eager and under `jit`, x64 off and on), gradients and errors:
reductions over a tuple axis in the order given (`reduce_sum[axes=(2, 0)]`), the jitted
`_linspace` / `_logspace` / `_geomspace` (convex combinations `start * (1 - t) + stop * t`),
histograms (`histogram_bin_edges` by `ptp` and `linspace`, counts by a scatter-add;
`histogramdd` by `ravel_multi_index` and `bincount`), the jitted `_interp`, `diff`, `flip`,
`rot90`, `roll` (`_roll_static`, `_roll_dynamic`), `nonzero` / `where` / `argwhere` with
`size` (a `bincount` of the running count), `ix_`, `ravel_multi_index` and `log10` (its
constant under x64).

`KNOWN_DIFFERENCES` lists programs that still print differently (each with its cause); they
are asserted to differ, so that a fix shows up as a failure asking to move them.
"""
from __future__ import annotations

import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.test_util import check_grads

from _util import as_x64, assert_like_jax, jnp_error_tests, jnp_printing_tests

_RNG = np.random.default_rng(5)
F = _RNG.standard_normal((3, 4)).astype(np.float32)
G = _RNG.standard_normal((3, 3, 3)).astype(np.float32)
V = _RNG.standard_normal(4).astype(np.float32)
X = _RNG.standard_normal(20).astype(np.float32)
W = _RNG.random(20).astype(np.float32)
P = _RNG.standard_normal((20, 3)).astype(np.float32)
I = (F * 3).astype(np.int32)
S0, S1 = np.float32(0), np.float32(2)

# name -> (m -> function, args); m is jax.numpy or stagecraft.numpy.
CASES = {
    # -- reductions over a tuple axis keep its order
    **{f"{fn}_tuple_axis": (lambda m, fn=fn: lambda x: getattr(m, fn)(x, axis=(2, 0)), (G,))
       for fn in ("sum", "prod", "max", "min", "any", "all", "mean", "var", "std", "nansum",
                  "nanmean", "nanmax", "ptp", "count_nonzero")},
    "sum_negative_tuple_axis": (lambda m: lambda x: m.sum(x, axis=(-1, 0), keepdims=True),
                                (G,)),
    "any_bool_tuple_axis": (lambda m: lambda x: m.any(x > 0, axis=(1, 0)), (G,)),
    "sum_where_tuple_axis": (lambda m: lambda x: m.sum(x, axis=(1, 0), where=x > 0), (G,)),
    "max_initial_tuple_axis": (lambda m: lambda x: m.max(x, axis=(2, 1), initial=0.), (G,)),
    "mean_where_keepdims": (lambda m: lambda x: m.mean(x, axis=(2, 0), where=x > 0,
                                                       keepdims=True), (G,)),
    # -- linspace, logspace, geomspace
    "linspace": (lambda m: lambda: m.linspace(0., 1., 5), ()),
    "linspace_retstep_no_endpoint": (
        lambda m: lambda a, b: m.linspace(a, b, 5, endpoint=False, retstep=True), (S0, S1)),
    "linspace_retstep": (lambda m: lambda a, b: m.linspace(a, b, 5, retstep=True), (S0, S1)),
    "linspace_axis": (lambda m: lambda a, b: m.linspace(a, b, 4, axis=1), (V, V + 1)),
    "linspace_negative_axis": (lambda m: lambda a, b: m.linspace(a, b, 4, axis=-1), (F, V)),
    "linspace_broadcast": (lambda m: lambda a, b: m.linspace(a, b, 4), (F[:, :1], V)),
    "linspace_1": (lambda m: lambda a, b: m.linspace(a, b, 1, retstep=True), (S0, S1)),
    "linspace_1_no_endpoint": (
        lambda m: lambda a, b: m.linspace(a, b, 1, endpoint=False, retstep=True), (S0, S1)),
    "linspace_0": (lambda m: lambda a, b: m.linspace(a, b, 0, retstep=True), (V, S1)),
    "linspace_int": (lambda m: lambda: m.linspace(0, 10, 5, dtype=int), ()),
    "linspace_int_start": (lambda m: lambda a: m.linspace(a, 10, 5), (I[0],)),
    "linspace_to_int": (lambda m: lambda a: m.linspace(a, 10, 5, dtype=np.int32), (F[0],)),
    "linspace_f16": (lambda m: lambda a, b: m.linspace(a, b, 3), (S0.astype(np.float16), S1)),
    "linspace_complex": (lambda m: lambda a, b: m.linspace(a, b, 3), (np.complex64(1j), S1)),
    "logspace": (lambda m: lambda: m.logspace(0., 2., 5), ()),
    "logspace_base": (lambda m: lambda a, b, c: m.logspace(a, b, 4, base=c, axis=-1),
                      (V, F, np.float32(2))),
    "logspace_int": (lambda m: lambda: m.logspace(0, 2, 3, dtype=np.int32), ()),
    "logspace_no_endpoint": (lambda m: lambda a, b: m.logspace(a, b, 4, endpoint=False),
                             (S0, S1)),
    "geomspace": (lambda m: lambda: m.geomspace(1., 16., 5), ()),
    "geomspace_axis": (lambda m: lambda a, b: m.geomspace(a, b, 3, axis=1), (F + 3, V + 5)),
    "geomspace_negative": (lambda m: lambda a, b: m.geomspace(a, b, 3, endpoint=False),
                           (-V - 2, -V - 5)),
    # -- histograms
    "histogram_default": (lambda m: m.histogram, (X,)),
    "histogram_weights": (lambda m: lambda x, w: m.histogram(x, 4, weights=w), (X, W)),
    "histogram_density": (lambda m: lambda x: m.histogram(x, 4, density=True), (X,)),
    "histogram_range": (lambda m: lambda x: m.histogram(x, 4, range=(-1., 1.)), (X,)),
    "histogram_edges": (lambda m: lambda x, e: m.histogram(x, e),
                        (X, np.array([-1, 0, .5, 2], np.float32))),
    "histogram_int": (lambda m: lambda x: m.histogram(x, 3), (I,)),
    "histogram_bin_edges": (lambda m: lambda x: m.histogram_bin_edges(x, 5, range=(0, 2)),
                            (X,)),
    "histogram2d": (lambda m: lambda x, y: m.histogram2d(x, y, 3), (X, W)),
    "histogram2d_density": (lambda m: lambda x, y: m.histogram2d(x, y, (2, 3), density=True),
                            (X, W)),
    "histogram2d_weights": (
        lambda m: lambda x, y, w: m.histogram2d(x, y, 3, weights=w, range=[(-1, 1), (0, 1)]),
        (X, W, W)),
    "histogramdd": (lambda m: lambda p, w: m.histogramdd(p, (2, 3, 2), weights=w,
                                                         density=True), (P, W)),
    # -- interp
    "interp_left_right": (lambda m: lambda x, xp, fp: m.interp(x, xp, fp, left=0., right=1.),
                          (V, np.sort(F[0]), F[1])),
    "interp_traced_left": (
        lambda m: lambda x, xp, fp, lo: m.interp(x, xp, fp, left=lo, right="extrapolate"),
        (V, np.sort(F[0]), F[1], np.float32(3))),
    "interp_extrapolate": (lambda m: lambda x, xp, fp: m.interp(x, xp, fp, left="extrapolate"),
                           (V, np.sort(F[0]), F[1])),
    "interp_period": (lambda m: lambda x, xp, fp: m.interp(x, xp, fp, period=2.),
                      (V, F[0], F[1])),
    "interp_int": (lambda m: m.interp, (I[0], np.arange(4, dtype=np.int32), I[1])),
    "interp_complex": (lambda m: m.interp, (F[2], np.sort(F[0]),
                                            (F[1] + 1j).astype(np.complex64))),
    # -- diff, flip, rot90, roll
    "diff": (lambda m: m.diff, (F,)),
    "diff_n2_axis0": (lambda m: lambda x: m.diff(x, 2, axis=0), (F,)),
    "diff_prepend": (lambda m: lambda x: m.diff(x, prepend=0.), (F,)),
    "diff_bool": (lambda m: m.diff, (X > 0,)),
    "flip": (lambda m: m.flip, (F,)),
    "flip_axes": (lambda m: lambda x: m.flip(x, (1, 0)), (F,)),
    "fliplr": (lambda m: m.fliplr, (F,)),
    "rot90": (lambda m: m.rot90, (F,)),
    "rot90_k2": (lambda m: lambda x: m.rot90(x, 2), (F,)),
    "rot90_k3_axes": (lambda m: lambda x: m.rot90(x, -1, axes=(2, 0)), (G,)),
    "roll": (lambda m: lambda x: m.roll(x, 2), (F,)),
    "roll_axes": (lambda m: lambda x: m.roll(x, (1, -1), axis=(0, 1)), (F,)),
    "roll_broadcast": (lambda m: lambda x: m.roll(x, 1, axis=(0, 1)), (F,)),
    "roll_traced": (lambda m: lambda x, s: m.roll(x, s, axis=1), (F, np.int32(1))),
    "roll_traced_axes": (lambda m: lambda x, s: m.roll(x, s, axis=(0, 1)),
                         (F, np.array([1, -2], np.int32))),
    "roll_traced_flat": (lambda m: lambda x, s: m.roll(x, s), (F, np.int32(5))),
    # -- nonzero and friends with a static size
    "nonzero_size": (lambda m: lambda x: m.nonzero(x, size=3, fill_value=-1), (X,)),
    "nonzero_2d": (lambda m: lambda x: m.nonzero(x, size=5), (F,)),
    "nonzero_fill_tuple": (lambda m: lambda x: m.nonzero(x > 0, size=5, fill_value=(-1, 7)),
                           (F,)),
    "where_one_arg": (lambda m: lambda x: m.where(x > 0, size=4), (F,)),
    "argwhere": (lambda m: lambda x: m.argwhere(x, size=5), (F,)),
    "argwhere_fill": (lambda m: lambda x: m.argwhere(x > 0, size=5, fill_value=-1), (F,)),
    "argwhere_scalar": (lambda m: lambda x: m.argwhere(x, size=2), (np.float32(1),)),
    "flatnonzero": (lambda m: lambda x: m.flatnonzero(x, size=5), (F,)),
    # -- index tricks and log10
    "ix_": (lambda m: lambda a, b: m.ix_(a, b), (V, X)),
    "ravel_multi_index_clip": (
        lambda m: lambda i, j: m.ravel_multi_index((i, j), (3, 4), mode="clip"),
        (I[0], I[1])),
    "ravel_multi_index_wrap_f": (
        lambda m: lambda i, j: m.ravel_multi_index((i, j), (3, 4), mode="wrap", order="F"),
        (I[0], I[1])),
    "log10": (lambda m: m.log10, (np.abs(F) + 1,)),
    # -- the jitted unique, convolve and polyval (more in test_jnp_printing_7.py)
    "unique_size": (lambda m: lambda x: m.unique(x, size=4), (X,)),
    "convolve": (lambda m: m.convolve, (X, V)),
    "polyval": (lambda m: m.polyval, (V, X)),
}

X64_CASES = ["sum_tuple_axis", "var_tuple_axis", "linspace_retstep", "linspace_int",
             "linspace_axis", "logspace_base", "geomspace_axis", "histogram_weights",
             "histogram2d", "interp_period", "interp_left_right", "roll_traced", "nonzero_2d",
             "argwhere_fill", "ravel_multi_index_clip", "log10"]

# Programs still printed differently from JAX, with the cause; values are checked all the
# same.
KNOWN_DIFFERENCES: dict = {}

_KNOWN = {k: v for k, (v, _) in KNOWN_DIFFERENCES.items()}
# Programs printed as JAX's compute JAX's values; these slow ones (many small jitted
# functions, each compiled eagerly) are only compared by their printed programs.
_SLOW = {"histogram_default", "histogram_density", "histogram_int", "histogram2d",
         "histogram2d_weights", "histogram_range", "nonzero_2d", "argwhere", "flatnonzero",
         "unique_size", "where_one_arg", "roll_traced_axes", "interp_extrapolate"}
VALUE_CASES = sorted((set(CASES) | set(_KNOWN)) - _SLOW)
X64_VALUE_CASES = [k for k in X64_CASES if k not in ("histogram2d", "histogram_weights")]
globals().update(jnp_printing_tests(
    CASES, X64_CASES, _KNOWN, value_cases=VALUE_CASES, x64_value_cases=X64_VALUE_CASES,
    x64_narrow_too=False, x64_tol=1e-12))


# ---------------------------------------------------------------------------
# Values against NumPy


def test_values_like_numpy():
  np.testing.assert_allclose(np.asarray(jnp.sum(G, axis=(2, 0))), G.sum(axis=(2, 0)),
                             rtol=1e-6)
  np.testing.assert_array_equal(np.asarray(jnp.max(G, axis=(2, 0), keepdims=True)),
                                G.max(axis=(2, 0), keepdims=True))
  np.testing.assert_allclose(np.asarray(jnp.var(G, axis=(2, 0), ddof=1)),
                             G.var(axis=(2, 0), ddof=1), rtol=1e-5)
  with sc.enable_x64():
    for kw in (dict(num=7), dict(num=6, endpoint=False), dict(num=1), dict(num=0)):
      got = jnp.linspace(-1.5, 2.25, retstep=True, **kw)
      want = np.linspace(-1.5, 2.25, retstep=True, **kw)
      np.testing.assert_allclose(np.asarray(got[0]), want[0], rtol=1e-15)
      np.testing.assert_equal(float(got[1]), want[1])
    np.testing.assert_array_equal(np.asarray(jnp.linspace(0, 10, 7, dtype=int)),
                                  np.linspace(0, 10, 7, dtype=int))
    np.testing.assert_allclose(np.asarray(jnp.geomspace(-1., -1000., 4, axis=0)),
                               np.geomspace(-1., -1000., 4), rtol=1e-14)
    np.testing.assert_allclose(np.asarray(jnp.logspace(0., 3., 4, base=2.)),
                               np.logspace(0., 3., 4, base=2.), rtol=1e-14)
    x, w = X.astype(np.float64), W.astype(np.float64)
    for kw in (dict(bins=4), dict(bins=5, range=(-1., 1.)), dict(bins=3, weights=w),
               dict(bins=4, density=True)):
      got, edges = jnp.histogram(x, **kw)
      want, wedges = np.histogram(x, **kw)
      np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)
      np.testing.assert_allclose(np.asarray(edges), wedges, rtol=1e-12)
    got, ex, ey = jnp.histogram2d(x, w, (3, 2), weights=w, density=True)
    want, wx, wy = np.histogram2d(x, w, (3, 2), weights=w, density=True)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(ey), wy, rtol=1e-12)
    p = P.astype(np.float64)
    got, edges = jnp.histogramdd(p, 3, range=[(-1, 1), None, (0, 2)])
    want, wedges = np.histogramdd(p, 3, range=[(-1, 1), None, (0, 2)])
    np.testing.assert_allclose(np.asarray(got), want)
    xp = np.sort(x[:8])
    q = np.linspace(-3, 3, 13)
    np.testing.assert_allclose(np.asarray(jnp.interp(q, xp, w[:8], left=-1., right=2.)),
                               np.interp(q, xp, w[:8], left=-1., right=2.), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(jnp.interp(q, x[:8], w[:8], period=1.5)),
                               np.interp(q, x[:8], w[:8], period=1.5), rtol=1e-12)
    nz = jnp.nonzero(F > 0)
    assert nz[0].dtype == np.int64   # the default int, as JAX's
    got = sc.jit(lambda a: jnp.argwhere(a, size=12, fill_value=-1))(F > 0)
    want = np.argwhere(F > 0)
    np.testing.assert_array_equal(np.asarray(got)[:len(want)], want)
    assert (np.asarray(got)[len(want):] == -1).all()
  np.testing.assert_array_equal(np.asarray(jnp.roll(F, (1, -3), axis=(0, 1))),
                                np.roll(F, (1, -3), axis=(0, 1)))
  np.testing.assert_array_equal(np.asarray(sc.jit(jnp.roll, static_argnums=2)(
      F, np.int32(-7), None)), np.roll(F, -7))
  np.testing.assert_array_equal(np.asarray(jnp.rot90(G, 3, axes=(2, 1))),
                                np.rot90(G, 3, axes=(2, 1)))
  np.testing.assert_array_equal(np.asarray(jnp.diff(I, 2, axis=0, append=1)),
                                np.diff(I, 2, axis=0, append=1))


# ---------------------------------------------------------------------------
# Gradients: the same as JAX's, and as finite differences where smooth

GRAD_CASES = {
    "sum_tuple_axis": (lambda m: lambda x: (m.sum(x, axis=(2, 0)) ** 2).sum(), (G,)),
    "prod_tuple_axis": (lambda m: lambda x: m.prod(x, axis=(2, 1)).sum(), (G,)),
    "max_tuple_axis": (lambda m: lambda x: (m.max(x, axis=(2, 0)) ** 2).sum(), (G,)),
    "var_tuple_axis": (lambda m: lambda x: m.var(x, axis=(1, 0)).sum(), (G,)),
    "linspace": (lambda m: lambda a, b: (m.linspace(a, b, 5) ** 2).sum(), (V, V[::-1] + 1)),
    "linspace_no_endpoint": (lambda m: lambda a, b: (m.linspace(a, b, 4, endpoint=False,
                                                                axis=1) ** 2).sum(),
                             (V, V[::-1] + 1)),
    "geomspace": (lambda m: lambda a, b: m.geomspace(a, b, 4).sum(),
                  (np.abs(V) + 1, np.abs(V) + 3)),
    "interp": (lambda m: lambda x, xp, fp: (m.interp(x, xp, fp) ** 2).sum(),
               (V, np.sort(F[0]), F[1])),
    "interp_period": (lambda m: lambda x, fp: m.interp(x, F[0], fp, period=2.).sum(),
                      (V, F[1])),
    "roll_traced": (lambda m: lambda x: (m.roll(x, np.int32(1), axis=1) * F).sum(), (F,)),
    "diff": (lambda m: lambda x: (m.diff(x, 2) ** 2).sum(), (F,)),
}


globals().update(jnp_printing_tests({}, [], grad_cases=GRAD_CASES, grad_atol=1e-5))


@pytest.mark.parametrize("name", ["sum_tuple_axis", "prod_tuple_axis", "var_tuple_axis",
                                  "linspace", "geomspace", "interp"])
def test_grad_finite_differences(name):
  mk, args = GRAD_CASES[name]
  with sc.enable_x64():
    check_grads(mk(jnp), as_x64(args), order=1, modes=("fwd", "rev"))


# ---------------------------------------------------------------------------
# Errors: JAX's exception types and messages

ERROR_CASES = {
    "linspace_negative_num": lambda m: m.linspace(0, 1, -1),
    "sum_duplicate_axis": lambda m: m.sum(G, axis=(0, -3)),
    "histogram_list_bins": lambda m: m.histogram(X, [0., 1.]),
    "histogram_weights_shape": lambda m: m.histogram(X, 3, weights=W[:5]),
    "histogram_string_bins": lambda m: m.histogram_bin_edges(X, "auto"),
    "histogram_bad_range": lambda m: m.histogram_bin_edges(X, 3, range=(0., 1., 2.)),
    "histogramdd_bins": lambda m: m.histogramdd(P, (2, 3)),
    "histogramdd_range": lambda m: m.histogramdd(P, 2, range=[(0, 1)]),
    "interp_string": lambda m: m.interp(V, F[0], F[1], left="nearest"),
    "interp_shapes": lambda m: m.interp(V, F[0], F[1, :3]),
    "interp_complex_x": lambda m: m.interp(V + 1j, F[0], F[1]),
    "interp_period": lambda m: m.interp(V, F[0], F[1], period=V),
    "diff_negative": lambda m: m.diff(F, -1),
    "diff_scalar": lambda m: m.diff(np.float32(1)),
    "nonzero_scalar": lambda m: m.nonzero(np.float32(1)),
    "roll_2d_shift": lambda m: m.roll(F, m.ones((2, 2), np.int32), axis=0),
    "rot90_same_axes": lambda m: m.rot90(F, axes=(1, 1)),
    "rot90_1d": lambda m: m.rot90(V),
    "ravel_multi_index_dtype": lambda m: m.ravel_multi_index((I[0], I[1]), (3, 4), mode="clip",
                                                             dtype=np.float32),
    "ravel_multi_index_narrow": lambda m: m.ravel_multi_index(
        (I[0].astype(np.uint8), I[1].astype(np.uint8)), (30, 30), mode="clip"),
    "ravel_multi_index_mode": lambda m: m.ravel_multi_index((I[0], I[1]), (3, 4), mode="x"),
    "ravel_multi_index_float": lambda m: m.ravel_multi_index((F[0], F[1]), (3, 4), mode="clip"),
}
MESSAGE_CASES = ["linspace_negative_num", "histogram_weights_shape", "histogram_string_bins",
                 "histogramdd_bins", "interp_string", "interp_shapes", "interp_complex_x",
                 "diff_negative", "nonzero_scalar", "roll_2d_shift", "rot90_same_axes",
                 "rot90_1d", "ravel_multi_index_mode", "ravel_multi_index_float"]


globals().update(jnp_error_tests(ERROR_CASES, MESSAGE_CASES))


def test_ravel_multi_index_dtype_like_jax():
  i = I[0].astype(np.uint8) % 3
  got = jnp.ravel_multi_index((i, i), (3, 4), mode="clip")
  assert_like_jax(got, jjnp.ravel_multi_index((i, i), (3, 4), mode="clip"))
  assert got.dtype == np.uint8
  assert jnp.result_type(int, np.uint8) == np.uint8   # the Python type is weakly typed
  assert jnp.result_type(float, np.float16) == np.float16
