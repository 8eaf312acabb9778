"""Cold start (issue 25): `import stagecraft` and a first computation never import `jax`;
the optional subsystems load on first use; the jaxlib-only runtime pieces (CPU client,
compile options, mesh shardings) agree with what JAX builds.

The import checks run in fresh interpreters (this process has jax imported as the oracle).
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jax
from jax._src import compiler as jax_compiler
from jaxlib import xla_client as xc

import stagecraft as sc
from stagecraft.runtime import client
from stagecraft.sharding import NamedSharding, PartitionSpec as P


def _run(code: str, **env) -> str:
  """Runs `code` in a fresh interpreter (XLA_FLAGS and JAX_* variables as given, else
  unset); returns its stdout; fails the test with its stderr if it fails."""
  e = {k: v for k, v in os.environ.items()
       if k != "XLA_FLAGS" and not k.startswith("JAX_")}
  e.update(env)
  out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=240, env=e)
  assert out.returncode == 0, out.stderr[-3000:]
  return out.stdout


#: Modules `import stagecraft` must not load: JAX itself, and the optional subsystems (and
#: the third-party packages only they use). NB: `stagecraft.dlpack` is loaded: `jnp.from_dlpack`
#: is built on it, as JAX's, and it costs ~0.4 ms (its runtime imports are loaded already).
OPTIONAL = ("jax", "scipy", "plum", "stagecraft.implicit", "stagecraft.optim",
            "stagecraft.cli", "stagecraft.compat", "stagecraft.example_libraries",
            "stagecraft.export", "stagecraft.experimental", "stagecraft.distributed",
            "stagecraft.profiler", "stagecraft.ffi", "stagecraft.image",
            "stagecraft.ops", "stagecraft.extend", "stagecraft.flatten_util",
            "stagecraft.test_util", "stagecraft.scipy.stats", "stagecraft.scipy.linalg",
            "stagecraft.scipy.signal", "stagecraft.scipy.optimize")


def test_import_loads_no_optional_subsystem():
  out = _run(f"""
      import sys
      import stagecraft
      print(sorted(m for m in {OPTIONAL!r} if m in sys.modules))
      """)
  assert out.strip() == "[]", out


def test_first_computations_never_import_jax():
  # jit (one and several results), eager ops, a host read, LAPACK kernels (FFI targets
  # registered by the runtime), host callbacks, donation, grad/vmap/scan, random.
  out = _run("""
      import sys
      import numpy as np
      import stagecraft as sc, stagecraft.numpy as jnp
      y = sc.jit(lambda x: x * 2 + 1)(np.arange(3, dtype=np.float32)).block_until_ready()
      assert "jax" not in sys.modules, "jit"
      a, b = sc.jit(lambda x: (x, x + 1))(jnp.ones(2))
      z = jnp.ones(3) + y
      assert np.asarray(z).tolist() == [2.0, 4.0, 6.0] and float(b[0]) == 2.0
      inv = jnp.linalg.inv(jnp.array([[2.0, 1.0], [1.0, 3.0]]))
      np.testing.assert_allclose(np.asarray(inv), np.linalg.inv([[2.0, 1.0], [1.0, 3.0]]),
                                 rtol=1e-6)
      cb = sc.jit(lambda v: sc.pure_callback(lambda u: u * 3, sc.ShapeDtypeStruct((2,),
                                             np.float32), v))(jnp.ones(2))
      assert np.asarray(cb).tolist() == [3.0, 3.0]
      d = sc.jit(lambda v: v + 1, donate_argnums=0)(jnp.ones(3))
      g = sc.grad(lambda v: jnp.sin(v).sum())(jnp.zeros(2))
      s = sc.lax.scan(lambda c, v: (c + v, c), 0.0, jnp.arange(3.0))[0]
      r = sc.random.normal(sc.random.key(0), (2,))
      assert np.asarray(g).tolist() == [1.0, 1.0] and float(s) == 3.0 and r.shape == (2,)
      assert np.asarray(sc.vmap(jnp.sum)(jnp.ones((2, 3)))).tolist() == [3.0, 3.0]
      # an Array's devices, sharding and DLPack device without JAX's Python layer
      dev = sc.devices()[0]
      assert y.devices() == {dev} and y.device == dev, y.devices()
      assert y.sharding == sc.sharding.SingleDeviceSharding(dev)
      assert y.__dlpack_device__()[0] == 1
      assert sc.device_put(np.ones(2)).sharding.device_set == {dev}
      # (SciPy is loaded by linalg: jaxlib's LAPACK kernels call SciPy's LAPACK)
      print(sorted(m for m in ("jax", "jax.core") if m in sys.modules))
      """)
  assert out.strip().splitlines()[-1] == "[]", out


def test_multi_device_programs_run_without_jax():
  # pmap, a sharded jit and shard_map over 4 CPU devices (XLA_FLAGS) run without jax;
  # reading the pieces back afterwards gives the right values.
  out = _run("""
      import sys
      import numpy as np
      import stagecraft as sc, stagecraft.numpy as jnp
      from stagecraft.sharding import NamedSharding, PartitionSpec as P
      assert sc.device_count() == 4
      y = sc.pmap(lambda x: x * 2)(jnp.arange(4.0)).block_until_ready()
      mesh = sc.make_mesh((2, 2), ("x", "y"))
      x = sc.device_put(np.arange(16.0).reshape(4, 4), NamedSharding(mesh, P("x", "y")))
      z = sc.jit(lambda a: a.sum(0))(x).block_until_ready()
      # NB: under jit (eagerly, a shard_map reads its mesh-laid-out arguments on the host)
      w = sc.jit(sc.shard_map(lambda a: a * 2, mesh=mesh, in_specs=P("x", "y"),
                              out_specs=P("x", "y")))(x).block_until_ready()
      print("jax" in sys.modules)
      assert np.asarray(y).tolist() == [0.0, 2.0, 4.0, 6.0]
      assert np.asarray(z).tolist() == np.arange(16.0).reshape(4, 4).sum(0).tolist()
      assert (np.asarray(w) == 2 * np.arange(16.0).reshape(4, 4)).all()
      """, XLA_FLAGS="--xla_force_host_platform_device_count=4")
  assert out.strip().splitlines()[0] == "False", out


@pytest.mark.parametrize("env, code, want", [
    ({}, "", 1),
    ({"XLA_FLAGS": "--xla_force_host_platform_device_count=3"}, "", 3),
    ({"JAX_NUM_CPU_DEVICES": "5"}, "", 5),
    ({}, "sc.config.update('jax_num_cpu_devices', 2)", 2),
])
def test_cpu_device_count(env, code, want):
  out = _run(f"""
      import sys
      import stagecraft as sc
      {code}
      print(sc.device_count(), sc.local_device_count(), sc.default_backend(),
            "jax" in sys.modules)
      """, **env)
  assert out.split() == [str(want), str(want), "cpu", "False"], out


def test_lazy_subsystems_work_on_first_access():
  out = _run("""
      import sys
      import numpy as np
      import stagecraft as sc
      import stagecraft.numpy as jnp
      assert abs(float(sc.scipy.special.erf(0.5)) - 0.5204998778) < 1e-6
      assert abs(float(sc.scipy.stats.norm.cdf(0.0)) - 0.5) < 1e-7
      assert "stagecraft.scipy.stats" in sys.modules
      opt_init, opt_update, get_params = sc.example_libraries.optimizers.sgd(0.1)
      assert float(get_params(opt_update(0, 1.0, opt_init(1.0)))) == 0.9
      tx = sc.optim.sgd(0.5)
      upd, _ = tx.update(jnp.ones(2), tx.init(jnp.zeros(2)))
      assert np.asarray(upd).tolist() == [-0.5, -0.5]
      assert "plum" not in sys.modules
      assert callable(sc.implicit.implicit) and "plum" in sys.modules
      err, out = sc.experimental.checkify.checkify(lambda x: x + 1)(1.0)
      assert float(out) == 2.0
      exp = sc.export.export(sc.jit(jnp.sin))(sc.ShapeDtypeStruct((2,), np.float32))
      assert exp.in_avals[0].shape == (2,)
      assert sc.extend.backend.get_backend().platform == "cpu"
      assert sc.flatten_util.ravel_pytree({"a": jnp.ones(2)})[0].shape == (2,)
      print("ok")
      """)
  assert out.strip().splitlines()[-1] == "ok", out


def test_unknown_platform_is_refused():
  if client.uses_jax():
    pytest.skip("a PJRT plugin is installed: the platforms come from JAX's registry")
  # JAX's words (chex matches "Unknown backend")
  with pytest.raises(RuntimeError, match=r"Unknown backend: 'tpu' requested.*present are: cpu"):
    client.get_backend("tpu")
  with pytest.raises(RuntimeError, match=r"Unknown backend foo\. Available backends are \['cpu'\]"):
    client.get_backend("foo")
  with pytest.raises(TypeError, match="backend must be a string"):
    client.get_backend(3)


@pytest.mark.parametrize("replicas, partitions, assignment", [
    (1, 1, None), (1, 1, [[0]]), (1, 4, [[0, 1, 2, 3]]), (4, 1, [0, 1, 2, 3]),
    (2, 2, [[0, 1], [2, 3]]),
])
def test_compile_options_match_jax(replicas, partitions, assignment):
  ours = client.compile_options(replicas, partitions, assignment)
  theirs = jax_compiler.get_compile_options(replicas, partitions, assignment)
  assert ours.SerializeAsString() == theirs.SerializeAsString()


def test_compile_options_reject_a_bad_assignment():
  with pytest.raises(ValueError, match="does not match"):
    client.compile_options(2, 1, [[0, 1]])


_SPECS = [
    ((4,), ("x",), P("x"), 1), ((4,), ("x",), P(), 2), ((4,), ("x",), P(None, "x"), 2),
    ((2, 2), ("x", "y"), P("x", "y"), 2), ((2, 2), ("x", "y"), P("y", "x"), 2),
    ((2, 2), ("x", "y"), P(("x", "y")), 1), ((2, 2), ("x", "y"), P(("y", "x")), 3),
    ((2, 2), ("x", "y"), P("y"), 2), ((2, 2), ("x", "y"), P(None, "x"), 3),
    ((1, 4), ("a", "b"), P("a", "b"), 2), ((4, 1), ("a", "b"), P("b"), 1),
    ((2, 1, 2), ("a", "b", "c"), P("c", None, "a"), 3),
]


@pytest.mark.parametrize("shape, names, spec, ndim", _SPECS)
def test_mesh_hlo_sharding_matches_jax(shape, names, spec, ndim):
  devs = np.array(sc.devices()[:int(np.prod(shape))])
  if devs.size < int(np.prod(shape)):
    pytest.skip("needs 4 CPU devices")
  mesh = sc.sharding.Mesh(devs.reshape(shape), names)
  ours = NamedSharding(mesh, spec)._runtime
  jmesh = jax.sharding.Mesh(devs.reshape(shape), names)
  jspec = jax.sharding.PartitionSpec(*spec)
  theirs = jax.sharding.NamedSharding(jmesh, jspec)
  assert ours._to_xla_hlo_sharding(ndim) == theirs._to_xla_hlo_sharding(ndim)
  assert list(ours._internal_device_list) == list(devs.flat)
  assert ours.device_set == set(devs.flat)


def test_mesh_sharding_places_buffers():
  devs = np.array(sc.devices()[:4])
  if devs.size < 4:
    pytest.skip("needs 4 CPU devices")
  mesh = sc.sharding.Mesh(devs.reshape(2, 2), ("x", "y"))
  x = np.arange(24.0, dtype=np.float32).reshape(4, 6)
  a = sc.device_put(x, NamedSharding(mesh, P("y", "x")))
  for shard in a.addressable_shards:
    np.testing.assert_array_equal(np.asarray(shard.data), x[shard.index])
  np.testing.assert_array_equal(np.asarray(a), x)
  assert NamedSharding(mesh, P("x"))._runtime == NamedSharding(mesh, P("x"))._runtime
  assert NamedSharding(mesh, P("x"))._runtime != NamedSharding(mesh, P("y"))._runtime


def test_runtime_sharding_of_one_device():
  d = sc.devices()[0]
  s = client.single_device_sharding(d)
  assert s is client.single_device_sharding(d)
  assert s.memory_kind in (None, "device")
  assert s._to_xla_hlo_sharding(2).is_replicated()
  assert isinstance(client.get_backend(), xc.Client)


def test_no_xla_info_lines_on_stderr_as_jax():
  """A program prints nothing on stderr (JAX prints no XLA INFO lines such as
  `PjRt-IFRT device count`); `TF_CPP_MIN_LOG_LEVEL=0` still asks XLA for them."""
  code = "import stagecraft as sc; print(sc.numpy.ones(3) + 1)"
  e = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL",
                                                        "JAX_LOGGING_LEVEL")}
  quiet = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=240, env=e)
  assert quiet.returncode == 0 and quiet.stdout.strip() == "[2. 2. 2.]"
  assert "PjRt" not in quiet.stderr, quiet.stderr
  loud = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        timeout=240, env={**e, "TF_CPP_MIN_LOG_LEVEL": "0"})
  assert "PjRt-IFRT device count" in loud.stderr


def test_no_xla_info_lines_from_the_runner(tmp_path):
  # The runner imports the real jax (which sets TF_CPP_MIN_LOG_LEVEL's default after
  # jaxlib has read the environment): stderr stays as a JAX program's.
  script = tmp_path / "prog.py"
  script.write_text("import jax.numpy as jnp\nprint(jnp.ones(3) + 1)\n")
  e = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL",
                                                        "JAX_LOGGING_LEVEL")}
  out = subprocess.run([sys.executable, "-m", "stagecraft", "run", str(script)],
                       capture_output=True, text=True, timeout=240, env=e)
  assert out.returncode == 0 and out.stdout.strip() == "[2. 2. 2.]", out.stderr
  assert out.stderr == "", out.stderr
