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

from _fuzz_ops import (BF16, DIFF_TRANSFORMS, F16, TRANSFORMS, Aval, both_x64, kind,
                       make_value, programs)

# -- known mismatches: signature -> "stagecraft gives X, JAX gives Y; why / which module".
# A signature is "op:dtype:transform[:x32|:x64]": the op (an OPS name of tests/_fuzz_ops.py,
# or a mechanism the generator consults: int_literal_wraps, float_literal_overflow,
# lax_literal, tensordot_rank0, pad_rank0, quantile_empty, take_wrap_empty,
# quantile_keepdims_0d), the operands' promoted dtype
# (`weak_<dtype>` when all are weakly typed; `*` any, `weak_*` any weak), the transformation.
KNOWN: dict[str, str] = {
    # (empty: "lax_literal:*:*" -- lax binary ops with a Python scalar of another default
    # dtype -- now raise JAX's TypeError, so those programs are drawn and compared.)
}

# -- where JAX is wrong and stagecraft deliberately differs: signature -> why
JAX_BUGS: dict[str, str] = {
    **{f"float_power:*:{t}": (
        "grad(lambda x: jnp.float_power(x, False))(0.0) is 0 in JAX's eager mode but nan under "
        "jax.jit (the same jaxpr: mul(0.0, pow(0.0, -1.0)) = 0 * inf), and nan for "
        "float_power(x, 0) in both; stagecraft gives nan as JAX's jit does (the exponent is "
        "promoted to a float, so pow's JVP is y * x**(y - 1)). Not drawn under grad/jvp/"
        "linearize: eager JAX's answer depends on how the exponent literal was made.")
       for t in ("grad", "jvp", "linearize")},
    "gcd:*:*": ("jnp.gcd(int8(5), int8(-128)) never returns in JAX 0.10.2 (its while loop does "
                "not end when an operand is the most negative int); stagecraft gives NumPy's "
                "answer. Not drawn: one such program hangs the suite."),
    "lcm:*:*": "jnp.lcm calls jnp.gcd: the same hang (see gcd).",
    "quantile_keepdims_0d:*:*": (
        "jnp.median(float32[], keepdims=True) (and quantile) has shape (1,) in JAX; NumPy "
        "keeps 0-d inputs 0-d (no axes to keep), as stagecraft does."),
}

# signature -> (x64, fn(lib, np_) -> result): the minimal reproducers of KNOWN
_KNOWN_REPRODUCERS: dict[str, tuple] = {}

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


def check(data, transform, x64):
  with both_x64(x64):
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
  with both_x64(x64):
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
