"""Typed PRNG key arrays through the structural jnp/lax operations, against JAX 0.10.2 in the
same test: the result's shape, dtype (`key<fry>`) and key data, or the error's type and
message, under eager, jit, vmap and inside loops (`lax.utils.on_keys`)."""
import types

import jax
import numpy as np
import pytest

import stagecraft as sc

J = types.SimpleNamespace(np=jax.numpy, lax=jax.lax, random=jax.random, jit=jax.jit,
                          vmap=jax.vmap, grad=jax.grad, dtypes=jax.dtypes)
S = types.SimpleNamespace(np=sc.numpy, lax=sc.lax, random=sc.random, jit=sc.jit,
                          vmap=sc.vmap, grad=sc.grad, dtypes=sc.dtypes)


def _keys(m):
  """A scalar key, and a (2, 3) array of distinct keys."""
  return m.random.key(0), m.random.split(m.random.key(1), 6).reshape(2, 3)


def _result(fn, m):
  """(shape, dtype name, data) of fn's result (key data for keys), or (error type, text)."""
  try:
    r = fn(m, *_keys(m))
  except Exception as e:   # NB: compared between the two libraries
    return type(e).__name__, str(e)
  if m.np.issubdtype(r.dtype, m.dtypes.prng_key):
    return r.shape, str(r.dtype), np.asarray(m.random.key_data(r)).tolist()
  return r.shape, str(r.dtype), np.asarray(r).tolist()


CASES = {
    # jnp.where / lax.select
    "where": lambda m, k, ks: m.np.where(True, k, ks[0, 0]),
    "where_array_cond": lambda m, k, ks: m.np.where(m.np.array([True, False, True]), ks[1], k),
    "where_jit": lambda m, k, ks: m.jit(lambda c: m.np.where(c, k, ks[0, 1]))(False),
    "select": lambda m, k, ks: m.lax.select(True, k, ks[0, 0]),
    "select_array": lambda m, k, ks: m.lax.select(
        m.np.array([[True, False, True], [False, False, True]]), ks, ks[::-1]),
    "select_n": lambda m, k, ks: m.lax.select_n(m.np.array([0, 1, 2]), ks[0], ks[1], ks[0][::-1]),
    # joining
    "stack": lambda m, k, ks: m.np.stack([k, ks[1, 1]]),
    "stack_neg_axis": lambda m, k, ks: m.np.stack([ks, ks[::-1]], axis=-1),
    "stack_jit": lambda m, k, ks: m.jit(lambda a, b: m.np.stack([a, b]))(k, ks[1, 1]),
    "concatenate": lambda m, k, ks: m.np.concatenate([ks, ks[:1]]),
    "concatenate_axis1": lambda m, k, ks: m.np.concatenate([ks, ks[:, :1]], axis=-1),
    "concatenate_none": lambda m, k, ks: m.np.concatenate([ks, ks], axis=None),
    # gathering and slicing
    "take": lambda m, k, ks: m.np.take(ks, m.np.array([4, 1])),
    "take_axis": lambda m, k, ks: m.np.take(ks, m.np.array([[2, 0]]), axis=-1),
    "take_fill": lambda m, k, ks: m.np.take(ks, m.np.array([7, 1]), axis=1, mode="fill"),
    "dynamic_slice": lambda m, k, ks: m.lax.dynamic_slice(ks, (1, 1), (1, 2)),
    "dynamic_update_slice": lambda m, k, ks: m.lax.dynamic_update_slice(
        ks, m.np.broadcast_to(k, (1, 2)), (1, 0)),
    "dynamic_index_in_dim": lambda m, k, ks: m.lax.dynamic_index_in_dim(ks, 2, axis=-1,
                                                                       keepdims=False),
    "dynamic_update_index_in_dim": lambda m, k, ks: m.lax.dynamic_update_index_in_dim(
        ks, ks[:, :1], 2, axis=1),
    "at_set": lambda m, k, ks: ks.at[0, 1].set(k),
    "at_set_slice": lambda m, k, ks: ks.at[:, 0].set(k),
    "at_get": lambda m, k, ks: ks.at[1].get(),
    # shapes
    "broadcast_to": lambda m, k, ks: m.np.broadcast_to(ks[0], (4, 3)),
    "expand_dims": lambda m, k, ks: m.np.expand_dims(ks, (0, -1)),
    "squeeze": lambda m, k, ks: m.np.squeeze(ks[:1]),
    "swapaxes": lambda m, k, ks: m.np.swapaxes(ks, 0, 1),
    "transpose": lambda m, k, ks: m.np.transpose(ks),
    "moveaxis": lambda m, k, ks: m.np.moveaxis(ks, 0, -1),
    "ravel": lambda m, k, ks: m.np.ravel(ks),
    "reshape": lambda m, k, ks: m.np.reshape(ks, (3, 2)),
    "flip": lambda m, k, ks: m.np.flip(ks, -2),
    "roll": lambda m, k, ks: m.np.roll(ks, (1, 1), axis=(0, 1)),
    "roll_flat": lambda m, k, ks: m.np.roll(ks, 2),
    "tile": lambda m, k, ks: m.np.tile(ks, (2, 1, 2)),
    # copies and fills
    "copy": lambda m, k, ks: m.np.copy(ks),
    "array": lambda m, k, ks: m.np.array(ks),
    "asarray": lambda m, k, ks: m.np.asarray(ks),
    "zeros_like": lambda m, k, ks: m.np.zeros_like(ks),
    "ones_like": lambda m, k, ks: m.np.ones_like(k),
    "full_like": lambda m, k, ks: m.np.full_like(ks, 3),
    # comparisons
    "eq": lambda m, k, ks: ks == ks[0],
    "ne": lambda m, k, ks: ks != k,
    "equal": lambda m, k, ks: m.np.equal(ks, ks[:, :1]),
    "array_equal": lambda m, k, ks: m.np.array_equal(ks, ks),
    # transformations and loops
    "cond": lambda m, k, ks: m.lax.cond(True, lambda: k, lambda: ks[0, 0]),
    "switch": lambda m, k, ks: m.lax.switch(1, [lambda: k, lambda: ks[0, 1]]),
    "vmap_where": lambda m, k, ks: m.vmap(lambda c, a, b: m.np.where(c, a, b))(
        m.np.array([True, False, True]), ks[0], ks[1]),
    "vmap_stack": lambda m, k, ks: m.vmap(lambda a, b: m.np.stack([a, b], axis=-1))(ks[0],
                                                                                    ks[1]),
    "vmap_take": lambda m, k, ks: m.vmap(lambda a, i: m.np.take(a, i))(ks, m.np.array([1, 2])),
    "while_where": lambda m, k, ks: m.lax.while_loop(
        lambda c: c[0] < 3,
        lambda c: (c[0] + 1, m.np.where(c[0] % 2 == 0, m.random.split(c[1])[0], c[1])),
        (0, k))[1],
    "scan_where": lambda m, k, ks: m.lax.scan(
        lambda c, x: (m.np.where(x, c, m.random.split(c)[0]), x), k,
        m.np.array([True, False, True]))[0],
    "fori_at_set": lambda m, k, ks: m.lax.fori_loop(
        0, 3, lambda i, a: a.at[i].set(m.random.fold_in(k, i)), ks[0]),
    "grad_through_where": lambda m, k, ks: m.grad(
        lambda x: m.random.normal(m.np.where(x > 0, k, ks[0, 0])) * x)(1.0),
    # errors (JAX's types and messages)
    "where_mixed": lambda m, k, ks: m.np.where(True, k, m.np.zeros(2, m.np.uint32)),
    "where_scalar": lambda m, k, ks: m.np.where(True, 0, k),
    "stack_mixed": lambda m, k, ks: m.np.stack([k, m.np.zeros((), m.np.uint32)]),
    "concatenate_0d": lambda m, k, ks: m.np.concatenate([k, k]),
    "stack_bad_axis": lambda m, k, ks: m.np.stack([ks, ks], axis=3),
    "broadcast_bad": lambda m, k, ks: m.np.broadcast_to(ks, (4, 3)),
    "select_bad_which": lambda m, k, ks: m.lax.select(m.np.array([True, False]), ks, ks),
    "at_add": lambda m, k, ks: ks.at[0].add(k),
    "at_set_int": lambda m, k, ks: ks.at[0].set(1),
    "add_int": lambda m, k, ks: k + 1,
    "radd_int": lambda m, k, ks: 1 + k,
    "add_keys": lambda m, k, ks: k + k,
    "mul_keys": lambda m, k, ks: ks * ks,
    "sub_array": lambda m, k, ks: k - m.np.ones((), m.np.int8),
    "truediv": lambda m, k, ks: k / 2,
    "lt_keys": lambda m, k, ks: k < k,
    "gt_reflected": lambda m, k, ks: 1 < k,
    "and_keys": lambda m, k, ks: k & k,
    "xor_int": lambda m, k, ks: k ^ 1,
    "pow_int": lambda m, k, ks: k ** 2,
    "pow_float": lambda m, k, ks: k ** 1.5,
    "rpow": lambda m, k, ks: 2 ** k,
    "neg": lambda m, k, ks: -k,
    "abs": lambda m, k, ks: abs(k),
    "invert": lambda m, k, ks: ~k,
    "pos": lambda m, k, ks: +k,
    "eq_int": lambda m, k, ks: k == 1,
    "ne_reflected": lambda m, k, ks: 1 != k,
    "jnp_add_int": lambda m, k, ks: m.np.add(k, 1),
    "jnp_multiply_keys": lambda m, k, ks: m.np.multiply(k, k),
    "sum": lambda m, k, ks: m.np.sum(ks),
    "mean": lambda m, k, ks: m.np.mean(ks),
}


@pytest.mark.parametrize("name", list(CASES))
def test_key_array_op(name):
  fn = CASES[name]
  want, got = _result(fn, J), _result(fn, S)
  assert got == want


def test_keys_pass_through_jit_as_keys():
  """A jitted where of keys returns keys (the key type is rebuilt around the traced data)."""
  k, ks = _keys(S)
  out = S.jit(lambda c, a, b: S.np.where(c, a, b))(True, ks, k)
  assert isinstance(out, sc.random.PRNGKeyArray) and out.shape == (2, 3)
  np.testing.assert_array_equal(np.asarray(S.random.key_data(out)),
                                np.asarray(S.random.key_data(ks)))
