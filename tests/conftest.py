import os

# Several CPU devices for the multi-device tests; must be set before the backend starts.
# LLVM's optimizations are off for the suite's (small, run-once) programs: compiling is most
# of their cost, and both stagecraft and the JAX oracles run under the same flags (XLA
# keeps IEEE semantics at every level: no fast math).
_FLAGS = {"--xla_force_host_platform_device_count": "4", "--xla_backend_optimization_level": "0"}
os.environ["XLA_FLAGS"] = " ".join(
    [os.environ.get("XLA_FLAGS", "")]
    + [f"{k}={v}" for k, v in _FLAGS.items() if k not in os.environ.get("XLA_FLAGS", "")]).strip()

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=15, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")

import gc  # noqa: E402
import sys  # noqa: E402

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
