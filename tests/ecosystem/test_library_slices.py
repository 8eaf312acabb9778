"""Slices of optax's, chex's, equinox's and flax's own test suites, run by pytest under real
JAX and under stagecraft (`-p stagecraft_plugin`: `compat.install()` before the tests'
conftest.py files are imported); stagecraft must pass within 5% as many tests as JAX on each
slice.

Where the tests come from:

- optax and chex ship their tests inside their wheels (`optax/_src/*_test.py`,
  `chex/_src/*_test.py`): found next to the installed package.
- equinox and flax do not. Their tests are read from a sources directory,
  `$STAGECRAFT_ECOSYSTEM_SOURCES` (default `/tmp/stagecraft_ecosystem`), holding
  `equinox-<version>/tests/` and `flax-<version>/tests/` for the installed versions; a slice
  whose tests are absent (or whose version is not the installed one) is skipped, saying so.
  To get them (equinox's sdist has no tests; flax's has)::

    D=${STAGECRAFT_ECOSYSTEM_SOURCES:-/tmp/stagecraft_ecosystem}; mkdir -p $D && cd $D
    git clone -q https://github.com/patrick-kidger/equinox eqx-git
    git -C eqx-git archive --prefix=equinox-0.13.8/ dfadb04884a0fc067fb85282c994f8e5c106941f \
        tests | tar x                      # the "0.13.8 release" commit
    pip download --no-binary :all: --no-deps flax==0.12.8 && tar xzf flax-0.12.8.tar.gz \
        flax-0.12.8/tests

  Only the `tests/` directories are wanted: a library's source package next to them would
  shadow the installed one (pytest puts the tests' root directory on `sys.path`).

Long (minutes each): marked `ecosystem_long`, out of the default run; run with
`pytest -m ecosystem_long tests/ecosystem`. Each test prints both pass counts.
"""
from __future__ import annotations

import importlib.metadata
import os
import pathlib
import re

import pytest

from _subproc import HERE, start

#: Where the equinox and flax test sources are looked for.
SOURCES = pathlib.Path(os.environ.get("STAGECRAFT_ECOSYSTEM_SOURCES",
                                      "/tmp/stagecraft_ecosystem"))

# name -> ("package", the package whose directory holds the test files, files) or
#         ("sources", the distribution whose tests are under SOURCES, files under its root).
SLICES = {
    "optax": ("package", "optax._src", ["transform_test.py", "update_test.py",
                                        "combine_test.py", "numerics_test.py"]),
    "optax_losses": ("package", "optax.losses", ["_regression_test.py",
                                                 "_classification_test.py"]),
    "chex": ("package", "chex._src", ["dataclass_test.py", "asserts_test.py"]),
    "equinox": ("sources", "equinox", [
        "tests/test_filters.py", "tests/test_module.py", "tests/test_tree.py",
        "tests/test_jit.py", "tests/test_ad.py", "tests/test_vmap.py",
        "tests/test_eval_shape.py", "tests/test_update.py", "tests/test_enum.py",
        "tests/test_pformat.py", "tests/test_abstract.py"]),
    "equinox_nn": ("sources", "equinox", ["tests/test_nn.py"]),
    "flax_linen": ("sources", "flax", [
        "tests/linen/linen_test.py", "tests/linen/linen_linear_test.py",
        "tests/linen/linen_module_test.py"]),
    "flax_nnx": ("sources", "flax", [
        "tests/nnx/module_test.py", "tests/nnx/rngs_test.py", "tests/nnx/optimizer_test.py",
        "tests/nnx/variable_test.py", "tests/nnx/state_test.py", "tests/nnx/containers_test.py",
        "tests/nnx/graph_utils_test.py", "tests/nnx/nn/linear_test.py"]),
}

_COUNT = re.compile(r"(\d+) (passed|failed|error|errors|skipped)")


def _counts(text: str) -> dict:
  last = [ln for ln in text.strip().splitlines() if _COUNT.search(ln)]
  out = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
  for n, what in _COUNT.findall(last[-1] if last else ""):
    out["error" if what.startswith("error") else what] = int(n)
  return out


def slice_files(kind: str, where: str, files) -> list[str]:
  """The slice's test files; skips the test when they are not there."""
  if kind == "package":
    mod = pytest.importorskip(where)
    base = pathlib.Path(list(mod.__path__)[0])
    return [str(base / f) for f in files if (base / f).exists()]
  pytest.importorskip(where)
  version = importlib.metadata.version(where)
  root = SOURCES / f"{where}-{version}"
  found = [str(root / f) for f in files if (root / f).exists()]
  if not found:
    pytest.skip(f"the tests of {where} {version} are not under {root} (see this file's "
                f"docstring for how to get them; $STAGECRAFT_ECOSYSTEM_SOURCES moves the "
                f"directory)")
  return found


def run_slice(files, tmp_path, stagecraft: bool) -> dict:
  ini = tmp_path / "pytest.ini"
  ini.write_text("[pytest]\n")
  argv = ["-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", "-c", str(ini),
          "--rootdir", str(tmp_path), "-W", "ignore", *files]
  if stagecraft:
    argv[2:2] = ["-p", "stagecraft_plugin"]
  proc = start(argv, cwd=HERE)   # NB: HERE on sys.path: `-p stagecraft_plugin` imports
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
