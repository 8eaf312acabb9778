"""Linear solves and root finding with implicitly defined derivatives: `custom_linear_solve`
(one `custom_linear_solve` primitive, `linear_solve_p`) and `custom_root` (JAX's
`lax.custom_linear_solve` and `lax.custom_root`).

`custom_linear_solve[const_lengths, jaxprs] *matvec_consts *vecmat_consts *solve_consts
*transpose_solve_consts *b` returns `solve(matvec, b)` (and the solver's auxiliary outputs).
`jaxprs` holds four closed jaxprs (`matvec`, `vecmat` — matvec's transpose —, `solve`,
`transpose_solve`; the last two may be None) whose constants are their leading invars, and
`const_lengths` how many operands each takes, both `_LinearSolveTuple`s printed as JAX
prints them.

Derivatives come from the equation `A x = b` at the solution, not from differentiating the
solver (implicit differentiation):

- JVP: `A dx = db - dA x`, one more solve with the same operator (`dA x` is the JVP of
  matvec in its constants at the solution).
- transpose: the cotangent of `b` solves `A^T ct_b = ct_x`: the same primitive with the
  tuples transposed (matvec <-> vecmat, solve <-> transpose_solve).
- batching: the four jaxprs batched with a common set of batched values (a fixpoint over
  which parts of `x` and `b` are batched, as JAX's `_linear_solve_batching_rule`).
- lowering: the solve jaxpr inlined; abstract eval: `b`'s avals (plus the auxiliary ones);
  DCE and partial evaluation: the defaults (the equation is kept or split as a whole).

`custom_root` wraps the solver in a `custom_jvp` whose rule is the implicit function
theorem: at a root `f(p, x*(p)) = 0`, `dx* = -(d_x f)^-1 (d_p f) dp`, the inverse applied by
the user's `tangent_solve` on `f` linearized at the root.
"""
from __future__ import annotations

import weakref
from functools import partial
from typing import Any, Callable, NamedTuple

import numpy as np

from stagecraft import core
from stagecraft.tree_util import treedef_str
from stagecraft.core import ClosedJaxpr, ShapedArray
from stagecraft.interpreters import ad, batching, lowering
from stagecraft.lax import elementwise
from stagecraft.lax import shape as lax_shape
from stagecraft.lax.control_flow import common
from stagecraft.traceback_util import api_boundary

__all__ = ["custom_linear_solve", "custom_root", "linear_solve_p"]


def _check_tree(func_name: str, expected_name: str, actual_tree, expected_tree,
                has_aux: bool = False):
  """JAX's check of a function's output structure (the result part of `(result, aux)` when
  `has_aux`)."""
  if has_aux:
    children = actual_tree.children()
    if len(children) != 2:
      raise ValueError(
          f"{func_name}() produced a pytree with structure {treedef_str(actual_tree)}, but a "
          f"pytree tuple with auxiliary output was expected because has_aux was set to True.")
    actual_tree = children[0]
  if actual_tree != expected_tree:
    raise TypeError(f"{func_name}() output pytree structure must match {expected_name}, got "
                    f"{treedef_str(actual_tree)} and {treedef_str(expected_tree)}.")


def _check_shapes(func_name: str, expected_name: str, actual, expected):
  actual_shapes = [tuple(np.shape(x)) for x in actual]
  expected_shapes = [tuple(np.shape(x)) for x in expected]
  if actual_shapes != expected_shapes:
    raise ValueError(f"{func_name}() output shapes must match {expected_name}, got "
                     f"{actual_shapes} and {expected_shapes}")


def _trace(fun: Callable, args_tree, avals, what: str):
  """`(closed, consts, out_tree)` of `fun` traced at `avals` (consts: leading invars)."""
  return common.trace_jaxpr(fun, args_tree, list(avals), what)


# ---------------------------------------------------------------------------
# custom_linear_solve


class _LinearSolveTuple(NamedTuple):
  """One entry per function of a linear solve (JAX's name and printed form)."""
  matvec: Any
  vecmat: Any
  solve: Any
  transpose_solve: Any

  def transpose(self) -> "_LinearSolveTuple":
    """The tuple of the transposed system `A^T x = b`."""
    return type(self)(self.vecmat, self.matvec, self.transpose_solve, self.solve)


def _split_linear_solve_args(args, const_lengths: _LinearSolveTuple):
  out, i = [], 0
  for n in const_lengths:
    out.append(list(args[i:i + n]))
    i += n
  return _LinearSolveTuple(*out), list(args[i:])


def _flatten(groups) -> list:
  return [x for g in groups for x in g]


def _transpose_linear(matvec: ClosedJaxpr, nconsts: int, consts: list, b_avals):
  """`vecmat(y) = A^T y` for the linear `matvec` (its first `nconsts` invars are consts)."""
  def vecmat(*ys):
    args = [*consts, *[ad.UndefinedPrimal(a) for a in b_avals]]
    cts = ad.backward_pass(matvec.jaxpr, args, list(ys))[nconsts:]
    return [ad.zeros_like_aval(a) if type(c) is ad.Zero else c for c, a in zip(cts, b_avals)]
  return vecmat


@api_boundary
def custom_linear_solve(matvec: Callable, b: Any, solve: Callable[[Callable, Any], Any],
                        transpose_solve: Callable[[Callable, Any], Any] | None = None,
                        symmetric: bool = False, has_aux: bool = False) -> Any:
  """Solves `matvec(x) = b` with `solve`, differentiated implicitly (JAX's
  `lax.custom_linear_solve`).

  The derivatives assume the invariant `matvec(solve(matvec, b)) == b` (not checked) and
  never differentiate through `solve`: the JVP is one more solve, `A dx = db - dA x`, and
  the transpose (reverse mode) a solve with `transpose_solve` on `A^T`.

  Args:
    matvec: the linear map `x -> A x` on pytrees shaped like `b`; differentiable in the
      values it closes over (`dA x` is its JVP in them).
    b: the right-hand side, a pytree of arrays `T_i[*s_i]`.
    solve: `solve(matvec, b) -> x` (or `(x, aux)` with `has_aux`), `x` shaped like `b`.
    transpose_solve: `transpose_solve(vecmat, b) -> x` for the transposed system, where
      `vecmat` is `matvec`'s transpose (derived by transposition); needed for reverse mode.
      Defaults to `solve` when `symmetric`.
    symmetric: whether `matvec` is symmetric (`vecmat` is then `matvec` itself).
    has_aux: whether `solve` and `transpose_solve` return `(x, aux)`; `aux` gets zero
      derivatives.

  Returns:
    `x`, a pytree like `b` with `b`'s dtypes (or `(x, aux)` with `has_aux`).

  Raises:
    TypeError: if an output's tree structure differs from `b`'s (JAX's message), a solve's
      dtypes differ from `b`'s, or reverse mode meets a solve without `transpose_solve`.
    ValueError: if an output's shapes differ from `b`'s, or `has_aux` is set and `solve`
      does not return a pair.

  Examples:
    >>> import stagecraft.numpy as jnp
    >>> from stagecraft import lax
    >>> a = jnp.array([[2., 1.], [1., 3.]])
    >>> x = lax.custom_linear_solve(lambda x: a @ x, jnp.array([3., 4.]),
    ...                             lambda mv, b: jnp.linalg.solve(a, b), symmetric=True)
    >>> x
    Array([1., 1.], dtype=float32)
  """
  if transpose_solve is None and symmetric:
    transpose_solve = solve
  b_flat, tree = common.flatten(b)
  b_avals = [core.get_aval(x) for x in b_flat]
  args_tree = common.flatten((b,))[1]

  def shape_checked(fun, name, aux):
    def f(x):
      y = fun(x)
      if aux:
        y, a = y   # NB: as JAX's, a result that is not a pair fails to unpack here
        _check_shapes(name, "b", common.flatten(y)[0], b_flat)
        return y, a
      _check_shapes(name, "b", common.flatten(y)[0], b_flat)
      return y
    return f

  matvec_jaxpr, matvec_consts, out_tree = _trace(shape_checked(matvec, "matvec", False),
                                                 args_tree, b_avals, "matvec")
  _check_tree("matvec", "b", out_tree, tree, False)
  solve_jaxpr, solve_consts, solve_tree = _trace(
      shape_checked(partial(solve, matvec), "solve", has_aux), args_tree, b_avals, "solve")
  _check_tree("solve", "b", solve_tree, tree, has_aux)
  _check_dtypes("solve", solve_jaxpr.out_avals, b_avals)
  if transpose_solve is None:
    vecmat_jaxpr = tr_solve_jaxpr = None
    vecmat_consts, tr_solve_consts = [], []
  else:
    if symmetric:
      vecmat: Callable = matvec
      vecmat_jaxpr, vecmat_consts = matvec_jaxpr, matvec_consts
    else:
      def recorded_matvec(x):   # NB: as JAX's vecmat = linear_transpose(matvec), whose
        # trace records identity broadcasts (their transposes print as reduce_sum[axes=()])
        with lax_shape.recording_identity_broadcasts(core.current_trace()):
          return shape_checked(matvec, "matvec", False)(x)
      lin_jaxpr, lin_consts, _ = _trace(recorded_matvec, args_tree, b_avals, "matvec")
      flat_vecmat = _transpose_linear(lin_jaxpr, len(lin_consts), lin_consts, b_avals)
      vecmat = lambda y: common.unflatten(tree, flat_vecmat(*common.flatten(y)[0]))  # noqa: E731
      vecmat_jaxpr, vecmat_consts, _ = _trace(vecmat, args_tree, b_avals, "transpose_solve")
    tr_solve_jaxpr, tr_solve_consts, tr_tree = _trace(
        shape_checked(partial(transpose_solve, vecmat), "transpose_solve", has_aux),
        args_tree, b_avals, "transpose_solve")
    _check_tree("transpose_solve", "b", tr_tree, tree, has_aux)
    _check_dtypes("transpose_solve", tr_solve_jaxpr.out_avals, b_avals)
  all_consts = [matvec_consts, vecmat_consts, solve_consts, tr_solve_consts]
  const_lengths = _LinearSolveTuple(*map(len, all_consts))
  jaxprs = _LinearSolveTuple(matvec_jaxpr, vecmat_jaxpr, solve_jaxpr, tr_solve_jaxpr)
  out_flat = linear_solve_p.bind(*_flatten(all_consts), *b_flat, const_lengths=const_lengths,
                                 jaxprs=jaxprs)
  return common.unflatten(solve_tree, out_flat)


def _check_dtypes(name: str, out_avals, b_avals):
  bad = [(a, b) for a, b in zip(out_avals, b_avals) if a.dtype != b.dtype]
  if bad:
    a, b = bad[0]
    raise TypeError(f"{name}() output dtypes must match b, got {a.str_short()} for b's "
                    f"{b.str_short()}. Make {name} return arrays of b's dtypes.")


# -- the primitive and its rules

linear_solve_p = core.Primitive("custom_linear_solve")
linear_solve_p.multiple_results = True


def _num_aux(jaxprs: _LinearSolveTuple) -> int:
  return len(jaxprs.solve.out_avals) - len(jaxprs.matvec.out_avals)


def _linear_solve_abstract_eval(*avals: ShapedArray, const_lengths, jaxprs):
  b_avals = list(avals[sum(const_lengths):])
  n_aux = _num_aux(jaxprs)
  return [*b_avals, *(jaxprs.solve.out_avals[-n_aux:] if n_aux else [])]


def _linear_solve_lowering(ctx, *args: str, const_lengths, jaxprs):
  # NB: as JAX's (a lowering of the impl): the solve jaxpr inlined.
  params, b = _split_linear_solve_args(args, const_lengths)
  return lowering.jaxpr_subcomp(ctx.fb, jaxprs.solve.jaxpr, [], [*params.solve, *b])


def _linear_solve_jvp(primals, tangents, *, const_lengths, jaxprs):
  # A x = b  =>  A dx = db - dA x: one more solve with the same operator.
  kw = dict(const_lengths=const_lengths, jaxprs=jaxprs)
  x = linear_solve_p.bind(*primals, **kw)
  params, b = _split_linear_solve_args(primals, const_lengths)
  params_dot, b_dot = _split_linear_solve_args(tangents, const_lengths)
  n = len(b_dot)
  x_leaves = x[:n]
  if all(type(t) is ad.Zero for t in params_dot.matvec):
    rhs = list(b_dot)
  else:
    zeros = [ad.Zero(ad.tangent_aval(core.get_aval(v))) for v in x_leaves]
    _, matvec_dot = ad.jvp_flat(core.jaxpr_as_fun(jaxprs.matvec),
                                [*params.matvec, *x_leaves], [*params_dot.matvec, *zeros])
    rhs = [bd if type(m) is ad.Zero else ad.add_tangents(bd, elementwise.neg(m))
           for bd, m in zip(b_dot, matvec_dot)]
  rhs = [ad.zeros_like_aval(ad.tangent_aval(core.get_aval(v))) if type(r) is ad.Zero else r
         for r, v in zip(rhs, b)]
  x_dot = linear_solve_p.bind(*_flatten(params), *rhs, **kw)
  aux_dot = [ad.Zero(ad.tangent_aval(core.get_aval(v))) for v in x[n:]]
  return x, [*x_dot[:n], *aux_dot]


def _linear_solve_transpose(cts, *primals, const_lengths, jaxprs):
  # ct_b solves A^T ct_b = ct_x: the transposed system's solve.
  if jaxprs.transpose_solve is None:
    raise TypeError("transpose_solve required for backwards mode automatic differentiation "
                    "of custom_linear_solve")
  params, b = _split_linear_solve_args(primals, const_lengths)
  if any(ad.is_undefined_primal(x) for xs in params for x in xs):
    raise NotImplementedError(
        "custom_linear_solve: transposing with respect to the operator's constants (a "
        "matvec linear in the values it closes over) is not supported; differentiate with "
        "respect to b, or make the operator's constants non-linear inputs.")
  n = len(b)
  x_ct, other = cts[:n], cts[n:]
  if any(type(c) is not ad.Zero for c in other):
    raise NotImplementedError("custom_linear_solve: the auxiliary outputs of solve have no "
                              "derivatives; their cotangents must be zero.")
  x_ct = [ad.zeros_like_aval(ad.tangent_aval(p.aval)) if type(c) is ad.Zero else c
          for c, p in zip(x_ct, b)]
  ct_b = linear_solve_p.bind(*_flatten(params.transpose()), *x_ct,
                             const_lengths=const_lengths.transpose(), jaxprs=jaxprs.transpose())
  return [None] * sum(const_lengths) + list(ct_b[:n])


_batch_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _batched_outs(closed: ClosedJaxpr, axis_data, in_bat, force):
  """Which outputs of `closed` are batched when the inputs marked in `in_bat` are (at 0),
  those in `force` forced to be."""
  dims = [0 if b else None for b in in_bat]
  targets = [0 if f else None for f in force]
  return [d is not None for d in batching.batch_jaxpr(closed, axis_data, dims, targets)[2]]


def _batch_jaxprs(jaxprs, const_lengths, axis_data, params_bat, orig_b_bat):
  matvec, vecmat, solve, solve_t = jaxprs
  matvec_bat, vecmat_bat, solve_bat, solve_t_bat = params_bat
  n_op = len(matvec.out_avals)
  n_aux = len(solve.out_avals) - n_op
  b_bat, x_bat = list(orig_b_bat), [False] * len(solve.out_avals)
  # Fixpoint: which parts of x and b are batched, the same for all four jaxprs.
  for _ in range(1 + len(orig_b_bat) + len(solve.out_avals)):
    x_out = _batched_outs(solve, axis_data, [*solve_bat, *b_bat], x_bat)
    if vecmat is not None:
      v_out = _batched_outs(vecmat, axis_data, [*vecmat_bat, *b_bat], b_bat)
      x_out = [a or b for a, b in zip([*v_out, *[True] * n_aux], x_out)]
    x_noaux = x_out[:n_op]
    m_out = _batched_outs(matvec, axis_data, [*matvec_bat, *x_noaux], b_bat)
    b_out = [a or b for a, b in zip(m_out, orig_b_bat)]
    if solve_t is not None:
      t_out = _batched_outs(solve_t, axis_data, [*solve_t_bat, *x_noaux], x_out)
      b_out = [a or b for a, b in zip(b_out, t_out[:len(orig_b_bat)])]
    if x_out == x_bat and b_out == b_bat:
      break
    x_bat, b_bat = x_out, b_out
  else:
    raise AssertionError("custom_linear_solve batching: no fixpoint")
  x_noaux = x_bat[:n_op]

  def batch(closed, in_bat, out_bat):
    if closed is None:
      return None, []
    b_closed, consts, _ = batching.batch_jaxpr(
        closed, axis_data, [0 if b else None for b in in_bat], [0 if b else None for b in out_bat])
    return b_closed, consts

  new = [batch(matvec, [*matvec_bat, *x_noaux], b_bat),
         batch(vecmat, [*vecmat_bat, *b_bat], x_noaux) if vecmat is not None else (None, []),
         batch(solve, [*solve_bat, *b_bat], x_bat),
         batch(solve_t, [*solve_t_bat, *x_noaux], [*b_bat, *x_bat[n_op:]])
         if solve_t is not None else (None, [])]
  return (_LinearSolveTuple(*[j for j, _ in new]), [c for _, c in new], b_bat, x_bat)


def _linear_solve_batch(axis_data, args, dims, *, const_lengths, jaxprs):
  if all(d is None for d in dims):
    return (linear_solve_p.bind(*args, const_lengths=const_lengths, jaxprs=jaxprs),
            [None] * len(_linear_solve_abstract_eval(*[core.get_aval(a) for a in args],
                                                     const_lengths=const_lengths,
                                                     jaxprs=jaxprs)))
  params, b = _split_linear_solve_args(args, const_lengths)
  params_dims, b_dims = _split_linear_solve_args(dims, const_lengths)
  params_bat = _LinearSolveTuple(*[[d is not None for d in ds] for ds in params_dims])
  orig_b_bat = [d is not None for d in b_dims]
  key = (jaxprs, const_lengths, axis_data, tuple(map(tuple, params_bat)), tuple(orig_b_bat))
  new_jaxprs, new_consts, b_bat, x_bat = core.memo_on_jaxpr(
      _batch_cache, jaxprs.solve, key,
      lambda: _batch_jaxprs(jaxprs, const_lengths, axis_data, params_bat, orig_b_bat))
  new_params = [[batching.moveaxis(x, d, 0) if d is not None and d != 0 else x
                 for x, d in zip(xs, ds)] for xs, ds in zip(params, params_dims)]
  new_b = [batching.broadcast(x, axis_data.size, 0) if now and not was else
           batching.moveaxis(x, d, 0) if now and d != 0 else x
           for x, d, was, now in zip(b, b_dims, orig_b_bat, b_bat)]
  groups = [[*c, *p] for c, p in zip(new_consts, new_params)]
  outs = linear_solve_p.bind(*_flatten(groups), *new_b,
                             const_lengths=_LinearSolveTuple(*map(len, groups)),
                             jaxprs=new_jaxprs)
  return outs, [0 if bat else None for bat in x_bat]


# impl: the generic one (lower the one-equation jaxpr, run the cached executable)
linear_solve_p.def_abstract_eval(_linear_solve_abstract_eval)
lowering.register_lowering(linear_solve_p, _linear_solve_lowering)
ad.primitive_jvps[linear_solve_p] = _linear_solve_jvp
ad.primitive_transposes[linear_solve_p] = _linear_solve_transpose
batching.fancy_primitive_batchers[linear_solve_p] = _linear_solve_batch
# DCE and partial eval: the defaults (the equation is kept, or goes unknown, as a whole), as
# JAX's.


# ---------------------------------------------------------------------------
# custom_root


class _RootTuple(NamedTuple):
  f: Any
  solve: Any
  l_and_s: Any


def _split_root_args(args, const_lengths: _RootTuple):
  out, i = [], 0
  for n in const_lengths:
    out.append(list(args[i:i + n]))
    i += n
  return _RootTuple(*out), list(args[i:])


#: The `custom_jvp` class of `stagecraft.custom_derivatives` (layer 6, above lax), handed
#: down by `install_custom_jvp`; `custom_root` is a custom_jvp function, as JAX's.
_root_fn: list = []


def install_custom_jvp(custom_jvp: type) -> None:
  """Builds `custom_root`'s custom_jvp function from the `custom_jvp` class.

  # NB: lax may not import custom_derivatives (a higher layer); that module (or one
  above it) hands its class down with this call, as runtime/dispatch installs core's impl.
  """
  fn = custom_jvp(_custom_root, nondiff_argnums=(0, 1))
  fn.defjvp(_root_jvp)
  _root_fn[:] = [fn]


def _custom_root(const_lengths, jaxprs, *args):
  params, initial_guess = _split_root_args(args, const_lengths)
  return core.jaxpr_as_fun(jaxprs.solve)(*params.solve, *initial_guess)


def _root_jvp(const_lengths, jaxprs, primals, tangents):
  # At the root, f(p, x*(p)) = 0, so d_p f dp + d_x f dx* = 0 (implicit function theorem):
  # dx* = -(d_x f)^-1 (d_p f dp), the inverse applied by the user's tangent_solve.
  params, _ = _split_root_args(primals, const_lengths)
  sol = _root_fn[0](const_lengths, jaxprs, *primals)
  n = len(jaxprs.f.out_avals)
  solution, aux = list(sol[:n]), list(sol[n:])
  params_dot, _ = _split_root_args(tangents, const_lengths)
  f = core.jaxpr_as_fun(jaxprs.f)
  _, rhs = ad.jvp_flat(lambda *p: f(*p, *solution), params.f, params_dot.f)
  rhs = [ad.instantiate_zeros(r) for r in rhs]
  lin_solve = core.jaxpr_as_fun(jaxprs.l_and_s)
  solution_dot = [elementwise.neg(t) for t in lin_solve(*params.l_and_s, *solution, *rhs)]
  aux_dot = [ad.zeros_like_aval(ad.tangent_aval(core.get_aval(a))) for a in aux]
  return [*solution, *aux], [*solution_dot, *aux_dot]


def _linearize(f: Callable, x: Any):
  """`f` linearized at `x` (JAX's `linearize`): a function of a tangent pytree like `x`.
  The primal work runs once, here; each call of the result evaluates the linear part."""
  x_flat, x_tree = common.flatten(x)
  out_tree_box = []

  def flat_f(*xs):
    out, out_tree = common.flatten(f(common.unflatten(x_tree, list(xs))))
    out_tree_box.append(out_tree)
    return out
  p_out, lin_jaxpr, residuals, zero_outs = ad.linearize_flat(flat_f, x_flat)
  out_tree = out_tree_box[0]
  t_avals = [ad.tangent_aval(core.get_aval(v)) for v in x_flat]
  t_out_avals = [ad.tangent_aval(core.get_aval(p)) for p in p_out]

  def f_jvp(t):
    t_flat, t_tree = common.flatten(t)
    if t_tree != x_tree:
      raise TypeError(f"custom_root: the linearized function takes a tangent structured as "
                      f"{treedef_str(x_tree)}, got {treedef_str(t_tree)}.")
    t_flat = [v if core.get_aval(v).dtype == a.dtype else common.cast(v, a.dtype)
              for v, a in zip(t_flat, t_avals)]
    outs = iter(core.eval_jaxpr(lin_jaxpr, [], *residuals, *t_flat))
    res = [ad.zeros_like_aval(a) if z else next(outs) for z, a in zip(zero_outs, t_out_avals)]
    return common.unflatten(out_tree, res)
  return f_jvp


@api_boundary
def custom_root(f: Callable, initial_guess: Any, solve: Callable[[Callable, Any], Any],
                tangent_solve: Callable[[Callable, Any], Any], has_aux: bool = False) -> Any:
  """Finds a root of `f` with `solve`, differentiated implicitly (JAX's `lax.custom_root`).

  The result is `solve(f, initial_guess)`; its derivatives with respect to the values `f`
  closes over come from the implicit function theorem at the root (`f(x*) = 0`), never from
  differentiating `solve`: `dx* = -(d_x f)^-1 (d_p f) dp`, with the inverse applied by
  `tangent_solve`.

  Args:
    f: the function whose root is sought; takes and returns pytrees shaped like
      `initial_guess`.
    initial_guess: the starting point, a pytree of arrays.
    solve: `solve(f, initial_guess) -> x` with `f(x) = 0` (or `(x, aux)` with `has_aux`).
    tangent_solve: `tangent_solve(g, y) -> x` with `g(x) = y`, for `g` the linear map of `f`
      linearized at the root (e.g. `lambda g, y: y / g(1.0)` for scalars).
    has_aux: whether `solve` returns `(x, aux)`; `aux` gets zero derivatives.

  Returns:
    `solve(f, initial_guess)`, a pytree like `initial_guess` (or `(x, aux)`), as one
    `custom_jvp_call[name=_custom_root]` equation when traced.

  Raises:
    TypeError: if `f`, `solve` or `tangent_solve` returns a tree structure other than
      `initial_guess`'s (JAX's message).
    ValueError: if `has_aux` is set and `solve` does not return a pair.

  Algorithm: the implicit function theorem, as JAX's `custom_root`.

  Examples:
    >>> from stagecraft import lax
    >>> def sqrt(a):
    ...   newton = lambda f, x: lax.fori_loop(0, 20, lambda i, x: x - f(x) / (2 * x), x)
    ...   return lax.custom_root(lambda x: x * x - a, 1.0, newton, lambda g, y: y / g(1.0))
    >>> float(sqrt(2.0))  # doctest: +ELLIPSIS
    1.414...
  """
  if not _root_fn:
    raise RuntimeError("custom_root needs stagecraft.custom_derivatives, which installs its "
                       "custom_jvp on import: import stagecraft first.")
  guess_flat, guess_tree = common.flatten(initial_guess)
  guess_avals = [core.get_aval(x) for x in guess_flat]
  args_tree = common.flatten((initial_guess,))[1]
  f_jaxpr, f_consts, f_tree = _trace(f, args_tree, guess_avals, "f")
  _check_tree("f", "initial_guess", f_tree, guess_tree, False)
  solve_jaxpr, solve_consts, solution_tree = _trace(partial(solve, f), args_tree, guess_avals,
                                                    "solve")
  _check_tree("solve", "initial_guess", solution_tree, guess_tree, has_aux)

  def linearize_and_solve(x, b):
    return tangent_solve(_linearize(f, x), b)
  l_and_s_jaxpr, l_and_s_consts, l_tree = _trace(
      linearize_and_solve, common.flatten((initial_guess, initial_guess))[1],
      guess_avals * 2, "tangent_solve")
  _check_tree("tangent_solve", "x", l_tree, guess_tree, False)
  all_consts = [f_consts, solve_consts, l_and_s_consts]
  const_lengths = _RootTuple(*map(len, all_consts))
  jaxprs = _RootTuple(f_jaxpr, solve_jaxpr, l_and_s_jaxpr)
  solution_flat = _root_fn[0](const_lengths, jaxprs, *_flatten(all_consts), *guess_flat)
  return common.unflatten(solution_tree, list(solution_flat))
