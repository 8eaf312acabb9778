"""`Ref`s made eagerly passed to (or closed over by) transformations outside `jit`, as in
JAX's array-refs tutorial (docs/array_refs.md): `vmap` over ref arguments (batched or not),
`grad`/`vjp`/`jvp` of functions taking refs, `custom_vjp` functions given refs (the
stash-grads pattern), the errors JAX raises for writes into refs from inside a
transformation, the "both closed over and passed" error of `jit`, buffers reused in place
(`Ref.unsafe_buffer_pointer`), and `jnp` functions given a ref. Each program runs under JAX
(the oracle) and stagecraft in the same test; values, reprs and messages are compared."""
from __future__ import annotations

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp

LIBS = [(jax, jjnp), (sc, jnp)]


def _both(program):
  """`program(lib, np_lib)` run with JAX then stagecraft, each result as a nested list of
  values (Arrays as lists, refs by repr, exceptions as (type name, first line))."""
  outs = []
  for L, N in LIBS:
    def conv(x):
      if isinstance(x, (L.Ref, BaseException)):
        return repr(x) if isinstance(x, L.Ref) else (type(x).__name__, str(x).splitlines()[0])
      return np.asarray(x).tolist()
    outs.append(jax.tree_util.tree_map(conv, program(L, N),
                                       is_leaf=lambda x: isinstance(x, BaseException)))
  return outs


def _raises(fn):
  """The exception `fn()` raises (None if it returns)."""
  try:
    fn()
  except Exception as e:   # noqa: BLE001 (the exception is the result compared)
    return e
  return None


# ---------------------------------------------------------------------------
# vmap


def _dist(x, y, out_ref):
  assert x.ndim == y.ndim == 1
  assert out_ref.ndim == 0
  out_ref[...] = ((x - y) ** 2).sum()


@pytest.mark.parametrize("jit", [False, True])
def test_nested_vmap_writes_into_a_batched_ref_argument(jit):
  # the tutorial's pairwise distances: each (i, j) writes its own element of out_ref
  def program(L, N):
    vecs = N.arange(12.).reshape(3, 4)
    out_ref = L.new_ref(N.zeros((3, 3)))
    f = L.vmap(L.vmap(_dist, (0, None, 0)), (None, 0, 0))
    res = (L.jit(f) if jit else f)(vecs, vecs, out_ref)
    return [res is None, out_ref]
  jax_out, sc_out = _both(program)
  assert sc_out == jax_out
  assert "256." in sc_out[1]


def test_vmap_ref_arguments_batched_and_not():
  def program(L, N):
    def scale(x, r):
      r[...] = r[...] * x
      return x

    def read(r):
      return r[...] * 2
    r1 = L.new_ref(N.ones(3))
    a = L.vmap(scale, (0, 0))(N.arange(3.), r1)
    r2 = L.new_ref(N.ones((2, 3)))
    b = L.vmap(scale, (None, 0))(2., r2)
    c = L.jit(L.vmap(scale, (0, 0)))(N.arange(2.), r2)
    d = L.vmap(read)(L.new_ref(N.arange(3.)))
    e = L.vmap(read, (None,), axis_size=2)(L.new_ref(N.arange(3.)))   # read, unbatched
    return [a, r1, b, c, r2, d, e]
  jax_out, sc_out = _both(program)
  assert sc_out == jax_out


@pytest.mark.parametrize("jit", [False, True])
def test_vmap_write_into_an_unbatched_ref_raises_jax_error(jit):
  def program(L, N):
    x_ref = L.new_ref(0.)

    def closed(x):
      x_ref[...] = x

    def arg_batched_value(x, r):
      r[...] += L.lax.stop_gradient(x)
      return x

    def arg_unbatched_value(x, r):
      r[...] = r[...] + 1.
      return x

    def arg_constant(x, r):
      r[...] = 5.
      return x
    wrap = L.jit if jit else (lambda f: f)
    xs = N.arange(3.)
    errs = [_raises(lambda: wrap(L.vmap(closed))(xs))]
    for f in [arg_batched_value, arg_unbatched_value, arg_constant]:
      errs.append(_raises(lambda: wrap(L.vmap(f, (0, None)))(xs, x_ref)))
    return [errs, x_ref]
  jax_out, sc_out = _both(program)
  assert sc_out == jax_out
  assert sc_out[0][0] == ("Exception", "performing a set/swap operation with vmapped value on "
                          "an unbatched array reference of type Ref{float32[]}. Move the "
                          "array reference to be an argument to the vmapped function?")


# ---------------------------------------------------------------------------
# grad, vjp, jvp


def test_grad_with_a_ref_argument_it_does_not_differentiate():
  def program(L, N):
    def h(x, r):
      r[...] += L.lax.stop_gradient(x)
      return x * 3

    def g(x, r):   # writes a differentiated value: JAX's error
      r[...] += x
      return x * 3
    outs = []
    for f in [lambda x, r: L.grad(h)(x, r), lambda x, r: L.grad(lambda y: h(y, r))(x),
              lambda x, r: L.value_and_grad(h)(x, r), L.jit(lambda x, r: L.grad(h)(x, r))]:
      r = L.new_ref(0.)
      outs.append([f(2., r), r])
    r = L.new_ref(N.zeros(()))
    for f in [lambda x: L.grad(g)(x, r), lambda x: L.grad(lambda y: g(y, r))(x),
              lambda x: L.jvp(lambda y: g(y, r), (x,), (1.,)),
              L.jit(lambda x: L.grad(g)(x, r))]:
      outs.append(_raises(lambda: f(2.)))
    return outs
  jax_out, sc_out = _both(program)
  assert sc_out == jax_out
  assert sc_out[-1][1].startswith("performing a set/swap operation with a differentiated value")


def _stash_grads(L):
  @L.custom_vjp
  def stash_grads(grads_ref, x):
    return x

  def fwd(grads_ref, x):
    return x, grads_ref

  def bwd(grads_ref, g):
    grads_ref[...] = g
    return None, g
  stash_grads.defvjp(fwd, bwd)
  return stash_grads


def test_custom_vjp_stashes_gradients_into_a_ref():
  # the tutorial's stash_grads: a ref passed to a custom_vjp function, returned by its fwd
  # rule as a residual and written by its bwd rule
  def program(L, N):
    stash = _stash_grads(L)

    def f(x, grads_ref):
      return N.sin(stash(grads_ref, x))
    outs = []
    for run in [lambda r: L.grad(f)(1., r), lambda r: L.grad(lambda x: f(x, r))(1.),
                lambda r: L.jit(L.grad(f))(1., r), lambda r: f(2., r)]:
      r = L.new_ref(0.)
      outs.append([run(r), r])
    return outs
  jax_out, sc_out = _both(program)
  assert sc_out == jax_out
  assert sc_out[0][1] == "Ref(0.5403023, dtype=float32)"


def test_vjp_and_grad_of_ref_primals_raise_jax_cotangent_error():
  def program(L, N):
    def f(x_ref):
      return x_ref[...] ** 2

    def g(x_ref):
      x_ref[...] = N.sin(x_ref[...])
      return x_ref[...] ** 2
    x_ref = L.new_ref(2.)
    y, f_vjp = L.vjp(f, x_ref)
    g_ref = L.new_ref(2.)
    _, g_vjp = L.vjp(g, g_ref)   # runs g: g_ref is updated here
    return [y, g_ref,
            _raises(lambda: f_vjp(1.0)),
            _raises(lambda: f_vjp.with_refs(L.new_ref(0.))(1.0)),
            _raises(lambda: g_vjp.with_refs(L.new_ref(0.))(1.0)),
            _raises(lambda: L.grad(f)(L.new_ref(2.)))]
  jax_out, sc_out = _both(program)
  assert sc_out == jax_out
  assert sc_out[2] == ("ValueError", "Expected cotangent type Ref{float32[]} but got float32[]")


def test_jvp_with_ref_primals():
  def program(L, N):
    def h(x, r):
      r[...] += L.lax.stop_gradient(x)
      return x * 3

    def w(x, r):
      r[...] = 1.
      return x * 3

    def n(x, r):
      return x * 3

    def m(x, r):
      r[...] = r[...] * x
      return r[...] + x
    outs = []
    for f in [h, w, n]:
      for t in [0., N.float32(0.), L.new_ref(0.)]:
        r = L.new_ref(0.)
        res = []
        err = _raises(lambda: res.append(L.jvp(f, (2., r), (1., t))))
        outs.append([err, res, r])
    r, t = L.new_ref(N.ones(2)), L.new_ref(N.ones(2))
    outs.append([L.jvp(L.jit(m), (2., r), (0.5, t)), r, t])
    r, t = L.new_ref(3.), L.new_ref(1.)
    outs.append([L.jvp(m, (2., r), (1., t)), r, t])
    return outs
  jax_out, sc_out = _both(program)
  # KNOWN difference: h with a ref tangent leaves the weakly typed ref weak here, strong in
  # JAX (values equal; docs/differences.md)
  assert sc_out[2][2] != jax_out[2][2]
  assert sc_out[2][2].replace(", weak_type=True", "") == jax_out[2][2]
  sc_out[2][2] = jax_out[2][2]
  assert sc_out == jax_out
  assert sc_out[0][0] == ("ValueError", "`get` must be called on `Ref` types: ~float32[].")
  assert sc_out[3][0][0] == "AttributeError"


# ---------------------------------------------------------------------------
# jit


def _err3_program(L, N):
  x_ref = L.new_ref(0.)

  @L.jit
  def err3(y_ref):
    y_ref[...] = x_ref[...]

  @L.jit
  def reads_both(y_ref):
    return y_ref[...] + x_ref[...]
  return [_raises(lambda: err3(x_ref)), _raises(lambda: reads_both(x_ref)),
          reads_both(L.new_ref(1.)), x_ref]


def test_ref_both_closed_over_and_passed_raises_jax_error():
  jax_out, sc_out = _both(_err3_program)
  assert sc_out == jax_out
  assert sc_out[0][1].endswith("was both closed over and passed as the argument y_ref")
  assert "err3 at " in sc_out[0][1]


def test_jitted_writes_reuse_the_ref_buffer():
  # JAX writes refs in place: the buffer address stays; a value read out of the ref before
  # keeps its value
  results = []
  for L, N in LIBS:
    @L.jit
    def sin_inplace(x_ref):
      x_ref[...] = N.sin(x_ref[...])
    y_ref = L.new_ref(N.zeros(3))

    @L.jit
    def bump():
      y_ref[1] += 1.
    x_ref = L.new_ref(N.arange(3.))
    p0, q0 = x_ref.unsafe_buffer_pointer(), y_ref.unsafe_buffer_pointer()
    text = repr(x_ref)
    sin_inplace(x_ref)
    bump()
    bump()
    same = [p0 == x_ref.unsafe_buffer_pointer(), q0 == y_ref.unsafe_buffer_pointer()]
    before = x_ref[...]
    sin_inplace(x_ref)
    results.append([text, same, repr(x_ref), repr(y_ref), np.asarray(before).tolist()])
  assert results[1] == results[0]
  assert results[1][1] == [True, True]


# ---------------------------------------------------------------------------
# jnp functions of a ref


def test_jnp_functions_given_a_ref_raise_jax_error():
  def program(L, N):
    r = L.new_ref(1.)
    return [_raises(lambda: N.sin(r)), _raises(lambda: L.jit(lambda: N.sin(r))()),
            _raises(lambda: L.jit(N.sin)(r)), _raises(lambda: L.jit(lambda r: N.add(r, 1))(r)),
            _raises(lambda: N.multiply(2., r))]
  jax_out, sc_out = _both(program)
  assert sc_out == jax_out
  assert sc_out[0] == ("TypeError", "sin requires ndarray or scalar arguments, got <class "
                       "'jax._src.interpreters.partial_eval.DynamicJaxprTracer'> at position 0.")


# ---------------------------------------------------------------------------
# weak types of the values refs hold


def test_weak_types_after_writes_and_loops():
  # a write (JAX's swap) stores a strongly typed value, eagerly and under jit; an addupdate
  # keeps a weak one; a loop that only reads a ref made weak leaves it weak (its carry has
  # the ref's type), one that writes it leaves it strong
  def program(L, N):
    outs = []
    r = L.new_ref(0.)
    r[...] = 3.
    outs.append(r)
    for closed in [False, True]:
      for body in [lambda r: r.__setitem__(..., 2), lambda r: r.__setitem__((), r[...] + 1),
                   lambda r: None]:
        r = L.new_ref(0)
        if closed:
          L.jit(lambda: body(r))()
        else:
          L.jit(body)(r)
        outs.append(r)
    r = L.new_ref(0.)
    L.ref.addupdate(r, None, 1.)
    outs.append(r)
    r = L.new_ref(0)
    L.lax.scan(lambda c, x: (r.__setitem__(..., r[...] + x), None), None, N.arange(10))
    outs.append(r)
    r = L.new_ref(0)
    r[...] = 4
    reads = L.jit(lambda: L.lax.fori_loop(0, 3, lambda i, a: a + r[...] * i, 0))()
    outs += [reads, r]
    return outs
  jax_out, sc_out = _both(program)
  assert sc_out == jax_out
  assert sc_out[-1] == "Ref(4, dtype=int32, weak_type=True)"


def test_ref_primal_with_zero_cotangent_gets_a_zero_ref():
  def program(L, N):
    def u(x, r):
      return x * 2
    y, fv = L.vjp(u, 2., L.new_ref(1.))
    _, fv2 = L.vjp(u, 2., L.new_ref(N.ones(3)))
    return [y, fv(1.), fv2(1.), L.grad(u)(2., L.new_ref(1.)),
            L.grad(u, argnums=(0, 1))(2., L.new_ref(1.))]
  jax_out, sc_out = _both(program)
  assert sc_out == jax_out
  assert sc_out[1][1] == "Ref(0., dtype=float32, weak_type=True)"


def test_vmap_returns_a_ref_argument_and_refuses_one_passed_twice():
  def program(L, N):
    def pair(x, r):
      return x, r

    def both(r, s):
      return r[...] + s[...]
    r = L.new_ref(N.ones(3))
    out = L.vmap(pair, (0, 0))(N.arange(3.), r)
    return [out, out[1] is r, _raises(lambda: L.vmap(both)(r, r))]
  jax_out, sc_out = _both(program)
  assert sc_out == jax_out
  assert sc_out[2][1].startswith("only one reference to a mutable array may be passed")
  assert " for vmap the mutable array reference of type Ref{float32[3]} appeared at both r " \
      "and s." in sc_out[2][1]


def test_a_failed_call_with_a_ref_leaves_a_shared_jitted_function_unchanged():
  """jnp's ufuncs are shared jitted functions: a call given a ref (which raises, as JAX's)
  must not switch them to the refs path for later calls (it did: the vjp of a chain of
  `jnp.sin` then printed `jit[name=sin]` equations, unlike JAX's)."""
  def f(x):
    for _ in range(3):
      x = jnp.sin(x)
    return x

  def transpose_jaxpr():
    _, vjp = sc.vjp(f, 3.0)
    return str(sc.make_jaxpr(vjp)(1.0))
  before = transpose_jaxpr()
  assert "jit[" not in before
  r = sc.new_ref(1.0)
  with pytest.raises(TypeError, match="sin requires ndarray or scalar arguments"):
    jnp.sin(r)
  assert transpose_jaxpr() == before
