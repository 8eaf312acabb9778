"""`stagecraft inspect` (stagecraft.cli): every stage, static folding, and each usage error."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from stagecraft import cli

MOD = "sc_cli_testmod"

SOURCE = textwrap.dedent("""
    import stagecraft.numpy as jnp

    def predict(w, x):
      return jnp.tanh(jnp.dot(x, w))

    def scale(x, n):
      return x * (2 * n)

    def count(x, mode):
      return x + 1 if mode == "inc" else x - 1

    class Model:
      class Layer:
        @staticmethod
        def apply(x):
          return jnp.sin(x)

    NOT_CALLABLE = 3
""")


@pytest.fixture(scope="module", autouse=True)
def testmod(tmp_path_factory):
  d = tmp_path_factory.mktemp("climod")
  (d / f"{MOD}.py").write_text(SOURCE)
  sys.path.insert(0, str(d))
  yield d
  sys.path.remove(str(d))
  sys.modules.pop(MOD, None)


def run(capsys, *argv):
  """Runs `stagecraft ARGV...` in process; returns (status, stdout, stderr)."""
  try:
    status = cli.main(list(argv))
  except SystemExit as e:
    status = e.code
  out, err = capsys.readouterr()
  return status, out, err


PREDICT = (f"{MOD}:predict", "--args", "f32[784,10]", "f32[8,784]")


# ---------------------------------------------------------------------------
# Stages


def test_jaxpr(capsys):
  status, out, err = run(capsys, "inspect", *PREDICT, "--stage", "jaxpr")
  assert status == 0, err
  assert "dot_general" in out and "tanh" in out
  assert "a:f32[784,10] b:f32[8,784]" in out
  assert "f32[8,10]" in out


def test_jaxpr_is_default_stage(capsys):
  assert run(capsys, "inspect", *PREDICT)[1] == run(capsys, "inspect", *PREDICT, "--stage",
                                                    "jaxpr")[1]


def test_stablehlo(capsys):
  status, out, err = run(capsys, "inspect", *PREDICT, "--stage", "stablehlo")
  assert status == 0, err
  assert "stablehlo.dot_general" in out and "stablehlo.tanh" in out
  assert "tensor<784x10xf32>" in out and "tensor<8x10xf32>" in out


def test_hlo(capsys):
  status, out, err = run(capsys, "inspect", *PREDICT, "--stage", "hlo")
  assert status == 0, err
  assert out.startswith("HloModule")
  assert " dot(" in out and "tanh(" in out


def test_optimized_hlo(capsys):
  status, out, err = run(capsys, "inspect", *PREDICT, "--stage", "optimized-hlo")
  assert status == 0, err
  assert out.startswith("HloModule") and "is_scheduled=true" in out
  assert "f32[8,10]" in out


def test_dot(capsys):
  status, out, err = run(capsys, "inspect", *PREDICT, "--stage", "dot")
  assert status == 0, err
  assert out.lstrip().startswith("digraph")
  assert "dot" in out and "tanh" in out


def test_cost(capsys):
  status, out, err = run(capsys, "inspect", *PREDICT, "--stage", "cost")
  assert status == 0, err
  lines = out.strip().splitlines()
  keys = [ln.split(": ", 1)[0] for ln in lines]
  assert keys == sorted(keys) and "flops" in keys
  flops = float(dict(ln.split(": ", 1) for ln in lines)["flops"])
  assert flops >= 2 * 8 * 784 * 10  # the matmul alone


def test_dotted_path_and_long_dtype_name(capsys):
  status, out, err = run(capsys, "inspect", f"{MOD}:Model.Layer.apply", "--args",
                         "float32[3]", "--stage", "stablehlo")
  assert status == 0, err
  assert "stablehlo.sine" in out and "tensor<3xf32>" in out


def test_scalar_and_int_specs(capsys):
  status, out, err = run(capsys, "inspect", f"{MOD}:predict", "--args", "i32[]", "i32[]")
  assert status == 0, err
  assert "a:i32[] b:i32[]" in out


def test_x64(capsys):
  status, out, _ = run(capsys, "inspect", f"{MOD}:Model.Layer.apply", "--args", "f64[2]")
  assert status == 0 and "f32[2]" in out  # narrowed without --x64
  status, out, _ = run(capsys, "inspect", f"{MOD}:Model.Layer.apply", "--args", "f64[2]",
                       "--x64")
  assert status == 0 and "f64[2]" in out


# ---------------------------------------------------------------------------
# Static arguments are folded in


def test_static_folded_jaxpr(capsys):
  status, out, err = run(capsys, "inspect", f"{MOD}:scale", "--args", "f32[4]", "--static",
                         "1=7")
  assert status == 0, err
  assert "14.0" in out  # 2 * 7 folded into one constant
  assert "lambda ; a:f32[4]. let" in out  # one dynamic argument


def test_static_folded_stablehlo(capsys):
  status, out, err = run(capsys, "inspect", f"{MOD}:scale", "--args", "f32[4]", "--static",
                         "1=7", "--stage", "hlo")
  assert status == 0, err
  assert "constant(14)" in out
  assert "parameter(1)" not in out


def test_static_first_position_and_string_value(capsys):
  # The dynamic specs fill the non-static positions in order.
  status, out, err = run(capsys, "inspect", f"{MOD}:count", "--static", "1='inc'", "--args",
                         "i32[5]")
  assert status == 0, err
  assert "add" in out and "sub" not in out
  status, out, err = run(capsys, "inspect", f"{MOD}:count", "--static", "1='dec'", "--args",
                         "i32[5]")
  assert status == 0, err
  assert "sub" in out


def test_parse_helpers():
  s = cli.parse_shape_spec(" bf16[ 2, 3 ] ")
  assert s.shape == (2, 3) and s.dtype == np.dtype("bfloat16")
  assert cli.parse_shape_spec("bool[]").shape == ()
  assert cli.parse_static("2=(1, 'a')") == (2, (1, "a"))


# ---------------------------------------------------------------------------
# Errors: status 2, argparse-style message on stderr


def _error(capsys, *argv) -> str:
  status, out, err = run(capsys, *argv)
  assert status == 2, (status, out, err)
  assert out == ""
  assert "stagecraft inspect: error:" in err or "stagecraft: error:" in err
  return err


@pytest.mark.parametrize("spec", ["f32(8)", "f32", "[8]", "f32[8,a]", "f32[8,,2]", "f32[-1]"])
def test_bad_shape_spec(capsys, spec):
  err = _error(capsys, "inspect", f"{MOD}:predict", "--args", spec)
  assert "expected a dtype and shape like f32[8,784] or i32[]" in err
  assert repr(spec) in err


def test_bad_shape_spec_exact_message(capsys):
  err = _error(capsys, "inspect", f"{MOD}:predict", "--args", "f32(8)")
  assert ("expected a dtype and shape like f32[8,784] or i32[], got 'f32(8)'" in err)


def test_unknown_dtype(capsys):
  err = _error(capsys, "inspect", f"{MOD}:predict", "--args", "q32[8]")
  assert "unknown dtype 'q32'" in err
  for name in ("f16", "bf16", "f32", "f64", "i8", "i32", "u8", "u32", "bool", "c64", "float32"):
    assert name in err


def test_module_not_importable(capsys):
  err = _error(capsys, "inspect", "no_such_module_xyz:f", "--args", "f32[3]")
  assert "cannot import module 'no_such_module_xyz'" in err


def test_no_colon(capsys):
  err = _error(capsys, "inspect", MOD, "--args", "f32[3]")
  assert "expected MODULE:FUNCTION" in err


def test_function_missing(capsys):
  err = _error(capsys, "inspect", f"{MOD}:nope", "--args", "f32[3]")
  assert "has no attribute 'nope'" in err and "predict" in err
  err = _error(capsys, "inspect", f"{MOD}:Model.Nope.apply", "--args", "f32[3]")
  assert f"'{MOD}.Model' has no attribute 'Nope'" in err


def test_not_callable(capsys):
  err = _error(capsys, "inspect", f"{MOD}:NOT_CALLABLE", "--args", "f32[3]")
  assert "not a callable" in err


@pytest.mark.parametrize("spec,msg", [
    ("7", "expected N=VALUE"),
    ("a=3", "expected a non-negative integer argument position"),
    ("1=relu", "expected a Python literal"),
    ("1=(", "expected a Python literal"),
    ("5=3", "out of range"),
])
def test_bad_static(capsys, spec, msg):
  err = _error(capsys, "inspect", f"{MOD}:scale", "--args", "f32[4]", "--static", spec)
  assert msg in err and "--static" in err


def test_static_twice(capsys):
  err = _error(capsys, "inspect", f"{MOD}:scale", "--args", "f32[4]", "--static", "1=2",
               "--static", "1=3")
  assert "given twice" in err


def test_unknown_stage(capsys):
  err = _error(capsys, "inspect", *PREDICT, "--stage", "llvm")
  assert "invalid choice: 'llvm'" in err and "optimized-hlo" in err


def test_function_fails_to_trace(capsys):
  status, out, err = run(capsys, "inspect", *PREDICT[:3], "f32[8,5]")  # 784 vs 5
  assert status == 1 and out == ""
  assert "stage 'jaxpr'" in err and "TypeError" in err
  assert "dot_general requires contracting dimensions to have the same shape" in err


# ---------------------------------------------------------------------------
# python -m stagecraft


def test_python_m(testmod):
  src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, str(testmod)]))
  r = subprocess.run([sys.executable, "-m", "stagecraft", "inspect", f"{MOD}:scale", "--args",
                      "f32[4]", "--static", "1=7", "--stage", "stablehlo"],
                     capture_output=True, text=True, env=env, timeout=120)
  assert r.returncode == 0, r.stderr
  assert "stablehlo.multiply" in r.stdout and "tensor<4xf32>" in r.stdout
  r = subprocess.run([sys.executable, "-m", "stagecraft", "inspect", f"{MOD}:scale", "--args",
                      "f32(4)"], capture_output=True, text=True, env=env, timeout=120)
  assert r.returncode == 2
  assert "expected a dtype and shape like f32[8,784] or i32[], got 'f32(4)'" in r.stderr
