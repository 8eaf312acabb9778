"""custom_dce: the reference docstring's examples, its error checks and messages, pruning
in jitted programs (equation counts after `dce_jaxpr`), and the rule kept under jvp, grad
and vmap (beyond JAX, whose JVP drops it)."""
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.custom_dce import custom_dce
from stagecraft.errors import UnexpectedTracerError
from stagecraft.interpreters import partial_eval as pe


def _prims(jaxpr):
  """Primitive names of all equations, recursing into custom_dce_call/jit bodies."""
  out = []
  for e in jaxpr.eqns:
    sub = e.params.get("fun_jaxpr") or e.params.get("jaxpr")
    if sub is not None and hasattr(sub, "jaxpr"):
      out += _prims(sub.jaxpr)
    else:
      out.append(e.primitive.name)
  return out


def _dce_prims(fun, *args):
  closed = sc.make_jaxpr(fun)(*args)
  jaxpr, _ = pe.dce_jaxpr(closed.jaxpr, [True] * len(closed.jaxpr.outvars))
  return _prims(jaxpr)


# ---------------------------------------------------------------------------
# The docstring's example


@custom_dce
def f(x, y):
  return jnp.sin(x) * y, x * jnp.sin(y)


@f.def_dce
def f_dce_rule(used_outs, x, y):
  return (
      jnp.sin(x) * y if used_outs[0] else None,
      x * jnp.sin(y) if used_outs[1] else None,
  )


X, Y = np.float32(1.5), np.float32(0.5)


def test_docstring_example_values():
  a, b = f(X, Y)
  np.testing.assert_allclose(a, np.sin(X) * Y, rtol=1e-6)
  np.testing.assert_allclose(b, X * np.sin(Y), rtol=1e-6)
  np.testing.assert_allclose(sc.jit(lambda x, y: f(x, y)[0])(X, Y), np.sin(X) * Y, rtol=1e-6)
  np.testing.assert_allclose(sc.jit(lambda x, y: f(x, y)[1])(X, Y), X * np.sin(Y), rtol=1e-6)
  a, b = sc.jit(f)(X, Y)
  np.testing.assert_allclose([a, b], [np.sin(X) * Y, X * np.sin(Y)], rtol=1e-6)


def test_docstring_example_prunes():
  assert sorted(_dce_prims(lambda x, y: f(x, y)[0], X, Y)) == ["mul", "sin"]
  assert sorted(_dce_prims(lambda x, y: f(x, y)[1], X, Y)) == ["mul", "sin"]
  assert sorted(_dce_prims(f, X, Y)) == ["mul", "mul", "sin", "sin"]


def test_static_argnums_moved_to_front():
  calls = []

  def g(x, fn):
    return fn(x), jnp.exp(x)

  cd = custom_dce(g, static_argnums=(1,))

  @cd.def_dce
  def rule(fn, used_outs, x):
    calls.append(fn)
    return (fn(x) * 2 if used_outs[0] else None,
            jnp.exp(x) if used_outs[1] else None)

  x = np.arange(3, dtype=np.float32)
  out = sc.jit(lambda x: cd(x, jnp.cos)[0])(x)
  np.testing.assert_allclose(out, 2 * np.cos(x), rtol=1e-6)  # the rule ran (factor 2)
  assert calls and calls[-1] is jnp.cos
  a, b = cd(x, jnp.cos)   # eager: the primal, no DCE
  np.testing.assert_allclose(a, np.cos(x), rtol=1e-6)
  np.testing.assert_allclose(b, np.exp(x), rtol=1e-6)


def test_rule_applied_only_when_staged():
  @custom_dce
  def h(x):
    return jnp.sin(x), jnp.cos(x)

  @h.def_dce
  def rule(used_outs, x):
    return (jnp.exp(x) if used_outs[0] else None, jnp.sqrt(x) if used_outs[1] else None)

  x = np.float32(1.1234)
  np.testing.assert_allclose(sc.jit(lambda x: h(x)[0])(x), np.exp(x), rtol=1e-6)
  np.testing.assert_allclose(sc.jit(lambda x: h(x)[1])(x), np.sqrt(x), rtol=1e-6)
  np.testing.assert_allclose(sc.jit(h)(x), [np.sin(x), np.cos(x)], rtol=1e-6)
  np.testing.assert_allclose(h(x)[0], np.sin(x), rtol=1e-6)


def test_pytree_outputs_and_none_subtree():
  @custom_dce
  def h(x):
    return {"a": jnp.sin(x), "b": (jnp.cos(x), 2 * x)}

  @h.def_dce
  def rule(used, x):
    b = None
    if used["b"][0] or used["b"][1]:
      b = (jnp.cos(x), 2 * x)
    return {"a": jnp.sin(x) if used["a"] else None, "b": b}

  x = np.linspace(0, 1, 4).astype(np.float32)
  np.testing.assert_allclose(sc.jit(lambda x: h(x)["a"])(x), np.sin(x), rtol=1e-6)
  np.testing.assert_allclose(sc.jit(lambda x: h(x)["b"][1])(x), 2 * x, rtol=1e-6)
  assert _dce_prims(lambda x: h(x)["a"], x) == ["sin"]


def test_list_output_accepted_for_tuple():
  @custom_dce
  def h(x):
    return jnp.exp(x), 10 * jnp.sin(x)

  @h.def_dce
  def rule(used_outs, x):
    return [jnp.exp(x) if used_outs[0] else None, None]

  np.testing.assert_allclose(sc.jit(lambda x: h(x)[0])(np.float32(0.3)), np.exp(0.3), rtol=1e-6)


def test_recursive_rule_calls_primal():
  @custom_dce
  def h(x):
    return jnp.exp(10 * x), 10 * jnp.sin(x)

  @h.def_dce
  def rule(used_outs, x):
    return [2 * v if used else None for used, v in zip(used_outs, h(x))]

  x = np.float32(0.11)
  np.testing.assert_allclose(sc.jit(lambda x: h(x)[0])(x), 2 * np.exp(10 * x), rtol=1e-5)
  np.testing.assert_allclose(sc.jit(lambda x: h(x)[1])(x), 20 * np.sin(x), rtol=1e-5)
  np.testing.assert_allclose(sc.jit(sc.grad(lambda x: h(x)[1]))(x), 20 * np.cos(x), rtol=1e-5)


# ---------------------------------------------------------------------------
# Errors


def test_no_rule_attribute_error():
  @custom_dce
  def h(x):
    return x

  with pytest.raises(AttributeError, match="No DCE rule defined for custom_dce function h "
                     "using def_dce"):
    h(1.0)


def test_rule_wrong_structure_type_error():
  @custom_dce
  def h(x):
    return x, 2 * x

  @h.def_dce
  def bad_rule(used_outs, x):
    return (x, 2 * x, 3 * x)

  with pytest.raises(TypeError, match="Custom DCE rule bad_rule for function h must produce an "
                     "output with the same container \\(pytree\\) structure"):
    sc.jit(lambda x: h(x)[0])(np.float32(1.0))


def test_rule_none_for_used_output_value_error():
  @custom_dce
  def h(x):
    return x, 2 * x

  @h.def_dce
  def bad_rule(used_outs, x):
    return None, None

  with pytest.raises(ValueError, match=r"must produce values for all of the required outputs"
                     r".*at output\[0\], the DCE rule returned None instead of an output with "
                     r"shape/dtype f32\[\]"):
    sc.jit(lambda x: h(x)[0])(np.float32(1.0))


@pytest.mark.parametrize("wrong", [lambda x: x.astype(np.int32),
                                   lambda x: jnp.stack([x, x])])
def test_rule_wrong_type_value_error(wrong):
  @custom_dce
  def h(x):
    return x, 2 * x

  @h.def_dce
  def bad_rule(used_outs, x):
    return None, wrong(x)

  with pytest.raises(ValueError, match=r"must produce an output with the same shapes/dtypes as "
                     r"the output of the function h. But, at output\[1\], the DCE rule returned "
                     r"an output with shape/dtype (i32\[\]|f32\[2\]), while f32\[\] was "
                     r"expected"):
    sc.jit(lambda x: h(x)[1])(np.float32(1.0))


def test_tracer_static_arg_error():
  def g(x, s):
    return x * s, x

  cd = custom_dce(g, static_argnums=(1,))
  cd.def_dce(lambda s, used, x: (x * s, x))
  with pytest.raises(UnexpectedTracerError, match="static_argnums as static"):
    sc.jit(lambda x: cd(x, x))(np.float32(1.0))


# ---------------------------------------------------------------------------
# Pruning beyond the default rule, kept under jvp, grad and vmap


@custom_dce
def opaque(x):
  # Default DCE cannot drop `heavy`: output 0 reads it too. The rule can.
  heavy = jnp.exp(jnp.exp(jnp.cos(jnp.tanh(x))))
  return jnp.sin(x) + 0.0 * heavy, heavy


@opaque.def_dce
def opaque_rule(used_outs, x):
  heavy = jnp.exp(jnp.exp(jnp.cos(jnp.tanh(x))))
  return (jnp.sin(x) if used_outs[0] else None, heavy if used_outs[1] else None)


XV = np.linspace(0.1, 0.9, 5).astype(np.float32)
HEAVY = np.exp(np.exp(np.cos(np.tanh(XV))))


def first(x):
  return opaque(x)[0]


def test_counts_plain():
  full = _dce_prims(opaque, XV)
  assert sorted(full) == ["add", "cos", "exp", "exp", "mul", "sin", "tanh"]
  assert _dce_prims(first, XV) == ["sin"]
  np.testing.assert_allclose(sc.jit(first)(XV), np.sin(XV), rtol=1e-6)
  np.testing.assert_allclose(sc.jit(lambda x: opaque(x)[1])(XV), HEAVY, rtol=1e-5)


def test_counts_jvp():
  t = np.ones_like(XV)
  jvp_first = lambda x, t: sc.jvp(first, (x,), (t,))
  prims = _dce_prims(jvp_first, XV, t)
  assert "tanh" not in prims and "exp" not in prims
  assert sorted(prims) == ["cos", "mul", "sin"]
  no_rule = _dce_prims(lambda x, t: sc.jvp(
      lambda x: (lambda a, h: a)(jnp.sin(x) + 0.0 * jnp.exp(jnp.exp(jnp.cos(jnp.tanh(x)))),
                                 None), (x,), (t,)), XV, t)
  assert len(prims) < len(no_rule)
  p, tout = sc.jit(jvp_first)(XV, t)
  np.testing.assert_allclose(p, np.sin(XV), rtol=1e-6)
  np.testing.assert_allclose(tout, np.cos(XV), rtol=1e-6)
  # tangent only of the heavy output
  p, tout = sc.jit(lambda x, t: sc.jvp(lambda x: opaque(x)[1], (x,), (t,)))(XV, t)
  np.testing.assert_allclose(p, HEAVY, rtol=1e-5)


def test_counts_grad():
  gfun = sc.grad(lambda x: first(x).sum())
  prims = _dce_prims(gfun, XV)
  assert "tanh" not in prims and "exp" not in prims, prims
  assert len(prims) <= 3, prims
  np.testing.assert_allclose(sc.jit(gfun)(XV), np.cos(XV), rtol=1e-6)
  np.testing.assert_allclose(gfun(XV), np.cos(XV), rtol=1e-6)


def test_grad_values_both_outputs():
  def loss(x):
    a, h = opaque(x)
    return (a * h).sum()

  tanh = np.tanh(XV)
  dheavy = HEAVY * np.exp(np.cos(tanh)) * -np.sin(tanh) * (1 - tanh ** 2)
  expected = np.cos(XV) * HEAVY + np.sin(XV) * dheavy
  np.testing.assert_allclose(sc.grad(loss)(XV), expected, rtol=1e-4)
  np.testing.assert_allclose(sc.jit(sc.grad(loss))(XV), expected, rtol=1e-4)


def test_linearize_and_vjp():
  y, f_lin = sc.linearize(first, XV)
  np.testing.assert_allclose(y, np.sin(XV), rtol=1e-6)
  np.testing.assert_allclose(f_lin(np.ones_like(XV)), np.cos(XV), rtol=1e-6)
  y, f_vjp = sc.vjp(lambda x: opaque(x)[1], XV)
  np.testing.assert_allclose(y, HEAVY, rtol=1e-5)


def test_vmap_keeps_rule():
  xs = np.stack([XV, XV + 1])
  prims = _dce_prims(sc.vmap(first), xs)
  assert prims == ["sin"], prims
  np.testing.assert_allclose(sc.jit(sc.vmap(first))(xs), np.sin(xs), rtol=1e-6)
  a, h = sc.vmap(opaque)(xs)
  np.testing.assert_allclose(a, np.sin(xs), rtol=1e-5)
  # vmap with an unbatched argument, and in_axes=1
  np.testing.assert_allclose(sc.jit(sc.vmap(lambda x, y: f(x, y)[0], in_axes=(1, None)))(
      xs, np.float32(2.)), np.sin(xs.T) * 2, rtol=1e-6)
  # grad of vmap prunes too
  prims = _dce_prims(sc.grad(lambda x: sc.vmap(first)(x).sum()), xs)
  assert "tanh" not in prims and "exp" not in prims, prims


def test_rule_memoized_per_used_outs():
  calls = []

  @custom_dce
  def h(x):
    return jnp.sin(x), jnp.cos(x)

  @h.def_dce
  def rule(used_outs, x):
    calls.append(tuple(used_outs))
    return (jnp.sin(x) if used_outs[0] else None, jnp.cos(x) if used_outs[1] else None)

  closed = sc.make_jaxpr(lambda x: h(x)[0])(np.float32(1.))
  pe.dce_jaxpr(closed.jaxpr, [True])
  pe.dce_jaxpr(closed.jaxpr, [True])
  assert calls == [(True, False)]


def test_unused_inputs_pruned():
  @custom_dce
  def h(x, y):
    return x * y, jnp.sin(y)

  @h.def_dce
  def rule(used_outs, x, y):
    return (x * y if used_outs[0] else None, jnp.sin(y) if used_outs[1] else None)

  closed = sc.make_jaxpr(lambda x, y: h(x, y)[1])(np.float32(1.), np.float32(2.))
  jaxpr, used_ins = pe.dce_jaxpr(closed.jaxpr, [True])
  assert used_ins == [False, True]
  assert len(jaxpr.eqns[0].invars) == 1


def test_closed_over_constant_and_nothing_used():
  c = np.arange(5, dtype=np.float32)

  @custom_dce
  def h(x):
    return x + c, x * c

  @h.def_dce
  def rule(used_outs, x):
    return (x + c if used_outs[0] else None, x * c if used_outs[1] else None)

  np.testing.assert_allclose(sc.jit(lambda x: h(x)[1])(XV), XV * c, rtol=1e-6)
  np.testing.assert_allclose(sc.jit(sc.grad(lambda x: h(x)[1].sum()))(XV), c, rtol=1e-6)
  assert _dce_prims(lambda x: (h(x), x)[1], XV) == []


def test_higher_order_and_vmap_of_grad():
  x = np.float32(0.3)
  np.testing.assert_allclose(sc.jit(sc.grad(sc.grad(first)))(x), -np.sin(x), rtol=1e-5)
  prims = _dce_prims(sc.grad(sc.grad(first)), x)
  assert "tanh" not in prims and "exp" not in prims, prims
  _, t = sc.jvp(lambda x: sc.jvp(first, (x,), (x,))[1], (XV,), (XV,))
  np.testing.assert_allclose(t, (np.cos(XV) - XV * np.sin(XV)) * XV, rtol=1e-5)
  np.testing.assert_allclose(sc.jit(sc.vmap(sc.grad(first)))(XV), np.cos(XV), rtol=1e-6)


def test_rule_with_array_constant_and_zero_tangent():
  @custom_dce
  def k(x):
    return x * 2., x + 1.

  @k.def_dce
  def rule(used, x):
    c = np.array([1., 2., 3., 4., 5.], np.float32)
    return (jnp.zeros_like(x) + c if used[0] else None, x + 1. if used[1] else None)

  expected = np.arange(1, 6, dtype=np.float32)
  np.testing.assert_allclose(sc.jit(lambda x: k(x)[0])(XV), expected)
  p, t = sc.jit(lambda x: sc.jvp(lambda x: k(x)[0], (x,), (x,)))(XV)
  np.testing.assert_allclose(p, expected)
  np.testing.assert_allclose(t, np.zeros(5))
  np.testing.assert_allclose(sc.jit(sc.grad(lambda x: k(x)[0].sum()))(XV), np.zeros(5))
  np.testing.assert_allclose(sc.jit(sc.vmap(lambda x: k(x)[0]))(np.stack([XV, XV])),
                             np.stack([expected, expected]))


def test_tangent_input_unused_by_outputs():
  @custom_dce
  def h(x, y):
    return jnp.sin(x), x * 0 + 1.0

  h.def_dce(lambda used, x, y: (jnp.sin(x) if used[0] else None,
                                x * 0 + 1.0 if used[1] else None))
  # y has a tangent but no output depends on it: the call is wholly known.
  np.testing.assert_allclose(sc.grad(lambda x, y: h(x, y)[0].sum(), argnums=1)(XV, XV),
                             np.zeros(5))
  np.testing.assert_allclose(sc.jit(sc.grad(lambda y, x: h(x, y)[1].sum() + y.sum()))(XV, XV),
                             np.ones(5))
