"""stagecraft.export (JAX's jax.export): the Exported's attributes against JAX's for the same
function, calls (eager, under jit, grad through the exported VJP), JAX's errors, the byte
format (round trips, a fresh process, tampered bytes), tree serialization, and the
self-contained `Compiled.serialize` (one device and several)."""
import collections
import os
import re
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import export, stages
from _util import error_of as _error

W = np.arange(3, dtype=np.float32)


def f(x, y):
  return {"a": jnp.sin(x) * y + W, "b": x.sum()}


def f_jax(x, y):
  return {"a": jjnp.sin(x) * y + W, "b": x.sum()}


f_jax.__name__ = "f"


X = np.array([0.5, -1.0, 2.0], np.float32)


def _tree_str(t):
  return re.sub(r"^Py\w+\(", "(", str(t))


def _run(script: str, env_extra=None) -> subprocess.CompletedProcess:
  env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **(env_extra or {})}
  return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                        text=True, env=env, timeout=180)


@pytest.fixture(scope="module")
def exported():
  return export.export(sc.jit(f))(sc.ShapeDtypeStruct((3,), np.float32), 2.0)


@pytest.fixture(scope="module")
def exported_jax():
  return jax.export.export(jax.jit(f_jax))(jax.ShapeDtypeStruct((3,), np.float32), 2.0)


def test_attributes_match_jax(exported, exported_jax):
  e, j = exported, exported_jax
  assert e.fun_name == j.fun_name == "f"
  assert repr(e.in_avals) == repr(j.in_avals)
  assert repr(e.out_avals) == repr(j.out_avals)
  assert _tree_str(e.in_tree) == _tree_str(j.in_tree)
  assert _tree_str(e.out_tree) == _tree_str(j.out_tree)
  for attr in ("nr_devices", "platforms", "ordered_effects", "unordered_effects",
               "module_kept_var_idx", "uses_global_constants", "in_shardings_hlo",
               "out_shardings_hlo", "calling_convention_version"):
    assert getattr(e, attr) == getattr(j, attr), attr
  assert e.in_shardings_jax(None) == j.in_shardings_jax(None)
  assert e.out_shardings_jax(None) == j.out_shardings_jax(None)
  assert str(e) == str(j) == "Exported(fun_name=f, ...)"
  assert e.has_vjp() and j.has_vjp()
  assert export.default_export_platform() == jax.export.default_export_platform()
  assert (export.minimum_supported_calling_convention_version,
          export.maximum_supported_calling_convention_version) == (
              jax.export.minimum_supported_calling_convention_version,
              jax.export.maximum_supported_calling_convention_version)
  text = e.mlir_module()
  # main's signature as JAX prints it: argument names as locations, results' key paths
  main = re.search(r".*@main.*", text).group(0)
  assert main == re.search(r".*@main.*", j.mlir_module()).group(0)
  assert main == ('  func.func public @main(%arg0: tensor<3xf32> loc("x"), %arg1: tensor<f32> '
                  'loc("y")) -> (tensor<3xf32> {jax.result_info = "result[\'a\']"}, '
                  'tensor<f32> {jax.result_info = "result[\'b\']"}) {')
  assert "stablehlo.sine" in text
  assert isinstance(e.mlir_module_serialized, bytes)


def test_vjp_exported_matches_jax(exported, exported_jax):
  v, jv = exported.vjp(), exported_jax.vjp()
  assert v.fun_name == jv.fun_name
  assert repr(v.in_avals) == repr(jv.in_avals)
  assert repr(v.out_avals) == repr(jv.out_avals)
  assert _tree_str(v.in_tree) == _tree_str(jv.in_tree)
  assert _tree_str(v.out_tree) == _tree_str(jv.out_tree)


def test_call_eager_jit_and_grad_match_jax(exported, exported_jax):
  want = exported_jax.call(X, 2.0)
  for got in (exported.call(X, 2.0), sc.jit(lambda x: exported.call(x, 2.0))(X)):
    np.testing.assert_allclose(got["a"], want["a"], rtol=1e-6)
    np.testing.assert_allclose(got["b"], want["b"], rtol=1e-6)
    assert got["a"].dtype == np.float32

  def loss(e):
    return lambda x, y: e.call(x, y)["a"].sum() * e.call(x, y)["b"]
  g = sc.grad(loss(exported), argnums=(0, 1))(X, 2.0)
  gj = jax.grad(loss(exported_jax), argnums=(0, 1))(X, 2.0)
  np.testing.assert_allclose(g[0], gj[0], rtol=1e-5)
  np.testing.assert_allclose(g[1], gj[1], rtol=1e-5)
  # under jit too, and the same numbers as differentiating f itself
  gjit = sc.jit(sc.grad(loss(exported)))(X, 2.0)
  np.testing.assert_allclose(gjit, sc.grad(lambda x, y: f(x, y)["a"].sum() * f(x, y)["b"])(X, 2.0),
                             rtol=1e-5)


def test_serialize_round_trip_and_vjp_orders(exported):
  e1 = export.deserialize(exported.serialize(vjp_order=2))
  assert isinstance(exported.serialize(), bytearray)
  # NB: as JAX's serialization, weak types are not kept (a deserialized function's results
  # are strongly typed: `Array(0.007, dtype=float32)` in JAX's export guide)
  assert e1.fun_name == "f" and e1.in_avals == tuple(a.update(weak_type=False)
                                                     for a in exported.in_avals)
  assert not any(a.weak_type for a in (*e1.in_avals, *e1.out_avals))
  assert e1.in_tree == exported.in_tree and e1.out_tree == exported.out_tree
  assert e1.mlir_module() == exported.mlir_module()
  assert e1.has_vjp() and e1.vjp().has_vjp() and not e1.vjp().vjp().has_vjp()
  out = e1.call(X, 2.0)
  np.testing.assert_allclose(out["a"], np.sin(X) * 2 + W, rtol=1e-6)
  g = sc.grad(lambda x: e1.call(x, 2.0)["a"].sum())(X)
  np.testing.assert_allclose(g, 2 * np.cos(X), rtol=1e-5)
  gg = sc.grad(lambda x: sc.grad(lambda z: e1.call(z, 2.0)["a"].sum())(x).sum())(X)
  np.testing.assert_allclose(gg, -2 * np.sin(X), rtol=1e-5)
  e0 = export.deserialize(exported.serialize())
  assert not e0.has_vjp()
  with pytest.raises(ValueError, match="No VJP is available"):
    sc.grad(lambda x: e0.call(x, 2.0)["b"])(X)
  with pytest.raises(ValueError, match="No VJP is available"):
    e0.serialize(vjp_order=1)
  with pytest.raises(ValueError, match="vjp_order"):
    exported.serialize(vjp_order=-1)


@pytest.mark.parametrize("args", [
    (np.ones(4, np.float32), 2.0), (np.ones(3, np.int32), 2.0),
    (np.ones((3, 1), np.float32), 2.0), (X, 2)])
def test_bad_arguments_raise_jax_errors(exported, exported_jax, args):
  t, msg = _error(lambda: exported.call(*args))
  tj, msgj = _error(lambda: exported_jax.call(*args))
  assert t is tj is ValueError
  assert msg == msgj


def test_bad_tree_and_transformations_raise_jax_error_types(exported, exported_jax):
  for e in (exported, exported_jax):
    with pytest.raises(ValueError, match="must have the same pytree structure as when the "
                                         "function 'f' was exported"):
      e.call(X, y=2.0)
  with pytest.raises(NotImplementedError, match="Batching rule for 'call_exported' not "
                                                "implemented"):
    sc.vmap(lambda x: exported.call(x, 2.0)["b"])(np.ones((2, 3), np.float32))
  with pytest.raises(NotImplementedError, match="Batching rule for 'call_exported' not "
                                                "implemented"):
    jax.vmap(lambda x: exported_jax.call(x, 2.0)["b"])(np.ones((2, 3), np.float32))
  for jvp, e in ((sc.jvp, exported), (jax.jvp, exported_jax)):
    with pytest.raises(TypeError, match="forward-mode autodiff"):
      jvp(lambda x: e.call(x, 2.0)["b"], (X,), (X,))
  for mod in (export, jax.export):
    with pytest.raises(ValueError, match="Function to be exported must be the result of `jit`"):
      mod.export(f)(X, 2.0)


def test_unused_arguments_pruned_as_in_jax():
  e = export.export(sc.jit(lambda x, y, z: x * 2 + z))(X, X, X)
  j = jax.export.export(jax.jit(lambda x, y, z: x * 2 + z))(X, X, X)
  assert e.module_kept_var_idx == j.module_kept_var_idx == (0, 2)
  np.testing.assert_allclose(export.deserialize(e.serialize()).call(X, X * 0 + 7, X),
                             j.call(X, X, X))
  ek = export.export(sc.jit(lambda x, y: x, keep_unused=True))(X, X)
  assert ek.module_kept_var_idx == (0, 1)


def test_static_args_kwargs_ints_and_x64():
  def g(x, n, *, scale):
    return (x * n * scale).astype(jnp.int32), x.shape[0]
  e = export.export(sc.jit(g, static_argnums=1))(X, 3, scale=np.float32(2))
  ej = jax.export.export(jax.jit(lambda x, n, *, scale: ((x * n * scale).astype(jjnp.int32),
                                                           x.shape[0]), static_argnums=1))(
      X, 3, scale=np.float32(2))
  assert _tree_str(e.in_tree) == _tree_str(ej.in_tree)
  assert repr(e.out_avals) == repr(ej.out_avals)
  d = export.deserialize(e.serialize(vjp_order=1))
  out = d.call(X, scale=np.float32(2))
  np.testing.assert_array_equal(out[0], (X * 6).astype(np.int32))
  g_ = sc.grad(lambda x: d.call(x, scale=np.float32(2))[0].astype(jnp.float32).sum())(X)
  np.testing.assert_array_equal(g_, np.zeros(3, np.float32))
  with sc.enable_x64():
    e64 = export.export(sc.jit(lambda x: x * 2))(np.arange(3.0))
    assert repr(e64.in_avals) == "(ShapedArray(float64[3]),)"
    r = export.deserialize(e64.serialize()).call(np.arange(3.0))
    assert r.dtype == np.float64
    np.testing.assert_array_equal(r, np.arange(3.0) * 2)


def test_control_flow_special_functions_and_linalg():
  def h(x, a):
    y = sc.lax.fori_loop(0, 3, lambda i, c: c * 0.5 + jnp.tanh(c), x)
    return sc.scipy.special.erf(y), jnp.linalg.solve(a, y)
  a = np.eye(3, dtype=np.float32) * 2 + 0.1
  e = export.deserialize(export.export(sc.jit(h))(X, a).serialize())
  got = sc.jit(e.call)(X, a)
  want = sc.jit(h)(X, a)
  np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
  np.testing.assert_allclose(got[1], want[1], rtol=1e-5)


def test_platforms_and_disabled_checks():
  e = export.export(sc.jit(jnp.sin), platforms=("cuda",))(X)
  assert e.platforms == ("cuda",)
  t, msg = _error(lambda: e.call(X))
  tj, msgj = _error(lambda: jax.export.export(jax.jit(jjnp.sin), platforms=("cuda",))(X).call(X))
  assert t is tj is ValueError and msg == msgj
  ok = export.export(sc.jit(jnp.sin), platforms=("cuda",),
                     disabled_checks=[export.DisabledSafetyCheck.platform()])(X)
  np.testing.assert_allclose(ok.call(X), np.sin(X), rtol=1e-6)
  assert export.deserialize(ok.serialize()).disabled_safety_checks == (
      export.DisabledSafetyCheck.platform(),)
  dc = export.DisabledSafetyCheck.custom_call("foo")
  assert str(dc) == str(jax.export.DisabledSafetyCheck.custom_call("foo")) == "custom_call:foo"
  assert dc.is_custom_call() == "foo"
  assert export.export(sc.jit(jnp.sin), platforms=())(X).platforms == (
      jax.export.export(jax.jit(jjnp.sin), platforms=())(X).platforms)
  for bad, err in ((("cpu", "cpu"), ValueError), ("cpu", TypeError),
                   (("cpu", "metal"), ValueError)):
    with pytest.raises(err):
      export.export(sc.jit(jnp.sin), platforms=bad)(X)


def test_unsupported_programs_raise_clear_errors():
  cb = sc.jit(lambda x: sc.pure_callback(np.sin, sc.ShapeDtypeStruct((3,), np.float32), x))
  cbj = jax.jit(lambda x: jax.pure_callback(np.sin, jax.ShapeDtypeStruct((3,), np.float32), x))
  for mod, fn in ((export, cb), (jax.export, cbj)):
    with pytest.raises(NotImplementedError, match="host_callbacks"):
      mod.export(fn)(X)
  # (symbolic dimensions are exported: tests/test_export_symbolic.py)


def test_symbolic_shape_parses():
  s = export.symbolic_shape("b, 4")
  sj = jax.export.symbolic_shape("b, 4")
  assert str(s) == str(sj) == "(b, 4)"
  assert export.is_symbolic_dim(s[0]) and not export.is_symbolic_dim(s[1])
  assert export.symbolic_shape("_, 4", like=(3, None)) == (3, 4)
  with pytest.raises(ValueError, match="syntax error"):
    export.symbolic_shape("b, , 4")
  assert sc.ShapeDtypeStruct(s, np.float32).shape == s
  specs = export.symbolic_args_specs((X,), "3")
  assert specs[0].shape == (3,)
  assert str(export.symbolic_args_specs((X,), "b")[0].shape) == "(b,)"


Point = collections.namedtuple("Point", "x y")


class Box:
  def __init__(self, v, tag):
    self.v, self.tag = v, tag


sc.tree_util.register_pytree_node(Box, lambda b: ((b.v,), b.tag), lambda tag, ch: Box(ch[0], tag))


def test_tree_serialization_registrations():
  def g(p, b, od):
    return Point(p.x + b.v, p.y * 2), od["z"] + od["a"]
  args = (Point(X, X), Box(X, "t"), collections.OrderedDict([("z", X), ("a", X)]))
  e = export.export(sc.jit(g))(*args)
  with pytest.raises(ValueError, match="unregistered type"):
    e.serialize()
  export.register_namedtuple_serialization(Point, serialized_name="test_export.Point")
  with pytest.raises(ValueError, match="Duplicate serialization registration"):
    export.register_namedtuple_serialization(Point, serialized_name="other")
  with pytest.raises(ValueError, match="Use `stagecraft.export.register_pytree_node_serial"):
    export.register_namedtuple_serialization(Box, serialized_name="box")
  export.register_pytree_node_serialization(
      Box, serialized_name="test_export.Box", serialize_auxdata=lambda tag: tag.encode(),
      deserialize_auxdata=lambda b: b.decode())
  d = export.deserialize(e.serialize())
  assert d.in_tree == e.in_tree and d.out_tree == e.out_tree
  out = d.call(*args)
  assert isinstance(out[0], Point)
  np.testing.assert_allclose(out[0].x, 2 * X)
  np.testing.assert_allclose(out[1], 2 * X)
  with pytest.raises(TypeError, match="string keys"):
    export.export(sc.jit(lambda d: d[1]))({1: X}).serialize()


def test_fresh_process_loads_the_bytes_alone(exported, tmp_path):
  path = tmp_path / "f.exported"
  path.write_bytes(exported.serialize(vjp_order=1))
  r = _run(f"""
      import numpy as np, stagecraft as sc
      from stagecraft import export
      e = export.deserialize(open({str(path)!r}, "rb").read())
      x = np.array([0.5, -1.0, 2.0], np.float32)
      out = sc.jit(lambda x: e.call(x, 2.0))(x)
      g = sc.grad(lambda x: e.call(x, 2.0)["b"])(x)
      print(e.fun_name, np.asarray(out["a"]).round(5).tolist(), float(out["b"]),
            np.asarray(g).tolist())
  """)
  assert r.returncode == 0, r.stderr[-2000:]
  name, rest = r.stdout.strip().splitlines()[-1].split(" ", 1)
  assert name == "f"
  want = (np.sin(X) * 2 + W).round(5).tolist()
  assert rest == f"{want} {float(X.sum())} [1.0, 1.0, 1.0]"


def test_bad_bytes_raise_value_errors(exported):
  data = bytes(exported.serialize())
  with pytest.raises(ValueError, match="not a serialized stagecraft Exported"):
    export.deserialize(b"hello world")
  with pytest.raises(ValueError, match="truncated|length"):
    export.deserialize(data[:-5])
  flipped = bytearray(data)
  flipped[-10] ^= 0xFF
  with pytest.raises(ValueError, match="checksum"):
    export.deserialize(bytes(flipped))
  newer = bytearray(data)
  newer[9] = 99
  with pytest.raises(ValueError, match="format version 99"):
    export.deserialize(bytes(newer))
  with pytest.raises(TypeError):
    export.deserialize("text")


_TAMPER = r"""
import json, sys
import numpy as np, stagecraft as sc, stagecraft.numpy as jnp
from stagecraft import export
from stagecraft.runtime import cache
from stagecraft.export import _export
e = export.export(sc.jit(lambda x: jnp.sin(x) * 2))(np.ones(3, np.float32))
(h0,), payload = cache.unseal(bytes(e.serialize()), b"SCEXPORT", _export.FORMAT_VERSION)
header = json.loads(h0)
what = sys.argv[1]
if what == "shape":
  header["exported"][0]["in_avals"][0][0] = [4]
elif what == "dtype":
  header["exported"][0]["out_avals"][0][1] = "int32"
elif what == "module":
  payload = b"ML\xefR" + bytes(range(256)) * 2
  header["exported"][0]["module_size"] = len(payload)
elif what == "kept":
  header["exported"][0]["module_kept_var_idx"] = [3]
data = cache.seal(b"SCEXPORT", _export.FORMAT_VERSION, (json.dumps(header).encode(),),
                  payload)   # re-checksummed
try:
  d = export.deserialize(data)
  print("LOADED", d.call(np.ones(3, np.float32)))
except ValueError as err:
  print("ValueError", err)
"""


@pytest.mark.parametrize("what", ["shape", "dtype", "module", "kept"])
def test_tampered_bytes_are_refused_not_run(what):
  # Run in a subprocess: a regression that crashes inside the runtime fails this test only.
  r = _run(_TAMPER.replace("sys.argv[1]", repr(what)))
  assert r.returncode == 0, r.stderr[-2000:]
  out = r.stdout.strip().splitlines()[-1]
  assert out.startswith("ValueError"), out


# ---------------------------------------------------------------------------
# Compiled.serialize: self-contained bytes, one device and several


def test_compiled_serialize_is_self_contained(tmp_path):
  def g(x, d):
    return {"y": x * W + d["b"], "s": jnp.sum(x)}
  c = sc.jit(g).lower(np.ones(3, np.float32), {"b": np.float32(2)}).compile()
  data = c.serialize()
  again = stages.deserialize_compiled(data)
  assert again.in_tree == c.in_tree and again.out_tree == c.out_tree
  np.testing.assert_allclose(again(X, {"b": np.float32(1)})["y"], X * W + 1)
  # JAX's signature (trees given) still works, and a given tree wins.
  np.testing.assert_allclose(
      stages.deserialize_compiled(data, c.in_tree, c.out_tree)(X, {"b": np.float32(1)})["s"],
      X.sum())
  (tmp_path / "c.bin").write_bytes(data)
  r = _run(f"""
      import numpy as np
      from stagecraft import stages
      from stagecraft.runtime import dispatch
      c = stages.deserialize_compiled(open({str(tmp_path / "c.bin")!r}, "rb").read())
      out = c(np.full(3, 2, np.float32), {{"b": np.float32(1)}})
      print(np.asarray(out["y"]).tolist(), float(out["s"]), dispatch.compile_count[0])
  """)
  assert r.returncode == 0, r.stderr[-2000:]
  assert r.stdout.split()[-5:] == ["[1.0,", "3.0,", "5.0]", "6.0", "0"]


class Crate(Box):
  pass


sc.tree_util.register_pytree_node(Crate, lambda b: ((b.v,), b.tag),
                                  lambda tag, ch: Crate(ch[0], tag))


def test_compiled_serialize_with_unregistered_tree_needs_trees():
  c = sc.jit(lambda b: b.v * 2).lower(Crate(X, "u")).compile()
  data = c.serialize()
  with pytest.raises(ValueError, match="hold no in_tree"):
    stages.deserialize_compiled(data)
  np.testing.assert_allclose(stages.deserialize_compiled(data, c.in_tree, c.out_tree)(
      Crate(X, "u")), 2 * X)


def test_tree_codec_round_trips():
  trees = [((1, [2, None]), {"b": 3, "a": (4,)}), collections.OrderedDict([("z", 1), ("y", 2)]),
           [], (), {}, None, 5]
  for t in trees:
    td = sc.tree_util.tree_structure(t)
    assert stages.tree_from_json(stages.tree_to_json(td)) == td
  for bad in ({"what": 1}, {"custom": "nope", "aux": "", "children": []}, "x", [1]):
    with pytest.raises(ValueError):
      stages.tree_from_json(bad)


_MULTI = r"""
import sys, numpy as np
import stagecraft as sc
from stagecraft import stages
from stagecraft.sharding import Mesh, NamedSharding, PartitionSpec as P
w = np.arange(3, dtype=np.float32)
if sys.argv[1] == "write":
  g = sc.jit(lambda x: sc.pmap(lambda v: v * 2 + w[0])(x).sum())
  open(sys.argv[2] + "/pmap.bin", "wb").write(g.lower(np.ones((2, 3), np.float32)).compile().serialize())
  mesh = Mesh(np.array(sc.devices()[:2]), ("x",))
  h = sc.jit(lambda x, y: (x * 2 + w.sum(), y), in_shardings=(NamedSharding(mesh, P("x")), None))
  open(sys.argv[2] + "/mesh.bin", "wb").write(h.lower(np.ones((4, 3), np.float32), np.float32(1)).compile().serialize())
  print("WROTE")
else:
  from stagecraft.runtime import dispatch
  p = stages.deserialize_compiled(open(sys.argv[2] + "/pmap.bin", "rb").read())
  m = stages.deserialize_compiled(open(sys.argv[2] + "/mesh.bin", "rb").read())
  r = m(np.ones((4, 3), np.float32), np.float32(1))
  print(float(p(np.ones((2, 3), np.float32))), float(np.asarray(r[0]).sum()),
        r[0].sharding.spec == P("x"), len(r[0].addressable_shards), dispatch.compile_count[0])
"""


def test_multi_device_compiled_serialize_in_a_fresh_process(tmp_path):
  env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
  script = _MULTI.replace("sys.argv[1]", "MODE").replace("sys.argv[2]", repr(str(tmp_path)))
  w = _run("MODE = 'write'\n" + script, env)
  assert w.returncode == 0 and "WROTE" in w.stdout, w.stderr[-2000:]
  r = _run("MODE = 'read'\n" + script, env)
  assert r.returncode == 0, r.stderr[-2000:]
  assert r.stdout.split()[-5:] == ["12.0", "60.0", "True", "2", "0"]
  one = _run(f"""
      from stagecraft import stages
      try:
        stages.deserialize_compiled(open({str(tmp_path / "mesh.bin")!r}, "rb").read())
      except ValueError as e:
        print("ValueError", e)
  """, {"XLA_FLAGS": ""})
  assert one.returncode == 0, one.stderr[-2000:]
  assert "ValueError" in one.stdout and "devices" in one.stdout
