"""Loops, conditionals and custom-derivative calls laid out in StableHLO as JAX lays them out.

XLA's simplification and fusion (and so the last bit of some results) depend on how a loop's
operands are ordered and whether a computation is a private function or inline. numpyro's NUTS
trajectories (a `while_loop` of leapfrog steps over a Binomial potential with `xlogy`/
`xlog1py`/`softplus`, custom_jvp functions) differed from JAX's in the last bit while
stagecraft lowered each custom_jvp call as a private function (JAX inlines them) and broadcast
`xlogy`'s operands before the `log` (JAX's `promote_args_inexact` promotes ranks only).
Each test compares stagecraft with JAX on the same function.
"""
import re

import numpy as np
import jax
import jax.numpy as jjnp
import jax.scipy.special as jsp

import stagecraft as sc
import stagecraft.numpy as snp
import stagecraft.scipy.special as ssp


def _funcs(text: str) -> list[str]:
  return re.findall(r"func\.func (?:public|private) @(\w+)", text)


def _while_operands(text: str) -> list[str]:
  """The operands of the first `stablehlo.while`, each as the main function's argument
  number it is, or 'other'."""
  m = re.search(r"stablehlo\.while\((.*?)\) :", text)
  ops = re.findall(r"= (%[\w]+)", m.group(1))
  return [o if o.startswith("%arg") else "other" for o in ops]


def test_scan_loop_operands_in_jax_order():
  # JAX's scan loop carries (xs, consts, counter, carry, ys buffers): xs and consts are
  # what its body reads from the enclosing scope, in the order it first reads them.
  def f(lib, jnp_):
    def g(c, d, xs, ys):
      def body(k, x):
        a, b = x
        return k * c + jnp_.sin(a) * d, k + b
      return lib.lax.scan(body, 1.0, (xs, ys))
    return g
  args = (np.float32(2.0), np.float32(0.5), np.arange(5, dtype=np.float32),
          np.ones(5, np.float32))
  js = jax.jit(f(jax, jjnp)).lower(*args).as_text()
  ss = sc.jit(f(sc, snp)).lower(*args).as_text()
  assert _while_operands(ss) == _while_operands(js) == [
      "%arg2", "%arg3", "%arg0", "%arg1", "other", "other", "other"]
  outs = sc.jit(f(sc, snp))(*args), jax.jit(f(jax, jjnp))(*args)
  for a, b in zip(*(jax.tree.leaves(o) for o in outs)):
    assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_reverse_unrolled_scan_matches_jax():
  def f(lib, jnp_):
    def g(c, xs):
      return lib.lax.scan(lambda k, x: (k * c + jnp_.cos(x), k - x), 0.5, xs,
                          reverse=True, unroll=2)
    return g
  args = (np.float32(0.9), np.linspace(0, 1, 7, dtype=np.float32))
  s, j = sc.jit(f(sc, snp))(*args), jax.jit(f(jax, jjnp))(*args)
  for a, b in zip(jax.tree.leaves(s), jax.tree.leaves(j)):
    assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_custom_jvp_calls_lower_inline_as_jax():
  # xlogy, xlog1py and logaddexp (behind nn.softplus) are custom_jvp functions: JAX's
  # lowering inlines their bodies (no private function `@xlogy`).
  def f(special, nn):
    return lambda x, y: (special.xlogy(x, y), special.xlog1py(x, -y), nn.softplus(y))
  args = (np.arange(18, dtype=np.float32), np.array([0.3], np.float32))
  js = jax.jit(f(jsp, jax.nn)).lower(*args).as_text()
  ss = sc.jit(f(ssp, sc.nn)).lower(*args).as_text()
  assert not {"xlogy", "xlog1py", "logaddexp"} & set(_funcs(js))
  assert sorted(_funcs(ss)) == sorted(_funcs(js))
  s, j = sc.jit(f(ssp, sc.nn))(*args), jax.jit(f(jsp, jax.nn))(*args)
  for a, b in zip(s, j):
    assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_xlogy_keeps_size_one_dimensions_as_jax():
  # JAX's promote_args_inexact promotes ranks only: `log(y)` is taken on y's shape (1,),
  # then lax broadcasts it in the multiplication.
  x, y = np.arange(18, dtype=np.float32), np.array([0.3], np.float32)
  for sf, jf in ((ssp.xlogy, jsp.xlogy), (ssp.xlog1py, jsp.xlog1py)):
    assert str(sc.make_jaxpr(sf)(x, y)) == str(jax.make_jaxpr(jf)(x, y))
    assert np.asarray(sc.jit(sf)(x, y)).tobytes() == np.asarray(jax.jit(jf)(x, y)).tobytes()


def test_custom_jvp_in_while_loop_grad_matches_jax():
  # A leapfrog loop over a Binomial-like potential (numpyro's NUTS pattern).
  ab = np.full(18, 45, np.int32)
  hits = np.random.RandomState(0).binomial(45, 0.27, 18).astype(np.int32)

  def prog(lib, jnp_, special):
    def potential(z):
      p = jnp_.clip(lib.nn.sigmoid(z), 1.1754944e-38, 0.99999988)
      k = jnp_.asarray(hits).astype(jnp_.float32)
      lp = (special.gammaln(jnp_.asarray(ab) + 1) - special.gammaln(k + 1)
            + special.xlogy(k, p) + special.xlog1py(ab - k, -p))
      return -(jnp_.sum(lp) - lib.nn.softplus(-z[0]) - lib.nn.softplus(z[0]))

    def run(z, r, eps):
      pe, g = lib.value_and_grad(potential)(z)

      def body(c):
        i, (z, r, pe, g) = c
        r = r - eps * 0.5 * g
        z = z + eps * r
        pe, g = lib.value_and_grad(potential)(z)
        return i + 1, (z, r - eps * 0.5 * g, pe, g)
      return lib.lax.while_loop(lambda c: c[0] < 7, body, (0, (z, r, pe, g)))[1]
    return lib.jit(run)
  sf, jf = prog(sc, snp, ssp), prog(jax, jjnp, jsp)
  for i in range(3):
    args = (np.array([-1.0 + 0.1 * i], np.float32), np.array([0.3 - 0.2 * i], np.float32),
            np.float32(0.05 * (1 + i)))
    for a, b in zip(sf(*args), jf(*args)):
      assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
