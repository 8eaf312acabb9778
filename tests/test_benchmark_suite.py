"""The benchmark suite runs end to end in --quick mode: every row is measured (none skipped
or failed), the printed table and the JSON file carry the same rows. No timing assertions:
the numbers depend on the machine and its load."""
from __future__ import annotations

import json
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import run  # noqa: E402

EXPECTED = [
    "jit dispatch", "eager op", "make_jaxpr(grad) 100-layer MLP", "equations in that jaxpr",
    "trace+lower 2000-op chain", "compile 2000-op chain", "MLP SGD step",
    "transformer block fwd+bwd", "per-example grads", "scan RNN grad", "pmap DP-SGD step",
    "pmap dispatch", "sharded MLP step (2x2 mesh)", "sharded trace+lower",
    "NF4 matmul vs f32", "cold start"]


def test_quick_suite_table_and_json(tmp_path, capsys, monkeypatch):
  # NB: the memory section's measurements (fresh processes, ~18 s) are test_benchmarks_smoke's;
  # here they are faked, and its rows go through the table and the JSON as the others do
  from benchmarks import memory
  from test_benchmarks_smoke import _fake_measure
  monkeypatch.setattr(memory, "measure", lambda quick: _fake_measure(quick, leaky=False))
  path = tmp_path / "bench.json"
  result = run.main(["--quick", "--json", str(path)])
  out = capsys.readouterr().out
  rows = result["rows"]
  names = [r["name"] for r in rows]
  for want in EXPECTED:
    assert any(want in n for n in names), f"no row named like {want!r} in {names}"
  for r in rows:
    assert r["ratio"] is not None, f"row {r['name']!r} was skipped: {r['note']}"
    assert r["stagecraft"] > 0 and r["baseline"] > 0, r
    assert math.isclose(r["ratio"], r["stagecraft"] / r["baseline"], rel_tol=1e-9), r
    assert r["met"] in (True, False, None)
    assert r["name"] in out
  assert out.index("date:") < out.index("machine:") < out.index("| benchmark")
  assert "peak RSS:" in out and "GFLOP/s" in out
  assert result["roofline_gflops"] > 0 and result["peak_rss_mib"] > 0

  data = json.loads(path.read_text())
  assert data["rows"] == rows
  assert {"date", "cpu", "cores", "python"} <= set(data["info"])
  assert set(data["section_s"]) == set(run.SECTIONS)


def test_only_selects_sections(capsys):
  result = run.main(["--quick", "--only", "eager_op"])
  assert [r["name"] for r in result["rows"]] == ["eager op x + y, f32[8]"]
  assert list(result["section_s"]) == ["eager_op"]
  with pytest.raises(SystemExit):
    run.main(["--only", "no_such_section"])
  assert "invalid choice" in capsys.readouterr().err
