"""A 64-bit dtype requested explicitly while x64 is off: JAX 0.10.2 warns (UserWarning,
"Explicitly requested dtype float64 requested in zeros is not available, and will be
truncated to dtype float32. ...") or, with `jax_explicit_x64_dtypes="error"`, raises
ValueError; stagecraft must do the same, with the same messages, from the same functions
(`dtypes.check_user_dtype`), naming the user's line.

Each case runs once with JAX and once with stagecraft, each recording its warnings; the
messages and categories must be equal, and stagecraft's warnings must name this file at
the case's line (JAX's hard-coded stack level names its own files for some functions, so
only JAX's message and category are compared there). Operand shapes are ones no other test
uses (13 elements), so JAX's jit caches (its reductions are jitted, and warn at trace time
only) hold no earlier trace of these calls."""
import types
import warnings

import jax
import jax.numpy as jjnp
import jax.scipy.linalg
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as sjnp
import stagecraft.scipy.linalg
from stagecraft import lax as slax
from stagecraft import random as srandom
from stagecraft.config import config as sconfig

N = 13

JAX = types.SimpleNamespace(jnp=jjnp, lax=jax.lax, random=jax.random, jax=jax,
                            scipy=jax.scipy, name="jax")
SC = types.SimpleNamespace(jnp=sjnp, lax=slax, random=srandom, jax=sc, scipy=sc.scipy,
                           name="stagecraft")

f64, i64, u64, c128 = np.float64, np.int64, np.uint64, np.complex128

# (id, call): each call on one line, so that its line is where the warning must point.
CASES = [
    ("zeros-np", lambda m: m.jnp.zeros(N, np.float64)),
    ("zeros-str", lambda m: m.jnp.zeros(N, "float64")),
    ("zeros-f8", lambda m: m.jnp.zeros(N, "f8")),
    ("zeros-jnp-type", lambda m: m.jnp.zeros(N, m.jnp.float64)),
    ("zeros-np-dtype", lambda m: m.jnp.zeros(N, np.dtype("int64"))),
    ("ones", lambda m: m.jnp.ones(N, m.jnp.int64)),
    ("empty", lambda m: m.jnp.empty(N, u64)),
    ("full", lambda m: m.jnp.full(N, 1, u64)),
    ("full-array-fill", lambda m: m.jnp.full((2, N), m.jnp.arange(N), f64)),
    ("arange", lambda m: m.jnp.arange(N, dtype=i64)),
    ("arange-step", lambda m: m.jnp.arange(0, N, 2, dtype=f64)),
    ("array", lambda m: m.jnp.array([1, 2, N], dtype=i64)),
    ("array-of-array", lambda m: m.jnp.array(m.jnp.ones(N), dtype=f64)),
    ("asarray", lambda m: m.jnp.asarray([1, 2, N], dtype=c128)),
    ("eye", lambda m: m.jnp.eye(N, dtype=f64)),
    ("identity", lambda m: m.jnp.identity(N, dtype=f64)),
    ("tri", lambda m: m.jnp.tri(N, dtype=f64)),
    ("indices", lambda m: m.jnp.indices((2, N), dtype=i64)),
    ("linspace", lambda m: m.jnp.linspace(0., 1., N, dtype=f64)),
    ("logspace", lambda m: m.jnp.logspace(0., 1., N, dtype=f64)),
    ("geomspace", lambda m: m.jnp.geomspace(1., 2., N, dtype=f64)),
    ("zeros_like", lambda m: m.jnp.zeros_like(m.jnp.ones(N), dtype=f64)),
    ("ones_like", lambda m: m.jnp.ones_like(m.jnp.ones(N), dtype=i64)),
    ("empty_like", lambda m: m.jnp.empty_like(m.jnp.ones(N), dtype=i64)),
    ("full_like", lambda m: m.jnp.full_like(m.jnp.ones(N), 3, dtype=i64)),
    ("astype-method", lambda m: m.jnp.ones(N).astype(f64)),
    ("astype", lambda m: m.jnp.astype(m.jnp.ones(N), "float64")),
    ("view", lambda m: m.jnp.ones(2 * N).view(i64)),
    ("sum", lambda m: m.jnp.sum(m.jnp.ones(N), dtype=f64)),
    ("prod", lambda m: m.jnp.prod(m.jnp.ones((N, 1)), axis=0, dtype=f64)),
    ("mean", lambda m: m.jnp.mean(m.jnp.ones(N), dtype=f64)),
    ("var", lambda m: m.jnp.var(m.jnp.ones(N), dtype=f64)),
    ("std", lambda m: m.jnp.std(m.jnp.ones(N), dtype=f64)),
    ("cumsum", lambda m: m.jnp.cumsum(m.jnp.ones(N), dtype=f64)),
    ("cumprod", lambda m: m.jnp.cumprod(m.jnp.ones(N), dtype=f64)),
    ("cumulative_sum", lambda m: m.jnp.cumulative_sum(m.jnp.ones(N), dtype=f64)),
    ("nansum", lambda m: m.jnp.nansum(m.jnp.ones(N), dtype=f64)),
    ("nanprod", lambda m: m.jnp.nanprod(m.jnp.ones(N), dtype=f64)),
    ("nanmean", lambda m: m.jnp.nanmean(m.jnp.ones(N), dtype=f64)),
    ("nanvar", lambda m: m.jnp.nanvar(m.jnp.ones(N), dtype=f64)),
    ("nanstd", lambda m: m.jnp.nanstd(m.jnp.ones(N), dtype=f64)),
    ("trace", lambda m: m.jnp.trace(m.jnp.ones((N, N)), dtype=f64)),
    ("argsort", lambda m: m.jnp.argsort(m.jnp.ones(N), dtype=i64)),
    ("ravel_multi_index", lambda m: m.jnp.ravel_multi_index((m.jnp.arange(N), m.jnp.arange(N)), (N, N), dtype=i64)),
    ("dot", lambda m: m.jnp.dot(m.jnp.ones(N), m.jnp.ones(N), preferred_element_type=f64)),
    ("vdot", lambda m: m.jnp.vdot(m.jnp.ones(N), m.jnp.ones(N), preferred_element_type=f64)),
    ("matmul", lambda m: m.jnp.matmul(m.jnp.ones((2, N)), m.jnp.ones(N), preferred_element_type=f64)),
    ("tensordot", lambda m: m.jnp.tensordot(m.jnp.ones(N), m.jnp.ones(N), 1, preferred_element_type=f64)),
    ("inner", lambda m: m.jnp.inner(m.jnp.ones(N), m.jnp.ones(N), preferred_element_type=f64)),
    ("einsum", lambda m: m.jnp.einsum("i,i", m.jnp.ones(N), m.jnp.ones(N), preferred_element_type=f64)),
    ("lax.convert_element_type", lambda m: m.lax.convert_element_type(m.jnp.ones(N), f64)),
    ("lax.bitcast_convert_type", lambda m: m.lax.bitcast_convert_type(m.jnp.ones((N, 2)), i64)),
    ("lax.dot", lambda m: m.lax.dot(m.jnp.ones(N), m.jnp.ones(N), preferred_element_type=f64)),
    ("lax.dot_general", lambda m: m.lax.dot_general(m.jnp.ones(N), m.jnp.ones(N), (((0,), (0,)), ((), ())), preferred_element_type=f64)),
    ("lax.argmax", lambda m: m.lax.argmax(m.jnp.ones(N), 0, i64)),
    ("lax.argmin", lambda m: m.lax.argmin(m.jnp.ones(N), 0, i64)),
    ("lax.full", lambda m: m.lax.full((N,), 1, f64)),
    ("lax.full_like", lambda m: m.lax.full_like(m.jnp.ones(N), 1, f64)),
    ("lax.full_like-str", lambda m: m.lax.full_like(m.jnp.ones(N), 1, "int64")),
    ("lax.iota", lambda m: m.lax.iota(i64, N)),
    ("lax.broadcasted_iota", lambda m: m.lax.broadcasted_iota(i64, (2, N), 1)),
    ("lax.conv", lambda m: m.lax.conv_general_dilated(m.jnp.ones((1, 1, N)), m.jnp.ones((1, 1, 3)), (1,), "VALID", preferred_element_type=f64)),
    ("random.uniform", lambda m: m.random.uniform(m.random.key(0), (N,), f64)),
    ("random.normal", lambda m: m.random.normal(m.random.key(0), (N,), f64)),
    ("random.randint", lambda m: m.random.randint(m.random.key(0), (N,), 0, 5, i64)),
    ("random.bits", lambda m: m.random.bits(m.random.key(0), (N,), u64)),
    ("random.exponential", lambda m: m.random.exponential(m.random.key(0), (N,), f64)),
    ("random.rademacher", lambda m: m.random.rademacher(m.random.key(0), (N,), i64)),
    ("random.truncated_normal", lambda m: m.random.truncated_normal(m.random.key(0), -1., 1., (N,), f64)),
    ("random.multinomial", lambda m: m.random.multinomial(m.random.key(0), 5., m.jnp.ones(3) / 3, dtype=f64)),
    ("scalar-type", lambda m: m.jnp.float64(N)),
    ("scalar-type-of-array", lambda m: m.jnp.int64(m.jnp.ones(N))),
    ("logaddexp.reduce", lambda m: m.jnp.logaddexp.reduce(m.jnp.ones(N), dtype=f64)),
    ("logaddexp2.reduce", lambda m: m.jnp.logaddexp2.reduce(m.jnp.ones(N), dtype=f64)),
    ("add.reduce", lambda m: m.jnp.add.reduce(m.jnp.ones(N), dtype=f64)),
    ("nn.one_hot", lambda m: m.jax.nn.one_hot(m.jnp.arange(N), 3, dtype=f64)),
    ("scipy.linalg.dft", lambda m: m.scipy.linalg.dft(N, dtype=c128)),
    ("jit-zeros", lambda m: m.jax.jit(lambda: m.jnp.zeros(N, f64))()),
    ("jit-astype", lambda m: m.jax.jit(lambda x: x.astype(i64))(m.jnp.ones(N))),
]

# Calls whose result dtype is 32-bit, or a Python type: no warning in either library.
QUIET = [
    ("zeros-f32", lambda m: m.jnp.zeros(N, np.float32)),
    ("zeros-float", lambda m: m.jnp.zeros(N, float)),
    ("array-int", lambda m: m.jnp.array([1, 2], dtype=int)),
    ("array-f64-data", lambda m: m.jnp.array(np.ones(N))),
    ("astype-complex", lambda m: m.jnp.ones(N).astype(complex)),
    ("sum-i32", lambda m: m.jnp.sum(m.jnp.ones(N), dtype=np.int32)),
    ("uniform-default", lambda m: m.random.uniform(m.random.key(0), (N,))),
    ("randint-int", lambda m: m.random.randint(m.random.key(0), (N,), 0, 5, int)),
    ("lax.empty", lambda m: m.lax.empty((N,), f64)),
    ("convert-f32", lambda m: m.lax.convert_element_type(m.jnp.ones(N), np.float32)),
    # JAX's lax.full_like narrows a jnp scalar type silently (a NumPy one warns, above).
    ("lax.full_like-jnp-type", lambda m: m.lax.full_like(m.jnp.ones(N), 1, m.jnp.float64)),
]


def _record(lib, call):
  with warnings.catch_warnings(record=True) as ws:
    warnings.simplefilter("always")
    call(lib)
  return [(w.category, str(w.message), w.filename, w.lineno) for w in ws
          if issubclass(w.category, UserWarning)]


@pytest.mark.parametrize("name,call", CASES, ids=[c[0] for c in CASES])
def test_warns_as_jax(name, call):
  expected = _record(JAX, call)
  got = _record(SC, call)
  assert expected, f"JAX gave no warning for {name}: the case tests nothing"
  assert [(c, m) for c, m, _, _ in got] == [(c, m) for c, m, _, _ in expected]
  for *_, filename, lineno in got:
    assert (filename, lineno) == (__file__, call.__code__.co_firstlineno)
  assert all("Explicitly requested dtype" in m for _, m, _, _ in got)


def test_message_text():
  # The full text, as users match it (JAX's, checked above, is this one too).
  with pytest.warns(UserWarning) as ws:
    sjnp.zeros(N, np.float64)
  assert [str(w.message) for w in ws] == [
      "Explicitly requested dtype float64 requested in zeros is not available, and will be "
      "truncated to dtype float32. To enable more dtypes, set the jax_enable_x64 "
      "configuration option or the JAX_ENABLE_X64 shell environment variable. See "
      "https://github.com/jax-ml/jax#current-gotchas for more."]
  assert ws[0].filename == __file__


@pytest.mark.parametrize("name,call", QUIET, ids=[c[0] for c in QUIET])
def test_quiet_for_32_bit_and_python_types(name, call):
  assert _record(JAX, call) == []
  assert _record(SC, call) == []


@pytest.mark.parametrize("name,call", CASES[::6], ids=[c[0] for c in CASES[::6]])
def test_quiet_with_x64(name, call):
  with jax.enable_x64(True):
    assert _record(JAX, call) == []
  with sc.enable_x64():
    assert _record(SC, call) == []


# Shapes of 17 elements: JAX's jitted functions keep their traces across the option's
# values, so a call traced before in "warn" mode would not raise.
ERROR_CASES = [
    ("zeros-str", lambda m: m.jnp.zeros(17, "float64")),
    ("arange", lambda m: m.jnp.arange(17, dtype=i64)),
    ("asarray", lambda m: m.jnp.asarray([1, 17], dtype=c128)),
    ("nansum", lambda m: m.jnp.nansum(m.jnp.ones(17), dtype=f64)),
    ("einsum", lambda m: m.jnp.einsum("i,i", m.jnp.ones(17), m.jnp.ones(17), preferred_element_type=f64)),
    ("lax.convert_element_type", lambda m: m.lax.convert_element_type(m.jnp.ones(17), f64)),
    ("lax.full_like", lambda m: m.lax.full_like(m.jnp.ones(17), 1, f64)),
    ("random.randint", lambda m: m.random.randint(m.random.key(0), (17,), 0, 5, i64)),
]


@pytest.mark.parametrize("name,call", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_error_mode(name, call):
  def message(lib, config):
    assert "WARN" in repr(config.read("jax_explicit_x64_dtypes")).upper()
    config.update("jax_explicit_x64_dtypes", "error")
    try:
      with pytest.raises(ValueError) as e:
        call(lib)
    finally:
      config.update("jax_explicit_x64_dtypes", "warn")
    return str(e.value)

  expected = message(JAX, types.SimpleNamespace(
      update=jax.config.update, read=lambda k: getattr(jax.config, k)))
  assert expected.startswith("Explicitly requested dtype ")
  assert "is not available. To enable more dtypes" in expected
  assert message(SC, sconfig) == expected


def test_allow_mode_is_silent():
  # JAX's "allow" makes 64-bit arrays without x64; stagecraft does not implement it: setting
  # it warns (once per process, as for every unhonoured option) and the requests narrow,
  # silently.
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    sconfig.update("jax_explicit_x64_dtypes", "allow")
  try:
    assert _record(SC, CASES[0][1]) == []
    assert sjnp.zeros(N, np.float64).dtype == np.float32
  finally:
    sconfig.update("jax_explicit_x64_dtypes", "warn")


def test_warns_at_trace_time_only():
  # As JAX's: the warning comes from tracing; a cached trace does not warn again.
  def f(x):
    return x.astype(np.float64) + 1

  for lib in (JAX, SC):
    g = lib.jax.jit(f)
    with pytest.warns(UserWarning, match="requested in astype"):
      g(lib.jnp.ones(N + 1))
    with warnings.catch_warnings():
      warnings.simplefilter("error")
      g(lib.jnp.ones(N + 1))


def test_filename_is_callers_through_user_wrappers():
  # The first frame outside stagecraft, however deep the library's own calls go.
  def user_helper():
    return sjnp.std(sjnp.ones(N + 2), dtype=np.float64)   # line checked below

  with warnings.catch_warnings(record=True) as ws:
    warnings.simplefilter("always")
    user_helper()
  assert [(w.filename, w.lineno) for w in ws] == [
      (__file__, user_helper.__code__.co_firstlineno + 1)]
