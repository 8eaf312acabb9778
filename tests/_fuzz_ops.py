"""Random programs for the differential fuzz suite (tests/test_fuzz.py).

A `Program` is a straight-line list of nodes: inputs (arrays of a drawn shape and dtype, or
Python scalars) and op applications (an entry of `OPS` applied to earlier values, Python
literals and static params). It is built once, by `programs()`, and run on either library:
`prog(lib, np_, *args)` with `lib` = stagecraft or jax and `np_` = its numpy module, so both
sides run the very same program. While drawing, each op's result aval (shape, dtype, weak
type) is worked out with `jax.eval_shape`, so later ops get valid params; an op that JAX
rejects ends the program (both libraries must then raise).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from hypothesis import strategies as st

# -- dtypes

B1 = np.dtype(np.bool_)
I8, I16, I32, I64 = (np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
U8, U32 = np.dtype(np.uint8), np.dtype(np.uint32)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
BF16 = np.dtype(ml_dtypes.bfloat16)
C64 = np.dtype(np.complex64)

DTYPES = (B1, I8, I16, I32, U8, U32, F16, BF16, F32, C64)
X64_DTYPES = (I64, F64)


def kind(dtype) -> str:
  """'b' bool, 'i' signed, 'u' unsigned, 'f' real floating (bfloat16 too), 'c' complex."""
  dtype = np.dtype(dtype)
  if dtype == BF16:
    return "f"
  return dtype.kind


BOOL, SINT, UINT, FLT, CPX = "b", "i", "u", "f", "c"
INT = "iu"
INTB = "iub"
REAL = "iuf"
NUM = "iufc"
INEXACT = "fc"
ANY = "biufc"


def short(dtype) -> str:
  return np.dtype(dtype).name


# -- the program representation

@dataclasses.dataclass(frozen=True)
class Aval:
  shape: tuple
  dtype: np.dtype
  weak: bool = False

  def __str__(self):
    return f"{short(self.dtype)}{list(self.shape)}{'{weak}' if self.weak else ''}"


@dataclasses.dataclass(frozen=True)
class Lit:
  """A Python scalar literal operand."""
  value: Any

  def __repr__(self):
    v = self.value
    if isinstance(v, float) and not math.isfinite(v):
      return f"float('{v}')"
    return repr(v)


@dataclasses.dataclass
class Node:
  kind: str                      # "input" | "op"
  aval: Aval | None = None       # input aval; for ops the result aval (None: JAX raised)
  pyscalar: bool = False         # input passed as a Python scalar (weakly typed)
  seed: int = 0
  special: bool = False          # input values include 0, inf, nan, extremes
  op: str = ""
  args: tuple = ()               # ints (value indices) or Lit
  params: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Op:
  name: str
  fn: Callable                   # fn(lib, np_, *operands, **params)
  dtypes: str                    # the kinds of the first operand it is meant for
  draw: Callable | None = None   # draw(draw_fn, builder, x_index) -> (extra args, params)


@dataclasses.dataclass(repr=False)
class Program:
  nodes: list
  outputs: tuple
  x64: bool
  error: str | None = None       # JAX's exception at generation time, if any

  @property
  def inputs(self) -> list:
    return [n for n in self.nodes if n.kind == "input"]

  def __call__(self, lib, np_, *xs):
    xs = iter(xs)
    vals = []
    for n in self.nodes:
      if n.kind == "input":
        vals.append(np_.asarray(next(xs)))
      else:
        args = [a.value if isinstance(a, Lit) else vals[a] for a in n.args]
        vals.append(OPS[n.op].fn(lib, np_, *args, **n.params))
    return tuple(vals[i] for i in self.outputs)

  def signatures(self) -> list:
    """(op, operand dtype) of every op node (`operand_dtype`)."""
    avals = [n.aval for n in self.nodes]
    return [(n.op, dtype_name(operand_dtype(n.args, avals), all_weak(n.args, avals)))
            for n in self.nodes if n.kind == "op"]

  def __repr__(self):
    return f"Program(x64={self.x64}):\n{self.source()}"

  def source(self) -> str:
    lines, k = [], 0
    for i, n in enumerate(self.nodes):
      if n.kind == "input":
        what = ("python scalar" if n.pyscalar else "array")
        lines.append(f"v{i} = x{k}  # {what} {n.aval}" + (" (special values)" if n.special else ""))
        k += 1
      else:
        args = ", ".join(repr(a) if isinstance(a, Lit) else f"v{a}" for a in n.args)
        kw = "".join(f", {p}={_fmt(v)}" for p, v in n.params.items())
        lines.append(f"v{i} = {n.op}({args}{kw})  # -> {n.aval or 'JAX raises'}")
    lines.append(f"return {', '.join(f'v{i}' for i in self.outputs)}")
    return "\n".join(lines)


def operand_dtype(args, avals) -> np.dtype:
  """The dtype an op is applied in: its operands' promoted dtype (JAX's rules)."""
  ops = [a.value if isinstance(a, Lit) else
         jax.ShapeDtypeStruct((), avals[a].dtype, weak_type=avals[a].weak) for a in args]
  try:
    return np.dtype(jnp.result_type(*ops))
  except Exception:  # noqa: BLE001 -- e.g. no promotion: the first operand's
    return avals[args[0]].dtype


def all_weak(args, avals) -> bool:
  """Whether every operand is weakly typed (Python scalars and values computed from them)."""
  return all(isinstance(a, Lit) or avals[a].weak for a in args)


def dtype_name(dtype, weak=False) -> str:
  """The dtype field of a signature: `float32`, or `weak_float32` for weakly typed operands."""
  return ("weak_" if weak else "") + short(dtype)


def _fmt(v):
  if isinstance(v, np.ndarray):
    return f"np.array({v.tolist()}, {v.dtype.name})"
  if isinstance(v, np.dtype):
    return f"np.{v.name}"
  return repr(v)


# -- input values

def make_value(aval: Aval, seed: int, special: bool, pyscalar: bool = False):
  """A deterministic random value of `aval` (a NumPy array, or a Python scalar)."""
  rng = np.random.default_rng(seed)
  shape, dtype = aval.shape, aval.dtype
  k = kind(dtype)
  if k == "b":
    v = rng.random(shape) < 0.5
  elif k in "iu":
    info = np.iinfo(dtype)
    lo = max(info.min, -5)
    v = rng.integers(lo, 6, size=shape, endpoint=False).astype(dtype)
    if special:
      extremes = np.array([info.min, info.max, 0, 1] + ([-1] if k == "i" else []), dtype)
      mask = rng.random(shape) < 0.3
      v = np.where(mask, rng.choice(extremes, size=shape), v).astype(dtype)
  else:
    real = rng.standard_normal(shape) * 2
    if k == "c":
      real = real + 1j * rng.standard_normal(shape) * 2
    v = np.asarray(real).astype(dtype)
    if special:
      finfo = ml_dtypes.finfo(dtype) if dtype == BF16 else np.finfo(dtype)
      specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, float(finfo.max), 1.0],
                          np.float64).astype(dtype)
      mask = rng.random(shape) < 0.3
      v = np.where(mask, rng.choice(specials, size=shape), v).astype(dtype)
  if pyscalar:
    return v.item() if k != "f" else float(v.astype(np.float64))
  return np.asarray(v, dtype)


# -- building programs

class Reject(Exception):
  """The drawn op does not apply to the drawn operand (the builder draws another)."""


class Builder:
  def __init__(self, draw, x64: bool, dtypes: tuple, transform: str = "eager",
               exclude=frozenset()):
    self.draw, self.x64, self.dtypes = draw, x64, dtypes
    self.transform, self.exclude = transform, exclude
    self.nodes: list[Node] = []
    self.error: str | None = None

  def excluded(self, op: str, dtype) -> bool:
    """Whether (op, dtype) under this transform and x64 mode is a known mismatch. `op` may
    name a mechanism instead of an op (e.g. "int_literal_wraps", "lax_literal")."""
    name = dtype if isinstance(dtype, str) else short(dtype)
    for sig in self.exclude:
      o, d, t, *mode = sig
      if (o == op and (d in (name, "*", name.removeprefix("weak_"))
                       or (d == "weak_*" and name.startswith("weak_")))
          and t in (self.transform, "*")
          and (not mode or mode[0] == ("x64" if self.x64 else "x32"))):
        return True
    return False

  def aval(self, i) -> Aval:
    return self.nodes[i].aval

  def new_input(self, shape, dtype, pyscalar=False) -> int:
    draw = self.draw
    dtype = np.dtype(dtype)
    weak = pyscalar and kind(dtype) in "iufc"
    if pyscalar:  # a Python scalar: bool, int (weak int), float (weak float)
      dtype = {"b": B1, "i": I64 if self.x64 else I32, "u": I64 if self.x64 else I32,
               "f": F64 if self.x64 else F32, "c": np.dtype(np.complex128) if self.x64
               else C64}[kind(dtype)]
    self.nodes.append(Node("input", Aval(tuple(shape), dtype, weak), pyscalar=pyscalar,
                           seed=draw(st.integers(0, 2**16)),
                           special=draw(st.integers(0, 4)) == 4))
    return len(self.nodes) - 1

  def draw_dtype(self, kinds=ANY) -> np.dtype:
    pool = [d for d in self.dtypes if kind(d) in kinds]
    return self.draw(st.sampled_from(pool))

  def operand(self, shape, kinds=ANY, dtype=None) -> int:
    """An existing value of `shape` and a dtype of `kinds` (or exactly `dtype`), else a new
    input."""
    shape = tuple(shape)
    cands = [i for i, n in enumerate(self.nodes)
             if n.aval is not None and n.aval.shape == shape and not n.pyscalar
             and (kind(n.aval.dtype) in kinds if dtype is None else n.aval.dtype == dtype)]
    if cands and self.draw(st.booleans()):
      return self.draw(st.sampled_from(cands))
    return self.new_input(shape, dtype if dtype is not None else self.draw_dtype(kinds))

  def literal(self, kinds=ANY, like=None) -> Lit:
    """A Python scalar literal of one of `kinds`, to be combined with an array of dtype
    `like`."""
    k = self.draw(st.sampled_from([c for c in "bifc" if c in kinds or (c == "i" and "u" in kinds)]))
    if k == "b":
      return Lit(self.draw(st.booleans()))
    if k == "i":
      pool = [2, 1, 0, -1, 3, 7, -3, 200]
      if like is not None and kind(like) in "iu" and self.excluded("int_literal_wraps", like):
        info = np.iinfo(like)
        pool = [v for v in pool if info.min <= v <= info.max]
      return Lit(self.draw(st.sampled_from(pool)))
    if k == "f":
      pool = [1.5, 0.5, -2.0, 0.0, 3.25, 1e30, float("nan")]
      if like is not None and like == F16 and self.excluded("float_literal_overflow", like):
        pool.remove(1e30)
      return Lit(self.draw(st.sampled_from(pool)))
    return Lit(self.draw(st.sampled_from([1 + 2j, -0.5j])))

  def add(self, op: str, args: tuple, params: dict) -> bool:
    """Appends an op node; works out its aval with JAX. Returns False when JAX raised."""
    in_avals = [self.aval(a) for a in args if not isinstance(a, Lit)]
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak) for a in in_avals]

    def f(*vals):
      it = iter(vals)
      xs = [a.value if isinstance(a, Lit) else next(it) for a in args]
      return OPS[op].fn(jax, jnp, *xs, **params)
    try:
      out = jax.eval_shape(f, *structs)
      aval = Aval(tuple(out.shape), np.dtype(out.dtype), bool(out.weak_type))
    except Exception as e:  # noqa: BLE001 -- any exception: the program is an error program
      self.nodes.append(Node("op", None, op=op, args=tuple(args), params=params))
      self.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
      return False
    self.nodes.append(Node("op", aval, op=op, args=tuple(args), params=params))
    return True


# -- shape helpers for drawing params

def draw_axis(draw, ndim, allow_none=True, allow_tuple=True):
  opts = ["none"] * allow_none + ["int"] * (ndim > 0) + ["tuple"] * (allow_tuple and ndim > 0)
  if not opts:
    return None
  which = draw(st.sampled_from(opts))
  if which == "none":
    return None
  if which == "int":
    return draw(st.integers(-ndim, ndim - 1))
  axes = draw(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim))
  return tuple(sorted(axes))


def draw_int_axis(draw, ndim):
  if ndim == 0:
    raise Reject
  return draw(st.integers(-ndim, ndim - 1))


def broadcastable_shape(draw, shape):
  """A shape that broadcasts with `shape` (drop leading dims, set dims to 1, add dims)."""
  shape = list(shape)
  how = draw(st.sampled_from(["same", "same", "drop", "ones", "lead"]))
  if how == "drop":
    shape = shape[draw(st.integers(0, len(shape))):]
  elif how == "ones":
    shape = [1 if draw(st.booleans()) else d for d in shape]
  elif how == "lead":
    shape = [draw(st.integers(1, 2))] + shape
  return tuple(shape)


# -- op drawers: (draw, builder, x) -> (extra args, params)

def _binary(draw, b, x):
  a = b.aval(x)
  if draw(st.integers(0, 3)) == 0:
    y = b.literal(kind(a.dtype) if draw(st.integers(0, 3)) else ANY, like=a.dtype)
  else:
    same = draw(st.integers(0, 2)) > 0
    shape = broadcastable_shape(draw, a.shape)
    y = b.operand(shape, dtype=a.dtype) if same else b.operand(shape, dtype=b.draw_dtype_for(a))
  return (y,), {}


def _binary_swappable(draw, b, x):
  (y,), _ = _binary(draw, b, x)
  return (y,), {"swap": draw(st.booleans())}


def _lax_binary(draw, b, x):
  a = b.aval(x)
  if draw(st.integers(0, 4)) == 0 and not b.excluded("lax_literal", a.dtype):
    # A Python scalar: lax does not promote it, so one of another default dtype (int8 with
    # 3, float16 with 1.5, anything under x64) makes an error program; both must raise.
    kinds = kind(a.dtype) if draw(st.integers(0, 2)) else ANY
    return (b.literal(kinds, like=a.dtype),), {}
  return (b.operand(a.shape, dtype=a.dtype),), {}


def _shift(draw, b, x):
  a = b.aval(x)
  if draw(st.booleans()):
    pool = [1, 3, 0, 7, 31, 40, -1]
    if kind(a.dtype) in "iu" and b.excluded("int_literal_wraps", a.dtype):
      pool = [v for v in pool if np.iinfo(a.dtype).min <= v <= np.iinfo(a.dtype).max]
    return (Lit(draw(st.sampled_from(pool))),), {}
  return (b.operand(broadcastable_shape(draw, a.shape), dtype=a.dtype),), {}


def _reduce(draw, b, x):
  return (), {"axis": draw_axis(draw, len(b.aval(x).shape)), "keepdims": draw(st.booleans())}


def _reduce_int_axis(draw, b, x):
  nd = len(b.aval(x).shape)
  return (), {"axis": draw_axis(draw, nd, allow_tuple=False), "keepdims": draw(st.booleans())}


def _var(draw, b, x):
  _, p = _reduce(draw, b, x)
  return (), {**p, "ddof": draw(st.integers(0, 1))}


def _max_initial(draw, b, x):
  _, p = _reduce(draw, b, x)
  if draw(st.booleans()):
    p["initial"] = draw(st.sampled_from([0, 1, -3]))
  return (), p


def _median(draw, b, x):
  shape = b.aval(x).shape
  nd = len(shape)
  if 0 in shape and b.excluded("quantile_empty", b.aval(x).dtype):
    raise Reject
  keepdims = draw(st.booleans())
  if nd == 0 and b.excluded("quantile_keepdims_0d", b.aval(x).dtype):
    keepdims = False
  return (), {"axis": draw_axis(draw, nd, allow_tuple=False), "keepdims": keepdims}


def _quantile(draw, b, x):
  _, p = _median(draw, b, x)
  return (), {"q": draw(st.sampled_from([0.0, 0.3, 0.5, 1.0])), **p,
              "method": draw(st.sampled_from(["linear", "lower", "higher", "nearest",
                                               "midpoint"]))}


def _axis_only(draw, b, x):
  return (), {"axis": draw_int_axis(draw, len(b.aval(x).shape))}


def _axis_or_none(draw, b, x):
  nd = len(b.aval(x).shape)
  return (), {"axis": draw_axis(draw, nd, allow_tuple=False)}


def _lax_cum(draw, b, x):
  nd = len(b.aval(x).shape)
  if nd == 0:
    raise Reject
  return (), {"axis": draw(st.integers(0, nd - 1)), "reverse": draw(st.booleans())}


def _sort(draw, b, x):
  nd = len(b.aval(x).shape)
  return (), {"axis": draw_axis(draw, nd, allow_tuple=False),
              "descending": draw(st.booleans())}


def _reshape(draw, b, x):
  shape = b.aval(x).shape
  n = math.prod(shape)
  if n == 0:
    new = draw(st.sampled_from([(0,), (0, 2), (2, 0, 1), (0, 0)]))
  else:
    factors = [p for p in _prime_factors(n)]
    ndim = draw(st.integers(0 if n == 1 else 1, 3))
    dims = [1] * max(ndim, 1)
    for f in factors:
      dims[draw(st.integers(0, len(dims) - 1))] *= f
    new = tuple(dims) if ndim else ()
    if new and draw(st.booleans()):
      j = draw(st.integers(0, len(new) - 1))
      new = new[:j] + (-1,) + new[j + 1:]
  return (), {"shape": tuple(new)}


def _prime_factors(n):
  out, p = [], 2
  while n > 1:
    while n % p == 0:
      out.append(p)
      n //= p
    p += 1
  return out


def _transpose(draw, b, x):
  nd = len(b.aval(x).shape)
  return (), {"axes": tuple(draw(st.permutations(range(nd))))}


def _swapaxes(draw, b, x):
  nd = len(b.aval(x).shape)
  if nd == 0:
    raise Reject
  return (), {"axis1": draw(st.integers(-nd, nd - 1)), "axis2": draw(st.integers(-nd, nd - 1))}


def _moveaxis(draw, b, x):
  nd = len(b.aval(x).shape)
  if nd == 0:
    raise Reject
  return (), {"source": draw(st.integers(-nd, nd - 1)),
              "destination": draw(st.integers(-nd, nd - 1))}


def _broadcast_to(draw, b, x):
  shape = b.aval(x).shape
  lead = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
  rest = tuple(draw(st.integers(1, 3)) if d == 1 and draw(st.booleans()) else d for d in shape)
  return (), {"shape": lead + rest}


def _expand_dims(draw, b, x):
  nd = len(b.aval(x).shape)
  return (), {"axis": draw(st.integers(-nd - 1, nd))}


def _squeeze(draw, b, x):
  shape = b.aval(x).shape
  ones = [i for i, d in enumerate(shape) if d == 1]
  if not ones or draw(st.booleans()):
    return (), {"axis": None}
  return (), {"axis": tuple(draw(st.lists(st.sampled_from(ones), unique=True, min_size=1)))}


def _index(draw, b, x):
  shape = b.aval(x).shape
  idx = []
  for d in shape[:draw(st.integers(0, len(shape)))]:
    which = draw(st.sampled_from(["all", "slice", "int", "none"]))
    if which == "all":
      idx.append(slice(None))
    elif which == "int" and d > 0:
      idx.append(draw(st.integers(-d, d - 1)))
    elif which == "none":
      idx.append(None)
      idx.append(slice(None))
    else:
      bound = st.one_of(st.none(), st.integers(-d - 1, d + 1))
      idx.append(slice(draw(bound), draw(bound), draw(st.sampled_from([None, 1, 2, -1, -2]))))
  if draw(st.integers(0, 3)) == 0:
    idx.insert(draw(st.integers(0, len(idx))), Ellipsis)
  return (), {"idx": tuple(idx)}


def _int_array(draw, lo, hi, shape):
  seed = draw(st.integers(0, 2**16))
  return np.random.default_rng(seed).integers(lo, max(hi, lo) + 1, size=shape).astype(np.int32)


def _gather(draw, b, x):
  shape = b.aval(x).shape
  if not shape:
    raise Reject
  d = shape[0]
  ishape = draw(st.sampled_from([(2,), (3,), (2, 2), ()]))
  oob = draw(st.integers(0, 4)) == 0
  return (), {"idx": _int_array(draw, -d - 2 if oob else -d, d + 1 if oob else d - 1, ishape)}


def _take(draw, b, x):
  shape = b.aval(x).shape
  axis = draw_axis(draw, len(shape), allow_tuple=False)
  d = math.prod(shape) if axis is None else shape[axis]
  ishape = draw(st.sampled_from([(2,), (3,), (2, 2), ()]))
  mode = draw(st.sampled_from([None, "clip", "wrap", "fill"]))
  if d == 0 and mode == "wrap" and b.excluded("take_wrap_empty", b.aval(x).dtype):
    raise Reject
  oob = draw(st.integers(0, 2)) == 0
  lo, hi = (-d - 2, d + 1) if oob else (0, max(d - 1, 0))
  return (), {"indices": _int_array(draw, lo, hi, ishape), "axis": axis, "mode": mode}


def _at(draw, b, x):
  a = b.aval(x)
  shape = a.shape
  if not shape:
    raise Reject
  method = draw(st.sampled_from(["set", "add", "multiply", "min", "max", "get"]))
  if draw(st.booleans()):
    idx = _int_array(draw, -shape[0], shape[0] - 1, draw(st.sampled_from([(1,), (2,), (3,)])))
  else:
    idx = slice(draw(st.integers(0, 1)), None, draw(st.sampled_from([None, 2])))
  return (), {"idx": idx, "method": method,
              "value": b.literal(kind(a.dtype), like=a.dtype).value if method != "get" else None}


def _concatenate(draw, b, x):
  a = b.aval(x)
  nd = len(a.shape)
  if nd == 0:
    raise Reject
  axis = draw(st.integers(-nd, nd - 1))
  shape = list(a.shape)
  shape[axis] = draw(st.integers(0, 3))
  dtype = a.dtype if draw(st.booleans()) else b.draw_dtype()
  return (b.operand(shape, dtype=dtype),), {"axis": axis}


def _stack(draw, b, x):
  a = b.aval(x)
  nd = len(a.shape)
  dtype = a.dtype if draw(st.booleans()) else b.draw_dtype()
  return (b.operand(a.shape, dtype=dtype),), {"axis": draw(st.integers(-nd - 1, nd))}


def _where(draw, b, x):
  a = b.aval(x)
  c = b.operand(broadcastable_shape(draw, a.shape), kinds="b")
  if draw(st.booleans()):
    y = b.literal(kind(a.dtype), like=a.dtype)
  else:
    y = b.operand(broadcastable_shape(draw, a.shape), dtype=b.draw_dtype_for(a))
  return (c, y), {}


def _select(draw, b, x):
  a = b.aval(x)
  return (b.operand(a.shape, kinds="b"), b.operand(a.shape, dtype=a.dtype)), {}


def _astype(draw, b, x):
  return (), {"dtype": b.draw_dtype()}


_SAME_WIDTH = {1: (I8, U8), 2: (I16, F16, BF16), 4: (I32, U32, F32), 8: (I64, F64)}


def _bitcast(draw, b, x):
  a = b.aval(x)
  pool = [d for d in _SAME_WIDTH.get(a.dtype.itemsize, ()) if d in b.dtypes]
  if kind(a.dtype) in "bc" or not pool:
    raise Reject
  return (), {"new_dtype": draw(st.sampled_from(pool))}


def _matmul_operand(draw, b, x, kind_of_op):
  a = b.aval(x)
  shape = a.shape
  dtype = a.dtype if draw(st.integers(0, 2)) else b.draw_dtype()
  m = draw(st.integers(0, 3))
  if kind_of_op == "inner":
    other = tuple(draw(st.lists(st.integers(1, 2), max_size=1))) + shape[-1:]
  elif kind_of_op == "tensordot":
    if not shape and b.excluded("tensordot_rank0", a.dtype):
      raise Reject
    other = shape[-1:] + tuple(draw(st.lists(st.integers(1, 3), max_size=1)))
  elif not shape:
    if kind_of_op == "matmul":
      other = (2,)  # matmul of a scalar: both raise
    else:
      other = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
  else:
    k = shape[-1]
    opts = [(k,), (k, m)]
    if len(shape) >= 2 and kind_of_op == "matmul":
      opts.append(shape[:-2][-1:] + (k, m))
    if kind_of_op == "dot":
      opts.append((2, k, m))
    other = draw(st.sampled_from(opts))
  return b.operand(other, dtype=dtype)


def _dot_like(name):
  def draw_(draw, b, x):
    return (_matmul_operand(draw, b, x, name),), {}
  return draw_


def _einsum(draw, b, x):
  a = b.aval(x)
  if len(a.shape) == 1:
    return (b.operand(a.shape, dtype=a.dtype if draw(st.booleans()) else b.draw_dtype()),), {
        "spec": draw(st.sampled_from(["i,i->", "i,i->i", "i,j->ij"]))}
  if len(a.shape) == 2:
    spec = draw(st.sampled_from(["ij,jk->ik", "ij,kj->ik", "ij,ij->j"]))
    shape = {"ij,jk->ik": (a.shape[1], 2), "ij,kj->ik": (3, a.shape[1]),
             "ij,ij->j": a.shape}[spec]
    return (b.operand(shape, dtype=a.dtype if draw(st.booleans()) else b.draw_dtype()),), {
        "spec": spec}
  raise Reject


def _clip(draw, b, x):
  k = kind(b.aval(x).dtype)
  lo = draw(st.sampled_from([None, -1, 0, -1.5])) if k != "u" else draw(st.sampled_from([None, 1]))
  hi = draw(st.sampled_from([None, 1, 2, 0.5])) if k != "u" else draw(st.sampled_from([None, 3]))
  if k in "iub":
    lo = None if lo is None else int(lo)
    hi = None if hi is None else int(hi)
  return (), {"lo": lo, "hi": hi}


def _diff(draw, b, x):
  nd = len(b.aval(x).shape)
  if nd == 0:
    raise Reject
  return (), {"n": draw(st.integers(1, 2)), "axis": draw(st.integers(-nd, nd - 1))}


def _roll(draw, b, x):
  nd = len(b.aval(x).shape)
  return (), {"shift": draw(st.integers(-4, 4)), "axis": draw_axis(draw, nd, allow_tuple=False)}


def _flip(draw, b, x):
  return (), {"axis": draw_axis(draw, len(b.aval(x).shape))}


def _tile(draw, b, x):
  nd = len(b.aval(x).shape)
  return (), {"reps": tuple(draw(st.lists(st.integers(1, 2), min_size=1, max_size=nd + 1)))}


def _repeat(draw, b, x):
  nd = len(b.aval(x).shape)
  return (), {"repeats": draw(st.integers(0, 2)),
              "axis": draw_axis(draw, nd, allow_tuple=False)}


def _pad(draw, b, x):
  nd = len(b.aval(x).shape)
  if nd == 0 and b.excluded("pad_rank0", b.aval(x).dtype):
    raise Reject
  width = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(nd))
  return (), {"pad_width": width,
              "mode": draw(st.sampled_from(["constant", "edge", "wrap", "reflect", "symmetric"]))}


def _tri(draw, b, x):
  if len(b.aval(x).shape) < 2:
    raise Reject
  return (), {"k": draw(st.integers(-1, 1))}


def _round(draw, b, x):
  return (), {"decimals": draw(st.integers(-1, 2))}


def _integer_pow(draw, b, x):
  return (), {"y": draw(st.sampled_from([0, 1, 2, 3, -1, -2]))}


# -- the op table

OPS: dict[str, Op] = {}


def _reg(name, fn, dtypes, draw=None):
  OPS[name] = Op(name, fn, dtypes, draw)


def _jnp(name):
  return lambda lib, np_, *xs, **p: getattr(np_, name)(*xs, **p)


for _n, _k in [("negative", NUM), ("positive", NUM), ("abs", NUM), ("sign", NUM),
               ("floor", REAL), ("ceil", REAL), ("trunc", REAL), ("rint", REAL),
               ("sqrt", NUM), ("exp", NUM), ("log", NUM), ("log1p", NUM), ("expm1", NUM),
               ("sin", NUM), ("cos", NUM), ("tan", INEXACT), ("tanh", NUM), ("arctan", NUM),
               ("arcsin", INEXACT), ("arccosh", FLT), ("arcsinh", NUM), ("sinh", INEXACT),
               ("cosh", INEXACT), ("exp2", REAL), ("log2", REAL), ("log10", NUM),
               ("cbrt", REAL), ("deg2rad", REAL), ("square", NUM), ("reciprocal", NUM),
               ("conj", NUM), ("real", NUM), ("imag", NUM), ("angle", NUM),
               ("logical_not", ANY), ("invert", INTB), ("isnan", NUM), ("isinf", NUM),
               ("isfinite", NUM), ("signbit", REAL), ("nan_to_num", INEXACT), ("sinc", FLT),
               ("fabs", REAL), ("ravel", ANY), ("isreal", NUM), ("cumsum", NUM)]:
  _reg(_n, _jnp(_n), _k, _axis_or_none if _n == "cumsum" else None)

for _n, _k in [("add", ANY), ("subtract", NUM), ("multiply", ANY), ("true_divide", NUM),
               ("floor_divide", REAL), ("remainder", REAL), ("fmod", REAL), ("power", NUM),
               ("float_power", REAL), ("maximum", ANY), ("minimum", ANY), ("fmax", REAL),
               ("fmin", REAL), ("arctan2", REAL), ("hypot", REAL), ("copysign", REAL),
               ("nextafter", FLT), ("logaddexp", REAL), ("heaviside", REAL),
               ("bitwise_and", INTB), ("bitwise_or", INTB), ("bitwise_xor", INTB),
               ("logical_and", ANY), ("logical_or", ANY), ("logical_xor", ANY),
               ("equal", ANY), ("not_equal", ANY), ("less", REAL), ("less_equal", REAL),
               ("greater", REAL), ("greater_equal", REAL), ("gcd", INT), ("lcm", INT),
               ("isclose", INEXACT)]:
  _reg(_n, _jnp(_n), _k, _binary)

for _n in ("left_shift", "right_shift"):
  _reg(_n, _jnp(_n), INT, _shift)

_OPERATORS = {"+": ANY, "-": NUM, "*": ANY, "/": NUM, "//": REAL, "%": REAL, "**": NUM,
              "<<": INT, ">>": INT, "&": INTB, "|": INTB, "^": INTB, "<": REAL, "==": ANY,
              ">=": REAL}
for _o, _k in _OPERATORS.items():
  _reg(f"x{_o}y", (lambda lib, np_, x, y, swap=False, _o=_o:
                   eval(f"y {_o} x" if swap else f"x {_o} y")), _k,  # noqa: S307
       _shift if _o in ("<<", ">>") else _binary_swappable)

for _n, _k in [("div", NUM), ("rem", REAL), ("max", ANY), ("min", ANY), ("atan2", FLT),
               ("nextafter", FLT), ("shift_right_logical", INT),
               ("shift_right_arithmetic", INT), ("shift_left", INT), ("pow", INEXACT)]:
  _reg(f"lax.{_n}", (lambda lib, np_, x, y, _n=_n: getattr(lib.lax, _n)(x, y)), _k, _lax_binary)

for _n, _k in [("population_count", INT), ("clz", INT), ("logistic", INEXACT),
               ("erf", FLT), ("lgamma", FLT), ("digamma", FLT), ("rsqrt", INEXACT),
               ("is_finite", FLT), ("erf_inv", FLT), ("exp2", INEXACT), ("cbrt", FLT)]:
  _reg(f"lax.{_n}", (lambda lib, np_, x, _n=_n: getattr(lib.lax, _n)(x)), _k)
_reg("lax.integer_pow", lambda lib, np_, x, y: lib.lax.integer_pow(x, y), NUM, _integer_pow)

for _n, _k, _d in [("sum", ANY, _reduce), ("prod", ANY, _reduce), ("max", ANY, _max_initial),
                   ("min", ANY, _max_initial), ("mean", NUM, _reduce), ("var", NUM, _var),
                   ("std", NUM, _var), ("any", ANY, _reduce), ("all", ANY, _reduce),
                   ("argmax", REAL, _reduce_int_axis), ("argmin", REAL, _reduce_int_axis),
                   ("nanmax", REAL, _reduce), ("nanmin", REAL, _reduce),
                   ("nansum", NUM, _reduce), ("nanmean", INEXACT, _reduce),
                   ("nanvar", FLT, _var), ("median", REAL, _median),
                   ("nanmedian", FLT, _median), ("ptp", REAL, _reduce),
                   ("count_nonzero", ANY, _reduce), ("quantile", REAL, _quantile)]:
  _reg(_n, _jnp(_n), _k, _d)
_reg("logsumexp", lambda lib, np_, x, **p: lib.scipy.special.logsumexp(x, **p), FLT, _reduce)

for _n in ("cumprod", "nancumsum", "nancumprod"):
  _reg(_n, _jnp(_n), NUM, _axis_or_none)
for _n, _k in [("cummax", REAL), ("cummin", REAL), ("cumsum", NUM), ("cumprod", NUM),
               ("cumlogsumexp", FLT)]:
  _reg(f"lax.{_n}", (lambda lib, np_, x, _n=_n, **p: getattr(lib.lax, _n)(x, **p)), _k, _lax_cum)

_reg("sort", _jnp("sort"), ANY, _sort)
_reg("argsort", _jnp("argsort"), REAL, _sort)
_reg("reshape", _jnp("reshape"), ANY, _reshape)
_reg("x.reshape", lambda lib, np_, x, shape: x.reshape(shape), ANY, _reshape)
_reg("transpose", _jnp("transpose"), ANY, _transpose)
_reg("x.T", lambda lib, np_, x: x.T, ANY)
_reg("swapaxes", _jnp("swapaxes"), ANY, _swapaxes)
_reg("moveaxis", _jnp("moveaxis"), ANY, _moveaxis)
_reg("broadcast_to", _jnp("broadcast_to"), ANY, _broadcast_to)
_reg("expand_dims", _jnp("expand_dims"), ANY, _expand_dims)
_reg("squeeze", _jnp("squeeze"), ANY, _squeeze)
_reg("x[idx]", lambda lib, np_, x, idx: x[idx], ANY, _index)
_reg("x[int_array]", lambda lib, np_, x, idx: x[idx], ANY, _gather)
_reg("take", _jnp("take"), ANY, _take)


def _at_fn(lib, np_, x, idx, method, value):
  ref = x.at[idx]
  return ref.get() if method == "get" else getattr(ref, method)(value)


_reg("x.at[idx]", _at_fn, ANY, _at)
_reg("concatenate", lambda lib, np_, x, y, axis: np_.concatenate([x, y], axis=axis), ANY,
     _concatenate)
_reg("stack", lambda lib, np_, x, y, axis: np_.stack([x, y], axis=axis), ANY, _stack)
_reg("where", lambda lib, np_, x, c, y: np_.where(c, x, y), ANY, _where)
_reg("lax.select", lambda lib, np_, x, c, y: lib.lax.select(c, x, y), ANY, _select)
_reg("x.astype", lambda lib, np_, x, dtype: x.astype(dtype), ANY, _astype)
_reg("lax.convert_element_type",
     lambda lib, np_, x, dtype: lib.lax.convert_element_type(x, dtype), ANY, _astype)
_reg("lax.bitcast_convert_type",
     lambda lib, np_, x, new_dtype: lib.lax.bitcast_convert_type(x, new_dtype), REAL, _bitcast)
for _n in ("matmul", "dot", "tensordot", "inner"):
  _reg(_n, (lambda lib, np_, x, y, _n=_n:
            getattr(np_, _n)(x, y, **({"axes": 1} if _n == "tensordot" else {}))), NUM,
       _dot_like(_n))
_reg("x@y", lambda lib, np_, x, y: x @ y, NUM, _dot_like("matmul"))
_reg("einsum", lambda lib, np_, x, y, spec: np_.einsum(spec, x, y), NUM, _einsum)
_reg("clip", lambda lib, np_, x, lo, hi: np_.clip(x, lo, hi), REAL, _clip)
_reg("diff", _jnp("diff"), NUM, _diff)
_reg("roll", _jnp("roll"), ANY, _roll)
_reg("flip", _jnp("flip"), ANY, _flip)
_reg("tile", _jnp("tile"), ANY, _tile)
_reg("repeat", _jnp("repeat"), ANY, _repeat)
_reg("pad", _jnp("pad"), NUM, _pad)
_reg("triu", _jnp("triu"), ANY, _tri)
_reg("tril", _jnp("tril"), ANY, _tri)
_reg("round", _jnp("round"), NUM, _round)

OP_NAMES = tuple(sorted(OPS))


def _draw_dtype_for(self, a: Aval) -> np.dtype:
  """A second operand's dtype: mostly the same kind as `a`, sometimes anything."""
  if self.draw(st.integers(0, 2)):
    return self.draw_dtype(kind(a.dtype))
  return self.draw_dtype()


Builder.draw_dtype_for = _draw_dtype_for


# -- the program strategy

TRANSFORMS = ("eager", "jit", "grad", "vmap", "jvp", "linearize", "scan", "cond")
DIFF_TRANSFORMS = ("grad", "jvp", "linearize")


def _shape(draw, max_rank=3):
  return tuple(draw(st.lists(st.sampled_from([1, 2, 3, 2, 3, 0]), max_size=max_rank)))


@st.composite
def programs(draw, transform: str, x64: bool, exclude=frozenset(), max_steps: int = 4,
             first_op: str | None = None, first_dtype=None):
  """A random `Program` for `transform`. `exclude`: (op, dtype name, transform[, "x32" or
  "x64"]) tuples (dtype or transform may be "*") that are never drawn (the known
  mismatches); `op` may also name a mechanism (`Builder.excluded`)."""
  dtypes = DTYPES + (X64_DTYPES if x64 else ())
  b = Builder(draw, x64, dtypes, transform, exclude)
  diff = transform in DIFF_TRANSFORMS
  pyscalar_ok = transform in ("eager", "jit")
  n_inputs = draw(st.integers(1, 2))
  base = _shape(draw)
  for i in range(n_inputs):
    shape = base if i == 0 else broadcastable_shape(draw, base)
    dtype = b.draw_dtype(INEXACT if diff and i == 0 else ANY)
    if i == 0 and first_dtype is not None:
      dtype = np.dtype(first_dtype)
    py = pyscalar_ok and not shape and draw(st.integers(0, 3)) == 0
    b.new_input(shape, dtype, pyscalar=py)

  n_steps = draw(st.integers(1, max_steps))
  steps = tries = 0
  while steps < n_steps and tries < 50:
    tries += 1
    # the operand: mostly the latest value
    live = [i for i, n in enumerate(b.nodes) if n.aval is not None]
    x = live[-1 - draw(st.integers(0, len(live) - 1))]
    xa = b.aval(x)
    loose = draw(st.integers(0, 15)) == 0  # sometimes any op: the error paths
    names = [n for n in OP_NAMES if (loose or kind(xa.dtype) in OPS[n].dtypes)
             and not b.excluded(n, xa.dtype)]
    name = draw(st.sampled_from(names))
    if first_op is not None and steps == 0:
      name, x = first_op, 0
    op = OPS[name]
    try:
      extra, params = op.draw(draw, b, x) if op.draw else ((), {})
    except Reject:
      continue
    avals = [n.aval for n in b.nodes]
    if b.excluded(name, dtype_name(operand_dtype((x, *extra), avals),
                                   all_weak((x, *extra), avals))):
      continue
    steps += 1
    if not b.add(name, (x, *extra), params):
      break
  if b.error is None and transform == "grad":
    last = b.aval(len(b.nodes) - 1)
    if kind(last.dtype) not in INEXACT:
      b.add("x.astype", (len(b.nodes) - 1,), {"dtype": F32})
  outputs = [len(b.nodes) - 1]
  if b.error is None and transform != "grad" and draw(st.integers(0, 3)) == 0:
    others = [i for i, n in enumerate(b.nodes[:-1]) if n.aval is not None and not n.pyscalar]
    if others:
      outputs.insert(0, draw(st.sampled_from(others)))
  return Program(b.nodes, tuple(outputs), x64, b.error)


@contextlib.contextmanager
def both_x64(on: bool):
  """x64 mode `on` in stagecraft and in JAX together (for a differential check)."""
  import stagecraft as sc   # NB: the generator module itself needs neither library's mode
  with sc.enable_x64(on), jax.enable_x64(on):
    yield
