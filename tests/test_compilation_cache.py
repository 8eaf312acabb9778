"""The persistent compilation cache and executable serialization (runtime/cache.py)."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import warnings
import sys
import textwrap

import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.interpreters import lowering
from stagecraft.runtime import cache, client, dispatch

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


def _module_text(f, *args) -> str:
  closed = sc.make_jaxpr(f)(*args)
  assert not closed.consts
  return lowering.lower_jaxpr_to_module("cache_test", closed.jaxpr)


def _forget(text):
  """Drops `text`'s executables from the in-memory compile cache (only those)."""
  for k in [k for k in dispatch._compile_cache if k[0] == text]:
    del dispatch._compile_cache[k]


def _run(text, x):
  aval = sc.core.get_aval(x)
  exe = dispatch.compile_module(text)
  out = exe.execute_sharded([dispatch.to_buffer(x, aval)]).disassemble_into_single_device_arrays()
  return np.asarray(out[0][0])


def _read(path):
  with open(path, "rb") as f:
    return f.read()


def _entries(d):
  return sorted(n for n in os.listdir(d) if n.endswith(".scexe") and not n.startswith("."))


@pytest.fixture
def cache_dir(tmp_path):
  old = sc.config.compilation_cache_dir
  d = tmp_path / "cc"
  sc.config.update("compilation_cache_dir", str(d))
  # NB: the programs here compile in milliseconds; JAX's default threshold (1 s) would keep
  # them out of the cache.
  sc.config.update("jax_persistent_cache_min_compile_time_secs", 0)
  cache.reset_stats()
  try:
    yield str(d)
  finally:
    sc.config.update("compilation_cache_dir", old)
    sc.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)


def _fun(c):
  def f(x):
    return jnp.sin(x) * c + jnp.cos(x)
  return f


X = np.linspace(-1, 1, 5).astype(np.float32)


def test_hit_and_miss_counting(cache_dir):
  text = _module_text(_fun(3.25), X)
  _forget(text)
  n0 = dispatch.compile_count[0]
  want = np.sin(X) * 3.25 + np.cos(X)
  np.testing.assert_allclose(_run(text, X), want, rtol=1e-6)
  assert cache.stats["misses"] == 1 and cache.stats["writes"] == 1 and cache.stats["hits"] == 0
  assert len(_entries(cache_dir)) == 1
  assert dispatch.compile_count[0] == n0 + 1
  _run(text, X)   # in-memory hit: the disk is not consulted
  assert cache.stats["hits"] == 0 and cache.stats["misses"] == 1
  _forget(text)
  np.testing.assert_allclose(_run(text, X), want, rtol=1e-6)
  assert cache.stats["hits"] == 1 and cache.stats["misses"] == 1
  assert dispatch.compile_count[0] == n0 + 1   # loaded, not compiled
  # another program is another key
  text2 = _module_text(_fun(-1.5), X)
  _forget(text2)
  _run(text2, X)
  assert cache.stats["misses"] == 2 and len(_entries(cache_dir)) == 2
  _forget(text)
  _forget(text2)


def test_key_leaves_out_locations(cache_dir):
  # As JAX's default (jax_compilation_cache_include_metadata_in_key off): the same program
  # traced from other source lines is a hit; another program still a miss.
  import jax   # noqa: PLC0415 (the oracle's default)
  assert jax.config.jax_compilation_cache_include_metadata_in_key is False
  f1 = sc.jit(lambda x: jnp.sin(x) * 1.375)
  f2 = sc.jit(
      lambda x: jnp.sin(x) * 1.375)
  t1, t2 = f1.lower(X).compiler_ir(), f2.lower(X).compiler_ir()
  assert t1 != t2 and lowering.strip_locations(t1) == lowering.strip_locations(t2)
  _forget(t1)
  _forget(t2)
  np.testing.assert_allclose(f1(X), np.sin(X) * 1.375, rtol=1e-6)
  assert cache.stats["misses"] == 1 and cache.stats["hits"] == 0
  np.testing.assert_allclose(f2(X), np.sin(X) * 1.375, rtol=1e-6)
  assert cache.stats["hits"] == 1 and cache.stats["misses"] == 1
  sc.jit(lambda x: jnp.sin(x) * 1.5)(X)
  assert cache.stats["misses"] == 2
  _forget(t1)
  _forget(t2)


def test_min_compile_time_and_entry_size_thresholds(cache_dir):
  # JAX's jax_persistent_cache_min_compile_time_secs (default 1 s): a program that compiles
  # faster is not written; jax_persistent_cache_min_entry_size_bytes: nor a smaller entry.
  want = np.sin(X) * 2.625 + np.cos(X)
  text = _module_text(_fun(2.625), X)
  try:
    sc.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    assert sc.config.read("jax_persistent_cache_min_compile_time_secs") == 1.0
    _forget(text)
    with warnings.catch_warnings():
      warnings.simplefilter("error")   # an honoured option: no "not implemented" warning
      sc.config.update("jax_persistent_cache_min_compile_time_secs", 60)
    np.testing.assert_allclose(_run(text, X), want, rtol=1e-6)
    assert cache.stats["writes"] == 0 and not (os.path.isdir(cache_dir) and _entries(cache_dir))
    sc.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    sc.config.update("jax_persistent_cache_min_entry_size_bytes", 1 << 30)
    _forget(text)
    np.testing.assert_allclose(_run(text, X), want, rtol=1e-6)
    assert cache.stats["writes"] == 0 and not (os.path.isdir(cache_dir) and _entries(cache_dir))
    sc.config.update("jax_persistent_cache_min_entry_size_bytes", 1024)
    _forget(text)
    _run(text, X)
    assert cache.stats["writes"] == 1 and len(_entries(cache_dir)) == 1
  finally:
    sc.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    _forget(text)


def test_jit_uses_the_cache(cache_dir):
  f = sc.jit(lambda x: jnp.tanh(x) * 7.125 - x)
  np.testing.assert_allclose(np.asarray(f(X)), np.tanh(X) * 7.125 - X, rtol=1e-6)
  assert cache.stats["writes"] >= 1 and len(_entries(cache_dir)) >= 1


def test_size_bound_evicts_least_recently_used(cache_dir):
  texts = [_module_text(_fun(c), X) for c in (11.5, 12.5, 13.5)]
  for t in texts:
    _forget(t)
  old = sc.config.compilation_cache_max_size
  try:
    _run(texts[0], X)
    size = os.path.getsize(os.path.join(cache_dir, _entries(cache_dir)[0]))
    # Room for two entries: storing the third evicts the least recently used one.
    sc.config.update("compilation_cache_max_size", int(size * 2.5))
    _run(texts[1], X)
    os.utime(os.path.join(cache_dir, _entries(cache_dir)[0]), (1, 1))  # oldest on purpose
    oldest = _entries(cache_dir)[0]
    _run(texts[2], X)
    left = _entries(cache_dir)
    assert len(left) == 2 and oldest not in left
    assert cache.stats["evictions"] == 1
    total = sum(os.path.getsize(os.path.join(cache_dir, n)) for n in left)
    assert total <= size * 2.5
    # An evicted program is simply recompiled.
    for t in texts:
      _forget(t)
      np.testing.assert_allclose(_run(t, X), _run(t, X))
  finally:
    sc.config.update("compilation_cache_max_size", old)
    for t in texts:
      _forget(t)


def test_size_bound_must_be_an_int():
  with pytest.raises(ValueError, match="new int config value must be None or of type int"):
    sc.config.update("compilation_cache_max_size", "1GB")


@pytest.mark.parametrize("value", [123, b"dir", pathlib.Path("d")])
def test_cache_dir_must_be_a_string(value, tmp_path):
  old = sc.config.compilation_cache_dir
  with pytest.raises(ValueError, match="new string config value must be None or of type str"):
    sc.config.update("compilation_cache_dir", value)
  assert sc.config.compilation_cache_dir == old   # a refused value changes nothing
  try:   # (an empty path, as JAX's, is no cache)
    sc.config.update("compilation_cache_dir", "")
    assert sc.jit(lambda x: x * 41)(1.0) == 41.0
  finally:
    sc.config.update("compilation_cache_dir", old)


def test_cache_key_parts():
  text = _module_text(_fun(1.0), X)
  devs = (client.default_device(),)
  k = cache.cache_key(text, devs, 1, 1)
  assert k == cache.cache_key(text, devs, 1, 1) and len(k) == 64
  assert k != cache.cache_key(text + " ", devs, 1, 1)
  assert k != cache.cache_key(text, devs, 2, 1)
  old = cache.JAXLIB_VERSION
  try:
    cache.JAXLIB_VERSION = "0.0.0"
    assert k != cache.cache_key(text, devs, 1, 1)
  finally:
    cache.JAXLIB_VERSION = old


@pytest.mark.parametrize("damage", ["truncate", "flip_payload", "flip_header", "empty",
                                    "pickle"])
def test_corrupt_entry_is_dropped_and_recompiled(cache_dir, damage):
  text = _module_text(_fun(2.5), X)
  _forget(text)
  _run(text, X)
  (name,) = _entries(cache_dir)
  path = os.path.join(cache_dir, name)
  good = _read(path)
  data = bytearray(good)
  if damage == "truncate":
    data = data[:len(data) // 2]
  elif damage == "flip_payload":
    data[-len(data) // 3] ^= 0x40
  elif damage == "flip_header":
    data[len(cache._MAGIC) + cache._SIZES.size + 2] ^= 0x01   # inside the jaxlib version
  elif damage == "empty":
    data = b""
  else:   # a pickle must never be loaded: it is not ours, so it is dropped unread
    import pickle
    data = pickle.dumps({"evil": 1})
  with open(path, "wb") as f:
    f.write(bytes(data))
  _forget(text)
  n0 = dispatch.compile_count[0]
  with pytest.warns(RuntimeWarning, match="dropped the bad entry"):
    out = _run(text, X)
  np.testing.assert_allclose(out, np.sin(X) * 2.5 + np.cos(X), rtol=1e-6)
  assert cache.stats["corrupt"] == 1
  assert dispatch.compile_count[0] == n0 + 1   # recompiled
  assert _entries(cache_dir) == [name]          # and the entry replaced by a good one
  header, _ = cache._unpack(_read(path))
  assert header["key"] == name[:-len(".scexe")]
  _forget(text)
  _run(text, X)
  assert cache.stats["hits"] == 1
  _forget(text)


@pytest.mark.parametrize("copy_from", ["another_program", "another_arity"])
def test_foreign_entry_is_a_miss_not_another_program(cache_dir, copy_from):
  # An entry copied over another program's (same format, valid checksum) must never run:
  # its recorded key is checked against the key looked up.
  text_a = _module_text(_fun(1.5), X)
  if copy_from == "another_program":
    text_b = _module_text(_fun(-7.0), X)
  else:
    text_b = _module_text(lambda x, y: x * y, X, X)
  for t in (text_a, text_b):
    _forget(t)
  _run(text_a, X)
  name_a = _entries(cache_dir)[0]
  if copy_from == "another_program":
    _run(text_b, X)
  else:
    exe = dispatch.compile_module(text_b)
    del exe
  (name_b,) = [n for n in _entries(cache_dir) if n != name_a]
  path_a = os.path.join(cache_dir, name_a)
  with open(path_a, "wb") as f:
    f.write(_read(os.path.join(cache_dir, name_b)))
  _forget(text_a)
  n0 = dispatch.compile_count[0]
  with pytest.warns(RuntimeWarning, match="another program"):
    out = _run(text_a, X)
  np.testing.assert_allclose(out, np.sin(X) * 1.5 + np.cos(X), rtol=1e-6)
  assert cache.stats["foreign"] == 1 and dispatch.compile_count[0] == n0 + 1
  header, _ = cache._unpack(_read(path_a))
  assert header["key"] == name_a[:-len(".scexe")]   # replaced by A's own executable
  for t in (text_a, text_b):
    _forget(t)


_NOT_A_FILE = textwrap.dedent("""
    import os, sys, warnings
    sys.path.insert(0, sys.argv[1])
    import numpy as np
    import stagecraft as sc
    import stagecraft.numpy as jnp
    from stagecraft.runtime import cache, dispatch
    from stagecraft.interpreters import lowering
    d, kind = sys.argv[2], sys.argv[3]
    sc.config.update("compilation_cache_dir", d)
    closed = sc.make_jaxpr(lambda x: jnp.sin(x) * 4.0)(np.ones(3, np.float32))
    text = lowering.lower_jaxpr_to_module("cache_test", closed.jaxpr)
    dev = sc.devices()[0]
    path = os.path.join(d, cache.cache_key(text, (dev,), 1, 1) + ".scexe")
    os.makedirs(d, exist_ok=True)
    if kind == "fifo":
      os.mkfifo(path)
    else:
      os.symlink("/dev/zero", path)
    with warnings.catch_warnings(record=True) as w:
      warnings.simplefilter("always")
      exe = dispatch.compile_module(text)
    print(cache.stats["foreign"], cache.stats["hits"], len(w), "not a regular file" in str(w[0].message))
    """)


@pytest.mark.parametrize("kind", ["fifo", "symlink_to_dev_zero"])
def test_entry_that_is_not_a_regular_file_is_a_miss(tmp_path, kind):
  # A FIFO would block a plain open() forever and /dev/zero reads without bound; both are
  # misses with one warning. In a subprocess, so a regression cannot hang the suite.
  if not hasattr(os, "mkfifo"):
    pytest.skip("no FIFOs on this platform")
  p = subprocess.run([sys.executable, "-c", _NOT_A_FILE, SRC, str(tmp_path / "cc"), kind],
                     capture_output=True, text=True, env=_env(), timeout=60)
  assert p.returncode == 0, p.stderr
  assert p.stdout.split() == ["1", "0", "1", "True"]


def test_unwritable_dir_warns_and_compiles(tmp_path):
  blocker = tmp_path / "file"
  blocker.write_text("not a directory")
  old = sc.config.compilation_cache_dir
  sc.config.update("compilation_cache_dir", str(blocker / "cc"))   # works even as root
  sc.config.update("jax_persistent_cache_min_compile_time_secs", 0)
  cache.reset_stats()
  text = _module_text(_fun(4.75), X)
  _forget(text)
  try:
    with pytest.warns(RuntimeWarning, match="persistent compilation cache") as rec:
      out = _run(text, X)
  finally:
    sc.config.update("compilation_cache_dir", old)
    sc.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    _forget(text)
  np.testing.assert_allclose(out, np.sin(X) * 4.75 + np.cos(X), rtol=1e-6)
  assert any("cannot write" in str(w.message) for w in rec)
  assert cache.stats["errors"] >= 1 and cache.stats["writes"] == 0


# ---------------------------------------------------------------------------
# Several processes

_PROGRAM = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    import stagecraft as sc
    import stagecraft.numpy as jnp
    from stagecraft.interpreters import lowering
    from stagecraft.runtime import cache, dispatch

    def f(x):
      for i in range(150):
        x = jnp.sin(x) * 0.5 + jnp.cos(x) * 0.25 + i * 0.001   # contractive
      return x
    x = np.linspace(-1, 1, 4).astype(np.float32)
    closed = sc.make_jaxpr(f)(x)
    text = lowering.lower_jaxpr_to_module("shared", closed.jaxpr)
""")

_SHARED = _PROGRAM + textwrap.dedent("""
    sc.config.update("compilation_cache_dir", sys.argv[1])
    t = time.perf_counter()
    exe = dispatch.compile_module(text)
    dt = time.perf_counter() - t
    buf = dispatch.to_buffer(x, sc.core.get_aval(x))
    y = np.asarray(exe.execute_sharded([buf]).disassemble_into_single_device_arrays()[0][0])
    print(json.dumps({"stats": cache.stats, "compile_s": dt, "y": y.tolist()}))
""")

_WRITER = _PROGRAM + textwrap.dedent("""
    from stagecraft.runtime import client
    d = sys.argv[1]
    devs = (client.default_device(),)
    exe = dispatch.compile_module(text)   # no cache dir: compiled here
    key = cache.cache_key(text, devs, 1, 1)
    open(sys.argv[2], "w").close()        # ready
    while not __import__("os").path.exists(sys.argv[3]):   # start together
      time.sleep(0.005)
    ok = sum(cache.store(d, key, exe) for _ in range(25))
    print(json.dumps({"ok": ok, "stats": cache.stats}))
""")


def _env():
  env = dict(os.environ)
  env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
  env.pop("STAGECRAFT_COMPILATION_CACHE_DIR", None)
  env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"   # cache millisecond compiles too
  return env


def _want():
  x = np.linspace(-1, 1, 4)
  for i in range(150):
    x = np.sin(x) * 0.5 + np.cos(x) * 0.25 + i * 0.001
  return x


def test_second_process_hits(tmp_path):
  d = str(tmp_path / "cc")
  results = []
  for _ in range(2):
    p = subprocess.run([sys.executable, "-c", _SHARED, d], capture_output=True, text=True,
                       env=_env(), timeout=120)
    assert p.returncode == 0, p.stderr
    results.append(json.loads(p.stdout.strip().splitlines()[-1]))
  cold, warm = results
  print(f"\ncompile_module: cold {cold['compile_s'] * 1e3:.1f} ms (compiled), "
        f"warm {warm['compile_s'] * 1e3:.1f} ms (loaded from the persistent cache)")
  assert cold["stats"]["misses"] == 1 and cold["stats"]["writes"] == 1
  assert warm["stats"]["hits"] == 1 and warm["stats"]["misses"] == 0
  np.testing.assert_allclose(warm["y"], cold["y"], rtol=0, atol=0)
  np.testing.assert_allclose(warm["y"], _want(), rtol=1e-4, atol=1e-5)


def test_two_processes_write_the_same_key(tmp_path):
  d = str(tmp_path / "cc")
  go = str(tmp_path / "go")
  ready = [str(tmp_path / f"ready{i}") for i in range(2)]
  procs = [subprocess.Popen([sys.executable, "-c", _WRITER, d, ready[i], go],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env()) for i in range(2)]
  try:
    import time
    t0 = time.monotonic()
    while not all(os.path.exists(r) for r in ready):
      if time.monotonic() - t0 > 120 or any(p.poll() is not None for p in procs):
        for p in procs:   # NB: the other writer waits for `go` forever: kill before reading
          p.kill()
        pytest.fail(f"a writer died or hung before it was ready: "
                    f"{[p.communicate(timeout=30) for p in procs]}")
      time.sleep(0.01)
    open(go, "w").close()
    outs = [p.communicate(timeout=120) for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
  for p, (out, err) in zip(procs, outs):
    assert p.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["ok"] == 25
  names = os.listdir(d)
  assert len(names) == 1 and names[0].endswith(".scexe"), names   # no temp files left
  # the surviving entry is whole and loads here
  text = json.loads(subprocess.run(
      [sys.executable, "-c", _PROGRAM + "print(json.dumps(text))"], capture_output=True,
      text=True, env=_env(), timeout=120).stdout)
  assert names[0] == cache.cache_key(text, (client.default_device(),), 1, 1) + ".scexe"
  cache.reset_stats()
  devs = (client.default_device(),)
  exe = cache.lookup(d, names[0][:-len(".scexe")], devs)
  assert exe is not None and cache.stats["hits"] == 1
  x = np.linspace(-1, 1, 4).astype(np.float32)
  y = exe.execute_sharded([dispatch.to_buffer(x, sc.core.get_aval(x))])
  np.testing.assert_allclose(np.asarray(y.disassemble_into_single_device_arrays()[0][0]),
                             _want(), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------
# Serialization API


def _compiled(c=1.5):
  text = _module_text(_fun(c), X)
  return dispatch.compile_module(text)


def test_serialize_round_trip_in_process():
  exe = _compiled()
  meta = {"in_avals": ["f32[5]"], "names": ["x"], "n": 3, "nested": {"a": [1, 2.5, None]}}
  data = cache.serialize_executable(exe, meta)
  assert data.startswith(cache._MAGIC)
  exe2, meta2 = cache.deserialize_executable(data)
  assert meta2 == meta
  y = exe2.execute_sharded([dispatch.to_buffer(X, sc.core.get_aval(X))])
  np.testing.assert_allclose(np.asarray(y.disassemble_into_single_device_arrays()[0][0]),
                             np.sin(X) * 1.5 + np.cos(X), rtol=1e-6)


def test_serialize_errors():
  exe = _compiled()
  with pytest.raises(TypeError, match="JSON-able"):
    cache.serialize_executable(exe, {"f": object()})
  with pytest.raises(TypeError, match="dict"):
    cache.serialize_executable(exe, [1, 2])
  data = cache.serialize_executable(exe, {"a": 1})
  with pytest.raises(ValueError, match="not a stagecraft serialized executable"):
    cache.deserialize_executable(b"\x80\x04pickle" + data)
  with pytest.raises(ValueError, match="truncated"):
    cache.deserialize_executable(data[:-10])
  bad = bytearray(data)
  bad[-100] ^= 1
  with pytest.raises(ValueError, match="checksum"):
    cache.deserialize_executable(bytes(bad))
  with pytest.raises(TypeError, match="bytes"):
    cache.deserialize_executable("text")


def test_version_mismatch():
  exe = _compiled()
  old = cache.JAXLIB_VERSION
  try:
    cache.JAXLIB_VERSION = "0.0.1"
    data = cache.serialize_executable(exe, {})
  finally:
    cache.JAXLIB_VERSION = old
  with pytest.raises(ValueError, match=r"jaxlib 0\.0\.1.*jaxlib " + old.replace(".", r"\.")):
    cache.deserialize_executable(data)
  with pytest.raises(cache.VersionMismatchError):
    cache.deserialize_executable(data)
  payload = exe.client.serialize_executable(exe)
  data = cache._pack(payload, {"meta": {}}, format_version=99)
  with pytest.raises(ValueError, match=f"format version 99.*format version "
                     f"{cache.FORMAT_VERSION}"):
    cache.deserialize_executable(data)


def test_deserialize_in_fresh_process(tmp_path):
  exe = _compiled(-0.75)
  path = tmp_path / "exe.bin"
  path.write_bytes(cache.serialize_executable(exe, {"in": [[5], "float32"]}))
  script = textwrap.dedent("""
      import json, sys
      import numpy as np
      from stagecraft.runtime import cache, dispatch
      from stagecraft import core
      with open(sys.argv[1], "rb") as f:
        exe, meta = cache.deserialize_executable(f.read())
      x = np.linspace(-1, 1, meta["in"][0][0]).astype(meta["in"][1])
      out = exe.execute_sharded([dispatch.to_buffer(x, core.get_aval(x))])
      y = np.asarray(out.disassemble_into_single_device_arrays()[0][0])
      print(json.dumps({"y": y.tolist(), "compiles": dispatch.compile_count[0]}))
  """)
  p = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True,
                     env=_env(), timeout=120)
  assert p.returncode == 0, p.stderr
  res = json.loads(p.stdout.strip().splitlines()[-1])
  assert res["compiles"] == 0
  np.testing.assert_allclose(res["y"], np.sin(X) * -0.75 + np.cos(X), rtol=1e-6)


_TAMPER = r"""
import sys
import numpy as np
import stagecraft as sc, stagecraft.numpy as jnp
from stagecraft.runtime import cache
c = sc.jit(lambda x: x * 2).lower(jnp.ones(3)).compile()
header, payload = cache._unpack(c.serialize())
if sys.argv[1] == "device":
  header["devices"] = [1]
elif sys.argv[1] == "dtype":
  header["meta"]["in_avals"][0][1] = "int32"
elif sys.argv[1] == "shape":
  header["meta"]["out_avals"][0][0] = [4]
data = cache._pack(payload, header)   # re-checksummed: the checksum cannot tell
try:
  c2 = sc.stages.deserialize_compiled(data, c.in_tree, c.out_tree)
  print("LOADED", np.asarray(c2(jnp.ones(3))))
except ValueError as e:
  print("ValueError", e)
"""


@pytest.mark.parametrize("field", ["device", "dtype", "shape"])
def test_tampered_header_is_refused_not_run(field):
  # A header that disagrees with its payload (or names another device) raises; it never
  # aborts the process nor makes the runtime reinterpret bits. Run in a subprocess so that a
  # regression (an abort in XLA) fails this test instead of killing the suite.
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
  r = subprocess.run([sys.executable, "-c", _TAMPER, field], capture_output=True, text=True,
                     timeout=300, env=env)
  assert r.returncode == 0, r.stderr[-2000:]
  out = r.stdout.strip().splitlines()[-1]
  assert out.startswith("ValueError"), out
  assert {"device": "header names devices [1]", "dtype": "arguments are (float32[3])",
          "shape": "results are (float32[3])"}[field] in out


def test_deserialize_compiled_rejects_non_trees():
  c = sc.jit(lambda x: x * 2).lower(jnp.ones(3)).compile()
  with pytest.raises(TypeError, match="in_tree must be the treedef"):
    sc.stages.deserialize_compiled(c.serialize(), 0, c.out_tree)
