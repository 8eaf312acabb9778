"""Details found by running JAX 0.10.2's own tests (`tests/lax_numpy_einsum_test.py`,
`lax_numpy_reducers_test.py`) on stagecraft through a scratch harness: einsum of bool
operands reduces repeated and summed-out labels with OR (JAX's einsum uses `bitwise_or` for
bools); a path contracting three operands at once raises JAX's NotImplementedError; a
weighted `cov` works under `jax_numpy_rank_promotion='raise'`. JAX is the oracle."""
import jax
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp

SPECS = ["aa->a", "aa", "a...a->a...", "aab,bc->ac", "aab,bcc->ac", "ba,b->",
         "fdf,cdd,ccd,afe->ae"]


def _operands(spec, rng):
  ins = spec.split("->")[0].replace("...", "").split(",")
  sizes = {c: 2 + i % 2 for i, c in enumerate(sorted(set("".join(ins))))}
  ops = [rng.random([sizes[c] for c in s]) > 0.5 for s in ins]
  if "..." in spec:
    ops = [np.stack([o, ~o], axis=1) if o.ndim == 2 else o for o in ops]
  return ops


@pytest.mark.parametrize("spec", SPECS)
def test_bool_einsum_as_jax(spec):
  ops = _operands(spec, np.random.default_rng(0))
  want = jax.numpy.einsum(spec, *ops)
  got = jnp.einsum(spec, *ops)
  assert got.dtype == want.dtype
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  assert (str(sc.make_jaxpr(lambda *a: jnp.einsum(spec, *a))(*ops))
          == str(jax.make_jaxpr(lambda *a: jax.numpy.einsum(spec, *a))(*ops)))


def test_three_operand_contraction_path_raises_as_jax():
  ops = [np.ones(s, np.float32) for s in [(2, 3), (2, 4), (2, 5)]]

  def message(np_):
    with pytest.raises(NotImplementedError) as e:
      np_.einsum("ij,ik,il->jkl", *ops, optimize=[(0, 1, 2)])
    return str(e.value)
  assert message(jnp) == message(jax.numpy)


@pytest.mark.parametrize("kind", ["fweights", "aweights", "both"])
def test_weighted_cov_under_rank_promotion_raise_as_jax(kind):
  # JAX's own testCov runs with jax_numpy_rank_promotion='raise': the weights are broadcast
  # to the data's rank before they multiply it.
  rng = np.random.default_rng(0)
  x = rng.standard_normal((5, 7)).astype(np.float32)
  fw = rng.integers(1, 4, 7)
  aw = rng.random(7).astype(np.float32)
  kw = {"fweights": {"fweights": fw}, "aweights": {"aweights": aw},
        "both": {"fweights": fw, "aweights": aw}}[kind]

  def run(lib, np_):
    with lib.numpy_rank_promotion("raise"):
      return np.asarray(np_.cov(x, **kw)), str(lib.make_jaxpr(lambda x: np_.cov(x, **kw))(x))
  (got, got_jaxpr), (want, want_jaxpr) = run(sc, jnp), run(jax, jax.numpy)
  np.testing.assert_allclose(got, want, rtol=1e-6)
  assert got_jaxpr == want_jaxpr


def test_lcm_wraps_as_jax_and_numpy():
  # the magnitudes are multiplied (no abs of the product): int8 lcm(127, 2) wraps to -2
  a = np.array([127, -127, 62, 0, 12, -100, 5], np.int8)
  b = np.array([2, 2, 4, 0, 18, 3, 0], np.int8)
  want = np.asarray(jax.numpy.lcm(a, b))
  np.testing.assert_array_equal(np.asarray(jnp.lcm(a, b)), want)
  np.testing.assert_array_equal(want, np.lcm(a, b))


@pytest.mark.parametrize("shape", [(0,), (1,), (3, 0), (2, 3)])
def test_ediff1d_of_empty_and_small_arrays_as_jax(shape):
  x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
  want = jax.numpy.ediff1d(x, to_begin=np.array([7]), to_end=np.array([8, 9]))
  got = jnp.ediff1d(x, to_begin=np.array([7]), to_end=np.array([8, 9]))
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  np.testing.assert_array_equal(np.asarray(jnp.ediff1d(x)), np.asarray(jax.numpy.ediff1d(x)))


def _operator_outcomes(lib, np_, traced):
  import operator
  out = []

  def probe(arr):
    for name in ["add", "sub", "mul", "eq", "ne", "lt"]:
      for t in [dict, list, tuple, set]:
        for swap in (False, True):
          other = t([(1, 2), (2, 3)])
          try:
            r = getattr(operator, name)(*((other, arr) if swap else (arr, other)))
            out.append((name, t.__name__, swap, "ok", repr(r)))
          except TypeError as e:
            msg = str(e).replace("jaxlib._jax.", "")
            out.append((name, t.__name__, swap, "TypeError",
                        msg.replace("DynamicJaxprTracer", "T").replace("ArrayImpl", "T")
                        .replace("'Array'", "'T'")))
    return arr
  arr = np_.array([(1, 2), (2, 3)])
  lib.jit(probe)(arr) if traced else probe(arr)
  return out


@pytest.mark.parametrize("traced", [False, True])
def test_operators_with_python_collections_as_jax(traced):
  # `arr == [..]` and `arr != {..}` raise (not Python's identity fallback), `arr * [..]`
  # raises JAX's message (not list repetition's)
  assert _operator_outcomes(sc, jnp, traced) == _operator_outcomes(jax, jax.numpy, traced)


_OOB = [((2,), -4), ((2,), 4), ((2, 3), np.index_exp[:, 4]), ((2, 3), np.index_exp[..., -4]),
        ((2, 3, 5), np.index_exp[3, :, 0]), ((2, 3, 5), np.index_exp[:5, :, 6]),
        ((2, 3, 5), np.index_exp[:, [1, 2], 6]), ((2, 3, 5), np.index_exp[np.arange(3), 6, None])]


def _index_outcomes(lib, np_, shape, idx):
  arr = np_.zeros(shape)
  out = []
  for how in (lambda: arr[idx], lambda: lib.jit(lambda x: x[idx])(arr),
              lambda: arr.at[idx].get(), lambda: arr.at[idx].get(mode="clip")):
    try:
      out.append(("ok", np.asarray(how()).shape))
    except IndexError as e:
      out.append(("IndexError", str(e)))
  return out


@pytest.mark.parametrize("shape,idx", _OOB)
@pytest.mark.parametrize("check", [True, False])
def test_check_static_indices_as_jax(shape, idx, check):
  # jax_check_static_indices: out-of-bounds static integers raise (mode None/promise_in_bounds)
  # instead of clamping
  def run(lib, np_):
    old = lib.config.jax_check_static_indices
    lib.config.update("jax_check_static_indices", check)
    try:
      return _index_outcomes(lib, np_, shape, idx)
    finally:
      lib.config.update("jax_check_static_indices", old)
  assert run(sc, jnp) == run(jax, jax.numpy)


@pytest.mark.parametrize("x_shape,m_shape", [((3,), (0,)), ((3, 4), (0,)), ((3, 4), (0, 4)),
                                             ((3, 4), (3, 0)), ((3, 4, 5), (3, 0))])
def test_empty_boolean_mask_as_jax(x_shape, m_shape):
  x = np.arange(int(np.prod(x_shape)), dtype=np.int32).reshape(x_shape)
  m = np.empty(m_shape, bool)
  want = np.asarray(jax.numpy.asarray(x)[jax.numpy.asarray(m)])
  assert want.shape == x[m].shape
  got = jnp.asarray(x)[jnp.asarray(m)]
  assert got.shape == want.shape and got.dtype == want.dtype
