"""Patterns found running equinox 0.13.8's own test suite (tests/test_*.py of its v0.13.8
tag) under JAX and under stagecraft (`-p stagecraft_plugin`), each written here in plain
JAX code (or with equinox where that is the simplest reproduction), run on JAX and on
stagecraft and compared: values, printed forms and exception texts."""
import jax
import jax.extend.core as jex_core
import jax.interpreters.mlir as jax_mlir
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import core as sc_core
from stagecraft.interpreters import mlir as sc_mlir


# ---------------------------------------------------------------------------
# mlir.emit_python_callback in a library's lowering rule (equinox.internal.noinline)


def _host_primitive(Primitive, mlir, seen, out_shape=None):
  """A primitive computing `2 * x + 1` on the host: its lowering rule emits a Python
  callback, as equinox's `noinline_p` does."""
  p = Primitive("host_affine")
  p.multiple_results = True
  p.def_impl(lambda x: [x * 2 + 1])
  p.def_abstract_eval(lambda x: [x])

  def callback(a):
    seen.append((type(a).__name__, a.dtype.name, a.shape))
    out = np.asarray(a) * 2 + 1
    return (out if out_shape is None else np.zeros(out_shape, out.dtype),)

  def rule(ctx, x):
    res, token, keep = mlir.emit_python_callback(
        ctx, callback, None, [x], ctx.avals_in, ctx.avals_out, has_side_effect=False,
        sharding=None)
    assert token is None
    ctx.module_context.add_keepalive(keep)
    return res
  mlir.register_lowering(p, rule)
  return p


def test_emit_python_callback_runs_the_callback_on_host_arrays():
  x = np.arange(3, dtype=np.float32)
  seen_sc, seen_jax = [], []
  p_sc = _host_primitive(sc_core.Primitive, sc_mlir, seen_sc)
  p_jax = _host_primitive(jex_core.Primitive, jax_mlir, seen_jax)
  f = lambda p, m: (lambda v: p.bind(m.sin(v) + 1.0)[0] * 3)
  got = sc.jit(f(p_sc, jnp))(x)
  want = jax.jit(f(p_jax, jjnp))(x)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  assert str(sc.typeof(got)) == str(jax.typeof(want))
  assert seen_sc == seen_jax == [("ndarray", "float32", (3,))]


def test_emit_python_callback_wrong_result_shape_message():
  x = np.arange(3, dtype=np.float32)
  msgs = []
  for Primitive, mlir, jit in ((sc_core.Primitive, sc_mlir, sc.jit),
                               (jex_core.Primitive, jax_mlir, jax.jit)):
    p = _host_primitive(Primitive, mlir, [], out_shape=(2,))
    with pytest.raises(RuntimeError) as e:
      np.asarray(jit(lambda v: p.bind(v)[0])(x))
    msgs.append(str(e.value))
  want = "Incorrect output shape for return value #0: Expected: (3,), Actual: (2,)"
  assert all(want in m for m in msgs), msgs



# ---------------------------------------------------------------------------
# jax.lib.__version__ (equinox's test_while_loop.py imports jax.lib and reads it)


def test_jax_lib_version_served():
  import sys
  import jax.lib as real_lib
  want = (real_lib.__version__, [n for n in dir(real_lib) if not n.startswith("_")])
  from _util import served
  with served():
    import jax
    import jax.lib
    assert jax is sc
    assert "jax.lib" in sys.modules and jax.lib is sys.modules["jax.lib"]
    got = (jax.lib.__version__, [n for n in dir(jax.lib) if not n.startswith("_")])
    assert jax.lib.__name__ == "stagecraft.lib"
  assert got == want


# ---------------------------------------------------------------------------
# custom_jvp_call's get_bind_params: `subfuns=(fun, jvp)` (equinox.internal's
# finalise_jaxpr inlines the call with `fun.call_wrapped`)


def _custom_jvp_program(jax_):
  @jax_.custom_jvp
  def f(x, y):
    return x * y + 1.0, x - y

  @f.defjvp
  def f_jvp(primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    return f(x, y), (3.0 * tx + y * ty, tx)
  return f


def _finalise(jax_, closed, *args):
  """An interpreter of `closed` that inlines custom_jvp calls through `subfuns` (equinox's
  `finalise_eval_jaxpr`) and re-binds every other equation with `get_bind_params`."""
  env = dict(zip(closed.jaxpr.invars, args))
  read = lambda v: v.val if type(v).__name__ == "Literal" else env[v]
  for eqn in closed.jaxpr.eqns:
    params = eqn.primitive.get_bind_params(eqn.params)
    invals = [read(v) for v in eqn.invars]
    if eqn.primitive.name == "custom_jvp_call":
      outs = params["subfuns"][0].call_wrapped(*invals)
    else:
      outs = eqn.primitive.bind(*invals, **params)
    outs = outs if eqn.primitive.multiple_results else [outs]
    env.update(zip(eqn.outvars, outs))
  return [read(v) for v in closed.jaxpr.outvars]


def test_custom_jvp_call_get_bind_params_subfuns():
  x, y = np.float32(1.5), np.float32(-2.0)
  res = {}
  for name, jax_ in (("sc", sc), ("jax", jax)):
    f = _custom_jvp_program(jax_)
    closed = jax_.make_jaxpr(lambda a, b: f(jax_.numpy.sin(a), b))(x, y)
    (eqn,) = [e for e in closed.jaxpr.eqns if e.primitive.name == "custom_jvp_call"]
    params = eqn.primitive.get_bind_params(eqn.params)
    fun, jvp = params["subfuns"]
    invals = [np.float32(0.5), y]
    out = {
        "keys": sorted(params),
        "fun": [np.asarray(o) for o in fun.call_wrapped(*invals)],
        "jvp": [np.asarray(o) for o in jvp.call_wrapped(*invals, np.float32(1.0),
                                                           np.float32(2.0))],
        "rebound": [np.asarray(o) for o in eqn.primitive.bind(*invals, **params)],
        "rebound_jvp": [np.asarray(o) for o in jax_.jvp(
            lambda a, b: eqn.primitive.bind(a, b, **params), invals,
            [np.float32(1.0), np.float32(2.0)])[1]],
        "finalised": str(jax_.make_jaxpr(lambda a, b: _finalise(jax_, closed, a, b))(x, y)),
    }
    res[name] = out
  sc_out, jax_out = res["sc"], res["jax"]
  assert sc_out["keys"] == jax_out["keys"] == ["subfuns", "symbolic_zeros"]
  assert sc_out["finalised"] == jax_out["finalised"]
  for k in ("fun", "jvp", "rebound", "rebound_jvp"):
    assert len(sc_out[k]) == len(jax_out[k]), k
    for a, b in zip(sc_out[k], jax_out[k]):
      np.testing.assert_array_equal(a, b)
      assert a.dtype == b.dtype, k


def test_custom_jvp_call_bind_with_foreign_subfuns_raises():
  closed = sc.make_jaxpr(_custom_jvp_program(sc))(1.0, 2.0)
  params = closed.jaxpr.eqns[0].primitive.get_bind_params(closed.jaxpr.eqns[0].params)
  params["subfuns"] = (lambda *a: a, lambda *a: a)
  with pytest.raises(NotImplementedError, match="re-binds only the subfuns"):
    closed.jaxpr.eqns[0].primitive.bind(1.0, 2.0, **params)


# ---------------------------------------------------------------------------
# linearize's function is a pytree Partial of the residuals (equinox's
# test_speed_buffer_while: `jit(vmap(lambda x: linearize(loop, x)))`)


def _linearize_program(api, jnp_):
  def f(x):
    return jnp_.sin(x) * x, x.sum()
  x = np.arange(3, dtype=np.float32)
  out = {}
  _, f_jvp = api.linearize(f, x)
  out["type"] = type(f_jvp).__name__
  out["leaves"] = [(l.shape, str(l.dtype)) for l in api.tree_util.tree_leaves(f_jvp)]
  out["value"] = [np.asarray(v) for v in f_jvp(np.ones(3, np.float32))]
  _, batched = api.jit(api.vmap(lambda a: api.linearize(f, a)))(np.ones((2, 3), np.float32))
  out["batched_leaves"] = [(l.shape, str(l.dtype))
                           for l in api.tree_util.tree_leaves(batched)]
  out["batched_value"] = [np.asarray(v) for v in api.vmap(lambda g, t: g(t))(
      batched, np.ones((2, 3), np.float32))]
  errors = []
  _, f_int = api.linearize(lambda a, b: a * b, 2.0, 3)
  for call in (lambda: f_jvp(np.ones(2, np.float32)), lambda: f_jvp(np.ones(3, np.int32)),
               lambda: f_jvp(np.ones(3, np.float32), 1.0), lambda: f_int(1.0, 1),
               lambda: f_int(1.0, 1.0)):
    try:
      call()
      errors.append(None)
    except (TypeError, ValueError) as e:
      errors.append((type(e).__name__, str(e)))
  out["errors"] = errors
  return out


def test_linearize_function_is_a_partial_of_the_residuals():
  got = _linearize_program(sc, jnp)
  want = _linearize_program(jax, jjnp)
  for k in ("type", "leaves", "batched_leaves", "errors"):
    assert got[k] == want[k], k
  for k in ("value", "batched_value"):
    for a, b in zip(got[k], want[k]):
      np.testing.assert_array_equal(a, b)
      assert a.dtype == b.dtype
  assert got["type"] == "Partial" and got["errors"][0][0] == "ValueError"
