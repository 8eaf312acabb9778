"""`xla_computation`: the XLA HLO computation of a function for example arguments.

JAX removed its `xla_computation`; this one keeps its signature and behaviour: the function is
traced (with the named axes of `axis_env` bound, so collectives resolve without a pmap),
lowered to StableHLO text by our lowering rules, and converted to an XLA computation by the
runtime, from which the HLO text, the serialized HloModuleProto and a dot graph come. With an
axis environment the module has one replica per point of the axis grid and the collectives
become HLO collectives over replica groups (see `stagecraft.lax.parallel`).
"""
from __future__ import annotations

import contextlib
import functools
import operator
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from stagecraft import api_util, core, pjit
from stagecraft.interpreters import batching, lowering

__all__ = ["xla_computation", "XlaComputation", "computation_from_stablehlo"]

_PLATFORMS = ("cpu", "gpu", "cuda", "rocm", "tpu")


def computation_from_stablehlo(text: str, *, tuple_args: bool = False,
                               return_tuple: bool = True) -> "XlaComputation":
  """Converts StableHLO module text to an `XlaComputation` (through XLA's MLIR importer).

  Args:
    text: a StableHLO module (as `lowering.lower_jaxpr_to_module` emits).
    tuple_args: the entry computation takes one tuple parameter holding the arguments.
    return_tuple: the entry computation returns a tuple of the results.

  Raises:
    ValueError: if XLA rejects the module (its message is kept).
  """
  from jaxlib import xla_client as xc
  try:
    comp = xc._xla.mlir.mlir_module_to_xla_computation(text, use_tuple_args=tuple_args,
                                                       return_tuple=return_tuple)
  except Exception as e:   # XLA raises its own error types; keep the message.
    raise ValueError(f"XLA could not convert the StableHLO module to an HLO computation: "
                     f"{e}") from e
  return XlaComputation(comp, text)


class XlaComputation:
  """A built XLA computation (unoptimized HLO), as `xla_computation` returns it.

  Methods: `as_hlo_text()` (HLO text), `as_serialized_hlo_module_proto()` (bytes of an
  HloModuleProto), `as_hlo_dot_graph()` (Graphviz text), `as_hlo_module()` (XLA's
  HloModule), `as_stablehlo_text()` (the StableHLO module it was built from),
  `program_shape()`, `name()`.
  """
  __slots__ = ("_comp", "_text")

  def __init__(self, comp: Any, stablehlo_text: str):
    self._comp = comp
    self._text = stablehlo_text

  def as_hlo_text(self, print_large_constants: bool = False) -> str:
    """The computation as HLO text (`HloModule ...`, `ENTRY ...`)."""
    return self._comp.as_hlo_text(print_large_constants)

  def as_serialized_hlo_module_proto(self) -> bytes:
    """The computation as a serialized `xla.HloModuleProto`."""
    return self._comp.as_serialized_hlo_module_proto()

  def as_hlo_dot_graph(self) -> str:
    """The computation as a Graphviz dot graph."""
    return self._comp.as_hlo_dot_graph()

  def as_hlo_module(self) -> Any:
    """XLA's HloModule of the computation (for cost analysis)."""
    return self._comp.as_hlo_module()

  get_hlo_module = as_hlo_module

  def as_stablehlo_text(self) -> str:
    """The StableHLO module text the computation was converted from."""
    return self._text

  def program_shape(self) -> Any:
    return self._comp.program_shape()

  def name(self) -> str:
    return self._comp.name()

  @property
  def runtime_computation(self) -> Any:
    """The underlying runtime (jaxlib) XlaComputation."""
    return self._comp

  def __repr__(self):
    return f"XlaComputation({self.name()})"


def _check_axis_env(axis_env: Any) -> tuple[tuple[Any, int], ...]:
  if axis_env is None:
    return ()
  if isinstance(axis_env, (str, bytes)) or not isinstance(axis_env, Iterable):
    raise TypeError(f"xla_computation: axis_env must be a sequence of (axis name, size) pairs "
                    f"such as [('i', 4), ('j', 2)], got {axis_env!r}.")
  out, seen = [], set()
  for pos, entry in enumerate(axis_env):
    if isinstance(entry, (str, bytes)) or not isinstance(entry, (tuple, list)) \
        or len(entry) != 2:
      raise TypeError(f"xla_computation: axis_env[{pos}] must be an (axis name, size) pair, "
                      f"got {entry!r}. Write axis_env as e.g. [('i', 4), ('j', 2)].")
    name, size = entry
    try:
      hash(name)
    except TypeError:
      raise TypeError(f"xla_computation: the axis name of axis_env[{pos}] must be hashable "
                      f"(a string, typically), got {name!r}.") from None
    if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)) \
        or int(size) < 1:
      raise ValueError(f"xla_computation: the size of axis {name!r} (axis_env[{pos}]) must be "
                       f"a positive integer, got {size!r}.")
    if name in seen:
      raise ValueError(f"xla_computation: axis name {name!r} appears more than once in "
                       f"axis_env (again at position {pos}); give each axis a distinct name.")
    seen.add(name)
    out.append((name, int(size)))
  return tuple(out)


def _const_line(fb: lowering.FuncBuilder, value: Any, aval: core.ShapedArray) -> str:
  x = np.asarray(value, aval.dtype).reshape(aval.shape)
  name = fb.fresh()
  fb.emit(f"{name} = stablehlo.constant {lowering.dense_array(x)} : {lowering.ir_type(aval)}")
  return name


def _module_text(name: str, jaxpr: core.Jaxpr, consts: Sequence[Any], *,
                 axis_env: Sequence[tuple[Any, int]], donated: Sequence[bool],
                 platform: str) -> str:
  """A StableHLO module whose `main` takes the jaxpr's non-const invars; the leading
  `len(consts)` invars are the consts, baked in as constants."""
  nreplicas = functools.reduce(operator.mul, (s for _, s in axis_env), 1)
  module = lowering.ModuleContext(name, axis_env=axis_env, num_replicas=nreplicas,
                                  platform=platform)
  fb = lowering.FuncBuilder(module)
  nconst = len(consts)
  const_vars, arg_vars = jaxpr.invars[:nconst], jaxpr.invars[nconst:]
  const_names = [_const_line(fb, c, v.aval) for c, v in zip(consts, const_vars)]
  arg_names = [f"%arg{i}" for i in range(len(arg_vars))]
  with lowering.bound_axes(axis_env):
    outs = lowering.jaxpr_subcomp(fb, jaxpr, [], const_names + arg_names)
  args_txt = [f"{a}: {lowering.ir_type(v.aval)}"
              + (" {jax.buffer_donor = true}" if d else "")
              for a, v, d in zip(arg_names, arg_vars, donated)]
  out_types = [lowering.ir_type(v.aval) for v in jaxpr.outvars]
  body = "".join(f"    {ln}\n" for ln in fb.lines)
  ret = f"    return {', '.join(outs)} : {', '.join(out_types)}" if outs else "    return"
  main = (f"  func.func public @main({', '.join(args_txt)}) -> ({', '.join(out_types)}) {{\n"
          f"{body}{ret}\n  }}")
  funcs = "\n".join([main, *module.funcs])
  return (f"module @{module.name} attributes {{mhlo.num_partitions = 1 : i32, "
          f"mhlo.num_replicas = {nreplicas} : i32}} {{\n{funcs}\n}}\n")


def xla_computation(fun: Callable, static_argnums: int | Sequence[int] = (),
                    axis_env: Sequence[tuple[Any, int]] | None = None,
                    backend: str | None = None, tuple_args: bool | None = False,
                    return_shape: bool = False,
                    donate_argnums: int | Sequence[int] = ()) -> Callable:
  """Returns a function that builds the XLA computation of `fun` for example arguments.

  Args:
    fun: a function of arrays (pytrees of arrays, scalars).
    static_argnums: positions of arguments that are Python constants (folded in).
    axis_env: optional `[(name, size), ...]`, outermost axis first: the named axes that an
      enclosing pmap would bind, so that collectives (`psum`, `all_gather`, ...) lower to
      HLO collectives over replica groups; the module has `prod(sizes)` replicas, replica
      `r` sitting at the row-major position `r` of the axis grid.
    backend: 'cpu', 'gpu', 'cuda', 'rocm', 'tpu' or None; the HLO does not depend on it.
    tuple_args: the entry computation takes one tuple parameter holding all arguments; None
      tuples them when there are more than 100.
    return_shape: also return the output pytree of ShapeDtypeStructs.
    donate_argnums: positions of arguments whose buffers the computation may reuse.

  Returns:
    `f(*args, **kwargs) -> XlaComputation` (or `(XlaComputation, out_shapes)` with
    `return_shape`). Dynamic arguments may be arrays, scalars, ShapeDtypeStructs or any object
    with `shape` and `dtype` (namedtuples are pytrees). The entry computation takes one
    parameter per array leaf and returns a tuple of the output leaves.

  Raises:
    TypeError: for a non-callable `fun`, a malformed `axis_env`, or a non-array argument.
    ValueError: for a non-positive or repeated axis in `axis_env`, an unknown `backend`, an
      argument both static and donated.
    NameError: when `fun` uses an axis name that `axis_env` does not bind.

  Example:
    >>> import stagecraft.numpy as jnp
    >>> c = xla_computation(lambda x: jnp.sin(jnp.cos(x)))(3.)
    >>> 'cosine' in c.as_hlo_text() and 'sine' in c.as_hlo_text()
    True
  """
  if not callable(fun):
    raise TypeError(f"xla_computation: expected a callable as fun, got {fun!r} of type "
                    f"{type(fun).__name__}.")
  static_argnums = api_util.normalize_argnums(static_argnums, "static_argnums")
  donate_argnums = api_util.normalize_argnums(donate_argnums, "donate_argnums")
  both = sorted(set(static_argnums) & set(donate_argnums))
  if both:
    raise ValueError(f"xla_computation: arguments {both} are both static (static_argnums) and "
                     f"donated (donate_argnums); a static argument has no buffer to donate.")
  env = _check_axis_env(axis_env)
  if backend is not None and backend not in _PLATFORMS:
    raise ValueError(f"xla_computation: unknown backend {backend!r}; expected one of "
                     f"{list(_PLATFORMS)} or None.")
  fun_name = api_util.fun_name(fun)

  @functools.wraps(fun)
  def computation_maker(*args, **kwargs):
    with contextlib.ExitStack() as stack:
      for name, size in env:
        stack.enter_context(batching.extend_axis_env(name, size))
      traced, leaves = pjit.trace_flat(fun, args, kwargs, static_argnums, (),
                                      "xla_computation")
    # Which flat leaves are donated: leaves of the donated positional arguments.
    donated = []
    for i in range(len(args)):
      if i in static_argnums:
        continue
      n = len(api_util.flatten(args[i])[0])
      donated += [i in donate_argnums] * n
    donated += [False] * (len(leaves) - len(donated))
    jaxpr = traced.jaxpr.jaxpr
    text = _module_text(f"xla_computation_{fun_name}", jaxpr, traced.consts, axis_env=env,
                        donated=donated, platform=backend or "cpu")
    tup = len(leaves) > 100 if tuple_args is None else bool(tuple_args)
    comp = computation_from_stablehlo(text, tuple_args=tup, return_tuple=True)
    if return_shape:
      return comp, traced.out_shapes()
    return comp
  return computation_maker
