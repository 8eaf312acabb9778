"""Structural operations on typed PRNG keys stage key-typed equations, as JAX's: the printed
jaxprs of `where`, `stack`, `concatenate`, `take`, reshapes, `select_n`, `dynamic_slice`,
`.at[].set`, `==`, `zeros_like`, ... of `key<fry>` arrays equal JAX 0.10.2's byte for byte
(no `random_unwrap`/`random_wrap` around u32 operations), their values (key data) under
eager, jit and vmap equal JAX's, and the functions JAX's keys reject raise JAX's exception
type and text. Each test runs the same code on JAX and on stagecraft."""
import types

import jax
import numpy as np
import pytest

import stagecraft as sc

J = types.SimpleNamespace(np=jax.numpy, lax=jax.lax, random=jax.random, jit=jax.jit,
                          vmap=jax.vmap, make_jaxpr=jax.make_jaxpr, dtypes=jax.dtypes)
S = types.SimpleNamespace(np=sc.numpy, lax=sc.lax, random=sc.random, jit=sc.jit,
                          vmap=sc.vmap, make_jaxpr=sc.make_jaxpr, dtypes=sc.dtypes)


def _keys(m, shape):
  """Distinct keys of `shape` (a fold of the first set for the second)."""
  n = int(np.prod(shape))
  a = m.random.split(m.random.key(0), max(n, 1))
  b = m.vmap(m.random.fold_in, (0, None))(a, 7)
  return (a[0], b[0]) if shape == () else (a.reshape(shape), b.reshape(shape))


def _cond(m, shape):
  return (m.np.arange(int(np.prod(shape))).reshape(shape) % 2 == 0) if shape else (
      m.np.array(False))


def _show(m, v):
  if isinstance(v, (list, tuple)):
    return [_show(m, x) for x in v]
  if m.np.issubdtype(v.dtype, m.dtypes.prng_key):
    return ("keys", tuple(v.shape), np.asarray(m.random.key_data(v)).tolist())
  return (str(v.dtype), tuple(v.shape), np.asarray(v).tolist())


# name -> (function of (m, shape) giving (fun, args))
CASES = {
    "where": lambda m, s: (lambda c, a, b: m.np.where(c, a, b), (_cond(m, s), *_keys(m, s))),
    "select_n": lambda m, s: (lambda c, a, b: m.lax.select_n(c, a, b),
                              (_cond(m, s), *_keys(m, s))),
    "select": lambda m, s: (lambda c, a, b: m.lax.select(c, a, b), (_cond(m, s), *_keys(m, s))),
    "stack": lambda m, s: (lambda a, b: m.np.stack([a, b], axis=-1), _keys(m, s)),
    "concatenate": lambda m, s: (lambda a, b: m.np.concatenate([a, b], axis=-1), _keys(m, s)),
    "lax_concatenate": lambda m, s: (lambda a, b: m.lax.concatenate([a, b], 0), _keys(m, s)),
    "take": lambda m, s: (lambda a: m.np.take(a, m.np.array([1, 0, 1])), _keys(m, s)[:1]),
    "take_along_axis": lambda m, s: (
        lambda a: m.np.take_along_axis(a, m.np.zeros(s, int), axis=-1), _keys(m, s)[:1]),
    "flip": lambda m, s: (lambda a: m.np.flip(a), _keys(m, s)[:1]),
    "roll": lambda m, s: (lambda a: m.np.roll(a, 1, axis=-1), _keys(m, s)[:1]),
    "tile": lambda m, s: (lambda a: m.np.tile(a, 2), _keys(m, s)[:1]),
    "repeat": lambda m, s: (lambda a: m.np.repeat(a, 2, axis=0), _keys(m, s)[:1]),
    "reshape": lambda m, s: (lambda a: m.np.reshape(a, (-1, 1)), _keys(m, s)[:1]),
    "method_reshape": lambda m, s: (lambda a: a.reshape(-1), _keys(m, s)[:1]),
    "ravel": lambda m, s: (lambda a: a.ravel(), _keys(m, s)[:1]),
    "transpose": lambda m, s: (lambda a: m.np.transpose(a), _keys(m, s)[:1]),
    "method_T": lambda m, s: (lambda a: a.T, _keys(m, s)[:1]),
    "swapaxes": lambda m, s: (lambda a: m.np.swapaxes(a, 0, -1), _keys(m, s)[:1]),
    "squeeze": lambda m, s: (lambda a: m.lax.squeeze(a[None], (0,)), _keys(m, s)[:1]),
    "expand_dims": lambda m, s: (lambda a: m.np.expand_dims(a, 0), _keys(m, s)[:1]),
    "broadcast_to": lambda m, s: (lambda a: m.np.broadcast_to(a, (2, *s)), _keys(m, s)[:1]),
    "broadcast_in_dim": lambda m, s: (
        lambda a: m.lax.broadcast_in_dim(a, (2, *s), tuple(range(1, len(s) + 1))),
        _keys(m, s)[:1]),
    "rev": lambda m, s: (lambda a: m.lax.rev(a, (0,)), _keys(m, s)[:1]),
    "dynamic_slice": lambda m, s: (
        lambda a, i: m.lax.dynamic_slice(a, (i,) + (0,) * (len(s) - 1), (1, *s[1:])),
        (_keys(m, s)[0], np.int32(1))),
    "dynamic_index_in_dim": lambda m, s: (
        lambda a, i: m.lax.dynamic_index_in_dim(a, i, 0, False), (_keys(m, s)[0], np.int32(1))),
    "dynamic_update_slice": lambda m, s: (
        lambda a, b, i: m.lax.dynamic_update_slice(a, b[:1], (i,) + (0,) * (len(s) - 1)),
        (*_keys(m, s), np.int32(1))),
    "dynamic_update_index_in_dim": lambda m, s: (
        lambda a, b, i: m.lax.dynamic_update_index_in_dim(a, b[0], i, 0),
        (*_keys(m, s), np.int32(1))),
    "at_get": lambda m, s: (lambda a: a.at[m.np.array([1, 0])].get(), _keys(m, s)[:1]),
    "at_set": lambda m, s: (lambda a, b: a.at[1].set(b[0]), _keys(m, s)),
    "copy": lambda m, s: (lambda a: m.np.copy(a), _keys(m, s)[:1]),
    "method_copy": lambda m, s: (lambda a: a.copy(), _keys(m, s)[:1]),
    "array": lambda m, s: (lambda a: m.np.array(a), _keys(m, s)[:1]),
    "equal": lambda m, s: (lambda a, b: m.np.equal(a, b), _keys(m, s)),
    "eq_self": lambda m, s: (lambda a: a == a, _keys(m, s)[:1]),
    "ne": lambda m, s: (lambda a, b: a != b, _keys(m, s)),
    "array_equal": lambda m, s: (lambda a, b: m.np.array_equal(a, b), _keys(m, s)),
    "zeros_like": lambda m, s: (lambda a: m.np.zeros_like(a), _keys(m, s)[:1]),
    "ones_like": lambda m, s: (lambda a: m.np.ones_like(a), _keys(m, s)[:1]),
    "full_like": lambda m, s: (lambda a, b: m.np.full_like(a, b), _keys(m, s)),
}
SHAPED = {"take", "take_along_axis", "flip", "roll", "tile", "repeat", "reshape",
          "method_reshape", "ravel", "transpose", "method_T", "swapaxes", "squeeze",
          "lax_concatenate", "concatenate", "rev", "dynamic_slice", "dynamic_index_in_dim",
          "dynamic_update_slice", "dynamic_update_index_in_dim", "at_get", "at_set"}
JAXPR_CASES = [(n, s) for n in CASES for s in ((), (2, 3)) if s or n not in SHAPED]


@pytest.mark.parametrize("name,shape", JAXPR_CASES, ids=[f"{n}-{s}" for n, s in JAXPR_CASES])
def test_jaxpr_is_jaxs(name, shape):
  """The printed jaxpr of the operation on keys of `shape` is JAX's, byte for byte."""
  want = str(J.make_jaxpr(CASES[name](J, shape)[0])(*CASES[name](J, shape)[1]))
  got = str(S.make_jaxpr(CASES[name](S, shape)[0])(*CASES[name](S, shape)[1]))
  assert "random_unwrap" not in got or "random_unwrap" in want
  assert got == want


VALUE_CASES = ["where", "stack", "take", "transpose", "dynamic_update_slice", "at_set", "ne",
               "full_like"]


@pytest.mark.parametrize("name", VALUE_CASES)
def test_values_are_jaxs(name):
  """Eager, jitted and vmapped (over a stack of the arguments) results equal JAX's: keys of
  the same key data, or the same bools."""
  def run(m):
    fun, args = CASES[name](m, (2, 3))
    return [_show(m, fun(*args)), _show(m, m.jit(fun)(*args)),
            _show(m, m.vmap(fun)(*[m.np.stack([a, a]) for a in args]))]
  assert run(S) == run(J)


def test_results_are_key_arrays():
  """The results are typed key arrays (traced too: the equations' outputs are keys)."""
  a, b = _keys(S, (3,))
  for out in (S.np.where(_cond(S, (3,)), a, b), S.lax.concatenate([a, b], 0),
              S.jit(lambda x: S.np.flip(x))(a)):
    assert isinstance(out, sc.random.PRNGKeyArray) and str(out.dtype) == "key<fry>"
  seen = []
  S.jit(lambda x, y: seen.append(type(S.np.stack([x, y]))))(a, b)
  assert seen == [sc.random.PRNGKeyArray]


ERROR_CASES = {
    "astype": lambda m, k: k.astype(m.np.float32),
    "sum": lambda m, k: k.sum(),
    "mean": lambda m, k: k.mean(),
    "negative": lambda m, k: m.np.negative(k),
    "lax_add": lambda m, k: m.lax.add(k, k),
    "lax_neg": lambda m, k: m.lax.neg(k),
    "lax_lt": lambda m, k: m.lax.lt(k, k),
    "select_mixed": lambda m, k: m.lax.select(m.np.array([True, False, True]), k,
                                              m.np.zeros((3, 2), m.np.uint32)),
    "where_mixed": lambda m, k: m.np.where(True, k, 0),
    "where_one_arg": lambda m, k: m.np.where(k),
    "convert": lambda m, k: m.lax.convert_element_type(k, m.np.int32),
}


def _error(m, fn, traced):
  k = _keys(m, (3,))[0]
  try:
    if traced:
      m.make_jaxpr(lambda x: fn(m, x))(k)
    else:
      fn(m, k)
  except Exception as e:   # NB: compared between the two libraries
    return type(e).__name__, str(e)
  return None


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "traced"])
@pytest.mark.parametrize("name", list(ERROR_CASES))
def test_errors_are_jaxs(name, traced):
  """Operations JAX's keys reject raise JAX's exception type and message (eagerly and while
  tracing, where JAX's differ)."""
  want = _error(J, ERROR_CASES[name], traced)
  assert want is not None
  assert _error(S, ERROR_CASES[name], traced) == want


REUSE_OPS = {
    "where": lambda m, a, b: m.np.where(True, a, b),
    "select_n": lambda m, a, b: m.lax.select_n(m.np.array(True), a, b),
    "stack": lambda m, a, b: m.np.stack([a, b]),
    "concatenate": lambda m, a, b: m.np.concatenate([a[None], b[None]]),
    "broadcast_to": lambda m, a, b: m.np.broadcast_to(a, (2,)),
    "take": lambda m, a, b: m.np.take(a[None], m.np.array([0])),
    "dynamic_update_slice": lambda m, a, b: m.lax.dynamic_update_slice(a[None], b[None],
                                                                      (0,)),
    "flip": lambda m, a, b: m.np.flip(a[None]),
    "at_set": lambda m, a, b: a[None].at[0].set(b),
}


@pytest.mark.parametrize("name", list(REUSE_OPS))
def test_key_reuse_is_jaxs(name):
  """With debug_key_reuse, the operations follow JAX's key reuse signatures (forwarding
  ops share their operand's state, select_n/stack/rev consume their key operands and give
  consumed keys, concatenate consumes them and gives fresh keys, the updates of
  dynamic_update_slice/scatter are consumed): a consumed key
  given to them, a key used after them, and their result used with their operand raise
  JAX's error or pass, eagerly and under jit."""
  op = REUSE_OPS[name]

  def run(m):
    out = []
    patterns = (lambda a, b: (m.random.normal(b), op(m, a, b)),
                lambda a, b: (op(m, a, b), m.random.normal(a), m.random.normal(b)),
                lambda a, b: (m.random.normal(op(m, a, b).reshape(-1)[0]), m.random.normal(a)))
    with _reuse(m):
      for g in patterns:
        for h in (g, m.jit(g)):
          try:
            h(m.random.key(0), m.random.key(1))
            out.append("ok")
          except Exception as e:   # NB: compared between the two libraries
            out.append((type(e).__name__, str(e).splitlines()[0]))
    return out
  assert run(S) == run(J)


def _reuse(m):
  return (jax.debug_key_reuse if m is J else sc.debug_key_reuse)(True)


def test_sharded_keys():
  """Key-typed operations on keys sharded over a mesh of Explicit axes (a sharding in their
  type, constrained on the key data with its trailing axis unsharded) give JAX's keys and
  result sharding."""
  def run(m):
    mesh = m.make_mesh((4,), ("x",))
    ks = m.device_put(_keys(m, (2, 4))[0],
                      m.sharding.NamedSharding(mesh, m.sharding.PartitionSpec(None, "x")))
    cat = m.jit(lambda a: m.np.concatenate([a, a]))(ks)
    out = [_show(m, cat), str(cat.sharding)]
    out.append(_show(m, m.jit(lambda a: m.np.broadcast_to(a, (3, 2, 4)))(ks)))
    out.append(_show(m, m.jit(lambda a: a == a[::-1])(ks)))
    return out
  S.make_mesh, S.device_put, S.sharding = sc.make_mesh, sc.device_put, sc.sharding
  J.make_mesh, J.device_put, J.sharding = jax.make_mesh, jax.device_put, jax.sharding
  assert run(S) == run(J)


def test_array_equal_jaxpr_is_jaxs():
  """`array_equal` is one `reduce_and` over every axis of the comparison (JAX's
  `jnp.all`), for numbers as for keys (whose data it does not unwrap)."""
  for args in [(1.0, 2.0), (np.ones((2, 3), np.float32), np.zeros((2, 3), np.float32))]:
    assert (str(S.make_jaxpr(S.np.array_equal)(*args))
            == str(J.make_jaxpr(J.np.array_equal)(*args)))
