"""Lowering: a Jaxpr becomes StableHLO module text, one rule per primitive.

A lowering rule is `rule(ctx, *operands, **params) -> list[str]`: `operands` are SSA value
names (text such as `%3`), `ctx.avals_in`/`ctx.avals_out` give the types, and the rule emits
lines through `ctx` and returns the names of its results. Text is emitted directly (no MLIR
builders), which keeps lowering fast; the syntax follows the StableHLO spec
(github.com/openxla/stablehlo/blob/main/docs/spec.md), mostly in MLIR's generic op form.
"""
from __future__ import annotations

import contextlib
import heapq
import math
import re
import threading
import warnings
from typing import Any, Callable, Sequence

import ml_dtypes
import numpy as np

from stagecraft import core, dtypes, source_info_util
from stagecraft import sharding as sharding_lib
from stagecraft.config import config
from stagecraft.core import ClosedJaxpr, Jaxpr, Literal, ShapedArray, UserFrame, Var
from stagecraft.source_info_util import NameStackInfo
from stagecraft.errors import MissingRuleError
from stagecraft.interpreters import batching
from stagecraft.runtime import client, mlir_text

__all__ = ["register_lowering", "has_lowering", "elt_type", "ir_type", "tensor_type",
           "dense_scalar", "dense_array", "dense_constant", "i64_array", "dense_i64",
           "ModuleContext", "FuncBuilder", "LoweringRuleContext", "emit_op", "constant",
           "build_region", "sanitize_name", "jaxpr_subcomp", "lower_jaxpr_to_fun",
           "lower_call", "bound_axes", "lower_jaxpr_to_module", "ModuleText",
           "has_ordered_effects", "source_locations", "strip_locations", "mesh_symbol",
           "add_frontend_attributes", "frontend_attributes_text"]

_lowerings: dict[core.Primitive, Callable] = {}


def register_lowering(prim: core.Primitive, rule: Callable, platform: str | None = None):
  """Registers `rule(ctx, *operands, **params) -> list[str]` as `prim`'s lowering."""
  _lowerings[prim] = rule
  return rule


def has_lowering(prim: core.Primitive) -> bool:
  """Whether `prim` has a lowering rule."""
  return prim in _lowerings


def lowering_rule(prim: core.Primitive) -> Callable | None:
  """`prim`'s lowering rule (None if it has none)."""
  return _lowerings.get(prim)


# ---------------------------------------------------------------------------
# Types and constants

_ELT = {
    dtypes.bool_: "i1", dtypes.int8: "i8", dtypes.int16: "i16", dtypes.int32: "i32",
    dtypes.int64: "i64", dtypes.uint8: "ui8", dtypes.uint16: "ui16", dtypes.uint32: "ui32",
    dtypes.uint64: "ui64", dtypes.bfloat16: "bf16", dtypes.float16: "f16",
    dtypes.float32: "f32", dtypes.float64: "f64", dtypes.complex64: "complex<f32>",
    dtypes.complex128: "complex<f64>", dtypes.float8_e4m3fn: "f8E4M3FN",
    dtypes.float8_e5m2: "f8E5M2",
    # The other float8/float4 types ml_dtypes defines (StableHLO's names).
    **{np.dtype(getattr(ml_dtypes, n)): t for n, t in (
        ("float8_e4m3fnuz", "f8E4M3FNUZ"), ("float8_e5m2fnuz", "f8E5M2FNUZ"),
        ("float8_e4m3b11fnuz", "f8E4M3B11FNUZ"), ("float8_e4m3", "f8E4M3"),
        ("float8_e3m4", "f8E3M4"), ("float8_e8m0fnu", "f8E8M0FNU"),
        ("float4_e2m1fn", "f4E2M1FN")) if hasattr(ml_dtypes, n)},
    # Sub-byte integers (JAX's int2/uint2/int4/uint4).
    **{np.dtype(getattr(ml_dtypes, n)): t for n, t in (
        ("int2", "i2"), ("uint2", "ui2"), ("int4", "i4"), ("uint4", "ui4"))
       if hasattr(ml_dtypes, n)},
    # NB: float0 (the tangent type of integers) has no runtime representation; in a module it
    # is i1 zeros, as in JAX, and the compiled call's boundary turns it back into host float0.
    dtypes.float0: "i1",
}

_type_cache: dict[Any, str] = {}


def elt_type(dtype: np.dtype) -> str:
  """The StableHLO element type of a dtype (`float32` -> `f32`)."""
  try:
    return _ELT[dtype]
  except KeyError:
    raise TypeError(f"dtype {dtype} has no StableHLO element type") from None


def ir_type(aval: ShapedArray) -> str:
  """`f32[3,4]` -> `tensor<3x4xf32>` (`core.abstract_token` -> `!stablehlo.token`)."""
  if aval is core.abstract_token:
    return "!stablehlo.token"
  key = (aval.shape, aval.dtype)
  t = _type_cache.get(key)
  if t is None:
    if not isinstance(aval.dtype, np.dtype):   # an extended dtype: its data's type
      t = _type_cache[key] = ir_type(core.physical_aval(aval))
      return t
    t = _type_cache[key] = tensor_type(*key)
  return t


def tensor_type(shape: tuple[int, ...], dtype: np.dtype) -> str:
  """`tensor<3x4xf32>` for `shape` (ints) and `dtype` (cached), as `ir_type` of an aval
  with them, without building the aval. Raises TypeError for a dtype StableHLO lacks."""
  key = (shape, dtype)
  t = _type_cache.get(key)
  if t is None:
    dims = "".join(f"{d}x" for d in shape)
    t = _type_cache[key] = f"tensor<{dims}{elt_type(dtype)}>"
  return t


def _float_bits(v: Any, dtype: np.dtype) -> str:
  arr = np.asarray(v, dtype)
  nbytes = dtype.itemsize
  bits = arr.view(np.dtype(f"u{nbytes}")).item()
  return f"0x{bits:0{2 * nbytes}X}"


def dense_scalar(v: Any, dtype: np.dtype) -> str:
  """The element literal of a splat `dense<...>` attribute for value `v` of `dtype`."""
  if dtype == dtypes.float0:
    return "false"
  v = np.asarray(v, dtype)[()]
  if dtype == dtypes.bool_:
    return "true" if bool(v) else "false"
  if dtypes.is_integer(dtype):
    return str(int(np.asarray(v, dtype)))
  if dtypes.is_complex(dtype):
    part = np.dtype(np.float32) if dtype == dtypes.complex64 else np.dtype(np.float64)
    c = complex(v)
    return f"({_float_bits(c.real, part)}, {_float_bits(c.imag, part)})"
  return _float_bits(v, dtype)


def _is_splat(x: np.ndarray) -> bool:
  """Whether all of `x`'s elements equal its first (never for bool arrays); linear, and
  cheap when the first two differ."""
  if x.size == 1:
    return True
  if not x.size or x.dtype == dtypes.bool_:
    return False
  flat = x.reshape(-1)
  if flat[1] != flat[0]:
    return False
  return bool(np.all(flat == flat[0]))


def dense_array(x: np.ndarray, splat: bool | None = None) -> str:
  """A `dense<...>` attribute of a whole host array (hex bytes unless all elements are
  equal: `splat`, when known, says whether they are)."""
  x = np.ascontiguousarray(x)
  if splat if splat is not None else _is_splat(x):
    return f"dense<{dense_scalar(x.flat[0], x.dtype)}>"
  if x.dtype == dtypes.bool_:
    x = x.astype(np.uint8)
  return f'dense<"0x{x.tobytes().hex().upper()}">'


def i64_array(xs: Sequence[int]) -> str:
  """`array<i64: 1, 2>` (a DenseI64ArrayAttr)."""
  return f"array<i64{': ' if len(xs) else ''}{', '.join(str(int(x)) for x in xs)}>"


def dense_i64(xs: Sequence[int], shape: Sequence[int] | None = None) -> str:
  """A `dense<[...]> : tensor<Nxi64>` attribute."""
  shape = (len(xs),) if shape is None else tuple(shape)
  dims = "".join(f"{d}x" for d in shape)
  body = ", ".join(str(int(x)) for x in xs)
  if len(shape) == 1:
    body = f"[{body}]"
  return f"dense<{body}> : tensor<{dims}i64>"


# ---------------------------------------------------------------------------
# Builders


_platform_state = threading.local()


@contextlib.contextmanager
def for_device(device):
  """Modules lowered inside (without an explicit platform) are for `device`'s platform, e.g.
  a `jit(f, device=cpu_device)` on a GPU machine; None (or a placement over several
  devices): unchanged (outermost: the default backend's)."""
  prev = getattr(_platform_state, "platform", None)
  _platform_state.platform = getattr(device, "platform", None) or prev
  try:
    yield
  finally:
    _platform_state.platform = prev


class ModuleContext:
  """State shared by every function of one module: private functions emitted for calls,
  the axis environment of named axes, and channel ids for collectives."""

  def __init__(self, name: str, *, axis_env: Sequence[tuple[str, int]] = (),
               num_replicas: int = 1, num_partitions: int = 1, platform: str | None = None):
    self.name = sanitize_name(name).rstrip("_")   # as JAX: `jit__lambda`, `jit_f`
    self.raw_name = name
    # Names of the enclosing equations while their rules lower nested jaxprs (named_scope):
    # the labels of the path, and whether it holds a user's name (then ops get a `loc`).
    self.name_stack: tuple[str, ...] = ()
    # Whether ops get the user's source line too (`source_locations`; on by default, as
    # JAX's lowering always writes them).
    self.source_locations = getattr(_locations_state, "enabled", True)
    # The root of the op names of the function being lowered: `jit(f)` in main, '' in the
    # private functions of calls (whose names are relative to the function, as JAX's).
    self.root_label = _module_label(self)
    # The user's frames of the call that traced main's jaxpr (`core.user_frames`; () if
    # unknown): the outer part of its ops' callsite locations.
    self.call_stack: tuple = ()
    # The ops' location texts by (label, name path, frame) (`jaxpr_subcomp`), the frame by
    # the ids of its code and parents; `loc_frames` holds those frames, so that no other
    # object takes one of those ids while the module is lowered (a jaxpr a rule traces and
    # drops).
    self.locs: dict = {}
    self.loc_frames: list = []
    self.funcs: list[str] = []
    self.func_names: set[str] = {"main"}
    self.call_cache: dict[int, tuple[str, Any]] = {}
    self.axis_env = tuple(axis_env)
    self.num_replicas = num_replicas
    self.num_partitions = num_partitions
    # The platform the module is for (default: the default backend's, e.g. "cpu", "cuda").
    self.platform = (platform or getattr(_platform_state, "platform", None) or
                     client.get_backend().platform)
    self._channel = 0
    # SPMD modules of pmap (interpreters/mapping.py): the `sdy.mesh` axes `[(name, size)]`, and
    # the depth of the manual region being lowered (None: outside any).
    self.mesh: list[tuple[str, int]] | None = None
    self.manual_depth: int | None = None
    # Programs over a user's device mesh (runtime/spmd.py): its `Mesh`; `other_meshes`: the
    # meshes of the same devices in another shape that types name (`use_abstract_mesh`),
    # {(axis names, sizes): the name of their `sdy.mesh`} (`mesh_symbol`).
    self.sdy_mesh = None
    self.other_meshes: dict = {}
    # Module-level ops other than functions, written before them (the `sdy.mesh` of an
    # inlined exported module: stagecraft.export).
    self.extra_ops: list[str] = []
    # The Python callables of the host-callback custom calls, indexed by their `index`.
    self.host_callbacks: list[Callable] = []
    # Objects kept alive as long as the module (JAX's `add_keepalive`; e.g. the callables a
    # library's rule hands to `mlir.emit_python_callback`).
    self.keepalives: list[Any] = []

  def add_keepalive(self, obj: Any) -> None:
    """Keeps `obj` alive with this module (JAX's `ModuleContext.add_keepalive`)."""
    self.keepalives.append(obj)

  def add_host_callback(self, fn: Callable) -> int:
    """Registers a host callback of this module; returns its index (the custom call's
    `index` attribute, with which the runtime finds the callable at compile time)."""
    self.host_callbacks.append(fn)
    return len(self.host_callbacks) - 1

  def new_channel(self) -> int:
    self._channel += 1
    return self._channel

  def unique_func_name(self, base: str) -> str:
    base = sanitize_name(base)
    name, i = base, 0
    while name in self.func_names:
      i += 1
      name = f"{base}_{i}"
    self.func_names.add(name)
    return name


class FuncBuilder:
  """Accumulates the lines of one function body; SSA names are `%N` from one counter, so
  values defined in nested regions never collide."""
  # NB: a builder may lower the jaxprs that rules emit inline (branches, loop bodies) its own
  # way: stagecraft.export's builder for symbolic dimensions sets this to its own subcomp.
  subcomp: Callable | None = None

  def __init__(self, module: ModuleContext):
    self.module = module
    self.lines: list[str] = []
    self.counter = 0
    self.consts: dict[Any, str] = {}
    # The current `!stablehlo.token` of ordered effects in this region (None: none yet).
    self.token: str | None = None
    # The location of the function's own ops (literal constants, `return`: `loc("jit(f)")`
    # in main, unknown in private functions), and that of the equation being lowered (for
    # the ops and block arguments of the regions its rule builds).
    self.loc = " loc(unknown)"
    self.cur_loc = self.loc
    # The equation being lowered: (primitive name, root label, name path, user frame, call
    # stack), for the location of the function a call's rule emits (`lower_call`).
    self.cur_site: tuple | None = None

  def fresh(self) -> str:
    self.counter += 1
    return f"%{self.counter - 1}"

  def emit(self, line: str) -> None:
    self.lines.append(line)


class LoweringRuleContext:
  """What a lowering rule sees: the builder, and the avals of its operands and results."""
  __slots__ = ("fb", "avals_in", "avals_out")

  def __init__(self, fb: FuncBuilder, avals_in, avals_out):
    self.fb = fb
    self.avals_in = avals_in
    self.avals_out = avals_out

  @property
  def module(self) -> ModuleContext:
    return self.fb.module

  @property
  def module_context(self) -> ModuleContext:
    """The module being lowered (JAX's name for `module`, used by libraries' rules)."""
    return self.fb.module

  def replace(self, avals_in=None, avals_out=None) -> "LoweringRuleContext":
    return LoweringRuleContext(self.fb, self.avals_in if avals_in is None else avals_in,
                               self.avals_out if avals_out is None else avals_out)

  # -- ordered effects: one token threaded through the region's ordered effects

  def get_token(self) -> str:
    """The current ordered-effect token (a fresh `stablehlo.after_all` if none yet)."""
    fb = self.fb
    if fb.token is None:
      fb.token = fb.fresh()
      fb.emit(f'{fb.token} = "stablehlo.after_all"() : () -> !stablehlo.token')
    return fb.token

  def set_token(self, token: str) -> None:
    """Makes `token` (a result of the last ordered effect) the current token."""
    self.fb.token = token

  # -- emission helpers

  def op(self, name: str, operands: Sequence[str], result_avals: Sequence[ShapedArray] | None = None,
         attrs: str | None = None, regions: Sequence[str] = (),
         operand_avals: Sequence[ShapedArray] | None = None) -> list[str]:
    """Emits `name` in MLIR's generic form and returns its result names.

    `result_avals` defaults to `ctx.avals_out`, `operand_avals` to `ctx.avals_in`.
    """
    result_avals = self.avals_out if result_avals is None else result_avals
    operand_avals = self.avals_in if operand_avals is None else operand_avals
    return emit_op(self.fb, name, operands, [ir_type(a) for a in operand_avals],
                   [ir_type(a) for a in result_avals], attrs, regions)

  def elementwise(self, name: str, *operands: str, aval: ShapedArray | None = None) -> str:
    """Emits an elementwise op whose operands and result share one type (pretty form)."""
    aval = self.avals_out[0] if aval is None else aval
    r = self.fb.fresh()
    self.fb.emit(f"{r} = {name} {', '.join(operands)} : {ir_type(aval)}")
    return r

  def constant(self, value: Any, aval: ShapedArray) -> str:
    """A splat constant of `value` with `aval`'s shape and dtype (deduplicated)."""
    return constant(self.fb, value, aval)

  def region(self, arg_avals: Sequence[ShapedArray], ret_avals: Sequence[ShapedArray],
             body: Callable[..., Sequence[str]]) -> str:
    """A one-block region; see `build_region`."""
    return build_region(self.fb, arg_avals, ret_avals, body)


def emit_op(fb: FuncBuilder, name: str, operands: Sequence[str], operand_types: Sequence[str],
            result_types: Sequence[str], attrs: str | None = None,
            regions: Sequence[str] = ()) -> list[str]:
  """Emits an op in MLIR's generic form into `fb`; returns its result names."""
  n = len(result_types)
  base = fb.fresh()
  lhs = f"{base} = " if n == 1 else (f"{base}:{n} = " if n else "")
  reg = f" ({', '.join(regions)})" if regions else ""
  att = f" {{{attrs}}}" if attrs else ""
  rt = result_types[0] if n == 1 else f"({', '.join(result_types)})"
  fb.emit(f'{lhs}"{name}"({", ".join(operands)}){reg}{att} : '
          f'({", ".join(operand_types)}) -> {rt}')
  if n == 1:
    return [base]
  return [f"{base}#{i}" for i in range(n)]


def constant(fb: FuncBuilder, value: Any, aval: ShapedArray) -> str:
  """A splat `stablehlo.constant` of `value` with `aval` (deduplicated per region)."""
  if not isinstance(aval.dtype, np.dtype):   # typed keys: data of the same splat value
    aval = core.physical_aval(aval)
  dtype = aval.dtype
  t = type(value)
  kind = _SCALAR_TYPES.get(t)
  if kind is not None and (value or kind):
    # NB: the literal's text by (type, value, dtype): equal values of one type have one
    # text, except 0.0 == -0.0 (floats equal to 0 are not cached; a NaN equals only
    # itself, so it finds only its own entry).
    vkey = (t, value, dtype)
    text = _scalar_texts.get(vkey)
    if text is None:
      text = dense_scalar(value, dtype)
      if len(_scalar_texts) > 65536:
        _scalar_texts.clear()
      _scalar_texts[vkey] = text
  else:
    text = dense_scalar(value, dtype)
  key = (aval.shape, dtype, text)
  name = fb.consts.get(key)
  if name is None:
    name = fb.fresh()
    fb.emit(f"{name} = stablehlo.constant dense<{key[2]}> : {ir_type(aval)}")
    fb.consts[key] = name
  return name


# The scalar types of literal values (Python's for weakly typed literals, NumPy's for the
# others) whose `dense_scalar` text `constant` caches by (type, value, dtype): True for the
# integer and bool types (every value cached), False for floats (zero is not: -0.0 == 0.0).
_SCALAR_TYPES = {int: True, bool: True, np.bool_: True, float: False,
                 **{np.dtype(c).type: True for c in "bBhHiIlLqQ"},
                 **{np.dtype(c).type: False for c in "efd"}}
_scalar_texts: dict = {}


def _pprint_bytes(n: float) -> str:
  """`1.50MB`: a byte count with a decimal prefix, two decimals (as JAX prints them)."""
  if n <= 0:
    return "0.00B"
  k = 0
  while n >= 1000 and k < 4:
    n, k = n / 1000, k + 1
  return f"{n:.2f}{('', 'K', 'M', 'G', 'T')[k]}B"


def warn_captured_constants(jaxpr: Jaxpr, consts: Sequence[Any]) -> None:
  """Warns, as JAX 0.10.2 does when it lowers a function whose constants are in its text,
  when they total at least `jax_captured_constants_warn_bytes` (-1: never); with
  `jax_captured_constants_report_frames` set, the warning names the five largest and where
  each is used (that many frames; stagecraft records one frame per equation)."""
  threshold = config.captured_constants_warn_bytes
  if threshold == -1:
    return
  sizes = [getattr(c, "nbytes", 0) for c in consts]
  total = sum(sizes)
  if total < threshold:
    return
  msg = (f"A large amount of constants were captured during lowering "
         f"({_pprint_bytes(total)} total). If this is intentional, disable this warning by "
         f"setting JAX_CAPTURED_CONSTANTS_WARN_BYTES=-1. ")
  frames = config.captured_constants_report_frames
  if not frames:
    warnings.warn(msg + "To obtain a report of where these constants were encountered, "
                  "set JAX_CAPTURED_CONSTANTS_REPORT_FRAMES=-1.")
    return
  msg += ("The subsequent report may be disabled by setting "
          "JAX_CAPTURED_CONSTANTS_REPORT_FRAMES=0.\n\n"
          f"Largest {min(frames, len(consts))} allocation(s):\n")   # NB: -1 for -1, as JAX
  for n, v, c in heapq.nlargest(5, zip(sizes, jaxpr.constvars, consts),
                                key=lambda t: t[0]):
    msg += (f"  Constant {type(c)}, {v.aval.str_short(short_dtypes=False)}, "
            f"{_pprint_bytes(n)} captured at:\n")
    for eqn in jaxpr.eqns:
      if any(x is v for x in eqn.invars):
        msg += f"    {core.source_summary(eqn.source_info)}\n\n"
  warnings.warn(msg)


def dense_constant(fb: FuncBuilder, value: Any, aval: ShapedArray) -> str:
  """A `stablehlo.constant` holding the whole array `value` with `aval` (a splat when all
  its elements are equal).

  A NumPy array with zero strides (`np.broadcast_to`'s) becomes, as in JAX, the constant of
  its distinct elements and a `stablehlo.broadcast_in_dim` to its shape. The text is linear
  in the array's size (hex bytes, MLIR's form for big attributes). A token constant (a
  closed-over `core.Token`) is a new token, as JAX's."""
  if aval is core.abstract_token:
    return emit_op(fb, "stablehlo.create_token", [], [], ["!stablehlo.token"])[0]
  if aval.dtype == dtypes.float0:   # i1 zeros in the program
    return constant(fb, 0, aval)
  if not isinstance(aval.dtype, np.dtype):   # typed keys (an Array of them): their data
    return dense_constant(fb, value._physical(), core.physical_aval(aval))
  x = np.asarray(value, dtype=aval.dtype).reshape(aval.shape)
  if x.size > 1 and 0 in x.strides:
    kept = [d for d, st in enumerate(x.strides) if st != 0]
    small = x[tuple(slice(None) if d in kept else 0 for d in range(x.ndim))]
    inner = dense_constant(fb, small, aval.update(shape=small.shape, weak_type=False))
    return emit_op(fb, "stablehlo.broadcast_in_dim", [inner],
                   [ir_type(aval.update(shape=small.shape))], [ir_type(aval)],
                   f"broadcast_dimensions = {i64_array(kept)}")[0]
  if x.size == 0 or _is_splat(x):
    return constant(fb, x.flat[0] if x.size else 0, aval)
  name = fb.fresh()
  fb.emit(f"{name} = stablehlo.constant {dense_array(x, splat=False)} : {ir_type(aval)}")
  return name


def build_region(fb: FuncBuilder, arg_avals: Sequence[ShapedArray],
                 ret_avals: Sequence[ShapedArray], body: Callable[..., Sequence[str]]) -> str:
  """Builds a one-block region: `body(*arg_names)` emits into it and returns the names of
  the values it returns (with `stablehlo.return`, typed by `ret_avals`)."""
  saved_lines, saved_consts, saved_token = fb.lines, fb.consts, fb.token
  fb.lines, fb.consts, fb.token = [], {}, None
  try:
    args = [fb.fresh() for _ in arg_avals]
    results = list(body(*args))
    lines = fb.lines
  finally:
    fb.lines, fb.consts, fb.token = saved_lines, saved_consts, saved_token
  loc = fb.cur_loc
  _locate(lines, 0, loc)   # NB: ops the rule writes itself: the equation's location
  # NB: as JAX's, the block arguments are located by the primitive's name alone (XLA's
  # region parameters `reduce_sum.3`, op_name "reduce_sum").
  site = fb.cur_site
  arg_loc = _loc_text(site[0], None) if site is not None else loc
  header = "^bb0(" + ", ".join(f"{a}: {ir_type(av)}{arg_loc}"
                               for a, av in zip(args, arg_avals)) + "):"
  ret_types = ", ".join(ir_type(a) for a in ret_avals)
  ret = f'  "stablehlo.return"({", ".join(results)}) : ({ret_types}) -> (){loc}'
  return "{\n" + "\n".join([header, *("  " + ln for ln in lines), ret]) + "\n}"


# ---------------------------------------------------------------------------
# Jaxprs to functions and modules


def sanitize_name(name: str) -> str:
  """A valid MLIR symbol name made from `name`."""
  name = re.sub(r"[^A-Za-z0-9_.$]", "_", name or "fn")
  if not re.match(r"[A-Za-z_]", name):
    name = "_" + name
  return name


def jaxpr_subcomp(fb: FuncBuilder, jaxpr: Jaxpr, consts: Sequence[str],
                  args: Sequence[str]) -> list[str]:
  """Emits `jaxpr`'s equations into `fb`, with SSA names for its constvars and invars;
  returns the names of its outputs.

  Each equation's ops get JAX's location `loc("jit(f)/outer/op"(callsite("fn"("file":L:C
  to :E) at ...)))`: the name stack (named_scope, `source_info_util`, and the labels of the
  enclosing calls) and the user's frames, from which XLA names the HLO instructions
  (`sin.1`) and takes their `op_name` metadata; literal constants get the function's own
  location. A rule lowers nested jaxprs with the path extended by the equation's own names
  and label. With `set_xla_metadata` active where an equation was recorded, the ops
  producing its results get those frontend attributes.

  Raises:
    MissingRuleError: a primitive without a lowering rule, or a rule returning another
      number of results than the equation has.
  """
  if fb.subcomp is not None:
    return fb.subcomp(jaxpr, consts, args)
  env: dict[Var, str] = {}
  env.update(zip(jaxpr.constvars, consts))
  env.update(zip(jaxpr.invars, args))

  def read(v):
    if type(v) is Literal:
      return constant(fb, v.val, v.aval)
    return env[v]

  lowerings = _lowerings
  module = fb.module
  # NB: in a program over a mesh with Explicit axes, each value whose type says it is split
  # is constrained to that layout (JAX's sharding in types); other programs pay one check.
  typed = (module.sdy_mesh is not None and module.manual_depth is None
           and bool(module.sdy_mesh.explicit_axes))
  # The location state that is the same for every equation of this jaxpr (nested jaxprs
  # restore it): the name path of the enclosing equations, the root of the names, the
  # tracing call's frames (main's ops only) and the per-module cache of location texts.
  base = module.name_stack
  root = module.root_label
  stack = module.call_stack if root else ()
  frames = module.source_locations
  locs = module.locs
  saved_loc, saved_site = fb.cur_loc, fb.cur_site
  lines = fb.lines
  try:
    for eqn in jaxpr.eqns:
      prim = eqn.primitive
      rule = lowerings.get(prim)
      if rule is None:
        raise MissingRuleError(
            f"MLIR translation rule for primitive '{prim.name}' not found for platform "
            f"{module.platform}: jit and eager execution need one. Register one with stagecraft.interpreters.lowering.register_lowering("
            f"{prim.name}_p, rule).")
      if extended_avals[0] and prim not in extended_dtype_rules and _has_extended(eqn):
        rule = lambda ctx, *ops, _eqn=eqn, **_: extended_rule[0](ctx.fb, _eqn, ops)
      invars = eqn.invars
      ctx = LoweringRuleContext(fb, [v.aval for v in invars], [v.aval for v in eqn.outvars])
      if fb.lines is not lines:   # NB: a rule may have swapped the builder's lines (regions)
        lines = fb.lines
      start = len(lines)
      operands = [read(v) for v in invars]
      if len(lines) != start:   # literal constants: the function's location, as JAX's
        _locate(lines, start, fb.loc)
        start = len(lines)
      # The equation's location text, cached per module by (label, name path, frame): the
      # frame keyed by its code object's id, its bytecode offset and its parents' id
      # (cheaper to hash than the code object; `module.loc_frames` keeps them alive).
      info = eqn.source_info
      if type(info) is UserFrame:
        path, metadata, frame = base, (), info
      elif type(info) is NameStackInfo:
        own, metadata = info.name_stack, info.xla_metadata
        path = base + own if own else base
        frame = core.source_frame(info.source_info)
      else:
        path, metadata = base, ()
        frame = None if info is None else core.source_frame(info)
      name = prim.name
      label = _op_label(eqn) if name == "jit" else name
      if frame is None or not frames:
        frame = None
        key = (label, path, None)
      else:
        key = (label, path, id(frame[0]), frame[1], id(frame[2]) if len(frame) > 2 else 0)
      loc = locs.get(key)
      if loc is None:
        text = "/".join((root, *path, label)) if root else "/".join((*path, label))
        loc = locs[key] = _loc_text(text, frame, stack)
        if frame is not None:
          module.loc_frames.append(frame)
      # NB: what the rule (and the jaxprs it lowers) sees; restored after the loop
      module.name_stack, fb.cur_loc = path + (label,), loc
      fb.cur_site = (name, root, path, frame, stack)
      outs = rule(ctx, *operands, **eqn.params)
      if fb.lines is not lines:
        lines = fb.lines
      n = len(lines)
      if n == start + 1:   # NB: most rules write one line: one op, whole
        line = lines[start]
        if not line.endswith(_LOCATED) and not line.endswith(_OPEN):
          lines[start] = line + loc
      elif n > start:
        _locate(lines, start, loc)
      if metadata:
        for o in outs:
          add_frontend_attributes(fb, o, metadata, start)
      if len(outs) != len(eqn.outvars):
        raise MissingRuleError(f"Lowering rule of '{name}' returned {len(outs)} values for "
                               f"{len(eqn.outvars)} outputs.")
      if typed and (name in constrained_to_type or any(
          _unreduced_type(v.aval) for v in eqn.outvars)):
        n = len(lines)
        outs = [_constrain_to_type(fb, o, v.aval) for o, v in zip(outs, eqn.outvars)]
        _locate(lines, n, loc)   # NB: the equation's, as JAX's rules emit them
      env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]
  finally:   # NB: the location state the equations set, as it was
    module.name_stack, fb.cur_loc, fb.cur_site = base, saved_loc, saved_site


# ---------------------------------------------------------------------------
# Extended dtypes (typed PRNG keys): a `key<fry>[*s]` value is its data `u32[*s, 2]` in the
# module (`ir_type`). Primitives made for keys (`random_bits`, ...) and those that only pass
# values through (calls, loops, conds, whose regions take the data types) are in
# `extended_dtype_rules`; any other equation with a key operand or result (`slice`,
# `select_n`, `concatenate`, ...) is lowered on the data, the primitive vmapped over the
# data's trailing axis (JAX's physical lowering of structural ops on extended dtypes).

#: Set once a value of an extended dtype is made (no cost per equation before).
extended_avals = [False]
#: Primitives whose lowering rules take extended-dtype operands and results themselves.
extended_dtype_rules: set = set()


def _has_extended(eqn) -> bool:
  if any(not isinstance(getattr(v.aval, "dtype", None) or np.dtype(bool), np.dtype)
         for v in (*eqn.invars, *eqn.outvars)):
    # NB: equations with sub-jaxprs (calls, loops, conds) lower their regions with the data
    # types already
    return not any(isinstance(p, (Jaxpr, ClosedJaxpr)) or (
        type(p) is tuple and p and isinstance(p[0], (Jaxpr, ClosedJaxpr)))
        for p in eqn.params.values())
  return False


#: `rule(fb, eqn, operand_names) -> result_names` for the other equations on keys (set by
#: `lax.prng`, which knows the key types: the primitive vmapped over the data's trailing
#: axis).
extended_rule: list = [None]


#: Names of the primitives whose results, in a program over a mesh with Explicit axes, are
#: constrained to the sharding in their type: those whose layout the partitioner's
#: propagation from the operands may not give (a contraction with `out_sharding`, reshapes,
#: broadcasts). Elementwise ops, transposes and reductions propagate their operands'.
constrained_to_type = {"dot_general", "reshape", "broadcast_in_dim", "concatenate"}


def mesh_symbol(module: ModuleContext, mesh: Any) -> str | None:
  """The name of the `sdy.mesh` of `module` that `mesh` (a Mesh or AbstractMesh) is:
  `mesh` for the program's mesh (same axis names and sizes); for another shape of its
  devices (a type under `use_abstract_mesh`), `mesh_<k>`, declared once (as JAX names
  them); None for a mesh of another size."""
  own = module.sdy_mesh
  key = (tuple(mesh.axis_names), tuple(mesh.axis_sizes))
  if own is None or key == (tuple(own.axis_names), tuple(own.axis_sizes)):
    return "mesh"
  if math.prod(mesh.axis_sizes) != own.size:
    return None
  name = module.other_meshes.get(key)
  if name is None:
    name = module.other_meshes[key] = f"mesh_{len(module.other_meshes)}"
    axes = ", ".join(f'"{mesh.sdy_axis_names[n]}"={s}'
                     for n, s in zip(mesh.axis_names, mesh.axis_sizes))
    module.extra_ops.append(f"  sdy.mesh @{name} = <[{axes}]>")
  return name


def _constrain_to_type(fb: FuncBuilder, x: str, aval: Any) -> str:
  """`x` under an `sdy.sharding_constraint` to the sharding in its type, if it has one over
  the module's mesh (or another shape of its devices: `mesh_symbol`)."""
  ts = getattr(aval, "_sharding", None)
  if ts is None:
    return x
  name = mesh_symbol(fb.module, ts.mesh)
  if name is None:
    return x
  mesh = ts.mesh
  dims = []
  # NB: keys of an extended dtype are their data in the module: its trailing axes unsharded
  rank = len(aval.shape if isinstance(aval.dtype, np.dtype) else core.physical_aval(aval).shape)
  spec = tuple(ts.spec) + (None,) * (rank - len(ts.spec))
  for e in spec:
    names = () if e is None else e if isinstance(e, tuple) else (e,)
    dims.append("{" + ", ".join(f'"{mesh.sdy_axis_names[n]}"' for n in names) + "}")
  r = fb.fresh()
  ur = sharding_lib.sdy_unreduced(mesh, ts.spec.unreduced)
  fb.emit(f"{r} = sdy.sharding_constraint {x} <@{name}, [{', '.join(dims)}]{ur}> : "
          f"{ir_type(aval)}")
  return r


def _unreduced_type(aval: Any) -> bool:
  # NB: a value unreduced over an Explicit axis (partial sums): its layout is constrained
  # after every operation, so the partitioner keeps the sums apart, as JAX's lowering does.
  ts = getattr(aval, "_sharding", None)
  return ts is not None and bool(ts.spec.unreduced) and all(
      t == sharding_lib.AxisType.Explicit for n, t in zip(ts.mesh.axis_names,
                                                          ts.mesh.axis_types)
      if n in ts.spec.unreduced)


def _op_label(eqn) -> str:
  """The name of an equation's ops in a name stack (`sin`; `jit(g)` for a jit call)."""
  if eqn.primitive.name == "jit" and "name" in eqn.params:
    return f"jit({eqn.params['name']})"
  return eqn.primitive.name


def _module_label(module: ModuleContext) -> str:
  """The root of a module's names: `jit(f)` for the module `jit_f`, as JAX names it."""
  raw = module.raw_name or module.name
  for kind in ("jit", "pmap"):
    if raw.startswith(kind + "_"):
      return f"{kind}({raw[len(kind) + 1:]})"
  return raw




def _file_loc(frame: core.UserFrame) -> str:
  """`("function"("file":line:col to :end_col))`: the MLIR location of a user frame as JAX
  writes the innermost frame of an op's location (a NameLoc of the function around a
  FileLineColRange, with Python's 0-based columns). Cached by the code object's identity
  and the offset: equal code objects of two files (the same source compiled twice) are two
  places, which a key comparing code objects by value would merge."""
  code = frame[0]
  key = (id(code), frame[1])
  entry = _file_locs.get(key)
  if entry is not None and entry[0] is code:
    return entry[1]
  file, line, col, end_line, end_col, fn = frame.position()
  end = f":{end_col}" if end_line == line else f"{end_line}:{end_col}"
  text = f'("{_mlir_string(fn)}"("{_mlir_string(file)}":{line}:{col} to {end}))'
  if len(_file_locs) > 65536:
    _file_locs.clear()
  _file_locs[key] = (code, text)   # NB: holding the code, whose id is then not reused
  return text


_file_locs: dict[tuple[int, int], tuple[Any, str]] = {}
_locations_state = threading.local()


@contextlib.contextmanager
def source_locations(enabled: bool = True):
  """Context manager: whether modules lowered inside (in this thread) put the user's frames
  on each op, `loc("jit(f)/outer/sin"(callsite("f"("file.py":12:4 to :15) at ...)))`, as
  JAX's lowering always does (its `Lowered.as_text(debug_info=True)` shows them; XLA keeps
  them as stack frames of the ops' metadata). On by default; with `enabled=False` the ops
  keep their names alone (`loc("jit(f)/outer/sin")`), from which XLA names instructions.

  Example:
    >>> import stagecraft, stagecraft.numpy as jnp
    >>> with source_locations():
    ...   text = stagecraft.jit(jnp.sin).lower(1.0).compiler_ir()
    >>> 'loc("jit(sin)/sin"' in text
    True
  """
  prev = getattr(_locations_state, "enabled", True)
  _locations_state.enabled = bool(enabled)
  try:
    yield
  finally:
    _locations_state.enabled = prev


def strip_locations(text: str) -> str:
  """`text` without the ` loc(...)` locations of its ops (what JAX's `as_text()` shows by
  default; the module's program is unchanged)."""
  return mlir_text.strip_locations(text)




def _mlir_string(s: str) -> str:
  out = []
  for ch in s:
    if ch in ('"', "\\"):
      out.append("\\" + ch)
    elif " " <= ch <= "~":
      out.append(ch)
    else:
      out.extend(f"\\{b:02X}" for b in ch.encode("utf-8"))
  return "".join(out)


def _loc_text(name: str, frame: core.UserFrame | None,
              stack: tuple[core.UserFrame, ...] = ()) -> str:
  """` loc("name"("fn"("file":L:C to :E)))` (the name alone without a frame); with the
  frames `stack` of the call that traced the function (`core.user_frames`) the frame is the
  callee of a callsite chain over them, `loc("name"(callsite(F at callsite(G at H))))`, as
  JAX writes a traceback (without `frame`: the chain of `stack` alone). The frame's parents
  (`UserFrame.parents`) come between it and `stack`, whose first frame is left out when it
  is the last of them.

  Built from cached parts (the name's text, each frame's, the chain of a `stack`); the
  caller caches whole texts per module (`jaxpr_subcomp`)."""
  head = _name_locs.get(name)
  if head is None:
    head = f' loc("{_mlir_string(name)}"'
    if len(_name_locs) > 65536:
      _name_locs.clear()
    _name_locs[name] = head
  if frame is None and not stack:
    return head + ")"
  frames = () if frame is None else (frame, *frame.parents)
  text = None
  if stack:
    last = frames[-1] if frames else None
    text = _stack_chain(stack, 1 if last is not None and _same_place(stack[0], last) else 0)
  for f in reversed(frames):
    f_text = _file_loc(f)[1:-1]
    text = f_text if text is None else f"callsite({f_text} at {text})"
  return f"{head}({text}))"


def _same_place(a: core.UserFrame, b: core.UserFrame) -> bool:
  """Whether two user frames are one place: one bytecode offset of one code object (or of
  equal ones of one file)."""
  ca, cb = a[0], b[0]
  return a[1] == b[1] and (ca is cb or (ca == cb and ca.co_filename == cb.co_filename))


def _stack_chain(stack: tuple[core.UserFrame, ...], skip: int) -> str | None:
  """The callsite chain of `stack[skip:]` (None when empty), cached by the identity of
  `stack` (one tuple per trace, `TracedSignature.call_stack`)."""
  entry = _stack_chains.get(id(stack))
  if entry is None or entry[0] is not stack:
    chains = []
    for k in (0, 1):
      frames = stack[k:]
      text = _file_loc(frames[-1])[1:-1] if frames else None
      for f in reversed(frames[:-1]):
        text = f"callsite({_file_loc(f)[1:-1]} at {text})"
      chains.append(text)
    if len(_stack_chains) > 4096:
      _stack_chains.clear()
    # NB: holding the stack, whose id is then not reused while the entry lives
    entry = _stack_chains[id(stack)] = (stack, *chains)
  return entry[1 + skip]


_name_locs: dict[str, str] = {}
_stack_chains: dict[int, tuple] = {}


def _locate(lines: list[str], start: int, loc: str) -> None:
  """Appends `loc` to the lines from `start` on that have no location yet (a line ending
  in `")` or `))` has one: op lines end in a type otherwise)."""
  for i in range(start, len(lines)):
    line = lines[i]
    if not line.endswith(_LOCATED):
      if line.endswith(_OPEN) or line.strip() in ("}", "})"):
        continue   # NB: a line of an op written over several lines that is not its end
      lines[i] = line + loc


_LOCATED = ('")', "))", "loc(unknown)")
_OPEN = ("{", ":", "(", ",")


def frontend_attributes_text(metadata: Any) -> str:
  """`mhlo.frontend_attributes = {k = "v", ...}` for `(key, value)` pairs (bools written
  `true`/`false`, other values with `str`, as JAX writes them)."""
  items = []
  for k, v in metadata:
    v = str(v).lower() if isinstance(v, bool) else str(v)
    key = k if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$.]*", k) else f'"{_mlir_string(k)}"'
    items.append(f'{key} = "{_mlir_string(v)}"')
  return f"mhlo.frontend_attributes = {{{', '.join(items)}}}"


def add_frontend_attributes(fb: FuncBuilder, value: str, metadata: Any,
                            start: int = 0) -> bool:
  """Gives the op of `fb`'s current region that defines SSA `value` (`%3`, `%3#1`) the
  frontend attributes `metadata` (`(key, value)` pairs; keys the op has already keep
  theirs, as JAX's). Looks at the lines from `start` on; a block argument or a value not
  defined there is left alone. Returns whether an op was found."""
  base = value.split("#", 1)[0]
  prefixes = (f"{base} = ", f"{base}:")
  lines = fb.lines
  for i in range(len(lines) - 1, start - 1, -1):
    line = lines[i]
    if not line.startswith(prefixes):
      continue
    new = _with_frontend_attributes(line, metadata)
    if new is None:
      return False
    lines[i] = new
    return True
  return False


def _with_frontend_attributes(line: str, metadata: Any) -> str | None:
  """`line` (one op: `%r = "name"(...) ... : (types) -> types loc(...)`, or the pretty form
  `%r = dialect.op operands : type loc(...)`) with the frontend attributes added to its
  attribute dictionary; None for an op form this does not edit."""
  loc = ""
  k = line.rfind(" loc(") if line.endswith(_LOCATED) else -1
  if k >= 0:   # NB: the op's own location is the last one (its regions' come before)
    line, loc = line[:k], line[k:]
  if "mhlo.frontend_attributes" in line:
    old = re.search(r"mhlo\.frontend_attributes = \{([^{}]*)\}", line)
    if old is None:
      return None
    have = {kv.split(" = ", 1)[0].strip().strip('"') for kv in old.group(1).split(", ") if kv}
    extra = [(k, v) for k, v in metadata if k not in have]
    if not extra:
      return line + loc
    add = frontend_attributes_text(extra)[len("mhlo.frontend_attributes = {"):-1]
    return line[:old.end(1)] + (", " if old.group(1) else "") + add + line[old.end(1):] + loc
  attrs = frontend_attributes_text(metadata)
  eq = line.index(" = ")
  if line[eq + 3] == '"':   # generic form: the attribute dictionary before ` : (`
    k = line.rfind(" : (")
    if k < 0:
      return None
    if line[k - 1] == "}":   # an attribute dictionary already
      return line[:k - 1] + ", " + attrs + "}" + line[k:] + loc
    return line[:k] + " {" + attrs + "}" + line[k:] + loc
  # NB: the pretty forms stagecraft writes (elementwise ops, compare, select, convert,
  # reshape, broadcast_in_dim, func.call) take their attribute dictionary just before
  # ` : type`; a constant's form puts its value there, so it is left alone.
  op = line[eq + 3:].split(" ", 1)[0]
  if not (op == "func.call" or op.startswith("stablehlo.")) or op == "stablehlo.constant":
    return None
  k = line.rfind(" : ")
  if k < 0:
    return None
  if line[k - 1] == "}":
    return line[:k - 1] + ", " + attrs + "}" + line[k:] + loc
  return line[:k] + " {" + attrs + "}" + line[k:] + loc


def has_ordered_effects(jaxpr: Jaxpr) -> bool:
  """Whether `jaxpr` has an effect of an ordered type (its calls then thread a token)."""
  effs = jaxpr.effects
  return bool(effs) and any(core.ordered_effects.contains(e) for e in effs)


def lower_jaxpr_to_fun(module: ModuleContext, name: str, jaxpr: Jaxpr, *,
                       public: bool = False, arg_attrs: Sequence[str | None] | None = None,
                       result_attrs: Sequence[str | None] | None = None,
                       token: bool = False, consts: Sequence[Any] | None = None,
                       arg_locs: Sequence[str | None] | None = None,
                       func_loc: str | None = None) -> str:
  """Emits `jaxpr` (constvars first, then invars, as arguments) as a `func.func`; returns
  its text. With `token`, the function takes the ordered-effect token first and returns the
  last one first (a call of a jaxpr with ordered effects, `lower_call`). With `consts` (one
  value per constvar), the constvars are no arguments: their values are dense constants at
  the top of the body, as JAX lowers a ClosedJaxpr's consts (`dense_constant`).

  Locations, as JAX's: each argument's `loc("x")` from `arg_locs` (one name or None per
  argument; XLA names the HLO parameters after them), unknown for a private function's;
  the ops of a public function are named from the module (`jit(f)/sin`), those of a
  private one relative to it (`sin`). `func_loc` (` loc(...)`) is the function's own
  location (default unknown)."""
  if not public:
    saved = module.root_label, module.name_stack
    module.root_label, module.name_stack = "", ()
    try:
      return _lower_jaxpr_to_fun(module, name, jaxpr, public, arg_attrs, result_attrs,
                                 token, consts, arg_locs, func_loc)
    finally:
      module.root_label, module.name_stack = saved
  return _lower_jaxpr_to_fun(module, name, jaxpr, public, arg_attrs, result_attrs, token,
                             consts, arg_locs, func_loc)


def _lower_jaxpr_to_fun(module, name, jaxpr, public, arg_attrs, result_attrs, token, consts,
                        arg_locs, func_loc) -> str:
  fb = FuncBuilder(module)
  if public and module.root_label:
    fb.loc = fb.cur_loc = _loc_text(module.root_label, None, module.call_stack)
  func_loc = func_loc or " loc(unknown)"
  baked = consts is not None
  in_avals = [v.aval for v in ((() if baked else (*jaxpr.constvars,)) + (*jaxpr.invars,))]
  arg_names = [f"%arg{i}" for i in range(len(in_avals))]
  if baked:
    assert len(consts) == len(jaxpr.constvars), (len(consts), len(jaxpr.constvars))
    if consts:
      warn_captured_constants(jaxpr, consts)
    const_names = [dense_constant(fb, c, v.aval) for c, v in zip(consts, jaxpr.constvars)]
    _locate(fb.lines, 0, fb.loc)
    var_names = arg_names
  else:
    nconst = len(jaxpr.constvars)
    const_names, var_names = arg_names[:nconst], arg_names[nconst:]
  if token:
    fb.token = "%argtok"
  outs = jaxpr_subcomp(fb, jaxpr, const_names, var_names)
  out_types = [ir_type(v.aval) for v in jaxpr.outvars]
  args_txt = []
  for i, (a, av) in enumerate(zip(arg_names, in_avals)):
    attr = arg_attrs[i] if arg_attrs is not None else None
    aloc = arg_locs[i] if arg_locs is not None and i < len(arg_locs) else None
    args_txt.append(f"{a}: {ir_type(av)}" + (f" {{{attr}}}" if attr else "") +
                    (_loc_text(aloc, None) if aloc is not None else " loc(unknown)"))
  res_txt = []
  for i, t in enumerate(out_types):
    attr = result_attrs[i] if result_attrs is not None else None
    res_txt.append(t + (f" {{{attr}}}" if attr else ""))
  if token:
    args_txt.insert(0, "%argtok: !stablehlo.token loc(unknown)")
    res_txt.insert(0, "!stablehlo.token")
    outs = [fb.token, *outs]
    out_types = ["!stablehlo.token", *out_types]
  vis = "public" if public else "private"
  body = "    " + "\n    ".join(fb.lines) if fb.lines else ""
  ret = (f"    return {', '.join(outs)} : {', '.join(out_types)}" if outs else
         "    return") + fb.loc
  return (f"  func.func {vis} @{name}({', '.join(args_txt)}) -> ({', '.join(res_txt)}) {{\n"
          f"{body}{chr(10) if body else ''}{ret}\n  }}{func_loc}")


def lower_call(ctx: LoweringRuleContext, name: str, closed_jaxpr: ClosedJaxpr,
               args: Sequence[str]) -> list[str]:
  """Lowers a call of `closed_jaxpr` as a private function and a `func.call`.

  As JAX lowers a call, the jaxpr's constants are dense constants inside the function
  (`lower_jaxpr_to_fun`'s `consts`). (With `jax_use_simplified_jaxpr_constants`, jit hoists
  the constants of the calls it compiles to arguments of the program first,
  `pjit.hoist_call_consts`.)
  """
  module = ctx.module
  token = has_ordered_effects(closed_jaxpr.jaxpr)
  cached = module.call_cache.get(id(closed_jaxpr))
  if cached is None:
    fname = module.unique_func_name(name)
    module.funcs.append(lower_jaxpr_to_fun(module, fname, closed_jaxpr.jaxpr, token=token,
                                           consts=closed_jaxpr.consts,
                                           func_loc=_call_func_loc(ctx.fb.cur_site)))
    module.call_cache[id(closed_jaxpr)] = (fname, closed_jaxpr)
  else:
    fname = cached[0]
  in_types = [ir_type(a) for a in ctx.avals_in]
  out_types = [ir_type(a) for a in ctx.avals_out]
  args = list(args)
  if token:
    args.insert(0, ctx.get_token())
    in_types.insert(0, "!stablehlo.token")
    out_types.insert(0, "!stablehlo.token")
  n = len(out_types)
  base = ctx.fb.fresh()
  lhs = f"{base} = " if n == 1 else (f"{base}:{n} = " if n else "")
  ctx.fb.emit(f"{lhs}func.call @{fname}({', '.join(args)}) : ({', '.join(in_types)}) -> "
              f"({', '.join(out_types)})")
  outs = [base] if n == 1 else [f"{base}#{i}" for i in range(n)]
  if token:
    ctx.set_token(outs[0])
    outs = outs[1:]
  return outs


def _call_func_loc(site: tuple | None) -> str | None:
  """The location JAX gives the function of a jit call: `loc("jit:"("jit(f)/path/jit"(
  <the call's frames>)))`; None (unknown) for other calls."""
  if site is None or site[0] != "jit":
    return None
  prim, root, path, frame, stack = site
  name = "/".join((root, *path, prim)) if root else "/".join((*path, prim))
  return f' loc("jit:"({_loc_text(name, frame, stack)[5:-1]}))'


@contextlib.contextmanager
def bound_axes(axis_env: Sequence[tuple[Any, int]]):
  """Binds the named axes of a module's environment while it is lowered, so bodies that a
  lowering rule re-traces (scan's step) can hold collectives over them."""
  with contextlib.ExitStack() as stack:
    for axis_name, size in axis_env:
      stack.enter_context(batching.extend_axis_env(axis_name, size))
    yield


def lower_jaxpr_to_module(name: str, jaxpr: Jaxpr, *, donated: Sequence[bool] | None = None,
                          axis_env: Sequence[tuple[str, int]] = (), num_replicas: int = 1,
                          num_partitions: int = 1, result_names: Sequence[str] | None = None,
                          arg_attrs: Sequence[str | None] | None = None,
                          result_attrs: Sequence[str | None] | None = None,
                          module: ModuleContext | None = None,
                          consts: Sequence[Any] | None = None,
                          arg_locs: Sequence[str | None] | None = None,
                          call_stack: tuple = ()) -> str:
  """Lowers `jaxpr` to a StableHLO module whose `main` takes constvars then invars.

  Args:
    name: the module name (sanitized: `jit_<name>`).
    donated: one bool per argument of main; True marks the buffer donated.
    axis_env: named axes `(name, size)` for collectives (outermost first).
    consts: the values of the constvars: then main takes only the invars and the constants
      are in its text (as JAX 0.10.2 lowers a jit's closed-over arrays by default).
    arg_locs: the name of each argument of main (`x`, `y['a']`; None: unnamed), its
      location, after which XLA names the HLO parameter (`x.1`), as JAX's.
    call_stack: the user's frames where `jaxpr` was traced (`core.user_frames`), the outer
      frames of its ops' locations.
  """
  module = module or ModuleContext(name, axis_env=axis_env, num_replicas=num_replicas,
                                   num_partitions=num_partitions)
  if module.source_locations:
    module.call_stack = tuple(call_stack)
  nargs = (0 if consts is not None else len(jaxpr.constvars)) + len(jaxpr.invars)
  attrs = list(arg_attrs) if arg_attrs is not None else [None] * nargs
  if donated is not None:
    for i, d in enumerate(donated):
      if d:
        attrs[i] = ", ".join(filter(None, [attrs[i], "jax.buffer_donor = true"]))
  with bound_axes(module.axis_env):
    main = lower_jaxpr_to_fun(module, "main", jaxpr, public=True, arg_attrs=attrs,
                              result_attrs=result_attrs, consts=consts, arg_locs=arg_locs)
  funcs = "\n".join([*module.extra_ops, main, *module.funcs])
  if module.mesh:
    axes = ", ".join(f'"{n}"={s}' for n, s in module.mesh)
    funcs = f"  sdy.mesh @mesh = <[{axes}]>\n{funcs}"
  text = (f"module @{module.name} attributes {{mhlo.num_partitions = "
          f"{module.num_partitions} : i32, mhlo.num_replicas = {module.num_replicas} : i32}} "
          f"{{\n{funcs}\n}} loc(unknown)\n")
  if module.host_callbacks:
    return ModuleText(text, module.host_callbacks)
  return text


class ModuleText(str):
  """StableHLO module text whose host-callback custom calls index `host_callbacks` (the
  callables compile hands to the runtime). Plain `str` when a module has none."""

  def __new__(cls, text: str, host_callbacks: Sequence[Callable]):
    self = super().__new__(cls, text)
    self.host_callbacks = tuple(host_callbacks)
    return self
