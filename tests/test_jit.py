"""pjit.jit: the trace cache and its keys, static arguments, pytrees, argument errors, nested
jit, donation, keep_unused, x64, disable_jit and Python scalars (JAX's jit as the oracle)."""
import gc
import re
import weakref

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft
import stagecraft.numpy as jnp
from stagecraft import pjit
from stagecraft.core import ShapedArray
from stagecraft.interpreters import lowering

F32 = np.dtype(np.float32)


def f32(*shape):
  return np.arange(1, 1 + int(np.prod(shape)), dtype=np.float32).reshape(shape)


def counted(fun):
  """`fun` with a trace counter: `wrapped.count[0]` is the number of Python calls."""
  count = [0]

  def wrapped(*args, **kwargs):
    count[0] += 1
    return fun(*args, **kwargs)
  wrapped.count = count
  return wrapped


# ---------------------------------------------------------------------------
# The cache


def test_same_avals_do_not_retrace():
  f = counted(lambda x: x * 2)
  jf = stagecraft.jit(f)
  np.testing.assert_array_equal(jf(f32(3)), 2 * f32(3))
  jf(f32(3) + 1)
  jf(f32(3))
  assert f.count[0] == 1
  a = stagecraft.device_put(f32(3))
  jf(a)
  jf(a)          # the Array fast path
  assert f.count[0] == 1


@pytest.mark.parametrize("first,second", [
    (f32(3), f32(4)),                                         # new shape
    (f32(3), f32(3).astype(np.int32)),                        # new dtype
    (1.0, np.float32(1.0)),                                   # weak vs strong
    (1.0, np.ones((), np.float32)),
    (f32(2, 2), f32(4)),
])
def test_new_signature_retraces(first, second):
  f = counted(lambda x: x * 2)
  jf = stagecraft.jit(f)
  r1, r2 = jf(first), jf(second)
  assert f.count[0] == 2
  assert r1.weak_type == isinstance(first, float)
  assert not r2.weak_type
  jf(first)
  jf(second)
  assert f.count[0] == 2


@pytest.mark.parametrize("first,second", [
    ({"a": 1.0, "b": 2.0}, {"a": 1.0, "b": 2.0, "c": 3.0}),
    ((1.0, 2.0), [1.0, 2.0]),
    ((1.0, None), (1.0, 2.0)),
    ({"a": (1.0,)}, {"a": 1.0}),
])
def test_pytree_structure_change_retraces(first, second):
  f = counted(lambda t: jax.tree_util.tree_leaves(t)[0] + 1)
  jf = stagecraft.jit(f)
  jf(first)
  jf(first)
  assert f.count[0] == 1
  jf(second)
  assert f.count[0] == 2


def test_jit_twice_on_same_function_shares_cache():
  f = counted(lambda x: x + 1)
  stagecraft.jit(f)(f32(3))
  stagecraft.jit(f)(f32(3))
  assert f.count[0] == 1
  stagecraft.jit(f)(stagecraft.device_put(f32(3)))
  assert f.count[0] == 1


def test_static_args_cache_by_value():
  f = counted(lambda x, k: x * k[0])
  jf = stagecraft.jit(f, static_argnums=1)
  assert float(jf(2.0, (3,))) == 6.0
  assert float(jf(2.0, (3,))) == 6.0      # an equal, new tuple
  assert f.count[0] == 1
  assert float(jf(2.0, (4,))) == 8.0
  assert f.count[0] == 2


def test_static_argnums_and_argnames_inferred_from_each_other():
  def f(x, k, *, mode="a"):
    return x * k if mode == "a" else x - k
  j1 = stagecraft.jit(f, static_argnums=1)
  assert j1._static_argnames == ("k",)
  j2 = stagecraft.jit(f, static_argnames="k")
  assert j2._static_argnums == (1,)
  assert float(j1(2.0, 3)) == 6.0
  assert float(j1(2.0, k=3)) == 6.0
  assert float(j2(2.0, 3)) == 6.0
  assert float(j2(2.0, k=3)) == 6.0
  j3 = stagecraft.jit(f, static_argnames=("k", "mode"))
  assert float(j3(2.0, 3, mode="b")) == -1.0


def test_negative_static_argnums():
  count = [0]

  def f(x, n):
    count[0] += 1
    return x * n if n > 0 else -x
  jf = stagecraft.jit(f, static_argnums=-1)
  assert float(jf(2.0, 3)) == 6.0
  assert float(jf(2.0, 3)) == 6.0
  assert float(jf(2.0, -1)) == -2.0
  assert count[0] == 2
  # As JAX's: a negative static argnum counts from the end of the call's positional
  # arguments and names no parameter, so `n` given by keyword is not static.
  with pytest.raises(jax.errors.TracerBoolConversionError):
    jax.jit(f, static_argnums=-1)(2.0, n=3)
  with pytest.raises(stagecraft.errors.TracerBoolConversionError):
    jf(2.0, n=3)


@pytest.mark.parametrize("variant", ["star_args", "named_then_star"])
def test_negative_static_argnums_with_var_positional(variant):
  if variant == "star_args":
    def f(*a):
      x, n = a
      return x * n if n > 0 else -x
  else:
    def f(x, *rest):
      return x * rest[0] if rest[0] > 0 else -x
  assert float(jax.jit(f, static_argnums=-1)(2.0, 3)) == 6.0
  assert float(stagecraft.jit(f, static_argnums=-1)(2.0, 3)) == 6.0


def test_static_arg_with_default_value():
  def f(x, n=2):
    return x * n if n > 0 else x
  assert float(stagecraft.jit(f, static_argnums=1)(3.0)) == 6.0


@pytest.mark.parametrize("call", [
    lambda jf: jf(1.0, [1, 2]),
    lambda jf: jf(1.0, k={"a": 1}),
])
def test_unhashable_static_arg(call):
  jf = stagecraft.jit(lambda x, k: x, static_argnames="k")
  with pytest.raises(ValueError, match="Non-hashable static arguments are not supported"):
    call(jf)   # JAX 0.10.2's type


def test_string_static_arg_is_fine():
  jf = stagecraft.jit(lambda x, op: x + 1 if op == "inc" else x - 1, static_argnums=1)
  assert float(jf(1.0, "inc")) == 2.0
  assert float(jf(1.0, "dec")) == 0.0


def test_string_non_static_arg_raises_type_error():
  with pytest.raises(TypeError, match="Error interpreting argument"):
    stagecraft.jit(lambda x: x)("s")
  with pytest.raises(TypeError, match="static_argnums or static_argnames"):
    stagecraft.jit(lambda x, y: x)(1.0, {"a": "s"})


def _non_array_arg(x, y):
  return x


@pytest.mark.parametrize("args", [(1.0, "a"), (1.0, {"k": object()}), (1.0, [None, "s"])])
def test_non_array_arg_message_is_jax(args):
  """JAX 0.10's words: the function's repr, the key path, the hint on its own line."""
  msgs = []
  for lib in (stagecraft, jax):
    with pytest.raises(TypeError) as e:
      lib.jit(_non_array_arg)(*args)
    msgs.append(str(e.value))
  assert msgs[0] == msgs[1]
  assert "<function _non_array_arg at 0x" in msgs[0]


def test_string_non_static_arg_error_names_path():
  def f(x):
    return x
  with pytest.raises(TypeError, match=r"at path x\b"):
    stagecraft.jit(f)("s")

  def g(x, y):
    return x
  with pytest.raises(TypeError, match=r"at path y\['a'\]"):
    stagecraft.jit(g)(1.0, {"a": "s"})


def test_int_overflow_argument_names_path():
  def f(x):
    return x
  with pytest.raises(OverflowError, match=r"\bx\b"):
    stagecraft.jit(f)(2**40)


def test_int_overflow_argument_raises():
  with pytest.raises(OverflowError):
    stagecraft.jit(lambda x: x)(2**40)


def test_pytrees_in_and_out():
  def f(params, xs, *, scale):
    return {"sum": params["w"] * xs[0] + params["b"], "pair": (xs[1], [scale, None])}
  params = {"w": f32(3), "b": 1.0}
  xs = (f32(3), [2.0, np.int32(3)])
  out = stagecraft.jit(f)(params, xs, scale=0.5)
  want = jax.jit(f)(params, xs, scale=0.5)
  assert jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure(want)
  for o, w in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(want)):
    assert type(o) is stagecraft.Array
    assert o.dtype == w.dtype and o.weak_type == w.weak_type
    np.testing.assert_array_equal(np.asarray(o), np.asarray(w))


def test_none_and_empty_pytrees():
  assert stagecraft.jit(lambda x: None)(1.0) is None
  out = stagecraft.jit(lambda x, t: (x, t))(1.0, ())
  assert out[1] == ()
  assert stagecraft.jit(lambda x, t: t)(1.0, {"a": None}) == {"a": None}


def test_kwargs():
  f = counted(lambda x, *, y, z=1.0: x * y + z)
  jf = stagecraft.jit(f)
  assert float(jf(2.0, y=3.0)) == 7.0
  assert float(jf(2.0, y=3.0, z=0.0)) == 6.0
  assert float(jf(2.0, z=0.0, y=3.0)) == 6.0   # same signature, keys reordered
  assert f.count[0] == 2


def test_returning_a_string_raises_type_error():
  with pytest.raises(TypeError, match="str"):
    stagecraft.jit(lambda x: "s")(1.0)
  with pytest.raises(TypeError, match=r"\['b'\]"):
    stagecraft.jit(lambda x: {"a": x, "b": "s"})(1.0)


def test_non_callable():
  with pytest.raises(TypeError, match="callable"):
    stagecraft.jit(3)


def test_outputs_passthrough_constant_and_literal():
  c = f32(3)
  assert stagecraft.jit(lambda x: x)(f32(2)).tolist() == [1.0, 2.0]
  np.testing.assert_array_equal(stagecraft.jit(lambda x: c)(1.0), c)
  out = stagecraft.jit(lambda x: 2)(1.0)
  assert repr(out) == repr(jax.jit(lambda x: 2)(1.0))
  a, b = stagecraft.jit(lambda x: (x, x))(f32(2))
  np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------
# Cache lifetime


def _jit_and_call_local():
  def f(x):
    return x + 1
  jf = stagecraft.jit(f)
  jf(f32(2))
  jf(stagecraft.device_put(f32(2)))
  assert f in pjit._fun_caches
  return weakref.ref(f), weakref.ref(jf)


def test_cache_released_when_function_collected():
  ref_f, ref_jf = _jit_and_call_local()
  gc.collect()
  assert ref_jf() is None
  assert ref_f() is None
  assert all(k is not None for k in pjit._fun_caches.keys())


# ---------------------------------------------------------------------------
# Nested jit


def test_nested_jit_numbers_and_one_jit_equation():
  inner = stagecraft.jit(lambda y: y * 3.0)

  def outer(x):
    return inner(x) + 1.0
  np.testing.assert_allclose(stagecraft.jit(outer)(f32(2)), f32(2) * 3 + 1)
  text = str(stagecraft.make_jaxpr(outer)(f32(2)))
  assert text.count("jit[") == 1
  assert "name=<lambda>" in text
  # the inner function's cache is usable eagerly afterwards
  np.testing.assert_allclose(inner(f32(2)), f32(2) * 3)


def test_nested_jit_closing_over_outer_tracer():
  def outer(x):
    z = x * 2.0
    return stagecraft.jit(lambda y: y + z)(x)
  np.testing.assert_allclose(stagecraft.jit(outer)(f32(3)), 3 * f32(3))
  closed = stagecraft.make_jaxpr(outer)(f32(3))
  (_, jit_eqn) = closed.jaxpr.eqns
  assert jit_eqn.primitive.name == "jit"
  assert len(jit_eqn.invars) == 2     # the closed-over tracer becomes an argument


def test_nested_jit_three_levels_with_static():
  @stagecraft.jit
  def a(x):
    return x + 1

  def b(x, n):
    for _ in range(n):
      x = a(x)
    return x
  jb = stagecraft.jit(b, static_argnums=1)
  np.testing.assert_allclose(stagecraft.jit(lambda x: jb(x, 3) * 2)(f32(2)), (f32(2) + 3) * 2)


# ---------------------------------------------------------------------------
# Donation


def test_donated_argument_cannot_be_used_again():
  jf = stagecraft.jit(lambda x, y: x * 2 + y, donate_argnums=0)
  x = stagecraft.device_put(f32(3))
  y = stagecraft.device_put(f32(3))
  out = jf(x, y)
  np.testing.assert_array_equal(out, 3 * f32(3))
  assert x.is_deleted()
  with pytest.raises(stagecraft.DonatedBufferError, match="donated"):
    np.asarray(x)
  with pytest.raises(stagecraft.DonatedBufferError, match="donated"):
    x + 1
  with pytest.raises(stagecraft.DonatedBufferError, match="donated"):
    jf(x, y)
  with pytest.raises(stagecraft.DonatedBufferError, match="donated"):
    stagecraft.jit(lambda v: v - 1)(x)
  # the non-donated argument stays usable
  np.testing.assert_array_equal(np.asarray(y), f32(3))
  np.testing.assert_array_equal(y + 1, f32(3) + 1)
  with pytest.raises(stagecraft.DonatedBufferError, match="donated"):
    repr(x)   # as JAX's: a RuntimeError (ours names the donation)


def test_donation_on_cached_signature_and_argnames():
  jf = stagecraft.jit(lambda x, y: x + y, donate_argnames="y")
  for i in range(3):
    x = stagecraft.device_put(f32(2))
    y = stagecraft.device_put(f32(2) * i)
    np.testing.assert_array_equal(jf(x, y=y), f32(2) * (i + 1))
    assert y.is_deleted() and not x.is_deleted()
    with pytest.raises(stagecraft.DonatedBufferError):
      y.block_until_ready()


def test_donating_numpy_input_is_harmless():
  x = f32(3)
  out = stagecraft.jit(lambda v: v * 2, donate_argnums=0)(x)
  np.testing.assert_array_equal(out, 2 * f32(3))
  np.testing.assert_array_equal(x, f32(3))


def test_static_and_donated_conflict():
  with pytest.raises(ValueError, match="static"):
    stagecraft.jit(lambda x: x, static_argnums=0, donate_argnums=0)


# ---------------------------------------------------------------------------
# keep_unused


def _compiled_texts(jitted) -> list[str]:
  texts = []
  for entry in jitted._cache.values():
    call = getattr(entry, "executable", entry)
    if call is not None and hasattr(call, "text"):
      texts.append(call.text)
  return texts


def _main_args(text: str) -> int:
  text = lowering.strip_locations(text)   # (`%arg0: tensor<2xf32> loc("x")`)
  sig = re.search(r"func\.func public @main\(([^)]*)\)", text).group(1)
  return len(re.findall(r"%arg\d+:", sig))


@pytest.mark.parametrize("keep_unused,nargs", [(False, 1), (True, 2)])
def test_keep_unused(keep_unused, nargs):
  def f(x, unused):
    return x * 2
  jf = stagecraft.jit(f, keep_unused=keep_unused)
  np.testing.assert_array_equal(jf(f32(2), f32(3)), 2 * f32(2))
  np.testing.assert_array_equal(jf(stagecraft.device_put(f32(2)),
                                   stagecraft.device_put(f32(3))), 2 * f32(2))
  texts = set(_compiled_texts(jf))
  assert texts
  for text in texts:
    assert _main_args(text) == nargs, text


# ---------------------------------------------------------------------------
# x64


def test_x64_flag_changes_dtype_and_cache_key():
  f = counted(lambda x: x * 2)
  jf = stagecraft.jit(f)
  x = np.ones(2, np.float64)
  assert jf(x).dtype == np.float32
  stagecraft.config.update("enable_x64", True)
  try:
    out = jf(x)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, 2 * x)
    assert f.count[0] == 2
    assert jf(1.0).dtype == np.float64
    assert jf(np.int64(2**40)).dtype == np.int64
  finally:
    stagecraft.config.update("enable_x64", False)
  assert jf(x).dtype == np.float32
  assert f.count[0] == 4


def test_x64_context_manager_with_arrays():
  f = counted(lambda x: x + 1)
  jf = stagecraft.jit(f)
  a = stagecraft.device_put(f32(2))
  jf(a)
  with stagecraft.enable_x64():
    jf(a)     # the flag is part of the key, even on the Array fast path
  assert f.count[0] == 2
  assert not stagecraft.config.enable_x64


# ---------------------------------------------------------------------------
# disable_jit


def test_disable_jit_runs_eagerly():
  f = counted(lambda x: x * 2)
  jf = stagecraft.jit(f)
  with stagecraft.disable_jit():
    for i in range(3):
      np.testing.assert_array_equal(jf(f32(2)), 2 * f32(2))
      assert f.count[0] == i + 1
  jf(f32(2))
  jf(f32(2))
  assert f.count[0] == 4


def test_disable_jit_allows_python_control_flow():
  def g(x):
    return x if float(x.sum()) > 0 else -x
  with stagecraft.disable_jit():
    np.testing.assert_array_equal(stagecraft.jit(g)(jnp.ones(2)), np.ones(2))


def test_disable_jit_after_compiled_array_call():
  f = counted(lambda x: x * 2)
  jf = stagecraft.jit(f)
  a = stagecraft.device_put(f32(2))
  jf(a)
  jf(a)
  assert f.count[0] == 1
  with stagecraft.disable_jit():
    jf(a)
    jf(a)
  assert f.count[0] == 3


# ---------------------------------------------------------------------------
# Python scalars


@pytest.mark.parametrize("args", [(2, 3), (2, 3.0), (True, 2), (True, False), (2.0, 3.5),
                                  (np.float32(2), 3), (1, np.int8(3)), (f32(2), 3),
                                  (np.ones(2, np.float16), 2.5), (1j, 2.0)],
                         ids=str)
def test_python_scalars_are_weak_and_match_jax(args):
  def f(x, y):
    return x * y + 1
  jaxpr = stagecraft.make_jaxpr(f)(*args)
  for a, aval in zip(args, jaxpr.in_avals):
    assert aval.weak_type == (type(a) in (int, float, complex))
  ours = stagecraft.jit(f)(*args)
  theirs = jax.jit(f)(*args)
  assert ours.dtype == theirs.dtype
  assert ours.weak_type == theirs.weak_type
  assert repr(ours) == repr(theirs)


def test_python_scalar_avals():
  jaxpr = stagecraft.make_jaxpr(lambda x, y, z: (x, y, z))(1, 2.0, True)
  assert jaxpr.in_avals == [ShapedArray((), np.dtype(np.int32), True),
                            ShapedArray((), F32, True),
                            ShapedArray((), np.dtype(np.bool_), False)]


def test_jax_array_arguments():
  out = stagecraft.jit(lambda x: x * 2)(jjnp.ones(3))
  assert type(out) is stagecraft.Array
  np.testing.assert_array_equal(out, 2 * np.ones(3, np.float32))


def test_jit_of_jvp_with_integer_outputs_returns_float0_tangents():
  # float0 tangents never reach the runtime: i1 zeros inside the program, host float0 zeros
  # at the boundary, as JAX returns them (this failed to lower: "data type 'u0'").
  f = lambda x: (x * 2, jnp.argmax(x))
  jf = lambda x: (x * 2, jjnp.argmax(x))
  x, t = np.arange(3.0, dtype=np.float32), np.ones(3, np.float32)
  (p, i), (tp, ti) = stagecraft.jit(lambda x, t: stagecraft.jvp(f, (x,), (t,)))(x, t)
  (jp, ji), (jtp, jti) = jax.jit(lambda x, t: jax.jvp(jf, (x,), (t,)))(x, t)
  np.testing.assert_array_equal(np.asarray(tp), np.asarray(jtp))
  assert int(i) == int(ji) and ti.dtype == stagecraft.dtypes.float0 and ti.shape == jti.shape
  xi, t0 = np.arange(3), np.zeros(3, stagecraft.dtypes.float0)   # float0 arguments too
  out, t_out = stagecraft.jit(lambda x, t: stagecraft.jvp(lambda a: a * 2, (x,), (t,)))(xi, t0)
  np.testing.assert_array_equal(np.asarray(out), xi * 2)
  assert t_out.dtype == stagecraft.dtypes.float0 and t_out.shape == (3,)
