"""Slices of optax's and chex's own test suites (shipped in their wheels), run by pytest
under real JAX and under stagecraft (`-p stagecraft_plugin`: `compat.install()` before
collection); stagecraft must pass within 5% as many tests as JAX on each slice.

Long (minutes each): marked `ecosystem_long`, out of the default run; run with
`pytest -m ecosystem_long tests/ecosystem`. Each test prints both pass counts.
"""
from __future__ import annotations

import pathlib
import re

import pytest

from _subproc import HERE, start

SLICES = {
    "optax": ("optax._src", ["transform_test.py", "update_test.py", "combine_test.py",
                             "numerics_test.py"]),
    "optax_losses": ("optax.losses", ["_regression_test.py", "_classification_test.py"]),
    "chex": ("chex._src", ["dataclass_test.py", "asserts_test.py"]),
}

_COUNT = re.compile(r"(\d+) (passed|failed|error|errors|skipped)")


def _counts(text: str) -> dict:
  last = [ln for ln in text.strip().splitlines() if _COUNT.search(ln)]
  out = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
  for n, what in _COUNT.findall(last[-1] if last else ""):
    out["error" if what.startswith("error") else what] = int(n)
  return out


def slice_files(package: str, files) -> list[str]:
  mod = pytest.importorskip(package)
  base = pathlib.Path(list(mod.__path__)[0])
  return [str(base / f) for f in files if (base / f).exists()]


def run_slice(files, tmp_path, stagecraft: bool) -> dict:
  ini = tmp_path / "pytest.ini"
  ini.write_text("[pytest]\n")
  argv = ["-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", "-c", str(ini),
          "--rootdir", str(tmp_path), "-W", "ignore", *files]
  if stagecraft:
    argv[2:2] = ["-p", "stagecraft_plugin"]
  proc = start(argv, cwd=HERE)
  out, err = proc.communicate(timeout=1800)
  return {**_counts(out), "tail": out[-3000:] + err[-2000:]}


@pytest.mark.ecosystem_long
@pytest.mark.parametrize("name", sorted(SLICES))
def test_slice_passes_as_many_as_jax(name, tmp_path):
  files = slice_files(*SLICES[name])
  assert files, f"no test files of {name} found"
  jax_res = run_slice(files, tmp_path, stagecraft=False)
  sc_res = run_slice(files, tmp_path, stagecraft=True)
  print(f"\n{name}: JAX {jax_res['passed']} passed / {jax_res['failed']} failed / "
        f"{jax_res['error']} errors; stagecraft {sc_res['passed']} passed / "
        f"{sc_res['failed']} failed / {sc_res['error']} errors")
  assert jax_res["passed"] > 0, jax_res["tail"]
  assert sc_res["passed"] >= 0.95 * jax_res["passed"], sc_res["tail"]
