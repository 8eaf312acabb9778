"""stagecraft.export for several platforms and over device meshes (JAX's export guide,
"Cross-platform" and "Device-polymorphic export"): each checked against JAX 0.10.2 running
the same program in this process (4 CPU devices, tests/conftest.py)."""
import re

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from jax.sharding import AbstractMesh as JAbstractMesh
from jax.sharding import Mesh as JMesh
from jax.sharding import NamedSharding as JNamedSharding
from jax.sharding import PartitionSpec as JP

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import export, lax
from stagecraft.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec as P
from _util import error_of as _error


def _main_line(exp) -> str:
  return re.search(r".*@main.*", exp.mlir_module()).group(0)


# ---------------------------------------------------------------------------
# Several platforms


def test_multi_platform_cos_as_jax():
  e = export.export(sc.jit(lax.cos), platforms=["tpu", "cpu", "cuda"])(1.)
  j = jax.export.export(jax.jit(jax.lax.cos), platforms=["tpu", "cpu", "cuda"])(1.)
  assert e.platforms == j.platforms == ("tpu", "cpu", "cuda")
  # main takes the platform index first, as JAX's
  assert _main_line(e) == _main_line(j)
  assert e.uses_global_constants == j.uses_global_constants is True
  assert e.module_kept_var_idx == j.module_kept_var_idx
  assert repr(e.call(1.)) == repr(j.call(1.)) == (
      "Array(0.5403023, dtype=float32, weak_type=True)")
  # a program without platform-specific lowerings holds one body for all platforms
  assert e.mlir_module().count("stablehlo.cosine") == 1


def test_platform_dependent_picks_the_calling_platform():
  def f(x):
    return lax.platform_dependent(x, cpu=lambda x: x * 2., cuda=lambda x: x * 3.,
                                  default=lambda x: x * 5.)

  def fj(x):
    return jax.lax.platform_dependent(x, cpu=lambda x: x * 2., cuda=lambda x: x * 3.,
                                      default=lambda x: x * 5.)

  fj.__name__ = "f"

  x = np.float32(1.5)
  for platforms in (["cuda", "cpu"], ["cpu", "tpu", "cuda"]):
    e = export.export(sc.jit(f), platforms=platforms)(x)
    j = jax.export.export(jax.jit(fj), platforms=platforms)(x)
    assert repr(e.call(x)) == repr(j.call(x)) == "Array(3., dtype=float32)"
    assert repr(sc.jit(e.call)(x)) == repr(jax.jit(j.call)(x))
    assert e.mlir_module().count('"stablehlo.case"') == 1   # bodies differ: a case on the index
    r = export.deserialize(e.serialize(vjp_order=1))
    assert r.platforms == tuple(platforms)
    assert float(r.call(x)) == 3.0
    assert float(sc.grad(r.call)(x)) == float(jax.grad(j.call)(x)) == 2.0
  # not among the platforms: JAX's error, or the first platform's lowering when allowed
  e = export.export(sc.jit(f), platforms=["tpu", "cuda"])(x)
  j = jax.export.export(jax.jit(fj), platforms=["tpu", "cuda"])(x)
  assert _error(lambda: e.call(x)) == _error(lambda: j.call(x))
  e = export.export(sc.jit(f), platforms=["tpu", "cuda"],
                    disabled_checks=[export.DisabledSafetyCheck.platform()])(x)
  j = jax.export.export(jax.jit(fj), platforms=["tpu", "cuda"],
                        disabled_checks=[jax.export.DisabledSafetyCheck.platform()])(x)
  assert float(e.call(x)) == float(j.call(x)) == 7.5


def test_platform_specific_kernels_in_one_module():
  a = (np.eye(3) * 4 + 1).astype(np.float32)
  e = export.export(sc.jit(jnp.linalg.cholesky), platforms=["cuda", "cpu"])(a)
  text = e.mlir_module()
  assert "cusolver_potrf_ffi" in text and "lapack_spotrf_ffi" in text
  want = jax.jit(jjnp.linalg.cholesky)(a)
  np.testing.assert_allclose(e.call(a), want, rtol=1e-6)
  r = export.deserialize(e.serialize(vjp_order=1))
  g = sc.grad(lambda m: r.call(m).sum())(a)
  gj = jax.grad(lambda m: jjnp.linalg.cholesky(m).sum())(a)
  np.testing.assert_allclose(g, gj, rtol=1e-5, atol=1e-6)


def test_multi_platform_with_symbolic_dimensions():
  b, = export.symbolic_shape("b")
  bj, = jax.export.symbolic_shape("b")
  e = export.export(sc.jit(lambda x: jnp.cos(x) * 2), platforms=["cpu", "tpu"])(
      sc.ShapeDtypeStruct((b, 3), np.float32))
  j = jax.export.export(jax.jit(lambda x: jjnp.cos(x) * 2), platforms=["cpu", "tpu"])(
      jax.ShapeDtypeStruct((bj, 3), np.float32))
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  np.testing.assert_array_equal(e.call(x), j.call(x))
  np.testing.assert_array_equal(sc.jit(e.call)(x), j.call(x))
  assert e.uses_global_constants and j.uses_global_constants


def test_bad_platforms():
  x = np.float32(1)
  with pytest.raises(TypeError, match=r"platforms=\['cpu'\]"):
    export.export(sc.jit(jnp.sin), platforms="cpu")
  with pytest.raises(ValueError, match="unknown platform 'metal'"):
    export.export(sc.jit(jnp.sin), platforms=["cpu", "metal"])
  with pytest.raises(ValueError, match="twice"):
    export.export(sc.jit(jnp.sin), platforms=["cpu", "cpu"])
  # a deserialized multi-platform module is checked against its header
  e = export.export(sc.jit(jnp.sin), platforms=["cpu", "cuda"])(x)
  np.testing.assert_allclose(export.deserialize(e.serialize()).call(x), np.sin(x), rtol=1e-6)


# ---------------------------------------------------------------------------
# Over a device mesh


def f(x):
  return x.T


def _shards(a):
  return [(s.device.id, s.index) for s in a.addressable_shards]


def test_abstract_mesh_export_as_jax():
  e = export.export(sc.jit(f))(sc.ShapeDtypeStruct(
      (32,), np.int32, sharding=NamedSharding(AbstractMesh((4,), ("a",)), P("a"))))
  jm = JAbstractMesh((4,), ("a",))
  j = jax.export.export(jax.jit(f))(jax.ShapeDtypeStruct(
      (32,), np.int32, sharding=JNamedSharding(jm, JP("a"))))
  assert e.nr_devices == j.nr_devices == 4
  # NB: JAX 0.10.2 keeps the layouts as NamedShardings (in_shardings_jax); the HLO ones are None
  assert e.in_shardings_hlo == j.in_shardings_hlo == (None,)
  assert e.out_shardings_hlo == j.out_shardings_hlo == (None,)
  assert repr(e.in_shardings_jax(AbstractMesh((4,), ("a",)))) == repr(
      j.in_shardings_jax(jm)) == (
      "(NamedSharding(mesh=AbstractMesh('a': 4, axis_types=(Auto,)), spec=P('a',)),)")
  assert "mhlo.num_partitions = 4" in e.mlir_module()
  devs, jdevs = sc.devices(), jax.devices()
  # called on a mesh of the same devices, and on a mesh of another shape (resharded)
  for order in ([0, 1, 2, 3], [3, 2, 1, 0]):
    arg = sc.device_put(jnp.arange(32), NamedSharding(Mesh([devs[i] for i in order], ("a",)),
                                                      P("a")))
    jarg = jax.device_put(jjnp.arange(32),
                          JNamedSharding(JMesh([jdevs[i] for i in order], ("a",)), JP("a")))
    r, rj = e.call(arg), j.call(jarg)
    np.testing.assert_array_equal(r, rj)
    assert _shards(r) == _shards(rj)
    other = Mesh(np.array([devs[i] for i in order]).reshape(2, 2), ("b", "c"))
    jother = JMesh(np.array([jdevs[i] for i in order]).reshape(2, 2), ("b", "c"))
    r = e.call(sc.device_put(arg, NamedSharding(other, P("b"))))
    rj = j.call(jax.device_put(jarg, JNamedSharding(jother, JP("b"))))
    np.testing.assert_array_equal(r, rj)
    assert _shards(r) == _shards(rj)


def test_concrete_mesh_export_and_calls_as_jax():
  devs, jdevs = sc.devices(), jax.devices()
  mesh, jmesh = Mesh(devs, ("a",)), JMesh(jdevs, ("a",))

  def g(x, y):
    return {"s": jnp.sin(x) * 2, "t": (x @ y).sum()}

  def gj(x, y):
    return {"s": jjnp.sin(x) * 2, "t": (x @ y).sum()}

  gj.__name__ = "g"

  specs = (sc.ShapeDtypeStruct((8, 4), np.float32, sharding=NamedSharding(mesh, P("a"))),
           sc.ShapeDtypeStruct((4, 2), np.float32))
  jspecs = (jax.ShapeDtypeStruct((8, 4), np.float32, sharding=JNamedSharding(jmesh, JP("a"))),
            jax.ShapeDtypeStruct((4, 2), np.float32))
  e = export.export(sc.jit(g, out_shardings={"s": NamedSharding(mesh, P(None, "a")),
                                             "t": NamedSharding(mesh, P())}))(*specs)
  j = jax.export.export(jax.jit(gj, out_shardings={"s": JNamedSharding(jmesh, JP(None, "a")),
                                                   "t": JNamedSharding(jmesh, JP())}))(*jspecs)
  assert e.nr_devices == j.nr_devices == 4
  assert e.in_shardings_hlo == j.in_shardings_hlo == (None, None)
  assert [repr(s) for s in e.out_shardings_jax(mesh)] == [
      repr(s) for s in j.out_shardings_jax(jmesh)]
  calling = Mesh(devs[::-1], ("a",))
  jcalling = JMesh(jdevs[::-1], ("a",))
  assert [repr(s) for s in e.in_shardings_jax(calling)] == [
      repr(s) for s in j.in_shardings_jax(jcalling)]
  x = np.arange(32, dtype=np.float32).reshape(8, 4) / 7
  y = np.ones((4, 2), np.float32)
  xs = sc.device_put(x, e.in_shardings_jax(calling)[0])
  xj = jax.device_put(x, j.in_shardings_jax(jcalling)[0])
  for fn, fj in ((e.call, j.call), (sc.jit(e.call), jax.jit(j.call))):
    r, rj = fn(xs, y), fj(xj, y)
    np.testing.assert_allclose(r["s"], rj["s"], rtol=1e-6)
    np.testing.assert_allclose(r["t"], rj["t"], rtol=1e-5)
    assert _shards(r["s"]) == _shards(rj["s"])
  # a mesh of another shape than exported: JAX's error
  bad = Mesh(np.array(devs).reshape(2, 2), ("a", "b"))
  jbad = JMesh(np.array(jdevs).reshape(2, 2), ("a", "b"))
  assert _error(lambda: e.in_shardings_jax(bad)) == _error(lambda: j.in_shardings_jax(jbad))
  # called on one device: JAX's error
  assert _error(lambda: e.call(x, y)) == _error(lambda: j.call(x, y))
  assert _error(lambda: e.call(x, y))[0] is ValueError


def test_mesh_export_round_trip_grad_and_constraints():
  devs = sc.devices()
  mesh = Mesh(np.array(devs).reshape(2, 2), ("x", "y"))
  jmesh = JMesh(np.array(jax.devices()).reshape(2, 2), ("x", "y"))

  def h(w, v):
    w = sc.lax.with_sharding_constraint(w * 2, NamedSharding(mesh, P("x", "y")))
    return jnp.tanh(w @ v).sum()

  def hj(w, v):
    w = jax.lax.with_sharding_constraint(w * 2, JNamedSharding(jmesh, JP("x", "y")))
    return jjnp.tanh(w @ v).sum()

  w = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
  v = np.linspace(0, 1, 16, dtype=np.float32).reshape(8, 2)
  e = export.export(sc.jit(h, in_shardings=(NamedSharding(mesh, P(None, "y")),
                                            NamedSharding(mesh, P()))))(w, v)
  j = jax.export.export(jax.jit(hj, in_shardings=(JNamedSharding(jmesh, JP(None, "y")),
                                                  JNamedSharding(jmesh, JP()))))(w, v)
  r = export.deserialize(e.serialize(vjp_order=1))
  assert r.nr_devices == 4
  assert [repr(s) for s in r.in_shardings_jax(mesh.abstract_mesh)] == [
      repr(s) for s in j.in_shardings_jax(jmesh.abstract_mesh)]
  args = [sc.device_put(a, s) for a, s in zip((w, v), r.in_shardings_jax(mesh))]
  jargs = [jax.device_put(a, s) for a, s in zip((w, v), j.in_shardings_jax(jmesh))]
  np.testing.assert_allclose(r.call(*args), j.call(*jargs), rtol=1e-6)
  g = sc.grad(r.call)(*args)
  gj = jax.grad(j.call)(*jargs)
  np.testing.assert_allclose(g, gj, rtol=1e-5, atol=1e-7)


def test_one_device_export_called_on_sharded_arguments():
  # JAX's "special facility": an export for one device without shardings runs on arguments
  # laid out over several devices
  arg = np.arange(4, dtype=np.int32)
  e = export.export(sc.jit(jnp.cos))(arg)
  j = jax.export.export(jax.jit(jjnp.cos))(arg)
  assert e.nr_devices == j.nr_devices == 1
  a = sc.device_put(arg, NamedSharding(Mesh(sc.devices(), ("b",)), P("b")))
  aj = jax.device_put(arg, JNamedSharding(JMesh(jax.devices(), ("b",)), JP("b")))
  np.testing.assert_allclose(e.call(a), j.call(aj), rtol=1e-6)


def test_mesh_export_errors():
  am = AbstractMesh((4,), ("a",))
  bm = AbstractMesh((2, 2), ("a", "b"))
  with pytest.raises(ValueError, match="over one mesh"):
    export.export(sc.jit(lambda x, y: x + y))(
        sc.ShapeDtypeStruct((8,), np.float32, sharding=NamedSharding(am, P("a"))),
        sc.ShapeDtypeStruct((8,), np.float32, sharding=NamedSharding(bm, P("a"))))
  with pytest.raises(ValueError, match="divide|divisible"):
    export.export(sc.jit(f))(
        sc.ShapeDtypeStruct((6,), np.float32, sharding=NamedSharding(am, P("a"))))
  b, = export.symbolic_shape("b")
  with pytest.raises(NotImplementedError, match="symbolic dimensions and shardings"):
    export.export(sc.jit(f))(
        sc.ShapeDtypeStruct((b,), np.float32, sharding=NamedSharding(am, P("a"))))
