"""Source locations of staged equations (JAX's `source_info`): every equation records the
user's line; transformations keep it; lowering writes it into StableHLO locations
(`lowering.source_locations`); `pretty_print(source_info=True)`, `check_jaxpr` errors and
errors raised while an interpreter re-binds an equation name it. Also: host callbacks that
raise inside programs over several devices (pmap, shard_map).

JAX is the oracle for the lines, columns and layouts."""
from __future__ import annotations

import re
import sys

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import core
from stagecraft.experimental import io_callback
from stagecraft.interpreters import lowering
from stagecraft.sharding import Mesh, PartitionSpec as P
from stagecraft.shard_map import shard_map
from stagecraft.source_info_util import NameStackInfo, named_scope

# NB: the same source lines serve JAX and stagecraft (the module `np_` is either numpy).


def _make(np_, scope, jit):
  def g(x):
    return np_.cos(x)

  def f(x):
    y = np_.sin(x) * 2.0
    with scope("blk"):
      z = g(y) + x
    w = jit(g)(z)
    return np_.tanh(
        w)
  return f


_F_SC = _make(jnp, named_scope, sc.jit)
_F_JAX = _make(jjnp, jax.named_scope, jax.jit)
_LINE0 = _make.__code__.co_firstlineno
X = np.linspace(0.1, 1.0, 3).astype(np.float32)


def _jax_frame(src):
  from jax._src import source_info_util as jsiu   # NB: the oracle's user frame
  return jsiu.user_frame(src.traceback)


def _where(src):
  frame = core.source_frame(src)
  return None if frame is None else (frame.line, frame.column, frame.function_name)


def test_every_equation_records_the_users_line_and_printing_is_unchanged():
  closed = sc.make_jaxpr(_F_SC)(X)
  got = [(e.primitive.name, _where(e.source_info)) for e in closed.jaxpr.eqns]
  want = [(e.primitive.name, (_jax_frame(e.source_info).start_line,
                              _jax_frame(e.source_info).start_column,
                              _jax_frame(e.source_info).function_name))
          for e in jax.make_jaxpr(_F_JAX)(X).jaxpr.eqns]
  assert got == want
  assert got[0] == ("sin", (_LINE0 + 5, 8, "_make.<locals>.f"))
  inner = closed.jaxpr.eqns[4].params["jaxpr"].jaxpr.eqns[0]
  assert _where(inner.source_info) == (_LINE0 + 2, 11, "_make.<locals>.g")
  # The scope's equations carry their names around the same frame.
  assert type(closed.jaxpr.eqns[2].source_info) is NameStackInfo
  assert closed.jaxpr.eqns[2].source_info.name_stack == ("blk",)
  # str() prints no source info (as JAX); the summary is JAX's.
  assert "#" not in str(closed) and __file__ not in str(closed)
  assert closed.jaxpr.eqns[0].source_info.summary() == f"{__file__}:{_LINE0 + 5}:8 (_make.<locals>.f)"


def _jax_debug_locs(text):
  """{(op name, line, col)} of JAX's `as_text(debug_info=True)` (its `#loc` aliases)."""
  defs = dict(re.findall(r"^(#loc\d*) = loc\((.*)\)$", text, re.M))

  def resolve(body):
    m = re.match(r'"([^"]*)"\((#loc\d*)\)$', body)
    name = m.group(1) if m else None
    ref = m.group(2) if m else None
    while ref is not None:
      body = defs[ref]
      fl = re.match(r'"[^"]*":(\d+):(\d+)', body)
      if fl:
        return name, int(fl.group(1)), int(fl.group(2))
      ref = re.search(r"(#loc\d*)", body).group(1)
    return None
  out = set()
  for ref in re.findall(r"stablehlo\.\w+ .* loc\((#loc\d*)\)$", text, re.M):
    r = resolve(defs[ref])
    if r is not None:
      out.add(r)
  return out


def _our_locs(text):
  return {(n, int(a), int(b)) for n, a, b in
          re.findall(r'stablehlo\.\w+ .* loc\("([^"]*)"\((?:callsite\()?"[^"]*"\("[^"]*":(\d+):(\d+)',
                     text)}


def test_lowered_locations_name_the_same_lines_as_jax():
  with lowering.source_locations():
    ours = sc.jit(_F_SC).lower(X).compiler_ir()
  theirs = jax.jit(_F_JAX).lower(X).as_text(debug_info=True)
  mine, jaxs = _our_locs(ours), _jax_debug_locs(theirs)
  # NB: main's ops (names of jit(f)/... without a nested jit; as JAX's, the ops of a called
  # function are named relative to it, `cos`).
  main = lambda s: {x for x in s if x[0].count("jit(") == 1 and "/" in x[0]}
  assert main(mine) == main(jaxs)
  assert ("jit(f)/blk/cos", _LINE0 + 2, 11) in mine
  assert ("jit(f)/tanh", _LINE0 + 9, 11) in mine
  # The op spelling, as JAX's: a NameLoc around the callsite chain of the user's frames,
  # each a NameLoc of the function around a FileLineColRange.
  assert (f'loc("jit(f)/sin"(callsite("_make.<locals>.f"("{__file__}":{_LINE0 + 5}:8 to :18)'
          f' at ') in ours
  # The multi-line call spans two lines (`to L:C`).
  assert f'":{_LINE0 + 9}:11 to {_LINE0 + 10}:10) at ' in ours
  # The text parses; locations are on by default (as JAX's), and with
  # source_locations(False) only the names remain.
  sc.jit(_F_SC).lower(X).compile()
  assert f'"{__file__}":{_LINE0 + 5}:8 to :18)' in sc.jit(_F_SC).lower(X).compiler_ir()
  with lowering.source_locations(False):
    plain = sc.jit(_F_SC).lower(X).compiler_ir()
  assert __file__ not in plain and 'loc("jit(f)/blk/cos")' in plain
  assert lowering.strip_locations(ours) == lowering.strip_locations(plain)
  assert "loc(" not in lowering.strip_locations(ours)


def test_located_module_compiles_and_runs():
  with lowering.source_locations():
    lo = sc.jit(_F_SC).lower(X)
  np.testing.assert_allclose(lo.compile()(X), jax.jit(_F_JAX)(X), rtol=1e-6)


def _lines(closed):
  return [(e.primitive.name, _where(e.source_info)[0]) for e in closed.jaxpr.eqns]


def _h(x):
  y = jnp.sin(x)
  return jnp.sum(y * x)


def _h_jax(x):
  y = jjnp.sin(x)
  return jjnp.sum(y * x)


_H0 = _h.__code__.co_firstlineno


def _jax_lines(closed):
  # NB: _h_jax sits 5 lines below _h.
  return [(e.primitive.name, _jax_frame(e.source_info).start_line - 5)
          for e in closed.jaxpr.eqns]


@pytest.mark.parametrize("transform", ["grad", "vmap", "jvp", "grad_of_jit", "vmap_of_jit"])
def test_transformations_keep_the_line_of_the_equation_they_came_from(transform):
  xs = np.ones((2, 3), np.float32)
  if transform == "grad":
    closed = sc.make_jaxpr(sc.grad(_h))(X)
    want = _jax_lines(jax.make_jaxpr(jax.grad(_h_jax))(X))
    assert [n for n, _ in _lines(closed)] == [n for n, _ in want]
    assert _lines(closed) == want
  elif transform == "vmap":
    assert _lines(sc.make_jaxpr(sc.vmap(_h))(xs)) == [
        ("sin", _H0 + 1), ("mul", _H0 + 2), ("reduce_sum", _H0 + 2)]
  elif transform == "jvp":
    closed = sc.make_jaxpr(lambda x: sc.jvp(_h, (x,), (x,)))(X)
    got = _lines(closed)
    assert ("cos", _H0 + 1) in got and all(ln in (_H0 + 1, _H0 + 2) for _, ln in got)
    # The tangent of sin (cos, mul) keeps sin's line, as in JAX.
    assert [ln for n, ln in got[:3]] == [_H0 + 1] * 3
  else:
    g = sc.jit(_h)
    if transform == "grad_of_jit":
      closed = sc.make_jaxpr(sc.grad(g))(X)
      bodies = [e.params["jaxpr"] for e in closed.jaxpr.eqns if e.primitive.name == "jit"]
      assert len(bodies) == 2
      fwd, bwd = (_lines(b) for b in bodies)
      assert fwd == [("sin", _H0 + 1), ("cos", _H0 + 1), ("mul", _H0 + 2),
                     ("reduce_sum", _H0 + 2)]
      # the transposed equations: broadcast (of reduce_sum), muls, then sin's tangent
      assert bwd == [("broadcast_in_dim", _H0 + 2), ("mul", _H0 + 2), ("mul", _H0 + 2),
                     ("mul", _H0 + 1), ("add_any", _H0 + 1)]
    else:
      closed = sc.make_jaxpr(sc.vmap(g))(xs)
      assert _lines(closed.jaxpr.eqns[0].params["jaxpr"]) == [
          ("sin", _H0 + 1), ("mul", _H0 + 2), ("reduce_sum", _H0 + 2)]


def _make_pp(lax_mod):
  def f(x):
    return lax_mod.cos(lax_mod.sin(x))
  return f


def test_pretty_print_source_info_matches_jax_layout():
  ours = sc.make_jaxpr(_make_pp(sc.lax))(1.0).pretty_print(source_info=True)
  theirs = jax.make_jaxpr(_make_pp(jax.lax))(1.0).pretty_print(source_info=True)
  assert ours == theirs
  assert ours.count("\n") == 1   # two notes on the one-line jaxpr: the second below
  closed = sc.make_jaxpr(_F_SC)(X)
  assert closed.pretty_print() == str(closed)
  annotated = closed.pretty_print(source_info=True, name_stack=True)
  assert "# [blk]" in annotated and f"{__file__}:{_LINE0 + 5}:8" in annotated
  # Without types, as JAX: `{ lambda ; a. let b = sin a; c = cos b in (c,) }`.
  ours = sc.make_jaxpr(_make_pp(sc.lax))(1.0).pretty_print(print_shapes=False)
  assert ours == jax.make_jaxpr(_make_pp(jax.lax))(1.0).pretty_print(print_shapes=False)
  assert ours == "{ lambda ; a. let b = sin a; c = cos b in (c,) }"


def test_check_jaxpr_error_names_the_equations_source():
  closed = sc.make_jaxpr(_h)(X)
  j = closed.jaxpr
  bad = j.eqns[1]._replace(outvars=[core.Var(core.ShapedArray((4,), np.dtype(np.float32)))])
  broken = j.replace(eqns=[j.eqns[0], bad, *j.eqns[2:]])
  with pytest.raises(core.JaxprTypeError, match=r"(?s)outvar has type f32\[4\].*from source: "
                     + re.escape(f"{__file__}:{_H0 + 2}")):
    core.check_jaxpr(broken)


def test_error_while_reevaluating_names_the_staged_line():
  closed = sc.make_jaxpr(lambda x: jnp.log(x) * 2)(X)
  line = sys._getframe().f_lineno - 1
  with sc.debug_nans(True):
    with pytest.raises(FloatingPointError, match=r"invalid value \(nan\) encountered in log") as e:
      core.jaxpr_as_fun(closed)(np.float32([-1.0, 1.0, 2.0]))
  assert any(f"test_source_info.py:{line}" in n for n in getattr(e.value, "__notes__", []))


def test_debug_nans_inside_jit_points_at_the_users_line():
  @sc.jit
  def f(x):
    y = jnp.sin(x)
    return jnp.log(y - 2.0)
  line = f.__wrapped__.__code__.co_firstlineno + 3 if hasattr(f, "__wrapped__") else None
  with sc.debug_nans(True):
    with pytest.raises(FloatingPointError, match=r"invalid value \(nan\) encountered in log") as e:
      f(1.0)
  frames = [(fr.filename, fr.lineno) for fr in __import__("traceback").extract_tb(e.value.__traceback__)]
  assert any(fn == __file__ and "jnp.log(y - 2.0)" in (__import__("linecache").getline(fn, ln))
             for fn, ln in frames)
  del line


def test_transposition_error_notes_the_forward_line():
  @sc.custom_vjp
  def c(x):
    return x * 2

  def fwd(x):
    return c(x), None

  def bwd(res, g):
    raise ValueError("bwd failed")
  c.defvjp(fwd, bwd)

  def loss(x):
    return jnp.sum(c(x))
  with pytest.raises(ValueError, match="bwd failed"):
    sc.grad(loss)(X)


def test_every_eqn_of_a_long_trace_records_a_frame_quickly():
  def chain(x):
    for i in range(200):
      x = jnp.sin(x) if i % 2 else x * 1.5
    return x
  closed = sc.make_jaxpr(chain)(X)
  assert len(closed.jaxpr.eqns) == 200
  lines = {_where(e.source_info)[0] for e in closed.jaxpr.eqns}
  assert lines == {chain.__code__.co_firstlineno + 2}


# ---------------------------------------------------------------------------
# Host callbacks in programs over several devices


def _mesh():
  return Mesh(np.array(sc.devices()[:4]), ("i",))


@pytest.mark.parametrize("kind", ["pmap", "shard_map", "shard_map_jit"])
def test_callback_exception_on_several_devices_names_it_and_runtime_survives(kind):
  if len(sc.devices()) < 4:
    pytest.skip("needs 4 devices")
  calls = []

  def bad(a):
    calls.append(1)
    raise ZeroDivisionError("boom on a device")

  def f(x):
    return sc.pure_callback(bad, sc.ShapeDtypeStruct(x.shape, x.dtype), x)
  x = np.ones((4, 3), np.float32)
  if kind == "pmap":
    run = lambda: sc.pmap(f)(x)
  elif kind == "shard_map":
    run = lambda: shard_map(f, mesh=_mesh(), in_specs=P("i"), out_specs=P("i"))(x)
  else:
    run = lambda: sc.jit(shard_map(f, mesh=_mesh(), in_specs=P("i"), out_specs=P("i")))(x)
  for _ in range(2):   # and again: no error of the first call leaks into the second
    with pytest.raises(RuntimeError, match="bad raised ZeroDivisionError: boom on a device") as e:
      run()
    assert isinstance(e.value, jax.errors.JaxRuntimeError)
    assert isinstance(e.value.__cause__, ZeroDivisionError)
  assert calls
  np.testing.assert_allclose(sc.pmap(lambda v: v + 1)(x), x + 1)
  np.testing.assert_allclose(
      sc.jit(shard_map(lambda v: v * 2, mesh=_mesh(), in_specs=P("i"), out_specs=P("i")))(x),
      x * 2)


def test_ordered_io_callback_in_pmap_chained_calls_arrive_per_call_in_order():
  if len(sc.devices()) < 4:
    pytest.skip("needs 4 devices")
  seen = []

  def rec(v):
    seen.append(float(np.asarray(v).reshape(-1)[0]))
    return v

  def step(v):
    io_callback(rec, sc.ShapeDtypeStruct(v.shape, v.dtype), v, ordered=True)
    return v + 1
  p = sc.pmap(step)
  v = np.zeros((4, 1), np.float32)
  for _ in range(10):   # chained, never blocked on
    v = p(v)
  # Each call's four device calls come before the next call's (JAX allows ordered effects
  # in pmap too; its calls run asynchronously).
  assert len(seen) == 40
  assert [seen[4 * k:4 * k + 4] for k in range(10)] == [[float(k)] * 4 for k in range(10)]
  np.testing.assert_allclose(np.asarray(v), 10.0)
