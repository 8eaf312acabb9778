"""JAX 0.10.2's `jax.experimental` submodules control_deps, profiler, topologies,
scheduling_groups and rnn, against stagecraft's: the same program run by both modules (one
namespace each), comparing values, printed jaxprs, lowered text and exception type + text."""
from __future__ import annotations

import importlib
import types

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp


def _ns(lib, np_, root):
  return types.SimpleNamespace(
      lib=lib, np=np_, **{m: importlib.import_module(f"{root}.experimental.{m}")
                           for m in ("control_deps", "profiler", "topologies",
                                     "scheduling_groups", "rnn")})


JAX = _ns(jax, jjnp, "jax")
SC = _ns(sc, snp, "stagecraft")
BOTH = pytest.mark.parametrize("m", [JAX, SC], ids=["jax", "sc"])


def _err(fn):
  try:
    fn()
  except Exception as e:  # noqa: BLE001 - compared below
    return type(e).__name__, str(e)
  return None


def _same(f):
  """f(namespace) on JAX and stagecraft: equal outputs (arrays by value and dtype)."""
  a, b = f(JAX), f(SC)
  ja, jb = jax.tree.leaves(a), jax.tree.leaves(b)
  assert len(ja) == len(jb)
  for x, y in zip(ja, jb):
    if hasattr(x, "dtype"):
      assert np.asarray(x).dtype == np.asarray(y).dtype
      np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-6, atol=2e-6)
    else:
      assert x == y
  return a, b


def test_lazy_submodules_listed():
  import stagecraft.experimental as se
  for name in ("control_deps", "profiler", "topologies", "scheduling_groups", "rnn"):
    assert name in dir(se)
    assert getattr(se, name).__name__ == f"stagecraft.experimental.{name}"


# ------------------------------------------------------------------------- control_deps

def _ctrl(m):
  def f(x):
    a, b = x + 1, x * 2
    m.control_deps.control_dep(a, b)
    m.control_deps.schedule([x, a, b])
    return a, b
  return f


def test_control_dep_jaxpr_and_values():
  x = np.arange(3.0, dtype=np.float32)
  assert str(jax.make_jaxpr(_ctrl(JAX))(x)) == str(sc.make_jaxpr(_ctrl(SC))(x))
  _same(lambda m: m.lib.jit(_ctrl(m))(x))
  assert "stablehlo.custom_call @control_dep(" in sc.jit(_ctrl(SC)).lower(x).as_text()
  assert SC.control_deps.control_dep(x, x) == JAX.control_deps.control_dep(x, x) == ()
  assert SC.control_deps.schedule([]) is None


# ----------------------------------------------------------------------------- profiler

def test_profiled_instructions_proto(tmp_path):
  missing = str(tmp_path / "nope")
  a = _err(lambda: JAX.profiler.get_profiled_instructions_proto(missing))
  b = _err(lambda: SC.profiler.get_profiled_instructions_proto(missing))
  assert a == b and a[1].startswith("NOT_FOUND")
  a = _err(lambda: JAX.profiler.get_profiled_instructions_proto(str(tmp_path)))
  b = _err(lambda: SC.profiler.get_profiled_instructions_proto(str(tmp_path)))
  assert a == b and a[0] == "JaxRuntimeError"
  with sc.profiler.trace(str(tmp_path / "tb")):
    sc.jit(lambda v: v + 1)(np.float32(1)).block_until_ready()
  run = next((tmp_path / "tb" / "plugins" / "profile").iterdir())
  got = SC.profiler.get_profiled_instructions_proto(str(run))
  assert got == JAX.profiler.get_profiled_instructions_proto(str(run))
  assert isinstance(got, bytes)


# --------------------------------------------------------------------------- topologies

def test_attached_topology_and_mesh():
  tj, ts = JAX.topologies.get_attached_topology(), SC.topologies.get_attached_topology()
  assert [d.id for d in tj.devices] == [d.id for d in ts.devices]
  assert ts.devices == SC.topologies.get_attached_topology("cpu").devices
  assert SC.topologies.Device is JAX.topologies.Device
  n = len(ts.devices)
  mj = JAX.topologies.make_mesh(tj, (n,), ("x",))
  ms = SC.topologies.make_mesh(ts, (n,), ("x",))
  assert repr(mj) == repr(ms)
  assert _err(lambda: JAX.topologies.make_mesh(tj, (n + 1,), ("x",))) == \
      _err(lambda: SC.topologies.make_mesh(ts, (n + 1,), ("x",)))


@pytest.mark.parametrize("platform", [None, "tpu", "gpu", "cuda", "cpu", "CPU", "foo"])
def test_topology_desc_errors_on_cpu(platform):
  a = _err(lambda: JAX.topologies.get_topology_desc("v5e:2x2", platform))
  b = _err(lambda: SC.topologies.get_topology_desc("v5e:2x2", platform))
  assert a is not None and a == b


# -------------------------------------------------------------------- scheduling_groups

def _two(m):
  @m.scheduling_groups.scheduling_group(name="grp0")
  def fn(a, b):
    return a + b, a * 2
  return fn


def test_scheduling_group_jaxpr_lowering_values():
  assert str(jax.make_jaxpr(_two(JAX))(1.0, 2.0)) == str(sc.make_jaxpr(_two(SC))(1.0, 2.0))
  _same(lambda m: _two(m)(1.0, 2.0))
  assert (jax.jit(_two(JAX)).lower(1.0, 2.0).as_text()
          == sc.jit(_two(SC)).lower(1.0, 2.0).as_text())


def _remat_case(m, use_remat):
  @m.scheduling_groups.xla_metadata_call(inlineable="false")
  def f(x, y):
    return x + y, (x + y).sum()

  def g(x):
    h = m.lib.remat(f) if use_remat else f
    return h(x, x)[1]
  return g


@pytest.mark.parametrize("use_remat", [False, True])
def test_xla_metadata_call_grad(use_remat):
  x = np.float32(5.0)
  assert (str(jax.make_jaxpr(jax.grad(_remat_case(JAX, use_remat)))(x))
          == str(sc.make_jaxpr(sc.grad(_remat_case(SC, use_remat)))(x)))
  _same(lambda m: m.lib.jit(m.lib.grad(_remat_case(m, use_remat)))(x))


def _closure(m):
  k = m.np.arange(3.0)

  def outer(c):
    return m.scheduling_groups.xla_metadata_call(lambda x: x * c, a="b")(k)
  return outer


def test_xla_metadata_call_transforms():
  x = np.arange(3.0, dtype=np.float32)
  assert str(jax.make_jaxpr(_closure(JAX))(2.0)) == str(sc.make_jaxpr(_closure(SC))(2.0))
  _same(lambda m: m.lib.jit(_closure(m))(2.0))
  _same(lambda m: m.lib.jacfwd(_closure(m))(2.0))
  vm = lambda m: m.lib.vmap(m.scheduling_groups.xla_metadata_call(m.np.sin, a="b"))
  assert str(jax.make_jaxpr(vm(JAX))(x)) == str(sc.make_jaxpr(vm(SC))(x))
  _same(lambda m: vm(m)(x))
  gr = lambda m: m.lib.grad(m.scheduling_groups.scheduling_group("y")(
      lambda v: m.np.sin(v) * v))
  assert str(jax.make_jaxpr(gr(JAX))(3.0)) == str(sc.make_jaxpr(gr(SC))(3.0))
  _same(lambda m: gr(m)(3.0))
  kw = lambda m: m.scheduling_groups.xla_metadata_call(lambda x, y: {"a": x + y}, k="v")(
      x=1.0, y=m.np.ones(2))
  _same(kw)


def test_xla_metadata_call_inlineable_and_dedup():
  x = np.arange(8.0, dtype=np.float32)

  def prog(m):
    g = m.scheduling_groups.xla_metadata_call(inlineable="false")(m.lib.jit(lambda v: v * 2))
    return lambda v: g(g(v)).sum()
  for m in (JAX, SC):
    text = m.lib.jit(prog(m)).lower(x).as_text()
    assert text.count("func.func private @xla_metadata_call") == 1
    assert '{mhlo.frontend_attributes = {inlineable = "false"}}' in text
    text = m.lib.jit(m.lib.grad(prog(m))).lower(x).as_text()
    assert text.count("func.func private @xla_metadata_call") == 1
    assert 'inlineable="false"' in m.lib.jit(m.lib.grad(prog(m))).lower(x).compile().as_text()
  _same(lambda m: m.lib.jit(m.lib.grad(prog(m)))(x))


def test_xla_metadata_call_bad_metadata():
  for call in (lambda m: m.scheduling_groups.xla_metadata_call(lambda x: x, foo=1)(1.0),
               lambda m: m.lib.jit(m.scheduling_groups.xla_metadata_call(
                   lambda x: x, foo=1.5)).lower(1.0)):
    a, b = _err(lambda: call(JAX)), _err(lambda: call(SC))
    assert a is not None and a == b


# ---------------------------------------------------------------------------------- rnn

B, T, I, H, L = 2, 5, 3, 4, 2


def _inputs(m, bi):
  d = 2 if bi else 1
  k = m.lib.random.split(m.lib.random.key(1), 3)
  x = m.lib.random.normal(k[0], (B, T, I))
  h0 = m.lib.random.normal(k[1], (d * L, B, H))
  c0 = m.lib.random.normal(k[2], (d * L, B, H))
  w = m.rnn.init_lstm_weight(m.lib.random.key(0), I, H, L, bi)
  return x, h0, c0, w, m.np.array([5, 3], m.np.int32)


@pytest.mark.parametrize("bi", [False, True])
def test_lstm_weights_and_reference(bi):
  assert (JAX.rnn.get_num_params_in_lstm(I, H, L, bi)
          == SC.rnn.get_num_params_in_lstm(I, H, L, bi))
  _same(lambda m: _inputs(m, bi)[3])
  _same(lambda m: m.rnn.swap_lstm_gates(_inputs(m, bi)[3], I, H, L, bi))
  _same(lambda m: m.rnn.unpack_lstm_weights(_inputs(m, bi)[3], I, H, L, bi))

  def ref(m):
    x, h0, c0, w, sl = _inputs(m, bi)
    return m.rnn.lstm_ref(x, h0, c0, *m.rnn.unpack_lstm_weights(w, I, H, L, bi), sl,
                          I, H, L, 0.0, bi)
  _same(ref)


def _lstm_call(m, *, sl_dtype=None, precision=None, dropout=0.0, ref=False):
  x, h0, c0, w, sl = _inputs(m, False)
  if sl_dtype is not None:
    sl = sl.astype(sl_dtype)
  if ref:
    return m.rnn.lstm_ref(x, h0, c0, *m.rnn.unpack_lstm_weights(w, I, H, L, False), sl,
                          I, H, L, dropout, False)
  return m.rnn.lstm(x, h0, c0, w, sl, I, H, L, dropout, False, precision)


@pytest.mark.parametrize("kw", [
    {}, {"sl_dtype": np.int16}, {"precision": "default"},
    {"sl_dtype": np.int16, "ref": True}, {"dropout": 0.5, "ref": True}],
    ids=["cpu", "lengths", "bf16", "ref_lengths", "ref_dropout"])
def test_lstm_errors_on_cpu(kw):
  kw = dict(kw)
  if kw.get("precision") == "default":
    kw["precision"] = None
    a = _err(lambda: JAX.rnn.lstm(*_inputs(JAX, False), I, H, L, 0.0, False,
                                  jax.lax.Precision.DEFAULT))
    b = _err(lambda: SC.rnn.lstm(*_inputs(SC, False), I, H, L, 0.0, False,
                                 sc.lax.Precision.DEFAULT))
  else:
    a, b = _err(lambda: _lstm_call(JAX, **kw)), _err(lambda: _lstm_call(SC, **kw))
  assert a is not None and a == b


# ----------------------------------------------------------------------------- roofline

def _rf_cases(m):
  lib, np_ = m.lib, m.np
  return {
      "unary": (np_.sin, (np.ones((8, 16), np.float32),), {}),
      "binary": (lambda a, b: a + b, (np.ones((8, 16), np.float32), np.ones(16, np.float32)),
                 {}),
      "dot": (lambda a, b: a @ b, (np.ones((8, 16), np.float32), np.ones((16, 4), np.float32)),
              {}),
      "dot_pinned": (lambda a, b: a @ b, (np.ones((8, 16), np.float32),
                                          np.ones((16, 4), np.float32)),
                     {"pin_lhs_in_vmem": True}),
      "batched_dot": (lambda a, b: np_.einsum("bij,bjk->bik", a, b),
                      (np.ones((3, 4, 5), np.float32), np.ones((3, 5, 6), np.float32)), {}),
      "mean": (lambda a: np_.mean(a, axis=1), (np.ones((8, 16), np.float32),), {}),
      "where": (lambda a: np_.where(a > 0, a, 0.0), (np.ones((8, 16), np.float32),), {}),
      "cumsum": (lambda a: np_.cumsum(a, axis=1), (np.ones((8, 16), np.float32),), {}),
      "cumlogsumexp": (lambda a: lib.lax.cumlogsumexp(a, axis=0),
                       (np.ones((8, 16), np.float32),), {}),
      "mlp": (lambda w1, w2, a: lib.nn.relu(a @ w1) @ w2,
              (np.ones((16, 32), np.float32), np.ones((32, 4), np.float32),
               np.ones((8, 16), np.float32)), {}),
      "softmax": (lib.nn.softmax, (np.ones((8, 16), np.float32),), {}),
      "tanh_free": (np_.tanh, (np.ones((8, 16), np.float32),), {}),
      "scan": (lambda a: lib.lax.scan(lambda c, v: (c + v, c * v), 0.0, a)[1],
               (np.ones(5, np.float32),), {}),
      "shape_struct": (lambda a: a * 2, (m.lib.ShapeDtypeStruct((4, 4), np_.float32),), {}),
      "bf16": (lambda a: a @ a.T, (np.ones((16, 4), np_.bfloat16),), {}),
      "callback": (lambda a: lib.pure_callback(
          lambda v: v, lib.ShapeDtypeStruct(a.shape, a.dtype), a),
          (np.ones((8, 16), np.float32),), {}),
      "nested_jit": (lib.jit(lambda a: lib.jit(lambda b: b @ b.T)(a) + 1),
                     (np.ones((8, 16), np.float32),), {}),
      "vjp_error": (lambda a: np_.sin(a) @ a.T, (np.ones((8, 16), np.float32),),
                    {"vjp": True}),
  }


def _rf(m, name):
  f, args, kw = _rf_cases(m)[name]
  try:
    out, r = m.roofline.roofline(f, **kw)(*args)
  except Exception as e:  # noqa: BLE001 - compared
    return type(e).__name__, str(e)
  return jax.tree.map(lambda s: (s.shape, str(s.dtype)), out), _fields(r)


def _fields(r):
  return {k: getattr(r, k) for k in ("flops", "unfused_flops", "ici_bytes", "ici_latency",
                                     "hbm_bytes", "peak_hbm_bytes", "unfused_hbm_bytes")}


JAX.roofline = importlib.import_module("jax.experimental.roofline")
SC.roofline = importlib.import_module("stagecraft.experimental.roofline")


@pytest.mark.parametrize("name", list(_rf_cases(JAX)))
def test_roofline_counts(name):
  assert _rf(JAX, name) == _rf(SC, name)


def _mesh(m, shape, names):
  auto = m.lib.sharding.AxisType.Auto
  return m.lib.make_mesh(shape, names, axis_types=(auto,) * len(shape))


def test_roofline_shard_map_and_grad():
  def run(m):
    mesh = _mesh(m, (4,), ("x",))
    NS, Ps = m.lib.sharding.NamedSharding, m.lib.sharding.PartitionSpec
    a = m.lib.ShapeDtypeStruct((8, 16), m.np.float32, sharding=NS(mesh, Ps("x")))
    b = m.lib.ShapeDtypeStruct((16, 4), m.np.float32, sharding=NS(mesh, Ps()))
    out, r = m.roofline.roofline(lambda x, y: x @ y, mesh, (Ps("x"), Ps()), Ps("x"))(a, b)
    shapes, fwd, bwd = m.roofline.roofline_and_grad(
        lambda x, y: m.np.sin(x @ y), mesh, (Ps("x"), Ps()), Ps("x"))(a, b)
    return (out.shape, str(out.sharding.spec), _fields(r), shapes.shape, _fields(fwd),
            _fields(bwd))
  assert run(JAX) == run(SC)


@pytest.mark.parametrize("name", ["psum", "psum_x", "pmax", "pmin", "psum_scatter"])
def test_roofline_collectives(name):
  def run(m):
    lax = m.lib.lax
    Ps = m.lib.sharding.PartitionSpec
    mesh = _mesh(m, (2, 2), ("x", "y"))
    a = m.lib.ShapeDtypeStruct((8, 16), m.np.float32,
                               sharding=m.lib.sharding.NamedSharding(mesh, Ps("x", "y")))
    f, o = {"psum": (lambda v: lax.psum(v, ("x", "y")), Ps()),
            "psum_x": (lambda v: lax.psum(v, "x"), Ps(None, "y")),
            "pmax": (lambda v: lax.pmax(v, "x"), Ps(None, "y")),
            "pmin": (lambda v: lax.pmin(v, ("x", "y")), Ps()),
            "psum_scatter": (lambda v: lax.psum_scatter(v, "y", scatter_dimension=0,
                                                        tiled=True), Ps(("x", "y"), None)),
            }[name]
    return _fields(m.roofline.roofline(f, mesh, Ps("x", "y"), o)(a)[1])
  assert run(JAX) == run(SC)


def test_roofline_result_arithmetic_and_shapes():
  def run(m):
    R, S = m.roofline.RooflineResult, m.roofline.RooflineShape
    s = R(flops=3, ici_bytes={"x": 2}) + R(flops=1, peak_hbm_bytes=5,
                                           ici_bytes={"x": 1, "y": 4})
    t = R(flops=3, hbm_bytes=5) * 1.5
    return (_fields(s), _fields(t), _fields(2 * R(flops=3)), _fields(R.zeros()),
            S(shape=(2, 3), dtype=np.dtype("float32")).bytes,
            S(shape=(2, 3), dtype=np.dtype("float32")).size,
            _err(lambda: S.from_aval(3)))
  assert run(JAX) == run(SC)


def test_roofline_print_jaxpr(capsys):
  def run(m):
    out = m.roofline.roofline(m.np.sin, print_jaxpr=True)(np.ones(4, np.float32))
    return _fields(out[1]), capsys.readouterr().out
  assert run(JAX) == run(SC)


@pytest.mark.parametrize("name", ["index", "fill", "add", "set", "mul", "max", "min",
                                  "scatter_add", "dynamic_slice", "take_along_axis"])
def test_roofline_gather_scatter(name):
  def run(m):
    lax, np_ = m.lib.lax, m.np
    f = {"index": lambda a, i: a[i],
         "fill": lambda a, i: a.at[i].get(mode="fill", fill_value=0.0),
         "add": lambda a, i: a.at[i].add(1.0), "set": lambda a, i: a.at[i].set(2.0),
         "mul": lambda a, i: a.at[i].mul(3.0), "max": lambda a, i: a.at[i].max(0.0),
         "min": lambda a, i: a.at[i].min(0.0),
         "scatter_add": lambda a, i: lax.scatter_add(
             a, i[:, None], np_.ones((3, 16)), lax.ScatterDimensionNumbers((1,), (0,), (0,))),
         "dynamic_slice": lambda a, i: lax.dynamic_slice(a, (i[0], 0), (2, 16)),
         "take_along_axis": lambda a, i: np_.take_along_axis(
             a, np_.zeros((8, 2), np_.int32), axis=1)}[name]
    return _fields(m.roofline.roofline(f)(np.ones((8, 16), np.float32),
                                          np.array([1, 3, 9], np.int32))[1])
  assert run(JAX) == run(SC)


@pytest.mark.parametrize("name", ["all_to_all", "ppermute_ring", "ppermute_far",
                                  "ppermute_2d"])
def test_roofline_all_to_all_ppermute(name):
  def run(m):
    lax, Ps = m.lib.lax, m.lib.sharding.PartitionSpec
    NS = m.lib.sharding.NamedSharding
    mesh = _mesh(m, (2, 2), ("x", "y"))
    mesh4 = _mesh(m, (4,), ("x",))
    a = m.lib.ShapeDtypeStruct((8, 16), m.np.float32, sharding=NS(mesh, Ps("x", "y")))
    a4 = m.lib.ShapeDtypeStruct((8, 16), m.np.float32, sharding=NS(mesh4, Ps("x")))
    mm, arg, f, spec = {
        "all_to_all": (mesh, a, lambda v: lax.all_to_all(v, "x", 0, 1, tiled=True),
                       Ps("x", "y")),
        "ppermute_ring": (mesh4, a4, lambda v: lax.ppermute(
            v, "x", [(0, 1), (1, 2), (2, 3), (3, 0)]), Ps("x")),
        "ppermute_far": (mesh4, a4, lambda v: lax.ppermute(v, "x", [(0, 2), (1, 3), (2, 0)]),
                         Ps("x")),
        "ppermute_2d": (mesh, a, lambda v: lax.ppermute(
            v, ("x", "y"), [(0, 3), (1, 2), (2, 1)]), Ps("x", "y")),
    }[name]
    return _fields(m.roofline.roofline(f, mm, spec, spec)(arg)[1])
  assert run(JAX) == run(SC)


@pytest.mark.parametrize("name", ["same", "stride", "dilated", "nhwc", "grad_w", "grad_x",
                                  "batch_groups"])
def test_roofline_conv(name):
  def run(m):
    lax, np_ = m.lib.lax, m.np
    f = {"same": lambda x, w: lax.conv(x, w, (1, 1), "SAME"),
         "stride": lambda x, w: lax.conv_general_dilated(x, w, (2, 2), "VALID"),
         "dilated": lambda x, w: lax.conv_general_dilated(
             x, w, (1, 1), ((1, 2), (0, 1)), lhs_dilation=(2, 1), rhs_dilation=(1, 2)),
         "nhwc": lambda x, w: lax.conv_general_dilated(
             x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0), (1, 1), "SAME",
             dimension_numbers=("NHWC", "HWIO", "NHWC")),
         "grad_w": lambda x, w: m.lib.grad(
             lambda v: lax.conv(x, v, (2, 2), "SAME").sum())(w),
         "grad_x": lambda x, w: m.lib.grad(
             lambda v: lax.conv(v, w, (2, 2), "SAME").sum())(x),
         "batch_groups": lambda x, w: lax.conv_general_dilated(
             np_.ones((4, 3, 9, 9)), np_.ones((4, 3, 3, 3)), (1, 1), "SAME",
             batch_group_count=2)}[name]
    return _fields(m.roofline.roofline(f)(np.ones((2, 3, 9, 9), np.float32),
                                          np.ones((4, 3, 3, 3), np.float32))[1])
  assert run(JAX) == run(SC)


# ---------------------------------------------------------------------- buffer_callback

JAX.bc = importlib.import_module("jax.experimental.buffer_callback")
SC.bc = importlib.import_module("stagecraft.experimental.buffer_callback")


def _add_one(ctx, out, x):
  np.asarray(out)[...] = np.asarray(x) + 1


def _double_in_place(ctx, out, x):
  np.asarray(out)[...] *= 2


def test_buffer_callback_values_jaxpr_vmap():
  x = np.arange(3.0, dtype=np.float32)
  assert sorted(n for n in dir(SC.bc) if not n.startswith("_")) == \
      sorted(n for n in dir(JAX.bc) if not n.startswith("_"))
  assert SC.bc.Buffer is JAX.bc.Buffer

  def f(m, fn=_add_one, **kw):
    return m.bc.buffer_callback(fn, m.lib.ShapeDtypeStruct((3,), m.np.float32), **kw)
  _same(lambda m: f(m)(x))
  _same(lambda m: m.lib.jit(f(m))(x))
  assert str(jax.make_jaxpr(f(JAX))(x)) == str(sc.make_jaxpr(f(SC))(x))
  _same(lambda m: m.lib.vmap(f(m, vmap_method="sequential"))(np.ones((2, 3), np.float32)))
  _same(lambda m: m.lib.jit(f(m, _double_in_place, input_output_aliases={0: 0}))(x))
  for bad in (lambda m: m.lib.grad(lambda v: f(m)(v).sum())(x),
              lambda m: f(m, _double_in_place, input_output_aliases={1: 0})(x),
              lambda m: m.bc.buffer_callback(_double_in_place, m.lib.ShapeDtypeStruct(
                  (4,), m.np.float32), input_output_aliases={0: 0})(x)):
    a, b = _err(lambda: bad(JAX)), _err(lambda: bad(SC))
    assert a is not None and a == b
  a = _err(lambda: JAX.bc.buffer_callback(lambda c, o, v: 1, jax.ShapeDtypeStruct(
      (3,), jjnp.float32))(x))
  b = _err(lambda: SC.bc.buffer_callback(lambda c, o, v: 1, sc.ShapeDtypeStruct(
      (3,), snp.float32))(x))
  assert a[0] == b[0] == "JaxRuntimeError"
  assert "buffer_callback callback must not return any values." in b[1]
