"""stagecraft's public namespace against JAX 0.10.2's: every public name of `jax`,
`jax.tree`, `jax.tree_util`, `jax.typing`, `jax.dtypes`, `jax.errors`, `jax.stages`,
`jax.sharding` and every config option exists in stagecraft, except the commented skip lists
below; and the functions added with them behave as JAX's (JAX is the oracle)."""
import contextlib
import gc
import io
import itertools
import re
import typing
import warnings

import jax
import jax.dtypes
import jax.errors
import jax.numpy as jnp
import jax.sharding
import jax.stages
import jax.tree
import jax.tree_util
import jax.typing
import ml_dtypes
import numpy as np
import pytest
from jaxlib import xla_client as xc

import stagecraft as sc
import stagecraft.numpy as snp
from stagecraft import lax
from stagecraft.runtime import dispatch

# name -> why stagecraft does not have it (yet).
SKIP = {
    "jax": {
        # a jax2tf (TensorFlow export) flag's State object; the option itself is in config
        "jax2tf_associative_scan_reductions": "jax2tf-only config State",
    },
    "jax.tree": {},
    "jax.tree_util": {},
    "jax.typing": {},
    "jax.dtypes": {},
    "jax.errors": {},
    "jax.stages": {},
    "jax.sharding": {
        # sharding in types (avals carrying shardings) is not implemented yet
    },
    "jax.config": {
        # absl flag integration (JAX's absl-based tests and binaries)
        "add_option": "absl integration", "complete_absl_config": "absl integration",
        "config_with_absl": "absl integration", "parse_flags_with_absl": "absl integration",
        "use_absl": "absl integration", "meta": "absl integration",
        # legacy property for absl FLAGS users; `config.enable_x64` is the option
        "x64_enabled": "legacy alias of enable_x64",
    },
}

MODULES = {"jax": (jax, sc), "jax.tree": (jax.tree, sc.tree),
           "jax.tree_util": (jax.tree_util, sc.tree_util),
           "jax.typing": (jax.typing, sc.typing), "jax.dtypes": (jax.dtypes, sc.dtypes),
           "jax.errors": (jax.errors, sc.errors), "jax.stages": (jax.stages, sc.stages),
           "jax.sharding": (jax.sharding, sc.sharding),
           "jax.config": (jax.config, sc.config)}


def _public(mod):
  return sorted(n for n in dir(mod) if not n.startswith("_"))


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_public_name_exists(name):
  theirs, ours = MODULES[name]
  missing = [n for n in _public(theirs) if not hasattr(ours, n) and n not in SKIP[name]]
  assert not missing, f"{name}: names JAX has and stagecraft lacks: {missing}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_skip_list_names_are_jax_names(name):
  theirs, _ = MODULES[name]
  stale = [n for n in SKIP[name] if not hasattr(theirs, n)]
  assert not stale, f"{name}: skip-list names JAX does not have: {stale}"


def test_config_options():
  missing = sorted(set(jax.config.values) - set(sc.config.values))
  assert not missing, f"config options JAX has and stagecraft lacks: {missing}"


def test_reexports_are_the_defining_objects():
  assert sc.P is sc.sharding.PartitionSpec and sc.NamedSharding is sc.sharding.NamedSharding
  assert sc.Shard is sc.sharding.Shard
  assert all(isinstance(s, sc.Shard) for s in snp.ones(3).addressable_shards)
  assert sc.Device is jax.Device and isinstance(sc.devices()[0], sc.Device)
  assert sc.float0 == jax.float0 == sc.dtypes.float0
  assert sc.tree_util.Partial is sc.tree_util.Partial
  assert isinstance(sc.tree_util.default_registry, sc.tree_util.PyTreeRegistry)


# ---------------------------------------------------------------------------
# errors


def test_error_class_tree_matches_jax():
  names = _public(jax.errors)
  for a, b in itertools.product(names, names):
    assert (issubclass(getattr(sc.errors, a), getattr(sc.errors, b))
            == issubclass(getattr(jax.errors, a), getattr(jax.errors, b))), (a, b)
  for n in names:
    for builtin in (TypeError, IndexError, RuntimeError, ValueError):
      assert (issubclass(getattr(sc.errors, n), builtin)
              == issubclass(getattr(jax.errors, n), builtin)), (n, builtin)
  assert sc.errors.JaxRuntimeError is xc.XlaRuntimeError is jax.errors.JaxRuntimeError


def _branch(x):
  if x > 0:
    return x
  return -x


@pytest.mark.parametrize("value", [1.0, np.float32(2.0), np.int32(3), True])
def test_bool_of_tracer_raises_tracer_bool_conversion_error(value):
  with pytest.raises(jax.errors.TracerBoolConversionError) as theirs:
    jax.jit(lambda x: x if x else -x)(value)
  with pytest.raises(sc.errors.TracerBoolConversionError) as ours:
    sc.jit(lambda x: x if x else -x)(value)
  assert str(ours.value).splitlines()[0] == str(theirs.value).splitlines()[0]
  assert str(ours.value).startswith("Attempted boolean conversion of traced array with shape")
  # still a ConcretizationTypeError and a TypeError, with stagecraft's origin and fix
  assert isinstance(ours.value, sc.errors.ConcretizationTypeError)
  assert isinstance(ours.value, TypeError)
  assert "depends on the value of the argument x." in str(ours.value)


def test_if_on_comparison_under_jit_and_make_jaxpr():
  with pytest.raises(jax.errors.TracerBoolConversionError) as theirs:
    jax.jit(_branch)(1.0)
  with pytest.raises(sc.errors.TracerBoolConversionError) as ours:
    sc.jit(_branch)(1.0)
  assert str(ours.value).splitlines()[0] == str(theirs.value).splitlines()[0]
  assert "Attempted boolean conversion of traced array with shape bool[]." in str(ours.value)
  with pytest.raises(sc.errors.TracerBoolConversionError):
    sc.make_jaxpr(_branch)(1.0)
  # concrete values under jvp/grad still convert, as in JAX
  assert float(sc.grad(_branch)(-2.0)) == float(jax.grad(_branch)(-2.0)) == -1.0


def test_other_concretization_errors_are_not_bool_errors():
  with pytest.raises(sc.errors.ConcretizationTypeError) as info:
    sc.jit(lambda x: x * int(x))(1)
  assert not isinstance(info.value, sc.errors.TracerBoolConversionError)
  assert isinstance(info.value, sc.errors.JAXTypeError)


def test_unexpected_tracer_error_is_a_type_error():
  leaked = []
  sc.jit(lambda x: leaked.append(x) or x)(1.0)
  with pytest.raises(TypeError) as info:
    leaked[0] + 1
  assert isinstance(info.value, sc.errors.UnexpectedTracerError)


def test_non_concrete_boolean_index_error():
  with pytest.raises(sc.errors.NonConcreteBooleanIndexError):
    sc.jit(lambda x: x[x > 0].sum())(snp.arange(3.0))


# ---------------------------------------------------------------------------
# dtypes, typing, stages


def test_extended_dtypes():
  key, jkey = sc.random.key(0), jax.random.key(0)
  for ours, theirs in ((sc.dtypes.extended, jax.dtypes.extended),
                       (sc.dtypes.prng_key, jax.dtypes.prng_key)):
    assert sc.dtypes.issubdtype(key.dtype, ours) == jax.dtypes.issubdtype(jkey.dtype, theirs)
    for dt in (np.float32, np.int8, sc.dtypes.bfloat16, np.bool_):
      assert sc.dtypes.issubdtype(dt, ours) == jax.dtypes.issubdtype(dt, theirs) is False
  assert issubclass(sc.dtypes.prng_key, sc.dtypes.extended)
  assert not sc.dtypes.issubdtype(key.dtype, np.floating)
  assert sc.dtypes.issubdtype(np.float32, np.floating)


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int8, np.uint16, np.bool_,
                                np.complex64, np.complex128, ml_dtypes.bfloat16,
                                ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.float8_e4m3fn,
                                "int4", "float16"])
def test_itemsize_bits(dt):
  assert sc.dtypes.itemsize_bits(dt) == jax.dtypes.itemsize_bits(dt)


def test_itemsize_bits_errors():
  with pytest.raises(ValueError):
    sc.dtypes.itemsize_bits(sc.random.key(0).dtype)
  with pytest.raises(ValueError):
    jax.dtypes.itemsize_bits(jax.random.key(0).dtype)


@pytest.mark.parametrize("x", [1, 1.5, True, 2j, np.int8(1), np.uint32(3), np.float16(1),
                               np.ones(2, np.complex64), np.zeros(2, bool),
                               ml_dtypes.bfloat16(1)])
def test_scalar_type_of(x):
  assert sc.dtypes.scalar_type_of(x) is jax.dtypes.scalar_type_of(x)


def test_scalar_type_of_arrays_and_errors():
  assert sc.dtypes.scalar_type_of(snp.ones(3)) is float
  assert sc.dtypes.scalar_type_of(snp.arange(3)) is int
  with pytest.raises(TypeError):
    sc.dtypes.scalar_type_of(np.array(["a"]))


def test_typing_names():
  args = set(typing.get_args(sc.typing.ArrayLike))
  assert {sc.Array, np.ndarray, np.bool_, np.number, bool, int, float, complex} <= args
  assert {str, np.dtype} <= set(typing.get_args(sc.typing.DTypeLike))
  assert isinstance(snp.float32, sc.typing.SupportsDType)


def test_stages_names():
  assert sc.stages.CompilerOptions == jax.stages.CompilerOptions
  assert isinstance(sc.jit(lambda x: x), sc.stages.Wrapped)
  assert not isinstance(lambda x: x, sc.stages.Wrapped)
  lowered = sc.jit(lambda x: x + 1).lower(1.0)
  assert isinstance(lowered, sc.stages.Lowered)


# ---------------------------------------------------------------------------
# runtime-level functions


def test_default_backend_and_devices():
  assert sc.default_backend() == jax.default_backend() == "cpu"
  assert sc.process_indices() == jax.process_indices() == [0]
  assert sc.process_indices("cpu") == [0]
  with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    assert sc.host_id() == 0 and sc.host_count() == 1 and sc.host_ids() == [0]
  assert len(w) == 3 and all("renamed to jax.process_" in str(x.message) for x in w)
  assert [str(x.message).split(" has")[0] for x in w] == ["jax.host_id", "jax.host_count",
                                                          "jax.host_ids"]


def test_device_get():
  tree = {"a": snp.arange(3.0), "b": [1, np.ones(2), None], "c": (snp.int32(4), 2.5),
          "d": snp.ones((2, 2), snp.bfloat16)}
  jtree = {"a": jnp.arange(3.0), "b": [1, np.ones(2), None], "c": (jnp.int32(4), 2.5),
           "d": jnp.ones((2, 2), jnp.bfloat16)}
  ours, theirs = sc.device_get(tree), jax.device_get(jtree)
  assert sc.tree.structure(ours) == sc.tree.structure(theirs)
  for o, t in zip(sc.tree.leaves(ours), jax.tree.leaves(theirs)):
    assert type(o) is type(t)
    if isinstance(t, np.ndarray):
      np.testing.assert_array_equal(o, t)
      assert o.dtype == t.dtype and o.flags.writeable == t.flags.writeable
    else:
      assert o == t
  assert sc.device_get(1) == 1 and sc.device_get(None) is None


def test_device_get_inside_jit_returns_tracers():
  seen = []
  sc.jit(lambda x: seen.append(sc.device_get(x)) or x)(1.0)
  assert isinstance(seen[0], sc.core.Tracer)


def test_copy_to_host_async():
  tree = {"a": snp.arange(3), "b": [np.ones(2), 3]}
  assert sc.copy_to_host_async(tree) is tree
  np.testing.assert_array_equal(np.asarray(tree["a"]), [0, 1, 2])
  assert sc.copy_to_host_async(5) == 5


def test_live_arrays_counts():
  gc.collect()
  base = len(sc.live_arrays())
  xs = [snp.ones(i + 1) + 1 for i in range(3)]
  made = len(sc.live_arrays()) - base
  assert all(type(a) is sc.Array for a in sc.live_arrays())
  assert any(a is xs[1] for a in sc.live_arrays())
  xs[0].delete()
  after_delete = len(sc.live_arrays()) - base
  del xs
  after_del = len(sc.live_arrays()) - base
  # the same steps with JAX's arrays (its count includes stagecraft's buffers: measured apart)
  jbase = len(jax.live_arrays())
  jxs = [jnp.ones(i + 1) + 1 for i in range(3)]
  jmade = len(jax.live_arrays()) - jbase
  jxs[0].delete()
  jafter_delete = len(jax.live_arrays()) - jbase
  del jxs
  jafter_del = len(jax.live_arrays()) - jbase
  assert (made, after_delete, after_del) == (jmade, jafter_delete, jafter_del) == (3, 2, 0)
  assert [id(a) for a in sc.live_arrays("cpu")] == [id(a) for a in sc.live_arrays()]


def test_typeof_matches_jax():
  cases = [(snp.ones(3), jnp.ones(3)), (1.0, 1.0), (3, 3), (True, True),
           (np.int8(2), np.int8(2)), (np.zeros((2, 0), np.float16),) * 2,
           (snp.arange(4) > 1, jnp.arange(4) > 1), (snp.float32(1) + 1, jnp.float32(1) + 1),
           (sc.random.key(0), jax.random.key(0))]
  for ours, theirs in cases:
    assert repr(sc.typeof(ours)) == repr(jax.typeof(theirs))
  assert sc.typeof(snp.ones(3)) == sc.typeof(snp.zeros(3))
  with sc.enable_x64(True):
    assert repr(sc.typeof(1.0)) == "ShapedArray(float64[], weak_type=True)"
    assert repr(sc.typeof(np.float64(1))) == "ShapedArray(float64[])"
  with pytest.raises(TypeError):
    sc.typeof("abc")


def test_typeof_of_tracers():
  seen, jseen = [], []
  sc.jit(lambda x: seen.append(repr(sc.typeof(x))) or x)(snp.ones((2, 3)))
  jax.jit(lambda x: jseen.append(repr(jax.typeof(x))) or x)(jnp.ones((2, 3)))
  sc.vmap(lambda x: seen.append(repr(sc.typeof(x))) or x)(snp.ones((2, 3)))
  jax.vmap(lambda x: jseen.append(repr(jax.typeof(x))) or x)(jnp.ones((2, 3)))
  assert seen == jseen == ["ShapedArray(float32[2,3])", "ShapedArray(float32[3])"]


def test_print_environment_info(capsys):
  info = sc.print_environment_info(return_string=True)
  assert info.startswith(f"stagecraft: {sc.__version__}\n")
  for field in ("jaxlib:", "numpy:", "python:", "device info: cpu-", "process_count: 1",
                "platform:"):
    assert field in info
  assert sc.print_environment_info() is None
  assert capsys.readouterr().out.strip() == info.strip()


def test_version():
  assert isinstance(sc.__version__, str)
  assert isinstance(sc.__version_info__, tuple)
  assert all(isinstance(p, int) for p in sc.__version_info__)
  assert ".".join(map(str, sc.__version_info__)) == sc.__version__
  assert sc.version.__version__ == sc.__version__
  assert isinstance(jax.__version_info__, tuple)


# ---------------------------------------------------------------------------
# clear_caches


def test_clear_caches_recompiles_eager_primitives():
  x = snp.arange(5.0)
  lax.cosh(x)                       # compiled (or cached) once
  n = dispatch.compile_count[0]
  lax.cosh(x)
  assert dispatch.compile_count[0] == n     # cached: no compile
  sc.clear_caches()
  np.testing.assert_allclose(lax.cosh(x), np.cosh(np.arange(5.0)), rtol=1e-6)
  assert dispatch.compile_count[0] == n + 1


def test_clear_caches_runs_registered_clearers():
  calls = []
  dispatch.register_cache_clearer(lambda: calls.append(1))
  try:
    sc.clear_caches()
    assert calls == [1]
  finally:
    dispatch.cache_clearers.pop()


def test_clear_caches_retraces_and_recompiles_jit():
  traces = []

  @sc.jit
  def f(x):
    traces.append(1)
    return x * 2 + 1

  x = snp.ones(3)
  f(x)
  f(x)
  n = dispatch.compile_count[0]
  assert len(traces) == 1
  sc.clear_caches()
  np.testing.assert_array_equal(f(x), 3 * np.ones(3))
  assert len(traces) == 2
  assert dispatch.compile_count[0] == n + 1


# ---------------------------------------------------------------------------
# ensure_compile_time_eval


def test_ensure_compile_time_eval_docstring_example():
  def make(lib, np_):
    @lib.jit
    def f(x):
      with lib.ensure_compile_time_eval():
        y = np_.sin(3.0)
        z = np_.sin(y)
        z_positive = z > 0
      if z_positive:     # concrete: usable in Python control flow
        return np_.sin(x)
      return np_.cos(x)
    return f
  ours, theirs = make(sc, snp)(0.5), make(jax, jnp)(0.5)
  np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_ensure_compile_time_eval_folds_constants_out_of_the_jaxpr():
  kinds = {}

  def make(lib, np_, tag):
    def f(x):
      with lib.ensure_compile_time_eval():
        y = np_.sin(3.0) * 2
        kinds[tag + "y"] = type(y)
        w = x + 1        # traced: stays in the program
        kinds[tag + "w"] = type(w)
      return w * y
    return f
  text = str(sc.make_jaxpr(sc.jit(make(sc, snp, "s")))(1.0))
  jtext = str(jax.make_jaxpr(jax.jit(make(jax, jnp, "j")))(1.0))
  assert "sin" not in text and "sin" not in jtext
  assert "add" in text and "mul" in text
  assert kinds["sy"] is sc.Array
  assert issubclass(kinds["sw"], sc.core.Tracer)
  np.testing.assert_allclose(sc.jit(make(sc, snp, "s"))(1.5),
                             jax.jit(make(jax, jnp, "j"))(1.5), rtol=1e-6)
  # without the context the constant is traced
  assert "sin" in str(sc.make_jaxpr(lambda x: x * snp.sin(3.0))(1.0))


def test_ensure_compile_time_eval_under_vmap_and_grad_and_eagerly():
  def f(x):
    with sc.ensure_compile_time_eval():
      c = snp.arange(3.0).sum()
      assert type(c) is sc.Array
    return x * c

  def jf(x):
    with jax.ensure_compile_time_eval():
      c = jnp.arange(3.0).sum()
    return x * c
  np.testing.assert_allclose(sc.vmap(f)(snp.arange(4.0)), jax.vmap(jf)(jnp.arange(4.0)))
  assert float(sc.grad(f)(2.0)) == float(jax.grad(jf)(2.0)) == 3.0
  assert float(f(2.0)) == 6.0
  assert sc.core.current_trace() is sc.core.eval_trace


def test_ensure_compile_time_eval_random_and_restores_trace():
  @sc.jit
  def f(x):
    before = sc.core.current_trace()
    with sc.ensure_compile_time_eval():
      y = sc.random.uniform(sc.random.key(0), (3,))
      assert type(y) is sc.Array
      with sc.ensure_compile_time_eval():   # nesting is harmless
        z = snp.ones(2).sum()
      assert type(z) is sc.Array
    assert sc.core.current_trace() is before
    return x + y
  np.testing.assert_allclose(f(1.0), 1.0 + np.asarray(sc.random.uniform(sc.random.key(0),
                                                                          (3,))))


# ---------------------------------------------------------------------------
# fwd_and_bwd


def test_fwd_and_bwd_matches_jax():
  x = np.arange(16.0, dtype=np.float32).reshape(4, 4) / 10
  w = np.ones((4, 4), np.float32) * 0.5
  ct = np.ones((4, 4), np.float32)
  f = lambda x, w: snp.tanh(x @ w)
  jf = lambda x, w: jnp.tanh(x @ w)
  fwd, bwd = sc.fwd_and_bwd(f, argnums=(0, 1))
  jfwd, jbwd = jax.fwd_and_bwd(jf, argnums=(0, 1))
  y, res = fwd(x, w)
  jy, jres = jfwd(x, w)
  np.testing.assert_allclose(y, jy, rtol=1e-6)
  for o, t in zip(bwd(res, ct), jbwd(jres, ct)):
    np.testing.assert_allclose(o, t, rtol=1e-5)
  # the backward pass compiles once and is reused
  n = dispatch.compile_count[0]
  for _ in range(3):
    y, res = fwd(x, w)
    bwd(res, ct)
  assert dispatch.compile_count[0] == n


def test_fwd_and_bwd_int_argnums_has_aux_and_unjitted():
  f = lambda x, w: ((x * w).sum(), x.shape[0])
  jf = lambda x, w: ((x * w).sum(), x.shape[0])
  for jitted in (True, False):
    fwd, bwd = sc.fwd_and_bwd(f, argnums=1, has_aux=True, jitted=jitted)
    jfwd, jbwd = jax.fwd_and_bwd(jf, argnums=1, has_aux=True, jitted=jitted)
    y, res, aux = fwd(np.arange(3.0), 2.0)
    jy, jres, jaux = jfwd(np.arange(3.0), 2.0)
    assert float(y) == float(jy) and int(aux) == int(jaux)
    assert float(bwd(res, 1.0)) == float(jbwd(jres, 1.0)) == 3.0
  with pytest.raises(TypeError):
    sc.fwd_and_bwd(3, argnums=0)


# ---------------------------------------------------------------------------
# ds


def test_ds_matches_jax():
  from jax._src.indexing import Slice as JSlice
  assert sc.ds(None) == jax.ds(None) == slice(None)
  for args in ((3,), (1, 2), (1, 2, 3), (0, 0)):
    ours, theirs = sc.ds(*args), jax.ds(*args)
    assert (ours.start, ours.size, ours.stride) == (theirs.start, theirs.size, theirs.stride)
  for slc, n in ((slice(1, None, 2), 10), (slice(None), 5), (slice(-3, None), 7),
                 (slice(2, 1), 4)):
    ours, theirs = sc.indexing.Slice.from_slice(slc, n), JSlice.from_slice(slc, n)
    assert (ours.start, ours.size, ours.stride) == (theirs.start, theirs.size, theirs.stride)
  with pytest.raises(ValueError, match="Non-static stride"):
    sc.ds(1, 2, np.int32(1) + 0.5)
  with pytest.raises(ValueError):
    sc.ds(1, 2, -1)
  with pytest.raises(ValueError):
    sc.indexing.Slice.from_slice(slice(None, None, -1), 4)


def test_ds_is_a_pytree_with_dynamic_parts_as_leaves():
  assert sc.tree.leaves(sc.ds(1, 2)) == jax.tree.leaves(jax.ds(1, 2)) == []
  seen = []

  @sc.jit
  def f(s):
    seen.append(s)
    return s.start + 1
  assert int(f(sc.ds(snp.int32(3), 2))) == 4
  assert isinstance(seen[0].start, sc.core.Tracer) and seen[0].size == 2


def test_ds_as_an_index():
  x = snp.arange(10)
  np.testing.assert_array_equal(x[sc.ds(4, 2)], [4, 5])


def test_skip_lists_name_only_missing_names():
  """A name stagecraft has must leave the skip list (it would hide a later regression)."""
  import importlib
  for module, skips in SKIP.items():
    if module == "jax.config":
      continue
    ours = importlib.import_module(module.replace("jax", "stagecraft", 1))
    present = sorted(n for n in skips if hasattr(ours, n))
    assert not present, f"{module}: {present} exist now: remove them from SKIP"


def test_empty_ref_and_free_ref_at_the_top_level_as_jax():
  # (JAX 0.10.2's empty_ref works inside traces only: eagerly it has no evaluation rule)
  r = sc.empty_ref(sc.ShapeDtypeStruct((2, 3), np.float32))
  assert (r.shape, r.dtype) == ((2, 3), np.float32)
  assert "empty_ref" in dir(jax) and "free_ref" in dir(jax)
  assert sc.free_ref is sc.ref.free_ref and sc.empty_ref is sc.ref.empty_ref


def test_make_user_context_keys_jit_caches_as_jax():
  traces = {"sc": 0, "jax": 0}

  def counted(lib):
    def f(x):
      traces[lib] += 1
      return x * 2
    return f
  f_sc, f_jax = sc.jit(counted("sc")), jax.jit(counted("jax"))
  ctx, jctx = sc.make_user_context(default_value=None), jax.make_user_context(None)
  for v in (1, 2, 1, 2, None):
    with ctx(v), jctx(v):
      assert float(f_sc(1.0)) == float(f_jax(1.0)) == 2.0
      assert ctx.value == v
  f_sc(1.0)
  f_jax(1.0)
  assert traces["sc"] == traces["jax"] == 3   # one trace per distinct value (1, 2, None)
  assert ctx.value is None
  with pytest.raises(TypeError):
    with ctx([1]):
      pass
