"""`stagecraft.experimental.hijax`: JAX's `jax.experimental.hijax` (types and primitives
that lower to other types and primitives).

`VJPHiPrimitive` is JAX's: a subclass declares its input and output types and an `expand`
implementation, and may add `vjp_fwd`/`vjp_bwd_retval` (or `vjp_bwd`), `jvp`,
`lin`/`linearized`, `batch_dim_rule` (or `batch`) and `transpose`; calling an instance binds
one `call_hi_primitive` equation, whose rules call those methods.

Hijax types are JAX's too: a `HiType` subclass (`lo_ty`, `lower_val`, `raise_val`,
`to_tangent_aval`, `str_short`) whose value class is given to `register_hitype` types
values that hijax primitives make and take, eagerly, inside and across `jit` and under
`grad`, as `lax.scan` carries, xs and ys, and as `shard_map` arguments and results with
`HiPspec` specs (not through other loops, conds or `vmap` of a hijax-typed value).

Mutable hijax types (`MutableHiType`, made and changed by `HiPrimitive`s: flax.nnx's hijax
Variables) run their primitives eagerly (`impl`, their `jvp` under `grad`); a jit call
that takes or closes over such values, and a scan that closes over them, thread their
states' arrays through the program (the primitives run on the values, holding traced
arrays, while it is traced: their `to_lojax`); elsewhere they raise `NotImplementedError`.
`AbstractRef` and `TransformedRef` are stand-ins (subclassable, not buildable).
The names that JAX re-exports from elsewhere (`ShapedArray`, `Zero`, `instantiate_zeros`,
`is_undefined_primal`, `control_flow_allowed_effects`) are stagecraft's own.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable

from stagecraft import api, config, core, dtypes, pjit, tree_util
from stagecraft.core import EffectTypeSet, ShapedArray
from stagecraft.interpreters import ad, batching, lowering, mapping, mlir
from stagecraft.interpreters import partial_eval as pe
from stagecraft.interpreters.ad import Zero, instantiate_zeros, is_undefined_primal
from stagecraft.lax import elementwise, parallel, reduction
from stagecraft.lax.control_flow import loops
from stagecraft.lax.spmd import shard_map_p
from stagecraft.shard_map import HiPspec, eval_lojax, run_hi

__all__ = ["Zero", "AbstractValue", "AvalQDD", "cur_qdd", "ShapedArray", "aval_method", "aval_property",
           "AvalMutableQDD", "instantiate_zeros", "is_undefined_primal",
           "control_flow_allowed_effects", "HiPrimitive", "HiPspec", "HiType", "MutableHiType",
           "VJPHiPrimitive", "register_hitype", "AbstractRef", "TransformedRef"]

_MSG = ("stagecraft does not implement JAX's hijax types and primitives "
        "(jax.experimental.hijax); {} is a stand-in.")

#: The abstract values' base type (stagecraft's array avals are `ShapedArray`s).
AbstractValue = ShapedArray

#: Effects allowed inside control flow (a registry libraries add their effect types to).
control_flow_allowed_effects = EffectTypeSet()

#: The hijax types registered with `register_hitype` (recorded; not used by stagecraft).
hitypes: dict[type, Callable] = {}


class _StandIn:
  """A hijax class that can be subclassed but not used."""

  def __init__(self, *args, **kwargs):
    raise NotImplementedError(_MSG.format(type(self).__name__))


class AvalQDD:
  """A mutable hijax type with its quasi-dynamic data (JAX's `AvalQDD`): what a
  `HiPrimitive`'s `abstract_eval` gives for a value of a `MutableHiType` (`aval`) whose
  current state is `qdd` (e.g. flax's Variable: the types and tree of its leaves)."""
  is_high = True
  has_qdd = True

  def __init__(self, aval: Any, qdd: Any):
    self.aval, self.qdd = aval, qdd

  def lo_ty(self):
    return self.aval.lo_ty_qdd(self.qdd)

  def to_tangent_aval(self):
    return AvalQDD(self.aval.to_tangent_aval(), self.qdd and self.qdd.to_tangent_qdd())

  def __repr__(self):
    return f"AvalQDD(aval={self.aval!r}, qdd={self.qdd!r})"


class AvalMutableQDD:
  """A mutable hijax type with state that a `HiPrimitive`'s `abstract_eval` may update
  (JAX's `AvalMutableQDD`: `mutable_qdd.update(new_qdd)`)."""

  def __init__(self, aval: Any, mutable_qdd: Any):
    self.aval, self.mutable_qdd = aval, mutable_qdd


class HiType:
  """A high-level type: a subclass (a frozen dataclass, hashable) gives `lo_ty()` (the
  ShapedArrays a value is made of), `lower_val(v)` (a value's arrays), `raise_val(*arrays)`,
  `to_tangent_aval()` (for autodiff) and `str_short()` (printing). Values of a type
  registered with `register_hitype` are made and taken apart only by `VJPHiPrimitive`s whose
  `in_avals`/`out_aval` name the type; they may be arguments and results of `jit`."""
  is_high = True


def cur_qdd(x: Any) -> Any:
  """The current quasi-dynamic data (state type) of the mutable hijax value `x` (JAX's
  `jax.experimental.cur_qdd`): `x.cur_qdd()` for a value.

  Raises:
    NotImplementedError: for a tracer (stagecraft runs mutable hijax values eagerly only).
  """
  if isinstance(x, core.Tracer):
    raise NotImplementedError(
        f"stagecraft runs mutable hijax types ({type(core.get_aval(x)).__name__}) eagerly "
        f"only: their values cannot be traced (jit, vmap, scan, eval_shape).")
  return x.cur_qdd()


class MutableHiType:
  """A mutable high-level type (JAX's `MutableHiType`): the aval of values whose state (and
  its type, the "quasi-dynamic data" `cur_qdd`) changes as `HiPrimitive`s update them, e.g.
  flax.nnx's hijax Variables. Its values are made, read and updated by `HiPrimitive`s run
  eagerly (their `impl`); stagecraft does not trace them (`jit`, `vmap`, `scan`,
  `eval_shape` raise `NotImplementedError`)."""
  is_high = True
  has_qdd = True
  is_writer = False

  def type_state(self):
    return cur_qdd(self)

  def __repr__(self):   # JAX's AbstractValue repr: the class and its instance fields
    try:
      return f"{type(self).__name__}({','.join(f'{k}={v}' for k, v in vars(self).items())})"
    except TypeError:   # a class with __slots__ only
      return type(self).__name__

  def lo_ty_qdd(self, state, /):
    raise AssertionError("must override")

  def lo_ty(self):
    raise AssertionError("mutable hitypes should use lo_ty_qdd instead")

  def to_tangent_aval(self):
    raise AssertionError("must override")

  def to_ct_aval(self):
    return self.to_tangent_aval()


class AbstractRef(_StandIn):
  """The aval of a mutable array reference (stand-in)."""


class TransformedRef(_StandIn):
  """A reference viewed through indexing transforms (stand-in)."""


class HiPrimitive(core.Primitive):
  """A primitive whose rules a subclass gives as methods (JAX's `HiPrimitive`): `impl`
  (eager evaluation), `abstract_eval` (-> (aval or avals, effects)), `to_lojax`, `jvp`
  (registered as its JVP rule) and `transpose`. Its values may be hijax values (a
  `MutableHiType`'s, updated in place by `impl`).

  stagecraft runs these primitives eagerly, also under `grad`/`jvp` when their operands'
  tangents are zero (JAX's too then binds the primitive without its `jvp`) and through their
  `jvp` otherwise.

  Raises (from `bind`):
    NotImplementedError: when staged (inside `jit`, `vmap`, `scan`, `eval_shape`, or on
      tracers): stagecraft does not trace hijax primitives of this kind.
  """

  def __init__(self, name: str):
    # NB: not `Primitive.__init__`: `impl` and `abstract_eval` are the subclass's methods.
    self.name = name
    self.effects_rule = None
    self.effectful_abstract_eval = None
    ad.primitive_jvps[self] = self.jvp
    ad.primitive_transposes[self] = self.transpose

  # NB: its operands as given (typed key arrays stay key arrays: flax.nnx's hijax RngKeys)
  binds_staged_leaves = False

  def bind(self, *args, **params):
    trace = core.current_trace()
    if _is_staging(trace):
      return _bind_staged(self, trace, args, params)
    return super().bind(*args, **params)

  def is_high(self, *avals, **params) -> bool:
    return True

  def is_effectful(self, params) -> bool:
    return False

  def impl(self, *args, **params):
    raise AssertionError(f"must override for {self}")

  def abstract_eval(self, *avals, **params):
    raise AssertionError("must override")

  def to_lojax(self, *args, **params):
    raise AssertionError(f"must override for {self}")

  def jvp(self, primals, tangents, **params):
    raise AssertionError("must override")

  def transpose(self, *args, **params):
    raise AssertionError("must override")


def register_hitype(cls: type, to_aval: Callable) -> None:
  """Records `to_aval` as the aval function of the hijax type `cls`: `typeof` of a `cls`
  value is `to_aval(value)` (stagecraft does not trace values of `cls`: only eager
  primitives take them)."""
  hitypes[cls] = to_aval
  core.hitype_mappings[cls] = to_aval
  core.pytype_aval_mappings[cls] = to_aval


def aval_method(fun: Callable) -> Callable:
  """Marks `fun` as a method that a hijax type's aval forwards to its values; here the
  method itself."""
  return fun


def aval_property(fget: Callable | None = None, *args: Any, **kwargs: Any) -> property:
  """A property that a hijax type's aval forwards to its values; here a plain property."""
  return property(fget, *args, **kwargs)


# ---------------------------------------------------------------------------
# VJPHiPrimitive: user primitives as Python classes (JAX's new-style hijax primitives)


def _flatten(tree: Any) -> tuple[list, Any]:
  return tree_util.tree_flatten(tree)


def _unflatten(treedef: Any, leaves: Any) -> Any:
  return tree_util.tree_unflatten(treedef, list(leaves))


def _leaves_checked(treedef: Any, tree: Any) -> list:
  """The leaves of `tree`, whose structure must be `treedef` (JAX asserts it)."""
  leaves, got = _flatten(tree)
  if got != treedef:
    raise AssertionError(f"expected a pytree of structure {treedef}, got {got}")
  return leaves


def _prefix_leaves(prefix: Any, treedef: Any) -> list:
  """One leaf of `prefix` (None a leaf: batch dims, nonzero flags) per leaf of `treedef`."""
  return tree_util.broadcast_prefix(prefix, _unflatten(treedef, [0] * treedef.num_leaves))


class VJPHiPrimitive:
  """A user-defined primitive (JAX's `jax.experimental.hijax.VJPHiPrimitive`).

  A subclass's `__init__` sets `in_avals` (a tuple, one pytree of avals per positional
  argument), `out_aval` (a pytree of avals) and `params` (a dict of hashable static
  parameters, also set as attributes) and then calls `super().__init__()`. Calling the
  instance on arguments of those types binds one `call_hi_primitive[_prim=...]` equation
  (the arguments are not checked against `in_avals`: the results have the types of
  `out_aval`).

  Methods a subclass gives (each needed only by the transformation using it):
    expand(*args): the implementation in stagecraft operations, run eagerly and traced
      at lowering (`jit`).
    vjp_fwd(nzs_in, *args) -> (out, residuals[, nzs_out]): reverse mode's forward pass;
      `nzs_in` has the structure of the arguments, False where the tangent is zero.
    vjp_bwd_retval(residuals, g) -> a tuple of one cotangent (or None) per argument; or
      vjp_bwd(residuals, g, *accums), adding each cotangent with `accums[i].accum(ct)`.
    jvp(primals, tangents) -> (out, out_tangent): forward mode (tangents may be `Zero`s).
    lin(nzs_in, *args) -> (out, residuals) and linearized(residuals, *tangents): for
      `linearize`.
    batch_dim_rule(axis_data, in_dims) -> out_dim, or batch(axis_data, args, dims) ->
      (out, out_dim): for `vmap` (with `batch_dim_rule`, the other rules are vmapped).
    transpose(out_ct, *maybe_accums): for a primitive linear in some inputs.

  Raises:
    AttributeError: when `__init__` did not set `in_avals`, `out_aval` or `params`, or the
      subclass overrides both `vjp_bwd` and `vjp_bwd_retval`.
    NotImplementedError: when a transformation needs a method the subclass lacks (JAX's
      messages).

  Source: JAX's `jax._src.hijax.VJPHiPrimitive` (behaviour, messages).
  """
  in_avals: Any
  out_aval: Any
  params: dict
  effects: frozenset = frozenset()

  def __init__(self):
    if not hasattr(self, "in_avals"):
      raise AttributeError("subclass __init__ should set `self.in_avals`")
    if not hasattr(self, "out_aval"):
      raise AttributeError("subclass __init__ should set `self.out_aval`")
    if not hasattr(self, "params"):
      raise AttributeError("subclass __init__ should set `self.params`")
    if (type(self).vjp_bwd is not VJPHiPrimitive.vjp_bwd and
        type(self).vjp_bwd_retval is not VJPHiPrimitive.vjp_bwd_retval):
      raise AttributeError(f"subclass {type(self)} should not override both "
                           "`vjp_bwd` and `vjp_bwd_retval`")
    self.in_avals_flat, self.in_tree = _flatten(self.in_avals)
    self.out_avals_flat, self.out_tree = _flatten(self.out_aval)
    self.__dict__.update(self.params)
    self.check(*self.in_avals)

  def expand(self, *args):
    raise NotImplementedError(f"subclass {type(self)} must implement `expand`")

  def vjp_fwd(self, nzs_in, /, *args):
    raise NotImplementedError(f"for grad support, subclass {type(self)} must implement "
                              "`vjp_fwd`")

  def vjp_bwd(self, res, outgrad, /, *arg_accums):
    args_grad = self.vjp_bwd_retval(res, outgrad)

    def maybe_accum(acc, v):
      if isinstance(acc, _GradAccum):
        acc.accum(v)
    tree_util.tree_map(maybe_accum, arg_accums, args_grad)

  def vjp_bwd_retval(self, res, outgrad, /):
    raise NotImplementedError(f"for grad support, subclass {type(self)} must implement "
                              "`vjp_bwd` or `vjp_bwd_retval`")

  def jvp(self, primals, tangents):
    raise NotImplementedError(f"for jvp support, subclass {type(self)} must implement `jvp`")

  def lin(self, nzs_in, *primals):
    raise NotImplementedError(f"for linearize support, subclass {type(self)} must implement "
                              "`lin` and `linearized`")

  def linearized(self, residuals, *tangents):
    raise NotImplementedError(f"for linearize support, subclass {type(self)} must implement "
                              "`lin` and `linearized`")

  def transpose(self, out_ct, *maybe_accums):
    raise NotImplementedError(f"for transpose support, subclass {type(self)} must implement "
                              "`transpose`")

  def batch(self, axis_data, args, dims):
    out_dim = self.batch_dim_rule(axis_data, dims)
    return VmapOf(self, axis_data, dims, out_dim)(*args), out_dim

  def batch_dim_rule(self, axis_data, dims, /):
    raise NotImplementedError(f"for vmap support, subclass {type(self)} must implement "
                              "`batch` or `batch_dim_rule`")

  def check(self, *arg_tys):
    return

  def __call__(self, *args):
    args_flat = _leaves_checked(self.in_tree, args)
    ans_flat = call_hi_primitive_p.bind(*args_flat, _prim=self)
    return _unflatten(self.out_tree, ans_flat)

  def __repr__(self):
    return f"{self.__class__.__name__}[{self.params}]"

  def __hash__(self):
    return hash((self.__class__.__name__, tuple(self.params.items()), self.effects))

  def __eq__(self, other):
    return (type(self) is type(other) and self.params == other.params
            and self.effects == other.effects)


# --- cotangent accumulators (JAX's `ad._GradAccum`): what `vjp_bwd` adds cotangents to


class _GradAccum:
  """Receives an input's cotangent contributions in `vjp_bwd` (`accum(ct)`); `aval` is the
  cotangent's type."""
  aval: ShapedArray

  def accum(self, x) -> None:
    raise NotImplementedError


class _ValAccum(_GradAccum):
  """Sums the cotangents given to `accum` into `val` (a `Zero` until the first one).

  Raises (from `accum`):
    ValueError: a cotangent whose shape is not the input's (JAX's "Expected cotangent type
      ..."), unless the `disable_bwd_checks` option is set.
  """

  def __init__(self, aval: ShapedArray):
    self.aval = aval
    self.val: Any = Zero(aval)

  def __repr__(self):
    return f"ValAccum({self.aval})"

  def accum(self, x) -> None:
    if x is None:
      return
    if not config.read("disable_bwd_checks"):
      got = x.aval if type(x) is Zero else core.get_aval(x)
      if got.shape != self.aval.shape:
        raise ValueError(f"Expected cotangent type {self.aval.str_short(short_dtypes=False)} "
                         f"but got {got.str_short(short_dtypes=False)}")
    self.val = ad.add_tangents(self.val, x)


class _NullAccum(_GradAccum):
  """The accumulator of an input whose cotangent is not wanted: `accum` does nothing."""

  def __init__(self, aval: ShapedArray):
    self.aval = aval

  def __repr__(self):
    return f"NullAccum({self.aval})"

  def accum(self, x) -> None:
    return


# --- the primitive and its rules


#: `call_hi_primitive(*args_flat, _prim)`: one application of the VJPHiPrimitive `_prim`.
call_hi_primitive_p = core.Primitive("call_hi_primitive")
call_hi_primitive_p.multiple_results = True


def _call_hi_primitive_impl(*args_flat, _prim):
  # Eagerly (and, traced, at lowering) the primitive is its `expand` (JAX's `to_lojax`).
  ans = _prim.expand(*_unflatten(_prim.in_tree, args_flat))
  return _leaves_checked(_prim.out_tree, ans)


call_hi_primitive_p.def_impl(_call_hi_primitive_impl)
call_hi_primitive_p.def_abstract_eval(lambda *avals, _prim: list(_prim.out_avals_flat))


def _lo_avals(aval) -> list:
  """The array types a value of `aval` lowers to (a hijax type's `lo_ty()`)."""
  return list(aval.lo_ty()) if isinstance(aval, HiType) else [aval]


def _call_hi_primitive_lowering(ctx, *args, _prim):
  # `expand` traced on the lowered ("lojax") components: a hijax-typed operand is lowered as
  # the tuple of its components' values (`lo_ty`), rebuilt with `raise_val` for `expand`,
  # and a hijax-typed result is taken apart with `lower_val`.
  in_avals, out_avals = list(ctx.avals_in), list(ctx.avals_out)
  lo_in = [lo for a in in_avals for lo in _lo_avals(a)]
  lo_args = [x for a, v in zip(in_avals, args)
             for x in (v if isinstance(a, HiType) else [v])]
  lo_out = [lo for a in out_avals for lo in _lo_avals(a)]

  def flat(*xs):
    it, vals = iter(xs), []
    for a in in_avals:
      vals.append(a.raise_val(*[next(it) for _ in _lo_avals(a)]) if isinstance(a, HiType)
                  else next(it))
    outs = _call_hi_primitive_impl(*vals, _prim=_prim)
    return [lo for a, o in zip(out_avals, outs)
            for lo in (a.lower_val(o) if isinstance(a, HiType) else [o])]
  flat.__name__ = f"{type(_prim).__name__}.expand"
  names = mlir.lower_fun(flat, multiple_results=True)(
      lowering.LoweringRuleContext(ctx.fb, lo_in, lo_out), *lo_args)
  it, outs = iter(names), []
  for a in out_avals:
    outs.append(tuple(next(it) for _ in _lo_avals(a)) if isinstance(a, HiType) else next(it))
  return outs


lowering.register_lowering(call_hi_primitive_p, _call_hi_primitive_lowering)


def _weak_cts(cts: list) -> list:
  """Cotangents as the user's rule sees them: grad's seed under a transformation (a weakly
  typed host scalar) becomes a weak 0-d Array, staged as a literal as JAX's constant."""
  if not any(type(c) is core.WeakScalarValue for c in cts):
    return cts
  weak = [type(c) is core.WeakScalarValue for c in cts]
  with core.set_current_trace(core.eval_trace):
    cts = [elementwise.convert_element_type(c.value, c.dtype, weak_type=True) if w else c
           for c, w in zip(cts, weak)]
  return [pe.literal_array(c) if w else c for c, w in zip(cts, weak)]


def _tangent_out(prim: VJPHiPrimitive, nzs_out: list, tangents: list) -> list:
  out = []
  for a, nz, t in zip(prim.out_avals_flat, nzs_out, tangents):
    ta = ad.tangent_aval(a)
    out.append(Zero(ta) if not nz or ta.dtype == dtypes.float0 else t)
  return out


def _call_hi_primitive_jvp(primals, tangents, *, _prim):
  mode = ad.jvp_mode()
  if mode is None:    # forward mode: the user's `jvp`
    out_p, out_t = _prim.jvp(_unflatten(_prim.in_tree, primals),
                             _unflatten(_prim.in_tree, tangents))
    p_flat = _leaves_checked(_prim.out_tree, out_p)
    t_flat = _prim.out_tree.flatten_up_to(out_t)
    return p_flat, t_flat
  # Reverse mode (`vjp_fwd`, the tangents through `call_hi_primitive_linearized`, whose
  # transpose is `vjp_bwd`) or linearize (`lin`, then `linearized` on the tangents).
  nz_flat = [type(t) is not Zero for t in tangents]
  nzs_in = _unflatten(_prim.in_tree, nz_flat)
  args = _unflatten(_prim.in_tree, primals)
  ans, residuals, *maybe_nzs_out = (_prim.vjp_fwd(nzs_in, *args) if mode else
                                    _prim.lin(nzs_in, *args))
  ans_flat = _leaves_checked(_prim.out_tree, ans)
  nzs_out = maybe_nzs_out[0] if maybe_nzs_out else True
  nzs_out_flat = tree_util.broadcast_prefix(nzs_out, ans)
  if mode:
    res_flat, res_tree = _flatten(residuals)
    t_out = call_hi_primitive_linearized_p.bind(
        *res_flat, *[t for t in tangents if type(t) is not Zero], _prim=_prim,
        residuals_tree=res_tree, nz_in_flat=tuple(nz_flat))
  else:
    t_out = _leaves_checked(_prim.out_tree, _prim.linearized(
        residuals, *_unflatten(_prim.in_tree, tangents)))
  return ans_flat, _tangent_out(_prim, nzs_out_flat, t_out)


ad.primitive_jvps[call_hi_primitive_p] = _call_hi_primitive_jvp


def _call_hi_primitive_transpose(cts, *args, _prim):
  # For primitives linear in some inputs: the user's `transpose` gets an accumulator for each
  # linear input and the value of each other one.
  accums = [_ValAccum(ad.tangent_aval(a.aval)) if is_undefined_primal(a) else a for a in args]
  cts = _weak_cts(list(cts))
  _prim.transpose(_unflatten(_prim.out_tree, cts), *_unflatten(_prim.in_tree, accums))
  return [a.val if is_undefined_primal(x) else None for a, x in zip(accums, args)]


ad.primitive_transposes[call_hi_primitive_p] = _call_hi_primitive_transpose


def _call_hi_primitive_batch(axis_data, args, dims, *, _prim):
  # As JAX's, also when no argument is batched (a `VmapOf` with `in_dims` all None).
  ans, out_dims = _prim.batch(axis_data, _unflatten(_prim.in_tree, args),
                              _unflatten(_prim.in_tree, dims))
  return (_leaves_checked(_prim.out_tree, ans),
          tree_util.broadcast_prefix(out_dims, ans))


batching.fancy_primitive_batchers[call_hi_primitive_p] = _call_hi_primitive_batch
# In a check_vma shard_map body the results vary along the axes their declared types say
# (a hijax type: none), as they are typed when traced.
mapping.vma_rules[call_hi_primitive_p] = lambda in_vary, *, _prim: [
    getattr(a, "vma", frozenset()) for a in _prim.out_avals_flat]
# With sharding in types, the results have the shardings their declared types give.
core.sharding_rules[call_hi_primitive_p] = lambda *avals, _prim: [
    a._sharding if type(a) is ShapedArray else None for a in _prim.out_avals_flat]


#: `call_hi_primitive_linearized(*residuals, *nonzero tangents)`: the output tangents of a
#: VJPHiPrimitive under reverse mode, linear in the tangents; its transpose is the user's
#: `vjp_bwd`. It is never evaluated (JAX's error for a jvp of a custom_vjp function).
call_hi_primitive_linearized_p = core.Primitive("call_hi_primitive_linearized")
call_hi_primitive_linearized_p.multiple_results = True


def _raise_custom_vjp_error_on_jvp(*_, **__):
  raise TypeError("can't apply forward-mode autodiff (jvp) to a custom_vjp function.")


call_hi_primitive_linearized_p.def_impl(_raise_custom_vjp_error_on_jvp)
call_hi_primitive_linearized_p.def_abstract_eval(
    lambda *avals, _prim, residuals_tree, nz_in_flat:
    [ad.tangent_aval(a) for a in _prim.out_avals_flat])
lowering.register_lowering(call_hi_primitive_linearized_p, _raise_custom_vjp_error_on_jvp)
batching.fancy_primitive_batchers[call_hi_primitive_linearized_p] = (
    _raise_custom_vjp_error_on_jvp)


def _call_hi_primitive_linearized_transpose(cts, *args, _prim, residuals_tree, nz_in_flat):
  n_res = residuals_tree.num_leaves
  residuals = _unflatten(residuals_tree, args[:n_res])
  accums = [_ValAccum(ad.tangent_aval(a)) if nz else _NullAccum(ad.tangent_aval(a))
            for a, nz in zip(_prim.in_avals_flat, nz_in_flat)]
  cts = _weak_cts(list(cts))
  none = _prim.vjp_bwd(residuals, _unflatten(_prim.out_tree, cts),
                       *_unflatten(_prim.in_tree, accums))
  if none is not None:
    raise AssertionError(f"{type(_prim).__name__}.vjp_bwd returned {none!r}, not None")
  return [None] * n_res + [acc.val for acc, nz in zip(accums, nz_in_flat) if nz]


ad.primitive_transposes[call_hi_primitive_linearized_p] = (
    _call_hi_primitive_linearized_transpose)
core.sharding_rules[call_hi_primitive_linearized_p] = lambda *avals, _prim, **_: [
    t._sharding if type(t) is ShapedArray else None
    for t in map(ad.tangent_aval, _prim.out_avals_flat)]


def _call_hi_primitive_linearized_pp(eqn, context):
  params = dict(eqn.params, _prim=str(eqn.params["_prim"].__class__), residuals_tree="...")
  return sorted(params.items())


core.pp_eqn_rules[call_hi_primitive_linearized_p] = _call_hi_primitive_linearized_pp


# --- vmap of a primitive with `batch_dim_rule`: a new primitive whose rules are vmapped


class _AxisData(batching.AxisData):
  """The vmapped axis as JAX prints it in a `VmapOf`'s params."""
  __slots__ = ()

  def __repr__(self):
    name = "<object object at 0xXXXXXXXXXXXX>" if self.name is None else self.name
    return (f"AxisData(name={name}, size={self.size}, spmd_name={self.spmd_name}, "
            f"explicit_mesh_axis={self.explicit_mesh_axis})")


@tree_util.register_static
class _Static:
  """Static data among residuals (no leaves)."""

  def __init__(self, val):
    self.val = val

  def __hash__(self):
    return hash(self.val)

  def __eq__(self, other):
    return type(other) is _Static and self.val == other.val


class VmapOf(VJPHiPrimitive):
  """`prim` vmapped (JAX's `VmapOf`): what `VJPHiPrimitive.batch` binds. Its `expand`, `jvp`,
  VJP and `batch_dim_rule` are `prim`'s under vmap; `in_dims` / `out_dim` (pytree prefixes
  of the arguments / output, None for unbatched) say where the batch axes are."""

  def __init__(self, prim, axis_data, in_dims, out_dim):
    axis_data = _AxisData(*axis_data)
    self._in_dims_flat = _prefix_leaves(in_dims, prim.in_tree)
    self._out_dims_flat = _prefix_leaves(out_dim, prim.out_tree)
    unmap = lambda a, d: a if d is None else batching.unmapped_aval_typed(a, d, axis_data)
    self.in_avals = _unflatten(prim.in_tree, map(unmap, prim.in_avals_flat,
                                                 self._in_dims_flat))
    self.out_aval = _unflatten(prim.out_tree, map(unmap, prim.out_avals_flat,
                                                  self._out_dims_flat))
    self.params = dict(prim=prim, axis_data=axis_data, in_dims=in_dims, out_dim=out_dim)
    super().__init__()

  def _batched(self, fun, args, dims):
    return batching.batch_flat(fun, args, dims, self.axis_data)

  def _to_out_dims(self, outs, dims):
    return [batching.matchaxis(o, d, t, self.axis_data.size)
            for o, d, t in zip(outs, dims, self._out_dims_flat)]

  def expand(self, *args):
    prim = self.prim

    def f(*xs):
      return _leaves_checked(prim.out_tree, prim.expand(*_unflatten(prim.in_tree, xs)))
    outs, dims = self._batched(f, _leaves_checked(self.in_tree, args), self._in_dims_flat)
    return _unflatten(self.out_tree, self._to_out_dims(outs, dims))

  def _mapped_zero(self, z, d):
    return z if d is None else Zero(batching.mapped_aval_typed(z.aval, d))

  def jvp(self, primals, tangents):
    prim = self.prim
    p_flat = _leaves_checked(self.in_tree, primals)
    t_flat = self.in_tree.flatten_up_to(tangents)
    nz = [type(t) is not Zero for t in t_flat]
    zeros_out: list = []

    def f(*xs):
      ps, it = xs[:len(p_flat)], iter(xs[len(p_flat):])
      ts = [next(it) if z else self._mapped_zero(t, d)
            for t, z, d in zip(t_flat, nz, self._in_dims_flat)]
      out_p, out_t = prim.jvp(_unflatten(prim.in_tree, ps), _unflatten(prim.in_tree, ts))
      out_t = prim.out_tree.flatten_up_to(out_t)
      zeros_out[:] = [type(t) is Zero for t in out_t]
      return [*_leaves_checked(prim.out_tree, out_p), *[t for t in out_t if type(t) is not Zero]]
    dims = [*self._in_dims_flat, *[d for d, z in zip(self._in_dims_flat, nz) if z]]
    outs, odims = self._batched(f, [*p_flat, *[t for t in t_flat if type(t) is not Zero]],
                                dims)
    n = len(self.out_avals_flat)
    p_out = self._to_out_dims(outs[:n], odims[:n])
    it = zip(outs[n:], odims[n:])
    t_out = []
    for a, z, t_dim in zip(self.out_avals_flat, zeros_out, self._out_dims_flat):
      if z:
        t_out.append(Zero(ad.tangent_aval(a)))
      else:
        o, d = next(it)
        t_out.append(batching.matchaxis(o, d, t_dim, self.axis_data.size))
    return _unflatten(self.out_tree, p_out), _unflatten(self.out_tree, t_out)

  def vjp_fwd(self, in_nzs, *args):
    prim = self.prim
    store: dict = {}

    def f(*xs):
      out, res, *maybe_nzs = prim.vjp_fwd(in_nzs, *_unflatten(prim.in_tree, xs))
      res_flat, store["res_tree"] = _flatten(res)
      store["nzs_out"] = maybe_nzs
      return [*_leaves_checked(prim.out_tree, out), *res_flat]
    outs, dims = self._batched(f, _leaves_checked(self.in_tree, args), self._in_dims_flat)
    n = len(self.out_avals_flat)
    p_out = self._to_out_dims(outs[:n], dims[:n])
    res = _unflatten(store["res_tree"], outs[n:])
    return (_unflatten(self.out_tree, p_out),
            (res, _Static((store["res_tree"], tuple(dims[n:])))), *store["nzs_out"])

  def vjp_bwd_retval(self, res_, g):
    prim = self.prim
    res, (res_tree, res_dims) = res_[0], res_[1].val
    res_flat = _leaves_checked(res_tree, res)
    g_flat = self.out_tree.flatten_up_to(g)
    g_nz = [type(c) is not Zero for c in g_flat]
    n_in = len(self.in_avals_flat)
    kept: list = []

    def f(*xs):
      r, it = _unflatten(res_tree, xs[:len(res_flat)]), iter(xs[len(res_flat):])
      gs = [next(it) if z else self._mapped_zero(c, d)
            for c, z, d in zip(g_flat, g_nz, self._out_dims_flat)]
      cts = prim.vjp_bwd_retval(r, _unflatten(prim.out_tree, gs))
      flat = []
      for ct, sub in zip(cts, prim.in_tree.children()):
        if ct is None:
          flat.extend([None] * sub.num_leaves)
        else:
          flat.extend(None if type(c) is Zero else c for c in sub.flatten_up_to(ct))
      kept[:] = [c is not None for c in flat]
      return [c for c in flat if c is not None]
    vals = [*res_flat, *[c for c, z in zip(g_flat, g_nz) if z]]
    dims = [*res_dims, *[d for d, z in zip(self._out_dims_flat, g_nz) if z]]
    outs, odims = self._batched(f, vals, dims)
    it = zip(outs, odims)
    result = []
    for k, in_dim in zip(kept or [False] * n_in, self._in_dims_flat):
      if not k:
        result.append(None)
        continue
      o, d = next(it)
      if in_dim is None:     # an unbatched input: its cotangent sums over the batch
        result.append(o if d is None else reduction.reduce_sum(o, (d,)))
      else:
        result.append(batching.matchaxis(o, d, in_dim, self.axis_data.size))
    return tuple(_unflatten(self.in_tree, result))

  def batch_dim_rule(self, axis_data, in_dims):
    fix = lambda d, d_: d if (d is None or d_ is None) else d - (d_ < d)
    in_flat = _prefix_leaves(in_dims, self.in_tree)
    in_dims_ = _unflatten(self.prim.in_tree, map(fix, in_flat, self._in_dims_flat))
    out_dim = self.prim.batch_dim_rule(axis_data, in_dims_)
    out_flat = _prefix_leaves(out_dim, self.out_tree)
    return _unflatten(self.out_tree, [d if d is None or d_ is None else d + (d_ < d)
                                      for d, d_ in zip(out_flat, self._out_dims_flat)])


# --- hijax-typed arguments and results of jit


def _lower(aval, v) -> list:
  return list(aval.lower_val(v)) if isinstance(aval, HiType) else [v]


def _raise(aval, it) -> Any:
  return (aval.raise_val(*[next(it) for _ in _lo_avals(aval)]) if isinstance(aval, HiType)
          else next(it))


def _crosses_hi(eqn) -> bool:
  """Whether `eqn`, not a hijax primitive, takes or gives a hijax-typed value."""
  return eqn.primitive is not call_hi_primitive_p and any(
      isinstance(v.aval, HiType) for v in (*eqn.invars, *eqn.outvars))


def _eval_lojax(jaxpr: core.Jaxpr, vals: list, consts: Any = ()) -> list:
  """Evaluates `jaxpr`, whose hijax-typed values are held as their types' value classes
  (of lowered arrays): a `call_hi_primitive` runs its `expand` (JAX's `to_lojax`), a call
  (jit, ...) taking or giving hijax values is inlined."""
  env = dict(zip(jaxpr.constvars, consts))
  env.update(zip(jaxpr.invars, vals))
  read = lambda v: v.val if type(v) is core.Literal else env[v]
  for eqn in jaxpr.eqns:
    ins = [read(v) for v in eqn.invars]
    if eqn.primitive is call_hi_primitive_p:
      outs = _call_hi_primitive_impl(*ins, **eqn.params)
    elif eqn.primitive is parallel.pvary_p:
      # A value a hijax primitive gives is typed invariant in a shard_map body (hijax types
      # carry no varying axes), its arrays may vary already: pvary'd along the others only.
      have = getattr(core.get_aval(ins[0]), "vma", frozenset())
      axes = tuple(a for a in eqn.params["axes"] if a not in have)
      outs = [parallel.pvary_p.bind(ins[0], axes=axes) if axes else ins[0]]
    elif eqn.primitive is shard_map_p and _crosses_hi(eqn):
      outs = run_hi(ins, eqn.params)   # a shard_map of the arrays (JAX's `to_lojax`)
    elif eqn.primitive is loops.scan_p and _crosses_hi(eqn):
      p = eqn.params
      nc, nk = p["num_consts"], p["num_carry"]
      carry, ys = _hi_scan(p["jaxpr"], ins[:nc], ins[nc:nc + nk], ins[nc + nk:], nk,
                           p["length"], p["reverse"], p["unroll"])
      outs = [*carry, *ys]
    elif _crosses_hi(eqn):
      param = core.closed_calls.get(eqn.primitive)
      if param is None:
        raise NotImplementedError(
            f"stagecraft lowers hijax-typed values only through hijax primitives and calls "
            f"(jit), not through '{eqn.primitive.name}'.")
      closed = eqn.params[param]
      outs = _eval_lojax(closed.jaxpr, ins, closed.consts)
    else:
      outs = eqn.primitive.bind(*ins, **eqn.params)
      outs = outs if eqn.primitive.multiple_results else [outs]
    env.update(zip(eqn.outvars, outs))
  return [read(v) for v in jaxpr.outvars]


class _HiCall:
  """A jit program with hijax-typed inputs, outputs or values crossing a call: the values
  are lowered to their arrays (`lower_val`), a jit of the lowered program runs, its results
  are raised (`raise_val`)."""
  simple = False

  def __init__(self, jaxpr: core.Jaxpr, consts: list, out_tree, name: str):
    self.consts, self.out_tree = list(consts), out_tree
    self.in_avals = [v.aval for v in jaxpr.invars]
    self.out_avals = list(jaxpr.out_avals)

    def lo_program(*lo_args):
      it = iter(lo_args)
      outs = _eval_lojax(jaxpr, [_raise(a, it) for a in self.in_avals])
      return [x for a, o in zip(self.out_avals, outs) for x in _lower(a, o)]
    lo_program.__name__ = name
    self.run = api.jit(lo_program)

  def call(self, args) -> list:
    vals = [*self.consts, *args]
    outs = iter(self.run(*[x for a, v in zip(self.in_avals, vals) for x in _lower(a, v)]))
    return [_raise(a, outs) for a in self.out_avals]

  def __call__(self, leaves):
    return tree_util.tree_unflatten(self.out_tree, self.call(leaves))


def _hi_compile(jaxpr: core.Jaxpr, consts: list, out_tree, name: str) -> _HiCall | None:
  if (any(isinstance(v.aval, HiType) for v in (*jaxpr.invars, *jaxpr.outvars))
      or any(_crosses_hi(e) for e in jaxpr.eqns)):
    return _HiCall(jaxpr, consts, out_tree, name)
  return None


pjit.hi_compile[0] = _hi_compile
eval_lojax[0] = _eval_lojax


# --- eager `lax.scan` over hijax-typed carries, xs and ys


def _hi_scan(closed, consts, init, xs, nk, length, reverse, unroll):
  """`scan` of the body `closed` (invars: consts, carries, xs) whose values include
  hijax-typed ones, run eagerly as a scan of their arrays, as JAX's `scan_p.to_lojax`: each
  hijax value is lowered (`lower_val`, of its body type: a stacked xs value gives its stacked
  arrays), the body runs on raised per-iteration values, results are raised with the body's
  output types (`raise_val`; a value's type is read from its arrays, as `typeof` does)."""
  in_avals, out_avals = list(closed.in_avals), list(closed.out_avals)
  nc = len(consts)
  lo = lambda avals, vals: [[x for x in _lower(a, v)] for a, v in zip(avals, vals)]
  consts_lo = lo(in_avals[:nc], consts)
  init_lo = lo(in_avals[nc:nc + nk], init)
  xs_lo = lo(in_avals[nc + nk:], xs)

  def body(carry_lo, x_lo):
    it = iter([x for xs_ in (*consts_lo, *carry_lo, *x_lo) for x in xs_])
    vals = [_raise(a, it) for a in in_avals]
    outs = _eval_lojax(closed.jaxpr, vals, closed.consts)
    outs_lo = lo(out_avals, outs)
    return outs_lo[:nk], outs_lo[nk:]

  carry_lo, ys_lo = loops.scan(body, init_lo, xs_lo, length=length, reverse=reverse,
                               unroll=unroll)
  carry = [_raise(a, iter(v)) for a, v in zip(out_avals[:nk], carry_lo)]
  ys = [_raise(a, iter(v)) for a, v in zip(out_avals[nk:], ys_lo)]
  return carry, ys


loops.hi_scan[0] = _hi_scan


# --- mutable hijax values (flax.nnx's hijax Variables): HiPrimitives run on their values


def _mutable_aval(x: Any) -> Any:
  """The type of `x` when it is a mutable hijax value (a `MutableHiType`'s), else None."""
  to_aval = core.hitype_mappings.get(type(x))
  if to_aval is None:
    return None
  aval = to_aval(x)
  return aval if getattr(aval, "has_qdd", False) is True else None


class _Owners:
  """Which trace each mutable hijax value being staged belongs to: while a jit of the
  values' arrays is traced, each value's state is that trace's tracers (HiPrimitives then
  run on it: their `to_lojax`, as JAX's lowering of the staged program does). A value a
  HiPrimitive makes while staging belongs to that trace."""

  def __init__(self):
    self.by_id: dict[int, list] = {}   # id -> [value, stack of owning traces]

  def push(self, x: Any, trace: Any) -> None:
    entry = self.by_id.setdefault(id(x), [x, []])
    if entry[0] is not x:
      self.by_id[id(x)] = entry = [x, []]
    entry[1].append(trace)

  def pop(self, x: Any) -> None:
    entry = self.by_id.get(id(x))
    if entry is not None and entry[0] is x:
      entry[1].pop()
      if not entry[1]:
        del self.by_id[id(x)]

  def owner(self, x: Any) -> Any:
    entry = self.by_id.get(id(x))
    return entry[1][-1] if entry is not None and entry[0] is x and entry[1] else None


_owners = _Owners()
#: id(trace) -> the values met in that trace (a jit of mutable hijax state being traced)
#: that it does not take: (value, type, state type, arrays) to restore and take next time.
_managed: dict[int, list] = {}


class _HiMet(pjit.MutableHiLeaf):
  """Mutable hijax values met while staging a computation that does not take them (a jit
  closing over them: traced again taking them, as JAX's jit takes them as hidden
  arguments)."""

  def __init__(self, values: list):
    super().__init__(
        f"stagecraft does not stage hijax primitives on mutable hijax values "
        f"({type(values[0]).__name__}) closed over by a computation other than a jit call "
        f"or lax.scan (cond, while_loop, fori_loop, vmap, custom_vjp/jvp functions, "
        f"jit(f).trace()/.lower()): pass them as arguments.")
    self.values = values


class _Passed(Exception):
  """A `_HiMet` leaving the jit of a program over mutable hijax state (not a MutableHiLeaf,
  so that jit passes it on to `_mutable_hi_call`)."""

  def __init__(self, met: _HiMet):
    super().__init__(str(met))
    self.met = met


def _adopt(x: Any, trace: Any, met: list) -> None:
  """Makes the value `x`, met in the managed trace `trace`, belong to it for the rest of
  this trace (its state as it is now: constants), remembering how to restore it."""
  _owners.push(x, trace)
  aval = _mutable_aval(x)
  qdd = cur_qdd(x)
  met.append((x, aval, qdd, list(aval.read_loval(qdd, x))))


def _bind_staged(prim: HiPrimitive, trace: Any, args: tuple, params: dict) -> Any:
  """A HiPrimitive bound while a computation is staged: run on the values (`to_lojax`) when
  every mutable hijax operand belongs to this trace; its mutable hijax results then do too.
  A value no trace holds met in a jit of mutable hijax state joins it (that jit is traced
  again taking it); elsewhere it is a `_HiMet` error."""
  for a in args:
    if _mutable_aval(a) is None or _owners.owner(a) is trace:
      continue
    met = _managed.get(id(trace))
    if met is None or _owners.owner(a) is not None:
      raise _HiMet([a])
    _adopt(a, trace, met)
  out = prim.to_lojax(*args, **params)
  for o in (out if prim.multiple_results else [out]):
    if _mutable_aval(o) is not None and _owners.owner(o) is None:
      _owners.push(o, trace)
  return out


def _is_staging(trace: Any) -> bool:
  return isinstance(trace, pe.DynamicJaxprTrace) and not isinstance(trace, ad.PartialEvalTrace)


#: per jit-compiled function: its programs over mutable hijax state, and the values it
#: closes over (taken as hidden arguments at each call).
_mutable_calls: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _mutable_hi_call(jitted, fun, args, kwargs, static_argnums, static_argnames,
                     met: Any = None):
  """A jit call of `fun` some of whose arguments (or values it closes over: `met`, found
  while tracing) are mutable hijax values (flax's hijax Variables), as JAX's: each such
  value enters as the arrays of its current state (`cur_qdd`, `read_loval`); while the
  program is traced the value holds the traced arrays (`update_from_loval`), so `fun` sees
  the same objects; their final states (whose types may differ: a Variable's tree may
  grow) leave as extra results and are written back into the values. A value given twice
  is one value. The programs are cached per state types; the values a function closes
  over are remembered and taken at its later calls.

  Raises:
    NotImplementedError: a mutable hijax value among the results; one met inside a
      computation other than jit.
  """
  calls = _mutable_calls.setdefault(jitted, {"programs": {}, "hidden": []})
  for x in (met.values if met is not None else ()):
    if all(x is not h for h in calls["hidden"]):
      calls["hidden"].append(x)
  static = tuple(args[i] for i in static_argnums if i < len(args)) + tuple(
      (k, kwargs[k]) for k in static_argnames if k in kwargs)
  dyn_args = tuple(a for i, a in enumerate(args) if i not in static_argnums)
  dyn_kwargs = {k: v for k, v in kwargs.items() if k not in static_argnames}
  while True:
    leaves, treedef = tree_util.tree_flatten((dyn_args, dyn_kwargs))
    values, slot, rest = [], [], []
    for x in [*calls["hidden"], *leaves]:
      if _mutable_aval(x) is None:
        slot.append(None)
        rest.append(x)
        continue
      j = next((j for j, v in enumerate(values) if v is x), None)
      if j is None:
        j = len(values)
        values.append(x)
      slot.append(j)
    slot = slot[len(calls["hidden"]):]
    avals = [_mutable_aval(x) for x in values]
    qdds = [cur_qdd(x) for x in values]
    lo_in = [list(a.read_loval(q, x)) for a, q, x in zip(avals, qdds, values)]
    types = tuple(zip(avals, qdds))
    key = (treedef, static, tuple(slot), types)
    entry = calls["programs"].get(key)
    if entry is None:
      entry = calls["programs"][key] = _mutable_program(
          fun, args, kwargs, static_argnums, static_argnames, treedef, slot, types,
          [len(lo) for lo in lo_in])
    run, info = entry
    # the values (not kept by the program) and the states they get back after tracing
    info["values"], info["restore"] = values, lo_in
    try:
      out, finals = run([x for lo in lo_in for x in lo], rest)
    except _Passed as p:   # values the function closes over: taken as hidden arguments
      del calls["programs"][key]
      new = [x for x in p.met.values if all(x is not v for v in values)]
      if not new:
        raise NotImplementedError(str(p.met)) from None
      calls["hidden"].extend(new)
      jitted.hi_values = calls["hidden"]   # its later calls come here
      continue
    finally:
      info.pop("restore", None)
      info.pop("values", None)
    if calls["hidden"]:
      jitted.hi_values = calls["hidden"]   # its later calls come here
    for x, (aval, qdd), lo in zip(values, info["finals"], finals):
      aval.update_from_loval(qdd, x, *lo)
    return out


def _mutable_program(fun, args, kwargs, static_argnums, static_argnames, treedef, slot,
                     types, counts):
  """The jit of `fun` over the arrays of the mutable hijax values `values` (their state
  types `types`) and the other dynamic leaves, and the record of their final state types
  (`info['finals']`, set when traced)."""
  info: dict = {}
  n_static = len([n for n in static_argnums if n < len(args)])
  static_args = {i: args[i] for i in static_argnums if i < len(args)}
  static_kwargs = {n: kwargs[n] for n in static_argnames if n in kwargs}

  def lowered(lo_flat, rest_leaves):
    trace = core.current_trace()
    vals = info["values"]
    it = iter(lo_flat)
    met: list = []
    _managed[id(trace)] = met
    entered = []
    try:
      for x, (aval, qdd), n in zip(vals, types, counts):
        _owners.push(x, trace)
        entered.append(x)
        aval.update_from_loval(qdd, x, *[next(it) for _ in range(n)])
      it_rest = iter(rest_leaves)
      new_leaves = [next(it_rest) if j is None else vals[j] for j in slot]
      a, k = tree_util.tree_unflatten(treedef, new_leaves)
      full, ai = [], iter(a)
      for i in range(len(a) + n_static):
        full.append(static_args[i] if i in static_args else next(ai))
      try:
        out = fun(*full, **k, **static_kwargs)
      except _HiMet as e:
        raise _Passed(e) from None
      if met:
        raise _Passed(_HiMet([m[0] for m in met]))
      if any(_mutable_aval(o) is not None for o in tree_util.tree_leaves(out)):
        raise NotImplementedError("stagecraft does not return mutable hijax values from jit.")
      finals = [cur_qdd(x) for x in vals]
      info["finals"] = list(zip([a for a, _ in types], finals))
      lo_out = [list(aval.read_loval(q, x)) for (aval, _), q, x in zip(types, finals, vals)]
      return out, lo_out
    finally:
      # the values' own states back (their arrays before the call), then no longer staged
      for x, (aval, qdd), lo in zip(entered, types, info["restore"]):
        aval.update_from_loval(qdd, x, *lo)
        _owners.pop(x)
      for x, aval, qdd, lo in met:
        aval.update_from_loval(qdd, x, *lo)
        _owners.pop(x)
      _managed.pop(id(trace), None)
  lowered.__name__ = getattr(fun, "__name__", "fun")
  return api.jit(lowered), info


pjit.hi_mutable_call[0] = _mutable_hi_call


def _mutable_hi_scan(f, init, xs, length, reverse, unroll, err):
  """`lax.scan` of a body that closes over mutable hijax values (`err.values`, and those
  met while tracing it), as JAX's: their states are carried as arrays; while the body is
  traced each value holds the traced arrays, and after the loop its final state.

  Raises:
    TypeError: the body changes the type of a value's state (a scan carry's type is fixed).
    NotImplementedError: a value met inside a computation the body stages.
  """
  values = list(err.values)
  while True:
    avals = [_mutable_aval(v) for v in values]
    qdds = [cur_qdd(v) for v in values]
    lo_in = [list(a.read_loval(q, v)) for a, q, v in zip(avals, qdds, values)]

    def body(carry, x, values=values, avals=avals, qdds=qdds, lo_in=lo_in):
      lo_c, c = carry
      trace = core.current_trace()
      more: list = []
      _managed[id(trace)] = more
      entered = []
      try:
        for v, a, q, lo in zip(values, avals, qdds, lo_c):
          _owners.push(v, trace)
          entered.append(v)
          a.update_from_loval(q, v, *lo)
        try:
          c2, y = f(c, x)
        except _HiMet as e:
          raise _Passed(e) from None
        if more:
          raise _Passed(_HiMet([m[0] for m in more]))
        finals = [cur_qdd(v) for v in values]
        if finals != qdds:
          raise TypeError("scan body function changed the state type of a mutable hijax "
                          "value it closes over; its type must stay the same.")
        return ([list(a.read_loval(q, v)) for a, q, v in zip(avals, finals, values)], c2), y
      finally:
        for v, a, q, lo in zip(entered, avals, qdds, lo_in):
          a.update_from_loval(q, v, *lo)
          _owners.pop(v)
        for v, a, q, lo in more:
          a.update_from_loval(q, v, *lo)
          _owners.pop(v)
        _managed.pop(id(trace), None)
    try:
      (lo_f, c_f), ys = loops.scan(body, (lo_in, init), xs, length=length, reverse=reverse,
                                   unroll=unroll)
    except _Passed as p:
      new = [x for x in p.met.values if all(x is not v for v in values)]
      if not new:
        raise NotImplementedError(str(p.met)) from None
      values.extend(new)
      continue
    for v, a, q, lo in zip(values, avals, qdds, lo_f):
      a.update_from_loval(q, v, *lo)
    return c_f, ys


loops.hi_mutable_scan[0] = _mutable_hi_scan


def _mutable_hi_eval_shape(fun, args, kwargs):
  """`eval_shape` of `fun` some of whose arguments are mutable hijax values: `fun` runs on
  values made of the traced arrays of their states (their own states are not changed, as
  JAX's); NotImplemented when no argument is such a value."""
  leaves, treedef = tree_util.tree_flatten((args, kwargs))
  avals = [_mutable_aval(x) for x in leaves]
  if all(a is None for a in avals):
    return NotImplemented
  qdds = [None if a is None else cur_qdd(x) for a, x in zip(avals, leaves)]
  lo = [list(a.read_loval(q, x)) if a is not None else [x]
        for a, q, x in zip(avals, qdds, leaves)]

  def lowered(*lo_flat):
    trace, it, vals = core.current_trace(), iter(lo_flat), []
    for a, q, l in zip(avals, qdds, lo):
      if a is None:
        vals.append(next(it))
      else:
        v = a.new_from_loval(q, *[next(it) for _ in l])
        _owners.push(v, trace)
        made.append(v)
        vals.append(v)
    a_, k_ = tree_util.tree_unflatten(treedef, vals)
    return fun(*a_, **k_)
  made: list = []
  try:
    return api.eval_shape(lowered, *[x for l in lo for x in l])
  finally:
    for v in made:
      _owners.pop(v)


api.hi_eval_shape[0] = _mutable_hi_eval_shape
