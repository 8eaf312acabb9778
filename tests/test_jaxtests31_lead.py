"""Details found by running JAX 0.10.2's own `tests/lax_numpy_ufuncs_test.py` on stagecraft
through a scratch harness: `ufunc.reduceat` takes traced and empty `indices`, `ufunc.outer`
works under `jax_numpy_rank_promotion='raise'`, a ufunc's `nin`/`nout`/`nargs`/`identity`/
`_func` are read-only. JAX is the oracle."""
import jax
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp


def _same(got, want):
  assert got.shape == want.shape and got.dtype == want.dtype
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)


UFUNCS = {"add": None, "multiply": None, "maximum": None, "bitwise_or": None,
          "pyfunc": (lambda x, y: x * y + 1, 1)}


def _pair(name):
  if name == "pyfunc":
    f, ident = UFUNCS[name]
    return jnp.frompyfunc(f, 2, 1, identity=ident), jax.numpy.frompyfunc(f, 2, 1, identity=ident)
  return getattr(jnp, name), getattr(jax.numpy, name)


@pytest.mark.parametrize("name", list(UFUNCS))
@pytest.mark.parametrize("idx", [[0, 2, 4], [3, 1, 4, 4], [], [5]])
@pytest.mark.parametrize("axis", [0, -1])
def test_reduceat_traced_and_empty_indices_as_jax(name, idx, axis):
  ours, theirs = _pair(name)
  x = np.arange(1, 13, dtype=np.int32).reshape(6, 2) if axis == 0 else \
      np.arange(1, 13, dtype=np.int32).reshape(2, 6)
  i = np.asarray(idx, np.int32)
  want = theirs.reduceat(x, i, axis=axis)
  _same(ours.reduceat(x, i, axis=axis), want)
  _same(sc.jit(lambda x, i: ours.reduceat(x, i, axis=axis))(x, i), want)
  np.testing.assert_array_equal(np.asarray(want),
                                np.frompyfunc(lambda a, b: a * b + 1, 2, 1, identity=1).reduceat(
                                    x, i, axis=axis).astype(np.int32)
                                if name == "pyfunc" and len(idx) else np.asarray(want))


@pytest.mark.parametrize("bad, match", [
    ((np.ones(3), np.zeros((2, 2), int)), "indices must be one-dimensional"),
    ((np.float32(1), np.zeros(2, int)), "a must have 1 or more dimension")])
def test_reduceat_errors_as_jax(bad, match):
  for mod in (jnp, jax.numpy):
    with pytest.raises(ValueError, match=match):
      mod.add.reduceat(*bad)
  with pytest.raises(ValueError, match="single integer axis"):
    jnp.add.reduceat(np.ones(3), np.zeros(2, int), axis=None)


@pytest.mark.parametrize("name", list(UFUNCS))
def test_outer_under_rank_promotion_raise_as_jax(name):
  ours, theirs = _pair(name)
  a, b = np.arange(6, dtype=np.int32).reshape(3, 2), np.arange(4, dtype=np.int32)
  with jax.numpy_rank_promotion("raise"):
    want = theirs.outer(a, b)
  with sc.numpy_rank_promotion("raise"):
    got = ours.outer(a, b)
    _same(sc.jit(ours.outer)(a, b), want)
  _same(got, want)
  assert got.shape == (3, 2, 4)


def test_outer_of_two_results_raises_as_jax():
  f = lambda x, y: (x + y, x - y)
  for mod in (jnp, jax.numpy):
    with pytest.raises(ValueError, match="functions returning a single value"):
      mod.frompyfunc(f, 2, 2).outer(np.ones(2), np.ones(3))


@pytest.mark.parametrize("make", [lambda m: m.add, lambda m: m.negative,
                                  lambda m: m.frompyfunc(lambda x: -x, 1, 1)])
@pytest.mark.parametrize("attr", ["nargs", "nin", "nout", "identity", "_func"])
def test_ufunc_properties_read_only_as_jax(make, attr):
  for mod in (jnp, jax.numpy):
    u = make(mod)
    before = getattr(u, attr)
    with pytest.raises(AttributeError):
      setattr(u, attr, None)
    assert getattr(u, attr) is before
  assert getattr(make(jnp), attr) == getattr(make(jax.numpy), attr) or attr == "_func"


@pytest.mark.parametrize("signature", ["(),()->()", None])
def test_vectorize_rank_promotion_as_jax(signature):
  """`jnp.vectorize` checks the ranks of its arguments' loop dimensions under
  `jax_numpy_rank_promotion` (JAX's lax_numpy_vectorize_test regression 22305)."""
  args = (np.zeros((10, 10), np.float32), np.zeros(10, np.float32))
  msg = "operands with shapes .* require rank promotion"
  for mod, lib in ((jnp, sc), (jax.numpy, jax)):
    f = mod.vectorize(mod.add, signature=signature)
    with lib.numpy_rank_promotion("raise"):
      with pytest.raises(ValueError, match=msg):
        f(*args)
      _same(f(args[0], np.float32(1)), jax.numpy.ones((10, 10)))   # a 0-d argument is fine
    with lib.numpy_rank_promotion("warn"):
      with pytest.warns(UserWarning, match=msg):
        f(*args)
  _same(jnp.vectorize(jnp.add, signature=signature)(*args),
        jax.numpy.vectorize(jax.numpy.add, signature=signature)(*args))


# ---------------------------------------------------------------------------
# JAX's tests/tree_util_test.py: flatten_up_to's messages, tree_transpose, tree_broadcast's
# error, register_dataclass's checks, FlattenedIndexKey's hash.

import collections  # noqa: E402
import dataclasses  # noqa: E402
import functools  # noqa: E402
import re  # noqa: E402

import stagecraft.tree_util as stu  # noqa: E402

_NT = collections.namedtuple("_NT", "a b")
_NT2 = collections.namedtuple("_NT2", "a b")


class _Custom:
  def __init__(self, x, m=0):
    self.x, self.m = x, m

  def __repr__(self):
    return f"_Custom({self.x!r}, {self.m!r})"


for _tu in (stu, jax.tree_util):
  _tu.register_pytree_node(_Custom, lambda c: (tuple(c.x), c.m),
                           lambda m, ch: _Custom(list(ch), m))

UP_TO = [([1, 2], [7]), ((1,), (7, 8)), ({"a": 1}, {"a": 7, "b": 8}), ({"a": 1}, {"b": 7}),
         ([1], {"a": 7}), ((1,), [7]), ([[1]], [(7,)]), (({"a": 1},), ([7],)),
         ([_NT(1, 2)], [(1, 2)]), ([_NT(1, 2)], [_NT2(1, 2)]), ((1, 2), _NT(7, 8)),
         ([_Custom([1], 0)], [_Custom([1], 5)]), ([_Custom([1, 2])], [_Custom([1])]),
         ([_Custom([1])], [3]), ({"a": (1,)}, {"a": {"a": 7}})]


@pytest.mark.parametrize("tree, xs", UP_TO)
def test_flatten_up_to_messages_as_jax(tree, xs):
  with pytest.raises(ValueError) as want:
    jax.tree_util.tree_structure(tree).flatten_up_to(xs)
  with pytest.raises(ValueError, match=re.escape(str(want.value).split("\n")[0])):
    stu.tree_structure(tree).flatten_up_to(xs)


def test_flatten_up_to_none_as_jax():
  for tu in (stu, jax.tree_util):
    with pytest.raises(ValueError, match=re.escape("Expected None, got [2].")):
      tu.tree_structure(None).flatten_up_to([2])
    assert tu.tree_structure([1, (2, 3)]).flatten_up_to([[5], ({"a": 1}, None)]) == \
        [[5], {"a": 1}, None]


class _FlatCache:
  """A custom node whose aux data is its content's structure (JAX's tree_util_test)."""

  def __init__(self, structured, leaves=None, treedef=None):
    if treedef is None:
      leaves, treedef = self.tu.tree_flatten(structured)
    self.data, self.treedef = leaves, treedef

  def __eq__(self, other):
    return self.tu.tree_unflatten(self.treedef, self.data) == \
        other.tu.tree_unflatten(other.treedef, other.data)


class _FlatCacheSC(_FlatCache):
  tu = stu


class _FlatCacheJAX(_FlatCache):
  tu = jax.tree_util


for _cls, _tu in ((_FlatCacheSC, stu), (_FlatCacheJAX, jax.tree_util)):
  _tu.register_pytree_node(_cls, lambda c: (c.data, c.treedef),
                           functools.partial(lambda cls, td, ls: cls(None, ls, td), _cls))




def test_tree_transpose_custom_node_and_mismatch_as_jax():
  for cls, tu in ((_FlatCacheSC, stu), (_FlatCacheJAX, jax.tree_util)):
    outer = tu.tree_structure(cls({"a": 1, "b": 2}))
    inner = tu.tree_structure([1, 2])
    got = tu.tree_transpose(outer, inner, cls({"a": [3, 4], "b": [5, 6]}))
    assert got == [cls({"a": 3, "b": 5}), cls({"a": 4, "b": 6})]
    tree = {"a": [1, 2], "b": [3, 4]}
    for o, i in (({"a": 1, "b": 2, "c": 3}, [1, 2]), ({"a": 1, "b": 2}, [1, 2, 3])):
      with pytest.raises(TypeError, match="Mismatch"):
        tu.tree_transpose(tu.tree_structure(o), tu.tree_structure(i), tree)
    assert tu.tree_transpose(tu.tree_structure([0, 0]), None, [(1, {"x": 2}), (3, {"x": 4})]) \
        == ([1, 3], {"x": [2, 4]})


@pytest.mark.parametrize("prefix, full", [((1, 2, 3), (0, {"a": 0, "b": 0})),
                                          ((1, {"a": 0}), (0, {"a": 0, "b": 0}))])
def test_tree_broadcast_error_as_jax(prefix, full):
  with pytest.raises(ValueError) as want:
    jax.tree_util.tree_broadcast(prefix, full)
  with pytest.raises(ValueError) as got:
    stu.tree_broadcast(prefix, full)
  assert str(got.value) == str(want.value)
  assert str(got.value).startswith("pytree structure error")


def test_register_dataclass_checks_as_jax():
  class Foo:
    x: int

  @dataclasses.dataclass
  class Bar:
    x: int
    y: float
    z: float = dataclasses.field(init=False)

  cases = [((Foo,), {}, TypeError, "data_fields and meta_fields are required when nodetype "
            "is not a dataclass. Got nodetype=<class '.*Foo'>"),
           ((Foo,), {"data_fields": ["x"]}, TypeError, r"must both be specified when either "
            r"is specified. Got data_fields=\['x'\] meta_fields=None."),
           ((Bar,), {"data_fields": ["x"], "meta_fields": []}, ValueError,
            "must include all dataclass fields.*Missing fields: {'y'}"),
           ((Bar,), {"data_fields": ["x"], "meta_fields": ["y", "w"]}, ValueError,
            "Unexpected fields: {'w'}"),
           ((Bar,), {"data_fields": ["x", "y"], "meta_fields": ["x"]}, ValueError,
            "must not overlap.*Overlapping fields: {'x'}")]
  for args, kw, exc, msg in cases:
    for tu in (stu, jax.tree_util):
      with pytest.raises(exc, match=msg):
        tu.register_dataclass(*args, **kw)


def test_flattened_index_key_hash_differs_from_sequence_key_as_jax():
  for tu in (stu, jax.tree_util):
    k = tu.FlattenedIndexKey(1)
    assert k == tu.FlattenedIndexKey(1) and hash(k) == hash(tu.FlattenedIndexKey(1))
    assert hash(k) != hash(tu.SequenceKey(1))


@pytest.mark.parametrize("x_dtype", [np.int8, np.int32])
def test_multinomial_logpmf_under_strict_promotion_as_jax(x_dtype):
  """JAX's scipy_stats_test runs under jax_numpy_dtype_promotion='strict'."""
  import scipy.stats
  import stagecraft.scipy.stats as sstats
  x = np.array([[1, 2, 3], [0, 4, 2]], x_dtype)
  n = np.array([6, 5], x_dtype)
  p = np.array([0.2, 0.3, 0.5], np.float32)
  with jax.numpy_dtype_promotion("strict"):
    want = jax.scipy.stats.multinomial.logpmf(x[0], n[0], p)
  with sc.numpy_dtype_promotion("strict"):
    got = sstats.multinomial.logpmf(x, n, p)
  _same(got[0], want)
  assert np.isneginf(got[1])   # the counts do not sum to n
  np.testing.assert_allclose(got[0], scipy.stats.multinomial.logpmf(x[0], 6, p), rtol=1e-5)


# ---------------------------------------------------------------------------
# JAX's tests/custom_api_test.py and batching_test.py: messages, keyword resolution,
# closure_convert's structure check, jax_disable_bwd_checks, lax.map(batch_size=0).

import functools as _ft  # noqa: E402


def _both(make):
  return [(make(sc, jnp), "sc"), (make(jax, jax.numpy), "jax")]


def test_custom_rules_resolve_keywords_as_jax():
  for lib, np_ in ((sc, jnp), (jax, jax.numpy)):
    @lib.custom_jvp
    def f(x, y, *, z=None):
      return np_.sin(x) + y

    f.defjvp(lambda p, t: (f(*p), t[0]))
    with pytest.raises(TypeError, match=r"custom_jvp-decorated function f(.*)\nThe following "
                       r"keyword arguments could not be resolved to positions: z"):
      f(0.5, 0.1, z=1.0)
    with pytest.raises(TypeError, match="missing a required argument: 'y'"):
      f(0.5)
    np.testing.assert_allclose(lib.grad(f)(0.5, 0.1), 1.0)   # z left at its default
    fun = _ft.partial(lambda x, y, a: x + y * a, a=0.1)      # a partial's signature is opaque
    g = lib.custom_jvp(fun)
    g.defjvp(lambda p, t: lib.jvp(fun, p, t))
    assert lib.grad(lambda a: g(*a))((1.0, 2.0)) == (1.0, 0.1)


def test_custom_rule_type_messages_as_jax():
  """The rules' outputs checked against the primal's (traced inside a scan), in JAX's words
  (long dtype names)."""
  msgs = []
  for lib, np_ in ((sc, jnp), (jax, jax.numpy)):
    def scan_apply(f, x):
      return lib.lax.scan(lambda c, _: (f(c), None), x, None, length=1)[0]

    @lib.custom_jvp
    def f(x):
      return x

    f.defjvp(lambda p, t: ((p[0], p[0]), (t[0], t[0])))

    @lib.custom_jvp
    def h(x):
      return np_.sin(x)

    h.defjvp(lambda p, t: (h(p[0]), np_.ones(1)))

    @lib.custom_vjp
    def v(x):
      return x

    def v_fwd2(x):
      return np_.zeros((3, *x.shape), x.dtype), None

    v.defvjp(v_fwd2, lambda r, g: (g,))
    got = []
    x = np.float32(1.)
    for fn in (lambda: lib.jvp(lambda x: scan_apply(f, x), (x,), (x,)),
               lambda: lib.jvp(h, (x,), (x,)),
               lambda: lib.grad(lambda x: scan_apply(v, x))(x)):
      with pytest.raises(TypeError) as e:
        fn()
      got.append(str(e.value).split("\nThe operation")[0])
    msgs.append(got)
  assert msgs[0] == msgs[1]
  assert "float32[]" in msgs[0][0] and "tangent type of float32[]" in msgs[0][1]
  assert "shapes/dtypes of:\n    float32[3]" in msgs[0][2]


def test_closure_convert_structure_check_as_jax():
  for lib in (sc, jax):
    _, vjp = lib.vjp(lambda x, z: z * x, 2.0, 3.0)
    pure, aux = lib.closure_convert(vjp, 2.0)
    assert pure(2.0, *aux) == vjp(2.0)
    with pytest.raises(TypeError, match="The inputs to the closure produced by "
                       "closure_convert must have the same Pytree structure"):
      pure(2.0, [1.0])


def test_disable_bwd_checks_as_jax():
  got = []
  for lib, np_ in ((sc, jnp), (jax, jax.numpy)):
    @lib.custom_vjp
    def foo(x, y):
      return x

    foo.defvjp(lambda x, y: (x, None), lambda _, g: (np_.zeros(3), np_.zeros(3)))
    f = lambda x, y: foo(x, y).sum()
    with pytest.raises(ValueError, match="Custom VJP bwd rule must produce an output with the "
                       r"same type .* type float32\[3\] corresponding to an input of type "
                       r"float32\[4\]"):
      lib.grad(f, 1)(np_.ones(3), np_.ones(4))
    with lib.disable_bwd_checks(True) if hasattr(lib, "disable_bwd_checks") else \
        _config_ctx(lib, "jax_disable_bwd_checks", True):
      got.append(np.asarray(lib.grad(f, 1)(np_.ones(3), np_.ones(4))))
  np.testing.assert_array_equal(got[0], got[1])


import contextlib  # noqa: E402


@contextlib.contextmanager
def _config_ctx(lib, name, value):
  old = getattr(lib.config, name)
  lib.config.update(name, value)
  try:
    yield
  finally:
    lib.config.update(name, old)


def test_lax_map_batch_size_zero_is_one_vmap_as_jax():
  xs = np.arange(12.).reshape(6, 2)
  f = lambda x: (x ** 2).sum()
  want = jax.lax.map(f, xs, batch_size=0)
  _same(sc.lax.map(f, xs, batch_size=0), want)
  assert "scan" not in str(sc.make_jaxpr(lambda x: sc.lax.map(f, x, batch_size=0))(xs))
  with pytest.raises(ValueError, match="batch_size"):
    sc.lax.map(f, xs, batch_size=-1)


def test_vmap_out_axes_out_of_bounds_message_as_jax():
  x = np.ones((3, 4, 5))
  for lib in (sc, jax):
    with pytest.raises(ValueError, match="axis -4 is out of bounds for array of dimension 3"):
      lib.vmap(lambda y: y, in_axes=0, out_axes=-4)(x)
    with pytest.raises(ValueError, match="axis -2 is out of bounds"):
      lib.vmap(lambda *xs: xs, in_axes=(0, None), out_axes=(0, -2))(np.arange(5), 7)


def test_custom_rules_close_over_vmap_tracers_as_jax():
  """JAX issues 3822 and 8783: a custom_jvp/custom_vjp rule closing over a value of the
  vmap it runs in (the rule is run batched in that vmap)."""
  def h(lib, np_, kind):
    def outer(z):
      def f(x):
        if kind == "jvp":
          @lib.custom_jvp
          def g(y):
            return x * y

          @g.defjvp
          def g_jvp(p, t):
            return x * p[0], x * t[0]
        else:
          @lib.custom_vjp
          def g(y):
            return x * y

          g.defvjp(lambda y: (x * y, y), lambda y, ct: (x * ct,))
        return g(z)
      return lib.vmap(f)(np_.arange(3., dtype="float32"))
    return outer

  want = jax.jvp(h(jax, jax.numpy, "jvp"), (np.float32(1.),), (np.float32(2.),))
  got = sc.jvp(h(sc, jnp, "jvp"), (np.float32(1.),), (np.float32(2.),))
  for g, w in zip(got, want):
    _same(g, w)
  _same(sc.grad(lambda z: h(sc, jnp, "jvp")(z).sum())(np.float32(1.)),
        jax.grad(lambda z: h(jax, jax.numpy, "jvp")(z).sum())(np.float32(1.)))
  # a bwd rule closing over a vmap tracer runs after that vmap ended: both raise
  with pytest.raises(jax.errors.UnexpectedTracerError):
    jax.jacrev(h(jax, jax.numpy, "vjp"))(np.float32(1.))
  with pytest.raises(sc.errors.UnexpectedTracerError):
    sc.jacrev(h(sc, jnp, "vjp"))(np.float32(1.))

  def nondiff(lib, np_):
    @_ft.partial(lib.custom_jvp, nondiff_argnums=(0,))
    def f(x, y):
      return x * y

    f.defjvp(lambda x, p, t: (f(x, p[0]), 5 * t[0]))
    return lib.jvp(lambda y: lib.vmap(f)(np_.array([2.]), y), (np_.array([3.]),),
                   (np_.array([1.]),))
  for g, w in zip(nondiff(sc, jnp), nondiff(jax, jax.numpy)):
    _same(g, w)


def test_scipy_special_under_rank_promotion_raise_and_disable_jit_as_jax():
  """JAX's lax_scipy_test runs under jax_numpy_rank_promotion='raise'."""
  import stagecraft.scipy.special as ssp
  a = np.array([3.5, 4.0, 6.25], np.float32)
  z = np.linspace(0.5, 4., 12, dtype=np.float32).reshape(2, 2, 3)
  with jax.numpy_rank_promotion("raise"):
    want = (jax.scipy.special.multigammaln(a, 3), jax.scipy.special.bessel_jn(z, v=3))
  with sc.numpy_rank_promotion("raise"):
    got = (ssp.multigammaln(a, 3), ssp.bessel_jn(z, v=3))
  _same(got[0], want[0])
  np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1]), rtol=2e-5, atol=1e-6)
  assert got[1].shape == (4, 2, 2, 3)
  with sc.debug_nans(True), sc.disable_jit():
    assert ssp.logsumexp(1.0) == 1.0 and ssp.logsumexp(1.0, b=1.0) == 1.0


def test_custom_jvp_with_collective_over_vmap_axis_in_staged_jaxpr_as_jax():
  """JAX's test_initial_style_vmap_with_collective: a custom_jvp body with a psum over the
  vmap's axis, staged with make_jaxpr inside the vmap and evaluated there."""
  def run(lib):
    @lib.custom_jvp
    def f(x):
      return lib.lax.psum(x, "foo")

    f.defjvp(lambda xs, ts: (lib.lax.psum(xs[0], "foo"), ts[0]))

    def g(x):
      jaxpr = lib.make_jaxpr(f)(x)
      return lib.core.eval_jaxpr(jaxpr.jaxpr, [], x)[0]
    return lib.vmap(lambda _, x: g(x), axis_name="foo", in_axes=(0, None),
                    out_axes=None)(np.arange(4.), 2.)
  assert float(run(sc)) == float(run(jax)) == 8.0
