"""Multi-process pmap through the distributed runtime: two processes on localhost with two
CPU devices each map over the four global devices."""
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import stagecraft as sc

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")

WORKER = r"""
import os, sys, time
pid, port, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
import numpy as np
import stagecraft as sc
from stagecraft import lax
sc.distributed.initialize(f"127.0.0.1:{port}", 2, pid, initialization_timeout=60,
                          heartbeat_timeout_seconds=5)
assert sc.process_count() == 2 and sc.process_index() == pid, (sc.process_count(), pid)
assert len(sc.devices()) == 4 and len(sc.local_devices()) == 2
if mode == "exit_early" and pid == 1:
  os._exit(0)
if mode == "exit_early":
  time.sleep(2)
x = np.arange(2, dtype=np.float32) + 10 * pid
f = sc.pmap(lambda v: (lax.psum(v, "i"), lax.axis_index("i"), lax.psum(1, "i")), "i")
s, idx, n = f(x)
import json
print("RESULT " + json.dumps({
    "pid": pid, "sums": [float(np.asarray(sh.data).reshape(())) for sh in s.addressable_shards],
    "idx": [int(np.asarray(sh.data).reshape(())) for sh in idx.addressable_shards],
    "n": int(np.asarray(n.addressable_shards[0].data).reshape(-1)[0])}), flush=True)
try:
  np.asarray(s)
except RuntimeError as e:
  print("GATHER", "other processes" in str(e), flush=True)
sc.distributed.shutdown()
"""


SHARDED_WORKER = r"""
import json, sys
pid, port = int(sys.argv[1]), sys.argv[2]
import numpy as np
import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.sharding import NamedSharding, P
sc.distributed.initialize(f"127.0.0.1:{port}", 2, pid, initialization_timeout=60,
                          heartbeat_timeout_seconds=5)
X, W, B = (np.asarray(a, np.float32) for a in json.loads(sys.argv[3]))
mesh = sc.make_mesh((2, 2), ("data", "model"))
xs, ws = NamedSharding(mesh, P("data", None)), NamedSharding(mesh, P(None, "model"))
rep, ys = NamedSharding(mesh, P()), NamedSharding(mesh, P("data", "model"))
x = sc.make_array_from_process_local_data(xs, X[4 * pid:4 * pid + 4])   # global shape grown
w = sc.make_array_from_process_local_data(ws, W)      # "model" lies within each process
b = sc.make_array_from_callback(B.shape, rep, lambda idx: B[idx])

def loss(w, b, x):
  return jnp.mean((x @ w + b) ** 2)

step = sc.jit(sc.value_and_grad(loss, argnums=(0, 1)), in_shardings=(ws, rep, xs),
              out_shardings=(rep, (ws, rep)))
l, (gw, gb) = step(w, b, x)
fwd = sc.jit(lambda w, b, x: x @ w + b, in_shardings=(ws, rep, xs), out_shardings=ys)
y = fwd(w, b, x)
y_host = fwd(W, B, X)          # host values: each process passes the global value
xm = sc.make_array_from_process_local_data(ys, X[4 * pid:4 * pid + 4], X.shape)
# columns = processes: along ("data", "model") this process's blocks are not contiguous
tmesh = sc.make_mesh((2, 2), ("data", "model"), devices=mesh.devices.T.flatten())
ts = NamedSharding(tmesh, P(("data", "model")))
xt = sc.make_array_from_process_local_data(ts, np.concatenate([X[2 * pid:2 * pid + 2],
                                                                X[4 + 2 * pid:6 + 2 * pid]]))
xt2 = sc.jit(lambda v: v * 2 + 1, out_shardings=ts)(xt)

def shards(a):
  return [{"dev": [s.device.process_index, s.device.id],
           "index": [[sl.start, sl.stop] for sl in s.index], "rid": s.replica_id,
           "val": np.asarray(s.data).tolist()} for s in a.addressable_shards]

def error(fn):
  try:
    fn()
  except Exception as e:
    return [type(e).__name__, str(e)]

print("RESULT " + json.dumps({
    "pid": pid, "mesh": [[d.process_index for d in r] for r in mesh.devices],
    "shapes": [list(a.shape) for a in (x, w, b, xm, xt)],
    "loss": shards(l), "gw": shards(gw), "gb": shards(gb), "y": shards(y),
    "y_host": shards(y_host), "x": shards(x), "xm": shards(xm), "xt2": shards(xt2),
    "loss0": float(np.asarray(l.addressable_shards[0].data)),
    "loss_value": float(np.asarray(l)), "b_value": np.asarray(b).tolist(),
    "gather_y": error(lambda: np.asarray(y)), "gather_x": error(x.tolist),
    "x_sum": float(x.sum()),   # eager on the mesh: a replicated scalar
    "bad_local": error(lambda: sc.make_array_from_process_local_data(xs, X[:3], X.shape)),
}), flush=True)
sc.distributed.shutdown()
"""


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _launch(mode: str, worker: str = WORKER):
  port = _free_port()
  env = {**os.environ, "PYTHONPATH": SRC,
         "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
  return [subprocess.Popen([sys.executable, "-c", worker, str(pid), str(port), mode],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
          for pid in (0, 1)]


def _wait(procs, timeout):
  outs = []
  for p in procs:
    try:
      out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
      for q in procs:
        q.kill()
      pytest.fail("a distributed worker hung")
    outs.append((p.returncode, out, err))
  return outs


def test_two_process_pmap_psum_over_global_devices():
  outs = _wait(_launch("normal"), timeout=120)
  total = 0 + 1 + 10 + 11
  for pid, (rc, out, err) in enumerate(outs):
    assert rc == 0, err[-2000:]
    line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")][0]
    r = json.loads(line[len("RESULT "):])
    assert r["pid"] == pid
    assert r["sums"] == [float(total)] * 2
    assert r["idx"] == [2 * pid, 2 * pid + 1]     # global positions of this process's devices
    assert r["n"] == 4
    assert "GATHER True" in out


def test_a_process_that_exits_early_makes_the_other_fail_within_a_timeout():
  t0 = time.time()
  (rc0, out0, err0), (rc1, _, _) = _wait(_launch("exit_early"), timeout=90)
  assert rc1 == 0
  assert rc0 != 0                            # failed, did not hang or report a result
  assert "RESULT" not in out0
  assert "stopped sending heartbeats" in err0 or "Terminating process" in err0
  assert time.time() - t0 < 90


def test_initialize_argument_errors():
  with pytest.raises(ValueError, match="host:port"):
    sc.distributed.initialize("localhost", 2, 0)
  with pytest.raises(TypeError, match="num_processes must be an int"):
    sc.distributed.initialize("127.0.0.1:1234", "2", 0)
  with pytest.raises(ValueError, match=r"process_id must be in \[0, 2\)"):
    sc.distributed.initialize("127.0.0.1:1234", 2, 5)
  with pytest.raises(ValueError, match="num_processes must be >= 1"):
    sc.distributed.initialize("127.0.0.1:1234", 0, 0)


def test_initialize_after_the_backend_started_is_refused():
  sc.numpy.ones(2).block_until_ready()
  with pytest.raises(RuntimeError, match="before any computation"):
    sc.distributed.initialize("127.0.0.1:1234", 2, 0)
  assert not sc.distributed.is_initialized()


def _check_shards(shards, full, dev_pids, rids=None):
  """Each shard's value is `full` at its index; the shards sit on this process's devices."""
  full = np.asarray(full)
  assert [d[0] for d in (s["dev"] for s in shards)] == dev_pids
  for s in shards:
    index = tuple(slice(a, b) for a, b in s["index"])
    np.testing.assert_allclose(np.asarray(s["val"], np.float32), full[index], rtol=2e-5,
                               atol=2e-5)
  if rids is not None:
    assert [s["rid"] for s in shards] == rids


def test_two_process_sharded_jit_over_a_2x2_mesh():
  rng = np.random.default_rng(0)
  X = rng.normal(size=(8, 6)).astype(np.float32)
  W = rng.normal(size=(6, 4)).astype(np.float32)
  B = rng.normal(size=(4,)).astype(np.float32)
  outs = _wait(_launch(json.dumps([X.tolist(), W.tolist(), B.tolist()]), SHARDED_WORKER),
               timeout=120)
  Y = X @ W + B
  L = np.mean(Y ** 2)
  G = 2 * Y / Y.size
  GW, GB = X.T @ G, G.sum(0)
  for pid, (rc, out, err) in enumerate(outs):
    assert rc == 0, err[-3000:]
    line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")][0]
    r = json.loads(line[len("RESULT "):])
    mine = [pid, pid]
    assert r["pid"] == pid
    assert r["mesh"] == [[0, 0], [1, 1]]                # rows = processes
    assert r["shapes"] == [[8, 6], [6, 4], [4], [8, 6], [8, 6]]
    # inputs: this process's rows; the model-split and replicated weights
    _check_shards(r["x"], X, mine, rids=[0, 1])
    assert [s["index"] for s in r["x"]] == [[[4 * pid, 4 * pid + 4], [None, None]]] * 2
    _check_shards(r["xm"], X, mine, rids=[0, 0])
    # results: a replicated loss and bias gradient, a "model"-split weight gradient
    _check_shards(r["loss"], L, mine, rids=[2 * pid, 2 * pid + 1])   # global replica ids
    _check_shards(r["gb"], GB, mine, rids=[2 * pid, 2 * pid + 1])
    _check_shards(r["gw"], GW, mine, rids=[pid, pid])
    assert [s["index"][1] for s in r["gw"]] == [[0, 2], [2, 4]]
    _check_shards(r["y"], Y, mine, rids=[0, 0])
    assert [s["index"] for s in r["y"]] == [[[4 * pid, 4 * pid + 4], [0, 2]],
                                            [[4 * pid, 4 * pid + 4], [2, 4]]]
    _check_shards(r["y_host"], Y, mine)
    # columns = processes: this process's rows 2p:2p+2 and 4+2p:6+2p
    _check_shards(r["xt2"], X * 2 + 1, mine, rids=[0, 0])
    assert [s["index"][0] for s in r["xt2"]] == [[2 * pid, 2 * pid + 2],
                                                 [4 + 2 * pid, 6 + 2 * pid]]
    # a replicated result is readable, from a shard or (every piece is local) as a whole
    np.testing.assert_allclose(r["loss0"], L, rtol=2e-5)
    np.testing.assert_allclose(r["loss_value"], L, rtol=2e-5)
    np.testing.assert_allclose(r["b_value"], B)
    np.testing.assert_allclose(r["x_sum"], X.sum(), rtol=1e-5, atol=1e-5)
    # a split one is not
    for key in ("gather_y", "gather_x"):
      kind, msg = r[key]
      assert kind == "RuntimeError" and "other processes" in msg, r[key]
    kind, msg = r["bad_local"]
    assert kind == "ValueError", r["bad_local"]
    assert "make_array_from_process_local_data" in msg and "(4, 6)" in msg and "(3, 6)" in msg
