import os

# Several CPU devices for the multi-device tests; must be set before the backend starts.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=15, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")
