"""Details found by running JAX 0.10.2's own `random_test.py` / `random_lax_test.py` on
stagecraft through a scratch harness. JAX is the oracle: each test runs the same code on
real JAX and on stagecraft and compares values, dtypes, jaxprs and messages."""
import jax
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp


def _key_cases(lib, np_):
  keys = lib.random.split(lib.random.key(789543))
  k42 = lib.random.key(42)
  return {
      "zeros": lambda: np_.zeros((3,), keys.dtype),
      "ones": lambda: np_.ones((2, 2), dtype=keys.dtype),
      "empty": lambda: np_.empty((2,), keys.dtype),
      "full_int": lambda: np_.full((3,), 100, keys.dtype),
      "full_float": lambda: np_.full((3,), 1.5, keys.dtype),
      "full_key_fill": lambda: np_.full((3,), k42, dtype=keys.dtype),
      "full_keys_fill": lambda: np_.full((3, 2), keys, dtype=keys.dtype),
      "full_key_no_dtype": lambda: np_.full((3,), keys[0]),
  }


@pytest.mark.parametrize("case", list(_key_cases(jax, jax.numpy)))
@pytest.mark.parametrize("jit", [False, True])
def test_filled_arrays_of_key_dtype_as_jax(case, jit):
  # jnp.zeros/ones/empty/full with a typed-key dtype give key arrays of filled key data
  want_f = _key_cases(jax, jax.numpy)[case]
  got_f = _key_cases(sc, snp)[case]
  want = (jax.jit(want_f) if jit else want_f)()
  got = (sc.jit(got_f) if jit else got_f)()
  assert isinstance(got, sc.random.PRNGKeyArray)
  assert str(got.dtype) == str(want.dtype) and got.shape == want.shape
  np.testing.assert_array_equal(np.asarray(sc.random.key_data(got)),
                                np.asarray(jax.random.key_data(want)))
  assert str(sc.make_jaxpr(got_f)()) == str(jax.make_jaxpr(want_f)())


FILLS = [(4294967295, np.uint32), (4294967296, np.uint32), (-1, np.uint32), (2**31, np.int32),
         (2**31, None), (300, np.int8), (2**40, np.float32), (2**63, np.uint32),
         (2**64, np.uint32), (-2**63 - 1, np.int32), (2**64, np.float32), (2**64, None)]


@pytest.mark.parametrize("fill,dtype", FILLS)
@pytest.mark.parametrize("shape", [(), (2,)])
def test_full_of_python_int_wraps_as_jax(fill, dtype, shape):
  # lax.full converts a Python int through NumPy and wraps it (no default-int range check):
  # random_test's gather fill uses full_like(u32 data, 2**32 - 1)
  def run(np_):
    try:
      return np.asarray(np_.full(shape, fill, dtype)), None
    except OverflowError as e:
      return None, str(e)
  (got, got_err), (want, want_err) = run(snp), run(jax.numpy)
  assert got_err == want_err
  if want is not None:
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
  like = np.zeros(shape, np.uint32)
  np.testing.assert_array_equal(np.asarray(snp.full_like(like, 2**32 - 1)),
                                np.asarray(jax.numpy.full_like(like, 2**32 - 1)))


def test_gather_fill_of_keys_as_jax():
  def run(lib):
    keys = lib.random.split(lib.random.key(0), 4)
    out = lib.jit(lambda x: x.at[100].get(mode="fill"))(keys)
    return np.asarray(lib.random.key_data(out))
  np.testing.assert_array_equal(run(sc), run(jax))


@pytest.mark.parametrize("operand", [np.int32(0), 1.5, 3, True, np.zeros(3, np.float32),
                                     np.zeros(2, np.uint32)])
@pytest.mark.parametrize("jit", [False, True])
def test_convert_element_type_to_key_dtype_raises_as_jax(operand, jit):
  def message(lib):
    dt = lib.random.key(0).dtype
    f = lambda x: lib.lax.convert_element_type(x, dt)
    with pytest.raises(ValueError) as e:
      (lib.jit(f) if jit and not isinstance(operand, (int, float)) else f)(operand)
    return str(e.value)
  assert message(sc) == message(jax)


@pytest.mark.parametrize("mode", ["raise", "warn"])
@pytest.mark.parametrize("method", ["cholesky", "svd", "eigh"])
def test_multivariate_normal_under_rank_promotion_as_jax(mode, method):
  # the (n,) mean broadcasts against (*shape, n) samples inside multivariate_normal
  import warnings

  def run(lib):
    with lib.numpy_rank_promotion(mode), warnings.catch_warnings():
      warnings.simplefilter("error")
      out = lib.random.multivariate_normal(lib.random.key(3), np.zeros(3, np.float32),
                                           np.eye(3, dtype=np.float32), shape=(4,),
                                           method=method)
    return np.asarray(out)
  np.testing.assert_allclose(run(sc), run(jax), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ctor", ["key", "PRNGKey"])
@pytest.mark.parametrize("jit", [False, True])
def test_random_seed_offset_as_jax(ctor, jit):
  def run(lib):
    make = getattr(lib.random, ctor)
    make = lib.jit(make) if jit else make
    lib.config.update("jax_random_seed_offset", 3)
    try:
      k = make(17)
    finally:
      lib.config.update("jax_random_seed_offset", 0)
    return np.asarray(lib.random.key_data(k)), np.asarray(lib.random.key_data(make(17)))
  (g_off, g), (w_off, w) = run(sc), run(jax)
  np.testing.assert_array_equal(g_off, w_off)
  np.testing.assert_array_equal(g, w)
  assert not np.array_equal(g_off, g)


@pytest.mark.parametrize("mode", ["allow", "warn", "error"])
def test_legacy_prng_key_modes_as_jax(mode):
  import warnings

  def run(lib):
    raw = np.zeros(2, np.uint32)
    with lib.legacy_prng_key(mode), warnings.catch_warnings(record=True) as w:
      warnings.simplefilter("always")
      try:
        out = np.asarray(lib.random.uniform(raw))
      except ValueError as e:
        out = str(e)
    return out, [str(x.message) for x in w if x.category is UserWarning]
  got, want = run(sc), run(jax)
  assert got[1] == want[1]
  if isinstance(want[0], str):
    assert got[0] == want[0]
  else:
    np.testing.assert_array_equal(got[0], want[0])


def test_legacy_prng_key_error_after_key_data_check_as_jax():
  for lib in (sc, jax):
    with lib.legacy_prng_key("error"), pytest.raises(TypeError,
                                                     match="JAX encountered invalid PRNG key data"):
      lib.random.uniform(np.zeros(1, np.float32))


def _mesh_sharding(lib):
  devices = lib.devices()
  mesh = lib.sharding.Mesh(np.array(devices), ("x",))
  return lib.sharding.NamedSharding(mesh, lib.sharding.PartitionSpec("x")), len(devices)


def test_make_array_from_callback_of_keys_as_jax():
  def run(lib):
    s, n = _mesh_sharding(lib)
    cb = lambda index: lib.vmap(lib.random.key)(lib.numpy.arange(n)[index[0]])
    out = lib.make_array_from_callback((n,), s, cb)
    assert isinstance(out, (sc.random.PRNGKeyArray, jax.Array))
    return str(out.dtype), out.shape, np.asarray(lib.random.key_data(out))
  got, want = run(sc), run(jax)
  assert got[:2] == want[:2]
  np.testing.assert_array_equal(got[2], want[2])


def test_make_array_from_single_device_arrays_of_keys_as_jax():
  def run(lib):
    s, n = _mesh_sharding(lib)
    keys = lib.random.split(lib.random.key(0), n)
    arrays = [lib.device_put(keys[i:i + 1], d) for i, d in enumerate(s.mesh.devices.flat)]
    out = lib.make_array_from_single_device_arrays((n,), s, arrays)
    return str(out.dtype), out.shape, np.asarray(lib.random.key_data(out))
  got, want = run(sc), run(jax)
  assert got[:2] == want[:2]
  np.testing.assert_array_equal(got[2], want[2])


def test_custom_jvp_key_tangent_is_float0_as_jax():
  def run(lib):
    seen = {}
    f = lib.custom_jvp(lambda x, key: x * lib.random.normal(key, ()))

    @f.defjvp
    def f_jvp(primals, tangents):
      x, key = primals
      seen["t"] = tangents[1]
      r = lib.random.normal(key, ())
      return x * r, tangents[0] * r
    g = lib.grad(f)(0.0, lib.random.key(0))
    return float(g), str(seen["t"].dtype), np.shape(seen["t"])
  assert run(sc) == run(jax)


@pytest.mark.parametrize("symbolic_zeros", [False, True])
def test_custom_vjp_key_cotangent_is_float0_as_jax(symbolic_zeros):
  def run(lib):
    seen = {}

    @lib.custom_vjp
    def f(_, state):
      return state

    def fwd(_, state):
      if symbolic_zeros:
        seen["primal"] = type(state[1]).__name__
        state = lib.tree.map(lambda x: x.value, state)
      return state, None

    def bwd(_, state_bar):
      seen["ct"] = (str(state_bar[1].dtype), type(state_bar[1]).__name__)
      return state_bar[0], state_bar
    f.defvjp(fwd, bwd, symbolic_zeros=symbolic_zeros)
    state = (8.0, lib.random.key(123))
    return float(lib.grad(lambda theta: f(theta, state)[0])(3.0)), seen
  got, want = run(sc), run(jax)
  assert got[0] == want[0]
  assert got[1]["ct"][0] == want[1]["ct"][0] == "[('float0', 'V')]"
  if symbolic_zeros:
    assert got[1]["ct"][1] == want[1]["ct"][1] == "SymbolicZero"
    assert got[1]["primal"] == want[1]["primal"] == "CustomVJPPrimal"


class _NotAnImpl:
  pass


@pytest.mark.parametrize("spec", [_NotAnImpl(), 3, type(None), "foo", "threefry2x32"])
@pytest.mark.parametrize("ctor", ["key", "PRNGKey", "wrap_key_data", "key_dtype"])
def test_prng_impl_spec_errors_as_jax(spec, ctor):
  def run(lib):
    f = {"key": lambda: lib.random.key(42, impl=spec),
         "PRNGKey": lambda: lib.random.PRNGKey(42, impl=spec),
         "wrap_key_data": lambda: lib.random.wrap_key_data(np.array([0, 42], np.uint32),
                                                            impl=spec),
         "key_dtype": lambda: lib.random.key_dtype(spec)}[ctor]
    try:
      out = f()
    except (TypeError, ValueError) as e:
      # NB: JAX lists the implementations registered so far (importing pallas adds two)
      return type(e).__name__, str(e).split('"threefry4x32"')[0]
    return "ok", str(getattr(out, "dtype", out))
  assert run(sc) == run(jax)


@pytest.mark.parametrize("mode", ["raise", "warn"])
@pytest.mark.parametrize("shape", [(), (4,), (4, 5)])
def test_weighted_choice_under_rank_promotion_as_jax(mode, shape):
  # choice with p= (and replace) compares the cumulative weights with every draw
  import warnings
  p = np.array([0.1, 0.2, 0.3, 0.15, 0.25], np.float32)

  def run(lib):
    with lib.numpy_rank_promotion(mode), warnings.catch_warnings():
      warnings.simplefilter("error")
      return np.asarray(lib.random.choice(lib.random.key(0), 5, shape, p=p))
  got, want = run(sc), run(jax)
  assert got.dtype == want.dtype and got.shape == want.shape
  np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["divide", "true_divide", "operator"])
def test_divide_rank_promotion_message_as_jax(op):
  # JAX's divide is its true_divide, and its messages name it so (random.t under 'raise')
  a, b = np.ones(3, np.float32), np.ones((2, 3), np.float32)

  def message(lib, np_):
    f = {"divide": np_.divide, "true_divide": np_.true_divide,
         "operator": lambda x, y: np_.asarray(x) / y}[op]
    with lib.numpy_rank_promotion("raise"), pytest.raises(ValueError) as e:
      f(a, b)
    return str(e.value)
  assert message(sc, snp) == message(jax, jax.numpy)


def test_one_hot_traced_num_classes_raises_as_jax():
  def message(lib):
    with pytest.raises(lib.errors.ConcretizationTypeError) as e:
      lib.jit(lib.nn.one_hot)(3, 5)
    return str(e.value).splitlines()[:2]
  got, want = message(sc), message(jax)
  assert got[0] == want[0]
  assert got[1].replace("stagecraft.", "jax.") == want[1]
