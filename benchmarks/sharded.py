"""Sharded-jit benchmarks against JAX's jit with the same shardings, same process, on a 2x2
mesh ("data", "model") of 4 CPU devices.

The model: a tanh MLP 512-1024-1024-10 with a softmax cross-entropy loss, batch 256, float32.
Its train step `(params, x, y) -> (new_params, loss)` (value_and_grad, then SGD) is jitted by
both libraries with identical in_shardings/out_shardings: hidden weights split Megatron-style
over "model" (W1 P(None, "model"), b1 P("model"), W2 P("model", None)), the rest replicated;
the batch x, y split over "data"; the loss replicated.

1. Steady-state step time: the parameters are fed back each step, the inputs are already
   placed (`device_put(x, sharding)`), and each timed batch of steps blocks on its last loss.
   Target <= 1.05. Batches are short (a few steps): JAX's CPU runtime can deadlock in a
   collective's rendezvous when very many SPMD programs are in flight (about 100 small steps
   here); stagecraft itself awaits each collective program before launching the next.
2. trace+lower: `jit(step, in_shardings=..., out_shardings=...).lower(*args).as_text()` on a
   fresh jitted function each repeat (so no cache answers). Target <= 1.

3. The same step in explicit-sharding mode (sharding in types, issue 24): a 2x2 mesh whose
   axes are Explicit, the arguments placed as above and `jit(step)` with no shardings: the
   types of the arguments give the layout, and the one contraction over the split hidden
   dimension names its result's type (`matmul(h, W2, out_sharding=P("data", None))`, as
   JAX asks). Its step time and trace+lower time (`jit(step).lower(*args).as_text()`, a
   fresh function each repeat) under `set_mesh`. Targets <= 1.05 and <= 1.

Both sides run alternately (ABBA) and the report gives medians and stagecraft / JAX. The
losses and the updated parameters of both are checked to agree before anything is timed; the
collectives in both optimized programs are counted (printed by `main`).

Run: python -m benchmarks.sharded [--quick] [--json PATH]
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import numpy as np  # noqa: E402

from benchmarks.common import report  # noqa: E402

NDEV = 4
SIZES = (512, 1024, 1024, 10)
BATCH = 256
LR = 0.1
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all",
               "collective-permute")


def _init(seed: int = 0):
  """Host (NumPy) float32 data: params [(W (m, n), b (n,))] per layer, x (BATCH, 512) and
  one-hot labels y (BATCH, 10)."""
  rng = np.random.default_rng(seed)
  params = [(rng.standard_normal((m, n)).astype(np.float32) / np.sqrt(m),
             np.zeros(n, np.float32)) for m, n in zip(SIZES[:-1], SIZES[1:])]
  x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
  y = np.eye(SIZES[-1], dtype=np.float32)[rng.integers(0, SIZES[-1], BATCH)]
  return params, x, y


def make_step(mod, value_and_grad, tree_map):
  """The train step written against a numpy module (stagecraft's or JAX's): returns
  `step(params, x, y) -> (new_params, loss)`."""
  def loss(params, x, y):
    h = x
    for i, (w, b) in enumerate(params):
      h = h @ w + b
      if i < len(params) - 1:
        h = mod.tanh(h)
    logp = h - mod.log(mod.sum(mod.exp(h), axis=-1, keepdims=True))
    return -mod.mean(mod.sum(logp * y, axis=-1))

  def step(params, x, y):
    val, g = value_and_grad(loss)(params, x, y)
    return tree_map(lambda p, gi: p - LR * gi, params, g), val
  return step


def make_explicit_step(mod, value_and_grad, tree_map, P):
  """The train step of `make_step` for explicit-sharding mode: the contraction over the
  hidden dimension split over "model" gives its result the type P("data", None)."""
  def loss(params, x, y):
    (w1, b1), (w2, b2), (w3, b3) = params
    h = mod.tanh(mod.matmul(x, w1) + b1)
    h = mod.tanh(mod.matmul(h, w2, out_sharding=P("data", None)) + b2)
    h = mod.matmul(h, w3) + b3
    logp = h - mod.log(mod.sum(mod.exp(h), axis=-1, keepdims=True))
    return -mod.mean(mod.sum(logp * y, axis=-1))

  def step(params, x, y):
    val, g = value_and_grad(loss)(params, x, y)
    return tree_map(lambda p, gi: p - LR * gi, params, g), val
  return step


def _shardings(mesh, named, P):
  """(in_shardings, out_shardings) of the step over `mesh`, built from one library's
  NamedSharding and PartitionSpec."""
  ns = lambda *spec: named(mesh, P(*spec))  # noqa: E731
  params = [(ns(None, "model"), ns("model")), (ns("model", None), ns()), (ns(), ns())]
  return (params, ns("data"), ns("data")), (params, ns())


def _spec(sharding) -> tuple:
  spec = list(sharding.spec)
  while spec and spec[-1] is None:
    spec.pop()
  return tuple(spec)


def collective_counts(hlo_text: str) -> dict:
  """How many of each collective op an optimized HLO module holds (async pairs count once)."""
  return {name: len(re.findall(rf"\s{name}(?:-start)?\(", hlo_text)) for name in COLLECTIVES}


def _time(fn):
  t = time.perf_counter()
  fn()
  return time.perf_counter() - t


def _abba(a, b, repeats: int) -> tuple[float, float]:
  """Median seconds of `a()` and of `b()` over `repeats` ABBA-ordered pairs, after one
  warm-up call of each."""
  a(), b()
  ts, tj = [], []
  for i in range(repeats):
    for fn in ((a, b) if i % 2 == 0 else (b, a)):
      (ts if fn is a else tj).append(_time(fn))
  return statistics.median(ts), statistics.median(tj)


def setup():
  """Both sides' jitted steps, placed inputs and shardings; checks that they agree.

  Returns a dict with, per side ("s" stagecraft, "j" JAX): `step`, `args` (params, x, y on
  the mesh), `in`/`out` shardings, `make` (a fresh unjitted step function) and `jit`.

  Raises:
    AssertionError: when the two losses or updated parameters differ (rtol 1e-4).
    RuntimeError: when the runtime has fewer than 4 devices.
  """
  import jax
  import jax.numpy as jjnp
  import stagecraft as sc
  import stagecraft.numpy as jnp
  from stagecraft.sharding import Mesh, NamedSharding, PartitionSpec
  if len(jax.devices()) < NDEV or len(sc.devices()) < NDEV:
    raise RuntimeError(f"needs {NDEV} devices, the runtime has {len(jax.devices())}")
  params, x, y = _init()
  s_mesh = Mesh(np.array(sc.devices()[:NDEV]).reshape(2, 2), ("data", "model"))
  j_mesh = jax.sharding.Mesh(np.array(jax.devices()[:NDEV]).reshape(2, 2), ("data", "model"))
  s_in, s_out = _shardings(s_mesh, NamedSharding, PartitionSpec)
  j_in, j_out = _shardings(j_mesh, jax.sharding.NamedSharding, jax.sharding.PartitionSpec)
  sides = {
      "s": dict(make=lambda: make_step(jnp, sc.value_and_grad, sc.tree_util.tree_map),
                jit=sc.jit, put=sc.device_put, block=sc.block_until_ready,
                **{"in": s_in, "out": s_out}),
      "j": dict(make=lambda: make_step(jjnp, jax.value_and_grad, jax.tree_util.tree_map),
                jit=jax.jit, put=jax.device_put, block=jax.block_until_ready,
                **{"in": j_in, "out": j_out}),
  }
  for side in sides.values():
    side["step"] = side["jit"](side["make"](), in_shardings=side["in"],
                               out_shardings=side["out"])
    side["args"] = tuple(side["put"](a, sh) for a, sh in zip((params, x, y), side["in"]))
  (ps, ls), (pj, lj) = (sides[k]["step"](*sides[k]["args"]) for k in "sj")
  np.testing.assert_allclose(float(ls), float(lj), rtol=1e-4, err_msg="losses differ")
  for (ws, bs), (wj, bj) in zip(ps, pj):
    np.testing.assert_allclose(np.asarray(ws), np.asarray(wj), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(bs), np.asarray(bj), rtol=1e-4, atol=1e-5)
  for (ws, _), (wj, _) in zip(ps, pj):   # out_shardings honoured (trailing Nones aside)
    assert _spec(ws.sharding) == _spec(wj.sharding), (ws.sharding, wj.sharding)
  return sides


def setup_explicit():
  """Both sides' jitted explicit-sharding steps on a 2x2 Explicit mesh, the arguments placed
  by the layout of `_shardings` (their types), checked to agree (losses, parameters and
  their types).

  Returns a dict per side ("s", "j") with `step`, `args`, `block`, `ctx` (a function giving
  the `set_mesh` context) and `make` (a fresh jitted, untraced step).

  Raises:
    AssertionError: when the losses, parameters or parameter types differ.
    RuntimeError: when the runtime has fewer than 4 devices.
  """
  import jax
  import jax.numpy as jjnp
  import stagecraft as sc
  import stagecraft.numpy as jnp
  from stagecraft.sharding import (AxisType, NamedSharding, PartitionSpec, make_mesh,
                                   set_mesh)
  if len(jax.devices()) < NDEV or len(sc.devices()) < NDEV:
    raise RuntimeError(f"needs {NDEV} devices, the runtime has {len(jax.devices())}")
  params, x, y = _init()
  s_mesh = make_mesh((2, 2), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
  j_mesh = jax.make_mesh((2, 2), ("data", "model"),
                         axis_types=(jax.sharding.AxisType.Explicit,) * 2)
  libs = {"s": (sc, jnp, s_mesh, set_mesh, NamedSharding, PartitionSpec),
          "j": (jax, jjnp, j_mesh, jax.set_mesh, jax.sharding.NamedSharding,
                jax.sharding.PartitionSpec)}
  sides = {}
  for k, (lib, mod, mesh, set_m, named, P) in libs.items():
    shs, _ = _shardings(mesh, named, P)
    side = dict(block=lib.block_until_ready, ctx=lambda set_m=set_m, mesh=mesh: set_m(mesh),
                make=lambda lib=lib, mod=mod, P=P: lib.jit(make_explicit_step(
                    mod, lib.value_and_grad, lib.tree_util.tree_map, P)))
    side["args"] = (
        [tuple(lib.device_put(a, sh) for a, sh in zip(layer, sl))
         for layer, sl in zip(params, shs[0])],
        lib.device_put(x, shs[1]), lib.device_put(y, shs[2]))
    side["step"] = side["make"]()
    side["typeof"] = lib.typeof
    sides[k] = side
  res = {}
  for k, side in sides.items():
    with side["ctx"]():
      res[k] = side["step"](*side["args"])
  (ps, ls), (pj, lj) = res["s"], res["j"]
  np.testing.assert_allclose(float(ls), float(lj), rtol=1e-4, err_msg="losses differ")
  for (ws, bs), (wj, bj) in zip(ps, pj):
    np.testing.assert_allclose(np.asarray(ws), np.asarray(wj), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(bs), np.asarray(bj), rtol=1e-4, atol=1e-5)
    for a, b in ((ws, wj), (bs, bj)):
      assert str(sides["s"]["typeof"](a)) == str(sides["j"]["typeof"](b)), (a, b)
  return sides


def _step_and_lower(sides, inner: int, repeats: int, lower_repeats: int, lower) -> dict:
  """Medians over `repeats` ABBA pairs of each side's step time (us, `inner` steps per
  timed batch, inside the side's "ctx" when it has one) and over `lower_repeats` pairs of
  `lower(side)` (trace+lower+as_text, ms). Returns {"step": (ours, jax), "lower": (...)}."""
  state = {k: sides[k]["args"][0] for k in "sj"}

  def runner(k):
    side = sides[k]
    step, block, (_, x, y) = side["step"], side["block"], side["args"]
    ctx = side.get("ctx", contextlib.nullcontext)

    def run():
      p = state[k]
      with ctx():
        for _ in range(inner):
          p, loss = step(p, x, y)
        block(loss)
      state[k] = p
    return run

  out = {}
  for key, (a, b, reps) in {
      "step": (runner("s"), runner("j"), repeats),
      "lower": (lambda: lower(sides["s"]), lambda: lower(sides["j"]), lower_repeats)}.items():
    scale = 1e6 / inner if key == "step" else 1e3
    out[key] = tuple(t * scale for t in _abba(a, b, reps))
  return out


def bench_explicit(repeats: int, inner: int, lower_repeats: int):
  """The explicit-sharding step: {"step": (ours, jax) us, "lower": (ours, jax) ms} (see
  `_step_and_lower`)."""
  def lower(side):
    with side["ctx"]():
      return side["make"]().lower(*side["args"]).as_text()
  return _step_and_lower(setup_explicit(), inner, repeats, lower_repeats, lower)


def bench(repeats: int, inner: int, lower_repeats: int):
  """The sharded step: {"step": (ours, jax) us, "lower": (ours, jax) ms (see
  `_step_and_lower`), "collectives": {"s"|"j": {op: count}}}."""
  sides = setup()

  def lower(side):
    fn = side["jit"](side["make"](), in_shardings=side["in"], out_shardings=side["out"])
    return fn.lower(*side["args"]).as_text()
  out = _step_and_lower(sides, inner, repeats, lower_repeats, lower)
  out["collectives"] = {k: collective_counts(sides[k]["step"].lower(*sides[k]["args"])
                                             .compile().as_text()) for k in "sj"}
  return out


def bench_dispatch(n: int, repeats: int):
  """Per-call time (us) of a tiny jitted function (`x + 1` on f32[4,4] split over a 2x2
  mesh, in/out shardings given) on both sides: the Python dispatch of a sharded call.
  Medians over `repeats` ABBA pairs of `n` calls. Returns (ours, jax)."""
  import jax
  import stagecraft as sc
  from stagecraft.sharding import Mesh, NamedSharding, PartitionSpec
  x = np.arange(16, dtype=np.float32).reshape(4, 4)
  sides = []
  for lib, mesh_cls, ns, ps in (
      (sc, Mesh, NamedSharding, PartitionSpec),
      (jax, jax.sharding.Mesh, jax.sharding.NamedSharding, jax.sharding.PartitionSpec)):
    mesh = mesh_cls(np.array(lib.devices()[:NDEV]).reshape(2, 2), ("data", "model"))
    sh = ns(mesh, ps("data", "model"))
    f = lib.jit(lambda x: x + 1.0, in_shardings=sh, out_shardings=sh)
    xs = lib.device_put(x, sh)
    np.testing.assert_array_equal(np.asarray(f(xs)), x + 1)

    def run(f=f, xs=xs, lib=lib):
      for _ in range(n):
        y = f(xs)
      lib.block_until_ready(y)
    sides.append(run)
  ts, tj = _abba(*sides, repeats)
  return ts * 1e6 / n, tj * 1e6 / n


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true", help="few repeats (a smoke run)")
  ap.add_argument("--json", help="write the results to this file")
  args = ap.parse_args(argv)
  r = bench(*((2, 2, 2) if args.quick else (40, 4, 10)))
  print("collectives in the optimized programs (stagecraft / JAX):",
        ", ".join(f"{k} {r['collectives']['s'][k]}/{r['collectives']['j'][k]}"
                  for k in COLLECTIVES))
  e = bench_explicit(*((2, 2, 2) if args.quick else (40, 4, 10)))
  rows = [("sharded MLP step (2x2 mesh)", *r["step"], "us", 1.05),
          ("sharded trace+lower", *r["lower"], "ms", 1.0),
          ("explicit-sharding MLP step (2x2 Explicit mesh)", *e["step"], "us", 1.05),
          ("explicit-sharding trace+lower", *e["lower"], "ms", 1.0),
          ("sharded jit dispatch, x + 1 on a 2x2 mesh",
           *bench_dispatch(*((200, 3) if args.quick else (2000, 9))), "us", 1.3)]
  return report(rows, args.json)


if __name__ == "__main__":
  main()
