"""JAX's hijax types tutorial (docs/hijax_types.md), its scan section: a quantized array type
(`QArray`, int8 values with per-row scales) as `lax.scan` carries, xs and ys, run eagerly on
JAX 0.10.2 and on stagecraft in the same test and compared (typeof strings, values, error
texts)."""

import jax
import jax.experimental.hijax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.experimental.hijax
import stagecraft.numpy as sjnp
from test_hijax import qdefs

LIBS = {"jax": (jax, jjnp, jax.experimental.hijax),
        "sc": (sc, sjnp, stagecraft.experimental.hijax)}


def defs(lib):
  """The quantized array type (with the tutorial's scan interface) and its two primitives
  over one library (test_hijax's)."""
  d = qdefs(lib, scan=True)
  jx, jnp, _ = LIBS[lib]
  return jx, jnp, d["quantize"], d["dequantize"]


def both(fn):
  return fn(*defs("jax")), fn(*defs("sc"))


def _arrays(q):
  return np.asarray(q.qvalue), np.asarray(q.scale)


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_quantized_carry_and_ys(reverse):
  # the tutorial's accumulate-in-quantized-form scan: a QArray carry and QArray ys
  def run(jx, jnp, quantize, dequantize):
    def accum(qtotal, x):
      return quantize(dequantize(qtotal) + x), quantize(2 * x)
    xs = jnp.arange(24., dtype='float32').reshape(4, 2, 3)
    qzero = quantize(jnp.zeros((2, 3), 'float32'))
    qtotal, qys = jx.lax.scan(accum, qzero, xs, reverse=reverse)
    return str(jx.typeof(qtotal)), str(jx.typeof(qys)), _arrays(qtotal), _arrays(qys)
  (jt, jy, jtot, jys), (st, sy, stot, sys_) = both(run)
  assert (st, sy) == (jt, jy) == ("q8[2,3]", "q8[4,2,3]")
  for a, b in zip((*jtot, *jys), (*stot, *sys_)):
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b)


def test_scan_over_quantized_xs():
  # QArray xs (with `length`, as JAX requires): each step sees one q8[2,3] slice
  def run(jx, jnp, quantize, dequantize):
    qxs = quantize(jnp.arange(24., dtype='float32').reshape(4, 2, 3))
    def body(total, qx):
      assert str(jx.typeof(qx)) == "q8[2,3]"
      return total + jnp.sum(dequantize(qx)), qx
    total, qys = jx.lax.scan(body, 0., qxs, length=4)
    return np.asarray(total), str(jx.typeof(qys)), _arrays(qys), _arrays(qxs)
  (jtot, jty, jys, jxs), (stot, sty, sys_, sxs) = both(run)
  np.testing.assert_allclose(stot, jtot, rtol=1e-6)
  assert sty == jty == "q8[4,2,3]"
  for a, b in zip((*jys, *jxs), (*sys_, *sxs)):
    np.testing.assert_array_equal(a, b)


def test_scan_quantized_xs_needs_length():
  def run(jx, jnp, quantize, dequantize):
    qxs = quantize(jnp.ones((4, 2, 3), 'float32'))
    with pytest.raises(ValueError) as e:
      jx.lax.scan(lambda c, q: (c, q), 0., qxs)
    return str(e.value)
  j, s = both(run)
  assert s == j == "must provide `length` to `scan`"


def test_scan_quantized_under_jit():
  # JAX 0.10.2's jit of this scan fails (AttributeError: 'QArrayTy' object has no attribute
  # 'mat', its scan typecheck); stagecraft runs it as a scan of the arrays, and its results
  # equal JAX's eager scan (docs/differences.md).
  def run(jx, jnp, quantize, dequantize, jit):
    def accum(qtotal, x):
      return quantize(dequantize(qtotal) + x), quantize(2 * x)
    xs = jnp.arange(24., dtype='float32').reshape(4, 2, 3)
    qzero = quantize(jnp.zeros((2, 3), 'float32'))
    scan = lambda q, x: jx.lax.scan(accum, q, x)
    if jit:
      scan = jx.jit(scan)
    qtotal, qys = scan(qzero, xs)
    return str(jx.typeof(qtotal)), str(jx.typeof(qys)), _arrays(qtotal), _arrays(qys)
  with pytest.raises(AttributeError, match="'QArrayTy' object has no attribute 'mat'"):
    run(*defs("jax"), jit=True)
  j = run(*defs("jax"), jit=False)
  s = run(*defs("sc"), jit=True)
  assert s[:2] == j[:2] == ("q8[2,3]", "q8[4,2,3]")
  for a, b in zip((*j[2], *j[3]), (*s[2], *s[3])):
    np.testing.assert_array_equal(a, b)
