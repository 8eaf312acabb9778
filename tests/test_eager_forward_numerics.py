"""Eager ufuncs and their forward-mode derivatives print JAX's numbers bit for bit: JAX's jnp ufuncs
are `jit(inline=True)` functions, so `jvp` (and `jacfwd`, `hessian`) of `x * y` on eager
values runs the JVP as one compiled program, where XLA fuses `tx * y + x * ty` (fused
multiply-add); stagecraft's ufuncs do the same. `jit(inline=True)` stages a call equation by
equation, as JAX's."""
import numpy as np
import pytest

import jax
import jax.numpy as jjnp

import stagecraft as sc
import stagecraft.numpy as snp

RNG = np.random.default_rng(0)
X, Y, TX, TY = [RNG.standard_normal(4096).astype(np.float32) for _ in range(4)]


def _newton_objective(N):
  # examples/newton_method.py of JAX's repository (Freudenstein and Roth's function)
  return lambda x: ((-13 + x[0] + ((5 - x[1]) * x[1] - 2) * x[1]) ** 2
                    + (-29 + x[0] + ((x[1] + 1) * x[1] - 14) * x[1]) ** 2)


X2 = np.array([-13.333356857299805, -2.666670560836792], np.float32)

CASES = {
    "jvp_multiply": lambda L, N: L.jvp(N.multiply, (X, Y), (TX, TY))[1],
    "jvp_operators": lambda L, N: L.jvp(lambda a, b: a * b - a / (b * b + 1.0), (X, Y),
                                        (TX, TY))[1],
    "jvp_unary": lambda L, N: L.jvp(lambda a: N.sin(a) * N.exp(a * 0.1), (X,), (TX,))[1],
    "jacfwd": lambda L, N: L.jacfwd(lambda a: a[:8] * a[8:16] + N.tanh(a[:8]))(X[:16]),
    "hessian": lambda L, N: L.hessian(_newton_objective(N))(X2),
    "jvp_of_grad": lambda L, N: L.jvp(L.grad(_newton_objective(N)), (X2,),
                                      (np.array([0., 1.], np.float32),))[1],
    "grad": lambda L, N: L.grad(lambda a: (a * a * N.sin(a)).sum())(X),
    "vmap_jvp": lambda L, N: L.vmap(lambda a, t: L.jvp(lambda u: u * u * u, (a,), (t,))[1])(
        X[:64].reshape(8, 8), TX[:64].reshape(8, 8)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_eager_derivatives_bit_for_bit_as_jax(name):
  ours = np.asarray(CASES[name](sc, snp))
  theirs = np.asarray(CASES[name](jax, jjnp))
  np.testing.assert_array_equal(ours, theirs)


@pytest.mark.xla_defaults   # the last bit of XLA's default code
def test_hessian_keeps_jax_asymmetry():
  # JAX's eager Hessian of this function is not symmetric in its last bit (forward over
  # reverse: one entry comes from a fused program, its mirror from separate ones).
  h = np.asarray(sc.hessian(_newton_objective(snp))(X2))
  assert h[0, 1] != h[1, 0]
  np.testing.assert_array_equal(h, np.asarray(jax.hessian(_newton_objective(jjnp))(X2)))


def _inline_program(L, N):
  g = L.jit(lambda a, b: N.sin(a) * b + 1.0, inline=True)
  h = L.jit(lambda a: N.cos(a) * 2.0)
  return lambda x: h(g(x, x)) + g(x, 2.0)


def test_jit_inline_is_staged_equation_by_equation_as_jax():
  x = np.float32(0.5)
  ours = str(sc.make_jaxpr(_inline_program(sc, snp))(x))
  theirs = str(jax.make_jaxpr(_inline_program(jax, jjnp))(x))
  assert ours == theirs, f"\n--- stagecraft\n{ours}\n--- JAX\n{theirs}"
  assert "jit[" in ours and ours.count("jit[") == 1   # only the call that is not inline
  np.testing.assert_array_equal(np.asarray(_inline_program(sc, snp)(x)),
                                np.asarray(_inline_program(jax, jjnp)(x)))
  for f in (sc.grad(_inline_program(sc, snp)), sc.jit(sc.grad(_inline_program(sc, snp)))):
    np.testing.assert_allclose(np.asarray(f(x)),
                               np.asarray(jax.grad(_inline_program(jax, jjnp))(x)), rtol=1e-6)


def test_inlined_equations_name_the_call_site():
  g = sc.jit(lambda a: snp.sin(a) * 2.0, inline=True)

  def f(x):
    return g(x)   # the line the inlined equations name
  jaxpr = sc.make_jaxpr(f)(np.float32(1.0))
  lines = {str(e.source_info) for e in jaxpr.jaxpr.eqns}
  assert all("test_eager_forward_numerics.py" in s and "f" in s for s in lines), lines


UFUNCS = {   # name -> operands
    "hypot": (X * 3, Y * 3), "logaddexp": (X * 3, Y * 3), "logaddexp2": (X * 3, Y * 3),
    "arctan2": (X, Y), "true_divide": (X, Y), "sinc": (X * 3,), "tan": (X,),
    "arcsinh": (X * 3,),
}


@pytest.mark.parametrize("name", sorted(UFUNCS))
def test_eager_ufunc_and_its_jvp_bit_for_bit_as_jax(name):
  args = UFUNCS[name]
  tangents = tuple(np.ones_like(a) for a in args)
  fs, fj = getattr(snp, name), getattr(jjnp, name)
  np.testing.assert_array_equal(np.asarray(fs(*args)), np.asarray(fj(*args)))
  np.testing.assert_array_equal(np.asarray(sc.jvp(fs, args, tangents)[1]),
                                np.asarray(jax.jvp(fj, args, tangents)[1]))


@pytest.mark.parametrize("name", ["hypot", "sinc", "logaddexp", "logaddexp2"])
def test_composite_ufunc_prints_as_jax(name):
  args = tuple(a[:7] for a in UFUNCS[name])
  ours = str(sc.make_jaxpr(getattr(snp, name))(*args))
  theirs = str(jax.make_jaxpr(getattr(jjnp, name))(*args))
  assert ours == theirs, f"\n--- stagecraft\n{ours}\n--- JAX\n{theirs}"
