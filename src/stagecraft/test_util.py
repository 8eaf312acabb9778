"""Derivative checks against central finite differences (as JAX's test utility `check_grads`)."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from stagecraft import api, dtypes, tree_util
from stagecraft.config import numpy_dtype_promotion

__all__ = ["numerical_jvp", "check_jvp", "check_vjp", "check_grads"]

#: JAX's finite-difference step, whatever the dtype.
_EPS = 1e-4
_DEFAULT_TOL = {np.dtype(np.float64): 1e-5, np.dtype(np.float32): 2e-3,
                np.dtype(np.float16): 1e-2, dtypes.bfloat16: 1e-1,
                np.dtype(np.complex64): 1e-3, np.dtype(np.complex128): 1e-5}


def _tol(dtype, tol) -> float:
  """The tolerance for values of `dtype`: `tol` itself when a number, else JAX's gradient
  tolerance for `dtype` canonicalized (float64 data is checked as float32 unless x64 is on),
  with `tol` (a dict dtype -> tolerance) overriding the defaults."""
  if tol is not None and not isinstance(tol, dict):
    return tol
  table = dict(_DEFAULT_TOL)
  table.update({np.dtype(k): v for k, v in (tol or {}).items()})
  return table.get(np.dtype(dtypes.canonicalize_dtype(dtype)), 1e-5)


def _pair_tol(a: np.ndarray, b: np.ndarray, atol, rtol) -> tuple[float, float]:
  """JAX's tolerances for comparing leaves `a` and `b`: the looser of their dtypes', scaled
  by the leaves' sizes (atol by a's, rtol by b's)."""
  return (max(_tol(a.dtype, atol), _tol(b.dtype, atol)) * a.size,
          max(_tol(a.dtype, rtol), _tol(b.dtype, rtol)) * b.size)


def _leaves(tree) -> list[np.ndarray]:
  return [np.asarray(x) for x in tree_util.tree_leaves(tree)]


def _dtype_of(tree) -> np.dtype:
  ds = [x.dtype for x in _leaves(tree) if dtypes.is_inexact(x.dtype)]
  return min(ds, key=lambda d: d.itemsize) if ds else np.dtype(np.float64)


def _rand_like(rng: np.random.RandomState, tree):
  """A standard-normal direction like `tree`, drawn as JAX's test utility draws it (one
  `rng.randn(*shape)` per leaf, a second one for the imaginary part of complex leaves), so
  that a check of `f` tries the directions `jax.test_util.check_grads` tries."""
  def rand(x):
    x = np.asarray(x)
    v = np.asarray(rng.randn(*x.shape))
    if not dtypes.is_inexact(x.dtype):
      return np.zeros(x.shape, dtypes.float0)
    if dtypes.is_complex(x.dtype):
      v = v + 1j * np.asarray(rng.randn(*x.shape))
    return v.astype(x.dtype)
  return tree_util.tree_map(rand, tree)


def _axpy(a: float, x, y):
  def f(xi, yi):
    yi = np.asarray(yi)
    if not dtypes.is_inexact(yi.dtype):
      return yi
    wide = np.complex128 if dtypes.is_complex(yi.dtype) else np.float64
    return (a * np.asarray(xi, wide) + yi.astype(wide)).astype(yi.dtype)
  return tree_util.tree_map(f, x, y)


def _differentiable(*leaves) -> bool:
  """Whether a leaf pair carries derivatives (float0 and integer leaves do not)."""
  return all(dtypes.is_inexact(np.asarray(a).dtype) for a in leaves)


def _vdot(x, y) -> float:
  """Re <x, y> = Re sum(conj(x) * y) over the differentiable leaf pairs."""
  return float(sum(np.real(np.vdot(np.asarray(a, np.complex128).ravel(),
                                   np.asarray(b, np.complex128).ravel()))
                   for a, b in zip(_leaves(x), _leaves(y)) if _differentiable(a, b)))


def _conj(tree):
  return tree_util.tree_map(
      lambda x: np.conj(x) if dtypes.is_complex(np.asarray(x).dtype) else x, tree)


def numerical_jvp(f: Callable, primals: Sequence[Any], tangents: Sequence[Any],
                  eps: float) -> Any:
  """Central difference (f(x + eps t) - f(x - eps t)) / (2 eps), leafwise in float64
  (equal values, infinite ones included, differ by 0, as JAX's)."""
  up = f(*_axpy(eps, tangents, primals))
  down = f(*_axpy(-eps, tangents, primals))
  def diff(u, d):
    if not _differentiable(u):
      return np.zeros(np.shape(u), dtypes.float0)
    u = np.asarray(u, np.complex128 if np.iscomplexobj(u) else np.float64)
    d = np.asarray(d, u.dtype)
    # Equal values (infinities included: a max over padding only) differ by 0, not NaN.
    with np.errstate(invalid="ignore"):
      return np.where(u == d, np.zeros((), u.dtype), u - d) / (2 * eps)
  return tree_util.tree_map(diff, up, down)


def _assert_close(x, y, atol, rtol, what: str):
  for a, b in zip(_leaves(x), _leaves(y)):
    if not dtypes.is_inexact(np.asarray(a).dtype) and a.dtype != dtypes.float0:
      continue
    if a.dtype == dtypes.float0:
      continue
    at, rt = _pair_tol(np.asarray(a), np.asarray(b), atol, rtol)
    np.testing.assert_allclose(np.asarray(a, np.complex128), np.asarray(b, np.complex128),
                               atol=at, rtol=rt, err_msg=what)


def check_jvp(f: Callable, args: Sequence[Any], *, atol: float, rtol: float, eps: float,
              rng: np.random.RandomState | None = None) -> None:
  """Checks `jvp(f)` along a random direction against central differences."""
  rng = np.random.RandomState(0) if rng is None else rng
  tangents = _rand_like(rng, tuple(args))
  _, t_out = api.jvp(f, tuple(args), tangents)
  expected = numerical_jvp(f, args, tangents, eps)
  _assert_close(t_out, expected, atol, rtol, "JVP differs from finite differences")


def check_vjp(f: Callable, args: Sequence[Any], *, atol: float, rtol: float, eps: float,
              rng: np.random.RandomState | None = None) -> None:
  """Checks `Re<t, conj(vjp(conj(ct)))> == Re<J t, ct>` with J t from central differences
  (JAX's convention: the VJP is the transpose, so complex cotangents are conjugated)."""
  rng = np.random.RandomState(0) if rng is None else rng
  out, vjp_fn = api.vjp(f, *args)
  t = _rand_like(rng, tuple(args))
  ct = _rand_like(rng, out)
  lhs = _vdot(t, _conj(vjp_fn(_conj(ct))))
  rhs = _vdot(numerical_jvp(f, args, t, eps), ct)
  # The tolerance's dtype joins the inexact dtypes under standard promotion, whatever the
  # user's jax_numpy_dtype_promotion (JAX's check_grads works under 'strict' too).
  with numpy_dtype_promotion("standard"):
    dt = np.dtype(dtypes.result_type(*[x.dtype for x in _leaves(out) + _leaves(args)
                                       if dtypes.is_inexact(x.dtype)] or [np.float64]))
  at, rt = _pair_tol(np.asarray(lhs, dt), np.asarray(rhs), atol, rtol)
  np.testing.assert_allclose(lhs, rhs, atol=at, rtol=rt,
                             err_msg="VJP is not the adjoint of the finite-difference JVP")


def check_grads(f: Callable, args: Sequence[Any], order: int,
                modes: Sequence[str] = ("fwd", "rev"), atol: float | None = None,
                rtol: float | None = None, eps: float | None = None, seed: int = 0) -> None:
  """Checks forward- and/or reverse-mode derivatives of `f` up to `order` against central
  finite differences (JAX's defaults: eps 1e-4 for every dtype; tolerance per compared
  leaf, the looser of its two dtypes' (canonicalized: 1e-5 in float64, 2e-3 in float32,
  1e-2 in float16), times the leaf's size; a number given for atol/rtol is used as is, a
  dict dtype -> tolerance overrides the defaults), along the directions JAX's
  `check_grads` draws.

  Args:
    f: a function of `args` (arrays or pytrees) returning arrays or pytrees.
    args: a tuple of the arguments.
    order: 1 checks first derivatives; 2 also the derivatives of those, and so on.
    modes: "fwd" (jvp) and/or "rev" (vjp).

  Raises:
    AssertionError: naming the mode and order that disagree.
    ValueError: for an unknown mode or order < 1.
  """
  if order < 1:
    raise ValueError(f"check_grads: order must be >= 1, got {order}.")
  if set(modes) - {"fwd", "rev"}:
    raise ValueError(f"check_grads: modes must be 'fwd' and/or 'rev', got {modes}.")
  args = tuple(args)
  eps = eps or _EPS
  rng = np.random.RandomState(seed)

  def _check(f, order):
    # NB: each check draws its directions from a fresh RandomState(seed), as JAX's do
    # (RandomState(0)), so that a check fails or passes where JAX's does.
    if "fwd" in modes:
      check_jvp(f, args, atol=atol, rtol=rtol, eps=eps, rng=np.random.RandomState(seed))
      if order > 1:
        v = _rand_like(rng, args)
        _check(lambda *a: api.jvp(f, a, v)[1], order - 1)
    if "rev" in modes:
      check_vjp(f, args, atol=atol, rtol=rtol, eps=eps, rng=np.random.RandomState(seed))
      if order > 1:
        ct = _rand_like(rng, f(*args))
        _check(lambda *a: api.vjp(f, *a)[1](ct), order - 1)

  _check(f, order)
