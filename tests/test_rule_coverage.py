"""Every primitive has the rules this stage of the project needs: abstract eval and a lowering
(jvp/transpose/batching rules arrive with the autodiff and vmap issues, and extend this test)."""
import importlib
import pkgutil

import pytest

import stagecraft
from stagecraft import api, core, lax
from stagecraft.interpreters import lowering


def all_primitives():
  prims = {}
  mods = [api] + [importlib.import_module(f"stagecraft.lax.{m.name}")
                  for m in pkgutil.iter_modules(lax.__path__)]
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
                     NotImplementedError, match="Primitive 'my_new_op' has no lowering rule"):
    p.bind(stagecraft.numpy.ones(3))
