"""The benchmarks run (`--quick`: a few repeats) and report one row per benchmark with
positive times; timings are not checked here."""
import importlib
import os
import sys

import numpy as np
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


# ---------------------------------------------------------------------------
# benchmarks/memory.py (the `memory` section of benchmarks/run.py)


def _memory():
  from benchmarks import memory
  return memory


def test_memory_leak_check_counts_live_arrays():
  import stagecraft
  mem = _memory()
  res = mem.leak_check(stagecraft, calls=300, warmup=10)
  assert set(res) == set(mem.LEAK_CASES)
  for case, r in res.items():
    (l0, l1), (r0, r1) = r["live"], r["rss"]
    assert l0 >= 2 and l1 == l0, (case, r)   # the inputs x, y; the dropped results are freed
    assert r0 > 0 and r1 > 0


def test_memory_suite_child_measures_without_importing_jax():
  mem = _memory()
  [r] = mem.run_children([dict(kind="suite", lib="stagecraft", workloads=["per_example"],
                               steps=1, calls=200)], parallel=False)
  assert not r["jax_imported"], "stagecraft's jit/vmap/grad path imported jax"
  assert r["peak"] >= r["during"]["per_example"] >= r["rss_import"] > 50
  assert all(v["live"][0] == v["live"][1] for v in r["leak"].values()), r["leak"]


def test_memory_digits_twin_trains_like_the_example(tmp_path):
  mem = _memory()
  specs = [dict(kind="digits", lib=lib, train_only=True,
                argv=["--out", str(tmp_path / lib), "--steps", "4"]) for lib in mem.LIBS]
  s, j = mem.run_children(specs, parallel=True)
  assert j["jax_imported"] and s["peak"] > 0 and j["peak"] > 0
  # the same data, initialization, Adam and batches: the same trained model
  np.testing.assert_allclose(s["result"]["loss"], j["result"]["loss"], rtol=1e-4)


def _fake_measure(quick, leaky):
  mem = _memory()
  cfg = mem.config(quick)
  suite = {}
  for k, lib in enumerate(mem.LIBS):
    grow = 3.0 if (leaky and lib == "stagecraft") else 0.0
    suite[lib] = [dict(rss_import=150.0 + 30 * k, peak=300.0 + 10 * i + 50 * k,
                       during={w: 200.0 + 5 * i + 20 * k for w in cfg["workloads"]},
                       jax_imported=lib == "jax",
                       leak={c: {"live": (2, 2), "rss": (200.0, 200.0 + grow)}
                             for c in mem.LEAK_CASES})
                  for i in range(cfg["reps"])]
  digits = {lib: [dict(peak=400.0 + 100 * k, jax_imported=True,
                       result=dict(loss=0.5, test_acc=0.98))
                  for _ in range(cfg["digits_reps"])] for k, lib in enumerate(mem.LIBS)}
  return dict(config=cfg, suite=suite, digits=digits)


@pytest.mark.parametrize("quick", [True, False])
def test_memory_rows(quick, monkeypatch):
  import json
  import math
  mem = _memory()
  monkeypatch.setattr(mem, "measure", lambda q: _fake_measure(q, leaky=True))
  rows = mem.rows(quick)
  names = [r["name"] for r in rows]
  assert names[0].startswith("peak RSS: workloads")
  assert rows[0]["stagecraft"] == (310.0 if not quick else 300.0) and rows[0]["met"] is True
  assert sum("peak RSS during" in n for n in names) == (0 if quick else len(mem.WORKLOADS))
  assert any("README example" in n for n in names)
  growth = [r for r in rows if "RSS growth" in r["name"]]
  assert len(growth) == len(mem.LEAK_CASES)
  for r in growth:   # 3 MiB over the calls is a leak; JAX's 0 counts as one page
    assert r["stagecraft"] == 3 * 1024 and r["baseline"] == 4 and r["met"] is False
  for r in rows:
    assert r["stagecraft"] > 0 and r["baseline"] > 0, r
    assert math.isclose(r["ratio"], r["stagecraft"] / r["baseline"]), r
  assert json.loads(json.dumps(rows)) == rows
  monkeypatch.setattr(mem, "measure", lambda q: _fake_measure(q, leaky=False))
  assert all(r["met"] for r in mem.rows(quick) if "RSS growth" in r["name"])


_LEAK_SCRIPT = """
import sys, tracemalloc
import stagecraft, stagecraft.numpy as jnp
f = stagecraft.jit(lambda x, y: x * y + 1.0)
x, y = jnp.ones(8), jnp.ones(8)
for _ in range(100):
  f(x, y)
tracemalloc.start()
a = tracemalloc.get_traced_memory()[0]
for _ in range(20000):
  f(x, y)
  jnp.sin(x) + y
b = tracemalloc.get_traced_memory()[0]
from jaxlib import _jax
assert _jax.tracebacks_enabled()   # a global switch that JAX reads: left as it was
print("jax" in sys.modules, b - a)
"""


# jaxlib keeps a traceback per execution until its deletion queue is drained
# (runtime.client.count_execution drains it): ~72 B kept per call before.
def test_jit_dispatch_does_not_grow_python_memory():
  import subprocess
  env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
  out = subprocess.run([sys.executable, "-c", _LEAK_SCRIPT], env=env, capture_output=True,
                       text=True, timeout=300, check=True).stdout.split()
  assert out[0] == "False", "the script imported jax: the check would not see the leak"
  # bounded (the queue holds at most 1,024 launches' tracebacks), where 40,000 launches kept
  # ~7 MB before
  assert float(out[1]) < 256 * 1024, f"{out[1]} B of Python memory kept by 40,000 launches"
