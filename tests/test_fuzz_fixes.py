"""Targeted checks of the mechanisms fixed for the differential fuzzer's KNOWN mismatches
(tests/test_fuzz.py): each compares stagecraft with JAX 0.10.2 in the same process (values,
dtypes, weak types, exception families and messages), x64 off and on where it matters.

Mechanisms: lexicographic complex ordering (jnp comparisons, lax reduce_max/min, cummax/
cummin, scatter-max/min, fmax/fmin, ptp, round/rint, clip's error); weak types of bool
results and of promotion (logical ops, isnan/isfinite/isreal, signbit, isposinf, rint, angle,
complex logaddexp, power's cases); Python literals wrapping to the array dtype; JAX's errors
and warnings (tensordot, pad, quantile, take, at[].add on bool, complex-to-real casts,
integer_pow); var's tangent over an empty axis.
"""
from __future__ import annotations

import warnings

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp

from _fuzz_ops import both_x64

C = np.array([1 + 1j, 2 - 1j, 1 - 3j, 1 + 2j], np.complex64)
N = np.array([1 + 1j, np.nan + 0j, 1 + np.nan * 1j, 2], np.complex64)
WI8 = np.array([-1, 0, 5, 2], np.int8)


def _outcome(fn, lib, np_):
  try:
    out = fn(lib, np_)
  except Exception as e:  # noqa: BLE001
    return "raise", (type(e).__name__, str(e).replace("stagecraft.numpy", "jax.numpy"))
  leaves = lib.tree_util.tree_leaves(out)
  return "ok", [(np.asarray(x), str(x.dtype), bool(getattr(x, "weak_type", False)))
                for x in leaves]


def assert_same(fn, x64=False, message=True):
  """fn(lib, np_) gives the same leaves (values, dtype, weak type) or error on both."""
  with both_x64(x64):
    (gk, g), (wk, w) = _outcome(fn, sc, snp), _outcome(fn, jax, jjnp)
  assert gk == wk, (g, w)
  if gk == "raise":
    assert g[0] == w[0], (g, w)
    if message:
      assert g[1] == w[1], (g, w)
    return
  assert len(g) == len(w)
  for (ga, gd, gw), (wa, wd, ww) in zip(g, w):
    assert (gd, gw) == (wd, ww), ((gd, gw), (wd, ww))
    if ga.dtype.kind in "biu":
      np.testing.assert_array_equal(ga, wa)
    else:
      np.testing.assert_allclose(ga, wa, rtol=2e-6, atol=1e-6, equal_nan=True)


# -- lexicographic complex ordering


@pytest.mark.parametrize("op", ["less", "less_equal", "greater", "greater_equal", "fmax",
                                "fmin", "maximum", "minimum"])
def test_complex_comparisons_are_lexicographic(op):
  assert_same(lambda lib, np_: getattr(np_, op)(C, N))
  assert_same(lambda lib, np_: getattr(np_, op)(C, 1 + 1j))
  assert_same(lambda lib, np_: lib.jit(getattr(np_, op))(N, C[::-1]))


def test_complex_operators():
  assert_same(lambda lib, np_: np_.asarray(C) < C[::-1])
  assert_same(lambda lib, np_: np_.asarray(N) >= C)


@pytest.mark.parametrize("op", ["max", "min", "nanmax", "nanmin", "ptp"])
def test_complex_reductions(op):
  assert_same(lambda lib, np_: getattr(np_, op)(C))
  assert_same(lambda lib, np_: getattr(np_, op)(np.stack([C, N]), axis=0))
  assert_same(lambda lib, np_: getattr(np_, op)(C.astype(np.complex128)), x64=True)


def test_lax_complex_order_matches_jax_exactly():
  # lax.max/reduce_max/cummax/scatter-max take complex numbers; lax.lt/argmax reject them.
  assert_same(lambda lib, np_: lib.lax.reduce_max(N, (0,)))
  assert_same(lambda lib, np_: lib.lax.reduce_min(C, (0,)))
  assert_same(lambda lib, np_: (lib.lax.cummax(N, 0), lib.lax.cummin(C, 0, reverse=True)))
  assert_same(lambda lib, np_: lib.vmap(lambda x: lib.lax.cummax(x, 0))(C.reshape(2, 2)))
  assert_same(lambda lib, np_: lib.lax.lt(C, C), message=False)
  idx = np.array([0, 0, 1])
  upd = np.array([2j, 1 + 1.5j, 3], np.complex64)
  assert_same(lambda lib, np_: (np_.asarray(C).at[idx].max(upd),
                                np_.asarray(N).at[idx].min(upd)))


def test_complex_max_derivatives():
  assert_same(lambda lib, np_: lib.grad(lambda x: np_.max(x).real)(C))
  assert_same(lambda lib, np_: lib.jvp(lambda x: lib.lax.cummax(x, 0), (C,), (C,)))


def test_complex_round_rint_clip():
  assert_same(lambda lib, np_: np_.round(C * 1.5))
  assert_same(lambda lib, np_: np_.round(C * 1.55, 1))
  assert_same(lambda lib, np_: np_.rint(np.complex64(1.5 + 2.5j)))
  assert_same(lambda lib, np_: np_.round(np.array([1.25, 2.35, 1e4], np.float16), 1))
  assert_same(lambda lib, np_: np_.clip(C, 0, 1), message=False)
  assert_same(lambda lib, np_: np_.clip(np.float32(3), 1j, 2), message=False)


# -- weak types


@pytest.mark.parametrize("op", ["logical_and", "logical_or", "logical_xor"])
def test_logical_ops_weak_type(op):
  wb = lambda np_: np_.less(2, 3)  # noqa: E731  a weak bool
  for args in [lambda np_: (2.5, False), lambda np_: (2, 3), lambda np_: (np_.asarray(3), 1),
               lambda np_: (wb(np_), wb(np_)), lambda np_: (wb(np_), 2),
               lambda np_: (2.5, np.array([True])), lambda np_: (True, 2)]:
    assert_same(lambda lib, np_: getattr(np_, op)(*args(np_)))


def test_weak_bool_binary_ops_are_strong():
  assert_same(lambda lib, np_: np_.less(2, 3) & np_.less(2, 3))
  assert_same(lambda lib, np_: np_.less(2, 3) == np_.less(1, 3))
  assert_same(lambda lib, np_: np_.any(np_.less(2, 3)))


@pytest.mark.parametrize("op", ["isnan", "isfinite", "isreal", "iscomplex", "signbit",
                                "isposinf", "isneginf", "rint", "angle", "isinf"])
@pytest.mark.parametrize("x64", [False, True], ids=["x32", "x64"])
def test_unary_result_types(op, x64):
  for a in [2, 2.5, 1 + 1j, True, np.complex64(np.inf), np.float16(1.5),
            np.array([1.5, -2], np.float16), np.int8(3), np.array([1], np.int8)]:
    assert_same(lambda lib, np_: getattr(np_, op)(a), x64=x64, message=False)
  assert_same(lambda lib, np_: getattr(np_, op)(np_.asarray(3)), x64=x64)


def test_angle_dtype_rule():
  assert_same(lambda lib, np_: np_.angle(np.float16(-1), deg=True))
  assert_same(lambda lib, np_: np_.angle(np.array([-1], np.float16)))
  assert_same(lambda lib, np_: np_.angle(np.array(1, jjnp.bfloat16)))


@pytest.mark.parametrize("op", ["logaddexp", "logaddexp2"])
def test_complex_logaddexp(op):
  x = np.array([1, 3 + 2j, -1 - 5j, 1e3 + 4j, np.inf, -np.inf, 2], np.complex64)
  y = np.array([2j, 3 + 2j, 1 - 5j, 2 + 3j, 1, -np.inf, np.inf + 1j], np.complex64)
  assert_same(lambda lib, np_: getattr(np_, op)(x, y))
  assert_same(lambda lib, np_: getattr(np_, op)(np.array([1], np.int16), -0.5j))
  assert_same(lambda lib, np_: getattr(np_, op)(1, -0.5j))
  assert_same(lambda lib, np_: getattr(np_, op)(np.array([1], np.int16), -0.5j), x64=True)


def test_power_cases():
  wi = lambda np_: np_.asarray(3)  # noqa: E731
  for args in [lambda np_: (3, False), lambda np_: (wi(np_), False), lambda np_: (2, 3),
               lambda np_: (3, np.int8(2)), lambda np_: (0, np.int8(0)),
               lambda np_: (3, WI8), lambda np_: (np.array([True, False]),
                                                  np.array([False, True])),
               lambda np_: (np.float32(2), np.array(-2, np.int8)), lambda np_: (2, 1j),
               lambda np_: (np.array([3, 3, -1, 0, 2], np.int32),
                            np.array([64, 65, -3, -1, 31], np.int32)),
               lambda np_: (np.array([3, 3, 0, 2], np.uint8), np.array([64, 255, 0, 7],
                                                                       np.uint8))]:
    assert_same(lambda lib, np_: np_.power(*args(np_)))
    assert_same(lambda lib, np_: lib.jit(np_.power)(*args(np_)))
  assert_same(lambda lib, np_: 3 ** np_.asarray(WI8))
  assert_same(lambda lib, np_: np_.asarray(3) ** False)
  assert_same(lambda lib, np_: np_.power(np.ones(2, np.int8), -3), message=False)
  assert_same(lambda lib, np_: np_.ones(2, np.uint8) ** -3, message=False)
  assert_same(lambda lib, np_: lib.lax.integer_pow(np.ones(3, np.int8), -1))


# -- Python literals


def test_int_literals_wrap_to_the_array_dtype():
  u = np.array([1, 2], np.uint8)
  assert_same(lambda lib, np_: np_.add(u, -3))
  assert_same(lambda lib, np_: np_.add(u, 300))
  assert_same(lambda lib, np_: np_.asarray(u) * -1)
  assert_same(lambda lib, np_: np_.maximum(u, -1))
  assert_same(lambda lib, np_: np_.add(np.int8(1), -2 ** 31))
  assert_same(lambda lib, np_: lib.nn.hard_tanh(np.array([0, 1, 5], np.uint32)))
  assert_same(lambda lib, np_: np_.add(u, 2 ** 31))
  assert_same(lambda lib, np_: np_.add(u, 2 ** 40), x64=True)


def test_float_literal_overflow_is_silent():
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert_same(lambda lib, np_: np_.add(np.ones(1, np.float16), 1e30))
    assert_same(lambda lib, np_: np_.asarray(np.float16([1])) * -1e30)


# -- errors and warnings


def test_errors_as_jax():
  assert_same(lambda lib, np_: np_.tensordot(np.float32(1), np.float32(2), axes=1))
  assert_same(lambda lib, np_: np_.pad(np.float32(1), ()), message=False)
  assert_same(lambda lib, np_: np_.pad(np.float32(1), [[1, 1]]))
  for method in ("linear", "higher", "nearest"):
    assert_same(lambda lib, np_: np_.quantile(np.zeros((0, 2), np.float32), 0.5,
                                              method=method))
  assert_same(lambda lib, np_: np_.quantile(np.zeros((0, 2), np.float32), 0.5, axis=1))
  assert_same(lambda lib, np_: np_.take(np.zeros(0, np.float32), np.array([0, 0], np.int32),
                                        mode="wrap"))
  for name in ("add", "multiply", "divide", "power"):
    assert_same(lambda lib, np_: getattr(np_.asarray(np.array([True, False])).at[0], name)(
        True))
  assert_same(lambda lib, np_: np_.asarray(np.array([True, False])).at[0].max(False))


@pytest.mark.parametrize("to", [np.uint8, np.float32, np.bool_])
def test_complex_to_real_casts_warn(to):
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert_same(lambda lib, np_: np_.asarray(np.complex64(1 + 1j)).astype(to))
    assert_same(lambda lib, np_: lib.lax.convert_element_type(np.complex64(1 + 1j), to))
    assert_same(lambda lib, np_: lib.jit(lambda x: lib.lax.convert_element_type(x, to))(
        np.complex64(1 + 1j)))
  with pytest.warns(np.exceptions.ComplexWarning):
    sc.lax.convert_element_type(np.complex64(1 + 1j), np.float32)


# -- derivatives


@pytest.mark.parametrize("ddof", [0, 1])
def test_var_tangent_is_zero_without_elements(ddof):
  x = np.zeros((0, 2), np.float32)
  assert_same(lambda lib, np_: lib.jvp(lambda x: np_.var(x, axis=0, ddof=ddof), (x,), (x,)))
  y = np.ones((1, 2), np.float32)
  assert_same(lambda lib, np_: lib.jvp(lambda x: np_.var(x, axis=0, ddof=1), (y,), (y,)))
  z = np.arange(6, dtype=np.float32).reshape(3, 2)
  assert_same(lambda lib, np_: lib.grad(lambda x: np_.var(x, ddof=ddof))(z))


def test_nanquantile_empty_axis():
  assert_same(lambda lib, np_: lib.jvp(
      lambda x: np_.nanmedian(x, axis=0, keepdims=True), (np.zeros((0, 2, 0), np.float32),),
      (np.zeros((0, 2, 0), np.float32),)))
  assert_same(lambda lib, np_: np_.nanquantile(np.zeros((0, 2), np.float32), 0.5, axis=0))
  assert_same(lambda lib, np_: np_.median(np.zeros((0, 2, 0), np.float32), axis=0))
  assert_same(lambda lib, np_: np_.nanquantile(np.zeros((0, 2), np.float32), 0.5))
  assert_same(lambda lib, np_: np_.nanquantile(np.zeros((0, 0), np.float32), 0.5, axis=0))
  # keepdims over every axis: JAX's gather error (TypeError), not the IndexError without it
  for shape in [(0,), (0, 2), (3, 0, 2)]:
    x = np.zeros(shape, np.float16)
    assert_same(lambda lib, np_: lib.jvp(lambda x: np_.nanmedian(x, keepdims=True), (x,), (x,)))
    assert_same(lambda lib, np_: np_.nanquantile(x, 0.5, keepdims=True))
