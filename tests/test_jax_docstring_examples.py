"""The examples of JAX 0.10.2's own docstrings (jnp, lax, scipy, sharding, export, api) that
printed differently under stagecraft, each run here against JAX in the same process: the
printed values (bits, dtypes, weak types) and the exceptions must be JAX's."""
import io

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from jax.scipy.spatial.transform import Rotation as JRotation

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.scipy.spatial.transform import Rotation
from _util import error_of as _error


def _same(got, want):
  assert repr(got) == repr(want)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def _bits(x):
  return np.asarray(x).tobytes()


# ---------------------------------------------------------------------------
# jax.numpy


def test_gcd_lcm_keep_weak_types_and_values():
  for f, jf in ((jnp.gcd, jjnp.gcd), (jnp.lcm, jjnp.lcm)):
    _same(f(12, 18), jf(12, 18))
    a, b = np.array([12, 0, -7, 0, 36]), np.array([18, 5, 21, 0, -8])
    _same(f(a, b), jf(a, b))
    _same(f(np.int8(-12), 18), jf(np.int8(-12), 18))
    _same(sc.vmap(f)(a, b), jax.vmap(jf)(a, b))
    _same(sc.jit(f)(a, 4), jax.jit(jf)(a, 4))


@pytest.mark.parametrize("x64", [False, True])
def test_promote_types_treats_python_types_as_weak(x64):
  pairs = [("uint8", int), ("float16", float), (int, float), (int, int), (bool, int),
           (complex, "float16"), (float, "int8"), ("bfloat16", complex), (bool, bool),
           ("int64", "int8"), ("float64", "float32"), ("uint64", "int64"),
           ("uint32", "int32"), ("bfloat16", "float16"), (np.float32, np.int64)]
  with sc.enable_x64(x64), jax.enable_x64(x64):
    for a, b in pairs:
      assert jnp.promote_types(a, b) == jjnp.promote_types(a, b), (a, b)


def test_size_over_several_axes():
  y = np.ones((2, 3))
  for axis in (None, 1, -1, (1,), (0, 1), (), [0]):
    assert jnp.size(y, axis=axis) == jjnp.size(y, axis=axis)
  assert jnp.size(3.14) == 1
  for axis in ((0, 0), 5):
    with pytest.raises(ValueError):
      jnp.size(y, axis=axis)


def test_trim_zeros_along_axes():
  x = np.array([0, 0, 2, 0, 1, 4, 3, 0, 0, 0])
  for trim in ("fb", "f", "b", "", "F"):
    _same(jnp.trim_zeros(x, trim=trim), jjnp.trim_zeros(x, trim=trim))
  m = np.zeros((4, 5), np.float32)
  m[1:3, 1:4] = 1
  for kw in ({}, {"trim": "f"}, {"axis": 0}, {"axis": (1,)}, {"axis": -1}):
    _same(jnp.trim_zeros(m, **kw), jjnp.trim_zeros(m, **kw))
  _same(jnp.trim_zeros(np.zeros(3)), jjnp.trim_zeros(np.zeros(3)))
  t, j = _error(lambda: jnp.trim_zeros([0, 1, 0])), _error(lambda: jjnp.trim_zeros([0, 1, 0]))
  assert t[0] is j[0] is TypeError


def test_fromfunction_vmaps_the_function():
  seen = []

  def make(np_):
    def f(x, y):
      seen.append((np.shape(x), np.shape(y)))
      return x + y
    return f
  _same(jnp.fromfunction(make(jnp), (2, 3)), jjnp.fromfunction(make(jjnp), (2, 3)))
  assert seen[0] == seen[1] == ((), ())   # scalars, as JAX's (NumPy passes the grids)
  for fn, shape, kw in ((lambda i: i * 2, (4,), {"dtype": int}),
                        (lambda i, j: i == j, (3, 3), {}),
                        (lambda i, j, k: i * 100 + j * 10 + k, (2, 3, 2), {"dtype": np.int32})):
    _same(jnp.fromfunction(fn, shape, **kw), jjnp.fromfunction(fn, shape, **kw))
  _same(jnp.fromfunction(lambda x: jnp.array([x, x * 2]), (2,)),
        jjnp.fromfunction(lambda x: jjnp.array([x, x * 2]), (2,)))


def test_extract_and_compress_with_short_and_long_conditions():
  x = np.array([1, 2, 3, 4, 5, 6])
  mask = x % 2 == 0
  cases = [((mask, x), {}), ((mask, x), {"size": 6}), ((mask, x), {"size": 2}),
           ((np.array([False, True]), x), {}),
           ((np.array([True, False, True] + [False] * 5), x), {}),
           ((np.array([True, False, True] + [False] * 4 + [True]), x), {"size": 3})]
  for args, kw in cases:
    _same(jnp.extract(*args, **kw), jjnp.extract(*args, **kw))
  for args, kw in (((np.array([True, False, True] + [False] * 4 + [True]), x), {}),
                   ((mask, x), {"size": 7}), ((np.array([False, True]), x), {"size": 3})):
    assert _error(lambda: jnp.extract(*args, **kw)) == _error(
        lambda: jjnp.extract(*args, **kw))
    assert _error(lambda: jnp.extract(*args, **kw))[0] is ValueError
  a = np.arange(6).reshape(3, 2)
  _same(jnp.compress(np.array([True, False]), a, axis=1),
        jjnp.compress(np.array([True, False]), a, axis=1))
  _same(sc.jit(lambda m, v: jnp.compress(m, v, size=2))(mask, x),
        jax.jit(lambda m, v: jjnp.compress(m, v, size=2))(mask, x))


def test_vsplit_of_one_dimension():
  x = np.array([1, 2, 3, 4, 5, 6])
  for got, want in zip(jnp.vsplit(x, 2), jjnp.vsplit(x, 2)):
    _same(got, want)


def test_load_reads_bfloat16_and_refuses_raw_bytes():
  f = io.BytesIO()
  jnp.save(f, jnp.array([2, 4, 6, 8], dtype="bfloat16"))
  f.seek(0)
  g = io.BytesIO(f.getvalue())
  _same(jnp.load(f), jjnp.load(g))
  f = io.BytesIO()
  np.save(f, np.zeros(2, "V4"))
  f.seek(0)
  assert isinstance(jnp.load(f), np.ndarray)   # kept as NumPy's (nothing holds raw bytes)
  with pytest.raises(TypeError, match="raw bytes"):
    jnp.asarray(np.zeros(2, "V4"))


def test_matrix_directives_of_r_and_c():
  for key in (("r", [1, 2, 3], [4, 5, 6]), ("c", [1, 2, 3], [4, 5, 6]),
              ("r", np.ones((2, 2)), np.zeros((2, 2))), ("c", np.ones((2, 2)), np.zeros((2, 2))),
              ("0,2", [1, 2], [3, 4])):
    _same(jnp.r_[key], jjnp.r_[key])
    _same(jnp.c_[key], jjnp.c_[key])
  _same(jnp.r_["c", 1:4, 7], jjnp.r_["c", 1:4, 7])


def test_mean_is_one_program_and_keeps_a_given_dtype():
  x = np.array([[1, 3, 4, 2], [5, 2, 6, 3], [8, 1, 2, 9]])
  _same(jnp.mean(x), jjnp.mean(x))   # 3.8333335 (XLA's division by the count), as JAX's
  assert _bits(jnp.mean(x)) == _bits(jjnp.mean(x))
  where = x > 2
  for kw in ({"axis": 1}, {"axis": [1]}, {"where": where}, {"axis": 0, "keepdims": True},
             {"axis": 0, "keepdims": True, "dtype": np.float16}, {"dtype": "bfloat16"}):
    _same(jnp.mean(x, **kw), jjnp.mean(x, **kw))
  xf = np.linspace(0, 1, 7, dtype=np.float16)
  _same(jnp.mean(xf), jjnp.mean(xf))
  # inlined into a traced program, as JAX's (no jit equation)
  assert str(sc.make_jaxpr(lambda v: jnp.mean(v, axis=1))(x)) == str(
      jax.make_jaxpr(lambda v: jjnp.mean(v, axis=1))(x))


# ---------------------------------------------------------------------------
# jax.scipy


def test_dft_bits_as_jax():
  for n in (1, 4, 5, 8):
    for scale in (None, "sqrtn", "n"):
      assert _bits(sc.scipy.linalg.dft(n, scale)) == _bits(jax.scipy.linalg.dft(n, scale))
  _same(sc.scipy.linalg.dft(4).round(3), jax.scipy.linalg.dft(4).round(3))


def test_rotation_examples_as_jax():
  r, jr = Rotation.from_euler("z", 90, degrees=True), JRotation.from_euler("z", 90, degrees=True)
  for name in ("as_quat", "as_rotvec", "as_matrix", "as_mrp", "magnitude"):
    _same(getattr(r, name)(), getattr(jr, name)())
  r3 = r * Rotation.from_euler("x", 90, degrees=True)
  jr3 = jr * JRotation.from_euler("x", 90, degrees=True)
  _same(r3.as_quat(), jr3.as_quat())
  _same(r3.as_matrix(), jr3.as_matrix())
  angles = np.array([10., 20., 30.])
  r4, jr4 = (Rotation.from_euler("xyz", angles, degrees=True),
             JRotation.from_euler("xyz", angles, degrees=True))
  _same(r4.as_euler("zyx"), jr4.as_euler("zyx"))
  _same(Rotation.from_matrix(r4.as_matrix()).as_quat(),
        JRotation.from_matrix(jr4.as_matrix()).as_quat())
  v = np.array([1., 2., 3.])
  _same(r4.apply(v), jr4.apply(v))
  _same(r4.inv().as_quat(), jr4.inv().as_quat())
  _same(Rotation.from_rotvec(np.array([.1, .2, .3])).as_quat(),
        JRotation.from_rotvec(np.array([.1, .2, .3])).as_quat())


# ---------------------------------------------------------------------------
# jax, jax.lax, jax.sharding, jax.export


def test_linear_transpose_of_shape_dtype_structs():
  f = lambda x, y: 0.5 * x - 0.5 * y   # noqa: E731
  t = sc.linear_transpose(f, sc.ShapeDtypeStruct((), np.float32),
                          sc.ShapeDtypeStruct((), np.float32))
  jt = jax.linear_transpose(f, jax.ShapeDtypeStruct((), np.float32),
                            jax.ShapeDtypeStruct((), np.float32))
  assert repr(t(1.0)) == repr(jt(1.0))   # strongly typed, as the output
  assert repr(sc.linear_transpose(lambda x: x * 2, 1.0)(3.0)) == repr(
      jax.linear_transpose(lambda x: x * 2, 1.0)(3.0))
  with pytest.raises(TypeError):
    sc.linear_transpose(f, "a", 1.0)


def test_pmean_of_integers_is_a_true_division():
  x = np.arange(4)
  n = min(4, len(sc.devices()))
  x = x[:n]
  _same(sc.pmap(lambda v: sc.lax.pmean(v, "i"), axis_name="i")(x),
        jax.pmap(lambda v: jax.lax.pmean(v, "i"), axis_name="i")(x))
  _same(sc.pmap(lambda v: v / sc.lax.pmean(v, "i"), axis_name="i")(x),
        jax.pmap(lambda v: v / jax.lax.pmean(v, "i"), axis_name="i")(x))
  _same(sc.vmap(lambda v: sc.lax.pmean(v, "i"), axis_name="i")(np.arange(3.)),
        jax.vmap(lambda v: jax.lax.pmean(v, "i"), axis_name="i")(np.arange(3.)))


def test_addressable_devices_indices_map():
  mesh = sc.sharding.Mesh(np.array(sc.devices()[:4]).reshape(2, 2), ("x", "y"))
  jmesh = jax.sharding.Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y"))
  s = sc.sharding.NamedSharding(mesh, sc.sharding.PartitionSpec("x", "y"))
  js = jax.sharding.NamedSharding(jmesh, jax.sharding.PartitionSpec("x", "y"))
  got = {d.id: i for d, i in s.addressable_devices_indices_map((8, 8)).items()}
  want = {d.id: i for d, i in js.addressable_devices_indices_map((8, 8)).items()}
  assert got == want
  data = np.arange(64).reshape(8, 8)
  arrays = [sc.device_put(data[i], d) for d, i in s.addressable_devices_indices_map((8, 8)).items()]
  arr = sc.make_array_from_single_device_arrays((8, 8), s, arrays)
  np.testing.assert_array_equal(arr, data)
  one = sc.sharding.SingleDeviceSharding(sc.devices()[0])
  assert list(one.addressable_devices_indices_map((2, 3)).values()) == [(slice(None),) * 2]


def test_export_of_library_functions():
  e = sc.export.export(jnp.sin)(np.arange(4, dtype=np.float32))
  j = jax.export.export(jjnp.sin)(np.arange(4, dtype=np.float32))
  assert repr(e.in_avals) == repr(j.in_avals) and e.fun_name == j.fun_name == "sin"
  _same(e.call(np.ones(4, np.float32)), j.call(np.ones(4, np.float32)))
  assert _error(lambda: sc.export.export(lambda x: x))[0] is ValueError


def test_a_donated_array_says_it_was_deleted_as_jax():
  x, jx = jnp.arange(4), jjnp.arange(4)
  sc.jit(lambda v: 2 * v, donate_argnums=0)(x)
  jax.jit(lambda v: 2 * v, donate_argnums=0)(jx)
  t, msg = _error(lambda: print(x))
  jt, jmsg = _error(lambda: print(jx))
  assert issubclass(t, jt) and msg.startswith(jmsg)
  assert issubclass(t, sc.DonatedBufferError)


def test_library_ufuncs_are_ufunc_objects():
  assert repr(jnp.add) == repr(jjnp.add) == "<jnp.ufunc 'add'>"
  for name in ("add", "multiply", "subtract", "minimum", "maximum", "bitwise_and", "bitwise_or",
               "bitwise_xor", "logical_and", "logical_or", "logical_xor", "logaddexp",
               "logaddexp2", "negative"):
    u, ju = getattr(jnp, name), getattr(jjnp, name)
    assert isinstance(u, jnp.ufunc)
    assert u.__doc__ == getattr(sc.numpy.ufuncs, name).__doc__   # the function's own docs
    assert (u.nin, u.nout, u.nargs) == (ju.nin, ju.nout, ju.nargs)
    assert repr(u.identity) == repr(ju.identity)
  x = np.arange(4)
  for expr in ("{0}.add.outer(x, x)", "{0}.add.reduce(x)", "{0}.add.accumulate(x)",
               "{0}.add.at(x, 0, 100, inplace=False)", "{0}.add.reduceat(x, {0}.array([0, 2]))",
               "{0}.add.at(x, {0}.array([0, 0, 2]), 1, inplace=False)",
               "{0}.subtract.at(x, {0}.array([1, 1]), 5, inplace=False)",
               "{0}.multiply.reduce(x + 1)", "{0}.maximum.reduce(x)",
               "{0}.minimum.reduce(x, initial=-2)", "{0}.logical_and.reduce(x > 0)",
               "{0}.bitwise_or.reduce(x)", "{0}.add.reduce({0}.ones((2, 3)), axis=1)",
               "{0}.add.reduce({0}.ones((2, 3)), axis=None, keepdims=True)",
               "{0}.negative(x)", "{0}.add(1, 2)"):
    _same(eval(expr.format("jnp"), {"jnp": jnp, "x": x}),
          eval(expr.format("jjnp"), {"jjnp": jjnp, "x": x}))
  a = np.array([[0.5, -1., 3.], [2., 2., -np.inf]], np.float32)
  for name in ("logaddexp", "logaddexp2"):
    for kw in ({}, {"axis": 1}, {"axis": None, "keepdims": True}, {"axis": 1, "initial": 1.}):
      _same(getattr(jnp, name).reduce(a, **kw), getattr(jjnp, name).reduce(a, **kw))
  _same(sc.grad(lambda v: jnp.logaddexp.reduce(v))(np.arange(3.)),
        jax.grad(lambda v: jjnp.logaddexp.reduce(v))(np.arange(3.)))
  # transformations take them as functions
  _same(sc.jit(jnp.add)(1., 2), jax.jit(jjnp.add)(1., 2))
  _same(sc.vmap(jnp.add)(x, x), jax.vmap(jjnp.add)(x, x))
  _same(sc.grad(jnp.multiply)(2., 3.), jax.grad(jjnp.multiply)(2., 3.))
  with pytest.raises(NotImplementedError, match="inplace=False"):
    jnp.add.at(x, 0, 1)


def test_jit_of_a_callable_object_keeps_its_own_methods():
  # jit copies a callable's attributes onto itself; names of jit's own (`_call`, `_cache`)
  # are not overwritten
  class Scale:
    def __init__(self):
      self._call = "not jit's"
      self._cache = {}
      self.factor = 3.

    def __call__(self, x):
      return x * self.factor
  f = sc.jit(Scale())
  assert float(f(2.)) == 6. and f.factor == 3.


def test_all_gather_and_psum_scatter_over_axis_index_groups():
  groups = [[0, 2], [3, 1]]
  x = np.arange(16).reshape(4, 4)
  cases = [
      lambda L: (lambda v: L.all_gather(v, "i", axis_index_groups=groups), x),
      lambda L: (lambda v: L.all_gather(v, "i", axis_index_groups=groups, tiled=True), x),
      lambda L: (lambda v: L.psum_scatter(v, "i", axis_index_groups=groups),
                 np.arange(8).reshape(4, 2)),
      lambda L: (lambda v: L.psum_scatter(v, "i", axis_index_groups=groups, tiled=True), x),
  ]
  for case in cases:
    f, a = case(sc.lax)
    jf, _ = case(jax.lax)
    _same(sc.pmap(f, axis_name="i")(a), jax.pmap(jf, axis_name="i")(a))
  w = np.arange(8.).reshape(2, 4)
  g = sc.pmap(sc.grad(lambda v: (sc.lax.all_gather(v, "i", axis_index_groups=groups) * w).sum()),
              axis_name="i")(x.astype(np.float32))
  jg = jax.pmap(jax.grad(lambda v: (jax.lax.all_gather(v, "i", axis_index_groups=groups)
                                    * w).sum()), axis_name="i")(x.astype(np.float32))
  _same(g, jg)
  bad = [[0, 2], [2, 1]]
  assert _error(lambda: sc.pmap(lambda v: sc.lax.all_gather(v, "i", axis_index_groups=bad),
                                axis_name="i")(x)) == _error(
      lambda: jax.pmap(lambda v: jax.lax.all_gather(v, "i", axis_index_groups=bad),
                       axis_name="i")(x))
  f = lambda v: sc.lax.all_gather(v, "i", axis_index_groups=groups)   # noqa: E731
  jf = lambda v: jax.lax.all_gather(v, "i", axis_index_groups=groups)   # noqa: E731
  assert _error(lambda: sc.vmap(f, axis_name="i")(x)) == _error(
      lambda: jax.vmap(jf, axis_name="i")(x))


def test_reduce_window_with_any_computation():
  x = np.arange(10, dtype=np.float32)
  m = np.arange(12., dtype=np.float32).reshape(3, 4) - 5
  idx = np.arange(12, dtype=np.int32).reshape(3, 4)

  def argmax_comp(L):
    def comp(a, b):
      (av, ai), (bv, bi) = a, b
      take = bv > av
      return L.select(take, bv, av), L.select(take, bi, ai)
    return comp
  for run in (
      lambda J, L: L.reduce_window(x, np.float32(1), L.mul, window_dimensions=(2,)),
      lambda J, L: L.reduce_window(m, np.float32(1), L.mul, (2, 2), (1, 2), "SAME"),
      lambda J, L: L.reduce_window(m, np.float32(0), lambda a, b: a + b * b, (2, 2), None,
                                   "VALID"),
      lambda J, L: L.reduce_window((m, idx), (np.float32(-np.inf), np.int32(0)),
                                   argmax_comp(L), (2, 2), (1, 1), "VALID"),
      lambda J, L: J.jit(lambda v: L.reduce_window(v, np.float32(1), L.mul, (3,), (1,),
                                                   "VALID"))(x),
      lambda J, L: J.vmap(lambda v: L.reduce_window(v, np.float32(1), L.mul, (2,), (1,),
                                                    "VALID"))(m),
      lambda J, L: J.jvp(lambda v: L.reduce_window(v, np.float32(1), L.mul, (2,), (1,),
                                                   "VALID"), (x,), (np.ones(10, np.float32),)),
  ):
    got, want = run(sc, sc.lax), run(jax, jax.lax)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
      _same(g, w)
  f = lambda L: lambda v: L.reduce_window(v, np.float32(1), L.mul, (2,), (1,), "VALID")  # noqa
  assert str(sc.make_jaxpr(f(sc.lax))(x)) == str(jax.make_jaxpr(f(jax.lax))(x))
  g = lambda J, L: J.grad(lambda v: f(L)(v).sum())(x)   # noqa: E731
  assert _error(lambda: g(sc, sc.lax))[0] is _error(lambda: g(jax, jax.lax))[0] is ValueError
  assert _error(lambda: sc.lax.reduce_window(x, 1, sc.lax.mul, (2,)))[0] is TypeError
