"""Printed jaxprs against JAX 0.10.2's, character for character.

A corpus of small programs written from JAX's tutorials and docs ("Understanding jaxprs",
the autodiff cookbook, "Thinking in JAX", control flow, custom derivatives, ...). Each is
traced by `stagecraft.make_jaxpr` and by `jax.make_jaxpr` and the two printed texts must be
equal: the same variable names (sub-jaxprs continue the outer naming, `_` for results
nobody uses), the same params in the same order and format, the same layout.

`KNOWN_DIFFERENCES` lists the programs whose jaxprs differ in content (different equations),
each with the reason; for those the test asserts that they still differ, so that a fix
shows up as a failure asking to move the program back to the equal set.

Run this file as a script to print the differences side by side.
"""
from __future__ import annotations

import functools
import types

import jax
import jax.numpy as jjnp
import jax.scipy.special
import numpy as np
import pytest

import stagecraft
import stagecraft.numpy as snp
import stagecraft.scipy.special


def _ns(lib, np_, special):
  return types.SimpleNamespace(lib=lib, np=np_, lax=lib.lax, nn=lib.nn, special=special)


JAX = _ns(jax, jjnp, jax.scipy.special)
SC = _ns(stagecraft, snp, stagecraft.scipy.special)


def f32(*shape):
  return (np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + 1) / 7


def i32(*shape):
  return np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)


# Each program: m (a namespace: m.lib is `jax` or `stagecraft`, m.np its numpy, m.lax,
# m.nn, m.special) -> (function, args).
PROGRAMS = {}


def program(fn):
  PROGRAMS[fn.__name__] = fn
  return fn


# --- "Understanding jaxprs" (docs/jaxpr.md) --------------------------------------------

@program
def doc_func1(m):
  def func1(first, second):
    temp = first + m.np.sin(second) * 3.
    return m.np.sum(temp)
  return func1, (np.zeros(8, np.float32), np.ones(8, np.float32))


@program
def doc_func3_inlined_python(m):
  def inner(second):
    if second.shape[0] > 4:
      return m.np.sin(second)
    raise AssertionError

  def func3(first, second):
    return m.np.sum(first + inner(second) * 3.)
  return func3, (np.zeros(8, np.float32), np.ones(8, np.float32))


@program
def doc_func4_pytree_arg(m):
  def func4(arg):
    return m.np.sum(arg[0] + m.np.sin(arg[1]) * 3.)
  return func4, ((np.zeros(8, np.float32), np.ones(8, np.float32)),)


@program
def doc_switch_one_of_three(m):
  def one_of_three(index, arg):
    return m.lax.switch(index, [lambda x: x + 1., lambda x: x - 2., lambda x: x + 3.], arg)
  return one_of_three, (1, 5.)


@program
def doc_func7_cond(m):
  def func7(arg):
    return m.lax.cond(arg >= 0., lambda xtrue: xtrue + 3., lambda xfalse: xfalse - 3., arg)
  return func7, (5.,)


@program
def doc_func8_cond_const_pytree(m):
  def func8(arg1, arg2):
    return m.lax.cond(arg1 >= 0., lambda xtrue: xtrue[0],
                      lambda xfalse: m.np.array([1]) + xfalse[1], arg2)
  return func8, (5., (np.zeros(1, np.float32), 2.))


@program
def doc_func10_fori_dynamic(m):
  def func10(arg, n):
    ones = m.np.ones(arg.shape)
    return m.lax.fori_loop(0, n, lambda i, carry: carry + ones * 3. + arg, arg + ones)
  return func10, (np.ones(16, np.float32), 5)


@program
def doc_func11_scan(m):
  def func11(arr, extra):
    ones = m.np.ones(arr.shape)

    def body(carry, aelems):
      ae1, ae2 = aelems
      return (carry + ae1 * ae2 + extra, carry)
    return m.lax.scan(body, 0., (arr, ones))
  return func11, (np.ones(16, np.float32), 5.)


@program
def doc_func12_jit(m):
  def func12(arg):
    @m.lib.jit
    def inner(x):
      return x + arg * m.np.ones(1)
    return arg + inner(arg - 2.)
  return func12, (1.,)


# --- constants, literals, dtypes, pytrees, unused values --------------------------------

_ARANGE3 = np.arange(3.0, dtype=np.float32)


@program
def closed_over_array(m):
  return (lambda x: x + _ARANGE3), (np.ones(3, np.float32),)


@program
def literals_int_float_bool(m):
  return (lambda x, n, b: (x * 2, n + 1, m.np.logical_and(b, True))), (
      f32(3), i32(3), np.array([True, False]))


@program
def weak_type_python_scalars(m):
  return (lambda x, y: x * y + 2), (1.0, 3)


@program
def astype_and_promotion(m):
  return (lambda x, n: x.astype(m.np.int32) + n.astype(m.np.float16).astype(m.np.int32)), (
      f32(3), i32(3))


@program
def float16_math(m):
  return (lambda x: m.np.exp(x) * 2), (np.ones(3, np.float16),)


@program
def pytree_in_out(m):
  return (lambda d: {"s": d["a"] + d["b"][0], "t": d["b"][1] * 2}), (
      {"a": f32(2), "b": (f32(2), 3.0)},)


@program
def unused_input(m):
  return (lambda x, y: x * 2), (f32(3), f32(4))


@program
def unused_output_sort_key_val(m):
  return (lambda x: m.lax.sort_key_val(x, x)[0]), (np.ones(3, np.float32),)


@program
def identity_and_swap(m):
  return (lambda x, y: (y, x, x)), (f32(2), 1.0)


# --- lax / numpy operations --------------------------------------------------------------

@program
def integer_pow_and_square(m):
  return (lambda x: x ** 3 + m.np.square(x)), (f32(3),)


@program
def where_select_n(m):
  return (lambda x: m.np.where(x > 0, x, 0.)), (f32(3),)


@program
def iota_plus(m):
  return (lambda x: m.lax.iota(np.int32, 4) + x), (i32(4),)


@program
def broadcasted_iota(m):
  return (lambda x: m.lax.broadcasted_iota(np.float32, (2, 3), 1) * x), (f32(2, 3),)


@program
def index_static_int(m):
  return (lambda x: x[1]), (f32(4, 3),)


@program
def index_static_slice(m):
  return (lambda x: x[1:3, ::2]), (f32(4, 5),)


@program
def index_traced_array(m):
  return (lambda x, i: x[i]), (f32(5), np.array([0, 2, 4], np.int32))


@program
def index_traced_scalar(m):
  return (lambda x, i: x[i]), (f32(5), np.int32(2))


@program
def at_set(m):
  return (lambda x: x.at[1].set(7.0)), (f32(4),)


@program
def cumsum(m):
  return (lambda x: m.np.cumsum(x)), (f32(5),)


@program
def sort_1d(m):
  return (lambda x: m.np.sort(x)), (f32(5),)


@program
def argmax(m):
  return (lambda x: m.np.argmax(x, axis=1)), (f32(2, 3),)


@program
def reshape_transpose(m):
  return (lambda x: x.reshape(3, 2).T), (f32(2, 3),)


@program
def squeeze_expand_dims(m):
  return (lambda x: m.np.expand_dims(m.np.squeeze(x, 0), 1)), (f32(1, 3),)


@program
def concatenate_stack(m):
  return (lambda x, y: m.np.stack([m.np.concatenate([x, y]), m.np.concatenate([y, x])])), (
      f32(2), f32(2))


@program
def dot_matvec(m):
  return (lambda a, x: m.np.dot(a, x)), (f32(2, 3), f32(3))


@program
def matmul_operator(m):
  return (lambda a, b: a @ b), (f32(2, 3), f32(3, 4))


@program
def einsum_ij_jk(m):
  return (lambda a, b: m.np.einsum("ij,jk->ik", a, b)), (f32(2, 3), f32(3, 4))


@program
def dot_general_preferred(m):
  return (lambda a, b: m.lax.dot_general(a, b, (((1,), (0,)), ((), ())),
                                         preferred_element_type=np.float32)), (
      np.ones((2, 3), np.int8), np.ones((3, 2), np.int8))


@program
def reductions(m):
  return (lambda x: (m.np.max(x, axis=0), m.np.min(x), m.np.prod(x, axis=1))), (f32(2, 3),)


@program
def mean_and_var(m):
  return (lambda x: (m.np.mean(x), m.np.var(x, axis=0))), (f32(2, 3),)


@program
def thinking_in_jax_norm(m):
  def norm(X):
    X = X - X.mean(0)
    return X / X.std(0)
  return norm, (f32(4, 3),)


@program
def clip_abs(m):
  return (lambda x: m.np.clip(m.np.abs(x), 0.5, 2.0)), (f32(3),)


@program
def softmax(m):
  return (lambda x: m.nn.softmax(x)), (f32(4),)


@program
def logsumexp(m):
  return (lambda x: m.special.logsumexp(x)), (f32(4),)


@program
def relu_custom_jvp(m):
  return (lambda x: m.nn.relu(x)), (f32(3),)


# --- control flow -------------------------------------------------------------------------

@program
def cond_sin_cos(m):
  return (lambda p, x: m.lax.cond(p, m.np.sin, m.np.cos, x)), (True, 1.0)


@program
def scan_weak_carry(m):
  return (lambda xs: m.lax.scan(lambda c, x: (c + x, c * 2), 0.0, xs)), (
      np.ones(3, np.float32),)


@program
def fori_loop_static(m):
  return (lambda x: m.lax.fori_loop(0, 3, lambda i, c: c + i, x)), (1.0,)


@program
def while_loop_counter(m):
  return (lambda x: m.lax.while_loop(lambda c: c[0] < 10, lambda c: (c[0] + 1, c[1] * x),
                                     (0, x))), (f32(2),)


@program
def scan_cumulative_sum(m):
  def f(xs):
    return m.lax.scan(lambda c, x: (c + x, c + x), np.float32(0), xs)[1]
  return f, (f32(4),)


@program
def map_over_rows(m):
  return (lambda xs: m.lax.map(lambda r: m.np.sum(r * r), xs)), (f32(3, 2),)


# --- jit inside ---------------------------------------------------------------------------

@program
def jit_inner(m):
  return (lambda x: m.lib.jit(lambda y: y * 2)(x) + 1), (1.0,)


@program
def jit_inner_twice(m):
  g = m.lib.jit(lambda y: m.np.sin(y) * 2)
  return (lambda x: g(g(x))), (f32(3),)


@program
def jit_static_argnums(m):
  g = m.lib.jit(lambda y, n: y * n, static_argnums=1)
  return (lambda x: g(x, 3)), (f32(3),)


@program
def jit_long_body_shared(m):
  def chain(x):
    for _ in range(11):
      x = m.np.sin(x)
    return x
  return (lambda x: m.lib.jit(chain)(x) * 2), (f32(3),)


@program
def jit_two_functions_same_name(m):
  def make(k):
    def f(y):
      return y * k
    return m.lib.jit(f)
  g, h = make(2.0), make(3.0)
  return (lambda x: h(h(g(g(x))))), (f32(2),)


@program
def jit_closure_and_literal_args(m):
  c = f32(3)
  return (lambda x: m.lib.jit(lambda y, z: y * z + c)(x, 2.0)), (f32(3),)


@program
def checkpoint_sin(m):
  return m.lib.checkpoint(lambda x: m.np.sin(m.np.sin(x))), (f32(3),)


@program
def grad_checkpoint(m):
  return m.lib.grad(lambda x: m.np.sum(m.lib.checkpoint(m.np.sin)(x))), (f32(3),)


@program
def stop_gradient_and_select(m):
  return (lambda x: m.lax.stop_gradient(x) * m.lax.select(x > 1, x, -x)), (f32(3),)


@program
def switch_closure_consts(m):
  w = f32(2)
  return (lambda i, x: m.lax.switch(i, [lambda x: x * w, lambda x: x + w], x)), (1, f32(2))


@program
def many_inputs_wrap(m):
  return (lambda *xs: sum(xs)), tuple(f32(2, 2) for _ in range(9))


@program
def grad_custom_vjp(m):
  f, args = custom_vjp_clip_gradient(m)
  return m.lib.grad(f), args


# --- autodiff -----------------------------------------------------------------------------

@program
def grad_tanh(m):
  return m.lib.grad(m.np.tanh), (1.0,)


@program
def grad_grad_cube(m):
  return m.lib.grad(m.lib.grad(lambda x: x ** 3)), (2.0,)


@program
def mlp_grad(m):
  return m.lib.grad(lambda w, x: m.np.sum(m.np.tanh(x @ w) ** 2)), (
      np.ones((3, 2), np.float32), np.ones((4, 3), np.float32))


@program
def jvp_sin(m):
  return (lambda x, t: m.lib.jvp(m.np.sin, (x,), (t,))), (f32(3), f32(3))


@program
def vjp_sin_mul(m):
  def f(x, ct):
    y, pullback = m.lib.vjp(lambda x: m.np.sin(x) * x, x)
    return y, pullback(ct)
  return f, (f32(3), f32(3))


@program
def value_and_grad_logistic(m):
  return m.lib.value_and_grad(lambda x: m.np.sum(1 / (1 + m.np.exp(-x)))), (f32(3),)


@program
def jacrev_small(m):
  return m.lib.jacrev(lambda x: m.np.sin(x) * x[0]), (f32(2),)


@program
def vmap_dot(m):
  return m.lib.vmap(lambda x: m.np.dot(x, x)), (np.ones((2, 3), np.float32),)


@program
def vmap_in_axes_none(m):
  return m.lib.vmap(lambda x, w: w @ x, in_axes=(0, None)), (f32(4, 3), f32(2, 3))


@program
def custom_jvp_log1pexp(m):
  @m.lib.custom_jvp
  def log1pexp(x):
    return m.np.log(1. + m.np.exp(x))

  @log1pexp.defjvp
  def log1pexp_jvp(primals, tangents):
    x, = primals
    x_dot, = tangents
    return log1pexp(x), x_dot * (1 - 1 / (1 + m.np.exp(x)))
  return log1pexp, (3.,)


@program
def custom_vjp_clip_gradient(m):
  @m.lib.custom_vjp
  def clip_gradient(lo, hi, x):
    return x

  def fwd(lo, hi, x):
    return x, (lo, hi)

  def bwd(res, g):
    lo, hi = res
    return (None, None, m.np.clip(g, lo, hi))
  clip_gradient.defvjp(fwd, bwd)
  return (lambda x: clip_gradient(-0.75, 0.75, m.np.sin(x))), (2.,)


@program
def grad_custom_jvp_log1pexp(m):
  f, args = custom_jvp_log1pexp(m)
  return m.lib.grad(f), args


# ------------------------------------------------------------------------------------------

#: Programs whose jaxprs differ from JAX's in content (other equations or params), each with
#: the reason; none is a printing difference.
KNOWN_DIFFERENCES: dict[str, str] = {}


def _texts(name):
  f, args = PROGRAMS[name](SC)
  ours = str(stagecraft.make_jaxpr(f)(*args))
  f, args = PROGRAMS[name](JAX)
  theirs = str(jax.make_jaxpr(f)(*args))
  return ours, theirs


@pytest.mark.parametrize("name", sorted(set(PROGRAMS) - set(KNOWN_DIFFERENCES)))
def test_printed_jaxpr_equals_jax(name):
  ours, theirs = _texts(name)
  assert ours == theirs, f"\n--- stagecraft\n{ours}\n--- JAX\n{theirs}"


@pytest.mark.parametrize("name", sorted(KNOWN_DIFFERENCES))
def test_known_difference_still_differs(name):
  ours, theirs = _texts(name)
  assert ours != theirs, (f"{name} now prints as JAX does: remove it from "
                          "KNOWN_DIFFERENCES")


def test_known_differences_are_programs():
  assert set(KNOWN_DIFFERENCES) <= set(PROGRAMS)


if __name__ == "__main__":
  import sys
  names = sys.argv[1:] or list(PROGRAMS)
  same = 0
  for n in names:
    try:
      ours, theirs = _texts(n)
    except Exception as e:   # noqa: BLE001
      print(f"ERROR {n}: {type(e).__name__}: {e}")
      continue
    if ours == theirs:
      same += 1
      print("SAME", n)
    else:
      print(f"DIFF {n}\n--- stagecraft\n{ours}\n--- JAX\n{theirs}")
  print(f"{same} / {len(names)} equal")
