"""Differential fuzzing: random programs run on stagecraft and on JAX 0.10.2 must agree.

Hypothesis draws a program (tests/_fuzz_ops.py: a straight-line composition of elementwise
ops, integer division and shifts, comparisons, reductions, shape ops, indexing, dot/matmul,
cumulative ops, where/select, casts and jnp functions, over bool/int/uint/float/bfloat16/
complex dtypes, x64 off and on), builds it once as a Python function of the library, and
runs it under one transformation (eager, jit, grad, vmap, jvp, linearize, scan, cond) on both
libraries in this process. Results must have the same tree of leaves, shapes, dtypes and weak
types, and values within per-dtype tolerances (NaN positions equal, integers exact); if one
side raises, the other must raise too, of the same family where JAX raises TypeError,
ValueError or IndexError.

Profiles: the default run draws a few hundred programs (derandomized). The long profile,
`python -m pytest -p no:xdist -m fuzz_long tests/test_fuzz.py`, draws about 3,000 (add
`--hypothesis-seed=N` to replay a run). With `STAGECRAFT_FUZZ_REPORT=path` set, mismatches are
appended to `path` (one JSON object a line) instead of failing, so a long run lists them all.

KNOWN lists the mismatches found, each keyed by its signature `op:dtype:transform[:x64]`
(the op, its operands' promoted dtype, the transformation; `*` matches any; see below), with
its minimal reproducer in `_KNOWN_REPRODUCERS`. Programs with a known signature are not drawn;
`test_known_mismatches_still_differ` fails once a fix lands, so the entry gets removed.
JAX_BUGS lists the places where JAX itself is wrong and stagecraft deliberately differs.
"""
from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import stagecraft as sc
import stagecraft.numpy as snp

from _fuzz_ops import (BF16, DIFF_TRANSFORMS, F16, TRANSFORMS, Aval, kind, make_value,
                       programs)

# -- known mismatches: signature -> "stagecraft gives X, JAX gives Y; why / which module".
# A signature is "op:dtype:transform[:x32|:x64]": the op (an OPS name of tests/_fuzz_ops.py,
# or a mechanism the generator consults: int_literal_wraps, float_literal_overflow,
# lax_literal, tensordot_rank0, pad_rank0, quantile_empty, take_wrap_empty,
# quantile_keepdims_0d), the operands' promoted dtype
# (`weak_<dtype>` when all are weakly typed; `*` any, `weak_*` any weak), the transformation.
_COMPLEX_ORDER = ("JAX orders complex numbers lexicographically (real, then imag) in jnp "
                  "comparisons, max/min and their reductions, cumulative and scatter forms; "
                  "stagecraft's lax comparison/reduce_max/cummax/scatter-max rules reject complex "
                  "(lax/elementwise.py, lax/reduction.py, lax/cumulative.py, lax/slicing.py)")
_WEAK_BOOL = ("JAX keeps the weak type on the bool result when every operand is weakly typed "
              "(a Python scalar); stagecraft's result is strong (numpy/ufuncs.py)")
KNOWN: dict[str, str] = {
    "int_literal_wraps:*:*": (
        "jnp.add(uint8[2], -3): stagecraft raises OverflowError('Python integer -3 out of bounds "
        "for uint8'), JAX wraps the weakly typed int to the array dtype ([254, 255]) and raises "
        "only beyond the default int's range; weak Python-int conversion (numpy/util.py, dtypes)"),
    "float_literal_overflow:*:*": (
        "jnp.add(float16[1], 1e30): stagecraft emits RuntimeWarning('overflow encountered in "
        "cast') from numpy/util.py (an error under pytest), JAX silently gives inf"),
    "lax_literal:*:*": (
        "lax.max(int8[2], 3) / lax.add(float16, 1.5) / any lax binary op with a Python scalar "
        "whose default dtype differs from the array's (always under x64): JAX 0.10.2 raises "
        "TypeError('lax.max requires arguments to have the same dtypes, got int8, int32'), "
        "stagecraft promotes the weak scalar (lax/utils.py / lax/elementwise.py)"),
    "tensordot_rank0:*:*": (
        "jnp.tensordot(f32[], f32[], axes=1): stagecraft raises ValueError, JAX TypeError('Number "
        "of tensordot axes (axes 1) exceeds input ranks'); numpy/contractions.py"),
    "pad_rank0:*:*": (
        "jnp.pad(f32[], ()): JAX raises ValueError('pad_width with nd=0 has unsupported shape "
        "(0,)') (NumPy raises TypeError), stagecraft returns the scalar; numpy/manipulation.py"),
    "quantile_empty:*:*": (
        "jnp.quantile(f32[0,2], 0.5, method='higher'): JAX raises TypeError (gather slice size out "
        "of range; NumPy raises IndexError), stagecraft returns nan; numpy/statistics.py"),
    "angle:*:*": (
        "jnp.angle(float16[]) is float32 in JAX, float16 in stagecraft; jnp.angle(1.0) is "
        "strongly typed in JAX, weak in stagecraft (numpy/ufuncs.py)"),
    **{f"{op}:complex64:*": f"jnp {op} on complex64: stagecraft raises TypeError, JAX computes "
       f"it; " + _COMPLEX_ORDER
       for op in ("less", "less_equal", "greater", "greater_equal", "x<y", "x>=y", "fmax", "fmin",
                  "max", "min", "nanmax", "nanmin", "ptp", "lax.cummax", "lax.cummin",
                  "x.at[idx]")},
    "round:complex64:*": ("jnp.round(complex64): stagecraft raises TypeError('round does not "
                          "accept dtype complex64'), JAX rounds the real and imaginary parts "
                          "(numpy/ufuncs.py)"),
    "clip:complex64:*": ("jnp.clip(complex64, 0, 1): JAX raises ValueError('Clip received a complex "
                         "value'), stagecraft clips (numpy/ufuncs.py)"),
    **{f"{op}:weak_*:*": f"jnp.{op}(<Python scalar>, ...): " + _WEAK_BOOL
       for op in ("logical_and", "logical_or", "logical_xor", "isnan", "isfinite", "isreal")},
    **{f"{op}:{dt}:*": (f"{op}(int array, -3): stagecraft raises ValueError('Integers to "
                        "negative integer powers are not allowed'), JAX TypeError('Integers "
                        "cannot be raised to negative powers'); and 3 ** int8[-1, 0, 5] (a "
                        "Python int base) is [-85, 1, -13] in JAX, [0, 1, -13] in stagecraft, "
                        "0 ** int8[] int32{weak} in JAX, int8 in stagecraft (numpy/ufuncs.py "
                        "power, Array.__rpow__)")
       for op in ("power", "x**y") for dt in ("int8", "int16", "int32", "uint8", "uint32")},
    **{f"var:*:{t}": ("the tangent of jnp.var(f32[0,2], axis=0, ddof=1) is [0, 0] in JAX (the "
                      "tangent sum over no elements is 0), [nan, nan] in stagecraft "
                      "(numpy/reductions.py var)") for t in ("jvp", "linearize")},
    "x.astype:complex64:*": (
        "complex64[].astype(uint8) (complex to real): JAX emits DeprecationWarning('Casting from "
        "complex to real dtypes will soon raise a ValueError', an error under pytest), stagecraft "
        "casts silently (numpy/lax_numpy.py astype)"),
    "rint:complex64:*": ("jnp.rint(complex64(1.5+2.5j)): stagecraft raises TypeError('round "
                         "does not accept dtype complex64'), JAX gives 2+2j (numpy/ufuncs.py)"),
    **{f"logaddexp:{dt}:*": (f"jnp.logaddexp(int16[1], -0.5j) ({dt}): stagecraft's result is weakly "
                             "typed, JAX's strong (numpy/ufuncs.py logaddexp)")
       for dt in ("complex64", "complex128")},
    "take_wrap_empty:*:*": (
        "jnp.take(f32[0], [0, 0], mode='wrap'): JAX raises IndexError('Cannot do a non-empty "
        "jnp.take() from an empty axis'), stagecraft a NumPy RuntimeWarning ('divide by zero "
        "encountered in remainder', an error under pytest; otherwise it goes on); "
        "numpy/indexing.py take"),
    **{f"float_power:*:{t}": ("grad(lambda x: jnp.float_power(x, False))(0.0) (a bool/int "
                              "exponent 0, x = 0 or nan) is 0 in JAX, nan in stagecraft (the "
                              "power's JVP, lax/elementwise.py pow / numpy/ufuncs.py float_power)")
       for t in ("grad", "jvp", "linearize")},
    "rint:*:*:x64": ("under x64 jnp.rint(int8[1]) (any int/bool) is float64 in JAX, float32 in "
                     "stagecraft (numpy/ufuncs.py rint's result dtype)"),
    "lax.convert_element_type:complex64:*": (
        "lax.convert_element_type(complex64[], bool) (complex to a real type): JAX emits "
        "ComplexWarning (an error under pytest), stagecraft casts silently "
        "(lax/elementwise.py convert_element_type)"),
    "x.at[idx]:bool:*": ("x.at[0].add(True) on a bool array: JAX raises TypeError('add does not "
                         "accept dtype bool'), stagecraft adds (numpy/indexing.py scatter)"),
    "x**y:weak_*:*": ("jnp.asarray(3) ** False: JAX's result is weak int32, stagecraft's strong "
                      "(numpy/ufuncs.py power)"),
    "power:weak_*:*": "jnp.power(<Python int>, False): JAX's result is weak int32, stagecraft's "
                      "strong (numpy/ufuncs.py)",
    "rint:weak_*:*": "jnp.rint(<Python int>): JAX gives strong float32, stagecraft weak "
                     "(numpy/ufuncs.py)",
    "signbit:weak_*:*": "jnp.signbit(<Python int>): JAX gives a strong bool, stagecraft a weak "
                        "one (numpy/ufuncs.py)",
}

# -- where JAX is wrong and stagecraft deliberately differs: signature -> why
JAX_BUGS: dict[str, str] = {
    "gcd:*:*": ("jnp.gcd(int8(5), int8(-128)) never returns in JAX 0.10.2 (its while loop does "
                "not end when an operand is the most negative int); stagecraft gives NumPy's "
                "answer. Not drawn: one such program hangs the suite."),
    "lcm:*:*": "jnp.lcm calls jnp.gcd: the same hang (see gcd).",
    "quantile_keepdims_0d:*:*": (
        "jnp.median(float32[], keepdims=True) (and quantile) has shape (1,) in JAX; NumPy "
        "keeps 0-d inputs 0-d (no axes to keep), as stagecraft does."),
}

# signature -> (x64, fn(lib, np_) -> result): the minimal reproducers of KNOWN
_C3 = np.array([1 + 1j, 2 - 1j, 1 - 3j], np.complex64)
_KNOWN_REPRODUCERS: dict[str, tuple] = {
    "int_literal_wraps:*:*": (False, lambda lib, np_: np_.add(np.array([1, 2], np.uint8), -3)),
    "float_literal_overflow:*:*": (False, lambda lib, np_: np_.add(np.ones(1, np.float16), 1e30)),
    "lax_literal:*:*": (False, lambda lib, np_: lib.lax.max(np.array([1, 5], np.int8), 3)),
    "tensordot_rank0:*:*": (False, lambda lib, np_: np_.tensordot(np.float32(1), np.float32(2),
                                                                  axes=1)),
    "pad_rank0:*:*": (False, lambda lib, np_: np_.pad(np.float32(1), ())),
    "quantile_empty:*:*": (False, lambda lib, np_: np_.quantile(np.zeros((0, 2), np.float32),
                                                                0.5, method="higher")),
    "angle:*:*": (False, lambda lib, np_: (np_.angle(np.float16(1)), np_.angle(1.0))),
    "less:complex64:*": (False, lambda lib, np_: np_.less(_C3, _C3[::-1])),
    "less_equal:complex64:*": (False, lambda lib, np_: np_.less_equal(_C3, _C3[::-1])),
    "greater:complex64:*": (False, lambda lib, np_: np_.greater(_C3, _C3[::-1])),
    "greater_equal:complex64:*": (False, lambda lib, np_: np_.greater_equal(_C3, _C3[::-1])),
    "x<y:complex64:*": (False, lambda lib, np_: np_.asarray(_C3) < _C3[::-1]),
    "x>=y:complex64:*": (False, lambda lib, np_: np_.asarray(_C3) >= _C3[::-1]),
    "fmax:complex64:*": (False, lambda lib, np_: np_.fmax(_C3, _C3[::-1])),
    "fmin:complex64:*": (False, lambda lib, np_: np_.fmin(_C3, _C3[::-1])),
    "max:complex64:*": (False, lambda lib, np_: np_.max(_C3)),
    "min:complex64:*": (False, lambda lib, np_: np_.min(_C3)),
    "nanmax:complex64:*": (False, lambda lib, np_: np_.nanmax(_C3)),
    "nanmin:complex64:*": (False, lambda lib, np_: np_.nanmin(_C3)),
    "ptp:complex64:*": (False, lambda lib, np_: np_.ptp(_C3)),
    "lax.cummax:complex64:*": (False, lambda lib, np_: lib.lax.cummax(_C3, 0)),
    "lax.cummin:complex64:*": (False, lambda lib, np_: lib.lax.cummin(_C3, 0)),
    "x.at[idx]:complex64:*": (False, lambda lib, np_: np_.asarray(_C3).at[0].max(2j)),
    "round:complex64:*": (False, lambda lib, np_: np_.round(_C3)),
    "clip:complex64:*": (False, lambda lib, np_: np_.clip(_C3, 0, 1)),
    **{f"{op}:weak_*:*": (False, lambda lib, np_, op=op: getattr(np_, op)(2.5, False))
       for op in ("logical_and", "logical_or", "logical_xor")},
    "isnan:weak_*:*": (False, lambda lib, np_: np_.isnan(2)),
    "isfinite:weak_*:*": (False, lambda lib, np_: np_.isfinite(1 + 1j)),
    "isreal:weak_*:*": (False, lambda lib, np_: np_.isreal(2.5)),
    **{f"{op}:{dt}:*": (False, lambda lib, np_, op=op, dt=dt: (
        np_.power(np.ones(2, dt), -3) if op == "power" else np_.ones(2, dt) ** -3))
       for op in ("power", "x**y") for dt in ("int8", "int16", "int32", "uint8", "uint32")},
    **{f"var:*:{t}": (False, lambda lib, np_: lib.jvp(
        lambda x: np_.var(x, axis=0, ddof=1), (np.zeros((0, 2), np.float32),),
        (np.zeros((0, 2), np.float32),))) for t in ("jvp", "linearize")},
    "x.astype:complex64:*": (False, lambda lib, np_: np_.asarray(np.complex64(1 + 1j))
                             .astype(np.uint8)),
    "rint:complex64:*": (False, lambda lib, np_: np_.rint(np.complex64(1.5 + 2.5j))),
    **{f"logaddexp:{dt}:*": (dt == "complex128", lambda lib, np_: np_.logaddexp(
        np.array([1], np.int16), -0.5j)) for dt in ("complex64", "complex128")},
    "take_wrap_empty:*:*": (False, lambda lib, np_: np_.take(
        np.zeros(0, np.float32), np.array([0, 0], np.int32), mode="wrap")),
    **{f"float_power:*:{t}": (False, lambda lib, np_: lib.grad(
        lambda x: np_.float_power(x, False))(np.float32(0.0))) for t in ("grad", "jvp", "linearize")},
    "rint:*:*:x64": (True, lambda lib, np_: np_.rint(np.array([1], np.int8))),
    "lax.convert_element_type:complex64:*": (
        False, lambda lib, np_: lib.lax.convert_element_type(np.complex64(1 + 1j), np.bool_)),
    "x.at[idx]:bool:*": (False, lambda lib, np_: np_.asarray(np.array([True, False]))
                         .at[0].add(True)),
    "x**y:weak_*:*": (False, lambda lib, np_: np_.asarray(3) ** False),
    "power:weak_*:*": (False, lambda lib, np_: np_.power(np_.asarray(3), False)),
    "rint:weak_*:*": (False, lambda lib, np_: np_.rint(np_.asarray(3))),
    "signbit:weak_*:*": (False, lambda lib, np_: np_.signbit(np_.asarray(3))),
}

EXCLUDE = frozenset(tuple(k.split(":")) for k in (*KNOWN, *JAX_BUGS))

FAST_EXAMPLES = 12
LONG_EXAMPLES = 190
_REPORT = os.environ.get("STAGECRAFT_FUZZ_REPORT")


# -- running a program under a transformation

def _args(data, prog, transform):
  """The concrete arguments of `prog` under `transform`, and the transformation's params."""
  meta, extra = {}, ()
  inputs = prog.inputs
  if transform == "vmap":
    size = data.draw(st.integers(1, 3), label="batch size")
    axes = [data.draw(st.one_of(st.none(), st.integers(0, len(n.aval.shape))), label="in_axis")
            for n in inputs]
    if all(a is None for a in axes):
      axes[0] = 0
    meta["in_axes"] = tuple(axes)
    shapes = [n.aval.shape if a is None else n.aval.shape[:a] + (size,) + n.aval.shape[a:]
              for n, a in zip(inputs, axes)]
  elif transform == "scan":
    meta["length"] = data.draw(st.integers(0, 3), label="scan length")
    shapes = [(meta["length"],) + n.aval.shape for n in inputs]
  else:
    shapes = [n.aval.shape for n in inputs]
  args = [make_value(Aval(s, n.aval.dtype), n.seed, n.special, n.pyscalar)
          for n, s in zip(inputs, shapes)]
  if transform in DIFF_TRANSFORMS:
    meta["diff"] = tuple(i for i, n in enumerate(inputs) if kind(n.aval.dtype) in "fc")
    meta["tangents"] = tuple(make_value(Aval(shapes[i], inputs[i].aval.dtype), 7 + i, False)
                             for i in meta["diff"])
  if transform == "cond":
    extra = (np.bool_(data.draw(st.booleans(), label="pred")),)
  return (*extra, *args), meta


def run(prog, transform, meta, lib, np_, args):
  """Runs `prog` under `transform` with library `lib` (stagecraft or jax)."""
  def f(*xs):
    return prog(lib, np_, *xs)

  if transform == "eager":
    return f(*args)
  if transform == "jit":
    return lib.jit(f)(*args)
  if transform == "vmap":
    return lib.vmap(f, in_axes=meta["in_axes"])(*args)
  if transform == "scan":
    def body(c, xs):
      return c + 1, f(*xs)
    return lib.lax.scan(body, np.int32(0), tuple(args), length=meta["length"])
  if transform == "cond":
    pred, *rest = args
    return lib.lax.cond(pred, f, lambda *xs: tuple(np_.zeros_like(o) for o in f(*xs)), *rest)
  diff = meta["diff"]

  def h(*d):
    full = list(args)
    for i, v in zip(diff, d):
      full[i] = v
    return f(*full)
  primals = [args[i] for i in diff]
  if transform == "grad":
    def g(*d):
      (out,) = h(*d)
      return np_.real(np_.sum(out))
    return lib.grad(g, argnums=tuple(range(len(diff))))(*primals)
  if transform == "jvp":
    return lib.jvp(h, tuple(primals), tuple(meta["tangents"]))
  assert transform == "linearize"
  y, lin = lib.linearize(h, *primals)
  return y, lin(*meta["tangents"])


# -- comparing

def _family(e: BaseException) -> str:
  for cls in (TypeError, ValueError, IndexError):
    if isinstance(e, cls):
      return cls.__name__
  return "other"


def _tol(dtype) -> tuple[float, float]:
  """(rtol, atol) by result dtype: programs chain several ops, so looser than one op's."""
  dtype = np.dtype(dtype)
  if dtype == BF16:
    return 2e-2, 2e-2
  if dtype == F16:
    return 4e-3, 4e-3
  if dtype in (np.float64, np.complex128):
    return 1e-10, 1e-12
  return 2e-5, 2e-6


def _compare_leaf(g, w) -> str | None:
  gd, wd = np.dtype(g.dtype), np.dtype(w.dtype)
  if str(gd) != str(wd):
    return f"dtype: stagecraft {gd}, JAX {wd}"
  if tuple(np.shape(g)) != tuple(np.shape(w)):
    return f"shape: stagecraft {np.shape(g)}, JAX {np.shape(w)}"
  gw, ww = bool(getattr(g, "weak_type", False)), bool(getattr(w, "weak_type", False))
  if gw != ww:
    return f"weak_type: stagecraft {gw}, JAX {ww} ({wd})"
  if "float0" in str(wd) or gd.kind == "V":
    return None
  ga, wa = np.asarray(g), np.asarray(w)
  if kind(wd) in "biu":
    if not np.array_equal(ga, wa):
      return f"values: stagecraft {ga!r}, JAX {wa!r}"
    return None
  upcast = np.complex128 if kind(wd) == "c" else np.float64
  ga, wa = ga.astype(upcast), wa.astype(upcast)
  rtol, atol = _tol(wd)
  finite = np.abs(wa[np.isfinite(wa)])
  atol = atol * max(1.0, float(finite.max()) if finite.size else 1.0)
  try:
    np.testing.assert_allclose(ga, wa, rtol=rtol, atol=atol, equal_nan=True)
  except AssertionError:
    return f"values: stagecraft {ga!r}, JAX {wa!r}"
  return None


def differ(prog, transform, meta, args) -> str | None:
  """None if stagecraft and JAX agree on `prog` under `transform`, else what differs."""
  try:
    want, want_err = run(prog, transform, meta, jax, jnp, args), None
  except Exception as e:  # noqa: BLE001
    want, want_err = None, e
  try:
    got, got_err = run(prog, transform, meta, sc, snp, args), None
  except Exception as e:  # noqa: BLE001
    got, got_err = None, e
  if want_err is not None or got_err is not None:
    if want_err is None:
      return f"stagecraft raises {type(got_err).__name__}: {got_err}; JAX does not"
    if got_err is None:
      return f"JAX raises {type(want_err).__name__}: {want_err}; stagecraft does not"
    # JAX's other errors (NotImplementedError for a missing rule, XLA's errors) may come
    # before or instead of its argument checks: any exception of stagecraft's matches them.
    if _family(want_err) != "other" and _family(got_err) != _family(want_err):
      return (f"exception family: stagecraft {type(got_err).__name__}: {got_err}; "
              f"JAX {type(want_err).__name__}: {want_err}")
    return None
  gl, wl = sc.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
  if len(gl) != len(wl):
    return f"outputs: stagecraft {len(gl)} leaves, JAX {len(wl)}"
  for i, (g, w) in enumerate(zip(gl, wl)):
    why = _compare_leaf(g, w)
    if why:
      return f"output {i}: {why}"
  return None


def _x64(on):
  class _Both:
    def __enter__(self):
      self.a, self.b = sc.enable_x64(on), jax.enable_x64(on)
      self.a.__enter__()
      self.b.__enter__()

    def __exit__(self, *exc):
      self.b.__exit__(*exc)
      self.a.__exit__(*exc)
  return _Both()


def check(data, transform, x64):
  with _x64(x64):
    prog = data.draw(programs(transform, x64, exclude=EXCLUDE), label="program")
    args, meta = _args(data, prog, transform)
    why = differ(prog, transform, meta, args)
  if why is None:
    return
  report = (f"{transform} (x64={x64}) differs: {why}\nprogram (ops: {prog.signatures()}):\n"
            f"{prog.source()}\nmeta: {meta}")
  if _REPORT:
    with open(_REPORT, "a") as fh:
      fh.write(json.dumps({"transform": transform, "x64": x64, "why": why[:2000],
                           "signatures": prog.signatures(), "source": prog.source(),
                           "meta": repr(meta)[:500]}) + "\n")
    return
  raise AssertionError(report)


# -- the fast profile (runs by default)

@pytest.mark.parametrize("x64", [False, True], ids=["x32", "x64"])
@pytest.mark.parametrize("transform", TRANSFORMS)
@settings(max_examples=FAST_EXAMPLES, derandomize=True, deadline=None)
@given(data=st.data())
def test_fuzz(transform, x64, data):
  check(data, transform, x64)


# -- the long profile (on demand: -m fuzz_long)

@pytest.mark.fuzz_long
@pytest.mark.parametrize("x64", [False, True], ids=["x32", "x64"])
@pytest.mark.parametrize("transform", TRANSFORMS)
@settings(max_examples=LONG_EXAMPLES, deadline=None)
@given(data=st.data())
def test_fuzz_long(transform, x64, data):
  check(data, transform, x64)


# -- the known mismatches stay listed only while they reproduce

@pytest.mark.parametrize("sig", sorted(_KNOWN_REPRODUCERS))
def test_known_mismatches_still_differ(sig):
  x64, fn = _KNOWN_REPRODUCERS[sig]
  assert sig in KNOWN
  with _x64(x64):
    outs = []
    for lib, np_ in ((sc, snp), (jax, jnp)):
      try:
        outs.append(("ok", fn(lib, np_)))
      except Exception as e:  # noqa: BLE001
        outs.append(("raise", _family(e)))
  (gk, g), (wk, w) = outs
  if gk == wk == "raise":
    same = g == w
  elif gk == wk == "ok":
    gl, wl = sc.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(w)
    same = len(gl) == len(wl) and all(_compare_leaf(a, b) is None for a, b in zip(gl, wl))
  else:
    same = False
  assert not same, f"{sig} no longer differs: remove it from KNOWN in tests/test_fuzz.py"


def test_every_known_entry_has_a_reproducer():
  assert set(KNOWN) == set(_KNOWN_REPRODUCERS)
  for sig in (*KNOWN, *JAX_BUGS):
    op, dtype, transform, *mode = sig.split(":")
    assert transform in (*TRANSFORMS, "*") and mode in ([], ["x32"], ["x64"]), sig
