"""Constants closed over by a jit body: as in JAX 0.10.2 they stay in the jit equation's
ClosedJaxpr (printed as constvars of the body, continuing the outer names), unless one of
them is a tracer of an enclosing trace (then all are leading operands). Printed jaxprs are
compared with JAX's, values with JAX's and NumPy's. As JAX 0.10.2 lowers them by default
(`jax_use_simplified_jaxpr_constants=False`), the compiled programs hold the constants in
their text (`stablehlo.constant`, those of an inner jit inside its function), so XLA folds
operations on them and results agree with JAX's to the last bit; with the option set they
are arguments of the program. Dispatch, recompilation, donation, export, serialization and
xla_computation keep working."""
from __future__ import annotations

import re
import types

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp
from stagecraft import export
from stagecraft.xla_computation import xla_computation

JAX = types.SimpleNamespace(lib=jax, np=jjnp, lax=jax.lax)
SC = types.SimpleNamespace(lib=sc, np=snp, lax=sc.lax)

C = np.arange(1, 4, dtype=np.float32) * 1.5
X = np.array([0.5, -1.0, 2.0], np.float32)
XB = np.stack([X, X * 2])
BIG = np.linspace(-1, 1, 4096, dtype=np.float32)


def _jitted(m):
  """`g`, a jit closing over a NumPy constant."""
  return m.lib.jit(lambda y: m.np.sin(y) * C)


# Each program: m -> (function, args). The same program is built for JAX and stagecraft.
PROGRAMS = {
    "closure_and_literal": lambda m: (
        lambda x: m.lib.jit(lambda y, z: y * z + C)(x, 2.0), (X,)),
    "make_jaxpr_of_jit": lambda m: (_jitted(m), (X,)),
    "nested_jit": lambda m: (
        m.lib.jit(lambda y: _jitted(m)(y) + C), (X,)),
    "nested_jit_in_expression": lambda m: (
        lambda x: m.lib.jit(lambda y: _jitted(m)(y) + C)(x) * 2, (X,)),
    "closure_over_array": lambda m: (
        (lambda a: m.lib.jit(lambda y: y + a))(m.np.arange(3.0)), (X,)),
    "scalar_constant_is_a_literal": lambda m: (
        lambda x: m.lib.jit(lambda y: y + np.float32(2))(x), (X,)),
    "closure_over_a_tracer": lambda m: (
        lambda x: m.lib.jit(lambda y: y * x + C)(x), (X,)),
    "vmap_of_jit": lambda m: (m.lib.vmap(_jitted(m)), (XB,)),
    "vmap_closure_over_tracer": lambda m: (
        m.lib.vmap(lambda y: m.lib.jit(lambda z: z * y.sum() + C)(y)), (XB,)),
    "jvp_of_jit": lambda m: (
        lambda x, t: m.lib.jvp(_jitted(m), (x,), (t,)), (X, X)),
    "jit_in_scan": lambda m: (
        lambda x: m.lax.scan(lambda c, _: (_jitted(m)(c), None), x, None, length=2)[0], (X,)),
    "jit_in_cond": lambda m: (
        lambda p, x: m.lax.cond(p, _jitted(m), lambda y: y, x), (True, X)),
    "jit_in_while": lambda m: (
        lambda x: m.lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, _jitted(m)(c[1])),
                                   (0, x))[1], (X,)),
    "big_constant": lambda m: (
        lambda x: m.lib.jit(lambda y: y.sum() + BIG)(x), (X,)),
    "constant_used_twice": lambda m: (   # one constvar (a ufunc keeps the NumPy operand)
        lambda x: m.lib.jit(lambda y: m.np.sin(C) * y + C)(x), (X,)),
}


def _normalize(text: str) -> str:
  # (derived calls keep the jit's name, as JAX's: nothing to normalize)
  return text


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_printed_jaxpr_equals_jax(name):
  f, args = PROGRAMS[name](SC)
  ours = _normalize(str(sc.make_jaxpr(f)(*args)))
  f, args = PROGRAMS[name](JAX)
  theirs = str(jax.make_jaxpr(f)(*args))
  assert ours == theirs, f"\n--- stagecraft\n{ours}\n--- JAX\n{theirs}"


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_values_equal_jax(name):
  f, args = PROGRAMS[name](SC)
  ours = sc.tree.leaves((f(*args), sc.jit(f)(*args)))
  f, args = PROGRAMS[name](JAX)
  theirs = jax.tree.leaves(f(*args)) * 2
  assert len(ours) == len(theirs)
  for a, b in zip(ours, theirs):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


def test_constants_print_as_constvars_of_the_body():
  text = str(sc.make_jaxpr(PROGRAMS["closure_and_literal"](SC)[0])(X))
  assert text.startswith("{ lambda ; a:f32[3]. let")     # the outer jaxpr sees no constant
  assert "jaxpr={ lambda c:f32[3]; a:f32[3] d:f32[]. let" in text
  assert "] a 2.0:f32[]" in text


def test_traced_jaxpr_keeps_inner_constants_inside():
  g = _jitted(SC)
  t = sc.jit(lambda y: g(y) + 1.0).trace(X)
  jt = jax.jit(lambda y: _jitted(JAX)(y) + 1.0).trace(X)
  assert str(t.jaxpr) == str(jt.jaxpr)
  assert t.jaxpr.consts == []


# ---------------------------------------------------------------------------
# Autodiff of a jit with constants


def _grad_programs(m):
  g = _jitted(m)
  loss = lambda x: (g(x) ** 2).sum()
  return {
      "grad": (m.lib.grad(loss), (X,)),
      "jit_grad": (m.lib.jit(m.lib.grad(loss)), (X,)),
      "vjp": (lambda x: m.lib.vjp(g, x)[1](x), (X,)),
      "linearize": (lambda x: m.lib.linearize(g, x)[1](x * 2), (X,)),
      "linear_transpose": (lambda x: m.lib.linear_transpose(m.lib.jit(lambda y: y * C), x)(x),
                           (X,)),
      "hessian": (m.lib.hessian(loss), (X,)),
      "grad_of_vmap": (m.lib.grad(lambda x: m.lib.vmap(g)(x).sum()), (XB,)),
      "vmap_of_grad": (m.lib.vmap(m.lib.grad(loss)), (XB,)),
      "grad_of_scan": (m.lib.grad(lambda x: m.lax.scan(
          lambda c, _: (g(c), None), x, None, length=3)[0].sum()), (X,)),
      "grad_of_checkpoint": (m.lib.grad(lambda x: m.lib.checkpoint(
          lambda y: m.np.tanh(g(m.np.cos(y))))(x).sum()), (X,)),
  }


@pytest.mark.parametrize("name", sorted(_grad_programs(JAX)))
def test_autodiff_values_equal_jax(name):
  f, args = _grad_programs(SC)[name]
  ours = sc.tree.leaves((f(*args), sc.jit(f)(*args)))
  f, args = _grad_programs(JAX)[name]
  theirs = jax.tree.leaves(f(*args)) * 2
  for a, b in zip(ours, theirs):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-6, atol=2e-6)


def test_grad_keeps_the_constant_in_the_primal_call():
  g = _jitted(SC)
  text = str(sc.make_jaxpr(sc.grad(lambda x: g(x).sum()))(X))
  first = text[:text.index("reduce_sum")]
  # As JAX: the forward call closes over the constant and returns no copy of it.
  assert "jaxpr={ lambda e:f32[3]; b:f32[3]. let" in first
  assert "c:f32[3] d:f32[3] = jit[" in first


def test_grad_against_finite_differences():
  g = sc.jit(lambda y: snp.sin(y) * C)
  sc.test_util.check_grads(g, (X,), order=2, modes=("fwd", "rev"))


# ---------------------------------------------------------------------------
# Compiled programs: constants in the text (as JAX's), dispatch and caches

_KEY = object()   # stands for a PRNG key made by each library


def _lowering_programs(m):
  """name -> (function, args): closures over each kind of constant, for `.lower()`."""
  key = m.lib.random.key(0)
  return {
      "small_numpy": (lambda y: y * C, (X,)),
      "library_array": ((lambda a: lambda y: y + a)(m.np.arange(3.0)), (X,)),
      "bool": (lambda y: m.np.where(np.array([True, False, True]), y, 0.), (X,)),
      "bfloat16": (lambda y: y * np.array([1, 2, 3], m.np.bfloat16), (X,)),
      "complex": (lambda y: y * np.array([1 + 2j, 2, 3], np.complex64), (X,)),
      "int8": (lambda y: y * np.array([1, -2, 3], np.int8), (X,)),
      "prng_key": (lambda y: y + m.lib.random.normal(key, (3,)), (X,)),
      "f64_without_x64": (lambda y: y + np.arange(3.0), (X,)),
      "zero_strides": (lambda y: y + np.broadcast_to(np.float32(2), (3,)), (X,)),
      "zero_strides_2d": (lambda y: y + np.broadcast_to(C[:, None], (3, 4)).T, (X,)),
      "splat": (lambda y: y + np.full(3, 2.5, np.float32), (X,)),
      "nested_jit": (lambda y: m.lib.jit(lambda z: z * C)(y) + C, (X,)),
      "jit_in_scan": PROGRAMS["jit_in_scan"](m),
      "jit_in_cond": PROGRAMS["jit_in_cond"](m),
      "jit_in_while": PROGRAMS["jit_in_while"](m),
      "big_constant": PROGRAMS["big_constant"](m),
      "used_twice": (lambda y: m.np.sin(BIG) * y.sum() + BIG, (X,)),
  }


def _array_constants(text: str, pattern: str = r": tensor<\d") -> list[str]:
  """The `stablehlo.constant` lines matching `pattern` (default: of non-scalar type),
  without their SSA names."""
  out = []
  for line in text.splitlines():
    line = line.strip()
    if "stablehlo.constant" in line and re.search(pattern, line):
      out.append(line.split(" = ", 1)[1])
  return out


# The constants compared where not all arrays: the key's (JAX's threefry has more of its
# own); a broadcast scalar's.
_PATTERNS = {"prng_key": "tensor<2xui32>", "zero_strides": "tensor<"}


def _main_signature(text: str) -> str:
  return next(l.strip() for l in text.splitlines() if "func.func public @main" in l)


@pytest.mark.parametrize("name", sorted(_lowering_programs(JAX)))
def test_lowered_text_holds_the_constants_as_jax(name):
  f, args = _lowering_programs(SC)[name]
  ours = sc.jit(f).lower(*args).as_text()
  jf, jargs = _lowering_programs(JAX)[name]
  theirs = jax.jit(jf).lower(*jargs).as_text()
  pattern = _PATTERNS.get(name, r": tensor<\d")
  assert _array_constants(ours, pattern) == _array_constants(theirs, pattern)
  assert _array_constants(ours, pattern)   # the test sees the constants it compares
  assert _main_signature(ours) == _main_signature(theirs)   # main takes no constant
  got, want = sc.jit(f)(*args), jax.jit(jf)(*jargs)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_inner_jit_constants_are_in_its_function():
  f, args = _lowering_programs(SC)["nested_jit"]
  text = sc.jit(f).lower(*args).as_text()
  main, inner = text.split("func.func private", 1)
  assert len(_array_constants(main)) == 1 and len(_array_constants(inner)) == 1
  assert "call @" in main and "(%arg0) :" in main   # the call passes no constant


def test_big_constant_text_is_linear_in_its_size():
  f, args = PROGRAMS["big_constant"](SC)
  text = sc.jit(f).lower(*args).as_text()
  assert 'dense<"0x' in text   # hex bytes, as MLIR prints a big attribute
  assert 2 * BIG.nbytes < len(text) < 2 * BIG.nbytes + 2000
  assert _main_signature(text) == ("func.func public @main(%arg0: tensor<3xf32>) -> "
                                   "(tensor<4096xf32> {jax.result_info = \"result\"}) {")


@pytest.mark.xla_defaults
def test_thinking_in_jax_batched_apply_matrix_bit_for_bit():
  """JAX's tutorial (thinking_in_jax.md): a jit closing over a random (150, 100) matrix
  prints -12.314034 in JAX; XLA folds the transpose of the constant into the dot."""
  def run(m):
    key1, key2 = m.lib.random.split(m.lib.random.key(1701))
    mat = m.lib.random.normal(key1, (150, 100))
    batched_x = m.lib.random.normal(key2, (10, 100))
    return np.asarray(m.lib.jit(lambda b: m.np.dot(b, mat.T))(batched_x))
  ours, theirs = run(SC), run(JAX)
  np.testing.assert_array_equal(ours, theirs)
  assert f"{ours[0, 0]}" == f"{theirs[0, 0]}"


def test_simplified_constants_option_passes_them_as_arguments():
  f, args = PROGRAMS["nested_jit"](SC)
  want = np.asarray(sc.jit(f)(*args))
  sc.config.update("jax_use_simplified_jaxpr_constants", True)
  try:
    text = sc.jit(f).lower(*args).as_text()
    assert not _array_constants(text)
    assert _main_signature(text).startswith(
        "func.func public @main(%arg0: tensor<3xf32>, %arg1: tensor<3xf32>)")   # C, once
    np.testing.assert_allclose(sc.jit(f)(*args), want, rtol=1e-6)
    y, _ = sc.jvp(_jitted(SC), (X,), (X,))   # the eager jit primitive
    np.testing.assert_allclose(y, np.sin(X) * C, rtol=1e-6)
  finally:
    sc.config.update("jax_use_simplified_jaxpr_constants", False)
  assert _array_constants(sc.jit(f).lower(*args).as_text())   # retraced, baked again


def test_closure_over_a_sharded_array_runs_on_one_device_as_jax():
  mesh = sc.sharding.Mesh(np.array(sc.devices()[:4]), ("i",))
  a = sc.device_put(np.arange(8.0, dtype=np.float32),
                    sc.sharding.NamedSharding(mesh, sc.sharding.PartitionSpec("i")))
  jmesh = jax.sharding.Mesh(np.array(jax.devices()[:4]), ("i",))
  ja = jax.device_put(np.arange(8.0, dtype=np.float32),
                      jax.sharding.NamedSharding(jmesh, jax.sharding.PartitionSpec("i")))
  ours = sc.jit(lambda y: y.sum() + a)(X)
  theirs = jax.jit(lambda y: y.sum() + ja)(X)
  np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
  assert str(ours.sharding) == str(theirs.sharding)
  assert _array_constants(sc.jit(lambda y: y.sum() + a).lower(X).as_text()) == \
      _array_constants(jax.jit(lambda y: y.sum() + ja).lower(X).as_text())


def _eager_mesh_programs(m):
  """jvp outside jit binds the jit primitive eagerly: over sharded arguments, with a
  shard_map inside, with a pmap inside (each a program over several devices)."""
  c = np.arange(8, dtype=np.float32) * 1.5 + 0.1
  mesh = m.lib.sharding.Mesh(np.array(m.lib.devices()[:4]), ("i",))
  spec = m.lib.sharding.PartitionSpec("i")
  xs = m.lib.device_put(np.linspace(0, 1, 8, dtype=np.float32),
                        m.lib.sharding.NamedSharding(mesh, spec))
  g = m.lib.jit(lambda y: m.np.sin(y) * c)
  h = m.lib.jit(m.lib.shard_map(lambda z: m.np.cos(z) * c[:2], mesh=mesh, in_specs=spec,
                                out_specs=spec))
  p = m.lib.jit(lambda y: m.lib.pmap(lambda z: m.np.cos(z) * c[:2])(y))
  ones8, ones42 = np.ones(8, np.float32) * 0.3, np.ones((4, 2), np.float32) * 0.3
  return [m.lib.jvp(g, (xs,), (xs,)), m.lib.jvp(h, (ones8,), (ones8,)),
          m.lib.jvp(p, (ones42,), (ones42,))]


def test_eager_jit_primitive_over_devices_equals_jax():
  ours, theirs = _eager_mesh_programs(SC), _eager_mesh_programs(JAX)
  for a, b in zip(sc.tree.leaves(ours), jax.tree.leaves(theirs)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _captured_warnings(lib, frames):
  import warnings
  c = np.arange(1000, dtype=np.float32)
  lib.config.update("jax_captured_constants_warn_bytes", 1000)
  lib.config.update("jax_captured_constants_report_frames", frames)
  try:
    with warnings.catch_warnings(record=True) as w:
      warnings.simplefilter("always")
      np.asarray(lib.jit(lambda y: y * c + 1)(np.float32(2)))
      np.asarray(lib.jit(lambda y: y * c[:10] + 1)(np.float32(2)))   # 40 bytes: none
  finally:
    lib.config.update("jax_captured_constants_warn_bytes", 2 * 10 ** 9)
    lib.config.update("jax_captured_constants_report_frames", 0)
  return [re.sub(r"<class '[\w.]+'>", "<class>", re.sub(r":\d+:\d+ ", " ", str(x.message)))
          for x in w if "constants were captured" in str(x.message)]


@pytest.mark.parametrize("frames", [0, 2])
def test_large_captured_constants_warn_as_jax(frames):
  ours, theirs = _captured_warnings(sc, frames), _captured_warnings(jax, frames)
  assert len(ours) == 1 and "(4.00KB total)" in ours[0]
  assert ours == theirs


def test_compiled_serialize_with_a_baked_constant():
  from stagecraft.experimental import serialize_executable as se
  compiled = sc.jit(lambda y: _jitted(SC)(y) + BIG[:3]).lower(X).compile()
  payload, in_tree, out_tree = se.serialize(compiled)
  back = se.deserialize_and_load(payload, in_tree, out_tree)
  np.testing.assert_allclose(back(X), np.sin(X) * C + BIG[:3], rtol=1e-6)


def test_eager_jit_primitive_with_constants():
  # jvp outside jit binds the jit primitive with its closed jaxpr eagerly.
  g = _jitted(SC)
  y, t = sc.jvp(g, (X,), (np.ones(3, np.float32),))
  np.testing.assert_allclose(y, np.sin(X) * C, rtol=1e-6)
  np.testing.assert_allclose(t, np.cos(X) * C, rtol=1e-6)
  y2, t2 = sc.jvp(g, (X * 2,), (np.ones(3, np.float32),))   # the cached executable again
  np.testing.assert_allclose(y2, np.sin(X * 2) * C, rtol=1e-6)
  np.testing.assert_allclose(t2, np.cos(X * 2) * C, rtol=1e-6)


def test_dispatch_and_recompilation():
  traces = []

  def f(y):
    traces.append(y.shape)
    return _jitted(SC)(y) + C[0]
  jf = sc.jit(f)
  x = sc.device_put(X)
  for _ in range(3):
    np.testing.assert_allclose(jf(x), np.sin(X) * C + C[0], rtol=1e-6)
  assert traces == [(3,)]
  xb = np.ones((2, 3), np.float32)
  np.testing.assert_allclose(jf(xb), np.sin(xb) * C + C[0], rtol=1e-6)
  np.testing.assert_allclose(jf(X), np.sin(X) * C + C[0], rtol=1e-6)
  assert traces == [(3,), (2, 3)]


def test_a_constant_changed_after_tracing_is_not_reread():
  # As JAX: the traced program holds the value the constant had when traced.
  c = np.ones(3, np.float32)
  jf = sc.jit(lambda y: sc.jit(lambda z: z + c)(y))
  np.testing.assert_array_equal(jf(X), X + 1)
  c[:] = 5
  np.testing.assert_array_equal(jf(X), X + 1)


def test_donation_still_works():
  jf = sc.jit(lambda y: _jitted(SC)(y) + C, donate_argnums=0)
  x = sc.device_put(X)
  out = jf(x)
  np.testing.assert_allclose(out, np.sin(X) * C + C, rtol=1e-6)
  assert x.is_deleted()
  with pytest.raises(sc.DonatedBufferError, match="donated"):
    np.asarray(x)


def test_export_of_a_function_with_nested_constants():
  f = sc.jit(lambda y: _jitted(SC)(y) + BIG[:3])
  exp = export.export(f)(sc.ShapeDtypeStruct((3,), np.float32))
  want = np.sin(X) * C + BIG[:3]
  np.testing.assert_allclose(exp.call(X), want, rtol=1e-6)
  back = export.deserialize(exp.serialize())
  np.testing.assert_allclose(back.call(X), want, rtol=1e-6)
  np.testing.assert_allclose(sc.grad(lambda x: exp.call(x).sum())(X), np.cos(X) * C,
                             rtol=1e-6)


def test_exported_module_holds_the_constants_as_jax():
  # As JAX's export (always, whatever jax_use_simplified_jaxpr_constants says): in the text.
  f = lambda y: _jitted(SC)(y) + BIG[:3]
  ours = export.export(sc.jit(f))(sc.ShapeDtypeStruct((3,), np.float32)).mlir_module()
  jf = lambda y: _jitted(JAX)(y) + BIG[:3]
  theirs = jax.export.export(jax.jit(jf))(
      jax.ShapeDtypeStruct((3,), np.float32)).mlir_module()
  strip = lambda lines: sorted(re.sub(r" loc\(.*\)$", "", l) for l in lines)
  assert strip(_array_constants(ours)) == strip(_array_constants(theirs))
  assert len(_array_constants(ours)) == 2


def test_xla_computation_of_a_function_with_nested_constants():
  f = lambda y: _jitted(SC)(y) + 1.0
  hlo = xla_computation(f)(X).as_hlo_text()
  assert "sine" in hlo
  got = sc.jit(f)(X)
  np.testing.assert_allclose(got, np.sin(X) * C + 1, rtol=1e-6)


def test_jit_with_constants_inside_custom_jvp_body():
  # A body jit cannot hoist out of (custom_jvp's): its constants lower as dense constants.
  @sc.custom_jvp
  def h(y):
    return _jitted(SC)(y)
  h.defjvp(lambda p, t: (h(p[0]), t[0] * 2.0))
  f = sc.jit(lambda y: h(y) * 2)
  np.testing.assert_allclose(f(X), np.sin(X) * C * 2, rtol=1e-6)
  np.testing.assert_allclose(sc.grad(lambda y: f(y).sum())(X), np.full(3, 4.0), rtol=1e-6)


def test_jit_with_constants_inside_pmap():
  f = sc.pmap(lambda y: _jitted(SC)(y) + 1.0)
  np.testing.assert_allclose(f(X[None]), (np.sin(X) * C + 1)[None], rtol=1e-6)


def test_x64_constants_keep_their_dtype():
  with sc.enable_x64():
    c64 = np.arange(3, dtype=np.float64) + 0.25
    f = lambda x: sc.jit(lambda y: y * c64)(x)
    text = str(sc.make_jaxpr(f)(X.astype(np.float64)))
    assert "jaxpr={ lambda c:f64[3]; a:f64[3]. let" in text
    np.testing.assert_array_equal(sc.jit(f)(X.astype(np.float64)), X.astype(np.float64) * c64)


def test_hoisting_a_branch_that_binds_one_constant_twice():
  """A cond branch closing over a constant that an inner jit closes over too binds the same
  object twice: both binders must be operands after hoisting (one was left unbound)."""
  from stagecraft import core, pjit
  from stagecraft.lax.control_flow.conditionals import cond_p
  g = sc.jit(lambda x: x * C)
  br = sc.make_jaxpr(lambda x: g(x) + C)(C)
  i = core.Var(core.ShapedArray((), np.dtype(np.int32)))
  x, o = core.Var(br.in_avals[0]), core.Var(br.out_avals[0])
  jaxpr, consts = pjit.hoist_call_consts(
      core.Jaxpr([], [i, x], [o], [core.JaxprEqn([i, x], [o], cond_p, {"branches": (br, br)})]))
  assert len(consts) == 1
  for b in jaxpr.eqns[0].params["branches"]:
    core.check_jaxpr(b.jaxpr)
  np.testing.assert_allclose(core.eval_jaxpr(jaxpr, consts, np.int32(1), C)[0], C * C + C,
                             rtol=1e-6)
