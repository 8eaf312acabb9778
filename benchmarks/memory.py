"""Memory benchmarks against JAX (issue 25): peak RSS of fresh processes doing the same work,
and live buffers / RSS over many calls.

(a) Peak RSS (the process's VmHWM, MiB) of a fresh process that imports one library and runs
    the suite's workloads: the MLP SGD step (784-512-512-10, b128), the transformer block
    fwd+bwd (d256 h4 t128 b8), the scan RNN grad (T=200 H=128 b16) and per-example grads
    (`jit(vmap(grad))`, b256). The workloads are written once against a module `lib`
    (`stagecraft` or `jax`) with the builders of benchmarks/autodiff.py, transformer.py,
    control_flow.py and vmap.py; the process is run 3 times per library and the row gives the
    median (the max is in the note). Target: stagecraft <= JAX. Below it, one row per
    workload: the peak RSS while it ran (the peak is reset before each workload through
    /proc/self/clear_refs), in that process, so after the workloads above it: what is
    resident then (compiled programs, caches, the allocator's free memory, which stagecraft
    trims and JAX keeps) counts too. Peak RSS varies by up to ~15% from run to run (seen on
    the transformer alone: 371-436 MiB), hence the repeats.
(b) Peak RSS of the README example, `python -m stagecraft.examples.digits` (it uses
    `stagecraft.optim` and implicit arrays, which JAX does not have, so it cannot run on JAX
    through `stagecraft.compat`), against `digits_jax` below: a twin of the example written for
    JAX doing the same work (the same data, split, model, Adam, `jit(pmap(step))` over 4 CPU
    devices, evaluation, per-example gradient norms, blockwise int8/NF4 quantized evaluation
    (dequantized inside `jit`), AOT lowering/compilation and text dumps, persistent
    compilation cache). Each runs in a fresh process with a fresh output directory (a first,
    cold-cache run, as a user's first). Target: stagecraft <= JAX.
(c) In a fresh process per library: 10,000 calls (after 2,000 warm-up calls: the allocators'
    first pages and the caches fill there, then RSS stays flat) of a small jitted
    function, of a jitted function returning a pytree of four arrays and of eager ops, their
    results dropped; the live device arrays (`live_arrays()`) and RSS before and after. The
    row gives the RSS growth (KiB; at least one 4 KiB page, the resolution) and the note the
    live-array counts; "met" means flat: live arrays unchanged and growth <= FLAT_MIB (1 MiB,
    about 100 B a call; JAX's growth is 0-0.15 MiB).
    NB: stagecraft's process must not import jax, hence a fresh process (before stagecraft
    drained jaxlib's queue of per-execution tracebacks, each dispatch kept ~72 B of them).

Peak RSS depends little on the machine's load, so the two libraries' processes run side by
side (the pair's order alternating): the full run repeats (a) 3 times ((c) runs in the first
of these processes, after the workloads), (b) twice. `--quick` runs four processes at once,
once: (a) with the MLP step only, (b) with the example's set-up and training loop only (20
steps), (c) with 2,000 calls.

Run: python -m benchmarks.memory [--quick] [--json PATH]
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

LIBS = ("stagecraft", "jax")
WORKLOADS = ("mlp_sgd", "transformer", "scan_rnn", "per_example")
WORKLOAD_NAMES = {     # the rows of benchmarks/run.py that time them
    "mlp_sgd": "MLP SGD step",
    "transformer": "transformer block fwd+bwd",
    "scan_rnn": "scan RNN grad",
    "per_example": "per-example grads",
}
LEAK_CASES = ("jit", "jit_multi", "eager")
LEAK_NAMES = {"jit": "jit(x * y + 1)", "jit_multi": "jit, 4 results", "eager": "x + y, sin(x)"}
FLAT_MIB = 1.0     # (c): the most RSS growth over 10,000 calls that counts as flat
_MARK = "MEMORY_RESULT "
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def proc_status_mib(key: str) -> float:
  """A memory field of /proc/self/status (VmHWM: peak RSS, VmRSS: RSS now) in MiB."""
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(key + ":"):
        return int(line.split()[1]) / 1024
  return 0.0


def reset_peak_rss() -> bool:
  """Resets this process's VmHWM to its RSS now (Linux >= 4.0: /proc/self/clear_refs);
  returns whether it could."""
  try:
    with open("/proc/self/clear_refs", "w") as f:
      f.write("5")
    return True
  except OSError:
    return False


def _import(name: str):
  if name not in LIBS:
    raise ValueError(f"library must be one of {LIBS}, got {name!r}")
  import importlib
  lib = importlib.import_module(name)
  for sub in ("numpy", "lax", "nn", "tree_util"):
    importlib.import_module(f"{name}.{sub}")
  return lib


# ---------------------------------------------------------------------------
# (a) The workloads, written once against `lib` (stagecraft or jax). Each runs `steps` calls
# of the compiled function on device inputs and waits for the results.


def workload_mlp_sgd(lib, steps: int) -> None:
  """SGD steps of the 784-512-512-10 tanh MLP (softmax cross-entropy, batch 128), the
  parameters fed back as in training."""
  from benchmarks.autodiff import init_mlp, make_xent_loss
  loss = make_xent_loss(lib.numpy, lib.nn.log_softmax)

  @lib.jit
  def step(params, x, labels):
    g = lib.grad(loss)(params, x, labels)
    return lib.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, g)
  rng = np.random.default_rng(1)
  params = lib.device_put(init_mlp([784, 512, 512, 10]))
  x = lib.device_put(rng.standard_normal((128, 784)).astype(np.float32))
  labels = lib.device_put(np.eye(10, dtype=np.float32)[rng.integers(0, 10, 128)])
  for _ in range(steps):
    params = step(params, x, labels)
  lib.block_until_ready(params)


def workload_transformer(lib, steps: int) -> None:
  """`jit(value_and_grad)` of the pre-LN transformer block's loss (benchmarks/transformer)."""
  from benchmarks import transformer
  f = lib.jit(lib.value_and_grad(transformer.make_loss(lib.numpy, lib.nn)))
  p = lib.device_put(transformer.init_params())
  x = lib.device_put(np.random.default_rng(1).standard_normal(
      (transformer.BATCH, transformer.SEQ, transformer.D)).astype(np.float32))
  for _ in range(steps):
    out = f(p, x)
  lib.block_until_ready(out)


def workload_scan_rnn(lib, steps: int) -> None:
  """`jit(grad)` of the 200-step tanh RNN written with `scan` (benchmarks/control_flow)."""
  from benchmarks.control_flow import make_rnn_loss, rnn_setup
  f = lib.jit(lib.grad(make_rnn_loss(lib.numpy, lib.lax)))
  args = lib.device_put(rnn_setup())
  for _ in range(steps):
    out = f(*args)
  lib.block_until_ready(out)


def workload_per_example(lib, steps: int) -> None:
  """Per-example gradients `jit(vmap(grad, (None, 0, 0)))` of a 32-64-64-10 MLP, b256."""
  from benchmarks.autodiff import init_mlp, make_mse_loss
  f = lib.jit(lib.vmap(lib.grad(make_mse_loss(lib.numpy)), in_axes=(None, 0, 0)))
  rng = np.random.default_rng(1)
  params = lib.device_put(init_mlp([32, 64, 64, 10]))
  x = lib.device_put(rng.standard_normal((256, 32)).astype(np.float32))
  y = lib.device_put(rng.standard_normal((256, 10)).astype(np.float32))
  for _ in range(steps):
    out = f(params, x, y)
  lib.block_until_ready(out)


WORKLOAD_FNS = {"mlp_sgd": workload_mlp_sgd, "transformer": workload_transformer,
                "scan_rnn": workload_scan_rnn, "per_example": workload_per_example}


# ---------------------------------------------------------------------------
# (c) Live arrays and RSS over many calls.


def leak_check(lib, calls: int, warmup: int | None = None) -> dict:
  """For each case of LEAK_CASES: `warmup` calls, then `calls` more with the results dropped;
  returns {case: {"live": (before, after), "rss": (before MiB, after MiB)}}, counted after a
  `gc.collect()` (live arrays: `lib.live_arrays()`).

  NB (found with this check): stagecraft's dispatch grew ~72 B a call while jaxlib kept a
  Python traceback per execution (freed only when something drains jaxlib's deletion
  queue); `runtime.client.count_execution` drains it every 1,024 launches.
  """
  warmup = max(100, calls // 5) if warmup is None else warmup
  jnp = lib.numpy
  f = lib.jit(lambda x, y: x * y + 1.0)
  g = lib.jit(lambda x: (x + 1.0, x * 2.0, {"s": jnp.sin(x), "c": jnp.cos(x)}))
  x, y = jnp.ones(8), jnp.full(8, 2.0)
  cases = {"jit": lambda: f(x, y), "jit_multi": lambda: g(x),
           "eager": lambda: (x + y, jnp.sin(x))}
  out = {}
  for name in LEAK_CASES:
    fn = cases[name]
    for _ in range(warmup):
      fn()
    lib.block_until_ready(fn())
    gc.collect()
    live0, rss0 = len(lib.live_arrays()), proc_status_mib("VmRSS")
    for _ in range(calls):
      fn()
    lib.block_until_ready(fn())
    gc.collect()
    out[name] = {"live": (live0, len(lib.live_arrays())),
                 "rss": (rss0, proc_status_mib("VmRSS"))}
  return out


# ---------------------------------------------------------------------------
# (b) The README example's JAX twin.


NF4_LEVELS = np.array([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0], np.float32)


def digits_jax(argv=None, train_only: bool = False) -> dict:
  """The training run of `stagecraft.examples.digits` written for JAX (default configuration:
  no DP-SGD): the same data split, 64-256-256-10 gelu MLP, Adam (the optax/stagecraft.optim
  update, written out), `jit(pmap(step))` with `pmean` over `--devices` CPU devices, a tqdm
  bar, evaluation and confusion matrix, per-example gradient norms with `vmap` beside a Python
  loop of `jit(grad)`, blockwise (64) absmax int8 and NF4 quantized weights evaluated under
  `jit` (dequantized inside the program; single quantization of the scales), and the train
  step lowered and compiled ahead of time with its StableHLO, optimized HLO and dot graph
  written to `--out`, with JAX's persistent compilation cache in `--out/compilation_cache`.
  Returns {"loss", "test_acc", "int8_acc", "nf4_acc"}. With `train_only`, returns {"loss"}
  after the training loop. Imports jax only (and scikit-learn's data, tqdm)."""
  ap = argparse.ArgumentParser(prog="digits_jax")
  ap.add_argument("--steps", type=int, default=300)
  ap.add_argument("--batch", type=int, default=128)
  ap.add_argument("--lr", type=float, default=3e-3)
  ap.add_argument("--out", default="digits_out")
  ap.add_argument("--devices", type=int, default=4)
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args(argv)
  flags = os.environ.get("XLA_FLAGS", "")
  if "--xla_force_host_platform_device_count" not in flags:
    os.environ["XLA_FLAGS"] = (
        f"{flags} --xla_force_host_platform_device_count={args.devices}").strip()
  import jax
  import jax.numpy as jnp
  from jax import lax

  os.makedirs(args.out, exist_ok=True)
  jax.config.update("jax_compilation_cache_dir", os.path.join(args.out, "compilation_cache"))
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  sizes, axis = (64, 256, 256, 10), "batch"

  from sklearn.datasets import load_digits
  data = load_digits()
  xs, ys = data.data.astype(np.float32), data.target.astype(np.int32)
  perm = np.random.default_rng(args.seed).permutation(len(xs))
  xs, ys = xs[perm], ys[perm]
  n_train = int(0.8 * len(xs))
  x_tr, y_tr, x_te, y_te = xs[:n_train], ys[:n_train], xs[n_train:], ys[n_train:]

  @jax.jit
  def standardize(a, b):
    mean, std = a.mean(axis=0), a.std(axis=0) + 1e-3
    return (a - mean) / std, (b - mean) / std
  x_tr, x_te = standardize(x_tr, x_te)
  x_tr_host = np.asarray(x_tr)
  y_te_dev = jax.device_put(y_te)

  def predict(params, x):
    h = x
    n = len(sizes) - 1
    for i in range(1, n + 1):
      h = h @ params[f"w{i}"] + params[f"b{i}"]
      if i < n:
        h = jax.nn.gelu(h)
    return h

  def loss_fn(params, x, y):
    logp = jax.nn.log_softmax(predict(params, x))
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

  def example_loss(params, x, y):
    return loss_fn(params, x[None], y[None])

  def per_example_norms(grads):
    sq = sum(jnp.sum(jnp.reshape(g * g, (g.shape[0], -1)), axis=1)
             for g in jax.tree_util.tree_leaves(grads))
    return jnp.sqrt(sq)

  init_key, _ = jax.random.split(jax.random.PRNGKey(args.seed))
  keys = jax.random.split(init_key, len(sizes) - 1)
  params = {}
  for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
    params[f"w{i + 1}"] = jax.random.normal(keys[i], (n_in, n_out)) * np.float32(
        np.sqrt(2 / n_in))
    params[f"b{i + 1}"] = jnp.zeros(n_out)
  init = params

  b1, b2, eps, lr = 0.9, 0.999, 1e-8, args.lr

  def adam_init(p):
    zeros = jax.tree_util.tree_map(jnp.zeros_like, p)
    return (jnp.zeros((), jnp.int32), zeros, zeros)

  def adam_update(grads, state):
    count, mu, nu = state
    count = count + 1
    mu = jax.tree_util.tree_map(lambda g, m: b1 * m + (1 - b1) * g, grads, mu)
    nu = jax.tree_util.tree_map(lambda g, v: b2 * v + (1 - b2) * g * g, grads, nu)
    c1 = 1 - b1 ** count.astype(jnp.float32)
    c2 = 1 - b2 ** count.astype(jnp.float32)
    upd = jax.tree_util.tree_map(lambda m, v: -lr * (m / c1) / (jnp.sqrt(v / c2) + eps), mu, nu)
    return upd, (count, mu, nu)

  def step(params, opt_state, x, y, key, i):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    grads = lax.pmean(grads, axis)
    loss = lax.pmean(loss, axis)
    updates, opt_state = adam_update(grads, opt_state)
    return jax.tree_util.tree_map(lambda p, u: p + u, params, updates), opt_state, loss
  train_step = jax.jit(jax.pmap(step, axis, in_axes=(None, None, 0, 0, None, None),
                                out_axes=(None, None, None)))

  per_dev = args.batch // args.devices
  rng = np.random.default_rng(args.seed)

  def batches():
    while True:
      perm = rng.permutation(len(y_tr))
      for s in range(0, len(y_tr) - args.batch + 1, args.batch):
        yield perm[s:s + args.batch]
  it = batches()

  def shard(idx):
    return (x_tr_host[idx].reshape(args.devices, per_dev, -1),
            y_tr[idx].reshape(args.devices, per_dev))

  noise_key = jax.random.PRNGKey(args.seed + 1)
  opt_state = adam_init(params)
  params, opt_state, loss = train_step(params, opt_state, *shard(next(it)), noise_key, 0)
  float(loss)
  try:
    from tqdm import tqdm
    bar = tqdm(total=args.steps, desc="train", unit="step", file=sys.stderr, mininterval=0.5,
               leave=False)
  except ImportError:
    bar = None
  for i in range(1, args.steps):
    params, opt_state, loss = train_step(params, opt_state, *shard(next(it)), noise_key, i)
    if bar is not None:
      bar.update(1)
      if i % 25 == 0:
        bar.set_postfix(loss=f"{float(loss):.4f}")
  loss = float(loss)
  if bar is not None:
    bar.close()
  if train_only:   # as digits_stagecraft_train: the loss on 256 training examples
    return dict(loss=float(loss_fn(params, x_tr[:256], jax.device_put(y_tr[:256]))))

  @jax.jit
  def evaluate(params, x, y):
    pred = jnp.argmax(predict(params, x), axis=1)
    acc = jnp.mean((pred == y).astype(jnp.float32))
    conf = jax.nn.one_hot(y, 10, dtype=jnp.int32).T @ jax.nn.one_hot(pred, 10, dtype=jnp.int32)
    return acc, conf
  evaluate(params, x_tr, jax.device_put(y_tr))
  test_acc, confusion = evaluate(params, x_te, y_te_dev)
  test_acc = float(test_acc)
  np.asarray(confusion)

  # per-example gradient norms: vmap(grad) against a Python loop of jit(grad)
  xb, yb = jax.device_put(x_tr_host[:per_dev]), jax.device_put(y_tr[:per_dev])
  pe_norms = jax.jit(lambda p, x, y: per_example_norms(
      jax.vmap(jax.value_and_grad(example_loss), in_axes=(None, 0, 0))(p, x, y)[1]))
  np.asarray(pe_norms(init, xb, yb))
  norms = np.asarray(pe_norms(params, xb, yb))
  one_grad = jax.jit(lambda p, x, y: per_example_norms(
      jax.tree_util.tree_map(lambda g: g[None], jax.grad(example_loss)(p, x, y))))
  for _ in range(3):
    pe_norms(params, xb, yb).block_until_ready()
    loop = jax.block_until_ready([one_grad(params, x_tr_host[i], y_tr[i])
                                  for i in range(per_dev)])
  np.testing.assert_allclose(np.concatenate([np.asarray(v) for v in loop]), norms, rtol=1e-3,
                             atol=1e-6)

  # blockwise int8 / NF4 weights, dequantized inside the jitted evaluation
  def blocks(w, bs=64):
    flat = jnp.ravel(w)
    flat = jnp.pad(flat, (0, (-flat.shape[0]) % bs)).reshape(-1, bs)
    return flat, jnp.max(jnp.abs(flat), axis=1)

  def q_int8(w):
    b, absmax = blocks(w)
    codes = jnp.round(b / absmax[:, None] * 127).astype(jnp.int8)
    return ("int8", codes, absmax, w.shape)

  levels = jnp.asarray(NF4_LEVELS)

  def q_nf4(w):
    b, absmax = blocks(w)
    codes = jnp.argmin(jnp.abs(b[..., None] / absmax[:, None, None] - levels), axis=-1)
    codes = codes.astype(jnp.uint8).reshape(codes.shape[0], -1, 2)
    return ("nf4", (codes[..., 0] << 4) | codes[..., 1], absmax, w.shape)

  def dequantize(q):
    kind, codes, absmax, shape = q
    if kind == "int8":
      vals = codes.astype(jnp.float32) / 127
    else:
      idx = jnp.stack([codes >> 4, codes & 15], axis=-1).reshape(codes.shape[0], -1)
      vals = levels[idx.astype(jnp.int32)]
    n = int(np.prod(shape))
    return (vals * absmax[:, None]).reshape(-1)[:n].reshape(shape)

  accs = {}
  for kind, quant in (("int8", q_int8), ("nf4", q_nf4)):
    q = {k: (quant(v) if v.ndim == 2 else v) for k, v in params.items()}
    arrays = {k: (v[1], v[2]) if isinstance(v, tuple) else v for k, v in q.items()}
    meta = {k: (v[0], v[3]) for k, v in q.items() if isinstance(v, tuple)}

    def eval_q(arrays, x, y, meta=meta):
      p = {k: dequantize((meta[k][0], *v, meta[k][1])) if k in meta else v
           for k, v in arrays.items()}
      return evaluate(p, x, y)[0]
    accs[kind] = float(jax.jit(eval_q)(arrays, x_te, y_te_dev))

  # AOT: lower and compile the train step, write its texts
  lowered = train_step.lower(params, opt_state, *shard(next(it)), noise_key, 0)
  compiled = lowered.compile()
  cost = compiled.cost_analysis() or {}
  texts = {"train_step.stablehlo.mlir": lowered.as_text(),
           "train_step.optimized.hlo": compiled.as_text(),
           "train_step.dot": lowered.compiler_ir("hlo").as_hlo_dot_graph()}
  for fname, text in texts.items():
    with open(os.path.join(args.out, fname), "w") as f:
      f.write(text)
  print(f"digits_jax: loss {loss:.4f}, test accuracy {test_acc:.4f}, int8 {accs['int8']:.4f}, "
        f"nf4 {accs['nf4']:.4f}, train step FLOPs {float(cost.get('flops', 0)):,.0f}")
  return dict(loss=loss, test_acc=test_acc, int8_acc=accs["int8"], nf4_acc=accs["nf4"])


def digits_stagecraft_train(argv) -> dict:
  """The README example's set-up and training loop (`stagecraft.examples.digits.train`),
  without its evaluation, per-example, quantization and AOT parts. Returns {"loss"}: the
  trained model's loss on the first 256 training examples."""
  import contextlib
  import io

  import stagecraft
  from stagecraft import random
  from stagecraft.examples import digits as d
  args = d.parse_args(argv)
  cache_dir = os.path.join(args.out, "compilation_cache")
  stagecraft.config.update("compilation_cache_dir", cache_dir)
  stagecraft.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)   # as JAX's run
  (x_tr, y_tr), (x_te, y_te) = d.load(args.seed)
  x_tr, x_te = d.standardize(x_tr, x_te)
  init_key, noise_key = random.split(random.PRNGKey(args.seed))
  with contextlib.redirect_stdout(io.StringIO()):
    params = d.train(args, np.asarray(x_tr), y_tr, d.init_params(init_key), noise_key,
                     cache_dir)[0]
  return dict(loss=float(d.loss_fn(params, x_tr[:256], stagecraft.device_put(y_tr[:256]))))


# ---------------------------------------------------------------------------
# The child processes.


def child_main(spec: dict) -> dict:
  """Runs in a fresh process: `spec["kind"]` is "suite" (import `spec["lib"]`, run
  `spec["workloads"]` for `spec["steps"]` steps each, then `leak_check` with `spec["calls"]`
  calls when > 0; "during": each workload's peak) or "digits" (the README example under
  stagecraft, or `digits_jax`, with `spec["argv"]`; with `spec["train_only"]` their set-up
  and training loop only). Returns what it measured (MiB), including the peak RSS "peak",
  and whether jax got imported."""
  out = {}
  if spec["kind"] == "suite":
    lib = _import(spec["lib"])
    lib.block_until_ready(lib.numpy.ones(3))
    out["rss_import"] = proc_status_mib("VmRSS")
    peak, out["during"] = proc_status_mib("VmHWM"), {}
    t = time.perf_counter()
    for name in spec["workloads"]:
      gc.collect()
      reset = reset_peak_rss()
      WORKLOAD_FNS[name](lib, spec["steps"])
      hwm = proc_status_mib("VmHWM")
      peak = max(peak, hwm)
      if reset:
        out["during"][name] = hwm
    out["workload_s"] = time.perf_counter() - t
    out["peak"] = max(peak, proc_status_mib("VmHWM"))   # before the leak check
    if spec.get("calls"):
      out["leak"] = leak_check(lib, spec["calls"], max(1000, spec["calls"] // 5))
  elif spec.get("train_only"):
    if spec["lib"] == "stagecraft":
      out["result"] = digits_stagecraft_train(spec["argv"])
    else:
      out["result"] = digits_jax(spec["argv"], train_only=True)
    out["peak"] = proc_status_mib("VmHWM")
  else:
    if spec["lib"] == "stagecraft":
      import runpy
      sys.argv = ["stagecraft.examples.digits", *spec["argv"]]
      try:
        runpy.run_module("stagecraft.examples.digits", run_name="__main__", alter_sys=True)
      except SystemExit as e:
        if e.code not in (0, None):
          raise
    else:
      out["result"] = digits_jax(spec["argv"])
    out["peak"] = proc_status_mib("VmHWM")
  out["jax_imported"] = "jax" in sys.modules
  return out


def _child_env() -> dict:
  from benchmarks import run
  return run._cold_env()


def _spawn(spec: dict) -> subprocess.Popen:
  return subprocess.Popen([sys.executable, "-m", "benchmarks.memory", "--child",
                           json.dumps(spec)], cwd=_ROOT, env=_child_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _collect(proc: subprocess.Popen, timeout: float = 600) -> dict:
  out, err = proc.communicate(timeout=timeout)
  if proc.returncode != 0:
    raise RuntimeError(f"memory child {proc.args[-1]} exited with {proc.returncode}: "
                       f"{err.strip().splitlines()[-5:]}")
  for line in reversed(out.splitlines()):
    if line.startswith(_MARK):
      return json.loads(line[len(_MARK):])
  raise RuntimeError(f"memory child {proc.args[-1]} printed no result: {out[-500:]!r}")


def run_children(specs: list[dict], parallel: bool) -> list[dict]:
  """Runs one child per spec (all at once when `parallel`, else one after another, in order)
  and returns their results."""
  if parallel:
    procs = [_spawn(s) for s in specs]
    try:
      return [_collect(p) for p in procs]
    finally:
      for p in procs:
        if p.poll() is None:
          p.kill()
          p.wait()
  return [_collect(_spawn(s)) for s in specs]


def config(quick: bool) -> dict:
  """What a run measures: (a)'s workloads, steps and repeats, (b)'s example (the whole
  example, or with `--quick` its set-up and training loop for 5 steps) and repeats, (c)'s
  calls."""
  if quick:
    return dict(workloads=["mlp_sgd"], steps=2, reps=1,
                digits_train_only=True, digits_argv=["--steps", "5"], digits_reps=1,
                calls=2_000)
  return dict(workloads=list(WORKLOADS), steps=20, reps=3,
              digits_train_only=False, digits_argv=[], digits_reps=2, calls=10_000)


def measure(quick: bool) -> dict:
  """Runs the children of (a), (b) and (c): the two libraries' children side by side (peak
  RSS is what a process maps, not how fast it runs; both see the same load), the order of
  the pair alternating. Returns {"config", "suite": {lib: [child results]}, "digits": {lib:
  [child results]}} (see `child_main`)."""
  cfg = config(quick)
  suite = {lib: [] for lib in LIBS}
  digits = {lib: [] for lib in LIBS}
  tmp = tempfile.mkdtemp(prefix="sc_memory_")

  def pair(make, i):
    order = LIBS if i % 2 == 0 else LIBS[::-1]
    return dict(zip(order, run_children([make(lib) for lib in order], parallel=True)))

  def suite_spec(workloads, calls):
    return lambda lib: dict(kind="suite", lib=lib, workloads=workloads, steps=cfg["steps"],
                            calls=calls)

  def digits_spec(i):
    return lambda lib: dict(kind="digits", lib=lib, train_only=cfg["digits_train_only"],
                            argv=["--out", os.path.join(tmp, f"{lib}{i}"),
                                  *cfg["digits_argv"]])
  try:
    if quick:   # all four children at once
      res = run_children([suite_spec(cfg["workloads"], cfg["calls"])(lib) for lib in LIBS]
                         + [digits_spec(0)(lib) for lib in LIBS], parallel=True)
      for k, lib in enumerate(LIBS):
        suite[lib].append(res[k])
        digits[lib].append(res[2 + k])
    else:
      for i in range(cfg["reps"]):
        for lib, r in pair(suite_spec(cfg["workloads"], cfg["calls"] if i == 0 else 0),
                           i).items():
          suite[lib].append(r)
      for i in range(cfg["digits_reps"]):
        for lib, r in pair(digits_spec(i), i).items():
          digits[lib].append(r)
    return dict(config=cfg, suite=suite, digits=digits)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)


def rows(quick: bool) -> list[dict]:
  """The section's rows in benchmarks.run's format (see `run._row`)."""
  from benchmarks.run import _row
  m = measure(quick)
  cfg = m["config"]
  out = []

  def jax_note(runs):
    return ("; NB: stagecraft's process imported jax (+~40 MiB)"
            if any(r["jax_imported"] for r in runs) else "")
  s_runs = m["suite"]["stagecraft"]
  peak = {lib: [r["peak"] for r in m["suite"][lib]] for lib in LIBS}
  imp = {lib: statistics.median(r["rss_import"] for r in m["suite"][lib]) for lib in LIBS}
  what = ("the 4 workloads below" if len(cfg["workloads"]) == len(WORKLOADS)
          else ", ".join(WORKLOAD_NAMES[w] for w in cfg["workloads"]))
  what += " as timed in this suite"
  out.append(_row(
      "peak RSS: workloads, fresh process", statistics.median(peak["stagecraft"]),
      statistics.median(peak["jax"]), "MiB", 1.0,
      note=(f"import, then {what} ({cfg['steps']} steps); median of {len(s_runs)} "
            f"(max {max(peak['stagecraft']):.0f}/{max(peak['jax']):.0f} MiB); RSS after "
            f"import + ones(3): {imp['stagecraft']:.0f}/{imp['jax']:.0f} MiB"
            + jax_note(s_runs) + ("; peak RSS during a workload: in that process, after the "
                                  "workloads above it (the peak reset before each)"
                                  if len(cfg["workloads"]) > 1 else "") + " (issue 25)")))
  for w in cfg["workloads"]:
    during = {lib: [r["during"][w] for r in m["suite"][lib] if w in r["during"]]
              for lib in LIBS}
    if len(cfg["workloads"]) > 1 and all(during.values()):
      out.append(_row(f"  peak RSS during: {WORKLOAD_NAMES[w]}",
                      statistics.median(during["stagecraft"]),
                      statistics.median(during["jax"]), "MiB", 1.0))
  d_runs = m["digits"]
  dpk = {lib: [r["peak"] for r in d_runs[lib]] for lib in LIBS}
  res_s, res_j = d_runs["stagecraft"][0].get("result", {}), d_runs["jax"][0].get("result", {})
  if cfg["digits_train_only"]:
    name = "peak RSS: README example's train loop"
    note = (f"set-up and training loop of stagecraft.examples.digits "
            f"{' '.join(cfg['digits_argv'])} vs the same part of its JAX twin "
            f"(benchmarks.memory.digits_jax); trained loss {res_s.get('loss', 0):.4f}/"
            f"{res_j.get('loss', 0):.4f}")
  else:
    name = "peak RSS: README example (digits)"
    note = (f"python -m stagecraft.examples.digits vs its JAX twin "
            f"benchmarks.memory.digits_jax (JAX's test accuracy "
            f"{res_j.get('test_acc', float('nan')):.4f}); fresh output directories; median of "
            f"{len(dpk['jax'])}")
  out.append(_row(name, statistics.median(dpk["stagecraft"]), statistics.median(dpk["jax"]),
                  "MiB", 1.0, note=note + jax_note(d_runs["stagecraft"]) + " (issue 25)"))
  leak = {lib: m["suite"][lib][0]["leak"] for lib in LIBS}
  flat_mib = FLAT_MIB * cfg["calls"] / 10_000
  for case in LEAK_CASES:
    growth, notes, flat = {}, [], {}
    for lib in LIBS:
      (l0, l1), (r0, r1) = leak[lib][case]["live"], leak[lib][case]["rss"]
      growth[lib] = max((r1 - r0) * 1024, 4.0)
      flat[lib] = l1 == l0 and r1 - r0 <= flat_mib
      notes.append(f"{lib} {r1 - r0:+.2f} MiB, live arrays {l0} -> {l1}")
    row = _row(f"  RSS growth, {cfg['calls'] // 1000}k x {LEAK_NAMES[case]}",
               growth["stagecraft"], growth["jax"], "KiB", None,
               note="; ".join(notes) + f"; met = flat: live arrays unchanged, growth <= "
                    f"{flat_mib:g} MiB (issue 25)")
    row["met"] = flat["stagecraft"]
    out.append(row)
  return out


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true", help="few steps, one repeat (a smoke run)")
  ap.add_argument("--json", help="write the results to this file")
  ap.add_argument("--child", help=argparse.SUPPRESS)
  args = ap.parse_args(argv)
  if args.child:
    res = child_main(json.loads(args.child))
    sys.stdout.flush()
    print(_MARK + json.dumps(res), flush=True)
    return res
  from benchmarks import run
  t = time.perf_counter()
  result = rows(args.quick)
  run.print_table(result, run.machine_info(), dict(
      peak_rss_mib=proc_status_mib("VmHWM"), roofline_gflops=run.roofline_gflops(True),
      wall_s=time.perf_counter() - t, quick=args.quick))
  if args.json:
    with open(args.json, "w") as f:
      json.dump(result, f, indent=1)
  return result


if __name__ == "__main__":
  main()
