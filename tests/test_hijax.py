"""jax.experimental.hijax's VJPHiPrimitive: the examples of JAX's docs (hijax custom
derivatives, docs/new_docs/301/custom-derivatives.md) and its rules under every
transformation, each compared with JAX 0.10.2 run in the same test (values, printed jaxprs,
error messages)."""
import io
from contextlib import redirect_stdout
from functools import partial

import jax
import jax.experimental.hijax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.experimental.hijax
import stagecraft.numpy as sjnp

LIBS = {"jax": (jax, jjnp, jax.experimental.hijax),
        "sc": (sc, sjnp, stagecraft.experimental.hijax)}


def defs(lib):
  """The docs' primitives, defined over one library (`jax` or `stagecraft`)."""
  jx, jnp, hjx = LIBS[lib]
  VJPHiPrimitive = hjx.VJPHiPrimitive
  d = {}

  class SinTimesY(VJPHiPrimitive):
    def __init__(self, x_aval, y_aval):
      self.in_avals = (x_aval, y_aval)
      self.out_aval = x_aval
      self.params = {}
      super().__init__()

    def expand(self, x, y):
      return jnp.sin(x) * y

    def vjp_fwd(self, nzs_in, x, y):
      return self(x, y), (jnp.cos(x), jnp.sin(x), y)

    def vjp_bwd_retval(self, res, g):
      cos_x, sin_x, y = res
      return (cos_x * g * y, sin_x * g)

    def jvp(self, primals, tangents):
      (x, y), (x_dot, y_dot) = primals, tangents
      return self(x, y), jnp.cos(x) * x_dot * y + jnp.sin(x) * y_dot

  d["sin_times_y"] = lambda x, y: SinTimesY(jx.typeof(x), jx.typeof(y))(x, y)

  class Log1pExp(VJPHiPrimitive):
    def __init__(self, x_aval):
      self.in_avals = (x_aval,)
      self.out_aval = x_aval
      self.params = {}
      super().__init__()

    def expand(self, x):
      return jnp.log(1. + jnp.exp(x))

    def vjp_fwd(self, nzs_in, x):
      return self(x), x

    def vjp_bwd_retval(self, x, g):
      return ((1 - 1 / (1 + jnp.exp(x))) * g,)

    def jvp(self, primals, tangents):
      (x,), (x_dot,) = primals, tangents
      return self(x), (1 - 1 / (1 + jnp.exp(x))) * x_dot

    def batch_dim_rule(self, axis_data, in_dims):
      return in_dims[0]

  d["Log1pExp"] = Log1pExp
  d["log1pexp"] = lambda x: Log1pExp(jx.typeof(x))(x)

  class ClipGradient(VJPHiPrimitive):
    def __init__(self, lo_aval, hi_aval, x_aval):
      self.in_avals = (lo_aval, hi_aval, x_aval)
      self.out_aval = x_aval
      self.params = {}
      super().__init__()

    def expand(self, lo, hi, x):
      return x

    def vjp_fwd(self, nzs_in, lo, hi, x):
      return self(lo, hi, x), (lo, hi)

    def vjp_bwd_retval(self, res, g):
      lo, hi = res
      return (None, None, jnp.clip(g, lo, hi))

    def batch_dim_rule(self, axis_data, in_dims):
      return in_dims[2]

  def clip_sin(x):
    x = ClipGradient(jx.typeof(-0.75), jx.typeof(0.75), jx.typeof(x))(-0.75, 0.75, x)
    return jnp.sin(x)
  d["clip_sin"] = clip_sin

  class FixedPoint(VJPHiPrimitive):
    def __init__(self, a_aval, x_aval, *, f):
      self.in_avals = (a_aval, x_aval)
      self.out_aval = x_aval
      self.params = dict(f=f)
      super().__init__()

    def expand(self, a, x_guess):
      def cond_fun(carry):
        x_prev, x = carry
        return jnp.abs(x_prev - x) > 1e-6

      def body_fun(carry):
        _, x = carry
        return x, self.f(a, x)
      _, x_star = jx.lax.while_loop(cond_fun, body_fun, (x_guess, self.f(a, x_guess)))
      return x_star

    def vjp_fwd(self, nzs_in, a, x_guess):
      x_star = self(a, x_guess)
      return x_star, (a, x_star)

    def vjp_bwd_retval(self, res, x_star_bar):
      a, x_star = res
      _, vjp_a = jx.vjp(lambda a: self.f(a, x_star), a)
      a_bar, = vjp_a(fixed_point(partial(rev_iter, self.f), (a, x_star, x_star_bar),
                                 x_star_bar))
      return a_bar, jnp.zeros_like(x_star)

  def rev_iter(f, packed, u):
    a, x_star, x_star_bar = packed
    _, vjp_x = jx.vjp(lambda x: f(a, x), x_star)
    return x_star_bar + vjp_x(u)[0]

  def fixed_point(f, a, x_guess):
    a_aval = jx.tree.map(jx.typeof, a)
    x_aval = jx.tree.map(jx.typeof, x_guess)
    return FixedPoint(a_aval, x_aval, f=f)(a, x_guess)

  d["newton_sqrt"] = lambda a: fixed_point(lambda a, x: 0.5 * (x + a / x), a, a)

  class Mul(VJPHiPrimitive):
    def __init__(self, x_aval, y_aval):
      self.in_avals = (x_aval, y_aval)
      self.out_aval = x_aval
      self.params = {}
      super().__init__()

    def expand(self, x, y):
      return x * y

    def vjp_fwd(self, nzs_in, x, y):
      return self(x, y), (x, y)

    def vjp_bwd_retval(self, res, g):
      x, y = res
      return (g * y, x * g)

  class MulV(Mul):
    def batch_dim_rule(self, axis_data, in_dims):
      x_dim, y_dim = in_dims
      return y_dim if x_dim is None else x_dim

  d["mul"] = lambda x, y: Mul(jx.typeof(x), jx.typeof(y))(x, y)
  d["mulv"] = lambda x, y: MulV(jx.typeof(x), jx.typeof(y))(x, y)

  class Mul2(Mul):
    def vjp_fwd(self, nzs_in, x, y):
      print("nzs_in", nzs_in)
      x_nz, y_nz = nzs_in
      return self(x, y), (x if y_nz else None, y if x_nz else None)

    def vjp_bwd_retval(self, res, g):
      x, y = res
      return (g * y if y is not None else None, x * g if x is not None else None)
  d["mul2"] = lambda x, y: Mul2(jx.typeof(x), jx.typeof(y))(x, y)

  class Mul3(VJPHiPrimitive):
    def __init__(self, x_aval, y_aval):
      self.in_avals = (x_aval, y_aval)
      self.out_aval = x_aval
      self.params = {}
      super().__init__()

    def expand(self, x, y):
      return x * y

    def vjp_fwd(self, nzs_in, x, y):
      return self(x, y), (x, y)

    def vjp_bwd(self, res, g, x_acc, y_acc):
      print("accums", x_acc, y_acc)
      x, y = res
      x_acc.accum(g * y)
      y_acc.accum(x * g)
  d["mul3"] = lambda x, y: Mul3(jx.typeof(x), jx.typeof(y))(x, y)

  class Sin(VJPHiPrimitive):
    def __init__(self, x_aval):
      self.in_avals = (x_aval,)
      self.out_aval = x_aval
      self.params = {}
      super().__init__()

    def expand(self, x):
      print("called expand!")
      return jnp.sin(x)

    def jvp(self, primals, tangents):
      (x,), (x_dot,) = primals, tangents
      return self(x), jnp.cos(x) * x_dot

  class SinLin(Sin):
    def lin(self, nzs_in, x):
      return self(x), jnp.cos(x)

    def linearized(self, cos_x, x_dot):
      return cos_x * x_dot
  d["sin"] = lambda x: Sin(jx.typeof(x))(x)
  d["sin_lin"] = lambda x: SinLin(jx.typeof(x))(x)

  class MatVec(VJPHiPrimitive):
    def __init__(self, A_aval, x_aval):
      self.in_avals = (A_aval, x_aval)
      self.out_aval = hjx.ShapedArray((A_aval.shape[0],), A_aval.dtype)
      self.params = {}
      super().__init__()

    def expand(self, A, x):
      return A @ x

    def batch(self, axis_data, args, dims):
      A, X = args
      A_dim, x_dim = dims
      X = jnp.moveaxis(X, x_dim, 0)
      return X @ A.T, 0
  d["matvec"] = lambda A, x: MatVec(jx.typeof(A), jx.typeof(x))(A, x)

  class FPt(VJPHiPrimitive):
    def __init__(self, pt_aval):
      self.in_avals = (pt_aval,)
      self.out_aval = {"a": pt_aval[0], "b": (pt_aval[0], pt_aval[1])}
      self.params = {}
      super().__init__()

    def expand(self, pt):
      return {"a": pt[0] ** 2, "b": (jnp.sin(pt[0]), jnp.cos(pt[1]))}

    def vjp_fwd(self, nzs_in, pt):
      return self(pt), pt

    def vjp_bwd_retval(self, pt, g):
      print("g", g)
      g = jx.tree.map(hjx.instantiate_zeros, g, is_leaf=lambda x: isinstance(x, hjx.Zero))
      a_bar, (b0_bar, b1_bar) = g["a"], g["b"]
      x_bar = 2 * pt[0] * a_bar + jnp.cos(pt[0]) * b0_bar
      y_bar = -jnp.sin(pt[1]) * b1_bar
      return ((x_bar, y_bar),)
  d["fpt"] = lambda pt: FPt(jx.tree.map(jx.typeof, pt))(pt)

  class Scale(VJPHiPrimitive):   # linear, with a transpose rule
    def __init__(self, x_aval, k):
      self.in_avals = (x_aval,)
      self.out_aval = x_aval
      self.params = dict(k=k)
      super().__init__()

    def expand(self, x):
      return self.k * x

    def jvp(self, primals, tangents):
      return self(*primals), self(*tangents)

    def transpose(self, ct, acc):
      acc.accum(self.k * ct)
  d["scale"] = lambda x, k=3.: Scale(jx.typeof(x), k)(x)

  class Bare(VJPHiPrimitive):
    def __init__(self, x_aval):
      self.in_avals = (x_aval,)
      self.out_aval = x_aval
      self.params = {}
      super().__init__()

    def expand(self, x):
      return x * x
  d["bare"] = lambda x: Bare(jx.typeof(x))(x)
  d["Bare"] = Bare

  class NoExpand(VJPHiPrimitive):
    def __init__(self, x_aval):
      self.in_avals = (x_aval,)
      self.out_aval = x_aval
      self.params = {}
      super().__init__()
  d["no_expand"] = lambda x: NoExpand(jx.typeof(x))(x)

  class BadBwd(Log1pExp):
    def vjp_bwd_retval(self, x, g):
      return (jnp.ones(3),)
  d["bad_bwd"] = lambda x: BadBwd(jx.typeof(x))(x)

  class MissingOut(VJPHiPrimitive):
    def __init__(self):
      self.in_avals = ()
      super().__init__()

  class MissingIn(VJPHiPrimitive):
    def __init__(self):
      super().__init__()

  class MissingParams(VJPHiPrimitive):
    def __init__(self):
      self.in_avals = ()
      self.out_aval = ()
      super().__init__()

  class BothBwds(Mul3):
    def vjp_bwd_retval(self, res, g):
      return g
  d["init_errors"] = [MissingIn, MissingOut, MissingParams,
                      lambda: BothBwds(jx.typeof(1.), jx.typeof(1.))]
  return d


J, S = defs("jax"), defs("sc")
x3 = np.arange(3., dtype=np.float32)


def both(run):
  """`run(lib, defs)` for both libraries: (JAX's result, stagecraft's) as text, with what
  they printed (an exception: its type and message)."""
  out = []
  for lib, d in (("jax", J), ("sc", S)):
    buf = io.StringIO()
    try:
      with redirect_stdout(buf):
        r = run(LIBS[lib][0], d)
      text = str(r)
    except Exception as e:   # noqa: BLE001 (the errors are compared)
      text = f"{type(e).__name__}: {e}"
    out.append(buf.getvalue() + text)
  return out


def same(run):
  want, got = both(run)
  assert got == want
  return got


def test_tl_dr_sin_times_y():
  same(lambda jx, d: d["sin_times_y"](2., 3.))
  same(lambda jx, d: jx.jvp(d["sin_times_y"], (2., 3.), (1., 0.)))
  same(lambda jx, d: jx.grad(d["sin_times_y"])(2., 3.))
  same(lambda jx, d: jx.grad(d["sin_times_y"], argnums=(0, 1))(2., 3.))


def test_log1pexp_values():
  got = same(lambda jx, d: jx.grad(d["log1pexp"])(100.))
  assert got == "1.0"
  same(lambda jx, d: jx.jit(d["log1pexp"])(3.))
  same(lambda jx, d: jx.jit(jx.grad(d["log1pexp"]))(3.))
  same(lambda jx, d: jx.vmap(jx.jit(jx.grad(d["log1pexp"])))(jx.numpy.arange(3.)))
  same(lambda jx, d: jx.grad(jx.grad(d["log1pexp"]))(1.))
  same(lambda jx, d: jx.hessian(d["log1pexp"])(1.))
  same(lambda jx, d: jx.jvp(jx.vmap(d["log1pexp"]), (x3,), (np.ones(3, np.float32),)))
  same(lambda jx, d: jx.vmap(lambda x: jx.jvp(d["log1pexp"], (x,), (1.,)))(x3))


def test_log1pexp_jaxprs():
  got = same(lambda jx, d: jx.jit(jx.grad(d["log1pexp"])).trace(100.).jaxpr)
  assert "_:f32[] = call_hi_primitive[_prim=Log1pExp[{}]] a" in got
  same(lambda jx, d: jx.make_jaxpr(d["log1pexp"])(1.))
  same(lambda jx, d: jx.make_jaxpr(lambda x, t: jx.jvp(d["log1pexp"], (x,), (t,)))(1., 1.))
  got = same(lambda jx, d: jx.make_jaxpr(jx.vmap(d["log1pexp"]))(x3))
  assert "VmapOf[{'prim': Log1pExp[{}], 'axis_data': AxisData(" in got
  same(lambda jx, d: jx.make_jaxpr(jx.vmap(jx.grad(d["log1pexp"])))(x3))
  same(lambda jx, d: jx.make_jaxpr(jx.grad(lambda x: jx.vmap(d["log1pexp"])(x).sum()))(x3))
  same(lambda jx, d: jx.make_jaxpr(jx.vmap(d["log1pexp"], in_axes=1, out_axes=1))(
      np.ones((2, 3), np.float32)))
  same(lambda jx, d: jx.make_jaxpr(jx.vmap(jx.vmap(d["log1pexp"])))(
      np.ones((2, 3), np.float32)))
  same(lambda jx, d: jx.make_jaxpr(jx.vmap(d["log1pexp"], axis_name="i"))(x3))
  same(lambda jx, d: jx.make_jaxpr(jx.grad(jx.grad(d["log1pexp"])))(1.))
  same(lambda jx, d: jx.make_jaxpr(jx.hessian(d["log1pexp"]))(1.))
  same(lambda jx, d: jx.make_jaxpr(jx.jit(jx.grad(d["log1pexp"])))(1.))


def test_log1pexp_inside_loops_and_jit():
  loop = lambda jx, d: (
      lambda x: jx.lax.scan(lambda c, _: (d["log1pexp"](c), None), x, None, length=3)[0])
  same(lambda jx, d: jx.grad(loop(jx, d))(1.))
  same(lambda jx, d: jx.make_jaxpr(jx.grad(loop(jx, d)))(1.))
  same(lambda jx, d: jx.grad(lambda x: jx.lax.cond(x > 0, d["log1pexp"], jx.numpy.sin, x))(1.))
  same(lambda jx, d: jx.grad(jx.jit(d["log1pexp"]))(1.))
  same(lambda jx, d: jx.make_jaxpr(jx.jit(jx.vmap(d["log1pexp"])))(x3))
  same(lambda jx, d: jx.linearize(jx.jit(d["log1pexp"]), 1.)[1](2.))
  # checkpoint differentiates its body with `jvp` rules, also under grad (`sin` has no VJP)
  same(lambda jx, d: jx.grad(jx.checkpoint(d["log1pexp"]))(1.))
  same(lambda jx, d: jx.grad(jx.checkpoint(d["sin"]))(1.))
  same(lambda jx, d: jx.grad(jx.checkpoint(d["mul"]))(1., 2.))


def test_clip_gradient():
  t = np.linspace(0, 10, 7, dtype=np.float32)
  same(lambda jx, d: jx.vmap(jx.grad(d["clip_sin"]))(t))
  same(lambda jx, d: jx.make_jaxpr(jx.vmap(jx.grad(d["clip_sin"])))(t))
  same(lambda jx, d: jx.make_jaxpr(jx.grad(d["clip_sin"]))(3.))


def test_fixed_point_implicit_differentiation():
  assert same(lambda jx, d: d["newton_sqrt"](2.)) == "1.4142135"
  same(lambda jx, d: jx.jit(jx.vmap(d["newton_sqrt"]))(np.arange(1., 5., dtype=np.float32)))
  same(lambda jx, d: (jx.grad(d["newton_sqrt"])(2.), jx.grad(jx.grad(d["newton_sqrt"]))(2.)))
  g, gg = sc.grad(S["newton_sqrt"])(2.), sc.grad(sc.grad(S["newton_sqrt"]))(2.)
  assert g == pytest.approx(0.5 / np.sqrt(2.), rel=1e-6)
  assert gg == pytest.approx(-0.25 * 2. ** -1.5, rel=1e-5)


def test_mul_jaxpr_and_grads():
  same(lambda jx, d: (jx.grad(d["mul"])(2., 3.), jx.grad(d["mul"], 1)(2., 3.)))
  got = same(lambda jx, d: jx.jit(d["mul"]).trace(2., 3.).jaxpr)
  assert "c:f32[] = call_hi_primitive[_prim=Mul[{}]] a b" in got


def test_eager_expand_runs_each_call_jit_traces_once():
  got = same(lambda jx, d: d["sin"](3.))
  assert got.count("called expand!") == 1
  jf = {}

  def run(jx, d):
    f = jf.setdefault(jx.__name__, jx.jit(d["sin"]))
    return f(3.), f(3.)
  got = same(run)
  assert got.count("called expand!") == 1
  same(lambda jx, d: jx.jvp(d["sin"], (3.,), (1.,)))


def test_vmap_batch_dim_rule_and_batch():
  y3 = x3 + 1
  same(lambda jx, d: jx.vmap(d["mulv"])(x3, y3))
  same(lambda jx, d: jx.vmap(d["mulv"], in_axes=(0, None))(x3, 2.))
  same(lambda jx, d: jx.vmap(jx.grad(d["mulv"]))(x3, y3))
  same(lambda jx, d: jx.grad(lambda x, y: jx.vmap(d["mulv"], in_axes=(0, None))(x, y).sum(),
                             argnums=(0, 1))(x3, 2.))
  same(lambda jx, d: jx.make_jaxpr(jx.grad(
      lambda x, y: jx.vmap(d["mulv"], in_axes=(0, None))(x, y).sum(), argnums=(0, 1)))(x3, 2.))
  same(lambda jx, d: jx.vmap(jx.vmap(d["mulv"]), in_axes=(1, 0))(
      np.ones((3, 2), np.float32), np.full((2, 3), 2., np.float32)))
  A = np.arange(6., dtype=np.float32).reshape(2, 3)
  xs = np.arange(12., dtype=np.float32).reshape(4, 3)
  same(lambda jx, d: jx.vmap(d["matvec"], in_axes=(None, 0))(A, xs))
  same(lambda jx, d: jx.make_jaxpr(jx.vmap(d["matvec"], in_axes=(None, 0)))(A, xs))


def test_pytrees_and_symbolic_zeros():
  pt = (1., 2.)
  same(lambda jx, d: d["fpt"](pt))
  same(lambda jx, d: jx.jit(d["fpt"])(pt))
  fun = lambda d: lambda pt: d["fpt"](pt)["a"] + d["fpt"](pt)["b"][0]
  same(lambda jx, d: jx.grad(fun(d))(pt))
  # nzs_in says which inputs are differentiated; None cotangents are zeros
  same(lambda jx, d: (jx.grad(d["mul2"], 0)(2., 3.), jx.grad(d["mul2"], 1)(2., 3.)))


def test_vjp_bwd_accumulators():
  same(lambda jx, d: jx.grad(d["mul3"])(2., 3.))
  same(lambda jx, d: jx.jit(jx.grad(d["mul3"], argnums=(0, 1)))(2., 3.))


def test_lin_linearized():
  same(lambda jx, d: (lambda y, f: (y, f(1.)))(*jx.linearize(d["sin_lin"], 3.)))
  same(lambda jx, d: jx.linearize(jx.jit(d["sin_lin"]), 3.)[1](2.))


def test_transpose_rule_of_a_linear_primitive():
  same(lambda jx, d: jx.grad(lambda x: d["scale"](x) ** 2)(2.))
  same(lambda jx, d: jx.make_jaxpr(jx.grad(lambda x: d["scale"](x) ** 2))(2.))


def test_params_repr_hash_and_unchecked_argument_types():
  same(lambda jx, d: repr(d["Log1pExp"](jx.typeof(1.))))
  same(lambda jx, d: d["Log1pExp"](jx.typeof(1.)) == d["Log1pExp"](jx.typeof(np.ones(3))))
  same(lambda jx, d: jx.make_jaxpr(d["bare"])(1))
  same(lambda jx, d: d["bare"](2))   # expand sees the Python int
  same(lambda jx, d: d["Bare"](jx.typeof(1.))(x3))


@pytest.mark.parametrize("case", [
    "grad", "jvp", "vmap", "vmap_unbatched", "linearize", "expand", "jit_expand",
    "grad_only_jvp", "jvp_only_vjp", "bad_bwd", "vmap_grad_accums"])
def test_missing_rules_and_bad_rules_raise_as_jax(case):
  run = {
      "grad": lambda jx, d: jx.grad(d["bare"])(1.),
      "jvp": lambda jx, d: jx.jvp(d["bare"], (1.,), (1.,)),
      "vmap": lambda jx, d: jx.vmap(d["bare"])(x3),
      "vmap_unbatched": lambda jx, d: jx.vmap(lambda y: d["bare"](2.) * y)(x3),
      "linearize": lambda jx, d: jx.linearize(d["log1pexp"], 1.),
      "expand": lambda jx, d: d["no_expand"](1.),
      "jit_expand": lambda jx, d: jx.jit(d["no_expand"])(1.),
      "grad_only_jvp": lambda jx, d: jx.grad(d["sin"])(1.),
      "jvp_only_vjp": lambda jx, d: jx.jvp(d["mul"], (1., 2.), (1., 1.)),
      "bad_bwd": lambda jx, d: jx.grad(d["bad_bwd"])(1.),
      "vmap_grad_accums": lambda jx, d: jx.vmap(jx.grad(d["mul3"]))(x3, x3),
  }[case]
  got = same(run)
  assert "Error" in got


def test_init_errors():
  for i in range(4):
    got = same(lambda jx, d: d["init_errors"][i]())
    assert got.startswith("AttributeError: ")


def test_hijax_module_names():
  # VJPHiPrimitive is a plain class, as JAX's; the accumulators are not exported in 0.10.2
  assert stagecraft.experimental.hijax.VJPHiPrimitive.__mro__[1:] == (object,)
  for name in ("ValAccum", "NullAccum", "linearize_from_jvp"):
    assert hasattr(jax.experimental.hijax, name) == hasattr(stagecraft.experimental.hijax,
                                                            name)


# ---------------------------------------------------------------------------
# Hijax types (docs/hijax_types.md's quantized arrays), without meshes


def qdefs(lib, scan: bool = False):
  """The tutorial's QArray type and its primitives over one library; with `scan`, the type
  also has the tutorial's scan interface (`leading_axis_spec`, `dec_rank`, `inc_rank`; JAX
  0.10.2 has no `MappingSpec`: the spec is the axis 0)."""
  from dataclasses import dataclass
  jx, jnp, hjx = LIBS[lib]

  @dataclass(frozen=True)
  class QArray:
    qvalue: object
    scale: object

  @dataclass(frozen=True)
  class QArrayTy(hjx.HiType):
    shape: tuple
    sharding: object

    def lo_ty(self):
      scale_sharding = self.sharding.update(spec=jx.P(*self.sharding.spec[:-1]))
      return [hjx.ShapedArray(self.shape, jnp.dtype("int8"), sharding=self.sharding),
              hjx.ShapedArray(self.shape[:-1], jnp.dtype("float32"), sharding=scale_sharding)]

    def lower_val(self, q):
      return [q.qvalue, q.scale]

    def raise_val(self, qvalue, scale):
      return QArray(qvalue, scale)

    def to_tangent_aval(self):
      return hjx.ShapedArray(self.shape, jnp.dtype("float32"), sharding=self.sharding)

    def str_short(self, short_dtypes=False, mesh_axis_types=False):
      return f"q8[{','.join(map(str, self.shape))}]"
    __repr__ = str_short

  if scan:
    def dec_rank(self, size, spec):
      assert spec == 0 and self.shape[0] == size
      return QArrayTy(self.shape[1:], self.sharding.update(spec=jx.P(*self.sharding.spec[1:])))

    def inc_rank(self, size, spec):
      assert spec == 0
      return QArrayTy((size, *self.shape),
                      self.sharding.update(spec=jx.P(None, *self.sharding.spec)))

    QArrayTy.leading_axis_spec = lambda self: 0
    QArrayTy.dec_rank, QArrayTy.inc_rank = dec_rank, inc_rank

  hjx.register_hitype(QArray, lambda q: QArrayTy(q.qvalue.shape,
                                                 jx.typeof(q.qvalue).sharding))

  class Quantize(hjx.VJPHiPrimitive):
    def __init__(self, x_aval):
      self.in_avals = (x_aval,)
      self.out_aval = QArrayTy(x_aval.shape, x_aval.sharding)
      self.params = {}
      super().__init__()

    def expand(self, x):
      scale = jnp.max(jnp.abs(x), axis=-1) / 127.
      return QArray(jnp.round(x / scale[..., None]).astype(jnp.int8), scale)

    def vjp_fwd(self, nzs_in, x):
      return self(x), None

    def vjp_bwd_retval(self, _res, g):
      return (g,)

  class Dequantize(hjx.VJPHiPrimitive):
    def __init__(self, q_aval):
      self.in_avals = (q_aval,)
      self.out_aval = hjx.ShapedArray(q_aval.shape, jnp.dtype("float32"),
                                      sharding=q_aval.sharding)
      self.params = {}
      super().__init__()

    def expand(self, qx):
      return qx.qvalue.astype("float32") * qx.scale[..., None]

    def vjp_fwd(self, nzs_in, qx):
      return self(qx), None

    def vjp_bwd_retval(self, _res, g):
      return (g,)

  class MatmulQ(hjx.VJPHiPrimitive):
    def __init__(self, x_aval, qw_aval):
      self.in_avals = (x_aval, qw_aval)
      self.out_aval = hjx.ShapedArray((x_aval.shape[0], qw_aval.shape[1]),
                                      jnp.dtype("float32"))
      self.params = {}
      super().__init__()

    def expand(self, x, qw):
      return (x * qw.scale) @ qw.qvalue.astype(jnp.float32)

    def vjp_fwd(self, nzs_in, x, qw):
      return self(x, qw), (x, qw)   # a hijax-typed residual

    def vjp_bwd_retval(self, res, g):
      x, qw = res
      w = dequantize(qw)
      return g @ w.T, x.T @ g

  quantize = lambda x: Quantize(jx.typeof(x))(x)
  dequantize = lambda q: Dequantize(jx.typeof(q))(q)
  matmul_q = lambda x, qw: MatmulQ(jx.typeof(x), jx.typeof(qw))(x, qw)
  return dict(quantize=quantize, dequantize=dequantize, matmul_q=matmul_q, QArray=QArray)


QJ, QS = qdefs("jax"), qdefs("sc")
xq = np.array([[1., 2., 3.], [4., -5., 6.]], np.float32)
wq = np.arange(12., dtype=np.float32).reshape(3, 4) / 12.


def qsame(run):
  want, got = both(lambda jx, d: run(jx, QJ if jx is jax else QS))
  assert got == want
  return got


def test_hitype_eager_typeof_and_jaxprs():
  got = qsame(lambda jx, q: (q["quantize"](xq), jx.typeof(q["quantize"](xq)),
                             q["dequantize"](q["quantize"](xq))))
  assert "q8[2,3]" in got and "QArray(qvalue=Array([[  42,   85,  127]" in got
  got = qsame(lambda jx, q: jx.make_jaxpr(lambda x: q["dequantize"](q["quantize"](x)))(xq))
  assert "b:q8[2,3] = call_hi_primitive[_prim=Quantize[{}]] a" in got
  qw = QJ["quantize"](wq), QS["quantize"](wq)
  got = qsame(lambda jx, q: jx.jit(q["matmul_q"]).trace(xq, qw[jx is not jax]).jaxpr)
  assert "b:q8[3,4]" in got


def test_hitype_values_through_jit():
  qsame(lambda jx, q: jx.jit(lambda x: q["dequantize"](q["quantize"](x)))(xq))
  qsame(lambda jx, q: (lambda qx: (jx.typeof(qx), qx, jx.jit(q["dequantize"])(qx)))(
      jx.jit(q["quantize"])(xq)))
  qsame(lambda jx, q: jx.jit(q["matmul_q"])(xq, q["quantize"](wq)))
  # a jit inside jit taking or giving a hijax value
  qsame(lambda jx, q: jx.jit(lambda x: jx.jit(q["dequantize"])(q["quantize"](x)))(xq))
  qsame(lambda jx, q: jx.jit(lambda x: q["dequantize"](jx.jit(q["quantize"])(x)))(xq))


def test_hitype_autodiff():
  f = lambda q: lambda x: q["dequantize"](q["quantize"](x)).sum()
  qsame(lambda jx, q: jx.grad(f(q))(xq))
  g = lambda q: lambda qx: (q["dequantize"](qx) ** 2).sum()
  qsame(lambda jx, q: (lambda gq: (gq, jx.typeof(gq)))(jx.grad(g(q))(q["quantize"](xq))))
  loss = lambda q: lambda x, qw: (q["matmul_q"](x, qw) ** 2).sum()
  qsame(lambda jx, q: [jx.typeof(t) for t in jx.grad(loss(q), argnums=(0, 1))(
      xq, q["quantize"](wq))])
  qsame(lambda jx, q: jx.grad(jx.jit(loss(q)), argnums=(0, 1))(xq, q["quantize"](wq)))
  qsame(lambda jx, q: jx.jit(jx.grad(loss(q), argnums=(0, 1)))(xq, q["quantize"](wq)))
  qsame(lambda jx, q: jx.grad(jx.jit(f(q)))(xq))
  qsame(lambda jx, q: jx.vmap(jx.jit(f(q)))(np.stack([xq, xq])))   # no batch rule: error


def test_hitype_misuse_in_traced_code():
  # reading a component of a traced hijax value: JAX's AttributeError words
  got = qsame(lambda jx, q: jx.jit(lambda qx: qx.qvalue)(q["quantize"](xq)))
  assert got == "AttributeError: DynamicJaxprTracer has no attribute qvalue"
