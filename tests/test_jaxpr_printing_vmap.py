"""vmap, jacfwd/jacrev/hessian and grad jaxprs print as JAX 0.10.2's, with the same values.

Covers JAX's broadcast batcher (unbatched operands get a leading size-1 batch dim, batch dims
move to the front unless every operand is batched alike), the NumPy ints JAX's batching and
transpose rules leave in params (`broadcast_dimensions=(np.int64(1),)`, `axes=(np.int64(1),)`,
padding configs), the `split` primitive cutting the Jacobians' basis and results, squeeze's
transpose (a broadcast_in_dim), reduce_max's JVP and reshape's `dimensions` param; and
`lax.split` itself (shapes, errors, derivatives, batching, lowering).
"""
from __future__ import annotations

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import lax
from stagecraft.test_util import check_grads

SC = (sc, jnp)
JAX = (jax, jjnp)


def f32(*shape):
  return (np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) / 7 + 0.5)


def _mlp_loss(np_):
  def loss(params, x, y):
    w1, b1, w2 = params
    h = np_.tanh(x @ w1 + b1)
    return np_.sum((h @ w2 - y) ** 2)
  return loss


#: name -> m -> (function, args); `m` is (library, numpy module).
PROGRAMS = {
    "vmap_mul_unbatched": lambda m: (m[0].vmap(lambda x, y: x * y, (0, None)),
                                     (f32(3, 2), f32(2))),
    "vmap_in_axes_1": lambda m: (m[0].vmap(lambda x, y: x * y, (1, None)),
                                 (f32(2, 3), f32(2))),
    "vmap_sum_mul_unbatched": lambda m: (m[0].vmap(lambda x, y: m[1].sum(x * y), (0, None)),
                                         (f32(3, 2), f32(2))),
    "vmap_same_bdims": lambda m: (m[0].vmap(lambda x, y: m[1].sin(x) + y, (1, 1)),
                                  (f32(2, 3), f32(2, 3))),
    "vmap_different_bdims": lambda m: (m[0].vmap(lambda x, y: x - y, (1, 0)),
                                       (f32(2, 3), f32(3, 2))),
    "vmap_batched_scalar": lambda m: (m[0].vmap(lambda x, s: x * s, (0, 0)),
                                      (f32(3, 2), f32(3))),
    "vmap_unbatched_scalar": lambda m: (m[0].vmap(lambda x: x * 2.0 + 1.0), (f32(3, 2),)),
    "vmap_pow_unbatched": lambda m: (m[0].vmap(lambda x, y: m[0].lax.pow(x, y), (0, None)),
                                     (f32(3, 2), f32(2))),
    "vmap_where": lambda m: (m[0].vmap(lambda x, y: m[1].where(x > 1.0, x, y), (0, None)),
                             (f32(3, 2), f32(2))),
    "vmap_clamp": lambda m: (m[0].vmap(lambda x, y: m[0].lax.clamp(0.5, x, y), (0, None)),
                             (f32(3, 2), f32(2))),
    "vmap_concatenate": lambda m: (m[0].vmap(lambda x, y: m[0].lax.concatenate([x, y], 0),
                                             (1, None)), (f32(2, 3), f32(2))),
    "vmap_stack_unbatched": lambda m: (m[0].vmap(lambda x, y: m[1].stack([x, y]), (0, None)),
                                       (f32(4, 3), f32(3))),
    "vmap_broadcast_in_dim": lambda m: (
        m[0].vmap(lambda x: m[0].lax.broadcast_in_dim(x, (2, 4), (1,)), in_axes=1),
        (f32(4, 3),)),
    "vmap_argmax": lambda m: (m[0].vmap(lambda x: m[1].argmax(x)), (f32(3, 4),)),
    "per_example_grads": lambda m: (
        m[0].vmap(m[0].grad(_mlp_loss(m[1])), in_axes=(None, 0, 0)),
        ((f32(3, 4), f32(4), f32(4, 2)), f32(5, 3), f32(5, 2))),
    "jacfwd_small": lambda m: (m[0].jacfwd(lambda x: m[1].sin(x) * x[0]), (f32(2),)),
    "jacrev_small": lambda m: (m[0].jacrev(lambda x: m[1].sin(x) * x[0]), (f32(2),)),
    "jacrev_two_outputs": lambda m: (m[0].jacrev(lambda x: (x, x[:1] * 2.0)), (f32(2),)),
    "jacfwd_two_inputs": lambda m: (m[0].jacfwd(lambda x, y: m[1].sum(m[1].sin(x)) * y,
                                                argnums=(0, 1)), (f32(2), f32(3))),
    "jacrev_matrix": lambda m: (m[0].jacrev(lambda x: m[1].tanh(x @ x)), (f32(2, 2),)),
    "hessian_small": lambda m: (m[0].hessian(lambda x: m[1].sum(m[1].sin(x) * x[0])),
                                (f32(3),)),
    "grad_max": lambda m: (m[0].grad(lambda x: m[1].max(x)), (f32(4),)),
    "grad_max_axis": lambda m: (m[0].grad(lambda x: m[1].sum(m[1].max(x, axis=1))),
                                (f32(2, 3),)),
    "grad_sum_axis": lambda m: (m[0].grad(lambda x: m[1].sum(m[1].sum(x * x, axis=1) ** 2)),
                                (f32(2, 3),)),
    "grad_index": lambda m: (m[0].grad(lambda x: x[1] * x[0]), (f32(3),)),
    "reshape_dimensions": lambda m: (lambda x: m[0].lax.reshape(x, (3, 8), (1, 0, 2)),
                                     (f32(2, 3, 4),)),
    "grad_reshape_dimensions": lambda m: (m[0].grad(lambda x: m[1].sum(
        m[1].sin(m[0].lax.reshape(x, (3, 8), (1, 0, 2))))), (f32(2, 3, 4),)),
    "vmap_reshape_dimensions": lambda m: (m[0].vmap(
        lambda x: m[0].lax.reshape(x, (3, 8), (1, 0, 2)), in_axes=3), (f32(2, 3, 4, 5),)),
    "grad_concatenate": lambda m: (m[0].grad(lambda x, y: m[1].sum(m[1].sin(
        m[0].lax.concatenate([x, y, x], 1))), (0, 1)), (f32(2, 3), f32(2, 2))),
    "grad_split": lambda m: (m[0].grad(lambda x: m[1].sum(
        m[0].lax.split(x, (1, 2))[1] ** 2)), (f32(3),)),
}


def _run(name, m):
  f, args = PROGRAMS[name](m)
  return f, args


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_printed_jaxpr_equals_jax(name):
  f, args = _run(name, SC)
  ours = str(sc.make_jaxpr(f)(*args))
  g, jargs = _run(name, JAX)
  theirs = str(jax.make_jaxpr(g)(*jargs))
  assert ours == theirs, f"\n--- stagecraft\n{ours}\n--- JAX\n{theirs}"


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_values_equal_jax(name):
  f, args = _run(name, SC)
  g, jargs = _run(name, JAX)
  ours = sc.jit(f)(*args)
  theirs = g(*jargs)
  ol, ot = sc.tree_util.tree_flatten(ours)
  tl, tt = jax.tree_util.tree_flatten(theirs)
  assert len(ol) == len(tl)
  for o, t in zip(ol, tl):
    o, t = np.asarray(o), np.asarray(t)
    assert o.dtype == t.dtype and o.shape == t.shape
    np.testing.assert_allclose(o, t, rtol=2e-5, atol=1e-6)


def test_x64_jacobian_prints_and_values():
  with sc.enable_x64(), jax.enable_x64(True):
    x = np.linspace(0.1, 0.9, 3)
    f = lambda m: m[0].jacrev(lambda x: m[1].sin(x) * x[0])  # noqa: E731
    ours = str(sc.make_jaxpr(f(SC))(x)).splitlines()
    theirs = str(jax.make_jaxpr(f(JAX))(x)).splitlines()
    # NB: the identity basis is jnp.eye's, whose iota is int64 here under x64 (JAX: int32);
    # from the basis' cut on, the equations are JAX's.
    cut = lambda lines: lines[next(i for i, ln in enumerate(lines) if "split" in ln):]  # noqa
    assert cut(ours) == cut(theirs)
    np.testing.assert_allclose(np.asarray(f(SC)(x)), np.asarray(f(JAX)(x)), rtol=1e-12)
    assert np.asarray(f(SC)(x)).dtype == np.float64


# ---------------------------------------------------------------------------
# lax.split


@pytest.mark.parametrize("shape,sizes,axis", [
    ((5,), (2, 3), 0), ((2, 6), (1, 0, 5), 1), ((4, 3), (4,), 0), ((3, 4, 2), (1, 1), -1),
])
def test_split_values_and_jaxpr(shape, sizes, axis):
  x = f32(*shape)
  ours = lax.split(x, sizes, axis)
  theirs = jax.lax.split(x, sizes, axis)
  assert len(ours) == len(theirs)
  for o, t in zip(ours, theirs):
    assert o.shape == t.shape and o.dtype == t.dtype
    np.testing.assert_array_equal(np.asarray(o), np.asarray(t))
  f = lambda L: lambda x: L.split(x, sizes, axis)  # noqa: E731
  assert str(sc.make_jaxpr(f(lax))(x)) == str(jax.make_jaxpr(f(jax.lax))(x))
  for o, t in zip(sc.jit(f(lax))(x), theirs):
    np.testing.assert_array_equal(np.asarray(o), np.asarray(t))


def test_split_dtypes_and_weak_type():
  for dt in (np.int32, np.bool_, np.float16, np.complex64):
    x = np.ones((4,), dt)
    a, b = lax.split(x, (1, 3))
    assert a.dtype == dt and b.shape == (3,)
  w = sc.make_jaxpr(lambda s: lax.split(lax.broadcast(s, (2,)), (1, 1)))(1.0)
  assert all(v.aval.weak_type for v in w.jaxpr.outvars)


def test_split_errors_as_jax():
  x = f32(5)
  for sizes, axis in [((2, 2), 0), ((-1, 6), 0), ((5,), 1)]:
    with pytest.raises(Exception) as theirs:
      jax.lax.split(x, sizes, axis)
    with pytest.raises(type(theirs.value)) as ours:
      lax.split(x, sizes, axis)
    if axis == 0:
      assert str(ours.value) == str(theirs.value)


def test_split_derivatives():
  x = f32(2, 5)
  f = lambda x: lax.split(x, (2, 3), 1)[1] * lax.split(x, (2, 3), 1)[1]  # noqa: E731
  check_grads(f, (x,), order=2, modes=("fwd", "rev"))
  g = lambda L: lambda x: L.split(x, (2, 3), 1)[0].sum()  # noqa: E731
  np.testing.assert_allclose(np.asarray(sc.grad(g(lax))(x)), np.asarray(jax.grad(g(jax.lax))(x)))
  assert str(sc.make_jaxpr(sc.grad(g(lax)))(x)) == str(jax.make_jaxpr(jax.grad(g(jax.lax)))(x))


@pytest.mark.parametrize("in_axes,axis,shape", [
    (0, 0, (3, 4, 5)), (1, 0, (4, 3, 5)), (1, 1, (3, 3, 4)), (2, 1, (3, 4, 2))])
def test_split_batching(in_axes, axis, shape):
  x = f32(*shape)
  f = lambda L: lambda x: L.split(x, (1, 3), axis)  # noqa: E731
  ours = sc.vmap(f(lax), in_axes=in_axes)(x)
  theirs = jax.vmap(f(jax.lax), in_axes=in_axes)(x)
  for o, t in zip(ours, theirs):
    np.testing.assert_array_equal(np.asarray(o), np.asarray(t))
  assert (str(sc.make_jaxpr(sc.vmap(f(lax), in_axes=in_axes))(x))
          == str(jax.make_jaxpr(jax.vmap(f(jax.lax), in_axes=in_axes))(x)))


def test_split_lowers_to_slices():
  x = f32(2, 6)
  text = sc.jit(lambda x: lax.split(x, (2, 4), 1)).lower(x).as_text()
  assert text.count("stablehlo.slice") == 2
