"""The shape ops' batching rules and broadcast_in_dim's transpose print as JAX 0.10.2's.

* vmap of `squeeze`, `reshape`, `expand_dims`, `broadcast_in_dim`, `broadcast`, `transpose`,
  `rev`, `pad`, `concatenate`, `slice`, `split`, `collapse`, `select_n` and `clamp` with the
  batch axis first, second and last, unbatched operands mixed in, nested vmaps and
  `out_axes`: the printed jaxpr equals JAX's and the values equal a per-example loop.
  (JAX's squeeze rule moves the batch axis to the front before squeezing.)
* broadcast_in_dim's transpose: size-1 operand dimensions come back by `expand_dims` (a
  broadcast_in_dim), and the identity broadcast that `linear_transpose` stages (as JAX's
  partial evaluation does; `lax.shape.recording_identity_broadcasts`) transposes to
  `reduce_sum[axes=()]`.
"""
from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest

import stagecraft as sc
from stagecraft import core
from stagecraft.lax import shape as lax_shape

f32 = np.float32


def _arr(*shape):
  return (np.arange(int(np.prod(shape)), dtype=f32).reshape(shape) / 7 + 0.5)


def _batched(shape, bdim, n=3):
  """An array for one operand of per-example `shape`, batched (size n) at `bdim`."""
  if bdim is None:
    return _arr(*shape)
  s = list(shape)
  s.insert(bdim, n)
  return _arr(*s)


# name -> (function of the lax module, per-example operand shapes)
OPS = {
    "squeeze_middle": (lambda L: lambda x: L.squeeze(x, (1,)), [(3, 1, 3)]),
    "squeeze_two": (lambda L: lambda x: L.squeeze(x, (0, 2)), [(1, 4, 1, 5)]),
    "squeeze_negative": (lambda L: lambda x: L.squeeze(x, (-1,)), [(4, 1)]),
    "squeeze_none": (lambda L: lambda x: L.squeeze(x, ()), [(4, 2)]),
    "reshape": (lambda L: lambda x: L.reshape(x, (6, 2)), [(3, 4)]),
    "reshape_dimensions": (lambda L: lambda x: L.reshape(x, (6, 2), (1, 0)), [(3, 4)]),
    "expand_dims": (lambda L: lambda x: L.expand_dims(x, (0, 2)), [(3, 4)]),
    "expand_dims_last": (lambda L: lambda x: L.expand_dims(x, (-1,)), [(3, 4)]),
    "broadcast_in_dim": (lambda L: lambda x: L.broadcast_in_dim(x, (3, 2, 4), (0, 2)),
                         [(3, 4)]),
    "broadcast_in_dim_unit": (lambda L: lambda x: L.broadcast_in_dim(x, (2, 3, 4), (0, 2)),
                              [(1, 4)]),
    "broadcast": (lambda L: lambda x: L.broadcast(x, (2,)), [(3, 4)]),
    "transpose": (lambda L: lambda x: L.transpose(x, (1, 0, 2)), [(2, 3, 4)]),
    "rev": (lambda L: lambda x: L.rev(x, (0, 2)), [(2, 3, 4)]),
    "pad": (lambda L: lambda x, v: L.pad(x, v, ((1, 2, 1), (0, -1, 0))), [(3, 4), ()]),
    "concatenate": (lambda L: lambda x, y: L.concatenate([x, y, x], 1), [(2, 3), (2, 2)]),
    "concatenate_0": (lambda L: lambda x, y: L.concatenate([x, y], 0), [(2, 3), (1, 3)]),
    "slice": (lambda L: lambda x: L.slice(x, (1, 0), (3, 4), (1, 2)), [(3, 4)]),
    "split": (lambda L: lambda x: L.split(x, (1, 2), 1), [(2, 3)]),
    "collapse": (lambda L: lambda x: L.collapse(x, 0, 2), [(2, 3, 4)]),
    "squeeze_of_expand_dims": (lambda L: lambda x: L.squeeze(L.expand_dims(x, (1,)), (1,)),
                               [(3, 4)]),
    "select_n": (lambda L: lambda p, x, y: L.select_n(p > 1.0, x, y),
                 [(3, 4), (3, 4), (3, 4)]),
    "clamp_scalar_bounds": (lambda L: lambda lo, x, hi: L.clamp(lo, x, hi), [(), (3, 4), ()]),
    "clamp": (lambda L: lambda lo, x, hi: L.clamp(lo, x, hi), [(3, 4), (3, 4), (3, 4)]),
}


def _axes_choices(shapes):
  """Per operand: batch axis first, second (rank >= 2), last, and unbatched (several
  operands); every combination but the all-unbatched one."""
  opts = []
  for s in shapes:
    o = [0, len(s)]
    if len(s) >= 2:
      o.insert(1, 1)
    if len(shapes) > 1:
      o.append(None)
    opts.append(o)
  return [ax for ax in itertools.product(*opts) if any(a is not None for a in ax)]


def _loop(f, args, in_axes, n=3):
  """`vmap(f, in_axes)(*args)` by a Python loop over the examples (NumPy arrays out)."""
  outs = []
  for i in range(n):
    ex = [a if ax is None else np.take(a, i, axis=ax) for a, ax in zip(args, in_axes)]
    outs.append(f(*ex))
  if isinstance(outs[0], (list, tuple)):
    return [np.stack([np.asarray(o[k]) for o in outs]) for k in range(len(outs[0]))]
  return np.stack([np.asarray(o) for o in outs])


@pytest.mark.parametrize("name", sorted(OPS))
def test_vmap_prints_as_jax(name):
  fn, shapes = OPS[name]
  for in_axes in _axes_choices(shapes):
    args = [_batched(s, a) for s, a in zip(shapes, in_axes)]
    theirs = jax.make_jaxpr(jax.vmap(fn(jax.lax), in_axes))(*args)
    ours = sc.make_jaxpr(sc.vmap(fn(sc.lax), in_axes))(*args)
    assert str(ours) == str(theirs), (name, in_axes)


@pytest.mark.parametrize("name", sorted(OPS))
def test_vmap_values(name):
  fn, shapes = OPS[name]
  for in_axes in _axes_choices(shapes):
    args = [_batched(s, a) for s, a in zip(shapes, in_axes)]
    got = sc.vmap(fn(sc.lax), in_axes)(*args)
    want = _loop(fn(sc.lax), args, in_axes)
    for g, w in zip(*((got, want) if isinstance(got, (list, tuple)) else ([got], [want]))):
      np.testing.assert_array_equal(np.asarray(g), w, err_msg=f"{name} {in_axes}")


@pytest.mark.parametrize("f,shape,in_axes,out_axes", [
    (lambda L: lambda x: L.squeeze(x, (1,)), (3, 1, 3), 2, 1),
    (lambda L: lambda x: L.squeeze(x, (0,)), (1, 5), 2, 1),   # two transposes, as JAX
    (lambda L: lambda x: L.squeeze(x, (0,)), (1, 5), 0, -1),
    (lambda L: lambda x: L.expand_dims(x, (1,)), (4, 5), 1, 2),
    (lambda L: lambda x: L.rev(x, (0,)), (4, 5), 1, 0),
    (lambda L: lambda x: L.reshape(x, (20,)), (4, 5), 2, 1),
])
def test_vmap_out_axes_prints_as_jax(f, shape, in_axes, out_axes):
  x = _batched(shape, in_axes)
  theirs = jax.make_jaxpr(jax.vmap(f(jax.lax), in_axes, out_axes))(x)
  ours = sc.make_jaxpr(sc.vmap(f(sc.lax), in_axes, out_axes))(x)
  assert str(ours) == str(theirs)
  want = np.moveaxis(_loop(f(sc.lax), [x], [in_axes]), 0, out_axes)
  np.testing.assert_array_equal(np.asarray(sc.vmap(f(sc.lax), in_axes, out_axes)(x)), want)


@pytest.mark.parametrize("f,shape", [
    (lambda L: lambda x: L.squeeze(x, (1,)), (3, 1, 3)),
    (lambda L: lambda x: L.expand_dims(x, (0,)), (3, 2)),
    (lambda L: lambda x: L.pad(x, f32(0), ((1, 0, 1), (0, 1, 0))), (3, 2)),
    (lambda L: lambda x: L.concatenate([x, x], 1), (3, 2)),
])
def test_nested_vmap_prints_as_jax(f, shape):
  """Two batch axes (inner at the last axis, outer at axis 1)."""
  x = _arr(*shape, 2, 4)
  x = np.moveaxis(x, -1, 1)   # outer batch (4) at 1, inner (2) last
  nest = lambda m: m.vmap(m.vmap(f(m.lax), -1), 1)   # noqa: E731
  assert str(sc.make_jaxpr(nest(sc))(x)) == str(jax.make_jaxpr(nest(jax))(x))
  np.testing.assert_array_equal(np.asarray(nest(sc)(x)), np.asarray(nest(jax)(x)))


def test_squeeze_batch_rule_moves_batch_axis_to_front():
  """The brief's reproducer: JAX prints `transpose[(2, 0, 1)]; squeeze[(2,)]`."""
  x = np.ones((3, 1, 3), f32)
  jaxpr = sc.make_jaxpr(sc.vmap(lambda x: sc.lax.squeeze(x, (1,)), 2))(x)
  assert [e.primitive.name for e in jaxpr.jaxpr.eqns] == ["transpose", "squeeze"]
  assert jaxpr.jaxpr.eqns[0].params["permutation"] == (2, 0, 1)
  assert jaxpr.jaxpr.eqns[1].params["dimensions"] == (2,)
  assert all(type(d) is int for d in jaxpr.jaxpr.eqns[1].params["dimensions"])


# ---------------------------------------------------------------------------
# broadcast_in_dim's transpose and linear_transpose's identity broadcasts

V = np.arange(4, dtype=f32) + 1
M = np.arange(6, dtype=f32).reshape(2, 3) + 1
A3 = (np.arange(9, dtype=f32).reshape(3, 3) / 5 + np.eye(3, dtype=f32))


def _lt(m, f):
  """`x -> linear_transpose(f, x)(x)` with library `m`."""
  return lambda x: m.linear_transpose(f(m), x)(x)


GRADS = {
    "unit_dim": (lambda m: m.grad(lambda x: m.lax.broadcast_in_dim(x, (3, 4), (0, 1)).sum()),
                 np.ones((1, 4), f32)),
    "unit_dims_new_axis": (lambda m: m.grad(
        lambda x: (m.lax.broadcast_in_dim(x, (2, 3, 4, 5), (0, 2, 3)) ** 2).sum()),
        _arr(1, 4, 1)),
    "expand_dims": (lambda m: m.grad(lambda x: (m.lax.expand_dims(x, (0, 2)) * 2.0).sum()),
                    _arr(3, 4)),
    "broadcast": (lambda m: m.grad(lambda x: m.numpy.sin(m.lax.broadcast(x, (2,))).sum()),
                  _arr(3)),
}

LINEAR = {
    # JAX's linear_transpose records the identity broadcast of its input; its transpose is
    # a reduce_sum over no axes.
    "identity": (lambda m: lambda y: m.lax.broadcast_in_dim(y, (4,), (0,)) * 3.0, V),
    "identity_2d": (lambda m: lambda y: m.lax.broadcast_in_dim(y, (2, 3), (0, 1)) + y, M),
    "expand_dims_none": (lambda m: lambda y: m.lax.expand_dims(y, ()), V),
    "two_uses": (lambda m: lambda y: (m.lax.broadcast_in_dim(y, (4,), (0,))
                                      + m.lax.broadcast_in_dim(-y, (4,), (0,))), V),
    # The batched matvec of jnp.linalg.solve (lax.linalg's `_broadcasted_matvec`): the
    # constant matrix's identity broadcast is forwarded, the input's is recorded.
    "solve_matvec": (lambda m: lambda y: m.lax.dot_general(
        m.lax.broadcast_in_dim(m.numpy.asarray(A3), (3, 3), (0, 1)),
        m.lax.broadcast_in_dim(y, (3,), (0,)), (((1,), (0,)), ((), ())),
        precision=m.lax.Precision.HIGHEST), V[:3]),
    # Not recorded, as JAX: a rank-0 identity, jnp.broadcast_to and reshape to the same
    # shape (no broadcast_in_dim bound), a broadcast of a constant.
    "scalar": (lambda m: lambda y: m.lax.broadcast_in_dim(y, (), ()) * 2.0, f32(3)),
    "broadcast_to_same": (lambda m: lambda y: m.numpy.broadcast_to(y, (4,)), V),
    "reshape_same": (lambda m: lambda y: m.lax.reshape(y, (4,)), V),
    "mul_literal": (lambda m: lambda y: 2.0 * y, V),
}


@pytest.mark.parametrize("name", sorted(GRADS))
def test_broadcast_in_dim_transpose_prints_as_jax(name):
  mk, x = GRADS[name]
  assert str(sc.make_jaxpr(mk(sc))(x)) == str(jax.make_jaxpr(mk(jax))(x))
  np.testing.assert_allclose(np.asarray(mk(sc)(x)), np.asarray(mk(jax)(x)), rtol=1e-6)


@pytest.mark.parametrize("name", sorted(LINEAR))
def test_linear_transpose_prints_as_jax(name):
  f, x = LINEAR[name]
  assert str(sc.make_jaxpr(_lt(sc, f))(x)) == str(jax.make_jaxpr(_lt(jax, f))(x))
  np.testing.assert_allclose(np.asarray(_lt(sc, f)(x)), np.asarray(_lt(jax, f)(x)),
                             rtol=1e-6)


def test_linear_transpose_identity_broadcast_of_constant_not_recorded():
  """A broadcast of a value that depends only on constants is forwarded (JAX evaluates it
  before staging), even when it is a tracer of the linear function's trace."""
  f = lambda m: lambda x: m.linear_transpose(  # noqa: E731
      lambda y: y * m.lax.broadcast_in_dim(x * 2, (4,), (0,)), x)(x)
  ours = sc.make_jaxpr(f(sc))(V)
  assert str(ours) == str(jax.make_jaxpr(f(jax))(V))
  assert "reduce_sum" not in str(ours) and "broadcast_in_dim" not in str(ours)


def test_transposed_identity_broadcast_value_and_derivatives():
  t = sc.linear_transpose(lambda y: sc.lax.broadcast_in_dim(y, (2, 3), (0, 1)) * 2.0, M)
  np.testing.assert_array_equal(np.asarray(t(M)[0]), 2 * M)
  g = sc.grad(lambda c: sc.numpy.sum(t(c)[0] ** 2))(M)
  np.testing.assert_allclose(np.asarray(g), 8 * M, rtol=1e-6)
  with sc.enable_x64():
    m64 = M.astype(np.float64)
    t = sc.linear_transpose(lambda y: sc.lax.broadcast_in_dim(y, (2, 3), (0, 1)), m64)
    out = t(m64)[0]
    assert out.dtype == np.float64
    np.testing.assert_array_equal(np.asarray(out), m64)


def _staged(fun, x):
  """The primitives of `fun` traced at `x` with identity broadcasts of `x` recorded."""
  def flat(y):
    with lax_shape.recording_identity_broadcasts(core.current_trace()):
      return fun(y)
  return [e.primitive.name for e in sc.make_jaxpr(flat)(x).jaxpr.eqns]


def test_recording_identity_broadcasts_scope():
  bid = lambda y: sc.lax.broadcast_in_dim(y, (4,), (0,))   # noqa: E731
  assert _staged(bid, V) == ["broadcast_in_dim"]
  assert _staged(lambda y: bid(y * 2.0), V) == ["mul", "broadcast_in_dim"]
  # Not recorded: outside the context, constants, rank 0, another (inner) trace.
  assert [e.primitive.name for e in sc.make_jaxpr(bid)(V).jaxpr.eqns] == []
  assert _staged(lambda y: y + bid(sc.numpy.asarray(V)), V) == ["add"]
  assert _staged(lambda y: sc.lax.broadcast_in_dim(y, (), ()), f32(1)) == []
  jitted = _staged(lambda y: sc.jit(bid)(y), V)
  assert jitted == ["jit"]
  inner = sc.make_jaxpr(lambda y: sc.jit(bid)(y))(V).jaxpr.eqns[0].params["jaxpr"]
  assert not inner.jaxpr.eqns
  # The context ends with the trace: the same function afterwards is not recorded.
  assert [e.primitive.name for e in sc.make_jaxpr(bid)(V).jaxpr.eqns] == []
