"""`stagecraft.experimental.jet`: Taylor-mode automatic differentiation, as JAX's
`jax.experimental.jet`.

`jet(fun, primals, series)` pushes a truncated Taylor polynomial through `fun`: given the
input curve `x(t) = x0 + x1 t + x2 t^2/2! + ... + xK t^K/K!` (the primals `x0` and the series
`(x1, ..., xK)`, derivatives of the curve at 0), it returns `f(x0)` and the derivatives
`(f1, ..., fK)` of `t -> f(x(t))` at 0, in one pass, without nesting first-order AD.

How: `fun` is traced to a jaxpr, which is then interpreted equation by equation on
(primal, [c1, ..., cK]) pairs of normalized Taylor coefficients (`c_k = x_k / k!`), with one
rule per primitive: the recurrences of Griewank & Walther, "Evaluating Derivatives" (2nd ed.,
SIAM 2008), chapter 13, "Taylor and Tensor Coefficients" (Table 13.1/13.2): linear
primitives act on each coefficient; products are Cauchy convolutions; division, square root
and the power function solve for the next coefficient; exp, log, the trigonometric and
hyperbolic functions, tanh and the logistic function use the ODE they satisfy (`v' = u' g(v)`:
`v_k = (1/k) sum_{j=1..k} j u_j w_{k-j}`). An equation none of whose operands carries a
series is run as it is; comparisons and other piecewise-constant primitives give zero
series; calls (`jit`, `checkpoint`, custom_jvp/custom_vjp functions, whose custom rules are
ignored, as JAX's jet does) are inlined. A primitive without a rule raises
NotImplementedError naming it.

  >>> import stagecraft.numpy as jnp
  >>> from stagecraft.experimental.jet import jet
  >>> f0, (f1, f2) = jet(jnp.sin, (0.5 ** 3,), ((3 * 0.5 ** 2, 6 * 0.5),))
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

import stagecraft.numpy as jnp
from stagecraft import ad_checkpoint, core, tree_util
from stagecraft.core import Literal
from stagecraft.interpreters import ad, partial_eval as pe
from stagecraft.lax import (ad_util, cumulative, elementwise as ew, misc, reduction,
                            shape as lax_shape, slicing, special, spmd)
from stagecraft.lax.associative_scan import associative_scan
from stagecraft.lax.fft import fft_p
from stagecraft.lax.windowed import reduce_window_sum_p
from stagecraft.lax.conv import conv_general_dilated_p
from stagecraft.lax.dot import dot_general_p

__all__ = ["jet", "jet2", "jet_rules", "jet_jaxpr", "defzero", "deflinear", "JetRuleError",
           "fact", "zero_series", "zero_term"]

_Series = list   # [c1, ..., cK]: normalized Taylor coefficients; None: all zero


class _Zeros(list):
  """The coefficients of an operand that carries no series, instantiated as zeros for a
  rule (which may test `isinstance(series[i], _Zeros)`)."""


class JetRuleError(NotImplementedError):
  """A primitive reached by `jet` has no Taylor rule (its name is in the message)."""


# ---------------------------------------------------------------------------
# The user-facing function


def jet(fun: Callable, primals: Sequence[Any], series: Sequence[Sequence[Any]],
        factorial_scaled: bool = True, **_: Any) -> tuple[Any, Any]:
  """Taylor-mode higher-order differentiation of `fun` (JAX's `jax.experimental.jet.jet`).

  Args:
    fun: a function of arrays returning an array or a pytree of arrays.
    primals: the point `x0`: one array (or scalar) per positional argument of `fun`.
    series: one sequence `(x1, ..., xK)` per primal, each term shaped like its primal; all
      of the same length K, the order. With `factorial_scaled` (default) `x_k` is the k-th
      derivative of the input curve; otherwise its k-th Taylor coefficient (`x_k / k!`).
    factorial_scaled: whether the input and output terms are derivatives (True) or
      Taylor coefficients (False).

  Returns:
    `(primals_out, series_out)`: `fun(*primals)` and, in the same tree structure, a list
    `[f1, ..., fK]` per output leaf: the derivatives (or coefficients) of `t -> f(x(t))`.
    An output that does not depend on the inputs gets zero terms.

  Raises:
    ValueError: series of different lengths for different arguments, or a primal or term
      that is not an array (JAX's messages).
    NotImplementedError (`JetRuleError`): a primitive without a Taylor rule (its name is
      in the message); control flow (`cond`, `while`, `scan`) has none, as in JAX.

  Algorithm: Griewank & Walther, "Evaluating Derivatives", ch. 13 (see the module
  docstring); the results equal JAX's (up to rounding).
  """
  try:
    order, = set(map(len, series))
  except ValueError:
    raise ValueError("jet terms have inconsistent lengths for different arguments") from None
  for i, (x, terms) in enumerate(zip(primals, series)):
    if not tree_util.treedef_is_leaf(tree_util.tree_structure(x)):
      raise ValueError(f"primal value at position {i} is not an array")
    for j, t in enumerate(terms):
      if not tree_util.treedef_is_leaf(tree_util.tree_structure(t)):
        raise ValueError(f"term {j} for argument {i} is not an array")
  n = min(len(primals), len(series))   # NB: JAX zips them (extra entries are ignored)
  primals = list(primals)[:n]
  coeffs = []
  for terms in list(series)[:n]:
    terms = [jnp.asarray(t) for t in terms]
    if factorial_scaled:
      terms = [t / float(math.factorial(k + 1)) for k, t in enumerate(terms)]
    coeffs.append(terms)
  out_tree: list = []

  def flat_fun(*xs):
    out = fun(*xs)
    leaves, tree = tree_util.tree_flatten(out)
    out_tree.append(tree)
    return leaves

  avals = [core.get_aval(x) for x in primals]
  jaxpr, consts = pe.trace_to_jaxpr(flat_fun, avals)
  outs = jet_jaxpr(jaxpr, consts, primals, coeffs, order)
  p_out, s_out = [], []
  for v, (p, s) in zip(jaxpr.outvars, outs):
    p_out.append(p)
    if s is None:
      s = [jnp.zeros(np.shape(p), _dtype(p, v))] * order
    if factorial_scaled:
      s = [t * float(math.factorial(k + 1)) for k, t in enumerate(s)]
    s_out.append(list(s))
  tree = out_tree[0]
  return tree_util.tree_unflatten(tree, p_out), tree_util.tree_unflatten(tree, s_out)


def fact(n: Any) -> Any:
  """n! as a float Array, `exp(lgamma(n + 1))` (JAX's `jet.fact`, for scaling Taylor
  coefficients; n may be an array)."""
  return ew.exp(special.lgamma(n + 1.))


class ZeroTerm:
  """JAX's marker of an all-zero Taylor term (`zero_term`)."""


class ZeroSeries:
  """JAX's marker of an all-zero Taylor series (`zero_series`); stagecraft's `jet` returns
  explicit zeros instead, so its results are never this marker."""


zero_term = ZeroTerm()
zero_series = ZeroSeries()


def jet2(fun: Callable, primals: Sequence[Any], series: Sequence[Sequence[Any]],
         **kwargs: Any) -> tuple[Any, Any]:
  """`jet` with Taylor coefficients in and out (`factorial_scaled=False`; JAX's `jet2`)."""
  return jet(fun, primals, series, factorial_scaled=False, **kwargs)


def _dtype(p: Any, v: Any):
  aval = v.aval if hasattr(v, "aval") else core.get_aval(p)
  return aval.dtype


# ---------------------------------------------------------------------------
# The interpreter


def jet_jaxpr(jaxpr: core.Jaxpr, consts: Sequence[Any], primals: Sequence[Any],
              series: Sequence[_Series | None], order: int) -> list[tuple[Any, _Series | None]]:
  """Propagates (primal, normalized coefficients) pairs through `jaxpr`.

  Args:
    jaxpr: the program; `consts` its constvars' values (they carry no series).
    primals: one value per invar; `series`: one list of `order` coefficients per invar, or
      None for an input whose coefficients are all zero.

  Returns:
    One `(primal, coefficients or None)` pair per outvar.

  Raises:
    JetRuleError: an equation whose primitive has no rule and an operand with a series.
  """
  env: dict = {}

  def read(v):
    return (v.val, None) if type(v) is Literal else env[v]

  for v, c in zip(jaxpr.constvars, consts):
    env[v] = (c, None)
  for v, p, s in zip(jaxpr.invars, primals, series):
    env[v] = (p, None if s is None else [_fit(t, v.aval) for t in s])
  for eqn in jaxpr.eqns:
    ins = [read(v) for v in eqn.invars]
    ps = [p for p, _ in ins]
    ss = [s for _, s in ins]
    prim = eqn.primitive
    if all(s is None for s in ss):
      out = prim.bind(*ps, **eqn.params)
      outs = list(out) if prim.multiple_results else [out]
      souts: list = [None] * len(outs)
    elif prim in core.closed_calls:
      # NB: calls are inlined (jit, checkpoint; custom_jvp/vjp functions run their primal
      # body, their custom rules ignored, as JAX's jet does).
      closed = eqn.params[core.closed_calls[prim]]
      pairs = jet_jaxpr(closed.jaxpr, closed.consts, ps, ss, order)
      outs = [p for p, _ in pairs]
      souts = [s for _, s in pairs]
    else:
      rule = jet_rules.get(prim)
      if rule is None:
        raise JetRuleError(
            f"jet: primitive '{prim.name}' has no Taylor rule (stagecraft.experimental.jet."
            f"jet_rules[{prim.name}_p] is missing), and an operand of it depends on the "
            f"input series. Rules exist for: {', '.join(sorted(p.name for p in jet_rules))}.")
      ss = [_Zeros([jnp.zeros(np.shape(p), v.aval.dtype)] * order) if s is None else s
            for p, s, v in zip(ps, ss, eqn.invars)]
      out, sout = rule(ps, ss, **eqn.params)
      if prim.multiple_results:
        outs, souts = list(out), list(sout)
      else:
        outs, souts = [out], [sout]
    for v, p, s in zip(eqn.outvars, outs, souts):
      env[v] = (p, None if s is None else [_fit(t, v.aval) for t in s])
  return [read(v) for v in jaxpr.outvars]


def _fit(t: Any, aval: Any) -> Any:
  """A coefficient `t` with the shape and dtype of `aval` (rules may give broadcastable
  shapes or promoted dtypes)."""
  t = jnp.asarray(t)
  if t.dtype != aval.dtype:
    t = ew.convert_element_type(t, aval.dtype)
  if tuple(t.shape) != tuple(aval.shape):
    t = jnp.broadcast_to(t, aval.shape)
  return t


# ---------------------------------------------------------------------------
# Rules: `rule(primals_in, series_in, **params) -> (primal_out, series_out)`; each series a
# list of the K normalized coefficients (zeros instantiated); a series_out of None: all zero.

jet_rules: dict[core.Primitive, Callable] = {}


def defzero(prim: core.Primitive) -> None:
  """`prim` is piecewise constant: its results carry zero series."""
  def rule(primals, series, **params):
    out = prim.bind(*primals, **params)
    return out, ([None] * len(out) if prim.multiple_results else None)
  jet_rules[prim] = rule


def deflinear(prim: core.Primitive, linear: Sequence[int] | None = None) -> None:
  """`prim` is linear in the operands at `linear` (default: all): each coefficient is
  `prim` of the coefficients there (the other operands, e.g. indices, as they are)."""
  def rule(primals, series, **params):
    out = prim.bind(*primals, **params)
    pos = range(len(primals)) if linear is None else linear
    terms = []
    for k in range(len(series[0])):
      args = list(primals)
      for i in pos:
        args[i] = series[i][k]
      terms.append(prim.bind(*args, **params))
    if prim.multiple_results:
      return out, [list(ts) for ts in zip(*terms)] if terms else [[] for _ in out]
    return out, terms
  jet_rules[prim] = rule


for _p in (ew.eq_p, ew.ne_p, ew.lt_p, ew.le_p, ew.gt_p, ew.ge_p, ew.not_p, ew.and_p, ew.or_p,
           ew.xor_p, ew.floor_p, ew.ceil_p, ew.round_p, ew.sign_p, ew.is_finite_p,
           ew.shift_left_p, ew.shift_right_logical_p, ew.shift_right_arithmetic_p,
           ew.population_count_p, ew.clz_p, ew.bitcast_convert_type_p, ad_util.stop_gradient_p,
           reduction.argmax_p, reduction.argmin_p):
  defzero(_p)

for _p in (ew.neg_p, ew.add_p, ew.sub_p, ad.add_any_p, ew.convert_element_type_p, ew.real_p,
           ew.imag_p, ew.complex_p, ew.conj_p, lax_shape.broadcast_in_dim_p,
           lax_shape.reshape_p, lax_shape.transpose_p, lax_shape.squeeze_p, lax_shape.rev_p,
           lax_shape.concatenate_p, lax_shape.stack_p, lax_shape.unstack_p, lax_shape.split_p,
           lax_shape.tile_p,
           lax_shape.pad_p, lax_shape.slice_p, reduction.reduce_sum_p, cumulative.cumsum_p,
           ad_checkpoint.name_p):
  deflinear(_p)
deflinear(slicing.dynamic_slice_p, [0])
deflinear(slicing.dynamic_update_slice_p, [0, 1])
deflinear(slicing.gather_p, [0])
deflinear(slicing.scatter_add_p, [0, 2])


def _cauchy(xs: list, ys: list, k: int, op: Callable = lambda a, b: a * b,
            start: int = 0) -> Any:
  """`sum_{j=start..k} op(xs[j], ys[k-j])` (xs, ys: coefficient lists with the primal at 0)."""
  out = None
  for j in range(start, k + 1):
    term = op(xs[j], ys[k - j])
    out = term if out is None else out + term
  return out


def _bilinear(prim: core.Primitive):
  """z = x * y for a bilinear `prim` (mul, dot_general, conv): the Cauchy product
  `z_k = sum_j prim(x_j, y_{k-j})` (G&W Table 13.1)."""
  def rule(primals, series, **params):
    x, y = [primals[0], *series[0]], [primals[1], *series[1]]
    op = lambda a, b: prim.bind(a, b, **params)
    z = [_cauchy(x, y, k, op) for k in range(len(x))]
    return z[0], z[1:]
  return rule


for _p in (ew.mul_p, dot_general_p, conv_general_dilated_p):
  jet_rules[_p] = _bilinear(_p)


def _div_rule(primals, series):
  # z = x / y:  z_k = (x_k - sum_{j=1..k} y_j z_{k-j}) / y_0   (G&W Table 13.1)
  x, y = [primals[0], *series[0]], [primals[1], *series[1]]
  z = [ew.div_p.bind(primals[0], primals[1])]
  for k in range(1, len(x)):
    z.append((x[k] - _cauchy(y, z, k, start=1)) / y[0])
  return z[0], z[1:]


jet_rules[ew.div_p] = _div_rule


def _ode(g: Callable, primal_out: Any, u: list) -> list:
  """The coefficients of `v` with `v' = u' w`, `w = g(v coefficients so far, m)` giving
  w's m-th coefficient: `v_k = (1/k) sum_{j=1..k} j u_j w_{k-j}` (G&W Prop. 13.1)."""
  v = [primal_out]
  w: list = []
  for k in range(1, len(u)):
    w.append(g(v, k - 1))
    v.append(sum(j * u[j] * w[k - j] for j in range(1, k + 1)) / k)
  return v


def _unary(fun: Callable[[Any], Any], g: Callable[[list, int, Any], Any]):
  """A rule for `v = fun(u)` with `v' = u' w`, `w_m = g(v, m, u0)`."""
  def rule(primals, series, **params):
    u = [primals[0], *series[0]]
    v = _ode(lambda vs, m: g(vs, m, u[0]), fun(u[0], **params), u)
    return v[0], v[1:]
  return rule


def _sq(v: list, m: int) -> Any:
  """The m-th coefficient of v^2."""
  return _cauchy(v, v, m)


def _exp_rule(primals, series, **params):
  # v = exp(u): v' = u' v
  u = [primals[0], *series[0]]
  v = _ode(lambda vs, m: vs[m], ew.exp_p.bind(u[0], **params), u)
  return v[0], v[1:]


def _expm1_rule(primals, series, **params):
  # v = expm1(u): (v + 1)' = u' (v + 1); the coefficients past 0 are exp's
  u = [primals[0], *series[0]]
  v = _ode(lambda vs, m: vs[m] + 1 if m == 0 else vs[m], ew.expm1_p.bind(u[0], **params), u)
  return v[0], v[1:]


def _log_series(u: list, v0: Any) -> list:
  # v = log(u): u v' = u'  =>  v_k = (u_k - (1/k) sum_{j=1..k-1} j v_j u_{k-j}) / u_0
  v = [v0]
  for k in range(1, len(u)):
    acc = u[k]
    if k > 1:
      acc = acc - sum(j * v[j] * u[k - j] for j in range(1, k)) / k
    v.append(acc / u[0])
  return v


def _log_rule(primals, series, **params):
  u = [primals[0], *series[0]]
  v = _log_series(u, ew.log_p.bind(u[0], **params))
  return v[0], v[1:]


def _log1p_rule(primals, series, **params):
  u = [1 + primals[0], *series[0]]
  v = _log_series(u, ew.log1p_p.bind(primals[0], **params))
  return v[0], v[1:]


def _sinusoid(sign: int, f0: Callable, g0: Callable):
  """(s, c) = (sin u, cos u) (sign -1) or (sinh u, cosh u) (sign +1): s' = u' c,
  c' = sign u' s, both series built together (G&W Table 13.2)."""
  def both(primals, series, **params):
    u = [primals[0], *series[0]]
    s, c = [f0(u[0], **params)], [g0(u[0], **params)]
    for k in range(1, len(u)):
      s.append(sum(j * u[j] * c[k - j] for j in range(1, k + 1)) / k)
      c.append(sign * sum(j * u[j] * s[k - j] for j in range(1, k + 1)) / k)
    return s, c
  return both


def _first(pair_rule):
  def rule(primals, series, **params):
    s, _ = pair_rule(primals, series, **params)
    return s[0], s[1:]
  return rule


def _second(pair_rule):
  def rule(primals, series, **params):
    _, c = pair_rule(primals, series, **params)
    return c[0], c[1:]
  return rule


_sin_cos = _sinusoid(-1, ew.sin_p.bind, ew.cos_p.bind)
_sinh_cosh = _sinusoid(1, ew.sinh_p.bind, ew.cosh_p.bind)
jet_rules[ew.sin_p] = _first(_sin_cos)
jet_rules[ew.cos_p] = _second(_sin_cos)
jet_rules[ew.sinh_p] = _first(_sinh_cosh)
jet_rules[ew.cosh_p] = _second(_sinh_cosh)
jet_rules[ew.exp_p] = _exp_rule
jet_rules[ew.expm1_p] = _expm1_rule
jet_rules[ew.log_p] = _log_rule
jet_rules[ew.log1p_p] = _log1p_rule
# tanh' = 1 - tanh^2, tan' = 1 + tan^2, logistic' = logistic - logistic^2
jet_rules[ew.tanh_p] = _unary(ew.tanh_p.bind,
                              lambda v, m, u0: (1 - _sq(v, 0)) if m == 0 else -_sq(v, m))
jet_rules[ew.tan_p] = _unary(ew.tan_p.bind,
                             lambda v, m, u0: (1 + _sq(v, 0)) if m == 0 else _sq(v, m))
jet_rules[ew.logistic_p] = _unary(ew.logistic_p.bind, lambda v, m, u0: v[m] - _sq(v, m))


def _sqrt_rule(primals, series, **params):
  # z^2 = x:  z_k = (x_k - sum_{j=1..k-1} z_j z_{k-j}) / (2 z_0)   (G&W Table 13.1)
  x = [primals[0], *series[0]]
  z = [ew.sqrt_p.bind(x[0], **params)]
  for k in range(1, len(x)):
    acc = x[k]
    if k > 1:
      acc = acc - sum(z[j] * z[k - j] for j in range(1, k))
    z.append(acc / (2 * z[0]))
  return z[0], z[1:]


def _power_series(x: list, z0: Any, r: Any) -> list:
  """z = x^r for a constant r, x_0 != 0: `z_k = (1/(k x_0)) sum_{j=0..k-1}
  (r (k-j) - j) x_{k-j} z_j` (G&W Table 13.1, from x z' = r x' z)."""
  z = [z0]
  for k in range(1, len(x)):
    z.append(sum((r * (k - j) - j) * x[k - j] * z[j] for j in range(k)) / (k * x[0]))
  return z


def _rsqrt_rule(primals, series, **params):
  x = [primals[0], *series[0]]
  z = _power_series(x, ew.rsqrt_p.bind(x[0], **params), -0.5)
  return z[0], z[1:]


def _cbrt_rule(primals, series, **params):
  x = [primals[0], *series[0]]
  z = _power_series(x, ew.cbrt_p.bind(x[0], **params), 1.0 / 3.0)
  return z[0], z[1:]


jet_rules[ew.sqrt_p] = _sqrt_rule
jet_rules[ew.rsqrt_p] = _rsqrt_rule
jet_rules[ew.cbrt_p] = _cbrt_rule


def _mul_series(a: list, b: list) -> list:
  return [_cauchy(a, b, k) for k in range(len(a))]


def _recip_series(x: list) -> list:
  # z = 1 / x:  z_k = -(sum_{j=1..k} x_j z_{k-j}) / x_0
  z = [1 / x[0]]
  for k in range(1, len(x)):
    z.append(-_cauchy(x, z, k, start=1) / x[0])
  return z


def _int_power_series(x: list, n: int) -> list:
  """x^n for an integer n by repeated squaring of series (Cauchy products): exact at x_0=0."""
  if n < 0:
    x, n = _recip_series(x), -n
  result = None
  base = x
  while n:
    if n & 1:
      result = base if result is None else _mul_series(result, base)
    n >>= 1
    if n:
      base = _mul_series(base, base)
  return result


def _integer_pow_rule(primals, series, *, y):
  x = [primals[0], *series[0]]
  out = ew.integer_pow_p.bind(x[0], y=y)
  if y == 0:
    return out, None
  z = _int_power_series(x, y)
  return out, z[1:]


def _square_rule(primals, series, **params):
  x = [primals[0], *series[0]]
  return ew.square_p.bind(x[0], **params), _mul_series(x, x)[1:]


jet_rules[ew.integer_pow_p] = _integer_pow_rule
jet_rules[ew.square_p] = _square_rule


def _is_const_int(y: Any) -> int | None:
  """The integer value of a concrete, scalar exponent, else None."""
  if isinstance(y, core.Tracer):
    return None
  try:
    a = np.asarray(y)
  except Exception:   # NB: an Array that cannot be read here (on other devices)
    return None
  if a.shape != () or not np.isfinite(a) or a != np.round(a) or abs(a) > 2 ** 16:
    return None
  return int(a)


def _pow_rule(primals, series, **params):
  x0, y0 = primals
  out = ew.pow_p.bind(x0, y0, **params)
  if isinstance(series[1], _Zeros):
    n = _is_const_int(y0)
    x = [x0, *series[0]]
    if n is not None:
      # NB: an integer exponent: repeated products, exact where x_0 <= 0 too (JAX's rule,
      # through log x, gives NaN there).
      return out, _int_power_series(x, n)[1:]
    yx = ew.convert_element_type(y0, np.result_type(core.get_aval(x0).dtype))
    return out, _power_series(x, out, yx)[1:]
  # x^y = exp(y log x): the coefficients of u = y log x, then exp's recurrence
  x = [x0, *series[0]]
  y = [y0, *series[1]]
  lx = _log_series(x, ew.log_p.bind(x0))
  u = _mul_series(y, lx)
  v = _ode(lambda vs, m: vs[m], out, u)
  return out, v[1:]


jet_rules[ew.pow_p] = _pow_rule


def _abs_rule(primals, series, **params):
  x = primals[0]
  s = jnp.where(x < 0, -1, 1).astype(core.get_aval(x).dtype)
  return ew.abs_p.bind(x, **params), [s * t for t in series[0]]


def _select_n_rule(primals, series, **params):
  which, *cases = primals
  out = ew.select_n_p.bind(which, *cases, **params)
  return out, [ew.select_n_p.bind(which, *ts) for ts in zip(*series[1:])]


def _minmax(prim: core.Primitive, better: Callable):
  """max/min: the coefficients of the chosen operand; the mean of both where they tie
  (JAX's rule)."""
  def rule(primals, series, **params):
    x, y = primals
    out = prim.bind(x, y, **params)
    pick, tie = better(x, y), x == y
    terms = [jnp.where(tie, (a + b) / 2, jnp.where(pick, a, b)) for a, b in zip(*series)]
    return out, terms
  return rule


def _reduce_choose(prim: core.Primitive):
  """reduce_max/min: the coefficients at the chosen positions, averaged over ties (JAX's
  rule)."""
  def rule(primals, series, *, axes, **params):
    x, = primals
    out = prim.bind(x, axes=axes, **params)
    keep = tuple(1 if i in axes else d for i, d in enumerate(np.shape(x)))
    hit = (x == jnp.reshape(out, keep)).astype(core.get_aval(x).dtype)
    count = jnp.sum(hit, axis=axes)
    return out, [jnp.sum(t * hit, axis=axes) / count for t in series[0]]
  return rule


def _clamp_rule(primals, series, **params):
  # NB: as JAX's, the rule of its composition min(max(lo, x), hi) (so lo > hi gives hi, as
  # XLA's clamp does, and ties average)
  lo, x, hi = primals
  s_lo, s_x, s_hi = series
  m, s_m = _minmax(ew.max_p, lambda a, b: a > b)((lo, x), (s_lo, s_x))
  _, terms = _minmax(ew.min_p, lambda a, b: a < b)((m, hi), (s_m, s_hi))
  return ew.clamp_p.bind(lo, x, hi, **params), terms


jet_rules[ew.abs_p] = _abs_rule
jet_rules[ew.select_n_p] = _select_n_rule
jet_rules[ew.max_p] = _minmax(ew.max_p, lambda x, y: x > y)
jet_rules[ew.min_p] = _minmax(ew.min_p, lambda x, y: x < y)
jet_rules[reduction.reduce_max_p] = _reduce_choose(reduction.reduce_max_p)
jet_rules[reduction.reduce_min_p] = _reduce_choose(reduction.reduce_min_p)
jet_rules[ew.clamp_p] = _clamp_rule


# ---------------------------------------------------------------------------
# Functions whose derivative is a function we already expand: v = f(u), v' = u' f'(u), so
# `v_k = (1/k) sum_{j=1..k} j u_j w_{k-j}` with w the series of f'(u) (G&W Prop. 13.1);
# w is expanded by `jet2` of f' (its coefficients past K-1 are not needed).


def _w_series(fprime: Callable, primals: Sequence[Any], series: Sequence[list],
              order: int) -> list:
  """The normalized coefficients 0..order-1 of `fprime(*u)` (u: the inputs' series)."""
  w0 = fprime(*primals)
  if order <= 1:
    return [w0]
  w0, ws = jet2(fprime, tuple(primals), tuple(list(s[:order - 1]) for s in series))
  return [w0, *ws]


def _via_derivative(fun: Callable, fprime: Callable):
  """A rule for `v = fun(u)` given `fprime(u)`, built of expandable operations."""
  def rule(primals, series, **params):
    u = [primals[0], *series[0]]
    w = _w_series(fprime, primals, series, len(series[0]))
    v = [fun(u[0], **params)]
    for k in range(1, len(u)):
      v.append(sum(j * u[j] * w[k - j] for j in range(1, k + 1)) / k)
    return v[0], v[1:]
  return rule


_SQRT_PI = math.sqrt(math.pi)
jet_rules[ew.asinh_p] = _via_derivative(ew.asinh_p.bind,
                                        lambda u: ew.rsqrt(1 + u * u))
jet_rules[ew.acosh_p] = _via_derivative(ew.acosh_p.bind,
                                        lambda u: ew.rsqrt(u * u - 1))
jet_rules[ew.atanh_p] = _via_derivative(ew.atanh_p.bind, lambda u: 1 / (1 - u * u))
jet_rules[ew.erf_p] = _via_derivative(ew.erf_p.bind,
                                      lambda u: (2 / _SQRT_PI) * ew.exp(-(u * u)))
jet_rules[ew.erfc_p] = _via_derivative(ew.erfc_p.bind,
                                       lambda u: (-2 / _SQRT_PI) * ew.exp(-(u * u)))


def _erf_inv_rule(primals, series, **params):
  # v = erf_inv(u): v' = u' (sqrt(pi)/2) exp(v^2): w depends on v's coefficients so far.
  u = [primals[0], *series[0]]
  v = [ew.erf_inv_p.bind(u[0], **params)]
  g = lambda t: (_SQRT_PI / 2) * ew.exp(t * t)
  for k in range(1, len(u)):
    w = _w_series(g, [v[0]], [v[1:]], k)
    v.append(sum(j * u[j] * w[k - j] for j in range(1, k + 1)) / k)
  return v[0], v[1:]


def _atan2_rule(primals, series, **params):
  # z = atan2(x, y): z' = x' y / (x^2 + y^2) - y' x / (x^2 + y^2)
  x, y = [primals[0], *series[0]], [primals[1], *series[1]]
  k_max = len(series[0])
  p = _w_series(lambda a, b: b / (a * a + b * b), primals, series, k_max)
  q = _w_series(lambda a, b: -a / (a * a + b * b), primals, series, k_max)
  z = [ew.atan2_p.bind(x[0], y[0], **params)]
  for k in range(1, len(x)):
    z.append(sum(j * (x[j] * p[k - j] + y[j] * q[k - j]) for j in range(1, k + 1)) / k)
  return z[0], z[1:]


def _rem_rule(primals, series, **params):
  # rem(x, y) = x - y * trunc(x / y), trunc piecewise constant
  x, y = primals
  out = ew.rem_p.bind(x, y, **params)
  c = ew.round(ew.sub(x, out) / y)   # the integer quotient trunc(x / y)
  return out, [a - b * c for a, b in zip(*series)]


jet_rules[ew.erf_inv_p] = _erf_inv_rule
jet_rules[ew.atan2_p] = _atan2_rule
jet_rules[ew.rem_p] = _rem_rule


def _cumulative_rule(combine: Callable):
  """cumprod/cummax/cummin: the series of the prefix scan written with `combine` (JAX's
  rule: jet of `associative_scan`)."""
  def rule(primals, series, *, axis, reverse):
    fn = lambda x: associative_scan(combine, x, reverse=reverse, axis=axis)
    out, terms = jet2(fn, tuple(primals), tuple(list(s) for s in series))
    return out, list(terms)
  return rule


jet_rules[cumulative.cumprod_p] = _cumulative_rule(ew.mul)
jet_rules[cumulative.cummax_p] = _cumulative_rule(ew.max)
jet_rules[cumulative.cummin_p] = _cumulative_rule(ew.min)
for _p in (misc.copy_p, fft_p, reduce_window_sum_p, spmd.reshard_p):
  deflinear(_p)
