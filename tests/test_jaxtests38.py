"""Behaviours found running JAX 0.10.2's own test files (array_test) on stagecraft, each
checked against JAX in the same test."""
from __future__ import annotations

import warnings

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp


def _warned(fn):
  """(result or exception type name, [(category name, message)]) of `fn()`."""
  with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    try:
      out = fn()
    except Exception as e:   # noqa: BLE001
      out = type(e).__name__
  return out, [(m.category.__name__, str(m.message)) for m in w]


@pytest.mark.parametrize("use", [
    lambda m, x: np.dtype(x),
    lambda m, x: np.zeros(2, dtype=x).dtype,
    lambda m, x: np.issubdtype(x, np.floating),
    lambda m, x: np.result_type(x),
    lambda m, x: np.asarray(x).dtype,
    lambda m, x: np.dtype(m.float32),
    lambda m, x: np.dtype(m.int8),
], ids=["dtype", "zeros_dtype", "issubdtype", "result_type", "asarray", "scalar_type",
        "scalar_type_int8"])
def test_an_array_as_a_numpy_dtype_warns_as_jax(use):
  # NumPy >= 2.4 asks an object for `__numpy_dtype__`; JAX's Arrays answer with a
  # DeprecationWarning, its scalar types without one
  ours = _warned(lambda: use(jnp, jnp.arange(3.0)))
  theirs = _warned(lambda: use(jjnp, jjnp.arange(3.0)))
  assert ours == theirs
  assert ours[0] in (np.float32, np.int8, True)


def test_a_tracer_as_a_numpy_dtype_does_not_warn_as_jax():
  def probe(seen):
    def f(x):
      seen.append(_warned(lambda: np.dtype(x)))
      return x * 2
    return f
  ours, theirs = [], []
  sc.jit(probe(ours))(np.arange(3.0, dtype=np.float32))
  sc.grad(lambda x: probe(ours)(x).sum())(np.arange(3.0, dtype=np.float32))
  jax.jit(probe(theirs))(np.arange(3.0, dtype=np.float32))
  jax.grad(lambda x: probe(theirs)(x).sum())(np.arange(3.0, dtype=np.float32))
  assert ours == theirs == [(np.dtype(np.float32), [])] * 2


needs_4 = pytest.mark.skipif(len(sc.devices()) < 4, reason="needs 4 devices")


@needs_4
@pytest.mark.parametrize("mesh_shape", [(2,), (1,)])
def test_device_of_a_mesh_split_array_is_its_sharding_as_jax(mesh_shape):
  def run(m, jsh, nm):
    mesh = m.make_mesh(mesh_shape, ("x",))
    s = jsh.NamedSharding(mesh, jsh.PartitionSpec("x"))
    x = m.device_put(nm.arange(8.0), s)
    d = x.device
    return (repr(d), type(d).__name__, repr(nm.ones(3).device))
  ours = run(sc, sc.sharding, jnp)
  theirs = run(jax, jax.sharding, jjnp)
  assert ours == theirs
  assert (ours[1] == "NamedSharding") == (mesh_shape == (2,))


@needs_4
def test_make_array_from_single_device_arrays_of_split_arrays_raises_as_jax():
  def err(m, jsh, nm):
    mesh = m.make_mesh((2,), ("x",))
    s = jsh.NamedSharding(mesh, jsh.PartitionSpec("x"))
    x = m.device_put(nm.arange(10), s)
    with pytest.raises(ValueError) as e:
      m.make_array_from_single_device_arrays(x.shape, s, [x, x])
    return str(e.value)
  ours, theirs = err(sc, sc.sharding, jnp), err(jax, jax.sharding, jjnp)
  assert ours == theirs == ("When making an array from single-device arrays the input arrays "
                            "must have one shard each. An argument array had 2 shard(s).")


_PSPEC_ARGS = [(["x", "y"],), ((),), (("x",),), (("x", "y"), "z"), (None,), ((None,),),
               (("x", None),), ([],), ("x", ("z", ("a",))), ((("a", "b"), "c"),)]


@pytest.mark.parametrize("args", _PSPEC_ARGS, ids=[repr(a) for a in _PSPEC_ARGS])
def test_partition_spec_entries_are_canonical_as_jax(args):
  def build(P):
    try:
      p = P(*args)
    except Exception as e:   # noqa: BLE001
      return type(e).__name__, str(e)
    return repr(p), p.partitions, hash(p) == hash(P(*p.partitions))
  assert build(sc.sharding.PartitionSpec) == build(jax.sharding.PartitionSpec)


def test_partition_spec_empty_and_one_name_tuples_equal_their_canonical_forms():
  P = sc.sharding.PartitionSpec
  assert P((), "x") == P(None, "x") and hash(P((), "x")) == hash(P(None, "x"))
  assert P(("x",)) == P("x") and P(["x", "y"]) == P(("x", "y"))


def test_subclassing_partition_spec_raises_as_jax():
  for P in (sc.sharding.PartitionSpec, jax.sharding.PartitionSpec):
    with pytest.raises(TypeError, match=r"^Subclassing `jax.P` is prohibited.$"):
      type("MyP", (P,), {})


@needs_4
@pytest.mark.parametrize("spec", [("x", "x"), (("x", "y"), "y"), ("z",), (("x", "z"),),
                                  dict(unreduced={"w"}), dict(reduced={"w"})],
                         ids=["dup", "dup_tuple", "unknown", "unknown_in_tuple",
                              "unknown_unreduced", "unknown_reduced"])
def test_named_sharding_spec_errors_as_jax(spec):
  def err(m, jsh):
    mesh = m.make_mesh((2, 2), ("x", "y"))
    P = jsh.PartitionSpec
    p = P(None, **spec) if isinstance(spec, dict) else P(*spec)
    try:
      jsh.NamedSharding(mesh, p)
    except Exception as e:   # noqa: BLE001
      return type(e).__name__, str(e), isinstance(e, ValueError)
    return None
  ours, theirs = err(sc, sc.sharding), err(jax, jax.sharding)
  assert ours == theirs and ours is not None


@needs_4
@pytest.mark.parametrize("shape,in_axis,axis_name", [((4, 2), 0, "x"), ((4, 2), 1, "x"),
                                                     ((4, 2, 4), 2, "x"), ((2, 4), 1, "x"),
                                                     ((4, 3), 0, None)])
def test_pmap_result_sharding_as_jax(shape, in_axis, axis_name):
  # JAX's specs leave out trailing Nones; an unnamed pmap's mesh axis is
  # `_internal_pmap_axis_name`
  def run(m, nm):
    x = nm.arange(int(np.prod(shape))).reshape(shape)
    out = m.pmap(lambda v: v * 2, in_axes=in_axis, axis_name=axis_name)(x)
    return out.shape, repr(out.sharding), np.asarray(out).tolist()
  assert run(sc, jnp) == run(jax, jjnp)


_PSPEC_SUMS = {
    "specs": lambda P: P("x", unreduced={"z"}) + P("a", unreduced={"b"}),
    "reduced": lambda P: P("x", reduced={"z"}) + P(None, reduced={"b"}),
    "tuple": lambda P: P("x") + ("y", None),
    "rtuple": lambda P: ("y",) + P("x"),
    "tuple_unreduced": lambda P: P("x", unreduced={"z"}) + ("a",),
    "rtuple_reduced": lambda P: ("a",) + P("x", reduced={"z"}),
    "int": lambda P: P("x") + 1,
    "list": lambda P: [1] + P("x"),
}


@pytest.mark.parametrize("name", sorted(_PSPEC_SUMS))
def test_partition_spec_sums_as_jax(name):
  def run(P):
    try:
      out = _PSPEC_SUMS[name](P)
    except Exception as e:   # noqa: BLE001
      return type(e).__name__, str(e)
    return (isinstance(out, P), out.partitions, sorted(out.unreduced), sorted(out.reduced),
            out == P(*out.partitions, unreduced=out.unreduced, reduced=out.reduced))
  assert run(sc.sharding.PartitionSpec) == run(jax.sharding.PartitionSpec)


def test_make_array_from_single_device_arrays_of_a_non_list_raises_as_jax():
  def err(m, nm, jitted):
    x = nm.arange(10)
    f = lambda v: m.make_array_from_single_device_arrays(v.shape, x.sharding, v)  # noqa: E731
    with pytest.raises(TypeError) as e:
      (m.jit(f) if jitted else f)(x)
    return str(e.value).split(", but got")[0]
  for jitted in (False, True):
    assert err(sc, jnp, jitted) == err(jax, jjnp, jitted) == (
        "jax.make_array_from_single_device_arrays `arrays` argument must be a list or tuple")
