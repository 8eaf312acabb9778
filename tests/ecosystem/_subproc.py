"""Running a script once under real JAX and once under `python -m stagecraft run`."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np

import stagecraft
from _xla_flags import without_fast_flags

HERE = pathlib.Path(__file__).resolve().parent
# NB: the stagecraft that runs the tests (its source tree may be a checkout other than HERE's).
SRC = pathlib.Path(stagecraft.__file__).resolve().parent.parent


def env() -> dict:
  e = dict(os.environ)
  e["JAX_PLATFORMS"] = "cpu"
  # The programs compile with XLA's defaults, not the suite's fast flags (tests/conftest.py):
  # their training loops amplify last-bit differences, and they were checked under the defaults.
  e["XLA_FLAGS"] = without_fast_flags(e.get("XLA_FLAGS", ""))
  e["PYTHONPATH"] = os.pathsep.join([str(SRC)] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH")
                                                  else []))
  return e


def start(argv, cwd=HERE) -> subprocess.Popen:
  return subprocess.Popen([sys.executable, *argv], cwd=cwd, env=env(), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen, what: str, timeout: float = 300) -> str:
  out, err = proc.communicate(timeout=timeout)
  assert proc.returncode == 0, f"{what} failed (status {proc.returncode}):\n{err[-4000:]}"
  return out


def run_both(script: str) -> tuple:
  """(JAX's JSON result, stagecraft's JSON result) of `script` in this directory, the two
  processes run side by side."""
  jax_p = start([script])
  sc_p = start(["-m", "stagecraft", "run", script])
  jax_out = finish(jax_p, f"python {script}")
  sc_out = finish(sc_p, f"python -m stagecraft run {script}")
  return json.loads(jax_out.strip().splitlines()[-1]), json.loads(sc_out.strip().splitlines()[-1])


def assert_close(expected, actual, rtol=2e-5, atol=1e-6, path="result"):
  """Nested JSON values equal, floats to `rtol`/`atol` (dict key order ignored)."""
  if isinstance(expected, dict):
    assert isinstance(actual, dict) and sorted(actual) == sorted(expected), (
        f"{path}: keys {sorted(actual) if isinstance(actual, dict) else actual} != "
        f"{sorted(expected)}")
    for k in expected:
      assert_close(expected[k], actual[k], rtol, atol, f"{path}[{k!r}]")
  elif isinstance(expected, list):
    assert isinstance(actual, list) and len(actual) == len(expected), (
        f"{path}: {actual} != {expected}")
    for i, (e, a) in enumerate(zip(expected, actual)):
      assert_close(e, a, rtol, atol, f"{path}[{i}]")
  elif isinstance(expected, float) or isinstance(actual, float):
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=path)
  else:
    assert actual == expected, f"{path}: {actual!r} != {expected!r}"
