"""vmap itself: in_axes/out_axes/axis_size semantics, composition with jit and grad, named-axis
collectives against their NumPy definitions, and the error messages."""
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import lax

RNG = np.random.default_rng(0)


def _r(*shape):
  return RNG.standard_normal(shape).astype(np.float32)


def test_in_axes_variants_and_out_axes():
  x, y = _r(3, 4), _r(4, 3)
  f = lambda a, b: a * 2.0 + b
  np.testing.assert_allclose(sc.vmap(f, in_axes=(0, 1))(x, y), x * 2 + y.T, rtol=1e-6)
  np.testing.assert_allclose(sc.vmap(f, in_axes=(0, None))(x, y[:, 0]), x * 2 + y[:, 0],
                             rtol=1e-6)
  np.testing.assert_allclose(sc.vmap(f, in_axes=(-1, 0), out_axes=1)(x.T, x), (x * 3).T,
                             rtol=1e-6)
  np.testing.assert_allclose(sc.vmap(f, in_axes=[1, 1])(x, x), (x * 3).T, rtol=1e-6)


def test_pytree_in_axes_prefix_and_kwargs():
  d = {"a": _r(5, 2), "b": _r(2, 5)}
  f = lambda d, c: d["a"] + d["b"].T * c
  out = sc.vmap(f, in_axes=({"a": 0, "b": 1}, None))(d, 3.0)
  np.testing.assert_allclose(out, d["a"] + d["b"].T * 3, rtol=1e-6)


def test_kwargs_are_mapped_over_axis_0():
  x, s = _r(4, 3), np.arange(4, dtype=np.float32)
  out = sc.vmap(lambda x, *, scale: x * scale)(x, scale=s)
  np.testing.assert_allclose(out, x * s[:, None], rtol=1e-6)


def test_out_axes_none_and_broadcast_of_unbatched_output():
  x = _r(3, 2)
  out, c = sc.vmap(lambda x: (x * 2.0, jnp.float32(7.0)), out_axes=(0, None))(x)
  np.testing.assert_allclose(out, x * 2, rtol=1e-6)
  assert float(c) == 7.0
  out = sc.vmap(lambda x: jnp.ones(2), axis_size=3, in_axes=None)(x)
  assert out.shape == (3, 2)


def test_nested_vmap_with_different_in_axes():
  x, y = _r(3, 4), _r(4, 5)
  f = sc.vmap(sc.vmap(lambda a, b: a * b, in_axes=(None, 0)), in_axes=(0, None))
  # out[i, j] = x[i] * y[j]  for scalar-by-row products: use a 1-D case
  a, b = _r(3), _r(5)
  np.testing.assert_allclose(f(a, b), a[:, None] * b[None, :], rtol=1e-6)
  g = sc.vmap(sc.vmap(lambda a, b: jnp.dot(a, b), in_axes=(None, 1)), in_axes=(0, None))
  np.testing.assert_allclose(g(x, y), x @ y, rtol=1e-5)


def test_vmap_of_jit_stays_one_call_and_jit_of_vmap():
  f = sc.jit(lambda a: jnp.sin(a) * 2.0)
  x = _r(4, 3)
  np.testing.assert_allclose(sc.vmap(f)(x), np.sin(x) * 2, rtol=1e-6)
  text = str(sc.make_jaxpr(sc.vmap(f))(x))
  assert text.count("jit[") == 1 and "sin" in text
  np.testing.assert_allclose(sc.jit(sc.vmap(lambda a: jnp.sin(a) * 2.0))(x), np.sin(x) * 2,
                             rtol=1e-6)


def test_per_example_gradients_of_mlp_equal_loop():
  w1, w2 = _r(3, 8) / 2, _r(8, 2) / 3
  xs, ys = _r(6, 3), _r(6, 2)

  def loss(params, x, y):
    w1, w2 = params
    return jnp.sum((jnp.tanh(x @ w1) @ w2 - y) ** 2)

  per = sc.vmap(sc.grad(loss), in_axes=(None, 0, 0))((w1, w2), xs, ys)
  loop = [sc.grad(loss)((w1, w2), xs[i], ys[i]) for i in range(6)]
  for k in range(2):
    np.testing.assert_allclose(per[k], np.stack([g[k] for g in loop]), rtol=1e-5, atol=1e-6)
  jitted = sc.jit(sc.vmap(sc.grad(loss), in_axes=(None, 0, 0)))((w1, w2), xs, ys)
  np.testing.assert_allclose(jitted[0], per[0], rtol=1e-5, atol=1e-6)

  # Batching moves no dimension it need not: per-example gradients of the MLP are dots and
  # elementwise ops only (a vector @ matrix is one dot_general, not reshape/dot/squeeze).
  text = str(sc.make_jaxpr(sc.vmap(sc.grad(loss), in_axes=(None, 0, 0)))((w1, w2), xs, ys))
  assert "reshape" not in text and "squeeze" not in text, text
  assert text.count("dot_general") == 5, text


def test_grad_of_vmap():
  x = _r(5)
  g = sc.grad(lambda x: jnp.sum(sc.vmap(lambda a: jnp.sin(a) * a)(x)))(x)
  np.testing.assert_allclose(g, np.cos(x) * x + np.sin(x), rtol=1e-5)


# ---------------------------------------------------------------------------
# Collectives over a vmap axis


def test_psum_pmean_pmax_pmin_equal_numpy():
  x = _r(4, 3)
  f = lambda v: (lax.psum(v, "i"), lax.pmean(v, "i"), lax.pmax(v, "i"), lax.pmin(v, "i"))
  s, m, mx, mn = sc.vmap(f, axis_name="i")(x)
  for got, want in ((s, x.sum(0)), (m, x.mean(0)), (mx, x.max(0)), (mn, x.min(0))):
    np.testing.assert_allclose(got, np.broadcast_to(want, x.shape), rtol=1e-5, atol=1e-6)
  # psum of a constant is the axis size; normalization inside vmap
  n = sc.vmap(lambda v: lax.psum(1, "i"), axis_name="i")(x)
  np.testing.assert_array_equal(n, [4, 4, 4, 4])
  norm = sc.vmap(lambda v: v / lax.psum(v, "i"), axis_name="i")(np.abs(x) + 1)
  np.testing.assert_allclose(norm.sum(0), np.ones(3), rtol=1e-5)


def test_axis_index_all_gather_ppermute_all_to_all():
  x = _r(4, 3)
  np.testing.assert_array_equal(sc.vmap(lambda v: lax.axis_index("i"), axis_name="i")(x),
                                np.arange(4))
  g = sc.vmap(lambda v: lax.all_gather(v, "i"), axis_name="i")(x)
  np.testing.assert_allclose(g, np.broadcast_to(x, (4, 4, 3)), rtol=1e-6)
  gt = sc.vmap(lambda v: lax.all_gather(v, "i", tiled=True), axis_name="i")(x)
  np.testing.assert_allclose(gt, np.broadcast_to(x.reshape(-1), (4, 12)), rtol=1e-6)
  perm = [(0, 1), (1, 2), (2, 3)]          # member 0 receives nothing
  p = sc.vmap(lambda v: lax.ppermute(v, "i", perm), axis_name="i")(x)
  np.testing.assert_allclose(p, np.concatenate([np.zeros((1, 3)), x[:3]]), rtol=1e-6)
  y = _r(4, 4, 2)
  a = sc.vmap(lambda v: lax.all_to_all(v, "i", 0, 0, tiled=True), axis_name="i")(y)
  # member j receives chunk j of every member i, concatenated over i
  np.testing.assert_allclose(a, np.transpose(y, (1, 0, 2)), rtol=1e-6)


def test_nested_axis_names_resolve_to_their_axis():
  x = _r(2, 3)
  f = sc.vmap(sc.vmap(lambda v: (lax.psum(v, "i"), lax.psum(v, "j")), axis_name="j"),
              axis_name="i")
  si, sj = f(x)
  np.testing.assert_allclose(si, np.broadcast_to(x.sum(0), x.shape), rtol=1e-5)
  np.testing.assert_allclose(sj, np.broadcast_to(x.sum(1, keepdims=True), x.shape), rtol=1e-5)
  both = sc.vmap(sc.vmap(lambda v: lax.psum(v, ("i", "j")), axis_name="j"), axis_name="i")(x)
  np.testing.assert_allclose(both, np.full(x.shape, x.sum()), rtol=1e-5)


def test_collective_inside_jit_inside_vmap():
  x = _r(4, 3)
  f = sc.jit(lambda v: v - lax.pmean(v, "i"))
  out = sc.vmap(f, axis_name="i")(x)
  np.testing.assert_allclose(out, x - x.mean(0), rtol=1e-5, atol=1e-6)


def test_grad_through_psum():
  x = _r(4)
  g = sc.grad(lambda x: jnp.sum(sc.vmap(lambda v: lax.psum(v, "i") * v, axis_name="i")(x)))(x)
  # L = sum_j s * x_j with s = sum x: dL/dx_k = s + sum_j x_j = 2 s
  np.testing.assert_allclose(g, np.full(4, 2 * x.sum()), rtol=1e-5)


# ---------------------------------------------------------------------------
# Errors


def test_error_inconsistent_sizes_names_arguments():
  with pytest.raises(ValueError, match=r"vmap got inconsistent sizes for array axes to be "
                                       r"mapped:\n  \* one axis had size 2: axis 0 of argument "
                                       r"a of type float32\[2\];\n  \* one axis had size 3: "
                                       r"axis 0 of argument b of type float32\[3\]"):
    sc.vmap(lambda a, b: a + b)(np.ones(2, np.float32), np.ones(3, np.float32))


def test_error_no_mapped_input_and_axis_out_of_range():
  with pytest.raises(ValueError, match="vmap must have at least one non-None value in in_axes"):
    sc.vmap(lambda a: a, in_axes=None)(np.ones(2))
  with pytest.raises(ValueError, match="vmap was requested to map its argument along axis 2, "
                                       "which implies that its rank should be at least 3, but "
                                       r"is only 1 \(its shape is \(2,\)\)"):
    sc.vmap(lambda a: a, in_axes=2)(np.ones(2))


def test_error_in_axes_not_a_prefix_and_bad_leaf():
  with pytest.raises(ValueError, match="in_axes must be an int, None, or a tuple"):
    sc.vmap(lambda a, b: a, in_axes=(0, 0, 0))(np.ones(2), np.ones(2))
  with pytest.raises(ValueError, match="tree prefix"):
    sc.vmap(lambda d: d["a"], in_axes=({"b": 0},))({"a": np.ones(2)})
  with pytest.raises(TypeError, match="vmap in_axes must be an int, None"):
    sc.vmap(lambda a: a, in_axes=("x",))(np.ones(2))


_MAPPED_OUT_AXES_NONE = {
    "bare": lambda api: api.vmap(lambda a: a * 2.0, out_axes=None),
    "dict_key": lambda api: api.vmap(lambda a: {"broadcast": a, "k": a},
                                     out_axes={"broadcast": None, "k": 0}),
    "tuple": lambda api: api.vmap(lambda a: (a, [a]), out_axes=(0, [None])),
    "axis_name": lambda api: api.vmap(lambda a: a, out_axes=None, axis_name="i"),
}


@pytest.mark.parametrize("name", sorted(_MAPPED_OUT_AXES_NONE))
def test_error_mapped_output_with_out_axes_none(name):
  """JAX's texts: the out_axes entry's key path ("at vmap out_axes['broadcast'], got axis
  spec None but output was batched on axis 0"; flax.nnx's tests match it), or with an
  axis_name "vmap has mapped output (axis_name=i) but out_axes is None"."""
  import jax
  msgs = []
  for api in (jax, sc):
    with pytest.raises(ValueError) as e:
      _MAPPED_OUT_AXES_NONE[name](api)(np.ones(2, np.float32))
    msgs.append(str(e.value))
  assert msgs[0] == msgs[1]


def test_error_unbound_axis_name():
  with pytest.raises(NameError, match="unbound axis name: j"):
    sc.vmap(lambda a: lax.psum(a, "j"), axis_name="i")(np.ones(2, np.float32))
  with pytest.raises(NameError, match="unbound axis name: i"):
    lax.psum(np.ones(2), "i")


# ---------------------------------------------------------------------------
# custom_jvp / custom_vjp / checkpoint under vmap


def _custom_fns():
  @sc.custom_jvp
  def f(x, y):
    return jnp.sin(x) * y

  @f.defjvp
  def f_jvp(primals, tangents):
    (x, y), (xd, yd) = primals, tangents
    return f(x, y), 3.0 * jnp.cos(x) * xd * y + jnp.sin(x) * yd   # deliberately scaled

  @sc.custom_vjp
  def g(x, y):
    return jnp.sin(x) * y

  def g_fwd(x, y):
    return g(x, y), (jnp.cos(x), jnp.sin(x), y)

  def g_bwd(res, ct):
    c, s, y = res
    return (5.0 * c * ct * y, s * ct)                              # deliberately scaled
  g.defvjp(g_fwd, g_bwd)
  return f, g


def test_custom_rules_survive_vmap():
  f, g = _custom_fns()
  x, y = _r(4), _r(4)
  for h in (f, g):
    np.testing.assert_allclose(sc.vmap(h)(x, y), np.sin(x) * y, rtol=1e-6)
    np.testing.assert_allclose(sc.vmap(h, in_axes=(0, None))(x, 2.0), np.sin(x) * 2, rtol=1e-6)
  scale = {f: 3.0, g: 5.0}
  for h in (f, g):
    # vmap of grad: the rule runs per example
    per = sc.vmap(sc.grad(h))(x, y)
    np.testing.assert_allclose(per, scale[h] * np.cos(x) * y, rtol=1e-5)
    # grad of vmap: the batched rule
    tot = sc.grad(lambda x: jnp.sum(sc.vmap(h)(x, y)))(x)
    np.testing.assert_allclose(tot, scale[h] * np.cos(x) * y, rtol=1e-5)
    # an unbatched input's cotangent sums over the batch
    gy = sc.grad(lambda y0: jnp.sum(sc.vmap(h, in_axes=(0, None))(x, y0)))(1.5)
    np.testing.assert_allclose(gy, np.sin(x).sum(), rtol=1e-5)
  tf = sc.jvp(lambda x: sc.vmap(f)(x, y), (x,), (np.ones(4, np.float32),))[1]
  np.testing.assert_allclose(tf, 3 * np.cos(x) * y, rtol=1e-5)


def test_checkpoint_under_vmap():
  blk = sc.checkpoint(lambda a: jnp.sin(jnp.sin(a)))
  x = _r(3, 2)
  np.testing.assert_allclose(sc.vmap(blk)(x), np.sin(np.sin(x)), rtol=1e-6)
  g = sc.grad(lambda x: jnp.sum(sc.vmap(blk)(x)))(x)
  np.testing.assert_allclose(g, np.cos(np.sin(x)) * np.cos(x), rtol=1e-5)


def test_vmap_of_jvp_with_unbatched_scalar_tangent():
  # add_any of a batched tangent and an unbatched scalar one (both operands of add_any must
  # share a type, so the scalar is broadcast).
  xs = np.linspace(0.1, 1.0, 3, dtype=np.float32)
  y, t = sc.vmap(lambda x: sc.jvp(lambda a, b: a * b, (x, 2.0), (1.0, 1.0)))(xs)
  np.testing.assert_allclose(y, 2 * xs, rtol=1e-6)
  np.testing.assert_allclose(t, 2 + xs, rtol=1e-6)
