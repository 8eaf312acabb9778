"""`jax_dump_ir_to` / `jax_dump_ir_modes`: the files JAX 0.10.2 writes for a jitted program
(the module compiled, its jaxpr, the equation-count pprof profile), compared with JAX's
files for the same program."""
from __future__ import annotations

import gzip
import json
import re

import jax
import numpy as np
import pytest
from jaxlib import _jax

import stagecraft as sc
import stagecraft.numpy as snp


def _program(lib, np_):
  @lib.jit
  def unrolled_loop(x):
    for _ in range(20):
      x = x + 1.0
    return np_.sin(x) * 2.0
  return unrolled_loop


def _dump(lib, np_, out, modes):
  old_to, old_modes = lib.config.read("jax_dump_ir_to"), lib.config.read("jax_dump_ir_modes")
  lib.config.update("jax_dump_ir_to", str(out))
  lib.config.update("jax_dump_ir_modes", modes)
  try:
    _program(lib, np_)(np.zeros(13, np.float32))
  finally:
    lib.config.update("jax_dump_ir_to", old_to)
    lib.config.update("jax_dump_ir_modes", old_modes)
  return {re.sub(r"^jax_(ir)?\d+_", "jax_N_", p.name): p for p in out.iterdir()}


def _profile(path):
  return json.loads(_jax.pprof_profile_to_json(gzip.decompress(path.read_bytes())))


def test_dumped_files_are_jaxs(tmp_path):
  modes = "stablehlo,jaxpr,eqn_count_pprof"
  want = _dump(jax, jax.numpy, tmp_path / "jax", modes)
  got = _dump(sc, snp, tmp_path / "sc", modes)
  assert sorted(got) == sorted(want) == [
      "jax_N_jit_unrolled_loop_compile.mlir", "jax_N_unrolled_loop.eqn_count_pprof",
      "jax_N_unrolled_loop.jaxpr.txt"]
  name = "jax_N_unrolled_loop.jaxpr.txt"
  assert got[name].read_text() == want[name].read_text()
  prof = "jax_N_unrolled_loop.eqn_count_pprof"
  assert _profile(got[prof]) == _profile(want[prof])
  text = got["jax_N_jit_unrolled_loop_compile.mlir"].read_text()
  assert text.startswith('#loc1 = loc("x")\nmodule @jit_unrolled_loop')   # locations kept
  assert text.count("stablehlo.add") == 20


def test_default_mode_dumps_modules_only(tmp_path):
  got = _dump(sc, snp, tmp_path / "sc", "stablehlo")
  assert list(got) == ["jax_N_jit_unrolled_loop_compile.mlir"]


def test_sponge_needs_its_directory(monkeypatch):
  monkeypatch.delenv("TEST_UNDECLARED_OUTPUTS_DIR", raising=False)
  old = sc.config.read("jax_dump_ir_to")
  sc.config.update("jax_dump_ir_to", "sponge")
  try:
    with pytest.raises(ValueError, match=re.escape(
        "Got output directory (e.g., via JAX_DUMP_IR_TO) 'sponge' but "
        "TEST_UNDECLARED_OUTPUTS_DIR is not defined.")):
      sc.jit(lambda x: x * 53)(np.ones(3, np.float32))
  finally:
    sc.config.update("jax_dump_ir_to", old)
