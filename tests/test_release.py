"""Executables of a collected function are released (issue: leaked executables): the global
compile cache forgets them, the allocator gives the memory back, and the cache is bounded."""
import subprocess
import sys
import textwrap

import numpy as np

import stagecraft as sc
from stagecraft.runtime import dispatch


def test_collected_function_leaves_the_compile_cache():
  f = sc.jit(lambda x: x * 3 - 1)
  for n in range(1, 6):
    f(np.ones(n, np.float32))
  before = len(dispatch._compile_cache)
  assert before >= 5
  del f
  import gc
  gc.collect()
  assert len(dispatch._compile_cache) <= before - 5


def test_cache_is_bounded_in_bytes(monkeypatch):
  monkeypatch.setattr(dispatch, "_MAX_CACHE_BYTES", 1)
  g = sc.jit(lambda x: x + 7)
  for n in range(1, 4):
    g(np.ones(n, np.float32))
  assert len(dispatch._compile_cache) <= 1
  np.testing.assert_array_equal(np.asarray(g(np.ones(2, np.float32))), [8.0, 8.0])


def test_rss_returns_after_many_shapes_and_delete():
  code = textwrap.dedent("""
      import gc
      import numpy as np
      import stagecraft as sc, stagecraft.numpy as jnp
      def rss():
        with open("/proc/self/statm") as f:
          return int(f.read().split()[1]) * 4096 / 2**20
      f0 = sc.jit(lambda x: x * 2 + 1); f0(jnp.ones(1)); f0(np.ones(2, np.float32))
      gc.collect(); r0 = rss()
      f = sc.jit(lambda x: jnp.sin(x) * 2 + 1)
      for n in range(1, 201):
        f(np.ones(n, np.float32))
      r1 = rss()
      del f
      gc.collect()
      print(r0, r1, rss())
  """)
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                     timeout=600)
  assert r.returncode == 0, r.stderr
  r0, r1, r2 = map(float, r.stdout.split())
  assert r1 - r0 > 20, "the compiles should have grown the process"
  assert r2 - r0 < 20, f"RSS {r2:.0f} MiB after delete, {r0:.0f} MiB at start"
