"""Key reuse checking (`jax_debug_key_reuse`, `stagecraft.experimental.key_reuse`) against
JAX 0.10.2: the same programs raise `KeyReuseError` with the same message (JAX's adds a
"See https://..." line, which stagecraft's errors leave out) or run, under both."""
import types

import jax
import jax.experimental.key_reuse._core as jkr
import numpy as np
import pytest

import stagecraft as sc
from stagecraft.experimental.key_reuse import _core as skr

J = types.SimpleNamespace(name="jax", jit=jax.jit, make_jaxpr=jax.make_jaxpr,
                          eval_shape=jax.eval_shape, custom_vjp=jax.custom_vjp, random=jax.random, lax=jax.lax,
                          numpy=jax.numpy, kr=jkr, vmap=jax.vmap, grad=jax.grad,
                          value_and_grad=jax.value_and_grad, checkpoint=jax.checkpoint)
S = types.SimpleNamespace(name="sc", jit=sc.jit, make_jaxpr=sc.make_jaxpr,
                          eval_shape=sc.eval_shape, custom_vjp=sc.custom_vjp, random=sc.random, lax=sc.lax,
                          numpy=sc.numpy, kr=skr, vmap=sc.vmap, grad=sc.grad,
                          value_and_grad=sc.value_and_grad, checkpoint=sc.checkpoint)


@pytest.fixture(autouse=True)
def _check_reuse():
  with jax.debug_key_reuse(True), sc.debug_key_reuse(True):
    yield


def _message(e: BaseException) -> str:
  msg = str(e).split("\nSee https://")[0]
  # NB: the loop errors go on with JAX's printed equation and jaxpr, which differ
  return msg.split(":\n")[0].split(":   ")[0]


def outcome(fn, m):
  try:
    fn(m)
  except Exception as e:   # NB: compared between the two libraries
    return type(e).__name__, _message(e)
  return "ok"


def same(fn, expect_error: bool):
  theirs, ours = outcome(fn, J), outcome(fn, S)
  assert ours == theirs, (ours, theirs)
  assert (theirs != "ok") == expect_error, theirs
  return ours


# ---------------------------------------------------------------------------
# Every function of `random`: consumes its key or not, and names JAX's operation.

SAMPLERS = {
    "split": lambda R, k: R.split(k), "bits": lambda R, k: R.bits(k),
    "uniform": lambda R, k: R.uniform(k), "normal": lambda R, k: R.normal(k),
    "randint": lambda R, k: R.randint(k, (), 0, 3), "bernoulli": lambda R, k: R.bernoulli(k),
    "categorical": lambda R, k: R.categorical(k, np.zeros(3, np.float32)),
    "choice": lambda R, k: R.choice(k, 3), "permutation": lambda R, k: R.permutation(k, 3),
    "truncated_normal": lambda R, k: R.truncated_normal(k, -1., 1.),
    "gumbel": lambda R, k: R.gumbel(k), "laplace": lambda R, k: R.laplace(k),
    "exponential": lambda R, k: R.exponential(k), "rademacher": lambda R, k: R.rademacher(k),
    "pareto": lambda R, k: R.pareto(k, 2.), "wald": lambda R, k: R.wald(k, 1.),
    "gamma": lambda R, k: R.gamma(k, 1.), "beta": lambda R, k: R.beta(k, 1., 1.),
    "dirichlet": lambda R, k: R.dirichlet(k, np.ones(2, np.float32)),
    "poisson": lambda R, k: R.poisson(k, 2.),
    "multinomial": lambda R, k: R.multinomial(k, 3., np.full(2, .5, np.float32)),
    "multivariate_normal": lambda R, k: R.multivariate_normal(
        k, np.zeros(2, np.float32), np.eye(2, dtype=np.float32)),
    "orthogonal": lambda R, k: R.orthogonal(k, 2),
}
NOT_CONSUMING = {
    "fold_in": lambda R, k: R.fold_in(k, 1), "key_data": lambda R, k: R.key_data(k),
    "clone": lambda R, k: R.clone(k), "key_impl": lambda R, k: (R.key_impl(k), 0)[1],
    "wrap_key_data": lambda R, k: R.wrap_key_data(R.key_data(k)),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_a_consumed_key_given_to_a_sampler_raises(name):
  use = SAMPLERS[name]

  def eager(m):
    k = m.random.key(0)
    m.random.normal(k)
    use(m.random, k)

  msg = same(eager, True)
  assert msg[0] == "KeyReuseError" and msg[1].startswith("Previously-consumed key passed to")
  # without jit, JAX's samplers name the first primitive they bind on the key
  with jax.disable_jit(), sc.disable_jit():
    assert same(eager, True)[1] != msg[1] or name in ("split", "bits", "multinomial")
  # traced (nothing runs): the second use names the operation that consumes the key
  same(lambda m: m.kr.check_key_reuse(
      lambda k: (m.random.normal(k), use(m.random, k)), m.random.key(0)), True)
  # one use of a fresh key is fine
  same(lambda m: m.kr.check_key_reuse(lambda k: use(m.random, k), m.random.key(0)), False)


@pytest.mark.parametrize("name", sorted(NOT_CONSUMING))
def test_functions_that_do_not_consume_the_key(name):
  use = NOT_CONSUMING[name]

  def eager(m):
    k = m.random.key(0)
    m.random.normal(k)
    use(m.random, k)      # a consumed key is fine here
    k = m.random.key(1)
    use(m.random, k)
    m.random.normal(k)    # and the key is still fresh

  same(eager, False)
  same(lambda m: m.kr.check_key_reuse(
      lambda k: (use(m.random, k), m.random.normal(k)), m.random.key(0)), False)


def test_raw_keys_are_not_checked():
  def f(m):
    k = m.random.PRNGKey(0)
    return m.random.normal(k) + m.random.normal(k)
  same(f, False)
  same(lambda m: m.jit(lambda k: m.random.normal(k) + m.random.normal(k))(
      m.random.PRNGKey(0)), False)


def test_option_off_checks_nothing_but_check_key_reuse_still_does():
  with jax.debug_key_reuse(False), sc.debug_key_reuse(False):
    assert not sc.config.debug_key_reuse
    same(lambda m: [m.random.normal(k) for k in [m.random.key(0)] * 2], False)
    f = lambda m: m.jit(lambda k: m.random.normal(k) + m.random.normal(k))(m.random.key(0))
    same(f, False)
    assert same(lambda m: m.kr.check_key_reuse(
        lambda k: m.random.normal(k) + m.random.normal(k), m.random.key(0)), True) == (
        "KeyReuseError", "In jit, argument 0 is already consumed.")
  sc.config.update("jax_debug_key_reuse", True)
  try:
    with pytest.raises(sc.errors.KeyReuseError):
      k = sc.random.key(0)
      sc.random.normal(k), sc.random.normal(k)
  finally:
    sc.config.update("jax_debug_key_reuse", False)


# ---------------------------------------------------------------------------
# jit: the signature of the traced function, applied at each call


def _jit_twice(m):
  f = m.jit(lambda k: m.random.normal(k))
  k = m.random.key(0)
  f(k)
  f(k)


def _jit_forward(m):
  k = m.random.key(0)
  m.random.normal(k)
  m.random.normal(m.jit(lambda k: k)(k))


def _jit_forward_copies_eagerly(m):
  k = m.random.key(0)
  k2 = m.jit(lambda k: k)(k)
  m.random.normal(k)
  m.random.normal(k2)


def _jit_source(m):
  k = m.random.key(0)
  ks = m.jit(lambda k: m.random.split(k))(k)
  m.random.normal(ks[0])
  m.random.normal(k)


def _jit_result_consumed(m):
  _, k2 = m.jit(lambda k: (m.random.normal(k), k))(m.random.key(0))
  m.random.normal(k2)


def _jit_second_argument(m):
  k = m.random.key(0)
  m.random.normal(k)
  m.jit(lambda x, k: m.random.normal(k) + x)(1., k)


def _jit_same_key_twice_in_one_call(m):
  k = m.random.key(0)
  m.jit(lambda a, b: m.random.normal(a) + m.random.normal(b))(k, k)


def _nested_jit(m):
  g = m.jit(lambda k: m.random.normal(k))
  m.jit(lambda k: g(k) + g(k))(m.random.key(0))


def _jit_closed_over_key_called_twice(m):
  k = m.random.key(0)
  f = m.jit(lambda: m.random.normal(k))
  f()
  f()


def _split_then_use_each(m):
  @m.jit
  def f(k):
    k1, k2 = m.random.split(k)
    return m.random.normal(k1) + m.random.uniform(k2)
  f(m.random.key(0))


def _fold_in_many(m):
  k = m.random.key(0)
  m.jit(lambda k: m.random.normal(m.random.fold_in(k, 1)) + m.random.normal(
      m.random.fold_in(k, 2)) + m.random.normal(k))(k)


def _clone(m):
  k = m.random.key(0)
  m.random.normal(k)
  m.random.normal(m.random.clone(k))


@pytest.mark.parametrize("fn,expect_error", [
    (_jit_twice, True), (_jit_forward, True), (_jit_forward_copies_eagerly, False),
    (_jit_source, True), (_jit_result_consumed, True), (_jit_second_argument, True),
    (_jit_same_key_twice_in_one_call, False), (_nested_jit, True),
    (_jit_closed_over_key_called_twice, True), (_split_then_use_each, False),
    (_fold_in_many, False), (_clone, False)],
    ids=lambda v: getattr(v, "__name__", str(v)))
def test_jit(fn, expect_error):
  same(fn, expect_error)


# ---------------------------------------------------------------------------
# Key arrays: slicing consumes the keys it selects, reshaping passes their state on


def _slice_twice(m):
  ks = m.random.split(m.random.key(0))
  ks[0], ks[0]


def _slice_disjoint(m):
  ks = m.random.split(m.random.key(0), 3)
  m.random.normal(ks[0]), m.random.normal(ks[1]), m.random.normal(ks[2])


def _iterate_twice(m):
  ks = m.random.split(m.random.key(0))
  k1, k2 = ks
  k3, k4 = ks


def _reshape(m):
  k = m.random.key(0)
  k2 = k.reshape((1,))
  m.random.normal(k)
  m.random.normal(k2[0])


def _index_all(m):
  k = m.random.key(0).reshape((1,))
  k[0], k[0]


@pytest.mark.parametrize("fn,eager_error,traced_error", [
    (_slice_twice, True, True), (_slice_disjoint, False, False),
    # NB: as JAX's: iterating consumes the keys only when traced (one slice each)
    (_iterate_twice, False, True),
    # eagerly the reshaped keys start with a copy of the keys' state, traced they share it
    (_reshape, False, True), (_index_all, False, False)],
    ids=lambda v: getattr(v, "__name__", str(v)))
def test_key_arrays(fn, eager_error, traced_error):
  same(fn, eager_error)
  same(lambda m: m.kr.check_key_reuse(lambda: fn(m)), traced_error)


# ---------------------------------------------------------------------------
# Control flow


def _cond_then_use(m):
  @m.jit
  def f(k, p):
    x = m.lax.cond(p, lambda k: m.random.normal(k), lambda k: 0., k)
    return x + m.random.normal(k)
  f(m.random.key(0), True)


def _cond_each_branch_once(m):
  m.jit(lambda k, p: m.lax.cond(p, lambda k: m.random.normal(k),
                                lambda k: m.random.uniform(k), k))(m.random.key(0), True)


def _cond_closure_each_branch(m):
  k = m.random.key(0)
  m.jit(lambda p: m.lax.cond(p, lambda: m.random.normal(k),
                             lambda: m.random.uniform(k)))(True)


def _cond_closure_then_use(m):
  k = m.random.key(0)
  m.jit(lambda p: m.lax.cond(p, lambda: m.random.normal(k), lambda: m.random.uniform(k))
        + m.random.normal(k))(True)


def _cond_eager(m):
  k = m.random.key(0)
  m.random.normal(k)
  m.lax.cond(True, lambda k: m.random.normal(k), lambda k: m.random.uniform(k), k)


def _scan_closure(m):
  k = m.random.key(0)
  m.jit(lambda: m.lax.scan(lambda c, _: (c + m.random.normal(k), None), 0., None,
                           length=3)[0])()


def _scan_carry_split(m):
  def body(k, _):
    k, s = m.random.split(k)
    return k, m.random.normal(s)
  m.jit(lambda k: m.lax.scan(body, k, None, length=3)[1])(m.random.key(0))


def _scan_carry_passed_and_used(m):
  m.jit(lambda k: m.lax.scan(lambda k, _: (k, m.random.normal(k)), k, None,
                             length=3)[1])(m.random.key(0))


def _scan_carry_consumed_not_replaced(m):
  def body(c, _):
    k, s = c
    return (s, k), m.random.normal(k)
  m.jit(lambda k: m.lax.scan(body, (k, m.random.clone(k)), None, length=3)[1])(
      m.random.key(0))


def _scan_over_keys_then_reuse(m):
  @m.jit
  def f(k):
    ks = m.random.split(k, 3)
    m.lax.scan(lambda c, k: (c + m.random.normal(k), None), 0., ks)
    return m.random.normal(ks[0])
  f(m.random.key(0))


def _fori_closure(m):
  k = m.random.key(0)
  m.jit(lambda: m.lax.fori_loop(0, 3, lambda i, c: c + m.random.normal(k), 0.))()


def _while_split(m):
  def body(c):
    i, k, x = c
    k, s = m.random.split(k)
    return i + 1, k, x + m.random.normal(s)
  m.jit(lambda k: m.lax.while_loop(lambda c: c[0] < 3, body, (0, k, 0.)))(m.random.key(0))


def _while_body_reuses(m):
  def body(c):
    i, k, x = c
    return i + 1, k, x + m.random.normal(k)
  m.jit(lambda k: m.lax.while_loop(lambda c: c[0] < 3, body, (0, k, 0.)))(m.random.key(0))


def _while_closure(m):
  k = m.random.key(0)
  m.jit(lambda: m.lax.while_loop(lambda c: c < 3., lambda c: c + m.random.normal(k), 0.))()


def _while_cond_and_body(m):
  def body(c):
    i, k = c
    return i + 1, m.random.split(k)[0]
  m.jit(lambda k: m.lax.while_loop(lambda c: m.random.normal(c[1]) < 3, body, (0, k)))(
      m.random.key(0))


@pytest.mark.parametrize("fn,expect_error", [
    (_cond_then_use, True), (_cond_each_branch_once, False),
    (_cond_closure_each_branch, False), (_cond_closure_then_use, True), (_cond_eager, True),
    (_scan_closure, True), (_scan_carry_split, False), (_scan_carry_passed_and_used, True),
    (_scan_carry_consumed_not_replaced, True), (_scan_over_keys_then_reuse, True),
    (_fori_closure, True), (_while_split, False), (_while_body_reuses, True),
    (_while_closure, True), (_while_cond_and_body, True)],
    ids=lambda v: getattr(v, "__name__", str(v)))
def test_control_flow(fn, expect_error):
  same(fn, expect_error)


# ---------------------------------------------------------------------------
# The `_core` API


def test_function_type_signature_matches_jax():
  cases = [
      (lambda m: (lambda k: m.random.normal(k)), lambda m: (m.random.key(0),)),
      (lambda m: (lambda k: m.random.split(k)), lambda m: (m.random.key(0),)),
      (lambda m: (lambda k: k), lambda m: (m.random.key(0),)),
      (lambda m: (lambda k, x: (m.random.key_data(k), m.random.fold_in(k, 1), x)),
       lambda m: (m.random.key(0), 1.)),
      (lambda m: (lambda ks: m.random.normal(ks[1])), lambda m: (m.random.split(
          m.random.key(0), 3),)),
      (lambda m: (lambda a, b: (m.random.normal(b), a)), lambda m: (m.random.key(0),
                                                                   m.random.key(1))),
  ]
  for fun, args in cases:
    theirs = jkr.function_type_signature(fun(J), *args(J))
    ours = skr.function_type_signature(fun(S), *args(S))
    assert repr(ours) == repr(theirs)
    assert ours.sinks.__class__.__name__ == "generator"
    assert ({(s.idx, np.shape(s.mask)) for s in ours.sinks}
            == {(s.idx, np.shape(s.mask)) for s in theirs.sinks})
  assert skr.check_key_reuse(lambda k: sc.random.normal(k), sc.random.key(0)) is None


def test_signature_classes_behave_as_jax():
  for m in (jkr, skr):
    assert m.Sink(0) == m.Sink(0, True) == m.Sink(0, np.ones(3, bool))
    assert m.Sink(0, np.zeros(2, bool)).mask is False
    assert m.Sink(0) != m.Source(0) and hash(m.Sink(1)) == hash(m.Sink(1))
    mask = np.array([True, False])
    assert repr(m.Sink(2, mask)) == "Sink(2, [ True False])"
    assert m.Sink(2, mask) == m.Sink(2, mask.copy())
    assert sorted([m.Forward(0, 1), m.Source(1), m.Sink(3), m.Sink(0)]) == [
        m.Sink(0), m.Sink(3), m.Source(1), m.Forward(0, 1)]
    sig = m.KeyReuseSignature(m.Source(0), m.Sink(0), m.Forward(1, 2))
    assert repr(sig) == "KeyReuseSignature(Sink(0), Source(0), Forward(1, 2))"
    assert sig == m.KeyReuseSignature(m.Forward(1, 2), m.Sink(0), m.Source(0))
    assert list(sig.forwards) == [m.Forward(1, 2)] and list(sig.sources) == [m.Source(0)]
    with pytest.raises(ValueError, match="Sink is immutable"):
      m.Sink(0).idx = 1
    assert m.KeyReuseError is (jax.errors.KeyReuseError if m is jkr else
                               sc.errors.KeyReuseError)
  assert issubclass(sc.errors.KeyReuseError, TypeError)


def test_check_signature_and_update_consumption():
  for m, lib in ((jkr, jax), (skr, sc)):
    sig = m.KeyReuseSignature(m.Sink(1), m.Source(0))
    a, k = lib.random.key(0), lib.random.key(1)
    out = [lib.random.key(2)]
    sig.check_signature(a, k, funcname="f")
    sig.update_consumption([a, k], out)
    with pytest.raises(m.KeyReuseError, match="Previously-consumed key passed to f at index 1"):
      sig.check_signature(a, k, funcname="f")
    sig.check_signature(k, out[0], funcname="f")   # the Source result is fresh


def test_consume_and_assertions():
  def consumed(m):
    m.kr.check_key_reuse(lambda k: m.random.normal(m.kr.consume(k)), m.random.key(0))
  assert same(consumed, True) == ("KeyReuseError", "In jit, argument 0 is already consumed.")
  same(lambda m: m.kr.check_key_reuse(lambda k: m.kr.assert_consumed(m.kr.consume(k)),
                                      m.random.key(0)), False)
  same(lambda m: m.kr.check_key_reuse(lambda k: m.kr.assert_unconsumed(k), m.random.key(0)),
       False)
  for fn, start in ((lambda m, k: m.kr.assert_consumed(k), "Expected key to be consumed in"),
                    (lambda m, k: m.kr.assert_unconsumed(m.kr.consume(k)),
                     "Expected key to not be consumed in")):
    for m in (J, S):
      with pytest.raises(AssertionError, match=start):
        m.kr.check_key_reuse(lambda k: fn(m, k), m.random.key(0))
  def eager_consume(m):
    k = m.random.key(0)
    m.kr.consume(k)
    m.random.normal(k)
  same(eager_consume, True)


def test_module_and_runner_import():
  import importlib

  from stagecraft import compat
  import stagecraft.experimental as experimental
  assert "key_reuse" in dir(experimental)
  public = lambda mod: [n for n in dir(mod) if not n.startswith("_")]   # noqa: E731
  import jax.experimental.key_reuse as jmod
  assert public(experimental.key_reuse) == public(jmod) == []
  for name in ("check_key_reuse", "check_key_reuse_jaxpr", "function_type_signature",
               "KeyReuseSignature", "Sink", "Source", "Forward", "KeyReuseError",
               "consume", "assert_consumed", "assert_unconsumed"):
    assert hasattr(jkr, name) and hasattr(skr, name), name
  compat.install()
  try:
    served = importlib.import_module("jax.experimental.key_reuse._core")
    assert served is skr
    assert importlib.import_module("jax").debug_key_reuse is sc.debug_key_reuse
  finally:
    compat.uninstall()
  assert skr.check_key_reuse_jaxpr(sc.make_jaxpr(lambda x: x)(1.).jaxpr) is None


# ---------------------------------------------------------------------------
# Other transformations: vmap's body consumes its arguments' keys; AD and checkpoint


def _vmap_twice(m):
  ks = m.random.split(m.random.key(0), 3)
  m.vmap(m.random.normal)(ks)
  m.vmap(m.random.normal)(ks)


def _vmap_then_slice(m):
  ks = m.random.split(m.random.key(0), 3)
  m.vmap(m.random.normal)(ks)
  m.random.normal(ks[0])


def _vmap_split_then_use(m):
  ks = m.vmap(m.random.split)(m.random.split(m.random.key(0), 3))
  m.vmap(m.vmap(m.random.normal))(ks)


def _vmap_in_jit(m):
  m.jit(lambda ks: m.vmap(m.random.normal)(ks) + m.vmap(m.random.uniform)(ks))(
      m.random.split(m.random.key(0), 3))


def _vmap_unbatched_key(m):
  k = m.random.key(0)
  m.vmap(lambda x, k: x + m.random.normal(k), in_axes=(0, None))(np.ones(3, np.float32), k)
  m.random.normal(k)


def _vmap_fold_in(m):
  k = m.random.key(0)
  m.vmap(lambda i: m.random.normal(m.random.fold_in(k, i)))(np.arange(3))
  m.random.normal(k)


def _grad_twice(m):
  f = lambda p, k: p * m.random.normal(k)   # noqa: E731
  k = m.random.key(0)
  m.grad(f)(1., k)
  m.grad(f)(1., k)


def _jit_grad(m):
  m.jit(m.grad(lambda p, k: p * m.random.normal(k) + m.random.uniform(k)))(1., m.random.key(0))


def _jit_value_and_grad(m):
  def loss(p, k):
    k1, k2 = m.random.split(k)
    return p * m.random.normal(k1) + m.random.uniform(k2)
  m.jit(m.value_and_grad(loss))(1., m.random.key(0))


def _checkpoint_twice(m):
  m.jit(m.checkpoint(lambda k: m.random.normal(k) + m.random.normal(k)))(m.random.key(0))


def _checkpoint_then_use(m):
  m.jit(lambda k: m.checkpoint(lambda k: m.random.normal(k))(k) + m.random.normal(k))(
      m.random.key(0))


def _grad_of_checkpoint(m):
  loss = lambda p, k: m.checkpoint(lambda p, k: p * m.random.normal(k))(p, k)  # noqa: E731
  m.jit(m.grad(loss))(1., m.random.key(0))


@pytest.mark.parametrize("fn,expect_error", [
    (_vmap_twice, True), (_vmap_then_slice, True), (_vmap_split_then_use, False),
    (_vmap_in_jit, True), (_vmap_unbatched_key, True), (_vmap_fold_in, False),
    (_grad_twice, True), (_jit_grad, True), (_jit_value_and_grad, False),
    (_checkpoint_twice, True), (_checkpoint_then_use, True), (_grad_of_checkpoint, False)],
    ids=lambda v: getattr(v, "__name__", str(v)))
def test_transformations(fn, expect_error):
  same(fn, expect_error)


def _make_jaxpr_closure(m):
  k = m.random.key(0)
  m.make_jaxpr(lambda: m.random.normal(k))()
  m.eval_shape(lambda: m.random.normal(k))
  m.random.normal(k)


def _lower_then_call(m):
  k = m.random.key(0)
  f = m.jit(lambda k: m.random.normal(k))
  f.lower(k)
  f(k)      # lowering consumed nothing; the call does
  m.random.normal(k)


def _custom_vjp_consumes(m):
  @m.custom_vjp
  def f(x, k):
    return x * m.random.normal(k)
  f.defvjp(lambda x, k: (f(x, k), (k,)), lambda r, g: (g, None))
  k = m.random.key(0)
  m.jit(f)(1., k)
  m.random.normal(k)


@pytest.mark.parametrize("fn,expect_error", [
    (_make_jaxpr_closure, False), (_lower_then_call, True), (_custom_vjp_consumes, True)],
    ids=lambda v: getattr(v, "__name__", str(v)))
def test_tracing_without_calling(fn, expect_error):
  same(fn, expect_error)
