"""vmap's and pmap's argument errors, and the names and docstrings of the functions that
vmap, pmap, grad, value_and_grad, jacfwd, jacrev, hessian and make_jaxpr return: each test
runs the same call under stagecraft and under JAX 0.10.2 (the oracle) and compares."""
import functools

import jax
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from _util import assert_same_error, error_of


def _both(call):
  """`call(lib, numpy)` with stagecraft's and with JAX's modules."""
  assert_same_error(lambda: call(sc, jnp), lambda: call(jax, jax.numpy))


def _two(x, y):
  return x + y


def _star(*args):
  return args[0]


def _with_dict(x, d):
  return x


# -- vmap: inconsistent mapped sizes (JAX's `_mapped_axis_size`) ---------------------------

_INCONSISTENT = {
    # arguments named by the signature; long dtype names; no trailing semicolon
    "two_args": lambda m, n: m.vmap(_two)(n.ones(2), n.ones(3)),
    "lambda": lambda m, n: m.vmap(lambda x, y: x)(n.ones(2), n.ones(3, "int32")),
    "keyword": lambda m, n: m.vmap(_two)(n.ones(2), y=n.ones(3, "int32")),
    # a signature the arguments do not bind to: by position
    "unbindable": lambda m, n: m.vmap(lambda x: x)(n.ones(2), n.ones(3)),
    # *args: the first is JAX's `argument args`, the others `args[i]`
    "star_args": lambda m, n: m.vmap(_star)(n.ones(2), n.ones(3), n.ones(3)),
    "nested": lambda m, n: m.vmap(_with_dict)(n.ones(2), {"a": n.ones(3), "b": n.ones(3)}),
    # grouped by size, most common first ("most axes", then "some axes", then "one axis")
    "three_sizes": lambda m, n: m.vmap(_star)(n.ones(2), n.ones(3), n.ones(2), n.ones((4, 5)),
                                              n.ones(3)),
    "axis_size_first": lambda m, n: m.vmap(_two, axis_size=2)(n.ones(3), n.ones(3)),
    "axis_size_and_args": lambda m, n: m.vmap(_two, axis_size=2)(n.ones(2), n.ones(3)),
    # the axis as given (negative too)
    "negative_axis": lambda m, n: m.vmap(_two, in_axes=(-1, 0))(n.ones((2, 3)), n.ones(2)),
    "axis_one": lambda m, n: m.vmap(_two, in_axes=(1, 0))(n.ones((2, 3)), n.ones(2)),
    "dtypes": lambda m, n: m.vmap(_two)(n.ones(3, "bfloat16"), n.ones(2, "complex64")),
    "numpy_args": lambda m, n: m.vmap(_two)(np.ones(3), np.ones(2, np.float32)),
}


@pytest.mark.parametrize("case", sorted(_INCONSISTENT))
def test_vmap_inconsistent_sizes_message_as_jax(case):
  _both(_INCONSISTENT[case])


def test_vmap_inconsistent_sizes_message_text():
  # (what the comparison above holds, written out)
  _, msg = error_of(lambda: sc.vmap(_star)(jnp.ones(2), jnp.ones(3), jnp.ones(3)))
  assert msg == ("vmap got inconsistent sizes for array axes to be mapped:\n"
                 "  * most axes (2 of them) had size 3, e.g. axis 0 of args[1] of type "
                 "float32[3];\n"
                 "  * one axis had size 2: axis 0 of argument args of type float32[2]")


# -- vmap: nothing to map -------------------------------------------------------------------

_NOTHING_MAPPED = {
    "empty_dict": lambda m, n: m.vmap(lambda d: d)({}),
    "no_args": lambda m, n: m.vmap(lambda *a, **k: 1)(),
    "empty_kwargs": lambda m, n: m.vmap(lambda *a, **k: 1)((), k=[]),
    "none_arg": lambda m, n: m.vmap(lambda d: d)(None),
    "in_axes_none": lambda m, n: m.vmap(lambda x: x, in_axes=None)(n.ones(3)),
    "in_axes_tuple_none": lambda m, n: m.vmap(lambda x: x, in_axes=(None,))(n.ones(3)),
}


@pytest.mark.parametrize("case", sorted(_NOTHING_MAPPED))
def test_vmap_nothing_mapped_message_as_jax(case):
  _both(_NOTHING_MAPPED[case])


def test_vmap_axis_size_without_arguments_still_maps():
  out = sc.vmap(lambda d: jnp.ones(2), axis_size=3)({})
  assert out.shape == (3, 2)
  assert jax.vmap(lambda d: jax.numpy.ones(2), axis_size=3)({}).shape == (3, 2)


# -- vmap: in_axes / out_axes types, checked when vmap is called -----------------------------

_BAD_AXES_AT_WRAP = {
    "in_axes_false": dict(in_axes=False),
    "in_axes_true": dict(in_axes=True),
    "in_axes_dict": dict(in_axes={"a": 0}),
    "in_axes_numpy_int": dict(in_axes=np.int64(0)),
    "in_axes_float": dict(in_axes=0.0),
    "in_axes_bool_leaf": dict(in_axes=(False,)),
    "in_axes_numpy_int_leaf": dict(in_axes=(np.int64(0),)),
    "out_axes_false": dict(out_axes=False),
    "out_axes_float_leaf": dict(out_axes=(0.0,)),
    "out_axes_numpy_int": dict(out_axes=np.int64(0)),
    "out_axes_str": dict(out_axes="a"),
}


@pytest.mark.parametrize("case", sorted(_BAD_AXES_AT_WRAP))
def test_vmap_bad_axes_raise_when_vmap_is_called_as_jax(case):
  kw = _BAD_AXES_AT_WRAP[case]
  _both(lambda m, n: m.vmap(lambda x: x, **kw))


@pytest.mark.parametrize("where", ["in_axes", "out_axes"])
def test_vmap_array_in_axes_leaf_is_a_type_error_as_jax(where):
  _both(lambda m, n: m.vmap(lambda x: x, **{where: (n.array([1.0, 2.0]),)}))
  _both(lambda m, n: m.vmap(lambda x: x, **{where: (n.array([1.0, 2.0]),)})(n.array([1.0, 2.0])))


def test_vmap_list_in_axes_is_a_tuple():
  x = jnp.arange(6.0).reshape(2, 3)
  np.testing.assert_array_equal(sc.vmap(lambda a, b: a * b, in_axes=[1, None])(x, 2.0),
                                jax.vmap(lambda a, b: a * b, in_axes=[1, None])(
                                    np.asarray(x), 2.0))


def test_vmap_python_scalar_arguments_as_jax():
  _both(lambda m, n: m.vmap(lambda x: x)(1.0))
  out = sc.vmap(_two, in_axes=(0, None))(jnp.ones(2), 1.0)
  np.testing.assert_array_equal(out, np.full(2, 2.0, np.float32))


# -- pmap --------------------------------------------------------------------------------------

_PMAP = {
    # checked when pmap is called (JAX's `type(leaf) is int`)
    "in_axes_false": lambda m, n: m.pmap(lambda x: x, in_axes=False),
    "in_axes_bool_leaf": lambda m, n: m.pmap(lambda x: x, in_axes=(False,)),
    "in_axes_float": lambda m, n: m.pmap(lambda x: x, in_axes=0.0),
    "out_axes_false": lambda m, n: m.pmap(lambda x: x, out_axes=False),
    "out_axes_array_leaf": lambda m, n: m.pmap(lambda x: x, out_axes=(n.array([1.0, 2.0]),)),
    # no argument mapped: JAX's pmap message, with an axis_size too
    "empty": lambda m, n: m.pmap(lambda d: d)({}),
    "empty_axis_size": lambda m, n: m.pmap(lambda d: d, axis_size=2)({}),
    "in_axes_none": lambda m, n: m.pmap(lambda x: x, in_axes=None)(n.ones(3)),
    "in_axes_none_axis_size": lambda m, n: m.pmap(lambda x: x, in_axes=None, axis_size=2)(
        n.ones(3)),
    "python_scalar": lambda m, n: m.pmap(lambda x: x)(1.0),
    "axis_size_mismatch": lambda m, n: m.pmap(_two, axis_size=2)(n.ones(3), n.ones(3)),
    # in_axes that is no prefix of the arguments: JAX's pmap message
    "in_axes_dict": lambda m, n: m.pmap(lambda x: x, in_axes={"a": 0})(n.ones(2)),
    "in_axes_dict_kwargs": lambda m, n: m.pmap(_two, in_axes={"a": 0})(n.ones(2),
                                                                      y=n.ones(2)),
}


@pytest.mark.parametrize("case", sorted(_PMAP))
def test_pmap_axes_errors_as_jax(case):
  _both(_PMAP[case])


def test_pmap_inconsistent_sizes_in_vmaps_words():
  # NB: JAX 0.10.2's pmap (over shard_map) leaves this to its sharding checks
  # (IndivisibleError); stagecraft names the arguments as vmap does.
  _, msg = error_of(lambda: sc.pmap(_two)(jnp.ones(2), y=jnp.ones(3)))
  assert msg == ("pmap got inconsistent sizes for array axes to be mapped:\n"
                 "  * one axis had size 2: axis 0 of argument x of type float32[2];\n"
                 "  * one axis had size 3: axis 0 of kwargs['y'] of type float32[3]")


# -- names and docstrings ------------------------------------------------------------------

def _documented(x, y):
  """Doc of f."""
  return x


def _undocumented(x):
  return x


def _braces(x):
  """Has {braces}."""
  return x


class _C:
  def m(self, x):
    return x


def _annotated(x: int) -> int:
  return x


_FUNS = {"documented": _documented, "undocumented": _undocumented,
         "partial": functools.partial(_undocumented), "method": _C().m,
         "lambda": lambda x: x, "braces": _braces, "annotated": _annotated}


def _names(w, fn):
  wrapped = getattr(w, "__wrapped__", None)
  return (w.__name__, w.__qualname__.replace("reraise_with_filtered_traceback", "<boundary>"),
          w.__doc__, w.__module__, w.__annotations__, wrapped is fn,
          getattr(wrapped, "__name__", None))


@pytest.mark.parametrize("transform", ["vmap", "make_jaxpr", "pmap"])
@pytest.mark.parametrize("fun", sorted(_FUNS))
def test_names_and_docstrings_as_jax(transform, fun):
  fn = _FUNS[fun]
  assert _names(getattr(sc, transform)(fn), fn) == _names(getattr(jax, transform)(fn), fn)


@pytest.mark.parametrize("transform", ["grad", "value_and_grad", "jacfwd", "jacrev",
                                       "jacobian", "hessian"])
@pytest.mark.parametrize("argnums", [0, 1, (0, 1), [0, 1]], ids=str)
@pytest.mark.parametrize("fun", ["documented", "partial", "method", "braces"])
def test_derivative_names_and_docstrings_as_jax(transform, argnums, fun):
  fn = _FUNS[fun]
  assert (_names(getattr(sc, transform)(fn, argnums=argnums), fn) ==
          _names(getattr(jax, transform)(fn, argnums=argnums), fn))


def test_docstrings_text():
  # (what the comparisons above hold, written out)
  assert sc.vmap(_documented).__doc__ == (
      "Vectorized version of _documented. Takes similar arguments as _documented but with "
      "additional array axes over which _documented is mapped.\n\nOriginal documentation:"
      "\n\nDoc of f.")
  assert sc.grad(_undocumented, argnums=[0, 1]).__doc__.startswith(
      "Gradient of _undocumented with respect to positional argument(s) [0, 1]. ")
  assert sc.make_jaxpr(_undocumented).__name__ == "make_jaxpr(_undocumented)"
  assert sc.make_jaxpr(_undocumented).__doc__ == ""
