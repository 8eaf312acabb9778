"""JAX 0.10.2's mesh API on stagecraft: AxisType, make_mesh, Mesh, AbstractMesh, reprs,
set_mesh (context manager and global setter), get_mesh / get_abstract_mesh /
use_abstract_mesh, bare PartitionSpecs under set_mesh (device_put, jit, reshard), and mesh
axis names that would break module text. JAX is the oracle (same process, same 4 CPU
devices from tests/conftest.py)."""
import numpy as np
import pytest

import jax
import jax.sharding as jsh

import stagecraft as sc
from stagecraft import lax
from stagecraft.lax.spmd import reshard, with_sharding_constraint
from stagecraft.sharding import (AbstractMesh, AxisType, Mesh, NamedSharding, P, get_abstract_mesh,
                                 get_mesh, make_mesh, set_mesh, use_abstract_mesh)
from stagecraft.shard_map import shard_map

pytestmark = pytest.mark.skipif(len(sc.devices()) < 4, reason="needs 4 devices")

JA = jsh.AxisType


def _jtypes(types):
  return None if types is None else tuple(getattr(JA, t.name) for t in types)


def _raises_same(ours, theirs, exc=Exception):
  """Both callables raise the same exception type with the same message."""
  with pytest.raises(exc) as e1:
    ours()
  with pytest.raises(exc) as e2:
    theirs()
  assert type(e1.value) is type(e2.value)
  assert str(e1.value) == str(e2.value)


# ---------------------------------------------------------------------------
# AxisType, make_mesh, Mesh, AbstractMesh


def test_axis_type_matches_jax():
  assert [t.name for t in AxisType] == [t.name for t in JA]
  assert [t.value for t in AxisType] == [t.value for t in JA]
  for t in AxisType:
    assert repr(t) == repr(getattr(JA, t.name)) and str(t) == str(getattr(JA, t.name))


@pytest.mark.parametrize("shape,names,types", [
    ((2, 2), ("x", "y"), None),
    ((4,), ("x",), None),
    ((2, 2), ("x", "y"), (AxisType.Explicit, AxisType.Auto)),
    ((2, 1), ("data", "model"), (AxisType.Auto, AxisType.Auto)),
    ((4,), "batch", AxisType.Auto),
])
def test_make_mesh_reprs_and_axis_types_match_jax(shape, names, types):
  ours = make_mesh(shape, names, types)
  jtypes = (getattr(JA, types.name) if isinstance(types, AxisType) else _jtypes(types))
  theirs = jax.make_mesh(shape, names, jtypes)
  assert repr(ours) == repr(theirs)
  assert str(ours) == str(theirs)
  assert repr(ours.axis_types) == repr(theirs.axis_types)
  assert repr(ours.abstract_mesh) == repr(theirs.abstract_mesh)
  assert dict(ours.shape) == dict(theirs.shape) and list(ours.shape) == list(theirs.shape)
  assert ours.size == theirs.size and ours.empty == theirs.empty
  assert ours.axis_sizes == theirs.axis_sizes and ours.axis_names == theirs.axis_names
  np.testing.assert_array_equal(ours.device_ids, theirs.device_ids)
  assert (ours.explicit_axes, ours.auto_axes, ours.manual_axes) == (
      theirs.explicit_axes, theirs.auto_axes, theirs.manual_axes)
  ns, jns = NamedSharding(ours, P(ours.axis_names[0])), jsh.NamedSharding(
      theirs, jsh.PartitionSpec(theirs.axis_names[0]))
  assert repr(ns) == repr(jns) and ns.memory_kind == jns.memory_kind


def test_make_mesh_default_axis_types_are_jaxs():
  assert repr(make_mesh((2, 2), ("x", "y")).axis_types) == repr(
      jax.make_mesh((2, 2), ("x", "y")).axis_types) == "(Explicit, Explicit)"


def test_mesh_constructor_reprs_match_jax():
  devs = np.array(sc.devices()[:4]).reshape(2, 2)
  jdevs = np.array(jax.devices()[:4]).reshape(2, 2)
  for types in (None, (AxisType.Manual, AxisType.Explicit)):
    ours, theirs = Mesh(devs, ("a", "b"), types), jsh.Mesh(jdevs, ("a", "b"), _jtypes(types))
    assert repr(ours) == repr(theirs) and str(ours) == str(theirs)
    assert repr(ours.abstract_mesh) == repr(theirs.abstract_mesh)
  empty, jempty = Mesh(np.empty((), dtype=object), ()), jsh.Mesh(np.empty((), dtype=object), ())
  assert (repr(empty), str(empty), empty.empty, empty.size) == (
      repr(jempty), str(jempty), jempty.empty, jempty.size)
  assert repr(empty.abstract_mesh) == repr(jempty.abstract_mesh)


def test_abstract_mesh_matches_jax():
  for types in (None, (AxisType.Explicit, AxisType.Auto)):
    ours = AbstractMesh((2, 2), ("x", "y"), types)
    theirs = jsh.AbstractMesh((2, 2), ("x", "y"), _jtypes(types))
    assert repr(ours) == repr(theirs)
    assert (ours.size, ours.empty, dict(ours.shape), ours.axis_sizes) == (
        theirs.size, theirs.empty, dict(theirs.shape), theirs.axis_sizes)
    assert repr(NamedSharding(ours, P("x"))) == repr(jsh.NamedSharding(theirs,
                                                                      jsh.PartitionSpec("x")))
  am = AbstractMesh((2, 2), ("x", "y"))
  assert am == AbstractMesh((2, 2), ("x", "y")) and hash(am) == hash(AbstractMesh((2, 2),
                                                                                  ("x", "y")))
  assert am != make_mesh((2, 2), ("x", "y")).abstract_mesh    # types and device kind differ
  with pytest.raises(ValueError, match="AbstractMesh does not implement devices"):
    am.devices  # noqa: B018
  assert repr(am.update_axis_types({"x": AxisType.Manual})) == repr(
      jsh.AbstractMesh((2, 2), ("x", "y")).update_axis_types({"x": JA.Manual}))


def test_partition_spec_repr_matches_jax():
  for entries in [(), ("x",), ("x", "y"), (None, "y"), (("x", "y"),), ("x", None)]:
    assert repr(P(*entries)) == repr(jsh.PartitionSpec(*entries))


def test_mesh_errors_match_jax():
  devs, jdevs = np.array(sc.devices()[:4]), np.array(jax.devices()[:4])
  _raises_same(lambda: make_mesh((2, 2), ("a", "b"), ("Auto", "Auto")),
               lambda: jax.make_mesh((2, 2), ("a", "b"), ("Auto", "Auto")), TypeError)
  _raises_same(lambda: make_mesh((2, 2), ("a", "b"), (AxisType.Auto,)),
               lambda: jax.make_mesh((2, 2), ("a", "b"), (JA.Auto,)), ValueError)
  _raises_same(lambda: Mesh(devs, (None,)), lambda: jsh.Mesh(jdevs, (None,)), ValueError)
  _raises_same(lambda: Mesh(devs, ()), lambda: jsh.Mesh(jdevs, ()), ValueError)
  with pytest.raises(ValueError) as e:
    make_mesh((3, 3), ("a", "b"))
  with pytest.raises(ValueError) as je:
    jax.make_mesh((3, 3), ("a", "b"))
  assert str(e.value).startswith(str(je.value))
  with pytest.raises(ValueError, match="should be a sequence of ints"):
    make_mesh((2.5, 2), ("a", "b"))
  with pytest.raises(ValueError, match="distinct"):
    Mesh(devs.reshape(2, 2), ("a", "a"))


# ---------------------------------------------------------------------------
# set_mesh, get_mesh, get_abstract_mesh, use_abstract_mesh


def test_set_mesh_as_context_manager_and_setter():
  m = make_mesh((2, 2), ("x", "y"))
  jm = jax.make_mesh((2, 2), ("x", "y"))
  assert repr(get_abstract_mesh()) == repr(jsh.get_abstract_mesh())
  assert repr(get_mesh()) == repr(jsh.get_mesh()) and get_mesh().empty
  with set_mesh(m) as entered, jax.set_mesh(jm):
    assert entered is None
    assert get_mesh() is m and str(get_mesh()) == str(jsh.get_mesh())
    assert repr(get_abstract_mesh()) == repr(jsh.get_abstract_mesh())
    inner = make_mesh((4,), ("i",), (AxisType.Auto,))
    with set_mesh(inner):
      assert get_mesh() is inner
    assert get_mesh() is m
  assert get_mesh().empty and get_abstract_mesh().empty
  # The global setter: stays set until changed; None clears it.
  try:
    set_mesh(m)
    jax.set_mesh(jm)
    assert get_mesh() is m and repr(get_abstract_mesh()) == repr(jsh.get_abstract_mesh())
  finally:
    set_mesh(None)
    jax.set_mesh(None)
  assert repr(get_abstract_mesh()) == repr(jsh.get_abstract_mesh()) == "AbstractMesh((), axis_types=())"


def test_set_mesh_errors_match_jax():
  _raises_same(lambda: set_mesh(3), lambda: jax.set_mesh(3), ValueError)
  manual = make_mesh((4,), ("m",), (AxisType.Manual,))
  jmanual = jax.make_mesh((4,), ("m",), (JA.Manual,))
  _raises_same(lambda: set_mesh(manual), lambda: jax.set_mesh(jmanual), ValueError)
  m, jm = make_mesh((4,), ("x",)), jax.make_mesh((4,), ("x",))
  x = np.ones(4, np.float32)
  _raises_same(lambda: sc.jit(lambda a: (set_mesh(m), a)[1])(x),
               lambda: jax.jit(lambda a: (jax.set_mesh(jm), a)[1])(x), ValueError)
  _raises_same(lambda: sc.jit(lambda a: (get_mesh(), a)[1])(x),
               lambda: jax.jit(lambda a: (jsh.get_mesh(), a)[1])(x), ValueError)
  assert get_mesh().empty   # a refused set_mesh changed nothing


def test_use_abstract_mesh():
  m, jm = make_mesh((2, 2), ("x", "y")), jax.make_mesh((2, 2), ("x", "y"))
  with use_abstract_mesh(m.abstract_mesh), jsh.use_abstract_mesh(jm.abstract_mesh):
    assert repr(get_abstract_mesh()) == repr(jsh.get_abstract_mesh())
    assert get_mesh().empty and jsh.get_mesh().empty
    with pytest.raises(ValueError, match="cannot change the size of the mesh"):
      with use_abstract_mesh(AbstractMesh((2,), ("z",))):
        pass
    assert get_abstract_mesh() == m.abstract_mesh
  assert get_abstract_mesh().empty
  with pytest.raises(ValueError, match="Expected mesh of type `jax.sharding.AbstractMesh`"):
    use_abstract_mesh(m)


def test_abstract_mesh_inside_shard_map_has_manual_axes_like_jax():
  m = make_mesh((2, 2), ("x", "y"), (AxisType.Auto,) * 2)
  jm = jax.make_mesh((2, 2), ("x", "y"), (JA.Auto,) * 2)
  seen = []

  def body(getter, store):
    def f(a):
      store.append(repr(getter()))
      return a
    return f
  x = np.ones((4, 4), np.float32)
  shard_map(body(get_abstract_mesh, seen), mesh=m, in_specs=P("x"), out_specs=P("x"),
            axis_names={"x"})(x)
  jax.shard_map(body(jsh.get_abstract_mesh, seen), mesh=jm, in_specs=jsh.PartitionSpec("x"),
                out_specs=jsh.PartitionSpec("x"), axis_names={"x"})(x)
  assert seen[0] == seen[1] and "axis_types=(Manual, Auto)" in seen[0]
  assert get_abstract_mesh().empty


# ---------------------------------------------------------------------------
# Bare PartitionSpecs under set_mesh


def test_device_put_bare_spec_under_set_mesh():
  m = make_mesh((2, 2), ("x", "y"))
  jm = jax.make_mesh((2, 2), ("x", "y"))
  x = np.arange(32, dtype=np.float32).reshape(8, 4)
  with set_mesh(m), jax.set_mesh(jm):
    y = sc.device_put(x, P("x", "y"))
    jy = jax.device_put(x, jsh.PartitionSpec("x", "y"))
    assert y.sharding == NamedSharding(m, P("x", "y"))
    assert repr(y.sharding) == repr(jy.sharding)
    np.testing.assert_array_equal(np.asarray(y), x)
    assert [s.index for s in y.addressable_shards] == [s.index for s in jy.addressable_shards]
    tree = sc.device_put({"a": x, "b": x[:, 0]}, {"a": P(None, "y"), "b": P("x")})
    assert tree["a"].sharding.spec == P(None, "y") and tree["b"].sharding.spec == P("x")
    # An AbstractMesh sharding is placed on the mesh in context.
    z = sc.device_put(x, NamedSharding(m.abstract_mesh, P("y")))
    assert z.sharding == NamedSharding(m, P("y"))
  with pytest.raises(ValueError, match="needs a mesh"):
    sc.device_put(x, P("x"))


def test_jit_and_reshard_bare_specs_under_set_mesh():
  m = make_mesh((2, 2), ("x", "y"), (AxisType.Auto,) * 2)
  jm = jax.make_mesh((2, 2), ("x", "y"), (JA.Auto,) * 2)
  x = np.arange(32, dtype=np.float32).reshape(8, 4)
  with set_mesh(m), jax.set_mesh(jm):
    f = sc.jit(lambda a: a * 2, in_shardings=P("x", "y"), out_shardings=P(None, "y"))
    jf = jax.jit(lambda a: a * 2, in_shardings=jsh.PartitionSpec("x", "y"),
                 out_shardings=jsh.PartitionSpec(None, "y"))
    out, jout = f(x), jf(x)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(jout))
    assert repr(out.sharding) == repr(jout.sharding)
    g = sc.jit(lambda a: reshard(a * 3, P("y")))
    r = g(x)
    np.testing.assert_array_equal(np.asarray(r), 3 * x)
    assert r.sharding.is_equivalent_to(NamedSharding(m, P("y")), 2)
    h = sc.jit(lambda a: with_sharding_constraint(a + 1, NamedSharding(m.abstract_mesh, P("x"))))
    np.testing.assert_array_equal(np.asarray(h(x)), x + 1)
    eager = reshard(x, P("x"))
    assert eager.sharding == NamedSharding(m, P("x"))


# ---------------------------------------------------------------------------
# Axis names that would break module text


@pytest.mark.parametrize("names", [('a"b', "c\\d"), ("x y", "\u00e9"), ("axis0", 'q"')])
def test_axis_names_never_reach_module_text_raw(names):
  m = make_mesh((2, 2), names, (AxisType.Auto,) * 2)
  a, b = names
  x = np.arange(16, dtype=np.float32).reshape(4, 4)
  f = shard_map(lambda v: lax.psum(v, a) + lax.axis_index(b).astype(np.float32), mesh=m,
                in_specs=P(a, b), out_specs=P(None, b))
  want = x[:2] + x[2:] + np.repeat(np.arange(2, dtype=np.float32), 2)[None, :]
  np.testing.assert_array_equal(np.asarray(f(x)), want)
  np.testing.assert_array_equal(np.asarray(sc.jit(f)(x)), want)
  text = sc.jit(f).lower(x).as_text()
  assert "sdy.mesh @mesh = <[" in text
  for n in names:   # quotes, backslashes and non-ASCII would end or break a string there
    if '"' in n or "\\" in n or not n.isascii():
      assert f'"{n}"' not in text
  y = sc.device_put(x, NamedSharding(m, P(a)))
  out = sc.jit(lambda v: v * 2, out_shardings=NamedSharding(m, P(None, b)))(y)
  np.testing.assert_array_equal(np.asarray(out), 2 * x)
  assert out.sharding.spec == P(None, b)


def test_mesh_is_made_in_new_and_copies_are_itself():
  # JAX's Mesh is built in `__new__` (a missing argument names `Mesh.__new__()`, JAX's
  # persistent-cache guide prints it) and is immutable: copy/deepcopy give the mesh itself
  import copy
  _raises_same(lambda: Mesh(sc.devices()), lambda: jsh.Mesh(jax.devices()), TypeError)
  for M, devs in ((Mesh, sc.devices()), (jsh.Mesh, jax.devices())):
    m = M(np.array(devs[:4]).reshape(2, 2), ("x", "y"))
    assert copy.copy(m) is m and copy.deepcopy(m) is m
    assert copy.deepcopy({"m": m})["m"] is m
    args, kwargs = m.__getnewargs_ex__()
    assert M(*args, **kwargs) == m and kwargs == {}
