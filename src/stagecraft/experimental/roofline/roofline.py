"""The roofline interpreter (JAX 0.10.2's `jax.experimental.roofline.roofline`): walks a
jaxpr equation by equation, calling the rule registered for each primitive on the shapes of
its operands, recursing into the `jaxpr` / `call_jaxpr` of call-like equations (their own
equation counts nothing), and tracking the live bytes of the values for `peak_hbm_bytes`
(a value is freed after its last use). A primitive with no rule is skipped with a logged
warning naming it, as JAX's does.
"""
from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from stagecraft import api, core, tree_util
from stagecraft import numpy as jnp
from stagecraft.shard_map import shard_map as _shard_map
from stagecraft import sharding as _sh
from stagecraft.interpreters import partial_eval as pe
from stagecraft.lax.spmd import shard_map_p

__all__ = ["RooflineResult", "RooflineRuleContext", "RooflineShape", "register_roofline",
           "register_standard_roofline", "roofline", "roofline_and_grad"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class RooflineRuleContext:
  """What a rule sees besides its operands' shapes: the equation's primitive, the avals of
  its operands and results, its name stack and context, the mesh, and the VMEM pins."""
  name_stack: Any
  primitive: core.Primitive
  avals_in: Sequence[Any]
  avals_out: Sequence[Any]
  jaxpr_eqn_ctx: Any
  mesh: Any
  pin_lhs_in_vmem: bool
  pin_rhs_in_vmem: bool


def _valid_dtype(dtype: Any) -> bool:
  return isinstance(dtype, np.dtype) or type(dtype).__name__ == "KeyTy" or hasattr(
      dtype, "_impl")


@dataclass(frozen=True, slots=True, kw_only=True)
class RooflineShape:
  """A shape and dtype; `size` elements of `dtype.itemsize` bytes (`bytes`)."""
  shape: tuple[int, ...]
  dtype: Any

  @classmethod
  def from_aval(cls, aval: Any) -> "RooflineShape":
    """Raises TypeError (JAX's text) for an aval that is not a ShapedArray or whose dtype
    is neither a numpy dtype nor a PRNG key type."""
    if not isinstance(aval, core.ShapedArray):
      raise TypeError(f"Expected ShapedArray, got {type(aval)}.")
    if not _valid_dtype(aval.dtype):
      raise TypeError(f"Expected numpy or prng.KeyTy dtype, got {type(aval.dtype)}.")
    return cls(shape=aval.shape, dtype=aval.dtype)

  @property
  def size(self) -> int:
    return int(np.prod(self.shape))

  @property
  def bytes(self) -> int:
    return int(self.size * self.dtype.itemsize)

  @classmethod
  def total_bytes(cls, avals: Sequence[Any]) -> int:
    return sum(cls.from_aval(a).bytes for a in avals)


@dataclass(frozen=True, slots=True, kw_only=True)
class RooflineResult:
  """Counts of a program: `flops` / `hbm_bytes` of the operations XLA cannot fuse (matmuls),
  `unfused_*` of every operation, `peak_hbm_bytes` the most bytes live at once, and per
  mesh-axis `ici_bytes` / `ici_latency` of collectives. `+` adds (peak: max), `* c` scales
  (to int)."""
  flops: int = 0
  unfused_flops: int = 0
  ici_bytes: dict[str, int] = field(default_factory=dict)
  ici_latency: dict[str, int] = field(default_factory=dict)
  hbm_bytes: int = 0
  peak_hbm_bytes: int = 0
  unfused_hbm_bytes: int = 0

  @classmethod
  def zeros(cls) -> "RooflineResult":
    return cls()

  def __add__(self, other: "RooflineResult") -> "RooflineResult":
    def merged(a: dict, b: dict) -> dict:
      return {k: a.get(k, 0) + b.get(k, 0) for k in set(a) | set(b)}
    return RooflineResult(
        flops=self.flops + other.flops,
        unfused_flops=self.unfused_flops + other.unfused_flops,
        ici_bytes=merged(self.ici_bytes, other.ici_bytes),
        ici_latency=merged(self.ici_latency, other.ici_latency),
        hbm_bytes=self.hbm_bytes + other.hbm_bytes,
        peak_hbm_bytes=max(self.peak_hbm_bytes, other.peak_hbm_bytes),
        unfused_hbm_bytes=self.unfused_hbm_bytes + other.unfused_hbm_bytes)

  def __mul__(self, constant: int | float) -> "RooflineResult":
    scale = lambda v: int(v * constant)
    return RooflineResult(
        flops=scale(self.flops), unfused_flops=scale(self.unfused_flops),
        ici_bytes={k: scale(v) for k, v in self.ici_bytes.items()},
        ici_latency={k: scale(v) for k, v in self.ici_latency.items()},
        hbm_bytes=scale(self.hbm_bytes), peak_hbm_bytes=scale(self.peak_hbm_bytes),
        unfused_hbm_bytes=scale(self.unfused_hbm_bytes))

  def __rmul__(self, constant: int | float) -> "RooflineResult":
    return self.__mul__(constant)


_rooflines: dict[core.Primitive, Callable[..., RooflineResult]] = {}


#: Primitives with a `jaxpr` param that is no call body (a `scatter_apply`'s per-element
#: function): their rule counts it, instead of the body being interpreted once.
jaxpr_param_not_a_body: set = set()


def register_roofline(prim: core.Primitive):
  """Decorator: `rule(ctx, *operand RooflineShapes, **eqn params) -> RooflineResult`
  becomes `prim`'s rule; returns the rule."""
  def register(rule):
    _rooflines[prim] = rule
    return rule
  return register


def register_standard_roofline(prim: core.Primitive) -> None:
  """Gives `prim` the rule counting nothing (a zero RooflineResult)."""
  def standard_rule(ctx, *args, **kwargs):
    return RooflineResult.zeros()
  _rooflines[prim] = standard_rule


def _aval(v: Any) -> Any:
  return core.get_aval(v.val) if isinstance(v, core.Literal) else v.aval


def _interpret(f_name: str, jaxpr: Any, mesh: Any, pin_lhs: bool, pin_rhs: bool
               ) -> RooflineResult:
  jaxpr = jaxpr.jaxpr if isinstance(jaxpr, core.ClosedJaxpr) else jaxpr
  total = RooflineResult.zeros()
  env: dict = {}
  for v in [*jaxpr.constvars, *jaxpr.invars]:
    env[v] = RooflineShape.from_aval(v.aval)
  last_use: dict = {}
  for eqn in jaxpr.eqns:
    for v in eqn.invars:
      if not isinstance(v, core.Literal):
        last_use[v] = eqn
  for v in jaxpr.outvars:
    if not isinstance(v, core.Literal):
      last_use[v] = None
  live = sum(s.bytes for s in env.values())
  peak = live
  for eqn in jaxpr.eqns:
    name = f"{eqn.primitive.name}({f_name})"
    if "jaxpr" in eqn.params and eqn.primitive not in jaxpr_param_not_a_body:
      total += _interpret(name, eqn.params["jaxpr"], mesh, pin_lhs, pin_rhs)
    elif "call_jaxpr" in eqn.params:
      total += _interpret(name, eqn.params["call_jaxpr"], mesh, pin_lhs, pin_rhs)
    elif eqn.primitive not in _rooflines:
      _log.warning("No roofline rule for %s, skipping...\n%s", eqn.primitive, eqn)
    else:
      ctx = RooflineRuleContext(
          name_stack=f_name, primitive=eqn.primitive,
          avals_in=[_aval(v) for v in eqn.invars], avals_out=[v.aval for v in eqn.outvars],
          jaxpr_eqn_ctx=getattr(eqn, "ctx", None), mesh=mesh, pin_lhs_in_vmem=pin_lhs,
          pin_rhs_in_vmem=pin_rhs)
      operands = [RooflineShape.from_aval(_aval(v)) if isinstance(v, core.Literal)
                  else env[v] for v in eqn.invars]
      total += _rooflines[eqn.primitive](ctx, *operands, **eqn.params)
    outs = [RooflineShape.from_aval(v.aval) for v in eqn.outvars]
    live += sum(s.bytes for s in outs)
    for v, s in zip(eqn.outvars, outs):
      if type(v) is not core.DropVar:
        env[v] = s
    freed = {v for v in eqn.invars if not isinstance(v, core.Literal)
             and last_use.get(v, eqn) is eqn}
    live -= sum(env[v].bytes for v in freed if v in env)
    for v in freed:
      env.pop(v, None)
    for v in eqn.outvars:   # NB: results nothing reads are dead at once (JAX's clean-up)
      if type(v) is not core.DropVar and v not in last_use:
        env.pop(v, None)
    peak = max(peak, live)
  return total + RooflineResult(peak_hbm_bytes=peak)


def _qual_name(f: Callable) -> str:
  return getattr(f, "__qualname__", getattr(f, "__name__", str(f)))


def _with_vjp(f: Callable) -> Callable:
  @functools.wraps(f)
  def wrapped(*args):
    primals, f_vjp = api.vjp(f, *args)
    return f_vjp(tree_util.tree_map(jnp.bfloat16, primals))
  return wrapped


def roofline(f: Callable, mesh: Any = None, in_specs: Any = None, out_specs: Any = None, *,
             pin_lhs_in_vmem: bool = False, pin_rhs_in_vmem: bool = False,
             vjp: bool = False, print_jaxpr: bool = False
             ) -> Callable[..., tuple[Any, RooflineResult]]:
  """`f` made into `g(*args) -> (out_shapes, RooflineResult)`.

  Args:
    f: a function of arrays (or ShapeDtypeStructs: only shapes are used).
    mesh, in_specs, out_specs: with all three, `f` runs under `shard_map` over `mesh` and
      the counts are those of its body (per device); the out shapes carry
      `NamedSharding(mesh, out_spec)`.
    pin_lhs_in_vmem, pin_rhs_in_vmem: a matmul's left (and result) / right operand is not
      counted in HBM bytes.
    vjp: count `f`'s VJP applied to bfloat16 cotangents instead.
    print_jaxpr: print the jaxpr that is counted.

  Returns:
    The out pytree of ShapeDtypeStructs and the counts. Primitives without a rule are
    skipped (a warning is logged).
  """
  @functools.wraps(f)
  def wrapped(*args):
    g = f
    if in_specs is not None and out_specs is not None and mesh is not None:
      g = _shard_map(g, mesh=mesh, in_specs=in_specs, out_specs=out_specs)
    if vjp:
      g = _with_vjp(g)
    closed, out_shapes = api.make_jaxpr(g, return_shape=True)(*args)
    if out_specs is not None and mesh is not None:
      specs = tree_util.broadcast_prefix(out_specs, out_shapes)
      leaves, tree = tree_util.tree_flatten(out_shapes)
      out_shapes = tree_util.tree_unflatten(tree, [
          core.ShapeDtypeStruct(s.shape, s.dtype, sharding=_sh.NamedSharding(mesh, p))
          for s, p in zip(leaves, specs)])
    jaxpr, _ = pe.dce_jaxpr(closed.jaxpr, [True] * len(closed.jaxpr.outvars))
    sm = [e for e in jaxpr.eqns if e.primitive is shard_map_p]
    if sm:
      try:
        jaxpr = sm[-1].params["jaxpr"]
      except KeyError:
        raise ValueError(f"Missing shard_map jaxpr in {jaxpr}.") from None
    if print_jaxpr:
      print(jaxpr)
    return out_shapes, _interpret(_qual_name(f), jaxpr, mesh, pin_lhs_in_vmem,
                                  pin_rhs_in_vmem)
  return wrapped


def roofline_and_grad(f: Callable, mesh: Any, in_specs: Any, out_specs: Any, *,
                      pin_lhs_in_vmem: bool = False, pin_rhs_in_vmem: bool = False,
                      print_jaxpr: bool = False
                      ) -> Callable[..., tuple[Any, RooflineResult, RooflineResult]]:
  """`g(*args) -> (out_shapes, forward counts, backward counts)`: `roofline` of `f`, then of
  its VJP on the arguments' shapes with every non-int32 dtype made bfloat16."""
  kw = dict(pin_lhs_in_vmem=pin_lhs_in_vmem, pin_rhs_in_vmem=pin_rhs_in_vmem,
            print_jaxpr=print_jaxpr)

  @functools.wraps(f)
  def wrapped(*args):
    shapes, fwd = roofline(f, mesh, in_specs, out_specs, **kw)(*args)
    bf = tree_util.tree_map(
        lambda x: core.ShapeDtypeStruct(
            x.shape, jnp.int32 if x.dtype == jnp.int32 else jnp.bfloat16,
            sharding=getattr(x, "sharding", None)), args)
    return shapes, fwd, roofline(f, mesh, in_specs, out_specs, vjp=True, **kw)(*bf)[1]
  return wrapped
