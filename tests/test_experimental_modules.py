"""JAX modules programs still import: `jax.experimental.shard_map`, `jax.experimental.pjit`,
`jax.experimental.compilation_cache.compilation_cache`, the rest of
`jax.experimental.multihost_utils` and `jax.sharding.make_single_device_sharding`, against
JAX 0.10.2 (same calls, same numbers, same warnings and errors), also served as `jax.*` by
`stagecraft.compat` (`python -m stagecraft run`). 4 CPU devices (tests/conftest.py)."""
from __future__ import annotations

import importlib
import os
import re
import sys
import warnings

import jax
import jax.numpy as jjnp
import jax.sharding as jsh
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import cli, compat, lax
from stagecraft.experimental import multihost_utils
from stagecraft.sharding import Mesh, NamedSharding, PartitionSpec as P, make_mesh, set_mesh

needs4 = pytest.mark.skipif(len(sc.devices()) < 4, reason="needs 4 devices")


def _fresh(name: str):
  """The module `name`, with its cached deprecated-name lookup cleared (so the next read
  warns again, as in a new process)."""
  mod = importlib.import_module(name)
  getattr_ = mod.__dict__.get("__getattr__")
  if hasattr(getattr_, "cache_clear"):
    getattr_.cache_clear()
  return mod


def _jax_attr(modname: str, name: str):
  """JAX's deprecated name, its warning swallowed."""
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    return getattr(importlib.import_module(modname), name)


# ---------------------------------------------------------------------------
# jax.experimental.shard_map


def test_shard_map_name_warns_as_jax():
  jmod = _fresh("jax.experimental.shard_map")
  smod = _fresh("stagecraft.experimental.shard_map")
  with pytest.warns(DeprecationWarning) as jw:
    jmod.shard_map  # noqa: B018
  with pytest.warns(DeprecationWarning) as sw:
    smod.shard_map  # noqa: B018
  assert str(sw[0].message) == str(jw[0].message)
  assert sw[0].filename == __file__   # the warning points at the reader
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert smod.shard_map is smod.shard_map   # once per process, as JAX's
  with pytest.raises(AttributeError, match="has no attribute 'nope'"):
    smod.nope  # noqa: B018
  import inspect
  assert (list(inspect.signature(smod.shard_map).parameters)
          == list(inspect.signature(_jax_attr("jax.experimental.shard_map",
                                              "shard_map")).parameters))


@needs4
@pytest.mark.parametrize("check_rep", [True, False])
def test_shard_map_matches_jax(check_rep):
  smap = _fresh("stagecraft.experimental.shard_map")
  with pytest.warns(DeprecationWarning):
    s_shard_map = smap.shard_map
  j_shard_map = _jax_attr("jax.experimental.shard_map", "shard_map")
  x = np.arange(32.0, dtype=np.float32).reshape(8, 4)
  w = np.linspace(-1, 1, 4, dtype=np.float32)

  def body(lax_, a, b):
    return lax_.psum(a * b, "i").sum(0, keepdims=True), a + 1

  jm = jsh.Mesh(np.array(jax.devices()[:4]), ("i",))
  sm = Mesh(np.array(sc.devices()[:4]), ("i",))   # NB: Auto axes, as jm's
  jf = j_shard_map(lambda a, b: body(jax.lax, a, b), jm, (jsh.PartitionSpec("i"),
                   jsh.PartitionSpec()), (jsh.PartitionSpec(), jsh.PartitionSpec("i")),
                   check_rep)
  sf = s_shard_map(lambda a, b: body(lax, a, b), sm, (P("i"), P()), (P(), P("i")), check_rep)
  for s, j in zip(sf(x, w), jf(x, w)):
    assert s.shape == j.shape
    np.testing.assert_allclose(np.asarray(s), np.asarray(j), rtol=1e-6)
  # under jit, and the keyword form
  out = sc.jit(s_shard_map(lambda a: a * 2, mesh=sm, in_specs=P("i"), out_specs=P("i"),
                           check_rep=check_rep))(x)
  np.testing.assert_array_equal(np.asarray(out), x * 2)


@needs4
def test_shard_map_errors_match_jax():
  s_shard_map = _jax_attr("stagecraft.experimental.shard_map", "shard_map")
  j_shard_map = _jax_attr("jax.experimental.shard_map", "shard_map")
  jm = jsh.Mesh(np.array(jax.devices()[:4]), ("i",))
  sm = Mesh(np.array(sc.devices()[:4]), ("i",))   # NB: Auto axes, as jm's
  x = np.arange(8.0, dtype=np.float32)
  # an output varying along "i" claimed replicated: rejected with check_rep, allowed without
  with pytest.raises(ValueError, match="out_specs") as je:
    j_shard_map(lambda a: a, jm, jsh.PartitionSpec("i"), jsh.PartitionSpec())(x)
  with pytest.raises(ValueError, match="out_specs") as se:
    s_shard_map(lambda a: a, sm, P("i"), P())(x)
  # NB: JAX names its own helper ('_rem_singleton') as the function here
  first = lambda e: re.sub(r"function '[^']*'", "function", str(e.value).splitlines()[0])
  assert first(se) == first(je)
  np.testing.assert_array_equal(np.asarray(s_shard_map(lambda a: a, sm, P("i"), P(), False)(x)),
                                np.asarray(j_shard_map(lambda a: a, jm, jsh.PartitionSpec("i"),
                                                       jsh.PartitionSpec(), False)(x)))
  # no `auto` in JAX 0.10.2's experimental shard_map; mesh, in_specs and out_specs required
  for f in (j_shard_map, s_shard_map):
    with pytest.raises(TypeError, match="auto"):
      f(lambda a: a, None, P(), P(), auto=frozenset())
    with pytest.raises(TypeError, match="out_specs"):
      f(lambda a: a, None, P())
  with pytest.raises(TypeError, match="requires a callable"):
    s_shard_map(3, sm, P(), P())


# ---------------------------------------------------------------------------
# jax.experimental.pjit


def test_pjit_name_warns_as_jax():
  jmod = _fresh("jax.experimental.pjit")
  smod = _fresh("stagecraft.experimental.pjit")
  with pytest.warns(DeprecationWarning) as jw:
    jmod.pjit  # noqa: B018
  with pytest.warns(DeprecationWarning) as sw:
    smod.pjit  # noqa: B018
  assert str(sw[0].message) == str(jw[0].message)
  import inspect
  jparams = inspect.signature(_jax_attr("jax.experimental.pjit", "pjit")).parameters
  sparams = inspect.signature(smod.pjit).parameters
  assert list(sparams) == list(jparams)
  assert [p.kind for p in sparams.values()] == [p.kind for p in jparams.values()]


@needs4
def test_pjit_matches_jax():
  s_pjit = _jax_attr("stagecraft.experimental.pjit", "pjit")
  j_pjit = _jax_attr("jax.experimental.pjit", "pjit")
  x = np.arange(16.0, dtype=np.float32).reshape(4, 4)

  def f(a, n):
    return (a @ a.T) * n, a.sum()

  jm = jsh.Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y"))
  sm = Mesh(np.array(sc.devices()[:4]).reshape(2, 2), ("x", "y"))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)   # JAX's `with mesh:`
    with jm:
        jout = j_pjit(f, jsh.PartitionSpec("x", "y"), (jsh.PartitionSpec("x"), None),
                    static_argnums=1)(x, 3)
  for ctx in (sm, set_mesh(sm)):   # `with mesh:` (as JAX's pjit), and set_mesh
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", DeprecationWarning)
      with ctx:
        sout = s_pjit(f, P("x", "y"), (P("x"), None), static_argnums=1)(x, 3)
    for s, j in zip(sout, jout):
      np.testing.assert_allclose(np.asarray(s), np.asarray(j), rtol=1e-6)
    assert isinstance(sout[0].sharding, NamedSharding)
    assert sout[0].sharding.spec == P("x") and tuple(jout[0].sharding.spec) == ("x",)
  # keyword shardings, static_argnames, donation
  out = s_pjit(lambda a, *, k: a * k, static_argnames="k", donate_argnums=0)(
      jnp.asarray(x), k=2)
  np.testing.assert_array_equal(np.asarray(out), x * 2)
  with pytest.raises(NotImplementedError, match="compiler_options"):
    s_pjit(f, compiler_options={"xla_foo": 1})
  with pytest.raises(TypeError):
    s_pjit(3)(x)


# ---------------------------------------------------------------------------
# jax.experimental.compilation_cache


def test_compilation_cache_module_names_match_jax():
  from jax.experimental.compilation_cache import compilation_cache as jcc

  from stagecraft.experimental.compilation_cache import compilation_cache as cc
  public = lambda m: sorted(n for n in dir(m) if not n.startswith("_") and callable(
      getattr(m, n)) and getattr(getattr(m, n), "__module__", "").endswith("compilation_cache"))
  assert public(cc) == sorted(cc.__all__) == ["reset_cache", "set_cache_dir"]
  assert {"reset_cache", "set_cache_dir"} <= set(dir(jcc))


def test_set_cache_dir_stores_compiled_programs(tmp_path):
  from stagecraft.experimental.compilation_cache import compilation_cache as cc
  from stagecraft.runtime import cache
  before = sc.config.read("jax_compilation_cache_dir")
  try:
    cc.set_cache_dir(str(tmp_path / "cache"))
    sc.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    assert sc.config.read("jax_compilation_cache_dir") == str(tmp_path / "cache")
    cache.reset_stats()
    f = sc.jit(lambda x: jnp.sin(x) * 7.25 + 0.5)   # a program compiled here only
    np.testing.assert_allclose(np.asarray(f(np.ones(3, np.float32))),
                               np.sin(np.ones(3)) * 7.25 + 0.5, rtol=1e-6)
    entries = os.listdir(tmp_path / "cache")
    assert entries and all(e.endswith(".scexe") for e in entries)
    assert cache.stats["writes"] >= 1
    # a fresh compile of the same program is served from the directory
    sc.clear_caches()
    cache.reset_stats()
    cc.reset_cache()
    np.testing.assert_allclose(np.asarray(f(np.ones(3, np.float32))),
                               np.sin(np.ones(3)) * 7.25 + 0.5, rtol=1e-6)
    assert cache.stats["hits"] >= 1
    # None turns it off; what is not a str is refused, as JAX's
    cc.set_cache_dir(None)
    assert sc.config.read("jax_compilation_cache_dir") is None
    with pytest.raises(ValueError, match="new string config value must be None or of type str"):
      cc.set_cache_dir(3)
    with pytest.raises(ValueError, match="new string config value must be None or of type str"):
      cc.set_cache_dir(tmp_path)
  finally:
    sc.config.update("jax_compilation_cache_dir", before)
    sc.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)


# ---------------------------------------------------------------------------
# multihost_utils and make_single_device_sharding


def test_multihost_utils_has_jax_public_functions():
  from jax.experimental import multihost_utils as jmh
  public = {"process_allgather", "sync_global_devices", "broadcast_one_to_all",
            "host_local_array_to_global_array", "global_array_to_host_local_array",
            "assert_equal", "reached_preemption_sync_point", "live_devices",
            "ProcessFailureError"}
  assert public <= set(dir(jmh))
  assert public <= set(multihost_utils.__all__)
  import inspect
  for name in public - {"live_devices", "ProcessFailureError"}:
    assert (list(inspect.signature(getattr(multihost_utils, name)).parameters)
            == list(inspect.signature(getattr(jmh, name)).parameters)), name


def test_multihost_single_process_values_match_jax():
  from jax.experimental import multihost_utils as jmh
  tree = {"a": np.arange(6.0, dtype=np.float32).reshape(2, 3), "b": np.int32(4)}
  for tiled in (False, True):
    s = multihost_utils.process_allgather(tree, tiled=tiled)
    j = jmh.process_allgather(tree, tiled=tiled)
    for k in tree:
      np.testing.assert_array_equal(np.asarray(s[k]), np.asarray(j[k]))
      assert np.shape(s[k]) == np.shape(j[k])
  s = multihost_utils.broadcast_one_to_all(tree)
  j = jmh.broadcast_one_to_all(tree)
  for k in tree:
    np.testing.assert_array_equal(np.asarray(s[k]), np.asarray(j[k]))
  multihost_utils.sync_global_devices("step")
  jmh.sync_global_devices("step")


def test_live_devices_and_process_failure_error():
  from jax.experimental import multihost_utils as jmh
  # without distributed.initialize: JAX's RuntimeError
  with pytest.raises(RuntimeError, match="Distributed JAX not initialized") as je:
    with jmh.live_devices(jax.devices()):
      pass
  with pytest.raises(RuntimeError) as se:
    with multihost_utils.live_devices(sc.devices()):
      pass
  assert str(se.value) == str(je.value)
  e = multihost_utils.ProcessFailureError({"d0"})
  assert e.failed_devices == {"d0"} and str(e) == str(jmh.ProcessFailureError({"d0"}))


def test_live_devices_one_initialized_process(tmp_path):
  import socket
  import subprocess
  import textwrap
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  script = tmp_path / "live.py"
  script.write_text(textwrap.dedent(f"""\
      import stagecraft as sc
      from stagecraft.experimental import multihost_utils as mh
      sc.distributed.initialize("127.0.0.1:{port}", 1, 0)
      devs = sc.devices()
      with mh.live_devices(list(reversed(devs))) as live:
        print("live", [d.id for d in live] == sorted(d.id for d in devs))
      try:
        with mh.live_devices([]):
          pass
      except ValueError as e:
        print("empty", e)
      try:
        with mh.live_devices(devs):
          raise KeyError("body")
      except KeyError as e:
        print("body", e)
      sc.distributed.shutdown()
      """))
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
             PYTHONPATH=os.path.join(os.path.dirname(os.path.dirname(__file__)), "src"))
  p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                     timeout=120, env=env)
  assert p.returncode == 0, p.stderr[-2000:]
  assert "live True" in p.stdout and "empty No devices provided." in p.stdout
  assert "body 'body'" in p.stdout


def test_make_single_device_sharding_matches_jax():
  from stagecraft.sharding import SingleDeviceSharding, make_single_device_sharding
  d, jd = sc.devices()[0], jax.devices()[0]
  s = make_single_device_sharding(d)
  assert isinstance(s, SingleDeviceSharding) and s.device_set == {d}
  assert s == make_single_device_sharding(d, memory_kind="device")
  x = sc.device_put(np.arange(3.0), s)
  assert x.sharding == s
  with pytest.raises(ValueError) as je:
    jsh.make_single_device_sharding(jd, memory_kind="bogus")
  with pytest.raises(ValueError) as se:
    make_single_device_sharding(d, memory_kind="bogus")
  assert str(se.value) == str(je.value)
  with pytest.raises(NotImplementedError, match="pinned_host"):
    make_single_device_sharding(d, memory_kind="pinned_host")


# ---------------------------------------------------------------------------
# Served as jax.* (`python -m stagecraft run script.py`)


SCRIPT = """\
import warnings
import numpy as np
import jax
import jax.numpy as jnp
import jax.experimental.shard_map
from jax.experimental.compilation_cache import compilation_cache as cc
from jax.sharding import Mesh, PartitionSpec as P
with warnings.catch_warnings():
  warnings.simplefilter("ignore", DeprecationWarning)
  from jax.experimental.shard_map import shard_map
  from jax.experimental.pjit import pjit
cc.set_cache_dir({cache!r})
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
mesh = Mesh(np.array(jax.devices()[:2]), ("i",))
f = shard_map(lambda a: jax.lax.psum(a, "i"), mesh, P("i"), P())
print("shard_map", np.asarray(f(jnp.arange(4.0))).tolist())
print("pjit", float(pjit(lambda a: (a * a).sum())(jnp.arange(3.0))))
print("modules", jax.experimental.shard_map.__name__, cc.__name__)
"""


@needs4
def test_modules_served_as_jax(tmp_path, capsys):
  script = tmp_path / "prog.py"
  cache_dir = tmp_path / "cache"
  script.write_text(SCRIPT.format(cache=str(cache_dir)))
  before = sc.config.read("jax_compilation_cache_dir")
  real_jax = sys.modules.get("jax")
  compat.install()
  try:
    assert cli.main(["run", str(script)]) == 0
  finally:
    compat.uninstall()
    sc.config.update("jax_compilation_cache_dir", before)
    sc.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
  assert sys.modules.get("jax") is real_jax
  out = capsys.readouterr().out
  assert "shard_map [2.0, 4.0]" in out, out
  assert "pjit 5.0" in out
  assert ("modules stagecraft.experimental.shard_map "
          "stagecraft.experimental.compilation_cache.compilation_cache") in out
  assert os.listdir(cache_dir)


# ---------------------------------------------------------------------------
# jax.experimental.serialize_executable


def test_serialize_executable_round_trip_matches_jax(tmp_path):
  from jax.experimental import serialize_executable as jse
  from stagecraft.experimental import serialize_executable as se
  x = np.linspace(-1, 1, 5).astype(np.float32)
  ours = sc.jit(lambda a, b: {"s": jnp.sin(a) * b}).lower(x, 2.0).compile()
  theirs = jax.jit(lambda a, b: {"s": jax.numpy.sin(a) * b}).lower(x, 2.0).compile()
  payload, in_tree, out_tree = se.serialize(ours)
  jpayload, jin, jout = jse.serialize(theirs)
  assert isinstance(payload, bytes) and repr(in_tree) == repr(jin)
  assert repr(out_tree) == repr(jout)
  got = se.deserialize_and_load(payload, in_tree, out_tree)(x, 3.0)["s"]
  # NB: JAX's loads onto every device unless told (and then fails to run with 4 CPU devices)
  want = jse.deserialize_and_load(jpayload, jin, jout,
                                  execution_devices=jax.devices()[:1])(x, 3.0)["s"]
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
  loaded = se.deserialize_and_load(payload, in_tree, out_tree, backend="cpu",
                                   execution_devices=sc.devices()[:1])
  np.testing.assert_allclose(np.asarray(loaded(x, 3.0)["s"]), np.asarray(want), rtol=1e-6)
  # a fresh process loads the payload with the trees it returned (pickled by the user)
  import pickle
  path = tmp_path / "exe.pkl"
  path.write_bytes(pickle.dumps((payload, in_tree, out_tree)))
  script = ("import pickle, sys, numpy as np\n"
            "from stagecraft.experimental import serialize_executable as se\n"
            "p, i, o = pickle.loads(open(sys.argv[1], 'rb').read())\n"
            "print(np.asarray(se.deserialize_and_load(p, i, o)(np.ones(5, np.float32), 2.0)"
            "['s']).tolist())\n")
  import subprocess
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [os.path.join(os.path.dirname(__file__), "..", "src"), os.environ.get("PYTHONPATH", "")]))
  out = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True,
                       text=True, env=env, timeout=120)
  assert out.returncode == 0, out.stderr[-2000:]
  np.testing.assert_allclose(eval(out.stdout), [2 * np.sin(1.0)] * 5, rtol=1e-6)


def test_serialize_executable_errors():
  from stagecraft.experimental import serialize_executable as se
  compiled = sc.jit(lambda a: a + 1).lower(np.ones(2, np.float32)).compile()
  payload, in_tree, out_tree = se.serialize(compiled)
  with pytest.raises(TypeError, match="expected a Compiled"):
    se.serialize(sc.jit(lambda a: a + 1))
  with pytest.raises(ValueError, match="compiled for 'cpu', not for backend 'tpu'"):
    se.deserialize_and_load(payload, in_tree, out_tree, backend="tpu")
  with pytest.raises(ValueError, match=r"compiled for devices \[0\]; stagecraft loads it onto "
                                       r"those only, got execution_devices with ids \[1\]"):
    se.deserialize_and_load(payload, in_tree, out_tree, execution_devices=sc.devices()[1:2])
  with pytest.raises(ValueError):
    se.deserialize_and_load(payload[:-7] + b"garbage", in_tree, out_tree)


# ---------------------------------------------------------------------------
# jax.experimental.compute_on


def test_compute_on_runs_and_prints_as_jaxs_on_cpu():
  from jax.experimental.compute_on import compute_on as jcompute_on
  from stagecraft.experimental.compute_on import compute_on, current_compute_type

  def make(lib, ctx):
    g = lib.jit(lambda x: x * 2)

    @lib.jit
    def f(x):
      with ctx("device_host"):
        y = g(x)
      return y + 1
    return f
  x = np.arange(3.0, dtype=np.float32)
  ours, theirs = make(sc, compute_on), make(jax, jcompute_on)
  np.testing.assert_array_equal(np.asarray(ours(x)), np.asarray(theirs(x)))
  assert str(sc.make_jaxpr(ours)(x)) == str(jax.make_jaxpr(theirs)(x))
  assert current_compute_type() is None
  with compute_on("device"):
    with compute_on("gpu_stream:1"):
      assert current_compute_type() == "gpu_stream:1"
    assert current_compute_type() == "device"
  assert current_compute_type() is None


def test_compute_on_errors_match_jax():
  from jax.experimental.compute_on import compute_on as jcompute_on
  from stagecraft.experimental.compute_on import compute_on, compute_on2
  for value, err in [("bogus", ValueError), (3, TypeError)]:
    with pytest.raises(err) as ours:
      with compute_on(value):
        pass
    with pytest.raises(err) as theirs:
      with jcompute_on(value):
        pass
    assert str(ours.value) == str(theirs.value)
  with pytest.raises(ValueError, match="Invalid compute type host"):
    compute_on2(lambda x: x, compute_type="host", out_memory_spaces=None)


def test_compute_on2_runs_the_function():
  from stagecraft.experimental.compute_on import compute_on2
  x = np.linspace(0, 1, 4).astype(np.float32)
  h = compute_on2(lambda v: jnp.sin(v) * 2, compute_type="device_host", out_memory_spaces=None)
  np.testing.assert_allclose(np.asarray(sc.jit(h)(x)), np.sin(x) * 2, rtol=1e-6)
  deco = compute_on2(compute_type="device", out_memory_spaces=None)(lambda v: v + 1)
  np.testing.assert_allclose(np.asarray(deco(x)), x + 1)


def test_dir_lists_the_lazily_loaded_names():
  """`dir()` of `experimental` and `sharding` lists what attribute access serves (JAX's
  `dir(jax.experimental)` lists its submodules; `jax.sharding` has reshard, auto_axes and
  explicit_axes)."""
  import stagecraft.experimental as experimental
  import stagecraft.sharding as sharding
  for name in ("shard_map", "compilation_cache", "checkify", "io_callback", "ode",
               "custom_partitioning"):
    assert name in dir(experimental), name
    assert getattr(experimental, name) is not None
  assert experimental.shard_map.__name__ == "stagecraft.experimental.shard_map"
  theirs = {n for n in dir(jax.sharding) if not n.startswith("_")}
  ours = {n for n in dir(sharding) if not n.startswith("_")}
  assert theirs - ours == set(), theirs - ours
  for name in ("reshard", "auto_axes", "explicit_axes", "ManualAxisType"):
    assert name in ours and callable(getattr(sharding, name))
