"""Autodiff as JAX users rely on it: grad, vmap, jit, jvp and jacfwd composed with each other
and with cond/switch, scan, fori_loop, while_loop (forward only), custom_jvp, custom_vjp,
checkpoint and custom_dce, over small random programs. Every program is written once against a
namespace (`_Impl`) and built for stagecraft and for JAX, the oracle; JAX 0.10.2 has no
custom_dce, so there the same program without it is the oracle.

Then the regressions: a batched `cond` whose untaken branch has an infinite derivative
(`grad(vmap(f))` gave NaN), and `custom_dce` under `vmap` (outputs of unbatched operands, and
collectives over the vmapped axis inside the function or its rule)."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import lax
from stagecraft.custom_dce import custom_dce
from stagecraft.interpreters import partial_eval as pe

N = 4        # vector length of a program's state
B = 3        # vmap batch size


# ---------------------------------------------------------------------------
# One program text, two implementations


class _Impl:
  """The names a program uses, from stagecraft or from JAX."""

  def __init__(self, mod, np_, lax_, dce):
    self.mod, self.np, self.lax, self.dce = mod, np_, lax_, dce
    for name in ("jit", "grad", "vmap", "jvp", "vjp", "jacfwd", "custom_jvp", "custom_vjp",
                 "checkpoint"):
      setattr(self, name, getattr(mod, name))


def _sc_dce(fun, rule):
  f = custom_dce(fun)
  f.def_dce(rule)
  return f


SC = _Impl(sc, jnp, lax, _sc_dce)
JX = _Impl(jax, jjnp, jax.lax, lambda fun, rule: fun)   # JAX 0.10.2 has no custom_dce

OPS = ("sin", "tanh", "mul", "add", "exp_clip", "where", "sum")


def _op(I, op, v, w):
  np_ = I.np
  if op == "sin":
    return np_.sin(v)
  if op == "tanh":
    return np_.tanh(v)
  if op == "mul":
    return v * w
  if op == "add":
    return v + w
  if op == "exp_clip":
    return np_.exp(np_.clip(v, -2.0, 2.0))
  if op == "where":
    return np_.where(v > 0, v * w, np_.sin(v) + w)
  assert op == "sum"
  return v * 0.5 + np_.sum(v) * 0.25


def _chain(I, ops):
  def f(v, w):
    for op in ops:
      v = _op(I, op, v, w)
    return v
  return f


# Structures wrapping an inner program and a second one (`other`); each maps (v, w) -> v-like.
# Predicates read the raw parameter `w` only, so both implementations take the same branches.
KINDS = ("cond", "switch", "scan", "fori", "while", "custom_jvp", "custom_vjp", "checkpoint",
         "dce_first", "dce_second", "dce_both")
FORWARD_ONLY = {"while"}           # no reverse mode through while_loop
REVERSE_ONLY = {"custom_vjp"}      # no forward mode through custom_vjp


def _wrap(I, kind, inner, other):
  np_, lx = I.np, I.lax
  if kind == "cond":
    return lambda v, w: lx.cond(w[0] > 0, inner, other, v, w)
  if kind == "switch":
    def f(v, w):
      i = (w[0] > 0).astype(np.int32) + (w[1] > 0).astype(np.int32)
      return lx.switch(i, [inner, other, lambda v, w: inner(other(v, w), w)], v, w)
    return f
  if kind == "scan":
    scales = np.array([1.0, -0.5, 0.75], np.float32)

    def f(v, w):
      def body(c, s):
        y = inner(c, w * s)
        return other(y, w) * 0.5, np_.sum(y)
      c, ys = lx.scan(body, v, scales)
      return c + np_.sum(ys) * 0.1
    return f
  if kind == "fori":
    return lambda v, w: lx.fori_loop(0, 2, lambda i, c: inner(c, w) * 0.5 + other(c, w) * 0.5,
                                     v)
  if kind == "while":
    return lambda v, w: lx.while_loop(lambda s: s[0] < 2,
                                      lambda s: (s[0] + 1, inner(s[1], w)), (0, v))[1]
  if kind == "custom_jvp":
    f = I.custom_jvp(lambda v, w: inner(v, w))

    @f.defjvp
    def f_jvp(primals, tangents):
      y, t = I.jvp(inner, primals, tangents)
      return y, 2.0 * t            # not the true derivative: shows the rule is used
    return lambda v, w: other(f(v, w), w)
  if kind == "custom_vjp":
    f = I.custom_vjp(lambda v, w: inner(v, w))

    def fwd(v, w):
      return inner(v, w), (v, w)

    def bwd(res, g):
      _, pull = I.vjp(inner, *res)
      gv, gw = pull(g)
      return 0.5 * gv, gw          # not the true cotangent: shows the rule is used
    f.defvjp(fwd, bwd)
    return lambda v, w: other(f(v, w), w)
  if kind == "checkpoint":
    return I.checkpoint(lambda v, w: other(inner(v, w), w))
  assert kind.startswith("dce_")
  g = I.dce(lambda v, w: (inner(v, w), other(v, w)),
            lambda used, v, w: (inner(v, w) if used[0] else None,
                                other(v, w) if used[1] else None))
  if kind == "dce_first":
    return lambda v, w: g(v, w)[0]
  if kind == "dce_second":
    return lambda v, w: g(v, w)[1]
  return lambda v, w: g(v, w)[0] * g(v, w)[1]


def build(I, kinds, opss):
  """The program: `kinds` are the structures, outermost first; `opss` has one op list per
  structure (its `other`) and a last one for the innermost program."""
  f = _chain(I, opss[-1])
  for kind, ops in reversed(list(zip(kinds, opss))):
    f = _wrap(I, kind, f, _chain(I, ops))
  return f


# ---------------------------------------------------------------------------
# Transformations (each builds the function to call and its arguments)

IN_AXES = ((0, None), (None, 0), (0, 0), (1, 0))
FORWARD = ("value", "jit", "vmap", "jit_vmap", "jvp", "jacfwd", "vmap_jacfwd", "jit_vmap_jvp")
REVERSE = ("grad", "jit_grad", "vmap_grad", "jit_vmap_grad", "vmap_jit_grad", "grad_vmap",
           "jit_grad_vmap", "hvp", "jit_hvp")


def _loss(F):
  return lambda x, w: F(x, w).sum()


def transform(I, how, F, in_axes):
  """`(fun, arg_kind)`: `arg_kind` "single" (x, w) or "batched" (the batched args)."""
  g = lambda f: I.grad(f, argnums=(0, 1))
  vm = lambda f: I.vmap(f, in_axes=in_axes)
  if how == "value":
    return F, "single"
  if how == "jit":
    return I.jit(F), "single"
  if how == "vmap":
    return vm(F), "batched"
  if how == "jit_vmap":
    return I.jit(vm(F)), "batched"
  if how == "jvp":
    return (lambda x, w: I.jvp(F, (x, w), (w * 0.5, x - 1.0))), "single"
  if how == "jacfwd":
    return I.jacfwd(F, argnums=(0, 1)), "single"
  if how == "vmap_jacfwd":
    return vm(I.jacfwd(F)), "batched"
  if how == "jit_vmap_jvp":
    return I.jit(vm(lambda x, w: I.jvp(F, (x, w), (w * 0.5, x - 1.0)))), "batched"
  if how == "grad":
    return g(_loss(F)), "single"
  if how == "jit_grad":
    return I.jit(g(_loss(F))), "single"
  if how == "vmap_grad":
    return vm(g(_loss(F))), "batched"
  if how == "jit_vmap_grad":
    return I.jit(vm(g(_loss(F)))), "batched"
  if how == "vmap_jit_grad":
    return vm(I.jit(g(_loss(F)))), "batched"
  if how == "grad_vmap":
    return g(lambda x, w: vm(F)(x, w).sum()), "batched"
  if how == "jit_grad_vmap":
    return I.jit(g(lambda x, w: vm(F)(x, w).sum())), "batched"
  if how in ("hvp", "jit_hvp"):
    hvp = lambda x, w: I.jvp(g(_loss(F)), (x, w), (w * 0.5, x - 1.0))
    return (I.jit(hvp) if how == "jit_hvp" else hvp), "single"
  raise AssertionError(how)


def _args(seed, arg_kind, in_axes):
  rng = np.random.RandomState(seed)
  if arg_kind == "single":
    return (rng.uniform(-1.5, 1.5, N).astype(np.float32),
            rng.uniform(-1.2, 1.2, N).astype(np.float32))
  out = []
  for d in in_axes:
    a = rng.uniform(-1.5, 1.5, (B, N) if d is not None else N).astype(np.float32)
    out.append(a.T.copy() if d == 1 else a)
  return tuple(out)


def _assert_close(got, want, rtol):
  got_l, want_l = jax.tree.leaves(got), jax.tree.leaves(want)
  assert len(got_l) == len(want_l)
  for a, b in zip(got_l, want_l):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
    scale = max(1.0, float(np.max(np.abs(b), initial=0.0)))
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * scale)


def run_case(kinds, opss, how, in_axes, seed):
  """Runs one program under one transformation in both implementations and compares."""
  fun_s, arg_kind = transform(SC, how, build(SC, kinds, opss), in_axes)
  fun_j, _ = transform(JX, how, build(JX, kinds, opss), in_axes)
  args = _args(seed, arg_kind, in_axes)
  try:
    want = fun_j(*args)
  except Exception as e:   # e.g. JAX cannot transpose the stop_gradient its batched cond
    # puts on a custom_jvp rule's tangents: stagecraft fails the same way.
    base = next(c for c in type(e).__mro__ if c.__module__ == "builtins")
    with pytest.raises(base):
      fun_s(*args)
    return
  got = fun_s(*args)
  # Values to rtol 1e-5 (f32); derivatives go through a few more roundings.
  _assert_close(got, want, 1e-5 if how in ("value", "jit", "vmap", "jit_vmap") else 5e-5)


# ---------------------------------------------------------------------------
# The random programs


ops_st = st.lists(st.sampled_from(OPS), min_size=1, max_size=3)


def _compatible(kind, how):
  if kind in FORWARD_ONLY:
    return how not in REVERSE
  if kind in REVERSE_ONLY:
    return how in ("value", "jit", "vmap", "jit_vmap") or (how in REVERSE and "hvp" not in how)
  return True


@st.composite
def programs(draw, hows):
  how = draw(st.sampled_from(hows))
  kinds = draw(st.lists(st.sampled_from([k for k in KINDS if _compatible(k, how)]),
                        min_size=1, max_size=2))
  opss = [draw(ops_st) for _ in range(len(kinds) + 1)]
  in_axes = draw(st.sampled_from(IN_AXES))
  seed = draw(st.integers(0, 2 ** 16))
  return kinds, opss, how, in_axes, seed


def _examples(n):
  return settings(max_examples=min(settings().max_examples, n), deadline=None)


@_examples(20)
@given(programs(FORWARD))
def test_random_programs_forward(case):
  run_case(*case)


@_examples(20)
@given(programs(("grad", "jit_grad", "hvp", "jit_hvp")))
def test_random_programs_grad(case):
  run_case(*case)


@_examples(20)
@given(programs(("vmap_grad", "jit_vmap_grad", "vmap_jit_grad", "grad_vmap", "jit_grad_vmap")))
def test_random_programs_batched_grad(case):
  run_case(*case)


# A fixed grid: every structure under the main compositions (hypothesis draws the rest), and
# pairs of nested structures, so that each is exercised whatever hypothesis draws.
_GRID_OPS = [["sin", "mul"], ["where", "add"], ["exp_clip", "tanh", "sum"]]
_GRID_HOWS = ("jit_vmap", "jacfwd", "grad", "jit_grad", "vmap_grad", "jit_grad_vmap")


def _grid():
  for kind in KINDS:
    for how in _GRID_HOWS:
      if _compatible(kind, how):
        yield pytest.param([kind], _GRID_OPS[:2], how, id=f"{kind}-{how}")


@pytest.mark.parametrize("kinds,opss,how", list(_grid()))
def test_grid(kinds, opss, how):
  in_axes = IN_AXES[len(how) % len(IN_AXES)]
  run_case(kinds, opss, how, in_axes, seed=len(how) * 7 + len(kinds[0]))


def _nested():
  hows = ("jit_grad_vmap", "grad", "vmap_grad")
  i = 0
  for outer in ("cond", "scan", "dce_first"):
    for inner in ("switch", "fori", "custom_jvp", "custom_vjp", "dce_both"):
      i += 1
      yield pytest.param([outer, inner], hows[i % 3], id=f"{outer}-{inner}-{hows[i % 3]}")


@pytest.mark.parametrize("kinds,how", list(_nested()))
def test_grid_nested(kinds, how):
  run_case(kinds, _GRID_OPS, how, (0, 0), seed=11)


# ---------------------------------------------------------------------------
# Regression: a batched cond whose untaken branch has an infinite derivative


def _nan_progs(I):
  np_, lx, m = I.np, I.lax, I
  P = {}
  # sqrt'(x) and log'(-x) are NaN/inf where the branch is not taken.
  P["sqrt_log"] = lambda x, w: lx.cond(x > 0, lambda x: np_.sqrt(x) * w,
                                       lambda x: np_.log(-x) * w, x)
  P["closed_over"] = lambda x, w: lx.cond(x > 0, lambda: np_.sqrt(w * x),
                                          lambda: np_.log(-w * x))
  P["reciprocal"] = lambda x, w: lx.cond(x != 0, lambda x: 1.0 / x * w,
                                         lambda x: np_.sqrt(x) * w, x)
  P["switch"] = lambda x, w: lx.switch(
      (x > 0).astype(np.int32) + (x > 1).astype(np.int32),
      [lambda x: np_.log(-x) * w, lambda x: 1.0 / (x - 0.5) * w, lambda x: np_.sqrt(x - 1.) * w],
      x)

  def scan_cond(x, w):
    def body(c, s):
      y = lx.cond(x * s > 0, lambda a: np_.sqrt(a) * c, lambda a: np_.log(-a) * c, x * s)
      return c + 0.1 * y, y
    return lx.scan(body, w, np.array([1.0, -1.0, 2.0], np.float32))[1].sum()
  P["scan_cond"] = scan_cond
  P["fori_cond"] = lambda x, w: lx.fori_loop(
      0, 2, lambda i, c: lx.cond(c > 0, lambda c: np_.sqrt(c), lambda c: np_.log(-c), c), x * w)
  P["jit_inside"] = lambda x, w: m.jit(lambda x, w: lx.cond(
      x > 0, lambda x: np_.sqrt(x) * w, lambda x: np_.log(-x) * w, x))(x, w)
  return P


NAN_XS = np.array([-1.5, -0.5, 0.0, 0.7, 2.0], np.float32)
NAN_W = np.float32(1.3)


def _nan_transforms(I, f):
  per = lambda x, w: f(x, w)
  return {
      "grad_vmap_x": I.grad(lambda xs, w: I.vmap(per, (0, None))(xs, w).sum()),
      "jit_grad_vmap_w": I.jit(I.grad(lambda w, xs: I.vmap(per, (0, None))(xs, w).sum())),
      "grad_vmap_vmap": I.grad(lambda xs, w: I.vmap(I.vmap(per, (0, None)), (0, None))(
          xs.reshape(1, -1), w).sum()),
      "jit_vmap_grad": I.jit(I.vmap(I.grad(per), (0, None))),
      "vmap_jacfwd": I.vmap(I.jacfwd(per), (0, None)),
  }


@pytest.mark.parametrize("prog", list(_nan_progs(JX)))
def test_batched_cond_untaken_branch_nan(prog):
  """`grad(vmap(f))` with a `cond` on a batched predicate: every branch runs on the whole
  batch and `select_n` picks the results, so the untaken branch's infinite derivative used to
  meet a zero cotangent (0 * inf = NaN). JAX's result is finite wherever the taken branch's
  derivative is."""
  f_s, f_j = _nan_progs(SC)[prog], _nan_progs(JX)[prog]
  ts, tj = _nan_transforms(SC, f_s), _nan_transforms(JX, f_j)
  xs = NAN_XS if prog not in ("scan_cond",) else NAN_XS + np.float32(0.25)
  for name in tj:
    want = np.asarray(tj[name](*((NAN_W, xs) if name.endswith("_w") else (xs, NAN_W))))
    got = np.asarray(ts[name](*((NAN_W, xs) if name.endswith("_w") else (xs, NAN_W))))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6, equal_nan=True,
                               err_msg=f"{prog} {name}")
    if name.startswith(("grad_vmap", "jit_grad_vmap")):
      # The untaken branches leave no NaN anywhere JAX has none.
      assert np.array_equal(np.isnan(got), np.isnan(want)), (prog, name, got, want)


def test_batched_cond_nan_regression_exact():
  """The issue's example: grad of a vmapped cond(x > 0, sqrt, log(-x)) is finite."""
  def f(x):
    return lax.cond(x > 0, lambda x: jnp.sqrt(x), lambda x: jnp.log(-x), x)

  def fj(x):
    return jax.lax.cond(x > 0, lambda x: jjnp.sqrt(x), lambda x: jjnp.log(-x), x)

  xs = np.array([-2.0, -1.0, 1.0, 4.0], np.float32)
  got = sc.grad(lambda xs: sc.vmap(f)(xs).sum())(xs)
  want = jax.grad(lambda xs: jax.vmap(fj)(xs).sum())(xs)
  assert np.all(np.isfinite(got))
  np.testing.assert_allclose(got, want, rtol=1e-6)
  np.testing.assert_allclose(sc.jit(sc.grad(lambda xs: sc.vmap(f)(xs).sum()))(xs), want,
                             rtol=1e-6)


# ---------------------------------------------------------------------------
# Regression: custom_dce under vmap


def _dce_two(np_):
  fun = lambda x, y: (np_.sin(x) * y, np_.cos(y))
  rule = lambda used, x, y: (np_.sin(x) * y if used[0] else None,
                             np_.cos(y) if used[1] else None)
  return fun, rule


_RNG = np.random.RandomState(0)
DX = _RNG.randn(B, N).astype(np.float32)
DY = _RNG.randn(B, N).astype(np.float32)


@pytest.mark.parametrize("wrap", ["vmap", "jit_vmap", "vmap_jit"])
def test_custom_dce_vmap_output_of_unbatched_operands(wrap):
  """The output that reads only unbatched operands stays unbatched (as the function without
  custom_dce, and JAX's custom_dce): `out_axes=None` for it works. It used to be batched
  (broadcast) always, and vmap failed with "mapped output but out_axes is None"."""
  f = _sc_dce(*_dce_two(jnp))
  fj = _dce_two(jjnp)[0]
  T = {"vmap": lambda m, g: m.vmap(g, (0, None), (0, None)),
       "jit_vmap": lambda m, g: m.jit(m.vmap(g, (0, None), (0, None))),
       "vmap_jit": lambda m, g: m.vmap(m.jit(g), (0, None), (0, None))}[wrap]
  _assert_close(T(sc, f)(DX, DY[0]), T(jax, fj)(DX, DY[0]), 1e-6)
  # only the unbatched output used, under jit (the rule's pruned program runs)
  g = lambda x, y: f(x, y)[1]
  gj = lambda x, y: fj(x, y)[1]
  got = sc.jit(sc.vmap(g, (0, None), None))(DX, DY[0])
  _assert_close(got, jax.jit(jax.vmap(gj, (0, None), None))(DX, DY[0]), 1e-6)


def _dce_psum(np_, lx):
  fun = lambda x, y: (lx.psum(x, "i") * y, np_.cos(y) + lx.psum(y, "i"))
  rule = lambda used, x, y: (lx.psum(x, "i") * y if used[0] else None,
                             np_.cos(y) + lx.psum(y, "i") if used[1] else None)
  return fun, rule


@pytest.mark.parametrize("in_axes", [(0, None), (None, 0), (0, 0), (None, None)])
@pytest.mark.parametrize("used", [0, 1, None])
def test_custom_dce_vmap_collective(in_axes, used):
  """A collective over the vmapped axis inside the function and its rule: the rule is traced
  (when the program is pruned) inside the axis' environment, and a call with no batched
  operand is batched too (it used to run unbatched: "unbound axis name: i")."""
  f = _sc_dce(*_dce_psum(jnp, lax))
  fj = _dce_psum(jjnp, jax.lax)[0]
  pick = (lambda g: g) if used is None else (lambda g: lambda x, y: g(x, y)[used])
  args = [DX if d == 0 else DX[0] for d in in_axes[:1]] + [DY if d == 0 else DY[0]
                                                           for d in in_axes[1:]]
  kw = dict(in_axes=in_axes, axis_name="i", axis_size=B)
  for m_s, m_j in [(lambda g: sc.vmap(g, **kw), lambda g: jax.vmap(g, **kw)),
                   (lambda g: sc.jit(sc.vmap(g, **kw)), lambda g: jax.jit(jax.vmap(g, **kw)))]:
    _assert_close(m_s(pick(f))(*args), m_j(pick(fj))(*args), 1e-5)


def test_custom_dce_vmap_rule_more_batched_than_function_errors():
  """A rule that batches an output the function leaves unbatched cannot be vmapped (JAX's
  custom_dce asserts the same): a ValueError that names the output and the fix."""
  f = _sc_dce(lambda x, y: (x * y, jnp.cos(y)),
              lambda used, x, y: (x * y if used[0] else None,
                                  jnp.cos(y) + 0.0 * x if used[1] else None))
  with pytest.raises(ValueError, match="returns its used output 0 batched"):
    sc.jit(sc.vmap(lambda x, y: f(x, y)[1], (0, None), None))(DX, DY[0])


def test_custom_dce_vmap_prunes_and_keeps_values():
  """Under jit(vmap) the batched rule replaces the call (pruned), and the values are those
  of the function without custom_dce, for every in_axes and used output."""
  f = _sc_dce(*_dce_two(jnp))
  fj = _dce_two(jjnp)[0]
  for in_axes, args in [((0, 0), (DX, DY)), ((0, None), (DX, DY[0])), ((None, 0), (DX[0], DY)),
                        ((1, 0), (DX.T.copy(), DY))]:
    for k in (0, 1):
      g = lambda x, y: f(x, y)[k]
      gj = lambda x, y: fj(x, y)[k]
      _assert_close(sc.jit(sc.vmap(g, in_axes))(*args), jax.jit(jax.vmap(gj, in_axes))(*args),
                    1e-6)
      closed = sc.make_jaxpr(sc.vmap(g, in_axes))(*args)
      jaxpr, _ = pe.dce_jaxpr(closed.jaxpr, [True])
      names = _prims(jaxpr)
      assert names.count("sin") == (1 if k == 0 else 0), names
      assert names.count("cos") == (1 if k == 1 else 0), names


def _prims(jaxpr):
  out = []
  for e in jaxpr.eqns:
    sub = e.params.get("fun_jaxpr") or e.params.get("jaxpr")
    out += _prims(sub.jaxpr) if sub is not None and hasattr(sub, "jaxpr") else [e.primitive.name]
  return out


@pytest.mark.parametrize("how", ["vmap_grad", "jit_vmap_grad", "grad_vmap", "jit_grad_vmap",
                                 "vmap_jit_grad", "nested_vmap"])
def test_custom_dce_vmap_grad(how):
  """vmap(grad) and grad(vmap) through custom_dce, outputs partially used."""
  f = _sc_dce(*_dce_two(jnp))
  fj = _dce_two(jjnp)[0]
  for k in (0, 1):
    L = lambda g: (lambda x, y: g(x, y)[k].sum())
    T = {
        "vmap_grad": lambda m, g: m.vmap(m.grad(L(g), (0, 1)), (0, None)),
        "jit_vmap_grad": lambda m, g: m.jit(m.vmap(m.grad(L(g), (0, 1)), (None, 0))),
        "vmap_jit_grad": lambda m, g: m.vmap(m.jit(m.grad(L(g), (0, 1))), (0, None)),
        "grad_vmap": lambda m, g: m.grad(lambda x, y: m.vmap(g, (0, None))(x, y)[k].sum(),
                                         (0, 1)),
        "jit_grad_vmap": lambda m, g: m.jit(m.grad(
            lambda x, y: m.vmap(g, (None, 0))(x, y)[k].sum(), (0, 1))),
        "nested_vmap": lambda m, g: m.jit(m.vmap(m.vmap(lambda x, y: g(x, y)[k], (0, None)),
                                                 (None, 0))),
    }[how]
    args = {"vmap_grad": (DX, DY[0]), "vmap_jit_grad": (DX, DY[0]), "grad_vmap": (DX, DY[0]),
            "jit_vmap_grad": (DX[0], DY), "jit_grad_vmap": (DX[0], DY),
            "nested_vmap": (DX, DY)}[how]
    _assert_close(T(sc, f)(*args), T(jax, fj)(*args), 1e-5)


def _dce_scan(np_, lx, I):
  """A custom_dce function whose first output is a scan, and a nested custom_dce call whose
  two outputs are multiplied."""
  inner_scan = lambda v: lx.scan(lambda c, _: (np_.sin(c) * 1.5, None), v, None, length=2)[0]
  f = I.dce(lambda v: (inner_scan(v), v * 2.0),
            lambda used, v: (inner_scan(v) if used[0] else None, v * 2.0 if used[1] else None))
  g = I.dce(lambda v: (np_.sin(v), np_.cos(v) * v),
            lambda used, v: (np_.sin(v) if used[0] else None, np_.cos(v) * v if used[1] else None))
  h = I.dce(lambda v: (g(v)[0] * g(v)[1], v + 1.0),
            lambda used, v: (g(v)[0] * g(v)[1] if used[0] else None, v + 1.0 if used[1] else None))
  return {"scan_first": lambda v: f(v)[0], "scan_both": lambda v: f(v)[0] * f(v)[1],
          "nested_mul": lambda v: h(v)[0]}


@pytest.mark.parametrize("prog", ["scan_first", "scan_both", "nested_mul"])
def test_custom_dce_grad_of_mixed_equations(prog):
  """grad through a custom_dce call whose linearized (unknown) part holds equations reading
  both primal and tangent values (a scan carrying both; a mul of an inner call's primal and
  tangent outputs). Its transpose used to run `backward_pass` on that jaxpr unsplit and fail
  with "transpose of mul: both operands are linear"."""
  fs, fj = _dce_scan(jnp, lax, SC)[prog], _dce_scan(jjnp, jax.lax, JX)[prog]
  for T, a in ((lambda m, f: m.grad(lambda v: f(v).sum()), DX[0]),
               (lambda m, f: m.jit(m.grad(lambda v: f(v).sum())), DX[0]),
               (lambda m, f: m.vmap(m.grad(lambda v: f(v).sum())), DX),
               (lambda m, f: m.jit(m.grad(lambda v: m.vmap(f)(v).sum())), DX)):
    _assert_close(T(sc, fs)(a), T(jax, fj)(a), 1e-5)
