"""JAX's small public helpers for primitive authors: `jax.interpreters.xla` (`apply_primitive`,
`canonicalize_dtype_handlers`, `Backend`), `jax.api_util.shaped_abstractify`, and
`jax.core`'s `eval_context`, `max_dim`, `min_dim` — the same code run on JAX and stagecraft."""
from __future__ import annotations

import functools
import types

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp
from stagecraft import api_util as sc_api_util
from stagecraft import core as sc_core
from stagecraft.extend import core as sc_ext_core
from stagecraft.interpreters import mlir as sc_mlir
from stagecraft.interpreters import xla as sc_xla


def _libs():
  from jax import api_util, core
  from jax.extend import core as ext_core
  from jax.interpreters import mlir, xla
  jx = types.SimpleNamespace(lib=jax, np=jjnp, xla=xla, mlir=mlir, core=core, ext=ext_core,
                             api_util=api_util)
  sx = types.SimpleNamespace(lib=sc, np=snp, xla=sc_xla, mlir=sc_mlir, core=sc_core,
                             ext=sc_ext_core, api_util=sc_api_util)
  return jx, sx


def _axpy_program(m):
  p = m.ext.Primitive("axpy")
  p.def_impl(functools.partial(m.xla.apply_primitive, p))
  p.def_abstract_eval(lambda a, x, y: y)
  m.mlir.register_lowering(p, m.mlir.lower_fun(lambda a, x, y: a * x + y,
                                               multiple_results=False))
  x = np.arange(4, dtype=np.float32)
  eager = p.bind(np.float32(2.0), x, x)
  jitted = m.lib.jit(lambda a, x, y: p.bind(a, x, y))(np.float32(3.0), x, x)
  return np.asarray(eager).tolist(), np.asarray(jitted).tolist()


def test_apply_primitive_is_a_primitives_eager_impl():
  jx, sx = _libs()
  assert _axpy_program(sx) == _axpy_program(jx) == ([0.0, 3.0, 6.0, 9.0],
                                                    [0.0, 4.0, 8.0, 12.0])


def test_backend_is_the_runtime_client_class():
  jx, sx = _libs()
  assert sx.xla.Backend is jx.xla.Backend
  assert isinstance(sc.devices()[0].client, sx.xla.Backend)


class Meters:
  """A user type registered as an array type: a float wrapped with its unit."""

  def __init__(self, v):
    self.v = v


def test_canonicalize_dtype_handlers_convert_a_registered_type():
  jx, sx = _libs()
  from jax._src import core as jax_src_core   # (JAX 0.10.2 deprecates jax.core's name)
  out = []
  for m, avals in ((jx, jax_src_core.pytype_aval_mappings), (sx, sc_core.pytype_aval_mappings)):
    avals[Meters] = lambda x, m=m: m.core.ShapedArray((), np.float32)
    m.xla.canonicalize_dtype_handlers[Meters] = lambda x: np.float32(x.v)
    try:
      out.append(float(m.lib.jit(lambda d: d * 2)(Meters(1.5))))
    finally:   # (JAX's handlers registry cannot forget a type)
      del avals[Meters]
  del sx.xla.canonicalize_dtype_handlers[Meters]
  assert out == [3.0, 3.0]


@pytest.mark.parametrize("x", [1.0, 3, True, np.ones((2, 3), np.int8), np.float32(2.0),
                               jax.ShapeDtypeStruct((5,), np.float32)], ids=repr)
def test_shaped_abstractify(x):
  jx, sx = _libs()
  if isinstance(x, jax.ShapeDtypeStruct):
    x_sc = sc.ShapeDtypeStruct(x.shape, x.dtype)
  else:
    x_sc = x
  assert str(sx.api_util.shaped_abstractify(x_sc)) == str(jx.api_util.shaped_abstractify(x))


def test_shaped_abstractify_errors():
  jx, sx = _libs()
  for bad in ("a", object()):
    with pytest.raises(TypeError) as want:
      jx.api_util.shaped_abstractify(bad)
    with pytest.raises(TypeError) as got:
      sx.api_util.shaped_abstractify(bad)
    assert str(got.value).split(" at 0x")[0] == str(want.value).split(" at 0x")[0]


def test_eval_context_and_dims():
  jx, sx = _libs()
  for m in (jx, sx):
    @m.lib.jit
    def f(x):
      with m.core.eval_context():
        c = m.np.arange(3) * 2   # computed now: a concrete array
      assert not isinstance(c, m.core.Tracer)
      return x + c
    assert np.asarray(f(np.ones(3, np.int32))).tolist() == [1, 3, 5]
    assert m.core.max_dim(3, 5) == 5 and m.core.min_dim(3, 5) == 3


def test_canonicalize_dtype_handlers_read_the_generic_handler():
  # (dynamax registers its types with `handlers[T] = handlers[np.ndarray]`)
  jx, sx = _libs()
  for m in (jx, sx):
    h = m.xla.canonicalize_dtype_handlers[np.ndarray]
    out = h(np.arange(3, dtype=np.float64))
    assert np.asarray(out).dtype == np.float32 and np.asarray(out).tolist() == [0, 1, 2]
