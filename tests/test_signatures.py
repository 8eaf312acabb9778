"""JAX 0.10.2's signatures for stagecraft's top level and lax (part `sigs`)."""
import inspect

import jax
import numpy as np

import stagecraft


def test_convert_element_type_operand_keyword():
  """Parameter names match JAX's and `operand=` by keyword gives JAX's value and dtype."""
  jp = list(inspect.signature(jax.lax.convert_element_type).parameters)
  sp = list(inspect.signature(stagecraft.lax.convert_element_type).parameters)
  assert sp[:len(jp)] == jp == ["operand", "new_dtype"]
  x = np.array([1.5, -2.25, 3.0], np.float32)
  a = jax.lax.convert_element_type(operand=x, new_dtype=np.int32)
  b = stagecraft.lax.convert_element_type(operand=x, new_dtype=np.int32)
  assert a.dtype == b.dtype
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  ja = jax.make_jaxpr(lambda v: jax.lax.convert_element_type(operand=v, new_dtype=np.int32))(x)
  sa = stagecraft.make_jaxpr(
      lambda v: stagecraft.lax.convert_element_type(operand=v, new_dtype=np.int32))(x)
  assert str(ja) == str(sa)


def test_key_dtype_impl_spec_keyword():
  """`random.key_dtype(impl_spec=...)` as JAX's: same parameter names and the same dtype."""
  assert (list(inspect.signature(jax.random.key_dtype).parameters)
          == list(inspect.signature(stagecraft.random.key_dtype).parameters))
  assert str(jax.random.key_dtype(impl_spec="threefry2x32")) == str(
      stagecraft.random.key_dtype(impl_spec="threefry2x32"))


# ---------------------------------------------------------------------------
# Every parameter of JAX's top level, lax, random and dtypes functions is taken by name.

import importlib  # noqa: E402
import re  # noqa: E402
import warnings  # noqa: E402

import pytest  # noqa: E402

from test_jnp_signatures import _mismatches  # noqa: E402
from _util import sets_sorted  # noqa: E402


@pytest.mark.parametrize("mod", ["", ".lax", ".random", ".dtypes"])
def test_every_jax_parameter_is_taken_by_name(mod):
  got = _mismatches(importlib.import_module("jax" + mod),
                    importlib.import_module("stagecraft" + mod))
  assert [g[:2] for g in got] == []


def _outcome(thunk):
  try:
    out = thunk()
  except Exception as e:   # noqa: BLE001 (compared)
    return ("raises", type(e).__name__, str(e))
  return ("ok", out)


def _both(fn):
  return fn(jax), fn(stagecraft)


def _typeof_str(m, x):
  return str(m.typeof(x))


def test_vmap_sum_match_sums_batched_outputs():
  def run(m):
    x = m.numpy.arange(6.).reshape(3, 2)
    f = m.vmap(lambda r: (r * 2, r.sum()), out_axes=(0, None), sum_match=True)
    a, b = f(x)
    jx = str(m.make_jaxpr(m.vmap(lambda r: r * 2, out_axes=None, sum_match=True))(x))
    return np.asarray(a), np.asarray(b), jx
  (a1, b1, j1), (a2, b2, j2) = _both(run)
  np.testing.assert_array_equal(a1, a2)
  np.testing.assert_array_equal(b1, b2)
  assert j1 == j2


def test_local_devices_process_index_and_host_id():
  def run(m):
    out = [len(m.local_devices(0)), len(m.local_devices(process_index=0, backend="cpu")),
           m.process_count("cpu"), m.process_index(backend="cpu")]
    out.append(_outcome(lambda: m.local_devices(process_index=1)))
    with warnings.catch_warnings(record=True) as w:
      warnings.simplefilter("always")
      out.append(len(m.local_devices(host_id=0)))
    out.append([(x.category.__name__, str(x.message)) for x in w])
    out.append(_outcome(lambda: m.process_count("nope"))[:2])
    return out
  want, got = _both(run)
  assert got == want
  assert want[4] == ("raises", "ValueError", "Unknown process_index 1")


def test_make_array_from_single_device_arrays_dtype():
  def run(m):
    P = m.sharding.PartitionSpec
    mesh = m.make_mesh((4,), ("x",))
    s = m.sharding.NamedSharding(mesh, P("x"))
    arrs = [m.device_put(np.full((2,), i, np.float32), d)
            for i, d in enumerate(mesh.devices.flat)]
    a = m.make_array_from_single_device_arrays((8,), s, arrs, dtype=np.float32)
    return (np.asarray(a), str(a.dtype),
            _outcome(lambda: m.make_array_from_single_device_arrays((8,), s, arrs,
                                                                   dtype=np.int32)),
            _outcome(lambda: m.make_array_from_single_device_arrays((8,), s, [])))
  (a, *rest), (b, *rest2) = _both(run)
  np.testing.assert_array_equal(a, b)
  assert rest == rest2


def test_canonicalize_dtype_allow_extended_dtype():
  def run(m):
    k = m.random.key(0)
    return (str(m.dtypes.canonicalize_dtype(np.float64)),
            str(m.dtypes.canonicalize_dtype("int64", allow_extended_dtype=True)),
            str(m.dtypes.canonicalize_dtype(k.dtype, allow_extended_dtype=True)),
            _outcome(lambda: m.dtypes.canonicalize_dtype(k.dtype)))
  want, got = _both(run)
  assert got == want


def test_mul_out_dtype():
  import ml_dtypes
  def run(m):
    x = m.numpy.ones(3, ml_dtypes.bfloat16)
    y = m.numpy.full(3, 3, ml_dtypes.bfloat16)
    i = m.numpy.arange(3, dtype=np.int8)
    f = lambda x, y: m.lax.mul(x, y, out_dtype=np.float32)
    g = m.grad(lambda x: m.lax.mul(x, x, out_dtype=np.float32).sum())(x)
    return (str(m.make_jaxpr(f)(x, y)), np.asarray(f(x, y)), str(f(x, y).dtype),
            np.asarray(m.lax.mul(i, i, out_dtype=np.int32)), np.asarray(g), str(g.dtype),
            np.asarray(m.jit(m.vmap(f))(x[:, None], y[:, None])))
  want, got = _both(run)
  assert got[0] == want[0]
  for a, b in zip(want[1:], got[1:]):
    if isinstance(a, str):
      assert a == b
    else:
      np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))


def test_dot_dimension_numbers_and_switch_operand():
  def run(m):
    a = np.arange(24., dtype=np.float32).reshape(2, 3, 4)
    b = np.arange(8., dtype=np.float32).reshape(2, 4)
    d = m.lax.dot(a, b, dimension_numbers=(((2,), (1,)), ((0,), (0,))))
    s = m.lax.switch(1, [lambda v: v + 1, lambda v: v * 2], operand=3.0)
    return (np.asarray(d), float(s), _outcome(lambda: m.lax.dot(a, b)),
            _outcome(lambda: m.lax.switch(0, [lambda v: v], 1.0, operand=2.0))[:2])
  (d1, s1, e1, f1), (d2, s2, e2, f2) = _both(run)
  np.testing.assert_array_equal(d1, d2)
  assert (s1, e1, f1) == (s2, e2, f2)


def test_out_sharding_and_sharding_parameters():
  def run(m):
    P = m.sharding.PartitionSpec
    mesh = m.make_mesh((4,), ("x",), axis_types=(m.sharding.AxisType.Explicit,))
    out = []
    with m.set_mesh(mesh):
      x = m.device_put(m.numpy.arange(8.), P("x"))
      calls = [
          lambda: m.lax.broadcast(m.numpy.ones(3), (8,), out_sharding=P("x", None)),
          lambda: m.lax.broadcasted_iota(np.int32, (8, 2), 0, out_sharding=P("x", None)),
          lambda: m.lax.empty((8,), np.float32, out_sharding=P("x")),
          lambda: m.lax.full((8,), 2., sharding=m.sharding.NamedSharding(mesh, P("x"))),
          lambda: m.lax.full_like(x, 3., sharding=m.sharding.NamedSharding(mesh, P("x"))),
          lambda: m.lax.reduce_sum(m.numpy.ones((8, 4)), (1,), out_sharding=P("x")),
          lambda: m.lax.reduce(m.numpy.ones((8, 4)), 0., m.lax.add, (1,),
                               out_sharding=P("x")),
          lambda: m.lax.rng_bit_generator(np.zeros(4, np.uint32), (8,),
                                          out_sharding=P("x"))[1],
      ]
      for f in calls:
        r = f()
        j = m.jit(f)()
        out.append((_typeof_str(m, r), _typeof_str(m, j), r.shape,
                    None if r.dtype == np.uint32 else float(np.asarray(r).sum())))
      out.append(_outcome(lambda: m.lax.reduce(m.numpy.ones((8, 4)), 1., m.lax.mul, (1,),
                                               out_sharding=P("x")))[:2])
    return out
  want, got = _both(run)
  assert got == want


def test_all_gather_to():
  def run(m):
    x = np.arange(4.).reshape(2, 2).astype(np.float32)
    a = m.pmap(lambda v: m.lax.all_gather(v, "i", to="varying"), "i")(x)
    bad = _outcome(lambda: m.pmap(lambda v: m.lax.all_gather(v, "i", to="x"), "i")(x))
    return np.asarray(a), bad
  (a1, b1), (a2, b2) = _both(run)
  np.testing.assert_array_equal(a1, a2)
  assert b1[:2] == b2[:2] and sets_sorted(b1[2]) == sets_sorted(b2[2])


def test_checkpoint_static_argnames_concrete_prevent_cse():
  def run(m):
    f = lambda x, y: m.numpy.sin(x) * y
    return (float(m.grad(m.checkpoint(f, static_argnames=("y",)))(1., 2.)),
            float(m.grad(m.checkpoint(f, prevent_cse=(True, False)))(1., 2.)),
            str(m.make_jaxpr(m.checkpoint(f, prevent_cse=(True, False)))(1., 2.)),
            _outcome(lambda: m.checkpoint(f, concrete=True)),
            _outcome(lambda: m.remat(f, concrete=False)),
            m.jit(m.grad(m.checkpoint(f, prevent_cse=(True, False)))).lower(1., 2.)
            .as_text().count("optimization_barrier"))
  want, got = _both(run)
  assert got == want


def test_device_put_src_donate_may_alias():
  def run(m):
    d = m.devices()[0]
    x = m.numpy.ones(3)
    y = m.device_put(x, d, may_alias=False)
    out = [y is x, x.is_deleted(), y.unsafe_buffer_pointer() == x.unsafe_buffer_pointer()]
    y = m.device_put(x, d, donate=True)
    out += [y is x, x.is_deleted()]
    out.append(_outcome(lambda: m.device_put(x, d, donate=True, may_alias=True)))
    t = {"a": m.numpy.ones(3), "b": m.numpy.zeros(2)}
    r = m.device_put(t, donate={"a": True, "b": False})
    out += [t["a"].is_deleted(), float(r["a"].sum())]
    out.append(m.device_put(x, src=d) is x)
    out.append(float(m.jit(lambda v: m.device_put(v, d, may_alias=False))(x).sum()))
    return out
  want, got = _both(run)
  assert got == want


def test_jit_compiler_options():
  def run(m):
    f = lambda x: m.numpy.sqrt(x ** 2) + 1.
    good = m.jit(f, compiler_options={"xla_embed_ir_in_executable": True})
    out = [float(good(2.0))]
    out.append(_outcome(lambda: m.jit(f, compiler_options={"not_a_real_flag": 1})(1.0)))
    out.append(_outcome(lambda: m.jit(f, compiler_options={"not_a_real_flag": 1})
                        .lower(1.0).compile()))
    out.append(float(m.jit(f)(2.0)))   # the plain jit of the same function is unaffected
    return [o if not isinstance(o, tuple) else o[:2] + (o[2][:70],) for o in out]
  want, got = _both(run)
  assert got == want
  assert want[1][2].startswith("INVALID_ARGUMENT: No such compile option")


def test_make_jaxpr_axis_env():
  def run(m):
    lax = m.lax
    return (str(m.make_jaxpr(lambda x: lax.psum(x, "i"), axis_env=[("i", 4)])(1.0)),
            str(m.make_jaxpr(lambda x: lax.axis_index("i") + lax.pmax(x, "j"),
                             axis_env=[("i", 4), ("j", 2)])(np.ones(3, np.float32))),
            _outcome(lambda: m.make_jaxpr(lambda x: lax.psum(x, "k"),
                                          axis_env=[("i", 4)])(1.0)),
            str(m.make_jaxpr(lambda x: lax.psum(x, "i"), axis_env=[("i", 4)],
                             return_shape=True)(1.0)[1]))
  want, got = _both(run)
  assert got == want
