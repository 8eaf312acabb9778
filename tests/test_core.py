"""core.py (avals, get_aval, the jaxpr printer, check_jaxpr, eval_jaxpr) and the tracer
errors, with JAX's `make_jaxpr` as the oracle for the printed jaxprs.

How jaxprs are compared with JAX's: `_normalize` renames every binder (`a:`, `b:`, ...) and
all its uses to `_0`, `_1`, ... in the order of first appearance in the printed text, so two
texts that differ only by variable names become equal. Where JAX prints the same params we
require exact equality of the normalized text (layout included). Where the equations' params
may differ (`jnp.dot` passes no `preferred_element_type`, which JAX's fills in) we compare
`_structure`: per top-level equation, the primitive name, the input atoms (variables by order
of first appearance, literals by value and aval) and the output avals. The exact printed
form, against JAX's for a corpus of programs, is tested in test_jaxpr_printing.py.
"""
import re

import jax
import jax.numpy as jjnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import stagecraft
import stagecraft.numpy as jnp
from stagecraft import core
from stagecraft.core import (ClosedJaxpr, Jaxpr, JaxprEqn, ShapedArray, ShapeDtypeStruct, Var,
                             check_jaxpr, eval_jaxpr, get_aval, jaxpr_as_fun)
from stagecraft.errors import (ConcretizationTypeError, JaxprTypeError,
                               TracerArrayConversionError, TracerIntegerConversionError,
                               UnexpectedTracerError)
from stagecraft.lax import elementwise

from _util import assert_trees_allclose

F32 = np.dtype(np.float32)


def f32(*shape):
  return np.arange(1, 1 + int(np.prod(shape)), dtype=np.float32).reshape(shape) / 7


# ---------------------------------------------------------------------------
# ShapedArray and ShapeDtypeStruct


@pytest.mark.parametrize("shape,dtype,text", [
    ((3, 4), np.float32, "f32[3,4]"),
    ((), ml_dtypes.bfloat16, "bf16[]"),
    ((0,), np.int8, "i8[0]"),
    ((2,), np.bool_, "bool[2]"),
    ((1,), np.complex64, "c64[1]"),
    ((5,), np.uint32, "u32[5]"),
    ((2, 1, 3), np.float16, "f16[2,1,3]"),
])
def test_shaped_array_str_short(shape, dtype, text):
  a = ShapedArray(shape, np.dtype(dtype))
  assert a.str_short() == text
  assert str(a) == a.str_short(short_dtypes=False)   # JAX's str: float32[3]
  assert a.ndim == len(shape)
  assert a.size == int(np.prod(shape))


def test_shaped_array_equality_and_hash_include_weak_type():
  a = ShapedArray((3,), F32)
  assert a == ShapedArray((3,), F32)
  assert hash(a) == hash(ShapedArray((3,), F32))
  weak = ShapedArray((3,), F32, True)
  assert a != weak
  assert a != ShapedArray((4,), F32)
  assert a != ShapedArray((3,), np.dtype(np.int32))
  assert len({a, ShapedArray((3,), F32), weak}) == 2
  assert weak.strip_weak_type() == a
  assert a.update(weak_type=True) == weak
  assert repr(weak) == "ShapedArray(float32[3], weak_type=True)"


def test_shape_dtype_struct_keeps_weak_type():
  s = ShapeDtypeStruct((2, 3), np.float32, weak_type=True)
  assert s.shape == (2, 3) and s.dtype == F32 and s.weak_type
  assert s != ShapeDtypeStruct((2, 3), np.float32)
  out = stagecraft.eval_shape(lambda x: x * 2, 1.0)
  assert out == ShapeDtypeStruct((), np.float32, weak_type=True)
  jaxpr = stagecraft.make_jaxpr(lambda x: x + 1)(s)
  assert jaxpr.in_avals == [ShapedArray((2, 3), F32, True)]


# ---------------------------------------------------------------------------
# get_aval


@pytest.mark.parametrize("x,aval", [
    (1, ShapedArray((), np.dtype(np.int32), True)),
    (1.5, ShapedArray((), F32, True)),
    (True, ShapedArray((), np.dtype(np.bool_), False)),   # bools are never weak (JAX)
    (1j, ShapedArray((), np.dtype(np.complex64), True)),
    (np.float64(1.0), ShapedArray((), F32)),
    (np.int64(3), ShapedArray((), np.dtype(np.int32))),
    (np.float16(3), ShapedArray((), np.dtype(np.float16))),
    (np.bool_(True), ShapedArray((), np.dtype(np.bool_))),
    (np.ones((2, 3)), ShapedArray((2, 3), F32)),
    (np.ones(3, np.int64), ShapedArray((3,), np.dtype(np.int32))),
    (np.ones(3, np.uint64), ShapedArray((3,), np.dtype(np.uint32))),
    (np.ones(2, ml_dtypes.bfloat16), ShapedArray((2,), np.dtype(ml_dtypes.bfloat16))),
])
def test_get_aval_python_and_numpy(x, aval):
  got = get_aval(x)
  assert got == aval, (got, aval)


def test_get_aval_python_int_overflow():
  assert get_aval(2**31 - 1) == ShapedArray((), np.dtype(np.int32), True)
  with pytest.raises(OverflowError, match="^Python int 2147483648 too large to convert to int32$"):
    get_aval(2**31)
  with pytest.raises(OverflowError):
    get_aval(-2**40)


def test_get_aval_x64_keeps_64_bit():
  stagecraft.config.update("jax_enable_x64", True)   # JAX's spelling names the same flag
  assert stagecraft.config.enable_x64
  try:
    assert get_aval(np.ones(3)) == ShapedArray((3,), np.dtype(np.float64))
    assert get_aval(np.int64(1)) == ShapedArray((), np.dtype(np.int64))
    assert get_aval(1.0) == ShapedArray((), np.dtype(np.float64), True)
    assert get_aval(2**40) == ShapedArray((), np.dtype(np.int64), True)
  finally:
    stagecraft.config.update("enable_x64", False)
  assert get_aval(np.ones(3)) == ShapedArray((3,), F32)
  with pytest.raises(AttributeError, match="Unrecognized config option: jax_no_such_flag"):
    stagecraft.config.update("jax_no_such_flag", True)


def test_get_aval_arrays():
  x = stagecraft.device_put(np.ones((2, 2), np.int32))
  assert get_aval(x) == ShapedArray((2, 2), np.dtype(np.int32))
  w = stagecraft.jit(lambda a: a * 2)(1.0)
  assert get_aval(w) == ShapedArray((), F32, True)
  assert get_aval(jjnp.ones(3)) == ShapedArray((3,), F32)
  assert get_aval(jnp.ones(3)) == ShapedArray((3,), F32)


@pytest.mark.parametrize("bad", ["a string", object(), [1, 2], None])
def test_get_aval_rejects_non_arrays(bad):
  with pytest.raises(TypeError, match="not a valid array type"):
    get_aval(bad)
  assert not core.valid_array_type(bad)


# ---------------------------------------------------------------------------
# make_jaxpr text against JAX


def _normalize(text: str) -> str:
  order = []
  for b in re.findall(r"\b([a-z]+):", text):
    if b not in order:
      order.append(b)
  names = {b: f"_{i}" for i, b in enumerate(order)}
  return re.sub(r"\b([a-z]+)\b", lambda m: names.get(m.group(1), m.group(1)), text)


def _aval_str(aval) -> str:
  try:
    return aval.str_short(short_dtypes=True)   # JAX's ShapedArray
  except TypeError:
    return aval.str_short()


def _structure(closed) -> list:
  """Top-level equations as (primitive, inputs, output avals), plus the in/out signature;
  variables are numbered by first appearance, literals kept by value and aval."""
  jaxpr = closed.jaxpr
  ids: dict[int, int] = {}

  def atom(v):
    if hasattr(v, "val"):
      return ("lit", np.asarray(v.val).item(), _aval_str(v.aval))
    return ids.setdefault(id(v), len(ids))

  for v in (*jaxpr.constvars, *jaxpr.invars):
    atom(v)
  out = [("consts", [_aval_str(v.aval) for v in jaxpr.constvars]),
         ("ins", [_aval_str(v.aval) for v in jaxpr.invars])]
  for eqn in jaxpr.eqns:
    ins = [atom(v) for v in eqn.invars]
    outs = [_aval_str(v.aval) for v in eqn.outvars]
    for v in eqn.outvars:
      atom(v)
    out.append((eqn.primitive.name, ins, outs))
  out.append(("outs", [atom(v) for v in jaxpr.outvars]))
  return out


_CONST = np.arange(5, dtype=np.float32)


def _make_cases(m, jit):
  """(name, function, args, exact_text) built on the numpy module `m` and `jit`."""
  return [
      ("sin_mul", lambda x: m.sin(x) * 2.0, (f32(3),), True),
      ("dot_sum_transpose", lambda x, y: m.sum(m.dot(x, y).T), (f32(2, 3), f32(3, 4)), False),
      ("closure_const", lambda x: x + _CONST, (f32(5),), True),
      ("nested_jit", lambda x: jit(lambda y: y * 2.0)(x) + 1.0, (f32(3),), True),
      ("convert_slice", lambda x: m.asarray(x, m.int32)[1:3], (f32(4),), True),
      ("reduce_max", lambda x: m.max(x, axis=1), (f32(2, 3),), True),
      ("multiple_outputs", lambda x: (x + 1.0, x * x), (f32(3),), True),
      ("python_scalar_output", lambda x: 3.0, (f32(3),), True),
      ("int_literals", lambda x: x * 2 + 1, (np.ones(3, np.int32),), True),
      ("compare", lambda x: x > 0, (f32(3),), True),
      ("weak_scalar_input", lambda x: x * 2, (1.0,), True),
      ("identity_swap", lambda x, y: (y, x), (f32(3), f32(2)), True),
      ("chain", lambda x: m.log(m.exp(m.cos(m.sin(x)))), (f32(3),), True),
      ("numpy_scalar_literal", lambda x: x * np.float32(2), (f32(3),), True),
      ("reshape", lambda x: x.reshape(6), (f32(2, 3),), True),
      ("closure_in_inner_jit", lambda x: (lambda z: jit(lambda y: y + z)(x))(x * 2.0),
       (f32(2),), False),
  ]


_SC_CASES = _make_cases(jnp, stagecraft.jit)
_JAX_CASES = _make_cases(jjnp, jax.jit)
_CASE_IDS = [c[0] for c in _SC_CASES]


@pytest.mark.parametrize("i", range(len(_SC_CASES)), ids=_CASE_IDS)
def test_make_jaxpr_matches_jax(i):
  name, f, args, exact = _SC_CASES[i]
  _, f_jax, _, _ = _JAX_CASES[i]
  ours = stagecraft.make_jaxpr(f)(*args)
  theirs = jax.make_jaxpr(f_jax)(*args)
  assert _structure(ours) == _structure(theirs)
  if exact:
    assert _normalize(str(ours)) == _normalize(str(theirs)), f"\n{ours}\n{theirs}"


def test_make_jaxpr_golden_text():
  assert str(stagecraft.make_jaxpr(lambda x: jnp.sin(x) * 2.0)(f32(3))) == (
      "{ lambda ; a:f32[3]. let b:f32[3] = sin a; c:f32[3] = mul b 2.0:f32[] in (c,) }")
  assert str(stagecraft.make_jaxpr(lambda x: x + _CONST)(f32(5))) == (
      "{ lambda a:f32[5]; b:f32[5]. let c:f32[5] = add b a in (c,) }")
  text = str(stagecraft.make_jaxpr(lambda x: stagecraft.jit(lambda y: y * 2.0)(x))(f32(3)))
  assert "jit[\n      name=<lambda>\n      jaxpr={ lambda ; a:f32[3]. let" in text
  assert text.count("jit[") == 1
  assert str(stagecraft.make_jaxpr(lambda x: 3.0)(f32(3))) == (
      "{ lambda ; a:f32[3]. let  in (3.0:f32[],) }")


def test_make_jaxpr_closure_const_value():
  closed = stagecraft.make_jaxpr(lambda x: x + _CONST)(f32(5))
  assert len(closed.consts) == 1
  np.testing.assert_array_equal(np.asarray(closed.consts[0]), _CONST)


def _one_line_form(text: str) -> str:
  """The one-line rendering of a multi-line top-level jaxpr (as the printer would try)."""
  lines = text.split("\n")
  head, body, tail = lines[0], lines[1:-1], lines[-1].strip()
  return f"{head} {'; '.join(ln.strip() for ln in body)} {tail}"


@pytest.mark.parametrize("n", range(1, 7))
def test_jaxpr_layout_one_line_iff_fits_80_columns(n):
  def chain(m):
    def f(x):
      for _ in range(n):
        x = m.sin(x)
      return x
    return f
  ours = str(stagecraft.make_jaxpr(chain(jnp))(f32(3)))
  theirs = str(jax.make_jaxpr(chain(jjnp))(f32(3)))
  assert _normalize(ours) == _normalize(theirs)
  if "\n" in ours:
    assert all(ln.startswith("    ") for ln in ours.split("\n")[1:-1])
    assert ours.split("\n")[-1].startswith("  in (")
    assert len(_one_line_form(ours)) > 80
  else:
    assert len(ours) <= 80


def test_jaxpr_layout_long_params_break_per_param():
  def f(m):
    return lambda x, y: m.lax.dot(x, y, precision=m.lax.Precision.HIGHEST)
  text = str(stagecraft.make_jaxpr(f(stagecraft))(f32(2, 3), f32(3, 4)))
  assert ("dot_general[\n      dimension_numbers=(([1], [0]), ([], []))\n"
          "      precision=(Precision.HIGHEST, Precision.HIGHEST)\n    ] a b\n") in text
  assert all(len(ln) <= 80 for ln in text.split("\n"))
  assert text == str(jax.make_jaxpr(f(jax))(f32(2, 3), f32(3, 4)))


# ---------------------------------------------------------------------------
# check_jaxpr


@pytest.mark.parametrize("i", range(len(_SC_CASES)), ids=_CASE_IDS)
def test_check_jaxpr_accepts_traced_jaxprs(i):
  _, f, args, _ = _SC_CASES[i]
  check_jaxpr(stagecraft.make_jaxpr(f)(*args).jaxpr)


def _sin_eqn(x: Var, out: Var) -> JaxprEqn:
  return JaxprEqn([x], [out], elementwise.sin_p, {})


def test_check_jaxpr_accepts_hand_built():
  a, b = Var(ShapedArray((3,), F32)), Var(ShapedArray((3,), F32))
  check_jaxpr(Jaxpr([], [a], [b], [_sin_eqn(a, b)]))


def test_check_jaxpr_rejects_use_before_def():
  a, b, c = (Var(ShapedArray((3,), F32)) for _ in range(3))
  bad = Jaxpr([], [a], [c], [_sin_eqn(b, c), _sin_eqn(a, b)])
  with pytest.raises(JaxprTypeError, match="used before it is defined"):
    check_jaxpr(bad)


def test_check_jaxpr_rejects_undefined_outvar():
  a, b = Var(ShapedArray((3,), F32)), Var(ShapedArray((3,), F32))
  with pytest.raises(JaxprTypeError, match="used before it is defined"):
    check_jaxpr(Jaxpr([], [a], [b], []))


def test_check_jaxpr_rejects_wrong_outvar_aval():
  a, b = Var(ShapedArray((3,), F32)), Var(ShapedArray((4,), F32))
  with pytest.raises(JaxprTypeError, match=r"f32\[4\].*f32\[3\]"):
    check_jaxpr(Jaxpr([], [a], [b], [_sin_eqn(a, b)]))
  c = Var(ShapedArray((3,), np.dtype(np.int32)))
  with pytest.raises(JaxprTypeError, match=r"i32\[3\]"):
    check_jaxpr(Jaxpr([], [a], [c], [_sin_eqn(a, c)]))


def test_check_jaxpr_rejects_double_binding():
  a, b = Var(ShapedArray((3,), F32)), Var(ShapedArray((3,), F32))
  with pytest.raises(JaxprTypeError, match="bound twice"):
    check_jaxpr(Jaxpr([], [a], [b], [_sin_eqn(a, b), _sin_eqn(a, b)]))


def test_check_jaxpr_recurses_into_nested_jaxprs():
  closed = stagecraft.make_jaxpr(lambda x: stagecraft.jit(jnp.sin)(x))(f32(3))
  (eqn,) = closed.jaxpr.eqns
  inner = eqn.params["jaxpr"]
  a, b = Var(ShapedArray((3,), F32)), Var(ShapedArray((3,), F32))
  bad_inner = ClosedJaxpr(Jaxpr([], [a], [b], []), [])
  bad_eqn = eqn.replace(params={**eqn.params, "jaxpr": bad_inner})
  check_jaxpr(closed.jaxpr)
  assert inner.jaxpr.eqns
  with pytest.raises(JaxprTypeError):
    check_jaxpr(closed.jaxpr.replace(eqns=[bad_eqn]))


# ---------------------------------------------------------------------------
# eval_jaxpr / jaxpr_as_fun


@pytest.mark.parametrize("i", range(len(_SC_CASES)), ids=_CASE_IDS)
def test_eval_jaxpr_matches_function(i):
  _, f, args, _ = _SC_CASES[i]
  closed = stagecraft.make_jaxpr(f)(*args)
  got = jaxpr_as_fun(closed)(*args)
  want = jax.tree_util.tree_leaves(f(*args))
  assert_trees_allclose(got, want, rtol=1e-6)
  got2 = eval_jaxpr(closed.jaxpr, closed.consts, *args)
  assert_trees_allclose(got2, want, rtol=1e-6)


def test_eval_jaxpr_wrong_arity():
  closed = stagecraft.make_jaxpr(jnp.sin)(f32(3))
  with pytest.raises(TypeError, match="1 args"):
    eval_jaxpr(closed.jaxpr, closed.consts)


_COMPOSITES = [
    ("sin_mul_add", lambda x: jnp.sin(x) * 2.0 + x),
    ("sum_squares", lambda x: jnp.sum(x * x)),
    ("softsign", lambda x: x / (1.0 + jnp.abs(x))),
    ("centered", lambda x: x - jnp.max(x)),
    ("exp_tanh", lambda x: (jnp.exp(-x * x), jnp.tanh(x) * 3)),
]


@pytest.mark.parametrize("fname,f", _COMPOSITES, ids=[c[0] for c in _COMPOSITES])
@given(x=hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=3, max_side=4),
                    elements=st.floats(-10, 10, width=32)))
def test_property_eager_jit_eval_jaxpr_agree(fname, f, x):
  eager = jax.tree_util.tree_leaves(f(x))
  jitted = jax.tree_util.tree_leaves(stagecraft.jit(f)(x))
  evaled = jaxpr_as_fun(stagecraft.make_jaxpr(f)(x))(x)
  assert_trees_allclose(jitted, eager, rtol=1e-5, atol=1e-6, check_dtypes=True)
  assert_trees_allclose(evaled, eager, rtol=1e-5, atol=1e-6, check_dtypes=True)


# ---------------------------------------------------------------------------
# Tracer errors


def _branchy(x, n):
  if n > 0:
    return x
  return -x


def _jax_and_ours(run):
  """The messages of the exceptions `run(jax)` and `run(stagecraft)` raise (JAX's first)."""
  msgs = []
  for lib in (jax, stagecraft):
    with pytest.raises(TypeError) as info:
      run(lib)
    msgs.append(str(info.value))
  return msgs


def test_bool_of_tracer_names_argument_as_jax():
  def g(x, n):
    return _branchy(x, n)
  with pytest.raises(ConcretizationTypeError) as info:
    stagecraft.jit(g)(1.0, 2)
  msg = str(info.value)
  assert msg.startswith("Attempted boolean conversion of traced array with shape bool[].\n")
  assert "tracing the function g at " in msg
  assert "depends on the value of the argument n." in msg
  assert isinstance(info.value, TypeError)
  # JAX's whole message: no static_argnums suggestion, JAX's link to the error's page.
  want, got = _jax_and_ours(lambda lib: lib.jit(g)(1.0, 2))
  assert got == want
  assert got.endswith("\nSee https://docs.jax.dev/en/latest/errors.html"
                      "#jax.errors.TracerBoolConversionError")


def test_bool_of_tracer_keyword_as_jax():
  def g(x, n):
    return _branchy(x, n)
  with pytest.raises(ConcretizationTypeError) as info:
    stagecraft.jit(g)(1.0, n=2)
  assert "depends on the value of the argument n." in str(info.value)
  want, got = _jax_and_ours(lambda lib: lib.jit(g)(1.0, n=2))
  assert got == want


def test_if_on_traced_array_in_pytree_names_path():
  def g(x, opts):
    return x if opts["flag"] else -x
  with pytest.raises(ConcretizationTypeError, match=r"opts\['flag'\]"):
    stagecraft.jit(g)(1.0, {"flag": True})


@pytest.mark.parametrize("conv", [int, float, complex])
def test_int_float_of_tracer(conv):
  def h(x, n):
    return x * conv(n)
  with pytest.raises(ConcretizationTypeError, match=f"`{conv.__name__}` function") as info:
    stagecraft.jit(h)(1.0, 2)
  assert "depends on the value of the argument n." in str(info.value)
  want, got = _jax_and_ours(lambda lib: lib.jit(h)(1.0, 2))
  assert got == want


@pytest.mark.parametrize("name", ["array", "index", "index_float", "item", "tolist"])
def test_conversion_errors_read_as_jax(name):
  """The other conversions of a traced value raise JAX's whole messages (the context line,
  the traced function and argument, the error page), JAX's doubled origin of `tolist`
  included; `__index__` of a float tracer is JAX's plain TypeError."""
  fs = {"array": lambda x: np.asarray(x), "index": lambda x: [1, 2, 3][x],
        "index_float": lambda x: range(x.astype(float)), "item": lambda x: x.item(),
        "tolist": lambda x: x.tolist()}
  f = fs[name]
  want, got = _jax_and_ours(lambda lib: lib.jit(f)(np.int32(1)))
  assert got == want


def test_static_argnums_fixes_concretization():
  def g(x, n):
    return _branchy(x, n)
  assert float(stagecraft.jit(g, static_argnums=1)(1.0, 2)) == 1.0
  assert float(stagecraft.jit(g, static_argnames="n")(1.0, n=-2)) == -1.0


def test_range_of_tracer():
  def h(x, n):
    return [x for _ in range(n)]
  with pytest.raises(TracerIntegerConversionError, match="depends on the value of the argument n."):
    stagecraft.jit(h)(1.0, 3)


def test_index_list_with_tracer():
  def h(x, i):
    return [x, x + 1][i]
  with pytest.raises(TracerIntegerConversionError):
    stagecraft.jit(h)(1.0, 0)


def test_np_asarray_of_tracer():
  def h(x):
    return np.asarray(x)
  with pytest.raises(TracerArrayConversionError, match="depends on the value of the argument x."):
    stagecraft.jit(h)(f32(3))


def test_bool_of_tracer_in_make_jaxpr():
  with pytest.raises(ConcretizationTypeError, match="Attempted boolean conversion"):
    stagecraft.make_jaxpr(lambda x: x if x > 0 else -x)(1.0)


def test_leaked_tracer_used_eagerly():
  leaked = []

  def h(x):
    leaked.append(x)
    return x * 2
  stagecraft.jit(h)(f32(3))
  with pytest.raises(UnexpectedTracerError, match="unexpected tracer"):
    leaked[0] + 1
  with pytest.raises(UnexpectedTracerError):
    jnp.sin(leaked[0])


def test_leaked_tracer_used_in_another_jit():
  leaked = []

  def h(x):
    leaked.append(x)
    return x * 2
  stagecraft.jit(h)(f32(3))
  with pytest.raises(UnexpectedTracerError):
    stagecraft.jit(lambda y: y + leaked[0])(f32(3))
  with pytest.raises(UnexpectedTracerError):
    stagecraft.jit(lambda y: y * 2)(leaked[0])
  with pytest.raises(UnexpectedTracerError):
    stagecraft.make_jaxpr(lambda y: y + leaked[0])(f32(3))


def test_tracer_is_unhashable():
  with pytest.raises(TypeError, match="unhashable"):
    stagecraft.jit(lambda x: {x: 1} and x)(1.0)


def test_leaked_tracer_from_inner_jit_used_in_outer_jit():
  def outer(x):
    store = []

    def inner(y):
      store.append(y)
      return y * 2
    stagecraft.jit(inner)(x)
    return x + store[0]
  with pytest.raises(UnexpectedTracerError):
    stagecraft.jit(outer)(f32(2))


def test_make_jaxpr_static_argnums_and_return_shape_match_jax():
  def f(x, n, y):
    return x * n + y["a"]
  args = (1.0, 3, {"a": f32(2)})
  ours, shape = stagecraft.make_jaxpr(f, static_argnums=1, return_shape=True)(*args)
  theirs, jshape = jax.make_jaxpr(f, static_argnums=1, return_shape=True)(*args)
  assert _normalize(str(ours)) == _normalize(str(theirs))
  assert shape.shape == jshape.shape and shape.dtype == jshape.dtype


@pytest.mark.parametrize("kind", ["invars", "constvars"])
def test_jaxpr_layout_long_binder_list_wraps_like_jax(kind):
  if kind == "invars":
    def f(*xs):
      return sum(xs)
    args = tuple(f32(2) for _ in range(12))
  else:
    cs = [np.arange(5, dtype=np.float32) + i for i in range(10)]

    def f(x):
      for c in cs:
        x = x + c
      return x
    args = (f32(5),)
  ours = str(stagecraft.make_jaxpr(f)(*args))
  theirs = str(jax.make_jaxpr(f)(*args))
  assert _normalize(ours) == _normalize(theirs)
  # JAX's fill rule: at most 80 columns of binders after the "{ " or 4-space indent.
  assert all(len(ln) <= 84 for ln in ours.split("\n"))


@pytest.mark.parametrize("c", [1 / 3, 1e-8, 1e20])
def test_weak_float_literal_printed_as_its_f32_value(c):
  ours = str(stagecraft.make_jaxpr(lambda x: x * c)(f32(3)))
  theirs = str(jax.make_jaxpr(lambda x: x * c)(f32(3)))
  assert _normalize(ours) == _normalize(theirs)
