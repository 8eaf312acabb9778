import os
import sys

# Compiled bytecode is cached (`__pycache__`) even where PYTHONDONTWRITEBYTECODE is set: the
# suite starts ~200 Python subprocesses (examples, the runner, multi-process tests), and each
# compiled stagecraft's sources again without it (~0.8 s of ~1.6 s to import stagecraft).
sys.dont_write_bytecode = False

# Several CPU devices for the multi-device tests; must be set before the backend starts.
# The tests' programs are tiny, so XLA's compile time is most of the suite's time. Unless
# XLA_FLAGS is already set (then it is kept as given), they compile with LLVM at -O0 and
# XLA:CPU's older elemental emitters instead of its MLIR fusion emitters: a small jit compiles
# in ~15 ms instead of ~29 ms, and the whole suite takes about half the time (measured
# 2026-11-27). JAX (the oracle) and stagecraft share the runtime, so both compile under the
# same flags. XLA's defaults are still exercised: tests marked `xla_defaults` (last-bit
# agreement with recorded JAX runs, ops the older emitters lack) run in one subprocess with
# XLA's default flags (tests/test_xla_defaults.py), as do test_example_digits' and the
# ecosystem workloads' programs.
from _xla_flags import FAST_XLA_FLAGS, fast_compile  # noqa: E402

os.environ.setdefault("XLA_FLAGS", " ".join(("--xla_force_host_platform_device_count=4",)
                                            + FAST_XLA_FLAGS))
FAST_COMPILE = fast_compile()

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("ci", max_examples=15, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=15, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")

import gc  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _release_executables_after_each_module():
  """After each test module, JAX's and stagecraft's caches are cleared, so the compiled
  executables of finished modules are freed. A worker that keeps every executable of a long
  run alive approaches Linux's limit on memory mappings (vm.max_map_count, 65530; XLA:CPU
  maps ~3 per executable), and XLA's compiler crashes when a mapping then fails: twice, late
  in a full run, a worker died with a segfault inside compile_and_load."""
  yield
  for name in ("jax", "stagecraft"):
    mod = sys.modules.get(name)
    if mod is not None and hasattr(mod, "clear_caches"):
      mod.clear_caches()
  gc.collect()


def pytest_configure(config):
  config.addinivalue_line(
      "markers", "xla_defaults: needs XLA's default compile flags (see tests/_xla_flags.py"
      "); under the fast flags it runs in test_xla_defaults' subprocess")


def pytest_collection_modifyitems(config, items):
  if not FAST_COMPILE:
    return
  deselected = [it for it in items if it.get_closest_marker("xla_defaults")]
  if deselected:
    config.hook.pytest_deselected(items=deselected)
    items[:] = [it for it in items if not it.get_closest_marker("xla_defaults")]


@pytest.fixture
def installed():
  """`_util.served()` (`import jax` served by stagecraft) for one test."""
  from _util import served   # NB: imports stagecraft, which this module does not
  with served():
    yield
