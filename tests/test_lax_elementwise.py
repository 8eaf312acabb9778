"""Tests for stagecraft.lax.elementwise, driven by one table of `OpRecord`s (the pattern of
JAX's lax_test_util).

For every record and dtype, Hypothesis draws operands (shapes from a small fixed pool, so
that few distinct programs are compiled) and checks:
  1. eager `lax.<name>(*args)` against a NumPy/SciPy reference, and its dtype against
     `jax.eval_shape(jax.lax.<name>, *args)`;
  2. staged (trace -> lower -> compile -> execute) against eager, bit for bit;
  3. the abstract eval (`trace_to_jaxpr(...).out_avals`) against the executed Array's aval.
Then: rank-0 broadcasting, weak types, special values (NaN, inf, -0.0), integer wraparound,
and error messages (compared with jax.lax's where they agree).
"""
import contextlib
import functools
import re
from typing import Any, Callable, NamedTuple

import jax
import numpy as np
import pytest
import scipy.special
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from stagecraft import core, lax
from stagecraft.core import ShapedArray
from stagecraft.interpreters import partial_eval as pe

import sys, os; sys.path.insert(0, os.path.dirname(__file__))  # noqa: E401,E702
from _util import staged_call, tol  # noqa: E402

from _cases import (FLOATS, SHAPES, b1 as bool_, bf16, c64, f16, f32, i8, i32, u8,  # noqa: E402
                    u32)

INEXACT = (*FLOATS, c64)
INTS = (i32, i8, u8, u32)
NUMBERS = (*FLOATS, *INTS, c64)
ALL = (*FLOATS, *INTS, bool_, c64)


def _is_inexact(dtype) -> bool:
  return dtype in FLOATS or np.issubdtype(dtype, np.inexact)


# ---------------------------------------------------------------------------
# The table


class Domain(NamedTuple):
  """Where operand values are drawn from.

  lo, hi: the real range (floats; ints are clipped to their dtype's range; None: the whole
    integer range, or [-100, 100] for floats). `c`: the range of the real and imaginary
    parts of complex values. `nonzero`: |x| >= 1 for ints, >= 0.25 for inexact dtypes.
    `special`: mix in NaN, +-inf, +-0.0 (floats; +-0.0 only for complex).
  """
  lo: float | None = None
  hi: float | None = None
  nonzero: bool = False
  special: bool = False
  c: tuple[float, float] = (-2.0, 2.0)


class OpRecord(NamedTuple):
  """One public wrapper of stagecraft.lax. `dtypes`: one entry per tested case, a dtype (of
  every operand) or a tuple of per-operand dtypes. `tol`: None (tests/_util.tol of the
  result dtype), or {dtype: rtol=atol} overrides, or 0 (exact). `domain`: a Domain for
  every operand or a tuple of one per operand. `params`: static keyword arguments."""
  name: str
  nargs: int
  dtypes: tuple
  numpy_ref: Callable
  tol: Any = None
  domain: Any = Domain()
  params: dict = {}


def _trunc_div(x, y):
  if x.dtype.kind in "iu":  # C semantics: round toward zero (int64 then wrap, as lax).
    q = np.abs(x.astype(np.int64)) // np.abs(y.astype(np.int64))
    return np.where((x < 0) != (y < 0), -q, q)
  return x / y


def _fmod(x, y):
  if x.dtype.kind in "iu":
    return np.fmod(x.astype(np.int64), y.astype(np.int64))
  return np.fmod(x, y)


def _round_afz(x):  # half away from zero (lax.round's default)
  return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _logistic(x):
  return scipy.special.expit(x) if not np.iscomplexobj(x) else 1 / (1 + np.exp(-x))


def _convert_ref(new_dtype):
  def ref(x):
    if np.iscomplexobj(x) and not np.issubdtype(new_dtype, np.complexfloating):
      x = x.real  # as JAX: the real part, also before the test for bool
    if new_dtype == bool_:
      return x != 0
    return x.astype(new_dtype)
  return ref


def _select_n_ref(which, *cases):
  return np.choose(which.astype(np.int64), cases)


_pos = Domain(0.01, 100, c=(0.1, 5))
_inv = Domain(c=(0.1, 0.9))  # complex: away from every branch cut of the inverse functions
_cmp_dom = Domain(-3, 3, special=True)
_special = Domain(special=True)

RECORDS = [
    # Binary arithmetic
    OpRecord("add", 2, NUMBERS, np.add),
    OpRecord("sub", 2, (f32, bf16, i8, u32, c64), np.subtract),
    OpRecord("mul", 2, (f32, f16, i32, i8, u8, c64), np.multiply, domain=Domain(-100, 100, c=(-10, 10))),
    OpRecord("div", 2, (f32, f16, bf16, i32, i8, u32, c64), _trunc_div, domain=(Domain(), Domain(nonzero=True))),
    OpRecord("rem", 2, (f32, f16, i32, i8, u32), _fmod,
             domain=(Domain(), Domain(-20, 20, nonzero=True))),
    OpRecord("max", 2, (f32, bf16, i8, u32, bool_), np.maximum, domain=_cmp_dom),
    OpRecord("min", 2, (f32, f16, i32, u8, bool_), np.minimum, domain=_cmp_dom),
    OpRecord("pow", 2, (f32, bf16, c64, (f32, i32), (f16, i32)), np.power,
             tol={f32: 1e-5, c64: 1e-5}, domain=(Domain(0.1, 5, c=(0.1, 1.5)),
                                                 Domain(-3, 3, c=(-1.5, 1.5)))),
    OpRecord("atan2", 2, FLOATS, np.arctan2, domain=Domain(-10, 10, special=True)),
    # Unary arithmetic
    OpRecord("neg", 1, (f32, bf16, i32, u8, c64), np.negative, domain=_special),
    OpRecord("abs", 1, (f32, f16, i8, c64), np.abs, domain=_special),
    OpRecord("sign", 1, (f32, bf16, i8, u32, c64), np.sign, domain=_special),
    OpRecord("integer_pow", 1, (f32, bf16, i8, u8, c64), lambda x: x ** 3,
             domain=Domain(-10, 10), params=dict(y=3)),
    OpRecord("integer_pow", 1, (f16, c64), lambda x: x ** -2.0,
             domain=Domain(-10, 10, nonzero=True), params=dict(y=-2)),
    OpRecord("integer_pow", 1, (f32, i32), lambda x: np.ones_like(x), params=dict(y=0)),
    # Transcendental functions
    OpRecord("exp", 1, INEXACT, np.exp, domain=Domain(-10, 10)),
    # NB: lax lowers exp2(x) to exp(x * ln 2) in the operand's dtype (as JAX does), so f16 and
    # bf16 lose a few ulps more than a correctly rounded 2**x.
    OpRecord("exp2", 1, INEXACT, lambda x: np.power(2.0, x), tol={f16: 1e-2, bf16: 5e-2},
             domain=Domain(-10, 10)),
    OpRecord("log", 1, INEXACT, np.log, domain=_pos),
    OpRecord("log1p", 1, INEXACT, np.log1p, domain=Domain(-0.9, 100, c=(0.1, 3))),
    OpRecord("expm1", 1, INEXACT, np.expm1, domain=Domain(-10, 10)),
    OpRecord("sqrt", 1, INEXACT, np.sqrt, domain=Domain(0, 100, c=(0.1, 5))),
    OpRecord("rsqrt", 1, INEXACT, lambda x: 1 / np.sqrt(x), domain=_pos),
    OpRecord("cbrt", 1, FLOATS, np.cbrt),
    OpRecord("sin", 1, INEXACT, np.sin, domain=Domain(-10, 10)),
    OpRecord("cos", 1, INEXACT, np.cos, domain=Domain(-10, 10)),
    OpRecord("tan", 1, INEXACT, np.tan, domain=Domain(-1.4, 1.4, c=(-1, 1))),
    OpRecord("tanh", 1, INEXACT, np.tanh, domain=Domain(-10, 10, c=(-1, 1))),
    OpRecord("logistic", 1, INEXACT, _logistic, domain=Domain(-20, 20, c=(-1, 1))),
    OpRecord("asin", 1, INEXACT, np.arcsin, domain=_inv._replace(lo=-0.95, hi=0.95)),
    OpRecord("acos", 1, INEXACT, np.arccos, domain=_inv._replace(lo=-0.95, hi=0.95)),
    OpRecord("atan", 1, INEXACT, np.arctan, domain=_inv._replace(lo=-10, hi=10)),
    OpRecord("sinh", 1, INEXACT, np.sinh, domain=Domain(-10, 10)),
    OpRecord("cosh", 1, INEXACT, np.cosh, domain=Domain(-10, 10)),
    OpRecord("asinh", 1, INEXACT, np.arcsinh, domain=_inv._replace(lo=-100, hi=100)),
    OpRecord("acosh", 1, INEXACT, np.arccosh, domain=_inv._replace(lo=1, hi=100)),
    OpRecord("atanh", 1, INEXACT, np.arctanh, domain=_inv._replace(lo=-0.9, hi=0.9)),
    OpRecord("erf", 1, FLOATS, scipy.special.erf, domain=Domain(-4, 4)),
    OpRecord("erfc", 1, FLOATS, scipy.special.erfc, domain=Domain(-4, 4)),
    OpRecord("erf_inv", 1, FLOATS, scipy.special.erfinv, domain=Domain(-0.9, 0.9)),
    # Rounding and classification
    OpRecord("floor", 1, FLOATS, np.floor, domain=_special),
    OpRecord("ceil", 1, FLOATS, np.ceil, domain=_special),
    OpRecord("round", 1, FLOATS, _round_afz, domain=Domain(-5, 5, special=True),
             params=dict(rounding_method=0)),
    OpRecord("round", 1, FLOATS, np.rint, domain=Domain(-5, 5, special=True),
             params=dict(rounding_method=1)),
    OpRecord("is_finite", 1, FLOATS, np.isfinite, domain=_special),
    # Comparisons
    OpRecord("eq", 2, ALL, np.equal, domain=_cmp_dom),
    OpRecord("ne", 2, (f32, bf16, u8, bool_, c64), np.not_equal, domain=_cmp_dom),
    OpRecord("lt", 2, (f32, f16, i32, bool_), np.less, domain=_cmp_dom),
    OpRecord("le", 2, (bf16, i8, u32), np.less_equal, domain=_cmp_dom),
    OpRecord("gt", 2, (f32, u8, bool_), np.greater, domain=_cmp_dom),
    OpRecord("ge", 2, (f16, i32, u32), np.greater_equal, domain=_cmp_dom),
    # Bitwise logic
    OpRecord("bitwise_and", 2, (bool_, *INTS), np.bitwise_and),
    OpRecord("bitwise_or", 2, (bool_, i32, u8), np.bitwise_or),
    OpRecord("bitwise_xor", 2, (bool_, i8, u32), np.bitwise_xor),
    OpRecord("bitwise_not", 1, (bool_, *INTS), np.invert),
    # select_n: bool `which` (two cases), integer `which` (three cases); rank-0 `which`
    # comes from the shape pool.
    OpRecord("select_n", 3, tuple((bool_, t, t) for t in (f32, bf16, i8, bool_, c64)),
             _select_n_ref, domain=_special),
    OpRecord("select_n", 3, ((u8, f16, f16),), _select_n_ref,
             domain=(Domain(0, 1), Domain(), Domain())),
    OpRecord("select_n", 4, tuple((i32, t, t, t) for t in (f32, u32)), _select_n_ref,
             domain=(Domain(0, 2), Domain(), Domain(), Domain())),
]

# convert_element_type: (source, destination, source domain). Float -> int values stay in
# range (out-of-range float -> int is implementation-defined in NumPy; XLA saturates).
_CONVERSIONS = [
    (f32, i32, Domain(-1e4, 1e4)), (f32, i8, Domain(-120, 120)), (f32, u8, Domain(0, 250)),
    (f32, u32, Domain(0, 1e6)), (f32, bool_, _special), (bf16, i8, Domain(-100, 100)),
    (i32, f32, Domain()), (i8, f32, Domain()), (u32, f32, Domain()), (bool_, f32, Domain()),
    (bool_, i32, Domain()), (i32, bool_, Domain(-2, 2)), (i32, i8, Domain()),
    (i32, u8, Domain()), (u8, i8, Domain()), (c64, f32, Domain(c=(-100, 100))),
    (c64, i32, Domain(c=(-100, 100))), (c64, bool_, Domain(special=True, c=(-1, 1))),
    (f32, bf16, _special), (f32, f16, Domain(-6e4, 6e4, special=True)),
    (i32, bf16, Domain(-2 ** 24, 2 ** 24)), (f16, f32, _special), (bf16, f32, _special),
    (bf16, f16, Domain(-1e4, 1e4)), (f32, c64, Domain()), (i8, c64, Domain()),
]
RECORDS += [OpRecord("convert_element_type", 1, (src,), _convert_ref(dst), tol=0, domain=dom,
                     params=dict(new_dtype=dst)) for src, dst, dom in _CONVERSIONS]

_DTYPE_NAMES = {bf16: "bf16", f32: "f32", f16: "f16", i32: "i32", i8: "i8", u8: "u8",
                u32: "u32", bool_: "bool", c64: "c64"}


def _case_id(rec: OpRecord, dts: tuple) -> str:
  params = "".join(f"-{k}={_DTYPE_NAMES.get(v, v)}" for k, v in rec.params.items())
  return f"{rec.name}{params}-{'-'.join(_DTYPE_NAMES[d] for d in dts)}"


def _arg_dtypes(rec: OpRecord, entry) -> tuple:
  return tuple(entry) if isinstance(entry, tuple) else (entry,) * rec.nargs


CASES = [(rec, _arg_dtypes(rec, d)) for rec in RECORDS for d in rec.dtypes]


# ---------------------------------------------------------------------------
# Operand strategies


def _domain(rec: OpRecord, i: int) -> Domain:
  return rec.domain[i] if isinstance(rec.domain, tuple) and not isinstance(
      rec.domain, Domain) else rec.domain


def _elements(dtype, dom: Domain):
  if dtype == bool_:
    return st.booleans()
  if dtype.kind in "iu":
    info = np.iinfo(dtype)
    lo = info.min if dom.lo is None else max(info.min, int(np.ceil(dom.lo)))
    hi = info.max if dom.hi is None else min(info.max, int(np.floor(dom.hi)))
    s = st.integers(lo, hi)
    return s.filter(lambda v: v != 0) if dom.nonzero else s

  def floats(lo, hi):
    s = st.floats(float(np.float32(lo)), float(np.float32(hi)), width=32,
                  allow_subnormal=False)
    if dom.nonzero:
      s = s.filter(lambda v: abs(v) >= 0.25)
    return s
  if dtype == c64:
    part = floats(*dom.c)
    if dom.special:
      part = st.one_of(part, st.sampled_from([0.0, -0.0]))
    return st.builds(complex, part, part)
  s = floats(-100 if dom.lo is None else dom.lo, 100 if dom.hi is None else dom.hi)
  if dom.special:
    s = st.one_of(s, st.sampled_from([np.nan, np.inf, -np.inf, 0.0, -0.0]))
  return s


def _cast(x: np.ndarray, dtype) -> np.ndarray:
  with np.errstate(over="ignore"):  # NB: f32 -> f16 overflows to inf, as wanted
    return x.astype(dtype)


def _shape_options(rec: OpRecord) -> list[tuple]:
  n = rec.nargs
  opts = [(s,) * n for s in SHAPES]
  if n == 1:
    return opts
  if rec.name == "select_n":  # rank-0 `which` with array cases
    return opts + [((),) + ((2, 3),) * (n - 1), ((),) + ((0,),) * (n - 1)]
  return opts + [((), (3,)), ((2, 3), ())]  # rank-0 operands broadcast


@st.composite
def _operands(draw, rec: OpRecord, dts: tuple):
  shapes = draw(st.sampled_from(_shape_options(rec)))
  args = []
  for i, (dt, shape) in enumerate(zip(dts, shapes)):
    carrier = f32 if dt in (f16, bf16) else dt
    x = draw(hnp.arrays(carrier, shape, elements=_elements(dt, _domain(rec, i))))
    args.append(_cast(x, dt))
  return args


def _fixed_operands(rec: OpRecord, dts: tuple, shape: tuple) -> list[np.ndarray]:
  """Deterministic in-domain operands of one shape (rank 0 and 0-size must always run)."""
  args = []
  for i, dt in enumerate(dts):
    dom = _domain(rec, i)
    if dt == bool_:
      v = True
    elif dt.kind in "iu":
      v = int(np.clip(1, dom.lo if dom.lo is not None else -9, dom.hi or 9))
    elif dt == c64:
      v = complex(np.clip(0.75, *dom.c), np.clip(0.5, *dom.c))
    else:
      v = float(np.clip(0.75, -100 if dom.lo is None else dom.lo, dom.hi or 100))
    args.append(np.full(shape, v, dt))
  return args


# ---------------------------------------------------------------------------
# Checks


def _op(rec: OpRecord):
  return functools.partial(getattr(lax, rec.name), **rec.params)


_COMPLEX_TO_REAL = "Casting complex values to real discards the imaginary part"


def _warns_complex_to_real(rec: OpRecord, args):
  """A context expecting NumPy's ComplexWarning where `rec` converts complex to real (JAX
  0.10.2 warns so, eagerly, when staging and under eval_shape), else no check."""
  if (rec.name == "convert_element_type" and np.iscomplexobj(args[0])
      and not np.issubdtype(rec.params["new_dtype"], np.complexfloating)):
    return pytest.warns(np.exceptions.ComplexWarning, match=_COMPLEX_TO_REAL)
  return contextlib.nullcontext()


def _jax_out(name: str, params: dict, *args):
  """The shape/dtype/weak type that jax.lax gives (abstractly: nothing is compiled)."""
  return jax.eval_shape(functools.partial(getattr(jax.lax, name), **params), *args)


def _jax(name: str, *args, **params) -> np.ndarray:
  """Runs jax.lax.<name> (the oracle) on host arrays."""
  return np.asarray(getattr(jax.lax, name)(*args, **params))


def _to_ref(x: np.ndarray) -> np.ndarray:
  if x.dtype == c64:
    return x.astype(np.complex128)
  if x.dtype in FLOATS:
    return x.astype(np.float64)
  return x


def _assert_close(out, ref, dtype, rec_tol=None, err_msg=""):
  out = np.asarray(out)
  if not _is_inexact(dtype):
    np.testing.assert_array_equal(out, np.asarray(ref).astype(dtype), err_msg=err_msg)
    return
  wide = np.complex128 if dtype == c64 else np.float64
  if rec_tol == 0:  # exact, after rounding the reference to `dtype`
    with np.errstate(over="ignore"):
      ref = np.asarray(ref).astype(dtype)
    np.testing.assert_array_equal(out.astype(wide), ref.astype(wide), err_msg=err_msg)
    return
  t = tol(dtype)
  if isinstance(rec_tol, dict) and dtype in rec_tol:
    t = dict(rtol=rec_tol[dtype], atol=rec_tol[dtype])
  np.testing.assert_allclose(out.astype(wide), np.asarray(ref, wide), equal_nan=True,
                             err_msg=err_msg, **t)


def _bits(x) -> np.ndarray:
  x = np.asarray(x)
  if _is_inexact(x.dtype):
    return x.view(f"u{x.dtype.itemsize}")
  return x


def _assert_same_bits(a, b, err_msg=""):
  assert a.aval == b.aval, (a.aval, b.aval)
  np.testing.assert_array_equal(_bits(a), _bits(b), err_msg=err_msg)


def _check_aval(fun, args, out):
  """The abstract eval gives the executed Array's aval (shape, dtype and weak type)."""
  jaxpr, _ = pe.trace_to_jaxpr(lambda *a: [fun(*a)], [core.get_aval(a) for a in args])
  (aval,) = jaxpr.out_avals
  assert (aval.shape, aval.dtype, aval.weak_type) == (
      out.aval.shape, out.aval.dtype, out.aval.weak_type), (aval, out.aval)


def _check_op(rec: OpRecord, args: list):
  op = _op(rec)
  msg = f"{rec.name}{rec.params} on {[a.dtype.name + str(a.shape) for a in args]}: {args}"
  # 1. eager vs NumPy; the result's shape/dtype/weak type as jax.lax's
  with _warns_complex_to_real(rec, args):
    out = op(*args)
  with _warns_complex_to_real(rec, args):
    expected = _jax_out(rec.name, rec.params, *args)
  assert (out.shape, out.dtype, out.aval.weak_type) == (
      expected.shape, expected.dtype, expected.weak_type), msg
  with np.errstate(all="ignore"):
    ref = rec.numpy_ref(*[_to_ref(a) for a in args])
  _assert_close(out, ref, out.dtype, rec.tol, msg)
  # 2. staged vs eager
  with _warns_complex_to_real(rec, args):
    staged = staged_call(lambda *a: op(*a), *args)
  _assert_same_bits(staged, out, msg)
  # 3. abstract eval vs the executed aval
  with _warns_complex_to_real(rec, args):
    _check_aval(op, args, out)


@pytest.mark.parametrize("rec,dts", CASES, ids=[_case_id(r, d) for r, d in CASES])
@settings(max_examples=4)
@given(data=st.data())
def test_op(rec, dts, data):
  _check_op(rec, data.draw(_operands(rec, dts), label="operands"))


@pytest.mark.parametrize("shape", [(), (0,)], ids=["rank0", "size0"])
@pytest.mark.parametrize("rec", RECORDS, ids=[_case_id(r, _arg_dtypes(r, r.dtypes[0]))
                                              for r in RECORDS])
def test_op_rank0_and_empty(rec, shape):
  _check_op(rec, _fixed_operands(rec, _arg_dtypes(rec, rec.dtypes[0]), shape))


def test_table_covers_every_wrapper():
  wrappers = {"add", "sub", "mul", "div", "rem", "neg", "max", "min", "abs", "sign", "pow",
              "integer_pow", "exp", "exp2", "log", "log1p", "expm1", "sqrt", "rsqrt", "cbrt",
              "sin", "cos", "tan", "tanh", "logistic", "asin", "acos", "atan", "atan2",
              "sinh", "cosh", "asinh", "acosh", "atanh", "erf", "erfc", "erf_inv", "floor",
              "ceil", "round", "is_finite", "eq", "ne", "lt", "le", "gt", "ge", "bitwise_and",
              "bitwise_or", "bitwise_xor", "bitwise_not", "select_n", "convert_element_type"}
  assert wrappers <= {r.name for r in RECORDS}
  assert {r.params["rounding_method"] for r in RECORDS if r.name == "round"} == {0, 1}


# ---------------------------------------------------------------------------
# Broadcasting and weak types


def test_rank0_broadcasting():
  out = lax.add(np.ones(3, f32), np.float32(2))
  assert out.aval == ShapedArray((3,), f32, False)
  np.testing.assert_array_equal(out, np.full(3, 3, f32))
  out = lax.sub(np.float32(5), np.arange(6, dtype=f32).reshape(2, 3))
  assert out.aval == ShapedArray((2, 3), f32, False)
  np.testing.assert_array_equal(out, 5 - np.arange(6, dtype=f32).reshape(2, 3))
  out = staged_call(lambda x, y: lax.mul(x, y), np.arange(3, dtype=i32), np.int32(-2))
  np.testing.assert_array_equal(out, [0, -2, -4])
  out = lax.select_n(np.True_, np.zeros((2, 3), f32), np.ones((2, 3), f32))
  np.testing.assert_array_equal(out, np.ones((2, 3), f32))
  out = lax.select_n(np.int32(1), np.zeros(0, f32), np.ones(0, f32))
  assert out.aval == ShapedArray((0,), f32, False)


# (function, args, expected aval). JAX 0.10.2's lax rejects a Python int next to a
# non-int32 array (`lax.add(f32[3], 2)`); stagecraft's lax converts it to the array's dtype.
WEAK_CASES = [
    (lax.add, (1.0, 2.0), ShapedArray((), f32, True)),
    (lax.mul, (2, 3), ShapedArray((), i32, True)),
    (lax.add, (np.ones(3, i32), 2), ShapedArray((3,), i32, False)),
    (lax.add, (np.ones(3, f32), 2.5), ShapedArray((3,), f32, False)),
    (lax.add, (np.ones(3, i8), 2), TypeError),   # as JAX: Python scalars are not promoted
    (lax.sub, (2, np.ones(3, u8)), TypeError),
    (lax.mul, (np.ones(2, f16), 2.0), TypeError),
    (lax.max, (1.0, np.float32(3)), ShapedArray((), f32, False)),
    (lax.add, (1 + 1j, np.ones(2, c64)), ShapedArray((2,), c64, False)),
    (lax.bitwise_and, (np.ones(3, u8), 3), TypeError),
    (lax.bitwise_and, (np.ones(3, bool_), True), ShapedArray((3,), bool_, False)),
    (lax.sin, (1.0,), ShapedArray((), f32, True)),
    (lax.neg, (1,), ShapedArray((), i32, True)),
    (lax.abs, (1 + 1j,), ShapedArray((), f32, True)),
    (lax.pow, (2.0, 3), ShapedArray((), f32, True)),
    (lax.pow, (2.0, np.int32(3)), ShapedArray((), f32, False)),
    (functools.partial(lax.integer_pow, y=3), (2.0,), ShapedArray((), f32, True)),
    (functools.partial(lax.round, rounding_method=1), (2.5,), ShapedArray((), f32, True)),
    (lax.select_n, (True, 1.0, 2.0), ShapedArray((), f32, True)),
    (lax.select_n, (True, 1.0, np.float32(2)), ShapedArray((), f32, False)),
    (lax.lt, (np.ones(2, f32), 1), TypeError),
    (lax.lt, (np.ones(2, f32), 1.0), ShapedArray((2,), bool_, False)),
    (functools.partial(lax.convert_element_type, new_dtype=f32), (2,),
     ShapedArray((), f32, False)),
    (functools.partial(lax.convert_element_type, new_dtype=f32, weak_type=True),
     (np.int32(2),), ShapedArray((), f32, True)),
]


@pytest.mark.parametrize("fun,args,expected", WEAK_CASES,
                         ids=[f"{getattr(f, '__name__', None) or f.func.__name__}-{i}"
                              for i, (f, _, _) in enumerate(WEAK_CASES)])
def test_weak_types(fun, args, expected):
  if expected is TypeError:   # JAX's message (checked in tests/test_lax_literals.py)
    with pytest.raises(TypeError, match="requires arguments to have the same dtypes"):
      fun(*args)
    return
  out = fun(*args)
  assert out.aval == expected
  # Staged with the Python scalars closed over (Literals, as in `lambda x: lax.add(x, 2)`)
  # and the arrays as arguments.
  is_scalar = [type(a) in (bool, int, float, complex) for a in args]
  arrays = [a for a, s in zip(args, is_scalar) if not s]

  def closed(*xs):
    it = iter(xs)
    return fun(*[a if s else next(it) for a, s in zip(args, is_scalar)])
  _assert_same_bits(staged_call(closed, *arrays), out)
  _check_aval(closed, arrays, out)
  if all(is_scalar):  # weakly typed scalars as arguments stay weak
    _assert_same_bits(staged_call(lambda *a: fun(*a), *args), out)
    _check_aval(fun, args, out)


def test_weak_python_scalars_stay_weak_through_staging():
  jaxpr, _ = pe.trace_to_jaxpr(lambda x: [lax.add(x, 2)], [ShapedArray((3,), i32)])
  assert jaxpr.out_avals == [ShapedArray((3,), i32, False)]
  imax = np.iinfo(i32).max
  np.testing.assert_array_equal(staged_call(lambda x: lax.add(x, 2), np.full(3, imax, i32)),
                                np.full(3, -imax, i32))
  with pytest.raises(TypeError, match="got int8, int32"):   # as JAX: not promoted
    pe.trace_to_jaxpr(lambda x: [lax.add(x, 2)], [ShapedArray((3,), i8)])


# ---------------------------------------------------------------------------
# Special values and integer wraparound


_SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 0.4, -0.4, 0.5, -0.5, 1.5, -1.5, 2.5,
                      -2.5, 7.0, -7.25], np.float64)

# (name, params, NumPy reference, bits equal jax.lax's). NB: jax.lax.logistic lowers to
# 1 / (1 + exp(-x)) on CPU, which is not correctly rounded in bf16; stagecraft's
# stablehlo.logistic is, so only its values are compared.
_SPECIAL_UNARY = [
    ("sign", {}, np.sign, True), ("abs", {}, np.abs, True), ("neg", {}, np.negative, True),
    ("floor", {}, np.floor, True), ("ceil", {}, np.ceil, True),
    ("round", dict(rounding_method=0), _round_afz, True),
    ("round", dict(rounding_method=1), np.rint, True),
    ("is_finite", {}, np.isfinite, True), ("sqrt", {}, np.sqrt, True),
    ("exp", {}, np.exp, False), ("log", {}, np.log, False), ("tanh", {}, np.tanh, False),
    ("logistic", {}, scipy.special.expit, False),
]


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: _DTYPE_NAMES[d])
@pytest.mark.parametrize("name,params,ref,same_bits_as_jax", _SPECIAL_UNARY,
                         ids=[f"{n}{''.join(map(str, p.values()))}"
                              for n, p, _, _ in _SPECIAL_UNARY])
def test_special_values_unary(name, params, ref, same_bits_as_jax, dtype):
  x = _SPECIALS.astype(dtype)
  op = functools.partial(getattr(lax, name), **params)
  out = op(x)
  with np.errstate(all="ignore"):
    _assert_close(out, ref(x.astype(np.float64)), dtype)
  if same_bits_as_jax:  # signed zeros too (NumPy's sign(-0.0) is +0.0; XLA's is -0.0)
    np.testing.assert_array_equal(_bits(out), _bits(_jax(name, x, **params)))
  _assert_same_bits(staged_call(lambda a: op(a), x), out)


def test_signed_zeros():
  x = np.array([-0.0, 0.0, -0.4, 0.4], f32)
  assert np.signbit(lax.sign(x)).tolist() == [True, False, True, False]
  assert np.signbit(lax.abs(x)).tolist() == [False] * 4
  assert np.signbit(lax.floor(x)).tolist() == [True, False, True, False]
  assert np.signbit(lax.ceil(x)).tolist() == [True, False, True, False]
  assert np.signbit(lax.round(x)).tolist() == [True, False, True, False]
  assert np.signbit(lax.round(x, 1)).tolist() == [True, False, True, False]
  assert np.signbit(lax.neg(x)).tolist() == [False, True, False, True]
  # max/min with equal zeros: as XLA (and jax.lax): max gives +0.0, min gives -0.0.
  a, b = np.array([-0.0, 0.0], f32), np.array([0.0, -0.0], f32)
  assert np.signbit(lax.max(a, b)).tolist() == [False, False]
  assert np.signbit(lax.min(a, b)).tolist() == [True, True]


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: _DTYPE_NAMES[d])
@pytest.mark.parametrize("name", ["max", "min"])
def test_special_values_max_min(name, dtype):
  x, y = (a.ravel().astype(dtype) for a in np.meshgrid(_SPECIALS, _SPECIALS))
  out = getattr(lax, name)(x, y)
  ref = {"max": np.maximum, "min": np.minimum}[name](x.astype(np.float64), y.astype(np.float64))
  _assert_close(out, ref, dtype)  # NaN-propagating, as NumPy's maximum/minimum
  np.testing.assert_array_equal(_bits(out), _bits(_jax(name, x, y)))
  _assert_same_bits(staged_call(lambda a, b: getattr(lax, name)(a, b), x, y), out)


def test_integer_overflow_wraps():
  x = np.array([100, 127, -128, -100], i8)
  y = np.array([100, 1, -1, 3], i8)
  for fun, expected in [(lax.add, [-56, -128, 127, -97]), (lax.sub, [0, 126, -127, -103]),
                        (lax.mul, [16, 127, -128, -44])]:
    np.testing.assert_array_equal(fun(x, y), np.array(expected, i8))
    np.testing.assert_array_equal(staged_call(lambda a, b: fun(a, b), x, y),
                                  np.array(expected, i8))
  np.testing.assert_array_equal(lax.neg(np.array([-128, 5], i8)), np.array([-128, -5], i8))
  np.testing.assert_array_equal(lax.abs(np.array([-128, -5], i8)), np.array([-128, 5], i8))
  np.testing.assert_array_equal(lax.neg(np.array([0, 5], u8)), np.array([0, 251], u8))
  np.testing.assert_array_equal(lax.add(np.array([4294967295], u32), np.array([2], u32)),
                                np.array([1], u32))
  np.testing.assert_array_equal(lax.integer_pow(np.array([2, 3], i8), 7), np.array([-128, -117], i8))


def test_integer_div_rem_round_toward_zero():
  x = np.array([-7, 7, -7, 7, -128], i8)
  y = np.array([2, -2, -2, 2, -1], i8)
  np.testing.assert_array_equal(lax.div(x, y), np.array([-3, -3, 3, 3, -128], i8))
  np.testing.assert_array_equal(lax.rem(x, y), np.array([-1, 1, -1, 1, 0], i8))
  np.testing.assert_array_equal(lax.div(x, y), _jax("div", x, y))
  np.testing.assert_array_equal(lax.rem(x, y), _jax("rem", x, y))
  np.testing.assert_array_equal(lax.rem(np.array([-7.5, 7.5], f32), np.array([2, -2], f32)),
                                np.array([-1.5, 1.5], f32))


def test_select_n_out_of_order_and_scalar_which():
  cases = [np.full(4, i, f32) for i in range(3)]
  which = np.array([2, 0, 1, 2], i32)
  np.testing.assert_array_equal(lax.select_n(which, *cases), [2, 0, 1, 2])
  np.testing.assert_array_equal(lax.select_n(np.int32(2), *cases), [2, 2, 2, 2])
  np.testing.assert_array_equal(lax.select_n(np.array([True, False, True, False]),
                                             cases[0], cases[1]), [1, 0, 1, 0])
  np.testing.assert_array_equal(lax.select(np.array([True, False, True, False]), cases[1],
                                           cases[0]), [1, 0, 1, 0])
  np.testing.assert_array_equal(lax.select_n(np.True_, cases[0]), cases[0])


def test_convert_complex_to_bool_uses_the_real_part():
  x = np.array([0.5 + 2j, 0j, 1j, -0.0 + 1j], c64)
  # Complex -> real warns as JAX 0.10.2 does (NumPy's ComplexWarning), eagerly and staged.
  with pytest.warns(np.exceptions.ComplexWarning, match=_COMPLEX_TO_REAL):
    out = lax.convert_element_type(x, bool_)
  np.testing.assert_array_equal(out, [True, False, False, False])
  with pytest.warns(np.exceptions.ComplexWarning, match=_COMPLEX_TO_REAL):
    expected = _jax("convert_element_type", x, bool_)
  np.testing.assert_array_equal(out, expected)
  with pytest.warns(np.exceptions.ComplexWarning, match=_COMPLEX_TO_REAL):
    staged = staged_call(lambda a: lax.convert_element_type(a, bool_), x)
  np.testing.assert_array_equal(staged, out)
  # Complex -> complex does not warn (warnings are errors in this suite).
  np.testing.assert_array_equal(lax.convert_element_type(x, c64), x)


def test_convert_float_to_int_saturates_as_jax():
  x = np.array([1.7, -1.7, 300, -300, np.nan, np.inf, -np.inf], f32)
  for dtype in (i8, u8, i32, u32):
    np.testing.assert_array_equal(lax.convert_element_type(x, dtype),
                                  _jax("convert_element_type", x, dtype))


def test_atan2_complex_as_jax():
  x = np.array([1 + 1j, -2 + 0.5j], c64)
  y = np.array([0.5 - 1j, 3 + 2j], c64)
  out = lax.atan2(x, y)
  assert out.dtype == c64
  np.testing.assert_allclose(out, _jax("atan2", x, y), **tol(c64))


# ---------------------------------------------------------------------------
# Errors. The abstract eval raises them, so eager calls and staging give the same message.


def _raises_same_as_jax(call_sc, call_jax):
  with pytest.raises(TypeError) as ours:
    call_sc()
  with pytest.raises(TypeError) as theirs:
    call_jax()
  return str(ours.value), str(theirs.value)


_a3 = np.ones(3, f32)
# (stagecraft.lax function name, args); jax.lax gives the same message for each.
SAME_ERRORS = [
    ("add", (_a3, np.ones(3, i32))),
    ("add", (True, False)),
    ("add", (_a3, np.ones(2, f32))),
    ("sin", (np.ones(3, i32),)),
    ("sin", (1,)),
    ("abs", (np.ones(3, u8),)),
    ("abs", (np.ones(3, bool_),)),
    ("rem", (np.ones(2, c64), np.ones(2, c64))),
    ("rem", (np.ones(2, bool_), np.ones(2, bool_))),
    ("bitwise_not", (_a3,)),
    ("bitwise_and", (_a3, _a3)),
    ("lt", (np.ones(2, c64), np.ones(2, c64))),
    ("atan2", (np.ones(2, i32), np.ones(2, i32))),
    ("pow", (np.ones(2, i32), np.ones(2, i32))),
    ("exp2", (np.ones(2, i32),)),
    ("erf", (np.ones(2, c64),)),
    ("cbrt", (np.ones(2, c64),)),
    ("floor", (np.ones(2, i32),)),
    ("is_finite", (np.ones(2, i32),)),
    ("add", (np.ones(3, i8), 2.5)),
]


@pytest.mark.parametrize("name,args", SAME_ERRORS,
                         ids=[f"{n}-{i}" for i, (n, _) in enumerate(SAME_ERRORS)])
def test_error_messages_match_jax(name, args):
  ours, theirs = _raises_same_as_jax(lambda: getattr(lax, name)(*args),
                                     lambda: getattr(jax.lax, name)(*args))
  assert ours == theirs
  # Staging raises the same message.
  avals = [core.get_aval(a) for a in args]
  with pytest.raises(TypeError, match=re.escape(ours)):
    pe.trace_to_jaxpr(lambda *a: [getattr(lax, name)(*a)], avals)


def test_integer_pow_negative_exponent_error_as_jax():
  ours, theirs = _raises_same_as_jax(lambda: lax.integer_pow(np.ones(3, i32), -2),
                                     lambda: jax.lax.integer_pow(np.ones(3, i32), -2))
  assert ours == theirs == ("Integers cannot be raised to negative powers, got "
                            "integer_pow(int32[3], -2)")
  # Staging raises the same message (the exponent is static).
  with pytest.raises(TypeError, match=re.escape(ours)):
    pe.trace_to_jaxpr(lambda a: [lax.integer_pow(a, -2)], [ShapedArray((3,), i32, False)])


def test_error_messages():
  with pytest.raises(TypeError, match=r"lax\.add requires arguments to have the same dtypes, "
                                      r"got float32, int32"):
    lax.add(_a3, np.ones(3, i32))
  with pytest.raises(TypeError, match=r"sin does not accept dtype int32"):
    lax.sin(np.ones(3, i32))
  with pytest.raises(TypeError, match=r"add got incompatible shapes for broadcasting"):
    lax.add(_a3, np.ones(2, f32))
  with pytest.raises(TypeError, match=r"add does not accept dtype bool at position 0"):
    lax.add(True, False)
  with pytest.raises(TypeError, match=r"abs does not accept dtype uint8\. Accepted dtypes are "
                                      r"subtypes of floating, complexfloating, signedinteger"):
    lax.abs(np.ones(3, u8))


# Messages where stagecraft differs from jax.lax 0.10.2 (pinned; JAX's message above each).
def test_error_messages_that_differ_from_jax():
  with pytest.raises(TypeError, match=re.escape(   # JAX's words
      "add: arrays must have the same number of dimensions, got {1, 2}")):
    lax.add(np.ones((2, 3), f32), _a3)
  # select_n: JAX's messages (its order: shapes, then dtypes).
  with pytest.raises(TypeError, match=re.escape(
      "select `which` must be scalar or have the same shape as cases, got `which` shape "
      "(2,) but case shape (3,).")):
    lax.select_n(np.array([True, False]), _a3, _a3)
  with pytest.raises(TypeError, match=re.escape(
      "lax.select requires arguments to have the same dtypes, got float32, int32. (Tip: "
      "jnp.where is a similar function that does automatic type promotion on inputs).")):
    lax.select_n(np.array([True, False, True]), _a3, np.ones(3, i32))
  with pytest.raises(TypeError, match=re.escape("select cases must have the same shapes, "
                                                "got [(3,), (2,)].")):
    lax.select_n(True, _a3, np.ones(2, f32))
  with pytest.raises(TypeError, match=r"select `which` must be boolean or integer type, got "
                                      r"float32\."):
    lax.select_n(_a3, _a3, _a3)
  with pytest.raises(TypeError, match=re.escape(
      "select with boolean `which` cannot have > 2 cases.")):
    lax.select_n(np.array([True, False, True]), _a3, _a3, _a3)
  with pytest.raises(ValueError, match=re.escape("select_n() must have at least one case")):
    lax.select_n(np.array([True]))
