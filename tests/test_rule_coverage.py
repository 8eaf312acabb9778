"""Every primitive has the rules this stage of the project needs: abstract eval, a lowering,
a JVP rule, a transpose rule for the linear ones, and a batching rule."""
import importlib
import pkgutil

import numpy as np
import pytest

import stagecraft
from stagecraft import core, lax, pjit
from stagecraft.interpreters import ad, batching, lowering


def all_primitives():
  prims = {}
  from stagecraft import ad_checkpoint, custom_batching, custom_derivatives
  from stagecraft.interpreters import ad as ad_mod
  mods = [pjit, ad_mod, ad_checkpoint, custom_derivatives, custom_batching] + [
      importlib.import_module(f"stagecraft.lax.{m.name}") for m in pkgutil.iter_modules(lax.__path__)]
  for mod in mods:
    for name, obj in vars(mod).items():
      if isinstance(obj, core.Primitive):
        prims[obj.name] = obj
  return prims


PRIMS = all_primitives()

# The foundation issue's list; each must exist under this name.
REQUIRED = """add sub mul div rem neg max min abs sign pow integer_pow exp exp2 log log1p expm1
sqrt rsqrt cbrt sin cos tan tanh logistic asin acos atan atan2 sinh cosh asinh acosh atanh erf
erfc erf_inv floor ceil round is_finite eq ne lt le gt ge and or not xor select_n
convert_element_type broadcast_in_dim reshape transpose squeeze rev concatenate pad slice
dynamic_slice dynamic_update_slice iota reduce_sum reduce_max reduce_min reduce_prod reduce_and
reduce_or argmax argmin dot_general""".split()


def test_required_primitives_exist():
  missing = [n for n in REQUIRED if n not in PRIMS]
  assert not missing, f"missing primitives: {missing}"


@pytest.mark.parametrize("name", sorted(PRIMS))
def test_primitive_has_abstract_eval_and_lowering(name):
  prim = PRIMS[name]
  assert prim.abstract_eval is not None, f"{name} has no abstract_eval"
  assert lowering.has_lowering(prim), f"{name} has no lowering rule"


def test_missing_lowering_error_names_the_primitive():
  p = core.Primitive("my_new_op")
  p.def_abstract_eval(lambda x: x)
  with pytest.raises(stagecraft.errors.MissingRuleError if hasattr(stagecraft, "errors") else
                     NotImplementedError, match="MLIR translation rule for primitive 'my_new_op' not found for platform cpu"):
    p.bind(stagecraft.numpy.ones(3))


# Primitives without a JVP rule, as in JAX: LAPACK building blocks differentiated one level up
# (the `qr` primitive), and custom_vjp's linear part, which is only ever transposed.
NO_JVP = {"geqrf": "differentiated through the qr primitive",
          "householder_product": "differentiated through the qr primitive",
          "custom_lin": "only transposed (forward mode of custom_vjp is an error)",
          "pmax": "no derivative in JAX either", "pmin": "no derivative in JAX either",
          "create_token": "no operands, so no tangent ever reaches it (no rule in JAX either)"}

# The linear primitives the autodiff issue names (expand_dims is reshape/broadcast_in_dim
# here; there is no copy primitive).
LINEAR = """add sub neg mul div dot_general reduce_sum broadcast_in_dim reshape transpose squeeze
concatenate pad slice dynamic_slice dynamic_update_slice gather scatter-add select_n
convert_element_type rev cumsum conv_general_dilated reduce_window_sum real imag complex conj
fft add_any jit remat2 custom_lin""".split()


@pytest.mark.parametrize("name", sorted(PRIMS))
def test_primitive_has_jvp_rule(name):
  if name in NO_JVP:
    assert PRIMS[name] not in ad.primitive_jvps, f"{name} now has a JVP: drop it from NO_JVP"
    return
  assert PRIMS[name] in ad.primitive_jvps, f"{name} has no JVP rule"


@pytest.mark.parametrize("name", LINEAR)
def test_linear_primitive_has_transpose_rule(name):
  assert PRIMS[name] in ad.primitive_transposes, f"{name} has no transpose rule"


def test_missing_jvp_rule_error_names_the_primitive():
  p = core.Primitive("my_op_without_jvp")
  p.def_abstract_eval(lambda x: x)
  p.def_impl(lambda x: x)
  with pytest.raises(stagecraft.errors.MissingRuleError,
                     match="Differentiation rule for 'my_op_without_jvp' not implemented"):
    stagecraft.jvp(lambda x: p.bind(x), (1.0,), (1.0,))


# Primitives without a batching rule: iota and create_token have no operands (vmap never sees
# them batched), after_all's operands are tokens, which vmap cannot map (as in JAX);
# (custom_lin's batching rule raises JAX's forward-mode error: it is only transposed.)
NO_BATCHING = {"iota", "create_token", "after_all"}


@pytest.mark.parametrize("name", sorted(PRIMS))
def test_primitive_has_batching_rule(name):
  prim = PRIMS[name]
  has = prim in batching.primitive_batchers or prim in batching.fancy_primitive_batchers
  if name in NO_BATCHING:
    assert not has, f"{name} now has a batching rule: drop it from NO_BATCHING"
    return
  assert has, f"{name} has no batching rule"


def test_missing_batching_rule_error_names_the_primitive():
  p = core.Primitive("my_op_without_batching")
  p.def_abstract_eval(lambda x: x)
  p.def_impl(lambda x: x)
  with pytest.raises(stagecraft.errors.MissingRuleError,
                     match="Batching rule for 'my_op_without_batching' not implemented"):
    stagecraft.vmap(lambda x: p.bind(x))(np.ones(2))
