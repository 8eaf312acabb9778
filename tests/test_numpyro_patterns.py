"""Patterns from numpyro 0.22.0 (its inference code and examples) that stagecraft got wrong,
each run with the same code on JAX 0.10.2 and on stagecraft and compared: values bit for
bit, printed jaxprs, exception texts. numpyro itself is not a test dependency, so each test
reproduces the pattern in plain JAX code."""
from __future__ import annotations

import typing
import warnings

import jax
import jax.extend.core.primitives as jprims
import jax.numpy as jjnp
import jax.scipy.special as jsp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp
import stagecraft.scipy.special as ssp
import stagecraft.tree_util as stu
from stagecraft import lax as slax
from stagecraft.extend.core import CallPrimitive
from stagecraft.extend.core import primitives as sprims


def _bits(a):
  return np.asarray(a).tobytes()


def _same(a, b):
  assert np.asarray(a).dtype == np.asarray(b).dtype
  assert _bits(a) == _bits(b), (np.asarray(a), np.asarray(b))


# numpyro/ops/provenance.py: `from jax.extend.core.primitives import call_p, closed_call_p,
# jit_p` and a jaxpr walker keyed on those primitives.
def test_call_p_closed_call_p_jit_p_import():
  assert sprims.call_p.name == jprims.call_p.name == "call"
  assert isinstance(sprims.call_p, CallPrimitive)
  assert sprims.closed_call_p.name == jprims.closed_call_p.name
  assert sprims.jit_p.name == jprims.jit_p.name
  assert "call_p" in sprims.__all__
  # bound with a function, as JAX's core.call
  f = lambda x: sprims.call_p.bind(lambda y: [snp.sin(y) * 2.0], x)[0]
  _same(sc.jit(f)(np.float32(0.5)), jax.jit(lambda x: jjnp.sin(x) * 2.0)(np.float32(0.5)))
  eqn, = sc.make_jaxpr(f)(np.float32(0.5)).jaxpr.eqns
  assert eqn.primitive is sprims.call_p
  # a provenance walker (numpyro.ops.provenance) sees jit equations as JAX's do
  for lib, p in ((sc, sprims), (jax, jprims)):
    jaxpr = lib.make_jaxpr(lambda x, y: lib.jit(lambda a: a * 2.0)(x) + 1.0)(1.0, 2.0)
    eqn = jaxpr.jaxpr.eqns[0]
    assert eqn.primitive is p.jit_p and "jaxpr" in eqn.params


# numpyro.util.cond: `lax.cond(pred, true_operand, true_fun, false_operand, false_fun)`,
# JAX's older signature, used by NUTS's tree building.
@pytest.mark.parametrize("pred", [True, False])
def test_cond_old_signature(pred):
  def prog(lib, jnp_):
    def f(p, a, b):
      return lib.lax.cond(p, (a, b), lambda t: t[0] * 2.0 + t[1], b, lambda x: jnp_.sin(x))
    return f
  a, b = np.float32(1.5), np.float32(-0.25)
  _same(sc.jit(prog(sc, snp))(pred, a, b), jax.jit(prog(jax, jjnp))(pred, a, b))
  _same(prog(sc, snp)(pred, a, b), prog(jax, jjnp)(pred, a, b))
  assert (str(sc.make_jaxpr(prog(sc, snp))(pred, a, b))
          == str(jax.make_jaxpr(prog(jax, jjnp))(pred, a, b)))


def test_cond_operand_keyword_and_errors():
  for lib in (sc, jax):
    out = lib.lax.cond(True, lambda x: x + 1.0, lambda x: x - 1.0, operand=np.float32(2.0))
    assert float(out) == 3.0
  msgs = []
  for lib in (jax, sc):
    with pytest.raises(TypeError) as e:
      lib.lax.cond(True, 1.0, lambda: 2.0)
    msgs.append(str(e.value))
  assert msgs[0] == msgs[1]
  msgs = []
  for lib in (jax, sc):
    with pytest.raises(TypeError) as e:
      lib.lax.cond(True, lambda x: x, lambda x: x, 1.0, operand=2.0)
    msgs.append(str(e.value))
  assert msgs[0] == msgs[1]


# numpyro's Binomial.log_prob: `jnp.array(value, float)` of a concrete value closed over by
# the potential function, then `gammaln(value + 1)`: JAX stages `copy` of the constant, so XLA
# folds the lgamma; an optimization barrier there kept it from folding (last-bit change).
def test_array_copy_of_constant_under_jit():
  v = np.array([3.0, 4.0, 5.0], np.float32)
  def prog(jnp_, special):
    c = jnp_.asarray(v)
    def f(p):
      value = jnp_.array(c, jnp_.float32)
      return special.gammaln(value + 1) + p
    return f
  p = np.float32(0.25)
  _same(sc.jit(prog(snp, ssp))(p), jax.jit(prog(jjnp, jsp))(p))
  sj = str(sc.make_jaxpr(prog(snp, ssp))(p))
  jj = str(jax.make_jaxpr(prog(jjnp, jsp))(p))
  assert sj == jj and "copy" in sj


# numpyro's Binomial/Beta log densities: xlogy/xlog1py evaluated eagerly (op by op in JAX)
# and traced (one custom_jvp_call named xlogy, as JAX's).
def test_xlogy_xlog1py_eager_bits_and_jaxpr():
  rng = np.random.RandomState(0)
  x = rng.uniform(0, 10, 64).astype(np.float32)
  y = rng.uniform(0.01, 0.99, 64).astype(np.float32)
  x[::7] = 0.0
  _same(ssp.xlogy(x, y), jsp.xlogy(x, y))
  _same(ssp.xlog1py(x, -y), jsp.xlog1py(x, -y))
  _same(sc.jit(ssp.xlogy)(x, y), jax.jit(jsp.xlogy)(x, y))
  for name in ("xlogy", "xlog1py"):
    sf, jf = getattr(ssp, name), getattr(jsp, name)
    assert (str(sc.make_jaxpr(sf)(np.float32(2.0), np.float32(0.5)))
            == str(jax.make_jaxpr(jf)(np.float32(2.0), np.float32(0.5))))
    g = lambda lib, f: lib.grad(lambda a, b: f(a, b), argnums=(0, 1))
    for a, b in ((np.float32(3.0), np.float32(0.3)), (np.float32(0.0), np.float32(0.6))):
      for s, j in zip(g(sc, sf)(a, b), g(jax, jf)(a, b)):
        _same(s, j)
  _same(ssp.entr(y), jsp.entr(y))
  _same(ssp.rel_entr(y, y[::-1]), jsp.rel_entr(y, y[::-1]))


def test_sigmoid_is_inlined_in_jaxprs():
  x = np.float32(0.3)
  assert str(sc.make_jaxpr(sc.nn.sigmoid)(x)) == str(jax.make_jaxpr(jax.nn.sigmoid)(x))
  xs = np.linspace(-30, 30, 257, dtype=np.float32)
  _same(sc.nn.sigmoid(xs), jax.nn.sigmoid(xs))
  _same(sc.jit(sc.nn.sigmoid)(xs), jax.jit(jax.nn.sigmoid)(xs))


# numpyro.optim registers a NamedTuple subclass (_MinimizeState) with its own flatten rules:
# JAX does so silently.
def test_register_namedtuple_subclass_silently():
  class State(typing.NamedTuple):
    flat: typing.Any
    fn: typing.Any

  with warnings.catch_warnings():
    warnings.simplefilter("error")
    stu.register_pytree_node(State, lambda s: ((s.flat,), (s.fn,)),
                             lambda aux, xs: State(xs[0], aux[0]))
  leaves, tree = stu.tree_flatten(State(np.float32(1.0), len))
  assert len(leaves) == 1 and stu.tree_unflatten(tree, leaves).fn is len


# numpyro's Binomial log density inside a scan (a gradient-descent loop over the potential):
# the scan body holds `lgamma` of constant counts. JAX's scan lowering calls its body as a
# private function; XLA folds those constants to other bits when the body is inlined.
def test_scan_body_with_folded_lgamma_constants():
  obs = np.array([3, 4, 5], np.int32)
  z0 = np.array([-0.5, 0.3, 1.2], np.float32)

  def prog(lib, jnp_, special):
    def lp(t):
      value = jnp_.array(jnp_.asarray(obs), jnp_.float32)
      tc = jnp_.asarray(np.array([10], np.int32))
      return (special.gammaln(tc + 1) - special.gammaln(value + 1)
              - special.gammaln(tc - value + 1) + t)

    def body(c, _):
      return c - 0.05, jnp_.sum(lp(c))
    return lib.jit(lambda z: lib.lax.scan(body, z, None, length=3))

  s = prog(sc, snp, ssp)(z0)
  j = prog(jax, jjnp, jsp)(z0)
  for a, b in zip(s, j):
    _same(a, b)
