"""JAX's library-author APIs that flax and equinox call: `custom_jvp` with symbolic zeros
(`SymbolicZero`, `zero_from_primal`), and `api_util.debug_info` / `flatten_fun` with
`extend.linear_util` and `interpreters.partial_eval.trace_to_jaxpr_nounits` (flax's
`lazy_init` and `nn.scan`). JAX is the oracle."""
from __future__ import annotations

import jax
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import api_util, custom_derivatives as cd, tree_util
from stagecraft.core import ShapedArray
from stagecraft.extend import linear_util as lu
from stagecraft.interpreters import partial_eval as pe


# ---------------------------------------------------------------------------
# Symbolic zeros


def _symbolic_fn(lib, seen):
  @lib.custom_jvp
  def h(x, y):
    return x * y

  def h_jvp(primals, tangents):
    x, y = primals
    tx, ty = tangents
    seen.append(tuple(type(t).__name__ == "SymbolicZero" for t in tangents))
    zero = lib.custom_derivatives.SymbolicZero
    tx = lib.numpy.zeros_like(x) if isinstance(tx, zero) else tx
    ty = lib.numpy.zeros_like(y) if isinstance(ty, zero) else ty
    return x * y, tx * y + x * ty
  h.defjvp(h_jvp, symbolic_zeros=True)
  return h


@pytest.mark.parametrize("how", ["grad0", "grad1", "jvp_closed", "jit_grad", "vmap_grad"])
def test_symbolic_zero_tangents_as_jax(how):
  def run(lib):
    seen = []
    h = _symbolic_fn(lib, seen)
    if how == "grad0":
      out = lib.grad(h)(2., 3.)
    elif how == "grad1":
      out = lib.grad(h, argnums=1)(2., 3.)
    elif how == "jvp_closed":
      out = lib.jvp(lambda x: h(x, 4.), (2.,), (1.,))[1]
    elif how == "jit_grad":
      out = lib.jit(lib.grad(h, argnums=1))(2., 3.)
    else:
      out = lib.vmap(lib.grad(h))(lib.numpy.ones(3), lib.numpy.arange(3.))
    return np.asarray(out).tolist(), seen[-1]
  assert run(sc) == run(jax)


def test_symbolic_zero_output_tangent():
  def run(lib):
    zero = lib.custom_derivatives.SymbolicZero

    @lib.custom_jvp
    def k(x):
      return x, x * 2.

    def k_jvp(primals, tangents):
      x, = primals
      tx, = tangents
      return k(x), (zero(lib.typeof(x).to_tangent_aval()), tx * 2.)
    k.defjvp(k_jvp, symbolic_zeros=True)
    p, t = lib.jvp(k, (1.,), (1.,))
    return [float(v) for v in p], [float(v) for v in t], float(lib.grad(lambda x: k(x)[1])(1.))
  assert run(sc) == run(jax) == ([1., 2.], [0., 2.], 2.)


def test_symbolic_zero_is_a_leaf_with_aval_attributes():
  aval = ShapedArray((2, 3), np.dtype(np.float32))
  z = cd.SymbolicZero(aval)
  jz = jax.custom_derivatives.SymbolicZero(jax.core.ShapedArray((2, 3), np.float32))
  assert repr(z) == repr(jz) == "SymbolicZero"
  assert (z.shape, z.dtype, z.ndim, z.size) == (jz.shape, jz.dtype, jz.ndim, jz.size)
  assert tree_util.tree_leaves([z, 1]) == [z, 1]
  assert jax.tree_util.tree_leaves([jz, 1]) == [jz, 1]
  with pytest.raises(AttributeError, match="SymbolicZero has no attribute"):
    z.not_an_attribute
  # equinox's filter_custom_jvp maps over (tangents, primals) with tangents first.
  assert tree_util.tree_map(lambda t, p: type(t).__name__, [z], [jnp.ones((2, 3))]) == [
      "SymbolicZero"]
  assert cd.SymbolicZero.from_primal_value(jnp.arange(3)).dtype == jax.dtypes.float0


@pytest.mark.parametrize("symbolic", [False, True])
def test_zero_from_primal_as_jax(symbolic):
  def run(lib):
    out = lib.custom_derivatives.zero_from_primal(
        {"a": 1., "b": lib.numpy.arange(2), "c": lib.numpy.ones((2, 3), "float16")},
        symbolic_zeros=symbolic)
    return {k: (type(v).__name__ if symbolic else np.asarray(v).tolist(), v.shape,
                str(v.dtype)) for k, v in out.items()}
  j, s = run(jax), run(sc)
  if not symbolic:   # the array types differ by name (ArrayImpl / Array; numpy for float0)
    assert {k: v[1:] for k, v in s.items()} == {k: v[1:] for k, v in j.items()}
    assert s["c"][0] == j["c"][0] and s["a"][0] == j["a"][0]
  else:
    assert s == j


# ---------------------------------------------------------------------------
# api_util.debug_info / flatten_fun + linear_util + trace_to_jaxpr_nounits (flax lazy_init)


def _lazy_init(lib, lu_mod, pe_mod, fn):
  """flax.core.partial_eval.lazy_init, written against `lib`'s modules."""
  def wrapper(*args, **kwargs):
    inputs_flat, in_tree = lib.tree_util.tree_flatten((args, kwargs))
    dbg = lib.api_util.debug_info("lazy_init", fn, (in_tree,), {})
    f_flat, out_tree = lib.api_util.flatten_fun(lu_mod.wrap_init(fn, debug_info=dbg), in_tree)
    in_pvals = [pe_mod.PartialVal.unknown(lib.core.ShapedArray(x.shape, x.dtype))
                if isinstance(x, lib.ShapeDtypeStruct) else pe_mod.PartialVal.known(x)
                for x in inputs_flat]
    _, out_pvals, _ = pe_mod.trace_to_jaxpr_nounits(f_flat, in_pvals)
    out_flat = []
    for pv, const in out_pvals:
      if pv is not None:
        raise ValueError("data dependence")
      out_flat.append(const)
    return lib.tree_util.tree_unflatten(out_tree(), out_flat)
  return wrapper


def _init_like(lib, w, x):
  params = {"w": w * 2., "b": lib.numpy.ones(3)}
  return params, {"y": x @ params["w"]}


def test_lazy_init_mechanism_as_jax():
  import jax.extend.linear_util as jlu
  import jax.interpreters.partial_eval as jpe

  def run(lib, lu_mod, pe_mod):
    w = lib.numpy.arange(6.).reshape(2, 3)
    x = lib.ShapeDtypeStruct((4, 2), np.float32)
    f = _lazy_init(lib, lu_mod, pe_mod, lambda w, x: _init_like(lib, w, x)[0])
    out = f(w, x)
    with pytest.raises(ValueError, match="data dependence"):
      _lazy_init(lib, lu_mod, pe_mod, lambda w, x: _init_like(lib, w, x))(w, x)
    return {k: np.asarray(v).tolist() for k, v in out.items()}
  assert run(sc, lu, pe) == run(jax, jlu, jpe)


def test_flatten_fun_out_tree_and_nokwargs():
  f = lambda a, b=1., *, c: {"s": a + b * c, "t": (a,)}   # noqa: E731
  leaves, in_tree = tree_util.tree_flatten(((jnp.ones(2), 2.), {"c": 3.}))
  flat, out_tree = api_util.flatten_fun(lu.wrap_init(f), in_tree)
  with pytest.raises(ValueError, match="before the function was called"):
    out_tree()
  outs = flat.call_wrapped(*leaves)
  assert tree_util.tree_unflatten(out_tree(), outs)["s"].tolist() == [7., 7.]
  # a plain callable works too, and so does the no-kwargs form
  leaves, in_tree = tree_util.tree_flatten((jnp.ones(2), 2.))
  flat, out_tree = api_util.flatten_fun_nokwargs(lambda a, b: [a * b], in_tree)
  assert [np.asarray(o).tolist() for o in flat(*leaves)] == [[2., 2.]]
  assert out_tree().num_leaves == 1


def test_debug_info_names_arguments():
  def fun(x, params, *, scale):
    return x
  dbg = api_util.debug_info("jit", fun, (1., {"w": 2., "b": 3.}), {"scale": 4.})
  assert dbg.traced_for == "jit" and dbg.func_name == "fun"
  assert dbg.arg_names == ("x", "params['b']", "params['w']", "scale")
  dbg = api_util.debug_info("jit", fun, (1., {"w": 2.}), {"scale": 4.}, static_argnums=(0,))
  assert dbg.arg_names == ("params['w']", "scale")
