"""Eager shard_map as JAX 0.10.2's: called outside `jit`, the body runs operation by
operation on each device's values, so `print(x)` in the body prints every device's block
("On cpu:0 at mesh coordinates (i,) = (0,):"), the shard_map tutorial's BEFORE/AFTER
prints of each collective are JAX's, a value the same on every device converts to a Python
value, and the results (and their shardings) equal the compiled shard_map's. JAX (same
process, same CPU devices) is the oracle."""
import contextlib
import io

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import stagecraft as sc
import stagecraft.numpy as snp

pytestmark = pytest.mark.skipif(len(sc.devices()) < 4, reason="needs 4 devices")


def _run(api, np_, program):
  """stdout of `program(api, np_)` and its result as NumPy."""
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    result = program(api, np_)
  return out.getvalue(), jax.tree.map(np.asarray, result)


def _mesh1(api):
  return api.sharding.Mesh(api.devices()[:4], ("i",))


def _mesh2(api):
  return api.sharding.Mesh(np.array(api.devices()[:4]).reshape(2, 2), ("i", "j"))


def _collective(collective, mesh, in_spec, out_spec, x):
  def program(api, np_):
    P = api.sharding.PartitionSpec
    m = mesh(api)

    def body(block):
      print("BEFORE:\n", block)
      y = collective(api.lax, block)
      print("AFTER:\n", y)
      return y
    return api.shard_map(body, mesh=m, in_specs=P(*in_spec), out_specs=P(*out_spec))(
        np_.asarray(x))
  return program


_X16 = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2])
PROGRAMS = {
    "psum": _collective(lambda L, b: L.psum(b, "i"), _mesh1, ("i",), (None,), _X16),
    "psum_2d": _collective(lambda L, b: L.psum(b, "i"), _mesh2, ("i", "j"), (None, "j"),
                           np.arange(16).reshape(4, 4)),
    "psum_both": _collective(lambda L, b: L.psum(b, ("i", "j")), _mesh2, ("i", "j"),
                             (None, None), np.arange(16).reshape(4, 4)),
    "all_gather_tiled": _collective(lambda L, b: L.all_gather(b, "i", tiled=True), _mesh1,
                                    ("i",), ("i",), np.array([3, 9, 5, 2])),
    "all_gather": _collective(lambda L, b: L.all_gather(b, "i"), _mesh1, ("i",), ("i",),
                              np.array([3, 9, 5, 2])),
    "all_gather_both": _collective(lambda L, b: L.all_gather(b, ("i", "j"), tiled=True),
                                   _mesh2, ("i", "j"), (("i", "j"),),
                                   np.arange(16.).reshape(4, 4)),
    "psum_scatter": _collective(lambda L, b: L.psum_scatter(b, "i", tiled=True), _mesh1,
                                ("i",), ("i",), _X16),
    "ppermute": _collective(lambda L, b: L.ppermute(b, "i", [(k, (k + 1) % 4)
                                                             for k in range(4)]),
                            _mesh1, ("i",), ("i",), np.arange(4.)),
    "all_to_all": _collective(lambda L, b: L.all_to_all(b, "i", 0, 0, tiled=True), _mesh1,
                              ("i",), ("i",), _X16),
    "axis_index": _collective(lambda L, b: b + 10 * L.axis_index("i"), _mesh1, ("i",),
                              ("i",), np.zeros(8, np.int32)),
    "replicated_in": _collective(lambda L, b: b * 2, _mesh1, (), (), np.arange(3.)),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_prints_and_results_as_jax(name):
  theirs = _run(jax, jnp, PROGRAMS[name])
  ours = _run(sc, snp, PROGRAMS[name])
  assert ours[0] == theirs[0]
  np.testing.assert_array_equal(ours[1], theirs[1])
  assert "On " in ours[0] and "at mesh coordinates" in ours[0]


def test_results_equal_the_compiled_shard_maps():
  mesh = _mesh2(sc)
  P = sc.sharding.PartitionSpec

  def body(block):
    y = sc.lax.psum(snp.sin(block) * 2, "i")
    return sc.lax.all_gather(y, "j", tiled=True, axis=1)

  f = sc.shard_map(body, mesh=mesh, in_specs=P("i", "j"), out_specs=P(None, "j"))
  x = np.arange(32, dtype=np.float32).reshape(4, 8) / 7
  eager, compiled = f(x), sc.jit(f)(x)
  np.testing.assert_array_equal(np.asarray(eager), np.asarray(compiled))
  assert eager.sharding == compiled.sharding or eager.sharding.is_equivalent_to(
      compiled.sharding, 2)


def test_invariant_values_are_concrete_varying_are_not():
  mesh = _mesh1(sc)
  P = sc.sharding.PartitionSpec

  def body(block):
    total = sc.lax.psum(block.sum(), "i")
    if total > 10:              # the same on every device: a Python bool
      return block * 2
    return block

  out = sc.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(np.arange(8.))
  np.testing.assert_array_equal(np.asarray(out), np.arange(8.) * 2)

  def varying(block):
    if block.sum() > 10:        # differs between devices
      return block
    return -block

  with pytest.raises(sc.errors.TracerBoolConversionError):
    sc.shard_map(varying, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(np.arange(8.))
  with pytest.raises(jax.errors.TracerBoolConversionError):
    jax.shard_map(varying, mesh=_mesh1(jax), in_specs=jax.P("i"),
                  out_specs=jax.P("i"))(np.arange(8.))


def test_replication_of_results_is_checked():
  P = sc.sharding.PartitionSpec
  f = sc.shard_map(lambda b: b, mesh=_mesh1(sc), in_specs=P("i"), out_specs=P())
  with pytest.raises(ValueError, match="out_specs which require replication"):
    f(np.arange(8.))
  g = sc.shard_map(lambda b: b, mesh=_mesh1(sc), in_specs=P("i"), out_specs=P(),
                   check_vma=False)
  np.testing.assert_array_equal(np.asarray(g(np.arange(8.))), np.arange(2.))


def test_grad_and_jit_inside_the_eager_body():
  P = sc.sharding.PartitionSpec

  def body(block):
    g = sc.grad(lambda v: (snp.sin(v) ** 2).sum())(block)
    return sc.jit(lambda a: a + 1)(g)

  x = np.linspace(0, 1, 8, dtype=np.float32)
  ours = sc.shard_map(body, mesh=_mesh1(sc), in_specs=P("i"), out_specs=P("i"))(x)

  def jbody(block):
    g = jax.grad(lambda v: (jnp.sin(v) ** 2).sum())(block)
    return jax.jit(lambda a: a + 1)(g)
  theirs = jax.shard_map(jbody, mesh=_mesh1(jax), in_specs=jax.P("i"),
                         out_specs=jax.P("i"))(x)
  np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-6)


def test_inferred_in_specs_under_jit_read_the_argument_types():
  """The shard_map tutorial's FSDP step: weights laid out over an Explicit mesh, in_specs
  inferred, called under jit: each device sees its block (it saw the whole array)."""
  def program(api):
    P = api.sharding.PartitionSpec
    mesh = api.make_mesh((4,), ("batch",))
    with api.sharding.use_mesh(mesh) if hasattr(api.sharding, "use_mesh") else \
        api.set_mesh(mesh):
      w = api.device_put(np.arange(32.).reshape(8, 4), P("batch"))

      @api.shard_map(out_specs=P())
      def total(block):
        assert block.shape == (2, 4), block.shape
        return api.lax.psum((api.lax.all_gather(block, "batch", tiled=True) * 2).sum(),
                            "batch")
      return np.asarray(api.jit(total)(w)), np.asarray(total(w))
  ours, theirs = program(sc), program(jax)
  np.testing.assert_array_equal(ours[0], theirs[0])
  np.testing.assert_array_equal(ours[1], theirs[1])
  assert float(ours[0]) == 4 * 2 * np.arange(32.).sum()


def test_compiled_appliers_are_bounded_and_cleared(monkeypatch):
  # collectives over two mesh axes run as their own compiled shard_map, kept per
  # (mesh, primitive, params); the cache is bounded and emptied by clear_caches()
  import importlib
  sm = importlib.import_module("stagecraft.shard_map")
  monkeypatch.setattr(sm, "_MAX_COMPILED", 2)
  sm._compiled_cache.clear()
  x = np.arange(16.).reshape(4, 4)
  want = jax.tree.map(np.asarray, PROGRAMS["all_gather_both"](jax, jnp))
  for axis in (0, 1, 0, 1, 0):
    def body(b, axis=axis):
      return sc.lax.all_gather(b, ("i", "j"), tiled=True, axis=axis)
    P = sc.sharding.PartitionSpec
    out = sc.shard_map(body, mesh=_mesh2(sc), in_specs=P("i", "j"),
                       out_specs=P(("i", "j")) if axis == 0 else P(None, ("i", "j")))(x)
    if axis == 0:
      np.testing.assert_array_equal(out, want)
    assert 1 <= len(sm._compiled_cache) <= 2
  sc.clear_caches()
  assert not sm._compiled_cache
