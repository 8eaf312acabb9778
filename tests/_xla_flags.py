"""The XLA flags the test suite compiles with (see tests/conftest.py)."""
import os

# LLVM at -O0 and XLA:CPU's older elemental emitters instead of its MLIR fusion emitters: a
# small jit compiles in ~15 ms instead of ~29 ms (measured 2026-11-27 on the 2-core machine).
FAST_XLA_FLAGS = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")


def fast_compile() -> bool:
  """Whether this process's XLA_FLAGS hold the fast flags (xdist's workers inherit the
  controller's XLA_FLAGS, so the test is on the flags themselves)."""
  return set(FAST_XLA_FLAGS) <= set(os.environ.get("XLA_FLAGS", "").split())


def without_fast_flags(xla_flags: str) -> str:
  """`xla_flags` less the fast flags: what a subprocess gets to compile with XLA's defaults."""
  names = {f.split("=")[0] for f in FAST_XLA_FLAGS}
  return " ".join(f for f in xla_flags.split() if f.split("=")[0] not in names)
