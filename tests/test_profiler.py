"""stagecraft.profiler: traces hold the annotations, memory profiles are gzip'd pprof, and the
API matches jax.profiler's names and signatures."""
import functools
import gzip
import inspect
import json
import pathlib
import re

import jax
import numpy as np
import pytest

import stagecraft
import stagecraft.numpy as jnp
from stagecraft import profiler


def _run_files(log_dir) -> list[pathlib.Path]:
  return sorted(pathlib.Path(log_dir).glob("plugins/profile/*/*"))


def test_api_matches_jax():
  assert set(profiler.__all__) == {n for n in dir(jax.profiler) if not n.startswith("_")}
  for name in ["trace", "start_trace", "stop_trace", "start_server", "annotate_function",
               "device_memory_profile", "save_device_memory_profile", "register_subprocess"]:
    ours = inspect.signature(getattr(profiler, name))
    theirs = inspect.signature(getattr(jax.profiler, name))
    assert list(ours.parameters) == list(theirs.parameters), name
    assert [p.default for p in ours.parameters.values()] == \
        [p.default for p in theirs.parameters.values()], name


def test_trace_holds_annotations(tmp_path):
  f = stagecraft.jit(lambda x: jnp.sin(x) @ x)

  @profiler.annotate_function
  def annotated_fn(x):
    return f(x).block_until_ready()

  x = jnp.ones((64, 64))
  f(x).block_until_ready()
  with profiler.trace(tmp_path):
    with profiler.TraceAnnotation("sc_outer_annotation", tag=7):
      annotated_fn(x)
    for step in range(2):
      with profiler.StepTraceAnnotation("sc_train", step_num=step):
        f(x).block_until_ready()
  files = _run_files(tmp_path)
  xplane = [p for p in files if p.name.endswith(".xplane.pb")]
  tracejson = [p for p in files if p.name.endswith(".trace.json.gz")]
  assert len(xplane) == 1 and len(tracejson) == 1
  raw = xplane[0].read_bytes()
  for name in [b"sc_outer_annotation", b"annotated_fn", b"sc_train"]:
    assert name in raw, name
  events = json.loads(gzip.decompress(tracejson[0].read_bytes()))["traceEvents"]
  names = {e.get("name") for e in events}
  assert {"sc_outer_annotation", "sc_train"} <= names
  assert any(n and "annotated_fn" in n for n in names)
  # The collected XSpace reads back with ProfileData.
  data = profiler.ProfileData.from_file(str(xplane[0]))
  plane_names = [p.name for p in data.planes]
  assert any("Host" in n or "CPU" in n for n in plane_names), plane_names
  events = [ev.name for p in data.planes for line in p.lines for ev in line.events]
  assert "sc_outer_annotation" in events


def test_start_stop_and_errors(tmp_path):
  with pytest.raises(RuntimeError, match="No profile started"):
    profiler.stop_trace()
  profiler.start_trace(str(tmp_path / "a"))
  try:
    with pytest.raises(RuntimeError, match="Profile has already been started"):
      profiler.start_trace(str(tmp_path / "b"))
  finally:
    profiler.stop_trace()
  assert _run_files(tmp_path / "a")
  # The context manager stops the trace when its body raises.
  with pytest.raises(ZeroDivisionError):
    with profiler.trace(tmp_path / "c"):
      1 / 0
  assert _run_files(tmp_path / "c")
  profiler.start_trace(tmp_path / "d")   # usable again
  profiler.stop_trace()


def test_perfetto_trace_file(tmp_path):
  with profiler.trace(tmp_path, create_perfetto_trace=True):
    with profiler.TraceAnnotation("sc_perfetto_event"):
      (jnp.ones(8) + 1).block_until_ready()
  out = [p for p in _run_files(tmp_path) if p.name == "perfetto_trace.json.gz"]
  assert len(out) == 1
  data = json.loads(gzip.decompress(out[0].read_bytes()))
  assert "metadata" not in data
  assert any(e.get("name") == "sc_perfetto_event" for e in data["traceEvents"])


def test_annotate_function_name_and_kwargs():
  def plain(a, b=2):
    """doc"""
    return a + b

  wrapped = profiler.annotate_function(plain)
  assert wrapped(1) == 3 and wrapped.__name__ == "plain" and wrapped.__doc__ == "doc"
  named = functools.partial(profiler.annotate_function, name="evt", k=1)(plain)
  assert named(1, b=5) == 6
  assert issubclass(profiler.StepTraceAnnotation, profiler.TraceAnnotation)


def test_device_memory_profile(tmp_path):
  keep = jnp.arange(12345, dtype=jnp.float32)
  prof = profiler.device_memory_profile()
  assert prof[:2] == b"\x1f\x8b"   # gzip
  raw = gzip.decompress(prof)
  assert raw
  # A pprof Profile: its string table names the sample types and the buffers' kind.
  strings = set(re.findall(rb"[ -~]{4,}", raw))
  assert any(s.startswith(b"space") for s in strings)
  assert any(s.startswith(b"bytes") for s in strings)
  assert any(b"buffer" in s for s in strings)
  assert gzip.decompress(profiler.device_memory_profile("cpu"))
  path = tmp_path / "mem.prof"
  profiler.save_device_memory_profile(path)
  assert gzip.decompress(path.read_bytes())
  del keep


def test_server_start_stop():
  with pytest.raises(ValueError, match="No active profiler server"):
    profiler.stop_server()
  import socket
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  server = profiler.start_server(port)
  try:
    assert server is not None
    with pytest.raises(ValueError, match="Only one profiler server"):
      profiler.start_server(port + 1)
  finally:
    profiler.stop_server()
  with pytest.raises(ValueError, match="No active profiler server"):
    profiler.stop_server()


def test_options_type():
  opts = profiler.ProfileOptions()
  opts.python_tracer_level = 0
  assert isinstance(opts, jax.profiler.ProfileOptions.__mro__[1])
  assert np.issubdtype(type(opts.host_tracer_level), np.integer)
