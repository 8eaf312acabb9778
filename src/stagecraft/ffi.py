"""`stagecraft.ffi` (JAX's `jax.ffi`): call compiled functions through XLA's foreign function
interface.

A handler written against XLA's typed FFI (`xla/ffi/api/ffi.h`, under `include_dir()`) and
compiled into a shared library is registered with `register_ffi_target(name,
pycapsule(lib.Handler))`; `ffi_call(name, result_shape_dtypes)` then returns a function whose
call binds the `ffi_call` primitive. Its lowering is a `stablehlo.custom_call @name` with
`api_version = 4` (the typed FFI), whose `backend_config` dictionary holds the call's keyword
arguments as typed attributes (`factor = 0x40000000 : f32`): Python ints become `i64`,
floats `f64`, bools `i1`, NumPy scalars keep their type, strings stay strings, NumPy arrays
become dense arrays, tuples and lists arrays, dicts dictionaries, dtypes types.

`ffi_call` follows JAX: results from `result_shape_dtypes` (anything with `shape` and
`dtype`), `has_side_effect=True` keeps unused calls alive (an effect), `vmap_method` picks the
batching (as `pure_callback`'s), `input_layouts`/`output_layouts` are major-to-minor axis
orders, `input_output_aliases` maps inputs to the outputs that reuse their buffers. It has
no derivative (use `custom_jvp`/`custom_vjp`).

The runtime's custom-call registry is jaxlib's (`xla_client.register_custom_call_target`;
DESIGN.md allows jaxlib as the runtime).
"""
from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping, Sequence
from typing import Any, Callable, Sequence

import jaxlib
import numpy as np
from jaxlib import xla_client as xc

from stagecraft import core, dtypes
from stagecraft.core import ShapedArray
from stagecraft.interpreters import ad, batching, lowering
from stagecraft.lax import shape as lax_shape
from stagecraft.lax.control_flow import loops

__all__ = ["ffi_call", "ffi_lowering", "build_ffi_lowering_function", "include_dir",
           "pycapsule", "register_ffi_target", "register_ffi_target_as_batch_partitionable",
           "register_ffi_type", "register_ffi_type_id", "FfiEffect", "ffi_call_p"]

VMAP_METHODS = ("sequential", "sequential_unrolled", "expand_dims", "broadcast_all",
                "legacy_vectorized", None)


# ---------------------------------------------------------------------------
# Registering targets


def register_ffi_target(name: str, fn: Any, platform: str = "cpu", api_version: int = 1,
                        **kwargs: Any) -> None:
  """Registers the FFI handler `fn` as the custom-call target `name`.

  Args:
    name: the target's name, as `ffi_call` names it.
    fn: a PyCapsule holding the handler's address (`pycapsule(lib.Handler)`), or a dict
      from FFI stage names (`"execute"`, `"instantiate"`, ...) to such capsules.
    platform: `"cpu"`, `"cuda"`, `"rocm"`, ...
    api_version: 1 for the typed FFI (the default), 0 for XLA's older custom-call API.
    **kwargs: passed to `xla_client.register_custom_call_target` (e.g. `traits`).
  """
  return xc.register_custom_call_target(name, fn, platform, api_version, **kwargs)


def register_ffi_type_id(name: str, obj: Any, platform: str = "cpu") -> None:
  """Not supported by this runtime (as in JAX 0.10); use `register_ffi_type`.

  Raises:
    ValueError: always.
  """
  raise ValueError("register_ffi_type_id is not supported after jaxlib version 381.")


def register_ffi_type(name: str, type_registration: Mapping[str, Any],
                      platform: str = "cpu") -> None:
  """Registers a user type of FFI handlers: `type_registration` is
  `{"type_id": capsule, "type_info": capsule (optional)}`."""
  return xc.register_custom_type(name, type_registration, platform=platform)


def register_ffi_target_as_batch_partitionable(name: str) -> None:
  """Marks the target `name` as batch-partitionable (its leading dimension may be split
  over devices by the SPMD partitioner)."""
  xc.register_custom_call_as_batch_partitionable(name)


def pycapsule(funcptr) -> Any:
  """Wraps a ctypes function pointer (`ctypes.cdll.LoadLibrary(path).Handler`) in the
  PyCapsule that `register_ffi_target` takes.

  Args:
    funcptr: a ctypes function (or anything `ctypes.c_void_p` can hold: an address).

  Returns:
    An unnamed PyCapsule of the address, without destructor.
  """
  address = ctypes.cast(funcptr, ctypes.c_void_p)
  new = ctypes.pythonapi.PyCapsule_New
  new.restype = ctypes.py_object
  new.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
  return new(address, None, None)


def include_dir() -> str:
  """The directory of the C++ headers of XLA's FFI shipped with the runtime (jaxlib):
  compile handlers with `-I include_dir()` and `#include "xla/ffi/api/ffi.h"`.

  Raises:
    RuntimeError: if jaxlib's directory cannot be found.
  """
  if getattr(jaxlib, "__file__", None):
    root = os.path.dirname(os.path.abspath(jaxlib.__file__))
  elif getattr(jaxlib, "__path__", None):
    root = list(jaxlib.__path__)[0]
  else:
    raise RuntimeError("Cannot determine jaxlib directory: neither __file__ nor __path__ is "
                       "available")
  return os.path.join(root, "include")


# ---------------------------------------------------------------------------
# Attributes: hashable in params, typed MLIR attributes in the program


class HashableArray:
  """A NumPy array held in params (hashed and compared by dtype, shape and contents)."""
  __slots__ = ("val",)

  def __init__(self, val: np.ndarray):
    self.val = np.array(val, copy=True)
    self.val.setflags(write=False)

  def _key(self):
    return (self.val.dtype.str, self.val.shape, self.val.tobytes())

  def __hash__(self):
    return hash(self._key())

  def __eq__(self, other):
    return type(other) is HashableArray and self._key() == other._key()

  def __repr__(self):
    return f"HashableArray({self.val!r})"


class FrozenDict(Mapping):
  """A dict held in params (hashable; its values must be hashable)."""
  __slots__ = ("_d", "_hash")

  def __init__(self, d: Mapping):
    self._d = dict(d)
    self._hash = hash(tuple(sorted((k, _hashable(k, v)) for k, v in self._d.items())))

  def __getitem__(self, k):
    return self._d[k]

  def __iter__(self):
    return iter(self._d)

  def __len__(self):
    return len(self._d)

  def __hash__(self):
    return self._hash

  def __eq__(self, other):
    return type(other) is FrozenDict and self._d == other._d

  def __repr__(self):
    return f"FrozenDict({self._d!r})"


def _hashable(name: str, v: Any) -> Any:
  if isinstance(v, np.ndarray):
    return HashableArray(v)
  if isinstance(v, dict):
    return FrozenDict(v)
  try:
    hash(v)
  except TypeError as e:
    raise TypeError(f"Non-hashable keyword argument to ffi_call {name}: {v}") from e
  return v


def _unhashable(v: Any) -> Any:
  if type(v) is HashableArray:
    return v.val
  if type(v) is FrozenDict:
    return dict(v)
  return v


def _float_text(v: Any, dtype: np.dtype) -> str:
  # NB: the bit pattern in hex keeps every value exact (nan and inf included).
  bits = np.asarray(v, dtype).reshape(()).view(f"u{dtype.itemsize}").item()
  return f"0x{bits:0{2 * dtype.itemsize}X}"


def _scalar_attribute(v: Any, dtype: np.dtype) -> str:
  dtype = np.dtype(dtype)
  if dtype == np.bool_:
    return "true" if bool(v) else "false"
  if dtypes.is_integer(dtype):
    return f"{int(v)} : {lowering.elt_type(dtype)}"
  if dtypes.is_float(dtype):
    return f"{_float_text(v, dtype)} : {lowering.elt_type(dtype)}"
  raise TypeError(f"Unsupported scalar attribute type: {dtype}")


def _string_attribute(s: str | bytes) -> str:
  raw = s.encode("utf-8") if isinstance(s, str) else bytes(s)
  out = []
  for b in raw:
    c = chr(b)
    if c in '"\\' or not " " <= c <= "~":
      out.append(f"\\{b:02X}")
    else:
      out.append(c)
  return '"' + "".join(out) + '"'


def _array_attribute(x: np.ndarray) -> str:
  if x.dtype == dtypes.float0:
    x = np.zeros(x.shape, np.bool_)
  if 0 in x.strides and x.size > 0:
    raise ValueError("NumPy arrays with zero strides are not supported as MLIR attributes")
  t = lowering.ir_type(ShapedArray(x.shape, x.dtype))
  return f"{lowering.dense_array(x)} : {t}"


def ir_attribute(v: Any) -> str:
  """The MLIR attribute text of a keyword argument of an FFI call (see the module doc).

  Raises:
    TypeError: for values of other types.
  """
  v = _unhashable(v)
  if isinstance(v, bool):
    return "true" if v else "false"
  if isinstance(v, int):
    return _scalar_attribute(v, np.int64)
  if isinstance(v, float):
    return _scalar_attribute(v, np.float64)
  if isinstance(v, (str, bytes)):
    return _string_attribute(v)
  if isinstance(v, np.ndarray):
    return _array_attribute(v)
  if isinstance(v, np.generic):
    return _scalar_attribute(v, v.dtype)
  if isinstance(v, np.dtype):
    return lowering.elt_type(v)
  if isinstance(v, Mapping):
    return "{" + ", ".join(f"{_attr_name(k)} = {ir_attribute(x)}" for k, x in v.items()) + "}"
  if isinstance(v, (list, tuple)):
    return "[" + ", ".join(ir_attribute(x) for x in v) + "]"
  if hasattr(v, "__jax_array__"):
    return ir_attribute(np.asarray(v.__jax_array__()))
  raise TypeError(f"No attribute handler defined for type: {type(v)}")


def _attr_name(k: str) -> str:
  if isinstance(k, str) and k.replace("_", "a").isalnum() and not k[0].isdigit():
    return k
  return _string_attribute(str(k))


# ---------------------------------------------------------------------------
# Lowering


def _default_layout(aval) -> tuple[int, ...]:
  """Row-major, minor-to-major (`(n-1, ..., 0)`)."""
  shape = () if aval is core.abstract_token else aval.shape
  return tuple(reversed(range(len(shape))))


def _layout_to_lowering(aval, layout) -> tuple[int, ...]:
  """A layout given to the lowering (minor-to-major, or a Layout object) as the custom
  call's minor-to-major order."""
  if layout is None:
    return _default_layout(aval)
  if hasattr(layout, "major_to_minor"):
    if getattr(layout, "tiling", None) is not None:
      raise ValueError("The FFI does not support layouts with tiling")
    return tuple(layout.major_to_minor[::-1])
  return tuple(int(i) for i in layout)


def _layout_text(layout: Sequence[int]) -> str:
  n = len(layout)
  if n == 0:
    return "dense<> : tensor<0xindex>"
  return f"dense<[{', '.join(str(int(i)) for i in layout)}]> : tensor<{n}xindex>"


def build_ffi_lowering_function(call_target_name: str, *,
                                operand_layouts: Sequence[Any] | None = None,
                                result_layouts: Sequence[Any] | None = None,
                                backend_config: Mapping[str, Any] | str | None = None,
                                skip_ffi_layout_processing: bool = False,
                                **lowering_args: Any) -> Callable[..., list[str]]:
  """A function `(ctx, *operands, **attributes) -> result names` that emits the custom call
  of the FFI target `call_target_name` (the text-emitting analogue of JAX's, for use in
  lowering rules of user primitives: `lowering.register_lowering(p, ffi_lowering(name))`).

  Args:
    call_target_name: the registered target.
    operand_layouts, result_layouts: one minor-to-major layout (or None: row-major) per
      operand / result.
    backend_config: a dict of attributes merged with the keyword arguments (api_version 4),
      or the opaque string of an older API version.
    skip_ffi_layout_processing: emit no layouts.
    **lowering_args: `api_version` (default 4), `has_side_effect`,
      `operand_output_aliases` (`{input index: output index}`).

  Raises:
    ValueError: for a string `backend_config` with api_version 4, or keyword attributes with
      an older api_version.
  """
  def lower(ctx, *operands, **params) -> list[str]:
    args = dict(lowering_args)
    api_version = int(args.pop("api_version", 4))
    has_side_effect = bool(args.pop("has_side_effect", False))
    aliases = args.pop("operand_output_aliases", None) or {}
    if args:
      raise TypeError(f"ffi lowering: unexpected arguments {sorted(args)}.")
    if api_version >= 4:
      if backend_config is not None and not isinstance(backend_config, dict):
        raise ValueError("When api_version > 4, backend_config must be a dictionary.")
      config = {**(backend_config or {}), **params}
      config_text = ("{" + ", ".join(f"{_attr_name(k)} = {ir_attribute(v)}"
                                     for k, v in config.items()) + "}")
    else:
      if params:
        raise ValueError("The use of ffi_call attributes requires a custom call API version "
                         f"of at least 4; got api_version={api_version}.")
      config_text = _string_attribute(backend_config or "")
    attrs = [f"call_target_name = {_string_attribute(call_target_name)}",
             f"api_version = {api_version} : i32",
             f"has_side_effect = {'true' if has_side_effect else 'false'}",
             f"backend_config = {config_text}"]
    if not skip_ffi_layout_processing:
      ins = (operand_layouts if operand_layouts is not None else [None] * len(ctx.avals_in))
      outs = (result_layouts if result_layouts is not None else [None] * len(ctx.avals_out))
      attrs.append("operand_layouts = [" + ", ".join(
          _layout_text(_layout_to_lowering(a, l)) for a, l in zip(ctx.avals_in, ins)) + "]")
      attrs.append("result_layouts = [" + ", ".join(
          _layout_text(_layout_to_lowering(a, l)) for a, l in zip(ctx.avals_out, outs)) + "]")
    if aliases:
      multiple = len(ctx.avals_out) > 1
      attrs.append("output_operand_aliases = [" + ", ".join(
          f"#stablehlo.output_operand_alias<output_tuple_indices = "
          f"[{o if multiple else ''}], operand_index = {i}, operand_tuple_indices = []>"
          for i, o in sorted(aliases.items())) + "]")
    return ctx.op("stablehlo.custom_call", list(operands), attrs=", ".join(attrs))
  return lower


def ffi_lowering(call_target_name: str, *, operand_layouts: Sequence[Any] | None = None,
                 result_layouts: Sequence[Any] | None = None,
                 backend_config: Mapping[str, Any] | str | None = None,
                 skip_ffi_layout_processing: bool = False,
                 **lowering_args: Any) -> Callable[..., list[str]]:
  """A lowering rule (`rule(ctx, *operands, **params) -> result names`) that calls the FFI
  target `call_target_name`, the params becoming attributes. Arguments as
  `build_ffi_lowering_function`."""
  return build_ffi_lowering_function(
      call_target_name, operand_layouts=operand_layouts, result_layouts=result_layouts,
      backend_config=backend_config, skip_ffi_layout_processing=skip_ffi_layout_processing,
      **lowering_args)


# ---------------------------------------------------------------------------
# ffi_call


def _result_avals(results: Sequence[Any]) -> tuple:
  avals = []
  for i, r in enumerate(results):
    if r is core.abstract_token:
      avals.append(r)
      continue
    if not hasattr(r, "shape") or not hasattr(r, "dtype"):
      raise ValueError("All elements of result_shape_dtypes must have 'shape' and 'dtype' "
                       f"attributes. Got {r} at position {i}.")
    # NB: the dtype is kept as given (float64 stays float64 with x64 off), as in JAX.
    avals.append(ShapedArray(tuple(int(d) for d in r.shape), np.dtype(r.dtype)))
  return tuple(avals)


def _layouts_for_call(avals, layouts) -> tuple:
  """User layouts (major-to-minor sequences, Layout objects or None) as minor-to-major."""
  out = []
  for aval, layout in zip(avals, layouts):
    if layout is None or hasattr(layout, "major_to_minor"):
      out.append(_layout_to_lowering(aval, layout))
    else:
      out.append(tuple(int(i) for i in layout)[::-1])
  return tuple(out)


def _compatible(a, b) -> bool:
  if a is core.abstract_token or b is core.abstract_token:
    return a is b
  return a.shape == b.shape and a.dtype == b.dtype


def check_aliases(input_output_aliases: dict | None, num_args: int, in_avals: Sequence[Any],
                  result_avals: Sequence[Any]) -> list[tuple[int, int]]:
  """The `(input, output)` pairs of `input_output_aliases` (sorted), checked as JAX's
  `ffi_call` and `buffer_callback` check them.

  Raises:
    ValueError: JAX's messages, for an index out of range or an input and an output of
      different shapes or dtypes."""
  pairs = []
  for i, o in sorted((input_output_aliases or {}).items()):
    i, o = int(i), int(o)
    if i >= num_args:
      raise ValueError(f"input_output_aliases contains the mapping '{i}:{o}' with input "
                       f"index {i} outside the range [0, {num_args}).")
    if o >= len(result_avals):
      raise ValueError(f"input_output_aliases contains the mapping '{i}:{o}' with output "
                       f"index {o} outside the range [0, {len(result_avals)}).")
    if not _compatible(in_avals[i], result_avals[o]):
      raise ValueError(f"input_output_aliases contains the mapping '{i}:{o}' referring to "
                       f"an input with abstract value {in_avals[i]} and an output with a "
                       f"different abstract value {result_avals[o]}.")
    pairs.append((i, o))
  return pairs


def ffi_call(target_name: str, result_shape_dtypes: Any, *, has_side_effect: bool = False,
             vmap_method: str | None = None, input_layouts: Sequence[Any] | None = None,
             output_layouts: Any = None, input_output_aliases: dict[int, int] | None = None,
             custom_call_api_version: int = 4,
             legacy_backend_config: str | None = None) -> Callable[..., Any]:
  """A function that calls the FFI target `target_name` (registered with
  `register_ffi_target`) on its positional array arguments; its keyword arguments become
  the handler's attributes.

  Args:
    target_name: the registered target.
    result_shape_dtypes: an object with `shape` and `dtype` (e.g. `ShapeDtypeStruct`), or a
      list/tuple of them (the call then returns a list/tuple); `core.abstract_token` for a
      token result.
    has_side_effect: keep the call even when its results are unused.
    vmap_method: how `vmap` runs it: `"sequential"` (one call per example in a loop),
      `"sequential_unrolled"`, `"expand_dims"` (unbatched inputs get a leading 1),
      `"broadcast_all"` (every input gets the batch size), `"legacy_vectorized"`; None:
      `vmap` raises.
    input_layouts: one per input: None (row-major) or the major-to-minor axis order.
    output_layouts: the same for the results (one layout for a single result).
    input_output_aliases: `{input index: output index}`; the output reuses the input's
      buffer (same shape, dtype and layout).
    custom_call_api_version: 4 (the typed FFI) or an older custom-call API.
    legacy_backend_config: the opaque configuration string of an API version below 4.

  Returns:
    `call(*args, **attributes)`: an array, or a list/tuple of arrays.

  Raises:
    ValueError: for an unknown `vmap_method`, results without shape/dtype, a
      `legacy_backend_config` with API version 4, and (at call time) layouts or aliases that
      do not fit the arguments and results.
    TypeError: (at call time) for unhashable attributes.
  """
  allowed = list(VMAP_METHODS)
  if vmap_method not in allowed:
    raise ValueError(f"vmap_method must be on of the allowed methods {allowed}, but got: "
                     f"{vmap_method}")
  if isinstance(result_shape_dtypes, Sequence):
    multiple = True
    result_avals = _result_avals(result_shape_dtypes)
    out_layouts = output_layouts
  else:
    multiple = False
    result_avals = _result_avals([result_shape_dtypes])
    out_layouts = (output_layouts,)
  if custom_call_api_version >= 4 and legacy_backend_config is not None:
    raise ValueError("The use of the legacy_backend_config parameter requires "
                     f"custom_call_api_version < 4; got {custom_call_api_version}.")

  def call(*args, **kwargs):
    in_avals = [core.get_aval(x) for x in args]
    if input_layouts is None:
      in_lay = tuple(_default_layout(a) for a in in_avals)
    else:
      if len(input_layouts) != len(in_avals):
        raise ValueError(f"The number of input arguments ({len(in_avals)}) must equal the "
                         f"number of input layouts ({len(input_layouts)}).")
      in_lay = _layouts_for_call(in_avals, input_layouts)
    if out_layouts is None:
      out_lay = tuple(_default_layout(a) for a in result_avals)
    else:
      if len(out_layouts) != len(result_avals):
        raise ValueError(f"The number of outputs ({len(result_avals)}) must equal the "
                         f"number of output layouts ({len(out_layouts)}).")
      out_lay = _layouts_for_call(result_avals, out_layouts)
    aliases = []
    for i, o in check_aliases(input_output_aliases, len(args), in_avals, result_avals):
      if in_lay[i] != out_lay[o]:
        raise ValueError(f"input_output_aliases contains the mapping '{i}:{o}' referring to "
                         f"an input with layout {in_lay[i]} and an output with a different "
                         f"layout {out_lay[o]}.")
      aliases.append((i, o))
    attributes = tuple((k, _hashable(k, v)) for k, v in sorted(kwargs.items()))
    outs = ffi_call_p.bind(
        *args, result_avals=result_avals, vmap_method=vmap_method, target_name=target_name,
        has_side_effect=has_side_effect, input_layouts=in_lay, output_layouts=out_lay,
        input_output_aliases=tuple(aliases), custom_call_api_version=custom_call_api_version,
        legacy_backend_config=legacy_backend_config, attributes=attributes)
    if multiple:
      return tuple(outs) if isinstance(result_shape_dtypes, tuple) else list(outs)
    return outs[0]
  return call


class FfiEffect(core.Effect):
  """The effect of an `ffi_call` with `has_side_effect=True`: never removed as dead code."""

  def __str__(self):
    return "FFI"


ffi_effect = FfiEffect()


def _ffi_call_abstract_eval(*avals_in, result_avals, **_):
  return list(result_avals)


def _ffi_call_effects(has_side_effect, **_):
  return frozenset({ffi_effect}) if has_side_effect else core.no_effects


def _ffi_call_lowering(ctx, *operands, target_name, has_side_effect, input_layouts,
                       output_layouts, input_output_aliases, custom_call_api_version,
                       legacy_backend_config, attributes, **_):
  rule = build_ffi_lowering_function(
      target_name, operand_layouts=input_layouts, result_layouts=output_layouts,
      backend_config=legacy_backend_config, has_side_effect=has_side_effect,
      operand_output_aliases=dict(input_output_aliases), api_version=custom_call_api_version)
  return rule(ctx, *operands, **{k: _unhashable(v) for k, v in attributes})


def _ffi_call_jvp(primals, tangents, *, target_name, **_):
  raise ValueError(f"The FFI call to `{target_name}` cannot be differentiated. You can use "
                   "`custom_jvp` or `custom_vjp` to add support.")


def _ffi_call_transpose(ct, *args, target_name, **_):
  raise ValueError(f"The FFI call to `{target_name}` cannot be differentiated. You can use "
                   "`custom_jvp` or `custom_vjp` to add support.")


def _with_batch_dim(layout):
  """A minor-to-major layout with a new leading (slowest) axis."""
  return None if layout is None else tuple(n + 1 for n in layout) + (0,)


def _ffi_call_batch(args, dims, *, vmap_method, result_avals, **params):
  """JAX's batching of `ffi_call` (as `pure_callback`'s): see `ffi_call`'s `vmap_method`."""
  size = next(core.get_aval(x).shape[d] for x, d in zip(args, dims)
              if d is not batching.not_mapped)
  mapped = [d is not batching.not_mapped for d in dims]
  moved = [batching.moveaxis(x, d, 0) if m else x for x, d, m in zip(args, dims, mapped)]
  batched_avals = tuple(a if a is core.abstract_token else
                        ShapedArray((size, *a.shape), a.dtype) for a in result_avals)
  if vmap_method in ("sequential", "sequential_unrolled"):
    def one(*xs):
      it = iter(xs)
      full = [next(it) if m else x for x, m in zip(moved, mapped)]
      return ffi_call_p.bind(*full, vmap_method=vmap_method, result_avals=result_avals,
                             **params)
    batched = [x for x, m in zip(moved, mapped) if m]
    if vmap_method == "sequential_unrolled":
      rows = [one(*[x[i] for x in batched]) for i in range(size)]
      outs = [lax_shape.concatenate([lax_shape.expand_dims(r[k], (0,)) for r in rows], 0)
              for k in range(len(result_avals))]
    else:
      outs = list(loops.map(lambda xs: one(*xs), batched))
    return outs, [0] * len(outs)
  if vmap_method not in ("expand_dims", "broadcast_all", "legacy_vectorized"):
    raise NotImplementedError(
        "vmap is only supported for the ffi_call primitive when vmap_method is one of "
        "'sequential', 'sequential_unrolled', 'expand_dims', 'broadcast_all', or "
        f"'legacy_vectorized'. Got vmap_method={vmap_method!r}.")
  params = dict(params)
  params["output_layouts"] = tuple(_with_batch_dim(l) for l in params["output_layouts"])
  if vmap_method == "legacy_vectorized":
    new_args = moved
    params["input_layouts"] = tuple(_with_batch_dim(l) if m else l
                                    for l, m in zip(params["input_layouts"], mapped))
  else:
    n = 1 if vmap_method == "expand_dims" else size
    new_args = [x if m else lax_shape.broadcast(x, (n,)) for x, m in zip(moved, mapped)]
    params["input_layouts"] = tuple(_with_batch_dim(l) for l in params["input_layouts"])
  outs = ffi_call_p.bind(*new_args, vmap_method=vmap_method, result_avals=batched_avals,
                         **params)
  return list(outs), [0] * len(outs)


ffi_call_p = core.Primitive("ffi_call")
ffi_call_p.multiple_results = True
# impl: the generic one (lower the one-equation program, run it)
ffi_call_p.def_abstract_eval(_ffi_call_abstract_eval)
ffi_call_p.def_effects(_ffi_call_effects)
lowering.register_lowering(ffi_call_p, _ffi_call_lowering)
ad.primitive_jvps[ffi_call_p] = _ffi_call_jvp
ad.primitive_transposes[ffi_call_p] = _ffi_call_transpose
batching.primitive_batchers[ffi_call_p] = _ffi_call_batch
core.pp_param_order[ffi_call_p] = ("attributes", "custom_call_api_version", "has_side_effect",
                                   "input_layouts", "input_output_aliases",
                                   "legacy_backend_config", "output_layouts", "result_avals",
                                   "target_name", "vmap_method")
