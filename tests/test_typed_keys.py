"""Typed PRNG key arrays (`random.key`) are pytree leaves, as JAX's are, and still pass
through every transformation (jit, vmap, grad, scan, cond, while, checkpoint, eval_shape)
as arguments and results. JAX is the oracle."""
from __future__ import annotations

import jax
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import random, tree_util


def _both(fn):
  """`fn(lib)` under JAX and stagecraft."""
  return fn(jax), fn(sc)


def test_a_key_is_a_leaf():
  def run(lib):
    k = lib.random.key(0)
    ks = lib.random.split(k, 3)
    tu = lib.tree_util
    return (tu.tree_leaves(k)[0] is k, len(tu.tree_leaves({"a": k, "b": 1, "c": ks})),
            tu.tree_map(lambda x: x, k) is k, tu.treedef_is_leaf(tu.tree_structure(k)),
            tu.tree_structure(ks).num_leaves, tu.all_leaves([k, ks]),
            tu.tree_map(lambda x: x.shape, {"k": ks, "x": lib.numpy.ones(2)}),
            [tu.keystr(p) for p, _ in tu.tree_flatten_with_path({"k": k, "x": [ks]})[0]],
            tu.tree_structure(k).unflatten([ks]).shape,
            tu.tree_map(lambda a, b: a is b, k, k),
            len(lib.tree.leaves(lib.tree.map(lambda x: x, [k, (ks, None)]))))
  assert run(jax) == run(sc) == (True, 3, True, True, 1, True, {"k": (3,), "x": (2,)},
                                 ["['k']", "['x'][0]"], (3,), True, 2)


def test_key_identity_survives_tree_map():
  """flax.nnx's Variable copies its value with `tree.map(lambda x: x, v)`; `rngs.params.key[...]
  is key0` then holds only if keys are leaves."""
  k = random.key(0)
  state = {"key": k, "count": jnp.zeros((), jnp.uint32)}
  assert tree_util.tree_map(lambda x: x, state)["key"] is k
  assert sc.tree.map(lambda x: x, state)["key"] is k


def test_transformations_take_and_return_keys():
  def run(lib):
    r = lib.random
    k = r.key(0)
    ks = r.split(k, 3)
    out = {}
    out["jit_id"] = str(lib.jit(lambda k: k)(k).dtype)
    out["jit_split"] = lib.jit(lambda k: r.split(k))(k).shape
    out["jit_dict"] = str(lib.jit(lambda d: d["k"])({"k": k, "x": 1.}).dtype)
    out["jit_made"] = str(lib.jit(lambda: r.key(3))().dtype)
    out["jit_closed"] = str(lib.jit(lambda x: (x, k))(1.)[1].dtype)
    out["vmap_normal"] = np.asarray(lib.vmap(lambda k: r.normal(k))(ks)).tolist()
    out["vmap_id"] = lib.vmap(lambda k: k)(ks).shape
    out["vmap_none"] = lib.vmap(lambda k, x: r.normal(k) + x, in_axes=(0, None))(ks, 1.).shape
    out["vmap_fold"] = lib.vmap(lambda i: r.fold_in(k, i))(lib.numpy.arange(3)).shape
    c, ys = lib.lax.scan(lambda c, x: (r.split(c)[0], r.uniform(x)), k, ks)
    out["scan"] = (str(c.dtype), np.asarray(ys).tolist())
    out["cond"] = str(lib.lax.cond(True, lambda k: r.split(k)[0], lambda k: k, k).dtype)
    out["fori"] = np.asarray(r.key_data(
        lib.lax.fori_loop(0, 3, lambda i, k: r.split(k)[0], k))).tolist()
    out["while"] = str(lib.lax.while_loop(lambda c: c[0] < 2,
                                          lambda c: (c[0] + 1, r.split(c[1])[0]),
                                          (0, k))[1].dtype)
    out["grad"] = float(lib.grad(lambda x, k: x * r.normal(k))(1., k))
    out["checkpoint"] = float(lib.checkpoint(lambda k: r.normal(k))(k))
    out["eval_shape"] = lib.eval_shape(lambda k: r.split(k), k).shape
    out["donate"] = str(lib.jit(lambda k: k, donate_argnums=0)(r.key(1)).dtype)
    out["block"] = lib.block_until_ready(k) is k
    out["wrap"] = r.wrap_key_data(r.key_data(ks)).shape
    return out
  j, s = _both(run)
  assert s.keys() == j.keys()
  for name in j:
    if isinstance(j[name], float):
      np.testing.assert_allclose(s[name], j[name], rtol=1e-6, err_msg=name)
    elif name == "scan":
      assert s[name][0] == j[name][0]
      np.testing.assert_allclose(s[name][1], j[name][1], rtol=1e-6, err_msg=name)
    else:
      assert s[name] == j[name], name


def test_a_key_is_not_a_static_argument():
  k = random.key(0)
  with pytest.raises((TypeError, ValueError), match="Non-hashable static arguments"):
    sc.jit(lambda k: k, static_argnums=0)(k)
  with pytest.raises((TypeError, ValueError), match="Non-hashable static arguments"):
    jax.jit(lambda k: k, static_argnums=0)(jax.random.key(0))


def test_staged_leaf_registration_is_checked():
  with pytest.raises(ValueError, match="Duplicate pytree node registration"):
    tree_util.register_staged_leaf(random.PRNGKeyArray, lambda k: (k, None),
                                   lambda _, c: c[0])


# NB: these go through `tree_util.tree_flatten_traced`/`tree_map_traced` in lax/ad_util.py,
# lax/misc.py, runtime/spmd.py and runtime/array.py (keys are leaves for `tree_map`).
@pytest.mark.parametrize("op", ["stop_gradient", "optimization_barrier", "device_put",
                                "device_get"])
def test_leaf_wise_functions_take_keys(op):
  def run(lib):
    fn = getattr(lib.lax, op, None) or getattr(lib, op)
    return str(fn({"k": lib.random.key(0)})["k"].dtype)
  assert run(sc) == run(jax) == "key<fry>"


# NB: needs the typed-key branches in numpy/ufuncs.py (isclose, array_equal) and
# numpy/manipulation.py (shape, broadcast_to).
def test_numpy_functions_take_keys():
  def run(lib):
    jnp_, r = lib.numpy, lib.random
    k0, k1 = r.key(0), r.key(1)
    ks = r.split(k0, 3)
    return (bool(jnp_.allclose(k0, k1)), bool(jnp_.allclose(k0, k0)),
            np.asarray(jnp_.isclose(ks, ks[1])).tolist(),
            bool(jnp_.array_equal(ks, ks)), bool(jnp_.array_equal(k0, k1)),
            bool(jnp_.array_equal(k0, jnp_.zeros(2, "uint32"))),
            bool(jnp_.array_equal(ks, ks[:2])),
            jnp_.broadcast_to(k0, (5,)).shape, jnp_.broadcast_to(ks, (2, 3)).shape,
            np.asarray(r.key_data(jnp_.broadcast_to(ks, (2, 3))[1])).tolist()
            == np.asarray(r.key_data(ks)).tolist(),
            jnp_.shape(ks), jnp_.ndim(ks), jnp_.size(ks))
  assert run(sc) == run(jax)
