"""`stagecraft.profiler` (JAX's `jax.profiler`): traces for TensorBoard/Perfetto, trace
annotations, the profiler server and device memory profiles.

Everything here drives the XLA runtime's profiler (`jaxlib._profiler`, allowed as runtime by
DESIGN.md): a `ProfilerSession` collects host (Python and runtime) and device activity and
writes `<log_dir>/plugins/profile/<run>/<host>.xplane.pb` and `<host>.trace.json.gz`, the
files TensorBoard's profile plugin and Perfetto read. `TraceAnnotation` and
`StepTraceAnnotation` are the runtime's `TraceMe` events; they cost almost nothing while no
trace is running.
"""
from __future__ import annotations

import contextlib
import functools
import gzip
import http.server
import json
import logging
import os
import pathlib
import socketserver
import threading
from typing import Any, Callable

from jaxlib import _profile_data, _profiler
from jaxlib import version as _jaxlib_version

from stagecraft.runtime import client

__all__ = ["ProfileData", "ProfileEvent", "ProfileOptions", "ProfilePlane",
           "StepTraceAnnotation", "TraceAnnotation", "annotate_function",
           "device_memory_profile", "register_subprocess", "save_device_memory_profile",
           "start_server", "start_trace", "stop_server", "stop_trace", "trace"]

logger = logging.getLogger(__name__)

#: A collected profile (an XSpace) read from memory or a `.xplane.pb` file: `planes`,
#: `find_plane_with_name(name)`; each plane's `lines` hold `ProfileEvent`s.
ProfileData = _profile_data.ProfileData
ProfileEvent = _profile_data.ProfileEvent
ProfilePlane = _profile_data.ProfilePlane


class ProfileOptions(_profiler.ProfileOptions):
  """What a trace collects (`host_tracer_level`, `python_tracer_level`,
  `enable_hlo_proto`, `duration_ms`, ...), the runtime's profiler options."""


# ---------------------------------------------------------------------------
# The profiler server


class _ServerState:
  server: Any = None


_server = _ServerState()


def start_server(port: int, requires_backend: bool = True):
  """Starts the profiler server on `port`, to which TensorBoard's profiler (2.2 or newer)
  connects to capture traces on demand.

  Args:
    port: the TCP port.
    requires_backend: start the default backend first (so that its devices are traced).

  Returns:
    The runtime's `ProfilerServer` object.

  Raises:
    ValueError: if a server is already running.
  """
  if _server.server is not None:
    raise ValueError("Only one profiler server can be active at a time.")
  if requires_backend:
    client.get_backend()
  _server.server = _profiler.start_server(port)
  return _server.server


def stop_server() -> None:
  """Stops the profiler server.

  Raises:
    ValueError: if none is running.
  """
  if _server.server is None:
    raise ValueError("No active profiler server.")
  _server.server = None   # NB: dropping the last reference shuts the runtime's server down


def register_subprocess(pid: int, port: int) -> Callable[[], None]:
  """Profiles the profiler server of the subprocess `pid` (listening on `port`) along with
  this process; returns a function that unregisters it (also run when it is collected).

  Raises:
    RuntimeError: if the subprocess cannot be registered.
  """
  return _profiler.register_subprocess(pid, port)


# ---------------------------------------------------------------------------
# Traces


class _TraceState:
  def __init__(self):
    self.lock = threading.Lock()
    self.reset()

  def reset(self):
    self.session = None
    self.log_dir: str | None = None
    self.perfetto_trace = False
    self.perfetto_link = False


_trace_state = _TraceState()


def _set_metadata() -> None:
  _profiler.clear_metadata()
  _profiler.set_metadata("jaxlib_version", _jaxlib_version.__version__)
  backend = client.get_backend()
  _profiler.set_metadata(f"{backend.platform}_version", backend.platform_version)


def start_trace(log_dir: os.PathLike | str, create_perfetto_link: bool = False,
                create_perfetto_trace: bool = False,
                profiler_options: ProfileOptions | None = None) -> None:
  """Starts collecting a profiler trace (host, Python and device activity); `stop_trace`
  writes it under `log_dir` (`plugins/profile/<run>/`), where TensorBoard finds it.

  Args:
    log_dir: the directory to write to (usually a TensorBoard log directory).
    create_perfetto_link: at `stop_trace`, also write `perfetto_trace.json.gz`, serve it
      on `127.0.0.1:9001` and print a https://ui.perfetto.dev link to it; `stop_trace`
      blocks until the Perfetto UI has loaded the file.
    create_perfetto_trace: at `stop_trace`, also write `perfetto_trace.json.gz` (the trace
      in the Chrome JSON format without its metadata, which Perfetto rejects).
    profiler_options: what to collect (default: `ProfileOptions()`).

  Raises:
    RuntimeError: if a trace is already running.
  """
  with _trace_state.lock:
    if _trace_state.session is not None:
      raise RuntimeError("Profile has already been started. Only one profile may be run at "
                         "a time.")
    # NB: start the backend before the session, so that its device tracers are registered.
    _set_metadata()
    options = profiler_options if profiler_options is not None else ProfileOptions()
    _trace_state.session = _profiler.ProfilerSession(options)
    _trace_state.log_dir = str(log_dir)
    _trace_state.perfetto_link = bool(create_perfetto_link)
    _trace_state.perfetto_trace = bool(create_perfetto_trace or create_perfetto_link)


def stop_trace() -> None:
  """Stops the running trace and writes it to the `log_dir` given to `start_trace`.

  Raises:
    RuntimeError: if no trace is running.
  """
  with _trace_state.lock:
    session = _trace_state.session
    if session is None:
      raise RuntimeError("No profile started")
    log_dir = _trace_state.log_dir
    perfetto_trace, perfetto_link = _trace_state.perfetto_trace, _trace_state.perfetto_link
    try:
      session.stop_and_export(log_dir)
    finally:
      _trace_state.reset()
      _profiler.clear_metadata()
    if perfetto_trace:
      path = _write_perfetto_trace(log_dir)
      if perfetto_link:
        _serve_perfetto_trace(path)


@contextlib.contextmanager
def trace(log_dir: os.PathLike | str, create_perfetto_link: bool = False,
          create_perfetto_trace: bool = False,
          profiler_options: ProfileOptions | None = None):
  """A context manager that collects a profiler trace of its body into `log_dir`
  (`start_trace` on entry, `stop_trace` on exit, also when the body raises).

  Raises:
    RuntimeError: if a trace is already running.
  """
  start_trace(log_dir, create_perfetto_link, create_perfetto_trace, profiler_options)
  try:
    yield
  finally:
    stop_trace()


def _latest_run(log_dir: str) -> pathlib.Path:
  runs = [p for p in (pathlib.Path(log_dir).absolute() / "plugins" / "profile").iterdir()
          if p.is_dir()]
  return max(runs, key=os.path.getmtime)


def _write_perfetto_trace(log_dir: str) -> pathlib.Path:
  """Writes `perfetto_trace.json.gz` beside the latest run's `*.trace.json.gz`."""
  run = _latest_run(log_dir)
  found = sorted(run.glob("*.trace.json.gz"))
  if len(found) != 1:
    raise ValueError(f"Invalid trace folder: {run}")
  with gzip.open(found[0], "rb") as f:
    data = json.load(f)
  data.pop("metadata", None)   # NB: Perfetto refuses the trace with its metadata
  out = run / "perfetto_trace.json.gz"
  with gzip.open(out, "wb") as f:
    f.write(json.dumps(data).encode("utf-8"))
  return out


_PERFETTO_PORT = 9001


def _serve_perfetto_trace(path: pathlib.Path) -> None:
  """Serves `path` on 127.0.0.1:9001 (where ui.perfetto.dev fetches traces from), prints
  the link and returns once the file has been fetched."""
  directory, name = str(path.parent), path.name
  fetched = threading.Event()

  class Handler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *args, **kwargs):
      super().__init__(*args, directory=directory, **kwargs)

    def end_headers(self):
      self.send_header("Access-Control-Allow-Origin", "*")
      super().end_headers()

    def do_GET(self):
      super().do_GET()
      if self.path == "/" + name:
        fetched.set()

    def do_POST(self):
      self.send_error(404, "File not found")

    def log_message(self, *args):
      pass

  class Server(socketserver.TCPServer):
    allow_reuse_address = True

  with Server(("127.0.0.1", _PERFETTO_PORT), Handler) as httpd:
    print(f"Open URL in browser: https://ui.perfetto.dev/#!/?url=http://127.0.0.1:"
          f"{_PERFETTO_PORT}/{name}")
    while not fetched.is_set():
      httpd.handle_request()


# ---------------------------------------------------------------------------
# Annotations


class TraceAnnotation(_profiler.TraceMe):
  """A context manager that records an event named `name` (with keyword arguments as its
  metadata, `name#k=v#`) spanning its body, when a trace is running.

  Examples:
    >>> import stagecraft.numpy as jnp
    >>> with TraceAnnotation("my_label"):
    ...   _ = (jnp.ones(3) * 2).block_until_ready()
  """


class StepTraceAnnotation(TraceAnnotation):
  """A `TraceAnnotation` that marks one step (e.g. of training): TensorBoard's profiler
  analyses the trace per step. Pass the step as `step_num=`.

  Examples:
    >>> for step in range(2):
    ...   with StepTraceAnnotation("train", step_num=step):
    ...     pass
  """

  def __init__(self, name: str, **kwargs):
    super().__init__(name, _r=1, **kwargs)


def annotate_function(func: Callable, name: str | None = None, **decorator_kwargs):
  """Wraps `func` so that each call is a trace event named `name` (default: its
  `__qualname__`), with `decorator_kwargs` as the event's metadata.

  Use as `@annotate_function` or `@functools.partial(annotate_function, name=...)`.
  """
  name = name or getattr(func, "__qualname__", None) or func.__name__

  @functools.wraps(func)
  def wrapper(*args, **kwargs):
    with TraceAnnotation(name, **decorator_kwargs):
      return func(*args, **kwargs)
  return wrapper


# ---------------------------------------------------------------------------
# Device memory profiles


def device_memory_profile(backend: str | None = None) -> bytes:
  """A snapshot of the device memory held by live arrays and executables, with the Python
  stack of each allocation, as a gzip-compressed `pprof` protocol buffer
  (`pprof --web file.prof`).

  Args:
    backend: `'cpu'`, `'gpu'`, ...; None: the default backend.

  Returns:
    The gzip-compressed pprof `Profile` bytes.
  """
  return gzip.compress(client.get_backend(backend).heap_profile())


def save_device_memory_profile(filename: os.PathLike | str, backend: str | None = None) -> None:
  """Writes `device_memory_profile(backend)` to `filename`."""
  profile = device_memory_profile(backend)
  with open(filename, "wb") as f:
    f.write(profile)
