"""Host callbacks and effects: debug.print / debug.callback / pure_callback / io_callback
under every transformation, compared with JAX run in the same test (printed text, call
counts and argument shapes), ordered effects, DCE, and errors raised inside callbacks."""
import jax
import jax.experimental
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.experimental import io_callback

LIBS = {"sc": (sc, jnp, io_callback), "jax": (jax, jjnp, jax.experimental.io_callback)}


def _printed(capsys, prog):
  """What `prog(lib, np_module, io_callback)` prints under stagecraft and under JAX."""
  out = {}
  for name, (lib, np_mod, ioc) in LIBS.items():
    capsys.readouterr()
    prog(lib, np_mod, ioc)
    lib.effects_barrier()
    out[name] = capsys.readouterr().out
  return out["sc"], out["jax"]


PRINT_PROGRAMS = {
    "eager": lambda lib, np_, _: _f(lib, np_)(np_.arange(3.0)),
    "jit": lambda lib, np_, _: lib.jit(_f(lib, np_))(np_.arange(3.0)),
    "vmap": lambda lib, np_, _: lib.vmap(_f(lib, np_))(np_.arange(6.0).reshape(2, 3)),
    "jit_vmap": lambda lib, np_, _: lib.jit(lib.vmap(_f(lib, np_)))(
        np_.arange(6.0).reshape(2, 3)),
    "grad": lambda lib, np_, _: lib.grad(_f(lib, np_))(np_.arange(3.0)),
    "jit_grad": lambda lib, np_, _: lib.jit(lib.grad(_f(lib, np_)))(np_.arange(3.0)),
    "vmap_grad": lambda lib, np_, _: lib.vmap(lib.grad(_f(lib, np_)))(
        np_.arange(6.0).reshape(2, 3)),
    "jvp": lambda lib, np_, _: lib.jvp(_g(lib), (1.0,), (1.0,)),
    "vmap_scalar": lambda lib, np_, _: lib.vmap(_g(lib))(np_.arange(3.0)),
    "scan": lambda lib, np_, _: lib.lax.scan(lambda c, x: (_g(lib)(c) + x, None), 0.0,
                                            np_.arange(3.0)),
    "fori": lambda lib, np_, _: lib.jit(lambda x: lib.lax.fori_loop(
        0, 3, lambda i, c: _g(lib)(c), x))(1.0),
    "cond": lambda lib, np_, _: lib.jit(lambda p, x: lib.lax.cond(
        p, lambda x: _g(lib)(x), lambda x: -x, x))(True, 2.0),
    "int_and_tree": lambda lib, np_, _: lib.jit(lambda x: lib.debug.print(
        "{a} {b}", a=x, b={"k": x}))(np_.ones((2, 2), np_.int32)),
    "format_spec": lambda lib, np_, _: lib.debug.print("{x:.2f} {y}", x=np_.float32(3.14159),
                                                        y="static"),
    "positional": lambda lib, np_, _: lib.jit(lambda x, y: lib.debug.print(
        "{1} then {0}", x, y))(1, 2.5),
    "ordered": lambda lib, np_, _: lib.jit(lambda x: [lib.debug.print(
        "step {}", x + i, ordered=True) for i in range(4)] and x)(0),
}


def _f(lib, np_):
  def f(x):
    lib.debug.print("x={x} sum={}", np_.sum(x), x=x)
    return np_.sin(x).sum()
  return f


def _g(lib):
  def g(x):
    lib.debug.print("s={}", x)
    return x * 2
  return g


@pytest.mark.parametrize("name", sorted(PRINT_PROGRAMS))
def test_debug_print_matches_jax(capsys, name):
  ours, theirs = _printed(capsys, PRINT_PROGRAMS[name])
  assert ours == theirs
  assert ours  # the program printed something


def test_debug_print_checks_fields_at_trace_time():
  with pytest.raises(KeyError, match="y"):
    sc.jit(lambda x: sc.debug.print("{y}", x=x))(1.0)
  with pytest.raises(IndexError):
    sc.debug.print("{} {}", 1)
  with pytest.raises(TypeError, match="format string"):
    sc.debug.print(3)


def test_debug_callback_receives_arrays_under_jit_and_vmap():
  seen = []
  sc.jit(lambda x: sc.debug.callback(lambda v, w: seen.append((type(v), v.shape, w)), x,
                                     w=x[0]))(jnp.arange(3.0))
  assert seen[0][0] is sc.Array and seen[0][1] == (3,) and float(seen[0][2]) == 0.0
  seen.clear()
  sc.vmap(lambda x: sc.debug.callback(lambda v: seen.append(np.asarray(v)), x))(
      jnp.arange(6.0).reshape(2, 3))
  np.testing.assert_array_equal(np.stack(seen), np.arange(6.0).reshape(2, 3))


# ---------------------------------------------------------------------------
# pure_callback


@pytest.mark.parametrize("method", ["sequential", "sequential_unrolled", "expand_dims",
                                    "broadcast_all", "legacy_vectorized"])
def test_pure_callback_vmap_methods_match_jax(method):
  record = {}
  for name, (lib, np_, _) in LIBS.items():
    calls = record[name] = []

    def cb(x, y):
      calls.append((np.shape(x), np.shape(y)))
      return np.sin(np.asarray(x)) + np.asarray(y)

    def f(x, y):
      return lib.pure_callback(cb, lib.ShapeDtypeStruct(x.shape, x.dtype), x, y,
                               vmap_method=method)
    out = lib.jit(lib.vmap(f, in_axes=(0, None)))(np_.arange(6.0).reshape(2, 3),
                                                    np_.ones(3))
    record[name + "_out"] = np.asarray(out)
  assert record["sc"] == record["jax"]
  np.testing.assert_allclose(record["sc_out"], record["jax_out"], rtol=1e-6)


def test_pure_callback_vmap_without_method_raises_as_jax():
  f = lambda x: sc.pure_callback(np.sin, sc.ShapeDtypeStruct(x.shape, x.dtype), x)
  with pytest.raises(NotImplementedError, match="vmap_method=None"):
    sc.vmap(f)(jnp.ones((2, 3)))


def test_pure_callback_eager_jit_pytrees_and_kwargs():
  def cb(x, *, scale):
    return {"a": np.asarray(x) * np.asarray(scale), "b": np.int32(7)}
  shapes = {"a": sc.ShapeDtypeStruct((3,), jnp.float32), "b": sc.ShapeDtypeStruct((), jnp.int32)}
  for fn in (lambda x: sc.pure_callback(cb, shapes, x, scale=2.0),
             sc.jit(lambda x: sc.pure_callback(cb, shapes, x, scale=2.0))):
    out = fn(jnp.arange(3.0))
    np.testing.assert_allclose(np.asarray(out["a"]), [0.0, 2.0, 4.0])
    assert out["b"].dtype == np.int32 and int(out["b"]) == 7


def test_unused_pure_callback_is_removed_and_io_callback_kept():
  calls = []

  def cb(x):
    calls.append(1)
    return x
  s = sc.ShapeDtypeStruct((), jnp.float32)
  sc.jit(lambda x: (sc.pure_callback(cb, s, x), x + 1)[1])(1.0)
  assert calls == []
  sc.jit(lambda x: (io_callback(cb, s, x), x + 1)[1])(1.0)
  assert calls == [1]
  # A jitted function whose only work is an effect still runs.
  sc.jit(lambda x: io_callback(lambda a: calls.append(2), None, x))(1.0)
  assert calls == [1, 2]


def test_callbacks_under_differentiation_raise_as_jax():
  s = sc.ShapeDtypeStruct((), jnp.float32)
  with pytest.raises(ValueError, match="Pure callbacks do not support JVP"):
    sc.grad(lambda x: sc.pure_callback(lambda a: a, s, x))(1.0)
  with pytest.raises(ValueError, match="IO callbacks do not support JVP"):
    sc.grad(lambda x: io_callback(lambda a: a, s, x))(1.0)


def test_pure_callback_inside_custom_jvp_is_differentiable():
  @sc.custom_jvp
  def f(x):
    return sc.pure_callback(lambda a: np.sin(a), sc.ShapeDtypeStruct(x.shape, x.dtype), x)

  @f.defjvp
  def f_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return f(x), jnp.cos(x) * t
  np.testing.assert_allclose(float(sc.jit(sc.grad(f))(0.5)), np.cos(0.5), rtol=1e-6)


def test_wrong_result_shape_or_dtype_raises():
  f = sc.jit(lambda x: sc.pure_callback(lambda a: np.zeros(2, np.float32),
                                        sc.ShapeDtypeStruct((3,), jnp.float32), x))
  with pytest.raises(RuntimeError, match="Incorrect output shape for return value #0"):
    f(jnp.ones(3))
  g = sc.jit(lambda x: sc.pure_callback(lambda a: np.zeros(3, np.int32),
                                        sc.ShapeDtypeStruct((3,), jnp.float32), x))
  with pytest.raises(RuntimeError, match="Incorrect output dtype"):
    g(jnp.ones(3))
  with pytest.raises(TypeError, match="shape"):
    sc.pure_callback(lambda a: a, [object()], 1.0)


def test_exception_in_callback_names_it_chains_it_and_runtime_survives():
  def bad(a):
    raise ZeroDivisionError("boom inside")
  f = sc.jit(lambda x: sc.pure_callback(bad, sc.ShapeDtypeStruct((3,), jnp.float32), x))
  with pytest.raises(RuntimeError, match="bad raised ZeroDivisionError: boom inside") as e:
    f(jnp.ones(3))
  assert isinstance(e.value.__cause__, ZeroDivisionError)
  assert isinstance(e.value, jax.errors.JaxRuntimeError)
  # the runtime stays usable, and so does the same program with good input
  assert float(sc.jit(lambda x: x + 1)(1.0)) == 2.0
  np.testing.assert_allclose(np.asarray(sc.jit(lambda x: x * 2)(jnp.ones(3))), 2.0)


# ---------------------------------------------------------------------------
# io_callback and ordered effects


def test_100_chained_jit_calls_see_ordered_io_callbacks_in_program_order():
  seen = []

  def rec(x):
    seen.append(int(x))
    return np.int32(x)
  T = sc.ShapeDtypeStruct((), jnp.int32)

  @sc.jit
  def step(i):
    for k in range(3):
      io_callback(rec, T, i * 3 + k, ordered=True)
    return i + 1
  i = jnp.int32(0)
  for _ in range(100):
    i = step(i)
  assert seen == list(range(300))


@pytest.mark.parametrize("pred", [True, False])
def test_ordered_effects_through_cond_while_scan_and_nested_jit(pred):
  seen = []

  def rec(x):
    seen.append(int(x))
    return np.int32(x)
  T = sc.ShapeDtypeStruct((), jnp.int32)

  def f(p):
    io_callback(rec, T, 0, ordered=True)
    sc.lax.cond(p, lambda: io_callback(rec, T, 1, ordered=True),
                lambda: io_callback(rec, T, 2, ordered=True))
    sc.lax.while_loop(lambda c: c < 6, lambda c: io_callback(rec, T, c, ordered=True) + 1, 3)
    sc.lax.scan(lambda c, x: (io_callback(rec, T, c, ordered=True) + 1, None), 10, None,
                length=3)
    sc.jit(lambda: io_callback(rec, T, 20, ordered=True))()
    io_callback(rec, T, 21, ordered=True)
    return 0
  expected = [0, 1 if pred else 2, 3, 4, 5, 10, 11, 12, 20, 21]
  sc.jit(f)(pred)
  assert seen == expected
  seen.clear()
  f(pred)
  assert seen == expected


def test_ordered_io_callback_under_vmap_raises_unordered_runs_per_example():
  T = sc.ShapeDtypeStruct((), jnp.float32)
  with pytest.raises(ValueError, match="Cannot `vmap` ordered IO callback"):
    sc.vmap(lambda x: io_callback(lambda a: a, T, x, ordered=True))(jnp.ones(3))
  calls = []
  out = sc.vmap(lambda x: io_callback(lambda a: (calls.append(float(a)), a)[1], T, x))(
      jnp.arange(3.0))
  assert calls == [0.0, 1.0, 2.0]
  np.testing.assert_array_equal(np.asarray(out), [0.0, 1.0, 2.0])


def test_effects_in_jaxprs():
  T = sc.ShapeDtypeStruct((), jnp.float32)
  j = sc.make_jaxpr(lambda x: io_callback(lambda a: a, T, x, ordered=True))(1.0)
  assert [type(e).__name__ for e in j.jaxpr.effects] == ["OrderedIOEffect"]
  j = sc.make_jaxpr(lambda x: sc.debug.print("{}", x))(1.0)
  assert [type(e).__name__ for e in j.jaxpr.effects] == ["DebugEffect"]
  assert "debug_print[" in str(j) and " = debug_print" not in str(j)
  j = sc.make_jaxpr(lambda x: sc.pure_callback(lambda a: a, T, x))(1.0)
  assert not j.jaxpr.effects
  # effects of bodies are effects of the equations holding them
  j = sc.make_jaxpr(lambda x: sc.lax.cond(x > 0, lambda: sc.debug.print("a"),
                                          lambda: None))(1.0)
  assert j.jaxpr.eqns[-1].effects and j.jaxpr.effects


def test_each_device_calls_back_under_pmap_and_shard_map(capfd):
  from stagecraft.sharding import PartitionSpec as P
  out = sc.pmap(lambda x: (sc.debug.print("dev {}", x), x * 2)[1])(jnp.arange(4.0))
  np.testing.assert_array_equal(np.asarray(out), [0.0, 2.0, 4.0, 6.0])
  # NB: Auto axes (an all-Explicit mesh requires arguments typed as their in_specs)
  mesh = sc.make_mesh((4,), ("i",), axis_types=(sc.sharding.AxisType.Auto,))
  f = sc.shard_map(lambda x: (sc.debug.print("shard {}", x), x + 1)[1], mesh=mesh,
                   in_specs=P("i"), out_specs=P("i"))
  np.testing.assert_array_equal(np.asarray(sc.jit(f)(jnp.arange(8.0))), np.arange(8.0) + 1)
  sc.effects_barrier()
  lines = capfd.readouterr().out.splitlines()
  assert sorted(ln for ln in lines if ln.startswith("dev")) == [f"dev {i}.0" for i in range(4)]
  assert sorted(ln for ln in lines if ln.startswith("shard")) == [
      f"shard [{2 * i}. {2 * i + 1}.]" for i in range(4)]
  out = sc.pmap(lambda x: sc.pure_callback(lambda a: np.asarray(a) * 10,
                                           sc.ShapeDtypeStruct((), jnp.float32), x))(
      jnp.arange(4.0))
  np.testing.assert_array_equal(np.asarray(out), [0.0, 10.0, 20.0, 30.0])


@pytest.mark.parametrize("kind", ["pure", "io"])
def test_callback_on_operands_split_over_an_explicit_mesh_runs_once_as_jax(kind):
  """JAX 0.10.2 gathers a callback's operands onto the mesh's first device and calls the
  host once (the custom call carries a maximal sharding); the result type is unsharded.
  Before: stagecraft refused (no sharding rule), and in a mesh program each device called."""
  def run(lib, np_):
    calls = []

    def host_fn(x):
      calls.append(np.shape(x))
      return np.asarray(x) * 2
    cb = (lib.pure_callback if kind == "pure" else
          (jax.experimental.io_callback if lib is jax else io_callback))

    def f(x):
      return cb(host_fn, lib.ShapeDtypeStruct(x.shape, x.dtype), x)
    mesh = lib.make_mesh((4,), ("i",))
    with lib.set_mesh(mesh):
      x = lib.device_put(np_.arange(8.0), lib.P("i"))
      out = lib.jit(f)(x)
      text = lib.jit(f).lower(x).as_text()
      ty = str(lib.typeof(out))
    return np.asarray(out), calls, ty, "@maximal_mesh_0" in text
  ours, theirs = run(sc, jnp), run(jax, jjnp)
  np.testing.assert_array_equal(ours[0], theirs[0])
  assert ours[1:] == theirs[1:] == ([(8,)], "float32[8]", True)
