"""`stagecraft.Ref` at jit boundaries (issue 26): refs passed to a jitted function and refs
it closes over (JAX's implicit arguments) are read and written inside, and the writes are
visible after the call; `typeof(ref)` is an `AbstractRef`; JAX's errors for a returned ref,
a ref passed twice, and a write of the wrong dtype or shape. Each program runs under JAX
(the oracle) and stagecraft in the same test."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.state import AbstractRef

LIBS = [(jax, jjnp), (sc, jnp)]


def _both(program):
  """`program(lib, np_lib)` run with JAX then stagecraft; both results as nested lists."""
  return [jax.tree_util.tree_map(lambda x: np.asarray(x).tolist(), program(L, N),
                                 is_leaf=lambda x: isinstance(x, (jax.Ref, sc.Ref)))
          for L, N in LIBS]


def _value(r):
  return np.asarray(r[...]).tolist()


def test_ref_arguments_read_and_written():
  def program(L, N):
    @L.jit
    def f(ref, x):
      ref[...] += x
      ref[1] = 7.
      ref[0:2] = ref[1:3] * 2.
      return ref[0] * 2
    r = L.new_ref(N.arange(3.))
    out1 = f(r, 1.)
    r2 = L.new_ref(N.ones(3))
    out2 = f(r2, 2.)
    return [out1, out2, _value(r), _value(r2)]
  jax_out, sc_out = _both(program)
  assert sc_out == jax_out


def test_closed_over_counter_in_jitted_loop():
  def program(L, N):
    count = L.new_ref(0)
    total = L.new_ref(N.zeros(2))

    @L.jit
    def step(x):
      count[...] += 1
      total[...] = total[...] + x * count[...]
      return total[...].sum()
    outs = [step(N.array([1., 2.])) for _ in range(4)]
    reads = L.jit(lambda: L.lax.fori_loop(0, 3, lambda i, a: a + count[...] * i, 0))()
    return [outs, _value(count), _value(total), reads, repr(count), repr(total)]
  jax_out, sc_out = _both(program)
  assert sc_out == jax_out
  assert sc_out[1] == 4


def test_optimizer_state_updated_in_place():
  def program(L, N):
    params = {"w": N.ones(3), "b": N.zeros(())}
    opt = {"m": L.new_ref(N.zeros(3)), "t": L.new_ref(0)}

    @L.jit
    def update(params, opt, x):
      g = L.grad(lambda p: ((p["w"] * x).sum() + p["b"]) ** 2)(params)
      opt["m"][...] = 0.9 * opt["m"][...] + g["w"]
      opt["t"][...] += 1
      return {"w": params["w"] - 0.1 * opt["m"][...], "b": params["b"] - 0.1 * g["b"]}
    for _ in range(3):
      params = update(params, opt, N.arange(3.))
    return [params, _value(opt["m"]), _value(opt["t"])]
  jax_out, sc_out = _both(program)
  np.testing.assert_allclose(sc_out[0]["w"], jax_out[0]["w"], rtol=1e-6)
  np.testing.assert_allclose(sc_out[1], jax_out[1], rtol=1e-6)
  assert sc_out[0]["b"] == pytest.approx(jax_out[0]["b"], rel=1e-6)
  assert sc_out[2] == jax_out[2] == 3
  assert list(sc_out[0]) == list(jax_out[0])   # the output dict's keys sorted, as JAX


def test_refs_in_pytrees_kwargs_and_static_arguments():
  def program(L, N):
    @functools.partial(L.jit, static_argnums=1)
    def scale(r, n, *, s):
      for _ in range(n):
        r[...] = r[...] * s
      return r[...].sum()
    r = L.new_ref(N.ones(2))
    a = scale(r, 3, s=2.)
    b = scale(r, 2, s=N.float32(1.5))
    refs = [L.new_ref(1.), L.new_ref(N.arange(2.))]
    L.jit(lambda rs, d: [q.__setitem__(Ellipsis, q[...] + d["k"]) for q in rs] and None)(
        refs, {"k": 2.})
    return [a, b, _value(r), [_value(q) for q in refs]]
  jax_out, sc_out = _both(program)
  assert sc_out == jax_out


def test_nested_jits_share_a_closed_over_ref():
  def program(L, N):
    c = L.new_ref(0.)

    @L.jit
    def inc(x):
      c[...] += x
      return c[...]

    @L.jit
    def twice(x):
      return inc(x) + inc(2. * x)
    outs = [twice(1.), twice(1.), inc(1.)]

    @L.jit
    def local(x):   # an inner jit closing over a ref made by the outer one writes into it
      r = L.new_ref(x)
      L.jit(lambda: r.__setitem__(Ellipsis, r[...] * 3.))()
      return r[...]
    return [outs, _value(c), local(2.)]
  jax_out, sc_out = _both(program)
  assert sc_out == jax_out


def test_refs_under_grad_vmap_and_scan():
  def program(L, N):
    w = L.new_ref(N.array([1., 2.]))

    @L.jit
    def loss(x):
      return (w[...] * x).sum() ** 2
    g = L.grad(loss)(N.ones(2))
    g2 = L.grad(lambda x: L.jit(lambda x, r: (r[...] * x).sum())(x, w))(1.)
    v = L.vmap(loss)(N.ones((3, 2)))
    s = L.jit(lambda x: L.lax.scan(lambda a, y: (a + w[...].sum() * y, None), x,
                                   N.arange(3.))[0])(1.)
    return [g, g2, v, s]
  jax_out, sc_out = _both(program)
  assert sc_out == jax_out


def test_jit_called_in_loop_bodies_reads_closed_over_refs():
  def program(L, N):
    w = L.new_ref(N.array([1., 2.]))
    c = L.new_ref(0.)
    inner = L.jit(lambda x: w[...].sum() * x)
    s = L.jit(lambda x: L.lax.scan(lambda a, y: (a + inner(y), None), x, N.arange(3.))[0])

    @L.jit
    def g(x):
      c[...] += x
      return L.lax.cond(x > 0, lambda: c[...] * 2, lambda: c[...])
    wl = L.jit(lambda: L.lax.while_loop(lambda i: i < w[...].sum(), lambda i: i + 1., 0.))
    return [s(1.), g(1.), g(-1.), _value(c), wl()]
  jax_out, sc_out = _both(program)
  assert sc_out == jax_out


def test_same_aval_refs_reuse_the_traced_program():
  def program(L, N):
    traces = []

    @L.jit
    def f(r):
      traces.append(1)
      r[...] = r[...] + 1.
    refs = [L.new_ref(N.full(3, float(i))) for i in range(3)]
    for r in refs:
      f(r)
    f(L.new_ref(N.zeros(4)))   # a new aval traces again
    return [len(traces), [_value(r) for r in refs]]
  jax_out, sc_out = _both(program)
  assert sc_out == jax_out == [2, [[1.] * 3, [2.] * 3, [3.] * 3]]


def test_typeof_is_an_abstract_ref():
  for shape, dtype in [((3,), np.float32), ((2, 3), np.int32), ((), np.bool_)]:
    x = np.zeros(shape, dtype)
    t_sc, t_jax = sc.typeof(sc.new_ref(jnp.asarray(x))), jax.typeof(jax.new_ref(x))
    assert isinstance(t_sc, AbstractRef) and isinstance(t_jax, jax.ref.AbstractRef)
    assert str(t_sc) == str(t_jax) and repr(t_sc) == repr(t_jax)
    assert t_sc.shape == t_jax.shape and t_sc.dtype == t_jax.dtype
    assert t_sc.inner_aval == sc.typeof(jnp.asarray(x))
  seen = {}
  for L, N in LIBS:
    L.jit(lambda r, L=L: seen.setdefault(L.__name__, str(L.typeof(r))) and None)(
        L.new_ref(N.ones(2)))
  assert seen["stagecraft"] == seen["jax"] == "Ref{float32[2]}"
  assert sc.typeof(sc.new_ref(1.)) == sc.typeof(sc.new_ref(2.))


def test_errors_as_jax():
  for L, N in LIBS:
    r = L.new_ref(N.zeros(3))
    with pytest.raises(ValueError, match="mutable array references cannot be returned"
                       r"(.|\n)*passed in as the argument r"):
      L.jit(lambda r: r)(r)
    with pytest.raises(ValueError, match="mutable array references cannot be returned"):
      L.jit(lambda: L.new_ref(1.))()
    two = L.jit(lambda a, b: a[...] + b[...])
    two(r, L.new_ref(N.ones(3)))   # traced for two refs of the same type first
    with pytest.raises(ValueError, match=r"only one reference to a mutable array may be "
                       r"passed as an argument(.|\n)*appeared at both a and b"):
      two(r, r)
    with pytest.raises(ValueError, match=r"Invalid dtype for `swap`. Ref dtype: float32. "
                       r"Value dtype: int32"):
      L.jit(lambda r: r.__setitem__(0, 3))(r)
    with pytest.raises(ValueError, match=r"Invalid shape for `swap`. Ref shape: \(3,\)"):
      L.jit(lambda r: r.__setitem__(Ellipsis, N.ones(2)))(r)
    with pytest.raises(ValueError, match="Invalid dtype for `swap`"):
      r[0] = 2   # eagerly too
    assert _value(r) == [0., 0., 0.]   # nothing written by the failed calls


def test_loop_body_writes_match_jax():
  # a ref written in a loop body is carried through the loop and written back (more in
  # tests/test_refs_loops.py)
  def program(L, N):
    cnt = L.new_ref(0)

    def body(i, a):
      cnt[...] += 1
      return a + cnt[...]
    out = L.jit(lambda: L.lax.fori_loop(0, 5, body, 0))()
    return [out, _value(cnt)]
  jax_out, sc_out = _both(program)
  assert sc_out == jax_out == [15, 5]


def test_frozen_ref_is_refused_by_jit():
  r = sc.new_ref(jnp.ones(2))
  assert sc.freeze(r).tolist() == [1., 1.]
  with pytest.raises(ValueError, match="frozen"):
    sc.jit(lambda r: r[...])(r)


def test_x64_ref_update():
  with sc.enable_x64(), jax.enable_x64(True):
    def program(L, N):
      r = L.new_ref(N.arange(3, dtype=N.float64) / 3)
      L.jit(lambda r, x: r.__setitem__(Ellipsis, r[...] * x + 1e-12))(r, 3.)
      return [_value(r), str(L.typeof(r))]
    jax_out, sc_out = _both(program)
  assert sc_out == jax_out and sc_out[1] == "Ref{float64[3]}"


@given(shape=st.sampled_from([(), (1,), (3,), (2, 3)]),
       dtype=st.sampled_from([np.float32, np.int32, np.bool_]))
def test_read_write_matches_jax(shape, dtype):
  x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape).astype(dtype)

  def program(L, N):
    r = L.new_ref(N.asarray(x))

    @L.jit
    def f(r, y):
      v = r[...]
      r[...] = (v ^ y) if dtype == np.bool_ else v * 2 + y
      return v
    f(r, N.asarray(x))
    return [_value(r)]
  jax_out, sc_out = _both(program)
  assert sc_out == jax_out
