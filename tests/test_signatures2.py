"""JAX 0.10.2's parameters for the top level (`jax.device_put`, `jit`, `checkpoint`, ...),
`jax.lax` (`out_sharding=`, `mul(out_dtype=)`, `dot(dimension_numbers=)`, ...) and public
classes (shardings, `ShapeDtypeStruct`, stages, `custom_vjp`, `Exported`): each parameter
JAX takes is taken under the same name and kind, and behaves as JAX's (values, placements,
printed jaxprs, error texts), each checked against JAX run here."""
from __future__ import annotations

import inspect
import warnings

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp
from test_jnp_signatures import _mismatches
from _util import sets_sorted

P_ = inspect.Parameter


def _kinds(f):
  return [(p.name, p.kind) for p in inspect.signature(f).parameters.values()]


# -- the scan: every public function of these modules takes JAX's parameters

#: Known gaps, (module, function, missing parameters): JAX's private export hook.
_GAPS = {("export", "export", ("_override_lowering_rules",))}


@pytest.mark.parametrize("mod", ["", "lax", "dtypes", "export", "random", "tree_util",
                                 "sharding"])
def test_every_jax_parameter_is_taken_by_name(mod):
  import importlib
  jmod = importlib.import_module("jax" + (f".{mod}" if mod else ""))
  smod = importlib.import_module("stagecraft" + (f".{mod}" if mod else ""))
  got = {(mod, name, tuple(missing)) for name, missing, _, _ in _mismatches(jmod, smod)}
  assert got == {g for g in _GAPS if g[0] == mod}


_FIXED = ["checkpoint", "remat", "device_put", "jit", "local_devices", "process_count",
          "process_index", "make_array_from_single_device_arrays", "make_jaxpr", "vmap",
          "lax.all_gather", "lax.broadcast", "lax.broadcasted_iota", "lax.empty", "lax.reduce",
          "lax.reduce_sum", "lax.rng_bit_generator", "lax.full", "lax.full_like", "lax.mul",
          "lax.dot", "lax.switch", "dtypes.canonicalize_dtype",
          "sharding.NamedSharding.devices_indices_map", "sharding.NamedSharding.shard_shape",
          "sharding.NamedSharding.with_memory_kind",
          "sharding.NamedSharding.check_compatible_aval",
          "sharding.SingleDeviceSharding.with_memory_kind", "sharding.Sharding.is_equivalent_to",
          "ShapeDtypeStruct", "stages.Lowered.compile", "stages.Traced.lower",
          "export.Exported.mlir_module", "custom_vjp.defvjp", "custom_jvp.defjvp",
          "custom_jvp.defjvps", "tree_util.Partial", "sharding.PartitionSpec.count",
          "sharding.PartitionSpec.index"]


def _get(root, path):
  for part in path.split("."):
    root = getattr(root, part)
  return root


@pytest.mark.parametrize("path", _FIXED)
def test_parameter_names_and_kinds_are_jax_s(path):
  assert _kinds(_get(sc, path)) == _kinds(_get(jax, path))


# -- lax: out_sharding / sharding, mul(out_dtype=), dot(dimension_numbers=), switch(operand=)


def _lax_calls(lib):
  lax, np_ = lib.lax, lib.numpy
  mesh = lib.make_mesh((4,), ("x",), devices=lib.devices()[:4])
  s = lib.sharding.NamedSharding(mesh, lib.sharding.PartitionSpec("x"))
  out = []
  with lib.set_mesh(mesh):
    out.append(lax.broadcast(np_.arange(3.), (8,), out_sharding=s))
    out.append(lax.broadcasted_iota(np_.int32, (8, 2), 0, out_sharding=s))
    out.append(lax.full((8,), 2.0, sharding=s))
    out.append(lax.full_like(np_.ones(8), 3, sharding=s))
    out.append(lax.empty((8,), np_.float32, out_sharding=s) * 0)
    out.append(lax.reduce_sum(np_.ones((8, 3)), (1,), out_sharding=s))
    out.append(lax.reduce(np_.ones((8, 3)), 0., lax.add, (1,), out_sharding=s))
    out.append(lax.rng_bit_generator(np_.zeros(4, np_.uint32), (8,), out_sharding=s)[1] * 0)
    out.append(lib.jit(lambda x: lax.broadcast(x, (8,), out_sharding=s))(np_.arange(3.)))
  return out


def test_out_sharding_gives_jax_s_values_and_shardings():
  ours, theirs = _lax_calls(sc), _lax_calls(jax)
  for a, b in zip(ours, theirs):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert (a.dtype, a.shape) == (b.dtype, b.shape)
    assert str(a.sharding.spec) == str(b.sharding.spec)
    assert sorted(d.id for d in a.devices()) == sorted(d.id for d in b.devices())


def _lax_values(lib):
  lax, np_ = lib.lax, lib.numpy
  i8 = np_.array([100, 3, -7], np_.int8)
  return [
      lax.mul(i8, i8, out_dtype=np_.int32),
      lax.mul(i8, np_.array([2, 2, 2], np_.int16), out_dtype=np_.float32),
      lax.mul(np_.float32(1.5), np_.float32(2.0)),
      lax.dot(np_.ones((2, 3, 4)), np_.arange(40.).reshape(2, 4, 5),
              dimension_numbers=(((2,), (1,)), ((0,), (0,)))),
      lax.dot(np_.arange(6.).reshape(2, 3), np_.arange(3.), precision="highest"),
      lax.switch(1, [lambda x: x, lambda x: x * 2], operand=np_.arange(3)),
      lax.switch(5, [lambda x: x, lambda x: x - 1], operand=4),
      lax.full((2,), 7, sharding=None), lax.empty((2,), np_.int32, out_sharding=None) * 0,
  ]


def test_keywords_give_jax_s_values():
  for a, b in zip(_lax_values(sc), _lax_values(jax)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert (a.dtype, a.shape, a.weak_type) == (b.dtype, b.shape, b.weak_type)


def test_mul_out_dtype_differentiates_as_jax_s():
  f = lambda lib: lib.grad(lambda x: lib.lax.mul(x, x, out_dtype=lib.numpy.float32).sum())(
      lib.numpy.arange(3., dtype=lib.numpy.float16))
  a, b = f(sc), f(jax)
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert a.dtype == b.dtype


def _raises(fn):
  out = []
  for lib in (sc, jax):
    with pytest.raises(Exception) as e:
      fn(lib)
    out.append((type(e.value).__name__, sets_sorted(str(e.value))))
  assert out[0] == out[1], out
  return out[0]


def test_lax_errors_are_jax_s():
  t, m = _raises(lambda lib: lib.lax.dot(lib.numpy.ones((2, 3, 4)), lib.numpy.ones((2, 4, 5))))
  assert t == "ValueError" and "dimension_numbers must be specified" in m
  t, _ = _raises(lambda lib: lib.lax.switch(0, [lambda x: x], 1, operand=2))
  assert t == "TypeError"
  t, m = _raises(lambda lib: lib.lax.all_gather(lib.numpy.ones(2), "i", to="bogus"))
  assert t == "ValueError" and "Allowed `to`" in m


def test_all_gather_to_varying_is_the_default():
  f = lambda lib, **kw: lib.pmap(lambda x: lib.lax.all_gather(x, "i", **kw), "i")(
      lib.numpy.arange(4.))
  np.testing.assert_array_equal(np.asarray(f(sc, to="varying")), np.asarray(f(jax)))
  with pytest.raises(NotImplementedError):
    f(sc, to="invarying")


def test_canonicalize_dtype_allow_extended_dtype():
  for lib in (sc, jax):
    k = lib.random.key(0)
    assert lib.dtypes.canonicalize_dtype(k.dtype, allow_extended_dtype=True) == k.dtype
    assert lib.dtypes.canonicalize_dtype(np.float64) == np.float32
  _raises(lambda lib: lib.dtypes.canonicalize_dtype(lib.random.key(0).dtype))


# -- the top level


def test_device_put_copy_semantics_are_jax_s():
  def run(lib):
    d = lib.devices()
    mesh = lib.sharding.Mesh(np.array(d[:4]), ("x",))
    ns = lib.sharding.NamedSharding(mesh, lib.sharding.PartitionSpec("x"))
    rows = []
    for tgt in (None, d[1], ns):
      for donate in (False, True):
        for may_alias in (None, True, False):
          x = lib.device_put(lib.numpy.arange(8.), d[0])
          try:
            y = lib.device_put(x, tgt, donate=donate, may_alias=may_alias)
          except ValueError as e:
            rows.append(str(e))
            continue
          rows.append((y is x if tgt is None else None, x.is_deleted(), y.is_deleted(),
                       sorted(a.id for a in y.devices()), y.committed,
                       np.asarray(y).tolist()))
    x = lib.device_put(lib.numpy.arange(3.), d[0])
    tree = lib.device_put([x, x], src=d[0], donate=[True, False], may_alias=[False, None])
    rows.append([(t is x, np.asarray(t).tolist()) for t in tree])
    return rows
  assert run(sc) == run(jax)


def test_checkpoint_parameters_are_jax_s():
  def run(lib):
    f = lib.checkpoint(lambda x, n: lib.numpy.sin(x) * n, static_argnums=(1,),
                       static_argnames=("n",))
    return lib.grad(f)(1.5, 3)
  np.testing.assert_allclose(np.asarray(run(sc)), np.asarray(run(jax)), rtol=1e-6)
  t, m = _raises(lambda lib: lib.checkpoint(lambda x: x, concrete=True))
  assert t == "NotImplementedError" and "removed in JAX v0.10.0" in m
  _raises(lambda lib: lib.remat(lambda x: x, concrete=False))


def test_jit_compiler_options_reach_xla():
  f = lambda lib, o: lib.jit(lambda x: x * 2 + 1, compiler_options=o)(lib.numpy.arange(3.))
  opts = {"xla_cpu_enable_fast_math": True}
  np.testing.assert_array_equal(np.asarray(f(sc, opts)), np.asarray(f(jax, opts)))
  t, m = _raises(lambda lib: f(lib, {"xla_no_such_flag_here": 1}))
  assert "No such compile option" in m


def test_devices_and_processes_take_jax_s_parameters():
  for lib in (sc, jax):
    assert lib.process_count(backend="cpu") == 1 and lib.process_index(backend="cpu") == 0
    assert lib.local_devices(process_index=0, backend="cpu") == lib.devices("cpu")
    with warnings.catch_warnings(record=True) as w:
      warnings.simplefilter("always")
      assert lib.local_devices(host_id=0) == lib.devices()
    assert "renamed from `host_id`" in str(w[0].message)
  t, m = _raises(lambda lib: lib.local_devices(process_index=3))
  assert m == "Unknown process_index 3"


def test_make_array_from_single_device_arrays_dtype():
  def run(lib, dtype):
    mesh = lib.sharding.Mesh(np.array(lib.devices()[:2]), ("x",))
    s = lib.sharding.NamedSharding(mesh, lib.sharding.PartitionSpec("x"))
    pieces = [lib.device_put(np.full(2, i, np.float32), d) for i, d in enumerate(mesh.devices)]
    return lib.make_array_from_single_device_arrays((4,), s, pieces, dtype=dtype)
  a, b = run(sc, np.float32), run(jax, np.float32)
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  t, m = _raises(lambda lib: run(lib, np.int32))
  assert t == "ValueError" and "must match the dtype" in m


def test_make_jaxpr_axis_env_prints_as_jax():
  def run(lib):
    lax = lib.lax
    f = lambda x: lax.psum(x, "i") + lax.axis_index("i") + lax.all_gather(x, "j").sum()
    return str(lib.make_jaxpr(f, axis_env=[("i", 4), ("j", 2)])(lib.numpy.ones(3)))
  assert run(sc) == run(jax)


def test_vmap_sum_match():
  def run(lib):
    f = lib.vmap(lambda x, y: (x * y, y), in_axes=(0, None), out_axes=(None, None),
                 sum_match=True)
    args = (lib.numpy.arange(6.).reshape(3, 2), lib.numpy.ones(2))
    return str(lib.make_jaxpr(f)(*args)), [np.asarray(v).tolist() for v in f(*args)]
  assert run(sc) == run(jax)
  _raises(lambda lib: lib.vmap(lambda x: x, out_axes=None)(lib.numpy.ones(3)))


# -- classes


def test_sharding_methods_are_jax_s():
  def run(lib):
    mesh = lib.sharding.Mesh(np.array(lib.devices()[:4]).reshape(2, 2), ("x", "y"))
    s = lib.sharding.NamedSharding(mesh, lib.sharding.PartitionSpec("x", None))
    d = lib.sharding.SingleDeviceSharding(lib.devices()[1])
    out = [s.shard_shape(global_shape=(4, 6)),
           sorted((k.id, str(v)) for k, v in s.devices_indices_map(global_shape=(4, 6)).items()),
           d.shard_shape(global_shape=(3,)), list(d.devices_indices_map(global_shape=(3,)).values()),
           repr(s.with_memory_kind("device")), repr(d.with_memory_kind(kind="device")),
           s.is_equivalent_to(s.with_memory_kind("device"), 2),
           s.check_compatible_aval((4, 6)), d.check_compatible_aval(())]
    return out
  assert run(sc) == run(jax)
  for lib in (sc, jax):
    p = lib.sharding.PartitionSpec("x", None, "x")
    assert (p.count(value="x"), p.index(value=None)) == (2, 1)
  _raises(lambda lib: lib.sharding.PartitionSpec("x").index(value="z"))
  t, m = _raises(lambda lib: lib.sharding.NamedSharding(
      lib.sharding.Mesh(np.array(lib.devices()[:2]), ("x",)),
      lib.sharding.PartitionSpec("x")).check_compatible_aval(()))
  assert t == "ValueError" and "P()" in m


def test_shape_dtype_struct_fields_are_jax_s():
  def run(lib):
    m = lib.sharding.ManualAxisType(varying={"x"})
    a = lib.ShapeDtypeStruct((2, 3), np.float32, is_ref=True)
    b = a.update(shape=(4,), is_ref=False, weak_type=True)
    c = lib.ShapeDtypeStruct((2,), np.int32, manual_axis_type=m)
    return [repr(a), repr(b), a.is_ref, b.is_ref, a == b, a.update() == a,
            c.manual_axis_type is m]
  assert run(sc) == run(jax)
  _raises(lambda lib: lib.ShapeDtypeStruct((2,), None))
  _raises(lambda lib: lib.ShapeDtypeStruct((2,), np.float32, manual_axis_type=1))


def test_stage_methods_take_jax_s_parameters():
  def run(lib):
    f = lib.jit(lambda x: x * 2)
    x = lib.device_put(lib.numpy.arange(3.), lib.devices()[2])
    c = f.lower(x).compile(device_assignment=(lib.devices()[2],))
    y = c(x)
    lowered = f.trace(x).lower(lowering_platforms=("cpu",))
    return np.asarray(y).tolist(), sorted(d.id for d in y.devices()), type(lowered).__name__
  assert run(sc) == run(jax)
  t, m = _raises(lambda lib: lib.jit(lambda x: x * 2).lower(lib.numpy.arange(3.)).compile(
      device_assignment=(lib.devices()[1],)))
  assert t == "ValueError" and "device_assignment passed to `.compile`" in m


def test_custom_vjp_optimize_remat():
  def run(lib, **kw):
    f = lib.custom_vjp(lambda x: lib.numpy.sin(x))
    f.defvjp(lambda x: (lib.numpy.sin(x), lib.numpy.cos(x)), lambda c, g: (c * g * 2,), **kw)
    return np.asarray(lib.grad(lib.checkpoint(f))(0.5)).tolist()
  assert run(sc, optimize_remat=True) == run(jax, optimize_remat=True)
  t, m = _raises(lambda lib: run(lib, symbolic_zeros=True, optimize_remat=True))
  assert t == "NotImplementedError"


def test_exported_mlir_module_serialized():
  def run(lib):
    e = lib.export.export(lib.jit(lambda x: x * 2))(lib.numpy.ones(2))
    return e.mlir_module(serialized=True) == e.mlir_module()
  assert run(sc) == run(jax) is True
  e = sc.export.export(sc.jit(lambda x: x * 2))(snp.ones(2))
  assert "stablehlo.multiply" in str(e.mlir_module(serialized=False).operation)
