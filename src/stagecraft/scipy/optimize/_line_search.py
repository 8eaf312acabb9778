"""Inexact line search satisfying the strong Wolfe conditions (Nocedal & Wright, Numerical
Optimization, 2nd ed., Algorithms 3.5 and 3.6), written with `lax.while_loop` so that it
can be staged under `jit` and `vmap`. Used by BFGS and L-BFGS; JAX does not export it."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from stagecraft import lax
from stagecraft import numpy as jnp
from stagecraft.numpy.util import promote_dtypes_inexact
from stagecraft.scipy.optimize._util import dot, real_dtype_of, select_tree, to_dtype, \
    value_and_grad, weak_int

__all__ = ["line_search", "LineSearchResults"]


class LineSearchResults(NamedTuple):
  """Results of `line_search`.

  Attributes:
    failed: True if no step satisfying the strong Wolfe conditions was found.
    nit: number of iterations of the bracketing phase (Algorithm 3.5).
    nfev: number of objective evaluations.
    ngev: number of gradient evaluations (each evaluation computes both).
    k: the bracketing phase's final iteration counter (`nit + 1`).
    a_k: the step length (0 or the last point with sufficient decrease on failure).
    f_k: the objective at `xk + a_k * pk`.
    g_k: its gradient.
    status: 0 success, 1 the zoom phase failed, 3 `maxiter` bracketing iterations reached.
  """
  failed: Any
  nit: Any
  nfev: Any
  ngev: Any
  k: Any
  a_k: Any
  f_k: Any
  g_k: Any
  status: Any


class _Point(NamedTuple):
  """A trial step `a` with phi(a) = f(xk + a pk), phi'(a) = <g, pk> and the gradient g."""
  a: Any
  phi: Any
  dphi: Any
  g: Any


class _ZoomState(NamedTuple):
  j: Any
  done: Any
  failed: Any
  lo: _Point        # the end of the bracket with the lowest phi meeting sufficient decrease
  hi: _Point        # the other end
  a_rec: Any        # a third point (the end dropped last) for the cubic interpolant
  phi_rec: Any
  star: _Point
  nfev: Any


class _SearchState(NamedTuple):
  i: Any
  done: Any
  failed: Any
  prev: _Point
  star: _Point
  nfev: Any


def _cubic_minimizer(a, fa, fpa, b, fb, c, fc):
  """The minimizer of the cubic through (a, fa) with slope fpa, (b, fb) and (c, fc)
  (NaN where it has none)."""
  db, dc = b - a, c - a
  rb = fb - fa - fpa * db
  rc = fc - fa - fpa * dc
  det = db * db * dc * dc * (db - dc)
  A = (dc * dc * rb - db * db * rc) / det
  B = (db * db * db * rc - dc * dc * dc * rb) / det
  return a + (-B + jnp.sqrt(B * B - 3 * A * fpa)) / (3 * A)


def _quadratic_minimizer(a, fa, fpa, b, fb):
  """The minimizer of the quadratic through (a, fa) with slope fpa and (b, fb)."""
  db = b - a
  B = (fb - fa - fpa * db) / (db * db)
  return a - fpa / (2 * B)


def _zoom(evaluate: Callable, decrease: Callable, curvature: Callable, lo: _Point,
          hi: _Point, active: Any) -> _ZoomState:
  """Algorithm 3.6: shrinks the bracket [lo, hi] (in either order) until a trial step meets
  the strong Wolfe conditions. Trial steps are the minimizer of a cubic through lo, hi and the
  last dropped end, else of a quadratic through lo and hi, else the midpoint; an interpolant
  closer than 20% (cubic) or 10% (quadratic) of the bracket to its ends is rejected (the
  safeguards of SciPy's `scalar_search_wolfe2`). Fails when the bracket shrinks below 1e-5
  (1e-10 in 64-bit) or after 30 trials; it then returns `lo`. Runs no trial if not `active`.
  """
  adt = lo.a.dtype
  tiny = 1e-10 if np.finfo(adt).bits >= 64 else 1e-5
  zero = weak_int(0)
  init = _ZoomState(j=zero, done=jnp.asarray(False), failed=jnp.asarray(False), lo=lo, hi=hi,
                    a_rec=hi.a, phi_rec=hi.phi, star=lo, nfev=zero)

  def cond(s):
    return active & ~s.done & ~s.failed

  def body(s):
    lo, hi = s.lo, s.hi
    width = jnp.abs(hi.a - lo.a)
    left, right = jnp.minimum(lo.a, hi.a), jnp.maximum(lo.a, hi.a)
    a_cub = _cubic_minimizer(lo.a, lo.phi, lo.dphi, hi.a, hi.phi, s.a_rec, s.phi_rec)
    use_cub = (s.j > 0) & (a_cub > left + 0.2 * width) & (a_cub < right - 0.2 * width)
    a_quad = _quadratic_minimizer(lo.a, lo.phi, lo.dphi, hi.a, hi.phi)
    use_quad = ~use_cub & (a_quad > left + 0.1 * width) & (a_quad < right - 0.1 * width)
    a_j = jnp.where(use_cub, a_cub, jnp.where(use_quad, a_quad, (lo.a + hi.a) / 2))
    pt = evaluate(a_j)

    # j becomes the new hi end: it does not decrease phi enough, or not below lo.
    to_hi = ~decrease(pt) | (pt.phi >= lo.phi)
    found = ~to_hi & curvature(pt)
    to_lo = ~to_hi & ~found
    # j becomes lo; the old lo replaces hi when phi' at j points away from hi.
    flip = to_lo & (pt.dphi * (hi.a - lo.a) >= 0)
    new_hi = select_tree(to_hi, pt, select_tree(flip, lo, hi))
    new_lo = select_tree(to_lo, pt, lo)
    a_rec = jnp.where(to_hi | flip, hi.a, jnp.where(to_lo, lo.a, s.a_rec))
    phi_rec = jnp.where(to_hi | flip, hi.phi, jnp.where(to_lo, lo.phi, s.phi_rec))
    j = s.j + 1
    done = s.done | found
    failed = ~done & ((width <= tiny) | (j >= 30))
    star = select_tree(found, pt, select_tree(failed, new_lo, s.star))
    return _ZoomState(j=j, done=done, failed=failed, lo=new_lo, hi=new_hi, a_rec=a_rec,
                      phi_rec=phi_rec, star=star, nfev=s.nfev + 1)

  return lax.while_loop(cond, body, init)


def line_search(f: Callable, xk: Any, pk: Any, old_fval: Any = None, old_old_fval: Any = None,
                gfk: Any = None, c1: float = 1e-4, c2: float = 0.9,
                maxiter: int = 20) -> LineSearchResults:
  """Finds a step `a` along the descent direction `pk` meeting the strong Wolfe conditions.

  With phi(a) = f(xk + a pk): phi(a) <= phi(0) + c1 a phi'(0) (sufficient decrease) and
  |phi'(a)| <= c2 |phi'(0)| (curvature).

  Args:
    f: `f(x) -> real scalar`, differentiable in reverse mode; `x` has the shape of `xk`.
    xk: the current point, `T[n]`; integers are promoted to the default float dtype.
    pk: a descent direction `T[n]`.
    old_fval, gfk: `f(xk)` and its gradient, if already known (else evaluated here).
    old_old_fval: `f` at the previous iterate; sets the first trial step to
      `min(1, 2.02 (f(xk) - old_old_fval) / phi'(0))` as SciPy does (1 if not given).
    c1, c2: the constants of the Wolfe conditions, `0 < c1 < c2 < 1`.
    maxiter: the most bracketing iterations (the trial step doubles each time).

  Returns:
    A `LineSearchResults`. In 32-bit precision a step shorter than 1e-8 is raised to 1e-8
    in magnitude (as JAX does) so that minimizers cannot stall on a zero step.

  Algorithm: Nocedal & Wright, Numerical Optimization (2006), Algorithm 3.5 (bracketing, no
  upper bound on the step, which doubles) and 3.6 (zoom), with SciPy's choice of the first
  trial step and interpolation safeguards.
  """
  xk, pk = promote_dtypes_inexact(xk, pk)
  adt = real_dtype_of(pk)

  def evaluate(a):
    phi, g = value_and_grad(f, xk + a.astype(pk.dtype) * pk)
    return _Point(a=a, phi=phi, dphi=jnp.real(dot(g, pk)).astype(adt), g=g.astype(pk.dtype))

  zero_i = weak_int(0)
  if old_fval is None or gfk is None:
    p0 = evaluate(to_dtype(0, adt))
    nfev0 = zero_i + 1
  else:
    g0 = jnp.asarray(gfk).astype(pk.dtype)
    p0 = _Point(a=to_dtype(0, adt), phi=jnp.asarray(old_fval),
                dphi=jnp.real(dot(g0, pk)).astype(adt), g=g0)
    nfev0 = zero_i
  phi_dt = p0.phi.dtype
  p0 = p0._replace(phi=to_dtype(p0.phi, phi_dt))
  if old_old_fval is not None:
    guess = (1.01 * 2 * (p0.phi - old_old_fval) / p0.dphi).astype(adt)
    a1 = jnp.where((guess > 0) & (guess < 1), guess, to_dtype(1, adt))
  else:
    a1 = to_dtype(1, adt)

  def decrease(pt):
    return pt.phi <= p0.phi + c1 * pt.a * p0.dphi

  def curvature(pt):
    return jnp.abs(pt.dphi) <= -c2 * p0.dphi

  def body(s):
    a_i = jnp.where(s.i == 1, a1, 2 * s.prev.a)
    pt = evaluate(a_i)
    pt = pt._replace(phi=pt.phi.astype(phi_dt))
    # The bracket [prev, pt] holds a Wolfe step: zoom with prev as the low end.
    zoom_up = ~decrease(pt) | ((pt.phi >= s.prev.phi) & (s.i > 1))
    found = ~zoom_up & curvature(pt)
    # phi' >= 0 at pt: a Wolfe step lies behind it; zoom with pt as the low end.
    zoom_down = ~zoom_up & ~found & (pt.dphi >= 0)
    zooming = zoom_up | zoom_down
    z = _zoom(evaluate, decrease, curvature, select_tree(zoom_up, s.prev, pt),
              select_tree(zoom_up, pt, s.prev), zooming)
    star = select_tree(found, pt, select_tree(zooming, z.star, s.star))
    return _SearchState(i=s.i + 1, done=s.done | found | (zooming & z.done),
                        failed=s.failed | (zooming & z.failed), prev=pt, star=star,
                        nfev=s.nfev + 1 + z.nfev)

  init = _SearchState(i=zero_i + 1, done=jnp.asarray(False), failed=jnp.asarray(False),
                      prev=p0, star=p0, nfev=nfev0)
  s = lax.while_loop(lambda s: ~s.done & ~s.failed & (s.i <= maxiter), body, init)
  status = jnp.where(s.failed, 1, jnp.where(s.i > maxiter, 3, 0))
  a_k = s.star.a
  if np.finfo(adt).bits < 64:
    a_k = jnp.where(jnp.abs(a_k) < 1e-8, jnp.sign(a_k) * 1e-8, a_k).astype(adt)
  return LineSearchResults(failed=s.failed | ~s.done, nit=s.i - 1, nfev=s.nfev, ngev=s.nfev,
                           k=s.i, a_k=a_k, f_k=s.star.phi, g_k=s.star.g, status=status)
