"""Multi-process pmap through the distributed runtime: two processes on localhost with two
CPU devices each map over the four global devices."""
import json
import os
import socket
import subprocess
import sys
import time

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


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _launch(mode: str):
  port = _free_port()
  env = {**os.environ, "PYTHONPATH": SRC,
         "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
  return [subprocess.Popen([sys.executable, "-c", WORKER, str(pid), str(port), mode],
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
