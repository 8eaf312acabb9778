"""Details found by running JAX 0.10.2's own `tests/lax_numpy_test.py` on stagecraft through a
scratch harness: `jnp.array` of a list promotes its leaves as JAX does (Python scalars weak),
masked arrays are refused as JAX's inputs, the scalar types convert as `asarray` (no copy
staged), index-like axes (0-d integer arrays) are accepted by expand_dims/squeeze. JAX is the
oracle."""
import jax
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp


def _outcome(fn):
  try:
    r = fn()
  except Exception as e:   # noqa: BLE001 - the outcome compared is the exception itself
    return type(e).__name__, str(e)
  return str(r.dtype), bool(r.weak_type), np.asarray(r).tolist()


LISTS = [
    [0, np.float16(1)], [np.int8(1), 2], [1.0, np.float16(2)], [np.uint8(1), np.int8(2)],
    [True, np.float16(1)], [[1, 2], [np.float16(3), 4]], (np.int16(1), 2.5),
    [np.float16(1), np.array(2, np.float32)], [1, 2j], [], [[], []], [1.5, 2], [True, 2],
    [np.array([1, 2], np.int8), [3, 4]],
    [0, -2**63 - 1], [1, 2**40], [np.int32(1), 2**40], [np.uint32(3), -1],
]


@pytest.mark.parametrize("i", range(len(LISTS)))
def test_array_of_list_promotes_leaves_as_jax(i):
  v = LISTS[i]
  assert _outcome(lambda: jnp.array(v)) == _outcome(lambda: jax.numpy.array(v))
  assert _outcome(lambda: jnp.asarray(v)) == _outcome(lambda: jax.numpy.asarray(v))


@pytest.mark.parametrize("v", [[0, np.float16(1)], [np.int8(1), np.int16(1)]])
def test_array_of_list_under_strict_promotion_as_jax(v):
  with jax.numpy_dtype_promotion("strict"):
    want = _outcome(lambda: jax.numpy.array(v))
  with sc.numpy_dtype_promotion("strict"):
    got = _outcome(lambda: jnp.array(v))
  if want[0] == "TypePromotionError":   # JAX names the dtypes in set order: compare sorted
    norm = lambda o: (o[0], sorted(t.strip() for t in
                                   o[1].replace("(", ",").replace(")", ",").split(",")))
    got, want = norm(got), norm(want)
  assert got == want


def test_masked_arrays_refused_as_jax():
  m = np.ma.array([1, 2], mask=[True, False])
  # jnp.array strips the mask, as NumPy's np.array
  assert _outcome(lambda: jnp.array(m)) == _outcome(lambda: jax.numpy.array(m))
  for lib, np_ in ((sc, jnp), (jax, jax.numpy)):
    for fn in (lambda: lib.jit(np_.asarray)(m), lambda: lib.jit(lambda x: x)(m),
               lambda: np_.sin(m), lambda: lib.device_put(m)):
      with pytest.raises(ValueError, match="numpy masked arrays are not supported as direct "
                         "inputs to JAX functions. Use arr.filled()"):
        fn()


@pytest.mark.parametrize("name", ["float32", "int32", "bool_", "float16", "uint8"])
@pytest.mark.parametrize("arg", [0, 1.0, np.float32(2), np.int32(3)])
def test_scalar_type_call_jaxpr_as_jax(name, arg):
  # JAX's scalar types are asarray with a dtype: no copy is staged
  got = str(sc.make_jaxpr(getattr(jnp, name))(arg))
  want = str(jax.make_jaxpr(getattr(jax.numpy, name))(arg))
  assert got == want
  assert _outcome(lambda: getattr(jnp, name)(arg)) == _outcome(
      lambda: getattr(jax.numpy, name)(arg))


@pytest.mark.parametrize("axis", [np.array(0), np.array(-1), (0,), [np.array(0)], np.int64(1),
                                  (np.int32(0), 2)])
def test_expand_dims_and_squeeze_take_index_like_axes_as_jax(axis):
  x = np.ones((3, 1), np.float32)
  for f in ("expand_dims", "squeeze"):
    a = x if f == "expand_dims" else np.ones((1, 1, 1), np.float32)
    got = getattr(jnp, f)(a, axis)
    want = getattr(jax.numpy, f)(a, axis)
    assert got.shape == want.shape


@pytest.mark.parametrize("dtype", [np.float32, np.float16, "bfloat16"])
def test_ldexp_values_as_jax(dtype):
  # JAX splits x1's exponent off first: zero times a huge power of two is zero, not nan,
  # and results near the largest float are exact
  dt = jax.numpy.dtype(dtype)
  with np.errstate(over="ignore"):
    x1 = np.array([0., -0., 1., np.inf, -np.inf, np.nan, 3.5, 1e-30, 1e30, 0.75, -1.5],
                  np.float32).astype(dt)
  for e in [0, 1, 14, 15, 16, 127, 128, 200, -200, 300, -300, -149, -150, 2**31 - 1, -2**31]:
    got = jnp.ldexp(x1, np.int32(e))
    want = jax.numpy.ldexp(x1, np.int32(e))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))


def test_ldexp_is_jitted_as_jax():
  jaxpr = sc.make_jaxpr(jnp.ldexp)(np.float32(1), np.int32(2))
  assert [e.primitive.name for e in jaxpr.eqns] == ["jit"]
  assert jaxpr.eqns[0].params["name"] == "ldexp"


@pytest.mark.parametrize("which", ["choose", "c_", "r_", "mgrid_start"])
def test_concretization_messages_as_jax(which):
  def run(lib, np_):
    f = {"choose": lambda a: np_.choose(a, [np.ones(3), np.ones(3)], mode="raise"),
         "c_": lambda a: np_.c_[a:3], "r_": lambda a: np_.r_[a:3],
         "mgrid_start": lambda a: np_.ogrid[a:3]}[which]
    arg = np.zeros(3, np.int32) if which == "choose" else 1
    with pytest.raises(lib.errors.ConcretizationTypeError) as e:
      lib.jit(f)(arg)
    return str(e.value)
  assert run(sc, jnp) == run(jax, jax.numpy)


@pytest.mark.parametrize("grid", ["mgrid[1:6:8j, 2:4]", "mgrid[:3, 0:1.5:0.5]",
                                  "ogrid[1:6:8j, 2:4]", "mgrid[1:4:2, 1:2:3j]"])
def test_mixed_int_float_grids_under_strict_promotion_as_jax(grid):
  def run(lib, np_):
    with lib.numpy_dtype_promotion("strict"):
      r = eval(f"np_.{grid}")
    return [(str(x.dtype), x.shape, np.asarray(x).tolist()) for x in
            (r if isinstance(r, list) else [r])]
  assert run(sc, jnp) == run(jax, jax.numpy)


LIST_FUNCS = ["add", "multiply", "dot", "matmul", "vdot", "inner", "outer", "tensordot",
              "negative", "arctan2", "logaddexp", "maximum", "power", "subtract",
              "floor_divide", "equal", "exp", "sqrt", "matvec", "vecmat", "isnan", "abs",
              "sign", "conj", "real", "imag", "isfinite", "float_power", "nextafter"]
UNARY = {"negative", "exp", "sqrt", "isnan", "abs", "sign", "conj", "real", "imag",
         "isfinite"}


@pytest.mark.parametrize("name", LIST_FUNCS)
def test_list_operands_rejected_as_jax(name):
  lst, arr = [1., 2.], np.array([3., 4.], np.float32)
  cases = [[lst], [(1., 2.)]] if name in UNARY else [[lst, arr], [arr, lst], [(1, 2), arr]]

  def run(lib, np_):
    out = []
    for args in cases:
      for f in (getattr(np_, name), lib.jit(getattr(np_, name))):
        with pytest.raises(TypeError) as e:
          f(*args)
        out.append(str(e.value))
    return out
  assert run(sc, jnp) == run(jax, jax.numpy)


@pytest.mark.parametrize("shapes", [((3,), (2, 3)), ((2, 1), (3,)), ((), (4,)), ((4,), ())])
def test_ldexp_broadcasts_as_jax(shapes):
  s1, s2 = shapes
  x1 = np.linspace(-3, 3, max(1, int(np.prod(s1)))).astype(np.float32).reshape(s1)
  x2 = (np.arange(max(1, int(np.prod(s2)))) * 37 - 60).astype(np.int32).reshape(s2)
  with sc.numpy_rank_promotion("allow"):
    got = jnp.ldexp(x1, x2)
  with jax.numpy_rank_promotion("allow"):
    want = jax.numpy.ldexp(x1, x2)
  assert got.shape == want.shape
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("axis", [-3, 0, 2, 3])
@pytest.mark.parametrize("start", [-4, -1, 0, 2, 4])
def test_rollaxis_negative_start_as_jax(axis, start):
  x = np.zeros((1, 2, 3, 4), np.float32)
  assert jnp.rollaxis(x, axis, start).shape == jax.numpy.rollaxis(x, axis, start).shape


@pytest.mark.parametrize("dt", [[("a", "<i4"), ("b", "<i4")], np.dtype([("a", "<i4")]), "V4",
                                "U3", object])
@pytest.mark.parametrize("fn", ["array", "zeros", "asarray", "astype"])
def test_record_and_void_dtypes_rejected_as_jax(dt, fn):
  def run(np_):
    call = {"array": lambda: np_.array(3, dt), "zeros": lambda: np_.zeros(3, dt),
            "asarray": lambda: np_.asarray([1], dt), "astype": lambda: np_.ones(2).astype(dt)}
    with pytest.raises(TypeError) as e:
      call[fn]()
    return str(e.value)
  assert run(jnp) == run(jax.numpy)


@pytest.mark.parametrize("case", ["int", "list", "array_split", "traced_array"])
def test_split_traced_indices_message_as_jax(case):
  def run(lib, np_):
    f = {"int": lambda i: np_.split(np_.zeros((12, 2)), i),
         "list": lambda i: np_.split(np_.zeros((12, 2)), [2, i]),
         "array_split": lambda i: np_.array_split(np_.zeros((12, 2)), i),
         "traced_array": lambda i: np_.split(np_.zeros((12, 2)),
                                             np_.array([2, 3]) + i.astype(int))}[case]
    with pytest.raises(lib.errors.ConcretizationTypeError) as e:
      lib.jit(f)(2.)
    return str(e.value)
  assert run(sc, jnp) == run(jax, jax.numpy)


@pytest.mark.parametrize("dt", ["int4", "uint4"])
def test_int4_creation_astype_and_view_as_jax(dt):
  x = np.arange(-4, 4, dtype=np.int8)
  u = np.arange(8, dtype=np.uint8)
  cases = [lambda np_: np_.asarray(x).astype(getattr(np_, dt)),
           lambda np_: np_.asarray(u).view(getattr(np_, dt)),
           lambda np_: np_.asarray(u).view(getattr(np_, dt)).view(np.uint8),
           lambda np_: np_.zeros(3, getattr(np_, dt)),
           lambda np_: np_.asarray(x).astype(getattr(np_, dt)).astype(np.float32)]
  for case in cases:
    got, want = case(jnp), case(jax.numpy)
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    assert np.asarray(got).tolist() == np.asarray(want).tolist()


def test_split_points_known_under_jvp_as_jax():
  # a JVP tracer outside jit knows its value: the split points are concrete
  for lib, np_ in ((sc, jnp), (jax, jax.numpy)):
    out, _ = lib.jvp(lambda i: np_.split(np_.zeros((12, 2)), i), (2.,), (1.,))
    assert [o.shape for o in out] == [(6, 2), (6, 2)]
    out, _ = lib.jvp(lambda i: np_.split(np_.zeros((12, 2)), (1, i.astype(np.int32))),
                     (2.,), (1.,))
    assert [o.shape for o in out] == [(1, 2), (1, 2), (10, 2)]


def test_tobytes_of_tracer_message_as_jax():
  v = np.arange(12, dtype=np.int32).reshape(3, 4)

  def run(lib):
    with pytest.raises(lib.errors.ConcretizationTypeError) as e:
      lib.jit(lambda x: x.tobytes())(v)
    return str(e.value)
  assert run(sc) == run(jax)


@pytest.mark.parametrize("axes", [2, ([0], [0, 1]), ("bad", "axes"), "badaxes", (0, [0]),
                                  ((0,), 0), (1, 0, 2), {0: 1}])
def test_tensordot_axes_errors_as_jax(axes):
  a = np.ones((3, 2, 2), np.float32)
  b = np.ones((2,), np.float32)

  def run(np_):
    with pytest.raises(TypeError) as e:
      np_.tensordot(a, b, axes=axes)
    return str(e.value)
  assert run(jnp) == run(jax.numpy)


@pytest.mark.parametrize("k", [2**33, -2**33, 3, -2])
@pytest.mark.parametrize("fn", ["tri", "tril", "triu", "eye"])
def test_diagonal_offset_beyond_int32_as_jax(k, fn):
  def run(np_):
    call = {"tri": lambda: np_.tri(4, M=3, k=k), "tril": lambda: np_.tril(np_.ones((3, 3)), k),
            "triu": lambda: np_.triu(np_.ones((3, 3)), k), "eye": lambda: np_.eye(3, k=k)}[fn]
    try:
      return np.asarray(call()).tolist()
    except OverflowError as e:
      return str(e)
  assert run(jnp) == run(jax.numpy)


@pytest.mark.parametrize("shape", [(0, 4), (0,), (2, 0), (3,)])
def test_view_and_byteswap_of_empty_arrays_as_jax(shape):
  x = np.zeros(shape, np.int32)
  for f in (lambda np_: np_.asarray(x).byteswap(), lambda np_: np_.asarray(x).view(np.uint8),
            lambda np_: np_.asarray(x).view(np.int16)):
    got, want = f(jnp), f(jax.numpy)
    assert (got.shape, got.dtype) == (want.shape, want.dtype)
