"""Convolution: `conv_general_dilated` and its wrappers (`conv`, `conv_with_general_padding`,
`conv_transpose`), with the dimension-number and padding helpers of JAX's `lax`.

Params follow JAX's `lax.conv_general_dilated` (JAX 0.10): `window_strides`, `padding` (one
`(low, high)` pair per spatial dimension), `lhs_dilation`, `rhs_dilation`,
`dimension_numbers` (a `ConvDimensionNumbers` of three permutations), `feature_group_count`,
`batch_group_count`, `precision` and `preferred_element_type`. The shape rule is JAX's, which
is XLA's (openxla.org/xla/operation_semantics#conv_convolution): in the canonical order
`lhs[N, C, *s]`, `rhs[O, I, *k]` the output is `[N // batch_group_count, O, *o]` with
`o[i] = (dilate(s[i], lhs_dilation[i]) + lo[i] + hi[i] - dilate(k[i], rhs_dilation[i]))
// window_strides[i] + 1` (at least 0), where `dilate(d, r) = 1 + r * (d - 1)`.
The primitive lowers to one `stablehlo.convolution` in its pretty form, as JAX prints it.
"""
from __future__ import annotations

import math
import operator
from typing import Any, NamedTuple, Sequence, Union

import numpy as np

from stagecraft import dtypes, shape_poly
from stagecraft.core import Primitive, ShapedArray, get_aval
from stagecraft.interpreters import ad, batching, lowering
from stagecraft.interpreters.lowering import i64_array, ir_type
from stagecraft.lax.dot import Precision, canonicalize_precision, dot_general, precision_config
from stagecraft.lax.elementwise import convert_element_type
from stagecraft.lax.shape import full, reshape, rev, transpose
from stagecraft.lax import utils as lax_utils

__all__ = ["ConvDimensionNumbers", "ConvGeneralDilatedDimensionNumbers",
           "conv_general_dilated_p", "conv_general_dilated", "conv", "conv_with_general_padding",
           "conv_transpose", "conv_dimension_numbers", "conv_general_permutations",
           "conv_shape_tuple", "conv_general_shape_tuple", "conv_transpose_shape_tuple",
           "padtype_to_pads", "conv_general_dilated_patches", "conv_general_dilated_local"]


class ConvDimensionNumbers(NamedTuple):
  """Where the batch, feature and spatial dimensions of a convolution live.

  Args:
    lhs_spec: `(batch dimension, feature dimension, *spatial dimensions)` of the input.
    rhs_spec: `(out feature dimension, in feature dimension, *spatial dimensions)` of the
      kernel.
    out_spec: `(batch dimension, feature dimension, *spatial dimensions)` of the output.

  Each is a permutation of `range(n + 2)`; spatial dimension `i` of the three correspond.
  """
  lhs_spec: Sequence[int]
  rhs_spec: Sequence[int]
  out_spec: Sequence[int]


ConvGeneralDilatedDimensionNumbers = Union[tuple[str, str, str], ConvDimensionNumbers, None]


# ---------------------------------------------------------------------------
# Dimension numbers and padding helpers (JAX's, with its messages)


def conv_general_permutations(dimension_numbers: tuple[str, str, str]):
  """The three permutations of a string triple such as `('NHWC', 'HWIO', 'NHWC')`.

  Spatial dimensions are ordered as they appear in the kernel spec (`rhs_spec`).

  Raises:
    TypeError: if a spec lacks 'N'/'C' (lhs, out) or 'O'/'I' (rhs) or has them twice, has
      duplicate characters, or the specs have different spatial characters.
  """
  lhs_spec, rhs_spec, out_spec = dimension_numbers
  charpairs = ("N", "C"), ("O", "I"), ("N", "C")
  for i, (a, b) in enumerate(charpairs):
    if not dimension_numbers[i].count(a) == dimension_numbers[i].count(b) == 1:
      raise TypeError(f"convolution dimension_numbers[{i}] must contain the characters "
                      f"'{a}' and '{b}' exactly once, got {dimension_numbers[i]}.")
    if len(dimension_numbers[i]) != len(set(dimension_numbers[i])):
      raise TypeError(f"convolution dimension_numbers[{i}] cannot have duplicate characters, "
                      f"got {dimension_numbers[i]}.")
  if not (set(lhs_spec) - {"N", "C"} == set(rhs_spec) - {"O", "I"}
          == set(out_spec) - {"N", "C"}):
    raise TypeError(f"convolution dimension_numbers elements must each have the same set of "
                    f"spatial characters, got {dimension_numbers}.")

  def getperm(spec, charpair):
    spatial = [i for i, c in enumerate(spec) if c not in charpair]
    if spec is not rhs_spec:
      spatial = sorted(spatial, key=lambda i: rhs_spec.index(spec[i]))
    return (spec.index(charpair[0]), spec.index(charpair[1]), *spatial)

  return tuple(map(getperm, dimension_numbers, charpairs))


def conv_dimension_numbers(lhs_shape: Sequence[int], rhs_shape: Sequence[int],
                           dimension_numbers: ConvGeneralDilatedDimensionNumbers
                           ) -> ConvDimensionNumbers:
  """`dimension_numbers` as a `ConvDimensionNumbers` (JAX's `lax.conv_dimension_numbers`).

  Args:
    lhs_shape: shape of the input, rank `n+2`.
    rhs_shape: shape of the kernel, rank `n+2`.
    dimension_numbers: None (`lhs[N,C,*s]`, `rhs[O,I,*k]`, `out[N,C,*o]`, the identity
      permutations), a `ConvDimensionNumbers` (returned with its entries as int tuples), or a
      triple of strings such as `('NHWC', 'HWIO', 'NHWC')` ('N' batch, 'C' feature, 'O'/'I'
      kernel output/input feature, any other distinct characters spatial).

  Returns:
    A `ConvDimensionNumbers` of int tuples.

  Raises:
    TypeError: if the ranks differ, or the string specs are malformed (wrong count or
      length, missing or repeated characters, different spatial characters).

  Examples:
    >>> conv_dimension_numbers((8, 28, 28, 1), (3, 3, 1, 32), ('NHWC', 'HWIO', 'NHWC'))
    ConvDimensionNumbers(lhs_spec=(0, 3, 1, 2), rhs_spec=(3, 2, 0, 1), out_spec=(0, 3, 1, 2))
  """
  if isinstance(dimension_numbers, ConvDimensionNumbers):
    return ConvDimensionNumbers(*(tuple(operator.index(d) for d in spec)
                                  for spec in dimension_numbers))
  if len(lhs_shape) != len(rhs_shape):
    raise TypeError(f"convolution requires lhs and rhs ndim to be equal, got "
                    f"{len(lhs_shape)} and {len(rhs_shape)}.")
  if dimension_numbers is None:
    iota = tuple(range(len(lhs_shape)))
    return ConvDimensionNumbers(iota, iota, iota)
  if isinstance(dimension_numbers, (list, tuple)):
    if len(dimension_numbers) != 3:
      raise TypeError(f"convolution dimension_numbers list/tuple must be length 3, got "
                      f"{len(dimension_numbers)}.")
    if not all(isinstance(elt, str) for elt in dimension_numbers):
      raise TypeError(f"convolution dimension_numbers elements must be strings, got "
                      f"{tuple(map(type, dimension_numbers))}.")
    for i, elt in enumerate(dimension_numbers):
      if len(elt) != len(lhs_shape):
        raise TypeError(f"convolution dimension_numbers[{i}] must have len equal to the ndim "
                        f"of lhs and rhs, got {len(elt)} for lhs and rhs shapes "
                        f"{tuple(lhs_shape)} and {tuple(rhs_shape)}.")
    return ConvDimensionNumbers(*conv_general_permutations(tuple(dimension_numbers)))
  raise TypeError(f"convolution dimension_numbers must be tuple/list or None, got "
                  f"{type(dimension_numbers)}.")


def padtype_to_pads(in_shape: Sequence[int], window_shape: Sequence[int],
                    window_strides: Sequence[int], padding: str) -> list[tuple[int, int]]:
  """Explicit `(low, high)` pads for a padding string (JAX's `lax.padtype_to_pads`).

  Args:
    in_shape: spatial input sizes.
    window_shape: spatial window sizes (already dilated, for a dilated kernel).
    window_strides: spatial strides.
    padding: 'VALID' (no padding), 'SAME' (output size `ceil(in / stride)`; an odd total pad
      puts the extra element at the high end) or 'SAME_LOWER' (the extra element at the low
      end); case-insensitive.

  Returns:
    One `(low, high)` pair of Python ints per spatial dimension.

  Raises:
    RuntimeError: for any other string (JAX raises RuntimeError here too).

  Examples:
    >>> padtype_to_pads((28, 28), (3, 3), (2, 2), 'SAME')
    [(0, 1), (0, 1)]
  """
  kind = padding.upper() if isinstance(padding, str) else padding
  if kind not in ("VALID", "SAME", "SAME_LOWER"):
    raise RuntimeError(f"Unrecognized padding type: expected 'VALID', 'SAME', or "
                       f"'SAME_LOWER', got {padding}.")
  if kind == "VALID":
    return [(0, 0)] * len(in_shape)
  pads = []
  for d, w, s in zip(in_shape, window_shape, window_strides):
    d, w, s = (v if shape_poly.is_symbolic_dim(v) else int(v) for v in (d, w, s))
    out = -((-d) // s)
    # NB: max_dim, so that a symbolic size (export) gives symbolic pads, as JAX's
    total = shape_poly.max_dim((out - 1) * s + w - d, 0)
    small, big = total // 2, total - total // 2
    pads.append((small, big) if kind == "SAME" else (big, small))
  return pads


def _dilate_dim(d: int, r: int) -> int:
  return d if r == 1 else shape_poly.max_dim(0, 1 + r * (d - 1))


def _dilate_shape(shape: Sequence[int], dilation: Sequence[int]) -> tuple[int, ...]:
  if not all(r > 0 for r in dilation):
    raise TypeError(f"All dilations must be positive, got {tuple(dilation)}.")
  dilation = (1,) * (len(shape) - len(dilation)) + tuple(dilation)
  return tuple(map(_dilate_dim, shape, dilation))


def conv_shape_tuple(lhs_shape, rhs_shape, strides, pads, batch_group_count=1
                     ) -> tuple[int, ...]:
  """The output shape of a convolution in the canonical order (`lhs[N,C,*s]`,
  `rhs[O,I,*k]` -> `[N // batch_group_count, O, *o]`); `pads` may be a padding string.

  Raises:
    TypeError: if `pads` does not have one pair per spatial dimension.
    ValueError: if negative padding removes more than a whole dimension.
  """
  if isinstance(pads, str):
    pads = padtype_to_pads(lhs_shape[2:], rhs_shape[2:], strides, pads)
  if len(pads) != len(lhs_shape) - 2:
    raise TypeError(f"Wrong number of explicit pads for convolution: expected "
                    f"{len(lhs_shape) - 2}, got {len(pads)}.")
  padded = [d + lo + hi for d, (lo, hi) in zip(lhs_shape[2:], pads)]
  if any(not shape_poly.is_symbolic_dim(d) and d < 0 for d in padded):
    raise ValueError(f"Negative padding is larger than the size of the corresponding "
                     f"dimension: got padding={tuple(map(tuple, pads))} for "
                     f"lhs_shape[2:]={tuple(lhs_shape[2:])}")
  # NB: max_dim, as JAX's `core.stride_dim`, for a symbolic size (export)
  out_space = tuple(shape_poly.max_dim((d - k) // s + 1, 0)
                    for d, k, s in zip(padded, rhs_shape[2:], strides))
  n = lhs_shape[0] // batch_group_count if batch_group_count > 1 else lhs_shape[0]
  return (_dim(n), _dim(rhs_shape[0]), *map(_dim, out_space))


def _take(shape, perm):
  return tuple(shape[i] for i in perm)


def _inverse(perm):
  return tuple(int(i) for i in np.argsort(perm))


def conv_general_shape_tuple(lhs_shape, rhs_shape, window_strides, padding,
                             dimension_numbers) -> tuple[int, ...]:
  """The output shape of `conv_general_dilated` without dilation or groups, with string
  `dimension_numbers` (JAX's `lax.conv_general_shape_tuple`)."""
  lhs_perm, rhs_perm, out_perm = conv_general_permutations(dimension_numbers)
  out = conv_shape_tuple(_take(lhs_shape, lhs_perm), _take(rhs_shape, rhs_perm),
                         window_strides, padding)
  return _take(out, _inverse(out_perm))


def conv_transpose_shape_tuple(lhs_shape, rhs_shape, window_strides, padding,
                               dimension_numbers) -> tuple[int, ...]:
  """The output shape of `conv_transpose` with string `dimension_numbers`
  (JAX's `lax.conv_transpose_shape_tuple`)."""
  lhs_perm, rhs_perm, out_perm = conv_general_permutations(dimension_numbers)
  lhs_t, rhs_t = _take(lhs_shape, lhs_perm), _take(rhs_shape, rhs_perm)
  if isinstance(padding, str):
    padding = [_conv_transpose_padding(k, s, padding) for k, s in zip(rhs_t[2:], window_strides)]
  out_space = [(i - 1) * s - k + 2 + sum(p)
               for i, k, s, p in zip(lhs_t[2:], rhs_t[2:], window_strides, padding)]
  return _take((lhs_t[0], rhs_t[0], *out_space), _inverse(out_perm))


# ---------------------------------------------------------------------------
# conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
# dimension_numbers, feature_group_count, batch_group_count, precision,
# preferred_element_type)


def _conv_dtype(lhs: ShapedArray, rhs: ShapedArray, preferred) -> np.dtype:
  if lhs.dtype != rhs.dtype:
    raise TypeError(f"lax.conv_general_dilated requires arguments to have the same dtypes, "
                    f"got {lhs.dtype.name}, {rhs.dtype.name}. Convert one operand with "
                    f"lax.convert_element_type.")
  dt = lhs.dtype
  if preferred is None:
    return dt
  if not (dtypes.is_integer(dt) and dtypes.is_float(preferred)):  # int -> float is allowed
    for kind in (dtypes.is_integer, dtypes.is_float, dtypes.is_complex):
      if kind(dt) and not kind(preferred):
        raise TypeError("Input type is incompatible with `preferred_element_type`. The "
                        "compatible combinations of (input_type, preferred_element_type) are "
                        "(integral, integral), (integral, floating), (floating, floating), "
                        "(complex, complex.")
    if dtypes.is_integer(dt) and not dtypes.is_unsigned(dt) and (
        not dtypes.is_integer(preferred) or dtypes.is_unsigned(preferred)):
      raise TypeError("`preferred_element_type` must have the same signedness as the "
                      "original type.")
  if preferred.itemsize < dt.itemsize:
    raise TypeError("`preferred_element_type` must not be narrower than the original type.")
  return preferred


def _check_spec(lhs: ShapedArray, rhs: ShapedArray, dimension_numbers) -> None:
  if lhs.ndim < 2:
    raise ValueError(f"conv_general_dilated requires operands of rank at least 2 (a batch "
                     f"and a feature dimension), got lhs {lhs.str_short()} and rhs "
                     f"{rhs.str_short()}.")
  if type(dimension_numbers) is not ConvDimensionNumbers:
    raise TypeError(f"conv_general_dilated dimension_numbers must be a ConvDimensionNumbers, "
                    f"got {dimension_numbers!r}. Call the wrapper `lax.conv_general_dilated`"
                    f", which converts None and string triples.")
  for name, spec in zip(("lhs_spec", "rhs_spec", "out_spec"), dimension_numbers):
    if sorted(spec) != list(range(lhs.ndim)):
      raise ValueError(f"conv_general_dilated dimension_numbers.{name} must be a permutation "
                       f"of range({lhs.ndim}) for operands of rank {lhs.ndim}, got {spec}.")


def _conv_general_dilated_abstract_eval(lhs: ShapedArray, rhs: ShapedArray, *, window_strides,
                                        padding, lhs_dilation, rhs_dilation, dimension_numbers,
                                        feature_group_count, batch_group_count, precision,
                                        preferred_element_type, out_sharding=None):
  """JAX's shape rule (in its order, with its messages), then its dtype rule."""
  if lhs.ndim != rhs.ndim:
    raise ValueError(f"conv_general_dilated lhs and rhs must have the same number of "
                     f"dimensions, but got {lhs.shape} and {rhs.shape}.")
  _check_spec(lhs, rhs, dimension_numbers)
  lhs_spec, rhs_spec, out_spec = dimension_numbers
  if not feature_group_count > 0:
    raise ValueError(f"conv_general_dilated feature_group_count must be a positive integer, "
                     f"got {feature_group_count}.")
  lhs_features = lhs.shape[lhs_spec[1]]
  quot, rem = divmod(lhs_features, feature_group_count)
  if rem:
    raise ValueError(f"conv_general_dilated feature_group_count must divide lhs feature "
                     f"dimension size, but {feature_group_count} does not divide "
                     f"{lhs_features}.")
  if quot != rhs.shape[rhs_spec[1]]:
    raise ValueError(f"conv_general_dilated lhs feature dimension size divided by "
                     f"feature_group_count must equal the rhs input feature dimension size, "
                     f"but {lhs_features} // {feature_group_count} != "
                     f"{rhs.shape[rhs_spec[1]]}.")
  out_features = rhs.shape[rhs_spec[0]]
  if out_features % feature_group_count:
    raise ValueError(f"conv_general_dilated rhs output feature dimension size must be a "
                     f"multiple of feature_group_count, but {out_features} is not a multiple "
                     f"of {feature_group_count}.")
  if not batch_group_count > 0:
    raise ValueError(f"conv_general_dilated batch_group_count must be a positive integer, "
                     f"got {batch_group_count}.")
  lhs_batch = lhs.shape[lhs_spec[0]]
  if batch_group_count > 1 and lhs_batch % batch_group_count:
    raise ValueError(f"conv_general_dilated batch_group_count must divide lhs batch "
                     f"dimension size, but {batch_group_count} does not divide {lhs_batch}.")
  if out_features % batch_group_count:
    raise ValueError(f"conv_general_dilated rhs output feature dimension size must be a "
                     f"multiple of batch_group_count, but {out_features} is not a multiple "
                     f"of {batch_group_count}.")
  if batch_group_count > 1 and feature_group_count > 1:
    raise ValueError(f"At most one of batch_group_count and feature_group_count may be > 1, "
                     f"got batch_group_count={batch_group_count} and "
                     f"feature_group_count={feature_group_count}")
  n = lhs.ndim - 2
  if n != len(window_strides):
    raise ValueError(f"conv_general_dilated window and window_strides must have the same "
                     f"number of dimensions, but got {n} and {len(window_strides)}")
  if not all(s > 0 for s in window_strides):  # NB: not checked by JAX (XLA rejects it)
    raise ValueError(f"conv_general_dilated window_strides must be positive, got "
                     f"{window_strides}.")
  for name, dil in (("lhs_dilation", lhs_dilation), ("rhs_dilation", rhs_dilation)):
    if len(dil) != n:  # NB: JAX leaves this to XLA
      raise ValueError(f"conv_general_dilated {name} must have one entry per spatial "
                       f"dimension ({n}), got {dil}.")
  lhs_t = _dilate_shape(_take(lhs.shape, lhs_spec), lhs_dilation)
  rhs_t = _dilate_shape(_take(rhs.shape, rhs_spec), rhs_dilation)
  out_t = conv_shape_tuple(lhs_t, rhs_t, window_strides, padding, batch_group_count)
  dtype = _conv_dtype(lhs, rhs, preferred_element_type)
  return ShapedArray(_take(out_t, _inverse(out_spec)), dtype, lhs.weak_type and rhs.weak_type)


def conv_dims_text(dimension_numbers) -> str:
  """`[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]`: each dimension of the operands and the
  output named by its role ('b'/'f' batch/feature, 'o'/'i' kernel features, spatial index)."""
  def one(spec, first, second):
    names = [""] * len(spec)
    names[spec[0]], names[spec[1]] = first, second
    for i, d in enumerate(spec[2:]):
      names[d] = str(i)
    return f"[{', '.join(names)}]"
  lhs_spec, rhs_spec, out_spec = dimension_numbers
  return f"{one(lhs_spec, 'b', 'f')}x{one(rhs_spec, 'o', 'i')}->{one(out_spec, 'b', 'f')}"


def _ints(xs) -> str:
  return f"[{', '.join(str(int(x)) for x in xs)}]"


def _crop_negative_padding(ctx, lhs, lhs_aval, padding, lhs_dilation, lhs_spec):
  """Slices away what negative padding removes from `lhs`, returning the new operand, its aval
  and non-negative pads with the same result.

  NB: XLA:CPU's f32 convolution reads out of bounds for negative low padding with positive
  high padding (openxla/xla#48713; JAX gives wrong values there), so negative pads never
  reach XLA. With lhs dilation `r`, cropping `c` elements of the dilated input keeps the
  input from element `ceil(c / r)`, after `ceil(c / r) * r - c` holes, which become padding.
  """
  start, limit, pads = [0] * lhs_aval.ndim, list(lhs_aval.shape), []
  for i, ((lo, hi), r) in enumerate(zip(padding, lhs_dilation)):
    d = lhs_aval.shape[lhs_spec[2 + i]]
    dilated = _dilate_dim(d, r)
    first, last = 0, d - 1
    if lo < 0:
      first = -(lo // r)  # ceil(-lo / r)
      lo = first * r + lo
    if hi < 0:
      last = (dilated - 1 + hi) // r
      hi = dilated - 1 + hi - last * r
    if last < first:  # everything cropped: an empty dimension, the total size kept
      first, last, lo, hi = 0, -1, 0, dilated + padding[i][0] + padding[i][1]
    start[lhs_spec[2 + i]], limit[lhs_spec[2 + i]] = first, last + 1
    pads.append((lo, hi))
  aval = lhs_aval.update(shape=tuple(b - a for a, b in zip(start, limit)))
  lhs, = ctx.op("stablehlo.slice", [lhs], [aval],
                attrs=f"start_indices = {i64_array(start)}, limit_indices = "
                      f"{i64_array(limit)}, strides = {i64_array([1] * lhs_aval.ndim)}",
                operand_avals=[lhs_aval])
  return lhs, aval, tuple(pads)


def _conv_general_dilated_lowering(ctx, lhs, rhs, *, window_strides, padding, lhs_dilation,
                                   rhs_dilation, dimension_numbers, feature_group_count,
                                   batch_group_count, precision, preferred_element_type,
                                   out_sharding=None):
  # NB: emitted in the pretty form (the generic form needs a `dense<> : tensor<0x2xi64>`
  # padding for 0 spatial dimensions); the text matches what JAX prints.
  (lhs_aval, rhs_aval), (out_aval,) = ctx.avals_in, ctx.avals_out
  if any(lo < 0 or hi < 0 for lo, hi in padding):
    lhs, lhs_aval, padding = _crop_negative_padding(ctx, lhs, lhs_aval, padding, lhs_dilation,
                                                    dimension_numbers.lhs_spec)
  p = precision_config(precision)   # DEFAULT for None and for dot algorithms (as JAX)
  pad = f"[{', '.join(_ints(lo_hi) for lo_hi in padding)}]"
  reverse = f"[{', '.join(['false'] * len(window_strides))}]"
  window = (f"stride = {_ints(window_strides)}, pad = {pad}, lhs_dilate = "
            f"{_ints(lhs_dilation)}, rhs_dilate = {_ints(rhs_dilation)}, reverse = {reverse}")
  attrs = (f"batch_group_count = {batch_group_count} : i64, feature_group_count = "
           f"{feature_group_count} : i64, precision_config = [#stablehlo<precision "
           f"{p[0].name}>, #stablehlo<precision {p[1].name}>]")
  r = ctx.fb.fresh()
  ctx.fb.emit(f"{r} = stablehlo.convolution({lhs}, {rhs}) dim_numbers = "
              f"{conv_dims_text(dimension_numbers)}, window = {{{window}}} {{{attrs}}} : "
              f"({ir_type(lhs_aval)}, {ir_type(rhs_aval)}) -> {ir_type(out_aval)}")
  return [r]


def _conv_spec_transpose(spec):
  return (spec[1], spec[0], *spec[2:])


def _reshape_axis_into(src: int, dst: int, x):
  """Merges axis `src` of `x` into axis `dst` (numbered after removing `src`), `src` major."""
  shape = get_aval(x).shape
  perm = [i for i in range(len(shape)) if i != src]
  perm.insert(dst, src)
  new_shape = [d for i, d in enumerate(shape) if i != src]
  new_shape[dst] *= shape[src]
  return reshape(x, new_shape, perm)


def _reshape_axis_out_of(src: int, size1: int, x):
  """Splits axis `src` of `x` into `(size1, size // size1)`."""
  shape = list(get_aval(x).shape)
  shape[src:src + 1] = [size1, shape[src] // size1]
  return reshape(x, shape)


def conv_general_vjp_lhs_padding(in_shape, window_dimensions, window_strides, out_shape,
                                 padding, lhs_dilation, rhs_dilation) -> tuple:
  """The padding of the convolution that transposes one with respect to its input (JAX's
  `_conv_general_vjp_lhs_padding`); also used by `reduce_window_sum`'s transpose."""
  lhs_dilated = _dilate_shape(in_shape, lhs_dilation)
  rhs_dilated = _dilate_shape(window_dimensions, rhs_dilation)
  out_dilated = _dilate_shape(out_shape, window_strides)
  before = [r - lo - 1 for r, (lo, _) in zip(rhs_dilated, padding)]
  after = [l + r - 1 - o - b for l, r, o, b in zip(lhs_dilated, rhs_dilated, out_dilated, before)]
  return tuple((_dim(b), _dim(a)) for b, a in zip(before, after))


def _dim(d):
  """`d` as an int, or the symbolic dimension it is (export)."""
  return d if shape_poly.is_symbolic_dim(d) else int(d)


def _conv_general_vjp_rhs_padding(in_shape, window_dimensions, window_strides, out_shape,
                                  padding, lhs_dilation, rhs_dilation) -> tuple:
  """The padding of the convolution that transposes one with respect to its kernel (JAX's
  `_conv_general_vjp_rhs_padding`)."""
  if len(in_shape) == 0:
    return ()
  lhs_dilated = _dilate_shape(in_shape, lhs_dilation)
  rhs_dilated = _dilate_shape(window_dimensions, rhs_dilation)
  out_dilated = _dilate_shape(out_shape, window_strides)
  lo = [p for p, _ in padding]
  hi = [o - l + r - p - 1 for o, l, r, p in zip(out_dilated, lhs_dilated, rhs_dilated, lo)]
  return tuple((int(a), int(b)) for a, b in zip(lo, hi))


def _conv_general_dilated_transpose_lhs(ct, lhs, rhs, *, window_strides, padding,
                                        lhs_dilation, rhs_dilation, dimension_numbers,
                                        feature_group_count, batch_group_count, precision,
                                        preferred_element_type, out_sharding=None):
  """JAX's `_conv_general_dilated_transpose_lhs`: the input cotangent is a convolution of
  the output cotangent with the spatially reversed kernel, its feature dimensions swapped
  (the feature groups moved into its output features), strides becoming lhs dilation."""
  lhs_aval, rhs_aval = lhs.aval, get_aval(rhs)
  lhs_spec, rhs_spec, out_spec = dimension_numbers
  lhs_sdims, rhs_sdims, out_sdims = lhs_spec[2:], rhs_spec[2:], out_spec[2:]
  t_rhs_spec = _conv_spec_transpose(rhs_spec)
  if feature_group_count > 1:
    rhs = _reshape_axis_out_of(rhs_spec[0], feature_group_count, rhs)
    rhs = _reshape_axis_into(rhs_spec[0], rhs_spec[1], rhs)
  elif batch_group_count > 1:
    rhs = _reshape_axis_out_of(rhs_spec[0], batch_group_count, rhs)
    rhs = _reshape_axis_into(rhs_spec[0], rhs_spec[1], rhs)
    feature_group_count = batch_group_count
  trans_dnums = ConvDimensionNumbers(tuple(out_spec), tuple(t_rhs_spec), tuple(lhs_spec))
  ct_shape = get_aval(ct).shape
  pads = conv_general_vjp_lhs_padding(
      _take(lhs_aval.shape, lhs_sdims), _take(rhs_aval.shape, rhs_sdims), window_strides,
      _take(ct_shape, out_sdims), padding, lhs_dilation, rhs_dilation)
  revd_weights = rev(rhs, tuple(rhs_sdims))
  ct_dtype = get_aval(ct).dtype
  if get_aval(revd_weights).dtype != ct_dtype:
    revd_weights = convert_element_type(revd_weights, ct_dtype)
  out = conv_general_dilated_p.bind(
      ct, revd_weights, window_strides=tuple(lhs_dilation), padding=pads,
      lhs_dilation=tuple(window_strides), rhs_dilation=tuple(rhs_dilation),
      dimension_numbers=trans_dnums, feature_group_count=feature_group_count,
      batch_group_count=1, precision=precision, preferred_element_type=preferred_element_type)
  if get_aval(out).dtype != lhs_aval.dtype:
    out = convert_element_type(out, lhs_aval.dtype, lhs_aval.weak_type)
  if batch_group_count > 1:
    out = _reshape_axis_out_of(lhs_spec[1], batch_group_count, out)
    out = _reshape_axis_into(lhs_spec[1], lhs_spec[0], out)
  return out


def _conv_general_dilated_transpose_rhs(ct, lhs, rhs, *, window_strides, padding,
                                        lhs_dilation, rhs_dilation, dimension_numbers,
                                        feature_group_count, batch_group_count, precision,
                                        preferred_element_type, out_sharding=None):
  """JAX's `_conv_general_dilated_transpose_rhs`: the kernel cotangent is a convolution of
  the input with the output cotangent as kernel (batch and feature roles swapped; feature
  groups become batch groups and vice versa), strides becoming rhs dilation."""
  lhs_aval, rhs_aval = get_aval(lhs), rhs.aval
  ct_aval = get_aval(ct)
  if ct_aval.size == 0:  # no degenerate convolution with an empty kernel
    return ad.Zero(rhs_aval)
  lhs_sdims, rhs_sdims, out_sdims = (spec[2:] for spec in dimension_numbers)
  lhs_trans, rhs_trans, out_trans = map(_conv_spec_transpose, dimension_numbers)
  if batch_group_count > 1:
    feature_group_count, batch_group_count = batch_group_count, 1
  elif feature_group_count > 1:
    feature_group_count, batch_group_count = 1, feature_group_count
  trans_dnums = ConvDimensionNumbers(tuple(lhs_trans), tuple(out_trans), tuple(rhs_trans))
  pads = _conv_general_vjp_rhs_padding(
      _take(lhs_aval.shape, lhs_sdims), _take(rhs_aval.shape, rhs_sdims), window_strides,
      _take(ct_aval.shape, out_sdims), padding, lhs_dilation, rhs_dilation)
  if lhs_aval.dtype != ct_aval.dtype:
    lhs = convert_element_type(lhs, ct_aval.dtype)
  out = conv_general_dilated_p.bind(
      lhs, ct, window_strides=tuple(rhs_dilation), padding=pads,
      lhs_dilation=tuple(lhs_dilation), rhs_dilation=tuple(window_strides),
      dimension_numbers=trans_dnums, feature_group_count=feature_group_count,
      batch_group_count=batch_group_count, precision=precision,
      preferred_element_type=preferred_element_type)
  if get_aval(out).dtype != rhs_aval.dtype:
    out = convert_element_type(out, rhs_aval.dtype, rhs_aval.weak_type)
  return out


conv_general_dilated_p = Primitive("conv_general_dilated")
conv_general_dilated_p.def_abstract_eval(_conv_general_dilated_abstract_eval)
lowering.register_lowering(conv_general_dilated_p, _conv_general_dilated_lowering)
ad.defbilinear(conv_general_dilated_p, _conv_general_dilated_transpose_lhs,
               _conv_general_dilated_transpose_rhs)


def _conv_general_dilated_batch_rule(batched_args, batch_dims, *, window_strides, padding,
                                     lhs_dilation, rhs_dilation, dimension_numbers,
                                     feature_group_count, batch_group_count, precision,
                                     preferred_element_type, out_sharding=None):
  """JAX's `_conv_general_dilated_batch_rule`: the vmapped axis is folded into the input's
  batch dimension (lhs batched), the kernel's output features (rhs batched) or, both batched,
  into feature (or batch) groups; the output is then split back, its batch axis at the
  output's batch or feature dimension."""
  lhs, rhs = batched_args
  lhs_bdim, rhs_bdim = batch_dims
  lhs_spec, rhs_spec, out_spec = dimension_numbers

  def conv(l, r, fgc, bgc):
    return conv_general_dilated_p.bind(
        l, r, window_strides=window_strides, padding=padding, lhs_dilation=lhs_dilation,
        rhs_dilation=rhs_dilation, dimension_numbers=dimension_numbers,
        feature_group_count=fgc, batch_group_count=bgc, precision=precision,
        preferred_element_type=preferred_element_type)

  la, ra = get_aval(lhs), get_aval(rhs)
  if ((lhs_bdim is not None and la.shape[lhs_bdim] == 0)
      or (rhs_bdim is not None and ra.shape[rhs_bdim] == 0)):
    # NB: as JAX's, an empty vmapped axis gives zeros of the per-example result's shape: the
    # folds below cannot split an axis of size 0 back out
    def unbatched(a, d):
      return a if d is None else a.update(shape=a.shape[:d] + a.shape[d + 1:])
    one = _conv_general_dilated_abstract_eval(
        unbatched(la, lhs_bdim), unbatched(ra, rhs_bdim), window_strides=window_strides,
        padding=padding, lhs_dilation=lhs_dilation, rhs_dilation=rhs_dilation,
        dimension_numbers=dimension_numbers, feature_group_count=feature_group_count,
        batch_group_count=batch_group_count, precision=precision,
        preferred_element_type=preferred_element_type)
    return full((0, *one.shape), 0, one.dtype), 0

  if lhs_bdim is not None and rhs_bdim is not None:
    size = la.shape[lhs_bdim]
    if batch_group_count > 1:
      new_lhs = _reshape_axis_into(lhs_bdim, lhs_spec[0], lhs)
      fgc, bgc = feature_group_count, batch_group_count * size
    else:
      new_lhs = _reshape_axis_into(lhs_bdim, lhs_spec[1], lhs)
      fgc, bgc = feature_group_count * size, batch_group_count
    new_rhs = _reshape_axis_into(rhs_bdim, rhs_spec[0], rhs)
    out = conv(new_lhs, new_rhs, fgc, bgc)
    return _reshape_axis_out_of(out_spec[1], size, out), out_spec[1]

  if lhs_bdim is not None:
    size = get_aval(lhs).shape[lhs_bdim]
    if batch_group_count == 1:
      new_lhs = _reshape_axis_into(lhs_bdim, lhs_spec[0], lhs)
    else:  # the batch groups stay outermost in the input's batch dimension
      new_lhs = _reshape_axis_out_of(lhs_spec[0] + int(lhs_bdim <= lhs_spec[0]),
                                     batch_group_count, lhs)
      new_lhs = _reshape_axis_into(lhs_bdim + int(lhs_spec[0] < lhs_bdim), lhs_spec[0] + 1,
                                   new_lhs)
      new_lhs = _reshape_axis_into(lhs_spec[0], lhs_spec[0], new_lhs)
    out = conv(new_lhs, rhs, feature_group_count, batch_group_count)
    return _reshape_axis_out_of(out_spec[0], size, out), out_spec[0]

  size = get_aval(rhs).shape[rhs_bdim]
  if feature_group_count == 1 and batch_group_count == 1:
    new_rhs = _reshape_axis_into(rhs_bdim, rhs_spec[0], rhs)
    out = conv(lhs, new_rhs, feature_group_count, batch_group_count)
    return _reshape_axis_out_of(out_spec[1], size, out), out_spec[1]
  # The groups must stay outermost in the kernel's output features: factor them out, fold
  # the batch into the rest, put them back; the same on the output.
  group_count = feature_group_count if feature_group_count > 1 else batch_group_count
  new_rhs = _reshape_axis_out_of(rhs_spec[0] + int(rhs_bdim <= rhs_spec[0]), group_count, rhs)
  new_rhs = _reshape_axis_into(rhs_bdim + int(rhs_spec[0] < rhs_bdim), rhs_spec[0] + 1,
                               new_rhs)
  new_rhs = _reshape_axis_into(rhs_spec[0], rhs_spec[0], new_rhs)
  out = conv(lhs, new_rhs, feature_group_count, batch_group_count)
  out = _reshape_axis_out_of(out_spec[1], group_count, out)
  out = _reshape_axis_out_of(out_spec[1] + 1, size, out)
  out = _reshape_axis_into(out_spec[1], out_spec[1] + 1, out)
  return out, out_spec[1]


batching.primitive_batchers[conv_general_dilated_p] = _conv_general_dilated_batch_rule
# NB: as JAX's, every equation carries `out_sharding` (None here; printed).
conv_general_dilated_p.def_default_params(out_sharding=None)


def _int_tuple(name: str, xs: Any) -> tuple[int, ...]:
  try:
    return tuple(operator.index(x) for x in xs)
  except TypeError:
    raise TypeError(f"conv_general_dilated {name} must be a sequence of ints, got {xs!r}."
                    ) from None


def conv_general_dilated(lhs: Any, rhs: Any, window_strides: Sequence[int],
                         padding: str | Sequence[tuple[int, int]],
                         lhs_dilation: Sequence[int] | None = None,
                         rhs_dilation: Sequence[int] | None = None,
                         dimension_numbers: ConvGeneralDilatedDimensionNumbers = None,
                         feature_group_count: int = 1, batch_group_count: int = 1,
                         precision: Any = None, preferred_element_type: Any = None,
                         out_sharding: Any = None):
  """General n-dimensional convolution with dilation (JAX's `lax.conv_general_dilated`, XLA's
  Conv, StableHLO `convolution`). Cross-correlation: the kernel is not flipped.

  Args:
    lhs: input `T[*ls]` of rank `n+2` (batch, feature and `n` spatial dimensions).
    rhs: kernel `T[*rs]` of rank `n+2` (output feature, input feature, `n` spatial).
    window_strides: `n` positive ints.
    padding: 'SAME', 'SAME_LOWER', 'VALID' (see `padtype_to_pads`; computed for the dilated
      kernel), or `n` `(low, high)` int pairs, negative values cropping.
    lhs_dilation: None or `n` positive ints: holes between input elements (a transposed
      convolution); a string `padding` requires no lhs dilation.
    rhs_dilation: None or `n` positive ints: holes between kernel elements (atrous).
    dimension_numbers: None (`('NCH..', 'OIH..', 'NCH..')`), a `ConvDimensionNumbers`, or a
      string triple such as `('NHWC', 'HWIO', 'NHWC')`; spatial dimensions (and the entries
      of the per-dimension arguments) are ordered as in the kernel spec.
    feature_group_count: the input features split into this many groups, each convolved
      with `O // feature_group_count` kernels of `I = C // feature_group_count` features
      (`feature_group_count = C` with `I = 1` is a depthwise convolution).
    batch_group_count: the batch split into this many groups, each with its own
      `O // batch_group_count` output features (used by the kernel gradient of grouped
      convolutions); at most one of the two group counts may exceed 1.
    precision: None, a `Precision`, a string, or a pair of these (as for `dot_general`).
    preferred_element_type: None or a dtype-like for the result and the accumulation: not
      narrower than T, of the same kind (an integer input may give a float result), and of
      the same signedness for signed integers.
    out_sharding: None (flax.nnx's Conv passes it), or a NamedSharding / PartitionSpec (under
      `set_mesh`) that the result is laid out by: `reshard` on a mesh with Explicit axes (the
      result's type), a sharding constraint otherwise. NB: unlike JAX's, it is applied after
      the convolution, so operands whose shardings the convolution's rule refuses still raise.

  Returns:
    Array `U[*os]` laid out by `out_spec`, with batch `N // batch_group_count`, `O` features
    and spatial sizes as in the module docstring. U is T or `preferred_element_type`; weakly
    typed only when both operands are.

  Raises:
    TypeError: for malformed dimension numbers, different dtypes of lhs and rhs, an
      incompatible `preferred_element_type`, a wrong number of pads, or non-positive
      dilations.
    ValueError: for bad ranks, group counts that do not divide the feature or batch sizes,
      both group counts above 1, a wrong number of strides or dilations, non-positive
      strides, a string padding with lhs dilation, padding that is not pairs of ints, or
      negative padding larger than a dimension.
    RuntimeError: for an unknown padding string.

  Examples:
    >>> import numpy as np
    >>> x = np.ones((8, 28, 28, 1), np.float32); w = np.ones((3, 3, 1, 32), np.float32)
    >>> conv_general_dilated(x, w, (2, 2), 'SAME',
    ...                      dimension_numbers=('NHWC', 'HWIO', 'NHWC')).shape
    (8, 14, 14, 32)
  """
  lhs_shape, rhs_shape = get_aval(lhs).shape, get_aval(rhs).shape
  dnums = conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers)
  n = max(len(lhs_shape) - 2, 0)
  window_strides = _int_tuple("window_strides", window_strides)
  if lhs_dilation is None:
    lhs_dilation = (1,) * n
  else:
    lhs_dilation = _int_tuple("lhs_dilation", lhs_dilation)
    if isinstance(padding, str) and any(d != 1 for d in lhs_dilation):
      raise ValueError("String padding is not implemented for transposed convolution using "
                       "this op. Please either exactly specify the required padding or use "
                       "conv_transpose.")
  rhs_dilation = (1,) * n if rhs_dilation is None else _int_tuple("rhs_dilation", rhs_dilation)
  if isinstance(padding, str):
    if len(lhs_shape) != len(rhs_shape) or len(lhs_shape) < 2:
      pads = ()  # the abstract eval reports the bad ranks
    else:
      k = [_dilate_dim(d, r) for d, r in zip(_take(rhs_shape, dnums.rhs_spec)[2:], rhs_dilation)]
      pads = padtype_to_pads(_take(lhs_shape, dnums.lhs_spec)[2:], k, window_strides, padding)
    padding = tuple((_dim(lo), _dim(hi)) for lo, hi in pads)
  else:
    try:
      padding = tuple((operator.index(lo), operator.index(hi)) for lo, hi in padding)
    except (ValueError, TypeError) as e:
      raise ValueError(f"padding argument to conv_general_dilated should be a string or a "
                       f"sequence of (low, high) pairs, got {padding}") from e
  pref = (None if preferred_element_type is None
          else dtypes.check_user_dtype(preferred_element_type, "conv_general_dilated"))
  out = conv_general_dilated_p.bind(
      lhs, rhs, window_strides=window_strides, padding=padding, lhs_dilation=lhs_dilation,
      rhs_dilation=rhs_dilation, dimension_numbers=dnums,
      feature_group_count=operator.index(feature_group_count),
      batch_group_count=operator.index(batch_group_count),
      precision=canonicalize_precision(precision), preferred_element_type=pref)
  return out if out_sharding is None else lay_out[0](out, out_sharding)


lay_out = lax_utils.lay_out   # NB: `x` laid out by a conv's `out_sharding`


def conv(lhs: Any, rhs: Any, window_strides: Sequence[int], padding: str, precision: Any = None,
         preferred_element_type: Any = None):
  """Convolution in the `NCH..`/`OIH..` layout without dilation (JAX's `lax.conv`).

  Args:
    lhs: input `T[N,C,*s]`.
    rhs: kernel `T[O,C,*k]`.
    window_strides: `n` positive ints.
    padding: 'SAME', 'SAME_LOWER', 'VALID', or `n` `(low, high)` pairs.
    precision: as for `conv_general_dilated`.
    preferred_element_type: as for `conv_general_dilated`.

  Returns:
    `U[N,O,*o]`, as for `conv_general_dilated`.

  Raises:
    As `conv_general_dilated`.
  """
  return conv_general_dilated(lhs, rhs, window_strides, padding, precision=precision,
                              preferred_element_type=preferred_element_type)


def conv_with_general_padding(lhs: Any, rhs: Any, window_strides: Sequence[int],
                              padding: str | Sequence[tuple[int, int]],
                              lhs_dilation: Sequence[int] | None,
                              rhs_dilation: Sequence[int] | None, precision: Any = None,
                              preferred_element_type: Any = None):
  """Convolution in the `NCH..`/`OIH..` layout with padding and dilations
  (JAX's `lax.conv_with_general_padding`).

  Args:
    lhs: input `T[N,C,*s]`.
    rhs: kernel `T[O,C,*k]`.
    window_strides: `n` positive ints.
    padding: a padding string or `n` `(low, high)` pairs.
    lhs_dilation: None or `n` positive ints.
    rhs_dilation: None or `n` positive ints.
    precision: as for `conv_general_dilated`.
    preferred_element_type: as for `conv_general_dilated`.

  Returns:
    `U[N,O,*o]`, as for `conv_general_dilated`.

  Raises:
    As `conv_general_dilated`.
  """
  return conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=lhs_dilation,
                              rhs_dilation=rhs_dilation, precision=precision,
                              preferred_element_type=preferred_element_type)


def _conv_transpose_padding(k: int, s: int, padding) -> tuple[int, int]:
  """Low and high padding of one dimension of a transposed convolution (JAX's rule)."""
  if padding == "SAME":
    pad_len = k + s - 2
    pad_a = k - 1 if s > k - 1 else int(np.ceil(pad_len / 2))
  elif padding == "VALID":
    pad_len = k + s - 2 + max(k - s, 0)
    pad_a = k - 1
  elif isinstance(padding, tuple):
    pads = tuple(k - p - 1 for p in padding)
    pad_a, pad_len = pads[0], sum(pads)
  else:
    raise ValueError(f"Invalid padding mode: {padding}")
  return pad_a, pad_len - pad_a


_TRANSPOSE_DEFAULTS = {2: ("NC", "IO", "NC"), 3: ("NHC", "HIO", "NHC"),
                       4: ("NHWC", "HWIO", "NHWC"), 5: ("NHWDC", "HWDIO", "NHWDC")}


def conv_transpose(lhs: Any, rhs: Any, strides: Sequence[int],
                   padding: str | Sequence[tuple[int, int]],
                   rhs_dilation: Sequence[int] | None = None,
                   dimension_numbers: ConvGeneralDilatedDimensionNumbers = None,
                   transpose_kernel: bool = False, precision: Any = None,
                   preferred_element_type: Any = None, use_consistent_padding: bool = False):
  """Transposed ("fractionally strided") convolution (JAX's `lax.conv_transpose`): a
  convolution with `lhs_dilation = strides`, so spatial sizes grow by about `strides`.

  Args:
    lhs: input of rank `n+2`.
    rhs: kernel of rank `n+2`.
    strides: `n` positive ints: the lhs dilation.
    padding: 'SAME' or 'VALID' (the padding of the forward convolution this transposes), or
      `n` `(low, high)` pairs: with `use_consistent_padding` the forward convolution's pads
      too, otherwise the pads of the transposed convolution itself (JAX's legacy meaning).
    rhs_dilation: None or `n` positive ints.
    dimension_numbers: as for `conv_general_dilated`; default the TensorFlow layout
      (`NHWC`, `HWIO`, `NHWC` for 2-D).
    transpose_kernel: flip the kernel's spatial dimensions and swap its feature dimensions
      (Keras's `Conv2DTranspose`, and the gradient of `conv`).
    precision: as for `conv_general_dilated`.
    preferred_element_type: as for `conv_general_dilated`.
    use_consistent_padding: read explicit pads as those of the forward convolution (PyTorch).

  Returns:
    `U[...]` laid out by the output spec; spatial size `(i - 1) * s + k - lo' - hi'` for
    input size `i`, dilated kernel size `k` and forward pads `lo'`, `hi'` ('SAME' gives
    `i * s`).

  Raises:
    ValueError: if the ranks differ or are below 2, for ranks above 5 without
      `dimension_numbers`, and as `conv_general_dilated`.
  """
  lhs_shape, rhs_shape = get_aval(lhs).shape, get_aval(rhs).shape
  ndims = len(lhs_shape)
  if ndims != len(rhs_shape) or ndims < 2:
    raise ValueError(f"conv_transpose requires lhs and rhs of equal rank at least 2, got "
                     f"shapes {lhs_shape} and {rhs_shape}.")
  if dimension_numbers is None:
    if ndims not in _TRANSPOSE_DEFAULTS:
      raise ValueError("No 4+ dimensional dimension_number defaults.")
    dimension_numbers = _TRANSPOSE_DEFAULTS[ndims]
  dn = conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers)
  k_sdims = _take(rhs_shape, dn.rhs_spec)[2:]
  rhs_dilation = (1,) * (ndims - 2) if rhs_dilation is None else tuple(rhs_dilation)
  if use_consistent_padding or (isinstance(padding, str) and padding in ("SAME", "VALID")):
    eff_k = [_dilate_dim(k, r) for k, r in zip(k_sdims, rhs_dilation)]
    per_dim = [padding] * len(strides) if isinstance(padding, str) else [tuple(p) for p in padding]
    pads = tuple(_conv_transpose_padding(k, s, p) for k, s, p in zip(eff_k, strides, per_dim))
  else:
    pads = padding
  if transpose_kernel:
    rhs = rev(rhs, dn.rhs_spec[2:])
    perm = list(range(ndims))
    perm[dn.rhs_spec[0]], perm[dn.rhs_spec[1]] = dn.rhs_spec[1], dn.rhs_spec[0]
    rhs = transpose(rhs, perm)
  return conv_general_dilated(lhs, rhs, (1,) * (ndims - 2), pads, strides, rhs_dilation, dn,
                              precision=precision,
                              preferred_element_type=preferred_element_type)


def conv_general_dilated_patches(lhs: Any, filter_shape: Sequence[int],
                                 window_strides: Sequence[int], padding: Any,
                                 lhs_dilation: Sequence[int] | None = None,
                                 rhs_dilation: Sequence[int] | None = None,
                                 dimension_numbers: Any = None, precision: Any = None,
                                 preferred_element_type: Any = None) -> Any:
  """Extracts the patches a convolution with `filter_shape` would see
  (JAX's `lax.conv_general_dilated_patches`).

  Each output feature holds one (input channel, filter position) pair, channel-major: the
  output has `C * prod(filter_shape)` features. Computed as a grouped convolution (one group
  per input channel) with a one-hot filter bank.

  Args:
    lhs: `T[N, C, *spatial]` in the layout `dimension_numbers` gives (default NCHW-like).
    filter_shape: the spatial window sizes.
    window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers, precision,
      preferred_element_type: as `conv_general_dilated`.

  Returns:
    The patches in the output layout of `dimension_numbers`.
  """
  filter_shape = tuple(int(d) for d in filter_shape)
  lhs_shape = get_aval(lhs).shape
  dtype = get_aval(lhs).dtype
  dnums = conv_dimension_numbers(lhs_shape, (1, 1) + filter_shape, dimension_numbers)
  lhs_spec, rhs_spec, _ = dnums
  size = math.prod(filter_shape)
  channels = lhs_shape[lhs_spec[1]]
  # rhs[o, 0, *window]: output feature o = (channel, position) selects one window position.
  onehot = np.eye(size, dtype=np.float64).reshape((size, 1) + filter_shape)
  rhs = np.tile(onehot, (channels,) + (1,) * (onehot.ndim - 1))
  rhs = np.moveaxis(rhs, (0, 1), (rhs_spec[0], rhs_spec[1])).astype(dtype)
  return conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                              dnums, feature_group_count=channels,
                              precision=None if precision is None else (precision, "default"),
                              preferred_element_type=preferred_element_type)


def conv_general_dilated_local(lhs: Any, rhs: Any, window_strides: Sequence[int], padding: Any,
                               filter_shape: Sequence[int],
                               lhs_dilation: Sequence[int] | None = None,
                               rhs_dilation: Sequence[int] | None = None,
                               dimension_numbers: Any = None, precision: Any = None) -> Any:
  """An unshared ("locally connected") convolution: every output position has its own
  kernel (JAX's `lax.conv_general_dilated_local`).

  Args:
    lhs: `T[N, C, *in_spatial]` in the layout `dimension_numbers` gives (default NCHW-like).
    rhs: the kernels, `T[O, I, *out_spatial]` in the rhs layout of `dimension_numbers`: its
      spatial axes index the OUTPUT positions, and `I = C * prod(filter_shape)` runs over
      (input channel, window position), channel-major, as `conv_general_dilated_patches`
      orders its features.
    window_strides, padding, lhs_dilation, rhs_dilation: as `conv_general_dilated` (the
      dilations of the input and of the receptive window).
    filter_shape: the receptive window's spatial sizes, in the rhs layout's spatial order.
    dimension_numbers: as `conv_general_dilated`.
    precision: a `Precision`, or a pair whose first entry is used for the patches.

  Returns:
    `T[N, O, *out_spatial]` in the output layout of `dimension_numbers`.

  Raises:
    TypeError / ValueError: from `conv_general_dilated_patches` or `dot_general` for shapes
      that do not fit (`rhs`'s `I` must be `C * prod(filter_shape)`, its spatial sizes those
      of the output).

  Algorithm: the definition. The patches (`conv_general_dilated_patches`) hold, at each
  output position, the window it sees; a `dot_general` contracts their features with the
  kernels' `I` axis, batched over the output positions, and the result is laid out as
  `dimension_numbers` asks.
  """
  first = precision[0] if isinstance(precision, (tuple, list)) else precision
  patches = conv_general_dilated_patches(lhs, filter_shape, window_strides, padding,
                                         lhs_dilation, rhs_dilation, dimension_numbers,
                                         precision=first)
  filter_shape = tuple(int(d) for d in filter_shape)
  _, rhs_spec, out_spec = conv_dimension_numbers(get_aval(lhs).shape, (1, 1) + filter_shape,
                                                 dimension_numbers)
  nsp = len(filter_shape)
  dn = (((out_spec[1],), (rhs_spec[1],)),
        (tuple(out_spec[2:]), tuple(rhs_spec[2:])))
  out = dot_general(patches, rhs, dn, precision=precision)   # [*out_spatial, N, O]
  perm = [0] * (nsp + 2)
  perm[out_spec[0]], perm[out_spec[1]] = nsp, nsp + 1
  for i in range(nsp):
    perm[out_spec[2 + i]] = i
  return transpose(out, tuple(perm))
