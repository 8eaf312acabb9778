"""API coverage against JAX's public names, counted by smoke calls that run on stagecraft
(a regression floor; `python -m tools.api_coverage --missing` reports the numbers and the
exception each missing name raised)."""
import os
import sys
import types

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tools import api_coverage, api_smoke  # noqa: E402

# Raise these floors as the API grows; never lower them. The targets: 100% of
# jax.numpy, jax.random, jax.image and jax.ops, >= 95% of every jax.scipy namespace.
FLOORS = {"jax.numpy": 1.0, "jax.lax": 1.0, "jax.nn": 1.0, "jax.random": 1.0,
          "jax.image": 1.0, "jax.ops": 1.0}
SCIPY_FLOOR = 0.95


def _floors():
  floors = dict(FLOORS)
  for ns in api_coverage.namespaces():
    if ns.startswith("jax.scipy."):
      floors[ns] = SCIPY_FLOOR
  return floors


# One test per namespace, so that pytest-xdist's workers share the smoke calls.
@pytest.mark.parametrize("ns", sorted(_floors()))
def test_api_coverage_floors(ns):
  floor = _floors()[ns]
  cov = api_coverage.coverage(only={ns})
  assert set(cov) == {ns}
  have, total, missing = cov[ns]
  assert total > 0, f"{ns}: JAX has no public callables here; is the namespace right?"
  assert have == total - len(missing)
  assert have / total >= floor, (
      f"{ns}: {have}/{total} below the floor {floor:.1%}; missing: "
      + ", ".join(f"{n} ({why})" for n, why in sorted(missing.items())))


def test_smoke_table_names_are_jax_public_callables():
  # A misspelt key would never be used: its name would silently get the generic call.
  known = {f"{ns}.{n}" for ns in api_coverage.namespaces()
           for n in api_coverage.public_callables(ns)}
  assert sorted(set(api_smoke.SMOKE) - known) == []


def test_public_callables_leave_out_classes_and_type_aliases():
  lax = api_coverage.public_callables("jax.lax")
  assert "add" in lax and "Precision" not in lax and "PrecisionLike" not in lax
  assert "gaussian_kde" in api_coverage.public_callables("jax.scipy.stats")
  assert "norm" not in api_coverage.public_callables("jax.scipy.stats")   # a submodule
  assert "jax.scipy.stats.norm" in api_coverage.namespaces()


def test_a_missing_or_failing_name_counts_as_missing():
  fake = types.ModuleType("stagecraft.fake")
  fake.sin = np.sin
  fake.broken = lambda x: 1 / 0
  fake.factory = lambda x: (lambda y: y)
  api_coverage.smoke("jax.fake.sin", fake)
  with pytest.raises(AttributeError):
    api_coverage.smoke("jax.fake.cos", fake)
  with pytest.raises(ZeroDivisionError):
    api_coverage.smoke("jax.fake.broken", fake)
  with pytest.raises(TypeError, match="returned a callable"):
    api_coverage.smoke("jax.fake.factory", fake)
