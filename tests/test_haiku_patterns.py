"""What dm-haiku 0.0.17's own tests and examples found differing under stagecraft, each
pattern run in plain JAX code on JAX and on stagecraft in the same test (haiku is not in the
`test` extra)."""
from __future__ import annotations

import jax
import jax.extend  # noqa: F401 (jax.extend.core.Primitive)
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.extend  # noqa: F401
import stagecraft.numpy as snp

APIS = {"jax": (jax, jjnp), "stagecraft": (sc, snp)}


def test_precision_str_and_lookup_by_string():
  # haiku's LinearTest.test_precision matches `str(precision).lower()` in the HLO text
  seen = {}
  for name, (api, jnp) in APIS.items():
    P = api.lax.Precision
    out = [(str(p), repr(p), format(p), P(p.name.lower())) for p in P]
    out = [(a, b, c, repr(d)) for a, b, c, d in out]
    hlo = api.jit(lambda x: jnp.dot(x, x, precision=P.HIGH)).lower(
        np.ones((2, 2), np.float32)).compiler_ir(dialect="hlo").as_hlo_text()
    line = next(l for l in hlo.split("\n") if "dot(" in l)
    out.append(f"operand_precision={{{str(P.HIGH).lower()},{str(P.HIGH).lower()}}}" in line)
    with pytest.raises(ValueError) as e:
      P("nope")
    out.append(str(e.value))
    seen[name] = out
  assert seen["stagecraft"] == seen["jax"]
  assert seen["jax"][3] is True


def test_make_jaxpr_axis_env_binds_named_axes():
  # haiku's jaxpr_info.make_model_info passes `axis_env=` to make_jaxpr
  seen = {}
  for name, (api, jnp) in APIS.items():
    f = lambda x: api.lax.psum(x, "i") * api.lax.axis_index("j")
    out = [str(api.make_jaxpr(f, axis_env=[("i", 4), ("j", 2)])(np.ones(3, np.float32)))]
    out.append(str(api.make_jaxpr(lambda x: jnp.sin(x), axis_env=None)(1.0)))
    jaxpr, shape = api.make_jaxpr(lambda x: x + 1, (), [("i", 2)], True)(np.ones(2, np.float32))
    out += [str(jaxpr), shape.shape, str(shape.dtype)]
    with pytest.raises(NameError):   # (the message differs: see the report)
      api.make_jaxpr(f, axis_env=[("i", 4)])(np.ones(3, np.float32))
    seen[name] = out
  assert seen["stagecraft"] == seen["jax"]


def test_equation_source_info_name_stack_prints_scopes():
  # haiku's jaxpr_info reads `str(eqn.source_info.name_stack).split('/')` of every equation
  seen = {}
  for name, (api, jnp) in APIS.items():
    def f(x):
      y = jnp.cos(x)
      with api.named_scope("outer"):
        with api.named_scope("inner"):
          y = jnp.sin(y) * 2
        return jnp.sum(y)
    j = api.make_jaxpr(f)(np.ones(3, np.float32))
    seen[name] = [(e.primitive.name, str(e.source_info.name_stack)) for e in j.jaxpr.eqns]
  assert seen["stagecraft"] == seen["jax"]
  assert seen["jax"][0] == ("cos", "")


def _linear_prim(api, ad, name, log):
  # haiku's stateful_test registers a callback primitive with `ad.deflinear(prim, rule)`,
  # whose rule JAX calls as `rule(ct, **params)`
  prim = api.extend.core.Primitive(name)
  prim.def_impl(lambda x, *, k: log.append(("fwd", k)) or x)
  prim.def_abstract_eval(lambda x, *, k: x)
  ad.deflinear(prim, lambda ct, *, k: log.append(("bwd", k)) or (ct * k,))
  return prim


def test_deflinear_transpose_rule_takes_cotangent_and_params_only():
  import jax.interpreters.ad as jad
  from stagecraft.interpreters import ad as sad
  seen = {}
  for name, (api, jnp), ad in (("jax", APIS["jax"], jad), ("stagecraft", APIS["stagecraft"], sad)):
    log = []
    prim = _linear_prim(api, ad, "hk_callback", log)
    f = lambda x: jnp.sum(prim.bind(x * 2.0, k=3.0))
    x = np.arange(3, dtype=np.float32)
    out = [api.grad(f)(x).tolist(), api.value_and_grad(f)(x)[0].item(),
           api.jvp(lambda x: prim.bind(x, k=2.0), (x,), (np.ones(3, np.float32),))[1].tolist(),
           # a cotangent that is a symbolic zero: the rule is not called
           api.grad(lambda x: jnp.sum(x) + 0.0 * api.lax.stop_gradient(
               jnp.sum(prim.bind(x, k=5.0))))(x).tolist()]
    out.append(str(api.make_jaxpr(api.grad(f))(x)))
    seen[name] = (out, log)
  assert seen["stagecraft"] == seen["jax"]


def test_one_hot_of_float_indices_warns_deprecation():
  # haiku's BasicTest.test_onehot_shape calls one_hot on float indices
  import warnings
  seen = {}
  for name, (api, jnp) in APIS.items():
    out = []
    for x in (np.array([0., 2.], np.float32), np.array([1, 0], np.int32)):
      with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = api.nn.one_hot(x, 3)
      out.append((r.tolist(), str(r.dtype), [(c.category.__name__, str(c.message)) for c in w
                                            if "one_hot" in str(c.message)]))
    seen[name] = out
  assert seen["stagecraft"] == seen["jax"]
  assert seen["jax"][0][2] and not seen["jax"][1][2]
