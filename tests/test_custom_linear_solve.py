"""`lax.custom_linear_solve` and `lax.custom_root` against JAX 0.10.2: printed jaxprs
(forward, grad, jvp), values, derivatives (vs finite differences and vs JAX), vmap, jit,
has_aux, symmetric operators, pytree right-hand sides, x64, and JAX's error messages."""
import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import lax
from stagecraft.extend.core import primitives
from stagecraft.interpreters import partial_eval as pe
from stagecraft.test_util import check_grads

f32 = np.float32
_R = np.random.default_rng(0)
A = (_R.standard_normal((3, 3)) + 3 * np.eye(3)).astype(f32)
SPD = (A @ A.T + np.eye(3)).astype(f32)
B = _R.standard_normal(3).astype(f32)


# The same programs written against either library (`L`: the lax module, `N`: numpy).

def _plain(L, N):
  def f(a, b):
    return L.custom_linear_solve(lambda x: a @ x, b, lambda mv, r: N.linalg.solve(a, r),
                                 lambda vm, r: N.linalg.solve(a.T, r))
  return f


def _explicit(L, N):
  # The solves multiply by a given inverse (an argument), so the printed program holds only
  # the ops of this file.
  def f(a, ainv, b):
    return L.custom_linear_solve(lambda x: a @ x, b, lambda mv, r: ainv @ r,
                                 lambda vm, r: ainv.T @ r)
  return f


def _symmetric(L, N):
  def f(a, ainv, b):
    return L.custom_linear_solve(lambda x: N.dot(a, x), b, lambda mv, r: N.dot(ainv, r),
                                 symmetric=True)
  return f


def _scaled(L, N):
  # Non-symmetric, solve and transpose_solve close over nothing: a diagonal operator.
  def f(d, b):
    return L.custom_linear_solve(lambda x: d * x, b, lambda mv, r: r / d,
                                 lambda vm, r: r / d)
  return f


def _aux(L, N):
  def f(a, ainv, b):
    def solve(mv, r):
      x = ainv @ r
      return x, N.sum(x)
    return L.custom_linear_solve(lambda x: a @ x, b, solve, symmetric=True, has_aux=True)
  return f


def _tree(L, N):
  # b is a pytree: a dict of two vectors; the operator is block diagonal.
  def f(a, ainv, b):
    def mv(x):
      return {"u": a @ x["u"], "v": 2.0 * x["v"]}

    def solve(m, r):
      return {"u": ainv @ r["u"], "v": r["v"] / 2.0}

    def tsolve(m, r):
      return {"u": ainv.T @ r["u"], "v": r["v"] / 2.0}
    return L.custom_linear_solve(mv, b, solve, tsolve)
  return f


def _newton_sqrt(L, N):
  def f(a):
    def solve(g, x0):
      return L.fori_loop(0, 20, lambda i, x: x - g(x) / (2 * x), x0)
    return L.custom_root(lambda x: x * x - a, 1.0, solve, lambda g, y: y / g(1.0))
  return f


def _root_vector(L, N):
  # f(x) = a x + x^3 - b, a root per component; the tangent solve uses the Jacobian.
  def f(a, b):
    g = lambda x: a * x + x ** 3 - b  # noqa: E731

    def solve(g, x0):
      return L.fori_loop(0, 30, lambda i, x: x - g(x) / (a + 3 * x ** 2), x0)

    def tangent_solve(lin, y):
      return y / lin(N.ones_like(y))
    return L.custom_root(g, N.zeros_like(b), solve, tangent_solve)
  return f


def _root_aux(L, N):
  def f(a):
    def solve(g, x0):
      x = L.fori_loop(0, 20, lambda i, x: x - g(x) / (2 * x), x0)
      return x, x * x
    return L.custom_root(lambda x: x * x - a, 1.0, solve, lambda g, y: y / g(1.0),
                         has_aux=True)
  return f


def _both(make):
  return make(lax, jnp), make(jax.lax, jjnp)


AINV = np.linalg.inv(A).astype(f32)
SINV = np.linalg.inv(SPD).astype(f32)
D = np.array([1.5, 2.0, 3.0], f32)
CASES = [(_plain, (A, B)), (_explicit, (A, AINV, B)), (_symmetric, (SPD, SINV, B)),
         (_scaled, (D, B)), (_aux, (SPD, SINV, B)),
         (_tree, (A, AINV, {"u": B, "v": B[:2]})), (_newton_sqrt, (2.0,)),
         (_root_vector, (D, B)), (_root_aux, (f32(3.0),))]
IDS = [c[0].__name__.strip("_") for c in CASES]


# Printed as JAX's, but for `plain` (jnp.linalg.solve's own printing: see
# test_numpy_linalg_jax.py) and `tree`, whose matvec multiplies the linear input by a literal:
# JAX's linear_transpose (a JaxprTrace) turns that literal into a constant of vecmat.
JAXPR_CASES = [c for c, i in zip(CASES, IDS) if i not in ("plain", "tree")]


@pytest.mark.parametrize("make,args", JAXPR_CASES,
                         ids=[i for i in IDS if i not in ("plain", "tree")])
def test_jaxpr_same_as_jax(make, args):
  fs, fj = _both(make)
  assert str(sc.make_jaxpr(fs)(*args)) == str(jax.make_jaxpr(fj)(*args))


@pytest.mark.parametrize("make,args", [(_scaled, (D, B)), (_newton_sqrt, (2.0,)),
                                       (_explicit, (A, AINV, B))],
                         ids=["scaled", "sqrt", "explicit"])
def test_grad_jaxpr_same_as_jax(make, args):
  fs, fj = _both(make)
  if make is _newton_sqrt:   # a scalar already
    loss_s, loss_j = fs, fj
  else:
    loss_s = lambda *a: fs(*a).sum()  # noqa: E731
    loss_j = lambda *a: fj(*a).sum()  # noqa: E731
  assert (str(sc.make_jaxpr(sc.grad(loss_s))(*args))
          == str(jax.make_jaxpr(jax.grad(loss_j))(*args)))


def _close(got, want, rtol=2e-5):
  lg, lw = sc.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
  assert len(lg) == len(lw)
  for g, w in zip(lg, lw):
    assert np.shape(g) == np.shape(w) and np.asarray(g).dtype == np.asarray(w).dtype
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("make,args", CASES, ids=IDS)
def test_values_jit_and_derivatives_as_jax(make, args):
  fs, fj = _both(make)
  want = fj(*args)
  _close(fs(*args), want)
  _close(sc.jit(fs)(*args), want)
  first = lambda f: (lambda *a: f(*a)[0] if isinstance(f(*a), tuple) else f(*a))  # noqa: E731
  ts = jax.tree_util.tree_map(lambda x: np.ones_like(x), args)
  _close(sc.jvp(first(fs), args, ts)[1], jax.jvp(first(fj), args, ts)[1], 1e-4)
  gs = sc.grad(lambda *a: sum(x.sum() for x in sc.tree_util.tree_leaves(first(fs)(*a))),
               argnums=tuple(range(len(args))))(*args)
  gj = jax.grad(lambda *a: sum(x.sum() for x in jax.tree_util.tree_leaves(first(fj)(*a))),
                argnums=tuple(range(len(args))))(*args)
  _close(gs, gj, 1e-4)


def _with_inverse(make):
  # The solves' own inverse is computed from `a` (derivatives never flow through a solve).
  def wrapped(L, N):
    f = make(L, N)
    return lambda a, b: f(a, N.linalg.inv(a), b)
  wrapped.__name__ = make.__name__
  return wrapped


@pytest.mark.parametrize("make,args", [(_plain, (A, B)), (_with_inverse(_symmetric), (SPD, B)),
                                       (_with_inverse(_tree), (A, {"u": B, "v": B[:2]})),
                                       (_root_vector, (D, B))],
                         ids=["plain", "symmetric", "tree", "root_vector"])
def test_check_grads(make, args):
  fs, _ = _both(make)
  with sc.enable_x64():
    args64 = sc.tree_util.tree_map(lambda x: np.asarray(x, np.float64), args)
    check_grads(fs, args64, order=1, modes=("fwd", "rev"))
    out = fs(*args64)
    assert sc.tree_util.tree_leaves(out)[0].dtype == np.float64


def test_second_order_grads():
  fs, fj = _both(_plain)
  with sc.enable_x64():
    a64, b64 = A.astype(np.float64), B.astype(np.float64)
    check_grads(fs, (a64, b64), order=2, modes=("fwd", "rev"))


def test_vmap_as_jax_and_loop():
  fs, fj = _both(_plain)
  As = np.stack([A, A + np.eye(3, dtype=f32), 2 * A])
  Bs = np.stack([B, -B, 2 * B])
  for in_axes, args in [((0, 0), (As, Bs)), ((None, 0), (A, Bs)), ((0, None), (As, B)),
                        ((1, 0), (np.moveaxis(As, 0, 1), Bs))]:
    got = sc.vmap(fs, in_axes)(*args)
    _close(got, jax.vmap(fj, in_axes)(*args))
  loop = np.stack([np.linalg.solve(a, b) for a, b in zip(As, Bs)])
  np.testing.assert_allclose(sc.vmap(fs)(As, Bs), loop, rtol=1e-4, atol=1e-5)
  # vmap of grad, and the printed batched program.
  loss = lambda a, b: fs(a, b).sum()  # noqa: E731
  _close(sc.vmap(sc.grad(loss))(As, Bs),
         jax.vmap(jax.grad(lambda a, b: fj(a, b).sum()))(As, Bs), 1e-4)
  assert (str(sc.make_jaxpr(sc.vmap(_scaled(lax, jnp)))(np.stack([D, D]), np.stack([B, B])))
          == str(jax.make_jaxpr(jax.vmap(_scaled(jax.lax, jjnp)))(np.stack([D, D]),
                                                                  np.stack([B, B]))))


def test_vmap_of_custom_root_and_aux():
  fs, fj = _both(_newton_sqrt)
  xs = np.array([2.0, 3.0, 5.0], f32)
  _close(sc.vmap(fs)(xs), jax.vmap(fj)(xs))
  _close(sc.vmap(sc.grad(fs))(xs), 0.5 / np.sqrt(xs), 1e-4)
  fs, fj = _both(_aux)
  _close(sc.vmap(fs, (None, None, 0))(SPD, SINV, np.stack([B, 2 * B])),
         jax.vmap(fj, (None, None, 0))(SPD, SINV, np.stack([B, 2 * B])))


def test_x64_dtypes_and_weak_types():
  fs, fj = _both(_scaled)
  with sc.enable_x64(), jax.enable_x64(True):
    d64, b64 = D.astype(np.float64), B.astype(np.float64)
    _close(fs(d64, b64), fj(d64, b64))
  # A weakly typed b (a Python scalar): the result keeps b's aval, as JAX's.
  got = lax.custom_linear_solve(lambda x: 2.0 * x, 3.0, lambda mv, r: r / 2.0)
  want = jax.lax.custom_linear_solve(lambda x: 2.0 * x, 3.0, lambda mv, r: r / 2.0)
  assert (got.dtype, got.weak_type) == (want.dtype, want.weak_type)
  assert float(got) == float(want) == 1.5


def test_primitive_is_exported_and_printed_name():
  assert primitives.linear_solve_p is lax.control_flow.solves.linear_solve_p
  assert primitives.linear_solve_p.name == "custom_linear_solve"
  jaxpr = sc.make_jaxpr(_scaled(lax, jnp))(D, B)
  assert jaxpr.jaxpr.eqns[0].primitive is primitives.linear_solve_p


def test_lowering_and_dce():
  fs = _scaled(lax, jnp)
  text = sc.jit(fs).lower(D, B).as_text()
  assert "stablehlo.divide" in text and "custom_linear_solve" not in text
  # An unused solve is removed by DCE; a used one is kept whole.
  jaxpr = sc.make_jaxpr(lambda d, b: (fs(d, b), 1.0)[1] * b)(D, B).jaxpr
  assert [e.primitive.name for e in jaxpr.eqns] == ["custom_linear_solve", "mul"]
  assert [e.primitive.name for e in pe.dce_jaxpr(jaxpr, [True])[0].eqns] == ["mul"]
  jaxpr = sc.make_jaxpr(lambda d, b: fs(d, b) * b)(D, B).jaxpr
  assert len(pe.dce_jaxpr(jaxpr, [True])[0].eqns) == 2


# -- errors with JAX's messages -------------------------------------------------------------

def _message(f, *args):
  with pytest.raises(Exception) as e:
    f(*args)
  return type(e.value), str(e.value).split("\n")[0]


@pytest.mark.parametrize("bad", ["matvec_tree", "solve_tree", "matvec_shape", "aux_pair"])
def test_errors_as_jax(bad):
  def make(L, N):
    def f(b):
      if bad == "matvec_tree":
        return L.custom_linear_solve(lambda x: (x, x), b, lambda mv, r: r)
      if bad == "solve_tree":
        return L.custom_linear_solve(lambda x: x, b, lambda mv, r: [r])
      if bad == "matvec_shape":
        return L.custom_linear_solve(lambda x: x[:2], b, lambda mv, r: r)
      return L.custom_linear_solve(lambda x: x, b, lambda mv, r: r, has_aux=True)
    return f
  fs, fj = _both(make)
  ts, ms = _message(fs, B)
  tj, mj = _message(fj, B)
  assert ts is tj
  assert ms == mj


def test_reverse_mode_needs_transpose_solve():
  f = lambda b: lax.custom_linear_solve(lambda x: 2.0 * x, b, lambda mv, r: r / 2.0)  # noqa: E731
  np.testing.assert_allclose(sc.jvp(f, (B,), (B,))[1], B / 2)
  with pytest.raises(TypeError, match="transpose_solve required for backwards mode"):
    sc.grad(lambda b: f(b).sum())(B)


def test_custom_root_errors_as_jax():
  def make(L, N):
    def f(a):
      return L.custom_root(lambda x: (x, x), a, lambda g, x: x, lambda g, y: y)
    return f
  fs, fj = _both(make)
  assert _message(fs, f32(1.0)) == _message(fj, f32(1.0))

  def make2(L, N):
    def f(a):
      return L.custom_root(lambda x: x - a, a, lambda g, x: x, lambda g, y: y, has_aux=True)
    return f
  fs, fj = _both(make2)
  assert _message(fs, f32(1.0)) == _message(fj, f32(1.0))


def test_solve_dtype_mismatch_is_a_clear_error():
  with pytest.raises(TypeError, match=r"solve\(\) output dtypes must match b, got i32\[3\]"):
    lax.custom_linear_solve(lambda x: x, B, lambda mv, r: r.astype(np.int32))
