"""What JAX's own tutorials print, printed the same here (found by rerunning JAX's docs pages
under `python -m stagecraft run` and diffing with JAX 0.10.2's output).

Each test runs the same code on JAX and on stagecraft and compares values, printed forms or
exception texts.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stagecraft
import stagecraft.numpy as snp
from stagecraft import compat

from _util import served


def _outcome(thunk):
  try:
    return ("ok", thunk())
  except Exception as e:   # noqa: BLE001 (the exception is what is compared)
    return (type(e).__name__, str(e))


# ---------------------------------------------------------------------------
# Pytrees tutorial: a dict whose keys cannot be sorted together.

UNSORTABLE = {1: 7, "y": 42}


@pytest.mark.parametrize("call", [
    lambda m: m.tree.map(lambda x: x + 1, UNSORTABLE),
    lambda m: m.tree.leaves(UNSORTABLE),
    lambda m: m.tree.structure({"a": [UNSORTABLE]}),
    lambda m: m.tree_util.tree_flatten(UNSORTABLE),
    lambda m: m.tree_util.tree_flatten_with_path({"k": UNSORTABLE}),
    lambda m: m.tree_util.tree_map_with_path(lambda p, x: x, UNSORTABLE),
], ids=["tree.map", "tree.leaves", "nested structure", "tree_flatten", "with_path",
        "map_with_path"])
def test_unsortable_dict_keys_raise_jax_error(call):
  want, got = _outcome(lambda: call(jax)), _outcome(lambda: call(stagecraft))
  assert want[0] == "ValueError"
  assert got == want


def test_sortable_dict_keys_of_mixed_types_flatten_as_jax():
  tree = {2: 1.0, 1.5: 2.0, True: 3.0}   # int, float and bool keys compare
  assert stagecraft.tree.leaves(tree) == jax.tree.leaves(tree)
  # checked once per treedef: a second flatten of the same structure agrees too
  assert stagecraft.tree.leaves(tree) == jax.tree.leaves(tree)
  assert (str(stagecraft.tree.structure(tree)) == str(jax.tree.structure(tree)))


# ---------------------------------------------------------------------------
# Custom pytrees tutorial: jacobian checks its inputs with a tree_map, so a pytree class whose
# constructor converts its field meets None.


def _my_tree_class(m):
  class MyTree:
    def __init__(self, a):
      self.a = m.numpy.asarray(a)
  m.tree_util.register_pytree_node(MyTree, lambda t: ((t.a,), None),
                                   lambda _, args: MyTree(*args))
  return MyTree


@pytest.mark.parametrize("which", ["jacobian", "jacrev", "jacfwd"])
def test_jacobian_of_converting_pytree_class_raises_as_jax(which):
  def run(m):
    cls = _my_tree_class(m)
    tree = cls(m.numpy.arange(5.0))
    return _outcome(lambda: getattr(m, which)(lambda x: x)(tree))
  want, got = run(jax), run(stagecraft)
  assert want == ("ValueError", "None is not a valid value for jnp.array")
  assert got == want


def test_jacobian_output_pytree_class_is_rebuilt_as_jax():
  # the output check is a tree_map too: a class that stores its field as given sees None
  def run(m):
    class Box:
      def __init__(self, v):
        self.v = v
    m.tree_util.register_pytree_node(Box, lambda b: ((b.v,), None),
                                     lambda _, c: Box(*c))
    seen = []
    orig = Box.__init__

    def init(self, v):
      seen.append(type(v).__name__)
      orig(self, v)
    Box.__init__ = init
    jac = m.jacfwd(lambda x: Box(x * 2.0))(m.numpy.ones(2))
    return seen, np.asarray(jac.v)
  (want_seen, want), (got_seen, got) = run(jax), run(stagecraft)
  np.testing.assert_array_equal(got, want)
  assert "NoneType" in want_seen and "NoneType" in got_seen


# ---------------------------------------------------------------------------
# Thinking in JAX: `type(x)` of an Array under the runner.


def test_array_type_repr_is_jax_concrete_class_while_served():
  want = repr(type(jnp.arange(3)))
  with served():
    got = repr(type(snp.arange(3)))
  assert got == want == "<class 'jaxlib._jax.ArrayImpl'>"
  if not compat.is_installed():
    assert repr(type(snp.arange(3))) == "<class 'stagecraft.runtime.array.Array'>"
  assert isinstance(snp.arange(3), stagecraft.Array)


# ---------------------------------------------------------------------------
# custom_vjp / custom_jvp: a missing `def...` attribute is looked up on the wrapped function
# (the custom-derivatives tutorial's `defvjp_with_logs` cell).


@pytest.mark.parametrize("kind,attr", [("custom_vjp", "defvjp_with_logs"),
                                       ("custom_jvp", "defjvps_typo"),
                                       ("custom_vjp", "not_a_def")])
def test_custom_derivative_missing_attribute_as_jax(kind, attr):
  def run(m):
    f = getattr(m, kind)(lambda x: x)
    try:
      getattr(f, attr)
    except AttributeError as e:
      return str(e)
    return "no error"
  assert run(stagecraft) == run(jax)


# ---------------------------------------------------------------------------
# shard_map tutorial: the eager replication error and the printed mesh of a context mesh.


def _mesh(m, types):
  return m.make_mesh((2,), ("i",), axis_types=(types(m),))


def test_eager_shard_map_replication_error_text_as_jax():
  def run(m):
    mesh = _mesh(m, lambda m: m.sharding.AxisType.Explicit)
    with m.set_mesh(mesh):
      x = m.device_put(m.numpy.arange(6.), m.sharding.PartitionSpec("i"))
      return _outcome(lambda: m.shard_map(lambda x: x, in_specs=m.sharding.PartitionSpec("i"),
                                          out_specs=m.sharding.PartitionSpec())(x))
  want, got = run(jax), run(stagecraft)
  assert want[0] == "ValueError" and "'_rem_singleton'" in want[1]
  assert got == want


def test_jitted_shard_map_replication_error_names_the_function_as_jax():
  def run(m):
    mesh = _mesh(m, lambda m: m.sharding.AxisType.Explicit)
    with m.set_mesh(mesh):
      x = m.device_put(m.numpy.arange(6.), m.sharding.PartitionSpec("i"))

      def ident(x):
        return x
      f = m.shard_map(ident, in_specs=m.sharding.PartitionSpec("i"),
                      out_specs=m.sharding.PartitionSpec())
      return _outcome(lambda: m.jit(f)(x))
  want, got = run(jax), run(stagecraft)
  assert "'ident'" in want[1]
  assert got == want


@pytest.mark.parametrize("from_context", [True, False])
def test_shard_map_jaxpr_prints_the_abstract_mesh_of_a_context_mesh(from_context):
  def run(m):
    P = m.sharding.PartitionSpec
    mesh = _mesh(m, lambda m: m.sharding.AxisType.Explicit)
    with m.set_mesh(mesh):
      x = m.device_put(m.numpy.arange(6.), P("i"))
      y = m.numpy.arange(3.)
      kw = {} if from_context else {"mesh": mesh}
      f = m.shard_map(lambda x, y: x * y, in_specs=(P("i"), P()), out_specs=P("i"), **kw)
      return str(m.make_jaxpr(f)(x, y)), np.asarray(f(x, y))
  (want, want_v), (got, got_v) = run(jax), run(stagecraft)
  assert ("AbstractMesh(" in want) == from_context
  assert got == want
  np.testing.assert_array_equal(got_v, want_v)


# ---------------------------------------------------------------------------
# Tracebacks: under the runner the filtered traceback's note names JAX, as JAX's does.


def _frame_notes(m):
  try:
    m.jit(lambda x: x.reshape(7))(m.numpy.ones(3))
  except TypeError as e:
    return str(e), [n for n in getattr(e, "__notes__", []) if "internal frames" in n]
  raise AssertionError("no error")


def test_traceback_note_names_jax_while_served():
  want = _frame_notes(jax)
  assert want[1], "JAX attached no traceback note"
  with served():
    got = _frame_notes(stagecraft)
  assert got == want
  if not compat.is_installed():
    own = _frame_notes(stagecraft)
    assert own[0] == want[0] and "stagecraft has removed its internal frames" in own[1][0]


# ---------------------------------------------------------------------------
# The stages print as JAX's objects under the runner (optax's microbatching example prints a
# Compiled), and with the function's name otherwise.


def _stage_reprs(m):
  f = m.jit(lambda x: x + 1)
  t = f.trace(1.0)
  lo = f.lower(1.0)
  return [repr(o).split(" at 0x")[0] for o in (t, lo, lo.compile())]


def test_stage_reprs_as_jax_while_served():
  want = _stage_reprs(jax)
  with served():
    got = _stage_reprs(stagecraft)
  assert got == want == ["<jax._src.stages.Traced object", "<jax._src.stages.Lowered object",
                         "<jax._src.stages.Compiled object"]
  if not compat.is_installed():
    assert _stage_reprs(stagecraft) == ["Traced(<lambda>)", "Lowered(<lambda>)",
                                        "Compiled(<lambda>)"]
