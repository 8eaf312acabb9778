"""stagecraft.export with symbolic dimensions, continued (see test_export_symbolic.py), with
JAX's export as the oracle: `max`/`min` dimension expressions (slices of symbolic axes),
strided and reversed slices, index arrays of symbolic shape, `roll`, `triu`/`tril`, FFTs,
`reduce_window` and `linspace` on symbolic axes: the exported avals, the values of `call`
for several sizes (those where the `max`/`min` branches differ included), the serialization
round trip, and JAX's errors where JAX refuses."""
import numpy as np
import pytest

import jax
import jax.numpy as jjnp
from jax import export as jexport
from jax._src import core as jcore

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import export, shape_poly
from stagecraft.errors import InconclusiveDimensionOperation


def _mods(np_):
  return (jax, jcore.max_dim, jcore.min_dim) if np_ is jjnp else (
      sc, shape_poly.max_dim, shape_poly.min_dim)


# ---------------------------------------------------------------------------
# max / min dimension expressions


MINMAX_EXPRS = ["max(b, 3) + min(b, 2)", "max(a, b)", "min(a, b) * 2 + a",
                "max(0, b - 2) + floordiv(b, 2)", "b - max(0, b - 2)", "max(b, 3) * b",
                "min(b, 3) - 1", "floordiv(max(b, 3), 2)", "max(a, b) - min(a, b)",
                "mod(b, 2) + max(b, 5)", "max(b - 1, 1)", "min(2*b, b + 2)", "max(b, b + 1)",
                "min(a, 2) + min(b, 2)", "max(b, 1)", "min(b, 0)", "max(3, 5)"]


@pytest.mark.parametrize("expr", MINMAX_EXPRS)
def test_max_min_expressions_as_jax(expr):
  got = shape_poly.symbolic_shape(f"a, b, {expr}")[2]
  want = jexport.symbolic_shape(f"a, b, {expr}")[2]
  assert str(got) == str(want)
  assert isinstance(got, int) == isinstance(want, int)
  if shape_poly.is_symbolic_dim(got):
    for env in ({"a": 1, "b": 1}, {"a": 2, "b": 5}, {"a": 7, "b": 2}):
      assert got.evaluate(env) == want._evaluate(env)
    # the printed form parses back to the same expression
    assert shape_poly.parse_dim(str(got), got.scope) == got


# JAX's syntactic term order: by size (an operation counts its operands), then names.
ORDER_EXPRS = [
    lambda a, b, c: a % 3 + a * b, lambda a, b, c: c * c * a + b * b * b,
    lambda a, b, c: (a // 2) * (b % 3) + c, lambda a, b, c: a * (b // 2) + 5 * c - 1,
    lambda a, b, c: (a + b) // 3 + (c + 1) % 2 + a * b * c,
    lambda a, b, c: c * b * a * a + a * a * a * b, lambda a, b, c: (a * b) // 4 + a,
    lambda a, b, c: a * c + b * c + a * b, lambda a, b, c: b * (c // 2) * (a % 2),
    lambda a, b, c: (2 * a) // 3 - (b // 2), lambda a, b, c: 3 * a + 2 * b + c + 7]


@pytest.mark.parametrize("i", range(len(ORDER_EXPRS)))
def test_term_order_as_jax(i):
  got = ORDER_EXPRS[i](*shape_poly.symbolic_shape("a, b, c"))
  want = ORDER_EXPRS[i](*jexport.symbolic_shape("a, b, c"))
  assert str(got) == str(want)
  assert shape_poly.parse_dim(str(got), got.scope) == got


MINMAX_CMPS = ["MX(b, 3) >= 3", "MX(b, 3) >= b", "MN(b, 3) <= 3", "MN(b, 3) >= 1",
               "MX(b, 3) >= 4", "b - MX(0, b - 2) >= 1", "MN(a, b) <= a", "MX(a, b) >= a + 1",
               "MN(b, 3) - 1 >= 0", "MN(b, 3) >= 2", "b - MX(0, b - 2) <= 2",
               "MX(a, b) - MN(a, b) >= 0", "MN(b, 2) > 2", "MX(b, 2) < 2"]


@pytest.mark.parametrize("cmp", MINMAX_CMPS)
def test_max_min_comparisons_as_jax(cmp):
  a, b = shape_poly.symbolic_shape("a, b")
  ja, jb = jexport.symbolic_shape("a, b")
  try:
    want = eval(cmp, {"a": ja, "b": jb, "MX": jcore.max_dim, "MN": jcore.min_dim})
  except Exception as e:   # noqa: BLE001
    want = e
  env = {"a": a, "b": b, "MX": shape_poly.max_dim, "MN": shape_poly.min_dim}
  if isinstance(want, Exception):
    with pytest.raises(InconclusiveDimensionOperation) as info:
      eval(cmp, env)
    assert str(info.value) == str(want)
  else:
    assert eval(cmp, env) == want


SLICES = [slice(1, 3), slice(-2, None), slice(None, 3), slice(None, -2), slice(2, None),
          slice(None, None, 2), slice(1, None, 3), slice(None, None, -2),
          slice(None, None, -1), slice(1, -1), slice(-3, -1), slice(None, -1, 2),
          slice(5, 1, -1), slice(-1, None, -3), slice(0, 0), slice(7, None)]


@pytest.mark.parametrize("s", SLICES, ids=str)
def test_canonicalize_slice_as_jax(s):
  b, = shape_poly.symbolic_shape("b")
  jb, = jexport.symbolic_shape("b")
  got = shape_poly.canonicalize_slice(s, b)
  want = jcore.canonicalize_slice(s, jb)
  assert [str(g) for g in got] == [str(w) for w in want]
  for n in range(1, 9):
    start, step, size = (g.evaluate({"b": n}) if shape_poly.is_symbolic_dim(g) else g
                         for g in got)
    assert size == len(range(*s.indices(n)))
    if size:
      assert start == s.indices(n)[0] and step == s.indices(n)[2]


def test_canonicalize_slice_errors_as_jax():
  b, = shape_poly.symbolic_shape("b")
  jb, = jexport.symbolic_shape("b")
  for s, js in [(slice(b - 3, None), slice(jb - 3, None)),
                (slice(None, b - 2), slice(None, jb - 2))]:
    with pytest.raises(Exception) as want:
      jcore.canonicalize_slice(js, jb)
    with pytest.raises(InconclusiveDimensionOperation) as got:
      shape_poly.canonicalize_slice(s, b)
    assert str(got.value) == str(want.value)
  with pytest.raises(ValueError, match="slice step cannot be zero"):
    shape_poly.canonicalize_slice(slice(None, None, 0), b)
  assert shape_poly.max_dim(3, 5) == 5 and shape_poly.min_dim(3, 5) == 3


# ---------------------------------------------------------------------------
# Export and call: JAX's export of the same program is the oracle


F32, I32, C64 = np.float32, np.int32, np.complex64
PROGRAMS = {
    # name: (function of a numpy module, [(shape, dtype)], dims, sizes to call with)
    "slices_min_max": (lambda np_: lambda x: (x[1:3], x[-2:], x[:3], x[:-2], x[2:],
                                              x[-3:-1], x[5:1:-1], x[7:]),
                       [(("b", 4), F32)], "b", [1, 2, 3, 6, 9]),
    "slices_strided": (lambda np_: lambda x: (x[::2], x[1::3], x[::-2], x[1:, ::2], x[::-1],
                                              x[:-1:2], x[-1::-3], x[None, ::2, 1]),
                       [(("b", 4), F32)], "b", [1, 2, 5, 6]),
    "slices_two_dims": (lambda np_: lambda x: (x[1:, :-1], x[::2, ::3], x[..., 1:2], x[0]),
                        [(("a", "b"), F32)], "a, b", [(1, 1), (2, 5), (4, 3)]),
    "index_array_symbolic": (lambda np_: lambda x, i: (x[i], np_.take(x, i, axis=0),
                                                      x[i, 1:3], x[i][:, None], x[i, i % 4]),
                             [(("b", 4), F32), (("b",), I32)], "b", [1, 3, 5]),
    "index_array_into_const": (lambda np_: lambda x, i: (x[i], x[:, i], x[i, ::2],
                                                        np_.take(x, i, axis=1)),
                               [((4, 4), F32), (("c",), I32)], "c", [1, 6]),
    "index_array_both": (lambda np_: lambda x, i: (x[i], x[i, -1], x.at[i].add(1.0)),
                         [(("b", 3), F32), (("c",), I32)], "b, c", [(1, 2), (4, 3)]),
    "roll": (lambda np_: lambda x, s: (np_.roll(x, 2, axis=0), np_.roll(x, -1, axis=0),
                                       np_.roll(x, 1), np_.roll(x, (1, 2), axis=(0, 1)),
                                       np_.roll(x, s, axis=0), np_.roll(x, 7, axis=1)),
             [(("b", 4), F32), ((), I32)], "b", [1, 3, 5]),
    "triu_tril": (lambda np_: lambda x, y: (np_.triu(x), np_.tril(x, -1), np_.triu(y, 1),
                                            np_.tril(y), np_.tri(y.shape[0], k=1),
                                            np_.triu(np_.stack([x, x]))),
                  [(("b", 4), F32), (("b", "b"), F32)], "b", [1, 3, 6]),
    "fft_const_axes": (lambda np_: lambda x, c: (
        np_.fft.fft(x, axis=1), np_.fft.rfft(x, axis=1), np_.fft.irfft(c, axis=1),
        np_.fft.ifft(c, axis=-1, norm="ortho"), np_.fft.fft(x, axis=1, norm="forward")),
        [(("b", 4), F32), (("b", 3), C64)], "b", [1, 4]),
    "fft_nd_and_n": (lambda np_: lambda x: (np_.fft.fft2(x), np_.fft.fft(x[:, 0], n=8, axis=0),
                                            np_.fft.rfftn(x, axes=(1, 2))),
                     [(("b", 4, 4), F32)], "b", [1, 3, 9]),
    "fft_helpers": (lambda np_: lambda x: (np_.fft.fftshift(x, axes=0), np_.fft.ifftshift(x),
                                           np_.fft.fftfreq(x.shape[0]),
                                           np_.fft.fftfreq(x.shape[0], 0.5),
                                           np_.fft.rfftfreq(x.shape[0], 0.5)),
                    [(("b", 4), F32)], "b", [1, 4, 5]),
    "reduce_window": (lambda np_: lambda x: (
        _mods(np_)[0].lax.reduce_window(x, 0., _mods(np_)[0].lax.add, (2, 1), (1, 1), "VALID"),
        _mods(np_)[0].lax.reduce_window(x, 0., _mods(np_)[0].lax.add, (2, 1), (2, 1), "VALID"),
        _mods(np_)[0].lax.reduce_window(x, 0., _mods(np_)[0].lax.add, (3, 1), (1, 1),
                                        ((1, 1), (0, 0))),
        _mods(np_)[0].lax.reduce_window(x, -np_.inf, _mods(np_)[0].lax.max, (2, 2), (2, 1),
                                        "VALID"),
        _mods(np_)[0].lax.reduce_window(x, np_.inf, _mods(np_)[0].lax.min, (1, 2), (1, 1),
                                        "VALID"),
        _mods(np_)[0].lax.reduce_window(x, 0., _mods(np_)[0].lax.add, (2, 1), (1, 1), "VALID",
                                        window_dilation=(2, 1)),
        _mods(np_)[0].lax.reduce_window(x, 0., _mods(np_)[0].lax.add, (2, 1), (1, 1), "VALID",
                                        base_dilation=(2, 1))),
        [(("b", 3), F32)], "b", [1, 2, 5]),
    "avg_pool_batch": (lambda np_: lambda x: _mods(np_)[0].lax.reduce_window(
        x, 0., _mods(np_)[0].lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "SAME") / 4.,
        [(("b", 6, 5, 3), F32)], "b", [1, 3]),
    "linspace_static_num": (lambda np_: lambda x: (np_.linspace(x[0], x[-1], num=5),
                                                   np_.linspace(x[0, 0], x[1, 1], 3,
                                                                endpoint=False)),
                            [(("b", 4), F32)], "b", [2, 4]),
}


def _specs(mod, spec_list, scope_spec):
  parse = jexport.symbolic_shape if mod is jax else export.symbolic_shape
  names = [d.strip() for d in scope_spec.split(",")]
  dims = dict(zip(names, parse(scope_spec)))
  return [mod.ShapeDtypeStruct(tuple(eval(d, dict(dims)) if isinstance(d, str) else d
                                     for d in shape), dt) for shape, dt in spec_list]


def _concrete(shape_list, dims_spec, size, rng):
  names = [d.strip() for d in dims_spec.split(",")]
  env = dict(zip(names, size if isinstance(size, tuple) else (size,)))
  shapes = [tuple(eval(d, dict(env)) if isinstance(d, str) else d for d in shape)
            for shape, _ in shape_list]
  # index arrays take values valid for every array argument's leading axis (negative too)
  m = min(s[0] for s, (_, dt) in zip(shapes, shape_list) if s and dt != I32)
  out = []
  for s, (_, dt) in zip(shapes, shape_list):
    if dt == I32:
      out.append(rng.integers(-m, m, s).astype(dt) if s else np.int32(rng.integers(-7, 7)))
    elif dt == C64:
      out.append((rng.standard_normal(s) + 1j * rng.standard_normal(s)).astype(dt))
    else:
      out.append(rng.standard_normal(s).astype(dt))
  return out


def _check_tree(got, want, tol=2e-5):
  jax.tree.map(lambda g, w: np.testing.assert_allclose(np.asarray(g), np.asarray(w),
                                                        rtol=tol, atol=tol), got, want)
  jax.tree.map(lambda g, w: (g.shape, g.dtype) == (w.shape, w.dtype) or pytest.fail(
      f"{g.shape} {g.dtype} != {w.shape} {w.dtype}"), got, want)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_export_and_call_as_jax(name):
  make, shapes, dims, sizes = PROGRAMS[name]
  jexp = jexport.export(jax.jit(make(jjnp)))(*_specs(jax, shapes, dims))
  exp = export.export(sc.jit(make(jnp)))(*_specs(sc, shapes, dims))
  assert [str(a) for a in exp.in_avals] == [str(a) for a in jexp.in_avals]
  assert [str(a) for a in exp.out_avals] == [str(a) for a in jexp.out_avals]
  assert "?x" in exp.mlir_module()
  rt = export.deserialize(exp.serialize())
  assert [str(a) for a in rt.out_avals] == [str(a) for a in exp.out_avals]
  rng = np.random.default_rng(0)
  for size in sizes:
    args = _concrete(shapes, dims, size, rng)
    want = jexp.call(*args)
    for e in (exp, rt):
      _check_tree(e.call(*args), want)


GRAD_PROGRAMS = {
    "min_max_slices": lambda np_: lambda x: np_.concatenate([x[1:3] * 2, x[-2:] ** 2,
                                                             x[2:]], 0),
    "strided": lambda np_: lambda x: x[::2] * x[::2] + x[::-2],
    "roll_fft": lambda np_: lambda x: np_.roll(x, 1, axis=0) * np_.abs(np_.fft.rfft(x, axis=1)
                                                                      )[:, :2].sum(1)[:, None],
    "reduce_window": lambda np_: lambda x: _mods(np_)[0].lax.reduce_window(
        x, 0., _mods(np_)[0].lax.add, (2, 1), (1, 1), "VALID") ** 2,
}


@pytest.mark.parametrize("name", sorted(GRAD_PROGRAMS))
def test_grad_of_call_as_jax(name):
  make = GRAD_PROGRAMS[name]
  b, = export.symbolic_shape("b")
  jb, = jexport.symbolic_shape("b")
  exp = export.export(sc.jit(make(jnp)))(sc.ShapeDtypeStruct((b, 4), np.float32))
  jexp = jexport.export(jax.jit(make(jjnp)))(jax.ShapeDtypeStruct((jb, 4), np.float32))
  assert [str(a) for a in exp.vjp().out_avals] == [str(a) for a in jexp.vjp().out_avals]
  for n in (1, 2, 5):
    x = np.random.default_rng(n).uniform(0.5, 1.5, (n, 4)).astype(np.float32)
    want = jax.grad(lambda x: jjnp.sum(jexp.call(x)))(x)
    got = sc.grad(lambda x: jnp.sum(exp.call(x)))(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-5)


# ---------------------------------------------------------------------------
# Where JAX refuses: the same error (type and message)


ERRORS = {
    "fft_symbolic_length": lambda np_: lambda x: np_.fft.fft(x, axis=0),
    "ifft_symbolic_length": lambda np_: lambda x: np_.fft.ifft(x, axis=0),
    "irfft_symbolic_length": lambda np_: lambda x: np_.fft.irfft(x, axis=0),
    "linspace_symbolic_num": lambda np_: lambda x: np_.linspace(0., 1., num=x.shape[0]),
    "linspace_symbolic_num_noend": lambda np_: lambda x: np_.linspace(
        x[0, 0], x[1, 0], num=x.shape[0], endpoint=False),
    "lax_slice_undecided": lambda np_: lambda x: _mods(np_)[0].lax.slice(x, (1, 0), (3, 4)),
    "slice_start_undecided": lambda np_: lambda x: x[x.shape[0] - 3:],
    "slice_stop_undecided": lambda np_: lambda x: x[:x.shape[0] - 2:2],
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_as_jax(name):
  make = ERRORS[name]
  b, = export.symbolic_shape("b")
  jb, = jexport.symbolic_shape("b")
  dt = C64 if "fft" in name else F32
  with pytest.raises(Exception) as want:
    jexport.export(jax.jit(make(jjnp)))(jax.ShapeDtypeStruct((jb, 4), dt))
  with pytest.raises(Exception) as got:
    export.export(sc.jit(make(jnp)))(sc.ShapeDtypeStruct((b, 4), dt))
  assert type(got.value).__name__ == type(want.value).__name__
  assert isinstance(got.value, (InconclusiveDimensionOperation, NotImplementedError))
  assert str(got.value) == str(want.value)


# ---------------------------------------------------------------------------
# Python conversions of a symbolic dimension: JAX's `_DimExpr` has no `__index__` and no
# `__float__` (TypeError), and `int` raises InconclusiveDimensionOperation


CONVERSIONS = {
    "operator.index": lambda b: __import__("operator").index(b), "int": int,
    "range": range, "list index": lambda b: [1, 2, 3][b], "np.zeros": np.zeros,
    "float": float, "hex": hex, "np.int64": np.int64, "bool": bool,
    "constant expression": lambda b: __import__("operator").index(b - b + 3),
}


@pytest.mark.parametrize("name", sorted(CONVERSIONS))
def test_python_conversions_as_jax(name):
  f = CONVERSIONS[name]
  b, = export.symbolic_shape("b")
  jb, = jexport.symbolic_shape("b")
  try:
    want = f(jb)
  except Exception as e:  # noqa: BLE001 - the oracle's exception, whatever it is
    with pytest.raises(Exception) as got:
      f(b)
    assert type(got.value).__name__ == type(e).__name__
    assert str(got.value).splitlines()[0] == str(e).splitlines()[0]
  else:
    assert f(b) == want


# ---------------------------------------------------------------------------
# A dimension meeting a float or an array becomes a value (JAX's shape_poly guide)


def test_dimension_with_floats_and_arrays_is_a_value():
  def make(np_, lib):
    return lambda x: (5. + x.shape[0], x.shape[0] - np.arange(5, dtype=np.int32),
                      x + x.shape[0] + np_.sin(x.shape[0]), x.shape[0] / 2.,
                      2. / x.shape[0], x.shape[0] * 1.5, np.float32(2) * x.shape[0])

  e = export.export(sc.jit(make(jnp, sc)))(
      sc.ShapeDtypeStruct(export.symbolic_shape("b"), np.int32))
  j = jexport.export(jax.jit(make(jjnp, jax)))(
      jax.ShapeDtypeStruct(jexport.symbolic_shape("b"), np.int32))
  assert repr(e.out_avals) == repr(j.out_avals)
  for n in (1, 3, 6):
    x = np.ones((n,), np.int32)
    for got, want in zip(e.call(x), j.call(x)):
      assert repr(got) == repr(want)
  b, = export.symbolic_shape("b")
  # integers keep dimension expressions
  assert str(b * 2 + 1) == "2*b + 1" and str(3 - b) == str(3 - jexport.symbolic_shape("b")[0])


# ---------------------------------------------------------------------------
# Equality constraints: JAX's rewrite rules


@pytest.mark.parametrize("constraints, exprs", [
    (("a * b == c + d",), ["2 * b * a", "a * b * b", "a * b - c", "a + b", "(a * b * b) // b"]),
    (("4 * a == c",), ["8 * a", "4 * a + 1", "2 * a", "6 * a"]),
    (("a * b == c", "a * b == 3"), ["c", "a * b + c"]),
    (("a == c",), ["a + c", "a * b"]),
])
def test_equality_constraints_rewrite_as_jax(constraints, exprs):
  ours = dict(zip("abcd", export.symbolic_shape("a, b, c, d", constraints=constraints)))
  theirs = dict(zip("abcd", jexport.symbolic_shape("a, b, c, d", constraints=constraints)))
  for e in exprs:
    assert str(eval(e, {}, ours)) == str(eval(e, {}, theirs)), e


def test_equality_constraints_decide_comparisons_and_errors():
  a, b, c, d = export.symbolic_shape("a, b, c, d", constraints=("a * b == c + d",))
  assert a * b >= c and a * b > d and (a * b == c + d)
  for bad in ("a + b == c", "2 == 3"):
    with pytest.raises(ValueError) as ours:
      export.symbolic_shape("a, b, c", constraints=(bad,))
    with pytest.raises(ValueError) as theirs:
      jexport.symbolic_shape("a, b, c", constraints=(bad,))
    # NB: JAX's message for a bad left side prints "{e1} == {e2}" literally; ours names them
    assert str(ours.value).split(":")[0] == str(theirs.value).split(":")[0]
    assert str(ours.value).split(". ")[-1] == str(theirs.value).split(". ")[-1]
  for mod in (export, jexport):
    with pytest.raises(NotImplementedError, match="same left-hand-side: a"):
      mod.symbolic_shape("a, c, d", constraints=("2 * a == c", "3 * a == d"))


def test_equality_constraint_in_an_export():
  specs, jspecs = [], []
  for mod, out in ((export, specs), (jexport, jspecs)):
    a, b, c = mod.symbolic_shape("a, b, c", constraints=("a * b == c",))
    out += [(a, b), (c,)]
  e = export.export(sc.jit(lambda x, y: x.reshape(-1) + y))(
      sc.ShapeDtypeStruct(specs[0], np.float32), sc.ShapeDtypeStruct(specs[1], np.float32))
  j = jexport.export(jax.jit(lambda x, y: x.reshape(-1) + y))(
      jax.ShapeDtypeStruct(jspecs[0], np.float32), jax.ShapeDtypeStruct(jspecs[1], np.float32))
  assert repr(e.out_avals) == repr(j.out_avals) == "(ShapedArray(float32[c]),)"
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  r = export.deserialize(e.serialize())
  for fn in (e.call, r.call, sc.jit(e.call)):
    np.testing.assert_array_equal(fn(x, np.ones(6, np.float32)), j.call(x, np.ones(6, np.float32)))
  bad = (x, np.ones(5, np.float32))
  with pytest.raises(ValueError) as ours:
    e.call(*bad)
  with pytest.raises(ValueError) as theirs:
    j.call(*bad)
  assert str(ours.value) == str(theirs.value)


# ---------------------------------------------------------------------------
# Division by a symbolic dimension


SYMBOLIC_DIVISIONS = ["a // b", "a % b", "7 // b", "7 % b", "(2 * a) // b", "(a * b) // b",
                      "(a * b + 1) // b", "divmod(a + 3, b)", "(a // b) * b + a % b",
                      "a // b >= 0", "a % b >= 0", "a // b <= a", "(a // b) + 1",
                      "a // (2 * b)", "a // (b + 1)", "a // b // 2", "0 // b", "a % b < b"]


@pytest.mark.parametrize("expr", SYMBOLIC_DIVISIONS)
def test_division_by_a_symbolic_dimension_as_jax(expr):
  """As JAX's: an inexact division by a symbolic dimension is the atom `floordiv(e, d)` (and
  `mod(e, d)`), with JAX's printed form, bounds and values."""
  a, b = shape_poly.symbolic_shape("a, b")
  ja, jb = jexport.symbolic_shape("a, b")
  try:
    want = eval(expr, {"a": ja, "b": jb})
  except Exception as e:   # noqa: BLE001
    want = e
  if isinstance(want, Exception):
    with pytest.raises(InconclusiveDimensionOperation) as info:
      eval(expr, {"a": a, "b": b})
    assert str(info.value) == str(want)
    return
  got = eval(expr, {"a": a, "b": b})
  assert str(got) == str(want)
  for g, w in zip(got if isinstance(got, tuple) else (got,),
                  want if isinstance(want, tuple) else (want,)):
    if shape_poly.is_symbolic_dim(g):
      for env in ({"a": 1, "b": 1}, {"a": 12, "b": 5}, {"a": 3, "b": 7}):
        assert g.evaluate(env) == w._evaluate(env)
      assert shape_poly.parse_dim(str(g), g.scope) == g


def test_export_with_division_by_a_symbolic_dimension_as_jax():
  """A program whose shapes divide one symbolic dimension by another exports, serializes and
  runs for several sizes (the quotients computed at run time), as JAX's."""
  def fn(np_):
    def f(x, y):
      n, m = x.shape[0] // y.shape[0], x.shape[0] % y.shape[0]
      return (np_.arange(n) * 2 + x.sum(), np_.ones((m + 1,)) * y.sum(),
              np_.zeros((7 // y.shape[0] + 1,)))
    return f

  def exported(lib, np_, ex):
    a, b = ex.symbolic_shape("a, b")
    return ex.export(lib.jit(fn(np_)))(lib.ShapeDtypeStruct((a,), np.float32),
                                       lib.ShapeDtypeStruct((b,), np.float32))
  ours, theirs = exported(sc, jnp, export), exported(jax, jjnp, jexport)
  assert [str(a) for a in ours.out_avals] == [str(a) for a in theirs.out_avals]
  back = export.deserialize(ours.serialize())
  for n1, n2 in [(12, 3), (13, 5), (5, 9), (1, 1)]:
    x, y = np.arange(n1, dtype=np.float32), np.ones(n2, np.float32)
    want = [np.asarray(o) for o in theirs.call(x, y)]
    for got in (ours.call(x, y), back.call(x, y)):
      for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w)
