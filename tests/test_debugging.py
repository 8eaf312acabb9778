"""jax_debug_nans / jax_debug_infs and traceback filtering, against JAX."""
import traceback

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import traceback_util


def _log_twice(np_):
  def f(x):
    y = np_.log(x)   # the line that produces the NaN
    return y * 2
  return f


def _nan_error(lib, np_, transform, flag="jax_debug_nans", fn=None, x=None):
  fn = fn or _log_twice(np_)
  x = np_.array([-1.0, 1.0]) if x is None else x
  lib.config.update(flag, True)
  try:
    transform(lib, fn)(x)
  except FloatingPointError as e:
    return e
  finally:
    lib.config.update(flag, False)
  raise AssertionError("no FloatingPointError")


@pytest.mark.parametrize("transform", ["eager", "jit", "jit_vmap"])
def test_debug_nans_names_the_primitive_as_jax(transform, capsys):
  tr = {"eager": lambda lib, f: f, "jit": lambda lib, f: lib.jit(f),
        "jit_vmap": lambda lib, f: lib.jit(lib.vmap(f))}[transform]
  ours = _nan_error(sc, jnp, tr)
  theirs = _nan_error(jax, jjnp, tr)
  assert str(ours) == str(theirs) == "invalid value (nan) encountered in log"
  # the (filtered) traceback shows the user's line, and at most 2 stagecraft frames below it
  frames = traceback.extract_tb(ours.__traceback__)
  mine = [i for i, fr in enumerate(frames) if fr.filename == __file__ and "np_.log(x)" in fr.line]
  assert mine and len(frames) - 1 - mine[-1] <= 2


def test_debug_infs_and_context_managers():
  f = lambda lib: lib.jit(lambda x: 1.0 / x)
  with sc.debug_infs():
    with pytest.raises(FloatingPointError, match=r"invalid value \(inf\) encountered in div"):
      f(sc)(jnp.array([0.0, 1.0]))
  # off again: no error, JAX's result
  np.testing.assert_array_equal(np.asarray(f(sc)(jnp.array([0.0, 1.0]))), [np.inf, 1.0])
  with sc.debug_nans():
    assert float(sc.jit(lambda x: x + 1)(1.0)) == 2.0   # clean programs run as usual
    with pytest.raises(FloatingPointError, match="nan"):
      sc.grad(lambda x: jnp.sqrt(x) * 0.0 + jnp.log(x))(-1.0)
  assert not sc.config.debug_nans


def test_debug_nans_env_name_and_bad_values():
  sc.config.update("jax_debug_nans", True)
  assert sc.config.debug_nans
  sc.config.update("jax_debug_nans", False)
  with pytest.raises(ValueError, match=r"new enum value must be in \[.off., .tracebackhide."):
    sc.config.update("jax_traceback_filtering", "sometimes")


# ---------------------------------------------------------------------------
# traceback filtering


def _user_fn(x):
  if x.shape[0] == 3:
    raise ValueError("user error here")
  return x


def _loss(x):
  return jnp.sum(sc.vmap(_user_fn)(x))


def _stagecraft_frames(tb):
  return [fr for fr in traceback.extract_tb(tb) if "/stagecraft/" in fr.filename]


@pytest.mark.parametrize("make", [
    lambda: sc.jit(sc.grad(_loss)),
    lambda: sc.grad(_loss),
    lambda: sc.jit(_loss),
    lambda: (lambda x: sc.lax.scan(lambda c, r: (c + _user_fn(r).sum(), None), 0.0, x)),
])
def test_errors_from_user_code_show_no_stagecraft_frames(make):
  with pytest.raises(ValueError, match="user error here") as info:
    make()(jnp.ones((2, 3)))
  e = info.value
  assert len(_stagecraft_frames(e.__traceback__)) <= 2
  names = [fr.name for fr in traceback.extract_tb(e.__traceback__)]
  assert names[-1] == "_user_fn"
  # the unfiltered traceback stays reachable
  full = e.__stagecraft_unfiltered_traceback__
  assert len(_stagecraft_frames(full)) > 2
  assert any("removed its internal frames" in n for n in getattr(e, "__notes__", []))


def test_filtering_modes():
  f = sc.jit(sc.grad(_loss))
  x = jnp.ones((2, 3))
  try:
    sc.config.update("traceback_filtering", "off")
    with pytest.raises(ValueError) as info:
      f(x)
    assert len(_stagecraft_frames(info.value.__traceback__)) > 2
    sc.config.update("traceback_filtering", "remove_frames")
    with pytest.raises(ValueError) as info:
      f(x)
    assert len(_stagecraft_frames(info.value.__traceback__)) == 0
    cause = info.value.__cause__
    assert isinstance(cause, traceback_util.UnfilteredStackTrace)
    assert len(_stagecraft_frames(cause.__traceback__)) > 2
    sc.config.update("traceback_filtering", "tracebackhide")
    with pytest.raises(ValueError) as info:
      f(x)
    hidden = [fr for fr, _ in traceback.walk_tb(info.value.__traceback__)
              if fr.f_locals.get("__tracebackhide__")]
    assert hidden and all("/stagecraft/" in fr.f_code.co_filename for fr in hidden)
  finally:
    sc.config.update("traceback_filtering", "auto")


def test_internal_errors_keep_their_type_and_message():
  with pytest.raises(TypeError, match="Expected a callable value, got 3"):
    sc.jit(3)
  with pytest.raises(TypeError):
    sc.jit(lambda x: x @ x)(jnp.ones(3), jnp.ones(2))


_DEOPT_PROGRAMS = {
    "nan_literal": lambda lib, np_: lambda x: lib.jit(lambda y: np_.nan * y)(1.0),
    "log": lambda lib, np_: lib.jit(lambda x: np_.log(-x)),
    "nested_jit": lambda lib, np_: lib.jit(lambda x: lib.jit(np_.log)(-x)),
    "jit_of_vmap": lambda lib, np_: lib.jit(lib.vmap(lambda x: np_.sqrt(-x) + 1)),
}


@pytest.mark.parametrize("name", list(_DEOPT_PROGRAMS))
def test_debug_nans_deoptimized_run_as_jax(name, capsys):
  """What is printed (JAX prints "Invalid nan value ... Calling the de-optimized version."
  to stdout, once per jit whose output has the NaN) and the error, as JAX's: the inner
  jits stay jitted in the de-optimized run; a NaN no primitive makes (a literal) gets JAX's
  long message. (Not matched: how many times JAX prints the line for an eager vmap of a
  jit, 2; stagecraft prints it once.)"""
  def run(lib, np_):
    f = _DEOPT_PROGRAMS[name](lib, np_)
    with lib.debug_nans(True):
      with pytest.raises(FloatingPointError) as e:
        f(np_.ones(2))
    return capsys.readouterr().out, str(e.value)
  want = run(jax, jjnp)
  got = run(sc, jnp)
  assert "Calling the de-optimized version." in want[0]
  assert got == want
