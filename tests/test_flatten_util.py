"""stagecraft.flatten_util.ravel_pytree against JAX's jax.flatten_util.ravel_pytree: values,
dtypes and weak types of the flat vector and of the unraveled leaves, errors, and use under
jit/grad/vmap."""
import collections

import jax
import jax.flatten_util as jfu
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import tree_util
from stagecraft.flatten_util import ravel_pytree

Point = collections.namedtuple("Point", ["x", "y"])


def _weak(x):
  return bool(getattr(x, "weak_type", False) or getattr(getattr(x, "aval", None), "weak_type",
                                                         False))


def _check_against_jax(tree):
  flat, unravel = ravel_pytree(tree)
  jflat, junravel = jfu.ravel_pytree(tree)
  assert flat.shape == jflat.shape and flat.dtype == jflat.dtype, (flat.dtype, jflat.dtype)
  assert _weak(flat) == _weak(jflat)
  np.testing.assert_array_equal(np.asarray(flat), np.asarray(jflat))
  back, jback = unravel(flat), junravel(jflat)
  assert tree_util.tree_structure(back) == tree_util.tree_structure(tree)
  for a, b in zip(tree_util.tree_leaves(back), jax.tree_util.tree_leaves(jback)):
    assert a.shape == b.shape and a.dtype == b.dtype and _weak(a) == _weak(b)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  return flat, unravel


CASES = [
    {"a": np.ones(3, np.float32), "b": [np.arange(4.0, dtype=np.float32).reshape(2, 2)]},
    [1.0, 2.0],                                       # weak Python floats
    [1, 2.0],                                         # int32 + float32 -> float32
    (np.float32(1.5), 2.0),
    [np.float64(1.0), np.float32(2.0)],               # float64 is float32 without x64
    [np.ones(2, np.int8), np.ones(1, np.uint8)],      # -> int16
    [np.ones(2, np.float32), 1j],                     # -> complex64; unravel casts back
    [True, 2],
    Point(np.zeros((2, 0), np.float32), np.ones((1, 1, 2), np.float32)),
    {"nested": {"deep": (np.array(3, np.int32), np.arange(3, dtype=np.int32))}},
]


@pytest.mark.parametrize("tree", CASES, ids=range(len(CASES)))
def test_matches_jax(tree):
  _check_against_jax(tree)


def test_half_precision_leaves():
  tree = [jnp.ones(2, jnp.bfloat16), jnp.full((1,), 3.0, jnp.float16)]
  flat, unravel = ravel_pytree(tree)
  assert flat.dtype == np.float32
  np.testing.assert_array_equal(np.asarray(flat), [1.0, 1.0, 3.0])
  a, b = unravel(flat)
  assert a.dtype == jnp.bfloat16 and b.dtype == np.float16


def test_empty_tree():
  flat, unravel = ravel_pytree({})
  assert flat.shape == (0,) and flat.dtype == np.float32
  assert unravel(flat) == {}
  flat, unravel = ravel_pytree(None)
  assert unravel(flat) is None


def test_x64():
  tree = {"a": np.arange(3, dtype=np.int64), "b": np.float32(2.0), "c": 1.0}
  with sc.enable_x64(), jax.enable_x64(True):
    flat, _ = _check_against_jax(tree)
    assert flat.dtype == np.float64


def test_single_dtype_unravel_keeps_the_vector_dtype():
  flat, unravel = ravel_pytree([np.ones(2, np.float32)])
  out, = unravel(jnp.arange(2))
  assert out.dtype == np.int32


def test_unravel_errors():
  _, unravel = ravel_pytree({"a": np.ones(3, np.float32), "b": np.zeros((2, 2), np.float32)})
  with pytest.raises(ValueError, match=r"Sum of sizes 7 must be equal to dimension 0 of the "
                                       r"operand shape \[6\]"):
    unravel(jnp.ones(6))
  _, unravel = ravel_pytree({"a": np.ones(3, np.float32), "b": np.zeros(2, np.int32)})
  with pytest.raises(TypeError, match="unravel function given array of dtype int32, but "
                                      "expected dtype float32"):
    unravel(jnp.ones(5, jnp.int32))


def test_jit_grad_vmap():
  params = {"w": np.ones((2, 3), np.float32), "b": np.arange(3, dtype=np.float32)}
  flat, unravel = ravel_pytree(params)

  def loss(v):
    p = unravel(v)
    return jnp.sum(p["w"] ** 2) + jnp.sum(p["b"] * 3.0)

  g = sc.jit(sc.grad(loss))(flat)
  np.testing.assert_allclose(np.asarray(g), np.concatenate([np.full(3, 3.0), 2 * np.ones(6)]))
  # Raveling traced leaves.
  out = sc.jit(lambda p: ravel_pytree(p)[0])(params)
  np.testing.assert_array_equal(np.asarray(out), np.asarray(flat))
  g2 = sc.grad(lambda p: jnp.sum(ravel_pytree(p)[0] ** 2))(params)
  np.testing.assert_allclose(np.asarray(g2["w"]), 2 * params["w"])
  batched = sc.vmap(lambda v: unravel(v)["b"])(jnp.stack([flat, 2 * flat]))
  np.testing.assert_array_equal(np.asarray(batched), [params["b"], 2 * params["b"]])


def test_unravel_is_hashable_and_static():
  _, u1 = ravel_pytree([np.ones(2, np.float32), np.ones((1, 2), np.float32)])
  _, u2 = ravel_pytree([np.zeros(2, np.float32), np.zeros((1, 2), np.float32)])
  _, u3 = ravel_pytree([np.zeros(3, np.float32), np.zeros((1, 2), np.float32)])
  assert u1 == u2 and hash(u1) == hash(u2) and u1 != u3
  f = sc.jit(lambda u, v: u(v)[1], static_argnums=0)
  np.testing.assert_array_equal(np.asarray(f(u1, jnp.arange(4.0))), [[2.0, 3.0]])
