"""The last lax/nn names: `lax.dce_sink`, `lax.psend`/`precv`, `lax.ragged_all_to_all`,
`lax.scaled_dot`, `nn.scaled_matmul`, `nn.scaled_dot_general`, `nn.get_scaled_dot_general_config`.

Each program runs on stagecraft and on JAX 0.10.2 in the same test: printed jaxprs, lowered
text, values and error messages are compared. (psend/precv and scaled_matmul only lower on
GPUs and ragged_all_to_all does not compile on XLA:CPU, in JAX as here: their tests compare
the jaxprs, the text and the errors.)
"""
import re
import types

import ml_dtypes
import numpy as np
import pytest

import jax

import stagecraft as sc
from stagecraft.interpreters import lowering

F8 = ml_dtypes.float8_e4m3fn
E8M0 = ml_dtypes.float8_e8m0fnu


def both(fn, *args):
  """`fn(jax, ...)` and `fn(stagecraft, ...)` as strings."""
  return str(fn(jax, *args)), str(fn(sc, *args))


def err(fn, *args):
  try:
    fn(*args)
  except Exception as e:  # noqa: BLE001 - the test compares class and text
    return type(e).__name__, str(e).split("\n")[0]
  raise AssertionError("no exception")


def mesh_of(m, n=2):
  return m.make_mesh((n,), ("i",), axis_types=(m.sharding.AxisType.Auto,))


def smap(m, f, n=2, **kw):
  P = m.sharding.PartitionSpec
  return m.shard_map(f, mesh=mesh_of(m, n), in_specs=P("i"), out_specs=P("i"), **kw)


# ---------------------------------------------------------------------------
# dce_sink


def test_dce_sink_jaxprs_lowering_and_values():
  progs = [
      lambda m: m.make_jaxpr(lambda x: (m.lax.dce_sink(x * 2), x)[1])(1.0),
      lambda m: m.make_jaxpr(lambda x: m.lax.dce_sink({"a": x, "b": x + 1}))(1.0),
      lambda m: m.make_jaxpr(lambda x, t: m.jvp(lambda x: (m.lax.dce_sink(x * 2), x)[1],
                                                (x,), (t,)))(1.0, 1.0),
      lambda m: m.make_jaxpr(m.grad(lambda x: (m.lax.dce_sink(x * 2), x * x)[1]))(1.0),
      lambda m: m.make_jaxpr(m.vmap(lambda x: (m.lax.dce_sink(x * 2), x)[1]))(np.ones(3)),
      lambda m: m.jit(lambda x: (m.lax.dce_sink(x * 2), x)[1]).lower(1.0).as_text(),
      lambda m: m.jit(lambda x: (m.lax.dce_sink(x * 2, prevent_mlir_dce=True), x)[1]).lower(
          np.ones((2, 3), np.float32)).as_text(),
  ]
  for p in progs:
    j, s = both(p)
    assert s == j, (s, j)
  assert "dce_sink[prevent_mlir_dce=False] b" in both(progs[0])[1]
  f = lambda m: m.jit(lambda x: (m.lax.dce_sink(x * 2, prevent_mlir_dce=True), x)[1])(
      np.arange(6, dtype=np.float32).reshape(2, 3))
  np.testing.assert_array_equal(np.asarray(f(sc)), np.asarray(f(jax)))
  assert sc.lax.dce_sink(1.0) is None


# ---------------------------------------------------------------------------
# psend / precv


PERM = [(0, 1), (1, 2), (2, 3), (3, 0)]


def _send_recv(m):
  def f(x):
    tok = m.lax.psend(x, "i", PERM)
    return m.lax.precv(tok, m.ShapeDtypeStruct(x.shape, x.dtype), "i", PERM)
  return smap(m, f, n=4)


def test_psend_precv_jaxprs_and_cpu_errors():
  x = np.arange(8, dtype=np.float32)
  j, s = both(lambda m: m.make_jaxpr(_send_recv(m))(x))
  assert s == j
  assert "d:Tok = psend" in s and "out_shape=float32[2]" in s
  j, s = both(lambda m: m.make_jaxpr(m.jit(_send_recv(m)))(x))
  assert s == j
  for run in (lambda m: m.jit(_send_recv(m))(x),
              lambda m: m.jit(_send_recv(m)).lower(x)):
    assert err(run, sc) == err(run, jax) == (
        "NotImplementedError", "psend is currently only implemented on GPU")

  def recv_only(m):
    return smap(m, lambda x: m.lax.precv(m.lax.create_token(),
                                         m.ShapeDtypeStruct((2,), np.float32), "i", [(0, 1)]),
                n=4)
  j, s = both(lambda m: m.make_jaxpr(recv_only(m))(x))
  assert s == j
  run = lambda m: m.jit(recv_only(m))(x)
  assert err(run, sc) == err(run, jax) == (
      "NotImplementedError", "precv is currently only implemented on GPU")
  # A pytree sends each leaf; an unused token is kept (the equation has effects).
  tree = lambda m: m.make_jaxpr(smap(m, lambda x: (m.lax.psend({"a": x, "b": x}, "i", [(0, 1)]),
                                                   x)[1], n=4))(x)
  j, s = both(tree)
  assert s == j and s.count("psend") == 2
  unbound = lambda m: m.lax.psend(x, "zz", [(0, 1)])
  assert err(unbound, sc) == err(unbound, jax) == (
      "NameError", "Found an unbound axis name: zz. To fix this, please call psend under "
      "`jax.shard_map`.")


# ---------------------------------------------------------------------------
# ragged_all_to_all


OP = np.array([1, 2, 2, 3, 4, 0], np.float32)
OUT = np.zeros(8, np.float32)
IO = np.array([0, 1, 0, 1], np.int32)
SS = np.array([1, 2, 1, 1], np.int32)
OO = np.array([0, 0, 1, 2], np.int32)
RS = np.array([1, 1, 2, 1], np.int32)
RARGS = (OP, OUT, IO, SS, OO, RS)


def _ragged(m):
  return smap(m, lambda *a: m.lax.ragged_all_to_all(*a, axis_name="i"))


def test_ragged_all_to_all_jaxpr_lowering_and_compile_error():
  j, s = both(lambda m: m.make_jaxpr(_ragged(m))(*RARGS))
  assert s == j and "ragged_all_to_all[" in s
  # NB: the module's `sdy.mesh` line differs (stagecraft prints no `stablehlo.mesh` attribute).
  strip = lambda t: re.sub(r"sdy.mesh @mesh = .*", "", t)
  j, s = both(lambda m: m.jit(_ragged(m)).lower(*RARGS).as_text())
  assert strip(s) == strip(j)
  assert ("stablehlo.custom_call @ragged_all_to_all(" in s and
          "backend_config = {channel_id = 1 : i64, replica_groups = dense<[[0, 1]]>" in s)
  run = lambda m: m.jit(_ragged(m))(*RARGS)
  (jc, jm), (sc_c, sm) = err(run, jax), err(run, sc)
  assert sm == jm == ("UNIMPLEMENTED: HLO opcode `ragged-all-to-all` is not supported by "
                      "XLA:CPU ThunkEmitter")
  assert sc_c == jc == "JaxRuntimeError"


def test_ragged_all_to_all_checks():
  bads = [(OP, OUT, IO.astype(np.float32), SS, OO, RS),
          (OP, OUT, IO, SS.astype(np.float32), OO, RS),
          (OP, OUT, IO, SS, OO, RS.reshape(2, 2)),
          (OP, OUT, IO[:0], SS, OO, RS)]
  for bad in bads:
    def g(m, bad=bad):
      P = m.sharding.PartitionSpec
      return m.make_jaxpr(m.shard_map(lambda *b: m.lax.ragged_all_to_all(*b, axis_name="i"),
                                      mesh=mesh_of(m), in_specs=P(), out_specs=P(),
                                      check_vma=False))(*bad)
    assert err(g, sc) == err(g, jax)
    assert err(g, sc)[0] == "ValueError"
  outside = lambda m: m.lax.ragged_all_to_all(*RARGS, axis_name="zz")
  assert err(outside, sc) == err(outside, jax) == (
      "RuntimeError", "ragged_all_to_all must be used within a mapped context like vmap or "
      "shard_map.")


def test_ragged_all_to_all_jvp_vmap_and_grad_jaxprs():
  jvp = lambda m: m.make_jaxpr(lambda a, b: m.jvp(
      lambda a, b: _ragged(m)(a, b, IO, SS, OO, RS), (a, b), (a, b)))(OP, OUT)
  j, s = both(jvp)
  assert s == j and s.count("ragged_all_to_all[") == 2

  def batched(m):
    P = m.sharding.PartitionSpec
    body = lambda *a: m.vmap(lambda *b: m.lax.ragged_all_to_all(*b, axis_name="i"))(*a)
    return m.make_jaxpr(m.shard_map(body, mesh=mesh_of(m), in_specs=P(None, "i"),
                                    out_specs=P(None, "i")))(*[np.stack([a, a]) for a in RARGS])
  j, s = both(batched)
  assert s == j and "transpose[permutation=(1, 0)]" in s

  # The transpose's body (the shard_map of the cotangents) as JAX's: a ragged_all_to_all of
  # the cotangent with sender and receiver swapped and the output's received slices masked.
  # NB: only the body: stagecraft's known shard_map forwards the int operands as residual
  # outputs where JAX passes the outer values.
  def grad_body(m):
    jaxpr = m.make_jaxpr(m.grad(lambda a, b: _ragged(m)(a, b, IO, SS, OO, RS).sum(),
                                argnums=(0, 1)))(OP, OUT)
    eqn = [e for e in jaxpr.eqns if e.primitive.name == "shard_map"][-1]
    body = eqn.params["jaxpr"]
    body = getattr(body, "jaxpr", body)
    return [(e.primitive.name, tuple(str(v.aval) for v in e.outvars)) for e in body.eqns]
  j, s = both(grad_body)
  assert s == j
  assert "'ragged_all_to_all'" in s and "'cumsum'" in s and "'scatter-add'" in s


# ---------------------------------------------------------------------------
# scaled_dot


def _f8_operands():
  rng = np.random.default_rng(0)
  lhs = rng.standard_normal((2, 16, 64)).astype(F8)
  rhs = rng.standard_normal((2, 64, 32)).astype(F8)
  ls = (2.0 ** rng.integers(-2, 3, (2, 16, 2))).astype(E8M0)
  rs = (2.0 ** rng.integers(-2, 3, (2, 2, 32))).astype(E8M0)
  return lhs, rhs, ls, rs


def test_scaled_dot_jaxpr_lowering_and_values():
  args = _f8_operands()
  f = lambda m: lambda a, b, c, d: m.lax.scaled_dot(a, b, lhs_scale=c, rhs_scale=d)
  j, s = both(lambda m: m.make_jaxpr(f(m))(*args))
  assert s == j and "dimension_numbers=(((2,), (1,)), ((0,), (0,)))" in s
  j, s = both(lambda m: m.jit(f(m)).lower(*args).as_text())
  assert s == j and 'stablehlo.composite "xla.scaled_dot"' in s
  got, want = f(sc)(*args), f(jax)(*args)
  assert got.dtype == want.dtype == ml_dtypes.bfloat16 and got.shape == (2, 16, 32)
  np.testing.assert_array_equal(np.asarray(got).view(np.uint16),
                                np.asarray(want).view(np.uint16))
  j, s = both(lambda m: m.make_jaxpr(m.vmap(f(m)))(*[a[None] for a in args]))
  assert s == j
  x = np.ones((4, 64), np.float32)
  jvp = lambda m: m.jvp(lambda a: m.lax.scaled_dot(a, a.T), (x,), (x,))
  assert err(jvp, sc) == err(jvp, jax) == (
      "NotImplementedError", "Differentiation rule for 'scaled_dot' not implemented")


def test_scaled_dot_default_scales_and_checks():
  lhs, rhs, _, _ = _f8_operands()
  g = lambda m: lambda a, b: m.lax.scaled_dot(a, b, dimension_numbers=(((1,), (0,)), ((), ())),
                                              preferred_element_type=np.float32)
  j, s = both(lambda m: m.make_jaxpr(g(m))(lhs[0], rhs[0]))
  assert s == j and "f8_e8m0fnu[16,1]" in s
  # NB: JAX writes each splat constant anew; stagecraft reuses an equal one in a function.
  norm = lambda t: re.sub(r"%cst(_\d+)?", "%cst", t)
  j, s = both(lambda m: m.jit(g(m)).lower(lhs[0], rhs[0]).as_text())
  js = [ln for ln in j.splitlines() if "%cst_0 = " not in ln]
  assert norm(s).splitlines() == [norm(ln) for ln in js]
  np.testing.assert_array_equal(np.asarray(g(sc)(lhs[0], rhs[0])),
                                np.asarray(g(jax)(lhs[0], rhs[0])))
  cases = [
      lambda m: m.lax.scaled_dot(lhs[0, 0], rhs[0, 0]),
      lambda m: m.lax.scaled_dot(lhs, rhs, lhs_scale=np.ones((2, 16, 64), E8M0)),
      lambda m: m.lax.scaled_dot(lhs, rhs, lhs_scale=np.ones((2, 16, 3), E8M0)),
      lambda m: m.lax.scaled_dot(lhs, rhs, lhs_scale=np.ones((2, 8, 2), E8M0)),
      lambda m: m.lax.scaled_dot(lhs, rhs[:, :32], dimension_numbers=(((2,), (1,)),
                                                                       ((0,), (0,)))),
      lambda m: m.lax.scaled_dot(lhs, rhs, rhs_scale=np.ones((2, 2), E8M0)),
  ]
  for c in cases:
    assert err(c, sc) == err(c, jax)
    assert err(c, sc)[0] == "TypeError"


# ---------------------------------------------------------------------------
# nn.scaled_matmul / scaled_dot_general / get_scaled_dot_general_config


def _mm_args():
  rng = np.random.default_rng(1)
  a = rng.standard_normal((1, 4, 64)).astype(F8)
  b = rng.standard_normal((1, 8, 64)).astype(F8)
  return a, b, np.ones((1, 4, 2), E8M0), np.ones((1, 8, 2), E8M0)


CPU_MSG = ("NotImplementedError",
           "MLIR translation rule for primitive 'scaled_matmul' not found for platform cpu")


def test_scaled_matmul_jaxpr_cpu_error_and_checks():
  args = _mm_args()
  j, s = both(lambda m: m.make_jaxpr(m.nn.scaled_matmul)(*args))
  assert s == j and "scaled_matmul_wrapper[preferred_element_type=float32]" in s
  for run in (lambda m: m.nn.scaled_matmul(*args),
              lambda m: m.jit(m.nn.scaled_matmul).lower(*args)):
    assert err(run, sc) == err(run, jax) == CPU_MSG
  a, b, sa, sb = args
  for bad in [(a[0], b, sa, sb), (a, b[:, :, :32], sa, sb), (a, b, sa[:, :, :1], sb),
              (a, b, sa[:, :2], sb)]:
    run = lambda m, bad=bad: m.nn.scaled_matmul(*bad)
    assert err(run, sc) == err(run, jax)
    assert err(run, sc)[0] == "ValueError"
  batched = lambda m: m.make_jaxpr(m.vmap(m.nn.scaled_matmul))(*[x[None] for x in args])
  assert both(batched)[1].count("scaled_matmul_wrapper") == 1


def test_scaled_matmul_cuda_lowering_text():
  """Lowered for CUDA (JAX: `lower(lowering_platforms=('cuda',))`): the cuDNN custom call."""
  args = _mm_args()
  want = jax.jit(jax.nn.scaled_matmul).trace(*args).lower(
      lowering_platforms=("cuda",)).as_text()
  with lowering.for_device(types.SimpleNamespace(platform="cuda")):
    got = sc.jit(sc.nn.scaled_matmul).lower(*args).as_text()
  assert got == want and "@__op$block_scaled_dot" in got


def test_get_scaled_dot_general_config():
  for mode in ("mxfp8", "nvfp4"):
    j, s = both(lambda m: m.nn.get_scaled_dot_general_config(mode))
    assert s.replace("stagecraft.nn.scaled", "x") == j.replace("jax._src.cudnn."
                                                               "scaled_matmul_stablehlo", "x")
  gs = np.array([0.5], np.float32)
  c = sc.nn.get_scaled_dot_general_config("nvfp4", gs)
  assert c.global_scale is gs and c.block_size == 16 and c.scale_type == ml_dtypes.float8_e4m3fn
  bad = lambda m: m.nn.get_scaled_dot_general_config("fp4")
  assert err(bad, sc) == err(bad, jax) == ("ValueError", "Unsupported mode: fp4")


def test_scaled_dot_general_jaxprs_and_cpu_error():
  rng = np.random.default_rng(2)
  x = rng.standard_normal((2, 32, 64)).astype(np.float32)
  y = rng.standard_normal((2, 32, 64)).astype(np.float32)
  dn = (((2,), (2,)), ((0,), (0,)))

  def f(m):
    c = m.nn.get_scaled_dot_general_config("mxfp8")
    return lambda x, y: m.nn.scaled_dot_general(x, y, dn, configs=[c, c, c])
  j, s = both(lambda m: m.make_jaxpr(f(m))(x, y))
  assert s == j and "custom_vjp_call[" in s and "scaled_matmul_wrapper" in s
  j, s = both(lambda m: m.make_jaxpr(m.grad(lambda x, y: f(m)(x, y).sum(), argnums=(0, 1)))(x, y))
  assert s == j and s.count("jit[name=_scaled_matmul") == 2 and "custom_vjp_call" not in s
  run = lambda m: f(m)(x, y)
  assert err(run, sc) == err(run, jax) == CPU_MSG
  # No batch dims: a trailing size-1 one is added and squeezed away.
  j, s = both(lambda m: m.make_jaxpr(lambda x, y: m.nn.scaled_dot_general(
      x, y, (((1,), (1,)), ((), ())), configs=[m.nn.get_scaled_dot_general_config("mxfp8")] * 3
  ))(x[0], y[0]))
  assert s == j and "squeeze" in s
  # Without configs: dot_general.
  plain = lambda m: m.nn.scaled_dot_general(x, y, dn)
  np.testing.assert_allclose(np.asarray(plain(sc)), np.asarray(plain(jax)), rtol=1e-6)
  j, s = both(lambda m: m.make_jaxpr(lambda x, y: m.nn.scaled_dot_general(x, y, dn))(x, y))
  assert s == j
