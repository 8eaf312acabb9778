"""xla_computation (the examples of reference/xla_computation.md) and the replica-group
lowerings of the collectives under an axis environment."""
from __future__ import annotations

import re
import types

import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import lax
from stagecraft.core import ShapeDtypeStruct
from stagecraft.interpreters import batching, lowering
from stagecraft.lax.parallel import axis_groups
from stagecraft.xla_computation import XlaComputation, xla_computation

from _util import assert_trees_allclose

ENV = [("i", 4), ("j", 2)]


def _entry(text: str) -> str:
  return text[text.index("ENTRY"):]


# ---------------------------------------------------------------------------
# The reference's examples


def test_reference_sin_cos():
  def f(x):
    return jnp.sin(jnp.cos(x))
  c = xla_computation(f)(3.)
  assert isinstance(c, XlaComputation)
  text = c.as_hlo_text()
  assert text.startswith("HloModule xla_computation_f")
  entry = _entry(text)
  p = re.search(r"(\S+) = f32\[\] parameter\(0\)", entry).group(1)
  cos = re.search(rf"(\S+) = f32\[\] cosine\({re.escape(p)}\)", entry).group(1)
  sin = re.search(rf"(\S+) = f32\[\] sine\({re.escape(cos)}\)", entry).group(1)
  assert re.search(rf"ROOT \S+ = \(f32\[\]\) tuple\({re.escape(sin)}\)", entry)


def test_reference_shape_only_argument():
  def f(x):
    return jnp.sin(jnp.cos(x))
  scalar = types.SimpleNamespace(shape=(), dtype=np.dtype(np.float32))
  assert (xla_computation(f)(scalar).as_hlo_text()
          == xla_computation(f)(3.).as_hlo_text())
  sds = ShapeDtypeStruct((2, 3), np.float32)
  assert "f32[2,3]{1,0} parameter(0)" in xla_computation(f)(sds).as_hlo_text()


def test_reference_psum_axis_env():
  def f(x):
    return x - lax.psum(x, "i")
  text = xla_computation(f, axis_env=[("i", 4)])(2).as_hlo_text()
  entry = _entry(text)
  p = re.search(r"(\S+) = s32\[\] parameter\(0\)", entry).group(1)
  ar = re.search(rf"(\S+) = s32\[\] all-reduce\({re.escape(p)}\), "
                 rf"replica_groups=\{{\{{0,1,2,3\}}\}}, to_apply=(\S+)", entry)
  assert ar
  assert re.search(r"ROOT .*add\(", text[:text.index("ENTRY")])   # the reduction: an add
  assert re.search(rf"subtract\({re.escape(p)}, {re.escape(ar.group(1))}\)", entry)


def test_reference_replica_groups_2d():
  def g(x):
    rowsum = lax.psum(x, "i")
    colsum = lax.psum(x, "j")
    allsum = lax.psum(x, ("i", "j"))
    return rowsum, colsum, allsum
  text = xla_computation(g, axis_env=ENV)(5.).as_hlo_text()
  groups = re.findall(r"f32\[\] all-reduce\(\S+\), replica_groups=(\{[^ ]*\}), to_apply", text)
  assert groups == ["{{0,2,4,6},{1,3,5,7}}", "{{0,1},{2,3},{4,5},{6,7}}",
                    "{{0,1,2,3,4,5,6,7}}"]
  # NB: instructions are named after their locations as JAX's are (`psum.3`), not their op
  root = re.search(r"ROOT \S+ = \(f32\[\], f32\[\], f32\[\]\) tuple\(([^)]*)\)", text)
  assert root is not None
  for name in root.group(1).split(", "):
    assert re.search(rf"{re.escape(name)} = f32\[\] all-reduce\(", text), name


# ---------------------------------------------------------------------------
# Replica groups of each collective in the 2-D environment

G_I = "{{0,2,4,6},{1,3,5,7}}"
G_J = "{{0,1},{2,3},{4,5},{6,7}}"
G_IJ = "{{0,1,2,3,4,5,6,7}}"
G_JI = "{{0,2,4,6,1,3,5,7}}"


@pytest.mark.parametrize("fn,op,groups", [
    (lambda x: lax.psum(x, "i"), "all-reduce", G_I),
    (lambda x: lax.psum(x, "j"), "all-reduce", G_J),
    (lambda x: lax.psum(x, ("j", "i")), "all-reduce", G_JI),
    (lambda x: lax.pmax(x, "i"), "all-reduce", G_I),
    (lambda x: lax.pmin(x, "j"), "all-reduce", G_J),
    (lambda x: lax.pmean(x, ("i", "j")), "all-reduce", G_IJ),
    (lambda x: lax.all_gather(x, "i"), "all-gather", G_I),
    (lambda x: lax.all_gather(x, "j", tiled=True), "all-gather", G_J),
    (lambda x: lax.all_to_all(x, "i", 0, 0, tiled=True), "all-to-all", G_I),
    (lambda x: lax.all_to_all(x, "j", 0, 0, tiled=True), "all-to-all", G_J),
])
def test_collective_replica_groups(fn, op, groups):
  text = xla_computation(fn, axis_env=ENV)(np.zeros(8, np.float32)).as_hlo_text()
  found = re.findall(rf" {op}\([^)]*\), replica_groups=(\{{[^ ]*\}}),", text)
  assert found == [groups], text


def test_reduction_bodies():
  text = xla_computation(lambda x: (lax.psum(x, "i"), lax.pmax(x, "i"), lax.pmin(x, "i")),
                         axis_env=ENV)(1.).as_hlo_text()
  regions = text[:text.index("ENTRY")]
  assert all(re.search(rf"ROOT \S+ = f32\[\] {op}\(", regions)
             for op in ("add", "maximum", "minimum"))


def test_pmean_is_psum_then_divide():
  text = _entry(xla_computation(lambda x: lax.pmean(x, "i"), axis_env=ENV)(1.).as_hlo_text())
  ar = re.search(r"(\S+) = f32\[\] all-reduce", text).group(1)
  assert "f32[] constant(4)" in text
  assert re.search(rf"divide\({re.escape(ar)}, ", text)


def test_ppermute_source_target_pairs():
  text = xla_computation(lambda x: lax.ppermute(x, "i", [(0, 1), (1, 2), (2, 3), (3, 0)]),
                         axis_env=ENV)(1.).as_hlo_text()
  pairs = re.search(r"source_target_pairs=(\{\S*\})", text).group(1)
  assert pairs == ("{{0,2},{2,4},{4,6},{6,0},{1,3},{3,5},{5,7},{7,1}}")
  text = xla_computation(lambda x: lax.ppermute(x, "j", [(0, 1)]),
                         axis_env=ENV)(1.).as_hlo_text()
  assert "source_target_pairs={{0,1},{2,3},{4,5},{6,7}}" in text


def test_axis_index_strides():
  text = _entry(xla_computation(lambda: (lax.axis_index("i"), lax.axis_index("j")),
                                axis_env=ENV)().as_hlo_text())
  assert "replica-id()" in text
  # i = (replica // 2) % 4, j = (replica // 1) % 2
  consts = dict(re.findall(r"(\S+) = u32\[\] constant\((\d+)\)", text))
  divs = [consts[c] for c in re.findall(r"divide\(\S+, (\S+)\)", text)]
  rems = [consts[c] for c in re.findall(r"remainder\(\S+, (\S+)\)", text)]
  assert divs == ["2", "1"] and rems == ["4", "2"]


def test_psum_axis_index_groups():
  text = xla_computation(lambda x: lax.psum(x, "i", axis_index_groups=((0, 1), (2, 3))),
                         axis_env=ENV)(1.).as_hlo_text()
  assert "replica_groups={{0,2},{4,6},{1,3},{5,7}}" in text


def test_axis_groups_helper():
  assert axis_groups(ENV, ["i"]) == [[0, 2, 4, 6], [1, 3, 5, 7]]
  assert axis_groups(ENV, ["j"]) == [[0, 1], [2, 3], [4, 5], [6, 7]]
  assert axis_groups(ENV, ["i", "j"]) == [list(range(8))]
  assert axis_groups([("a", 2), ("b", 3), ("c", 2)], ["b"]) == [
      [0, 2, 4], [1, 3, 5], [6, 8, 10], [7, 9, 11]]


def test_replicated_execution_matches_nested_vmap():
  """The 4-replica program computes, on replica r = 2 i + j, what nested vmap computes at
  [i, j] (tests run with 4 CPU devices)."""
  import jax
  from jax.extend import backend as xb
  from jaxlib import xla_client as xc

  def h(x):
    return (lax.axis_index("i"), lax.axis_index("j"), lax.psum(x, "i"), lax.pmax(x, "j"),
            lax.all_gather(x, "j"), lax.ppermute(x, "i", [(0, 1)]),
            lax.all_to_all(x, "j", 0, 0, tiled=True), lax.pmean(x, ("i", "j")))
  env = [("i", 2), ("j", 2)]
  client = xb.get_backend("cpu")
  devs = client.devices()[:4]
  if len(devs) < 4:
    pytest.skip("needs 4 CPU devices")
  c = xla_computation(h, axis_env=env)(ShapeDtypeStruct((4,), np.float32))
  opts = xb.get_compile_options(num_replicas=4, num_partitions=1,
                                device_assignment=[d.id for d in devs])
  exe = client.compile_and_load(c.as_stablehlo_text(), xc.DeviceList(tuple(devs)), opts)
  xs = np.arange(16, dtype=np.float32).reshape(2, 2, 4) * np.float32(1.5)
  shards = [jax.device_put(xs.reshape(4, 4)[r], d) for r, d in enumerate(devs)]
  mesh = jax.sharding.Mesh(np.array(devs), ("r",))
  arr = jax.make_array_from_single_device_arrays(
      (16,), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("r")), shards)
  outs = exe.execute_sharded([arr]).disassemble_into_single_device_arrays()
  got = [np.stack([np.asarray(s) for s in o]) for o in outs]
  jax.block_until_ready(outs)
  want = sc.vmap(sc.vmap(h, axis_name="j"), axis_name="i")(xs)
  assert_trees_allclose(got, [np.reshape(w, (4, *np.shape(w)[2:])) for w in want], rtol=1e-6)


# ---------------------------------------------------------------------------
# Options


def test_return_shape():
  def f(x, y):
    return {"a": x * 2, "b": (y.sum(), x.astype(np.int32))}
  c, shapes = xla_computation(f, return_shape=True)(np.ones((2, 3), np.float32),
                                                    ShapeDtypeStruct((4,), np.float32))
  assert isinstance(c, XlaComputation)
  assert shapes == {"a": ShapeDtypeStruct((2, 3), np.float32),
                    "b": (ShapeDtypeStruct((), np.float32),
                          ShapeDtypeStruct((2, 3), np.int32))}


def test_return_shape_with_axis_env():
  _, shapes = xla_computation(lambda x: lax.all_gather(x, "i"), axis_env=ENV,
                              return_shape=True)(np.ones(3, np.float32))
  assert shapes == ShapeDtypeStruct((4, 3), np.float32)


def test_tuple_args():
  f = lambda a, b: a + b
  plain = xla_computation(f)(1., 2.).as_hlo_text()
  assert "parameter(1)" in plain and "get-tuple-element" not in plain
  tupled = xla_computation(f, tuple_args=True)(1., 2.).as_hlo_text()
  assert "(f32[], f32[]) parameter(0)" in tupled
  assert "parameter(1)" not in tupled and tupled.count("get-tuple-element(") == 2
  # None: tupled only beyond 100 arguments.
  many = xla_computation(lambda *xs: sum(xs), tuple_args=None)(*([1.] * 101)).as_hlo_text()
  assert "parameter(1)" not in many and "get-tuple-element" in many
  few = xla_computation(lambda *xs: sum(xs), tuple_args=None)(*([1.] * 3)).as_hlo_text()
  assert "parameter(2)" in few


def test_static_argnums_and_consts():
  def f(x, n):
    return x * n + np.arange(3, dtype=np.float32)
  text = xla_computation(f, static_argnums=1)(np.ones(3, np.float32), 7).as_hlo_text()
  assert "constant(7)" in text and "parameter(1)" not in text
  assert "{0, 1, 2}" in text


def test_donate_argnums():
  text = xla_computation(lambda a, b: a + b, donate_argnums=1)(1., 2.).as_hlo_text()
  assert "buffer_donor={ (1, {}) }" in text
  with pytest.raises(ValueError, match="both static"):
    xla_computation(lambda a, b: a, static_argnums=0, donate_argnums=0)


def test_proto_and_dot_graph():
  c = xla_computation(lambda x: jnp.sin(x) * 2)(np.ones(3, np.float32))
  proto = c.as_serialized_hlo_module_proto()
  assert isinstance(proto, bytes) and b"sine" in proto
  dot = c.as_hlo_dot_graph()
  assert dot.startswith("digraph") and "sine" in dot
  assert "stablehlo.sine" in c.as_stablehlo_text()


def test_pytree_args_and_kwargs():
  def f(p, *, scale):
    return p["w"] @ p["x"] * scale
  c = xla_computation(f)({"w": np.ones((2, 3), np.float32), "x": np.ones(3, np.float32)},
                         scale=2.)
  text = c.as_hlo_text()
  assert "parameter(2)" in text and "dot(" in text


# ---------------------------------------------------------------------------
# Errors


def test_unbound_axis_without_env():
  with pytest.raises(NameError, match=r"Found an unbound axis name: i\. To fix this"):
    xla_computation(lambda x: lax.psum(x, "i"))(1.)


def test_unbound_axis_with_env():
  with pytest.raises(NameError, match=r"Found an unbound axis name: k\. To fix this"):
    xla_computation(lambda x: lax.psum(x, "k"), axis_env=ENV)(1.)


def test_lowering_outside_the_env_is_unbound():
  """A collective staged under an axis but lowered without that axis in the module's
  environment keeps the clear NameError."""
  with batching.extend_axis_env("i", 4):
    closed = sc.make_jaxpr(lambda x: lax.psum(x, "i"))(1.)
  with pytest.raises(NameError, match="unbound axis name: i"):
    lowering.lower_jaxpr_to_module("f", closed.jaxpr)
  text = lowering.lower_jaxpr_to_module("f", closed.jaxpr, axis_env=[("i", 4)], num_replicas=4)
  assert "replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>" in text


def test_spmd_module_uses_channels_and_global_ids():
  with batching.extend_axis_env("i", 4):
    closed = sc.make_jaxpr(lambda x: (lax.psum(x, "i"), lax.axis_index("i"),
                                      lax.ppermute(x, "i", [(0, 1)])))(1.)
  text = lowering.lower_jaxpr_to_module("f", closed.jaxpr, axis_env=[("i", 4)],
                                        num_partitions=4)
  assert "channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>" in text
  assert "handle = 2" in text and "use_global_device_ids" in text
  assert "stablehlo.partition_id" in text and "replica_id" not in text


@pytest.mark.parametrize("env,exc,msg", [
    ("i", TypeError, "must be a sequence of \\(axis name, size\\) pairs"),
    (5, TypeError, "must be a sequence of \\(axis name, size\\) pairs"),
    ([("i", 4, 1)], TypeError, r"axis_env\[0\] must be an \(axis name, size\) pair"),
    (["i"], TypeError, r"axis_env\[0\] must be an \(axis name, size\) pair"),
    ([("i", 0)], ValueError, r"size of axis 'i' \(axis_env\[0\]\) must be a positive integer"),
    ([("i", 2), ("j", 2.5)], ValueError, r"axis 'j' \(axis_env\[1\]\).*got 2\.5"),
    ([("i", 2), ("i", 3)], ValueError, "appears more than once"),
    ([(["i"], 2)], TypeError, "must be hashable"),
])
def test_bad_axis_env(env, exc, msg):
  with pytest.raises(exc, match=msg):
    xla_computation(lambda x: x, axis_env=env)


def test_bad_arguments():
  with pytest.raises(TypeError, match="expected a callable"):
    xla_computation(3)
  with pytest.raises(ValueError, match="unknown backend 'xpu'"):
    xla_computation(lambda x: x, backend="xpu")
  with pytest.raises(TypeError, match="abstract array"):
    xla_computation(lambda x: x)("not an array")
  assert "add" in xla_computation(lambda x: x + 1, backend="cpu")(1.).as_hlo_text()


def test_collective_inside_a_scan_body_lowers_against_the_axis_env():
  # scan's lowering re-traces its body; the environment's axes stay bound meanwhile.
  def body(v):
    return lax.scan(lambda c, e: (c + lax.psum(e, "i"), None), 0., v)[0]
  text = sc.xla_computation(body, axis_env=[("i", 4)])(np.ones(3, np.float32)).as_hlo_text()
  assert "all-reduce" in text and "replica_groups={{0,1,2,3}}" in text
