"""Patterns of blackjax's samplers (NUTS, HMC, SMC over `jax.scipy.stats`) in plain JAX code,
each run on JAX and on stagecraft and compared: values bit for bit, weak types, printed
jaxprs and error texts. blackjax itself is not a test dependency; the report of the
blackjax programs run unchanged on both is in the commit messages of this file."""
import jax
import jax.numpy as jjnp
import jax.scipy.stats as jstats
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
import stagecraft.scipy.stats as stats
from stagecraft import lax


def _same(a, b):
  """Bitwise equal pytrees of arrays, with equal dtypes and weak types."""
  la, ta = jax.tree_util.tree_flatten(a)
  lb, tb = jax.tree_util.tree_flatten(b)
  assert len(la) == len(lb), (ta, tb)
  for x, y in zip(la, lb):
    assert str(sc.typeof(x)) == str(jax.typeof(y)), (sc.typeof(x), jax.typeof(y))
    assert sc.typeof(x).weak_type == jax.typeof(y).weak_type, (sc.typeof(x), jax.typeof(y))
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


# ---------------------------------------------------------------------------
# lax.cond: the deprecated five-argument form (blackjax's iterative U-turn checkpoints)


def _checkpoints(lax_, jnp_, step, r_ckpts, r_sum_ckpts, r, r_sum, idx):
  # blackjax.mcmc.termination.update_criterion_state: cond(pred, x_true, f_true, x_false, f_false)
  return lax_.cond(
      step % 2 == 0,
      (r_ckpts, r_sum_ckpts),
      lambda x: (x[0].at[idx].set(r), x[1].at[idx].set(r_sum)),
      (r_ckpts, r_sum_ckpts),
      lambda x: x)


@pytest.mark.parametrize("step", [2, 3])
def test_cond_five_argument_form(step):
  args = (np.zeros((4, 2), np.float32), np.ones((4, 2), np.float32),
          np.float32([1.5, -2.0]), np.float32([3.0, 4.0]), 1)
  f = lambda lax_, jnp_: (lambda s, *a: _checkpoints(lax_, jnp_, s, *a))
  _same(sc.jit(f(lax, jnp))(step, *args), jax.jit(f(jax.lax, jjnp))(step, *args))
  _same(f(lax, jnp)(step, *args), f(jax.lax, jjnp)(step, *args))
  assert (str(sc.make_jaxpr(f(lax, jnp))(step, *args))
          == str(jax.make_jaxpr(f(jax.lax, jjnp))(step, *args)))


def test_cond_operand_keyword_and_errors():
  x = np.float32([1.0, 2.0])
  for lax_ in (lax, jax.lax):
    out = lax_.cond(True, lambda v: v * 2, lambda v: v, operand=x)
    np.testing.assert_array_equal(np.asarray(out), x * 2)
  msgs = []
  for lax_ in (lax, jax.lax):
    for call in (lambda: lax_.cond(True, 1.0, lambda: 2.0),
                 lambda: lax_.cond(True, lambda v: v, lambda v: v, x, operand=x)):
      with pytest.raises(TypeError) as e:
        call()
      msgs.append(str(e.value))
  assert msgs[:2] == msgs[2:], msgs


# ---------------------------------------------------------------------------
# lax.cond's outputs are typed as its first branch's, weak types included: NUTS keeps the
# initial (weakly typed, from Python floats) state in the rightmost slot of a trajectory


def _trajectory(lax_, jnp_, key_fn, normal, position, key):
  # a one-step "trajectory" going left or right, keeping the other end as it was
  momentum = normal(key, ())
  new = jax.tree_util.tree_map(lambda p: p + 1e-3 * momentum, position)
  go_right = momentum > 0
  right = lax_.cond(go_right, lambda: new, lambda: position)
  left = lax_.cond(go_right, lambda: position, lambda: new)
  return left, right


def test_cond_keeps_first_branch_weak_type():
  pos = {"loc": 1.0, "scale": 2.0}           # Python floats: weakly typed leaves
  for seed in (0, 1, 2, 3):
    got = sc.jit(lambda p, k: _trajectory(lax, jnp, None, sc.random.normal, p, k))(
        pos, sc.random.key(seed))
    want = jax.jit(lambda p, k: _trajectory(jax.lax, jjnp, None, jax.random.normal, p, k))(
        pos, jax.random.key(seed))
    _same(got, want)


def test_cond_weak_type_through_while_loop():
  # the trajectory expansion: a while_loop whose carry starts weak and a cond choosing
  # between the carried value and a strong one
  s = np.float32(0.5)
  def f(lax_, x):
    body = lambda c: (c[0] + 1, lax_.cond(c[0] > 5, lambda: s, lambda: c[1]))
    return lax_.while_loop(lambda c: c[0] < 3, body, (0, x))
  _same(sc.jit(lambda x: f(lax, x))(1.0), jax.jit(lambda x: f(jax.lax, x))(1.0))
  _same(sc.jit(lambda x: lax.cond(x > 0, lambda: (x, s), lambda: (s, x)))(1.0),
        jax.jit(lambda x: jax.lax.cond(x > 0, lambda: (x, s), lambda: (s, x)))(1.0))


# ---------------------------------------------------------------------------
# jax.scipy.stats densities: equal values in every mode (HMC's init computes
# value_and_grad of the log density eagerly), equal printed jaxprs and weak types


_OBS = np.random.default_rng(0).normal(10, 20, size=(4, 250)).astype(np.float32)


def _logdensities(st, jnp_):
  return {
      "norm": lambda s: st.norm.logpdf(_OBS, 1.0, s),
      "norm_pdf": lambda s: st.norm.pdf(_OBS / 20, 1.0, s),
      "norm_rank": lambda s: st.norm.logpdf(_OBS, np.ones(250, np.float32), s),
      "expon": lambda s: st.expon.logpdf(_OBS, 1.0, s),
      "expon_exp": lambda s: st.expon.logpdf(jnp_.exp(s), 0, 1) + s,
  }


@pytest.mark.parametrize("name", ["norm", "norm_pdf", "norm_rank", "expon", "expon_exp"])
def test_stats_logpdf_eager_vjp_bitwise(name):
  f = _logdensities(stats, jnp)[name]
  jf = _logdensities(jstats, jjnp)[name]
  s0 = np.float32(2.7182817)
  _same(f(s0), jf(s0))
  (y, vjp), (jy, jvjp) = sc.vjp(f, s0), jax.vjp(jf, s0)
  _same(y, jy)
  _same(vjp(jnp.ones_like(y)), jvjp(jjnp.ones_like(jy)))
  vg = sc.value_and_grad(lambda s: jnp.sum(f(s)))(s0)
  jvg = jax.value_and_grad(lambda s: jjnp.sum(jf(s)))(s0)
  _same(vg, jvg)


def test_quickstart_logdensity_value_and_grad():
  # blackjax's quickstart model: HMCState(logdensity=...) from an eager value_and_grad
  observed = np.random.default_rng(1).normal(10, 20, size=1000)
  def model(st, jnp_):
    def logdensity(x):
      scale = jnp_.exp(x["log_scale"])
      return x["log_scale"] + jnp_.sum(st.norm.logpdf(observed, x["loc"], scale))
    return logdensity
  pos = {"loc": 1.0, "log_scale": 1.0}
  _same(sc.value_and_grad(model(stats, jnp))(pos), jax.value_and_grad(model(jstats, jjnp))(pos))
  _same(sc.jit(sc.value_and_grad(model(stats, jnp)))(pos),
        jax.jit(jax.value_and_grad(model(jstats, jjnp)))(pos))


@pytest.mark.parametrize("name", ["norm", "norm_pdf", "expon", "expon_exp"])
def test_stats_logpdf_jaxprs(name):
  f = _logdensities(stats, jnp)[name]
  jf = _logdensities(jstats, jjnp)[name]
  s0 = np.float32(2.7182817)
  assert str(sc.make_jaxpr(f)(s0)) == str(jax.make_jaxpr(jf)(s0))


def test_stats_weak_types_and_literals():
  for args in [(1.0,), (1.0, 0.5, 2.0), (np.float32(1.0), 0.5, 2.0)]:
    for name in ("norm", "expon"):
      got = getattr(stats, name).logpdf(*args)
      want = getattr(jstats, name).logpdf(*args)
      _same(got, want)
  f = lambda st: (lambda a: st.norm.logpdf(a, 0.5, 2.0))
  assert str(sc.make_jaxpr(f(stats))(1.0)) == str(jax.make_jaxpr(f(jstats))(1.0))
  assert (str(sc.make_jaxpr(f(stats))(np.float32(1.0)))
          == str(jax.make_jaxpr(f(jstats))(np.float32(1.0))))


def test_stats_rank_promotion_config():
  x, loc = np.ones((2, 3), np.float32), np.zeros(3, np.float32)
  msgs = []
  for cfg, st in ((sc.config, stats), (jax.config, jstats)):
    with (sc.numpy_rank_promotion if st is stats else jax.numpy_rank_promotion)("raise"):
      with pytest.raises(ValueError) as e:
        st.norm.logpdf(x, loc)
      msgs.append(str(e.value))
  assert msgs[0] == msgs[1]


# ---------------------------------------------------------------------------
# blackjax's "sample multiple chains" how-to: one chain per device with jit(shard_map) over
# jax.make_mesh (Explicit axes); the results' shardings are their types', padded to rank


def test_jit_shard_map_result_sharding_explicit_mesh():
  from jax.sharding import NamedSharding as JNS, PartitionSpec as JP
  from stagecraft.sharding import NamedSharding, PartitionSpec as P
  x = np.arange(8 * 3, dtype=np.float32).reshape(4, 6)
  outs = []
  for mod, NS, PS in ((sc, NamedSharding, P), (jax, JNS, JP)):
    mesh = mod.make_mesh((4,), ("chain",))
    xs = mod.device_put(x, NS(mesh, PS("chain")))
    body = lambda v: (v[0] * 2)[None]
    f = mod.shard_map(body, mesh=mesh, in_specs=PS("chain"), out_specs=PS("chain"),
                      check_vma=False)
    y, ye = mod.jit(f)(xs), f(xs)
    outs.append((repr(y.sharding), repr(ye.sharding), str(mod.typeof(y)), np.asarray(y)))
  assert outs[0][:3] == outs[1][:3], outs
  np.testing.assert_array_equal(outs[0][3], outs[1][3])


# ---------------------------------------------------------------------------
# typed keys indexed with None (a scan over `key[None]`: one step of an inference loop) and
# JAX's "Too many indices" text for arrays and key arrays


def test_key_array_none_index_and_errors():
  def run(mod):
    out = []
    k = mod.random.key(0)
    ks = mod.random.split(k, 3)
    for x, idx in [(k, None), (k, (None, None)), (k, (Ellipsis, None)), (ks, (None, 0, None)),
                   (ks, (Ellipsis, 0, None)), (k, 0), (k, (None, 0)), (k, slice(None)),
                   (ks, (0, 0))]:
      try:
        r = x[idx]
        out.append((r.shape, str(r.dtype), np.asarray(mod.random.key_data(r)).tolist()))
      except IndexError as e:
        out.append(str(e))
    out.append(np.asarray(mod.jit(lambda k: mod.random.key_data(k[None, None]))(k)).tolist())
    step = lambda c, k: (c + mod.random.normal(k), c)
    out.append(np.asarray(mod.lax.scan(step, 0.0, k[None])[0]).tolist())
    return out
  assert run(sc) == run(jax)


@pytest.mark.parametrize("shape,idx", [((3,), (0, 0)), ((), (0,)), ((3,), (None, 0, None, 0)),
                                       ((2, 3), (np.ones((2, 3), bool), 1))])
def test_too_many_indices_text(shape, idx):
  msgs = []
  for np_ in (jnp, jjnp):
    x = np_.ones(shape, np_.float32)
    with pytest.raises(IndexError) as e:
      x[idx]
    msgs.append(str(e.value))
  assert msgs[0] == msgs[1]


def test_scan_traced_length_error():
  # jit(partial(lax.scan, step)) with `length` passed positionally traces it
  errs = []
  for mod in (sc, jax):
    f = mod.jit(lambda x, n: mod.lax.scan(lambda c, _: (c + 1, c), x, None, length=n))
    with pytest.raises(Exception) as e:
      f(np.float32(0), 3)
    errs.append(e)
  assert type(errs[0].value).__name__ == type(errs[1].value).__name__ == "ConcretizationTypeError"
  assert isinstance(errs[0].value, sc.errors.ConcretizationTypeError)
  want = ("The `length` argument to `scan` expects a concrete `int` value. For scan-like "
          "iteration with a dynamic length, use `while_loop` or `fori_loop`.")
  assert want in str(errs[0].value) and want in str(errs[1].value)
  assert str(errs[0].value).startswith("Abstract tracer value encountered where concrete value "
                                       "is expected: traced array with shape int32[]")
