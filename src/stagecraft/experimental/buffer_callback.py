"""`stagecraft.experimental.buffer_callback`: JAX 0.10.2's `jax.experimental.buffer_callback`.

`buffer_callback(callback, result_shape_dtypes)(*args)` binds one `buffer_callback` equation
(JAX's params); its lowering is a custom call of the XLA runtime's
``xla_buffer_python_cpu_callback`` target, whose `index` names the host callable handed to
the compiler, so the running program calls `callback(ctx, out, *args)` with jaxlib's mutable
`Buffer`s (NumPy-viewable on CPU) to write the results in place. Inputs aliased to outputs
(`input_output_aliases`) share the output's buffer, as in JAX.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from jaxlib._jax import ffi as _ffi_lib

from stagecraft import core, ffi, tree_util
from stagecraft.core import ShapedArray
from stagecraft.interpreters import ad, batching, lowering
from stagecraft.lax.control_flow import loops
from stagecraft.pjit import jit as _jit
from stagecraft.runtime import dispatch

__all__ = ["Buffer", "ExecutionContext", "ExecutionStage", "buffer_callback"]

Buffer = _ffi_lib.Buffer
ExecutionStage = _ffi_lib.ExecutionStage
ExecutionContext = _ffi_lib.ExecutionContext


def buffer_callback(callback: Callable[..., None], result_shape_dtypes: Any, *,
                    has_side_effect: bool = False, vmap_method: str | None = None,
                    input_output_aliases: dict[int, int] | None = None,
                    command_buffer_compatible: bool = False) -> Callable[..., Any]:
  """A function of arrays that runs `callback(ctx, out, *args, **kwargs)` on the host with
  mutable buffers: `out` is a pytree of `Buffer`s shaped as `result_shape_dtypes` (leaves
  with `shape` and `dtype`) to overwrite; `args` mirror the inputs as `Buffer`s. The
  callback must return None.

  Args:
    has_side_effect: keep the call even when its results are unused.
    vmap_method: "sequential" / "sequential_unrolled" run the call per batch element under
      `vmap`; other values raise NotImplementedError there.
    input_output_aliases: {flat input index: flat output index}: the output's buffer starts
      as that input.
    command_buffer_compatible: a GPU option, kept in the params.

  Raises:
    ValueError (when called): an alias's input or output index out of range, or an alias
      between an input and an output of different types (JAX's texts); under `jvp`/`grad`
      and transposition (JAX's texts). A callback returning a value fails the program run
      (JaxRuntimeError, as JAX's).
  """
  flat_shapes, out_tree = tree_util.tree_flatten(result_shape_dtypes)
  result_avals = tuple(ShapedArray(tuple(x.shape), np.dtype(x.dtype)) for x in flat_shapes)

  def wrapped(*args, **kwargs):
    flat_args, in_tree = tree_util.tree_flatten((args, kwargs))
    in_avals = [core.get_aval(x) for x in flat_args]
    aliases = ffi.check_aliases(input_output_aliases, len(args), in_avals, result_avals)
    outs = buffer_callback_p.bind(
        *flat_args, callback=callback, result_avals=result_avals,
        in_tree=in_tree, out_tree=out_tree,
        vmap_method=vmap_method, has_side_effect=has_side_effect,
        input_output_aliases=tuple(aliases),
        command_buffer_compatible=command_buffer_compatible)
    return tree_util.tree_unflatten(out_tree, outs)
  return wrapped


class BufferCallbackEffect(core.Effect):
  """The effect of a `buffer_callback` with `has_side_effect=True` (kept by DCE)."""

  def __str__(self):
    return "BufferCallback"


_effect = BufferCallbackEffect()

buffer_callback_p = core.Primitive("buffer_callback")
buffer_callback_p.multiple_results = True
buffer_callback_p.def_abstract_eval(lambda *avals, result_avals, **_: list(result_avals))
buffer_callback_p.def_effects(
    lambda has_side_effect, **_: frozenset({_effect}) if has_side_effect else core.no_effects)


def _impl(*args, **params):
  # NB: run as its own compiled program, as JAX's (the callback needs the runtime's buffers)
  return _jit(lambda *xs: buffer_callback_p.bind(*xs, **params))(*args)


buffer_callback_p.def_impl(_impl)


def _jvp(*args, **kwargs):
  raise ValueError("Buffer callbacks do not support JVP. Please use `jax.custom_jvp` to use "
                   "callbacks while taking gradients.")


def _transpose(*args, **kwargs):
  raise ValueError("Buffer callbacks do not support transpose. Please use `jax.custom_vjp` "
                   "to use callbacks while taking gradients.")


ad.primitive_jvps[buffer_callback_p] = _jvp
ad.primitive_transposes[buffer_callback_p] = _transpose


def _batch(args, dims, *, vmap_method, result_avals, **params):
  if vmap_method not in ("sequential", "sequential_unrolled"):
    raise NotImplementedError(
        "vmap is only supported for the buffer_callback primitive when vmap_method is one "
        "of 'sequential' or 'sequential_unrolled' in stagecraft. "
        f"Got vmap_method={vmap_method!r}.")
  mapped = [d is not batching.not_mapped for d in dims]
  moved = [batching.moveaxis(x, d, 0) if m else x for x, d, m in zip(args, dims, mapped)]

  def one(xs):
    it = iter(xs)
    full = [next(it) if m else x for x, m in zip(moved, mapped)]
    return buffer_callback_p.bind(*full, vmap_method=vmap_method, result_avals=result_avals,
                                  **params)
  outs = list(loops.map(one, [x for x, m in zip(moved, mapped) if m]))
  return outs, [0] * len(outs)


batching.primitive_batchers[buffer_callback_p] = _batch


def _lowering(ctx, *args, callback, in_tree, out_tree, has_side_effect,
              input_output_aliases, command_buffer_compatible, **_):
  in_def, out_def = in_tree, out_tree
  n_in = len(args)

  def host(exec_ctx, *bufs):
    py_args, py_kwargs = tree_util.tree_unflatten(in_def, list(bufs[:n_in]))
    out = tree_util.tree_unflatten(out_def, list(bufs[n_in:]))
    if callback(exec_ctx, out, *py_args, **py_kwargs) is not None:
      raise ValueError("buffer_callback callback must not return any values.")
    return ()
  index = ctx.module.add_host_callback(dispatch.HostCallback(host, "buffer_callback"))
  rule = ffi.ffi_lowering("xla_buffer_python_cpu_callback", has_side_effect=has_side_effect,
                          operand_output_aliases=dict(input_output_aliases))
  return rule(ctx, *args, index=np.uint64(index))


lowering.register_lowering(buffer_callback_p, _lowering)
# Printed as JAX prints it: params sorted by name, the callback by its repr, address masked.
core.pp_eqn_rules[buffer_callback_p] = lambda eqn, context: sorted(
    (k, core.pp_masked_str(v) if k == "callback" else v) for k, v in eqn.params.items())


def __dir__():
  # NB: JAX's module re-exports these names only
  return sorted(__all__)
