"""`stagecraft.monitoring` (JAX's `jax.monitoring`): listeners see the events of a jit's trace,
lowering and compilation, and of the persistent compilation cache, with JAX's names and
metadata, in JAX's order; registration errors."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp
from stagecraft import monitoring


def _record(mon):
  """Registers one listener of each kind on `mon`; returns the list they append to."""
  seen = []
  mon.register_event_listener(lambda e, **k: seen.append(("event", e, k)))
  mon.register_event_duration_secs_listener(lambda e, d, **k: seen.append(("duration", e, k)))
  mon.register_event_time_span_listener(lambda e, s, t, **k: seen.append(("span", e, k)))
  mon.register_scalar_listener(lambda e, v, **k: seen.append(("scalar", e, k)))
  return seen


@pytest.fixture
def listeners():
  yield
  monitoring.clear_event_listeners()
  jax.monitoring.clear_event_listeners()


def _compile_events(lib, np_mod, fun_name_suffix):
  seen = _record(lib.monitoring)
  def scaled_sine(x):
    return np_mod.sin(x) * 2 + fun_name_suffix
  lib.jit(scaled_sine)(1.0).block_until_ready()
  first = list(seen)
  seen.clear()
  lib.jit(scaled_sine)(1.0).block_until_ready()    # cached: no events
  # JAX's persistent-cache bookkeeping events (recorded even with no cache directory) are
  # not stagecraft's to copy: compare the compile stages.
  return [e for e in first if not e[1].startswith("/jax/compilation_cache/")], list(seen)


def test_jit_compile_events_match_jax(listeners):
  ours, ours_again = _compile_events(sc, snp, 0.25)
  theirs, theirs_again = _compile_events(jax, jnp, 0.25)
  assert ours == theirs
  assert [e[1] for e in ours][::3] == [
      "/jax/core/compile/jaxpr_trace_duration",
      "/jax/core/compile/jaxpr_to_mlir_module_duration",
      "/jax/core/compile/backend_compile_duration"]
  assert ours[0][2] == {"fun_name": "scaled_sine"}
  assert ours[-1][2] == {"fun_name": "jit(scaled_sine)"}
  assert ours_again == theirs_again == []


def test_durations_and_spans_are_seconds(listeners):
  x = snp.ones((64, 64))
  got = []
  monitoring.register_event_duration_secs_listener(lambda e, d, **k: got.append((e, d)))
  spans = []
  monitoring.register_event_time_span_listener(lambda e, s, t, **k: spans.append((s, t)))
  sc.jit(lambda x: snp.tanh(x) + 1)(x).block_until_ready()
  assert len(got) == 3 and all(0 <= d < 60 for _, d in got)
  assert all(s <= t for s, t in spans)
  for (_, d), (s, t) in zip(got, spans):
    assert t - s == pytest.approx(d, abs=1e-6)


def test_counting_compiles_with_a_listener(listeners):
  compiles = []
  def on_duration(event, duration, **kw):
    if event == "/jax/core/compile/backend_compile_duration":
      compiles.append(kw["fun_name"])
  monitoring.register_event_duration_secs_listener(on_duration)
  f = sc.jit(lambda x: x * 3)
  a, b = np.ones(3, np.float32), np.ones(4, np.float32)
  f(a); f(a); f(b)
  assert compiles == ["jit(<lambda>)", "jit(<lambda>)"]
  monitoring.unregister_event_duration_listener(on_duration)
  f(np.ones(5, np.float32))
  assert len(compiles) == 2


def _cache_events(lib, tmp_path, value):
  events = []
  lib.monitoring.register_event_listener(lambda e, **k: events.append(e))
  old = (lib.config.jax_compilation_cache_dir,
         lib.config.jax_persistent_cache_min_compile_time_secs)
  lib.config.update("jax_compilation_cache_dir", str(tmp_path))
  lib.config.update("jax_persistent_cache_min_compile_time_secs", 0)
  try:
    fn = lambda x: x * value + 1
    lib.jit(fn)(1.0).block_until_ready()
    first = [e for e in events if e != "/jax/compilation_cache/tasks_using_cache"]
    events.clear()
    lib.clear_caches()
    lib.jit(fn)(1.0).block_until_ready()
    return first, list(events)
  finally:
    lib.config.update("jax_compilation_cache_dir", old[0])
    lib.config.update("jax_persistent_cache_min_compile_time_secs", old[1])
    lib.monitoring.clear_event_listeners()


def test_persistent_cache_events_match_jax(listeners, tmp_path):
  ours = _cache_events(sc, tmp_path / "sc", 3.5)
  theirs = _cache_events(jax, tmp_path / "jax", 3.5)
  assert ours == theirs
  assert ours == (["/jax/compilation_cache/compile_requests_use_cache",
                   "/jax/compilation_cache/cache_misses"],
                  ["/jax/compilation_cache/compile_requests_use_cache",
                   "/jax/compilation_cache/cache_hits"])


def test_record_calls_listeners_in_order_with_metadata(listeners):
  seen = _record(monitoring)
  monitoring.record_event("/my/event", step=3, tag="a")
  monitoring.record_event_duration_secs("/my/duration", 0.5, tag="b")
  monitoring.record_event_time_span("/my/span", 1.0, 2.0)
  monitoring.record_scalar("/my/scalar", 7)
  assert seen == [("event", "/my/event", {"step": 3, "tag": "a"}),
                  ("duration", "/my/duration", {"tag": "b"}),
                  ("span", "/my/span", {}), ("scalar", "/my/scalar", {})]
  monitoring.clear_event_listeners()
  monitoring.record_event("/my/event")
  assert len(seen) == 4


def test_registration_errors(listeners):
  def listener(event, **kw):
    pass
  for lib in (monitoring, jax.monitoring):
    with pytest.raises(AssertionError):
      lib.unregister_event_listener(listener)
  with pytest.raises(AssertionError, match="not a registered listener"):
    monitoring.unregister_scalar_listener(listener)
  with pytest.raises(TypeError, match="listener must be callable, got int"):
    monitoring.register_event_listener(3)


def test_listener_exceptions_propagate(listeners):
  def bad(event, duration, **kw):
    raise RuntimeError("listener failed")
  monitoring.register_event_duration_secs_listener(bad)
  with pytest.raises(RuntimeError, match="listener failed"):
    sc.jit(lambda x: x - 7)(1.0)
