"""custom_vmap and sequential_vmap (stagecraft.custom_batching) against JAX 0.10.2's
jax.custom_batching, run side by side in each test: values, shapes and dtypes; the rule's
calls (axis_size, in_batched, argument shapes) recorded by a side effect; printed params;
error types and messages; JAX's documented examples."""
import re

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from jax import custom_batching as jcb

import stagecraft as sc
import stagecraft.numpy as snp
from stagecraft import custom_batching as scb


class NS:
  """One implementation: the API module (`jax` or `stagecraft`), its numpy and its
  custom_batching."""

  def __init__(self, name, api, np_, cb):
    self.name, self.api, self.np, self.cb = name, api, np_, cb

  def __repr__(self):
    return self.name


JAX = NS("jax", jax, jjnp, jcb)
SC = NS("stagecraft", sc, snp, scb)


def _leaves(tree):
  return jax.tree_util.tree_leaves(tree)


def assert_same(got, want):
  """Same pytree structure, shapes, dtypes and (close) values."""
  g, w = _leaves(got), _leaves(want)
  assert len(g) == len(w), (got, want)
  for a, b in zip(g, w):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def make_f(ns, log):
  """f(x, y) = sin(x) * y whose rule computes cos(xs) * ys instead, recording its calls."""
  @ns.cb.custom_vmap
  def f(x, y):
    return ns.np.sin(x) * y

  @f.def_vmap
  def f_rule(axis_size, in_batched, xs, ys):
    log.append((axis_size, list(in_batched), np.shape(xs), np.shape(ys)))
    return ns.np.cos(xs) * ys, bool(in_batched[0] or in_batched[1])

  return f


def run_both(scenario, make=make_f):
  """Runs `scenario(ns, f)` with JAX and with stagecraft; returns both (out, rule calls)."""
  res = {}
  for ns in (JAX, SC):
    log = []
    f = make(ns, log)
    res[ns.name] = (scenario(ns, f), log)
  return res["jax"], res["stagecraft"]


def errors_of_both(scenario, make=make_f):
  """The exception each implementation raises for `scenario(ns, f)`."""
  out = {}
  for ns in (JAX, SC):
    f = make(ns, [])
    with pytest.raises(Exception) as info:
      scenario(ns, f)
    out[ns.name] = info.value
  return out["jax"], out["stagecraft"]


def assert_same_error(scenario, make=make_f):
  want, got = errors_of_both(scenario, make)
  assert type(got) is type(want), (got, want)
  assert str(got) == str(want)
  return got


X = np.arange(3.0, dtype=np.float32)
Y = np.arange(1.0, 4.0, dtype=np.float32)
X23 = np.arange(6.0, dtype=np.float32).reshape(2, 3)

SCENARIOS = {
    "eager": lambda ns, f: f(1.0, 2.0),
    "eager_arrays": lambda ns, f: f(X, Y),
    "jit": lambda ns, f: ns.api.jit(f)(X, Y),
    "vmap": lambda ns, f: ns.api.vmap(f)(X, Y),
    "vmap_in_axes_none_y": lambda ns, f: ns.api.vmap(f, in_axes=(0, None))(X, 2.0),
    "vmap_in_axes_none_x": lambda ns, f: ns.api.vmap(f, in_axes=(None, 0))(1.0, Y),
    "vmap_nothing_batched": lambda ns, f: ns.api.vmap(f, in_axes=(None, None),
                                                      axis_size=3)(1.0, 2.0),
    "vmap_in_axes_1": lambda ns, f: ns.api.vmap(f, in_axes=(1, None))(X23, Y[:2]),
    "vmap_out_axes_1": lambda ns, f: ns.api.vmap(f, in_axes=(1, 0), out_axes=1)(X23, X23.T),
    "vmap_vmap": lambda ns, f: ns.api.vmap(ns.api.vmap(f))(X23, X23 + 1),
    "vmap_vmap_crossed": lambda ns, f: ns.api.vmap(ns.api.vmap(f, in_axes=(0, None)),
                                                   in_axes=(None, 0))(X, Y[:2]),
    "vmap_vmap_inner_unbatched": lambda ns, f: ns.api.vmap(
        ns.api.vmap(f, in_axes=(None, None), axis_size=2))(X, Y),
    "jit_vmap": lambda ns, f: ns.api.jit(ns.api.vmap(f))(X, Y),
    "vmap_jit": lambda ns, f: ns.api.vmap(ns.api.jit(f))(X, Y),
    "eval_shape_vmap": lambda ns, f: np.zeros(
        ns.api.eval_shape(ns.api.vmap(f), X, Y).shape, np.float32),
    "jvp": lambda ns, f: ns.api.jvp(f, (1.0, 2.0), (1.0, 0.5)),
    "jvp_arrays": lambda ns, f: ns.api.jvp(f, (X, Y), (Y, X)),
    "jvp_vmap": lambda ns, f: ns.api.jvp(ns.api.vmap(f), (X, Y), (X, Y)),
    "jvp_vmap_in_axes_none": lambda ns, f: ns.api.jvp(
        ns.api.vmap(f, in_axes=(0, None)), (X, 2.0), (X, 1.0)),
    "vmap_jvp_constant_tangents": lambda ns, f: ns.api.vmap(
        lambda a, b: ns.api.jvp(f, (a, b), (1.0, 1.0)))(X, Y),
    "vmap_jvp_batched_tangent_only": lambda ns, f: ns.api.vmap(
        lambda t: ns.api.jvp(f, (1.0, 2.0), (t, 0.0)))(X),
    "vmap_jvp_all_batched": lambda ns, f: ns.api.vmap(
        lambda a, b: ns.api.jvp(f, (a, b), (b, a)))(X, Y),
    # JAX's algorithm: x is batched as a primal only, y as both; the rule runs inside a vmap
    # over x and its batched output gets that vmap's axis too (JAX returns f32[3,3]).
    "vmap_jvp_mixed": lambda ns, f: ns.api.vmap(
        lambda a, b: ns.api.jvp(f, (a, b), (1.0, b)))(X, Y),
    "jit_vmap_jvp": lambda ns, f: ns.api.jit(ns.api.vmap(
        lambda a, b: ns.api.jvp(f, (a, b), (b, a))))(X, Y),
    "jvp_jvp": lambda ns, f: ns.api.jvp(
        lambda x: ns.api.jvp(lambda z: f(z, 2.0), (x,), (1.0,))[1], (1.0,), (1.0,)),
    "vmap_jvp_jvp": lambda ns, f: ns.api.vmap(lambda x: ns.api.jvp(
        lambda z: ns.api.jvp(lambda w: f(w, 2.0), (z,), (1.0,))[1], (x,), (1.0,)))(X),
    "grad_of_vmap": lambda ns, f: ns.api.grad(lambda x: ns.api.vmap(f)(x, Y).sum())(X),
    "jit_grad_of_vmap": lambda ns, f: ns.api.jit(ns.api.grad(
        lambda x, y: ns.api.vmap(f)(x, y).sum(), argnums=(0, 1)))(X, Y),
    "jacfwd_of_vmap": lambda ns, f: ns.api.jacfwd(lambda x: ns.api.vmap(f)(x, Y))(X),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_values_and_rule_calls_match_jax(name):
  (want, want_log), (got, got_log) = run_both(SCENARIOS[name])
  assert_same(got, want)
  assert got_log == want_log


def test_rule_call_values_are_what_the_scenarios_say():
  # The comparison above cannot pass vacuously: the rule does run, with these arguments.
  _, (out, log) = run_both(SCENARIOS["vmap_in_axes_none_y"])
  assert log == [(3, [True, False], (3,), ())]
  np.testing.assert_allclose(out, np.cos(X) * 2.0, rtol=1e-6)
  _, (out, log) = run_both(SCENARIOS["vmap_vmap_crossed"])
  assert log == [(3, [True, False], (3,), ())]          # once: the inner vmap's rule
  _, (out, log) = run_both(SCENARIOS["vmap_nothing_batched"])
  assert log == []                                       # nothing batched: f itself
  np.testing.assert_allclose(out, np.full(3, np.sin(1.0) * 2.0), rtol=1e-6)
  _, (out, log) = run_both(SCENARIOS["vmap_jvp_constant_tangents"])
  assert log == [(3, [False, False], (), ())]            # the rule runs inside a vmap
  _, (out, log) = run_both(SCENARIOS["eager"])
  assert log == []


def test_jit_of_vmap_calls_the_rule_once_per_trace():
  for ns in (JAX, SC):
    log = []
    f = make_f(ns, log)
    g = ns.api.jit(ns.api.vmap(f))
    g(X, Y)
    g(X + 1, Y)
    assert len(log) == 1, ns
    g(X23, X23)
    assert len(log) == 2, ns


# ---------------------------------------------------------------------------
# Printed jaxprs


def _param_lines(text):
  """The custom_vmap_call equations' param lines (sub-jaxpr variable names aside)."""
  return [ln.strip() for ln in text.splitlines()
          if re.match(r"\s*(in_tree|out_tree|rule)=", ln)]


@pytest.mark.parametrize("which", ["f", "jvp", "vmap"])
def test_printed_jaxpr_matches_jax(which):
  texts = {}
  for ns in (JAX, SC):
    f = make_f(ns, [])
    fun = {"f": f,
           "jvp": lambda x, y: ns.api.jvp(f, (x, y), (x, y)),
           "vmap": ns.api.vmap(f)}[which]
    args = (X, Y) if which == "vmap" else (1.0, 2.0)
    texts[ns.name] = str(ns.api.make_jaxpr(fun)(*args))
  if which == "vmap":
    assert texts["stagecraft"] == texts["jax"]
    assert "custom_vmap_call" not in texts["stagecraft"]
  else:
    assert "custom_vmap_call[" in texts["stagecraft"]
    assert _param_lines(texts["stagecraft"]) == _param_lines(texts["jax"])
    assert len(_param_lines(texts["jax"])) == 3


def test_jit_lowers_the_function_inline():
  f = make_f(SC, [])
  text = sc.jit(f).lower(X, Y).as_text()
  assert "sine" in text and "custom_vmap" not in text
  assert_same(sc.jit(f)(X, Y), jax.jit(make_f(JAX, []))(X, Y))


# ---------------------------------------------------------------------------
# Pytrees and keyword arguments


def make_tree_f(ns, log):
  @ns.cb.custom_vmap
  def p(d, t):
    return {"s": d["a"] + t[0], "o": d["b"] * t[1]}

  @p.def_vmap
  def p_rule(axis_size, in_batched, d, t):
    log.append((axis_size, in_batched))
    out = {"s": d["a"] + t[0] + 1.0, "o": d["b"] * t[1]}
    return out, {"s": in_batched[0]["a"] or in_batched[1][0],
                 "o": in_batched[0]["b"] or in_batched[1][1]}

  return p


def test_pytree_arguments_and_outputs():
  (want, want_log), (got, got_log) = run_both(
      lambda ns, p: ns.api.vmap(p, in_axes=({"a": 0, "b": None}, (None, 0)))(
          {"a": ns.np.asarray(X), "b": 2.0}, (1.0, ns.np.asarray(Y))), make_tree_f)
  assert_same(got, want)
  assert got_log == want_log == [(3, [{"a": True, "b": False}, (False, True)])]
  assert set(got) == {"s", "o"}


def make_kw_f(ns, log):
  @ns.cb.custom_vmap
  def h(x, y=2.0):
    return x * y

  @h.def_vmap
  def h_rule(axis_size, in_batched, x, y):
    log.append((axis_size, in_batched))
    return x * y + 100.0, in_batched[0] or in_batched[1]

  return h


@pytest.mark.parametrize("call", [
    lambda ns, h: h(1.0, y=3.0),
    lambda ns, h: h(1.0),
    lambda ns, h: h(x=1.0, y=3.0),
    lambda ns, h: ns.api.vmap(lambda x: h(x, y=3.0))(ns.np.asarray(X)),
    lambda ns, h: ns.api.vmap(lambda x: h(x))(ns.np.asarray(X)),
    lambda ns, h: ns.api.vmap(lambda y: h(1.0, y=y))(ns.np.asarray(Y)),
])
def test_keyword_arguments(call):
  # (jnp inputs: JAX's rule would see NumPy arrays and return float64 NumPy results)
  (want, want_log), (got, got_log) = run_both(call, make_kw_f)
  assert_same(got, want)
  assert got_log == want_log


@pytest.mark.parametrize("call", [
    lambda ns, h: h(1.0, z=3.0),            # unexpected keyword
    lambda ns, h: h(),                      # missing argument
    lambda ns, h: h(1.0, 2.0, 3.0),         # too many
])
def test_argument_binding_errors(call):
  e = assert_same_error(call, make_kw_f)
  assert "could not be resolved to positional-only arguments" in str(e)


def test_keyword_only_parameter_error():
  def make(ns, log):
    @ns.cb.custom_vmap
    def kw(x, *, y):
      return x * y
    kw.def_vmap(lambda n, b, x: (x, True))
    return kw
  e = assert_same_error(lambda ns, kw: kw(1.0, y=2.0), make)
  assert str(e).endswith("could not be resolved to positions: y")


# ---------------------------------------------------------------------------
# Errors


def test_no_rule_is_an_attribute_error_even_outside_vmap():
  def make(ns, log):
    @ns.cb.custom_vmap
    def g(x, y):
      return x * y
    return g
  for call in (lambda ns, g: g(1.0, 2.0), lambda ns, g: ns.api.vmap(g)(X, Y)):
    e = assert_same_error(call, make)
    assert str(e) == "No batching rule defined for custom_vmap function g using def_vmap."
    assert type(e) is AttributeError


def _make_bad(rule):
  def make(ns, log):
    @ns.cb.custom_vmap
    def f(x, y):
      return x + y
    f.def_vmap(rule)
    return f
  return make


def bad_pair_out(n, ib, x, y):
  return (x, x), True


def bad_spec(n, ib, x, y):
  return x, (True,)


def bad_list_out(n, ib, x, y):
  return [x], [True]


def bad_not_a_pair(n, ib, x, y):
  return 3


@pytest.mark.parametrize("rule,first_line", [
    (bad_pair_out, "structure of output value and output batching specification returned by "
                   "custom vmap rule (bad_pair_out) do not match."),
    (bad_spec, "structure of output value and output batching specification returned by "
               "custom vmap rule (bad_spec) do not match."),
    (bad_list_out, "structure of output returned by custom vmap rule (bad_list_out) does not "
                   "match that of original custom-vmapped function."),
    (bad_not_a_pair, "cannot unpack non-iterable int object"),
])
def test_rule_output_errors_match_jax(rule, first_line):
  e = assert_same_error(lambda ns, f: ns.api.vmap(f)(X, Y), _make_bad(rule))
  assert str(e).splitlines()[0] == first_line


def test_rule_output_error_text():
  e = assert_same_error(lambda ns, f: ns.api.vmap(f)(X, Y), _make_bad(bad_pair_out))
  assert str(e).splitlines()[1:] == ["Output values: PyTreeDef((*, *))",
                                     "Batching spec: PyTreeDef(*)"]


def test_unbatched_output_spec_broadcasts_like_jax():
  # out_batched False for a batched value: it is taken as unbatched (and broadcast), as JAX.
  def rule(n, ib, x, y):
    return x, False
  (want, _), (got, _) = run_both(lambda ns, f: ns.api.vmap(f)(X[:2], Y[:2]), _make_bad(rule))
  assert_same(got, want)
  assert np.shape(got) == (2, 2)


def test_batched_output_without_batch_axis_is_explained():
  # JAX fails later with an IndexError; stagecraft names the rule and the output.
  def rule_without_axis(n, ib, x, y):
    return x[0], True
  f = _make_bad(rule_without_axis)(SC, [])
  with pytest.raises(ValueError, match=re.escape(
      "custom vmap rule (rule_without_axis) marked its output as batched, but its value "
      "f32[] has no leading batch axis of size 3.")):
    sc.vmap(f)(X, Y)


def test_closing_over_a_batched_value():
  def outer(ns):
    def g(x, y):
      @ns.cb.custom_vmap
      def ff(a):
        return a * y

      @ff.def_vmap
      def ff_rule(n, ib, a):
        return a * y, True
      return ff(x)
    return g
  with pytest.raises(AssertionError):            # JAX: a bare assertion
    jax.vmap(outer(JAX))(X, Y)
  with pytest.raises(ValueError, match="custom_vmap function ff closes over a value that is "
                                       "batched by this vmap"):
    sc.vmap(outer(SC))(X, Y)
  # Closing over an unbatched value is fine.
  assert_same(sc.vmap(outer(SC), in_axes=(0, None))(X, 3.0),
              jax.vmap(outer(JAX), in_axes=(0, None))(X, 3.0))


@pytest.mark.parametrize("call", [
    lambda ns, f: ns.api.grad(f)(1.0, 2.0),
    lambda ns, f: ns.api.vmap(ns.api.grad(f))(X, Y),
    lambda ns, f: ns.api.linearize(lambda x: f(x, 2.0), 1.0),
    lambda ns, f: ns.api.vjp(f, 1.0, 2.0),
    lambda ns, f: ns.api.jit(ns.api.grad(f))(1.0, 2.0),
    # JAX raises even when the result is unused or its gradient stopped.
    lambda ns, f: ns.api.grad(lambda x: ns.lax.stop_gradient(f(x, 2.0)) + x)(1.0),
    lambda ns, f: ns.api.grad(lambda x: x + (f(x, 2.0), 0.0)[1])(1.0),
])
def test_reverse_mode_is_unsupported_as_in_jax(call):
  def scenario(ns, f):
    ns.lax = ns.api.lax
    return call(ns, f)
  e = assert_same_error(scenario)
  assert type(e) is ValueError
  assert str(e).startswith("Linearization failed to produce known values for all output "
                           "primals.")


def test_grad_with_respect_to_other_arguments_only():
  # No tangent reaches the custom_vmap function: grad works.
  (want, _), (got, _) = run_both(lambda ns, f: ns.api.grad(lambda z: z * f(1.0, 2.0))(3.0))
  assert_same(got, want)


# ---------------------------------------------------------------------------
# JAX's documented examples


def test_docstring_example_custom_vmap():
  def make(ns, log):
    @ns.cb.custom_vmap
    def f(x, y):
      return x + y

    @f.def_vmap
    def f_vmap_rule(axis_size, in_batched, xs, ys):
      assert all(in_batched)
      assert xs.shape[0] == axis_size
      assert ys.shape[0] == axis_size
      out_batched = True
      return xs * ys, out_batched
    return f
  (want, _), (got, _) = run_both(
      lambda ns, f: ns.api.vmap(f)(ns.np.arange(3), ns.np.arange(1, 4)), make)
  assert_same(got, want)
  assert np.asarray(got).tolist() == [0, 2, 6] and np.asarray(got).dtype == np.int32
  assert scb.custom_vmap(lambda x: x).def_vmap(bad_spec) is bad_spec   # returns the rule


def test_docstring_example_with_custom_vjp():
  def make(ns, log):
    @ns.api.custom_vjp
    @ns.cb.custom_vmap
    def f(x, y):
      return ns.np.sin(x) * y

    @f.def_vmap
    def f_vmap_rule(axis_size, in_batched, xs, ys):
      log.append((axis_size, in_batched))
      return ns.np.cos(xs) * ys, True

    def f_fwd(x, y):
      return f(x, y), (ns.np.cos(x), ns.np.sin(x), y)

    def f_bwd(res, g):
      cos_x, sin_x, y = res
      return (cos_x * g * y, sin_x * g)

    f.defvjp(f_fwd, f_bwd)
    return f

  scenarios = [
      lambda ns, f: ns.api.vmap(f)(ns.np.zeros(3), ns.np.ones(3)),
      lambda ns, f: ns.api.grad(f)(ns.np.zeros(()), ns.np.ones(())),
      lambda ns, f: ns.api.vmap(ns.api.grad(f))(X, Y),
      lambda ns, f: ns.api.jit(ns.api.vmap(ns.api.grad(f, argnums=(0, 1))))(X, Y),
  ]
  for s in scenarios:
    (want, want_log), (got, got_log) = run_both(s, make)
    assert_same(got, want)
    assert got_log == want_log
  (_, _), (got, log) = run_both(scenarios[0], make)
  np.testing.assert_allclose(got, [1.0, 1.0, 1.0])
  assert log == [(3, [True, True])]


def test_custom_vmap_of_custom_jvp():
  def make(ns, log):
    @ns.cb.custom_vmap
    @ns.api.custom_jvp
    def g(x):
      return ns.np.sin(x)

    @g.defjvp          # forwarded to the custom_jvp inside, as JAX does
    def g_jvp(p, t):
      return g(p[0]), 100.0 * t[0]

    @g.def_vmap
    def g_rule(n, ib, x):
      log.append((n, ib))
      return ns.np.cos(x), True
    return g
  for s in [lambda ns, g: ns.api.jvp(g, (1.0,), (1.0,)),
            lambda ns, g: ns.api.vmap(g)(X),
            lambda ns, g: ns.api.vmap(lambda x: ns.api.jvp(g, (x,), (1.0,)))(X)]:
    (want, want_log), (got, got_log) = run_both(s, make)
    assert_same(got, want)
    assert got_log == want_log
  _, (got, _) = run_both(lambda ns, g: ns.api.jvp(g, (1.0,), (1.0,)), make)
  assert float(got[1]) == 100.0


def test_wrapper_keeps_name_and_doc():
  def fun(x):
    """Doc."""
    return x
  for cb in (jcb, scb):
    f = cb.custom_vmap(fun)
    assert (f.__name__, f.__doc__, f.fun) == ("fun", "Doc.", fun)


# ---------------------------------------------------------------------------
# sequential_vmap


def make_seq(ns, log):
  @ns.cb.sequential_vmap
  def s(d, t):
    return {"s": d["a"] @ t, "k": t.sum()}
  return s


A = np.arange(24.0, dtype=np.float32).reshape(4, 2, 3)
T = np.arange(6.0, dtype=np.float32).reshape(2, 3)

SEQ_SCENARIOS = {
    "eager": lambda ns, s: s({"a": A[0]}, T[0]),
    "vmap_in_axes_none": lambda ns, s: ns.api.vmap(s, in_axes=({"a": 0}, None))({"a": A}, T[0]),
    "vmap_all": lambda ns, s: ns.api.vmap(s)({"a": A[:2]}, T),
    "vmap_vmap": lambda ns, s: ns.api.vmap(ns.api.vmap(s, in_axes=({"a": 0}, None)),
                                           in_axes=(None, 0))({"a": A}, T),
    "jit_vmap": lambda ns, s: ns.api.jit(ns.api.vmap(s, in_axes=({"a": 0}, None)))(
        {"a": A}, T[0]),
    "jvp_vmap": lambda ns, s: ns.api.jvp(ns.api.vmap(s, in_axes=({"a": 0}, None)),
                                         ({"a": A}, T[0]), ({"a": A}, T[1])),
    "vmap_jvp": lambda ns, s: ns.api.vmap(lambda x: ns.api.jvp(
        lambda y: s({"a": y}, T[0]), (x,), (x,)))(A),
}


@pytest.mark.parametrize("name", sorted(SEQ_SCENARIOS))
def test_sequential_vmap_matches_jax(name):
  (want, _), (got, _) = run_both(SEQ_SCENARIOS[name], make_seq)
  assert_same(got, want)


def test_sequential_vmap_has_no_reverse_mode_as_in_jax():
  # The loop's body calls the custom_vmap function itself, which cannot be linearized.
  e = assert_same_error(lambda ns, s: ns.api.grad(lambda a: ns.api.vmap(
      s, in_axes=({"a": 0}, None))({"a": a}, T[0])["s"].sum())(A), make_seq)
  assert str(e).startswith("Linearization failed")


def test_sequential_vmap_docstring_example_runs_a_loop():
  def make(ns, log):
    @ns.cb.sequential_vmap
    def f(x):
      return x + 1
    return f
  (want, _), (got, _) = run_both(lambda ns, f: ns.api.vmap(f)(ns.np.arange(3)), make)
  assert_same(got, want)
  assert np.asarray(got).tolist() == [1, 2, 3]
  names = {}
  for ns in (JAX, SC):
    jaxpr = ns.api.make_jaxpr(ns.api.vmap(make(ns, [])))(ns.np.arange(3))
    names[ns.name] = [e.primitive.name for e in jaxpr.eqns]
    assert jaxpr.eqns[0].params["length"] == 3
  assert names["stagecraft"] == names["jax"] == ["scan"]


def test_partial_functions_are_named_by_their_function():
  import functools

  def mul(x, y):
    return x * y

  def make(ns, log):
    return ns.cb.custom_vmap(functools.partial(mul, 2.0))
  e = assert_same_error(lambda ns, f: f(1.0), make)
  assert str(e) == "No batching rule defined for custom_vmap function mul using def_vmap."

  def make_with_rule(ns, log):
    f = make(ns, log)
    f.def_vmap(lambda n, b, y: (y, True))
    return f
  e = assert_same_error(lambda ns, f: f(y=1.0), make_with_rule)   # a partial's signature is opaque
  assert str(e).endswith("could not be resolved to positions: y")
  (want, _), (got, _) = run_both(lambda ns, f: f(3.0), make_with_rule)
  assert_same(got, want)
