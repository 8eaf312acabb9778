"""Patterns from jaxtyping, dm-pix, gymnax, flowjax, pgx, jumanji and sympy2jax (their own
test suites and small programs) that differed under stagecraft, each run in plain JAX code on
JAX and on stagecraft in the same test and compared. The libraries themselves are not in the
`test` extra."""
from __future__ import annotations

import operator

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp

APIS = {"jax": (jax, jjnp), "stagecraft": (sc, snp)}


def _outcome(f):
  try:
    return ("ok", repr(f()))
  except Exception as e:  # noqa: BLE001 - the exception is what is compared
    return (type(e).__name__, str(e))


CONVERSIONS = {"int": int, "float": float, "complex": complex, "index": operator.index,
               "len": len, "bool": bool}


@pytest.mark.parametrize("conv", sorted(CONVERSIONS))
@pytest.mark.parametrize("shape,dtype", [((3,), "float32"), ((), "float32"), ((3,), "int32"),
                                         ((), "int32"), ((0,), "float32"), ((1, 1), "int32")])
def test_python_conversions_of_arrays_raise_jaxs_errors(conv, shape, dtype):
  # gymnax/pgx/jaxtyping users convert arrays with int()/float()/len(): JAX refuses any
  # array that is not 0-d ("Only scalar arrays ...; got arr.ndim=1"), even one element
  # (NumPy converts it), and names no shape in its `__index__` or `len()` messages.
  seen = {}
  x = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape) + 1
  for name, (api, jnp) in APIS.items():
    seen[name] = _outcome(lambda: CONVERSIONS[conv](jnp.asarray(x)))
  assert seen["stagecraft"] == seen["jax"]


@pytest.mark.parametrize("case", ["bool_many", "bool_empty", "bool_one", "len_scalar", "hash"])
def test_traced_conversions_raise_jaxs_errors(case):
  # Under jit, `bool()` of a traced array of more (or fewer) than one element is a ValueError
  # about its size (JAX checks the size before the concreteness); a tracer is unhashable in
  # Python's words; `len()` of a 0-d tracer is NumPy's error.
  shape = {"bool_many": (3,), "bool_empty": (0,), "len_scalar": ()}.get(case, (1,))
  f = {"bool_many": bool, "bool_empty": bool, "bool_one": bool, "len_scalar": len,
       "hash": hash}[case]
  seen = {}
  for name, (api, jnp) in APIS.items():
    def g(a):
      f(a)
      return a
    r = _outcome(lambda: api.jit(g)(jnp.zeros(shape)))
    # NB: the first line (the error and where the value came from) is what is compared.
    seen[name] = (r[0], r[1].split("\n")[0])
  assert seen["stagecraft"] == seen["jax"]


def test_hash_of_array_and_string_index_under_runner(installed):
  # Under `python -m stagecraft run`, `hash(x)` names JAX's concrete class (`ArrayImpl`; as
  # JAX's, Arrays have `__hash__ = None`, so Python's message gives the class name without
  # JAX's C module prefix `jaxlib._jax.`), and string indexing names JAX.
  import jax as served_jax   # stagecraft, served as `jax`
  assert served_jax is sc
  import importlib
  real = importlib.import_module("stagecraft.runtime.jax_runtime").jax_module("jax")
  seen = {}
  for name, api in (("jax", real), ("stagecraft", sc)):
    x = api.numpy.arange(3.)
    seen[name] = [_outcome(lambda: hash(x)), _outcome(lambda: x["a"]),
                  _outcome(lambda: {x: 1})]
    seen[name] = [(t, m.replace("jaxlib._jax.ArrayImpl", "ArrayImpl")) for t, m in seen[name]]
  assert seen["stagecraft"] == seen["jax"]


def test_scalar_type_names_as_jaxs():
  # gymnax's tests parametrize over `jnp.bool_`: pytest names the case by its `__name__`,
  # which is `bool` in JAX (its class is named after the dtype).
  seen = {}
  for name, (api, jnp) in APIS.items():
    seen[name] = [(t.__name__, t.__qualname__, t.dtype) for t in (
        jnp.bool_, jnp.bool, jnp.float32, jnp.int8, jnp.uint32, jnp.bfloat16, jnp.complex64)]
  assert seen["stagecraft"] == seen["jax"]


def _array_class_facts(jax_mod):
  import functools
  import pickle
  import typing
  A = jax_mod.Array
  x = jax_mod.numpy.arange(3.)
  seen_in_jit = []

  def f(a):
    seen_in_jit.append(isinstance(a, A))
    return a

  jax_mod.jit(f)(x)

  @functools.singledispatch
  def kind(v):
    return "other"

  kind.register(A, lambda v: "array")
  return [repr(A), A.__name__, A.__qualname__, A.__module__, repr(typing.Optional[A]),
          repr(typing.get_args(jax_mod.typing.ArrayLike)), repr(jax_mod.typing.ArrayLike),
          type(x).__name__, type(x).__qualname__, type(x).__module__, repr(type(x)),
          isinstance(x, A), issubclass(type(x), A), seen_in_jit,
          isinstance(np.zeros(2), A), jax_mod.numpy.ndarray is A,
          kind(x), kind(np.zeros(2)), _outcome(lambda: A(1)),
          _outcome(lambda: pickle.dumps(A)),
          _outcome(lambda: pickle.loads(pickle.dumps(x)).tolist())]


def test_jax_array_class_named_as_jaxs_under_runner(installed):
  # jaxtyping prints `Float[jaxlib._jax.Array, 'a b']` in its type-check errors (its
  # `__name__`), `typing` prints `jax.jaxlib._jax.Array`, and pickling the class fails;
  # `type(x)` is the concrete `ArrayImpl`. isinstance/issubclass/singledispatch on `jax.Array`
  # still see Arrays and tracers.
  import importlib
  real = importlib.import_module("stagecraft.runtime.jax_runtime").jax_module("jax")
  import jax as served
  assert served is sc
  assert _array_class_facts(sc) == _array_class_facts(real)


def test_array_class_is_stagecraft_s_outside_runner():
  # Outside the runner the names are stagecraft's own, and `stagecraft.Array` is the class of
  # every Array.
  x = snp.arange(3.)
  assert type(x) is sc.Array and type(x).__name__ == "Array"
  assert repr(type(x)) == "<class 'stagecraft.runtime.array.Array'>"
  assert snp.ndarray is sc.Array


@pytest.mark.parametrize("case", ["equal", "eq_op", "add", "asarray", "array_list", "jit",
                                  "vmap", "where", "full", "lax_add", "at_set",
                                  "result_type", "maximum", "index", "mul"])
def test_int_enum_members_are_weak_python_scalars(case):
  # jumanji's RobotWarehouse compares actions with `jnp.equal(action, Action.FORWARD)`, an
  # `enum.IntEnum` member: JAX treats a subclass of int/float as that Python scalar (weakly
  # typed), where stagecraft asked NumPy for its dtype ("Cannot interpret ... as a data
  # type"). NB: a float Enum is left out: JAX's result for it depends on what ran before
  # (an OverflowError "Python int F.P too large to convert to int32" after other cases).
  import enum

  class A(enum.IntEnum):
    X = 0
    Y = 1

  seen = {}
  for name, (api, jnp) in APIS.items():
    x = jnp.arange(3)
    f = {"equal": lambda: jnp.equal(x, A.Y), "eq_op": lambda: x == A.Y,
         "add": lambda: jnp.add(x, A.Y), "asarray": lambda: jnp.asarray(A.Y),
         "array_list": lambda: jnp.array([A.X, A.Y]),
         "jit": lambda: api.jit(lambda v: jnp.equal(v, A.Y))(x),
         "vmap": lambda: api.vmap(lambda v: jnp.equal(v, A.Y))(x),
         "where": lambda: jnp.where(x > 0, A.Y, A.X), "full": lambda: jnp.full((2,), A.Y),
         "lax_add": lambda: api.lax.add(x, A.Y),
         "at_set": lambda: jnp.zeros(3).at[A.Y].set(A.Y),
         "result_type": lambda: jnp.result_type(A.Y), "maximum": lambda: jnp.maximum(x, A.Y),
         "index": lambda: x[A.Y], "mul": lambda: x * A.Y}[case]
    r = _outcome(f)
    v = None
    try:
      v = f()
    except Exception:  # noqa: BLE001 - compared through _outcome
      pass
    seen[name] = (r, getattr(getattr(v, "aval", None), "weak_type", None))
  assert seen["stagecraft"] == seen["jax"]


@pytest.mark.parametrize("case", ["sample", "sample_cond", "split", "excluded_key", "raw_keys"])
def test_vectorize_over_typed_keys(case):
  # flowjax's distributions vectorize `_sample(key, condition)` with `jnp.vectorize` over
  # `jr.split(key, n)` (typed keys): the key array maps over its leading axes as any array.
  seen = {}
  for name, (api, jnp) in APIS.items():
    rnd = api.random
    keys = rnd.split(rnd.key(0), 5) if case != "raw_keys" else rnd.split(rnd.PRNGKey(0), 5)
    if case == "sample":
      out = jnp.vectorize(lambda k: rnd.normal(k, (3,)), signature="()->(3)")(keys)
    elif case == "sample_cond":
      out = jnp.vectorize(lambda k, c: rnd.normal(k, (2,)) * c.sum(),
                          signature="(),(2)->(2)")(keys, jnp.ones((4, 1, 2)))
    elif case == "split":
      out = rnd.key_data(jnp.vectorize(lambda k: rnd.split(k, 2), signature="()->(2)")(keys))
    elif case == "excluded_key":
      out = jnp.vectorize(lambda k, x: rnd.uniform(k) + x, excluded={0})(
          rnd.key(1), jnp.arange(3.))
    else:
      out = jnp.vectorize(lambda k: rnd.normal(k), signature="(2)->()")(keys)
    seen[name] = (np.asarray(out).shape, str(np.asarray(out).dtype), np.asarray(out).tolist())
  assert seen["stagecraft"] == seen["jax"]


@pytest.mark.parametrize("shape,axis", [((3,), 1), ((3,), -2), ((2, 3), 2), ((), 0),
                                        ((2, 3), -1), ((2, 3), 0)])
def test_categorical_axis_out_of_range_raises_jaxs_index_error(shape, axis):
  # pgx's `act_randomly` samples `categorical(key, logits, axis=1)`; its api_test passes 1-D
  # logits, where JAX raises NumPy's IndexError (deleting the axis from the shape).
  seen = {}
  for name, (api, jnp) in APIS.items():
    logits = jnp.log(jnp.arange(1., 1. + np.prod(shape)).reshape(shape))
    seen[name] = _outcome(lambda: api.random.categorical(api.random.PRNGKey(0), logits,
                                                         axis=axis).tolist())
  assert seen["stagecraft"] == seen["jax"]
