"""HLO text as JAX's: parameter and instruction names from the MLIR locations (argument
names, name stacks, the user's frames), `op_name` metadata and stack frames in the compiled
module, `as_text(debug_info=True)`, and `set_xla_metadata`'s frontend attributes.

Each test lowers the same source lines with JAX and with stagecraft from one call site (a
loop over both), so the frames in the locations are the same."""
import jax
import jax.numpy as jjnp
import numpy as np
from jax.experimental.xla_metadata import set_xla_metadata as jax_set_xla_metadata

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.experimental.xla_metadata import set_xla_metadata as sc_set_xla_metadata
from stagecraft.interpreters import lowering

LIBS = ((jax, jjnp, jax_set_xla_metadata), (sc, jnp, sc_set_xla_metadata))


def _both(make, *args, **jit_kw):
  """`make(lib, np_, set_xla_metadata)` -> function; lowered by each library's jit from one
  line (so the call stacks in the locations agree)."""
  return [lib.jit(make(lib, np_, md), **jit_kw).lower(*args) for lib, np_, md in LIBS]


def _scoped_metadata(lib, np_, set_xla_metadata):
  def f(x):
    with set_xla_metadata(breakpoint=True):
      y = np_.sin(x) * np_.cos(x)
    return y
  return f


def test_lowered_hlo_names_and_frontend_attributes_are_jaxs():
  theirs, ours = _both(_scoped_metadata, 1.0)
  text = ours.as_text("hlo")
  assert text == theirs.as_text("hlo")
  assert "x.1 = f32[] parameter(0)" in text
  assert 'ROOT mul.1 = f32[] multiply(sin.1, cos.1), frontend_attributes={breakpoint="true"}' in text
  # The StableHLO text (no debug info) stays JAX's, attributes included.
  assert ours.as_text() == theirs.as_text()
  assert 'stablehlo.sine %arg0 {mhlo.frontend_attributes = {breakpoint = "true"}}' in ours.as_text()


def test_debug_info_text_is_jaxs():
  theirs, ours = _both(_scoped_metadata, 1.0)
  text = ours.as_text(debug_info=True)
  assert text == theirs.as_text(debug_info=True)
  assert 'loc("x")' in text and 'loc("jit(f)/sin"(#loc' in text and "callsite(" in text


def test_compiled_text_has_jaxs_names_metadata_and_stack_frames():
  theirs, ours = _both(_scoped_metadata, 1.0)
  text = ours.compile().as_text()
  assert text == theirs.compile().as_text()
  assert 'metadata={op_name="x"}' in text and 'op_name="jit(f)/sin" stack_frame_id=' in text
  assert "allow_spmd_sharding_propagation_to_parameters={true}" in text
  assert "StackFrames" in text and 'FunctionNames' in text


def _pytree_args(lib, np_, md):
  return lambda d, *args: d["a"] @ d["b"][0] - args[0]


def test_parameter_names_follow_argument_paths():
  x = np.ones((2, 2), np.float32)
  theirs, ours = _both(_pytree_args, {"a": x, "b": [np.ones(2, np.float32)]},
                       np.ones(2, np.float32))
  text = ours.as_text("hlo")
  assert text == theirs.as_text("hlo")
  assert "d__a__.1 = f32[2,2]{1,0} parameter(0)" in text and "args_0_.1" in text
  assert ours.compile().as_text() == theirs.compile().as_text()


def _scopes_and_calls(lib, np_, set_xla_metadata):
  @lib.jit
  def inner(x):
    return np_.exp(x) + 1.0

  def h(x, y):
    with lib.named_scope("blk"):
      with set_xla_metadata(a="b"):
        z = inner(x) * y
    return np_.sum(np_.sin(z), axis=0)
  return h


def test_named_scopes_nested_jit_and_reductions_are_jaxs():
  x = np.ones((3, 2), np.float32)
  theirs, ours = _both(_scopes_and_calls, x, x)
  assert ours.as_text("hlo") == theirs.as_text("hlo")
  assert ours.as_text() == theirs.as_text()
  assert ours.as_text(debug_info=True) == theirs.as_text(debug_info=True)
  text = ours.compile().as_text()
  assert text == theirs.compile().as_text()
  assert 'op_name="jit(h)/blk/mul"' in text


def _value_metadata(lib, np_, set_xla_metadata):
  def g(x):
    y = set_xla_metadata(np_.sin(x) * 2.0, tag="val", n=3)
    return np_.cos(y), set_xla_metadata(x, on="arg")   # an argument: nothing to tag
  return g


def test_metadata_on_a_value_tags_its_producer_as_jaxs():
  theirs, ours = _both(_value_metadata, np.ones(3, np.float32))
  assert ours.as_text() == theirs.as_text()
  assert ours.as_text("hlo") == theirs.as_text("hlo")
  assert 'multiply(sin.1, broadcast.1), frontend_attributes={n="3",tag="val"}' in \
      ours.as_text("hlo")
  assert str(sc.make_jaxpr(_value_metadata(sc, jnp, sc_set_xla_metadata))(1.0)) == \
      str(jax.make_jaxpr(_value_metadata(jax, jjnp, jax_set_xla_metadata))(1.0))


def test_metadata_decorator_runs_jitted_methods_inside_the_block():
  outs = []
  for lib, np_, md in LIBS:
    g = md(deco=True)(lib.jit(lambda x: np_.tanh(x)))
    outs.append((g.lower(1.0).as_text(), float(g(0.5)), g.__name__))
  assert outs[0] == outs[1]
  assert 'frontend_attributes = {deco = "true"}' in outs[1][0]


def test_values_and_grad_unchanged_under_metadata():
  def make(lib, np_, md):
    def f(x):
      with md(k="v"):
        return np_.sum(np_.sin(x) ** 2)
    return lib.jit(lib.grad(f))
  x = np.linspace(0, 1, 5).astype(np.float32)
  np.testing.assert_array_equal(make(sc, jnp, sc_set_xla_metadata)(x),
                                make(jax, jjnp, jax_set_xla_metadata)(x))


def test_locations_can_be_left_out_and_stripped():
  f = _scoped_metadata(sc, jnp, sc_set_xla_metadata)
  with lowering.source_locations(False):
    plain = sc.jit(f).lower(1.0).compiler_ir()
  located = sc.jit(f).lower(1.0).compiler_ir()
  assert 'loc("jit(f)/sin")' in plain and __file__ not in plain and __file__ in located
  assert lowering.strip_locations(plain) == lowering.strip_locations(located)
  assert "loc(" not in lowering.strip_locations(located)


def test_quotes_in_metadata_values_are_escaped_as_jaxs():
  def make(lib, np_, set_xla_metadata):
    def f(x):
      with set_xla_metadata(note='say "hi" \\ ok', n=2.5):
        return np_.sin(x)
    return f
  theirs, ours = _both(make, 1.0)
  assert ours.as_text() == theirs.as_text()
  assert ours.as_text("hlo") == theirs.as_text("hlo")


def _helpers(lib, np_, md):
  def helper(x, y):
    return np_.sin(x) * y

  def deeper(x, y):
    return helper(x, y) + helper(y, x)

  def f(x, y):
    return np_.tanh(deeper(x, y))
  return f


def test_frames_of_helpers_inside_the_jitted_function_are_jaxs():
  # The callsite chain of an op bound in a helper holds the helper's callers inside the
  # traced function too (JAX's traceback), then the frames of the jit's call.
  x = np.ones(3, np.float32)
  theirs, ours = _both(_helpers, x, x)
  text = ours.as_text(debug_info=True)
  assert text == theirs.as_text(debug_info=True)
  assert 'loc("_helpers.<locals>.deeper"(' in text
  compiled = ours.compile().as_text()
  assert compiled == theirs.compile().as_text()
  assert '"_helpers.<locals>.helper"' in compiled
