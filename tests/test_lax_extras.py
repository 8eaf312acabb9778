"""The composite jax.lax names (shape helpers, reciprocal/square/mulhi, zeta, approx top-k,
index_take, conv patches, optimization_barrier, rng_uniform, platform_dependent) against
JAX on the same inputs."""
import jax
import numpy as np
import pytest

import stagecraft
import stagecraft as sc
from stagecraft import lax

from _util import assert_trees_allclose

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 4)).astype(np.float32)


def close(a, b, **kw):
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), **kw)
  assert np.asarray(a).dtype == np.asarray(b).dtype


@pytest.mark.parametrize("name,args", [
    ("broadcast_to_rank", (X[0], 4)), ("full_like", (X, 2.5)), ("tile", (X[0], (2, 3))),
    ("reciprocal", (X + 3,)), ("square", (X,)), ("square", (np.arange(5, dtype=np.int32),)),
])
def test_against_jax(name, args):
  close(getattr(lax, name)(*args), getattr(jax.lax, name)(*args), rtol=1e-6)


def test_shape_helpers():
  assert lax.broadcast_shapes((2, 1), (1, 3)) == jax.lax.broadcast_shapes((2, 1), (1, 3))
  assert_trees_allclose(lax.split(X, [1, 3], 2), jax.lax.split(X, [1, 3], 2), check_dtypes=True)
  close(lax.stack([X, X], 1), jax.lax.stack([X, X], 1))
  assert_trees_allclose(lax.unstack(X, 2), jax.lax.unstack(X, 2), check_dtypes=True)
  assert lax.empty((2, 3), np.int32).shape == (2, 3)
  assert lax.dtype(1.0) == jax.lax.dtype(1.0)
  with pytest.raises(ValueError, match="Sum of sizes 3 must be equal to dimension 2"):
    lax.split(X, [1, 2], 2)
  with pytest.raises(ValueError, match="Incompatible shapes for broadcasting"):
    lax.broadcast_shapes((2,), (3,))


@pytest.mark.parametrize("dt", [np.int8, np.int16, np.int32, np.uint8, np.uint32])
def test_mulhi(dt):
  info = np.iinfo(dt)
  x = RNG.integers(info.min, info.max, 50, endpoint=True).astype(dt)
  y = RNG.integers(info.min, info.max, 50, endpoint=True).astype(dt)
  np.testing.assert_array_equal(lax.mulhi(x, y), jax.lax.mulhi(x, y))
  np.testing.assert_array_equal(lax.mulhi(x, y[0]), jax.lax.mulhi(x, np.broadcast_to(y[0], 50)))


def test_zeta_and_approx_top_k():
  x, q = np.array([2.0, 3.5, 1.5], np.float32), np.array([1.0, 2.0, 0.5], np.float32)
  close(lax.zeta(x, q), jax.lax.zeta(x, q), rtol=1e-5)
  v = RNG.standard_normal((3, 10)).astype(np.float32)
  for ours, theirs in [(lax.approx_max_k(v, 3), jax.lax.approx_max_k(v, 3)),
                       (lax.approx_min_k(v, 3), jax.lax.approx_min_k(v, 3))]:
    close(ours[0], theirs[0])
    np.testing.assert_array_equal(ours[1], theirs[1])


def test_index_take():
  idxs = (np.array([1, 0, 1]), np.array([3, 1, 0]))
  close(lax.index_take(X, idxs, (0, 2)), jax.lax.index_take(X, idxs, (0, 2)))


@pytest.mark.parametrize("dnums,strides,padding", [
    (None, (1, 1), "SAME"), (None, (2, 1), "VALID"), (("NHWC", "OIHW", "NHWC"), (1, 2), "SAME")])
def test_conv_general_dilated_patches(dnums, strides, padding):
  x = RNG.standard_normal((2, 3, 5, 6)).astype(np.float32)
  if dnums is not None:
    x = np.moveaxis(x, 1, -1)
  a = lax.conv_general_dilated_patches(x, (2, 3), strides, padding, dimension_numbers=dnums)
  b = jax.lax.conv_general_dilated_patches(x, (2, 3), strides, padding,
                                           dimension_numbers=dnums)
  close(a, b)


def test_utilities():
  tree = {"a": X, "b": (X[0], 1.0)}
  out = stagecraft.jit(lax.optimization_barrier)(tree)
  close(out["a"], X)
  from stagecraft.interpreters import lowering
  jaxpr = stagecraft.make_jaxpr(lambda x: lax.optimization_barrier(x) * 2)(X).jaxpr
  assert '"stablehlo.optimization_barrier"(%arg0)' in lowering.lower_jaxpr_to_module("f", jaxpr)
  assert lax.platform_dependent(3, cpu=lambda v: v + 1, default=lambda v: v) == 4
  assert lax.platform_dependent(3, tpu=lambda v: v + 1, default=lambda v: v) == 3
  with pytest.raises(NotImplementedError, match="rule for primitive 'platform_index.*cpu"):
    lax.platform_dependent(3, tpu=lambda v: v)
  r = np.asarray(lax.rng_uniform(np.float32(2), np.float32(3), (100,)))
  assert r.shape == (100,) and (r >= 2).all() and (r < 3).all()
  close(lax.composite(lambda v: v * 2, "double")(X), X * 2)



def test_shape_as_value_matches_jax():
  for shape in [(3, 4), (), (0, 7, 1)]:
    ours, theirs = lax.shape_as_value(shape), jax.lax.shape_as_value(shape)
    assert isinstance(ours, np.ndarray) == isinstance(theirs, np.ndarray)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    assert np.asarray(ours).dtype == np.asarray(theirs).dtype and ours.shape == theirs.shape


def test_shape_as_value_of_symbolic_dimensions():
  from stagecraft import export
  import stagecraft.numpy as snp
  b, = export.symbolic_shape("b")
  f = stagecraft.jit(lambda x: lax.shape_as_value(x.shape) * 2)
  exp = export.export(f)(stagecraft.ShapeDtypeStruct((b, 3), snp.float32))
  np.testing.assert_array_equal(np.asarray(exp.call(np.zeros((5, 3), np.float32))), [10, 6])
  jb, = jax.export.symbolic_shape("b")
  jexp = jax.export.export(jax.jit(lambda x: jax.lax.shape_as_value(x.shape) * 2))(
      jax.ShapeDtypeStruct((jb, 3), np.float32))
  np.testing.assert_array_equal(np.asarray(jexp.call(np.zeros((5, 3), np.float32))), [10, 6])


def test_approx_top_k_is_one_equation_as_jax():
  """approx_max_k/approx_min_k stage JAX's `approx_top_k` equation (its params), vmap moves
  its reduction dimension as JAX's, and values, indices, gradients and errors are JAX's."""
  x = RNG.standard_normal((5, 3, 4)).astype(np.float32)
  for in_axes, rd in [(0, -1), (1, -1), (2, -2), (0, 0)]:
    f = lambda L, rd=rd: lambda v: L.approx_max_k(v, 2, reduction_dimension=rd)  # noqa: E731
    ours, theirs = sc.vmap(f(lax), in_axes=in_axes), jax.vmap(f(jax.lax), in_axes=in_axes)
    assert str(sc.make_jaxpr(ours)(x)) == str(jax.make_jaxpr(theirs)(x))
    for a, b in zip(ours(x), theirs(x)):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  g = lambda L: lambda v: L.approx_min_k(v, 2, recall_target=0.9)  # noqa: E731
  assert str(sc.make_jaxpr(g(lax))(x)) == str(jax.make_jaxpr(g(jax.lax))(x))
  for a, b in zip(sc.jit(g(lax))(x), jax.jit(g(jax.lax))(x)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  loss = lambda L: lambda v: (L.approx_max_k(v, 2)[0].sum()  # noqa: E731
                              + L.approx_min_k(v * v, 1, 0)[0].sum())
  np.testing.assert_allclose(np.asarray(sc.grad(loss(lax))(x)),
                             np.asarray(jax.grad(loss(jax.lax))(x)), rtol=1e-6)
  for L in (lax, jax.lax):
    with pytest.raises(ValueError, match="^k must be smaller than the size of reduction_dim 4, "
                                         "got 9"):
      L.approx_max_k(x, 9)
    with pytest.raises(ValueError, match="^operand must be a floating type"):
      L.approx_max_k(np.ones((5, 3), np.int32), 2)
    with pytest.raises(IndexError):
      L.approx_min_k(x, 2, reduction_dimension=3)
