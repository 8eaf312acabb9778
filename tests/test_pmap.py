"""pmap on 4 CPU devices: argument/result mapping (in_axes, out_axes, static arguments,
pytrees, kwargs, axis_size, devices), sharded results, composition with jit/grad/jvp/
linearize/vmap, data-parallel SGD, disable_jit, the collective-launch hazard, errors,
donation and lowering."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import lax
from stagecraft.runtime import spmd
from stagecraft.sharding import NamedSharding

N = 4
RNG = np.random.RandomState(0)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _x(*shape):
  return RNG.randn(*shape).astype(np.float32)


def _close(a, b, **kw):
  kw.setdefault("rtol", 1e-5)
  kw.setdefault("atol", 1e-5)
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), **kw)


# Module-level pmapped functions (compiled once).
double = sc.pmap(lambda x: 2 * x + 1)
centered = sc.pmap(lambda x: x - lax.pmean(x, "i"), "i")


# ---------------------------------------------------------------------------
# Mapping arguments and results


def test_basic_sharded_result():
  x = _x(N, 3)
  y = double(x)
  _close(y, 2 * x + 1)
  assert isinstance(y, sc.Array)
  assert y.shape == (N, 3) and y.dtype == np.float32
  assert isinstance(y.sharding, NamedSharding)
  shards = y.addressable_shards
  assert len(shards) == N
  assert len({s.device for s in shards}) == N
  for s in shards:
    _close(s.data, (2 * x + 1)[s.index])
  _close(y[2], 2 * x[2] + 1)


def test_sharded_result_feeds_back_without_host_copy(monkeypatch):
  x = _x(N, 3)
  y = centered(x)
  calls = []
  real = spmd.xc.batched_device_put

  def counting(*a, **k):
    calls.append(1)
    return real(*a, **k)
  monkeypatch.setattr(spmd.xc, "batched_device_put", counting)
  z = centered(y)
  z = centered(z)
  assert calls == []
  _close(z, x - x.mean(0))
  centered(x)   # a host array is put on the devices
  assert len(calls) == 1


@pytest.mark.parametrize("in_axes,shapes", [
    (0, [(N, 3), (N, 3)]),
    (1, [(3, N), (3, N)]),
    (-1, [(2, N), (5, N)]),
    ((0, None), [(N, 3), (3,)]),
    ((1, 0), [(3, N), (N, 3)]),
    ([None, 0], [(3,), (N, 3)]),
])
def test_in_axes(in_axes, shapes):
  a, b = (_x(*s) for s in shapes)
  f = sc.pmap(lambda a, b: jnp.sum(a) + jnp.sum(b) * lax.axis_index("i"), "i",
              in_axes=in_axes)
  # NB: JAX's oracle gets the normalized axes (its pmap rejects lists and mis-shards
  # negative axes).
  j_axes = (tuple(a % len(s) if a is not None else None for a, s in zip(in_axes, shapes))
            if isinstance(in_axes, (tuple, list)) else in_axes % 2)
  jf = jax.pmap(lambda a, b: jjnp.sum(a) + jjnp.sum(b) * jax.lax.axis_index("i"), "i",
                in_axes=j_axes)
  _close(f(a, b), jax.block_until_ready(jf(a, b)), rtol=1e-4)


def test_in_axes_pytree_prefix():
  tree = {"w": _x(3), "xs": [_x(N, 2), _x(2, N)]}
  f = sc.pmap(lambda t: t["w"].sum() + t["xs"][0].sum() + t["xs"][1].sum(),
              in_axes=({"w": None, "xs": [0, 1]},))
  want = tree["w"].sum() + tree["xs"][0].sum(1) + tree["xs"][1].sum(0)
  _close(f(tree), want, rtol=1e-4)


@pytest.mark.parametrize("out_axes", [0, 1, -1])
def test_out_axes(out_axes):
  x = _x(N, 3)
  f = sc.pmap(lambda x: x * 2, out_axes=out_axes)
  _close(f(x), np.moveaxis(x * 2, 0, out_axes))


def test_out_axes_none_and_pytree():
  x = _x(N, 3)
  f = sc.pmap(lambda x: {"s": lax.psum(x, "i"), "v": x + 1}, "i",
              out_axes={"s": None, "v": 1})
  out = f(x)
  _close(out["s"], x.sum(0))
  _close(out["v"], (x + 1).T)


def test_kwargs_and_pytree_io():
  x, y = _x(N, 2), _x(N, 2)
  f = sc.pmap(lambda p, scale: (p["a"] * scale, [p["b"] - scale]))
  a, (b,) = f({"a": x, "b": y}, scale=y)
  _close(a, x * y)
  _close(b, y - y)


def test_static_broadcasted_argnums():
  traces = []

  def f(x, k, mode):
    traces.append((k, mode))
    return x ** k if mode == "pow" else x * k
  g = sc.pmap(f, static_broadcasted_argnums=(1, 2))
  x = _x(N, 2)
  _close(g(x, 2, "pow"), x ** 2)
  _close(g(x, 3, "mul"), x * 3)
  _close(g(x, 2, "pow"), x ** 2)
  assert traces == [(2, "pow"), (3, "mul")]
  with pytest.raises(ValueError, match="Non-hashable static arguments"):   # JAX's type
    g(x, [1], "pow")


def test_axis_size_without_mapped_input():
  # NB: as JAX's pmap, an axis_size does not stand in for a mapped argument
  w = _x(3)
  with pytest.raises(ValueError) as e:
    sc.pmap(lambda w: w * lax.axis_index("i"), "i", in_axes=None, axis_size=N)(w)
  with pytest.raises(ValueError) as je:
    jax.pmap(lambda w: w * jax.lax.axis_index("i"), "i", in_axes=None, axis_size=N)(w)
  assert str(e.value).split("\n-----")[0] == str(je.value) == (
      "pmap requires at least one argument with a mapped axis.")


def test_devices_argument():
  devs = sc.devices()
  f = sc.pmap(lambda x: lax.psum(x, "i"), "i", devices=devs[2:])
  x = _x(2, 3)
  y = f(x)
  _close(y, np.broadcast_to(x.sum(0), x.shape))
  assert {s.device for s in y.addressable_shards} == set(devs[2:])
  g = sc.pmap(lambda x: x + 1, devices=devs[::-1])
  z = g(_x(N, 1))
  assert [s.device for s in z.addressable_shards] == devs[::-1]


def test_smaller_than_device_count():
  x = _x(2, 3)
  _close(centered(x), x - x.mean(0))


# ---------------------------------------------------------------------------
# Composition with jit, grad, jvp, linearize, vmap


def _loss_fns():
  def body(w, x):
    return lax.psum(jnp.sum(jnp.tanh(x @ w) ** 2), "i")
  f = sc.pmap(body, "i", in_axes=(None, 0), out_axes=None)
  jf = jax.pmap(lambda w, x: jax.lax.psum(jjnp.sum(jjnp.tanh(x @ w) ** 2), "i"), "i",
                in_axes=(None, 0), out_axes=None)
  return f, jf


W = _x(3, 2)
XB = _x(N, 5, 3)
LOSS, JLOSS = _loss_fns()


def test_grad_of_pmap():
  g = sc.grad(LOSS)(W, XB)
  want = jax.block_until_ready(jax.grad(JLOSS)(W, XB))
  _close(g, want, rtol=1e-4)
  g2 = sc.grad(LOSS, argnums=1)(W, XB)
  _close(g2, jax.block_until_ready(jax.grad(JLOSS, argnums=1)(W, XB)), rtol=1e-4)


def test_jit_grad_of_pmap():
  g = sc.jit(sc.grad(LOSS))(W, XB)
  _close(g, jax.block_until_ready(jax.grad(JLOSS)(W, XB)), rtol=1e-4)


def test_jit_of_pmap_and_pmap_of_jit():
  x = _x(N, 3)
  _close(sc.jit(centered)(x), x - x.mean(0))
  f = sc.pmap(sc.jit(lambda x: x - lax.pmean(x, "i")), "i")
  _close(f(x), x - x.mean(0))


def test_pmap_of_grad():
  def loss(w, x):
    return jnp.sum(jnp.tanh(x @ w) ** 2)
  f = sc.pmap(lambda w, x: lax.pmean(sc.grad(loss)(w, x), "i"), "i", in_axes=(None, 0))
  g = f(W, XB)
  jl = lambda w, x: jjnp.sum(jjnp.tanh(x @ w) ** 2)
  want = jax.block_until_ready(jax.pmap(lambda w, x: jax.lax.pmean(jax.grad(jl)(w, x), "i"),
                                        "i", in_axes=(None, 0))(W, XB))
  _close(g, want, rtol=1e-4)


def test_jvp_and_linearize_of_pmap():
  x, t = _x(N, 3), _x(N, 3)
  f = sc.pmap(lambda x: jnp.sin(x) * lax.psum(x, "i"), "i")
  jf = jax.pmap(lambda x: jjnp.sin(x) * jax.lax.psum(x, "i"), "i")
  p, tan = sc.jvp(f, (x,), (t,))
  jp, jt = jax.block_until_ready(jax.jvp(jf, (x,), (t,)))
  _close(p, jp, rtol=1e-4)
  _close(tan, jt, rtol=1e-4)
  p2, lin = sc.linearize(f, x)
  _close(p2, jp, rtol=1e-4)
  _close(lin(t), jt, rtol=1e-4)
  _close(lin(2 * t), 2 * np.asarray(jt), rtol=1e-4)


def test_vjp_of_pmap_with_out_axes():
  x, ct = _x(N, 3), _x(3, N)
  f = sc.pmap(lambda x: jnp.cos(x) * 2, out_axes=1)
  out, vjp = sc.vjp(f, x)
  _close(out, (np.cos(x) * 2).T)
  (g,) = vjp(ct)
  _close(g, -np.sin(x) * 2 * ct.T, rtol=1e-4)


def test_vmap_of_pmap_and_pmap_of_vmap():
  x = _x(3, N, 2)
  f = sc.vmap(centered)
  _close(f(x), x - x.mean(1, keepdims=True))
  g = sc.vmap(centered, in_axes=1, out_axes=1)
  y = _x(N, 3, 2)
  _close(g(y), y - y.mean(0, keepdims=True))
  h = sc.pmap(sc.vmap(lambda x: x - lax.pmean(x, "i")), "i")
  _close(h(y), y - y.mean(0, keepdims=True))


def test_grad_of_vmap_of_pmap():
  x = _x(2, N, 3)
  f = lambda x: jnp.sum(jnp.sin(sc.vmap(centered)(x)))
  jc = jax.pmap(lambda x: x - jax.lax.pmean(x, "i"), "i")
  want = jax.block_until_ready(jax.grad(lambda x: jjnp.sum(jjnp.sin(jax.vmap(jc)(x))))(x))
  _close(sc.grad(f)(x), want, rtol=1e-4)


# ---------------------------------------------------------------------------
# Data-parallel SGD


def _init_mlp(sizes, rng):
  return [(rng.randn(m, n).astype(np.float32) / np.sqrt(m), np.zeros(n, np.float32))
          for m, n in zip(sizes[:-1], sizes[1:])]


def _mlp_loss(params, x, y):
  h = x
  for w, b in params[:-1]:
    h = jnp.tanh(h @ w + b)
  w, b = params[-1]
  logits = h @ w + b
  logp = logits - jnp.log(jnp.sum(jnp.exp(logits), axis=-1, keepdims=True))
  return -jnp.mean(jnp.sum(logp * y, axis=-1))


LR = 0.1


@sc.jit
def _sgd_single(params, x, y):
  g = sc.grad(_mlp_loss)(params, x, y)
  return sc.tree_util.tree_map(lambda p, g: p - LR * g, params, g)


def _sgd_dp_body(params, x, y):
  g = lax.pmean(sc.grad(_mlp_loss)(params, x, y), "batch")
  return sc.tree_util.tree_map(lambda p, g: p - LR * g, params, g)


_sgd_dp = sc.pmap(_sgd_dp_body, "batch", in_axes=(None, 0, 0), out_axes=None)


def test_data_parallel_sgd_matches_single_device():
  rng = np.random.RandomState(1)
  params = _init_mlp([6, 16, 16, 3], rng)
  per = 8
  xs = rng.randn(3, N * per, 6).astype(np.float32)
  ys = np.eye(3, dtype=np.float32)[rng.randint(0, 3, size=(3, N * per))]
  p_single, p_dp = params, params
  for step in range(3):
    p_single = _sgd_single(p_single, xs[step], ys[step])
    p_dp = _sgd_dp(p_dp, xs[step].reshape(N, per, 6), ys[step].reshape(N, per, 3))
  for (w1, b1), (w2, b2) in zip(p_single, p_dp):
    _close(w2, w1, rtol=1e-4, atol=1e-5)
    _close(b2, b1, rtol=1e-4, atol=1e-5)
  assert not np.allclose(np.asarray(p_dp[0][0]), params[0][0])


# ---------------------------------------------------------------------------
# disable_jit


@pytest.mark.parametrize("kind", ["psum", "ppermute", "all_gather", "axis_index", "nested"])
def test_disable_jit_matches_compiled(kind):
  ring = [(i, (i + 1) % N) for i in range(N)]
  bodies = {
      "psum": lambda x: jnp.sin(x) * lax.psum(x, "i"),
      "ppermute": lambda x: lax.ppermute(x, "i", ring) - x,
      "all_gather": lambda x: lax.all_gather(x, "i").sum(0) * x,
      "axis_index": lambda x: x * lax.axis_index("i") + lax.pmax(x, "i"),
  }
  if kind == "nested":
    f = sc.pmap(sc.pmap(lambda x: lax.psum(x, ("i", "j")) * lax.axis_index("j"), "j"), "i")
    x = _x(2, 2, 3)
  else:
    f = sc.pmap(bodies[kind], "i")
    x = _x(N, 3)
  want = np.asarray(f(x))
  with sc.disable_jit():
    got = f(x)
  _close(got, want)


def test_disable_jit_runs_python_per_call():
  seen = []

  def body(x):
    seen.append(type(x).__name__)
    return lax.psum(x, "i")
  f = sc.pmap(body, "i")
  x = _x(N, 2)
  with sc.disable_jit():
    _close(f(x), np.broadcast_to(x.sum(0), x.shape))
    f(x)
  assert len(seen) == 2


# ---------------------------------------------------------------------------
# The collective-launch hazard


def test_collective_launch_hazard_chain_1000():
  code = textwrap.dedent("""
      import os
      if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 2:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])   # 4 devices, 2 cores
      import numpy as np
      import stagecraft as sc
      from stagecraft import lax
      f = sc.pmap(lambda x: lax.psum(x, "i") * 0.25 + 1.0, "i")
      x = np.zeros((4, 8), np.float32)
      y = x
      for _ in range(1000):
        y = f(y)
      out = np.asarray(y)
      assert np.allclose(out, 1000.0), out
      # interleaved programs: collectives of several kinds, one without, a jit of a pmap
      g = sc.pmap(lambda x: lax.all_gather(x, "i").mean(0) + 1.0, "i")
      h = sc.pmap(lambda x: x * 1.0)
      j = sc.jit(sc.pmap(lambda x: lax.pmean(x, "i") + 1.0, "i"))
      y = x
      for _ in range(250):
        y = j(g(h(f(y))))
      out = np.asarray(y)
      assert np.allclose(out, 750.0), out
      print("OK")
  """)
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4",
             PYTHONPATH=os.path.join(ROOT, "src"))
  r = subprocess.run([sys.executable, "-c", code], timeout=120, env=env, capture_output=True,
                     text=True)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "OK" in r.stdout


# ---------------------------------------------------------------------------
# Errors


def test_error_more_positions_than_devices():
  with pytest.raises(ValueError) as e:
    sc.pmap(lambda x: x)(np.zeros((8, 2), np.float32))
  assert "8" in str(e.value) and "4" in str(e.value)
  with pytest.raises(ValueError) as e:
    sc.pmap(lambda x: x, devices=sc.devices()[:2])(np.zeros((3, 2), np.float32))
  assert "3" in str(e.value) and "2" in str(e.value)


def test_error_inconsistent_sizes_names_arguments():
  with pytest.raises(ValueError, match="inconsistent sizes") as e:
    sc.pmap(lambda a, b: a + b)(np.zeros((4, 2)), np.zeros((3, 2)))
  msg = str(e.value)
  assert "size 4" in msg and "size 3" in msg
  with pytest.raises(ValueError, match="inconsistent sizes") as e:
    sc.pmap(lambda d: d["u"] + d["v"])({"u": np.zeros((4,)), "v": np.zeros((2,))})
  assert "u" in str(e.value) and "v" in str(e.value)


def test_error_size_zero_axis():
  with pytest.raises(ValueError, match="mapped axis of size 0"):
    sc.pmap(lambda v: v + 1)(np.zeros((0, 3), np.float32))


def test_error_out_axes_none_varying():
  with pytest.raises(ValueError, match="out_axes=None"):
    sc.pmap(lambda x: x + 1, "i", out_axes=None)(np.zeros((N, 2), np.float32))
  with pytest.raises(ValueError, match="out_axes=None"):
    sc.pmap(lambda x, w: w * lax.axis_index("i"), "i", in_axes=(0, None), out_axes=None)(
        np.ones((N, 1), np.float32), np.ones(2, np.float32))


@pytest.mark.parametrize("wrap", ["jit", "checkpoint", "custom_jvp", "cond", "scan"])
def test_out_axes_none_sees_through_calls_and_control_flow(wrap):
  # The replication analysis follows call and control-flow bodies: a value from
  # axis_index varies over the axis however it is wrapped (jit used to hide it and return
  # device 0's value), and a psum'med one does not.
  def through(f):
    if wrap == "jit":
      return sc.jit(f)
    if wrap == "checkpoint":
      return sc.checkpoint(f)
    if wrap == "custom_jvp":
      g = sc.custom_jvp(f)
      g.defjvp(lambda p, t: (f(*p), t[0]))
      return g
    if wrap == "cond":   # a predicate that is the same on every device
      return lambda x: lax.cond(lax.psum(x, "i") > -1e9, f, lambda y: f(y), x)
    return lambda x: lax.scan(lambda c, _: (f(c), None), x, None, length=2)[0]
  x = np.arange(N, dtype=np.float32)
  # The wrapped function's operand is the same on every device; only axis_index inside varies.
  varying = through(lambda w: w * 0 + lax.axis_index("i").astype(np.float32))
  with pytest.raises(ValueError, match="out_axes=None"):
    sc.pmap(lambda v: varying(lax.psum(v, "i")), "i", out_axes=None)(x)
  with pytest.raises(ValueError, match="out_axes=None"):
    sc.pmap(lambda v: sc.jit(lambda: lax.axis_index("i"))(), "i", out_axes=None)(x)
  # A mapped operand reduced inside the wrapped function is the same on every device.
  summed = through(lambda w: lax.psum(w, "i"))
  out = sc.pmap(lambda v: summed(v), "i", out_axes=None)(x)
  _close(out, np.full((), x.sum()) if wrap != "scan" else x.sum() * N)


def test_error_bad_in_axes():
  with pytest.raises(ValueError, match=r"different lengths of tuple at key path\n    pmap "
                                       r"in_axes\[0\]\n.*tuple of length 3, but the full "
                                       r"pytree has a subtree of the same type but of length 2"):
    sc.pmap(lambda a, b: a + b, in_axes=(0, 0, 0))(np.zeros((N,)), np.zeros((N,)))
  with pytest.raises(ValueError, match="rank"):
    sc.pmap(lambda a: a, in_axes=2)(np.zeros((N, 2)))
  with pytest.raises(ValueError, match="at least one argument"):
    sc.pmap(lambda a: a, in_axes=None)(np.zeros((N,)))


def test_error_unbound_axis_name():
  with pytest.raises(NameError, match=r"Found an unbound axis name: j\. To fix this, please "
                     r"call psum under `jax.shard_map`\."):   # JAX's text
    sc.pmap(lambda x: lax.psum(x, "j"), "i")(np.zeros((N,), np.float32))


def test_failing_call_leaves_next_call_working():
  f = sc.pmap(lambda a, b: lax.psum(a @ b, "i"), "i")
  a, b = _x(N, 2, 3), _x(N, 3, 2)
  with pytest.raises(Exception):
    f(a, _x(N, 4, 2))   # shape error
  _close(f(a, b), np.broadcast_to(np.einsum("nij,njk->ik", a, b), (N, 2, 2)), rtol=1e-4)
  with pytest.raises(ValueError):
    f(np.zeros((8, 2, 3), np.float32), np.zeros((8, 3, 2), np.float32))
  _close(f(a, b), np.broadcast_to(np.einsum("nij,njk->ik", a, b), (N, 2, 2)), rtol=1e-4)


# ---------------------------------------------------------------------------
# Donation and lowering


def test_donate_argnums():
  f = sc.pmap(lambda x, y: x * 2 + y, donate_argnums=0)
  x0, y0 = _x(N, 3), _x(N, 3)
  x = double(x0)            # a sharded Array on the devices
  out = f(x, y0)
  _close(out, (2 * x0 + 1) * 2 + y0)
  with pytest.raises(sc.DonatedBufferError):
    np.asarray(x)
  out2 = f(out, y0)         # the output can be donated in turn
  _close(out2, ((2 * x0 + 1) * 2 + y0) * 2 + y0)


def test_lower_as_text_and_compile():
  x = _x(N, 3)
  lowered = centered.lower(x)
  text = lowered.as_text()
  assert "sdy.manual_computation" in text
  assert "sdy.mesh" in text
  assert "all_reduce" in text
  compiled = lowered.compile()
  _close(compiled(x), x - x.mean(0))


def test_jaxpr_has_xla_pmap():
  jaxpr = sc.make_jaxpr(centered)(_x(N, 3))
  prims = [e.primitive.name for e in jaxpr.jaxpr.eqns]
  assert "xla_pmap" in prims
  assert "psum" in str(jaxpr)


# ---------------------------------------------------------------------------
# More shapes of use


def test_scalar_constant_identity_and_bool_outputs():
  x = _x(N, 3)
  s, c, i, b = sc.pmap(lambda x: (jnp.sum(x), jnp.ones(2), x, x > 0))(x)
  _close(s, x.sum(1), rtol=1e-5)
  _close(c, np.ones((N, 2)))
  _close(i, x)
  np.testing.assert_array_equal(np.asarray(b), x > 0)


def test_sharded_results_in_eager_ops_jit_and_other_layouts():
  x = _x(N, 3)
  y = double(x)
  _close(y + 1, 2 * x + 2)
  _close(sc.jit(lambda a: a * 3)(y), (2 * x + 1) * 3)
  _close(y[1:3, 0], (2 * x + 1)[1:3, 0])
  t = sc.pmap(lambda v: v + 1, out_axes=1)(x)          # (3, N), split along axis 1
  _close(sc.pmap(lambda v: v * 2, in_axes=1)(t), (x + 1) * 2)
  _close(double(np.asarray(t).T), 2 * (x + 1) + 1)
  sq = sc.pmap(lambda v: v + 1, out_axes=1)(_x(N, N))
  _close(double(sq), 2 * np.asarray(sq) + 1)           # resharded from axis 1 to axis 0


def test_closures_over_tracers():
  x = _x(N, 3)
  _close(sc.jit(lambda w, x: sc.pmap(lambda x: x * w)(x))(2.0, x), 2 * x)
  g = sc.grad(lambda w: jnp.sum(sc.pmap(lambda x: jnp.sin(x * w))(x)))(np.float32(0.5))
  _close(g, np.sum(np.cos(x * 0.5) * x), rtol=1e-4)


def test_grad_replicated_param_without_collective():
  x = _x(N, 3)
  f = sc.pmap(lambda w, x: jnp.sin(w) * x, in_axes=(None, 0))
  g = sc.grad(lambda w: jnp.sum(f(w, x)))(np.float32(0.5))
  _close(g, np.cos(0.5) * x.sum(), rtol=1e-4)


def test_nested_pmap_in_axes_and_out_axes():
  x = _x(2, 2, 3)
  f = sc.pmap(sc.pmap(lambda w, v: w + v, "j", in_axes=(None, 0)), "i")
  _close(f(x[:, 0], x), x + x[:, :1])
  g = sc.pmap(sc.pmap(lambda v: lax.psum(v, "j"), "j", out_axes=None), "i")
  _close(g(x), x.sum(1))
  _close(sc.jit(sc.pmap(sc.pmap(lambda v: lax.psum(v, "i"), "j"), "i"))(x),
         np.broadcast_to(x.sum(0), x.shape))


def test_x64():
  with sc.enable_x64():
    x = RNG.randn(N, 2)
    y = sc.pmap(lambda v: lax.psum(v, "i") * 1e-300, "i")(x)
    assert y.dtype == np.float64
    np.testing.assert_allclose(np.asarray(y) / 1e-300, np.broadcast_to(x.sum(0), x.shape),
                               rtol=1e-12)


def test_disable_jit_static_in_axes_none_out_axes_none():
  x, w = _x(N, 2), _x(2)
  f = sc.pmap(lambda w, x, k: lax.psum(w * x * k, "i"), "i", in_axes=(None, 0, None),
              out_axes=None, static_broadcasted_argnums=2)
  want = np.asarray(f(w, x, 3))
  with sc.disable_jit():
    got = f(w, x, 3)
  _close(got, want)
  _close(got, (w * x * 3).sum(0))


hyp = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=8, deadline=None)
@given(in_ax=st.integers(0, 2), out_ax=st.integers(-3, 2), n=st.sampled_from([1, 2, 4]))
def test_in_out_axes_roundtrip_property(in_ax, out_ax, n):
  shape = [2, 3]
  shape.insert(in_ax, n)
  x = RNG.randn(*shape).astype(np.float32)
  f = sc.pmap(lambda v: v * 2 + lax.axis_index("i"), "i", in_axes=in_ax, out_axes=out_ax)
  per = np.moveaxis(x, in_ax, 0) * 2 + np.arange(n).reshape(n, 1, 1)
  _close(f(x), np.moveaxis(per, 0, out_ax))


# ---------------------------------------------------------------------------
# Collectives in loop bodies under pmap; autodiff of jit(pmap)


def test_pmap_of_scan_with_psum():
  x = _x(N, 3)
  f = sc.pmap(lambda v: lax.scan(lambda c, e: (c + lax.psum(e, "i"), None), 0., v)[0], "i")
  _close(f(x), np.full(N, x.sum()), rtol=1e-4)


def test_pmap_of_fori_loop_with_psum():
  x = _x(N, 3)
  f = sc.pmap(lambda v: lax.fori_loop(0, 2, lambda k, c: c + lax.psum(v, "i"), v), "i")
  _close(f(x), x + 2 * x.sum(0), rtol=1e-4)


@pytest.mark.parametrize("mode", ["jvp", "grad", "linearize"])
def test_autodiff_of_jit_of_pmap(mode):
  x = _x(N, 3)
  f = sc.jit(sc.pmap(lambda v: jnp.sin(v) * lax.psum(v, "i"), "i"))
  jf = jax.pmap(lambda v: jjnp.sin(v) * jax.lax.psum(v, "i"), "i")
  if mode == "jvp":
    got = sc.jvp(f, (x,), (x,))[1]
    want = jax.block_until_ready(jax.jvp(jf, (x,), (x,))[1])
  elif mode == "linearize":
    got = sc.linearize(f, x)[1](x)
    want = jax.block_until_ready(jax.jvp(jf, (x,), (x,))[1])
  else:
    got = sc.grad(lambda v: jnp.sum(f(v)))(x)
    want = jax.block_until_ready(jax.grad(lambda v: jjnp.sum(jf(v)))(x))
  _close(got, want, rtol=1e-4)
