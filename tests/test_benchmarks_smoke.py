"""The benchmarks run (`--quick`: a few repeats) and report one row per benchmark with
positive times; timings are not checked here."""
import importlib
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("name", ["foundation", "convnet", "indexing", "autodiff", "vmap",
                                  "control_flow", "staging", "pmap", "implicit", "transformer",
                                  "sharded"])
def test_benchmark_runs(name, tmp_path, capsys):
  mod = importlib.import_module(f"benchmarks.{name}")
  rows = mod.main(["--quick", "--json", str(tmp_path / "out.json")])
  assert rows and all(r[1] > 0 and r[2] > 0 for r in rows)
  assert "ratio" in capsys.readouterr().out
  assert (tmp_path / "out.json").exists()
