import os

# Several CPU devices for the multi-device tests; must be set before the backend starts.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("ci", max_examples=15, deadline=None, derandomize=True,
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
