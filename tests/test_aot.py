"""AOT stages: jit(f).trace / .lower / .compile — every example of reference/aot.md with its
documented result, argument checks at call time, refusal of transformations, analyses."""
import os
import re

import jax
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import stages
from stagecraft.core import ShapeDtypeStruct
from stagecraft.runtime import dispatch


def f(x, y):
  return 2 * x + y


I32 = ShapeDtypeStruct((), np.dtype("int32"))
MISMATCH = ("Argument types differ from the types for which this computation was compiled. "
            "Perhaps you are calling the compiled executable with a different enable_x64 mode "
            "than when it was AOT compiled? The mismatches are:\n")


def _body(text):
  """The func.func body lines of a StableHLO module, stripped."""
  lines = text.strip().splitlines()
  start = next(i for i, l in enumerate(lines) if "func.func" in l)
  return [l.strip() for l in lines[start + 1:] if l.strip() not in ("}", "")]


# ---------------------------------------------------------------------------
# The reference's examples


def test_reference_lower_as_text_compile_cost_call():
  lowered = sc.jit(f).lower(3, 4)
  text = lowered.as_text()
  assert text == jax.jit(f).lower(3, 4).as_text()   # printed as JAX's, byte for byte
  assert text.startswith("module @jit_f")
  assert ("func.func public @main(%arg0: tensor<i32>, %arg1: tensor<i32>) -> (tensor<i32> "
          '{jax.result_info = "result"})') in text
  assert _body(text) == [
      "%c = stablehlo.constant dense<2> : tensor<i32>",
      "%0 = stablehlo.multiply %c, %arg0 : tensor<i32>",
      "%1 = stablehlo.add %0, %arg1 : tensor<i32>",
      "return %1 : tensor<i32>",
  ]
  compiled = lowered.compile()
  assert compiled.cost_analysis()[0]["flops"] == 2.0
  assert compiled.cost_analysis()["flops"] == 2.0
  out = compiled(3, 4)
  assert isinstance(out, sc.Array) and out.dtype == np.int32 and int(out) == 10


def test_reference_shape_dtype_struct_arguments():
  out = sc.jit(f).lower(I32, I32).compile()(3, 4)
  assert int(out) == 10 and out.dtype == np.int32


def test_reference_any_object_with_shape_and_dtype():
  class Spec:
    shape = (2,)
    dtype = np.dtype("float32")

  c = sc.jit(f).lower(Spec(), Spec()).compile()
  np.testing.assert_allclose(c(np.ones(2, np.float32), np.ones(2, np.float32)), [3.0, 3.0])
  # NumPy arrays and Arrays as lowering arguments
  c = sc.jit(f).lower(np.ones(2, np.float32), jnp.ones(2)).compile()
  np.testing.assert_allclose(c(jnp.ones(2), np.zeros(2, np.float32)), [2.0, 2.0])


def test_reference_shape_mismatch_message():
  x_1d = y_1d = jnp.arange(3)
  with pytest.raises(TypeError) as e:
    sc.jit(f).lower(I32, I32).compile()(x_1d, y_1d)
  assert str(e.value).startswith(
      MISMATCH + "Argument 'x' compiled with int32[] and called with int32[3]\n"
      "Argument 'y' compiled with int32[] and called with int32[3]\n")


def test_reference_dtype_mismatch_message():
  x_f = y_f = jnp.float32(72.)
  with pytest.raises(TypeError) as e:
    sc.jit(f).lower(I32, I32).compile()(x_f, y_f)
  assert str(e.value).startswith(
      MISMATCH + "Argument 'x' compiled with int32[] and called with float32[]\n"
      "Argument 'y' compiled with int32[] and called with float32[]\n")
  assert "lower and compile again" in str(e.value)


def test_reference_static_argument_folded():
  lowered_with_x = sc.jit(f, static_argnums=0).lower(7, 8)
  text = lowered_with_x.as_text()
  assert text == jax.jit(f, static_argnums=0).lower(7, 8).as_text()
  assert "func.func public @main(%arg0: tensor<i32>)" in text
  assert _body(text) == [
      "%c = stablehlo.constant dense<14> : tensor<i32>",
      "%0 = stablehlo.add %c, %arg0 : tensor<i32>",
      "return %0 : tensor<i32>",
  ]
  assert int(lowered_with_x.compile()(5)) == 19


def test_reference_static_argument_must_be_concrete():
  with pytest.raises(TypeError, match=re.escape(
      "unsupported operand type(s) for *: 'int' and 'ShapeDtypeStruct'")):
    sc.jit(f, static_argnums=0).lower(I32, I32)
  assert int(sc.jit(f, static_argnums=0).lower(10, I32).compile()(5)) == 25


def _g(x):
  assert x.shape == (3, 2)
  return x @ jnp.ones(2)


def _make_z(*shape):
  return jnp.arange(int(np.prod(shape))).reshape(shape)


def test_reference_vmap_of_jit_works_and_of_compiled_raises():
  z, zs = _make_z(3, 2), _make_z(4, 3, 2)
  g_jit = sc.jit(_g)
  g_aot = sc.jit(_g).lower(z).compile()
  np.testing.assert_array_equal(
      sc.vmap(g_jit)(zs), [[1., 5., 9.], [13., 17., 21.], [25., 29., 33.], [37., 41., 45.]])
  with pytest.raises(TypeError, match=re.escape(
      "Cannot apply JAX transformations to a function lowered and compiled for a "
      "particular signature. Detected argument of Tracer type <class '") + r".*BatchTracer'>"):
    sc.vmap(g_aot)(zs)
  np.testing.assert_array_equal(g_aot(z), [1., 5., 9.])


def test_grad_and_jit_of_compiled_raise():
  h_aot = sc.jit(lambda x: jnp.sin(x).sum()).lower(jnp.ones(3)).compile()
  for transform, tracer in [(sc.grad, "JVPTracer"), (sc.jit, "DynamicJaxprTracer")]:
    with pytest.raises(TypeError, match=r"Cannot apply JAX transformations .* "
                                        r"Detected argument of Tracer type <class '.*"
                                        + tracer):
      transform(h_aot)(jnp.ones(3))
  with pytest.raises(TypeError, match="Cannot apply JAX transformations"):
    sc.jvp(h_aot, (jnp.ones(3),), (jnp.ones(3),))


# ---------------------------------------------------------------------------
# Traced


def test_traced_jaxpr_out_info_and_lower():
  c = np.float32(3.0) * np.ones(4, np.float32)   # a closed-over const

  def h(x, y):
    return {"s": x * c, "t": y.astype(jnp.int32)}

  traced = sc.jit(h).trace(jnp.ones(4), ShapeDtypeStruct((2,), np.float32))
  jaxpr = traced.jaxpr
  assert [str(a) for a in jaxpr.in_avals] == ["float32[4]", "float32[2]"]   # as JAX
  assert len(jaxpr.jaxpr.constvars) == len(jaxpr.consts)
  assert traced.out_info == {"s": ShapeDtypeStruct((4,), np.float32),
                             "t": ShapeDtypeStruct((2,), np.int32)}
  lowered = traced.lower()
  assert lowered.out_info == traced.out_info
  out = lowered.compile()(jnp.ones(4), np.array([1.5, 2.5], np.float32))
  np.testing.assert_allclose(out["s"], [3.0] * 4)
  np.testing.assert_array_equal(out["t"], [1, 2])


def test_trace_reuses_the_jit_trace_cache():
  count = [0]

  def h(x):
    count[0] += 1
    return x + 1

  j = sc.jit(h)
  j(jnp.ones(3))
  j.lower(jnp.ones(3)).compile()
  j.trace(ShapeDtypeStruct((3,), np.float32))
  assert count[0] == 1


# ---------------------------------------------------------------------------
# Lowered


def test_lowered_hlo_text_compiler_ir_and_cost_analysis():
  lowered = sc.jit(lambda x: jnp.sin(x) * 2.0).lower(jnp.ones((2, 3)))
  hlo = lowered.as_text("hlo")
  assert hlo.startswith("HloModule jit_") and "sine(" in hlo and "f32[2,3]" in hlo
  comp = lowered.compiler_ir("hlo")
  assert comp.as_hlo_text() == hlo
  assert isinstance(comp.as_serialized_hlo_module_proto(), bytes)
  assert "digraph" in comp.as_hlo_dot_graph()
  # compiler_ir() is the module as lowered (what XLA compiles); as_text() prints it as JAX
  # prints modules (MLIR's custom forms, `jax.result_info`): the same program.
  assert lowered.compiler_ir() == lowered.compiler_ir("stablehlo")
  assert lowered.as_text() == jax.jit(lambda x: jax.numpy.sin(x) * 2.0).lower(
      np.ones((2, 3), np.float32)).as_text().replace("jit__lambda", "jit__lambda")
  assert "stablehlo.sine" in lowered.compiler_ir()
  costs = lowered.cost_analysis()
  assert costs["flops"] == 6.0   # the multiply; XLA counts sine as transcendentals
  assert costs[0] is costs
  with pytest.raises(ValueError, match="unknown dialect 'mhlo'"):
    lowered.as_text("mhlo")
  with pytest.raises(ValueError, match="unknown dialect"):
    lowered.compiler_ir("llvm")


def test_lowered_trees_args_info_out_info():
  def h(a, b, *, k):
    return (a["w"] @ b, k)

  args = ({"w": np.ones((2, 3), np.float32)}, np.ones(3, np.float32))
  # no output has b's type: JAX warns at lowering that the donation is unusable
  with pytest.warns(UserWarning, match=r"Some donated buffers were not usable: float32\[3\]"):
    lowered = sc.jit(h, donate_argnums=1).lower(*args, k=np.int32(1))
  assert lowered.in_tree == sc.tree_util.tree_structure((args, {"k": 1}))
  assert lowered.out_tree == sc.tree_util.tree_structure((1, 2))
  (a_info, b_info), kw_info = lowered.args_info
  assert a_info["w"].shape == (2, 3) and a_info["w"].dtype == np.float32
  assert not a_info["w"].donated and b_info.donated and not kw_info["k"].donated
  assert lowered.out_info == (ShapeDtypeStruct((2,), np.float32),
                              ShapeDtypeStruct((), np.int32))
  compiled = lowered.compile()
  assert compiled.in_tree == lowered.in_tree and compiled.out_tree == lowered.out_tree
  assert compiled.args_info == lowered.args_info


def test_shape_dtype_struct_keeps_weak_type():
  weak = ShapeDtypeStruct((), np.float32, weak_type=True)
  lowered = sc.jit(lambda x: x * jnp.ones(2, jnp.bfloat16)).lower(weak)
  # a weak f32 scalar times bf16 stays bf16 (jax#23302: JAX drops weak_type here)
  assert lowered.out_info == ShapeDtypeStruct((2,), jnp.bfloat16)
  assert lowered.args_info[0][0].weak_type
  strong = sc.jit(lambda x: x * jnp.ones(2, jnp.bfloat16)).lower(
      ShapeDtypeStruct((), np.float32))
  assert strong.out_info == ShapeDtypeStruct((2,), np.float32)


# ---------------------------------------------------------------------------
# Compiled


def test_compiled_as_text_memory_analysis_runtime_executable():
  compiled = sc.jit(lambda x, y: jnp.sin(x) + y).lower(jnp.ones(8), jnp.ones(8)).compile()
  text = compiled.as_text()
  assert "HloModule" in text and "is_scheduled=true" in text
  mem = compiled.memory_analysis()
  assert mem.argument_size_in_bytes == 64 and mem.output_size_in_bytes == 32
  exe = compiled.runtime_executable()
  assert hasattr(exe, "execute_sharded")
  assert compiled.cost_analysis()["flops"] > 0


def test_compile_with_compiler_options():
  lowered = sc.jit(lambda x: jnp.exp(x) + 1.0).lower(jnp.ones(4))
  compiled = lowered.compile({"xla_cpu_enable_fast_math": False})
  np.testing.assert_allclose(compiled(jnp.zeros(4)), [2.0] * 4)
  with pytest.raises(TypeError, match="compiler_options"):
    lowered.compile({"xla_cpu_enable_fast_math": [1]})


def test_compiled_matches_jax_oracle():
  def h(x, w):
    return jnp.tanh(x @ w).sum(axis=0)

  x = np.random.RandomState(0).randn(4, 3).astype(np.float32)
  w = np.random.RandomState(1).randn(3, 5).astype(np.float32)
  ours = sc.jit(h).lower(x, w).compile()(x, w)
  ref = jax.jit(lambda x, w: jax.numpy.tanh(x @ w).sum(axis=0))(x, w)
  np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)


def test_compiled_weak_and_strong_scalars_typematch():
  compiled = sc.jit(f).lower(I32, I32).compile()
  assert int(compiled(np.int32(3), 4)) == 10
  with pytest.raises(TypeError, match=re.escape("Argument 'y' compiled with int32[] and called "
                                                "with float32[]")):
    compiled(3, 4.0)


def test_pruned_arguments_are_still_type_checked():
  def h(x, unused):
    return x * 2

  lowered = sc.jit(h).lower(jnp.ones(3), jnp.ones(2))
  assert "%arg1" not in lowered.as_text()   # DCE pruned it
  compiled = lowered.compile()
  np.testing.assert_allclose(compiled(jnp.ones(3), jnp.ones(2)), [2.0] * 3)
  with pytest.raises(TypeError, match=re.escape(
      "Argument 'unused' compiled with float32[2] and called with float32[5]")):
    compiled(jnp.ones(3), jnp.ones(5))


def test_mismatch_names_key_paths_and_kwargs():
  def h(params, x, *, scale):
    return params["w"] * x * scale

  p = {"w": np.ones(3, np.float32)}
  compiled = sc.jit(h).lower(p, np.ones(3, np.float32), scale=np.float32(2)).compile()
  with pytest.raises(TypeError) as e:
    compiled({"w": np.ones(4, np.float32)}, np.ones(3, np.int32), scale=np.float32(2))
  msg = str(e.value)
  assert "Argument 'params['w']' compiled with float32[3] and called with float32[4]" in msg
  assert "Argument 'x' compiled with float32[3] and called with int32[3]" in msg
  with pytest.raises(TypeError) as e:
    compiled(p, np.ones(3, np.float32), scale=np.ones(2, np.float32))
  assert "Argument 'scale' compiled with float32[] and called with float32[2]" in str(e.value)


def test_mismatch_lists_at_most_five():
  def h(*xs):
    return sum(xs)

  compiled = sc.jit(h).lower(*[np.float32(1)] * 7).compile()
  with pytest.raises(TypeError) as e:
    compiled(*[np.ones(2, np.float32)] * 7)
  lines = str(e.value).splitlines()
  assert lines[1] == "Argument 'xs[0]' compiled with float32[] and called with float32[2]"
  assert lines[6] == "and 2 more"


def test_pytree_structure_mismatch_names_both_structures():
  compiled = sc.jit(lambda d: d["a"] + 1).lower({"a": jnp.ones(2)}).compile()
  with pytest.raises(TypeError) as e:
    compiled({"a": jnp.ones(2), "b": jnp.ones(2)})
  msg = str(e.value)
  assert msg == ("Function compiled with input pytree does not match the input pytree it was "
                 "called with. There are 1 mismatches, including:\n    * at args[0], seen "
                 "<class 'dict'> with 1 child but now given <class 'dict'> with 2 children, so "
                 "the numbers of children do not match, with the symmetric difference of key "
                 "sets: {'b'}")
  with pytest.raises(TypeError, match="does not match the input pytree"):
    compiled(jnp.ones(2))


def test_static_args_left_out_of_compiled_call():
  def h(x, n, *, mode):
    return x * n if mode == "mul" else x + n

  j = sc.jit(h, static_argnums=1, static_argnames="mode")
  compiled = j.lower(jnp.ones(2), 3, mode="mul").compile()
  np.testing.assert_allclose(compiled(jnp.ones(2)), [3.0, 3.0])
  assert "dense<3.000000e+00> : tensor<f32>" in j.lower(jnp.ones(2), 3, mode="mul").as_text()
  with pytest.raises(TypeError, match="does not match the input pytree"):
    compiled(jnp.ones(2), 3)


def test_non_array_argument_to_compiled_names_path():
  compiled = sc.jit(f).lower(I32, I32).compile()
  with pytest.raises(TypeError, match="at path y"):
    compiled(1, "two")


def test_lower_does_not_compile_until_asked():
  lowered = sc.jit(lambda x: x * 3.25 - 1.5).lower(ShapeDtypeStruct((7,), np.float32))
  before = dispatch.compile_count[0]
  lowered.as_text()
  lowered.cost_analysis()
  assert dispatch.compile_count[0] == before
  lowered.compile()
  assert dispatch.compile_count[0] == before + 1


def test_donated_argument_consumed_by_compiled_call():
  compiled = sc.jit(lambda x: x + 1, donate_argnums=0).lower(jnp.ones(4)).compile()
  assert compiled.args_info[0][0].donated
  x = jnp.ones(4)
  np.testing.assert_allclose(compiled(x), [2.0] * 4)


def test_module_exports():
  assert {"Traced", "Lowered", "Compiled", "ArgInfo"} <= set(stages.__all__)
  assert isinstance(sc.jit(f).trace(1, 2), stages.Traced)
  assert isinstance(sc.jit(f).lower(1, 2), stages.Lowered)
  assert isinstance(sc.jit(f).lower(1, 2).compile(), stages.Compiled)


# ---------------------------------------------------------------------------
# Compiled.serialize / stages.deserialize_compiled


def test_serialize_round_trip_in_a_fresh_process(tmp_path):
  import subprocess
  import sys
  import textwrap
  from stagecraft import stages
  w = np.arange(3, dtype=np.float32)

  def f(x, d):   # closes over w (a constant of the executable)
    return {"y": x * w + d["b"], "s": jnp.sum(x)}
  compiled = sc.jit(f).lower(np.ones(3, np.float32), {"b": np.float32(2)}).compile()
  data = compiled.serialize()
  again = stages.deserialize_compiled(data, compiled.in_tree, compiled.out_tree)
  out = again(np.ones(3, np.float32), {"b": np.float32(2)})
  np.testing.assert_allclose(out["y"], w + 2)
  with pytest.raises(TypeError, match=re.escape("Argument 'x' compiled with float32[3] and called "
                                                "with float32[4]")):
    again(np.ones(4, np.float32), {"b": np.float32(2)})
  (tmp_path / "exe.bin").write_bytes(data)
  script = textwrap.dedent(f"""
      import numpy as np, optree
      import stagecraft as sc
      from stagecraft import stages
      from stagecraft.runtime import dispatch
      in_tree = optree.tree_structure(((np.ones(3), {{"b": 1.0}}), {{}}),
                                      namespace=sc.tree_util.NAMESPACE)
      out_tree = optree.tree_structure({{"s": 1.0, "y": 1.0}}, namespace=sc.tree_util.NAMESPACE)
      c = stages.deserialize_compiled(open({str(tmp_path / "exe.bin")!r}, "rb").read(),
                                      in_tree, out_tree)
      out = c(np.full(3, 2, np.float32), {{"b": np.float32(1)}})
      print(np.asarray(out["y"]).tolist(), float(out["s"]), dispatch.compile_count[0])
  """)
  env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
  res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       env=env, timeout=120)
  assert res.returncode == 0, res.stderr
  assert res.stdout.split() == ["[1.0,", "3.0,", "5.0]", "6.0", "0"]


def test_deserialize_errors():
  from stagecraft import stages
  compiled = sc.jit(lambda x: x + 1).lower(np.float32(1)).compile()
  data = compiled.serialize()
  with pytest.raises(ValueError, match="the trees do not fit the executable"):
    stages.deserialize_compiled(data, sc.tree_util.tree_structure((1.0, 2.0)),
                                compiled.out_tree)
  with pytest.raises(ValueError):
    stages.deserialize_compiled(data[:-7], compiled.in_tree, compiled.out_tree)
  with pytest.raises(TypeError, match="in_tree must be the treedef .* got 0 of type int"):
    stages.deserialize_compiled(data, 0, compiled.out_tree)
  with pytest.raises(TypeError, match="out_tree must be the treedef"):
    stages.deserialize_compiled(data, compiled.in_tree, "tree")
  # None (a stagecraft extension): the tree stored in the bytes.
  again = stages.deserialize_compiled(data, compiled.in_tree, None)
  assert again.out_tree == compiled.out_tree
  assert float(again(np.float32(2))) == 3.0


@pytest.mark.parametrize("call", [
    lambda c: c((1.0, 2.0), {"a": 1.0}, z=3.0),          # a tuple of another length
    lambda c: c((1.0,), {"b": 1.0}, z=3.0),               # dict keys differ, and a length
    lambda c: c((1.0,), [1.0]),                           # a list for a dict; kwargs missing
    lambda c: c(1.0, {"a": 1.0}, w=3.0),                  # a leaf for a tuple; other kwarg
    lambda c: c((1.0,), {"a": (1.0,)}, z=None),           # a tuple and None for leaves
])
def test_pytree_and_type_mismatch_messages_equal_jax(call):
  import jax
  args = ((np.float32(1),), {"a": np.float32(1)})
  msgs = []
  for lib in (sc, jax):
    c = lib.jit(lambda x, y, z=1: x).lower(*args, z=np.float32(3)).compile()
    with pytest.raises(TypeError) as e:
      call(c)
    msgs.append(str(e.value))
  assert msgs[0] == msgs[1]


def test_dtype_mismatch_message_equals_jax_up_to_the_hint():
  import jax
  msgs = []
  for lib in (sc, jax):
    c = lib.jit(lambda x, y: x + y).lower(np.arange(3, dtype=np.int32), np.float32(1)).compile()
    with pytest.raises(TypeError) as e:
      c(np.arange(3.0, dtype=np.float32), np.float32(1))
    msgs.append(str(e.value))
  assert msgs[0].startswith(msgs[1])    # stagecraft adds how to fix it on a last line
  assert "Argument 'x' compiled with int32[3] and called with float32[3]" in msgs[0]
