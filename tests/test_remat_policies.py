"""`checkpoint` policies, `checkpoint_name` and `print_saved_residuals`, against JAX 0.10.2.

Each model below is written once against a namespace `m` (JAX's or stagecraft's functions),
so both libraries trace the same source lines: the residual reports must then agree line for
line, file:line:column included. For every policy the gradients must equal JAX's and the
un-checkpointed gradient, and the compiled gradient's temporary memory must be within 10% of
JAX's.
"""
from __future__ import annotations

import contextlib
import io
import types

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from jax import ad_checkpoint as jax_ac

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import ad_checkpoint as ac
from stagecraft import lax

JX = types.SimpleNamespace(
    np=jjnp, lax=jax.lax, checkpoint=jax.checkpoint, policies=jax.checkpoint_policies,
    name=jax_ac.checkpoint_name, print_saved_residuals=jax_ac.print_saved_residuals,
    grad=jax.grad, jit=jax.jit, vmap=jax.vmap, make_jaxpr=jax.make_jaxpr)
SC = types.SimpleNamespace(
    np=jnp, lax=lax, checkpoint=sc.checkpoint, policies=ac.checkpoint_policies,
    name=ac.checkpoint_name, print_saved_residuals=ac.print_saved_residuals,
    grad=sc.grad, jit=sc.jit, vmap=sc.vmap, make_jaxpr=sc.make_jaxpr)

NO_CHECKPOINT = "no checkpoint"

# (id, policy built from a library's `checkpoint_policies`)
POLICIES = [
    ("None", lambda p: None),
    ("everything_saveable", lambda p: p.everything_saveable),
    ("nothing_saveable", lambda p: p.nothing_saveable),
    ("dots_saveable", lambda p: p.dots_saveable),
    ("checkpoint_dots", lambda p: p.checkpoint_dots),
    ("dots_with_no_batch_dims_saveable", lambda p: p.dots_with_no_batch_dims_saveable),
    ("save_only_these_names", lambda p: p.save_only_these_names("a0", "z1", "scores", "z")),
    ("save_any_names_but_these", lambda p: p.save_any_names_but_these("a1", "probs")),
    ("save_anything_except_these_names",
     lambda p: p.save_anything_except_these_names("a0")),
    ("save_from_both_policies", lambda p: p.save_from_both_policies(
        p.dots_with_no_batch_dims_saveable, p.save_only_these_names("a1", "probs", "h"))),
]


# ---------------------------------------------------------------------------
# The models, written once for both libraries


def mlp(m, policy, params, x):
  def net(params, x):
    for i, (w, b) in enumerate(params):
      x = m.name(m.np.tanh(m.name(x @ w, f"z{i}") + b), f"a{i}")
    return x
  if policy is not NO_CHECKPOINT:
    net = m.checkpoint(net, policy=policy)
  return m.np.sum(net(params, x) ** 2)


def rnn(m, policy, params, h0, xs):
  w, u, b = params

  def cell(h, x):
    z = m.name(x @ w + h @ u + b, "z")
    h = m.name(m.np.tanh(z), "h")
    return h, h
  if policy is not NO_CHECKPOINT:
    cell = m.checkpoint(cell, policy=policy)
  _, hs = m.lax.scan(cell, h0, xs)
  return m.np.sum(hs ** 2)


def attention(m, policy, q, k, v):
  def block(q, k, v):
    s = m.name(q @ m.np.swapaxes(k, -1, -2), "scores")
    s = s - m.lax.stop_gradient(m.np.max(s, axis=-1, keepdims=True))
    e = m.np.exp(s)
    p = m.name(e / m.np.broadcast_to(m.np.sum(e, axis=-1, keepdims=True), e.shape), "probs")
    return p @ v
  if policy is not NO_CHECKPOINT:
    block = m.checkpoint(block, policy=policy)
  return m.np.sum(m.np.tanh(block(q, k, v)))


def _args():
  rs = np.random.RandomState(0)
  f32 = lambda *s, scale=1.0: (rs.randn(*s) * scale).astype(np.float32)
  mlp_args = ([(f32(4, 8, scale=0.5), f32(8)), (f32(8, 8, scale=0.5), f32(8))], f32(2, 4))
  rnn_args = ((f32(3, 4, scale=0.5), f32(4, 4, scale=0.5), f32(4)), f32(2, 4), f32(5, 2, 3))
  attn_args = (f32(2, 3, 4), f32(2, 5, 4), f32(2, 5, 4))
  return {"mlp": (mlp, mlp_args), "rnn": (rnn, rnn_args), "attention": (attention, attn_args)}


MODELS = _args()


def _grads(m, model, policy, args):
  return m.grad(lambda *a: model(m, policy, *a), argnums=tuple(range(len(args))))(*args)


def _residual_lines(m, model, policy, args) -> list[str]:
  buf = io.StringIO()
  with contextlib.redirect_stdout(buf):
    m.print_saved_residuals(lambda *a: model(m, policy, *a), *args)
  return buf.getvalue().splitlines()


def _assert_trees_close(got, want, rtol=2e-5, atol=2e-6):
  got_leaves, want_leaves = sc.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
  assert len(got_leaves) == len(want_leaves)
  for g, w in zip(got_leaves, want_leaves):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


@pytest.mark.parametrize("model_name", sorted(MODELS))
@pytest.mark.parametrize("policy_id,make_policy", POLICIES, ids=[p[0] for p in POLICIES])
def test_gradients_and_residuals_match_jax(model_name, policy_id, make_policy):
  model, args = MODELS[model_name]
  pj, ps = make_policy(JX.policies), make_policy(SC.policies)
  # (a) the same gradient as JAX's checkpoint with the same policy, and as no checkpoint.
  g_sc = _grads(SC, model, ps, args)
  _assert_trees_close(g_sc, _grads(JX, model, pj, args))
  _assert_trees_close(g_sc, _grads(SC, model, NO_CHECKPOINT, args))
  # (b) the same residuals, line for line (same source lines traced by both libraries).
  want = _residual_lines(JX, model, pj, args)
  got = _residual_lines(SC, model, ps, args)
  assert got == want
  assert any("from the argument" in line for line in got)
  assert all(__file__ in line for line in got if "from the argument" not in line)


@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_everything_saveable_saves_what_no_checkpoint_saves(model_name):
  model, args = MODELS[model_name]
  plain = _residual_lines(SC, model, NO_CHECKPOINT, args)
  assert _residual_lines(SC, model, SC.policies.everything_saveable, args) == plain
  # Saving nothing keeps no value computed inside the checkpointed (local) function.
  nothing = _residual_lines(SC, model, None, args)
  assert nothing != plain and not any("<locals>" in line for line in nothing)
  if model_name != "rnn":   # (the RNN's residuals are all outputs of the scan)
    assert any("<locals>" in line for line in plain)


def test_residual_report_policies_differ_as_in_jax():
  """The policies really select different residuals (so the comparisons above are not
  all the trivial 'arguments only' report)."""
  model, args = MODELS["mlp"]
  reports = {pid: _residual_lines(SC, model, make(SC.policies), args)
             for pid, make in POLICIES}
  assert len({tuple(r) for r in reports.values()}) >= 5
  dots = [line for line in reports["dots_saveable"] if "output of dot_general" in line]
  assert len(dots) == 2 and all(line.startswith("f32[2,8] ") for line in dots)
  named = [line for line in reports["save_only_these_names"] if "named" in line]
  assert [line.split(" from ")[0] for line in named] == ["f32[2,8] named 'a0'",
                                                         "f32[2,8] named 'z1'"]


# ---------------------------------------------------------------------------
# Memory: the compiled gradient's temporaries, ours against JAX's


def _deep_mlp_args():
  rs = np.random.RandomState(1)
  params = [((rs.randn(256, 256) * 0.05).astype(np.float32), rs.randn(256).astype(np.float32))
            for _ in range(6)]
  return params, rs.randn(128, 256).astype(np.float32)


def _temp_bytes(m, policy, params, x) -> int:
  f = m.jit(m.grad(lambda p, x: mlp(m, policy, p, x)))
  return f.lower(params, x).compile().memory_analysis().temp_size_in_bytes


def test_compiled_gradient_memory_matches_jax():
  params, x = _deep_mlp_args()
  ours, theirs = {}, {}
  for pid, make in [("no checkpoint", None), *POLICIES]:
    ps = NO_CHECKPOINT if make is None else make(SC.policies)
    pj = NO_CHECKPOINT if make is None else make(JX.policies)
    ours[pid], theirs[pid] = _temp_bytes(SC, ps, params, x), _temp_bytes(JX, pj, params, x)
  for pid in ours:
    assert abs(ours[pid] - theirs[pid]) <= 0.1 * theirs[pid], (pid, ours[pid], theirs[pid])
  # The measurement tells policies apart: saving everything keeps more than saving nothing.
  assert ours["everything_saveable"] > 2 * ours["nothing_saveable"]
  assert ours["save_only_these_names"] > ours["nothing_saveable"]


# ---------------------------------------------------------------------------
# Checkpoints in other transformations keep their gradients


@pytest.mark.parametrize("policy_id,make_policy", POLICIES[:4], ids=[p[0] for p in POLICIES[:4]])
def test_nested_jit_scan_vmap(policy_id, make_policy):
  rs = np.random.RandomState(2)
  x = rs.randn(3, 3).astype(np.float32)
  w = (rs.randn(3, 3) * 0.5).astype(np.float32)

  def programs(m):
    pol = make_policy(m.policies)
    inner = m.checkpoint(lambda x: m.np.sin(x @ w) @ w, policy=pol)
    nested = m.checkpoint(lambda x: m.np.tanh(inner(m.np.cos(x)) @ w), policy=pol)
    jitted = m.jit(lambda x: m.np.sin(x @ w) @ w)
    with_jit = m.checkpoint(lambda x: m.np.tanh(jitted(m.np.cos(x))), policy=pol)

    def with_scan(x):     # a scan inside the checkpoint
      return m.lax.scan(lambda c, _: (m.np.tanh(c @ w), m.np.sum(c)), x, None, length=3)[1]
    loss = lambda f: (lambda x: m.np.sum(f(x) ** 2))
    return [m.grad(loss(nested)), m.grad(loss(with_jit)),
            m.grad(loss(m.checkpoint(with_scan, policy=pol))),
            m.jit(m.grad(loss(nested))), m.vmap(m.grad(loss(with_jit))),
            m.grad(loss(m.vmap(nested)))]
  for ours, theirs in zip(programs(SC), programs(JX)):
    _assert_trees_close(ours(x), theirs(x))


def test_forwarded_outputs_and_second_order():
  rs = np.random.RandomState(3)
  x, w = rs.randn(3, 3).astype(np.float32), rs.randn(3, 3).astype(np.float32)

  def run(m):
    pol = m.policies.dots_saveable
    g = m.checkpoint(lambda x, w: (x, m.np.sin(x @ w), 2.0, x @ w), policy=pol)

    def loss(x, w):
      a, b, c, d = g(x, w)
      return m.np.sum(a * b) + c + m.np.sum(d * d)
    first = m.grad(loss, argnums=(0, 1))(x, w)
    second = m.grad(lambda x: m.np.sum(m.grad(loss)(x, w) ** 2))(x)
    return first, second
  _assert_trees_close(run(SC), run(JX), rtol=1e-4, atol=1e-5)


def test_grad_jaxpr_saves_dots_and_recomputes_the_rest():
  w = np.ones((3, 3), np.float32)
  f = sc.checkpoint(lambda x: jnp.sin(jnp.sin(x @ w)), policy=SC.policies.dots_saveable)
  jaxpr = sc.make_jaxpr(sc.grad(lambda x: jnp.sum(f(x))))(np.ones((2, 3), np.float32))
  remats = [e for e in jaxpr.jaxpr.eqns if e.primitive is ac.remat_p]
  assert len(remats) == 1 and remats[0].params["differentiated"]
  # The forward dot_general runs once, outside; the backward checkpoint reads its (rounded)
  # result and recomputes the sines, but no dot_general of the forward.
  assert [e.primitive.name for e in jaxpr.jaxpr.eqns][:2] == ["dot_general", "reduce_precision"]
  inner = [e.primitive.name for e in remats[0].params["jaxpr"].jaxpr.eqns]
  assert inner.count("sin") == 1 and inner.count("cos") == 2
  assert inner.count("dot_general") == 1      # only the transposed product


# ---------------------------------------------------------------------------
# checkpoint_name and the residual report on other inputs


def test_checkpoint_name_is_the_identity_everywhere():
  x = np.arange(4, dtype=np.float32)
  for m in (SC, JX):
    assert str(m.make_jaxpr(lambda x: m.name(x, "nm"))(x)) == \
        "{ lambda ; a:f32[4]. let b:f32[4] = name[name=nm] a in (b,) }"
  np.testing.assert_array_equal(SC.name(x, "a"), x)
  np.testing.assert_array_equal(sc.jit(lambda x: SC.name(x * 2, "a"))(x), x * 2)
  np.testing.assert_array_equal(sc.vmap(lambda x: SC.name(x * 2, "a"))(x.reshape(2, 2)),
                                x.reshape(2, 2) * 2)
  np.testing.assert_array_equal(sc.grad(lambda x: jnp.sum(SC.name(x * x, "a")))(x), 2 * x)
  tree = SC.name({"u": x, "v": (x, x)}, "t")
  assert sc.tree_util.tree_structure(tree) == sc.tree_util.tree_structure({"u": 1, "v": (1, 1)})
  text = sc.jit(lambda x: SC.name(x, "nm")).lower(x).as_text()
  assert "name" not in text.split("func.func")[1]        # lowered as a pass-through


def test_checkpoint_name_rejects_a_non_string_name():
  # JAX accepts it here and fails later, when the jaxpr is printed; stagecraft says so now.
  with pytest.raises(TypeError, match="checkpoint_name: name must be a str, got 3 of type int"):
    SC.name(np.ones(2, np.float32), 3)


def _program_with_names_and_consts(m):
  c = np.linspace(0.5, 1.5, 6, dtype=np.float32).reshape(2, 3)

  def f(x, *ys, scale=1.0):
    return m.np.sum(m.np.sin(x * ys[0] * scale) * c)
  return f


def test_residual_report_names_varargs_kwargs_and_constants():
  x, y = np.ones((2, 3), np.float32), np.full((2, 3), 2.0, np.float32)
  want = io.StringIO()
  with contextlib.redirect_stdout(want):
    JX.print_saved_residuals(_program_with_names_and_consts(JX), x, y, scale=np.float32(3))
  got = io.StringIO()
  with contextlib.redirect_stdout(got):
    SC.print_saved_residuals(_program_with_names_and_consts(SC), x, y, scale=np.float32(3))
  assert got.getvalue() == want.getvalue()
  assert "from the argument ys[0]" in got.getvalue()
  assert "from the argument scale" in got.getvalue()
  res = ac.saved_residuals(lambda p: jnp.sum(jnp.sin(p["w"])), {"w": x})
  assert [(a.shape, s.split(" from ")[0]) for a, s in res] == [((2, 3), "output of cos")]


# ---------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize("which", ["dots", "names", "custom"])
def test_offload_policies_compute_jax_gradients(which):
  """JAX's offloading policies run (stagecraft keeps offloaded residuals in device memory;
  on CPU that is host memory): the gradients equal JAX's and the un-checkpointed one."""
  x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)

  def grad(m, offload):
    def f(w):
      y = m.name(m.np.sin(w @ w), "y")
      z = m.name(m.np.sin(y), "z")
      return m.np.sum(m.np.sin(z) * w)
    pol = {"dots": lambda: m.policies.offload_dot_with_no_batch_dims("device", "pinned_host"),
           "names": lambda: m.policies.save_and_offload_only_these_names(
               names_which_can_be_saved=["y"], names_which_can_be_offloaded=["z"],
               offload_src="device", offload_dst="pinned_host"),
           "custom": lambda: lambda prim, *_, **__: offload("device", "pinned_host")}[which]()
    return m.jit(m.grad(m.checkpoint(f, policy=pol)))(x), m.grad(f)(x)
  ours, plain = grad(SC, ac.Offloadable)
  theirs, _ = grad(JX, jax_ac.Offloadable)
  np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.asarray(ours), np.asarray(plain), rtol=1e-5, atol=1e-6)


def _error(fn):
  try:
    fn()
  except Exception as e:   # noqa: BLE001 - the type and message are what is compared
    return type(e), str(e)
  raise AssertionError("no error raised")


def test_policy_errors_match_jax():
  x = np.ones((2, 2), np.float32)
  kw = dict(names_which_can_be_saved=["a"], names_which_can_be_offloaded=["a"],
            offload_src="device", offload_dst="pinned_host")
  assert _error(lambda: SC.policies.save_and_offload_only_these_names(**kw)) == \
      _error(lambda: JX.policies.save_and_offload_only_these_names(**kw))

  def bad_policy_grad(m, pol):
    return m.grad(m.checkpoint(lambda x: m.np.sum(m.np.sin(x @ x)), policy=pol))(x)
  for bad in (lambda *a, **k: 1, lambda *a, **k: "yes"):
    assert _error(lambda: bad_policy_grad(SC, bad)) == _error(lambda: bad_policy_grad(JX, bad))
  for m, offload in ((SC, ac.Offloadable), (JX, jax_ac.Offloadable)):
    both = m.policies.save_from_both_policies(lambda *a, **k: offload("device", "pinned_host"),
                                              m.policies.dots_saveable)
    err = _error(lambda: bad_policy_grad(m, both))
    assert err[0] is ValueError
    assert err[1].startswith("The return value of the policies should be a boolean. Got: "
                             "Offloadable(src='device', dst='pinned_host') and True.")


def test_non_callable_policy_is_a_type_error():
  with pytest.raises(TypeError, match=r"policy must be None or a callable .* got 3 of type int"):
    sc.checkpoint(jnp.sin, policy=3)
