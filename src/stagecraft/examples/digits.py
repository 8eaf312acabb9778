"""Trains and evaluates an MLP on scikit-learn's digits with stagecraft end to end.

The data: scikit-learn's `load_digits()` (1,797 real 8x8 grey-level images of handwritten
digits, shipped inside scikit-learn; nothing is downloaded), standardized and split 80/20
with a fixed seed. Everything numerical runs in stagecraft:

1. a 64-256-256-10 MLP with gelu, trained with `value_and_grad` and Adam (`stagecraft.optim`),
   data-parallel over 4 CPU devices: one `jit(pmap(step))` whose gradients are averaged with
   `lax.pmean` (the example sets `XLA_FLAGS=--xla_force_host_platform_device_count=4` itself
   when the user has not chosen a device count), with a tqdm progress bar;
2. test accuracy and a confusion matrix printed as text;
3. per-example gradient norms with `vmap(grad)` on one batch (and how much faster that is than
   a Python loop of `grad`), and with `--dp` differentially private SGD: every example's
   gradient clipped to `--clip`, Gaussian noise of std `--noise * --clip` added to their sum;
4. the trained weights quantized to NF4 and int8 as implicit arrays, evaluated under
   `implicit` and `jit`, with the bytes of each format and the accuracy change;
5. AOT: the train step's FLOPs from `cost_analysis()`; its StableHLO, optimized HLO and HLO dot
   graph written to `--out` (default ./digits_out), and a persistent compilation cache in
   `--out/compilation_cache`, so a second run compiles faster (both compile times printed).

Run: python -m stagecraft.examples.digits [--steps N] [--batch B] [--lr LR] [--dp] [--clip C]
       [--noise S] [--out DIR] [--devices N] [--seed S]
Bad arguments print a message to stderr and exit with status 2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

_DEVICE_FLAG = "--xla_force_host_platform_device_count"
_DEFAULT_DEVICES = 4


def _ensure_host_devices(n: int = _DEFAULT_DEVICES) -> None:
  """Asks XLA for `n` CPU devices unless the user's XLA_FLAGS already chose a count. Must run
  before stagecraft starts its runtime client (which it does lazily, on first device use)."""
  flags = os.environ.get("XLA_FLAGS", "")
  if _DEVICE_FLAG not in flags:
    os.environ["XLA_FLAGS"] = f"{flags} {_DEVICE_FLAG}={n}".strip()


_ensure_host_devices()

import numpy as np  # noqa: E402

import stagecraft  # noqa: E402
import stagecraft.numpy as jnp  # noqa: E402
from stagecraft import lax, optim, random  # noqa: E402
from stagecraft.implicit import implicit  # noqa: E402
from stagecraft.implicit.quantization import Array8bit, ArrayNF4  # noqa: E402
from stagecraft.runtime import cache  # noqa: E402

AXIS = "batch"
SIZES = (64, 256, 256, 10)
DEFAULT_STEPS = 300
DEFAULT_BATCH = 128


# ---------------------------------------------------------------------------
# Arguments


def build_parser() -> argparse.ArgumentParser:
  ap = argparse.ArgumentParser(
      prog="python -m stagecraft.examples.digits",
      description="Train, evaluate, quantize and inspect an MLP on scikit-learn's digits with "
                  "stagecraft.")
  ap.add_argument("--steps", type=int, default=DEFAULT_STEPS,
                  help=f"training steps (default {DEFAULT_STEPS})")
  ap.add_argument("--batch", type=int, default=DEFAULT_BATCH,
                  help=f"global batch size, a multiple of --devices (default {DEFAULT_BATCH})")
  ap.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate (default 3e-3)")
  ap.add_argument("--dp", action="store_true",
                  help="train with DP-SGD: per-example clipping and Gaussian noise")
  ap.add_argument("--clip", type=float, default=1.0,
                  help="DP-SGD: L2 bound of each example's gradient (default 1.0)")
  ap.add_argument("--noise", type=float, default=0.5,
                  help="DP-SGD: noise multiplier; noise std is noise * clip (default 0.5)")
  ap.add_argument("--out", default="digits_out",
                  help="directory for the AOT files and the compilation cache "
                       "(default ./digits_out)")
  ap.add_argument("--devices", type=int, default=None,
                  help=f"devices to train on (default: min({_DEFAULT_DEVICES}, available))")
  ap.add_argument("--seed", type=int, default=0, help="seed of the split, init and batches")
  return ap


def parse_args(argv: list[str] | None) -> argparse.Namespace:
  """Parses and checks the command line; on a bad argument prints why to stderr and exits
  with status 2 (argparse's `error`)."""
  ap = build_parser()
  args = ap.parse_args(argv)
  if args.steps < 1:
    ap.error(f"--steps must be a positive int, got {args.steps}; pass e.g. --steps "
             f"{DEFAULT_STEPS}")
  if args.batch < 1:
    ap.error(f"--batch must be a positive int, got {args.batch}")
  if not args.lr > 0:
    ap.error(f"--lr must be positive, got {args.lr}")
  if not args.clip > 0:
    ap.error(f"--clip must be positive, got {args.clip}")
  if not args.noise >= 0:
    ap.error(f"--noise must be >= 0, got {args.noise}")
  available = len(stagecraft.devices())
  if args.devices is None:
    args.devices = min(_DEFAULT_DEVICES, available)
  if args.devices < 1:
    ap.error(f"--devices must be a positive int, got {args.devices}")
  if args.devices > available:
    ap.error(f"--devices {args.devices} is more than the {available} available device(s); "
             f"pass --devices {available} or fewer (the CPU device count comes from XLA_FLAGS="
             f"{_DEVICE_FLAG}=N, read when stagecraft starts)")
  if args.batch % args.devices:
    ap.error(f"--batch {args.batch} is not a multiple of --devices {args.devices} (each "
             f"device takes batch/devices examples); pass e.g. --batch "
             f"{max(1, args.batch // args.devices) * args.devices}")
  try:
    os.makedirs(args.out, exist_ok=True)
    probe = os.path.join(args.out, ".write_probe")
    with open(probe, "w") as f:
      f.write("ok")
    os.remove(probe)
  except OSError as e:
    ap.error(f"--out {args.out!r} is not a writable directory ({e.strerror or e}); pass a "
             f"directory you can create and write to")
  return args


# ---------------------------------------------------------------------------
# Data and model


def load(seed: int):
  """The digits as `(x_train f32[n, 64], y_train i32[n]), (x_test, y_test)`, an 80/20 split
  of a seeded permutation."""
  from sklearn.datasets import load_digits
  data = load_digits()
  x, y = data.data.astype(np.float32), data.target.astype(np.int32)
  perm = np.random.default_rng(seed).permutation(len(x))
  x, y = x[perm], y[perm]
  n_train = int(0.8 * len(x))
  return (x[:n_train], y[:n_train]), (x[n_train:], y[n_train:])


@stagecraft.jit
def standardize(x_train, x_test):
  """Both sets standardized with the training set's per-pixel mean and std."""
  mean = x_train.mean(axis=0)
  std = x_train.std(axis=0) + 1e-3
  return (x_train - mean) / std, (x_test - mean) / std


def init_params(key) -> dict[str, Any]:
  """He-normal weights `w{i}: f32[n_in, n_out]` and zero biases `b{i}: f32[n_out]`."""
  params = {}
  keys = random.split(key, len(SIZES) - 1)
  for i, (n_in, n_out) in enumerate(zip(SIZES[:-1], SIZES[1:])):
    params[f"w{i + 1}"] = random.normal(keys[i], (n_in, n_out)) * np.float32(np.sqrt(2 / n_in))
    params[f"b{i + 1}"] = jnp.zeros(n_out)
  return params


def predict(params, x):
  """Logits `f32[n, 10]` of the MLP for `x: f32[n, 64]`."""
  h = x
  n = len(SIZES) - 1
  for i in range(1, n + 1):
    h = h @ params[f"w{i}"] + params[f"b{i}"]
    if i < n:
      h = stagecraft.nn.gelu(h)
  return h


def loss_fn(params, x, y):
  """Mean softmax cross-entropy of the logits against the labels `y: i32[n]`."""
  logp = stagecraft.nn.log_softmax(predict(params, x))
  return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))


def example_loss(params, x, y):
  """The loss of one example `x: f32[64]`, `y: i32[]`."""
  return loss_fn(params, x[None], y[None])


def per_example_grads(params, x, y):
  """`(losses f32[n], grads)`: each example's loss and gradient, every grad leaf with a
  leading axis of size n (one `vmap` of `value_and_grad`)."""
  return stagecraft.vmap(stagecraft.value_and_grad(example_loss),
                         in_axes=(None, 0, 0))(params, x, y)


def per_example_norms(grads):
  """`f32[n]`: the L2 norm of each example's whole gradient."""
  leaves = stagecraft.tree_util.tree_leaves(grads)
  sq = sum(jnp.sum(jnp.reshape(g * g, (g.shape[0], -1)), axis=1) for g in leaves)
  return jnp.sqrt(sq)


def make_train_step(opt, *, dp: bool, clip: float, noise: float, global_batch: int):
  """The data-parallel train step `step(params, opt_state, x, y, key, i) -> (params,
  opt_state, loss)`: `x: f32[devices, batch/devices, 64]`, `y: i32[devices, batch/devices]`
  split over the devices, everything else replicated; `key`/`i` seed the DP noise of step i.
  """
  def step(params, opt_state, x, y, key, i):
    if dp:
      losses, grads = per_example_grads(params, x, y)
      norms = per_example_norms(grads)
      factor = jnp.minimum(1.0, clip / (norms + 1e-12))
      clipped = stagecraft.tree_util.tree_map(
          lambda g: jnp.tensordot(factor, g, axes=1), grads)
      summed = lax.psum(clipped, AXIS)   # the same on every device
      leaves, tree = stagecraft.tree_util.tree_flatten(summed)
      keys = random.split(random.fold_in(key, i), len(leaves))   # replicated: same noise
      noised = [g + (noise * clip) * random.normal(k, g.shape) for g, k in zip(leaves, keys)]
      grads = stagecraft.tree_util.tree_unflatten(tree, [g / global_batch for g in noised])
      loss = jnp.mean(losses)
    else:
      loss, grads = stagecraft.value_and_grad(loss_fn)(params, x, y)
      grads = lax.pmean(grads, AXIS)
    loss = lax.pmean(loss, AXIS)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optim.apply_updates(params, updates), opt_state, loss

  return stagecraft.jit(stagecraft.pmap(step, AXIS, in_axes=(None, None, 0, 0, None, None),
                                        out_axes=(None, None, None)))


@stagecraft.jit
def evaluate(params, x, y):
  """`(accuracy f32[], confusion i32[10, 10])`; confusion[t, p] counts label t predicted p."""
  pred = jnp.argmax(predict(params, x), axis=1)
  acc = jnp.mean((pred == y).astype(jnp.float32))
  confusion = stagecraft.nn.one_hot(y, 10, dtype=jnp.int32).T @ stagecraft.nn.one_hot(
      pred, 10, dtype=jnp.int32)
  return acc, confusion


# ---------------------------------------------------------------------------
# Reports


def _fmt_bytes(n: int) -> str:
  return f"{n:>9,d} B ({n / 1024:7.1f} KiB)"


def print_confusion(confusion: np.ndarray) -> None:
  print("confusion matrix (rows: true digit, columns: predicted digit)")
  print("      " + " ".join(f"{j:>4d}" for j in range(10)))
  for i, row in enumerate(confusion):
    print(f"  {i:>2d}  " + " ".join(f"{v:>4d}" if v else "   ." for v in row))


def _batches(rng: np.random.Generator, n: int, batch: int):
  """Endless index batches: a fresh permutation each epoch, the tail dropped."""
  while True:
    perm = rng.permutation(n)
    for s in range(0, n - batch + 1, batch):
      yield perm[s:s + batch]


def _progress(total: int):
  try:
    from tqdm import tqdm
  except ImportError:   # the progress bar is optional
    return None
  return tqdm(total=total, desc="train", unit="step", file=sys.stderr, mininterval=0.5,
              dynamic_ncols=True, leave=False)


def _best_time(fn, repeats: int = 3) -> float:
  """The fastest of `repeats` timed calls of `fn()`, in seconds."""
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    fn()
    best = min(best, time.perf_counter() - t0)
  return best


def _compile_history(out: str, config: str, seconds: float) -> float | None:
  """Records this run's compile time under `config` in `out/compile_times.json` and returns
  the previous run's time for the same config (None when there is none)."""
  path = os.path.join(out, "compile_times.json")
  history: dict = {}
  try:
    with open(path) as f:
      history = json.load(f)
  except (OSError, ValueError):
    pass
  if not isinstance(history, dict):
    history = {}
  prev = history.get(config)
  history[config] = round(seconds, 4)
  with open(path, "w") as f:
    json.dump(history, f, indent=1)
  return prev if isinstance(prev, (int, float)) else None


def train(args, x_tr_host: np.ndarray, y_tr: np.ndarray, params, noise_key, cache_dir: str):
  """Runs `args.steps` data-parallel Adam steps on seeded shuffled batches.

  Returns:
    `(params, opt_state, train_step, shard, next_batch, compile_s, train_s)`: the trained
    parameters and Adam state, the jitted step, `shard(idx) -> (x f32[devices, batch/devices, 64], y i32[...])`, a function
    giving the next batch's indices, the first call's seconds and the other steps' seconds.
  """
  opt = optim.adam(args.lr)
  opt_state = opt.init(params)
  train_step = make_train_step(opt, dp=args.dp, clip=args.clip, noise=args.noise,
                               global_batch=args.batch)
  per_dev = args.batch // args.devices

  def shard(idx):
    return (x_tr_host[idx].reshape(args.devices, per_dev, -1),
            y_tr[idx].reshape(args.devices, per_dev))

  batches = _batches(np.random.default_rng(args.seed), len(y_tr), args.batch)
  hits0, misses0 = cache.stats["hits"], cache.stats["misses"]
  xb, yb = shard(next(batches))
  t0 = time.perf_counter()
  params, opt_state, loss = train_step(params, opt_state, xb, yb, noise_key, 0)
  first_loss = float(loss)
  compile_s = time.perf_counter() - t0
  hits, misses = cache.stats["hits"] - hits0, cache.stats["misses"] - misses0
  config = f"batch={args.batch} devices={args.devices} dp={args.dp}"
  prev = _compile_history(args.out, config, compile_s)
  print(f"compile time (first train-step call: trace, lower, compile, run): {compile_s:.2f} s"
        + (f"; previous run: {prev:.2f} s" if prev is not None else "")
        + f"  [persistent cache {cache_dir}: {hits} hit(s), {misses} miss(es)]")

  sys.stdout.flush()   # before the progress bar writes to stderr
  bar = _progress(args.steps)
  t0 = time.perf_counter()
  for step in range(1, args.steps):
    xb, yb = shard(next(batches))
    params, opt_state, loss = train_step(params, opt_state, xb, yb, noise_key, step)
    if bar is not None:
      bar.update(1)
      if step % 25 == 0 or step == args.steps - 1:   # NB: float() waits for the step
        rate = step / (time.perf_counter() - t0)
        bar.set_postfix(loss=f"{float(loss):.4f}", steps_s=f"{rate:.0f}")
  loss = float(loss)
  train_s = time.perf_counter() - t0
  if bar is not None:
    bar.close()
  rate = f"{(args.steps - 1) / train_s:.0f}" if args.steps > 1 else "-"
  print(f"trained {args.steps} steps in {compile_s + train_s:.2f} s ({rate} steps/s after "
        f"the first); loss {first_loss:.4f} -> {loss:.4f}")
  return params, opt_state, train_step, shard, lambda: next(batches), compile_s, train_s


def report_per_example(args, params, init, x_host: np.ndarray, y_host: np.ndarray) -> None:
  """Per-example gradient norms with `vmap(grad)` at init and trained, checked against and
  timed beside a Python loop of `jit(grad)` over the same examples."""
  bsz = len(y_host)
  xb, yb = stagecraft.device_put(x_host), stagecraft.device_put(y_host)
  pe_norms = stagecraft.jit(lambda p, x, y: per_example_norms(per_example_grads(p, x, y)[1]))
  init_norms = np.asarray(pe_norms(init, xb, yb))
  norms = np.asarray(pe_norms(params, xb, yb))
  vmap_s = _best_time(lambda: pe_norms(params, xb, yb).block_until_ready())
  one_grad = stagecraft.jit(lambda p, x, y: per_example_norms(
      stagecraft.tree_util.tree_map(lambda g: g[None],
                                    stagecraft.grad(example_loss)(p, x, y))))
  loop = np.concatenate([np.asarray(one_grad(params, x_host[i], y_host[i]))
                         for i in range(bsz)])
  loop_s = _best_time(lambda: stagecraft.block_until_ready(
      [one_grad(params, x_host[i], y_host[i]) for i in range(bsz)]))
  # GPUs multiply float32 matrices in TF32 by default (~1e-3 relative error per product).
  rtol = 1e-3 if stagecraft.default_backend() == "cpu" else 2e-2
  if not np.allclose(loop, norms, rtol=rtol, atol=1e-6):
    raise AssertionError("per-example gradient norms of vmap(grad) and of a loop of grad differ: "
                         f"{norms[:4]} vs {loop[:4]}")
  for when, v in (("at init", init_norms), ("trained", norms)):
    print(f"per-example gradient norms ({when}, vmap(grad) on one batch of {bsz}): "
          f"min {v.min():.4f}, median {np.median(v):.4f}, max {v.max():.4f}; "
          f"{np.mean(v > args.clip):.0%} above --clip {args.clip}")
  print(f"  vmap(grad): {vmap_s * 1e3:.1f} ms for all {bsz} in one program; a Python loop of "
        f"jit(grad), one dispatch per example: {loop_s * 1e3:.1f} ms ({loop_s / vmap_s:.1f}x); "
        f"with vmap the --dp step clips every example inside one compiled step")


def report_quantized(params, x_te, y_te, test_acc: float) -> None:
  """Quantizes the weight matrices to int8 and NF4 (implicit arrays), evaluates each under
  `jit(implicit(...))` and prints its bytes and accuracy change against float32."""
  eval_q = stagecraft.jit(implicit(lambda p, x, y: evaluate(p, x, y)[0]))
  f32_bytes = sum(int(np.prod(v.shape)) * 4 for v in params.values())
  print("quantized weights (blockwise, block 64; biases stay float32), evaluated with "
        "jit(implicit(evaluate)):")
  print(f"  float32  weights {_fmt_bytes(f32_bytes)}  1.000x  test accuracy {test_acc:.4f}")
  for name, cls in (("int8", Array8bit), ("nf4", ArrayNF4)):
    q = {k: (cls.quantize(v, block_size=64) if v.ndim == 2 else v) for k, v in params.items()}
    nbytes = sum(v.nbytes if isinstance(v, cls) else int(np.prod(v.shape)) * 4
                 for v in q.values())
    acc = float(eval_q(q, x_te, y_te))
    print(f"  {name:<7s}  weights {_fmt_bytes(nbytes)}  {nbytes / f32_bytes:.3f}x  "
          f"{name} test accuracy {acc:.4f} ({(acc - test_acc) * 100:+.2f} points)")


def write_aot(args, train_step, step_args: tuple, train_s: float, cache_dir: str) -> None:
  """Lowers and compiles the train step for `step_args`, prints its FLOPs and writes its
  StableHLO, optimized HLO and HLO dot graph to `args.out`."""
  lowered = train_step.lower(*step_args)
  compiled = lowered.compile()
  cost = compiled.cost_analysis() or lowered.cost_analysis() or {}
  flops = float(cost.get("flops", float("nan")))
  files = {
      "train_step.stablehlo.mlir": lowered.as_text(),
      "train_step.optimized.hlo": compiled.as_text(),
      "train_step.dot": lowered.compiler_ir("hlo").as_hlo_dot_graph(),
  }
  for fname, text in files.items():
    with open(os.path.join(args.out, fname), "w") as f:
      f.write(text)
  rate = ""
  if args.steps > 1:
    gflops = flops * args.devices * (args.steps - 1) / train_s / 1e9
    rate = f" ({gflops:.2f} GFLOP/s over the training loop on {args.devices} devices)"
  print(f"train step FLOPs (cost_analysis, per device): {flops:,.0f}{rate}")
  print(f"wrote {', '.join(os.path.join(args.out, n) for n in files)}; compilation cache in "
        f"{cache_dir}")


def main(argv: list[str] | None = None) -> int:
  """Runs the example; returns the exit status (argument errors exit with 2 via argparse)."""
  t_start = time.perf_counter()
  args = parse_args(argv)
  cache_dir = os.path.join(args.out, "compilation_cache")
  stagecraft.config.update("compilation_cache_dir", cache_dir)
  # NB: every program here compiles in well under JAX's default threshold of 1 s.
  stagecraft.config.update("jax_persistent_cache_min_compile_time_secs", 0)

  (x_tr, y_tr), (x_te, y_te) = load(args.seed)
  x_tr, x_te = standardize(x_tr, x_te)
  x_tr_host = np.asarray(x_tr)
  y_te_dev = stagecraft.device_put(y_te)
  platform = stagecraft.devices()[0].platform.upper()
  print(f"digits: {len(y_tr)} train / {len(y_te)} test images (8x8), MLP "
        f"{'-'.join(map(str, SIZES))} with gelu, Adam lr {args.lr}, batch {args.batch} over "
        f"{args.devices} {platform} devices ({args.batch // args.devices} each)"
        + (f", DP-SGD (clip {args.clip}, noise multiplier {args.noise})" if args.dp else ""))

  init_key, noise_key = random.split(random.PRNGKey(args.seed))
  init = init_params(init_key)
  params, opt_state, train_step, shard, next_batch, compile_s, train_s = train(
      args, x_tr_host, y_tr, init, noise_key, cache_dir)

  train_acc, _ = evaluate(params, x_tr, stagecraft.device_put(y_tr))
  test_acc, confusion = evaluate(params, x_te, y_te_dev)
  test_acc = float(test_acc)
  print(f"train accuracy {float(train_acc):.4f}")
  print(f"test accuracy {test_acc:.4f}")
  print_confusion(np.asarray(confusion))

  per_dev = args.batch // args.devices   # what one device of the --dp step vmaps over
  report_per_example(args, params, init, x_tr_host[:per_dev], y_tr[:per_dev])
  report_quantized(params, x_te, y_te_dev, test_acc)
  write_aot(args, train_step, (params, opt_state, *shard(next_batch()), noise_key, 0), train_s,
            cache_dir)
  print(f"total {time.perf_counter() - t_start:.1f} s")
  return 0


if __name__ == "__main__":
  sys.exit(main())
