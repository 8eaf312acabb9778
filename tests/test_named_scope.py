"""named_scope / named_call: names reach the lowered program's locations and XLA's op_name
metadata, as JAX's do (JAX is the oracle for the names of the same programs)."""
import re
import threading

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft
import stagecraft.numpy as jnp
from stagecraft import core, lax, source_info_util
from stagecraft.ad_checkpoint import saved_residuals
from stagecraft.source_info_util import (NameStackInfo, current_name_stack, named_call,
                                         named_scope)


def _op_names(hlo_text: str) -> set[str]:
  return set(re.findall(r'op_name="([^"]*)"', hlo_text))


def _scoped(names: set[str], scopes) -> set[str]:
  """The op names that hold one of `scopes` (JAX names every op; stagecraft only scoped
  ones)."""
  return {n for n in names if any(f"/{s}/" in n or n.endswith(f"/{s}") for s in scopes)}


def _layer(x):
  with named_scope("outer"):
    y = jnp.sin(x)
    with named_scope("inner"):
      z = y * 2
  return z + 1


def _layer_jax(x):
  with jax.named_scope("outer"):
    y = jjnp.sin(x)
    with jax.named_scope("inner"):
      z = y * 2
  return z + 1


def test_lowered_text_has_scope_locations():
  # NB: as_text() prints as JAX's (no locations); compiler_ir() is the module as lowered.
  text = stagecraft.jit(_layer).lower(jnp.ones(3)).compiler_ir()
  assert "loc(" not in stagecraft.jit(_layer).lower(jnp.ones(3)).as_text()
  assert 'stablehlo.sine %arg0 : tensor<3xf32> loc("jit(_layer)/outer/sin"(' in text
  assert re.search(r'stablehlo.multiply .* loc\("jit\(_layer\)/outer/inner/mul"\(', text)
  # Ops outside every scope carry the jit's name stack alone (as JAX's locations).
  assert re.search(r'stablehlo.add .*loc\("jit\(_layer\)/add"\(', text)


def test_compiled_op_names_match_jax():
  x = np.ones(3, np.float32)
  ours = _op_names(stagecraft.jit(_layer).lower(x).compile().as_text())
  theirs = _op_names(jax.jit(_layer_jax).lower(x).compile().as_text())
  scoped = {n.replace("_layer_jax", "_layer") for n in _scoped(theirs, ["outer", "inner"])}
  assert scoped == {"jit(_layer)/outer/sin", "jit(_layer)/outer/inner/mul"}
  assert _scoped(ours, ["outer", "inner"]) == scoped


def _g(x):
  return jnp.cos(x) * 3


def _g_jax(x):
  return jjnp.cos(x) * 3


def test_nested_jit_names_are_relative_to_the_call_site():
  def f(x):
    with named_scope("outer"):
      return stagecraft.jit(_g)(x) + 1

  def fj(x):
    with jax.named_scope("outer"):
      return jax.jit(_g_jax)(x) + 1

  x = np.ones(3, np.float32)
  ours = _op_names(stagecraft.jit(f).lower(x).compile().as_text())
  theirs = _op_names(jax.jit(fj).lower(x).compile().as_text())
  theirs = {n.replace("_g_jax", "_g").replace("jit(fj)", "jit(f)") for n in theirs}
  assert _scoped(ours, ["outer"]) == _scoped(theirs, ["outer"])
  assert "jit(f)/outer/jit(_g)/cos" in ours


def test_cached_inner_jaxpr_does_not_keep_the_outer_scope():
  inner = stagecraft.jit(lambda x: jnp.exp(x))

  def f(x):
    with named_scope("first"):
      a = inner(x)
    with named_scope("second"):
      b = inner(x) * 2
    return a + b

  jaxpr = stagecraft.make_jaxpr(f)(jnp.ones(2)).jaxpr
  calls = [e for e in jaxpr.eqns if e.primitive.name == "jit"]
  assert [e.source_info.name_stack for e in calls] == [("first",), ("second",)]
  body = calls[0].params["jaxpr"].jaxpr
  assert all(source_info_util.name_stack_of(e.source_info) == () for e in body.eqns)


def test_named_call_matches_jax():
  def f(x):
    return named_call(_g, name="gname")(x) + 1

  def fj(x):
    return jax.named_call(_g_jax, name="gname")(x) + 1

  x = np.ones(3, np.float32)
  ours = _op_names(stagecraft.jit(f).lower(x).compile().as_text())
  theirs = _op_names(jax.jit(fj).lower(x).compile().as_text())
  theirs = {n.replace("jit(fj)", "jit(f)") for n in theirs}
  assert _scoped(ours, ["gname"]) == _scoped(theirs, ["gname"]) == {
      "jit(f)/gname/cos", "jit(f)/gname/mul"}
  np.testing.assert_allclose(stagecraft.jit(f)(x), jax.jit(fj)(x), rtol=1e-6)


def test_named_call_default_name_and_wraps():
  def my_block(x, *, k=2.0):
    """doc"""
    return x * k

  h = named_call(my_block)
  assert h.__name__ == "my_block" and h.__doc__ == "doc"
  text = stagecraft.jit(lambda x: h(x, k=3.0)).lower(jnp.ones(2)).compiler_ir()
  assert "/my_block/mul" in text
  np.testing.assert_allclose(h(np.ones(2, np.float32), k=3.0), 3.0)
  with pytest.raises(AttributeError):
    named_call(object())


def test_named_scope_as_decorator_and_reentrant():
  @named_scope("layer")
  def layer(x):
    return jnp.tanh(x)

  def f(x):
    return layer(layer(x))

  text = stagecraft.jit(f).lower(jnp.ones(2)).compiler_ir()
  assert text.count('loc("jit(f)/layer/tanh"(') == 2


def test_name_type_error_is_jaxs():
  with pytest.raises(TypeError, match="named_scope name argument must be a string."):
    named_scope(3)
  with pytest.raises(TypeError, match="named_scope name argument must be a string."):
    jax.named_scope(3)


def test_hook_installed_only_while_a_scope_is_active():
  assert core.source_info_hook is None
  with named_scope("a"):
    assert core.source_info_hook is not None
    with named_scope("b"):
      pass
    assert core.source_info_hook is not None
  assert core.source_info_hook is None
  with pytest.raises(ZeroDivisionError):
    with named_scope("c"):
      1 / 0
  assert core.source_info_hook is None
  # Without a scope the equations carry only the user's frame (no name stack).
  jaxpr = stagecraft.make_jaxpr(lambda x: jnp.sin(x) * 2)(jnp.ones(2)).jaxpr
  assert all(type(e.source_info) is core.UserFrame for e in jaxpr.eqns)
  assert all("test_named_scope.py" in e.source_info.summary() for e in jaxpr.eqns)


def test_eager_and_numbers_unchanged():
  x = np.linspace(-1, 1, 5).astype(np.float32)
  with named_scope("eager"):
    eager = _layer(x)
  np.testing.assert_allclose(eager, jax.jit(_layer_jax)(x), rtol=1e-6)
  np.testing.assert_allclose(stagecraft.jit(_layer)(x), eager, rtol=1e-6)
  assert str(stagecraft.make_jaxpr(_layer)(x)) == str(
      stagecraft.make_jaxpr(lambda x: jnp.sin(x) * 2 + 1)(x))


def test_scope_outside_the_trace_is_not_recorded_inside():
  # A scope entered before jit traces belongs to the caller, not to the jitted program.
  f = stagecraft.jit(lambda x: jnp.sin(x))
  with named_scope("caller"):
    text = f.lower(jnp.ones(2)).compiler_ir()
    assert current_name_stack() == ("caller",)
  assert "caller/" not in text and 'loc("jit(<lambda>)/sin"(' in text


def test_other_threads_do_not_see_a_scope():
  seen = {}
  entered, done = threading.Event(), threading.Event()

  def other():
    entered.wait()
    seen["text"] = stagecraft.jit(lambda x: jnp.cos(x)).lower(jnp.ones(2)).compiler_ir()
    done.set()

  t = threading.Thread(target=other)
  t.start()
  with named_scope("mine"):
    entered.set()
    done.wait(timeout=60)
  t.join()
  assert 'loc("jit(<lambda>)/cos"(' in seen["text"] and "mine" not in seen["text"]


def test_saved_residuals_unaffected():
  def f(x):
    with named_scope("s"):
      return jnp.sum(jnp.sin(jnp.cos(x)))

  res = saved_residuals(f, jnp.ones(3))
  assert [a.shape for a, _ in res] == [(3,), (3,)]
  assert all(re.search(r"output of (sin|cos) from .*test_named_scope.py:\d+", d)
             for _, d in res)
  with named_scope("outer"):
    res2 = saved_residuals(f, jnp.ones(3))
  assert [d for _, d in res2] == [d for _, d in res]
  assert core.source_info_hook is None


def test_equation_source_info():
  def f(x):
    with named_scope("a"):
      with named_scope("b"):
        y = jnp.exp(x)
      z = y + 1
    return z * 2

  eqns = stagecraft.make_jaxpr(f)(jnp.ones(2)).jaxpr.eqns
  infos = [e.source_info for e in eqns]
  assert [type(i) for i in infos[:2]] == [NameStackInfo] * 2
  assert infos[0].name_stack == ("a", "b") and infos[1].name_stack == ("a",)
  assert type(infos[2]) is core.UserFrame and "test_named_scope.py" in infos[0].summary()


def test_grad_and_vmap_keep_forward_names():
  def f(x):
    with named_scope("outer"):
      return jnp.sum(jnp.sin(x))

  ours = _op_names(stagecraft.jit(stagecraft.grad(f)).lower(jnp.ones(3)).compile().as_text())
  # JAX writes `jvp(outer)`; here the forward name is kept as is (see source_info_util).
  assert any("outer" in n for n in ours)
  g = stagecraft.jit(stagecraft.grad(f))
  np.testing.assert_allclose(g(np.ones(3, np.float32)), np.cos(np.ones(3)), rtol=1e-6)
  t = stagecraft.jit(stagecraft.vmap(f)).lower(jnp.ones((2, 3))).compiler_ir()
  assert 'loc("jit(f)/outer/sin"(' in t


def test_many_ops_under_a_scope_compile_and_agree():
  # Every op kind a scope may tag (regions, calls, custom calls, tuples of results) must
  # still parse with its location appended.
  def body(x, m):
    a = lax.cond(x[0] > 0, lambda v: v * 2, lambda v: v - 1, x)
    b = lax.fori_loop(0, 3, lambda i, v: v + i, x)
    c = lax.scan(lambda c, v: (c + v, c * v), 0.0, x)[1]
    d = lax.while_loop(lambda v: v[0] < 5, lambda v: v + 1, x)
    e = jnp.sort(x) + jnp.argsort(x).astype(x.dtype)
    f = m @ m.T + jnp.linalg.inv(m @ m.T + 3 * jnp.eye(3))
    g = jnp.cumsum(x) + lax.reduce_window(x, 0.0, lax.add, (2,), (1,), "SAME")
    h = x.at[1].add(5.0)[jnp.array([2, 0])]
    k = stagecraft.pure_callback(lambda v: np.asarray(v) * 3,
                                 stagecraft.ShapeDtypeStruct(x.shape, x.dtype), x,
                                 vmap_method="sequential")
    return a, b, c, d, e, f.sum(), g, h, k

  def f(x, m):
    with named_scope("all"):
      return body(x, m)

  x = np.array([0.5, -1.0, 2.0], np.float32)
  m = np.arange(9, dtype=np.float32).reshape(3, 3) / 9
  lowered = stagecraft.jit(f).lower(x, m)
  assert lowered.compiler_ir().count('/all/') > 10
  got = stagecraft.jit(f)(x, m)
  want = stagecraft.jit(body)(x, m)
  for a, b in zip(got, want):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  assert any("/all/" in n for n in _op_names(lowered.compile().as_text()))


def test_maps_over_devices_under_a_scope():
  from stagecraft.shard_map import shard_map
  from stagecraft.sharding import Mesh, PartitionSpec as P
  n = min(stagecraft.device_count(), 2)
  x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)

  def step(v):
    with named_scope("dev"):
      return lax.psum(jnp.sin(v), "i")

  out = stagecraft.pmap(step, axis_name="i")(x)
  np.testing.assert_allclose(out, np.broadcast_to(np.sin(x).sum(0), x.shape), rtol=1e-6)
  mesh = Mesh(np.array(stagecraft.devices()[:n]), ("i",))
  sm = stagecraft.jit(shard_map(step, mesh=mesh, in_specs=P("i"), out_specs=P()))
  assert "/dev/" in sm.lower(x).compiler_ir()
  np.testing.assert_allclose(sm(x), np.sin(x).sum(0, keepdims=True), rtol=1e-6)


def test_names_with_quotes_and_unicode():
  name = 'say "hi" \\ é'

  def f(x):
    with named_scope(name):
      return jnp.cos(x)

  def fj(x):
    with jax.named_scope(name):
      return jjnp.cos(x)

  lowered = stagecraft.jit(f).lower(jnp.ones(2))
  assert r'loc("jit(f)/say \"hi\" \\ \C3\A9/cos"(' in lowered.compiler_ir()
  pat = r'op_name="((?:[^"\\]|\\.)*)"'
  ours = set(re.findall(pat, lowered.compile().as_text()))
  theirs = set(re.findall(pat, jax.jit(fj).lower(np.ones(2, np.float32)).compile().as_text()))
  want = {n.replace("jit(fj)", "jit(f)") for n in theirs if "say" in n}
  assert want and {n for n in ours if "say" in n} == want
  np.testing.assert_allclose(stagecraft.jit(f)(np.ones(2, np.float32)), np.cos(1.0), rtol=1e-6)
