"""`jax_log_compiles`: the lines logged for each trace, lowering and compilation, in JAX
0.10.2's words ("Finished tracing f for jit in ... sec", "Compiling jit(f) with global shapes
and types (...). Argument mapping: (...).", "Finished jaxpr to MLIR module conversion ...",
"Finished XLA compilation of ..."), compared with JAX's log of the same program; the
persistent cache's hit/miss lines; JAX's logger names under the runner."""
from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import textwrap
import types

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp

JAX = types.SimpleNamespace(lib=jax, np=jjnp, lax=jax.lax, logger="jax")
SC = types.SimpleNamespace(lib=sc, np=snp, lax=sc.lax, logger="stagecraft")


def _unused_argument(m, n):
  f = m.lib.jit(lambda x, y: x * 2)
  f(1.0, np.ones(n, np.int32))
  f(1.0, np.ones(n, np.int32))      # cached: nothing logged


def _committed_argument(m, n):
  x = m.lib.device_put(np.ones(n, np.float32), m.lib.devices()[0])
  m.lib.jit(lambda x, y: x + y)(x, np.ones(n, np.float32))


def _nested_and_static(m, n):
  g = m.lib.jit(lambda x: m.lib.jit(m.lax.cos)(x) + 1)
  g(np.ones(n, np.float32))

  def power(a, *, k):
    return a ** k
  m.lib.jit(power, static_argnames="k")(np.ones((n, 2), np.float32), k=3)


def _eager_primitives(m, n):
  m.lax.sin(np.ones((n, 3), np.float32))
  m.lax.add(np.ones((n, 3), np.int32), np.int32(1))


def _aot(m, n):
  lowered = m.lib.jit(lambda x: x - 1).lower(np.ones((n, 5), np.float32))
  lowered.compile()


PROGRAMS = [_unused_argument, _committed_argument, _nested_and_static, _eager_primitives, _aot]


def _log(m, program, n, caplog) -> list[str]:
  caplog.clear()
  with caplog.at_level(logging.WARNING, logger=m.logger):
    with m.lib.log_compiles(True):
      program(m, n)
  return [re.sub(r"in \d+\.\d{9} sec$", "in T sec", r.getMessage())
          for r in caplog.records if r.name.startswith(m.logger)]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__.strip("_"))
def test_log_compiles_lines_are_jaxs(program, caplog):
  # NB: a shape no other test compiles, so that both libraries compile afresh here
  n = 11 + PROGRAMS.index(program)
  want = _log(JAX, program, n, caplog)
  got = _log(SC, program, n, caplog)
  assert want and got == want


def test_log_compiles_times_have_nine_decimals_and_loggers_are_per_stage(caplog):
  with caplog.at_level(logging.WARNING, logger="stagecraft"):
    with sc.log_compiles(True):
      sc.jit(lambda x: x * 3)(np.ones(17, np.float32))
  names = [r.name for r in caplog.records]
  assert names == ["stagecraft.dispatch", "stagecraft.interpreters.pxla",
                   "stagecraft.dispatch", "stagecraft.dispatch"]
  assert all(r.levelno == logging.WARNING for r in caplog.records)
  assert re.fullmatch(r"Finished tracing <lambda> for jit in \d+\.\d{9} sec",
                      caplog.records[0].getMessage())


def test_without_log_compiles_the_lines_are_debug_records(caplog):
  with caplog.at_level(logging.DEBUG, logger="stagecraft"):
    sc.jit(lambda x: x * 5)(np.ones(19, np.float32))
  lines = [(r.levelno, r.getMessage()) for r in caplog.records]
  assert (logging.DEBUG, "Compiling jit(<lambda>) with global shapes and types "
          "(ShapedArray(float32[19]),). Argument mapping: (UnspecifiedValue,).") in lines
  with caplog.at_level(logging.WARNING, logger="stagecraft"):
    caplog.clear()
    sc.jit(lambda x: x * 7)(np.ones(19, np.float32))
  assert not caplog.records


@pytest.fixture
def cache_config(tmp_path):
  """Sets the persistent cache's options for one test; puts the old values back."""
  names = ("compilation_cache_dir", "persistent_cache_min_compile_time_secs",
           "explain_cache_misses")
  old = {n: getattr(sc.config, n) for n in names}
  sc.config.update("compilation_cache_dir", str(tmp_path / "cache"))
  sc.config.update("explain_cache_misses", True)
  yield
  for n, v in old.items():
    sc.config.update(n, v)


def _messages(caplog, start):
  return [r for r in caplog.records if r.getMessage().startswith(start)]


def test_persistent_cache_lines(cache_config, caplog):
  f = lambda x: snp.tanh(x) * 9   # noqa: E731
  sc.config.update("persistent_cache_min_compile_time_secs", 0)
  with caplog.at_level(logging.WARNING, logger="stagecraft"):
    sc.jit(f)(np.ones(23, np.float32))
    assert len(_messages(caplog, "PERSISTENT COMPILATION CACHE MISS for 'jit__lambda' "
                                 "with key ")) == 1
    sc.clear_caches()
    caplog.clear()
    sc.jit(f)(np.ones(23, np.float32))
    assert not _messages(caplog, "Persistent compilation cache hit")   # log_compiles off
    sc.clear_caches()
    with sc.log_compiles(True):
      sc.jit(f)(np.ones(23, np.float32))
  hits = _messages(caplog, "Persistent compilation cache hit for 'jit__lambda' with key ")
  assert len(hits) == 1 and hits[0].name == "stagecraft.compiler"
  # a program faster to compile than the threshold is not written, and says so
  sc.config.update("persistent_cache_min_compile_time_secs", 100)
  caplog.clear()
  with caplog.at_level(logging.WARNING, logger="stagecraft"):
    sc.jit(lambda x: x + 29)(np.ones(23, np.float32))
  assert any(re.fullmatch(r"Not writing persistent cache entry for 'jit__lambda' because "
                          r"it took < 100\.00 seconds to compile \(\d+\.\d\ds\)",
                          r.getMessage()) for r in caplog.records)


SCRIPT = textwrap.dedent("""
    import logging, re, sys
    logging.basicConfig(stream=sys.stdout, format="%(levelname)s:%(name)s:%(message)s")
    import jax, jax.numpy as jnp
    jax.config.update("jax_log_compiles", True)
    jax.config.update("jax_explain_cache_misses", True)

    @jax.jit
    def step(x):
      return x * 2 + 1

    print(step(jnp.arange(3.0, dtype=jnp.float32)))
    """)


def _run(args, tmp_path):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  out = subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)
  assert out.returncode == 0, out.stderr
  return [re.sub(r"\d+\.\d{9} sec", "T sec", re.sub(r"id=\d+", "id=N", line))
          for line in out.stdout.splitlines()]


def test_runner_logs_on_jaxs_loggers(tmp_path):
  (tmp_path / "prog.py").write_text(SCRIPT)
  want = _run(["prog.py"], tmp_path)
  got = _run(["-m", "stagecraft", "run", "prog.py"], tmp_path)
  assert any(line.startswith("WARNING:jax._src.interpreters.pxla:Compiling jit(step)")
             for line in want)
  assert got == want


def test_logging_level_option_logs_debug_lines_in_jaxs_format(capfd):
  old = sc.config.logging_level
  try:
    sc.config.update("jax_logging_level", "DEBUG")
    assert jax.config.jax_logging_level != "DEBUG"   # (JAX's own option is untouched)
    sc.jit(lambda x: x * 31)(np.ones(27, np.float32))
  finally:
    sc.config.update("jax_logging_level", old)
  err = capfd.readouterr().err
  assert re.search(r"^DEBUG:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}:stagecraft\.interpreters\.pxla:"
                   r"\d+: Compiling jit\(<lambda>\) with global shapes and types "
                   r"\(ShapedArray\(float32\[27\]\),\)\.", err, re.M), err
  sc.jit(lambda x: x * 37)(np.ones(27, np.float32))   # back to NOTSET: nothing printed
  assert "Compiling" not in capfd.readouterr().err
  with pytest.raises(ValueError, match=re.escape(
      "new enum value must be None or in ['NOTSET', 'DEBUG', 'INFO', 'WARNING', 'ERROR', "
      "'CRITICAL'], got LOUD of type <class 'str'>.")):
    sc.config.update("jax_logging_level", "LOUD")


def test_debug_log_modules_option(capfd):
  try:
    sc.config.update("jax_debug_log_modules", "stagecraft.dispatch")
    sc.jit(lambda x: x * 43)(np.ones(29, np.float32))
  finally:
    sc.config.update("jax_debug_log_modules", "")
  err = capfd.readouterr().err
  assert re.search(r"^DEBUG:.*:stagecraft\.dispatch:\d+: Finished XLA compilation of "
                   r"jit\(<lambda>\) in \d+\.\d{9} sec$", err, re.M), err
  assert "stagecraft.interpreters.pxla" not in err   # only the module named
  sc.jit(lambda x: x * 47)(np.ones(29, np.float32))
  assert "Finished" not in capfd.readouterr().err


def _debug_log_program(lib, np_):
  def f(x):
    lib.debug.log("x is {x} and {}", x * 2, x=x)
    lib.debug.log(ordered=True)("two-call {}", x[0])
    return x + 1
  lib.jit(f)(np_.arange(3.0))
  f(np_.arange(2.0))   # eagerly too


@pytest.mark.parametrize("lib", [JAX, SC], ids=["jax", "sc"])
def test_debug_log_records(lib, caplog):
  caplog.clear()
  with caplog.at_level(logging.INFO, logger=lib.logger):
    _debug_log_program(lib.lib, lib.np)
  got = [(r.name.split(".")[-1], r.levelno, r.filename, r.lineno, r.getMessage())
         for r in caplog.records if r.name.endswith("debugging")]
  here = os.path.basename(__file__)
  line = _debug_log_program.__code__.co_firstlineno + 2
  assert got == [("debugging", logging.INFO, here, line, "x is [0. 1. 2.] and [0. 2. 4.]"),
                 ("debugging", logging.INFO, here, line + 1, "two-call 0.0"),
                 ("debugging", logging.INFO, here, line, "x is [0. 1.] and [0. 2.]"),
                 ("debugging", logging.INFO, here, line + 1, "two-call 0.0")]


def test_debug_print_and_log_jaxprs_are_jaxs():
  def prog(lib):
    def f(x):
      lib.debug.print("{} {} {y}", None, x, y="s")
      return x + 1
    return str(lib.make_jaxpr(f)(1.0))
  assert prog(sc) == prog(jax)
