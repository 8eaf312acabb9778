"""stagecraft.dtypes against JAX's promotion lattice (jnp.promote_types, jax.dtypes.result_type).

JAX runs with x64 off here (never enabled), so results are compared after JAX's canonicalization;
stagecraft's `enable_x64` is off by default too.
"""
import itertools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from stagecraft import dtypes
from stagecraft.config import config

# JAX warns when asked about 64-bit dtypes with x64 off; that is expected here.
pytestmark = pytest.mark.filterwarnings("ignore:Explicitly requested dtype")

DTYPES = [np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    ml_dtypes.bfloat16, np.float16, np.float32, np.float64, np.complex64, np.complex128)]
DTYPE_IDS = [dtypes.short_name(d) for d in DTYPES]
SCALARS = [1, 1.0, 1j, True]
SCALAR_IDS = ["int", "float", "complex", "bool"]


def _canon(dt):
  return jax.dtypes.canonicalize_dtype(dt)


class Weak:
  """A weakly typed value on our side (as an Array or tracer of a Python scalar)."""

  def __init__(self, dt):
    self.dtype = np.dtype(dt)
    self.weak_type = True


@pytest.fixture(autouse=True)
def _x64_off():
  assert not config.enable_x64
  assert not jax.config.jax_enable_x64
  yield
  assert not config.enable_x64


@pytest.mark.parametrize("b", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("a", DTYPES, ids=DTYPE_IDS)
def test_promote_types_matches_jax(a, b):
  expected = _canon(jnp.promote_types(a, b))
  assert dtypes.promote_types(a, b) == expected
  assert dtypes.promote_types(b, a) == expected


@pytest.mark.parametrize("b", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("a", DTYPES, ids=DTYPE_IDS)
def test_result_type_of_arrays_matches_jax(a, b):
  x, y = np.zeros((), a), np.zeros((), b)
  dt, weak = jax.dtypes.result_type(x, y, return_weak_type_flag=True)
  assert dtypes.result_type(x, y, return_weak_type_flag=True) == (_canon(dt), weak)
  # Dtypes themselves are strongly typed too.
  assert dtypes.result_type(a, b) == _canon(jax.dtypes.result_type(a, b))


@pytest.mark.parametrize("dt", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("s", SCALARS, ids=SCALAR_IDS)
def test_weak_python_scalars_with_arrays_match_jax(s, dt):
  x = np.zeros((), dt)
  for args in [(s, x), (x, s)]:
    jdt, jweak = jax.dtypes.result_type(*args, return_weak_type_flag=True)
    assert dtypes.result_type(*args, return_weak_type_flag=True) == (_canon(jdt), jweak)


@pytest.mark.parametrize("t", SCALARS, ids=SCALAR_IDS)
@pytest.mark.parametrize("s", SCALARS, ids=SCALAR_IDS)
def test_python_scalars_together_match_jax(s, t):
  jdt, jweak = jax.dtypes.result_type(s, t, return_weak_type_flag=True)
  assert dtypes.result_type(s, t, return_weak_type_flag=True) == (_canon(jdt), jweak)
  jdt, jweak = jax.dtypes.result_type(s, return_weak_type_flag=True)
  assert dtypes.result_type(s, return_weak_type_flag=True) == (_canon(jdt), jweak)


WEAK_JAX = [jnp.asarray(1), jnp.asarray(1.0), jnp.asarray(1j)]


@pytest.mark.parametrize("dt", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("w", WEAK_JAX, ids=["weak_int", "weak_float", "weak_complex"])
def test_weak_arrays_with_arrays_match_jax(w, dt):
  assert w.weak_type
  ours_w = Weak(w.dtype)
  x = np.zeros((), dt)
  jdt, jweak = jax.dtypes.result_type(w, x, return_weak_type_flag=True)
  assert dtypes.result_type(ours_w, x, return_weak_type_flag=True) == (_canon(jdt), jweak)
  assert dtypes.result_type(x, ours_w, return_weak_type_flag=True) == (_canon(jdt), jweak)


@pytest.mark.parametrize("s", SCALARS, ids=SCALAR_IDS)
@pytest.mark.parametrize("w", WEAK_JAX, ids=["weak_int", "weak_float", "weak_complex"])
def test_weak_arrays_with_scalars_match_jax(w, s):
  jdt, jweak = jax.dtypes.result_type(w, s, return_weak_type_flag=True)
  assert dtypes.result_type(Weak(w.dtype), s, return_weak_type_flag=True) == (_canon(jdt), jweak)


def test_weak_results():
  assert dtypes.result_type(1, 2.0, return_weak_type_flag=True) == (dtypes.float32, True)
  assert dtypes.result_type(np.zeros((), np.float16), 2.0, return_weak_type_flag=True) == (
      dtypes.float16, False)
  assert dtypes.result_type(np.zeros((), np.uint8), 1) == dtypes.uint8
  assert dtypes.result_type(np.zeros((), dtypes.bfloat16), 1.0) == dtypes.bfloat16
  assert dtypes.result_type(np.zeros((), np.int8), 1j) == dtypes.complex64
  assert dtypes.result_type(1.0) == dtypes.float32
  assert dtypes.is_weakly_typed(1.0) and not dtypes.is_weakly_typed(True)
  assert dtypes.is_weakly_typed(Weak(np.float32))
  assert not dtypes.is_weakly_typed(np.zeros(()))


def test_result_type_needs_an_argument():
  with pytest.raises(ValueError, match="at least one"):
    dtypes.result_type()


def test_three_way_result_type_matches_jax():
  for dts in itertools.combinations(DTYPES, 3):
    args = [np.zeros((), d) for d in dts]
    assert dtypes.result_type(*args) == _canon(jax.dtypes.result_type(*args)), dts


# ---------------------------------------------------------------------------
# Canonicalization.

NARROWED = {np.int64: np.int32, np.uint64: np.uint32, np.float64: np.float32,
            np.complex128: np.complex64}


@pytest.mark.parametrize("dt", DTYPES, ids=DTYPE_IDS)
def test_canonicalize_x64_off_matches_jax(dt):
  assert dtypes.canonicalize_dtype(dt) == _canon(dt)


@pytest.mark.parametrize("dt", DTYPES, ids=DTYPE_IDS)
def test_canonicalize_x64_on_is_identity(dt):
  config.update("enable_x64", True)
  try:
    assert dtypes.canonicalize_dtype(dt) == dt
  finally:
    config.update("enable_x64", False)
  assert dtypes.canonicalize_dtype(dt) == np.dtype(NARROWED.get(dt.type, dt))


def test_x64_on_defaults_and_promotion():
  config.update("enable_x64", True)
  try:
    assert dtypes.result_type(1.0) == dtypes.float64
    assert dtypes.result_type(1) == dtypes.int64
    assert dtypes.promote_types(np.int64, np.float32) == dtypes.float32   # as in JAX's lattice
    assert dtypes.promote_types(np.int64, np.float64) == dtypes.float64
    assert dtypes.promote_types(np.int64, np.uint64) == dtypes.float64
    assert dtypes.result_type(np.zeros((), np.int64), np.zeros((), np.uint64),
                              return_weak_type_flag=True) == (dtypes.float64, True)
  finally:
    config.update("enable_x64", False)
  assert dtypes.result_type(1.0) == dtypes.float32
  assert dtypes.promote_types(np.int64, np.float64) == dtypes.float32


def test_canonicalize_names_and_python_types():
  assert dtypes.canonicalize_dtype("float64") == dtypes.float32
  assert dtypes.canonicalize_dtype(float) == dtypes.float32
  assert dtypes.canonicalize_dtype(int) == _canon(int)
  assert dtypes.canonicalize_dtype(bool) == dtypes.bool_
  # NumPy's message, as JAX lets it through.
  with pytest.raises(TypeError, match="data type 'not_a_dtype' not understood"):
    dtypes.canonicalize_dtype("not_a_dtype")


# ---------------------------------------------------------------------------
# Names, errors, predicates.

@pytest.mark.parametrize("dt,name", [
    (np.bool_, "bool"), (np.int8, "i8"), (np.int32, "i32"), (np.int64, "i64"),
    (np.uint8, "u8"), (np.uint32, "u32"), (ml_dtypes.bfloat16, "bf16"), (np.float16, "f16"),
    (np.float32, "f32"), (np.float64, "f64"), (np.complex64, "c64"), (np.complex128, "c128"),
    (ml_dtypes.float8_e4m3fn, "f8_e4m3fn"),
])
def test_short_name(dt, name):
  assert dtypes.short_name(np.dtype(dt)) == name


@pytest.mark.parametrize("f8", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2])
@pytest.mark.parametrize("other", [np.float32, ml_dtypes.bfloat16, np.float16])
def test_float8_has_no_promotion_path(f8, other):
  with pytest.raises(dtypes.TypePromotionError, match="no available implicit dtype promotion path"):
    dtypes.promote_types(f8, other)
  with pytest.raises(ValueError, match="no available implicit dtype promotion path"):
    dtypes.result_type(np.zeros((), f8), np.zeros((), other))   # a ValueError, as JAX's
  with pytest.raises(jax.dtypes.TypePromotionError):   # JAX agrees there is no path
    jnp.promote_types(f8, other)


def test_float8_with_weak_scalar_keeps_float8():
  f8 = np.dtype(ml_dtypes.float8_e4m3fn)
  assert dtypes.result_type(np.zeros((), f8), 1.0) == f8
  assert dtypes.result_type(np.zeros((), f8), 1.0) == jax.dtypes.result_type(np.zeros((), f8), 1.0)
  assert dtypes.promote_types(f8, f8) == f8


@pytest.mark.parametrize("dt", [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn])
def test_issubdtype_custom_floats(dt):
  for parent, expected in [(np.floating, True), (np.inexact, True), (np.number, True),
                           (np.integer, False), (np.complexfloating, False)]:
    assert dtypes.issubdtype(dt, parent) == expected
    assert dtypes.issubdtype(dt, parent) == jnp.issubdtype(dt, parent)
  assert dtypes.issubdtype(dt, dt)
  assert not dtypes.issubdtype(dt, np.float32)
  assert dtypes.is_float(np.dtype(dt)) and dtypes.is_inexact(np.dtype(dt))


def test_issubdtype_builtin():
  assert dtypes.issubdtype(np.int8, np.integer)
  assert dtypes.issubdtype(np.float32, np.floating)
  assert not dtypes.issubdtype(np.float32, np.integer)
  assert dtypes.is_unsigned(dtypes.uint8) and not dtypes.is_unsigned(dtypes.int8)
  assert dtypes.is_complex(dtypes.complex64) and dtypes.is_integer(dtypes.int16)


def test_finfo_iinfo():
  assert dtypes.finfo(dtypes.bfloat16).bits == 16
  assert float(dtypes.finfo(np.float16).max) == float(jnp.finfo(jnp.float16).max)
  assert dtypes.iinfo(np.int8).min == -128
