"""Autodiff as JAX users rely on it outside `jit`: primal values are concrete under every
derivative API (Python control flow on them works), custom rules are called exactly as
often as in JAX, `vjp` returns a pytree, weak types follow JAX, and tracers are Arrays.
Every value is compared with JAX run on the same program."""
import functools

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import lax

from tests._util import assert_trees_allclose

# Each program is written once against a namespace (`sc`/`jnp`/`lax` or JAX's).
SC = (sc, jnp, lax)
JX = (jax, jjnp, jax.lax)


def _readme_abs(ns):
  def abs_val(x):
    if x > 0:
      return x
    else:
      return -x
  return abs_val


def _while_poly(ns):
  _, np_, _ = ns

  def f(x):
    y, n = x, 0
    while y < 10.0 and n < 8:   # a Python loop on a primal value
      y = y * x + 1.0
      n += 1
    return y * np_.sin(x) + n
  return f


def _int_index(ns):
  _, np_, _ = ns
  table = np.array([1.0, 2.0, 3.0, 4.0], np.float32)

  def f(x):
    k = int(x) % 4             # int() of a primal value
    return np_.sum(x * table[: k + 1]) + x.item() * x
  return f


def _vector_branch(ns):
  _, np_, _ = ns

  def f(x):
    s = np_.sum(x)
    if s > 0:
      return np_.sum(np_.tanh(x) * s)
    return np_.sum(x ** 3)
  return f


def _pytree_args(ns):
  _, np_, _ = ns

  def f(p, x):
    h = np_.tanh(x @ p["w"] + p["b"])
    if np_.max(h) > 0.5:
      h = h * 2.0
    return np_.sum(h ** 2)
  return f


SCALAR_PROGRAMS = [_readme_abs, _while_poly, _int_index]


@pytest.mark.parametrize("x", [1.0, -2.5, 3.0])
def test_readme_abs_val(x):
  assert float(sc.grad(_readme_abs(SC))(x)) == float(jax.grad(_readme_abs(JX))(x))


def _apis(ns):
  t, _, _ = ns
  return {
      "grad": lambda f, x: t.grad(f)(x),
      "value_and_grad": lambda f, x: t.value_and_grad(f)(x),
      "vjp": lambda f, x: t.vjp(f, x)[1](np.float32(1.0)),
      "jvp": lambda f, x: t.jvp(f, (x,), (np.float32(1.0),)),
      "linearize": lambda f, x: t.linearize(f, x)[1](np.float32(0.5)),
      "jacrev": lambda f, x: t.jacrev(f)(x),
      "jacfwd": lambda f, x: t.jacfwd(f)(x),
      "hessian": lambda f, x: t.hessian(f)(x),
      "grad_grad": lambda f, x: t.grad(t.grad(f))(x),
      "jacfwd_jacrev": lambda f, x: t.jacfwd(t.jacrev(f))(x),
      "jacrev_jacfwd": lambda f, x: t.jacrev(t.jacfwd(f))(x),
      "grad_of_vjp": lambda f, x: t.grad(lambda y: t.vjp(f, y)[1](np.float32(1.0))[0])(x),
  }


@pytest.mark.parametrize("api", list(_apis(SC)))
@pytest.mark.parametrize("prog", SCALAR_PROGRAMS, ids=lambda p: p.__name__)
@pytest.mark.parametrize("x", [np.float32(1.5), np.float32(-0.75), np.float32(2.25)])
def test_python_control_flow_on_primals(api, prog, x):
  ours = _apis(SC)[api](prog(SC), x)
  theirs = _apis(JX)[api](prog(JX), x)
  assert_trees_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("x", [np.array([0.5, -0.2, 1.0], np.float32),
                               np.array([-1.0, -2.0, 0.5], np.float32)])
def test_vector_branch_under_every_api(x):
  for api in ("grad", "jacrev", "jacfwd", "hessian", "vjp"):
    if api == "vjp":
      ours = sc.vjp(_vector_branch(SC), x)[1](np.float32(1))
      theirs = jax.vjp(_vector_branch(JX), x)[1](np.float32(1))
    else:
      ours = _apis(SC)[api](_vector_branch(SC), x)
      theirs = _apis(JX)[api](_vector_branch(JX), x)
    assert_trees_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_pytree_args_with_float_on_primal():
  rng = np.random.default_rng(0)
  p = {"w": rng.standard_normal((3, 4)).astype(np.float32),
       "b": rng.standard_normal(4).astype(np.float32)}
  x = rng.standard_normal((2, 3)).astype(np.float32)
  for argnums in (0, (0, 1)):
    ours = sc.grad(_pytree_args(SC), argnums=argnums)(p, x)
    theirs = jax.grad(_pytree_args(JX), argnums=argnums)(p, x)
    assert_trees_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("prog", SCALAR_PROGRAMS + [_vector_branch], ids=lambda p: p.__name__)
def test_under_jit_the_same_functions_raise(prog):
  x = np.float32(1.5) if prog is not _vector_branch else np.ones(3, np.float32)
  with pytest.raises(jax.errors.ConcretizationTypeError):
    jax.jit(jax.grad(prog(JX)))(x)
  with pytest.raises(sc.ConcretizationTypeError,
                     match="concrete value is expected|Attempted boolean conversion"):
    sc.jit(sc.grad(prog(SC)))(x)


@pytest.mark.parametrize("conv", ["int", "bool", "item", "float", "complex", "asarray",
                                  "tolist", "index", "round"])
@pytest.mark.parametrize("api", ["grad", "jvp"])
def test_conversions_of_differentiated_values_as_jax(conv, api):
  import operator
  fns = {"int": int, "bool": bool, "item": lambda x: x.item(), "float": float,
         "complex": complex, "asarray": np.asarray, "tolist": lambda x: x.tolist(),
         "index": operator.index, "round": lambda x: int(round(x))}

  def run(t):
    out = []

    def f(x):
      try:
        out.append(("ok", fns[conv](x)))
      except Exception as e:   # noqa: BLE001 - the class is what is compared
        out.append(("error", type(e).__name__))
      return x * 1.0
    if api == "grad":
      t.grad(f)(1.5)
    else:
      t.jvp(f, (1.5,), (1.0,))
    return out[0]
  ours, theirs = run(sc), run(jax)
  assert ours[0] == theirs[0], (ours, theirs)
  if ours[0] == "ok":
    assert ours[1] == theirs[1] and type(ours[1]) is type(theirs[1])
  else:
    assert ours[1] == theirs[1]


def test_branch_on_a_tangent_raises_as_jax():
  # Inside a custom JVP rule under grad, tangents are abstract in both libraries.
  def make(ns):
    t, np_, _ = ns

    @t.custom_jvp
    def f(x):
      return np_.sin(x)

    @f.defjvp
    def f_jvp(primals, tangents):
      (x,), (dx,) = primals, tangents
      if dx > 0:
        return f(x), np_.cos(x) * dx
      return f(x), -np_.cos(x) * dx
    return f
  with pytest.raises(jax.errors.ConcretizationTypeError):
    jax.grad(make(JX))(1.0)
  with pytest.raises(sc.ConcretizationTypeError):
    sc.grad(make(SC))(1.0)
  # Under plain jvp outside jit the tangent is concrete in JAX, and here.
  assert_trees_allclose(sc.jvp(make(SC), (1.0,), (-2.0,)), jax.jvp(make(JX), (1.0,), (-2.0,)))


def test_jit_grad_jaxpr_is_staged_once_and_matches_jax_shape():
  def loss(np_):
    return lambda w, x: np_.sum(np_.tanh(x @ w) ** 2)
  w = np.ones((4, 3), np.float32)
  x = np.ones((2, 4), np.float32)
  traces = []

  def counted(w, x):
    traces.append(1)
    return loss(jnp)(w, x)
  g = sc.jit(sc.grad(counted))
  g(w, x)
  g(w, x)
  assert len(traces) == 1
  ours = sc.make_jaxpr(sc.grad(loss(jnp)))(w, x)
  theirs = jax.make_jaxpr(jax.grad(loss(jjnp)))(w, x)
  assert [e.primitive.name for e in ours.jaxpr.eqns] == [
      e.primitive.name for e in theirs.jaxpr.eqns]


# ---------------------------------------------------------------------------
# custom_jvp / custom_vjp: call counts equal JAX's


def _counted_rules(ns, log):
  t, np_, _ = ns

  @t.custom_jvp
  def f(x):
    log.append("f")
    return np_.sin(x)

  @f.defjvp
  def f_jvp(primals, tangents):
    log.append("f_jvp")
    (x,), (dx,) = primals, tangents
    return f(x), np_.where(x > 10.0, 0.0, np_.cos(x)) * dx

  @t.custom_vjp
  def g(x):
    log.append("g")
    return np_.sin(x)

  def g_fwd(x):
    log.append("g_fwd")
    scale = np_.where(x > 0, 2.0, 1.0)
    return g(x), (np_.cos(x), {"s": scale, "none": None})

  def g_bwd(res, ct):
    log.append("g_bwd")
    c, extra = res
    return (c * ct * extra["s"] / extra["s"],)
  g.defvjp(g_fwd, g_bwd)
  return f, g


def _call_cases(ns, f, g):
  t, np_, _ = ns
  x = 0.75
  xs = np.linspace(0.1, 0.9, 3).astype(np.float32)
  return {
      "f": lambda: f(x), "jvp f": lambda: t.jvp(f, (x,), (1.0,)),
      "grad f": lambda: t.grad(f)(x), "vmap f": lambda: t.vmap(f)(xs),
      "jit f": lambda: t.jit(f)(x + 1.0), "jit grad f": lambda: t.jit(t.grad(f))(x + 2.0),
      "vmap grad f": lambda: t.vmap(t.grad(f))(xs),
      "grad grad f": lambda: t.grad(t.grad(f))(x),
      "value_and_grad f": lambda: t.value_and_grad(f)(x),
      "g": lambda: g(x), "grad g": lambda: t.grad(g)(x), "vmap g": lambda: t.vmap(g)(xs),
      "jit g": lambda: t.jit(g)(x + 1.0), "jit grad g": lambda: t.jit(t.grad(g))(x + 2.0),
      "vmap grad g": lambda: t.vmap(t.grad(g))(xs),
      "vjp g": lambda: t.vjp(g, x)[1](1.0),
      "vjp of vjp g": lambda: t.vjp(lambda y: t.vjp(g, y)[1](1.0), x)[1]((1.0,)),
  }


@pytest.mark.parametrize("case", list(_call_cases(SC, None, None)))
def test_custom_rule_call_counts_equal_jax(case):
  logs = {}
  values = {}
  for name, ns in (("sc", SC), ("jax", JX)):
    log = []
    f, g = _counted_rules(ns, log)
    values[name] = _call_cases(ns, f, g)[case]()
    logs[name] = list(log)
  assert logs["sc"] == logs["jax"], case
  assert_trees_allclose(values["sc"], values["jax"], rtol=1e-5, atol=1e-6)


def test_custom_rules_branch_on_concrete_primals_outside_jit():
  def make(ns):
    t, np_, _ = ns

    @t.custom_jvp
    def f(x):
      return np_.sin(x)

    @f.defjvp
    def f_jvp(primals, tangents):
      (x,), (dx,) = primals, tangents
      if x > 1.0:                      # Python control flow on a primal inside the rule
        return f(x), 2.0 * dx
      return f(x), np_.cos(x) * dx

    @t.custom_vjp
    def g(x):
      return np_.sin(x)

    def g_fwd(x):
      return g(x), (3.0 if x > 0 else -1.0) * np_.cos(x)

    g.defvjp(g_fwd, lambda r, ct: (r * ct,))
    return t, f, g
  ts, fs, gs = make(SC)
  tj, fj, gj = make(JX)
  for x in (0.5, 1.5, -0.5):
    assert_trees_allclose(ts.grad(fs)(x), tj.grad(fj)(x), rtol=1e-6)
    assert_trees_allclose(ts.grad(gs)(x), tj.grad(gj)(x), rtol=1e-6)
    assert_trees_allclose(ts.grad(ts.grad(fs))(x), tj.grad(tj.grad(fj))(x), rtol=1e-6)


def test_custom_jvp_nondiff_tracer_under_vmap():
  def make(ns):
    t, np_, _ = ns

    @functools.partial(t.custom_jvp, nondiff_argnums=(0,))
    def f(a, x):
      return np_.sin(a * x)

    @f.defjvp
    def f_jvp(a, primals, tangents):
      (x,), (dx,) = primals, tangents
      return f(a, x), a * np_.cos(a * x) * dx
    return f
  a = np.array([0.5, 1.0, 2.0], np.float32)
  x = np.float32(0.3)
  for build in (lambda t, f: t.vmap(lambda a: t.grad(lambda x: f(a, x))(x)),
                lambda t, f: t.vmap(lambda a: f(a, x)),
                lambda t, f: t.jit(t.vmap(lambda a: t.grad(lambda x: f(a, x))(x)))):
    assert_trees_allclose(build(sc, make(SC))(a), build(jax, make(JX))(a), rtol=1e-6)


def test_custom_vjp_nested_in_vjp_of_vjp():
  def make(ns):
    t, np_, _ = ns

    @t.custom_vjp
    def f(x):
      return x ** 3

    f.defvjp(lambda x: (x ** 3, x), lambda x, ct: (3 * x ** 2 * ct,))

    def second(x):
      _, pull = t.vjp(f, x)
      return pull(np.float32(1.0))[0]
    return t, second
  x = np.float32(1.3)
  (ts, s_sc), (tj, s_jx) = make(SC), make(JX)
  outs = ts.vjp(s_sc, x)
  outj = tj.vjp(s_jx, x)
  assert_trees_allclose(outs[0], outj[0])
  assert_trees_allclose(outs[1](np.float32(1.0)), outj[1](np.float32(1.0)))
  assert_trees_allclose(sc.grad(lambda y: s_sc(y) * y)(x), jax.grad(lambda y: s_jx(y) * y)(x))


# ---------------------------------------------------------------------------
# vjp returns a pytree


def test_vjp_function_is_a_pytree():
  x = jnp.arange(3.0)
  out, f_vjp = sc.vjp(lambda x: jnp.sin(x) * x, x)
  leaves, tree = sc.tree_util.tree_flatten(f_vjp)
  assert leaves and all(isinstance(l, sc.Array) for l in leaves)
  rebuilt = sc.tree_util.tree_unflatten(tree, leaves)
  ct = jnp.ones(3)
  np.testing.assert_allclose(rebuilt(ct)[0], f_vjp(ct)[0])
  theirs = jax.vjp(lambda x: jjnp.sin(x) * x, np.arange(3.0, dtype=np.float32))[1]
  np.testing.assert_allclose(f_vjp(ct)[0], theirs(np.ones(3, np.float32))[0], rtol=1e-6)


def test_vjp_function_returned_from_jit_and_make_jaxpr():
  g = sc.jit(lambda x: sc.vjp(jnp.sin, x)[1])(jnp.ones(2))
  np.testing.assert_allclose(g(jnp.ones(2))[0], np.cos(np.ones(2)), rtol=1e-6)
  jaxpr = sc.make_jaxpr(lambda x: sc.vjp(jnp.sin, x)[1])(jnp.ones(2))
  assert [e.primitive.name for e in jaxpr.jaxpr.eqns] == ["sin", "cos"]
  # Mapped over with tree_map (an optimizer receiving it as a pytree).
  doubled = sc.tree_util.tree_map(lambda r: r * 2, g)
  np.testing.assert_allclose(doubled(jnp.ones(2))[0], 2 * np.cos(np.ones(2)), rtol=1e-6)


def _vjp_programs(m):
  """name -> (function, primals): the residuals include primal leaves (some, all, none)."""
  L, N, _ = m

  def g(W, x):
    return N.sin(N.dot(W, x))

  def layers(W1, W2, W3, x):   # JAX's gradient-checkpointing tutorial
    return g(W3, g(W2, g(W1, x)))

  W1, W2, W3 = np.ones((5, 4), np.float32), np.ones((6, 5), np.float32), np.ones((7, 6),
                                                                                np.float32)
  x, y = np.float32(2.0), np.float32(3.0)
  return {
      "layers": (layers, (W1, W2, W3, np.ones(4, np.float32))),
      "layers_dots_saveable": (L.checkpoint(
          layers, policy=L.checkpoint_policies.dots_with_no_batch_dims_saveable),
          (W1, W2, W3, np.ones(4, np.float32))),
      "layers_checkpointed": (lambda a, b, c, v: L.checkpoint(g)(c, L.checkpoint(g)(
          b, L.checkpoint(g)(a, v))), (W1, W2, W3, np.ones(4, np.float32))),
      "one_primal_kept": (lambda x, y: N.sin(x) * y, (x, y)),
      # NB: `* np.float32(2)`: a Python scalar (`* 2`) is a residual Array in JAX's (one
      # more leaf), a literal here (docs/differences.md)
      "no_primal_kept": (lambda x, y: N.sin(x) * np.float32(2) + y, (x, y)),
      "dict_primals": (lambda d: N.sin(d["a"]) * d["b"][0], ({"a": x, "b": [y, x]},)),
  }


def _vjp_leaves(m, name):
  f, args = _vjp_programs(m)[name]
  return m[0].tree_util.tree_leaves(m[0].vjp(f, *args)[1])


@pytest.mark.parametrize("name", sorted(_vjp_programs(JX)))
def test_vjp_leaves_in_jax_order(name):
  # As JAX 0.10's VJP: the primal leaves kept as residuals (in the primals' order), then the
  # other residuals; the rebuilt function gives the same cotangents.
  ours, theirs = _vjp_leaves(SC, name), _vjp_leaves(JX, name)
  assert len(ours) == len(theirs)
  for a, b in zip(ours, theirs):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
  f, args = _vjp_programs(SC)[name]
  out, f_vjp = sc.vjp(f, *args)
  leaves, tree = sc.tree_util.tree_flatten(f_vjp)
  ct = jnp.ones_like(out)
  assert_trees_allclose(sc.tree_util.tree_unflatten(tree, leaves)(ct), f_vjp(ct))


@pytest.mark.parametrize("name", sorted(_vjp_programs(JX)))
def test_vjp_forward_and_backward_print_as_jax(name):
  # The tutorial's print_fwd_bwd: the forward program returns the VJP's leaves, the
  # backward one reads them.
  def texts(m):
    L = m[0]
    f, args = _vjp_programs(m)[name]
    fwd = L.make_jaxpr(lambda *a: L.vjp(f, *a))(*args)
    out, f_vjp = L.vjp(f, *args)
    res, tree = L.tree_util.tree_flatten(f_vjp)
    bwd = L.make_jaxpr(lambda *a: L.tree_util.tree_unflatten(tree, a[:-1])(a[-1]))(*res, out)
    return str(fwd), str(bwd)
  (f_ours, b_ours), (f_theirs, b_theirs) = texts(SC), texts(JX)
  assert f_ours == f_theirs, f"\n--- stagecraft\n{f_ours}\n--- JAX\n{f_theirs}"
  assert b_ours == b_theirs, f"\n--- stagecraft\n{b_ours}\n--- JAX\n{b_theirs}"


@pytest.mark.parametrize("case", ["layer", "dict", "tuple_and_scalar"])
def test_vjp_args_res_and_opaque_residuals_as_jax(case):
  # JAX 0.10's VJP attributes: `args_res` has one entry per argument, its containers as
  # tuples (a dict's values in key order), NotNeeded() where the backward pass does not read
  # the argument verbatim; `opaque_residuals` the other residuals.
  def make(m):
    L, N, _ = m
    if case == "layer":
      return L.vjp(lambda W, x: N.tanh(x @ W), N.ones((3, 3)), N.ones((2, 3)))[1]
    if case == "dict":
      return L.vjp(lambda d: d["bye"] @ d["hi"],
                   {"hi": N.ones((4, 5)), "bye": 2 * N.ones((3, 4))})[1]
    return L.vjp(lambda d, e: N.sin(d[0]) * e, (N.ones(2), N.ones(2)), 1.0)[1]
  ours, theirs = make(SC), make(JX)
  shape = lambda t: sc.tree_util.tree_map(   # noqa: E731
      lambda x: "NotNeeded" if type(x).__name__ == "NotNeeded" else np.shape(x), t,
      is_leaf=lambda x: type(x).__name__ == "NotNeeded")
  assert shape(ours.args_res) == jax.tree_util.tree_map(
      lambda x: "NotNeeded" if type(x).__name__ == "NotNeeded" else np.shape(x),
      theirs.args_res, is_leaf=lambda x: type(x).__name__ == "NotNeeded")
  assert [np.shape(r) for r in ours.opaque_residuals] == [
      np.shape(r) for r in theirs.opaque_residuals]
  for a, b in zip(ours.opaque_residuals, theirs.opaque_residuals):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


def _pair(x, d):
  return (x * d["y"], {"z": (x, d["y"])})


@pytest.mark.parametrize("ct", [
    lambda m: m.ones(2),                                        # leaf for a tuple
    lambda m: (m.ones(2),),                                     # shorter tuple
    lambda m: [m.ones(2), {"z": (m.ones(2), m.ones(()))}],      # list for a tuple
    lambda m: (m.ones(2), {"z": [m.ones(2), m.ones(())]}),      # nested list
    lambda m: (m.ones(2), {"w": (m.ones(2), m.ones(()))}),      # other dict keys
    lambda m: (m.ones(3), {"z": (m.ones(2), m.ones(()))}),      # shape
    lambda m: (m.ones(2), {"z": (m.ones(2), m.ones((), m.int32))}),   # dtype
])
def test_vjp_cotangent_errors_as_jax(ct):
  """Cotangents of the wrong structure or type raise JAX 0.10's ValueError, word for word
  (the same function object, so the same source location in the message)."""
  import jax
  import jax.numpy as jjnp
  msgs = []
  for lib, m in ((sc, jnp), (jax, jjnp)):
    _, f_vjp = lib.vjp(_pair, m.ones(2), {"y": m.float32(2.0)})
    with pytest.raises(ValueError) as e:
      f_vjp(ct(m))
    msgs.append(str(e.value))
  assert msgs[0] == msgs[1]


# ---------------------------------------------------------------------------
# Weak types


def _weak_cases(ns):
  t, np_, _ = ns
  return {
      "grad weak": lambda: t.grad(lambda x: x * 2.)(1.0),
      "grad strong": lambda: t.grad(lambda x: x * 2.)(np.float32(1.0)),
      "value_and_grad": lambda: t.value_and_grad(lambda x: x * 2.)(1.0),
      "jvp weak": lambda: t.jvp(lambda x: x * 2., (1.0,), (1.0,)),
      "jvp strong tangent": lambda: t.jvp(lambda x: x * 2., (1.0,), (np.float32(1.0),)),
      "hessian": lambda: t.hessian(lambda x: x ** 3)(2.0),
      "jacfwd": lambda: t.jacfwd(lambda x: x ** 3)(2.0),
      "jacrev": lambda: t.jacrev(lambda x: x ** 3)(2.0),
      "holomorphic": lambda: t.grad(lambda z: z * z, holomorphic=True)(1.0 + 2j),
      "complex abs": lambda: t.grad(lambda z: np_.abs(z) ** 2)(1.0 + 2j),
      "jit grad": lambda: t.jit(t.grad(lambda x: x * 2.))(1.0),
      "mixed args": lambda: t.grad(lambda x, y: x * y, argnums=(0, 1))(1.0, np.float32(3)),
      "vjp weak ct": lambda: t.vjp(lambda x: x * 2., 1.0)[1](1.0),
      "vjp strong ct": lambda: t.vjp(lambda x: x * 2., 1.0)[1](np.float32(1.0)),
      "linearize": lambda: t.linearize(lambda x: x * 2., 1.0)[1](1.0),
      "grad sin": lambda: t.grad(np_.sin)(1.0),
  }


def _weak(x) -> bool:
  return getattr(x, "weak_type", type(x) in (int, float, complex))


@pytest.mark.parametrize("case", list(_weak_cases(SC)))
def test_weak_types_through_differentiation(case):
  ours, theirs = _weak_cases(SC)[case](), _weak_cases(JX)[case]()
  lo, lt = sc.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs)
  assert len(lo) == len(lt)
  for a, b in zip(lo, lt):
    assert _weak(a) == _weak(b), (case, a, b)
    assert np.asarray(a).dtype == np.asarray(b).dtype
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
    if isinstance(b, jax.Array):
      assert repr(a) == repr(b)


# ---------------------------------------------------------------------------
# Tracers are Arrays


def test_tracers_are_arrays_under_every_transformation():
  seen = []

  def f(x):
    seen.append(isinstance(x, sc.Array))
    return x * 2

  sc.jit(f)(1.0)
  sc.grad(f)(1.0)
  sc.vmap(f)(jnp.ones(2))
  sc.jvp(f, (1.0,), (1.0,))
  sc.make_jaxpr(f)(1.0)
  sc.pmap(f)(jnp.ones((1,)))
  assert seen == [True] * 6
  assert not isinstance(np.ones(2), sc.Array)
  assert isinstance(jnp.ones(2), sc.Array)


# ---------------------------------------------------------------------------
# The rest of the differentiation API


def test_jacobian_is_reverse_mode_jacobian():
  def f(np_):
    return lambda x, y: {"a": np_.sin(x) * y, "b": np_.sum(x ** 2)}
  x = np.array([0.3, -1.2, 2.0], np.float32)
  y = np.float32(1.5)
  for argnums in (0, (0, 1)):
    assert_trees_allclose(sc.jacobian(f(jnp), argnums)(x, y),
                          jax.jacobian(f(jjnp), argnums)(x, y), rtol=1e-6)


def _linear_fns(np_):
  w = np.arange(6.0, dtype=np.float32).reshape(2, 3)
  return {
      "scale_add": (lambda x, y: x * 2.0 + y, (np.ones(3, np.float32), np.ones(3, np.float32)),
                    np.array([1.0, 2.0, 3.0], np.float32)),
      "matmul": (lambda x: w @ x, (np.ones(3, np.float32),), np.array([1.0, -1.0], np.float32)),
      "pytree": (lambda x: {"s": np_.sum(x), "h": x[:2] * 3.0}, (np.ones(3, np.float32),),
                 {"s": np.float32(2.0), "h": np.array([1.0, 5.0], np.float32)}),
      "unused_arg": (lambda x, y: x.T, (np.ones((2, 3), np.float32), np.ones(4, np.float32)),
                     np.ones((3, 2), np.float32)),
      "weak": (lambda x, y: x * 2.0 + y, (1.0, 1.0), 3.0),
  }


@pytest.mark.parametrize("name", list(_linear_fns(jnp)))
def test_linear_transpose_equals_jax(name):
  f, primals, ct = _linear_fns(jnp)[name]
  fj, _, _ = _linear_fns(jjnp)[name]
  ours = sc.linear_transpose(f, *primals)(ct)
  theirs = jax.linear_transpose(fj, *primals)(ct)
  assert_trees_allclose(ours, theirs, rtol=1e-6)
  for a, b in zip(sc.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs)):
    assert repr(a) == repr(b)


def test_linear_transpose_errors():
  t = sc.linear_transpose(lambda x: x.astype(jnp.float16), jnp.ones(2))
  with pytest.raises(TypeError, match="cotangent type does not match function output"):
    t(jnp.ones(2, jnp.float32))
  with pytest.raises(TypeError, match="only supports"):
    sc.linear_transpose(lambda x: x.astype(jnp.int32), jnp.ones(2))
  with pytest.raises(ValueError, match="not linear"):
    sc.linear_transpose(lambda x: x * x, 1.0)(1.0)
  with pytest.raises(NotImplementedError, match="reduce_axes"):
    sc.linear_transpose(lambda x: x, 1.0, reduce_axes=("i",))


def test_reduce_axes_raises_as_jax():
  for t in (sc, jax):
    with pytest.raises(NotImplementedError, match="reduce_axes argument to grad is deprecated"):
      t.grad(lambda x: x, reduce_axes=("i",))
    with pytest.raises(NotImplementedError, match="reduce_axes argument to grad is deprecated"):
      t.value_and_grad(lambda x: x, reduce_axes=("i",))


def test_closure_convert_hoists_what_jax_hoists():
  counts = {}

  def outer(ns, y):
    t, np_, _ = ns
    f = lambda x: x * y + np_.arange(2.0)
    g, consts = t.custom_derivatives.closure_convert(f, 1.0) if t is jax else \
        sc.closure_convert(f, 1.0)
    counts.setdefault(t.__name__, []).append(len(consts))
    return np_.sum(g(2.0, *consts))
  for ns in (SC, JX):
    t = ns[0]
    v = outer(ns, 3.0)
    g = t.grad(lambda y: outer(ns, y))(3.0)
    counts[t.__name__].append((float(v), float(g)))
  assert counts["stagecraft"] == counts["jax"]


def test_closure_convert_inside_custom_vjp_as_in_jax_docs():
  def make(ns):
    t, np_, _ = ns
    cc = sc.closure_convert if t is sc else jax.closure_convert

    @functools.partial(t.custom_vjp, nondiff_argnums=(0,))
    def apply(f, x, *args):
      return f(x, *args)

    def fwd(f, x, *args):
      return f(x, *args), (x, args)

    def bwd(f, res, g):
      x, args = res
      _, pull = t.vjp(f, x, *args)
      return pull(g)
    apply.defvjp(fwd, bwd)

    def loss(w):
      f = lambda x: np_.tanh(x * w)
      conv, consts = cc(f, np.float32(1.0))
      return apply(conv, np.float32(0.7), *consts)
    return t, loss
  ts, ls = make(SC)
  tj, lj = make(JX)
  assert_trees_allclose(ts.grad(ls)(np.float32(1.3)), tj.grad(lj)(np.float32(1.3)), rtol=1e-6)


def test_custom_gradient_as_jax():
  def make(ns):
    t, np_, _ = ns
    cg = sc.custom_gradient if t is sc else jax.custom_gradient

    @cg
    def f(x):
      y = np_.sin(x)
      return y * x, lambda g: (g * (np_.cos(x) * x + y) * 2.0,)   # a deliberately scaled rule
    return t, f
  (ts, fs), (tj, fj) = make(SC), make(JX)
  x = np.float32(0.8)
  xs = np.linspace(-1, 1, 4).astype(np.float32)
  assert_trees_allclose(fs(x), fj(x), rtol=1e-6)
  assert_trees_allclose(ts.grad(fs)(x), tj.grad(fj)(x), rtol=1e-6)
  assert_trees_allclose(ts.jit(ts.grad(fs))(x), tj.jit(tj.grad(fj))(x), rtol=1e-6)
  assert_trees_allclose(ts.vmap(ts.grad(fs))(xs), tj.vmap(tj.grad(fj))(xs), rtol=1e-6)
  assert_trees_allclose(ts.grad(ts.grad(fs))(x), tj.grad(tj.grad(fj))(x), rtol=1e-5)


def test_linearize_has_aux_as_jax():
  def f(np_):
    return lambda x: (np_.sin(x) * 2.0, {"aux": np_.cos(x)})
  x = np.array([0.1, 0.2], np.float32)
  y, f_jvp, aux = sc.linearize(f(jnp), x, has_aux=True)
  yj, fj_jvp, auxj = jax.linearize(f(jjnp), x, has_aux=True)
  assert_trees_allclose((y, aux), (yj, auxj), rtol=1e-6)
  assert_trees_allclose(f_jvp(np.ones(2, np.float32)), fj_jvp(np.ones(2, np.float32)), rtol=1e-6)
