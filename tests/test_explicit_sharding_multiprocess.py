"""Explicit sharding (sharding in types) across processes: two processes on localhost with
two CPU devices each build a 2x2 mesh with Explicit axes over the four global devices
("data" across the processes, "model" within each), and run a data-parallel jitted train
step; its loss and updated parameters equal the single-process computation."""
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")

WORKER = r"""
import json, sys
pid, port = int(sys.argv[1]), sys.argv[2]
import numpy as np
import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.sharding import AxisType, NamedSharding, P, make_mesh, set_mesh
sc.distributed.initialize(f"127.0.0.1:{port}", 2, pid, initialization_timeout=60,
                          heartbeat_timeout_seconds=5)
X, Y, W, B = (np.asarray(a, np.float32) for a in json.loads(sys.argv[3]))
mesh = make_mesh((2, 2), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
xs, rep = NamedSharding(mesh, P("data", None)), NamedSharding(mesh, P())
x = sc.make_array_from_process_local_data(xs, X[4 * pid:4 * pid + 4])
y = sc.make_array_from_process_local_data(xs, Y[4 * pid:4 * pid + 4])
w = sc.make_array_from_callback(W.shape, rep, lambda idx: W[idx])
b = sc.make_array_from_callback(B.shape, rep, lambda idx: B[idx])

def loss(params, x, y):
  w, b = params
  return jnp.mean((jnp.tanh(x @ w + b) - y) ** 2)

@sc.jit
def step(params, x, y):
  l, g = sc.value_and_grad(loss)(params, x, y)
  return sc.tree_util.tree_map(lambda p, d: p - 0.5 * d, params, g), l

with set_mesh(mesh):
  params = (w, b)
  types = [str(sc.typeof(v)) for v in (x, w)]
  losses = []
  for _ in range(3):
    params, l = step(params, x, y)
    losses.append(float(np.asarray(l.addressable_shards[0].data)))
  out_types = [str(sc.typeof(v)) for v in (*params, l)]
  pred = sc.jit(lambda p, x: jnp.tanh(x @ p[0] + p[1]))(params, x)
  out_types.append(str(sc.typeof(pred)))
from stagecraft.experimental import multihost_utils
# every process gets the whole batch of predictions (its rows come from both processes)
pred = np.asarray(multihost_utils.process_allgather(pred, tiled=True))
print("RESULT " + json.dumps({
    "pred": pred.tolist(),
    "pid": pid, "types": types, "out_types": out_types, "losses": losses,
    "w": np.asarray(params[0].addressable_shards[0].data).tolist(),
    "b": np.asarray(params[1].addressable_shards[0].data).tolist()}), flush=True)
sc.distributed.shutdown()
"""


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _reference(X, Y, W, B):
  """Three steps of the same train step in this process, on one device."""
  def loss(params, x, y):
    w, b = params
    return jnp.mean((jnp.tanh(x @ w + b) - y) ** 2)

  @sc.jit
  def step(params, x, y):
    l, g = sc.value_and_grad(loss)(params, x, y)
    return sc.tree_util.tree_map(lambda p, d: p - 0.5 * d, params, g), l

  params, losses = (W, B), []
  for _ in range(3):
    params, l = step(params, X, Y)
    losses.append(float(l))
  pred = np.tanh(X @ np.asarray(params[0]) + np.asarray(params[1]))
  return losses, np.asarray(params[0]), np.asarray(params[1]), pred


def test_two_process_explicit_data_parallel_train_step():
  rng = np.random.default_rng(0)
  X = rng.normal(size=(8, 6)).astype(np.float32)
  Y = rng.normal(size=(8, 3)).astype(np.float32)
  W = (rng.normal(size=(6, 3)) / 3).astype(np.float32)
  B = np.zeros(3, np.float32)
  port = _free_port()
  env = {**os.environ, "PYTHONPATH": SRC,
         "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
  data = json.dumps([X.tolist(), Y.tolist(), W.tolist(), B.tolist()])
  procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(pid), str(port), data],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
           for pid in (0, 1)]
  outs = []
  for p in procs:
    try:
      out, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
      for q in procs:
        q.kill()
      pytest.fail("a distributed worker hung")
    outs.append((p.returncode, out, err))
  losses, w_ref, b_ref, pred_ref = _reference(X, Y, W, B)
  assert losses[0] > losses[-1]   # the step trains
  for pid, (rc, out, err) in enumerate(outs):
    assert rc == 0, err[-3000:]
    line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")][0]
    r = json.loads(line[len("RESULT "):])
    assert r["pid"] == pid
    assert r["types"] == ["float32[8@data,6]", "float32[6,3]"]
    assert r["out_types"] == ["float32[6,3]", "float32[3]", "float32[]", "float32[8@data,3]"]
    np.testing.assert_allclose(np.asarray(r["pred"], np.float32), pred_ref, rtol=1e-5,
                               atol=1e-6)   # process_allgather of the split predictions
    np.testing.assert_allclose(r["losses"], losses, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(r["w"], np.float32), w_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(r["b"], np.float32), b_ref, rtol=1e-5, atol=1e-6)
