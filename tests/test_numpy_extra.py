"""The rest of the stagecraft.numpy surface against NumPy (values) and jax.numpy (result
dtypes and weak types, via `jax.eval_shape`, which traces without compiling): more ufuncs,
shape functions, cumulative and NaN-ignoring reductions, sorting and set operations,
statistics, polynomials and contractions; eager and staged (`staged_call`), edge cases and
error messages."""
import os
import sys
import warnings
from typing import Callable, NamedTuple

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

sys.path.insert(0, os.path.dirname(__file__))
from _util import staged_call  # noqa: E402

import stagecraft as sc  # noqa: E402
import stagecraft.numpy as jnp  # noqa: E402
from stagecraft import core  # noqa: E402
from stagecraft.interpreters import partial_eval as pe  # noqa: E402
from stagecraft.runtime.array import Array  # noqa: E402

from _cases import b1, bf16, c64, f16, f32, i8, i32, u8  # noqa: E402
RNG = np.random.default_rng(0)


def rand(shape, dtype=f32, lo=-3, hi=3, rng=RNG):
  dtype = np.dtype(dtype)
  if dtype == b1:
    return rng.random(shape) < 0.5
  if dtype.kind in "iu":
    return rng.integers(max(lo, np.iinfo(dtype).min), hi + 1, shape).astype(dtype)
  if dtype.kind == "c":
    return (rng.uniform(lo, hi, shape) + 1j * rng.uniform(lo, hi, shape)).astype(dtype)
  return rng.uniform(lo, hi, shape).astype(dtype)


def _leaves(x):
  return list(x) if isinstance(x, (tuple, list)) else [x]


def _f64(x):
  x = np.asarray(x)
  return x.astype(np.float64) if x.dtype in (f16, bf16, f32) else (
      x.astype(np.complex128) if x.dtype == c64 else x)


def assert_close(got, want, rtol, atol):
  got, want = np.asarray(got), np.asarray(want)
  assert got.shape == want.shape, (got.shape, want.shape)
  if got.dtype.kind in "fc" or got.dtype == bf16:
    np.testing.assert_allclose(_f64(got), _f64(want), rtol=rtol, atol=atol, equal_nan=True)
  else:
    np.testing.assert_array_equal(got, want.astype(got.dtype))


def assert_like_jax(fn, args, got):
  """dtype and weak type as jax.numpy's (traced with jax.eval_shape: no compilation)."""
  jargs = [jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype) if isinstance(
      a, np.ndarray) else a for a in args]
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    want = jax.eval_shape(lambda *a: fn(jjnp, *a), *jargs)
  want = jax.tree_util.tree_leaves(want)
  got = _leaves(got)
  assert len(got) == len(want)
  for g, w in zip(got, want):
    assert (g.shape, g.dtype, g.weak_type) == (w.shape, w.dtype, w.weak_type), (g.aval, w)


class Case(NamedTuple):
  name: str
  fn: Callable            # fn(module, *args): the same code runs on jnp, np and jax.numpy
  args: tuple
  np_fn: Callable | None = None   # NumPy reference when `fn(np, ...)` does not apply
  rtol: float = 2e-6
  atol: float = 1e-6
  jax_dtype: bool = True


A23 = rand((2, 3))
A34 = rand((3, 4))
I6 = rand((6,), i32, -9, 9)
U6 = rand((6,), u8, 0, 9)
F6 = rand((6,))
B6 = rand((6,), b1)
SPECIAL = np.array([0., -0., 1.5, -2., np.inf, -np.inf, np.nan, 3.], np.float32)
C4 = rand((4,), c64)

UFUNCS = [
    Case("logaddexp", lambda m, x, y: m.logaddexp(x, y), (F6, SPECIAL[:6])),
    Case("logaddexp inf", lambda m, x, y: m.logaddexp(x, y),
         (SPECIAL, SPECIAL[::-1].copy())),
    Case("logaddexp int", lambda m, x: m.logaddexp(x, 2), (I6,)),
    Case("logaddexp2", lambda m, x, y: m.logaddexp2(x, y), (SPECIAL, F6[:1])),
    Case("hypot", lambda m, x, y: m.hypot(x, y), (SPECIAL, SPECIAL[::-1].copy())),
    Case("hypot big", lambda m, x: m.hypot(x, x), (np.float32([3e30, 1e-30, 0]),)),
    Case("deg2rad", lambda m, x: m.deg2rad(x), (I6,)),
    Case("rad2deg", lambda m, x: m.rad2deg(x), (F6,)),
    Case("radians/degrees", lambda m, x: m.degrees(m.radians(x)), (F6,), rtol=1e-5),
    Case("sinc", lambda m, x: m.sinc(x), (np.float32([0, 0.5, 1, -2.5, 1e-8]),)),
    Case("heaviside", lambda m, x: m.heaviside(x, 0.5), (SPECIAL,)),
    Case("divmod", lambda m, x, y: m.divmod(x, y), (I6, np.int32([3, -3, 2, -2, 5, 7]))),
    Case("divmod float", lambda m, x: m.divmod(x, 0.75), (F6,)),
    Case("float_power", lambda m, x: m.float_power(x, 2), (I6,)),
    Case("gcd", lambda m, x, y: m.gcd(x, y), (np.int32([12, -18, 0, 0, 7, 2**30]),
                                             np.int32([18, 12, 5, 0, -21, 3 * 2**20]))),
    Case("gcd int8", lambda m, x, y: m.gcd(x, y), (np.int8([-128, 100, 64]),
                                                  np.int8([64, -75, 0]))),
    Case("lcm", lambda m, x, y: m.lcm(x, y), (np.int32([4, -6, 0, 7]), np.int32([6, 4, 3, 5]))),
    Case("left_shift", lambda m, x, y: m.left_shift(x, y), (I6, np.int32([0, 1, 2, 3, 4, 5]))),
    Case("right_shift", lambda m, x: m.right_shift(x, 1), (I6,)),
    Case("right_shift uint", lambda m, x: m.right_shift(x, np.uint8(2)), (U6,)),
    Case("bitwise_count", lambda m, x: m.bitwise_count(x), (I6,)),
    Case("bitwise_count uint", lambda m, x: m.bitwise_count(x), (U6,)),
    Case("isclose", lambda m, x, y: m.isclose(x, y), (SPECIAL, SPECIAL[::-1].copy())),
    Case("isclose equal_nan", lambda m, x: m.isclose(x, x, equal_nan=True), (SPECIAL,)),
    Case("isclose tol", lambda m, x: m.isclose(x, x + 0.01, rtol=0, atol=0.02), (F6,)),
    Case("isclose int", lambda m, x: m.isclose(x, 3), (I6,)),
    Case("allclose", lambda m, x: m.allclose(x, x + 1e-9), (F6,)),
    Case("array_equal", lambda m, x: m.array_equal(x, x), (SPECIAL,)),
    Case("array_equal nan", lambda m, x: m.array_equal(x, x, equal_nan=True), (SPECIAL,)),
    Case("array_equal shapes", lambda m, x: m.array_equal(x, x[:3]), (F6,)),
    Case("array_equiv", lambda m, x: m.array_equiv(x, x[:1]), (np.float32([[1, 1]]),)),
    Case("array_equiv no", lambda m, x: m.array_equiv(x, x[:2]), (F6,), jax_dtype=False),
    Case("real", lambda m, x: m.real(x), (C4,)),
    Case("imag", lambda m, x: m.imag(x), (C4,)),
    Case("real of real", lambda m, x: (m.real(x), m.imag(x)), (I6,)),
    Case("conj", lambda m, x: m.conj(x), (C4,)),
    Case("conjugate real", lambda m, x: m.conjugate(x), (F6,)),
    Case("angle", lambda m, x: m.angle(x), (C4,)),
    Case("angle deg", lambda m, x: m.angle(x, deg=True), (F6,), rtol=1e-5),
    Case("copysign", lambda m, x, y: m.copysign(x, y), (F6, SPECIAL[:6])),
    Case("signbit", lambda m, x: m.signbit(x), (SPECIAL,)),
    Case("signbit int", lambda m, x: m.signbit(x), (I6,)),
    Case("signbit bf16", lambda m, x: m.signbit(x), (SPECIAL.astype(bf16),)),
    Case("fabs", lambda m, x: m.fabs(x), (I6,)),
    Case("isposinf isneginf", lambda m, x: (m.isposinf(x), m.isneginf(x)), (SPECIAL,)),
    Case("fmax fmin", lambda m, x, y: (m.fmax(x, y), m.fmin(x, y)),
         (SPECIAL, SPECIAL[::-1].copy())),
    Case("nan_to_num", lambda m, x: m.nan_to_num(x), (SPECIAL,)),
    Case("nan_to_num args", lambda m, x: m.nan_to_num(x, nan=-1.0, posinf=9.0, neginf=-9.0),
         (SPECIAL,)),
    Case("nan_to_num int", lambda m, x: m.nan_to_num(x), (I6,)),
    Case("nan_to_num complex", lambda m, x: m.nan_to_num(x),
         (np.complex64([complex(np.nan, np.inf), 1 + 2j]),)),
    Case("ldexp", lambda m, x, e: m.ldexp(x, e), (F6, np.int32([0, 1, -3, 10, -140, 127]))),
    Case("frexp", lambda m, x: m.frexp(x), (np.float32([0., -0., 1., -3.5, 1e-37, np.inf,
                                                        1e30, 0.75, -np.inf, np.nan]),)),
    Case("modf", lambda m, x: m.modf(x), (SPECIAL[:4],)),
    Case("spacing", lambda m, x: m.spacing(x), (np.float32([1., -2., 0., 1e-3]),)),
    Case("pow concat acos", lambda m, x: (m.pow(x, 2), m.concat([x, x]), m.acos(x / 4)), (F6,)),
    Case("isreal iscomplex", lambda m, x: (m.isreal(x), m.iscomplex(x)),
         (np.complex64([1, 1j, 0]),)),
]

SHAPES = [
    Case("flip", lambda m, x: (m.flip(x), m.flip(x, 1), m.flip(x, (0, 1))), (A23,)),
    Case("fliplr flipud", lambda m, x: (m.fliplr(x), m.flipud(x)), (A23,)),
    Case("rot90", lambda m, x: [m.rot90(x, k) for k in range(-1, 4)], (A23,)),
    Case("rot90 axes", lambda m, x: m.rot90(x, 1, (2, 0)), (rand((2, 3, 4)),)),
    Case("roll", lambda m, x: (m.roll(x, 2), m.roll(x, -1, 1), m.roll(x, (1, 2), (0, 1))),
         (A34,)),
    Case("roll big", lambda m, x: m.roll(x, 7, axis=0), (A34,)),
    Case("rollaxis", lambda m, x: (m.rollaxis(x, 2), m.rollaxis(x, 0, 2)), (rand((2, 3, 4)),)),
    Case("tile", lambda m, x: (m.tile(x, 2), m.tile(x, (2, 1, 2)), m.tile(x, (0, 1))), (A23,)),
    Case("repeat", lambda m, x: (m.repeat(x, 2), m.repeat(x, 3, axis=1),
                                 m.repeat(x, np.int32([1, 0, 2]), axis=1)), (A23,)),
    Case("repeat scalar", lambda m, x: m.repeat(x, 3), (np.float32(2.5),)),
    Case("split", lambda m, x: (m.split(x, 2, axis=1), m.split(x, [1, 3], axis=1),
                                m.array_split(x, 3, axis=1)), (A34,)),
    Case("hvdsplit", lambda m, x: (m.hsplit(x, 2), m.vsplit(x, 3), m.dsplit(x[:, :, None], 1)),
         (A34,)),
    Case("stacks", lambda m, x, y: (m.hstack([x, y]), m.vstack([x, y]), m.dstack([x, y]),
                                   m.column_stack([x, y])), (F6, I6)),
    Case("stacks 2d", lambda m, x: (m.hstack([x, x]), m.vstack([x, x]), m.dstack([x, x])),
         (A23,)),
    Case("atleast", lambda m, x, y: (m.atleast_2d(x), m.atleast_3d(x), m.atleast_3d(y),
                                    m.atleast_2d(x, y)), (np.float32(1.0), A23)),
    Case("tri", lambda m: (m.tri(3), m.tri(2, 4, 1, dtype=np.int32), m.tri(3, k=-1)), ()),
    Case("tril triu", lambda m, x: (m.tril(x), m.triu(x, 1), m.tril(x, -1)),
         (rand((2, 3, 4)),)),
    Case("diagonal", lambda m, x: (m.diagonal(x), m.diagonal(x, 1), m.diagonal(x, -1),
                                   m.diagonal(x, 5)), (A34,)),
    Case("diagonal axes", lambda m, x: m.diagonal(x, 1, 2, 0), (rand((2, 3, 4)),)),
    Case("diag", lambda m, x: (m.diag(x), m.diag(x, 2), m.diag(x, -1)), (F6[:3],)),
    Case("diag 2d", lambda m, x: (m.diag(x), m.diag(x, 1), m.diagflat(x)), (A34,)),
    Case("trace", lambda m, x: (m.trace(x), m.trace(x, 1), m.trace(x, -1)), (A34,)),
    Case("trace int", lambda m, x: m.trace(x.reshape(2, 3)), (np.int8([1, 2, 3, 4, 5, 6]),)),
    Case("meshgrid", lambda m, x, y: (m.meshgrid(x, y), m.meshgrid(x, y, indexing="ij"),
                                      m.meshgrid(x, y, sparse=True)), (F6[:3], I6[:2])),
    Case("indices", lambda m: (m.indices((2, 3)), m.indices((2, 3), sparse=True)), ()),
    Case("empty", lambda m: (m.empty((2,)) * 0, m.empty_like(np.int8([1, 2])) * 0), ()),
    Case("logspace", lambda m: (m.logspace(0, 2, 5), m.logspace(0, 3, 4, base=2.0,
                                                                 endpoint=False)), (),
         rtol=1e-5),
    Case("geomspace", lambda m: (m.geomspace(1, 1000, 4), m.geomspace(-1, -16, 5)), (),
         rtol=1e-5),
    Case("diff", lambda m, x: (m.diff(x), m.diff(x, 2, axis=0), m.diff(x, prepend=0.0),
                               m.diff(x, axis=0, append=x[:1])), (A34,), rtol=1e-5),
    Case("diff bool", lambda m, x: m.diff(x), (B6,)),
    Case("ediff1d", lambda m, x: (m.ediff1d(x), m.ediff1d(x, to_end=np.int32([9, 9]), to_begin=-1)),
         (A23,), rtol=1e-5),
    Case("pad constant", lambda m, x: (m.pad(x, 1), m.pad(x, ((1, 2), (0, 3)),
                                                        constant_values=((1, 2), (3, 4)))),
         (A23,)),
    Case("pad edge", lambda m, x: m.pad(x, ((2, 1), (1, 3)), mode="edge"), (A23,)),
    Case("pad reflect", lambda m, x: (m.pad(x, ((2, 5), (1, 3)), mode="reflect"),
                                      m.pad(x, 3, mode="reflect", reflect_type="odd")),
         (A23,), rtol=1e-5, atol=1e-5),
    Case("pad symmetric", lambda m, x: (m.pad(x, ((3, 5), (1, 4)), mode="symmetric"),
                                        m.pad(x, 2, mode="symmetric", reflect_type="odd")),
         (A23,), rtol=1e-5, atol=1e-5),
    Case("pad wrap", lambda m, x: m.pad(x, ((3, 5), (7, 1)), mode="wrap"), (A23,)),
    Case("pad stats", lambda m, x: (m.pad(x, 2, mode="maximum"), m.pad(x, 1, mode="mean"),
                                    m.pad(x, 2, mode="minimum", stat_length=1)), (A23,),
         rtol=1e-5),
    Case("pad int mean", lambda m, x: m.pad(x, 2, mode="mean"), (I6,)),
    Case("pad linear_ramp", lambda m, x: m.pad(x, (2, 3), mode="linear_ramp",
                                               end_values=(5, -1)), (F6,), rtol=1e-5),
    Case("pad empty/0d", lambda m, x: (m.pad(x, 0), m.pad(np.float32(3), 2)), (A23,)),
    Case("unstack", lambda m, x: m.unstack(x, axis=1), (A23,), np_fn=lambda x: tuple(x.T)),
]

REDUCTIONS = [
    Case("cumsum", lambda m, x: (m.cumsum(x), m.cumsum(x, 1), m.cumsum(x, 0, dtype=np.int32)),
         (A34,), rtol=1e-5),
    Case("cumsum int8", lambda m, x: (m.cumsum(x), m.cumprod(x)), (np.int8([1, 2, 3, -4]),)),
    Case("cumsum bool", lambda m, x: (m.cumsum(x), m.cumsum(x, dtype=bool)), (B6,)),
    Case("cumprod", lambda m, x: m.cumprod(x, axis=0), (A34,), rtol=1e-5),
    Case("nancumsum", lambda m, x: (m.nancumsum(x), m.nancumprod(x)), (SPECIAL[[0, 2, 3, 6, 7]],)),
    Case("cumulative_sum", lambda m, x: (m.cumulative_sum(x, axis=1),
                                         m.cumulative_sum(x, axis=0, include_initial=True)),
         (rand((2, 3), i8),)),
    Case("cumulative_prod", lambda m, x: m.cumulative_prod(x, include_initial=True), (F6,),
         rtol=1e-5),
    Case("nansum nanprod", lambda m, x: (m.nansum(x), m.nanprod(x), m.nansum(x, 0),
                                         m.nanprod(x, 1, keepdims=True)),
         (np.where(RNG.random((3, 4)) < 0.3, np.nan, A34).astype(f32),), rtol=1e-5),
    Case("nanmax nanmin", lambda m, x: (m.nanmax(x), m.nanmin(x, 0), m.nanmax(x, 1)),
         (np.float32([[np.nan, 1, 2], [np.nan, np.nan, np.nan]]),)),
    Case("nanmean nanvar nanstd", lambda m, x: (m.nanmean(x), m.nanmean(x, 1),
                                                m.nanvar(x, 0), m.nanstd(x, 1, ddof=1)),
         (np.float32([[np.nan, 1, 2], [4, np.nan, 7], [1, 2, 3]]),), rtol=1e-5),
    Case("nanmean int", lambda m, x: (m.nanmean(x), m.nansum(x), m.nanmax(x)), (I6,)),
    Case("nanargmax nanargmin", lambda m, x: (m.nanargmax(x, 1), m.nanargmin(x, 1),
                                              m.nanargmax(x)),
         (np.float32([[np.nan, 1, 2], [4, np.nan, 7]]),)),
    Case("count_nonzero", lambda m, x: (m.count_nonzero(x), m.count_nonzero(x, 0),
                                        m.count_nonzero(x, 1, keepdims=True)),
         (np.float32([[0, 1, -0.], [np.nan, 0, 2]]),)),
    Case("var std complex", lambda m, x: (m.var(x), m.std(x, ddof=1)), (C4,), rtol=1e-5),
    Case("ptp", lambda m, x: (m.ptp(x), m.ptp(x, 1)), (A34,)),
    Case("average", lambda m, x, w: (m.average(x), m.average(x, 1, w),
                                     m.average(x, 1, w, returned=True),
                                     m.average(x, (0, 1), x, returned=True)), (A34, F6[:4]),
         rtol=1e-5, atol=1e-5),
    Case("average int", lambda m, x: m.average(x), (I6,)),
]

SORTING = [
    Case("sort", lambda m, x: (m.sort(x), m.sort(x, 0), m.sort(x, None)), (A34,)),
    Case("sort special", lambda m, x: (m.sort(x), m.argsort(x, stable=True)), (SPECIAL,)),
    Case("sort descending", lambda m, x: m.sort(x, descending=True), (I6,),
         np_fn=lambda x: np.sort(x)[::-1]),
    Case("argsort", lambda m, x: (m.argsort(x), m.argsort(x, 0), m.argsort(x, None)),
         (rand((3, 4), i32, 0, 3),), np_fn=lambda x: (np.argsort(x, kind="stable"),
                                                     np.argsort(x, 0, kind="stable"),
                                                     np.argsort(x, None, kind="stable"))),
    Case("argsort descending", lambda m, x: m.argsort(x, descending=True), (I6 % 3,),
         np_fn=lambda x: np.argsort(-x, kind="stable")),
    Case("argsort bool", lambda m, x: m.argsort(x), (B6,),
         np_fn=lambda x: np.argsort(x, kind="stable")),
    Case("sort complex", lambda m, x: (m.sort(x), m.sort_complex(x.real)),
         (np.complex64([1 + 2j, 1 - 1j, -3j, 2]),)),
    Case("lexsort", lambda m, a, b: (m.lexsort((a, b)), m.lexsort([a])),
         (rand((8,), i32, 0, 2), rand((8,), i32, 0, 2))),
    Case("searchsorted", lambda m, a, v: (m.searchsorted(a, v), m.searchsorted(a, v, "right")),
         (np.float32([-np.inf, -1, 0, 0, 2, np.nan]), SPECIAL)),
    Case("searchsorted sorter", lambda m, a, v: m.searchsorted(a, v, sorter=np.argsort(a)),
         (np.int32([3, 1, 2]), np.int32([[0, 2], [4, 1]]))),
    Case("searchsorted promote", lambda m, a: m.searchsorted(a, 1.5), (np.int32([1, 2, 3]),)),
    Case("digitize", lambda m, x: (m.digitize(x, np.float32([0, 1, 2])),
                                   m.digitize(x, np.float32([2, 1, 0]), right=True)),
         (np.float32([-1, 0, 0.5, 1, 2, 3]),)),
    Case("unique", lambda m, x: m.unique(x, return_index=True, return_inverse=True,
                                         return_counts=True), (rand((3, 4), i32, 0, 4),)),
    Case("unique nan", lambda m, x: m.unique(x, return_counts=True),
         (np.float32([np.nan, 1, np.nan, -0., 0., 1]),)),
    Case("unique nan unequal", lambda m, x: m.unique(x, equal_nan=False),
         (np.float32([np.nan, 1, np.nan]),)),
    Case("unique axis", lambda m, x: m.unique(x, axis=0, return_counts=True,
                                              return_inverse=True),
         (np.int32([[1, 2], [0, 5], [1, 2], [0, 1]]),)),
    Case("unique empty", lambda m, x: m.unique(x, return_counts=True),
         (np.zeros((0,), f32),)),
    Case("isin", lambda m, x: (m.isin(x, np.int32([1, 3, 5])), m.isin(x, np.int32([[3]]), invert=True)),
         (rand((2, 3), i32, 0, 5),)),
    Case("union/intersect/setdiff", lambda m, a, b: (m.union1d(a, b), m.intersect1d(a, b),
                                                     m.setdiff1d(a, b)),
         (np.int32([5, 1, 3, 3, 7]), np.int32([3, 4, 1, 1]))),
    Case("partition", lambda m, x: m.sort(m.partition(x, 2)[:3]), (rand((7,)),),
         np_fn=lambda x: np.sort(x)[:3]),
    Case("median", lambda m, x: (m.median(x), m.median(x, 1, keepdims=True)),
         (A34,)),
    Case("median int nan", lambda m, x, y: (m.median(x), m.median(y)),
         (I6, SPECIAL)),
    Case("quantile", lambda m, x: (m.quantile(x, 0.3), m.quantile(x, np.float32([0.0, 0.25, 1.0]), 1),
                                   m.quantile(x, 0.5, (0, 1), keepdims=True)),
         (A34,), rtol=1e-5),
    Case("quantile methods", lambda m, x: [m.quantile(x, np.float32([0.1, 0.33, 0.8]), method=k) for k in
                                           ("lower", "higher", "midpoint", "nearest")],
         (F6,)),
    Case("percentile", lambda m, x: (m.percentile(x, 30), m.percentile(x, np.int32([10, 90]), axis=0)),
         (A34,), rtol=1e-5),
    Case("nanquantile", lambda m, x: (m.nanquantile(x, 0.5, 1), m.nanmedian(x),
                                      m.nanpercentile(x, np.float32([20, 80]), 1)),
         (np.float32([[np.nan, 1, 2, 5], [4, np.nan, 7, 1], [np.nan] * 4]),), rtol=1e-5),
]

XP, FP = np.float32([0, 1, 2.5]), np.float32([1, -1, 4])

STATS = [
    Case("cov", lambda m, x: (m.cov(x), m.cov(x, bias=True), m.cov(x, rowvar=False),
                              m.cov(x[0], x[1]), m.cov(x[0])), (A34,), rtol=1e-5, atol=1e-5),
    Case("cov weights", lambda m, x, f, a: (m.cov(x, fweights=f), m.cov(x, aweights=a),
                                            m.cov(x, fweights=f, aweights=a, ddof=2)),
         (A34, np.int32([1, 2, 0, 3]), np.float32([0.5, 1, 2, 1])), rtol=1e-5, atol=1e-5),
    Case("corrcoef", lambda m, x: (m.corrcoef(x), m.corrcoef(x[0], x[1])), (A34,),
         rtol=1e-5, atol=1e-5),
    Case("histogram", lambda m, x: (m.histogram(x, 3, range=(-1, 1)),
                                    m.histogram(x, np.float32([-3, 0, 0.5, 3]), density=True)),
         (rand((20,)),), rtol=1e-5),
    Case("histogram weights", lambda m, x, w: m.histogram(x, 4, weights=w), (F6, I6),
         rtol=1e-5),
    Case("histogram_bin_edges", lambda m, x: (m.histogram_bin_edges(x, 4),
                                              m.histogram_bin_edges(np.ones(3), 2)), (F6,)),
    Case("bincount", lambda m, x: (m.bincount(x), m.bincount(x, minlength=12),
                                   m.bincount(x, weights=x * 0.5)), (rand((9,), i32, 0, 6),)),
    Case("interp", lambda m, x: (m.interp(x, XP, FP),
                                 m.interp(x, XP, FP, left=-9, right=9),
                                 m.interp(x, XP, FP, period=2)),
         (np.float32([-1, 0, 0.5, 1.75, 2.5, 3]),), rtol=1e-5, atol=1e-6),
    Case("polyval", lambda m, p, x: (m.polyval(p, x), m.polyval(p.astype(np.float32), 0.5)),
         (np.int32([1, -2, 3]), I6)),
    Case("poly arith", lambda m, a, b: (m.polyadd(a, b), m.polysub(b, a), m.polymul(a, b),
                                        m.polyder(b, 2), m.polyint(a, 2, k=np.float32([1, 2]))),
         (np.float32([1, 2]), np.float32([3, -1, 0.5, 2]))),
    Case("vander", lambda m, x: (m.vander(x), m.vander(x, 2, increasing=True)), (I6[:3],)),
    Case("trim_zeros", lambda m, x: (m.trim_zeros(x), m.trim_zeros(x, "b")),
         (np.int32([0, 0, 1, 0, 2, 0]),)),
]

CONTRACTIONS = [
    Case("outer", lambda m, x, y: (m.outer(x, y), m.outer(y > 0, y > 1)), (A23, F6)),
    Case("inner", lambda m, x, y: (m.inner(x, y), m.inner(x[0], x[1]), m.inner(x, 2)),
         (A34, A34[:2]), rtol=1e-5),
    Case("kron", lambda m, x, y: (m.kron(x, y), m.kron(x[0], y)), (A23, I6[:2].reshape(2, 1))),
    Case("cross", lambda m, x, y: (m.cross(x, y), m.cross(x[:, :2], y[:, :2]),
                                   m.cross(x[:, :2], y)), (A23, A23[::-1].copy()), rtol=1e-5),
    Case("cross axis", lambda m, x: m.cross(x, x[::-1], axis=0), (A34[:, :3].T.copy(),),
         rtol=1e-5),
    Case("vdot complex", lambda m, x: m.vdot(x, x[::-1]), (C4,), rtol=1e-5),
    Case("vecdot", lambda m, x, y: m.vecdot(x, y), (A34, A34[:1]), rtol=1e-5,
         np_fn=lambda x, y: np.sum(x * y, -1)),
    Case("convolve", lambda m, x, y: [m.convolve(x, y, mode=k) for k in ("full", "same", "valid")]
         + [m.convolve(y, x)], (F6, A23[0]), rtol=1e-5, atol=1e-5),
    Case("correlate", lambda m, x, y: [m.correlate(x, y, mode=k) for k in ("full", "same",
                                                                         "valid")]
         + [m.correlate(y, x, "full")], (F6, A23[0]), rtol=1e-5, atol=1e-5),
    Case("convolve int/complex", lambda m, x, c: (m.convolve(x, x[:3]), m.correlate(c, c[:2],
                                                                                    "full")),
         (I6, C4), rtol=1e-5, atol=1e-5),
]

EXTRAS = [
    Case("append insert delete", lambda m, x: (m.append(x, x[:1]), m.append(x, x, axis=0),
                                               m.insert(x, 1, 9.5, axis=1),
                                               m.insert(x, np.int32([0, 2, 2]), -1.0, axis=1),
                                               m.insert(x, 5, np.float32([7, 8])),
                                               m.delete(x, 1, axis=1), m.delete(x, np.int32([0, 4]))),
         (A23,)),
    Case("select choose", lambda m, x, c: (m.select([x > 1, x < 0], [x, -x], default=0.5),
                                           m.choose(c, [x, -x, 2 * x], mode="clip")),
         (A23, np.int32([[0, 1, 2], [3, -1, 1]]))),
    Case("fill_diagonal", lambda m, x: m.fill_diagonal(x, np.float32([7, 8]), inplace=False),
         (A34,), np_fn=lambda x: [np.fill_diagonal(y := x.copy(), np.float32([7, 8])), y][1]),
    Case("gradient", lambda m, x, h: (m.gradient(x), m.gradient(x, 0.5, axis=1),
                                      m.gradient(x, h, axis=1)), (A34, np.float32([0, 1, 3, 4])),
         rtol=1e-5, atol=1e-5),
    Case("trapezoid", lambda m, x, h: (m.trapezoid(x), m.trapezoid(x, h), m.trapezoid(x, dx=0.5,
                                                                                   axis=0)),
         (A34, np.float32([0, 1, 3, 4])), rtol=1e-5, atol=1e-5),
    Case("unwrap", lambda m, x: (m.unwrap(x), m.unwrap(x, period=4.0)),
         (np.float32([0, 3, 6.5, 0.2, -4, 9]),), rtol=1e-5, atol=1e-5),
    Case("resize", lambda m, x: (m.resize(x, (2, 4)), m.resize(x, 3)), (I6[:3],)),
    Case("i0 nextafter", lambda m, x: (m.i0(x), m.nextafter(x, np.float32(0))), (F6,),
         rtol=1e-5),
    Case("block", lambda m, x: m.block([[x, x[:, :1]], [x[:1, :1], x[:1]]]), (A23,)),
    Case("piecewise", lambda m, x: m.piecewise(x, [x < 0, x > 1], [lambda v: -v, 7.0, 3.0]),
         (F6,)),
    Case("compress extract", lambda m, c, x: (m.compress(c, x, axis=1), m.extract(x > 0, x)),
         (np.bool_([1, 0, 1]), A23)),
    Case("packbits", lambda m, x: (m.packbits(x), m.packbits(x.reshape(3, 3), axis=1,
                                                             bitorder="little")),
         (np.int32([1, 0, 1, 1, 0, 0, 0, 1, 1]),)),
    Case("unpackbits", lambda m, x: (m.unpackbits(x), m.unpackbits(x, count=5),
                                     m.unpackbits(x.reshape(1, 2), axis=0, bitorder="little")),
         (np.uint8([177, 3]),)),
    Case("windows", lambda m: [f(7) for f in (m.hamming, m.hanning, m.bartlett, m.blackman)]
         + [m.kaiser(6, 2.5), m.hamming(1)], (), rtol=1e-5, atol=1e-6),
    Case("index tricks", lambda m, x: (m.ix_(x, x[:2]), m.tril_indices(3), m.triu_indices(3, 1, 4),
                                       m.diag_indices(2, 3), m.tril_indices_from(np.ones((2, 3))),
                                       m.unravel_index(x, (2, 4)),
                                       m.ravel_multi_index((x % 2, x % 4), (2, 4), mode="clip")),
         (np.int32([5, 7, 0]),)),
    Case("grids", lambda m: (m.mgrid[0:3, 1:5:2], m.ogrid[0:2, 0:1:3j], m.r_[1:4, 0, np.int32([7])],
                             m.c_[np.int32([1, 2]), np.int32([3, 4])]), ()),
    Case("histogram2d", lambda m, x, y: m.histogram2d(x, y, bins=3), (rand((12,)), rand((12,))),
         rtol=1e-5),
    Case("setxor1d", lambda m, a, b: m.setxor1d(a, b), (np.int32([5, 1, 3, 3]), np.int32([3, 4]))),
    Case("polydiv polyfit poly", lambda m, x, y: (m.polydiv(y, y[:2])[0], m.polyfit(x, y, 2),
                                                  m.poly(y[:3])), (F6, rand((6,))),
         rtol=2e-4, atol=2e-4),
]

ALL_CASES = UFUNCS + SHAPES + REDUCTIONS + SORTING + STATS + CONTRACTIONS + EXTRAS


def _run_numpy(case):
  with warnings.catch_warnings(), np.errstate(all="ignore"):
    warnings.simplefilter("ignore")
    if case.np_fn is not None:
      return case.np_fn(*case.args)
    return case.fn(np, *case.args)


def _flat(x):
  if isinstance(x, (tuple, list)):
    return [y for v in x for y in _flat(v)]
  return [x]


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.name)
def test_eager_vs_numpy_and_jax(case):
  got = case.fn(jnp, *case.args)
  want = _run_numpy(case)
  g, w = _flat(got), _flat(want)
  assert len(g) == len(w)
  for a, b in zip(g, w):
    assert isinstance(a, Array), type(a)
    assert_close(a, b, case.rtol, case.atol)
  if case.jax_dtype and case.name not in DATA_DEPENDENT:
    assert_like_jax(case.fn, case.args, g)


# Results whose shape depends on the data: jax.eval_shape cannot trace them (their dtypes
# are checked against jax.numpy with size=/length= in the tests below).
DATA_DEPENDENT = {"unique", "unique nan", "unique nan unequal", "unique axis", "unique empty",
                  "union/intersect/setdiff", "trim_zeros", "bincount", "setxor1d",
                  "compress extract"}


STAGED = [c for c in ALL_CASES if c.name in {
    "logaddexp inf", "hypot", "sinc", "isclose", "nan_to_num complex", "roll", "repeat",
    "pad wrap", "diagonal", "diag", "diff", "cumsum", "nanmax nanmin", "nanmean nanvar nanstd",
    "nanargmax nanargmin", "sort special", "argsort", "searchsorted", "median", "quantile",
    "cov", "corrcoef", "interp", "cross", "convolve", "correlate", "average",
    "var std complex", "partition", "append insert delete", "gradient"}]


@pytest.mark.parametrize("case", STAGED, ids=lambda c: c.name)
def test_staged_matches_eager(case):
  eager = _flat(case.fn(jnp, *case.args))
  staged = _flat(staged_call(lambda *a: case.fn(jnp, *a), *case.args))
  assert len(staged) == len(eager)
  for s, e in zip(staged, eager):
    assert s.aval == e.aval, (s.aval, e.aval)
    assert_close(s, e, 1e-6, 1e-6)


def test_abstract_eval_matches_execution():
  for fn, args in [(lambda x: jnp.unique(x, size=4, return_counts=True), (I6,)),
                   (lambda x: jnp.quantile(x, jnp.array([0.1, 0.9]), axis=1), (A34,)),
                   (lambda x: jnp.pad(x, 3, mode="reflect"), (A23,))]:
    jaxpr, consts = pe.trace_to_jaxpr(lambda *a: _flat(fn(*a)),
                                      [core.get_aval(a) for a in args])
    assert jaxpr.out_avals == [o.aval for o in _flat(fn(*args))]


def test_unique_size_and_fill_value():
  x = np.int32([3, 1, 3, 2, 1])
  vals, idx, inv, cnt = jnp.unique(x, True, True, True, size=5)
  assert vals.tolist() == [1, 2, 3, 1, 1] and cnt.tolist() == [2, 1, 2, 0, 0]
  assert idx.tolist() == [1, 3, 0, 1, 1] and inv.tolist() == [2, 0, 2, 1, 0]
  assert (vals.dtype, idx.dtype, inv.dtype, cnt.dtype) == (i32, i32, i32, i32)  # as jax.numpy
  assert jnp.unique(x, size=2).tolist() == [1, 2]
  assert jnp.unique(x, size=4, fill_value=-1).tolist() == [1, 2, 3, -1]
  f = sc.jit(lambda v: jnp.unique(v, size=4, fill_value=0, return_counts=True))
  u, c = f(x)
  assert u.tolist() == [1, 2, 3, 0] and c.tolist() == [2, 1, 2, 0]
  assert jnp.unique(np.zeros(0, np.int32), size=2, fill_value=7).tolist() == [7, 7]
  nt = jnp.unique_all(x)
  assert nt.values.tolist() == [1, 2, 3] and nt.counts.tolist() == [2, 1, 2]
  assert jnp.unique_inverse(x.reshape(1, 5)).inverse_indices.shape == (1, 5)
  assert jnp.unique_counts(x).counts.tolist() == [2, 1, 2]
  assert jnp.unique_values(x).tolist() == [1, 2, 3]
  assert jnp.setdiff1d(x, np.int32([1]), size=3, fill_value=0).tolist() == [2, 3, 0]


def test_traced_shapes_need_static_arguments():
  with pytest.raises(sc.ConcretizationTypeError, match="size argument"):
    sc.jit(jnp.unique)(I6)
  with pytest.raises(sc.ConcretizationTypeError, match="length"):
    sc.jit(jnp.bincount)(I6)
  with pytest.raises(sc.ConcretizationTypeError, match="total_repeat_length"):
    sc.jit(lambda x, r: jnp.repeat(x, r))(F6, I6)
  got = sc.jit(lambda x, r: jnp.repeat(x, r, total_repeat_length=8))(
      np.float32([1, 2, 3]), np.int32([2, 0, 3]))
  assert got.tolist() == [1, 1, 3, 3, 3, 3, 3, 3]
  assert sc.jit(lambda x: jnp.bincount(x, length=3))(np.int32([0, 2, 2, 5])).tolist() == [1, 0, 2]
  assert jnp.repeat(np.int32([1, 2]), 2, total_repeat_length=3).tolist() == [1, 1, 2]
  got = sc.jit(lambda x, s: jnp.roll(x, s))(np.int32([1, 2, 3, 4]), np.int32(-5))
  assert got.tolist() == [2, 3, 4, 1]


def test_edge_cases():
  e = np.zeros((0, 3), np.float32)
  assert jnp.cumsum(e, 0).shape == (0, 3) and jnp.sort(e, 0).shape == (0, 3)
  assert jnp.diff(np.float32([1.0])).shape == (0,)
  assert jnp.diagonal(np.ones((2, 3)), 4).shape == (0,)
  assert jnp.tile(e, 2).shape == (0, 6) and jnp.repeat(e, 2, 0).shape == (0, 3)
  assert jnp.searchsorted(np.float32([]), np.float32([1, 2])).tolist() == [0, 0]
  assert jnp.histogram(np.float32([]), 2, range=(0, 1))[0].tolist() == [0, 0]
  assert jnp.nansum(np.float32([np.nan, np.nan])).item() == 0
  assert np.isnan(jnp.nanmax(np.float32([np.nan])).item())
  assert jnp.nanargmax(np.float32([np.nan, np.nan])).item() == -1
  assert jnp.count_nonzero(e) == 0 and jnp.count_nonzero(e).dtype == i32
  # Integer overflow wraps as in jax.numpy.
  assert jnp.cumsum(np.int8([100, 100])).tolist() == [100, -56]
  assert jnp.gcd(np.int32(-2**31 + 2), np.int32(6)).item() == 6
  assert jnp.left_shift(np.int32(1), np.int32(40)).item() == 0
  assert jnp.right_shift(np.int32(-8), np.int32(40)).item() == -1
  assert jnp.signbit(np.float32(-0.0)).item() and not jnp.signbit(np.float32(0.0)).item()
  assert jnp.copysign(np.float32(2), np.float32(-0.0)).item() == -2
  assert jnp.array_equal(np.float32([1]), np.float32([1, 1])).item() is False
  assert jnp.array_equiv(np.float32([1, 2]), np.float32([1, 2, 3])).item() is False
  assert jnp.median(np.float32([[np.nan, 1.0]]), axis=1).tolist()[0] != 1.0
  w = jnp.logaddexp(-np.inf, np.float32(-np.inf))
  assert w.item() == -np.inf


def test_weak_types():
  assert_like_jax(lambda m, x: m.logaddexp(x, 1.0), (2.0,), jnp.logaddexp(2.0, 1.0))
  for fn in (lambda m: m.hypot(3.0, 4.0), lambda m: m.sinc(0.5), lambda m: m.deg2rad(90),
             lambda m: m.isclose(1.0, 1.0), lambda m: m.heaviside(1.0, 0.0),
             lambda m: m.cumsum(2.0), lambda m: m.diff(m.array([1.0, 2.0])),
             lambda m: m.sort(m.array([2.0, 1.0])), lambda m: m.roll(m.array(3.0), 1),
             lambda m: m.tile(m.array(2.0), 2), lambda m: m.pad(m.array([1.0]), 1),
             lambda m: m.nan_to_num(2.0), lambda m: m.copysign(1.0, -2.0)):
    assert_like_jax(fn, (), fn(jnp))


def test_errors():
  with pytest.raises(ValueError, match="must be integers"):
    jnp.gcd(np.float32(1), 2)
  with pytest.raises(TypeError, match="only accepts integer"):
    jnp.left_shift(np.float32(1), 2)
  with pytest.raises(ValueError, match="not well defined for complex"):
    jnp.hypot(np.complex64(1), 1)
  with pytest.raises(ValueError, match="signbit is not well defined for complex64"):
    jnp.signbit(np.complex64(1))
  with pytest.raises(TypeError, match="does not support complex"):
    jnp.copysign(np.complex64(1), 1)
  with pytest.raises(ValueError, match="does not result in an equal division"):
    jnp.split(F6, 4)
  with pytest.raises(ValueError, match="at least 2D"):
    jnp.tril(F6)
  with pytest.raises(ValueError, match="ndim at least two"):
    jnp.rot90(F6)
  with pytest.raises(ValueError, match="Axes must be different"):
    jnp.rot90(A23, axes=(0, 0))
  with pytest.raises(NotImplementedError, match="Unimplemented padding mode"):   # as JAX
    jnp.pad(A23, 1, mode="bogus")
  with pytest.raises(ValueError, match="negative"):
    jnp.pad(A23, -1)
  with pytest.raises(ValueError, match="empty axis"):
    jnp.pad(np.zeros((0,)), 1, mode="reflect")
  with pytest.raises(ValueError, match="order must be non-negative"):
    jnp.diff(F6, -1)
  with pytest.raises(ValueError, match="1-dimensional"):
    jnp.searchsorted(A23, 1.0)
  with pytest.raises(ValueError, match="side="):
    jnp.searchsorted(F6, 1.0, side="middle")
  with pytest.raises(TypeError, match="len > 0"):
    jnp.lexsort([])
  with pytest.raises(ValueError, match="method can only be"):
    jnp.quantile(F6, 0.5, method="bogus")
  with pytest.raises(ValueError, match="complex"):
    jnp.median(C4)
  with pytest.raises(ValueError, match="Dimension must be either 2 or 3"):
    jnp.cross(np.ones(4), np.ones(4))
  with pytest.raises(ValueError, match="1-dimensional inputs"):
    jnp.convolve(A23, F6)
  with pytest.raises(ValueError, match="mode must be one of"):
    jnp.convolve(F6, F6, mode="bogus")
  with pytest.raises(TypeError, match="integer type"):
    jnp.bincount(F6)
  with pytest.raises(ValueError, match="fill_value must be specified"):
    jnp.unique(np.zeros(0), size=2)
  with pytest.raises(ValueError, match="Valid values for indexing"):
    jnp.meshgrid(F6, indexing="xx")
  with pytest.raises(ValueError, match="'extrapolate'"):
    jnp.interp(F6, F6, F6, left="bogus")
  with pytest.raises(ValueError, match="xp and fp"):
    jnp.interp(F6, F6, F6[:2])


# ---------------------------------------------------------------------------
# Properties over drawn shapes and dtypes

_dt = st.sampled_from([f32, i32, u8, bf16, i8])


@settings(max_examples=6)
@given(st.data())
def test_sort_argsort_property(data):
  dtype = data.draw(_dt)
  shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=5))
  x = data.draw(hnp.arrays(dtype, shape, elements=st.integers(-4, 4) if dtype.kind in "iu" and
                           dtype != u8 else st.integers(0, 8) if dtype == u8 else
                           st.sampled_from([-1.5, 0.0, 2.0, 3.5, np.nan, np.inf])))
  axis = data.draw(st.integers(-len(shape), len(shape) - 1))
  ref = x.astype(np.float64)   # NB: NumPy misorders NaN in bfloat16 arrays
  s = jnp.sort(x, axis)
  np.testing.assert_array_equal(np.asarray(s).astype(np.float64), np.sort(ref, axis))
  idx = jnp.argsort(x, axis)
  np.testing.assert_array_equal(np.asarray(idx), np.argsort(ref, axis, kind="stable"))


@settings(max_examples=5)
@given(st.data())
def test_unique_and_searchsorted_property(data):
  x = data.draw(hnp.arrays(i32, data.draw(st.integers(0, 9)), elements=st.integers(-3, 3)))
  vals, idx, inv, cnt = jnp.unique(x, True, True, True)
  w = np.unique(x, True, True, True)
  for g, e in zip((vals, idx, inv, cnt), w):
    np.testing.assert_array_equal(np.asarray(g), e.reshape(np.shape(g)))
  a = np.sort(x)
  v = data.draw(hnp.arrays(i32, 3, elements=st.integers(-4, 4)))
  for side in ("left", "right"):
    np.testing.assert_array_equal(np.asarray(jnp.searchsorted(a, v, side)),
                                  np.searchsorted(a, v, side))


@settings(max_examples=4)
@given(st.data())
def test_quantile_property(data):
  shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=2, min_side=1, max_side=6))
  x = data.draw(hnp.arrays(f32, shape, elements=st.floats(-100, 100, width=32)))
  q = data.draw(st.floats(0, 1))
  axis = data.draw(st.sampled_from([None, 0, -1]))
  got = jnp.quantile(x, np.float32(q), axis=axis)
  want = np.quantile(x.astype(np.float64), np.float32(q), axis=axis)
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("fn", ["mean", "var", "std"])
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_16_bit_statistics_accumulate_in_float32_as_jax(fn, dt):
  # Summed in 16 bits, the mean of 10,000 bfloat16 threes was 3.015625 (JAX: 3.0).
  x = np.full((4, 2500), 3.0, np.float32)
  x[1] += np.linspace(-1, 1, 2500)
  ours, theirs = jnp.asarray(x).astype(dt), jjnp.asarray(x).astype(dt)
  for axis in (None, 1):
    got, want = getattr(jnp, fn)(ours, axis=axis), getattr(jjnp, fn)(theirs, axis=axis)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))


@pytest.mark.parametrize("dt", ["float16", "bfloat16", "uint8"])
def test_nan_reductions_and_fmax_on_small_dtypes_as_jax(dt):
  # A weak scalar (the NaN fill value) met a 16-bit/uint8 array and failed to promote.
  x = np.array([1, np.nan, 3, 4, 2.5], np.float32) if dt != "uint8" else np.array([1, 2, 3, 4, 9])
  ours, theirs = jnp.asarray(x).astype(dt), jjnp.asarray(x).astype(dt)
  for f in ("nanmax", "nanmin", "nansum", "nanmean", "median", "nanmedian", "nanvar", "nanstd",
            "nanprod"):
    got, want = getattr(jnp, f)(ours), getattr(jjnp, f)(theirs)
    assert got.dtype == want.dtype, f
    # NB: 1 ulp of float32 between summation orders (uint8 nanvar); 16-bit results exact.
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                               rtol=2e-7, err_msg=f)
  for f in ("fmax", "fmin"):
    got, want = getattr(jnp, f)(ours, ours[::-1]), getattr(jjnp, f)(theirs, theirs[::-1])
    assert got.dtype == want.dtype, f
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))


@pytest.mark.parametrize("n", [3, 4, 7])
@pytest.mark.parametrize("shape,axis", [((3,), -1), ((2, 3), 1), ((3, 2), 0)])
def test_diff_of_order_beyond_the_axis_is_empty_as_jax(n, shape, axis):
  x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
  got, want = jnp.diff(x, n, axis=axis), jjnp.diff(x, n, axis=axis)
  assert got.shape == want.shape and got.dtype == want.dtype
  assert got.shape == np.diff(x, n, axis=axis).shape
