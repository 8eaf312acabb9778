"""The tests marked `xla_defaults`, run in one subprocess with XLA's default compile flags.

The suite compiles with fast flags (tests/_xla_flags.py); the marked tests need
XLA's defaults: they check last-bit agreement with JAX runs recorded under the defaults, or use
ops that XLA:CPU's older emitters lack. conftest deselects them from the main run; this test
runs them all in a fresh interpreter whose XLA_FLAGS lacks the fast flags.
"""
import os
import pathlib
import re
import subprocess
import sys

import pytest
from _xla_flags import fast_compile, without_fast_flags

HERE = pathlib.Path(__file__).resolve().parent


def _files_with_marked_tests() -> list[str]:
  return sorted(str(p) for p in HERE.rglob("test_*.py")
                if p.name != pathlib.Path(__file__).name
                and "pytest.mark.xla_defaults" in p.read_text())


@pytest.mark.skipif(not fast_compile(), reason="the suite runs with XLA's default flags: the "
                    "marked tests ran in this run itself")
def test_marked_tests_pass_with_xla_default_flags():
  files = _files_with_marked_tests()
  assert len(files) >= 3, files   # the marker is found where it is used
  env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
  env["XLA_FLAGS"] = without_fast_flags(env.get("XLA_FLAGS", ""))
  proc = subprocess.run(
      [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:randomly",
       "-m", "xla_defaults and not fuzz_long and not ecosystem_long", *files],
      cwd=HERE.parent, env=env, capture_output=True, text=True, timeout=500)
  tail = proc.stdout[-6000:] + proc.stderr[-2000:]
  assert proc.returncode == 0, tail
  passed = re.search(r"(\d+) passed", proc.stdout)
  assert passed and int(passed.group(1)) >= 10, tail
  assert "deselected" in proc.stdout, tail   # the unmarked tests did not run again
