"""Patterns from interpax, quax, evosax and penzai (their own test suites) that failed or
differed under stagecraft, each run in plain JAX code on JAX and on stagecraft in the same
test and compared. The libraries themselves are not in the `test` extra."""
from __future__ import annotations

import jax
import jax.numpy as jjnp
import ml_dtypes
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp

APIS = {"jax": (jax, jjnp), "stagecraft": (sc, snp)}


def _outcome(f):
  try:
    return ("ok", str(f()))
  except Exception as e:  # noqa: BLE001 - the exception is what is compared
    return (type(e).__name__, str(e))


@pytest.mark.parametrize("case", [
    "object_array", "object_dtype", "str_array", "one_object_array"])
def test_result_type_of_non_numeric_values_raises_jaxs_type_error(case):
  # interpax's PPoly: `jnp.result_type(x, jnp.array(1.0))` with an object array must raise
  # TypeError (scipy's test `assert_raises(TypeError, p, object_array)`), not KeyError.
  seen = {}
  for name, (api, jnp) in APIS.items():
    f = {"object_array": lambda: jnp.result_type(
             np.array([[0.1, 0.2], [0.4]], dtype=object), jnp.array(1.0)),
         "object_dtype": lambda: jnp.result_type(np.dtype(object)),
         "str_array": lambda: jnp.result_type(np.array(["a"])),
         "one_object_array": lambda: api.dtypes.result_type(np.array([1], dtype=object)),
         }[case]
    seen[name] = _outcome(f)
  assert seen["stagecraft"] == seen["jax"]
  assert seen["jax"][0] == "TypeError"


@pytest.mark.parametrize("a,b", [
    ("int4", "int4"), ("int4", "int8"), ("int4", "uint4"), ("uint2", "bool"), ("int4", "weak_int"),
    ("float0", "float0"), ("float0", "float32"), ("object", "float32")])
def test_promotion_of_sub_byte_ints_float0_and_invalid_dtypes(a, b):
  # JAX's lattice: int2/int4/uint2/uint4 sit below the weak int kind with no edge out;
  # float0 promotes only with itself; object is no dtype for promotion.
  def dt(n):
    return np.dtype(getattr(ml_dtypes, n, None) or (
        jax.dtypes.float0 if n == "float0" else n))
  seen = {}
  for name, (api, jnp) in APIS.items():
    def res():
      xs = [1 if n == "weak_int" else np.zeros(2, dt(n)) for n in (a, b)]
      return jnp.result_type(*xs)
    out = [_outcome(res)]
    if "weak_int" not in (a, b):
      out.append(_outcome(lambda: jnp.promote_types(dt(a), dt(b))))
    seen[name] = out
  assert seen["stagecraft"] == seen["jax"]


def test_served_import_jax_loads_jaxs_eager_submodules(installed):
  # treescope (penzai's and flax.nnx's printing) resolves `jax.tree_util.SequenceKey` through
  # `sys.modules["jax.tree_util"]`: real JAX's `import jax` loads its submodules, so a served
  # one must register stagecraft's under the same names.
  import subprocess
  import sys
  code = ("import sys, jax; print(' '.join(sorted(n for n in sys.modules if "
          "n.startswith('jax.') and not n.startswith('jax._src'))))")
  real = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.split())
  import jax as served_jax
  assert served_jax is sc
  # JAX's deprecated jax.interpreters.xla has no stagecraft counterpart.
  for name in sorted(real - {"jax.interpreters.xla"}):
    mod = sys.modules.get(name)
    assert mod is not None, name
    assert mod.__name__ == "stagecraft" + name[3:]
  key_cls = served_jax.tree_util.SequenceKey
  assert getattr(sys.modules[key_cls.__module__], key_cls.__name__) is key_cls


@pytest.mark.parametrize("indices,shape", [
    ([[1., 2.], [3., 4.]], (1, 4)), ([1.5, 7.0], (2, 4)), ([True, False], (2,)),
    ([-1, 9, -9, 3], (2, 4)), (np.array([0, 7, 8], np.uint8), (2, 4)), (5, (3, 3)), ([2], 4)])
def test_unravel_index_of_any_numeric_dtype_as_jax(indices, shape):
  # quax's numpy tests call `jnp.unravel_index` on a float array: JAX computes in the input
  # dtype (divmod from the last axis, out-of-bounds clipped) where stagecraft raised.
  seen = {}
  for name, (api, jnp) in APIS.items():
    out = jnp.unravel_index(jnp.asarray(indices), shape)
    seen[name] = [(np.asarray(o).tolist(), str(o.dtype), getattr(o, "weak_type", None))
                  for o in out]
  assert seen["stagecraft"] == seen["jax"]


def _custom_trace_program():
  """quax's pattern: a Trace/Tracer subclassed from `jax._src.core`, entered with
  `take_current_trace`/`set_current_trace`, forwarding each primitive to the parent trace
  and recording it. Run with `import jax` being JAX or stagecraft."""
  import jax
  import jax._src.core as core
  import jax.numpy as jnp

  class LogTracer(core.Tracer):
    __slots__ = ("val", "_aval")

    def __init__(self, trace, val):
      self._trace = trace
      self.val = val
      self._aval = jax.typeof(val)

    @property
    def aval(self):
      return self._aval

  class LogTrace(core.Trace):
    __slots__ = ("parent", "log", "tag")

    def __init__(self, parent, tag):
      super().__init__()
      self.parent, self.log, self.tag = parent, [], tag

    def process_primitive(self, prim, tracers, params):
      vals = [t.val if isinstance(t, LogTracer) else t for t in tracers]
      self.log.append(prim.name)
      with core.set_current_trace(self.parent):
        out = prim.bind(*vals, **params)
      if prim.multiple_results:
        return [LogTracer(self, o) for o in out]
      return LogTracer(self, out)

  def logged(f, *args):
    with core.take_current_trace() as parent:
      trace = LogTrace(parent, core.TraceTag())
      with core.set_current_trace(trace):
        out = f(*[LogTracer(trace, a) for a in args])
      return trace.full_raise(out).val, trace.log

  x = jnp.arange(4.0)
  out, log = logged(lambda a: jnp.sin(a) * 2 + a, x)
  aval = core.ShapedArray([2, 3], jnp.float32)   # a list shape, as quax's avals give
  return np.asarray(out).tolist(), log, aval.shape, issubclass(LogTrace, core.Trace)


def test_custom_trace_subclassing_jax_src_core_as_quax_does():
  import sys
  want = _custom_trace_program()
  from _util import served
  saved = {n: m for n, m in sys.modules.items() if n == "jax" or n.startswith("jax.")}
  with served():
    got = _custom_trace_program()
  # NB: JAX's jnp functions are jitted (`inline=True`), so its trace sees three `jit`
  # equations whose jaxprs hold sin, mul and add; stagecraft binds those directly.
  assert want[1] == ["jit", "jit", "jit"]
  assert got[1] == ["sin", "mul", "add"]
  assert (got[0], got[2], got[3]) == (want[0], want[2], want[3])
  assert all(sys.modules.get(n) is m for n, m in saved.items())


def _raw_threefry_program():
  # quax's PRNG example: raw keys from JAX's private Threefry functions.
  import importlib
  tf = importlib.import_module("jax._src.random.threefry2x32")
  key = tf.threefry_seed(np.int32(7))
  keys = tf.threefry_split(key, (3,))
  bits = tf.threefry_random_bits(keys[1], 32, (4,))
  folded = tf.threefry_fold_in(key, np.uint32(5))
  return [np.asarray(a).tolist() for a in (key, keys, bits, folded)]


def test_jax_private_threefry_functions_served_as_jax():
  want = _raw_threefry_program()
  from _util import served
  with served():
    got = _raw_threefry_program()
  assert got == want


def _nested_custom_vjp_program(api, jnp):
  """flax.nnx's custom_vjp (test_two_args_functional): the fwd rule calls the custom
  function itself; pytree outputs must be rebuilt in the caller's trace (nnx Variables
  record it and refuse to be returned from another one)."""
  import importlib
  get_state = importlib.import_module(api.__name__ + ".extend.core").get_opaque_trace_state

  class Box:
    def __init__(self, x):
      self.x, self.st = x, get_state()

  api.tree_util.register_pytree_node(Box, lambda b: ((b.x,), None),
                                     lambda _, ch: Box(ch[0]))
  log = []

  @api.custom_vjp
  def f(a, b):
    out = Box(b.x * 2)
    log.append(("body", out.st == get_state()))
    return jnp.sin(a.x) * a.x, out

  def f_fwd(a, b):
    y, bo = f(a, b)
    log.append(("fwd-after-inner", bo.st == get_state()))
    return (y, bo), (a.x,)

  def f_bwd(res, g):
    return Box(g[0] * jnp.cos(res[0])), Box(g[1].x * 2)

  f.defvjp(f_fwd, f_bwd)

  def loss(a, b):
    y, bo = f(a, b)
    log.append(("loss-after", bo.st == get_state()))
    return y + bo.x

  ga, gb = api.grad(loss, argnums=(0, 1))(Box(1.0), Box(3.0))
  out = [float(ga.x), float(gb.x), list(log)]
  log.clear()
  out += [float(api.jit(api.grad(loss))(Box(1.0), Box(3.0)).x), list(log)]
  return out


def test_custom_vjp_outputs_rebuilt_in_the_callers_trace():
  got = _nested_custom_vjp_program(sc, snp)
  assert got == _nested_custom_vjp_program(jax, jjnp)
  assert all(ok for _, ok in got[2] + got[4])


def _mesh(api, types):
  t = getattr(api.sharding.AxisType, types)
  return api.make_mesh((2, 2), ("a", "b"), (t, t))


def test_sharding_constraint_equations_print_jaxs_params():
  # JAX's sharding_constraint carries context_mesh, layout and unconstrained_dims (printed);
  # a Format's layout is a LayoutConstraint after the sharding constraint (flax.nnx's
  # `Variable(out_sharding=Format(...))`).
  seen = {}
  for name, (api, jnp) in APIS.items():
    P = api.sharding.PartitionSpec
    mesh = _mesh(api, "Auto")
    ns = api.sharding.NamedSharding(mesh, P("a", None))
    from importlib import import_module
    layout_mod = import_module(api.__name__ + ".experimental.layout")
    f01 = layout_mod.Format(layout_mod.Layout(major_to_minor=(0, 1)), ns)
    x = jnp.arange(16.0).reshape(4, 4)
    out = [str(api.make_jaxpr(lambda v: api.lax.with_sharding_constraint(v, ns))(x)),
           str(api.make_jaxpr(lambda v: api.lax.with_sharding_constraint(v, f01))(x))]
    # NB: under `set_mesh`, a PartitionSpec's sharding param is over the concrete mesh here
    # (JAX's: over the AbstractMesh): not compared
    g = api.jit(lambda v: api.lax.with_sharding_constraint(v * 2, f01))
    text = g.lower(x).as_text()
    out.append([ln.strip() for ln in text.splitlines() if "LayoutConstraint" in ln])
    y = g(x)
    out += [np.asarray(y).tolist(), str(y.sharding)]
    seen[name] = out
  assert seen["stagecraft"] == seen["jax"]


def test_eval_shape_and_out_info_shardings_only_over_explicit_meshes():
  # JAX: a traced result's ShapeDtypeStruct carries its type's sharding when the mesh's axes
  # are all Explicit (or Manual); over an Auto mesh the compiler decides (flax.nnx's
  # `eval_shape` + `as_abstract` then take the sharding from the variable's metadata).
  seen = {}
  for name, (api, jnp) in APIS.items():
    out = []
    for types in ("Auto", "Explicit"):
      with api.sharding.set_mesh(_mesh(api, types)):
        out.append(str(api.eval_shape(lambda: jnp.ones((4, 4)))))
        out.append(str(api.eval_shape(lambda v: v * 2,
                                      api.ShapeDtypeStruct((4,), jnp.float32))))
        out.append(str(api.jit(lambda: jnp.ones((4, 4))).trace().out_info))
    seen[name] = out
  assert seen["stagecraft"] == seen["jax"]


def test_eager_sharding_constraint_with_a_layout_over_a_mesh_is_not_supported():
  P = sc.sharding.PartitionSpec
  from stagecraft.experimental.layout import Format, Layout
  ns = sc.sharding.NamedSharding(_mesh(sc, "Auto"), P("a", None))
  x = snp.arange(16.0).reshape(4, 4)
  y = sc.lax.with_sharding_constraint(x, Format(Layout(major_to_minor=(0, 1)), ns))
  assert y.sharding == ns and np.array_equal(np.asarray(y), np.asarray(x))
  with pytest.raises(NotImplementedError, match="Formats .memory layouts. on the default"):
    sc.lax.with_sharding_constraint(x, Format(Layout(major_to_minor=(1, 0)), ns))


def _flax_scan_trace_count(api, jnp):
  # flax's `nn.scan` (axes_scan.build_shaped_array) builds avals with
  # `ShapedArray(..., sharding=x.aval.sharding)`, traces the body once with
  # `pe.trace_to_jaxpr_nounits` and once in `lax.scan`; a jitted function in the body is
  # traced once (linen's test_jit_scan_retracing).
  from importlib import import_module
  core = import_module(api.__name__ + ".core")
  pe = import_module(api.__name__ + ".interpreters.partial_eval")
  lu = import_module(api.__name__ + ".extend.linear_util")
  cnt = [0]

  @api.jit
  def inner(c):
    cnt[0] += 1
    return c * 2

  x = jnp.zeros(3)
  aval = core.ShapedArray(x.shape, x.dtype, sharding=api.typeof(x).sharding)
  body = lambda c: (inner(c),)
  dbg = api.api_util.debug_info("t", body, (1,), {})
  f_flat, _ = api.api_util.flatten_fun_nokwargs(lu.wrap_init(body, debug_info=dbg),
                                                api.tree_util.tree_structure((1,)))
  pe.trace_to_jaxpr_nounits(f_flat, [pe.PartialVal.unknown(aval)])
  api.lax.scan(lambda c, _: (inner(c), None), x, None, length=2)
  return cnt[0], aval == core.ShapedArray((3,), np.float32), \
      hash(aval) == hash(core.ShapedArray((3,), np.float32))


def test_avals_built_from_an_unsplit_sharding_equal_plain_ones():
  assert _flax_scan_trace_count(sc, snp) == _flax_scan_trace_count(jax, jjnp) == (1, True, True)


def test_checkify_formats_typed_keys_as_jax():
  # chex's chexify(assert_trees_all_equal) passes key arrays as check's format arguments.
  seen = {}
  for name, (api, jnp) in APIS.items():
    from importlib import import_module
    checkify = import_module(api.__name__ + ".experimental.checkify")

    def f(a, b):
      checkify.check(jnp.array_equal(a, b), "differ: {x} != {y}", x=a, y=b)
      return 1

    k1 = api.random.split(api.random.key(1))
    k2 = api.random.split(api.random.key(2))
    err, _ = api.jit(checkify.checkify(f))(k1, k2)
    ok, _ = checkify.checkify(f)(k1, k1)
    seen[name] = (err.get(), ok.get())
  assert seen["stagecraft"] == seen["jax"]
  assert "dtype=key<fry>" in seen["jax"][0]


@pytest.mark.parametrize("case", ["astype_same", "astype_batch", "method", "astype_f32",
                                  "convert_same", "asarray", "array", "jit_where_astype",
                                  "astype_u32"])
def test_key_arrays_cast_to_their_own_dtype_as_jax(case):
  # optax's gradient accumulation (MultiSteps) casts its state back with
  # `jnp.astype(jnp.where(emit, new, old), old.dtype)`, noisy_sgd's state being a key.
  seen = {}
  for name, (api, jnp) in APIS.items():
    k = api.random.key(0)
    ks = api.random.split(k)
    f = {"astype_same": lambda: jnp.astype(k, k.dtype),
         "astype_batch": lambda: jnp.astype(ks, ks.dtype),
         "method": lambda: ks.astype(ks.dtype),
         "astype_f32": lambda: jnp.astype(k, jnp.float32),
         "convert_same": lambda: api.lax.convert_element_type(k, k.dtype),
         "asarray": lambda: jnp.asarray(k, dtype=k.dtype),
         "array": lambda: jnp.array(k, dtype=k.dtype),
         "jit_where_astype": lambda: api.jit(
             lambda a: jnp.astype(jnp.where(True, a, a), a.dtype))(k),
         "astype_u32": lambda: jnp.astype(k, jnp.uint32)}[case]
    out = _outcome(f)
    seen[name] = (out[0], out[1].replace("\n", " "))
  assert seen["stagecraft"] == seen["jax"]


def test_jax_internals_keep_jaxs_core_under_the_runner(installed):
  # JAX's "How primitives work" tutorial calls `jax._src.lax` directly (real JAX code): the
  # served names quax needs (`import jax._src.core as core`) must not replace real JAX's.
  import importlib
  import jax as served
  real_core = importlib.import_module("jax._src.core")
  real_lax = importlib.import_module("jax._src.lax.lax")
  real_api = importlib.import_module("jax._src.api")
  assert served._src.core.Trace is sc.core.Trace
  assert served._src.pjit.jit_p is sc.pjit.jit_p
  assert real_core.Trace is not sc.core.Trace
  assert float(real_api.grad(lambda a: real_lax.mul(a, a))(3.0)) == 6.0


def test_float64_numpy_inputs_promote_to_canonical_arrays_without_warnings():
  # optax's softmax_cross_entropy_with_integer_labels on NumPy float64 logits: logsumexp
  # casts back with `.astype(a.dtype)`, which must be float32 (x64 off), not warn of float64.
  import warnings
  x = np.random.RandomState(0).randn(3, 4)
  seen = {}
  for name, (api, jnp) in APIS.items():
    with warnings.catch_warnings():
      warnings.simplefilter("error")
      out = [api.nn.logsumexp(x, axis=0), api.scipy.special.logsumexp(x, axis=1, b=np.ones(4)),
             api.nn.log_softmax(x, axis=0)]
    seen[name] = [(np.asarray(o).tolist(), str(o.dtype)) for o in out]
  assert seen["stagecraft"] == seen["jax"]


def test_xla_bridge_backends_as_chex_reads_them(installed):
  # chex's `set_n_cpu_devices` raises once `jax._src.xla_bridge._backends` holds the CPU
  # backend (a device count can no longer change); under the runner that is stagecraft's.
  import jax as served
  snp.zeros(2).block_until_ready()   # the backend has started
  backends = served._src.xla_bridge._backends
  assert set(backends) == {"cpu"}
  assert backends["cpu"].device_count() == len(sc.devices())


def test_like_functions_keep_a_committed_prototypes_sharding_as_jax():
  # optax's `zeros_like(params)` (adam's mu/nu) of parameters sharded over an Auto mesh:
  # JAX's full_like places the result as the concrete, committed prototype is placed.
  seen = {}
  for name, (api, jnp) in APIS.items():
    P = api.sharding.PartitionSpec
    mesh = api.make_mesh((2, 2), ("row", "col"),
                         axis_types=(api.sharding.AxisType.Auto,) * 2)
    w = api.device_put(jnp.ones((8, 2)), api.sharding.NamedSharding(mesh, P("row", "col")))
    d1 = api.device_put(jnp.ones(3), api.devices()[1])
    out = []
    for like in (w, d1, jnp.ones(3), jnp.asarray(2.0)):
      for f in (jnp.zeros_like, jnp.ones_like, lambda a: jnp.full_like(a, 3)):
        r = f(like)
        out.append((str(r.sharding), r.committed, np.asarray(r).tolist()))
    seen[name] = out
  assert seen["stagecraft"] == seen["jax"]


def test_set_mesh_object_prints_as_jaxs_under_the_runner(installed):
  # JAX's sharding docs end a cell with `jax.set_mesh(mesh)`: the notebook shows its repr.
  import jax as served
  reprs = []
  for api in (served, jax):
    ctx = api.sharding.set_mesh(api.make_mesh((2,), ("x",)))
    reprs.append(repr(ctx))
    ctx.__exit__(None, None, None)   # the mesh set before comes back
  assert reprs[0].startswith("<jax._src.sharding_impls.set_mesh object at 0x")
  assert reprs[0].split(" at ")[0] == reprs[1].split(" at ")[0]


def _batched_while_program(api, jnp):
  def outer(a, b, c):
    return api.lax.while_loop(lambda x: (x < c).squeeze(), lambda x: x + b, a)

  args = (jnp.arange(1), jnp.asarray(2), jnp.arange(2, 13, 2))
  vm = api.vmap(outer, in_axes=(None, None, 0))
  xs = np.arange(6, dtype=np.float32).reshape(2, 3)
  ns = np.array([1, 2, 3], np.int32)

  def g(x, n):
    return api.lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] + x),
                              (0, 0.0 * x))[1]

  return [str(api.make_jaxpr(vm)(*args)), np.asarray(vm(*args)).tolist(),
          np.asarray(api.vmap(api.vmap(api.jit(g)), (0, None))(xs, ns)).tolist(),
          np.asarray(api.vmap(api.vmap(g))(xs, np.stack([ns, ns[::-1]]))).tolist()]


def test_vmapped_while_with_a_batched_predicate_prints_jaxs_batched_while():
  # JAX 0.10's while keeps a per-lane predicate (cond returns bool[b]) and selects in its
  # lowering; quax's while rule interprets the batched body (no select_n on its values).
  assert _batched_while_program(sc, snp) == _batched_while_program(jax, jjnp)


def test_unreduced_types_survive_aval_normalization():
  # JAX's sharding-AD doc: an einsum with `out_sharding=P(None, None, unreduced={'X'})` has
  # an unsplit spec that must stay in the type (`f32[2,2]{U:X}`) and give JAX's values.
  import subprocess
  import sys
  code = r"""
import numpy as np
from stagecraft import compat
compat.install()
import jax, jax.numpy as jnp
mesh = jax.make_mesh((2,), ('X',))
with jax.set_mesh(mesh):
  a = jax.device_put(jnp.arange(8.).reshape(2, 4), jax.P(None, 'X'))
  b = jax.device_put(jnp.arange(8.).reshape(4, 2), jax.P('X', None))
  c = jnp.einsum('ij,jk->ik', a, b, out_sharding=jax.P(None, None, unreduced={'X'}))
  print(jax.typeof(c))
  print(np.asarray(jax.reshard(c, jax.P())).tolist())
"""
  env = {**__import__("os").environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
  assert out.returncode == 0, out.stderr[-2000:]
  lines = out.stdout.strip().splitlines()
  assert lines[0] == "float32[2,2]{U:X}"
  want = (np.arange(8.).reshape(2, 4) @ np.arange(8.).reshape(4, 2)).tolist()
  assert lines[1] == str(want)
