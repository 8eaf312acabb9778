"""Config: every option of JAX 0.10.2 under JAX's names, JAX's defaults and validation, the
environment variables, the top-level context managers, and the options stagecraft honours."""
import logging
import os
import subprocess
import sys
import warnings

import jax
import pytest

import stagecraft as sc
from stagecraft.config import NumpyDtypePromotion
from stagecraft.config import HONOURED, config


def test_every_jax_option_exists_with_jax_default():
  theirs = jax.config.values
  ours = config.values
  assert set(theirs) == set(ours)
  for name, value in theirs.items():
    if name in ("jax_platforms", "jax_num_cpu_devices", "jax_traceback_filtering"):
      continue   # set from this process's environment
    assert ours[name] == value and repr(ours[name]) == repr(value), name
    assert config.read(name) == ours[name]
    assert getattr(config, name) == ours[name]


def test_update_validates_like_jax():
  with pytest.raises(AttributeError, match="Unrecognized config option: jax_nope"):
    config.update("jax_nope", 1)
  with pytest.raises(AttributeError, match="config.update"):
    config.enable_x64 = True


def _jax_read(name):
  return jax.config._value_holders[name].value


def _outcome(update, read, name, value):
  """What `update(name, value)` does: the value read back (its repr) or the exception
  (type and message); the option's old value is put back after."""
  old = read(name)
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      update(name, value)
      return f"ok {read(name)!r}"
  except Exception as e:  # noqa: BLE001 (any exception is an outcome to compare)
    return f"{type(e).__name__}: {e}"
  finally:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      update(name, old)


# Options whose setting acts on the runtime already started, or that JAX refuses once its
# backend has started (which other tests in the process decide).
_RUNTIME = {"jax_platforms", "jax_platform_name", "jax_num_cpu_devices", "jax_default_device",
            "jax_cpu_get_global_topology_timeout_minutes",
            "jax_cpu_get_local_topology_timeout_minutes"}


@pytest.mark.parametrize("value", [None, "zzz", 3, 2.5, True, [1], "strict", "warn", "O1"],
                         ids=repr)
def test_update_checks_every_option_as_jax(value):
  """Each option takes or refuses a value as JAX's does (bools take anything, ints None or
  an int, enums their choices, enum classes a member or its value), with JAX's exception
  and message, and reads back as JAX's (enum-class options as members)."""
  differ = []
  for name in sorted(jax.config._value_holders):
    if name in _RUNTIME:
      continue
    want = _outcome(jax.config.update, _jax_read, name, value)
    got = _outcome(config.update, config.read, name, value)
    if got != want:
      differ.append(f"{name}: {got} != {want}")
  assert not differ, "\n".join(differ)


def test_enum_class_options_read_as_members():
  assert config.jax_numpy_dtype_promotion == "standard"
  assert repr(config.jax_numpy_dtype_promotion) == repr(jax.config.jax_numpy_dtype_promotion)
  assert config.jax_numpy_dtype_promotion.value == "standard"   # libraries read `.value`
  with sc.numpy_dtype_promotion("strict"):
    assert config.jax_numpy_dtype_promotion is NumpyDtypePromotion.STRICT
  assert repr(config.jax_explicit_x64_dtypes) == "<ExplicitX64Mode.WARN: 1>"


def test_unhonoured_value_warns_once_honoured_does_not():
  config._warned.discard("use_magma")
  with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    config.update("jax_use_magma", "on")
    config.update("jax_use_magma", "off")
    config.update("jax_use_magma", "auto")
    config.update("jax_enable_checks", True)
    config.update("jax_enable_checks", False)
  msgs = [str(x.message) for x in w]
  assert len(msgs) == 1 and "jax_use_magma" in msgs[0] and "not implemented" in msgs[0]
  assert "enable_x64" in HONOURED and "use_magma" not in HONOURED


def test_state_context_managers():
  assert sc.numpy_rank_promotion.value == "allow"
  with sc.numpy_rank_promotion("raise"):
    assert config.numpy_rank_promotion == "raise"
    assert config.jax_numpy_rank_promotion == "raise"
  assert config.numpy_rank_promotion == "allow"
  with sc.enable_x64():
    assert config.enable_x64
  with sc.log_compiles():
    assert config.log_compiles
  with sc.debug_nans(True):
    assert sc.debug_nans.value


def test_state_key_follows_trace_affecting_options():
  k0 = config.state_key
  with sc.numpy_dtype_promotion("strict"):
    assert config.state_key != k0
  assert config.state_key == k0
  with sc.log_compiles(True):
    assert config.state_key == k0   # logging does not change programs


def test_log_compiles_and_explain_cache_misses(caplog):
  f = sc.jit(lambda x: x * 2)
  with caplog.at_level(logging.WARNING, logger="stagecraft"):
    with sc.log_compiles(True), sc.explain_cache_misses(True):
      f(sc.numpy.ones(3))
      f(sc.numpy.ones(4))
      f(sc.numpy.ones(4))
  text = caplog.text
  assert text.count("TRACING CACHE MISS") == 2 and "never seen function" in text
  assert "different input types:\n  * at x, now f32[4] and before f32[3]" in text
  assert text.count("Compiling jit(<lambda>) with global shapes and types") == 2
  assert "ShapedArray(float32[4])" in text


def test_enable_checks_type_checks_traced_jaxprs():
  with sc.enable_checks(True):
    assert float(sc.jit(lambda x: sc.numpy.sin(x) + 1)(0.0)) == 1.0


def _run(code, **env):
  e = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_FLAGS"))}
  e.update(env)
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e,
                     timeout=120)
  assert r.returncode == 0, r.stderr
  return r.stdout.strip().splitlines()[-1]


def test_environment_variables_are_read():
  code = ("import stagecraft as sc; c = sc.config; print(c.enable_x64, c.debug_nans, "
          "c.traceback_filtering, c.numpy_rank_promotion)")
  assert _run(code, JAX_ENABLE_X64="1", JAX_DEBUG_NANS="true", JAX_TRACEBACK_FILTERING="off",
              JAX_NUMPY_RANK_PROMOTION="raise") == "True True off raise"
  assert _run(code, STAGECRAFT_ENABLE_X64="1") == "True False auto allow"


def test_num_cpu_devices_before_and_after_start():
  code = ("import stagecraft as sc\nsc.config.update('jax_num_cpu_devices', 3)\n"
          "n = len(sc.devices())\n"
          "try:\n  sc.config.update('jax_num_cpu_devices', 2)\nexcept RuntimeError as e:\n"
          "  print(n, 'RuntimeError' , 'before backends are initialized' in str(e))")
  assert _run(code) == "3 RuntimeError True"
  assert _run("import stagecraft as sc; print(len(sc.devices()))",
              JAX_NUM_CPU_DEVICES="2") == "2"


def test_platforms_option():
  assert _run("import stagecraft as sc; sc.config.update('jax_platforms', 'cpu'); "
              "print(sc.devices()[0].platform)") == "cpu"


def test_rank_and_dtype_promotion_options_match_jax():
  import jax.numpy as jjnp
  import stagecraft.numpy as jnp
  for lib, np_ in ((sc, jnp), (jax, jjnp)):
    with lib.numpy_rank_promotion("raise"):
      with pytest.raises(ValueError) as e:
        np_.ones((2, 3)) + np_.ones(3)
      assert (np_.ones((2, 3)) + 1.0).shape == (2, 3)
      assert (np_.ones((2, 3)) * np_.ones((2, 3))).shape == (2, 3)
    msg = str(e.value)
    with lib.numpy_rank_promotion("warn"):
      with pytest.warns(UserWarning, match="Following NumPy automatic rank promotion for add"):
        np_.ones((2, 3)) + np_.ones(3)
    with lib.numpy_dtype_promotion("strict"):
      with pytest.raises(ValueError) as e2:
        np_.ones(3, np_.float32) + np_.ones(3, np_.int32)
      assert (np_.ones(3) + 1).dtype == np_.float32
    if lib is sc:
      ours = (msg, str(e2.value), type(e2.value).__name__)
    else:
      theirs = (msg, str(e2.value), type(e2.value).__name__)
  # NB: JAX lists the two dtypes in set order (varies by process): compare without it
  import re
  norm = lambda t: (t[0], re.sub(r"\('\w+', '\w+'\)", "(...)", t[1]), t[2])
  assert norm(ours) == norm(theirs)
