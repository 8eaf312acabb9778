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


def _maps() -> int:
  with open("/proc/self/maps") as f:
    return sum(1 for _ in f)


def test_jit_caches_are_bounded_for_a_living_function(monkeypatch):
  """A function that stays alive and is called with ever new shapes keeps a bounded number of
  signatures (and so of executables: XLA:CPU maps ~3 memory regions each, and Linux caps a
  process's mappings), as JAX's jit caches are bounded; an evicted signature compiles again
  and gives the same numbers, and a function used throughout keeps working."""
  from stagecraft import pjit
  monkeypatch.setattr(pjit, "MAX_JIT_CACHE_ENTRIES", 16)
  monkeypatch.setattr(pjit, "_jit_order_limit", [16])
  monkeypatch.setattr(dispatch, "_MAX_CACHE", 16)
  f = sc.jit(lambda x: x * 2 + 1)
  hot = sc.jit(lambda x: x - 1)
  counts = []
  for n in range(1, 121):
    np.testing.assert_array_equal(np.asarray(f(np.ones(n, np.float32))), np.full(n, 3.0))
    np.testing.assert_array_equal(np.asarray(hot(np.ones(2, np.float32))), [0.0, 0.0])
    if n % 40 == 0:
      counts.append(_maps())
  live = sum(len(c) for per_fun in pjit._fun_caches.values() for c in per_fun.values())
  assert live <= 16 + 8, live
  assert counts[-1] - counts[0] < 60, counts   # not ~3 mappings per compiled shape
  # the first shapes were evicted: they compile again, with the same result
  np.testing.assert_array_equal(np.asarray(f(np.ones(1, np.float32))), [3.0])


def test_jit_cache_eviction_keeps_clear_caches_and_collection_working(monkeypatch):
  from stagecraft import pjit
  monkeypatch.setattr(pjit, "MAX_JIT_CACHE_ENTRIES", 8)
  monkeypatch.setattr(pjit, "_jit_order_limit", [8])
  fs = [sc.jit(lambda x, k=k: x + k) for k in range(20)]
  for k, f in enumerate(fs):
    assert float(f(np.float32(1))) == 1 + k
  del fs
  import gc
  gc.collect()
  sc.clear_caches()
  assert len(pjit._jit_order) == 0
  g = sc.jit(lambda x: x * 5)
  assert float(g(np.float32(2))) == 10.0
