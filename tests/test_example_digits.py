"""The main example `python -m stagecraft.examples.digits` runs end to end: it learns, prints the
quantized evaluations, writes the AOT files, reuses its compilation cache on a second run,
and rejects bad arguments with exit status 2."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AOT_FILES = ("train_step.stablehlo.mlir", "train_step.optimized.hlo", "train_step.dot")


def _run(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
  env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
  env.pop("XLA_FLAGS", None)   # the example asks for its 4 CPU devices itself
  return subprocess.run([sys.executable, "-m", "stagecraft.examples.digits", *args],
                        capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """Two runs of the example into the same --out: (first, second, out_dir)."""
  out = str(tmp_path_factory.mktemp("digits") / "out")
  first = _run("--steps", "50", "--out", out)
  second = _run("--steps", "50", "--out", out)
  return first, second, out


def _accuracy(stdout: str, name: str = "test") -> float:
  m = re.search(rf"^{name} accuracy ([0-9.]+)$", stdout, re.M)
  assert m, stdout
  return float(m.group(1))


def test_trains_and_reports(runs):
  first, _, _ = runs
  assert first.returncode == 0, first.stderr
  out = first.stdout
  assert _accuracy(out) > 0.8, out
  assert "confusion matrix" in out
  assert "over 4 CPU devices" in out, out
  assert re.search(r"per-example gradient norms \(trained, vmap\(grad\)", out), out
  assert re.search(r"train step FLOPs \(cost_analysis, per device\): [0-9,]+", out), out
  for fmt in ("int8", "nf4"):
    m = re.search(rf"^  {fmt} +weights +([0-9,]+) B .* {fmt} test accuracy ([0-9.]+) "
                  rf"\(([+-][0-9.]+) points\)$", out, re.M)
    assert m, out
    assert float(m.group(2)) > 0.75, out
  f32 = int(re.search(r"^  float32 +weights +([0-9,]+) B", out, re.M).group(1).replace(",", ""))
  nf4 = int(re.search(r"^  nf4 +weights +([0-9,]+) B", out, re.M).group(1).replace(",", ""))
  assert nf4 < 0.2 * f32, out


def test_writes_aot_files_and_cache(runs):
  first, _, out = runs
  assert first.returncode == 0, first.stderr
  for name in AOT_FILES:
    path = os.path.join(out, name)
    assert os.path.getsize(path) > 0, path
  for name, marker in zip(AOT_FILES, ("stablehlo", "HloModule", "digraph")):
    with open(os.path.join(out, name)) as f:
      assert marker in f.read(), name
  assert os.listdir(os.path.join(out, "compilation_cache"))
  assert re.search(r"compile time \(first train-step call.*\): [0-9.]+ s", first.stdout)


def test_second_run_hits_the_cache(runs):
  _, second, _ = runs
  assert second.returncode == 0, second.stderr
  m = re.search(r"compile time .*: ([0-9.]+) s; previous run: ([0-9.]+) s .* (\d+) hit\(s\)",
                second.stdout)
  assert m, second.stdout
  assert int(m.group(3)) >= 1, second.stdout
  assert _accuracy(second.stdout) > 0.8


def test_dp_sgd(tmp_path):
  res = _run("--steps", "10", "--dp", "--clip", "1.0", "--noise", "0.5", "--out",
             str(tmp_path / "dp"))
  assert res.returncode == 0, res.stderr
  assert "DP-SGD (clip 1.0, noise multiplier 0.5)" in res.stdout
  assert 0.0 <= _accuracy(res.stdout) <= 1.0


def test_bad_arguments_exit_2_from_the_command_line():
  res = _run("--bogus", timeout=60)
  assert res.returncode == 2, (res.stdout, res.stderr)
  assert "unrecognized arguments: --bogus" in res.stderr, res.stderr
  assert "usage: python -m stagecraft.examples.digits" in res.stderr
  assert "test accuracy" not in res.stdout


@pytest.mark.parametrize("args,message", [
    (["--steps", "0"], "--steps must be a positive int"),
    (["--devices", "64"], "--devices 64 is more than the 4 available"),
    (["--batch", "30"], "--batch 30 is not a multiple of --devices 4"),
    (None, "is not a writable directory"),
])
def test_bad_arguments_exit_2(tmp_path, capsys, args, message):
  # NB: the argument checks in this process (the command line's exit path is tested above)
  from stagecraft.examples import digits
  if args is None:   # a regular file where a directory should be
    blocker = tmp_path / "file"
    blocker.write_text("x")
    args = ["--out", str(blocker / "sub")]
  with pytest.raises(SystemExit) as e:
    digits.parse_args(args)
  err = capsys.readouterr().err
  assert e.value.code == 2
  assert message in err, err
  assert "usage: python -m stagecraft.examples.digits" in err
