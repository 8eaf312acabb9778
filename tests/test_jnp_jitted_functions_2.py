"""More jax.numpy functions that JAX 0.10.2 jits, against JAX: heaviside, fmod, remainder,
floor_divide, divmod, fmax/fmin, copysign, signbit, trunc, rint, modf, round/around,
isclose/allclose, nan_to_num, isinf, isreal/iscomplex, angle, i0, arccosh, bitwise_count;
the nan-reductions (nansum, nanprod, nanmax, nanmin, nanmean, nanvar, nanstd,
nanargmax/nanargmin as `_nanargmax`/`_nanargmin`); ptp (`_ptp`), count_nonzero; partition,
argpartition, lexsort, sort_complex; and the `where=` argument of the reductions.

Each traced program prints JAX's (one `jit[name=...]` equation with JAX's body, Python
scalars entering as weakly typed literals); eager calls and calls under jit give JAX's
values, dtypes and weak types (x64 off and on); gradients and vmap agree with JAX's; and
bad input (lists, out-of-range axes) raises JAX's exception types.
"""
from __future__ import annotations

import re

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.test_util import check_grads

from _util import assert_like_jax, jnp_error_tests, jnp_printing_tests

_RNG = np.random.default_rng(1)
F = _RNG.standard_normal((3, 4)).astype(np.float32)
G = (_RNG.standard_normal((3, 4)) + 0.1).astype(np.float32)
I = _RNG.integers(-5, 5, (3, 4)).astype(np.int32)
I2 = _RNG.integers(1, 5, (3, 4)).astype(np.int32)
U8 = _RNG.integers(0, 9, (3, 4)).astype(np.uint8)
B = F > 0
C = (F + 1j * G).astype(np.complex64)
FNAN = np.where(F > 0.8, np.nan, F).astype(np.float32)
FNAN[1] = np.nan   # an all-NaN row
FSPECIAL = np.array([[0., -0., np.inf, -np.inf], [np.nan, 1.5, -2.5, 3.]], np.float32)
H = F.astype(np.float16)

# name -> (m -> function, args); m is jax.numpy or stagecraft.numpy.
CASES = {
    "allclose": (lambda m: m.allclose, (F, G)),
    # ufuncs
    "heaviside": (lambda m: m.heaviside, (F, G)),
    "heaviside_scalar": (lambda m: lambda x: m.heaviside(x, 0.5), (F,)),
    "heaviside_int": (lambda m: m.heaviside, (I, I2)),
    "heaviside_special": (lambda m: lambda x: m.heaviside(x, 0.5), (FSPECIAL,)),
    "fmod": (lambda m: m.fmod, (F, G)),
    "fmod_int": (lambda m: m.fmod, (I, I2 - 2)),
    "fmod_scalar": (lambda m: lambda x: m.fmod(x, 2), (F,)),
    "fmod_int_scalar": (lambda m: lambda x: m.fmod(x, 0), (I,)),
    "fmod_bool": (lambda m: m.fmod, (B, B[::-1])),
    "remainder": (lambda m: m.remainder, (F, G)),
    "remainder_int": (lambda m: m.remainder, (I, I2 - 2)),
    "remainder_uint": (lambda m: m.remainder, (U8, U8[::-1])),
    "mod_operator": (lambda m: lambda x: m.asarray(x) % 3, (I,)),
    "floor_divide": (lambda m: m.floor_divide, (F, G)),
    "floor_divide_int": (lambda m: m.floor_divide, (I, I2 - 2)),
    "floor_divide_uint": (lambda m: m.floor_divide, (U8, U8[::-1])),
    "floor_divide_operator": (lambda m: lambda x: m.asarray(x) // 2., (F,)),
    "divmod": (lambda m: m.divmod, (F, G)),
    "fmax": (lambda m: m.fmax, (FNAN, G)),
    "fmin_scalar": (lambda m: lambda x: m.fmin(x, 2), (FNAN,)),
    "copysign": (lambda m: m.copysign, (F, G)),
    "copysign_scalar": (lambda m: lambda x: m.copysign(x, -1), (F,)),
    "signbit": (lambda m: m.signbit, (FSPECIAL,)),
    "signbit_int": (lambda m: m.signbit, (I,)),
    "signbit_f16": (lambda m: m.signbit, (H,)),
    "trunc": (lambda m: m.trunc, (F * 3,)),
    "trunc_int": (lambda m: m.trunc, (I,)),
    "rint": (lambda m: m.rint, (F * 3,)),
    "rint_int": (lambda m: m.rint, (I,)),
    "rint_complex": (lambda m: m.rint, (C * 3,)),
    "modf": (lambda m: m.modf, (F * 3,)),
    "round": (lambda m: m.round, (F * 3,)),
    "round_decimals": (lambda m: lambda x: m.round(x, 2), (F,)),
    "round_negative_decimals": (lambda m: lambda x: m.round(x * 100, -1), (F,)),
    "round_int": (lambda m: lambda x: m.round(x, 1), (I,)),
    "round_complex": (lambda m: lambda x: m.round(x, 1), (C,)),
    "round_f16": (lambda m: lambda x: m.round(x, 1), (H,)),
    "around": (lambda m: lambda x: m.around(x, 1), (F,)),
    "round_method": (lambda m: lambda x: m.asarray(x).round(1), (F,)),
    "isclose": (lambda m: m.isclose, (F, G)),
    "isclose_equal_nan": (lambda m: lambda x, y: m.isclose(x, y, equal_nan=True), (FNAN, G)),
    "isclose_tolerances": (lambda m: lambda x, y: m.isclose(x, y, 0.5, 0.25), (F, G)),
    "isclose_int": (lambda m: m.isclose, (I, I2)),
    "isclose_scalar": (lambda m: lambda x: m.isclose(x, 2), (F,)),
    "isclose_broadcast": (lambda m: lambda x, y: m.isclose(x, y[0]), (F, G)),
    "isclose_special": (lambda m: lambda x: m.isclose(x, x[::-1]), (FSPECIAL,)),
    "allclose_tolerances": (lambda m: lambda x, y: m.allclose(x, y, rtol=0.5, atol=0.25),
                            (F, G)),
    "nan_to_num": (lambda m: m.nan_to_num, (FSPECIAL,)),
    "nan_to_num_int": (lambda m: m.nan_to_num, (I,)),
    "isinf": (lambda m: m.isinf, (FSPECIAL,)),
    "isinf_int": (lambda m: m.isinf, (I,)),
    "isreal": (lambda m: m.isreal, (C,)),
    "iscomplex": (lambda m: m.iscomplex, (F,)),
    "angle": (lambda m: m.angle, (C,)),
    "angle_deg_int": (lambda m: lambda x: m.angle(x, deg=True), (I,)),
    "i0": (lambda m: m.i0, (F,)),
    "arccosh": (lambda m: m.arccosh, (np.abs(F) + 1,)),
    "bitwise_count": (lambda m: m.bitwise_count, (I,)),
    # reductions
    "nansum": (lambda m: m.nansum, (FNAN,)),
    "nansum_axis_keepdims": (lambda m: lambda x: m.nansum(x, 1, keepdims=True), (FNAN,)),
    "nansum_dtype": (lambda m: lambda x: m.nansum(x, 0, dtype=np.float16), (FNAN,)),
    "nansum_int": (lambda m: lambda x: m.nansum(x, axis=0), (I,)),
    "nansum_initial_where": (lambda m: lambda x, w: m.nansum(x, 1, initial=1., where=w),
                             (FNAN, B)),
    "nanprod": (lambda m: lambda x: m.nanprod(x, axis=-1), (FNAN,)),
    "nanprod_where": (lambda m: lambda x, w: m.nanprod(x, 1, where=w), (FNAN, B)),
    "nanmax": (lambda m: m.nanmax, (FNAN,)),
    "nanmax_axis": (lambda m: lambda x: m.nanmax(x, axis=1), (FNAN,)),
    "nanmax_int": (lambda m: lambda x: m.nanmax(x, 1), (I,)),
    "nanmax_initial_where": (lambda m: lambda x, w: m.nanmax(x, 1, initial=0., where=w),
                             (FNAN, B)),
    "nanmin": (lambda m: lambda x: m.nanmin(x, axis=(0, 1), keepdims=True), (FNAN,)),
    "nanmean": (lambda m: m.nanmean, (FNAN,)),
    "nanmean_axis": (lambda m: lambda x: m.nanmean(x, 1), (FNAN,)),
    "nanmean_int": (lambda m: lambda x: m.nanmean(x, 1), (I,)),
    "nanmean_where": (lambda m: lambda x, w: m.nanmean(x, 0, where=w), (FNAN, B)),
    "nanvar": (lambda m: m.nanvar, (FNAN,)),
    "nanvar_ddof": (lambda m: lambda x: m.nanvar(x, 1, ddof=1), (FNAN,)),
    "nanvar_int": (lambda m: lambda x: m.nanvar(x, 0), (I,)),
    "nanvar_complex": (lambda m: lambda x: m.nanvar(x, 1), (C,)),
    "nanvar_mean": (lambda m: lambda x: m.nanvar(x, 1, mean=m.nanmean(x, 1, keepdims=True)),
                    (FNAN,)),
    "nanstd": (lambda m: lambda x: m.nanstd(x, 0, keepdims=True), (FNAN,)),
    "nanargmax": (lambda m: m.nanargmax, (FNAN,)),
    "nanargmax_axis": (lambda m: lambda x: m.nanargmax(x, 1, keepdims=True), (FNAN,)),
    "nanargmin_int": (lambda m: lambda x: m.nanargmin(x, 0), (I,)),
    "ptp": (lambda m: m.ptp, (F,)),
    "ptp_axis_keepdims": (lambda m: lambda x: m.ptp(x, 1, keepdims=True), (I,)),
    "ptp_method": (lambda m: lambda x: m.asarray(x).ptp(axis=0), (F,)),
    "count_nonzero": (lambda m: m.count_nonzero, (F,)),
    "count_nonzero_axis": (lambda m: lambda x: m.count_nonzero(x, axis=1, keepdims=True), (I,)),
    "count_nonzero_bool": (lambda m: lambda x: m.count_nonzero(x, 0), (B,)),
    "sum_where": (lambda m: lambda x, w: m.sum(x, 1, where=w), (F, B)),
    "sum_where_broadcast": (lambda m: lambda x, w: m.sum(x, 1, where=w[0]), (F, B)),
    "sum_bool_dtype": (lambda m: lambda x: m.sum(x, dtype=np.float32), (B,)),
    "prod_where": (lambda m: lambda x, w: m.prod(x, where=w), (F, B)),
    "max_where": (lambda m: lambda x, w: m.max(x, 0, where=w, initial=-1.), (F, B)),
    "min_where_broadcast": (lambda m: lambda x, w: m.min(x, 1, where=w[0], initial=5),
                            (I, B)),
    "any_where": (lambda m: lambda x, w: m.any(x, 0, where=w), (B, B[::-1])),
    "all_where_broadcast": (lambda m: lambda x, w: m.all(x, 1, where=w[0]), (F, B)),
    "mean_where": (lambda m: lambda x, w: m.mean(x, 1, where=w), (F, B)),
    "mean_where_broadcast": (lambda m: lambda x, w: m.mean(x, 1, where=w[:, :1]), (F, B)),
    "mean_where_int": (lambda m: lambda x, w: m.mean(x, where=w), (I, B)),
    # sorting
    "partition": (lambda m: lambda x: m.partition(x, 2), (F,)),
    "partition_axis0": (lambda m: lambda x: m.partition(x, -1, axis=0), (I,)),
    "partition_uint": (lambda m: lambda x: m.partition(x, 1), (U8,)),
    "argpartition_1d": (lambda m: lambda x: m.argpartition(x, 1), (F[0],)),
    "lexsort": (lambda m: lambda x, y: m.lexsort((x, y)), (I[0], I2[0])),
    "lexsort_axis0": (lambda m: lambda x, y: m.lexsort([x, y], axis=0), (I, F)),
    "lexsort_array": (lambda m: lambda x: m.lexsort(x), (I,)),
    "sort_complex": (lambda m: m.sort_complex, (F,)),
    "sort_complex_int": (lambda m: m.sort_complex, (I,)),
    "sort_complex_complex": (lambda m: m.sort_complex, (C,)),
    # a let-bound `_where` shared by several jit equations prints with fresh binder names
    "divmod_int": (lambda m: m.divmod, (I, I2 - 2)),
    "var_where": (lambda m: lambda x, w: m.var(x, axis=1, where=w), (F, B)),
    "nanvar_where": (lambda m: lambda x, w: m.nanvar(x, 1, where=w), (FNAN, B)),
    # (the batched scatter's dimension numbers print as JAX's np.int64s)
    "argpartition_2": (lambda m: lambda x: m.argpartition(x, 2), (F,)),
}

# Printed differently from JAX only through bugs outside these modules (see the report of
# this test file): values are checked all the same.
PRINT_XFAIL = {
}

X64_CASES = ["heaviside_scalar", "fmod_int_scalar", "remainder_int", "floor_divide",
             "isclose_scalar", "rint_int", "nanmean_int", "nanvar", "nanargmax_axis",
             "count_nonzero", "lexsort", "sort_complex_int", "mean_where_int", "round_f16",
             "nansum_initial_where"]


globals().update(jnp_printing_tests(CASES, X64_CASES, PRINT_XFAIL, rtol=2e-6, atol=1e-6))


def _assert_like(got, want, name):
  assert_like_jax(got, want, name, rtol=2e-6, atol=1e-6)


# Python scalars (weak types) in and out.
SCALAR_CASES = {
    "heaviside": (lambda m: m.heaviside(0.5, 1.), lambda m: m.heaviside(-1, 0.5)),
    "fmod": (lambda m: m.fmod(7, 3), lambda m: m.fmod(7.5, 2)),
    "remainder": (lambda m: m.remainder(-7, 3), lambda m: m.remainder(-7.5, 2.)),
    "floor_divide": (lambda m: m.floor_divide(-7, 2), lambda m: m.floor_divide(1., 0.1)),
    "divmod": (lambda m: m.divmod(-7, 2), lambda m: m.divmod(-7.5, 2.)),
    "fmax": (lambda m: m.fmax(1., np.nan), lambda m: m.fmin(np.float32(1), 2)),
    "copysign": (lambda m: m.copysign(2., -0.), lambda m: m.copysign(3, 1)),
    "signbit": (lambda m: m.signbit(-0.), lambda m: m.signbit(3)),
    "trunc": (lambda m: m.trunc(-2.5), lambda m: m.trunc(7)),
    "rint": (lambda m: m.rint(2.5), lambda m: m.rint(3)),
    "modf": (lambda m: m.modf(-2.5), lambda m: m.modf(3)),
    "round": (lambda m: m.round(2.567, 2), lambda m: m.round(7)),
    "isclose": (lambda m: m.isclose(1., 1. + 1e-7), lambda m: m.allclose(1, 1.)),
    "nan_to_num": (lambda m: m.nan_to_num(np.nan), lambda m: m.nan_to_num(-np.inf, neginf=-1.)),
    "isinf": (lambda m: m.isinf(np.inf), lambda m: m.isinf(1)),
    "isreal": (lambda m: m.isreal(1.), lambda m: m.iscomplex(1j)),
    "angle": (lambda m: m.angle(1j), lambda m: m.angle(-1., deg=True)),
    "i0": (lambda m: m.i0(1.), lambda m: m.arccosh(2.)),
    "nansum": (lambda m: m.nansum(2.), lambda m: m.nanmax(3)),
    "nanmean": (lambda m: m.nanmean(2.), lambda m: m.nanvar(3.)),
    "nanargmax": (lambda m: m.nanargmax(np.float32(2)), lambda m: m.nanargmin(3.)),
    "ptp": (lambda m: m.ptp(2.), lambda m: m.count_nonzero(3.)),
    "sort_complex": (lambda m: m.sort_complex(np.array([3., 1., 2.])),
                     lambda m: m.lexsort([np.array([1, 0])])),
}


@pytest.mark.parametrize("name", sorted(SCALAR_CASES))
def test_python_scalars_like_jax(name):
  for f in SCALAR_CASES[name]:
    _assert_like(f(jnp), f(jjnp), name)


def test_jitted_functions_print_their_jax_names():
  cases = {"heaviside": lambda x: jnp.heaviside(x, 0.5), "fmod": lambda x: jnp.fmod(x, 2.),
           "nansum": jnp.nansum, "nanprod": jnp.nanprod, "nanmax": jnp.nanmax,
           "nanmin": jnp.nanmin, "nanmean": jnp.nanmean, "nanvar": jnp.nanvar,
           "nanstd": jnp.nanstd, "_nanargmax": jnp.nanargmax, "_nanargmin": jnp.nanargmin,
           "_ptp": jnp.ptp, "count_nonzero": jnp.count_nonzero, "round": jnp.round,
           "around": jnp.around, "isclose": lambda x: jnp.isclose(x, 1.),
           "allclose": lambda x: jnp.allclose(x, 1.), "partition": lambda x: jnp.partition(x, 1),
           "argpartition": lambda x: jnp.argpartition(x, 1),
           "lexsort": lambda x: jnp.lexsort((x,)), "remainder": lambda x: x % 2.,
           "floor_divide": lambda x: x // 2.}
  for name, f in cases.items():
    text = str(sc.make_jaxpr(f)(F[0]))
    assert re.search(rf"jit\[\s*name={name}\b", text), (name, text)


# Gradients: the same as JAX's, and (where smooth) as finite differences.
GRAD_CASES = {
    "heaviside": (lambda m: lambda x: m.heaviside(x, x * 2).sum(), (F,)),
    "fmod": (lambda m: lambda x, y: m.fmod(x, y).sum(), (F, G)),
    "remainder": (lambda m: lambda x, y: m.remainder(x, y).sum(), (F, G)),
    "fmax": (lambda m: lambda x, y: m.fmax(x, y).sum(), (F, G)),
    "copysign": (lambda m: lambda x, y: m.copysign(x, y).sum(), (F, G)),
    "round": (lambda m: lambda x: (m.round(x, 1) * x).sum(), (F,)),
    "modf": (lambda m: lambda x: m.modf(x * 3)[0].sum(), (F,)),
    "nan_to_num": (lambda m: lambda x: m.nan_to_num(x * x).sum(), (F,)),
    "i0": (lambda m: lambda x: m.i0(x).sum(), (F,)),
    "nansum": (lambda m: lambda x: m.nansum(x * x), (FNAN,)),
    "nanprod": (lambda m: lambda x: m.nanprod(x, 1).sum(), (FNAN,)),
    "nanmax": (lambda m: lambda x: m.nanmax(x, 0).sum(), (F,)),
    "nanmean": (lambda m: lambda x: m.nanmean(x, 1).sum(), (F,)),
    "nanvar": (lambda m: lambda x: m.nanvar(x, 1).sum(), (FNAN,)),
    "nanstd": (lambda m: lambda x: m.nanstd(x, 1, ddof=1).sum(), (F,)),
    "ptp": (lambda m: lambda x: m.ptp(x, 1).sum(), (F,)),
    "mean_where": (lambda m: lambda x: m.mean(x, 1, where=B).sum(), (F,)),
    "partition": (lambda m: lambda x: (m.partition(x, 2) * F).sum(), (F,)),
}


globals().update(jnp_printing_tests({}, [], grad_cases=GRAD_CASES, grad_atol=1e-6))


@pytest.mark.parametrize("name", ["nanmean", "nanstd", "fmax", "copysign", "i0"])
def test_grad_finite_differences(name):
  mk, args = GRAD_CASES[name]
  args = tuple(np.asarray(a, np.float64) for a in args)
  with sc.enable_x64():
    check_grads(mk(jnp), args, order=1, modes=("fwd", "rev"))


VMAP_CASES = {
    "heaviside": (lambda m: lambda x: m.heaviside(x, 0.5), (F,)),
    "fmod": (lambda m: lambda x, y: m.fmod(x, y), (I, I2)),
    "isclose": (lambda m: lambda x, y: m.allclose(x, y, rtol=0.5), (F, G)),
    "nanvar": (lambda m: lambda x: m.nanvar(x), (FNAN,)),
    "nanargmin": (lambda m: lambda x: m.nanargmin(x), (FNAN,)),
    "count_nonzero": (lambda m: lambda x: m.count_nonzero(x), (I,)),
    "partition": (lambda m: lambda x: m.partition(x, 1), (F,)),
    "argpartition": (lambda m: lambda x: m.argpartition(x, 1), (F,)),
    "lexsort": (lambda m: lambda x, y: m.lexsort((x, y)), (I, I2)),
    "round": (lambda m: lambda x: m.round(x, 1), (F,)),
}


@pytest.mark.parametrize("name", sorted(VMAP_CASES))
def test_vmap_like_jax(name):
  mk, args = VMAP_CASES[name]
  _assert_like(sc.vmap(mk(jnp))(*args), jax.vmap(mk(jjnp))(*args), name)


ERROR_CASES = {
    "heaviside_list": lambda m: m.heaviside([1., 2.], 0.5),
    "fmod_list": lambda m: m.fmod([1, 2], 2),
    "remainder_list": lambda m: m.remainder(2, [1, 2]),
    "floor_divide_complex": lambda m: m.floor_divide(np.ones(2, np.complex64), 1),
    "copysign_complex": lambda m: m.copysign(np.ones(2, np.complex64), 1.),
    "round_list": lambda m: m.round([1.5]),
    "round_int_negative": lambda m: m.round(np.arange(3), -1),
    "round_bool": lambda m: m.round(np.array([True])),
    "round_float_decimals": lambda m: m.round(F, 1.5),
    "isclose_list": lambda m: m.isclose([1.], 1.),
    "allclose_list": lambda m: m.allclose(F, [1.]),
    "signbit_complex": lambda m: m.signbit(C),
    "nansum_list": lambda m: m.nansum([1., 2.]),
    "nansum_axis": lambda m: m.nansum(F, axis=2),
    "nanmax_where_no_initial": lambda m: m.nanmax(F, where=B),
    "nanmean_list": lambda m: m.nanmean([1., 2.]),
    "nanmean_where_int": lambda m: m.nanmean(F, where=I),
    "nanvar_axis": lambda m: m.nanvar(F, axis=-3),
    "nanvar_out": lambda m: m.nanvar(F, out=F),
    "nanstd_list": lambda m: m.nanstd([1., 2.]),
    "nanargmax_list": lambda m: m.nanargmax([1., 2.]),
    "nanargmin_float_axis": lambda m: m.nanargmin(F, axis=1.),
    "ptp_list": lambda m: m.ptp([1., 2.]),
    "ptp_axis": lambda m: m.ptp(F, 5),
    "count_nonzero_list": lambda m: m.count_nonzero([1, 0]),
    "count_nonzero_axis": lambda m: m.count_nonzero(F, 2),
    "partition_list": lambda m: m.partition([3, 1, 2], 1),
    "partition_kth": lambda m: m.partition(F, 4),
    "partition_axis": lambda m: m.partition(F, 1, axis=2),
    "partition_complex": lambda m: m.partition(C, 1),
    "argpartition_complex": lambda m: m.argpartition(C, 1),
    "lexsort_empty": lambda m: m.lexsort(()),
    "lexsort_shapes": lambda m: m.lexsort((F[0], F[:, 0])),
    "lexsort_list_key": lambda m: m.lexsort(([1, 2], [2, 1])),
    "sort_complex_list": lambda m: m.sort_complex([3., 1.]),
}


globals().update(jnp_error_tests(ERROR_CASES, either_type=True))


def test_out_of_range_axis_of_nanargmax_is_a_value_error():
  # NB: as stagecraft's argmax; JAX's argmax and nanargmax raise an accidental IndexError.
  with pytest.raises(ValueError, match="out of bounds"):
    jnp.nanargmax(F, axis=2)


def test_list_axis_of_a_jitted_reduction_like_jax():
  with pytest.raises(ValueError, match="Non-hashable static arguments"):
    jnp.nansum(F, axis=[0])


def test_error_messages_like_jax():
  with pytest.raises(TypeError, match="nansum requires ndarray or scalar arguments"):
    jnp.nansum([1., 2.])
  with pytest.raises(TypeError, match="isclose requires ndarray or scalar arguments"):
    jnp.isclose([1.], 1.)
  with pytest.raises(NotImplementedError,
                     match="integer np.round not implemented for decimals < 0"):
    jnp.round(np.arange(3), -1)
  with pytest.raises(NotImplementedError, match="partition for complex dtype"):
    jnp.partition(C, 1)
  with pytest.raises(ValueError, match="does not have an identity"):
    jnp.nanmax(F, where=B)
