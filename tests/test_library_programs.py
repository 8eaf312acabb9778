"""What JAX libraries (equinox, diffrax, lineax, optimistix) rely on, found running their
examples unchanged (equinox's score-based diffusion, diffrax's hessian, steady-state,
stiff-ODE, neural ODE/CDE examples), each test running the same code on JAX and stagecraft:
pytrees registered through `tree_util` where the API flattens user values outside the
transformations (callbacks, `debug.print`/`debug.callback`, debug_nans); the older
batching-rule registry `batching.axis_primitive_batchers`; what a custom_vjp fwd rule sees
for a jit's literals; `eval_shape` of ShapeDtypeStructs; JAX's texts for non-array outputs;
float0 cotangents through a vmapped custom_vjp; a custom_jvp function used in its own JVP
rule; `iscomplexobj` of dtype-bearing objects."""
from __future__ import annotations

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from jax.experimental import io_callback as jio_callback
from jax.extend import core as jext_core
from jax.interpreters import batching as jbatching
from jax.interpreters import mlir as jmlir

import stagecraft as sc
import stagecraft.numpy as snp
from stagecraft import tree_util as stree_util
from stagecraft.experimental import io_callback as sio_callback
from stagecraft.extend import core as sext_core
from stagecraft.interpreters import batching as sbatching
from stagecraft.interpreters import mlir as smlir


def _pair_class(tree_util):
  @tree_util.register_pytree_node_class
  class Pair:
    def __init__(self, a, b):
      self.a, self.b = a, b

    def tree_flatten(self):
      return (self.a, self.b), None

    @classmethod
    def tree_unflatten(cls, aux, children):
      return cls(*children)

    def __repr__(self):
      return f"Pair({self.a}, {self.b})"
  return Pair


J = (jax, jjnp, jax.tree_util, jio_callback)
S = (sc, snp, stree_util, sio_callback)


def _values(p):
  return np.asarray(p.a).tolist(), np.asarray(p.b).tolist(), np.asarray(p.b).dtype


@pytest.mark.parametrize("which", ["pure", "pure_eager", "io"])
def test_callbacks_take_and_return_registered_pytrees(which):
  results = []
  for api, np_, tree_util, io_callback in (J, S):
    pair = _pair_class(tree_util)
    spec = pair(api.ShapeDtypeStruct((2,), np_.float32), api.ShapeDtypeStruct((), np_.int32))

    def host(p, pair=pair):
      assert type(p).__name__ == "Pair"
      return pair(np.asarray(p.a, np.float32) * 2, np.int32(np.asarray(p.b).sum()))
    if which == "pure":
      out = api.jit(lambda x: api.pure_callback(host, spec, pair(x, x + 1)))(np_.ones(2))
    elif which == "pure_eager":
      out = api.pure_callback(host, spec, pair(np_.ones(2), np_.full(2, 3.0)))
    else:
      out = api.jit(lambda x: io_callback(host, spec, pair(x, x + 1)))(np_.ones(2))
    assert type(out).__name__ == "Pair"
    results.append(_values(out))
  assert results[0] == results[1]


def test_result_shape_dtypes_with_none_leaves_and_bad_leaf():
  for api, np_, tree_util, _ in (J, S):
    pair = _pair_class(tree_util)
    spec = pair(api.ShapeDtypeStruct((), np_.float32), None)
    out = api.jit(lambda x: api.pure_callback(lambda p: pair(np.float32(5), None), spec,
                                              x))(1.0)
    assert float(out.a) == 5.0 and out.b is None
  pair = _pair_class(stree_util)
  with pytest.raises(TypeError, match=r"got 3 at \[1\]"):
    sc.pure_callback(lambda: None, pair(sc.ShapeDtypeStruct((), snp.float32), 3))


def test_debug_print_and_callback_take_registered_pytrees(capfd):
  outs = []
  for api, np_, tree_util, _ in (J, S):
    pair = _pair_class(tree_util)
    seen = []
    api.jit(lambda x: api.debug.print("p={p}", p=pair(x, 2 * x)))(np_.arange(2.0))
    api.jit(lambda x: api.debug.callback(lambda p: seen.append(_values(p)),
                                         pair(x, x + 1)))(np_.arange(2.0))
    api.effects_barrier()
    outs.append((capfd.readouterr().out, seen))
  assert outs[0] == outs[1]
  assert outs[1][0] == "p=Pair([0. 1.], [0. 2.])\n"


def test_debug_nans_checks_a_registered_pytree_output():
  messages = []
  for api, np_, tree_util, _ in (J, S):
    pair = _pair_class(tree_util)
    with api.debug_nans(True):
      with pytest.raises(FloatingPointError) as e:
        api.jit(lambda x: pair(x, np_.log(x)))(np_.array([1.0, -1.0]))
    messages.append(str(e.value).splitlines()[0])
  assert messages[0] == messages[1]


def _define_prim(extend_core, batching, mlir, np_):
  """A library primitive registered as equinox registers its loop primitives: a batching
  rule in JAX's older `axis_primitive_batchers` form."""
  prim = extend_core.Primitive("lib_scale")
  prim.multiple_results = True
  prim.def_impl(lambda x, *, k: [x * k])
  prim.def_abstract_eval(lambda x, *, k: [x])
  mlir.register_lowering(prim, mlir.lower_fun(lambda x, *, k: [x * k],
                                              multiple_results=True))
  calls = []

  def batch_rule(axis_size, axis_name, trace_type, inputs, batch_axes, **params):
    # an unnamed vmap axis: JAX passes a fresh object, stagecraft None
    name = axis_name if isinstance(axis_name, str) else "<unnamed>"
    calls.append((axis_size, name, trace_type, tuple(batch_axes)))
    x, = inputs
    d, = batch_axes
    if d is None:
      return prim.bind(x, **params), [None]
    return prim.bind(np_.moveaxis(x, d, 0) + 0, **params), [0]
  batching.axis_primitive_batchers[prim] = batch_rule
  return prim, batch_rule, calls


def test_axis_primitive_batchers_take_jax_s_older_rule_signature():
  results = []
  for api, np_, ext_core, batching, mlir in ((jax, jjnp, jext_core, jbatching, jmlir),
                                             (sc, snp, sext_core, sbatching, smlir)):
    prim, rule, calls = _define_prim(ext_core, batching, mlir, np_)
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    out1 = api.vmap(lambda r: prim.bind(r, k=2.0)[0], in_axes=1, axis_name="i")(x)
    out2 = api.jit(api.vmap(lambda r: prim.bind(r, k=3.0)[0] + r.sum()))(x)
    out3 = api.vmap(lambda r: prim.bind(np_.ones(3), k=1.0)[0] + r)(x)   # unbatched operand
    results.append(([np.asarray(o).tolist() for o in (out1, out2, out3)], calls))
    assert prim in batching.fancy_primitive_batchers
  assert results[0] == results[1]
  assert results[1][1][0] == (3, "i", None, (1,))
  assert sbatching.axis_primitive_batchers[prim] is rule


def _fwd_arg_kinds(api, np_):
  """What a custom_vjp fwd rule (symbolic zeros) receives for arguments that were literals
  of a jitted function, differentiated twice (diffrax's `hessian` example: equinox's
  checkpointed while loop splits its state on `is_array`)."""
  import functools
  seen = []

  @functools.partial(api.custom_vjp, nondiff_argnums=(0,))
  def f(n, x, k, b):
    return x * 2.0

  def fwd(n, x, k, b):
    seen.append(tuple(isinstance(a.value, api.Array) for a in (x, k, b)))
    seen.append((k.value.dtype, b.value.dtype))
    return x.value * 2.0, None

  f.defvjp(fwd, lambda n, res, g: (g * 2.0, None, None), symbolic_zeros=True)
  inner = api.jit(lambda x: f(1, x, np_.array(0), np_.array(True)) ** 2)
  out = [float(api.jit(api.hessian(inner))(3.0)), float(api.hessian(inner)(3.0)),
         float(api.grad(inner)(3.0))]
  return seen, out


def test_custom_vjp_fwd_sees_arrays_for_a_jit_s_literals():
  assert _fwd_arg_kinds(jax, jjnp) == _fwd_arg_kinds(sc, snp)


def test_eval_shape_passes_shape_dtype_structs_through():
  for api, np_ in ((jax, jjnp), (sc, snp)):
    s = api.ShapeDtypeStruct((2,), np_.float32)
    out = api.eval_shape(lambda x: (x, s, 1.0, None), np_.ones(3))
    assert [(o.shape, o.dtype, o.weak_type) for o in out[:3]] == [
        ((3,), np.float32, False), ((2,), np.float32, False), ((), np.float32, True)]
    assert out[3] is None


def _ret(x):
  return (x, "a")


_NON_ARRAY_OUTPUTS = {
    "jit": lambda api: api.jit(_ret),
    "jit_dict": lambda api: api.jit(lambda x: {"a": [x, "s"]}),
    "jit_whole": lambda api: api.jit(lambda x: object),
    "eval_shape": lambda api: lambda x: api.eval_shape(_ret, x),
    "make_jaxpr": lambda api: api.make_jaxpr(_ret),
    "vmap": lambda api: api.vmap(_ret),
    "grad": lambda api: api.grad(lambda x: "a"),
    "vjp": lambda api: lambda x: api.vjp(_ret, x),
    "checkpoint": lambda api: api.checkpoint(_ret),
    "scan": lambda api: lambda x: api.lax.scan(lambda c, y: (c, "a"), x, x),
    "cond": lambda api: lambda x: api.lax.cond(True, lambda: "a", lambda: "b"),
    "switch": lambda api: lambda x: api.lax.switch(0, [lambda: "a", lambda: "b"]),
    "while": lambda api: lambda x: api.lax.while_loop(lambda c: False, lambda c: "a", x),
    # fori_loop names the user's body and itself, not its own scan/while wrapper
    "fori_loop": lambda api: lambda x: api.lax.fori_loop(0, 2, lambda i, c: (c, "a"), x),
    "fori_loop_traced": lambda api: api.jit(
        lambda x: api.lax.fori_loop(0, x.shape[0] + x[0].astype(int), lambda i, c: "a", x)),
}


@pytest.mark.parametrize("name", sorted(_NON_ARRAY_OUTPUTS))
def test_non_array_outputs_raise_jax_s_message(name):
  messages = []
  for api, np_ in ((jax, jjnp), (sc, snp)):
    with pytest.raises(TypeError) as e:
      _NON_ARRAY_OUTPUTS[name](api)(np_.ones(1) if name != "grad" else 1.0)
    messages.append(str(e.value).splitlines()[0])
  assert messages[0] == messages[1]


def _f0_programs(api, np_):
  @api.custom_vjp
  def f(x, n):
    return x * n
  f.defvjp(lambda x, n: (x * n, (x, n)), lambda r, g: (g * r[1], None))
  loss = lambda x, n: api.vmap(f, in_axes=(0, None))(x, n).sum()
  x = np_.ones(3)
  return [np.asarray(o).tolist() for o in (
      api.grad(loss)(x, 2), api.jit(api.grad(loss))(x, 2),
      api.vmap(api.grad(f), in_axes=(0, None))(x, 2),
      api.grad(lambda x, n: api.vmap(f)(x, n).sum())(x, np_.arange(3)))]


def test_vmapped_custom_vjp_with_an_integer_argument_differentiates():
  """neural_ode/neural_cde (diffrax): an unbatched integer argument's float0 cotangent
  through a vmapped custom_vjp (was: `mul does not accept dtype void`)."""
  assert _f0_programs(jax, jjnp) == _f0_programs(sc, snp)


def _custom_jvp_applied_to_tangents(api, np_):
  @api.custom_jvp
  def g(x):
    return 3.0 * x
  g.defjvp(lambda p, t: (g(p[0]), g(t[0])))   # the tangent goes through g itself
  f = lambda x: np_.sin(g(x)).sum()
  return (float(api.grad(f)(1.0)), float(api.jit(api.grad(f))(1.0)),
          str(api.make_jaxpr(api.grad(f))(1.0)))


def test_custom_jvp_function_in_its_own_jvp_rule_transposes():
  """optimistix's implicit differentiation (diffrax's steady-state example): a custom_jvp
  function applied to tangents is transposed through its body, as JAX's."""
  assert _custom_jvp_applied_to_tangents(jax, jjnp) == _custom_jvp_applied_to_tangents(sc, snp)


def test_iscomplexobj_reads_dtype_attributes():
  for api, np_ in ((jax, jjnp), (sc, snp)):
    k = api.random.key(0)
    got = [np_.iscomplexobj(api.ShapeDtypeStruct((3,), np_.complex64)),
           np_.iscomplexobj(api.ShapeDtypeStruct((3,), np_.float32)), np_.iscomplexobj(None),
           np_.iscomplexobj(k), bool(api.jit(lambda k: np_.iscomplexobj(k))(k)),
           np_.iscomplexobj([1, 2j]), np_.isrealobj(np.ones(2))]
    assert got == [True, False, False, False, False, True, True]


def test_like_functions_take_shape_dtype_structs():
  """optax's `tree.zeros_like` over `eval_shape` results (gradient accumulation with
  flax.nnx): JAX's `*_like` take any object with `shape` and `dtype`."""
  outs = []
  for api, np_ in ((jax, jjnp), (sc, snp)):
    s = api.ShapeDtypeStruct((3,), np_.float32)
    rs = [np_.zeros_like(s), np_.ones_like(s, dtype=np_.int32), np_.full_like(s, 2.0),
          np_.zeros_like(s, shape=(2,)), api.jit(lambda: np_.ones_like(s))()]
    outs.append([(r.dtype, r.shape, r.weak_type, np.asarray(r).tolist()) for r in rs])
  assert outs[0] == outs[1]
