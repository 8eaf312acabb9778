"""stagecraft.export with symbolic dimensions (shape polymorphism), with JAX's export as the
oracle: the avals, the values of `call` for several sizes, the serialization round trip,
calls under jit, and the errors (shape mismatches, unsupported primitives, inconclusive
comparisons); and the dimension expressions of `stagecraft.shape_poly`."""
import numpy as np
import pytest

import jax
import jax.numpy as jjnp
from jax import export as jexport

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import export, shape_poly
from stagecraft.errors import InconclusiveDimensionOperation


# ---------------------------------------------------------------------------
# Dimension expressions


def _pair(spec, **kw):
  return shape_poly.symbolic_shape(spec, **kw), jexport.symbolic_shape(spec, **kw)


EXPRS = ["b", "2*b", "b + 1", "b - 1", "1 - b", "3 - 2*b", "a*b", "b*b", "b*b*a + 3*a - 2",
         "b // 2", "b % 3", "(2*b + 2) // 2", "(b + 1) // 2 * 2", "-b", "0*b", "b*0 + 3",
         "(b*a) // 2", "b - b", "4*b // 2", "a + b", "b + a", "c + b + a", "a*b + a + b",
         "b*a + c*c", "a*c + b", "3*b*b - a*b", "b % 2 + b // 2", "(b + 3) % 2", "-(b // 2)",
         "a*b*c", "(b*2) % 4", "b % 1", "b**2 - 1"]


@pytest.mark.parametrize("expr", EXPRS)
def test_expression_printing_as_jax(expr):
  (a, b, c), (ja, jb, jc) = _pair("a, b, c")
  got = eval(expr, {"a": a, "b": b, "c": c})
  want = eval(expr, {"a": ja, "b": jb, "c": jc})
  assert str(got) == str(want)
  assert type(got) is int if isinstance(want, int) else shape_poly.is_symbolic_dim(got)
  if shape_poly.is_symbolic_dim(got):
    assert hash(got) == hash(eval(expr, {"a": a, "b": b, "c": c}))
    for env in ({"a": 2, "b": 5, "c": 3}, {"a": 7, "b": 1, "c": 4}):
      assert got.evaluate(env) == eval(expr, env)


COMPARISONS = ["b == 1", "b != 1", "b == b", "b + 1 == 1 + b", "b >= 1", "b > 0", "b >= 0",
               "2*b >= b", "b >= 2", "a >= b", "b < 2", "b == a", "b - 1 >= 1", "b <= 0",
               "b // 2 >= 0", "b - a == 0", "b % 3 < 3", "a*b >= a", "b + 1 > b"]


@pytest.mark.parametrize("cmp", COMPARISONS)
def test_comparisons_as_jax(cmp):
  (a, b), (ja, jb) = _pair("a, b")
  try:
    want = eval(cmp, {"a": ja, "b": jb})
  except Exception as e:   # noqa: BLE001
    want = e
  if isinstance(want, Exception):
    with pytest.raises(InconclusiveDimensionOperation) as info:
      eval(cmp, {"a": a, "b": b})
    assert str(info.value) == str(want)
  else:
    assert eval(cmp, {"a": a, "b": b}) == want


def test_int_of_symbolic_dim_is_inconclusive_as_jax():
  (b,), (jb,) = _pair("b")
  with pytest.raises(Exception) as want:
    int(jb)
  with pytest.raises(InconclusiveDimensionOperation) as got:
    int(b)
  assert str(got.value) == str(want.value)
  assert type(want.value).__name__ == "InconclusiveDimensionOperation"
  assert sc.errors.InconclusiveDimensionOperation is InconclusiveDimensionOperation


def test_constraints():
  x, y = shape_poly.symbolic_shape("x, y", constraints=("x >= 4", "y >= x"))
  assert x >= 4 and x >= 3 and not x < 4 and y >= x and y >= 4
  with pytest.raises(InconclusiveDimensionOperation):
    x >= 5
  with pytest.raises(ValueError, match="Invalid constraint"):
    shape_poly.SymbolicScope(("x + ",))


def test_symbolic_shape_parsing_and_avals():
  s = shape_poly.symbolic_shape("(b, 2*b + 1, floordiv(b, 2), mod(b, 3), 4)")
  assert str(s) == "(b, 2*b + 1, floordiv(b, 2), mod(b, 3), 4)"
  assert str(s) == str(jexport.symbolic_shape("(b, 2*b + 1, floordiv(b, 2), mod(b, 3), 4)"))
  aval = sc.core.ShapedArray(s[:2] + (4,), np.dtype(np.float32))
  assert aval.str_short() == "f32[b,2*b + 1,4]"
  assert export.symbolic_shape("_, b", like=(3, None))[0] == 3
  with pytest.raises(ValueError, match="syntax error"):
    export.symbolic_shape("b, 2*", like=None)
  with pytest.raises(ValueError, match="rank mismatch"):
    export.symbolic_shape("b, c", like=(3,))
  with pytest.raises(ValueError, match="mixing of symbolic scopes"):
    export.symbolic_shape("b")[0] + export.symbolic_shape("b")[0]


# ---------------------------------------------------------------------------
# Export, call, serialization: JAX's export of the same program is the oracle


def _specs(mod, spec_list, scope_spec):
  parse = jexport.symbolic_shape if mod is jax else export.symbolic_shape
  dims = dict(zip([d.strip() for d in scope_spec.split(",")], parse(scope_spec)))
  out = []
  for shape, dt in spec_list:
    shp = tuple(eval(d, dict(dims)) if isinstance(d, str) else d for d in shape)
    out.append(mod.ShapeDtypeStruct(shp, dt) if mod is jax else
               sc.ShapeDtypeStruct(shp, dt))
  return out


F32 = np.float32
PROGRAMS = {
    # name: (function of a numpy module, [(shape, dtype)], dims, sizes to call with)
    "elementwise": (lambda np_: lambda x: np_.sin(x) * 2.0 + 1, [(("b", 4), F32)], "b",
                    [1, 3, 6]),
    "binary_same": (lambda np_: lambda x, y: x * y - y, [(("b", 4), F32), (("b", 4), F32)],
                    "b", [2, 5]),
    "broadcast_row": (lambda np_: lambda x: x + np_.arange(4.0, dtype=np_.float32),
                      [(("b", 4), F32)], "b", [1, 4]),
    "sum_axes": (lambda np_: lambda x: (np_.sum(x, axis=1), np_.sum(x, axis=0), np_.sum(x)),
                 [(("b", 3), F32)], "b", [1, 5]),
    "mean_max_min": (lambda np_: lambda x: (np_.mean(x, axis=1), np_.mean(x, axis=0),
                                            np_.mean(x), np_.max(x, axis=0),
                                            np_.min(x, axis=1)),
                     [(("b", 3), F32)], "b", [2, 7]),
    "matmul": (lambda np_: lambda x, w: x @ w, [(("b", 4), F32), ((4, 3), F32)], "b", [1, 6]),
    "matmul_sym_contract": (lambda np_: lambda x, y: x @ y,
                            [((3, "b"), F32), (("b", 2), F32)], "b", [1, 4]),
    "concat_transpose": (lambda np_: lambda x: np_.concatenate([x, 2 * x], axis=0).T,
                         [(("b", 4), F32)], "b", [1, 3]),
    "reshape": (lambda np_: lambda x: (x.reshape(-1), x.reshape(x.shape[0], 2, 2),
                                       x.reshape(-1, 2)), [(("b", 4), F32)], "b", [1, 3]),
    "broadcast_to_keepdims": (
        lambda np_: lambda x: np_.broadcast_to(np_.sum(x, 1, keepdims=True), x.shape),
        [(("b", 4), F32)], "b", [2, 3]),
    "where_astype": (lambda np_: lambda x: np_.where(x > 0.5, x, 0.0).astype(np_.int32),
                     [(("b", 4), F32)], "b", [3]),
    "two_dims": (lambda np_: lambda x, y: np_.sum(x, axis=1)[:, None] * np_.mean(y, axis=0),
                 [(("a", 3), F32), (("b", 5), F32)], "a, b", [(2, 4), (1, 1)]),
    "expanded": (lambda np_: lambda x: np_.exp(x[None]) * 2.0 + x[:, 1:2],
                 [(("b", 2), F32)], "b", [2, 5]),
    "softmax_like": (lambda np_: lambda x: np_.exp(x - np_.max(x, axis=1, keepdims=True)) /
                     np_.sum(np_.exp(x), axis=1, keepdims=True), [(("b", 5), F32)], "b",
                     [1, 4]),
    # dimensions as values
    "div_by_dim": (lambda np_: lambda x: (x / x.shape[0], x.shape[0] * 2 + x,
                                          x * (x.shape[0] - 1)),
                   [(("b", 4), F32)], "b", [1, 3]),
    "arange_dim": (lambda np_: lambda x: (np_.arange(x.shape[0]) + x[:, 0],
                                          np_.arange(x.shape[0], dtype=np_.float32),
                                          np_.arange(1, x.shape[0] + 1, 2)),
                   [(("b", 4), F32)], "b", [1, 4]),
    "zeros_ones_dim": (lambda np_: lambda x: (np_.zeros((x.shape[0], 3)) + 1,
                                              np_.ones(x.shape[0] * 2, np_.int32)),
                       [(("b", 4), F32)], "b", [2]),
    "reshape_flat": (lambda np_: lambda x: (x.reshape(-1), x.reshape((x.shape[0] * 4,))),
                     [(("b", 4), F32)], "b", [1, 3]),
    "slices": (lambda np_: lambda x: (x[:x.shape[0] // 2], x[1:], x[:-1], x[::-1],
                                      x[:, 1:3], x[1:, ::2]),
               [(("b", 4), F32)], "b", [2, 5]),
    "concat_sizes": (lambda np_: lambda x, y: (np_.concatenate([x, x[:1], y], 0),
                                               np_.concatenate([x[1:], y], 0)),
                     [(("b", 4), F32), (("c", 4), F32)], "b, c", [(2, 3), (1, 1)]),
    # cumulative ops, sorting, gather and scatter
    "cumulative": (lambda np_: lambda x: (np_.cumsum(x, 0), np_.cumprod(x, 0),
                                          np_.cumsum(x, 1)),
                   [(("b", 4), F32)], "b", [1, 5]),
    "sort": (lambda np_: lambda x: (np_.sort(x, 0), np_.argsort(x, 0), np_.sort(x, 1)),
             [(("b", 4), F32)], "b", [1, 6]),
    "gather_take": (lambda np_: lambda x, i: (x[i], np_.take(x, i, axis=0), x[i, 1:],
                                              x[-1], x[0, 2]),
                    [(("b", 4), F32), ((3,), np.int32)], "b", [3, 5]),
    "scatter": (lambda np_: lambda x, i: (x.at[1].set(0.), x.at[i].add(1.0),
                                          x.at[:, 1].multiply(2.0)),
                [(("b", 4), F32), ((2,), np.int32)], "b", [2, 4]),
    "where_select": (lambda np_: lambda x: (np_.where(x > 0, x, 1.0), np_.maximum(x, 0.5)),
                     [(("b", 4), F32)], "b", [1, 3]),
    # control flow whose values have symbolic shapes
    "cond": (lambda np_: lambda x: jax_or_sc(np_).lax.cond(
        x.sum() > 0, lambda x: x * 2, lambda x: -x, x), [(("b", 4), F32)], "b", [1, 3]),
    "while": (lambda np_: lambda x: jax_or_sc(np_).lax.while_loop(
        lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 2 + 1), (0, x))[1],
        [(("b", 4), F32)], "b", [2]),
    "fori_dim_bound": (lambda np_: lambda x: jax_or_sc(np_).lax.fori_loop(
        0, x.shape[0], lambda i, c: c + x[i], np_.zeros(4, np_.float32)),
        [(("b", 4), F32)], "b", [1, 4]),
    "fori_const_bound": (lambda np_: lambda x: jax_or_sc(np_).lax.fori_loop(
        0, 3, lambda i, c: c * 2 + i, x), [(("b", 4), F32)], "b", [2]),
    "scan_over_dim": (lambda np_: lambda x: jax_or_sc(np_).lax.scan(
        lambda c, r: (c + r, c * r), np_.zeros(4, np_.float32), x), [(("b", 4), F32)], "b",
        [1, 4]),
    "scan_symbolic_carry": (lambda np_: lambda x: jax_or_sc(np_).lax.scan(
        lambda c, r: (c + r, r * 2), x[:, 0] * 0, x.T, reverse=True),
        [(("b", 4), F32)], "b", [1, 3]),
    "dynamic_slice": (lambda np_: lambda x, i: (
        jax_or_sc(np_).lax.dynamic_slice(x, (i, 0), (1, 4)),
        jax_or_sc(np_).lax.dynamic_slice(x.T, (1, i), (2, x.shape[0])),
        jax_or_sc(np_).lax.dynamic_update_slice(x, np_.ones((1, 4), np_.float32), (i, 0))),
        [(("b", 4), F32), ((), np.int32)], "b", [1, 4]),
    "argmax_stack_eye_pad": (lambda np_: lambda x: (
        np_.argmax(x, axis=0), np_.argmin(x, axis=1), np_.stack([x, -x], 1),
        np_.eye(x.shape[0]), np_.pad(x, ((1, 2), (0, 1)))), [(("b", 4), F32)], "b", [1, 3]),
}


def jax_or_sc(np_):
  return jax if np_ is jjnp else sc


def _concrete(shape_list, dims_spec, size, rng):
  names = [d.strip() for d in dims_spec.split(",")]
  sizes = size if isinstance(size, tuple) else (size,)
  env = dict(zip(names, sizes))
  return [rng.standard_normal(tuple(eval(d, env) if isinstance(d, str) else d
                                    for d in shape)).astype(dt) for shape, dt in shape_list]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_export_and_call_as_jax(name):
  make, shapes, dims, sizes = PROGRAMS[name]
  jexp = jexport.export(jax.jit(make(jjnp)))(*_specs(jax, shapes, dims))
  exp = export.export(sc.jit(make(jnp)))(*_specs(sc, shapes, dims))
  assert [str(a) for a in exp.in_avals] == [str(a) for a in jexp.in_avals]
  assert [str(a) for a in exp.out_avals] == [str(a) for a in jexp.out_avals]
  assert "tensor<?x" in exp.mlir_module() or "x?x" in exp.mlir_module()
  rt = export.deserialize(exp.serialize())
  assert [str(a) for a in rt.in_avals] == [str(a) for a in exp.in_avals]
  assert [str(a) for a in rt.out_avals] == [str(a) for a in exp.out_avals]
  rng = np.random.default_rng(0)
  for size in sizes:
    args = _concrete(shapes, dims, size, rng)
    want = jexp.call(*args)
    for e in (exp, rt):
      got = e.call(*args)
      jax.tree.map(lambda g, w: np.testing.assert_allclose(np.asarray(g), np.asarray(w),
                                                            rtol=2e-6, atol=2e-6), got, want)
      jax.tree.map(lambda g, w: (g.shape, g.dtype) == (w.shape, w.dtype) or pytest.fail(
          f"{g.shape} {g.dtype} != {w.shape} {w.dtype}"), got, want)


def test_call_under_jit_and_in_a_bigger_program():
  b, = export.symbolic_shape("b")
  exp = export.export(sc.jit(lambda x: jnp.sum(jnp.cos(x), axis=1)))(
      sc.ShapeDtypeStruct((b, 3), np.float32))
  rt = export.deserialize(exp.serialize())
  x = np.arange(12, dtype=np.float32).reshape(4, 3)
  want = np.sum(np.cos(x), axis=1) * 2
  got = sc.jit(lambda x: rt.call(x) * 2)(x)
  np.testing.assert_allclose(got, want, rtol=1e-6)
  x2 = np.ones((2, 3), np.float32)
  np.testing.assert_allclose(sc.jit(lambda x: rt.call(x) + rt.call(x))(x2),
                             2 * np.sum(np.cos(x2), axis=1), rtol=1e-6)
  text = sc.jit(lambda x: rt.call(x)).lower(x).as_text()
  assert "?" not in text.split("func.func public @main")[1].split("{")[0]
  jaxpr = sc.make_jaxpr(rt.call)(x)
  assert "f32[4]" in str(jaxpr)


def _call_errors(exp, jexp, args):
  with pytest.raises(Exception) as want:
    jexp.call(*args)
  with pytest.raises(type(want.value)) as got:
    exp.call(*args)
  return str(got.value), str(want.value)


def test_call_errors_as_jax():
  b, = export.symbolic_shape("b")
  jb, = jexport.symbolic_shape("b")
  f = lambda x, y: x + y
  exp = export.export(sc.jit(f))(sc.ShapeDtypeStruct((b, 4), np.float32),
                                 sc.ShapeDtypeStruct((b, 4), np.float32))
  jexp = jexport.export(jax.jit(f))(jax.ShapeDtypeStruct((jb, 4), np.float32),
                                    jax.ShapeDtypeStruct((jb, 4), np.float32))
  ones = lambda *s: np.ones(s, np.float32)
  # a dimension that must be equal in two arguments
  got, want = _call_errors(exp, jexp, (ones(3, 4), ones(2, 4)))
  assert got == want
  # wrong rank; a constant dimension; dtype
  for args in [(ones(3), ones(3)), (ones(3, 5), ones(3, 5)),
               (np.ones((3, 4), np.int32), np.ones((3, 4), np.int32))]:
    got, want = _call_errors(exp, jexp, args)
    assert got == want
  # a dimension variable below its lower bound
  got, want = _call_errors(exp, jexp, (ones(0, 4), ones(0, 4)))
  assert got.replace("{0}", "0") == want.replace("{0}", "0")


def test_call_error_division_remainder_as_jax():
  s = export.symbolic_shape("2*b")
  js = jexport.symbolic_shape("2*b")
  f = lambda x: x * 2
  exp = export.export(sc.jit(f))(sc.ShapeDtypeStruct(s, np.float32))
  jexp = jexport.export(jax.jit(f))(jax.ShapeDtypeStruct(js, np.float32))
  assert str(exp.in_avals) == str(jexp.in_avals)
  got, want = _call_errors(exp, jexp, (np.ones(5, np.float32),))
  assert got == want
  np.testing.assert_allclose(exp.call(np.ones(6, np.float32)), 2 * np.ones(6))


def test_inconclusive_comparison_while_tracing_as_jax():
  b, = export.symbolic_shape("b")
  jb, = jexport.symbolic_shape("b")
  f = lambda x: x if x.shape[0] >= 2 else -x
  with pytest.raises(Exception) as want:
    jexport.export(jax.jit(f))(jax.ShapeDtypeStruct((jb,), np.float32))
  with pytest.raises(InconclusiveDimensionOperation) as got:
    export.export(sc.jit(f))(sc.ShapeDtypeStruct((b,), np.float32))
  assert str(got.value) == str(want.value)


def test_unsupported_primitive_names_it():
  b, = export.symbolic_shape("b")
  with pytest.raises(NotImplementedError, match=r"'cholesky'.*'b'"):
    export.export(sc.jit(jnp.linalg.cholesky))(sc.ShapeDtypeStruct((b, 3, 3), np.float32))


def test_symbolic_args_specs_and_constraints_round_trip():
  x = np.zeros((3, 8), np.float32)
  specs = export.symbolic_args_specs((x,), "b, 8", constraints=("b >= 2",))
  assert str(specs[0].shape) == "(b, 8)"
  exp = export.export(sc.jit(lambda x: jnp.sum(x, axis=0)))(*specs)
  rt = export.deserialize(exp.serialize())
  np.testing.assert_allclose(rt.call(np.ones((4, 8), np.float32)), 4 * np.ones(8))
  with pytest.raises(ValueError, match=r"symbolic shape constraint b >= 2"):
    rt.call(np.ones((1, 8), np.float32))


@pytest.mark.parametrize("constraints, shapes", [
    (("b >= 2",), [(1, 4)]), (("b <= 3",), [(4, 4)]), (("2*b >= b + 3",), [(2, 4)]),
    (("a >= b",), [(1, 4), (2, 4)])])
def test_constraint_violations_as_jax(constraints, shapes):
  names = "a, b" if len(shapes) == 2 else "b"
  dims = export.symbolic_shape(names, constraints=constraints)
  jdims = jexport.symbolic_shape(names, constraints=constraints)
  f = lambda *xs: sum(jnp.sum(x) for x in xs)
  jf = lambda *xs: sum(jjnp.sum(x) for x in xs)
  exp = export.export(sc.jit(f))(*[sc.ShapeDtypeStruct((d, 4), np.float32) for d in dims])
  jexp = jexport.export(jax.jit(jf))(*[jax.ShapeDtypeStruct((d, 4), np.float32)
                                       for d in jdims])
  got, want = _call_errors(exp, jexp, [np.ones(s, np.float32) for s in shapes])
  assert got == want


def test_slices_with_constraints():
  # x[-2:] and x[1:3] have sizes `- max(0, b - 2) + b` and `min(b, 3) - 1` (JAX's `max`/`min`
  # dimensions; test_export_symbolic_2.py); constraints that decide them make them `2`.
  b, = export.symbolic_shape("b", constraints=("b >= 3",))
  jb, = jexport.symbolic_shape("b", constraints=("b >= 3",))
  f = lambda x: (x[-2:], x[1:3], x[:-2] * 2)
  exp = export.export(sc.jit(f))(sc.ShapeDtypeStruct((b, 4), np.float32))
  jexp = jexport.export(jax.jit(f))(jax.ShapeDtypeStruct((jb, 4), np.float32))
  assert [str(a) for a in exp.out_avals] == [str(a) for a in jexp.out_avals]
  for n in (3, 6):
    x = np.arange(4 * n, dtype=np.float32).reshape(n, 4)
    for g, w in zip(exp.call(x), jexp.call(x)):
      np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_strided_slice_of_symbolic_axis():
  # As JAX's jnp indexing (a gather): `floordiv(b + 1, 2)` and `floordiv(b + 1, 3)`.
  b, = export.symbolic_shape("b")
  jb, = jexport.symbolic_shape("b")
  f = lambda x: (x[::2], x[1::3])
  exp = export.export(sc.jit(f))(sc.ShapeDtypeStruct((b, 4), np.float32))
  jexp = jexport.export(jax.jit(f))(jax.ShapeDtypeStruct((jb, 4), np.float32))
  assert [str(a) for a in exp.out_avals] == [str(a) for a in jexp.out_avals]
  assert str(exp.out_avals[0].str_short()) == "f32[floordiv(b + 1, 2),4]"
  for n in (1, 2, 5, 6):
    x = np.arange(4 * n, dtype=np.float32).reshape(n, 4)
    for g, w in zip(exp.call(x), (x[::2], x[1::3])):
      np.testing.assert_array_equal(np.asarray(g), w)


GRAD_PROGRAMS = {
    "sin_sum": lambda np_: lambda x: np_.sum(np_.sin(x) * x, axis=1),
    "mean_div": lambda np_: lambda x: x / x.shape[0] - np_.mean(x, axis=0),
    "cumsum": lambda np_: lambda x: np_.cumsum(x, 0) ** 2,
    "slices": lambda np_: lambda x: x[1:] * x[:-1],
    "gather_sort": lambda np_: lambda x: np_.sort(x, 0)[np_.array([0, 0, 1])] * 3,
    "scan": lambda np_: lambda x: jax_or_sc(np_).lax.scan(
        lambda c, r: (c * r + 1, c), np_.ones(4, np_.float32), x)[1],
}


@pytest.mark.parametrize("name", sorted(GRAD_PROGRAMS))
def test_grad_of_call_as_jax(name):
  make = GRAD_PROGRAMS[name]
  b, = export.symbolic_shape("b")
  jb, = jexport.symbolic_shape("b")
  exp = export.export(sc.jit(make(jnp)))(sc.ShapeDtypeStruct((b, 4), np.float32))
  jexp = jexport.export(jax.jit(make(jjnp)))(jax.ShapeDtypeStruct((jb, 4), np.float32))
  assert [str(a) for a in exp.vjp().in_avals] == [str(a) for a in jexp.vjp().in_avals]
  assert [str(a) for a in exp.vjp().out_avals] == [str(a) for a in jexp.vjp().out_avals]
  rt = export.deserialize(exp.serialize(vjp_order=1))
  for n in (2, 5):
    x = np.random.default_rng(n).uniform(0.5, 1.5, (n, 4)).astype(np.float32)
    want = jax.grad(lambda x: jjnp.sum(jexp.call(x)))(x)
    for e in (exp, rt):
      got = sc.grad(lambda x: jnp.sum(e.call(x)))(x)
      np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-5)
  with pytest.raises(ValueError, match="No VJP"):
    export.deserialize(exp.serialize()).vjp()


def test_concrete_exports_unchanged():
  exp = export.export(sc.jit(jnp.sin))(np.zeros(3, np.float32))
  assert not exp.uses_global_constants
  assert "jax.uses_shape_polymorphism = false" in exp.mlir_module()
  np.testing.assert_allclose(export.deserialize(exp.serialize()).call(np.zeros(3, np.float32)),
                             np.zeros(3))
