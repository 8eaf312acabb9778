"""Golden StableHLO text for small functions (update deliberately when the lowering changes),
and checks that the emitted text is what XLA compiles."""
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.interpreters import lowering


def lower(f, *args):
  # NB: the golden texts leave out the locations (tests/test_hlo_text_parity.py checks them).
  closed = sc.make_jaxpr(f)(*args)
  return lowering.strip_locations(lowering.lower_jaxpr_to_module("f", closed.jaxpr))


GOLDEN_SIN_MUL = """\
module @f attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<3xf32>, %arg1: tensor<3xf32>) -> (tensor<3xf32>) {
    %0 = stablehlo.sine %arg0 : tensor<3xf32>
    %1 = stablehlo.multiply %0, %arg1 : tensor<3xf32>
    %2 = stablehlo.constant dense<0x3F800000> : tensor<f32>
    %3 = stablehlo.broadcast_in_dim %2, dims = [] : (tensor<f32>) -> tensor<3xf32>
    %4 = stablehlo.add %1, %3 : tensor<3xf32>
    return %4 : tensor<3xf32>
  }
}
"""


def test_golden_elementwise():
  x = np.ones(3, np.float32)
  assert lower(lambda x, y: jnp.sin(x) * y + 1.0, x, x) == GOLDEN_SIN_MUL


def test_golden_compare_select():
  x = np.ones(3, np.float32)
  text = lower(lambda x: jnp.where(x > 0, x, -x), x)
  assert "stablehlo.compare GT, %arg0, %" in text and ", FLOAT : (tensor<3xf32>" in text
  assert "stablehlo.select" in text and "stablehlo.negate %arg0 : tensor<3xf32>" in text


def test_constants_are_arguments_not_literals():
  big = np.arange(1000, dtype=np.float32)
  text = lower(lambda x: x + big, big)
  assert "dense<" not in text            # the 1000-element constant is an argument
  assert text.count("tensor<1000xf32>") >= 3


def test_literal_encodings_round_trip():
  # hex bit patterns keep floats exact, including -0.0, inf, NaN and subnormals.
  vals = [0.1, -0.0, np.inf, -np.inf, 1e-45, 3.4e38]
  for v in vals:
    # NB: no arithmetic on the constant: XLA's CPU backend flushes subnormal results to zero.
    out = np.asarray(sc.jit(lambda v=v: np.float32(v))())
    np.testing.assert_array_equal(out, np.float32(v))
    assert np.signbit(out) == np.signbit(np.float32(v))
  nan = np.asarray(sc.jit(lambda x: x + np.float32(np.nan))(np.float32(0)))
  assert np.isnan(nan)


def test_module_name_is_sanitized():
  text = lowering.lower_jaxpr_to_module("jit_<lambda>", sc.make_jaxpr(lambda x: x)(1.0).jaxpr)
  assert text.startswith("module @jit__lambda ")


def _named_(x):
  return x


class _NoName:
  def __call__(self, x):
    return x


@pytest.mark.parametrize("fn", [lambda x: x, _named_, _NoName()],
                         ids=["lambda", "trailing_underscore", "unnamed"])
def test_module_name_as_jax(fn):
  """JAX strips trailing underscores of the sanitized name (`jit__lambda`, `jit__named`)."""
  import jax
  ours = sc.jit(fn).lower(1.0).as_text().split(" attributes")[0]
  assert ours == jax.jit(fn).lower(1.0).as_text().split(" attributes")[0]
