"""Details of JAX's behaviour that equinox, flax and chex rely on, checked against JAX: each
was found running a library's own tests under stagecraft (test_library_slices.py).

Fast (in process, a few seconds in all); JAX is the oracle.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import jax
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from _subproc import HERE, env


class _BadName:
  """A callable pytree-like object whose `__name__` is not a string (as an equinox Module
  traced as a scan carry answers it)."""
  __name__ = 3

  def __call__(self, x):
    return x * 2


@pytest.mark.parametrize("transform", ["jit", "vmap", "grad", "value_and_grad", "jacfwd",
                                       "hessian"])
def test_transforms_wrap_callables_with_odd_names(transform):
  f = getattr(sc, transform)(_BadName())
  x = jnp.ones(()) if transform in ("grad", "value_and_grad", "hessian") else jnp.ones(3)
  f(x)                               # functools.wraps would raise TypeError
  if transform == "jit":             # (JAX's C++ jit refuses a non-string name)
    assert type(f.__wrapped__) is _BadName
  else:   # as JAX's `util.wraps`, naming stops at the name: no `__wrapped__` of the callable
    theirs = getattr(jax, transform)(_BadName())
    assert not isinstance(getattr(theirs, "__wrapped__", None), _BadName)
    assert not isinstance(getattr(f, "__wrapped__", None), _BadName)
    assert f.__name__ == theirs.__name__


def test_jitted_function_type_name_and_repr_are_jaxs():
  """chex's `assert_max_traces` refuses a jitted function by its type's name."""
  def fn(x):
    return x
  assert type(sc.jit(fn)).__name__ == type(jax.jit(fn)).__name__ == "PjitFunction"
  assert repr(sc.jit(fn)) == repr(jax.jit(fn)) == f"<PjitFunction of {fn!r}>"


@pytest.mark.parametrize("kind", ["value_and_grad", "vjp", "jvp"])
def test_has_aux_passes_non_array_leaves_through(kind):
  """Aux leaves that are not tracers come back untouched (equinox's filter_grad returns
  strings and sentinels as aux), as in JAX."""
  marker = object()

  def make(lib):
    def f(x):
      return lib.numpy.sin(x).sum(), ("hi", marker, x * 2, 3.0)
    return f

  def run(lib):
    f, x = make(lib), lib.numpy.arange(3.0)
    if kind == "value_and_grad":
      (_, aux), _ = lib.value_and_grad(f, has_aux=True)(x)
    elif kind == "vjp":
      _, _, aux = lib.vjp(f, x, has_aux=True)
    else:
      _, _, aux = lib.jvp(f, (x,), (lib.numpy.ones(3),), has_aux=True)
    return aux

  want, got = run(jax), run(sc)
  assert got[0] == want[0] == "hi" and got[1] is marker and want[1] is marker
  np.testing.assert_allclose(np.asarray(got[2]), np.asarray(want[2]))
  assert type(got[3]) is type(want[3]) is float


@pytest.mark.parametrize("fun", [lambda x: x + 1, lambda x: x, lambda x: x * 2],
                         ids=["add", "identity", "mul"])
@pytest.mark.parametrize("primal", [1.0, np.float32(1.0)], ids=["python", "numpy"])
def test_jvp_tangent_types_follow_jax(fun, primal):
  """The tangent of `x + 1` at a host scalar is the input tangent: JAX gives it back as an
  Array when the primal output is one (equinox compares the types)."""
  want = jax.jvp(fun, (primal,), (primal,))
  got = sc.jvp(fun, (primal,), (primal,))
  for w, g in zip(want, got):
    assert isinstance(g, sc.Array) == isinstance(w, jax.Array), (w, g)
    assert np.asarray(g).dtype == np.asarray(w).dtype
    assert getattr(g, "weak_type", None) == getattr(w, "weak_type", None)


def test_donation_warns_about_unusable_buffers_as_jax():
  def g(x, y):
    return x + y.sum()
  args = lambda lib: (lib.numpy.array(1.0), lib.numpy.ones(10))   # noqa: E731
  msgs = []
  for lib in (jax, sc):
    with warnings.catch_warnings(record=True) as rec:
      warnings.simplefilter("always")
      lib.jit(g, donate_argnums=(0, 1))(*args(lib))
    msgs.append([str(w.message) for w in rec if "donated" in str(w.message)])
  assert len(msgs[1]) == 1
  assert msgs[1] == msgs[0]
  with warnings.catch_warnings():
    warnings.simplefilter("error")   # every donated buffer usable: no warning
    sc.jit(lambda x, y: (x + 1, y * 2), donate_argnums=(0, 1))(jnp.ones(2), jnp.ones(3))


def _pointer(x):
  return (x.unsafe_buffer_pointer() if hasattr(x, "unsafe_buffer_pointer")
          else x._buf.unsafe_buffer_pointer())


@pytest.mark.parametrize("fun", [lambda x: x + 1, lambda x: (np.int32(0), x + 1)],
                         ids=["single", "tuple"])
def test_donated_buffer_is_reused_by_the_output_of_its_type(fun):
  """As JAX: the donated input aliases the first output of its shape and dtype, so the
  output lives in the input's buffer (equinox's filter_jit(donate=...) tests check it)."""
  x = jnp.array(0.0)
  p = _pointer(x)
  out = sc.jit(fun, donate_argnums=0)(x)
  y = out if not isinstance(out, tuple) else out[1]
  assert x.is_deleted()
  assert _pointer(y) == p
  np.testing.assert_array_equal(np.asarray(y), 1.0)


def test_samplers_take_an_int_shape_as_jax():
  for name in ("normal", "uniform", "bits", "gumbel", "exponential", "laplace"):
    want = getattr(jax.random, name)(jax.random.key(0), 3)
    got = getattr(sc.random, name)(sc.random.key(0), 3)
    assert got.shape == want.shape == (3,)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
  with pytest.raises(TypeError, match="must be a sequence"):
    sc.random.choice(sc.random.key(0), 5, 3)
  with pytest.raises(TypeError, match="must be a sequence"):
    jax.random.choice(jax.random.key(0), 5, 3)


@pytest.mark.parametrize("op", [
    lambda k: k.copy(), lambda k: k.reshape(2, 3), lambda k: k.reshape((3, 2)).T,
    lambda k: k.reshape(1, 6).squeeze(), lambda k: k.reshape(2, 3).ravel(),
    lambda k: k.reshape(2, 3).swapaxes(0, 1), lambda k: k.reshape(2, 1, 3).squeeze(1),
    lambda k: k.reshape(2, 3).transpose(1, 0), lambda k: k.reshape(2, 3).flatten()],
    ids=["copy", "reshape", "T", "squeeze", "ravel", "swapaxes", "squeeze1", "transpose",
         "flatten"])
def test_key_array_methods_match_jax(op):
  want = op(jax.random.split(jax.random.key(0), 6))
  got = op(sc.random.split(sc.random.key(0), 6))
  assert got.shape == want.shape and got.dtype.name == "key<fry>"
  np.testing.assert_array_equal(np.asarray(sc.random.key_data(got)),
                                np.asarray(jax.random.key_data(want)))


def test_key_array_ellipsis_index_is_the_array():
  keys = sc.random.split(sc.random.key(0), 4)
  assert keys[...] is keys and keys[()] is keys
  key = sc.random.key(1)
  assert key[...] is key
  assert keys[1:3].shape == (2,)


def test_plugin_installs_before_the_tests_conftest(tmp_path):
  """A test suite's conftest.py that configures `jax` (equinox's sets strict dtype
  promotion) configures stagecraft under `-p stagecraft_plugin`."""
  (tmp_path / "conftest.py").write_text(textwrap.dedent("""
      import jax
      jax.config.update("jax_numpy_dtype_promotion", "strict")
  """))
  (tmp_path / "test_strict.py").write_text(textwrap.dedent("""
      import jax, jax.numpy as jnp, pytest
      def test_strict():
        assert jax.__name__ == "stagecraft"
        with pytest.raises(Exception, match="strict"):
          jnp.ones(2, "float16") + jnp.ones(2, "float32")
  """))
  (tmp_path / "pytest.ini").write_text("[pytest]\n")
  proc = subprocess.run(
      [sys.executable, "-m", "pytest", "-q", "-p", "stagecraft_plugin", "-p", "no:xdist",
       "-p", "no:cacheprovider", "-c", str(tmp_path / "pytest.ini"), "--rootdir",
       str(tmp_path), str(tmp_path / "test_strict.py")],
      cwd=HERE, env=env(), capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
  assert "1 passed" in proc.stdout
