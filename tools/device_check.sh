#!/bin/bash
# The checks a session runs on a lent GPU machine (the `device` tool of this workplace; see
# the README's "On a GPU" paragraph). The machine has its own jax/jaxlib with the CUDA plugin
# (no registry access); stagecraft's pure-Python dependencies that it lacks travel as wheels in
# .whl/ (optree, plum-dispatch, beartype). Results go to $OUT: linalg.log (the GPU linalg
# tests), bench.txt/bench.json (quick benchmark rows), suite.log (the test suite, per test).
set -u
OUT=${OUT:-/tmp/device_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
# many test processes share the one GPU: allocate on demand, not 75% each
export XLA_PYTHON_CLIENT_PREALLOCATE=false
# The suite's fast compile flags (tests/_xla_flags.py) are jaxlib 0.10.2's; the machine's
# newer jaxlib aborts the process on a flag it no longer knows, so the tests get only the
# device count (conftest keeps an XLA_FLAGS that is already set).
export XLA_FLAGS=--xla_force_host_platform_device_count=4
nvidia-smi -L; python3 -c "import jax, jaxlib; print('jax', jax.__version__, jaxlib.__version__)"
python3 -c "import stagecraft as sc; print(sc.devices(), sc.default_backend())" || exit 1
python3 -m pytest -q -p no:cacheprovider -p no:benchmark tests/test_linalg_gpu.py 2>&1 | tee "$OUT/linalg.log" | tail -25
[ "${BENCH_S:-150}" = 0 ] || timeout "${BENCH_S:-150}" python3 -m benchmarks.run --quick --json "$OUT/bench.json" \
  --only jit_dispatch eager_op mlp_train_step transformer_block per_example_grads \
  scan_rnn_grad nf4_matmul cold_start scipy_ops > "$OUT/bench.txt" 2>&1; tail -30 "$OUT/bench.txt"
timeout "${SUITE_S:-300}" python3 -m pytest -n 14 -v -p no:cacheprovider -p no:benchmark --timeout 120 \
  -o console_output_style=classic tests > "$OUT/suite.log" 2>&1
echo "suite rc=$? passed=$(grep -c ' PASSED ' "$OUT/suite.log") failed=$(grep -c ' FAILED ' "$OUT/suite.log") errors=$(grep -c ' ERROR ' "$OUT/suite.log")"
grep ' FAILED \| ERROR ' "$OUT/suite.log" | sed 's/.* \(tests\/[^ :]*\).*/\1/' | sort | uniq -c | sort -rn | head -40
