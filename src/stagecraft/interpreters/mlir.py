"""JAX's `jax.interpreters.mlir` names over stagecraft's text lowering (`lowering.py`).

stagecraft lowers a jaxpr to StableHLO *text*: a lowering rule gets SSA value names (`"%3"`)
and emits lines, so MLIR's Python objects (`mlir.ir.Value`, `hlo.AddOp`, ...) do not exist
here. Rules written for JAX carry over in two ways:

- `register_lowering(p, lower_fun(f, multiple_results=False))`: `lower_fun` traces `f` (a
  function of stagecraft arrays, e.g. the primitive's impl) on the rule's operand avals into a
  jaxpr and emits that jaxpr in place (`lowering.jaxpr_subcomp`). This is how most library
  primitives are lowered in JAX too, and it works unchanged.
- a rule in stagecraft's own form, `rule(ctx, *operands, **params) -> [ssa names]`, using
  `ctx.op`, `ctx.elementwise`, `ctx.constant` (see `lowering.LoweringRuleContext`).

A rule that builds MLIR objects (`mlir.ir.*`, `mlir.ir_constant`, `hlo.*`) gets a
`NotImplementedError` (or, for an error raised inside the rule, a note) that says to use
`lower_fun`. Platform-specific rules (`platform="cuda"`) take precedence over the common one
on that platform only, as in JAX.

Example (the lowering of a library primitive, as equinox writes it):

  >>> import stagecraft, stagecraft.numpy as jnp
  >>> from stagecraft import core
  >>> from stagecraft.interpreters import mlir
  >>> double_p = core.Primitive("double_example")
  >>> _ = double_p.def_impl(lambda x: x * 2)
  >>> _ = double_p.def_abstract_eval(lambda x: x)
  >>> mlir.register_lowering(double_p, mlir.lower_fun(lambda x: x * 2, multiple_results=False))
  >>> float(stagecraft.jit(double_p.bind)(1.5))
  3.0
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from stagecraft import core
from stagecraft.core import ClosedJaxpr, Jaxpr
from stagecraft.errors import MissingRuleError
from stagecraft.interpreters import lowering
from stagecraft.interpreters import partial_eval as pe
from stagecraft.interpreters.lowering import LoweringRuleContext, ModuleContext
from stagecraft.runtime import client
from stagecraft.sharding import Mesh

__all__ = ["register_lowering", "lower_fun", "LoweringRuleContext", "ModuleContext",
           "LoweringRule", "core_call_lowering", "ir", "Value", "Token", "MeshAxisName",
           "Mesh", "lowerable_effects", "DEVICE_TO_DEVICE_TYPE", "SEND_TO_HOST_TYPE",
           "RECV_FROM_HOST_TYPE", *(
               # MLIR-object helpers: they raise NotImplementedError saying to use lower_fun.
               "aval_to_ir_type", "aval_to_ir_types", "dtype_to_ir_type", "ir_constant",
               "ir_constants", "ir_attribute", "dense_int_array", "dense_int_elements",
               "i32_attr", "i64_attr", "shape_tensor", "token_type", "flatten_ir_types",
               "flatten_ir_values", "unflatten_ir_values_like_types", "make_ir_context",
               "merge_mlir_modules", "module_to_bytecode", "module_to_string",
               "jaxpr_subcomp", "lower_jaxpr_to_fun", "lower_jaxpr_to_module",
               "register_constant_handler"), "emit_python_callback",
           "register_python_callback_emitter"]

#: A lowering rule: `rule(ctx, *operands, **params) -> list of SSA value names`.
LoweringRule = Callable[..., Sequence[str]]
#: An IR value of a lowering rule: an SSA value name (`"%3"`) in stagecraft's text lowering.
Value = str
#: An ordered-effect token: an SSA value name, too (`ctx.get_token()`).
Token = str
#: The name of a mesh axis (any hashable).
MeshAxisName = Any

# Channel types of host transfers (XLA's ChannelHandle.Type values, as JAX's constants).
DEVICE_TO_DEVICE_TYPE = 1
SEND_TO_HOST_TYPE = 2
RECV_FROM_HOST_TYPE = 3

#: Effect types allowed in lowered programs (JAX's registry). stagecraft lowers every effect
#: that has a lowering rule, so adding types here is accepted and changes nothing.
lowerable_effects = core.EffectTypeSet()


# ---------------------------------------------------------------------------
# MLIR objects do not exist: a clear error instead


def mlir_objects_error(what: str) -> NotImplementedError:
  """The error for a use of MLIR's Python objects (`what`: the name that was used)."""
  return NotImplementedError(
      f"{what}: stagecraft lowers to StableHLO text, so MLIR's Python objects (mlir.ir, "
      f"hlo/stablehlo dialect ops, ir_constant, aval_to_ir_type) do not exist. Write the "
      f"lowering rule with stagecraft.interpreters.mlir.lower_fun: "
      f"`mlir.register_lowering(p, mlir.lower_fun(impl, multiple_results=False))`, where "
      f"`impl` computes the primitive with stagecraft.numpy / stagecraft.lax functions; or "
      f"emit text with a stagecraft rule (docs/extending.md).")


class MlirObjectsUnavailable:
  """Stands for an MLIR Python module (`mlir.ir`, a dialect): any attribute raises the
  NotImplementedError of `mlir_objects_error`, naming what was used."""
  __slots__ = ("_name",)

  def __init__(self, name: str):
    self._name = name

  def __getattr__(self, attr: str):
    if attr.startswith("__") and attr.endswith("__"):
      raise AttributeError(attr)
    raise mlir_objects_error(f"{self._name}.{attr}")

  def __call__(self, *args, **kwargs):
    raise mlir_objects_error(f"{self._name}(...)")

  def __repr__(self):
    return f"<{self._name}: not available (stagecraft lowers to StableHLO text)>"


#: JAX's `mlir.ir` (MLIR's Python bindings): not available; any use raises.
ir = MlirObjectsUnavailable("mlir.ir")


def _unavailable(name: str) -> Callable:
  def fn(*args, **kwargs):
    raise mlir_objects_error(f"mlir.{name}")
  fn.__name__ = fn.__qualname__ = name
  fn.__doc__ = (f"JAX's `mlir.{name}` builds MLIR objects, which stagecraft's text lowering "
                f"does not have.\n\nRaises:\n  NotImplementedError: always; use `lower_fun`.")
  return fn


aval_to_ir_type = _unavailable("aval_to_ir_type")
aval_to_ir_types = _unavailable("aval_to_ir_types")
dtype_to_ir_type = _unavailable("dtype_to_ir_type")
ir_constant = _unavailable("ir_constant")
ir_constants = _unavailable("ir_constants")
ir_attribute = _unavailable("ir_attribute")
dense_int_array = _unavailable("dense_int_array")
dense_int_elements = _unavailable("dense_int_elements")
i32_attr = _unavailable("i32_attr")
i64_attr = _unavailable("i64_attr")
shape_tensor = _unavailable("shape_tensor")
token_type = _unavailable("token_type")
flatten_ir_types = _unavailable("flatten_ir_types")
flatten_ir_values = _unavailable("flatten_ir_values")
unflatten_ir_values_like_types = _unavailable("unflatten_ir_values_like_types")
make_ir_context = _unavailable("make_ir_context")
merge_mlir_modules = _unavailable("merge_mlir_modules")
module_to_bytecode = _unavailable("module_to_bytecode")
module_to_string = _unavailable("module_to_string")
jaxpr_subcomp = _unavailable("jaxpr_subcomp")
lower_jaxpr_to_fun = _unavailable("lower_jaxpr_to_fun")
lower_jaxpr_to_module = _unavailable("lower_jaxpr_to_module")


# The host-callback machinery is a higher layer's (stagecraft.lax.callback), which registers
# its emitter here when it is imported.
_python_callback_emitters: list[Callable] = []


def register_python_callback_emitter(fn: Callable) -> None:
  """Registers the function behind `emit_python_callback` (stagecraft.lax.callback's)."""
  _python_callback_emitters[:] = [fn]


def emit_python_callback(ctx, callback, token, operands, operand_avals, result_avals, *,
                         has_side_effect, returns_token=True, partitioned=False,
                         sharding=None):
  """Emits a custom call that runs `callback` on the host (JAX's `mlir.emit_python_callback`;
  see `stagecraft.lax.callback.emit_python_callback`).

  `callback(*numpy operands)` returns a sequence of array-likes of `result_avals`; the
  operands are SSA names. Returns `(result SSA names, new token or None, keepalive)`.

  Raises:
    NotImplementedError: for `partitioned=True`.
  """
  if not _python_callback_emitters:   # stagecraft.lax imports it; stagecraft imports lax
    raise NotImplementedError("mlir.emit_python_callback: stagecraft.lax is not imported")
  return _python_callback_emitters[0](
      ctx, callback, token, operands, operand_avals, result_avals,
      has_side_effect=has_side_effect, returns_token=returns_token, partitioned=partitioned,
      sharding=sharding)


register_constant_handler = _unavailable("register_constant_handler")


# ---------------------------------------------------------------------------
# lower_fun


def _emit_const(ctx: LoweringRuleContext, value: Any) -> str:
  """A `stablehlo.constant` holding the concrete `value` (a constant `lower_fun`'s function
  closed over, or made with NumPy)."""
  if isinstance(value, core.Tracer):
    raise TypeError(f"lower_fun: the lowered function closes over a traced value "
                    f"({value!r}); a lowering may only close over concrete arrays. Pass the "
                    f"value to the primitive as an operand instead.")
  aval = core.get_aval(value)
  host = np.asarray(value, aval.dtype)
  name = ctx.fb.fresh()
  ctx.fb.emit(f"{name} = stablehlo.constant {lowering.dense_array(host)} : "
              f"{lowering.ir_type(aval)}")
  return name


def lower_fun(fun: Callable, multiple_results: bool = True) -> LoweringRule:
  """Makes a lowering rule of `fun`, a function of arrays composed of stagecraft operations
  (JAX's `mlir.lower_fun`).

  The rule traces `fun(*operands, **params)` on the equation's operand avals into a jaxpr and
  emits that jaxpr in place of the equation.

  Args:
    fun: `fun(*arrays, **params)` returning one array (`multiple_results=False`) or a
      sequence of arrays, one per result of the primitive.
    multiple_results: whether `fun` returns a sequence.

  Returns:
    A rule for `register_lowering`.

  Raises (when the rule runs):
    TypeError: if `fun` returns a different number of results, or results of other shapes or
      dtypes, than the primitive's abstract eval gives.
  """
  def rule(ctx: LoweringRuleContext, *args: str, **params) -> list[str]:
    def flat(*xs):
      out = fun(*xs, **params)
      return list(out) if multiple_results else [out]
    jaxpr, consts = pe.trace_to_jaxpr(flat, ctx.avals_in)
    got, want = [v.aval for v in jaxpr.outvars], list(ctx.avals_out)
    name = getattr(fun, "__name__", repr(fun))
    if len(got) != len(want):
      raise TypeError(f"lower_fun({name}): the function returned {len(got)} results where "
                      f"the primitive has {len(want)}; pass multiple_results="
                      f"{not multiple_results} if that is the mismatch.")
    bad = [f"result {i}: {g.str_short()} where the abstract eval gives {w.str_short()}"
           for i, (g, w) in enumerate(zip(got, want))
           if g.shape != w.shape or g.dtype != w.dtype]
    if bad:
      shown = "; ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
      raise TypeError(f"lower_fun({name}): the function's results differ from the "
                      f"primitive's abstract eval: {shown}. Make the impl and the abstract "
                      f"eval agree.")
    const_names = [_emit_const(ctx, c) for c in consts]
    return lowering.jaxpr_subcomp(ctx.fb, jaxpr, const_names, args)
  rule.is_lower_fun = True
  rule.__name__ = f"lower_fun({getattr(fun, '__name__', 'fun')})"
  return rule


# ---------------------------------------------------------------------------
# register_lowering: common and platform-specific rules

#: Platform names a rule may be registered for, and the PJRT platform each runs on.
_PLATFORMS = {"cpu": "cpu", "gpu": "gpu", "cuda": "gpu", "rocm": "gpu", "oneapi": "gpu",
              "tpu": "tpu"}

# prim -> {platform or None (the common rule): rule}, for rules registered here.
_rules: dict[core.Primitive, dict[str | None, Callable]] = {}


def _select(prim: core.Primitive, platform: str) -> Callable | None:
  rules = _rules[prim]
  if platform in ("cuda", "rocm"):   # a module lowered for a named GPU platform (export)
    return rules.get(platform, rules.get("gpu", rules.get(None)))
  for name, runs_on in _PLATFORMS.items():
    if runs_on == platform and name in rules:
      return rules[name]
  return rules.get(platform, rules.get(None))


def _dispatcher(prim: core.Primitive) -> LoweringRule:
  def rule(ctx: LoweringRuleContext, *args: str, **params) -> list[str]:
    chosen = _select(prim, ctx.module.platform)
    if chosen is None:
      raise MissingRuleError(
          f"MLIR translation rule for primitive '{prim.name}' not found for platform "
          f"{ctx.module.platform} (it has rules for {sorted(_rules[prim], key=str)}). "
          f"Register one with mlir.register_lowering({prim.name}_p, rule) (all platforms) or "
          f"platform='{ctx.module.platform}'.")
    if getattr(chosen, "is_lower_fun", False):
      return chosen(ctx, *args, **params)
    try:
      return chosen(ctx, *args, **params)
    except Exception as e:
      e.add_note(f"While lowering '{prim.name}' with a rule registered through "
                 f"stagecraft.interpreters.mlir: operands are StableHLO SSA value names "
                 f"(str), not MLIR values. A rule written for JAX that builds MLIR objects "
                 f"must be replaced by mlir.lower_fun(impl, multiple_results=...).")
      raise
  rule.__name__ = f"{prim.name}_lowering"
  return rule


def register_lowering(prim: core.Primitive, rule: LoweringRule, platform: str | None = None,
                      inline: bool = True, cacheable: bool = True) -> None:
  """Registers `rule(ctx, *operands, **params)` as the lowering of `prim` (JAX's
  `mlir.register_lowering`).

  Args:
    prim: the primitive.
    rule: a rule from `lower_fun`, or one in stagecraft's text form (operands are SSA value
      names; returns the result names).
    platform: None for every platform; `"cpu"`, `"cuda"`, `"rocm"`, `"gpu"` or `"tpu"` for
      one, which then takes precedence over the common rule there.
    inline, cacheable: accepted for JAX compatibility (no effect: calls of jitted functions
      are always emitted as functions, and lowering results are cached per jaxpr).

  Raises:
    NotImplementedError: for an unknown platform (JAX's message).
  """
  if platform is not None and platform not in _PLATFORMS:
    raise NotImplementedError(
        f"Registering an MLIR lowering rule for primitive {prim} for an unknown platform "
        f"{platform}. Known platforms are: {', '.join(sorted(_PLATFORMS))}.")
  native = lowering.has_lowering(prim) and prim not in _rules
  if native and platform is not None:
    # NB: a built-in primitive (lowered by its own module): a rule for another platform
    # cannot apply in this process, one for this platform replaces the built-in rule.
    if _PLATFORMS[platform] != client.get_backend().platform:
      return
  if native:
    _rules.pop(prim, None)
  _rules.setdefault(prim, {})[platform] = rule
  lowering.register_lowering(prim, _dispatcher(prim))


def core_call_lowering(ctx: LoweringRuleContext, *args: str, name: str, backend=None,
                       call_jaxpr: ClosedJaxpr | Jaxpr) -> list[str]:
  """Lowers a call of `call_jaxpr` (taking the operands, no constants) as a private function
  and a `func.call` (JAX's `mlir.core_call_lowering`).

  Raises:
    ValueError: if the jaxpr has constants (convert them to operands first).
  """
  if isinstance(call_jaxpr, Jaxpr):
    call_jaxpr = ClosedJaxpr(call_jaxpr, [])
  return lowering.lower_call(ctx, name, call_jaxpr, args)
