"""`jit` as JAX 0.10.2's own `tests/api_test.py` (JitTest) checks it: what `jit` accepts
(callables, not staticmethod/classmethod objects or generator functions), the validation of
static/donate argnums and argnames against the signature when `jit` is called, donation of
pytree arguments given by position or keyword, functions that are not weakly referenceable,
`repr`, `clear_cache`, `no_tracing()` / `no_execution()`, and static arguments that cannot
be hashed or compared. Each test runs the same thing under stagecraft and JAX (the oracle)
and compares the outcome: exception type and message, or results."""
import warnings

import jax
import jax.flatten_util
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from _util import assert_same_error, error_of, sets_sorted


def outcome(fn) -> tuple:
  """`(type name, message)` of what `fn()` raises, `(None, None)` when it returns."""
  try:
    fn()
  except Exception as e:   # noqa: BLE001 -- the exception is what is compared
    return type(e).__name__, sets_sorted(str(e))
  return None, None


def assert_same_outcome(ours, theirs) -> None:
  assert outcome(ours) == outcome(theirs)


LIBS = [pytest.param((sc, jnp), id="stagecraft"), pytest.param((jax, jjnp), id="jax")]


# -- what jit accepts


def _gen(x):
  yield x


def test_jit_of_noncallable_and_generator():
  assert_same_error(lambda: sc.jit(3), lambda: jax.jit(3))
  assert error_of(lambda: sc.jit(3)) == (TypeError, "Expected a callable value, got 3")
  assert_same_error(lambda: sc.jit(_gen), lambda: jax.jit(_gen))
  assert error_of(lambda: sc.jit(_gen))[1].startswith(
      "Expected a function, got a generator function: <function _gen at")


def test_jit_of_staticmethod_and_classmethod_objects():
  sm = staticmethod(lambda x: x + 2)
  assert_same_error(lambda: sc.jit(sm), lambda: jax.jit(sm))
  assert error_of(lambda: sc.jit(sm))[1].startswith("staticmethod arguments are not supported")
  cm = classmethod(lambda cls, x: x + 2)
  # as in JAX's test_static_argnum_on_static_method_is_not_supported: the decorator form
  assert_same_error(lambda: sc.jit(static_argnums=(0,))(cm),
                    lambda: jax.jit(static_argnums=(0,))(cm))
  assert error_of(lambda: sc.jit(cm))[1].startswith("Expected a callable value, got "
                                                    "<classmethod(")


@pytest.mark.parametrize("kw", [dict(static_argnums="a"), dict(static_argnums=1.5),
                                dict(static_argnums=[0.0]), dict(static_argnames=1),
                                dict(static_argnames=[1]), dict(donate_argnums="a"),
                                dict(donate_argnames=[1])])
def test_jit_argument_types(kw):
  def f(a, b):
    return a
  assert_same_error(lambda: sc.jit(f, **kw), lambda: jax.jit(f, **kw))


# -- static/donate argnums and argnames, checked when jit is called


def _f(a, b, c):
  ...


def _g(a, /, b, *, c):
  ...


def _h(a, *args):
  ...


def _i():
  ...


@pytest.mark.parametrize("kind", ["static_argnums", "donate_argnums"])
@pytest.mark.parametrize("fun,nums", [
    (_f, (0, 1)), (_g, (0, 1)), (_f, (0, 1, -3)),                      # in range
    (_f, (0, 1, 3)), (_f, (0, 1, -4)), (_g, (0, 1, 3)), (_g, (0, 1, -3)),   # out of range
    (_h, (0, 999)), (_h, (0, -999)),                                   # *args: anything
    (_i, ())])
def test_jit_argnums_overflow_error(kind, fun, nums):
  assert_same_outcome(lambda: sc.jit(fun, **{kind: nums}), lambda: jax.jit(fun, **{kind: nums}))


def test_jit_argnums_overflow_error_message():
  assert error_of(lambda: sc.jit(_f, static_argnums=(0, 1, 3))) == (
      ValueError, "Jitted function has static_argnums=(0, 1, 3), but only accepts 3 "
                  "positional arguments.")


def _f2(a, b, c):
  ...


def _g2(a, b, **kwargs):
  ...


def _h2(a, /, b, c, *args, **kwargs):
  ...


@pytest.mark.parametrize("kind", ["static_argnames", "donate_argnames"])
@pytest.mark.parametrize("fun,names", [
    (_f2, ("b", "c")), (_f2, ("b", "c", "not_defined")), (_g2, ("a", "b", "not_defined")),
    (_h2, ("b", "c")), (_h2, ("b", "c", "not_defined")), (_h2, ("a", "c")),
    (_h2, ("args", "c"))])
def test_jit_argnames_validation(kind, fun, names):
  assert_same_outcome(lambda: sc.jit(fun, **{kind: names}),
                      lambda: jax.jit(fun, **{kind: names}))


def test_jit_argnames_validation_messages():
  assert error_of(lambda: sc.jit(_f2, donate_argnames=("b", "not_defined"))) == (
      ValueError, "Jitted function has invalid argnames {'not_defined'} in donate_argnames. "
                  "Function does not take these args.")
  assert error_of(lambda: sc.jit(_h2, static_argnames=("a",))) == (
      ValueError, "Jitted function has invalid argnames {'a'} in static_argnames. These are "
                  "positional-only")


class _NoSignature:
  @property
  def __signature__(self):
    raise TypeError("no signature")

  def __call__(self, *args, **kwargs):
    return None


def test_donate_argnames_signature_fail():
  fun = _NoSignature()
  inp = np.arange(4)
  assert_same_error(lambda: sc.jit(fun, donate_argnames="a")(inp, inp),
                    lambda: jax.jit(fun, donate_argnames="a")(inp, inp))
  t, msg = error_of(lambda: sc.jit(fun, donate_argnames="a"))   # at jit() already
  assert t is ValueError and msg.startswith("Getting the signature of function <")
  assert msg.endswith("failed. Pass donate_argnums instead of donate_argnames.")


@pytest.mark.parametrize("kw", [
    dict(static_argnames="x", donate_argnames="x"),
    dict(static_argnums=0, donate_argnums=0),       # numbers are inferred as names
    dict(static_argnums=0, donate_argnames="x"),
    dict(static_argnames="x", donate_argnums=0)])
def test_intersecting_static_and_donate(kw):
  assert_same_error(lambda: sc.jit(lambda x: x, **kw), lambda: jax.jit(lambda x: x, **kw))
  assert error_of(lambda: sc.jit(lambda x: x, **kw)) == (
      ValueError, "static_argnames and donate_argnames cannot intersect. Argument names "
                  "{'x'} appear in both static_argnames and donate_argnames")


class _NoSignatureTimes2(_NoSignature):
  def __call__(self, *args):
    return args[1] * 2


@pytest.mark.parametrize("fun", [_NoSignatureTimes2(), lambda *a: a[1] * 2],
                         ids=["nosig", "varargs"])
def test_static_and_donated_by_number_is_static(fun):
  """Without names to compare (no signature, `*args`) an argument both static and donated
  by number is static, as JAX's: no error, nothing donated."""
  for lib, np_ in (sc, jnp), (jax, jjnp):
    b = np_.ones(3)
    np.testing.assert_array_equal(lib.jit(fun, static_argnums=0, donate_argnums=0)(1, b),
                                  2 * np.ones(3))
    assert not b.is_deleted()


# -- donation of pytree arguments by position and keyword


def _info(lowered):
  return jax.tree_util.tree_map(lambda a: a.donated, lowered.args_info)


@pytest.mark.parametrize("jit_kwargs", [{"donate_argnames": ("z", "y")},
                                        {"donate_argnums": (0, 1)}], ids=["argnames", "argnums"])
@pytest.mark.parametrize("call", ["kwargs", "args_kwargs", "args"])
def test_dict_donation(jit_kwargs, call):
  def f(z, y, x):
    return z, y, x

  def lower(lib):
    z, y, x = {"c": 3.}, {"b": 2.}, {"a": 1.}
    j = lib.jit(f, **jit_kwargs)
    return {"kwargs": lambda: j.lower(z=z, y=y, x=x), "args_kwargs": lambda: j.lower(z, y=y, x=x),
            "args": lambda: j.lower(z, y, x)}[call]()
  ours, theirs = _info(lower(sc)), _info(lower(jax))
  assert ours == theirs
  if call == "args_kwargs":   # JAX's test_dict_donation_args_kwargs
    args_info, kwargs_info = ours
    assert args_info[0]["c"] and kwargs_info["y"]["b"] and not kwargs_info["x"]["a"]


@pytest.mark.parametrize("jit_kwargs", [{"donate_argnames": ("z", "y")},
                                        {"donate_argnums": (0, 1)}], ids=["argnames", "argnums"])
@pytest.mark.parametrize("call", ["kwargs", "args_kwargs", "args"])
def test_dict_donation_deletes(jit_kwargs, call):
  """After the call the donated arrays are deleted and the others are not, as on JAX's CPU."""
  def f(z, y, x):
    return z["c"] * 2, y["b"] * 2, x["a"] * 2

  def deleted(lib, np_):
    z, y, x = {"c": np_.ones(3)}, {"b": np_.ones(3)}, {"a": np_.ones(3)}
    j = lib.jit(f, **jit_kwargs)
    {"kwargs": lambda: j(z=z, y=y, x=x), "args_kwargs": lambda: j(z, y=y, x=x),
     "args": lambda: j(z, y, x)}[call]()
    return z["c"].is_deleted(), y["b"].is_deleted(), x["a"].is_deleted()
  assert deleted(sc, jnp) == deleted(jax, jjnp) == (True, True, False)


def test_donate_argnums_with_kwargs():
  def f(inp1):
    return inp1 * 2
  for lib, np_ in (sc, jnp), (jax, jjnp):
    x = lib.device_put(np_.ones((2, 5)) * 4, lib.devices()[0])
    lib.jit(f, donate_argnums=0)(inp1=x)
    assert x.is_deleted()
    x = lib.device_put(np_.ones((2, 5)) * 4, lib.devices()[0])
    lib.jit(f, donate_argnames="inp1")(x)
    assert x.is_deleted()


@pytest.mark.parametrize("case", ["static0_donate1", "static0_donate1_kw", "names_kw",
                                  "negative", "negative_kw", "varargs", "varargs_negative"])
def test_donation_cases_as_jax(case):
  """Which arrays a call deletes, for static and donated arguments mixed with keywords,
  negative numbers (JAX donates nothing for those) and `*args`."""
  def run(lib, np_):
    a, b, c = np_.ones(3), np_.ones(3) * 2, np_.ones(3) * 3
    if case.startswith("static0_donate1"):
      j = lib.jit(lambda s, a, b: (a * s, b * s), static_argnums=0, donate_argnums=1)
      j(2, a, b) if case == "static0_donate1" else j(2, a=a, b=b)
    elif case == "names_kw":
      def f5(a, s, b):
        return a * s, b * s
      lib.jit(f5, static_argnames="s", donate_argnames="a")(b=b, s=2, a=a)
    elif case.startswith("negative"):
      j = lib.jit(lambda a, b: (a * 2, b * 2), donate_argnums=-1)
      j(a, b) if case == "negative" else j(a, b=b)
    else:
      j = lib.jit(lambda a, *r: (a * 2, [x * 2 for x in r]),
                  donate_argnums=(1,) if case == "varargs" else (-1,))
      j(a, b, c)
    return a.is_deleted(), b.is_deleted(), c.is_deleted()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")   # donations that are not usable
    assert run(sc, jnp) == run(jax, jjnp)


def test_negative_static_argnums_count_from_the_call():
  def h(a, b):
    return a * b
  assert float(sc.jit(h, static_argnums=-1)(jnp.ones(()), 2)) == 2.0
  # `b` by keyword: the array is the last positional argument, hence static (unhashable)
  t1, m1 = outcome(lambda: sc.jit(h, static_argnums=-1)(jnp.ones(3), b=2))
  t2, m2 = outcome(lambda: jax.jit(h, static_argnums=-1)(jjnp.ones(3), b=2))
  assert t1 == t2 == "ValueError"
  assert m1.startswith("Non-hashable static arguments are not supported")
  assert (m1.split(", ")[0].replace("stagecraft.runtime.array.Array", "X")
          == m2.split(", ")[0].replace("jaxlib._jax.ArrayImpl", "X"))


# -- functions that are not weakly referenceable


class _CallableWithSlots:
  __slots__ = []

  def __call__(self, x):
    return x + 1


def test_jit_of_nonweakreferenceable_function():
  ours, theirs = _CallableWithSlots(), _CallableWithSlots()
  f, g = sc.jit(ours), jax.jit(theirs)      # building works
  assert_same_error(lambda: f(3), lambda: g(3))
  assert error_of(lambda: f(3)) == (
      TypeError, "cannot create weak reference to '_CallableWithSlots' object")
  assert error_of(lambda: f.lower(3))[0] is TypeError
  with sc.disable_jit():   # as JAX's: called as it is
    assert f(3) == 4


@pytest.mark.parametrize("which", ["vjp", "unravel"])
def test_jit_of_transformation_results(which):
  """What transformations return can be jitted, as JAX's (it is weakly referenceable)."""
  def make(lib, np_):
    if which == "vjp":
      return lib.vjp(np_.sin, 1.0)[1], np.float32(1.0)
    flat = lib.flatten_util.ravel_pytree({"a": np_.ones(2), "b": np_.ones(())})
    return flat[1], np.arange(3, dtype=np.float32)
  (ours, x), (theirs, _) = make(sc, jnp), make(jax, jjnp)
  got, want = sc.jit(ours)(x), jax.jit(theirs)(x)
  assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
  for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


# -- repr


class _BadRepr:
  def __call__(self):
    pass

  def __repr__(self):
    raise ValueError("invalid repr")


def test_jit_repr():
  def my_function():
    return
  assert repr(sc.jit(my_function)) == repr(jax.jit(my_function)) == (
      f"<PjitFunction of {my_function!r}>")


def test_jit_repr_errors():
  fun = _BadRepr()
  ours, theirs = sc.jit(fun), jax.jit(fun)
  assert repr(ours) == repr(theirs) == "<PjitFunction>"
  del ours.__wrapped__, theirs.__wrapped__
  assert repr(ours) == repr(theirs) == "<PjitFunction>"

  def g():
    return
  ours, theirs = sc.jit(g), jax.jit(g)
  del ours.__wrapped__, theirs.__wrapped__
  assert repr(ours) == repr(theirs) == "<PjitFunction>"


# -- clear_cache


@pytest.mark.parametrize("libs", LIBS)
def test_clear_cache(libs):
  lib, np_ = libs
  traces = []

  def f(x):
    traces.append(1)
    return x * 2
  j = lib.jit(f)
  x = np_.ones(3)
  j(x)
  j(x)
  assert len(traces) == 1
  j.clear_cache()
  j(x)
  j(x)
  assert len(traces) == 2


# -- no_tracing / no_execution


def test_no_tracing_and_no_execution_are_public():
  assert callable(sc.no_tracing) and callable(sc.no_execution)


def _traced_twice(x):
  return x * 2


def _no_tracing_case(lib, np_, case):
  j = lib.jit(_traced_twice)
  x, y = np_.arange(3), np_.arange(4)
  xf = x.astype(np.float32)
  j(x)
  j(xf)
  with lib.no_tracing():
    j(x)                      # cached: no trace
    if case == "miss":
      j(y)
    elif case == "grad":      # traced arguments: JAX's dispatch traces again
      lib.grad(lambda v: j(v).sum())(xf)
    elif case == "lower":
      j.lower(y)


@pytest.mark.parametrize("case", ["miss", "grad", "lower", "cached"])
def test_no_tracing(case):
  assert_same_outcome(lambda: _no_tracing_case(sc, jnp, case),
                      lambda: _no_tracing_case(jax, jjnp, case))
  if case == "miss":
    t, msg = error_of(lambda: _no_tracing_case(sc, jnp, case))
    assert t is RuntimeError and msg.startswith("re-tracing function _traced_twice at ")
    assert msg.endswith("for `jit`, but 'no_tracing' is set")


def _no_execution_case(lib, np_, case):
  if case == "jit":
    def f():
      return np_.ones(3)
    j = lib.jit(f)
    j()
    with lib.no_execution():
      j()
  elif case == "after":
    j = lib.jit(lambda: 1)
    j()
    with lib.no_execution():
      pass
    j()
  elif case == "eager":
    x = np_.ones(3)
    with lib.no_execution():
      x + x
  elif case == "aot":
    def g(x):
      return x + 1
    c = lib.jit(g).lower(1.).compile()
    x = np_.ones(())
    with lib.no_execution():
      c(x)
  elif case == "trace_only":    # tracing runs nothing
    with lib.no_execution():
      lib.jit(lambda x: x * 2).lower(np.ones(3, np.float32))


@pytest.mark.parametrize("case", ["jit", "after", "eager", "aot", "trace_only"])
def test_no_execution(case):
  assert_same_outcome(lambda: _no_execution_case(sc, jnp, case),
                      lambda: _no_execution_case(jax, jjnp, case))
  if case == "jit":
    assert error_of(lambda: _no_execution_case(sc, jnp, case)) == (
        RuntimeError, "JAX tried to execute function jit(f), but the no_execution config "
                      "option is set")


# -- static arguments that cannot be hashed or compared


def _add3(x, y):
  return x + 3


@pytest.mark.parametrize("first", [False, True], ids=["first_call", "after_a_call"])
@pytest.mark.parametrize("value", [lambda: np.asarray(1), lambda: [1, np.zeros(2)],
                                   lambda: {"a": 1}], ids=["ndarray", "list", "dict"])
def test_non_hashable_static_argument(first, value):
  def run(lib):
    j = lib.jit(_add3, static_argnums=(1,))
    if not first:
      j(1, 1)
    j(1, value())
  assert_same_error(lambda: run(sc), lambda: run(jax))
  assert error_of(lambda: run(sc))[1].startswith(
      "Non-hashable static arguments are not supported. An error occurred while trying to "
      "hash an object of type")


def _hashable_without_eq():
  """JAX's HashableWithoutEq, a new class per test: its `__eq__` raises against another
  instance of it (and leaves other types alone, so that instances left in JAX's global
  caches by other tests, which hash alike, are not compared with it)."""
  class HashableWithoutEq:
    def __hash__(self):
      return 1

    def __eq__(self, other):
      if type(other) is not type(self):
        return NotImplemented
      raise NotImplementedError("A Python error is as is, without stack trace")
  return HashableWithoutEq


def _call_twice(lib, cls, by_keyword, before):
  def f(x, y):
    return x + 3
  if by_keyword:
    j = lib.jit(f, static_argnames="y")
    if before:
      j(1, y=1)
    j(1, y=cls())
    return j(1, y=cls())   # another instance of the same hash: compared with the first
  j = lib.jit(f, static_argnums=[1])
  if before:
    j(1, 1)   # an int of the same hash
  j(1, cls())
  return j(1, cls())


@pytest.mark.parametrize("by_keyword", [False, True], ids=["argnums", "argnames"])
@pytest.mark.parametrize("before", [False, True], ids=["first", "after_int"])
def test_static_argument_eq_raises(by_keyword, before):
  cls = _hashable_without_eq()
  # NB: both through the same frames (lines too), so the tracebacks in the messages match
  ours, theirs = [outcome(lambda: _call_twice(lib, cls, by_keyword, before))
                  for lib in (sc, jax)]
  assert ours == theirs
  assert ours[0] == "ValueError"
  name = f"<class '{cls.__module__}.{cls.__qualname__}'>"
  assert ours[1].startswith(
      f"static arguments should be comparable using __eq__.The following error was raised "
      f"when comparing two objects of types {name} and {name}. The error was:\nTraceback "
      f"(most recent call last):\n")
  assert ours[1].endswith('in __eq__\nNotImplementedError: A Python error is as is, without '
                          'stack trace')


def test_hash_raising_other_errors_propagates():
  class A:
    def __hash__(self):
      raise ValueError

  assert_same_error(lambda: sc.jit(lambda x: x + 1, static_argnums=(0,))(A()),
                    lambda: jax.jit(lambda x: x + 1, static_argnums=(0,))(A()))


@pytest.mark.parametrize("by_keyword", [False, True])
def test_static_values_of_different_types_trace_apart(by_keyword):
  """`True`, `1` and `1.0` are equal and hash alike, but as JAX's each traces anew (the
  result of `x * 1.0` is a float)."""
  def run(lib):
    types = []

    def g(x, s):
      types.append(type(s).__name__)
      return x * s
    j = lib.jit(g, **({"static_argnames": "s"} if by_keyword else {"static_argnums": 1}))
    outs = [j(2, s=s) if by_keyword else j(2, s) for s in (True, 1, 1.0, 1)]
    return types, [(o.dtype.name, float(o)) for o in outs]
  assert run(sc) == run(jax) == (["bool", "int", "float"],
                                 [("int32", 2.0), ("int32", 2.0), ("float32", 2.0),
                                  ("int32", 2.0)])
