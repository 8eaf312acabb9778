"""Patterns from jaxopt, mctx, jraph and rlax (their own test suites and examples) that
failed or differed under stagecraft, each run in plain JAX code on JAX and on stagecraft in
the same test and compared. The libraries themselves are not in the `test` extra."""
from __future__ import annotations

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp

APIS = {"jax": (jax, jjnp), "stagecraft": (sc, snp)}


def test_config_x64_enabled_reads_enable_x64():
  # jaxopt's test_util: `_canonicalize_dtype(jax.config.x64_enabled, dtype)`.
  seen = {}
  for name, (api, _) in APIS.items():
    vals = [api.config.x64_enabled]
    with api.enable_x64(True):
      vals.append(api.config.x64_enabled)
    vals.append(api.config.x64_enabled)
    seen[name] = vals
    with pytest.raises(AttributeError):
      api.config.x64_enabled = True
  assert seen["stagecraft"] == seen["jax"] == [False, True, False]


def test_custom_rules_called_eagerly_get_canonical_numpy_arguments():
  # jaxopt's solvers `run` through `custom_root` (a custom_vjp): with x64 off JAX hands the
  # function float32 copies of float64 NumPy inputs, so LBFGS's
  # `jnp.zeros(..., dtype=leaf.dtype)` asks for float32 and warns about nothing.
  import functools
  import warnings
  seen = {}
  for name, (api, jnp) in APIS.items():
    log = []

    def body(x, y, tag):
      for v in (x, y):
        log.append((tag, isinstance(v, np.ndarray), str(getattr(v, "dtype", None)),
                    np.shape(v)))
      return jnp.zeros((2,) + np.shape(x), dtype=x.dtype)

    @functools.partial(api.custom_vjp, nondiff_argnums=(1,))
    def f(x, y):
      return body(x, y, "vjp")
    f.defvjp(lambda x, y: (f(x, y), None), lambda y, r, g: (g,))

    @functools.partial(api.custom_jvp, nondiff_argnums=(1,))
    def g(x, y):
      return body(x, y, "jvp")
    g.defjvp(lambda y, p, t: (g(p[0], y), t[0]))

    with warnings.catch_warnings(record=True) as w:
      warnings.simplefilter("always")
      outs = [h(a, b) for h in (f, g)
              for a, b in ((np.array([0.5, 2.0]), np.array([1.0])),
                           (np.float64(1.5), 1), (np.array([1, 2], np.int64), 2.0),
                           (np.array([True]), np.int64(3)))]
    seen[name] = (log, [str(o.dtype) for o in outs], [str(x.message) for x in w])
  assert seen["stagecraft"] == seen["jax"]
  assert seen["jax"][2] == []


def test_custom_vjp_closed_over_value_raises_custom_vjp_exception():
  # jaxopt's eq_qp test: a solver whose matvec closes over the differentiated Q, staged by
  # jit inside grad: JAX raises `jax._src.interpreters.ad.CustomVJPException` (an
  # Exception, not a TypeError), which the test catches by that name.
  from stagecraft import compat
  from stagecraft.runtime import jax_runtime
  seen = {}
  for name, (api, jnp) in APIS.items():
    def outer(w):
      @api.custom_vjp
      def f(x):
        return x * w
      f.defvjp(lambda x: (f(x), x), lambda r, g: (g * 2,))
      return jnp.sum(f(jnp.ones(2)))
    with pytest.raises(Exception) as e:
      api.grad(api.jit(outer))(3.)
    seen[name] = (type(e.value).__name__, isinstance(e.value, TypeError),
                  str(e.value).split("\n")[0])
    assert api.grad(lambda w: outer(1.0) * w)(2.0) == 2.0
  assert seen["stagecraft"] == seen["jax"]
  assert seen["jax"][:2] == ("CustomVJPException", False)
  real = jax_runtime.jax_module("jax._src.interpreters.ad")
  real_cls = real.CustomVJPException
  compat.install()
  try:
    from jax._src.interpreters import ad as served
    assert served.CustomVJPException is sc.interpreters.ad.CustomVJPException
  finally:
    compat.uninstall()
  assert real.CustomVJPException is real_cls


def _warnings_of(fn):
  import warnings
  with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    out = fn()
  return np.asarray(out).tolist(), [(x.category.__name__, str(x.message)) for x in w]


def test_one_hot_of_float_or_bool_input_warns_as_jax():
  # jaxopt's isotonic/projection code calls `jax.nn.one_hot` on float arrays: JAX computes
  # the encoding and warns (a DeprecationWarning) on every call, under jit too.
  seen = {}
  for name, (api, jnp) in APIS.items():
    cases = [lambda: api.nn.one_hot(jnp.array([0., 2.]), 3),
             lambda: api.nn.one_hot(jnp.array([1, 0], jnp.uint8), 2, axis=0),
             lambda: api.jit(lambda v: api.nn.one_hot(v, 4))(jnp.array([1.5, 3.0])),
             lambda: api.nn.one_hot(2, 3)]
    seen[name] = [_warnings_of(c) for c in cases]
    with pytest.raises(TypeError) as e:   # bool warns, then fails in iota
      _warnings_of(lambda: api.nn.one_hot(np.array([True, False]), 2))
    seen[name].append(str(e.value).split("\n")[0])
  assert seen["stagecraft"] == seen["jax"]
  assert [len(w) for _, w in seen["jax"][:4]] == [1, 0, 1, 0]


def test_scatter_update_that_does_not_cast_safely_warns_as_jax():
  # jaxopt's loss/projection code writes float values into int arrays with `.at[].set`:
  # JAX casts them and warns (a FutureWarning) about the unsafe cast.
  seen = {}
  for name, (api, jnp) in APIS.items():
    x = jnp.zeros(3, jnp.int32)
    cases = [lambda: x.at[0].set(1.5), lambda: x.at[1].add(jnp.float32(2.5)),
             lambda: x.at[0].set(7), lambda: x.at[:0].set(2.5),
             lambda: api.jit(lambda a, b: a.at[0].set(b))(x, jnp.float32(2.)),
             lambda: jnp.zeros(2, bool).at[0].set(1),
             lambda: jnp.zeros(2, jnp.float16).at[0].set(jnp.float32(1)),
             lambda: jnp.zeros(2, jnp.float16).at[0].set(1.0),
             lambda: jnp.zeros(2, jnp.uint8).at[0].mul(jnp.int8(3)),
             lambda: jnp.zeros(2).at[1].max(jnp.int32(4))]
    seen[name] = [_warnings_of(c) for c in cases]
  assert seen["stagecraft"] == seen["jax"]
  assert [len(w) for _, w in seen["jax"]] == [1, 1, 0, 1, 1, 1, 1, 0, 1, 0]


def test_threefry_partitionable_off_draws_jax_bits():
  # mctx's tests set `jax.config.update("jax_threefry_partitionable", False)` at import and
  # compare sampled actions/trees with fixed expectations: JAX's original Threefry scheme.
  seen = {}
  for name, (api, jnp) in APIS.items():
    k = api.random.PRNGKey(42)
    with api.threefry_partitionable(False):
      out = [api.random.split(k), api.random.split(k, 3), api.random.split(k, (2, 2)),
             api.random.bits(k, (3,)), api.random.bits(k, (5,), jnp.uint8),
             api.random.bits(k, (3,), jnp.uint16), api.random.uniform(k, (5,)),
             api.random.normal(api.random.key(1), (2, 3)),
             api.random.randint(k, (7,), 0, 100),
             api.random.categorical(k, jnp.log(jnp.array([0.2, 0.3, 0.5])), shape=(6,)),
             api.random.permutation(k, 6), api.random.fold_in(k, 3),
             api.vmap(lambda kk: api.random.bits(kk, (2,)))(api.random.split(k, 3)),
             api.jit(lambda kk: api.random.bits(kk, (4,)))(k)]
      with api.enable_x64(True):
        out.append(api.random.bits(k, (3,), jnp.uint64))
    out.append(api.random.split(k))   # back on: the partitionable bits
    # NB: the jaxprs differ with either setting (stagecraft's random functions trace to
    # lax code, not to JAX's random_* primitives).
    seen[name] = [np.asarray(o).tolist() for o in out]
  assert seen["stagecraft"] == seen["jax"]


def test_array_api_namespace_info_for_scipy():
  # jaxopt's plot_picard_ode example calls `scipy.integrate.cumulative_trapezoid` on jnp
  # arrays: SciPy's array_namespace reads `jnp.__array_namespace_info__` (else it imports
  # jax.experimental.array_api) and `x.__array_namespace__(api_version=...)`.
  import scipy.integrate
  seen = {}
  for name, (api, jnp) in APIS.items():
    info = jnp.__array_namespace_info__()
    got = [jnp.__array_api_version__, info.capabilities(), info.default_device(),
           info.devices() == [None, *api.devices()], info.default_dtypes(),
           info.dtypes(), info.dtypes(kind="integral"),
           info.dtypes(kind=("bool", "complex floating"))]
    with api.enable_x64(True):
      got += [info.default_dtypes(), info.dtypes(kind="real floating")]
    x = jnp.linspace(0.0, 1.0, 5)
    got.append(x.__array_namespace__(api_version="2024.12") is jnp)
    with pytest.raises(ValueError) as e:
      x.__array_namespace__(api_version="2023.12")
    got.append(str(e.value))
    got.append(np.asarray(scipy.integrate.cumulative_trapezoid(x ** 2, initial=0.0,
                                                                dx=0.25)).tolist())
    seen[name] = got
  assert seen["stagecraft"] == seen["jax"]
