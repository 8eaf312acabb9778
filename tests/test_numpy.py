"""stagecraft.numpy against NumPy (values) and jax.numpy (result dtypes and weak types, with
x64 off as in both): creation, ufuncs, reductions, shape functions, contractions, operators
and methods of Array, and the same functions under jit."""
import math
import operator
import os
import re
import sys
import warnings
from typing import Callable, NamedTuple

sys.path.insert(0, os.path.dirname(__file__))

import jax  # noqa: E402
import jax.numpy as jjnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

from _util import tol  # noqa: E402
import stagecraft as sc  # noqa: E402
import stagecraft.numpy as jnp  # noqa: E402
from stagecraft.runtime.array import Array  # noqa: E402

from _cases import b1, bf16, f32, f64, i8, i32, u8  # noqa: E402
ALL = (f32, i32, i8, u8, b1, bf16)
NUM = (f32, i32, i8, u8, bf16)
FLOATS = (f32, bf16)
INTS = (i32, i8, u8)

# ---------------------------------------------------------------------------
# Helpers

# domain: (float low, float high, int low, int high)
DOMAINS = {"any": (-3, 3, -9, 9), "nonzero": (-3, 3, -9, 9), "pos": (0.1, 4, 1, 9),
           "unit": (-0.95, 0.95, -1, 1), "ge1": (1.05, 4, 1, 9), "tan": (-1.2, 1.2, -1, 1),
           "intval": (-9, 9, -9, 9), "intval_nz": (-9, 9, -9, 9), "expo": (-2, 2, 0, 3),
           "special": (-3, 3, -9, 9)}


def make(rng, shape, dtype, domain="any"):
  """Random values of `dtype` in `domain` (nonzero domains avoid 0; intval floats are
  integers; special floats include inf and nan)."""
  dtype = np.dtype(dtype)
  flo, fhi, ilo, ihi = DOMAINS[domain]
  nonzero = domain in ("nonzero", "intval_nz")
  if dtype == b1:
    return np.ones(shape, bool) if nonzero else rng.integers(0, 2, shape).astype(bool)
  if dtype.kind in "iu":
    v = rng.integers(max(ilo, 0) if dtype.kind == "u" else ilo, ihi + 1, shape)
    return np.where(v == 0, 1, v).astype(dtype) if nonzero else v.astype(dtype)
  v = rng.uniform(flo, fhi, shape)
  if domain.startswith("intval"):
    v = np.round(v)
  if nonzero:
    v = np.where(np.abs(v) < 0.5, 1.0, v)
  if domain == "special":
    v = np.where(rng.random(shape) < 0.2, np.inf, v)
    v = np.where(rng.random(shape) < 0.2, -np.inf, v)
    v = np.where(rng.random(shape) < 0.2, np.nan, v)
  return np.asarray(v).astype(dtype)


def py_scalar(v):
  """A NumPy 0-d value as the Python scalar of its kind."""
  v = np.asarray(v)
  return {"b": bool, "i": int, "u": int}.get(v.dtype.kind, float)(v.item())


def is_float(dtype) -> bool:
  return np.dtype(dtype) in (np.dtype(np.float16), bf16, f32, f64)


def assert_values(got, want, dtype=None):
  """`got` (an Array) equals NumPy's `want`: exactly for ints and bools, within `tol` of the
  result dtype for floats (NaNs equal)."""
  got = np.asarray(got)
  want = np.asarray(want)
  assert got.shape == want.shape, (got.shape, want.shape)
  if is_float(got.dtype):
    np.testing.assert_allclose(got.astype(f64), want.astype(f64), equal_nan=True,
                               **tol(dtype or got.dtype))
  else:
    np.testing.assert_array_equal(got, want.astype(got.dtype))


def jax_type(f, *args, **kw):
  """The type (shape, dtype, weak type) of jax.numpy's `f(*args, **kw)`, by abstract
  evaluation with the arguments as constants (as concrete as eagerly; no compile)."""
  return jax.eval_shape(lambda: f(*args, **kw))


def assert_like_jax(got, want, weak_type=True):
  """Same shape, dtype and (unless `weak_type` is False) weak type as jax.numpy's result."""
  assert isinstance(got, Array), type(got)
  assert got.shape == want.shape, (got.shape, want.shape)
  assert got.dtype == want.dtype, (got.dtype, want.dtype)
  if weak_type:
    assert got.weak_type == want.weak_type, (got.weak_type, want.weak_type)


def _compute_dtypes(args, inexact):
  """The dtype jax.numpy converts the operands to, and the dtype to compute NumPy's
  reference in (float64 for inexact ops; float32 for the 16-bit floats)."""
  promoted = np.dtype(jjnp.result_type(*args))
  if inexact:
    return promoted, f64
  if promoted in (bf16, np.dtype(np.float16)):
    return promoted, f32
  return promoted, promoted


def numpy_ref(fn, args, inexact):
  promoted, cdt = _compute_dtypes(args, inexact)
  with np.errstate(all="ignore"):
    return fn(*[np.asarray(a).astype(promoted).astype(cdt) for a in args])


# ---------------------------------------------------------------------------
# Creation


@pytest.mark.parametrize("obj", [[1, 2, 3], [1.5, 2], [True, False], [[1, 2], [3, 4]],
                                 [[1.0], [2]], [[True, 1], [0, 1]], [], ((1, 2), (3, 4)),
                                 [[[1]], [[2]]]],
                         ids=lambda o: repr(o))
def test_array_from_lists(obj):
  got = jnp.array(obj)
  assert_like_jax(got, jjnp.array(obj))
  assert_values(got, np.array(obj))
  assert_like_jax(jnp.asarray(obj), jjnp.asarray(obj))


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8,
                                   np.uint16, np.uint32, np.uint64, np.float16, ml_dtypes.bfloat16,
                                   np.float32, np.float64, np.complex64, np.complex128],
                         ids=lambda d: np.dtype(d).name)
def test_array_from_numpy_canonicalizes(dtype):
  host = np.array([[0, 1, 2], [3, 4, 5]]).astype(dtype)
  for f in ("array", "asarray"):
    got = getattr(jnp, f)(host)
    want = getattr(jjnp, f)(host)
    assert_like_jax(got, want)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  assert jnp.array(host).dtype == {np.dtype(np.int64): i32, np.dtype(np.uint64): np.uint32,
                                   f64: f32, np.dtype(np.complex128): np.complex64
                                   }.get(np.dtype(dtype), np.dtype(dtype))


@pytest.mark.parametrize("x", [2, 2.5, True, -7, np.float32(2.5), np.int8(3), np.float64(1.5)],
                         ids=repr)
def test_array_from_scalars_weak_type(x):
  got = jnp.array(x)
  assert_like_jax(got, jjnp.array(x))
  assert got.weak_type == (type(x) in (int, float))
  assert got.shape == ()
  assert got.item() == np.asarray(x).item() or math.isclose(got.item(), float(x))


def test_array_repr_and_options():
  assert repr(jnp.array(2.)) == "Array(2., dtype=float32, weak_type=True)"
  assert repr(jnp.array([1, 2])) == "Array([1, 2], dtype=int32)"
  assert repr(jnp.array(True)) == "Array(True, dtype=bool)"
  assert repr(jnp.array(3)) == "Array(3, dtype=int32, weak_type=True)"
  assert jnp.array([1, 2], dtype=jnp.float32).dtype == f32
  assert not jnp.array(2, dtype=float).weak_type
  assert jnp.array([1, 2], ndmin=3).shape == (1, 1, 2)
  x = jnp.array([1.0, 2.0])
  assert jnp.asarray(x) is x
  assert jnp.asarray(x, jnp.int32).dtype == i32
  with pytest.raises(TypeError, match="with dtype object is not a valid JAX array type"):
    jnp.array([object()])


class _Opaque:
  def __repr__(self):
    return "<Opaque>"


@pytest.mark.parametrize("value", [
    None, [1, None], [[1, 2], [3, None]], [[1, 2], [3]], _Opaque(), [_Opaque()],
    (1.0, _Opaque()), [1, "x"], "abc", {"a": 1}, {1, 2}, [[_Opaque()]]],
    ids=["none", "none_in_list", "ragged_with_none", "ragged", "object", "object_in_list",
         "object_second", "string_second", "string", "dict", "set", "nested_object"])
def test_array_of_non_numbers_raises_as_jax(value):
  """`jnp.array` of values no array holds: JAX 0.10.2's exception type and message (None
  anywhere is a ValueError; otherwise the first non-numeric leaf is named)."""
  with pytest.raises(Exception) as want:
    jjnp.array(value)
  with pytest.raises(want.type) as got:
    jnp.array(value)
  assert str(got.value) == str(want.value)


def test_dtype_objects():
  x = jnp.float32(3.)
  assert isinstance(x, Array) and x.dtype == f32 and not x.weak_type and x.item() == 3.0
  assert np.dtype(jnp.float32) == np.float32
  assert jnp.float32 == np.float32 and jnp.float32 == "float32" and jnp.int32 != np.float32
  assert np.dtype(jnp.bfloat16) == bf16
  assert jnp.bfloat16(1.5).dtype == bf16 and float(jnp.bfloat16(1.5)) == 1.5
  y = jnp.int32(7)
  assert isinstance(y, Array) and y.dtype == i32 and int(y) == 7
  assert jnp.zeros(2, jnp.int8).dtype == i8
  assert jnp.array([1.5], dtype=jnp.bfloat16).dtype == bf16
  assert jnp.dtype("int8") == i8


@pytest.mark.parametrize("case", [
    ("zeros", lambda m: m.zeros((2, 3))), ("zeros int", lambda m: m.zeros(3, m.int32)),
    ("zeros 0", lambda m: m.zeros((0, 2))), ("ones", lambda m: m.ones((2, 1), bf16)),
    ("ones bool", lambda m: m.ones(2, bool)), ("zeros int dtype", lambda m: m.zeros(2, int)),
    ("full", lambda m: m.full((2, 2), 3, m.int8)), ("full f", lambda m: m.full(3, 1.5, "float32")),
    ("full arr", lambda m: m.full((2, 3), np.float32([1, 2, 3]))),
    ("full npscalar", lambda m: m.full((2,), np.int8(3))),
    ("zeros_like", lambda m: m.zeros_like(np.ones((2, 3), np.int8))),
    ("ones_like dtype", lambda m: m.ones_like(np.ones((2,), np.int8), dtype=m.float32)),
    ("full_like", lambda m: m.full_like(np.ones((2, 3), np.int32), 2.5)),
    ("full_like dtype", lambda m: m.full_like(np.ones((2, 3), np.int32), 2.5, m.float32)),
    ("zeros_like shape", lambda m: m.zeros_like(np.ones((2, 3), np.float32), shape=(4,))),
], ids=lambda c: c[0])
def test_fill_functions(case):
  _, f = case
  got = f(jnp)
  assert_like_jax(got, f(jjnp))
  assert_values(got, f(np))


def test_full_list_and_scalar_fill():
  assert_values(jnp.full((2, 3), [1, 2, 3]), np.full((2, 3), [1, 2, 3]))  # JAX rejects lists
  assert jnp.full((2, 3), [1, 2, 3]).dtype == i32
  # A difference from JAX left alone: jnp.full(shape, 1.5) is weakly typed there.
  assert jnp.full((2,), 1.5).dtype == f32


@pytest.mark.parametrize("args", [
    (5,), (0,), (1, 5), (5, 1), (1, 10, 3), (5, 0, -2), (0.0, 1.0, 0.25), (3.0,), (0, 1, 0.5),
    (-1.5, 2), (2, 8, 2)], ids=repr)
def test_arange(args):
  got = jnp.arange(*args)
  assert_like_jax(got, jjnp.arange(*args))
  assert_values(got, np.arange(*args))


@pytest.mark.parametrize("args,dtype", [((5,), jnp.float32), ((1, 4), jnp.int8),
                                        ((0, 2, 0.5), jnp.bfloat16), ((3,), "uint8")])
def test_arange_dtype(args, dtype):
  got = jnp.arange(*args, dtype=dtype)
  assert_like_jax(got, jjnp.arange(*args, dtype=dtype))
  assert_values(got, np.arange(*args, dtype=np.dtype(dtype)))


def test_arange_traced_raises():
  with pytest.raises(sc.ConcretizationTypeError, match="It arose in the jnp.arange argument "
                                                     "'stop'"):   # JAX's words
    sc.jit(lambda n: jnp.arange(n))(3)
  with pytest.raises(sc.ConcretizationTypeError, match="argument 'start'"):
    sc.jit(lambda n: jnp.arange(n, 10))(3)


@pytest.mark.parametrize("kw", [
    dict(start=0., stop=1., num=5), dict(start=0, stop=1, num=5, endpoint=False),
    dict(start=-1, stop=1, num=7), dict(start=2, stop=-3, num=6), dict(start=0, stop=1, num=0),
    dict(start=0, stop=1, num=1), dict(start=0, stop=1, num=1, endpoint=False),
    dict(start=0, stop=10, num=4, dtype=np.int32), dict(start=0, stop=1, num=3, dtype=bf16),
    dict(start=np.float32([0, 1]), stop=np.float32([1, 3]), num=3),
    dict(start=np.float32([0, 1]), stop=np.float32([1, 3]), num=3, axis=-1),
    dict(start=np.float32([[0], [1]]), stop=5., num=4, axis=1)], ids=repr)
def test_linspace(kw):
  got = jnp.linspace(**kw)
  assert_like_jax(got, jjnp.linspace(**kw))
  assert_values(got, np.linspace(**kw))


@pytest.mark.parametrize("kw", [dict(start=0, stop=2, num=5), dict(start=0, stop=2, num=4,
                                                                    endpoint=False),
                                dict(start=2, stop=3, num=1), dict(start=2, stop=3, num=0)],
                         ids=repr)
def test_linspace_retstep(kw):
  got, step = jnp.linspace(**kw, retstep=True)
  want, wstep = np.linspace(**kw, retstep=True)
  assert_values(got, want)
  assert_values(step, np.asarray(wstep))
  jgot, jstep = jjnp.linspace(**kw, retstep=True)
  assert_like_jax(got, jgot)
  assert step.dtype == jstep.dtype


def test_linspace_errors():
  with pytest.raises(ValueError, match="Number of samples, -1, must be non-negative"):
    jnp.linspace(0, 1, -1)


@pytest.mark.parametrize("args,kw", [((3,), {}), ((3, 5), {}), ((3, 5), dict(k=2)),
                                     ((4, 3), dict(k=-1)), ((0,), {}), ((2,), dict(k=5)),
                                     ((3,), dict(dtype=np.int32)), ((2, 2), dict(dtype=bool))],
                         ids=repr)
def test_eye(args, kw):
  got = jnp.eye(*args, **kw)
  assert_like_jax(got, jjnp.eye(*args, **kw))
  assert_values(got, np.eye(*args, **kw))
  if not args[1:] and not kw:
    assert_values(jnp.identity(args[0]), np.identity(args[0]))


# ---------------------------------------------------------------------------
# Ufuncs: one table drives values (NumPy) and dtype/weak type (jax.numpy)


class OpRecord(NamedTuple):
  name: str
  nargs: int
  dtypes: tuple
  domains: tuple          # one per operand, keys of DOMAINS
  numpy_ref: Callable
  inexact: bool = False   # computes in floats: NumPy's reference is taken in float64


def _rec(name, nargs, dtypes, domains=None, numpy_ref=None, inexact=False):
  return OpRecord(name, nargs, tuple(dtypes), domains or ("any",) * nargs,
                  numpy_ref or getattr(np, name), inexact)


TRANSCENDENTAL = [
    ("exp", "any", ALL), ("exp2", "any", NUM), ("log", "pos", NUM),
    ("log1p", "pos", FLOATS + (u8,)),
    ("expm1", "any", FLOATS + (i8,)), ("log2", "pos", FLOATS + (i32,)),
    ("log10", "pos", FLOATS + (i32,)), ("sqrt", "pos", ALL), ("cbrt", "any", FLOATS + (i32,)),
    ("sin", "any", ALL), ("cos", "any", NUM), ("tan", "tan", FLOATS + (i8,)),
    ("tanh", "any", FLOATS + (i32,)), ("sinh", "any", FLOATS + (i8,)),
    ("cosh", "any", FLOATS + (i8,)), ("arcsin", "unit", FLOATS), ("arccos", "unit", FLOATS),
    ("arctan", "any", FLOATS + (i32,)), ("arcsinh", "any", FLOATS + (i8,)),
    ("arccosh", "ge1", FLOATS + (u8,)), ("arctanh", "unit", FLOATS)]

UNARY = [_rec(n, 1, dts, (dom,), inexact=True) for n, dom, dts in TRANSCENDENTAL] + [
    _rec("negative", 1, (f32, i32, i8, u8, bf16)),
    _rec("positive", 1, NUM),
    _rec("abs", 1, ALL, numpy_ref=np.abs),
    _rec("absolute", 1, (f32, i32, i8, u8, bf16)),
    _rec("sign", 1, NUM),
    _rec("floor", 1, ALL), _rec("ceil", 1, ALL), _rec("trunc", 1, NUM),
    _rec("round", 1, (f32, bf16, i32, i8), numpy_ref=np.round),
    _rec("around", 1, (f32, i32), numpy_ref=np.round),
    _rec("rint", 1, (f32, bf16, i32, i8), inexact=True),
    _rec("isfinite", 1, (f32, bf16, i32, u8), ("special",)),
    _rec("isnan", 1, (f32, bf16, i32, b1), ("special",)),
    _rec("isinf", 1, (f32, bf16, i8), ("special",)),
    _rec("square", 1, ALL),
    _rec("reciprocal", 1, (f32, bf16, i32), ("nonzero",), inexact=True),
    _rec("invert", 1, (i32, i8, u8, b1)),
    _rec("logical_not", 1, ALL),
]

BINARY = [
    _rec("add", 2, ALL), _rec("subtract", 2, NUM), _rec("multiply", 2, ALL),
    _rec("divide", 2, ALL, ("any", "nonzero"), inexact=True),
    _rec("true_divide", 2, ALL, ("any", "nonzero"), inexact=True),
    _rec("floor_divide", 2, NUM, ("intval", "intval_nz")),
    _rec("remainder", 2, NUM, ("intval", "intval_nz")),
    _rec("mod", 2, NUM, ("intval", "intval_nz")),
    _rec("fmod", 2, NUM, ("intval", "intval_nz")),
    _rec("power", 2, NUM, ("pos", "expo")),
    _rec("maximum", 2, ALL), _rec("minimum", 2, ALL),
    _rec("arctan2", 2, (f32, bf16, i32, i8), inexact=True),
    *[_rec(n, 2, ALL) for n in ("equal", "not_equal", "less", "less_equal", "greater",
                                "greater_equal")],
    *[_rec(n, 2, (i32, i8, u8, b1)) for n in ("bitwise_and", "bitwise_or", "bitwise_xor")],
    *[_rec(n, 2, ALL) for n in ("logical_and", "logical_or", "logical_xor")],
]

SHAPES_1 = [(), (1,), (3,), (2, 3), (2, 1, 3)]


def test_table_covers_every_exported_ufunc():
  exported = {n for n in dir(jnp) if not n.startswith("_")}
  names = {r.name for r in UNARY + BINARY}
  assert names <= exported
  assert {"arccos", "arctan2", "bitwise_xor", "logical_not", "isinf", "reciprocal"} <= names


@pytest.mark.parametrize("rec", UNARY, ids=lambda r: r.name)
@settings(max_examples=6)
@given(data=st.data())
def test_unary_ufunc(rec, data):
  shape = data.draw(st.sampled_from(SHAPES_1), label="shape")
  dtype = data.draw(st.sampled_from(rec.dtypes), label="dtype")
  rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
  x = make(rng, shape, dtype, rec.domains[0])
  got = getattr(jnp, rec.name)(x)
  assert_like_jax(got, jax_type(getattr(jjnp, rec.name), x))
  assert_values(got, numpy_ref(rec.numpy_ref, [x], rec.inexact))


@pytest.mark.parametrize("rec", BINARY, ids=lambda r: r.name)
@settings(max_examples=8)
@given(data=st.data())
def test_binary_ufunc(rec, data):
  shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3,
                                                       max_side=3), label="shapes").input_shapes
  dts = [data.draw(st.sampled_from(rec.dtypes), label=f"dtype{i}") for i in range(2)]
  scalar_pos = data.draw(st.sampled_from([None, None, 0, 1]), label="python scalar at")
  rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
  args = [make(rng, s, d, dom) for s, d, dom in zip(shapes, dts, rec.domains)]
  if scalar_pos is not None:
    s = py_scalar(args[scalar_pos].ravel()[0] if args[scalar_pos].size else
                  make(rng, (), dts[scalar_pos], rec.domains[scalar_pos]))
    if type(s) is int and dts[1 - scalar_pos].kind == "u":
      s = abs(s)   # a negative Python int does not fit an unsigned operand
    args[scalar_pos] = s
  got = getattr(jnp, rec.name)(*args)
  if not (rec.name == "power" and isinstance(args[1], np.ndarray) and
          args[1].dtype.kind in "iu" and (args[1].ndim == 0 or type(args[0]) is float)):
    # jax.numpy.power special-cases integer exponents: with a 0-d integer array it takes
    # the exponent's value and ignores its dtype (power(int8 x, int32 0-d) is int8,
    # power(2, int8 0-d) a weak int32; promotion gives int32 and int8), and power(2.5,
    # int32 array) is a strong float32 (promotion: weak float32).
    # The weak type of jax.numpy's logical ops with a Python scalar depends on the other
    # operand's rank (0-d int32 array and 2.0: weak; 1-d: strong); not compared.
    assert_like_jax(got, jax_type(getattr(jjnp, rec.name), *args),
                    weak_type=not (rec.name.startswith("logical_") and scalar_pos is not None))
  elif type(args[0]) is int:
    # power(7, int8 0-d) is JAX's weak int32 343 where NumPy's int8 wraps to 87: JAX's
    # values are the reference.
    np.testing.assert_array_equal(np.asarray(got), np.asarray(jjnp.power(*args)))
    return
  assert_values(got, numpy_ref(rec.numpy_ref, args, rec.inexact))


@pytest.mark.parametrize("fn,args", [
    ("exp", (1,)), ("exp", (1.0,)), ("sqrt", (4,)), ("negative", (2,)), ("negative", (2.5,)),
    ("abs", (-2,)), ("floor", (2.5,)), ("floor", (2,)), ("square", (3,)), ("sign", (-2.0,)),
    ("reciprocal", (2,)), ("reciprocal", (4.0,)), ("rint", (2.5,)), ("invert", (2,)),
    ("round", (2.5,)), ("add", (2, 3)), ("add", (2, 3.5)), ("multiply", (True, 2)),
    ("divide", (3, 2)), ("power", (2, 3)), ("power", (2.0, 3)), ("floor_divide", (-7, 2)),
    ("remainder", (-7, 2)), ("maximum", (1, 2.0)), ("arctan2", (1, 2))], ids=repr)
def test_python_scalar_inputs(fn, args):
  got = getattr(jnp, fn)(*args)
  assert_like_jax(got, jax_type(getattr(jjnp, fn), *args))
  assert_values(got, numpy_ref(getattr(np, fn), args, inexact=got.dtype == f32))


def test_mixed_python_scalar_promotion():
  a = np.array([1, -2, 3], np.int8)
  r = jnp.add(a, 2)
  assert r.dtype == i8 and not r.weak_type
  assert_values(r, a + np.int8(2))
  r = jnp.add(a, 2.0)
  assert r.dtype == f32
  assert_like_jax(r, jjnp.add(a, 2.0))
  assert_values(r, a.astype(f32) + 2)
  r = jnp.multiply(2, np.array([1.5], ml_dtypes.bfloat16))
  assert r.dtype == bf16 and not r.weak_type
  r = jnp.add(np.uint8([250]), 10)   # wraps in uint8, as NumPy
  assert r.dtype == u8 and r.tolist() == [4]
  assert jnp.add(np.uint8([1]), np.int8([1])).dtype == np.int16
  assert jnp.add(np.int32([1]), np.float32([1])).dtype == f32
  assert jnp.add(np.float64([1]), np.float32([1])).dtype == f32


def test_integer_division_python_semantics():
  x = np.array([-7, 7, -7, 7, 0, -1, 6], np.int32)
  y = np.array([2, -2, -2, 2, 3, 5, -3], np.int32)
  for xd in (np.int8, np.int32):
    for f in ("floor_divide", "remainder", "mod", "fmod"):
      got = getattr(jnp, f)(x.astype(xd), y.astype(xd))
      assert_values(got, getattr(np, f)(x.astype(xd), y.astype(xd)))
  assert jnp.floor_divide(-7, 2).item() == -4 and jnp.remainder(-7, 2).item() == 1
  assert (jnp.asarray(x) // 3).tolist() == (x // 3).tolist()
  assert (jnp.asarray(x) % -3).tolist() == (x % -3).tolist()
  assert_values(jnp.floor_divide(np.float32([-7.5, 7.5]), np.float32([2, -2])),
                np.floor_divide(np.float32([-7.5, 7.5]), np.float32([2, -2])))
  assert_values(jnp.remainder(np.float32([-7.5, 7.5]), 2.0),
                np.remainder(np.float32([-7.5, 7.5]), np.float32(2)))
  assert_like_jax(jnp.floor_divide(np.array([True]), np.array([True])),   # bools -> int32
                  jjnp.floor_divide(np.array([True]), np.array([True])))


def test_power_integer_exponents():
  x = np.array([2, 3, -2, 1, -1, 0, 5], np.int32)
  for p in (0, 1, 2, 3, 5):
    got = jnp.power(x, p)
    assert_like_jax(got, jjnp.power(x, p))
    assert_values(got, x ** p)
  y = np.array([3, 2, 5, 7, 3, 4, 0], np.int32)
  assert_values(jnp.power(x, y), np.power(x, y))
  assert_values(jnp.power(x.astype(np.int8), y.astype(np.int8)),
                np.power(x.astype(np.int8), y.astype(np.int8)))
  assert_values(jnp.power(np.uint8([2, 3]), np.uint8([7, 5])), np.uint8([128, 243]))
  # Negative integer array exponents wrap as in JAX 0.10.2 (XLA's integer power; NumPy
  # raises): 1 and -1 stay units, 0 and the even bases here give 0, odd bases wrap.
  expected = {-1: [0, 2111105451, 0, 1, -1, 0, 1501274061],
              -2: [0, 703701817, 0, 1, 1, 0, -558738647],
              -3: [0, -1197088493, 0, 1, -1, 0, 1606239189]}
  for p, want in expected.items():
    e = np.full(7, p, np.int32)
    got = jnp.power(x, e)
    assert_like_jax(got, jjnp.power(x, e))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(jjnp.power(x, e)))
    assert got.tolist() == want, p
  x8, e8 = x.astype(np.int8), np.full(7, -3, np.int8)
  np.testing.assert_array_equal(np.asarray(jnp.power(x8, e8)),
                                np.array([0, 19, 0, 1, -1, 0, -43], np.int8))
  np.testing.assert_array_equal(np.asarray(jnp.power(x8, e8)), np.asarray(jjnp.power(x8, e8)))
  assert jnp.power(np.float32([2, 4]), -1).tolist() == [0.5, 0.25]
  assert_values(jnp.power(np.float32([1.5, 2]), 3), np.float32([1.5, 2]) ** 3)
  assert_values(jnp.power(np.array([True, False]), 2), np.array([1, 0], np.int32))
  # A static negative exponent on integers raises JAX's TypeError (from integer_pow).
  for p in (-1, -2):
    with pytest.raises(TypeError) as ours:
      jnp.power(x, p)
    with pytest.raises(TypeError) as theirs:
      jjnp.power(x, p)
    assert str(ours.value) == str(theirs.value) == (
        f"Integers cannot be raised to negative powers, got integer_pow(int32[7], {p})")
  assert_values(jnp.asarray(np.float32([2, 3])) ** 2, np.float32([4, 9]))
  assert_values(2 ** jnp.asarray(np.int32([2, 3])), np.int32([4, 8]))


@pytest.mark.parametrize("decimals", [0, 1, 2, -1])
@pytest.mark.parametrize("fn", ["round", "around"])
def test_round_decimals(fn, decimals):
  x = np.array([1.2345, -2.555, 15.0, 25.0, 0.5, 1.5, -0.5, 123.456], np.float32)
  got = getattr(jnp, fn)(x, decimals)
  assert_like_jax(got, getattr(jjnp, fn)(x, decimals))
  assert_values(got, np.round(x, decimals))
  assert_values(jnp.round(np.int32([15, 25]), decimals if decimals >= 0 else 0),
                np.int32([15, 25]))


def test_round_integer_negative_decimals_raises():
  with pytest.raises(NotImplementedError, match="round of integers to negative decimals"):
    jnp.round(np.int32([15, 25]), -1)


@st.composite
def where_args(draw):
  shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3,
                                                  max_side=3)).input_shapes
  rng = np.random.default_rng(draw(st.integers(0, 2**16)))
  cond = make(rng, shapes[0], draw(st.sampled_from([b1, f32, i32])))
  xs = [make(rng, s, draw(st.sampled_from(ALL))) for s in shapes[1:]]
  scalar_pos = draw(st.sampled_from([None, 0, 1]))
  if scalar_pos is not None:
    xs[scalar_pos] = py_scalar(make(rng, (), xs[scalar_pos].dtype, "pos"))
  return cond, xs[0], xs[1]


@settings(max_examples=20)
@given(where_args())
def test_where(args):
  cond, x, y = args
  got = jnp.where(cond, x, y)
  assert_like_jax(got, jjnp.where(cond, x, y))
  promoted = np.dtype(jjnp.result_type(x, y))
  want = np.where(cond, np.asarray(x).astype(promoted), np.asarray(y).astype(promoted))
  assert_values(got, want)


def test_where_one_argument_raises():
  with pytest.raises(ValueError, match="either both or neither of x and y"):
    jnp.where(np.array([True]), 1)


@pytest.mark.parametrize("x", [np.float32([-2.5, 0.5, 3]), np.int8([-5, 0, 7])],
                         ids=["f32", "i8"])
@pytest.mark.parametrize("lo,hi", [(0, 1), (-1, None), (None, 2), (0.5, 1.5),
                                   (np.float32([0, -1, 1]), 2)], ids=repr)
def test_clip(x, lo, hi):
  got_pos = jnp.clip(x, lo, hi)
  got_kw = jnp.clip(x, min=lo, max=hi)
  want = jjnp.clip(x, min=lo, max=hi)
  assert_like_jax(got_pos, want)
  assert_like_jax(got_kw, want)
  promoted = np.dtype(jjnp.result_type(*[v for v in (x, lo, hi) if v is not None]))
  ref = np.clip(x.astype(promoted), lo, hi).astype(promoted)
  assert_values(got_pos, ref)
  assert_values(got_kw, ref)
  assert_values(jnp.asarray(x).clip(lo, hi), ref)


def test_ufunc_broadcast_error():
  # JAX 0.10's type and message: operands of equal rank are broadcast by lax.
  with pytest.raises(TypeError, match=re.escape("add got incompatible shapes for "
                                                "broadcasting: (2,), (3,).")):
    jnp.add(np.ones(2, np.float32), np.ones(3, np.float32))
  with pytest.raises(ValueError, match=re.escape("Incompatible shapes for broadcasting: "
                                                 "shapes=[(2, 3), (4,)]")):   # JAX's text
    jnp.add(np.ones((2, 3), np.float32), np.ones(4, np.float32))


# ---------------------------------------------------------------------------
# Reductions

RED_X = {
    f32: np.random.default_rng(0).uniform(-3, 3, (2, 3, 4)).astype(f32),
    i8: np.random.default_rng(1).integers(-9, 10, (2, 3, 4)).astype(i8),
    b1: np.random.default_rng(2).integers(0, 2, (2, 3, 4)).astype(bool),
    bf16: np.random.default_rng(3).integers(-4, 5, (2, 3, 4)).astype(bf16),
}


@pytest.mark.parametrize("axis,keepdims", [(None, False), (None, True), (1, False),
                                           (-1, True), ((0, 2), False), ((2, 0), True)],
                         ids=repr)
@pytest.mark.parametrize("dtype", [f32, i8, b1, bf16], ids=str)
@pytest.mark.parametrize("fn", ["sum", "prod", "max", "min", "mean", "var", "std", "all",
                                "any"])
def test_reductions(fn, dtype, axis, keepdims):
  if dtype == bf16 and fn in ("var", "std", "prod"):
    pytest.skip("bf16 rounding of the intermediate sums is too coarse to compare")
  x = RED_X[dtype]
  got = getattr(jnp, fn)(x, axis=axis, keepdims=keepdims)
  assert_like_jax(got, jax_type(getattr(jjnp, fn), x, axis=axis, keepdims=keepdims))
  kw = dict(dtype=got.dtype) if fn in ("sum", "prod") and got.dtype != f32 else {}  # wraps
  want = getattr(np, fn)(x.astype(f32) if dtype == bf16 else x, axis=axis, keepdims=keepdims,
                         **kw)
  if got.dtype == f32:
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
  else:
    assert_values(got, want)


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", [None, 0, -1], ids=repr)
@pytest.mark.parametrize("dtype", [f32, i8, b1], ids=str)
@pytest.mark.parametrize("fn", ["argmax", "argmin"])
def test_arg_reductions(fn, dtype, axis, keepdims):
  x = RED_X[dtype]
  got = getattr(jnp, fn)(x, axis=axis, keepdims=keepdims)
  assert_like_jax(got, jax_type(getattr(jjnp, fn), x, axis=axis, keepdims=keepdims))
  assert_values(got, getattr(np, fn)(x, axis=axis, keepdims=keepdims))


@pytest.mark.parametrize("case", [
    ("sum i8 -> i32", lambda m, x: m.sum(x[i8])),
    ("sum bool -> i32", lambda m, x: m.sum(x[b1], axis=0)),
    ("prod bool", lambda m, x: m.prod(x[b1], axis=2)),
    ("sum u8", lambda m, x: m.sum(np.uint8([200, 200, 7]))),
    ("sum dtype f32", lambda m, x: m.sum(x[i8], axis=1, dtype=m.float32)),
    ("sum dtype i8", lambda m, x: m.sum(x[i8], axis=1, dtype=m.int8)),
    ("sum bool dtype bool", lambda m, x: m.sum(x[b1], axis=1, dtype=bool)),
    ("sum initial", lambda m, x: m.sum(x[f32], axis=0, initial=2.)),
    ("prod initial", lambda m, x: m.prod(x[i8], axis=(0, 1), initial=2)),
    ("max initial", lambda m, x: m.max(x[f32], axis=0, initial=1.)),
    ("min initial", lambda m, x: m.min(x[i8], initial=-3)),
    ("max initial empty", lambda m, x: m.max(np.zeros((0, 3), np.float32), axis=0, initial=5.)),
    ("sum empty", lambda m, x: m.sum(np.zeros((0, 3), np.float32), axis=0)),
    ("prod empty", lambda m, x: m.prod(np.zeros((0, 3), np.int32))),
    ("max zero-size off axis", lambda m, x: m.max(np.zeros((0, 3), np.float32), axis=1)),
    ("mean dtype", lambda m, x: m.mean(x[i8], axis=0, dtype=m.float32)),
    ("mean int", lambda m, x: m.mean(x[i8])),
    ("var ddof", lambda m, x: m.var(x[f32], axis=1, ddof=1)),
    ("std ddof kd", lambda m, x: m.std(x[i8], axis=(0, 2), ddof=1, keepdims=True)),
    ("var ddof too big", lambda m, x: m.var(x[f32], axis=0, ddof=2)),
    ("mean scalar", lambda m, x: m.mean(2)),
    ("sum scalar", lambda m, x: m.sum(2.)),
    ("max scalar", lambda m, x: m.max(3)),
    ("all int", lambda m, x: m.all(np.int32([1, 2]))),
    ("any empty", lambda m, x: m.any(np.zeros((0,)))),
    ("all empty", lambda m, x: m.all(np.zeros((0,)))),
    ("max nan", lambda m, x: m.max(np.float32([1, np.nan, 3]))),
    ("argmax nan", lambda m, x: m.argmax(np.float32([1, np.nan, 3]))),
    ("argmin ties", lambda m, x: m.argmin(np.float32([3, 1, 1, 2]))),
    ("amax", lambda m, x: m.amax(x[f32], axis=-2)),
], ids=lambda c: c[0])
def test_reduction_options(case):
  name, f = case
  got = f(jnp, RED_X)
  assert_like_jax(got, f(jjnp, RED_X))
  with np.errstate(all="ignore"), warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)   # NumPy: "Degrees of freedom <= 0"
    want = f(np, RED_X)
  if name == "var ddof too big":   # JAX's numpy gives NaN where n - ddof <= 0 (NumPy: inf)
    assert np.isinf(want).all()
    want = np.asarray(f(jjnp, RED_X))
    assert np.isnan(want).all()
  if got.dtype == f32:
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
  else:
    assert_values(got, want)


def test_reduction_errors():
  x = np.zeros((0, 3), np.float32)
  for fn in ("argmax", "argmin"):
    with pytest.raises(ValueError, match=f"attempt to get {fn} of an empty sequence"):
      getattr(jnp, fn)(np.zeros((0,), np.float32))
    with pytest.raises(ValueError, match=f"attempt to get {fn} of an empty sequence"):
      getattr(jnp, fn)(x, axis=0)
  for fn in ("max", "min", "amax"):
    with pytest.raises(ValueError, match=f"zero-size array to reduction operation "
                                         f"{fn.lstrip('a')} which has no identity"):
      getattr(jnp, fn)(x, axis=0)
    with pytest.raises(ValueError, match="zero-size array to reduction operation"):
      getattr(jnp, fn)(x)
  with pytest.raises(ValueError, match=re.escape("sum: duplicate value in 'axis': (0, 0).")):
    jnp.sum(np.ones((2, 2)), axis=(0, 0))
  with pytest.raises(ValueError, match="sum: axis 3 is out of bounds for array of dimension"
                                       " 3"):
    jnp.sum(np.ones((2, 2, 2)), axis=3)
  with pytest.raises(ValueError, match="argmax: axis -3 is out of bounds"):
    jnp.argmax(np.ones((2, 2)), axis=-3)
  with pytest.raises(NotImplementedError, match="'out' argument is not supported"):
    jnp.sum(np.ones(2), out=np.ones(2))


# ---------------------------------------------------------------------------
# Shape manipulation

X3 = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
I2 = np.arange(6, dtype=np.int8).reshape(2, 3)

SHAPE_CASES = [
    ("reshape -1", lambda m: m.reshape(X3, (-1, 4))),
    ("reshape int", lambda m: m.reshape(X3, 24)),
    ("reshape -1 first", lambda m: m.reshape(X3, (-1,))),
    ("reshape tuple", lambda m: m.reshape(X3, (4, 3, 2))),
    ("reshape to 0-d", lambda m: m.reshape(np.float32([5]), ())),
    ("ravel", lambda m: m.ravel(X3)), ("ravel 0-d", lambda m: m.ravel(np.float32(2))),
    ("transpose", lambda m: m.transpose(X3)),
    ("transpose perm", lambda m: m.transpose(X3, (1, 0, 2))),
    ("transpose neg perm", lambda m: m.transpose(X3, (-1, 0, 1))),
    ("permute_dims", lambda m: m.permute_dims(X3, (2, 0, 1))),
    ("swapaxes", lambda m: m.swapaxes(X3, 0, -1)),
    ("swapaxes same", lambda m: m.swapaxes(I2, 1, 1)),
    ("moveaxis", lambda m: m.moveaxis(X3, 0, -1)), ("moveaxis 2", lambda m: m.moveaxis(X3, -1, 0)),
    ("moveaxis seq", lambda m: m.moveaxis(X3, (0, 1), (-1, 0))),
    ("moveaxis seq2", lambda m: m.moveaxis(X3, [2, 0], [0, 1])),
    ("squeeze all", lambda m: m.squeeze(np.zeros((1, 3, 1), np.float32))),
    ("squeeze axis", lambda m: m.squeeze(np.zeros((1, 3, 1), np.float32), -1)),
    ("squeeze tuple", lambda m: m.squeeze(np.zeros((1, 3, 1), np.float32), (0, 2))),
    ("squeeze none", lambda m: m.squeeze(I2)),
    ("expand_dims", lambda m: m.expand_dims(I2, 1)),
    ("expand_dims neg", lambda m: m.expand_dims(I2, -1)),
    ("expand_dims tuple", lambda m: m.expand_dims(I2, (0, -1))),
    ("expand_dims tuple unsorted", lambda m: m.expand_dims(I2, (3, 0))),
    ("expand_dims 0-d", lambda m: m.expand_dims(np.float32(2), 0)),
    ("concatenate promote", lambda m: m.concatenate([I2, I2.astype(np.float32)], axis=1)),
    ("concatenate None", lambda m: m.concatenate([I2, X3], axis=None)),
    ("concatenate neg", lambda m: m.concatenate([I2, I2, I2], axis=-2)),
    ("concatenate one", lambda m: m.concatenate([I2])),
    ("concatenate bool int", lambda m: m.concatenate([I2 > 2, I2])),
    ("concatenate dtype", lambda m: m.concatenate([I2, I2], dtype=np.float32)),
    ("stack", lambda m: m.stack([I2, I2])), ("stack neg", lambda m: m.stack([I2, I2], axis=-1)),
    ("stack 1", lambda m: m.stack([I2, I2, I2], axis=1)),
    ("stack promote", lambda m: m.stack([I2, I2.astype(np.uint8)])),
    ("stack scalars", lambda m: m.stack([np.float32(1), np.float32(2)])),
    ("broadcast_to", lambda m: m.broadcast_to(np.float32([1, 2, 3]), (2, 3))),
    ("broadcast_to ones", lambda m: m.broadcast_to(np.float32([[1], [2]]), (3, 2, 4))),
    ("broadcast_to int shape", lambda m: m.broadcast_to(np.float32(1), 3)),
    ("matrix_transpose", lambda m: m.matrix_transpose(X3)),
    ("atleast_1d 0-d", lambda m: m.atleast_1d(np.float32(2.))),
    ("atleast_1d 2-d", lambda m: m.atleast_1d(I2)),
]


@pytest.mark.parametrize("case", SHAPE_CASES, ids=lambda c: c[0])
def test_shape_functions(case):
  _, f = case
  got = f(jnp)
  want = f(jjnp)   # (jax.numpy.reshape of a NumPy array returns a NumPy array)
  assert_like_jax(got, jjnp.asarray(want) if isinstance(want, np.ndarray) else want)
  assert_values(got, f(np))


def test_multi_output_shape_functions():
  got = jnp.broadcast_arrays(np.float32([1, 2, 3]), np.int8([[1], [2]]), 2.0)
  want = np.broadcast_arrays(np.float32([1, 2, 3]), np.int8([[1], [2]]), np.float32(2.0))
  jwant = jjnp.broadcast_arrays(np.float32([1, 2, 3]), np.int8([[1], [2]]), 2.0)
  assert len(got) == 3
  for g, w, jw in zip(got, want, jwant):
    assert_like_jax(g, jw)
    assert_values(g, w)
  got = jnp.atleast_1d(2., np.zeros((2, 2)))
  assert [g.shape for g in got] == [(1,), (2, 2)]
  assert jnp.shape(X3) == (2, 3, 4) and jnp.ndim(X3) == 3 and jnp.size(X3) == 24
  assert jnp.size(X3, 1) == 3 and jnp.ndim(2.0) == 0
  # A list: NumPy's shape after JAX's DeprecationWarning (JAX 0.10.2 warns the same).
  with pytest.warns(DeprecationWarning, match="shape requires ndarray or scalar arguments"):
    assert jnp.shape([[1, 2]]) == (1, 2)
  with pytest.warns(DeprecationWarning, match="shape requires ndarray or scalar arguments"):
    assert jjnp.shape([[1, 2]]) == (1, 2)
  assert jnp.broadcast_shapes((2, 1), (3,)) == (2, 3)


def test_shape_errors():
  with pytest.raises(TypeError, match=re.escape("cannot reshape array of shape (2, 3, 4) "
                                                "(size 24) into shape (5, 5) (size 25)")):
    jnp.reshape(X3, (5, 5))
  with pytest.raises(TypeError, match=re.escape("into shape (5, -1)")):
    jnp.reshape(X3, (5, -1))
  with pytest.raises(TypeError, match=re.escape(   # JAX's type and message
      "can only specify one unknown axis size with a `-1` value, got (-1, -1)")):
    jnp.reshape(X3, (-1, -1))
  # JAX writes the shape as given, without a final period
  for call in (lambda m: m.numpy.reshape(m.numpy.ones(6), 7),
               lambda m: m.numpy.ones(6).reshape(7),
               lambda m: m.numpy.ones(6).reshape(2, 4),
               lambda m: m.numpy.ones(6).reshape((4, -1))):
    with pytest.raises(TypeError) as want:
      call(jax)
    with pytest.raises(TypeError) as got:
      call(sc)
    assert str(got.value) == str(want.value)
  with pytest.raises(TypeError, match=re.escape(   # JAX's type and message
      "transpose permutation isn't a permutation of operand dimensions, got permutation "
      "(0, 0, 1) for operand shape (2, 3, 4).")):
    jnp.transpose(X3, (0, 0, 1))
  with pytest.raises(ValueError, match=re.escape("cannot select an axis to squeeze out which "
                                                 "has size not equal to one: axis 1 of shape "
                                                 "(1, 3, 1)")):
    jnp.squeeze(np.zeros((1, 3, 1)), 1)
  with pytest.raises(ValueError, match="squeeze: axis 3 is out of bounds"):
    jnp.squeeze(np.zeros((1, 3, 1)), 3)
  with pytest.raises(ValueError, match="moveaxis: source and destination must have the same "
                                       "number of axes"):
    jnp.moveaxis(X3, (0, 1), 2)
  with pytest.raises(ValueError, match="Need at least one array to concatenate"):
    jnp.concatenate([])
  with pytest.raises(ValueError, match="Zero-dimensional arrays cannot be concatenated"):
    jnp.concatenate([np.float32(1), np.float32(2)])
  with pytest.raises(TypeError, match="Cannot concatenate arrays with different numbers of "
                                      "dimensions"):
    jnp.concatenate([I2, X3])
  with pytest.raises(ValueError, match=re.escape(   # JAX 0.10.2's words (its stack primitive)
      "Cannot stack arrays with different numbers of dimensions: got (2, 3), (2, 3, 4).")):
    jnp.stack([I2, X3])
  with pytest.raises(ValueError, match="Need at least one array to stack"):
    jnp.stack([])
  with pytest.raises(ValueError, match=re.escape(   # JAX 0.10.2's words (its lax.broadcast_to)
      "Incompatible types for broadcasting: input type=float32[3] and requested type="
      "float32[2,4]")):
    jnp.broadcast_to(np.float32([1, 2, 3]), (2, 4))
  with pytest.raises(ValueError, match=re.escape(
      "Cannot broadcast to shape with fewer dimensions: arr_shape=(2, 3) shape=(3,)")):
    jnp.broadcast_to(np.ones((2, 3)), (3,))
  with pytest.raises(ValueError, match="Incompatible shapes for broadcasting"):
    jnp.broadcast_arrays(np.ones(2), np.ones(3))
  with pytest.raises(ValueError, match="matrix_transpose needs at least 2 dimensions, got 1"):
    jnp.matrix_transpose(np.ones(3))
  with pytest.raises(ValueError, match="expand_dims: axis 4 is out of bounds"):
    jnp.expand_dims(I2, 4)


# ---------------------------------------------------------------------------
# Contractions

_r = np.random.default_rng(7)
A = _r.uniform(-1, 1, (2, 3)).astype(np.float32)
B = _r.uniform(-1, 1, (3, 4)).astype(np.float32)
C = _r.uniform(-1, 1, (4, 2)).astype(np.float32)
V3 = _r.uniform(-1, 1, (3,)).astype(np.float32)
BA = _r.uniform(-1, 1, (5, 2, 3)).astype(np.float32)
BB = _r.uniform(-1, 1, (5, 3, 4)).astype(np.float32)
IA = _r.integers(-5, 6, (2, 3)).astype(np.int8)
IB = _r.integers(-5, 6, (3, 4)).astype(np.int32)

CONTRACTION_CASES = [
    ("matmul 2d", lambda m: m.matmul(A, B)), ("matmul vm", lambda m: m.matmul(V3, B)),
    ("matmul mv", lambda m: m.matmul(A, V3)), ("matmul vv", lambda m: m.matmul(V3, V3)),
    ("matmul batched", lambda m: m.matmul(BA, BB)),
    ("matmul broadcast batch", lambda m: m.matmul(BA[:, None], BB[:4][None])),
    ("matmul batch x 2d", lambda m: m.matmul(BA, B)),
    ("matmul 2d x batch", lambda m: m.matmul(A, BB)),
    ("matmul v x batch", lambda m: m.matmul(V3, BB)),
    ("matmul batch x v", lambda m: m.matmul(BA, V3)),
    ("matmul int", lambda m: m.matmul(IA, IB)), ("matmul int8", lambda m: m.matmul(IA, IA.T)),
    ("matmul mixed", lambda m: m.matmul(IA, B)),
    ("dot 0-d", lambda m: m.dot(np.float32(2.), A)), ("dot 0-d py", lambda m: m.dot(A, 2)),
    ("dot vv", lambda m: m.dot(V3, V3)), ("dot mm", lambda m: m.dot(A, B)),
    ("dot mv", lambda m: m.dot(A, V3)),
    ("dot nd", lambda m: m.dot(BA, BB)), ("dot nd x v", lambda m: m.dot(BB, C[:, 0])),
    ("vdot", lambda m: m.vdot(A, A)), ("vdot int", lambda m: m.vdot(IA, IA)),
    ("vdot nd", lambda m: m.vdot(BA[0], A)),
    ("tensordot 1", lambda m: m.tensordot(A, B, 1)),
    ("tensordot 0", lambda m: m.tensordot(A, V3, 0)),
    ("tensordot 2", lambda m: m.tensordot(BA, np.ones((2, 3, 2), np.float32), 2)),
    ("tensordot pairs", lambda m: m.tensordot(BB, C, ((2,), (0,)))),
    ("tensordot pairs 2", lambda m: m.tensordot(BA, np.ones((3, 5), np.float32),
                                                ((0, 2), (1, 0)))),
    ("tensordot int pair", lambda m: m.tensordot(BA, np.ones((3, 7), np.float32), (2, 0))),
    ("tensordot neg", lambda m: m.tensordot(BA, np.ones((3, 7), np.float32), ([-1], [-2]))),
]


@pytest.mark.parametrize("case", CONTRACTION_CASES, ids=lambda c: c[0])
def test_contractions(case):
  _, f = case
  got = f(jnp)
  assert_like_jax(got, f(jjnp))
  want = f(np)
  if got.dtype == f32:
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
  else:
    assert_values(got, want)


@pytest.mark.parametrize("spec,ops", [
    ("ij,jk->ik", (A, B)), ("bij,bjk->bik", (BA, BB)), ("ij->i", (A,)), ("ij->", (A,)),
    ("ij->j", (A,)), ("ij->ji", (A,)), ("i,j->ij", (V3, V3)), ("ij,jk,kl->il", (A, B, C)),
    ("...ij,...jk->...ik", (BA, BB)), ("...ij,jk->...ik", (BA, B)), ("ij,ij->", (A, A)),
    ("ij,ij->ij", (A, A)), ("i,i", (V3, V3)), ("ij,jk", (A, B)), ("ijk->kji", (BA,)),
    ("bij,jk->bik", (BA, B)), ("ij,jk->ik", (IA, IB)), ("ij,j->i", (IA, np.int8([1, 2, 3]))),
    ("ij,kj->ik", (A, A)), ("bij,bkj->bik", (BA, BA)), ("ij,k->ijk", (A, C[:, 0])),
], ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("optimize", ["auto", False])
def test_einsum(spec, ops, optimize):
  got = jnp.einsum(spec, *ops, optimize=optimize)
  assert_like_jax(got, jjnp.einsum(spec, *ops, optimize=optimize))
  want = np.einsum(spec, *ops)
  if got.dtype == f32:
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
  else:
    assert_values(got, want)


def test_contraction_errors():
  # Contracted sizes that differ: JAX's TypeError and message, from jnp.matmul and jnp.dot.
  for f in (jnp.matmul, jjnp.matmul, jnp.dot, jjnp.dot):
    with pytest.raises(TypeError, match=re.escape(
        "dot_general requires contracting dimensions to have the same shape, got (3,) and "
        "(2,).")):
      f(A, A)
  with pytest.raises(ValueError, match=re.escape("matmul: 0-d operands are not allowed "
                                                 "(shapes (2, 3) and ())")):
    jnp.matmul(A, 2.)
  with pytest.raises(ValueError, match="Incompatible shapes for broadcasting"):
    jnp.matmul(np.ones((2, 2, 3), np.float32), np.ones((3, 3, 4), np.float32))
  # Too many tensordot axes: JAX 0.10.2's TypeError and message.
  for f in (jnp.tensordot, jjnp.tensordot):
    with pytest.raises(TypeError, match=re.escape(
        "Number of tensordot axes (axes 3) exceeds input ranks ((2, 3) and (3, 4))")):
      f(A, B, 3)
  for f in (jnp.tensordot, jjnp.tensordot):
    with pytest.raises(TypeError, match=re.escape(
        "tensordot requires axes lists to have equal length, got (0, 1) and (0,).")):
      f(A, B, ((0, 1), (0,)))
  # a negative count contracts nothing, as JAX (an outer product)
  np.testing.assert_array_equal(np.asarray(jnp.tensordot(A, B, -1)),
                                np.asarray(jjnp.tensordot(A, B, -1)))
  for f in (jnp.tensordot, jjnp.tensordot):
    with pytest.raises(TypeError, match=re.escape(
        "dot_general requires contracting dimensions to have the same shape, got (2,) and "
        "(3,).")):
      f(A, B, ((0,), (0,)))
  with pytest.raises(ValueError):
    jnp.einsum("ij,jk->ik", A, A)
  # repeated indices within one operand take diagonals, as in JAX
  np.testing.assert_array_equal(np.asarray(jnp.einsum("ii->i", np.eye(3, dtype=np.float32))),
                                np.ones(3))


# ---------------------------------------------------------------------------
# Operators and methods

AF = np.array([[1.5, -2, 3], [4, 5, -6]], np.float32)
AI = np.array([[1, -2, 3], [-4, 5, 6]], np.int32)
NZ = np.array([[1, -2, 3], [-4, 5, 2]], np.int32)    # a divisor without zeros

BINOPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
          "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "&": operator.and_,
          "|": operator.or_, "^": operator.xor, "==": operator.eq, "!=": operator.ne,
          "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}

OPERANDS = {   # (left, right), each "A" (an Array of this value), a NumPy array or a scalar
    "A i32 . A i32": (("A", AI), ("A", NZ)), "np i32 . A i32": (AI, ("A", NZ)),
    "A i32 . 2": (("A", AI), 2), "3 . A i32": (3, ("A", NZ)), "A f32 . 2.5": (("A", AF), 2.5),
    "1.5 . A f32": (1.5, ("A", AF)), "A i32 . np.int8": (("A", AI), np.int8(2)),
    "np f32 . A i32": (AF, ("A", NZ)), "A i8 . 2": (("A", AI.astype(np.int8)), 2),
    "A bool . A bool": (("A", AI > 0), ("A", NZ > 0)),
}


def _materialize(v, m):
  if isinstance(v, tuple):
    return m.asarray(v[1])
  return v


@pytest.mark.parametrize("operands", list(OPERANDS), ids=str)
@pytest.mark.parametrize("op", list(BINOPS), ids=str)
def test_binary_operators(op, operands):
  l, r = OPERANDS[operands]
  vals = [v[1] if isinstance(v, tuple) else v for v in (l, r)]
  is_float = any(np.asarray(v).dtype.kind == "f" for v in vals)
  is_bool = all(np.asarray(v).dtype.kind == "b" for v in vals)
  if op in ("&", "|", "^") and is_float:
    pytest.skip("bitwise operators need integers")
  if is_bool and op in ("-", "/", "//", "%", "**"):
    pytest.skip("NumPy and jax.numpy reject these on bools")
  if op == "**" and not is_float:   # integers to negative powers: NumPy raises
    r = ("A", np.abs(r[1])) if isinstance(r, tuple) else abs(r)
    vals[1] = r[1] if isinstance(r, tuple) else r
  f = BINOPS[op]
  got = f(_materialize(l, jnp), _materialize(r, jnp))
  assert_like_jax(got, jax_type(lambda: f(_materialize(l, jjnp), _materialize(r, jjnp))))
  with np.errstate(all="ignore"):
    promoted = np.dtype(jjnp.result_type(*vals))
    want = f(*[np.asarray(v).astype(promoted) for v in vals])
  assert_values(got, want)


def test_matmul_and_unary_operators():
  x = jnp.asarray(AF)
  assert_values(x @ AF.T, AF @ AF.T)
  assert_values(AF @ x.T, AF @ AF.T)
  assert_values(x @ jnp.asarray(AF.T), AF @ AF.T)
  assert_like_jax(x @ AF.T, jjnp.asarray(AF) @ AF.T)
  assert_values(-x, -AF)
  assert_values(+x, AF)
  assert_values(abs(x), np.abs(AF))
  assert_values(~jnp.asarray(AI), ~AI)
  assert_values(~jnp.asarray(AI > 0), ~(AI > 0))
  assert_values(-jnp.asarray(AI.astype(np.int8)), -AI.astype(np.int8))
  assert_like_jax(-jnp.asarray(2.0), -jjnp.asarray(2.0))
  assert_values(round(jnp.asarray(np.float32([1.26, -2.5])), 1), np.float32([1.3, -2.5]))


def test_array_methods():
  x = jnp.asarray(AF)
  assert_values(x.T, AF.T)
  assert_values(x.mT, AF.T)
  assert x.astype(jnp.int8).dtype == i8 and x.astype(np.int8).tolist() == AF.astype(i8).tolist()
  assert x.astype(jnp.bfloat16).dtype == bf16
  assert_values(x.reshape(3, 2), AF.reshape(3, 2))
  assert_values(x.reshape((3, 2)), AF.reshape(3, 2))
  assert_values(x.reshape(-1), AF.reshape(-1))
  assert_values(x.transpose(), AF.T)
  assert_values(x.transpose(1, 0), AF.T)
  assert_values(x.transpose((1, 0)), AF.T)
  assert_values(x.ravel(), AF.ravel())
  assert_values(x.flatten(), AF.flatten())
  assert_values(x.sum(axis=0), AF.sum(axis=0))
  assert_values(x.sum(), np.float32(AF.sum()))
  np.testing.assert_allclose(x.mean(), AF.mean(), rtol=1e-6)
  assert x.max().item() == 5.0 and x.min().item() == -6.0
  assert x.argmax().item() == 4 and x.argmin(axis=1).tolist() == [1, 2]
  assert_values(x.prod(axis=1), AF.prod(axis=1))
  np.testing.assert_allclose(x.var(), AF.var(), rtol=1e-5)
  np.testing.assert_allclose(x.std(axis=0), AF.std(axis=0), rtol=1e-5)
  assert x.all().item() and not (x > 10).any().item()
  assert_values(x.clip(-1, 1), np.clip(AF, -1, 1))
  assert_values(x.round(), np.round(AF))
  assert_values(x.dot(AF.T), AF @ AF.T)
  assert_values(jnp.asarray(np.zeros((1, 3))).squeeze(), np.zeros(3, np.float32))
  assert_values(x.swapaxes(0, 1), AF.T)
  assert x.shape == (2, 3) and x.ndim == 2 and x.size == 6 and x.dtype == f32


def test_python_conversions():
  x = jnp.asarray(AF)
  assert len(x) == 2
  rows = list(x)
  assert len(rows) == 2 and all(isinstance(r, Array) for r in rows)
  assert [r.tolist() for r in rows] == AF.tolist()
  assert x.tolist() == AF.tolist()
  assert jnp.asarray(2.5).item() == 2.5 and type(jnp.asarray(2.5).item()) is float
  assert type(jnp.asarray(3).item()) is int
  assert float(jnp.asarray(2.5)) == 2.5 and int(jnp.asarray(3)) == 3
  assert int(jnp.asarray(3.7)) == 3
  assert bool(jnp.asarray(0)) is False and bool(jnp.asarray(2.0)) is True
  assert [1, 2, 3][jnp.asarray(1)] == 2     # __index__
  with pytest.raises(TypeError, match=re.escape("unhashable type: 'Array'")):
    hash(x)
  with pytest.raises(TypeError, match="unhashable type: 'Array'"):
    hash(jnp.asarray(1))
  with pytest.raises(TypeError, match="len\\(\\) of unsized object"):
    len(jnp.asarray(1.0))
  with pytest.raises(TypeError, match="iteration over a 0-d array"):
    iter(jnp.asarray(1.0))
  with pytest.raises(TypeError, match="Only integer scalar arrays can be converted to a scalar "
                                      "index"):
    [1, 2][jnp.asarray(1.0)]


def test_operator_with_unsupported_type_returns_not_implemented():
  with pytest.raises(TypeError):
    jnp.asarray(AF) + "a"
  assert (jnp.asarray(AF) == "a") is False


# ---------------------------------------------------------------------------
# Under jit

JIT_CASES = [
    ("ufuncs", lambda x, y: jnp.sin(x) * y + jnp.exp2(x) / 2),
    ("promotion", lambda x, y: jnp.add(x, 2) + jnp.floor_divide(y, 3)),
    ("power", lambda x, y: jnp.power(x, 3) + jnp.power(jnp.abs(x), y)),
    ("where clip", lambda x, y: jnp.where(x > 0, jnp.clip(x, max=0.5), y)),
    ("reductions", lambda x, y: (jnp.sum(x, axis=0), jnp.mean(y), jnp.argmax(x, axis=1),
                                 jnp.var(x, ddof=1), jnp.max(y, keepdims=True))),
    ("shapes", lambda x, y: jnp.concatenate([jnp.transpose(x), jnp.moveaxis(y, 0, 1)],
                                            axis=None)),
    ("contractions", lambda x, y: (x @ y.T, jnp.einsum("ij,kj->ik", x, y),
                                   jnp.tensordot(x, y, ((0, 1), (0, 1))))),
    ("methods", lambda x, y: x.T.reshape(2, 3).sum(axis=1) + y.astype(jnp.int32).max()),
    ("creation", lambda x, y: x + jnp.ones_like(x) + jnp.linspace(0, 1, 3) + jnp.arange(3)),
    ("weak scalar", lambda x, y: x * 2.0 + 1),
]


@pytest.mark.parametrize("case", JIT_CASES, ids=lambda c: c[0])
def test_jit_matches_eager(case):
  _, f = case
  x = np.array([[0.5, -1.5, 2.0], [1.0, 0.25, -0.75]], np.float32)
  y = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0]], np.float32)
  want = f(jnp.asarray(x), jnp.asarray(y))
  got = sc.jit(f)(x, y)
  want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
  assert len(got) == len(want)
  for g, w in zip(got, want):
    assert g.dtype == w.dtype and g.weak_type == w.weak_type and g.shape == w.shape
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6, atol=1e-6)


def test_jit_int_and_bool_inputs():
  f = sc.jit(lambda a, b: (a // 2, a % -3, jnp.logical_not(b), jnp.sum(b), a ** 2))
  a = np.array([-7, 7, 3], np.int32)
  b = np.array([True, False, True])
  fd, md, ln, s, p = f(a, b)
  assert fd.tolist() == (a // 2).tolist() and md.tolist() == (a % -3).tolist()
  assert ln.tolist() == [False, True, False] and s.item() == 2 and s.dtype == i32
  assert p.tolist() == (a ** 2).tolist()


def test_jit_python_scalar_argument_is_weak():
  got = sc.jit(lambda x, s: x + s)(np.float32([1, 2]), 2)
  assert got.dtype == f32 and not got.weak_type
  got = sc.jit(lambda s: jnp.asarray(s) * 2)(3.0)
  assert got.dtype == f32 and got.weak_type and got.item() == 6.0
