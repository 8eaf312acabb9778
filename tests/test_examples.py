"""The README's main example runs on real data and learns."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_digits_example_trains():
  env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
  out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "digits_jit.py"),
                        "--steps", "100"], capture_output=True, text=True, env=env,
                       timeout=300)
  assert out.returncode == 0, out.stderr
  acc = float(re.search(r"test accuracy\s+([0-9.]+)", out.stdout).group(1))
  assert acc > 0.9, out.stdout


def test_digits_example_rejects_bad_arguments():
  env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
  out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "digits_jit.py"),
                        "--steps", "0"], capture_output=True, text=True, env=env, timeout=120)
  assert out.returncode == 2 and "--steps must be positive" in out.stderr
