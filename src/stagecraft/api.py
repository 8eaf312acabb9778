"""User-facing transformations: `make_jaxpr`, `eval_shape`, `jvp`, `linearize`, `vjp`,
`grad`, `value_and_grad`, `jacfwd`, `jacrev`, `hessian`, `vmap`, `pmap` (`jit` lives in
`stagecraft.pjit`, below the libraries that use it)."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import weakref
from typing import Any, Callable, Sequence

import numpy as np
import optree

from stagecraft.traceback_util import api_boundary
from stagecraft import core, dtypes, key_reuse, tree_util
from stagecraft import sharding as sharding_lib
from stagecraft.api_util import (abstractify, arg_names, check_out_leaves, check_pmap_axes,
                                 check_vmap_axes, describe_arg, ensure_inbounds,
                                 flat_mapped_args, flatten, fun_signature, flatten_axes,
                                 fun_name, fun_source_info, mapped_axes, normalize_argnums,
                                 wraps)
from stagecraft.config import config
from stagecraft.core import ClosedJaxpr, ShapedArray
from stagecraft import lax, numpy as jnp
from stagecraft.interpreters import ad, batching, partial_eval as pe
from stagecraft.interpreters.mapping import mapped_aval, varying_axes
from stagecraft.lax import shape as lax_shape
from stagecraft.lax.spmd import pmap_executable, reshard_p, xla_pmap_p
from stagecraft.pjit import abstractify as typed_abstractify, jit, trace_flat
from stagecraft.runtime import client
from stagecraft.runtime.array import Array
from stagecraft.state import AbstractRef, Ref, check_ref_args, freeze, write_back
from stagecraft.tree_util import treedef_str

__all__ = ["make_jaxpr", "eval_shape", "jvp", "linearize", "vjp", "value_and_grad", "grad",
           "jacfwd", "jacrev", "jacobian", "hessian", "linear_transpose", "vmap", "pmap",
           "jit", "typeof", "clear_caches", "fwd_and_bwd", "print_environment_info", "Ref",
           "new_ref", "freeze", "DontWant", "DidntWant", "GradRef", "GradValue"]

_NS = tree_util.NAMESPACE

# ---------------------------------------------------------------------------
# make_jaxpr, eval_shape


def make_jaxpr(fun: Callable, static_argnums: int | Sequence[int] = (),
               axis_env: Sequence[tuple[Any, int]] | None = None,
               return_shape: bool = False) -> Callable[..., ClosedJaxpr]:
  """Returns a function that traces `fun` and gives its ClosedJaxpr.

  Args:
    fun: the function to trace.
    static_argnums: positions of arguments treated as Python constants.
    axis_env: optional `[(axis name, size), ...]`: named axes bound while `fun` is traced,
      so its collectives over them (`lax.psum(x, 'i')`) are staged, as under a pmap.
    return_shape: also return the output pytree of ShapeDtypeStructs.

  Returns:
    `f(*args, **kwargs) -> ClosedJaxpr` (and the output shapes with `return_shape`). Args
    may be arrays, scalars or ShapeDtypeStructs. As JAX's, it is named `make_jaxpr(f)`
    (`__name__` and `__qualname__`), has `fun`'s docstring (`""` for none) and
    `__module__ == "jax"`.

  Example:
    >>> import stagecraft, stagecraft.numpy as jnp
    >>> print(stagecraft.make_jaxpr(lambda x: jnp.sin(x) * 2.0)(jnp.ones(3)))
    { lambda ; a:f32[3]. let b:f32[3] = sin a; c:f32[3] = mul b 2.0:f32[] in (c,) }
  """
  static_argnums = normalize_argnums(static_argnums, "static_argnums")
  try:   # as JAX's: a function that cannot be hashed or weakly referenced is wrapped
    hash(fun)
    weakref.ref(fun)
  except TypeError:
    fun = functools.partial(fun)

  @wraps(fun)
  @api_boundary
  def make(*args, **kwargs):
    with contextlib.ExitStack() as stack:
      for name, size in axis_env or ():
        stack.enter_context(batching.extend_axis_env(name, size))
      traced, _ = trace_flat(fun, args, kwargs, static_argnums, (), "make_jaxpr")
    closed = traced.closed
    if return_shape:
      return closed, traced.out_shapes()
    return closed

  make.__module__ = "jax"   # NB: JAX's names: `make_jaxpr(f)`
  if hasattr(fun, "__qualname__"):
    make.__qualname__ = f"make_jaxpr({fun.__qualname__})"
  if hasattr(fun, "__name__"):
    make.__name__ = f"make_jaxpr({fun.__name__})"
  return make


def _mesh_reaching(jaxpr: core.Jaxpr) -> dict:
  """Per variable of `jaxpr`, the mesh of the typed (split) values it is computed from, as
  JAX's avals carry the mesh of their operands (absent: computed from none)."""
  meshes: dict = {}
  for v in jaxpr.invars:
    if getattr(v.aval, "_sharding", None) is not None:
      meshes[v] = v.aval._sharding.mesh
  for eqn in jaxpr.eqns:
    mesh = next((meshes[x] for x in eqn.invars if not isinstance(x, core.Literal)
                 and x in meshes), None)
    for o in eqn.outvars:
      m = o.aval._sharding.mesh if getattr(o.aval, "_sharding", None) is not None else mesh
      if m is not None:
        meshes[o] = m
  return meshes


@api_boundary
def _explicit_or_manual(mesh) -> bool:
  """Whether every axis of `mesh` is Explicit or Manual (JAX's condition for a traced
  result's `ShapeDtypeStruct` to carry its type's sharding)."""
  return all(t in (sharding_lib.AxisType.Explicit, sharding_lib.AxisType.Manual)
             for t in mesh.axis_types)


#: `eval_shape(fun, args, kwargs)` of a function some of whose arguments are mutable hijax
#: values, or NotImplemented when none is; installed by `experimental.hijax` (NB: a hook
#: from above: only it makes such values).
hi_eval_shape: list = [None]


def eval_shape(fun: Callable, *args, **kwargs):
  """Output shapes and dtypes of `fun(*args, **kwargs)` without running it.

  Args may be arrays, scalars or ShapeDtypeStructs (anything with `shape` and `dtype`).

  Returns:
    The output pytree with a ShapeDtypeStruct (keeping weak types) at each leaf. As JAX's,
    a leaf computed over a mesh carries its sharding type (`sharding=NamedSharding(
    AbstractMesh, spec)`, one spec entry per dimension): the mesh of the inputs' or
    results' types, else the mesh set by `sharding.set_mesh`; a result that is a constant
    of the program, or of a program over no mesh, has `sharding=None`.
  """
  if hi_eval_shape[0] is not None:   # mutable hijax values among the arguments
    out = hi_eval_shape[0](fun, args, kwargs)
    if out is not NotImplemented:
      return out
  given = {}   # output leaf index -> a ShapeDtypeStruct `fun` returned (JAX passes it on)

  def fun_(*a, **k):
    out = fun(*a, **k)
    leaves, tree = optree.tree_flatten(out, none_is_leaf=False, namespace=tree_util.NAMESPACE)
    if not any(type(x) is core.ShapeDtypeStruct for x in leaves):
      return out
    for i, x in enumerate(leaves):
      if type(x) is core.ShapeDtypeStruct:
        given[i] = x   # a stand-in of its shape and dtype (a view: no memory)
        leaves[i] = np.broadcast_to(np.zeros((), x.dtype), x.shape)
    return optree.tree_unflatten(tree, leaves)
  functools.update_wrapper(fun_, fun)
  # NB: a ShapeDtypeStruct of a typed key's dtype stands for a key array over its data
  def key_struct(x):
    staged = (tree_util.staged_aval(x) if type(x) is core.ShapeDtypeStruct
              and core.is_extended_dtype(x.dtype) else None)
    if staged is None:
      return x
    data_aval, rebuild = staged
    return rebuild(core.ShapeDtypeStruct(data_aval.shape, data_aval.dtype))
  if any(type(x) is core.ShapeDtypeStruct and core.is_extended_dtype(x.dtype)
         for x in optree.tree_leaves((args, kwargs), namespace=tree_util.NAMESPACE)):
    args, kwargs = optree.tree_map(key_struct, (args, kwargs), namespace=tree_util.NAMESPACE)
  traced, _ = trace_flat(fun_, args, kwargs, (), (), "eval_shape")
  jaxpr = traced.jaxpr
  ctx = sharding_lib.get_abstract_mesh()
  reaching = {} if not ctx.empty else _mesh_reaching(jaxpr.jaxpr)
  leaves = []
  for v, a in zip(jaxpr.jaxpr.outvars, jaxpr.out_avals):
    if a is core.abstract_token:   # a token result: its aval, as JAX's
      leaves.append(a)
      continue
    mesh = None if isinstance(v, core.Literal) else (ctx if not ctx.empty else
                                                     reaching.get(v))
    if mesh is not None and not _explicit_or_manual(mesh):
      mesh = None   # as JAX's: an Auto mesh leaves the result's sharding to the compiler
    s = None if mesh is None else sharding_lib.NamedSharding(
        mesh, sharding_lib.PartitionSpec(*sharding_lib.spec_entries(a._sharding, a.ndim)))
    leaves.append(core.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type, sharding=s))
  for i, x in given.items():
    leaves[i] = core.ShapeDtypeStruct(x.shape, x.dtype, weak_type=x.weak_type,
                                      sharding=x.sharding)
  out = optree.tree_unflatten(traced.out_tree, leaves)
  # NB: a typed key array result is a ShapeDtypeStruct of its key dtype, as JAX's
  is_key = lambda x: type(x) in tree_util.staged_types
  return optree.tree_map(lambda x: core.ShapeDtypeStruct(x.shape, x.dtype) if is_key(x)
                         else x, out, namespace=tree_util.NAMESPACE, is_leaf=is_key)


# ---------------------------------------------------------------------------
# Differentiation: jvp, linearize, vjp, grad, value_and_grad (interpreters/ad.py)


def _flat_fun(fun: Callable, in_tree, has_aux: bool, store: list):
  """`fun` on flat inputs with flat outputs; records (out_tree, n_out, aux_tree)."""
  def flat(*leaves):
    args = tree_util.tree_unflatten(in_tree, leaves)
    out = fun(*args)
    aux = None
    if has_aux:
      if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise TypeError(f"expected function with aux output to return a two-element "
                        f"tuple, but got type {type(out)} with value {out!r}")   # JAX's
      out, aux = out
    out_leaves, out_tree = flatten(out)
    check_out_leaves(out_leaves, out_tree, fun_name(fun), "differentiation")
    aux_leaves, aux_tree = flatten(aux)
    aux_spec = _AuxSpec(aux_tree, aux_leaves)
    store[:] = [out_tree, len(out_leaves), aux_spec]
    return [*out_leaves, *aux_spec.traced(aux_leaves)]
  return flat


class _AuxSpec:
  """How to rebuild the aux output of a `has_aux` function from its traced leaves: as in
  JAX, aux leaves that are not tracers (strings, `object()`s, concrete arrays) come back
  as they were, untouched; only the tracers go through the transformation (equinox returns
  such aux data from `filter_grad` / `filter_vjp`)."""
  __slots__ = ("tree", "static")

  def __init__(self, tree, leaves: Sequence[Any]):
    self.tree = tree
    self.static = [None if isinstance(a, core.Tracer) else (a,) for a in leaves]

  def traced(self, leaves: Sequence[Any]) -> list:
    return [a for a, s in zip(leaves, self.static) if s is None]

  def unflatten(self, traced: Sequence[Any]) -> Any:
    it = iter(traced)
    return tree_util.tree_unflatten(self.tree, [next(it) if s is None else s[0]
                                             for s in self.static])


def _linearize(fun: Callable, primals: Sequence[Any], has_aux: bool, is_vjp: bool = True):
  """`fun` linearized at `primals` (shared by linearize and vjp): the flat primals and
  their tree, the flat outputs (aux last), the linear jaxpr and its residuals, which outputs
  have zero tangents, the output tree, the number of outputs and the aux tree."""
  p_leaves, p_tree = flatten(tuple(primals))
  store: list = []
  flat = _flat_fun(fun, p_tree, has_aux, store)
  p_out, lin, residuals, zero_outs = ad.linearize_flat(flat, p_leaves, is_vjp)
  out_tree, n_out, aux_tree = store
  return p_leaves, p_tree, p_out, lin, residuals, zero_outs, out_tree, n_out, aux_tree


def _check_tangent(p, t, path: str):
  _check_tangent_aval(core.get_aval(p), t, path)


def _check_tangent_aval(pa, t, path: str):
  """`_check_tangent` given the primal's aval `pa`."""
  ta = core.get_aval(t) if not _is_float0(t) else None
  if pa is core.abstract_token and ta is core.abstract_token:   # a token's tangent: a token
    return
  expected = ad.tangent_aval(pa).dtype
  got = dtypes.float0 if _is_float0(t) else ta.dtype
  if expected != got:
    raise TypeError(
        f"primal and tangent arguments to jax.jvp do not match; dtypes must be equal, or in "
        f"case of int/bool primal dtype the tangent dtype must be float0. Got primal dtype "
        f"{pa.dtype.name} and so expected tangent dtype {expected.name}, but got tangent "
        f"dtype {got.name} instead (at {path or 'the root'}).")
  shape = np.shape(t)
  if tuple(shape) != pa.shape:
    raise ValueError(f"jvp called with different primal and tangent shapes: got primal "
                     f"shape {pa.shape} and tangent shape {tuple(shape)} at "
                     f"{path or 'the root'}.")


def _is_float0(x) -> bool:
  return getattr(x, "dtype", None) == dtypes.float0


def _out_tangent(t, primal):
  """An output tangent for the user: zeros materialized, weakly typed iff its primal is
  (JAX's tangents follow their primal's weak type)."""
  return _out_tangent_aval(t, core.get_aval(primal), isinstance(primal, (Array, core.Tracer)))


def _out_tangent_aval(t, pa, primal_is_array: bool):
  """`_out_tangent` given the primal's aval `pa` and whether the primal is an array."""
  t = ad.instantiate_zeros(t)
  ta = core.get_aval(t)
  if ta is core.abstract_token:   # a token's tangent (a token) as it is
    return t
  if (primal_is_array and not isinstance(t, (Array, core.Tracer))
      and ta.dtype != dtypes.float0):
    # NB: a host tangent passed through untouched (the tangent of `x + 1` is the input's
    # tangent `1.0`) comes back as an Array when its primal is one, as in JAX.
    return lax.convert_element_type(t, ta.dtype, weak_type=pa.weak_type)
  if ta.weak_type != pa.weak_type and ta.dtype == pa.dtype and ta.dtype != dtypes.float0:
    return lax.convert_element_type(t, ta.dtype, weak_type=pa.weak_type)
  return t


@api_boundary
def jvp(fun: Callable, primals: Sequence[Any], tangents: Sequence[Any], has_aux: bool = False):
  """Forward-mode derivative: `fun(*primals)` and its directional derivative along
  `tangents`.

  Args:
    fun: a function of arrays (pytrees) returning arrays (pytrees).
    primals: a tuple or list of the arguments.
    tangents: the same structure; each tangent has its primal's shape and dtype, or dtype
      float0 for integer and bool primals.
    has_aux: `fun` returns `(output, aux)`; aux is returned undifferentiated.

  A `Ref` among the primals is passed as a ref; its tangent may be a `Ref` (the
  tangent's writes land there), else reading (writing) it raises JAX 0.10.2's ValueError
  (AttributeError).

  Returns:
    `(primals_out, tangents_out)` (and `aux` with has_aux).

  Raises:
    TypeError: if primals/tangents are not tuples or lists, their structures or dtypes
      differ, or a primitive lacks a JVP rule (MissingRuleError).
    ValueError: if shapes differ.
  """
  if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
    raise TypeError(f"primal and tangent arguments to jax.jvp must be tuples or lists; found "
                    f"{type(primals).__name__} and {type(tangents).__name__}.")
  p_leaves, p_tree = flatten(tuple(primals))
  t_leaves, t_tree = flatten(tuple(tangents))
  if flatten(primals)[1] != flatten(tangents)[1]:   # NB: as JAX's, a tuple is no list
    raise TypeError(f"primal and tangent arguments to jax.jvp must have the same tree "
                    f"structure; primals have tree structure {treedef_str(flatten(primals)[1])}"
                    f" whereas tangents have tree structure "
                    f"{treedef_str(flatten(tangents)[1])}.")
  paths = [tree_util.keystr(k) for k, _ in tree_util.tree_flatten_with_path(tuple(primals))[0]]
  ref_pos = [i for i, p in enumerate(p_leaves) if isinstance(p, Ref)]
  refs = [(p_leaves[i], t_leaves[i]) for i in ref_pos]
  if ref_pos:   # the refs' values go in; see `_jvp_ref_proxies`
    p_leaves, t_leaves = list(p_leaves), list(t_leaves)
    for i in ref_pos:
      p_leaves[i] = p_leaves[i][...]
      if isinstance(t_leaves[i], Ref):
        t_leaves[i] = t_leaves[i][...]
  for p, t, path in zip(p_leaves, t_leaves, paths):
    _check_tangent(p, t, path)
  store: list = []
  flat = _flat_fun(fun, p_tree, has_aux, store)
  written: list = []
  if ref_pos:
    flat = _jvp_ref_proxies(flat, ref_pos, refs, written)
  t_in = [ad.Zero.from_value(p) if _is_float0(t) else t for p, t in zip(p_leaves, t_leaves)]
  p_out, t_out = ad.jvp_flat(flat, p_leaves, t_in, None)
  if written:   # the refs' final values: the primal's into the ref, the tangent's into its
    n = len(p_out) - len(written)
    for k, p, t in zip(written, p_out[n:], t_out[n:]):
      write_back([refs[k][0]], [p])
      write_back([refs[k][1]], [ad.instantiate_zeros(t)])
    p_out, t_out = p_out[:n], t_out[:n]
  out_tree, n_out, aux_tree = store
  primals_out = tree_util.tree_unflatten(out_tree, p_out[:n_out])
  tangents_out = tree_util.tree_unflatten(out_tree, [_out_tangent(t, p) for t, p in
                                                  zip(t_out[:n_out], p_out)])
  if has_aux:
    return primals_out, tangents_out, aux_tree.unflatten(p_out[n_out:])
  return primals_out, tangents_out


def _jvp_ref_proxies(flat: Callable, ref_pos: list[int], refs: list, written: list
                     ) -> Callable:
  """`flat` (of a `jvp`) seeing a new ref at each of `ref_pos`, holding the value of the
  ref passed there (a JVP tracer), as JAX's jvp of a function of refs: the final values of
  the refs written are extra outputs (their positions among the refs left in `written`).
  A ref whose tangent is not a ref cannot be read or written (JAX 0.10.2's errors)."""
  def wrapped(*xs):
    xs = list(xs)
    ins = [xs[i] for i in ref_pos]
    proxies = []
    for i, (_, t) in zip(ref_pos, refs):
      p = xs[i] = Ref(xs[i], core.current_trace())
      if not isinstance(t, Ref):
        a = core.get_aval(t)
        p._noread = (ValueError, f"`get` must be called on `Ref` types: "
                                 f"{'~' * a.weak_type}{a.str_short(short_dtypes=False)}.")
        p._nowrite = (AttributeError, f"'{type(t).__name__}' object has no attribute 'aval'"
                      if dtypes.is_python_scalar(t) else
                      "'ShapedArray' object has no attribute 'kind'", refs[len(proxies)][0])
      proxies.append(p)
    outs = flat(*xs)
    written[:] = [k for k, (p, v) in enumerate(zip(proxies, ins)) if p._value is not v]
    return [*outs, *[proxies[k]._value for k in written]]
  return wrapped


@api_boundary
def linearize(fun: Callable, *primals, has_aux: bool = False):
  """`fun(*primals)` and its linearization, a function of tangents evaluated from a staged
  linear jaxpr (the primal work is done once, here).

  Returns:
    `(primals_out, f_jvp)` (and aux with has_aux), where `f_jvp(*tangents)` gives the
    output tangents.
  """
  (p_leaves, p_tree, p_out, lin, residuals, zero_outs, out_tree, n_out,
   aux_tree) = _linearize(fun, primals, has_aux, is_vjp=False)
  primals_out = tree_util.tree_unflatten(out_tree, p_out[:n_out])
  # NB: as JAX's, the linearized function is a `Partial` whose leaves are the residuals
  # (a pytree: vmap/jit of a function returning it batch / pass the residuals; equinox's
  # checkpointed while loop vmaps `linearize`); the rest is static.
  static = functools.partial(
      _lift_linearized, lin, p_tree, [core.get_aval(p) for p in p_leaves],
      [(core.get_aval(p), isinstance(p, (Array, core.Tracer))) for p in p_out], zero_outs,
      out_tree, n_out)
  f_jvp = tree_util.Partial(static, list(residuals))

  if has_aux:
    return primals_out, f_jvp, aux_tree.unflatten(p_out[n_out:])
  return primals_out, f_jvp


def _lift_linearized(lin, p_tree, in_avals, outs_info, zero_outs, out_tree, n_out,
                     residuals, *tangents):
  """The tangents of a `linearize`d function's outputs for `tangents` (one per primal),
  evaluating the linear jaxpr `lin` on its `residuals`.

  Raises:
    TypeError: for tangents of another tree (JAX's "expected ..., got ...");
    ValueError: for a tangent of another shape or dtype than its primal's tangent type.
  """
  t_leaves, t_tree = flatten(tuple(tangents))
  if t_tree != p_tree:
    raise TypeError(f"expected {treedef_str(p_tree)}, got {treedef_str(t_tree)}")
  for pa, t in zip(in_avals, t_leaves):
    expected = ad.tangent_aval(pa)
    ta = core.get_aval(t)
    if (ta is not expected and (not isinstance(ta, ShapedArray)
                                or not isinstance(expected, ShapedArray)
                                or (ta.shape, ta.dtype) != (expected.shape, expected.dtype))):
      if isinstance(expected, ShapedArray) and isinstance(pa, ShapedArray):
        expected = expected.update(weak_type=pa.weak_type)   # NB: as JAX prints it
      raise ValueError(f"linearized function called on tangent values inconsistent with the "
                       f"original primal values:\nGot tangent aval {ta} for primal aval "
                       f"{pa} but expected {expected}.")
  vals = core.eval_jaxpr(lin, [], *residuals, *t_leaves)
  it = iter(vals)
  outs = [_out_tangent_aval(ad.Zero(ad.tangent_aval(pa)) if z else next(it), pa, is_array)
          for (pa, is_array), z in zip(outs_info, zero_outs)]
  return tree_util.tree_unflatten(out_tree, outs[:n_out])


@api_boundary
def vjp(fun: Callable, *primals, has_aux: bool = False, reduce_axes: Sequence = ()):
  """Reverse-mode derivative: `fun(*primals)` and a function pulling output cotangents back
  to the inputs (linearize, then transpose the linear jaxpr).

  Returns:
    `(primals_out, vjp_fn)` (and aux with has_aux); `vjp_fn(cotangents)` takes a pytree of
    the output's structure, shapes and dtypes and returns a tuple with one cotangent per
    primal (float0 zeros for integer primals).

  A `Ref` among the primals is passed as a ref (its writes happen in the forward pass);
  its cotangent is expected to be a ref: `vjp_fn` gives a new zero ref where none flows
  back to it and raises JAX's ValueError ("Expected cotangent type Ref{...} but got ...")
  otherwise.

  Raises (`vjp_fn`, when called):
    ValueError: if the cotangents' structure, shapes or dtypes differ from the output's
      (JAX 0.10's words), or a cotangent flows to a ref; MissingRuleError: if a primitive
      lacks a transpose rule.
  """
  if reduce_axes:
    raise NotImplementedError("reduce_axes argument to vjp is deprecated")
  leaves, tree = flatten(tuple(primals))
  ref_pos = [i for i, x in enumerate(leaves) if isinstance(x, Ref)]
  if ref_pos:
    return _vjp_of_refs(fun, leaves, tree, ref_pos, has_aux)
  (p_leaves, p_tree, p_out, lin, residuals, zero_outs, out_tree, n_out,
   aux_tree) = _linearize(fun, primals, has_aux)
  primals_out = tree_util.tree_unflatten(out_tree, p_out[:n_out])
  pullback = _Pullback(fun, lin, out_tree, n_out, p_tree, [core.get_aval(p) for p in p_out],
                       [i for i, z in enumerate(zero_outs) if not z])
  # As JAX 0.10's: the residuals that are primal leaves are kept by leaf (in the primals'
  # order, `NotNeeded()` for the others), the rest in residual order after them.
  index = {id(x): i for i, x in enumerate(p_leaves)}
  used = {index[id(r)] for r in residuals if id(r) in index}
  opaque = [r for r in residuals if id(r) not in index]
  it = iter(range(len(opaque)))
  spec = tuple((True, index[id(r)]) if id(r) in index else (False, next(it))
               for r in residuals)
  # NB: `args_res` mirrors the arguments: one entry per argument, its containers as tuples
  args_res = p_tree.walk([x if i in used else NotNeeded() for i, x in enumerate(p_leaves)],
                         lambda _, __, children: tuple(children), None)
  vjp_fn = VJP(pullback, spec, list(args_res), opaque)
  if has_aux:
    return primals_out, vjp_fn, aux_tree.unflatten(p_out[n_out:])
  return primals_out, vjp_fn


def _vjp_of_refs(fun: Callable, leaves: list, tree, ref_pos: list[int], has_aux: bool):
  """`vjp` at primals some of whose leaves (at `ref_pos`) are Refs, as JAX 0.10.2 does it:
  the forward pass runs on the refs' values, each seen by `fun` as a new ref (its writes
  are written back into the ref after), and the backward function raises JAX's
  ValueError, a ref's cotangent being expected to be a ref."""
  refs = [leaves[i] for i in ref_pos]
  values = list(leaves)
  for i in ref_pos:
    values[i] = leaves[i][...]
  written: list = []

  def fun_in(*primals):
    flat = list(flatten(primals)[0])
    ins = [flat[i] for i in ref_pos]
    proxies = [Ref(v, core.current_trace()) for v in ins]
    for i, p in zip(ref_pos, proxies):
      flat[i] = p
    out = fun(*tree_util.tree_unflatten(tree, flat))
    written[:] = [k for k, (p, v) in enumerate(zip(proxies, ins)) if p._value is not v]
    finals = [proxies[k]._value for k in written]
    return (out[0], (out[1], finals)) if has_aux else (out, (None, finals))

  primals_out, vjp_fn, (aux, finals) = vjp(fun_in, *tree_util.tree_unflatten(tree, values),
                                           has_aux=True)
  write_back([refs[k] for k in written], finals)
  vjp_fn._pullback.ref_leaves = {i: core.get_aval(values[i]) for i in ref_pos}
  return (primals_out, vjp_fn, aux) if has_aux else (primals_out, vjp_fn)


class _Pullback:
  """What a VJP needs besides its residuals: the linear jaxpr (residuals, then tangents ->
  the nonzero output tangents), the output and input trees and the output tangent avals.
  Static (the pytree aux data of a VJP), compared by identity."""
  __slots__ = ("name", "src_info", "lin", "out_tree", "n_out", "in_tree", "out_avals",
               "primal_out_avals", "nonzero_outs", "ref_leaves")

  def __init__(self, fun, lin, out_tree, n_out, in_tree, primal_out_avals, nonzero_outs):
    self.name, self.src_info = fun_name(fun), fun_source_info(fun)
    self.lin, self.out_tree, self.n_out = lin, out_tree, n_out
    self.in_tree, self.primal_out_avals = in_tree, primal_out_avals
    self.out_avals = [ad.tangent_aval(a) for a in primal_out_avals]
    self.nonzero_outs = nonzero_outs
    # The flat positions of the refs among the primals, with their values' avals: JAX
    # expects a ref's cotangent to be a ref (a new zero ref where none flows back).
    self.ref_leaves: dict = {}

  def __call__(self, residuals, cotangents, wanted=None):
    ct_leaves, ct_tree = flatten(cotangents)
    if ct_tree != self.out_tree:   # JAX 0.10's ValueError and words
      raise ValueError(
          "unexpected tree structure.\n\nThe argument to a VJP function returned by "
          "`jax.vjp` must match the pytree\nstructure of the differentiated function "
          f"{self.src_info}.\n\nBut the tree structures differ:\n" + "\n".join(
              f"  * out{tree_util.node_path_str(path)} was a {a} in the original output, "
              f"but a {b} here, so {why}." for path, a, b, why
              in tree_util.equality_errors_pytreedef(self.out_tree, ct_tree)))
    ignored = set()
    for i, (ct, want, primal) in enumerate(zip(ct_leaves, self.out_avals,
                                              self.primal_out_avals)):
      got = (ShapedArray(np.shape(ct), dtypes.float0) if _is_float0(ct) else
             core.get_aval(ct))
      if (want is not core.abstract_token and want.dtype == dtypes.float0
          and got is not core.abstract_token and got.shape == want.shape):
        ignored.add(i)   # as JAX's: any cotangent of an integer output's shape is accepted
        continue         # (flax's tabulate passes the int output back), and unused
      if (got is not want if core.abstract_token in (got, want)   # a token's: a token
          else got.shape != want.shape or got.dtype != want.dtype):
        raise ValueError(
            f"unexpected JAX type (e.g. shape/dtype) for argument to VJP function: got "
            f"{got.str_short(short_dtypes=False)}, but expected "
            f"{want.str_short(short_dtypes=False)} because the corresponding output of the "
            f"differentiated function had JAX type {primal.str_short(short_dtypes=False)}")
    cts = [ct_leaves[i] if i < self.n_out and i not in ignored else ad.Zero(self.out_avals[i])
           for i in self.nonzero_outs]
    n_res = len(residuals)
    args = [*residuals, *[ad.UndefinedPrimal(v.aval) for v in self.lin.invars[n_res:]]]
    cts_in = list(ad.backward_pass(self.lin, args, cts, wanted=wanted and
                                   [True] * n_res + list(wanted))[n_res:])
    for i, aval in self.ref_leaves.items():
      if type(cts_in[i]) is not ad.Zero:
        raise ValueError(f"Expected cotangent type {AbstractRef(aval)} but got "
                         f"{ad.tangent_aval(aval).str_short(short_dtypes=False)}")
      cts_in[i] = new_ref(lax.convert_element_type(jnp.zeros(aval.shape, aval.dtype),
                                                   aval.dtype, weak_type=aval.weak_type))
    return tree_util.tree_unflatten(self.in_tree, [c if isinstance(c, Ref) else
                                                   ad.instantiate_zeros(c) for c in cts_in])


# A VJP function called with several cotangent arguments: JAX's first paragraph (what users
# match), then how to call it.
_VJP_TOO_MANY_ARGS = (
    "\nThe function returned by `jax.vjp` applied to {} was called with {} arguments,\n"
    "but functions returned by `jax.vjp` must be called with a single argument\n"
    "corresponding to the single value returned by the function being differentiated\n"
    "(even if that returned value is a tuple or other container).\n\n"
    "For a function returning a pair, pass its two cotangents as one tuple: write\n"
    "`f_vjp((ct1, ct2))`, not `f_vjp(ct1, ct2)`.\n")


class VJP:
  """The backward function `vjp` returns: `vjp_fn(cotangents)` takes a pytree of the
  output's structure, shapes and dtypes and returns a tuple with one cotangent per primal.

  A pytree whose leaves are the residuals saved by the forward pass (JAX 0.10's `VJP`), so
  it can be returned from `jit`, passed through `make_jaxpr` and flattened.

  Raises (when called):
    ValueError: if the cotangents' structure, shapes or dtypes differ from the output's
      (JAX 0.10's words); MissingRuleError: if a primitive lacks a transpose rule;
      TypeError: if called with more than one argument (JAX's message).
  """
  # NB: weakly referenceable, as JAX's (jit of a vjp function)
  __slots__ = ("_pullback", "_spec", "args_res", "opaque_residuals", "__weakref__")

  def __init__(self, pullback: _Pullback, spec: tuple, args_res: list, opaque_residuals: list):
    self._pullback = pullback
    self._spec = spec   # per residual: (True, primal leaf index) or (False, opaque index)
    # Per argument, its tree with containers as tuples: at each leaf the value where the
    # backward pass reads it verbatim, else NotNeeded() (JAX 0.10's `args_res`).
    self.args_res = args_res
    self.opaque_residuals = opaque_residuals   # the other residuals

  @property
  def residuals(self) -> list:
    """The residuals in the order the linear jaxpr reads them."""
    args = optree.tree_leaves(self.args_res, is_leaf=lambda x: isinstance(x, NotNeeded),
                              namespace=_NS)
    return [args[i] if primal else self.opaque_residuals[i] for primal, i in self._spec]

  def __call__(self, cotangents, *extra_args):
    if extra_args:
      raise TypeError(_VJP_TOO_MANY_ARGS.format(self._pullback.name, len(extra_args) + 1))
    return self._pullback(self.residuals, cotangents)

  def with_refs(self, *maybe_ct_refs) -> tree_util.Partial:
    """The backward function with a destination per primal leaf (JAX's `VJP.with_refs`):
    `maybe_ct_refs` has the primals' structure with, at each leaf, a `Ref` of the leaf's
    shape and dtype (its cotangent is added into it; the result holds `GradRef()` there),
    `DontWant()` (its cotangent is not computed: the equations feeding only it are not
    transposed; the result holds `DidntWant()`), or `GradValue()` (the result holds the
    cotangent, as `vjp_fn` returns it).

    Returns:
      A `tree_util.Partial` taking the output cotangents, as the VJP itself does.

    Raises:
      TypeError: if `maybe_ct_refs` differs from the primals in structure, or a leaf is
        none of the three.
      ValueError: (when called) if a `Ref`'s shape or dtype differs from its primal's
        cotangent's, in `ref.addupdate`'s words.
    """
    leaves, tree = flatten(maybe_ct_refs)
    if tree != self._pullback.in_tree:
      raise TypeError(f"VJP.with_refs: the destinations must have the structure of the "
                      f"primals, {treedef_str(self._pullback.in_tree)}; got "
                      f"{treedef_str(tree)}.")
    for path, leaf in tree_util.tree_flatten_with_path(maybe_ct_refs)[0]:
      if not isinstance(leaf, (Ref, DontWant, GradValue)):
        raise TypeError(f"VJP.with_refs: each leaf must be a Ref, jax.ad.DontWant() or "
                        f"jax.ad.GradValue(); got {type(leaf).__name__} at "
                        f"maybe_ct_refs{tree_util.keystr(path)}.")
    return tree_util.Partial(_vjp_with_refs, self, tuple(leaves))

  def __repr__(self):
    return f"VJP(fun={self._pullback.name}, residuals={len(self.residuals)})"


# The destinations and results of `VJP.with_refs` (JAX's `jax.ad` namespace).
@dataclasses.dataclass(frozen=True, slots=True)
class GradValue:
  """A `VJP.with_refs` destination: return this leaf's cotangent as a value."""


@dataclasses.dataclass(frozen=True, slots=True)
class DontWant:
  """A `VJP.with_refs` destination: this leaf's cotangent is not needed (not computed)."""


@dataclasses.dataclass(frozen=True, slots=True)
class GradRef:
  """A `VJP.with_refs` result: this leaf's cotangent was added into its `Ref`. A pytree
  without leaves."""


@dataclasses.dataclass(frozen=True, slots=True)
class DidntWant:
  """A `VJP.with_refs` result: this leaf's cotangent was not computed (`DontWant`). A
  pytree without leaves."""


tree_util.register_dataclass(GradRef, [], [])
tree_util.register_dataclass(DidntWant, [], [])


def _vjp_with_refs(vjp_fn: VJP, dests: tuple, cotangents):
  wanted = [not isinstance(d, DontWant) for d in dests]
  cts = vjp_fn._pullback(vjp_fn.residuals, cotangents, wanted)
  ct_leaves = vjp_fn._pullback.in_tree.flatten_up_to(cts)
  out = []
  for dest, ct in zip(dests, ct_leaves):
    if isinstance(dest, DontWant):
      out.append(DidntWant())
    elif isinstance(dest, Ref):
      cur, ct = dest[...], jnp.asarray(ct)
      if ct.shape != cur.shape:   # as ref.addupdate (JAX's words)
        raise ValueError(f"Invalid shape for `addupdate`. Ref shape: {dest.shape}. Expected "
                         f"shape: {cur.shape}. Value shape: {ct.shape}. Transforms: (). ")
      if ct.dtype != cur.dtype:
        raise ValueError(f"Invalid dtype for `addupdate`. Ref dtype: {dest.dtype}. Value "
                         f"shape: {ct.dtype}. ")
      dest._set(Ellipsis, cur + ct, keep_weak=True)   # (JAX's addupdate)
      out.append(GradRef())
    else:
      out.append(ct)
  return vjp_fn._pullback.in_tree.unflatten(out)


class NotNeeded:
  """A primal leaf a `VJP` does not keep (no residual is it): a pytree node without
  children, as JAX 0.10's."""
  __slots__ = ()

  def __repr__(self):
    return "NotNeeded()"


optree.register_pytree_node(NotNeeded, lambda n: ((), None), lambda _, __: NotNeeded(),
                            namespace=_NS)
# NB: the leaves are the primal leaves kept as residuals (in the primals' order), then the
# other residuals, as JAX 0.10's `VJP`.
optree.register_pytree_node(
    VJP, lambda f: ((f.args_res, f.opaque_residuals), (f._pullback, f._spec)),
    lambda meta, children: VJP(*meta, list(children[0]), list(children[1])), namespace=_NS)


def _check_input_dtype_revderiv(name: str, holomorphic: bool, allow_int: bool, x) -> None:
  """JAX's checks (types and words) of an input of grad, value_and_grad and jacrev."""
  try:
    aval = typeof(x)
  except TypeError:
    aval = None
  if aval is not None and isinstance(getattr(aval, "dtype", None), np.dtype) and \
      aval.dtype.kind in "OSUT":
    aval = None   # NB: object and string arrays are no JAX type (JAX's `dtypes.dtype`)
  if aval is None:
    raise TypeError(f"Argument '{x}' of type {type(x)} is not a valid JAX type.")
  if type(x) is core.Token or aval is core.abstract_token:
    # NB: JAX does not check tokens here; their zero cotangent raises (`zeros_like_aval`)
    raise KeyError(core.AbstractToken)
  if core.is_hi(aval):   # a hijax type: its tangent type is its own (`to_tangent_aval`)
    return
  dt = aval.dtype
  if holomorphic and not dtypes.is_complex(dt):
    raise TypeError(f"{name} with holomorphic=True requires inputs with complex dtype, "
                    f"but got {dt.name}.")
  if (dtypes.issubdtype(dt, dtypes.extended) or dtypes.issubdtype(dt, np.integer)
      or dtypes.issubdtype(dt, np.bool_)):
    if not allow_int:
      raise TypeError(f"{name} requires real- or complex-valued inputs (input dtype that "
                      f"is a sub-dtype of np.inexact), but got {dt.name}. If you want to "
                      f"use Boolean- or integer-valued inputs, use vjp or set allow_int "
                      f"to True.")
  elif not dtypes.is_inexact(dt):
    raise TypeError(f"{name} requires numerical-valued inputs (input dtype that is a "
                    f"sub-dtype of np.bool_ or np.number), but got {dt.name}.")


def _check_output_dtype_revderiv(name: str, holomorphic: bool, aval: ShapedArray) -> None:
  """JAX's checks (types and words) of an output of grad, value_and_grad and jacrev."""
  dt = aval.dtype
  if dtypes.issubdtype(dt, dtypes.extended):
    raise TypeError(f"{name} with output element type {dt.name}")
  if holomorphic:
    if not dtypes.is_complex(dt):
      raise TypeError(f"{name} with holomorphic=True requires outputs with complex dtype, "
                      f"but got {dt.name}.")
  elif dtypes.is_complex(dt):
    raise TypeError(f"{name} requires real-valued outputs (output dtype that is a sub-dtype "
                    f"of np.floating), but got {dt.name}. For holomorphic differentiation, "
                    f"pass holomorphic=True. For differentiation of non-holomorphic "
                    f"functions involving complex outputs, use jax.vjp directly.")
  elif not dtypes.issubdtype(dt, np.floating):
    raise TypeError(f"{name} requires real-valued outputs (output dtype that is a sub-dtype "
                    f"of np.floating), but got {dt.name}. For differentiation of functions "
                    f"with integer outputs, use jax.vjp directly.")


def _argnums_partial(fun: Callable, argnums: Sequence[int], args: tuple, kwargs: dict):
  """`fun` as a function of the positional arguments at `argnums` only (the others and
  `kwargs` fixed), and the values of those arguments. Indices must be in range."""
  nums = tuple(i % len(args) for i in argnums)

  def partial_fun(*dyn_args):
    full = list(args)
    for i, a in zip(nums, dyn_args):
      full[i] = a
    return fun(*full, **kwargs)
  return partial_fun, tuple(args[i] for i in nums)


# The docstrings of the functions grad, value_and_grad, jacfwd and jacrev return (JAX's).
_GRAD_DOC = ("Gradient of {fun} with respect to positional argument(s) {argnums}. Takes the "
             "same arguments as {fun} but returns the gradient, which has the same shape as "
             "the arguments at positions {argnums}.")
_VALUE_AND_GRAD_DOC = (
    "Value and gradient of {fun} with respect to positional argument(s) {argnums}. Takes the "
    "same arguments as {fun} but returns a two-element tuple where the first element is the "
    "value of {fun} and the second element is the gradient, which has the same shape as the "
    "arguments at positions {argnums}.")
_JACOBIAN_DOC = ("Jacobian of {fun} with respect to positional argument(s) {argnums}. Takes "
                 "the same arguments as {fun} but returns the jacobian of the output with "
                 "respect to the arguments at positions {argnums}.")


def value_and_grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
                   holomorphic: bool = False, allow_int: bool = False,
                   reduce_axes: Sequence = ()):
  """A function returning `fun`'s value and its gradient with respect to `argnums`.

  Args:
    fun: returns a scalar (real, or complex with `holomorphic`), or `(scalar, aux)` with
      has_aux.
    argnums: an int or a tuple of ints: the positional arguments to differentiate.
    holomorphic: differentiate a complex function of complex inputs.
    allow_int: allow integer inputs (their gradient is float0 zeros).

  Returns:
    `f(*args) -> (value, grad)` (`((value, aux), grad)` with has_aux); grad has the
    argument's structure, or is a tuple of them for a tuple of argnums. Its name is
    `fun`'s, its docstring JAX's ("Value and gradient of f with respect to positional
    argument(s) 0. ..."; grad's, jacfwd's and jacrev's likewise).

  Raises:
    TypeError: for non-scalar, integer or key outputs, complex outputs without holomorphic
      (real outputs with it), integer or key inputs without allow_int, or an argnum not
      below the number of positional arguments (JAX's messages).
    ValueError: for an argnum below -len(args).
  """
  if reduce_axes:
    raise NotImplementedError("reduce_axes argument to grad is deprecated")
  int_argnum = isinstance(argnums, int)
  argnums_t = (argnums,) if int_argnum else tuple(argnums)

  @wraps(fun, docstr=_VALUE_AND_GRAD_DOC, argnums=argnums if int_argnum else argnums_t)
  @api_boundary
  def value_and_grad_f(*args, **kwargs):
    if max(argnums_t) >= len(args):
      raise TypeError(f"differentiating with respect to argnums={argnums} requires at "
                      f"least {max(argnums_t) + 1} positional arguments to be passed by "
                      f"the caller, but got only {len(args)} positional arguments.")
    partial_fun, dyn = _argnums_partial(fun, ensure_inbounds(len(args), argnums_t), args,
                                        kwargs)
    for x in tree_util.tree_leaves(dyn):
      _check_input_dtype_revderiv("grad", holomorphic, allow_int, x)
    res = vjp(partial_fun, *dyn, has_aux=has_aux)
    ans, vjp_fn = res[0], res[1]
    try:
      aval = typeof(ans)
    except TypeError:
      raise TypeError(f"Gradient only defined for scalar-output functions. Output was "
                      f"{ans}.") from None
    if not isinstance(aval, ShapedArray):
      raise TypeError(f"Gradient only defined for scalar-output functions. Output had "
                      f"abstract value {aval}.")
    if aval.shape != ():
      raise TypeError(f"Gradient only defined for scalar-output functions. Output had "
                      f"shape: {aval.shape}.")
    _check_output_dtype_revderiv("grad", holomorphic, aval)
    # The seed: a literal 1 (not a staged constant), weakly typed where the output is (a
    # weak Array when evaluating eagerly).
    one = np.ones((), aval.dtype)[()]
    seed = one
    if aval.weak_type:
      seed = (lax.convert_element_type(one, aval.dtype, weak_type=True)
              if type(core.current_trace()) is core.EvalTrace else core.WeakScalarValue(one))
    if aval.vma and core.check_vma_state[0]:   # JAX's seed has the output's varying type
      seed = core.pvary_hook[0](seed, core.order_axes(aval.vma))
    mesh = _seed_mesh(dyn)
    if mesh is not None:   # as JAX's: the seed is resharded to the output's (unsplit) type
      seed = reshard_p.bind(seed, dst_sharding=sharding_lib.NamedSharding(
          mesh, sharding_lib.PartitionSpec()))
    g = vjp_fn(seed)
    # The seed itself comes back where `fun` is the identity of an argument: an Array (a
    # literal in a jaxpr, `in (1.0:f32[],)`, as JAX's constant folding gives).
    g = [tree_util.tree_map(
        lambda c: lax.convert_element_type(one, aval.dtype, weak_type=aval.weak_type)
        if c is seed and not isinstance(c, (Array, core.Tracer)) else c, gi) for gi in g]
    g = g[0] if int_argnum else tuple(g)
    return ((ans, res[2]), g) if has_aux else (ans, g)

  return value_and_grad_f


def _seed_mesh(dyn: Any):
  """The AbstractMesh with Explicit axes that a traced grad's output is typed over (JAX's
  seed `1.0` is resharded to it): the one in context, else that of a differentiated input's
  type; None outside a trace or without Explicit axes."""
  if type(core.current_trace()) is core.EvalTrace:
    return None
  mesh = sharding_lib.get_abstract_mesh()
  if mesh.empty:
    mesh = next((a._sharding.mesh for a in map(core.get_aval, tree_util.tree_leaves(dyn))
                 if getattr(a, "_sharding", None) is not None), None)
  if mesh is None or sharding_lib.AxisType.Explicit not in mesh.axis_types:
    return None
  return mesh


def grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
         holomorphic: bool = False, allow_int: bool = False, reduce_axes: Sequence = ()):
  """The gradient of a scalar function with respect to `argnums`; arguments, results and
  errors as `value_and_grad` (this returns only the gradient, with aux if has_aux)."""
  vg = value_and_grad(fun, argnums, has_aux, holomorphic, allow_int, reduce_axes)

  @wraps(fun, docstr=_GRAD_DOC, argnums=argnums)   # NB: JAX's: argnums as given
  @api_boundary
  def grad_f(*args, **kwargs):
    out = vg(*args, **kwargs)
    return (out[1], out[0][1]) if has_aux else out[1]
  return grad_f


# ---------------------------------------------------------------------------
# Jacobians, built as JAX builds them: the standard basis is made in the trace (`jnp.eye`:
# iota, eq, convert), cut into one block per leaf; jacfwd vmaps the JVP over it (the primal
# computation stays unbatched), jacrev vmaps the VJP's pullback; the batched results are cut
# back into one block per leaf on the other side.


def _jac_prepare(fun, argnums, args, kwargs, name: str, holomorphic: bool,
                 allow_int: bool = False):
  int_argnum = isinstance(argnums, int)
  argnums_t = (argnums,) if int_argnum else tuple(argnums)
  partial_fun, dyn = _argnums_partial(fun, ensure_inbounds(len(args), argnums_t), args,
                                      kwargs)
  # NB: JAX checks the leaves with a tree_map, whose result is unflattened: a pytree class's
  # unflatten sees None leaves (JAX's custom-pytree tutorial shows the error that gives).
  tree_util.tree_map(functools.partial(_check_input_dtype_jac, name, holomorphic, allow_int),
                     dyn)
  return partial_fun, dyn, int_argnum


def _check_input_dtype_jac(name: str, holomorphic: bool, allow_int: bool, x) -> None:
  """JAX's checks (types and words) of an input leaf of jacfwd or jacrev."""
  if name == "jacrev":
    _check_input_dtype_revderiv(name, holomorphic, allow_int, x)
  else:
    dt = typeof(x).dtype   # jacfwd (JAX's checks and words)
    if dtypes.issubdtype(dt, dtypes.extended):
      raise TypeError(f"jacfwd with input element type {dt.name}")
    if holomorphic:
      if not dtypes.is_complex(dt):
        raise TypeError(f"jacfwd with holomorphic=True requires inputs with complex "
                        f"dtype, but got {dt.name}.")
    elif not dtypes.issubdtype(dt, np.floating):
      raise TypeError(
          f"jacfwd requires real-valued inputs (input dtype that is a sub-dtype of "
          f"np.floating), but got {dt.name}. For holomorphic differentiation, pass "
          f"holomorphic=True. For differentiation of non-holomorphic functions involving "
          f"complex inputs or integer inputs, use jax.jvp directly.")


def _check_output_dtype_jacfwd(holomorphic: bool, x) -> None:
  """JAX's check (type and words) of an output leaf of jacfwd."""
  dt = core.get_aval(x).dtype
  if holomorphic and not dtypes.is_complex(dt):
    raise TypeError(f"jacfwd with holomorphic=True requires outputs with complex dtype, "
                    f"but got {dt.name}.")


def _split(x, sizes: Sequence[int], axis: int) -> list:
  """`x` cut along `axis` into pieces of `sizes`: one `split` equation (also for a single
  piece) with the sizes as NumPy ints, as JAX's `jnp.split` at the cumulative sizes leaves
  them; a NumPy array is cut by NumPy (no equation)."""
  if isinstance(x, np.ndarray):
    return np.split(x, np.cumsum(sizes[:-1]).astype(int), axis)
  return lax.split(x, tuple(np.int64(n) for n in sizes), axis)


def _downcast(x, aval: ShapedArray, always: bool = False):
  """`x` converted to the dtype and weak type of `aval` (the real part for a real `aval`):
  JAX's `_possible_downcast`. `always` binds the conversion even when it changes nothing,
  as JAX's basis does (its conversion carries a sharding that keeps it in the jaxpr)."""
  if dtypes.is_complex(x.dtype) and not dtypes.is_complex(aval.dtype):
    x = lax.real(x)
  if always:
    return lax.convert_element_type_p.bind(x, new_dtype=aval.dtype,
                                           weak_type=bool(aval.weak_type))
  return lax.convert_element_type(x, aval.dtype, weak_type=aval.weak_type)


def _std_basis(leaves: Sequence[Any]):
  """JAX's `_std_basis`: the identity of size N (the leaves' total element count) in the
  leaves' common dtype, made in the trace, cut along its second axis into one block per
  leaf of shape `(N, *leaf.shape)` in the leaf's dtype and weak type; with the leaves'
  element counts."""
  avals = [core.get_aval(x) for x in leaves]
  sizes = [int(np.prod(a.shape, dtype=np.int64)) for a in avals]
  n = sum(sizes)
  eye = jnp.eye(n, dtype=dtypes.result_type(*leaves))
  return ([_downcast(jnp.reshape(b, (n, *a.shape)), a, always=True)
           for b, a in zip(_split(eye, sizes, 1), avals)], sizes)


def _unravel(x, axis: int, sizes: Sequence[int], shapes, avals):
  """Cuts `x` along `axis` into `sizes` pieces reshaped to `shapes` and converted to
  `avals`' dtypes (one Jacobian block per leaf on the basis side; JAX's
  `_unravel_array_into_pytree`)."""
  if isinstance(x, np.ndarray) and x.dtype == dtypes.float0:
    return [np.zeros(shape, x.dtype) for shape in shapes]
  return [_downcast(jnp.reshape(b, shape), a)
          for b, shape, a in zip(_split(x, sizes, axis), shapes, avals)]


def _jac_tree(out_tree, in_tree, int_argnum, rows):
  """Output structure outside, input structure (the argument, or a tuple of them) inside."""
  inner = [tree_util.tree_unflatten(in_tree, per_in) for per_in in rows]
  if int_argnum:
    inner = [x[0] for x in inner]
  return tree_util.tree_unflatten(out_tree, inner)


def jacfwd(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
           holomorphic: bool = False) -> Callable:
  """The Jacobian of `fun` by forward mode (one JVP per input element), as JAX's `jacfwd`:
  the JVP vmapped over the standard basis of the inputs.

  Returns:
    A function with `fun`'s arguments returning the Jacobian: the output's pytree structure
    outside, the differentiated argument's (a tuple of them for tuple argnums) inside; each
    leaf has shape `out.shape + in.shape` and the output's dtype (`(jac, aux)` with
    has_aux).

  Raises:
    TypeError: for integer inputs, or complex inputs (or outputs) without holomorphic=True.
    ValueError: for argnums out of range.
  """
  # NB: JAX's docstring shows argnums as an int or a tuple
  @wraps(fun, docstr=_JACOBIAN_DOC,
         argnums=argnums if isinstance(argnums, int) else tuple(argnums))
  @api_boundary
  def jacfun(*args, **kwargs):
    partial_fun, dyn, int_argnum = _jac_prepare(fun, argnums, args, kwargs, "jacfwd",
                                                holomorphic)
    in_leaves, in_tree = flatten(dyn)
    in_avals = [core.get_aval(x) for x in in_leaves]
    basis, sizes = _std_basis(in_leaves)
    if sum(sizes):
      pushfwd = lambda *tangents: jvp(partial_fun, dyn, tangents, has_aux=has_aux)
      res = vmap(pushfwd, out_axes=(None, -1, None) if has_aux else (None, -1))(
          *tree_util.tree_unflatten(in_tree, basis))
      y, cols = res[0], flatten(res[1])[0]
    else:   # NB: vmap needs a non-empty axis; all Jacobian blocks are empty
      res = partial_fun(*dyn)
      y = res[0] if has_aux else res
      cols = [np.zeros((*core.get_aval(o).shape, 0), core.get_aval(o).dtype)
              for o in flatten(y)[0]]
    tree_util.tree_map(functools.partial(_check_output_dtype_jacfwd, holomorphic), y)
    out_leaves, out_tree = flatten(y)
    out_avals = [core.get_aval(o) for o in out_leaves]
    rows = [_unravel(c, len(oa.shape), sizes, [(*oa.shape, *ia.shape) for ia in in_avals],
                     [oa] * len(in_avals))
            for c, oa in zip(cols, out_avals)]
    jac = _jac_tree(out_tree, in_tree, int_argnum, rows)
    return (jac, res[2] if sum(sizes) else res[1]) if has_aux else jac
  return jacfun


def _map_basis(linear_fn, basis_tree, n: int, axis: int, result_avals, batched_shape):
  """`linear_fn` vmapped over the basis (the batch at `axis` of each flat result); zeros of
  `batched_shape(aval)` when the basis is empty (vmap needs a non-empty axis) and float0
  results (integer inputs of jacrev with allow_int) as float0 arrays."""
  if n:
    flat = flatten(vmap(linear_fn, out_axes=axis)(*basis_tree))[0]
  else:
    flat = [None] * len(result_avals)
  return [np.zeros(batched_shape(a), a.dtype) if x is None or a.dtype == dtypes.float0
          else x for x, a in zip(flat, result_avals)]


def jacrev(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
           holomorphic: bool = False, allow_int: bool = False) -> Callable:
  """The Jacobian of `fun` by reverse mode (one VJP per output element), as JAX's `jacrev`:
  the pullback vmapped over the standard basis of the outputs.

  Returns:
    As `jacfwd`: output structure outside, input structure inside, leaves of shape
    `out.shape + in.shape` in the input's dtype (`(jac, aux)` with has_aux).

  Raises:
    TypeError: for integer or key inputs (unless allow_int), integer or key outputs,
      complex outputs without holomorphic=True or real ones with it (JAX's messages;
      complex inputs are accepted, as JAX's).
    ValueError: for argnums out of range.
  """
  @wraps(fun, docstr=_JACOBIAN_DOC, argnums=argnums)   # NB: JAX's: argnums as given
  @api_boundary
  def jacfun(*args, **kwargs):
    partial_fun, dyn, int_argnum = _jac_prepare(fun, argnums, args, kwargs, "jacrev",
                                                holomorphic, allow_int)
    res = vjp(partial_fun, *dyn, has_aux=has_aux)
    y, vjp_fn = res[0], res[1]
    in_leaves, in_tree = flatten(dyn)
    in_avals = [core.get_aval(x) for x in in_leaves]
    tree_util.tree_map(lambda o: _check_output_dtype_revderiv("jacrev", holomorphic,
                                                              core.get_aval(o)), y)
    out_leaves, out_tree = flatten(y)
    out_avals = [core.get_aval(o) for o in out_leaves]
    basis, sizes = _std_basis(out_leaves)
    cts = _map_basis(vjp_fn, (tree_util.tree_unflatten(out_tree, basis),), sum(sizes), 0,
                     in_avals, lambda a: (0, *a.shape))
    per_in = [_unravel(c, 0, sizes, [(*oa.shape, *ia.shape) for oa in out_avals],
                       [ia] * len(out_avals))
              for c, ia in zip(cts, in_avals)]
    jac = _jac_tree(out_tree, in_tree, int_argnum, [list(r) for r in zip(*per_in)] if per_in
                    else [[] for _ in out_avals])
    return (jac, res[2]) if has_aux else jac
  return jacfun


def jacobian(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
             holomorphic: bool = False, allow_int: bool = False) -> Callable:
  """The Jacobian by reverse mode: `jacrev` under JAX's other name (same arguments,
  results and errors)."""
  return jacrev(fun, argnums, has_aux, holomorphic, allow_int)


def linear_transpose(fun: Callable, *primals, reduce_axes: Sequence = ()) -> Callable:
  """The transpose of the linear function `fun`, as JAX's `linear_transpose`.

  Args:
    fun: a function linear in its arguments (pytrees of arrays).
    *primals: example arguments (arrays or ShapeDtypeStructs) giving their shapes and
      dtypes; only these are read, not their values.

  Returns:
    `transpose(cotangent)`: takes a pytree of `fun`'s output structure, shapes and dtypes
    and returns a tuple with one cotangent per argument (zeros where nothing flows). It is
    a `tree_util.Partial` holding the constants, so it can cross a `jit` boundary.

  Raises:
    TypeError: (from the returned function) if the cotangent's structure or types differ
      from `fun`'s output, or if `fun` maps between floating and integer types; a
      ValueError from a transpose rule when `fun` is not linear.
    NotImplementedError: for a non-empty `reduce_axes` (removed from JAX).
  """
  if reduce_axes:
    raise NotImplementedError("reduce_axes argument to transpose is deprecated")
  in_leaves, in_tree = flatten(tuple(primals))
  in_avals = [abstractify(x, f"primals[{i}]", "linear_transpose")
              for i, x in enumerate(in_leaves)]

  # As JAX's (`trace_to_jaxpr_nounits`), `fun` is partially evaluated with every input
  # unknown: what depends only on constants is computed now, in the enclosing trace (a
  # `jit` inside is split, its known half bound here), the rest is staged for transposition.
  trace = ad.PartialEvalTrace(core.current_trace(), returns_consts=True)
  try:
    xs = [trace.new_arg(a) for a in in_avals]
    # NB: an identity broadcast_in_dim of a value depending on the inputs is staged (as
    # JAX's partial evaluation does); its transpose is a `reduce_sum[axes=()]`.
    with core.set_current_trace(trace), lax_shape.recording_identity_broadcasts(trace):
      out_leaves, out_tree = flatten(fun(*tree_util.tree_unflatten(in_tree, xs)))
      jaxpr, consts = trace.to_jaxpr(out_leaves)
  finally:
    trace.invalidate()
  consts = list(consts)
  out_avals = jaxpr.out_avals
  in_float = [dtypes.is_inexact(a.dtype) for a in in_avals]
  out_float = [dtypes.is_inexact(a.dtype) for a in out_avals]
  if not (all(in_float + out_float) or not any(in_float + out_float)):
    raise TypeError(f"linear_transpose only supports [float or complex] -> [float or "
                    f"complex], and integer -> integer functions, but got "
                    f"{[a.dtype.name for a in in_avals]} -> "
                    f"{[a.dtype.name for a in out_avals]}.")
  lin = pe.convert_constvars_jaxpr(jaxpr)

  def transposed(consts, cotangent):
    ct_leaves, ct_tree = flatten(cotangent)
    if ct_tree != out_tree:   # NB: JAX's words
      raise TypeError(f"cotangent tree does not match function output, expected "
                      f"{treedef_str(out_tree)} but got {treedef_str(ct_tree)}")
    got = [core.get_aval(c) for c in ct_leaves]
    if any(g.shape != a.shape or g.dtype != a.dtype for g, a in zip(got, out_avals)):
      raise TypeError(f"cotangent type does not match function output, expected "
                      f"{tuple(out_avals)} but got {list(ct_leaves)}")
    # NB: each cotangent takes its output's type (a Python float for a float32 output is a
    # strong float32, as the results of JAX's transpose are)
    ct_leaves = [lax.convert_element_type(c, a.dtype, weak_type=a.weak_type)
                 for c, a in zip(ct_leaves, out_avals)]
    args = [*consts, *[ad.UndefinedPrimal(a) for a in in_avals]]
    cts = [ad.instantiate_zeros(c) for c in ad.backward_pass(lin, args, ct_leaves)[len(consts):]]
    # A cotangent passed straight through comes back as an Array (host values converted).
    cts = [c if isinstance(c, (Array, core.Tracer)) else
           lax.convert_element_type(c, a.dtype, weak_type=core.get_aval(c).weak_type)
           for c, a in zip(cts, in_avals)]
    return tree_util.tree_unflatten(in_tree, cts)
  # NB: a `Partial` (a pytree whose leaves are the constants), as JAX's: it can be passed
  # to and returned from jitted functions.
  return tree_util.Partial(transposed, consts)


def hessian(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
            holomorphic: bool = False) -> Callable:
  """The Hessian of a scalar function: `jacfwd(jacrev(fun))`, as JAX's `hessian`.

  Returns:
    A function with `fun`'s arguments returning the Hessian: leaves of shape
    `out.shape + in.shape + in.shape` (nested per argument for tuple argnums), in the
    inputs' floating dtype (`(hessian, aux)` with has_aux).

  Raises:
    TypeError: for integer inputs, or complex inputs/outputs without holomorphic=True.
    ValueError: for argnums out of range.
  """
  return jacfwd(jacrev(fun, argnums, has_aux, holomorphic), argnums, has_aux, holomorphic)


# ---------------------------------------------------------------------------
# vmap (interpreters/batching.py)


def _check_no_vmappables(tree: Any) -> None:
  """Raises NotImplementedError when `tree` holds an instance of a type passed to
  `batching.register_vmappable`: stagecraft's vmap does not run JAX's to_elt/from_elt
  handlers (it maps arrays and pytrees of arrays only)."""
  if not batching.vmappables:
    return
  registered = lambda x: type(x) in batching.vmappables   # noqa: E731
  for leaf in tree_util.tree_leaves(tree, is_leaf=registered):
    if registered(leaf):
      name = type(leaf).__name__
      raise NotImplementedError(
          f"vmap over a {name}: {name} was registered with register_vmappable, whose "
          f"to_elt/from_elt handlers stagecraft's vmap does not run (it maps arrays and "
          f"pytrees of arrays only). Register {name} as a pytree with "
          f"tree_util.register_pytree_node so that vmap maps its leaves.")


def vmap(fun: Callable, in_axes: Any = 0, out_axes: Any = 0, axis_name: Any = None,
         axis_size: int | None = None, spmd_axis_name: Any = None,
         sum_match: bool = False) -> Callable:
  """Vectorizes `fun` over a new leading (or `in_axes`) axis of its arguments, as JAX's
  `vmap`: the function is run once on batched tracers and every primitive's batching rule
  handles the batch axis (no Python loop).

  Args:
    fun: a function of arrays (pytrees) returning arrays (pytrees).
    in_axes: an int, None, or a pytree prefix of the positional-argument tuple with int/None
      leaves: the axis of each argument to map over (negative counts from the end; None:
      broadcast the argument). Keyword arguments are always mapped over axis 0.
    out_axes: an int, None, or a pytree prefix of the output: where the mapped axis goes in
      each output (None: the output must not depend on mapped inputs).
    axis_name: a name for the mapped axis, for collectives (`lax.psum(x, axis_name)`).
    axis_size: the mapped size; required when no argument is mapped.
    spmd_axis_name: accepted for compatibility (there is no SPMD partitioning of vmap here).
    sum_match: an output whose out_axes is None but that is batched is summed over the
      batch axis instead of raising (JAX's `sum_match`).

  Refs among the arguments are passed as refs holding the (batched) value: writes into
  one mapped over an axis land in its slices, and its final value is written back; a write
  into an unbatched (`None`) or closed-over ref raises JAX's `Exception` ("performing a
  set/swap operation with vmapped value on an unbatched array reference ..."); a ref
  returned comes back as itself; one passed twice raises JAX's ValueError.

  Returns:
    The vectorized function; each mapped output has the batch axis at its out_axes.

  The vectorized function is named as `fun`; its docstring is JAX's ("Vectorized version
  of f. ...", with `fun`'s own after "Original documentation:").

  Raises:
    TypeError: (from `vmap` itself) for `in_axes` that is not an int, None, a tuple or a
      list (a bool, a dict), or `in_axes`/`out_axes` with a leaf that is not an int (a bool,
      a NumPy int, an array); JAX's messages.
    ValueError: (from the vectorized function, JAX's messages) for inconsistent mapped
      sizes (grouped by size, naming an example argument by `fun`'s signature), axes out
      of range, no argument leaves at all or none mapped without axis_size, in_axes/
      out_axes that are not tree prefixes, or a mapped output whose out_axes is None.
  """
  in_axes = check_vmap_axes(in_axes, out_axes)
  name = fun_name(fun)
  docstr = ("Vectorized version of {fun}. Takes similar arguments as {fun} but with "
            "additional array axes over which {fun} is mapped.")
  if fun.__doc__:   # NB: JAX's
    docstr += "\n\nOriginal documentation:\n\n" + fun.__doc__

  @wraps(fun, docstr=docstr)
  @api_boundary
  def vmap_f(*args, **kwargs):
    if isinstance(in_axes, tuple) and len(in_axes) != len(args):
      raise ValueError(f"vmap in_axes must be an int, None, or a tuple of entries "
                       f"corresponding to the positional arguments passed to the function, "
                       f"but got len(in_axes)={len(in_axes)}, len(args)={len(args)}")
    _check_no_vmappables((args, kwargs))
    leaves, in_tree, axes, _ = flat_mapped_args("in_axes", in_axes, args, kwargs)
    # Refs passed in are discharged at the vmap boundary: the function sees a new ref
    # holding the (batched) value, whose final value is written back after (state.py).
    ref_pos = [i for i, x in enumerate(leaves) if isinstance(x, Ref)]
    refs = [leaves[i] for i in ref_pos]
    if ref_pos:
      if len({id(r) for r in refs}) < len(refs):   # JAX's error for a ref passed twice
        names = arg_names(fun_signature(fun), range(len(args)), list(kwargs),
                          tree_util.tree_flatten_with_path((args, kwargs))[0])[0]
        check_ref_args(fun, leaves, names, "vmap")
      leaves = list(leaves)
      for i in ref_pos:
        leaves[i] = leaves[i][...]
    dims, size = mapped_axes("vmap", fun, leaves, in_tree, axes, axis_size)
    batching.check_mapped_specs(leaves, dims)
    axis_data = batching.AxisData(axis_name, size, spmd_axis_name)
    store: list = []

    check_keys = key_reuse.enabled()

    def flat(*xs):
      xs = list(xs)
      proxies = []
      for i in ref_pos:
        proxies.append(Ref(xs[i], core.current_trace()))
        if dims[i] is None:
          proxies[-1]._nowrite = (Exception, f"performing a set/swap operation with vmapped value on an "
                                  f"unbatched array reference of type "
                                  f"{proxies[-1].aval}. Move the array reference to be an "
                                  f"argument to the vmapped function?")
        xs[i] = proxies[-1]
      a, kw = tree_util.tree_unflatten(in_tree, xs)
      if check_keys:   # the body's keys are the arguments' (JAX's batched keys)
        key_reuse.share(tree_util.tree_leaves((args, kwargs)), tree_util.tree_leaves((a, kw)))
      out = fun(*a, **kw)
      out_leaves, out_tree = flatten(out)
      # NB: as JAX's, a ref argument returned comes back as the ref passed in
      returned = {j: next(k for k, p in enumerate(proxies) if p is x)
                  for j, x in enumerate(out_leaves) if any(p is x for p in proxies)}
      out_leaves = [0 if j in returned else x for j, x in enumerate(out_leaves)]
      check_out_leaves(out_leaves, out_tree, name, "vmap")
      written = [k for k, (p, i) in enumerate(zip(proxies, ref_pos)) if p._value is not xs[i]]
      store[:] = [out, out_tree, written, returned]
      return [*out_leaves, *[proxies[k]._value for k in written]]

    outs, out_dims = batching.batch_flat(flat, leaves, dims, axis_data)
    out, out_tree, written, returned = store
    if ref_pos:
      n = len(outs) - len(written)
      # NB: a ref whose in_axes is None cannot be written (`_nowrite`): those written are
      # batched, and their final values go back with the batch axis where it came from.
      for k, o, d in zip(written, outs[n:], out_dims[n:]):
        refs[k][...] = batching.matchaxis(o, d, dims[ref_pos[k]], size)
      outs, out_dims = outs[:n], out_dims[:n]
    o_axes = flatten_axes("out_axes", out_axes, out, out_tree)
    results = []
    for j, (o, d, ax) in enumerate(zip(outs, out_dims, o_axes)):
      if j in returned:
        results.append(refs[returned[j]])
        continue
      if ax is None and d is not None and sum_match:   # JAX's: summed over the batch axis
        results.append(o.sum(d))
        continue
      if ax is None:
        if d is not None and axis_name is not None:
          raise ValueError(f"vmap has mapped output (axis_name={axis_name}) but out_axes is "
                           f"None")
        if d is not None:   # JAX's text names the out_axes entry by its key path
          paths = tree_util.tree_flatten_with_path(
              tree_util.tree_unflatten(out_tree, o_axes), is_leaf=lambda x: x is None)[0]
          raise ValueError(f"at vmap out_axes{tree_util.keystr(paths[j][0])}, got axis spec "
                           f"None but output was batched on axis {d}")
        results.append(o)
        continue
      nd = len(core.get_aval(o).shape) + (d is None)
      if not -nd <= ax < nd:
        raise ValueError(f"axis {ax} is out of bounds for array of dimension {nd}")   # JAX's
      results.append(batching.matchaxis(o, d, ax % nd, size))
    result = tree_util.tree_unflatten(out_tree, results)
    if check_keys:
      key_reuse.share_results(tree_util.tree_leaves((args, kwargs)), tree_util.tree_leaves(out),
                              tree_util.tree_leaves(result))
    return result

  return vmap_f



# ---------------------------------------------------------------------------
# pmap (lax/spmd.py holds its primitive, runtime/spmd.py its executables)

def pmap(fun: Callable, axis_name: Any = None, *, in_axes: Any = 0, out_axes: Any = 0,
         static_broadcasted_argnums: int | Sequence[int] = (), devices: Sequence[Any] | None =
         None, backend: str | None = None, axis_size: int | None = None,
         donate_argnums: int | Sequence[int] = ()) -> Callable:
  """Maps `fun` over an axis of its arguments with one device per position, as JAX's `pmap`:
  the body is traced once, compiled once per signature as one SPMD program over the
  devices, and its collectives (`lax.psum(x, axis_name)`, ...) communicate across them.

  Args:
    fun: a function of arrays (pytrees) returning arrays (pytrees).
    axis_name: a name for the mapped axis, for collectives.
    in_axes: an int, None, or a pytree prefix of the positional arguments: the axis of each
      argument to split across devices (None: every device gets the whole argument).
      Keyword arguments are split on axis 0.
    out_axes: an int, None, or a prefix of the output: where the device axis goes in each
      result (None: the result must be the same on every device, e.g. a psum, and one copy
      is returned).
    static_broadcasted_argnums: positions of hashable arguments passed to `fun` as Python
      values (a new value retraces).
    devices: the devices to run on (default: the first local devices); nested pmaps use
      the product of their sizes.
    backend: a platform name ('cpu'); its devices are used.
    axis_size: the mapped size; it must be that of the mapped arguments (as JAX's).
    donate_argnums: arguments whose buffers the program may reuse for its results.

  Returns:
    The mapped function. Mapped results are Arrays split over the devices (`.sharding`,
    `.addressable_shards`); passing them to the same pmap again moves no data through the
    host; indexing or NumPy conversion gathers them.

  The mapped function is named as `fun` and has its docstring (JAX's `wraps`).

  Raises:
    TypeError: (from `pmap` itself, JAX's message) in_axes or out_axes with a leaf that is
      not an int (a bool, a NumPy int, a float); from the mapped function: arguments that
      are not arrays.
    ValueError: (from the mapped function) no argument with a shape mapped ("pmap requires
      at least one argument with a mapped axis.", with or without axis_size), an axis_size
      other than the first mapped argument's size, in_axes that is no tree prefix of the
      positional arguments (a list is taken for a tuple, as JAX's vmap does), all JAX's
      messages; mapped sizes that disagree (vmap's message, with "pmap": JAX's pmap leaves
      them to its sharding checks), more positions than devices (naming both counts), axes
      out of range, an out_axes=None result that varies across devices; non-hashable static
      arguments, or static_broadcasted_argnums beyond the positional arguments passed
      (JAX's messages).
    NameError: a collective naming an axis that no enclosing pmap/vmap binds.

  Under `stagecraft.disable_jit()` the map runs eagerly, one primitive at a time over all
  positions, with collectives computed across positions (JAX's MapTrace, which evaluates each
  primitive with vmap over the mapped axis); results match the compiled path.
  """
  if not callable(fun):
    raise TypeError(f"pmap expects a callable, got {fun!r}.")
  static = ((static_broadcasted_argnums,) if isinstance(static_broadcasted_argnums, int)
            else tuple(static_broadcasted_argnums))
  donate = (donate_argnums,) if isinstance(donate_argnums, int) else tuple(donate_argnums)
  check_pmap_axes(in_axes, out_axes)
  if isinstance(in_axes, list):   # NB: as JAX's vmap (and pmap before 0.10's shard_map one)
    in_axes = tuple(in_axes)
  if backend is not None and devices is None:
    devices = client.devices(backend)
  devices = tuple(devices) if devices is not None else None
  name = fun_name(fun)
  cache: dict = {}
  fast: dict = {}   # (treedef, config, avals) -> (executable, consts, out_tree) at top level

  def prepare(args, kwargs):
    nargs = len(args)
    if any(i >= nargs for i in static):   # JAX's check and words
      raise ValueError(f"pmapped function has static_broadcasted_argnums={static} but was "
                       f"called with only {nargs} positional argument{'s' if nargs > 1 else ''}. "
                       f"All static broadcasted arguments must be passed positionally.")
    st = tuple(i % nargs if nargs else i for i in static)
    static_vals = tuple(args[i] for i in st)
    for i, a in zip(st, static_vals):
      try:
        hash(a)
      except TypeError:
        raise ValueError(f"Non-hashable static arguments are not supported, as this can lead "
                         f"to unexpected cache-misses. Static argument (index {i}) of type "
                         f"{type(a)} for function {name} is non-hashable.") from None
    dyn = tuple(a for i, a in enumerate(args) if i not in st)
    dyn_axes = in_axes
    if isinstance(in_axes, tuple):
      if len(in_axes) != nargs:
        # NB: JAX's message: the prefix error of (in_axes,) against (args,)
        err = tree_util.prefix_errors((in_axes,), (args,), is_leaf=lambda x: x is None)[0]
        raise ValueError(
            f"{err('pmap in_axes')}\n\nThe 'full pytree' here is the tuple of arguments "
            f"passed positionally to the pmapped function, and the value of `in_axes` must be "
            f"a tree prefix of that tuple. But it was not a prefix.\n\nCheck that the value "
            f"of the `in_axes` argument to `pmap` is a tree prefix of the tuple of arguments "
            f"passed positionally to the pmapped function.")
      dyn_axes = tuple(a for i, a in enumerate(in_axes) if i not in st)
    return st, static_vals, dyn, dyn_axes

  def call_fun(st, static_vals, dyn, kwargs):
    it, sv = iter(dyn), iter(static_vals)
    full = [next(sv) if i in st else next(it) for i in range(len(dyn) + len(st))]
    return fun(*full, **kwargs)

  @wraps(fun)
  @api_boundary
  def pmap_f(*args, **kwargs):
    # Fast path: a top-level call of a signature run before, every leaf an Array.
    if not kwargs and not static and core.trace_state.trace is core.eval_trace and \
        not config.disable_jit:
      leaves, treedef = flatten(args)
      try:
        key = (treedef, config.state_key, *[x.aval for x in leaves])
      except AttributeError:
        key = None
      hit = fast.get(key) if key is not None else None
      if hit is not None:
        ex, consts, out_tree = hit
        return tree_util.tree_unflatten(out_tree, ex.call([*consts, *leaves]))
    st, static_vals, dyn, dyn_axes = prepare(args, kwargs)
    try:
      leaves, in_tree, axes, paths = flat_mapped_args("in_axes", dyn_axes, dyn, kwargs)
    except ValueError:
      raise _in_axes_prefix_error(dyn_axes, dyn, kwargs) from None
    avals = []
    for x, path in zip(leaves, paths):
      try:
        avals.append(x.aval if type(x) is Array else core.get_aval(x))
      except TypeError:
        raise TypeError(f"pmap: the argument at {describe_arg(path)} of {name} is not "
                        f"an array (got {type(x).__name__}); pass arrays, or mark it with "
                        f"static_broadcasted_argnums.") from None
    nproc = client.process_count() if devices is None else 1
    norm_axes, size = _mapped_size(leaves, avals, in_tree, axes, nproc, bool(st))
    if config.disable_jit:
      return _map_eagerly(call_fun, st, static_vals, dyn, kwargs, dyn_axes, size)
    if size == 0:
      raise ValueError(f"pmap of {name} got a mapped axis of size 0: pmap runs one position "
                       f"per device, so it needs at least one. Skip the call for empty "
                       f"inputs, or map with vmap.")
    if nproc > 1 and axis_size is None:
      # A distributed run: each process passes its local part; the axis spans them all.
      size *= nproc
      avals = [a if ax is None else a.update(shape=a.shape[:ax] + (size,) + a.shape[ax + 1:])
               for a, ax in zip(avals, norm_axes)]
    if devices is not None and core.trace_state.trace is core.eval_trace and \
        len(devices) < size:
      raise ValueError(f"pmap: the mapped axis has size {size} but only {len(devices)} "
                       f"devices were given ({list(devices)}).")
    key = (in_tree, static_vals, tuple(norm_axes), size, config.state_key, *avals)
    entry = cache.get(key)
    if entry is None:
      entry = _trace(call_fun, st, static_vals, in_tree, avals, norm_axes, size)
      if entry[4]:   # NB: a body closing over tracers is traced again each call
        cache[key] = entry
    closed, consts, out_tree, varying, _ = entry
    o_axes = flatten_axes("out_axes", out_axes, tree_util.tree_unflatten(
        out_tree, [0] * out_tree.num_leaves), out_tree)
    for k, (ax, var) in enumerate(zip(o_axes, varying)):
      if ax is None and var:
        path = tree_util.keystr(tree_util.tree_flatten_with_path(tree_util.tree_unflatten(
            out_tree, list(range(out_tree.num_leaves))))[0][k][0])
        raise ValueError(f"pmap out_axes=None requires the output{(' at ' + path) if path else ''}"
                         f" to be the same on every device, but it depends on mapped inputs "
                         f"(axis_name={axis_name!r}). Reduce it over the axis first (e.g. "
                         f"lax.psum / lax.pmean), or give it an out_axes.")
    o_axes_n = []
    for ax, a in zip(o_axes, closed.out_avals):
      if ax is None:
        o_axes_n.append(None)
        continue
      nd = len(a.shape) + 1
      if not -nd <= ax < nd:
        raise ValueError(f"pmap out_axes specification {ax} is out of range for an output of "
                         f"rank {nd} (including the mapped axis).")
      o_axes_n.append(ax % nd)
    n_dyn = len(leaves)
    don = [False] * n_dyn
    if donate:
      dyn_pos = [i for i in range(len(args)) if i not in st]
      counts = [len(flatten(a)[0]) for a in dyn]
      start = 0
      for pos, c in zip(dyn_pos, counts):
        if pos in donate:
          don[start:start + c] = [True] * c
        start += c
    params = dict(jaxpr=closed, axis_name=axis_name, axis_size=size,
                  in_axes=(None,) * len(consts) + tuple(norm_axes), out_axes=tuple(o_axes_n),
                  devices=devices, name=name,
                  donated_invars=(False,) * len(consts) + tuple(don))
    if core.trace_state.trace is not core.eval_trace:
      return tree_util.tree_unflatten(out_tree, xla_pmap_p.bind(*consts, *leaves, **params))
    in_avals = tuple(core.get_aval(c) for c in consts) + tuple(avals)
    ex = pmap_executable(in_avals, params)
    outs = ex.call([*consts, *leaves])
    if not kwargs and not static and entry[4] and all(type(x) is Array for x in leaves):
      fast[(flatten(args)[1], config.state_key, *avals)] = (ex, consts, out_tree)
    return tree_util.tree_unflatten(out_tree, outs)

  def _in_axes_prefix_error(dyn_axes, dyn, kwargs) -> ValueError:
    """JAX's error for in_axes that is no prefix of the positional arguments."""
    err = tree_util.prefix_errors((dyn_axes, 0), (dyn, kwargs))[0]
    msg = (f"{err('pmap in_axes').args[0]}\n\nThe 'full pytree' here is the tuple of "
           f"arguments passed positionally to the pmapped function, and the value of "
           f"`in_axes` must be a tree prefix of that tuple. But it was not a prefix.")
    if kwargs:
      msg += ("\n\nWhen some arguments are passed by keyword to the pmapped function, they "
              "are not included in the comparison to `in_axes`. Instead, each argument "
              "passed by keyword is mapped over its leading axis. See the description of "
              "`in_axes` in the `pmap` docstring: "
              "https://docs.jax.dev/en/latest/_autosummary/jax.pmap.html#jax.pmap")
    return ValueError(msg + "\n\nCheck that the value of the `in_axes` argument to `pmap` is "
                      "a tree prefix of the tuple of arguments passed positionally to the "
                      "pmapped function.")

  def _mapped_size(leaves, avals, in_tree, axes, nproc: int, has_static: bool):
    """The leaves' normalized mapped axes and the mapped size, checked as JAX's pmap checks
    them: some leaf with a shape must be mapped (axis_size or not), and a given axis_size
    must be the first mapped leaf's size (in a single process); then as vmap's (ranks,
    sizes that disagree, in vmap's words)."""
    first = next(((x, ax) for x, ax in zip(leaves, axes)
                  if ax is not None and hasattr(x, "shape")), None)
    if first is None:
      raise ValueError("pmap requires at least one argument with a mapped axis.")
    shape = np.shape(first[0])
    if axis_size is not None and nproc == 1 and -len(shape) <= first[1] < len(shape) and \
        shape[first[1]] != axis_size:
      raise ValueError(f"Specified axis_size {axis_size} doesn't match received axis_size "
                       f"{shape[first[1]]}.")
    # NB: static arguments are left out of the leaves: they are named by position
    return mapped_axes("pmap", None if has_static else fun, avals, in_tree, axes,
                       axis_size if nproc > 1 else None, aval_of=lambda a: a)

  def _trace(call_fun, st, static_vals, in_tree, avals, axes, size):
    local = [mapped_aval(a, ax) for a, ax in zip(avals, axes)]
    store = []

    def flat(*xs):
      d, kw = tree_util.tree_unflatten(in_tree, xs)
      out = call_fun(st, static_vals, d, kw)
      out_leaves, out_tree = flatten(out)
      check_out_leaves(out_leaves, out_tree, name, "pmap")
      store[:] = [out_tree]
      return out_leaves

    with batching.extend_axis_env(axis_name, size):
      jaxpr, consts = pe.trace_to_jaxpr(flat, local)
    closed = ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), [])
    on_axis = frozenset((axis_name,))
    varying = [axis_name in v for v in varying_axes(
        closed.jaxpr, [frozenset()] * len(consts) +
        [on_axis if ax is not None else frozenset() for ax in axes])]
    cacheable = not any(isinstance(c, core.Tracer) for c in consts)
    return closed, consts, store[0], varying, cacheable

  def _map_eagerly(call_fun, st, static_vals, dyn, kwargs, dyn_axes, size: int):
    n = len(devices) if devices is not None else client.local_device_count()
    if size is not None and size > n:
      raise ValueError(
          f"compiling computation that requires {size} logical devices, but only {n} XLA "
          f"devices are available (num_replicas=1, num_partitions={size}).")
    body = lambda d, kw: call_fun(st, static_vals, d, kw)
    try:
      return vmap(body, in_axes=(dyn_axes, 0), out_axes=out_axes, axis_name=axis_name,
                      axis_size=axis_size)(dyn, kwargs)
    except ValueError as e:
      if "out_axes is None" not in str(e) and "got axis spec None" not in str(e):
        raise
      raise ValueError(f"pmap out_axes=None requires the output to be the same on every "
                       f"device, but it depends on mapped inputs (axis_name={axis_name!r}). "
                       f"Reduce it over the axis first (e.g. lax.psum / lax.pmean), or give "
                       f"it an out_axes.") from None

  def lower(*args, **kwargs):
    """`Lowered` for these arguments: the jit of this pmap (one SPMD program whose
    arguments and results are replicated; `as_text()`, `compile()`)."""
    def call(*a, **k):   # NB: not pmap_f itself, whose `lower` jit would copy over its own
      return pmap_f(*a, **k)
    call.__name__ = f"pmap_{name}"
    return jit(call).lower(*args, **kwargs)

  pmap_f.lower = lower
  pmap_f._pmap_fun = fun
  return pmap_f


# ---------------------------------------------------------------------------
# typeof, clear_caches, fwd_and_bwd, print_environment_info

import platform as _platform   # noqa: E402 (this section's own imports)
import sys as _sys   # noqa: E402

import jaxlib as _jaxlib   # noqa: E402

from stagecraft import version as _version   # noqa: E402
from stagecraft.runtime import dispatch   # noqa: E402


def typeof(x: Any) -> ShapedArray | AbstractRef:
  """The aval of `x`: an Array's, a tracer's, or that of a NumPy array or a Python scalar
  (weakly typed), e.g. `ShapedArray(float32[3])`; a `Ref`'s is an `AbstractRef` (JAX's
  `jax.ref.AbstractRef`, printed `Ref{float32[3]}`).

    >>> import stagecraft.numpy as jnp
    >>> typeof(jnp.ones(3))
    ShapedArray(float32[3])
    >>> typeof(1.0)
    ShapedArray(float32[], weak_type=True)

  A `ShapeDtypeStruct` gives the aval it describes (its weak type, and a sharding over
  Explicit mesh axes, kept; `Ref{...}` for `is_ref=True`), as in JAX.

  Raises:
    TypeError: if `x` is not an array-like value.
  """
  if isinstance(x, Ref):
    return x.aval
  if isinstance(x, core.ShapeDtypeStruct):
    aval = typed_abstractify(x, "", "typeof")
    return AbstractRef(aval) if getattr(x, "is_ref", False) else aval
  to_hitype = core.hitype_mappings.get(type(x))
  if to_hitype is not None:   # a value of a type given to `experimental.hijax.register_hitype`
    return to_hitype(x)
  dt = getattr(x, "dtype", None)
  if dt is not None and not isinstance(x, core.Tracer) and dtypes.issubdtype(
      dt, dtypes.extended):   # typed PRNG keys: `ShapedArray(key<fry>[])`
    return ShapedArray(tuple(x.shape), dt)
  try:
    return core.get_aval(x)
  except TypeError:
    if not hasattr(x, "__jax_array__"):
      raise TypeError(f"Argument '{x}' of type '{type(x)}' is not a valid JAX type") from None
    raise


def clear_caches() -> None:
  """Clears the caches of traced and compiled programs (the jit caches, the eager
  primitives' executables, the in-memory compile cache), so that the next call of a function
  traces, lowers and compiles it again. The persistent compilation cache on disk is kept; to
  bypass it, leave `compilation_cache_dir` unset."""
  dispatch.clear_caches()


def fwd_and_bwd(fun: Callable, argnums: int | Sequence[int], has_aux: bool = False,
                jitted: bool = True) -> tuple[Callable, Callable]:
  """The forward and backward passes of `fun` as two functions, so that the backward pass
  is compiled once and reused (unlike `jit` of a fresh `vjp` function each step).

    >>> import stagecraft.numpy as jnp
    >>> fwd, bwd = fwd_and_bwd(lambda x, w: x @ w, argnums=(0, 1))
    >>> y, res = fwd(jnp.ones((2, 2)), jnp.ones((2, 2)))
    >>> ct_x, ct_w = bwd(res, jnp.ones((2, 2)))

  Args:
    fun: the function to differentiate.
    argnums: an int or a sequence of ints, the positional arguments to differentiate.
    has_aux: `fun` returns `(output, aux)`; `fwd` then returns `aux` too.
    jitted: return `jit` of both functions.

  Returns:
    `(fwd, bwd)`: `fwd(*args)` is `(fun(*args), residuals)` (`(out, residuals, aux)` with
    `has_aux`), where `residuals` is the pytree `vjp` returns as its backward function;
    `bwd(residuals, cotangent)` is the cotangent of the argument at `argnums` (a tuple of
    them when `argnums` is a sequence).

  Raises:
    TypeError: if `fun` is not callable or `argnums` is not an int or a sequence of ints.

  Semantics: JAX's `jax.fwd_and_bwd` (reverse mode by `vjp`).
  """
  if not callable(fun):
    raise TypeError(f"fwd_and_bwd: expected a callable function, got {fun!r}.")
  nums = normalize_argnums(argnums, "argnums")

  def fwd(*args):
    f_partial, dyn_args = _argnums_partial(fun, nums, args, {})
    return vjp(f_partial, *dyn_args, has_aux=has_aux)

  def bwd(f_vjp, outgrad):
    g = f_vjp(outgrad)
    return g[0] if isinstance(argnums, int) else g

  if jitted:
    fwd, bwd = jit(fwd), jit(bwd)
  return fwd, bwd


def print_environment_info(return_string: bool = False) -> str | None:
  """Prints (or, with `return_string`, returns) the versions of stagecraft, jaxlib, NumPy
  and Python, the devices and the process count, and the platform: what a bug report
  needs."""
  devs = client.devices()
  lines = [
      f"stagecraft: {_version.__version__}",
      f"jaxlib:     {_jaxlib.__version__}",
      f"numpy:      {np.__version__}",
      f"python:     {_sys.version}",
      f"device info: {devs[0].device_kind}-{len(devs)}, {client.local_device_count()} local "
      f"devices",
      f"process_count: {client.process_count()}",
      f"platform: {_platform.uname()}",
  ]
  info = "\n".join(lines) + "\n"
  if return_string:
    return info
  print(info)
  return None


# ---------------------------------------------------------------------------
# Ref: a mutable array reference (eager, or local to a trace)


def new_ref(init_val: Any, *, memory_space: Any = None, kind: str | None = None) -> Ref:
  """A new `Ref` holding `init_val` (an array-like; copied), as JAX's `jax.new_ref`.

  Made outside any transformation, the ref is eager; made inside a traced function, it is
  local to that trace (see `Ref`) and `init_val` may be traced.

  Raises:
    NotImplementedError: for a `memory_space` or a `kind` (stagecraft's refs live in device
      memory).
  """
  if memory_space is not None or kind is not None:
    raise NotImplementedError(f"new_ref: memory_space={memory_space!r} / kind={kind!r} are "
                              f"not supported by stagecraft")
  trace = core.current_trace()
  local = None if type(trace) is core.EvalTrace else trace
  return Ref(jnp.array(init_val), local, owned=local is None)
