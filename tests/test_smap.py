"""`stagecraft.smap` (JAX 0.10.2's `jax.smap`): a shard_map over one axis of the mesh in
context, against JAX in the same test (4 CPU devices: conftest.py)."""
import jax
import numpy as np
import pytest

import stagecraft as sc

X = np.arange(32.0, dtype=np.float32).reshape(4, 8)


def _run(lib, make, *args, shape=(4,), names=("i",)):
  mesh = lib.make_mesh(shape, names, axis_types=(lib.sharding.AxisType.Auto,) * len(shape))
  with lib.set_mesh(mesh):
    return [np.asarray(r) for r in lib.tree.leaves(make(lib)(*args))]


@pytest.mark.parametrize("name", ["rows_psum", "cols_broadcast_arg", "jit_decorator",
                                  "two_axis_mesh", "tuple_out", "axis_index_partial_manual",
                                  "axis_index_other_axis"])
def test_smap_like_jax(name):
  progs = {
      "rows_psum": (lambda m: m.smap(lambda a: a * 2 + m.lax.psum(a, "i"), in_axes=0,
                                     out_axes=0, axis_name="i"), (X,), {}),
      "cols_broadcast_arg": (lambda m: m.jit(m.smap(
          lambda a, b: a.sum(0, keepdims=True) + b, in_axes=(1, None), out_axes=1,
          axis_name="i")), (X, np.float32(1)), {}),
      "jit_decorator": (lambda m: m.jit(m.smap(in_axes=0, out_axes=None, axis_name="i")(
          lambda a: m.lax.pmax(a.max(), "i"))), (X,), {}),
      "two_axis_mesh": (lambda m: m.smap(lambda a: a + m.lax.psum(a, "j"), in_axes=1,
                                         out_axes=1, axis_name="j"),
                        (X,), dict(shape=(2, 2), names=("i", "j"))),
      # axis_index in a shard_map manual over some mesh axes only (as JAX: the partition id
      # is read in a region manual over the others too; XLA refuses it otherwise)
      "axis_index_partial_manual": (lambda m: m.jit(m.smap(
          lambda a: a + m.lax.axis_index("j"), in_axes=1, out_axes=1, axis_name="j")),
          (X,), dict(shape=(2, 2), names=("i", "j"))),
      "axis_index_other_axis": (lambda m: m.smap(
          lambda a: a * m.lax.axis_index("i"), in_axes=0, out_axes=0, axis_name="i"),
          (X,), dict(shape=(2, 2), names=("i", "j"))),
      "tuple_out": (lambda m: m.smap(lambda a: (a, a.sum(1)), in_axes=0, out_axes=(0, 0),
                                     axis_name="i"), (X,), {}),
  }
  make, args, kw = progs[name]
  ours, theirs = _run(sc, make, *args, **kw), _run(jax, make, *args, **kw)
  assert len(ours) == len(theirs)
  for o, t in zip(ours, theirs):
    np.testing.assert_allclose(o, t)


def test_smap_errors_as_jax():
  for lib in (sc, jax):
    with pytest.raises(TypeError, match="smap axis_name should be a `str` or a `Hashable`"):
      lib.smap(lambda a: a, in_axes=0, out_axes=0, axis_name=("i",))
    with pytest.raises(TypeError, match="smap in_axes must be an int, None"):
      lib.smap(lambda a: a, in_axes=[0], out_axes=0, axis_name="i")
    with pytest.raises(TypeError, match="smap out_axes must be an int, None"):
      lib.smap(lambda a: a, in_axes=0, out_axes="x", axis_name="i")
