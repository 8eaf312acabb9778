"""`jax.dtypes.bfloat16` is ml_dtypes' scalar type (callable, an `isinstance` class) while
comparing and hashing as the NumPy dtype; the float8/float4 types ml_dtypes defines (flax's
fp8 ops use the fnuz ones) compute as in JAX. JAX is the oracle."""
from __future__ import annotations

import jax
import ml_dtypes
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import dtypes


def test_dtypes_bfloat16_is_the_scalar_type():
  b, jb = dtypes.bfloat16, jax.dtypes.bfloat16
  assert type(b(1.5)) is type(jb(1.5)) is ml_dtypes.bfloat16
  assert b(1.5) == jb(1.5) == 1.5
  assert isinstance(b(1), b) and isinstance(jb(1), jb)
  assert not isinstance(np.float32(1), b) and not isinstance(np.float32(1), jb)
  assert np.dtype(b) == np.dtype(jb) == np.dtype("bfloat16")
  assert b == np.dtype("bfloat16") and np.dtype("bfloat16") == b and b != np.float32
  assert {np.dtype("bfloat16"): 1}[b] == 1 and {b: 2}[np.dtype("bfloat16")] == 2
  assert (b.name, b.itemsize, b.type) == ("bfloat16", 2, ml_dtypes.bfloat16)
  assert repr(b) == repr(jb)
  assert jnp.issubdtype(b, jnp.floating) and dtypes.issubdtype(b, np.floating)
  x = sc.jit(lambda v: v * 2)(jnp.ones(2, b))
  assert x.dtype == b and np.asarray(x, np.float32).tolist() == [2., 2.]
  assert dtypes.result_type(b, 1.0) == b and dtypes.promote_types(b, np.float32) == np.float32


_FP8 = ["float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz", "float8_e4m3",
        "float8_e3m4", "float8_e8m0fnu"]


# NB: needs the float8 StableHLO element types in interpreters/lowering.py's _ELT.
@pytest.mark.parametrize("name", _FP8)
def test_more_float8_types_compute_as_jax(name):
  def run(lib):
    dt = getattr(lib.numpy, name)
    x = lib.numpy.ones(3, dt)
    y = lib.jit(lambda a: (a.astype(lib.numpy.float32) * 3).astype(dt))(x)
    d = lib.lax.dot(x, x, preferred_element_type=lib.numpy.float32)
    return ((x * 2).astype(lib.numpy.float32).tolist(), str(y.dtype),
            np.asarray(y.astype(lib.numpy.float32)).tolist(), float(d),
            str(lib.make_jaxpr(lambda a: a)(x)).split()[3])
  assert run(sc) == run(jax)


@pytest.mark.parametrize("name", _FP8 + ["float4_e2m1fn"])
def test_more_float8_types_promote_as_jax(name):
  dt = np.dtype(getattr(ml_dtypes, name))
  assert dtypes.result_type(dt, 1.0) == jax.numpy.result_type(dt, 1.0) == dt
  assert dtypes.is_float(dt)
  with pytest.raises(dtypes.TypePromotionError, match="no available implicit dtype"):
    dtypes.promote_types(dt, np.float32)
  with pytest.raises(jax.dtypes.TypePromotionError):
    jax.numpy.promote_types(dt, np.float32)
