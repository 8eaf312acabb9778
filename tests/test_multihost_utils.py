"""`experimental.mesh_utils` and `experimental.multihost_utils` against JAX (one process,
4 CPU devices), and multihost_utils across two processes (2 CPU devices each)."""
import json
import os
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest
from jax.experimental import mesh_utils as jmesh_utils
from jax.experimental import multihost_utils as jmultihost

import stagecraft as sc
from stagecraft.experimental import mesh_utils, multihost_utils
from stagecraft.sharding import Mesh, PartitionSpec as P

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
needs4 = pytest.mark.skipif(len(jax.devices()) < 4, reason="needs 4 CPU devices (conftest)")


def _ids(mesh):
  return mesh.shape, [d.id for d in mesh.flat]


@needs4
@pytest.mark.parametrize("shape,order", [((2, 2), None), ((4, 1), None), ((1, 2, 2), None),
                                         ((2, 2), [3, 1, 2, 0])])
def test_create_device_mesh_equals_jax(shape, order):
  sd = None if order is None else [sc.devices()[i] for i in order]
  jd = None if order is None else [jax.devices()[i] for i in order]
  got = mesh_utils.create_device_mesh(shape, sd)
  assert isinstance(got, np.ndarray)
  assert _ids(got) == _ids(jmesh_utils.create_device_mesh(shape, jd))


@needs4
@pytest.mark.parametrize("call", [
    lambda m: m.create_device_mesh((3, 2)),
    lambda m: m.create_hybrid_device_mesh((2, 2), (1, 1)),
    lambda m: m.create_hybrid_device_mesh((2, 1), (2, 1), process_is_granule=True),
])
def test_mesh_errors_equal_jax(call):
  msgs = []
  for m in (mesh_utils, jmesh_utils):
    with pytest.raises(ValueError) as e:
      call(m)
    msgs.append(str(e.value))
  assert msgs[0] == msgs[1]


@needs4
def test_hybrid_mesh_of_one_process_equals_jax():
  got = mesh_utils.create_hybrid_device_mesh((2, 2), (1, 1), process_is_granule=True)
  want = jmesh_utils.create_hybrid_device_mesh((2, 2), (1, 1), process_is_granule=True)
  assert _ids(got) == _ids(want)


TREE = {"a": np.arange(4.0), "b": 3, "c": np.ones((2, 3), np.float32), "d": True}


@pytest.mark.parametrize("fn", ["broadcast_one_to_all", "process_allgather",
                                "process_allgather_tiled"])
def test_single_process_results_equal_jax(fn):
  def run(mod):
    if fn == "process_allgather_tiled":
      return mod.process_allgather(TREE, tiled=True)
    return getattr(mod, fn)(TREE)
  got, want = run(multihost_utils), run(jmultihost)
  assert sc.tree.structure(got) == sc.tree.structure(want)
  for g, w in zip(sc.tree.leaves(got), jax.tree.leaves(want)):
    assert type(g) is type(w) is np.ndarray
    assert g.shape == w.shape and g.dtype == w.dtype
    np.testing.assert_array_equal(g, w)


def test_barrier_and_assert_equal_pass_alone():
  multihost_utils.sync_global_devices("step 3")
  multihost_utils.assert_equal(TREE)
  assert multihost_utils.reached_preemption_sync_point(7) is False


@needs4
def test_host_local_and_global_arrays_alone_equal_jax():
  x = np.arange(16.0, dtype=np.float32).reshape(8, 2)
  mesh = Mesh(np.array(sc.devices()[:4]).reshape(2, 2), ("d", "m"))
  jmesh = jax.sharding.Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("d", "m"))
  g = multihost_utils.host_local_array_to_global_array({"x": x}, mesh, P("d"))["x"]
  jg = jmultihost.host_local_array_to_global_array({"x": x}, jmesh,
                                                   jax.sharding.PartitionSpec("d"))["x"]
  assert g.shape == jg.shape and g.sharding.spec == P("d")
  assert [s.index for s in g.addressable_shards] == [s.index for s in jg.addressable_shards]
  back = multihost_utils.global_array_to_host_local_array(g, mesh, P("d"))
  np.testing.assert_array_equal(np.asarray(back), x)


WORKER = r"""
import json, sys
pid, port = int(sys.argv[1]), sys.argv[2]
import numpy as np
import stagecraft as sc
from stagecraft.experimental import mesh_utils, multihost_utils
sc.distributed.initialize(f"127.0.0.1:{port}", 2, pid, initialization_timeout=60,
                          heartbeat_timeout_seconds=5)
mine = {"v": np.arange(3.0) + 10 * pid, "flag": pid == 0, "n": np.int32(pid + 1)}
b = multihost_utils.broadcast_one_to_all(mine)
g = multihost_utils.process_allgather(mine)
t = multihost_utils.process_allgather({"v": mine["v"]}, tiled=True)
multihost_utils.sync_global_devices("ready")
multihost_utils.assert_equal({"same": np.ones(2)})
try:
  multihost_utils.assert_equal({"mine": np.float32(pid)}, "differs:")
  err = None
except AssertionError as e:
  err = str(e)
h = mesh_utils.create_hybrid_device_mesh((2,), (2,), process_is_granule=True)
print("RESULT " + json.dumps({
    "b": [b["v"].tolist(), bool(b["flag"]), int(b["n"])],
    "g": [g["v"].tolist(), g["flag"].tolist(), g["n"].tolist()], "t": t["v"].tolist(),
    "err": err, "hybrid": [[d.process_index for d in h.flat], [d.id for d in h.flat]]}),
    flush=True)
sc.distributed.shutdown()
"""


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_two_processes_broadcast_gather_and_barrier():
  port = _free_port()
  env = {**os.environ, "PYTHONPATH": SRC,
         "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
  procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(pid), str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
           for pid in (0, 1)]
  results = []
  for p in procs:
    try:
      out, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
      for q in procs:
        q.kill()
      pytest.fail("a multihost worker hung")
    assert p.returncode == 0, err[-2000:]
    results.append(json.loads([ln for ln in out.splitlines()
                               if ln.startswith("RESULT ")][0][len("RESULT "):]))
  for r in results:
    assert r["b"] == [[0.0, 1.0, 2.0], True, 1]                # process 0's values
    assert r["g"] == [[[0.0, 1.0, 2.0], [10.0, 11.0, 12.0]], [True, False], [1, 2]]
    assert r["t"] == [0.0, 1.0, 2.0, 10.0, 11.0, 12.0]
    assert r["err"] is not None and r["err"].startswith("differs:")
    assert r["hybrid"][0] == [0, 0, 1, 1]
