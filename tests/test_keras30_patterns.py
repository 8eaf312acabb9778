"""Patterns from Keras 3.15.1's test suite (`keras/src/ops/numpy_test.py` and the layers,
random, models and saving suites) on its JAX backend, in plain JAX code, each run on JAX and
on stagecraft and compared: values, dtypes, sparse layouts, exception types and texts. Keras
itself is not a test dependency; the per-test outcome counts of the Keras suite files run
unchanged on both are in the commit messages of this file.

Covered: window functions' `M` (`jnp.bartlett(ones((), dtype))`), `bcoo_broadcast_in_dim`'s
layout of new dimensions, `bcoo_multiply_sparse` with dense dimensions / batch layouts,
`make_array_from_process_local_data` in one process (pytrees, None), and
`debug.inspect_array_sharding` of tracers."""
import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from jax.experimental import sparse as jsparse

import stagecraft
import stagecraft.numpy as jnp
from stagecraft.experimental import sparse


def _err(fn):
  """`(type name, text)` of the exception `fn()` raises."""
  with pytest.raises(Exception) as e:
    fn()
  return type(e.value).__name__, str(e.value)


def _run(fn, np_mod, **kw):
  """`fn(np_mod)`'s value, or `(type name, text)` of what it raises."""
  try:
    return fn(np_mod, **kw)
  except Exception as e:  # noqa: BLE001 (the comparison is the point)
    return type(e).__name__, str(e)


# ---------------------------------------------------------------------------
# keras.ops.bartlett & co. (NumpyDtypeTest.test_bartlett_*): Keras passes the window size as a
# 0-d array of any dtype (`ones((), dtype)`); JAX converts M with int()


@pytest.mark.parametrize("name", ["bartlett", "blackman", "hamming", "hanning", "kaiser"])
def test_window_size_converted_with_int(name):
  ms = [np.float32(4.0), 3.7, "3", -1, 0, 1, None, np.ones(2)]
  for mod in (jnp, jjnp):
    ms += [mod.ones((), d) for d in ("float32", "bool", "bfloat16", "float16", "int32")]
    ms += [mod.array(5.9), mod.ones(2)]
  results = []
  for mod in (jnp, jjnp):
    fn = getattr(mod, name)
    out = []
    for m in ms:
      try:
        r = fn(m, 1.5) if name == "kaiser" else fn(m)
        out.append((str(r.dtype), r.shape, np.asarray(r).tolist()))
      except Exception as e:  # noqa: BLE001
        out.append((type(e).__name__, str(e)))
    results.append(out)
  sc, jx = results
  for m, a, b in zip(ms, sc, jx):
    if a[0] == "float32":
      assert a[:2] == b[:2], (m, a, b)
      np.testing.assert_allclose(a[2], b[2], rtol=1e-6, atol=1e-6)
    else:
      assert a == b, (m, a, b)


def test_window_size_traced_is_a_concretization_error():
  with pytest.raises(stagecraft.errors.ConcretizationTypeError) as e:
    stagecraft.jit(jnp.hamming)(4)
  with pytest.raises(jax.errors.ConcretizationTypeError) as je:
    jax.jit(jjnp.hamming)(4)
  # the first two lines are JAX's (the rest names the file and the remedy)
  assert str(e.value).splitlines()[:2] == str(je.value).splitlines()[:2]


# ---------------------------------------------------------------------------
# keras.ops.sum(sparse, axis, keepdims=True) (SparseTest.test_other_unary_sparse_correctness):
# bcoo_reduce_sum then bcoo_broadcast_in_dim back to the kept dimensions; new trailing
# dimensions of an operand without dense dimensions are sparse ones, as JAX's


def _bcoo(mod, shape, n_batch=0, n_dense=0, seed=0):
  rng = np.random.RandomState(seed)
  x = (rng.rand(*shape) * (rng.rand(*shape) > 0.5)).astype(np.float32)
  return mod.BCOO.fromdense(x, n_batch=n_batch, n_dense=n_dense)


def _layout(m):
  return (tuple(m.shape), m.n_batch, m.n_sparse, m.n_dense, m.nse, str(m.dtype),
          tuple(m.data.shape), tuple(m.indices.shape))


@pytest.mark.parametrize("case", [
    ((2,), 0, 0, (1, 2, 1), (1,)), ((2,), 0, 0, (2, 1), (0,)), ((2,), 0, 0, (2, 4), (0,)),
    ((3, 2), 0, 1, (1, 3, 2), (1, 2)), ((3, 2), 0, 1, (3, 2, 5), (0, 1)),
    ((3, 2), 0, 1, (3, 1, 2), (0, 2)), ((3, 2), 0, 1, (3, 4, 2), (0, 2)),
    ((3, 2), 1, 0, (3, 1, 2), (0, 2)), ((3, 2), 1, 0, (5, 3, 2), (1, 2)),
    ((3, 2), 1, 0, (3, 2, 1), (0, 1)), ((3, 2), 1, 0, (2, 3), (1, 0)),
    ((3, 2), 0, 0, (3, 1, 2), (0, 2)), ((4, 3), 1, 1, (4, 3, 1), (0, 1)),
    ((4, 1), 0, 0, (4, 5), (0, 1)),
])
def test_bcoo_broadcast_in_dim_layout(case):
  shape, nb, nd, out, bd = case

  def f(mod):
    r = mod.bcoo_broadcast_in_dim(_bcoo(mod, shape, nb, nd), shape=out,
                                  broadcast_dimensions=bd)
    return _layout(r), np.asarray(r.indices).tolist(), np.asarray(r.todense())
  a, b = _run(f, sparse), _run(f, jsparse)
  if isinstance(b[0], str):
    assert a == b
  else:
    assert a[:2] == b[:2]
    np.testing.assert_array_equal(a[2], b[2])


def test_sparse_sum_keepdims():
  # keras' backend.jax.numpy.sum of a BCOO with keepdims
  def f(mod, axes, out, bd):
    x = _bcoo(mod, (4, 2, 3))
    r = mod.bcoo_broadcast_in_dim(mod.bcoo_reduce_sum(x, axes=axes), shape=out,
                                  broadcast_dimensions=bd)
    return _layout(r), np.asarray(r.todense())
  for axes, out, bd in [((0, 2), (1, 2, 1), (1,)), ((1,), (4, 1, 3), (0, 2)),
                        ((0, 1, 2), (1, 1, 1), ()), ((2,), (4, 2, 1), (0, 1))]:
    a, b = f(sparse, axes, out, bd), f(jsparse, axes, out, bd)
    assert a[0] == b[0]
    np.testing.assert_allclose(a[1], b[1], rtol=1e-6)


# ---------------------------------------------------------------------------
# keras.ops.multiply of two sparse tensors (SparseTest.test_binary_correctness_indexed_slices
# _multiply_sparse_sparse_*): Keras' "indexed slices" are BCOOs with a dense dimension;
# bcoo_multiply_sparse takes dense dimensions, different batch layouts and broadcasting


@pytest.mark.parametrize("case", [
    ((3, 4), 0, 0, (3, 4), 0, 0), ((3, 4), 0, 1, (3, 4), 0, 1), ((3, 4), 0, 0, (3, 4), 1, 0),
    ((2, 3, 4), 1, 1, (2, 3, 4), 1, 1), ((3, 4), 0, 0, (1, 4), 0, 0),
    ((3, 4), 0, 1, (3, 1), 0, 1), ((1, 3, 4), 1, 0, (2, 3, 4), 1, 0),
    ((3, 4), 0, 0, (3, 4), 0, 1), ((3, 4), 0, 0, (4,), 0, 0), ((3, 4), 0, 0, (2, 4), 0, 0),
])
def test_bcoo_multiply_sparse_layouts(case):
  a_shape, nba, nda, b_shape, nbb, ndb = case

  def f(mod):
    x, y = _bcoo(mod, a_shape, nba, nda, 1), _bcoo(mod, b_shape, nbb, ndb, 2)
    r = mod.bcoo_multiply_sparse(x, y)
    out = [_layout(r), np.asarray(r.todense())]
    if nba + nbb == 0:  # unbatched: the stored elements are JAX's, in JAX's order
      out += [np.asarray(r.indices), np.asarray(r.data)]
    return out
  a, b = _run(f, sparse), _run(f, jsparse)
  if isinstance(b[0], str):
    assert a == b
    return
  assert a[0] == b[0]
  for u, v in zip(a[1:], b[1:]):
    np.testing.assert_allclose(u, v, rtol=1e-6)


def test_keras_indexed_slices_multiply():
  # keras.ops.multiply(x1, x2) for two BCOOs with a dense dimension, eagerly and under jit
  def f(mod, jit):
    x = mod.BCOO((np.array([[1., 2.], [3., 4.]], np.float32), np.array([[0], [2]], np.int32)),
                 shape=(3, 2))
    y = mod.BCOO((np.array([[5., 6.], [7., 8.]], np.float32), np.array([[2], [1]], np.int32)),
                 shape=(3, 2))
    r = jit(mod.bcoo_multiply_sparse)(x, y)
    return np.asarray(r.data), np.asarray(r.indices), np.asarray(r.todense())
  for a, b in zip(f(sparse, stagecraft.jit), f(jsparse, jax.jit)):
    np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------
# keras' JAX trainer distributes each batch element with
# `jax.make_array_from_process_local_data(layout, data)`, a None sample weight with a None
# layout (keras/src/backend/jax/trainer_test.py, DataParallel / ModelParallel); in one
# process JAX's function takes pytrees and places them with device_put


def test_make_array_from_process_local_data_single_process():
  x = np.arange(8.).reshape(4, 2).astype(np.float32)

  def cases(j):
    mesh = j.make_mesh((1,), ("d",))
    named = j.sharding.NamedSharding(mesh, j.sharding.PartitionSpec("d"))
    return [(None, None, None), ((None, None), (None, None), None), (named, x, None),
            (named, [x, {"a": x}], None), ([named, None], [x, None], None),
            (named, x, (4, 2)), (named, [x, x], [(4, 2), None]), (named, x, (8, 2)),
            (None, x, None), (None, {"a": x, "b": (x, x)}, None), ([None, None], [x, x], None),
            (named, x[None, None], None), (j.devices()[0], x, None), (None, 3.0, None)]

  def run(j):
    out = []
    for sh, data, gs in cases(j):
      try:
        r = j.make_array_from_process_local_data(sh, data, gs)
        out.append(j.tree_util.tree_map(
            lambda a: (isinstance(a, j.Array), a.shape, str(a.dtype), str(a.sharding),
                       np.asarray(a).tolist()), r))
      except Exception as e:  # noqa: BLE001
        out.append((type(e).__name__, str(e)))
    return out
  a, b = run(stagecraft), run(jax)
  for u, v in zip(a, b):
    assert u == v


# ---------------------------------------------------------------------------
# jax.debug.inspect_array_sharding in a Keras layer's call (distribution_lib_test): eagerly it
# calls back with the Array's sharding, as JAX's; a traced value (tracers are Arrays to
# isinstance) is the documented NotImplementedError, not an AttributeError of the tracer


def test_inspect_array_sharding_eager_and_traced():
  got = {}
  for name, j, mod in (("sc", stagecraft, jnp), ("jax", jax, jjnp)):
    seen = []
    j.debug.inspect_array_sharding({"a": mod.ones((2, 3)), "b": [mod.zeros(4)]},
                                   callback=seen.append)
    got[name] = [(str(s), s.is_fully_replicated) for s in seen]
  assert got["sc"] == got["jax"]
  # traced: called back while the jit compiles (a one-device, fully replicated sharding)
  for name, j, mod in (("sc", stagecraft, jnp), ("jax", jax, jjnp)):
    seen = []
    j.jit(lambda x: j.debug.inspect_array_sharding(x, callback=seen.append) or x)(mod.ones(3))
    got[name] = [(len(s.device_set), s.is_fully_replicated) for s in seen]
  assert got["sc"] == got["jax"] == [(1, True)]
