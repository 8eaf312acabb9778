"""`lax.tile` / `tile_p` (JAX 0.10's primitive) and what is built on it (`jnp.tile`,
`jnp.resize`, `put` with repeated values): values against NumPy for drawn shapes, dtypes and
repeats; derivatives against finite differences; vmap; printed jaxprs, lowering, errors and
symbolic export against JAX 0.10.2 in the same test."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(__file__))

import jax  # noqa: E402
import jax.numpy as jjnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

from _util import staged_call  # noqa: E402
import stagecraft as sc  # noqa: E402
import stagecraft.numpy as jnp  # noqa: E402
from stagecraft import export, lax  # noqa: E402
from stagecraft.experimental import jet  # noqa: E402
from stagecraft.test_util import check_grads  # noqa: E402

_RNG = np.random.default_rng(11)
F = _RNG.standard_normal((3, 4)).astype(np.float32)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_lax_tile_matches_numpy(data):
  shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3))
  dtype = data.draw(st.sampled_from([np.float32, np.int32, np.bool_, np.float16]))
  reps = tuple(data.draw(st.lists(st.integers(0, 3), min_size=len(shape),
                                  max_size=len(shape))))
  x = (_RNG.standard_normal(shape) * 3).astype(dtype)
  want = np.tile(x, reps)
  for got in (lax.tile(x, reps), staged_call(lambda x: lax.tile(x, reps), x)):
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got), want)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_jnp_tile_matches_numpy(data):
  """Reps shorter or longer than the rank, an int, zeros, Python scalars."""
  shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=3))
  reps = data.draw(st.one_of(st.integers(0, 3),
                             st.lists(st.integers(0, 3), min_size=0, max_size=4).map(tuple)))
  x = _RNG.standard_normal(shape).astype(np.float32)
  np.testing.assert_array_equal(np.asarray(jnp.tile(x, reps)), np.tile(x, reps))
  np.testing.assert_array_equal(np.asarray(sc.jit(lambda x: jnp.tile(x, reps))(x)),
                                np.tile(x, reps))


def test_weak_type_is_kept_as_jax():
  for ours, theirs in ((jnp.tile(2.0, 3), jjnp.tile(2.0, 3)),
                       (jnp.resize(4, (3, 2)), jjnp.resize(4, (3, 2)))):
    assert repr(ours) == repr(theirs)


@pytest.mark.parametrize("reps", [(2, 3), (1, 1), (3, 1)])
def test_gradients_match_finite_differences(reps):
  with sc.enable_x64():
    check_grads(lambda x: jnp.sin(lax.tile(x, reps)) * jnp.arange(4 * reps[1]),
                (F.astype(np.float64),), order=2, modes=("fwd", "rev"))


def test_vmap_matches_jax_in_values_and_printing():
  for in_axes in (0, 1):
    fs = sc.vmap(lambda v: jnp.tile(v, (2, 2)), in_axes)
    fj = jax.vmap(lambda v: jjnp.tile(v, (2, 2)), in_axes)
    np.testing.assert_array_equal(np.asarray(fs(F)), np.asarray(fj(F)))
    assert str(sc.make_jaxpr(fs)(F)) == str(jax.make_jaxpr(fj)(F))


@pytest.mark.parametrize("name", ["grad", "jvp", "linear_transpose"])
def test_transformed_programs_print_as_jax(name):
  def prog(m, n):
    f = lambda x: (n.tile(x, (2, 3)) ** 2).sum()  # noqa: E731
    if name == "grad":
      return m.grad(f)
    if name == "jvp":
      return lambda x: m.jvp(lambda x: n.tile(x, (1, 2)), (x,), (x,))
    return lambda x: m.linear_transpose(lambda x: n.tile(x, (2, 1)), x)(
        n.ones((6, 4), np.float32))
  assert str(sc.make_jaxpr(prog(sc, jnp))(F)) == str(jax.make_jaxpr(prog(jax, jjnp))(F))


def test_lowering_matches_jax_ops():
  """A reshape to [1, s0, 1, s1], a broadcast to [r0, s0, r1, s1], a reshape: JAX's ops."""
  ops = lambda text: re.findall(r"= \"?(stablehlo\.\w+)", text)  # noqa: E731
  ours = sc.jit(lambda x: lax.tile(x, (2, 3))).lower(F).as_text()
  theirs = jax.jit(lambda x: jax.lax.tile(x, (2, 3))).lower(F).as_text()
  assert ops(ours) == ops(theirs) == ["stablehlo.reshape", "stablehlo.broadcast_in_dim",
                                      "stablehlo.reshape"]
  assert "tensor<1x3x1x4xf32>" in ours and "tensor<2x3x3x4xf32>" in ours


def test_jet_of_tile_is_linear():
  primal, series = jet.jet(lambda x: lax.tile(x, (2, 1)), (F,), ([F, 2 * F],))
  np.testing.assert_array_equal(np.asarray(primal), np.tile(F, (2, 1)))
  np.testing.assert_array_equal(np.asarray(series[1]), np.tile(2 * F, (2, 1)))


def test_errors_match_jax():
  for bad in ((2,), (1, 2, 3)):
    with pytest.raises(TypeError) as ours:
      lax.tile(F, bad)
    with pytest.raises(TypeError) as theirs:
      jax.lax.tile(F, bad)
    assert str(ours.value) == str(theirs.value)
  with pytest.raises(TypeError) as ours:
    jnp.tile([1, 2], 2)
  with pytest.raises(TypeError) as theirs:
    jjnp.tile([1, 2], 2)
  assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("name", ["rows", "columns", "symbolic_reps"])
def test_symbolic_export_matches_jax(name):
  fun = {"rows": lambda m: lambda x: m.tile(x, (2, 1)),
         "columns": lambda m: lambda x: m.tile(x, 3),
         "symbolic_reps": lambda m: lambda x: m.tile(x, (x.shape[0], 1))}[name]
  spec = export.symbolic_args_specs(F, "b, 4")
  jspec = jax.export.symbolic_args_specs(F, "b, 4")
  ours = export.export(sc.jit(fun(jnp)))(spec)
  theirs = jax.export.export(jax.jit(fun(jjnp)))(jspec)
  assert str(ours.out_avals) == str(theirs.out_avals)
  assert str(sc.make_jaxpr(fun(jnp))(spec)) == str(jax.make_jaxpr(fun(jjnp))(jspec))
  x = _RNG.standard_normal((5, 4)).astype(np.float32)
  np.testing.assert_array_equal(np.asarray(ours.call(x)), np.asarray(theirs.call(x)))
  g = lambda m, n: m.grad(lambda x: (fun(n)(x) ** 2).sum())  # noqa: E731
  np.testing.assert_allclose(np.asarray(export.export(sc.jit(g(sc, jnp)))(spec).call(x)),
                             np.asarray(jax.grad(lambda x: (fun(jjnp)(x) ** 2).sum())(x)),
                             rtol=1e-6)
