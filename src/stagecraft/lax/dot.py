"""`dot_general`: tensor contraction with batch dimensions, and its wrapper `dot`.

Params follow JAX's `lax.dot_general` (JAX 0.10): `dimension_numbers =
((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))`, `precision` (None, a pair
of `Precision`, a `DotAlgorithmPreset` or a `DotAlgorithm`) and `preferred_element_type`
(None or a dtype). A dot algorithm (StableHLO's `dot_general` `algorithm` attribute) names
the operand and accumulation dtypes: the lowering converts the operands to them and the
product back to the result dtype, as JAX's `_handle_dot_precision` does. The result has the batch
dimensions first, then the free dimensions of `lhs`, then those of `rhs`.

Dtypes follow JAX, which follows XLA's shape inference (`primitive_util::HigherPrecisionType`):
operands may differ in dtype; the result takes the more precise one (complex over real,
then more exponent bits, more mantissa bits, more bits, signed over unsigned), and operands
of equally ranked but different dtypes are an error. `preferred_element_type` then sets the
result dtype, which must not be narrower than that for integer/bool results. Mixed operands
are converted to the result dtype before the dot, as JAX does on CPU and GPU.
"""
from __future__ import annotations

import enum
import json
from typing import Any, NamedTuple, Sequence, Union

import ml_dtypes
import numpy as np

from stagecraft import core, dtypes, sharding
from stagecraft.config import config
from stagecraft.core import Primitive, ShapedArray, get_aval
from stagecraft.lax.elementwise import convert_element_type, mul
from stagecraft.lax.shape import broadcast_in_dim, full, reshape, transpose
from stagecraft.interpreters import ad, batching, lowering, partial_eval as pe

__all__ = ["Precision", "PrecisionLike", "DotAlgorithm", "DotAlgorithmPreset",
           "DotDimensionNumbers", "dot_general_p", "dot_general", "dot", "batch_matmul",
           "scaled_dot_p", "scaled_dot", "scaled_matmul_p", "scaled_matmul_wrapper_p"]


class Precision(enum.Enum):
  """Matmul precision of one operand (JAX's `lax.Precision`): on TPUs and GPUs with
  TensorFloat-32, DEFAULT is fastest (one bf16 pass), HIGH uses 3 passes, HIGHEST full f32.
  Strings: 'default'/'fastest'/'bfloat16', 'high'/'bfloat16_3x'/'tensorfloat32',
  'highest'/'float32'."""
  DEFAULT = 0
  HIGH = 1
  HIGHEST = 2

  @classmethod
  def _missing_(cls, value):
    # `Precision('highest')`: the strings name members too (JAX's lookup by string)
    return _precision_strings.get(value)

  def __repr__(self):
    return f"Precision.{self.name}"

  def __str__(self):
    # the bare name, as JAX's `str(lax.Precision.HIGH) == 'HIGH'` (haiku's tests match it)
    return self.name


_precision_strings = {
    "highest": Precision.HIGHEST, "float32": Precision.HIGHEST,
    "high": Precision.HIGH, "bfloat16_3x": Precision.HIGH, "tensorfloat32": Precision.HIGH,
    "default": Precision.DEFAULT, "bfloat16": Precision.DEFAULT, "fastest": Precision.DEFAULT,
}


class DotAlgorithm(NamedTuple):
  """How a dot product computes (JAX's `lax.DotAlgorithm`, StableHLO's `dot_algorithm`):
  the dtypes the operands are rounded to, the accumulation dtype, how many components each
  operand is split into and how many primitive products emulate the result, and whether a
  lower-precision accumulation is allowed for some steps. Pass it as `precision=` of
  `dot`/`dot_general`/`jnp.matmul`/`jnp.einsum`.

  Support is per platform: the CPU backend accepts only the presets listed in
  `DotAlgorithmPreset`'s docstring, so lowering a `DotAlgorithm` for CPU raises
  ValueError (as JAX does); GPUs accept more.

  Attributes:
    lhs_precision_type, rhs_precision_type: dtype-likes the operands are converted to.
    accumulation_type: dtype-like of the product's accumulator (the result is converted
      to the primitive's result dtype afterwards).
    lhs_component_count, rhs_component_count, num_primitive_operations: ints >= 1.
    allow_imprecise_accumulation: bool.
  """
  lhs_precision_type: Any
  rhs_precision_type: Any
  accumulation_type: Any
  lhs_component_count: int = 1
  rhs_component_count: int = 1
  num_primitive_operations: int = 1
  allow_imprecise_accumulation: bool = False

  def _compute_types(self, lhs_dtype, rhs_dtype, out_dtype):
    del lhs_dtype, rhs_dtype, out_dtype
    return (np.dtype(self.lhs_precision_type), np.dtype(self.rhs_precision_type),
            np.dtype(self.accumulation_type))

  def _attr(self, lhs_dtype, rhs_dtype) -> str:
    del lhs_dtype, rhs_dtype
    return _algorithm_attr(np.dtype(self.lhs_precision_type),
                           np.dtype(self.rhs_precision_type),
                           np.dtype(self.accumulation_type), self.lhs_component_count,
                           self.rhs_component_count, self.num_primitive_operations,
                           self.allow_imprecise_accumulation)


_F8_NAMES = ("float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
             "float8_e5m2fnuz", "float8_e3m4", "float8_e4m3", "float8_e8m0fnu")


def _f8_dtypes() -> tuple[np.dtype, ...]:
  import ml_dtypes
  return tuple(np.dtype(getattr(ml_dtypes, n)) for n in _F8_NAMES if hasattr(ml_dtypes, n))


class DotAlgorithmPreset(enum.Enum):
  """Named dot algorithms (JAX's `lax.DotAlgorithmPreset`), `LHS_RHS_ACCUM`: the operand
  dtypes and the accumulation dtype; `_X3`/`_X6`/`_X9` emulate higher precision with 3, 6
  or 9 products; `ANY_F8` takes any float8 operands; `_ANY` accumulates in
  `preferred_element_type`; `FAST_ACCUM` allows imprecise accumulation. Pass a member, or
  its name as a string, as `precision=`.

  Operands of another dtype are converted before the product (e.g. f32 operands with
  F16_F16_F32 become f16), and the product is converted back to the result dtype, which
  stays what it would be without the algorithm.

  On CPU only DEFAULT, F16_F16_F16, F32_F32_F32, F64_F64_F64, BF16_BF16_F32,
  BF16_BF16_F32_X3 and BF16_BF16_F32_X6 lower; the others raise ValueError "The precision
  '...' is not supported by dot_general on CPU" when lowered (as JAX).
  """
  DEFAULT = enum.auto()
  ANY_F8_ANY_F8_F32 = enum.auto()
  ANY_F8_ANY_F8_F32_FAST_ACCUM = enum.auto()
  ANY_F8_ANY_F8_ANY = enum.auto()
  ANY_F8_ANY_F8_ANY_FAST_ACCUM = enum.auto()
  F16_F16_F16 = enum.auto()
  F16_F16_F32 = enum.auto()
  BF16_BF16_BF16 = enum.auto()
  BF16_BF16_F32 = enum.auto()
  BF16_BF16_F32_X3 = enum.auto()
  BF16_BF16_F32_X6 = enum.auto()
  BF16_BF16_F32_X9 = enum.auto()
  TF32_TF32_F32 = enum.auto()
  TF32_TF32_F32_X3 = enum.auto()
  F32_F32_F32 = enum.auto()
  F64_F64_F64 = enum.auto()

  def __repr__(self):
    return f"DotAlgorithmPreset.{self.name}"

  def __str__(self):
    return self.name

  @property
  def supported_lhs_types(self) -> tuple[np.dtype, ...] | None:
    """The operand dtypes the algorithm takes as they are (None: any); another dtype is
    converted to the first of them."""
    n = self.name
    if n == "DEFAULT" or n.startswith("ANY_F8"):
      return None
    if n.startswith("F16_"):
      return (np.dtype(np.float16),)
    if n in ("BF16_BF16_BF16", "BF16_BF16_F32"):
      return (np.dtype(dtypes.bfloat16), np.dtype(np.float32))
    if n == "F64_F64_F64":
      return (np.dtype(np.float64),)
    return (np.dtype(np.float32),)

  @property
  def supported_rhs_types(self) -> tuple[np.dtype, ...] | None:
    """As `supported_lhs_types`."""
    return self.supported_lhs_types

  @property
  def accumulation_type(self) -> np.dtype | None:
    """The accumulator's dtype (None: the result dtype decides)."""
    n = self.name
    if n == "DEFAULT" or n.startswith("ANY_F8_ANY_F8_ANY"):
      return None
    return np.dtype({"F16_F16_F16": np.float16, "BF16_BF16_BF16": dtypes.bfloat16,
                     "F64_F64_F64": np.float64}.get(n, np.float32))

  def supported_output_types(self, lhs_dtype, rhs_dtype) -> tuple[np.dtype, ...] | None:
    """The accumulation dtypes possible for these operand dtypes (None: any); the first
    is used when the result dtype is not among them."""
    n = self.name
    if n.startswith("ANY_F8_ANY_F8_F32"):
      import ml_dtypes
      return (np.dtype(np.float32), np.dtype(np.float16), np.dtype(dtypes.bfloat16),
              *(np.dtype(getattr(ml_dtypes, n)) for n in (
                  "float8_e4m3fn", "float8_e5m2", "float8_e5m2fnuz", "float8_e4m3fnuz",
                  "float8_e4m3b11fnuz")))
    if n in ("F16_F16_F32", "BF16_BF16_F32"):
      low = np.dtype(np.float16 if n == "F16_F16_F32" else dtypes.bfloat16)
      if dtypes.promote_types(lhs_dtype, rhs_dtype) == low:
        return (np.dtype(np.float32), low)
      return (np.dtype(np.float32),)
    acc = self.accumulation_type
    return None if acc is None else (acc,)

  def _compute_types(self, lhs_dtype, rhs_dtype, out_dtype):
    def pick(dt, supported):
      return dt if supported is None or np.dtype(dt) in supported else supported[0]
    lhs = pick(lhs_dtype, self.supported_lhs_types)
    rhs = pick(rhs_dtype, self.supported_rhs_types)
    return lhs, rhs, pick(out_dtype, self.supported_output_types(lhs, rhs))

  def _attr(self, lhs_dtype, rhs_dtype) -> str | None:
    n = self.name
    if n == "DEFAULT":
      return None
    if n.startswith("ANY_F8"):
      f8 = _f8_dtypes()
      if lhs_dtype not in f8 or rhs_dtype not in f8:
        raise ValueError(f"The dot algorithm '{self}' requires both inputs to have float8 "
                         f"dtypes. Got {lhs_dtype} and {rhs_dtype} instead.")
      return _algorithm_attr(lhs_dtype, rhs_dtype, np.dtype(np.float32), 1, 1, 1,
                             n == "ANY_F8_ANY_F8_F32_FAST_ACCUM")
    parts = n.split("_")
    types = {"F16": "f16", "BF16": "bf16", "TF32": "tf32", "F32": "f32", "F64": "f64"}
    ops = int(parts[3][1:]) if len(parts) == 4 else 1
    return _algorithm_attr(types[parts[0]], types[parts[1]], types[parts[2]], 1, 1, ops, False)


def _algorithm_attr(lhs, rhs, acc, lhs_count, rhs_count, ops, imprecise) -> str:
  """`#stablehlo.dot_algorithm<...>`; the types are dtypes or MLIR type names."""
  def t(x):
    return x if isinstance(x, str) else lowering.elt_type(np.dtype(x))
  return (f"#stablehlo.dot_algorithm<lhs_precision_type = {t(lhs)}, rhs_precision_type = "
          f"{t(rhs)}, accumulation_type = {t(acc)}, lhs_component_count = {lhs_count}, "
          f"rhs_component_count = {rhs_count}, num_primitive_operations = {ops}, "
          f"allow_imprecise_accumulation = {str(bool(imprecise)).lower()}>")


#: The presets XLA's CPU backend lowers (it ignores the others silently; JAX refuses them).
_CPU_ALGORITHMS = frozenset({
    DotAlgorithmPreset.DEFAULT, DotAlgorithmPreset.F16_F16_F16, DotAlgorithmPreset.F32_F32_F32,
    DotAlgorithmPreset.F64_F64_F64, DotAlgorithmPreset.BF16_BF16_F32,
    DotAlgorithmPreset.BF16_BF16_F32_X3, DotAlgorithmPreset.BF16_BF16_F32_X6})


def _one_precision(p: Any) -> Precision | None:
  if isinstance(p, Precision):
    return p
  if isinstance(p, str):
    return _precision_strings.get(p)
  if isinstance(p, enum.Enum) and type(p).__name__ == "Precision" \
      and p.name in Precision.__members__:   # e.g. JAX's lax.Precision
    return Precision[p.name]
  return None


def _foreign_algorithm(p: Any) -> Any:
  """JAX's own DotAlgorithmPreset / DotAlgorithm objects as ours (None: not one)."""
  if isinstance(p, enum.Enum) and type(p).__name__ == "DotAlgorithmPreset":
    return DotAlgorithmPreset[p.name]
  if type(p).__name__ == "DotAlgorithm" and hasattr(p, "_asdict"):
    return DotAlgorithm(**p._asdict())
  return None


def canonicalize_precision(precision: Any):
  """`precision` as the hashable param: None, a pair (lhs, rhs) of `Precision`, a
  `DotAlgorithmPreset` or a `DotAlgorithm` (JAX's `canonicalize_precision`).

  None takes the config option `default_matmul_precision` (`stagecraft.default_matmul_precision`
  / `jax_default_matmul_precision`) when it is set.

  Raises:
    ValueError: for anything but None, a `Precision`, one of its strings, a pair of them, a
      `DotAlgorithmPreset` or its name, or a `DotAlgorithm` (JAX's message).
  """
  if precision is None:
    default = config.default_matmul_precision
    if default is None:
      return None
    try:
      return canonicalize_precision(default)
    except ValueError:
      raise ValueError(f"jax_default_matmul_precision flag must be set to None, a value in "
                       f"{list(_precision_strings) + [None]}, or the name of a "
                       f"lax.DotAlgorithmPreset, but got {default}") from None
  if isinstance(precision, (DotAlgorithm, DotAlgorithmPreset)):
    return precision
  foreign = _foreign_algorithm(precision)
  if foreign is not None:
    return foreign
  if isinstance(precision, str) and precision not in _precision_strings \
      and precision in DotAlgorithmPreset.__members__:
    return DotAlgorithmPreset[precision]
  p = _one_precision(precision)
  if p is not None:
    return (p, p)
  if isinstance(precision, (tuple, list)) and len(precision) == 2:
    pair = tuple(_one_precision(q) for q in precision)
    if None not in pair:
      return pair
  raise ValueError("Precision argument must be one of:\n- None,\n- a string in "
                   f"{list(_precision_strings) + [None]},\n- a lax.Precision value,\n- a "
                   "tuple of two lax.Precision values or strings,\n- a "
                   "lax.DotAlgorithmPreset or the name of one of these presets, or\n- a "
                   f"lax.DotAlgorithm value;\nbut got {precision}.")


def precision_config(precision) -> tuple[Precision, Precision]:
  """The (lhs, rhs) `Precision` pair a lowering writes into `precision_config`: DEFAULT for
  None and for dot algorithms (which are lowered as an `algorithm` attribute instead)."""
  if precision is None or isinstance(precision, (DotAlgorithm, DotAlgorithmPreset)):
    return (Precision.DEFAULT, Precision.DEFAULT)
  return precision


# ---------------------------------------------------------------------------
# dot_general


def _type_properties(dt: np.dtype):
  """XLA's HigherPrecisionType order: complex, exponent bits, mantissa bits, bit width,
  signedness."""
  real = np.dtype(np.float32 if dt == dtypes.complex64 else np.float64) \
      if dtypes.is_complex(dt) else dt
  fl = dtypes.is_float(real)
  return (dtypes.is_complex(dt), dtypes.finfo(real).maxexp if fl else -1,
          dtypes.finfo(real).nmant if fl else -1, _bit_width(real),
          not dtypes.is_unsigned(real))


def _bit_width(dt: np.dtype) -> int:
  if dt == dtypes.bool_:
    return 1
  if dtypes.is_complex(dt):
    return dtypes.finfo(dt).bits
  return dt.itemsize * 8


def _dot_general_dtype(lhs: ShapedArray, rhs: ShapedArray, preferred,
                       check_bit_width: bool = True) -> np.dtype:
  lp, rp = _type_properties(lhs.dtype), _type_properties(rhs.dtype)
  if lp > rp:
    out = lhs.dtype
  elif rp > lp:
    out = rhs.dtype
  elif lhs.dtype != rhs.dtype:
    raise TypeError(f"lax.dot_general argument type error: {lhs.dtype.name}, "
                    f"{rhs.dtype.name}. Convert one operand with convert_element_type.")
  else:
    out = lhs.dtype
  if preferred is None or preferred == out:
    return out
  if check_bit_width and not dtypes.is_float(out) and _bit_width(preferred) < _bit_width(out):
    raise TypeError(f"`preferred_element_type` must not be narrower than the original type, "
                    f"got preferred_element_type of {preferred.name} for result type of "
                    f"{out.name}.")
  return preferred


def _check_dims(side: str, aval: ShapedArray, contracting, batch) -> None:
  if not all(0 <= d < aval.ndim for d in (*contracting, *batch)):
    raise TypeError(f"dot_general requires {side} dimension numbers to be nonnegative and less "
                    f"than the number of axes of the {side} value, got {side}_batch of "
                    f"{batch} and {side}_contracting of {contracting} for {side} of rank "
                    f"{aval.ndim}")
  if len(set(batch)) != len(batch):
    raise TypeError(f"dot_general requires {side} batch dimensions to be distinct, got "
                    f"{side}_batch {batch}.")
  if len(set(contracting)) != len(contracting):
    raise TypeError(f"dot_general requires {side} contracting dimensions to be distinct, got "
                    f"{side}_contracting {contracting}.")
  if set(batch) & set(contracting):
    raise TypeError(f"dot_general requires {side} batch dimensions to be disjoint from "
                    f"contracting dimensions, got {side}_batch {batch} and {side}_contracting "
                    f"{contracting}.")


def _free_dims(ndim: int, contracting, batch) -> list[int]:
  return [d for d in range(ndim) if d not in contracting and d not in batch]


def _dot_general_abstract_eval(lhs: ShapedArray, rhs: ShapedArray, *, dimension_numbers,
                               precision, preferred_element_type, out_sharding=None):
  (lc, rc), (lb, rb) = dimension_numbers
  _check_dims("lhs", lhs, lc, lb)
  _check_dims("rhs", rhs, rc, rb)
  if len(lb) != len(rb):
    raise TypeError(f"dot_general requires equal numbers of lhs_batch and rhs_batch "
                    f"dimensions, got lhs_batch {lb} and rhs_batch {rb}.")
  lbs, rbs = tuple(lhs.shape[d] for d in lb), tuple(rhs.shape[d] for d in rb)
  if lbs != rbs:
    raise TypeError(f"dot_general requires lhs batch dimensions and rhs batch dimensions to "
                    f"have the same shape, got {lbs} and {rbs}.")
  lcs, rcs = tuple(lhs.shape[d] for d in lc), tuple(rhs.shape[d] for d in rc)
  if lcs != rcs:
    raise TypeError(f"dot_general requires contracting dimensions to have the same shape, "
                    f"got {lcs} and {rcs}.")
  # NB: as JAX, an explicit dot algorithm lifts the check that an integer result is not
  # narrowed by `preferred_element_type`.
  dtype = _dot_general_dtype(lhs, rhs, preferred_element_type,
                             not isinstance(precision, (DotAlgorithm, DotAlgorithmPreset)))
  shape = (*lbs, *(lhs.shape[d] for d in _free_dims(lhs.ndim, lc, lb)),
           *(rhs.shape[d] for d in _free_dims(rhs.ndim, rc, rb)))
  # NB: weakly typed when both operands are (JAX's standard weak type rule). The type's
  # sharding: `out_sharding`, else the sharding rule's (run by core when an operand is split).
  return ShapedArray(tuple(shape), dtype, lhs.weak_type and rhs.weak_type,
                     None if out_sharding is None else
                     sharding.type_sharding(out_sharding, len(shape)))


def dot_general_aval(lhs: ShapedArray, rhs: ShapedArray, dimension_numbers, precision=None,
                     preferred_element_type=None) -> ShapedArray:
  """The result aval of `dot_general` on these avals (for the dot-like primitives built on
  it, e.g. `ragged_dot_general`); raises dot_general's TypeErrors."""
  return _dot_general_abstract_eval(lhs, rhs, dimension_numbers=dimension_numbers,
                                    precision=precision,
                                    preferred_element_type=preferred_element_type)


def _dot_general_sharding_rule(lhs, rhs, *, dimension_numbers, out_sharding=None,
                               preferred_element_type=None, **_):
  """JAX's dot_general sharding rule: batch dimensions (whose entries must agree), then the
  free dimensions of lhs and of rhs, keep their mesh axes; a contracting dimension split on
  one side only is all-gathered; split on both sides the result is ambiguous and needs
  `out_sharding`. A result naming one mesh axis on two dimensions (`a @ a.T` with `a` split
  on its rows) is rejected with JAX's ShardingTypeError "illegally sharded result"."""
  lm = lhs._sharding.mesh if lhs._sharding is not None else None
  rm = rhs._sharding.mesh if rhs._sharding is not None else None
  if lm is not None and rm is not None and lm != rm:
    raise sharding.ShardingTypeError(f"Mesh of both lhs and rhs should match. Got lhs: {lm} "
                                     f"and rhs: {rm}")
  if out_sharding is not None:
    ndim = len(_dot_general_abstract_eval(lhs, rhs, dimension_numbers=dimension_numbers,
                                          precision=None, preferred_element_type=None).shape)
    return sharding.type_sharding(out_sharding, ndim)
  ls = sharding.spec_entries(lhs._sharding, lhs.ndim)
  rs = sharding.spec_entries(rhs._sharding, rhs.ndim)
  (lc, rc), (lb, rb) = dimension_numbers
  lbs, rbs = tuple(ls[d] for d in lb), tuple(rs[d] for d in rb)
  if any(a is not None and b is not None and a != b for a, b in zip(lbs, rbs)):
    raise sharding.ShardingTypeError(
        f"dot_general requires lhs batch dimensions and rhs batch dimensions to have the "
        f"consistent sharding, got {lbs} and {rbs}.")
  lcs, rcs = tuple(ls[d] for d in lc), tuple(rs[d] for d in rc)
  if any(a is not None and b is not None and a != b for a, b in zip(lcs, rcs)):
    raise sharding.ShardingTypeError(
        f"dot_general requires contracting dimensions to have consistent sharding, got "
        f"{lcs} and {rcs}.")
  if any(a is not None and b is not None for a, b in zip(lcs, rcs)):
    raise sharding.ShardingTypeError(
        f"Contracting dimensions are sharded and it is ambiguous how the output should be "
        f"sharded. Please specify the output sharding via the `out_sharding` parameter. Got "
        f"lhs_contracting_spec={lcs} and rhs_contracting_spec={rcs}")
  spec = (*lbs, *(ls[d] for d in _free_dims(lhs.ndim, lc, lb)),
          *(rs[d] for d in _free_dims(rhs.ndim, rc, rb)))
  if all(e is None for e in spec):
    return None
  used = [n for e in spec if e is not None for n in (e if isinstance(e, tuple) else (e,))]
  if len(used) != len(set(used)):
    out = _dot_general_abstract_eval(lhs, rhs, dimension_numbers=dimension_numbers,
                                     precision=None,
                                     preferred_element_type=preferred_element_type)
    raise sharding.ShardingTypeError(
        f"dot_general operation with inputs: {lhs.str_short()}, {rhs.str_short()} produces "
        f"an illegally sharded result: {_typed_str(out, spec)}")
  return sharding.NamedSharding(lm if lm is not None else rm, sharding.PartitionSpec(*spec))


def _dot_general_ur_rule(lhs, rhs, *, dimension_numbers, out_sharding=None, **_):
  """JAX's dot_general rule for unreduced axes: no operand may be unreduced; an
  `out_sharding` unreduced along mesh axes needs both contracting sides split alike, over
  exactly those axes (each device's product is then a partial sum). Reduced axes are not
  propagated (as JAX's)."""
  lu = lhs._sharding.spec.unreduced if lhs._sharding is not None else frozenset()
  ru = rhs._sharding.spec.unreduced if rhs._sharding is not None else frozenset()
  if lu or ru:
    raise sharding.ShardingTypeError(
        f"lhs or rhs passed to dot_general cannot be unreduced. Got lhs={lhs!r} and "
        f"rhs={rhs!r}")
  if out_sharding is None or not out_sharding.spec.unreduced:
    return frozenset(), frozenset()
  (lc, rc), _ = dimension_numbers
  ls = sharding.spec_entries(lhs._sharding, lhs.ndim)
  rs = sharding.spec_entries(rhs._sharding, rhs.ndim)
  lcs, rcs = tuple(ls[d] for d in lc), tuple(rs[d] for d in rc)
  if lcs != rcs:
    raise sharding.ShardingTypeError(
        f"lhs and rhs contracting dims should be sharded identically when out_sharding "
        f"provided to dot_general mentions unreduced_axes. Got lhs_contracting_spec={lcs}, "
        f"rhs_contracting_spec={rcs}")
  names = frozenset(n for e in lcs if e is not None
                    for n in (e if isinstance(e, tuple) else (e,)))
  if out_sharding.spec.unreduced != names:
    raise sharding.ShardingTypeError(
        f"out_sharding's unreduced axes should be equal to the contracting specs. Got "
        f"unreduced axes={out_sharding.spec.unreduced} and contracting spec={lcs}")
  return out_sharding.spec.unreduced, frozenset()


def _typed_str(aval: ShapedArray, spec) -> str:
  """`f32[8@x,8@x]`: aval's short type with the spec entries `spec` (which need not form a
  valid NamedSharding), as JAX prints it."""
  dims = []
  for d, e in zip(aval.shape, spec):
    names = () if e is None else e if isinstance(e, tuple) else (e,)
    dims.append(str(d) if not names else f"{d}@{names[0]}" if len(names) == 1 else
                f"{d}@({','.join(map(str, names))})")
  return f"{dtypes.short_name(aval.dtype)}[{','.join(dims)}]"


def _dims_attr(dimension_numbers) -> str:
  (lc, rc), (lb, rb) = dimension_numbers
  fields = [("lhs_batching_dimensions", lb), ("rhs_batching_dimensions", rb),
            ("lhs_contracting_dimensions", lc), ("rhs_contracting_dimensions", rc)]
  body = ", ".join(f"{k} = [{', '.join(map(str, v))}]" for k, v in fields if v)
  return f"#stablehlo.dot<{body}>"


def _convert(ctx, x: str, aval: ShapedArray, dtype) -> tuple[str, ShapedArray]:
  if dtype is None or aval.dtype == np.dtype(dtype):
    return x, aval
  out = aval.update(dtype=np.dtype(dtype))
  return ctx.op("stablehlo.convert", [x], [out], operand_avals=[aval])[0], out


def dot_precision_operands(ctx, lhs: str, rhs: str, precision, what: str = "dot_general"):
  """The operands, their avals, the accumulation aval and the extra attributes of a dot
  lowering (JAX's `_handle_dot_precision`), from `ctx.avals_in[:2]` and `ctx.avals_out[0]`.

  With a dot algorithm the operands are converted to its operand dtypes and the product is
  accumulated in its accumulation dtype (the caller converts back to the result dtype);
  otherwise operands of different dtypes are converted to the result dtype, which XLA's
  CPU/GPU code generators want.

  Raises:
    ValueError: on CPU for an algorithm XLA's CPU backend does not lower (JAX's message).
  """
  la, ra = ctx.avals_in[0], ctx.avals_in[1]
  out = ctx.avals_out[0]
  acc, attrs = out, ""
  if isinstance(precision, (DotAlgorithm, DotAlgorithmPreset)):
    if ctx.module.platform == "cpu" and precision not in _CPU_ALGORITHMS:
      raise ValueError(f"The precision '{precision}' is not supported by {what} on CPU")
    lt, rt, at = precision._compute_types(la.dtype, ra.dtype, out.dtype)
    lhs, la = _convert(ctx, lhs, la, lt)
    rhs, ra = _convert(ctx, rhs, ra, rt)
    if at is not None:
      acc = out.update(dtype=np.dtype(at))
    if precision != DotAlgorithmPreset.DEFAULT:
      attrs = f", algorithm = {precision._attr(la.dtype, ra.dtype)}"
  elif la.dtype != ra.dtype:
    lhs, la = _convert(ctx, lhs, la, out.dtype)
    rhs, ra = _convert(ctx, rhs, ra, out.dtype)
  return lhs, rhs, la, ra, acc, attrs


def _dot_general_lowering(ctx, lhs, rhs, *, dimension_numbers, precision,
                          preferred_element_type, out_sharding=None):
  out = ctx.avals_out[0]
  lhs, rhs, la, ra, acc, extra = dot_precision_operands(ctx, lhs, rhs, precision)
  p = precision_config(precision)
  attrs = (f"dot_dimension_numbers = {_dims_attr(dimension_numbers)}, precision_config = "
           f"[#stablehlo<precision {p[0].name}>, #stablehlo<precision {p[1].name}>]{extra}")
  res = ctx.op("stablehlo.dot_general", [lhs, rhs], [acc], attrs=attrs, operand_avals=[la, ra])
  if acc.dtype != out.dtype:
    res = ctx.op("stablehlo.convert", res, [out], operand_avals=[acc])
  return res


#: ((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch)), as JAX's lax names it.
DotDimensionNumbers = tuple[tuple[Sequence[int], Sequence[int]],
                            tuple[Sequence[int], Sequence[int]]]
#: What `precision=` accepts: None, a Precision or its name, or a pair of them.
PrecisionLike = Union[None, str, "Precision", tuple[str, str], tuple["Precision", "Precision"],
                      "DotAlgorithm", "DotAlgorithmPreset"]


def _ranges_like(*xs):
  """Consecutive index ranges with the lengths of `xs`: ((0..len0), (len0..len0+len1), ...)."""
  start = 0
  for x in xs:
    yield tuple(range(start, start + len(x)))
    start += len(x)


def _dot_general_transpose_lhs(ct, x, y, *, dimension_numbers, precision,
                               preferred_element_type, out_sharding=None, swap_ans=False):
  """JAX's `_dot_general_transpose_lhs`: contract the cotangent with `y` over y's free
  dimensions, keeping the batch dimensions, then permute into x's layout."""
  (x_contract, y_contract), (x_batch, y_batch) = dimension_numbers
  x_aval = x.aval
  x_kept = _free_dims(x_aval.ndim, x_contract, x_batch)
  y_kept = _free_dims(get_aval(y).ndim, y_contract, y_batch)
  if swap_ans:
    ans_batch, ans_y, _ = _ranges_like(x_batch, y_kept, x_kept)
  else:
    ans_batch, _, ans_y = _ranges_like(x_batch, x_kept, y_kept)
  dims = ((ans_y, tuple(y_kept)), (ans_batch, tuple(y_batch)))
  x_contract_sorted_by_y = [x_contract[i] for i in np.argsort(y_contract)]
  unsorted_axes = [*x_batch, *x_kept, *x_contract_sorted_by_y]
  out_axes = tuple(int(i) for i in np.argsort(unsorted_axes))
  params = {}
  ct_s, y_s = getattr(get_aval(ct), "_sharding", None), getattr(get_aval(y), "_sharding", None)
  if x_aval._sharding is not None or ct_s is not None or y_s is not None:
    # NB: as JAX, the cotangent gets x's type (the contraction may be ambiguous otherwise).
    xs = sharding.spec_entries(x_aval._sharding, x_aval.ndim)
    mesh = next(s.mesh for s in (x_aval._sharding, ct_s, y_s) if s is not None)
    # NB: the cotangent of a reduced x is unreduced (and of an unreduced one reduced)
    xspec = (x_aval._sharding.spec if x_aval._sharding is not None
             else sharding.PartitionSpec()).to_ct_spec()
    params["out_sharding"] = sharding.NamedSharding(
        mesh, sharding.PartitionSpec(*[xs[d] for d in unsorted_axes],
                                     unreduced=xspec.unreduced, reduced=xspec.reduced))
  out = dot_general_p.bind(ct, y, dimension_numbers=dims, precision=precision,
                           preferred_element_type=preferred_element_type, **params)
  x_bar = transpose(out, out_axes)
  if get_aval(x_bar).dtype != x_aval.dtype:
    x_bar = convert_element_type(x_bar, x_aval.dtype, x_aval.weak_type)
  return x_bar


def _dot_general_transpose_rhs(ct, x, y, *, dimension_numbers, precision,
                               preferred_element_type, out_sharding=None):
  """JAX's `_dot_general_transpose_rhs`: the lhs rule with the operands swapped."""
  (x_contract, y_contract), (x_batch, y_batch) = dimension_numbers
  swapped = ((y_contract, x_contract), (y_batch, x_batch))
  return _dot_general_transpose_lhs(ct, y, x, dimension_numbers=swapped, precision=precision,
                                    preferred_element_type=preferred_element_type,
                                    swap_ans=True)


def _dot_general_pp_rule(eqn, context):
  # As JAX prints it: params that are None hidden, the out_sharding too (the result's type
  # shows it), dimension numbers as lists.
  params = {k: v for k, v in eqn.params.items() if v is not None and k != "out_sharding"}
  (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
  params["dimension_numbers"] = ((list(lc), list(rc)), (list(lb), list(rb)))
  return sorted(params.items())


dot_general_p = Primitive("dot_general")
dot_general_p.def_abstract_eval(_dot_general_abstract_eval)
core.sharding_rules[dot_general_p] = _dot_general_sharding_rule
core.ur_rules[dot_general_p] = _dot_general_ur_rule
lowering.register_lowering(dot_general_p, _dot_general_lowering)
core.pp_eqn_rules[dot_general_p] = _dot_general_pp_rule
dot_general_p.def_default_params(out_sharding=None)   # NB: as JAX's equations
ad.defbilinear(dot_general_p, _dot_general_transpose_lhs, _dot_general_transpose_rhs)


def _bump_dims(dims, b):
  return tuple(int(d) + (1 if d >= b else 0) for d in dims)


def _dot_general_batch_dim_nums(ndims, batch_dims, dimension_numbers):
  """JAX's `_dot_general_batch_dim_nums`: the dimension numbers of the batched dot and the
  result's batch dim. Both operands batched: their batch dims become a new leading dot batch
  dimension (result dim 0). One operand batched: its batch dim stays a free dimension, so no
  operand is transposed; the result dim is where that free dimension lands."""
  lhs_ndim, rhs_ndim = ndims  # of the batched operands (the unbatched one: its own rank)
  lbd, rbd = batch_dims
  (lc, rc), (lb, rb) = dimension_numbers
  if lbd is not None and rbd is not None:
    lb2 = (lbd,) + _bump_dims(lb, lbd)
    rb2 = (rbd,) + _bump_dims(rb, rbd)
    return ((_bump_dims(lc, lbd), _bump_dims(rc, rbd)), (lb2, rb2)), 0
  if lbd is not None:
    lc2, lb2 = _bump_dims(lc, lbd), _bump_dims(lb, lbd)
    free = _free_dims(lhs_ndim, lc2, lb2)
    return ((lc2, rc), (lb2, rb)), len(lb) + free.index(lbd)
  rc2, rb2 = _bump_dims(rc, rbd), _bump_dims(rb, rbd)
  free = _free_dims(rhs_ndim, rc2, rb2)
  n_lhs_free = lhs_ndim - len(lc) - len(lb)
  return ((lc, rc2), (lb, rb2)), len(lb) + n_lhs_free + free.index(rbd)


def _dot_general_batch_rule(batched_args, batch_dims, *, dimension_numbers, precision,
                            preferred_element_type, out_sharding=None):
  lhs, rhs = batched_args
  dims, out_dim = _dot_general_batch_dim_nums((get_aval(lhs).ndim, get_aval(rhs).ndim),
                                              batch_dims, dimension_numbers)
  params = {}
  if out_sharding is not None:   # the batch dimension is not split
    spec = list(out_sharding.spec)
    spec.insert(out_dim, None)
    params["out_sharding"] = sharding.NamedSharding(out_sharding.mesh,
                                                    sharding.PartitionSpec(*spec))
  out = dot_general_p.bind(lhs, rhs, dimension_numbers=dims, precision=precision,
                           preferred_element_type=preferred_element_type, **params)
  return out, out_dim


batching.primitive_batchers[dot_general_p] = _dot_general_batch_rule


def _index_tuple(name: str, dims: Any) -> tuple[int, ...]:
  if isinstance(dims, (int, np.integer)):
    return (int(dims),)
  try:
    return tuple(int(d) for d in dims)
  except TypeError:
    raise TypeError(f"dot_general: {name} must be a sequence of ints, got {dims!r}.") from None


def _canonicalize_dimension_numbers(dimension_numbers) -> tuple:
  try:
    (lc, rc), (lb, rb) = dimension_numbers
  except (TypeError, ValueError):
    raise TypeError(f"dot_general: dimension_numbers must be ((lhs_contracting, "
                    f"rhs_contracting), (lhs_batch, rhs_batch)), got {dimension_numbers!r}."
                    ) from None
  return ((_index_tuple("lhs_contracting", lc), _index_tuple("rhs_contracting", rc)),
          (_index_tuple("lhs_batch", lb), _index_tuple("rhs_batch", rb)))


def dot_general(lhs: Any, rhs: Any, dimension_numbers: Any, precision: Any = None,
                preferred_element_type: Any = None, out_sharding: Any = None):
  """General tensor contraction (JAX's `lax.dot_general`, StableHLO `dot_general`).

  Args:
    lhs: array `A[*ls]`.
    rhs: array `B[*rs]`.
    dimension_numbers: `((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))`,
      sequences of axis indices in `[0, ndim)` (no negative indices, as in JAX); contracted
      and batch dimensions pair up in order and must have equal sizes.
    precision: None (the `default_matmul_precision` option, if set), a `Precision`, one
      of the strings 'default'/'high'/'highest' (and JAX's aliases), a pair of these for
      (lhs, rhs), or a dot algorithm: a `DotAlgorithmPreset`, its name, or a
      `DotAlgorithm` (see their docstrings for what XLA's CPU backend lowers).
    preferred_element_type: None or a dtype-like (canonicalized) for the result and the
      accumulation.

  Returns:
    Array `T[*batch, *lhs_free, *rhs_free]`: the batch dimensions (sizes from `lhs`), then the
    remaining dimensions of `lhs`, then those of `rhs`, in order. T is the more precise of
    A and B (see the module docstring), or `preferred_element_type`. Weakly typed when both
    operands are.

  Raises:
    TypeError: for out-of-range, repeated or overlapping dimensions, mismatched batch or
      contracting sizes or counts, incompatible dtypes, or a `preferred_element_type`
      narrower than an integer result.
    ValueError: for an invalid `precision`; on CPU, for a dot algorithm XLA's CPU backend
      does not lower (when lowered).

  Examples:
    >>> import numpy as np
    >>> x = np.ones((2, 3, 4), np.float32); y = np.ones((2, 4, 5), np.float32)
    >>> dot_general(x, y, (((2,), (1,)), ((0,), (0,)))).shape   # batched matmul
    (2, 3, 5)
  """
  params = {}
  out_sharding = _out_sharding(out_sharding, lhs, rhs, "lax.dot_general")
  if out_sharding is not None:
    params["out_sharding"] = out_sharding
  pref = (None if preferred_element_type is None
          else dtypes.check_user_dtype(preferred_element_type, "dot"))
  return dot_general_p.bind(lhs, rhs,
                            dimension_numbers=_canonicalize_dimension_numbers(dimension_numbers),
                            precision=canonicalize_precision(precision),
                            preferred_element_type=pref, **params)


def _out_sharding(out_sharding: Any, lhs: Any, rhs: Any, where: str):
  """`out_sharding=` as the primitive's param: a NamedSharding over the abstract mesh (a
  PartitionSpec is over the mesh in context), or None when nothing asks for a sharding
  (no mesh, or an unsplit result of unsplit operands)."""
  if out_sharding is None:
    return None
  if isinstance(out_sharding, sharding.NamedSharding):
    mesh = out_sharding.mesh.abstract_mesh
    spec = out_sharding.spec
  elif isinstance(out_sharding, sharding.PartitionSpec):
    spec = out_sharding
    mesh = sharding.get_abstract_mesh()
    if mesh.empty:
      typed = [a._sharding for a in (get_aval(lhs), get_aval(rhs))
               if getattr(a, "_sharding", None) is not None]
      mesh = typed[0].mesh if typed else None
  else:
    raise TypeError(f"{where}: out_sharding must be None, a PartitionSpec or a "
                    f"NamedSharding, got {type(out_sharding).__name__}")
  if mesh is None or mesh.empty or sharding.AxisType.Explicit not in mesh.axis_types:
    sharding.check_out_sharding(out_sharding, where)   # NB: only an unsplit one is accepted
    return None
  return sharding.NamedSharding(mesh, spec)


def dot(lhs: Any, rhs: Any, *, dimension_numbers: Any = None, precision: Any = None,
        preferred_element_type: Any = None, out_sharding: Any = None):
  """Vector/matrix product (JAX's `lax.dot`): contracts the last axis of `lhs` with the
  first axis of `rhs`, for operands of rank 1 or 2.

  Args:
    lhs: array `A[k]` or `A[m,k]`.
    rhs: array `B[k]` or `B[k,n]`.
    precision: as for `dot_general`.
    preferred_element_type: as for `dot_general`.
    out_sharding: as for `dot_general`.
    dimension_numbers: None (the simple products above), or `dot_general`'s dimension
      numbers for any other contraction (JAX's `lax.dot` takes them).

  Returns:
    `T[]` (vector . vector), `T[m]`, `T[n]` or `T[m,n]`; T as for `dot_general`.

  Raises:
    ValueError: without dimension_numbers, if a rank is not 1 or 2 or the contracted sizes
      differ (JAX's words).
    TypeError: as for `dot_general`.
  """
  if dimension_numbers is None:
    ls, rs = get_aval(lhs).shape, get_aval(rhs).shape
    if not (1 <= len(ls) <= 2 and 1 <= len(rs) <= 2 and ls[-1] == rs[0]):
      raise ValueError(f"jax.lax.dot: dimension_numbers must be specified when not performing "
                       f"simple un-batched matrix-matrix, matrix-vector, or vector-vector "
                       f"products; got lhs_shape={ls} rhs_shape={rs}")
    dimension_numbers = (((len(ls) - 1,), (0,)), ((), ()))
  return dot_general(lhs, rhs, dimension_numbers, precision, preferred_element_type,
                     out_sharding=out_sharding)


def batch_matmul(lhs: Any, rhs: Any, precision: Any = None,
                 preferred_element_type: Any = None):
  """Batched matrix product (JAX's `lax.batch_matmul`): `A[*b,m,k] @ B[*b,k,n] -> T[*b,m,n]`.

  Args:
    lhs: array `A[*b,m,k]`, rank at least 2.
    rhs: array `B[*b,k,n]`, of the same rank as `lhs`, with equal batch sizes `b`.
    precision: as for `dot_general`.
    preferred_element_type: as for `dot_general`.

  Returns:
    `T[*b,m,n]`; T as for `dot_general`.

  Raises:
    ValueError: if the ranks differ or are below 2.
    TypeError: as for `dot_general` (mismatched batch or contracted sizes, dtypes).
  """
  ln, rn = get_aval(lhs).ndim, get_aval(rhs).ndim
  if ln < 2 or ln != rn:
    raise ValueError(f"batch_matmul requires operands of equal rank >= 2, got ranks {ln} "
                     f"and {rn}.")
  batch = tuple(range(ln - 2))
  return dot_general(lhs, rhs, (((ln - 1,), (ln - 2,)), (batch, batch)), precision,
                     preferred_element_type)


# ---------------------------------------------------------------------------
# scaled_dot: a block-scaled contraction `(lhs * lhs_scale) @ (rhs * rhs_scale)` (JAX's
# `lax.scaled_dot`), each scale repeated along the contracting dimensions to its operand's
# size. Lowered as JAX's: a `stablehlo.composite "xla.scaled_dot"` whose decomposition
# (a private function `@xla.scaled_dot`) converts operands and scales to bfloat16, multiplies
# and contracts with `dot_general`, so every platform runs it (XLA may match the composite).


scaled_dot_p = Primitive("scaled_dot")


def _check_scale(side: str, operand, scale, contracting) -> None:
  for i, size in enumerate(operand.shape):
    if i in contracting:
      if size % scale.shape[i]:
        raise TypeError(f"{side} contracting dim {i} of size {size} must be divisible by its "
                        f"scale's dim size {scale.shape[i]}.")
      ratio = size // scale.shape[i]
      if ratio < 2:
        raise TypeError(f"The ratio of {side} contracting dim {i} to its scale's dim size "
                        f"({ratio}) must be at least 2.")
    elif scale.shape[i] != size:
      raise TypeError(f"{side} dim {i} of size {size} does not match scale dim size "
                      f"{scale.shape[i]}.")


def _scaled_dot_abstract_eval(lhs, rhs, lhs_scale, rhs_scale, *, dimension_numbers,
                              preferred_element_type=None):
  (lc, rc), (lb, rb) = dimension_numbers
  ranks = [len(lhs.shape), len(rhs.shape), len(lhs_scale.shape), len(rhs_scale.shape)]
  if len(set(ranks)) != 1:
    raise TypeError(f"All input tensors must have the same rank. Got lhs rank: {ranks[0]} "
                    f"rhs rank: {ranks[1]} lhs_scale rank: {ranks[2]} rhs_scale rank: "
                    f"{ranks[3]}.")
  if len(lb) != len(rb):
    raise TypeError(f"LHS and RHS must have the same number of batch dimensions, got "
                    f"{len(lb)} and {len(rb)}.")
  if len(lc) != len(rc):
    raise TypeError(f"LHS and RHS must have the same number of contracting dimensions, got "
                    f"{len(lc)} and {len(rc)}.")
  for i, j in zip(lb, rb):
    if len({lhs.shape[i], rhs.shape[j], lhs_scale.shape[i], rhs_scale.shape[j]}) != 1:
      raise TypeError(f"All input tensors must have the same batch dimension size for batch "
                      f"dims ({i}, {j}).")
  for i, j in zip(lc, rc):
    if lhs.shape[i] != rhs.shape[j]:
      raise TypeError(f"LHS contracting dim {i} of size {lhs.shape[i]} does not match RHS "
                      f"contracting dim {j} of size {rhs.shape[j]}.")
  _check_scale("LHS", lhs, lhs_scale, lc)
  _check_scale("RHS", rhs, rhs_scale, rc)
  lhs_kept = [i for i in range(len(lhs.shape)) if i not in lc and i not in lb]
  rhs_kept = [i for i in range(len(rhs.shape)) if i not in rc and i not in rb]
  shape = tuple([lhs.shape[i] for i in lb] + [lhs.shape[i] for i in lhs_kept] +
                [rhs.shape[i] for i in rhs_kept])
  dtype = dtypes.bfloat16 if preferred_element_type is None else preferred_element_type
  return ShapedArray(shape, dtype)


def _repeat_scale(scale, operand_shape, contracting):
  """`scale` repeated along each contracting dim to the operand's size (JAX's order: a new
  axis after the dim, broadcast, merged)."""
  for i in contracting:
    shape = list(get_aval(scale).shape)
    if shape[i] == operand_shape[i]:
      continue
    expanded = shape[:i + 1] + [1] + shape[i + 1:]
    dims = tuple(d for d in range(len(expanded)) if d != i + 1)
    scale = broadcast_in_dim(scale, tuple(expanded), dims)
    expanded[i + 1] = operand_shape[i] // shape[i]
    scale = broadcast_in_dim(scale, tuple(expanded), tuple(range(len(expanded))))
    shape[i] = operand_shape[i]
    scale = reshape(scale, tuple(shape))
  return scale


def _scaled_dot_decomposition(lhs, rhs, lhs_scale, rhs_scale, *, dimension_numbers,
                              preferred_element_type=None):
  (lc, rc), _ = dimension_numbers
  bf16 = dtypes.bfloat16
  lhs_scale = _repeat_scale(lhs_scale, get_aval(lhs).shape, lc)
  lhs = mul(convert_element_type(lhs, bf16), convert_element_type(lhs_scale, bf16))
  rhs_scale = _repeat_scale(rhs_scale, get_aval(rhs).shape, rc)
  rhs = mul(convert_element_type(rhs, bf16), convert_element_type(rhs_scale, bf16))
  return dot_general(lhs, rhs, dimension_numbers,
                     preferred_element_type=preferred_element_type)


def _composite_dims_attr(dimension_numbers) -> str:
  def arr(x):
    return "[" + ", ".join(arr(e) if isinstance(e, (tuple, list)) else str(int(e))
                           for e in x) + "]"
  return arr(dimension_numbers)


def _scaled_dot_lowering(ctx, lhs, rhs, lhs_scale, rhs_scale, *, dimension_numbers,
                         preferred_element_type=None):
  params = dict(dimension_numbers=dimension_numbers,
                preferred_element_type=preferred_element_type)
  jaxpr, consts = pe.trace_to_jaxpr(
      lambda *xs: [_scaled_dot_decomposition(*xs, **params)], ctx.avals_in)
  module = ctx.module
  name = module.unique_func_name("xla.scaled_dot")
  module.funcs.append(lowering.lower_jaxpr_to_fun(module, name, jaxpr, consts=consts))
  out_dtype = lowering.ir_type(ShapedArray((), ctx.avals_out[0].dtype)).split("<")[1][:-1]
  attrs = (f"composite_attributes = {{dimension_numbers = "
           f"{_composite_dims_attr(dimension_numbers)}, preferred_element_type = "
           f"{out_dtype}}}, decomposition = @{name}, name = \"xla.scaled_dot\"")
  return ctx.op("stablehlo.composite", [lhs, rhs, lhs_scale, rhs_scale], attrs=attrs)


def _scaled_dot_batcher(args, dims, *, dimension_numbers, preferred_element_type):
  size = next(get_aval(x).shape[d] for x, d in zip(args, dims) if d is not None)
  args = [batching.bdim_at_front(x, d, size) for x, d in zip(args, dims)]
  (lc, rc), (lb, rb) = dimension_numbers
  shift = lambda ds: tuple(d + 1 for d in ds)
  dn = ((shift(lc), shift(rc)), ((0, *shift(lb)), (0, *shift(rb))))
  return scaled_dot_p.bind(*args, dimension_numbers=dn,
                           preferred_element_type=preferred_element_type), 0


scaled_dot_p.def_abstract_eval(_scaled_dot_abstract_eval)
lowering.register_lowering(scaled_dot_p, _scaled_dot_lowering)
batching.primitive_batchers[scaled_dot_p] = _scaled_dot_batcher


def not_differentiable(name: str):
  """A JVP rule that raises JAX's error for a primitive it has no rule for (called only
  when some tangent is nonzero)."""
  def rule(primals, tangents, **params):
    raise NotImplementedError(f"Differentiation rule for '{name}' not implemented")
  return rule


# NB: as JAX's, scaled_dot is not differentiable.
ad.primitive_jvps[scaled_dot_p] = not_differentiable("scaled_dot")


def _unit_scale(operand, contracting):
  shape = list(get_aval(operand).shape)
  for d in contracting:
    shape[d] = 1
  return convert_element_type(full(tuple(shape), 1.0, dtypes.bfloat16),
                              np.dtype(ml_dtypes.float8_e8m0fnu))


def scaled_dot(lhs: Any, rhs: Any, *, lhs_scale: Any = None, rhs_scale: Any = None,
               dimension_numbers: Any = None, preferred_element_type: Any = None):
  """Block-scaled contraction `(lhs * lhs_scale) @ (rhs * rhs_scale)` (JAX's
  `lax.scaled_dot`; XLA's ScaledDot).

  Each scale has its operand's rank and sizes except along the contracting dimensions, where
  the operand's size is a multiple (at least 2) of the scale's: scale entry `k` applies to
  the `k`-th block of that many elements. Computed in bfloat16: operands and scales are
  converted to bfloat16, multiplied, and contracted by `dot_general` with
  `preferred_element_type`.

  Args:
    lhs, rhs: operands, e.g. float8_e4m3fn `[B, M, K]` and `[B, K, N]`.
    lhs_scale, rhs_scale: the scales (e.g. float8_e8m0fnu `[B, M, K/32]`); None: ones of
      float8_e8m0fnu with size 1 along the contracting dims.
    dimension_numbers: `((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))`; None:
      contract lhs's last dim with rhs's second to last, the leading dims batched.
    preferred_element_type: the result dtype (default bfloat16).

  Returns:
    The contraction: batch dims, then lhs's free dims, then rhs's.

  Raises:
    TypeError: operands of rank 0 or 1 without dimension_numbers; ranks, batch or
      contracting sizes that do not match; scales that do not divide (JAX's messages).
  """
  if dimension_numbers is None:
    nd = len(get_aval(lhs).shape)
    if nd < 2:
      raise TypeError("scaled_dot does not support 0-rank and 1-rank operands.")
    dimension_numbers = (((nd - 1,), (nd - 2,)), (tuple(range(nd - 2)), tuple(range(nd - 2))))
  (lc, rc), (lb, rb) = dimension_numbers
  dimension_numbers = ((tuple(lc), tuple(rc)), (tuple(lb), tuple(rb)))
  if lhs_scale is None:
    lhs_scale = _unit_scale(lhs, lc)
  if rhs_scale is None:
    rhs_scale = _unit_scale(rhs, rc)
  out_dtype = dtypes.check_user_dtype(
      dtypes.bfloat16 if preferred_element_type is None else preferred_element_type,
      "scaled_dot")
  return scaled_dot_p.bind(lhs, rhs, lhs_scale, rhs_scale, dimension_numbers=dimension_numbers,
                           preferred_element_type=out_dtype)


# ---------------------------------------------------------------------------
# scaled_matmul (JAX's cuDNN block-scaled matmul, behind `nn.scaled_matmul`): `[B, M, K]` x
# `[B, N, K]` with scales `[B, M, K/s]`, `[B, N, K/s]` -> `[B, M, N]`. Two primitives, as
# JAX's: `scaled_matmul_wrapper` (what jaxprs show) lowers to `scaled_matmul`, which only
# GPUs lower: on CUDA the custom call `__op$block_scaled_dot`, on ROCm the `scaled_dot`
# composite; on other platforms lowering raises JAX's NotImplementedError.


scaled_matmul_p = Primitive("scaled_matmul")
scaled_matmul_p.multiple_results = True
scaled_matmul_wrapper_p = Primitive("scaled_matmul_wrapper")
scaled_matmul_wrapper_p.multiple_results = True


def _scaled_matmul_abstract_eval(a, b, a_scale, b_scale, *, preferred_element_type):
  batch, m, _ = a.shape
  _, n, _ = b.shape
  return [ShapedArray((batch, m, n), preferred_element_type)]


_DEQUANTIZE_TYPES = {dtypes.bfloat16: "BF16", dtypes.float16: "F16", dtypes.float32: "F32"}


def _scaled_matmul_lowering(ctx, a, b, a_scale, b_scale, *, preferred_element_type):
  platform = ctx.module.platform
  if platform in ("cuda", "gpu"):
    out = ctx.avals_out[0]
    config = json.dumps({"scaled_dot_backend_config": {
        "lhs_batch_dimensions": [0], "rhs_batch_dimensions": [0],
        "dequantize_type": _DEQUANTIZE_TYPES[np.dtype(out.dtype)]}}).replace('"', "\\22")

    def layout(aval):
      nd = len(aval.shape)
      return f"dense<[{', '.join(str(d) for d in range(nd - 1, -1, -1))}]> : tensor<{nd}xindex>"
    attrs = (f'api_version = 2 : i32, backend_config = "{config}", call_target_name = '
             f'"__op$block_scaled_dot", operand_layouts = '
             f'[{", ".join(layout(x) for x in ctx.avals_in)}], result_layouts = [{layout(out)}]')
    return ctx.op("stablehlo.custom_call", [a, b, a_scale, b_scale], attrs=attrs)
  if platform == "rocm":
    return _scaled_dot_lowering(ctx.replace(avals_out=ctx.avals_out), a, b, a_scale, b_scale,
                                dimension_numbers=(((2,), (2,)), ((0,), (0,))),
                                preferred_element_type=preferred_element_type)
  raise NotImplementedError(f"MLIR translation rule for primitive 'scaled_matmul' not found "
                            f"for platform {platform}")


def _scaled_matmul_wrapper_lowering(ctx, *args, preferred_element_type):
  jaxpr, consts = pe.trace_to_jaxpr(
      lambda *xs: scaled_matmul_p.bind(*xs, preferred_element_type=preferred_element_type),
      ctx.avals_in)
  return lowering.jaxpr_subcomp(ctx.fb, jaxpr, [], list(args))


def _scaled_matmul_batcher(args, dims, *, preferred_element_type):
  # As JAX's: every operand batched at the same dim; the batch dims are merged into B.
  if len(set(dims)) != 1 or dims[0] is None:
    raise NotImplementedError("scaled_matmul: every operand must be batched along the same "
                              "axis.")
  d = dims[0]
  args = [batching.moveaxis(x, d, 0) for x in args]
  a, b, a_scale, b_scale = args
  *batch, m, k = get_aval(a).shape
  n = get_aval(b).shape[-2]
  ks = get_aval(a_scale).shape[-1]
  nb = int(np.prod(batch))
  out = scaled_matmul_wrapper_p.bind(
      reshape(a, (nb, m, k)), reshape(b, (nb, n, k)), reshape(a_scale, (nb, m, ks)),
      reshape(b_scale, (nb, n, ks)), preferred_element_type=preferred_element_type)[0]
  return [reshape(out, (*batch, m, n))], [0]


for _p in (scaled_matmul_p, scaled_matmul_wrapper_p):
  _p.def_abstract_eval(_scaled_matmul_abstract_eval)
  batching.primitive_batchers[_p] = _scaled_matmul_batcher
  ad.primitive_jvps[_p] = not_differentiable(_p.name)
lowering.register_lowering(scaled_matmul_p, _scaled_matmul_lowering)
lowering.register_lowering(scaled_matmul_wrapper_p, _scaled_matmul_wrapper_lowering)
