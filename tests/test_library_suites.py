"""What the libraries' own test suites (optax, chex, equinox, flax; see
tests/ecosystem/test_library_slices.py) found failing under stagecraft, each pattern run on
JAX and on stagecraft in the same test: `copy_to_host_async` of an Array split over a mesh
(chex's `device_get` of `device_put` results), `disable_jit(disable=...)` (chex's fakes),
`inspect.signature(jitted, follow_wrapped=False)` (chex's fake_pmap); what vjp accepts for
an integer output (flax's tabulate), custom_vjp bwd outputs that are tree prefixes (flax.nnx),
eager callbacks that raise (equinox), eval_shape of typed keys (flax.nnx), the tuples a
library's rules get (equinox's vprim), custom_jvp/vjp `nondiff_argnames`."""
from __future__ import annotations

import functools
import inspect

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp

APIS = {"jax": (jax, jjnp), "stagecraft": (sc, snp)}


@pytest.mark.parametrize("ndev", [1, 4])
def test_copy_to_host_async_of_mesh_split_array(ndev):
  # chex's asserts read `device_put(x, NamedSharding(...))` results with `device_get`, which
  # starts every leaf's host copy first.
  results = {}
  for name, (api, jnp) in APIS.items():
    mesh = api.sharding.Mesh(np.array(api.devices()[:ndev]), ("d",))
    s = api.sharding.NamedSharding(mesh, api.sharding.PartitionSpec("d"))
    x = api.device_put(np.arange(ndev * 6, dtype=np.float32).reshape(ndev, 3, 2), s)
    y = api.jit(lambda a: a * 2)(x)
    out = []
    for a in (x, y, jnp.ones(3)):
      a.copy_to_host_async()
      out.append(np.asarray(api.device_get(a)).tolist())
    results[name] = out
  assert results["stagecraft"] == results["jax"]


def test_disable_jit_takes_disable_keyword():
  seen = {}
  for name, (api, jnp) in APIS.items():
    kinds = []
    f = api.jit(lambda x: kinds.append(isinstance(x, api.core.Tracer)) or x + 1)
    with api.disable_jit(disable=False):
      f(jnp.ones(2))
    with api.disable_jit(disable=True):
      api.jit(lambda x: kinds.append(isinstance(x, api.core.Tracer)) or x)(jnp.ones(2))
    with api.disable_jit(False):
      api.jit(lambda x: kinds.append(isinstance(x, api.core.Tracer)) or x)(jnp.ones(2))
    seen[name] = kinds
  assert seen["stagecraft"] == seen["jax"] == [True, False, True]


def test_signature_of_jitted_function_without_following_wrapped():
  def foo(x, y=2, *, z=3):
    return x

  for api, _ in APIS.values():
    for f in (api.jit(foo), api.jit(foo, static_argnums=1), api.jit(foo, donate_argnames="x")):
      assert str(inspect.signature(f, follow_wrapped=False)) == "(x, y=2, *, z=3)"
      assert str(inspect.signature(f)) == "(x, y=2, *, z=3)"


_EXIT_HANDLERS_SCRIPT = """
import atexit
import jax, jax.numpy as jnp
f = jax.jit(lambda a, b: a + b)
print(f(jnp.ones(2), jnp.ones(2)).tolist())
atexit._run_exitfuncs()
print(f(jnp.ones(2), jnp.ones(2)).tolist())
print(jax.tree_util.tree_leaves(((1, 2), {'a': [3]})))
print(jax.jit(lambda t: t[0] * t[1])((jnp.ones(2), jnp.ones(2))).tolist())
print(jax.vmap(lambda d: d['x'] + 1)({'x': jnp.arange(3.)}).tolist())
"""


def test_exit_handlers_run_by_hand_keep_pytrees(tmp_path):
  # chex's asserts_chexify_test calls `atexit._run_exitfuncs()` mid-run; optree's exit
  # handler clears its registry, after which tuples and dicts were leaves.
  import os
  import subprocess
  import sys
  script = tmp_path / "exit_handlers.py"
  script.write_text(_EXIT_HANDLERS_SCRIPT)
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(sc.__file__)),
                                         os.environ.get("PYTHONPATH", "")]))
  outs = [subprocess.run([sys.executable, *pre, str(script)], env=env, capture_output=True,
                         text=True, timeout=120)
          for pre in ([], ["-m", "stagecraft", "run"])]
  assert outs[0].returncode == 0, outs[0].stderr[-2000:]
  assert outs[1].returncode == 0, outs[1].stderr[-2000:]
  assert outs[1].stdout == outs[0].stdout


def test_checkify_with_key_array_arguments_and_results():
  # chex's chexify of a function of a tree holding typed key arrays
  from jax.experimental import checkify as jcheckify
  from stagecraft.experimental import checkify as scheckify
  seen = {}
  for name, (api, jnp), checkify in (("jax", APIS["jax"], jcheckify),
                                     ("stagecraft", APIS["stagecraft"], scheckify)):
    def f(x, k):
      checkify.check(jnp.all(x > 0), "neg {x}", x=x[0])
      return x + 1, api.random.split(k)
    out = []
    for xs in (jnp.ones(3), -jnp.ones(3)):
      for g in (checkify.checkify(f), api.jit(checkify.checkify(f))):
        err, (y, ks) = g(xs, api.random.key(0))
        out.append((err.get(), y.tolist(), ks.shape, str(ks.dtype),
                    api.random.key_data(ks).tolist()))
    seen[name] = out
  assert seen["stagecraft"] == seen["jax"]


def test_jaxpr_interpreter_rebinding_with_get_bind_params():
  # equinox.internal's finalise_jaxpr evaluates a jaxpr re-binding each equation with
  # `eqn.primitive.get_bind_params(eqn.params)` (a dict in JAX >= 0.9.2)
  seen = {}
  for name, (api, jnp) in APIS.items():
    def f(x, y):
      z = jnp.sin(x) * y
      return api.lax.cond(z.sum() > 0, lambda a: a + 1, lambda a: a - 1, z), jnp.cumsum(z)

    closed = api.make_jaxpr(f)(jnp.arange(3.0), 2.0)
    env = dict(zip(closed.jaxpr.invars, [jnp.arange(3.0), 2.0]))
    prims = []
    for eqn in closed.jaxpr.eqns:
      params = eqn.primitive.get_bind_params(eqn.params)
      assert isinstance(params, dict) and params == dict(eqn.params)
      prims.append(str(eqn.primitive))
      outs = eqn.primitive.bind(*[v.val if type(v).__name__ == "Literal" else env[v]
                                  for v in eqn.invars], **params)
      env.update(zip(eqn.outvars, outs if eqn.primitive.multiple_results else [outs]))
    seen[name] = prims, [np.asarray(env[v]).tolist() for v in closed.jaxpr.outvars]
  assert seen["stagecraft"] == seen["jax"]


def test_custom_jvp_rule_called_by_jvp_gets_primals_as_passed():
  # equinox's filter_custom_jvp tests: `jax.jvp` of a custom_jvp function at a Python float
  # hands the float itself to the rule, and the rule's outputs come back unconverted.
  seen = {}
  for name, (api, jnp) in APIS.items():
    @api.custom_jvp
    def h(x):
      return x

    @h.defjvp
    def h_jvp(p, t):
      return p[0] ** 2, t[0] ** 2

    out = [repr(v) for v in api.jvp(h, (2.0,), (3.0,))]
    out += [repr(v) for v in api.jvp(h, (jnp.float32(2.0),), (jnp.float32(3.0),))]
    out += [repr(api.linearize(h, 2.0)[0])]
    out += [repr(v) for v in api.jvp(api.jit(h), (2.0,), (3.0,))]
    seen[name] = [o.replace("ArrayImpl", "Array") for o in out]
  assert seen["stagecraft"] == seen["jax"]


def _int_output_vjps(api, jnp):
  def run(f):
    try:
      return [repr(v) for v in f()]
    except ValueError as e:
      return [str(e)]
  out, vjp = api.vjp(lambda x: 1, 1.0)
  res = run(lambda: vjp(out))                       # flax's tabulate(compute_vjp_flops)
  res += run(lambda: vjp(jnp.int32(3)))
  out2, vjp2 = api.vjp(lambda x: (x * 2, jnp.arange(3)), 1.0)
  res += run(lambda: vjp2(out2))
  res += run(lambda: vjp2((1.0, jnp.ones(3))))      # a float cotangent of the int output
  res += run(lambda: vjp2((1.0, jnp.ones(2))))      # a wrong shape still raises
  return res


def test_vjp_accepts_any_cotangent_of_an_integer_output():
  """JAX's vjp function takes any cotangent of an integer output's shape (not only float0)
  and ignores it: flax.linen's `tabulate(compute_vjp_flops=True)` passes the module's int
  output back."""
  seen = {name: _int_output_vjps(api, jnp) for name, (api, jnp) in APIS.items()}
  assert seen["stagecraft"] == seen["jax"]


def _prefix_bwd(api, jnp):
  @api.custom_vjp
  def f(p, x):
    return p["w"][0] * x + p["b"] * x

  def fwd(p, x):
    return f(p, x), (p, x)

  def bwd(res, g):
    p, x = res
    # a leaf for the list ["w"] (its one element), None for all of "b"
    return {"w": g * x, "b": None}, g * (p["w"][0] + p["b"])

  f.defvjp(fwd, bwd)
  p = {"w": [jnp.float32(2.0)], "b": jnp.float32(3.0)}
  out = api.grad(lambda p, x: f(p, x), argnums=(0, 1))(p, jnp.float32(4.0))
  res = [repr(v) for v in api.tree_util.tree_leaves(out)]

  @api.custom_vjp
  def h(t):
    return t[0] + t[1]

  h.defvjp(lambda t: (h(t), None), lambda r, g: ([g, g, g],))   # too long: not a prefix
  try:
    api.grad(h)((jnp.float32(1.0), jnp.float32(2.0)))
  except TypeError as e:
    res.append(str(e).split(", but got")[0])
  return res


def test_custom_vjp_bwd_output_may_be_a_prefix_of_the_inputs():
  """flax.nnx's custom_vjp (its docs example): the bwd rule's output is a tree prefix of
  the primal inputs, a leaf or None standing for a whole subtree, as JAX allows."""
  seen = {name: _prefix_bwd(api, jnp) for name, (api, jnp) in APIS.items()}
  assert seen["stagecraft"] == seen["jax"]


def _callback_raises(api, jnp):
  from importlib import import_module
  io_callback = import_module(f"{api.__name__}.experimental").io_callback

  def bad(x):
    raise ValueError("boom")
  sds = api.ShapeDtypeStruct((), jnp.float32)
  kinds = []
  for f in (lambda: api.pure_callback(bad, sds, jnp.float32(1)),
            lambda: api.jit(lambda x: api.pure_callback(bad, sds, x))(jnp.float32(1)),
            lambda: io_callback(bad, sds, jnp.float32(1)),
            lambda: api.pure_callback(lambda x: np.ones(2, np.float32), sds, jnp.float32(1))):
    with pytest.raises(Exception) as e:
      f()
    kinds.append((type(e.value) is api.errors.JaxRuntimeError, "boom" in str(e.value)
                  or "shape" in str(e.value)))
  return kinds


def test_a_callback_that_raises_eagerly_raises_jax_runtime_error():
  """As JAX's, where even an eager callback runs inside the runtime: what a pure/io callback
  raises comes out as JaxRuntimeError (a RuntimeError; equinox's filter_pure_callback tests
  catch RuntimeError), eagerly as under jit."""
  seen = {name: _callback_raises(api, jnp) for name, (api, jnp) in APIS.items()}
  assert seen["stagecraft"] == seen["jax"] == [(True, True)] * 4


def _key_shapes(api, jnp):
  k = api.random.key(0)
  s = api.ShapeDtypeStruct((), k.dtype)
  return [repr(x) for x in (
      s, s == api.eval_shape(lambda: api.random.key(0)), s.dtype,
      api.eval_shape(lambda k: api.random.split(k), k),
      api.eval_shape(lambda k: (api.random.split(k), api.random.normal(k, (3,))), s),
      api.eval_shape(lambda: {"a": api.random.key(1), "b": jnp.ones(2), "c": None}))]


def test_eval_shape_of_typed_keys_gives_key_dtype_structs():
  """flax.nnx's `eval_shape` of a module holding an Rngs: a typed key result is a
  ShapeDtypeStruct of dtype key<fry>, and such a struct may be passed in, as JAX's."""
  seen = {name: _key_shapes(api, jnp) for name, (api, jnp) in APIS.items()}
  assert seen["stagecraft"] == seen["jax"]


def _rule_arg_types(api):
  from importlib import import_module
  core = import_module(f"{api.__name__}.extend.core")
  ad = import_module(f"{api.__name__}.interpreters.ad")
  batching = import_module(f"{api.__name__}.interpreters.batching")
  seen = []
  p = core.Primitive("twice_lib")
  p.def_impl(lambda x: 2 * x)
  p.def_abstract_eval(lambda x: x)

  def jvp(primals, tangents):
    seen.append(("jvp", type(primals).__name__, type(tangents).__name__))
    return p.bind(*primals), p.bind(*tangents)

  def batch(vals, dims):
    seen.append(("batch", type(vals).__name__, type(dims).__name__))
    return p.bind(*vals), dims[0]

  def axis_batch(size, name, trace_type, vals, dims):
    seen.append(("axis_batch", type(vals).__name__, type(dims).__name__))
    return p.bind(*vals), dims[0]

  ad.primitive_jvps[p] = jvp
  batching.primitive_batchers[p] = batch
  api.jvp(p.bind, (1.0,), (1.0,))
  api.vmap(p.bind)(api.numpy.ones(2))
  q = core.Primitive("thrice_lib")
  q.def_impl(lambda x: 3 * x)
  q.def_abstract_eval(lambda x: x)
  batching.axis_primitive_batchers[q] = axis_batch
  api.vmap(q.bind)(api.numpy.ones(2))
  return seen


def test_library_rules_get_tuples_as_jax_passes_them():
  """A jvp or batching rule a library registers gets its primals/tangents and values/dims
  as tuples, as JAX hands them over (equinox's vprim passes them on as vmap in_axes/
  out_axes, whose structure must match the values')."""
  assert _rule_arg_types(sc) == _rule_arg_types(jax)


def _nondiff_names(api, jnp):
  @functools.partial(api.custom_jvp, nondiff_argnames=("n",))
  def f(x, n):
    return x ** n

  @f.defjvp
  def f_jvp(n, primals, tangents):
    (x,), (t,) = primals, tangents
    return x ** n, n * x ** (n - 1) * t * 10.0

  @functools.partial(api.custom_vjp, nondiff_argnames=("scale", "name"), nondiff_argnums=(1,))
  def g(x, name, scale):
    return x * scale

  g.defvjp(lambda x, name, scale: (x * scale, x),
           lambda name, scale, x, ct: (ct * scale * 100.0,))
  return [repr(v) for v in (f.nondiff_argnums, g.nondiff_argnums,
                            api.grad(f)(2.0, 3), api.grad(lambda x: f(x, n=3))(2.0),
                            api.grad(g)(2.0, "a", 3.0),
                            api.grad(lambda x: g(x, name="a", scale=3.0))(2.0))]


def test_custom_jvp_vjp_take_nondiff_argnames():
  """JAX 0.10.2's `nondiff_argnames` of custom_jvp/custom_vjp: positions by parameter name
  (with nondiff_argnums, sorted), arguments passed positionally or by keyword."""
  seen = {name: _nondiff_names(api, jnp) for name, (api, jnp) in APIS.items()}
  assert seen["stagecraft"] == seen["jax"]


def _static_both(api, jnp):
  def f(a, b, c=1):
    return a * 2 if b == "x" else a

  out = []
  for kw in ({"static_argnums": (1,), "static_argnames": ()},
             {"static_argnums": (), "static_argnames": ("b",)},
             {"static_argnames": ("b",)}, {"static_argnums": (1,)}):
    j = api.jit(f, **kw)
    for call in (lambda: j(1.0, "x"), lambda: j(1.0, b="x")):
      try:
        out.append(repr(call()))
      except TypeError as e:
        out.append(str(e).splitlines()[0].split(" at 0x")[0])
  return out


def test_jit_takes_static_argnums_and_argnames_given_both_as_they_are():
  """As JAX's jit: given both, static_argnums and static_argnames are not inferred from one
  another (flax's nn.jit passes numbers for its own arguments and names for the method's)."""
  seen = {name: _static_both(api, jnp) for name, (api, jnp) in APIS.items()}
  assert seen["stagecraft"] == seen["jax"]


def _eager_checkpoint(api, jnp):
  seen = []

  def f(x, t):
    seen.append((isinstance(t, jnp.ndarray), isinstance(t, bool)))
    return x * 2

  out = [repr(api.checkpoint(f)(1.0, True)),
         repr(api.checkpoint(f, static_argnums=(1,))(1.0, True))]
  try:
    api.checkpoint(lambda x, t: x if t else -x)(1.0, True)
  except Exception as e:
    out.append(type(e).__name__)
  return out, seen


def test_eager_checkpoint_traces_its_function():
  """Called eagerly, a checkpointed function is traced as JAX's is: its non-static
  arguments are tracers (flax's remat static_argnums tests check `isinstance(train,
  jnp.ndarray)`), so Python control flow on them raises."""
  seen = {name: _eager_checkpoint(api, jnp) for name, (api, jnp) in APIS.items()}
  assert seen["stagecraft"] == seen["jax"]
