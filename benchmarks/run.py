"""The benchmark suite: stagecraft against JAX in the same process, one table of ratios.

Each row is the median of interleaved repeats (the two sides alternate, ABBA order, so slow
drifts in the machine's load stay out of the ratio) and the ratio is stagecraft / baseline
(lower is better); the baseline is JAX unless the row says otherwise. Rows: jit dispatch,
eager op, make_jaxpr of grad of a 100-layer MLP, trace+lower and compile of a 2000-op chain,
an MLP train step, a transformer block forward+backward, per-example grads with vmap, a scan
RNN grad, a pmap data-parallel step on 4 CPU devices, a 2-D-sharded MLP train step (jit with
in/out shardings over a 2x2 mesh) and its trace+lower, an NF4 matmul, and the cold start of a
new process. Also printed: the date and machine, peak RSS, and a CPU roofline reference
(NumPy float32 matmul GFLOP/s).

Run: python -m benchmarks.run [--quick] [--json PATH] [--only NAME ...]
`--quick` runs everything with few repeats (a smoke run, ~30 s on 2 cores); the full run
takes ~2.5 minutes there. `--only` picks sections by name (see SECTIONS). Progress per
section goes to stderr; a section that raises is reported as a skipped row with the error.
"""
from __future__ import annotations

import os

# pmap and sharded jit run on 4 CPU devices: the flag must be set before the runtime starts.
_FLAG = "--xla_force_host_platform_device_count=4"
_USER_XLA_FLAGS = os.environ.get("XLA_FLAGS")
if "xla_force_host_platform_device_count" not in (_USER_XLA_FLAGS or ""):
  os.environ["XLA_FLAGS"] = ((_USER_XLA_FLAGS or "") + " " + _FLAG).strip()

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

import numpy as np  # noqa: E402

NDEV = 4


def _row(name, ours, base, unit, target, baseline="JAX", note=""):
  """One result: `ours` and `base` in `unit`; `target` is the largest acceptable ratio
  (None: no target)."""
  ratio = ours / base if base else float("nan")
  met = None if target is None else bool(ratio <= target)
  return dict(name=name, stagecraft=float(ours), baseline=float(base), baseline_name=baseline,
              unit=unit, ratio=float(ratio), target=target, met=met, note=note)


def _skip(name, note):
  return dict(name=name, stagecraft=None, baseline=None, baseline_name=None, unit="",
              ratio=None, target=None, met=None, note=note)


# Each section: quick flag -> list of rows. Sizes (quick, full) chosen so the full run stays
# well under 10 minutes on 2 shared cores.

def jit_dispatch(quick):
  from benchmarks import foundation
  n, reps = (500, 3) if quick else (20000, 9)
  a, b = foundation.bench_jit_dispatch(n, reps)
  return [_row("jit dispatch, x * y + 1 on scalars", a, b, "us", 1.3, note="issue 25")]


def eager_op(quick):
  from benchmarks import foundation
  n, reps = (500, 3) if quick else (20000, 9)
  a, b = foundation.bench_eager_add(n, reps)
  return [_row("eager op x + y, f32[8]", a, b, "us", 1.0, note="issue 25")]


def trace_grad_mlp(quick):
  from benchmarks import autodiff
  a, b, n_ours, n_theirs = autodiff.bench_trace(2 if quick else 20)
  return [_row("make_jaxpr(grad) 100-layer MLP", a, b, "ms", 0.5),
          _row("  equations in that jaxpr", n_ours, n_theirs, "", 1.0)]


def eager_grad_mlp(quick):
  from benchmarks import autodiff
  a, b = autodiff.bench_eager_grad(2 if quick else 40)
  return [_row("grad of MLP loss outside jit (op-by-op)", a, b, "ms", 1.2,
               note="4 tanh layers of 256, batch 32")]


def lower_compile_chain(quick):
  from benchmarks import staging
  (ls, lj), (cs, cj) = staging.bench_lower_compile(2000, 2 if quick else 10)
  return [_row("trace+lower 2000-op chain", ls, lj, "ms", 0.7),
          _row("compile 2000-op chain", cs, cj, "ms", 1.0)]


def mlp_train_step(quick):
  from benchmarks import autodiff
  from benchmarks.convnet import paired
  ours, theirs = autodiff.setup_sgd()
  a, b = paired(ours, theirs, pairs=4 if quick else 500)
  return [_row("MLP SGD step 784-512-512-10, b128", a, b, "us", 1.05)]


def transformer_block(quick):
  from benchmarks import transformer
  (ra, rb), (la, lb) = transformer.bench(pairs=3 if quick else 100, repeats=2 if quick else 10)
  return [_row("transformer block fwd+bwd d256 h4 t128 b8", ra, rb, "us", 1.05),
          _row("  trace+lower of that grad", la, lb, "ms", 1.0)]


def per_example_grads(quick):
  from benchmarks import vmap
  from benchmarks.convnet import paired
  run_s, run_j, _, _ = vmap.setup()
  a, b = paired(run_s, run_j, pairs=4 if quick else 1000)
  return [_row("per-example grads jit(vmap(grad)) b256", a, b, "us", 1.05)]


def scan_rnn_grad(quick):
  from benchmarks import control_flow
  (ra, rb), (la, lb) = control_flow.bench_rnn(pairs=3 if quick else 200,
                                              repeats=2 if quick else 10)
  return [_row("scan RNN grad T=200 H=128 b16", ra, rb, "us", 1.05),
          _row("  trace+lower of that grad", la, lb, "ms", 1.0)]


def pmap_step(quick):
  import jax
  name = f"pmap DP-SGD step MLP256, b64 x {NDEV} dev"
  if len(jax.devices()) < NDEV:
    return [_skip(name, f"needs {NDEV} devices, the runtime has {len(jax.devices())}: it "
                        "was started before XLA_FLAGS could be set")]
  from benchmarks import pmap
  r = pmap.bench(2 if quick else 20, 3 if quick else 20)
  return [_row(name, *r["step"], "us", 1.05),
          _row("  pmap dispatch, x + 1", *r["dispatch"], "us", 1.5)]


def sharded_step(quick):
  import jax
  names = ["sharded MLP step (2x2 mesh)", "  sharded trace+lower",
           "explicit-sharding MLP step (2x2 Explicit mesh)", "  explicit-sharding trace+lower",
           "  sharded jit dispatch, x + 1 on a 2x2 mesh"]
  if len(jax.devices()) < NDEV:
    return [_skip(n, f"needs {NDEV} devices, the runtime has {len(jax.devices())}: it was "
                     "started before XLA_FLAGS could be set") for n in names]
  from benchmarks import sharded
  r = sharded.bench(*((2, 2, 2) if quick else (40, 4, 10)))
  counts = ", ".join(f"{k} {r['collectives']['s'][k]}/{r['collectives']['j'][k]}"
                     for k in sharded.COLLECTIVES if r["collectives"]["s"][k] or
                     r["collectives"]["j"][k])
  e = sharded.bench_explicit(*((2, 2, 2) if quick else (40, 4, 10)))
  return [_row(names[0], *r["step"], "us", 1.05,
               note=f"MLP 512-1024-1024-10 b256; collectives (stagecraft/JAX): {counts}"),
          _row(names[1], *r["lower"], "ms", 1.0),
          _row(names[2], *e["step"], "us", 1.05,
               note="the same step, layout from the arguments' types (sharding in types)"),
          _row(names[3], *e["lower"], "ms", 1.0),
          _row(names[4], *sharded.bench_dispatch(*((200, 3) if quick else (2000, 9))), "us",
               1.3, note="issue 25")]


def nf4_matmul(quick):
  name = "NF4 matmul"
  try:
    from benchmarks import implicit
  except ImportError as e:
    return [_skip(name, f"benchmarks/implicit.py is missing ({e})")]
  n, reps = (1024, 3) if quick else (4096, 10)
  rows, err = implicit.run(n, 16, reps)
  baselines = ["f32 bytes", "sc f32 mm", "sc mat+mm", "sc mat out", "sc f32 mm"]
  out = []
  for (rname, a, b, unit, target), base in zip(rows, baselines):
    out.append(_row(rname, a, b, unit, target, baseline=base))
  out[0]["note"] = ("NF4 rows are stagecraft-only: the baseline column is not JAX; "
                    "double-quantized scales (QLoRA)")
  out[1]["note"] = f"max |handler - materialize-then-matmul| = {err:.1e}"
  return out



def _cold_env():
  env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
  # NB: a user's Python writes bytecode caches at the first import (JAX's installed files
  # have theirs from pip); without them every start compiles stagecraft's ~150 modules
  # from source (~250 ms). The warm-up run below writes them.
  env.pop("PYTHONDONTWRITEBYTECODE", None)
  if _USER_XLA_FLAGS is None:   # a fresh process as a user starts it, one CPU device
    env.pop("XLA_FLAGS", None)
  else:
    env["XLA_FLAGS"] = _USER_XLA_FLAGS
  return env


# Prints the process's own peak RSS (VmHWM is per address space, so it starts afresh at exec;
# getrusage's ru_maxrss would carry the parent's high-water mark over the fork).
_PEAK = ("; import sys; sys.stdout.write(next((l.split()[1] for l in open('/proc/self/status') "
         "if l.startswith('VmHWM')), '0'))")


_JIT_FIRST = ("import numpy as np; import {m} as lib; "
              "lib.jit(lambda x: x * 2.0 + 1.0)(np.ones(3, np.float32)).block_until_ready()")


def cold_start(quick):
  env = _cold_env()
  scripts = {
      "s": "import stagecraft, stagecraft.numpy as jnp; jnp.ones(3).block_until_ready()",
      "j": "import jax, jax.numpy as jnp; jnp.ones(3).block_until_ready()",
      # issue 25's measure: a fresh process imports the library and runs a first jit
      "sjit": _JIT_FIRST.format(m="stagecraft"), "jjit": _JIT_FIRST.format(m="jax"),
      "simp": "import stagecraft", "jimp": "import jax"}
  peak = {k: [] for k in scripts}

  def once(key):
    t = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", scripts[key] + _PEAK], env=env, check=True,
                         timeout=300, capture_output=True, text=True)
    dt = (time.perf_counter() - t) * 1e3
    peak[key].append(float(res.stdout.split()[-1] if res.stdout.split() else 0) / 1024)
    return dt
  times = {k: [] for k in scripts}
  for a, b in (("s", "j"), ("sjit", "jjit"), ("simp", "jimp")):
    if not quick:
      once(a), once(b)    # warm the file system caches
    for i in range(1 if quick else 7):
      for key in (a, b) if i % 2 == 0 else (b, a):
        times[key].append(once(key))
  med = {k: statistics.median(v) for k, v in times.items()}
  rows = [_row("cold start: import, ones(3), block", med["s"], med["j"], "ms", 1.5),
          _row("cold start: import, jit(f)(x), block", med["sjit"], med["jjit"], "ms", 0.7,
               note="issue 25"),
          _row("  import alone (a fresh process)", med["simp"], med["jimp"], "ms", None)]
  if max(peak["s"]) > 0 and max(peak["j"]) > 0:
    rows.append(_row("  peak RSS of that process", max(peak["s"]), max(peak["j"]), "MiB",
                     None))
  return rows


def callbacks(quick):
  from benchmarks import callbacks as cbs
  a, b = cbs.bench_print_loop(pairs=2 if quick else 20)
  c, d = cbs.bench_unused_pure_callback(pairs=4 if quick else 500)
  return [_row("debug.print in a jitted 1000-step loop", a, b, "us", 1.5),
          _row("  jit with an unused pure_callback", c, d, "us", 1.05,
               baseline="no callback", note="DCE removes it")]


def scipy_ops(quick):
  from benchmarks import scipy_ops as ops
  pairs = 4 if quick else 500
  notes = {"cho_solve": "one right-hand side, float32; OpenBLAS on one thread",
           "segment_sum": "unsorted segment ids"}
  return [_row(name, *ops.bench(key, pairs), "us", 1.05, note=notes.get(key, ""))
          for key, name in ops.ROWS]


def memory(quick):
  from benchmarks import memory as mem
  return mem.rows(quick)


SECTIONS = {
    "jit_dispatch": jit_dispatch,
    "eager_op": eager_op,
    "trace_grad_mlp": trace_grad_mlp,
    "eager_grad_mlp": eager_grad_mlp,
    "lower_compile_chain": lower_compile_chain,
    "mlp_train_step": mlp_train_step,
    "transformer_block": transformer_block,
    "per_example_grads": per_example_grads,
    "scan_rnn_grad": scan_rnn_grad,
    "pmap_step": pmap_step,
    "sharded": sharded_step,
    "nf4_matmul": nf4_matmul,
    "cold_start": cold_start,
    "callbacks": callbacks,
    "scipy_ops": scipy_ops,
    "memory": memory,
}


def roofline_gflops(quick) -> float:
  """Best NumPy float32 matmul rate (GFLOP/s) on n x n matrices: a reference for how fast
  this CPU multiplies, next to which the per-step times above can be read."""
  n = 1024
  rng = np.random.default_rng(0)
  a = rng.standard_normal((n, n)).astype(np.float32)
  b = rng.standard_normal((n, n)).astype(np.float32)
  a @ b
  best = float("inf")
  for _ in range(5 if quick else 10):
    t = time.perf_counter()
    a @ b
    best = min(best, time.perf_counter() - t)
  return 2 * n ** 3 / best / 1e9


def machine_info() -> dict:
  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          cpu = line.split(":", 1)[1].strip()
          break
  except OSError:
    pass
  info = dict(date=datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z").strip(),
              cpu=cpu, cores=os.cpu_count(), system=f"{platform.system()} {platform.release()}",
              python=platform.python_version(), numpy=np.__version__)
  try:
    import jax
    import jaxlib
    info.update(jax=jax.__version__, jaxlib=jaxlib.__version__)
  except ImportError:
    pass
  try:
    here = os.path.dirname(os.path.abspath(__file__))
    info["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here,
                                    capture_output=True, text=True, timeout=10).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    pass
  return info


def _fmt(v):
  if v is None:
    return "-"
  if v == int(v) and abs(v) < 1e7:
    return f"{int(v)}"
  return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"


def print_table(rows, info, extra):
  print(f"date: {info['date']}")
  print(f"machine: {info['cpu']}, {info['cores']} cores, {info['system']}, python "
        f"{info['python']}, numpy {info['numpy']}, jax/jaxlib {info.get('jax', '?')}/"
        f"{info.get('jaxlib', '?')}, stagecraft {info.get('commit', '?')}")
  print()
  head = (f"| {'benchmark':42s} | {'stagecraft':>10s} | {'baseline':>10s} | {'vs':10s} | "
          f"{'unit':4s} | {'ratio':>6s} | {'target':>8s} | met |")
  print(head)
  print("|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|")
  for r in rows:
    if r["ratio"] is None:
      print(f"| {r['name']:42s} | {'skipped: ' + r['note']}")
      continue
    target = "-" if r["target"] is None else f"<={r['target']:g}"
    met = "-" if r["met"] is None else ("yes" if r["met"] else "NO")
    print(f"| {r['name']:42s} | {_fmt(r['stagecraft']):>10s} | {_fmt(r['baseline']):>10s} | "
          f"{r['baseline_name']:10s} | {r['unit']:4s} | {r['ratio']:6.2f} | {target:>8s} | "
          f"{met:3s} |")
  notes = [r for r in rows if r["note"] and r["ratio"] is not None]
  for r in notes:
    print(f"note ({r['name'].strip()}): {r['note']}")
  print()
  print(f"peak RSS: {extra['peak_rss_mib']:.0f} MiB (this process: both libraries, all "
        "benchmarks)")
  print(f"CPU roofline reference: NumPy float32 matmul {extra['roofline_gflops']:.1f} GFLOP/s")
  print(f"suite wall time: {extra['wall_s']:.1f} s ({'quick' if extra['quick'] else 'full'} "
        "run)")


def main(argv=None):
  """Runs the sections (all, or those named by --only), prints the table and returns
  {"info", "rows", ...} (also written to --json PATH)."""
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true", help="few repeats (a smoke run)")
  ap.add_argument("--json", help="write the results to this file")
  ap.add_argument("--only", nargs="+", choices=sorted(SECTIONS), metavar="NAME",
                  help="run only these sections: " + ", ".join(SECTIONS))
  args = ap.parse_args(argv)
  t0 = time.perf_counter()
  info = machine_info()
  rows, times = [], {}
  for key, fn in SECTIONS.items():
    if args.only and key not in args.only:
      continue
    t = time.perf_counter()
    try:
      rows.extend(fn(args.quick))
    except Exception as e:  # noqa: BLE001 - one broken section must not hide the others
      traceback.print_exc()
      rows.append(_skip(key, f"error: {type(e).__name__}: {e}"))
    times[key] = time.perf_counter() - t
    print(f"[{key}: {times[key]:.1f} s]", file=sys.stderr, flush=True)
  extra = dict(
      quick=args.quick,
      roofline_gflops=roofline_gflops(args.quick),
      peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
      section_s=times)
  extra["wall_s"] = time.perf_counter() - t0
  print_table(rows, info, extra)
  result = dict(info=info, rows=rows, **extra)
  if args.json:
    with open(args.json, "w") as f:
      json.dump(result, f, indent=1)
  return result


if __name__ == "__main__":
  main()
